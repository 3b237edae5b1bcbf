//! Facts the `ingest::log::engines::deepspeed` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from DeepSpeed / Accelerate logs.
pub const FACTS: &[FactDef] = &[
    fact(
        "deepspeed.ma_bytes",
        Unit::Bytes,
        "Allocated device memory at the last see_memory_usage checkpoint (MA).",
    ),
    fact(
        "deepspeed.max_ma_bytes",
        Unit::Bytes,
        "Peak allocated device memory since the previous checkpoint (Max_MA).",
    ),
    fact(
        "deepspeed.ca_bytes",
        Unit::Bytes,
        "Reserved (cached) device memory at the checkpoint (CA).",
    ),
    fact(
        "deepspeed.checkpoint",
        Unit::Text,
        "The label of the last see_memory_usage checkpoint (`After initializing ZeRO optimizer`, `Stage 3 initialize beginning`).",
    ),
    fact(
        "deepspeed.cpu_used_bytes",
        Unit::Bytes,
        "Host memory in use at the checkpoint (`CPU Virtual Memory: used = ...`).",
    ),
    fact(
        "deepspeed.cpu_percent",
        Unit::Ratio,
        "Host memory use (0..1) at the checkpoint.",
    ),
    fact(
        "deepspeed.offload_optimizer",
        Unit::Text,
        "Where ZeRO keeps optimizer states: none, cpu, nvme.",
    ),
    fact(
        "deepspeed.offload_param",
        Unit::Text,
        "Where ZeRO-3 keeps parameters: none, cpu, nvme.",
    ),
    fact(
        "deepspeed.est_gpu_bytes",
        Unit::Bytes,
        "ZeRO estimator: per-GPU memory without offload (zero_init=1 row when both are printed).",
    ),
    fact(
        "deepspeed.est_gpu_offload_optimizer_bytes",
        Unit::Bytes,
        "ZeRO estimator: per-GPU memory with the optimizer offloaded to CPU.",
    ),
    fact(
        "deepspeed.est_gpu_offload_all_bytes",
        Unit::Bytes,
        "ZeRO estimator: per-GPU memory with parameters and optimizer offloaded to CPU.",
    ),
    fact(
        "deepspeed.est_cpu_offload_all_bytes",
        Unit::Bytes,
        "ZeRO estimator: per-CPU (host) memory with parameters and optimizer offloaded.",
    ),
    fact(
        "deepspeed.est_cpu_offload_optimizer_bytes",
        Unit::Bytes,
        "ZeRO estimator: per-CPU (host) memory with the optimizer offloaded.",
    ),
    fact(
        "deepspeed.cpu_optimizer",
        Unit::Flag,
        "DeepSpeedCPUAdam was built or created: the optimizer states live in host memory \
         (ZeRO-Offload), whatever the config dump says or leaves out.",
    ),
    fact(
        "deepspeed.batch_search_exhausted",
        Unit::Flag,
        "Accelerate's find_executable_batch_size gave up: not even batch size 1 fits.",
    ),
];
