//! Per-device analysis: allocator state, replay to the OOM, timeline, attribution.
//!
//! This module owns the arithmetic of `snapshot-format.md` §4.2 and the replay of §4.8:
//!
//! - **Segment statistics** from the final `segments`: reserved, allocated, active,
//!   inactive, requested, pending-free bytes; the largest free block; *releasable cache*
//!   (segments with no active block: what `empty_cache()` frees, and what the allocator
//!   frees itself before raising OOM) kept apart from *fragmentation* (inactive blocks in
//!   segments that also hold active ones: not releasable).
//! - **Replay**: the final state is the state at dump time. If the device trace has an
//!   `oom` entry, the state at that moment is rebuilt by walking the trace backwards from
//!   the final state, undoing each event (`alloc` removes the block, `free_completed`
//!   puts it back, segment events shrink or grow the reserved ranges), as PyTorch's viewer
//!   does. Traces that begin mid-history or hold inconsistent events (an `alloc` of an
//!   address that is not live, a free of one that already is) are tolerated: such events
//!   are counted and skipped.
//! - **Timeline**: the same backward walk over the whole trace gives live and reserved bytes
//!   after every event, downsampled (peak-preserving) to at most [`TIMELINE_POINTS`].
//! - **Attribution** of live bytes at the OOM (or at the peak when there is none) to
//!   categories and allocation sites ([`super::attribution`]), and a bounded segment map at
//!   that moment for the HTML report.
//!
//! Sizes: blocks in the final state have their allocator size. Blocks that the replay puts
//! back only have the trace's requested size, rounded up to the allocator's 512-byte
//! granularity (`kMinBlockSize`); for blocks the allocator did not split this slightly
//! under-counts, which is why replayed numbers are estimates.

use std::collections::BTreeMap;

use serde::Serialize;

use super::attribution::{Category, Classifier, Site};
use super::fxhash::{FxHashMap, new_map, new_spread_map};
use super::leak::{self, Leak};
use super::schema::{Action, Block, BlockState, FrameListId, Segment, Snapshot, TraceEntry};

/// At most this many timeline points per device.
pub const TIMELINE_POINTS: usize = 2000;
/// At most this many segments in a segment map.
pub const MAP_MAX_SEGMENTS: usize = 512;
/// At most this many blocks in a segment map, all segments together.
pub const MAP_MAX_BLOCKS: usize = 20_000;
/// At most this many blocks of one segment in a segment map.
pub const MAP_MAX_BLOCKS_PER_SEGMENT: usize = 512;
/// How many allocation sites to name.
pub const TOP_SITES: usize = 10;

const NONE: u32 = u32::MAX;
const MIN_BLOCK: u64 = 512;

fn round_block(size: u64) -> u64 {
    size.div_ceil(MIN_BLOCK).saturating_mul(MIN_BLOCK)
}

/// Allocator state from the final `segments` of one device.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SegmentStats {
    pub segment_count: u64,
    pub block_count: u64,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    /// Allocated plus pending-free.
    pub active_bytes: u64,
    pub inactive_bytes: u64,
    /// Requested (unrounded) bytes of allocated blocks.
    pub requested_bytes: u64,
    /// Lost to rounding: allocated minus requested.
    pub rounding_loss_bytes: u64,
    /// Freed by the user but held for other streams (`record_stream`).
    pub pending_free_bytes: u64,
    pub free_block_count: u64,
    /// The most inactive blocks in one segment.
    pub max_free_blocks_per_segment: u64,
    /// Segments that hold at least one inactive block.
    pub segments_with_free_blocks: u64,
    pub largest_free_block_bytes: u64,
    /// Total size of segments with no active block, plus the free bytes of expandable
    /// segments (whose pages the allocator unmaps): releasable cache.
    pub releasable_cache_bytes: u64,
    pub releasable_segments: u64,
    /// Inactive bytes in (non-expandable) segments that also hold active blocks:
    /// fragmentation.
    pub fragmented_free_bytes: u64,
    pub fragmented_segments: u64,
    pub expandable_segment_count: u64,
    pub expandable_bytes: u64,
    /// Reserved by private pools (`segment_pool_id != (0, 0)`: CUDA graphs, MemPool).
    pub private_pool_bytes: u64,
    pub private_pool_allocated_bytes: u64,
    pub private_pools: u64,
    pub small_pool_bytes: u64,
    pub large_pool_bytes: u64,
    /// Blocks whose sizes do not add up to their segment's `total_size` (should be 0).
    pub inconsistent_segments: u64,
}

/// Counts of a device's trace.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TraceStats {
    pub entries: u64,
    pub alloc: u64,
    pub free_requested: u64,
    pub free_completed: u64,
    pub segment_alloc: u64,
    pub segment_free: u64,
    pub segment_map: u64,
    pub segment_unmap: u64,
    pub oom: u64,
    pub snapshot: u64,
    pub other: u64,
    pub first_time_us: Option<i64>,
    pub last_time_us: Option<i64>,
    /// Frees of addresses never allocated in the trace: the ring buffer dropped older
    /// events, so the trace starts mid-history.
    pub frees_without_alloc: u64,
    pub starts_mid_history: bool,
    /// Events the backward replay could not apply (alloc of an address not live, free of
    /// one already live, segment bytes going negative).
    pub replay_inconsistencies: u64,
}

/// The `oom` entry.
#[derive(Clone, Debug, Serialize)]
pub struct OomEvent {
    /// Index in `device_traces[device]`.
    pub trace_index: u64,
    /// The allocator's rounded request size.
    pub requested_bytes: u64,
    /// Device-wide free bytes (cudaMemGetInfo) at the failure.
    pub device_free_bytes: Option<u64>,
    pub stream: u64,
    pub time_us: Option<i64>,
    /// Where the failing allocation came from.
    pub site: Option<Site>,
    pub category: Option<Category>,
    /// Events recorded after the OOM (the exception unwinding, usually).
    pub entries_after: u64,
    /// How many `oom` entries the trace has (the last is analysed).
    pub oom_count: u64,
}

/// Where the attribution was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Moment {
    /// At the `oom` entry.
    Oom,
    /// At the highest live-bytes point of the trace (no OOM).
    Peak,
    /// At dump time (no trace, or the final state is the peak).
    Final,
}

/// The allocator state at the analysed moment.
#[derive(Clone, Debug, Serialize)]
pub struct StateAt {
    pub moment: Moment,
    /// Index of the entry the state is *after*, when it is inside the trace.
    pub trace_index: Option<u64>,
    pub time_us: Option<i64>,
    /// Whether events after that moment had to be undone to get here.
    pub replayed: bool,
    pub replayed_entries: u64,
    pub live_bytes: u64,
    pub live_blocks: u64,
    /// Reserved (mapped) bytes at that moment.
    pub reserved_bytes: u64,
    /// Reserved minus live.
    pub free_bytes: u64,
    pub largest_free_block_bytes: u64,
    /// Free bytes in non-expandable segments that also hold live blocks.
    pub fragmented_free_bytes: u64,
    /// Free bytes in segments with no live block, and in expandable segments.
    pub releasable_bytes: u64,
    pub private_pool_allocated_bytes: u64,
    /// Live blocks that fall outside every reserved range (inconsistent trace).
    pub unplaced_blocks: u64,
}

/// Bytes of one category.
#[derive(Clone, Debug, Serialize)]
pub struct CategoryBytes {
    pub category: Category,
    pub bytes: u64,
    pub blocks: u64,
}

/// Bytes of one allocation site.
#[derive(Clone, Debug, Serialize)]
pub struct SiteBytes {
    pub site: Site,
    pub bytes: u64,
    pub blocks: u64,
    pub category: Option<Category>,
}

/// What the live memory at the analysed moment is for.
#[derive(Clone, Debug, Serialize)]
pub struct Attribution {
    pub moment: Moment,
    pub total_bytes: u64,
    /// Every category, in [`Category::ALL`] order.
    pub categories: Vec<CategoryBytes>,
    /// Largest allocation sites by bytes.
    pub top_sites: Vec<SiteBytes>,
}

impl Attribution {
    pub fn bytes(&self, c: Category) -> u64 {
        self.categories
            .iter()
            .find(|x| x.category == c)
            .map_or(0, |x| x.bytes)
    }

    /// The category with the most bytes, if any bytes.
    pub fn dominant(&self) -> Option<Category> {
        self.categories
            .iter()
            .filter(|c| c.bytes > 0)
            .max_by_key(|c| c.bytes)
            .map(|c| c.category)
    }
}

/// One timeline point: the state after entry `index`.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct TimelinePoint {
    /// Entry index; -1 is the state before the first entry.
    pub index: i64,
    pub time_us: Option<i64>,
    pub live_bytes: u64,
    pub reserved_bytes: u64,
}

/// Live and reserved bytes over the trace, for plotting.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timeline {
    /// At most [`TIMELINE_POINTS`]; each is the highest-live point of its stretch.
    pub points: Vec<TimelinePoint>,
    pub peak_live_bytes: u64,
    /// Entry index of the peak; -1 for the state before the first entry.
    pub peak_index: i64,
    pub peak_time_us: Option<i64>,
    pub peak_reserved_bytes: u64,
    pub start_live_bytes: u64,
    pub end_live_bytes: u64,
}

/// One block (or gap) of the segment map.
#[derive(Clone, Debug, Serialize)]
pub struct MapBlock {
    pub offset: u64,
    pub size: u64,
    pub state: BlockState,
}

/// One segment of the segment map.
#[derive(Clone, Debug, Serialize)]
pub struct MapSegment {
    pub address: u64,
    pub size: u64,
    pub is_expandable: bool,
    pub pool_id: (i64, i64),
    pub stream: u64,
    pub live_bytes: u64,
    pub blocks: Vec<MapBlock>,
    /// Blocks left out to keep the map bounded, and their bytes.
    pub omitted_blocks: u64,
    pub omitted_bytes: u64,
}

/// The segments at the analysed moment, with their blocks' states. Bounded in size.
#[derive(Clone, Debug, Serialize)]
pub struct SegmentMap {
    pub moment: Moment,
    pub segments: Vec<MapSegment>,
    pub omitted_segments: u64,
}

/// Everything known about one device.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceAnalysis {
    pub device: u32,
    pub segments: SegmentStats,
    pub trace: TraceStats,
    pub oom: Option<OomEvent>,
    pub state: StateAt,
    pub attribution: Attribution,
    pub timeline: Timeline,
    pub segment_map: SegmentMap,
    pub leak: Option<Leak>,
}

impl DeviceAnalysis {
    /// A rough measure of how much happened on this device, to pick the busiest one.
    pub fn activity(&self) -> u64 {
        self.segments
            .reserved_bytes
            .max(self.timeline.peak_live_bytes)
            .saturating_add(self.trace.entries)
    }
}

/// A block live at some moment and where it came from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LiveBlock {
    pub size: u64,
    /// Index into `Snapshot::blocks` (final state) or NONE.
    pub final_block: u32,
    /// Index of the `free_completed` that the replay undid, or NONE.
    pub freed_at: u32,
}

/// A reserved address range.
#[derive(Clone, Copy, Debug)]
struct RangeAttrs {
    end: u64,
    is_expandable: bool,
    pool_id: (i64, i64),
    stream: u64,
}

/// Walks a device trace backwards from the final state.
pub(crate) struct Replayer {
    pub live: FxHashMap<u64, LiveBlock>,
    pub live_bytes: u64,
    pub reserved_bytes: u64,
    pub inconsistencies: u64,
    /// Reserved ranges by start address.
    ranges: BTreeMap<u64, RangeAttrs>,
}

impl Replayer {
    /// `capacity`: how many live blocks to make room for (saves rehashing a big map). The
    /// addresses are hashed with [`new_spread_map`], which keeps a big replay of aligned
    /// addresses linear: the live blocks are iterated only in address order (see
    /// `state_at`), so the hash's order does not reach the output.
    fn new(snap: &Snapshot, segs: &[&Segment], capacity: usize) -> Replayer {
        let mut live = new_spread_map();
        live.reserve(capacity);
        let mut r = Replayer {
            live,
            live_bytes: 0,
            reserved_bytes: 0,
            inconsistencies: 0,
            ranges: BTreeMap::new(),
        };
        for seg in segs {
            r.reserved_bytes = r.reserved_bytes.saturating_add(seg.total_size);
            r.ranges.insert(
                seg.address,
                RangeAttrs {
                    end: seg.address.saturating_add(seg.total_size),
                    is_expandable: seg.is_expandable,
                    pool_id: seg.pool_id,
                    stream: seg.stream,
                },
            );
            for (bi, b) in snap.blocks_of(seg).iter().enumerate() {
                if b.state.is_active() {
                    let idx = seg.blocks.start + bi as u32;
                    r.live.insert(
                        b.address,
                        LiveBlock {
                            size: b.size,
                            final_block: idx,
                            freed_at: NONE,
                        },
                    );
                    r.live_bytes = r.live_bytes.saturating_add(b.size);
                }
            }
        }
        r
    }

    /// Undoes entry `i` of `snap`'s trace, moving the state from "after i" to "before i".
    fn undo(&mut self, i: usize, e: &TraceEntry, snap: &Snapshot) {
        match e.action {
            Action::Alloc => match self.live.remove(&e.addr) {
                Some(b) => self.live_bytes = self.live_bytes.saturating_sub(b.size),
                None => self.inconsistencies += 1,
            },
            Action::FreeCompleted => match self.live.entry(e.addr) {
                std::collections::hash_map::Entry::Occupied(_) => self.inconsistencies += 1,
                std::collections::hash_map::Entry::Vacant(slot) => {
                    let size = round_block(e.size);
                    slot.insert(LiveBlock {
                        size,
                        final_block: NONE,
                        freed_at: i as u32,
                    });
                    self.live_bytes = self.live_bytes.saturating_add(size);
                }
            },
            Action::SegmentAlloc | Action::SegmentMap => {
                if !undo_reserved(&mut self.reserved_bytes, e) {
                    self.inconsistencies += 1;
                }
                self.remove_range(e.addr, e.size);
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                undo_reserved(&mut self.reserved_bytes, e);
                self.add_range(
                    e.addr,
                    e.size,
                    e.action == Action::SegmentUnmap,
                    snap.stream_of(e),
                );
            }
            _ => {}
        }
    }

    fn remove_range(&mut self, start: u64, size: u64) {
        let ranges = &mut self.ranges;
        let end = start.saturating_add(size);
        // Every range overlapping [start, end) is cut; the parts outside survive.
        let overlapping: Vec<(u64, RangeAttrs)> = ranges
            .range(..end)
            .rev()
            .take_while(|(_, a)| a.end > start)
            .map(|(s, a)| (*s, *a))
            .collect();
        for (s, a) in overlapping {
            ranges.remove(&s);
            if s < start {
                ranges.insert(s, RangeAttrs { end: start, ..a });
            }
            if a.end > end {
                ranges.insert(end, a);
            }
        }
    }

    fn add_range(&mut self, start: u64, size: u64, expandable: bool, stream: u64) {
        let ranges = &mut self.ranges;
        let end = start.saturating_add(size);
        let mut attrs = RangeAttrs {
            end,
            is_expandable: expandable,
            pool_id: (0, 0),
            stream,
        };
        // Mapping pages next to a mapped range of an expandable segment extends that range
        // (the snapshot reports one segment per contiguous mapped range). cudaMalloc
        // segments that happen to be adjacent stay separate: no block spans two of them.
        if expandable {
            if let Some((&ps, pa)) = ranges.range(..=start).next_back() {
                if pa.is_expandable && pa.end >= start && ps < start {
                    attrs = RangeAttrs {
                        end: end.max(pa.end),
                        ..*pa
                    };
                    ranges.remove(&ps);
                    if let Some(next) = ranges.get(&attrs.end).copied() {
                        if next.is_expandable {
                            ranges.remove(&attrs.end);
                            attrs.end = next.end;
                        }
                    }
                    ranges.insert(ps, attrs);
                    return;
                }
            }
        }
        if let Some(next) = ranges.get(&end).copied() {
            if next.is_expandable && expandable {
                ranges.remove(&end);
                attrs.end = next.end;
                attrs.pool_id = next.pool_id;
            }
        }
        ranges.insert(start, attrs);
    }
}

/// Forward pairing of allocs and frees by address.
pub(crate) struct Pairing {
    /// For a `free_completed` entry: the index of its `alloc`; for an `alloc`: the index of
    /// its `free_completed`; NONE when there is none in the trace.
    pub partner: Vec<u32>,
    /// Allocs never freed in the trace, by address (the last alloc at each address).
    pub open_alloc: FxHashMap<u64, u32>,
    pub frees_without_alloc: u64,
}

impl Pairing {
    fn new(entries: &[TraceEntry]) -> Pairing {
        let mut partner = vec![NONE; entries.len()];
        // Iterated only to be sorted (leak detection): the spreading hash.
        let mut open: FxHashMap<u64, u32> = new_spread_map();
        open.reserve(entries.iter().filter(|e| e.action == Action::Alloc).count());
        let mut frees_without_alloc = 0;
        for (i, e) in entries.iter().enumerate() {
            match e.action {
                Action::Alloc => {
                    open.insert(e.addr, i as u32);
                }
                Action::FreeCompleted => match open.remove(&e.addr) {
                    Some(a) => {
                        partner[i] = a;
                        if let Some(p) = partner.get_mut(a as usize) {
                            *p = i as u32;
                        }
                    }
                    None => frees_without_alloc += 1,
                },
                _ => {}
            }
        }
        Pairing {
            partner,
            open_alloc: open,
            frees_without_alloc,
        }
    }
}

/// Shared per-device context for the attribution and leak passes.
pub(crate) struct DeviceCtx<'s, 'c, 't> {
    pub snap: &'s Snapshot,
    pub entries: &'s [TraceEntry],
    pub pairing: Pairing,
    pub classifier: &'c mut Classifier<'t>,
    /// Live bytes after each entry.
    pub live_after: Vec<u64>,
    /// Live bytes before the first entry.
    pub live_before_first: u64,
}

impl DeviceCtx<'_, '_, '_> {
    /// Frames of the allocation behind a live block, and whether its alloc is in the trace.
    fn block_origin(&self, addr: u64, b: &LiveBlock) -> (FrameListId, Option<u32>) {
        let alloc = if b.freed_at != NONE {
            self.pairing
                .partner
                .get(b.freed_at as usize)
                .copied()
                .filter(|&a| a != NONE)
        } else {
            self.pairing.open_alloc.get(&addr).copied()
        };
        let mut frames = FrameListId::EMPTY;
        if b.final_block != NONE {
            if let Some(blk) = self.snap.blocks.get(b.final_block as usize) {
                frames = blk.frames;
            }
        }
        if frames.is_empty() {
            if let Some(e) = alloc.and_then(|a| self.entries.get(a as usize)) {
                frames = e.frames;
            }
        }
        (frames, alloc)
    }

    /// The category of a live block: profiler category, frames, or how it was recorded.
    pub fn category_of(&mut self, frames: FrameListId, alloc: Option<u32>) -> Category {
        if let Some(cat) = alloc
            .and_then(|a| self.entries.get(a as usize))
            .and_then(|e| self.snap.extra(e))
            .and_then(|x| x.category.as_deref())
            .and_then(Category::from_profiler_category)
        {
            return cat;
        }
        if frames.is_empty() {
            return if alloc.is_none() {
                Category::BeforeRecording
            } else {
                Category::Other
            };
        }
        self.classifier.category(frames).unwrap_or(Category::Other)
    }

    /// Live bytes right after entry `i` (`None` = before the first entry).
    pub fn live_at(&self, after: Option<usize>) -> u64 {
        match after {
            None => self.live_before_first,
            Some(i) => self
                .live_after
                .get(i)
                .copied()
                .unwrap_or(self.live_before_first),
        }
    }
}

fn segment_stats(snap: &Snapshot, segs: &[&Segment]) -> SegmentStats {
    let mut s = SegmentStats {
        segment_count: segs.len() as u64,
        ..SegmentStats::default()
    };
    let mut pools = std::collections::BTreeSet::new();
    for seg in segs {
        let blocks = snap.blocks_of(seg);
        s.block_count += blocks.len() as u64;
        s.reserved_bytes = s.reserved_bytes.saturating_add(seg.total_size);
        let mut seg_active = 0u64;
        let mut seg_inactive = 0u64;
        let mut seg_free_blocks = 0u64;
        let mut seg_sum = 0u64;
        for b in blocks {
            seg_sum = seg_sum.saturating_add(b.size);
            match b.state {
                BlockState::ActiveAllocated => {
                    s.allocated_bytes = s.allocated_bytes.saturating_add(b.size);
                    s.requested_bytes = s
                        .requested_bytes
                        .saturating_add(b.requested_size.min(b.size));
                    seg_active = seg_active.saturating_add(b.size);
                }
                BlockState::ActivePendingFree => {
                    s.pending_free_bytes = s.pending_free_bytes.saturating_add(b.size);
                    seg_active = seg_active.saturating_add(b.size);
                }
                BlockState::Inactive => {
                    seg_inactive = seg_inactive.saturating_add(b.size);
                    seg_free_blocks += 1;
                    s.largest_free_block_bytes = s.largest_free_block_bytes.max(b.size);
                }
                BlockState::Unknown => {}
            }
        }
        if !blocks.is_empty() && seg_sum != seg.total_size {
            s.inconsistent_segments += 1;
        }
        s.active_bytes = s.active_bytes.saturating_add(seg_active);
        s.inactive_bytes = s.inactive_bytes.saturating_add(seg_inactive);
        s.free_block_count = s.free_block_count.saturating_add(seg_free_blocks);
        s.max_free_blocks_per_segment = s.max_free_blocks_per_segment.max(seg_free_blocks);
        if seg_free_blocks > 0 {
            s.segments_with_free_blocks += 1;
        }
        if seg_active == 0 {
            // Nothing active: empty_cache() would return the whole segment.
            s.releasable_cache_bytes = s.releasable_cache_bytes.saturating_add(seg.total_size);
            s.releasable_segments += 1;
        } else if seg.is_expandable {
            // The allocator unmaps the free pages of an expandable segment (empty_cache, or
            // on the way to an OOM), so its gaps are cache, not fragmentation (§4.6).
            s.releasable_cache_bytes = s.releasable_cache_bytes.saturating_add(seg_inactive);
        } else if seg_inactive > 0 {
            s.fragmented_free_bytes = s.fragmented_free_bytes.saturating_add(seg_inactive);
            s.fragmented_segments += 1;
        }
        if seg.is_expandable {
            s.expandable_segment_count += 1;
            s.expandable_bytes = s.expandable_bytes.saturating_add(seg.total_size);
        }
        if seg.is_private_pool() {
            s.private_pool_bytes = s.private_pool_bytes.saturating_add(seg.total_size);
            s.private_pool_allocated_bytes =
                s.private_pool_allocated_bytes.saturating_add(seg_active);
            pools.insert(seg.pool_id);
        }
        match seg.segment_type {
            super::schema::SegmentType::Small => {
                s.small_pool_bytes = s.small_pool_bytes.saturating_add(seg.total_size)
            }
            super::schema::SegmentType::Large => {
                s.large_pool_bytes = s.large_pool_bytes.saturating_add(seg.total_size)
            }
            super::schema::SegmentType::Unknown => {}
        }
    }
    s.private_pools = pools.len() as u64;
    s.rounding_loss_bytes = s.allocated_bytes.saturating_sub(s.requested_bytes);
    s
}

fn trace_stats(entries: &[TraceEntry]) -> TraceStats {
    // Counted by action index, not matched: a trace's actions follow no pattern a branch
    // predictor could learn, and this walks every entry.
    let mut by_action = [0u64; Action::COUNT];
    for e in entries {
        by_action[e.action as usize] += 1;
    }
    let count = |a: Action| by_action[a as usize];
    TraceStats {
        entries: entries.len() as u64,
        alloc: count(Action::Alloc),
        free_requested: count(Action::FreeRequested),
        free_completed: count(Action::FreeCompleted),
        segment_alloc: count(Action::SegmentAlloc),
        segment_free: count(Action::SegmentFree),
        segment_map: count(Action::SegmentMap),
        segment_unmap: count(Action::SegmentUnmap),
        oom: count(Action::Oom),
        snapshot: count(Action::Snapshot),
        other: count(Action::Annotate) + count(Action::Other),
        first_time_us: entries.iter().find_map(TraceEntry::time),
        last_time_us: entries.iter().rev().find_map(TraceEntry::time),
        ..TraceStats::default()
    }
}

/// The backward pass over the whole trace: live bytes after every entry, the downsampled
/// timeline, and the peak.
///
/// The same as undoing the entries one by one with a [`Replayer`], without its map of live
/// blocks: what undoing an alloc or a completed free does to the live bytes depends only on
/// the entries at the same address undone before it, so [`block_changes`] replays each
/// address on its own, in address order, and this pass adds the changes up in trace order.
/// (A map probed in trace order misses the caches at every entry once a long trace's live
/// blocks outgrow them: 0.5 s of the 5 M-entry bench file's analysis.)
fn timeline_pass(
    snap: &Snapshot,
    segs: &[&Segment],
    entries: &[TraceEntry],
) -> (Timeline, Vec<u64>, u64, u64) {
    let n = entries.len();
    // First what undoing each entry changes (see `block_changes`), then, overwritten as the
    // pass goes, the live bytes after it.
    let mut live_after = vec![0u64; n];
    let (end_live, mut inconsistencies) = block_changes(snap, segs, entries, &mut live_after);
    let mut live = end_live;
    let mut reserved = segs
        .iter()
        .fold(0u64, |r, s| r.saturating_add(s.total_size));
    // Buckets over "positions" 0..=n, where position 0 is the state before entry 0 and
    // position p the state after entry p-1.
    let positions = n + 1;
    let buckets = positions.min(TIMELINE_POINTS);
    let mut best: Vec<Option<TimelinePoint>> = vec![None; buckets];
    let mut peak = TimelinePoint {
        index: n as i64 - 1,
        time_us: None,
        live_bytes: live,
        reserved_bytes: reserved,
    };
    let mut peak_reserved = reserved;
    // The bucket of position `pos` is `pos * buckets / positions`. Positions are recorded
    // from the last down, so it only ever falls: it is moved down where `pos` drops below
    // its first position instead of divided out at every entry.
    let mut bucket = buckets - 1;
    let mut bucket_start = (bucket * positions).div_ceil(buckets);
    let mut record = |pos: usize, live: u64, reserved: u64, time_us: Option<i64>| {
        let pt = TimelinePoint {
            index: pos as i64 - 1,
            time_us,
            live_bytes: live,
            reserved_bytes: reserved,
        };
        while pos < bucket_start {
            bucket -= 1;
            bucket_start = (bucket * positions).div_ceil(buckets);
        }
        debug_assert_eq!(bucket, pos * buckets / positions);
        if let Some(slot) = best.get_mut(bucket) {
            // Walking backwards: `>=` keeps the earliest point among equals.
            if slot.is_none_or(|s| pt.live_bytes >= s.live_bytes) {
                *slot = Some(pt);
            }
        }
        if pt.live_bytes >= peak.live_bytes {
            peak = pt;
        }
        peak_reserved = peak_reserved.max(reserved);
    };
    for i in (0..n).rev() {
        let e = &entries[i];
        let change = live_after[i];
        live_after[i] = live;
        record(i + 1, live, reserved, e.time());
        match e.action {
            Action::Alloc => live = live.saturating_sub(change),
            Action::FreeCompleted => live = live.saturating_add(change),
            _ => {
                if !undo_reserved(&mut reserved, e) {
                    inconsistencies += 1;
                }
            }
        }
    }
    record(0, live, reserved, entries.first().and_then(|e| e.time()));
    let timeline = Timeline {
        points: best.into_iter().flatten().collect(),
        peak_live_bytes: peak.live_bytes,
        peak_index: peak.index,
        peak_time_us: peak.time_us,
        peak_reserved_bytes: peak_reserved,
        start_live_bytes: live,
        end_live_bytes: end_live,
    };
    (timeline, live_after, live, inconsistencies)
}

/// What undoing each alloc and completed free does to the live bytes, as a [`Replayer`]'s
/// map of live blocks would have it: `change[i]` is what undoing entry `i` takes from them
/// (an alloc: the size of the block it made) or adds to them (a completed free: its size
/// rounded to a block), 0 where the entry cannot be undone (no block at an alloc's
/// address, a block already at a free's). Returns the live bytes of the final state and
/// how many entries could not be undone.
///
/// Each address is replayed on its own: its entries, latest first, from the final block
/// there (the last one listed, as the map's inserts leave it).
fn block_changes(
    snap: &Snapshot,
    segs: &[&Segment],
    entries: &[TraceEntry],
    change: &mut [u64],
) -> (u64, u64) {
    let mut live = 0u64;
    let mut finals: Vec<(u64, u64)> = Vec::new();
    for seg in segs {
        for b in snap.blocks_of(seg).iter().filter(|b| b.state.is_active()) {
            finals.push((b.address, b.size));
            live = live.saturating_add(b.size);
        }
    }
    // Stable: blocks at one address stay in the order listed, the last one standing.
    finals.sort_by_key(|&(addr, _)| addr);
    // Each alloc and completed free with what undoing it needs, so that the walk by
    // address reads no entry out of trace order: its address, its index (shifted, the low
    // bit set for a free) and, for a free, its size rounded to a block.
    let mut at: Vec<(u64, u64, u64)> = entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e.action {
            Action::Alloc => Some((e.addr, (i as u64) << 1, 0)),
            Action::FreeCompleted => Some((e.addr, (i as u64) << 1 | 1, round_block(e.size))),
            _ => None,
        })
        .collect();
    // By address, and the latest entry first: the order the backward pass undoes them in.
    at.sort_unstable_by_key(|&(addr, key, _)| (addr, std::cmp::Reverse(key)));
    let mut inconsistencies = 0u64;
    let mut next_final = 0;
    for group in at.chunk_by(|a, b| a.0 == b.0) {
        let addr = group[0].0;
        let mut block = None;
        while let Some(&(a, size)) = finals.get(next_final).filter(|f| f.0 <= addr) {
            if a == addr {
                block = Some(size);
            }
            next_final += 1;
        }
        for &(_, key, freed) in group {
            let (i, is_free) = ((key >> 1) as usize, key & 1 == 1);
            match (is_free, block) {
                (false, Some(size)) => {
                    change[i] = size;
                    block = None;
                }
                (true, None) => {
                    change[i] = freed;
                    block = Some(freed);
                }
                _ => inconsistencies += 1,
            }
        }
    }
    (live, inconsistencies)
}

/// Undoes a segment entry's change to the reserved bytes (any other entry changes none);
/// `false` where it cannot (a segment's allocation larger than what is reserved).
fn undo_reserved(reserved: &mut u64, e: &TraceEntry) -> bool {
    match e.action {
        Action::SegmentAlloc | Action::SegmentMap => match reserved.checked_sub(e.size) {
            Some(v) => *reserved = v,
            None => {
                *reserved = 0;
                return false;
            }
        },
        Action::SegmentFree | Action::SegmentUnmap => {
            *reserved = reserved.saturating_add(e.size);
        }
        _ => {}
    }
    true
}

/// A reserved range with its pieces: `(offset, size, live)`.
type RangePieces = (u64, RangeAttrs, Vec<(u64, u64, bool)>);

/// Per-site totals: bytes, blocks, and the category of the first block seen there.
type SiteTotal = (u64, u64, Option<Category>);

/// Free-gap statistics of the reserved ranges given the live blocks in them.
struct Gaps {
    largest: u64,
    fragmented: u64,
    releasable: u64,
    private_live: u64,
    unplaced: u64,
}

fn gaps(ranges: &BTreeMap<u64, RangeAttrs>, live: &[(u64, u64)]) -> (Gaps, Vec<RangePieces>) {
    // `live` is sorted by address. Returns each range with its pieces (offset, size, live).
    let mut g = Gaps {
        largest: 0,
        fragmented: 0,
        releasable: 0,
        private_live: 0,
        unplaced: 0,
    };
    let mut out = Vec::with_capacity(ranges.len());
    let mut li = 0;
    for (&start, &a) in ranges {
        while li < live.len() && live[li].0 < start {
            g.unplaced += 1;
            li += 1;
        }
        let mut pieces = Vec::new();
        let mut cursor = start;
        let mut any_live = false;
        let mut free_here = 0u64;
        while li < live.len() && live[li].0 < a.end {
            let (addr, size) = live[li];
            if addr > cursor {
                pieces.push((cursor - start, addr - cursor, false));
                g.largest = g.largest.max(addr - cursor);
                free_here = free_here.saturating_add(addr - cursor);
            }
            // Overlapping live blocks (estimated sizes can overlap) are clipped.
            let piece_start = addr.max(cursor);
            let end = addr.saturating_add(size).min(a.end);
            if end > piece_start {
                pieces.push((piece_start - start, end - piece_start, true));
            }
            any_live = true;
            if a.pool_id != (0, 0) {
                g.private_live = g.private_live.saturating_add(size);
            }
            cursor = cursor.max(end);
            li += 1;
        }
        if a.end > cursor {
            pieces.push((cursor - start, a.end - cursor, false));
            g.largest = g.largest.max(a.end - cursor);
            free_here = free_here.saturating_add(a.end - cursor);
        }
        if any_live && !a.is_expandable {
            g.fragmented = g.fragmented.saturating_add(free_here);
        } else {
            g.releasable = g.releasable.saturating_add(free_here);
        }
        out.push((start, a, pieces));
    }
    g.unplaced += (live.len() - li) as u64;
    (g, out)
}

fn bounded_map(moment: Moment, segments: Vec<MapSegment>) -> SegmentMap {
    let mut segments = segments;
    let mut omitted_segments = 0;
    if segments.len() > MAP_MAX_SEGMENTS {
        // Keep the largest segments (they matter most for an OOM), then restore address order.
        segments.sort_by(|a, b| b.size.cmp(&a.size).then(a.address.cmp(&b.address)));
        omitted_segments = (segments.len() - MAP_MAX_SEGMENTS) as u64;
        segments.truncate(MAP_MAX_SEGMENTS);
        segments.sort_by_key(|s| s.address);
    }
    let mut budget = MAP_MAX_BLOCKS;
    for s in &mut segments {
        let keep = s.blocks.len().min(MAP_MAX_BLOCKS_PER_SEGMENT).min(budget);
        if keep < s.blocks.len() {
            let dropped = s.blocks.split_off(keep);
            s.omitted_blocks += dropped.len() as u64;
            s.omitted_bytes = dropped
                .iter()
                .fold(s.omitted_bytes, |acc, b| acc.saturating_add(b.size));
        }
        budget -= keep;
    }
    SegmentMap {
        moment,
        segments,
        omitted_segments,
    }
}

fn final_map(snap: &Snapshot, segs: &[&Segment], moment: Moment) -> SegmentMap {
    let segments = segs
        .iter()
        .map(|seg| {
            let blocks: Vec<MapBlock> = snap
                .blocks_of(seg)
                .iter()
                .map(|b: &Block| MapBlock {
                    offset: b.address.saturating_sub(seg.address),
                    size: b.size,
                    state: b.state,
                })
                .collect();
            let live_bytes = snap
                .blocks_of(seg)
                .iter()
                .filter(|b| b.state.is_active())
                .fold(0u64, |acc, b| acc.saturating_add(b.size));
            MapSegment {
                address: seg.address,
                size: seg.total_size,
                is_expandable: seg.is_expandable,
                pool_id: seg.pool_id,
                stream: seg.stream,
                live_bytes,
                blocks,
                omitted_blocks: 0,
                omitted_bytes: 0,
            }
        })
        .collect();
    bounded_map(moment, segments)
}

/// Traces shorter than this are analysed on one thread: the second thread's start would
/// cost more than the overlap saves.
pub(crate) const SIDE_BY_SIDE_ENTRIES: usize = 1 << 16;

/// Analyses one device.
///
/// At an OOM the moment to analyse is known before the timeline is (it is the OOM, not the
/// peak), and the replay back to it, the trace statistics, the pairing of allocs with frees
/// and the timeline's backward pass over the whole trace read nothing but the snapshot: so
/// on a large trace they run on two threads, the replay beside the counts and the pairing,
/// then the backward pass beside the attribution of the state the replay reached and the
/// iterations the leak detection compares. Only the leak detection's last step waits for
/// the timeline. The classifier, which numbers call sites in the order they are first
/// asked for, is used on this thread only and in the same order as on one thread (the
/// OOM's site, the attribution, the leak), so the output does not depend on the threads.
///
/// `side_by_side_from`: the trace length from which the second thread is used
/// ([`SIDE_BY_SIDE_ENTRIES`]; tests vary it).
pub(crate) fn analyze_device(
    snap: &Snapshot,
    device: u32,
    classifier: &mut Classifier<'_>,
    side_by_side_from: usize,
) -> DeviceAnalysis {
    let segs: Vec<&Segment> = snap
        .segments
        .iter()
        .filter(|s| s.device == device as i64)
        .collect();
    let entries: &[TraceEntry] = snap
        .traces
        .get(device as usize)
        .map_or(&[], |t| t.as_slice());
    // Live blocks at any moment: the final ones plus at most every freed one.
    let final_live = segs
        .iter()
        .map(|s| {
            snap.blocks_of(s)
                .iter()
                .filter(|b| b.state.is_active())
                .count()
        })
        .sum::<usize>();
    // The OOM: the last `oom` entry.
    let oom_index = entries.iter().rposition(|e| e.action == Action::Oom);

    // Two rounds of two sides each, so that neither side waits long on the other (the
    // backward pass, the longest piece, is about as long as the attribution and the leak
    // detection's iterations together; one round with the pairing and the replay on the
    // attribution's side was about 1.7 : 1 on the 1 M-entry bench file, 0.114 s against
    // 0.070 s). First the forward passes (counts, pairing) beside the replay back to the
    // OOM; then the backward pass over the whole trace beside the OOM's site, the
    // attribution of the state the replay reached and the leak detection's iterations.
    let side_by_side = entries.len() >= side_by_side_from;
    let ((mut trace, pairing), (seg_stats, replay_at_oom)) = crate::input::walk::join(
        side_by_side,
        || (trace_stats(entries), Pairing::new(entries)),
        || {
            let replay = oom_index
                .map(|i| replay_to(snap, &segs, entries, final_live, Moment::Oom, Some(i)));
            (segment_stats(snap, &segs), replay)
        },
    );
    let mut ctx = DeviceCtx {
        snap,
        entries,
        pairing,
        classifier,
        // Filled in from the timeline once it is done; nothing before the leak detection's
        // last step reads them.
        live_after: Vec::new(),
        live_before_first: 0,
    };
    let (timeline_pass_out, (mut oom, at_oom, iterations)) = crate::input::walk::join(
        side_by_side,
        || timeline_pass(snap, &segs, entries),
        || {
            let oom = oom_index.map(|i| oom_event(&mut ctx, i));
            let at_oom = replay_at_oom.map(|replay| state_at(&mut ctx, &segs, &seg_stats, replay));
            let iterations = leak::iteration_starts(&mut ctx, &snap.annotations);
            (oom, at_oom, iterations)
        },
    );
    if let Some(oom) = &mut oom {
        oom.oom_count = trace.oom;
    }
    let (timeline, live_after, live_before_first, timeline_inconsistencies) = timeline_pass_out;
    ctx.live_after = live_after;
    ctx.live_before_first = live_before_first;
    trace.frees_without_alloc = ctx.pairing.frees_without_alloc;
    trace.replay_inconsistencies = timeline_inconsistencies;
    trace.starts_mid_history = ctx.pairing.frees_without_alloc > 0 || live_before_first > 0;

    // The moment to analyse: the OOM, else the peak, else the final state.
    let at = at_oom.unwrap_or_else(|| {
        let (moment, target) =
            if !entries.is_empty() && timeline.peak_index < entries.len() as i64 - 1 {
                (Moment::Peak, usize::try_from(timeline.peak_index).ok())
            } else {
                (Moment::Final, None)
            };
        let replay = replay_to(snap, &segs, entries, final_live, moment, target);
        state_at(&mut ctx, &segs, &seg_stats, replay)
    });
    trace.replay_inconsistencies = trace.replay_inconsistencies.max(at.inconsistencies);

    let leak = leak::detect(&mut ctx, iterations);

    DeviceAnalysis {
        device,
        segments: seg_stats,
        trace,
        oom,
        state: at.state,
        attribution: at.attribution,
        timeline,
        segment_map: at.segment_map,
        leak,
    }
}

/// The OOM event at entry `i`, its call site classified; `oom_count` is left for the
/// caller (the trace statistics may be counted on another thread).
fn oom_event(ctx: &mut DeviceCtx<'_, '_, '_>, i: usize) -> OomEvent {
    let e = &ctx.entries[i];
    let site = ctx
        .classifier
        .site(e.frames)
        .and_then(|s| ctx.classifier.sites.get(s as usize).cloned());
    let category = if e.frames.is_empty() {
        None
    } else {
        ctx.classifier.category(e.frames)
    };
    OomEvent {
        trace_index: i as u64,
        requested_bytes: e.size,
        device_free_bytes: ctx.snap.extra(e).and_then(|x| x.device_free),
        stream: ctx.snap.stream_of(e),
        time_us: e.time(),
        site,
        category,
        entries_after: (ctx.entries.len() - i - 1) as u64,
        oom_count: 0,
    }
}

/// The device at the moment analysed: its state, what holds its live memory, its map.
struct AtMoment {
    state: StateAt,
    attribution: Attribution,
    segment_map: SegmentMap,
    /// Entries the replay back to the moment could not undo consistently.
    inconsistencies: u64,
}

/// The device's blocks at a moment, found by undoing the trace back to it.
struct Replay {
    moment: Moment,
    target: Option<usize>,
    r: Replayer,
    /// Entries undone.
    replayed_entries: u64,
    /// Whether any undone entry changed a block or a segment.
    replayed: bool,
}

/// Replays the trace back to `target` (the entry at `moment`; `None` with a peak: before
/// the first entry).
fn replay_to(
    snap: &Snapshot,
    segs: &[&Segment],
    entries: &[TraceEntry],
    final_live: usize,
    moment: Moment,
    target: Option<usize>,
) -> Replay {
    // Entries after the target are undone; with no target inside the trace and a peak
    // before the first entry, everything is undone.
    let undo_from = match (moment, target) {
        (Moment::Final, _) => entries.len(),
        (_, Some(i)) => i + 1,
        (_, None) => 0,
    };
    let replay_capacity = final_live
        + entries[undo_from..]
            .iter()
            .filter(|e| e.action == Action::FreeCompleted)
            .count();
    // Its live blocks are iterated in address order by `state_at` (sites are numbered in
    // that order): the spreading hash (see `Replayer::new`) does not reach the output.
    let mut r = Replayer::new(snap, segs, replay_capacity);
    for i in (undo_from..entries.len()).rev() {
        r.undo(i, &entries[i], snap);
    }
    let replayed = entries[undo_from..].iter().any(|e| {
        matches!(
            e.action,
            Action::Alloc
                | Action::FreeCompleted
                | Action::SegmentAlloc
                | Action::SegmentFree
                | Action::SegmentMap
                | Action::SegmentUnmap
        )
    });
    Replay {
        moment,
        target,
        r,
        replayed_entries: (entries.len() - undo_from) as u64,
        replayed,
    }
}

/// The state at the moment `replay` reached, and the attribution of its live blocks.
fn state_at(
    ctx: &mut DeviceCtx<'_, '_, '_>,
    segs: &[&Segment],
    seg_stats: &SegmentStats,
    replay: Replay,
) -> AtMoment {
    let (snap, entries) = (ctx.snap, ctx.entries);
    let Replay {
        moment,
        target,
        mut r,
        replayed_entries,
        replayed,
    } = replay;

    // Attribution over the live blocks at the moment.
    let mut cat_bytes = [0u64; 8];
    let mut cat_blocks = [0u64; 8];
    let mut site_totals: FxHashMap<u32, SiteTotal> = new_map();
    let mut live_list: Vec<(u64, u64)> = Vec::with_capacity(r.live.len());
    let mut live_blocks: Vec<(u64, LiveBlock)> = r.live.iter().map(|(a, b)| (*a, *b)).collect();
    live_blocks.sort_unstable_by_key(|(addr, _)| *addr);
    for (addr, b) in &live_blocks {
        let (frames, alloc) = ctx.block_origin(*addr, b);
        let cat = ctx.category_of(frames, alloc);
        cat_bytes[cat.index()] = cat_bytes[cat.index()].saturating_add(b.size);
        cat_blocks[cat.index()] += 1;
        if let Some(site) = ctx.classifier.site(frames) {
            let t = site_totals.entry(site).or_insert((0, 0, Some(cat)));
            t.0 = t.0.saturating_add(b.size);
            t.1 += 1;
        }
        live_list.push((*addr, b.size));
    }
    live_list.sort_unstable();
    let mut top: Vec<(u32, SiteTotal)> = site_totals.into_iter().collect();
    top.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(&b.0)));
    let top_sites = top
        .into_iter()
        .take(TOP_SITES)
        .filter_map(|(id, (bytes, blocks, category))| {
            ctx.classifier.sites.get(id as usize).map(|s| SiteBytes {
                site: s.clone(),
                bytes,
                blocks,
                category,
            })
        })
        .collect();
    let attribution = Attribution {
        moment,
        total_bytes: r.live_bytes,
        categories: Category::ALL
            .iter()
            .map(|&c| CategoryBytes {
                category: c,
                bytes: cat_bytes[c.index()],
                blocks: cat_blocks[c.index()],
            })
            .collect(),
        top_sites,
    };

    // The state and the segment map at the moment.
    let target_entry = target.and_then(|i| entries.get(i));
    let (state, segment_map) = if replayed_entries == 0 || !replayed {
        // Nothing changed after the moment: the final segments are the state.
        let state = StateAt {
            moment,
            trace_index: target.map(|i| i as u64),
            time_us: target_entry.and_then(|e| e.time()),
            replayed: false,
            replayed_entries,
            live_bytes: seg_stats.active_bytes,
            live_blocks: live_list.len() as u64,
            reserved_bytes: seg_stats.reserved_bytes,
            free_bytes: seg_stats.inactive_bytes,
            largest_free_block_bytes: seg_stats.largest_free_block_bytes,
            fragmented_free_bytes: seg_stats.fragmented_free_bytes,
            releasable_bytes: seg_stats.releasable_cache_bytes,
            private_pool_allocated_bytes: seg_stats.private_pool_allocated_bytes,
            unplaced_blocks: 0,
        };
        (state, final_map(snap, segs, moment))
    } else {
        let ranges = std::mem::take(&mut r.ranges);
        let (g, pieces) = gaps(&ranges, &live_list);
        let state = StateAt {
            moment,
            trace_index: target.map(|i| i as u64),
            time_us: target_entry.and_then(|e| e.time()),
            replayed: true,
            replayed_entries,
            live_bytes: r.live_bytes,
            live_blocks: live_list.len() as u64,
            reserved_bytes: r.reserved_bytes,
            free_bytes: r.reserved_bytes.saturating_sub(r.live_bytes),
            largest_free_block_bytes: g.largest,
            fragmented_free_bytes: g.fragmented,
            releasable_bytes: g.releasable,
            private_pool_allocated_bytes: g.private_live,
            unplaced_blocks: g.unplaced,
        };
        let segments = pieces
            .into_iter()
            .map(|(start, a, ps)| {
                let live_bytes = ps
                    .iter()
                    .filter(|p| p.2)
                    .fold(0u64, |acc, p| acc.saturating_add(p.1));
                MapSegment {
                    address: start,
                    size: a.end - start,
                    is_expandable: a.is_expandable,
                    pool_id: a.pool_id,
                    stream: a.stream,
                    live_bytes,
                    blocks: ps
                        .into_iter()
                        .map(|(offset, size, live)| MapBlock {
                            offset,
                            size,
                            state: if live {
                                BlockState::ActiveAllocated
                            } else {
                                BlockState::Inactive
                            },
                        })
                        .collect(),
                    omitted_blocks: 0,
                    omitted_bytes: 0,
                }
            })
            .collect();
        (state, bounded_map(moment, segments))
    };
    AtMoment {
        state,
        attribution,
        segment_map,
        inconsistencies: r.inconsistencies,
    }
}

/// Devices that have segments or trace entries, ascending.
pub(crate) fn devices_of(snap: &Snapshot) -> Vec<u32> {
    let mut devs: Vec<u32> = snap
        .segments
        .iter()
        .filter_map(|s| u32::try_from(s.device).ok())
        .collect();
    for (d, t) in snap.traces.iter().enumerate() {
        if !t.is_empty() {
            devs.push(d as u32);
        }
    }
    devs.sort_unstable();
    devs.dedup();
    devs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges_of(r: &Replayer) -> Vec<(u64, u64)> {
        r.ranges.iter().map(|(s, a)| (*s, a.end)).collect()
    }

    fn empty_replayer() -> Replayer {
        Replayer {
            live: new_map(),
            live_bytes: 0,
            reserved_bytes: 0,
            inconsistencies: 0,
            ranges: BTreeMap::new(),
        }
    }

    #[test]
    fn range_set_splits_and_merges() {
        let mut r = empty_replayer();
        r.add_range(1000, 1000, true, 0);
        r.remove_range(1200, 100);
        assert_eq!(ranges_of(&r), vec![(1000, 1200), (1300, 2000)]);
        r.add_range(1200, 100, true, 0);
        assert_eq!(ranges_of(&r), vec![(1000, 2000)]);
        r.add_range(2000, 500, true, 0);
        assert_eq!(ranges_of(&r), vec![(1000, 2500)]);
        r.remove_range(0, 5000);
        assert!(ranges_of(&r).is_empty());
        // Adjacent cudaMalloc segments (segment_free undone) stay two ranges.
        r.add_range(0, 100, false, 0);
        r.add_range(100, 100, false, 0);
        assert_eq!(ranges_of(&r), vec![(0, 100), (100, 200)]);
    }

    #[test]
    fn gaps_find_largest_and_fragmentation() {
        let mut ranges = BTreeMap::new();
        ranges.insert(
            0,
            RangeAttrs {
                end: 100,
                is_expandable: false,
                pool_id: (0, 0),
                stream: 0,
            },
        );
        ranges.insert(
            1000,
            RangeAttrs {
                end: 1300,
                is_expandable: false,
                pool_id: (0, 0),
                stream: 0,
            },
        );
        let (g, pieces) = gaps(&ranges, &[(10, 20), (50, 10)]);
        assert_eq!(g.largest, 300);
        assert_eq!(g.fragmented, 70);
        assert_eq!(g.releasable, 300);
        assert_eq!(g.unplaced, 0);
        assert_eq!(
            pieces[0].2,
            vec![
                (0, 10, false),
                (10, 20, true),
                (30, 20, false),
                (50, 10, true),
                (60, 40, false)
            ]
        );
    }
}
