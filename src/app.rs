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
}

/// Options of a diagnosis run that do not concern output.
#[derive(Clone, Debug)]
pub struct DiagnoseOptions {
    pub stdin_name: String,
    pub input_kind: Option<InputKind>,
    /// A model config or GGUF whose geometry applies to every incident.
    pub model: Option<std::path::PathBuf>,
}

impl Default for DiagnoseOptions {
    fn default() -> Self {
        DiagnoseOptions {
            stdin_name: "<stdin>".into(),
            input_kind: None,
            model: None,
        }
    }
}

impl From<&DiagnoseArgs> for DiagnoseOptions {
    fn from(a: &DiagnoseArgs) -> Self {
        DiagnoseOptions {
            stdin_name: a.stdin_name.clone(),
            input_kind: a.input_kind,
            model: a.model.clone(),
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
    Ok(InputOutcome {
        report: InputReport {
            name,
            kind: "model",
            bytes,
            lines: None,
            compressed: false,
            incidents: 0,
        },
        incidents: vec![],
        shared_facts: Some(facts),
    })
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
    let opened = input::open(spec, reader, &opts.stdin_name, opts.input_kind)?;
    let name = opened.input_name();
    let compressed = opened.compressed;
    match opened.kind {
        InputKind::Model if spec != "-" && !compressed => model_input(std::path::Path::new(spec)),
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
            Ok(InputOutcome {
                report: InputReport {
                    name: name.to_string(),
                    kind: "log",
                    bytes: stats.bytes,
                    lines: Some(stats.lines),
                    compressed,
                    incidents: evidence.incidents.len(),
                },
                incidents: evidence.incidents,
                shared_facts: None,
            })
        }
        other => Err(InputError::Unsupported {
            input: name.to_string(),
            message: format!("{} inputs are not supported yet", other.id()),
            help: Some("pass --input-kind log to read it as a log".into()),
        }),
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
    let mut record = |result: Result<InputOutcome, InputError>,
                      name: String,
                      diagnosis: &mut Diagnosis| match result {
        Ok(outcome) => {
            diagnosis.inputs.push(outcome.report);
            incidents.extend(outcome.incidents);
            if let Some(f) = outcome.shared_facts {
                shared.merge(&f, false);
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
    let (diagnosis, errors) = diagnose_inputs(&inputs, &rules, &DiagnoseOptions::from(args), stdin);
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
