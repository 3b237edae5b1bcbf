//! Rules as data: TOML files in `rules/` that turn an incident's facts into a scored cause
//! and a list of fixes.
//!
//! A rule names the cause it argues for, a gate (`applies`), weighted **signals** (conditions
//! over facts, each with a sentence that says what it saw), optional `let` values computed
//! from facts, and **fixes** whose title and action may carry computed values. Every
//! condition and value is an [`crate::diagnosis::expr`] expression over catalogued facts, checked when
//! the file loads: an unknown fact, a bad expression, an unknown field or a cause that does
//! not exist is an error pointing at the line and column in the file.
//!
//! ```toml
//! id = "torch-fragmentation"
//! cause = "fragmentation"
//! title = "Free memory was reserved but split into pieces too small for the request"
//! applies = "failure.kind == 'device-oom'"
//! explanation = """..."""
//!
//! [let]
//! spare = "oom.reserved_unallocated_bytes - oom.requested_bytes"
//!
//! [[signal]]
//! when = "oom.reserved_unallocated_bytes >= oom.requested_bytes"
//! weight = 6
//! says = "{oom.reserved_unallocated_bytes} was reserved but unallocated, more than the {oom.requested_bytes} requested"
//!
//! [[fix]]
//! title = "Let the allocator grow segments in place"
//! action = "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
//! kind = "env"
//! knob = "PYTORCH_CUDA_ALLOC_CONF:expandable_segments"
//! direction = "on"
//! unless = "torch.expandable_segments == true"
//! ```
//!
//! Built-in rules are compiled in ([`builtin`]); `--rules DIR` adds rules or replaces
//! built-in ones with the same id.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use miette::{NamedSource, SourceSpan};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::diagnosis::cause::Cause;
use crate::diagnosis::expr::{Expr, ExprError};

pub mod builtin;
pub mod decision;
mod eval;

pub use eval::{
    FixOutcome, FixValue, MatchedSignal, RuleOutcome, evaluate, evaluate_fixes, render,
};

/// `oomdoctor explain rules`: the rule file format in brief.
pub const FORMAT_HELP: &str = r#"Rule files (rules/<id>.toml; add your own with --rules DIR)

  id          = "my-rule"                 # must equal the file name
  cause       = "fragmentation"           # model-too-large, batch-misconfiguration, kv-cache-overflow,
                                          # fragmentation, memory-leak, memory-contention, host-oom
  title       = "one line"
  summary     = "one sentence with {fact} values"        # optional
  applies     = "failure.kind == 'device-oom'"           # optional gate
  explanation = """markdown: ## What it means / ## Why it happens / ## How to confirm"""
  references  = ["https://..."]

  [let]                                   # values computed from facts, usable everywhere below
  spare = "oom.reserved_unallocated_bytes - oom.requested_bytes"

  [[signal]]                              # evidence; the rule's score is the sum of held weights
  when   = "spare > 0"                    # or { all = [...] }, { any = [...] }, { not = "..." }
  weight = 5
  says   = "{oom.reserved_unallocated_bytes} was reserved but unallocated"

  [[fix]]
  title     = "..."                       # templates: {expr} or {expr:bytes|gib|int|pct|f1|f2}
  action    = "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
  why       = "..."                       # optional; dropped if a value is unknown
  kind      = "env"                       # env, flag, code, config, command, infra
  knob      = "PYTORCH_CUDA_ALLOC_CONF:expandable_segments"   # optional: one direction per knob
  direction = "on"                        # up, down, on, off, set
  when      = "..."                       # optional: shown only if this holds
  unless    = "torch.expandable_segments == true"             # optional: hidden if already applied
  weight    = 1.0                         # relative likelihood of helping

Expressions: facts (see `oomdoctor facts`), let names, numbers with units (2GiB, 512MiB, 90%),
'strings', true/false, + - * / %, < <= > >= == !=, and/or/not, and functions
has(x) min max floor ceil round abs round_down(x, step) round_up(x, step) pow2_floor(x)
clamp(x, lo, hi) coalesce(a, b, ...) if(c, a, b) contains(s, t) starts_with(s, t)
divisor_at_most(n, k) (the largest whole divisor of n not above k).
A fact that is not known makes a comparison unknown, and an unknown condition never holds.
"#;

/// A rule file could not be used.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("{message}")]
#[diagnostic(code(oomdoctor::rules::invalid))]
pub struct RuleError {
    message: String,
    #[source_code]
    src: NamedSource<Arc<str>>,
    #[label("{label}")]
    span: SourceSpan,
    label: String,
    #[help]
    help: Option<String>,
}

impl RuleError {
    fn new(
        file: &SourceFile,
        range: std::ops::Range<usize>,
        message: impl Into<String>,
        label: impl Into<String>,
        help: Option<String>,
    ) -> Self {
        let len = file.text.len();
        let start = range.start.min(len);
        let end = range.end.clamp(start, len);
        RuleError {
            message: message.into(),
            src: NamedSource::new(file.name.clone(), file.text.clone()),
            span: (start, end - start).into(),
            label: label.into(),
            help,
        }
    }

    /// The one-line message (for tests and logs).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// 1-based line of the problem.
    pub fn line(&self) -> usize {
        let text = self.src.inner();
        let off = self.span.offset().min(text.len());
        text[..off].matches('\n').count() + 1
    }
}

/// Reading a rules directory failed.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum RulesDirError {
    #[error("cannot read rules directory {path}: {source}")]
    #[diagnostic(
        code(oomdoctor::rules::dir),
        help("--rules takes a directory of rule files (*.toml, or <id>/rule.toml)")
    )]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Rule(#[from] RuleError),
    #[error(
        "{path}: {size} bytes is more than the {MAX_RULE_FILE_BYTES}-byte limit for a rule file"
    )]
    #[diagnostic(
        code(oomdoctor::rules::unreadable),
        help(
            "--rules takes a directory of rule files (*.toml, or <id>/rule.toml); remove or rename this entry"
        )
    )]
    TooLarge { path: String, size: u64 },
    #[error("rule id `{id}` is defined twice: in {first} and {second}")]
    #[diagnostic(
        code(oomdoctor::rules::duplicate),
        help("give each rule a unique id (the id must equal the file name)")
    )]
    Duplicate {
        id: String,
        first: String,
        second: String,
    },
}

struct SourceFile {
    name: String,
    text: Arc<str>,
}

/// A condition: an expression, or `all`/`any`/`not` of conditions.
#[derive(Clone, Debug)]
pub enum Cond {
    Expr(Expr),
    All(Vec<Cond>),
    Any(Vec<Cond>),
    Not(Box<Cond>),
}

impl Cond {
    fn names<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Cond::Expr(e) => out.extend(e.names()),
            Cond::All(v) | Cond::Any(v) => v.iter().for_each(|c| c.names(out)),
            Cond::Not(c) => c.names(out),
        }
    }

    /// Source-like text, for `explain`.
    pub fn describe(&self) -> String {
        match self {
            Cond::Expr(e) => e.text().to_string(),
            Cond::All(v) => format!(
                "all({})",
                v.iter().map(Cond::describe).collect::<Vec<_>>().join(", ")
            ),
            Cond::Any(v) => format!(
                "any({})",
                v.iter().map(Cond::describe).collect::<Vec<_>>().join(", ")
            ),
            Cond::Not(c) => format!("not({})", c.describe()),
        }
    }
}

/// How a template value is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fmt {
    /// A fact in its catalogued unit; anything else as a plain number.
    Auto,
    Bytes,
    Gib,
    Int,
    Pct,
    F1,
    F2,
}

impl Fmt {
    fn parse(s: &str) -> Option<Fmt> {
        Some(match s {
            "bytes" => Fmt::Bytes,
            "gib" => Fmt::Gib,
            "int" => Fmt::Int,
            "pct" => Fmt::Pct,
            "f1" => Fmt::F1,
            "f2" => Fmt::F2,
            "auto" => Fmt::Auto,
            _ => return None,
        })
    }
}

/// A text with `{expression}` or `{expression:format}` holes.
#[derive(Clone, Debug)]
pub struct Template {
    pub(crate) parts: Vec<TemplatePart>,
    pub(crate) text: String,
}

#[derive(Clone, Debug)]
pub(crate) enum TemplatePart {
    Lit(String),
    Hole(Expr, Fmt),
}

impl Template {
    /// The template as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    fn names(&self) -> Vec<&str> {
        self.parts
            .iter()
            .flat_map(|p| match p {
                TemplatePart::Hole(e, _) => e.names(),
                TemplatePart::Lit(_) => vec![],
            })
            .collect()
    }

    /// Parses a template; errors carry the byte offset inside `text`.
    pub fn parse(text: &str) -> Result<Template, ExprError> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let b = text.as_bytes();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'{' if b.get(i + 1) == Some(&b'{') => {
                    lit.push('{');
                    i += 2;
                }
                b'}' if b.get(i + 1) == Some(&b'}') => {
                    lit.push('}');
                    i += 2;
                }
                b'{' => {
                    let close = text[i..].find('}').map(|j| i + j).ok_or(ExprError {
                        offset: i,
                        len: 1,
                        message: "`{` without a closing `}` (write `{{` for a literal brace)"
                            .into(),
                    })?;
                    let inner = &text[i + 1..close];
                    let (expr_text, fmt) = match inner.rfind(':') {
                        Some(c) if Fmt::parse(inner[c + 1..].trim()).is_some() => (
                            &inner[..c],
                            Fmt::parse(inner[c + 1..].trim()).unwrap_or(Fmt::Auto),
                        ),
                        _ => (inner, Fmt::Auto),
                    };
                    let expr = Expr::parse(expr_text).map_err(|e| ExprError {
                        offset: i + 1 + e.offset,
                        ..e
                    })?;
                    if !lit.is_empty() {
                        parts.push(TemplatePart::Lit(std::mem::take(&mut lit)));
                    }
                    parts.push(TemplatePart::Hole(expr, fmt));
                    i = close + 1;
                }
                _ => {
                    let ch = text[i..].chars().next().unwrap_or(' ');
                    lit.push(ch);
                    i += ch.len_utf8();
                }
            }
        }
        if !lit.is_empty() {
            parts.push(TemplatePart::Lit(lit));
        }
        Ok(Template {
            parts,
            text: text.to_string(),
        })
    }
}

/// A weighted piece of evidence for a rule's cause.
#[derive(Clone, Debug)]
pub struct Signal {
    pub when: Cond,
    pub weight: f64,
    pub says: Template,
}

/// What kind of change a fix asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FixKind {
    /// An environment variable.
    Env,
    /// A command-line flag of the engine or script.
    Flag,
    /// A code change.
    Code,
    /// A configuration file or API option.
    Config,
    /// A command to run.
    Command,
    /// Hardware, cluster or deployment change.
    Infra,
}

/// Which way a fix moves its knob; two fixes that move one knob in opposite directions are
/// never both shown for one incident.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    Up,
    Down,
    On,
    Off,
    Set,
}

/// A fix a rule proposes.
#[derive(Clone, Debug)]
pub struct FixSpec {
    pub title: Template,
    pub action: Template,
    pub why: Option<Template>,
    pub kind: FixKind,
    pub knob: Option<String>,
    pub direction: Option<Direction>,
    pub when: Option<Cond>,
    pub unless: Option<Cond>,
    pub weight: f64,
}

/// A loaded, validated rule.
#[derive(Clone, Debug)]
pub struct Rule {
    pub id: String,
    pub cause: Cause,
    pub title: String,
    pub summary: Option<Template>,
    pub applies: Option<Cond>,
    pub explanation: String,
    pub references: Vec<String>,
    pub lets: Vec<(String, Expr)>,
    pub(crate) let_index: HashMap<String, usize>,
    pub signals: Vec<Signal>,
    pub fixes: Vec<FixSpec>,
    /// How narrowly the gate picks incidents ([`decision::specificity`]).
    pub specificity: u32,
    /// `built-in` or the file it was loaded from.
    pub origin: String,
    /// The rule file's text, for `oomdoctor explain`.
    pub source: Arc<str>,
}

// ---- the file format -------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleDoc {
    id: Spanned<String>,
    cause: Spanned<String>,
    title: String,
    #[serde(default)]
    summary: Option<Spanned<String>>,
    #[serde(default)]
    applies: Option<Spanned<CondSpec>>,
    explanation: String,
    #[serde(default)]
    references: Vec<String>,
    #[serde(default, rename = "let")]
    lets: BTreeMap<String, Spanned<String>>,
    #[serde(default, rename = "signal")]
    signals: Vec<SignalDoc>,
    #[serde(default, rename = "fix")]
    fixes: Vec<FixDoc>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignalDoc {
    when: Spanned<CondSpec>,
    weight: f64,
    says: Spanned<String>,
}

fn one() -> f64 {
    1.0
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FixDoc {
    title: Spanned<String>,
    action: Spanned<String>,
    #[serde(default)]
    why: Option<Spanned<String>>,
    kind: FixKind,
    #[serde(default)]
    knob: Option<String>,
    #[serde(default)]
    direction: Option<Direction>,
    #[serde(default)]
    when: Option<Spanned<CondSpec>>,
    #[serde(default)]
    unless: Option<Spanned<CondSpec>>,
    #[serde(default = "one")]
    weight: f64,
}

/// A condition as written: a string, or a table with one of `all`, `any`, `not`.
#[derive(Debug)]
enum CondSpec {
    Expr(String),
    All(Vec<CondSpec>),
    Any(Vec<CondSpec>),
    Not(Box<CondSpec>),
}

impl<'de> Deserialize<'de> for CondSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CondSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an expression string, or a table with one key: `all`, `any` (lists of conditions) or `not` (a condition)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<CondSpec, E> {
                Ok(CondSpec::Expr(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CondSpec, A::Error> {
                let Some(key) = map.next_key::<String>()? else {
                    return Err(de::Error::custom(
                        "an empty table is not a condition; use `all`, `any` or `not`",
                    ));
                };
                let spec = match key.as_str() {
                    "all" => CondSpec::All(map.next_value::<CondList>()?.0),
                    "any" => CondSpec::Any(map.next_value::<CondList>()?.0),
                    "not" => CondSpec::Not(Box::new(map.next_value::<CondSpec>()?)),
                    other => return Err(de::Error::unknown_field(other, &["all", "any", "not"])),
                };
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "a condition table takes exactly one key; `{extra}` is extra"
                    )));
                }
                Ok(spec)
            }
        }
        d.deserialize_any(V)
    }
}

struct CondList(Vec<CondSpec>);

impl<'de> Deserialize<'de> for CondList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CondList;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of conditions")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<CondList, A::Error> {
                let mut v = Vec::new();
                while let Some(c) = seq.next_element::<CondSpec>()? {
                    v.push(c);
                }
                Ok(CondList(v))
            }
        }
        d.deserialize_seq(V)
    }
}

// ---- compiling ---------------------------------------------------------------------------

/// Where the text of a TOML string value starts, given the span of the value.
fn string_body_offset(file: &SourceFile, span: &std::ops::Range<usize>) -> usize {
    let rest = &file.text[span.start.min(file.text.len())..];
    if rest.starts_with("\"\"\"") || rest.starts_with("'''") {
        let after = span.start + 3;
        // A newline right after the opening delimiter is not part of the string.
        if file.text[after.min(file.text.len())..].starts_with('\n') {
            after + 1
        } else {
            after
        }
    } else {
        span.start + 1
    }
}

struct Compiler<'a> {
    file: &'a SourceFile,
    lets: HashMap<String, usize>,
}

impl Compiler<'_> {
    fn expr_err(&self, span: &std::ops::Range<usize>, e: &ExprError, what: &str) -> RuleError {
        let body = string_body_offset(self.file, span);
        let start = body + e.offset;
        RuleError::new(
            self.file,
            start..start + e.len.max(1),
            format!("invalid {what}: {}", e.message),
            e.message.clone(),
            Some(format!(
                "expressions use facts (`oomdoctor facts` lists them), `let` names, numbers with units (2GiB, 90%), 'strings', and/or/not, comparisons, + - * / and functions: {}",
                crate::diagnosis::expr::FUNCTIONS.join(", ")
            )),
        )
    }

    fn check_names(
        &self,
        names: Vec<&str>,
        span: &std::ops::Range<usize>,
    ) -> Result<(), RuleError> {
        for n in names {
            if self.lets.contains_key(n) || crate::facts::catalog::lookup(n).is_some() {
                continue;
            }
            let body = string_body_offset(self.file, span);
            let raw =
                &self.file.text[body.min(self.file.text.len())..span.end.min(self.file.text.len())];
            let at = raw.find(n).map(|i| body + i).unwrap_or(span.start);
            let suggestion = crate::facts::catalog::all()
                .map(|d| d.name)
                .filter(|c| strsim(c, n) <= 3)
                .min_by_key(|c| strsim(c, n))
                .map(|c| format!("did you mean `{c}`? "))
                .unwrap_or_default();
            return Err(RuleError::new(
                self.file,
                at..at + n.len(),
                format!("unknown fact `{n}`"),
                "not a catalogued fact or a `let` name",
                Some(format!(
                    "{suggestion}`oomdoctor facts` lists every fact rules can read"
                )),
            ));
        }
        Ok(())
    }

    fn expr(&self, s: &Spanned<String>, what: &str) -> Result<Expr, RuleError> {
        let e = Expr::parse(s.get_ref()).map_err(|e| self.expr_err(&s.span(), &e, what))?;
        self.check_names(e.names(), &s.span())?;
        Ok(e)
    }

    fn template(&self, s: &Spanned<String>, what: &str) -> Result<Template, RuleError> {
        let t = Template::parse(s.get_ref()).map_err(|e| self.expr_err(&s.span(), &e, what))?;
        self.check_names(t.names(), &s.span())?;
        Ok(t)
    }

    fn cond(&self, c: &Spanned<CondSpec>, what: &str) -> Result<Cond, RuleError> {
        let span = c.span();
        let compiled = self.cond_spec(c.get_ref(), &span, what)?;
        let mut names = Vec::new();
        compiled.names(&mut names);
        self.check_names(names, &span)?;
        Ok(compiled)
    }

    fn cond_spec(
        &self,
        c: &CondSpec,
        span: &std::ops::Range<usize>,
        what: &str,
    ) -> Result<Cond, RuleError> {
        Ok(match c {
            CondSpec::Expr(text) => Cond::Expr(Expr::parse(text).map_err(|e| {
                // Offsets are exact for a plain string condition; for nested tables point at the table.
                if matches!(
                    self.file.text.get(span.start..span.start + 1),
                    Some("\"") | Some("'")
                ) {
                    self.expr_err(span, &e, what)
                } else {
                    RuleError::new(
                        self.file,
                        span.clone(),
                        format!("invalid {what}: {} in `{text}`", e.message),
                        e.message.clone(),
                        None,
                    )
                }
            })?),
            CondSpec::All(v) => Cond::All(
                v.iter()
                    .map(|c| self.cond_spec(c, span, what))
                    .collect::<Result<_, _>>()?,
            ),
            CondSpec::Any(v) => Cond::Any(
                v.iter()
                    .map(|c| self.cond_spec(c, span, what))
                    .collect::<Result<_, _>>()?,
            ),
            CondSpec::Not(c) => Cond::Not(Box::new(self.cond_spec(c, span, what)?)),
        })
    }
}

/// Edit distance, for "did you mean" hints.
fn strsim(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push(
                (prev[j] + usize::from(ca != *cb))
                    .min(prev[j + 1] + 1)
                    .min(cur[j] + 1),
            );
        }
        prev = cur;
    }
    prev[b.len()]
}

/// A `[let]` table compiled: the compiler that knows its names, the lets, their index by name.
type CompiledLets<'a> = (Compiler<'a>, Vec<(String, Expr)>, HashMap<String, usize>);

/// Compiles a file's `[let]` table: each value an expression over facts and other lets, none
/// shadowing a catalogued fact, none depending on itself. Returns the compiler that knows
/// the names, the compiled lets and their index by name.
fn compile_lets<'a>(
    file: &'a SourceFile,
    table: &BTreeMap<String, Spanned<String>>,
) -> Result<CompiledLets<'a>, RuleError> {
    let let_index: HashMap<String, usize> = table
        .keys()
        .enumerate()
        .map(|(i, k)| (k.clone(), i))
        .collect();
    let c = Compiler {
        file,
        lets: let_index.clone(),
    };
    for name in table.keys() {
        if crate::facts::catalog::lookup(name).is_some() {
            return Err(RuleError::new(
                file,
                table[name].span(),
                format!("`let {name}` shadows a catalogued fact"),
                "rename this value",
                None,
            ));
        }
    }
    let mut lets = Vec::new();
    for (name, text) in table {
        lets.push((name.clone(), c.expr(text, &format!("`let {name}`"))?));
    }
    // Lets may use each other, but not in a cycle.
    for (name, _) in &lets {
        let mut stack = vec![(name.as_str(), 0usize)];
        let mut steps = 0;
        while let Some((n, depth)) = stack.pop() {
            steps += 1;
            if depth > lets.len() || steps > 10_000 {
                return Err(RuleError::new(
                    file,
                    table[name].span(),
                    format!("`let {name}` depends on itself"),
                    "cycle",
                    None,
                ));
            }
            if let Some(&i) = let_index.get(n) {
                for dep in lets[i].1.names() {
                    if let_index.contains_key(dep) {
                        stack.push((dep, depth + 1));
                    }
                }
            }
        }
    }
    Ok((c, lets, let_index))
}

/// Parses and validates one rule file. `stem` is the file name without `.toml`.
pub fn parse_rule(name: &str, stem: &str, text: &str, origin: &str) -> Result<Rule, RuleError> {
    let file = SourceFile {
        name: name.to_string(),
        text: Arc::from(text),
    };
    let doc: RuleDoc = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        RuleError::new(
            &file,
            span,
            format!("{name}: {}", e.message().trim()),
            e.message().lines().next().unwrap_or("here").to_string(),
            Some("rule files are TOML with the fields id, cause, title, explanation, [let], [[signal]] and [[fix]] (see `oomdoctor explain rules`)".into()),
        )
    })?;
    if doc.id.get_ref() != stem {
        // A rule is `<id>.toml` or a folder `<id>/rule.toml`: the name to fix is the folder's.
        let (kind, suffix) = if name.ends_with("/rule.toml") {
            ("folder", "/")
        } else {
            ("file", ".toml")
        };
        return Err(RuleError::new(
            &file,
            doc.id.span(),
            format!(
                "rule id `{}` does not match its {kind} name `{stem}{suffix}`",
                doc.id.get_ref()
            ),
            format!("must equal the {kind} name"),
            Some(format!(
                "rename the {kind} to `{}{suffix}` or the id to `{stem}`",
                doc.id.get_ref()
            )),
        ));
    }
    if doc.id.get_ref().is_empty()
        || !doc
            .id
            .get_ref()
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(RuleError::new(
            &file,
            doc.id.span(),
            "rule ids are lower-case words joined by `-`",
            "invalid id",
            None,
        ));
    }
    let cause: Cause =
        doc.cause.get_ref().parse().map_err(|e: String| {
            RuleError::new(&file, doc.cause.span(), e, "unknown cause", None)
        })?;

    let (c, lets, let_index) = compile_lets(&file, &doc.lets)?;
    let applies = doc
        .applies
        .as_ref()
        .map(|a| c.cond(a, "`applies` condition"))
        .transpose()?;
    let summary = doc
        .summary
        .as_ref()
        .map(|s| c.template(s, "summary"))
        .transpose()?;
    let mut signals = Vec::new();
    for s in &doc.signals {
        // A signal that restates the gate holds whenever the rule applies: it is a prior
        // dressed as evidence, and the decision model must not count it.
        if let (Some(gate), CondSpec::Expr(when)) = (&doc.applies, s.when.get_ref()) {
            if let CondSpec::Expr(gate) = gate.get_ref() {
                if decision::gate_implies(gate, when) {
                    return Err(RuleError::new(
                        &file,
                        s.when.span(),
                        "this signal restates the rule's `applies` gate",
                        "holds whenever the rule applies",
                        Some("a gate is not evidence: drop the signal, or make it test something the gate does not (put priors in rules/decision/findings.toml)".into()),
                    ));
                }
            }
        }
        if !s.weight.is_finite() {
            return Err(RuleError::new(
                &file,
                s.when.span(),
                "signal weight must be a finite number",
                "weight",
                None,
            ));
        }
        signals.push(Signal {
            when: c.cond(&s.when, "signal condition")?,
            weight: s.weight,
            says: c.template(&s.says, "signal text")?,
        });
    }
    // Two signals that negate each other (within the gate) and both argue for the cause
    // always give points.
    let gate_text = match doc.applies.as_ref().map(|a| a.get_ref()) {
        Some(CondSpec::Expr(g)) => g.as_str(),
        _ => "",
    };
    for (i, a) in doc.signals.iter().enumerate() {
        for b in &doc.signals[i + 1..] {
            if let (CondSpec::Expr(x), CondSpec::Expr(y)) = (a.when.get_ref(), b.when.get_ref()) {
                if a.weight > 0.0 && b.weight > 0.0 && decision::split_restatement(gate_text, x, y)
                {
                    return Err(RuleError::new(
                        &file,
                        b.when.span(),
                        "this signal and an earlier one negate each other, so one of them holds for every incident",
                        "always one of the two",
                        Some("evidence that always holds is a prior: drop the pair".into()),
                    ));
                }
            }
        }
    }
    // Signals that split one of the gate's `or`s between them: one always holds.
    let plain: Vec<(&str, f64)> = doc
        .signals
        .iter()
        .filter_map(|s| match s.when.get_ref() {
            CondSpec::Expr(w) => Some((w.as_str(), s.weight)),
            _ => None,
        })
        .collect();
    if plain.len() == doc.signals.len() {
        if let Some(i) = decision::covering_restatement(gate_text, &plain) {
            return Err(RuleError::new(
                &file,
                doc.signals[i].when.span(),
                "these signals split one of the gate's `or`s between them, so one of them holds for every incident",
                "completes the cover",
                Some(
                    "evidence that always holds is a prior: drop the signals that restate the gate"
                        .into(),
                ),
            ));
        }
    }
    let mut fixes = Vec::new();
    for f in &doc.fixes {
        fixes.push(FixSpec {
            title: c.template(&f.title, "fix title")?,
            action: c.template(&f.action, "fix action")?,
            why: f
                .why
                .as_ref()
                .map(|w| c.template(w, "fix explanation"))
                .transpose()?,
            kind: f.kind,
            knob: f.knob.clone(),
            direction: f.direction,
            when: f
                .when
                .as_ref()
                .map(|w| c.cond(w, "fix condition"))
                .transpose()?,
            unless: f
                .unless
                .as_ref()
                .map(|w| c.cond(w, "fix condition"))
                .transpose()?,
            weight: f.weight,
        });
    }
    let specificity = match doc.applies.as_ref().map(|a| a.get_ref()) {
        Some(CondSpec::Expr(g)) => decision::specificity(g),
        Some(_) => 1,
        None => 0,
    };
    Ok(Rule {
        specificity,
        id: doc.id.into_inner(),
        cause,
        title: doc.title,
        summary,
        applies,
        explanation: doc.explanation,
        references: doc.references,
        lets,
        let_index,
        signals,
        fixes,
        origin: origin.to_string(),
        source: file.text.clone(),
    })
}

/// Largest rule file read from `--rules` (the biggest built-in rule is a few KiB).
pub const MAX_RULE_FILE_BYTES: u64 = 1 << 20;

/// An entry of a `--rules` directory that was left out, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct SkippedEntry {
    pub path: String,
    pub why: String,
}

/// Reads a rule file, never more than the limit (the file may grow after its size was
/// checked).
fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_RULE_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_RULE_FILE_BYTES {
        return Err(std::io::Error::other(
            "grew past the rule file limit while read",
        ));
    }
    Ok(text)
}

/// The rules in force.
#[derive(Clone, Debug)]
pub struct RuleSet {
    pub rules: Vec<Rule>,
    /// Priors, findings and thresholds that decide between the rules' causes.
    pub decision: decision::DecisionModel,
}

impl RuleSet {
    /// The built-in rules: every `rules/<id>/rule.toml`, in id order.
    pub fn builtin() -> Result<RuleSet, RuleError> {
        let mut rules = Vec::new();
        for (id, text) in builtin::FILES {
            rules.push(parse_rule(
                &format!("rules/{id}/rule.toml"),
                id,
                text,
                "built-in",
            )?);
        }
        Ok(RuleSet {
            rules,
            decision: decision::DecisionModel::builtin()?,
        })
    }

    /// Adds the rules of a directory (`<id>.toml` files, or `<id>/rule.toml` folders as in
    /// the built-in `rules/`); a rule with a built-in's id replaces it.
    ///
    /// An entry that is not a file one can read to its end (a FIFO would block forever, a
    /// link to `/dev/zero` would never end, a device) is left out and returned, so the
    /// caller can say so; the other rules still load. A rule file over
    /// [`MAX_RULE_FILE_BYTES`] or one that does not parse stops the load: rules decide
    /// verdicts, and a broken one is the user's to fix.
    pub fn load_dir(&mut self, dir: &Path) -> Result<Vec<SkippedEntry>, RulesDirError> {
        let io = |source| RulesDirError::Io {
            path: dir.display().to_string(),
            source,
        };
        let mut entries: Vec<(String, std::path::PathBuf)> = Vec::new();
        for path in std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
        {
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if let Some(stem) = name.strip_suffix(".toml") {
                entries.push((stem.to_string(), path.clone()));
            } else if path.join("rule.toml").exists() {
                entries.push((name.to_string(), path.join("rule.toml")));
            }
        }
        entries.sort();
        let mut skipped = Vec::new();
        let mut seen: HashMap<String, String> = HashMap::new();
        for (stem, path) in entries {
            let name = path.display().to_string();
            // Follows symbolic links: what matters is what reading it would read.
            let meta = match std::fs::metadata(&path) {
                Ok(m) => m,
                Err(e) => {
                    skipped.push(SkippedEntry {
                        path: name,
                        why: format!("cannot read: {e}"),
                    });
                    continue;
                }
            };
            if !meta.is_file() {
                skipped.push(SkippedEntry {
                    path: name,
                    why:
                        "not a regular file (a directory, device, FIFO or socket); nothing was read"
                            .into(),
                });
                continue;
            }
            if meta.len() > MAX_RULE_FILE_BYTES {
                return Err(RulesDirError::TooLarge {
                    path: name,
                    size: meta.len(),
                });
            }
            let text = read_bounded(&path).map_err(|source| RulesDirError::Io {
                path: name.clone(),
                source,
            })?;
            let rule = parse_rule(&name, &stem, &text, &name)?;
            if let Some(first) = seen.insert(rule.id.clone(), name.clone()) {
                return Err(RulesDirError::Duplicate {
                    id: rule.id,
                    first,
                    second: name,
                });
            }
            match self.rules.iter_mut().find(|r| r.id == rule.id) {
                Some(existing) => *existing = rule,
                None => self.rules.push(rule),
            }
        }
        Ok(skipped)
    }

    pub fn get(&self, id: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Rule, RuleError> {
        parse_rule("t.toml", "t", text, "test")
    }

    const OK: &str = r#"
id = "t"
cause = "fragmentation"
title = "T"
explanation = "E"
applies = "failure.kind == 'device-oom'"
[let]
spare = "oom.reserved_unallocated_bytes - oom.requested_bytes"
[[signal]]
when = { all = ["oom.reserved_unallocated_bytes >= oom.requested_bytes", { not = "torch.expandable_segments == true" }] }
weight = 5
says = "{oom.reserved_unallocated_bytes} reserved, {spare:bytes} to spare"
[[fix]]
title = "Expandable segments"
action = "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
kind = "env"
unless = "torch.expandable_segments == true"
"#;

    #[test]
    fn a_good_rule_loads() {
        let r = parse(OK).unwrap();
        assert_eq!(r.cause, Cause::Fragmentation);
        assert_eq!(r.signals.len(), 1);
        assert_eq!(r.lets.len(), 1);
    }

    #[test]
    fn a_folder_rule_is_told_to_rename_its_folder() {
        let e = parse_rule("rules/x/rule.toml", "x", OK, "test").unwrap_err();
        assert!(
            e.to_string()
                .contains("does not match its folder name `x/`"),
            "{e}"
        );
    }

    #[test]
    fn every_builtin_rule_loads() {
        let set = RuleSet::builtin().unwrap_or_else(|e| panic!("{e:?}"));
        assert!(!set.rules.is_empty());
    }

    #[test]
    fn errors_point_at_the_line() {
        let bad = OK.replace(
            "oom.reserved_unallocated_bytes >= oom.requested_bytes",
            "oom.reserved_unalocated_bytes >= 1",
        );
        let e = parse(&bad).unwrap_err();
        assert!(
            e.message()
                .contains("unknown fact `oom.reserved_unalocated_bytes`"),
            "{}",
            e.message()
        );
        assert_eq!(e.line(), 10);

        let bad = OK.replace("weight = 5", "weight = 5\nwieght = 2");
        let e = parse(&bad).unwrap_err();
        assert!(e.message().contains("wieght"), "{}", e.message());
        assert_eq!(e.line(), 12);

        let bad = OK.replace(
            "applies = \"failure.kind == 'device-oom'\"",
            "applies = \"failure.kind == \"",
        );
        let e = parse(&bad).unwrap_err();
        assert!(e.line() == 6, "{} {}", e.message(), e.line());

        let bad = OK.replace("cause = \"fragmentation\"", "cause = \"gremlins\"");
        assert!(parse(&bad).unwrap_err().message().contains("unknown cause"));

        let bad = OK.replace("id = \"t\"", "id = \"other\"");
        assert!(
            parse(&bad)
                .unwrap_err()
                .message()
                .contains("does not match its file name")
        );

        let bad = OK.replace("{spare:bytes}", "{spare + }");
        let e = parse(&bad).unwrap_err();
        assert!(
            e.message().contains("invalid signal text"),
            "{}",
            e.message()
        );

        let bad = OK.replace(
            "spare = \"oom.reserved_unallocated_bytes - oom.requested_bytes\"",
            "spare = \"spare + 1\"",
        );
        assert!(
            parse(&bad)
                .unwrap_err()
                .message()
                .contains("depends on itself")
        );

        assert!(parse("this is not toml").is_err());
    }

    #[test]
    fn templates_parse() {
        let t = Template::parse("a {x.y:bytes} b {{literal}} {min(1, 2)}").unwrap();
        assert_eq!(t.parts.len(), 4);
        assert!(Template::parse("a {x").is_err());
    }
}
