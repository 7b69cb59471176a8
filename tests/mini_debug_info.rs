//! A library whose CFI is only in its MiniDebugInfo (`.gnu_debugdata`, as ART's compiled code
//! keeps it; `unwind_test_support::mini_debug_info_library`), loaded with `dlopen`, gets that
//! CFI's rules at the next refresh: its module's report counts the FDEs, which the same library
//! stripped without MiniDebugInfo lacks.

#[cfg(target_arch = "x86_64")]
#[test]
fn a_loaded_librarys_mini_debug_info_gives_its_rules() {
    unwind_in_process::init().expect("init");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("mini-debug-info-{}", std::process::id()));
    let Some(lib) = unwind_test_support::mini_debug_info_library(&dir) else {
        return;
    };
    let fdes = |path: &std::path::Path| {
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a library of three functions, without constructors.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) };
        assert!(!handle.is_null(), "dlopen {}", path.display());
        let report = unwind_in_process::refresh().expect("refresh");
        let name = path.file_name().unwrap().to_str().unwrap();
        let m = report
            .modules
            .iter()
            .find(|m| m.name.ends_with(name))
            .unwrap_or_else(|| panic!("no module {name}"));
        println!(
            "{name}: {} rows, {:?}",
            m.rows,
            m.stats.as_ref().map(|s| s.fdes)
        );
        m.stats.as_ref().map_or(0, |s| s.fdes)
    };
    let original = fdes(&lib.original);
    assert!(original >= 3, "{original} FDEs in the original");
    assert_eq!(fdes(&lib.stripped), 0);
    assert_eq!(fdes(&lib.mini), original);
}
