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
use unwind_dwarf::Architecture;

use crate::sample::Sample;
use crate::stores::SymbolSource;
use crate::walk::{BreakpadFrame, OurWalk};

/// First differences kept per class as examples.
pub const EXAMPLES: usize = 5;

/// How a frame of the two walks compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// Same address.
    Identical,
    /// Breakpad found its frame, or a frame below it that it went on from, by stack scanning
    /// or its frame-pointer heuristic, not CFI (a frame-pointer step can give the right return
    /// address with a wrong stack pointer, which the next CFI step then starts from).
    BreakpadScanned,
    /// Our frame came from a fallback (frame pointer, or the link register for a leaf).
    OurFallback,
    /// The callee's rule came from `.ARM.exidx`, which describes the body of a function, not
    /// its prologue or epilogue.
    ExidxPrologue,
    /// The callee is a signal frame.
    SignalFrame,
    /// The callee is libgcc's unwinder installing an exception handler's registers over its
    /// save slots, whose CFI then names the catching function as its caller (Breakpad follows
    /// it); ours reads libgcc's own record of the frame there, or stops
    /// (`unwind_dwarf::eh_return`).
    HandlerInstall,
    /// The callee is in a module for which the walker has no symbol file.
    NoSymbols,
    /// The callee is a PLT stub, whose CFA depends on the PC: dump_syms cannot write that rule
    /// and keeps the row before it, which is wrong for the stub (the walker then goes astray).
    DumpSymsPlt,
    /// The callee's return address is signed there (aarch64's `DW_CFA_AARCH64_negate_ra_state`):
    /// dump_syms writes such an FDE's first row alone (`.ra: x30` everywhere in the function),
    /// as the table comparison shows for the same files.
    DumpSymsPointerAuth,
    /// The stack copy in the minidump ends before this frame (the handler walked the live
    /// stack).
    StackCopyEnds,
    /// Breakpad found a CFI frame past the end of our walk, which ended at an end-of-stack
    /// rule or an `EXIDX_CANTUNWIND` entry.
    PastOurEnd,
    /// Our walk stopped for another reason (no rule for the callee, e.g. a CFA on a register
    /// the fixed-register tables do not track, as in `_dl_runtime_resolve`) where Breakpad's
    /// CFI went on.
    OurStop,
    /// Breakpad stopped before our walk did, though it had symbols.
    BreakpadStopped,
    /// Our walk refused the caller both rules gave, because it is in no module's code
    /// (`StopReason::OutsideModules`); Breakpad wrote it as a frame.
    OursRefusedOutside,
    /// Breakpad's caller repeats its callee's address just above the dynamic loader's frames
    /// (a first call through a PLT stub, resolved lazily): the resolver saved the callee's
    /// return address in its own frame, and the stack pointer Breakpad carried out of the
    /// loader points there, so the callee's CFI reads that save slot as its return address.
    /// (Seen on aarch64: `_dl_runtime_resolve`, then libgcc's `uw_init_context_1` at its
    /// `memset` call, whose caller Breakpad gave as itself; ours, `_Unwind_RaiseException`,
    /// is the instruction after its call to that function.) Also any caller of the frame just
    /// above a loader frame read from dump_syms's file: dump_syms drops the first instruction
    /// of `_dl_runtime_resolve`'s FDE (the 16 bytes the PLT's first entry pushed: its file says
    /// CFA `sp + 208` where the FDE says `sp + 224`), so the stack pointer Breakpad carries
    /// out of the resolver is 16 bytes short and its callee's caller is read from the wrong
    /// slot (aarch64: `main` at its first call of `clock_gettime`, its caller given as `_fini`;
    /// with our exported file the same sample is identical).
    BreakpadAfterResolver,
    /// An earlier frame differed.
    AfterDifference,
    /// None of the above.
    Genuine,
}

impl Class {
    /// Every class, in report order.
    pub const ALL: [Class; 17] = [
        Class::Identical,
        Class::BreakpadScanned,
        Class::OurFallback,
        Class::ExidxPrologue,
        Class::SignalFrame,
        Class::HandlerInstall,
        Class::NoSymbols,
        Class::DumpSymsPlt,
        Class::DumpSymsPointerAuth,
        Class::StackCopyEnds,
        Class::PastOurEnd,
        Class::OurStop,
        Class::BreakpadStopped,
        Class::OursRefusedOutside,
        Class::BreakpadAfterResolver,
        Class::AfterDifference,
        Class::Genuine,
    ];

    /// A description for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Class::Identical => "identical",
            Class::BreakpadScanned => "Breakpad stack-scanned or guessed (frame pointer), here or below",
            Class::OurFallback => "our fallback (frame pointer or link register)",
            Class::ExidxPrologue => "prologue/epilogue on EXIDX",
            Class::SignalFrame => "signal frame",
            Class::HandlerInstall => {
                "libgcc installing a handler's registers (its CFI names the catching function)"
            }
            Class::NoSymbols => "no symbol file for the callee's module",
            Class::DumpSymsPlt => "PLT stub: dump_syms cannot write its PC-dependent CFA",
            Class::DumpSymsPointerAuth => {
                "signed return address: dump_syms writes the FDE's first row alone"
            }
            Class::StackCopyEnds => "the minidump's stack copy ends",
            Class::PastOurEnd => "Breakpad CFI frame past our end of stack",
            Class::OurStop => "our walk stopped first (no rule, e.g. an untracked register)",
            Class::BreakpadStopped => "Breakpad stopped earlier",
            Class::OursRefusedOutside => {
                "our walk refused a caller in no module's code, which Breakpad wrote as a frame"
            }
            Class::BreakpadAfterResolver => {
                "Breakpad's caller repeats its callee's address above the loader's lazy-binding resolver"
            }
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
    /// Breakpad frames past frame 0 found with CFI, from frame 0 by CFI only (no scanned
    /// frame before them).
    pub cfi_frames: usize,
    /// Breakpad CFI frames after a scanned one (not measured: they start from a guess).
    pub cfi_after_scan: usize,
    /// Of the measured CFI frames, identical to ours.
    pub cfi_identical: usize,
    /// Breakpad frames in all.
    pub breakpad_frames: usize,
    /// Our frames in all.
    pub our_frames: usize,
    /// Frames by class (both sides' frames past frame 0).
    pub classes: BTreeMap<Class, usize>,
    /// Of the measured CFI frames, by class.
    pub cfi_classes: BTreeMap<Class, usize>,
    /// Samples where Breakpad found every frame we found, identically.
    pub identical_stacks: usize,
    /// Samples whose two walks are the same frames, no more and no fewer.
    pub whole_identical: usize,
    /// Samples where our walk is the start of Breakpad's and stops earlier.
    pub ours_shorter: usize,
    /// Samples whose two walks differ (not `whole_identical`).
    pub differing: usize,
    /// Of them, checked against the program's known call graph.
    pub arbitrated: usize,
    /// Of those, samples where a step of Breakpad's walk is not on the graph.
    pub theirs_wrong: usize,
    /// Of those, samples where a step of ours is not on the graph, each with the step and both
    /// walks' names: every one is listed.
    pub ours_wrong: Vec<String>,
    /// Our frames (past frame 0) that Breakpad's walk does not have at the same depth
    /// (invented, or found where Breakpad found none or another), by the class of the stack's
    /// first difference (`AfterDifference` for the frames after it).
    pub only_ours: BTreeMap<Class, usize>,
    /// Samples whose two `minidump_stackwalk -m` traces are the same text.
    pub identical_traces: usize,
    /// Samples our offline walk of the minidump unwinds exactly as the handler did.
    pub offline_same: usize,
    /// The disagreements nothing explains.
    pub genuine: Vec<Disagreement>,
    /// A few first differences of each other class, for the report.
    pub examples: BTreeMap<Class, Vec<Disagreement>>,
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
        self.cfi_after_scan += other.cfi_after_scan;
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
        self.whole_identical += other.whole_identical;
        self.differing += other.differing;
        self.arbitrated += other.arbitrated;
        self.theirs_wrong += other.theirs_wrong;
        self.ours_wrong.extend(other.ours_wrong.iter().cloned());
        self.ours_shorter += other.ours_shorter;
        for (k, v) in &other.only_ours {
            *self.only_ours.entry(*k).or_default() += v;
        }
        self.offline_same += other.offline_same;
        self.identical_traces += other.identical_traces;
        self.genuine.extend(other.genuine.iter().cloned());
        for (k, v) in &other.examples {
            let e = self.examples.entry(*k).or_default();
            e.extend(v.iter().take(EXAMPLES.saturating_sub(e.len())).cloned());
        }
        self.errors.extend(other.errors.iter().cloned());
    }
}

/// The address as compared: ARM's Thumb bit dropped.
fn norm(sample: &Sample, a: u64) -> u64 {
    match sample.arch {
        Architecture::Arm => a & !1,
        Architecture::X86_64 | Architecture::Aarch64 => a,
    }
}

fn is_cfi(t: FrameTrust) -> bool {
    matches!(t, FrameTrust::CallFrameInfo)
}

/// Compares one sample's walks and adds them to `tally`. `symbols(addr)` says which symbol
/// file, if any, the walker had for the module holding `addr`. Returns whether the two walks
/// are the same frames.
pub fn compare(
    sample: &Sample,
    theirs: &[BreakpadFrame],
    offline: Option<&OurWalk>,
    symbols: &dyn Fn(u64) -> Option<SymbolSource>,
    tally: &mut Tally,
) -> bool {
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
    let mut first: Option<(usize, Class)> = None;
    // Whether every Breakpad frame so far (past frame 0) came from CFI: a CFI frame found
    // after a scanned one starts from a guess, so only unbroken CFI chains are measured.
    let mut chained = true;
    let n = theirs.len().max(ours.len());
    for i in 1..n {
        let t = theirs.get(i);
        let o = ours.get(i).map(|&a| norm(sample, a));
        chained &= t.is_some_and(|f| is_cfi(f.trust));
        let class = if first.is_some() {
            Class::AfterDifference
        } else {
            let c = match (o, t) {
                (Some(o), Some(t)) if o == norm(sample, t.address) => Class::Identical,
                (Some(_), Some(_))
                    if repeats_above_resolver(sample, theirs, i)
                        || above_dump_syms_resolver(sample, theirs, i, symbols) =>
                {
                    Class::BreakpadAfterResolver
                }
                _ => classify(sample, i, o, t, theirs, offline, symbols),
            };
            if c != Class::Identical {
                first = Some((i, c));
                let d = Disagreement {
                    sample: format!("{parent}/{name}"),
                    frame: i,
                    ours: o,
                    theirs: t.map(|f| norm(sample, f.address)),
                    callee: callee_at(i - 1),
                };
                if c == Class::Genuine {
                    tally.genuine.push(d);
                } else {
                    let e = tally.examples.entry(c).or_default();
                    if e.len() < EXAMPLES {
                        e.push(d);
                    }
                }
            }
            c
        };
        *tally.classes.entry(class).or_default() += 1;
        if o.is_some() && class != Class::Identical {
            *tally.only_ours.entry(class).or_default() += 1;
        }
        if t.is_some_and(|f| is_cfi(f.trust)) {
            if chained {
                tally.cfi_frames += 1;
                *tally.cfi_classes.entry(class).or_default() += 1;
                if class == Class::Identical {
                    tally.cfi_identical += 1;
                }
            } else {
                tally.cfi_after_scan += 1;
            }
        }
    }
    // Every frame we found is matched (Breakpad may go on past our end by scanning).
    if first.is_none_or(|(i, _)| i >= ours.len()) {
        tally.identical_stacks += 1;
        if theirs.len() == ours.len() {
            tally.whole_identical += 1;
        } else if theirs.len() > ours.len() {
            tally.ours_shorter += 1;
        }
    }
    let same = first.is_none();
    if !same {
        tally.differing += 1;
    }
    same
}

/// Names each frame of a walk: `(module file name, function)`.
pub type FrameNames<'a> = dyn Fn(&[u64]) -> Vec<(String, String)> + 'a;

/// Checks both walks of a sample whose walks differ against the program's known call graph,
/// and counts in `tally` which has a step that is not on it. `names(pcs)` gives each frame's
/// `(module file name, function)`.
pub fn arbitrate(
    sample: &Sample,
    theirs: &[BreakpadFrame],
    known: &crate::programs::KnownGraph,
    names: &FrameNames<'_>,
    tally: &mut Tally,
) {
    let tokens = |pcs: &[u64]| {
        let named = names(pcs);
        let frames: Vec<(&str, &str)> = named.iter().map(|(m, f)| (&**m, &**f)).collect();
        known.tokens(&frames)
    };
    let bp: Vec<u64> = theirs.iter().map(|f| f.address).collect();
    let (ours, breakpad) = (tokens(&sample.ours), tokens(&bp));
    tally.arbitrated += 1;
    if known.graph.check_steps(&breakpad).is_err() {
        tally.theirs_wrong += 1;
    }
    if let Err(why) = known.graph.check_steps(&ours) {
        let file = |p: &std::path::Path| {
            p.file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        };
        let dir = sample.path.parent().map_or_else(String::new, file);
        tally.ours_wrong.push(format!(
            "{dir}/{}: {why}; ours {}; Breakpad {}",
            file(&sample.path),
            ours.join(">"),
            breakpad.join(">")
        ));
    }
}

/// Whether Breakpad's frame `i` has its frame `i - 1`'s address, and one of the two frames below
/// that is in the dynamic loader (see [`Class::BreakpadAfterResolver`]).
fn repeats_above_resolver(sample: &Sample, theirs: &[BreakpadFrame], i: usize) -> bool {
    let (Some(frame), Some(callee)) = (theirs.get(i), i.checked_sub(1).and_then(|c| theirs.get(c)))
    else {
        return false;
    };
    let in_loader = |f: &BreakpadFrame| {
        sample
            .module_of(norm(sample, f.address))
            .is_some_and(|m| m.name().starts_with("ld-linux") || m.name().starts_with("ld-musl"))
    };
    norm(sample, frame.address) == norm(sample, callee.address)
        && theirs[..i - 1].iter().rev().take(2).any(in_loader)
}

/// Whether Breakpad's frame `i - 2` is in the dynamic loader and was walked with dump_syms's
/// file for it (see [`Class::BreakpadAfterResolver`]).
fn above_dump_syms_resolver(
    sample: &Sample,
    theirs: &[BreakpadFrame],
    i: usize,
    symbols: &dyn Fn(u64) -> Option<SymbolSource>,
) -> bool {
    let Some(resolver) = i.checked_sub(2).and_then(|j| theirs.get(j)) else {
        return false;
    };
    let at = norm(sample, resolver.address);
    let in_loader = sample
        .module_of(at)
        .is_some_and(|m| m.name().starts_with("ld-linux") || m.name().starts_with("ld-musl"));
    in_loader && symbols(at) == Some(SymbolSource::DumpSyms)
}

/// Whether each of Breakpad's frames 1 to `i - 1` came from CFI.
fn bp_chain_is_cfi(theirs: &[BreakpadFrame], i: usize) -> bool {
    theirs.iter().take(i).skip(1).all(|f| is_cfi(f.trust))
}

/// The cause of the first difference, at frame `i`.
#[allow(clippy::too_many_arguments)]
fn classify(
    sample: &Sample,
    i: usize,
    ours: Option<u64>,
    theirs: Option<&BreakpadFrame>,
    bp_frames: &[BreakpadFrame],
    offline: Option<&OurWalk>,
    symbols: &dyn Fn(u64) -> Option<SymbolSource>,
) -> Class {
    let callee = i - 1;
    let callee_addr = sample.ours.get(callee).map(|&a| norm(sample, a));
    if offline
        .and_then(|w| w.rules.get(callee))
        .is_some_and(|r| r.signal_frame)
    {
        return Class::SignalFrame;
    }
    if offline
        .and_then(|w| w.rules.get(callee))
        .is_some_and(|r| r.handler_install)
    {
        return Class::HandlerInstall;
    }
    if theirs.is_some_and(|t| !is_cfi(t.trust)) || !bp_chain_is_cfi(bp_frames, i) {
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
        if w.rules
            .get(callee)
            .is_some_and(|r| r.exidx && ours.is_some())
        {
            return Class::ExidxPrologue;
        }
    }
    let source = callee_addr.and_then(symbols);
    if callee_addr.is_some() && source.is_none() {
        return Class::NoSymbols;
    }
    let callee_rule = offline.and_then(|w| w.rules.get(callee));
    if let (Some(SymbolSource::DumpSyms), Some(_), Some(r)) = (source, theirs, callee_rule) {
        if r.pc_dependent_cfa {
            return Class::DumpSymsPlt;
        }
        if r.ra_signed {
            return Class::DumpSymsPointerAuth;
        }
    }
    match (ours, theirs) {
        (None, Some(_))
            if matches!(sample.stop, StopReason::EndOfStack | StopReason::CantUnwind) =>
        {
            Class::PastOurEnd
        }
        (None, Some(t)) if sample.stop == StopReason::OutsideModules => {
            match sample.module_of(norm(sample, t.address)) {
                None => Class::OursRefusedOutside,
                Some(_) => Class::OurStop,
            }
        }
        (None, Some(_)) => Class::OurStop,
        (Some(_), None) => Class::BreakpadStopped,
        _ => Class::Genuine,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::SampleModule;
    use crate::walk::RuleFacts;

    fn sample(ours: &[u64]) -> Sample {
        Sample {
            path: "dir/0000.dmp".into(),
            bytes: Vec::new(),
            arch: Architecture::X86_64,
            context: unwind_samples::Context::X86_64 {
                regs: [0; 17],
                eflags: 0,
            },
            stack_base: 0,
            stack: Vec::new(),
            modules: vec![SampleModule {
                code_file: "/lib/m.so".into(),
                base: 0x1000,
                size: 0x1000,
                debug_id: String::new(),
            }],
            ours: ours.to_vec(),
            stop: StopReason::EndOfStack,
            system: unwind_samples::trace::System {
                os: "Linux".into(),
                os_version: String::new(),
                cpu: "amd64".into(),
                cpu_info: String::new(),
                cpu_count: 1,
            },
        }
    }

    fn bp(frames: &[(u64, FrameTrust)]) -> Vec<BreakpadFrame> {
        frames
            .iter()
            .map(|&(address, trust)| BreakpadFrame {
                address,
                trust,
                function: None,
            })
            .collect()
    }

    fn offline(s: &Sample, signal_at: Option<usize>) -> OurWalk {
        OurWalk {
            frames: s.ours.clone(),
            trust: vec![Trust::Cfi; s.ours.len()],
            rules: (0..s.ours.len())
                .map(|i| RuleFacts {
                    found: true,
                    signal_frame: Some(i) == signal_at,
                    exidx: false,
                    pc_dependent_cfa: false,
                    ra_signed: false,
                    handler_install: false,
                })
                .collect(),
            stop: s.stop,
        }
    }

    const CFI: FrameTrust = FrameTrust::CallFrameInfo;

    /// `s` compared with Breakpad's `theirs`, our offline walk beside it, every module with our
    /// symbol file.
    fn tally_ours(s: &Sample, theirs: &[BreakpadFrame]) -> Tally {
        let mut t = Tally::default();
        compare(
            s,
            theirs,
            Some(&offline(s, None)),
            &|_| Some(SymbolSource::Ours),
            &mut t,
        );
        t
    }

    #[test]
    fn identical_stacks_count_every_cfi_frame() {
        let s = sample(&[0x1100, 0x1200, 0x1300]);
        let mut t = Tally::default();
        let theirs = bp(&[(0x1100, FrameTrust::Context), (0x1200, CFI), (0x1300, CFI)]);
        compare(
            &s,
            &theirs,
            Some(&offline(&s, None)),
            &|_| Some(SymbolSource::Ours),
            &mut t,
        );
        assert_eq!(
            (t.cfi_frames, t.cfi_identical, t.identical_stacks),
            (2, 2, 1)
        );
        assert!(t.genuine.is_empty());
    }

    #[test]
    fn a_different_cfi_frame_is_a_genuine_disagreement() {
        let s = sample(&[0x1100, 0x1200, 0x1300]);
        let mut t = Tally::default();
        let theirs = bp(&[
            (0x1100, FrameTrust::Context),
            (0x1200, CFI),
            (0x1400, CFI),
            (0x1500, CFI),
        ]);
        compare(
            &s,
            &theirs,
            Some(&offline(&s, None)),
            &|_| Some(SymbolSource::Ours),
            &mut t,
        );
        assert_eq!((t.cfi_frames, t.cfi_identical), (3, 1));
        assert_eq!(t.genuine.len(), 1);
        assert_eq!(t.genuine[0].frame, 2);
        assert_eq!(t.classes.get(&Class::AfterDifference), Some(&1));
        assert_eq!(t.agreement(), 100.0 / 3.0);
    }

    #[test]
    fn scanned_frames_and_signal_frames_are_classified() {
        let s = sample(&[0x1100, 0x1200, 0x1300]);
        let mut t = Tally::default();
        let theirs = bp(&[
            (0x1100, FrameTrust::Context),
            (0x1250, FrameTrust::Scan),
            (0x1300, CFI),
        ]);
        compare(
            &s,
            &theirs,
            Some(&offline(&s, None)),
            &|_| Some(SymbolSource::Ours),
            &mut t,
        );
        assert_eq!(t.classes.get(&Class::BreakpadScanned), Some(&1));
        // The CFI frame after the scanned one is not measured.
        assert_eq!((t.cfi_frames, t.cfi_after_scan), (0, 1));

        let mut t = Tally::default();
        compare(
            &s,
            &theirs,
            Some(&offline(&s, Some(0))),
            &|_| Some(SymbolSource::Ours),
            &mut t,
        );
        assert_eq!(t.classes.get(&Class::SignalFrame), Some(&1));
    }

    #[test]
    fn a_cfi_frame_above_a_frame_pointer_step_is_breakpads_guess() {
        // Frame 2's return address is right, found through the frame pointer; the stack
        // pointer it gives frame 3's CFI step is not.
        let s = sample(&[0x1100, 0x1200, 0x1300, 0x1400]);
        let theirs = bp(&[
            (0x1100, FrameTrust::Context),
            (0x1200, CFI),
            (0x1300, FrameTrust::FramePointer),
            (0x1480, CFI),
        ]);
        let t = tally_ours(&s, &theirs);
        assert!(t.genuine.is_empty(), "{:?}", t.genuine);
        assert_eq!(t.classes.get(&Class::BreakpadScanned), Some(&1));
    }

    #[test]
    fn a_caller_repeating_its_callee_above_the_loader_is_breakpads() {
        let mut s = sample(&[0x1100, 0x3100, 0x3200, 0x1400, 0x1500]);
        let theirs = bp(&[
            (0x1100, FrameTrust::Context),
            (0x3100, CFI),
            (0x3200, CFI),
            (0x1400, CFI),
            (0x1400, CFI),
        ]);
        let classes = |s: &Sample| {
            let mut t = Tally::default();
            compare(
                s,
                &theirs,
                Some(&offline(s, None)),
                &|_| Some(SymbolSource::Ours),
                &mut t,
            );
            (t.classes, t.genuine.len())
        };
        // Frames 1 and 2 in no module (not the loader): unexplained.
        assert_eq!(classes(&s).1, 1);
        s.modules.push(SampleModule {
            code_file: "/lib/ld-linux-aarch64.so.1".into(),
            base: 0x3000,
            size: 0x1000,
            debug_id: String::new(),
        });
        let (classes, genuine) = classes(&s);
        assert_eq!(genuine, 0);
        assert_eq!(classes.get(&Class::BreakpadAfterResolver), Some(&1));
    }

    /// A caller that differs just above a loader frame is Breakpad's when that frame was
    /// walked with dump_syms's file for the loader, and genuine with ours.
    #[test]
    fn a_caller_above_dump_syms_resolver_is_breakpads() {
        let mut s = sample(&[0x3100, 0x3200, 0x1300, 0x1400]);
        s.modules.push(SampleModule {
            code_file: "/lib/ld-linux-aarch64.so.1".into(),
            base: 0x3000,
            size: 0x1000,
            debug_id: String::new(),
        });
        let theirs = bp(&[
            (0x3100, FrameTrust::Context),
            (0x3200, CFI),
            (0x1300, CFI),
            (0x1480, CFI),
        ]);
        let classes = |source: SymbolSource| {
            let mut t = Tally::default();
            compare(
                &s,
                &theirs,
                Some(&offline(&s, None)),
                &|_| Some(source),
                &mut t,
            );
            (t.classes, t.genuine.len())
        };
        assert_eq!(classes(SymbolSource::Ours).1, 1);
        let (classes, genuine) = classes(SymbolSource::DumpSyms);
        assert_eq!(genuine, 0);
        assert_eq!(classes.get(&Class::BreakpadAfterResolver), Some(&1));
    }

    #[test]
    fn frames_only_we_found_are_classified() {
        let s = sample(&[0x1100, 0x1200, 0x1300]);
        let theirs = bp(&[(0x1100, FrameTrust::Context), (0x1200, CFI)]);
        let mut t = Tally::default();
        compare(&s, &theirs, Some(&offline(&s, None)), &|_| None, &mut t);
        assert_eq!(t.classes.get(&Class::NoSymbols), Some(&1));
        let t = tally_ours(&s, &theirs);
        assert_eq!(t.classes.get(&Class::BreakpadStopped), Some(&1));
        assert_eq!(t.identical_stacks, 0);
    }

    #[test]
    fn breakpad_cfi_frames_past_our_stop_are_classified_by_our_stop_reason() {
        let mut s = sample(&[0x1100, 0x1200]);
        let theirs = bp(&[(0x1100, FrameTrust::Context), (0x1200, CFI), (0x1300, CFI)]);
        let t = tally_ours(&s, &theirs);
        assert_eq!(t.classes.get(&Class::PastOurEnd), Some(&1));
        s.stop = StopReason::NoRule;
        let t = tally_ours(&s, &theirs);
        assert_eq!(t.classes.get(&Class::OurStop), Some(&1));
        // A caller in no module, which our walk refused and Breakpad wrote.
        s.stop = StopReason::OutsideModules;
        let outside = bp(&[(0x1100, FrameTrust::Context), (0x1200, CFI), (0x9300, CFI)]);
        let mut refused = Tally::default();
        compare(
            &s,
            &outside,
            Some(&offline(&s, None)),
            &|_| Some(SymbolSource::Ours),
            &mut refused,
        );
        assert_eq!(refused.classes.get(&Class::OursRefusedOutside), Some(&1));
        // Both are measured CFI frames we do not match.
        assert_eq!((t.cfi_frames, t.cfi_identical), (2, 1));
        assert!(t.genuine.is_empty());
    }

    #[test]
    fn a_bad_frame_from_an_exidx_rule_is_classified_even_when_breakpad_has_none() {
        let s = sample(&[0x1100, 0x6]);
        let mut w = offline(&s, None);
        w.rules[0].exidx = true;
        let theirs = bp(&[(0x1100, FrameTrust::Context)]);
        let mut t = Tally::default();
        compare(&s, &theirs, Some(&w), &|_| Some(SymbolSource::Ours), &mut t);
        assert_eq!(t.classes.get(&Class::ExidxPrologue), Some(&1));
    }
}
