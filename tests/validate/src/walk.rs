//! The two walks of a sample: rust-minidump's Breakpad-compatible walker over the minidump
//! (`minidump_processor::process_minidump`, what `minidump-stackwalk` runs), and our unwinder
//! again, offline, over the same stack copy, to learn per frame how it found each caller.

use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Waker};

use minidump::Minidump;
use minidump_unwind::{FrameTrust, Symbolizer};
use unwind_core::expr::Op;
use unwind_core::table::{ModuleRules, RuleTable, RuleTableBuilder};
use unwind_core::{Cache, StackImage, StopReason, Trust};

use crate::programs::{host_path, Arch};
use crate::sample::{Context, Sample, SampleModule};

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

/// Rule tables for offline walks, built once per distinct module list.
#[derive(Default)]
pub struct Tables {
    x86_rules: HashMap<PathBuf, Arc<ModuleRules<unwind_core::x86_64::Rule>>>,
    arm_rules: HashMap<PathBuf, Arc<ModuleRules<unwind_core::arm::Rule>>>,
    bases: HashMap<PathBuf, Option<u64>>,
    x86: HashMap<Vec<SampleModule>, Arc<RuleTable<unwind_core::x86_64::Rule>>>,
    arm: HashMap<Vec<SampleModule>, Arc<RuleTable<unwind_core::arm::Rule>>>,
}

/// The lowest PT_LOAD address of an ELF file, which a minidump's module base corresponds to.
fn image_base_svma(path: &PathBuf) -> Option<u64> {
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    Some(unwind_dwarf::breakpad::image_base_svma(&file))
}

impl Tables {
    fn place<R: Copy>(
        bases: &mut HashMap<PathBuf, Option<u64>>,
        rules: &mut HashMap<PathBuf, Arc<ModuleRules<R>>>,
        modules: &[SampleModule],
        arch: Arch,
        load: impl Fn(&std::path::Path) -> Option<ModuleRules<R>>,
    ) -> Option<RuleTable<R>> {
        let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
        for m in modules {
            let path = host_path(&m.code_file, arch);
            let svma = *bases
                .entry(path.clone())
                .or_insert_with(|| image_base_svma(&path));
            let Some(svma) = svma else { continue };
            let r = rules
                .entry(path.clone())
                .or_insert_with(|| Arc::new(load(&path).unwrap_or_else(ModuleRules::empty)))
                .clone();
            b.add(
                m.base,
                m.base.saturating_add(m.size),
                m.base.wrapping_sub(svma),
                m.code_file.clone(),
                r,
            );
        }
        b.build().ok()
    }

    /// Walks `sample` with our unwinder, from the module files on this host.
    pub fn walk(&mut self, sample: &Sample) -> Option<OurWalk> {
        let mut pcs = [0u64; 512];
        let mut trust = [Trust::Context; 512];
        let image = StackImage::new(sample.stack_base, &sample.stack);
        match &sample.context {
            Context::X86_64(c) => {
                let table = match self.x86.get(&sample.modules) {
                    Some(t) => t.clone(),
                    None => {
                        let t = Arc::new(Self::place(
                            &mut self.bases,
                            &mut self.x86_rules,
                            &sample.modules,
                            sample.arch,
                            |p| unwind_dwarf::load_elf_file(p).ok().map(|l| l.rules),
                        )?);
                        self.x86.insert(sample.modules.clone(), t.clone());
                        t
                    }
                };
                let regs = unwind_core::x86_64::Regs {
                    pc: c.rip,
                    sp: c.rsp,
                    fp: c.rbp,
                };
                let mut cache = Cache::new();
                let r = unwind_core::x86_64::unwind(
                    &table,
                    &mut cache,
                    regs,
                    &image,
                    &mut pcs,
                    Some(&mut trust),
                );
                let frames = pcs.get(..r.frames)?.to_vec();
                let rules = frames
                    .iter()
                    .enumerate()
                    .map(|(i, &a)| {
                        let at = if i == 0 { a } else { a.wrapping_sub(1) };
                        table
                            .lookup(at)
                            .map_or_else(RuleFacts::default, |(m, rule)| {
                                let pc = Op::Reg(unwind_core::x86_64::Reg::Pc as u8);
                                let pc_dependent_cfa = match rule.cfa {
                                    unwind_core::x86_64::CfaRule::Expr(e) => {
                                        table.expr(m, e).is_some_and(|x| x.ops().contains(&pc))
                                    }
                                    _ => false,
                                };
                                RuleFacts {
                                    found: true,
                                    signal_frame: rule.signal_frame,
                                    exidx: false,
                                    pc_dependent_cfa,
                                }
                            })
                    })
                    .collect();
                Some(OurWalk {
                    trust: trust.get(..r.frames)?.to_vec(),
                    frames,
                    rules,
                    stop: r.stop,
                })
            }
            Context::Arm(c) => {
                let table = match self.arm.get(&sample.modules) {
                    Some(t) => t.clone(),
                    None => {
                        let t = Arc::new(Self::place(
                            &mut self.bases,
                            &mut self.arm_rules,
                            &sample.modules,
                            sample.arch,
                            |p| unwind_dwarf::load_elf_file_arm(p).ok().map(|l| l.rules),
                        )?);
                        self.arm.insert(sample.modules.clone(), t.clone());
                        t
                    }
                };
                let r = |i: usize| c.iregs.get(i).copied().unwrap_or(0);
                let thumb = (c.cpsr >> 5) & 1;
                let regs = unwind_core::arm::Regs {
                    pc: r(15) | thumb,
                    lr: r(14),
                    sp: r(13),
                    r12: r(12),
                    r11: r(11),
                    r7: r(7),
                };
                let mut cache = Cache::new();
                let res = unwind_core::arm::unwind(
                    &table,
                    &mut cache,
                    regs,
                    &image,
                    &mut pcs,
                    Some(&mut trust),
                );
                let frames = pcs.get(..res.frames)?.to_vec();
                let rules = frames
                    .iter()
                    .enumerate()
                    .map(|(i, &a)| {
                        let a = a & !1;
                        let at = if i == 0 { a } else { a.wrapping_sub(1) };
                        table
                            .lookup(at)
                            .map_or_else(RuleFacts::default, |(_, rule)| RuleFacts {
                                found: true,
                                signal_frame: rule.signal_frame,
                                exidx: rule.source == unwind_core::arm::Source::Exidx,
                                pc_dependent_cfa: false,
                            })
                    })
                    .collect();
                Some(OurWalk {
                    trust: trust.get(..res.frames)?.to_vec(),
                    frames,
                    rules,
                    stop: res.stop,
                })
            }
        }
    }
}
