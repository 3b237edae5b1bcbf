//! The diagnosis model: what oomdoctor concluded, as plain data.
//!
//! Renderers print it; `--format json` serialises it as is. That makes this module a
//! public API: field names and meanings follow `schema/diagnosis-v1.json` and change only
//! with a new `schema_version`.

use serde::Serialize;

use crate::cause::Cause;
use crate::evidence::{Facts, Provenance};
use crate::rules::{Direction, FixKind, FixValue};

/// Version of the JSON contract.
pub const SCHEMA_VERSION: u32 = 1;

/// Everything oomdoctor concluded from its inputs.
#[derive(Clone, Debug, Serialize)]
pub struct Diagnosis {
    pub schema_version: u32,
    pub tool: ToolInfo,
    pub inputs: Vec<InputReport>,
    /// Most confident first.
    pub incidents: Vec<IncidentReport>,
    /// Inputs that could not be read (the run still reports the others).
    pub errors: Vec<InputErrorReport>,
    /// The cleaned text of every line any evidence or fact points at, once each.
    pub excerpts: Vec<Excerpt>,
    /// A summary of every memory snapshot read (with or without an OOM in it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<SnapshotSummary>,
}

/// What a PyTorch memory snapshot showed, per device.
#[derive(Clone, Debug, Serialize)]
pub struct SnapshotSummary {
    pub input: String,
    /// The PyTorch versions that write this layout (e.g. `2.8`).
    pub generation: String,
    /// The device with an `oom` entry, if any.
    pub oom_device: Option<u32>,
    pub devices: Vec<SnapshotDeviceSummary>,
}

/// One device of a snapshot.
#[derive(Clone, Debug, Serialize)]
pub struct SnapshotDeviceSummary {
    pub device: u32,
    /// `oom`, `peak` or `final`: the moment the numbers below describe.
    pub moment: String,
    /// Whether the trace was replayed backwards to reach that moment.
    pub replayed: bool,
    pub reserved_bytes: u64,
    pub live_bytes: u64,
    pub peak_live_bytes: u64,
    pub largest_free_block_bytes: u64,
    /// Free memory inside segments that also hold live blocks (not releasable).
    pub fragmented_free_bytes: u64,
    /// Fully free segments at dump time (cache that `empty_cache()` would release).
    pub releasable_cache_bytes: u64,
    pub requested_bytes: Option<u64>,
    pub categories: Vec<NamedBytes>,
    pub top_sites: Vec<NamedBytes>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leak: Option<LeakSummary>,
}

/// A name and a byte count.
#[derive(Clone, Debug, Serialize)]
pub struct NamedBytes {
    pub name: String,
    pub bytes: u64,
}

/// Growth across iterations found in a snapshot's trace.
#[derive(Clone, Debug, Serialize)]
pub struct LeakSummary {
    pub steps: u64,
    pub slope_bytes_per_step: f64,
    pub growth_bytes: i64,
    pub site: Option<String>,
}

impl SnapshotSummary {
    /// Summarises an analysis for the report.
    pub fn from_analysis(a: &crate::snapshot::SnapshotAnalysis) -> SnapshotSummary {
        let devices = a
            .devices()
            .iter()
            .map(|d| SnapshotDeviceSummary {
                device: d.device,
                moment: format!("{:?}", d.state.moment).to_lowercase(),
                replayed: d.state.replayed,
                reserved_bytes: d.state.reserved_bytes,
                live_bytes: d.state.live_bytes,
                peak_live_bytes: d.timeline.peak_live_bytes,
                largest_free_block_bytes: d.state.largest_free_block_bytes,
                fragmented_free_bytes: d.state.fragmented_free_bytes,
                releasable_cache_bytes: d.segments.releasable_cache_bytes,
                requested_bytes: d.oom.as_ref().map(|o| o.requested_bytes),
                categories: d
                    .attribution
                    .categories
                    .iter()
                    .filter(|c| c.bytes > 0)
                    .map(|c| NamedBytes {
                        name: c.category.name().to_string(),
                        bytes: c.bytes,
                    })
                    .collect(),
                top_sites: d
                    .attribution
                    .top_sites
                    .iter()
                    .take(5)
                    .map(|s| NamedBytes {
                        name: s.site.label.clone(),
                        bytes: s.bytes,
                    })
                    .collect(),
                leak: d.leak.as_ref().map(|l| LeakSummary {
                    steps: l.steps,
                    slope_bytes_per_step: l.slope_bytes_per_step,
                    growth_bytes: l.growth_bytes,
                    site: l.sites.first().map(|s| s.site.label.clone()),
                }),
            })
            .collect();
        SnapshotSummary {
            input: a.input.clone(),
            generation: a.generation.label.clone(),
            oom_device: a.oom_device(),
            devices,
        }
    }
}

/// One quoted line of an input.
#[derive(Clone, Debug, Serialize)]
pub struct Excerpt {
    pub input: String,
    pub line: u64,
    pub text: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct ToolInfo {
    pub name: &'static str,
    pub version: &'static str,
}

impl Default for ToolInfo {
    fn default() -> Self {
        ToolInfo {
            name: "oomdoctor",
            version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// One input and what was read from it.
#[derive(Clone, Debug, Serialize)]
pub struct InputReport {
    pub name: String,
    /// `log`, `snapshot`, `series`, `model`.
    pub kind: &'static str,
    pub bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines: Option<u64>,
    pub compressed: bool,
    pub incidents: usize,
}

/// An input that could not be read.
#[derive(Clone, Debug, Serialize)]
pub struct InputErrorReport {
    pub input: String,
    pub message: String,
}

/// Where something was seen.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Location {
    pub input: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
}

/// One diagnosed incident.
#[derive(Clone, Debug, Serialize)]
pub struct IncidentReport {
    /// 1-based position in this report.
    pub id: usize,
    pub cause: Cause,
    /// 0..1: the share of the evidence points that this cause's best rule earned.
    pub confidence: f64,
    /// The cause's title.
    pub title: String,
    /// One sentence with the key numbers.
    pub summary: String,
    /// The rule that decided the cause.
    pub rule: String,
    pub engine: String,
    pub phase: String,
    /// `failure.kind`: device-oom, host-oom, kv-capacity, ...
    pub kind: String,
    pub device: Option<u32>,
    pub devices: Vec<u32>,
    pub ranks: Vec<u32>,
    /// How many failure lines were folded into this incident.
    pub copies: u32,
    pub requested_bytes: Option<u64>,
    pub location: Location,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    pub evidence: Vec<EvidenceItem>,
    pub alternatives: Vec<Alternative>,
    pub fixes: Vec<FixReport>,
    /// Every fact the incident rests on, with its sources.
    pub facts: Facts,
}

/// One piece of evidence for a cause.
#[derive(Clone, Debug, Serialize)]
pub struct EvidenceItem {
    pub text: String,
    /// The rule points this evidence earned (negative: evidence against).
    pub weight: f64,
    /// The primary place it was seen.
    pub input: String,
    pub line: Option<u64>,
    /// The facts the signal read.
    pub facts: Vec<String>,
    /// Every place those facts came from.
    pub sources: Vec<Provenance>,
}

/// A cause that scored but lost.
#[derive(Clone, Debug, Serialize)]
pub struct Alternative {
    pub cause: Cause,
    pub confidence: f64,
    pub rule: String,
    pub summary: String,
    pub evidence: Vec<EvidenceItem>,
}

/// A ranked fix.
#[derive(Clone, Debug, Serialize)]
pub struct FixReport {
    pub rank: usize,
    pub title: String,
    /// The exact change: a command, an env var, a flag, a code line.
    pub action: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    pub kind: FixKind,
    /// The cause this fix addresses.
    pub cause: Cause,
    pub rule: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub knob: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// Computed values in the fix, each traceable to its facts.
    pub values: Vec<FixValue>,
}

impl Diagnosis {
    pub fn new() -> Self {
        Diagnosis {
            schema_version: SCHEMA_VERSION,
            tool: ToolInfo::default(),
            inputs: vec![],
            incidents: vec![],
            errors: vec![],
            excerpts: vec![],
            snapshots: vec![],
        }
    }

    /// Fills `excerpts` from every provenance the incidents refer to.
    pub fn collect_excerpts(&mut self) {
        let mut seen = std::collections::BTreeMap::new();
        let mut add = |p: &Provenance| {
            if let (Some(line), Some(text)) = (p.line, p.text.as_ref()) {
                seen.entry((p.input.to_string(), line))
                    .or_insert_with(|| text.to_string());
            }
        };
        for i in &self.incidents {
            for (_, f) in i.facts.iter() {
                f.sources.iter().for_each(&mut add);
            }
            for e in i
                .evidence
                .iter()
                .chain(i.alternatives.iter().flat_map(|a| a.evidence.iter()))
            {
                e.sources.iter().for_each(&mut add);
            }
            for f in &i.fixes {
                for v in &f.values {
                    v.from
                        .iter()
                        .flat_map(|x| x.sources.iter())
                        .for_each(&mut add);
                }
            }
        }
        self.excerpts = seen
            .into_iter()
            .map(|((input, line), text)| Excerpt { input, line, text })
            .collect();
    }
}

impl Default for Diagnosis {
    fn default() -> Self {
        Self::new()
    }
}
