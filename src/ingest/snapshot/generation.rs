//! Which PyTorch release wrote a snapshot, judged from the file alone.
//!
//! This module owns the fingerprint of `snapshot-format.md` §1.9. Keys are added release
//! after release, so their presence proves a lower bound. Absence proves an upper bound
//! only for keys PyTorch always writes (top-level keys, and per-entry keys when the trace
//! has entries); keys written only on some events (`forward_frames`, `pool_id`, `annotate`,
//! `internal_metadata`) only ever raise the lower bound. The result is a range such as
//! `2.5-2.7` or an open bound such as `2.9+`; boundaries are ±1 release (§1.9).

use serde::Serialize;

use super::schema::{Layout, Markers};

/// A PyTorch release range.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Generation {
    /// `2.8`, `2.5-2.7`, `2.9+`, `1.13`, ...
    pub label: String,
    /// The oldest release that can have written the file, as (major, minor).
    pub since: (u8, u8),
    /// The newest, when the file proves one.
    pub until: Option<(u8, u8)>,
    /// The key or shape that decided it, for people.
    pub evidence: String,
}

impl Generation {
    fn new(since: (u8, u8), until: Option<(u8, u8)>, evidence: &str) -> Generation {
        let v = |(a, b): (u8, u8)| format!("{a}.{b}");
        let label = match until {
            Some(u) if u == since => v(since),
            Some(u) => format!("{}-{}", v(since), v(u)),
            None => format!("{}+", v(since)),
        };
        Generation {
            label,
            since,
            until,
            evidence: evidence.to_string(),
        }
    }

    /// Whether this release has `expandable_segments` (2.1+).
    pub fn has_expandable_segments(&self) -> bool {
        self.since >= (2, 1)
    }
}

/// Fingerprints a decoded snapshot.
pub fn fingerprint(layout: Layout, m: &Markers) -> Generation {
    // Per-event keys only some events carry: presence is a lower bound, nothing more.
    if m.internal_metadata {
        return Generation::new((2, 15), None, "trace entries carry internal_metadata");
    }
    if m.has_host_segments || m.annotate_action {
        return Generation::new(
            (2, 14),
            None,
            "host_segments/host_traces or an annotate action",
        );
    }
    if m.pool_id {
        return Generation::new((2, 12), None, "trace entries carry pool_id");
    }
    if m.forward_frames {
        return Generation::new((2, 11), None, "trace entries carry forward_frames");
    }
    if layout == Layout::SegmentList {
        return match (m.legacy_blocks, m.legacy_requested_size) {
            (true, false) => Generation::new(
                (1, 13),
                Some((1, 13)),
                "a bare segment list with legacy history blocks",
            ),
            (true, true) => Generation::new(
                (2, 0),
                Some((2, 0)),
                "a segment list with legacy blocks carrying requested_size",
            ),
            (false, _) if m.segment_pool_id => Generation::new(
                (2, 1),
                None,
                "a bare segment list (memory_snapshot()) with 2.1+ blocks",
            ),
            (false, _) => Generation::new((2, 0), None, "a bare segment list (memory_snapshot())"),
        };
    }
    let entries = m.trace_entries > 0;
    if m.user_metadata || m.graph_capture_record_stream_reuse {
        return Generation::new(
            (2, 9),
            None,
            "user_metadata or graph_capture_record_stream_reuse",
        );
    }
    if m.compile_context {
        return Generation::new(
            (2, 8),
            Some((2, 8)),
            "compile_context without user_metadata",
        );
    }
    if m.has_external_annotations {
        return if entries {
            Generation::new(
                (2, 5),
                Some((2, 7)),
                "external_annotations, entries without compile_context",
            )
        } else {
            Generation::new(
                (2, 5),
                None,
                "external_annotations (no trace entries to narrow it)",
            )
        };
    }
    if m.has_allocator_settings {
        return Generation::new(
            (2, 3),
            Some((2, 4)),
            "allocator_settings without external_annotations",
        );
    }
    if m.legacy_blocks {
        return if m.legacy_requested_size {
            Generation::new(
                (2, 0),
                Some((2, 0)),
                "legacy history blocks with requested_size",
            )
        } else {
            Generation::new(
                (1, 13),
                Some((1, 13)),
                "legacy history blocks without requested_size",
            )
        };
    }
    if m.time_us {
        return Generation::new((2, 2), Some((2, 2)), "time_us without allocator_settings");
    }
    if entries {
        Generation::new(
            (2, 1),
            Some((2, 1)),
            "2.1 blocks, trace entries without time_us",
        )
    } else {
        Generation::new(
            (2, 1),
            Some((2, 2)),
            "2.1 blocks, no trace entries to check time_us",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_checks() {
        let mut m = Markers {
            trace_entries: 5,
            time_us: true,
            ..Markers::default()
        };
        assert_eq!(fingerprint(Layout::Dict, &m).label, "2.2");
        m.has_allocator_settings = true;
        assert_eq!(fingerprint(Layout::Dict, &m).label, "2.3-2.4");
        m.has_external_annotations = true;
        assert_eq!(fingerprint(Layout::Dict, &m).label, "2.5-2.7");
        m.compile_context = true;
        assert_eq!(fingerprint(Layout::Dict, &m).label, "2.8");
        m.user_metadata = true;
        assert_eq!(fingerprint(Layout::Dict, &m).label, "2.9+");
        m.forward_frames = true;
        assert_eq!(fingerprint(Layout::Dict, &m).label, "2.11+");
        m.trace_entries = 0;
        m.forward_frames = false;
        m.user_metadata = false;
        m.compile_context = false;
        assert_eq!(fingerprint(Layout::Dict, &m).label, "2.5+");
        let legacy = Markers {
            legacy_blocks: true,
            ..Markers::default()
        };
        assert_eq!(fingerprint(Layout::SegmentList, &legacy).label, "1.13");
    }
}
