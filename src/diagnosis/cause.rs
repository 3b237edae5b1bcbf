//! The causes oomdoctor can conclude. Their ids are a public API: they appear in every
//! output format, in `--fail-on`, and in rule files, and never change meaning.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// A root cause of an out-of-memory incident.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    ModelTooLarge,
    BatchMisconfiguration,
    KvCacheOverflow,
    Fragmentation,
    MemoryLeak,
    MemoryContention,
    HostOom,
}

impl Cause {
    pub const ALL: [Cause; 7] = [
        Cause::ModelTooLarge,
        Cause::BatchMisconfiguration,
        Cause::KvCacheOverflow,
        Cause::Fragmentation,
        Cause::MemoryLeak,
        Cause::MemoryContention,
        Cause::HostOom,
    ];

    /// The stable id.
    pub fn id(self) -> &'static str {
        match self {
            Cause::ModelTooLarge => "model-too-large",
            Cause::BatchMisconfiguration => "batch-misconfiguration",
            Cause::KvCacheOverflow => "kv-cache-overflow",
            Cause::Fragmentation => "fragmentation",
            Cause::MemoryLeak => "memory-leak",
            Cause::MemoryContention => "memory-contention",
            Cause::HostOom => "host-oom",
        }
    }

    /// A short human title.
    pub fn title(self) -> &'static str {
        match self {
            Cause::ModelTooLarge => "The model's weights do not fit",
            Cause::BatchMisconfiguration => {
                "Batch, concurrency or activation memory is sized too big"
            }
            Cause::KvCacheOverflow => {
                "The KV cache cannot hold the context or the sequences in flight"
            }
            Cause::Fragmentation => "Free memory exists, but not in one piece",
            Cause::MemoryLeak => "Memory grows steadily until it runs out",
            Cause::MemoryContention => "Something else holds the device's memory",
            Cause::HostOom => "The host ran out of RAM (OOM killer, cgroup, container limit)",
        }
    }

    /// What the cause means and how it usually shows; printed by `oomdoctor explain`.
    pub fn description(self) -> &'static str {
        match self {
            Cause::ModelTooLarge => {
                "The weights alone (or the weights plus fixed overhead such as the CUDA context) need more memory than the device has at this precision. It shows as an OOM while loading the model (from_pretrained, load_state_dict, .to()/.cuda()), or as weights that take nearly the whole budget. Fixes change the model's footprint: a lower precision or quantization, sharding across devices (tensor/pipeline parallel, device_map), offloading, or a smaller model. Shrinking the batch or the context does not help."
            }
            Cause::BatchMisconfiguration => {
                "The weights fit, but the transient memory of a step (activations, the prefill of many tokens, the optimizer's first allocation, warm-up batches) does not. It shows as an OOM on the first step, on a long batch, or in the backward pass, with allocated memory close to the device's capacity and little of it cached. Fixes shrink the step: a smaller batch with gradient accumulation, activation checkpointing, shorter sequences, fewer batched tokens, fewer sequences in flight."
            }
            Cause::KvCacheOverflow => {
                "An inference engine's KV cache cannot hold one sequence of the configured maximum length, or the sequences in flight: the engine refuses to start, preempts requests, or fails while generating. Fixes size the context to the cache: a smaller max model length / context, a quantized KV cache (fp8, q8_0), fewer parallel sequences, or more memory for the cache."
            }
            Cause::Fragmentation => {
                "Enough memory is free inside the process's allocator, but split into pieces smaller than the request. It shows as memory reserved but unallocated that exceeds the failed request, many partially used segments, and odd allocation sizes. Fixes let the allocator grow segments in place (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) or stop splitting large blocks (max_split_size_mb), or make allocation sizes uniform."
            }
            Cause::MemoryLeak => {
                "Memory in use grows step after step at the same place until it runs out: tensors kept alive by a Python reference (a loss accumulated with its graph, a list of outputs, a cache without a bound, hooks). It shows as an OOM after many steps, with steady growth in a memory series or a snapshot. Fixes release the references (loss.item(), detach(), bounded caches); a smaller batch only delays it."
            }
            Cause::MemoryContention => {
                "Another process, or memory outside the framework's allocator, holds the device: a second server, a notebook kernel, a zombie from a previous run, NCCL buffers, or an engine budget (gpu_memory_utilization, mem_fraction_static) that assumes memory that is not free. It shows as device memory in use far above what this process holds. Fixes free or move the other user, or lower this process's budget to what is really free."
            }
            Cause::HostOom => {
                "The host, not the GPU, ran out of memory: the kernel OOM killer, a cgroup or container limit, systemd-oomd, Kubernetes OOMKilled, or a failed host allocation. It shows as a killed process (exit 137, SIGKILL) or a CPU allocator error. Fixes raise the limit or reduce host RAM use (loading with mmap, fewer data-loader workers, less CPU offload, smaller pinned buffers)."
            }
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl FromStr for Cause {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Cause::ALL.into_iter().find(|c| c.id() == s).ok_or_else(|| {
            format!(
                "unknown cause `{s}` (known: {})",
                Cause::ALL
                    .iter()
                    .map(|c| c.id())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }
}
