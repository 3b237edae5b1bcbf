//! The diagnosis model: what oomdoctor concluded, as plain data.
//!
//! Renderers print it; `--format json` serialises it as is. That makes this module a
//! public API: field names and meanings follow `schema/diagnosis-v1.json` and change only
//! with a new `schema_version`.

use serde::Serialize;

use crate::diagnosis::cause::Cause;
use crate::diagnosis::rules::{Direction, FixKind, FixValue};
use crate::facts::evidence::{Facts, Provenance};
use crate::render::plot::{SeriesPlot, SnapshotPlot};

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
    /// Files found in a directory input that were not diagnosed (a kind this build cannot
    /// read yet, binary data). Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedInput>,
    /// Memory over time, one line per device and input, for plots. Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<SeriesPlot>,
    /// What memory snapshots showed (segment map, categories, top sites). Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<SnapshotPlot>,
    /// Incidents that share a fingerprint: one problem seen on several ranks, files or
    /// restarts. Human, markdown and HTML output show the first in full and list where the
    /// others were seen; `incidents` keeps every one. Absent when no fingerprint repeats.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeats: Vec<RepeatGroup>,
}

/// One problem seen more than once (see [`Diagnosis::repeats`]).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RepeatGroup {
    pub fingerprint: String,
    pub cause: Cause,
    /// Incident ids in report order; the first is the one shown in full.
    pub incidents: Vec<usize>,
    /// Where each of those incidents was first seen, in the same order.
    pub locations: Vec<Location>,
    /// Every rank any of them names, ascending.
    pub ranks: Vec<u32>,
}

/// A file of a directory input that was not diagnosed, and why.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SkippedInput {
    pub input: String,
    /// The sniffed kind (`log`, `snapshot`, `series`, `model`) or `binary`.
    pub kind: String,
    pub reason: String,
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
    /// What the reader had to work around (a gzip log cut before its end); the input was
    /// still diagnosed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
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
    /// 0..1: the probability of this cause given the evidence (the differential diagnosis's
    /// posterior).
    pub confidence: f64,
    /// False when the evidence does not separate this cause from the runner-up: both are
    /// contenders, and `settle` names the input that would decide between them.
    pub determined: bool,
    /// The one extra input that would settle an undetermined incident.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settle: Option<String>,
    /// The cause's title.
    pub title: String,
    /// One sentence with the key numbers.
    pub summary: String,
    /// The rule that decided the cause.
    pub rule: String,
    /// Groups repeats of one problem: the same hex string for the same incident across runs,
    /// ranks, hosts and log files (see [`crate::diagnosis::verdict::fingerprint`]).
    pub fingerprint: String,
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
    /// How strongly this evidence bears on the cause, in nats (a natural-log likelihood
    /// ratio: +1.1 makes the cause three times likelier; negative: evidence against).
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
            skipped: vec![],
            series: vec![],
            snapshots: vec![],
            repeats: vec![],
        }
    }

    /// The incident an incident repeats: the first one in report order with the same
    /// fingerprint, when that is not itself.
    pub fn repeat_of(&self, r: &IncidentReport) -> Option<&IncidentReport> {
        if r.fingerprint.is_empty() {
            return None;
        }
        self.incidents
            .iter()
            .find(|i| i.fingerprint == r.fingerprint)
            .filter(|first| first.id != r.id)
    }

    /// The later incidents with the fingerprint of `r` (empty when `r` is itself a repeat
    /// or unique).
    pub fn repeats_of(&self, r: &IncidentReport) -> Vec<&IncidentReport> {
        if r.fingerprint.is_empty() || self.repeat_of(r).is_some() {
            return Vec::new();
        }
        self.incidents
            .iter()
            .filter(|i| i.fingerprint == r.fingerprint && i.id != r.id)
            .collect()
    }

    /// Incidents shown in full by the renderers for people: each fingerprint once.
    pub fn distinct_incidents(&self) -> impl Iterator<Item = &IncidentReport> {
        self.incidents
            .iter()
            .filter(|r| self.repeat_of(r).is_none())
    }

    /// Fills `repeats` from the incidents' fingerprints.
    pub fn group_repeats(&mut self) {
        self.repeats = self
            .distinct_incidents()
            .filter_map(|first| {
                let rest = self.repeats_of(first);
                if rest.is_empty() {
                    return None;
                }
                let all: Vec<&IncidentReport> = std::iter::once(first).chain(rest).collect();
                let mut ranks: Vec<u32> =
                    all.iter().flat_map(|i| i.ranks.iter().copied()).collect();
                ranks.sort_unstable();
                ranks.dedup();
                Some(RepeatGroup {
                    fingerprint: first.fingerprint.clone(),
                    cause: first.cause,
                    incidents: all.iter().map(|i| i.id).collect(),
                    locations: all.iter().map(|i| i.location.clone()).collect(),
                    ranks,
                })
            })
            .collect();
    }

    /// Counts across inputs for summaries: incidents per cause (most first, then catalogue
    /// order), per input, and groups of incidents that share a fingerprint.
    pub fn summary(&self) -> Summary {
        let mut by_cause: Vec<(Cause, usize)> = Cause::ALL
            .iter()
            .map(|c| (*c, self.incidents.iter().filter(|i| i.cause == *c).count()))
            .filter(|(_, n)| *n > 0)
            .collect();
        by_cause.sort_by_key(|c| std::cmp::Reverse(c.1));
        let by_input = self
            .inputs
            .iter()
            .map(|input| {
                let mut causes: Vec<Cause> = Vec::new();
                for i in self
                    .incidents
                    .iter()
                    .filter(|i| i.location.input == input.name)
                {
                    if !causes.contains(&i.cause) {
                        causes.push(i.cause);
                    }
                }
                InputSummary {
                    input: input.name.clone(),
                    kind: input.kind,
                    incidents: input.incidents,
                    causes,
                }
            })
            .collect();
        let mut groups: Vec<FingerprintGroup> = Vec::new();
        for i in &self.incidents {
            match groups.iter_mut().find(|g| g.fingerprint == i.fingerprint) {
                Some(g) => g.incidents.push(i.id),
                None => groups.push(FingerprintGroup {
                    fingerprint: i.fingerprint.clone(),
                    cause: i.cause,
                    incidents: vec![i.id],
                }),
            }
        }
        Summary {
            incidents: self.incidents.len(),
            distinct: groups.len(),
            by_cause,
            by_input,
            repeated: groups
                .into_iter()
                .filter(|g| g.incidents.len() > 1)
                .collect(),
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

/// Counts across inputs (see [`Diagnosis::summary`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub incidents: usize,
    /// Distinct fingerprints.
    pub distinct: usize,
    /// Incidents per cause, most first.
    pub by_cause: Vec<(Cause, usize)>,
    /// Every input in order, with its incident count and causes.
    pub by_input: Vec<InputSummary>,
    /// Fingerprints shared by more than one incident.
    pub repeated: Vec<FingerprintGroup>,
}

/// One input's line in a summary.
#[derive(Clone, Debug, PartialEq)]
pub struct InputSummary {
    pub input: String,
    pub kind: &'static str,
    pub incidents: usize,
    /// Distinct top causes of its incidents, in report order.
    pub causes: Vec<Cause>,
}

/// Incidents with one fingerprint.
#[derive(Clone, Debug, PartialEq)]
pub struct FingerprintGroup {
    pub fingerprint: String,
    pub cause: Cause,
    /// Incident ids.
    pub incidents: Vec<usize>,
}

impl Default for Diagnosis {
    fn default() -> Self {
        Self::new()
    }
}
