//! Go's own function table, `.gopclntab`: every Go binary has it, stripped or not (Go's
//! runtime needs it for its tracebacks), where `.symtab` and DWARF (`-ldflags=-s -w`, as release
//! builds and container images often have it) may be gone.
//!
//! It gives, per function, its address range, its name, its flags (`TOPFRAME`: the top of a
//! stack; `SPWRITE`: it moves the stack pointer to another stack; `ASM`: hand-written), and its
//! stack-pointer deltas by PC (`pcsp`), from which Go's linker writes the function's
//! `.debug_frame` rows. The layout is Go 1.18's and later (magic `0xfffffff0`, and
//! `0xfffffff1` from Go 1.20, the same layout), as `runtime/symtab.go` and
//! `internal/abi/symtab.go` define it; an older table is [`PclntabError::Version`].
//!
//! The file is not trusted: every offset is checked against the section, a value table that
//! runs past it or decodes to nonsense ends that function's rows, and a count larger than the
//! section can hold is refused.

use std::fmt;

/// What is wrong with a `.gopclntab`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PclntabError {
    /// Shorter than its header.
    Truncated,
    /// A magic number other than Go 1.18's or 1.20's (an older Go, or not a Go table).
    Version(u32),
    /// A pointer size other than 4 or 8, or an instruction size of 0.
    BadHeader,
    /// The header's function count or an offset points outside the section.
    OutOfBounds,
}

impl fmt::Display for PclntabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PclntabError::Truncated => f.write_str(".gopclntab is shorter than its header"),
            PclntabError::Version(m) => write!(
                f,
                ".gopclntab magic {m:#x}: not Go 1.18 or later's (0xfffffff0, 0xfffffff1)"
            ),
            PclntabError::BadHeader => f.write_str(".gopclntab header: bad pointer or code size"),
            PclntabError::OutOfBounds => {
                f.write_str(".gopclntab: a count or offset points outside the section")
            }
        }
    }
}

impl std::error::Error for PclntabError {}

/// The function's flags: the top of a stack (`runtime.goexit`, `runtime.mstart`).
pub const FLAG_TOP_FRAME: u8 = 1 << 0;
/// The function writes the stack pointer other than by adding to it (a stack switch).
pub const FLAG_SP_WRITE: u8 = 1 << 1;
/// Hand-written assembly.
pub const FLAG_ASM: u8 = 1 << 2;

/// A parsed `.gopclntab`.
#[derive(Clone, Copy, Debug)]
pub struct Pclntab<'a> {
    ptr_size: usize,
    min_lc: u32,
    nfunc: usize,
    text_start: u64,
    funcnametab: &'a [u8],
    pctab: &'a [u8],
    /// From `pclnOffset` to the section's end: the function table, then the `_func` records.
    pcln: &'a [u8],
}

/// One function of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoFunction<'a> {
    /// Its first address (a file address).
    pub start: u64,
    /// One past its last (the next function's start).
    pub end: u64,
    /// Its name, as Go's traceback prints it (`main.main`, `runtime.asmcgocall`).
    pub name: &'a str,
    /// Its flags ([`FLAG_TOP_FRAME`], [`FLAG_SP_WRITE`], [`FLAG_ASM`]).
    pub flags: u8,
    /// The offset of its stack-pointer delta table in the value tables.
    pcsp: u32,
}

/// A little-endian unsigned integer of `n` bytes (4 or 8) at `at` of `data`.
fn uint(data: &[u8], at: usize, n: usize) -> Option<u64> {
    let bytes = data.get(at..at.checked_add(n)?)?;
    Some(match n {
        4 => u64::from(u32::from_le_bytes(bytes.try_into().ok()?)),
        _ => u64::from_le_bytes(bytes.try_into().ok()?),
    })
}

/// An unsigned LEB128 of at most 32 bits at the start of `data`, and its length.
fn uvarint(data: &[u8]) -> Option<(u32, usize)> {
    let mut value = 0u32;
    for (i, &b) in data.iter().enumerate().take(5) {
        value |= u32::from(b & 0x7f).checked_shl(7u32.checked_mul(u32::try_from(i).ok()?)?)?;
        if b & 0x80 == 0 {
            return Some((value, i.checked_add(1)?));
        }
    }
    None
}

impl<'a> Pclntab<'a> {
    /// Reads the header of `data`, a `.gopclntab` section; `text` is the file address of Go's
    /// text (`runtime.text`), used where the header's own is 0 (as an external link leaves it).
    pub fn parse(data: &'a [u8], text: u64) -> Result<Self, PclntabError> {
        let magic = uint(data, 0, 4).ok_or(PclntabError::Truncated)? as u32;
        if magic != 0xffff_fff0 && magic != 0xffff_fff1 {
            return Err(PclntabError::Version(magic));
        }
        let (min_lc, ptr_size) = match data.get(6..8) {
            Some(&[lc, ps]) => (u32::from(lc), usize::from(ps)),
            _ => return Err(PclntabError::Truncated),
        };
        if !(ptr_size == 4 || ptr_size == 8) || min_lc == 0 {
            return Err(PclntabError::BadHeader);
        }
        let word = |i: usize| {
            let at = i.checked_mul(ptr_size).and_then(|o| o.checked_add(8));
            at.and_then(|at| uint(data, at, ptr_size))
                .ok_or(PclntabError::Truncated)
        };
        let nfunc = usize::try_from(word(0)?).map_err(|_| PclntabError::OutOfBounds)?;
        let text_start = match word(2)? {
            0 => text,
            t => t,
        };
        let section = |i: usize| -> Result<&'a [u8], PclntabError> {
            let at = usize::try_from(word(i)?).map_err(|_| PclntabError::OutOfBounds)?;
            data.get(at..).ok_or(PclntabError::OutOfBounds)
        };
        let table = Pclntab {
            ptr_size,
            min_lc,
            nfunc,
            text_start,
            funcnametab: section(3)?,
            pctab: section(6)?,
            pcln: section(7)?,
        };
        // The function table: nfunc + 1 pairs of 32-bit offsets.
        let needed = nfunc
            .checked_add(1)
            .and_then(|n| n.checked_mul(8))
            .ok_or(PclntabError::OutOfBounds)?;
        if table.pcln.len() < needed {
            return Err(PclntabError::OutOfBounds);
        }
        Ok(table)
    }

    /// How many functions the table lists.
    pub fn len(&self) -> usize {
        self.nfunc
    }

    /// Whether it lists none.
    pub fn is_empty(&self) -> bool {
        self.nfunc == 0
    }

    /// Function `i` (in address order), or `None` if its record is not readable.
    pub fn function(&self, i: usize) -> Option<GoFunction<'a>> {
        let entry = |i: usize| uint(self.pcln, i.checked_mul(8)?, 4);
        let start = self.text_start.checked_add(entry(i)?)?;
        let end = self.text_start.checked_add(entry(i.checked_add(1)?)?)?;
        let funcoff =
            usize::try_from(uint(self.pcln, i.checked_mul(8)?.checked_add(4)?, 4)?).ok()?;
        // `_func`: entryOff, nameOff, args, deferreturn, pcsp, pcfile, pcln, npcdata,
        // cuOffset, startLine (4 bytes each), then funcID, flag, a pad byte, nfuncdata.
        let record = self.pcln.get(funcoff..funcoff.checked_add(44)?)?;
        let name_off = usize::try_from(uint(record, 4, 4)?).ok()?;
        let pcsp = uint(record, 16, 4)? as u32;
        let flags = *record.get(41)?;
        let name = self.funcnametab.get(name_off..)?;
        let name = name.get(..name.iter().position(|&b| b == 0)?)?;
        Some(GoFunction {
            start,
            end,
            name: std::str::from_utf8(name).ok()?,
            flags,
            pcsp,
        })
    }

    /// Every function whose record is readable, in address order.
    pub fn functions(&self) -> impl Iterator<Item = GoFunction<'a>> + '_ {
        (0..self.nfunc).filter_map(|i| self.function(i))
    }

    /// The stack pointer's distance below its value at `f`'s entry, by address range
    /// `[start, end)`, in address order (the return address a call pushed not included). Ends
    /// early where the table cannot be decoded or leaves the function.
    pub fn sp_deltas(&self, f: &GoFunction<'_>) -> Vec<(u64, u64, i64)> {
        let mut out = Vec::new();
        let Some(mut p) = usize::try_from(f.pcsp)
            .ok()
            .and_then(|at| self.pctab.get(at..))
        else {
            return out;
        };
        if f.pcsp == 0 {
            return out;
        }
        let (mut pc, mut value) = (f.start, -1i64);
        let mut first = true;
        while let Some(&b) = p.first() {
            if b == 0 && !first {
                break;
            }
            first = false;
            let Some((uv, n)) = uvarint(p) else {
                break;
            };
            // Zig-zag: the value's change.
            let change = ((uv >> 1) ^ (uv & 1).wrapping_neg()) as i32;
            value = value.saturating_add(i64::from(change));
            let Some((delta, rest)) = p.get(n..).and_then(|q| {
                let (d, len) = uvarint(q)?;
                Some((d, q.get(len..)?))
            }) else {
                break;
            };
            p = rest;
            let Some(next) = u64::from(delta)
                .checked_mul(u64::from(self.min_lc))
                .and_then(|d| pc.checked_add(d))
                .filter(|&next| next <= f.end)
            else {
                break;
            };
            if next > pc {
                out.push((pc, next, value));
            }
            pc = next;
        }
        out
    }

    /// The size of a pointer on the table's machine.
    pub fn ptr_size(&self) -> usize {
        self.ptr_size
    }
}

/// The `.gopclntab` of `elf`, if it has one: `None` without, the error if it cannot be read.
pub fn of_elf<'a>(elf: &object::File<'a>) -> Option<Result<Pclntab<'a>, PclntabError>> {
    use object::{Object, ObjectSection};
    let section = elf.section_by_name(".gopclntab")?;
    let Ok(data) = section.data() else {
        return Some(Err(PclntabError::OutOfBounds));
    };
    Some(Pclntab::parse(data, 0).map(|t| {
        if t.text_start != 0 {
            return t;
        }
        let text = text_start(elf, section.address(), data, t.ptr_size)
            .or_else(|| elf.section_by_name(".text").map(|s| s.address()))
            .unwrap_or(0);
        Pclntab {
            text_start: text,
            ..t
        }
    }))
}

/// Go's text start (`moduledata.text`, which function entries are offsets from) where the
/// table's header leaves it 0: the symbol `runtime.text`, else the field of the module's
/// `moduledata` (found in the data sections as the record whose first word is the table's
/// address and whose second is its function-name table's), as Go's runtime itself has it. An
/// external link puts C start-up code before Go's text, so `.text`'s start is not it.
fn text_start(elf: &object::File<'_>, pclntab: u64, data: &[u8], ptr: usize) -> Option<u64> {
    use object::{Object, ObjectSection, ObjectSymbol};
    if let Some(s) = elf.symbols().find(|s| s.name() == Ok("runtime.text")) {
        return Some(s.address());
    }
    let names = pclntab.checked_add(uint(data, ptr.checked_mul(3)?.checked_add(8)?, ptr)?)?;
    for name in [".noptrdata", ".data", ".data.rel.ro", ".go.module"] {
        let Some(bytes) = elf.section_by_name(name).and_then(|s| s.data().ok()) else {
            continue;
        };
        let mut at = 0usize;
        while let Some(word) = uint(bytes, at, ptr) {
            // `pcHeader`, then `funcnametab`'s pointer; `text` is word 22 (after six slices,
            // `findfunctab`, `minpc` and `maxpc`).
            let next = at.checked_add(ptr)?;
            if word == pclntab && uint(bytes, next, ptr) == Some(names) {
                let text = at.checked_add(ptr.checked_mul(22)?)?;
                return uint(bytes, text, ptr).filter(|&t| t != 0);
            }
            at = next;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table with two functions at `.text` 0x1000 (its header's text start 0): `a` of 0x20
    /// bytes whose stack pointer goes 0, then 16 from 0x1004, then 0 from 0x101c; `b` of 0x10.
    fn table() -> Vec<u8> {
        let mut t = vec![0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8];
        let header = 8 + 8 * 8;
        let names = b"main.a\0main.b\0";
        // pcsp of `a`: value -1 -> 0 (zig-zag 2) for 4 bytes, +16 (32) for 0x18, -16 (31) for 4.
        let pctab = [0u8, 2, 4, 32, 0x18, 31, 4, 0];
        let names_at = header;
        let pctab_at = names_at + names.len();
        let pcln_at = pctab_at + pctab.len();
        for w in [
            2u64,
            0,
            0,
            names_at as u64,
            0,
            0,
            pctab_at as u64,
            pcln_at as u64,
        ] {
            t.extend_from_slice(&w.to_le_bytes());
        }
        t.extend_from_slice(names);
        t.extend_from_slice(&pctab);
        let funcs_at = 3 * 8;
        let mut pcln = Vec::new();
        for (entry, func) in [(0u32, funcs_at), (0x20, funcs_at + 44), (0x30, 0)] {
            pcln.extend_from_slice(&entry.to_le_bytes());
            pcln.extend_from_slice(&(func as u32).to_le_bytes());
        }
        for (name, pcsp, flags) in [(0u32, 1u32, 0u8), (7, 0, FLAG_TOP_FRAME)] {
            let mut f = [0u8; 44];
            f[4..8].copy_from_slice(&name.to_le_bytes());
            f[16..20].copy_from_slice(&pcsp.to_le_bytes());
            f[41] = flags;
            pcln.extend_from_slice(&f);
        }
        t.extend_from_slice(&pcln);
        t
    }

    #[test]
    fn functions_and_their_stack_pointer_deltas() {
        let data = table();
        let t = Pclntab::parse(&data, 0x1000).unwrap();
        let fs: Vec<GoFunction<'_>> = t.functions().collect();
        assert_eq!(fs.len(), 2);
        assert_eq!(
            (fs[0].name, fs[0].start, fs[0].end),
            ("main.a", 0x1000, 0x1020)
        );
        assert_eq!((fs[1].name, fs[1].flags), ("main.b", FLAG_TOP_FRAME));
        assert_eq!(
            t.sp_deltas(&fs[0]),
            vec![
                (0x1000, 0x1004, 0),
                (0x1004, 0x101c, 16),
                (0x101c, 0x1020, 0)
            ]
        );
        assert!(t.sp_deltas(&fs[1]).is_empty());
    }

    #[test]
    fn a_corrupt_table_is_refused_or_cut_short_never_read_outside() {
        let data = table();
        assert_eq!(
            Pclntab::parse(&data[..7], 0).unwrap_err(),
            PclntabError::Truncated
        );
        let mut old = data.clone();
        old[0] = 0xfb;
        assert_eq!(
            Pclntab::parse(&old, 0).unwrap_err(),
            PclntabError::Version(0xffff_fffb)
        );
        // A function count the section cannot hold.
        let mut many = data.clone();
        many[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Pclntab::parse(&many, 0).is_err());
        // Every truncation parses or fails; none reads outside.
        for len in 0..data.len() {
            if let Ok(t) = Pclntab::parse(&data[..len], 0x1000) {
                for f in t.functions() {
                    let _ = t.sp_deltas(&f);
                }
            }
        }
        // A pc delta past the function's end ends its rows there.
        let mut long = data.clone();
        let pctab_at = 8 + 64 + 14;
        long[pctab_at + 4] = 0x7f;
        let t = Pclntab::parse(&long, 0x1000).unwrap();
        let a = t.function(0).unwrap();
        assert_eq!(t.sp_deltas(&a), vec![(0x1000, 0x1004, 0)]);
    }
}
