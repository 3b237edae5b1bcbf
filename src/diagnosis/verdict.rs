//! From incidents to a diagnosis: facts → rules → scored causes → ranked fixes.
//!
//! The cause is a differential diagnosis (see [`crate::diagnosis::rules::decision`]): prior odds per
//! failure kind and engine, the findings that hold, and each cause's best applicable rule's
//! own signals give a posterior over causes; the posterior is the confidence, and an
//! incident whose top two causes stay close is reported as undetermined, with the input that
//! would settle it. Fixes come from the winning rule and from alternatives that are still
//! plausible, ordered by cause probability times the fix's own weight. A fix that would turn
//! its knob the wrong way for what the evidence shows is dropped, and two fixes never turn
//! one knob.

use std::collections::BTreeMap;

use crate::diagnosis::cause::Cause;
use crate::diagnosis::report::{Alternative, EvidenceItem, FixReport, IncidentReport, Location};
use crate::diagnosis::rules::{MatchedSignal, RuleOutcome, RuleSet, evaluate, evaluate_fixes};
use crate::facts::evidence::{Facts, Provenance};
use crate::incident::Incident;

/// The least prior odds a cause that an applicable rule argues for starts from, where the
/// failure kind's prior leaves it out.
pub const PRIOR_FLOOR: f64 = 0.01;
/// Alternatives below this probability contribute no fixes.
pub const FIX_FROM_ALTERNATIVE: f64 = 0.15;
/// At most this many fixes per incident.
pub const MAX_FIXES: usize = 8;

/// Diagnoses one incident.
pub fn diagnose(incident: &Incident, rules: &RuleSet) -> IncidentReport {
    let facts = incident.derived_facts();
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

/// Which of two applicable rules of one cause explains an incident better: the more
/// specific (its gate names more of what this failure is), then the better scored, then the
/// one with more of its evidence holding, then the one whose summary the facts could fill
/// in (a summary that fell back to the rule's title explains nothing about this failure).
/// Rules are read in id order, so an exact tie keeps the first id.
fn explains_better(a: &RuleOutcome<'_>, b: &RuleOutcome<'_>) -> bool {
    let key = |o: &RuleOutcome<'_>| {
        let held = o.signals.iter().filter(|s| s.weight > 0.0).count();
        (o.rule.specificity, o.score, held, o.summary.is_some())
    };
    key(a) > key(b)
}

fn diagnose_facts(incident: &Incident, facts: Facts, rules: &RuleSet) -> IncidentReport {
    let model = &rules.decision;
    // Best applicable rule per cause: its signals are the cause's rule-specific evidence,
    // its summary and fixes the cause's explanation. A rule whose gate holds makes its cause
    // a candidate even with no signal held; the gate itself is not evidence.
    // The cause's evidence is the strongest of its rules' signal sums; its explanation is
    // the most specific of its rules (then the better-scored; see `decision::specificity`).
    let mut best: BTreeMap<Cause, RuleOutcome<'_>> = BTreeMap::new();
    let mut cause_points: BTreeMap<Cause, f64> = BTreeMap::new();
    for rule in &rules.rules {
        let Some(outcome) = evaluate(rule, &facts) else {
            continue;
        };
        let points = cause_points.entry(rule.cause).or_insert(0.0);
        *points = points.max(outcome.score);
        let better = best
            .get(&rule.cause)
            .is_none_or(|b| explains_better(&outcome, b));
        if better {
            best.insert(rule.cause, outcome);
        }
    }
    let kind = facts
        .str("failure.kind")
        .unwrap_or(incident.kind)
        .to_string();
    let engine = facts.str("engine").unwrap_or(incident.engine).to_string();
    let prior = model.prior(&kind, &engine);
    let generic_prior = model.prior("*", "");
    let findings = model.findings_holding(&facts);

    // The causes in play: those the prior admits and those an applicable rule argues for.
    let mut logits: Vec<(Cause, f64)> = Vec::new();
    // What the evidence alone (findings, rule signals and the failure kind, not the base
    // rate) says of each cause.
    let mut evidence_nats: BTreeMap<Cause, f64> = BTreeMap::new();
    for cause in Cause::ALL {
        let p = prior.get(&cause).copied().unwrap_or(0.0);
        let rule = best.get(&cause);
        if p <= 0.0 && rule.is_none() {
            continue;
        }
        let mut evidence = 0.0;
        for (f, _) in &findings {
            evidence += f.strength.get(&cause).copied().unwrap_or(0.0);
        }
        if rule.is_some() {
            let points = cause_points.get(&cause).copied().unwrap_or(0.0);
            evidence += (points * model.nats_per_point).min(model.rule_cap_nats);
        }
        // The failure kind is itself an observation (a KV-capacity error is not a base-rate
        // OOM): what its prior adds over the catch-all prior counts as evidence too.
        let generic = generic_prior.get(&cause).copied().unwrap_or(0.0);
        let kind_evidence = p.max(PRIOR_FLOOR).ln() - generic.max(PRIOR_FLOOR).ln();
        evidence_nats.insert(cause, evidence + kind_evidence);
        let logit = p.max(PRIOR_FLOOR).ln() + evidence;
        logits.push((cause, logit * model.sharpness));
    }
    let max = logits
        .iter()
        .map(|(_, l)| *l)
        .fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = logits.iter().map(|(_, l)| (l - max).exp()).sum();
    let mut ranked: Vec<(Cause, f64)> = logits
        .iter()
        .map(|(c, l)| (*c, (l - max).exp() / z))
        .collect();
    // Most probable first; ties keep the catalogue order of causes (stable sort).
    ranked.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));

    let location = Location {
        input: incident.first.input.to_string(),
        line: incident.first.line,
    };
    // The evidence for one cause: the findings that bear on it, then its rule's signals,
    // all weighed in nats.
    // A finding's weight for a cause is shown relative to the cause's competitors: "no room
    // at all" says nothing of the batch by itself, yet it is why the batch beat fragmentation.
    let evidence_for = |cause: Cause| -> Vec<EvidenceItem> {
        let mut items: Vec<MatchedSignal> = findings
            .iter()
            .filter_map(|(f, m)| {
                let own = f.strength.get(&cause).copied().unwrap_or(0.0);
                // Against the plain mean of the other candidates: weighting by their posterior
                // would hide exactly the causes this finding ruled out.
                let (mut others, mut mass) = (0.0, 0.0);
                for (c, _) in &ranked {
                    if *c != cause {
                        others += f.strength.get(c).copied().unwrap_or(0.0);
                        mass += 1.0;
                    }
                }
                let relative = if mass > 0.0 { own - others / mass } else { own };
                let shown = if own != 0.0 { own } else { round2(relative) };
                (own != 0.0 || relative.abs() >= 0.3).then(|| MatchedSignal {
                    weight: shown,
                    ..m.clone()
                })
            })
            .collect();
        if let Some(o) = best.get(&cause) {
            items.extend(o.signals.iter().map(|s| MatchedSignal {
                weight: round2(s.weight * model.nats_per_point),
                ..s.clone()
            }));
        }
        // Strongest first, evidence for before evidence against.
        items.sort_by(|a, b| {
            b.weight
                .partial_cmp(&a.weight)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        evidence_items(&items, &incident.first)
    };
    let summary_of = |cause: Cause| -> (String, String) {
        match best.get(&cause) {
            Some(o) => (
                o.rule.id.clone(),
                o.summary.clone().unwrap_or_else(|| o.rule.title.clone()),
            ),
            None => (DECISION_RULE.to_string(), cause.title().to_string()),
        }
    };

    let Some(&(top_cause, top_p)) = ranked.first() else {
        // No prior and no rule: a failure kind this build has no knowledge of.
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
        let mut r = report_base(incident, &facts, location, cause, 0.1, "none".into());
        r.summary = cause.title().to_string();
        r.evidence = vec![ev];
        r.determined = false;
        return r;
    };
    let runner_up = ranked.get(1).copied();
    let evidence_of = |c: Cause| evidence_nats.get(&c).copied().unwrap_or(0.0);
    let determined = top_p >= model.determined_posterior
        && runner_up.is_none_or(|(second, p)| {
            top_p >= model.determined_ratio * p
                && (top_p >= model.determined_without_margin
                    || evidence_of(top_cause) - evidence_of(second)
                        >= model.determined_evidence_nats)
        });

    let (rule_id, summary) = summary_of(top_cause);
    let mut report = report_base(
        incident,
        &facts,
        location,
        top_cause,
        shown_probability(top_p),
        rule_id,
    );
    report.summary = summary;
    report.evidence = evidence_for(top_cause);
    report.determined = determined;
    if !determined {
        if let Some((second, _)) = runner_up {
            report.settle = Some(
                model
                    .settle(top_cause, second)
                    .map(str::to_string)
                    .unwrap_or_else(|| {
                        format!(
                            "more evidence: the log does not separate {} from {}",
                            top_cause.id(),
                            second.id()
                        )
                    }),
            );
        }
    }
    report.alternatives = ranked[1..]
        .iter()
        .filter(|(_, p)| *p >= model.alternative_floor)
        .map(|(c, p)| {
            let (rule, summary) = summary_of(*c);
            Alternative {
                cause: *c,
                confidence: shown_probability(*p),
                rule,
                summary,
                evidence: evidence_for(*c),
            }
        })
        .collect();

    // Fixes: the winner's, then plausible alternatives', by cause probability x fix weight.
    let mut candidates = Vec::new();
    for (i, (cause, p)) in ranked.iter().enumerate() {
        if i > 0 && *p < FIX_FROM_ALTERNATIVE {
            continue;
        }
        let Some(outcome) = best.get(cause) else {
            continue;
        };
        for (j, fix) in evaluate_fixes(outcome.rule, &facts).into_iter().enumerate() {
            if points_the_wrong_way(&fix, &facts, model) {
                continue;
            }
            // Rank by likelihood; within equal scores keep the rule author's order.
            let score = p.max(0.01) * fix.weight - j as f64 * 1e-6;
            candidates.push((score, *cause, outcome.rule.id.clone(), fix));
        }
    }
    candidates.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal));
    let mut fixes: Vec<FixReport> = Vec::new();
    let mut knobs: Vec<&str> = Vec::new();
    for (_, cause, rule, fix) in &candidates {
        if fixes.iter().any(|f| f.action == fix.action) {
            continue;
        }
        if let Some(knob) = &fix.knob {
            // One knob, one direction, one fix: the first (strongest) wins, so two fixes never
            // turn one knob opposite ways.
            if knobs.contains(&knob.as_str()) {
                continue;
            }
            knobs.push(knob);
        }
        if fixes.len() >= MAX_FIXES {
            break;
        }
        fixes.push(FixReport {
            rank: fixes.len() + 1,
            title: fix.title.clone(),
            action: fix.action.clone(),
            why: fix.why.clone(),
            kind: fix.kind,
            cause: *cause,
            rule: rule.clone(),
            knob: fix.knob.clone(),
            direction: fix.direction,
            values: fix.values.clone(),
        });
    }
    report.fixes = fixes;
    report
}

/// A probability as reported: two decimals, and never 1.00 or 0.00, which the evidence of
/// one log cannot support.
fn shown_probability(p: f64) -> f64 {
    round2(p).clamp(0.01, 0.99)
}

/// The rule id reported when the decision model chose a cause that no rule applies to.
pub const DECISION_RULE: &str = "differential";

/// Whether a fix would turn its knob the wrong way given what the evidence shows: down from
/// its floor (a batch of one), on when it is already on, off when already off, or to a
/// target on the wrong side of the current value.
fn points_the_wrong_way(
    fix: &crate::diagnosis::rules::FixOutcome,
    facts: &Facts,
    model: &crate::diagnosis::rules::decision::DecisionModel,
) -> bool {
    use crate::diagnosis::rules::Direction;
    use crate::facts::evidence::Value;
    let (Some(knob), Some(direction)) = (fix.knob.as_deref(), fix.direction) else {
        return false;
    };
    if direction == Direction::Down && model.knob_at_floor(knob, facts) {
        return true;
    }
    let Some(current_fact) = model.knob_current(knob) else {
        return false;
    };
    let Some(current) = facts.get(current_fact).map(|f| &f.value) else {
        return false;
    };
    match (direction, current) {
        (Direction::On, Value::Bool(true)) | (Direction::Off, Value::Bool(false)) => true,
        (Direction::Up | Direction::Down, cur) => {
            let Some(cur) = cur.as_f64() else {
                return false;
            };
            // The target: the first computed value that is not the knob's current value (a
            // title's "from {util} to {new_util}" names the current value first, often
            // through a `let` of another name, so the value is compared, not the text).
            let target = fix
                .values
                .iter()
                .filter(|v| v.expr.trim() != current_fact)
                .filter_map(|v| v.value.as_f64())
                .find(|&v| v != cur);
            match (direction, target) {
                (Direction::Down, Some(t)) => t >= cur,
                (Direction::Up, Some(t)) => t <= cur,
                _ => false,
            }
        }
        _ => false,
    }
}

fn report_base(
    incident: &Incident,
    facts: &Facts,
    location: Location,
    cause: Cause,
    confidence: f64,
    rule: String,
) -> IncidentReport {
    IncidentReport {
        id: 0,
        cause,
        confidence,
        determined: true,
        settle: None,
        title: cause.title().to_string(),
        summary: String::new(),
        rule,
        fingerprint: String::new(),
        engine: incident.engine.to_string(),
        phase: facts.str("phase").unwrap_or(incident.phase).to_string(),
        kind: incident.kind.to_string(),
        device: incident.device,
        devices: incident.devices.iter().copied().collect(),
        ranks: incident.ranks.iter().copied().collect(),
        copies: incident.copies,
        requested_bytes: incident.requested_bytes(),
        location,
        timestamp: incident.timestamp.clone(),
        evidence: vec![],
        alternatives: vec![],
        fixes: vec![],
        facts: facts.clone(),
    }
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
