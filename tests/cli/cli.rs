//! The binary as users run it: stdin, files, gzip, exit codes, errors, closed pipes.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_oomdoctor");
const FRAG: &str = "rules/torch-fragmentation/fires-hf-trainer-2ranks.log";

fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("NO_COLOR", "1")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run oomdoctor");
    if let Some(data) = stdin {
        let mut s = child.stdin.take().unwrap();
        let data = data.to_vec();
        std::thread::spawn(move || {
            let _ = s.write_all(&data);
        });
    }
    child.wait_with_output().unwrap()
}

fn fixture(path: &str) -> Vec<u8> {
    std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn stdin_is_read_when_no_input_is_named() {
    let out = run(&[], Some(&fixture(FRAG)));
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("fragmentation"), "{text}");
    assert!(text.contains("<stdin>"));
    assert!(text.contains("expandable_segments:True"));
}

#[test]
fn dash_and_stdin_name() {
    let out = run(
        &["-", "--stdin-name", "job-42.log", "--format", "json"],
        Some(&fixture(FRAG)),
    );
    let v = json(&out);
    assert_eq!(v["inputs"][0]["name"], "job-42.log");
    assert_eq!(v["incidents"][0]["location"]["input"], "job-42.log");
}

#[test]
fn json_contract() {
    let out = run(&[FRAG, "--format", "json"], None);
    assert_eq!(out.status.code(), Some(1));
    let v = json(&out);
    assert_eq!(v["schema_version"], 1);
    let inc = &v["incidents"][0];
    for key in [
        "cause",
        "confidence",
        "device",
        "engine",
        "phase",
        "requested_bytes",
        "evidence",
        "alternatives",
        "fixes",
    ] {
        assert!(inc.get(key).is_some(), "missing {key}");
    }
    assert_eq!(inc["cause"], "fragmentation");
    assert_eq!(inc["device"], 1);
    assert_eq!(inc["requested_bytes"], 2104533975u64);
    let c = inc["confidence"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&c));
    for e in inc["evidence"].as_array().unwrap() {
        assert!(e["input"].is_string() && e["line"].is_u64(), "{e}");
    }
    for (i, f) in inc["fixes"].as_array().unwrap().iter().enumerate() {
        assert_eq!(f["rank"], i + 1);
        assert!(f["title"].is_string() && f["action"].is_string());
    }
    for a in inc["alternatives"].as_array().unwrap() {
        assert!(a["cause"].is_string() && a["confidence"].is_f64());
    }
}

#[test]
fn no_incident_is_exit_zero_and_empty_list() {
    let out = run(
        &["--format", "json", "-"],
        Some(b"step 1 loss 2.0\nstep 2 loss 1.9\ndone\n"),
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json(&out)["incidents"], serde_json::json!([]));
    let out = run(&["-"], Some(b"all good\n"));
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no out-of-memory incident"));
}

#[test]
fn exit_zero_flag() {
    let out = run(&[FRAG, "--exit-zero"], None);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn gzip_is_transparent() {
    let dir = std::env::temp_dir().join(format!("oomdoctor-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gz = dir.join("crash.log.gz");
    std::fs::write(&gz, gzip(&fixture(FRAG))).unwrap();
    let plain = json(&run(&[FRAG, "--format", "json"], None));
    let zipped = json(&run(&[gz.to_str().unwrap(), "--format", "json"], None));
    assert_eq!(
        plain["incidents"][0]["cause"],
        zipped["incidents"][0]["cause"]
    );
    assert_eq!(
        plain["incidents"][0]["location"]["line"],
        zipped["incidents"][0]["location"]["line"]
    );
    assert_eq!(zipped["inputs"][0]["compressed"], true);
    // Also through stdin.
    let out = run(&["--format", "json"], Some(&gzip(&fixture(FRAG))));
    assert_eq!(json(&out)["incidents"][0]["cause"], "fragmentation");
}

#[test]
fn missing_file_is_exit_two_with_its_name() {
    let out = run(&["no/such/crash.log"], None);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no/such/crash.log") && err.contains("no such file"),
        "{err}"
    );
}

#[test]
fn corrupt_gzip_keeps_what_decoded_and_warns() {
    // A job killed mid-write leaves a cut `.gz`; the part that decodes is diagnosed (issue
    // 14: it used to be dropped with "no incident").
    let mut bad = gzip(&fixture(FRAG));
    let n = bad.len();
    bad.truncate(n / 2);
    bad.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let out = run(
        &["-", "--stdin-name", "broken.log.gz", "--format", "json"],
        Some(&bad),
    );
    assert!(
        matches!(out.status.code(), Some(0) | Some(1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    assert_eq!(v["inputs"][0]["name"], "broken.log.gz");
    let w = v["inputs"][0]["warnings"][0].as_str().unwrap();
    assert!(w.contains("gzip stream is cut"), "{w}");
}

#[test]
fn other_inputs_still_reported_when_one_fails() {
    let out = run(&[FRAG, "missing.log", "--format", "json"], None);
    assert_eq!(out.status.code(), Some(2));
    let v = json(&out);
    assert_eq!(v["incidents"].as_array().unwrap().len(), 1);
    assert_eq!(v["errors"][0]["input"], "missing.log");
}

#[test]
fn random_bytes_never_panic() {
    let mut state = 0x2545F4914F6CDD1Du64;
    let mut data = Vec::with_capacity(1 << 20);
    for _ in 0..(1 << 20) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        data.push((state >> 24) as u8);
    }
    // Sprinkle anchors so recognisers run on garbage around them.
    for (i, chunk) in data.chunks_mut(4096).enumerate() {
        let a: &[u8] = if i % 2 == 0 {
            b"out of memory. Tried to allocate "
        } else {
            b"Killed process "
        };
        chunk[100..100 + a.len()].copy_from_slice(a);
    }
    let out = run(&["-"], Some(&data));
    // Binary data with no incident found in it is refused, not a success (exit 2).
    assert!(
        matches!(out.status.code(), Some(0) | Some(1))
            || (out.status.code() == Some(2)
                && String::from_utf8_lossy(&out.stderr).contains("binary data")),
        "status {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn closed_stdout_ends_quietly() {
    let mut child = Command::new(BIN)
        .args([FRAG, "--explain"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        matches!(out.status.code(), Some(0) | Some(1)),
        "{:?}",
        out.status
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn explain_rules_and_facts() {
    let out = run(&["explain", "fragmentation"], None);
    assert_eq!(out.status.code(), Some(0));
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("torch-fragmentation"), "{t}");
    let out = run(&["explain", "torch-fragmentation"], None);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Signals"));
    let out = run(&["explain", "no-such-thing"], None);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["rules", "--format", "json"], None);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == "torch-fragmentation")
    );
    let out = run(&["facts"], None);
    assert!(String::from_utf8_lossy(&out.stdout).contains("oom.requested_bytes"));
}

#[test]
fn malformed_rule_file_points_at_its_line() {
    let dir = std::env::temp_dir().join(format!("oomdoctor-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("my-rule.toml"),
        "id = \"my-rule\"\ncause = \"fragmentation\"\ntitle = \"t\"\nexplanation = \"e\"\n[[signal]]\nwhen = \"oom.requested_byts > 1\"\nweight = 1\nsays = \"x\"\n",
    )
    .unwrap();
    let out = run(&[FRAG, "--rules", dir.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown fact `oom.requested_byts`") && err.contains("my-rule.toml:6"),
        "{err}"
    );
    assert!(err.contains("did you mean `oom.requested_bytes`"), "{err}");
}

#[test]
fn user_rule_overrides_builtin() {
    let dir = std::env::temp_dir().join(format!("oomdoctor-override-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("torch-fragmentation.toml"),
        "id = \"torch-fragmentation\"\ncause = \"fragmentation\"\ntitle = \"mine\"\nexplanation = \"e\"\napplies = \"false\"\n",
    )
    .unwrap();
    let out = run(
        &[FRAG, "--rules", dir.to_str().unwrap(), "--format", "json"],
        None,
    );
    assert_ne!(json(&out)["incidents"][0]["rule"], "torch-fragmentation");
}

#[test]
fn plan_exit_codes_and_json() {
    let out = run(
        &[
            "plan",
            "--model",
            "fixtures/models/llama-3.1-8b.json",
            "--gpu",
            "h100",
            "--engine",
            "vllm",
            "--context",
            "8192",
            "--format",
            "json",
        ],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    assert_eq!(v["fits"], true);
    assert_eq!(v["kv_cache_bytes_per_token"], 131072);
    for key in ["weights_bytes", "max_context_tokens", "settings"] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    let out = run(
        &[
            "plan",
            "--model",
            "fixtures/models/llama-2-13b.json",
            "--gpu",
            "24GiB",
            "--engine",
            "vllm",
            "--context",
            "4096",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let out = run(&["plan", "--model", "missing.json", "--gpu", "h100"], None);
    assert_eq!(out.status.code(), Some(2));
    let out = run(
        &[
            "plan",
            "--model",
            "fixtures/models/llama-3.1-8b.json",
            "--gpu",
            "not-a-gpu",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn model_geometry_joins_the_incident() {
    let out = run(
        &[
            FRAG,
            "--model",
            "fixtures/models/mistral-7b-v0.1.json",
            "--format",
            "json",
        ],
        None,
    );
    let v = json(&out);
    assert_eq!(v["inputs"][0]["kind"], "model");
    assert_eq!(v["incidents"][0]["facts"]["model.kv_heads"]["value"], 8);
    // A config given as an input works the same way.
    let out = run(
        &[
            FRAG,
            "fixtures/models/mistral-7b-v0.1.json",
            "--format",
            "json",
        ],
        None,
    );
    assert_eq!(
        json(&out)["incidents"][0]["facts"]["model.layers"]["value"],
        32
    );
}

/// `oomdoctor < job.log` on a log large enough to map is read as the named file is (the
/// same incidents on the same lines), and a standard input already read from (`(head -n 1;
/// oomdoctor) < job.log`) is read from where it stands, not from the file's start.
#[test]
fn a_large_log_redirected_to_stdin_reads_like_the_file_and_from_where_stdin_stands() {
    let dir = std::env::temp_dir().join(format!("oomdoctor-redirect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let first = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 2.10 GiB is free. Of the allocated memory 70.12 GiB is allocated by PyTorch, and 5.01 GiB is reserved by PyTorch but unallocated.\n";
    let mut log = first.as_bytes().to_vec();
    let mut step = 0;
    while log.len() < 9 << 20 {
        step += 1;
        log.extend_from_slice(format!("{{'loss': 1.{step:04}, 'grad_norm': 0.4, 'learning_rate': 2e-05, 'epoch': 0.{step}}}\n").as_bytes());
    }
    log.extend_from_slice(fixture(FRAG).as_slice());
    let whole = dir.join("whole.log");
    let tail = dir.join("tail.log");
    std::fs::write(&whole, &log).unwrap();
    std::fs::write(&tail, &log[first.len()..]).unwrap();

    let json = |args: &[&std::ffi::OsStr], stdin: Stdio| -> serde_json::Value {
        let out = Command::new(BIN)
            .args(["--format", "json"])
            .args(args)
            .stdin(stdin)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // What each incident is and where its evidence stands: the input's name differs.
        v["incidents"]
            .as_array()
            .expect("incidents")
            .iter()
            .map(|i| serde_json::json!([i["cause"], i["evidence"][0]["line"], i["summary"]]))
            .collect()
    };
    let named = json(&[whole.as_os_str()], Stdio::null());
    let redirected = json(&[], Stdio::from(std::fs::File::open(&whole).unwrap()));
    assert_eq!(redirected, named);
    assert_eq!(named.as_array().map(Vec::len), Some(2), "{named}");

    let mut read_from = std::fs::File::open(&whole).unwrap();
    std::io::Seek::seek(&mut read_from, std::io::SeekFrom::Start(first.len() as u64)).unwrap();
    let rest = json(&[], Stdio::from(read_from));
    assert_eq!(rest, json(&[tail.as_os_str()], Stdio::null()));
    assert_eq!(rest.as_array().map(Vec::len), Some(1), "{rest}");
    let _ = std::fs::remove_dir_all(&dir);
}
