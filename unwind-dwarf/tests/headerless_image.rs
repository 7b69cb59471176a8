//! ELF files and images without section headers give their `.eh_frame` rules through
//! `PT_GNU_EH_FRAME`, the same as the whole file gives them: a file stripped of its section
//! headers (`sstrip`), and a library's image read back from a process's memory (mapped from an
//! APK: its headers are at the file's end, never loaded), which only
//! `rules_from_memory_image` takes; `rules_from_elf` calls such a file damaged.

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
use unwind_core::X86_64;

/// Every row of `part` is the whole file's (which adds its PLT's rows and `.debug_frame`'s),
/// and it has many.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn same_rows(
    part: &unwind_dwarf::LoadedRules<X86_64>,
    whole: &unwind_dwarf::LoadedRules<X86_64>,
) -> usize {
    let extents: Vec<_> = part.rules.extents().collect();
    assert!(extents.len() > 1000, "{} extents", extents.len());
    let differ = extents
        .iter()
        .filter(|(from, _, rule)| whole.rules.lookup(*from) != Some(*rule))
        .count();
    assert_eq!(differ, 0, "of {}", extents.len());
    extents.len()
}

// The test's own executable stands for the library: an x86_64 ELF file.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[test]
fn files_and_images_without_section_headers_give_their_eh_frame_rules() {
    let path = std::env::current_exe().unwrap();
    let file = std::fs::read(&path).unwrap();
    let whole = unwind_dwarf::rules_from_elf::<X86_64>(&file).unwrap();

    // Stripped of its section headers: e_shoff, e_shnum and e_shstrndx 0.
    let mut stripped = file.clone();
    stripped[0x28..0x30].fill(0);
    stripped[0x3c..0x40].fill(0);
    let from_stripped = unwind_dwarf::rules_from_elf::<X86_64>(&stripped)
        .unwrap_or_else(|e| panic!("{} without section headers: {e}", path.display()));
    let n = same_rows(&from_stripped, &whole);

    // The image as loaded: up to the end of the last loadable segment's file bytes, the
    // section header table (after it) cut off, its offset pointing past the end.
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
        unwind_dwarf::rules_from_elf::<X86_64>(image).is_err(),
        "as a file, it is damaged"
    );
    let from_image = unwind_dwarf::rules_from_memory_image::<X86_64>(image)
        .unwrap_or_else(|e| panic!("{}'s image: {e}", path.display()));
    let m = same_rows(&from_image, &whole);
    println!(
        "of the file's {} extents: {n} without section headers, {m} from its loaded image",
        whole.rules.extents().count()
    );
}
