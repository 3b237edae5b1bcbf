//! Facts the `ingest::log::engines::smi_table` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from a pasted process table.
pub const FACTS: &[FactDef] = &[
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
