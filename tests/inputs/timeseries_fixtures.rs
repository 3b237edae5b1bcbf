//! Fixture-driven tests of the memory-series reader and analysis: each fixture in
//! `fixtures/series/` shows one situation, and these tests pin the pattern it must show,
//! its key numbers, and that the near misses (a busy healthy server, a device full by
//! design, a training sawtooth) do not fire.

use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use oomdoctor::facts::evidence::{Facts, InputName};
use oomdoctor::ingest::series::{
    self, Pattern, SeriesAnalysis, SeriesError, SeriesFormat, SeriesSet,
};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
const MIB: f64 = 1024.0 * 1024.0;

fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/series")
        .join(name)
}

fn read(name: &str) -> SeriesSet {
    let bytes = std::fs::read(path(name)).unwrap();
    let format = series::sniff(&bytes[..bytes.len().min(64 << 10)])
        .unwrap_or_else(|| panic!("{name}: not sniffed"));
    let input: InputName = Arc::from(name);
    series::read(bytes.as_slice(), &input, format).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn analyse(names: &[&str]) -> SeriesAnalysis {
    let mut set = SeriesSet::default();
    for n in names {
        set.merge(read(n));
    }
    series::analyze(&set)
}

fn time(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn num(f: &Facts, name: &str) -> f64 {
    f.num(name)
        .unwrap_or_else(|| panic!("no {name} in {:#?}", f))
}

fn flag(f: &Facts, name: &str) -> bool {
    f.bool(name)
        .unwrap_or_else(|| panic!("no {name} in {:#?}", f))
}

fn text(f: &Facts, name: &str) -> String {
    f.str(name)
        .unwrap_or_else(|| panic!("no {name} in {:#?}", f))
        .to_string()
}

/// The text of the line a fact's first source points at.
fn source_text(f: &Facts, name: &str) -> String {
    let fact = f.get(name).unwrap_or_else(|| panic!("no {name}"));
    fact.sources
        .first()
        .and_then(|s| s.text.as_deref())
        .unwrap_or_default()
        .to_string()
}

#[test]
fn every_fixture_is_sniffed_as_its_format_and_reads_cleanly() {
    let cases = [
        ("smi-leak-2gpu.csv", SeriesFormat::SmiGpu),
        ("smi-first-batch-noheader.csv", SeriesFormat::SmiGpu),
        ("contention-gpu.csv", SeriesFormat::SmiGpu),
        ("contention-apps.csv", SeriesFormat::SmiApps),
        ("dcgm-spike.prom", SeriesFormat::Prometheus),
        ("vllm-kv-pressure.prom", SeriesFormat::Prometheus),
        ("plain-leak.csv", SeriesFormat::PlainCsv),
        ("training-sawtooth.jsonl", SeriesFormat::JsonLines),
        ("busy-healthy.csv", SeriesFormat::SmiGpu),
        ("vllm-full-by-design.csv", SeriesFormat::SmiGpu),
    ];
    for (name, want) in cases {
        let bytes = std::fs::read(path(name)).unwrap();
        assert_eq!(
            series::sniff(&bytes[..bytes.len().min(64 << 10)]),
            Some(want),
            "{name}"
        );
        let set = read(name);
        let input = &set.inputs[0];
        // Only the noheader capture has a bad row: its torn last line.
        let expected_skips = u64::from(name == "smi-first-batch-noheader.csv");
        assert_eq!(input.skipped, expected_skips, "{name}: {input:?}");
        assert!(input.samples > 0, "{name}");
    }
    // The log of the leak incident is not a series.
    let log = std::fs::read(path("incident-leak/train.log")).unwrap();
    assert_eq!(series::sniff(&log), None);
}

#[test]
fn leak_on_gpu1_over_hours_ends_in_a_crash_drop() {
    let a = analyse(&["smi-leak-2gpu.csv"]);
    assert_eq!(a.devices(), vec![0, 1]);
    assert_eq!(a.inputs[0].missing, 1, "one [N/A] sample");
    assert!(a.inputs[0].naive_time);

    let failures = a.failures();
    assert_eq!(failures.len(), 1, "one incident: {failures:?}");
    let f = &failures[0];
    assert_eq!(f.device, 1);
    assert_eq!(f.time, Some(time("2025-09-08T03:28:44.115Z")));

    let facts = a.facts_for(Some(1), None);
    assert!(flag(&facts, "series.steady_growth"));
    let per_hour = num(&facts, "series.growth_bytes_per_second") * 3600.0 / GIB;
    assert!((1.2..1.7).contains(&per_hour), "{per_hour} GiB/h");
    assert!(num(&facts, "series.growth_r2") > 0.9);
    let baseline = num(&facts, "series.baseline_bytes") / MIB;
    assert!(
        (14_700.0..15_300.0).contains(&baseline),
        "baseline {baseline} MiB"
    );
    assert!(num(&facts, "series.time_to_full_seconds") < 1800.0);
    assert!(flag(&facts, "series.crash_drop"));
    assert!(flag(&facts, "series.device_filled"));
    assert!(
        !flag(&facts, "series.spike"),
        "the crash came from the climb, not an excursion"
    );
    assert!(!flag(&facts, "series.flat_high"));
    assert_eq!(num(&facts, "series.total_bytes"), 23028.0 * MIB);
    // nvidia-smi writes local time without a zone: shown without one, never as UTC.
    assert_eq!(
        text(&facts, "series.failure_time"),
        "2025-09-08T03:28:44.115"
    );
    // Provenance: the facts point at the nvidia-smi rows they came from.
    assert_eq!(
        source_text(&facts, "series.used_at_failure_bytes"),
        "2025/09/08 03:28:44.115, 1, NVIDIA A10G, 23006 MiB, 23028 MiB, 22 MiB, 91 %"
    );
    assert!(source_text(&facts, "series.baseline_bytes").starts_with("2025/09/07 22:0"));
    assert!(source_text(&facts, "series.crash_drop").contains(", 1, NVIDIA A10G, 0 MiB"));
    // Each number's span is its own cell of the row: memory.used, memory.total, the time.
    let cell = |name: &str| {
        let src = &facts.get(name).unwrap().sources[0];
        let (a, b) = src.span.unwrap_or_else(|| panic!("{name}: no span"));
        src.text.as_deref().unwrap()[a..b].to_string()
    };
    assert_eq!(cell("series.used_at_failure_bytes"), "23006 MiB");
    assert_eq!(cell("series.total_bytes"), "23028 MiB");
    assert!(cell("series.seconds_since_load").starts_with("2025/09/07 22:0"));

    // GPU 0 ran a healthy job the whole time.
    let g0 = a.facts_for(Some(0), None);
    assert!(!flag(&g0, "series.steady_growth"));
    assert!(!flag(&g0, "series.crash_drop"));
    assert!(
        !g0.contains("series.used_at_failure_bytes"),
        "no failure on GPU 0"
    );

    let kinds: Vec<&Pattern> = a
        .devices
        .iter()
        .find(|d| d.index == 1)
        .unwrap()
        .patterns
        .iter()
        .collect();
    assert!(kinds.iter().any(|p| matches!(p, Pattern::LoadRamp { .. })));
    assert!(
        kinds
            .iter()
            .any(|p| matches!(p, Pattern::Growth { steady: true, .. }))
    );
    assert!(
        kinds
            .iter()
            .any(|p| matches!(p, Pattern::CrashDrop { filled: true, .. }))
    );
}

#[test]
fn an_ambiguous_oom_log_lined_up_with_its_series_is_one_leak_incident() {
    // The log's OOM (64 MiB request, little reserved-unallocated memory) could be a batch
    // too large, fragmentation or a leak; its time lines up with the series' failure.
    let log = std::fs::read_to_string(path("incident-leak/train.log")).unwrap();
    let oom_line = log.lines().find(|l| l.contains(" - ERROR - ")).unwrap();
    let stamp = &oom_line[..23];
    let a = analyse(&["smi-leak-2gpu.csv"]);
    let year = a.wall_span().map(|(s, _)| chrono::Datelike::year(&s));
    let (t, naive) = series::parse_log_time(stamp, year).unwrap();
    assert!(naive);

    let same = a
        .failure_near(Some(1), t, Duration::seconds(60))
        .expect("the series failure is the log's failure");
    assert_eq!(same.device, 1);
    assert!(
        a.failure_near(Some(1), t + Duration::hours(1), Duration::seconds(60))
            .is_none()
    );

    for device in [Some(1), None] {
        let facts = a.facts_for(device, Some(t));
        assert_eq!(num(&facts, "series.device"), 1.0);
        assert!(flag(&facts, "series.time_aligned"));
        assert!(num(&facts, "series.failure_gap_seconds") < 15.0);
        assert!(flag(&facts, "series.steady_growth"));
        assert!(flag(&facts, "series.crash_drop"));
        assert!(!flag(&facts, "series.spike"));
        assert!(
            num(&facts, "series.seconds_since_load") > 4.0 * 3600.0,
            "hours after load"
        );
    }

    // A log time hours after the series ended: the series says so, and nothing about the
    // moment itself.
    let late = a.facts_for(Some(1), Some(time("2025-09-08T09:00:00Z")));
    assert!(!flag(&late, "series.time_aligned"));
    assert!(num(&late, "series.failure_gap_seconds") > 5.0 * 3600.0);
    assert!(!late.contains("series.used_at_failure_bytes"));
    assert!(!flag(&late, "series.crash_drop"));

    // A log time in the middle of the run cuts the window there: no crash yet.
    let mid = a.facts_for(Some(1), Some(time("2025-09-08T01:00:00Z")));
    assert!(flag(&mid, "series.time_aligned"));
    assert!(!flag(&mid, "series.crash_drop"));
    assert!(num(&mid, "series.used_at_failure_bytes") < 20.0 * GIB);
}

#[test]
fn first_batch_fills_the_device_seconds_after_load() {
    let a = analyse(&["smi-first-batch-noheader.csv"]);
    assert!(
        a.inputs[0].notes.iter().any(|n| n.starts_with("no header")),
        "{:?}",
        a.inputs[0].notes
    );
    let failures = a.failures();
    assert_eq!(failures.len(), 1);
    let facts = &failures[0].facts;
    assert!(num(facts, "series.seconds_since_load") < 20.0);
    assert!(flag(facts, "series.spike"));
    let spike = num(facts, "series.spike_bytes") / GIB;
    assert!((13.0..15.0).contains(&spike), "{spike} GiB");
    assert!(num(facts, "series.spike_seconds") <= 5.0);
    let baseline = num(facts, "series.baseline_bytes") / MIB;
    assert!((9_700.0..9_900.0).contains(&baseline), "{baseline}");
    assert!(!flag(facts, "series.steady_growth"));
    assert!(flag(facts, "series.crash_drop"));
}

#[test]
fn contention_names_the_neighbour_pid() {
    let a = analyse(&["contention-gpu.csv", "contention-apps.csv"]);
    assert_eq!(a.devices(), vec![0]);
    let failures = a.failures();
    assert_eq!(failures.len(), 1);
    let crash = failures[0].time.unwrap();
    assert_eq!(crash, time("2025-09-08T13:51:25.254Z"));
    for facts in [
        a.facts_for(Some(0), None),
        a.facts_for(Some(0), Some(crash)),
        a.facts_for_process(Some(0), Some(crash), Some(48213)),
    ] {
        assert!(flag(&facts, "series.contention"), "{facts:#?}");
        assert_eq!(num(&facts, "series.other_process_pid"), 51877.0);
        assert_eq!(
            text(&facts, "series.other_process_name"),
            "/opt/conda/bin/python"
        );
        assert!(flag(&facts, "series.other_process_appeared"));
        let other = num(&facts, "series.other_process_bytes") / MIB;
        assert!((7_300.0..7_450.0).contains(&other), "{other}");
        assert_eq!(num(&facts, "series.own_process_pid"), 48213.0);
        assert!(flag(&facts, "series.own_process_exited"));
        assert!(
            num(&facts, "series.own_process_growth_bytes") < 256.0 * MIB,
            "our job stayed flat"
        );
        assert!(!flag(&facts, "series.steady_growth"));
        assert!(flag(&facts, "series.crash_drop"));
        assert!(
            source_text(&facts, "series.other_process_pid")
                .contains("51877, /opt/conda/bin/python")
        );
    }
    let patterns: Vec<String> = a.patterns().map(Pattern::describe).collect();
    assert!(
        patterns
            .iter()
            .any(|p| p.contains("process 51877 (/opt/conda/bin/python) appeared")),
        "{patterns:#?}"
    );
    assert!(
        patterns
            .iter()
            .any(|p| p.contains("process 48213 (python3) vanished")),
        "{patterns:#?}"
    );

    // The job's own log fails 2 s after the last high sample: the same incident.
    let log = std::fs::read_to_string(path("incident-contention/train.log")).unwrap();
    let oom = log.lines().find(|l| l.contains(" - ERROR - ")).unwrap();
    let (t, _) = series::parse_log_time(&oom[..23], None).unwrap();
    assert!(a.failure_near(Some(0), t, Duration::seconds(30)).is_some());
    let facts = a.facts_for(Some(0), Some(t));
    assert!(flag(&facts, "series.time_aligned"));
    assert_eq!(num(&facts, "series.other_process_pid"), 51877.0);

    // The per-process series alone, lined up with the log's failure time.
    let apps = analyse(&["contention-apps.csv"]);
    assert!(apps.devices().is_empty());
    let facts = apps.facts_for(Some(0), Some(crash));
    assert_eq!(num(&facts, "series.other_process_pid"), 51877.0);
    assert!(flag(&facts, "series.other_process_appeared"));
    assert!(flag(&facts, "series.own_process_exited"));
    assert!(flag(&facts, "series.contention"));
}

#[test]
fn dcgm_spike_to_full_on_gpu0_and_a_harmless_spike_on_gpu1() {
    let a = analyse(&["dcgm-spike.prom"]);
    assert_eq!(a.devices(), vec![0, 1]);
    let d0 = a.devices.iter().find(|d| d.index == 0).unwrap();
    assert_eq!(d0.total_bytes, Some(81559 << 20), "used + free + reserved");
    assert_eq!(d0.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    let failures = a.failures();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].device, 0);
    let f0 = &failures[0].facts;
    assert!(flag(f0, "series.spike"));
    let spike = num(f0, "series.spike_bytes") / GIB;
    assert!((26.0..30.0).contains(&spike), "{spike}");
    assert!(!flag(f0, "series.steady_growth"));
    assert!(source_text(f0, "series.peak_bytes").starts_with("DCGM_FI_DEV_FB_USED{gpu=\"0\""));
    assert_eq!(
        text(f0, "series.device_uuid"),
        "GPU-0b9c2f1e-51a3-7d42-8e6a-2c9d1f4b7a30"
    );

    let f1 = a.facts_for(Some(1), None);
    assert_eq!(num(&f1, "series.spikes"), 1.0);
    assert!(num(&f1, "series.largest_spike_bytes") > 13.0 * GIB);
    assert!(!flag(&f1, "series.crash_drop"));
    assert!(!f1.contains("series.used_at_failure_bytes"));
}

#[test]
fn vllm_kv_pinned_with_a_growing_queue_and_preemptions() {
    let a = analyse(&["vllm-kv-pressure.prom"]);
    assert!(a.devices().is_empty());
    assert_eq!(a.inputs[0].clock, series::Clock::Sequence);
    let facts = a.facts_for(None, None);
    assert!(flag(&facts, "series.kv_pinned"));
    assert!(flag(&facts, "series.kv_pressure"));
    assert!(num(&facts, "series.kv_usage_at_failure") >= 0.99);
    assert!(num(&facts, "series.requests_waiting_at_failure") >= 30.0);
    let pre = num(&facts, "series.preemptions");
    assert!((150.0..260.0).contains(&pre), "{pre}");
    assert!(
        source_text(&facts, "series.kv_usage_at_failure").starts_with("vllm:kv_cache_usage_perc{")
    );
    assert!(
        a.patterns()
            .any(|p| matches!(p, Pattern::KvPressure { .. }))
    );
}

#[test]
fn plain_csv_leak_projects_time_to_full_and_spikes_do_not_bend_the_slope() {
    let a = analyse(&["plain-leak.csv"]);
    let facts = a.facts_for(Some(0), None);
    assert!(flag(&facts, "series.steady_growth"));
    let per_hour = num(&facts, "series.growth_bytes_per_second") * 3600.0 / GIB;
    assert!(
        (0.85..0.95).contains(&per_hour),
        "{per_hour} GiB/h (the generator's rate is 0.9)"
    );
    let ttf = num(&facts, "series.time_to_full_seconds") / 3600.0;
    assert!((40.0..52.0).contains(&ttf), "{ttf} h");
    assert_eq!(num(&facts, "series.spikes"), 2.0);
    assert!(a.failures().is_empty());
    assert!(!a.inputs[0].naive_time, "RFC 3339 with Z");
}

#[test]
fn near_miss_training_sawtooth_is_churn_not_a_leak() {
    let a = analyse(&["training-sawtooth.jsonl"]);
    let facts = a.facts_for(Some(0), None);
    assert!(flag(&facts, "series.churn"));
    assert!(!flag(&facts, "series.steady_growth"));
    assert!(!flag(&facts, "series.flat_high"));
    assert!(!flag(&facts, "series.spike"));
    assert_eq!(num(&facts, "series.spikes"), 0.0);
    assert!(a.failures().is_empty());
    let floor = num(&facts, "series.baseline_bytes") / MIB;
    assert!(
        (18_500.0..18_800.0).contains(&floor),
        "the trough: weights + optimizer, {floor}"
    );
}

#[test]
fn near_miss_busy_healthy_server_fires_nothing() {
    let a = analyse(&["busy-healthy.csv"]);
    let facts = a.facts_for(Some(0), None);
    assert!(!flag(&facts, "series.steady_growth"));
    assert!(!flag(&facts, "series.flat_high"));
    assert!(!flag(&facts, "series.spike"));
    assert!(!flag(&facts, "series.crash_drop"));
    assert!(!flag(&facts, "series.device_filled"));
    assert!(a.failures().is_empty());
    // Its request bursts are listed (at most five), not hidden.
    let spikes = a
        .patterns()
        .filter(|p| matches!(p, Pattern::Spike { .. }))
        .count();
    assert!((1..=5).contains(&spikes));
}

#[test]
fn near_miss_vllm_device_full_by_design() {
    let a = analyse(&["vllm-full-by-design.csv"]);
    let facts = a.facts_for(Some(0), None);
    assert!(flag(&facts, "series.flat_high"));
    assert!(!flag(&facts, "series.steady_growth"));
    assert!(!flag(&facts, "series.spike"));
    assert!(!flag(&facts, "series.device_filled"), "90% is not full");
    let ratio = num(&facts, "series.baseline_ratio");
    assert!((0.89..0.92).contains(&ratio), "{ratio}");
    assert!(a.failures().is_empty());
    assert!(a.patterns().any(|p| matches!(p, Pattern::FlatHigh { .. })));
}

#[test]
fn every_fact_is_catalogued_with_provenance_where_it_has_a_source() {
    let a = analyse(&[
        "smi-leak-2gpu.csv",
        "dcgm-spike.prom",
        "vllm-kv-pressure.prom",
    ]);
    for d in [Some(0), Some(1), None] {
        let facts = a.facts_for(d, None);
        assert!(!facts.is_empty());
        for (name, fact) in facts.iter() {
            let def = oomdoctor::facts::catalog::lookup(name)
                .unwrap_or_else(|| panic!("{name} not catalogued"));
            assert!(def.name.starts_with("series."));
            for s in &fact.sources {
                assert!(s.line.is_some() || s.locator.is_some(), "{name}: {s:?}");
            }
        }
    }
}

#[test]
fn terminal_charts_mark_the_failure() {
    let a = analyse(&["smi-leak-2gpu.csv"]);
    let spark = a.sparkline(1, 60, None);
    let lines: Vec<&str> = spark.lines().collect();
    assert_eq!(lines.len(), 2, "{spark}");
    assert_eq!(lines[0].chars().count(), 60);
    assert!(lines[0].contains('█'), "the device filled: {spark}");
    assert!(lines[1].trim_start().starts_with('▲'));
    // The OOM is near the end of the series (five minutes of idle follow).
    let col = lines[1].chars().count() - 1;
    assert!((55..60).contains(&col), "{col}");
    let chart = a.chart(1, 60, 6, None);
    assert!(chart.contains("22.49 GiB ┤"), "{chart}");
    assert!(
        chart.contains("▲ failure at 2025-09-08 03:28:44"),
        "{chart}"
    );
    // An explicit mark outside the series is not drawn; an unknown device draws nothing.
    assert!(
        !a.sparkline(1, 60, Some(time("2024-01-01T00:00:00Z")))
            .contains('▲')
    );
    assert_eq!(a.sparkline(7, 60, None), "");
}

#[test]
fn the_analysis_serialises_downsampled_points_for_plots() {
    let a = analyse(&["smi-leak-2gpu.csv", "contention-apps.csv"]);
    let v = serde_json::to_value(&a).unwrap();
    let devices = v["devices"].as_array().unwrap();
    for d in devices {
        let n = d["points"]["t"].as_array().unwrap().len();
        assert!(n > 0 && n <= 1000);
        assert_eq!(d["points"]["max"].as_array().unwrap().len(), n);
        assert!(d["points"]["max"][0].is_u64(), "integer bytes");
    }
    assert_eq!(
        v["failures"][0]["time"], "2025-09-08T03:28:44.115",
        "naive, as written"
    );
    assert_eq!(
        v["failures"][0]["facts"]["series.crash_drop"]["value"],
        true
    );
    assert!(
        v["devices"][1]["patterns"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["kind"] == "growth")
    );
}

#[test]
fn unreadable_inputs_are_errors_naming_the_line() {
    let log = std::fs::read(path("incident-leak/train.log")).unwrap();
    let input: InputName = Arc::from("train.log");
    let err = series::read(log.as_slice(), &input, SeriesFormat::SmiGpu).unwrap_err();
    assert!(
        matches!(err, SeriesError::Unparseable { line: 1, .. }),
        "{err:?}"
    );
    let code = miette::Diagnostic::code(&err).map(|c| c.to_string());
    assert_eq!(code.as_deref(), Some("oomdoctor::series::unparseable"));
    let err = series::read(log.as_slice(), &input, SeriesFormat::Prometheus).unwrap_err();
    assert!(matches!(err, SeriesError::Unparseable { .. }), "{err:?}");
    let err = series::read(log.as_slice(), &input, SeriesFormat::JsonLines).unwrap_err();
    assert!(
        matches!(err, SeriesError::Unparseable { line: 1, .. }),
        "{err:?}"
    );
    let err = series::read(log.as_slice(), &input, SeriesFormat::PlainCsv).unwrap_err();
    assert!(
        matches!(err, SeriesError::NoUsedColumn { line: 1, .. }),
        "{err:?}"
    );
}

#[test]
fn a_spike_is_related_to_engine_load_when_both_share_a_clock() {
    // DCGM and vLLM metrics from one Prometheus dump: a burst of long requests fills the
    // KV cache and the device, and the server dies.
    let mut text = String::new();
    let t0 = 1_757_329_200_000i64;
    for k in 0..60i64 {
        let ts = t0 + k * 15_000;
        let (used, kv, running) = match k {
            38 => (66_000, 0.81, 44.0),
            39 => (77_900, 0.99, 61.0),
            40.. => (0, 0.0, 0.0),
            _ => (
                60_100 + (k % 3) * 40,
                0.35 + (k % 4) as f64 * 0.02,
                12.0 + (k % 3) as f64,
            ),
        };
        text.push_str(&format!(
            "DCGM_FI_DEV_FB_USED{{gpu=\"0\",UUID=\"GPU-1\"}} {used} {ts}\nDCGM_FI_DEV_FB_TOTAL{{gpu=\"0\",UUID=\"GPU-1\"}} 81559 {ts}\n"
        ));
        if k < 40 {
            text.push_str(&format!(
                "vllm:kv_cache_usage_perc{{engine=\"0\",model_name=\"m\"}} {kv} {ts}\nvllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} {running} {ts}\n"
            ));
        }
    }
    let input: InputName = Arc::from("both.prom");
    assert_eq!(
        series::sniff(text.as_bytes()),
        Some(SeriesFormat::Prometheus)
    );
    let set = series::read(text.as_bytes(), &input, SeriesFormat::Prometheus).unwrap();
    let a = series::analyze(&set);
    let failures = a.failures();
    assert_eq!(failures.len(), 1);
    let facts = &failures[0].facts;
    assert!(flag(facts, "series.spike"));
    assert_eq!(num(facts, "series.spike_requests_running"), 61.0);
    assert!(num(facts, "series.spike_kv_usage") > 0.98);
    assert!(
        num(facts, "series.kv_correlation") > 0.8,
        "{}",
        num(facts, "series.kv_correlation")
    );
    assert!(num(facts, "series.kv_usage_at_failure") > 0.98);
    assert!(
        source_text(facts, "series.spike_requests_running")
            .starts_with("vllm:num_requests_running{")
    );
}
