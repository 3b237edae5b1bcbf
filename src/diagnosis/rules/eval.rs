//! Evaluating a rule against an incident's facts.
//!
//! Evaluation records which facts every condition and every template value read, so each
//! matched signal and each computed fix value carries the provenance of the facts behind it
//! (the JSON output's traceability).

use std::cell::RefCell;
use std::collections::HashMap;

use serde::Serialize;

use super::{Cond, Direction, FixKind, Fmt, Rule, Template, TemplatePart};
use crate::diagnosis::expr::{Scope, Val};
use crate::facts::evidence::{Facts, Provenance, Unit, Value, format_plain};
use crate::facts::units::format_bytes_f;

/// Resolves names for one rule: `let` values first, then facts. Records the facts read.
struct RuleScope<'a> {
    rule: &'a Rule,
    facts: &'a Facts,
    used: RefCell<Vec<String>>,
    /// Computed lets with the facts they read.
    cache: RefCell<HashMap<String, (Val, Vec<String>)>>,
}

impl<'a> RuleScope<'a> {
    fn new(rule: &'a Rule, facts: &'a Facts) -> Self {
        RuleScope {
            rule,
            facts,
            used: RefCell::new(Vec::new()),
            cache: RefCell::new(HashMap::new()),
        }
    }

    /// Runs `f` and returns what it produced plus the facts it read.
    fn tracking<T>(&self, f: impl FnOnce() -> T) -> (T, Vec<String>) {
        let saved = std::mem::take(&mut *self.used.borrow_mut());
        let out = f();
        let used = std::mem::replace(&mut *self.used.borrow_mut(), saved);
        self.used.borrow_mut().extend(used.iter().cloned());
        (out, used)
    }

    fn note(&self, names: &[String]) {
        let mut u = self.used.borrow_mut();
        for n in names {
            if !u.contains(n) {
                u.push(n.clone());
            }
        }
    }
}

impl Scope for RuleScope<'_> {
    fn lookup(&self, name: &str) -> Val {
        if let Some(&i) = self.rule.let_index.get(name) {
            if let Some((v, used)) = self.cache.borrow().get(name).cloned() {
                self.note(&used);
                return v;
            }
            let (v, used) = self.tracking(|| self.rule.lets[i].1.eval(self));
            self.cache
                .borrow_mut()
                .insert(name.to_string(), (v.clone(), used));
            return v;
        }
        match self.facts.value(name) {
            Some(v) => {
                self.note(&[name.to_string()]);
                Val::from(v)
            }
            None => Val::Missing,
        }
    }
}

fn eval_cond(c: &Cond, s: &RuleScope<'_>) -> Val {
    match c {
        Cond::Expr(e) => e.eval(s),
        Cond::All(v) => {
            let mut acc = Val::Bool(true);
            for c in v {
                match eval_cond(c, s) {
                    Val::Bool(false) => return Val::Bool(false),
                    Val::Bool(true) => {}
                    _ => acc = Val::Missing,
                }
            }
            acc
        }
        Cond::Any(v) => {
            let mut acc = Val::Bool(false);
            for c in v {
                match eval_cond(c, s) {
                    Val::Bool(true) => return Val::Bool(true),
                    Val::Bool(false) => {}
                    _ => acc = Val::Missing,
                }
            }
            acc
        }
        Cond::Not(c) => match eval_cond(c, s) {
            Val::Bool(b) => Val::Bool(!b),
            _ => Val::Missing,
        },
    }
}

/// A signal that held, with what it said and where its facts came from.
#[derive(Clone, Debug, Serialize)]
pub struct MatchedSignal {
    pub text: String,
    pub weight: f64,
    pub facts: Vec<String>,
    pub sources: Vec<Provenance>,
}

/// A rule's verdict on an incident.
#[derive(Clone, Debug)]
pub struct RuleOutcome<'r> {
    pub rule: &'r Rule,
    /// Sum of the weights of the signals that held (never below zero).
    pub score: f64,
    pub signals: Vec<MatchedSignal>,
    /// The rule's summary line, rendered.
    pub summary: Option<String>,
}

fn sources_of(facts: &Facts, names: &[String]) -> Vec<Provenance> {
    let mut out: Vec<Provenance> = Vec::new();
    for n in names {
        if let Some(f) = facts.get(n) {
            for s in &f.sources {
                if !out.contains(s) {
                    out.push(s.clone());
                }
            }
        }
    }
    out
}

/// Evaluates a rule; `None` when its `applies` gate does not hold.
pub fn evaluate<'r>(rule: &'r Rule, facts: &Facts) -> Option<RuleOutcome<'r>> {
    let scope = RuleScope::new(rule, facts);
    if let Some(a) = &rule.applies {
        if !eval_cond(a, &scope).is_true() {
            return None;
        }
    }
    let mut score = 0.0;
    let mut signals = Vec::new();
    for s in &rule.signals {
        let (held, used) = scope.tracking(|| eval_cond(&s.when, &scope));
        if !held.is_true() {
            continue;
        }
        score += s.weight;
        let (text, more) = scope.tracking(|| render_with(&s.says, &scope));
        let mut names = used;
        for n in more {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        // A signal holds on the facts its condition read; its text may name others that are
        // missing. The text is still shown, with those holes marked, never as raw template.
        let text = text
            .map(|(t, _)| t)
            .unwrap_or_else(|| render_lenient(&s.says, &scope));
        signals.push(MatchedSignal {
            text,
            weight: s.weight,
            sources: sources_of(facts, &names),
            facts: names,
        });
    }
    let summary = rule
        .summary
        .as_ref()
        .and_then(|t| render_with(t, &scope))
        .map(|(t, _)| t);
    Some(RuleOutcome {
        rule,
        score: score.max(0.0),
        signals,
        summary,
    })
}

/// A value a fix computed, traceable to its facts.
#[derive(Clone, Debug, Serialize)]
pub struct FixValue {
    /// The expression as written in the rule.
    pub expr: String,
    pub value: Value,
    /// As printed in the fix.
    pub display: String,
    /// The facts it was computed from, with their values and sources.
    pub from: Vec<FixValueFact>,
}

/// One fact behind a computed value.
#[derive(Clone, Debug, Serialize)]
pub struct FixValueFact {
    pub fact: String,
    pub value: Value,
    pub sources: Vec<Provenance>,
}

/// A fix that applies to an incident, rendered.
#[derive(Clone, Debug)]
pub struct FixOutcome {
    pub title: String,
    pub action: String,
    pub why: Option<String>,
    pub kind: FixKind,
    pub knob: Option<String>,
    pub direction: Option<Direction>,
    pub weight: f64,
    pub values: Vec<FixValue>,
}

/// The fixes of a rule that apply to these facts, in the rule's order. A fix is left out
/// when its `when` does not hold, its `unless` holds (the evidence shows it already
/// applied), or a value it needs cannot be computed from the evidence.
pub fn evaluate_fixes(rule: &Rule, facts: &Facts) -> Vec<FixOutcome> {
    let scope = RuleScope::new(rule, facts);
    let mut out = Vec::new();
    for f in &rule.fixes {
        if let Some(w) = &f.when {
            if !eval_cond(w, &scope).is_true() {
                continue;
            }
        }
        if let Some(u) = &f.unless {
            if eval_cond(u, &scope).is_true() {
                continue;
            }
        }
        let Some((title, mut values)) = render_with(&f.title, &scope) else {
            continue;
        };
        let Some((action, more)) = render_with(&f.action, &scope) else {
            continue;
        };
        values.extend(more);
        let why = match &f.why {
            Some(t) => match render_with(t, &scope) {
                Some((w, more)) => {
                    values.extend(more);
                    Some(w)
                }
                None => None,
            },
            None => None,
        };
        // Resolve each value's facts to their sources.
        for v in &mut values {
            for ff in &mut v.from {
                if let Some(fact) = facts.get(&ff.fact) {
                    ff.value = fact.value.clone();
                    ff.sources = fact.sources.clone();
                }
            }
        }
        values.dedup_by(|a, b| a.expr == b.expr);
        out.push(FixOutcome {
            title,
            action,
            why,
            kind: f.kind,
            knob: f.knob.clone(),
            direction: f.direction,
            weight: f.weight,
            values,
        });
    }
    out
}

/// Renders a template against facts (used for rule summaries outside evaluation).
pub fn render(rule: &Rule, t: &Template, facts: &Facts) -> Option<String> {
    let scope = RuleScope::new(rule, facts);
    render_with(t, &scope).map(|(s, _)| s)
}

/// What a hole shows when its value is not in the evidence.
pub const MISSING_HOLE: &str = "(not in the log)";

/// Renders a template, showing [`MISSING_HOLE`] for holes whose value is missing.
fn render_lenient(t: &Template, scope: &RuleScope<'_>) -> String {
    let mut s = String::new();
    for p in &t.parts {
        match p {
            TemplatePart::Lit(l) => s.push_str(l),
            TemplatePart::Hole(e, fmt) => {
                let value = match e.eval(scope) {
                    Val::Missing => {
                        s.push_str(MISSING_HOLE);
                        continue;
                    }
                    Val::Num(n) => Value::Num(n),
                    Val::Bool(b) => Value::Bool(b),
                    Val::Str(st) => Value::Str(st),
                };
                let unit = e
                    .as_name()
                    .and_then(crate::facts::catalog::lookup)
                    .map(|d| d.unit);
                s.push_str(&format_value(&value, *fmt, unit));
            }
        }
    }
    s
}

/// Renders a template; `None` if a hole's value is missing. Also returns the computed
/// values (holes that are not plain fact names) with the facts they read.
fn render_with(t: &Template, scope: &RuleScope<'_>) -> Option<(String, Vec<FixValue>)> {
    let mut s = String::new();
    let mut values = Vec::new();
    for p in &t.parts {
        match p {
            TemplatePart::Lit(l) => s.push_str(l),
            TemplatePart::Hole(e, fmt) => {
                let (v, used) = scope.tracking(|| e.eval(scope));
                let value = match v {
                    Val::Missing => return None,
                    Val::Num(n) => Value::Num(n),
                    Val::Bool(b) => Value::Bool(b),
                    Val::Str(st) => Value::Str(st),
                };
                let unit = e
                    .as_name()
                    .and_then(crate::facts::catalog::lookup)
                    .map(|d| d.unit);
                let display = format_value(&value, *fmt, unit);
                s.push_str(&display);
                values.push(FixValue {
                    expr: e.text().trim().to_string(),
                    value,
                    display,
                    from: used
                        .into_iter()
                        .map(|fact| FixValueFact {
                            fact,
                            value: Value::Bool(false),
                            sources: vec![],
                        })
                        .collect(),
                });
            }
        }
    }
    Some((s, values))
}

fn format_value(v: &Value, fmt: Fmt, unit: Option<Unit>) -> String {
    let Value::Num(n) = v else {
        return v.to_string();
    };
    match fmt {
        Fmt::Auto => match unit {
            Some(u) => u.display(v),
            None => format_plain(*n),
        },
        Fmt::Bytes => format_bytes_f(*n),
        Fmt::Gib => format!("{:.1}", n / 1073741824.0),
        Fmt::Int => format!("{}", n.round() as i64),
        Fmt::Pct => format!("{:.0}%", n * 100.0),
        Fmt::F1 => format!("{n:.1}"),
        Fmt::F2 => format!("{n:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnosis::rules::parse_rule;
    use crate::facts::evidence::InputName;
    use std::sync::Arc;

    const RULE: &str = r#"
id = "t"
cause = "batch-misconfiguration"
title = "T"
explanation = "E"
applies = "failure.kind == 'device-oom'"
[let]
need = "oom.allocated_bytes + oom.requested_bytes"
fit = "floor(train.batch_size * oom.total_bytes / need)"
[[signal]]
when = "need > oom.total_bytes"
weight = 4
says = "needed {need:bytes} of {oom.total_bytes}"
[[signal]]
when = "phase == 'model-load'"
weight = 10
says = "loading"
[[fix]]
title = "Batch size {fit}"
action = "--batch-size {fit}"
kind = "flag"
knob = "batch_size"
direction = "down"
[[fix]]
title = "Never"
action = "x"
kind = "flag"
unless = "torch.expandable_segments == false"
"#;

    fn facts() -> Facts {
        let input: InputName = Arc::from("t.log");
        let p = |l| Some(Provenance::line(input.clone(), l, Arc::from("x")));
        let mut f = Facts::new();
        f.set("failure.kind", "device-oom", p(1));
        f.set("oom.allocated_bytes", 22.0 * 1073741824.0, p(2));
        f.set("oom.requested_bytes", 2.0 * 1073741824.0, p(2));
        f.set("oom.total_bytes", 16.0 * 1073741824.0, p(3));
        f.set("train.batch_size", 32.0, p(7));
        f.set("torch.expandable_segments", false, p(9));
        f
    }

    #[test]
    fn scores_signals_and_traces_values() {
        let rule = parse_rule("t.toml", "t", RULE, "test").unwrap();
        let f = facts();
        let out = evaluate(&rule, &f).unwrap();
        assert_eq!(out.score, 4.0);
        assert_eq!(out.signals[0].text, "needed 24.00 GiB of 16.00 GiB");
        let lines: Vec<u64> = out.signals[0]
            .sources
            .iter()
            .filter_map(|s| s.line)
            .collect();
        assert_eq!(lines, vec![2, 3]);

        let fixes = evaluate_fixes(&rule, &f);
        assert_eq!(fixes.len(), 1, "the `unless` fix is already applied");
        assert_eq!(fixes[0].action, "--batch-size 21");
        let v = &fixes[0].values[0];
        assert_eq!(v.value, Value::Num(21.0));
        let traced: Vec<&str> = v.from.iter().map(|f| f.fact.as_str()).collect();
        assert_eq!(
            traced,
            vec![
                "train.batch_size",
                "oom.total_bytes",
                "oom.allocated_bytes",
                "oom.requested_bytes"
            ]
        );
        assert_eq!(v.from[0].sources[0].line, Some(7));
    }

    #[test]
    fn gate_and_missing_values() {
        let rule = parse_rule("t.toml", "t", RULE, "test").unwrap();
        let mut f = facts();
        f.set("failure.kind", "host-oom", None);
        assert!(evaluate(&rule, &f).is_none());
        let mut f = facts();
        f.remove("train.batch_size");
        assert!(
            evaluate_fixes(&rule, &f).is_empty(),
            "a fix without its value is not shown"
        );
    }
}
