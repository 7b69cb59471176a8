//! A preallocated single-producer, single-consumer ring of variable-length records of `u64`
//! words: the signal handler of one thread writes its samples, the collector reads them (a
//! thread of the program, or the `record` process through memory shared with it).
//!
//! The producer never blocks or allocates: a record that does not fit is refused (and counted by
//! the caller). Indices only grow (wrapping at 2^64, never in practice); a word's slot is its
//! index modulo the capacity, a power of two. The ring is a view: its indices ([`RingIndices`])
//! and words live in a region the owner allocated (a leaked block, or a shared mapping), so
//! both ends may be in different processes. The consumer trusts nothing it reads there: a
//! length that cannot be right ends the drain.

use std::sync::atomic::{AtomicU64, Ordering};

/// The ring's two indices, each on its own cache line (the producer writes one, the consumer
/// the other). Zeroed memory is an empty ring.
#[repr(C, align(64))]
#[derive(Default)]
pub struct RingIndices {
    /// Next word the producer writes (written by the producer only).
    head: AtomicU64,
    _head_line: [u64; 7],
    /// Next word the consumer reads (written by the consumer only).
    tail: AtomicU64,
    _tail_line: [u64; 7],
}

/// The ring: indices and words in a region that outlives it. Each record is a length word (the
/// number of words that follow) and its words.
pub struct Ring {
    indices: &'static RingIndices,
    words: &'static [AtomicU64],
    mask: u64,
}

impl Ring {
    /// A ring of `capacity` words, rounded up to a power of two (at least 64), in memory of its
    /// own that is never freed (rings live as long as the process).
    pub fn new(capacity: usize) -> Ring {
        let capacity = capacity.max(64).next_power_of_two();
        let indices: &'static RingIndices = Box::leak(Box::default());
        let words: &'static [AtomicU64] =
            Box::leak((0..capacity).map(|_| AtomicU64::new(0)).collect());
        Ring {
            indices,
            words,
            mask: capacity as u64 - 1,
        }
    }

    /// A view of the ring whose indices and words are given, or `None` if the number of words
    /// is not a power of two.
    pub fn over(indices: &'static RingIndices, words: &'static [AtomicU64]) -> Option<Ring> {
        words.len().is_power_of_two().then(|| Ring {
            indices,
            words,
            mask: words.len() as u64 - 1,
        })
    }

    /// Appends one record made of `header` then `body`. Returns false, writing nothing, if it
    /// does not fit. Producer only; async-signal-safe (plain loads and stores, no loop but the
    /// copy).
    #[inline]
    pub fn push(&self, header: &[u64], body: &[u64]) -> bool {
        let len = (header.len() + body.len()) as u64;
        let head = self.indices.head.load(Ordering::Relaxed);
        // Acquire: the consumer's reads of the words it freed happen before we overwrite them.
        let tail = self.indices.tail.load(Ordering::Acquire);
        let free = (self.mask + 1).wrapping_sub(head.wrapping_sub(tail));
        if len + 1 > free {
            return false;
        }
        let mut at = head;
        for &w in std::iter::once(&len).chain(header).chain(body) {
            self.slot(at).store(w, Ordering::Relaxed);
            at = at.wrapping_add(1);
        }
        // Release: the record's words are visible before the consumer sees the new head.
        self.indices.head.store(at, Ordering::Release);
        true
    }

    /// Removes every complete record of at most `max_len` words, passing each to `f` (its
    /// words, header first), until `f` returns false. Consumer only. Indices or a length that
    /// cannot be right (memory the producer's process wrote over) end the drain with an error;
    /// the ring is then not to be trusted again.
    pub fn drain(&self, max_len: usize, mut f: impl FnMut(&[u64]) -> bool) -> Result<(), Corrupt> {
        let head = self.indices.head.load(Ordering::Acquire);
        let mut tail = self.indices.tail.load(Ordering::Relaxed);
        // A producer is never more than the capacity ahead: if it seems to be, the indices are
        // corrupt; read nothing rather than the ring round and round.
        if head.wrapping_sub(tail) > self.mask + 1 {
            return Err(Corrupt::Indices);
        }
        let mut record = Vec::new();
        while tail != head {
            let len = self.slot(tail).load(Ordering::Relaxed);
            if len > self.mask || len > head.wrapping_sub(tail) || len > max_len as u64 {
                self.indices.tail.store(tail, Ordering::Release);
                return Err(Corrupt::Length(len));
            }
            record.clear();
            record
                .extend((1..=len).map(|i| self.slot(tail.wrapping_add(i)).load(Ordering::Relaxed)));
            tail = tail.wrapping_add(len + 1);
            if !f(&record) {
                break;
            }
        }
        self.indices.tail.store(tail, Ordering::Release);
        Ok(())
    }

    #[inline(always)]
    fn slot(&self, index: u64) -> &AtomicU64 {
        // `index & mask` is below the length; the fallback keeps the path free of a panic.
        self.words
            .get((index & self.mask) as usize)
            .unwrap_or(&self.indices.head)
    }

    /// The ring's capacity in words.
    pub fn capacity(&self) -> usize {
        self.words.len()
    }
}

/// What was wrong with a ring whose drain failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corrupt {
    /// The producer's index is more than the capacity ahead of the consumer's.
    Indices,
    /// A record's length word: longer than the ring, than what was written, or than allowed.
    Length(u64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_come_out_in_order_and_a_full_ring_refuses() {
        let r = Ring::new(64);
        assert_eq!(r.capacity(), 64);
        let mut pushed = 0u64;
        // 10 words per record (1 length + 2 header + 7 body): 6 fit in 64.
        while r.push(&[pushed, 7], &[pushed; 7]) {
            pushed += 1;
        }
        assert_eq!(pushed, 6);
        let mut seen = Vec::new();
        r.drain(64, |rec| {
            seen.push(rec.to_vec());
            true
        })
        .unwrap();
        assert_eq!(seen.len(), 6);
        for (i, rec) in seen.iter().enumerate() {
            let i = i as u64;
            assert_eq!(rec, &[&[i, 7][..], &[i; 7][..]].concat());
        }
        // Wraps around: many more records through the same ring, interleaved.
        for n in 0..1000u64 {
            assert!(r.push(&[n], &[n, n + 1]));
            let mut got = Vec::new();
            r.drain(64, |rec| {
                got.push(rec.to_vec());
                true
            })
            .unwrap();
            assert_eq!(got, vec![vec![n, n, n + 1]]);
        }
    }

    #[test]
    fn a_producer_and_a_consumer_thread_agree() {
        let r = std::sync::Arc::new(Ring::new(256));
        let p = r.clone();
        let producer = std::thread::spawn(move || {
            let mut n = 0u64;
            let mut refused = 0u64;
            while n < 100_000 {
                let len = (n % 13) as usize;
                if p.push(&[n, len as u64], &vec![n; len]) {
                    n += 1;
                } else {
                    refused += 1;
                    std::hint::spin_loop();
                }
            }
            refused
        });
        let mut next = 0u64;
        while next < 100_000 {
            r.drain(64, |rec| {
                assert_eq!(rec[0], next);
                let len = rec[1] as usize;
                assert_eq!(rec.len(), 2 + len);
                assert!(rec[2..].iter().all(|&w| w == next));
                next += 1;
                true
            })
            .unwrap();
        }
        producer.join().unwrap();
    }

    /// What another process may write over: a length past the limit, past what was written,
    /// or indices too far apart, each an error that names it, never a read past the record.
    #[test]
    fn corrupt_lengths_and_indices_are_errors() {
        let r = Ring::new(64);
        assert!(r.push(&[1, 2], &[3; 5]));
        assert!(r.push(&[4, 5], &[6; 5]));
        // A limit below the first record's 7 words: refused, nothing passed on.
        let mut seen = 0;
        assert_eq!(
            r.drain(6, |_| {
                seen += 1;
                true
            }),
            Err(Corrupt::Length(7))
        );
        assert_eq!(seen, 0);
        // The first length word scribbled to claim more than was written.
        r.words[0].store(40, Ordering::Relaxed);
        assert_eq!(r.drain(64, |_| true), Err(Corrupt::Length(40)));
        r.words[0].store(1 << 24, Ordering::Relaxed);
        assert_eq!(r.drain(1 << 30, |_| true), Err(Corrupt::Length(1 << 24)));
        r.words[0].store(7, Ordering::Relaxed);
        // Stopping early leaves the rest for the next drain.
        let mut n = 0;
        r.drain(64, |_| {
            n += 1;
            false
        })
        .unwrap();
        r.drain(64, |_| {
            n += 1;
            true
        })
        .unwrap();
        assert_eq!(n, 2);
        // A head far ahead of the tail.
        r.indices.head.store(1000, Ordering::Relaxed);
        assert_eq!(r.drain(64, |_| true), Err(Corrupt::Indices));
    }
}
