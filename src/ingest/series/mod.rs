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

use crate::facts::evidence::InputName;

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
