//! The results of the leaf calls, checked and folded into the checksum printed on stdout.
//!
//! Every leaf call computes a value from an input in `0..SLOTS` alone, so the values are the
//! same in every thread, at every run, with or without a profiler. Each thread records the
//! value for each input and checks that later calls with the same input agree; the main thread
//! merges the threads' tables, computes any input no thread reached, and prints a digest that
//! depends on the computations only (not on timing, thread count or run length).

use crate::phases::{Phase, PHASES};

/// Distinct inputs per phase.
pub const SLOTS: usize = 16;

/// One thread's (or the merged) table of leaf results.
#[derive(Clone, Debug, Default)]
pub struct Results {
    values: [[Option<u64>; SLOTS]; PHASES.len()],
    /// Descriptions of results that disagreed with an earlier one for the same input.
    mismatches: Vec<String>,
}

impl Results {
    /// Records `value` for `phase`'s `input` (taken modulo [`SLOTS`]), noting a mismatch if
    /// a different value was recorded for it before.
    pub fn record(&mut self, phase: Phase, input: u64, value: u64) {
        let slot = &mut self.values[phase.index()][(input % SLOTS as u64) as usize];
        match *slot {
            None => *slot = Some(value),
            Some(earlier) if earlier == value => {}
            Some(earlier) => self.mismatches.push(format!(
                "{} input {input}: {value:#x} after {earlier:#x}",
                phase.name()
            )),
        }
    }

    /// Adds another table's values and mismatches to this one, checking that they agree.
    pub fn merge(&mut self, other: &Results) {
        for phase in PHASES {
            for (input, value) in other.values[phase.index()].iter().enumerate() {
                if let Some(value) = *value {
                    self.record(phase, input as u64, value);
                }
            }
        }
        self.mismatches.extend(other.mismatches.iter().cloned());
    }

    /// Computes with `compute` every input no call reached; returns how many there were.
    pub fn fill_missing(&mut self, mut compute: impl FnMut(Phase, u64) -> u64) -> usize {
        let mut filled = 0;
        for phase in PHASES {
            for input in 0..SLOTS {
                if self.values[phase.index()][input].is_none() {
                    self.values[phase.index()][input] = Some(compute(phase, input as u64));
                    filled += 1;
                }
            }
        }
        filled
    }

    /// Results that disagreed with earlier ones (empty when all is well).
    pub fn mismatches(&self) -> &[String] {
        &self.mismatches
    }

    /// A digest of every recorded value (FNV-1a over their bytes); missing values count as 0.
    pub fn digest(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for row in &self.values {
            for value in row {
                for byte in value.unwrap_or(0).to_le_bytes() {
                    h = (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
                }
            }
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_merges_and_catches_mismatches() {
        let mut a = Results::default();
        a.record(Phase::Sort, 3, 30);
        a.record(Phase::Sort, 3 + SLOTS as u64, 30);
        let mut b = Results::default();
        b.record(Phase::Sort, 3, 30);
        b.record(Phase::Checksum, 1, 10);
        a.merge(&b);
        assert!(a.mismatches().is_empty());
        let mut c = a.clone();
        assert_eq!(c.fill_missing(|_, input| input), PHASES.len() * SLOTS - 2);
        assert_ne!(c.digest(), a.digest());
        b.record(Phase::Checksum, 1, 11);
        assert_eq!(b.mismatches().len(), 1);
    }
}
