//! The typed evidence model: facts with provenance.
//!
//! Every parser (crash logs, snapshots, time series, model configs) reduces what it read to
//! **facts**: a catalogued name (`oom.requested_bytes`), a [`Value`], and the places it came
//! from ([`Provenance`]: input name, line, the cleaned text and the span of the number in it).
//! Rules never see parser internals, only facts, so a rule file can be read without knowing
//! any regex, and any fact a fix prints can be traced back to a line.
//!
//! The catalogue ([`crate::facts::catalog`]) fixes each fact's unit and meaning; the rule loader
//! rejects names that are not in it, so a typo in a rule is a load error, not a silent miss.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use crate::facts::units::format_bytes_f;

/// The name of an input as shown to users (`crash.log`, `<stdin>`).
pub type InputName = Arc<str>;

/// Where a fact was read.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Provenance {
    /// The input's display name.
    pub input: InputName,
    /// 1-based line number in the input, when the input is line-oriented.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// The cleaned text of that line (prefixes and colour codes removed), bounded in length.
    /// Not serialised here: the JSON report lists each line's text once, in `excerpts`.
    #[serde(skip)]
    pub text: Option<Arc<str>>,
    /// Byte range of the value inside `text`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span: Option<(usize, usize)>,
    /// For non-line inputs (snapshots, series): what inside the input this refers to,
    /// e.g. `device_traces[1][9321] (oom)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locator: Option<String>,
}

impl Provenance {
    /// A provenance for a line of a log.
    pub fn line(input: InputName, line: u64, text: Arc<str>) -> Self {
        Provenance {
            input,
            line: Some(line),
            text: Some(text),
            span: None,
            locator: None,
        }
    }

    /// A provenance for a place inside a structured input.
    pub fn at(input: InputName, locator: impl Into<String>) -> Self {
        Provenance {
            input,
            line: None,
            text: None,
            span: None,
            locator: Some(locator.into()),
        }
    }

    /// The same provenance with a span inside its text.
    pub fn with_span(mut self, span: (usize, usize)) -> Self {
        self.span = Some(span);
        self
    }

    /// `crash.log:120` or `snap.pickle (device_traces[1][9321])`.
    pub fn short(&self) -> String {
        match (self.line, &self.locator) {
            (Some(l), _) => format!("{}:{l}", self.input),
            (None, Some(loc)) => format!("{} ({loc})", self.input),
            (None, None) => self.input.to_string(),
        }
    }
}

/// A fact's value. Numbers are `f64`: byte counts up to 2^53 (8 PiB) are exact, which covers
/// every device, and rules do arithmetic on them.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Num(f64),
    Bool(bool),
    Str(Arc<str>),
}

impl Value {
    pub fn str(s: impl AsRef<str>) -> Value {
        Value::Str(Arc::from(s.as_ref()))
    }
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Num(n) => Some(*n),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Num(v)
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Num(v as f64)
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::Num(v as f64)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Num(v as f64)
    }
}
impl From<usize> for Value {
    fn from(v: usize) -> Self {
        Value::Num(v as f64)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::str(v)
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(Arc::from(v))
    }
}

impl Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Num(n) => {
                if n.fract() == 0.0 && n.abs() < 9.007_199_254_740_992e15 {
                    s.serialize_i64(*n as i64)
                } else {
                    s.serialize_f64(*n)
                }
            }
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Str(v) => s.serialize_str(v),
        }
    }
}

/// What a number measures; decides how it is printed and checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unit {
    Bytes,
    /// Bytes per second (growth rates).
    BytesPerSecond,
    Tokens,
    Count,
    /// A fraction in 0..1.
    Ratio,
    Seconds,
    /// Free text or an identifier.
    Text,
    Flag,
}

impl Unit {
    /// Formats a value in this unit for people.
    pub fn display(self, v: &Value) -> String {
        match (self, v) {
            (Unit::Bytes, Value::Num(n)) => format_bytes_f(*n),
            (Unit::BytesPerSecond, Value::Num(n)) => format!("{}/s", format_bytes_f(*n)),
            (Unit::Ratio, Value::Num(n)) => format!("{:.2}", n),
            (Unit::Seconds, Value::Num(n)) => format_seconds(*n),
            (_, Value::Num(n)) => format_plain(*n),
            (_, Value::Bool(b)) => b.to_string(),
            (_, Value::Str(s)) => s.to_string(),
        }
    }
}

/// Integers without a trailing `.0`, thousands left alone (`44560`), otherwise two decimals.
pub fn format_plain(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n:.2}")
    }
}

fn format_seconds(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// One fact of an incident: a value and every place that supports it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fact {
    pub value: Value,
    pub sources: Vec<Provenance>,
}

/// The most places kept for one fact. A failure restated on every line of a storm (200,000
/// copies of one OOM) would otherwise give each fact 200,000 sources, and checking each new
/// one against the list made the scan quadratic (8,000 copies took 8 s). The first places
/// are the ones a report shows; more prove nothing new.
pub const MAX_SOURCES: usize = 16;

impl Fact {
    /// Adds a place that supports the fact, unless it is already there or the list is full.
    fn add_source(&mut self, source: &Provenance) {
        if self.sources.len() < MAX_SOURCES && !self.sources.contains(source) {
            self.sources.push(source.clone());
        }
    }
}

/// The facts of one incident, by catalogued name. Ordered so output is deterministic.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Facts {
    map: BTreeMap<String, Fact>,
}

impl Facts {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a fact, replacing an earlier value (later lines win: the latest config line is
    /// the one in force).
    pub fn set(&mut self, name: &str, value: impl Into<Value>, source: Option<Provenance>) {
        debug_assert!(
            crate::facts::catalog::lookup(name).is_some(),
            "fact `{name}` is not in the catalogue"
        );
        self.map.insert(
            name.to_string(),
            Fact {
                value: value.into(),
                sources: source.into_iter().collect(),
            },
        );
    }

    /// Sets a fact derived from others; its sources are theirs.
    pub fn derive(&mut self, name: &str, value: impl Into<Value>, from: &[&str]) {
        let mut derived = Fact {
            value: value.into(),
            sources: Vec::new(),
        };
        for f in from {
            if let Some(fact) = self.map.get(*f) {
                for s in &fact.sources {
                    derived.add_source(s);
                }
            }
        }
        debug_assert!(
            crate::facts::catalog::lookup(name).is_some(),
            "fact `{name}` is not in the catalogue"
        );
        self.map.insert(name.to_string(), derived);
    }

    /// Sets a fact only if it is not known yet (earlier, more specific evidence wins).
    pub fn set_if_absent(
        &mut self,
        name: &str,
        value: impl Into<Value>,
        source: Option<Provenance>,
    ) {
        if !self.map.contains_key(name) {
            self.set(name, value, source);
        }
    }

    /// Adds another supporting place to an existing fact.
    pub fn add_source(&mut self, name: &str, source: Provenance) {
        if let Some(f) = self.map.get_mut(name) {
            f.add_source(&source);
        }
    }

    pub fn get(&self, name: &str) -> Option<&Fact> {
        self.map.get(name)
    }
    pub fn value(&self, name: &str) -> Option<&Value> {
        self.map.get(name).map(|f| &f.value)
    }
    pub fn num(&self, name: &str) -> Option<f64> {
        self.value(name).and_then(Value::as_f64)
    }
    pub fn bool(&self, name: &str) -> Option<bool> {
        self.value(name).and_then(Value::as_bool)
    }
    pub fn str(&self, name: &str) -> Option<&str> {
        self.value(name).and_then(Value::as_str)
    }
    pub fn contains(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }
    pub fn remove(&mut self, name: &str) -> Option<Fact> {
        self.map.remove(name)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Fact)> {
        self.map.iter().map(|(k, v)| (k.as_str(), v))
    }
    /// The facts, to rewrite their values in place (the names stay: they are the
    /// catalogue's).
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Fact> {
        self.map.values_mut()
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Merges `other` into `self`. Facts already present are kept (first writer wins) unless
    /// `overwrite` is set; either way the sources are united.
    pub fn merge(&mut self, other: &Facts, overwrite: bool) {
        for (k, v) in &other.map {
            match self.map.get_mut(k) {
                Some(existing) => {
                    if overwrite {
                        existing.value = v.value.clone();
                    }
                    for s in &v.sources {
                        existing.add_source(s);
                    }
                }
                None => {
                    self.map.insert(k.clone(), v.clone());
                }
            }
        }
    }

    /// A fact formatted in its catalogued unit.
    pub fn display(&self, name: &str) -> Option<String> {
        let f = self.map.get(name)?;
        let unit = crate::facts::catalog::lookup(name)
            .map(|d| d.unit)
            .unwrap_or(Unit::Text);
        Some(unit.display(&f.value))
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Num(n) => f.write_str(&format_plain(*n)),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Str(s) => f.write_str(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One failure restated thousands of times keeps its first places, not all of them.
    #[test]
    fn a_fact_keeps_at_most_max_sources_places() {
        let input: InputName = std::sync::Arc::from("storm.log");
        let mut facts = Facts::new();
        facts.set("oom.requested_bytes", 1.0, None);
        for line in 1..=1000u64 {
            let mut copy = Facts::new();
            let mut at = Provenance::at(input.clone(), "line");
            at.line = Some(line);
            copy.set("oom.requested_bytes", 1.0, Some(at));
            facts.merge(&copy, false);
        }
        let sources = &facts.get("oom.requested_bytes").unwrap().sources;
        assert_eq!(sources.len(), MAX_SOURCES);
        assert_eq!(sources[0].line, Some(1));
    }

    #[test]
    fn derived_facts_carry_their_inputs_sources() {
        let input: InputName = Arc::from("crash.log");
        let mut facts = Facts::new();
        let p1 = Provenance::line(input.clone(), 3, Arc::from("a"));
        let p2 = Provenance::line(input.clone(), 9, Arc::from("b"));
        facts.set("oom.total_bytes", 100u64, Some(p1.clone()));
        facts.set("oom.free_bytes", 10u64, Some(p2.clone()));
        facts.derive(
            "oom.device_used_bytes",
            90u64,
            &["oom.total_bytes", "oom.free_bytes"],
        );
        assert_eq!(
            facts.get("oom.device_used_bytes").unwrap().sources,
            vec![p1, p2]
        );
    }

    #[test]
    fn numbers_serialize_as_integers_when_whole() {
        assert_eq!(
            serde_json::to_string(&Value::Num(2147483648.0)).unwrap(),
            "2147483648"
        );
        assert_eq!(serde_json::to_string(&Value::Num(0.5)).unwrap(), "0.5");
    }
}
