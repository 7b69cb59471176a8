//! Our exported STACK CFI against Mozilla dump_syms's, for libc, libstdc++ and the test programs
//! (`shlib.c` and `workload.c` built as shared objects, `shlib.c` with a `main` as a non-PIE
//! executable; ARM and Thumb on armhf) on x86_64 and
//! armhf: loaded by breakpad-symbols, the two tables give the same caller CFA and
//! return address at every address either covers, or the address is classified and counted
//! (see `unwind_validate::cfi_compare`).

use std::path::{Path, PathBuf};
use std::process::Command;

use unwind_validate::cfi_compare::{compare_elf, TableComparison};
use unwind_validate::tools;

fn dump_syms() -> PathBuf {
    let d = tools::dump_syms();
    let runs = Command::new(&d)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        runs,
        "Mozilla's dump_syms ({}) is missing: run scripts/setup",
        d.display()
    );
    d
}

/// Builds `tests/programs/<source>` as a shared object with `compiler` and `flags` into
/// `target/cfi-tables/<name>` (the workload's references to the agent stay undefined).
fn build(compiler: &str, flags: &[&str], source: &str, name: &str) -> Option<PathBuf> {
    let root = tools::workspace_root();
    let dir = root.join("target").join("cfi-tables");
    std::fs::create_dir_all(&dir).ok()?;
    let out = dir.join(name);
    let programs = root.join("tests/programs");
    let status = Command::new(compiler)
        .args(flags)
        .args(["-fPIC", "-shared", "-I"])
        .arg(&programs)
        .arg("-o")
        .arg(&out)
        .arg(programs.join(source))
        .status()
        .ok()?;
    status.success().then_some(out)
}

/// Links `tests/programs/shlib.c` and a `main` into a non-PIE executable (its image base is not
/// 0: 0x400000 on x86_64, 0x10000 on armhf), in `target/cfi-tables/<name>`.
fn build_executable(compiler: &str, flags: &[&str], name: &str) -> Option<PathBuf> {
    let root = tools::workspace_root();
    let dir = root.join("target").join("cfi-tables");
    std::fs::create_dir_all(&dir).ok()?;
    // A file of its own: the three architectures' tests build at once, and one rewriting a
    // shared main.c (truncated, then written) gave another's compiler an empty file ("undefined
    // reference to `main'", seen in .ci/run).
    let main = dir.join(format!("{name}-main.c"));
    std::fs::write(
        &main,
        "long shlib_entry(long (*cb)(long), long n);\n\
         static long cb(long n) { return n; }\n\
         int main(int argc, char **argv) { (void)argv; return (int)shlib_entry(cb, argc); }\n",
    )
    .ok()?;
    let out = dir.join(name);
    let status = Command::new(compiler)
        .args(flags)
        .args(["-no-pie", "-o"])
        .arg(&out)
        .arg(root.join("tests/programs/shlib.c"))
        .arg(&main)
        .status()
        .ok()?;
    status.success().then_some(out)
}

fn host_libstdcxx() -> Option<PathBuf> {
    let out = Command::new("gcc")
        .arg("-print-file-name=libstdc++.so.6")
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let p = p.canonicalize().ok()?;
    p.exists().then_some(p)
}

fn check(elf: &Path, dump_syms: &Path) -> TableComparison {
    let t = compare_elf(elf, dump_syms).unwrap_or_else(|e| panic!("{}: {e}", elf.display()));
    println!("{t}\n");
    assert!(
        t.genuine().is_empty(),
        "{}: {} genuine disagreements",
        t.module,
        t.genuine().len()
    );
    assert!(t.ours_covered.bytes > 0, "{}: we export no rule", t.module);
    // Identical where dump_syms has rules, leaving out the explained differences (rows
    // dump_syms gets wrong, such as every PLT entry's CFA).
    let explained: u64 = t.explained.values().map(|e| e.bytes).sum();
    let right = t.dump_syms_covered.bytes - explained;
    if right > 0 {
        let share = 100.0 * t.identical.bytes as f64 / right as f64;
        assert!(
            share > 90.0,
            "{}: only {share:.2} % of the bytes where dump_syms has a rule (not explained) are identical",
            t.module
        );
    }
    t
}

#[test]
fn x86_64_tables_match_dump_syms() {
    let d = dump_syms();
    let mut files = vec![PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6")];
    files.extend(host_libstdcxx());
    let flags = ["-O2", "-g", "-fomit-frame-pointer"];
    files.extend(build("gcc", &flags, "shlib.c", "shlib-x86_64.so"));
    files.extend(build("gcc", &flags, "workload.c", "workload-x86_64.so"));
    files.extend(build_executable("gcc", &flags, "shlib-x86_64-nopie"));
    assert_eq!(files.len(), 5, "missing input files: {files:?}");
    let mut rows = vec![TableComparison::markdown_header().to_string()];
    for f in &files {
        let t = check(f, &d);
        assert!(
            t.dump_syms_covered.bytes > 0,
            "{}: dump_syms has no rules",
            t.module
        );
        rows.push(t.markdown_row());
    }
    println!("{}", rows.join("\n"));
}

#[test]
fn armhf_tables_match_dump_syms() {
    let d = dump_syms();
    let armv7 = unwind_test_support::target::by_name("armv7");
    let lib = Path::new(armv7.libdir);
    let cc = &armv7.cc();
    let mut files = vec![lib.join("libc.so.6"), lib.join("libstdc++.so.6")];
    let flags = ["-O2", "-g", "-fomit-frame-pointer", "-funwind-tables"];
    for mode in ["arm", "thumb"] {
        let mut f = flags.to_vec();
        let m = format!("-m{mode}");
        f.push(&m);
        files.extend(build(cc, &f, "shlib.c", &format!("shlib-{mode}.so")));
        files.extend(build(cc, &f, "workload.c", &format!("workload-{mode}.so")));
        files.extend(build_executable(cc, &f, &format!("shlib-{mode}-nopie")));
    }
    assert!(
        files.iter().all(|f| f.exists()) && files.len() == 8,
        "missing armhf files or {cc} (run scripts/setup): {files:?}"
    );
    let mut rows = vec![TableComparison::markdown_header().to_string()];
    for f in &files {
        let t = check(f, &d);
        rows.push(t.markdown_row());
    }
    println!("{}", rows.join("\n"));
}

/// Debian's arm64 libc and libstdc++ and the test programs built by its cross compiler (the
/// ordinary way, and with pointer authentication: dump_syms writes a signed row as any other,
/// and so do we).
#[test]
fn aarch64_tables_match_dump_syms() {
    let d = dump_syms();
    let aarch64 = unwind_test_support::target::by_name("aarch64");
    let lib = Path::new(aarch64.libdir);
    let cc = &aarch64.cc();
    let mut files = vec![lib.join("libc.so.6"), lib.join("libstdc++.so.6")];
    for (tag, flags) in [
        ("a64", &["-O2", "-g", "-fomit-frame-pointer"][..]),
        ("a64-pac", &["-O2", "-mbranch-protection=standard"][..]),
    ] {
        files.extend(build(cc, flags, "shlib.c", &format!("shlib-{tag}.so")));
        files.extend(build(
            cc,
            flags,
            "workload.c",
            &format!("workload-{tag}.so"),
        ));
        files.extend(build_executable(cc, flags, &format!("shlib-{tag}-nopie")));
    }
    assert!(
        files.iter().all(|f| f.exists()) && files.len() == 8,
        "missing arm64 files or {cc} (run scripts/setup): {files:?}"
    );
    let mut rows = vec![TableComparison::markdown_header().to_string()];
    for f in &files {
        let t = check(f, &d);
        assert!(
            t.dump_syms_covered.bytes > 0,
            "{}: dump_syms has no rules",
            t.module
        );
        rows.push(t.markdown_row());
    }
    println!("{}", rows.join("\n"));
}
