//! Small ELF files built byte by byte for unit tests.

/// A little-endian ELF64 relocatable file with one section, `name`, holding `data`.
pub fn with_section(name: &str, data: &[u8]) -> Vec<u8> {
    let mut shstrtab = b"\0.shstrtab\0".to_vec();
    let name_at = shstrtab.len() as u64;
    shstrtab.extend_from_slice(name.as_bytes());
    shstrtab.push(0);
    // Layout: header, the section's data, .shstrtab, section headers.
    let data_off = 64u64;
    let shstr_off = data_off + data.len() as u64;
    let sh_off = (shstr_off + shstrtab.len() as u64).next_multiple_of(8);
    let mut f = Vec::new();
    f.extend_from_slice(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
    f.extend_from_slice(&1u16.to_le_bytes()); // ET_REL
    f.extend_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    f.extend_from_slice(&1u32.to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes()); // entry
    f.extend_from_slice(&0u64.to_le_bytes()); // no program headers
    f.extend_from_slice(&sh_off.to_le_bytes());
    f.extend_from_slice(&0u32.to_le_bytes());
    // Header size, program header size and count, section header size and count, and the
    // index of .shstrtab.
    for v in [64u16, 56, 0, 64, 3, 1] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    f.extend_from_slice(data);
    f.extend_from_slice(&shstrtab);
    f.resize(sh_off as usize, 0);
    // Each header's fields (name, type, flags, addr, offset, size, link, info, align, entsize)
    // and their widths in bytes.
    let width = [4, 4, 8, 8, 8, 8, 4, 4, 8, 8];
    let sections: [[u64; 10]; 3] = [
        [0; 10],
        [1, 3, 0, 0, shstr_off, shstrtab.len() as u64, 0, 0, 1, 0],
        [name_at, 1, 0, 0, data_off, data.len() as u64, 0, 0, 1, 0],
    ];
    for header in sections {
        for (v, w) in header.iter().zip(width) {
            f.extend_from_slice(&v.to_le_bytes()[..w]);
        }
    }
    f
}
