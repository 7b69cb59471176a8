//! The two walks of a sample: rust-minidump's Breakpad-compatible walker over the minidump
//! (`minidump_processor::process_minidump`, what `minidump-stackwalk` runs), and our unwinder
//! again, offline, over the same stack copy, to learn per frame how it found each caller.

use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Waker};

use minidump::Minidump;
use minidump_unwind::{FrameTrust, Symbolizer};
use unwind_core::expr::Op;
use unwind_core::table::{ModuleRules, RuleTable, RuleTableBuilder, TableRule};
use unwind_core::{
    aarch64, arm, x86_64, Aarch64, Arm, Cache, Found, StackImage, StopReason, Trust, UnwindResult,
    X86_64,
};

use crate::programs::host_path;
use crate::sample::{Sample, SampleModule};

/// Runs a future that never waits on anything external (file reads are synchronous here).
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = TaskContext::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// A frame as the Breakpad-compatible walker found it.
#[derive(Clone, Debug)]
pub struct BreakpadFrame {
    /// Frame 0's PC, a caller's return address (`resume_address`).
    pub address: u64,
    /// How the walker found it.
    pub trust: FrameTrust,
    /// The function its symbol file names, if any.
    pub function: Option<String>,
}

/// Walks `sample` with rust-minidump's processor and `symbolizer`'s symbol files.
pub fn breakpad_walk(
    sample: &Sample,
    symbolizer: &Symbolizer,
) -> Result<Vec<BreakpadFrame>, String> {
    let dump = Minidump::read(&sample.bytes[..]).map_err(|e| e.to_string())?;
    let state = block_on(minidump_processor::process_minidump(&dump, symbolizer))
        .map_err(|e| e.to_string())?;
    let thread = state.threads.first().ok_or("no thread")?;
    Ok(thread
        .frames
        .iter()
        .map(|f| BreakpadFrame {
            address: f.resume_address,
            trust: f.trust,
            function: f.function_name.clone(),
        })
        .collect())
}

/// What our rules say about the frame a caller was found from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleFacts {
    /// The callee had a rule.
    pub found: bool,
    /// It is a signal frame's rule.
    pub signal_frame: bool,
    /// It came from `.ARM.exidx` (exact only after the prologue and before the epilogue).
    pub exidx: bool,
    /// Its CFA is an expression of the PC (a PLT stub's).
    pub pc_dependent_cfa: bool,
    /// Its return address is signed (aarch64's pointer authentication).
    pub ra_signed: bool,
    /// It is one of the rules made where libgcc's unwinder installs an exception handler's
    /// registers over its save slots (`unwind_dwarf::eh_return`): the return address read from
    /// libgcc's own record of the frame, or lost.
    pub handler_install: bool,
}

/// Our offline walk of a sample.
#[derive(Clone, Debug)]
pub struct OurWalk {
    /// Frame addresses, as in the handler.
    pub frames: Vec<u64>,
    /// How each frame was found.
    pub trust: Vec<Trust>,
    /// Per frame, the rule that unwound it to its caller.
    pub rules: Vec<RuleFacts>,
    /// Why the walk stopped.
    pub stop: StopReason,
}

/// The lowest PT_LOAD address of an ELF file, which a minidump's module base corresponds to
/// (so that the load bias is the module base minus this).
pub fn image_base_svma(path: &Path) -> Option<u64> {
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    Some(unwind_dwarf::breakpad::image_base_svma(&file))
}

/// Where an ELF file's code is: its lowest PT_LOAD address (which a minidump's module base
/// corresponds to) and the extent of its executable PT_LOAD segments, as the runtime places
/// modules in its table (a return address outside them is no frame, in the handler as here).
#[derive(Clone, Copy, Debug)]
struct Layout {
    base_svma: u64,
    code: (u64, u64),
}

impl Layout {
    fn of(path: &Path) -> Option<Layout> {
        use object::{Object as _, ObjectSegment as _, SegmentFlags};
        let data = std::fs::read(path).ok()?;
        let file = object::File::parse(&*data).ok()?;
        let code = file
            .segments()
            .filter(|s| {
                matches!(s.flags(), SegmentFlags::Elf { p_flags, .. } if p_flags.0 & object::elf::PF_X.0 != 0)
            })
            .map(|s| (s.address(), s.address().saturating_add(s.size())))
            .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))?;
        Some(Layout {
            base_svma: unwind_dwarf::breakpad::image_base_svma(&file),
            code,
        })
    }
}

/// One architecture's rules: per file, and tables per distinct module list.
struct ArchTables<R: TableRule> {
    rules: HashMap<PathBuf, Arc<ModuleRules<R>>>,
    tables: HashMap<Vec<SampleModule>, Arc<RuleTable<R>>>,
}

impl<R: TableRule> Default for ArchTables<R> {
    fn default() -> Self {
        ArchTables {
            rules: HashMap::new(),
            tables: HashMap::new(),
        }
    }
}

impl<R: TableRule> ArchTables<R> {
    /// The table placing `sample`'s modules, their rules read by `load`.
    fn table(
        &mut self,
        layouts: &mut HashMap<PathBuf, Option<Layout>>,
        sample: &Sample,
        load: impl Fn(&Path) -> Option<ModuleRules<R>>,
    ) -> Option<Arc<RuleTable<R>>> {
        if let Some(t) = self.tables.get(&sample.modules) {
            return Some(t.clone());
        }
        let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
        for m in &sample.modules {
            let path = host_path(&m.code_file, sample.arch);
            let layout = *layouts
                .entry(path.clone())
                .or_insert_with(|| Layout::of(&path));
            let Some(layout) = layout else { continue };
            let r = self
                .rules
                .entry(path.clone())
                .or_insert_with(|| Arc::new(load(&path).unwrap_or_else(ModuleRules::empty)))
                .clone();
            let bias = m.base.wrapping_sub(layout.base_svma);
            b.add(
                layout.code.0.wrapping_add(bias),
                layout.code.1.wrapping_add(bias),
                bias,
                m.code_file.clone(),
                r,
            );
        }
        let t = Arc::new(b.build().ok()?);
        self.tables.insert(sample.modules.clone(), t.clone());
        Some(t)
    }
}

/// Rule tables for offline walks, built once per distinct module list.
#[derive(Default)]
pub struct Tables {
    layouts: HashMap<PathBuf, Option<Layout>>,
    x86: ArchTables<x86_64::Rule>,
    arm: ArchTables<arm::Rule>,
    aarch64: ArchTables<aarch64::Rule>,
}

/// Runs `unwind` and describes, per frame, the rule `facts` finds for it (at the PC for frame
/// 0, at the call, one byte before the return address, for callers).
fn walk_frames(
    unwind: impl FnOnce(&mut [u64], &mut [Trust]) -> UnwindResult,
    facts: impl Fn(u64) -> RuleFacts,
    thumb_bit: u64,
) -> Option<OurWalk> {
    let mut pcs = [0u64; 512];
    let mut trust = [Trust::Context; 512];
    let r = unwind(&mut pcs, &mut trust);
    let frames = pcs.get(..r.frames)?.to_vec();
    let rules = frames
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let a = a & !thumb_bit;
            facts(if i == 0 { a } else { a.wrapping_sub(1) })
        })
        .collect();
    Some(OurWalk {
        trust: trust.get(..r.frames)?.to_vec(),
        frames,
        rules,
        stop: r.stop,
    })
}

/// Walks `sample` from `regs` with our unwinder for architecture `A`, the table placing its
/// module files (`tables`); `facts` describes a rule found, with the table it is in and its
/// module's index.
#[allow(clippy::too_many_arguments)]
fn walk_as<A: unwind_dwarf::DwarfArch>(
    tables: &mut ArchTables<A::Rule>,
    layouts: &mut HashMap<PathBuf, Option<Layout>>,
    sample: &Sample,
    regs: A::Regs,
    image: &StackImage<'_>,
    facts: impl Fn(&RuleTable<A::Rule>, u16, &A::Rule) -> RuleFacts,
    thumb_bit: u64,
) -> Option<OurWalk> {
    let table = tables.table(layouts, sample, |p| {
        unwind_dwarf::load_elf_file::<A>(p).ok().map(|l| l.rules)
    })?;
    walk_frames(
        |pcs, trust| {
            unwind_core::unwind(
                &table,
                &mut Cache::<A>::new(),
                regs,
                image,
                pcs,
                Some(trust),
            )
        },
        |at| {
            table
                .lookup(at)
                .map_or_else(RuleFacts::default, |Found { module, rule }| {
                    facts(&table, module, &rule)
                })
        },
        thumb_bit,
    )
}

impl Tables {
    /// Walks `sample` with our unwinder, from the module files on this host.
    pub fn walk(&mut self, sample: &Sample) -> Option<OurWalk> {
        let image = StackImage::new(sample.stack_base, &sample.stack)
            .with_pointer_mask(sample.context.pointer_mask());
        let layouts = &mut self.layouts;
        if let Some(regs) = sample.context.x86_64_regs() {
            let pc = Op::Reg(x86_64::Reg::Pc as u8);
            let facts = |table: &RuleTable<x86_64::Rule>, m: u16, rule: &x86_64::Rule| RuleFacts {
                found: true,
                signal_frame: rule.signal_frame,
                exidx: false,
                pc_dependent_cfa: match rule.cfa {
                    x86_64::CfaRule::Expr(e) => {
                        table.expr(m, e).is_some_and(|x| x.ops().contains(&pc))
                    }
                    _ => false,
                },
                ra_signed: false,
                handler_install: rule.ra == x86_64::RegRule::Lost
                    || (matches!(rule.ra, x86_64::RegRule::Expr(_))
                        && rule.fp == x86_64::RegRule::Undefined),
            };
            walk_as::<X86_64>(&mut self.x86, layouts, sample, regs, &image, facts, 0)
        } else if let Some(regs) = sample.context.aarch64_regs() {
            let facts = |_: &RuleTable<aarch64::Rule>, _: u16, rule: &aarch64::Rule| RuleFacts {
                found: true,
                signal_frame: rule.signal_frame,
                exidx: false,
                pc_dependent_cfa: false,
                ra_signed: rule.ra_signed,
                handler_install: rule.ra == aarch64::RegRule::Lost
                    || (matches!(rule.ra, aarch64::RegRule::Expr(_))
                        && rule.fp == aarch64::RegRule::Undefined),
            };
            walk_as::<Aarch64>(&mut self.aarch64, layouts, sample, regs, &image, facts, 0)
        } else {
            let regs = sample.context.arm_regs()?;
            let facts = |_: &RuleTable<arm::Rule>, _: u16, rule: &arm::Rule| RuleFacts {
                found: true,
                signal_frame: rule.signal_frame,
                exidx: rule.source == arm::Source::Exidx,
                pc_dependent_cfa: false,
                ra_signed: false,
                handler_install: matches!(rule.pc, arm::RegRule::Expr(_))
                    && rule.source == arm::Source::Instructions,
            };
            walk_as::<Arm>(&mut self.arm, layouts, sample, regs, &image, facts, 1)
        }
    }
}
