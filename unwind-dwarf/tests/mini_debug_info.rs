//! CFI read from MiniDebugInfo (`.gnu_debugdata`, an xz-compressed ELF file in the module),
//! where Android's ART keeps the CFI of compiled code: a library gcc built with `.debug_frame`
//! only, whose `.debug_frame` and `.symtab` were moved into MiniDebugInfo the way gdb's manual
//! shows (objcopy, strip, xz), gives the rules the original file gives; one of
//! libunwindstack's recorded libraries (`gnu_debugdata_arm`, built by AOSP) gives its FDEs; a
//! corrupt `.gnu_debugdata` is named as what could not be read.

use std::path::Path;

use unwind_dwarf::{SectionError, UnreadableSection};
use unwind_test_support::{mini_debug_info_library, MiniDebugInfoLibrary};

fn section_offset(path: &Path, name: &str) -> (usize, usize) {
    use object::{Object, ObjectSection};
    let data = std::fs::read(path).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let s = elf.section_by_name(name).unwrap();
    let (offset, size) = s.file_range().unwrap();
    (offset as usize, size as usize)
}

#[cfg(target_arch = "x86_64")]
#[test]
fn debug_frame_in_mini_debug_info_gives_the_original_rules() {
    use unwind_core::X86_64;
    let dir = std::env::temp_dir().join(format!("mini-debug-info-{}", std::process::id()));
    let Some(MiniDebugInfoLibrary {
        original: lib,
        stripped,
        mini,
    }) = mini_debug_info_library(&dir)
    else {
        return;
    };
    let original = unwind_dwarf::load_elf_file::<X86_64>(&lib).unwrap();
    assert!(original.stats.cfi.fdes >= 3, "{:?}", original.stats.cfi);

    // Without MiniDebugInfo the stripped library has no FDE (only its PLT's rows).
    let none = unwind_dwarf::load_elf_file::<X86_64>(&stripped).unwrap();
    assert_eq!(none.stats.cfi.fdes, 0);

    let from_mini = unwind_dwarf::load_elf_file::<X86_64>(&mini).unwrap();
    assert_eq!(from_mini.stats.cfi.fdes, original.stats.cfi.fdes);
    assert!(from_mini.stats.cfi.unreadable_sections.is_empty());
    let theirs: Vec<_> = original.rules.extents().collect();
    let ours: Vec<_> = from_mini.rules.extents().collect();
    assert!(theirs.len() >= 3, "{} extents", theirs.len());
    assert_eq!(ours, theirs);

    // A corrupt stream: the section is named, with what was wrong.
    let (offset, size) = section_offset(&mini, ".gnu_debugdata");
    let mut bad = std::fs::read(&mini).unwrap();
    bad[offset + size / 2] ^= 0x40;
    let r = unwind_dwarf::rules_from_elf::<X86_64>(&bad).unwrap();
    assert_eq!(r.stats.cfi.fdes, 0);
    let s = &r.stats.cfi.unreadable_sections[..];
    assert!(
        matches!(
            s,
            [UnreadableSection {
                name: ".gnu_debugdata",
                error: SectionError::MiniDebugInfo(_),
                ..
            }]
        ),
        "{s:?}"
    );
    println!("corrupt: {}", s[0]);
}

/// AOSP's libandroid_runtime.so from libunwindstack's corpus: `.ARM.exidx` in the file, its
/// `.debug_frame` only in MiniDebugInfo.
#[test]
fn an_android_librarys_debug_frame_is_read_from_its_mini_debug_info() {
    use unwind_core::Arm;
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/unwindstack-corpus/cases/gnu_debugdata_arm/libandroid_runtime.so.gz");
    let gz = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut data = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut data).unwrap();
    let r = unwind_dwarf::rules_from_elf::<Arm>(&data).unwrap();
    println!("{:?}", r.stats.cfi);
    assert!(r.stats.cfi.unreadable_sections.is_empty());
    // 0 without MiniDebugInfo: the file itself has no DWARF CFI.
    assert!(r.stats.cfi.fdes > 1000, "{} FDEs", r.stats.cfi.fdes);
}
