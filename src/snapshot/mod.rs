//! PyTorch memory snapshots (filled in by the snapshot work).
