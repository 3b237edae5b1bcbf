//! A small, fast, non-cryptographic hasher for the decoder's and replay's hash maps.
//!
//! The keys hashed here (addresses, frame ids, short strings) come from one input file and
//! the maps live for one analysis, so HashDoS resistance buys nothing, while SipHash (std's
//! default) costs a noticeable share of the replay of a million-entry trace. This is the
//! multiply-rotate scheme of rustc's `FxHasher`, written out to avoid a dependency.
//!
//! Plain Fx keeps a key's trailing zero bits (a multiply by an odd number does), and the
//! map picks the bucket from the low bits: addresses, all multiples of 512, would start
//! every probe at one bucket in 512. [`new_spread_map`] folds the high bits down at the end
//! for such keys. It is not the default because it changes the map's iteration order, and
//! the replay's map of live blocks is iterated in an order the analysis output depends on
//! (which site is numbered first), so it keeps the plain hash.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// See the module docs.
#[derive(Clone, Copy, Default)]
pub struct FxHasher {
    hash: u64,
    spread: bool,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

/// One step of the multiply-rotate: `hash` with `word` mixed in. For hashes built in a loop
/// without a `Hasher` (the frame-list hashes of the snapshot decoder).
#[inline]
pub fn mix(hash: u64, word: u64) -> u64 {
    (hash.rotate_left(5) ^ word).wrapping_mul(SEED)
}

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = mix(self.hash, word);
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
        if self.spread {
            // The high bits are the well-mixed ones: bring them to where buckets are chosen.
            self.hash.rotate_left(26)
        } else {
            self.hash
        }
    }
}

/// Builds [`FxHasher`]s, plain or spreading (see the module docs).
#[derive(Clone, Copy, Default)]
pub struct FxBuild {
    spread: bool,
}

impl BuildHasher for FxBuild {
    type Hasher = FxHasher;
    #[inline]
    fn build_hasher(&self) -> FxHasher {
        FxHasher {
            hash: 0,
            spread: self.spread,
        }
    }
}

/// A `HashMap` using [`FxHasher`].
pub type FxHashMap<K, V> = HashMap<K, V, FxBuild>;

/// An empty [`FxHashMap`] with the plain hash.
pub fn new_map<K, V>() -> FxHashMap<K, V> {
    HashMap::with_hasher(FxBuild { spread: false })
}

/// An empty [`FxHashMap`] whose hash spreads keys with zero low bits (addresses) over the
/// buckets. For maps whose iteration order does not reach the output.
pub fn new_spread_map<K, V>() -> FxHashMap<K, V> {
    HashMap::with_hasher(FxBuild { spread: true })
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

    #[test]
    fn spread_hashes_of_aligned_addresses_differ_in_their_low_bits() {
        let low = |spread: bool, a: u64| {
            let mut h = FxBuild { spread }.build_hasher();
            h.write_u64(a);
            h.finish() & 511
        };
        let base = 0x7f3a_0000_0000u64;
        let distinct = |spread| {
            let mut v: Vec<u64> = (0..64).map(|i| low(spread, base + i * 512)).collect();
            v.sort_unstable();
            v.dedup();
            v.len()
        };
        assert_eq!(distinct(false), 1, "plain Fx keeps the nine zero bits");
        assert!(distinct(true) > 32);
    }
}
