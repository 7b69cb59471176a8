//! Function names for addresses, from each loaded module's ELF symbol tables (outside signal
//! handlers: this reads files and allocates).

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

use crate::offline::ModuleFile;

/// Where an address is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Symbol<'a> {
    /// The module's path or name.
    pub module: &'a str,
    /// The demangled function name, if the module has a symbol covering the address.
    pub function: Option<&'a str>,
    /// Offset from the function's start (or from the module's load bias if no function).
    pub offset: u64,
}

#[derive(Debug)]
struct SymModule {
    start: u64,
    end: u64,
    bias: u64,
    name: String,
    /// `(file address, size, name as the table spells it)`, sorted by address: of the names at
    /// one address, the public one ([`alias_rank`]).
    symbols: Vec<(u64, u64, String)>,
    /// Each symbol's name demangled, when first looked up (most never are: demangling all of a
    /// large C++ program's names is most of the cost of reading its tables).
    demangled: Vec<std::sync::OnceLock<String>>,
    /// Every name of a function with more than one (aliases), `(file address, demangled name)`,
    /// sorted.
    aliases: Vec<(u64, String)>,
    /// The functions its unwind tables describe, sorted by start.
    functions: Vec<unwind_dwarf::functions::Function>,
}

/// Symbolizes addresses of the modules it was built for.
#[derive(Debug, Default)]
pub struct Symbolizer {
    modules: Vec<SymModule>,
}

/// A function: file address, size and demangled name.
type Function = (u64, u64, String);

/// A function symbol: file address, size, demangled name, and its rank among the names of
/// one address ([`alias_rank`]).
type Named = (u64, u64, String, AliasRank);

/// How public a symbol's name is, lowest first: visible outside its file (global or weak,
/// default visibility) before local or hidden (`__GI___libc_malloc`), then fewer leading
/// underscores (`malloc` before `__libc_malloc`), then global before weak, then shorter
/// (`open` before `open64`). Of a function's aliases the first is the name a caller uses, as
/// perf and gdb show it.
pub type AliasRank = (bool, usize, bool, usize);

/// The [`AliasRank`] of a symbol.
fn alias_rank(s: &object::Symbol<'_, '_>, name: &str) -> AliasRank {
    (
        s.scope() != object::SymbolScope::Dynamic,
        name.len() - name.trim_start_matches('_').len(),
        s.is_weak(),
        name.len(),
    )
}

/// Sorts `symbols` by address, the largest and then the most public first, and keeps every
/// name of an address with more than one in `aliases`; then one per address.
fn one_per_address(
    mut symbols: Vec<Named>,
    aliases: &mut Vec<(u64, String)>,
) -> Vec<(u64, u64, String)> {
    symbols.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.3.cmp(&b.3)));
    for pair in symbols.windows(2) {
        if pair[0].0 == pair[1].0 && pair[0].2 != pair[1].2 {
            aliases.push((pair[0].0, demangle(&pair[0].2)));
            aliases.push((pair[1].0, demangle(&pair[1].2)));
        }
    }
    aliases.sort();
    aliases.dedup();
    symbols.dedup_by_key(|s| s.0);
    symbols.into_iter().map(|(a, s, n, _)| (a, s, n)).collect()
}

/// The functions `data`'s symbol tables name (`.symtab`, `.dynsym`, those of its MiniDebugInfo,
/// its PLT stubs), sorted by address, one per address (the most public name), and the aliases.
fn read_symbols(data: &[u8]) -> (Vec<Function>, Vec<(u64, String)>) {
    let mut aliases = Vec::new();
    let symbols = one_per_address(read_named(data), &mut aliases);
    (symbols, aliases)
}

/// The functions of `data`'s symbol tables, MiniDebugInfo's and PLT, unsorted.
fn read_named(data: &[u8]) -> Vec<Named> {
    let Ok(file) = object::File::parse(data) else {
        return Vec::new();
    };
    let mut out = symbols_of(&file);
    // MiniDebugInfo: Fedora's holds the functions `.dynsym` does not list, ART's those of
    // compiled Java code.
    if let Some(Ok(inner)) = unwind_dwarf::mini_debug_info::of_elf(&file) {
        if let Ok(inner) = object::File::parse(&*inner) {
            out.extend(symbols_of(&inner));
        }
    }
    out
}

/// The functions of `file`'s own symbol tables and PLT, unsorted.
fn symbols_of(file: &object::File<'_>) -> Vec<Named> {
    let mut out: Vec<Named> = file
        .symbols()
        .chain(file.dynamic_symbols())
        // An undefined symbol is a function the file imports: in a non-PIE executable it has the
        // address of its PLT entry (the function's canonical address), but that is no code of
        // this file's; taken as a function without a size, it would name every address up to
        // the next symbol (all of a stripped gcc driver was `strcmp`).
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0 && !s.is_undefined())
        .filter_map(|s| {
            let name = s.name().ok()?;
            // A symbol without a size (hand-written code such as `_init`) covers at most the
            // rest of its section, so it does not swallow the next section (ARM's `.plt`
            // follows `.init`).
            let size = match s.size() {
                0 => s
                    .section_index()
                    .and_then(|i| file.section_by_index(i).ok())
                    .map_or(0, |sec| {
                        (sec.address() + sec.size()).saturating_sub(s.address())
                    }),
                n => n,
            };
            Some((s.address(), size, name.to_owned(), alias_rank(&s, name)))
        })
        .collect();
    // PLT stubs, which no symbol table lists (`NAME@plt`).
    let last = (true, usize::MAX, true, usize::MAX);
    out.extend(
        crate::plt_names::plt_symbols(file)
            .into_iter()
            .map(|(a, s, n)| (a, s, n, last)),
    );
    // A Go program without its symbol table (`-ldflags=-s`): Go's own function table names its
    // functions as Go's tracebacks do.
    if file.section_by_name(".symtab").is_none() {
        if let Some(Ok(table)) = unwind_dwarf::go::pclntab::of_elf(file) {
            out.extend(table.functions().map(|f| {
                let size = f.end.saturating_sub(f.start);
                (f.start, size, f.name.to_string(), last)
            }));
        }
    }
    out
}

/// A symbol's name demangled: Rust (legacy and v0 mangling) and C++ (Itanium ABI, `_Z...`);
/// other names as they are.
pub fn demangle(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(cpp) = cpp_demangle::Symbol::new(name).and_then(|s| {
            s.demangle()
                .map_err(|_| cpp_demangle::error::Error::UnexpectedText)
        }) {
            return cpp;
        }
    }
    name.to_string()
}

/// Symbols of the file at `path`, completed from its separate debug file
/// (`/usr/lib/debug/.build-id/xx/yyyy.debug`, as Debian's `-dbg` packages install them) when
/// the file itself is stripped; and the functions of its unwind tables.
fn file_symbols(path: &std::path::Path, debug: Option<&std::path::Path>) -> FileSymbols {
    let Some(data) = crate::debug_files::map(path) else {
        return FileSymbols::default();
    };
    let functions = unwind_dwarf::functions::functions_of_elf(&data);
    let mut named = read_named(&data);
    let debug = debug.map(std::path::Path::to_path_buf).or_else(|| {
        let file = object::File::parse(&*data).ok()?;
        let found = crate::debug_files::DebugSearch::default().debug_file(&file, path, path)?;
        Some(found.path)
    });
    if let Some(d) = debug.and_then(|d| crate::debug_files::map(&d)) {
        named.extend(read_named(&d));
    }
    let mut aliases = Vec::new();
    let symbols = one_per_address(named, &mut aliases);
    FileSymbols {
        symbols,
        aliases,
        functions,
    }
}

/// What [`file_symbols`] reads of a file.
#[derive(Default)]
struct FileSymbols {
    symbols: Vec<(u64, u64, String)>,
    aliases: Vec<(u64, String)>,
    functions: Vec<unwind_dwarf::functions::Function>,
}

/// Lowercase hex of `bytes` (a build id as the debug-file tree and minidumps spell it).
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Whether a module's path names a file. The loader gives every module it opened by path a
/// path with a `/` in it (the one searched for, or the one `dlopen` was given); a bare name is
/// the vdso's soname (`linux-vdso.so.1`, `linux-gate.so.1`), which is no file, and is never
/// looked for in the current directory.
pub fn has_file(path: &std::path::Path) -> bool {
    path.parent().is_some_and(|p| !p.as_os_str().is_empty())
}

impl Symbolizer {
    /// Reads the symbol tables of `modules` from their files. The vdso of a live process has
    /// no file: a module named `linux-vdso*`, `linux-gate*` or `[vdso]` whose file gives no symbols (or
    /// that has no file: see [`has_file`]) takes them from `vdso_image` (the image copied from
    /// the sampled process's memory), if given.
    pub fn new(modules: &[ModuleFile], vdso_image: Option<&[u8]>) -> Self {
        Self::with_debug_file(modules, vdso_image, None)
    }

    /// As [`new`](Self::new), the symbols of `debug` (a separate debug file found elsewhere)
    /// added to those of every module; without it, each module's debug file is looked for in
    /// the default places ([`crate::debug_files::DebugSearch::default`]).
    pub fn with_debug_file(
        modules: &[ModuleFile],
        vdso_image: Option<&[u8]>,
        debug: Option<&std::path::Path>,
    ) -> Self {
        let mut out: Vec<SymModule> = modules
            .iter()
            .map(|m| {
                let name = m.path.display().to_string();
                let mut read = if has_file(&m.path) {
                    file_symbols(&m.path, debug)
                } else {
                    FileSymbols::default()
                };
                if read.symbols.is_empty()
                    && (name.contains("linux-vdso")
                        || name.contains("linux-gate")
                        || name == "[vdso]")
                {
                    if let Some(image) = vdso_image {
                        let (symbols, aliases) = read_symbols(image);
                        read = FileSymbols {
                            symbols,
                            aliases,
                            functions: unwind_dwarf::functions::functions_of_elf(image),
                        };
                    }
                }
                SymModule {
                    start: m.start,
                    end: m.end,
                    bias: m.bias,
                    name,
                    demangled: read.symbols.iter().map(|_| Default::default()).collect(),
                    symbols: read.symbols,
                    aliases: read.aliases,
                    functions: read.functions,
                }
            })
            .collect();
        out.sort_by_key(|m| m.start);
        Symbolizer { modules: out }
    }

    /// Whether `name` is one of the names of the function the symbol tables put at run-time
    /// address `addr` (its most public one, or an alias of it).
    pub fn names_function_at(&self, addr: u64, name: &str) -> bool {
        let Some(m) = self.module_of(addr) else {
            return false;
        };
        let Some(Symbol {
            function: Some(best),
            offset,
            ..
        }) = self.lookup(addr)
        else {
            return false;
        };
        let start = addr.wrapping_sub(m.bias).wrapping_sub(offset);
        best == name || m.aliases.binary_search(&(start, name.to_owned())).is_ok()
    }

    /// The module containing run-time address `addr`.
    fn module_of(&self, addr: u64) -> Option<&SymModule> {
        let i = self
            .modules
            .partition_point(|m| m.start <= addr)
            .checked_sub(1)?;
        self.modules.get(i).filter(|m| addr < m.end)
    }

    /// Where `addr` is. For return addresses, pass `addr - 1` to name the call site.
    pub fn lookup(&self, addr: u64) -> Option<Symbol<'_>> {
        let m = self.module_of(addr)?;
        let svma = addr.wrapping_sub(m.bias);
        let j = m.symbols.partition_point(|s| s.0 <= svma);
        let sym = j.checked_sub(1).and_then(|i| {
            let s = m.symbols.get(i)?;
            let next = m.symbols.get(j).map_or(u64::MAX, |n| n.0);
            ((s.1 == 0 || svma < s.0 + s.1) && svma < next).then_some((i, s))
        });
        Some(match sym {
            Some((i, s)) => Symbol {
                module: &m.name,
                function: m
                    .demangled
                    .get(i)
                    .map(|d| d.get_or_init(|| demangle(&s.2)).as_str()),
                offset: svma - s.0,
            },
            None => Symbol {
                module: &m.name,
                function: None,
                offset: svma,
            },
        })
    }

    /// The function containing `addr` as its module's unwind tables describe it (an FDE's
    /// range, or an `.ARM.exidx` entry's to the next), as run-time addresses `(start, end)`;
    /// `None` outside every module and every described function. Names code without symbols.
    pub fn function_bounds(&self, addr: u64) -> Option<(u64, u64)> {
        let m = self.module_of(addr)?;
        let svma = addr.wrapping_sub(m.bias);
        let j = m
            .functions
            .partition_point(|f| f.start <= svma)
            .checked_sub(1)?;
        let f = m.functions.get(j).filter(|f| svma < f.end)?;
        Some((f.start.wrapping_add(m.bias), f.end.wrapping_add(m.bias)))
    }

    /// A printable name: the function, or `module+0xoffset`, or the raw address.
    pub fn name(&self, addr: u64) -> String {
        Self::display(self.lookup(addr), addr)
    }

    fn display(symbol: Option<Symbol<'_>>, addr: u64) -> String {
        match symbol {
            Some(Symbol {
                function: Some(f), ..
            }) => f.to_string(),
            Some(Symbol { module, offset, .. }) => {
                let short = module.rsplit('/').next().unwrap_or(module);
                format!("{short}+{offset:#x}")
            }
            None => format!("{addr:#x}"),
        }
    }

    /// Where the frame with return address `ra` is: at `ra - 1` (the call instruction), or at
    /// `ra` itself when no function covers `ra - 1` or `ra` starts a module. Both are signal
    /// trampolines: glibc's `__restore_rt` is preceded by a `nop` so that `ra - 1` finds its
    /// CFI, but that `nop` belongs to no symbol; qemu-user's aarch64 trampoline starts a page of
    /// its own.
    pub fn lookup_return_address(&self, ra: u64) -> Option<Symbol<'_>> {
        // The first byte of a module: a signal trampoline that begins its mapping (qemu-user's
        // aarch64 page), whose caller's call is in another module or none.
        if self.module_of(ra).is_some_and(|m| m.start == ra) {
            return self.lookup(ra);
        }
        match self.lookup(ra.wrapping_sub(1)) {
            Some(s) if s.function.is_none() => self.lookup(ra).or(Some(s)),
            other => other,
        }
    }

    /// Names for an unwound stack: frame 0 at its PC, callers by
    /// [`lookup_return_address`](Self::lookup_return_address).
    pub fn stack(&self, pcs: &[u64]) -> Vec<String> {
        pcs.iter()
            .enumerate()
            .map(|(i, &pc)| {
                let s = if i == 0 {
                    self.lookup(pc)
                } else {
                    self.lookup_return_address(pc)
                };
                Self::display(s, pc)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(path: &std::path::Path) -> ModuleFile {
        ModuleFile {
            path: path.to_path_buf(),
            start: 0x1000,
            end: 0x2000,
            bias: 0,
        }
    }

    /// The vdso's symbols come from its file where there is one (a copy saved with the
    /// samples), else from the image given; other modules never take the image.
    /// A little-endian ELF64 file with a `.text` section at 0x1000 (0x100 bytes) and a
    /// `.symtab` of `symbols`: (name, value, size, section index; 0 for undefined), all
    /// global functions.
    fn elf_with_symbols(symbols: &[(&str, u64, u64, u16)]) -> Vec<u8> {
        let mut strtab = vec![0u8];
        let mut symtab = vec![0u8; 24];
        for &(name, value, size, shndx) in symbols {
            let at = strtab.len() as u32;
            strtab.extend_from_slice(name.as_bytes());
            strtab.push(0);
            symtab.extend_from_slice(&at.to_le_bytes());
            symtab.push(0x12); // STB_GLOBAL, STT_FUNC
            symtab.push(0);
            symtab.extend_from_slice(&shndx.to_le_bytes());
            symtab.extend_from_slice(&value.to_le_bytes());
            symtab.extend_from_slice(&size.to_le_bytes());
        }
        let shstrtab = b"\0.text\0.symtab\0.strtab\0.shstrtab\0".to_vec();
        // Layout: header, .symtab, .strtab, .shstrtab, section headers.
        let sym_off = 64u64;
        let str_off = sym_off + symtab.len() as u64;
        let shstr_off = str_off + strtab.len() as u64;
        let sh_off = (shstr_off + shstrtab.len() as u64).next_multiple_of(8);
        let mut f = Vec::new();
        f.extend_from_slice(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
        f.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        f.extend_from_slice(&62u16.to_le_bytes()); // EM_X86_64
        f.extend_from_slice(&1u32.to_le_bytes());
        f.extend_from_slice(&0x1000u64.to_le_bytes()); // entry
        f.extend_from_slice(&0u64.to_le_bytes()); // no program headers
        f.extend_from_slice(&sh_off.to_le_bytes());
        f.extend_from_slice(&0u32.to_le_bytes());
        for v in [64u16, 56, 0, 64, 5, 4] {
            f.extend_from_slice(&v.to_le_bytes());
        }
        f.extend_from_slice(&symtab);
        f.extend_from_slice(&strtab);
        f.extend_from_slice(&shstrtab);
        f.resize(sh_off as usize, 0);
        // Each header's fields (name, type, flags, addr, offset, size, link, info, align,
        // entsize) and their widths in bytes.
        let width = [4, 4, 8, 8, 8, 8, 4, 4, 8, 8];
        let (symtab_len, strtab_len) = (symtab.len() as u64, strtab.len() as u64);
        let sections: [[u64; 10]; 5] = [
            [0; 10],
            [1, 8, 6, 0x1000, 0, 0x100, 0, 0, 16, 0], // .text: NOBITS, AX
            [7, 2, 0, 0, sym_off, symtab_len, 3, 1, 8, 24],
            [15, 3, 0, 0, str_off, strtab_len, 0, 0, 1, 0],
            [23, 3, 0, 0, shstr_off, shstrtab.len() as u64, 0, 0, 1, 0],
        ];
        for header in sections {
            for (v, w) in header.iter().zip(width) {
                f.extend_from_slice(&v.to_le_bytes()[..w]);
            }
        }
        f
    }

    /// A function the file imports is none of its code: in a non-PIE executable its undefined
    /// symbol has the address of its PLT entry, and must not name the addresses after it.
    #[test]
    fn imported_functions_name_no_code() {
        let elf = elf_with_symbols(&[("defined", 0x1000, 0x10, 1), ("imported", 0x1040, 0, 0)]);
        let names: Vec<String> = read_symbols(&elf).0.into_iter().map(|s| s.2).collect();
        assert_eq!(names, ["defined"]);
        let dir = std::env::temp_dir().join(format!("symbolize-und-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stripped-non-pie");
        std::fs::write(&path, &elf).unwrap();
        let s = Symbolizer::new(
            &[ModuleFile {
                path: path.clone(),
                start: 0x1000,
                end: 0x1100,
                bias: 0,
            }],
            None,
        );
        assert_eq!(s.name(0x1008), "defined");
        assert_eq!(s.name(0x1048), "stripped-non-pie+0x1048");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn vdso_symbols_from_its_file_else_from_the_image() {
        let exe = std::env::current_exe().unwrap();
        let image = std::fs::read(&exe).unwrap();
        let count = |m: ModuleFile, image: Option<&[u8]>| {
            Symbolizer::new(&[m], image).modules[0].symbols.len()
        };
        let from_file = count(module(&exe), None);
        assert!(from_file > 100, "{from_file}");
        let dir = std::env::temp_dir().join(format!("symbolize-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let saved = dir.join("linux-vdso.so.1");
        std::fs::copy(&exe, &saved).unwrap();
        assert_eq!(count(module(&saved), None), from_file);
        std::fs::remove_file(&saved).unwrap();
        assert_eq!(count(module(&saved), Some(&image)), from_file);
        assert_eq!(count(module(&saved), None), 0);
        assert_eq!(count(module(&dir.join("libmissing.so")), Some(&image)), 0);
        std::fs::remove_dir(&dir).unwrap();
        // The live vdso's bare soname is not looked for as a file (in the current directory).
        let bare = std::path::Path::new("linux-vdso.so.1");
        assert_eq!(count(module(bare), Some(&image)), from_file);
        assert_eq!(count(module(bare), None), 0);
    }

    /// Code with no symbol is placed in its function by the unwind tables: every function of
    /// this crate in the test binary has bounds that start at its symbol and cover its code.
    #[test]
    fn function_bounds_come_from_the_unwind_tables() {
        let exe = std::env::current_exe().unwrap();
        let bias = 0x10_0000_0000;
        let s = Symbolizer::new(
            &[ModuleFile {
                path: exe.clone(),
                start: bias,
                end: bias + (1 << 32),
                bias,
            }],
            None,
        );
        let mut checked = 0;
        for (start, size, name) in &s.modules[0].symbols {
            let name = &demangle(name);
            if *size == 0 || !name.starts_with("unwind_samples::") {
                continue;
            }
            let start = start & !1;
            let (from, to) = s.function_bounds(bias + start + size / 2).expect(name);
            assert_eq!(from, bias + start, "{name}");
            assert!(to >= bias + start + size, "{name}");
            checked += 1;
        }
        assert!(checked >= 20, "only {checked} functions");
        assert_eq!(s.function_bounds(bias - 1), None, "outside the module");
    }

    /// A return address at a module's first byte (qemu-user's aarch64 signal trampoline page,
    /// right after another module's last byte) is named in that module, not in the one before.
    #[test]
    fn a_return_address_at_a_modules_first_byte_is_in_that_module() {
        use crate::offline::ModuleFile;
        let file = |name: &str, start, end| ModuleFile {
            path: std::path::PathBuf::from(name),
            start,
            end,
            bias: start,
        };
        let sym = Symbolizer::new(
            &[
                file("ld.so", 0x1000, 0x2000),
                file("[sigreturn]", 0x2000, 0x3000),
            ],
            None,
        );
        let at = |ra| sym.lookup_return_address(ra).map(|s| s.module.to_string());
        assert_eq!(at(0x2000).as_deref(), Some("[sigreturn]"));
        assert_eq!(at(0x1ff0).as_deref(), Some("ld.so"));
        assert_eq!(at(0x2004).as_deref(), Some("[sigreturn]"));
    }

    #[test]
    fn only_paths_with_a_directory_name_files() {
        use std::path::Path;
        assert!(!has_file(Path::new("linux-vdso.so.1")));
        assert!(!has_file(Path::new("linux-gate.so.1")));
        assert!(!has_file(Path::new("")));
        assert!(has_file(Path::new("/lib/x86_64-linux-gnu/libc.so.6")));
        assert!(has_file(Path::new("./plugin.so")));
        assert!(has_file(Path::new("build/plugin.so")));
    }

    #[test]
    fn rust_and_cpp_names_are_demangled() {
        for (mangled, want) in [
            ("_ZN3std2rt10lang_start17h0123456789abcdefE", "std::rt::lang_start"),
            ("_RNvCs1234_7mycrate4main", "mycrate::main"),
            ("_Z10cpp_formatB5cxx11m", "cpp_format[abi:cxx11](unsigned long)"),
            ("_ZN5space3fooEibc", "space::foo(int, bool, char)"),
            ("_ZNKSt5ctypeIcE8do_widenEc", "std::ctype<char>::do_widen(char) const"),
            ("_ZZ10cpp_workermENKUlmE_clEm", "cpp_worker(unsigned long)::{lambda(unsigned long)#1}::operator()(unsigned long) const"),
            ("main", "main"),
            ("_Zgarbage", "_Zgarbage"),
        ] {
            assert_eq!(demangle(mangled), want, "{mangled}");
        }
    }
}
