//! Derived facts: numbers computed from other facts once, in Rust, so every rule sees the
//! same arithmetic and every derived value carries the sources of its inputs.
//!
//! Each producer module may add a derivation here; they run in order, so later ones can use
//! earlier results.

use crate::evidence::Facts;

/// A derivation reads facts and adds new ones.
pub type Derivation = fn(&mut Facts);

/// Every derivation, in the order they run.
pub const DERIVATIONS: &[Derivation] = &[
    torch_oom,
    model_weights,
    // LLM serving engines.
    vllm,
    trtllm,
];

/// Runs every derivation.
pub fn derive(facts: &mut Facts) {
    for d in DERIVATIONS {
        d(facts);
    }
}

/// The numbers PyTorch's OOM message implies but does not print.
fn torch_oom(f: &mut Facts) {
    if let (Some(total), Some(free)) = (f.num("oom.total_bytes"), f.num("oom.free_bytes")) {
        if !f.contains("oom.device_used_bytes") {
            f.derive(
                "oom.device_used_bytes",
                (total - free).max(0.0),
                &["oom.total_bytes", "oom.free_bytes"],
            );
        }
    }
    if !f.contains("oom.reserved_bytes") {
        if let (Some(a), Some(u)) = (
            f.num("oom.allocated_bytes"),
            f.num("oom.reserved_unallocated_bytes"),
        ) {
            f.derive(
                "oom.reserved_bytes",
                a + u,
                &["oom.allocated_bytes", "oom.reserved_unallocated_bytes"],
            );
        }
    }
    if let (Some(total), Some(free), Some(reserved)) = (
        f.num("oom.total_bytes"),
        f.num("oom.free_bytes"),
        f.num("oom.reserved_bytes"),
    ) {
        if !f.contains("oom.unaccounted_bytes") {
            f.derive(
                "oom.unaccounted_bytes",
                (total - free - reserved).max(0.0),
                &["oom.total_bytes", "oom.free_bytes", "oom.reserved_bytes"],
            );
        }
    }
    if let (Some(self_used), Some(reserved)) =
        (f.num("oom.self_used_bytes"), f.num("oom.reserved_bytes"))
    {
        if !f.contains("oom.non_torch_self_bytes") {
            f.derive(
                "oom.non_torch_self_bytes",
                (self_used - reserved).max(0.0),
                &["oom.self_used_bytes", "oom.reserved_bytes"],
            );
        }
    }
}

/// Bytes per parameter of a dtype name as logs print it.
pub fn dtype_bytes(dtype: &str) -> Option<f64> {
    let d = dtype
        .trim()
        .trim_start_matches("torch.")
        .to_ascii_lowercase();
    Some(match d.as_str() {
        "float32" | "fp32" | "float" | "f32" => 4.0,
        "float16" | "fp16" | "half" | "f16" | "bfloat16" | "bf16" => 2.0,
        "int8" | "fp8" | "float8" | "8bit" | "q8_0" => 1.0,
        "4bit" | "nf4" | "int4" | "fp4" | "q4_0" => 0.5,
        _ => return None,
    })
}

fn model_weights(f: &mut Facts) {
    if f.contains("model.weights_bytes") {
        return;
    }
    if let (Some(params), Some(bytes)) = (
        f.num("model.params"),
        f.str("model.dtype").and_then(dtype_bytes),
    ) {
        f.derive(
            "model.weights_bytes",
            params * bytes,
            &["model.params", "model.dtype"],
        );
    }
}

/// vLLM's KV arithmetic: tokens from V0 blocks, the device total from the budget, bytes per
/// token, and the longest sequence the cache holds.
fn vllm(f: &mut Facts) {
    // vLLM's default budget is 0.9 in every version; when the log shows vLLM ran but not
    // the setting, the default was in force. Its source is the line that names the version.
    if !f.contains("vllm.gpu_memory_utilization") {
        if f.contains("vllm.version") {
            f.derive("vllm.gpu_memory_utilization", 0.9, &["vllm.version"]);
        } else if f.contains("vllm.v1") {
            f.derive("vllm.gpu_memory_utilization", 0.9, &["vllm.v1"]);
        }
    }
    if !f.contains("vllm.kv_cache_tokens") {
        if let Some(blocks) = f.num("vllm.gpu_blocks") {
            // 16 tokens per block is vLLM's CUDA default when the log does not say.
            let bs = f.num("vllm.block_size").unwrap_or(16.0);
            f.derive(
                "vllm.kv_cache_tokens",
                blocks * bs,
                &["vllm.gpu_blocks", "vllm.block_size"],
            );
        } else if let (Some(c), Some(len)) =
            (f.num("vllm.max_concurrency"), f.num("vllm.max_model_len"))
        {
            f.derive(
                "vllm.kv_cache_tokens",
                (c * len).floor(),
                &["vllm.max_concurrency", "vllm.max_model_len"],
            );
        }
    }
    // V1 logs the non-KV total and what is left for the KV cache: together, the budget.
    if !f.contains("vllm.budget_bytes") {
        if let (Some(n), Some(kv)) = (f.num("vllm.non_kv_bytes"), f.num("vllm.kv_cache_bytes")) {
            f.derive(
                "vllm.budget_bytes",
                n + kv,
                &["vllm.non_kv_bytes", "vllm.kv_cache_bytes"],
            );
        }
    }
    if !f.contains("vllm.gpu_total_bytes") {
        if let (Some(b), Some(u)) = (
            f.num("vllm.budget_bytes"),
            f.num("vllm.gpu_memory_utilization"),
        ) {
            if u > 0.0 {
                f.derive(
                    "vllm.gpu_total_bytes",
                    b / u,
                    &["vllm.budget_bytes", "vllm.gpu_memory_utilization"],
                );
            }
        }
    }
    if !f.contains("vllm.budget_bytes") {
        if let (Some(t), Some(u)) = (
            f.num("vllm.gpu_total_bytes"),
            f.num("vllm.gpu_memory_utilization"),
        ) {
            f.derive(
                "vllm.budget_bytes",
                t * u,
                &["vllm.gpu_total_bytes", "vllm.gpu_memory_utilization"],
            );
        }
    }
    if !f.contains("vllm.kv_bytes_per_token") {
        match (
            f.num("vllm.kv_cache_bytes"),
            f.num("vllm.kv_cache_tokens"),
            f.num("vllm.kv_needed_bytes"),
            f.num("vllm.max_model_len"),
        ) {
            (Some(b), Some(t), _, _) if b > 0.0 && t > 0.0 => f.derive(
                "vllm.kv_bytes_per_token",
                b / t,
                &["vllm.kv_cache_bytes", "vllm.kv_cache_tokens"],
            ),
            (_, _, Some(need), Some(len)) if need > 0.0 && len > 0.0 => f.derive(
                "vllm.kv_bytes_per_token",
                need / len,
                &["vllm.kv_needed_bytes", "vllm.max_model_len"],
            ),
            _ => {}
        }
    }
    if !f.contains("vllm.kv_capacity_tokens") {
        if f.contains("vllm.estimated_max_model_len") {
            let v = f.num("vllm.estimated_max_model_len").unwrap_or(0.0);
            f.derive(
                "vllm.kv_capacity_tokens",
                v,
                &["vllm.estimated_max_model_len"],
            );
        } else if let Some(t) = f.num("vllm.kv_cache_tokens") {
            f.derive(
                "vllm.kv_capacity_tokens",
                t.max(0.0),
                &["vllm.kv_cache_tokens"],
            );
        } else if let (Some(b), Some(per)) = (
            f.num("vllm.kv_cache_bytes"),
            f.num("vllm.kv_bytes_per_token"),
        ) {
            if per > 0.0 {
                f.derive(
                    "vllm.kv_capacity_tokens",
                    (b / per).floor().max(0.0),
                    &["vllm.kv_cache_bytes", "vllm.kv_bytes_per_token"],
                );
            }
        }
    }
}

/// TensorRT-LLM: the KV pool's default share (0.9 of the free memory) when the log shows the
/// runtime but not the setting, and KV tokens from blocks.
fn trtllm(f: &mut Facts) {
    if !f.contains("trtllm.free_gpu_memory_fraction") && f.contains("trtllm.version") {
        f.derive("trtllm.free_gpu_memory_fraction", 0.9, &["trtllm.version"]);
    }
    if !f.contains("trtllm.kv_tokens") {
        if let (Some(b), Some(t)) = (f.num("trtllm.kv_blocks"), f.num("trtllm.tokens_per_block")) {
            f.derive(
                "trtllm.kv_tokens",
                b * t,
                &["trtllm.kv_blocks", "trtllm.tokens_per_block"],
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_numbers() {
        let mut f = Facts::new();
        f.set("oom.total_bytes", 24.0, None);
        f.set("oom.free_bytes", 1.0, None);
        f.set("oom.allocated_bytes", 10.0, None);
        f.set("oom.reserved_unallocated_bytes", 2.0, None);
        f.set("oom.self_used_bytes", 15.0, None);
        derive(&mut f);
        assert_eq!(f.num("oom.reserved_bytes"), Some(12.0));
        assert_eq!(f.num("oom.unaccounted_bytes"), Some(11.0));
        assert_eq!(f.num("oom.non_torch_self_bytes"), Some(3.0));
        assert_eq!(f.num("oom.device_used_bytes"), Some(23.0));
    }

    #[test]
    fn vllm_capacity_from_the_v1_error() {
        let gib = 1073741824.0;
        let mut f = Facts::new();
        f.set("vllm.max_model_len", 131072.0, None);
        f.set("vllm.kv_needed_bytes", 16.0 * gib, None);
        f.set("vllm.kv_cache_bytes", 5.5 * gib, None);
        derive(&mut f);
        assert_eq!(f.num("vllm.kv_bytes_per_token"), Some(131072.0));
        assert_eq!(f.num("vllm.kv_capacity_tokens"), Some(45056.0));
        let mut f = Facts::new();
        f.set("vllm.gpu_blocks", 1478.0, None);
        f.set("vllm.budget_bytes", 21.2 * gib, None);
        f.set("vllm.gpu_memory_utilization", 0.9, None);
        derive(&mut f);
        assert_eq!(f.num("vllm.kv_cache_tokens"), Some(23648.0));
        assert_eq!(f.num("vllm.kv_capacity_tokens"), Some(23648.0));
        assert!((f.num("vllm.gpu_total_bytes").unwrap() - 21.2 * gib / 0.9).abs() < 1.0);
    }
}
