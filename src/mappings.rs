//! Executable memory the dynamic loader does not list (`/proc/self/maps`): code a program maps
//! itself. Two kinds, both made modules of the table so that a walk may return into them:
//!
//! - **A file mapped again** ([`ModuleKind::Remapped`]): node maps part of its own `.text` (V8's
//!   embedded builtins) a second time, elsewhere. The code is the file's, so the module gets the
//!   file's load bias for that place and, where the loader lists the same file with the same
//!   build id, that module's rules (no parse); symbols come from the file as for any module.
//! - **Anonymous executable memory** ([`ModuleKind::Anonymous`]): code generated at run time
//!   (JIT compilers, interpreters' trampolines, a deleted or `memfd` file). Where its JIT
//!   describes it (a jitdump file's unwinding records, the GDB JIT interface's symbol files:
//!   [`crate::gdb_jit`]), it gets those rules. Elsewhere a frame there is crossed by the
//!   frame-pointer fallback, whose return address must in turn be in a module's code (here,
//!   any of these), and named after the run from the process's perf map. Except for copies of a function some code generators copy rather than generate
//!   ([`CopiedCode`](crate::arch::CopiedCode): CPython's perf trampolines, which keep no frame
//!   pointer): found in the memory when the table is built, each copy gets the function's
//!   rules.

use std::ffi::CStr;
use std::sync::Arc;

use crate::arch::{Native, Rule, RuntimeArch};
use crate::jitdump::Described;
use crate::modules::{LoadedModule, ModuleKind, Parsed, ParsedModule};
use unwind_core::table::{ModuleRules, ModuleRulesBuilder};

/// One executable mapping of `/proc/self/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub start: u64,
    pub end: u64,
    /// The file offset of `start`.
    pub offset: u64,
    /// The path or the kernel's name (`[vdso]`, `[anon:NAME]`), empty for anonymous memory.
    pub path: String,
    /// Writable as well.
    pub writable: bool,
}

/// The executable mappings of a `/proc/PID/maps` text; lines it cannot read are skipped.
pub(crate) fn executable(maps: &str) -> Vec<Mapping> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(6, ' ');
            let (range, perms, offset) = (fields.next()?, fields.next()?, fields.next()?);
            let (_dev, _inode) = (fields.next()?, fields.next()?);
            let path = fields.next().unwrap_or("").trim_start().to_owned();
            if perms.as_bytes().get(2) != Some(&b'x') {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = u64::from_str_radix(start, 16).ok()?;
            let end = u64::from_str_radix(end, 16).ok()?;
            (start < end).then_some(Mapping {
                start,
                end,
                offset: u64::from_str_radix(offset, 16).ok()?,
                path,
                writable: perms.as_bytes().get(1) == Some(&b'w'),
            })
        })
        .collect()
}

/// Executable mappings that are not code a program made: the kernel's (the vdso, which the
/// loader lists; `[vsyscall]`, outside user space; `[uprobes]`), and the stack and heap, which
/// are executable in a process with an executable stack or `READ_IMPLIES_EXEC`.
fn is_not_code(path: &str) -> bool {
    matches!(path, "[vdso]" | "[vsyscall]" | "[uprobes]" | "[heap]") || path.starts_with("[stack")
}

/// What the table must not take for code although it is executable: the stacks of the threads
/// `[start, end)` of `stacks` (executable with an executable stack: a return address there would
/// pass for one into code), and, in a process whose every readable mapping is executable
/// (`READ_IMPLIES_EXEC`, old binaries), every writable anonymous mapping (its heap and thread
/// stacks; a JIT's writable code too, which is not told apart then).
fn excluded(m: &Mapping, stacks: &[(u64, u64)], read_implies_exec: bool) -> bool {
    is_not_code(&m.path)
        || stacks.iter().any(|&(lo, hi)| m.start < hi && lo < m.end)
        || (read_implies_exec && m.writable && !m.path.starts_with('/'))
}

/// Modules for the executable mappings of `maps` (this process's `/proc/self/maps`) that no
/// module of `listed` covers and that are code (not the stacks `stacks`, see [`excluded`]);
/// each gets rules as the module docs say.
pub(crate) fn unlisted_code(
    maps: &str,
    listed: &[ParsedModule],
    stacks: &[(u64, u64)],
) -> Vec<ParsedModule> {
    // SAFETY: personality with 0xffffffff only reads the current persona.
    let persona = unsafe { libc::personality(0xffff_ffff) };
    let read_implies_exec = persona != -1 && persona & libc::READ_IMPLIES_EXEC != 0;
    let mut unlisted: Vec<Mapping> = executable(maps)
        .into_iter()
        .filter(|m| {
            !excluded(m, stacks, read_implies_exec)
                && !listed
                    .iter()
                    .any(|p| m.start < p.module.end && p.module.start < m.end)
        })
        .collect();
    // Adjacent anonymous mappings (one region whose pages differ in protection, or regions
    // mapped apart) are one module: fewer modules, and one name.
    unlisted.dedup_by(|next, prev| {
        let joins = !prev.path.starts_with('/') && prev.end == next.start && prev.path == next.path;
        if joins {
            prev.end = next.end;
        }
        joins
    });
    // The unwind tables of the process's jitdump file, if it maps one, and the symbol files of
    // its JIT compilers' GDB JIT interface.
    let mut described: Vec<Described> = unlisted
        .iter()
        .filter(|m| crate::jitdump::is_own(&m.path))
        .filter_map(|m| std::fs::read(&m.path).ok())
        .flat_map(|dump| crate::jitdump::described(&dump))
        .collect();
    let jit = crate::gdb_jit::read(listed.first().map(|p| p.module.bias));
    described.extend(jit.described);
    unlisted
        .iter()
        .map(|m| {
            m.path
                .starts_with('/')
                .then(|| remapped(m, listed))
                .flatten()
                .unwrap_or_else(|| anonymous(m, &described))
        })
        .collect()
}

/// A module for anonymous executable memory `m`: without rules, or with those of the copies
/// of a [`CopiedCode`](crate::arch::CopiedCode) found in it, or else those a jitdump file gives
/// code in it.
fn anonymous(m: &Mapping, described: &[Described]) -> ParsedModule {
    let name = if m.path.is_empty() {
        "[anon]".to_owned()
    } else {
        m.path.clone()
    };
    if let Some(rules) = signal_trampoline(m) {
        let note = "executable memory no file describes, starting with the kernel's signal \
                    return trampoline (qemu-user's page): its rules";
        return module(
            placed(m, SIGRETURN.into(), 0, None, ModuleKind::Anonymous),
            Arc::new(rules),
            note,
        );
    }
    let (rules, note) = match copies_in(m.start, m.end) {
        None => match jitdump_rules(m, described) {
            Some((rules, n)) => (
                rules,
                format!(
                    "executable memory no file describes, {n} pieces of its code described by \
                     the process's jitdump file or its JIT's GDB interface: their rules, \
                     elsewhere frame pointers"
                ),
            ),
            None => (
                ModuleRules::empty(),
                "executable memory no file describes (code generated at run time): crossed \
                 by frame pointers, named by the process's perf map"
                    .to_owned(),
            ),
        },
        Some((rules, symbol)) => (
            rules,
            format!(
                "executable memory no file describes, holding copies of {}: their rules; \
                 named by the process's perf map",
                symbol.to_string_lossy()
            ),
        ),
    };
    module(
        placed(m, name, 0, None, ModuleKind::Anonymous),
        Arc::new(rules),
        &note,
    )
}

/// The name of a mapping that holds the kernel's signal return trampoline and nothing else
/// (qemu-user's page for it on aarch64), as the kernel names such mappings (`[vdso]`): the
/// [`LoadedModule`](crate::LoadedModule) the unwinder lists for it has this name.
pub const SIGRETURN: &str = "[sigreturn]";

/// The rules of the architecture's signal return trampoline
/// ([`unwind_dwarf::sigreturn::SignalTrampoline`]) if mapping `m` starts with it, as the
/// page qemu-user maps for it does.
fn signal_trampoline(m: &Mapping) -> Option<ModuleRules<Rule>> {
    let forms = <Native as unwind_dwarf::DwarfArch>::SIGNAL_TRAMPOLINES;
    let len = forms.iter().map(|t| t.code.len()).max()?;
    let code = read_own(m.start, len)?;
    let mut rules = ModuleRulesBuilder::new();
    let copies =
        unwind_dwarf::sigreturn::SignalTrampoline::rows_of_any(forms, &code, m.start, &mut rules);
    (copies.ok()? == 1).then_some(())?;
    rules.build().ok()
}

/// The module of mapping `m`, named `name`, with load bias `bias`.
fn placed(
    m: &Mapping,
    name: String,
    bias: u64,
    build_id: Option<Vec<u8>>,
    kind: ModuleKind,
) -> LoadedModule {
    LoadedModule {
        name,
        bias,
        start: m.start,
        end: m.end,
        file_offset: m.offset,
        eh_frame_hdr: None,
        image_start: m.start,
        image_end: m.end,
        build_id,
        kind,
    }
}

/// The rules that `described` (a jitdump file's) gives code inside `m`, and how many pieces
/// of code they describe; `None` if none is inside.
fn jitdump_rules(m: &Mapping, described: &[Described]) -> Option<(ModuleRules<Rule>, usize)> {
    let inside: Vec<&Described> = described
        .iter()
        .filter(|d| m.start <= d.start && d.end <= m.end)
        .collect();
    if inside.is_empty() {
        return None;
    }
    let mut rules = ModuleRulesBuilder::new();
    for d in &inside {
        for (from, to, rule) in d.rules.extents() {
            rules.push(from, to, rule).ok()?;
        }
    }
    Some((rules.build().ok()?, inside.len()))
}

/// The rules of the copies of a [`CopiedCode`](crate::arch::CopiedCode) in this process's
/// memory `[start, end)`, and the function copied, if there is one: its symbol resolves, its
/// bytes there are the known ones, and at least one copy is in the range. Memory is read with
/// `process_vm_readv`, which fails, rather than faults, on memory unmapped meanwhile.
fn copies_in(start: u64, end: u64) -> Option<(ModuleRules<Rule>, &'static CStr)> {
    // Generated code regions are small (CPython's: 64 KiB each): a larger one is not read.
    const MAX_REGION: u64 = 16 << 20;
    if Native::COPIED_CODE.is_empty() || end - start > MAX_REGION {
        return None;
    }
    let region = std::cell::OnceCell::new();
    for copied in Native::COPIED_CODE {
        // Not through dlsym, whose failure the program's next dlerror would report.
        let Some(&at) = crate::exported::exported(copied.symbol).first() else {
            continue;
        };
        if read_own(at, copied.bytes.len()).as_deref() != Some(copied.bytes) {
            continue;
        }
        let Some(bytes) = region.get_or_init(|| read_own(start, (end - start) as usize)) else {
            return None;
        };
        let mut rules = ModuleRulesBuilder::new();
        let (mut at, mut copies) = (0usize, 0usize);
        let n = copied.bytes.len();
        while at + n <= bytes.len() {
            if &bytes[at..at + n] != copied.bytes {
                at += 1;
                continue;
            }
            let base = start + at as u64;
            for &(from, to, rule) in copied.rows {
                rules
                    .push(base + u64::from(from), base + u64::from(to), rule)
                    .ok()?;
            }
            copies += 1;
            at += n;
        }
        if copies > 0 {
            return Some((rules.build().ok()?, copied.symbol));
        }
    }
    None
}

/// `len` bytes of this process's memory at `addr`, or `None` if any of them is not mapped
/// readable.
fn read_own(addr: u64, len: usize) -> Option<Vec<u8>> {
    let mut out = vec![0u8; len];
    read_own_into(addr, &mut out).then_some(out)
}

/// Fills `out` with this process's memory at `addr` (see [`read_own`]); `false` if any of it
/// cannot be read.
pub(crate) fn read_own_into(addr: u64, out: &mut [u8]) -> bool {
    let len = out.len();
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` is `out`, writable for `len` bytes; the kernel checks `remote`.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == len as isize {
        return true;
    }
    // qemu-user does not implement `process_vm_readv`: there the memory goes through a pipe,
    // whose `write` fails (EFAULT), rather than faults, on memory that is not readable.
    n < 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS)
        && read_own_through_pipe(addr, out)
}

/// Fills `out` with this process's memory at `addr` through a pipe, a page at a time (see
/// [`read_own`]); false if any of it is not readable.
fn read_own_through_pipe(addr: u64, out: &mut [u8]) -> bool {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return false;
    }
    let mut ok = true;
    for (i, chunk) in out.chunks_mut(4096).enumerate() {
        let from = addr.wrapping_add((i * 4096) as u64);
        // SAFETY: the kernel reads `chunk.len()` bytes at `from` and fails with EFAULT where
        // they are not readable; nothing is dereferenced here. A pipe holds at least a page.
        let written = unsafe { libc::write(fds[1], from as *const libc::c_void, chunk.len()) };
        if written != chunk.len() as isize {
            // (Nothing, or a part, is in the pipe: reading it all would block.)
            ok = false;
            break;
        }
        // SAFETY: `chunk` is writable for its length, and the pipe holds that many bytes.
        let read = unsafe { libc::read(fds[0], chunk.as_mut_ptr().cast(), chunk.len()) };
        if read != written {
            ok = false;
            break;
        }
    }
    // SAFETY: both descriptors are ours, closed once.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    ok
}

/// A module for `m`, a mapping of an ELF file's code, with the rules of the loader's module for
/// the same file and build id if there is one; `None` if the file cannot be read as ELF or
/// `m`'s offset is in none of its loadable segments.
fn remapped(m: &Mapping, listed: &[ParsedModule]) -> Option<ParsedModule> {
    use object::{Object, ObjectSegment};
    let file = std::fs::File::open(&m.path).ok()?;
    // SAFETY: a read-only private mapping, read here only; a file changed under it can give
    // wrong bytes, not unsafety beyond what every reader of mapped files accepts.
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let elf = object::File::parse(&*map).ok()?;
    let vaddr = elf.segments().find_map(|s| {
        let (off, size) = s.file_range();
        (off <= m.offset && m.offset < off.checked_add(size)?)
            .then(|| s.address().checked_add(m.offset - off))
            .flatten()
    })?;
    let bias = m.start.wrapping_sub(vaddr);
    let build_id = elf.build_id().ok().flatten().map(<[u8]>::to_vec);
    let loaded = listed
        .iter()
        .find(|p| p.module.name == m.path && build_id.is_some() && p.module.build_id == build_id);
    let (rules, note) = match loaded {
        Some(p) => (
            p.parsed.rules.clone(),
            "a second mapping of a loaded file's code: its rules and symbols",
        ),
        None => (
            Arc::new(ModuleRules::empty()),
            "a mapping of a file's code the loader does not list: crossed by frame pointers, \
             named by the file's symbols",
        ),
    };
    Some(module(
        placed(m, m.path.clone(), bias, build_id, ModuleKind::Remapped),
        rules,
        note,
    ))
}

fn module(module: LoadedModule, rules: Arc<ModuleRules<Rule>>, note: &str) -> ParsedModule {
    ParsedModule {
        module,
        parsed: Parsed {
            rules,
            stats: None,
            exidx: None,
            exidx_error: None,
            error: None,
            file_note: Some(note.to_owned()),
            return_sites: None,
        },
        reused: false,
        overlaps: None,
    }
}

#[cfg(test)]
mod tests {
    /// Reading this process's memory through a pipe (qemu-user's way, see `read_own`): what is
    /// mapped reads back, what is not fails without blocking or faulting.
    #[test]
    fn own_memory_reads_through_a_pipe() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut out = vec![0u8; data.len()];
        assert!(super::read_own_through_pipe(data.as_ptr() as u64, &mut out));
        assert_eq!(out, data);
        let mut out = [0u8; 8];
        assert!(
            !super::read_own_through_pipe(8, &mut out),
            "page 0 is not mapped"
        );
    }

    use super::*;

    const MAPS: &str = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1234                       /nonexistent/node
55d0c0a01000-55d0c2000000 r-xp 00001000 08:01 1234                       /nonexistent/node
7f43a0000000-7f43a0040000 rwxp 00000000 00:00 0 
7f43a0040000-7f43a0080000 r-xp 00000000 00:00 0 
7f43b0000000-7f43b0192000 r-xp 014c4000 08:01 1234                       /nonexistent/node
7f43c0000000-7f43c0010000 r-xp 00000000 00:01 99                         /memfd:jit (deleted)
7ffc1a1f0000-7ffc1a1f2000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
7f43d0000000-7f43d0001000 rw-p 00000000 00:00 0 
garbage line
";

    #[test]
    fn executable_mappings_are_read_with_their_offsets_and_names() {
        let m = executable(MAPS);
        assert_eq!(m.len(), 7, "{m:?}");
        assert_eq!(
            m[0],
            Mapping {
                start: 0x55d0c0a01000,
                end: 0x55d0c2000000,
                offset: 0x1000,
                path: "/nonexistent/node".into(),
                writable: false,
            }
        );
        assert_eq!(m[1].path, "", "anonymous");
        assert!(m[1].writable && !m[2].writable);
        assert_eq!(m[3].offset, 0x14c4000);
        assert_eq!(m[4].path, "/memfd:jit (deleted)");
        assert_eq!(m[6].path, "[vsyscall]");
    }

    #[test]
    fn unlisted_code_is_anonymous_or_remapped_and_the_kernels_is_left_out() {
        let listed = module(
            LoadedModule {
                name: "/nonexistent/node".into(),
                bias: 0x55d0c0a00000,
                start: 0x55d0c0a01000,
                end: 0x55d0c2000000,
                file_offset: 0x1000,
                eh_frame_hdr: None,
                image_start: 0x55d0c0a00000,
                image_end: 0x55d0c2000000,
                build_id: None,
                kind: ModuleKind::Loaded,
            },
            Arc::new(ModuleRules::empty()),
            "",
        );
        let out = unlisted_code(MAPS, &[listed], &[]);
        let got: Vec<_> = out
            .iter()
            .map(|p| {
                (
                    p.module.start,
                    p.module.end,
                    p.module.kind,
                    p.module.name.as_str(),
                )
            })
            .collect();
        // A file that cannot be read: its second mapping is anonymous code, named as the maps
        // name it.
        assert_eq!(
            got[0],
            (
                0x7f43a0000000,
                0x7f43a0080000,
                ModuleKind::Anonymous,
                "[anon]"
            ),
            "two adjacent anonymous mappings are one module: {got:?}"
        );
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[1].3, "/nonexistent/node");
        assert_eq!(got[1].2, ModuleKind::Anonymous);
        assert_eq!(got[2].3, "/memfd:jit (deleted)");
        assert!(out.iter().all(|p| p.parsed.rules.rows() == 0));
    }

    /// An executable stack or heap, and a registered thread's stack, are not code; with
    /// `READ_IMPLIES_EXEC`, no writable anonymous mapping is.
    #[test]
    fn stacks_and_the_heap_are_not_code() {
        let maps = "\
7ffc00000000-7ffc00021000 rwxp 00000000 00:00 0                          [stack]
560000000000-560000021000 rwxp 00000000 00:00 0                          [heap]
7f0000000000-7f0000800000 rwxp 00000000 00:00 0 
7f1000000000-7f1000010000 rwxp 00000000 00:00 0 
";
        let out = unlisted_code(maps, &[], &[(0x7f00_0000_1000, 0x7f00_0080_0000)]);
        let got: Vec<_> = out.iter().map(|p| p.module.start).collect();
        assert_eq!(got, [0x7f10_0000_0000], "only the JIT region is code");
        let m = executable(maps);
        assert!(
            excluded(&m[3], &[], true),
            "writable, with READ_IMPLIES_EXEC"
        );
        assert!(!excluded(&m[3], &[], false));
    }

    /// A file this process has mapped at a second place (as node maps its builtins) is that
    /// file's code: the bias puts the mapping's offset at the segment's address.
    #[test]
    fn a_second_mapping_of_a_file_gets_its_bias_from_the_segment() {
        let exe = std::env::current_exe().unwrap();
        let data = std::fs::read(&exe).unwrap();
        use object::{Object, ObjectSegment};
        let elf = object::File::parse(&*data).unwrap();
        let text = elf
            .segments()
            .find(|s| {
                matches!(s.flags(), object::SegmentFlags::Elf { p_flags, .. }
                    if p_flags.0 & object::elf::PF_X.0 != 0)
            })
            .expect("an executable segment");
        let (off, _) = text.file_range();
        let m = Mapping {
            start: 0x7000_0000_0000,
            end: 0x7000_0000_1000,
            offset: off + 0x1000,
            path: exe.to_string_lossy().into_owned(),
            writable: false,
        };
        let p = remapped(&m, &[]).expect("the test binary is ELF");
        assert_eq!(p.module.kind, ModuleKind::Remapped);
        assert_eq!(
            p.module.bias.wrapping_add(text.address() + 0x1000),
            0x7000_0000_0000
        );
        assert_eq!(
            p.module.build_id.as_deref(),
            elf.build_id().unwrap(),
            "the file's build id"
        );
    }
}
