//! The JSON outputs conform to their schemas: `--format json` to `schema/diagnosis-v1.json`,
//! `plan --format json` to `schema/plan-v1.json`, `bundle --format json` to
//! `schema/bundle-v1.json`; checked with a small validator for the keywords those schemas use
//! (type, const, enum, required, properties, items, additionalProperties, $ref to a local
//! definition or to a sibling schema file, minimum, maximum, pattern).

use crate::common;

use serde_json::Value;

fn resolve<'a>(root: &'a Value, r: &str) -> &'a Value {
    let path = r.strip_prefix("#/").expect("local ref");
    path.split('/').fold(root, |v, k| &v[k])
}

fn type_ok(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => false,
    }
}

fn validate(root: &Value, schema: &Value, v: &Value, at: &str, errors: &mut Vec<String>) {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        if !r.starts_with('#') {
            // Another schema of this directory (the bundle embeds the diagnosis).
            let other = load_schema(r);
            return validate(&other, &other, v, at, errors);
        }
        return validate(root, resolve(root, r), v, at, errors);
    }
    if let Some(t) = schema.get("type") {
        let ok = match t {
            Value::String(s) => type_ok(s, v),
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).any(|s| type_ok(s, v)),
            _ => true,
        };
        if !ok {
            errors.push(format!("{at}: expected type {t}, got {v}"));
            return;
        }
    }
    if let Some(c) = schema.get("const") {
        if c != v {
            errors.push(format!("{at}: expected {c}, got {v}"));
        }
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            errors.push(format!("{at}: {v} not in {e:?}"));
        }
    }
    if let (Some(min), Some(n)) = (schema.get("minimum").and_then(Value::as_f64), v.as_f64()) {
        if n < min {
            errors.push(format!("{at}: {n} < {min}"));
        }
    }
    if let (Some(max), Some(n)) = (schema.get("maximum").and_then(Value::as_f64), v.as_f64()) {
        if n > max {
            errors.push(format!("{at}: {n} > {max}"));
        }
    }
    if let (Some(p), Some(text)) = (schema.get("pattern").and_then(Value::as_str), v.as_str()) {
        if !regex::Regex::new(p).unwrap().is_match(text) {
            errors.push(format!("{at}: {text:?} does not match {p}"));
        }
    }
    if let Some(obj) = v.as_object() {
        for r in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let k = r.as_str().unwrap();
            if !obj.contains_key(k) {
                errors.push(format!("{at}: missing required `{k}`"));
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (k, val) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(s) => validate(root, s, val, &format!("{at}.{k}"), errors),
                None => {
                    if let Some(ap) = schema.get("additionalProperties") {
                        validate(root, ap, val, &format!("{at}.{k}"), errors);
                    } else if props.is_some() {
                        errors.push(format!("{at}: `{k}` is not in the schema"));
                    }
                }
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, x) in arr.iter().enumerate() {
            validate(root, items, x, &format!("{at}[{i}]"), errors);
        }
    }
}

#[test]
fn every_fixture_output_matches_the_schema() {
    let root: Value = serde_json::from_str(include_str!("../../schema/diagnosis-v1.json")).unwrap();
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let rules = oomdoctor::diagnosis::rules::RuleSet::builtin().unwrap();
    let mut checked = 0;
    for entry in glob_logs("rules") {
        let (d, _) = oomdoctor::cli::diagnose::diagnose_inputs(
            std::slice::from_ref(&entry),
            &rules,
            &Default::default(),
            None,
        );
        let v = serde_json::to_value(&d).unwrap();
        let mut errors = Vec::new();
        validate(&root, &root, &v, "$", &mut errors);
        assert!(errors.is_empty(), "{entry}:\n{}", errors.join("\n"));
        checked += 1;
    }
    assert!(checked > 10);
    // Fixtures that are directories: every file of one is an input of one run (a log with
    // its memory series).
    let mut dirs = 0;
    for dir in fixture_dirs("rules") {
        let mut inputs: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|f| f.path().display().to_string())
            .collect();
        inputs.sort();
        let (d, _) =
            oomdoctor::cli::diagnose::diagnose_inputs(&inputs, &rules, &Default::default(), None);
        let v = serde_json::to_value(&d).unwrap();
        let mut errors = Vec::new();
        validate(&root, &root, &v, "$", &mut errors);
        assert!(errors.is_empty(), "{dir}:\n{}", errors.join("\n"));
        dirs += 1;
    }
    assert!(dirs >= 5);
    // Snapshots (with and without an OOM) and a log fused with its snapshot.
    for inputs in [
        vec!["fixtures/snapshots/no_oom_summary.pickle".to_string()],
        vec!["fixtures/snapshots/leak_profiler_steps.pickle".to_string()],
        vec![
            "rules/torch-activations/fires-log-and-snapshot/crash.log".to_string(),
            "rules/torch-activations/fires-log-and-snapshot/dump_snapshot.pickle".to_string(),
        ],
    ] {
        let (d, _) =
            oomdoctor::cli::diagnose::diagnose_inputs(&inputs, &rules, &Default::default(), None);
        let v = serde_json::to_value(&d).unwrap();
        let mut errors = Vec::new();
        validate(&root, &root, &v, "$", &mut errors);
        assert!(errors.is_empty(), "{inputs:?}:\n{}", errors.join("\n"));
    }
}

#[test]
fn optional_fields_match_the_schema_and_stay_optional() {
    let root: Value = serde_json::from_str(include_str!("../../schema/diagnosis-v1.json")).unwrap();
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let rules = oomdoctor::diagnosis::rules::RuleSet::builtin().unwrap();
    let (mut d, _) = oomdoctor::cli::diagnose::diagnose_inputs(
        &["rules/torch-fragmentation/fires-hf-trainer-2ranks.log".to_string()],
        &rules,
        &Default::default(),
        None,
    );
    // Without plot data the optional fields are absent.
    let plain = serde_json::to_value(&d).unwrap();
    for k in ["series", "snapshots", "skipped", "repeats"] {
        assert!(plain.get(k).is_none(), "{k} should be absent when empty");
    }
    for k in ["series", "snapshots", "skipped", "repeats"] {
        assert!(
            !root["required"].as_array().unwrap().iter().any(|r| r == k),
            "{k} must stay optional"
        );
    }
    d.series = common::series();
    d.snapshots = vec![common::snapshot()];
    d.skipped.push(oomdoctor::diagnosis::report::SkippedInput {
        input: "runs/model.safetensors".into(),
        kind: "binary".into(),
        reason: "binary data".into(),
    });
    // The same incident from a second rank's log: one problem, listed in `repeats`.
    let mut copy = d.incidents[0].clone();
    copy.id = 2;
    copy.location.input = "rank1.log".into();
    d.incidents.push(copy);
    d.group_repeats();
    assert_eq!(d.repeats.len(), 1);
    let v = serde_json::to_value(&d).unwrap();
    let mut errors = Vec::new();
    validate(&root, &root, &v, "$", &mut errors);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    assert!(v["series"][0]["points"][0].is_array());
    assert_eq!(v["snapshots"][0]["segments"][0]["blocks"][0]["offset"], 0);
    assert_eq!(v["repeats"][0]["incidents"], serde_json::json!([1, 2]));
    assert_eq!(v["repeats"][0]["locations"][1]["input"], "rank1.log");
}

fn load_schema(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("schema")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Validates the standard output of one run of the binary against a schema file.
fn check_output(schema: &Value, args: &[&str], errors_out: &mut Vec<String>) {
    let out = common::run_bin(args);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: not JSON: {e}"));
    let mut errors = Vec::new();
    validate(schema, schema, &v, "$", &mut errors);
    errors_out.extend(errors.into_iter().map(|e| format!("{args:?}: {e}")));
}

#[test]
fn schemas_are_versioned_like_the_diagnosis_schema() {
    for (file, version_key) in [
        ("diagnosis-v1.json", "schema_version"),
        ("plan-v1.json", "schema_version"),
        ("bundle-v1.json", "bundle_version"),
    ] {
        let s = load_schema(file);
        assert!(
            s["$id"]
                .as_str()
                .unwrap()
                .ends_with(&format!("/schema/{file}"))
        );
        assert_eq!(s["properties"][version_key]["const"], 1, "{file}");
        assert!(
            s["required"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == version_key),
            "{file}"
        );
    }
}

#[test]
fn plan_output_matches_its_schema() {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let schema = load_schema("plan-v1.json");
    let mut errors = Vec::new();
    let mut checked = 0;
    let mut models: Vec<String> = std::fs::read_dir("fixtures/models")
        .unwrap()
        .flatten()
        .map(|f| f.path().display().to_string())
        .collect();
    models.sort();
    for model in &models {
        for (gpu, extra) in [
            ("a10g", &[][..]),
            ("rtx4090", &["--explain"][..]),
            (
                "2xa100-80gb",
                &["--context", "8192", "--concurrency", "4"][..],
            ),
            (
                "8GiB",
                &["--engine", "llamacpp", "--kv-cache-dtype", "q8_0"][..],
            ),
            ("h100", &["--engine", "vllm", "--quantization", "fp8"][..]),
        ] {
            let mut args = vec!["plan", "--model", model, "--gpu", gpu, "--format", "json"];
            args.extend_from_slice(extra);
            check_output(&schema, &args, &mut errors);
            checked += 1;
        }
    }
    assert!(checked >= 50, "{checked}");
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn bundle_output_matches_its_schema() {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let schema = load_schema("bundle-v1.json");
    let mut errors = Vec::new();
    let mut inputs: Vec<Vec<String>> = glob_logs("rules")
        .into_iter()
        .step_by(7)
        .map(|f| vec![f])
        .collect();
    inputs.push(vec![
        "rules/series-steady-growth/fires-ambiguous-log-and-smi".to_string(),
    ]);
    inputs.push(vec![
        "rules/torch-activations/fires-log-and-snapshot/crash.log".to_string(),
        "rules/torch-activations/fires-log-and-snapshot/dump_snapshot.pickle".to_string(),
    ]);
    inputs.push(vec!["fixtures/series/smi-leak-2gpu.csv".to_string()]);
    for input in &inputs {
        let mut args = vec!["bundle", "--format", "json"];
        args.extend(input.iter().map(String::as_str));
        check_output(&schema, &args, &mut errors);
    }
    assert!(inputs.len() > 10);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

fn glob_logs(dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    for rule in std::fs::read_dir(dir).unwrap().flatten() {
        if rule.path().is_dir() {
            for f in std::fs::read_dir(rule.path()).unwrap().flatten() {
                let p = f.path();
                let name = f.file_name().to_string_lossy().into_owned();
                // A rule folder's cases; not its rule.toml or snapshots.
                let case = ["fires-", "near-miss-", "not-oom-"]
                    .iter()
                    .any(|k| name.starts_with(k));
                if p.is_file() && case {
                    out.push(p.display().to_string());
                }
            }
        }
    }
    out.sort();
    out
}

fn fixture_dirs(dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    for rule in std::fs::read_dir(dir).unwrap().flatten() {
        if rule.path().is_dir() {
            for f in std::fs::read_dir(rule.path()).unwrap().flatten() {
                if f.path().is_dir() {
                    out.push(f.path().display().to_string());
                }
            }
        }
    }
    out.sort();
    out
}
