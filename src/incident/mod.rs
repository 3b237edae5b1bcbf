//! Incidents: one real problem, whatever inputs showed it.
//!
//! An [`Incident`] is created by an ingest stage (a log's failure lines, grouped by
//! [`crate::ingest::log::grouping`]; a snapshot's `oom` entry; a series that filled the
//! device). [`fusion`] then joins what several inputs say about the same failure, and
//! [`timeline`] decides its phase once, from all of them. Only then are its facts derived
//! ([`Incident::derived_facts`]) and diagnosed.

pub mod fusion;
pub mod timeline;

use std::collections::BTreeSet;

use crate::facts::engine::Domain;
use crate::facts::evidence::{Facts, InputName, Provenance};

/// One incident found in an input, before rules decide its cause.
#[derive(Clone, Debug)]
pub struct Incident {
    pub input: InputName,
    /// `failure.kind` of the primary failure.
    pub kind: &'static str,
    pub domain: Domain,
    pub engine: &'static str,
    pub device: Option<u32>,
    pub devices: BTreeSet<u32>,
    pub ranks: BTreeSet<u32>,
    /// How many failure lines were folded into this incident.
    pub copies: u32,
    /// Where it was first seen.
    pub first: Provenance,
    pub last_line: u64,
    /// Timestamp text of the first failure line, when the log had one.
    pub timestamp: Option<String>,
    /// The nearest timestamp printed at or before the failure: the failure line's own, else
    /// that of the closest line before it (a traceback's lines carry none; the logger's
    /// `ERROR` line above them does). Only used to line the incident up with a series.
    pub time_hint: Option<String>,
    /// The process id a line prefix gave for the failure (`(EngineCore pid=123)`,
    /// `python3[4242]:`), to tell the failing job from its neighbours in per-process series.
    pub pid: Option<u32>,
    pub facts: Facts,
    pub phase: &'static str,
    /// Created by a wrapper message that a real failure may still complete.
    pub(crate) from_wrapper: bool,
    pub(crate) run: u32,
    pub(crate) signature: String,
    /// A reading its failure needs and the run has not logged yet (`Failure::requires`): the
    /// incident is dropped if the run ends without it.
    pub(crate) requires: Option<(&'static str, f64)>,
}

impl Incident {
    /// An incident seen only in a structured input (a snapshot's `oom` entry, a series that
    /// filled the device) or in no one line (a log's growth), not made from a failure line.
    /// Its `failure.kind` and `failure.engine` are its own kind and engine, placed at `first`,
    /// unless `facts` say otherwise. Its phase is left to the [`timeline`].
    pub fn from_evidence(
        input: InputName,
        kind: &'static str,
        engine: &'static str,
        domain: Domain,
        device: Option<u32>,
        first: Provenance,
        mut facts: Facts,
    ) -> Incident {
        facts.set_if_absent("failure.kind", kind, Some(first.clone()));
        facts.set_if_absent("failure.engine", engine, Some(first.clone()));
        let signature = format!("{kind}|{engine}|{input}|{device:?}");
        Incident {
            input,
            kind,
            domain,
            engine,
            device,
            devices: device.into_iter().collect(),
            ranks: BTreeSet::new(),
            copies: 1,
            first,
            last_line: 0,
            timestamp: None,
            time_hint: None,
            pid: None,
            facts,
            phase: crate::facts::phase::id::UNKNOWN,
            from_wrapper: false,
            run: 0,
            signature,
            requires: None,
        }
    }

    /// The facts every rule and renderer reads: the fused facts, what the incident itself
    /// knows (engine, copies, ranks, devices), then every derivation
    /// ([`crate::facts::derive`]). This is the one place they are put together.
    pub fn derived_facts(&self) -> Facts {
        let mut facts = self.facts.clone();
        facts.set_if_absent("engine", self.engine, Some(self.first.clone()));
        facts.set_if_absent("failure.copies", self.copies, Some(self.first.clone()));
        if !self.ranks.is_empty() {
            facts.set_if_absent("failure.ranks", self.ranks.len(), Some(self.first.clone()));
        }
        if !self.devices.is_empty() {
            facts.set_if_absent(
                "failure.devices",
                self.devices.len(),
                Some(self.first.clone()),
            );
        }
        crate::facts::derive::derive(&mut facts);
        facts
    }

    /// The requested bytes, when the failure said.
    pub fn requested_bytes(&self) -> Option<u64> {
        self.facts
            .num("oom.requested_bytes")
            .or_else(|| self.facts.num("host.requested_bytes"))
            .map(|v| v as u64)
    }
}
