//! Continuous profiling (`--period`): a profile of each window of the run rather than one of
//! the whole run, for services that run for days.
//!
//! The collector cuts a period ([`crate::collect::Collector::cut_period`]), which empties its
//! stacks and totals, so its memory is one period's distinct stacks however long the run; the
//! [`Symbolizer`](crate::symbolize::Symbolizer) is kept from one period to the next (each
//! address named once, its cache bounded by
//! [`FRAMES_CACHED`](crate::symbolize::FRAMES_CACHED)). Each period's profile is written as a
//! pprof file to a directory that keeps the newest few ([`PeriodFiles`]), and handed to the
//! exporter's queue ([`crate::export::Delivery`]).

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::collect::thread_cpu;
use crate::profile::Profile;

/// What a continuous run did with its periods, for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeriodCounts {
    /// The period's length.
    pub every: std::time::Duration,
    /// Where the period files are written.
    pub directory: String,
    /// Periods cut.
    pub cut: u64,
    /// Of them, periods without a sample (written, not exported: nothing to say).
    pub empty: u64,
    /// Period files written.
    pub written: u64,
    /// Period files that could not be written (the first error is in `file_error`).
    pub not_written: u64,
    /// The first error writing a period file.
    pub file_error: Option<String>,
    /// Times the symbolizer's cache was emptied for holding too many addresses.
    pub symbol_cache_resets: u64,
    /// CPU time cutting the periods: draining once more, symbolizing, building the profiles.
    pub cut_cpu: std::time::Duration,
    /// CPU time writing the period files (pprof encoding and compression included).
    pub files_cpu: std::time::Duration,
    /// The export's figures, when exporting.
    pub export: Option<crate::export::DeliveryCounts>,
}

/// How long the queue of periods waiting for the collector reaches back: a collector away
/// this long loses nothing.
pub const QUEUED: std::time::Duration = std::time::Duration::from_secs(300);

/// A continuous run's periods: when the next is due, and what is done with each (written to
/// [`PeriodFiles`], delivered through a [`Delivery`](crate::export::Delivery)).
pub struct Periods {
    every: std::time::Duration,
    next: std::time::Instant,
    files: Option<PeriodFiles>,
    delivery: Option<crate::export::Delivery>,
    counts: PeriodCounts,
}

impl Periods {
    /// Periods of `every`, written to `output/STEM-periods` if an output directory is given
    /// (keeping `keep`, with `mode`) and exported to `export` if given (at most [`QUEUED`] of
    /// them queued).
    pub fn start(
        every: std::time::Duration,
        output: Option<&Path>,
        stem: &str,
        keep: usize,
        mode: u32,
        export: Option<crate::export::Export>,
    ) -> io::Result<Periods> {
        let files = output
            .map(|o| PeriodFiles::open(o, stem, keep, mode))
            .transpose()?;
        let capacity = QUEUED.as_millis().div_ceil(every.as_millis().max(1)).max(2) as usize;
        let delivery = export
            .map(|e| crate::export::Delivery::start(e, capacity))
            .transpose()?;
        Ok(Periods {
            every,
            next: std::time::Instant::now() + every,
            counts: PeriodCounts {
                every,
                directory: files
                    .as_ref()
                    .map(|f| f.dir().display().to_string())
                    .unwrap_or_default(),
                ..PeriodCounts::default()
            },
            files,
            delivery,
        })
    }

    /// Whether the current period has ended.
    pub fn due(&self) -> bool {
        std::time::Instant::now() >= self.next
    }

    /// Cuts a period with `cut` (`None`: no process had a record), writes it and queues it for
    /// the collector (if it has samples), and schedules the next; returns it.
    pub fn take(&mut self, cut: impl FnOnce() -> Option<Profile>) -> Option<Profile> {
        let cpu = thread_cpu();
        let profile = cut();
        self.counts.cut_cpu += thread_cpu().saturating_sub(cpu);
        let now = std::time::Instant::now();
        // A late cut (a long symbolization) does not make the next one early.
        self.next = (self.next + self.every).max(now + self.every / 2);
        let profile = profile?;
        self.counts.cut += 1;
        let cpu = thread_cpu();
        if let Some(files) = &mut self.files {
            match files.write(&profile, self.counts.cut) {
                Ok(_) => self.counts.written += 1,
                Err(e) => {
                    self.counts.not_written += 1;
                    self.counts.file_error.get_or_insert_with(|| e.to_string());
                }
            }
        }
        self.counts.files_cpu += thread_cpu().saturating_sub(cpu);
        if profile.totals.is_empty() {
            self.counts.empty += 1;
        } else if let Some(d) = &self.delivery {
            d.deliver(&profile);
        }
        Some(profile)
    }

    /// Where the periods are exported, if they are.
    pub fn export(&self) -> Option<&crate::export::Export> {
        self.delivery.as_ref().map(crate::export::Delivery::export)
    }

    /// Delivers what is still queued (trying for at most `within`), and says what was done.
    pub fn finish(mut self, within: std::time::Duration, symbol_cache_resets: u64) -> PeriodCounts {
        self.counts.symbol_cache_resets = symbol_cache_resets;
        self.counts.export = self.delivery.take().map(|d| d.finish(within));
        self.counts
    }
}

/// The directory of period files: `STEM-periods/` in the output directory, one
/// `YYYYMMDDTHHMMSSZ-NNNNNN.pb.gz` (the period's start in UTC, its number in the run) per
/// period; the newest `keep` are kept, those of earlier runs counted among them.
pub struct PeriodFiles {
    dir: PathBuf,
    keep: usize,
    mode: u32,
    /// The files there, oldest first (names sort by time).
    present: VecDeque<String>,
}

/// Whether `name` is a period file's name (its CPU profile's: a heap profile beside it is
/// `...-NNNNNN.heap.pb.gz`, removed with it).
fn is_period_file(name: &str) -> bool {
    name.len() > 24
        && name.ends_with(".pb.gz")
        && !name.ends_with(".heap.pb.gz")
        && !name.starts_with('.')
        && name.as_bytes()[8] == b'T'
        && name.as_bytes()[15] == b'Z'
}

impl PeriodFiles {
    /// The directory `output/STEM-periods`, created if needed and checked as the output
    /// directory is ([`crate::output::check_directory`]).
    pub fn open(output: &Path, stem: &str, keep: usize, mode: u32) -> io::Result<PeriodFiles> {
        let dir = output.join(format!("{stem}-periods"));
        crate::output::check_directory(&dir)?;
        let mut present: Vec<String> = std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| is_period_file(n))
            .collect();
        present.sort();
        Ok(PeriodFiles {
            dir,
            keep: keep.max(1),
            mode,
            present: present.into(),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes period number `number`'s profile (and beside it, with allocations sampled, its
    /// heap profile: what was allocated in the period, what is live at its end), then removes
    /// the oldest periods' files past the count kept; returns the CPU profile's path.
    pub fn write(&mut self, profile: &Profile, number: u64) -> io::Result<PathBuf> {
        let name = format!("{}-{number:06}.pb.gz", utc_stamp(profile.start));
        crate::output::write_one(&self.dir, &name, self.mode, &|w| {
            crate::output::pprof::write(profile, w)
        })?;
        if profile.heap.is_some() {
            crate::output::write_one(&self.dir, &heap_name(&name), self.mode, &|w| {
                crate::output::pprof::write_heap(profile, w)
            })?;
        }
        if !self.present.contains(&name) {
            self.present.push_back(name.clone());
        }
        while self.present.len() > self.keep {
            if let Some(old) = self.present.pop_front() {
                // Removed by hand meanwhile (or no heap profile): nothing to do.
                let _ = crate::output::remove_one(&self.dir, &old);
                let _ = crate::output::remove_one(&self.dir, &heap_name(&old));
            }
        }
        Ok(self.dir.join(name))
    }
}

/// The name of the heap profile beside period file `name`.
fn heap_name(name: &str) -> String {
    format!("{}.heap.pb.gz", name.trim_end_matches(".pb.gz"))
}

/// `t` in UTC as `YYYYMMDDTHHMMSSZ`.
pub fn utc_stamp(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn stamps_are_utc_dates() {
        let at = |s: u64| utc_stamp(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "19700101T000000Z");
        assert_eq!(at(951_782_400), "20000229T000000Z");
        assert_eq!(at(1_796_633_999), "20261207T085959Z");
        assert!(is_period_file(&format!("{}-000001.pb.gz", at(0))));
        assert!(!is_period_file("profile.pb.gz"));
        assert!(!is_period_file(&format!("{}-000001.heap.pb.gz", at(0))));
        assert_eq!(
            heap_name("19700101T000030Z-000003.pb.gz"),
            "19700101T000030Z-000003.heap.pb.gz"
        );
    }

    #[test]
    fn the_newest_files_are_kept() {
        let dir = std::env::temp_dir().join(format!("unwind-periods-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut files = PeriodFiles::open(&dir, "p", 3, 0o600).unwrap();
        let mut profile = Profile::empty("p".into(), 1, UNIX_EPOCH, Duration::from_millis(1));
        for n in 1..=5u64 {
            profile.start = UNIX_EPOCH + Duration::from_secs(n * 10);
            files.write(&profile, n).unwrap();
        }
        let mut names: Vec<String> = std::fs::read_dir(files.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "19700101T000030Z-000003.pb.gz",
                "19700101T000040Z-000004.pb.gz",
                "19700101T000050Z-000005.pb.gz"
            ]
        );
        // A second run counts the first's files among those it keeps.
        let mut files = PeriodFiles::open(&dir, "p", 3, 0o600).unwrap();
        profile.start = UNIX_EPOCH + Duration::from_secs(100);
        files.write(&profile, 1).unwrap();
        assert_eq!(std::fs::read_dir(files.dir()).unwrap().count(), 3);
        assert!(!files.dir().join("19700101T000030Z-000003.pb.gz").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
