//! The application: runs a parsed command line against an [`Io`] and returns the exit code.
//!
//! Kept apart from `main.rs` so tests drive the whole program in-process with their own
//! stdin, stdout and stderr.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::process::ExitCode;

use miette::{Diagnostic, GraphicalReportHandler, GraphicalTheme};

use crate::diagnosis::cause::Cause;
use std::path::Path;

use crate::cli::{BundleArgs, BundleFormat, Cli, ColorChoice, Command, DiagnoseArgs};
use crate::diagnosis::report::{Diagnosis, InputErrorReport, InputReport, SkippedInput};
use crate::diagnosis::rules::RuleSet;
use crate::input::{self, InputError, InputKind};
use crate::render::terminal::Sink;
use crate::render::{self, Format, ListFormat, Policy, RuleInfo};

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

thread_local! {
    /// `--color` as given on this thread's command line, for messages written before or
    /// outside the parsed command (clap's help and errors, [`report_error`]).
    static COLOR_CHOICE: std::cell::Cell<ColorChoice> = const { std::cell::Cell::new(ColorChoice::Auto) };
}

/// `--color` read from raw arguments (the command line may not parse): the last one given
/// before `--`.
fn color_from_args(args: &[OsString]) -> ColorChoice {
    let mut choice = ColorChoice::Auto;
    let mut it = args.iter().skip(1).map(|a| a.to_string_lossy());
    while let Some(a) = it.next() {
        let value = if a == "--" {
            break;
        } else if a == "--color" {
            it.next().map(|v| v.into_owned())
        } else {
            a.strip_prefix("--color=").map(str::to_string)
        };
        match value.as_deref() {
            Some("always") => choice = ColorChoice::Always,
            Some("never") => choice = ColorChoice::Never,
            Some("auto") => choice = ColorChoice::Auto,
            _ => {}
        }
    }
    choice
}

/// Moves `--config FILE` / `--no-config` given before a subcommand (`oomdoctor --no-config
/// explain x`) to the end: the diagnosis's own options would otherwise take the subcommand
/// for an input.
fn hoist_config_args(mut args: Vec<OsString>) -> Vec<OsString> {
    let mut moved = Vec::new();
    while let Some(a) = args.get(1).map(|a| a.to_string_lossy().into_owned()) {
        if a == "--no-config" || a.starts_with("--config=") {
            moved.push(args.remove(1));
        } else if a == "--config" && args.len() > 2 {
            moved.push(args.remove(1));
            moved.push(args.remove(1));
        } else {
            break;
        }
    }
    if moved.is_empty() {
        return args;
    }
    let at = args.iter().position(|a| a == "--").unwrap_or(args.len());
    args.splice(at..at, moved);
    args
}

/// Whether messages on stderr (errors, warnings) are coloured.
fn stderr_color(io: &Io<'_>) -> bool {
    use_color(COLOR_CHOICE.with(|c| c.get()), io.stderr_is_tty)
}

/// Entry point for `main` and tests.
pub fn main_with_args<I, T>(args: I, io: &mut Io<'_>) -> Exit
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args = hoist_config_args(args.into_iter().map(Into::into).collect());
    let choice = color_from_args(&args);
    COLOR_CHOICE.with(|c| c.set(choice));
    let parsed = <Cli as clap::CommandFactory>::command()
        .try_get_matches_from(args)
        .and_then(|m| <Cli as clap::FromArgMatches>::from_arg_matches(&m).map(|c| (c, m)));
    let (mut cli, matches) = match parsed {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                Exit::Error
            } else {
                Exit::Clean
            };
            // Help and version go to stdout, errors to stderr: colour follows that stream,
            // `--color` and `NO_COLOR`.
            let tty = if e.use_stderr() {
                io.stderr_is_tty
            } else {
                io.stdout_is_tty
            };
            let text = if use_color(choice, tty) {
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
    let wants_config = matches!(
        cli.command,
        None | Some(Command::Bundle(_) | Command::Explain { .. } | Command::Rules { .. })
    );
    if wants_config {
        let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
        match crate::cli::config::load(cli.config.as_deref(), cli.no_config, &cwd) {
            Ok(cfg) => apply_config(&mut cli, &matches, &cfg),
            Err(e) => {
                report_error(io, &e);
                return Exit::Error;
            }
        }
        if cli.command.is_none() {
            COLOR_CHOICE.with(|c| c.set(cli.diagnose.color));
        }
    }
    run(cli, io)
}

/// Fills what the command line left unsaid from the configuration file: a flag given on
/// the command line always wins over its key.
fn apply_config(cli: &mut Cli, matches: &clap::ArgMatches, cfg: &crate::cli::config::Config) {
    use clap::parser::ValueSource;
    let given = |m: &clap::ArgMatches, id: &str| {
        m.try_get_raw(id).is_ok() && m.value_source(id) == Some(ValueSource::CommandLine)
    };
    let rules = |m: &clap::ArgMatches, dirs: &mut Vec<std::path::PathBuf>| {
        if !given(m, "rules") && !cfg.rules.is_empty() {
            dirs.clone_from(&cfg.rules);
        }
    };
    let globs = |m: &clap::ArgMatches, glob: &mut Vec<String>, exclude: &mut Vec<String>| {
        if !given(m, "glob") && !cfg.glob.is_empty() {
            glob.clone_from(&cfg.glob);
        }
        if !given(m, "exclude") && !cfg.exclude.is_empty() {
            exclude.clone_from(&cfg.exclude);
        }
    };
    match &mut cli.command {
        None => {
            let a = &mut cli.diagnose;
            if let Some(f) = cfg.format.filter(|_| !given(matches, "format")) {
                a.format = f;
            }
            if let Some(f) = cfg.fail_on.as_ref() {
                // `--exit-zero` on the command line overrides a configured policy.
                if !given(matches, "fail_on") && !a.exit_zero {
                    a.fail_on.clone_from(f);
                }
            }
            if let Some(c) = cfg.color.filter(|_| !given(matches, "color")) {
                a.color = c;
            }
            rules(matches, &mut a.rules);
            globs(matches, &mut a.glob, &mut a.exclude);
        }
        Some(Command::Bundle(b)) => {
            if let Some(m) = matches.subcommand_matches("bundle") {
                rules(m, &mut b.rules);
                globs(m, &mut b.glob, &mut b.exclude);
                if !given(m, "redact") && !cfg.redact.is_empty() {
                    b.redact.clone_from(&cfg.redact);
                }
            }
        }
        Some(Command::Explain { rules: dirs, .. }) => {
            if let Some(m) = matches.subcommand_matches("explain") {
                rules(m, dirs);
            }
        }
        Some(Command::Rules { rules: dirs, .. }) => {
            if let Some(m) = matches.subcommand_matches("rules") {
                rules(m, dirs);
            }
        }
        _ => {}
    }
}

/// Prints a miette diagnostic to stderr.
///
/// Errors quote inputs (file names, lines, values), so the text is made safe for a terminal
/// ([`render::terminal`]): the message, help and labels are made visible before miette
/// draws them, and the drawn text is guarded. A diagnostic that quotes source text (a rule
/// file) is drawn without colour, so that no escape sequence at all survives the guard.
pub fn report_error(io: &mut Io<'_>, err: &dyn Diagnostic) {
    let safe = render::terminal::SafeDiagnostic(err);
    let color = stderr_color(io) && !safe.needs_plain();
    let theme = if color {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    let mut s = String::new();
    if GraphicalReportHandler::new_themed(theme)
        .render_report(&mut s, &safe)
        .is_err()
    {
        s = format!("error: {safe}\n");
    }
    let sink = if color {
        render::terminal::Sink::Colored
    } else {
        render::terminal::Sink::Text
    };
    let _ = write!(io.stderr, "{}", render::terminal::guard(&s, sink));
}

/// Writes to stdout; a closed pipe (`| head`) is not an error worth a message.
fn emit(io: &mut Io<'_>, text: &str, sink: render::terminal::Sink) -> io::Result<()> {
    match io
        .stdout
        .write_all(render::terminal::guard(text, sink).as_bytes())
        .and_then(|_| io.stdout.flush())
    {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(e),
        other => other,
    }
}

fn load_rules(dirs: &[std::path::PathBuf], io: &mut Io<'_>) -> Option<RuleSet> {
    let mut set = match RuleSet::builtin() {
        Ok(s) => s,
        Err(e) => {
            report_error(io, &e);
            return None;
        }
    };
    for d in dirs {
        match set.load_dir(d) {
            Ok(skipped) => {
                for s in skipped {
                    let _ = writeln!(
                        io.stderr,
                        "oomdoctor: skipped {}: {}",
                        render::terminal::visible(&s.path),
                        s.why
                    );
                }
            }
            Err(e) => {
                report_error(io, &e);
                return None;
            }
        }
    }
    Some(set)
}

/// How a listing's text is guarded on its way out.
fn list_sink(format: ListFormat) -> Sink {
    match format {
        ListFormat::Human => Sink::Text,
        ListFormat::Json => Sink::Json,
    }
}

/// How a diagnosis format's text is guarded on its way out (to a terminal or a file).
fn format_sink(format: Format, color: bool) -> Sink {
    match format {
        Format::Human if color => Sink::Colored,
        Format::Human | Format::Markdown | Format::Github => Sink::Text,
        Format::Json | Format::Sarif => Sink::Json,
        Format::Junit | Format::Html => Sink::Xml,
    }
}

fn use_color(choice: ColorChoice, tty: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
    }
}

/// Columns for human output: `COLUMNS` when set, else the terminal's width when standard
/// output is one, else 80 (piped, redirected, written with `--output`).
pub fn output_width(stdout_is_tty: bool) -> usize {
    let from_env = std::env::var("COLUMNS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n > 0);
    let from_tty = || {
        stdout_is_tty
            .then(terminal_size::terminal_size)
            .flatten()
            .map(|(w, _)| usize::from(w.0))
            .filter(|n| *n > 0)
    };
    from_env.or_else(from_tty).unwrap_or(80).clamp(40, 400)
}

/// Runs a parsed command line.
pub fn run(cli: Cli, io: &mut Io<'_>) -> Exit {
    match cli.command {
        None => diagnose_command(&cli.diagnose, io),
        Some(Command::Explain { id, rules }) => {
            let Some(set) = load_rules(&rules, io) else {
                return Exit::Error;
            };
            let Some(id) = id else {
                return finish_output(io, &explain_topics(&set), Sink::Text, Exit::Clean);
            };
            match explain(&id, &set) {
                Some(text) => finish_output(io, &text, Sink::Text, Exit::Clean),
                None => {
                    let hint = match did_you_mean(&id, &set).as_slice() {
                        [] => String::new(),
                        [one] => format!("\n  did you mean `{one}`?"),
                        many => format!(
                            "\n  did you mean one of: {}?",
                            many.iter()
                                .map(|m| format!("`{m}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    };
                    let _ = writeln!(
                        io.stderr,
                        "error: `{}` is not a cause, rule, phase or fact{hint}\n  causes: {}\n  `oomdoctor explain` lists every topic; try `oomdoctor rules` or `oomdoctor facts`",
                        render::terminal::visible(&id),
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
            let Some(set) = load_rules(&rules, io) else {
                return Exit::Error;
            };
            finish_output(
                io,
                &list_rules(&set, format),
                list_sink(format),
                Exit::Clean,
            )
        }
        Some(Command::Facts { format }) => {
            finish_output(io, &list_facts(format), list_sink(format), Exit::Clean)
        }
        Some(Command::Bundle(args)) => bundle_command(&args, io),
        Some(Command::Plan(args)) => match crate::knowledge::plan::plan(&args) {
            Ok(report) => {
                let (text, sink) = match args.format {
                    crate::knowledge::plan::PlanFormat::Json => {
                        (crate::knowledge::plan::render_json(&report), Sink::Json)
                    }
                    crate::knowledge::plan::PlanFormat::Human => (
                        crate::knowledge::plan::render_human(&report, args.explain),
                        Sink::Text,
                    ),
                };
                finish_output(
                    io,
                    &text,
                    sink,
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
        Some(Command::Completions { shell }) => {
            let mut buf = Vec::new();
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "oomdoctor", &mut buf);
            finish_output(io, &String::from_utf8_lossy(&buf), Sink::Text, Exit::Clean)
        }
        Some(Command::Man { subcommand, dir }) => man_pages(io, subcommand.as_deref(), dir),
    }
}

/// `oomdoctor man`: the main page, one subcommand's page (`oomdoctor-plan.1`), or every
/// page written into a directory.
fn man_pages(io: &mut Io<'_>, subcommand: Option<&str>, dir: Option<std::path::PathBuf>) -> Exit {
    let mut cmd = <Cli as clap::CommandFactory>::command().disable_help_subcommand(true);
    cmd.build();
    if let Some(dir) = dir {
        let written = std::fs::create_dir_all(&dir)
            .and_then(|()| clap_mangen::generate_to(cmd.clone(), &dir));
        return match written {
            Ok(()) => {
                let mut names: Vec<String> = std::iter::once(cmd.clone())
                    .chain(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
                    .map(|c| clap_mangen::Man::new(c).get_filename())
                    .collect();
                names.sort();
                for n in names {
                    let _ = writeln!(io.stderr, "wrote {}", dir.join(n).display());
                }
                Exit::Clean
            }
            Err(e) => {
                let _ = writeln!(
                    io.stderr,
                    "error: cannot write the man pages to {}: {e}",
                    dir.display()
                );
                Exit::Error
            }
        };
    }
    let page = match subcommand {
        None => cmd,
        Some(name) => match cmd.find_subcommand(name) {
            Some(sub) if !sub.is_hide_set() => sub.clone(),
            _ => {
                let names: Vec<&str> = cmd
                    .get_subcommands()
                    .filter(|s| !s.is_hide_set())
                    .map(|s| s.get_name())
                    .collect();
                let _ = writeln!(
                    io.stderr,
                    "error: no subcommand `{}`; man pages exist for: {}",
                    render::terminal::visible(name),
                    names.join(", ")
                );
                return Exit::Error;
            }
        },
    };
    let mut buf = Vec::new();
    match clap_mangen::Man::new(page).render(&mut buf) {
        Ok(()) => finish_output(io, &String::from_utf8_lossy(&buf), Sink::Text, Exit::Clean),
        Err(e) => {
            let _ = writeln!(io.stderr, "error: cannot render the man page: {e}");
            Exit::Error
        }
    }
}

/// Writes a command's text to stdout, guarded for `sink` (see [`render::terminal::guard`]).
fn finish_output(io: &mut Io<'_>, text: &str, sink: Sink, status: Exit) -> Exit {
    match emit(io, text, sink) {
        Ok(()) => status,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => status,
        Err(e) => {
            let _ = writeln!(io.stderr, "error: cannot write output: {e}");
            Exit::Error
        }
    }
}

/// What one input yielded. Snapshot and series analyses add their plot data here; it goes
/// into the diagnosis in input order.
struct InputOutcome {
    report: InputReport,
    incidents: Vec<crate::incident::Incident>,
    series: Vec<crate::render::plot::SeriesPlot>,
    snapshots: Vec<crate::render::plot::SnapshotPlot>,
    /// Facts that apply to every incident of the run (a model's geometry).
    shared_facts: Option<crate::facts::evidence::Facts>,
    /// An analysed snapshot, fused with the log incidents after every input is read.
    snapshot: Option<crate::ingest::snapshot::SnapshotAnalysis>,
    /// A memory series, merged with the run's other series and analysed once every input
    /// is read (`gpu.csv` and `apps.csv` describe the same devices).
    series_set: Option<crate::ingest::series::SeriesSet>,
}

impl InputOutcome {
    fn new(report: InputReport) -> Self {
        InputOutcome {
            report,
            incidents: vec![],
            series: vec![],
            snapshots: vec![],
            shared_facts: None,
            snapshot: None,
            series_set: None,
        }
    }
}

/// Options of a diagnosis run that do not concern output.
#[derive(Clone, Debug)]
pub struct DiagnoseOptions {
    pub stdin_name: String,
    pub input_kind: Option<InputKind>,
    /// List inputs of a kind this build cannot analyse as skipped instead of failing on them
    /// (always so for files found in a directory).
    pub skip_unsupported: bool,
    /// A model config or GGUF whose geometry applies to every incident.
    pub model: Option<std::path::PathBuf>,
    /// Limits for reading untrusted pickles.
    pub pickle_limits: crate::ingest::snapshot::pickle::PickleLimits,
    /// Draw a progress bar on stderr for large snapshots.
    pub progress: bool,
    /// Which files of directory inputs to read (`--glob`, `--exclude`).
    pub filter: crate::input::walk::Filter,
}

impl Default for DiagnoseOptions {
    fn default() -> Self {
        DiagnoseOptions {
            stdin_name: "<stdin>".into(),
            input_kind: None,
            skip_unsupported: false,
            model: None,
            pickle_limits: crate::ingest::snapshot::pickle::PickleLimits::default(),
            progress: false,
            filter: crate::input::walk::Filter::default(),
        }
    }
}

impl From<&DiagnoseArgs> for DiagnoseOptions {
    fn from(a: &DiagnoseArgs) -> Self {
        let mut limits = crate::ingest::snapshot::pickle::PickleLimits::default();
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
            skip_unsupported: false,
            model: a.model.clone(),
            pickle_limits: limits,
            progress: false,
            filter: crate::input::walk::Filter {
                include: a.glob.clone(),
                exclude: a.exclude.clone(),
            },
        }
    }
}

/// Reads a model's geometry (config.json or GGUF) as facts for every incident.
fn model_input(path: &std::path::Path) -> Result<InputOutcome, InputError> {
    let name = path.display().to_string();
    let loaded = crate::knowledge::plan::load_model(path).map_err(|e| InputError::Unsupported {
        input: name.clone(),
        message: format!("cannot read the model: {e}"),
        help: Some("--model takes a Hugging Face config.json or a GGUF file".into()),
    })?;
    let input: crate::facts::evidence::InputName = std::sync::Arc::from(name.as_str());
    let facts = crate::ingest::model::geometry_facts(&loaded.geometry, &input);
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let mut out = InputOutcome::new(InputReport {
        name,
        kind: "model",
        bytes,
        lines: None,
        compressed: false,
        incidents: 0,
        warnings: Vec::new(),
    });
    out.shared_facts = Some(facts);
    Ok(out)
}

/// Held while a snapshot is read and analysed. Inputs are read several at a time, and a
/// snapshot is held whole (up to `--max-pickle-bytes`, then its arena): a directory of four
/// large snapshots read at once took four times the memory of one. Logs stream in constant
/// memory and keep reading in parallel; snapshots take turns.
static SNAPSHOT_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The snapshot being read now (snapshots take turns, see [`SNAPSHOT_TURN`]) and the
/// bytes pulled from it so far: what an out-of-memory exit names.
static READING_NAME: std::sync::Mutex<Option<crate::facts::evidence::InputName>> =
    std::sync::Mutex::new(None);
static READING_AT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The snapshot being read and how many of its bytes were read, if one is being read.
/// Never blocks and never allocates (it is called from the allocator's failure path).
pub fn reading_now() -> (Option<crate::facts::evidence::InputName>, u64) {
    let name = READING_NAME.try_lock().ok().and_then(|g| g.clone());
    (name, READING_AT.load(std::sync::atomic::Ordering::Relaxed))
}

/// Clears [`READING_NAME`] when a snapshot's read ends, however it ends.
struct ReadingGuard;

impl Drop for ReadingGuard {
    fn drop(&mut self) {
        if let Ok(mut g) = READING_NAME.lock() {
            *g = None;
        }
    }
}

/// Counts the bytes a snapshot's reader pulls (for the report and the progress bar).
struct CountingReader<'a, R: ?Sized> {
    inner: &'a mut R,
    n: u64,
    bar: Option<&'a indicatif::ProgressBar>,
}

impl<R: io::Read + ?Sized> io::Read for CountingReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let k = self.inner.read(buf)?;
        let before = self.n;
        self.n += k as u64;
        READING_AT.store(self.n, std::sync::atomic::Ordering::Relaxed);
        if let Some(b) = self.bar {
            // Redraw at most every 4 MiB.
            if before >> 22 != self.n >> 22 {
                b.set_position(self.n);
            }
        }
        Ok(k)
    }
}

/// Reads a snapshot pickle as a stream (within the size limit) and analyses it.
fn snapshot_input(
    opened: input::Opened,
    size_hint: Option<u64>,
    opts: &DiagnoseOptions,
) -> Result<InputOutcome, InputError> {
    // A poisoned lock only means another snapshot's reader panicked; the turn is still ours.
    let _turn = SNAPSHOT_TURN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let name = opened.input_name();
    // Forced with --input-kind snapshot, a `torch.save` archive would fail on its first
    // byte with an opcode error that says nothing useful.
    if opened.head.starts_with(b"PK\x03\x04") {
        let (what, help) = binary_kind(&opened.head);
        return Err(InputError::Unsupported {
            input: name.to_string(),
            message: format!("{what}, not a memory snapshot pickle"),
            help: Some(help.into()),
        });
    }
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
    // The pickle reader pulls the file (or the gzip decoder) through a bounded buffer and
    // counts decompressed bytes against `--max-pickle-bytes` as they arrive: a small gzip
    // that expands to gigabytes (a PROTO header, then 4 GB of zeros) stops at its first
    // byte that is not a pickle, having buffered one chunk.
    READING_AT.store(0, std::sync::atomic::Ordering::Relaxed);
    if let Ok(mut g) = READING_NAME.lock() {
        *g = Some(name.clone());
    }
    let _reading = ReadingGuard;
    let mut counted = CountingReader {
        inner: &mut reader,
        n: 0,
        bar: bar.as_ref(),
    };
    let analysis =
        crate::ingest::snapshot::read_snapshot_from(&mut counted, &name, &opts.pickle_limits);
    let bytes_read = counted.n;
    let analysis = analysis.map_err(|e| match e {
        // More decompressed bytes than the limit: say which flag raises it.
        crate::ingest::snapshot::SnapshotError::Pickle {
            source:
                crate::ingest::snapshot::pickle::PickleError::LimitExceeded {
                    what: "the input size",
                    ..
                },
            ..
        } => InputError::TooLarge {
            input: name.to_string(),
            size: bytes_read,
            limit,
            what: "a snapshot",
            flag: "--max-pickle-bytes",
        },
        e => InputError::Snapshot(Box::new(e)),
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let analysis = analysis?;
    let mut out = InputOutcome::new(InputReport {
        name: name.to_string(),
        kind: "snapshot",
        bytes: bytes_read,
        lines: None,
        compressed: opened.compressed,
        incidents: usize::from(analysis.oom_device().is_some()),
        warnings: anomaly_warnings(&analysis.anomalies),
    });
    out.snapshots = crate::render::plot::SnapshotPlot::from_analysis(&analysis);
    out.snapshot = Some(analysis);
    Ok(out)
}

/// Values a snapshot holds that the analysis could not use (a block of 2^70 bytes, a
/// negative size): they were left out, and the user is told where, not shown "0 bytes".
fn anomaly_warnings(a: &crate::ingest::snapshot::Anomalies) -> Vec<String> {
    if a.count == 0 {
        return Vec::new();
    }
    let shown = a.examples.len().min(3);
    let more = if a.count as usize > shown {
        format!(" and {} more", a.count as usize - shown)
    } else {
        String::new()
    };
    vec![format!(
        "{} value(s) could not be used and were left out: {}{more}",
        a.count,
        a.examples[..shown].join("; ")
    )]
}

/// Reads a memory series (nvidia-smi CSV, Prometheus text, CSV or JSON Lines) whole, within
/// the sample limit. It is analysed with the run's other series once every input is read.
fn series_input(opened: input::Opened) -> Result<InputOutcome, InputError> {
    let name = opened.input_name();
    let Some(format) = crate::ingest::series::sniff(&opened.head) else {
        return Err(InputError::Unsupported {
            input: name.to_string(),
            message: "not a memory series oomdoctor reads".into(),
            help: Some(
                "series are nvidia-smi --query-gpu / --query-compute-apps CSV, Prometheus text (DCGM, vLLM, SGLang), or CSV / JSON Lines with a timestamp and a used-memory column"
                    .into(),
            ),
        });
    };
    let counter = opened.counter.clone();
    let compressed = opened.compressed;
    let reader = io::BufReader::with_capacity(1 << 20, opened.reader);
    let set = crate::ingest::series::read(reader, &name, format)
        .map_err(|e| InputError::Series(Box::new(e)))?;
    // A few unreadable rows are skipped, not fatal; the user is still told how many and
    // where the first one is, whether or not an incident quotes the count.
    let warnings = set
        .inputs
        .iter()
        .filter(|i| i.skipped > 0)
        .map(|i| {
            let at = i
                .first_skipped_line
                .map(|l| format!(" (the first at line {l})"))
                .unwrap_or_default();
            format!(
                "{} of {} rows could not be read and were skipped{at}",
                i.skipped, i.rows
            )
        })
        .collect();
    let mut out = InputOutcome::new(InputReport {
        name: name.to_string(),
        kind: "series",
        bytes: counter.load(std::sync::atomic::Ordering::Relaxed),
        lines: None,
        compressed,
        // Counted once the run's series are analysed together.
        incidents: 0,
        warnings,
    });
    out.series_set = Some(set);
    Ok(out)
}

/// One thing to read: standard input, a file named on the command line, or a file found
/// in a directory input (for which kinds this build cannot read yet, and binary files, are
/// skipped with a note instead of failing the run).
#[derive(Clone, Debug, PartialEq)]
enum Item {
    Stdin,
    File { path: String, from_dir: bool },
}

/// What a binary input looks like, for the message refusing it, and what to do instead.
fn binary_kind(head: &[u8]) -> (String, &'static str) {
    if head.starts_with(b"PK\x03\x04") {
        (
            "a zip archive (`torch.save` writes checkpoints as zip archives)".into(),
            "a memory snapshot is the pickle `torch.cuda.memory._dump_snapshot` writes, not a `torch.save` file",
        )
    } else if head.starts_with(&[0x1f, 0x8b]) {
        (
            "gzip data inside gzip".into(),
            "decompress it once (`gunzip -c file.gz > file.gz.inner`) and pass the result",
        )
    } else {
        (
            "binary data".into(),
            "pass --input-kind log to read it as a log anyway",
        )
    }
}

/// What reading one item gave.
enum Read1 {
    Done(Box<InputOutcome>, InputKind),
    Skipped(SkippedInput),
    Failed(InputError, Option<InputKind>),
}

fn analyze_opened(
    opened: input::Opened,
    path: Option<&str>,
    opts: &DiagnoseOptions,
) -> Result<InputOutcome, (InputError, InputKind)> {
    let name = opened.input_name();
    let cut = opened.cut.clone();
    let mut outcome = analyze_kind(opened, path, opts);
    if let Some(c) = input::cut_of(&cut) {
        match &mut outcome {
            // A log is diagnosed from what decoded: the OOM of a job killed mid-write is
            // in that part.
            Ok(o) if o.report.kind == "log" => o.report.warnings.push(c.warning()),
            // A snapshot or series without its end is not what it claims to be.
            _ => {
                let kind = match &outcome {
                    Err((_, k)) => *k,
                    Ok(_) => InputKind::Log,
                };
                outcome = Err((c.error(&name), kind));
            }
        }
    }
    outcome
}

/// Analyses an opened input by its kind.
fn analyze_kind(
    opened: input::Opened,
    path: Option<&str>,
    opts: &DiagnoseOptions,
) -> Result<InputOutcome, (InputError, InputKind)> {
    let name = opened.input_name();
    let compressed = opened.compressed;
    let size_hint = if compressed {
        None
    } else {
        path.and_then(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
    };
    match opened.kind {
        InputKind::Model if path.is_some() && !compressed => {
            model_input(std::path::Path::new(path.unwrap_or_default()))
                .map_err(|e| (e, InputKind::Model))
        }
        InputKind::Snapshot => {
            let mut out =
                snapshot_input(opened, size_hint, opts).map_err(|e| (e, InputKind::Snapshot))?;
            // The hook's sidecar (run facts the pickle cannot hold) lies beside the file.
            if let (Some(p), Some(snap)) = (path, out.snapshot.as_mut()) {
                snap.attach_sidecar(std::path::Path::new(p));
            }
            Ok(out)
        }
        InputKind::Series => series_input(opened).map_err(|e| (e, InputKind::Series)),
        InputKind::Log => {
            let counter = opened.counter.clone();
            let mut reader = opened.reader;
            let (evidence, stats) = crate::ingest::log::grouping::analyze_log(&mut reader, &name)
                .map_err(|e| {
                (
                    InputError::from_io(
                        &name,
                        e,
                        compressed,
                        counter.load(std::sync::atomic::Ordering::Relaxed),
                    ),
                    InputKind::Log,
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
                    warnings: Vec::new(),
                },
                incidents: evidence.incidents,
                series: Vec::new(),
                snapshots: Vec::new(),
                shared_facts: None,
                snapshot: None,
                series_set: None,
            })
        }
        other => Err((
            InputError::Unsupported {
                input: name.to_string(),
                message: format!("{} inputs are not supported yet", other.id()),
                help: Some("pass --input-kind log to read it as a log".into()),
            },
            other,
        )),
    }
}

fn read_item(item: &Item, opts: &DiagnoseOptions, stdin: Option<Box<dyn Read>>) -> Read1 {
    let opened = match item {
        Item::Stdin => match stdin {
            Some(r) => input::open("-", r, &opts.stdin_name, opts.input_kind),
            None => Err(InputError::Unsupported {
                input: opts.stdin_name.clone(),
                message: "standard input was already read by an earlier `-`".into(),
                help: Some("pass `-` once".into()),
            }),
        },
        Item::File { path, .. } => input::open(
            path,
            Box::new(io::empty()),
            &opts.stdin_name,
            opts.input_kind,
        ),
    };
    let opened = match opened {
        Ok(o) => o,
        Err(e) => return Read1::Failed(e, None),
    };
    let from_dir = matches!(item, Item::File { from_dir: true, .. });
    if from_dir && crate::input::walk::is_own_report(&opened.head) {
        return Read1::Skipped(SkippedInput {
            input: opened.name.to_string(),
            kind: "report".into(),
            reason: "a report oomdoctor wrote; reading it again would count its incidents twice"
                .into(),
        });
    }
    let looks_binary =
        opened.kind == InputKind::Log && crate::input::walk::looks_binary(&opened.head);
    if from_dir && looks_binary {
        return Read1::Skipped(SkippedInput {
            input: opened.name.to_string(),
            kind: "binary".into(),
            reason: "binary data, not a log, snapshot or series".into(),
        });
    }
    let path = match item {
        Item::File { path, .. } => Some(path.as_str()),
        Item::Stdin => None,
    };
    // Binary data named directly (or piped in) is still scanned: a log with junk around an
    // OOM is still a log. But when it holds no incident, "no incident found in 730 lines"
    // would be a false success about a file that is no log at all.
    let binary = (looks_binary && opts.input_kind.is_none()).then(|| binary_kind(&opened.head));
    match analyze_opened(opened, path, opts) {
        Ok(o) if binary.is_some() && o.incidents.is_empty() => {
            let (what, help) = binary.unwrap_or_default();
            Read1::Failed(
                InputError::Unsupported {
                    input: o.report.name.clone(),
                    message: format!(
                        "{what}, not a log, snapshot, series or model, and no out-of-memory message in it"
                    ),
                    help: Some(help.into()),
                },
                Some(InputKind::Log),
            )
        }
        Ok(o) => {
            let kind = match o.report.kind {
                "log" => InputKind::Log,
                "snapshot" => InputKind::Snapshot,
                "series" => InputKind::Series,
                _ => InputKind::Model,
            };
            Read1::Done(Box::new(o), kind)
        }
        Err((InputError::Unsupported { input, message, .. }, kind))
            if from_dir || opts.skip_unsupported =>
        {
            Read1::Skipped(SkippedInput {
                input,
                kind: kind.id().into(),
                reason: message,
            })
        }
        // A pickle that is not a memory snapshot, found while walking a directory or bundled
        // for a bug report, is noted, not fatal; named on its own it is an error.
        Err((InputError::Snapshot(e), kind))
            if (from_dir || opts.skip_unsupported)
                && matches!(
                    *e,
                    crate::ingest::snapshot::SnapshotError::NotASnapshot { .. }
                ) =>
        {
            Read1::Skipped(SkippedInput {
                input: item_name(item, opts),
                kind: kind.id().into(),
                reason: e.to_string(),
            })
        }
        Err((e, kind)) => Read1::Failed(e, Some(kind)),
    }
}

fn item_name(item: &Item, opts: &DiagnoseOptions) -> String {
    match item {
        Item::Stdin => opts.stdin_name.clone(),
        Item::File { path, .. } => path.clone(),
    }
}

/// A whole analysis: the diagnosis, the input errors, and what each input was.
pub struct Analysis {
    pub diagnosis: Diagnosis,
    pub errors: Vec<InputError>,
    /// Every file read from disk (named or found in a directory), with its sniffed kind.
    pub files: Vec<(String, InputKind)>,
}

/// Diagnoses inputs (paths, directories or `-`): the whole analysis without any output.
/// Files are read in parallel; results keep the order of the command line (and of the
/// directory walk). Inputs that cannot be read are returned as errors and listed in the
/// diagnosis; the others are still diagnosed.
pub fn analyze(
    specs: &[String],
    rules: &RuleSet,
    opts: &DiagnoseOptions,
    mut stdin: Option<Box<dyn Read>>,
) -> Analysis {
    let mut diagnosis = Diagnosis::new();
    let mut errors = Vec::new();
    let mut items: Vec<Item> = Vec::new();
    for spec in specs {
        if spec == "-" {
            items.push(Item::Stdin);
            continue;
        }
        let path = std::path::Path::new(spec);
        if path.is_dir() {
            match crate::input::walk::walk_filtered(path, &opts.filter) {
                Ok(w) => {
                    if w.files.is_empty() {
                        let e = InputError::Unsupported {
                            input: spec.clone(),
                            message: "the directory holds no files to read".into(),
                            help: Some(if opts.filter == crate::input::walk::Filter::default() {
                                "hidden files and directories are skipped".into()
                            } else {
                                "hidden files and directories are skipped, and so is what --glob and --exclude leave out".into()
                            }),
                        };
                        diagnosis.errors.push(InputErrorReport {
                            input: spec.clone(),
                            message: e.to_string(),
                        });
                        errors.push(e);
                    }
                    for (p, reason) in w.skipped {
                        diagnosis.skipped.push(SkippedInput {
                            input: p.display().to_string(),
                            kind: "directory".into(),
                            reason,
                        });
                    }
                    items.extend(w.files.into_iter().map(|p| Item::File {
                        path: p.display().to_string(),
                        from_dir: true,
                    }));
                }
                Err(e) => {
                    let e = InputError::from_io(spec, e, false, 0);
                    diagnosis.errors.push(InputErrorReport {
                        input: spec.clone(),
                        message: e.to_string(),
                    });
                    errors.push(e);
                }
            }
        } else {
            items.push(Item::File {
                path: spec.clone(),
                from_dir: false,
            });
        }
    }
    // Standard input is read here, in order; files on worker threads.
    let mut results: Vec<Option<Read1>> = items
        .iter()
        .map(|it| match it {
            Item::Stdin => Some(read_item(it, opts, stdin.take())),
            Item::File { .. } => None,
        })
        .collect();
    let files: Vec<(usize, &Item)> = items
        .iter()
        .enumerate()
        .filter(|(_, it)| matches!(it, Item::File { .. }))
        .collect();
    let read =
        crate::input::walk::parallel_map(&files, crate::input::walk::threads(), |(_, it)| {
            read_item(it, opts, None)
        });
    for ((i, _), r) in files.iter().zip(read) {
        results[*i] = Some(r);
    }
    let mut kinds = Vec::new();
    let mut ingested = crate::incident::fusion::Ingested::default();
    if let Some(m) = &opts.model {
        match model_input(m) {
            Ok(outcome) => {
                diagnosis.inputs.push(outcome.report);
                ingested
                    .shared
                    .merge(&outcome.shared_facts.unwrap_or_default(), false);
            }
            Err(e) => {
                diagnosis.errors.push(InputErrorReport {
                    input: m.display().to_string(),
                    message: e.to_string(),
                });
                errors.push(e);
            }
        }
    }
    for (item, r) in items.iter().zip(results) {
        let name = match item {
            Item::Stdin => opts.stdin_name.clone(),
            Item::File { path, .. } => path.clone(),
        };
        match r {
            Some(Read1::Done(outcome, kind)) => {
                if matches!(item, Item::File { .. }) {
                    kinds.push((name, kind));
                }
                diagnosis.inputs.push(outcome.report);
                ingested.incidents.extend(outcome.incidents);
                diagnosis.series.extend(outcome.series);
                diagnosis.snapshots.extend(outcome.snapshots);
                if let Some(f) = outcome.shared_facts {
                    ingested.shared.merge(&f, false);
                }
                ingested.snapshots.extend(outcome.snapshot);
                ingested.series.extend(outcome.series_set);
            }
            Some(Read1::Skipped(s)) => {
                if let (Item::File { .. }, Ok(kind)) = (
                    item,
                    <InputKind as clap::ValueEnum>::from_str(&s.kind, false),
                ) {
                    kinds.push((name, kind));
                }
                diagnosis.skipped.push(s);
            }
            Some(Read1::Failed(e, kind)) => {
                if let (Item::File { .. }, Some(kind)) = (item, kind) {
                    kinds.push((name.clone(), kind));
                }
                diagnosis.errors.push(InputErrorReport {
                    input: name,
                    message: e.to_string(),
                });
                errors.push(e);
            }
            None => {}
        }
    }
    let fused = crate::incident::fusion::fuse(ingested);
    for r in diagnosis.inputs.iter_mut().filter(|r| r.kind == "series") {
        r.incidents = fused.ooms.iter().filter(|m| *m.input == *r.name).count();
    }
    diagnosis.series.extend(fused.series_plots);
    let reports = fused
        .incidents
        .iter()
        .map(|i| crate::diagnosis::verdict::diagnose(i, rules))
        .collect();
    diagnosis.incidents = crate::diagnosis::verdict::finish(reports);
    diagnosis.collect_excerpts();
    diagnosis.group_repeats();
    Analysis {
        diagnosis,
        errors,
        files: kinds,
    }
}

/// Diagnoses inputs (paths, directories or `-`): the whole analysis without any output.
/// Inputs that cannot be read are returned as errors and listed in the diagnosis; the
/// others are still diagnosed.
pub fn diagnose_inputs(
    specs: &[String],
    rules: &RuleSet,
    opts: &DiagnoseOptions,
    stdin: Option<Box<dyn Read>>,
) -> (Diagnosis, Vec<InputError>) {
    let a = analyze(specs, rules, opts, stdin);
    (a.diagnosis, a.errors)
}

/// The exit status of a diagnosis under the CI policy: 2 for input errors, otherwise 1 when
/// an incident fails the policy (any incident, or with `--fail-on` one with a listed cause),
/// else 0.
pub fn exit_status(d: &Diagnosis, policy: &Policy, exit_zero: bool) -> Exit {
    if !d.errors.is_empty() {
        Exit::Error
    } else if !exit_zero && d.incidents.iter().any(|i| policy.fails(i)) {
        Exit::Incident
    } else {
        Exit::Clean
    }
}

fn rule_infos(rules: &RuleSet) -> Vec<RuleInfo> {
    rules
        .rules
        .iter()
        .map(|r| RuleInfo {
            id: r.id.clone(),
            cause: r.cause,
            title: r.title.clone(),
            explanation: r.explanation.clone(),
        })
        .collect()
}

/// Renders a diagnosis in a format (no side effects).
pub fn render_diagnosis(
    d: &Diagnosis,
    format: Format,
    policy: &Policy,
    rules: &RuleSet,
    style: render::human::Style,
    explain: bool,
) -> String {
    match format {
        Format::Json => render::json::render(d),
        Format::Human => render::human::render(d, &style, explain),
        Format::Markdown => {
            let mut o = render::markdown::Options::new();
            o.policy = policy.clone();
            render::markdown::render(d, &o)
        }
        Format::Github => render::github::render(d, policy),
        Format::Sarif => render::sarif::render(
            d,
            &render::sarif::Options {
                rules: rule_infos(rules),
                policy: policy.clone(),
            },
        ),
        Format::Junit => render::junit::render(d, policy),
        Format::Html => render::html::render(
            d,
            &render::html::Options {
                policy: policy.clone(),
            },
        ),
    }
}

/// Writes a report to `--output` (a file, or `-` for stdout) or stdout, guarded for `sink`
/// either way: a report file is shown with `cat` as often as it is opened.
fn deliver(io: &mut Io<'_>, output: Option<&Path>, text: &str, sink: Sink, status: Exit) -> Exit {
    match output {
        Some(p) if p != Path::new("-") => {
            match std::fs::write(p, render::terminal::guard(text, sink).as_bytes()) {
                Ok(()) => status,
                Err(e) => {
                    let _ = writeln!(
                        io.stderr,
                        "error: cannot write {}: {e}",
                        render::terminal::visible(&p.display().to_string())
                    );
                    Exit::Error
                }
            }
        }
        _ => finish_output(io, text, sink, status),
    }
}

/// `--output` names a file that is also an input.
#[derive(Debug, thiserror::Error, Diagnostic)]
#[error("{output}: the output is also an input ({input}); writing there would overwrite it")]
#[diagnostic(
    code(oomdoctor::output::is_input),
    help("write the report somewhere else, e.g. `-o oomdoctor-report.md`")
)]
pub struct OutputIsInput {
    pub output: String,
    pub input: String,
}

/// Whether two paths are the same file (both must exist).
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        matches!(
            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
            (Ok(x), Ok(y)) if x == y
        )
    }
}

/// Refuses an `--output` that would overwrite an input: a file named as an input (or as
/// `--model`), or a file inside a directory input, unless that file is a report of ours
/// (the walk skips those, and writing the report again is what the user wants).
fn check_output(
    output: Option<&Path>,
    inputs: &[String],
    model: Option<&Path>,
) -> Result<(), OutputIsInput> {
    let Some(out) = output.filter(|p| *p != Path::new("-")) else {
        return Ok(());
    };
    if !out.exists() {
        return Ok(());
    }
    let refuse = |input: &str| OutputIsInput {
        output: out.display().to_string(),
        input: input.to_string(),
    };
    for spec in inputs.iter().filter(|s| *s != "-") {
        let p = Path::new(spec);
        if same_file(out, p) {
            return Err(refuse(spec));
        }
        if p.is_dir() {
            let inside = match (std::fs::canonicalize(out), std::fs::canonicalize(p)) {
                (Ok(o), Ok(d)) => o.starts_with(d),
                _ => false,
            };
            let ours = std::fs::File::open(out)
                .and_then(|f| {
                    let mut head = Vec::new();
                    f.take(4096).read_to_end(&mut head).map(|_| head)
                })
                .is_ok_and(|h| crate::input::walk::is_own_report(&h));
            if inside && out.is_file() && !ours {
                return Err(refuse(spec));
            }
        }
    }
    if let Some(m) = model.filter(|m| same_file(out, m)) {
        return Err(refuse(&m.display().to_string()));
    }
    Ok(())
}

/// The inputs named, or standard input when none is and it is not a terminal; `None` (with
/// `no_input` printed) when there is nothing to read.
fn inputs_or_stdin<T: Clone + From<&'static str>>(
    named: &[T],
    io: &mut Io<'_>,
    no_input: &str,
) -> Option<Vec<T>> {
    if !named.is_empty() {
        return Some(named.to_vec());
    }
    if io.stdin_is_tty {
        let _ = writeln!(io.stderr, "{no_input}");
        return None;
    }
    Some(vec!["-".into()])
}

fn diagnose_command(args: &DiagnoseArgs, io: &mut Io<'_>) -> Exit {
    if args.format == Format::Html && args.output.is_none() {
        let _ = writeln!(
            io.stderr,
            "error: --format html writes a file: add --output report.html (or --output - for standard output)"
        );
        return Exit::Error;
    }
    let Some(rules) = load_rules(&args.rules, io) else {
        return Exit::Error;
    };
    let Some(inputs) = inputs_or_stdin(
        &args.inputs,
        io,
        "oomdoctor: no input. Pipe a crash log in (`cat crash.log | oomdoctor`) or name files (`oomdoctor crash.log`).\nSee `oomdoctor --help`.",
    ) else {
        return Exit::Error;
    };
    if let Err(e) = check_output(args.output.as_deref(), &inputs, args.model.as_deref()) {
        report_error(io, &e);
        return Exit::Error;
    }
    let stdin = io.stdin.take();
    let mut opts = DiagnoseOptions::from(args);
    opts.progress = io.stderr_is_tty;
    let (diagnosis, errors) = diagnose_inputs(&inputs, &rules, &opts, stdin);
    for e in &errors {
        report_error(io, e);
    }
    let policy = Policy {
        fail_on: args.fail_on.clone(),
    };
    let to_stdout = args.output.as_deref().is_none_or(|p| p == Path::new("-"));
    let style = render::human::Style {
        color: to_stdout && use_color(args.color, io.stdout_is_tty),
        width: output_width(to_stdout && io.stdout_is_tty),
    };
    let text = if args.quiet && args.format == Format::Human {
        render::human::render_quiet(&diagnosis, &style)
    } else {
        render_diagnosis(
            &diagnosis,
            args.format,
            &policy,
            &rules,
            style,
            args.explain,
        )
    };
    if args.format == Format::Github {
        if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
            let mut o = render::markdown::Options::new();
            o.policy = policy.clone();
            let md = render::markdown::render(&diagnosis, &o);
            if let Err(e) = append(Path::new(&path), &render::terminal::guard(&md, Sink::Text)) {
                let _ = writeln!(
                    io.stderr,
                    "warning: cannot append to $GITHUB_STEP_SUMMARY ({}): {e}",
                    render::terminal::visible(&Path::new(&path).display().to_string())
                );
            }
        }
    }
    let status = exit_status(&diagnosis, &policy, args.exit_zero);
    let sink = format_sink(args.format, style.color);
    deliver(io, args.output.as_deref(), &text, sink, status)
}

fn append(path: &Path, text: &str) -> io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")
}

fn bundle_command(args: &BundleArgs, io: &mut Io<'_>) -> Exit {
    let Some(rules) = load_rules(&args.rules, io) else {
        return Exit::Error;
    };
    let mut redact = Vec::new();
    for p in &args.redact {
        match regex::Regex::new(p) {
            Ok(r) => redact.push(r),
            Err(e) => {
                let _ = writeln!(
                    io.stderr,
                    "error: --redact {p:?} is not a regular expression: {e}"
                );
                return Exit::Error;
            }
        }
    }
    let Some(inputs) = inputs_or_stdin(
        &args.inputs,
        io,
        "oomdoctor bundle: no input. Name the crash log (`oomdoctor bundle crash.log -o report.md`) or pipe it in.",
    ) else {
        return Exit::Error;
    };
    if let Err(e) = check_output(args.output.as_deref(), &inputs, None) {
        report_error(io, &e);
        return Exit::Error;
    }
    // A bundle is for a bug report: an input this build cannot analyse (a snapshot, say) is
    // mentioned, not fatal.
    let opts = DiagnoseOptions {
        stdin_name: args.stdin_name.clone(),
        input_kind: args.input_kind,
        skip_unsupported: true,
        filter: crate::input::walk::Filter {
            include: args.glob.clone(),
            exclude: args.exclude.clone(),
        },
        ..DiagnoseOptions::default()
    };
    let stdin = io.stdin.take();
    let a = analyze(&inputs, &rules, &opts, stdin);
    for e in &a.errors {
        report_error(io, e);
    }
    let d = &a.diagnosis;
    let sources: Vec<crate::bundle::Source<'_>> = a
        .files
        .iter()
        .filter(|(_, k)| *k == InputKind::Log)
        .map(|(name, _)| {
            let path = name.clone();
            crate::bundle::Source {
                name: name.clone(),
                open: Box::new(move || {
                    input::open(&path, Box::new(io::empty()), "", Some(InputKind::Log))
                        .map(|o| o.reader)
                        .map_err(|e| io::Error::other(e.to_string()))
                }),
            }
        })
        .collect();
    let snapshots: Vec<String> = a
        .files
        .iter()
        .filter(|(_, k)| *k == InputKind::Snapshot)
        .map(|(n, _)| n.clone())
        .collect();
    let extras = crate::bundle::gather(d, &sources, &snapshots);
    let text = match args.format {
        BundleFormat::Markdown => crate::bundle::markdown_with(d, &extras, &redact),
        BundleFormat::Json => crate::bundle::json_with(d, &extras, &redact),
    };
    let status = if d.errors.is_empty() {
        Exit::Clean
    } else {
        Exit::Error
    };
    let sink = match args.format {
        BundleFormat::Markdown => Sink::Text,
        BundleFormat::Json => Sink::Json,
    };
    let status = deliver(io, args.output.as_deref(), &text, sink, status);
    if let Some(p) = args.output.as_deref().filter(|p| *p != Path::new("-")) {
        if p.exists() {
            let _ = writeln!(
                io.stderr,
                "oomdoctor: wrote {} ({}); read it before you post it",
                render::terminal::visible(&p.display().to_string()),
                crate::render::text::count(d.incidents.len(), "incident")
            );
        }
    }
    status
}

/// Text for `oomdoctor explain` with no topic: what can be explained.
pub fn explain_topics(rules: &RuleSet) -> String {
    let mut out = String::from(
        "oomdoctor explain TOPIC: a cause, a rule, a phase, a fact, or `rules` (the rule file format).\n\nCauses:\n",
    );
    for c in Cause::ALL {
        let _ = writeln!(out, "  {:<24} {}", c.id(), c.title());
    }
    let _ = writeln!(out, "\nPhases:");
    for (p, _) in crate::incident::phase::PHASES {
        let _ = writeln!(out, "  {p}");
    }
    let _ = writeln!(
        out,
        "\nRules: {} in force (`oomdoctor rules` lists them).\nFacts: {} (`oomdoctor facts` lists them).",
        rules.rules.len(),
        crate::facts::catalog::all().count()
    );
    out
}

/// Topics close to an unknown one: those it is a prefix or part of, else those within a
/// small edit distance. At most five, closest first.
fn did_you_mean(id: &str, rules: &RuleSet) -> Vec<String> {
    let id = id.to_ascii_lowercase();
    let mut topics: Vec<String> = Cause::ALL.iter().map(|c| c.id().to_string()).collect();
    topics.extend(
        crate::incident::phase::PHASES
            .iter()
            .map(|(p, _)| p.to_string()),
    );
    topics.extend(rules.rules.iter().map(|r| r.id.clone()));
    topics.extend(crate::facts::catalog::all().map(|f| f.name.to_string()));
    topics.push("rules".into());
    let mut close: Vec<(usize, String)> = topics
        .into_iter()
        .filter_map(|t| {
            if id.len() >= 3 && t.contains(&id) {
                return Some((usize::from(!t.starts_with(&id)), t));
            }
            let d = strsim::levenshtein(&id, &t);
            (d <= (id.len() / 3).max(1)).then_some((2 + d, t))
        })
        .collect();
    close.sort();
    close.dedup_by(|a, b| a.1 == b.1);
    close.into_iter().take(5).map(|(_, t)| t).collect()
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
    if let Some((p, doc)) = crate::incident::phase::PHASES
        .iter()
        .find(|(p, _)| *p == id)
    {
        let _ = writeln!(out, "phase {p}: {doc}");
        return Some(out);
    }
    if let Some(f) = crate::facts::catalog::lookup(id) {
        let _ = writeln!(out, "fact {} ({:?}): {}", f.name, f.unit, f.doc);
        return Some(out);
    }
    if id == "rules" {
        out.push_str(crate::diagnosis::rules::FORMAT_HELP);
        return Some(out);
    }
    None
}

fn list_rules(set: &RuleSet, format: ListFormat) -> String {
    match format {
        ListFormat::Json => {
            let rows: Vec<serde_json::Value> = set
                .rules
                .iter()
                .map(|r| serde_json::json!({"id": r.id, "cause": r.cause, "title": r.title, "origin": r.origin, "signals": r.signals.len(), "fixes": r.fixes.len()}))
                .collect();
            let mut s = serde_json::to_string_pretty(&rows).unwrap_or_default();
            s.push('\n');
            s
        }
        ListFormat::Human => {
            let mut out = String::new();
            for r in &set.rules {
                let _ = writeln!(out, "{:<38} {:<24} {}", r.id, r.cause.id(), r.title);
            }
            out
        }
    }
}

fn list_facts(format: ListFormat) -> String {
    match format {
        ListFormat::Json => {
            let rows: Vec<serde_json::Value> = crate::facts::catalog::all()
                .map(|f| serde_json::json!({"name": f.name, "unit": f.unit, "doc": f.doc}))
                .collect();
            let mut s = serde_json::to_string_pretty(&rows).unwrap_or_default();
            s.push('\n');
            s
        }
        ListFormat::Human => {
            let mut out = String::new();
            for f in crate::facts::catalog::all() {
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
