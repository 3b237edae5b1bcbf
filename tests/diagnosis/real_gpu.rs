//! Real OOMs from a real GPU: `scripts/real_incidents/run.sh` ran on an NVIDIA H200 with
//! PyTorch 2.11 and transformers 5.17 (2026-11-26) and kept each scenario's console log, the
//! allocator snapshots dumped in the OOM handlers and an `nvidia-smi` series
//! (`fixtures/real/`, see its README). Each scenario staged one cause; the diagnosis must
//! name it from what a user would have.

use oomdoctor::diagnosis::report::IncidentReport;

fn first(name: &str) -> IncidentReport {
    crate::common::first_incident(&format!("fixtures/real/{name}"))
}

fn fix_titles(i: &IncidentReport) -> Vec<&str> {
    i.fixes.iter().map(|f| f.title.as_str()).collect()
}

/// (file, cause, phase): each decided, none merely leading.
const DECIDED: &[(&str, &str, &str)] = &[
    ("leak.log", "memory-leak", "backward"),
    ("leak_oom.pickle", "memory-leak", "steady-state"),
    ("fragmentation.log", "fragmentation", "unknown"),
    ("fragmentation_oom.pickle", "fragmentation", "unknown"),
    // Built straight on the device: the innermost frames are `nn.Linear.__init__`.
    ("model_too_large.log", "model-too-large", "model-load"),
    ("contention.log", "memory-contention", "backward"),
    ("two_ranks_one_gpu.log", "memory-contention", "model-load"),
    // The Trainer's tqdm bar (`\r  0%| 0/20`) glued to the traceback: inside step one.
    ("trainer_batch.log", "batch-misconfiguration", "first-step"),
    // AdamW's states allocated at the first step, on weights that take 40% of the card.
    ("optimizer_states.log", "model-too-large", "optimizer-step"),
    // `torch.cuda.graph`'s "The CUDA Graph is empty" warning above a model-only traceback.
    (
        "graph_capture.log",
        "batch-misconfiguration",
        "cuda-graph-capture",
    ),
    // `set_per_process_memory_fraction(0.25)`: "34.95 GiB allowed" with 104.53 GiB free.
    ("capped.log", "memory-contention", "model-load"),
    // Lightning: its rich bar's `0/10 0:00:01 •`, and `training_step` inside the optimizer's
    // closure (the step, not the update).
    (
        "lightning_batch.log",
        "batch-misconfiguration",
        "first-step",
    ),
    // Round 7. A static KV cache for 32 x 65,664 positions, allocated in the prefill.
    ("kv_static.log", "kv-cache-overflow", "generation"),
    // `torch.compile`: AOT autograd's compiled forward runs inside
    // `torch/autograd/function.py`'s `apply`, which is not the backward pass.
    ("compile_batch.log", "batch-misconfiguration", "first-step"),
    // A 3 GiB cgroup: bash's "Killed" line right after the shard bar.
    ("host_oom_load.log", "host-oom", "model-load"),
    // A DataLoader worker taken by the OOM killer after three steps.
    ("host_oom_dataloader.log", "host-oom", "steady-state"),
    // The kernel's side of the same kill (dmesg, the memcg report's last lines).
    ("host_oom_dmesg.txt", "host-oom", "unknown"),
    // Round 8. Eager attention at 32,768 tokens: the softmax's 128 GiB score matrix.
    ("eager_attention.log", "batch-misconfiguration", "unknown"),
    // LoRA in the Trainer at 32 x 4096 tokens; the request fit in the cache, the step not.
    (
        "peft_lora_batch.log",
        "batch-misconfiguration",
        "first-step",
    ),
    // The Trainer's evaluation kept every batch's logits: the concatenation's own copies
    // left 24.54 GiB cached against a 61.35 GiB request, which is not fragmentation.
    ("trainer_eval_accumulate.log", "memory-leak", "evaluation"),
    // Round 10. Batches of random length with the longest measured to fit a fresh allocator:
    // step 11 found 25.74 GiB cached in pieces against a 5.31 GiB request.
    ("variable_length.log", "fragmentation", "steady-state"),
];

#[test]
fn each_staged_cause_is_named_and_decided() {
    for (file, cause, phase) in DECIDED {
        let i = first(file);
        assert_eq!(i.cause.id(), *cause, "{file}: {}", i.summary);
        assert!(i.determined, "{file}: undetermined at {:.2}", i.confidence);
        assert_eq!(i.phase, *phase, "{file}");
        assert!(!i.fixes.is_empty(), "{file}: no fix");
    }
}

/// The snapshot's step annotations (`Optimizer.step#`) count the steps that fit before the
/// leak filled the card: timing evidence even without the log.
#[test]
fn a_snapshot_alone_says_how_many_steps_ran() {
    let i = first("leak_oom.pickle");
    assert!(
        i.facts
            .num("phase.steps_completed")
            .is_some_and(|n| n >= 50.0),
        "{:?}",
        i.facts.num("phase.steps_completed")
    );
    // The log, the series and the snapshot together say the same.
    let d = crate::common::diagnose_files(&[
        "fixtures/real/leak.log",
        "fixtures/real/leak_smi.csv",
        "fixtures/real/leak_oom.pickle",
    ]);
    assert_eq!(d.incidents.len(), 1);
    assert_eq!(d.incidents[0].cause.id(), "memory-leak");
}

/// Half the card stranded in 96 MiB holes: the snapshot shows the holes, and the loop that
/// filled the card before the holes were made is not a leak (live memory had fallen to half
/// its peak by the failure).
#[test]
fn stranded_holes_are_not_read_as_a_leak() {
    let i = first("fragmentation_oom.pickle");
    // The fill loop repeats one call site 69 times: read as steps, it looks like growth.
    assert_eq!(i.facts.num("snapshot.leak_steps"), Some(69.0));
    if let Some(leak) = i
        .alternatives
        .iter()
        .find(|a| a.cause.id() == "memory-leak")
    {
        assert!(leak.confidence < 0.1, "leak at {:.2}", leak.confidence);
        assert!(
            leak.evidence
                .iter()
                .any(|e| e.weight < 0.0 && e.text.contains("well below")),
            "{:?}",
            leak.evidence.iter().map(|e| &e.text).collect::<Vec<_>>()
        );
    }
}

/// A 100.8M-parameter model cannot fill 139.8 GiB: the model is not the contender, the batch
/// leads (the log stops before any step, so the leak is not ruled out by timing).
#[test]
fn a_small_model_is_not_blamed_for_a_full_card() {
    let i = first("batch_too_big.log");
    assert_eq!(i.cause.id(), "batch-misconfiguration", "{}", i.summary);
    assert_eq!(i.facts.num("model.params"), Some(100_800_000.0));
    assert!(
        i.alternatives
            .iter()
            .all(|a| a.cause.id() != "model-too-large" || a.confidence < 0.1),
        "{:?}",
        i.alternatives
    );
}

/// The process that held the card is the job's other rank (torchrun named its pid): the
/// fix is the rank's device, not killing pid 554.
#[test]
fn a_sibling_rank_on_the_same_gpu_is_not_killed() {
    let i = first("two_ranks_one_gpu.log");
    assert_eq!(i.facts.bool("oom.other_process_is_own_worker"), Some(true));
    let titles = fix_titles(&i);
    assert_eq!(titles[0], "Give each rank its own GPU", "{titles:?}");
    assert!(
        !i.fixes.iter().any(|f| f.action.starts_with("kill ")),
        "{titles:?}"
    );
    // A neighbour that is a separate program is still the one to stop.
    let i = first("contention.log");
    assert_eq!(i.facts.bool("oom.other_process_is_own_worker"), None);
    assert!(i.fixes.iter().any(|f| f.action.starts_with("kill 629")));
}

/// Batched `generate()` whose prefill ran out with 28.33 GiB cached in pieces against a
/// 4.03 GiB request: by the numbers the memory was there but not in one piece, and the
/// verdict follows them; expandable segments is the first fix.
#[test]
fn generation_with_memory_in_pieces_follows_the_numbers() {
    let i = first("generate_kv.log");
    assert_eq!(i.phase, "generation");
    assert_eq!(i.cause.id(), "fragmentation", "{}", i.summary);
    assert!(
        fix_titles(&i)[0].contains("grow segments"),
        "{:?}",
        fix_titles(&i)
    );
}

/// Expandable segments were already on (the script printed its PYTORCH_CUDA_ALLOC_CONF): no
/// fix turns them on, and the batch fix names the run's own batch and length.
#[test]
fn a_setting_already_applied_is_not_advised() {
    let i = first("expandable_batch.log");
    assert_eq!(i.facts.bool("torch.expandable_segments"), Some(true));
    assert_eq!(i.cause.id(), "batch-misconfiguration", "{}", i.summary);
    assert!(
        !i.fixes
            .iter()
            .any(|f| f.action.contains("expandable_segments:True")),
        "{:?}",
        fix_titles(&i)
    );
    assert_eq!(i.fixes[0].action, "set batch_size to 325");
    // The graph capture's first fix is about the graphs, and the cap's raises the cap.
    assert_eq!(first("graph_capture.log").rule, "torch-cuda-graph-capture");
    let i = first("capped.log");
    assert!(
        i.fixes[0].title.contains("memory fraction"),
        "{:?}",
        fix_titles(&i)
    );
}

/// Lightning said "Using bfloat16 Automatic Mixed Precision (AMP)": mixed precision is not a
/// fix to offer.
#[test]
fn lightnings_precision_banner_is_read() {
    let i = first("lightning_batch.log");
    assert_eq!(i.facts.str("train.mixed_precision"), Some("bf16"));
    assert_eq!(i.facts.num("model.params"), Some(124_000_000.0));
    assert!(
        !i.fixes
            .iter()
            .any(|f| f.knob.as_deref() == Some("mixed_precision")),
        "{:?}",
        fix_titles(&i)
    );
}

/// JAX 0.11's BFC allocator retries a failed 4 GiB allocation every ten seconds and the run
/// hangs (the log ends without RESOURCE_EXHAUSTED): one incident, and nothing in it separates
/// a model from a batch, so it says so.
#[test]
fn jax_retrying_allocations_are_one_undetermined_incident() {
    let d = crate::common::diagnose_files(&["fixtures/real/jax_bfc_retrying.log"]);
    assert_eq!(d.incidents.len(), 1);
    let i = &d.incidents[0];
    assert_eq!(i.kind, "device-oom");
    assert_eq!(i.requested_bytes, Some(4_294_967_296));
    assert!(!i.determined);
    assert!(i.settle.is_some());
}

/// cuBLAS could not create its handle on a card PyTorch had filled to the last 9 MiB: the
/// library's allocation outside the caching allocator is read, contention (memory outside
/// the allocator ran out) leads, and since the log cannot say who held the card, it is
/// undetermined with nvidia-smi's process list as the settling input.
#[test]
fn a_cublas_handle_failure_is_read_as_memory_outside_the_allocator() {
    let i = first("cublas_full.log");
    assert_eq!(i.kind, "device-oom");
    assert_eq!(i.facts.str("oom.wording"), Some("cuda-library"));
    assert_eq!(i.cause.id(), "memory-contention", "{}", i.summary);
    assert!(!i.determined);
    assert!(
        i.settle
            .as_deref()
            .is_some_and(|s| s.contains("nvidia-smi"))
    );
}

/// The kernel's report names the killed worker and its size, but the tail kept no
/// `memory: usage ..., limit ...` line: the limit in force is unknown (it was 5 GiB, the
/// worker held 2.58 GiB), so no limit value is proposed, which could point it down.
#[test]
fn a_killed_workers_size_is_not_a_limit_to_set() {
    let i = first("host_oom_dmesg.txt");
    assert_eq!(i.facts.str("host.victim_name"), Some("pt_data_worker"));
    assert!(i.facts.num("host.limit_fit_bytes").is_none());
    let titles = fix_titles(&i);
    assert!(
        titles
            .iter()
            .all(|t| !t.contains("GiB") && !t.contains("Gi ")),
        "{titles:?}"
    );
    assert_eq!(titles[0], "Raise the container / cgroup memory limit");
}

/// JAX 0.11 autotuning a jitted step whose two 64 GiB intermediates exceed XLA's pool: the
/// three RESOURCE_EXHAUSTED reports (autotuner, then the Python error) are one incident, and
/// nothing in the log separates a batch from a model, so it stays undetermined.
#[test]
fn jax_autotuner_exhaustion_is_one_undetermined_incident() {
    let d = crate::common::diagnose_files(&["fixtures/real/jax_oversize.log"]);
    assert_eq!(d.incidents.len(), 1);
    let i = &d.incidents[0];
    assert_eq!(i.engine, "jax");
    assert_eq!(i.kind, "device-oom");
    assert!(
        i.requested_bytes
            .is_some_and(|b| (b as f64 - 64.02 * (1u64 << 30) as f64).abs() < 1e7),
        "{:?}",
        i.requested_bytes
    );
    assert!(!i.determined);
    assert!(i.settle.is_some());
}

/// Snapshots from PyTorch 2.11 with no OOM: a CUDA graph's private pool read as its own
/// pool, and a 300,000-entry recording (25 MB, gzip) read whole.
#[test]
fn real_snapshots_without_an_oom_are_summarised() {
    let d = crate::common::diagnose_files(&["fixtures/real/graph_pool.pickle"]);
    assert!(d.incidents.is_empty());
    let s = &d.snapshots[0];
    let private: u64 = s
        .segments
        .iter()
        .filter(|g| g.pool.as_deref() == Some("private pool (1, 0)"))
        .map(|g| g.size)
        .sum();
    assert_eq!(private, 54 << 20);
    let d = crate::common::diagnose_files(&["fixtures/real/big_snapshot.pickle.gz"]);
    assert!(d.incidents.is_empty());
    let s = &d.snapshots[0];
    assert!(s.replayed, "the trace was not replayed");
    assert!(
        s.peak_live_bytes > 3 << 30 && s.peak_live_bytes < 4 << 30,
        "{}",
        s.peak_live_bytes
    );
}

/// What the failing call was picks the fix: the attention score matrix is best avoided
/// (memory-efficient attention), predictions kept by the evaluation loop are moved off the
/// GPU, and a request that fit in the cache while the step did not still asks for a smaller
/// batch; LoRA, already on, is not offered.
#[test]
fn the_failing_call_picks_the_first_fix() {
    let i = first("eager_attention.log");
    assert_eq!(i.facts.bool("oom.attention_scores"), Some(true));
    assert_eq!(
        fix_titles(&i)[0],
        "Use memory-efficient attention instead of eager attention"
    );
    let i = first("trainer_eval_accumulate.log");
    assert!(
        fix_titles(&i)[0].contains("every few evaluation steps"),
        "{:?}",
        fix_titles(&i)
    );
    let i = first("peft_lora_batch.log");
    assert_eq!(i.facts.bool("train.lora"), Some(true));
    let titles = fix_titles(&i);
    assert_eq!(titles[0], "Lower the batch size", "{titles:?}");
    assert!(titles.iter().all(|t| !t.contains("LoRA")), "{titles:?}");
}

/// Round 9, outside PyTorch's allocator. CuPy's pool and Numba's `cuMemAlloc` ran out on
/// arrays of 40 GiB: CuPy says what its pool had handed out, neither says the card's size or
/// who else held it, so each is one undetermined incident. A device-side assert (an index
/// past the vocabulary) is no memory failure at all. A one-line CuPy error is not read as an
/// `nvidia-smi` row because its thousands separators are commas.
#[test]
fn other_runtimes_and_a_device_assert() {
    let i = first("cupy_oom.log");
    assert_eq!(i.engine, "cupy");
    assert_eq!(i.facts.num("oom.allocated_bytes"), Some(128_849_018_880.0));
    assert_eq!(i.requested_bytes, Some(42_949_672_960));
    assert!(!i.determined);
    let d = crate::common::diagnose_files(&["fixtures/real/numba_oom.log"]);
    assert_eq!(d.incidents.len(), 1);
    assert_eq!(d.incidents[0].engine, "numba");
    assert_eq!(d.incidents[0].kind, "device-oom");
    let d = crate::common::diagnose_files(&["fixtures/real/device_assert.log"]);
    assert!(d.incidents.is_empty());
    let dir = crate::common::tmp_dir("real_gpu", "cupy_one_line");
    let one_line = dir.join("cupy.log");
    let last = std::fs::read_to_string("fixtures/real/cupy_oom.log").unwrap();
    std::fs::write(&one_line, last.lines().last().unwrap()).unwrap();
    let d = crate::common::diagnose_files(&[one_line.to_str().unwrap()]);
    assert_eq!(d.incidents.len(), 1, "{:?}", d.inputs);
}

/// Round 11: the leak stopped by hand after forty steps, before any OOM. The log's readings
/// and the snapshot dumped at the stop each make a growth incident on their own, and
/// together one, whose first fix names the call site the snapshot saw growing.
#[test]
fn growth_before_any_failure_is_reported() {
    for inputs in [
        &["fixtures/real/leak_no_oom.log"][..],
        &["fixtures/real/leak_no_oom.pickle"][..],
        &[
            "fixtures/real/leak_no_oom.log",
            "fixtures/real/leak_no_oom.pickle",
        ][..],
    ] {
        let d = crate::common::diagnose_files(inputs);
        assert_eq!(d.incidents.len(), 1, "{inputs:?}");
        let i = &d.incidents[0];
        assert_eq!(i.kind, "memory-growth", "{inputs:?}");
        assert_eq!(i.cause.id(), "memory-leak", "{inputs:?}");
        assert!(i.determined, "{inputs:?}");
    }
    let d = crate::common::diagnose_files(&[
        "fixtures/real/leak_no_oom.log",
        "fixtures/real/leak_no_oom.pickle",
    ]);
    let titles = fix_titles(&d.incidents[0]);
    assert!(titles[0].contains("leak_no_oom.py:15"), "{titles:?}");
    // Round 12: the machine's memory (`free -m` beside a loader that caches every shard)
    // from 2% to 45% of 126 GiB, no kill yet.
    let i = first("host_growth.log");
    assert_eq!(i.kind, "memory-growth");
    assert_eq!(i.cause.id(), "memory-leak");
    assert_eq!(i.facts.num("host.memory_samples"), Some(10.0));
    // A run whose snapshot shows no growth is still no incident.
    let d = crate::common::diagnose_files(&["fixtures/real/big_snapshot.pickle.gz"]);
    assert!(d.incidents.is_empty());
}
