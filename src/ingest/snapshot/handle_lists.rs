//! Frame lists known by their elements' handles: the decoder's fast path for a trace entry's
//! `frames`, in a table whose loads can be started for a whole batch of entries at once.
//!
//! PyTorch shares frame dicts but writes a fresh list per trace entry, so most entries'
//! frame lists hold the very dict handles of a list met before. The decoder hashes the
//! handles and looks the list up here before it resolves any frame. A trace's stacks
//! repeat in no order a cache can follow, so on a large snapshot each lookup is a chain
//! of cache misses (the table's slot, then the stored handles to compare), and one entry's
//! chain waits for the one before (issue 15: a third of the decode time on a million-entry
//! trace). The table is open-addressed with the slot found from the hash alone, so
//! [`HandleLists::warm`] can load, for a slice of a batch of entries, first every slot and
//! then every matching list, each pass a run of independent loads that are in flight
//! together; the lookups that follow hit the cache.
//!
//! Only results are stored, never trusted on the hash alone: [`HandleLists::get`] compares
//! the stored handles with the list's.

use super::fxhash;
use super::pickle::Handle;

/// The hash of a frame list by its elements' handles; `None` unless every element is a
/// dict. Only dicts qualify: a container's handle is never reused for another object (an
/// integer's arena slot can be, once a batch is released), so the same handles are the
/// same dicts, whose frames were interned when the list that entered them was read.
#[inline]
pub(super) fn dict_handles_hash(items: &[Handle]) -> Option<u64> {
    // Four independent hash chains (one per lane of four handles), joined at the end: a
    // single chain's multiplies wait on one another, thirty deep for a typical stack.
    let mut lanes = [items.len() as u64, 1, 2, 3];
    let mut all_dicts = true;
    let mut quads = items.chunks_exact(4);
    for q in &mut quads {
        for (lane, h) in lanes.iter_mut().zip(q) {
            all_dicts &= h.is_dict();
            *lane = fxhash::mix(*lane, h.bits() as u64);
        }
    }
    for (lane, h) in lanes.iter_mut().zip(quads.remainder()) {
        all_dicts &= h.is_dict();
        *lane = fxhash::mix(*lane, h.bits() as u64);
    }
    all_dicts.then(|| lanes.into_iter().fold(0, fxhash::mix))
}

/// One slot: 16 bytes, four to a cache line.
#[derive(Clone, Copy)]
struct Slot {
    /// The hash's high half (its low bits chose the slot).
    tag: u32,
    /// The frame list's id; [`EMPTY`] for a free slot.
    id: u32,
    /// Where the list's handles are in [`HandleLists::handles`].
    start: u32,
    len: u32,
}

const EMPTY: u32 = u32::MAX;
const FREE: Slot = Slot {
    tag: 0,
    id: EMPTY,
    start: 0,
    len: 0,
};

/// Frame lists by handle hash: an open-addressed table (linear probing, at most half full)
/// over the handles of each list entered.
pub(super) struct HandleLists {
    slots: Vec<Slot>,
    used: usize,
    handles: Vec<Handle>,
}

impl HandleLists {
    pub(super) fn new() -> Self {
        HandleLists {
            slots: vec![FREE; 1024],
            used: 0,
            handles: Vec::new(),
        }
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        hash as usize & (self.slots.len() - 1)
    }

    /// The id of the list entered with these handles (`hash` is their
    /// [`dict_handles_hash`]).
    #[inline]
    pub(super) fn get(&self, hash: u64, items: &[Handle]) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let tag = (hash >> 32) as u32;
        let mut i = self.home(hash);
        loop {
            let s = self.slots[i];
            if s.id == EMPTY {
                return None;
            }
            if s.tag == tag
                && s.len as usize == items.len()
                && self
                    .handles
                    .get(s.start as usize..(s.start + s.len) as usize)
                    == Some(items)
            {
                return Some(s.id);
            }
            i = (i + 1) & mask;
        }
    }

    /// Enters list `id` with these handles (not already entered: [`HandleLists::get`]
    /// missed). Lists past 2^32 stored handles are not entered (the decoder's slower path
    /// still finds them by their frames).
    pub(super) fn insert(&mut self, hash: u64, items: &[Handle], id: u32) {
        let (Ok(start), Ok(len)) = (
            u32::try_from(self.handles.len()),
            u32::try_from(items.len()),
        ) else {
            return;
        };
        if start.checked_add(len).is_none() || id == EMPTY {
            return;
        }
        if (self.used + 1) * 2 > self.slots.len() {
            self.grow();
        }
        self.handles.extend_from_slice(items);
        self.place(
            Slot {
                tag: (hash >> 32) as u32,
                id,
                start,
                len,
            },
            hash,
        );
        self.used += 1;
    }

    fn place(&mut self, slot: Slot, hash: u64) {
        let mask = self.slots.len() - 1;
        let mut i = self.home(hash);
        while self.slots[i].id != EMPTY {
            i = (i + 1) & mask;
        }
        self.slots[i] = slot;
    }

    fn grow(&mut self) {
        let doubled = vec![FREE; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        for s in old.into_iter().filter(|s| s.id != EMPTY) {
            // The slot's hash is gone; its list's handles give it back.
            let items = &self.handles[s.start as usize..(s.start + s.len) as usize];
            let hash = dict_handles_hash(items).unwrap_or(0);
            self.place(s, hash);
        }
    }

    /// Loads what looking up each of `hashes` will read: first every home slot, then the
    /// handles of every list a slot names. Each pass is a run of loads independent of one
    /// another, so they overlap, where lookups one after another would wait on each miss
    /// in turn. Only the cache is changed; the value returned means nothing (it keeps the
    /// loads from being optimised away).
    pub(super) fn warm(&self, hashes: &[u64]) -> u64 {
        let mut sink = 0u64;
        for &hash in hashes {
            sink = sink.wrapping_add(self.slots[self.home(hash)].tag as u64);
        }
        for &hash in hashes {
            let s = self.slots[self.home(hash)];
            if s.id != EMPTY {
                // Every cache line of them (16 handles to a line), the last one included:
                // a typical stack's handles span two or three lines.
                let (start, end) = (s.start as usize, (s.start + s.len) as usize);
                for at in (start..end).step_by(16).chain(end.checked_sub(1)) {
                    if let Some(h) = self.handles.get(at) {
                        sink = sink.wrapping_add(h.bits() as u64);
                    }
                }
            }
        }
        sink
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::snapshot::pickle::{Pickle, PickleLimits};

    /// Dict handles from a real pickle: `[{}, {}, ..., {}]` (protocol 2, no memo).
    fn dicts(n: usize) -> Vec<Handle> {
        let mut bytes = vec![0x80, 2, b']', b'('];
        bytes.extend(std::iter::repeat_n(b'}', n));
        bytes.extend_from_slice(b"e.");
        let p = Pickle::parse(&bytes, &PickleLimits::default()).unwrap();
        let list = p.as_sequence(p.root()).unwrap();
        p.items(list).collect()
    }

    #[test]
    fn lists_are_found_by_their_handles_and_only_by_the_same_handles() {
        let d = dicts(3000);
        let mut lists = HandleLists::new();
        // Enough lists to grow the table several times.
        let list = |i: usize| &d[i..i + 1 + i % 30];
        for i in 0..2000 {
            let items = list(i);
            let hash = dict_handles_hash(items).unwrap();
            assert_eq!(lists.get(hash, items), None);
            lists.insert(hash, items, i as u32);
        }
        for i in 0..2000 {
            let items = list(i);
            let hash = dict_handles_hash(items).unwrap();
            assert_eq!(lists.get(hash, items), Some(i as u32), "list {i}");
        }
        // A slot's tag and length match but its handles do not: not found.
        let items = list(7);
        let other = &d[2500..2500 + items.len()];
        assert_eq!(lists.get(dict_handles_hash(items).unwrap(), other), None);
        // Any hash, entered or not, may be warmed; warming changes nothing found.
        let _ = lists.warm(&[0, 1, u64::MAX, dict_handles_hash(items).unwrap()]);
        assert_eq!(lists.get(dict_handles_hash(items).unwrap(), items), Some(7));
    }

    #[test]
    fn a_list_with_a_non_dict_has_no_handle_hash() {
        let mut bytes = vec![0x80, 2, b']', b'(', b'}', b'K', 7];
        bytes.extend_from_slice(b"e.");
        let p = Pickle::parse(&bytes, &PickleLimits::default()).unwrap();
        let list = p.as_sequence(p.root()).unwrap();
        let items: Vec<Handle> = p.items(list).collect();
        assert_eq!(dict_handles_hash(&items), None);
        assert!(dict_handles_hash(&items[..1]).is_some());
    }
}
