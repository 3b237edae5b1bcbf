//! A small, fast, non-cryptographic hasher for the decoder's and replay's hash maps.
//!
//! The keys hashed here (addresses, frame ids, short strings) come from one input file and
//! the maps live for one analysis, so HashDoS resistance buys nothing, while SipHash (std's
//! default) costs a noticeable share of the replay of a million-entry trace. This is the
//! multiply-rotate scheme of rustc's `FxHasher`, written out to avoid a dependency.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// See the module docs.
#[derive(Clone, Copy, Default)]
pub struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_i64(&mut self, i: i64) {
        self.add(i as u64);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// A `HashMap` using [`FxHasher`].
pub type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// An empty [`FxHashMap`].
pub fn new_map<K, V>() -> FxHashMap<K, V> {
    HashMap::with_hasher(BuildHasherDefault::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_keys_stay_distinct() {
        let mut m: FxHashMap<u64, u32> = new_map();
        for i in 0..10_000u64 {
            m.insert(0x7f00_0000_0000 + i * 512, i as u32);
        }
        assert_eq!(m.len(), 10_000);
        assert_eq!(m.get(&(0x7f00_0000_0000 + 512 * 77)), Some(&77));
    }
}
