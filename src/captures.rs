//! Samples kept for later, in preallocated slots that signal handlers fill:
//! - [`Samples`]: the frames each handler unwound and why the walk stopped;
//! - [`Captures`]: also the interrupted registers and a copy of the stack (every `every`-th
//!   sample), written as minidumps once sampling is over.
//!
//! Every slot is filled once, by the handler that drew its index from an atomic counter, and is
//! read only after that handler marked it ready, so neither needs a lock.

use std::cell::UnsafeCell;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::capture::{capture_signal, CapturedStack};
use crate::StopReason;
#[cfg(feature = "minidump")]
use unwind_samples::minidump::{self, DumpModule, SampleDump, SystemInfo, Unwound};

/// One slot: written once by the handler that took its index, then marked `ready`.
struct Slot {
    ready: AtomicBool,
    data: UnsafeCell<SlotData>,
}

struct SlotData {
    stack: Option<CapturedStack>,
    pcs: Box<[u64]>,
    frames: usize,
    stop: StopReason,
    thread_id: u32,
    bytes: Box<[u8]>,
}

/// Preallocated capture slots, shared by the signal handlers of every thread.
pub struct Captures {
    slots: Box<[Slot]>,
    seen: AtomicUsize,
    every: std::num::NonZeroUsize,
}

// SAFETY: a slot's data is written only by the one `capture` call whose `seen` ticket maps to
// it (tickets come from `fetch_add`, so no two calls share one), before that call sets `ready`
// with Release; it is read only through `captured`, after `ready` is seen set with Acquire, and
// never written again.
unsafe impl Sync for Captures {}

/// A captured sample, as [`Captures::captured`] yields it.
#[derive(Clone, Copy, Debug)]
pub struct Captured<'a> {
    /// The slot's number (samples are numbered in capture order).
    pub index: usize,
    /// The registers and where the stack copy starts.
    pub stack: CapturedStack,
    /// The stack copy.
    pub bytes: &'a [u8],
    /// The frames the handler unwound.
    pub pcs: &'a [u64],
    /// Why that walk stopped.
    pub stop: StopReason,
    /// The sampled thread (`gettid`).
    pub thread_id: u32,
}

#[cfg(feature = "minidump")]
impl Captured<'_> {
    /// The sample as a minidump taken on the machine `system` (see [`crate::system_info`]) with
    /// `modules` (see [`crate::dump_modules`]), its frames in [`minidump::UNWOUND_STREAM`].
    pub fn minidump(&self, system: &SystemInfo, modules: &[DumpModule]) -> Vec<u8> {
        minidump::write(&SampleDump {
            system,
            context: self.stack.context,
            thread_id: self.thread_id,
            stack_base: self.stack.base,
            stack: self.bytes,
            modules,
            unwound: Some(Unwound {
                pcs: self.pcs,
                stop: self.stop,
            }),
        })
    }
}

impl Captures {
    /// `slots` slots of `stack_bytes` bytes of stack and `max_frames` frames each, filled by
    /// every `every`-th call of [`capture`](Self::capture) (0 counts as 1). Allocates: call it
    /// before sampling starts.
    pub fn new(slots: usize, every: usize, stack_bytes: usize, max_frames: usize) -> Self {
        Captures {
            slots: (0..slots)
                .map(|_| Slot {
                    ready: AtomicBool::new(false),
                    data: UnsafeCell::new(SlotData {
                        stack: None,
                        pcs: vec![0; max_frames].into_boxed_slice(),
                        frames: 0,
                        stop: StopReason::EndOfStack,
                        thread_id: 0,
                        bytes: vec![0; stack_bytes].into_boxed_slice(),
                    }),
                })
                .collect(),
            seen: AtomicUsize::new(0),
            every: std::num::NonZeroUsize::new(every).unwrap_or(std::num::NonZeroUsize::MIN),
        }
    }

    /// Counts a sample and, if it is one to keep and a slot is left, copies the interrupted
    /// registers and stack into it with the frames `pcs` unwound there (as many as fit) and
    /// why the walk stopped; returns whether it did. Async-signal-safe: atomics, copies and
    /// the thread id recorded at registration (no system call).
    ///
    /// # Safety
    /// As for [`capture_signal`]: `ucontext` is the running handler's context, on the
    /// registered thread that was interrupted.
    pub unsafe fn capture(
        &self,
        ucontext: *const libc::c_void,
        pcs: &[u64],
        stop: StopReason,
    ) -> bool {
        let seen = self.seen.fetch_add(1, Ordering::Relaxed);
        // Divisions by a NonZeroUsize: no division-by-zero panic path in the handler.
        if seen % self.every != 0 {
            return false;
        }
        let Some(slot) = self.slots.get(seen / self.every) else {
            return false;
        };
        // SAFETY: this call alone holds ticket `seen`, hence this slot, and `ready` is not yet
        // set (see the `Sync` impl).
        let d = unsafe { &mut *slot.data.get() };
        // SAFETY: forwarded from the caller's contract.
        let Ok(stack) = (unsafe { capture_signal(ucontext, &mut d.bytes) }) else {
            return false;
        };
        let n = pcs.len().min(d.pcs.len());
        if let (Some(dst), Some(src)) = (d.pcs.get_mut(..n), pcs.get(..n)) {
            dst.copy_from_slice(src);
        }
        d.stack = Some(stack);
        d.frames = n;
        d.stop = stop;
        d.thread_id = stack.thread_id;
        slot.ready.store(true, Ordering::Release);
        true
    }

    /// The samples captured so far, in slot order. Safe while handlers still run: a slot is
    /// read only once it is complete.
    pub fn captured(&self) -> impl Iterator<Item = Captured<'_>> + '_ {
        self.slots.iter().enumerate().filter_map(|(index, slot)| {
            if !slot.ready.load(Ordering::Acquire) {
                return None;
            }
            // SAFETY: `ready` is set: the slot is complete and nothing writes it any more.
            let d = unsafe { &*slot.data.get() };
            let stack = d.stack?;
            Some(Captured {
                index,
                stack,
                bytes: d.bytes.get(..stack.len)?,
                pcs: d.pcs.get(..d.frames)?,
                stop: d.stop,
                thread_id: d.thread_id,
            })
        })
    }

    /// Writes every captured sample to `dir` as `NNNN.dmp` (NNNN its slot number), with the
    /// modules loaded now; returns how many were written. Not async-signal-safe.
    #[cfg(feature = "minidump")]
    pub fn write_minidumps(&self, dir: &Path) -> std::io::Result<usize> {
        std::fs::create_dir_all(dir)?;
        let modules = crate::dump_modules();
        let system = crate::system_info();
        let mut written = 0;
        for c in self.captured() {
            std::fs::write(
                dir.join(format!("{:04}.dmp", c.index)),
                c.minidump(&system, &modules),
            )?;
            written += 1;
        }
        Ok(written)
    }
}

impl Captures {
    /// Writes every captured sample, in capture order, to `path` as a sequence
    /// ([`unwind_samples::sequence`]) named `name`, with the modules of the published table;
    /// the vdso's image goes next to it (`linux-vdso.so.1`), which the sequence names by a
    /// relative path. Returns how many samples were written. Not async-signal-safe.
    pub fn write_sequence(&self, path: &Path, name: &str) -> std::io::Result<usize> {
        use std::io::Write as _;
        use unwind_samples::offline::ModuleFile;
        use unwind_samples::sequence::{write_sample, SampleRegs, Sequence};
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let vdso = crate::vdso_image();
        let modules = crate::loaded_modules()
            .into_iter()
            .map(|m| {
                let file = if m.name == "linux-vdso.so.1" && vdso.is_some() {
                    std::path::PathBuf::from("linux-vdso.so.1")
                } else {
                    std::path::PathBuf::from(&m.name)
                };
                ModuleFile {
                    path: file,
                    start: m.start,
                    end: m.end,
                    bias: m.bias,
                }
            })
            .collect();
        if let Some(image) = vdso {
            std::fs::write(dir.join("linux-vdso.so.1"), image)?;
        }
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        let head = Sequence {
            name: name.to_string(),
            modules,
            samples: Vec::new(),
        };
        head.write(&mut out)?;
        let mut written = 0;
        for c in self.captured() {
            let regs = SampleRegs::from(&c.stack.context);
            write_sample(&mut out, c.thread_id, &regs, c.stack.base, c.bytes, c.pcs)?;
            written += 1;
        }
        out.flush()?;
        Ok(written)
    }
}

/// The frames of one stored sample.
#[derive(Clone, Copy, Debug)]
pub struct StoredSample<'a> {
    /// Frame 0's PC, then return addresses.
    pub pcs: &'a [u64],
    /// Why the walk stopped.
    pub stop: StopReason,
}

struct SampleSlot {
    ready: AtomicBool,
    data: UnsafeCell<(Box<[u64]>, usize, StopReason)>,
}

/// Preallocated slots for the frames signal handlers unwind, read after (or during) sampling.
pub struct Samples {
    slots: Box<[SampleSlot]>,
    next: AtomicUsize,
}

// SAFETY: as for `Captures`: a slot is written only by the one `push` whose ticket is its index,
// before that call sets `ready` (Release), and read only after `ready` is seen set (Acquire).
unsafe impl Sync for Samples {}

impl Samples {
    /// `slots` samples of at most `max_frames` frames. Allocates: call it before sampling.
    pub fn new(slots: usize, max_frames: usize) -> Self {
        Samples {
            slots: (0..slots)
                .map(|_| SampleSlot {
                    ready: AtomicBool::new(false),
                    data: UnsafeCell::new((
                        vec![0; max_frames].into_boxed_slice(),
                        0,
                        StopReason::EndOfStack,
                    )),
                })
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// Stores a walk's frames (as many as fit) and why it stopped; returns whether a slot was
    /// left. Async-signal-safe: an atomic ticket and a copy.
    pub fn push(&self, pcs: &[u64], stop: StopReason) -> bool {
        let Some(slot) = self.slots.get(self.next.fetch_add(1, Ordering::Relaxed)) else {
            return false;
        };
        // SAFETY: this call alone holds this slot's ticket and `ready` is not yet set.
        let (dst, frames, why) = unsafe { &mut *slot.data.get() };
        let n = pcs.len().min(dst.len());
        if let (Some(d), Some(s)) = (dst.get_mut(..n), pcs.get(..n)) {
            d.copy_from_slice(s);
        }
        *frames = n;
        *why = stop;
        slot.ready.store(true, Ordering::Release);
        true
    }

    /// Samples offered to [`push`](Self::push), stored or not.
    pub fn pushed(&self) -> usize {
        self.next.load(Ordering::Relaxed)
    }

    /// The samples stored so far, in the order their slots were taken.
    pub fn iter(&self) -> impl Iterator<Item = StoredSample<'_>> + '_ {
        self.slots.iter().filter_map(|slot| {
            if !slot.ready.load(Ordering::Acquire) {
                return None;
            }
            // SAFETY: `ready` is set: the slot is complete and nothing writes it any more.
            let (pcs, frames, stop) = unsafe { &*slot.data.get() };
            Some(StoredSample {
                pcs: pcs.get(..*frames)?,
                stop: *stop,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_keep_what_fits_and_count_the_rest() {
        let s = Samples::new(2, 3);
        assert!(s.push(&[1, 2], StopReason::EndOfStack));
        assert!(s.push(&[1, 2, 3, 4], StopReason::NoRule));
        assert!(!s.push(&[9], StopReason::EndOfStack));
        assert_eq!(s.pushed(), 3);
        let got: Vec<(Vec<u64>, StopReason)> = s.iter().map(|x| (x.pcs.to_vec(), x.stop)).collect();
        assert_eq!(
            got,
            vec![
                (vec![1, 2], StopReason::EndOfStack),
                (vec![1, 2, 3], StopReason::NoRule)
            ]
        );
    }
}
