//! Derived facts: numbers computed from other facts once, in Rust, so every rule sees the
//! same arithmetic and every derived value carries the sources of its inputs.
//!
//! Each producer module may add a derivation here; they run in order, so later ones can use
//! earlier results.

use crate::evidence::Facts;

/// A derivation reads facts and adds new ones.
pub type Derivation = fn(&mut Facts);

/// Every derivation, in the order they run.
pub const DERIVATIONS: &[Derivation] = &[torch_oom, model_weights];

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
}
