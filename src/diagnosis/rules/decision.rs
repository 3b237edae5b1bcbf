//! The differential diagnosis: priors, findings and the posterior over causes.
//!
//! Rules say *which* fixes fit a cause and explain it; this module decides *which cause*.
//! It reads `rules/decision/findings.toml`, where every discriminating observation (a
//! *finding*) is written once with its strength for or against each cause, in natural-log
//! likelihood ratios, and where the prior odds of each cause are written per failure kind and
//! engine. For one incident:
//!
//! ```text
//! logit(cause) = ln prior(kind, engine)[cause]
//!              + Σ strength(finding, cause)              for every finding that holds
//!              + NATS_PER_POINT × best rule score(cause)  rule-specific signals, capped
//! posterior    = softmax(logit) over the causes the prior or an applicable rule admits
//! ```
//!
//! The posterior is the confidence. When the top cause does not stand clear of the
//! runner-up (posterior or odds below the file's thresholds) the incident is *undetermined*:
//! both contenders are reported, and the `[[settle]]` table names the one input that would
//! separate them.
//!
//! Findings that hold for (almost) every OOM carry no information and must not be written
//! here; a rule's gate is not evidence either (the rule loader rejects a signal that restates
//! its gate, see `gate_implies`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use super::{Compiler, CondSpec, MatchedSignal, Rule, RuleError, Signal, SourceFile, evaluate};
use crate::diagnosis::cause::Cause;
use crate::facts::evidence::Facts;

/// The decision model file, compiled into the binary.
pub const BUILTIN: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/rules/decision/findings.toml"
));
const BUILTIN_NAME: &str = "rules/decision/findings.toml";

/// Prior odds of each cause for some failure kinds and engines.
#[derive(Clone, Debug)]
pub struct Prior {
    pub kinds: Vec<String>,
    /// Empty: any engine.
    pub engines: Vec<String>,
    pub p: BTreeMap<Cause, f64>,
}

/// A discriminating observation with its strength for or against each cause.
#[derive(Clone, Debug)]
pub struct Finding {
    pub id: String,
    /// Natural-log likelihood ratios; causes not named are unaffected.
    pub strength: BTreeMap<Cause, f64>,
    /// A one-signal rule holding the finding's condition and text, so findings are evaluated,
    /// rendered and traced exactly like rule signals.
    rule: Rule,
}

/// The input that separates two causes.
#[derive(Clone, Debug)]
pub struct Settle {
    pub between: [Cause; 2],
    pub ask: String,
}

/// What the evidence says about a knob a fix would turn.
#[derive(Clone, Debug)]
pub struct Knob {
    /// The fact holding the knob's current value.
    pub current: Option<String>,
    /// When this holds, no fix may turn the knob down (e.g. a batch of one).
    pub at_floor: Option<Rule>,
}

/// The whole model.
#[derive(Clone, Debug)]
pub struct DecisionModel {
    pub priors: Vec<Prior>,
    pub findings: Vec<Finding>,
    pub settles: Vec<Settle>,
    pub knobs: HashMap<String, Knob>,
    /// Logits are scaled by this before the softmax (calibration).
    pub sharpness: f64,
    /// How many nats one point of a rule's own signals is worth.
    pub nats_per_point: f64,
    /// A rule's signals never move a cause by more than this many nats.
    pub rule_cap_nats: f64,
    /// The top cause is determined when its posterior is at least this…
    pub determined_posterior: f64,
    /// …and at least this many times the runner-up's…
    pub determined_ratio: f64,
    /// …and the evidence without the priors favours it over the runner-up by this many nats,
    /// unless its posterior is at least `determined_without_margin`.
    pub determined_evidence_nats: f64,
    pub determined_without_margin: f64,
    /// Causes below this posterior are not listed as alternatives.
    pub alternative_floor: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    model: ModelDoc,
    #[serde(default, rename = "let")]
    lets: BTreeMap<String, Spanned<String>>,
    #[serde(default, rename = "prior")]
    priors: Vec<PriorDoc>,
    #[serde(default, rename = "finding")]
    findings: Vec<FindingDoc>,
    #[serde(default, rename = "settle")]
    settles: Vec<SettleDoc>,
    #[serde(default, rename = "knob")]
    knobs: BTreeMap<String, KnobDoc>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelDoc {
    sharpness: f64,
    nats_per_point: f64,
    rule_cap_nats: f64,
    determined_posterior: f64,
    determined_ratio: f64,
    determined_evidence_nats: f64,
    determined_without_margin: f64,
    alternative_floor: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PriorDoc {
    kinds: Vec<String>,
    #[serde(default)]
    engines: Vec<String>,
    p: BTreeMap<Spanned<String>, f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FindingDoc {
    id: String,
    when: Spanned<CondSpec>,
    says: Spanned<String>,
    strength: BTreeMap<Spanned<String>, f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SettleDoc {
    between: Vec<Spanned<String>>,
    ask: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KnobDoc {
    #[serde(default)]
    current: Option<String>,
    #[serde(default)]
    at_floor: Option<Spanned<CondSpec>>,
}

fn cause_of(file: &SourceFile, s: &Spanned<String>) -> Result<Cause, RuleError> {
    s.get_ref()
        .parse()
        .map_err(|e: String| RuleError::new(file, s.span(), e, "unknown cause", None))
}

/// A rule that holds one condition and its text, for evaluation with the rule machinery.
fn one_signal_rule(
    id: &str,
    c: &Compiler<'_>,
    lets: &[(String, crate::diagnosis::expr::Expr)],
    let_index: &HashMap<String, usize>,
    when: &Spanned<CondSpec>,
    says: Option<&Spanned<String>>,
    file: &SourceFile,
) -> Result<Rule, RuleError> {
    let says = match says {
        Some(s) => c.template(s, "finding text")?,
        None => super::Template::parse("")
            .map_err(|e| RuleError::new(file, when.span(), e.message.clone(), "here", None))?,
    };
    Ok(Rule {
        id: id.to_string(),
        cause: Cause::BatchMisconfiguration,
        title: id.to_string(),
        summary: None,
        applies: None,
        explanation: String::new(),
        references: vec![],
        lets: lets.to_vec(),
        let_index: let_index.clone(),
        signals: vec![Signal {
            when: c.cond(when, "finding condition")?,
            weight: 1.0,
            says,
        }],
        fixes: vec![],
        specificity: 0,
        origin: file.name.clone(),
        source: file.text.clone(),
    })
}

impl DecisionModel {
    /// The built-in model.
    pub fn builtin() -> Result<DecisionModel, RuleError> {
        Self::parse(BUILTIN_NAME, BUILTIN)
    }

    /// Parses and validates a decision model file.
    pub fn parse(name: &str, text: &str) -> Result<DecisionModel, RuleError> {
        let file = SourceFile {
            name: name.to_string(),
            text: Arc::from(text),
        };
        let doc: Doc = toml::from_str(text).map_err(|e| {
            RuleError::new(
                &file,
                e.span().unwrap_or(0..0),
                format!("{name}: {}", e.message().trim()),
                e.message().lines().next().unwrap_or("here").to_string(),
                Some("the decision model has [model], [let], [[prior]], [[finding]], [[settle]] and [knob.NAME] tables".into()),
            )
        })?;
        let (c, lets, let_index) = super::compile_lets(&file, &doc.lets)?;
        let mut priors = Vec::new();
        for p in &doc.priors {
            let mut map = BTreeMap::new();
            for (k, v) in &p.p {
                if !(v.is_finite() && *v >= 0.0) {
                    return Err(RuleError::new(
                        &file,
                        k.span(),
                        "a prior is a non-negative number",
                        "here",
                        None,
                    ));
                }
                map.insert(cause_of(&file, k)?, *v);
            }
            priors.push(Prior {
                kinds: p.kinds.clone(),
                engines: p.engines.clone(),
                p: map,
            });
        }
        let mut findings = Vec::new();
        for f in &doc.findings {
            let mut strength = BTreeMap::new();
            for (k, v) in &f.strength {
                if !v.is_finite() || v.abs() > 6.0 {
                    return Err(RuleError::new(
                        &file,
                        k.span(),
                        "a strength is a log-likelihood ratio between -6 and 6",
                        "here",
                        None,
                    ));
                }
                strength.insert(cause_of(&file, k)?, *v);
            }
            if findings.iter().any(|g: &Finding| g.id == f.id) {
                return Err(RuleError::new(
                    &file,
                    f.when.span(),
                    format!("finding `{}` is defined twice", f.id),
                    "second definition",
                    None,
                ));
            }
            findings.push(Finding {
                id: f.id.clone(),
                strength,
                rule: one_signal_rule(&f.id, &c, &lets, &let_index, &f.when, Some(&f.says), &file)?,
            });
        }
        let mut settles = Vec::new();
        for s in &doc.settles {
            let [a, b] = s.between.as_slice() else {
                return Err(RuleError::new(
                    &file,
                    s.between.first().map(|x| x.span()).unwrap_or(0..0),
                    "`between` names two causes",
                    "here",
                    None,
                ));
            };
            settles.push(Settle {
                between: [cause_of(&file, a)?, cause_of(&file, b)?],
                ask: s.ask.clone(),
            });
        }
        let mut knobs = HashMap::new();
        for (name, k) in &doc.knobs {
            if let Some(cur) = &k.current {
                if crate::facts::catalog::lookup(cur).is_none() {
                    return Err(RuleError::new(
                        &file,
                        0..0,
                        format!("knob `{name}`: unknown fact `{cur}`"),
                        "here",
                        None,
                    ));
                }
            }
            let at_floor = k
                .at_floor
                .as_ref()
                .map(|w| one_signal_rule(name, &c, &lets, &let_index, w, None, &file))
                .transpose()?;
            knobs.insert(
                name.clone(),
                Knob {
                    current: k.current.clone(),
                    at_floor,
                },
            );
        }
        let m = &doc.model;
        Ok(DecisionModel {
            priors,
            findings,
            settles,
            knobs,
            sharpness: m.sharpness,
            nats_per_point: m.nats_per_point,
            rule_cap_nats: m.rule_cap_nats,
            determined_posterior: m.determined_posterior,
            determined_ratio: m.determined_ratio,
            determined_evidence_nats: m.determined_evidence_nats,
            determined_without_margin: m.determined_without_margin,
            alternative_floor: m.alternative_floor,
        })
    }

    /// The prior for a failure kind and engine: the first entry that names both, then the
    /// first that names the kind for any engine, then the catch-all (`kinds = ["*"]`, which
    /// `prior("*", "")` returns). Normalised to sum to 1.
    pub fn prior(&self, kind: &str, engine: &str) -> BTreeMap<Cause, f64> {
        let specific = self
            .priors
            .iter()
            .find(|p| p.kinds.iter().any(|k| k == kind) && p.engines.iter().any(|e| e == engine));
        let general = || {
            self.priors
                .iter()
                .find(|p| p.kinds.iter().any(|k| k == kind) && p.engines.is_empty())
                .or_else(|| {
                    self.priors
                        .iter()
                        .find(|p| p.kinds.iter().any(|k| k == "*") && p.engines.is_empty())
                })
        };
        let mut p = specific
            .or_else(general)
            .map(|p| p.p.clone())
            .unwrap_or_default();
        let total: f64 = p.values().sum();
        if total > 0.0 {
            for v in p.values_mut() {
                *v /= total;
            }
        }
        p
    }

    /// The findings that hold for these facts, with what they said and where from.
    pub fn findings_holding<'m>(&'m self, facts: &Facts) -> Vec<(&'m Finding, MatchedSignal)> {
        let mut out = Vec::new();
        for f in &self.findings {
            if let Some(o) = evaluate(&f.rule, facts) {
                if let Some(s) = o.signals.into_iter().next() {
                    out.push((f, s));
                }
            }
        }
        out
    }

    /// The input that would separate two causes.
    pub fn settle(&self, a: Cause, b: Cause) -> Option<&str> {
        self.settles
            .iter()
            .find(|s| s.between == [a, b] || s.between == [b, a])
            .map(|s| s.ask.as_str())
    }

    /// Whether the evidence shows the knob cannot go down any further.
    pub fn knob_at_floor(&self, knob: &str, facts: &Facts) -> bool {
        self.knobs
            .get(knob)
            .and_then(|k| k.at_floor.as_ref())
            .and_then(|r| evaluate(r, facts))
            .is_some_and(|o| !o.signals.is_empty())
    }

    /// The fact holding a knob's current value.
    pub fn knob_current(&self, knob: &str) -> Option<&str> {
        self.knobs.get(knob).and_then(|k| k.current.as_deref())
    }
}

/// Splits `s` at the top-level occurrences of ` sep ` (outside parentheses and quotes).
fn split_top<'a>(s: &'a str, sep: &str) -> Vec<&'a str> {
    let pat = format!(" {sep} ");
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let (mut depth, mut quote, mut start, mut i) = (0i32, false, 0usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'\'' => quote = !quote,
            b'(' if !quote => depth += 1,
            b')' if !quote => depth -= 1,
            _ => {}
        }
        if !quote && depth == 0 && s[i..].starts_with(&pat) {
            out.push(&s[start..i]);
            i += pat.len();
            start = i;
            continue;
        }
        i += 1;
    }
    out.push(&s[start..]);
    out
}

/// Whether two signals hold together for every incident: one is the negation of the
/// other (`has(x)` and `not has(x)`) and both count for the cause. Such a pair is a prior.
pub fn complementary(a: &str, b: &str) -> bool {
    let (a, b) = (normalise(a), normalise(b));
    let negation = |x: &str, y: &str| {
        y.strip_prefix("not ")
            .is_some_and(|rest| normalise(rest) == x)
    };
    negation(&a, &b) || negation(&b, &a)
}

/// Whether two signals of a rule together hold whenever the gate does: they share every
/// conjunct but one, those two negate each other, and the shared ones are the gate's
/// (`x and has(y)` beside `x and not has(y)` under a gate `x`).
pub fn split_restatement(gate: &str, a: &str, b: &str) -> bool {
    if complementary(a, b) {
        return true;
    }
    let gate = conjuncts(gate);
    let (ca, cb) = (conjuncts(a), conjuncts(b));
    let only_a: Vec<&String> = ca.iter().filter(|x| !cb.contains(x)).collect();
    let only_b: Vec<&String> = cb.iter().filter(|x| !ca.contains(x)).collect();
    let shared_in_gate = ca
        .iter()
        .filter(|x| cb.contains(x))
        .all(|x| gate.contains(x));
    matches!((only_a.as_slice(), only_b.as_slice()), ([x], [y]) if complementary(x, y))
        && shared_in_gate
}

/// Whether some signals, each an alternative (or several) of one `or` in the gate, together
/// cover that whole `or`: then one of them holds whenever the rule applies. Returns the index
/// of the last signal of such a cover.
pub fn covering_restatement(gate: &str, signals: &[(&str, f64)]) -> Option<usize> {
    for g in conjuncts(gate) {
        let wanted: Vec<String> = split_top(&g, "or").into_iter().map(normalise).collect();
        if wanted.len() < 2 {
            continue;
        }
        let mut covered: Vec<&String> = Vec::new();
        let mut last = None;
        for (i, (when, weight)) in signals.iter().enumerate() {
            if *weight <= 0.0 {
                continue;
            }
            let alts: Vec<String> = split_top(&normalise(when), "or")
                .into_iter()
                .map(normalise)
                .collect();
            if alts.iter().all(|a| wanted.contains(a)) {
                for a in &alts {
                    if let Some(w) = wanted.iter().find(|w| *w == a) {
                        if !covered.contains(&w) {
                            covered.push(w);
                        }
                    }
                }
                last = Some(i);
            }
        }
        if covered.len() == wanted.len() {
            return last;
        }
    }
    None
}

/// `s` without whitespace runs and without parentheses that wrap all of it.
fn normalise(s: &str) -> String {
    let mut t = s.split_whitespace().collect::<Vec<_>>().join(" ");
    loop {
        let b = t.as_bytes();
        if b.len() >= 2 && b[0] == b'(' && b[b.len() - 1] == b')' {
            // Only strip when the opening parenthesis closes at the very end.
            let mut depth = 0;
            let mut closes_at_end = true;
            for (i, ch) in b.iter().enumerate() {
                match ch {
                    b'(' => depth += 1,
                    b')' => {
                        depth -= 1;
                        if depth == 0 && i != b.len() - 1 {
                            closes_at_end = false;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            if closes_at_end {
                t = t[1..t.len() - 1].trim().to_string();
                continue;
            }
        }
        return t;
    }
}

/// The conjuncts of a condition, flattened through nested `and`s.
fn conjuncts(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![normalise(s)];
    while let Some(t) = stack.pop() {
        let parts = split_top(&t, "and");
        if parts.len() == 1 {
            out.push(t);
        } else {
            stack.extend(parts.into_iter().map(normalise));
        }
    }
    out
}

/// Whether a rule's gate already implies a signal's condition, read syntactically: every
/// conjunct of some top-level alternative of the signal is a conjunct of the gate. Such a
/// signal holds whenever the rule applies, so it is a prior dressed as evidence.
pub fn gate_implies(gate: &str, signal: &str) -> bool {
    let gate = conjuncts(gate);
    let signal = normalise(signal);
    if gate.contains(&signal) {
        return true;
    }
    split_top(&signal, "or").into_iter().any(|alt| {
        let c = conjuncts(alt);
        !c.is_empty() && c.iter().all(|x| gate.contains(x))
    })
}

/// How narrowly a gate picks its incidents: its positive conditions (not `!=`, not `not`)
/// that say more than "a PyTorch device OOM with the usual message": the failure kind, the
/// framework being PyTorch and the presence of the allocator message's own fields do not
/// count. Among the applicable rules of one cause the most specific explains the incident
/// (its summary and fixes), so an engine's or a phase's own rule is not displaced by a
/// framework-wide one; equally specific rules are ordered by their evidence. A disjunction
/// is only as narrow as its broadest alternative.
pub fn specificity(gate: &str) -> u32 {
    const ENGINE_FACTS: &[&str] = &[
        "vllm.",
        "sglang.",
        "tgi.",
        "trtllm.",
        "llamacpp.",
        "ollama.",
        "xla.",
        "tf.",
        "deepspeed.",
        "comfyui.",
        "webui.",
        "ray.",
        "slurm.",
    ];
    conjuncts(gate)
        .iter()
        .filter(|c| !c.contains("!=") && !c.starts_with("not "))
        .map(|c| {
            let alternatives = split_top(c, "or");
            if alternatives.len() > 1 {
                return alternatives.into_iter().map(specificity).min().unwrap_or(0);
            }
            let c = c.replace(' ', "");
            let generic = c.starts_with("failure.kind==")
                || c == "failure.engine=='pytorch'"
                || c == "engine=='pytorch'"
                || (c.starts_with("has(oom.") && c.ends_with(')') && !c[4..].contains('('));
            // A condition on an engine's own facts narrows more than one on the shared ones.
            let engine_own = ENGINE_FACTS.iter().any(|p| c.contains(p));
            u32::from(!generic) + u32::from(engine_own)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The allocator message's fields and the kind count for nothing; an engine's own fact
    /// counts twice; a disjunction counts as its broadest alternative.
    #[test]
    fn specificity_of_a_gate() {
        assert_eq!(
            specificity(
                "failure.engine == 'pytorch' and failure.kind == 'device-oom' and has(oom.total_bytes)"
            ),
            0
        );
        assert_eq!(
            specificity("engine == 'comfyui' and comfyui.load == 'partial'"),
            3
        );
        assert_eq!(
            specificity(
                "failure.kind == 'device-oom' and (has(oom.total_bytes) or has(ollama.beside_bytes))"
            ),
            0
        );
        assert_eq!(
            specificity(
                "(comfyui.load == 'partial' or comfyui.load == 'lowvram') and phase == 'model-load'"
            ),
            3
        );
    }

    #[test]
    fn the_builtin_model_loads() {
        let m = DecisionModel::builtin().unwrap();
        assert!(!m.findings.is_empty());
        let p = m.prior("device-oom", "pytorch");
        assert!((p.values().sum::<f64>() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn gate_restatements_are_found() {
        let gate = "failure.engine == 'pytorch' and (failure.kind == 'device-oom' and phase == 'model-load')";
        assert!(gate_implies(gate, "phase == 'model-load'"));
        assert!(gate_implies(gate, "(phase == 'model-load')"));
        assert!(gate_implies(
            gate,
            "phase == 'model-load' or oom.requested_bytes > 1GiB"
        ));
        assert!(gate_implies(
            gate,
            "failure.kind == 'device-oom' and phase == 'model-load'"
        ));
        assert!(!gate_implies(
            gate,
            "phase == 'model-load' and has(model.weights_bytes)"
        ));
        assert!(!gate_implies(gate, "oom.requested_bytes > 1GiB"));
        assert!(gate_implies(
            "a == 1 and (b == 2 or c == 3)",
            "b == 2 or c == 3"
        ));
        assert!(complementary("has(x)", "not has(x)"));
        assert!(complementary("not (a > 1)", "a > 1"));
        assert!(!complementary("has(x)", "not has(y)"));
        let gate = "k == 'oom' and (a == 1 or a == 2 or a == 3)";
        assert_eq!(
            covering_restatement(
                gate,
                &[("a == 1 or a == 2", 4.0), ("z > 1", 1.0), ("a == 3", 4.0)]
            ),
            Some(2)
        );
        assert_eq!(
            covering_restatement(gate, &[("a == 1 or a == 2", 4.0), ("a == 3", -4.0)]),
            None
        );
        assert!(split_restatement(
            "s == true",
            "s == true and has(y)",
            "s == true and not has(y)"
        ));
        assert!(!split_restatement(
            "s == true",
            "s == true and z > 1 and has(y)",
            "s == true and not has(y)"
        ));
        assert_eq!(
            specificity("failure.kind == 'device-oom' and has(tgi.prefill_tokens)"),
            2
        );
        assert_eq!(
            specificity(
                "failure.engine == 'pytorch' and (failure.kind == 'device-oom' and has(oom.total_bytes)) and phase != 'model-load'"
            ),
            0
        );
        // Quoted ' and ' is not a conjunction.
        assert!(!gate_implies("x == 'a and b'", "x == 'a'"));
    }
}
