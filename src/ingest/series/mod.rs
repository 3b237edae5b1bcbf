//! Memory over time: nvidia-smi, DCGM/Prometheus and engine metrics, and plain CSV/JSONL.
//!
//! The timing of an OOM is half its diagnosis: at load the job is too large, on the first
//! batch the batch is, only on long requests the KV cache is, after hours of slow climb it
//! is a leak, when a neighbour's memory rises it is contention. Operators already record
//! these series; this module reads them for a cause.
//!
//! ```text
//! bytes ──► sniff (from content) ──► read (streaming parser per format) ──► SeriesSet
//!                                                                    │ merge (several inputs)
//!                                                                    ▼
//!              analyze ──► SeriesAnalysis: runs, patterns, series-only failures
//!                             │ facts_for(device, failure time) ──► series.* facts
//!                             │ sparkline / chart ──► terminal drawing with the OOM marked
//!                             └ Serialize ──► downsampled points for HTML plots
//! ```
//!
//! Formats: nvidia-smi `--query-gpu` CSV (with or without header and units, several GPUs
//! interleaved), `--query-compute-apps` CSV (per process), Prometheus text exposition (one
//! or many scrapes, with or without timestamps: DCGM exporter `DCGM_FI_DEV_FB_*`, NVIDIA
//! exporters' `*_memory_used_bytes`, vLLM and SGLang engine metrics), and plain CSV or JSON
//! Lines with a timestamp and a used column. See `ENGINE-MESSAGES.md` §11, §2.7, §6.
//!
//! Every fact carries provenance to the sample line it came from (or the time range of a
//! fitted trend), and the human explanation can say which input showed what.

mod analysis;
mod build;
mod chart;
mod columns;
mod error;
mod facts;
mod model;
mod plain;
mod plots;
mod prom;
mod smi;
mod sniff;
mod stats;
mod time;

use std::io::BufRead;

use serde::Serialize;

use crate::facts::catalog::{FactDef, fact};
use crate::facts::evidence::{InputName, Unit};

pub use analysis::{
    DeviceAnalysis, EngineSummary, Growth, MemoryDrop, Pattern, Points, ProcessSummary, Run,
    SeriesAnalysis, SeriesFailure, Spike, Window, analyze,
};
pub use chart::{plot_chart, plot_sparkline, plot_sparkline_scale, plot_time};
pub use error::SeriesError;
pub use model::{
    Clock, DeviceSeries, EngineSeries, InputSummary, LineTexts, ProcessSeries, SeriesSet, Track,
};
pub use plots::{OomMark, SCRAPE_NOTE};
pub use sniff::sniff;
pub use time::{format_wall, parse_log_time, read_wall};

/// Limits on what is read whole.
pub mod limits {
    /// Samples per input (device, process and engine samples together): 100 million is
    /// about 2 GB of samples, far more than a week of 1-second nvidia-smi logging on 8 GPUs.
    pub const MAX_SAMPLES: usize = 100_000_000;
    /// Longest line read; longer lines are skipped (a series line is never this long).
    pub const MAX_LINE: usize = 1 << 20;
}

/// The series formats oomdoctor reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SeriesFormat {
    /// `nvidia-smi --query-gpu=… --format=csv[,noheader][,nounits]`.
    SmiGpu,
    /// `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv`.
    SmiApps,
    /// Prometheus / OpenMetrics text exposition (DCGM exporter, vLLM, SGLang, cAdvisor).
    Prometheus,
    /// CSV with a header naming a timestamp and a used-memory column.
    PlainCsv,
    /// JSON Lines, one object per sample with a timestamp and used memory.
    JsonLines,
}

impl SeriesFormat {
    pub fn name(self) -> &'static str {
        match self {
            SeriesFormat::SmiGpu => "nvidia-smi --query-gpu CSV",
            SeriesFormat::SmiApps => "nvidia-smi --query-compute-apps CSV",
            SeriesFormat::Prometheus => "Prometheus text",
            SeriesFormat::PlainCsv => "CSV",
            SeriesFormat::JsonLines => "JSON Lines",
        }
    }
}

impl std::fmt::Display for SeriesFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Reads one series input, streaming. Bad rows are skipped and counted
/// ([`InputSummary::skipped`]); a mostly unreadable input is an error naming the first bad
/// line.
pub fn read(
    reader: impl BufRead,
    input: &InputName,
    format: SeriesFormat,
) -> Result<SeriesSet, SeriesError> {
    match format {
        SeriesFormat::SmiGpu => smi::read_gpu(reader, input),
        SeriesFormat::SmiApps => smi::read_apps(reader, input),
        SeriesFormat::Prometheus => prom::read(reader, input),
        SeriesFormat::PlainCsv => plain::read_csv(reader, input),
        SeriesFormat::JsonLines => plain::read_jsonl(reader, input),
    }
}

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
