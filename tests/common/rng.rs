//! A tiny deterministic generator (xorshift64), shared by the tests and the benchmark
//! generators: cases must not depend on a random seed, and the project needs no crate for it.

#![allow(dead_code)]

/// xorshift64; the seed must not be zero.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A value in `-amp..=amp`.
    pub fn noise(&mut self, amp: i64) -> i64 {
        (self.next() % (2 * amp as u64 + 1)) as i64 - amp
    }
}
