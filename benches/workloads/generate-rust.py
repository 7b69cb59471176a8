"""Writes a Rust library that keeps rustc busy for a few seconds at -O (the benchmarks' Rust
sample sequence, scripts/bench): N generic structs with trait impls, iterator chains and
closures, instantiated from a few callers. rustc is a Rust release program whose stacks run
deep through generic code (its query system, type checker, trait solver and LLVM).
Usage: generate-rust.py N > FILE.rs"""

import sys

n = int(sys.argv[1])
out = [
    "use std::collections::BTreeMap;",
    "pub trait Step { fn step(&self, x: u64) -> u64; }",
]
for i in range(n):
    out.append(
        f"""#[derive(Clone, Debug, Default, PartialEq)]
pub struct S{i}<T> {{ pub v: Vec<T>, pub k: u64 }}
impl<T: Copy + Into<u64>> Step for S{i}<T> {{
    fn step(&self, x: u64) -> u64 {{
        self.v.iter().map(|&t| t.into()).filter(|t| t % {i + 2} != 0)
            .fold(x ^ self.k, |a, b| a.rotate_left({i % 63 + 1}).wrapping_add(b * {2 * i + 1}))
    }}
}}
pub fn f{i}(xs: &[u32]) -> BTreeMap<u64, u64> {{
    let s = S{i} {{ v: xs.to_vec(), k: {i} }};
    let s16 = S{i} {{ v: xs.iter().map(|&x| x as u16).collect::<Vec<_>>(), k: {i + 1} }};
    (0..{i % 7 + 3}u64).map(|j| (j, s.step(j) ^ s16.step(j + 1))).collect()
}}"""
    )
out.append("pub fn all(xs: &[u32]) -> u64 {")
out.append("    let mut t = 0u64;")
out += [f"    t ^= f{i}(xs).values().sum::<u64>();" for i in range(n)]
out.append("    t\n}")
print("\n".join(out))
