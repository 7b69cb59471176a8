//! Frame-by-frame comparison of our frames with the Breakpad-compatible walker's, and the
//! classification of every difference.
//!
//! Frames are compared by address at the same depth (frame 0's PC, then return addresses; on
//! ARM without the Thumb bit). The first difference in a stack gets a cause; the frames after
//! it are counted as following it (the two walks are then on different stacks).

use std::collections::BTreeMap;
use std::fmt;

use minidump_unwind::FrameTrust;
use unwind_core::{StopReason, Trust};

use crate::sample::Sample;
use crate::walk::{BreakpadFrame, OurWalk};

/// How a frame of the two walks compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// Same address.
    Identical,
    /// Breakpad found its frame by stack scanning or its frame-pointer heuristic, not CFI.
    BreakpadScanned,
    /// Our frame came from a fallback (frame pointer, or the link register for a leaf).
    OurFallback,
    /// The callee's rule came from `.ARM.exidx`, which describes the body of a function, not
    /// its prologue or epilogue.
    ExidxPrologue,
    /// The callee is a signal frame.
    SignalFrame,
    /// The callee is in a module for which the walker has no symbol file.
    NoSymbols,
    /// The stack copy in the minidump ends before this frame (the handler walked the live
    /// stack).
    StackCopyEnds,
    /// Breakpad found a CFI frame past the end of our walk.
    PastOurEnd,
    /// Breakpad stopped before our walk did, though it had symbols.
    BreakpadStopped,
    /// An earlier frame differed.
    AfterDifference,
    /// None of the above.
    Genuine,
}

impl Class {
    /// Every class, in report order.
    pub const ALL: [Class; 11] = [
        Class::Identical,
        Class::BreakpadScanned,
        Class::OurFallback,
        Class::ExidxPrologue,
        Class::SignalFrame,
        Class::NoSymbols,
        Class::StackCopyEnds,
        Class::PastOurEnd,
        Class::BreakpadStopped,
        Class::AfterDifference,
        Class::Genuine,
    ];

    /// A description for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Class::Identical => "identical",
            Class::BreakpadScanned => "Breakpad stack-scanned or guessed (frame pointer)",
            Class::OurFallback => "our fallback (frame pointer or link register)",
            Class::ExidxPrologue => "prologue/epilogue on EXIDX",
            Class::SignalFrame => "signal frame",
            Class::NoSymbols => "no symbol file for the callee's module",
            Class::StackCopyEnds => "the minidump's stack copy ends",
            Class::PastOurEnd => "Breakpad CFI frame past our end of stack",
            Class::BreakpadStopped => "Breakpad stopped earlier",
            Class::AfterDifference => "after an earlier difference",
            Class::Genuine => "genuine disagreement",
        }
    }
}

/// A difference nothing explains, for the report.
#[derive(Clone, Debug)]
pub struct Disagreement {
    /// The minidump.
    pub sample: String,
    /// Frame index.
    pub frame: usize,
    /// Our address (None: we have no such frame).
    pub ours: Option<u64>,
    /// Breakpad's (None: it has no such frame).
    pub theirs: Option<u64>,
    /// Where the callee is (module + offset, and Breakpad's function name when it has one).
    pub callee: String,
}

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = |x: Option<u64>| x.map_or_else(|| "-".to_string(), |v| format!("{v:#x}"));
        write!(
            f,
            "{} frame {}: ours {}, Breakpad {} (callee {})",
            self.sample,
            self.frame,
            a(self.ours),
            a(self.theirs),
            self.callee
        )
    }
}

/// Counts over many samples.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Samples compared.
    pub samples: usize,
    /// Breakpad frames past frame 0 found with CFI.
    pub cfi_frames: usize,
    /// Of those, identical to ours.
    pub cfi_identical: usize,
    /// Breakpad frames in all.
    pub breakpad_frames: usize,
    /// Our frames in all.
    pub our_frames: usize,
    /// Frames by class (both sides' frames past frame 0).
    pub classes: BTreeMap<Class, usize>,
    /// Of the CFI frames, by class.
    pub cfi_classes: BTreeMap<Class, usize>,
    /// Samples whose stacks are identical from end to end.
    pub identical_stacks: usize,
    /// Samples our offline walk of the minidump unwinds exactly as the handler did.
    pub offline_same: usize,
    /// The disagreements nothing explains.
    pub genuine: Vec<Disagreement>,
    /// Samples that could not be walked, with why.
    pub errors: Vec<String>,
}

impl Tally {
    /// Identical CFI frames as a percentage.
    pub fn agreement(&self) -> f64 {
        if self.cfi_frames == 0 {
            return 0.0;
        }
        100.0 * self.cfi_identical as f64 / self.cfi_frames as f64
    }

    /// Adds `other`.
    pub fn add(&mut self, other: &Tally) {
        self.samples += other.samples;
        self.cfi_frames += other.cfi_frames;
        self.cfi_identical += other.cfi_identical;
        self.breakpad_frames += other.breakpad_frames;
        self.our_frames += other.our_frames;
        for (k, v) in &other.classes {
            *self.classes.entry(*k).or_default() += v;
        }
        for (k, v) in &other.cfi_classes {
            *self.cfi_classes.entry(*k).or_default() += v;
        }
        self.identical_stacks += other.identical_stacks;
        self.offline_same += other.offline_same;
        self.genuine.extend(other.genuine.iter().cloned());
        self.errors.extend(other.errors.iter().cloned());
    }
}

/// The address as compared: ARM's Thumb bit dropped.
fn norm(sample: &Sample, a: u64) -> u64 {
    match sample.arch {
        crate::programs::Arch::Arm => a & !1,
        crate::programs::Arch::X86_64 => a,
    }
}

fn is_cfi(t: FrameTrust) -> bool {
    matches!(t, FrameTrust::CallFrameInfo)
}

/// Compares one sample's walks and adds them to `tally`. `has_symbols(addr)` says whether the
/// walker had a symbol file for the module holding `addr`.
pub fn compare(
    sample: &Sample,
    theirs: &[BreakpadFrame],
    offline: Option<&OurWalk>,
    has_symbols: &dyn Fn(u64) -> bool,
    tally: &mut Tally,
) {
    let ours = &sample.ours;
    tally.samples += 1;
    tally.breakpad_frames += theirs.len();
    tally.our_frames += ours.len();
    if offline.is_some_and(|w| w.frames == *ours) {
        tally.offline_same += 1;
    }
    let name = sample
        .path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let parent = sample
        .path
        .parent()
        .and_then(|p| p.file_name())
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let callee_at = |i: usize| -> String {
        let Some(&a) = ours.get(i) else {
            return "-".into();
        };
        let a = norm(sample, a);
        let func = theirs
            .get(i)
            .and_then(|f| f.function.clone())
            .map_or_else(String::new, |f| format!(" {f}"));
        match sample.module_of(a) {
            Some(m) => format!("{}+{:#x}{func}", m.name(), a - m.base),
            None => format!("{a:#x}{func}"),
        }
    };
    let mut first: Option<Class> = None;
    let n = theirs.len().max(ours.len());
    for i in 1..n {
        let t = theirs.get(i);
        let o = ours.get(i).map(|&a| norm(sample, a));
        let cfi = t.is_some_and(|f| is_cfi(f.trust));
        let class = if let Some(c) = first {
            let _ = c;
            Class::AfterDifference
        } else {
            let c = match (o, t) {
                (Some(o), Some(t)) if o == norm(sample, t.address) => Class::Identical,
                _ => classify(sample, i, o, t, offline, has_symbols),
            };
            if c != Class::Identical {
                first = Some(c);
                if c == Class::Genuine {
                    tally.genuine.push(Disagreement {
                        sample: format!("{parent}/{name}"),
                        frame: i,
                        ours: o,
                        theirs: t.map(|f| norm(sample, f.address)),
                        callee: callee_at(i - 1),
                    });
                }
            }
            c
        };
        *tally.classes.entry(class).or_default() += 1;
        if cfi {
            tally.cfi_frames += 1;
            *tally.cfi_classes.entry(class).or_default() += 1;
            if class == Class::Identical {
                tally.cfi_identical += 1;
            }
        }
    }
    if first.is_none() {
        tally.identical_stacks += 1;
    }
}

/// The cause of the first difference, at frame `i`.
fn classify(
    sample: &Sample,
    i: usize,
    ours: Option<u64>,
    theirs: Option<&BreakpadFrame>,
    offline: Option<&OurWalk>,
    has_symbols: &dyn Fn(u64) -> bool,
) -> Class {
    let callee = i - 1;
    let callee_addr = sample.ours.get(callee).map(|&a| norm(sample, a));
    if theirs.is_some_and(|t| !is_cfi(t.trust)) {
        return Class::BreakpadScanned;
    }
    if let Some(w) = offline {
        if ours.is_some() && w.frames.len() <= i && w.frames.len() < sample.ours.len() {
            // The handler found this frame on the live stack; the copy does not reach it.
            return Class::StackCopyEnds;
        }
        if ours.is_some()
            && matches!(
                w.trust.get(i),
                Some(Trust::FramePointer | Trust::LinkRegister)
            )
        {
            return Class::OurFallback;
        }
        if let Some(r) = w.rules.get(callee) {
            if r.signal_frame {
                return Class::SignalFrame;
            }
            if r.exidx && theirs.is_some() && ours.is_some() {
                return Class::ExidxPrologue;
            }
        }
    }
    if callee_addr.is_some_and(|a| !has_symbols(a)) {
        return Class::NoSymbols;
    }
    match (ours, theirs) {
        (None, Some(_))
            if matches!(sample.stop, StopReason::EndOfStack | StopReason::CantUnwind) =>
        {
            Class::PastOurEnd
        }
        (Some(_), None) => Class::BreakpadStopped,
        _ => Class::Genuine,
    }
}
