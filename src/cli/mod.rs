//! The command line, declared with clap. Parsing only: [`crate::cli::app`] does the work.

pub mod app;
pub mod bundle;
pub mod config;
pub mod diagnose;
pub mod explain;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::diagnosis::cause::Cause;
use crate::input::InputKind;
use crate::render::{Format, ListFormat};

const EXIT_CODES: &str = "\
Exit codes:
  0  no out-of-memory incident found (or --exit-zero, or none with a --fail-on cause)
  1  at least one incident found (with --fail-on: one with a listed cause)
  2  an input or rule file could not be read or decoded, or the command line is wrong

Examples:
  cat crash.log | oomdoctor
  oomdoctor job-1234.out.gz --format json
  oomdoctor crash.log snapshot.pickle
  oomdoctor runs/ --format markdown
  oomdoctor job.log --format github --fail-on host-oom,memory-leak
  oomdoctor job.log --format html --output report.html
  oomdoctor bundle job.log --output oom-report.md
  oomdoctor explain fragmentation";

/// Tells you why your GPU ran out of memory and what to change, with numbers.
#[derive(Debug, Parser)]
#[command(name = "oomdoctor", version, about, long_about = None, after_help = EXIT_CODES, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub diagnose: DiagnoseArgs,
    /// Read defaults from this file (`[tool.oomdoctor]` in a pyproject.toml, or an
    /// oomdoctor.toml) instead of the nearest one upward from the working directory.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        conflicts_with = "no_config",
        help_heading = "Configuration"
    )]
    pub config: Option<PathBuf>,
    /// Read no configuration file.
    #[arg(long, global = true, help_heading = "Configuration")]
    pub no_config: bool,
}

/// Options of the default command: diagnose inputs.
#[derive(Debug, Args, Clone)]
pub struct DiagnoseArgs {
    /// Crash logs, PyTorch memory snapshots, memory series: files, directories (every file
    /// under them, read in parallel) or `-` for stdin (gzip is read transparently). With no
    /// input, reads stdin when it is not a terminal.
    #[arg(value_name = "INPUT")]
    pub inputs: Vec<String>,

    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Human)]
    pub format: Format,

    /// Write the report to FILE instead of standard output (`-`: standard output). Required
    /// with `--format html`.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Exit 1 only when an incident has one of these causes (comma-separated cause ids);
    /// incidents with other causes are still reported. Errors still exit 2.
    #[arg(
        long,
        value_name = "CAUSE",
        value_delimiter = ',',
        conflicts_with = "exit_zero"
    )]
    pub fail_on: Vec<Cause>,

    /// Read rules from this directory too (a rule with a built-in id replaces it; repeatable).
    #[arg(long, value_name = "DIR")]
    pub rules: Vec<PathBuf>,

    /// In directory inputs, read only files whose path (relative to the directory) or name
    /// matches one of these globs (`*`, `?`, `**`; repeatable). Named files are always read.
    #[arg(long, value_name = "GLOB")]
    pub glob: Vec<String>,

    /// In directory inputs, leave out files and directories whose path or name matches
    /// one of these globs (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,

    /// Human output: one line per distinct incident, nothing when none is found.
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// Exit 0 even when incidents are found (errors still exit 2).
    #[arg(long)]
    pub exit_zero: bool,

    /// Treat every input as this kind instead of sniffing the content.
    #[arg(long, value_enum, value_name = "KIND")]
    pub input_kind: Option<InputKind>,

    /// Name standard input in reports (default `<stdin>`).
    #[arg(long, value_name = "NAME", default_value = "<stdin>")]
    pub stdin_name: String,

    /// Show the arithmetic behind computed fix values, all facts and the losing causes' evidence.
    #[arg(long)]
    pub explain: bool,

    /// The model that ran: a Hugging Face config.json or a GGUF file. Its geometry (layers,
    /// KV heads, parameters) lets fixes carry exact values. A config or GGUF given as an
    /// INPUT is used the same way.
    #[arg(long, value_name = "PATH")]
    pub model: Option<PathBuf>,

    /// Largest snapshot pickle to read, in bytes (default 4 GiB). Pickles are untrusted input.
    #[arg(long, value_name = "BYTES", help_heading = "Limits")]
    pub max_pickle_bytes: Option<u64>,

    /// Most objects a snapshot pickle may create (default 200 million).
    #[arg(long, value_name = "N", help_heading = "Limits")]
    pub max_pickle_objects: Option<u64>,

    /// Deepest nesting a snapshot pickle may use (default 1 million).
    #[arg(long, value_name = "N", help_heading = "Limits")]
    pub max_pickle_depth: Option<u64>,

    /// When to use colour in human output, help and error messages (auto: on a terminal,
    /// unless NO_COLOR is set).
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

/// Colour choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Explain a cause, a rule, a phase or a fact: `oomdoctor explain fragmentation`.
    Explain {
        /// A cause id, rule id, phase id, fact name, or `rules` for the rule file format.
        /// Without one, lists the topics.
        id: Option<String>,
        /// Also load rules from this directory.
        #[arg(long, value_name = "DIR")]
        rules: Vec<PathBuf>,
    },
    /// List the rules in force.
    Rules {
        #[arg(long, short = 'f', value_enum, default_value_t = ListFormat::Human)]
        format: ListFormat,
        /// Also load rules from this directory.
        #[arg(long, value_name = "DIR")]
        rules: Vec<PathBuf>,
    },
    /// Will it fit? Weights, KV cache and the settings per engine for a model on a GPU, before
    /// launch. Exits 1 when it does not fit, so CI can gate a deployment.
    Plan(crate::knowledge::plan::PlanArgs),
    /// List every fact rules can read (the catalogue).
    Facts {
        #[arg(long, short = 'f', value_enum, default_value_t = ListFormat::Human)]
        format: ListFormat,
    },
    /// Write a redacted report for a bug report: the diagnosis, the evidence lines with two
    /// lines either side, the environment the logs state and snapshot summaries, with home
    /// paths, host names, IP addresses, tokens and e-mail addresses masked.
    Bundle(BundleArgs),
    /// Print a shell completion script: `oomdoctor completions bash > /etc/bash_completion.d/oomdoctor`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print a man page (roff): `oomdoctor man > oomdoctor.1`, `oomdoctor man plan >
    /// oomdoctor-plan.1`, or write every page with `oomdoctor man --dir DIR`.
    Man {
        /// The subcommand whose page to print (`plan`, `bundle`, ...); the main page without.
        subcommand: Option<String>,
        /// Write every page (`oomdoctor.1`, `oomdoctor-plan.1`, ...) into this directory
        /// instead of printing one.
        #[arg(long, value_name = "DIR", conflicts_with = "subcommand")]
        dir: Option<PathBuf>,
    },
}

/// Options of `oomdoctor bundle`.
#[derive(Debug, Args, Clone)]
pub struct BundleArgs {
    /// Crash logs, snapshots, series, directories, or `-` for stdin.
    #[arg(value_name = "INPUT")]
    pub inputs: Vec<String>,

    /// Write the bundle to FILE instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Bundle format.
    #[arg(long, short = 'f', value_enum, default_value_t = BundleFormat::Markdown)]
    pub format: BundleFormat,

    /// Read rules from this directory too.
    #[arg(long, value_name = "DIR")]
    pub rules: Vec<PathBuf>,

    /// Also mask what matches this regular expression, as `[REDACTED]` (repeatable).
    #[arg(long, value_name = "REGEX")]
    pub redact: Vec<String>,

    /// In directory inputs, read only files matching one of these globs (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub glob: Vec<String>,

    /// In directory inputs, leave out files and directories matching these globs.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,

    /// Treat every input as this kind instead of sniffing the content.
    #[arg(long, value_enum, value_name = "KIND")]
    pub input_kind: Option<InputKind>,

    /// Name standard input in the bundle (default `<stdin>`).
    #[arg(long, value_name = "NAME", default_value = "<stdin>")]
    pub stdin_name: String,
}

/// Formats of a bundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BundleFormat {
    /// Markdown to paste into an issue.
    Markdown,
    /// The diagnosis and the extras as JSON, every string redacted.
    Json,
}

impl clap::ValueEnum for Cause {
    fn value_variants<'a>() -> &'a [Self] {
        &Cause::ALL
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.id()).help(self.title()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn inputs_and_subcommands() {
        let c = Cli::try_parse_from(["oomdoctor", "a.log", "-", "--format", "json"]).unwrap();
        assert_eq!(c.diagnose.inputs, vec!["a.log", "-"]);
        assert!(c.command.is_none());
        let c = Cli::try_parse_from(["oomdoctor", "explain", "fragmentation"]).unwrap();
        assert!(matches!(c.command, Some(Command::Explain { .. })));
    }

    #[test]
    fn fail_on_takes_a_list_of_causes() {
        let c = Cli::try_parse_from(["oomdoctor", "a.log", "--fail-on", "host-oom,fragmentation"])
            .unwrap();
        assert_eq!(
            c.diagnose.fail_on,
            vec![Cause::HostOom, Cause::Fragmentation]
        );
        assert!(Cli::try_parse_from(["oomdoctor", "a.log", "--fail-on", "oom"]).is_err());
        assert!(
            Cli::try_parse_from(["oomdoctor", "a.log", "--fail-on", "host-oom", "--exit-zero"])
                .is_err()
        );
    }

    #[test]
    fn bundle_completions_man() {
        let c = Cli::try_parse_from(["oomdoctor", "bundle", "a.log", "-o", "b.md"]).unwrap();
        assert!(matches!(c.command, Some(Command::Bundle(_))));
        let c = Cli::try_parse_from(["oomdoctor", "completions", "zsh"]).unwrap();
        assert!(matches!(c.command, Some(Command::Completions { .. })));
        let c = Cli::try_parse_from(["oomdoctor", "man"]).unwrap();
        assert!(matches!(
            c.command,
            Some(Command::Man {
                subcommand: None,
                dir: None
            })
        ));
        let c = Cli::try_parse_from(["oomdoctor", "man", "plan"]).unwrap();
        assert!(matches!(c.command, Some(Command::Man { subcommand: Some(s), .. }) if s == "plan"));
        assert!(Cli::try_parse_from(["oomdoctor", "man", "plan", "--dir", "d"]).is_err());
    }
}
