//! Broken input never costs the user what it did hold, and never yields a false success:
//! a `.gz` log cut mid-write is diagnosed from the part that decodes, `-o` cannot overwrite
//! an input, a report saved into a diagnosed directory is not read back, an unreadable
//! input never prints "no incident found", and special files are skipped, not read.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_oomdoctor");
const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.69 GiB of which 1.00 GiB is free. Of the allocated memory 20.00 GiB is allocated by PyTorch, and 2.10 GiB is reserved by PyTorch but unallocated.";

fn tmp(name: &str) -> PathBuf {
    common::tmp_dir("broken", name)
}

fn run<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    common::run_bin(args)
}

fn os(s: &str) -> &std::ffi::OsStr {
    s.as_ref()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// A log with an OOM near its start and plenty after it, gzipped.
fn long_log() -> Vec<u8> {
    let mut log = String::from("step 1 loss 2.5\n");
    log.push_str(OOM);
    log.push('\n');
    for i in 0..20_000 {
        // Varied text so the compressed stream is long enough to cut in its middle.
        log.push_str(&format!("after the crash {i} {}\n", i * 7919 % 10007));
    }
    log.into_bytes()
}

#[test]
fn a_gzip_log_cut_mid_write_keeps_what_decoded() {
    let dir = tmp("gz");
    let gz = gzip(&long_log());
    for cut in [gz.len() / 2, gz.len() - 9, gz.len() - 1] {
        let p = dir.join(format!("job-{cut}.log.gz"));
        std::fs::write(&p, &gz[..cut]).unwrap();
        let out = run(&[p.as_os_str(), os("--format"), os("json")]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["incidents"].as_array().unwrap().len(), 1);
        let w = v["inputs"][0]["warnings"][0].as_str().unwrap();
        assert!(
            w.contains("cut after") && !w.contains("after 0 bytes"),
            "{w}"
        );
        let human = run(&[p.as_os_str(), os("--color"), os("never")]);
        assert!(text(&human.stdout).contains("gzip stream is cut"));
    }
    // Cut inside the header: nothing decoded, so it is an error, not an empty success.
    let p = dir.join("head.log.gz");
    std::fs::write(&p, &gz[..6]).unwrap();
    let out = run(&[p.as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("gzip"), "{}", text(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_gzip_snapshot_cut_short_is_an_error() {
    let dir = tmp("gzsnap");
    // A pickle's protocol header, then enough data to cut in the middle of the stream.
    let mut pickle = vec![0x80, 0x04, b'}', b'q', 0];
    pickle.extend(std::iter::repeat_n(b'N', 100_000));
    let gz = gzip(&pickle);
    let p = dir.join("snap.pickle.gz");
    std::fs::write(&p, &gz[..gz.len() - 4]).unwrap();
    let out = run(&[p.as_os_str()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("gzip"), "{}", text(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn output_naming_an_input_is_refused() {
    let dir = tmp("output");
    let log = dir.join("job.log");
    std::fs::write(&log, format!("{OOM}\n")).unwrap();
    let before = std::fs::read(&log).unwrap();
    // The same file by another spelling, too.
    let other = dir.join(".").join("job.log");
    for out_path in [&log, &other] {
        for cmd in [vec![], vec!["bundle"]] {
            let mut args: Vec<&std::ffi::OsStr> = cmd.iter().map(|x| os(x)).collect();
            args.extend([log.as_os_str(), os("-o"), out_path.as_os_str()]);
            let out = run(&args);
            assert_eq!(out.status.code(), Some(2), "{cmd:?}");
            let err = text(&out.stderr);
            assert!(err.contains("also an input"), "{err}");
            assert_eq!(
                std::fs::read(&log).unwrap(),
                before,
                "{cmd:?} overwrote the log"
            );
        }
    }
    // A log inside a directory input is an input too.
    let out = run(&[dir.as_os_str(), os("-o"), log.as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read(&log).unwrap(), before);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn reports_written_into_a_directory_are_not_read_again() {
    let dir = tmp("reports");
    std::fs::write(dir.join("job.log"), format!("step 1\n{OOM}\n")).unwrap();
    let formats = [
        "human", "json", "markdown", "github", "sarif", "junit", "html",
    ];
    for f in formats {
        let out = run(&[
            dir.as_os_str(),
            os("--format"),
            os(f),
            os("-o"),
            dir.join(format!("report-{f}.txt")).as_os_str(),
        ]);
        assert_eq!(out.status.code(), Some(1), "{f}: {}", text(&out.stderr));
    }
    let out = run(&[
        os("bundle"),
        dir.as_os_str(),
        os("-o"),
        dir.join("bundle.md").as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Writing a report over an earlier report in the directory is fine.
    let again = run(&[
        dir.as_os_str(),
        os("-o"),
        dir.join("report-human.txt").as_os_str(),
    ]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again.stderr));
    let out = run(&[dir.as_os_str(), os("--format"), os("json")]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["incidents"].as_array().unwrap().len(), 1, "{v:#}");
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(
        skipped.iter().filter(|s| s["kind"] == "report").count(),
        formats.len() + 1,
        "{skipped:#?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unreadable_input_never_prints_a_success_line() {
    let dir = tmp("nosuccess");
    let missing = dir.join("missing.log");
    let ok = dir.join("ok.log");
    std::fs::write(&ok, "nothing to see\n").unwrap();
    for args in [
        vec![missing.as_path()],
        vec![ok.as_path(), missing.as_path()],
    ] {
        for format in ["human", "markdown", "github"] {
            let mut a: Vec<&std::ffi::OsStr> = args.iter().map(|p| p.as_os_str()).collect();
            a.extend([os("--format"), os(format)]);
            let out = run(&a);
            assert_eq!(out.status.code(), Some(2));
            let stdout = text(&out.stdout);
            assert!(
                !stdout.contains("no out-of-memory incident found"),
                "{format}: {stdout}"
            );
            assert!(stdout.contains("could not"), "{format}: {stdout}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn has(p: &Path) -> bool {
    p.exists()
}

#[test]
fn binary_file_named_directly_is_not_a_log_with_no_incident() {
    let dir = tmp("binary");
    let p = dir.join("model.bin");
    let mut data = Vec::new();
    for i in 0..50_000u32 {
        data.extend_from_slice(&i.wrapping_mul(2_654_435_761).to_le_bytes());
    }
    std::fs::write(&p, &data).unwrap();
    assert!(has(&p));
    let out = run(&[p.as_os_str()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("binary"),
        "{}",
        text(&out.stderr)
    );
    // Forced as a log, it is read as one.
    let out = run(&[p.as_os_str(), os("--input-kind"), os("log")]);
    assert_eq!(out.status.code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs with a deadline: a reader that never ends must not hang the test suite.
fn run_bounded(args: &[&std::ffi::OsStr]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            panic!("{args:?} did not finish in 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[cfg(unix)]
#[test]
fn endless_and_special_files_are_never_read() {
    let zero = Path::new("/dev/zero");
    if !zero.exists() {
        eprintln!("skipped: no /dev/zero");
        return;
    }
    let dir = tmp("special");
    let log = dir.join("job.log");
    std::fs::write(&log, format!("{OOM}\n")).unwrap();
    // `plan --model /dev/zero`, and the same file as a diagnosis's --model.
    let out = run_bounded(&[
        os("plan"),
        os("--model"),
        zero.as_os_str(),
        os("--gpu"),
        os("H100"),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("not a regular file"),
        "{}",
        text(&out.stderr)
    );
    let out = run_bounded(&[log.as_os_str(), os("--model"), zero.as_os_str()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    // A rules directory holding a link to /dev/zero, then one holding a FIFO: neither is
    // read (it would never end, or block forever); each is skipped with a note and the run
    // goes on with the other rules.
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::os::unix::fs::symlink(zero, rules.join("zero.toml")).unwrap();
    let out = run_bounded(&[log.as_os_str(), os("--rules"), rules.as_os_str()]);
    assert_ne!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("skipped") && text(&out.stderr).contains("zero.toml"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("device-oom"),
        "{}",
        text(&out.stdout)
    );
    std::fs::remove_file(rules.join("zero.toml")).unwrap();
    let fifo = rules.join("x.toml");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        let out = run_bounded(&[log.as_os_str(), os("--rules"), rules.as_os_str()]);
        assert_ne!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("skipped") && text(&out.stderr).contains("x.toml"),
            "{}",
            text(&out.stderr)
        );
    } else {
        eprintln!("skipped the FIFO case: no mkfifo");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A gzip snapshot that is a pickle header and then gigabytes of zeros: the read stops at
/// the first bad opcode instead of buffering everything first. Run under a 1.5 GB address
/// space limit, buffering the 3 GiB it decompresses to would abort instead of exiting 2.
#[cfg(target_os = "linux")]
#[test]
fn a_gzip_bomb_snapshot_stops_at_the_first_bad_byte() {
    let dir = tmp("bomb");
    let zeros = vec![0u8; 64 << 20];
    let mut first = vec![0x80, 0x04];
    first.extend_from_slice(&zeros);
    // Members of a gzip stream are read one after another: 48 copies of one 64 MiB member
    // make 3 GiB without compressing 3 GiB here.
    let mut bomb = gzip(&first);
    let member = gzip(&zeros);
    for _ in 0..47 {
        bomb.extend_from_slice(&member);
    }
    assert!(bomb.len() < 8 << 20, "{}", bomb.len());
    let p = dir.join("snapshot.pickle.gz");
    std::fs::write(&p, &bomb).unwrap();
    let script = format!("ulimit -v 1500000 && exec \"{BIN}\" \"$1\"");
    let mut child = Command::new("sh")
        .args(["-c", &script, "sh"])
        .arg(&p)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the bomb was read for a minute");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("byte 2"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Files that are pickles or archives but not one memory snapshot say what they are and
/// exit 2, instead of "no incident" (exit 0) or a misleading parse error.
#[test]
fn pickles_and_archives_that_are_not_a_snapshot_say_what_they_are() {
    let dir = tmp("notsnap");
    // PROTO 4, an empty dict, STOP: a complete pickle.
    let one: &[u8] = b"\x80\x04}.";
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "trailing.pickle",
            [one, b"garbage"].concat(),
            "follow the end of the pickle",
        ),
        (
            "two.pickle",
            [one, one].concat(),
            "follow the end of the pickle",
        ),
        ("leftover.pickle", b"\x80\x04}}.".to_vec(), "on its stack"),
        (
            "model.pt",
            [
                &b"PK\x03\x04\x14\x00\x00\x00\x00\x00"[..],
                &[0u8; 64],
                b"archive/data.pkl",
            ]
            .concat(),
            "zip archive",
        ),
        (
            "double.pickle.gz",
            gzip(&gzip(one)),
            "gzip data inside gzip",
        ),
    ];
    for (name, data, says) in cases {
        let p = dir.join(name);
        std::fs::write(&p, &data).unwrap();
        let out = run(&[p.as_os_str()]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        assert!(!text(&out.stdout).contains("no out-of-memory incident found"));
    }
    // A zip forced as a snapshot says it is a zip, not an opcode error.
    let out = run(&[
        dir.join("model.pt").as_os_str(),
        os("--input-kind"),
        os("snapshot"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("zip archive"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rows of a series that cannot be read are counted and placed, not dropped in silence.
#[test]
fn skipped_series_rows_are_counted() {
    let dir = tmp("rows");
    let mut csv = String::from("timestamp, index, memory.used [MiB], memory.total [MiB]\n");
    for i in 0..40 {
        if i == 7 || i == 20 {
            csv.push_str("garbage, row, here, !\n");
        } else {
            csv.push_str(&format!(
                "2026/05/02 08:00:{:02}.000, 0, {} MiB, 81559 MiB\n",
                i,
                1000 + i * 10
            ));
        }
    }
    let p = dir.join("gpu.csv");
    std::fs::write(&p, csv).unwrap();
    let out = run(&[p.as_os_str(), os("--format"), os("json")]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    assert_eq!(v["inputs"][0]["kind"], "series", "{v:#}");
    let w = v["inputs"][0]["warnings"][0].as_str().unwrap_or_default();
    assert!(w.starts_with("2 of 40 rows could not be read"), "{v:#}");
    assert!(w.contains("line 9"), "{w}");
    let _ = std::fs::remove_dir_all(&dir);
}
