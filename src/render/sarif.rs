//! `--format sarif`: SARIF 2.1.0 (OASIS) for code-scanning tools and CI systems that ingest
//! it. One run; the driver's rules are oomdoctor's rules (ids unchanged); each incident is a
//! result whose `ruleId` is the rule that decided its cause, located at the input and line
//! where it was first seen, with the evidence lines as `relatedLocations`, the fingerprint
//! in `partialFingerprints` (so uploads group repeats) and the cause, confidence and ranked
//! fixes in `properties`. Inputs that could not be read are tool notifications.

use serde_json::{Value, json};

use super::text::headline;
use super::{Policy, RuleInfo};
use crate::diagnosis::report::{Diagnosis, IncidentReport};

/// The schema the output declares.
pub const SCHEMA: &str =
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";

/// Options: the rules to describe (all rules in force) and the CI policy.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub rules: Vec<RuleInfo>,
    pub policy: Policy,
}

/// A relative path or name as a SARIF `uri`: forward slashes, and the characters a URI
/// reference cannot hold percent-encoded.
pub fn uri(input: &str) -> String {
    let mut out = String::new();
    for c in input.replace('\\', "/").chars() {
        match c {
            'A'..='Z'
            | 'a'..='z'
            | '0'..='9'
            | '-'
            | '.'
            | '_'
            | '~'
            | '/'
            | ':'
            | '@'
            | '!'
            | '$'
            | '&'
            | '\''
            | '('
            | ')'
            | '*'
            | '+'
            | ','
            | ';'
            | '=' => out.push(c),
            _ => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
        }
    }
    out
}

fn pascal(id: &str) -> String {
    id.split(['-', '_', '.'])
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_uppercase().chain(c).collect::<String>(),
                None => String::new(),
            }
        })
        .collect()
}

fn location(input: &str, line: Option<u64>) -> Value {
    let mut phys = json!({ "artifactLocation": { "uri": uri(input) } });
    if let Some(l) = line.filter(|l| *l >= 1) {
        phys["region"] = json!({ "startLine": l });
    }
    json!({ "physicalLocation": phys })
}

fn message(r: &IncidentReport) -> String {
    let mut m = format!(
        "{} (confidence {:.2}): {}. {}.",
        r.cause.id(),
        r.confidence,
        r.summary,
        headline(r)
    );
    if let Some(f) = r.fixes.first() {
        m.push_str(&format!(" First fix: {}: {}", f.title, f.action));
    }
    m
}

/// Renders the SARIF log, pretty-printed.
pub fn render(d: &Diagnosis, opts: &Options) -> String {
    let mut rules: Vec<RuleInfo> = opts.rules.clone();
    // A result must point at a described rule, including the fallback verdict ("none").
    for r in &d.incidents {
        if !rules.iter().any(|x| x.id == r.rule) {
            rules.push(RuleInfo {
                id: r.rule.clone(),
                cause: r.cause,
                title: r.title.clone(),
                explanation: if r.rule == "none" {
                    "No rule matched; the cause is the usual one for this kind of failure.".into()
                } else {
                    r.title.clone()
                },
            });
        }
    }
    let descriptors: Vec<Value> = rules
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "name": pascal(&r.id),
                "shortDescription": { "text": r.title },
                "fullDescription": { "text": r.explanation.trim() },
                "help": { "text": format!("Cause `{}`: {}. Run `oomdoctor explain {}` for the signals and fixes.", r.cause.id(), r.cause.title(), r.id) },
                "defaultConfiguration": { "level": "error" },
                "properties": { "cause": r.cause.id(), "tags": ["out-of-memory", r.cause.id()] }
            })
        })
        .collect();
    let results: Vec<Value> = d
        .incidents
        .iter()
        .map(|r| {
            let index = rules.iter().position(|x| x.id == r.rule).unwrap_or(0);
            let mut related = Vec::new();
            let mut seen: Vec<(String, Option<u64>)> = vec![(r.location.input.clone(), r.location.line)];
            for e in &r.evidence {
                let key = (e.input.clone(), e.line);
                if seen.contains(&key) {
                    continue;
                }
                seen.push(key);
                let mut loc = location(&e.input, e.line);
                loc["id"] = json!(related.len() + 1);
                loc["message"] = json!({ "text": e.text });
                related.push(loc);
            }
            let fixes: Vec<Value> = r
                .fixes
                .iter()
                .map(|f| json!({ "rank": f.rank, "title": f.title, "action": f.action, "cause": f.cause.id() }))
                .collect();
            let evidence: Vec<Value> = r
                .evidence
                .iter()
                .map(|e| json!({ "text": e.text, "weight": e.weight, "input": e.input, "line": e.line }))
                .collect();
            let alternatives: Vec<Value> = r
                .alternatives
                .iter()
                .map(|a| json!({ "cause": a.cause.id(), "confidence": a.confidence, "summary": a.summary }))
                .collect();
            let mut result = json!({
                "ruleId": r.rule,
                "ruleIndex": index,
                "level": if opts.policy.fails(r) { "error" } else { "warning" },
                "message": { "text": message(r) },
                "locations": [location(&r.location.input, r.location.line)],
                "partialFingerprints": { "oomdoctor/v1": r.fingerprint },
                "properties": {
                    "cause": r.cause.id(),
                    "confidence": r.confidence,
                    "engine": r.engine,
                    "phase": r.phase,
                    "kind": r.kind,
                    "device": r.device,
                    "requestedBytes": r.requested_bytes,
                    "copies": r.copies,
                    "evidence": evidence,
                    "fixes": fixes,
                    "alternatives": alternatives
                }
            });
            if !related.is_empty() {
                result["relatedLocations"] = Value::Array(related);
            }
            result
        })
        .collect();
    let artifacts: Vec<Value> = d
        .inputs
        .iter()
        .map(|i| json!({ "location": { "uri": uri(&i.name) }, "length": i.bytes }))
        .collect();
    let mut notes: Vec<Value> = d
        .errors
        .iter()
        .map(|e| json!({ "level": "error", "message": { "text": e.message }, "locations": [location(&e.input, None)] }))
        .collect();
    notes.extend(d.skipped.iter().map(|s| {
        json!({ "level": "note", "message": { "text": format!("skipped ({}): {}", s.kind, s.reason) }, "locations": [location(&s.input, None)] })
    }));
    let log = json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "oomdoctor",
                "version": d.tool.version,
                "semanticVersion": d.tool.version,
                "informationUri": "https://github.com/oomdoctor/oomdoctor",
                "rules": descriptors
            } },
            "invocations": [{
                "executionSuccessful": d.errors.is_empty(),
                "toolExecutionNotifications": notes
            }],
            "artifacts": artifacts,
            "results": results,
            "columnKind": "unicodeCodePoints"
        }]
    });
    let mut s = serde_json::to_string_pretty(&log).unwrap_or_else(|_| "{}".into());
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_encoded() {
        assert_eq!(uri("logs/job 1.log"), "logs/job%201.log");
        assert_eq!(uri(r"C:\runs\a.log"), "C:/runs/a.log");
        assert_eq!(uri("<stdin>"), "%3Cstdin%3E");
        assert_eq!(pascal("torch-fragmentation"), "TorchFragmentation");
    }
}
