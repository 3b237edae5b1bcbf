//! Several inputs about one incident give one incident drawing on all of them.

use oomdoctor::app::{DiagnoseOptions, diagnose_inputs};
use oomdoctor::rules::RuleSet;

fn diagnose(inputs: &[&str]) -> oomdoctor::report::Diagnosis {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let rules = RuleSet::builtin().unwrap();
    let inputs: Vec<String> = inputs.iter().map(|s| s.to_string()).collect();
    let (d, errors) = diagnose_inputs(&inputs, &rules, &DiagnoseOptions::default(), None);
    assert!(errors.is_empty(), "{errors:?}");
    d
}

#[test]
fn log_and_snapshot_make_one_incident() {
    let dir = "fixtures/rules/torch-activations/fires-log-and-snapshot";
    let d = diagnose(&[
        &format!("{dir}/crash.log"),
        &format!("{dir}/dump_snapshot.pickle"),
    ]);
    assert_eq!(d.incidents.len(), 1);
    let inc = &d.incidents[0];
    assert_eq!(inc.cause.id(), "batch-misconfiguration");
    // The verdict draws on both inputs: lines of the log, places in the snapshot.
    let sources: Vec<_> = inc.evidence.iter().flat_map(|e| e.sources.iter()).collect();
    assert!(
        sources
            .iter()
            .any(|s| s.input.ends_with("crash.log") && s.line.is_some())
    );
    assert!(
        sources
            .iter()
            .any(|s| s.input.ends_with("dump_snapshot.pickle") && s.locator.is_some())
    );
    // The log's own numbers win where both speak; the snapshot adds what only it knows.
    assert_eq!(
        inc.facts.get("oom.requested_bytes").unwrap().sources[0]
            .input
            .as_ref(),
        format!("{dir}/crash.log")
    );
    assert_eq!(inc.facts.str("snapshot.oom_category"), Some("activations"));
    assert_eq!(d.snapshots.len(), 1);
}

#[test]
fn snapshot_alone_is_an_incident_and_without_oom_a_summary() {
    let d = diagnose(&["fixtures/snapshots/weights_oom.pickle"]);
    assert_eq!(d.incidents.len(), 1);
    assert_eq!(d.incidents[0].cause.id(), "model-too-large");
    assert_eq!(d.incidents[0].phase, "model-load");
    let d = diagnose(&["fixtures/snapshots/no_oom_summary.pickle"]);
    assert!(d.incidents.is_empty());
    assert_eq!(d.snapshots.len(), 2, "one plot per device");
    assert!(
        d.snapshots
            .iter()
            .all(|p| !p.categories.is_empty() && p.moment == "peak")
    );
}

#[test]
fn real_oom_snapshot_is_replayed_on_the_right_device() {
    let path = "../shared/eval/snapshots/code_location_oom_expandable_memory_snapshot.pickle";
    if !std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(path)
        .exists()
    {
        eprintln!(
            "skipping: {path} is not present (the shared eval corpus lives beside the repository)"
        );
        return;
    }
    let d = diagnose(&[path]);
    assert_eq!(d.incidents.len(), 1);
    let inc = &d.incidents[0];
    assert_eq!(inc.device, Some(1));
    assert_eq!(inc.cause.id(), "batch-misconfiguration");
    let live = inc.facts.num("snapshot.live_bytes_at_oom").unwrap();
    assert!((live / (1u64 << 30) as f64 - 78.29).abs() < 0.01, "{live}");
}
