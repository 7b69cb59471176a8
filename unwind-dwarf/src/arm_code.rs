//! A 32-bit ARM module's code as prologue analysis (`unwind-arm-prologue`) reads it: the bytes
//! of its executable sections, its functions and the instruction set each is written in, and
//! the data (literal pools) inside them.

use object::{Object as _, ObjectSymbol as _, SymbolKind};
use unwind_arm_exidx::ExidxSections;
use unwind_arm_prologue::{analyze, analyze_to_confirm, Analysis, Isa};

/// The rule sources of a 32-bit ARM module besides DWARF CFI ([`crate::DwarfArch::ExtraSections`]
/// of [`crate::Arm`]): its EHABI index and its code.
#[derive(Clone, Copy, Debug, Default)]
pub struct ArmSections<'a> {
    /// `.ARM.exidx` and `.ARM.extab`, if the module has them.
    pub exidx: Option<ExidxSections<'a>>,
    /// Its code, if it can be read: EXIDX functions whose instructions agree with their
    /// entry get exact rows in their prologues and epilogues, and functions that no table
    /// describes get rows from their instructions.
    pub code: Option<&'a ArmCode<'a>>,
}

impl<'a> From<ExidxSections<'a>> for ArmSections<'a> {
    /// The index alone (a module read from memory, whose code is not read).
    fn from(exidx: ExidxSections<'a>) -> Self {
        ArmSections {
            exidx: Some(exidx),
            code: None,
        }
    }
}

/// One function of the symbol table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArmFunction {
    /// First address (bit 0 clear).
    pub start: u64,
    /// End (exclusive).
    pub end: u64,
    /// Its instruction set (bit 0 of the symbol's value).
    pub isa: Isa,
}

/// What analysis needs of a module's file: code bytes by address, functions, instruction sets
/// and data ranges. Built from an ELF file by [`ArmCode::read`], or by hand.
#[derive(Clone, Debug, Default)]
pub struct ArmCode<'a> {
    /// The executable sections' contents, by file address, sorted.
    pub sections: Vec<(u64, &'a [u8])>,
    /// The functions of `.symtab` (empty for a stripped file), sorted by start.
    pub functions: Vec<ArmFunction>,
    /// Where each instruction set starts, sorted: ARM mapping symbols (`$a`, `$t`) and
    /// function symbols of `.symtab` and `.dynsym`. The instruction set of code that no
    /// symbol names (a stripped file's internal functions) is guessed from the mark before it.
    pub isa_marks: Vec<(u64, Isa)>,
    /// Data inside code (`$d` mapping symbols, up to the next mapping symbol), sorted.
    pub data: Vec<(u64, u64)>,
    /// Where functions start (bit 0 clear), by the function symbols of `.symtab` and
    /// `.dynsym`, sorted: the frame there is a function's entry, whatever the code before it.
    pub function_starts: Vec<u64>,
    /// The targets of direct calls (`bl`, `blx <label>`) found in the code (bit 0 clear),
    /// sorted: the entries of a stripped library's internal functions, which no symbol names.
    /// Calls are found at every alignment ([`unwind_arm_prologue::calls::return_sites`]), so
    /// some targets are data read as a call: used only where the reading must be confirmed by
    /// the function's exits ([`ArmCode::analyze_with_callees`]).
    pub call_targets: Vec<u64>,
    /// The addresses right after a function's end (a return, then at most two no-ops of
    /// padding; not a branch, which also ends a loop entered at its test), sorted: the entries of the functions that no symbol
    /// names and no direct call reaches (callbacks, called through pointers). Found at every
    /// halfword, so some are not entries: used as [`ArmCode::call_targets`] are.
    pub after_ends: Vec<u64>,
}

impl<'a> ArmCode<'a> {
    /// Reads `elf`'s code, functions and mapping symbols (`code_end`: where its code ends, for
    /// the last function without a size).
    pub fn read(elf: &object::File<'a>, code_end: Option<u64>) -> Self {
        let sections = crate::elf::code_sections(elf);
        let functions = crate::elf::function_symbols(elf, code_end)
            .into_iter()
            .map(|(start, end, thumb)| ArmFunction {
                start,
                end,
                isa: if thumb { Isa::Thumb } else { Isa::Arm },
            })
            .collect();
        let mut marks: Vec<(u64, char)> = Vec::new();
        for s in elf.symbols().chain(elf.dynamic_symbols()) {
            let Ok(name) = s.name() else { continue };
            if let Some(kind) = name.strip_prefix('$').and_then(|n| n.chars().next()) {
                marks.push((s.address(), kind));
            } else if s.kind() == SymbolKind::Text && s.is_definition() {
                marks.push((
                    s.address() & !1,
                    if s.address() & 1 != 0 { 't' } else { 'a' },
                ));
            }
        }
        let function_starts = crate::elf::function_starts(elf);
        marks.sort_unstable();
        marks.dedup();
        let isa_marks = marks
            .iter()
            .filter_map(|&(a, k)| match k {
                'a' => Some((a, Isa::Arm)),
                't' => Some((a, Isa::Thumb)),
                _ => None,
            })
            .collect();
        // A `$d` range ends at the next mark that is not data (a mapping symbol or a
        // function), or at the end of its section.
        let section_end = |a: u64| {
            let i = sections.partition_point(|s| s.0 <= a);
            let (start, data) = sections.get(i.checked_sub(1)?)?;
            Some(start.saturating_add(data.len() as u64))
        };
        let data = marks
            .iter()
            .enumerate()
            .filter(|(_, m)| m.1 == 'd')
            .filter_map(|(i, &(a, _))| {
                let end = marks
                    .get(i.saturating_add(1)..)?
                    .iter()
                    .find(|m| m.0 > a && m.1 != 'd')
                    .map(|m| m.0);
                let end = match (end, section_end(a)) {
                    (Some(e), Some(s)) => e.min(s),
                    (e, s) => e.or(s)?,
                };
                (end > a).then_some((a, end))
            })
            .collect();
        let mut code = ArmCode {
            sections,
            functions,
            isa_marks,
            data,
            function_starts,
            call_targets: Vec::new(),
            after_ends: Vec::new(),
        };
        code.after_ends = code.find_after_ends();
        code.call_targets = code.find_call_targets();
        code
    }

    /// The code bytes of `[start, end)`, if one section holds them all.
    pub fn bytes(&self, start: u64, end: u64) -> Option<&'a [u8]> {
        crate::elf::code_bytes(&self.sections, start, end)
    }

    /// The instruction set of the last mark at or before `addr`, if any.
    pub fn isa_at(&self, addr: u64) -> Option<Isa> {
        let i = self.isa_marks.partition_point(|m| m.0 <= addr);
        self.isa_marks.get(i.checked_sub(1)?).map(|m| m.1)
    }

    /// Analyzes the code of `[start, end)` as `isa`, if it can be read (each function the
    /// symbols name inside it starting from its entry).
    pub fn analyze(&self, start: u64, end: u64, isa: Isa) -> Option<Analysis> {
        let code = self.bytes(start, end)?;
        let starts = inside(&self.function_starts, start, end);
        Some(analyze(code, start, isa, self.data_in(start, end), starts))
    }

    /// Like [`ArmCode::analyze`] ([`analyze_to_confirm`]: loops read again), with the targets
    /// of calls as function starts too ([`ArmCode::call_targets`]), for readings that only
    /// count where the functions' exits confirm them ([`Analysis::confirmed_rules`]). A target that is not a function's entry
    /// (data read as a call) cuts the reading of the function around it short: the part before
    /// it loses the exits after it, and the part after it, read from an entry frame that is not
    /// the frame there, leaves through exits that do not confirm it. Either way its rows get no
    /// rule, never a wrong one.
    pub fn analyze_with_callees(&self, start: u64, end: u64, isa: Isa) -> Option<Analysis> {
        let code = self.bytes(start, end)?;
        let mut starts = inside(&self.function_starts, start, end).to_vec();
        starts.extend_from_slice(inside(&self.call_targets, start, end));
        starts.extend_from_slice(inside(&self.after_ends, start, end));
        starts.sort_unstable();
        starts.dedup();
        Some(analyze_to_confirm(
            code,
            start,
            isa,
            self.data_in(start, end),
            &starts,
        ))
    }

    /// The targets of the direct calls in the code that land in it (bit 0 clear), sorted. A
    /// call counts where it is read in the instruction set of the mark before it (Thumb calls in
    /// Thumb code; a stripped Thumb library's words read as A32 are mostly noise), or anywhere
    /// if there is no mark.
    fn find_call_targets(&self) -> Vec<u64> {
        let is_code = |t: u64| self.bytes(t, t.saturating_add(2)).is_some();
        let mut sites = Vec::new();
        for &(base, bytes) in &self.sections {
            unwind_arm_prologue::calls::return_sites(bytes, base, &is_code, &mut sites);
        }
        let mut targets: Vec<u64> = sites
            .into_iter()
            .filter(|&(site, _)| {
                // A Thumb call's return site has bit 0 set; it follows the call.
                let isa = if site & 1 != 0 { Isa::Thumb } else { Isa::Arm };
                self.isa_at(site.saturating_sub(2) & !1)
                    .is_none_or(|mark| mark == isa)
            })
            .filter_map(|(_, t)| t)
            .map(|t| t & !1)
            .collect();
        targets.sort_unstable();
        // Data read as a call lands anywhere; two such reads rarely land at the same address,
        // nor does one land right after a function's end. (Internal functions called once are
        // mostly inlined by the compiler; those that are not, libgcc's `search_EIT_table` say,
        // follow another function's return.)
        let mut starts: Vec<u64> = targets
            .windows(2)
            .filter_map(|w| match *w {
                [a, b] if a == b => Some(a),
                _ => None,
            })
            .collect();
        starts.extend(
            targets
                .iter()
                .copied()
                .filter(|t| self.after_ends.binary_search(t).is_ok()),
        );
        starts.sort_unstable();
        starts.dedup();
        starts
    }

    /// [`ArmCode::after_ends`]: in each section, read as the instruction set of the mark
    /// before each position (Thumb if none). An address that a nearby branch (within 4 KiB)
    /// goes to or jumps over is code of the function around it (after an early return, or
    /// after a literal pool whose data reads as a return), not an entry.
    fn find_after_ends(&self) -> Vec<u64> {
        let spans = self.branch_spans();
        let mut out = Vec::new();
        for &(base, bytes) in &self.sections {
            let mut marks = MarkCursor::new(&self.isa_marks);
            let half = |i: usize| -> Option<u16> {
                let b = bytes.get(i..i.checked_add(2)?)?;
                Some(u16::from_le_bytes(b.try_into().ok()?))
            };
            let word = |i: usize| -> Option<u32> {
                let b = bytes.get(i..i.checked_add(4)?)?;
                Some(u32::from_le_bytes(b.try_into().ok()?))
            };
            let mut i = 0usize;
            while i < bytes.len() {
                let at = base.wrapping_add(i as u64);
                let isa = marks.at(at);
                // The length of the end instruction at `i`, if it is one; then the padding.
                let (end_len, nops): (Option<usize>, [u32; 2]) = match isa {
                    Isa::Thumb => {
                        let h = half(i).unwrap_or(0);
                        let next = half(i.wrapping_add(2)).unwrap_or(0);
                        // A return in an IT block is conditional: the code after it is the
                        // function's too (an IT is at most 3 halfwords before it).
                        let in_it = (1..=3).any(|k| {
                            i.checked_sub(2usize.saturating_mul(k))
                                .and_then(half)
                                .is_some_and(|p| p & 0xff00 == 0xbf00 && p & 0xf != 0)
                        });
                        let len = if in_it {
                            None
                        } else if h == 0x4770 || h & 0xff00 == 0xbd00 {
                            Some(2)
                        } else if h == 0xe8bd && next & 0x8000 != 0 {
                            Some(4)
                        } else {
                            None
                        };
                        (len, [0xbf00, 0x46c0])
                    }
                    Isa::Arm => {
                        let w = if at.is_multiple_of(4) {
                            word(i).unwrap_or(0)
                        } else {
                            0
                        };
                        let end =
                            w == 0xe12f_ff1e || w & 0xffff_8000 == 0xe8bd_8000 || w == 0xe49d_f004;
                        (end.then_some(4), [0xe1a0_0000, 0xe320_f000])
                    }
                };
                let step = if isa == Isa::Arm { 4 } else { 2 };
                let Some(len) = end_len else {
                    i = i.saturating_add(step);
                    continue;
                };
                let mut next = i.saturating_add(len);
                for _ in 0..2 {
                    let pad = match isa {
                        Isa::Thumb => half(next).map(u32::from),
                        Isa::Arm => word(next),
                    };
                    if pad.is_some_and(|p| nops.contains(&p)) {
                        next = next.saturating_add(step);
                    }
                }
                if next < bytes.len() {
                    out.push(base.wrapping_add(next as u64));
                }
                i = i.saturating_add(step);
            }
        }
        out.sort_unstable();
        out.dedup();
        out.retain(|&a| {
            // The merged span starting last at or before `a`.
            let i = spans.partition_point(|s| s.0 <= a);
            i.checked_sub(1)
                .and_then(|i| spans.get(i))
                .is_none_or(|s| a > s.1)
        });
        out
    }

    /// The stretches `[low, high]` between the direct branches that do not link (`b`,
    /// `b<cond>`, `cbz`, `cbnz`, `b.w`) and their targets, for branches within 4 KiB, merged
    /// and sorted; read at every position in the instruction set of the mark before it (Thumb
    /// if none).
    fn branch_spans(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let sext = |v: u32, bits: u32| -> i64 {
            let up = 32u32.wrapping_sub(bits);
            i64::from(((v << up) as i32) >> up)
        };
        for &(base, bytes) in &self.sections {
            let mut marks = MarkCursor::new(&self.isa_marks);
            let half = |i: usize| -> Option<u32> {
                let b = bytes.get(i..i.checked_add(2)?)?;
                Some(u32::from(u16::from_le_bytes(b.try_into().ok()?)))
            };
            let mut i = 0usize;
            while i < bytes.len() {
                let at = base.wrapping_add(i as u64);
                let (Some(h), isa) = (half(i), marks.at(at)) else {
                    break;
                };
                // Thumb's PC reads 4 ahead, ARM's 8.
                let target = match isa {
                    Isa::Thumb => {
                        let next = half(i.wrapping_add(2)).unwrap_or(0);
                        if h & 0xf000 == 0xd000 && h & 0x0e00 != 0x0e00 {
                            Some(sext(h & 0xff, 8).wrapping_mul(2)) // b<cond>
                        } else if h & 0xf800 == 0xe000 {
                            Some(sext(h & 0x7ff, 11).wrapping_mul(2)) // b
                        } else if h & 0xf500 == 0xb100 {
                            Some(i64::from(((h >> 9) & 1) << 6 | ((h >> 3) & 0x1f) << 1))
                        // cbz, cbnz
                        } else if h & 0xf800 == 0xf000 && next & 0xd000 == 0x9000 {
                            // b.w (T4): S:I1:I2:imm10:imm11:0, I = !(J ^ S).
                            let s = (h >> 10) & 1;
                            let i1 = !((next >> 13) & 1 ^ s) & 1;
                            let i2 = !((next >> 11) & 1 ^ s) & 1;
                            let v = s << 24
                                | i1 << 23
                                | i2 << 22
                                | (h & 0x3ff) << 12
                                | (next & 0x7ff) << 1;
                            Some(sext(v, 25))
                        } else if h & 0xf800 == 0xf000
                            && next & 0xd000 == 0x8000
                            && h & 0x0380 != 0x0380
                        {
                            // b<cond>.w (T3): S:J2:J1:imm6:imm11:0.
                            let v = ((h >> 10) & 1) << 20
                                | ((next >> 11) & 1) << 19
                                | ((next >> 13) & 1) << 18
                                | (h & 0x3f) << 12
                                | (next & 0x7ff) << 1;
                            Some(sext(v, 21))
                        } else {
                            None
                        }
                        .map(|off| at.wrapping_add(4).wrapping_add_signed(off))
                    }
                    Isa::Arm => {
                        let w = h | half(i.wrapping_add(2)).unwrap_or(0) << 16;
                        // b and b<cond> (not bl, not the unconditional-space blx).
                        (at.is_multiple_of(4) && w & 0x0f00_0000 == 0x0a00_0000 && w >> 28 != 0xf)
                            .then(|| {
                                at.wrapping_add(8)
                                    .wrapping_add_signed(sext(w & 0xff_ffff, 24).wrapping_mul(4))
                            })
                    }
                };
                if let Some(t) = target.filter(|t| t.abs_diff(at) < 4096) {
                    out.push((t.min(at), t.max(at)));
                }
                i = i.saturating_add(2);
            }
        }
        crate::plt::merged(out)
    }

    /// The data ranges overlapping `[start, end)`.
    fn data_in(&self, start: u64, end: u64) -> &[(u64, u64)] {
        let lo = self.data.partition_point(|d| d.1 <= start);
        let hi = self.data.partition_point(|d| d.0 < end);
        self.data.get(lo..hi).unwrap_or(&[])
    }
}

/// The instruction set at addresses visited in increasing order (as [`ArmCode::isa_at`], Thumb
/// where no mark is before), without a search at each.
struct MarkCursor<'m> {
    marks: &'m [(u64, Isa)],
    next: usize,
}

impl<'m> MarkCursor<'m> {
    fn new(marks: &'m [(u64, Isa)]) -> Self {
        MarkCursor { marks, next: 0 }
    }

    fn at(&mut self, addr: u64) -> Isa {
        while self.marks.get(self.next).is_some_and(|m| m.0 <= addr) {
            self.next = self.next.saturating_add(1);
        }
        self.next
            .checked_sub(1)
            .and_then(|i| self.marks.get(i))
            .map_or(Isa::Thumb, |m| m.1)
    }
}

/// The addresses of `sorted` in `(start, end)`.
fn inside(sorted: &[u64], start: u64, end: u64) -> &[u64] {
    let lo = sorted.partition_point(|&s| s <= start);
    let hi = sorted.partition_point(|&s| s < end);
    sorted.get(lo..hi).unwrap_or(&[])
}
