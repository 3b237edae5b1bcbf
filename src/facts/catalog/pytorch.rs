//! Facts the `ingest::log::engines::pytorch` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from PyTorch OOM messages and allocator configuration.
pub const FACTS: &[FactDef] = &[
    fact(
        "oom.backend",
        Unit::Text,
        "The device family of the failed allocation: cuda, hip, xpu, mps, npu, musa, mlu, directml, cpu.",
    ),
    fact(
        "oom.outside_allocator",
        Unit::Flag,
        "PyTorch 1.x+ reported `CUDA error: out of memory` from a runtime call (context creation, a copy, a library), not the caching allocator's `CUDA out of memory. Tried to allocate`: the allocation that failed was not a tensor's.",
    ),
    fact(
        "oom.pinned_host_copy",
        Unit::Flag,
        "The call that failed copies to page-locked host memory (`x.to(\"cpu\", non_blocking=True)`, `.pin_memory()`): its `CUDA error: out of memory` is the pinned host allocation failing, not the device filling.",
    ),
    fact(
        "oom.attention_scores",
        Unit::Flag,
        "The call that failed builds an attention score matrix (batch x heads x query x key): an attention function that materialises it (`eager_attention_forward`, `_attn`) or a source line assigning it (`attn_weights = ...softmax(...)`). It grows with the square of the sequence length; SDPA and FlashAttention never hold it.",
    ),
    fact(
        "oom.kv_cache_update",
        Unit::Flag,
        "The failing source line extends a KV cache by concatenation (`torch.cat([past_key_value[0], key_states], dim=2)`): generation's cache growing token by token.",
    ),
    fact(
        "oom.accumulator",
        Unit::Text,
        "The tensor the failing source line concatenates onto itself (`preds = torch.cat((preds, logits))`, `preds_host = nested_concat(preds_host, logits)`): outputs gathered batch by batch on the device, each concatenation asking for all of them again plus one batch.",
    ),
    fact(
        "oom.wording",
        Unit::Text,
        "Which generation of the message was printed (torch-2.4+, torch-2.1, torch-legacy, torch-cached, cuda-runtime, thc: PyTorch before 1.0 (`cuda runtime error (2)`, `THCudaCheck`), its caching allocator failing in the runtime's words, framework-cuda: a C++ framework's own cudaMalloc failure (Caffe, dlib, MXNet's storage manager), mps, directml: torch-directml's `Could not allocate tensor with N bytes`, cuda-malloc-async, xla-runtime, cuda-module-load: a compiled kernel could not be loaded, notebook-header: only a notebook's traceback header (`MemoryError    Traceback (most recent call last)`) named the failure, ...).",
    ),
    fact(
        "oom.exception",
        Unit::Text,
        "The exception class as printed (torch.OutOfMemoryError, RuntimeError, ...).",
    ),
    fact(
        "oom.device",
        Unit::Count,
        "Device ordinal of the failed allocation.",
    ),
    fact(
        "oom.requested_bytes",
        Unit::Bytes,
        "Bytes the failing allocation asked for (the allocator's rounded size).",
    ),
    fact(
        "oom.total_bytes",
        Unit::Bytes,
        "Total capacity of the device.",
    ),
    fact(
        "oom.free_bytes",
        Unit::Bytes,
        "Device-wide free memory at the failure (cudaMemGetInfo).",
    ),
    fact(
        "oom.allocated_bytes",
        Unit::Bytes,
        "Memory in live tensors of this process's allocator (including private pools).",
    ),
    fact(
        "oom.reserved_bytes",
        Unit::Bytes,
        "Memory held by this process's caching allocator (allocated plus reserved-but-unallocated).",
    ),
    fact(
        "oom.reserved_unallocated_bytes",
        Unit::Bytes,
        "Reserved by the allocator but not in any live tensor: cached or fragmented.",
    ),
    fact(
        "oom.private_pool_bytes",
        Unit::Bytes,
        "Allocated memory inside private pools (CUDA graphs, MemPool).",
    ),
    fact(
        "oom.allowed_bytes",
        Unit::Bytes,
        "The per-process cap from set_per_process_memory_fraction, when one is set.",
    ),
    fact(
        "oom.self_used_bytes",
        Unit::Bytes,
        "All device memory this process uses, including non-PyTorch memory (NVML).",
    ),
    fact(
        "oom.other_processes_bytes",
        Unit::Bytes,
        "Device memory used by the other processes the message lists.",
    ),
    fact(
        "oom.other_process_count",
        Unit::Count,
        "How many other processes the message lists on the device.",
    ),
    fact(
        "oom.largest_other_process_bytes",
        Unit::Bytes,
        "Memory of the largest other process on the device.",
    ),
    fact(
        "oom.largest_other_process_pid",
        Unit::Count,
        "PID of the largest other process on the device.",
    ),
    fact(
        "oom.other_process_is_own_worker",
        Unit::Flag,
        "The largest other process on the device is a worker of this same job: the launcher (torchrun, DeepSpeed) named its pid. Two ranks share one GPU.",
    ),
    fact(
        "oom.shortfall_bytes",
        Unit::Bytes,
        "How much more the failing request needed than the device had free: requested minus free (the whole request when free is not known), never below zero.",
    ),
    fact(
        "oom.device_used_bytes",
        Unit::Bytes,
        "Device memory in use at the failure: total minus free.",
    ),
    fact(
        "oom.unaccounted_bytes",
        Unit::Bytes,
        "Device memory in use but not held by this process's allocator: total - free - reserved (other processes, CUDA context, NCCL, cuBLAS).",
    ),
    fact(
        "oom.non_torch_self_bytes",
        Unit::Bytes,
        "Memory this process holds outside the PyTorch allocator: self_used - reserved.",
    ),
    fact(
        "oom.mps_other_bytes",
        Unit::Bytes,
        "MPS: other (non-allocator) Metal allocations.",
    ),
    fact(
        "host.requested_bytes",
        Unit::Bytes,
        "Bytes a host (CPU) allocation asked for when it failed.",
    ),
    fact(
        "torch.stats.allocated_bytes",
        Unit::Bytes,
        "Live tensors' memory as the allocator's statistics print it: `torch.cuda.memory_summary()`'s `Allocated memory` (current), `memory_stats()['allocated_bytes.all.current']`.",
    ),
    fact(
        "torch.stats.reserved_bytes",
        Unit::Bytes,
        "Memory the caching allocator holds from the device, from its statistics: the summary's `GPU reserved memory` (current), `reserved_bytes.all.current`.",
    ),
    fact(
        "torch.stats.inactive_split_bytes",
        Unit::Bytes,
        "Free memory inside segments that also hold live tensors, which the allocator can neither give back nor hand to a request larger than its pieces: the summary's `Non-releasable memory` (current), `inactive_split_bytes.all.current`.",
    ),
    fact(
        "torch.stats.segments",
        Unit::Count,
        "Segments (cudaMalloc'd ranges) the allocator holds: the summary's `GPU reserved segments` (current), `segment.all.current`. With expandable segments on, one grows per stream instead.",
    ),
    fact(
        "torch.stats.alloc_retries",
        Unit::Count,
        "Times a cudaMalloc failed and the allocator freed its cache to retry: the summary's `cudaMalloc retries`, `num_alloc_retries`.",
    ),
    fact(
        "torch.alloc_conf",
        Unit::Text,
        "PYTORCH_CUDA_ALLOC_CONF (or the HIP/generic spelling) as set by the user in the log.",
    ),
    fact(
        "torch.expandable_segments",
        Unit::Flag,
        "Whether expandable_segments is on, from the user's allocator configuration.",
    ),
    fact(
        "torch.expandable_segments_unused",
        Unit::Flag,
        "expandable_segments is set in the log, but the allocator's statistics show it was not in effect: hundreds of segments (`torch.stats.segments`), where expandable segments keep one growing segment per stream.",
    ),
    fact(
        "torch.max_split_size_mb",
        Unit::Count,
        "max_split_size_mb from the user's allocator configuration.",
    ),
    fact(
        "torch.garbage_collection_threshold",
        Unit::Ratio,
        "garbage_collection_threshold from the user's allocator configuration.",
    ),
    fact(
        "torch.async_allocator",
        Unit::Flag,
        "Whether backend:cudaMallocAsync is in use.",
    ),
    fact(
        "torch.memory_fraction",
        Unit::Ratio,
        "The per-process memory fraction the log shows being set.",
    ),
    fact(
        "torch.version",
        Unit::Text,
        "PyTorch version, from a log line or inferred from the OOM wording (e.g. '>=2.4', '2.1', '<=2.0').",
    ),
    fact(
        "torch.has_expandable_segments",
        Unit::Flag,
        "Whether this PyTorch has expandable_segments (2.1+), judged from its version or OOM wording.",
    ),
];
