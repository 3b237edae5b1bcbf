//! `oomdoctor [INPUTS]`: read every input (files, directories, stdin; logs stream, snapshots
//! and series are read whole within limits), hand them to fusion and the diagnosis, render
//! the report and decide the exit code.

use super::app::*;
use crate::cli::DiagnoseArgs;
use crate::diagnosis::report::{Diagnosis, InputErrorReport, InputReport, SkippedInput};
use crate::diagnosis::rules::RuleSet;
use crate::ingest::log::scanner::Source;
use crate::input::{self, InputError, InputKind};
use crate::render::terminal::Sink;
use crate::render::{self, Format, Policy, RuleInfo};
use std::io::{self, Read, Write};
use std::path::Path;

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

/// Counts the bytes a snapshot's reader pulls (for the report and the progress bar), read
/// (perhaps on another thread, see `read_snapshot_ahead`) or copied out of a map.
struct CountingReader<R> {
    inner: R,
    n: std::sync::Arc<std::sync::atomic::AtomicU64>,
    bar: Option<indicatif::ProgressBar>,
}

impl<R> CountingReader<R> {
    fn new(
        inner: R,
        n: &std::sync::Arc<std::sync::atomic::AtomicU64>,
        bar: &Option<indicatif::ProgressBar>,
    ) -> CountingReader<R> {
        CountingReader {
            inner,
            n: n.clone(),
            bar: bar.clone(),
        }
    }

    fn count(&self, k: usize) {
        let before = self
            .n
            .fetch_add(k as u64, std::sync::atomic::Ordering::Relaxed);
        let now = before + k as u64;
        READING_AT.store(now, std::sync::atomic::Ordering::Relaxed);
        if let Some(b) = &self.bar {
            // Redraw at most every 4 MiB.
            if before >> 22 != now >> 22 {
                b.set_position(now);
            }
        }
    }
}

impl<R: io::Read> io::Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let k = self.inner.read(buf)?;
        self.count(k);
        Ok(k)
    }
}

/// Blocks (a mapped snapshot's), counted as they are handed to the reader.
impl<F: crate::ingest::snapshot::pickle::BlockFeed> crate::ingest::snapshot::pickle::BlockFeed
    for CountingReader<F>
{
    fn headroom(&self) -> usize {
        self.inner.headroom()
    }

    fn next_block(&mut self, spent: Option<Vec<u8>>) -> io::Result<Option<Vec<u8>>> {
        let block = self.inner.next_block(spent)?;
        if let Some(b) = &block {
            self.count(b.len().saturating_sub(self.inner.headroom()));
        }
        Ok(block)
    }

    fn len_hint(&self) -> Option<u64> {
        self.inner.len_hint()
    }
}

/// Reads a snapshot pickle as a stream (within the size limit) and analyses it.
fn snapshot_input(
    mut opened: input::Opened,
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
    // A large regular file is read through a map where two cores may be used (see
    // `input::MappedBlocks`); anything else (standard input, a gzip, a small file) read
    // ahead on a second thread.
    let mapped = input::read_ahead_worthwhile()
        .then(|| opened.mapped())
        .flatten();
    let reader = opened.reader;
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
    // The pickle reader pulls the file (or the gzip decoder) through bounded blocks, read
    // ahead on a second thread, and counts decompressed bytes against `--max-pickle-bytes`
    // as they arrive: a small gzip that expands to gigabytes (a PROTO header, then 4 GB of
    // zeros) stops at its first byte that is not a pickle, having decompressed at most the
    // few blocks read ahead (8 MiB).
    READING_AT.store(0, std::sync::atomic::Ordering::Relaxed);
    if let Ok(mut g) = READING_NAME.lock() {
        *g = Some(name.clone());
    }
    let _reading = ReadingGuard;
    let pulled = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let analysis = match mapped {
        Some(map) => crate::ingest::snapshot::read_snapshot_blocks(
            CountingReader::new(input::MappedBlocks::new(map), &pulled, &bar),
            &name,
            &opts.pickle_limits,
        ),
        None => crate::ingest::snapshot::read_snapshot_ahead(
            CountingReader::new(reader, &pulled, &bar),
            &name,
            &opts.pickle_limits,
        ),
    };
    let bytes_read = pulled.load(std::sync::atomic::Ordering::Relaxed);
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
    let line_prefixes = opened.line_prefixes.as_ref().map(|p| p.describe());
    let mut outcome = analyze_kind(opened, path, opts);
    if let (Some(names), Ok(o)) = (line_prefixes, &mut outcome) {
        o.report.warnings.push(format!(
            "nearly every line starts with {names} (a stream's name, as stern or pdsh write it): read without it"
        ));
    }
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
    mut opened: input::Opened,
    path: Option<&str>,
    opts: &DiagnoseOptions,
) -> Result<InputOutcome, (InputError, InputKind)> {
    let name = opened.input_name();
    let compressed = opened.compressed;
    // Only a snapshot's reader sizes itself by the file: asked there, not for every log.
    let size_hint = || {
        if compressed {
            None
        } else {
            path.and_then(|p| std::fs::metadata(p).ok())
                .map(|m| m.len())
        }
    };
    match opened.kind {
        InputKind::Model if path.is_some() && !compressed => {
            model_input(std::path::Path::new(path.unwrap_or_default()))
                .map_err(|e| (e, InputKind::Model))
        }
        InputKind::Snapshot => {
            let mut out =
                snapshot_input(opened, size_hint(), opts).map_err(|e| (e, InputKind::Snapshot))?;
            // The hook's sidecar (run facts the pickle cannot hold) lies beside the file.
            if let (Some(p), Some(snap)) = (path, out.snapshot.as_mut()) {
                snap.attach_sidecar(std::path::Path::new(p));
            }
            Ok(out)
        }
        InputKind::Series => series_input(opened).map_err(|e| (e, InputKind::Series)),
        InputKind::Log => {
            let counter = opened.counter.clone();
            let mut mapped = opened.mapped();
            let mut reader = opened.reader;
            let source = match mapped.as_mut() {
                Some(m) => Source::Mapped(m),
                None => Source::Read(&mut reader),
            };
            let (evidence, stats) = crate::ingest::log::grouping::analyze_log_source(
                source,
                &name,
                crate::ingest::log::ScanPlan::default(),
            )
            .map_err(|e| {
                let at = match &mapped {
                    Some(m) => m.window_offset(),
                    None => counter.load(std::sync::atomic::Ordering::Relaxed),
                };
                (
                    InputError::from_io(&name, e, compressed, at),
                    InputKind::Log,
                )
            })?;
            // A log cut short under the map (rotated, rewritten) is diagnosed up to the cut,
            // as a read would have ended there; past the cut the map read zeros, which are
            // not the log's bytes.
            let mut warnings = Vec::new();
            let mut bytes = stats.bytes;
            if let Some((at, len)) = mapped
                .as_ref()
                .and_then(|m| Some((m.shrunk_at()?, m.len())))
            {
                warnings.push(format!(
                    "the file shrank while it was read (it was {len} bytes; {at} could be read); diagnosed the part before"
                ));
                bytes = bytes.min(at);
            }
            Ok(InputOutcome {
                report: InputReport {
                    name: name.to_string(),
                    kind: "log",
                    bytes,
                    lines: Some(stats.lines),
                    compressed,
                    incidents: evidence.incidents.len(),
                    warnings,
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

fn read_item(item: &Item, opts: &DiagnoseOptions, stdin: Option<Box<dyn Read + Send>>) -> Read1 {
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
    stdin: Option<Box<dyn Read + Send>>,
) -> Analysis {
    read_inputs(specs, opts, stdin).diagnose(rules)
}

/// Inputs read and fused into incidents, not yet diagnosed: the part of [`analyze`] that
/// needs no rules, so that the CLI parses its rules on another thread meanwhile.
pub struct ReadInputs {
    diagnosis: Diagnosis,
    errors: Vec<InputError>,
    files: Vec<(String, InputKind)>,
    incidents: Vec<crate::incident::Incident>,
}

impl ReadInputs {
    /// Diagnoses each incident under `rules`: the rest of [`analyze`].
    pub fn diagnose(self, rules: &RuleSet) -> Analysis {
        let ReadInputs {
            mut diagnosis,
            errors,
            files,
            incidents,
        } = self;
        // Each incident is diagnosed on its own: a directory of failed jobs' logs holds
        // thousands, which the worker threads share as they shared the reading (one thread
        // for a few, where starting threads would cost more than it saves).
        let threads = if incidents.len() >= 64 {
            crate::input::walk::threads()
        } else {
            1
        };
        let reports = crate::input::walk::parallel_map(&incidents, threads, |i| {
            crate::diagnosis::verdict::diagnose(i, rules)
        });
        diagnosis.incidents = crate::diagnosis::verdict::finish(reports);
        diagnosis.collect_excerpts();
        diagnosis.group_repeats();
        Analysis {
            diagnosis,
            errors,
            files,
        }
    }
}

/// Reads inputs (paths, directories or `-`) and fuses what they hold into incidents: the
/// first part of [`analyze`].
pub fn read_inputs(
    specs: &[String],
    opts: &DiagnoseOptions,
    mut stdin: Option<Box<dyn Read + Send>>,
) -> ReadInputs {
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
    ReadInputs {
        diagnosis,
        errors,
        files: kinds,
        incidents: fused.incidents,
    }
}

/// Diagnoses inputs (paths, directories or `-`): the whole analysis without any output.
/// Inputs that cannot be read are returned as errors and listed in the diagnosis; the
/// others are still diagnosed.
pub fn diagnose_inputs(
    specs: &[String],
    rules: &RuleSet,
    opts: &DiagnoseOptions,
    stdin: Option<Box<dyn Read + Send>>,
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

pub(crate) fn diagnose_command(args: &DiagnoseArgs, io: &mut Io<'_>) -> Exit {
    if args.format == Format::Html && args.output.is_none() {
        let _ = writeln!(
            io.stderr,
            "error: --format html writes a file: add --output report.html (or --output - for standard output)"
        );
        return Exit::Error;
    }
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
    let two_cores = crate::input::read_ahead_worthwhile();
    if two_cores && may_hold_a_log(&inputs) {
        // Not joined: if nothing reads a log, the process may end before it does. A thread
        // the system refuses (a process limit) only leaves the work to the first log.
        let _ = std::thread::Builder::new()
            .name("warm".into())
            .spawn(crate::ingest::log::engines::warm);
    }
    // The rules are needed only once the inputs are read: on two cores they are parsed
    // meanwhile (20-30 ms of the main thread otherwise, before any input is opened).
    let dirs = args.rules.clone();
    let rules_loading = if two_cores {
        std::thread::Builder::new()
            .name("rules".into())
            .spawn(move || rules_from(&dirs))
            .ok()
    } else {
        None
    };
    let stdin = io.stdin.take();
    let mut opts = DiagnoseOptions::from(args);
    opts.progress = io.stderr_is_tty;
    let read = read_inputs(&inputs, &opts, stdin);
    let loaded = match rules_loading.map(|t| t.join()) {
        Some(Ok(loaded)) => loaded,
        Some(Err(panic)) => std::panic::resume_unwind(panic),
        None => rules_from(&args.rules),
    };
    let Some(rules) = report_rules(loaded, io) else {
        return Exit::Error;
    };
    let Analysis {
        diagnosis, errors, ..
    } = read.diagnose(&rules);
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

/// Whether any of `inputs` may be a log, whose scan wants the log automata built early: not
/// when each is a regular file that starts as a pickle does (a snapshot), whose read would
/// only share the cores with that build. A FIFO is not opened here: that would wait for
/// its writer. Past a few dozen inputs the answer is yes without looking (the build is
/// then a small part of the run, and a shell glob of files is not opened twice).
fn may_hold_a_log(inputs: &[String]) -> bool {
    const LOOKED_AT: usize = 32;
    inputs.len() > LOOKED_AT
        || inputs.iter().any(|spec| {
            let pickle = std::fs::metadata(spec).is_ok_and(|m| m.is_file())
                && std::fs::File::open(spec).is_ok_and(|mut f| {
                    let mut head = [0u8; 8];
                    f.read(&mut head)
                        .is_ok_and(|n| crate::ingest::snapshot::looks_like_pickle(&head[..n]))
                });
            !pickle
        })
}

fn append(path: &Path, text: &str) -> io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::may_hold_a_log;

    #[test]
    fn only_inputs_that_are_all_pickle_files_skip_the_log_warm_up() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let snapshots = [
            "fixtures/snapshots/v2_1.pickle",
            "fixtures/snapshots/v2_8.pickle",
        ];
        assert!(!may_hold_a_log(&s(&snapshots)));
        let log = "rules/torch-fragmentation/fires-hf-trainer-2ranks.log";
        assert!(may_hold_a_log(&s(&[snapshots[0], log])));
        // Standard input, a directory and a path that does not exist may all be logs.
        assert!(may_hold_a_log(&s(&[snapshots[0], "-"])));
        assert!(may_hold_a_log(&s(&["fixtures/snapshots"])));
        assert!(may_hold_a_log(&s(&["fixtures/no-such-file.pickle"])));
        // Many inputs are not looked into.
        assert!(may_hold_a_log(&s(&[snapshots[0]; 33])));
        assert!(!may_hold_a_log(&s(&[snapshots[0]; 32])));
    }
}
