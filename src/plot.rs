//! What the HTML report draws, as plain data: memory over time, a snapshot's segment map,
//! live memory by category and the top allocation sites.
//!
//! These are part of the diagnosis ([`crate::report::Diagnosis::series`] and
//! [`crate::report::Diagnosis::snapshots`]) so every output format sees the same numbers,
//! but they are *evidence to look at*, not conclusions: the time-series and snapshot
//! analyses fill them, renderers draw them and never compute a verdict from them. Both lists
//! are empty (and absent from the JSON) when no series or snapshot was read.
//!
//! Sizes are bytes, times are seconds since the series' first sample.

use serde::Serialize;

/// One line of memory over time: one device of one input.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SeriesPlot {
    /// The input the samples came from (series file or log).
    pub input: String,
    /// Device ordinal, when the series is per device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// What the line shows, e.g. `GPU 0 memory.used`.
    pub label: String,
    /// Wall-clock time of `t = 0` as printed by the source (RFC 3339 when known).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// `(t, used_bytes)`: seconds since the first sample and memory in use, in time order.
    pub points: Vec<(f64, u64)>,
    /// The device's capacity, drawn as a ceiling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<u64>,
    /// Moments worth marking: the OOM, restarts, phase changes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<SeriesMark>,
}

/// A marked moment on a series.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SeriesMark {
    /// Seconds since the series' first sample.
    pub t: f64,
    pub label: String,
    pub kind: MarkKind,
}

/// What a mark is; decides how it is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MarkKind {
    /// The out-of-memory failure.
    Oom,
    /// The program (re)started.
    Restart,
    /// Anything else worth a label (a phase change, an eval, a checkpoint).
    Event,
}

/// What a PyTorch memory snapshot showed at (or just before) the failure.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SnapshotPlot {
    /// The snapshot input.
    pub input: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// The device's capacity, when the snapshot or the log says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<u64>,
    /// The allocator's segments in address order, each with its blocks.
    pub segments: Vec<Segment>,
    /// The largest free (inactive) block in any segment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub largest_free_block: Option<u64>,
    /// The size of the allocation that failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<u64>,
    /// Live memory by category (parameters, gradients, optimizer state, activations, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<CategoryBytes>,
    /// The allocation sites holding the most live memory, largest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top_sites: Vec<SiteBytes>,
}

/// One segment (one cudaMalloc'd range) of the caching allocator.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Segment {
    pub address: u64,
    pub size: u64,
    /// `large`, `small`, or a private pool's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Blocks in address order; their sizes add up to the segment's size.
    pub blocks: Vec<Block>,
}

/// One block inside a segment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Block {
    /// Bytes from the segment's start.
    pub offset: u64,
    pub size: u64,
    pub state: BlockState,
}

/// A block's state, as the snapshot names it (`active_allocated`, `active_pending_free`,
/// `inactive`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlockState {
    /// In a live tensor.
    Allocated,
    /// Freed by the program, waiting for a stream to finish with it.
    PendingFree,
    /// Cached by the allocator and free to reuse.
    Free,
}

/// Bytes of one category.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CategoryBytes {
    pub name: String,
    pub bytes: u64,
}

/// Bytes held by one allocation site (a frame such as `model.py:88 forward`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteBytes {
    pub site: String,
    pub bytes: u64,
    /// Live blocks allocated there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
}

impl SnapshotPlot {
    /// Total bytes of the segments (what the allocator had reserved).
    pub fn reserved_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }

    /// Bytes in blocks of one state.
    pub fn bytes_in(&self, state: BlockState) -> u64 {
        self.segments
            .iter()
            .flat_map(|s| s.blocks.iter())
            .filter(|b| b.state == state)
            .map(|b| b.size)
            .sum()
    }

    /// How many free blocks there are.
    pub fn free_blocks(&self) -> usize {
        self.segments
            .iter()
            .flat_map(|s| s.blocks.iter())
            .filter(|b| b.state == BlockState::Free)
            .count()
    }
}
