//! Inputs that once crashed a fuzz target, replayed through the same code paths. Each file in
//! `tests/regressions/` is named after the target that found it (`log_scan_*`, `snapshot_*`,
//! `rule_file_*`, `gguf_*`, `model_config_*`).

use std::path::Path;

fn replay_log(data: &[u8]) {
    let input: oomdoctor::facts::evidence::InputName = std::sync::Arc::from("regression.log");
    let (evidence, _) =
        oomdoctor::ingest::log::grouping::analyze_log(&mut &data[..], &input).unwrap();
    let rules = oomdoctor::diagnosis::rules::RuleSet::builtin().unwrap();
    let mut d = oomdoctor::diagnosis::report::Diagnosis::new();
    d.incidents = oomdoctor::diagnosis::verdict::finish(
        evidence
            .incidents
            .iter()
            .map(|i| oomdoctor::diagnosis::verdict::diagnose(i, &rules))
            .collect(),
    );
    d.collect_excerpts();
    let _ = oomdoctor::render::json::render(&d);
    for width in [40, 60, 80, 110, 160] {
        for color in [false, true] {
            let _ = oomdoctor::render::human::render(
                &d,
                &oomdoctor::render::human::Style { color, width },
                true,
            );
        }
    }
}

fn replay_rule(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(rule) = oomdoctor::diagnosis::rules::parse_rule("r.toml", "r", text, "test") {
        let facts = oomdoctor::facts::evidence::Facts::new();
        let _ = oomdoctor::diagnosis::rules::evaluate(&rule, &facts);
        let _ = oomdoctor::diagnosis::rules::evaluate_fixes(&rule, &facts);
    }
    let _ = oomdoctor::diagnosis::expr::Expr::parse(text);
}

fn replay_snapshot(data: &[u8]) {
    let input: oomdoctor::facts::evidence::InputName = std::sync::Arc::from("regression.pickle");
    if let Ok(a) = oomdoctor::ingest::snapshot::read_snapshot(data, &input, &Default::default()) {
        let _ = a.facts();
        let _ = oomdoctor::render::plot::SnapshotPlot::from_analysis(&a);
    }
}

#[test]
fn every_saved_crash_now_passes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let data = std::fs::read(&path).unwrap();
        match name.split('_').next().unwrap_or("") {
            "log" => replay_log(&data),
            "rule" => replay_rule(&data),
            "snapshot" => replay_snapshot(&data),
            _ => continue,
        }
        n += 1;
    }
    assert!(n >= 1, "no regression inputs found in {}", dir.display());
}

#[test]
fn deeply_nested_expression_is_an_error() {
    // The rule_file target's stack overflow: parentheses nested 100,000 deep.
    let text = format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000));
    replay_rule(text.as_bytes());
    assert!(oomdoctor::diagnosis::expr::Expr::parse(&text).is_err());
}
