//! Samples kept for later: preallocated slots that a signal handler fills with the interrupted
//! registers, a copy of the stack and the frames it unwound (every `every`-th sample, until the
//! slots are used up), written as minidumps once sampling is over.

use std::cell::UnsafeCell;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::capture::{capture_signal, CapturedStack};
use crate::minidump::{self, DumpModule, SampleDump, Unwound};
use crate::StopReason;

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
    every: usize,
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

impl Captured<'_> {
    /// The sample as a minidump with `modules` (see [`minidump::current_modules`]), its frames
    /// in [`minidump::UNWOUND_STREAM`].
    pub fn minidump(&self, modules: &[DumpModule]) -> Vec<u8> {
        minidump::write(&SampleDump {
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
            every: every.max(1),
        }
    }

    /// Counts a sample and, if it is one to keep and a slot is left, copies the interrupted
    /// registers and stack into it with the frames `pcs` unwound there (as many as fit) and
    /// why the walk stopped; returns whether it did. Async-signal-safe: atomics, copies and
    /// `gettid`.
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
        if !seen.is_multiple_of(self.every) {
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
        // SAFETY: gettid has no preconditions (a system call, async-signal-safe).
        d.thread_id = unsafe { libc::gettid() } as u32;
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
    pub fn write_minidumps(&self, dir: &Path) -> std::io::Result<usize> {
        std::fs::create_dir_all(dir)?;
        let modules = minidump::current_modules();
        let mut written = 0;
        for c in self.captured() {
            std::fs::write(
                dir.join(format!("{:04}.dmp", c.index)),
                c.minidump(&modules),
            )?;
            written += 1;
        }
        Ok(written)
    }
}
