//! Insta snapshots of the human and JSON output for every rule fixture, so any change in
//! what users see is reviewed (`cargo insta review`).

use oomdoctor::app::{DiagnoseOptions, diagnose_inputs};
use oomdoctor::render::human::{Style, render};
use oomdoctor::rules::RuleSet;

fn settings() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_prepend_module_to_snapshot(false);
    s.add_filter(r#""version": "[0-9.]+""#, r#""version": "[version]""#);
    s
}

#[test]
fn rule_fixture_outputs() {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let rules = RuleSet::builtin().unwrap();
    settings().bind(|| {
        insta::glob!("../fixtures/rules", "*/*.log", |path| {
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
