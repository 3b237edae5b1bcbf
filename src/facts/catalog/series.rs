//! Facts the `ingest::series` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from memory time series.
pub const FACTS: &[FactDef] = &[
    fact(
        "series.device",
        Unit::Count,
        "Index of the device the series facts describe (nvidia-smi index, DCGM gpu label).",
    ),
    fact(
        "series.device_uuid",
        Unit::Text,
        "UUID of that device, when the series names it.",
    ),
    fact(
        "series.samples",
        Unit::Count,
        "Samples of the device in the analysed window (from load, or the previous crash, to the failure).",
    ),
    fact(
        "series.skipped_rows",
        Unit::Count,
        "Rows of the series inputs that could not be read and were skipped.",
    ),
    fact(
        "series.duration_seconds",
        Unit::Seconds,
        "Length of the analysed window.",
    ),
    fact(
        "series.sample_interval_seconds",
        Unit::Seconds,
        "Median time between samples: the resolution of every time the series gives.",
    ),
    fact(
        "series.time_aligned",
        Unit::Flag,
        "Whether the series was lined up with the failure time given by another input (false: no timestamps, or the failure is outside the series).",
    ),
    fact(
        "series.failure_gap_seconds",
        Unit::Seconds,
        "Time between the failure and the nearest sample before it; large values mean the series says little about the moment itself.",
    ),
    fact(
        "series.total_bytes",
        Unit::Bytes,
        "Device capacity from the series (memory.total, DCGM FB_TOTAL, or used + free).",
    ),
    fact(
        "series.baseline_bytes",
        Unit::Bytes,
        "Memory in use after the initial load ramp: the floor the run settled at.",
    ),
    fact(
        "series.baseline_ratio",
        Unit::Ratio,
        "Baseline as a fraction of the device's total.",
    ),
    fact(
        "series.peak_bytes",
        Unit::Bytes,
        "Highest memory in use in the window.",
    ),
    fact(
        "series.used_at_failure_bytes",
        Unit::Bytes,
        "Memory in use at the last sample before the failure.",
    ),
    fact(
        "series.free_at_failure_bytes",
        Unit::Bytes,
        "Free memory at the last sample before the failure (total - used).",
    ),
    fact(
        "series.seconds_since_load",
        Unit::Seconds,
        "Time from the end of the load ramp (or the start of the window) to the failure: at load, on the first batch, or after hours.",
    ),
    fact(
        "series.failed_during_load",
        Unit::Flag,
        "The device filled while memory was still climbing from idle, with no pause at a loaded level: the load itself did not fit.",
    ),
    fact(
        "series.growth_bytes_per_second",
        Unit::BytesPerSecond,
        "Robust (Theil-Sen) slope of the memory floor after load; spikes do not move it.",
    ),
    fact(
        "series.growth_r2",
        Unit::Ratio,
        "How well a straight line explains the floor after load (1 = a perfectly steady climb).",
    ),
    fact(
        "series.growth_bytes",
        Unit::Bytes,
        "Rise of the fitted floor over the window after load.",
    ),
    fact(
        "series.steady_growth",
        Unit::Flag,
        "Memory climbed steadily after load (a leak): large rise, good fit, every quarter higher than the last.",
    ),
    fact(
        "series.time_to_full_seconds",
        Unit::Seconds,
        "With steady growth: time from the end of the window until the fitted climb reaches the device total.",
    ),
    fact(
        "series.spike",
        Unit::Flag,
        "The failure came during a short excursion above the running level (one request, one batch).",
    ),
    fact(
        "series.spike_bytes",
        Unit::Bytes,
        "Height of that excursion above the level before it.",
    ),
    fact(
        "series.spike_seconds",
        Unit::Seconds,
        "Duration of that excursion up to its peak or the failure.",
    ),
    fact(
        "series.spikes",
        Unit::Count,
        "Short excursions in the window (including one at the failure).",
    ),
    fact(
        "series.largest_spike_bytes",
        Unit::Bytes,
        "Height of the largest excursion in the window.",
    ),
    fact(
        "series.spike_kv_usage",
        Unit::Ratio,
        "Engine KV cache usage at the peak of the failure's excursion (or the largest one).",
    ),
    fact(
        "series.spike_requests_running",
        Unit::Count,
        "Requests running at that peak.",
    ),
    fact(
        "series.kv_correlation",
        Unit::Ratio,
        "Correlation (-1..1) of device memory with KV cache usage over the window.",
    ),
    fact(
        "series.flat_high",
        Unit::Flag,
        "The device was near full (>= 80%) and flat from load on, as preallocating engines (vLLM, SGLang, JAX) make it: full by design, not a leak.",
    ),
    fact(
        "series.churn",
        Unit::Flag,
        "Memory oscillated repeatedly between a stable floor and a stable top (training steps, busy serving); not growth.",
    ),
    fact(
        "series.churn_low_bytes",
        Unit::Bytes,
        "Low level of the oscillation (10th percentile).",
    ),
    fact(
        "series.churn_high_bytes",
        Unit::Bytes,
        "High level of the oscillation (90th percentile).",
    ),
    fact(
        "series.device_filled",
        Unit::Flag,
        "Used memory reached >= 95% of the device total shortly before the failure.",
    ),
    fact(
        "series.crash_drop",
        Unit::Flag,
        "Used memory fell steeply after the failure (the process died and its memory was released).",
    ),
    fact(
        "series.drop_bytes",
        Unit::Bytes,
        "Memory released in that drop.",
    ),
    fact(
        "series.failure_time",
        Unit::Text,
        "When the failure happened by the series (the last sample before the drop; RFC 3339 with `Z` when the series gave a zone, without a zone when it did not), or the time given by another input.",
    ),
    fact(
        "series.own_process_pid",
        Unit::Count,
        "PID of the process taken to be the failing job (given, or the largest present from the start).",
    ),
    fact(
        "series.own_process_name",
        Unit::Text,
        "Name of that process (nvidia-smi process_name).",
    ),
    fact(
        "series.own_process_bytes",
        Unit::Bytes,
        "Memory of that process at the failure.",
    ),
    fact(
        "series.own_process_growth_bytes",
        Unit::Bytes,
        "Growth of that process's memory over the window.",
    ),
    fact(
        "series.own_process_exited",
        Unit::Flag,
        "That process disappears from the per-process series at the failure.",
    ),
    fact(
        "series.other_process_pid",
        Unit::Count,
        "PID of the largest other process on the device at the failure.",
    ),
    fact(
        "series.other_process_name",
        Unit::Text,
        "Name of that process.",
    ),
    fact(
        "series.other_process_bytes",
        Unit::Bytes,
        "Memory of that process at the failure.",
    ),
    fact(
        "series.other_process_growth_bytes",
        Unit::Bytes,
        "How much that process grew during the window (all of it if it appeared during the window).",
    ),
    fact(
        "series.other_process_appeared",
        Unit::Flag,
        "That process appeared on the device after the failing job started.",
    ),
    fact(
        "series.other_processes_bytes",
        Unit::Bytes,
        "Memory of all other processes on the device at the failure.",
    ),
    fact(
        "series.process_count",
        Unit::Count,
        "Processes on the device at the failure, by the per-process series.",
    ),
    fact(
        "series.contention",
        Unit::Flag,
        "Another process appeared or grew by a significant amount while the failing job's own memory stayed flat.",
    ),
    fact(
        "series.unattributed_bytes",
        Unit::Bytes,
        "Device memory in use but held by no process the per-process series lists (processes in other containers).",
    ),
    fact(
        "series.unattributed_growth_bytes",
        Unit::Bytes,
        "Growth of that unattributed memory over the window: a neighbour the process list cannot see.",
    ),
    fact(
        "series.kv_usage_at_failure",
        Unit::Ratio,
        "Engine KV cache usage (0..1) at the failure.",
    ),
    fact(
        "series.kv_pinned",
        Unit::Flag,
        "KV cache usage stayed >= 95% for most of the time before the failure.",
    ),
    fact(
        "series.kv_pressure",
        Unit::Flag,
        "KV cache pinned full while requests queued or were preempted: the KV pool is too small for the load.",
    ),
    fact(
        "series.requests_running_at_failure",
        Unit::Count,
        "Requests the engine was running at the failure.",
    ),
    fact(
        "series.requests_waiting_at_failure",
        Unit::Count,
        "Requests waiting in the engine's queue at the failure.",
    ),
    fact(
        "series.requests_waiting_peak",
        Unit::Count,
        "Most requests waiting at any time in the window.",
    ),
    fact(
        "series.preemptions",
        Unit::Count,
        "Preemptions (vLLM) or retractions (SGLang) counted during the window.",
    ),
];
