//! Names from MiniDebugInfo: a library stripped of its `.symtab`, whose MiniDebugInfo keeps it,
//! has its `static` function named (only `.symtab` lists it); stripped without MiniDebugInfo,
//! it has not.

use unwind_samples::offline::ModuleFile;
use unwind_samples::symbolize::Symbolizer;

#[cfg(target_arch = "x86_64")]
#[test]
fn a_static_function_is_named_by_the_mini_debug_info() {
    use object::{Object, ObjectSymbol};
    let dir = std::env::temp_dir().join(format!("mini-debug-info-names-{}", std::process::id()));
    let Some(lib) = unwind_test_support::mini_debug_info_library(&dir) else {
        return;
    };
    let original = std::fs::read(&lib.original).unwrap();
    let file = object::File::parse(&*original).unwrap();
    let leaf = file
        .symbols()
        .find(|s| s.name() == Ok("leaf"))
        .expect("leaf in the original's .symtab");
    let base = 0x7f00_0000_0000u64;
    let name_of = |path: &std::path::Path| {
        let m = ModuleFile {
            path: path.to_path_buf(),
            start: base,
            end: base + 0x10_0000,
            bias: base,
        };
        let s = Symbolizer::new(&[m], None);
        s.lookup(base + leaf.address() + 4)
            .and_then(|s| s.function.map(str::to_owned))
    };
    assert_eq!(name_of(&lib.original).as_deref(), Some("leaf"));
    assert_eq!(name_of(&lib.mini).as_deref(), Some("leaf"));
    assert_ne!(name_of(&lib.stripped).as_deref(), Some("leaf"));
    let _ = std::fs::remove_dir_all(&dir);
}
