//! An ELF image without its section headers (a library mapped from an APK and read back from
//! a process's memory: the headers are at the file's end, which is never loaded) gives its
//! `.eh_frame` rules through `PT_GNU_EH_FRAME`, the same as its file gives them.

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
use unwind_core::X86_64;

// The test's own executable stands for the library: an x86_64 ELF file.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[test]
fn an_image_without_section_headers_gives_its_eh_frame_rules() {
    let path = std::env::current_exe().unwrap();
    let file = std::fs::read(&path).unwrap();
    let whole = unwind_dwarf::rules_from_elf::<X86_64>(&file).unwrap();
    // The image as loaded: up to the end of the last loadable segment's file bytes, the
    // section header table (after it) cut off and its offset pointing past the end.
    let elf = object::File::parse(&*file).unwrap();
    let end = object::Object::segments(&elf)
        .map(|s| {
            let (at, size) = object::ObjectSegment::file_range(&s);
            at + size
        })
        .max()
        .unwrap() as usize;
    let shoff = u64::from_le_bytes(file[0x28..0x30].try_into().unwrap()) as usize;
    assert!(
        shoff >= end,
        "the section headers are after the loaded bytes"
    );
    let image = &file[..end];
    assert!(
        object::File::parse(image).is_err(),
        "object refuses it as it is"
    );
    let headerless = unwind_dwarf::rules_from_elf::<X86_64>(image)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let extents: Vec<_> = headerless.rules.extents().collect();
    assert!(extents.len() > 1000, "{} extents", extents.len());
    // Every row it gives is the file's (the file adds its PLT's rows and `.debug_frame`'s).
    let differ = extents
        .iter()
        .filter(|(from, _, rule)| whole.rules.lookup(*from) != Some(*rule))
        .count();
    assert_eq!(differ, 0, "of {}", extents.len());
    println!(
        "{} of the file's {} extents from the image without section headers",
        extents.len(),
        whole.rules.extents().count()
    );
}
