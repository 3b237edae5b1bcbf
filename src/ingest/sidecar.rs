//! The JSON sidecar that `oomdoctor.torch` writes next to a snapshot it dumps on an OOM.
//!
//! A snapshot records the allocator, not the run: it cannot say how large the model was,
//! what batch went in, which PyTorch and CUDA ran it, what `PYTORCH_CUDA_ALLOC_CONF` was, or
//! how much memory the device has. The Python hook (`python/oomdoctor/torch.py`) reads those
//! from the live process at the moment of the OOM and writes them to
//! `oom-<time>.pickle.json` (or `oom-<time>.oomdoctor.json`). When a snapshot is read from a
//! file, this module looks for such a file beside it and turns it into catalogued facts with
//! the sidecar's key as provenance.
//!
//! The sidecar is optional and auxiliary: a missing one is silence, a broken one becomes the
//! fact `runtime.sidecar_error` saying why (never an error that would lose the snapshot's
//! diagnosis), and a field of the wrong type is skipped. It is read whole, up to
//! [`MAX_BYTES`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value as Json;

use crate::facts::evidence::{Facts, InputName, Provenance};

/// A sidecar is a few hundred bytes; anything near this size is not one.
pub const MAX_BYTES: u64 = 1 << 20;

/// The sidecar format version this build writes and reads (`"oomdoctor_sidecar": 1`).
pub const VERSION: u64 = 1;

/// Where a sidecar for the snapshot at `path` may be: `<path>.json`, the same without a
/// `.gz`, and `<stem>.oomdoctor.json` (stem without `.gz` and `.pickle`/`.pkl`).
pub fn candidates(path: &Path) -> Vec<PathBuf> {
    let s = path.as_os_str().to_string_lossy();
    let mut out = vec![PathBuf::from(format!("{s}.json"))];
    let unzipped = s.strip_suffix(".gz").unwrap_or(&s);
    if unzipped.len() != s.len() {
        out.push(PathBuf::from(format!("{unzipped}.json")));
    }
    let stem = unzipped
        .strip_suffix(".pickle")
        .or_else(|| unzipped.strip_suffix(".pkl"))
        .unwrap_or(unzipped);
    out.push(PathBuf::from(format!("{stem}.oomdoctor.json")));
    out
}

/// Finds and reads the sidecar of the snapshot at `path`: `None` when there is none; a
/// sidecar that cannot be used yields only `runtime.sidecar_error`.
pub fn find(path: &Path) -> Option<Facts> {
    let candidate = candidates(path).into_iter().find(|c| c.is_file())?;
    Some(read(&candidate).unwrap_or_else(|why| {
        let mut f = Facts::new();
        let input: InputName = Arc::from(candidate.display().to_string().as_str());
        f.set(
            "runtime.sidecar_error",
            why,
            Some(Provenance::at(input, "file")),
        );
        f
    }))
}

/// Reads one sidecar file into facts.
pub fn read(path: &Path) -> Result<Facts, String> {
    let name = path.display().to_string();
    let size = std::fs::metadata(path)
        .map_err(|e| format!("sidecar {name} ignored: {e}"))?
        .len();
    if size > MAX_BYTES {
        return Err(format!(
            "sidecar {name} ignored: {size} bytes, more than a sidecar's limit of {MAX_BYTES}"
        ));
    }
    let text = std::fs::read(path).map_err(|e| format!("sidecar {name} ignored: {e}"))?;
    let json: Json = serde_json::from_slice(&text)
        .map_err(|e| format!("sidecar {name} ignored: not JSON ({e})"))?;
    facts(&json, &Arc::from(name.as_str())).map_err(|why| format!("sidecar {name} ignored: {why}"))
}

/// Turns a parsed sidecar into facts. Fields of the wrong type are skipped; unknown fields
/// (a newer hook's) are ignored.
pub fn facts(json: &Json, input: &InputName) -> Result<Facts, String> {
    let Some(obj) = json.as_object() else {
        return Err("not a JSON object".into());
    };
    match obj.get("oomdoctor_sidecar").and_then(Json::as_u64) {
        Some(v) if v >= 1 => {}
        _ => {
            return Err(
                "no \"oomdoctor_sidecar\": 1 marker; not written by oomdoctor.torch".into(),
            );
        }
    }
    let at = |key: &str| Some(Provenance::at(input.clone(), key));
    let mut f = Facts::new();
    f.set("runtime.sidecar", input.as_ref(), at("file"));
    let text = |key: &str| {
        pointer(json, key)
            .and_then(Json::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    let count = |key: &str| {
        pointer(json, key)
            .and_then(Json::as_f64)
            .filter(|n| n.is_finite() && *n >= 0.0)
    };
    for (key, name) in [
        ("hook", "runtime.hook"),
        ("torch_version", "torch.version"),
        ("cuda_version", "runtime.cuda_version"),
        ("python_version", "runtime.python_version"),
        ("device/name", "runtime.device_name"),
        ("model/class", "model.architecture"),
    ] {
        if let Some(v) = text(key) {
            f.set(name, v, at(key));
        }
    }
    for (key, name) in [
        ("device/total_memory_bytes", "oom.total_bytes"),
        ("model/params", "model.params"),
        ("model/trainable_params", "model.trainable_params"),
        ("model/param_bytes", "model.weights_bytes"),
        ("batch/seq_len", "train.seq_len"),
        ("step", "phase.steps_completed"),
        ("max_entries", "runtime.history_entries"),
    ] {
        if let Some(v) = count(key) {
            f.set(name, v, at(key));
        }
    }
    if let Some(dtype) = text("model/dtype") {
        let dtype = dtype.strip_prefix("torch.").unwrap_or(dtype);
        f.set("model.dtype", dtype, at("model/dtype"));
    }
    if let Some(shape) = pointer(json, "batch/shape").and_then(Json::as_array) {
        let dims: Vec<u64> = shape.iter().filter_map(Json::as_u64).collect();
        if !dims.is_empty() && dims.len() == shape.len() {
            let label: Vec<String> = dims.iter().map(u64::to_string).collect();
            f.set("runtime.batch_shape", label.join("x"), at("batch/shape"));
            if pointer(json, "batch/size").is_none() {
                f.set("train.batch_size", dims[0], at("batch/shape"));
            }
        }
    }
    if let Some(n) = count("batch/size") {
        f.set("train.batch_size", n, at("batch/size"));
    }
    if let Some(conf) = text("alloc_conf") {
        alloc_conf(&mut f, conf, at("alloc_conf"));
    }
    Ok(f)
}

/// `a/b` inside nested objects.
fn pointer<'a>(json: &'a Json, key: &str) -> Option<&'a Json> {
    key.split('/').try_fold(json, |v, k| v.get(k))
}

/// `PYTORCH_CUDA_ALLOC_CONF` and the knobs in it, named as the log recogniser names them.
fn alloc_conf(f: &mut Facts, conf: &str, at: Option<Provenance>) {
    f.set("torch.alloc_conf", conf, at.clone());
    for opt in conf.split(',') {
        let Some((k, v)) = opt.split_once(':') else {
            continue;
        };
        let v = v.trim();
        match k.trim() {
            "expandable_segments" => f.set(
                "torch.expandable_segments",
                v.eq_ignore_ascii_case("true"),
                at.clone(),
            ),
            "max_split_size_mb" => {
                if let Ok(n) = v.parse::<f64>() {
                    f.set("torch.max_split_size_mb", n, at.clone());
                }
            }
            "garbage_collection_threshold" => {
                if let Ok(n) = v.parse::<f64>() {
                    f.set("torch.garbage_collection_threshold", n, at.clone());
                }
            }
            "backend" => f.set("torch.async_allocator", v == "cudaMallocAsync", at.clone()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_str(s: &str) -> Result<Facts, String> {
        let json: Json = serde_json::from_str(s).map_err(|e| e.to_string())?;
        facts(&json, &Arc::from("oom.pickle.json"))
    }

    #[test]
    fn reads_every_field() {
        let f = read_str(
            r#"{"oomdoctor_sidecar": 1, "hook": "watch", "torch_version": "2.5.1+cu124",
                "cuda_version": "12.4", "python_version": "3.11.7",
                "alloc_conf": "expandable_segments:True,max_split_size_mb:128",
                "device": {"index": 0, "name": "NVIDIA A10G", "total_memory_bytes": 23836033024},
                "model": {"class": "GPT2LMHeadModel", "params": 124439808, "trainable_params": 124439808,
                          "dtype": "torch.float32", "param_bytes": 497759232},
                "batch": {"shape": [8, 1024]}, "step": 12, "max_entries": 100000,
                "from_the_future": {"x": 1}}"#,
        )
        .unwrap();
        assert_eq!(f.str("torch.version"), Some("2.5.1+cu124"));
        assert_eq!(f.str("runtime.cuda_version"), Some("12.4"));
        assert_eq!(f.str("runtime.device_name"), Some("NVIDIA A10G"));
        assert_eq!(f.num("oom.total_bytes"), Some(23836033024.0));
        assert_eq!(f.num("model.params"), Some(124439808.0));
        assert_eq!(f.str("model.dtype"), Some("float32"));
        assert_eq!(f.num("model.weights_bytes"), Some(497759232.0));
        assert_eq!(f.str("model.architecture"), Some("GPT2LMHeadModel"));
        assert_eq!(f.num("train.batch_size"), Some(8.0));
        assert_eq!(f.str("runtime.batch_shape"), Some("8x1024"));
        assert_eq!(f.bool("torch.expandable_segments"), Some(true));
        assert_eq!(f.num("torch.max_split_size_mb"), Some(128.0));
        assert_eq!(f.num("phase.steps_completed"), Some(12.0));
        assert_eq!(f.num("runtime.history_entries"), Some(100000.0));
        let src = &f.get("oom.total_bytes").unwrap().sources[0];
        assert_eq!(src.short(), "oom.pickle.json (device/total_memory_bytes)");
    }

    #[test]
    fn wrong_types_and_missing_fields_are_skipped() {
        let f = read_str(
            r#"{"oomdoctor_sidecar": 1, "torch_version": 2, "alloc_conf": null,
                "device": {"total_memory_bytes": -5, "name": ""},
                "model": "big", "batch": {"shape": [8, "n"]}}"#,
        )
        .unwrap();
        assert_eq!(f.len(), 1, "only runtime.sidecar: {f:?}");
    }

    #[test]
    fn refuses_what_is_not_a_sidecar() {
        assert!(read_str(r#"{"architectures": ["LlamaForCausalLM"]}"#).is_err());
        assert!(read_str("[1, 2]").is_err());
    }

    #[test]
    fn candidate_names() {
        let c = candidates(Path::new("runs/oom-1.pickle.gz"));
        let c: Vec<String> = c.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            c,
            [
                "runs/oom-1.pickle.gz.json",
                "runs/oom-1.pickle.json",
                "runs/oom-1.oomdoctor.json"
            ]
        );
    }
}
