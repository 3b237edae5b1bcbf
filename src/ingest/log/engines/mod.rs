//! Engine recognisers: one module per producer of log lines.
//!
//! Each module owns the messages of one producer (PyTorch, vLLM, llama.cpp, the kernel, ...):
//! the literal **anchors** that let the scanner skip every other line cheaply, the regexes
//! that read numbers out of a matching line, whose facts are catalogued in `crate::facts::catalog`.
//!
//! A recogniser sees one cleaned [`Line`] at a time and reports what it means through
//! [`Emit`]: context facts (accounting and configuration lines: "the KV cache holds 44,560
//! tokens"), failures (the OOM itself, with its numbers), run starts (a restart resets the
//! context), and phase markers ("now capturing CUDA graphs"). It never decides a cause;
//! rules do that from the facts.

use std::sync::{Arc, LazyLock};

use crate::facts::evidence::{InputName, Provenance, Value};
use crate::ingest::log::clean::{CleanLine, LineMeta, clean_line, split_packed};
use crate::ingest::log::scanner::{lines_back, lines_forward};

pub mod host;
pub mod pytorch;
pub mod torch_stats;
pub mod training;
// Diffusion front-ends.
pub mod comfyui;
pub mod webui;

// Local engines and the host side (llama.cpp, Ollama, XLA/TF, DeepSpeed, kernel, systemd,
// Kubernetes, Ray, Slurm).
pub mod deepspeed;
pub mod kernel;
pub mod kubernetes;
pub mod llamacpp;
pub mod lmstudio;
pub(crate) mod local;
pub mod ollama;
pub mod ray;
pub mod slurm;
pub mod smi_table;
pub mod systemd;
pub mod xla;
// LLM serving engines.
pub(crate) mod serving;
pub mod sglang;
pub mod tgi;
pub mod trtllm;
pub mod vllm;
// GPU virtualisation layers.
pub mod vgpu;
// Inference runtimes and GPU array libraries (CTranslate2, ONNX Runtime, TensorRT, ...).
pub mod runtimes;

pub use crate::facts::engine::{Domain, id};

/// A fact of a failure: catalogued name, value, and the span of the value in the text.
pub type FailureFact = (&'static str, Value, Option<(usize, usize)>);

/// A failure line (or a message spanning several lines) and what it says.
#[derive(Clone, Debug)]
pub struct Failure {
    /// `device-oom`, `host-oom`, `kv-capacity`, `kv-exhausted`, `engine-budget`, `no-kv-memory`, ...
    pub kind: &'static str,
    /// The producer that printed it ([`id`]).
    pub engine: &'static str,
    pub domain: Domain,
    pub device: Option<u32>,
    /// Catalogued facts with the span of their value in `text` when known.
    pub facts: Vec<FailureFact>,
    /// A wrapper restates a failure that is reported next to it (TGI's "Not enough memory to
    /// handle N prefill tokens" around a PyTorch OOM). It adds facts and names the engine,
    /// but is not counted as another copy.
    pub wrapper: bool,
    /// The message text when it was joined from several lines; otherwise the line's text.
    pub text: Option<String>,
    /// A reading the run must log (before this line or after it, up to the run's end), at
    /// least this value, for the line to be a failure: a message that means out of memory
    /// only beside a reading that says so (Metal's bare `command buffer 0 failed with status
    /// 5` is also a GPU timeout's: after allocations past the working set it is the
    /// memory's; a worker that died with no reason, where the machine's RAM was full).
    /// Without it the line is no failure at all.
    pub requires: Option<(&'static str, f64)>,
}

impl Failure {
    pub fn new(kind: &'static str, engine: &'static str, domain: Domain) -> Self {
        Failure {
            kind,
            engine,
            domain,
            device: None,
            facts: Vec::new(),
            wrapper: false,
            text: None,
            requires: None,
        }
    }
    /// Adds a fact.
    pub fn fact(
        &mut self,
        name: &'static str,
        value: impl Into<Value>,
        span: Option<(usize, usize)>,
    ) -> &mut Self {
        debug_assert!(
            crate::facts::catalog::lookup(name).is_some(),
            "fact `{name}` is not in the catalogue"
        );
        self.facts.push((name, value.into(), span));
        self
    }
    /// Value of a fact already added.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.facts
            .iter()
            .find(|(n, ..)| *n == name)
            .map(|(_, v, _)| v)
    }
}

/// A point in the program's life that a line marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhaseMark {
    ModelLoad,
    /// The program says loading a model failed (`Failed to load checkpoint, restoring
    /// previous`, `Exception: Failed to load SDXL model`): it was loading, and a failure just
    /// before the line is the load's.
    LoadFailed,
    EngineStartup,
    CudaGraphCapture,
    Warmup,
    TrainingStart,
    Evaluation,
    Generation,
    Serving,
}

/// What recognisers report.
#[derive(Clone, Debug)]
pub enum Observation {
    Fact {
        name: &'static str,
        value: Value,
    },
    Failure(Failure),
    /// The program (re)started: context from before no longer applies.
    RunStart,
    Phase(PhaseMark),
    /// The engine that is running, seen from a line only it prints.
    Engine(&'static str),
    /// The program logged how much device memory it uses now (a progress line such as
    /// `step 400 | mem 12.3 GiB`); the analyser aggregates these into growth facts.
    MemorySample(f64),
    /// The program logged how much device memory its allocator holds now (`reserved 78.6G`
    /// beside `mem alloc 11.9G` in a progress line; Megatron's `reserved: 2158.0`): the
    /// cache, in bytes, aggregated apart from what is in use.
    ReservedMemorySample(f64),
    /// A polling loop's device-memory readings (`nvidia-smi --query-gpu=... -l N`, in bytes)
    /// that fell to nothing when the process it watched ended: they span the run up to its
    /// end, so pasted under the failure they are that run's memory (the readings after the
    /// fall are left out).
    PolledMemoryToExit(Vec<f64>),
    /// A launcher (torchrun, DeepSpeed's) named the pid of one of the job's own worker
    /// processes: a process that held the device next to a failing rank may be its sibling.
    WorkerPid(u64),
    /// A reading of the machine's memory (`free`'s `Mem:` row, `top`'s summary): in use and
    /// total, in one unit whatever it is (`free -g` and `free -m` print none); the analyser
    /// aggregates the shares into host-memory growth facts.
    HostMemorySample {
        used: f64,
        total: f64,
    },
    /// The program logged its own resident memory (`rss_after=2655MB`, `RSS: 12.3 GB`, as
    /// scripts print psutil's figure per iteration), in bytes; the analyser aggregates these
    /// into process-memory growth facts.
    ProcessMemorySample(f64),
}

/// An observation and the line it came from.
#[derive(Clone, Debug)]
pub struct Record {
    pub prov: Provenance,
    pub meta: LineMeta,
    pub obs: Observation,
}

/// The collector recognisers write to.
#[derive(Debug, Default)]
pub struct Emit {
    pub records: Vec<Record>,
    /// How many following lines the recognised message spanned.
    pub consumed: u32,
    current: Option<(Provenance, LineMeta)>,
}

impl Emit {
    /// Sets the line that following observations come from.
    pub fn begin_line(&mut self, line: &Line<'_>) {
        self.current = Some((line.prov(), line.meta.clone()));
    }

    fn push(&mut self, obs: Observation, span: Option<(usize, usize)>) {
        let (prov, meta) = match &self.current {
            Some((p, m)) => (p.clone(), m.clone()),
            None => (
                Provenance::at(Arc::from("<unknown>"), "?"),
                LineMeta::default(),
            ),
        };
        let prov = match span {
            Some(s)
                if prov
                    .text
                    .as_ref()
                    .is_some_and(|t| s.1 <= t.len() && s.0 <= s.1) =>
            {
                prov.with_span(s)
            }
            _ => prov,
        };
        self.records.push(Record { prov, meta, obs });
    }

    pub fn fact(
        &mut self,
        name: &'static str,
        value: impl Into<Value>,
        span: Option<(usize, usize)>,
    ) {
        debug_assert!(
            crate::facts::catalog::lookup(name).is_some(),
            "fact `{name}` is not in the catalogue"
        );
        self.push(
            Observation::Fact {
                name,
                value: value.into(),
            },
            span,
        );
    }
    pub fn failure(&mut self, f: Failure) {
        self.push(Observation::Failure(f), None);
    }
    pub fn run_start(&mut self) {
        self.push(Observation::RunStart, None);
    }
    pub fn phase(&mut self, p: PhaseMark) {
        self.push(Observation::Phase(p), None);
    }
    pub fn engine(&mut self, e: &'static str) {
        self.push(Observation::Engine(e), None);
    }
    pub fn memory_sample(&mut self, bytes: f64, span: Option<(usize, usize)>) {
        self.push(Observation::MemorySample(bytes), span);
    }
    pub fn polled_memory_to_exit(&mut self, readings: Vec<f64>) {
        self.push(Observation::PolledMemoryToExit(readings), None);
    }
    pub fn reserved_memory_sample(&mut self, bytes: f64, span: Option<(usize, usize)>) {
        self.push(Observation::ReservedMemorySample(bytes), span);
    }
    pub fn host_memory_sample(&mut self, used: f64, total: f64, span: Option<(usize, usize)>) {
        self.push(Observation::HostMemorySample { used, total }, span);
    }
    pub fn process_memory_sample(&mut self, bytes: f64, span: Option<(usize, usize)>) {
        self.push(Observation::ProcessMemorySample(bytes), span);
    }
    pub fn worker_pid(&mut self, pid: u64) {
        self.push(Observation::WorkerPid(pid), None);
    }
    pub fn consume(&mut self, n: u32) {
        self.consumed = self.consumed.max(n);
    }
}

/// One cleaned line and bounded access to its neighbours.
pub struct Line<'a> {
    pub input: &'a InputName,
    /// 1-based line number.
    pub no: u64,
    /// Message text after clean-up.
    pub text: &'a str,
    pub meta: &'a LineMeta,
    /// Sibling sub-lines of a packed line (literal `\n`), before and after this one.
    pub(crate) siblings_before: &'a [&'a str],
    pub(crate) siblings_after: &'a [&'a str],
    pub(crate) before: &'a [u8],
    pub(crate) after: &'a [u8],
}

impl<'a> Line<'a> {
    /// A line with no neighbours (tests, and callers outside a scan).
    pub fn standalone(input: &'a InputName, no: u64, text: &'a str, meta: &'a LineMeta) -> Self {
        Line {
            input,
            no,
            text,
            meta,
            siblings_before: &[],
            siblings_after: &[],
            before: &[],
            after: &[],
        }
    }

    /// Provenance of this line.
    pub fn prov(&self) -> Provenance {
        Provenance::line(self.input.clone(), self.no, bounded_text(self.text))
    }

    /// Provenance of a value at `span` inside this line.
    pub fn prov_span(&self, span: (usize, usize)) -> Provenance {
        let p = self.prov();
        if span.1 <= self.text.len() {
            p.with_span(span)
        } else {
            p
        }
    }

    /// Up to `n` following lines, cleaned, in order.
    pub fn following(&self, n: usize) -> Vec<CleanLine> {
        let mut out: Vec<CleanLine> = self
            .siblings_after
            .iter()
            .take(n)
            .map(|s| {
                let mut meta = LineMeta::default();
                let text = crate::ingest::log::clean::strip_prefixes(s, &mut meta).to_string();
                CleanLine {
                    text,
                    meta,
                    indented: false,
                }
            })
            .collect();
        if out.len() < n {
            out.extend(
                lines_forward(self.after)
                    .take(n - out.len())
                    .map(clean_line),
            );
        }
        out
    }

    /// Up to `n` preceding lines, cleaned, nearest first.
    pub fn preceding(&self, n: usize) -> Vec<CleanLine> {
        let mut out: Vec<CleanLine> = self
            .siblings_before
            .iter()
            .rev()
            .take(n)
            .map(|s| {
                let mut meta = LineMeta::default();
                let text = crate::ingest::log::clean::strip_prefixes(s, &mut meta).to_string();
                CleanLine {
                    text,
                    meta,
                    indented: false,
                }
            })
            .collect();
        if out.len() < n {
            out.extend(lines_back(self.before).take(n - out.len()).map(clean_line));
        }
        out
    }
}

/// Provenance text is capped so a pathological line cannot blow up memory or output.
pub fn bounded_text(text: &str) -> Arc<str> {
    const MAX: usize = 2000;
    if text.len() <= MAX {
        Arc::from(text)
    } else {
        let mut cut = MAX;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        Arc::from(format!("{}…", &text[..cut]))
    }
}

/// Joins a message that was hard-wrapped over several lines: by a tool that wraps at a space,
/// by a fixed-width terminal or CI viewer that cuts in the middle of a word or a number, or by
/// a paste into an issue at ~100 columns, with the line's prefix only on the first piece.
/// Returns the candidate joined texts (at a space, and without one where the cut fell
/// mid-word: clean-up already trimmed the whitespace that would tell the two apart) that
/// `complete` accepts, and how many following lines they used; the line alone when none does.
/// A piece for which `restarts` holds, a blank line or a traceback line ends the message.
pub(crate) fn join_wrapped(
    line: &Line<'_>,
    complete: impl Fn(&str) -> bool,
    restarts: impl Fn(&str) -> bool,
) -> (Vec<String>, u32) {
    let first = line.text.trim_end_matches(['│', '|', ' ']).to_string();
    if complete(&first) {
        return (vec![first], 0);
    }
    let mut spaced = first.clone();
    let mut tight = first;
    // The pieces as the terminal cut them: the line's own trailing space kept, and a space
    // where the next piece began with one.
    let mut exact = line.text.to_string();
    let mut used = 0;
    for next in line.following(12) {
        let piece = next
            .text
            .trim_matches(|c: char| c == '│' || c == '|' || c.is_whitespace());
        // A new record starts: the message was not wrapped after all.
        if piece.is_empty()
            || piece.starts_with("Traceback")
            || piece.starts_with("File \"")
            || piece.starts_with("During handling")
            || restarts(piece)
        {
            break;
        }
        spaced.push(' ');
        spaced.push_str(piece);
        let mid_word = matches!((tight.chars().last(), piece.chars().next()), (Some(a), Some(b)) if (a.is_alphanumeric() || a == '.') && (b.is_alphanumeric() || b == '.'));
        if !mid_word {
            tight.push(' ');
        }
        tight.push_str(piece);
        if next.indented && !exact.ends_with([' ', '\t']) {
            exact.push(' ');
        }
        exact.push_str(&next.text);
        used += 1;
        if complete(&spaced) || complete(&tight) || complete(&exact) || spaced.len() > 4000 {
            break;
        }
    }
    let mut candidates: Vec<String> = Vec::with_capacity(3);
    for t in [spaced, tight, exact] {
        if complete(&t) && !candidates.contains(&t) {
            candidates.push(t);
        }
    }
    if candidates.is_empty() {
        (vec![line.text.to_string()], 0)
    } else {
        (candidates, used)
    }
}

/// One reading of [`join_wrapped`]'s that `complete` accepts, with how many following lines
/// it used; `None` when no joining of the pieces completes the message. The pieces as the
/// terminal cut them come first, then the mid-word join, then the one with a space: a space
/// put into a cut number (`2737` / `1.91 MiB`) would still read, as another number.
pub(crate) fn join_whole(
    line: &Line<'_>,
    complete: impl Fn(&str) -> bool,
    restarts: impl Fn(&str) -> bool,
) -> Option<(String, u32)> {
    let (candidates, used) = join_wrapped(line, &complete, restarts);
    // `join_wrapped` lists them spaced, tight, exact, or hands back the line alone (complete
    // already, or no reading is): the check below keeps only a complete one.
    candidates
        .into_iter()
        .rev()
        .find(|t| complete(t))
        .map(|t| (t, used))
}

/// A producer of log lines that oomdoctor understands.
pub trait Recognizer: Sync {
    /// The engine id ([`id`]).
    fn engine(&self) -> &'static str;
    /// Literal substrings (matched ASCII-case-insensitively); a line reaches
    /// [`Recognizer::recognize`] only if it contains at least one anchor of some recogniser.
    fn anchors(&self) -> &'static [&'static str];
    /// Reads one line.
    fn recognize(&self, line: &Line<'_>, out: &mut Emit);
}

/// Every recogniser, in the order they see a line.
pub fn all() -> &'static [&'static dyn Recognizer] {
    static ALL: &[&dyn Recognizer] = &[
        &pytorch::PyTorch,
        &torch_stats::TorchStats,
        &training::Training,
        &host::Host,
        // Diffusion front-ends.
        &comfyui::ComfyUi,
        &webui::WebUi,
        // Local engines and the host side.
        &llamacpp::LlamaCpp,
        &ollama::Ollama,
        &lmstudio::LmStudio,
        &kernel::Kernel,
        &systemd::Systemd,
        &kubernetes::Kubernetes,
        &ray::Ray,
        &slurm::Slurm,
        &xla::Xla,
        &deepspeed::DeepSpeed,
        // LLM serving engines.
        &vllm::Vllm,
        &sglang::Sglang,
        &tgi::Tgi,
        &trtllm::TrtLlm,
        // Pasted tool output.
        &smi_table::SmiTable,
        // vGPU quota layers.
        &vgpu::Vgpu,
        // Inference runtimes and GPU array libraries.
        &runtimes::Runtimes,
    ];
    ALL
}

/// The anchor automaton over every recogniser's anchors.
pub fn anchors() -> &'static crate::ingest::log::Anchors {
    static AC: LazyLock<crate::ingest::log::Anchors> = LazyLock::new(|| {
        crate::ingest::log::Anchors::new(all().iter().flat_map(|r| r.anchors().iter().copied()))
    });
    &AC
}

/// Builds now what reading a log needs first (the anchor automaton, the gate, the anchors'
/// owners, then the line clean-up's expressions), for a caller that does it on another
/// thread while it builds the rules: they are independent, and together they were most of
/// a small log's 30-45 ms before the first line was read. A log read meanwhile waits for
/// what it needs, as for any `LazyLock`.
pub fn warm() {
    anchors();
    gate();
    owners();
    crate::ingest::log::clean::warm();
}

/// The gate that finds, past a large log's head, the lines worth walking the anchors over
/// ([`crate::ingest::log::gate`]).
pub fn gate() -> &'static crate::ingest::log::gate::Gate {
    static GATE: LazyLock<crate::ingest::log::gate::Gate> =
        LazyLock::new(|| crate::ingest::log::gate::Gate::new(crate::ingest::log::gate::GROUPS));
    &GATE
}

/// Which recognisers own each anchor: for pattern `i` of [`anchors`], the bit set of the
/// indices (in [`all`]) of the recognisers that list it.
fn owners() -> &'static [u64] {
    static OWNERS: LazyLock<Vec<u64>> = LazyLock::new(|| {
        assert!(all().len() <= 64, "a recogniser bit set is a u64");
        anchors()
            .patterns()
            .iter()
            .map(|p| {
                all().iter().enumerate().fold(0u64, |mask, (i, r)| {
                    if r.anchors().iter().any(|a| a.eq_ignore_ascii_case(p)) {
                        mask | 1 << i
                    } else {
                        mask
                    }
                })
            })
            .collect()
    });
    &OWNERS
}

/// Runs the recognisers whose anchors occur in the line. A line reaches the recognisers only
/// because some anchor hit it; handing it to all of them would make every hit cost as much as
/// the slowest recogniser, and a serving log hits on every periodic stats line.
///
/// The mask comes from the raw line, as the scanner matched it: clean-up strips prefixes such
/// as `[TensorRT-LLM]` that are some recognisers' anchors.
fn dispatch(mask: u64, line: &Line<'_>, out: &mut Emit) {
    for (i, r) in all().iter().enumerate() {
        if mask & (1 << i) != 0 {
            r.recognize(line, out);
        }
    }
}

/// Runs the recognisers on one raw line from the scanner, splitting packed tracebacks.
pub fn recognize_raw(
    input: &InputName,
    line_no: u64,
    raw: &[u8],
    before: &[u8],
    after: &[u8],
    out: &mut Emit,
) {
    let owners = owners();
    let mut mask = 0u64;
    anchors().each_anchor(raw, |p| mask |= owners[p]);
    if mask == 0 {
        return;
    }
    let cleaned = clean_line(raw);
    match split_packed(&cleaned.text) {
        None => {
            let line = Line {
                input,
                no: line_no,
                text: &cleaned.text,
                meta: &cleaned.meta,
                siblings_before: &[],
                siblings_after: &[],
                before,
                after,
            };
            out.begin_line(&line);
            dispatch(mask, &line, out);
        }
        Some(parts) => {
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            for (i, part) in parts.iter().enumerate() {
                let mut meta = cleaned.meta.clone();
                let text = crate::ingest::log::clean::strip_prefixes(part, &mut meta);
                let line = Line {
                    input,
                    no: line_no,
                    text,
                    meta: &meta,
                    siblings_before: &parts[..i],
                    siblings_after: &parts[i + 1..],
                    before,
                    after,
                };
                out.begin_line(&line);
                dispatch(mask, &line, out);
            }
        }
    }
}

/// Test support: the facts one recogniser emits for one standalone line.
#[cfg(test)]
pub(crate) fn facts_of(
    r: &dyn Recognizer,
    text: &str,
) -> Vec<(&'static str, crate::facts::evidence::Value)> {
    fact_records(run_standalone(r, text))
}

/// Test support: what one recogniser emits for one line taken as already cleaned.
#[cfg(test)]
pub(crate) fn run_standalone(r: &dyn Recognizer, text: &str) -> Emit {
    let input: InputName = std::sync::Arc::from("t.log");
    let meta = crate::ingest::log::clean::LineMeta::default();
    let line = Line::standalone(&input, 1, text, &meta);
    let mut out = Emit::default();
    out.begin_line(&line);
    r.recognize(&line, &mut out);
    assert_anchored(r, text, &out);
    out
}

/// Test support: what one recogniser emits for one raw line, cleaned as the scanner cleans it.
#[cfg(test)]
pub(crate) fn run_line(r: &dyn Recognizer, raw: &str) -> Emit {
    let input: InputName = std::sync::Arc::from("t.log");
    let cleaned = crate::ingest::log::clean::clean_line(raw.as_bytes());
    let line = Line::standalone(&input, 1, &cleaned.text, &cleaned.meta);
    let mut out = Emit::default();
    out.begin_line(&line);
    r.recognize(&line, &mut out);
    assert_anchored(r, raw, &out);
    out
}

/// The scanner hands a recogniser only the lines one of its own anchors hits (ASCII case
/// ignored, in the raw bytes): a line it reads but no anchor of its reaches is a line it never
/// sees in a real log. Every recogniser test that goes through these helpers checks it.
#[cfg(test)]
fn assert_anchored(r: &dyn Recognizer, raw: &str, out: &Emit) {
    let lower = raw.to_ascii_lowercase();
    assert!(
        out.records.is_empty()
            || r.anchors()
                .iter()
                .any(|a| lower.contains(&a.to_ascii_lowercase())),
        "{} reads {raw:?}, but none of its anchors hits it",
        r.engine()
    );
}

/// Test support: the last value of a fact emitted, on its own or inside a failure.
#[cfg(test)]
pub(crate) fn emitted_fact(out: &Emit, name: &str) -> Option<crate::facts::evidence::Value> {
    out.records.iter().rev().find_map(|r| match &r.obs {
        Observation::Fact { name: n, value } if *n == name => Some(value.clone()),
        Observation::Failure(f) => f.get(name).cloned(),
        _ => None,
    })
}

/// Test support: the first failure emitted.
#[cfg(test)]
pub(crate) fn emitted_failure(out: &Emit) -> Option<Failure> {
    out.records.iter().find_map(|r| match &r.obs {
        Observation::Failure(f) => Some(f.clone()),
        _ => None,
    })
}

/// Test support: the facts among what a recogniser emitted, in order.
#[cfg(test)]
pub(crate) fn fact_records(out: Emit) -> Vec<(&'static str, crate::facts::evidence::Value)> {
    out.records
        .into_iter()
        .filter_map(|r| match r.obs {
            Observation::Fact { name, value } => Some((name, value)),
            _ => None,
        })
        .collect()
}
