//! The configuration file: defaults for the command line, kept with the project.
//!
//! Python and ML projects configure their tools in `pyproject.toml`, so oomdoctor reads a
//! `[tool.oomdoctor]` table there, or an `oomdoctor.toml` (or `.oomdoctor.toml`) with the
//! same keys at the top level. The file is found as ruff finds its own: from the working
//! directory upward, the first directory holding `.oomdoctor.toml`, `oomdoctor.toml`, or a
//! `pyproject.toml` with a `[tool.oomdoctor]` table (in that order) wins; files are never
//! merged. `--config FILE` names one instead, `--no-config` reads none.
//!
//! Keys are named as the long flags are (`format`, `fail-on`, `rules`, `glob`, `exclude`,
//! `redact`, `color`) and take the values the flags take. A flag given on the command line
//! wins over its key. Paths (`rules`) are relative to the file's directory. An unknown key
//! or a bad value is an error naming the file and the line (exit code 2).

use std::path::{Path, PathBuf};

use miette::{Diagnostic, NamedSource, SourceSpan};
use serde::Deserialize;
use toml::Spanned;

use crate::cli::ColorChoice;
use crate::diagnosis::cause::Cause;
use crate::render::Format;

/// Names of the standalone files, in the order a directory is searched.
pub const FILE_NAMES: [&str; 2] = [".oomdoctor.toml", "oomdoctor.toml"];

/// A string or a list of strings (`fail-on = "host-oom"` or `fail-on = ["host-oom"]`).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => s
                .split(',')
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty())
                .collect(),
            OneOrMany::Many(v) => v,
        }
    }
}

/// The keys, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Raw {
    format: Option<Spanned<String>>,
    fail_on: Option<Spanned<OneOrMany>>,
    rules: Option<Spanned<OneOrMany>>,
    glob: Option<Spanned<OneOrMany>>,
    exclude: Option<Spanned<OneOrMany>>,
    redact: Option<Spanned<OneOrMany>>,
    color: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
struct Pyproject {
    tool: Option<Tool>,
}

#[derive(Debug, Deserialize)]
struct Tool {
    oomdoctor: Option<Raw>,
}

/// Defaults from a configuration file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    /// The file they came from (`None`: no file).
    pub path: Option<PathBuf>,
    pub format: Option<Format>,
    pub fail_on: Option<Vec<Cause>>,
    /// Extra rule directories, resolved against the file's directory.
    pub rules: Vec<PathBuf>,
    /// Include globs for files found in directory inputs.
    pub glob: Vec<String>,
    /// Exclude globs for files and directories found in directory inputs.
    pub exclude: Vec<String>,
    /// Extra patterns (regular expressions) `oomdoctor bundle` masks.
    pub redact: Vec<String>,
    pub color: Option<ColorChoice>,
}

/// A configuration file that cannot be used.
#[derive(Debug, thiserror::Error, Diagnostic)]
pub enum ConfigError {
    #[error("cannot read the configuration file {path}: {message}")]
    #[diagnostic(
        code(oomdoctor::config::read),
        help("pass --no-config to run without it")
    )]
    Read { path: String, message: String },
    #[error("{message}")]
    #[diagnostic(
        code(oomdoctor::config::invalid),
        help(
            "keys are named as the long flags: format, fail-on, rules, glob, exclude, redact, color; pass --no-config to run without the file"
        )
    )]
    Invalid {
        message: String,
        #[source_code]
        src: NamedSource<String>,
        #[label("here")]
        at: Option<SourceSpan>,
    },
}

/// The configuration file that applies in `dir`: the nearest one upward.
pub fn discover(dir: &Path) -> Option<PathBuf> {
    for d in dir.ancestors() {
        for name in FILE_NAMES {
            let p = d.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
        let p = d.join("pyproject.toml");
        if p.is_file() && has_tool_table(&p) {
            return Some(p);
        }
    }
    None
}

/// Whether a pyproject.toml has a `[tool.oomdoctor]` table (one without it does not count,
/// so the search goes on upward).
fn has_tool_table(p: &Path) -> bool {
    std::fs::read_to_string(p)
        .ok()
        .and_then(|s| s.parse::<toml::Table>().ok())
        .is_some_and(|t| {
            t.get("tool")
                .and_then(|t| t.as_table())
                .is_some_and(|t| t.contains_key("oomdoctor"))
        })
}

/// Reads the file the command line asks for: `explicit` (`--config`), none (`no_config`),
/// or the nearest one upward from `cwd`.
pub fn load(explicit: Option<&Path>, no_config: bool, cwd: &Path) -> Result<Config, ConfigError> {
    if no_config {
        return Ok(Config::default());
    }
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => match discover(cwd) {
            Some(p) => p,
            None => return Ok(Config::default()),
        },
    };
    read(&path)
}

/// Reads one configuration file.
pub fn read(path: &Path) -> Result<Config, ConfigError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        path: name.clone(),
        message: e.to_string(),
    })?;
    let invalid = |message: String, at: Option<std::ops::Range<usize>>| ConfigError::Invalid {
        message: format!("{name}: {message}"),
        src: NamedSource::new(name.clone(), text.clone()),
        at: at.map(|r| SourceSpan::from(r.start..r.end)),
    };
    let pyproject = path.file_name().is_some_and(|n| n == "pyproject.toml");
    let raw = if pyproject {
        toml::from_str::<Pyproject>(&text)
            .map_err(|e| invalid(e.message().to_string(), e.span()))?
            .tool
            .and_then(|t| t.oomdoctor)
            .unwrap_or_default()
    } else {
        toml::from_str::<Raw>(&text).map_err(|e| invalid(e.message().to_string(), e.span()))?
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let mut c = Config {
        path: Some(path.to_path_buf()),
        ..Config::default()
    };
    if let Some(f) = raw.format {
        let v = <Format as clap::ValueEnum>::from_str(f.get_ref(), false).map_err(|_| {
            invalid(
                format!(
                    "format = {:?} is not a format (human, json, markdown, github, sarif, junit, html)",
                    f.get_ref()
                ),
                Some(f.span()),
            )
        })?;
        c.format = Some(v);
    }
    if let Some(f) = raw.fail_on {
        let span = f.span();
        let mut causes = Vec::new();
        for id in f.into_inner().into_vec() {
            let cause = id.parse::<Cause>().map_err(|_| {
                invalid(
                    format!(
                        "fail-on: {id:?} is not a cause ({})",
                        Cause::ALL.map(|c| c.id()).join(", ")
                    ),
                    Some(span.clone()),
                )
            })?;
            causes.push(cause);
        }
        c.fail_on = Some(causes);
    }
    if let Some(r) = raw.rules {
        c.rules = r
            .into_inner()
            .into_vec()
            .into_iter()
            .map(|d| base.join(d))
            .collect();
    }
    if let Some(g) = raw.glob {
        c.glob = g.into_inner().into_vec();
    }
    if let Some(g) = raw.exclude {
        c.exclude = g.into_inner().into_vec();
    }
    if let Some(r) = raw.redact {
        let span = r.span();
        let patterns = r.into_inner().into_vec();
        for p in &patterns {
            if let Err(e) = regex::Regex::new(p) {
                return Err(invalid(
                    format!("redact: {p:?} is not a regular expression: {e}"),
                    Some(span),
                ));
            }
        }
        c.redact = patterns;
    }
    if let Some(col) = raw.color {
        let v = <ColorChoice as clap::ValueEnum>::from_str(col.get_ref(), false).map_err(|_| {
            invalid(
                format!("color = {:?} is not auto, always or never", col.get_ref()),
                Some(col.span()),
            )
        })?;
        c.color = Some(v);
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("oomdoctor-config-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn pyproject_table_and_upward_search() {
        let d = tmp("up");
        std::fs::write(
            d.join("pyproject.toml"),
            "[project]\nname = \"x\"\n\n[tool.oomdoctor]\nformat = \"json\"\nfail-on = [\"host-oom\", \"memory-leak\"]\nrules = \"ops/rules\"\n",
        )
        .unwrap();
        let sub = d.join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        let c = load(None, false, &sub).unwrap();
        assert_eq!(c.path.as_deref(), Some(d.join("pyproject.toml").as_path()));
        assert_eq!(c.format, Some(Format::Json));
        assert_eq!(c.fail_on, Some(vec![Cause::HostOom, Cause::MemoryLeak]));
        assert_eq!(c.rules, vec![d.join("ops/rules")]);
        // A nearer oomdoctor.toml wins, a pyproject.toml without the table does not count.
        std::fs::write(sub.join("pyproject.toml"), "[project]\nname = \"y\"\n").unwrap();
        std::fs::write(d.join("a/oomdoctor.toml"), "fail-on = \"fragmentation\"\n").unwrap();
        let c = load(None, false, &sub).unwrap();
        assert_eq!(c.fail_on, Some(vec![Cause::Fragmentation]));
        assert_eq!(c.format, None);
        assert_eq!(load(None, true, &sub).unwrap(), Config::default());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn bad_keys_and_values_name_the_place() {
        let d = tmp("bad");
        let p = d.join("oomdoctor.toml");
        std::fs::write(&p, "format = \"json\"\nfail_on = \"host-oom\"\n").unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(e.contains("fail_on"), "{e}");
        std::fs::write(&p, "format = \"yaml\"\n").unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(e.contains("not a format"), "{e}");
        std::fs::write(&p, "redact = [\"(\"]\n").unwrap();
        assert!(read(&p).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }
}
