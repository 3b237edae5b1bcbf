//! The typed snapshot model and the decoder from a [`Pickle`] into it.
//!
//! This module owns the schema knowledge of `snapshot-format.md` §1: every generation from
//! the 1.13 bare segment list to 2.15 (legacy `history` blocks without `address`, 2.1+
//! blocks, `device_traces`, `time_us`, `allocator_settings`, `external_annotations`,
//! `compile_context`, `user_metadata`, `forward_frames`, `pool_id` tuples, `host_*`).
//! Unknown keys are ignored; missing or ill-typed fields fall back to defaults and are
//! counted as [`Anomalies`], so one odd field does not cost the user the whole diagnosis.
//! Only structural problems (the top level is not a snapshot at all) are errors.
//!
//! Frames are interned once: a [`FrameTable`] holds each distinct frame and each distinct
//! frame list, and entries refer to lists by [`FrameListId`]. Interning goes by pickle
//! object identity first (PyTorch reuses one dict per frame, so a frame dict is read once
//! however many tracebacks hold it), then, for a list, by its elements' handles (a fresh
//! list of the same shared frame dicts as a list met before, the usual case: one table
//! lookup on a hash of the handles, then a check of each dict's known frame), then by
//! content, so pickles written without sharing dedupe too.
//!
//! Trace entries are decoded while the pickle is read: [`StreamDecoder`] is the pickle
//! reader's [`ListSink`]. It takes a list when elements are appended to it and the stack
//! shows it is `root["device_traces"][dev]` (or `host_traces`): under it the earlier device
//! lists, the outer list, then the key at an odd index above the root dict at the bottom
//! (the root's earlier pairs are still on the stack, as `pickle.dump` writes them). Each
//! `APPENDS` batch of entry dicts is decoded into [`TraceEntry`] records at once, with the
//! same code as the whole-arena path, and the reader then releases the batch's arena space
//! (entry dicts, their frame lists and new frame dicts, `pool_id` tuples: all recognised by
//! identity if the memo hands them back later). Before the first list of a key is taken,
//! the root's earlier pairs (`segments`) are decoded, so the whole file is decoded in its
//! order and frames are numbered exactly as by [`decode`] of a whole arena; anomalies noted
//! in a taken list are merged where the list is met. The walk budget is checked against the
//! input read so far. [`decode`] (a parsed arena, nothing taken) gives the same snapshot.
//!
//! The decoder walks shared structures through handles; a memo bomb that makes it visit far
//! more elements than the file could hold is stopped by the walk budget
//! ([`PickleLimits::walk_budget`]).

use std::sync::Arc;

use serde::Serialize;

use super::fxhash::{self, FxHashMap, new_map};
use super::handle_lists::{HandleLists, dict_handles_hash};
use crate::ingest::snapshot::pickle::{ContainerId, Handle, ListSink, Pickle, PickleLimits, Value};

/// Index into [`FrameTable::frames`].
pub type FrameId = u32;

/// Index of an interned frame list; [`FrameListId::EMPTY`] is the empty list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct FrameListId(pub u32);

impl FrameListId {
    pub const EMPTY: FrameListId = FrameListId(0);
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// One stack frame, innermost first in a list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Frame {
    pub filename: Arc<str>,
    pub line: i64,
    pub name: Arc<str>,
}

/// Every distinct frame and frame list of a snapshot.
#[derive(Debug, Default)]
pub struct FrameTable {
    pub frames: Vec<Frame>,
    /// `(start, len)` into `ids` per list; list 0 is the empty list.
    lists: Vec<(u32, u32)>,
    ids: Vec<FrameId>,
}

impl FrameTable {
    fn new() -> Self {
        FrameTable {
            frames: Vec::new(),
            lists: vec![(0, 0)],
            ids: Vec::new(),
        }
    }

    /// The frame ids of a list, innermost first.
    pub fn list(&self, id: FrameListId) -> &[FrameId] {
        match self.lists.get(id.0 as usize) {
            Some(&(start, len)) => self
                .ids
                .get(start as usize..(start + len) as usize)
                .unwrap_or(&[]),
            None => &[],
        }
    }

    /// A frame by id.
    pub fn frame(&self, id: FrameId) -> Option<&Frame> {
        self.frames.get(id as usize)
    }

    /// Number of distinct frame lists, the empty list included.
    pub fn list_count(&self) -> usize {
        self.lists.len()
    }
}

/// Which allocator pool a segment's blocks come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentType {
    Small,
    Large,
    Unknown,
}

/// A block's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// In use by a tensor.
    ActiveAllocated,
    /// Freed by the user, waiting for other streams (`record_stream`); still unusable.
    /// PyTorch emits `active_pending_free`; its docstring says `active_awaiting_free`.
    ActivePendingFree,
    /// Free and cached.
    Inactive,
    Unknown,
}

impl BlockState {
    /// Holds memory that the allocator cannot hand out (allocated or pending free).
    pub fn is_active(self) -> bool {
        matches!(
            self,
            BlockState::ActiveAllocated | BlockState::ActivePendingFree
        )
    }
}

/// One block of a segment.
#[derive(Clone, Copy, Debug)]
pub struct Block {
    pub address: u64,
    pub size: u64,
    pub requested_size: u64,
    pub state: BlockState,
    pub frames: FrameListId,
    /// The block had no `address` (legacy layout): it was computed from the segment base.
    pub address_computed: bool,
}

/// One segment (a cudaMalloc, or a contiguous mapped range of an expandable segment).
#[derive(Clone, Debug)]
pub struct Segment {
    pub device: i64,
    pub address: u64,
    pub total_size: u64,
    pub allocated_size: u64,
    pub active_size: u64,
    pub requested_size: u64,
    pub stream: u64,
    pub segment_type: SegmentType,
    /// `(0, 0)` is the default pool; anything else is a private pool (CUDA graph, MemPool).
    pub pool_id: (i64, i64),
    pub is_expandable: bool,
    pub frames: FrameListId,
    /// Range into [`Snapshot::blocks`].
    pub blocks: std::ops::Range<u32>,
}

impl Segment {
    pub fn is_private_pool(&self) -> bool {
        self.pool_id != (0, 0)
    }
}

/// A trace action (the strings are stable across versions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Oom,
    Snapshot,
    Annotate,
    /// Stays last: [`Action::COUNT`] counts up to it.
    Other,
}

impl Action {
    /// How many actions there are (`action as usize` is below it).
    pub const COUNT: usize = Action::Other as usize + 1;

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Oom => "oom",
            Action::Snapshot => "snapshot",
            Action::Annotate => "annotate",
            Action::Other => "other",
        }
    }
}

/// `time_us` was absent (before 2.2).
pub const NO_TIME: i64 = i64::MIN;
const NO_EXTRA: u32 = u32::MAX;
/// [`TraceEntry`] without a stream: [`Snapshot::stream_of`] reads it as the default, `0`.
const NO_STREAM: u32 = u32::MAX;
const NO_LIST: u32 = u32::MAX;

/// One trace event. Compact (40 bytes): a million of them are normal, and every pass of
/// the analysis reads them all. Its stream, one of a few distinct values, is an index into
/// [`Snapshot::streams`] (see [`Snapshot::stream_of`]).
#[derive(Clone, Copy, Debug)]
pub struct TraceEntry {
    pub addr: u64,
    pub size: u64,
    /// Microseconds since the epoch, or [`NO_TIME`].
    pub time_us: i64,
    pub frames: FrameListId,
    extra: u32,
    stream: u32,
    pub action: Action,
}

// A change of size is a choice, not an accident (see above).
const _: () = assert!(std::mem::size_of::<TraceEntry>() == 40);

impl TraceEntry {
    pub fn time(&self) -> Option<i64> {
        (self.time_us != NO_TIME).then_some(self.time_us)
    }
}

/// Rare per-entry fields, kept out of [`TraceEntry`] to keep it small.
#[derive(Clone, Debug, Default)]
pub struct EntryExtra {
    /// Only on `oom`: device-wide free bytes (cudaMemGetInfo).
    pub device_free: Option<u64>,
    /// `compile_context` when not `N/A`.
    pub compile_context: Option<Arc<str>>,
    /// `user_metadata` when not empty.
    pub user_metadata: Option<Arc<str>>,
    /// 2.11+: the forward-pass stack of a backward allocation, one preformatted line each.
    pub forward_frames: Option<Arc<[Arc<str>]>>,
    /// 2.12+: the event's pool when not the default `(0, 0)`.
    pub pool_id: Option<(i64, i64)>,
    /// 2.15+.
    pub internal_metadata: Option<Arc<str>>,
    /// Profiler-made snapshots: the tensor category (`activation`, `parameter`, ...).
    pub category: Option<Arc<str>>,
}

/// `allocator_settings` (2.3+).
#[derive(Clone, Debug, Default, Serialize)]
pub struct AllocatorSettings {
    /// `PYTORCH_CUDA_ALLOC_CONF` as last parsed (`""` when unset).
    pub alloc_conf: Option<String>,
    /// Bytes; `None` when unlimited (PyTorch writes -1).
    pub max_split_size: Option<u64>,
    pub garbage_collection_threshold: Option<f64>,
    pub expandable_segments: Option<bool>,
    pub release_lock_on_cudamalloc: Option<bool>,
    pub pinned_use_cuda_host_register: Option<bool>,
    pub pinned_num_register_threads: Option<i64>,
    pub graph_capture_record_stream_reuse: Option<bool>,
    /// `(size bucket in MiB, divisions)` for the buckets with divisions > 0.
    pub roundup_power2_divisions: Vec<(String, i64)>,
}

/// One `external_annotations` record (2.5+), e.g. `ProfilerStep#3` START.
#[derive(Clone, Debug, Serialize)]
pub struct Annotation {
    pub name: Arc<str>,
    pub stage: Arc<str>,
    pub device: i64,
    pub time_us: i64,
}

/// Which top-level shape the file has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// A bare list of segments: 1.13 `_snapshot()`, or `memory_snapshot()` of any version.
    SegmentList,
    /// A dict with `segments` (and usually `device_traces`): 2.0+.
    Dict,
}

/// Which optional features the file shows; drives the version fingerprint (§1.9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Markers {
    pub has_device_traces: bool,
    pub has_allocator_settings: bool,
    pub has_external_annotations: bool,
    pub has_host_segments: bool,
    /// Any block with `history` or without `address` (legacy 1.13/2.0 layout).
    pub legacy_blocks: bool,
    /// Legacy blocks carry `requested_size` (2.0, not 1.13).
    pub legacy_requested_size: bool,
    pub segment_pool_id: bool,
    pub trace_entries: usize,
    pub time_us: bool,
    pub compile_context: bool,
    pub user_metadata: bool,
    pub graph_capture_record_stream_reuse: bool,
    pub forward_frames: bool,
    pub pool_id: bool,
    pub annotate_action: bool,
    pub internal_metadata: bool,
    pub category: bool,
}

/// Non-fatal oddities met while decoding: counted, with the first few places named.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Anomalies {
    pub count: u64,
    pub examples: Vec<String>,
}

impl Anomalies {
    const MAX_EXAMPLES: usize = 10;

    /// Adds what another record counted.
    fn merge(&mut self, other: Anomalies) {
        self.count += other.count;
        for e in other.examples {
            if self.examples.len() < Self::MAX_EXAMPLES {
                self.examples.push(e);
            }
        }
    }

    pub fn note(&mut self, what: impl FnOnce() -> String) {
        self.count += 1;
        if self.examples.len() < Self::MAX_EXAMPLES {
            self.examples.push(what());
        }
    }
}

/// A decoded snapshot.
#[derive(Debug)]
pub struct Snapshot {
    pub layout: Layout,
    pub protocol: Option<u8>,
    pub segments: Vec<Segment>,
    pub blocks: Vec<Block>,
    /// Indexed by device ordinal, oldest entry first.
    pub traces: Vec<Vec<TraceEntry>>,
    pub host_segments: Vec<Segment>,
    pub host_traces: Vec<Vec<TraceEntry>>,
    pub frames: FrameTable,
    pub extras: Vec<EntryExtra>,
    /// The distinct streams of the trace entries, in the order first met.
    pub streams: Vec<u64>,
    pub allocator_settings: Option<AllocatorSettings>,
    pub annotations: Vec<Annotation>,
    pub markers: Markers,
    pub anomalies: Anomalies,
}

impl Snapshot {
    /// A snapshot with nothing in it yet, filled in as the decoder reads.
    fn empty() -> Snapshot {
        Snapshot {
            layout: Layout::Dict,
            protocol: None,
            segments: Vec::new(),
            blocks: Vec::new(),
            traces: Vec::new(),
            host_segments: Vec::new(),
            host_traces: Vec::new(),
            frames: FrameTable::new(),
            extras: Vec::new(),
            streams: Vec::new(),
            allocator_settings: None,
            annotations: Vec::new(),
            markers: Markers::default(),
            anomalies: Anomalies::default(),
        }
    }

    /// A trace entry's stream (`0`, the default stream, when it names none).
    pub fn stream_of(&self, e: &TraceEntry) -> u64 {
        self.streams.get(e.stream as usize).copied().unwrap_or(0)
    }

    /// The blocks of a segment.
    pub fn blocks_of(&self, seg: &Segment) -> &[Block] {
        self.blocks
            .get(seg.blocks.start as usize..seg.blocks.end as usize)
            .unwrap_or(&[])
    }

    /// The rare fields of an entry.
    pub fn extra(&self, e: &TraceEntry) -> Option<&EntryExtra> {
        if e.extra == NO_EXTRA {
            None
        } else {
            self.extras.get(e.extra as usize)
        }
    }
}

/// Why a pickle is not a snapshot.
#[derive(Debug)]
pub struct NotASnapshot {
    /// What was found, in words (`a dict with keys [a, b]`, `a list of 3 ints`).
    pub found: String,
}

/// Why decoding stopped.
#[derive(Debug)]
pub enum DecodeError {
    NotASnapshot(NotASnapshot),
    /// The walk budget ran out: a memo bomb, or a limit set too low.
    WalkBudget {
        limit: u64,
        path: String,
    },
}

/// Known strings: keys, actions, states. Resolved once per string object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Sym {
    Unknown = 1,
    // top level
    Segments,
    DeviceTraces,
    AllocatorSettings,
    ExternalAnnotations,
    HostSegments,
    HostTraces,
    // segment / block
    Device,
    Address,
    TotalSize,
    AllocatedSize,
    ActiveSize,
    RequestedSize,
    Stream,
    SegmentType,
    SegmentPoolId,
    IsExpandable,
    Frames,
    Blocks,
    Size,
    State,
    History,
    RealSize,
    // trace entry
    Addr,
    Action,
    TimeUs,
    CompileContext,
    UserMetadata,
    ForwardFrames,
    PoolId,
    InternalMetadata,
    DeviceFree,
    Category,
    // frame
    Filename,
    Line,
    Name,
    // annotation
    Stage,
    // values
    VAlloc,
    VFreeRequested,
    VFreeCompleted,
    VSegmentAlloc,
    VSegmentFree,
    VSegmentMap,
    VSegmentUnmap,
    VOom,
    VSnapshot,
    VAnnotate,
    VActiveAllocated,
    VActivePendingFree,
    VInactive,
    VSmall,
    VLarge,
}

fn sym_of(s: &str) -> Sym {
    match s {
        "segments" => Sym::Segments,
        "device_traces" => Sym::DeviceTraces,
        "allocator_settings" => Sym::AllocatorSettings,
        "external_annotations" => Sym::ExternalAnnotations,
        "host_segments" => Sym::HostSegments,
        "host_traces" => Sym::HostTraces,
        "device" => Sym::Device,
        "address" => Sym::Address,
        "total_size" => Sym::TotalSize,
        "allocated_size" => Sym::AllocatedSize,
        "active_size" => Sym::ActiveSize,
        "requested_size" => Sym::RequestedSize,
        "stream" => Sym::Stream,
        "segment_type" => Sym::SegmentType,
        "segment_pool_id" => Sym::SegmentPoolId,
        "is_expandable" => Sym::IsExpandable,
        "frames" => Sym::Frames,
        "blocks" => Sym::Blocks,
        "size" => Sym::Size,
        "state" => Sym::State,
        "history" => Sym::History,
        "real_size" => Sym::RealSize,
        "addr" => Sym::Addr,
        "action" => Sym::Action,
        "time_us" => Sym::TimeUs,
        "compile_context" => Sym::CompileContext,
        "user_metadata" => Sym::UserMetadata,
        "forward_frames" => Sym::ForwardFrames,
        "pool_id" => Sym::PoolId,
        "internal_metadata" => Sym::InternalMetadata,
        "device_free" => Sym::DeviceFree,
        "category" => Sym::Category,
        "filename" => Sym::Filename,
        "line" => Sym::Line,
        "name" => Sym::Name,
        "stage" => Sym::Stage,
        "alloc" => Sym::VAlloc,
        "free_requested" => Sym::VFreeRequested,
        "free_completed" => Sym::VFreeCompleted,
        "segment_alloc" => Sym::VSegmentAlloc,
        "segment_free" => Sym::VSegmentFree,
        "segment_map" => Sym::VSegmentMap,
        "segment_unmap" => Sym::VSegmentUnmap,
        "oom" => Sym::VOom,
        "snapshot" => Sym::VSnapshot,
        "annotate" => Sym::VAnnotate,
        "active_allocated" => Sym::VActiveAllocated,
        "active_pending_free" | "active_awaiting_free" => Sym::VActivePendingFree,
        "inactive" => Sym::VInactive,
        "small" => Sym::VSmall,
        "large" => Sym::VLarge,
        _ => Sym::Unknown,
    }
}

const SYM_TABLE: [Sym; 53] = [
    Sym::Unknown,
    Sym::Unknown,
    Sym::Segments,
    Sym::DeviceTraces,
    Sym::AllocatorSettings,
    Sym::ExternalAnnotations,
    Sym::HostSegments,
    Sym::HostTraces,
    Sym::Device,
    Sym::Address,
    Sym::TotalSize,
    Sym::AllocatedSize,
    Sym::ActiveSize,
    Sym::RequestedSize,
    Sym::Stream,
    Sym::SegmentType,
    Sym::SegmentPoolId,
    Sym::IsExpandable,
    Sym::Frames,
    Sym::Blocks,
    Sym::Size,
    Sym::State,
    Sym::History,
    Sym::RealSize,
    Sym::Addr,
    Sym::Action,
    Sym::TimeUs,
    Sym::CompileContext,
    Sym::UserMetadata,
    Sym::ForwardFrames,
    Sym::PoolId,
    Sym::InternalMetadata,
    Sym::DeviceFree,
    Sym::Category,
    Sym::Filename,
    Sym::Line,
    Sym::Name,
    Sym::Stage,
    Sym::VAlloc,
    Sym::VFreeRequested,
    Sym::VFreeCompleted,
    Sym::VSegmentAlloc,
    Sym::VSegmentFree,
    Sym::VSegmentMap,
    Sym::VSegmentUnmap,
    Sym::VOom,
    Sym::VSnapshot,
    Sym::VAnnotate,
    Sym::VActiveAllocated,
    Sym::VActivePendingFree,
    Sym::VInactive,
    Sym::VSmall,
    Sym::VLarge,
];

/// Decodes a parsed pickle into a [`Snapshot`].
pub fn decode(pickle: &Pickle<'_>, limits: &PickleLimits) -> Result<Snapshot, DecodeError> {
    StreamDecoder::new(limits).finish(pickle)
}

/// Decodes a snapshot while its pickle is read: the [`ListSink`] that takes the lists of
/// `device_traces` and `host_traces` and turns each entry dict into a [`TraceEntry`] as its
/// batch is appended, so that the pickle's arena never holds the trace (see the module
/// docs). Hand it to [`Pickle::from_reader_with`] / [`Pickle::parse_with`], then call
/// [`StreamDecoder::finish`] with the pickle read, or [`StreamDecoder::error`] if the
/// reader stopped with [`crate::ingest::snapshot::pickle::PickleError::Stopped`].
pub struct StreamDecoder {
    st: State,
}

impl StreamDecoder {
    pub fn new(limits: &PickleLimits) -> Self {
        StreamDecoder {
            st: State {
                limits: limits.clone(),
                spent: 0,
                budget_limit: limits.walk_budget(0),
                sym_cache: Vec::new(),
                shared_strs: Vec::new(),
                shared_lines: new_map(),
                identity: Vec::new(),
                frame_by_content: new_map(),
                list_by_hash: new_map(),
                list_next: Vec::new(),
                handle_lists: HandleLists::new(),
                batch_frames: Vec::new(),
                batch_hashes: Vec::new(),
                stream_ids: new_map(),
                scratch: Vec::new(),
                taken: Vec::new(),
                batch_entries: new_map(),
                in_batch: false,
                root: None,
                root_pairs_done: Vec::new(),
                traces_calls: 0,
                error: None,
                out: Snapshot::empty(),
            },
        }
    }

    /// Why the decoder stopped the reader, if it did.
    pub fn error(&mut self) -> Option<DecodeError> {
        self.st.error.take()
    }

    /// Decodes the rest of the pickle (everything that was not taken while it was read).
    pub fn finish(mut self, pickle: &Pickle<'_>) -> Result<Snapshot, DecodeError> {
        if let Some(e) = self.st.error.take() {
            return Err(e);
        }
        self.st.out.protocol = pickle.protocol();
        let limit = self.st.limits.walk_budget(pickle.input_len());
        let mut d = Decoder::new(pickle, &mut self.st, limit);
        d.top(pickle.root())?;
        let mut out = std::mem::replace(&mut self.st.out, Snapshot::empty());
        out.frames.ids.shrink_to_fit();
        Ok(out)
    }
}

impl ListSink for StreamDecoder {
    fn takes(
        &mut self,
        p: &Pickle<'_>,
        stack: &[Handle],
        target: usize,
        offset: u64,
    ) -> Result<bool, ()> {
        let Some(list) = stack.get(target).and_then(|&h| p.as_sequence(h)) else {
            return Ok(false);
        };
        if self.st.taken.iter().any(|t| t.list == list.index() as u32) {
            return Ok(true);
        }
        let Some(k) = traces_key_at(p, stack, target) else {
            return Ok(false);
        };
        let limit = self.st.limits.walk_budget(offset as usize);
        let mut d = Decoder::new(p, &mut self.st, limit);
        let name = match d.sym(stack[k]) {
            Sym::DeviceTraces => "device_traces",
            Sym::HostTraces => "host_traces",
            _ => return Ok(false),
        };
        let outer = p.as_sequence(stack[k + 1]).map_or(0, |o| p.len(o));
        let dev = outer + (target - k - 2);
        // Decode the root's earlier pairs now, so that everything is decoded in file order
        // (frames are numbered as they are first met) whatever is taken.
        if let Err(e) = d.root_pairs_before(stack, k) {
            self.st.error = Some(e);
            return Err(());
        }
        self.st.taken.push(Taken {
            list: list.index() as u32,
            name,
            dev,
            entries: Vec::new(),
            anomalies: Anomalies::default(),
            elements: 0,
            again: 0,
            moved: None,
        });
        Ok(true)
    }

    fn take(
        &mut self,
        p: &Pickle<'_>,
        list: ContainerId,
        elements: &[Handle],
        offset: u64,
    ) -> Result<(), ()> {
        let limit = self.st.limits.walk_budget(offset as usize);
        self.st.budget_limit = limit;
        self.st.batch_entries.clear();
        self.st.in_batch = true;
        let mut d = Decoder::new(p, &mut self.st, limit);
        let result = d.take_entries(list, elements);
        self.st.in_batch = false;
        result.map_err(|e| self.st.error = Some(e))
    }

    fn pipelining(&self) -> Option<fn(&Pickle<'_>, &[Handle], usize) -> bool> {
        Some(might_take)
    }

    fn release(&mut self, _p: &Pickle<'_>, c: ContainerId) -> Option<(u32, u32)> {
        let st = &self.st;
        if let Some(&note) = st.batch_entries.get(&(c.index() as u32)) {
            return Some(note);
        }
        if st.taken.iter().any(|t| t.list == c.index() as u32) {
            return None;
        }
        if st.identity.get(c.index()).is_some_and(|&id| id != 0)
            || st.shared_lines.contains_key(&(c.index() as u32))
        {
            return Some((0, 0));
        }
        None
    }
}

/// Where the key of a list `StreamDecoder::takes` would take sits on the stack: `None`
/// unless the list at `stack[target]` is `root[K][dev]`. Under the list are the previous
/// device lists (if written in one batch), the outer list, then the key K, at an odd stack
/// index above the root dict at the bottom (the pairs between them are the root's earlier
/// pairs, not yet set).
fn traces_key_at(p: &Pickle<'_>, stack: &[Handle], target: usize) -> Option<usize> {
    let mut k = target;
    loop {
        if k == 0 || target - k > 4096 {
            return None;
        }
        k -= 1;
        if !matches!(p.value(stack[k]), Value::List(_)) {
            break;
        }
    }
    if k % 2 == 0 || k + 2 > target || p.as_dict(stack[0]).is_none() {
        return None;
    }
    Some(k)
}

/// Whether `StreamDecoder::takes` could take the list at `stack[target]` if it has not
/// taken it yet: what `takes` checks, on the pickle alone (K is `device_traces` or
/// `host_traces`), so that a pipelined read can ask it while the decoder is on another
/// thread.
fn might_take(p: &Pickle<'_>, stack: &[Handle], target: usize) -> bool {
    stack.get(target).and_then(|&h| p.as_sequence(h)).is_some()
        && traces_key_at(p, stack, target).is_some_and(|k| {
            matches!(
                p.as_str(stack[k]).map(sym_of),
                Some(Sym::DeviceTraces | Sym::HostTraces)
            )
        })
}

/// How many entries of a batch `Decoder::prefetch_frame_lists` warms at a time.
const WARM_SLICE: usize = 64;
/// The largest entry dict (pairs) and frame list (frames) it looks into: a trace entry
/// has about ten keys and a stack rarely a few hundred frames.
const WARM_MAX_PAIRS: usize = 64;
const WARM_MAX_FRAMES: usize = 4096;

/// A list of `device_traces` or `host_traces` taken while the pickle was read.
struct Taken {
    /// Its container index.
    list: u32,
    name: &'static str,
    /// Its index in the outer list, as far as the stack tells while it is read.
    dev: usize,
    entries: Vec<TraceEntry>,
    /// What decoding its entries noted, merged where the list is met in the top level.
    anomalies: Anomalies,
    /// Elements appended (dicts or not).
    elements: u64,
    /// The walk a second reference to the list costs (the sum of its entries' lengths).
    again: u64,
    /// Where `entries` went when the list was placed: `(traces call, index in its output)`.
    moved: Option<(u32, usize)>,
}

/// Decoder state that outlives one borrow of the pickle: the streamed read lends the
/// growing arena to the decoder once per batch.
struct State {
    limits: PickleLimits,
    /// Elements visited so far.
    spent: u64,
    /// The walk budget: [`PickleLimits::walk_budget`] of the input read so far.
    budget_limit: u64,
    /// Blob index → `Sym as u8`, 0 = not looked up yet.
    sym_cache: Vec<u8>,
    /// Blob index → the string, shared: every entry, frame or annotation that refers to
    /// one (memoised, or interned) string holds the same `Arc`, so a megabyte string
    /// referenced a million times is stored once.
    shared_strs: Vec<Option<Arc<str>>>,
    /// Container index → a `forward_frames` list already read, shared likewise.
    shared_lines: FxHashMap<u32, Arc<[Arc<str>]>>,
    /// Container index → interned frame id + 1 (frame dicts) or frame list id + 1 (lists).
    identity: Vec<u32>,
    /// Frames by content: strings are interned by the pickle reader, so their indices
    /// stand for their text and a lookup hashes three numbers, however long the names.
    frame_by_content: FxHashMap<(u32, i64, u32), FrameId>,
    /// Frame lists by content hash → the newest such list `(id, start, len)` (where its ids
    /// are, so that the usual hit costs one lookup and one compare, not a third load);
    /// `list_next` chains earlier lists whose hashes collide.
    list_by_hash: FxHashMap<u64, (u32, u32, u32)>,
    list_next: Vec<u32>,
    /// Frame lists by their elements' handles, for lists made of the same frame dicts as a
    /// list met before (see `frame_list`). Only lists whose content was new are entered
    /// (so it grows with the distinct lists, never with the entries).
    handle_lists: HandleLists,
    /// For each element of the batch being decoded, its `frames` value and that list's
    /// [`dict_handles_hash`], and the hashes alone (both reused from batch to batch).
    batch_frames: Vec<Option<(Handle, Option<u64>)>>,
    batch_hashes: Vec<u64>,
    /// [`Snapshot::streams`] by value.
    stream_ids: FxHashMap<u64, u32>,
    scratch: Vec<FrameId>,
    /// Trace lists taken while the pickle was read.
    taken: Vec<Taken>,
    /// Containers read whole in the current batch → the note they are released with:
    /// entry dicts → `(taken index, entry index)`, pool id tuples → their pair.
    batch_entries: FxHashMap<u32, (u32, u32)>,
    /// A batch is being taken (only then is `batch_entries` filled).
    in_batch: bool,
    /// The root dict whose first pairs were decoded while it was read, and those pairs.
    root: Option<Handle>,
    root_pairs_done: Vec<(Handle, Handle)>,
    traces_calls: u32,
    /// Why the reader was stopped.
    error: Option<DecodeError>,
    out: Snapshot,
}

/// The decoder with the pickle lent to it.
struct Decoder<'p, 'a, 's> {
    p: &'p Pickle<'a>,
    st: &'s mut State,
}

impl std::ops::Deref for Decoder<'_, '_, '_> {
    type Target = State;
    fn deref(&self) -> &State {
        self.st
    }
}

impl std::ops::DerefMut for Decoder<'_, '_, '_> {
    fn deref_mut(&mut self) -> &mut State {
        self.st
    }
}

/// Describes a value for "not a snapshot" messages.
fn describe(p: &Pickle<'_>, h: Handle) -> String {
    match p.value(h) {
        Value::Dict(c) => {
            let mut keys: Vec<String> = p
                .pairs(c)
                .take(12)
                .map(|(k, _)| match p.value(k) {
                    Value::Str(s) => s.chars().take(40).collect(),
                    other => format!("<{}>", other.type_name()),
                })
                .collect();
            if p.len(c) > 12 {
                keys.push("...".into());
            }
            format!("a dict with {} keys [{}]", p.len(c), keys.join(", "))
        }
        Value::List(c) | Value::Tuple(c) | Value::Set(c) | Value::FrozenSet(c) => {
            let kind = p.value(h).type_name();
            let first = p.items(c).next().map(|e| p.value(e).type_name());
            match first {
                Some(t) => format!("a {kind} of {} values (the first is a {t})", p.len(c)),
                None => format!("an empty {kind}"),
            }
        }
        Value::Str(s) => format!("a string ({:?})", s.chars().take(40).collect::<String>()),
        other => format!("a single {}", other.type_name()),
    }
}

impl<'p, 'a, 's> Decoder<'p, 'a, 's> {
    /// Lends `p` to the state, whose per-object tables grow to the pickle's counts.
    fn new(p: &'p Pickle<'a>, st: &'s mut State, budget_limit: u64) -> Self {
        st.budget_limit = budget_limit;
        if st.sym_cache.len() < p.blob_count() {
            st.sym_cache.resize(p.blob_count(), 0);
            st.shared_strs.resize(p.blob_count(), None);
        }
        if st.identity.len() < p.container_count() {
            st.identity.resize(p.container_count(), 0);
        }
        Decoder { p, st }
    }

    #[inline]
    fn spend(&mut self, n: u64, path: impl FnOnce() -> String) -> Result<(), DecodeError> {
        match self.st.spent.checked_add(n) {
            Some(total) if total <= self.st.budget_limit => {
                self.st.spent = total;
                Ok(())
            }
            _ => Err(DecodeError::WalkBudget {
                limit: self.st.budget_limit,
                path: path(),
            }),
        }
    }

    #[inline]
    fn sym(&mut self, h: Handle) -> Sym {
        let Some(i) = self.p.str_index(h) else {
            return Sym::Unknown;
        };
        match self.sym_cache.get(i) {
            Some(&c) if c != 0 => SYM_TABLE.get(c as usize).copied().unwrap_or(Sym::Unknown),
            Some(_) => {
                let s = sym_of(self.p.as_str(h).unwrap_or(""));
                self.sym_cache[i] = s as u8;
                s
            }
            None => Sym::Unknown,
        }
    }

    fn u64_field(&mut self, h: Handle, path: &dyn Fn() -> String) -> u64 {
        match self.p.as_u64(h) {
            Some(v) => v,
            None => {
                let found = self.p.value(h);
                // Say what the number was: "found int" hides a size of 2^70 or -1.
                self.out.anomalies.note(|| match found {
                    Value::Int(v) => format!("{}: {v} is negative", path()),
                    Value::BigInt(b) if !b.saturated => {
                        format!("{}: {} does not fit in 64 bits", path(), b.value)
                    }
                    Value::BigInt(_) => format!("{}: an integer wider than 128 bits", path()),
                    other => format!(
                        "{}: expected a non-negative int, found {}",
                        path(),
                        other.type_name()
                    ),
                });
                0
            }
        }
    }

    fn i64_field(&mut self, h: Handle, path: &dyn Fn() -> String) -> i64 {
        match self.p.value(h) {
            Value::Int(v) => v,
            Value::Bool(b) => b as i64,
            Value::BigInt(b) => b.value.clamp(i64::MIN as i128, i64::MAX as i128) as i64,
            other => {
                self.out
                    .anomalies
                    .note(|| format!("{}: expected an int, found {}", path(), other.type_name()));
                0
            }
        }
    }

    fn pair_field(&mut self, h: Handle) -> Option<(i64, i64)> {
        let c = self.p.as_sequence(h)?;
        let tuple = matches!(self.p.value(h), Value::Tuple(_));
        if tuple {
            // A pool id tuple of an earlier batch: its pair is the note it was released with.
            if let Some((a, b)) = self.p.released(c) {
                return Some((a as i64, b as i64));
            }
        }
        let mut it = self.p.items(c);
        let a = self.p.as_i64(it.next()?)?;
        let b = self.p.as_i64(it.next()?)?;
        if tuple && self.in_batch {
            if let (Ok(na), Ok(nb)) = (u32::try_from(a), u32::try_from(b)) {
                // Read whole (a pair is all the decoder reads of a tuple): releasable.
                self.st.batch_entries.insert(c.index() as u32, (na, nb));
            }
        }
        Some((a, b))
    }

    /// The string a handle holds, shared with every other reference to it.
    fn text(&mut self, h: Handle) -> Option<Arc<str>> {
        let i = self.p.str_index(h)?;
        if let Some(Some(s)) = self.shared_strs.get(i) {
            return Some(s.clone());
        }
        let s: Arc<str> = Arc::from(self.p.as_str(h)?);
        if let Some(slot) = self.shared_strs.get_mut(i) {
            *slot = Some(s.clone());
        }
        Some(s)
    }

    fn top(&mut self, root: Handle) -> Result<(), DecodeError> {
        match self.p.value(root) {
            Value::List(c) => {
                // A bare segment list. Refuse lists that are clearly something else.
                if let Some(first) = self.p.items(c).next() {
                    let looks_like_segment = self.p.as_dict(first).is_some_and(|d| {
                        self.p.dict_get(d, "blocks").is_some()
                            || self.p.dict_get(d, "total_size").is_some()
                    });
                    if !looks_like_segment {
                        return Err(DecodeError::NotASnapshot(NotASnapshot {
                            found: format!("{}, not a list of segments", describe(self.p, root)),
                        }));
                    }
                }
                self.out.layout = Layout::SegmentList;
                self.segments(c, false)?;
                Ok(())
            }
            Value::Dict(c) => {
                if self.p.dict_get(c, "segments").is_none() {
                    return Err(DecodeError::NotASnapshot(NotASnapshot {
                        found: format!("{} but no `segments`", describe(self.p, root)),
                    }));
                }
                self.out.layout = Layout::Dict;
                let pairs: Vec<(Handle, Handle)> = self.p.pairs(c).collect();
                self.spend(pairs.len() as u64, || "top level".into())?;
                // Pairs decoded while the file was read must be the root's first pairs.
                let done = self.root_pairs_done.len();
                if done > 0
                    && (self.root != Some(root)
                        || pairs.get(..done) != Some(&self.root_pairs_done[..]))
                {
                    return Err(DecodeError::NotASnapshot(NotASnapshot {
                        found: "a pickle whose top-level dict changes after its traces were read (pickle.dump never writes that)".into(),
                    }));
                }
                for &(k, v) in &pairs[done..] {
                    self.top_pair(k, v)?;
                }
                Ok(())
            }
            _ => Err(DecodeError::NotASnapshot(NotASnapshot {
                found: describe(self.p, root),
            })),
        }
    }

    /// While the pickle is read, before the list of a trace key at `stack[key]` is taken:
    /// decodes the root's pairs that come before it (set in the root dict, or still on the
    /// stack between the root and the key), so that the file is decoded in its order.
    fn root_pairs_before(&mut self, stack: &[Handle], key: usize) -> Result<(), DecodeError> {
        let root = stack[0];
        let Some(c) = self.p.as_dict(root) else {
            return Ok(());
        };
        if self.root.is_some_and(|r| r != root) {
            return Ok(());
        }
        self.root = Some(root);
        let pairs: Vec<(Handle, Handle)> = self
            .p
            .pairs(c)
            .chain(stack[1..key].chunks_exact(2).map(|kv| (kv[0], kv[1])))
            .collect();
        for &(k, v) in pairs.iter().skip(self.root_pairs_done.len()) {
            self.top_pair(k, v)?;
            self.st.root_pairs_done.push((k, v));
        }
        Ok(())
    }

    /// One pair of the top-level dict.
    fn top_pair(&mut self, k: Handle, v: Handle) -> Result<(), DecodeError> {
        {
            {
                {
                    match self.sym(k) {
                        Sym::Segments => match self.p.as_sequence(v) {
                            Some(l) => {
                                self.out.segments.clear();
                                self.out.blocks.clear();
                                self.segments(l, false)?
                            }
                            None => {
                                return Err(DecodeError::NotASnapshot(NotASnapshot {
                                    found: format!(
                                        "a dict whose `segments` is {}",
                                        describe(self.p, v)
                                    ),
                                }));
                            }
                        },
                        Sym::DeviceTraces => {
                            self.out.markers.has_device_traces = true;
                            self.out.traces = self.traces(v, "device_traces")?;
                        }
                        Sym::HostSegments => {
                            self.out.markers.has_host_segments = true;
                            if let Some(l) = self.p.as_sequence(v) {
                                self.segments(l, true)?;
                            }
                        }
                        Sym::HostTraces => {
                            self.out.markers.has_host_segments = true;
                            self.out.host_traces = self.traces(v, "host_traces")?;
                        }
                        Sym::AllocatorSettings => {
                            self.out.markers.has_allocator_settings = true;
                            self.allocator_settings(v)?;
                        }
                        Sym::ExternalAnnotations => {
                            self.out.markers.has_external_annotations = true;
                            self.annotations(v)?;
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }

    fn segments(&mut self, list: ContainerId, host: bool) -> Result<(), DecodeError> {
        let n = self.p.len(list);
        self.spend(n as u64, || "segments".into())?;
        let name = if host { "host_segments" } else { "segments" };
        for (i, h) in self.p.items(list).enumerate() {
            let Some(d) = self.p.as_dict(h) else {
                let found = self.p.value(h).type_name();
                self.out
                    .anomalies
                    .note(|| format!("{name}[{i}]: expected a dict, found {found}"));
                continue;
            };
            let seg = self.segment(d, name, i)?;
            if host {
                self.out.host_segments.push(seg);
            } else {
                self.out.segments.push(seg);
            }
        }
        Ok(())
    }

    fn segment(&mut self, d: ContainerId, name: &str, i: usize) -> Result<Segment, DecodeError> {
        let path = || format!("{name}[{i}]");
        self.spend(self.p.len(d) as u64, path)?;
        let mut seg = Segment {
            device: 0,
            address: 0,
            total_size: 0,
            allocated_size: 0,
            active_size: 0,
            requested_size: 0,
            stream: 0,
            segment_type: SegmentType::Unknown,
            pool_id: (0, 0),
            is_expandable: false,
            frames: FrameListId::EMPTY,
            blocks: 0..0,
        };
        let mut blocks_handle = None;
        let p = self.p;
        for (k, v) in p.pairs(d) {
            let field = self.sym(k);
            let fpath = || format!("{name}[{i}].{}", p.as_str(k).unwrap_or("?"));
            match field {
                Sym::Device => seg.device = self.i64_field(v, &fpath),
                Sym::Address => seg.address = self.u64_field(v, &fpath),
                Sym::TotalSize => seg.total_size = self.u64_field(v, &fpath),
                Sym::AllocatedSize => seg.allocated_size = self.u64_field(v, &fpath),
                Sym::ActiveSize => seg.active_size = self.u64_field(v, &fpath),
                Sym::RequestedSize => seg.requested_size = self.u64_field(v, &fpath),
                Sym::Stream => seg.stream = self.p.as_u64(v).unwrap_or(0),
                Sym::SegmentType => {
                    seg.segment_type = match self.sym(v) {
                        Sym::VSmall => SegmentType::Small,
                        Sym::VLarge => SegmentType::Large,
                        _ => SegmentType::Unknown,
                    }
                }
                Sym::SegmentPoolId => {
                    self.out.markers.segment_pool_id = true;
                    match self.pair_field(v) {
                        Some(p) => seg.pool_id = p,
                        None => self
                            .out
                            .anomalies
                            .note(|| format!("{}: expected a pair of ints", fpath())),
                    }
                }
                Sym::IsExpandable => seg.is_expandable = self.p.as_bool(v).unwrap_or(false),
                Sym::Frames => seg.frames = self.frame_list(v)?,
                Sym::Blocks => blocks_handle = Some(v),
                _ => {}
            }
        }
        let start = self.out.blocks.len() as u32;
        if let Some(bh) = blocks_handle {
            match self.p.as_sequence(bh) {
                Some(bl) => self.blocks(bl, &seg, name, i)?,
                None => self
                    .out
                    .anomalies
                    .note(|| format!("{name}[{i}].blocks: expected a list")),
            }
        }
        seg.blocks = start..self.out.blocks.len() as u32;
        Ok(seg)
    }

    fn blocks(
        &mut self,
        list: ContainerId,
        seg: &Segment,
        name: &str,
        si: usize,
    ) -> Result<(), DecodeError> {
        self.spend(self.p.len(list) as u64, || format!("{name}[{si}].blocks"))?;
        // Legacy blocks have no address: they tile the segment in order from its base.
        let mut next_address = seg.address;
        for (bi, h) in self.p.items(list).enumerate() {
            let Some(d) = self.p.as_dict(h) else {
                self.out
                    .anomalies
                    .note(|| format!("{name}[{si}].blocks[{bi}]: expected a dict"));
                continue;
            };
            self.spend(self.p.len(d) as u64, || {
                format!("{name}[{si}].blocks[{bi}]")
            })?;
            let mut address = None;
            let mut size = 0;
            let mut requested = None;
            let mut state = BlockState::Unknown;
            let mut frames = FrameListId::EMPTY;
            let mut history = None;
            let p = self.p;
            for (k, v) in p.pairs(d) {
                let fpath = || format!("{name}[{si}].blocks[{bi}].{}", p.as_str(k).unwrap_or("?"));
                match self.sym(k) {
                    Sym::Address => address = Some(self.u64_field(v, &fpath)),
                    Sym::Size => size = self.u64_field(v, &fpath),
                    Sym::RequestedSize => requested = Some(self.u64_field(v, &fpath)),
                    Sym::State => {
                        state = match self.sym(v) {
                            Sym::VActiveAllocated => BlockState::ActiveAllocated,
                            Sym::VActivePendingFree => BlockState::ActivePendingFree,
                            Sym::VInactive => BlockState::Inactive,
                            _ => {
                                self.out
                                    .anomalies
                                    .note(|| format!("{}: unknown state", fpath()));
                                BlockState::Unknown
                            }
                        }
                    }
                    Sym::Frames => frames = self.frame_list(v)?,
                    Sym::History => history = Some(v),
                    _ => {}
                }
            }
            let legacy = address.is_none() || history.is_some();
            if legacy {
                self.out.markers.legacy_blocks = true;
                if requested.is_some() {
                    self.out.markers.legacy_requested_size = true;
                }
            }
            // Legacy: frames and requested size come from the first history record, as
            // `_memory_viz` reads them.
            if let Some(hh) = history {
                if let Some(first) = self.p.as_sequence(hh).and_then(|l| self.p.items(l).next()) {
                    if let Some(rec) = self.p.as_dict(first) {
                        self.spend(self.p.len(rec) as u64, || {
                            format!("{name}[{si}].blocks[{bi}].history[0]")
                        })?;
                        for (k, v) in self.p.pairs(rec) {
                            match self.sym(k) {
                                Sym::Frames if frames.is_empty() => frames = self.frame_list(v)?,
                                Sym::RealSize if requested.is_none() => {
                                    requested = self.p.as_u64(v)
                                }
                                _ => {}
                            }
                        }
                    }
                }
            }
            let computed = address.is_none();
            let address = address.unwrap_or(next_address);
            next_address = address.saturating_add(size);
            self.out.blocks.push(Block {
                address,
                size,
                requested_size: requested.unwrap_or(size),
                state,
                frames,
                address_computed: computed,
            });
        }
        Ok(())
    }

    fn traces(
        &mut self,
        h: Handle,
        name: &'static str,
    ) -> Result<Vec<Vec<TraceEntry>>, DecodeError> {
        let Some(devices) = self.p.as_sequence(h) else {
            self.out
                .anomalies
                .note(|| format!("{name}: expected a list of lists"));
            return Ok(Vec::new());
        };
        self.spend(self.p.len(devices) as u64, || name.into())?;
        self.st.traces_calls += 1;
        let call = self.traces_calls;
        let mut out: Vec<Vec<TraceEntry>> = Vec::with_capacity(self.p.len(devices));
        for (dev, th) in self.p.items(devices).enumerate() {
            let Some(list) = self.p.as_sequence(th) else {
                self.out
                    .anomalies
                    .note(|| format!("{name}[{dev}]: expected a list"));
                out.push(Vec::new());
                continue;
            };
            if let Some(t) = self
                .taken
                .iter()
                .position(|t| t.list == list.index() as u32)
            {
                // Decoded while the file was read.
                let (elements, again, moved) = {
                    let t = &self.taken[t];
                    (t.elements, t.again, t.moved)
                };
                self.spend(elements, || format!("{name}[{dev}]"))?;
                let noted = self.taken[t].anomalies.clone();
                self.out.anomalies.merge(noted);
                let entries = match moved {
                    None => {
                        self.st.taken[t].moved = Some((call, out.len()));
                        std::mem::take(&mut self.st.taken[t].entries)
                    }
                    Some(at) => {
                        // The same list twice: as dear as walking it again.
                        self.spend(again, || format!("{name}[{dev}]"))?;
                        self.moved_entries(&out, call, at).to_vec()
                    }
                };
                self.out.markers.trace_entries += entries.len();
                out.push(entries);
                continue;
            }
            self.spend(self.p.len(list) as u64, || format!("{name}[{dev}]"))?;
            let mut entries = Vec::with_capacity(self.p.len(list));
            for (i, eh) in self.p.items(list).enumerate() {
                let Some(d) = self.entry_dict(eh, name, dev, i) else {
                    continue;
                };
                if let Some(note) = self.p.released(d) {
                    if let Some(e) = self.released_entry(&out, &entries, note) {
                        entries.push(e);
                    }
                    continue;
                }
                let e = self.entry(d, name, dev, i, None)?;
                entries.push(e);
            }
            self.out.markers.trace_entries += entries.len();
            out.push(entries);
        }
        Ok(out)
    }

    /// The entries of a taken list placed earlier: `at` is where (see [`Taken::moved`]).
    fn moved_entries<'o>(
        &'o self,
        out: &'o [Vec<TraceEntry>],
        call: u32,
        at: (u32, usize),
    ) -> &'o [TraceEntry] {
        let found = if at.0 == call {
            out.get(at.1)
        } else {
            // An earlier `device_traces` / `host_traces` pair (a duplicate key).
            self.out
                .traces
                .get(at.1)
                .or_else(|| self.out.host_traces.get(at.1))
        };
        found.map_or(&[], |v| v.as_slice())
    }

    /// Trace entry `name[dev][i]` as a dict, or an anomaly noted for it (the whole-list
    /// and the streamed decode read entries the same way).
    fn entry_dict(&mut self, eh: Handle, name: &str, dev: usize, i: usize) -> Option<ContainerId> {
        let d = self.p.as_dict(eh);
        if d.is_none() {
            self.out
                .anomalies
                .note(|| format!("{name}[{dev}][{i}]: expected a dict"));
        }
        d
    }

    /// A copy of an entry dict already decoded into a taken list (its note: the taken
    /// index and the entry's index). `current` holds the entries of the list being built.
    fn released_entry(
        &self,
        out: &[Vec<TraceEntry>],
        current: &[TraceEntry],
        note: (u32, u32),
    ) -> Option<TraceEntry> {
        let t = self.taken.get(note.0 as usize)?;
        let pos = note.1 as usize;
        match t.moved {
            None => t.entries.get(pos).copied(),
            Some(at) => self
                .moved_entries(out, self.traces_calls, at)
                .get(pos)
                .or_else(|| current.get(pos))
                .copied(),
        }
    }

    /// The elements of a batch appended to a taken list: each entry dict is decoded now.
    fn take_entries(&mut self, list: ContainerId, elements: &[Handle]) -> Result<(), DecodeError> {
        let Some(slot) = self
            .taken
            .iter()
            .position(|t| t.list == list.index() as u32)
        else {
            return Ok(());
        };
        // The list's record is moved out while its entries are decoded (its anomalies are
        // noted apart, to be merged where the list is met in the top level), then back.
        let mut t = std::mem::replace(
            &mut self.st.taken[slot],
            Taken {
                list: u32::MAX,
                name: "",
                dev: 0,
                entries: Vec::new(),
                anomalies: Anomalies::default(),
                elements: 0,
                again: 0,
                moved: None,
            },
        );
        std::mem::swap(&mut self.st.out.anomalies, &mut t.anomalies);
        let result = self.take_into(&mut t, slot, elements);
        std::mem::swap(&mut self.st.out.anomalies, &mut t.anomalies);
        self.st.taken[slot] = t;
        result
    }

    fn take_into(
        &mut self,
        t: &mut Taken,
        slot: usize,
        elements: &[Handle],
    ) -> Result<(), DecodeError> {
        let (name, dev) = (t.name, t.dev);
        for (k, &eh) in elements.iter().enumerate() {
            // Warmed a slice at a time: what a whole batch (1,000 entries) loads would
            // push out of a core's cache what the decode of its first entries needs.
            if k % WARM_SLICE == 0 {
                let slice = &elements[k..elements.len().min(k + WARM_SLICE)];
                self.prefetch_frame_lists(slice);
            }
            let hashed = self.st.batch_frames.get(k % WARM_SLICE).copied().flatten();
            let i = t.elements as usize;
            t.elements += 1;
            let Some(d) = self.entry_dict(eh, name, dev, i) else {
                continue;
            };
            if let Some(note) = self.p.released(d) {
                // An entry dict of an earlier batch, handed back by the memo.
                self.spend(1, || format!("{name}[{dev}][{i}]"))?;
                let e = if note.0 as usize == slot {
                    t.entries.get(note.1 as usize).copied()
                } else {
                    self.released_entry(&[], &[], note)
                };
                if let Some(e) = e {
                    t.entries.push(e);
                }
                continue;
            }
            t.again += self.p.len(d) as u64;
            let e = self.entry(d, name, dev, i, hashed)?;
            let pos = t.entries.len() as u32;
            self.st
                .batch_entries
                .insert(d.index() as u32, (slot as u32, pos));
            t.entries.push(e);
        }
        Ok(())
    }

    /// Starts loading what the fast path of [`Decoder::frame_list`] will compare for each
    /// of these entries (a slice of a batch) before they are decoded: a trace's stacks
    /// repeat in no order the cache can follow, so one entry's lookup would otherwise wait
    /// on memory before the next one's could start. Here the slice's lookups are
    /// independent of one another and their loads overlap.
    ///
    /// Leaves in `batch_frames` each element's `frames` list and its handle hash, for
    /// `frame_list` not to hash it again. Each entry's pairs are walked here and again by
    /// `entry` (a dozen cached key lookups): decoding the slice first and resolving its
    /// lists after would reorder what the decode notes and charges to the walk budget.
    ///
    /// This walk is not charged to the walk budget (the decode that follows is), so it
    /// skips what no trace entry is: a dict of more than [`WARM_MAX_PAIRS`] pairs, a list
    /// of more than [`WARM_MAX_FRAMES`] frames (`frame_list` hashes those itself, once
    /// charged for them).
    fn prefetch_frame_lists(&mut self, elements: &[Handle]) {
        let mut frames_of = std::mem::take(&mut self.st.batch_frames);
        let mut hashes = std::mem::take(&mut self.st.batch_hashes);
        frames_of.clear();
        hashes.clear();
        for &eh in elements {
            let mut frames = None;
            if let Some(d) = self.p.as_dict(eh) {
                // A dict's length counts its pairs.
                if self.p.len(d) <= WARM_MAX_PAIRS {
                    for (k, v) in self.p.pairs(d) {
                        if self.sym(k) == Sym::Frames {
                            frames = Some(v);
                        }
                    }
                }
            }
            let hash = frames
                .and_then(|v| self.p.as_sequence(v))
                .and_then(|c| self.p.items_slice(c))
                .filter(|items| items.len() <= WARM_MAX_FRAMES)
                .and_then(dict_handles_hash);
            frames_of.push(frames.map(|v| (v, hash)));
            hashes.extend(hash);
        }
        std::hint::black_box(self.st.handle_lists.warm(&hashes));
        self.st.batch_frames = frames_of;
        self.st.batch_hashes = hashes;
    }

    /// One trace entry; `hashed`: its `frames` value and that list's handle hash, where the
    /// batch's warm-up took it.
    fn entry(
        &mut self,
        d: ContainerId,
        name: &str,
        dev: usize,
        i: usize,
        hashed: Option<(Handle, Option<u64>)>,
    ) -> Result<TraceEntry, DecodeError> {
        self.spend(self.p.len(d) as u64, || format!("{name}[{dev}][{i}]"))?;
        let mut e = TraceEntry {
            addr: 0,
            size: 0,
            time_us: NO_TIME,
            frames: FrameListId::EMPTY,
            extra: NO_EXTRA,
            stream: NO_STREAM,
            action: Action::Other,
        };
        let mut extra: Option<EntryExtra> = None;
        for (k, v) in self.p.pairs(d) {
            match self.sym(k) {
                Sym::Action => {
                    e.action = match self.sym(v) {
                        Sym::VAlloc => Action::Alloc,
                        Sym::VFreeRequested => Action::FreeRequested,
                        Sym::VFreeCompleted => Action::FreeCompleted,
                        Sym::VSegmentAlloc => Action::SegmentAlloc,
                        Sym::VSegmentFree => Action::SegmentFree,
                        Sym::VSegmentMap => Action::SegmentMap,
                        Sym::VSegmentUnmap => Action::SegmentUnmap,
                        Sym::VOom => Action::Oom,
                        Sym::VSnapshot => Action::Snapshot,
                        Sym::VAnnotate => {
                            self.out.markers.annotate_action = true;
                            Action::Annotate
                        }
                        _ => Action::Other,
                    }
                }
                Sym::Addr => e.addr = self.p.as_u64(v).unwrap_or(0),
                Sym::Size => {
                    e.size = self.u64_field(v, &|| format!("{name}[{dev}][{i}].size"));
                }
                Sym::Stream => e.stream = self.stream_index(self.p.as_u64(v).unwrap_or(0)),
                Sym::TimeUs => {
                    self.out.markers.time_us = true;
                    e.time_us = self.p.as_i64(v).unwrap_or(NO_TIME);
                }
                Sym::Frames => {
                    // The hash the batch's warm-up took of this very list, if it did.
                    let hash = hashed.filter(|&(of, _)| of == v).map(|(_, hash)| hash);
                    e.frames = self.frame_list_hashed(v, hash)?;
                }
                Sym::DeviceFree => extra.get_or_insert_default().device_free = self.p.as_u64(v),
                Sym::CompileContext => {
                    self.out.markers.compile_context = true;
                    if self.p.as_str(v).is_some_and(|s| s != "N/A") {
                        extra.get_or_insert_default().compile_context = self.text(v);
                    }
                }
                Sym::UserMetadata => {
                    self.out.markers.user_metadata = true;
                    if self.p.as_str(v).is_some_and(|s| !s.is_empty()) {
                        extra.get_or_insert_default().user_metadata = self.text(v);
                    }
                }
                Sym::ForwardFrames => {
                    self.out.markers.forward_frames = true;
                    if let Some(l) = self.p.as_sequence(v) {
                        // One list shared by many entries is read (and paid for) once.
                        let lines = match self.shared_lines.get(&(l.index() as u32)) {
                            Some(lines) => lines.clone(),
                            None => {
                                self.spend(self.p.len(l) as u64, || {
                                    format!("{name}[{dev}][{i}].forward_frames")
                                })?;
                                let lines: Arc<[Arc<str>]> = self
                                    .p
                                    .items(l)
                                    .filter_map(|s| self.text(s))
                                    .collect::<Vec<_>>()
                                    .into();
                                self.shared_lines.insert(l.index() as u32, lines.clone());
                                lines
                            }
                        };
                        extra.get_or_insert_default().forward_frames = Some(lines);
                    }
                }
                Sym::PoolId => {
                    self.out.markers.pool_id = true;
                    if let Some(p) = self.pair_field(v) {
                        if p != (0, 0) {
                            extra.get_or_insert_default().pool_id = Some(p);
                        }
                    }
                }
                Sym::InternalMetadata => {
                    self.out.markers.internal_metadata = true;
                    extra.get_or_insert_default().internal_metadata = self.text(v);
                }
                Sym::Category => {
                    self.out.markers.category = true;
                    extra.get_or_insert_default().category = self.text(v);
                }
                _ => {}
            }
        }
        if let Some(x) = extra {
            e.extra = self.out.extras.len() as u32;
            self.out.extras.push(x);
        }
        Ok(e)
    }

    /// Interns a frame list (by identity, then content).
    fn frame_list(&mut self, h: Handle) -> Result<FrameListId, DecodeError> {
        self.frame_list_hashed(h, None)
    }

    /// [`Decoder::frame_list`], given the list's [`dict_handles_hash`] where it is known
    /// (`Some(None)`: known not to have one).
    fn frame_list_hashed(
        &mut self,
        h: Handle,
        hashed: Option<Option<u64>>,
    ) -> Result<FrameListId, DecodeError> {
        let Some(c) = self.p.as_sequence(h) else {
            return Ok(FrameListId::EMPTY);
        };
        if let Some(&id) = self.identity.get(c.index()) {
            if id != 0 {
                return Ok(FrameListId(id - 1));
            }
        }
        if self.p.is_empty(c) {
            self.remember(c, 0);
            return Ok(FrameListId::EMPTY);
        }
        self.spend(self.p.len(c) as u64, || "a frame list".into())?;
        // Fast path: a list of the very frame dicts (same handles, so the same frames) of a
        // list met before. PyTorch shares frame dicts but writes a fresh list per entry, so
        // this is the usual case. The candidate is found from the handles alone, so the
        // reads that verify it (each dict's known id against the list's ids) are independent
        // of one another and of the lookup, instead of a chain of misses (identities, then
        // the hash of the ids, then the table, then the ids).
        let slice = self.p.items_slice(c);
        let mut by_handles = None;
        if let Some(items) = slice {
            let hash = hashed.unwrap_or_else(|| dict_handles_hash(items));
            if let Some(hash) = hash {
                if let Some(id) = self.handle_lists.get(hash, items) {
                    self.remember(c, id);
                    return Ok(FrameListId(id));
                }
                by_handles = Some(hash);
            }
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        // Hash the ids while collecting them (the multiply-rotate of `fxhash`): lists are
        // then found by a u64 key and compared against the table's contiguous ids, with
        // no per-lookup allocation.
        let mut hash = scratch.len() as u64;
        for fh in self.p.items(c) {
            if let Some(fd) = self.p.as_dict(fh) {
                let id = match self.identity.get(fd.index()) {
                    Some(&known) if known != 0 => known - 1,
                    _ => self.frame(fd)?,
                };
                hash = fxhash::mix(hash, id as u64);
                scratch.push(id);
            }
        }
        let newest = self.list_by_hash.get(&hash).copied();
        let mut candidate = match newest {
            Some((id, start, len)) => {
                let ids = &self.out.frames.ids;
                if len as usize == scratch.len()
                    && ids.get(start as usize..(start + len) as usize) == Some(&scratch[..])
                {
                    self.scratch = scratch;
                    self.remember(c, id);
                    return Ok(FrameListId(id));
                }
                self.list_next.get(id as usize).copied().unwrap_or(NO_LIST)
            }
            None => NO_LIST,
        };
        while candidate != NO_LIST
            && self.out.frames.list(FrameListId(candidate)) != scratch.as_slice()
        {
            candidate = self
                .list_next
                .get(candidate as usize)
                .copied()
                .unwrap_or(NO_LIST);
        }
        let id = if candidate != NO_LIST {
            candidate
        } else {
            let id = self.out.frames.lists.len() as u32;
            let start = self.out.frames.ids.len() as u32;
            self.out.frames.ids.extend_from_slice(&scratch);
            self.out.frames.lists.push((start, scratch.len() as u32));
            // Chain in front of any earlier list with the same hash.
            let previous = self
                .list_by_hash
                .insert(hash, (id, start, scratch.len() as u32))
                .map_or(NO_LIST, |(prev, _, _)| prev);
            if self.list_next.len() <= id as usize {
                self.list_next.resize(id as usize + 1, NO_LIST);
            }
            self.list_next[id as usize] = previous;
            // A new list: enter it for the fast path (once per distinct list).
            if let (Some(hash), Some(items)) = (by_handles, slice) {
                self.st.handle_lists.insert(hash, items, id);
            }
            id
        };
        self.scratch = scratch;
        self.remember(c, id);
        Ok(FrameListId(id))
    }

    /// The index of stream `value` in [`Snapshot::streams`], entered when new.
    fn stream_index(&mut self, value: u64) -> u32 {
        // Consecutive entries are mostly on one stream.
        if let Some(&last) = self.out.streams.last() {
            if last == value {
                return self.out.streams.len() as u32 - 1;
            }
        }
        let next = self.out.streams.len() as u32;
        let id = *self.st.stream_ids.entry(value).or_insert(next);
        if id == next {
            self.out.streams.push(value);
        }
        id
    }

    fn remember(&mut self, c: ContainerId, id: u32) {
        if let Some(slot) = self.identity.get_mut(c.index()) {
            *slot = id + 1;
        }
    }

    /// Interns one frame dict (by identity, then content).
    fn frame(&mut self, d: ContainerId) -> Result<FrameId, DecodeError> {
        if let Some(&id) = self.identity.get(d.index()) {
            if id != 0 {
                return Ok(id - 1);
            }
        }
        self.spend(self.p.len(d) as u64, || "a frame".into())?;
        let p = self.p;
        let mut filename = "";
        let mut line = 0i64;
        let mut name = "";
        let (mut filename_h, mut name_h) = (None, None);
        for (k, v) in p.pairs(d) {
            match self.sym(k) {
                Sym::Filename => {
                    filename = p.as_str(v).unwrap_or("");
                    filename_h = Some(v);
                }
                Sym::Line => line = p.as_i64(v).unwrap_or(0),
                Sym::Name => {
                    name = p.as_str(v).unwrap_or("");
                    name_h = Some(v);
                }
                _ => {}
            }
        }
        let key = (
            filename_h
                .and_then(|h| p.str_index(h))
                .map_or(u32::MAX, |i| i as u32),
            line,
            name_h
                .and_then(|h| p.str_index(h))
                .map_or(u32::MAX, |i| i as u32),
        );
        let id = match self.frame_by_content.get(&key) {
            Some(&id) => id,
            None => {
                // The analysis scans each distinct frame's names (classification, site
                // labels): that work is paid for here, so many frames that share one
                // enormous file name end in a clean error instead of hours of scanning.
                let text_len = (filename.len() + name.len()) as u64;
                self.spend(2 * text_len, || "a frame's file and function names".into())?;
                let id = self.out.frames.frames.len() as FrameId;
                let filename_s = filename_h.and_then(|h| self.text(h));
                let name_s = name_h.and_then(|h| self.text(h));
                self.out.frames.frames.push(Frame {
                    filename: filename_s.unwrap_or_else(|| Arc::from("")),
                    line,
                    name: name_s.unwrap_or_else(|| Arc::from("")),
                });
                self.frame_by_content.insert(key, id);
                id
            }
        };
        self.remember(d, id);
        Ok(id)
    }

    fn allocator_settings(&mut self, h: Handle) -> Result<(), DecodeError> {
        let Some(d) = self.p.as_dict(h) else {
            self.out
                .anomalies
                .note(|| "allocator_settings: expected a dict".into());
            return Ok(());
        };
        self.spend(self.p.len(d) as u64, || "allocator_settings".into())?;
        let mut s = AllocatorSettings::default();
        for (k, v) in self.p.pairs(d) {
            let Some(key) = self.p.as_str(k) else {
                continue;
            };
            match key {
                "PYTORCH_CUDA_ALLOC_CONF" | "PYTORCH_ALLOC_CONF" | "PYTORCH_HIP_ALLOC_CONF" => {
                    s.alloc_conf = self.p.as_str(v).map(str::to_string)
                }
                "max_split_size" => {
                    // -1 (SIZE_MAX cast to int64) means unlimited.
                    s.max_split_size = match self.p.value(v) {
                        Value::Int(n) if n >= 0 => Some(n as u64),
                        Value::BigInt(b) => b.to_u64().filter(|&n| n != u64::MAX),
                        _ => None,
                    }
                }
                "garbage_collection_threshold" => s.garbage_collection_threshold = self.p.as_f64(v),
                "expandable_segments" => s.expandable_segments = self.p.as_bool(v),
                "release_lock_on_cudamalloc" => s.release_lock_on_cudamalloc = self.p.as_bool(v),
                "pinned_use_cuda_host_register" => {
                    s.pinned_use_cuda_host_register = self.p.as_bool(v)
                }
                "pinned_num_register_threads" => s.pinned_num_register_threads = self.p.as_i64(v),
                "graph_capture_record_stream_reuse" => {
                    self.out.markers.graph_capture_record_stream_reuse = true;
                    s.graph_capture_record_stream_reuse = self.p.as_bool(v);
                }
                "roundup_power2_divisions" => {
                    if let Some(rd) = self.p.as_dict(v) {
                        self.spend(self.p.len(rd) as u64, || {
                            "allocator_settings.roundup_power2_divisions".into()
                        })?;
                        for (bk, bv) in self.p.pairs(rd) {
                            let bucket = match self.p.value(bk) {
                                Value::Str(s) => s.to_string(),
                                Value::Int(n) => n.to_string(),
                                _ => continue,
                            };
                            if let Some(n) = self.p.as_i64(bv).filter(|&n| n > 0) {
                                s.roundup_power2_divisions.push((bucket, n));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        self.out.allocator_settings = Some(s);
        Ok(())
    }

    fn annotations(&mut self, h: Handle) -> Result<(), DecodeError> {
        let Some(l) = self.p.as_sequence(h) else {
            self.out
                .anomalies
                .note(|| "external_annotations: expected a list".into());
            return Ok(());
        };
        self.spend(self.p.len(l) as u64, || "external_annotations".into())?;
        for (i, ah) in self.p.items(l).enumerate() {
            let Some(d) = self.p.as_dict(ah) else {
                continue;
            };
            self.spend(self.p.len(d) as u64, || {
                format!("external_annotations[{i}]")
            })?;
            let mut a = Annotation {
                name: Arc::from(""),
                stage: Arc::from(""),
                device: -1,
                time_us: NO_TIME,
            };
            for (k, v) in self.p.pairs(d) {
                match self.sym(k) {
                    Sym::Name => a.name = self.text(v).unwrap_or_else(|| Arc::from("")),
                    Sym::Stage => a.stage = self.text(v).unwrap_or_else(|| Arc::from("")),
                    Sym::Device => a.device = self.p.as_i64(v).unwrap_or(-1),
                    Sym::TimeUs => a.time_us = self.p.as_i64(v).unwrap_or(NO_TIME),
                    _ => {}
                }
            }
            self.out.annotations.push(a);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sym_table_matches_discriminants() {
        for (i, s) in SYM_TABLE.iter().enumerate().skip(1) {
            assert_eq!(*s as u8 as usize, i, "{s:?}");
        }
    }

    #[test]
    fn trace_entry_is_compact() {
        assert!(std::mem::size_of::<TraceEntry>() <= 48);
    }
}
