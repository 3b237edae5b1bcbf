//! PyTorch memory snapshots (filled in by the snapshot work).

/// Whether the bytes start like a pickle (protocol 2-5 PROTO opcode).
pub fn looks_like_pickle(head: &[u8]) -> bool {
    head.first() == Some(&0x80) && head.get(1).is_some_and(|p| (2..=5).contains(p))
}
