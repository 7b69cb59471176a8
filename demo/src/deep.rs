//! Deep stacks: a chain of five distinct non-inlined functions, then a recursion of
//! `DEPTH + 1` levels ([`DEPTH`]) through three mutually recursive functions, then the recursion
//! phase's leaf.
//!
//! Every call is followed by some arithmetic on its result, so none of them becomes a tail call
//! (which would take its caller's frame off the stack). Only plain operators are used, for the
//! same reason as in [`crate::sort`].

/// Recursion levels below [`recurse_a`]: it calls [`recurse_b`] with `DEPTH - 1`, which calls
/// [`recurse_c`], which calls [`recurse_a`], and so on; the one reached with 0 calls
/// [`recursion_leaf`]. With 41 that is [`recurse_c`] (41 = 3 × 13 + 2), called by
/// [`recurse_b`].
pub const DEPTH: u32 = 41;

/// Mixing rounds per [`recursion_leaf`] call (a few tens of microseconds).
const LEAF_ROUNDS: u64 = 24_000;

/// The whole descent: [`chain_one`] → … → [`chain_five`] → [`recurse_a`] → … →
/// [`recursion_leaf`]. Returns a value that depends on every level.
#[inline(never)]
pub fn chain_one(seed: u64) -> u64 {
    chain_two(seed ^ 0x11) ^ 0x1111
}

/// Second link of the chain.
#[inline(never)]
pub fn chain_two(seed: u64) -> u64 {
    chain_three(seed ^ 2) ^ 0x2222_0000
}

/// Third link of the chain.
#[inline(never)]
pub fn chain_three(seed: u64) -> u64 {
    (chain_four(seed | 0x300) << 1) ^ 3
}

/// Fourth link of the chain.
#[inline(never)]
pub fn chain_four(seed: u64) -> u64 {
    chain_five(seed ^ 0x4400) | 0x44
}

/// Fifth link of the chain: starts the recursion.
#[inline(never)]
pub fn chain_five(seed: u64) -> u64 {
    recurse_a(DEPTH, seed) ^ 0x5555_5555
}

/// First of the three mutually recursive functions.
#[inline(never)]
pub fn recurse_a(depth: u32, seed: u64) -> u64 {
    if depth == 0 {
        return recursion_leaf(seed) ^ 0xa;
    }
    (recurse_b(depth - 1, seed ^ depth as u64) >> 1) ^ 0xa0
}

/// Second of the three mutually recursive functions.
#[inline(never)]
pub fn recurse_b(depth: u32, seed: u64) -> u64 {
    if depth == 0 {
        return recursion_leaf(seed) ^ 0xb;
    }
    (recurse_c(depth - 1, seed ^ ((depth as u64) << 4)) << 1) ^ 0xb0
}

/// Third of the three mutually recursive functions.
#[inline(never)]
pub fn recurse_c(depth: u32, seed: u64) -> u64 {
    if depth == 0 {
        return recursion_leaf(seed) ^ 0xc;
    }
    recurse_a(depth - 1, seed ^ ((depth as u64) << 8)) ^ 0xc0c0
}

/// The recursion phase's hot leaf, at the bottom of the recursion: a multiply-xorshift mix.
#[inline(never)]
pub fn recursion_leaf(seed: u64) -> u64 {
    let mut x = seed | 1;
    let mut i = 0;
    while i < LEAF_ROUNDS {
        x ^= x >> 29;
        // The low 64 bits of the product: u128 cannot overflow, so no overflow check either.
        x = (x as u128 * 0xbf58_476d_1ce4_e5b9) as u64;
        x ^= i;
        i += 1;
    }
    x
}

/// The function that calls [`recursion_leaf`] and its caller, as [`DEPTH`] makes them.
pub fn leaf_callers() -> [&'static str; 2] {
    let names = [
        std::any::type_name_of_val(&recurse_a),
        std::any::type_name_of_val(&recurse_b),
        std::any::type_name_of_val(&recurse_c),
    ];
    let last = (DEPTH % 3) as usize;
    [names[last], names[(last + 2) % 3]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leaf_is_called_by_recurse_c_under_recurse_b() {
        assert_eq!(
            leaf_callers(),
            [
                "unwind_demo_workload::deep::recurse_c",
                "unwind_demo_workload::deep::recurse_b"
            ]
        );
    }

    #[test]
    fn deterministic() {
        assert_eq!(chain_one(5), chain_one(5));
        assert_ne!(chain_one(5), chain_one(6));
    }
}
