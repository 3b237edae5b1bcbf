//! Facts the `ingest::log::engines::slurm` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from Slurm's messages and the job's request.
pub const FACTS: &[FactDef] = &[
    fact(
        "slurm.mem_bytes",
        Unit::Bytes,
        "Memory requested per node (`--mem=`).",
    ),
    fact(
        "slurm.mem_per_gpu_bytes",
        Unit::Bytes,
        "Memory requested per GPU (`--mem-per-gpu=`).",
    ),
    fact(
        "slurm.mem_per_cpu_bytes",
        Unit::Bytes,
        "Memory requested per CPU (`--mem-per-cpu=`).",
    ),
    fact(
        "slurm.gpus",
        Unit::Count,
        "GPUs requested per node (`--gres=gpu:N`, `--gpus-per-node=N`).",
    ),
    fact(
        "slurm.cpus",
        Unit::Count,
        "CPUs per task (`--cpus-per-task=`).",
    ),
    fact(
        "slurm.step",
        Unit::Text,
        "The job step that was killed (`StepId=4242.0`, `4242.batch`).",
    ),
];
