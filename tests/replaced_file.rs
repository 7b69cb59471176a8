//! A library replaced on disk while it is loaded (a package upgrade under a running program):
//! its file is another build, so rules only the file has (x86_64 PLT sections, the ARM
//! `.debug_frame`) must not be taken from it. The preload report says why, naming both build
//! ids, and the module keeps the rules its mapped image gives.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::Command;

fn compiler() -> String {
    unwind_test_support::target::host().cc()
}

/// Builds `lib{name}.so` from a C body (`-g`: on ARM, `.debug_frame`, read from the file only).
fn build(dir: &Path, file: &str, body: &str) -> PathBuf {
    let src = dir.join(format!("{file}.c"));
    std::fs::write(&src, body).expect("write source");
    let out = dir.join(file);
    let status = Command::new(compiler())
        .args(["-O2", "-g", "-fPIC", "-shared", "-funwind-tables", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "building {}", out.display());
    out
}

fn module_line(
    report: &unwind_in_process::PreloadReport,
    path: &Path,
) -> unwind_in_process::ModuleReport {
    report
        .modules
        .iter()
        .find(|m| Path::new(&m.name) == path)
        .unwrap_or_else(|| panic!("{} not in the report:\n{report}", path.display()))
        .clone()
}

#[test]
fn a_library_replaced_on_disk_is_not_read_from_its_file() {
    if !unwind_test_support::tool_runs(&compiler()) {
        unwind_test_support::missing(&compiler());
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "replaced-file-{}-{}",
        std::process::id(),
        unwind_test_support::target::host().name
    ));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let path = build(
        &dir,
        "libreplaced.so",
        "int replaced_f(int x) { return x * 3 + 1; }\n",
    );
    // Another library, left alone: its file is read.
    let kept = build(&dir, "libkept.so", "int kept_f(int x) { return x ^ 5; }\n");
    unwind_in_process::init().expect("init");
    for p in [&path, &kept] {
        let c = CString::new(p.to_str().expect("utf-8")).expect("path");
        // SAFETY: loads a library with no constructors.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!h.is_null(), "dlopen {}", p.display());
    }
    // Replace the file the way package managers do, a new build renamed over it, before the
    // refresh that first parses the loaded library.
    let new = build(
        &dir,
        "libreplaced-new.so",
        "int replaced_f(int x) { return x * 7 - 2; }\nint added(void) { return 1; }\n",
    );
    std::fs::rename(&new, &path).expect("rename over");
    let after = unwind_in_process::refresh().expect("refresh");
    let replaced = module_line(&after, &path);
    let note = replaced.file_note.clone().unwrap_or_default();
    assert!(
        note.starts_with("the file on disk is another build (build id ")
            && note.contains(" on disk, ")
            && note.ends_with(" mapped)"),
        "{replaced}"
    );
    assert!(
        replaced
            .to_string()
            .contains("file not read: the file on disk is another build"),
        "{replaced}"
    );
    // The mapped image still gives rules (x86_64: `.eh_frame`; ARM: `.ARM.exidx`).
    assert!(replaced.rows > 0, "{replaced}");
    // The untouched library's file is read.
    let kept = module_line(&after, &kept);
    assert_eq!(kept.file_note, None, "{kept}");
    // On ARM a file's `.debug_frame` gives DWARF rows; the image alone has none (no
    // `.eh_frame`), so the replaced library's rules come from EXIDX only.
    if cfg!(target_arch = "arm") {
        let fdes = |m: &unwind_in_process::ModuleReport| m.stats.as_ref().map_or(0, |s| s.fdes);
        assert!(fdes(&kept) > 0, "{kept}");
        assert_eq!(fdes(&replaced), 0, "{replaced}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
