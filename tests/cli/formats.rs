//! Every output format, validated as the tools that read it would: SARIF and JSON parse
//! (SARIF 2.1.0's required shape), JUnit is well-formed XML, markdown tables and fences are
//! balanced, GitHub workflow commands point at the log lines and the step summary is
//! appended, the HTML loads nothing from the network (and renders in headless Chromium where
//! one is installed). Then directory inputs, `--fail-on`, fingerprints, bundles with
//! redaction, completions and the man page.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_oomdoctor");
const FRAG: &str = "rules/torch-fragmentation/fires-hf-trainer-2ranks.log";
const LEAK: &str = "rules/torch-leak-after-many-steps/fires-memory-creeps-up.log";
const KILLED: &str = "rules/process-killed/fires-bash-killed-while-loading.log";
const CLEAN: &str = "rules/process-killed/not-oom-terminated-by-timeout.log";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn run_env(args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .env_remove("GITHUB_STEP_SUMMARY")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run oomdoctor");
    if let Some(data) = stdin {
        let mut s = child.stdin.take().unwrap();
        let data = data.to_vec();
        std::thread::spawn(move || {
            let _ = s.write_all(&data);
        });
    }
    child.wait_with_output().unwrap()
}

fn run(args: &[&str]) -> Output {
    run_env(args, None, &[])
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

/// A fresh directory under the target dir for one test.
fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("formats-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

// ---------------------------------------------------------------------------------------
// Markdown and GitHub.

/// Fences open and close, and every table row has as many cells as its header.
fn check_markdown(md: &str) {
    let mut fence: Option<String> = None;
    let mut table_cols: Option<usize> = None;
    for line in md.lines() {
        let t = line.trim_start();
        if let Some(f) = &fence {
            if t.starts_with(f.as_str()) && t.trim_end().chars().all(|c| c == '`') {
                fence = None;
            }
            continue;
        }
        if t.starts_with("```") {
            fence = Some(t.chars().take_while(|c| *c == '`').collect());
            continue;
        }
        if t.starts_with('|') {
            // Cells split at pipes that are not escaped.
            let cells = t
                .replace("\\|", "")
                .trim()
                .trim_matches('|')
                .split('|')
                .count();
            match table_cols {
                None => table_cols = Some(cells),
                Some(n) => assert_eq!(n, cells, "ragged table row: {line}"),
            }
        } else {
            table_cols = None;
        }
    }
    assert!(fence.is_none(), "unclosed code fence");
}

#[test]
fn markdown_report() {
    let out = run(&[FRAG, "--format", "markdown"]);
    assert_eq!(out.status.code(), Some(1));
    let md = stdout(&out);
    check_markdown(&md);
    assert!(md.starts_with("## oomdoctor: 1 incident"), "{md}");
    assert!(md.contains("### ✖ `fragmentation` — confidence "), "{md}");
    assert!(md.contains("| Weight | Evidence | Line |"));
    assert!(
        md.lines()
            .any(|l| l.starts_with("| +") && l.contains(" | 8.47 GiB was reserved"))
    );
    assert!(md.contains("1. **Let the allocator grow segments in place"));
    assert!(md.contains("   export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
    assert!(md.contains("<details><summary>Key log lines"));
    assert!(md.contains("| Fingerprint | `"));
    // Log text that looks like HTML stays literal.
    let out = run_env(
        &["-", "--format", "markdown"],
        Some(
            b"  File \"x.py\", line 3, in <module>\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.69 GiB of which 1.00 GiB is free. Of the allocated memory 20.00 GiB is allocated by PyTorch, and 2.10 GiB is reserved by PyTorch but unallocated.\n",
        ),
        &[],
    );
    check_markdown(&stdout(&out));
}

#[test]
fn github_annotations_and_step_summary() {
    let dir = scratch("github");
    let summary = dir.join("summary.md");
    std::fs::write(&summary, "# earlier step\n").unwrap();
    let s = summary.to_str().unwrap();
    let out = run_env(
        &[FRAG, KILLED, "--format", "github"],
        None,
        &[("GITHUB_STEP_SUMMARY", s)],
    );
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("::error ")).collect();
    assert_eq!(errors.len(), 2, "{text}");
    assert!(
        errors.iter().any(|l| l.starts_with(&format!(
            "::error file={FRAG},line=378,title=oomdoctor%3A fragmentation (confidence "
        ))),
        "{text}"
    );
    assert!(
        errors
            .iter()
            .any(|l| l.starts_with(&format!("::error file={KILLED},line=3,")))
    );
    // One line per command: messages carry newlines as %0A.
    for l in &errors {
        assert!(l.contains("%0A"), "{l}");
    }
    assert_eq!(text.matches("::group::").count(), 2);
    assert_eq!(text.matches("::endgroup::").count(), 2);
    let md = read(&summary);
    assert!(md.starts_with("# earlier step\n"), "appended, not replaced");
    assert!(md.contains("## oomdoctor: 2 incidents"), "{md}");
    check_markdown(&md);
    // Appended again by a second run.
    run_env(
        &[FRAG, "--format", "github"],
        None,
        &[("GITHUB_STEP_SUMMARY", s)],
    );
    assert_eq!(read(&summary).matches("## oomdoctor:").count(), 2);
    // Under --fail-on, other causes are warnings.
    let out = run(&[FRAG, KILLED, "--format", "github", "--fail-on", "host-oom"]);
    let text = stdout(&out);
    assert_eq!(
        text.lines().filter(|l| l.starts_with("::error ")).count(),
        1
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("::warning ")).count(),
        1
    );
    // Nothing found: a notice.
    let out = run(&[CLEAN, "--format", "github"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).starts_with("::notice title=oomdoctor::no out-of-memory incident"));
}

// ---------------------------------------------------------------------------------------
// SARIF.

#[test]
fn sarif_is_valid_2_1_0() {
    let out = run(&[FRAG, KILLED, "missing.log", "--format", "sarif"]);
    assert_eq!(out.status.code(), Some(2));
    let v = json(&out);
    assert_eq!(v["version"], "2.1.0");
    assert!(
        v["$schema"]
            .as_str()
            .unwrap()
            .contains("sarif-schema-2.1.0")
    );
    let run0 = &v["runs"][0];
    let driver = &run0["tool"]["driver"];
    assert_eq!(driver["name"], "oomdoctor");
    let rule_ids: Vec<&str> = driver["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    // The driver's rules are oomdoctor's rules.
    let listed = json(&run(&["rules", "--format", "json"]));
    let ours: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(rule_ids, ours);
    for r in driver["rules"].as_array().unwrap() {
        assert!(r["shortDescription"]["text"].is_string());
        assert!(r["fullDescription"]["text"].is_string());
    }
    let diag = json(&run(&[FRAG, KILLED, "--format", "json"]));
    let results = run0["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for (res, inc) in results.iter().zip(diag["incidents"].as_array().unwrap()) {
        let rule = res["ruleId"].as_str().unwrap();
        assert_eq!(rule, inc["rule"]);
        let idx = res["ruleIndex"].as_u64().unwrap() as usize;
        assert_eq!(rule_ids[idx], rule);
        assert!(["error", "warning", "note", "none"].contains(&res["level"].as_str().unwrap()));
        assert!(
            res["message"]["text"]
                .as_str()
                .unwrap()
                .contains(inc["cause"].as_str().unwrap())
        );
        let loc = &res["locations"][0]["physicalLocation"];
        assert_eq!(loc["artifactLocation"]["uri"], inc["location"]["input"]);
        assert_eq!(loc["region"]["startLine"], inc["location"]["line"]);
        assert_eq!(
            res["partialFingerprints"]["oomdoctor/v1"],
            inc["fingerprint"]
        );
        assert_eq!(res["properties"]["cause"], inc["cause"]);
    }
    let inv = &run0["invocations"][0];
    assert_eq!(inv["executionSuccessful"], false);
    assert!(
        inv["toolExecutionNotifications"][0]["message"]["text"]
            .as_str()
            .unwrap()
            .contains("missing.log")
    );
}

// ---------------------------------------------------------------------------------------
// JUnit.

/// Parses the whole document with quick-xml (end tags must match the start tags, one root,
/// every attribute and entity reference must resolve, text must decode) and returns the root's
/// attributes and every testcase's name with its outcome element.
type Attrs = Vec<(String, String)>;
type Cases = Vec<(String, Option<String>)>;

fn parse_junit(xml: &str) -> (Attrs, Cases) {
    use quick_xml::XmlVersion;
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(xml);
    reader.config_mut().check_end_names = true;
    let mut root_attrs = Vec::new();
    let mut cases: Cases = Vec::new();
    let (mut depth, mut roots) = (0i32, 0);
    loop {
        let ev = reader.read_event().expect("well-formed XML");
        let (e, empty) = match ev {
            Event::Start(e) => (e, false),
            Event::Empty(e) => (e, true),
            Event::End(_) => {
                depth -= 1;
                assert!(depth >= 0, "unbalanced end tag");
                continue;
            }
            Event::Text(t) => {
                t.xml10_content().expect("text decodes");
                continue;
            }
            Event::GeneralRef(r) => {
                if r.is_char_ref() {
                    assert!(r.resolve_char_ref().expect("valid char ref").is_some());
                } else {
                    let name = r.decode().unwrap();
                    assert!(
                        ["amp", "lt", "gt", "quot", "apos"].contains(&name.as_ref()),
                        "undefined entity &{name};"
                    );
                }
                continue;
            }
            Event::Eof => break,
            _ => continue,
        };
        if depth == 0 {
            roots += 1;
        }
        let name = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
        let mut attrs = Vec::new();
        for a in e.attributes() {
            let a = a.expect("well-formed attribute");
            let v = a
                .normalized_value(XmlVersion::Explicit1_0)
                .expect("valid attribute value")
                .into_owned();
            attrs.push((String::from_utf8(a.key.as_ref().to_vec()).unwrap(), v));
        }
        match name.as_str() {
            "testsuites" => root_attrs = attrs,
            "testcase" => cases.push((
                attrs
                    .iter()
                    .find(|(k, _)| k == "name")
                    .map(|(_, v)| v.clone())
                    .unwrap(),
                None,
            )),
            "failure" | "error" | "skipped" => {
                cases.last_mut().expect("outcome inside a testcase").1 = Some(name)
            }
            _ => {}
        }
        if !empty {
            depth += 1;
        }
    }
    assert_eq!(depth, 0, "unclosed elements");
    assert_eq!(roots, 1, "one root element");
    (root_attrs, cases)
}

#[test]
fn junit_is_well_formed_xml() {
    let out = run(&[FRAG, KILLED, CLEAN, "missing.log", "--format", "junit"]);
    assert_eq!(out.status.code(), Some(2));
    let xml = stdout(&out);
    assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"));
    let (root, cases) = parse_junit(&xml);
    let attr = |k: &str| root.iter().find(|(n, _)| n == k).unwrap().1.clone();
    assert_eq!(attr("tests"), cases.len().to_string());
    assert_eq!(attr("failures"), "2");
    assert_eq!(attr("errors"), "1");
    let failing: Vec<&str> = cases
        .iter()
        .filter(|c| c.1.as_deref() == Some("failure"))
        .map(|c| c.0.as_str())
        .collect();
    assert_eq!(failing.len(), 2, "each incident a failing test case");
    assert!(failing.iter().any(|n| n.contains("fragmentation")));
    assert!(
        cases
            .iter()
            .any(|c| c.1.is_none() && c.0 == "no out-of-memory incident")
    );
    // Under --fail-on, other causes are skipped, not failed.
    let xml = stdout(&run(&[
        FRAG,
        KILLED,
        "--format",
        "junit",
        "--fail-on",
        "host-oom",
    ]));
    let (root, cases) = parse_junit(&xml);
    assert!(root.contains(&("failures".into(), "1".into())));
    assert_eq!(
        cases
            .iter()
            .filter(|c| c.1.as_deref() == Some("skipped"))
            .count(),
        1
    );
    // Control characters and markup in log text stay well-formed.
    let nasty = "\x1b[31m<b>&</b>\x07 ]]> \"q\"\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.69 GiB of which 1.00 GiB is free. Of the allocated memory 20.00 GiB is allocated by PyTorch, and 2.10 GiB is reserved by PyTorch but unallocated. <&>\x01\n";
    let out = run_env(
        &["-", "--format", "junit", "--stdin-name", "a<b>&c.log"],
        Some(nasty.as_bytes()),
        &[],
    );
    parse_junit(&stdout(&out));
}

// ---------------------------------------------------------------------------------------
// HTML.

/// Anything that would make a browser fetch from the network: resource attributes in tags,
/// imports and `url()` in style sheets, network calls in scripts. Log text quoted in the page
/// is escaped, so it cannot form a tag.
fn network_refs(html: &str) -> Vec<String> {
    let re = |p: &str| regex::Regex::new(p).unwrap();
    let mut found = Vec::new();
    let tag = re(r"<[A-Za-z][^>]*>");
    let attr = re(
        r#"(?i)\b(?:src|href|srcset|action|formaction|poster|data|background|xlink:href)\s*=\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?//"#,
    );
    let element = re(r"(?i)^<(?:link|iframe|object|embed|base|img|video|audio|source)\b");
    let script_src = re(r"(?i)^<script[^>]*\bsrc\s*=");
    for t in tag.find_iter(html) {
        let t = t.as_str();
        if attr.is_match(t) || element.is_match(t) || script_src.is_match(t) {
            found.push(t.to_string());
        }
    }
    let block = |name: &str| {
        re(&format!(r"(?is)<{name}[^>]*>(.*?)</{name}>"))
            .captures_iter(html)
            .map(|c| c[1].to_string())
            .collect::<Vec<_>>()
    };
    let css = re(r#"(?i)@import|url\(\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?//|https?:"#);
    for b in block("style") {
        found.extend(css.find_iter(&b).map(|m| m.as_str().to_string()));
    }
    let js =
        re(r#"(?i)\bfetch\(|XMLHttpRequest|WebSocket|EventSource|\bimport\(|sendBeacon|https?:"#);
    for b in block("script") {
        found.extend(js.find_iter(&b).map(|m| m.as_str().to_string()));
    }
    found
}

fn html_with_plots() -> String {
    std::env::set_current_dir(root()).unwrap();
    let rules = oomdoctor::diagnosis::rules::RuleSet::builtin().unwrap();
    let (mut d, _) = oomdoctor::cli::diagnose::diagnose_inputs(
        &[FRAG.to_string(), LEAK.to_string()],
        &rules,
        &Default::default(),
        None,
    );
    d.series = common::series();
    d.snapshots = vec![common::snapshot()];
    oomdoctor::render::html::render(&d, &Default::default())
}

#[test]
fn html_is_self_contained() {
    let out = run(&[FRAG, "--format", "html"]);
    assert_eq!(out.status.code(), Some(2), "html needs --output");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--output"));
    let dir = scratch("html");
    let file = dir.join("report.html");
    let out = run(&[FRAG, "--format", "html", "--output", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let html = read(&file);
    assert_eq!(network_refs(&html), Vec::<String>::new());
    assert!(html.starts_with("<!doctype html>"));
    assert!(html.contains("Content-Security-Policy\" content=\"default-src 'none'"));
    assert!(html.contains("8.47 GiB sat reserved but unallocated"));
    assert!(
        html.contains("Device memory at the failure"),
        "the OOM's own figures are drawn"
    );
    // `--output -` is standard output.
    let out = run(&[FRAG, "--format", "html", "--output", "-"]);
    assert_eq!(stdout(&out), html);
    // With plot data: every chart is drawn, still nothing loaded.
    let html = html_with_plots();
    assert_eq!(network_refs(&html), Vec::<String>::new());
    for needle in [
        "class=\"chart series\"",
        "OOM on GPU 1",
        "capacity 79.25 GiB",
        "class=\"chart segmap\"",
        "largest free block",
        "the failed request, 1.96 GiB",
        "class=\"chart bars\"",
        "optimizer state",
        "torch/optim/adamw.py:119 _init_group",
        "Across the inputs",
    ] {
        assert!(html.contains(needle), "missing {needle}");
    }
    // Markup in log text is escaped.
    let out = run_env(
        &["-", "--format", "html", "-o", "-", "--stdin-name", "<script>x.log"],
        Some(b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.69 GiB of which 1.00 GiB is free. Of the allocated memory 20.00 GiB is allocated by PyTorch, and 2.10 GiB is reserved by PyTorch but unallocated. <img src=https://evil.example/x.png>\n"),
        &[],
    );
    let html = stdout(&out);
    assert!(!html.contains("<script>x.log"));
    assert!(!html.contains("<img"));
    assert!(html.contains("&lt;img src=https://evil.example/x.png&gt;"));
    assert_eq!(network_refs(&html), Vec::<String>::new());
    // The check itself catches what it should.
    assert_eq!(
        network_refs("<link rel=stylesheet href=\"https://cdn.example/x.css\"><style>@import 'x';</style><script src=//a/b.js></script><img src=\"//x\">").len(),
        4
    );
}

fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("OOMDOCTOR_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in [
            "chromium",
            "chromium-browser",
            "google-chrome",
            "google-chrome-stable",
        ] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// Runs Chromium headless with the flags a sandbox-less CI machine needs, killing it after
/// `secs`. Output goes to files (a pipe nobody drains would stall it). Returns (stdout,
/// stderr).
fn chromium_run(bin: &Path, profile: &Path, extra: &[String], secs: u64) -> (String, String) {
    let out_path = profile.with_extension("stdout");
    let err_path = profile.with_extension("stderr");
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-dev-shm-usage",
            "--enable-logging=stderr",
            "--v=0",
            "--proxy-server=127.0.0.1:9",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("start chromium");
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed().as_secs() > secs {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish in {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    (
        String::from_utf8_lossy(&std::fs::read(&out_path).unwrap()).into_owned(),
        String::from_utf8_lossy(&std::fs::read(&err_path).unwrap()).into_owned(),
    )
}

/// Renders the report in a real headless Chromium: the DOM after the script ran, no
/// Content-Security-Policy violation (nothing tried to load), and screenshots to look at
/// (`target/tmp/formats-chromium/*.png`). Skipped with a note where Chromium is absent.
#[test]
fn html_renders_in_headless_chromium() {
    let Some(bin) = chromium() else {
        // Straight to stderr, past the test harness's capture, so the skip is seen.
        let _ = writeln!(
            std::io::stderr(),
            "note: html_renders_in_headless_chromium skipped: no chromium on PATH (apt-get install chromium, or set OOMDOCTOR_CHROMIUM)"
        );
        return;
    };
    let dir = scratch("chromium");
    let page = dir.join("report.html");
    std::fs::write(&page, html_with_plots()).unwrap();
    let url = format!("file://{}", page.display());
    let (dom, log) = chromium_run(
        &bin,
        &dir.join("profile-dom"),
        &[
            "--virtual-time-budget=3000".into(),
            "--dump-dom".into(),
            url.clone(),
        ],
        180,
    );
    assert!(
        dom.contains("data-ready=\"1\""),
        "the inline script ran:\n{dom:.2000}\n{log}"
    );
    assert!(dom.contains("class=\"chart segmap\""));
    assert!(dom.contains("8.47 GiB sat reserved but unallocated"));
    for bad in ["Refused to", "Content Security Policy", "Uncaught"] {
        assert!(!log.contains(bad), "chromium reported `{bad}`:\n{log}");
    }
    for (name, size) in [
        ("report.png", "1280,3800"),
        ("report-narrow.png", "420,2200"),
    ] {
        let png = dir.join(name);
        chromium_run(
            &bin,
            &dir.join(format!("profile-{name}")),
            &[
                format!("--screenshot={}", png.display()),
                format!("--window-size={size}"),
                "--virtual-time-budget=3000".into(),
                url.clone(),
            ],
            180,
        );
        let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
        assert!(
            bytes.len() > 20_000,
            "a blank page compresses to almost nothing"
        );
        let _ = writeln!(std::io::stderr(), "screenshot: {}", png.display());
    }
    // Print preview: the page prints (PDF) without error.
    let pdf = dir.join("report.pdf");
    chromium_run(
        &bin,
        &dir.join("profile-pdf"),
        &[
            format!("--print-to-pdf={}", pdf.display()),
            "--no-pdf-header-footer".into(),
            url,
        ],
        180,
    );
    let bytes = std::fs::read(&pdf).unwrap();
    assert!(bytes.starts_with(b"%PDF"));
}

// ---------------------------------------------------------------------------------------
// Directories of mixed inputs.

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// runs/ with two logs that have incidents (one gzipped, one in a subdirectory), a clean
/// log, a pickle that is not a memory snapshot, a binary file, and a hidden
/// directory whose log must be ignored.
fn mixed_dir(name: &str) -> PathBuf {
    let dir = scratch(name);
    let runs = dir.join("runs");
    std::fs::create_dir_all(runs.join("rank1")).unwrap();
    std::fs::create_dir_all(runs.join(".cache")).unwrap();
    std::fs::copy(root().join(FRAG), runs.join("rank1/train.log")).unwrap();
    std::fs::write(
        runs.join("job-7.log.gz"),
        gzip(&std::fs::read(root().join(KILLED)).unwrap()),
    )
    .unwrap();
    std::fs::copy(root().join(CLEAN), runs.join("healthy.log")).unwrap();
    std::fs::copy(root().join(LEAK), runs.join(".cache/old.log")).unwrap();
    std::fs::write(
        runs.join("snapshot.pickle"),
        b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94.",
    )
    .unwrap();
    let mut bin = vec![0u8; 4096];
    bin[..4].copy_from_slice(b"PK\x03\x04");
    std::fs::write(runs.join("model.safetensors"), bin).unwrap();
    runs
}

#[test]
fn directory_of_mixed_inputs() {
    let runs = mixed_dir("dir");
    let r = runs.to_str().unwrap();
    let out = run(&[r, "--format", "json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    let incidents = v["incidents"].as_array().unwrap();
    assert_eq!(incidents.len(), 2, "one incident per real incident");
    let mut places: Vec<String> = incidents
        .iter()
        .map(|i| {
            format!(
                "{} {}",
                i["location"]["input"].as_str().unwrap(),
                i["cause"]
            )
        })
        .collect();
    places.sort();
    assert_eq!(
        places,
        vec![
            format!("{r}/job-7.log.gz \"host-oom\""),
            format!("{r}/rank1/train.log \"fragmentation\""),
        ]
    );
    let inputs: Vec<&str> = v["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        inputs,
        vec![
            format!("{r}/healthy.log"),
            format!("{r}/job-7.log.gz"),
            format!("{r}/rank1/train.log"),
        ]
    );
    let skipped: Vec<(String, String)> = v["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["input"].as_str().unwrap().to_string(),
                s["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        skipped,
        vec![
            (format!("{r}/model.safetensors"), "binary".to_string()),
            (format!("{r}/snapshot.pickle"), "snapshot".to_string()),
        ]
    );
    assert_eq!(v["errors"], serde_json::json!([]));
    // Human and markdown carry the summary across files.
    let human = stdout(&run(&[r]));
    assert!(
        human.contains(
            "Summary: 2 incidents (2 distinct) in 2 of 3 inputs: host-oom 1, fragmentation 1"
        ) || human.contains(
            "Summary: 2 incidents (2 distinct) in 2 of 3 inputs: fragmentation 1, host-oom 1"
        ),
        "{human}"
    );
    assert!(human.contains("skipped 2 files"), "{human}");
    let md = stdout(&run(&[r, "--format", "markdown"]));
    check_markdown(&md);
    assert!(md.contains("| Input | Kind | Incidents | Causes |"));
    assert!(
        md.contains(&format!("| `{r}/healthy.log` | log | 0 | — |")),
        "{md}"
    );
    // An explicitly named snapshot is still an error (not silently skipped).
    let snap = format!("{r}/snapshot.pickle");
    assert_eq!(run(&[&snap]).status.code(), Some(2));
    // An empty directory is an error.
    let empty = scratch("empty-dir");
    assert_eq!(run(&[empty.to_str().unwrap()]).status.code(), Some(2));
}

// ---------------------------------------------------------------------------------------
// --fail-on.

#[test]
fn fail_on_exit_codes() {
    let code = |args: &[&str]| run(args).status.code();
    assert_eq!(code(&[FRAG]), Some(1));
    assert_eq!(
        code(&[FRAG, "--fail-on", "host-oom"]),
        Some(0),
        "other causes do not fail"
    );
    assert_eq!(code(&[FRAG, "--fail-on", "fragmentation"]), Some(1));
    assert_eq!(
        code(&[FRAG, "--fail-on", "host-oom,fragmentation"]),
        Some(1)
    );
    assert_eq!(
        code(&[FRAG, "--fail-on", "host-oom", "--fail-on", "fragmentation"]),
        Some(1)
    );
    assert_eq!(code(&[CLEAN, "--fail-on", "fragmentation"]), Some(0));
    assert_eq!(code(&[FRAG, "--fail-on", "not-a-cause"]), Some(2));
    assert_eq!(
        code(&[FRAG, "missing.log", "--fail-on", "host-oom"]),
        Some(2),
        "errors still 2"
    );
    assert_eq!(
        code(&[FRAG, "--fail-on", "host-oom", "--exit-zero"]),
        Some(2),
        "conflicting flags"
    );
    // Others are still reported.
    let out = run(&[FRAG, "--fail-on", "host-oom", "--format", "json"]);
    assert_eq!(json(&out)["incidents"][0]["cause"], "fragmentation");
    let runs = mixed_dir("fail-on");
    let r = runs.to_str().unwrap();
    assert_eq!(code(&[r, "--fail-on", "host-oom"]), Some(1));
    assert_eq!(
        code(&[r, "--fail-on", "memory-leak,model-too-large"]),
        Some(0)
    );
    let err = String::from_utf8_lossy(&run(&[FRAG, "--fail-on", "oom"]).stderr).into_owned();
    assert!(
        err.contains("host-oom") && err.contains("fragmentation"),
        "lists the causes: {err}"
    );
}

// ---------------------------------------------------------------------------------------
// Fingerprints.

fn fingerprints(args: &[&str], stdin: Option<&[u8]>) -> Vec<String> {
    let mut a = args.to_vec();
    a.extend(["--format", "json"]);
    let v = json(&run_env(&a, stdin, &[]));
    v["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["fingerprint"].as_str().unwrap().to_string())
        .collect()
}

/// The same training OOM as two different runs print it: other host, rank, device,
/// timestamps, pid, line numbers, process names and a slightly different free figure.
fn one_incident_as(host: &str, rank: u32, gpu: u32, minute: u32, pid: u32, noise: usize) -> String {
    let mut s = String::new();
    for i in 0..noise {
        s.push_str(&format!(
            "2026-05-0{} 08:{minute:02}:{:02} {host} step {} loss 1.{i}\n",
            rank % 9 + 1,
            i % 60,
            i + 1
        ));
    }
    s.push_str(&format!(
        "[rank{rank}]: Traceback (most recent call last):\n[rank{rank}]:   File \"/home/u{pid}/train.py\", line 88, in <module>\n[rank{rank}]:     loss.backward()\n[rank{rank}]:   File \"/opt/conda/lib/python3.11/site-packages/torch/_tensor.py\", line 521, in backward\n[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU {gpu} has a total capacity of 79.{} GiB of which 1.2{} GiB is free. Process {pid} has 78.03 GiB memory in use. Of the allocated memory 68.90 GiB is allocated by PyTorch, and 8.47 GiB is reserved by PyTorch but unallocated.\n",
        if gpu % 2 == 0 { "15" } else { "25" },
        gpu % 10,
    ));
    s
}

#[test]
fn fingerprint_is_stable_and_tells_causes_apart() {
    // Same input, two runs.
    let a = fingerprints(&[FRAG], None);
    assert_eq!(a, fingerprints(&[FRAG], None));
    assert_eq!(a.len(), 1);
    assert!(a[0].len() == 16 && a[0].chars().all(|c| c.is_ascii_hexdigit()));
    // One incident seen on other ranks, devices, hosts and restarts of the job.
    let runs = [
        one_incident_as("gpu-node-3", 0, 0, 10, 4242, 5),
        one_incident_as("gpu-node-17", 3, 3, 47, 91_001, 120),
        one_incident_as("dgx-a", 7, 7, 2, 77, 0),
    ];
    let prints: Vec<String> = runs
        .iter()
        .enumerate()
        .map(|(i, log)| {
            let name = format!("job-{i}.log");
            let f = fingerprints(&["-", "--stdin-name", &name], Some(log.as_bytes()));
            assert_eq!(f.len(), 1, "{log}");
            f[0].clone()
        })
        .collect();
    assert_eq!(
        prints[0], prints[1],
        "ranks, devices, hosts, pids, times, line numbers"
    );
    assert_eq!(prints[0], prints[2]);
    // The incident folded across ranks in one log has the same fingerprint as one rank's.
    let both = format!("{}{}", runs[0], runs[1]);
    let f = fingerprints(&["-"], Some(both.as_bytes()));
    assert_eq!(f.len(), 1);
    // Different causes, different fingerprints.
    let mut all = Vec::new();
    let mut causes = Vec::new();
    for f in [
        FRAG,
        LEAK,
        KILLED,
        "rules/torch-weights-on-load/fires-13b-fp32-on-24g.log",
        "rules/torch-other-processes/fires-notebook-two-neighbours.log",
    ] {
        let v = json(&run(&[f, "--format", "json"]));
        causes.push(v["incidents"][0]["cause"].as_str().unwrap().to_string());
        all.push(
            v["incidents"][0]["fingerprint"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let mut distinct_causes = causes.clone();
    distinct_causes.sort();
    distinct_causes.dedup();
    assert_eq!(distinct_causes.len(), causes.len(), "{causes:?}");
    let mut distinct = all.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), all.len(), "{all:?}");
}

// ---------------------------------------------------------------------------------------
// Bundles.

const SECRETS: &[&str] = &[
    "alice",
    "gpu-node-17",
    "trainer.acme-corp.com",
    "10.20.30.40",
    "fe80::1ff:fe23:4567:890a",
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "sk-proj-AbCdEfGhIjKlMnOpQrStUv12",
    "ghp_0123456789abcdefghijklmnopqrstuvwxyz",
    "AKIAIOSFODNN7EXAMPLE",
    "s3cr3t-wandb-key",
    "bob@example.com",
    "Carol",
];

/// A crash log with secrets around the OOM line (the bundle quotes two lines either side).
fn leaky_log() -> String {
    [
        "May 02 08:00:01 gpu-node-17 python[4242]: starting as alice@example.org",
        "torch 2.3.1+cu121, transformers 4.41.2, Python 3.11.7",
        "|   1  NVIDIA A100-SXM4-80GB  On |  Driver Version: 535.104.05   CUDA Version: 12.2 |",
        "export HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
        "step 10 loss 1.0",
        "step 11 loss 1.0",
        "step 12 loss 1.0",
        "Traceback (most recent call last):",
        "  File \"/home/alice/proj/train.py\", line 88, in <module>",
        "    loss.backward()",
        "  File \"C:\\Users\\Carol\\env\\torch\\_tensor.py\", line 521, in backward",
        "export OPENAI_API_KEY=sk-proj-AbCdEfGhIjKlMnOpQrStUv12 aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
        "MASTER_ADDR=10.20.30.40 host=trainer.acme-corp.com peer fe80::1ff:fe23:4567:890a",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 1 has a total capacity of 79.25 GiB of which 1.21 GiB is free. Including non-PyTorch memory, this process has 78.03 GiB memory in use. Of the allocated memory 68.90 GiB is allocated by PyTorch, and 8.47 GiB is reserved by PyTorch but unallocated.",
        "report problems to bob@example.com; git clone https://ghp_0123456789abcdefghijklmnopqrstuvwxyz@github.com/acme/x",
        "WANDB_API_KEY=s3cr3t-wandb-key",
        "after the error, far away",
    ]
    .join("\n")
        + "\n"
}

#[test]
fn bundle_is_redacted() {
    let dir = scratch("bundle");
    let log = dir.join("crash.log");
    std::fs::write(&log, leaky_log()).unwrap();
    std::fs::write(
        dir.join("oom.pickle"),
        b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94.",
    )
    .unwrap();
    let md_path = dir.join("bundle.md");
    let out = run(&[
        "bundle",
        log.to_str().unwrap(),
        dir.join("oom.pickle").to_str().unwrap(),
        "--output",
        md_path.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("read it before you post it"));
    let md = read(&md_path);
    check_markdown(&md);
    for s in SECRETS {
        assert!(!md.contains(s), "`{s}` leaked into the bundle:\n{md}");
    }
    for mask in ["[USER]", "[HOST]", "[IP]", "[TOKEN]", "[EMAIL]"] {
        assert!(md.contains(mask), "no {mask}:\n{md}");
    }
    assert!(md.contains("Masked: "), "{md}");
    // The diagnosis and what a maintainer needs survive.
    assert!(md.contains("`fragmentation`"), "{md}");
    assert!(md.contains("8.47 GiB"));
    assert!(md.contains("| PyTorch | `2.3.1+cu121` |"), "{md}");
    assert!(md.contains("| GPU | `NVIDIA A100-SXM4-80GB` |"), "{md}");
    assert!(md.contains("| NVIDIA driver | `535.104.05` |"));
    assert!(md.contains("| CUDA | `12.2` |"));
    assert!(md.contains("https://github.com/acme/x") || md.contains("@github.com/acme/x"));
    // The evidence line with two lines either side, and nothing far from it.
    assert!(md.contains("> 14  torch.OutOfMemoryError"), "{md}");
    assert!(md.contains("  12  export OPENAI_API_KEY=[TOKEN]"), "{md}");
    assert!(md.contains("  16  WANDB_API_KEY=[TOKEN]"), "{md}");
    assert!(!md.contains("after the error, far away"), "{md}");
    assert!(!md.contains("step 12"), "{md}");
    // The snapshot is summarised (here: a placeholder), never attached.
    assert!(md.contains("## Snapshots"));
    assert!(md.contains("No summary"));
    assert!(!md.contains("\\x80"));

    // JSON bundles are redacted too.
    let out = run(&["bundle", log.to_str().unwrap(), "--format", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    for s in SECRETS {
        assert!(!text.contains(s), "`{s}` leaked into the JSON bundle");
    }
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["bundle_version"], 1);
    assert_eq!(v["diagnosis"]["incidents"][0]["cause"], "fragmentation");
    assert!(v["masked"]["tokens"].as_u64().unwrap() >= 4);

    // Standard input: the evidence lines without context, still redacted.
    let out = run_env(&["bundle"], Some(leaky_log().as_bytes()), &[]);
    let md = stdout(&out);
    for s in SECRETS {
        assert!(!md.contains(s), "`{s}` leaked from stdin");
    }
    assert!(md.contains("Standard input cannot be read twice"));
}

// ---------------------------------------------------------------------------------------
// Completions, man page, listings.

#[test]
fn completions_and_man_page() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let out = run(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let text = stdout(&out);
        assert!(text.contains("oomdoctor"), "{shell}");
        assert!(
            text.contains("fail-on"),
            "{shell}: generated from the CLI definition"
        );
        assert!(text.contains("bundle"), "{shell}");
    }
    let out = run(&["man"]);
    assert_eq!(out.status.code(), Some(0));
    let man = stdout(&out);
    assert!(man.contains(".TH oomdoctor 1"), "{man:.300}");
    assert!(man.contains("fail\\-on") && man.contains("bundle"));
    // One page per subcommand: `plan`'s options are documented in `oomdoctor-plan.1`.
    let out = run(&["man", "plan"]);
    assert_eq!(out.status.code(), Some(0));
    let plan = stdout(&out);
    assert!(plan.contains(".TH oomdoctor-plan 1"), "{plan:.300}");
    assert!(
        plan.contains("\\-\\-gpu") && plan.contains("\\-\\-model"),
        "{plan}"
    );
    assert!(
        man.contains("oomdoctor\\-plan(1)"),
        "the main page refers to it"
    );
    assert_eq!(run(&["man", "nope"]).status.code(), Some(2));
    let dir = common::tmp_dir("formats", "man");
    let out = run(&["man", "--dir", dir.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for page in [
        "oomdoctor.1",
        "oomdoctor-plan.1",
        "oomdoctor-bundle.1",
        "oomdoctor-explain.1",
        "oomdoctor-rules.1",
        "oomdoctor-facts.1",
        "oomdoctor-completions.1",
        "oomdoctor-man.1",
    ] {
        let text =
            std::fs::read_to_string(dir.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{page}");
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("oomdoctor-plan.1")).unwrap(),
        plan,
        "the page in the directory is the one `man plan` prints"
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(run(&["completions", "tcsh"]).status.code(), Some(2));
    // Listings keep their own two formats.
    assert_eq!(run(&["rules", "--format", "sarif"]).status.code(), Some(2));
}

/// A directory of many incidents is diagnosed on the worker threads: the report is the one
/// a single thread writes (the same incidents, in the same order, with the same verdicts).
/// One thread is had by pinning the process to one CPU (`taskset`; skipped where absent).
#[test]
fn many_incidents_diagnosed_in_parallel_report_as_on_one_thread() {
    if Command::new("taskset").arg("--version").output().is_err() {
        eprintln!("skipped: no taskset to run oomdoctor on one CPU");
        return;
    }
    let sources = [
        FRAG,
        LEAK,
        KILLED,
        CLEAN,
        "fixtures/engines/vllm-three-restarts-different-errors.log",
    ];
    let dir = std::env::temp_dir().join(format!("oomdoctor-many-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..80 {
        let src = root().join(sources[i % sources.len()]);
        std::fs::copy(src, dir.join(format!("job-{i:03}.log"))).unwrap();
    }
    let d = dir.to_str().unwrap();
    let parallel = run(&["--format", "json", "--exit-zero", d]);
    let one = Command::new("taskset")
        .args(["-c", "0", BIN, "--format", "json", "--exit-zero", d])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(parallel.status.success() && one.status.success());
    let report: Value = serde_json::from_slice(&parallel.stdout).unwrap();
    let incidents = report["incidents"].as_array().map_or(0, Vec::len);
    assert!(
        incidents >= 64,
        "{incidents} incidents: too few to go parallel"
    );
    assert_eq!(stdout(&parallel), String::from_utf8_lossy(&one.stdout));
}

/// A snapshot file of 8 MiB or more is read through a map (`input::MappedBlocks`), the same
/// snapshot gzipped is read ahead on a thread: both report the same analysis, and the
/// bytes read are the whole (decompressed) pickle.
#[test]
fn a_large_snapshot_file_reads_as_its_gzip_does() {
    use std::io::Read;
    let dir = scratch("mapped-snapshot");
    let gz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/real/big_snapshot.pickle.gz");
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&gz).unwrap())
        .read_to_end(&mut plain)
        .unwrap();
    assert!(
        plain.len() >= 8 << 20,
        "{} bytes: too small to be mapped",
        plain.len()
    );
    let file = dir.join("snapshot.pickle");
    std::fs::write(&file, &plain).unwrap();
    let (file, gz) = (file.to_str().unwrap(), gz.to_str().unwrap());
    let mapped = run(&[file, "--format", "json"]);
    let read_ahead = run(&[gz, "--format", "json"]);
    assert_eq!(mapped.status.code(), read_ahead.status.code());
    let (mapped, read_ahead) = (json(&mapped), json(&read_ahead));
    assert_eq!(mapped["inputs"][0]["kind"], "snapshot");
    assert_eq!(mapped["inputs"][0]["bytes"], plain.len() as u64);
    assert_eq!(read_ahead["inputs"][0]["bytes"], plain.len() as u64);
    assert!(
        mapped["snapshots"]
            .as_array()
            .is_some_and(|s| !s.is_empty())
    );
    for key in ["incidents", "errors", "snapshots"] {
        assert_eq!(
            mapped[key].to_string(),
            read_ahead[key].to_string().replace(gz, file),
            "{key}"
        );
    }
}
