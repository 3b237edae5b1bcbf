//! Text from inputs never reaches a terminal with a control character in it: whatever a log
//! line, a file name, a process name or an error message holds, every format prints it
//! with C0/C1 controls made visible (or escaped losslessly in JSON and XML), and the GitHub
//! output never lets input text start a workflow command.

use crate::common;

use std::process::Output;

/// Escape sequences that nest, so a single stripping pass rebuilds working ones; C1 forms;
/// BEL, backspace and a carriage return in mid-line; bidi overrides.
const HOSTILE: &str = "\x1b\x1b[0m]0;pwned\x07 \x1b[\x1b]2J \x1b]52;c;aGVsbG8=\x07 \u{9b}2J \u{9d}0;t\u{9c} over\x08\x08\x08\rXX \u{202e}gnp.exe \x7f";

fn tmp(name: &str) -> std::path::PathBuf {
    common::tmp_dir("hostile", name)
}

fn run(args: &[&std::ffi::OsStr]) -> Output {
    common::run_bin(args)
}

/// A crash log whose OOM line, traceback and kernel kill carry the hostile text.
fn hostile_log() -> String {
    format!(
        "step 1 {HOSTILE}\n\
         Traceback (most recent call last):\n  File \"train.py\", line 3, in <module> {HOSTILE}\n\
         torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.69 GiB of which 1.00 GiB is free. Of the allocated memory 20.00 GiB is allocated by PyTorch, and 2.10 GiB is reserved by PyTorch but unallocated. {HOSTILE}\n\
         [ 9000.000013] Out of memory: Killed process 4242 (##[error]\x1b]0;x\x07) total-vm:120123456kB, anon-rss:31000000kB, file-rss:12000kB, shmem-rss:0kB, UID:0 pgtables:61440kB oom_score_adj:0\n\
         {HOSTILE}\n"
    )
}

/// Every control character but newline and tab, with SGR colour codes allowed or not.
fn assert_clean(what: &str, text: &str, allow_sgr: bool) {
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if allow_sgr && c == '\x1b' {
            let tail = &rest[1..];
            let n = tail.strip_prefix('[').map(|t| {
                t.bytes()
                    .take_while(|b| b.is_ascii_digit() || *b == b';')
                    .count()
            });
            if let Some(n) = n {
                if tail.as_bytes().get(1 + n) == Some(&b'm') {
                    rest = &tail[2 + n..];
                    continue;
                }
            }
        }
        let u = c as u32;
        let bad = (u < 0x20 && c != '\n' && c != '\t')
            || (0x7f..=0x9f).contains(&u)
            || (0x202a..=0x202e).contains(&u);
        assert!(
            !bad,
            "{what}: U+{u:04X} reached the output near {:?}",
            &rest[..rest.len().min(40)]
        );
        rest = &rest[c.len_utf8()..];
    }
}

#[test]
fn no_control_character_reaches_any_format() {
    let dir = tmp("formats");
    // The file name is hostile too.
    let log = dir.join("crash\x1b]0;title\x07\u{9b}2J.log");
    std::fs::write(&log, hostile_log()).unwrap();
    for format in ["human", "markdown", "github", "json", "sarif", "junit"] {
        for color in ["never", "always"] {
            let out = run(&[
                log.as_os_str(),
                "--format".as_ref(),
                format.as_ref(),
                "--color".as_ref(),
                color.as_ref(),
            ]);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{format}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let stdout = String::from_utf8(out.stdout).unwrap();
            let coloured = format == "human" && color == "always";
            assert_clean(&format!("{format} --color {color}"), &stdout, coloured);
            assert_clean(
                &format!("{format} stderr"),
                &String::from_utf8_lossy(&out.stderr),
                false,
            );
            if format == "human" {
                // Made visible, not silently dropped.
                assert!(stdout.contains('␛'), "{stdout}");
            }
            if format == "json" || format == "sarif" {
                // Lossless: the JSON still says what the input said.
                let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                assert!(v.to_string().contains("\\u001b") || format == "sarif");
            }
        }
    }
    let html = dir.join("report.html");
    let out = run(&[
        log.as_os_str(),
        "--format".as_ref(),
        "html".as_ref(),
        "-o".as_ref(),
        html.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_clean("html", &std::fs::read_to_string(&html).unwrap(), false);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn github_output_never_starts_a_command_from_input_text() {
    let dir = tmp("github");
    let log = dir.join("job.log");
    std::fs::write(&log, hostile_log()).unwrap();
    let out = run(&[log.as_os_str(), "--format".as_ref(), "github".as_ref()]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    for line in stdout.lines() {
        let t = line.trim_start();
        if let Some(cmd) = t.strip_prefix("::") {
            // Only our own commands.
            let name = cmd.split([' ', ':']).next().unwrap_or("");
            assert!(
                ["error", "warning", "notice", "group", "endgroup"].contains(&name),
                "{line}"
            );
        }
        assert!(!t.starts_with("##"), "legacy command form: {line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn error_messages_on_stderr_are_clean() {
    let dir = tmp("errors");
    // A missing file whose name would set the window title.
    let missing = dir.join("gone\x1b]0;pwned\x07\u{9d}.log");
    let out = run(&[missing.as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("gone␛]0;pwned␇"), "{stderr}");
    assert_clean("stderr", &stderr, false);
    assert_clean("stdout", &String::from_utf8_lossy(&out.stdout), false);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Generated hostile logs (control characters, C1 forms, broken escape sequences around
/// real OOM anchors, a hostile input name) through the whole path and the three text
/// renderers, in process: nothing but newline, tab and (coloured) SGR codes comes out.
/// The fuzz target `render_hostile` runs the same check on arbitrary bytes.
#[test]
fn generated_hostile_logs_never_leak_a_control_character() {
    let rules = oomdoctor::diagnosis::rules::RuleSet::builtin().unwrap();
    let pieces: &[&str] = &[
        "\x1b",
        "\x1b[",
        "\x1b]",
        "]0;",
        "\x07",
        "\x08",
        "\r",
        "\u{9b}",
        "\u{9d}",
        "\u{9c}",
        "\x7f",
        "\x00",
        "2J",
        "52;c;",
        "m",
        ";",
        "[",
        " ",
        "\t",
        "\u{202e}",
        "##[error]",
        "::",
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.69 GiB of which 1.00 GiB is free. ",
        "Out of memory: Killed process 4242 (",
        ") total-vm:120123456kB, anon-rss:31000000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:61440kB oom_score_adj:0",
    ];
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut incidents = 0;
    for round in 0..40 {
        let mut log = String::new();
        for _ in 0..60 {
            for _ in 0..(next() % 12) {
                log.push_str(pieces[(next() % pieces.len() as u64) as usize]);
            }
            log.push('\n');
        }
        let name: std::sync::Arc<str> =
            std::sync::Arc::from(format!("r{round}\x1b]0;t\x07\u{9b}.log"));
        let (evidence, _) =
            oomdoctor::ingest::log::grouping::analyze_log(&mut log.as_bytes(), &name).unwrap();
        let mut d = oomdoctor::diagnosis::report::Diagnosis::new();
        d.incidents = oomdoctor::diagnosis::verdict::finish(
            evidence
                .incidents
                .iter()
                .map(|i| oomdoctor::diagnosis::verdict::diagnose(i, &rules))
                .collect(),
        );
        d.collect_excerpts();
        incidents += d.incidents.len();
        for color in [false, true] {
            let style = oomdoctor::render::human::Style { color, width: 80 };
            let out = oomdoctor::render::human::render(&d, &style, true);
            assert_clean(&format!("round {round} human {color}"), &out, color);
        }
        let md =
            oomdoctor::render::markdown::render(&d, &oomdoctor::render::markdown::Options::new());
        assert_clean(&format!("round {round} markdown"), &md, false);
        let gh = oomdoctor::render::github::render(&d, &oomdoctor::render::Policy::default());
        assert_clean(&format!("round {round} github"), &gh, false);
    }
    assert!(
        incidents > 20,
        "the generated logs must reach the renderers: {incidents}"
    );
}
