//! Insta snapshots of the human and JSON output for every rule fixture, so any change in
//! what users see is reviewed (`cargo insta review`).

use oomdoctor::app::{DiagnoseOptions, diagnose_inputs};
use oomdoctor::render::human::{Style, render};
use oomdoctor::rules::RuleSet;

fn settings() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_prepend_module_to_snapshot(false);
    // The snapshots stay in `tests/snapshots/`, where they were before the suites became one
    // binary (the path is relative to this file).
    s.set_snapshot_path("../snapshots");
    s.add_filter(r#""version": "[0-9.]+""#, r#""version": "[version]""#);
    s
}

#[test]
fn rule_fixture_outputs() {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let rules = RuleSet::builtin().unwrap();
    settings().bind(|| {
        insta::glob!("../../fixtures/rules", "*/*.log", |path| {
            let rel = path
                .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                .unwrap()
                .display()
                .to_string();
            let (d, errors) = diagnose_inputs(&[rel], &rules, &DiagnoseOptions::default(), None);
            assert!(errors.is_empty());
            let human = render(
                &d,
                &Style {
                    color: false,
                    width: 110,
                },
                false,
            );
            insta::assert_snapshot!("human", human);
            insta::assert_json_snapshot!("json", d);
        });
    });
}

/// The human output of every series rule fixture (a series file, or a directory of a log and
/// its series read together): the verdict, how the inputs were lined up, the chart.
#[test]
fn series_fixture_outputs() {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let rules = RuleSet::builtin().unwrap();
    let mut cases: Vec<std::path::PathBuf> = std::fs::read_dir("fixtures/rules")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("series-"))
        .flat_map(|e| {
            std::fs::read_dir(e.path())
                .unwrap()
                .flatten()
                .map(|f| f.path())
        })
        .collect();
    cases.sort();
    assert!(cases.len() >= 12);
    for case in cases {
        let inputs: Vec<String> = if case.is_dir() {
            let mut v: Vec<String> = std::fs::read_dir(&case)
                .unwrap()
                .flatten()
                .map(|f| f.path().display().to_string())
                .collect();
            v.sort();
            v
        } else {
            vec![case.display().to_string()]
        };
        let (d, errors) = diagnose_inputs(&inputs, &rules, &DiagnoseOptions::default(), None);
        assert!(errors.is_empty(), "{}: {errors:?}", case.display());
        let human = render(
            &d,
            &Style {
                color: false,
                width: 110,
            },
            false,
        );
        let name = case
            .strip_prefix("fixtures/rules")
            .unwrap()
            .display()
            .to_string()
            .trim_start_matches('/')
            .replace('/', "__");
        settings().bind(|| insta::assert_snapshot!(format!("series-human@{name}"), human));
    }
}
