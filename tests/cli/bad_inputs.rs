//! Inputs from strangers: whatever arrives, oomdoctor ends with the right exit code and a
//! clear message, never a panic or a hang, in bounded time.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_oomdoctor");
const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.69 GiB of which 1.00 GiB is free. Of the allocated memory 20.00 GiB is allocated by PyTorch, and 2.10 GiB is reserved by PyTorch but unallocated.";

fn run_stdin(data: Vec<u8>, args: &[&str]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

fn incidents(out: &Output) -> usize {
    json(out)["incidents"].as_array().unwrap().len()
}

#[test]
fn empty_input() {
    let out = run_stdin(vec![], &["--format", "json"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(incidents(&out), 0);
    assert_eq!(json(&out)["inputs"][0]["lines"], 0);
}

#[test]
fn nul_bytes_and_binary_junk_around_an_oom() {
    let mut data = vec![0u8; 10_000];
    data.extend_from_slice(b"\n\xff\xfe\x00garbage\x00\n");
    data.extend_from_slice(OOM.as_bytes());
    data.extend_from_slice(b"\n\x00\x00\x00");
    let out = run_stdin(data, &["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["incidents"][0]["cause"], "fragmentation");
}

#[test]
fn utf16_logs_with_and_without_bom() {
    let text = format!("step 1\r\n{OOM}\r\n");
    let mut le = vec![0xFF, 0xFE];
    le.extend(text.encode_utf16().flat_map(|u| u.to_le_bytes()));
    assert_eq!(incidents(&run_stdin(le, &["--format", "json"])), 1);
    let no_bom: Vec<u8> = text.encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
    assert_eq!(incidents(&run_stdin(no_bom, &["--format", "json"])), 1);
}

#[test]
fn crlf_lines() {
    let out = run_stdin(
        format!("a\r\nb\r\n{OOM}\r\n").into_bytes(),
        &["--format", "json"],
    );
    let v = json(&out);
    assert_eq!(v["incidents"][0]["location"]["line"], 3);
    assert!(!v["excerpts"][0]["text"].as_str().unwrap().ends_with('\r'));
}

#[test]
fn one_huge_line_without_newline() {
    // 64 MiB with an OOM message in the middle and no newline anywhere.
    let mut data = vec![b'x'; 32 << 20];
    data.extend_from_slice(b" ");
    data.extend_from_slice(OOM.as_bytes());
    data.extend_from_slice(b" ");
    data.extend(std::iter::repeat_n(b'y', 32 << 20));
    let started = std::time::Instant::now();
    let out = run_stdin(data, &["--format", "json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    assert_eq!(v["incidents"].as_array().unwrap().len(), 1);
    assert_eq!(v["incidents"][0]["requested_bytes"], 2147483648u64);
    assert_eq!(v["inputs"][0]["lines"], 1);
    // Excerpts stay bounded even though the line is 64 MiB.
    assert!(out.stdout.len() < 1 << 20);
    assert!(started.elapsed().as_secs() < 60);
}

#[test]
fn many_incidents_stay_bounded() {
    // 5,000 distinct OOMs far apart: capped at 1000 incidents, each folded or counted.
    let mut data = String::new();
    for i in 0..5000 {
        data.push_str(&OOM.replace("2.00 GiB. GPU", &format!("{}.00 MiB. GPU", 100 + i)));
        data.push('\n');
        for _ in 0..450 {
            data.push_str("noise\n");
        }
    }
    let out = run_stdin(data.into_bytes(), &["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(incidents(&out), 1000);
}

#[test]
fn packed_line_of_thousands_of_escaped_newlines() {
    let mut line = String::from("{\"log\": \"Traceback (most recent call last):");
    for _ in 0..20_000 {
        line.push_str("\\n  File \\\"x.py\\\", line 1, in f");
    }
    line.push_str("\\n");
    line.push_str(OOM);
    line.push_str("\"}\n");
    let out = run_stdin(line.into_bytes(), &["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
}
