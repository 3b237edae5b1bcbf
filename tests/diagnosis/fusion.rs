//! Several inputs about one incident give one incident drawing on all of them.

use oomdoctor::cli::diagnose::{DiagnoseOptions, diagnose_inputs};
use oomdoctor::diagnosis::rules::RuleSet;

fn diagnose(inputs: &[&str]) -> oomdoctor::diagnosis::report::Diagnosis {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let rules = RuleSet::builtin().unwrap();
    let inputs: Vec<String> = inputs.iter().map(|s| s.to_string()).collect();
    let (d, errors) = diagnose_inputs(&inputs, &rules, &DiagnoseOptions::default(), None);
    assert!(errors.is_empty(), "{errors:?}");
    d
}

#[test]
fn log_and_snapshot_make_one_incident() {
    let dir = "rules/torch-activations/fires-log-and-snapshot";
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

// ---------------------------------------------------------------------------------------
// Memory series fused with logs and snapshots.

use oomdoctor::diagnosis::report::{Diagnosis, IncidentReport};
use oomdoctor::render::plot::MarkKind;

const LEAK_LOG: &str = "fixtures/series/incident-leak/train.log";
const LEAK_SERIES: &str = "fixtures/series/smi-leak-2gpu.csv";

/// The inputs that any evidence item, fact or fix value of an incident points at.
fn evidence_inputs(inc: &IncidentReport) -> Vec<String> {
    let mut v: Vec<String> = inc
        .evidence
        .iter()
        .flat_map(|e| e.sources.iter())
        .map(|s| s.input.to_string())
        .collect();
    v.sort();
    v.dedup();
    v
}

fn num(inc: &IncidentReport, name: &str) -> f64 {
    inc.facts
        .num(name)
        .unwrap_or_else(|| panic!("no {name} in {:#?}", inc.facts))
}

fn flag(inc: &IncidentReport, name: &str) -> bool {
    inc.facts
        .bool(name)
        .unwrap_or_else(|| panic!("no {name} in {:#?}", inc.facts))
}

fn human(d: &Diagnosis) -> String {
    oomdoctor::render::human::render(
        d,
        &oomdoctor::render::human::Style {
            color: false,
            width: 110,
        },
        false,
    )
}

/// A copy of a fixture with a transformation applied, in a per-test temporary directory.
fn rewritten(src: &str, name: &str, f: impl Fn(&str) -> String) -> String {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let dir = std::env::temp_dir().join(format!("oomdoctor-fusion-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, f(&std::fs::read_to_string(src).unwrap())).unwrap();
    path.display().to_string()
}

#[test]
fn an_ambiguous_log_becomes_one_leak_incident_with_its_series() {
    // On its own the log already leans to a leak: 6,817 steps ran before a small request
    // found the device full. The series makes it certain.
    let alone = diagnose(&[LEAK_LOG]);
    assert_eq!(alone.incidents.len(), 1);
    assert_eq!(alone.incidents[0].cause.id(), "memory-leak");

    // With its nvidia-smi series: the same single incident, decided by the series.
    let d = diagnose(&[LEAK_LOG, LEAK_SERIES]);
    assert_eq!(
        d.incidents.len(),
        1,
        "one incident, not a log one and a series one"
    );
    let inc = &d.incidents[0];
    assert_eq!(inc.cause.id(), "memory-leak");
    assert_eq!(inc.rule, "series-steady-growth");
    assert_eq!(
        inc.location.input, LEAK_LOG,
        "the log's failure line stays the place"
    );
    assert_eq!(inc.device, Some(1));
    assert!(flag(inc, "series.time_aligned"));
    assert!(num(inc, "series.failure_gap_seconds") < 15.0);
    // Evidence from both inputs: the series for the climb, the log for the failure.
    let inputs = evidence_inputs(inc);
    assert!(inputs.contains(&LEAK_SERIES.to_string()), "{inputs:?}");
    assert!(
        inputs.contains(&LEAK_LOG.to_string()),
        "the log's own reading (thousands of steps before the failure) still counts: {inputs:?}"
    );
    // The log's numbers win where both speak; the series adds what only it knows.
    assert_eq!(
        inc.facts.get("oom.total_bytes").unwrap().sources[0]
            .input
            .as_ref(),
        LEAK_LOG
    );
    assert!(flag(inc, "series.steady_growth"));
    // The summary carries the slope, and a fix the restart interval computed from facts.
    assert!(inc.summary.contains("GiB/h"), "{}", inc.summary);
    let restart = inc
        .fixes
        .iter()
        .find(|f| f.title.starts_with("Stop-gap: restart"))
        .expect("a restart stop-gap");
    assert!(
        restart
            .values
            .iter()
            .flat_map(|v| v.from.iter())
            .any(|f| f.fact == "series.growth_bytes_per_second" && !f.sources.is_empty()),
        "the interval traces back to the series"
    );
    // The series input counts the incident it shows; its device is plotted with the OOM.
    let series_input = d.inputs.iter().find(|i| i.name == LEAK_SERIES).unwrap();
    assert_eq!((series_input.kind, series_input.incidents), ("series", 1));
    let plot = d.series.iter().find(|p| p.device == Some(1)).unwrap();
    let oom = plot.marks.iter().find(|m| m.kind == MarkKind::Oom).unwrap();
    assert!(oom.label.contains("train.log:145"), "{}", oom.label);
    let last = plot.points.last().unwrap().0;
    assert!(oom.t > 0.9 * last && oom.t <= last, "{} of {last}", oom.t);
    assert!(
        d.series.iter().any(|p| p.device == Some(0)),
        "GPU 0 is plotted too"
    );
    // The human output names how the inputs were lined up and draws the device.
    let text = human(&d);
    assert!(text.contains("lined up by time"), "{text}");
    assert!(text.contains("▲ failure at 2025-09-08 03:28:47"), "{text}");
    assert!(text.contains("Memory series"), "GPU 0 summarised: {text}");
}

#[test]
fn a_log_without_timestamps_is_lined_up_by_device_only() {
    // Strip the logger's timestamps: only the device and the series' own failure remain.
    let log = rewritten(LEAK_LOG, "no-times.log", |t| {
        t.lines()
            .map(|l| match l.find(" - ") {
                Some(i) if l.starts_with("2025-") => &l[i + 3..],
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    let d = diagnose(&[&log, LEAK_SERIES]);
    assert_eq!(d.incidents.len(), 1);
    let inc = &d.incidents[0];
    assert!(!flag(inc, "series.time_aligned"));
    assert!(
        flag(inc, "series.crash_drop"),
        "the device's own failure is described"
    );
    assert_eq!(inc.cause.id(), "memory-leak");
    assert!(human(&d).contains("lined up by device only"));
}

#[test]
fn a_log_time_outside_the_series_keeps_only_what_does_not_depend_on_the_moment() {
    // The same failure a day later: the series ended long before it.
    let log = rewritten(LEAK_LOG, "a-day-later.log", |t| {
        t.replace("2025-09-08 ", "2025-09-09 ")
    });
    let d = diagnose(&[&log, LEAK_SERIES]);
    assert_eq!(
        d.incidents.len(),
        2,
        "the log's failure and the series' own"
    );
    let from_log = d
        .incidents
        .iter()
        .find(|i| i.location.input == log)
        .unwrap();
    assert!(!flag(from_log, "series.time_aligned"));
    assert!(num(from_log, "series.failure_gap_seconds") > 20.0 * 3600.0);
    assert!(!from_log.facts.contains("series.steady_growth"));
    assert_eq!(from_log.cause.id(), "memory-leak", "the log alone decides");
    let from_series = d
        .incidents
        .iter()
        .find(|i| i.location.input == LEAK_SERIES)
        .unwrap();
    assert_eq!(from_series.cause.id(), "memory-leak");
}

#[test]
fn a_series_alone_shows_an_incident() {
    let d = diagnose(&[LEAK_SERIES]);
    assert_eq!(d.incidents.len(), 1);
    let inc = &d.incidents[0];
    assert_eq!(inc.cause.id(), "memory-leak");
    assert_eq!(inc.kind, "device-oom");
    assert_eq!(inc.engine, "unknown");
    assert_eq!(inc.device, Some(1));
    assert_eq!(inc.phase, "steady-state");
    assert_eq!(
        inc.facts.str("phase.evidence"),
        Some("series: the device filled 5.5 h after the load ramp ended")
    );
    assert_eq!(inc.location.input, LEAK_SERIES);
    assert_eq!(inc.timestamp.as_deref(), Some("2025-09-08T03:28:44.115"));
    let mut out = Vec::new();
    let mut err = Vec::new();
    let mut io = oomdoctor::cli::app::Io {
        stdin: None,
        stdin_is_tty: true,
        stdout: &mut out,
        stdout_is_tty: false,
        stderr: &mut err,
        stderr_is_tty: false,
    };
    let exit = oomdoctor::cli::app::main_with_args(["oomdoctor", LEAK_SERIES], &mut io);
    assert_eq!(exit, oomdoctor::cli::app::Exit::Incident);
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("seen only in GPU 1 of"), "{text}");
}

#[test]
fn a_device_filling_during_load_is_a_model_load_incident() {
    let d = diagnose(&["fixtures/series/smi-load-too-large.csv"]);
    assert_eq!(d.incidents.len(), 1);
    let inc = &d.incidents[0];
    assert_eq!(inc.phase, "model-load");
    assert_eq!(inc.cause.id(), "model-too-large");
    assert!(flag(inc, "series.failed_during_load"));
    assert!(
        !flag(inc, "series.spike"),
        "the last shard is not an excursion"
    );
}

#[test]
fn a_per_process_series_names_the_neighbour_in_a_contention_incident() {
    // The device and per-process series alone.
    let d = diagnose(&[
        "fixtures/series/contention-gpu.csv",
        "fixtures/series/contention-apps.csv",
    ]);
    assert_eq!(d.incidents.len(), 1);
    let inc = &d.incidents[0];
    assert_eq!(inc.cause.id(), "memory-contention");
    assert_eq!(num(inc, "series.other_process_pid"), 51877.0);
    assert!(inc.summary.contains("51877"), "{}", inc.summary);
    let kill = inc
        .fixes
        .iter()
        .find(|f| f.action.starts_with("kill 51877"))
        .expect("kill the neighbour");
    assert!(kill.title.contains("7.21 GiB"), "{}", kill.title);
    let plot = &d.series[0];
    assert!(
        plot.marks
            .iter()
            .any(|m| m.kind == MarkKind::Event && m.label == "pid 51877 appears"),
        "{:?}",
        plot.marks
    );

    // With the job's log (which lists the process too): still one incident.
    let d = diagnose(&[
        "fixtures/series/incident-contention/train.log",
        "fixtures/series/contention-gpu.csv",
        "fixtures/series/contention-apps.csv",
    ]);
    assert_eq!(d.incidents.len(), 1);
    let inc = &d.incidents[0];
    assert_eq!(inc.cause.id(), "memory-contention");
    assert!(flag(inc, "series.time_aligned"));
    assert_eq!(num(inc, "series.own_process_pid"), 48213.0);

    // An old PyTorch message names no process; the per-process series alone does.
    let dir = "rules/series-neighbour-process/fires-old-torch-log-and-apps";
    let d = diagnose(&[&format!("{dir}/train.log"), &format!("{dir}/apps.csv")]);
    assert_eq!(d.incidents.len(), 1);
    let inc = &d.incidents[0];
    assert_eq!(inc.rule, "series-neighbour-process");
    assert!(inc.fixes.iter().any(|f| f.action.starts_with("kill 51877")));
}

#[test]
fn near_misses_make_no_incident() {
    for input in [
        "fixtures/series/busy-healthy.csv",
        "fixtures/series/vllm-full-by-design.csv",
        "fixtures/series/training-sawtooth.jsonl",
        "fixtures/series/plain-leak.csv",
        "fixtures/series/vllm-kv-pressure.prom",
    ] {
        let d = diagnose(&[input]);
        assert!(d.incidents.is_empty(), "{input}: {:?}", d.incidents);
        assert_eq!(
            oomdoctor::cli::diagnose::exit_status(&d, &Default::default(), false),
            oomdoctor::cli::app::Exit::Clean
        );
        let text = human(&d);
        assert!(text.contains("Memory series"), "{input}: {text}");
    }
    // The device full by design is described as such, and marks nothing as an OOM.
    let d = diagnose(&["fixtures/series/vllm-full-by-design.csv"]);
    assert!(d.series[0].marks.iter().all(|m| m.kind != MarkKind::Oom));
    assert!(human(&d).contains("full by design"));
    // A leak still in progress says when the device will be full.
    assert!(human(&diagnose(&["fixtures/series/plain-leak.csv"])).contains("full in 46"));
}

#[test]
fn a_device_full_by_design_is_no_evidence_for_a_serving_oom() {
    // vLLM at 91% for hours, then a serving OOM: one incident, decided by the log; the flat
    // series is neither a leak nor a second incident.
    let dir = "rules/series-steady-growth/near-miss-vllm-flat-then-serving-oom";
    let d = diagnose(&[&format!("{dir}/vllm.log"), &format!("{dir}/gpu.csv")]);
    assert_eq!(d.incidents.len(), 1);
    let inc = &d.incidents[0];
    assert_eq!(inc.rule, "vllm-serving-oom");
    // Lined up by vLLM's yearless `09-12 16:40:07` stamps, the year taken from the series.
    assert!(flag(inc, "series.time_aligned"));
    assert!(flag(inc, "series.flat_high"));
    assert!(!flag(inc, "series.steady_growth"));
    assert!(
        inc.alternatives
            .iter()
            .all(|a| a.cause.id() != "memory-leak"),
        "{:?}",
        inc.alternatives
    );
}

#[test]
fn log_series_and_snapshot_together_make_one_incident() {
    let dir = "rules/torch-activations/fires-log-and-snapshot";
    let d = diagnose(&[
        &format!("{dir}/crash.log"),
        "fixtures/series/first-batch-3gib.csv",
        &format!("{dir}/dump_snapshot.pickle"),
    ]);
    assert_eq!(d.incidents.len(), 1, "{:#?}", d.incidents);
    let inc = &d.incidents[0];
    assert_eq!(inc.cause.id(), "batch-misconfiguration");
    // Facts from all three inputs.
    assert!(inc.facts.contains("oom.requested_bytes"));
    assert!(inc.facts.contains("snapshot.oom_category"));
    assert!(flag(inc, "series.time_aligned"));
    assert!(flag(inc, "series.spike"));
    let inputs: Vec<String> = inc
        .facts
        .iter()
        .flat_map(|(_, f)| f.sources.iter().map(|s| s.input.to_string()))
        .collect();
    for want in ["crash.log", "first-batch-3gib.csv", "dump_snapshot.pickle"] {
        assert!(
            inputs.iter().any(|i| i.ends_with(want)),
            "{want}: {inputs:?}"
        );
    }
    assert_eq!(d.snapshots.len(), 1);
    assert_eq!(d.series.len(), 1);
}

#[test]
fn a_snapshot_alone_takes_series_facts_from_its_own_device() {
    let dir = "rules/torch-activations/fires-log-and-snapshot";
    let d = diagnose(&[
        &format!("{dir}/dump_snapshot.pickle"),
        "fixtures/series/first-batch-3gib.csv",
    ]);
    assert_eq!(
        d.incidents.len(),
        1,
        "the snapshot's OOM is the series' failure"
    );
    let inc = &d.incidents[0];
    assert!(inc.facts.contains("snapshot.oom_category"));
    assert!(flag(inc, "series.crash_drop"));
}

#[test]
fn an_unreadable_series_is_an_input_error_and_the_others_are_still_read() {
    // An nvidia-smi header over rows that are not samples.
    let bad = rewritten(LEAK_SERIES, "torn.csv", |t| {
        t.lines()
            .enumerate()
            .map(|(i, l)| {
                if i == 0 {
                    l.to_string()
                } else {
                    format!("{}, ???", &l[..10])
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    let rules = RuleSet::builtin().unwrap();
    let (d, errors) = diagnose_inputs(
        &[bad.clone(), LEAK_LOG.to_string()],
        &rules,
        &DiagnoseOptions::default(),
        None,
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    let code = miette::Diagnostic::code(&errors[0]).map(|c| c.to_string());
    assert_eq!(code.as_deref(), Some("oomdoctor::series::unparseable"));
    assert_eq!(d.errors[0].input, bad);
    assert_eq!(d.incidents.len(), 1, "the log is still diagnosed");
    assert_eq!(
        oomdoctor::cli::diagnose::exit_status(&d, &Default::default(), false),
        oomdoctor::cli::app::Exit::Error
    );
    // A log forced to be read as a series is refused with a hint, not misread.
    let opts = DiagnoseOptions {
        input_kind: Some(oomdoctor::input::InputKind::Series),
        ..DiagnoseOptions::default()
    };
    let (_, errors) = diagnose_inputs(&[LEAK_LOG.to_string()], &rules, &opts, None);
    assert_eq!(errors.len(), 1);
    assert!(errors[0].to_string().contains("not a memory series"));
}
