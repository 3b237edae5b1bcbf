//! Facts the `ingest::log::engines::smi_table` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from a pasted process table.
pub const FACTS: &[FactDef] = &[
    fact(
        "smi.apps_used_bytes",
        Unit::Bytes,
        "used_memory of the one process an `nvidia-smi --query-compute-apps=...` pasted into the log listed.",
    ),
    fact(
        "smi.query_used_bytes",
        Unit::Bytes,
        "memory.used of the one GPU an `nvidia-smi --query-gpu=...` pasted into the log listed, or the one device row of a pasted `nvidia-smi` table (its Memory-Usage cell).",
    ),
    fact(
        "smi.query_total_bytes",
        Unit::Bytes,
        "memory.total of the GPU an `nvidia-smi --query-gpu=...` pasted into the log listed (of all its GPUs where they are one size), or the one device row of a pasted `nvidia-smi` table.",
    ),
    fact(
        "smi.query_gpus",
        Unit::Count,
        "How many GPUs the rows of a pasted `nvidia-smi --query-gpu=...` or the device rows of a pasted `nvidia-smi` table listed.",
    ),
    fact(
        "smi.used_before_start_bytes",
        Unit::Bytes,
        "Device memory in use before the failing program started: an `nvidia-smi` query or table printed before its start-up lines (another process's, since this one did not exist yet).",
    ),
    fact(
        "smi.busiest_gpu",
        Unit::Count,
        "The GPU with the most processes in a pasted `nvidia-smi` process table.",
    ),
    fact(
        "smi.busiest_gpu_processes",
        Unit::Count,
        "How many processes the table lists on that GPU.",
    ),
    fact(
        "smi.busiest_gpu_bytes",
        Unit::Bytes,
        "The memory those processes held together.",
    ),
    fact(
        "smi.busiest_gpu_second_bytes",
        Unit::Bytes,
        "What the processes on that GPU held besides the largest one: at least this much was another process's, whichever one was the failing job.",
    ),
];
