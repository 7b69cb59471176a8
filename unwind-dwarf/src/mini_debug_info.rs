//! MiniDebugInfo: a second, xz-compressed ELF file inside a module's `.gnu_debugdata` section
//! (gdb's "MiniDebugInfo"). Fedora and RHEL keep there the `.symtab` of functions that
//! `.dynsym` does not list; Android's ART keeps the CFI of compiled Java code there
//! (`.debug_frame`) as well as its symbols. Its sections have the module's own file addresses.
//!
//! The decompressor is lzma-rs (pure Rust, checks the xz container's checksums); the output is
//! bounded by [`MAX_DECOMPRESSED`], since the module file may come from anyone.

use std::fmt;

/// The most bytes a `.gnu_debugdata` section is decompressed to: a hostile section may expand
/// without bound, and a real one holds a symbol table and CFI (a few MB for the largest
/// libraries).
pub const MAX_DECOMPRESSED: usize = 256 << 20;

/// Why a `.gnu_debugdata` section could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MiniDebugInfoError {
    /// The xz stream is malformed, truncated or fails its checksum: what was found wrong.
    Xz(&'static str),
    /// It decompresses to more than [`MAX_DECOMPRESSED`] bytes.
    TooLarge,
    /// What it decompresses to is not an ELF file of the module's class, byte order and
    /// machine.
    NotMatchingElf,
}

impl fmt::Display for MiniDebugInfoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MiniDebugInfoError::Xz(e) => write!(f, "MiniDebugInfo: malformed xz data: {e}"),
            MiniDebugInfoError::TooLarge => write!(
                f,
                "MiniDebugInfo: decompresses to more than {MAX_DECOMPRESSED} bytes"
            ),
            MiniDebugInfoError::NotMatchingElf => f.write_str(
                "MiniDebugInfo: not an ELF file of the module's class, byte order and machine",
            ),
        }
    }
}

impl std::error::Error for MiniDebugInfoError {}

/// The bytes the first xz stream of `xz` decompresses to, as its LZMA2 chunk headers state them
/// (each chunk's unpacked size is in plain bytes before its data, and the decoder produces
/// exactly that), found without decompressing: lzma-rs keeps a block's whole output in memory,
/// so a stream that expands without bound is refused before it is decoded.
fn unpacked_size(xz: &[u8]) -> Result<u64, MiniDebugInfoError> {
    let bad = MiniDebugInfoError::Xz;
    let byte = |at: usize| xz.get(at).copied().ok_or_else(|| bad("truncated"));
    let be16 = |at: usize| -> Result<u64, MiniDebugInfoError> {
        Ok(u64::from(byte(at)?) << 8 | u64::from(byte(at.saturating_add(1))?))
    };
    if xz.get(..6) != Some(&[0xfd, b'7', b'z', b'X', b'Z', 0][..]) {
        return Err(bad("no xz stream header"));
    }
    // The check's size by its type (stream flags' second byte, low nibble): none, CRC32, CRC64,
    // SHA-256, and reserved types by the format's size classes.
    let check = match byte(7)? & 0x0f {
        0 => 0usize,
        t => 4usize << (usize::from(t).saturating_sub(1) / 3),
    };
    let mut at = 12usize;
    let mut total = 0u64;
    loop {
        // A block header (its size in 4-byte units, less one), or 0 for the index: the end.
        let header = byte(at)?;
        if header == 0 {
            return Ok(total);
        }
        at = at
            .checked_add(usize::from(header).saturating_add(1).saturating_mul(4))
            .ok_or_else(|| bad("overflow"))?;
        let data_start = at;
        loop {
            let control = byte(at)?;
            match control {
                0 => {
                    at = at.saturating_add(1);
                    break;
                }
                1 | 2 => {
                    let size = be16(at.saturating_add(1))?.saturating_add(1);
                    total = total.saturating_add(size);
                    at = at.saturating_add(3).saturating_add(size as usize);
                }
                0x80..=0xff => {
                    let unpacked = (u64::from(control & 0x1f) << 16 | be16(at.saturating_add(1))?)
                        .saturating_add(1);
                    let packed = be16(at.saturating_add(3))?.saturating_add(1);
                    let props = usize::from(control >= 0xc0);
                    total = total.saturating_add(unpacked);
                    at = at
                        .saturating_add(5usize.saturating_add(props))
                        .saturating_add(packed as usize);
                }
                _ => return Err(bad("invalid LZMA2 chunk")),
            }
            if total > MAX_DECOMPRESSED as u64 {
                return Ok(total);
            }
        }
        // Block padding to a multiple of four, then the check.
        let compressed = at.saturating_sub(data_start);
        at = at
            .saturating_add(compressed.wrapping_neg() % 4)
            .saturating_add(check);
    }
}

/// The xz stream `compressed` decompressed (at most [`MAX_DECOMPRESSED`] bytes).
pub fn decompress(compressed: &[u8]) -> Result<Vec<u8>, MiniDebugInfoError> {
    decompress_at_most(compressed, MAX_DECOMPRESSED)
}

/// [`decompress`] with the bound `most`.
fn decompress_at_most(compressed: &[u8], most: usize) -> Result<Vec<u8>, MiniDebugInfoError> {
    if unpacked_size(compressed)? > most as u64 {
        return Err(MiniDebugInfoError::TooLarge);
    }
    let mut out = Vec::new();
    let mut input = compressed;
    lzma_rs::xz_decompress(&mut input, &mut out).map_err(|e| {
        MiniDebugInfoError::Xz(match e {
            lzma_rs::error::Error::IoError(_) | lzma_rs::error::Error::HeaderTooShort(_) => {
                "truncated"
            }
            lzma_rs::error::Error::LzmaError(_) => "malformed LZMA data",
            lzma_rs::error::Error::XzError(_) => "malformed xz container, or a checksum mismatch",
        })
    })?;
    if out.len() > most {
        return Err(MiniDebugInfoError::TooLarge);
    }
    Ok(out)
}

/// The ELF file in `elf`'s `.gnu_debugdata`, decompressed; `None` if it has no such section.
/// The file is checked to be of `elf`'s class, byte order and machine (its sections are read
/// at `elf`'s addresses).
pub fn of_elf(elf: &object::File<'_>) -> Option<Result<Vec<u8>, MiniDebugInfoError>> {
    use object::{Object, ObjectSection};
    let section = elf.section_by_name(".gnu_debugdata")?;
    let compressed = match section.data() {
        Ok(d) => d,
        Err(_) => return Some(Err(MiniDebugInfoError::Xz("section outside the file"))),
    };
    Some(decompress(compressed).and_then(|inner| {
        let matches = object::File::parse(&*inner).is_ok_and(|f| {
            f.architecture() == elf.architecture()
                && f.is_64() == elf.is_64()
                && f.is_little_endian() == elf.is_little_endian()
        });
        if matches {
            Ok(inner)
        } else {
            Err(MiniDebugInfoError::NotMatchingElf)
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xz(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        lzma_rs::xz_compress(&mut &data[..], &mut out).expect("compress");
        out
    }

    #[test]
    fn round_trip() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(decompress(&xz(&data)), Ok(data));
    }

    /// `printf 'hello MiniDebugInfo, hello MiniDebugInfo\n' | xz -c` (xz 5.4: CRC64 check).
    const FROM_XZ: [u8; 92] = [
        0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00, 0x00, 0x04, 0xe6, 0xd6, 0xb4, 0x46, 0x02, 0x00, 0x21,
        0x01, 0x16, 0x00, 0x00, 0x00, 0x74, 0x2f, 0xe5, 0xa3, 0xe0, 0x00, 0x28, 0x00, 0x1d, 0x5d,
        0x00, 0x34, 0x19, 0x49, 0xee, 0x8d, 0xe9, 0x0c, 0x11, 0x15, 0x22, 0x87, 0x48, 0x20, 0xef,
        0xb5, 0x56, 0xd3, 0xe4, 0x56, 0x02, 0x56, 0xcc, 0x86, 0xaf, 0xd1, 0x0c, 0x5d, 0x1c, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x66, 0xdb, 0x3d, 0xba, 0x54, 0x5c, 0xf8, 0x4e, 0x00, 0x01, 0x39,
        0x29, 0xfd, 0xa0, 0xb0, 0x6c, 0x1f, 0xb6, 0xf3, 0x7d, 0x01, 0x00, 0x00, 0x00, 0x00, 0x04,
        0x59, 0x5a,
    ];

    #[test]
    fn xz_tools_streams_are_read_and_checked() {
        let text = b"hello MiniDebugInfo, hello MiniDebugInfo\n";
        assert_eq!(unpacked_size(&FROM_XZ), Ok(text.len() as u64));
        assert_eq!(decompress(&FROM_XZ).as_deref(), Ok(&text[..]));
        // The block's CRC64 (bytes 64..72) no longer matches.
        let mut bad_check = FROM_XZ;
        bad_check[66] ^= 1;
        assert!(matches!(
            decompress(&bad_check),
            Err(MiniDebugInfoError::Xz(_))
        ));
        // Cut inside the compressed data, and inside the chunk headers.
        assert!(matches!(
            decompress(&FROM_XZ[..40]),
            Err(MiniDebugInfoError::Xz(_))
        ));
        assert!(matches!(
            decompress(&FROM_XZ[..26]),
            Err(MiniDebugInfoError::Xz(_))
        ));
        assert!(matches!(
            decompress(b"not xz at all"),
            Err(MiniDebugInfoError::Xz(_))
        ));
    }

    #[test]
    fn a_bomb_is_refused_before_it_is_decoded() {
        // 4 MB of zeros: refused under a 1 MB bound from the chunk headers alone.
        let data = xz(&vec![0u8; 4 << 20]);
        assert_eq!(unpacked_size(&data), Ok(4 << 20));
        assert_eq!(
            decompress_at_most(&data, 1 << 20),
            Err(MiniDebugInfoError::TooLarge)
        );
        assert_eq!(
            decompress_at_most(&data, 4 << 20).map(|d| d.len()),
            Ok(4 << 20)
        );
    }
}
