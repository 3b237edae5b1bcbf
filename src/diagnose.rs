//! From incidents to a diagnosis: facts → rules → scored causes → ranked fixes.
//!
//! Scoring is additive and explainable: every rule sums the weights of its signals that
//! hold; a cause's score is its best rule's score; confidence is that score's share of all
//! points plus a fixed prior (`PRIOR_POINTS`), so thin evidence never looks certain. Fixes
//! come from the winning rule and from alternatives that are still plausible, ordered by
//! cause confidence times the fix's own weight. Two fixes that turn the same knob in
//! opposite directions are never both shown: the one from the stronger cause stays.

use std::collections::BTreeMap;

use crate::cause::Cause;
use crate::evidence::{Facts, Provenance};
use crate::incident::Incident;
use crate::report::{Alternative, EvidenceItem, FixReport, IncidentReport, Location};
use crate::rules::{MatchedSignal, RuleOutcome, RuleSet, evaluate, evaluate_fixes};

/// Points of doubt added to the denominator of every confidence.
pub const PRIOR_POINTS: f64 = 3.0;
/// Alternatives below this confidence contribute no fixes.
pub const FIX_FROM_ALTERNATIVE: f64 = 0.15;
/// At most this many fixes per incident.
pub const MAX_FIXES: usize = 8;

/// Diagnoses one incident.
pub fn diagnose(incident: &Incident, rules: &RuleSet) -> IncidentReport {
    let mut facts = incident.facts.clone();
    facts.set_if_absent("engine", incident.engine, Some(incident.first.clone()));
    facts.set_if_absent(
        "failure.copies",
        incident.copies,
        Some(incident.first.clone()),
    );
    if !incident.ranks.is_empty() {
        facts.set_if_absent(
            "failure.ranks",
            incident.ranks.len(),
            Some(incident.first.clone()),
        );
    }
    if !incident.devices.is_empty() {
        facts.set_if_absent(
            "failure.devices",
            incident.devices.len(),
            Some(incident.first.clone()),
        );
    }
    crate::derive::derive(&mut facts);
    let mut report = diagnose_facts(incident, facts, rules);
    report.fingerprint = fingerprint(&report);
    report
}

/// Version of the fingerprint recipe; part of the hashed text, so a change of recipe changes
/// every fingerprint instead of silently merging groups that used to differ.
pub const FINGERPRINT_VERSION: &str = "v1";

/// A short, stable id for "the same problem": 16 hex digits of a 64-bit FNV-1a hash of
/// the cause, the engine, the failure kind, the deciding rule, the phase, the device family
/// and a normalised signature of the sizes (the request and the device capacity, each
/// bucketed to a quarter of a power of two, so 79.15 and 79.25 GiB cards or a request that
/// moves by a few MiB between runs stay together) and, for host failures, what killed the
/// process. Device ordinals, ranks, hosts, pids, addresses, timestamps, line numbers and
/// input names are left out, so one incident gives one fingerprint across ranks, restarts,
/// hosts and runs; a different cause always gives a different one.
pub fn fingerprint(r: &IncidentReport) -> String {
    let bucket = |name: &str| {
        r.facts
            .num(name)
            .filter(|v| *v >= 1.0)
            .map(|v| format!("{}", (v.log2() * 4.0).round() as i64))
            .unwrap_or_else(|| "-".into())
    };
    let text = |name: &str| r.facts.str(name).unwrap_or("-").to_string();
    let requested = if r.facts.contains("oom.requested_bytes") {
        bucket("oom.requested_bytes")
    } else {
        bucket("host.requested_bytes")
    };
    let signature = [
        FINGERPRINT_VERSION.to_string(),
        r.cause.id().to_string(),
        r.engine.clone(),
        r.kind.clone(),
        r.rule.clone(),
        r.phase.clone(),
        text("oom.backend"),
        requested,
        bucket("oom.total_bytes"),
        text("host.killer"),
        text("host.signal"),
    ]
    .join("|");
    format!("{:016x}", fnv1a64(signature.as_bytes()))
}

/// FNV-1a, 64 bits: tiny, and unlike `std`'s hasher its output is fixed forever.
fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn evidence_items(signals: &[MatchedSignal], fallback: &Provenance) -> Vec<EvidenceItem> {
    signals
        .iter()
        .map(|s| {
            let primary = s
                .sources
                .iter()
                .find(|p| p.line.is_some())
                .or(s.sources.first())
                .unwrap_or(fallback);
            EvidenceItem {
                text: s.text.clone(),
                weight: s.weight,
                input: primary.input.to_string(),
                line: primary.line,
                facts: s.facts.clone(),
                sources: if s.sources.is_empty() {
                    vec![fallback.clone()]
                } else {
                    s.sources.clone()
                },
            }
        })
        .collect()
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The cause to report when no rule found anything: the plain reading of the failure kind.
fn fallback_cause(kind: &str) -> Cause {
    match kind {
        "host-oom" => Cause::HostOom,
        "kv-capacity" | "kv-exhausted" => Cause::KvCacheOverflow,
        "engine-budget" => Cause::MemoryContention,
        "no-kv-memory" => Cause::ModelTooLarge,
        _ => Cause::BatchMisconfiguration,
    }
}

fn diagnose_facts(incident: &Incident, facts: Facts, rules: &RuleSet) -> IncidentReport {
    // Best outcome per cause.
    let mut best: BTreeMap<Cause, RuleOutcome<'_>> = BTreeMap::new();
    for rule in &rules.rules {
        let Some(outcome) = evaluate(rule, &facts) else {
            continue;
        };
        if outcome.score <= 0.0 {
            continue;
        }
        let better = best
            .get(&rule.cause)
            .is_none_or(|b| outcome.score > b.score);
        if better {
            best.insert(rule.cause, outcome);
        }
    }
    let total: f64 = best.values().map(|o| o.score).sum();
    let mut ranked: Vec<(Cause, &RuleOutcome<'_>)> = best.iter().map(|(c, o)| (*c, o)).collect();
    // Highest score first; ties keep the catalogue order of causes (stable sort).
    ranked.sort_by(|a, b| {
        b.1.score
            .partial_cmp(&a.1.score)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let conf = |o: &RuleOutcome<'_>| round2(o.score / (total + PRIOR_POINTS));

    let location = Location {
        input: incident.first.input.to_string(),
        line: incident.first.line,
    };
    let base = |cause: Cause,
                confidence: f64,
                rule: String,
                summary: String,
                evidence: Vec<EvidenceItem>| IncidentReport {
        id: 0,
        cause,
        confidence,
        title: cause.title().to_string(),
        summary,
        rule,
        fingerprint: String::new(),
        engine: incident.engine.to_string(),
        phase: incident.phase.to_string(),
        kind: incident.kind.to_string(),
        device: incident.device,
        devices: incident.devices.iter().copied().collect(),
        ranks: incident.ranks.iter().copied().collect(),
        copies: incident.copies,
        requested_bytes: incident.requested_bytes(),
        location: location.clone(),
        timestamp: incident.timestamp.clone(),
        evidence,
        alternatives: vec![],
        fixes: vec![],
        facts: facts.clone(),
    };

    let Some((top_cause, top)) = ranked.first().copied() else {
        let cause = fallback_cause(incident.kind);
        let ev = EvidenceItem {
            text: format!(
                "no rule matched this {} failure; {} is the usual cause of one",
                incident.kind,
                cause.id()
            ),
            weight: 0.0,
            input: location.input.clone(),
            line: location.line,
            facts: vec!["failure.kind".into()],
            sources: vec![incident.first.clone()],
        };
        return base(
            cause,
            0.1,
            "none".into(),
            cause.title().to_string(),
            vec![ev],
        );
    };

    let mut report = base(
        top_cause,
        conf(top),
        top.rule.id.clone(),
        top.summary
            .clone()
            .unwrap_or_else(|| top.rule.title.clone()),
        evidence_items(&top.signals, &incident.first),
    );
    report.alternatives = ranked[1..]
        .iter()
        .map(|(c, o)| Alternative {
            cause: *c,
            confidence: conf(o),
            rule: o.rule.id.clone(),
            summary: o.summary.clone().unwrap_or_else(|| o.rule.title.clone()),
            evidence: evidence_items(&o.signals, &incident.first),
        })
        .collect();

    // Fixes: the winner's, then plausible alternatives', by cause confidence x fix weight.
    let mut candidates = Vec::new();
    for (i, (cause, outcome)) in ranked.iter().enumerate() {
        let c = conf(outcome);
        if i > 0 && c < FIX_FROM_ALTERNATIVE {
            continue;
        }
        for (j, fix) in evaluate_fixes(outcome.rule, &facts).into_iter().enumerate() {
            // Rank by likelihood; within equal scores keep the rule author's order.
            let score = c.max(0.01) * fix.weight - j as f64 * 1e-6;
            candidates.push((score, *cause, outcome.rule.id.clone(), fix));
        }
    }
    candidates.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal));
    let mut fixes: Vec<FixReport> = Vec::new();
    let mut knobs: Vec<(String, Option<crate::rules::Direction>)> = Vec::new();
    for (_, cause, rule, fix) in candidates {
        if fixes.iter().any(|f| f.action == fix.action) {
            continue;
        }
        if let Some(knob) = &fix.knob {
            // One knob, one direction, one fix: the first (strongest) wins.
            if knobs.iter().any(|(k, _)| k == knob) {
                continue;
            }
            knobs.push((knob.clone(), fix.direction));
        }
        if fixes.len() >= MAX_FIXES {
            break;
        }
        fixes.push(FixReport {
            rank: fixes.len() + 1,
            title: fix.title,
            action: fix.action,
            why: fix.why,
            kind: fix.kind,
            cause,
            rule,
            knob: fix.knob,
            direction: fix.direction,
            values: fix.values,
        });
    }
    report.fixes = fixes;
    report
}

/// Orders incidents most confident first and numbers them.
pub fn finish(mut reports: Vec<IncidentReport>) -> Vec<IncidentReport> {
    reports.sort_by(|a, b| {
        b.confidence
            .partial_cmp(&a.confidence)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.location.input.cmp(&b.location.input))
            .then_with(|| a.location.line.cmp(&b.location.line))
    });
    for (i, r) in reports.iter_mut().enumerate() {
        r.id = i + 1;
    }
    reports
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_is_the_published_function() {
        // Test vectors from the FNV reference (draft-eastlake-fnv).
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }
}
