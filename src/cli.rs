//! The command line, declared with clap. Parsing only: [`crate::app`] does the work.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::input::InputKind;
use crate::render::Format;

const EXIT_CODES: &str = "\
Exit codes:
  0  no out-of-memory incident found (or --exit-zero)
  1  at least one incident found
  2  an input or rule file could not be read or decoded, or the command line is wrong

Examples:
  cat crash.log | oomdoctor
  oomdoctor job-1234.out.gz --format json
  oomdoctor crash.log snapshot.pickle
  oomdoctor explain fragmentation";

/// Tells you why your GPU ran out of memory and what to change, with numbers.
#[derive(Debug, Parser)]
#[command(name = "oomdoctor", version, about, long_about = None, after_help = EXIT_CODES, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub diagnose: DiagnoseArgs,
}

/// Options of the default command: diagnose inputs.
#[derive(Debug, Args, Clone)]
pub struct DiagnoseArgs {
    /// Crash logs, PyTorch memory snapshots, memory series: files or `-` for stdin (gzip is
    /// read transparently). With no input, reads stdin when it is not a terminal.
    #[arg(value_name = "INPUT")]
    pub inputs: Vec<String>,

    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Human)]
    pub format: Format,

    /// Read rules from this directory too (a rule with a built-in id replaces it).
    #[arg(long, value_name = "DIR")]
    pub rules: Option<PathBuf>,

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

    /// When to use colour in human output.
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
        id: String,
        /// Also load rules from this directory.
        #[arg(long, value_name = "DIR")]
        rules: Option<PathBuf>,
    },
    /// List the rules in force.
    Rules {
        #[arg(long, short = 'f', value_enum, default_value_t = Format::Human)]
        format: Format,
        /// Also load rules from this directory.
        #[arg(long, value_name = "DIR")]
        rules: Option<PathBuf>,
    },
    /// Will it fit? Weights, KV cache and the settings per engine for a model on a GPU, before
    /// launch. Exits 1 when it does not fit, so CI can gate a deployment.
    Plan(crate::model::plan::PlanArgs),
    /// List every fact rules can read (the catalogue).
    Facts {
        #[arg(long, short = 'f', value_enum, default_value_t = Format::Human)]
        format: Format,
    },
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
}
