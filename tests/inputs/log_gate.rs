//! The log scan's two tiers ([`oomdoctor::ingest::log::gate`], README "Speed and memory"):
//! past a large log's head only the lines the gate finds are read, with every anchor walked
//! around each failure line. These tests hold the gate to what the full walk finds.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::collections::BTreeSet;

use oomdoctor::ingest::log::engines::{anchors, gate};
use oomdoctor::ingest::log::grouping::analyze_log_planned;
use oomdoctor::ingest::log::scanner::scan_planned;
use oomdoctor::ingest::log::{Hit, LineSink, ScanPlan};
use oomdoctor::input::walk::{Filter, walk_filtered};

/// Every log the project's tests read, and the real incidents where they are checked out.
fn all_logs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let mut dirs = vec![
        root.join("fixtures"),
        root.join("rules"),
        root.join("tests/regressions"),
    ];
    let real = root.join("../shared/eval/realworld");
    if real.is_dir() {
        dirs.push(real);
    } else {
        eprintln!("note: ../shared/eval/realworld is absent; checking the project's logs only");
    }
    let logs = Filter {
        include: vec!["*.log".into(), "*.txt".into()],
        exclude: Vec::new(),
    };
    for d in dirs {
        out.extend(walk_filtered(&d, &logs).unwrap().files);
    }
    out.sort();
    out
}

/// The lines where the full walk's incidents start.
fn failure_lines(log: &[u8]) -> Vec<u64> {
    let input = Arc::from("t.log");
    let (ev, _) = analyze_log_planned(&mut &log[..], &input, ScanPlan::full()).unwrap();
    ev.incidents.iter().filter_map(|i| i.first.line).collect()
}

/// The line numbers the gated scan delivers.
fn delivered(log: &[u8], plan: ScanPlan) -> BTreeSet<u64> {
    let mut sink = Lines::default();
    scan_planned(&mut &log[..], anchors(), Some(gate()), plan, &mut sink).unwrap();
    sink.0.into_iter().map(|(n, _)| n).collect()
}

/// Lines no anchor or gate literal holds, to push a log past the scan's held-back tail.
fn filler(bytes: usize) -> Vec<u8> {
    let line = b"INFO 10:00:00 step 12 | loss 2.310 | lr 3.0e-5 | tokens/s 11000\n";
    line.iter()
        .copied()
        .cycle()
        .take(bytes / line.len() * line.len())
        .collect()
}

/// A head and a tail far smaller than a few MiB of filler, so that a line in between is
/// past both.
const SMALL_HEAD_AND_TAIL: ScanPlan = ScanPlan {
    head: 64 << 10,
    tail: 256 << 10,
    window: 16 << 10,
};

/// More than the scan's first read (2 MiB) and its look-ahead.
const FILLER: usize = (2 << 20) + (256 << 10);

#[test]
fn every_failure_line_of_every_log_is_found_by_the_gate_alone() {
    // No head, no windows: each log's lines are read only where the gate finds them. The
    // filler after it makes the input longer than the scan's first read, so the log is not
    // the input's end (which is walked in full). The line where each incident of the full
    // walk starts must still be delivered: a failure wording the gate misses would go
    // unseen in a large log.
    let gated = ScanPlan {
        head: 0,
        tail: 0,
        window: 0,
    };
    let mut missed = Vec::new();
    let logs = all_logs();
    assert!(logs.len() > 100, "{} logs", logs.len());
    for p in &logs {
        let mut log = std::fs::read(p).unwrap();
        if !log.ends_with(b"\n") {
            log.push(b'\n');
        }
        let failures = failure_lines(&log);
        log.extend(filler(FILLER));
        let seen = delivered(&log, gated);
        let unseen: Vec<u64> = failures.into_iter().filter(|l| !seen.contains(l)).collect();
        if !unseen.is_empty() {
            missed.push(format!("{}: lines {unseen:?}", p.display()));
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

/// Records the lines the scan delivers, with their text.
#[derive(Default)]
pub(crate) struct Lines(pub(crate) Vec<(u64, String)>);

impl LineSink for Lines {
    fn hit(&mut self, hit: &Hit<'_>) -> u32 {
        self.0
            .push((hit.line_no, String::from_utf8_lossy(hit.raw).into_owned()));
        0
    }
}

#[test]
fn a_failures_window_is_walked_wherever_the_reads_split_the_input() {
    // Phase markers hold no gate literal: only a failure's window brings them in. The
    // failure moves across the end of the scan's first region (its first read, 2 MiB, less
    // the held-back look-ahead), so the window before it and after it straddle two regions.
    const WINDOW: usize = 16 << 10;
    let plan = ScanPlan {
        head: 0,
        tail: 0,
        window: WINDOW,
    };
    let near_before = "Loading checkpoint shards: 100%|##########| 4/4";
    let far_before = "***** Running training *****";
    let failure = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.";
    let near_after = "***** Running Evaluation *****";
    for at in (1900..2060).step_by(8).map(|k| k << 10) {
        let mut log = Vec::new();
        log.extend(filler(at - 2 * WINDOW));
        log.extend(format!("{far_before}\n").bytes());
        log.extend(filler(WINDOW + WINDOW / 2));
        log.extend(format!("{near_before}\n").bytes());
        log.extend(filler(WINDOW / 4));
        log.extend(format!("{failure}\n").bytes());
        log.extend(filler(WINDOW / 2));
        log.extend(format!("{near_after}\n").bytes());
        log.extend(filler(FILLER));
        let mut sink = Lines::default();
        scan_planned(&mut &log[..], anchors(), Some(gate()), plan, &mut sink).unwrap();
        let texts: Vec<&str> = sink.0.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(
            texts,
            [near_before, failure, near_after],
            "failure at {} KiB",
            at >> 10
        );
        // Line numbers are those of the whole input.
        let line_of = |needle: &str| {
            log.split(|&b| b == b'\n')
                .position(|l| l == needle.as_bytes())
                .unwrap() as u64
                + 1
        };
        assert_eq!(sink.0[1].0, line_of(failure), "failure at {} KiB", at >> 10);
        // The full walk sees the far marker as well.
        let mut full = Lines::default();
        scan_planned(&mut &log[..], anchors(), None, ScanPlan::full(), &mut full).unwrap();
        assert_eq!(full.0.len(), 4);
    }
}

#[test]
fn a_kill_reported_in_another_language_is_read_in_a_large_logs_tail() {
    // bash under a zh_CN locale reports SIGKILL as `已杀死`, which holds no gate literal: past
    // the head of a large log it is read because a shell prints it last, in the tail that is
    // walked in full (host.rs, `KILLED_TRANSLATED`).
    let mut log = Vec::new();
    log.extend(filler(3 << 20));
    log.extend("train.sh: 行 12: 31337 已杀死               python train.py --bs 64\n".as_bytes());
    let kill_line = count_lines(&log);
    let input = Arc::from("t.log");
    let (ev, _) = analyze_log_planned(&mut &log[..], &input, SMALL_HEAD_AND_TAIL).unwrap();
    assert_eq!(ev.incidents.len(), 1, "{:?}", ev.incidents);
    assert_eq!(ev.incidents[0].first.line, Some(kill_line));
    assert_eq!(ev.incidents[0].kind, "host-oom");
}

/// Lines in `log`, the last one ended by a newline.
fn count_lines(log: &[u8]) -> u64 {
    log.iter().filter(|&&b| b == b'\n').count() as u64
}

#[test]
fn head_and_tail_are_walked_in_full() {
    // A banner in the head and a marker in the tail hold no gate literal; a marker in the
    // middle, far from any failure, is passed over.
    let plan = SMALL_HEAD_AND_TAIL;
    let mut log = Vec::new();
    log.extend(b"INFO 10:00:00 vllm serve /models/llama --max-model-len 8192\n");
    log.extend(filler(3 << 20));
    log.extend(b"Loading checkpoint shards: 100%|##########| 4/4\n");
    log.extend(filler(2 << 20));
    log.extend(b"***** Running Evaluation *****\n");
    log.extend(filler(100 << 10));
    let mut sink = Lines::default();
    scan_planned(&mut &log[..], anchors(), Some(gate()), plan, &mut sink).unwrap();
    let texts: Vec<&str> = sink.0.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        texts,
        [
            "INFO 10:00:00 vllm serve /models/llama --max-model-len 8192",
            "***** Running Evaluation *****"
        ]
    );
}

#[test]
fn gated_lines_come_once_in_order_and_windows_hold_what_they_should() {
    // Random logs of readings, failures, context lines and gate words in unrelated lines,
    // placed across the end of the first region, with random windows: the scan must deliver
    // each line once and in order, only lines the full walk delivers, every line holding a
    // gate literal that the full walk delivers, and every line the full walk delivers that
    // starts within a window of a failure line.
    let pool: &[(&str, bool)] = &[
        (
            "INFO 10:00:01 metrics.py:455] Avg prompt throughput: 0.0 tokens/s, GPU KV cache usage: 41.0%, CPU KV cache usage: 0.0%.",
            false,
        ),
        (
            "[2026-03-02 10:59:27,864] INFO  trainer: step 9415417 | loss 2.2610 | mem 61.92 GiB",
            false,
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            true,
        ),
        (
            "train.sh: line 4: 4242 Killed                  python train.py",
            true,
        ),
        ("the error budget for this run is fine", true),
        ("Loading checkpoint shards: 100%|##########| 4/4", false),
        ("***** Running Evaluation *****", false),
        (
            "INFO:     10.2.20.34:41862 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
            false,
        ),
        (
            "DEBUG data.py:88 sample 30349 tokens=2243 truncated=False",
            false,
        ),
        (
            "DEBUG data.py:88 sample 30349 tokens=2243 truncated=False",
            false,
        ),
        (
            "DEBUG data.py:88 sample 30349 tokens=2243 truncated=False",
            false,
        ),
    ];
    let mut rng = crate::common::Rng(0x5eed_1234_abcd_0001);
    for round in 0..12 {
        let window = 200 + rng.below(4000) as usize;
        let plan = ScanPlan {
            head: 0,
            tail: 0,
            window,
        };
        let mut log = filler((1900 << 10) + rng.below(100 << 10) as usize);
        let mut failure_lines = Vec::new();
        for _ in 0..(200 + rng.below(400)) {
            let (line, failure) = pool[rng.below(pool.len() as u64) as usize];
            if failure {
                failure_lines.push(log.len()..log.len() + line.len());
            }
            log.extend(line.bytes());
            log.push(b'\n');
        }
        log.extend(filler(FILLER));
        let starts: Vec<usize> = std::iter::once(0)
            .chain(
                log.iter()
                    .enumerate()
                    .filter(|(_, b)| **b == b'\n')
                    .map(|(i, _)| i + 1),
            )
            .collect();
        let mut gated = Lines::default();
        scan_planned(&mut &log[..], anchors(), Some(gate()), plan, &mut gated).unwrap();
        let mut full = Lines::default();
        scan_planned(&mut &log[..], anchors(), None, ScanPlan::full(), &mut full).unwrap();
        let seen: Vec<u64> = gated.0.iter().map(|(n, _)| *n).collect();
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "round {round}: {seen:?}"
        );
        let full_lines: BTreeSet<u64> = full.0.iter().map(|(n, _)| *n).collect();
        let seen: BTreeSet<u64> = seen.into_iter().collect();
        assert!(seen.is_subset(&full_lines), "round {round}");
        for (n, text) in &full.0 {
            let start = starts[*n as usize - 1];
            let by_gate = gate().find(text.as_bytes(), 0).is_some();
            let in_window = failure_lines
                .iter()
                .any(|f| start + window > f.start && start < f.end + window);
            assert!(
                !(by_gate || in_window) || seen.contains(n),
                "round {round}, window {window}: line {n} {text:?} not delivered"
            );
        }
    }
}
