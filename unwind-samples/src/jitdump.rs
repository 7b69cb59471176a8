//! perf's jitdump files (`tools/perf/Documentation/jitdump-specification.txt`, version 1), in
//! which JIT compilers describe the code they generate (node `--perf-prof`, python 3.13
//! `-X perf_jit`): a header, then records. Read in this machine's byte order, as the process
//! that wrote the file (on this machine) wrote it.

/// One record of a jitdump file, as far as the unwinder and the profiler use them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// `JIT_CODE_LOAD`: code at `addr`, `size` bytes, named `name` (without its NUL).
    CodeLoad {
        /// The code's address in the process.
        addr: u64,
        /// Its size in bytes.
        size: u64,
        /// Its name.
        name: &'a [u8],
    },
    /// `JIT_CODE_MOVE`: the code loaded at `old` is now at `new`.
    CodeMove {
        /// Where it was.
        old: u64,
        /// Where it is.
        new: u64,
        /// Its size in bytes.
        size: u64,
    },
    /// `JIT_CODE_UNWINDING_INFO`: the `.eh_frame` of the code of the next [`Record::CodeLoad`]
    /// (its `.eh_frame_hdr`, which follows it in the record, left out).
    UnwindingInfo {
        /// The `.eh_frame` bytes.
        eh_frame: &'a [u8],
    },
    /// Another record, by its id (debug information, close, ...).
    Other(u32),
}

/// The header's magic number, in the writer's byte order.
pub const MAGIC: u32 = 0x4a69_5444;
/// The record id of [`Record::CodeLoad`].
pub const CODE_LOAD: u32 = 0;
/// The record id of [`Record::CodeMove`].
pub const CODE_MOVE: u32 = 1;
/// The record id of [`Record::UnwindingInfo`].
pub const CODE_UNWINDING_INFO: u32 = 4;

/// The records of jitdump file `dump`, in order; none if it does not start with a jitdump
/// header in this machine's byte order. A record whose size does not fit (a file cut short
/// while its writer appended to it) ends them; one whose body does not read as its kind's is
/// [`Record::Other`].
pub fn records(dump: &[u8]) -> impl Iterator<Item = Record<'_>> + '_ {
    let u32_at = move |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(
            dump.get(at..at.checked_add(4)?)?.try_into().ok()?,
        ))
    };
    let u64_at = move |at: usize| -> Option<u64> {
        Some(u64::from_ne_bytes(
            dump.get(at..at.checked_add(8)?)?.try_into().ok()?,
        ))
    };
    // After the header: its size is its third word.
    let mut at = (u32_at(0) == Some(MAGIC))
        .then(|| u32_at(8))
        .flatten()
        .map_or(usize::MAX, |n| n as usize);
    std::iter::from_fn(move || {
        let (id, size) = (u32_at(at)?, u32_at(at.checked_add(4)?)? as usize);
        // Each record: id, total size, timestamp; then its body.
        let end = at
            .checked_add(size)
            .filter(|&e| size >= 16 && e <= dump.len())?;
        let body = at + 16;
        // A body that does not read as its kind's is passed over as another kind's.
        let record = || -> Option<Record<'_>> {
            Some(match id {
                // pid, tid, vma, code address, code size, code index, name (NUL-ended), code.
                CODE_LOAD => {
                    let name = dump.get(body + 40..end)?;
                    Record::CodeLoad {
                        addr: u64_at(body + 16)?,
                        size: u64_at(body + 24)?,
                        name: &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())],
                    }
                }
                // pid, tid, vma, old address, new address, code size, code index.
                CODE_MOVE => Record::CodeMove {
                    old: u64_at(body + 16)?,
                    new: u64_at(body + 24)?,
                    size: u64_at(body + 32)?,
                },
                // unwinding size, .eh_frame_hdr size, mapped size, then .eh_frame and its header.
                CODE_UNWINDING_INFO => {
                    let data = usize::try_from(u64_at(body)?).ok()?;
                    let hdr = usize::try_from(u64_at(body + 8)?).ok()?;
                    let from = body + 24;
                    let to = from.checked_add(data.checked_sub(hdr)?)?;
                    (from.checked_add(data)? <= end).then_some(())?;
                    Record::UnwindingInfo {
                        eh_frame: dump.get(from..to)?,
                    }
                }
                other => Record::Other(other),
            })
        };
        let record = record().unwrap_or(Record::Other(id));
        at = end;
        Some(record)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w32(d: &mut Vec<u8>, v: u32) {
        d.extend_from_slice(&v.to_ne_bytes());
    }

    fn w64(d: &mut Vec<u8>, v: u64) {
        d.extend_from_slice(&v.to_ne_bytes());
    }

    /// A jitdump's records, read in order: a load, unwinding information, a move, another
    /// record; a record cut short ends them.
    #[test]
    fn records_are_read_in_order_and_a_cut_one_ends_them() {
        let mut d = Vec::new();
        for v in [MAGIC, 1, 40, 62, 0, 7] {
            w32(&mut d, v);
        }
        w64(&mut d, 0);
        w64(&mut d, 0);
        // A load of 4 bytes at 0x1000 named "f".
        w32(&mut d, CODE_LOAD);
        w32(&mut d, 16 + 40 + 2 + 4);
        w64(&mut d, 0);
        w32(&mut d, 7);
        w32(&mut d, 7);
        for v in [0x1000u64, 0x1000, 4, 1] {
            w64(&mut d, v);
        }
        d.extend_from_slice(b"f\0\xc3\xc3\xc3\xc3");
        // Unwinding information: 6 bytes, 2 of them the header.
        w32(&mut d, CODE_UNWINDING_INFO);
        w32(&mut d, 16 + 24 + 6);
        w64(&mut d, 0);
        for v in [6u64, 2, 16] {
            w64(&mut d, v);
        }
        d.extend_from_slice(&[1, 2, 3, 4, 9, 9]);
        // A move of 0x1000 to 0x2000.
        w32(&mut d, CODE_MOVE);
        w32(&mut d, 16 + 48);
        w64(&mut d, 0);
        w32(&mut d, 7);
        w32(&mut d, 7);
        for v in [0x1000u64, 0x1000, 0x2000, 4, 1] {
            w64(&mut d, v);
        }
        // A close record (id 3), then one cut short.
        w32(&mut d, 3);
        w32(&mut d, 16);
        w64(&mut d, 0);
        w32(&mut d, CODE_LOAD);
        w32(&mut d, 500);
        let got: Vec<Record<'_>> = records(&d).collect();
        assert_eq!(
            got,
            [
                Record::CodeLoad {
                    addr: 0x1000,
                    size: 4,
                    name: b"f"
                },
                Record::UnwindingInfo {
                    eh_frame: &[1, 2, 3, 4]
                },
                Record::CodeMove {
                    old: 0x1000,
                    new: 0x2000,
                    size: 4
                },
                Record::Other(3),
            ]
        );
        assert_eq!(records(b"not a jitdump, not at all").count(), 0);
        assert_eq!(records(&d[..40]).count(), 0, "a header alone");
    }
}
