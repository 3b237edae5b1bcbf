//! Facts the `ingest::snapshot` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from PyTorch memory snapshots (`oom.*` and `torch.*` ones are catalogued by
/// `engines::pytorch`). Device-level facts describe the OOM device, or the busiest device.
pub const FACTS: &[FactDef] = &[
    fact(
        "snapshot.generation",
        Unit::Text,
        "Which PyTorch release wrote the snapshot, from its keys (e.g. '2.8', '2.5-2.7', '2.9+').",
    ),
    fact(
        "snapshot.layout",
        Unit::Text,
        "Top-level shape: 'dict' (_snapshot()) or 'segment-list' (1.13, or memory_snapshot()).",
    ),
    fact(
        "snapshot.pickle_protocol",
        Unit::Count,
        "Pickle protocol of the file (2-5; absent for 0 and 1).",
    ),
    fact(
        "snapshot.devices",
        Unit::Count,
        "Devices with segments or trace events in the snapshot.",
    ),
    fact(
        "snapshot.device",
        Unit::Count,
        "The device the snapshot facts describe: the one with an oom entry, else the busiest.",
    ),
    fact(
        "snapshot.reserved_bytes",
        Unit::Bytes,
        "Bytes reserved by the caching allocator at dump time (sum of segment sizes).",
    ),
    fact(
        "snapshot.allocated_bytes",
        Unit::Bytes,
        "Bytes in allocated blocks at dump time.",
    ),
    fact(
        "snapshot.active_bytes",
        Unit::Bytes,
        "Allocated plus pending-free bytes at dump time.",
    ),
    fact(
        "snapshot.inactive_bytes",
        Unit::Bytes,
        "Bytes in free (inactive) blocks at dump time.",
    ),
    fact(
        "snapshot.requested_bytes",
        Unit::Bytes,
        "Bytes callers asked for in allocated blocks (before rounding).",
    ),
    fact(
        "snapshot.rounding_loss_bytes",
        Unit::Bytes,
        "Allocated minus requested bytes: lost to the allocator's rounding.",
    ),
    fact(
        "snapshot.pending_free_bytes",
        Unit::Bytes,
        "Bytes freed by the user but held for other streams (record_stream).",
    ),
    fact("snapshot.segments", Unit::Count, "Segments at dump time."),
    fact(
        "snapshot.free_blocks",
        Unit::Count,
        "Free (inactive) blocks at dump time.",
    ),
    fact(
        "snapshot.max_free_blocks_per_segment",
        Unit::Count,
        "The most free blocks in one segment at dump time.",
    ),
    fact(
        "snapshot.largest_free_block_bytes",
        Unit::Bytes,
        "The largest free contiguous block at dump time.",
    ),
    fact(
        "snapshot.releasable_cache_bytes",
        Unit::Bytes,
        "Cache that empty_cache() (or the allocator before an OOM) releases: segments with no active block, and the free bytes of expandable segments (unmapped page by page).",
    ),
    fact(
        "snapshot.fragmented_free_bytes",
        Unit::Bytes,
        "Free bytes inside (non-expandable) segments that also hold active blocks: fragmentation, not releasable.",
    ),
    fact(
        "snapshot.expandable_segments",
        Unit::Flag,
        "Whether any segment is an expandable segment.",
    ),
    fact(
        "snapshot.private_pool_bytes",
        Unit::Bytes,
        "Bytes reserved by private pools (CUDA graphs, MemPool) at dump time.",
    ),
    fact(
        "snapshot.private_pool_allocated_bytes",
        Unit::Bytes,
        "Active bytes inside private pools at dump time.",
    ),
    fact(
        "snapshot.trace_entries",
        Unit::Count,
        "Events in the device's allocator trace.",
    ),
    fact(
        "snapshot.trace_starts_mid_history",
        Unit::Flag,
        "The trace begins after memory was already in use (ring buffer wrapped, or recording started late).",
    ),
    fact(
        "snapshot.has_oom",
        Unit::Flag,
        "Whether the device's trace holds an oom event.",
    ),
    fact(
        "snapshot.moment",
        Unit::Text,
        "The moment live memory was analysed at: 'oom', 'peak' (highest live bytes in the trace) or 'final' (dump time).",
    ),
    fact(
        "snapshot.replayed",
        Unit::Flag,
        "Whether the state at that moment was rebuilt by undoing later trace events (the dump came after the exception unwound).",
    ),
    fact(
        "snapshot.replayed_entries",
        Unit::Count,
        "Trace events undone to reach the analysed moment.",
    ),
    fact(
        "snapshot.replay_inconsistencies",
        Unit::Count,
        "Trace events the replay could not apply (frees of unknown addresses, double allocations).",
    ),
    fact(
        "snapshot.live_bytes",
        Unit::Bytes,
        "Live (active) bytes at the analysed moment.",
    ),
    fact(
        "snapshot.live_bytes_at_oom",
        Unit::Bytes,
        "Live (active) bytes at the oom event, replayed if needed.",
    ),
    fact(
        "snapshot.reserved_bytes_at_oom",
        Unit::Bytes,
        "Reserved (mapped) bytes at the oom event, replayed if needed.",
    ),
    fact(
        "snapshot.unallocated_at_oom_bytes",
        Unit::Bytes,
        "Reserved but not live bytes at the oom event.",
    ),
    fact(
        "snapshot.largest_free_block_at_oom_bytes",
        Unit::Bytes,
        "The largest free gap inside reserved memory at the oom event.",
    ),
    fact(
        "snapshot.fragmented_free_at_oom_bytes",
        Unit::Bytes,
        "Free bytes in non-expandable segments that also hold live blocks, at the oom event.",
    ),
    fact(
        "snapshot.peak_live_bytes",
        Unit::Bytes,
        "The highest live bytes over the trace.",
    ),
    fact(
        "snapshot.peak_reserved_bytes",
        Unit::Bytes,
        "The highest reserved bytes over the trace.",
    ),
    fact(
        "snapshot.category.weights_bytes",
        Unit::Bytes,
        "Live bytes at the analysed moment allocated by weight loading/initialisation or moving the model to the device.",
    ),
    fact(
        "snapshot.category.gradients_bytes",
        Unit::Bytes,
        "Live bytes at the analysed moment allocated in the backward pass.",
    ),
    fact(
        "snapshot.category.optimizer_bytes",
        Unit::Bytes,
        "Live bytes at the analysed moment allocated by the optimizer (state such as Adam's exp_avg, step temporaries).",
    ),
    fact(
        "snapshot.category.activations_bytes",
        Unit::Bytes,
        "Live bytes at the analysed moment allocated inside forward passes.",
    ),
    fact(
        "snapshot.category.kv_cache_bytes",
        Unit::Bytes,
        "Live bytes at the analysed moment allocated by KV-cache code (HF cache_utils, vLLM cache engine).",
    ),
    fact(
        "snapshot.category.communication_bytes",
        Unit::Bytes,
        "Live bytes at the analysed moment allocated by collectives (NCCL, torch.distributed).",
    ),
    fact(
        "snapshot.category.before_recording_bytes",
        Unit::Bytes,
        "Live bytes with no stack and no alloc event: allocated before recording began (often the weights).",
    ),
    fact(
        "snapshot.category.other_bytes",
        Unit::Bytes,
        "Live bytes whose stacks match no category, or recorded without a stack.",
    ),
    fact(
        "snapshot.dominant_category",
        Unit::Text,
        "The category holding the most live bytes at the analysed moment.",
    ),
    fact(
        "snapshot.top_site",
        Unit::Text,
        "The allocation site (file:line function, first Python frame outside torch) holding the most live bytes.",
    ),
    fact(
        "snapshot.top_site_bytes",
        Unit::Bytes,
        "Live bytes held by snapshot.top_site.",
    ),
    fact(
        "snapshot.oom_site",
        Unit::Text,
        "The allocation site of the failed request (from the oom event's stack).",
    ),
    fact(
        "snapshot.oom_category",
        Unit::Text,
        "The category of the failed request, from its stack.",
    ),
    fact(
        "snapshot.leak_slope_bytes_per_step",
        Unit::Bytes,
        "Growth of live bytes per iteration when a leak is detected (least squares over iteration starts).",
    ),
    fact(
        "snapshot.leak_steps",
        Unit::Count,
        "Iterations that left surviving allocations at the leak sites.",
    ),
    fact(
        "snapshot.leak_growth_bytes",
        Unit::Bytes,
        "Live bytes at the last iteration start minus at the first, when a leak is detected.",
    ),
    fact(
        "snapshot.leak_site",
        Unit::Text,
        "The site whose allocations survive iteration after iteration.",
    ),
    fact(
        "snapshot.leak_method",
        Unit::Text,
        "How iterations were found: profiler-steps, optimizer-steps or repeated-call-sites.",
    ),
];
