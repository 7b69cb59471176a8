//! Names for PLT stubs, which no symbol table lists: `NAME@plt`, as `objdump` and `perf` show
//! them.
//!
//! Each stub jumps through a GOT slot, and the dynamic relocation that fills the slot names the
//! function (x86_64: `R_X86_64_JUMP_SLOT` in `.rela.plt`, or `R_X86_64_GLOB_DAT` for `.plt.got`;
//! ARM: `R_ARM_JUMP_SLOT` in `.rel.plt`). So each stub's slot is decoded from its instructions
//! (rather than assumed from its position, which differs between the lazy `.plt`, the IBT
//! `.plt.sec` and `.plt.got`) and named by the slot's relocation:
//! - x86_64: `jmp *disp32(%rip)` (`ff 25`, after an `endbr64` or a `bnd` prefix where present)
//!   in each 16-byte (`.plt`, `.plt.sec`) or 8-byte (`.plt.got`) entry;
//! - 32-bit ARM: the 12-byte entries after the 20-byte `PLT0`, `add ip, pc, #A; add ip, ip, #B;
//!   ldr pc, [ip, #C]!`, whose slot is the entry's address + 8 + A + B + C; an entry called
//!   from Thumb code starts with 4 more bytes (`bx pc`).

use std::collections::HashMap;

use object::read::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationTarget};

/// `(file address, size, "NAME@plt")` for every PLT stub of `file` whose slot's relocation names
/// a symbol, sorted by address. The PLT sections are those the unwind tables synthesize rows for
/// ([`unwind_dwarf::plt::plt_sections`]).
pub fn plt_symbols(file: &object::File<'_>) -> Vec<(u64, u64, String)> {
    let slots = slot_names(file);
    if slots.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut sections: Vec<u64> = unwind_dwarf::plt::plt_sections(file)
        .iter()
        .map(|p| p.svma)
        .collect();
    // GNU ld's ARM `.iplt`: the stubs of the file's own ifuncs, called from inside it, as
    // `.plt`'s entries are made (armhf glibc's `memcpy` and `strlen` are called through them).
    if file.architecture() == object::Architecture::Arm {
        sections.extend(file.section_by_name(".iplt").map(|s| s.address()));
    }
    for svma in sections {
        let Some((data, align)) = file
            .sections()
            .find(|s| s.address() == svma)
            .and_then(|s| Some((s.data().ok()?, s.align())))
        else {
            continue;
        };
        let base = svma;
        let mut name = |at: u64, size: u64, slot: u64| {
            if let Some(name) = slots.get(&slot) {
                out.push((at, size, format!("{name}@plt")));
            }
        };
        match file.architecture() {
            // Entries as long as the section's alignment: 16 bytes in `.plt` and `.plt.sec`, 8
            // in GNU ld's `.plt.got` (16 with `endbr64`).
            object::Architecture::X86_64 => {
                let entry = align.clamp(8, 16) as usize;
                for (i, code) in data.chunks_exact(entry).enumerate() {
                    let at = base + (i * entry) as u64;
                    if let Some(slot) = x86_64_slot(at, code) {
                        name(at, entry as u64, slot);
                    }
                }
            }
            // Entries are 12 bytes, some with a 4-byte Thumb prefix (`bx pc; b.n`, for callers
            // in Thumb code) that the entry starts with: found by their words.
            object::Architecture::Arm => {
                let mut i = 0;
                while i + 12 <= data.len() {
                    let Some(slot) = arm_slot(base + i as u64, data, i) else {
                        i += 4;
                        continue;
                    };
                    let thumb = i >= 4 && le_word(data, i - 4) == Some(THUMB_PREFIX);
                    let start = if thumb { i - 4 } else { i };
                    name(base + start as u64, (i + 12 - start) as u64, slot);
                    i += 12;
                }
            }
            // Entries are 16 bytes (20 with `bti c` before them), after the 32-byte `PLT0`:
            // found by their words at every 4-byte step.
            object::Architecture::Aarch64 => {
                let mut i = 0;
                while i + 16 <= data.len() {
                    match aarch64_slot(base + i as u64, data, i) {
                        Some(slot) => {
                            const BTI_C: u32 = 0xd503_245f;
                            let bti = i >= 4 && le_word(data, i - 4) == Some(BTI_C);
                            let start = if bti { i - 4 } else { i };
                            name(base + start as u64, (i + 16 - start) as u64, slot);
                            i += 16;
                        }
                        None => i += 4,
                    }
                }
            }
            _ => {}
        }
    }
    out.sort();
    out
}

/// The Thumb prefix of an ARM PLT entry: `bx pc` (`0x4778`) then `b.n` back to it (`0xe7fd`).
const THUMB_PREFIX: u32 = 0xe7fd_4778;

/// The little-endian word at byte `at` of `bytes`.
fn le_word(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// The GOT slot an x86_64 stub at `at` jumps through: the target of its first
/// `jmp *disp32(%rip)`.
fn x86_64_slot(at: u64, code: &[u8]) -> Option<u64> {
    let i = code.windows(2).position(|w| w == [0xff, 0x25])?;
    let disp = i32::from_le_bytes(code.get(i + 2..i + 6)?.try_into().ok()?);
    Some(
        at.wrapping_add(i as u64 + 6)
            .wrapping_add(i64::from(disp) as u64),
    )
}

/// The GOT slot the 32-bit ARM stub at byte `i` of `code` (file address `at`) loads the PC
/// from, if its three words are `add ip, pc, #A`, `add ip, ip, #B` and `ldr pc, [ip, #C]!`
/// (GNU ld's and lld's short entry).
fn arm_slot(at: u64, code: &[u8], i: usize) -> Option<u64> {
    let (a, b, c) = (
        le_word(code, i)?,
        le_word(code, i + 4)?,
        le_word(code, i + 8)?,
    );
    // An ARM modified immediate: 8 bits rotated right by twice the 4-bit rotation.
    let imm = |w: u32| (w & 0xff).rotate_right(((w >> 8) & 0xf) * 2);
    if a & 0xffff_f000 != 0xe28f_c000
        || b & 0xffff_f000 != 0xe28c_c000
        || c & 0xffff_f000 != 0xe5bc_f000
    {
        return None;
    }
    let slot = (at as u32)
        .wrapping_add(8)
        .wrapping_add(imm(a))
        .wrapping_add(imm(b))
        .wrapping_add(c & 0xfff);
    Some(u64::from(slot))
}

/// The GOT slot the AArch64 stub at byte `i` of `code` (file address `at`) branches through, if
/// its four words are `adrp x16, PAGE`, `ldr x17, [x16, #OFF]`, `add x16, x16, #OFF` and
/// `br x17` (GNU ld's and lld's entry; with BTI, `bti c` before them).
fn aarch64_slot(at: u64, code: &[u8], i: usize) -> Option<u64> {
    let (adrp, ldr, add, br) = (
        le_word(code, i)?,
        le_word(code, i + 4)?,
        le_word(code, i + 8)?,
        le_word(code, i + 12)?,
    );
    if adrp & 0x9f00_001f != 0x9000_0010
        || ldr & 0xffc0_03ff != 0xf940_0211
        || add & 0xffc0_03ff != 0x9100_0210
        || br != 0xd61f_0220
    {
        return None;
    }
    // adrp: a signed 21-bit page count (immhi:immlo) from the stub's page.
    let pages = (((adrp >> 5) & 0x7_ffff) << 2 | (adrp >> 29) & 3) as i64;
    let pages = (pages << 43) >> 43;
    let page = (at & !0xfff).wrapping_add_signed(pages << 12);
    // ldr (unsigned offset): a 12-bit count of 8-byte words.
    Some(page.wrapping_add(u64::from((ldr >> 10) & 0xfff) * 8))
}

/// The name of the function each dynamic relocation fills a slot with, by slot address: the
/// relocation's symbol, or for an `IRELATIVE` one (an ifunc of the file's own, which has no
/// symbol) the function at its addend, the resolver, which has the ifunc's name (`strlen`;
/// `objdump` prints `*ABS*+0x9f550@plt`). ARM's relocations (REL) keep the addend in the slot
/// itself.
fn slot_names(file: &object::File<'_>) -> HashMap<u64, String> {
    let mut out = HashMap::new();
    let Some(symbols) = file.dynamic_symbol_table() else {
        return out;
    };
    let Some(relocations) = file.dynamic_relocations() else {
        return out;
    };
    let mut by_address: Option<HashMap<u64, &str>> = None;
    for (slot, relocation) in relocations {
        let name = match relocation.target() {
            RelocationTarget::Symbol(index) => symbols
                .symbol_by_index(index)
                .ok()
                .and_then(|s| s.name().ok())
                .filter(|n| !n.is_empty()),
            RelocationTarget::Absolute if addend(file, slot, &relocation) > 0 => {
                let functions = by_address.get_or_insert_with(|| {
                    // Of several names for one address (`memcmp`, `bcmp`), the public one.
                    let mut names: HashMap<u64, &str> = HashMap::new();
                    for s in file.dynamic_symbols().chain(file.symbols()) {
                        let Ok(name) = s.name() else { continue };
                        if s.kind() != object::SymbolKind::Text || s.is_undefined() {
                            continue;
                        }
                        let rank = |n: &str| (n.starts_with('_'), n.len());
                        let e = names.entry(s.address()).or_insert(name);
                        if rank(name) < rank(e) {
                            *e = name;
                        }
                    }
                    names
                });
                functions
                    .get(&(addend(file, slot, &relocation) as u64))
                    .copied()
            }
            _ => None,
        };
        if let Some(name) = name {
            out.insert(slot, crate::symbolize::demangle(name));
        }
    }
    out
}

/// The addend of `relocation`, which fills the slot at `slot`: its own, or for a REL one (an
/// implicit addend) the word the file holds in the slot.
fn addend(file: &object::File<'_>, slot: u64, relocation: &object::Relocation) -> i64 {
    if !relocation.has_implicit_addend() {
        return relocation.addend();
    }
    unwind_dwarf::word_at(file, slot).map_or(0, i64::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The `NAME@plt` labels `objdump -d` gives the PLT sections' entries, by address.
    fn objdump_plt(objdump: &str, path: &Path, sections: &[&str]) -> Option<Vec<(u64, String)>> {
        let mut out = Vec::new();
        for section in sections {
            let run = std::process::Command::new(objdump)
                .args(["-d", "-j", section])
                .arg(path)
                .output()
                .ok()?;
            if !run.status.success() {
                continue; // no such section
            }
            for line in String::from_utf8_lossy(&run.stdout).lines() {
                let Some((address, label)) = line.split_once(" <") else {
                    continue;
                };
                let Some(name) = label.strip_suffix(">:").filter(|n| n.ends_with("@plt")) else {
                    continue;
                };
                if let Ok(a) = u64::from_str_radix(address.trim(), 16) {
                    out.push((a, name.to_owned()));
                }
            }
        }
        out.sort();
        Some(out)
    }

    /// Every stub `objdump` names is named the same here, in the test binary (lld's `.plt`) and
    /// in the system's C libraries (GNU ld's x86_64 `.plt` and `.plt.got`, and armhf's `.plt`),
    /// and no other.
    #[test]
    fn plt_stubs_are_named_as_objdump_names_them() {
        use unwind_test_support::target;
        let mut files = vec![(
            std::env::current_exe().unwrap(),
            target::host().tool("objdump"),
        )];
        // Every architecture's C library (the cross ones installed by scripts/setup), with that
        // architecture's objdump: GNU ld's x86_64 `.plt` and `.plt.got`, its ARM `.plt` with
        // Thumb prefixes.
        files.extend(
            target::all()
                .iter()
                .map(|t| (Path::new(t.libdir).join("libc.so.6"), t.tool("objdump"))),
        );
        let mut named = 0;
        for (path, objdump) in files {
            let Some(want) = objdump_plt(&objdump, &path, &[".plt", ".plt.sec", ".plt.got"])
                .filter(|_| path.is_file())
            else {
                unwind_test_support::missing(&format!("{objdump} or {}", path.display()));
                continue;
            };
            let data = std::fs::read(&path).unwrap();
            let file = object::File::parse(&*data).unwrap();
            // objdump names an ifunc's stub by its resolver's address; here it has a name of
            // the function at that address (any of its aliases).
            let names_at = |a: u64| -> Vec<String> {
                file.dynamic_symbols()
                    .chain(file.symbols())
                    .filter(|s| s.address() == a && s.kind() == object::SymbolKind::Text)
                    .filter_map(|s| s.name().ok().map(|n| format!("{n}@plt")))
                    .collect()
            };
            type Stubs = Vec<(u64, String)>;
            let (mut got, iplt): (Stubs, Stubs) = plt_symbols(&file)
                .into_iter()
                .map(|(a, _, n)| (a, n))
                .partition(|(a, _)| {
                    file.section_by_name(".iplt")
                        .is_none_or(|s| !(s.address()..s.address() + s.size()).contains(a))
                });
            got.sort();
            named += check_iplt(&objdump, &path, &file, &iplt, &names_at);
            let addresses = |v: &[(u64, String)]| v.iter().map(|e| e.0).collect::<Vec<_>>();
            assert_eq!(addresses(&got), addresses(&want), "{}", path.display());
            for ((at, ours), (_, theirs)) in got.iter().zip(&want) {
                let resolver = theirs
                    .strip_prefix("*ABS*+0x")
                    .and_then(|r| r.strip_suffix("@plt"))
                    .and_then(|r| u64::from_str_radix(r, 16).ok());
                match resolver {
                    Some(r) => assert!(
                        names_at(r).contains(ours),
                        "{at:#x}: {ours}, objdump {theirs}, in {}",
                        path.display()
                    ),
                    None => assert_eq!(ours, theirs, "{at:#x} in {}", path.display()),
                }
            }
            named += got.len();
        }
        assert!(named >= 2, "only {named} stubs");
    }

    /// ARM's `.iplt` stubs, which objdump does not label: each of `ours` (address, name) is
    /// judged by its instructions as `objdump -d -j .iplt` decodes them (`add ip, pc, #A`, `add
    /// ip, ip, #B`, `ldr pc, [ip, #C]!`, after a Thumb prefix): the slot they load the PC from
    /// holds the address of a function (an ifunc's resolver) of which our name is a name.
    /// Returns how many were judged; every stub objdump decodes is one of ours.
    fn check_iplt(
        objdump: &str,
        path: &Path,
        file: &object::File<'_>,
        ours: &[(u64, String)],
        names_at: &dyn Fn(u64) -> Vec<String>,
    ) -> usize {
        if file.section_by_name(".iplt").is_none() {
            assert!(ours.is_empty(), "{ours:?}");
            return 0;
        }
        let run = std::process::Command::new(objdump)
            .args(["-d", "-j", ".iplt"])
            .arg(path)
            .output()
            .unwrap();
        // `   1dfb8:\te28fc600 \tadd\tip, pc, #0, 12` and `\tldr\tpc, [ip, #144]!\t@ 0x90`.
        let immediate = |operands: &str| -> u32 {
            let (_, imm) = operands.split_once('#').unwrap();
            let imm = imm.trim_end_matches([']', '!']);
            match imm.split_once(", ") {
                Some((v, r)) => v.parse::<u32>().unwrap().rotate_right(r.parse().unwrap()),
                None => imm.parse().unwrap(),
            }
        };
        let mut stubs = Vec::new();
        let (mut start, mut slot) = (0u64, 0u32);
        for line in String::from_utf8_lossy(&run.stdout).lines() {
            let fields: Vec<&str> = line.split('\t').map(str::trim).collect();
            let (Some(at), Some(op), Some(operands)) = (
                fields
                    .first()
                    .and_then(|a| u64::from_str_radix(a.trim_end_matches(':'), 16).ok()),
                fields.get(2),
                fields.get(3),
            ) else {
                continue;
            };
            match (*op, operands.split_once(", ").map(|(r, _)| r)) {
                ("add", _) if operands.starts_with("ip, pc") => {
                    // The entry starts at its Thumb prefix, the word before.
                    start = at - 4;
                    slot = (at as u32) + 8 + immediate(operands);
                }
                ("add", _) if operands.starts_with("ip, ip") => slot += immediate(operands),
                ("ldr", Some("pc")) => {
                    stubs.push((start, u64::from(slot + immediate(operands))));
                }
                _ => {}
            }
        }
        let addresses: Vec<u64> = ours.iter().map(|o| o.0).collect();
        let decoded: Vec<u64> = stubs.iter().map(|s| s.0).collect();
        assert_eq!(addresses, decoded, "{} .iplt", path.display());
        let word = |at: u64| {
            file.sections().find_map(|s| {
                let i = usize::try_from(at.checked_sub(s.address())?).ok()?;
                le_word(s.data().ok()?, i)
            })
        };
        for ((at, name), (_, slot)) in ours.iter().zip(&stubs) {
            let resolver = u64::from(word(*slot).unwrap());
            assert!(
                names_at(resolver).contains(name),
                "{at:#x}: {name}, its slot {slot:#x} holds {resolver:#x}, in {}",
                path.display()
            );
        }
        ours.len()
    }
}
