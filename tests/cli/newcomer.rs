//! What a new user meets first, run as the binary: per-rank duplicates shown once, colour
//! and width that follow the terminal, the configuration file, `explain` without a topic,
//! directory globs, `--quiet`, `plan`'s model id, and the README's command examples, which
//! are run and compared here so the README cannot drift from what the tool prints.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_oomdoctor");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const FRAG: &str = "rules/torch-fragmentation/fires-hf-trainer-2ranks.log";

/// A fresh directory per test.
fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("oomdoctor-newcomer-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the binary in `dir` with stdin closed, no colour variables and no `COLUMNS`
/// unless `env` sets them, and no configuration file unless the directory has one.
fn run_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args)
        .current_dir(dir)
        .env_remove("NO_COLOR")
        .env_remove("COLUMNS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run oomdoctor")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A directory of four per-rank logs of one crash.
fn ranks_dir(name: &str) -> PathBuf {
    let d = tmp(name);
    let log = std::fs::read_to_string(Path::new(ROOT).join(FRAG)).unwrap();
    std::fs::create_dir_all(d.join("logs")).unwrap();
    for r in 0..4 {
        std::fs::write(d.join(format!("logs/rank{r}.log")), &log).unwrap();
    }
    d
}

#[test]
fn one_incident_on_every_rank_is_shown_once_with_its_files() {
    let d = ranks_dir("ranks");
    let out = run_in(&d, &["logs"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.matches("✖ fragmentation").count(), 1, "{text}");
    assert!(text.contains("4 incidents (1 distinct)"), "{text}");
    assert!(
        text.contains("also seen in logs/rank1.log:378, logs/rank2.log:378,"),
        "{text}"
    );
    assert!(text.contains("incidents 2, 3, 4"), "{text}");

    let md = stdout(&run_in(&d, &["logs", "--format", "markdown"], &[]));
    assert_eq!(md.matches("— confidence").count(), 1, "{md}");
    assert!(
        md.contains("| Also seen | also seen in `logs/rank1.log:378`")
            || md.contains("| Also seen | also seen in logs/rank1.log:378"),
        "{md}"
    );

    let out = run_in(&d, &["logs", "--format", "html", "-o", "r.html"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let html = std::fs::read_to_string(d.join("r.html")).unwrap();
    assert_eq!(html.matches("class=\"card verdict fail\"").count(), 1);
    assert_eq!(html.matches("id=\"incident-").count(), 1);
    assert!(html.contains("also seen in logs/rank1.log:378"));

    // JSON keeps every incident and says which are one problem.
    let v: serde_json::Value =
        serde_json::from_slice(&run_in(&d, &["logs", "-f", "json"], &[]).stdout).unwrap();
    assert_eq!(v["incidents"].as_array().unwrap().len(), 4);
    assert_eq!(
        v["repeats"][0]["incidents"],
        serde_json::json!([1, 2, 3, 4])
    );
    assert_eq!(v["repeats"][0]["locations"][3]["input"], "logs/rank3.log");
    assert_eq!(v["repeats"][0]["locations"][3]["line"], 378);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn help_and_errors_are_coloured_only_when_asked_or_on_a_terminal() {
    let root = Path::new(ROOT);
    let esc = |s: &str| s.contains('\x1b');
    let help = run_in(root, &["--help"], &[]);
    assert_eq!(help.status.code(), Some(0));
    assert!(!esc(&stdout(&help)), "--help piped is plain");
    assert!(!esc(&stdout(&run_in(
        root,
        &["--help"],
        &[("NO_COLOR", "1")]
    ))));
    assert!(esc(&stdout(&run_in(
        root,
        &["--help", "--color", "always"],
        &[]
    ))));
    // A command-line error, and an input error, follow --color.
    let bad = run_in(root, &["--format", "yaml", "--color", "always"], &[]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(esc(&stderr(&bad)));
    let bad = run_in(root, &["--format", "yaml", "--color", "never"], &[]);
    assert!(!esc(&stderr(&bad)), "{}", stderr(&bad));
    let missing = run_in(root, &["no-such.log", "--color", "always"], &[]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(esc(&stderr(&missing)));
    let missing = run_in(root, &["no-such.log", "--color=never"], &[]);
    assert!(!esc(&stderr(&missing)), "{}", stderr(&missing));
}

/// Lines wider than `w` columns, but for a single word too long for any line (a path).
fn too_wide(text: &str, w: usize) -> Vec<String> {
    text.lines()
        .filter(|l| l.chars().count() > w && l.trim().contains(' '))
        .map(str::to_string)
        .collect()
}

#[test]
fn human_output_follows_the_width() {
    let d = ranks_dir("width");
    std::fs::copy(Path::new(ROOT).join(FRAG), d.join("crash.log")).unwrap();
    // Piped, no COLUMNS: 80.
    let text = stdout(&run_in(&d, &["crash.log"], &[]));
    assert_eq!(too_wide(&text, 80), Vec::<String>::new(), "{text}");
    let text = stdout(&run_in(&d, &["logs"], &[]));
    assert_eq!(too_wide(&text, 80), Vec::<String>::new(), "{text}");
    // COLUMNS wins: wider and narrower.
    let wide = stdout(&run_in(&d, &["crash.log"], &[("COLUMNS", "140")]));
    assert!(!too_wide(&wide, 100).is_empty(), "{wide}");
    assert!(wide.lines().count() < text.lines().count());
    let narrow = stdout(&run_in(&d, &["crash.log"], &[("COLUMNS", "64")]));
    assert_eq!(too_wide(&narrow, 64), Vec::<String>::new(), "{narrow}");
    // Other rule fixtures, short file names: prose and snippets fit.
    for f in [
        "rules/kernel-oom-cgroup/fires-docker-memcg.log",
        "rules/vllm-no-kv-cache-blocks/fires-v1-7b-fp16-on-16g.log",
        "rules/torch-other-processes/fires-notebook-two-neighbours.log",
    ] {
        let src = Path::new(ROOT).join(f);
        if !src.exists() {
            continue;
        }
        std::fs::copy(&src, d.join("x.log")).unwrap();
        let text = stdout(&run_in(&d, &["x.log"], &[]));
        assert_eq!(too_wide(&text, 80), Vec::<String>::new(), "{f}:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn configuration_file_sets_defaults_and_the_command_line_wins() {
    let d = tmp("config");
    std::fs::copy(Path::new(ROOT).join(FRAG), d.join("crash.log")).unwrap();
    std::fs::write(
        d.join("pyproject.toml"),
        "[project]\nname = \"trainer\"\n\n[tool.oomdoctor]\nformat = \"json\"\nfail-on = [\"host-oom\"]\n",
    )
    .unwrap();
    let sub = d.join("src/pkg");
    std::fs::create_dir_all(&sub).unwrap();
    // Found upward from the working directory.
    let out = run_in(&sub, &["../../crash.log"], &[]);
    assert!(
        stdout(&out).trim_start().starts_with('{'),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "fail-on host-oom: fragmentation passes"
    );
    // Flags win over keys.
    let out = run_in(
        &sub,
        &[
            "../../crash.log",
            "--format",
            "human",
            "--fail-on",
            "fragmentation",
        ],
        &[],
    );
    assert!(stdout(&out).contains("✖ fragmentation"));
    assert_eq!(out.status.code(), Some(1));
    // --no-config reads nothing; --config names another file.
    let out = run_in(&sub, &["../../crash.log", "--no-config"], &[]);
    assert!(stdout(&out).contains("✖ fragmentation"));
    assert_eq!(out.status.code(), Some(1));
    std::fs::write(d.join("ci.toml"), "format = \"markdown\"\n").unwrap();
    let out = run_in(&sub, &["../../crash.log", "--config", "../../ci.toml"], &[]);
    assert!(
        stdout(&out).contains("### ✖ `fragmentation`"),
        "{}",
        stdout(&out)
    );
    // A nearer oomdoctor.toml wins over the pyproject.toml above it.
    std::fs::write(sub.join("oomdoctor.toml"), "format = \"github\"\n").unwrap();
    let out = run_in(&sub, &["../../crash.log"], &[]);
    assert!(stdout(&out).starts_with("::error"), "{}", stdout(&out));
    // A bad key names the file and the key; exit 2.
    std::fs::write(
        sub.join("oomdoctor.toml"),
        "format = \"json\"\nfail_on = \"host-oom\"\n",
    )
    .unwrap();
    let out = run_in(&sub, &["../../crash.log"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("oomdoctor.toml") && stderr(&out).contains("fail_on"),
        "{}",
        stderr(&out)
    );
    // Directory globs and redaction from the file.
    std::fs::remove_file(sub.join("oomdoctor.toml")).unwrap();
    let runs = d.join("runs");
    std::fs::create_dir_all(runs.join("old")).unwrap();
    std::fs::copy(Path::new(ROOT).join(FRAG), runs.join("rank0.log")).unwrap();
    std::fs::copy(Path::new(ROOT).join(FRAG), runs.join("old/rank0.log")).unwrap();
    std::fs::write(runs.join("notes.txt"), "nothing to see\n").unwrap();
    std::fs::write(
        d.join("oomdoctor.toml"),
        "glob = [\"*.log\"]\nexclude = [\"old\"]\nredact = [\"workspace\"]\nformat = \"json\"\n",
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&run_in(&d, &["runs"], &[]).stdout).unwrap();
    let names: Vec<&str> = v["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["runs/rank0.log"]);
    let out = run_in(&d, &["bundle", "runs"], &[]);
    assert!(
        stdout(&out).contains("[REDACTED]") && !stdout(&out).contains("/workspace/"),
        "{}",
        stdout(&out)
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn explain_lists_topics_and_suggests_near_names() {
    let root = Path::new(ROOT);
    let out = run_in(root, &["explain"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    for want in [
        "Causes:",
        "fragmentation",
        "Phases:",
        "backward",
        "oomdoctor rules",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    // The configuration flags go before or after a subcommand.
    let out = run_in(root, &["--no-config", "explain", "fragmentation"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("fragmentation — "));
    let out = run_in(root, &["explain", "frag"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("did you mean"), "{}", stderr(&out));
    assert!(stderr(&out).contains("`fragmentation`"), "{}", stderr(&out));
    let out = run_in(root, &["explain", "fragmentaton"], &[]);
    assert!(
        stderr(&out).contains("did you mean `fragmentation`?"),
        "{}",
        stderr(&out)
    );
}

/// The column, in display characters, where `needle` starts in `line`.
fn col(line: &str, needle: &str) -> usize {
    line[..line
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} in {line:?}"))]
        .chars()
        .count()
}

#[test]
fn nvidia_smi_values_are_underlined_where_they_are() {
    let root = Path::new(ROOT);
    // The leak series: every evidence row of it, its label's underline under the cell.
    let out = run_in(
        root,
        &["fixtures/series/smi-leak-2gpu.csv", "--color", "never"],
        &[],
    );
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    let mut checked = 0;
    for (i, l) in lines.iter().enumerate() {
        if !l.contains(" │ ") || !l.contains("MiB") {
            continue;
        }
        let (Some(under), Some(label)) = (lines.get(i + 1), lines.get(i + 2)) else {
            continue;
        };
        let (Some(a), Some(b)) = (under.find('─'), under.rfind('─')) else {
            continue;
        };
        let (from, to) = (under[..a].chars().count(), under[..b].chars().count() + 1);
        let shown: String = l.chars().skip(from).take(to - from).collect();
        let expect = if label.contains("used at failure") {
            "23006 MiB"
        } else if label.contains("total") {
            "23028 MiB"
        } else if label.contains("since load") {
            "2025/09/07 22:00:34.115"
        } else {
            continue;
        };
        assert_eq!(shown, expect, "underline of {label:?}:\n{l}\n{under}");
        assert_eq!(from, col(l, expect));
        checked += 1;
    }
    assert_eq!(checked, 3, "{text}");
    // The per-process table (`--query-compute-apps`) too: its value is `used_memory`.
    let d = tmp("smi-span");
    let apps = d.join("apps.csv");
    let mut csv = String::from("timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n");
    for k in 0..40 {
        csv += &format!(
            "2025/09/07 21:{:02}:00.000, GPU-aaaa, 4242, python, {} MiB\n",
            k,
            1000 + k * 500
        );
    }
    std::fs::write(&apps, csv).unwrap();
    let json = stdout(&run_in(&d, &["apps.csv", "-f", "json"], &[]));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let excerpts = v["excerpts"].as_array().cloned().unwrap_or_default();
    let mut spans = 0;
    for inc in v["incidents"].as_array().unwrap() {
        for (name, f) in inc["facts"].as_object().unwrap() {
            for s in f["sources"].as_array().into_iter().flatten() {
                let (Some(line), Some(span)) = (s["line"].as_u64(), s["span"].as_array()) else {
                    continue;
                };
                let text = excerpts
                    .iter()
                    .find(|e| e["input"] == s["input"] && e["line"] == line)
                    .and_then(|e| e["text"].as_str())
                    .unwrap_or_else(|| panic!("no excerpt for {name}"));
                let (a, b) = (
                    span[0].as_u64().unwrap() as usize,
                    span[1].as_u64().unwrap() as usize,
                );
                let cell = &text[a..b];
                assert!(
                    cell.ends_with(" MiB") || cell.starts_with("2025/09/07"),
                    "{name}: span {a}..{b} is {cell:?} in {text:?}"
                );
                spans += 1;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&d);
    let _ = spans; // a single process's climb may raise no incident; the leak series did.
}

#[test]
fn naive_times_are_shown_without_a_zone_in_every_format() {
    let root = Path::new(ROOT);
    let naive = "fixtures/series/smi-leak-2gpu.csv"; // nvidia-smi: local time, no zone
    let zoned = "fixtures/series/dcgm-leak.prom"; // epoch milliseconds: UTC
    for format in ["human", "markdown", "json", "html"] {
        let out = run_in(
            root,
            &[naive, "-f", format, "-o", "-", "--color", "never"],
            &[],
        );
        let text = stdout(&out);
        assert!(text.contains("2025-09-08"), "{format}: {text:.400}");
        for (i, _) in text.match_indices("2025-09-0") {
            let t = &text[i..(i + 30).min(text.len())];
            let end = t
                .find(|c: char| !(c.is_ascii_digit() || "-:.T ".contains(c)))
                .unwrap_or(t.len());
            assert!(
                !t[end..].starts_with('Z') && !t[..end].ends_with(" UTC"),
                "{format}: a naive time shown with a zone: {t:?}"
            );
        }
        let out = run_in(
            root,
            &[zoned, "-f", format, "-o", "-", "--color", "never"],
            &[],
        );
        let text = stdout(&out);
        let zoned_times = text.matches("Z ..").count()
            + text.matches(" UTC").count()
            + text.matches("Z\"").count()
            + text.matches("Z)").count();
        assert!(
            zoned_times > 0,
            "{format}: a zoned time keeps its zone: {text:.600}"
        );
    }
}

#[test]
fn small_things() {
    let d = tmp("small");
    // "1 line", not "1 lines".
    std::fs::write(d.join("one.log"), "epoch 1 done\n").unwrap();
    let out = run_in(&d, &["one.log"], &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).contains("one.log (1 line)"),
        "{}",
        stdout(&out)
    );
    // --glob / --exclude on the command line.
    std::fs::create_dir_all(d.join("runs")).unwrap();
    for n in ["rank0.log", "rank1.log", "gpu.txt"] {
        std::fs::copy(Path::new(ROOT).join(FRAG), d.join("runs").join(n)).unwrap();
    }
    let v: serde_json::Value = serde_json::from_slice(
        &run_in(
            &d,
            &[
                "runs",
                "--glob",
                "*.log",
                "--exclude",
                "rank1*",
                "-f",
                "json",
            ],
            &[],
        )
        .stdout,
    )
    .unwrap();
    assert_eq!(v["inputs"].as_array().unwrap().len(), 1);
    assert_eq!(v["inputs"][0]["name"], "runs/rank0.log");
    let out = run_in(&d, &["runs", "--glob", "*.csv"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--glob"), "{}", stderr(&out));
    // --quiet: a line per distinct incident.
    let out = run_in(&d, &["runs", "--quiet"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with("✖ fragmentation 0.") && text.contains("(seen in 3 places)"),
        "{text}"
    );
    assert_eq!(stdout(&run_in(&d, &["one.log", "-q"], &[])), "");
    // plan names the model by its Hub id, or its folder as a path.
    std::fs::create_dir_all(d.join("model")).unwrap();
    let cfg =
        std::fs::read_to_string(Path::new(ROOT).join("fixtures/models/llama-3.1-8b.json")).unwrap();
    let no_id: String = cfg
        .lines()
        .filter(|l| !l.contains("_name_or_path"))
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(d.join("model/config.json"), &no_id).unwrap();
    let out = run_in(
        &d,
        &[
            "plan", "--model", "model", "--gpu", "h100", "--engine", "vllm",
        ],
        &[],
    );
    assert!(
        stdout(&out).contains("$ vllm serve ./model "),
        "{}",
        stdout(&out)
    );
    let cache = d.join("hub/models--meta-llama--Llama-3.1-8B/snapshots/0e9e39f");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::write(cache.join("config.json"), &no_id).unwrap();
    let out = run_in(
        &d,
        &[
            "plan",
            "--model",
            cache.to_str().unwrap(),
            "--gpu",
            "h100",
            "--engine",
            "vllm",
        ],
        &[],
    );
    assert!(
        stdout(&out).contains("$ vllm serve meta-llama/Llama-3.1-8B "),
        "{}",
        stdout(&out)
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// One `$ command` of a README ```console block and the output shown under it.
struct Example {
    line: usize,
    command: String,
    expected: Vec<String>,
}

/// The ```console (or ~~~console, for output holding ``` fences) blocks of a markdown file.
fn readme_examples(text: &str) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let Some(f) = fence else {
            fence = ["```", "~~~"]
                .into_iter()
                .find(|f| line.trim_end() == format!("{f}console"));
            continue;
        };
        if line.trim_end() == f {
            fence = None;
        } else if let Some(cmd) = line.strip_prefix("$ ") {
            out.push(Example {
                line: i + 1,
                command: cmd.to_string(),
                expected: Vec::new(),
            });
        } else if let Some(e) = out.last_mut() {
            e.expected.push(line.to_string());
        }
    }
    out
}

/// Whether `actual` is what `expected` shows: line for line, where a line of only `…`
/// stands for any number of lines.
fn shows(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((e, rest)) if e.trim() == "…" => {
            (0..=actual.len()).any(|k| shows(rest, &actual[k..]))
        }
        Some((e, rest)) => actual
            .split_first()
            .is_some_and(|(a, arest)| a.trim_end() == e.trim_end() && shows(rest, arest)),
    }
}

/// Every ```console example of the README runs, in a directory holding the files it names,
/// and prints what the README shows (colour off, output piped: 80 columns).
#[test]
fn readme_examples_print_what_the_readme_shows() {
    let root = Path::new(ROOT);
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let examples = readme_examples(&readme);
    assert!(examples.len() >= 4, "README has console examples");
    let d = tmp("readme");
    std::os::unix::fs::symlink(root.join("fixtures"), d.join("fixtures")).unwrap();
    std::fs::copy(root.join(FRAG), d.join("crash.log")).unwrap();
    let leak = root.join("rules/series-steady-growth/fires-ambiguous-log-and-smi");
    std::fs::copy(leak.join("train.log"), d.join("train.log")).unwrap();
    std::fs::copy(leak.join("gpu.csv"), d.join("gpu.csv")).unwrap();
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut failures = Vec::new();
    for e in &examples {
        let out = Command::new("sh")
            .arg("-c")
            .arg(&e.command)
            .current_dir(&d)
            .env("PATH", &path)
            .env("NO_COLOR", "1")
            .env_remove("COLUMNS")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = stdout(&out);
        let actual: Vec<&str> = text.lines().collect();
        if !shows(&e.expected, &actual) {
            failures.push(format!(
                "README.md:{}: `{}` printed:\n{text}\n--- the README shows:\n{}\n",
                e.line,
                e.command,
                e.expected.join("\n")
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&d);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
