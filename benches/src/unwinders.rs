//! The unwinders under comparison, each set up (outside any measured loop) from a sample's
//! module files: ours, framehop 0.16, and the frame-pointer walk that is the floor.

use std::num::NonZeroU32;
use std::ops::Range;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{
    ExplicitModuleSectionInfo, FrameAddress, Module, MustNotAllocateDuringUnwind, Unwinder,
};
use object::{Object, ObjectSection};
use unwind_core::x86_64::Rule;
use unwind_core::{Cache, Memory, RuleTable, StackImage, X86_64};

use crate::sample::Sample;
use unwind_samples::offline::ModuleFile;

/// Ours: the rule table built from the module files, and a cache.
pub struct Ours {
    /// The table.
    pub table: RuleTable<Rule>,
    /// The cache (boxed: 509 slots).
    pub cache: Box<Cache<X86_64>>,
}

impl Ours {
    /// Builds the table for `sample`'s modules.
    pub fn new(sample: &Sample) -> Self {
        Self::with_scanning(sample, false)
    }

    /// Builds the table for `sample`'s modules, scanning the stack where rules and frame
    /// pointers end if `scan`.
    pub fn with_scanning(sample: &Sample, scan: bool) -> Self {
        Self::from_modules(&sample.modules, scan)
    }

    /// Builds the table for `modules`, scanning the stack where rules and frame pointers end if
    /// `scan`.
    pub fn from_modules(modules: &[ModuleFile], scan: bool) -> Self {
        let (table, _) = unwind_samples::offline::table_from_files_with::<unwind_dwarf::X86_64>(
            modules,
            NonZeroU32::MIN,
            scan,
        )
        .expect("table");
        Ours {
            table,
            cache: Box::new(Cache::new()),
        }
    }

    /// One unwind of `sample` into `pcs`; returns the frame count. The stop reason is kept
    /// too (`black_box`), as a profiler keeps it: left unused, the compiler drops its
    /// bookkeeping from the loop and the count is lower than on the real path.
    #[inline(never)]
    pub fn unwind(&mut self, sample: &Sample, image: &StackImage<'_>, pcs: &mut [u64]) -> usize {
        let r = unwind_core::unwind(&self.table, &mut self.cache, sample.regs, image, pcs, None);
        std::hint::black_box(r.stop);
        r.frames
    }

    /// How many frames of `sample`'s walk a stack scan found.
    pub fn scanned_frames(&mut self, sample: &Sample, image: &StackImage<'_>) -> usize {
        let mut pcs = vec![0u64; 1024];
        let mut trust = vec![unwind_core::Trust::Context; 1024];
        let r = unwind_core::unwind(
            &self.table,
            &mut self.cache,
            sample.regs,
            image,
            &mut pcs,
            Some(&mut trust),
        );
        trust[..r.frames]
            .iter()
            .filter(|&&t| t == unwind_core::Trust::Scan)
            .count()
    }
}

/// framehop 0.16 with its no-allocation cache policy.
pub struct Framehop {
    /// The unwinder with every module of the sample.
    pub unwinder: UnwinderX86_64<Vec<u8>, MustNotAllocateDuringUnwind>,
    /// Its cache.
    pub cache: Box<CacheX86_64<MustNotAllocateDuringUnwind>>,
}

fn section(file: &object::File<'_>, name: &str) -> Option<(Range<u64>, Vec<u8>)> {
    let s = file.section_by_name(name)?;
    Some((s.address()..s.address() + s.size(), s.data().ok()?.to_vec()))
}

impl Framehop {
    /// Adds every module of `sample`, its sections read from the module files.
    pub fn new(sample: &Sample) -> Self {
        Self::from_modules(&sample.modules)
    }

    /// Adds every module of `modules`, its sections read from the module files.
    pub fn from_modules(modules: &[ModuleFile]) -> Self {
        let mut unwinder = UnwinderX86_64::new();
        for m in modules {
            let Ok(data) = std::fs::read(&m.path) else {
                continue;
            };
            let Ok(file) = object::File::parse(&*data) else {
                continue;
            };
            let (text, eh_frame, eh_frame_hdr) = (
                section(&file, ".text"),
                section(&file, ".eh_frame"),
                section(&file, ".eh_frame_hdr"),
            );
            let info = ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma: text.as_ref().map(|s| s.0.clone()),
                text: text.map(|s| s.1),
                got_svma: file
                    .section_by_name(".got")
                    .map(|s| s.address()..s.address() + s.size()),
                eh_frame_svma: eh_frame.as_ref().map(|s| s.0.clone()),
                eh_frame: eh_frame.map(|s| s.1),
                eh_frame_hdr_svma: eh_frame_hdr.as_ref().map(|s| s.0.clone()),
                eh_frame_hdr: eh_frame_hdr.map(|s| s.1),
                ..Default::default()
            };
            unwinder.add_module(Module::new(
                m.path.display().to_string(),
                m.start..m.end,
                m.bias,
                info,
            ));
        }
        Framehop {
            unwinder,
            cache: Box::new(CacheX86_64::new_in()),
        }
    }

    /// One unwind of `sample` into `pcs`; returns the frame count.
    #[inline(never)]
    pub fn unwind(&mut self, sample: &Sample, image: &StackImage<'_>, pcs: &mut [u64]) -> usize {
        Self::unwind_with(&self.unwinder, &mut self.cache, sample.regs, image, pcs)
    }

    /// One unwind from `r` with `cache` (one per thread when replaying a sequence).
    #[inline(never)]
    pub fn unwind_with(
        unwinder: &UnwinderX86_64<Vec<u8>, MustNotAllocateDuringUnwind>,
        cache: &mut CacheX86_64<MustNotAllocateDuringUnwind>,
        r: unwind_core::x86_64::Regs,
        image: &StackImage<'_>,
        pcs: &mut [u64],
    ) -> usize {
        let mut read = |addr: u64| image.read_u64(addr).ok_or(());
        let mut iter = unwinder.iter_frames(
            r.pc,
            UnwindRegsX86_64::new(r.pc, r.sp, r.fp),
            cache,
            &mut read,
        );
        let mut n = 0;
        while let (Some(slot), Ok(Some(frame))) = (pcs.get_mut(n), iter.next()) {
            *slot = match frame {
                FrameAddress::InstructionPointer(a) => a,
                FrameAddress::ReturnAddress(a) => a.get(),
            };
            n += 1;
        }
        n
    }

    /// Empties the cache.
    pub fn clear(&mut self) {
        *self.cache = CacheX86_64::new_in();
    }
}

/// The floor: a frame-pointer walk (`[fp]` the caller's fp, `[fp + 8]` the return address),
/// as tight as a safe one can be: one bounds check covers both words, and the walk stops when
/// the frame pointer does not increase (which also bounds it).
#[inline(never)]
pub fn frame_pointer_walk(fp: u64, image: &StackImage<'_>, pcs: &mut [u64]) -> usize {
    let bytes = image.bytes();
    let base = image.base();
    let limit = (bytes.len() as u64).saturating_sub(15);
    let mut fp = fp;
    let mut i = 0;
    while let Some(slot) = pcs.get_mut(i) {
        let off = fp.wrapping_sub(base);
        if off >= limit {
            return i;
        }
        // SAFETY: `off < len - 15`, so the 16 bytes at `off` are inside `bytes`.
        let (next, ra) = unsafe {
            let p = bytes.as_ptr().add(off as usize) as *const u64;
            (p.read_unaligned(), p.add(1).read_unaligned())
        };
        *slot = ra;
        i += 1;
        if next <= fp {
            return i;
        }
        fp = next;
    }
    i
}
