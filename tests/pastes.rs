//! Crash logs in the shapes people paste into issues and CI logs leave behind: a `Killed`
//! glued to a progress bar, shell job control, a status hard-wrapped at 100 columns, a
//! fragment without the exception's name, ANSI escapes pasted as literal `^[[`, older and
//! newer wordings, an nvidia-smi table under the error. Each must give an incident with the
//! right failure kind and a cause the evidence supports; where the evidence cannot separate
//! two causes, the incident says so and names what would. Written by us in those shapes
//! (`fixtures/pastes/`).

mod common;

use oomdoctor::cli::diagnose::{DiagnoseOptions, diagnose_inputs};
use oomdoctor::diagnosis::report::IncidentReport;
use oomdoctor::diagnosis::rules::{Direction, RuleSet};

fn first(name: &str) -> IncidentReport {
    common::first_incident(&format!("fixtures/pastes/{name}"))
}

/// (file, failure kind, the cause it must name first)
const CASES: &[(&str, &str, &str)] = &[
    ("glued-killed-after-shards-bar.log", "host-oom", "host-oom"),
    // TensorFlow's cuDNN handle failure, its sentence cut by a 100-column wrap.
    (
        "tf-cudnn-handle-wrapped-at-100.log",
        "device-oom",
        "memory-contention",
    ),
    // The CPU allocator's byte count cut by a 100-column wrap.
    ("cpu-allocator-wrapped-at-100.log", "host-oom", "host-oom"),
    ("ray-monitor-caret-escapes.log", "host-oom", "host-oom"),
    (
        "sglang-no-kv-room-cut-short.log",
        "no-kv-memory",
        "model-too-large",
    ),
    (
        "trtllm-no-free-blocks-under-load.log",
        "kv-exhausted",
        "kv-cache-overflow",
    ),
    (
        "jax-cubin-load-in-notebook.log",
        "device-oom",
        "memory-contention",
    ),
    (
        "smi-table-pasted-under-runtime-error.log",
        "device-oom",
        "memory-contention",
    ),
    (
        "generate-32k-new-tokens-kv-cache.log",
        "device-oom",
        "kv-cache-overflow",
    ),
    ("backward-after-48k-steps.log", "device-oom", "memory-leak"),
    (
        "tf-op-oom-cut-before-its-device.log",
        "device-oom",
        "batch-misconfiguration",
    ),
    // A notebook's header and its message at the bottom are one failure, with the numbers.
    (
        "notebook-header-and-message.log",
        "device-oom",
        "batch-misconfiguration",
    ),
    // A Slurm step id (`*** STEP 7730412.0 ... CANCELLED`) is not a step count.
    (
        "slurm-step-cancelled-after-cgroup-kill.log",
        "host-oom",
        "host-oom",
    ),
    // zsh's `[1]` glued to the bar, the pid and `killed` on the next line.
    ("zsh-job-number-glued-to-bar.log", "host-oom", "host-oom"),
    (
        "ggml-context-pool-large-batch.log",
        "device-oom",
        "batch-misconfiguration",
    ),
    // tqdm captured to a file: 600 updates on one line, each after a `\r`, its `gpu_mem`
    // postfix creeping up to the failure.
    (
        "tqdm-bar-redrawn-memory-creeps.log",
        "device-oom",
        "memory-leak",
    ),
    // Every line through Python logging's `%(asctime)s - %(levelname)s - %(message)s`.
    (
        "python-logging-dash-level-smi-table.log",
        "device-oom",
        "memory-contention",
    ),
];

#[test]
fn every_paste_shape_gives_its_incident() {
    for (file, kind, cause) in CASES {
        let i = first(file);
        assert_eq!(i.kind, *kind, "{file}");
        assert_eq!(i.cause.id(), *cause, "{file}: {}", i.summary);
        assert!(!i.fixes.is_empty(), "{file}: no fix");
    }
}

/// Shapes whose text alone does not separate the causes: they still make an incident, and
/// it is marked undetermined with the input that would settle it.
#[test]
fn thin_pastes_are_incidents_and_say_what_would_settle_them() {
    for (file, kind) in [
        ("bare-fragment-from-issue-title.log", "device-oom"),
        ("tf-status-hard-wrapped-at-100-columns.log", "device-oom"),
        ("pre-1.0-thcudacheck.log", "device-oom"),
        // A notebook paste cut inside the stack: only the header names the failure.
        ("notebook-header-cut-in-the-stack.log", "device-oom"),
        ("zsh-job-control-kill-after-epochs.log", "host-oom"),
        // The fragment again, each line behind loguru's `time | LEVEL | where - `.
        ("loguru-fragment-without-exception.log", "device-oom"),
    ] {
        let i = first(file);
        assert_eq!(i.kind, kind, "{file}");
        assert!(!i.determined, "{file}: {} {:.2}", i.cause, i.confidence);
        assert!(
            i.settle.as_deref().is_some_and(|s| !s.is_empty()),
            "{file}: no settling input"
        );
        assert!(!i.alternatives.is_empty(), "{file}: no contender");
    }
    // The hard-wrapped status is read whole: its number is the request.
    let i = first("tf-status-hard-wrapped-at-100-columns.log");
    assert_eq!(i.requested_bytes, Some(5_520_758_552));
    let i = first("cpu-allocator-wrapped-at-100.log");
    assert_eq!(i.requested_bytes, Some(92_475_822_080));
    // cudaMallocAsync's gap, less a CUDA context, held the request: what held it leads, not
    // the batch.
    let i = first("async-pool-gap-on-a-desktop-card.log");
    assert_ne!(i.cause.id(), "batch-misconfiguration", "{}", i.summary);
    assert!(
        i.evidence
            .iter()
            .any(|e| e.text.contains("neither in live tensors") && e.weight > 0.0),
        "{:?}",
        i.evidence
    );
    let i = first("notebook-header-and-message.log");
    assert_eq!(i.requested_bytes, Some(3 << 30));
    // A pre-1.0 runtime error has no figures: nothing says memory was held elsewhere.
    let i = first("pre-1.0-thcudacheck.log");
    assert!(
        !i.evidence.iter().any(|e| e.text.contains("held")
            && e.weight > 0.0
            && i.cause.id() == "memory-contention"),
        "{:?}",
        i.evidence
    );
}

/// A batch-1 `generate()` has no batch to cut, and a failure after 48,210 steps did not
/// happen "before steps could run steadily".
#[test]
fn no_advice_points_the_wrong_way() {
    let i = first("generate-32k-new-tokens-kv-cache.log");
    assert!(
        !i.fixes.iter().any(
            |f| f.knob.as_deref() == Some("batch_size") && f.direction == Some(Direction::Down)
        ),
        "{:?}",
        i.fixes.iter().map(|f| &f.title).collect::<Vec<_>>()
    );
    let i = first("backward-after-48k-steps.log");
    let texts = common::evidence_texts(&i);
    assert!(
        !texts.iter().any(|t| t.contains("before steps could run")),
        "{texts:?}"
    );
    assert!(texts.iter().any(|t| t.contains("48210 steps")), "{texts:?}");
    // TGI's router names a batch of one: no fix cuts a batch below one.
    let i = first("tgi-router-batch1-prefill.log");
    assert_eq!(i.engine, "tgi");
    assert_eq!(i.phase, "serving");
}

/// A summary never contradicts its own numbers: "did not fit" only when the live tensors
/// plus the request exceed what was usable, "only just fit" only when they do not.
#[test]
fn summaries_do_not_contradict_their_numbers() {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let rules = RuleSet::builtin().unwrap();
    let mut inputs: Vec<String> = vec!["fixtures/series/incident-leak/train.log".into()];
    for dir in ["fixtures/pastes", "rules/torch-activations"] {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            if e.path().is_file() {
                inputs.push(e.path().display().to_string());
            }
        }
    }
    let mut checked = 0;
    for input in inputs {
        let (d, _) = diagnose_inputs(
            std::slice::from_ref(&input),
            &rules,
            &DiagnoseOptions::default(),
            None,
        );
        for i in d.incidents {
            let num = |n: &str| i.facts.num(n);
            let (Some(a), Some(r), Some(f)) = (
                num("oom.allocated_bytes"),
                num("oom.requested_bytes"),
                num("oom.free_bytes"),
            ) else {
                continue;
            };
            let usable = a + num("oom.reserved_unallocated_bytes").unwrap_or(0.0) + f;
            if i.summary.contains("did not fit in") {
                assert!(a + r > usable, "{input}: {}", i.summary);
                checked += 1;
            }
            if i.summary.contains("only just fit in") {
                assert!(a + r <= usable, "{input}: {}", i.summary);
                checked += 1;
            }
        }
    }
    assert!(checked >= 3, "only {checked} summaries were checked");
}

/// A message that a fixed-width terminal or viewer cut at 80 or 100 columns reads as the
/// uncut one: a cut inside the request (`allocate 18` / `6.00 MiB`) still makes the
/// allocator's incident, and a cut that fell on a space (`95.44 MiB` / ` free`) keeps it.
#[test]
fn messages_cut_at_a_fixed_width_read_whole() {
    let i = first("oom-cut-at-80-columns-mid-number.log");
    assert_eq!(i.kind, "device-oom");
    assert_eq!(i.requested_bytes, Some(186 * 1024 * 1024));
    let num = |n: &str| i.facts.num(n).map(|v| v.round() as u64);
    assert_eq!(
        num("oom.free_bytes"),
        Some((95.44f64 * 1048576.0).round() as u64)
    );
    assert_eq!(
        num("oom.reserved_bytes"),
        Some((9.57f64 * 1073741824.0).round() as u64)
    );
    let i = first("mps-oom-cut-at-100-columns.log");
    assert_eq!(i.kind, "device-oom");
    assert_eq!(i.facts.str("oom.backend"), Some("mps"));
    assert_eq!(i.requested_bytes, Some(1_610_612_736));
    assert!(i.facts.num("oom.allowed_bytes").is_some());
    // TensorFlow's op message cut inside its shape and again before the allocator's name:
    // the device and the tensor's size are in the pieces.
    let i = first("tf-op-oom-cut-before-its-device.log");
    assert_eq!(i.kind, "device-oom");
    assert_eq!(i.device, Some(1));
    assert_eq!(i.requested_bytes, Some(64 * 256 * 128 * 128 * 4));
    // ggml's context pool message cut inside its first number by an 80-column terminal.
    let i = first("ggml-context-pool-cut-at-80-columns.log");
    assert_eq!(i.kind, "device-oom");
    assert_eq!(i.cause.id(), "batch-misconfiguration");
    assert_eq!(i.requested_bytes, Some(20_979_552));
}

/// A fix that names the knob's current value before its target ("Lower
/// --gpu-memory-utilization from 0.98 to 0.90") is kept, whatever the current value's
/// expression is called in the rule, and its target lies on the side its direction says.
#[test]
fn a_fix_from_the_current_value_to_a_lower_one_is_kept() {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let rules = RuleSet::builtin().unwrap();
    let input = "rules/vllm-kv-pool-overshoot/fires-v0-draft-model-at-099.log".to_string();
    let (d, _) = diagnose_inputs(
        std::slice::from_ref(&input),
        &rules,
        &DiagnoseOptions::default(),
        None,
    );
    let i = &d.incidents[0];
    let fix = i
        .fixes
        .iter()
        .find(|f| f.knob.as_deref() == Some("vllm:gpu_memory_utilization"))
        .unwrap_or_else(|| panic!("{:?}", i.fixes.iter().map(|f| &f.title).collect::<Vec<_>>()));
    assert_eq!(fix.direction, Some(Direction::Down));
    assert_eq!(fix.action, "--gpu-memory-utilization 0.90");
    assert!(fix.title.contains("from 0.98 to 0.90"), "{}", fix.title);
}

/// A bar redrawn in place is read as its updates: the steps it reached (not its first
/// update's `0`), and its memory readings one by one. The same bar with memory flat is not a
/// leak, and not a failure on the first step either.
#[test]
fn a_bar_redrawn_in_place_is_read_as_its_updates() {
    for file in [
        "tqdm-bar-redrawn-memory-creeps.log",
        "tqdm-bar-redrawn-memory-flat.log",
    ] {
        let i = first(file);
        assert!(
            !i.evidence.iter().any(|e| e.text.contains("first step")),
            "{file}: {:?}",
            i.evidence
        );
        assert!(
            i.evidence.iter().any(|e| e.text.contains("609 steps")),
            "{file}: {:?}",
            i.evidence
        );
    }
    let i = first("tqdm-bar-redrawn-memory-flat.log");
    assert_eq!(i.cause.id(), "batch-misconfiguration", "{}", i.summary);
    assert!(
        i.evidence
            .iter()
            .any(|e| e.text.contains("stayed flat") && e.text.contains("153 readings")),
        "{:?}",
        i.evidence
    );
}

/// A log whose every line starts with a stream's name (stern's pod, pdsh's `host: ` under
/// DeepSpeed's multi-node launcher) reads as the log without it: the same failure, cause,
/// line and determination for every paste long enough to learn the name from (8 lines),
/// and a warning that says what was dropped. The name broke every reading that spans lines
/// (a message wrapped over three lines had it inside once joined).
#[test]
fn a_stream_name_on_every_line_reads_as_the_log_without_it() {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let dir = common::tmp_dir("pastes", "stream-names");
    let mut checked = 0;
    for entry in std::fs::read_dir("fixtures/pastes").unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        if text.lines().filter(|l| !l.trim().is_empty()).count() < 8 {
            continue;
        }
        let plain = common::diagnose_files(&[path.to_str().unwrap()]);
        for prefix in ["trainer-7d9f8 ", "worker-1: "] {
            let prefixed: String = text.lines().map(|l| format!("{prefix}{l}\n")).collect();
            let file = dir.join(path.file_name().unwrap());
            std::fs::write(&file, prefixed).unwrap();
            let read = common::diagnose_files(&[file.to_str().unwrap()]);
            let name = format!("{} with {prefix:?}", path.display());
            assert_eq!(read.incidents.len(), plain.incidents.len(), "{name}");
            for (a, b) in plain.incidents.iter().zip(&read.incidents) {
                assert_eq!(
                    (a.kind.as_str(), a.cause.id(), a.determined, a.location.line),
                    (b.kind.as_str(), b.cause.id(), b.determined, b.location.line),
                    "{name}"
                );
            }
            let warned = read.inputs[0]
                .warnings
                .iter()
                .any(|w| w.contains(prefix.trim_end()) && w.contains("read without it"));
            assert!(warned, "{name}: {:?}", read.inputs[0].warnings);
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} pastes long enough");
}
