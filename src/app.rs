//! The application: runs a parsed command line against an [`Io`] and returns the exit code.
//!
//! Kept apart from `main.rs` so tests drive the whole program in-process with their own
//! stdin, stdout and stderr.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::process::ExitCode;

use clap::Parser;
use miette::{Diagnostic, GraphicalReportHandler, GraphicalTheme};

use crate::cause::Cause;
use crate::cli::{Cli, ColorChoice, Command, DiagnoseArgs};
use crate::input::{self, InputError, InputKind};
use crate::render::{self, Format};
use crate::report::{Diagnosis, InputErrorReport, InputReport};
use crate::rules::RuleSet;

/// The process's streams, replaceable in tests.
pub struct Io<'a> {
    pub stdin: Option<Box<dyn Read>>,
    pub stdin_is_tty: bool,
    pub stdout: &'a mut dyn Write,
    pub stdout_is_tty: bool,
    pub stderr: &'a mut dyn Write,
    pub stderr_is_tty: bool,
}

/// Documented exit statuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Nothing found (or `--exit-zero`).
    Clean = 0,
    /// At least one incident.
    Incident = 1,
    /// An input, a rule file or the command line was bad.
    Error = 2,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e as u8)
    }
}

/// Entry point for `main` and tests.
pub fn main_with_args<I, T>(args: I, io: &mut Io<'_>) -> Exit
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                Exit::Error
            } else {
                Exit::Clean
            };
            let text = if io.stderr_is_tty || !e.use_stderr() {
                e.render().ansi().to_string()
            } else {
                e.render().to_string()
            };
            if e.use_stderr() {
                let _ = write!(io.stderr, "{text}");
            } else {
                let _ = write!(io.stdout, "{text}");
            }
            return code;
        }
    };
    run(cli, io)
}

/// Prints a miette diagnostic to stderr.
pub fn report_error(io: &mut Io<'_>, err: &dyn Diagnostic) {
    let theme = if io.stderr_is_tty {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    let mut s = String::new();
    if GraphicalReportHandler::new_themed(theme)
        .render_report(&mut s, err)
        .is_err()
    {
        s = format!("error: {err}\n");
    }
    let _ = write!(io.stderr, "{s}");
}

/// Writes to stdout; a closed pipe (`| head`) is not an error worth a message.
fn emit(io: &mut Io<'_>, text: &str) -> io::Result<()> {
    match io
        .stdout
        .write_all(text.as_bytes())
        .and_then(|_| io.stdout.flush())
    {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(e),
        other => other,
    }
}

fn load_rules(dir: Option<&std::path::Path>, io: &mut Io<'_>) -> Option<RuleSet> {
    let mut set = match RuleSet::builtin() {
        Ok(s) => s,
        Err(e) => {
            report_error(io, &e);
            return None;
        }
    };
    if let Some(d) = dir {
        if let Err(e) = set.load_dir(d) {
            report_error(io, &e);
            return None;
        }
    }
    Some(set)
}

fn use_color(choice: ColorChoice, tty: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => tty && std::env::var_os("NO_COLOR").is_none(),
    }
}

/// Runs a parsed command line.
pub fn run(cli: Cli, io: &mut Io<'_>) -> Exit {
    match cli.command {
        None => diagnose_command(&cli.diagnose, io),
        Some(Command::Explain { id, rules }) => {
            let Some(set) = load_rules(rules.as_deref(), io) else {
                return Exit::Error;
            };
            match explain(&id, &set) {
                Some(text) => finish_output(io, &text, Exit::Clean),
                None => {
                    let _ = writeln!(
                        io.stderr,
                        "error: `{id}` is not a cause, rule, phase or fact\n  causes: {}\n  try `oomdoctor rules` or `oomdoctor facts`",
                        Cause::ALL
                            .iter()
                            .map(|c| c.id())
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    Exit::Error
                }
            }
        }
        Some(Command::Rules { format, rules }) => {
            let Some(set) = load_rules(rules.as_deref(), io) else {
                return Exit::Error;
            };
            finish_output(io, &list_rules(&set, format), Exit::Clean)
        }
        Some(Command::Facts { format }) => finish_output(io, &list_facts(format), Exit::Clean),
        Some(Command::Plan(args)) => match crate::model::plan::plan(&args) {
            Ok(report) => {
                let text = match args.format {
                    crate::model::plan::PlanFormat::Json => {
                        crate::model::plan::render_json(&report)
                    }
                    crate::model::plan::PlanFormat::Human => {
                        crate::model::plan::render_human(&report, args.explain)
                    }
                };
                finish_output(
                    io,
                    &text,
                    if report.fits {
                        Exit::Clean
                    } else {
                        Exit::Incident
                    },
                )
            }
            Err(e) => {
                report_error(io, &e);
                Exit::Error
            }
        },
    }
}

fn finish_output(io: &mut Io<'_>, text: &str, status: Exit) -> Exit {
    match emit(io, text) {
        Ok(()) => status,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => status,
        Err(e) => {
            let _ = writeln!(io.stderr, "error: cannot write output: {e}");
            Exit::Error
        }
    }
}

/// What one input yielded.
struct InputOutcome {
    report: InputReport,
    incidents: Vec<crate::incident::Incident>,
    /// Facts that apply to every incident of the run (a model's geometry).
    shared_facts: Option<crate::evidence::Facts>,
    snapshot: Option<crate::snapshot::SnapshotAnalysis>,
}

impl InputOutcome {
    fn new(report: InputReport) -> Self {
        InputOutcome {
            report,
            incidents: vec![],
            shared_facts: None,
            snapshot: None,
        }
    }
}

/// Options of a diagnosis run that do not concern output.
#[derive(Clone, Debug)]
pub struct DiagnoseOptions {
    pub stdin_name: String,
    pub input_kind: Option<InputKind>,
    /// A model config or GGUF whose geometry applies to every incident.
    pub model: Option<std::path::PathBuf>,
    /// Limits for reading untrusted pickles.
    pub pickle_limits: crate::pickle::PickleLimits,
    /// Draw a progress bar on stderr for large snapshots.
    pub progress: bool,
}

impl Default for DiagnoseOptions {
    fn default() -> Self {
        DiagnoseOptions {
            stdin_name: "<stdin>".into(),
            input_kind: None,
            model: None,
            pickle_limits: crate::pickle::PickleLimits::default(),
            progress: false,
        }
    }
}

impl From<&DiagnoseArgs> for DiagnoseOptions {
    fn from(a: &DiagnoseArgs) -> Self {
        let mut limits = crate::pickle::PickleLimits::default();
        if let Some(v) = a.max_pickle_bytes {
            limits.max_input_bytes = v;
        }
        if let Some(v) = a.max_pickle_objects {
            limits.max_objects = v;
            limits.max_memo_entries = v;
        }
        if let Some(v) = a.max_pickle_depth {
            limits.max_stack_depth = v;
        }
        DiagnoseOptions {
            stdin_name: a.stdin_name.clone(),
            input_kind: a.input_kind,
            model: a.model.clone(),
            pickle_limits: limits,
            progress: false,
        }
    }
}

/// Reads a model's geometry (config.json or GGUF) as facts for every incident.
fn model_input(path: &std::path::Path) -> Result<InputOutcome, InputError> {
    let name = path.display().to_string();
    let loaded = crate::model::plan::load_model(path).map_err(|e| InputError::Unsupported {
        input: name.clone(),
        message: format!("cannot read the model: {e}"),
        help: Some("--model takes a Hugging Face config.json or a GGUF file".into()),
    })?;
    let input: crate::evidence::InputName = std::sync::Arc::from(name.as_str());
    let facts = crate::model::geometry_facts(&loaded.geometry, &input);
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let mut out = InputOutcome::new(InputReport {
        name,
        kind: "model",
        bytes,
        lines: None,
        compressed: false,
        incidents: 0,
    });
    out.shared_facts = Some(facts);
    Ok(out)
}

/// Reads a snapshot pickle whole (within the size limit) and analyses it.
fn snapshot_input(
    opened: input::Opened,
    size_hint: Option<u64>,
    opts: &DiagnoseOptions,
) -> Result<InputOutcome, InputError> {
    let name = opened.input_name();
    let limit = opts.pickle_limits.max_input_bytes;
    if let Some(size) = size_hint.filter(|s| *s > limit) {
        return Err(InputError::TooLarge {
            input: name.to_string(),
            size,
            limit,
            what: "a snapshot",
            flag: "--max-pickle-bytes",
        });
    }
    let mut reader = opened.reader;
    // A progress bar only on a terminal and only when reading takes noticeable time.
    let bar = (opts.progress && size_hint.is_some_and(|s| s > (64 << 20))).then(|| {
        let bar = indicatif::ProgressBar::with_draw_target(
            size_hint,
            indicatif::ProgressDrawTarget::stderr(),
        );
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} ({eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_message(format!("reading {name}"));
        bar
    });
    let mut bytes = Vec::with_capacity(size_hint.unwrap_or(0).min(limit) as usize);
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(InputError::from_io(
                    &name,
                    e,
                    opened.compressed,
                    bytes.len() as u64,
                ));
            }
        };
        bytes.extend_from_slice(&chunk[..n]);
        if bytes.len() as u64 > limit {
            return Err(InputError::TooLarge {
                input: name.to_string(),
                size: bytes.len() as u64,
                limit,
                what: "a snapshot",
                flag: "--max-pickle-bytes",
            });
        }
        if let Some(b) = &bar {
            b.set_position(bytes.len() as u64);
        }
    }
    if let Some(b) = &bar {
        b.set_message(format!("analysing {name}"));
    }
    let analysis = crate::snapshot::read_snapshot(&bytes, &name, &opts.pickle_limits)
        .map_err(|e| InputError::Snapshot(Box::new(e)));
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let analysis = analysis?;
    let mut out = InputOutcome::new(InputReport {
        name: name.to_string(),
        kind: "snapshot",
        bytes: bytes.len() as u64,
        lines: None,
        compressed: opened.compressed,
        incidents: usize::from(analysis.oom_device().is_some()),
    });
    out.snapshot = Some(analysis);
    Ok(out)
}

fn analyze_input(
    spec: &str,
    opts: &DiagnoseOptions,
    stdin: &mut Option<Box<dyn Read>>,
) -> Result<InputOutcome, InputError> {
    let reader: Box<dyn Read> = if spec == "-" {
        stdin.take().ok_or_else(|| InputError::Unsupported {
            input: opts.stdin_name.clone(),
            message: "standard input was already read by an earlier `-`".into(),
            help: Some("pass `-` once".into()),
        })?
    } else {
        Box::new(io::empty())
    };
    let size_hint = (spec != "-")
        .then(|| std::fs::metadata(spec).ok().map(|m| m.len()))
        .flatten();
    let opened = input::open(spec, reader, &opts.stdin_name, opts.input_kind)?;
    let name = opened.input_name();
    let compressed = opened.compressed;
    match opened.kind {
        InputKind::Model if spec != "-" && !compressed => model_input(std::path::Path::new(spec)),
        InputKind::Snapshot => {
            snapshot_input(opened, if compressed { None } else { size_hint }, opts)
        }
        InputKind::Log => {
            let counter = opened.counter.clone();
            let mut reader = opened.reader;
            let (evidence, stats) =
                crate::incident::analyze_log(&mut reader, &name).map_err(|e| {
                    InputError::from_io(
                        &name,
                        e,
                        compressed,
                        counter.load(std::sync::atomic::Ordering::Relaxed),
                    )
                })?;
            let mut out = InputOutcome::new(InputReport {
                name: name.to_string(),
                kind: "log",
                bytes: stats.bytes,
                lines: Some(stats.lines),
                compressed,
                incidents: evidence.incidents.len(),
            });
            out.incidents = evidence.incidents;
            Ok(out)
        }
        other => Err(InputError::Unsupported {
            input: name.to_string(),
            message: format!("{} inputs are not supported yet", other.id()),
            help: Some("pass --input-kind log to read it as a log".into()),
        }),
    }
}

/// The phase a snapshot's OOM suggests, from what the failing allocation was for.
fn snapshot_phase(facts: &crate::evidence::Facts) -> &'static str {
    match facts.str("snapshot.oom_category") {
        Some("weights") => crate::phase::id::MODEL_LOAD,
        Some("gradients") => crate::phase::id::BACKWARD,
        Some("optimizer") => crate::phase::id::OPTIMIZER_STEP,
        Some("kv_cache") => crate::phase::id::GENERATION,
        _ => crate::phase::id::UNKNOWN,
    }
}

/// Joins snapshots to the log incidents they describe, or makes incidents of their own.
///
/// A snapshot describes a log incident on the same device (or the only device-OOM incident
/// when the log does not name a device): its facts join that incident, the log's facts
/// winning where both speak, so `crash.log snapshot.pickle` is one incident drawing on both.
/// A snapshot whose OOM no log shows is an incident by itself.
fn fuse_snapshots(
    incidents: &mut Vec<crate::incident::Incident>,
    snapshots: &[crate::snapshot::SnapshotAnalysis],
) {
    use crate::engines::{Domain, id};
    for snap in snapshots {
        let device = snap.oom_device().or_else(|| snap.focus_device());
        let candidates: Vec<usize> = incidents
            .iter()
            .enumerate()
            .filter(|(_, i)| i.domain == Domain::Device && i.kind == "device-oom")
            .filter(|(_, i)| match (device, i.device) {
                (Some(d), Some(id)) => d == id || i.devices.contains(&d),
                _ => true,
            })
            .map(|(k, _)| k)
            .collect();
        let facts = match device {
            Some(d) => snap.facts_for_device(d),
            None => snap.facts(),
        };
        match candidates.first() {
            Some(&k) if candidates.len() == 1 || device.is_some() => {
                let inc = &mut incidents[k];
                inc.facts.merge(&facts, false);
                if inc.device.is_none() {
                    inc.device = device;
                }
            }
            _ if snap.oom_device().is_some() => {
                let input: crate::evidence::InputName = std::sync::Arc::from(snap.input.as_str());
                let first = facts
                    .get("oom.requested_bytes")
                    .and_then(|f| f.sources.first().cloned())
                    .unwrap_or_else(|| crate::evidence::Provenance::at(input.clone(), "oom"));
                let mut facts = facts;
                facts.set_if_absent("failure.kind", "device-oom", Some(first.clone()));
                facts.set_if_absent("failure.engine", id::PYTORCH, Some(first.clone()));
                let phase = snapshot_phase(&facts);
                facts.set_if_absent("phase", phase, Some(first.clone()));
                incidents.push(crate::incident::Incident::from_evidence(
                    input,
                    "device-oom",
                    id::PYTORCH,
                    Domain::Device,
                    device,
                    first,
                    facts,
                    phase,
                ));
            }
            _ => {}
        }
    }
}

/// Diagnoses inputs (paths or `-`): the whole analysis without any output. Inputs that cannot
/// be read are returned as errors and listed in the diagnosis; the others are still diagnosed.
pub fn diagnose_inputs(
    specs: &[String],
    rules: &RuleSet,
    opts: &DiagnoseOptions,
    mut stdin: Option<Box<dyn Read>>,
) -> (Diagnosis, Vec<InputError>) {
    let mut diagnosis = Diagnosis::new();
    let mut incidents = Vec::new();
    let mut errors = Vec::new();
    let mut shared = crate::evidence::Facts::new();
    let mut snapshots = Vec::new();
    let mut record = |result: Result<InputOutcome, InputError>,
                      name: String,
                      diagnosis: &mut Diagnosis| match result {
        Ok(outcome) => {
            diagnosis.inputs.push(outcome.report);
            incidents.extend(outcome.incidents);
            if let Some(f) = outcome.shared_facts {
                shared.merge(&f, false);
            }
            if let Some(s) = outcome.snapshot {
                snapshots.push(s);
            }
        }
        Err(e) => {
            diagnosis.errors.push(InputErrorReport {
                input: name,
                message: e.to_string(),
            });
            errors.push(e);
        }
    };
    if let Some(m) = &opts.model {
        record(model_input(m), m.display().to_string(), &mut diagnosis);
    }
    for spec in specs {
        let name = if spec == "-" {
            opts.stdin_name.clone()
        } else {
            spec.clone()
        };
        record(analyze_input(spec, opts, &mut stdin), name, &mut diagnosis);
    }
    fuse_snapshots(&mut incidents, &snapshots);
    diagnosis.snapshots = snapshots
        .iter()
        .map(crate::report::SnapshotSummary::from_analysis)
        .collect();
    // What a log says wins over the model file: it shows what actually ran.
    if !shared.is_empty() {
        for inc in &mut incidents {
            inc.facts.merge(&shared, false);
        }
    }
    let reports = incidents
        .iter()
        .map(|i| crate::diagnose::diagnose(i, rules))
        .collect();
    diagnosis.incidents = crate::diagnose::finish(reports);
    diagnosis.collect_excerpts();
    (diagnosis, errors)
}

fn diagnose_command(args: &DiagnoseArgs, io: &mut Io<'_>) -> Exit {
    let Some(rules) = load_rules(args.rules.as_deref(), io) else {
        return Exit::Error;
    };
    let mut inputs = args.inputs.clone();
    if inputs.is_empty() {
        if io.stdin_is_tty {
            let _ = writeln!(
                io.stderr,
                "oomdoctor: no input. Pipe a crash log in (`cat crash.log | oomdoctor`) or name files (`oomdoctor crash.log`).\nSee `oomdoctor --help`."
            );
            return Exit::Error;
        }
        inputs.push("-".into());
    }
    let stdin = io.stdin.take();
    let mut opts = DiagnoseOptions::from(args);
    opts.progress = io.stderr_is_tty;
    let (diagnosis, errors) = diagnose_inputs(&inputs, &rules, &opts, stdin);
    for e in &errors {
        report_error(io, e);
    }
    let text = match args.format {
        Format::Json => render::json::render(&diagnosis),
        Format::Human => {
            let style = render::human::Style {
                color: use_color(args.color, io.stdout_is_tty),
                width: 110,
            };
            render::human::render(&diagnosis, &style, args.explain)
        }
    };
    let status = if !diagnosis.errors.is_empty() {
        Exit::Error
    } else if !diagnosis.incidents.is_empty() && !args.exit_zero {
        Exit::Incident
    } else {
        Exit::Clean
    };
    finish_output(io, &text, status)
}

/// Text for `oomdoctor explain ID`.
pub fn explain(id: &str, rules: &RuleSet) -> Option<String> {
    let mut out = String::new();
    if let Ok(cause) = id.parse::<Cause>() {
        let _ = writeln!(out, "{} — {}\n", cause.id(), cause.title());
        let _ = writeln!(out, "{}\n", cause.description());
        let _ = writeln!(out, "Rules that conclude {}:", cause.id());
        for r in rules.rules.iter().filter(|r| r.cause == cause) {
            let _ = writeln!(out, "  {:<36} {}", r.id, r.title);
        }
        return Some(out);
    }
    if let Some(r) = rules.get(id) {
        let _ = writeln!(out, "{} ({}, {})\n{}\n", r.id, r.cause, r.origin, r.title);
        let _ = writeln!(out, "{}", r.explanation.trim());
        if let Some(a) = &r.applies {
            let _ = writeln!(out, "\nApplies when: {}", a.describe());
        }
        if !r.lets.is_empty() {
            let _ = writeln!(out, "\nValues:");
            for (name, e) in &r.lets {
                let _ = writeln!(out, "  {name} = {}", e.text());
            }
        }
        let _ = writeln!(out, "\nSignals (points when they hold):");
        for s in &r.signals {
            let _ = writeln!(
                out,
                "  {:+}  {}\n        says: {}",
                s.weight,
                s.when.describe(),
                s.says.text()
            );
        }
        let _ = writeln!(out, "\nFixes:");
        for f in &r.fixes {
            let _ = writeln!(out, "  - {}\n      {}", f.title.text(), f.action.text());
            if let Some(w) = &f.when {
                let _ = writeln!(out, "      when: {}", w.describe());
            }
            if let Some(u) = &f.unless {
                let _ = writeln!(out, "      unless: {}", u.describe());
            }
        }
        for link in &r.references {
            let _ = writeln!(out, "\nSee {link}");
        }
        return Some(out);
    }
    if let Some((p, doc)) = crate::phase::PHASES.iter().find(|(p, _)| *p == id) {
        let _ = writeln!(out, "phase {p}: {doc}");
        return Some(out);
    }
    if let Some(f) = crate::catalog::lookup(id) {
        let _ = writeln!(out, "fact {} ({:?}): {}", f.name, f.unit, f.doc);
        return Some(out);
    }
    if id == "rules" {
        out.push_str(crate::rules::FORMAT_HELP);
        return Some(out);
    }
    None
}

fn list_rules(set: &RuleSet, format: Format) -> String {
    match format {
        Format::Json => {
            let rows: Vec<serde_json::Value> = set
                .rules
                .iter()
                .map(|r| serde_json::json!({"id": r.id, "cause": r.cause, "title": r.title, "origin": r.origin, "signals": r.signals.len(), "fixes": r.fixes.len()}))
                .collect();
            let mut s = serde_json::to_string_pretty(&rows).unwrap_or_default();
            s.push('\n');
            s
        }
        Format::Human => {
            let mut out = String::new();
            for r in &set.rules {
                let _ = writeln!(out, "{:<38} {:<24} {}", r.id, r.cause.id(), r.title);
            }
            out
        }
    }
}

fn list_facts(format: Format) -> String {
    match format {
        Format::Json => {
            let rows: Vec<serde_json::Value> = crate::catalog::all()
                .map(|f| serde_json::json!({"name": f.name, "unit": f.unit, "doc": f.doc}))
                .collect();
            let mut s = serde_json::to_string_pretty(&rows).unwrap_or_default();
            s.push('\n');
            s
        }
        Format::Human => {
            let mut out = String::new();
            for f in crate::catalog::all() {
                let _ = writeln!(
                    out,
                    "{:<44} {:<8} {}",
                    f.name,
                    format!("{:?}", f.unit).to_lowercase(),
                    f.doc
                );
            }
            out
        }
    }
}
