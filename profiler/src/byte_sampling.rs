//! Sampling allocations by bytes, as tcmalloc, jemalloc and Go's runtime do: sample points fall
//! on the stream of allocated bytes as a Poisson process of mean spacing `mean` (the
//! `--alloc-interval`, 512 KiB by default), and an allocation is sampled when a point falls in
//! its bytes. Per thread that is a countdown of bytes, so the path of an allocation not sampled
//! is a subtraction and a test ([`ByteSampler::sample`]).
//!
//! An allocation of `size` bytes is sampled with probability `1 - exp(-size / mean)`, so each
//! sample stands for `1 / p` allocations and `size / p` bytes ([`estimate`]): unbiased estimates
//! of objects and bytes, at every size.
//!
//! The countdown's draws use no library call (the logarithm is computed here, [`log2`]), so the
//! sampling path can run in an allocator hook or a signal handler.

/// The default mean number of bytes between samples (tcmalloc's and Go's).
pub const DEFAULT_MEAN: u64 = 512 * 1024;

/// Random bits of each uniform draw: the longest interval drawn is `26 ln 2` (about 18)
/// times the mean, as in Go's runtime.
const RANDOM_BITS: u32 = 26;

/// One thread's sampler: the bytes left until its next sample point, and its own random state.
#[derive(Clone, Debug)]
pub struct ByteSampler {
    /// Bytes left before the next sample point.
    left: i64,
    /// xorshift64* state (never 0).
    state: u64,
    /// The mean spacing of sample points, in bytes.
    mean: u64,
}

impl ByteSampler {
    /// A sampler of mean spacing `mean` bytes (at least 1), its random state from `seed` (a
    /// thread's id and the time, say: threads must not share a sequence).
    pub fn new(mean: u64, seed: u64) -> ByteSampler {
        let mut s = ByteSampler {
            left: 0,
            // SplitMix64's finalizer: nearby seeds give unrelated states, and never 0.
            state: mix(seed) | 1,
            mean: mean.max(1),
        };
        s.left = s.next_interval();
        s
    }

    /// Whether the allocation of `size` bytes that follows is sampled; draws the next point
    /// when it is.
    #[inline]
    pub fn sample(&mut self, size: usize) -> bool {
        let size = i64::try_from(size).unwrap_or(i64::MAX);
        self.left = self.left.saturating_sub(size);
        if self.left >= 0 {
            return false;
        }
        // Memoryless: the next point is an exponential draw from this allocation's end.
        self.left = self.next_interval();
        true
    }

    /// The mean spacing of sample points, in bytes.
    pub fn mean(&self) -> u64 {
        self.mean
    }

    /// Its state: the bytes left and the random state, for keeping it in atomics (an
    /// allocator hook's table, see [`crate::alloc_sampling`]).
    pub fn parts(&self) -> (i64, u64) {
        (self.left, self.state)
    }

    /// A sampler from the [`parts`](Self::parts) of one of mean `mean`.
    pub fn from_parts(left: i64, state: u64, mean: u64) -> ByteSampler {
        ByteSampler {
            left,
            state: state.max(1),
            mean: mean.max(1),
        }
    }

    /// An exponential draw of mean `self.mean`, in bytes (at least 1): `-ln(u) * mean` for `u`
    /// uniform in (0, 1].
    fn next_interval(&mut self) -> i64 {
        let q = (self.next_random() >> (64 - RANDOM_BITS)) + 1; // 1 ..= 2^26
        let ln_u = (log2(q as f64) - f64::from(RANDOM_BITS)) * std::f64::consts::LN_2;
        let bytes = (-ln_u).max(0.0) * self.mean as f64;
        // Below 2^63 for any mean below 2^58; saturates beyond.
        (bytes as i64).saturating_add(1)
    }

    /// xorshift64*: fast, and good enough for choosing sample points.
    fn next_random(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// SplitMix64's output function.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The base-2 logarithm of a positive, finite, normal `x`, within 2e-6, without a library
/// call: the exponent from the bits, the mantissa's logarithm from the series of
/// `2 atanh(z) / ln 2`, `z = (m - 1) / (m + 1)` (below 1/3 for `m` in [1, 2)).
pub fn log2(x: f64) -> f64 {
    let bits = x.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let m = f64::from_bits((bits & ((1 << 52) - 1)) | (1023 << 52));
    let z = (m - 1.0) / (m + 1.0);
    let z2 = z * z;
    let series = z * (1.0 + z2 * (1.0 / 3.0 + z2 * (1.0 / 5.0 + z2 * (1.0 / 7.0 + z2 / 9.0))));
    exponent as f64 + 2.0 * std::f64::consts::LOG2_E * series
}

/// What one sampled allocation of `size` bytes stands for when points are `mean` bytes apart on
/// average: (objects, bytes), unbiased. Not for the sampling path (it calls `exp_m1`): for
/// building profiles.
pub fn estimate(size: u64, mean: u64) -> (f64, f64) {
    let p = -(-(size as f64) / mean.max(1) as f64).exp_m1();
    if p <= 0.0 {
        return (0.0, 0.0);
    }
    (1.0 / p, size as f64 / p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_logarithm_is_within_2e_6_everywhere_it_is_used() {
        let mut worst = 0f64;
        for q in (1..=1u64 << 26)
            .step_by(997)
            .chain([1, 2, 3, (1 << 26) - 1, 1 << 26])
        {
            let x = q as f64;
            worst = worst.max((log2(x) - x.log2()).abs());
        }
        for x in [1e-300, 0.001, 0.5, 1.5, 1.999_999, 7.0, 1e10, 1e300] {
            worst = worst.max((log2(x) - f64::log2(x)).abs());
        }
        assert!(worst < 2e-6, "{worst}");
    }

    #[test]
    fn intervals_are_exponential_with_the_mean() {
        let mean = 512 * 1024;
        let mut s = ByteSampler::new(mean, 42);
        let n = 1_000_000;
        let draws: Vec<i64> = (0..n).map(|_| s.next_interval()).collect();
        let average = draws.iter().map(|&d| d as f64).sum::<f64>() / n as f64;
        assert!((average / mean as f64 - 1.0).abs() < 0.005, "{average}");
        // The exponential's tail: P(X > k mean) = e^-k.
        for k in [1.0f64, 3.0, 6.0] {
            let above = draws
                .iter()
                .filter(|&&d| d as f64 > k * mean as f64)
                .count();
            let share = above as f64 / n as f64;
            let expected = (-k).exp();
            assert!(
                (share - expected).abs() < 0.003 + 0.02 * expected,
                "P(X > {k} mean) = {share}, expected {expected}"
            );
        }
        assert!(draws.iter().all(|&d| d >= 1));
    }

    /// Streams of allocations of one size each, from far below the mean to far above it: the
    /// samples' estimates add up to the bytes and objects allocated (within 4 %: about four
    /// standard errors for the 10,000 samples each stream expects at the smallest sizes).
    #[test]
    fn estimates_add_up_to_what_was_allocated_at_every_size() {
        let mean = 4096;
        for (i, size) in [8u64, 64, 1000, 4096, 40_000, 1_000_000]
            .into_iter()
            .enumerate()
        {
            let mut s = ByteSampler::new(mean, 7 + i as u64);
            let count = (10_000 * mean / size).max(20_000);
            let (mut objects, mut bytes) = (0f64, 0f64);
            for _ in 0..count {
                if s.sample(size as usize) {
                    let (o, b) = estimate(size, mean);
                    objects += o;
                    bytes += b;
                }
            }
            let truth = (count * size) as f64;
            assert!(
                (bytes / truth - 1.0).abs() < 0.04,
                "size {size}: estimated {bytes} bytes of {truth}"
            );
            assert!(
                (objects / count as f64 - 1.0).abs() < 0.04,
                "size {size}: estimated {objects} objects of {count}"
            );
        }
    }

    #[test]
    fn small_allocations_are_not_sampled_until_the_countdown_crosses() {
        let mut s = ByteSampler::new(1 << 20, 1);
        let left = s.left;
        let mut taken = 0;
        while !s.sample(16) {
            taken += 16;
        }
        // Sampled on the allocation whose bytes hold the point.
        assert!(taken <= left && left < taken + 16, "{taken} {left}");
        // Threads seeded differently draw differently.
        let draws = |seed| ByteSampler::new(1 << 20, seed).left;
        assert_ne!(draws(1), draws(2));
    }
}
