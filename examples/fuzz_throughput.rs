//! Times the bodies of the `log_scan` and `series` fuzz targets on fuzz-sized inputs, for
//! machines without `cargo fuzz` (it needs a nightly toolchain and the sanitizer runtime).
//!
//! ```text
//! cargo run --example fuzz_throughput                 # both targets, inputs cut from fixtures/
//! cargo run --example fuzz_throughput -- series 2000  # one target, 2000 rounds per input
//! ```
//!
//! Inputs are what a fuzzer's corpus holds once it has run a while: the first 4 KiB, 1 KiB
//! and 256 bytes of every fixture of the target's kind, each also with a few bytes flipped.
//! The first call is timed apart (it builds the lazily compiled recognisers and rules); the
//! rest give executions per second and the slowest inputs. The bodies below are the fuzz
//! targets' own (`fuzz/fuzz_targets/log_scan.rs`, `series.rs`), kept in step by hand.

use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use oomdoctor::ingest::series::{self, SeriesFormat};

static RULES: LazyLock<oomdoctor::diagnosis::rules::RuleSet> =
    LazyLock::new(|| oomdoctor::diagnosis::rules::RuleSet::builtin().expect("built-in rules load"));

fn log_scan(data: &[u8]) {
    let input: oomdoctor::facts::evidence::InputName = Arc::from("fuzz.log");
    let Ok((evidence, _)) = oomdoctor::ingest::log::grouping::analyze_log(&mut &data[..], &input)
    else {
        return;
    };
    let rules = &*RULES;
    let mut d = oomdoctor::diagnosis::report::Diagnosis::new();
    d.incidents = oomdoctor::diagnosis::verdict::finish(
        evidence
            .incidents
            .iter()
            .map(|i| oomdoctor::diagnosis::verdict::diagnose(i, rules))
            .collect(),
    );
    d.collect_excerpts();
    let _ = oomdoctor::render::json::render(&d);
    let _ = oomdoctor::render::human::render(
        &d,
        &oomdoctor::render::human::Style {
            color: true,
            width: 80,
        },
        true,
    );
}

fn series(data: &[u8]) {
    let input: oomdoctor::facts::evidence::InputName = Arc::from("fuzz.csv");
    let _ = series::sniff(data);
    for format in [
        SeriesFormat::SmiGpu,
        SeriesFormat::SmiApps,
        SeriesFormat::Prometheus,
        SeriesFormat::PlainCsv,
        SeriesFormat::JsonLines,
    ] {
        let Ok(set) = series::read(data, &input, format) else {
            continue;
        };
        let a = series::analyze(&set);
        let _ = a.facts_for(None, None);
        for d in a.devices() {
            let _ = a.facts_for(Some(d), None);
            let _ = a.sparkline(d, 40, None);
        }
    }
}

fn files(dir: &Path, keep: &dyn Fn(&Path) -> bool, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, keep, out);
        } else if keep(&p) {
            out.push(p);
        }
    }
}

/// Fuzz-sized inputs from the fixtures: prefixes of 4 KiB, 1 KiB and 256 bytes, and each
/// with every 97th byte flipped (what a mutator does to a corpus entry).
fn corpus(kind: &str) -> Vec<(String, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut paths = Vec::new();
    let is_series = |p: &Path| {
        let e = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        p.starts_with(root.join("series")) && matches!(e, "csv" | "prom" | "jsonl")
            || p.starts_with(root.join("rules").join("series-steady-growth")) && e == "csv"
    };
    let is_log = |p: &Path| p.extension().and_then(|e| e.to_str()) == Some("log");
    if kind == "series" {
        files(&root, &is_series, &mut paths);
    } else {
        files(&root.join("rules"), &is_log, &mut paths);
        files(&root.join("pastes"), &is_log, &mut paths);
    }
    paths.sort();
    let mut out = Vec::new();
    for p in paths {
        let Ok(data) = std::fs::read(&p) else {
            continue;
        };
        let name = p.strip_prefix(&root).unwrap_or(&p).display().to_string();
        for n in [4096, 1024, 256] {
            let cut = data[..data.len().min(n)].to_vec();
            let mut flipped = cut.clone();
            for i in (0..flipped.len()).step_by(97) {
                flipped[i] ^= 0x5a;
            }
            out.push((format!("{name}[..{n}]"), cut));
            out.push((format!("{name}[..{n}]~"), flipped));
            if data.len() <= n {
                break;
            }
        }
    }
    out
}

fn measure(kind: &str, rounds: usize) {
    let body: fn(&[u8]) = if kind == "series" { series } else { log_scan };
    let inputs = corpus(kind);
    let t = Instant::now();
    body(b"");
    let first = t.elapsed();
    let mut per: Vec<(Duration, &str, usize)> = Vec::new();
    let mut total = Duration::ZERO;
    let mut execs = 0usize;
    for (name, data) in &inputs {
        let t = Instant::now();
        for _ in 0..rounds {
            body(data);
        }
        let d = t.elapsed();
        total += d;
        execs += rounds;
        per.push((d / rounds as u32, name, data.len()));
    }
    per.sort_by_key(|p| std::cmp::Reverse(p.0));
    println!(
        "{kind}: {} inputs (<= 4 KiB), {execs} executions in {:.2} s: {:.0} executions/s; first call {:.1} ms",
        inputs.len(),
        total.as_secs_f64(),
        execs as f64 / total.as_secs_f64().max(1e-9),
        first.as_secs_f64() * 1e3,
    );
    for (d, name, len) in per.iter().take(5) {
        println!(
            "  slowest: {:>8.1} µs  {len:>5} B  {name}",
            d.as_secs_f64() * 1e6
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds = args.get(1).and_then(|r| r.parse().ok()).unwrap_or(20usize);
    match args.first().map(String::as_str) {
        Some(k @ ("log_scan" | "series")) => measure(k, rounds),
        Some(other) => eprintln!("usage: fuzz_throughput [log_scan|series] [ROUNDS] (not {other})"),
        None => {
            measure("log_scan", rounds);
            measure("series", rounds);
        }
    }
}
