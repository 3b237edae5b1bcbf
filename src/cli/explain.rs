//! `oomdoctor explain`, `oomdoctor rules` and `oomdoctor facts`: what a cause, rule, phase
//! or fact means, and the lists of them.

use crate::diagnosis::cause::Cause;
use crate::diagnosis::rules::RuleSet;
use crate::render::ListFormat;
use std::fmt::Write as _;

/// Text for `oomdoctor explain` with no topic: what can be explained.
pub fn explain_topics(rules: &RuleSet) -> String {
    let mut out = String::from(
        "oomdoctor explain TOPIC: a cause, a rule, a phase, a fact, or `rules` (the rule file format).\n\nCauses:\n",
    );
    for c in Cause::ALL {
        let _ = writeln!(out, "  {:<24} {}", c.id(), c.title());
    }
    let _ = writeln!(out, "\nPhases:");
    for (p, _) in crate::facts::phase::PHASES {
        let _ = writeln!(out, "  {p}");
    }
    let _ = writeln!(
        out,
        "\nRules: {} in force (`oomdoctor rules` lists them).\nFacts: {} (`oomdoctor facts` lists them).",
        rules.rules.len(),
        crate::facts::catalog::all().count()
    );
    out
}

/// Topics close to an unknown one: those it is a prefix or part of, else those within a
/// small edit distance. At most five, closest first.
pub(crate) fn did_you_mean(id: &str, rules: &RuleSet) -> Vec<String> {
    let id = id.to_ascii_lowercase();
    let mut topics: Vec<String> = Cause::ALL.iter().map(|c| c.id().to_string()).collect();
    topics.extend(
        crate::facts::phase::PHASES
            .iter()
            .map(|(p, _)| p.to_string()),
    );
    topics.extend(rules.rules.iter().map(|r| r.id.clone()));
    topics.extend(crate::facts::catalog::all().map(|f| f.name.to_string()));
    topics.push("rules".into());
    let mut close: Vec<(usize, String)> = topics
        .into_iter()
        .filter_map(|t| {
            if id.len() >= 3 && t.contains(&id) {
                return Some((usize::from(!t.starts_with(&id)), t));
            }
            let d = strsim::levenshtein(&id, &t);
            (d <= (id.len() / 3).max(1)).then_some((2 + d, t))
        })
        .collect();
    close.sort();
    close.dedup_by(|a, b| a.1 == b.1);
    close.into_iter().take(5).map(|(_, t)| t).collect()
}

/// Text for `oomdoctor explain ID`.
pub fn explain(id: &str, rules: &RuleSet) -> Option<String> {
    let mut out = String::new();
    if let Ok(cause) = id.parse::<Cause>() {
        let _ = writeln!(out, "{} — {}\n", cause.id(), cause.title());
        let _ = writeln!(out, "{}\n", cause.description());
        let _ = writeln!(out, "Rules that conclude {}:", cause.id());
        for r in rules.rules.iter().filter(|r| r.cause == cause) {
            let _ = writeln!(out, "  {:<36} {}", r.id, r.title);
        }
        return Some(out);
    }
    if let Some(r) = rules.get(id) {
        let _ = writeln!(out, "{} ({}, {})\n{}\n", r.id, r.cause, r.origin, r.title);
        let _ = writeln!(out, "{}", r.explanation.trim());
        if let Some(a) = &r.applies {
            let _ = writeln!(out, "\nApplies when: {}", a.describe());
        }
        if !r.lets.is_empty() {
            let _ = writeln!(out, "\nValues:");
            for (name, e) in &r.lets {
                let _ = writeln!(out, "  {name} = {}", e.text());
            }
        }
        let _ = writeln!(out, "\nSignals (points when they hold):");
        for s in &r.signals {
            let _ = writeln!(
                out,
                "  {:+}  {}\n        says: {}",
                s.weight,
                s.when.describe(),
                s.says.text()
            );
        }
        let _ = writeln!(out, "\nFixes:");
        for f in &r.fixes {
            let _ = writeln!(out, "  - {}\n      {}", f.title.text(), f.action.text());
            if let Some(w) = &f.when {
                let _ = writeln!(out, "      when: {}", w.describe());
            }
            if let Some(u) = &f.unless {
                let _ = writeln!(out, "      unless: {}", u.describe());
            }
        }
        for link in &r.references {
            let _ = writeln!(out, "\nSee {link}");
        }
        return Some(out);
    }
    if let Some((p, doc)) = crate::facts::phase::PHASES.iter().find(|(p, _)| *p == id) {
        let _ = writeln!(out, "phase {p}: {doc}");
        return Some(out);
    }
    if let Some(f) = crate::facts::catalog::lookup(id) {
        let _ = writeln!(out, "fact {} ({:?}): {}", f.name, f.unit, f.doc);
        return Some(out);
    }
    if id == "rules" {
        out.push_str(crate::diagnosis::rules::FORMAT_HELP);
        return Some(out);
    }
    None
}

pub(crate) fn list_rules(set: &RuleSet, format: ListFormat) -> String {
    match format {
        ListFormat::Json => {
            let rows: Vec<serde_json::Value> = set
                .rules
                .iter()
                .map(|r| serde_json::json!({"id": r.id, "cause": r.cause, "title": r.title, "origin": r.origin, "signals": r.signals.len(), "fixes": r.fixes.len()}))
                .collect();
            let mut s = serde_json::to_string_pretty(&rows).unwrap_or_default();
            s.push('\n');
            s
        }
        ListFormat::Human => {
            let mut out = String::new();
            for r in &set.rules {
                let _ = writeln!(out, "{:<38} {:<24} {}", r.id, r.cause.id(), r.title);
            }
            out
        }
    }
}

pub(crate) fn list_facts(format: ListFormat) -> String {
    match format {
        ListFormat::Json => {
            let rows: Vec<serde_json::Value> = crate::facts::catalog::all()
                .map(|f| serde_json::json!({"name": f.name, "unit": f.unit, "doc": f.doc}))
                .collect();
            let mut s = serde_json::to_string_pretty(&rows).unwrap_or_default();
            s.push('\n');
            s
        }
        ListFormat::Human => {
            let mut out = String::new();
            for f in crate::facts::catalog::all() {
                let _ = writeln!(
                    out,
                    "{:<44} {:<8} {}",
                    f.name,
                    format!("{:?}", f.unit).to_lowercase(),
                    f.doc
                );
            }
            out
        }
    }
}
