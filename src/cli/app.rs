//! The application: runs a parsed command line against an [`Io`] and returns the exit code:
//! dispatch to the command's module ([`super::diagnose`], [`super::bundle`],
//! [`super::explain`]), colour, width, errors and where output goes.
//!
//! Kept apart from `main.rs` so tests drive the whole program in-process with their own
//! stdin, stdout and stderr.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::process::ExitCode;

use miette::{Diagnostic, GraphicalReportHandler, GraphicalTheme};

use crate::diagnosis::cause::Cause;
use std::path::Path;

use crate::cli::{Cli, ColorChoice, Command};
use crate::diagnosis::rules::RuleSet;
use crate::render::terminal::Sink;
use crate::render::{self, Format, ListFormat};

use super::bundle::bundle_command;
use super::diagnose::diagnose_command;
use super::explain::{did_you_mean, explain, explain_topics, list_facts, list_rules};

/// The process's streams, replaceable in tests.
pub struct Io<'a> {
    pub stdin: Option<Box<dyn Read + Send>>,
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
pub(crate) fn color_from_args(args: &[OsString]) -> ColorChoice {
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
pub(crate) fn hoist_config_args(mut args: Vec<OsString>) -> Vec<OsString> {
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
pub(crate) fn stderr_color(io: &Io<'_>) -> bool {
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
pub(crate) fn apply_config(
    cli: &mut Cli,
    matches: &clap::ArgMatches,
    cfg: &crate::cli::config::Config,
) {
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
pub(crate) fn emit(io: &mut Io<'_>, text: &str, sink: render::terminal::Sink) -> io::Result<()> {
    match io
        .stdout
        .write_all(render::terminal::guard(text, sink).as_bytes())
        .and_then(|_| io.stdout.flush())
    {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(e),
        other => other,
    }
}

pub(crate) fn load_rules(dirs: &[std::path::PathBuf], io: &mut Io<'_>) -> Option<RuleSet> {
    report_rules(rules_from(dirs), io)
}

/// Why the rules could not be loaded: a built-in or user rule that does not parse, or a
/// rules directory that cannot be read.
pub(crate) type RulesError = Box<dyn Diagnostic + Send + Sync>;

/// The rules as loaded: the set (or why it failed) and the directory entries left out
/// before that.
pub(crate) struct LoadedRules {
    rules: Result<RuleSet, RulesError>,
    skipped: Vec<crate::diagnosis::rules::SkippedEntry>,
}

/// The built-in rules with the rules of `dirs` added; writes nothing, so that it can run on
/// a thread of its own ([`report_rules`] says what happened).
pub(crate) fn rules_from(dirs: &[std::path::PathBuf]) -> LoadedRules {
    let mut skipped = Vec::new();
    let rules = RuleSet::builtin()
        .map_err(|e| Box::new(e) as RulesError)
        .and_then(|mut set| {
            for d in dirs {
                skipped.extend(set.load_dir(d).map_err(|e| Box::new(e) as RulesError)?);
            }
            Ok(set)
        });
    LoadedRules { rules, skipped }
}

/// Reports what [`rules_from`] left out and why it failed, if it did; the rules, if they
/// loaded.
pub(crate) fn report_rules(loaded: LoadedRules, io: &mut Io<'_>) -> Option<RuleSet> {
    for s in loaded.skipped {
        let _ = writeln!(
            io.stderr,
            "oomdoctor: skipped {}: {}",
            render::terminal::visible(&s.path),
            s.why
        );
    }
    match loaded.rules {
        Ok(set) => Some(set),
        Err(e) => {
            report_error(io, &*e);
            None
        }
    }
}

/// How a listing's text is guarded on its way out.
pub(crate) fn list_sink(format: ListFormat) -> Sink {
    match format {
        ListFormat::Human => Sink::Text,
        ListFormat::Json => Sink::Json,
    }
}

/// How a diagnosis format's text is guarded on its way out (to a terminal or a file).
pub(crate) fn format_sink(format: Format, color: bool) -> Sink {
    match format {
        Format::Human if color => Sink::Colored,
        Format::Human | Format::Markdown | Format::Github => Sink::Text,
        Format::Json | Format::Sarif => Sink::Json,
        Format::Junit | Format::Html => Sink::Xml,
    }
}

pub(crate) fn use_color(choice: ColorChoice, tty: bool) -> bool {
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
pub(crate) fn man_pages(
    io: &mut Io<'_>,
    subcommand: Option<&str>,
    dir: Option<std::path::PathBuf>,
) -> Exit {
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
pub(crate) fn finish_output(io: &mut Io<'_>, text: &str, sink: Sink, status: Exit) -> Exit {
    match emit(io, text, sink) {
        Ok(()) => status,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => status,
        Err(e) => {
            let _ = writeln!(io.stderr, "error: cannot write output: {e}");
            Exit::Error
        }
    }
}

/// Writes a report to `--output` (a file, or `-` for stdout) or stdout, guarded for `sink`
/// either way: a report file is shown with `cat` as often as it is opened.
pub(crate) fn deliver(
    io: &mut Io<'_>,
    output: Option<&Path>,
    text: &str,
    sink: Sink,
    status: Exit,
) -> Exit {
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
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
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
pub(crate) fn check_output(
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
pub(crate) fn inputs_or_stdin<T: Clone + From<&'static str>>(
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
