//! PyTorch memory snapshots: schema, analysis, replay to the OOM, facts.
//!
//! This module owns everything between a snapshot file's bytes and the facts a rule reads:
//!
//! ```text
//! bytes ──► pickle::Pickle (restricted, iterative, shared by handle)
//!             │  trace entry batches, as read ──► schema::StreamDecoder (arena released)
//!       ──► StreamDecoder::finish (typed Snapshot, frames interned)  [arena dropped here]
//!       ──► generation::fingerprint (which PyTorch wrote it)
//!       ──► analyze::analyze_device per device (stats, replay, timeline, attribution, leak)
//!       ──► SnapshotAnalysis (Serialize)  ──► facts() for the OOM (or busiest) device
//! ```
//!
//! The integrator calls [`read_snapshot`], then [`SnapshotAnalysis::facts`] for the rules and
//! serialises the analysis for `--format json` / the HTML report. [`looks_like_pickle`]
//! sniffs content. Every fact this module can emit is in [`crate::facts::catalog::snapshot::FACTS`].

pub mod pickle;

pub mod analyze;
pub mod attribution;
pub mod fxhash;
pub mod generation;
mod handle_lists;
pub mod leak;
pub mod schema;

use std::fmt;

use serde::Serialize;

use crate::facts::evidence::{Facts, InputName, Provenance};
use crate::ingest::snapshot::pickle::{Pickle, PickleError, PickleLimits};

pub use crate::ingest::snapshot::pickle::looks_like_pickle;
pub use analyze::{
    Attribution, DeviceAnalysis, Moment, OomEvent, SegmentMap, SegmentStats, StateAt, Timeline,
    TraceStats,
};
pub use attribution::{Category, Site};
pub use generation::Generation;
pub use leak::{Leak, LeakMethod};
pub use schema::{AllocatorSettings, Anomalies, Layout, Snapshot};

/// Why a snapshot could not be analysed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The bytes are not a readable (or acceptable) pickle.
    #[error("{input}: {source}")]
    Pickle {
        input: String,
        #[source]
        source: PickleError,
    },
    /// A readable pickle that holds something other than a snapshot.
    #[error("{input} is not a PyTorch memory snapshot: it holds {found}")]
    NotASnapshot { input: String, found: String },
    /// More bytes follow the pickle's `STOP`: two pickles in one file, or data appended.
    #[error(
        "{input}: {extra}{} bytes follow the end of the pickle (its STOP is at byte {offset}); a memory snapshot is one pickle and nothing after it", if *.at_least { " or more" } else { "" }
    )]
    Trailing {
        input: String,
        offset: u64,
        extra: u64,
        /// The input is a stream that was not read to its end: `extra` is a lower bound.
        at_least: bool,
    },
    /// Walking shared structures would visit far more elements than the file can hold.
    #[error(
        "{input}: reading {path} needed more than {limit} element visits; the file references shared structures far more often than a snapshot does (a memo bomb?)"
    )]
    ExpansionLimit {
        input: String,
        limit: u64,
        path: String,
    },
}

impl miette::Diagnostic for SnapshotError {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        match self {
            // The pickle error's own code (oomdoctor::ingest::snapshot::pickle::...) says more than ours would.
            SnapshotError::Pickle { source, .. } => source.code(),
            SnapshotError::NotASnapshot { .. } => {
                Some(Box::new("oomdoctor::snapshot::not_a_snapshot"))
            }
            SnapshotError::ExpansionLimit { .. } => {
                Some(Box::new("oomdoctor::snapshot::expansion_limit"))
            }
            SnapshotError::Trailing { .. } => Some(Box::new("oomdoctor::snapshot::trailing_data")),
        }
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        match self {
            SnapshotError::Pickle { source, .. } => source.help(),
            SnapshotError::NotASnapshot { .. } => Some(Box::new(
                "a memory snapshot is written by `torch.cuda.memory._dump_snapshot(\"snap.pickle\")` (or `pickle.dump(torch.cuda.memory._snapshot(), f)`) after `torch.cuda.memory._record_memory_history()`; it is a dict with `segments` and `device_traces`, or a bare list of segments",
            )),
            SnapshotError::Trailing { .. } => Some(Box::new(
                "the file holds more than one pickle, or something was appended to it; `torch.cuda.memory._dump_snapshot` writes exactly one",
            )),
            SnapshotError::ExpansionLimit { .. } => Some(Box::new(
                "real snapshots share frame dicts and lists, but never make a reader visit more than a few elements per byte. If this file is genuine, raise `max_expansion_ratio`",
            )),
        }
    }
}

/// The analysis of one snapshot file.
#[derive(Clone, Debug, Serialize)]
pub struct SnapshotAnalysis {
    /// The input's display name.
    pub input: String,
    pub layout: Layout,
    /// Pickle protocol from the header (`None`: protocol 0 or 1).
    pub pickle_protocol: Option<u8>,
    pub generation: Generation,
    pub allocator_settings: Option<AllocatorSettings>,
    /// Devices with segments or trace events, ascending.
    pub devices: Vec<DeviceAnalysis>,
    /// Pinned host memory (2.14+ `host_segments`), when recorded.
    pub host: Option<HostSummary>,
    pub annotations: AnnotationSummary,
    pub frames: FrameSummary,
    /// Oddities that did not stop the analysis.
    pub anomalies: Anomalies,
    /// Facts from the hook's sidecar beside the file (`crate::ingest::sidecar`), read from the live
    /// process: they replace what the snapshot's structure only suggests (`torch.version`).
    #[serde(skip)]
    pub sidecar: Option<Facts>,
    #[serde(skip)]
    input_name: InputName,
}

/// Pinned host memory (`host_segments` / `host_traces`).
#[derive(Clone, Debug, Serialize)]
pub struct HostSummary {
    pub segments: u64,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    pub trace_entries: u64,
}

/// `external_annotations` at a glance.
#[derive(Clone, Debug, Serialize)]
pub struct AnnotationSummary {
    pub count: u64,
    /// Distinct `ProfilerStep#N` names.
    pub profiler_steps: u64,
}

/// Sizes of the interned frame table.
#[derive(Clone, Debug, Serialize)]
pub struct FrameSummary {
    pub distinct_frames: u64,
    pub distinct_frame_lists: u64,
}

/// Reads and analyses a snapshot held in memory.
///
/// `input` names the file in errors and in fact provenance. `limits` bound the pickle
/// reader and the decoder's walk (see [`PickleLimits`]).
pub fn read_snapshot(
    bytes: &[u8],
    input: &InputName,
    limits: &PickleLimits,
) -> Result<SnapshotAnalysis, SnapshotError> {
    let mut decoder = schema::StreamDecoder::new(limits);
    let pickle = Pickle::parse_with(bytes, limits, Some(&mut decoder));
    decode_and_analyze(pickle, decoder, input)
}

/// Reads and analyses a snapshot from a stream (a file, a gzip decoder), which is never
/// held whole: the pickle reader pulls it through a bounded buffer (see
/// [`Pickle::from_reader`]) and trace entries are decoded batch by batch as they are read
/// ([`schema::StreamDecoder`]), so memory is the typed snapshot plus the arena of what is
/// not the trace, not the file plus an arena of everything.
pub fn read_snapshot_from<R: std::io::Read>(
    reader: R,
    input: &InputName,
    limits: &PickleLimits,
) -> Result<SnapshotAnalysis, SnapshotError> {
    let mut decoder = schema::StreamDecoder::new(limits);
    let pickle = Pickle::from_reader_with(reader, limits, &mut decoder);
    decode_and_analyze(pickle, decoder, input)
}

/// [`read_snapshot_from`], the input read ahead on a second thread where the process may
/// use one ([`crate::input::ReadAhead`]) and handed to [`read_snapshot_blocks`]. On one
/// core it is [`read_snapshot_from`].
pub fn read_snapshot_ahead<R: std::io::Read + Send + 'static>(
    reader: R,
    input: &InputName,
    limits: &PickleLimits,
) -> Result<SnapshotAnalysis, SnapshotError> {
    if !crate::input::read_ahead_worthwhile() {
        return read_snapshot_from(reader, input, limits);
    }
    read_snapshot_blocks(crate::input::ReadAhead::new(reader), input, limits)
}

/// Reads and analyses a snapshot taken in blocks from `feed`: read ahead on another thread
/// ([`read_snapshot_ahead`]) or copied out of a map ([`crate::input::MappedBlocks`]). The
/// pickle reader takes each block as its buffer ([`pickle::BlockFeed`]), so it neither
/// waits for reads nor copies their bytes (about 5% of its time on a large snapshot); and
/// the trace entries are decoded on another thread while the parser reads the next batches
/// ([`Pickle::from_blocks_with`]). Meant for a process that may use two cores.
pub fn read_snapshot_blocks(
    mut feed: impl pickle::BlockFeed,
    input: &InputName,
    limits: &PickleLimits,
) -> Result<SnapshotAnalysis, SnapshotError> {
    let mut decoder = schema::StreamDecoder::new(limits);
    let pickle = Pickle::from_blocks_with(&mut feed, limits, &mut decoder);
    // The feed (a thread and its blocks, or a map) ends with the read, before the analysis.
    drop(feed);
    decode_and_analyze(pickle, decoder, input)
}

fn decode_and_analyze(
    pickle: Result<Pickle<'_>, PickleError>,
    mut decoder: schema::StreamDecoder,
    input: &InputName,
) -> Result<SnapshotAnalysis, SnapshotError> {
    let decode_error = |e| match e {
        schema::DecodeError::NotASnapshot(n) => SnapshotError::NotASnapshot {
            input: input.to_string(),
            found: n.found,
        },
        schema::DecodeError::WalkBudget { limit, path } => SnapshotError::ExpansionLimit {
            input: input.to_string(),
            limit,
            path,
        },
    };
    // The arena is dropped as soon as the typed snapshot exists: nothing after decoding
    // needs it. (The trace entries were decoded while it was read, see `schema`.)
    let snap = {
        let pickle = match pickle {
            Ok(p) => p,
            Err(source) => {
                // `Stopped`: the decoder stopped the reader and holds the reason.
                return Err(match (&source, decoder.error()) {
                    (PickleError::Stopped { .. }, Some(e)) => decode_error(e),
                    _ => SnapshotError::Pickle {
                        input: input.to_string(),
                        source,
                    },
                });
            }
        };
        check_whole(&pickle, input)?;
        decoder.finish(&pickle).map_err(decode_error)?
    };
    Ok(analyze_snapshot(&snap, input))
}

/// A snapshot file is exactly one pickle that leaves nothing behind. Python's unpickler
/// ignores what follows `STOP` and what is left under the root, so a second pickle or
/// appended bytes would otherwise pass as a snapshot with no incident.
pub fn check_whole(pickle: &Pickle<'_>, input: &InputName) -> Result<(), SnapshotError> {
    if pickle.end() < pickle.input_len() {
        return Err(SnapshotError::Trailing {
            input: input.to_string(),
            offset: pickle.end().saturating_sub(1) as u64,
            extra: (pickle.input_len() - pickle.end()) as u64,
            at_least: pickle.input_len_is_lower_bound(),
        });
    }
    if pickle.leftover() > 0 {
        return Err(SnapshotError::NotASnapshot {
            input: input.to_string(),
            found: format!(
                "a pickle that leaves {} value(s) on its stack under the root at STOP (byte {}); `pickle.dump` leaves none",
                pickle.leftover(),
                pickle.end().saturating_sub(1)
            ),
        });
    }
    Ok(())
}

/// Analyses an already decoded snapshot.
pub fn analyze_snapshot(snap: &Snapshot, input: &InputName) -> SnapshotAnalysis {
    analyze_snapshot_with(snap, input, analyze::SIDE_BY_SIDE_ENTRIES)
}

/// [`analyze_snapshot`], a device's passes run side by side on two threads from a trace of
/// `side_by_side_from` entries (see `analyze::analyze_device`).
fn analyze_snapshot_with(
    snap: &Snapshot,
    input: &InputName,
    side_by_side_from: usize,
) -> SnapshotAnalysis {
    let generation = generation::fingerprint(snap.layout, &snap.markers);
    let mut classifier = attribution::Classifier::new(&snap.frames);
    let devices = analyze::devices_of(snap)
        .into_iter()
        .map(|d| analyze::analyze_device(snap, d, &mut classifier, side_by_side_from))
        .collect();
    let host =
        (!snap.host_segments.is_empty() || !snap.host_traces.is_empty()).then(|| HostSummary {
            segments: snap.host_segments.len() as u64,
            reserved_bytes: snap
                .host_segments
                .iter()
                .fold(0u64, |acc, s| acc.saturating_add(s.total_size)),
            allocated_bytes: snap
                .host_segments
                .iter()
                .fold(0u64, |acc, s| acc.saturating_add(s.allocated_size)),
            trace_entries: snap.host_traces.iter().map(|t| t.len() as u64).sum(),
        });
    // Names are shared (one `Arc` per distinct string), so identical names are found by
    // pointer before any text is compared: a million annotations that all carry one huge
    // name cost a million pointer comparisons, not a million string comparisons.
    let mut seen = std::collections::HashSet::new();
    let mut steps: Vec<&str> = snap
        .annotations
        .iter()
        .filter(|a| a.name.starts_with("ProfilerStep#"))
        .filter(|a| seen.insert(std::sync::Arc::as_ptr(&a.name) as *const u8 as usize))
        .map(|a| &*a.name)
        .collect();
    steps.sort_unstable();
    steps.dedup();
    SnapshotAnalysis {
        input: input.to_string(),
        layout: snap.layout,
        pickle_protocol: snap.protocol,
        generation,
        allocator_settings: snap.allocator_settings.clone(),
        devices,
        host,
        annotations: AnnotationSummary {
            count: snap.annotations.len() as u64,
            profiler_steps: steps.len() as u64,
        },
        frames: FrameSummary {
            distinct_frames: snap.frames.frames.len() as u64,
            distinct_frame_lists: snap.frames.list_count() as u64,
        },
        anomalies: snap.anomalies.clone(),
        sidecar: None,
        input_name: input.clone(),
    }
}

impl SnapshotAnalysis {
    /// The device whose trace has an `oom` entry (the first such device).
    pub fn oom_device(&self) -> Option<u32> {
        self.devices
            .iter()
            .find(|d| d.oom.is_some())
            .map(|d| d.device)
    }

    /// Every analysed device.
    pub fn devices(&self) -> &[DeviceAnalysis] {
        &self.devices
    }

    /// One device's analysis.
    pub fn device(&self, device: u32) -> Option<&DeviceAnalysis> {
        self.devices.iter().find(|d| d.device == device)
    }

    /// The device the facts describe: the OOM device, else the busiest one.
    pub fn focus_device(&self) -> Option<u32> {
        self.oom_device().or_else(|| {
            self.devices
                .iter()
                .max_by_key(|d| (d.activity(), u32::MAX - d.device))
                .map(|d| d.device)
        })
    }

    /// Facts for the OOM device, or the busiest device (see [`crate::facts::catalog::snapshot::FACTS`]).
    pub fn facts(&self) -> Facts {
        match self.focus_device() {
            Some(d) => self.facts_for_device(d),
            None => {
                // An empty snapshot: still say what it is.
                let mut f = Facts::new();
                self.file_facts(&mut f);
                self.sidecar_facts(&mut f);
                f
            }
        }
    }

    /// Reads the hook's sidecar beside the snapshot file, if any (`crate::ingest::sidecar`). A
    /// sidecar that cannot be used is a fact saying why, not an error.
    pub fn attach_sidecar(&mut self, path: &std::path::Path) {
        self.sidecar = crate::ingest::sidecar::find(path);
    }

    /// The sidecar's facts win: they were read from the live process, not inferred.
    fn sidecar_facts(&self, f: &mut Facts) {
        if let Some(s) = &self.sidecar {
            f.merge(s, true);
        }
    }

    fn at(&self, locator: impl Into<String>) -> Option<Provenance> {
        Some(Provenance::at(self.input_name.clone(), locator))
    }

    fn file_facts(&self, f: &mut Facts) {
        f.set(
            "snapshot.generation",
            self.generation.label.as_str(),
            self.at(format!("file structure ({})", self.generation.evidence)),
        );
        f.set(
            "torch.version",
            self.generation.label.as_str(),
            self.at(format!("snapshot format ({})", self.generation.evidence)),
        );
        f.set(
            "torch.has_expandable_segments",
            self.generation.has_expandable_segments(),
            self.at(format!("snapshot format ({})", self.generation.evidence)),
        );
        f.set(
            "snapshot.layout",
            match self.layout {
                Layout::SegmentList => "segment-list",
                Layout::Dict => "dict",
            },
            self.at("top level"),
        );
        if let Some(p) = self.pickle_protocol {
            f.set(
                "snapshot.pickle_protocol",
                p as u64,
                self.at("PROTO header"),
            );
        }
        f.set(
            "snapshot.devices",
            self.devices.len(),
            self.at("segments and device_traces"),
        );
        if let Some(s) = &self.allocator_settings {
            if let Some(conf) = &s.alloc_conf {
                f.set(
                    "torch.alloc_conf",
                    conf.as_str(),
                    self.at("allocator_settings.PYTORCH_CUDA_ALLOC_CONF"),
                );
            }
            if let Some(e) = s.expandable_segments {
                f.set(
                    "torch.expandable_segments",
                    e,
                    self.at("allocator_settings.expandable_segments"),
                );
            }
            if let Some(m) = s.max_split_size {
                f.set(
                    "torch.max_split_size_mb",
                    m / (1 << 20),
                    self.at("allocator_settings.max_split_size"),
                );
            }
            if let Some(g) = s.garbage_collection_threshold.filter(|&g| g > 0.0) {
                f.set(
                    "torch.garbage_collection_threshold",
                    g,
                    self.at("allocator_settings.garbage_collection_threshold"),
                );
            }
        }
    }

    /// Facts for one device (see [`crate::facts::catalog::snapshot::FACTS`]), with the sidecar's.
    pub fn facts_for_device(&self, device: u32) -> Facts {
        let mut f = self.snapshot_facts_for_device(device);
        self.sidecar_facts(&mut f);
        f
    }

    /// Facts for one device from the snapshot itself.
    fn snapshot_facts_for_device(&self, device: u32) -> Facts {
        let mut f = Facts::new();
        self.file_facts(&mut f);
        let Some(d) = self.device(device) else {
            return f;
        };
        let segs = format!("segments (device {device})");
        let s = &d.segments;
        f.set("snapshot.device", device, self.at(&segs));
        for (name, v) in [
            ("snapshot.reserved_bytes", s.reserved_bytes),
            ("snapshot.allocated_bytes", s.allocated_bytes),
            ("snapshot.active_bytes", s.active_bytes),
            ("snapshot.inactive_bytes", s.inactive_bytes),
            ("snapshot.requested_bytes", s.requested_bytes),
            ("snapshot.rounding_loss_bytes", s.rounding_loss_bytes),
            ("snapshot.pending_free_bytes", s.pending_free_bytes),
            (
                "snapshot.largest_free_block_bytes",
                s.largest_free_block_bytes,
            ),
            ("snapshot.releasable_cache_bytes", s.releasable_cache_bytes),
            ("snapshot.fragmented_free_bytes", s.fragmented_free_bytes),
            ("snapshot.private_pool_bytes", s.private_pool_bytes),
            (
                "snapshot.private_pool_allocated_bytes",
                s.private_pool_allocated_bytes,
            ),
            ("snapshot.segments", s.segment_count),
            ("snapshot.free_blocks", s.free_block_count),
            (
                "snapshot.max_free_blocks_per_segment",
                s.max_free_blocks_per_segment,
            ),
        ] {
            f.set(name, v, self.at(&segs));
        }
        f.set(
            "snapshot.expandable_segments",
            s.expandable_segment_count > 0,
            self.at(format!("{segs}.is_expandable")),
        );
        if !f.contains("torch.expandable_segments") && s.expandable_segment_count > 0 {
            f.set(
                "torch.expandable_segments",
                true,
                self.at(format!("{segs}.is_expandable")),
            );
        }

        let trace = format!("device_traces[{device}]");
        f.set("snapshot.trace_entries", d.trace.entries, self.at(&trace));
        f.set(
            "snapshot.trace_starts_mid_history",
            d.trace.starts_mid_history,
            self.at(&trace),
        );
        f.set("snapshot.has_oom", d.oom.is_some(), self.at(&trace));
        f.set(
            "snapshot.peak_live_bytes",
            d.timeline.peak_live_bytes,
            self.at(self.index_locator(device, d.timeline.peak_index, "peak")),
        );
        f.set(
            "snapshot.peak_reserved_bytes",
            d.timeline.peak_reserved_bytes,
            self.at(&trace),
        );

        // The analysed moment: the OOM, the peak, or the final state.
        let st = &d.state;
        let moment = match st.moment {
            Moment::Oom => "oom",
            Moment::Peak => "peak",
            Moment::Final => "final",
        };
        let moment_loc = match (st.trace_index, st.replayed) {
            (Some(i), true) => format!(
                "{trace}[{i}] ({moment}; replayed backwards over {} later entries)",
                st.replayed_entries
            ),
            (Some(i), false) => {
                format!("{trace}[{i}] ({moment}; final segments, nothing to replay)")
            }
            (None, _) => format!("{segs} ({moment})"),
        };
        f.set("snapshot.moment", moment, self.at(&moment_loc));
        f.set("snapshot.replayed", st.replayed, self.at(&moment_loc));
        f.set(
            "snapshot.replayed_entries",
            st.replayed_entries,
            self.at(&moment_loc),
        );
        f.set(
            "snapshot.replay_inconsistencies",
            d.trace.replay_inconsistencies,
            self.at(&trace),
        );
        f.set("snapshot.live_bytes", st.live_bytes, self.at(&moment_loc));

        if let Some(oom) = &d.oom {
            let oom_loc = format!("{trace}[{}] (oom)", oom.trace_index);
            f.set("oom.device", device, self.at(&oom_loc));
            f.set(
                "oom.requested_bytes",
                oom.requested_bytes,
                self.at(format!("{oom_loc}.size")),
            );
            if let Some(free) = oom.device_free_bytes {
                f.set(
                    "oom.free_bytes",
                    free,
                    self.at(format!("{oom_loc}.device_free")),
                );
            }
            f.set(
                "oom.reserved_bytes",
                st.reserved_bytes,
                self.at(&moment_loc),
            );
            f.set("oom.allocated_bytes", st.live_bytes, self.at(&moment_loc));
            f.set(
                "oom.reserved_unallocated_bytes",
                st.free_bytes,
                self.at(&moment_loc),
            );
            if st.private_pool_allocated_bytes > 0 {
                f.set(
                    "oom.private_pool_bytes",
                    st.private_pool_allocated_bytes,
                    self.at(&moment_loc),
                );
            }
            f.set(
                "snapshot.live_bytes_at_oom",
                st.live_bytes,
                self.at(&moment_loc),
            );
            f.set(
                "snapshot.reserved_bytes_at_oom",
                st.reserved_bytes,
                self.at(&moment_loc),
            );
            f.set(
                "snapshot.unallocated_at_oom_bytes",
                st.free_bytes,
                self.at(&moment_loc),
            );
            f.set(
                "snapshot.largest_free_block_at_oom_bytes",
                st.largest_free_block_bytes,
                self.at(&moment_loc),
            );
            f.set(
                "snapshot.fragmented_free_at_oom_bytes",
                st.fragmented_free_bytes,
                self.at(&moment_loc),
            );
            if let Some(site) = &oom.site {
                f.set(
                    "snapshot.oom_site",
                    site.label.as_str(),
                    self.at(format!("{oom_loc}.frames")),
                );
            }
            if let Some(c) = oom.category {
                f.set(
                    "snapshot.oom_category",
                    c.name(),
                    self.at(format!("{oom_loc}.frames")),
                );
            }
        }

        let att_loc = format!("{segs} + {trace}, live blocks at the {moment}");
        for c in &d.attribution.categories {
            f.set(&category_fact(c.category), c.bytes, self.at(&att_loc));
        }
        if let Some(c) = d.attribution.dominant() {
            f.set("snapshot.dominant_category", c.name(), self.at(&att_loc));
        }
        if let Some(top) = d.attribution.top_sites.first() {
            let loc = format!("{att_loc}: {}:{}", top.site.file, top.site.line);
            f.set("snapshot.top_site", top.site.label.as_str(), self.at(&loc));
            f.set("snapshot.top_site_bytes", top.bytes, self.at(&loc));
        }

        if let Some(leak) = &d.leak {
            let src = match leak.method {
                LeakMethod::ProfilerSteps => "external_annotations (ProfilerStep#)",
                LeakMethod::OptimizerSteps => "external_annotations (Optimizer.step#)",
                LeakMethod::RepeatedCallSites => "repeating call sites",
            };
            let loc = format!("{trace}, iterations from {src}");
            f.set(
                "snapshot.leak_slope_bytes_per_step",
                leak.slope_bytes_per_step.round(),
                self.at(&loc),
            );
            f.set("snapshot.leak_steps", leak.leaking_steps, self.at(&loc));
            f.set(
                "snapshot.leak_growth_bytes",
                leak.growth_bytes.max(0) as u64,
                self.at(&loc),
            );
            f.set(
                "snapshot.leak_method",
                match leak.method {
                    LeakMethod::ProfilerSteps => "profiler-steps",
                    LeakMethod::OptimizerSteps => "optimizer-steps",
                    LeakMethod::RepeatedCallSites => "repeated-call-sites",
                },
                self.at(&loc),
            );
            if let Some(site) = leak.sites.first() {
                f.set(
                    "snapshot.leak_site",
                    site.site.label.as_str(),
                    self.at(format!("{loc}: {}:{}", site.site.file, site.site.line)),
                );
            }
        }
        f
    }

    fn index_locator(&self, device: u32, index: i64, what: &str) -> String {
        if index >= 0 {
            format!("device_traces[{device}][{index}] ({what})")
        } else {
            format!("device_traces[{device}] (before the first entry; {what})")
        }
    }
}

/// The fact name of a category's bytes.
pub fn category_fact(c: Category) -> String {
    format!("snapshot.category.{}_bytes", c.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every bundled snapshot fixture and, where present, every real one: the analysis with
    /// each device's passes side by side on two threads is the analysis on one.
    #[test]
    fn side_by_side_passes_analyse_as_one_thread_does() {
        let mut files = Vec::new();
        for dir in ["fixtures/snapshots", "../shared/eval/snapshots"] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
            let Ok(listing) = std::fs::read_dir(&dir) else {
                eprintln!(
                    "note: {} is absent; its snapshots are skipped",
                    dir.display()
                );
                continue;
            };
            files.extend(
                listing
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "pickle" || x == "pkl")),
            );
        }
        files.sort();
        let limits = PickleLimits::default();
        let (mut traced, mut ooms, mut leaks, mut peaks) = (0, 0, 0, 0);
        for path in &files {
            let bytes = std::fs::read(path).unwrap();
            let mut decoder = schema::StreamDecoder::new(&limits);
            let Ok(pickle) = Pickle::parse_with(&bytes, &limits, Some(&mut decoder)) else {
                continue;
            };
            let Ok(snap) = decoder.finish(&pickle) else {
                continue;
            };
            let input: InputName = std::sync::Arc::from(path.display().to_string());
            let one = analyze_snapshot_with(&snap, &input, usize::MAX);
            let two = analyze_snapshot_with(&snap, &input, 0);
            assert_eq!(
                serde_json::to_string(&one).unwrap(),
                serde_json::to_string(&two).unwrap(),
                "{}",
                path.display()
            );
            for d in one.devices() {
                traced += usize::from(d.trace.entries > 0);
                ooms += usize::from(d.oom.is_some());
                leaks += usize::from(d.leak.is_some());
                peaks += usize::from(d.oom.is_none() && d.trace.entries > 0);
            }
        }
        // The comparison covered each path through the passes: an OOM, a peak, a leak.
        assert!(
            traced >= 10 && ooms >= 3 && leaks >= 2 && peaks >= 2,
            "traced {traced}, OOMs {ooms}, leaks {leaks}, peaks {peaks}"
        );
    }

    #[test]
    fn facts_table_is_registered_and_complete() {
        for d in crate::facts::catalog::snapshot::FACTS {
            assert!(
                crate::facts::catalog::lookup(d.name).is_some(),
                "{} not in catalog::SECTIONS",
                d.name
            );
        }
        for c in Category::ALL {
            assert!(
                crate::facts::catalog::snapshot::FACTS
                    .iter()
                    .any(|d| d.name == category_fact(c)),
                "{c:?} has no fact"
            );
        }
    }
}
