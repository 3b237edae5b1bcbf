//! Engine x cause coverage: for each engine's OOM and memory-accounting messages (the formats
//! in the engine-messages spec), a small crash log per cause the messages point to, in the
//! shapes users paste, plus look-alikes that are not OOMs. Written by us
//! (`fixtures/coverage/`). Each row asserts only what its log's evidence establishes: the
//! failure kind and the cause, or that the cause is undetermined between named contenders,
//! or that there is no incident at all.

use oomdoctor::diagnosis::report::{Diagnosis, IncidentReport};
use oomdoctor::diagnosis::rules::Direction;

fn diagnose(name: &str) -> Diagnosis {
    crate::common::diagnose_files(&[&format!("fixtures/coverage/{name}")])
}

fn first(name: &str) -> IncidentReport {
    crate::common::first_incident(&format!("fixtures/coverage/{name}"))
}

/// What a log establishes about its first incident.
enum Verdict {
    /// This cause, determined.
    Cause(&'static str),
    /// Undetermined; these causes are among the leader and its contenders.
    Undetermined(&'static [&'static str]),
}

use Verdict::{Cause, Undetermined};

/// (file, failure kind, verdict) for logs that must make an incident.
const INCIDENTS: &[(&str, &str, Verdict)] = &[
    // PyTorch: CUDA, ROCm, XPU, MPS, CPU, NCCL.
    ("pt-cuda-frag.log", "device-oom", Cause("fragmentation")),
    (
        "pt-cuda-otherproc.log",
        "device-oom",
        Cause("memory-contention"),
    ),
    (
        "pt-cuda-allowed.log",
        "device-oom",
        Cause("memory-contention"),
    ),
    (
        "pt-cuda-legacy-load.log",
        "device-oom",
        Cause("model-too-large"),
    ),
    ("pt-cuda-legacy-cached.log", "device-oom", Undetermined(&[])),
    ("pt-hip-frag.log", "device-oom", Cause("fragmentation")),
    // A notebook paste: IPython's header names the exception, the frames follow it, and the
    // message at the bottom was cut. Nothing sizes it; the frames below say backward.
    (
        "pt-ipython-header-cut-message.log",
        "device-oom",
        Undetermined(&["batch-misconfiguration", "model-too-large"]),
    ),
    ("pt-xpu-load.log", "device-oom", Cause("model-too-large")),
    ("pt-xpu-old-nofree.log", "device-oom", Undetermined(&[])),
    (
        "pt-mps-watermark.log",
        "device-oom",
        Undetermined(&["memory-contention"]),
    ),
    // A capture failing in torch/cuda/graphs.py with 14 GiB already in graph pools.
    (
        "pt-graph-private-pools.log",
        "device-oom",
        Cause("batch-misconfiguration"),
    ),
    // Full fine-tuning of a model named 2.7B on a 24 GB card: its states at 16 bytes a
    // parameter are 40 GiB, whatever the batch; the LoRA run of the same model is not.
    (
        "pt-full-ft-states.log",
        "device-oom",
        Cause("model-too-large"),
    ),
    (
        "pt-lora-states-near-miss.log",
        "device-oom",
        Undetermined(&["model-too-large", "batch-misconfiguration"]),
    ),
    // Full fine-tuning, one sample a step with gradient checkpointing on (its activations
    // as small as training makes them): the model's states lead; the same run at batch 8
    // without checkpointing is the batch.
    (
        "pt-full-ft-one-sample-ckpt.log",
        "device-oom",
        Undetermined(&["model-too-large", "batch-misconfiguration"]),
    ),
    (
        "pt-full-ft-batch8-near-miss.log",
        "device-oom",
        Cause("batch-misconfiguration"),
    ),
    // A parallel layer's constructor creating its weight: the model was being built.
    (
        "pt-parallel-layer-init.log",
        "device-oom",
        Cause("model-too-large"),
    ),
    // A paste that starts inside the 2.1+ message: its tail alone is the OOM.
    (
        "pt-oom-tail-only.log",
        "device-oom",
        Undetermined(&["batch-misconfiguration"]),
    ),
    // DeepSpeed's launcher reporting SIGKILL as `return code = -9`, with and without the
    // CPU Adam that ZeRO-Offload builds.
    ("ds-offload-return-code.log", "host-oom", Cause("host-oom")),
    ("ds-killed-no-offload.log", "host-oom", Cause("host-oom")),
    // The ZeRO-2 13B fixture with three steps run after DeepSpeed's last checkpoint: the
    // estimator and the 12 GiB request still say the states, not the checkpoint.
    (
        "ds-checkpoint-then-steps.log",
        "device-oom",
        Cause("model-too-large"),
    ),
    // c10's `CUDA error: out of memory` while the model is moved to the device: not the
    // allocator placing weights (pt-cuda-legacy-load.log is that), the runtime starting.
    (
        "pt-runtime-oom-moving-model.log",
        "device-oom",
        Cause("memory-contention"),
    ),
    ("pt-cpu-alloc.log", "host-oom", Cause("host-oom")),
    ("pt-cpu-alloc-windows.log", "host-oom", Cause("host-oom")),
    (
        "pt-nccl-oom.log",
        "device-oom",
        Undetermined(&["memory-contention"]),
    ),
    // vLLM.
    // Serving, its OOM message cut after `Tried to allocate`.
    (
        "vllm-serving-cut-message.log",
        "device-oom",
        Undetermined(&["batch-misconfiguration"]),
    ),
    (
        "vllm-b1-budget-014.log",
        "engine-budget",
        Cause("memory-contention"),
    ),
    (
        "vllm-b1-budget-010.log",
        "engine-budget",
        Cause("memory-contention"),
    ),
    (
        "vllm-k3-kvctx-v1.log",
        "kv-capacity",
        Cause("kv-cache-overflow"),
    ),
    (
        "vllm-k3-kvctx-033.log",
        "kv-capacity",
        Cause("kv-cache-overflow"),
    ),
    ("vllm-k2-v0.log", "kv-capacity", Cause("kv-cache-overflow")),
    (
        "vllm-k1-noblocks.log",
        "no-kv-memory",
        Cause("model-too-large"),
    ),
    (
        "vllm-w4-failed-load.log",
        "device-oom",
        Cause("model-too-large"),
    ),
    (
        "vllm-graph-oom.log",
        "device-oom",
        Cause("batch-misconfiguration"),
    ),
    (
        "vllm-r6-sampler.log",
        "device-oom",
        Cause("batch-misconfiguration"),
    ),
    (
        "vllm-preempt-v0.log",
        "kv-exhausted",
        Cause("kv-cache-overflow"),
    ),
    ("vllm-worker-killed.log", "host-oom", Cause("host-oom")),
    // llama.cpp.
    ("llama-weights.log", "device-oom", Cause("model-too-large")),
    ("llama-kv.log", "device-oom", Cause("kv-cache-overflow")),
    // llama-server failing mid-request: on a request no larger than one it had finished
    // (the same work fit before), and on one more than twice as large.
    (
        "llama-serve-same-size-fails.log",
        "device-oom",
        Undetermined(&["memory-leak", "batch-misconfiguration"]),
    ),
    (
        "llama-serve-bigger-request-fails.log",
        "device-oom",
        Cause("batch-misconfiguration"),
    ),
    (
        "llama-compute.log",
        "device-oom",
        Cause("batch-misconfiguration"),
    ),
    ("llama-cpu-buffer.log", "host-oom", Cause("host-oom")),
    ("llama-vulkan.log", "device-oom", Cause("model-too-large")),
    ("llama-cuda-error-2023.log", "device-oom", Undetermined(&[])),
    (
        "llama-decode-noslot.log",
        "kv-exhausted",
        Cause("kv-cache-overflow"),
    ),
    ("llama-metal.log", "device-oom", Cause("model-too-large")),
    (
        "llama-breakdown-otherproc.log",
        "device-oom",
        Cause("memory-contention"),
    ),
    // Ollama.
    ("ollama-runner-killed.log", "host-oom", Cause("host-oom")),
    (
        "ollama-offload-kv.log",
        "device-oom",
        Cause("kv-cache-overflow"),
    ),
    // The 16.0 GiB "kv cache" layout line names the runner's failed 16384 MiB allocation.
    (
        "ollama-new-engine-kv.log",
        "device-oom",
        Cause("kv-cache-overflow"),
    ),
    // TGI.
    (
        "tgi-prefill.log",
        "device-oom",
        Cause("batch-misconfiguration"),
    ),
    // A 1,024-token prefill (no smaller than the input length allows) still did not fit:
    // the weights left almost nothing, which the batch and the model both explain.
    (
        "tgi-small-prefill-at-floor.log",
        "device-oom",
        Undetermined(&["batch-misconfiguration", "model-too-large"]),
    ),
    // The first denoising step of a 4 GiB card: a step's activations, with the live tensors
    // filling all PyTorch could reach (the model-too-large contender hears it).
    (
        "pt-4g-card-small-request.log",
        "device-oom",
        Cause("batch-misconfiguration"),
    ),
    // The same card with another process holding half of it.
    (
        "pt-4g-card-shared-near-miss.log",
        "device-oom",
        Undetermined(&["memory-contention", "batch-misconfiguration"]),
    ),
    // A paste that kept only the failing source line: it allocates a KV pool's buffers.
    (
        "pt-lone-line-kv-pool.log",
        "device-oom",
        Cause("kv-cache-overflow"),
    ),
    // The same paste allocating another buffer says nothing of the phase.
    (
        "pt-lone-line-other-buffer-near-miss.log",
        "device-oom",
        Undetermined(&["batch-misconfiguration", "model-too-large"]),
    ),
    // A second vLLM instance whose command was pasted over several lines: the model named
    // on a continuation line is too small to explain the memory in use before profiling.
    (
        "vllm-second-instance-continued-command.log",
        "no-kv-memory",
        Cause("memory-contention"),
    ),
    // A 70B model could explain it: the model and a neighbour both stay in play.
    (
        "vllm-large-model-initial-usage-near-miss.log",
        "no-kv-memory",
        Undetermined(&["model-too-large", "memory-contention"]),
    ),
    // C++ frameworks' own words for a failed cudaMalloc (Caffe here): no sizes, so the
    // batch and the model both stay in play, with fixes for a framework without knobs we know.
    (
        "caffe-check-failed-out-of-memory.log",
        "device-oom",
        Undetermined(&["batch-misconfiguration", "model-too-large"]),
    ),
    // The launcher gave up on the shard: it was loading the model (TGI warms up only once
    // every shard is ready).
    (
        "tgi-shard-failed-to-start.log",
        "device-oom",
        Cause("model-too-large"),
    ),
    // A full fine-tune whose next request is the size of everything allocated: a second
    // copy of the model's state.
    (
        "pt-request-mirrors-allocated.log",
        "device-oom",
        Cause("model-too-large"),
    ),
    // The same run asking for a tensor of another size: the batch stays in play.
    (
        "pt-request-unlike-allocated-near-miss.log",
        "device-oom",
        Undetermined(&["model-too-large", "batch-misconfiguration"]),
    ),
    // Ollama's runner died of a bare CUDA error (the paste cut ggml's `current device:`
    // line) after a partial offload: the runner's, not PyTorch's, and the layers are the fix.
    (
        "ollama-partial-offload-cublas.log",
        "device-oom",
        Cause("model-too-large"),
    ),
    // Every layer offloaded with room to spare by Ollama's own estimate: something else
    // may have taken the memory.
    (
        "ollama-full-offload-cublas-near-miss.log",
        "device-oom",
        Undetermined(&["model-too-large", "memory-contention"]),
    ),
    // TensorFlow 1.x names the graph node under the failed op: an Adam slot's initializer
    // is the model being set up.
    (
        "tf1-adam-slot-initializer.log",
        "device-oom",
        // Only the phase speaks (variables initialised), and a load fails first on a
        // device another process holds too: the model leads, undetermined.
        Undetermined(&["model-too-large", "memory-contention"]),
    ),
    // A node under `gradients/` is the backward pass: the batch stays in play.
    (
        "tf1-gradients-node-near-miss.log",
        "device-oom",
        Undetermined(&["batch-misconfiguration", "model-too-large"]),
    ),
    (
        "tgi-max-total.log",
        "kv-capacity",
        Cause("kv-cache-overflow"),
    ),
    ("tgi-shard-signal9.log", "host-oom", Cause("host-oom")),
    (
        "tgi-not-enough-vram.log",
        "device-oom",
        Cause("model-too-large"),
    ),
    // SGLang.
    (
        "sglang-s2-notenough.log",
        "no-kv-memory",
        Cause("model-too-large"),
    ),
    (
        "sglang-prefill-oom.log",
        "kv-exhausted",
        Undetermined(&["batch-misconfiguration", "kv-cache-overflow"]),
    ),
    (
        "sglang-retract.log",
        "kv-exhausted",
        Cause("kv-cache-overflow"),
    ),
    // TensorRT-LLM.
    (
        "trt-maxseq-reduced.log",
        "kv-capacity",
        Cause("kv-cache-overflow"),
    ),
    // JAX / XLA / TensorFlow.
    (
        "jax-resource-exhausted.log",
        "device-oom",
        Undetermined(&[]),
    ),
    ("tpu-hbm.log", "device-oom", Undetermined(&[])),
    // TPU: 8.40G free, 6.95G of it placeable, a 7.88G request on the first step: the free
    // memory is in pieces, and the step may also be too big.
    (
        "jax-tpu-reserve-pieces.log",
        "device-oom",
        Undetermined(&["fragmentation", "batch-misconfiguration"]),
    ),
    // The same with all free memory placeable: nothing in pieces.
    ("jax-tpu-reserve-full.log", "device-oom", Undetermined(&[])),
    // DeepSpeed: 14.2 GB after ZeRO set-up, 35.4 GiB at the OOM in `model_engine.backward`
    // (the only frame), micro-batch 16: the states fit, the step did not. The stage is not in
    // the log.
    (
        "ds-see-memory.log",
        "device-oom",
        Cause("batch-misconfiguration"),
    ),
    // DeepSpeed / Accelerate: the batch search reached zero, so not the batch; the weights
    // lead, another process is not ruled out.
    (
        "accel-no-batch.log",
        "device-oom",
        Undetermined(&["model-too-large", "memory-contention"]),
    ),
    // Kernel, systemd, Kubernetes, Slurm, Ray.
    ("kernel-global.log", "host-oom", Cause("host-oom")),
    ("kernel-memcg.log", "host-oom", Cause("host-oom")),
    ("kernel-old-sacrifice.log", "host-oom", Cause("host-oom")),
    ("systemd-oomd-marked.log", "host-oom", Cause("host-oom")),
    ("k8s-oomkilled.log", "host-oom", Cause("host-oom")),
    ("k8s-evicted.log", "host-oom", Cause("host-oom")),
    ("slurm-oom.log", "host-oom", Cause("host-oom")),
    ("ray-oom.log", "host-oom", Cause("host-oom")),
    // `docker ps -a`'s `Exited (137)` is the only sign of the kill (an anchor of its own).
    ("docker-ps-exited-137.log", "host-oom", Cause("host-oom")),
    // Stranded memory that matters on a large card: 6.31 GiB idle in the cache on 80 GiB
    // (under 8 % of the device, over 4 GiB), against 1.62 GiB in the near miss.
    (
        "vllm-graph-capture-stranded-80g.log",
        "device-oom",
        Cause("fragmentation"),
    ),
    (
        "vllm-graph-capture-little-stranded-80g.log",
        "device-oom",
        Cause("batch-misconfiguration"),
    ),
    // Killed for host memory hours into serving: grown since start-up or one large request,
    // which only memory over time tells apart; killed while loading, the host is too small.
    (
        "vllm-host-killed-while-serving.log",
        "host-oom",
        Undetermined(&["host-oom", "memory-leak"]),
    ),
    (
        "vllm-host-killed-while-loading.log",
        "host-oom",
        Cause("host-oom"),
    ),
    // Nothing sized the OOM, but the program said next that loading the pipeline failed:
    // the OOM was the load's.
    (
        "pt-oom-then-load-failed.log",
        "device-oom",
        Cause("model-too-large"),
    ),
    // Ollama's 2024 `unable to allocate backend buffer` names no buffer: the part of the
    // weights in RAM fails the same way as the part on the GPU, so both stay in play; a
    // named CPU buffer is the RAM.
    (
        "ollama-backend-buffer-unnamed.log",
        "device-oom",
        Undetermined(&["model-too-large", "host-oom"]),
    ),
    (
        "ollama-backend-cpu-buffer.log",
        "host-oom",
        Cause("host-oom"),
    ),
    // MLX on Apple silicon: its allocator's refusal while the weights are evaluated is the
    // model; one array past Metal's largest buffer is one operation's working memory, not
    // the KV cache although it failed generating; a refusal after some LoRA steps ran, with
    // no size of the machine's memory, leaves the batch and the model both in play.
    (
        "mlx-generate-load.log",
        "device-oom",
        Cause("model-too-large"),
    ),
    (
        "mlx-vlm-buffer-cap.log",
        "device-oom",
        Cause("batch-misconfiguration"),
    ),
    (
        "mlx-lora-metal-malloc.log",
        "device-oom",
        Undetermined(&["batch-misconfiguration", "model-too-large"]),
    ),
    // mlx_lm.server out of memory after serving requests: it keeps earlier prompts' KV
    // caches, so memory that grew with requests leads, and its prompt-cache bound is the fix.
    (
        "mlx-server-command-buffer.log",
        "device-oom",
        Undetermined(&["memory-leak", "batch-misconfiguration"]),
    ),
];

/// Look-alikes: an illegal access, warnings that mention memory, a request over the context
/// limit, a recovered allocation, a non-fatal allocator note, a survey that killed nothing, a
/// SIGKILL from a liveness probe, a per-buffer hardware limit.
const NOT_OOM: &[&str] = &[
    // A request past an exabyte after a collective's timeout: a corrupted size, not memory.
    "pt-notoom-exabyte-request.log",
    // IPython's header for another exception.
    "pt-notoom-ipython-other-exception.log",
    // `[model]` tags (not a colour code that lost its ESC) and another program's "Unable to
    // allocate" in an MLX run that finished.
    "mlx-notoom-tags-and-other-allocator.log",
    "pt-ipex-4gb-limit.log",
    "pt-notoom-illegal-access.log",
    "pt-notoom-warning.log",
    "vllm-notoom-400-context.log",
    // vLLM's "Error in memory profiling": a neighbour changed its memory during start-up; no
    // allocation failed.
    "vllm-p8-profiling-error.log",
    "llama-notoom-retry-pp.log",
    "ollama-notoom-truncating.log",
    "tf-notoom-freed-by-count.log",
    // SGLang's allocator self-check (an engine bug report), not memory running out.
    "sglang-leak.log",
    "systemd-notoom-survey.log",
    "k8s-exit137-noreason.log",
];

#[test]
fn every_engine_and_cause_gives_its_verdict() {
    let mut wrong = Vec::new();
    for (file, kind, verdict) in INCIDENTS {
        let i = first(file);
        let mut named = vec![i.cause.id().to_string()];
        named.extend(i.alternatives.iter().map(|a| a.cause.id().to_string()));
        let ok = i.kind == *kind
            && match verdict {
                Cause(c) => i.determined && i.cause.id() == *c && !i.fixes.is_empty(),
                Undetermined(cs) => {
                    !i.determined
                        && !i.alternatives.is_empty()
                        && cs.iter().all(|c| named.iter().any(|n| n == c))
                }
            };
        if !ok {
            wrong.push(format!(
                "{file}: {} {} determined={} {:.2} contenders={named:?}",
                i.kind, i.cause, i.determined, i.confidence
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Findings that read a number only some logs give fire on it and only on it: the near-miss
/// of each fixture pair differs in that number alone.
/// MLX's knobs follow the tool the command line ran: a LoRA run's batch, a server's prompt
/// cache, and for one array past Metal's buffer cap the input, whatever the tool.
#[test]
fn mlx_fixes_follow_the_tool_that_ran() {
    let action = |file: &str| first(file).fixes[0].action.clone();
    assert!(action("mlx-lora-metal-malloc.log").contains("--batch-size 1"));
    assert!(action("mlx-server-command-buffer.log").contains("--prompt-cache-bytes"));
    assert!(action("mlx-vlm-buffer-cap.log").starts_with("resize the image"));
    assert!(action("mlx-generate-load.log").contains("-q"));
}

/// IPython prints the frames below its header: read upwards from their end, they decide the
/// phase as the frames above an error do.
#[test]
fn frames_below_an_ipython_header_decide_the_phase() {
    assert_eq!(first("pt-ipython-header-cut-message.log").phase, "backward");
}

#[test]
fn size_and_placement_findings_need_their_numbers() {
    let says = |file: &str, prefix: &str| {
        first(file)
            .evidence
            .iter()
            .any(|e| e.text.starts_with(prefix))
    };
    let states = "training all 2.7B parameters with Adam";
    assert!(says("pt-full-ft-states.log", states));
    assert!(!says("pt-lora-states-near-miss.log", states));
    let pieces = "8.40 GiB was free, more than the 7.88 GiB request";
    assert!(says("jax-tpu-reserve-pieces.log", pieces));
    assert!(!says("jax-tpu-reserve-full.log", "6.95 GiB was free"));
    let one_sample = "each step trains on one sample with gradient checkpointing on";
    assert!(says("pt-full-ft-one-sample-ckpt.log", one_sample));
    assert!(!says("pt-full-ft-batch8-near-miss.log", one_sample));
    let lora = first("pt-full-ft-one-sample-ckpt.log");
    assert_eq!(lora.cause.id(), "model-too-large");
    assert!(lora.fixes[0].title.starts_with("Train LoRA adapters"));
    assert!(
        !lora
            .fixes
            .iter()
            .any(|f| f.title.starts_with("Recompute activations"))
    );
    // DeepSpeed's last memory checkpoint says setup was in progress only until a training
    // step completes after it.
    let setup = "the last memory checkpoint was";
    assert!(
        crate::common::first_incident(
            "rules/deepspeed-zero-states/fires-zero2-13b-full-finetune.log"
        )
        .evidence
        .iter()
        .any(|e| e.text.starts_with(setup))
    );
    assert!(!says("ds-checkpoint-then-steps.log", setup));
    // Full is measured against what PyTorch could reach when that is most of the device: a
    // small card's CUDA context keeps live tensors under 85% of it.
    let full = "a small 20.00 MiB request failed with the device already full of live tensors";
    let contender_hears = |file: &str| {
        first(file)
            .alternatives
            .iter()
            .any(|a| a.evidence.iter().any(|e| e.text.starts_with(full)))
    };
    assert!(contender_hears("pt-4g-card-small-request.log"));
    assert!(!contender_hears("pt-4g-card-shared-near-miss.log"));
    assert!(!says("pt-4g-card-shared-near-miss.log", full));
    let partial = first("ollama-partial-offload-cublas.log");
    assert_eq!(partial.engine, "ollama");
    assert!(
        partial.fixes[0]
            .title
            .starts_with("Offload 29 layers instead of 31")
    );
    let mirrors = "the 12.71 GiB request is the size of all 12.74 GiB already allocated";
    assert!(says("pt-request-mirrors-allocated.log", mirrors));
    assert!(!says(
        "pt-request-unlike-allocated-near-miss.log",
        "the 10.50 GiB request is the size"
    ));
    let any_weights = "even at 16 bits a parameter, the 7.0B-parameter model's weights";
    assert!(says(
        "vllm-second-instance-continued-command.log",
        any_weights
    ));
    assert!(
        !first("vllm-large-model-initial-usage-near-miss.log")
            .alternatives
            .iter()
            .flat_map(|a| &a.evidence)
            .chain(&first("vllm-large-model-initial-usage-near-miss.log").evidence)
            .any(|e| e.text.starts_with("even at 16 bits"))
    );
    let stranded =
        "free memory (402.75 MiB) plus memory PyTorch cached but had not handed out (6.31 GiB)";
    assert!(says("vllm-graph-capture-stranded-80g.log", stranded));
    assert!(!says(
        "vllm-graph-capture-little-stranded-80g.log",
        "free memory (402.75 MiB) plus memory PyTorch cached"
    ));
    // Loading was over while serving: its fix is offered only where the kill came earlier.
    let loading = |file: &str| {
        first(file)
            .fixes
            .iter()
            .any(|f| f.title.ends_with("host RAM while loading the model"))
    };
    assert!(says(
        "vllm-host-killed-while-serving.log",
        "the process was killed for host memory while serving requests, after it had loaded"
    ));
    assert!(!loading("vllm-host-killed-while-serving.log"));
    assert!(loading("vllm-host-killed-while-loading.log"));
    assert!(!says(
        "vllm-host-killed-while-loading.log",
        "the process was killed for host memory while serving"
    ));
    // The machine's memory read over the run: climbing, then level, in the two fixtures of
    // the rule that reads it.
    let host = |file: &str, prefix: &str| {
        let i = crate::common::first_incident(&format!("rules/host-memory-climbs/{file}"));
        crate::common::evidence_texts(&i)
            .iter()
            .any(|t| t.starts_with(prefix))
    };
    let climbed = "memory in use on the machine climbed over 5 readings, from 12% to 95%";
    assert!(host("fires-sglang-free-m-every-hour.log", climbed));
    let level = "memory in use on the machine stayed flat over 4 readings (20% to 20%)";
    assert!(host("near-miss-free-h-level-then-killed.log", level));
    assert!(!host(
        "near-miss-free-h-level-then-killed.log",
        "memory in use on the machine climbed"
    ));
    let served = "the request in progress (19655 prompt tokens) was no larger than one";
    assert!(says("llama-serve-same-size-fails.log", served));
    assert!(!says(
        "llama-serve-bigger-request-fails.log",
        "the request in progress"
    ));
}

/// Logs cut short keep the cause their remaining lines establish and a fix with a value: the
/// rule and fix picked depend on the one line that differs from the near miss.
#[test]
fn cut_and_bare_logs_keep_their_evidence() {
    let offload = first("ds-offload-return-code.log");
    assert_eq!(offload.rule, "deepspeed-offload-host-ram");
    assert!(offload.fixes[0].action.contains("nvme"));
    assert_eq!(first("ds-killed-no-offload.log").rule, "process-killed");
    let tail = first("pt-oom-tail-only.log");
    assert_eq!(tail.kind, "device-oom");
    assert!(
        tail.fixes
            .iter()
            .any(|f| f.action == "set batch_size to 24"),
        "{:?}",
        tail.fixes.iter().map(|f| &f.action).collect::<Vec<_>>()
    );
    let vllm = first("vllm-serving-cut-message.log");
    assert_eq!(vllm.phase, "serving");
    assert!(
        vllm.fixes
            .iter()
            .any(|f| f.action == "--gpu-memory-utilization 0.91"),
        "{:?}",
        vllm.fixes.iter().map(|f| &f.action).collect::<Vec<_>>()
    );
}

#[test]
fn look_alikes_make_no_incident() {
    for file in NOT_OOM {
        let d = diagnose(file);
        assert!(
            d.incidents.is_empty(),
            "{file}: {:?}",
            d.incidents
                .iter()
                .map(|i| (&i.kind, i.cause.id()))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn every_fixture_is_in_a_table() {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    for e in std::fs::read_dir("fixtures/coverage").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(
            INCIDENTS.iter().any(|(f, _, _)| *f == name) || NOT_OOM.contains(&name.as_str()),
            "{name} is in no table"
        );
    }
}

/// Advice that the log itself rules out: a batch Accelerate already searched down to zero is
/// not cut again.
#[test]
fn no_evidence_is_invented() {
    // A ZeRO stage the log does not state is not "stage 0".
    let i = first("ds-see-memory.log");
    assert_eq!(i.cause.id(), "batch-misconfiguration", "{}", i.summary);
    let texts = crate::common::evidence_texts(&i);
    assert!(!texts.iter().any(|t| t.contains("stage 0")), "{texts:?}");
    assert!(
        !texts.iter().any(|t| t.contains("still setting up")),
        "{texts:?}"
    );
}

#[test]
fn no_fix_repeats_what_the_log_already_tried() {
    let i = first("accel-no-batch.log");
    assert_eq!(i.cause.id(), "model-too-large");
    assert!(
        !i.fixes.iter().any(
            |f| f.knob.as_deref() == Some("batch_size") && f.direction == Some(Direction::Down)
        ),
        "{:?}",
        i.fixes.iter().map(|f| &f.title).collect::<Vec<_>>()
    );
}
