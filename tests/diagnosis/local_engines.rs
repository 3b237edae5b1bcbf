//! Whole-log behaviour of the local-engine and host-side recognisers: restarts split runs and
//! repeats fold, look-alikes make no incident, the engine is named, and every number a fix
//! carries traces back to the log lines it came from.

use std::io::Cursor;

use oomdoctor::cli::diagnose::{DiagnoseOptions, diagnose_inputs};
use oomdoctor::diagnosis::report::Diagnosis;
use oomdoctor::diagnosis::rules::RuleSet;
use oomdoctor::ingest::log::grouping::analyze_log;

fn diagnose(log: &str) -> Diagnosis {
    let rules = RuleSet::builtin().unwrap();
    let (d, errors) = diagnose_inputs(
        &["-".to_string()],
        &rules,
        &DiagnoseOptions::default(),
        Some(Box::new(Cursor::new(log.to_string().into_bytes()))),
    );
    assert!(errors.is_empty(), "{errors:?}");
    d
}

/// One llama-server run that fails to allocate its KV cache.
fn llama_run(n: u32, free_mib: u32) -> String {
    format!(
        "build: 5930 (9c35706b) with cc (GCC) 13.3.0 for x86_64-linux-gnu\n\
main: loading model\n\
llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 3090) - {free_mib} MiB free\n\
llama_model_loader: loaded meta data with 33 key-value pairs and 292 tensors from /m/llama-3.1-8b-q4_k_m.gguf (version GGUF V3 (latest))\n\
print_info: n_layer          = 32\n\
load_tensors: offloaded 33/33 layers to GPU\n\
load_tensors:        CUDA0 model buffer size =  4403.49 MiB\n\
llama_context: n_ctx         = 131072\n\
llama_context: n_ubatch      = 512\n\
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 16384.00 MiB on device 0: cudaMalloc failed: out of memory\n\
alloc_tensor_range: failed to allocate CUDA0 buffer of size 17179869184\n\
llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache\n\
main: exiting due to model loading error\n\
{}",
        (0..500)
            .map(|i| format!("restart {n}: waiting {i}\n"))
            .collect::<String>()
    )
}

#[test]
fn three_restarts_with_the_same_oom_fold_into_one_incident_with_a_count() {
    let log = format!(
        "{}{}{}",
        llama_run(1, 20000),
        llama_run(2, 20000),
        llama_run(3, 20000)
    );
    let ev = analyze_log(&mut log.as_bytes(), &std::sync::Arc::from("t.log"))
        .unwrap()
        .0;
    assert_eq!(ev.restarts, 2, "three starts are two restarts");
    assert_eq!(ev.incidents.len(), 1);
    assert_eq!(ev.incidents[0].copies, 3);
    let d = diagnose(&log);
    assert_eq!(d.incidents.len(), 1);
    assert_eq!(d.incidents[0].copies, 3);
    assert_eq!(d.incidents[0].engine, "llama.cpp");
    assert_eq!(d.incidents[0].rule, "llamacpp-kv-cache-too-large");
}

#[test]
fn three_restarts_with_different_ooms_give_three_incidents() {
    // Each restart ran with less free memory (another process grew): different requests.
    let second = llama_run(2, 18000).replace("16384.00 MiB", "8192.00 MiB");
    let third = llama_run(3, 16000).replace("16384.00 MiB", "4096.00 MiB");
    let log = format!("{}{second}{third}", llama_run(1, 20000));
    let d = diagnose(&log);
    assert_eq!(d.incidents.len(), 3);
    // Each run's context is its own: the free memory the fix is computed from differs.
    let mut free: Vec<f64> = d
        .incidents
        .iter()
        .map(|i| i.facts.num("llamacpp.free_vram_bytes").unwrap())
        .collect();
    free.sort_by(|a, b| a.partial_cmp(b).unwrap());
    assert_eq!(
        free,
        vec![
            16000.0 * 1048576.0,
            18000.0 * 1048576.0,
            20000.0 * 1048576.0
        ]
    );
}

#[test]
fn ollama_restarts_split_on_the_server_config_line() {
    let run = |ctx: u32| {
        format!(
            "time=2025-01-01T00:00:00Z level=INFO source=routes.go:1 msg=\"server config\" env=\"map[OLLAMA_CONTEXT_LENGTH:{ctx} OLLAMA_NUM_PARALLEL:1]\"\n\
time=2025-01-01T00:00:01Z level=INFO source=routes.go:2 msg=\"Listening on 127.0.0.1:11434 (version 0.5.7)\"\n\
time=2025-01-01T00:00:02Z level=WARN source=server.go:136 msg=\"model request too large for system\" requested=\"{ctx}.0 GiB\" available=1073741824 total=\"15.5 GiB\" free=\"1.0 GiB\" swap=\"0 B\"\n"
        )
    };
    let log = format!("{}{}{}", run(40), run(50), run(60));
    let ev = analyze_log(&mut log.as_bytes(), &std::sync::Arc::from("t.log"))
        .unwrap()
        .0;
    assert_eq!(ev.restarts, 2);
    let d = diagnose(&log);
    assert_eq!(d.incidents.len(), 3);
    assert!(d.incidents.iter().all(|i| i.engine == "ollama"));
    assert!(d.incidents.iter().all(|i| i.rule == "ollama-system-memory"));
}

#[test]
fn look_alikes_make_no_incident() {
    for (what, log) in [
        (
            "pinned-memory fallback",
            "load_tensors: loading model tensors, this can take a while... (mmap = true)\nggml_cuda_host_malloc: failed to allocate 922.50 MiB of pinned memory: out of memory\nload_tensors: offloaded 43/43 layers to GPU\n",
        ),
        (
            "mlock limit",
            "warning: failed to mlock 1417465856-byte buffer (after previously locking 0 bytes): Cannot allocate memory\nTry increasing RLIMIT_MEMLOCK ('ulimit -l' as root).\n",
        ),
        (
            "XLA's not-a-failure note",
            "2024-01-01 00:00:00.000000: W external/xla/xla/tsl/framework/bfc_allocator.cc:296] Allocator (GPU_0_bfc) ran out of memory trying to allocate 2.13GiB with freed_by_count=0. The caller indicates that this is not a failure, but this may mean that there could be performance gains if more memory were available.\n",
        ),
        (
            "XLA garbage collection notice",
            "W0101 00:00:00.000000 1 bfc_allocator.cc:100] Garbage collection: deallocate free memory regions (i.e., allocations) so that we can re-allocate a larger region to avoid OOM due to memory fragmentation. If you see this message frequently, you are running near the threshold of the available device memory and re-allocation may incur great performance overhead. You may try smaller batch sizes to observe the performance impact. Set TF_ENABLE_GPU_GARBAGE_COLLECTION=false if you'd like to disable this feature.\n",
        ),
        (
            "ROCm page fault",
            "Memory access fault by GPU node-1 (Agent handle: 0x55f0c7e3e0a0) on address 0x7f2b1c000000. Reason: Page not present or supervisor privilege.\nAborted (core dumped)\n",
        ),
        (
            "illegal memory access in ggml",
            "CUDA error: an illegal memory access was encountered\n  current device: 0, in function ggml_backend_cuda_synchronize at /app/ggml/src/ggml-cuda/ggml-cuda.cu:2440\n  cudaStreamSynchronize(cuda_ctx->stream())\n",
        ),
        (
            "DeepSpeed allocator cache flushes",
            "[2024-05-01 10:20:00,000] [WARNING] [stage3.py:2069:step] 3 pytorch allocator cache flushes since last step. this happens when there is high memory pressure and is detrimental to performance. if this is happening frequently consider adjusting settings to reduce memory consumption. If you are unable to make the cache flushes go away consider adding get_accelerator().empty_cache() calls in your training loop to ensure that all ranks flush their caches at the same time\n",
        ),
        (
            "compute buffer retried without pipeline parallelism",
            "llama_init_from_model: pipeline parallelism enabled (n_copies=4)\nggml_backend_cuda_buffer_type_alloc_buffer: allocating 1407257.91 MiB on device 0: cudaMalloc failed: out of memory\nllama_init_from_model: compute buffer allocation failed, retrying without pipeline parallelism\nllama_init_from_model:      CUDA0 compute buffer size =   560.00 MiB\n",
        ),
        (
            "systemd-oomd survey",
            "Jun 02 13:55:01 ws systemd-oomd[812]: Considered 21 cgroups for killing, top candidates were:\nJun 02 13:55:01 ws systemd-oomd[812]:         Path: /user.slice/user-1000.slice/session-2.scope\nJun 02 13:55:01 ws systemd-oomd[812]:                 Swap Usage: 3.1G\n",
        ),
        (
            "Ollama evicting a model to make room",
            "time=2025-11-02T14:12:40.119Z level=INFO source=sched.go:544 msg=\"model requires more system memory than is currently available, evicting a model to make space\" required=12884901888 free=10522669056\n",
        ),
        (
            "Ray's /dev/shm warning",
            "2023-07-03 03:27:55,911\tWARNING services.py:1826 -- WARNING: The object store is using /tmp instead of /dev/shm because /dev/shm has only 67108864 bytes available. This will harm performance!\n",
        ),
        (
            "Kubernetes container that completed",
            "    Last State:     Terminated\n      Reason:       Completed\n      Exit Code:    0\n",
        ),
        (
            "the allocator's own hint",
            "If the cause is memory fragmentation maybe the environment variable 'TF_GPU_ALLOCATOR=cuda_malloc_async' will improve the situation. \n",
        ),
    ] {
        let d = diagnose(log);
        assert!(
            d.incidents.is_empty(),
            "{what} made an incident: {:?}",
            d.incidents.iter().map(|i| &i.rule).collect::<Vec<_>>()
        );
    }
}

/// The pipeline-parallel compute buffer is retried and then fails for good: that is an OOM.
#[test]
fn a_retried_compute_buffer_that_fails_again_is_an_incident() {
    let log = "llama_init_from_model: pipeline parallelism enabled (n_copies=4)\nggml_backend_cuda_buffer_type_alloc_buffer: allocating 1407257.91 MiB on device 0: cudaMalloc failed: out of memory\nllama_init_from_model: compute buffer allocation failed, retrying without pipeline parallelism\nggml_backend_cuda_buffer_type_alloc_buffer: allocating 351268.28 MiB on device 0: cudaMalloc failed: out of memory\nggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 368331484928\nllama_init_from_model: failed to allocate compute buffers\n";
    let d = diagnose(log);
    assert_eq!(d.incidents.len(), 1);
    // A compute buffer of hundreds of GiB at the default micro-batch is a long context's
    // attention scores; either way the incident is the compute buffer's.
    assert!(
        ["llamacpp-compute-buffer", "llamacpp-context-scores"]
            .contains(&d.incidents[0].rule.as_str()),
        "{}",
        d.incidents[0].rule
    );
}

/// Every number in a fix names the facts it came from, and each fact names its log line.
#[test]
fn fix_values_trace_to_log_lines() {
    let d = diagnose(&llama_run(1, 20000));
    let inc = &d.incidents[0];
    let fix = inc
        .fixes
        .iter()
        .find(|f| f.action.starts_with("-c "))
        .expect("a -c fix");
    assert!(!fix.values.is_empty());
    let v = fix
        .values
        .iter()
        .find(|v| v.expr == "llamacpp.ctx_fit_tokens")
        .expect("the context value");
    let json = serde_json::to_value(v).unwrap();
    let lines: Vec<u64> = json["from"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| f["sources"].as_array().unwrap().clone())
        .filter_map(|s| s["line"].as_u64())
        .collect();
    // free VRAM (line 3), the model buffer (line 7), the KV request (line 10), n_ctx (line 8)
    for want in [3, 7, 8, 10] {
        assert!(lines.contains(&want), "line {want} not in {lines:?}");
    }
}

#[test]
fn engines_are_named() {
    for (log, engine) in [
        (
            "Out of memory: Killed process 4242 (python3) total-vm:1kB, anon-rss:30123456kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:1kB oom_score_adj:0\n",
            "pytorch",
        ),
        (
            "Memory cgroup out of memory: Killed process 9001 (VLLM::EngineCor) total-vm:1kB, anon-rss:12345678kB, file-rss:0kB, shmem-rss:0kB\n",
            "vllm",
        ),
        (
            "Out of memory: Killed process 31 (ollama_llama_se) total-vm:100kB, anon-rss:50000kB, file-rss:10kB, shmem-rss:0kB\n",
            "ollama",
        ),
        (
            "Out of memory: Killed process 77 (text-generation) total-vm:100kB, anon-rss:50000kB, file-rss:10kB, shmem-rss:0kB\n",
            "tgi",
        ),
        (
            "Out of memory: Killed process 78 (tritonserver) total-vm:100kB, anon-rss:50000kB, file-rss:10kB, shmem-rss:0kB\n",
            "tensorrt-llm",
        ),
        (
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.\n",
            "jax",
        ),
        (
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[64,1024] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n",
            "tensorflow",
        ),
    ] {
        let d = diagnose(log);
        assert_eq!(d.incidents.len(), 1, "{log}");
        assert_eq!(d.incidents[0].engine, engine, "{log}");
    }
}

/// A paste of llama.cpp's CUDA error cut after `current device: N` (no `in function`) is still
/// llama.cpp's OOM, and the command line above it (its `--model` on a continuation line of
/// its own) still says flash attention is on, so that fix is not offered again.
#[test]
fn llamacpp_error_cut_after_the_device_line() {
    let log = "$ llama-server --device CUDA0 --port 8091 -ngl 999 -fa on --no-warmup -np 1\n      --model /srv/llm/model-27B-Q4_K_XL.gguf\n      --ctx-size 80000\n[...]\nCUDA error: out of memory\n  current device: 0\n";
    let d = diagnose(log);
    assert_eq!(d.incidents.len(), 1);
    let inc = &d.incidents[0];
    assert_eq!(inc.engine, "llama.cpp");
    assert!(
        !inc.fixes
            .iter()
            .any(|f| f.knob.as_deref() == Some("flash_attn")),
        "{:?}",
        inc.fixes.iter().map(|f| &f.title).collect::<Vec<_>>()
    );
}
