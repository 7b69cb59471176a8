//! Android libunwindstack's recorded unwinds (its offline tests, `cases/`), replayed through
//! this project's offline unwinder and compared with the frames libunwindstack gives, frame
//! for frame.
//!
//! A case is a directory: the registers (`regs.txt`), the mappings (`maps.txt`), the stack
//! bytes (`stack*.data`: a little-endian `u64` start address, then the bytes), the modules'
//! files (named as in `maps.txt`, maybe `.gz`; `links.txt` names files of `common/`), and
//! libunwindstack's frames (`output.txt`). [`Case::load`] reads one, [`Case::walk`] unwinds it
//! with rules read from the files as the offline path reads them, and [`Case::compare`] says
//! where our frames and libunwindstack's part.

use std::collections::HashMap;
use std::io::Read;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use unwind_core::table::{RuleTable, RuleTableBuilder};
use unwind_core::{Arch, Cache, Memory, StopReason, Trust};
use unwind_gdb_jit::{Memory as _, Pieces};

/// The architectures of the corpus this project unwinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaseArch {
    /// 32-bit ARM.
    Arm,
    /// AArch64.
    Arm64,
    /// x86_64.
    X86_64,
}

impl CaseArch {
    /// The architecture a case's directory name ends with (`offset_arm`, `pc_1` under
    /// `bluetooth_arm64`), if it is one of ours.
    pub fn of_name(name: &str) -> Option<CaseArch> {
        if name.ends_with("_arm64") {
            Some(CaseArch::Arm64)
        } else if name.ends_with("_arm") {
            Some(CaseArch::Arm)
        } else if name.ends_with("_x86_64") {
            Some(CaseArch::X86_64)
        } else {
            None
        }
    }

    /// What libunwindstack subtracts from a caller's return address before printing it (its
    /// `GetPcAdjustment`): the return address minus this is inside the call. On ARM it is 2 or
    /// 4 by the call's Thumb instruction size; both are accepted.
    fn adjustments(self) -> &'static [u64] {
        match self {
            CaseArch::Arm => &[2, 4],
            CaseArch::Arm64 => &[4],
            CaseArch::X86_64 => &[1],
        }
    }
}

/// One line of `maps.txt`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Map {
    /// First address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// `r-xp` and the like.
    pub perms: String,
    /// Offset in the file.
    pub offset: u64,
    /// The file's name (empty for anonymous memory).
    pub name: String,
    /// A JIT's in-memory ELF image, whose addresses are the process's (bias 0), printed
    /// relative to the map's start.
    pub jit: bool,
}

/// A frame as libunwindstack printed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedFrame {
    /// The PC relative to its ELF file (a caller's return address less the adjustment), or
    /// the absolute PC where no map holds it.
    pub rel_pc: u64,
    /// The map's name as printed (`libc.so`, `fake.apk!libfoo.so`, `<unknown>`).
    pub map: String,
    /// The rest of the line (function and offset), for messages.
    pub rest: String,
}

/// A module of the case: a map of code and the ELF image behind it, if the case has it.
#[derive(Clone)]
struct Module {
    /// The image was read from the recorded memory (not a file): its section headers may be
    /// missing ([`unwind_dwarf::rules_from_memory_image`]).
    from_memory: bool,
    map: usize,
    /// The addresses it covers: its map's, or for a JIT's symbol file the code it describes
    /// (inside an anonymous map, which is split around it).
    start: u64,
    end: u64,
    /// A JIT's symbol file (GDB JIT interface): its frames are printed relative to its map.
    symfile: bool,
    /// Runtime address minus file address (without an image: as if the file were mapped at
    /// its addresses).
    bias: u64,
    /// The ELF image (from its file, at its offset in an APK, or from the recorded memory);
    /// `None` where the case has none (a module without rules, as a process's module whose
    /// tables cannot be read).
    elf: Option<Arc<Vec<u8>>>,
}

/// A recorded unwind.
pub struct Case {
    /// The case's name (its directory, relative to the corpus).
    pub name: String,
    /// Its architecture.
    pub arch: CaseArch,
    dir: PathBuf,
    /// The mappings.
    pub maps: Vec<Map>,
    regs: HashMap<String, u64>,
    /// The recorded memory: the stack copies and the other parts the case keeps
    /// (`descriptor`, `entry`, `jit`, `lib_mem` data), and what [`Case::with_file_as_memory`]
    /// adds.
    memory: Vec<(u64, Vec<u8>)>,
    /// libunwindstack's frames.
    pub expected: Vec<ExpectedFrame>,
    links: HashMap<String, PathBuf>,
    pointer_mask: u64,
}

/// Why a case cannot be read.
#[derive(Debug)]
pub struct LoadError(pub String);

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

/// The contents of `path`, or of `path.gz` decompressed.
fn read_maybe_gz(path: &Path) -> Option<Vec<u8>> {
    if let Ok(bytes) = std::fs::read(path) {
        return Some(bytes);
    }
    let mut gz = path.as_os_str().to_owned();
    gz.push(".gz");
    let file = std::fs::File::open(gz).ok()?;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

impl Case {
    /// Reads the case in `dir`, named `name`.
    pub fn load(dir: &Path, name: &str) -> Result<Case, LoadError> {
        let err = |what: &str| LoadError(format!("{name}: {what}"));
        let arch = CaseArch::of_name(name).ok_or_else(|| err("not an architecture of ours"))?;
        let text = |file: &str| {
            std::fs::read_to_string(dir.join(file)).map_err(|e| err(&format!("{file}: {e}")))
        };
        let maps = text("maps.txt")?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| parse_map(l).ok_or_else(|| err(&format!("maps.txt: {l:?}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let regs = text("regs.txt")?
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(':')?;
                Some((k.trim().to_string(), hex(v.trim())?))
            })
            .collect();
        let expected = text("output.txt")?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| parse_frame(l).ok_or_else(|| err(&format!("output.txt: {l:?}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let mut memory = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| err(&e.to_string()))? {
            let file = entry.map_err(|e| err(&e.to_string()))?.file_name();
            let file = file.to_string_lossy();
            let base = file.trim_end_matches(".gz");
            if base.ends_with(".data") {
                let bytes = read_maybe_gz(&dir.join(base)).ok_or_else(|| err(base))?;
                let (start, rest) = bytes
                    .split_first_chunk::<8>()
                    .ok_or_else(|| err(&format!("{base}: shorter than its address")))?;
                memory.push((u64::from_le_bytes(*start), rest.to_vec()));
            }
        }
        let links = std::fs::read_to_string(dir.join("links.txt"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (target, source) = l.trim().split_once(' ')?;
                Some((source.to_string(), dir.join(target)))
            })
            .collect();
        Ok(Case {
            name: name.to_string(),
            arch,
            dir: dir.to_path_buf(),
            maps,
            regs,
            memory,
            expected,
            links,
            pointer_mask: 0,
        })
    }

    /// The case with the process memory of the map at `start` taken from `file` at the map's
    /// offset, where the process could read its module's image but not its file (the set-up
    /// libunwindstack's test does by hand for such cases).
    pub fn with_file_as_memory(mut self, file: &str, start: u64) -> Result<Case, LoadError> {
        let err = |what: String| LoadError(format!("{}: {what}", self.name));
        let map = self
            .maps
            .iter()
            .find(|m| m.start == start)
            .ok_or_else(|| err(format!("no map at {start:#x}")))?;
        let bytes = self
            .file(file)
            .ok_or_else(|| err(format!("no file {file}")))?;
        let from = usize::try_from(map.offset).unwrap_or(usize::MAX);
        let to =
            usize::try_from(map.end - map.start).map_or(usize::MAX, |n| from.saturating_add(n));
        let image = bytes
            .get(from..to.min(bytes.len()))
            .ok_or_else(|| err(format!("{file} is shorter than the map at {start:#x}")))?;
        self.memory.push((map.start, image.to_vec()));
        Ok(self)
    }

    /// The case with the process's pointer-authentication mask (aarch64): the bits of a code
    /// address that are its signature. The corpus does not record it; the test sets it.
    pub fn with_pointer_mask(mut self, mask: u64) -> Case {
        self.pointer_mask = mask;
        self
    }

    /// The case with a map of code that a JIT described with an ELF image in memory (the GDB
    /// JIT interface's "symbol files", whose addresses are the process's): `file`, covering
    /// `start` to `end`, as libunwindstack's test adds by hand.
    pub fn with_jit_image(mut self, start: u64, end: u64, file: &str) -> Case {
        self.maps.push(Map {
            start,
            end,
            perms: "r-xp".into(),
            offset: 0,
            name: file.into(),
            jit: true,
        });
        self.maps.sort_by_key(|m| m.start);
        self
    }

    /// The process memory from `start` to `end`, where the case recorded all of it.
    fn memory_range(&self, start: u64, end: u64) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let mut at = start;
        while at < end {
            let (base, bytes) = self.memory.iter().find(|(base, bytes)| {
                (*base..base.saturating_add(bytes.len() as u64)).contains(&at)
            })?;
            let from = usize::try_from(at - base).ok()?;
            let take = usize::try_from(end - at).ok()?.min(bytes.len() - from);
            out.extend_from_slice(bytes.get(from..from + take)?);
            at += take as u64;
        }
        Some(out)
    }

    /// The bytes of the file a map names, if the case has it.
    fn file(&self, name: &str) -> Option<Vec<u8>> {
        let path = self
            .links
            .get(name)
            .cloned()
            .unwrap_or_else(|| self.dir.join(name));
        read_maybe_gz(&path)
    }

    /// The modules: each executable map of a file, with the ELF image behind it where one is
    /// found (at the map's offset in an APK, or at that of the read-only map just before it,
    /// which maps the same image's start), and its bias. Where the case has no file, the image
    /// is read from the recorded memory, from the start of those maps.
    fn modules(&self) -> Vec<Module> {
        let mut files: HashMap<&str, Option<Arc<Vec<u8>>>> = HashMap::new();
        let mut out = Vec::new();
        for (i, m) in self.maps.iter().enumerate() {
            if !m.perms.contains('x') || m.name.is_empty() || m.name.starts_with('[') {
                continue;
            }
            let previous = i
                .checked_sub(1)
                .and_then(|p| self.maps.get(p))
                .filter(|p| p.name == m.name && p.end == m.start);
            let file = files
                .entry(&m.name)
                .or_insert_with(|| self.file(&m.name).map(Arc::new))
                .clone();
            let from_memory = file.is_none();
            let found = match file {
                Some(file) => elf_in_file(&file, m.offset, previous.map(|p| p.offset))
                    .map(|(elf, at)| (elf, m.offset.wrapping_sub(at))),
                None => {
                    // The image as mapped: from the first of the maps, the file's layout up
                    // to the end of this one.
                    let first = previous.unwrap_or(m);
                    self.memory_range(first.start, m.end)
                        .filter(|image| image.starts_with(b"\x7fELF"))
                        .map(|image| (Arc::new(image), m.offset.wrapping_sub(first.offset)))
                }
            };
            let placed = found.and_then(|(elf, offset)| {
                let bias = if m.jit {
                    Some(0)
                } else {
                    bias(&elf, offset, m.start)
                };
                Some((elf, bias?))
            });
            out.push(match placed {
                Some((elf, bias)) => Module {
                    from_memory,
                    map: i,
                    start: m.start,
                    end: m.end,
                    symfile: false,
                    bias,
                    elf: Some(elf),
                },
                None => Module {
                    from_memory,
                    map: i,
                    start: m.start,
                    end: m.end,
                    symfile: false,
                    bias: m.start.wrapping_sub(m.offset),
                    elf: None,
                },
            });
        }
        self.with_gdb_jit(out)
    }

    /// The GDB JIT interface's descriptor, found as libunwindstack finds it: the
    /// `__jit_debug_descriptor` of a file whose first map (offset 0) is followed by a
    /// read-write map of it holding the variable; the first whose list has entries.
    fn jit_descriptor(&self) -> Option<u64> {
        let mut first: Option<&Map> = None;
        for m in &self.maps {
            if m.perms.starts_with("rw") {
                let Some(zero) = first.filter(|z| z.name == m.name && !m.name.is_empty()) else {
                    continue;
                };
                let Some(elf) = self.file(&zero.name) else {
                    continue;
                };
                let Some(vaddr) = unwind_gdb_jit::descriptor_address(&elf) else {
                    continue;
                };
                // The variable's file offset, by the segment that loads it.
                let Some(offset) = file_offset(&elf, vaddr) else {
                    continue;
                };
                if offset < m.offset || offset - m.offset >= m.end - m.start {
                    continue;
                }
                let address = m.start + (offset - m.offset);
                let mut first_entry = [0u8; 4];
                let pointer_size = if self.arch == CaseArch::Arm { 4 } else { 8 };
                // `first_entry` is after version, action_flag and relevant_entry.
                if Pieces(&self.memory).read(address + 8 + pointer_size, &mut first_entry)
                    && first_entry != [0; 4]
                {
                    return Some(address);
                }
            } else if m.offset == 0 && !m.name.is_empty() {
                first = Some(m);
            }
        }
        None
    }

    /// `modules` with a module for each code range a JIT described through the GDB JIT
    /// interface (rules from its symbol file, at its addresses), the anonymous maps the code
    /// is in split around them; libunwindstack prints their frames relative to those maps.
    fn with_gdb_jit(&self, modules: Vec<Module>) -> Vec<Module> {
        let Some(descriptor) = self.jit_descriptor() else {
            return modules;
        };
        let layout = match self.arch {
            CaseArch::Arm => unwind_gdb_jit::Layout::ARM,
            CaseArch::Arm64 => unwind_gdb_jit::Layout::AARCH64,
            CaseArch::X86_64 => unwind_gdb_jit::Layout::X86_64,
        };
        let Ok(list) = unwind_gdb_jit::read_symfiles(
            &Pieces(&self.memory),
            descriptor,
            layout,
            &unwind_gdb_jit::Limits::default(),
        ) else {
            return modules;
        };
        let mut jit: Vec<Module> = Vec::new();
        for symfile in list.symfiles {
            let Some((start, end)) = symfile.code_range() else {
                continue;
            };
            // In a map without an image of its own, not overlapping another's (the list is
            // newest first: an older file for the same code is left out).
            let Some(host) = modules
                .iter()
                .find(|m| m.elf.is_none() && m.start <= start && end <= m.end)
            else {
                continue;
            };
            if jit.iter().any(|j| j.start < end && start < j.end) {
                continue;
            }
            jit.push(Module {
                from_memory: true,
                map: host.map,
                start,
                end,
                bias: 0,
                elf: Some(Arc::new(symfile.relocated().into_owned())),
                symfile: true,
            });
        }
        jit.sort_by_key(|j| j.start);
        let mut out = Vec::new();
        for m in modules {
            let inside: Vec<&Module> = jit
                .iter()
                .filter(|j| m.elf.is_none() && m.start <= j.start && j.end <= m.end)
                .collect();
            if inside.is_empty() {
                out.push(m);
                continue;
            }
            let mut at = m.start;
            for j in inside {
                if at < j.start {
                    out.push(Module {
                        start: at,
                        end: j.start,
                        elf: None,
                        ..m.clone()
                    });
                }
                at = j.end;
            }
            if at < m.end {
                out.push(Module {
                    start: at,
                    elf: None,
                    ..m
                });
            }
        }
        out.extend(jit);
        out.sort_by_key(|m| m.start);
        out
    }

    /// The table of the case's modules, rules read as the offline path reads them.
    fn table<A: unwind_dwarf::DwarfArch>(&self, modules: &[Module]) -> RuleTable<A::Rule> {
        let mut b = RuleTableBuilder::new(NonZeroU32::MIN);
        for m in modules {
            let map = &self.maps[m.map];
            let rules = m
                .elf
                .as_ref()
                .and_then(|elf| {
                    if m.from_memory {
                        unwind_dwarf::rules_from_memory_image::<A>(elf).ok()
                    } else {
                        unwind_dwarf::rules_from_elf::<A>(elf).ok()
                    }
                })
                .map_or_else(unwind_core::table::ModuleRules::empty, |l| l.rules);
            b.add(m.start, m.end, m.bias, map.name.clone(), Arc::new(rules));
        }
        b.build().expect("a table of a few modules")
    }

    fn reg(&self, name: &str) -> Result<u64, LoadError> {
        self.regs
            .get(name)
            .copied()
            .ok_or_else(|| LoadError(format!("{}: no register {name}", self.name)))
    }

    /// Unwinds the case with this project's unwinder: the frames (PC, and whether it is exact:
    /// frame 0 and the caller of a signal frame), and why the walk ended.
    pub fn walk(&self) -> Result<Walk, LoadError> {
        let modules = self.modules();
        let memory = Regions {
            regions: &self.memory,
            pointer_mask: self.pointer_mask,
        };
        Ok(match self.arch {
            CaseArch::X86_64 => {
                let regs = unwind_core::x86_64::Regs {
                    pc: self.reg("rip")?,
                    sp: self.reg("rsp")?,
                    fp: self.reg("rbp")?,
                };
                walk::<unwind_core::X86_64>(
                    &self.table::<unwind_core::X86_64>(&modules),
                    regs,
                    &memory,
                    0,
                )
            }
            CaseArch::Arm64 => {
                let regs = unwind_core::aarch64::Regs {
                    pc: self.reg("pc")?,
                    sp: self.reg("sp")?,
                    fp: self.reg("x29")?,
                    lr: self.reg("lr").or_else(|_| self.reg("x30"))?,
                };
                walk::<unwind_core::Aarch64>(
                    &self.table::<unwind_core::Aarch64>(&modules),
                    regs,
                    &memory,
                    0,
                )
            }
            CaseArch::Arm => {
                // Some cases record only PC and SP: the others are then unknown (0).
                let r = |n: &str| self.reg(n).map(|v| v as u32);
                let or_0 = |n: &str| r(n).unwrap_or(0);
                let regs = unwind_core::arm::Regs {
                    pc: r("pc")?,
                    lr: or_0("lr"),
                    sp: r("sp")?,
                    r12: r("ip").unwrap_or_else(|_| or_0("r12")),
                    r11: or_0("r11"),
                    r7: or_0("r7"),
                };
                walk::<unwind_core::Arm>(
                    &self.table::<unwind_core::Arm>(&modules),
                    regs,
                    &memory,
                    1,
                )
            }
        })
    }

    /// Our frame `pc` as libunwindstack prints it: relative to its module's ELF (less the
    /// adjustment `adjust`), the map's name; or absolute where no module holds it.
    fn relative(&self, modules: &[Module], pc: u64) -> (u64, Option<&str>, bool) {
        for m in modules {
            let map = &self.maps[m.map];
            if (m.start..m.end).contains(&pc) {
                // libunwindstack prints a PC in a JIT's image or in a map without a valid ELF
                // image relative to the map.
                let base = if map.jit || m.symfile || m.elf.is_none() {
                    map.start
                } else {
                    m.bias
                };
                return (
                    pc.wrapping_sub(base),
                    Some(map.name.as_str()),
                    m.elf.is_some(),
                );
            }
        }
        // Anonymous memory: relative to its map, as libunwindstack prints it.
        match self.maps.iter().find(|m| (m.start..m.end).contains(&pc)) {
            Some(m) => (pc.wrapping_sub(m.start), Some(""), false),
            None => (pc, None, false),
        }
    }

    /// Our frames as libunwindstack prints its own (`#NN pc REL MAP`), for messages.
    pub fn describe(&self, walk: &Walk) -> String {
        let modules = self.modules();
        walk.frames
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let (rel, map, _) = self.relative(&modules, f.pc);
                format!(
                    "  #{i:02} pc {rel:#x}  {} ({:?})\n",
                    map.unwrap_or("?"),
                    f.trust
                )
            })
            .collect()
    }

    /// Whether `pc` is the first instruction of a sigreturn call (the instructions
    /// libunwindstack's `StepIfSignalHandler` recognises: a signal frame, which it prints
    /// without adjusting its PC, whatever the module's tables say of it).
    fn at_sigreturn(&self, modules: &[Module], pc: u64) -> bool {
        let Some(m) = modules.iter().find(|m| (m.start..m.end).contains(&pc)) else {
            return false;
        };
        let Some(code) = m
            .elf
            .as_ref()
            .and_then(|elf| code_at(elf, (pc & !1).wrapping_sub(m.bias), 12))
        else {
            return false;
        };
        // The ARM and AArch64 forms are the unwinder's own (a superset of libunwindstack's);
        // x86_64's, which our unwinder leaves to the C library's CFI, is libunwindstack's
        // `mov $15, %rax; syscall`.
        let forms: Vec<&[u8]> = match self.arch {
            CaseArch::Arm => unwind_dwarf::sigreturn::ARM
                .iter()
                .map(|t| t.code)
                .collect(),
            CaseArch::Arm64 => unwind_dwarf::sigreturn::AARCH64
                .iter()
                .map(|t| t.code)
                .collect(),
            CaseArch::X86_64 => vec![&[0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05]],
        };
        forms.iter().any(|form| code.starts_with(form))
    }

    /// Compares `walk` with libunwindstack's frames.
    pub fn compare(&self, walk: &Walk) -> Comparison {
        let modules = self.modules();
        let mut matched = 0;
        // Their frames for ART's interpreted methods (a DEX pc, in no map), which we do not give.
        let mut interpreted = 0;
        let mut theirs = self.expected.iter().peekable();
        for (i, frame) in walk.frames.iter().enumerate() {
            let Some(mut expected) = theirs.next() else {
                break;
            };
            let (rel, map, image) = self.relative(&modules, frame.pc);
            // libunwindstack adjusts every frame but frame 0 and a signal frame itself (a
            // signal frame's caller too, whose PC is exact), and none whose PC is too small
            // to be after a call.
            let adjustments: &[u64] =
                if i == 0 || frame.signal || self.at_sigreturn(&modules, frame.pc) || rel < 5 {
                    &[0]
                } else {
                    self.arch.adjustments()
                };
            let same_as =
                |e: &ExpectedFrame| adjustments.iter().any(|a| rel.wrapping_sub(*a) == e.rel_pc);
            if !same_as(expected)
                && expected.map == "<unknown>"
                && theirs.peek().is_some_and(|next| same_as(next))
            {
                interpreted += 1;
                expected = theirs.next().expect("peeked");
            }
            let same_pc = same_as(expected);
            // The printed name is the map's, or for an ELF inside an APK `APK!SONAME`.
            let same_map = match map {
                Some("") => expected.map.starts_with('<'),
                Some(name) => expected.map == name || expected.map.starts_with(&format!("{name}!")),
                None => true,
            };
            // In a map whose image the case lacks, where libunwindstack read one (from the
            // process's memory, or from a JIT's list): its PC is relative to the image,
            // ours to the map; nothing to judge by.
            if map.is_some() && !image && same_map && !same_pc {
                return Comparison {
                    matched,
                    verdict: Verdict::Unjudged { frame: i },
                };
            }
            if !(same_pc && same_map) {
                return Comparison {
                    matched,
                    verdict: Verdict::Wrong {
                        frame: i,
                        ours: format!("{rel:#x} in {}", map.unwrap_or("no map")),
                        theirs: format!(
                            "{:#x} {} {}",
                            expected.rel_pc, expected.map, expected.rest
                        ),
                    },
                };
            }
            matched += 1;
        }
        let verdict = match (walk.frames.len() + interpreted).cmp(&self.expected.len()) {
            std::cmp::Ordering::Equal if interpreted > 0 => Verdict::WithoutInterpretedFrames {
                missing: interpreted,
            },
            std::cmp::Ordering::Equal => Verdict::Same,
            std::cmp::Ordering::Less => Verdict::Short { stop: walk.stop },
            std::cmp::Ordering::Greater => Verdict::Longer,
        };
        Comparison { matched, verdict }
    }
}

/// The ELF image in `file` for a map at offset `offset` (the read-only map before it at
/// `previous`): the whole file if it is one, else an image inside it (an APK's) starting at
/// one of those offsets. Returns the image and its offset in the file.
fn elf_in_file(
    file: &Arc<Vec<u8>>,
    offset: u64,
    previous: Option<u64>,
) -> Option<(Arc<Vec<u8>>, u64)> {
    let is_elf = |at: u64| {
        usize::try_from(at)
            .ok()
            .and_then(|at| file.get(at..at.checked_add(4)?))
            == Some(b"\x7fELF")
    };
    if is_elf(0) {
        return Some((file.clone(), 0));
    }
    let at = [Some(offset), previous]
        .into_iter()
        .flatten()
        .find(|&at| is_elf(at))?;
    let bytes = file.get(usize::try_from(at).ok()?..)?;
    Some((Arc::new(bytes.to_vec()), at))
}

/// The file offset of the file address `vaddr` in `elf`, by the `PT_LOAD` segment holding it.
fn file_offset(elf: &[u8], vaddr: u64) -> Option<u64> {
    use object::{Object, ObjectSegment};
    let file = object::File::parse(elf).ok()?;
    file.segments().find_map(|s| {
        let (offset, size) = s.file_range();
        (s.address() <= vaddr && vaddr - s.address() < size).then(|| offset + (vaddr - s.address()))
    })
}

/// Parses `start-end perms offset dev inode name`.
fn parse_map(line: &str) -> Option<Map> {
    let mut f = line.split_whitespace();
    let (start, end) = f.next()?.split_once('-')?;
    let perms = f.next()?.to_string();
    let offset = hex(f.next()?)?;
    let _dev = f.next()?;
    let _inode = f.next()?;
    let name = f.collect::<Vec<_>>().join(" ");
    Some(Map {
        start: hex(start)?,
        end: hex(end)?,
        perms,
        offset,
        name,
        jit: false,
    })
}

/// Parses `  #NN pc HEX  MAP (...)`.
fn parse_frame(line: &str) -> Option<ExpectedFrame> {
    let rest = line.trim_start().strip_prefix('#')?;
    let (_, rest) = rest.split_once(" pc ")?;
    let rest = rest.trim_start();
    let (pc, rest) = rest.split_once(char::is_whitespace)?;
    let rest = rest.trim_start();
    let (map, tail) = rest.split_once(" (").map_or((rest, ""), |(m, t)| (m, t));
    Some(ExpectedFrame {
        rel_pc: hex(pc)?,
        map: map.trim().to_string(),
        rest: tail.to_string(),
    })
}

/// Runtime address minus file address for an ELF image mapped at `start` from its offset
/// `offset` (page-aligned): by the loadable segment mapped there, the segment whose pages hold
/// that offset (an executable one first: a read-only segment may end in the same page). Read
/// from the program headers alone: an image read back from memory has no section headers.
fn bias(elf: &[u8], offset: u64, start: u64) -> Option<u64> {
    let segments = load_segments(elf)?;
    let holds = |s: &&Segment| {
        (s.offset & !0xfff..s.offset.saturating_add(s.size.max(1))).contains(&offset)
    };
    let s = segments
        .iter()
        .filter(holds)
        .find(|s| s.executable)
        .or_else(|| segments.iter().find(holds))?;
    // The map's first byte is `s.offset - offset` bytes before the segment's.
    Some(start.wrapping_sub(s.vaddr.wrapping_sub(s.offset.wrapping_sub(offset))))
}

/// A loadable segment, from its program header.
struct Segment {
    offset: u64,
    size: u64,
    vaddr: u64,
    executable: bool,
}

/// `elf`'s loadable segments, by its program headers only.
fn load_segments(elf: &[u8]) -> Option<Vec<Segment>> {
    use object::read::elf::{FileHeader, ProgramHeader};
    fn of<H: FileHeader<Endian = object::Endianness>>(elf: &[u8]) -> Option<Vec<Segment>> {
        let header = H::parse(elf).ok()?;
        let endian = header.endian().ok()?;
        let phdrs = header.program_headers(endian, elf).ok()?;
        Some(
            phdrs
                .iter()
                .filter(|p| p.p_type(endian) == object::elf::PT_LOAD)
                .map(|p| Segment {
                    offset: p.p_offset(endian).into(),
                    size: p.p_filesz(endian).into(),
                    vaddr: p.p_vaddr(endian).into(),
                    executable: p.p_flags(endian).contains(object::elf::PF_X),
                })
                .collect(),
        )
    }
    match elf.get(4) {
        Some(1) => of::<object::elf::FileHeader32<object::Endianness>>(elf),
        Some(2) => of::<object::elf::FileHeader64<object::Endianness>>(elf),
        _ => None,
    }
}

/// `n` bytes of `elf`'s loaded contents at file address `svma` (by its program headers).
fn code_at(elf: &[u8], svma: u64, n: usize) -> Option<Vec<u8>> {
    load_segments(elf)?.iter().find_map(|s| {
        let within = svma.checked_sub(s.vaddr).filter(|o| *o < s.size)?;
        let from = usize::try_from(s.offset.checked_add(within)?).ok()?;
        Some(elf.get(from..from.checked_add(n)?)?.to_vec())
    })
}

/// A frame of our walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The PC: frame 0's, or a return address as found.
    pub pc: u64,
    /// Whether the PC is the instruction itself (frame 0, a signal frame's caller) rather
    /// than a return address.
    pub exact: bool,
    /// How it was found.
    pub trust: Trust,
    /// Whether the frame's own rule is a signal frame's (the sigreturn trampoline).
    pub signal: bool,
}

/// Our walk of a case.
#[derive(Clone, Debug)]
pub struct Walk {
    /// The frames, frame 0 first.
    pub frames: Vec<Frame>,
    /// Why it ended.
    pub stop: StopReason,
}

/// Where our frames and libunwindstack's part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every frame equal, as many as theirs.
    Same,
    /// Every frame of ours equal, but fewer: our walk ended with `stop`.
    Short {
        /// Why our walk ended.
        stop: StopReason,
    },
    /// Every frame of theirs equal, and more of ours (libunwindstack stopped earlier).
    Longer,
    /// Every frame of ours equal to one of theirs, in order, but theirs has `missing` more: the
    /// frames libunwindstack adds for methods ART's interpreter runs (the DEX pc that the
    /// interpreter's CFI gives through an expression marked `DW_OP_const4u 'DEX1'`, printed
    /// in no map), which our unwinder does not give.
    WithoutInterpretedFrames {
        /// Their frames we do not give.
        missing: usize,
    },
    /// Frame `frame` is in a map whose image the case does not have (neither its file nor its
    /// memory): not compared, nor anything after it.
    Unjudged {
        /// The frame.
        frame: usize,
    },
    /// Frame `frame` differs: a wrong frame.
    Wrong {
        /// The first frame that differs.
        frame: usize,
        /// Ours, relative to its module.
        ours: String,
        /// Theirs, as printed.
        theirs: String,
    },
}

/// The outcome of [`Case::compare`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comparison {
    /// Frames equal before the first difference or the end of either walk.
    pub matched: usize,
    /// How the walks compare.
    pub verdict: Verdict,
}

/// The recorded memory: the stack copies.
struct Regions<'a> {
    regions: &'a [(u64, Vec<u8>)],
    pointer_mask: u64,
}

impl Regions<'_> {
    fn read<const N: usize>(&self, addr: u64) -> Option<[u8; N]> {
        self.regions.iter().find_map(|(start, bytes)| {
            let at = usize::try_from(addr.checked_sub(*start)?).ok()?;
            bytes.get(at..at.checked_add(N)?)?.try_into().ok()
        })
    }
}

impl Memory for Regions<'_> {
    fn read_u64(&self, addr: u64) -> Option<u64> {
        self.read::<8>(addr).map(u64::from_le_bytes)
    }
    fn read_u32(&self, addr: u64) -> Option<u32> {
        self.read::<4>(addr).map(u32::from_le_bytes)
    }
    fn pointer_mask(&self) -> u64 {
        self.pointer_mask
    }
}

/// Walks from `regs` over `memory`; a frame is exact if it is frame 0 or its callee's rule is
/// a signal frame's (looked up without the Thumb bit, `thumb`, where the architecture has one).
fn walk<A: Arch>(
    table: &RuleTable<A::Rule>,
    regs: A::Regs,
    memory: &Regions<'_>,
    thumb: u64,
) -> Walk {
    let mut pcs = [0u64; 256];
    let mut trust = [Trust::Context; 256];
    let r = unwind_core::unwind(
        table,
        &mut Cache::<A>::new(),
        regs,
        memory,
        &mut pcs,
        Some(&mut trust),
    );
    let mut frames: Vec<Frame> = Vec::new();
    for (&pc, &how) in pcs.iter().zip(&trust).take(r.frames) {
        let exact = frames.last().is_none_or(|callee| callee.signal);
        let at = if exact {
            pc & !thumb
        } else {
            (pc & !thumb).wrapping_sub(1)
        };
        // As the walk does: a return address at a trampoline's first instruction is looked up
        // as is where the call's address finds no signal frame.
        let signal = [at, pc & !thumb].into_iter().any(|at| {
            table
                .lookup(at)
                .is_some_and(|found| A::is_signal_frame(&found.rule))
        });
        frames.push(Frame {
            pc,
            exact,
            trust: how,
            signal,
        });
    }
    Walk {
        frames,
        stop: r.stop,
    }
}

/// The vendored corpus's directory.
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cases")
}

/// The cases under `root`: each case's name and directory, and each `pc_N` of a case made of
/// several (`bluetooth_arm64/pc_1`), sorted by name; only those of our architectures.
pub fn cases(root: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !path.is_dir() || CaseArch::of_name(&name).is_none() {
            continue;
        }
        if path.join("maps.txt").exists() {
            out.push((name, path));
        } else {
            for sub in std::fs::read_dir(&path)? {
                let sub = sub?.path();
                let s = sub
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                out.push((format!("{name}/{s}"), sub));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Loads case `name` from `dir` with the set-up libunwindstack's test
/// (`UnwindOfflineTest.cpp`) gives it by hand.
pub fn load_case(name: &str, dir: &Path) -> Result<Case, LoadError> {
    let case = Case::load(dir, name.split('/').next().unwrap_or(name))?;
    Ok(match name {
        // The APK cannot be read, its mapped image can.
        "apk_rorx_unreadable_arm64" => case
            .with_file_as_memory("fake.apk", 0x74_26d2_d000)?
            .with_file_as_memory("fake.apk", 0x74_26d2_e000)?,
        "apk_rx_unreadable_arm64" => case.with_file_as_memory("fake.apk", 0x7c_b0e6_2000)?,
        "pauth_pc_arm64" => case.with_pointer_mask(0x007f_ff80_0000_0000),
        "jit_map_arm" => case
            .with_jit_image(0xd025_c788, 0xd025_c9f0, "jit_map0.so")
            .with_jit_image(0xd025_cd98, 0xd025_cff4, "jit_map1.so"),
        _ => case,
    })
}

/// One case's outcome.
pub struct Outcome {
    /// The case's name.
    pub name: String,
    /// The case as read.
    pub case: Case,
    /// Our walk.
    pub walk: Walk,
    /// Its comparison with libunwindstack's frames.
    pub comparison: Comparison,
}

/// Walks and compares every case under `root`.
pub fn run_all(root: &Path) -> Result<Vec<Outcome>, LoadError> {
    let cases = cases(root).map_err(|e| LoadError(format!("{}: {e}", root.display())))?;
    cases
        .into_iter()
        .map(|(name, dir)| {
            let case = load_case(&name, &dir)?;
            let walk = case.walk()?;
            let comparison = case.compare(&walk);
            Ok(Outcome {
                name,
                case,
                walk,
                comparison,
            })
        })
        .collect()
}

/// The corpus's line for `VALIDATION.md`: `libunwindstack corpus: N of M cases frame for
/// frame, W wrong`.
pub fn summary_line(outcomes: &[Outcome]) -> String {
    let same = outcomes
        .iter()
        .filter(|o| o.comparison.verdict == Verdict::Same)
        .count();
    let wrong = outcomes
        .iter()
        .filter(|o| matches!(o.comparison.verdict, Verdict::Wrong { .. }))
        .count();
    format!(
        "libunwindstack corpus: {same} of {} cases frame for frame, {wrong} wrong",
        outcomes.len()
    )
}
