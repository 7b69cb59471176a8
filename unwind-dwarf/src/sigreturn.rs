//! The kernel's signal return trampolines, recognised by their instructions (as libgcc and
//! libunwindstack recognise them) where no unwind table describes them right: aarch64's vdso
//! `__kernel_rt_sigreturn`, whose CFI since Linux 5.x describes a frame record that skips the
//! interrupted function, qemu-user's trampoline page, which has none, and 32-bit ARM's
//! restorers (bionic's `__restore`, glibc's `__default_sa_restorer`), whose EHABI entries
//! restore the registers but do not say that the caller's PC is the interrupted instruction.

use unwind_core::expr::{Expr, Op};
use unwind_core::table::{ModuleRules, ModuleRulesBuilder, TableError, TableRule};

/// How far a trampoline's rows reach past its first instruction (every form's `rows` pushes
/// `[from, at + 8)`: its two instructions, and a Thumb form's padding).
const TRAMPOLINE_ROWS: u64 = 8;

/// One form of an architecture's signal return trampoline, found by its instructions.
pub struct SignalTrampoline<R: 'static> {
    /// Its instructions, from the first: a copy of them is the trampoline.
    pub code: &'static [u8],
    /// The alignment of its first instruction (4; 2 for Thumb code).
    pub align: usize,
    /// Pushes the rows of the trampoline whose first instruction is at `at` (an SVMA of the
    /// module being built), from `from` (at or before `at`) to `at + 8`.
    pub rows: fn(&mut ModuleRulesBuilder<R>, u64, u64) -> Result<(), TableError>,
}

impl<R: TableRule> SignalTrampoline<R> {
    /// Pushes the rows of every copy of any of `forms` in `code` (at SVMA `svma`); returns how
    /// many there are. One pass over the bytes, a form compared only where its first byte is
    /// (a module's whole code is searched).
    pub fn rows_of_any(
        forms: &[SignalTrampoline<R>],
        code: &[u8],
        svma: u64,
        rules: &mut ModuleRulesBuilder<R>,
    ) -> Result<usize, TableError> {
        let mut lead = [false; 256];
        for form in forms {
            if let Some(&b) = form.code.first() {
                if let Some(l) = lead.get_mut(usize::from(b)) {
                    *l = true;
                }
            }
        }
        let mut copies = 0usize;
        for (i, &byte) in code.iter().enumerate() {
            if lead.get(usize::from(byte)) != Some(&true) {
                continue;
            }
            for form in forms {
                if form.code.first() != Some(&byte) {
                    continue;
                }
                let at = svma.wrapping_add(i as u64);
                let aligned = at & (form.align.max(1) as u64).wrapping_sub(1) == 0;
                if aligned && code.get(i..i.saturating_add(form.code.len())) == Some(form.code) {
                    let from = at.saturating_sub(4).max(svma);
                    (form.rows)(rules, from, at)?;
                    // Over whatever rows were pushed before, there (an EHABI entry of the
                    // restorer, or the vdso's CFI of its trampoline, may start earlier and
                    // would be kept by the build).
                    if let Some(rule) = rules.rule_at(at) {
                        rules.rewrite(from, at.saturating_add(TRAMPOLINE_ROWS), |_| rule)?;
                    }
                    copies = copies.saturating_add(1);
                }
            }
        }
        Ok(copies)
    }

    /// `rules` with the rows of every copy of any of `forms` in the pieces of code `code`
    /// (`(svma, bytes)`) in place of what `rules` say there (the vdso's CFI of its trampoline
    /// describes a frame record, which skips the interrupted function); `rules` unchanged if
    /// there is none.
    fn replacing_in(
        forms: &[SignalTrampoline<R>],
        rules: ModuleRules<R>,
        code: &[(u64, &[u8])],
    ) -> Result<ModuleRules<R>, TableError> {
        let mut b = ModuleRulesBuilder::new();
        // The module's expressions first, so that its rules' indices still name them; then its
        // rows, which the trampolines' rows rewrite where they are.
        for e in rules.exprs() {
            b.add_expr(*e)?;
        }
        for (from, to, rule) in rules.extents() {
            b.push(from, to, rule)?;
        }
        let mut copies = 0usize;
        for &(svma, bytes) in code {
            copies = copies.saturating_add(Self::rows_of_any(forms, bytes, svma, &mut b)?);
        }
        if copies == 0 {
            return Ok(rules);
        }
        b.build()
    }

    /// `rules` of the ELF file `elf`, with the rows of every copy of any of `forms` in its
    /// executable segments in place of what `rules` say there; `rules` unchanged where there
    /// is none, or if the rows cannot be added (copied only then).
    pub fn replacing_in_elf(
        forms: &[SignalTrampoline<R>],
        rules: ModuleRules<R>,
        elf: &object::File<'_>,
    ) -> ModuleRules<R> {
        use object::{Object, ObjectSegment, SegmentFlags};
        let code: Vec<(u64, &[u8])> = elf
            .segments()
            .filter(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags, .. } if p_flags.contains(object::elf::PF_X)))
            .filter_map(|s| Some((s.address(), s.data().ok()?)))
            .collect();
        // Found first, into a scratch table: the module's rules are copied only for a module
        // that has a trampoline.
        let mut scratch = ModuleRulesBuilder::new();
        let found = code.iter().any(|&(svma, bytes)| {
            Self::rows_of_any(forms, bytes, svma, &mut scratch).is_ok_and(|n| n > 0)
        });
        if !found {
            return rules;
        }
        Self::replacing_in(forms, rules.clone(), &code).unwrap_or(rules)
    }
}

/// Where the interrupted registers are in aarch64's `ucontext_t` (the kernel's and glibc's):
/// `uc_mcontext` starts after `uc_flags`, `uc_link`, the 24-byte `stack_t`, the 8-byte signal
/// mask and 120 bytes of padding (the kernel's room for a larger `sigset_t`), 16-aligned, at
/// 176; its `struct sigcontext` holds `fault_address`, then `regs[31]`, `sp`, `pc` and
/// `pstate`. This is the offset of `regs[0]`.
pub const AARCH64_UCONTEXT_REGS: usize = 176 + 8;

/// aarch64's `rt_sigreturn` call, as the vdso's `__kernel_rt_sigreturn` and qemu-user's own
/// trampoline page hold it: `mov x8, #139; svc #0`.
pub const AARCH64: &[SignalTrampoline<unwind_core::aarch64::Rule>] = &[SignalTrampoline {
    code: &[0x68, 0x11, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4],
    align: 4,
    rows: aarch64_rows,
}];

/// Pushes the rows of the aarch64 trampoline whose first instruction is at `at` into `rules`,
/// from `from` (at or before `at`: the vdso's trampoline follows a `nop` that a return address
/// minus one falls in) to its end: the interrupted thread's registers are in the kernel's
/// `struct rt_sigframe` at SP (a 128-byte `siginfo_t`, then the `ucontext_t`), its PC exact.
fn aarch64_rows(
    rules: &mut ModuleRulesBuilder<unwind_core::aarch64::Rule>,
    from: u64,
    at: u64,
) -> Result<(), TableError> {
    use unwind_core::aarch64::{CfaRule, Reg, RegRule, Rule};
    const FRAME_REGS: i64 = 128 + AARCH64_UCONTEXT_REGS as i64;
    const SP: i64 = 31;
    const PC: i64 = 32;
    let slot = |i: i64| FRAME_REGS.saturating_add(i.saturating_mul(8));
    let at_sp = |i| Expr::new(&[Op::Reg(Reg::Sp as u8), Op::Const(slot(i)), Op::Add]);
    let cfa = Expr::new(&[
        Op::Reg(Reg::Sp as u8),
        Op::Const(slot(SP)),
        Op::Add,
        Op::Deref,
    ]);
    let (Ok(cfa), Ok(pc), Ok(lr), Ok(fp)) = (cfa, at_sp(PC), at_sp(30), at_sp(29)) else {
        return Err(TableError::TooManyRules);
    };
    let rule = Rule {
        cfa: CfaRule::Expr(rules.add_expr(cfa)?),
        ra: RegRule::Expr(rules.add_expr(pc)?),
        lr: RegRule::Expr(rules.add_expr(lr)?),
        fp: RegRule::Expr(rules.add_expr(fp)?),
        ra_signed: false,
        signal_frame: true,
        from_instructions: false,
    };
    rules.push(from, at.saturating_add(8), rule)
}

/// 32-bit ARM's `sigreturn` (119) and `rt_sigreturn` (173) calls, as the C libraries'
/// restorers hold them: `mov r7, #N; svc #0` in ARM code, `movs r7, #N; svc #0` in Thumb code
/// (the forms libunwindstack's `StepIfSignalHandler` recognises: bionic's), and Thumb-2's
/// `mov.w r7, #N; svc #0` (glibc's).
pub const ARM: &[SignalTrampoline<unwind_core::arm::Rule>] = &[
    SignalTrampoline {
        code: &[0x77, 0x70, 0xa0, 0xe3, 0x00, 0x00, 0x00, 0xef],
        align: 4,
        rows: arm_rows::<false>,
    },
    SignalTrampoline {
        code: &[0xad, 0x70, 0xa0, 0xe3, 0x00, 0x00, 0x00, 0xef],
        align: 4,
        rows: arm_rows::<true>,
    },
    SignalTrampoline {
        code: &[0x77, 0x27, 0x00, 0xdf],
        align: 2,
        rows: arm_rows::<false>,
    },
    SignalTrampoline {
        code: &[0xad, 0x27, 0x00, 0xdf],
        align: 2,
        rows: arm_rows::<true>,
    },
    // Thumb-2 `mov.w r7, #N; svc #0`, as glibc's `__default_sa_restorer` and
    // `__default_rt_sa_restorer` hold them.
    SignalTrampoline {
        code: &[0x4f, 0xf0, 0x77, 0x07, 0x00, 0xdf],
        align: 2,
        rows: arm_rows::<false>,
    },
    SignalTrampoline {
        code: &[0x4f, 0xf0, 0xad, 0x07, 0x00, 0xdf],
        align: 2,
        rows: arm_rows::<true>,
    },
];

/// Pushes the rows of an ARM restorer whose first instruction is at `at`, from `from` to its
/// end: the interrupted registers are in the `ucontext_t` at SP (after a 128-byte `siginfo_t`
/// for `rt_sigreturn`, `RT`), whose `uc_mcontext` (a `struct sigcontext`: `trap_no`,
/// `error_code`, `oldmask`, then r0 to r15) starts 20 bytes in; the caller's PC is exact.
fn arm_rows<const RT: bool>(
    rules: &mut ModuleRulesBuilder<unwind_core::arm::Rule>,
    from: u64,
    at: u64,
) -> Result<(), TableError> {
    use unwind_core::arm::{CfaRule, Reg, RegRule, Rule, Source};
    let r0: i64 = if RT { 128 + 20 + 12 } else { 20 + 12 };
    let slot = |r: i64| r0.saturating_add(r.saturating_mul(4));
    let at_sp = |r| Expr::new(&[Op::Reg(Reg::Sp as u8), Op::Const(slot(r)), Op::Add]);
    let cfa = Expr::new(&[
        Op::Reg(Reg::Sp as u8),
        Op::Const(slot(13)),
        Op::Add,
        Op::Deref,
    ]);
    let (Ok(cfa), Ok(pc), Ok(lr), Ok(r12), Ok(r11), Ok(r7)) =
        (cfa, at_sp(15), at_sp(14), at_sp(12), at_sp(11), at_sp(7))
    else {
        return Err(TableError::TooManyRules);
    };
    let rule = Rule {
        cfa: CfaRule::Expr(rules.add_expr(cfa)?),
        pc: RegRule::Expr(rules.add_expr(pc)?),
        lr: RegRule::Expr(rules.add_expr(lr)?),
        sp: RegRule::ValOffset(0),
        r12: RegRule::Expr(rules.add_expr(r12)?),
        r11: RegRule::Expr(rules.add_expr(r11)?),
        r7: RegRule::Expr(rules.add_expr(r7)?),
        source: Source::Instructions,
        signal_frame: true,
    };
    rules.push(from, at.saturating_add(8), rule)
}

#[cfg(test)]
mod tests {
    use super::*;
    use unwind_core::aarch64::{CfaRule, RegRule, Rule};

    /// The vdso's aarch64 trampoline: a `nop`, then `mov x8, #139; svc #0`, which its own CFI
    /// describes as a frame record at x29 (Linux 5.x); the trampoline's rows replace that CFI
    /// from the `nop` on (a handler's return address minus one falls in it), the rest of the
    /// module's rules kept, expressions included.
    #[test]
    fn the_vdso_trampoline_replaces_its_cfi() {
        let t = AARCH64;
        let record = Rule {
            cfa: CfaRule::FpOffset(0),
            ra: RegRule::Offset(8),
            lr: RegRule::Offset(8),
            fp: RegRule::Offset(0),
            ra_signed: false,
            signal_frame: true,
            from_instructions: false,
        };
        let mut b = ModuleRulesBuilder::new();
        let e = b.add_expr(Expr::new(&[Op::Const(1)]).unwrap()).unwrap();
        b.push(0x500, 0x50c, record).unwrap();
        let other = Rule {
            cfa: CfaRule::Expr(e),
            ..Rule::default()
        };
        b.push(0x600, 0x610, other).unwrap();
        let rules = b.build().unwrap();
        let mut code = vec![0u8; 0x20];
        code[0x04..0x08].copy_from_slice(&0xd503_201fu32.to_le_bytes()); // nop
        code[0x08..0x10].copy_from_slice(t[0].code);
        let replaced = SignalTrampoline::replacing_in(t, rules, &[(0x4f8, &code)]).unwrap();
        let tramp = replaced.lookup(0x500).unwrap();
        assert!(tramp.signal_frame && matches!(tramp.cfa, CfaRule::Expr(_)));
        assert_eq!(replaced.lookup(0x4fc), Some(tramp), "the nop before it");
        assert_eq!(replaced.lookup(0x4fb), None);
        assert_eq!(replaced.lookup(0x507), Some(tramp));
        assert_eq!(
            replaced.lookup(0x508),
            Some(record),
            "after the trampoline: the CFI"
        );
        assert_eq!(replaced.lookup(0x600), Some(other));
        assert_eq!(replaced.expr(e), Some(&Expr::new(&[Op::Const(1)]).unwrap()));
        // No trampoline in the code: the rules as they were.
        let again =
            SignalTrampoline::replacing_in(t, replaced.clone(), &[(0x4f8, &[0; 16])]).unwrap();
        assert_eq!(again.lookup(0x500), Some(tramp));
    }
}
