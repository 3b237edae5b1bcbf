//! Engines, defined once: the stable id of each producer of failures (the JSON `engine`
//! field), how its processes are named, and whether it serves requests.
//!
//! Recognisers, fusion, the timeline and the rules all name engines through [`id`]; every
//! guess of an engine from a name (a killed process, a systemd unit, a pod, the process
//! that filled a device in a series) goes through [`of_process`] or [`mentioned_in`] and
//! the one table, [`ENGINES`].

/// Stable engine identifiers, as they appear in the JSON `engine` field.
pub mod id {
    pub const PYTORCH: &str = "pytorch";
    pub const TRANSFORMERS: &str = "transformers";
    pub const VLLM: &str = "vllm";
    pub const LLAMACPP: &str = "llama.cpp";
    pub const OLLAMA: &str = "ollama";
    pub const TGI: &str = "tgi";
    pub const SGLANG: &str = "sglang";
    pub const TRTLLM: &str = "tensorrt-llm";
    pub const JAX: &str = "jax";
    pub const TENSORFLOW: &str = "tensorflow";
    pub const DEEPSPEED: &str = "deepspeed";
    pub const LINUX: &str = "linux";
    pub const SYSTEMD: &str = "systemd";
    pub const KUBERNETES: &str = "kubernetes";
    pub const RAY: &str = "ray";
    pub const COMFYUI: &str = "comfyui";
    /// AUTOMATIC1111's stable-diffusion-webui and its forks (Forge, reForge).
    pub const WEBUI: &str = "a1111";
    // Inference runtimes and GPU array libraries with allocators of their own.
    pub const CTRANSLATE2: &str = "ctranslate2";
    pub const ONNXRUNTIME: &str = "onnxruntime";
    pub const TENSORRT: &str = "tensorrt";
    pub const LMDEPLOY: &str = "lmdeploy";
    /// ExLlamaV2 and the servers and UIs built on it (TabbyAPI, ExUI, text-generation-webui's
    /// ExLlamav2 loader).
    pub const EXLLAMAV2: &str = "exllamav2";
    /// MLC-LLM, whose models run on TVM's runtime (Vulkan, CUDA, Metal).
    pub const MLC_LLM: &str = "mlc-llm";
    pub const PADDLE: &str = "paddle";
    pub const CUPY: &str = "cupy";
    pub const RAPIDS: &str = "rapids";
    pub const NUMBA: &str = "numba";
    pub const MXNET: &str = "mxnet";
    /// LM Studio's own load guardrail (its models run on llama.cpp or MLX).
    pub const LMSTUDIO: &str = "lmstudio";
    /// Apple's MLX (and MLX-LM), on Apple silicon's unified memory.
    pub const MLX: &str = "mlx";
    pub const UNKNOWN: &str = "unknown";
}

/// Whether a failure is about accelerator memory or host memory. Failures of different
/// domains are never folded into one incident.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Domain {
    Device,
    Host,
}

/// One engine's names.
pub struct EngineDef {
    pub id: &'static str,
    /// How its executables start (lower case), as the kernel names a killed process: the
    /// command name, truncated to 15 characters (`VLLM::EngineCor`, `ollama_llama_se`).
    pub process_prefixes: &'static [&'static str],
    /// Words that name it inside a longer name (a systemd unit, a pod, nvidia-smi's process
    /// column). Only engine-specific words: a `python` unit could be anything.
    pub mentions: &'static [&'static str],
    /// An LLM server: sizes a KV cache for requests instead of running training steps.
    pub serving: bool,
    /// Its name where the user types it (`oomdoctor plan --engine llamacpp`) and in `plan`'s
    /// JSON, with the other spellings accepted there. A public API, like [`id`]'s.
    pub cli_name: &'static str,
    pub cli_aliases: &'static [&'static str],
}

/// Every engine that a process name can reveal, most specific first (`ollama` before
/// `llama`, whose word it contains).
pub const ENGINES: &[EngineDef] = &[
    EngineDef {
        id: id::VLLM,
        process_prefixes: &["vllm"],
        mentions: &["vllm"],
        serving: true,
        cli_name: "vllm",
        cli_aliases: &[],
    },
    EngineDef {
        id: id::OLLAMA,
        process_prefixes: &["ollama"],
        mentions: &["ollama"],
        serving: true,
        cli_name: "ollama",
        cli_aliases: &[],
    },
    EngineDef {
        id: id::LLAMACPP,
        process_prefixes: &["llama-server", "llama-cli", "llama-run", "llama-simple"],
        mentions: &["llama-server", "llama-cli", "llama"],
        serving: true,
        cli_name: "llamacpp",
        cli_aliases: &["llama.cpp", "llama-cpp", "llama-server"],
    },
    EngineDef {
        id: id::TGI,
        process_prefixes: &["text-generation", "text_generation"],
        mentions: &["text-generation"],
        serving: true,
        cli_name: "tgi",
        cli_aliases: &[],
    },
    EngineDef {
        id: id::TRTLLM,
        process_prefixes: &["tritonserver", "trtllm"],
        mentions: &["tritonserver", "trtllm"],
        serving: true,
        cli_name: "trtllm",
        cli_aliases: &[],
    },
    EngineDef {
        id: id::SGLANG,
        process_prefixes: &["sglang"],
        mentions: &["sglang"],
        serving: true,
        cli_name: "sglang",
        cli_aliases: &[],
    },
    EngineDef {
        id: id::TRANSFORMERS,
        process_prefixes: &[],
        mentions: &[],
        serving: false,
        cli_name: "transformers",
        cli_aliases: &["hf"],
    },
    EngineDef {
        id: id::PYTORCH,
        process_prefixes: &["python", "pt_", "torchrun"],
        mentions: &[],
        serving: false,
        cli_name: "pytorch",
        cli_aliases: &[],
    },
    EngineDef {
        id: id::RAY,
        process_prefixes: &["ray::", "raylet"],
        mentions: &[],
        serving: false,
        cli_name: "ray",
        cli_aliases: &[],
    },
];

/// The engine a killed process belongs to, from its command name; [`id::LINUX`] when the
/// name is no engine's.
pub fn of_process(name: &str) -> &'static str {
    let n = name.trim().trim_matches(['(', ')', '"', '\'']);
    let base = n.rsplit('/').next().unwrap_or(n);
    let lower = base.to_ascii_lowercase();
    ENGINES
        .iter()
        .find(|e| e.process_prefixes.iter().any(|p| lower.starts_with(p)))
        .map_or(id::LINUX, |e| e.id)
}

/// The engine a longer name mentions (`vllm-server.service`, `llm-ollama-7d9f`,
/// `/app/llama-server`), if any.
pub fn mentioned_in(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    ENGINES
        .iter()
        .find(|e| e.mentions.iter().any(|m| lower.contains(m)))
        .map(|e| e.id)
}

/// An engine's definition, by id.
pub fn def(engine: &str) -> Option<&'static EngineDef> {
    ENGINES.iter().find(|e| e.id == engine)
}

/// Whether an engine serves requests (sizes a KV cache) rather than running steps.
pub fn is_serving(engine: &str) -> bool {
    ENGINES.iter().any(|e| e.serving && e.id == engine)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_from_process_names() {
        for (name, want) in [
            ("python3", id::PYTORCH),
            ("python3.10", id::PYTORCH),
            ("pt_main_thread", id::PYTORCH),
            ("VLLM::EngineCor", id::VLLM),
            ("llama-server", id::LLAMACPP),
            ("ollama_llama_se", id::OLLAMA),
            ("ollama", id::OLLAMA),
            ("text-generation", id::TGI),
            ("tritonserver", id::TRTLLM),
            ("ray::IDLE", id::RAY),
            ("java", id::LINUX),
        ] {
            assert_eq!(of_process(name), want, "{name}");
        }
    }

    #[test]
    fn engines_mentioned_in_longer_names() {
        assert_eq!(mentioned_in("ollama.service"), Some(id::OLLAMA));
        assert_eq!(mentioned_in("llm-ollama-7d9f"), Some(id::OLLAMA));
        assert_eq!(mentioned_in("/app/llama-server"), Some(id::LLAMACPP));
        assert_eq!(mentioned_in("VLLM::EngineCore"), Some(id::VLLM));
        assert_eq!(mentioned_in("/usr/bin/python3"), None);
        assert!(is_serving(id::TGI) && !is_serving(id::PYTORCH));
    }
}
