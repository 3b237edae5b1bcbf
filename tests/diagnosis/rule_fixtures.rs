//! Every rule ships fixtures: `fixtures/rules/<rule-id>/fires-*` must be decided by that rule,
//! `fixtures/rules/<rule-id>/near-miss-*` must not be (another rule wins, or no incident).
//! A fixture is a file (one input) or a directory (all its files are inputs together).

use std::path::{Path, PathBuf};

use oomdoctor::app::{DiagnoseOptions, diagnose_inputs};
use oomdoctor::report::Diagnosis;
use oomdoctor::rules::RuleSet;

fn fixtures_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/rules")
}

fn inputs_of(case: &Path) -> Vec<String> {
    let rel = |p: &Path| {
        p.strip_prefix(env!("CARGO_MANIFEST_DIR"))
            .unwrap_or(p)
            .display()
            .to_string()
    };
    if case.is_dir() {
        let mut v: Vec<String> = std::fs::read_dir(case)
            .unwrap()
            .map(|e| rel(&e.unwrap().path()))
            .collect();
        v.sort();
        v
    } else {
        vec![rel(case)]
    }
}

fn diagnose(case: &Path, rules: &RuleSet) -> Diagnosis {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let (d, errors) = diagnose_inputs(&inputs_of(case), rules, &DiagnoseOptions::default(), None);
    assert!(errors.is_empty(), "{}: {errors:?}", case.display());
    d
}

fn cases(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect();
    v.sort();
    v
}

#[test]
fn every_rule_fires_on_its_fixtures_and_not_on_its_near_misses() {
    let rules = RuleSet::builtin().unwrap();
    let mut failures = Vec::new();
    for rule in &rules.rules {
        let dir = fixtures_root().join(&rule.id);
        if !dir.is_dir() {
            failures.push(format!(
                "{}: no fixtures directory {}",
                rule.id,
                dir.display()
            ));
            continue;
        }
        let fires = cases(&dir, "fires");
        let misses = cases(&dir, "near-miss");
        if fires.is_empty() || misses.is_empty() {
            failures.push(format!(
                "{}: needs at least one fires-* and one near-miss-* fixture",
                rule.id
            ));
        }
        for case in fires {
            let d = diagnose(&case, &rules);
            let deciders: Vec<String> = d
                .incidents
                .iter()
                .map(|i| format!("{} ({} {:.2})", i.rule, i.cause, i.confidence))
                .collect();
            if !d.incidents.iter().any(|i| i.rule == rule.id) {
                failures.push(format!(
                    "{}: {} was decided by {:?}",
                    rule.id,
                    case.display(),
                    deciders
                ));
            }
        }
        for case in misses {
            let d = diagnose(&case, &rules);
            if let Some(i) = d.incidents.iter().find(|i| i.rule == rule.id) {
                failures.push(format!(
                    "{}: near miss {} fired it ({} {:.2})",
                    rule.id,
                    case.display(),
                    i.cause,
                    i.confidence
                ));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// Evidence is read by people: a signal whose text names a fact the log did not have still
/// reads as a sentence, never as the rule's raw `{fact.name}` template.
#[test]
fn evidence_text_never_shows_raw_template_holes() {
    let rules = RuleSet::builtin().unwrap();
    let mut bad = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures_root())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        for case in cases(&dir, "") {
            let d = diagnose(&case, &rules);
            for i in &d.incidents {
                let texts = std::iter::once(&i.summary)
                    .chain(i.evidence.iter().map(|e| &e.text))
                    .chain(
                        i.alternatives
                            .iter()
                            .flat_map(|a| a.evidence.iter().map(|e| &e.text)),
                    );
                for t in texts {
                    let raw = t.match_indices('{').any(|(at, _)| {
                        t[at + 1..]
                            .chars()
                            .next()
                            .is_some_and(|c| c.is_ascii_lowercase())
                    });
                    if raw {
                        bad.push(format!("{}: {t}", case.display()));
                    }
                }
            }
        }
    }
    assert!(bad.is_empty(), "\n{}", bad.join("\n"));
}
