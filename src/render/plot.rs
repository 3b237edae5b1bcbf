//! What the HTML report draws, as plain data: memory over time, a snapshot's segment map,
//! live memory by category and the top allocation sites.
//!
//! These are part of the diagnosis ([`crate::diagnosis::report::Diagnosis::series`] and
//! [`crate::diagnosis::report::Diagnosis::snapshots`]) so every output format sees the same numbers,
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
    /// The PyTorch versions that write this snapshot's layout (e.g. `2.8`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub generation: String,
    /// The moment the numbers describe: `oom`, `peak` or `final`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub moment: String,
    /// Whether the trace was replayed backwards to reach that moment (a snapshot dumped
    /// after the exception unwound).
    #[serde(default)]
    pub replayed: bool,
    /// Bytes in live tensors at that moment.
    #[serde(default)]
    pub live_bytes: u64,
    /// The most live memory the trace shows at any point.
    #[serde(default)]
    pub peak_live_bytes: u64,
    /// Free memory inside segments that also hold live blocks (the allocator cannot release it).
    #[serde(default)]
    pub fragmented_free_bytes: u64,
    /// Memory in wholly free segments at dump time (cache `empty_cache()` would release).
    #[serde(default)]
    pub releasable_cache_bytes: u64,
    /// Segments left out of `segments` to keep the plot bounded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted_segments: u64,
    /// Growth across iterations found in the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leak: Option<LeakPlot>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Growth across iterations in a snapshot's trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LeakPlot {
    pub steps: u64,
    pub slope_bytes_per_step: f64,
    pub growth_bytes: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
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

impl SnapshotPlot {
    /// One plot per device of an analysed snapshot.
    pub fn from_analysis(a: &crate::ingest::snapshot::SnapshotAnalysis) -> Vec<SnapshotPlot> {
        use crate::ingest::snapshot::schema::BlockState as S;
        a.devices()
            .iter()
            .map(|d| SnapshotPlot {
                input: a.input.clone(),
                device: Some(d.device),
                total_bytes: None,
                segments: d
                    .segment_map
                    .segments
                    .iter()
                    .map(|seg| Segment {
                        address: seg.address,
                        size: seg.size,
                        pool: Some(if seg.pool_id != (0, 0) {
                            format!("private pool {:?}", seg.pool_id)
                        } else if seg.is_expandable {
                            "expandable".to_string()
                        } else {
                            "default".to_string()
                        }),
                        blocks: seg
                            .blocks
                            .iter()
                            .map(|b| Block {
                                offset: b.offset,
                                size: b.size,
                                state: match b.state {
                                    S::ActiveAllocated => BlockState::Allocated,
                                    S::ActivePendingFree => BlockState::PendingFree,
                                    S::Inactive | S::Unknown => BlockState::Free,
                                },
                            })
                            .collect(),
                    })
                    .collect(),
                largest_free_block: Some(d.state.largest_free_block_bytes),
                request: d.oom.as_ref().map(|o| o.requested_bytes),
                categories: d
                    .attribution
                    .categories
                    .iter()
                    .filter(|c| c.bytes > 0)
                    .map(|c| CategoryBytes {
                        name: c.category.name().to_string(),
                        bytes: c.bytes,
                    })
                    .collect(),
                top_sites: d
                    .attribution
                    .top_sites
                    .iter()
                    .take(10)
                    .map(|s| SiteBytes {
                        site: s.site.label.clone(),
                        bytes: s.bytes,
                        count: Some(s.blocks),
                    })
                    .collect(),
                generation: a.generation.label.clone(),
                moment: format!("{:?}", d.state.moment).to_lowercase(),
                replayed: d.state.replayed,
                live_bytes: d.state.live_bytes,
                peak_live_bytes: d.timeline.peak_live_bytes,
                fragmented_free_bytes: d.state.fragmented_free_bytes,
                releasable_cache_bytes: d.segments.releasable_cache_bytes,
                omitted_segments: d.segment_map.omitted_segments,
                leak: d.leak.as_ref().map(|l| LeakPlot {
                    steps: l.steps,
                    slope_bytes_per_step: l.slope_bytes_per_step,
                    growth_bytes: l.growth_bytes,
                    site: l.sites.first().map(|s| s.site.label.clone()),
                }),
            })
            .collect()
    }
}
