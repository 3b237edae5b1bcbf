//! Shared by the integration tests: running the binary, per-test temporary directories, and
//! synthetic plot data (what the series and snapshot analyses will put in a diagnosis), so
//! the HTML charts and the schema are exercised now.

#![allow(dead_code)]

pub mod rng;

pub use rng::Rng;

use oomdoctor::render::plot::{
    Block, BlockState, CategoryBytes, MarkKind, Segment, SeriesMark, SeriesPlot, SiteBytes,
    SnapshotPlot,
};

/// Diagnoses files (paths relative to the crate root) with the built-in rules, as the
/// command line does; an input error fails the test.
pub fn diagnose_files(rel: &[&str]) -> oomdoctor::diagnosis::report::Diagnosis {
    use oomdoctor::cli::diagnose::{DiagnoseOptions, diagnose_inputs};
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let rules = oomdoctor::diagnosis::rules::RuleSet::builtin().unwrap();
    let inputs: Vec<String> = rel.iter().map(|r| r.to_string()).collect();
    let (d, errors) = diagnose_inputs(&inputs, &rules, &DiagnoseOptions::default(), None);
    assert!(errors.is_empty(), "{rel:?}: {errors:?}");
    d
}

/// The first incident of one file's diagnosis; none fails the test.
pub fn first_incident(rel: &str) -> oomdoctor::diagnosis::report::IncidentReport {
    let d = diagnose_files(&[rel]);
    assert!(!d.incidents.is_empty(), "{rel}: no incident");
    d.incidents[0].clone()
}

/// Every evidence sentence of an incident, the verdict's and its contenders'.
pub fn evidence_texts(i: &oomdoctor::diagnosis::report::IncidentReport) -> Vec<&str> {
    i.evidence
        .iter()
        .chain(i.alternatives.iter().flat_map(|a| a.evidence.iter()))
        .map(|e| e.text.as_str())
        .collect()
}

/// Runs the binary with no standard input and no GitHub step summary, capturing its output.
pub fn run_bin<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_oomdoctor"))
        .args(args)
        .env_remove("GITHUB_STEP_SUMMARY")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap()
}

/// A fresh, empty temporary directory for one test (`oomdoctor-{suite}-{pid}-{name}`).
pub fn tmp_dir(suite: &str, name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("oomdoctor-{suite}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Two GPUs over 40 minutes: a training step's sawtooth on a slow creep, until GPU 1 runs
/// out; a restart mark early on.
pub fn series() -> Vec<SeriesPlot> {
    let total = 79 * GIB + GIB / 4; // 79.25 GiB
    let mut rng = Rng(0x9E3779B97F4A7C15);
    let mut lines = Vec::new();
    for device in 0..2u32 {
        let mut points = Vec::new();
        for i in 0..2400u32 {
            let t = i as f64;
            let base = 52.0 * GIB as f64 + t * (if device == 1 { 9.6 } else { 7.0 }) * MIB as f64;
            let saw = ((i % 30) as f64 / 30.0) * 6.0 * GIB as f64;
            let noise = rng.below(200 * MIB) as f64;
            let v = (base + saw + noise).min(total as f64 - (150 * MIB) as f64);
            points.push((t, v as u64));
        }
        lines.push(SeriesPlot {
            input: "nvidia-smi.csv".into(),
            device: Some(device),
            label: format!("GPU {device} memory.used"),
            start: Some("2026-05-02T08:00:00Z".into()),
            points,
            total_bytes: Some(total),
            marks: if device == 1 {
                vec![
                    SeriesMark {
                        t: 300.0,
                        label: "restart".into(),
                        kind: MarkKind::Restart,
                    },
                    SeriesMark {
                        t: 1500.0,
                        label: "eval".into(),
                        kind: MarkKind::Event,
                    },
                    SeriesMark {
                        t: 2399.0,
                        label: "OOM on GPU 1".into(),
                        kind: MarkKind::Oom,
                    },
                ]
            } else {
                vec![]
            },
        });
    }
    lines
}

/// A fragmented large pool: 240 segments (about 70 GiB), most partly free, none with a free block as big as
/// the 1.96 GiB request.
pub fn snapshot() -> SnapshotPlot {
    let mut rng = Rng(0xD1B54A32D192ED03);
    let mut segments = Vec::new();
    let mut address = 0x7f00_0000_0000u64;
    let mut largest = 0u64;
    for i in 0..240u64 {
        let size = match i % 7 {
            0 => GIB,
            1 | 2 => 256 * MIB,
            3 => 20 * MIB,
            _ => (48 + rng.below(160)) * MIB,
        };
        let mut blocks = Vec::new();
        let mut offset = 0;
        while offset < size {
            let left = size - offset;
            let len = if left <= 8 * MIB {
                left
            } else {
                ((2 + rng.below(160)) * MIB).min(left)
            };
            let state = match rng.below(10) {
                0..=5 => BlockState::Allocated,
                6 => BlockState::PendingFree,
                _ => BlockState::Free,
            };
            let len = if state == BlockState::Free {
                len.min(512 * MIB)
            } else {
                len
            };
            if state == BlockState::Free {
                largest = largest.max(len);
            }
            blocks.push(Block {
                offset,
                size: len,
                state,
            });
            offset += len;
        }
        segments.push(Segment {
            address,
            size,
            pool: Some(if size <= 20 * MIB {
                "small".into()
            } else {
                "large".into()
            }),
            blocks,
        });
        address += size + 0x20_0000;
    }
    SnapshotPlot {
        input: "snapshot.pickle".into(),
        device: Some(1),
        total_bytes: Some(79 * GIB + GIB / 4),
        segments,
        largest_free_block: Some(largest),
        request: Some(2_104_533_975),
        categories: vec![
            CategoryBytes {
                name: "parameters".into(),
                bytes: 14 * GIB,
            },
            CategoryBytes {
                name: "optimizer state".into(),
                bytes: 28 * GIB,
            },
            CategoryBytes {
                name: "gradients".into(),
                bytes: 14 * GIB,
            },
            CategoryBytes {
                name: "activations".into(),
                bytes: 9 * GIB + 300 * MIB,
            },
            CategoryBytes {
                name: "autograd temporaries".into(),
                bytes: 2 * GIB + 100 * MIB,
            },
            CategoryBytes {
                name: "unknown".into(),
                bytes: 700 * MIB,
            },
        ],
        top_sites: vec![
            SiteBytes {
                site: "torch/optim/adamw.py:119 _init_group".into(),
                bytes: 28 * GIB,
                count: Some(292),
            },
            SiteBytes {
                site: "transformers/modeling_utils.py:4120 _load_state_dict_into_meta_model".into(),
                bytes: 14 * GIB,
                count: Some(291),
            },
            SiteBytes {
                site: "torch/autograd/graph.py:825 _engine_run_backward".into(),
                bytes: 14 * GIB,
                count: Some(291),
            },
            SiteBytes {
                site: "transformers/models/llama/modeling_llama.py:512 forward".into(),
                bytes: 6 * GIB + 200 * MIB,
                count: Some(1312),
            },
            SiteBytes {
                site: "torch/nn/functional.py:2264 cross_entropy".into(),
                bytes: 3 * GIB + 100 * MIB,
                count: Some(4),
            },
        ],
        ..Default::default()
    }
}
