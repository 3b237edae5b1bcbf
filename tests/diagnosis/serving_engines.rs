//! The LLM-serving engines end to end: restarts split or fold incidents, the engine is named,
//! and every number a serving rule puts in a fix can be traced in the JSON output to the
//! log lines it was computed from.

use std::path::{Path, PathBuf};

use oomdoctor::diagnosis::report::Diagnosis;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn diagnose(rel: &str) -> Diagnosis {
    crate::common::diagnose_files(&[rel])
}

fn json(d: &Diagnosis) -> serde_json::Value {
    serde_json::to_value(d).unwrap()
}

/// The rule directories this suite owns.
const SERVING_PREFIXES: &[&str] = &["vllm-", "sglang-", "tgi-", "trtllm-", "serving-"];

fn serving_fixtures() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in std::fs::read_dir(root().join("rules")).unwrap() {
        let dir = dir.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if !dir.is_dir() || !SERVING_PREFIXES.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "log") {
                out.push(f);
            }
        }
    }
    out.sort();
    assert!(out.len() >= 38, "serving fixtures missing: {}", out.len());
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap().display().to_string()
}

#[test]
fn the_same_error_on_three_starts_is_one_incident_with_three_copies() {
    let d = diagnose("rules/vllm-max-model-len-exceeds-kv/fires-v0-journald-three-restarts.log");
    assert_eq!(d.incidents.len(), 1);
    let inc = &d.incidents[0];
    assert_eq!(inc.copies, 3);
    assert_eq!(inc.engine, "vllm");
    assert_eq!(inc.rule, "vllm-max-model-len-exceeds-kv");
    let j = json(&d);
    assert_eq!(j["incidents"][0]["facts"]["run.restarts"]["value"], 2);

    // The budget check wrapped by a terminal, in a docker restart loop.
    let d = diagnose("rules/vllm-startup-budget-exceeds-free/fires-wrapped-restart-loop.log");
    assert_eq!(d.incidents.len(), 1);
    assert_eq!(d.incidents[0].copies, 3);
}

#[test]
fn three_starts_with_three_different_errors_are_three_incidents() {
    let d = diagnose("fixtures/engines/vllm-three-restarts-different-errors.log");
    assert_eq!(d.incidents.len(), 3, "{:#?}", d.incidents);
    let mut got: Vec<(String, String, Option<u64>)> = d
        .incidents
        .iter()
        .map(|i| (i.kind.clone(), i.rule.clone(), i.location.line))
        .collect();
    got.sort_by_key(|g| g.2);
    let kinds: Vec<&str> = got.iter().map(|g| g.0.as_str()).collect();
    assert_eq!(kinds, ["engine-budget", "kv-capacity", "device-oom"]);
    let rules: Vec<&str> = got.iter().map(|g| g.1.as_str()).collect();
    assert_eq!(
        rules,
        [
            "vllm-startup-budget-exceeds-free",
            "vllm-max-model-len-exceeds-kv",
            "vllm-serving-oom"
        ]
    );
    // Each start's context is its own: the second start's budget is 0.65, the third's the default.
    let j = json(&d);
    for inc in j["incidents"].as_array().unwrap() {
        let util = inc["facts"]["vllm.gpu_memory_utilization"]["value"].as_f64();
        match inc["kind"].as_str().unwrap() {
            "kv-capacity" => assert_eq!(util, Some(0.65)),
            "engine-budget" => assert_eq!(util, Some(0.9)),
            _ => {}
        }
    }
}

#[test]
fn every_serving_incident_names_its_engine() {
    for f in serving_fixtures() {
        let name = rel(&f);
        let d = diagnose(&name);
        let want = ["vllm", "sglang", "tgi", "tensorrt-llm"];
        for inc in &d.incidents {
            if inc.kind == "host-oom" {
                continue;
            }
            assert!(
                want.contains(&inc.engine.as_str()),
                "{name}: engine {}",
                inc.engine
            );
        }
    }
}

/// Every computed value in a fix lists the facts it came from, and every such fact points at
/// a line of the input (or was derived from facts that do).
#[test]
fn every_fix_value_traces_to_log_lines() {
    let mut checked = 0;
    for f in serving_fixtures() {
        let name = rel(&f);
        let j = json(&diagnose(&name));
        for inc in j["incidents"].as_array().unwrap() {
            for fix in inc["fixes"].as_array().unwrap() {
                for v in fix["values"].as_array().unwrap() {
                    let from = v["from"].as_array().unwrap();
                    assert!(
                        !from.is_empty(),
                        "{name}: `{}` in fix `{}` traces to no fact",
                        v["expr"],
                        fix["title"]
                    );
                    for fact in from {
                        let sources = fact["sources"].as_array().unwrap();
                        assert!(
                            !sources.is_empty()
                                && sources.iter().all(|s| s["line"].as_u64().is_some()),
                            "{name}: fact {} behind `{}` has no line",
                            fact["fact"],
                            v["expr"]
                        );
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 60, "only {checked} values checked");
}

/// A knob is never turned both ways for one incident, and start-up KV failures only ever
/// raise the memory budget while runtime OOMs only ever lower it.
#[test]
fn budget_knobs_point_the_right_way_for_the_phase() {
    for f in serving_fixtures() {
        let name = rel(&f);
        let j = json(&diagnose(&name));
        for inc in j["incidents"].as_array().unwrap() {
            let mut seen: Vec<(String, String)> = Vec::new();
            for fix in inc["fixes"].as_array().unwrap() {
                let (Some(knob), Some(dir)) = (fix["knob"].as_str(), fix["direction"].as_str())
                else {
                    continue;
                };
                assert!(
                    !seen.iter().any(|(k, d)| k == knob && d != dir),
                    "{name}: {knob} turned both ways"
                );
                seen.push((knob.to_string(), dir.to_string()));
                let budget = knob.ends_with("gpu_memory_utilization")
                    || knob.ends_with("mem_fraction_static")
                    || knob.ends_with("free_gpu_memory_fraction");
                if !budget {
                    continue;
                }
                match inc["kind"].as_str().unwrap() {
                    "kv-capacity" | "no-kv-memory" => {
                        assert_eq!(dir, "up", "{name}: start-up KV failure lowers {knob}")
                    }
                    "device-oom" => {
                        assert_eq!(dir, "down", "{name}: an OOM raises {knob}")
                    }
                    _ => {}
                }
            }
        }
    }
}

/// The numbers the brief's example asks for: vLLM says max seq len 131072 but the KV cache
/// holds 46032 tokens: cap --max-model-len at or below that, rounded.
#[test]
fn max_model_len_fix_never_exceeds_what_the_cache_holds() {
    let d = diagnose("rules/vllm-max-model-len-exceeds-kv/fires-v1-131k-on-24g.log");
    let fix = d.incidents[0]
        .fixes
        .iter()
        .find(|f| f.action.starts_with("--max-model-len"))
        .expect("a --max-model-len fix");
    assert_eq!(fix.action, "--max-model-len 45056");
    let j = json(&d);
    let facts = &j["incidents"][0]["facts"];
    assert_eq!(facts["vllm.estimated_max_model_len"]["value"], 46032);
    assert_eq!(facts["vllm.max_model_len"]["value"], 131072);
    // No free-memory figure in a 0.10 log: no advice to raise the budget.
    assert!(
        !d.incidents[0]
            .fixes
            .iter()
            .any(|f| f.action.contains("--gpu-memory-utilization"))
    );
}

/// vLLM 0.6.2-0.6.4's `initial_memory_usage` is the whole device's use before the profile
/// run: beyond this instance's weights it is another process's memory (a second server on
/// the same GPU); with the weights unknown, contention and the model stay undetermined.
#[test]
fn memory_in_use_before_vllm_profiled_is_someone_elses() {
    let dir = crate::common::tmp_dir("serving", "initial-usage");
    let profile = "INFO 10-01 11:22:33 worker.py:255] Memory profiling results: total_gpu_memory=79.15GiB initial_memory_usage=68.01GiB peak_torch_memory=70.20GiB memory_usage_post_profile=68.50Gib non_torch_memory=0.50GiB kv_cache_size=0.00GiB gpu_memory_utilization=0.20\nValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n";
    let with_weights = dir.join("with-weights.log");
    std::fs::write(
        &with_weights,
        format!("INFO 10-01 11:22:30 model_runner.py:1067] Loading model weights took 9.31 GB\n{profile}"),
    )
    .unwrap();
    let without = dir.join("without-weights.log");
    std::fs::write(&without, profile).unwrap();

    let d = crate::common::diagnose_files(&[with_weights.to_str().unwrap()]);
    let i = &d.incidents[0];
    assert_eq!(i.cause.id(), "memory-contention");
    assert!(i.determined, "{:?}", i.evidence);
    let d = crate::common::diagnose_files(&[without.to_str().unwrap()]);
    let i = &d.incidents[0];
    assert!(!i.determined);
    let causes: Vec<&str> = std::iter::once(i.cause.id())
        .chain(i.alternatives.iter().map(|a| a.cause.id()))
        .take(2)
        .collect();
    assert!(causes.contains(&"memory-contention"), "{causes:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
