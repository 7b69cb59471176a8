//! Reading the list of entries and their symbol files while the JIT may change it.
//!
//! GDB reads the list with the process stopped; a profiler reads it while the JIT runs. ART's
//! entries carry a seqlock (odd while an entry is written, bumped when it is freed), read around
//! every field as libunwindstack does. GDB's own layout has none: the descriptor's
//! `action_flag`, `relevant_entry` and `first_entry`, which the JIT sets at every change, are
//! read before and after the walk, and a walk they disagree on is made again.

use std::collections::HashSet;

use crate::{JitError, Layout, Memory};

/// How much a list may hold: the process is not trusted to keep its list sane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Entries followed at most.
    pub entries: usize,
    /// The largest symbol file read (a larger one is counted in [`JitList::too_large`]).
    pub symfile_bytes: u64,
    /// The most bytes of symbol files read in all (the rest counted in
    /// [`JitList::too_large`]).
    pub total_bytes: u64,
    /// Walks made before a list that keeps changing is given up ([`JitError::KeptChanging`]).
    pub tries: usize,
}

impl Default for Limits {
    /// 100,000 entries, 64 MiB a symbol file, 1 GiB in all, 16 tries (libunwindstack's).
    fn default() -> Self {
        Limits {
            entries: 100_000,
            symfile_bytes: 64 << 20,
            total_bytes: 1 << 30,
            tries: 16,
        }
    }
}

/// A symbol file: an ELF file at the generated code's addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symfile {
    /// The address of its entry in the list.
    pub entry: u64,
    /// Where the file is in memory.
    pub address: u64,
    /// The file.
    pub bytes: Vec<u8>,
}

/// The symbol files a descriptor lists, newest first (the order of the list).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JitList {
    /// The files read.
    pub symfiles: Vec<Symfile>,
    /// Entries whose file is larger than [`Limits::symfile_bytes`], or past
    /// [`Limits::total_bytes`].
    pub too_large: usize,
    /// Entries whose file could not be read (or, with ART's seqlocks, was freed meanwhile).
    pub unreadable: usize,
    /// Whether the descriptor has ART's extension (`Android2`: entries with seqlocks).
    pub android: bool,
}

/// A walk that met a change: made again.
struct Race;

/// Reads the symbol files that the descriptor at `descriptor` lists, in a process of layout
/// `layout`. A descriptor without entries gives an empty list.
pub fn read_symfiles(
    memory: &dyn Memory,
    descriptor: u64,
    layout: Layout,
    limits: &Limits,
) -> Result<JitList, JitError> {
    let reader = Reader { memory, layout };
    let version = reader.u32(descriptor)?;
    if version != 1 {
        return Err(JitError::UnknownVersion(version));
    }
    let mut magic = [0u8; 8];
    let android =
        memory.read(descriptor.wrapping_add(layout.magic()), &mut magic) && magic == *b"Android2";
    for _ in 0..limits.tries.max(1) {
        let before = reader.state(descriptor)?;
        match reader.walk(before.2, android, limits) {
            Ok(mut list) => {
                if reader.state(descriptor)? == before {
                    list.android = android;
                    return Ok(list);
                }
            }
            Err(Ok(Race)) => {}
            Err(Err(e)) => {
                // An error of a list that changed meanwhile is the change's, not the list's.
                if reader.state(descriptor)? == before {
                    return Err(e);
                }
            }
        }
    }
    Err(JitError::KeptChanging)
}

struct Reader<'a> {
    memory: &'a dyn Memory,
    layout: Layout,
}

impl Reader<'_> {
    fn u32(&self, address: u64) -> Result<u32, JitError> {
        let mut b = [0u8; 4];
        if self.memory.read(address, &mut b) {
            Ok(u32::from_le_bytes(b))
        } else {
            Err(JitError::Unreadable { address })
        }
    }

    fn u64(&self, address: u64) -> Result<u64, JitError> {
        let mut b = [0u8; 8];
        if self.memory.read(address, &mut b) {
            Ok(u64::from_le_bytes(b))
        } else {
            Err(JitError::Unreadable { address })
        }
    }

    fn pointer(&self, address: u64) -> Result<u64, JitError> {
        let value = match self.layout.pointer {
            4 => u64::from(self.u32(address)?),
            _ => self.u64(address)?,
        };
        Ok(value & self.layout.address_mask)
    }

    /// What the JIT sets at every change: `action_flag`, `relevant_entry`, `first_entry`.
    fn state(&self, descriptor: u64) -> Result<(u32, u64, u64), JitError> {
        Ok((
            self.u32(descriptor.wrapping_add(4))?,
            self.pointer(descriptor.wrapping_add(self.layout.relevant_entry()))?,
            self.pointer(descriptor.wrapping_add(self.layout.first_entry()))?,
        ))
    }

    /// An ART entry's seqlock: `Err(Race)` while it is being written (odd).
    fn seqlock(&self, entry: u64) -> Result<Result<u32, Race>, JitError> {
        let s = self.u32(entry.wrapping_add(self.layout.seqlock()))?;
        Ok(if s & 1 == 1 { Err(Race) } else { Ok(s) })
    }

    /// One walk of the list from `first`.
    fn walk(
        &self,
        first: u64,
        android: bool,
        limits: &Limits,
    ) -> Result<JitList, Result<Race, JitError>> {
        let mut list = JitList::default();
        let mut seen = HashSet::new();
        let mut total = 0u64;
        let mut entry = first;
        while entry != 0 {
            if !seen.insert(entry) {
                return Err(Err(JitError::Loop { address: entry }));
            }
            if seen.len() > limits.entries {
                return Err(Err(JitError::TooManyEntries));
            }
            let lock = if android {
                Some(self.seqlock(entry).map_err(Err)?.map_err(Ok)?)
            } else {
                None
            };
            let still = |r: &Self| -> Result<(), Result<Race, JitError>> {
                match lock {
                    Some(l) if r.seqlock(entry).map_err(Err)?.ok() != Some(l) => Err(Ok(Race)),
                    _ => Ok(()),
                }
            };
            let address = self
                .pointer(entry.wrapping_add(self.layout.symfile_addr()))
                .map_err(Err)?;
            let size = self
                .u64(entry.wrapping_add(self.layout.symfile_size()))
                .map_err(Err)?;
            let next = self
                .pointer(entry.wrapping_add(self.layout.next()))
                .map_err(Err)?;
            still(self)?;
            if size > limits.symfile_bytes || total.saturating_add(size) > limits.total_bytes {
                list.too_large += 1;
            } else if address != 0 && size > 0 {
                let mut bytes = vec![0u8; size as usize];
                let read = self.memory.read(address, &mut bytes);
                still(self)?;
                if read {
                    total = total.saturating_add(size);
                    list.symfiles.push(Symfile {
                        entry,
                        address,
                        bytes,
                    });
                } else {
                    list.unreadable += 1;
                }
            }
            entry = next;
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    /// What a JIT does meanwhile: called with the number of reads so far.
    type Meanwhile = Box<dyn Fn(usize, &mut BTreeMap<u64, u8>)>;

    /// Memory as bytes by address; `on_read` may change it (a JIT running meanwhile).
    #[derive(Default)]
    struct Fake {
        bytes: RefCell<BTreeMap<u64, u8>>,
        reads: RefCell<usize>,
        on_read: Option<Meanwhile>,
    }

    impl Fake {
        fn put(&self, at: u64, data: &[u8]) {
            let mut b = self.bytes.borrow_mut();
            for (i, v) in data.iter().enumerate() {
                b.insert(at + i as u64, *v);
            }
        }
    }

    impl Memory for Fake {
        fn read(&self, address: u64, buf: &mut [u8]) -> bool {
            let n = {
                let mut r = self.reads.borrow_mut();
                *r += 1;
                *r
            };
            if let Some(f) = &self.on_read {
                f(n, &mut self.bytes.borrow_mut());
            }
            let b = self.bytes.borrow();
            for (i, out) in buf.iter_mut().enumerate() {
                match b.get(&(address + i as u64)) {
                    Some(v) => *out = *v,
                    None => return false,
                }
            }
            true
        }
    }

    /// A 64-bit list at 0x1000 of entries at 0x2000, 0x2100, ... each with a file of `n + 1`
    /// bytes at 0x3000 + 0x100 n.
    fn list(memory: &Fake, entries: u64, android: bool) {
        let l = Layout::X86_64;
        let mut d = vec![0u8; 56];
        d[0] = 1;
        if entries > 0 {
            d[16..24].copy_from_slice(&0x2000u64.to_le_bytes());
        }
        if android {
            d[24..32].copy_from_slice(b"Android2");
        }
        memory.put(0x1000, &d);
        for n in 0..entries {
            let at = 0x2000 + 0x100 * n;
            let mut e = vec![0u8; 48];
            let next = if n + 1 < entries { at + 0x100 } else { 0 };
            e[0..8].copy_from_slice(&next.to_le_bytes());
            e[16..24].copy_from_slice(&(0x3000 + 0x100 * n).to_le_bytes());
            e[l.symfile_size() as usize..][..8].copy_from_slice(&(n + 1).to_le_bytes());
            memory.put(at, &e);
            memory.put(0x3000 + 0x100 * n, &vec![n as u8; n as usize + 1]);
        }
    }

    #[test]
    fn reads_every_entry_in_order() {
        let m = Fake::default();
        list(&m, 3, false);
        let got = read_symfiles(&m, 0x1000, Layout::X86_64, &Limits::default()).unwrap();
        let sizes: Vec<usize> = got.symfiles.iter().map(|s| s.bytes.len()).collect();
        assert_eq!(sizes, [1, 2, 3]);
        assert_eq!(got.symfiles[2].address, 0x3200);
        assert!(!got.android);
    }

    #[test]
    fn a_loop_and_too_many_entries_are_errors() {
        let m = Fake::default();
        list(&m, 3, false);
        m.put(0x2200, &0x2000u64.to_le_bytes());
        assert_eq!(
            read_symfiles(&m, 0x1000, Layout::X86_64, &Limits::default()),
            Err(JitError::Loop { address: 0x2000 })
        );
        let m = Fake::default();
        list(&m, 5, false);
        let limits = Limits {
            entries: 4,
            ..Limits::default()
        };
        assert_eq!(
            read_symfiles(&m, 0x1000, Layout::X86_64, &limits),
            Err(JitError::TooManyEntries)
        );
    }

    #[test]
    fn large_and_unreadable_files_are_counted() {
        let m = Fake::default();
        list(&m, 3, false);
        // Entry 1's file moved to unmapped memory; entry 2's file too large.
        m.put(0x2100 + 16, &0x9_0000u64.to_le_bytes());
        let limits = Limits {
            symfile_bytes: 2,
            ..Limits::default()
        };
        let got = read_symfiles(&m, 0x1000, Layout::X86_64, &limits).unwrap();
        assert_eq!(got.symfiles.len(), 1);
        assert_eq!((got.unreadable, got.too_large), (1, 1));
    }

    #[test]
    fn a_change_during_the_walk_reads_it_again() {
        // At the 6th read, the JIT registers a new first entry (0x2200 before 0x2000).
        let mut m = Fake {
            on_read: Some(Box::new(|n, b| {
                if n == 6 {
                    for (i, v) in 0x2200u64.to_le_bytes().iter().enumerate() {
                        b.insert(0x1000 + 16 + i as u64, *v);
                        b.insert(0x1000 + 8 + i as u64, *v);
                    }
                    b.insert(0x1004, 1);
                }
            })),
            ..Fake::default()
        };
        list(&m, 3, false);
        // 0x2200 (the third) now also first: its next is 0, so the list is that one entry.
        let got = read_symfiles(&m, 0x1000, Layout::X86_64, &Limits::default()).unwrap();
        assert_eq!(got.symfiles.len(), 1);
        assert_eq!(got.symfiles[0].entry, 0x2200);
        // Never settling: given up.
        m.on_read = Some(Box::new(|n, b| {
            b.insert(0x1004, n as u8);
        }));
        assert_eq!(
            read_symfiles(&m, 0x1000, Layout::X86_64, &Limits::default()),
            Err(JitError::KeptChanging)
        );
    }

    #[test]
    fn an_art_entry_being_written_is_read_again() {
        let m = Fake {
            // Entry 0's seqlock is odd (being written) for the first 10 reads.
            on_read: Some(Box::new(|n, b| {
                b.insert(0x2000 + 40, if n <= 10 { 1 } else { 2 });
            })),
            ..Fake::default()
        };
        list(&m, 2, true);
        let got = read_symfiles(&m, 0x1000, Layout::X86_64, &Limits::default()).unwrap();
        assert!(got.android);
        assert_eq!(got.symfiles.len(), 2);
        assert!(*m.reads.borrow() > 10);
    }

    #[test]
    fn another_version_is_refused() {
        let m = Fake::default();
        list(&m, 1, false);
        m.put(0x1000, &[2]);
        assert_eq!(
            read_symfiles(&m, 0x1000, Layout::X86_64, &Limits::default()),
            Err(JitError::UnknownVersion(2))
        );
    }
}
