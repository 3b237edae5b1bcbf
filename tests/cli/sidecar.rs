//! The hook's JSON sidecar beside a snapshot becomes facts of the snapshot's incident.

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_oomdoctor");
const SNAPSHOT: &str = "fixtures/snapshots/fragmentation_oom.pickle";
const SIDECAR: &str = "fixtures/sidecar/oom-20261125-153809.pickle.json";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh directory holding `oom-20261125-153809.pickle` (a copy of the generated snapshot)
/// and, when given, a sidecar named `sidecar_name` with `sidecar` as its content.
fn dump_dir(tag: &str, sidecar_name: &str, sidecar: Option<&[u8]>) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("oomdoctor-sidecar-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        root().join(SNAPSHOT),
        dir.join("oom-20261125-153809.pickle"),
    )
    .unwrap();
    if let Some(s) = sidecar {
        std::fs::write(dir.join(sidecar_name), s).unwrap();
    }
    dir
}

fn diagnose(dir: &Path) -> (Option<i32>, serde_json::Value) {
    let out = Command::new(BIN)
        .arg(dir.join("oom-20261125-153809.pickle"))
        .args(["--format", "json"])
        .env("NO_COLOR", "1")
        .output()
        .expect("run oomdoctor");
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), json)
}

fn fact<'a>(d: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    &d["incidents"][0]["facts"][name]["value"]
}

#[test]
fn sidecar_facts_join_the_snapshot_incident() {
    let sidecar = std::fs::read(root().join(SIDECAR)).unwrap();
    let dir = dump_dir("full", "oom-20261125-153809.pickle.json", Some(&sidecar));
    let (code, d) = diagnose(&dir);
    assert_eq!(code, Some(1));
    let expected: serde_json::Value = serde_json::from_slice(&sidecar).unwrap();
    assert_eq!(fact(&d, "torch.version"), &expected["torch_version"]);
    assert_eq!(
        fact(&d, "oom.total_bytes"),
        &expected["device"]["total_memory_bytes"]
    );
    assert_eq!(fact(&d, "runtime.device_name"), &expected["device"]["name"]);
    assert_eq!(fact(&d, "runtime.cuda_version"), &expected["cuda_version"]);
    assert_eq!(fact(&d, "model.params"), &expected["model"]["params"]);
    assert_eq!(
        fact(&d, "model.weights_bytes"),
        &expected["model"]["param_bytes"]
    );
    assert_eq!(fact(&d, "train.batch_size"), &expected["batch"]["shape"][0]);
    assert_eq!(fact(&d, "torch.alloc_conf"), &expected["alloc_conf"]);
    // Every sidecar fact names the sidecar and the key it came from.
    let sources = &d["incidents"][0]["facts"]["oom.total_bytes"]["sources"];
    let src = &sources[sources.as_array().unwrap().len() - 1];
    assert!(
        src["input"]
            .as_str()
            .unwrap()
            .ends_with("oom-20261125-153809.pickle.json"),
        "{src}"
    );
    assert_eq!(src["locator"], "device/total_memory_bytes");
    // The snapshot's own evidence is still there, and the device size the sidecar adds
    // changes the reading: the synthetic snapshot's process held 0.5 GiB of a 22.2 GiB
    // device with 8 MiB free, so the rest was held outside it.
    assert!(d["incidents"][0]["facts"]["snapshot.fragmented_free_at_oom_bytes"].is_object());
    assert_eq!(d["incidents"][0]["cause"], "memory-contention");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_oomdoctor_json_name_is_found_too() {
    let sidecar = std::fs::read(root().join(SIDECAR)).unwrap();
    let dir = dump_dir("alt", "oom-20261125-153809.oomdoctor.json", Some(&sidecar));
    let (_, d) = diagnose(&dir);
    assert_eq!(fact(&d, "runtime.device_name"), "NVIDIA A10G");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_a_sidecar_the_version_is_inferred_from_the_format() {
    let dir = dump_dir("none", "", None);
    let (code, d) = diagnose(&dir);
    assert_eq!(code, Some(1));
    assert_eq!(fact(&d, "torch.version"), "2.5-2.7");
    assert!(fact(&d, "oom.total_bytes").is_null());
    assert!(fact(&d, "runtime.sidecar").is_null());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_broken_sidecar_is_a_fact_not_an_error() {
    let dir = dump_dir(
        "broken",
        "oom-20261125-153809.pickle.json",
        Some(b"{\"oomdoctor_sid"),
    );
    let (code, d) = diagnose(&dir);
    assert_eq!(code, Some(1), "the snapshot is still diagnosed");
    assert_eq!(d["errors"], serde_json::json!([]));
    let why = fact(&d, "runtime.sidecar_error").as_str().unwrap();
    assert!(why.contains("not JSON"), "{why}");
    assert_eq!(d["incidents"][0]["cause"], "fragmentation");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_directory_of_dumps_reads_each_snapshot_with_its_sidecar() {
    // `oomdoctor oom/` (the GitHub Action's `paths: oom/`): the walk hands the snapshot its
    // path, so its sidecar is found; the sidecar itself is read as an input without incidents.
    let sidecar = std::fs::read(root().join(SIDECAR)).unwrap();
    let dir = dump_dir("walk", "oom-20261125-153809.pickle.json", Some(&sidecar));
    let out = Command::new(BIN)
        .arg(&dir)
        .args(["--format", "json"])
        .output()
        .expect("run oomdoctor");
    assert_eq!(out.status.code(), Some(1));
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["incidents"].as_array().unwrap().len(), 1);
    assert_eq!(fact(&d, "runtime.device_name"), "NVIDIA A10G");
    let _ = std::fs::remove_dir_all(&dir);
}
