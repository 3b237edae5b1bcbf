//! The built-in rules, compiled into the binary. One line per file in `rules/`; a test
//! fails if a file is missing here or listed twice, so the list cannot drift.

macro_rules! rules {
    ($($stem:literal),* $(,)?) => {
        /// `(file stem, file text)` of every built-in rule.
        pub const FILES: &[(&str, &str)] = &[$(($stem, include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/", $stem, ".toml")))),*];
    };
}

rules![
    "torch-fragmentation",
    "torch-other-processes",
    "torch-non-pytorch-memory",
    "torch-memory-fraction",
    "torch-weights-on-load",
    "torch-optimizer-state",
    "torch-activations",
    "torch-leak-after-many-steps",
    "torch-single-request-exceeds-device",
    "cuda-runtime-oom",
    "mps-oom",
    "host-allocation-failed",
    "torch-generation-cache",
    "dataloader-worker-killed",
    "shared-memory-exhausted",
    "process-killed",
    "host-memory-grows",
    // Diffusion front-ends.
    "comfyui-model-offloaded",
    "comfyui-working-memory",
    "webui-model-too-large",
    "webui-generation-memory",
    // Local engines and the host side.
    "llamacpp-weights-exceed-vram",
    "llamacpp-kv-cache-too-large",
    "llamacpp-compute-buffer",
    "llamacpp-other-processes",
    "llamacpp-host-buffer",
    "ollama-system-memory",
    "ollama-kv-context",
    "ollama-gpu-layers",
    "ollama-runner-killed",
    "ollama-compute-graph",
    "xla-preallocation-cap",
    "xla-other-process",
    "xla-weights-on-load",
    "xla-batch-too-large",
    "tf-bfc-fragmentation",
    "deepspeed-zero-states",
    "deepspeed-micro-batch",
    "deepspeed-offload-host-ram",
    "kernel-oom-global",
    "kernel-oom-cgroup",
    "systemd-oomd-kill",
    "k8s-oomkilled",
    "k8s-eviction",
    "slurm-oom-kill",
    "ray-memory-monitor",
    // LLM serving engines.
    "vllm-max-model-len-exceeds-kv",
    "vllm-no-kv-cache-blocks",
    "vllm-startup-budget-exceeds-free",
    "vllm-cuda-graph-oom",
    "vllm-serving-oom",
    "vllm-profiling-oom",
    "vllm-sampler-warmup-oom",
    "vllm-weights-dont-fit",
    "vllm-preemption-storm",
    "sglang-not-enough-memory",
    "sglang-cuda-graph-oom",
    "sglang-runtime-oom",
    "sglang-retraction-storm",
    "sglang-token-pool-exhausted",
    "tgi-prefill-tokens-oom",
    "tgi-batch-total-tokens-oom",
    "tgi-max-total-tokens-exceeds-kv",
    "trtllm-max-seq-len-reduced",
    "trtllm-kv-blocks-exhausted",
    "trtllm-free-fraction-too-high",
    "serving-weights-dont-fit",
    "tgi-runtime-oom",
    // Memory series: engine-neutral, they read only `series.*` facts.
    "series-steady-growth",
    "series-neighbour-process",
    "series-spike-at-failure",
    "series-kv-pressure",
    "series-churn-fragmentation",
    "series-full-at-load",
];

#[cfg(test)]
mod tests {
    use super::FILES;

    #[test]
    fn every_rule_file_is_registered_once() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rules");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let mut listed: Vec<String> = FILES.iter().map(|(s, _)| s.to_string()).collect();
        listed.sort();
        let before = listed.len();
        listed.dedup();
        assert_eq!(before, listed.len(), "a rule is listed twice in builtin.rs");
        assert_eq!(on_disk, listed, "rules/*.toml and builtin.rs disagree");
    }
}
