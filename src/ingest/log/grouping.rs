//! Grouping a log's failures into incidents: so that one real problem is one incident.
//!
//! The [`LogAnalyzer`] is the scanner's sink for one log. It keeps the **context**, the
//! latest value of every accounting or configuration fact seen so far (constant memory: one
//! entry per fact name), and turns failure lines into incidents:
//!
//! - A failure close to the previous one (same domain, within [`MERGE_WINDOW`] lines, no
//!   restart in between) is the same incident: another rank printing the same OOM, a
//!   re-raised traceback, or a wrapper message (TGI's "Not enough memory to handle N prefill
//!   tokens") around a PyTorch OOM. Copies are counted; wrappers add facts and name the
//!   engine.
//! - A failure far away with the same signature (kind, engine, request, capacity) is a
//!   repeat, typically after a restart: it is folded into the first with its count.
//! - Anything else starts a new incident, with a snapshot of the context at that moment and
//!   the phase decided from the lines just before it.

use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

use regex::Regex;

use crate::facts::evidence::{Facts, InputName, Provenance, Value};
use crate::ingest::log::clean::{CleanLine, clean_line, split_packed, strip_prefixes};
use crate::ingest::log::engines::{self, Emit, Failure, Observation, PhaseMark, Record};
use crate::ingest::log::scanner::{Hit, LineSink, lines_back, lines_forward};

use crate::incident::Incident;
use crate::ingest::log::pattern::static_regex;
use crate::ingest::log::phase;

/// Failures this many lines apart or closer belong to one incident.
pub const MERGE_WINDOW: u64 = 400;
/// Lines after a device OOM within which a shell's bare `Killed` is taken as the same death.
pub const SAME_DEATH_WINDOW: u64 = 30;
/// Accounting this many lines below a failure still describes it (see
/// [`LogAnalyzer::trailed_incident`]).
pub const TRAILER_WINDOW: u64 = 6;
/// The same for what people paste under the error from a tool they ran after it: PyTorch's
/// allocator statistics (`torch.stats.*`: `memory_summary()` is a table of 30 to 60 lines,
/// printed in the `except` block or pasted below), Windows' `systeminfo` memory lines, the
/// models `ollama ps` lists.
pub const STATS_TRAILER_WINDOW: u64 = 80;

/// How far below a failure a fact still describes it.
fn trailer_window(fact: &str) -> u64 {
    if fact.starts_with("torch.stats.")
        || matches!(
            fact,
            "host.commit_limit_bytes"
                | "host.committed_bytes"
                | "host.total_ram_bytes"
                | "ollama.resident_gpu_bytes"
        )
    {
        STATS_TRAILER_WINDOW
    } else {
        TRAILER_WINDOW
    }
}
/// A card's size does not change while a run goes on: printed anywhere in the failed run, even
/// long after the error (an `nvidia-smi` table pasted at the end of the report), one GPU's
/// size is the size of the device that failed. (Of several GPUs' one size, not: a model split
/// across them is measured against them all.)
fn is_card_size(fact: &str) -> bool {
    fact == "smi.query_total_bytes"
}
/// A start this many lines below a failure, of a run that printed nothing but its
/// configuration, is the failed run's own command pasted under its traceback (see
/// [`LogAnalyzer::finish`]).
pub const PASTED_COMMAND_WINDOW: u64 = 20;
/// A log with more distinct incidents than this keeps the first ones and counts the rest.
pub const MAX_INCIDENTS: usize = 1000;

/// What a log yielded.
#[derive(Debug, Default)]
pub struct LogEvidence {
    pub incidents: Vec<Incident>,
    /// Facts in force at the end of the log (for inputs with no failure).
    pub context: Facts,
    pub restarts: u32,
    /// Incidents beyond [`MAX_INCIDENTS`] that were dropped.
    pub dropped_incidents: u64,
}

/// The scanner sink for one log.
pub struct LogAnalyzer {
    input: InputName,
    context: Facts,
    context_engine: Option<&'static str>,
    marker: Option<(PhaseMark, u64)>,
    /// Where the current run said it was serving, if it did (a server up and ready).
    serving_since: Option<Provenance>,
    incidents: Vec<Incident>,
    run: u32,
    restarts: u32,
    dropped: u64,
    /// The job's own worker pids a launcher named, with the run they were named in (at most
    /// [`MAX_WORKER_PIDS`]).
    worker_pids: Vec<(u32, u64)>,
    /// Where the current run started (0 for the first run), and whether it has shown
    /// anything but configuration since: a failure, a phase marker, a memory reading.
    run_started_at: u64,
    run_output: bool,
}

/// Worker pids kept per log: a launcher names each worker a few times, and jobs run at
/// most a few thousand ranks on one host's log.
const MAX_WORKER_PIDS: usize = 4096;

impl LogAnalyzer {
    pub fn new(input: InputName) -> Self {
        LogAnalyzer {
            input,
            context: Facts::new(),
            context_engine: None,
            marker: None,
            serving_since: None,
            incidents: Vec::new(),
            run: 0,
            restarts: 0,
            dropped: 0,
            worker_pids: Vec::new(),
            run_started_at: 0,
            run_output: false,
        }
    }

    /// Settles the incidents of the run now ending whose failure needed a reading not
    /// logged before it (`Failure::requires`): dropped where the run never logged it; where
    /// it came later (a `free` table pasted under the traceback), the reading joins the
    /// incident's facts, the evidence it rests on.
    fn settle_requirements(&mut self) {
        let (run, context) = (self.run, &self.context);
        self.incidents
            .retain(|i| i.run != run || i.requires.is_none_or(|r| met(context, r)));
        for inc in self.incidents.iter_mut().filter(|i| i.run == run) {
            if let Some((fact, _)) = inc.requires.take() {
                if let Some(f) = context.get(fact).filter(|_| !inc.facts.contains(fact)) {
                    inc.facts
                        .set(fact, f.value.clone(), f.sources.first().cloned());
                }
            }
        }
    }

    /// Ends the scan.
    pub fn finish(mut self) -> LogEvidence {
        self.settle_requirements();
        let mut restarts = self.restarts;
        let mut incidents = self.incidents;
        // A command pasted under the traceback is not a restart (see `adopt_pasted_command`).
        if let Some(last) = incidents.last_mut().filter(|i| {
            self.run == i.run + 1
                && !self.run_output
                && self.run_started_at >= i.last_line
                && self.run_started_at - i.last_line <= PASTED_COMMAND_WINDOW
        }) {
            adopt_pasted_command(
                last,
                &self.context,
                self.context_engine,
                self.run_started_at,
            );
            restarts = restarts.saturating_sub(1);
        }
        if incidents.is_empty() {
            incidents.extend(growth_without_failure(
                &self.input,
                self.context_engine,
                &self.context,
            ));
        }
        for inc in &mut incidents {
            if restarts > 0 {
                inc.facts.set("run.restarts", restarts, None);
            }
            // The launcher usually names its workers after the failure (it stops the others,
            // then prints a summary), so whether the process that held the device is one of
            // them is known only at the end.
            let own = inc
                .facts
                .num("oom.largest_other_process_pid")
                .is_some_and(|pid| {
                    self.worker_pids
                        .iter()
                        .any(|&(run, p)| run == inc.run && p as f64 == pid)
                });
            if own {
                inc.facts.derive(
                    "oom.other_process_is_own_worker",
                    true,
                    &["oom.largest_other_process_pid"],
                );
            }
        }
        LogEvidence {
            incidents,
            context: self.context,
            restarts,
            dropped_incidents: self.dropped,
        }
    }

    fn apply(&mut self, rec: Record, hit: &Hit<'_>) {
        match rec.obs {
            Observation::Fact { name, value } => {
                if let Some(inc) = self.trailed_incident(hit.line_no, trailer_window(name)) {
                    if !inc.facts.contains(name) {
                        inc.facts.set(name, value.clone(), Some(rec.prov.clone()));
                    }
                }
                if is_card_size(name) && self.context.num("smi.query_gpus") == Some(1.0) {
                    let run = self.run;
                    for inc in self.incidents.iter_mut().filter(|i| i.run == run) {
                        if !inc.facts.contains(name) {
                            inc.facts.set(name, value.clone(), Some(rec.prov.clone()));
                        }
                    }
                }
                self.context.set(name, value, Some(rec.prov))
            }
            Observation::Engine(e) => {
                if let Some(inc) = self.trailed_incident(hit.line_no, TRAILER_WINDOW) {
                    let engine = more_specific_engine(inc.engine, e);
                    if engine != inc.engine {
                        inc.engine = engine;
                        inc.facts.set("engine", engine, Some(rec.prov.clone()));
                    }
                }
                self.context_engine = Some(e);
                self.context.set("engine", e, Some(rec.prov));
            }
            Observation::Phase(p) => {
                // A marker on the failure's own line (a server's request span around the
                // error) says when that failure hit, when nothing else did; so does a load
                // reported failed just after it (the OOM was the load's). Not a serving
                // engine's: its "model" load also sizes the KV cache and compute buffers.
                if let Some(inc) = self.incidents.last_mut().filter(|i| {
                    i.run == self.run
                        && (i.last_line == hit.line_no
                            || (p == PhaseMark::LoadFailed
                                && !crate::facts::engine::is_serving(i.engine)
                                && hit.line_no.saturating_sub(i.last_line) <= LOAD_FAILED_WINDOW))
                        && i.phase == crate::facts::phase::id::UNKNOWN
                }) {
                    inc.phase = phase::of_mark(p);
                    inc.facts.set("phase", inc.phase, Some(rec.prov.clone()));
                }
                if p == PhaseMark::Serving && self.serving_since.is_none() {
                    self.serving_since = Some(rec.prov.clone());
                }
                self.marker = Some((p, hit.line_no));
                self.run_output = true;
            }
            Observation::MemorySample(bytes) => {
                self.run_output = true;
                add_sample(&mut self.context, &DEVICE_SAMPLES, bytes, rec.prov);
            }
            Observation::PolledMemoryToExit(readings) => {
                self.run_output = true;
                // Printed under a failure of this run (a second shell's loop pasted after the
                // traceback), the readings are the memory of the run that failed: they join
                // the samples it logged itself where it logged fewer (set-up prints), after
                // them.
                let n = readings.len() as f64;
                let target = match self.incidents.last_mut().filter(|i| {
                    i.run == self.run
                        && i.last_line < hit.line_no
                        && i.facts.num(DEVICE_SAMPLES.samples).unwrap_or(0.0) < n
                }) {
                    Some(inc) => &mut inc.facts,
                    None => &mut self.context,
                };
                for bytes in readings {
                    add_sample(target, &DEVICE_SAMPLES, bytes, rec.prov.clone());
                }
            }
            Observation::ReservedMemorySample(bytes) => {
                self.run_output = true;
                add_sample(&mut self.context, &RESERVED_SAMPLES, bytes, rec.prov);
            }
            Observation::HostMemorySample { used, total } => {
                self.run_output = true;
                add_sample(&mut self.context, &HOST_SAMPLES, used / total, rec.prov);
            }
            Observation::ProcessMemorySample(bytes) => {
                self.run_output = true;
                add_sample(&mut self.context, &PROCESS_SAMPLES, bytes, rec.prov);
            }
            Observation::WorkerPid(pid) => {
                let seen = (self.run, pid);
                if self.worker_pids.len() < MAX_WORKER_PIDS && !self.worker_pids.contains(&seen) {
                    self.worker_pids.push(seen);
                }
            }
            Observation::RunStart => {
                self.settle_requirements();
                // Only a start after something happened counts as a restart.
                if self.incidents.iter().any(|i| i.run == self.run) || !self.context.is_empty() {
                    self.restarts += u32::from(!self.incidents.is_empty() || self.run > 0);
                    self.run += 1;
                    self.run_started_at = hit.line_no;
                    self.run_output = false;
                }
                // The old context says little about the new run: what the device held
                // before it existed is someone else's memory (`nvidia-smi --query-gpu` run
                // before the launch), an engine's build settings still hold
                // (`carried_across_start`); and a server that came up, failed nothing and was
                // not seen to stop is still running when the next one starts (two instances
                // on one GPU, `tail -f` of two servers' logs): it holds its memory.
                let still_serving = self.serving_since.take().filter(|_| {
                    !self.incidents.iter().any(|i| i.run == self.run)
                        && self.context.bool("engine.server_stopped") != Some(true)
                });
                self.context = carried_across_start(&self.context);
                if let Some(at) = still_serving {
                    self.context
                        .set("engine.earlier_instance_serving", true, Some(at));
                }
                self.context_engine = None;
                self.marker = None;
            }
            Observation::Failure(f) => {
                self.run_output = true;
                self.failure(f, rec.prov, rec.meta, hit)
            }
        }
    }

    /// The incident whose failure ended just above this line: tools print a status line
    /// under the error (AUTOMATIC1111's `Torch active/reserved: ... Sys VRAM: 4096/4096
    /// MiB`, ComfyUI's `Got an OOM, unloading all loaded models`) that belongs to it.
    fn trailed_incident(&mut self, line_no: u64, window: u64) -> Option<&mut Incident> {
        let run = self.run;
        self.incidents.last_mut().filter(|i| {
            // The failure's own line counts: one line can hold the error and the engine's
            // name (a router's span, a launcher prefix) seen by another recogniser.
            i.run == run && line_no >= i.last_line && line_no - i.last_line <= window
        })
    }

    fn failure(
        &mut self,
        mut f: Failure,
        prov: Provenance,
        meta: crate::ingest::log::clean::LineMeta,
        hit: &Hit<'_>,
    ) {
        let line_no = hit.line_no;
        if f.requires.is_some_and(|r| met(&self.context, r)) {
            f.requires = None;
        }
        // A bare CUDA error line (`CUDA error: out of memory`, `CUBLAS_STATUS_ALLOC_FAILED`)
        // reads as PyTorch's, but llama.cpp's ggml prints the same words, and Ollama's runner
        // is llama.cpp: in a log that engine runs, the failure is its own (a paste that cut
        // ggml's `current device:` line after it left nothing else to tell).
        let ggml_engine = self
            .context_engine
            .filter(|e| matches!(*e, engines::id::LLAMACPP | engines::id::OLLAMA));
        if let Some(ctx) = ggml_engine.filter(|_| {
            f.engine == engines::id::PYTORCH
                && matches!(
                    f.get("oom.wording").and_then(Value::as_str),
                    Some("cuda-runtime" | "cuda-library" | "thc")
                )
        }) {
            f.engine = ctx;
            // ggml allocates through the CUDA runtime as a matter of course: none of PyTorch's
            // reading of a runtime failure beside its caching allocator applies.
            f.facts
                .retain(|(n, ..)| *n != "oom.wording" && *n != "oom.outside_allocator");
            f.fact("oom.wording", "ggml", None);
        }
        // A shell's bare `Killed` just after a Python error is the same death (a launcher
        // killing what is left of the job), not a second, host-memory incident.
        let shell_kill = f.wrapper
            && f.kind == "host-oom"
            && f.get("host.killer").and_then(Value::as_str) == Some("shell");
        if shell_kill
            && self.incidents.last().is_some_and(|i| {
                i.run == self.run
                    && i.kind == "device-oom"
                    && line_no.saturating_sub(i.last_line) <= SAME_DEATH_WINDOW
            })
        {
            return;
        }
        let prov = match &f.text {
            Some(t) => Provenance {
                text: Some(engines::bounded_text(t)),
                span: None,
                ..prov
            },
            None => prov,
        };
        let mut failure_facts = Facts::new();
        for (name, value, span) in &f.facts {
            let p = match span {
                Some(s) if prov.text.as_ref().is_some_and(|t| s.1 <= t.len()) => {
                    prov.clone().with_span(*s)
                }
                _ => prov.clone(),
            };
            failure_facts.set(name, value.clone(), Some(p));
        }
        failure_facts.set("failure.kind", f.kind, Some(prov.clone()));
        failure_facts.set("failure.engine", f.engine, Some(prov.clone()));
        let signature = signature(&f);

        // 1. Same incident as a recent failure?
        let marker = self.marker;
        let context = &self.context;
        if let Some(inc) = self.incidents.iter_mut().rev().find(|i| {
            i.run == self.run
                && i.domain == f.domain
                && line_no.saturating_sub(i.last_line) <= MERGE_WINDOW
        }) {
            inc.last_line = line_no;
            // A failure that needs no further reading makes the incident a failure whatever
            // the one before it needed.
            if f.requires.is_none() {
                inc.requires = None;
            }
            // A restatement at the bottom of a traceback printed below its first line (a
            // notebook's error report) has the failing call just above it.
            if f.domain == engines::Domain::Device {
                failing_call_facts(hit, &mut inc.facts, &prov);
            }
            // The failure a wrapper announced (a vGPU layer's refusal, a server's restatement
            // before the stack): its own traceback says when it hit.
            let behind_wrapper = inc.from_wrapper && !f.wrapper;
            if f.wrapper {
                inc.facts
                    .merge(&failure_facts_without_identity(&failure_facts), false);
            } else if inc.from_wrapper || kind_strength(f.kind) > kind_strength(inc.kind) {
                // The real failure behind a wrapper, or a harder failure after a softer one (an
                // OOM after a preemption storm): its kind and numbers win.
                inc.facts.merge(&failure_facts, true);
                inc.kind = f.kind;
                inc.from_wrapper = false;
                inc.device = inc.device.or(f.device);
                inc.copies = inc.copies.max(1);
            } else {
                inc.copies += 1;
                inc.facts.merge(&failure_facts, false);
            }
            inc.engine = more_specific_engine(inc.engine, f.engine);
            if let Some(d) = f.device {
                inc.devices.insert(d);
                inc.device.get_or_insert(d);
            }
            if let Some(r) = meta.rank {
                inc.ranks.insert(r);
            }
            // Error reports put the exception first and the console log after it (ComfyUI's
            // `# ComfyUI Error Report`, issue templates): accounting the first line could not
            // see yet is added when the copy in the log is reached. Facts the incident already
            // has keep their values.
            for (name, fact) in context.iter() {
                if !inc.facts.contains(name) {
                    inc.facts
                        .set(name, fact.value.clone(), fact.sources.first().cloned());
                    for s in fact.sources.iter().skip(1) {
                        inc.facts.add_source(name, s.clone());
                    }
                }
            }
            // Some tools print the message before the traceback (ComfyUI's `!!! Exception
            // during processing !!!`, loggers that log `str(e)` and then the stack): the
            // frames sit above the restatement, not above the first line. A phase the first
            // line could not decide is decided from the restatement's lines.
            if inc.phase == crate::facts::phase::id::UNKNOWN || behind_wrapper {
                let preceding = preceding_lines(hit, prov.text.as_deref());
                let marker = marker
                    .map(|(m, at)| (m, line_no.saturating_sub(at).max(1)))
                    .filter(|_| behind_wrapper);
                let decision = phase::decide(&preceding, marker);
                let by_frames = decision
                    .evidence
                    .as_deref()
                    .is_some_and(|e| e.starts_with("traceback frame"));
                if decision.phase != crate::facts::phase::id::UNKNOWN
                    && (inc.phase == crate::facts::phase::id::UNKNOWN || by_frames)
                {
                    inc.phase = decision.phase;
                    set_phase_facts(&mut inc.facts, &decision, &prov);
                }
            }
            return;
        }

        // 2. A repeat of an earlier incident (restarts)?
        if !f.wrapper {
            if let Some(inc) = self
                .incidents
                .iter_mut()
                .find(|i| i.signature == signature && i.domain == f.domain)
            {
                inc.copies += 1;
                inc.last_line = line_no;
                if f.requires.is_none() {
                    inc.requires = None;
                }
                inc.run = self.run;
                if let Some(r) = meta.rank {
                    inc.ranks.insert(r);
                }
                return;
            }
        }

        // 3. A new incident.
        if self.incidents.len() >= MAX_INCIDENTS {
            self.dropped += 1;
            return;
        }
        let mut facts = self.context.clone();
        facts.merge(&failure_facts, true);
        let preceding = preceding_lines(hit, prov.text.as_deref());
        let marker = self
            .marker
            .map(|(m, at)| (m, line_no.saturating_sub(at).max(1)));
        let mut decision = phase::decide(&preceding, marker);
        // IPython heads a traceback with the exception's class (`OutOfMemoryError   Traceback
        // (most recent call last)`) and prints the frames below it, innermost last: read
        // upwards from the end of those frames they are a traceback above its error.
        if !by_frames(&decision)
            && memchr::memmem::find(hit.raw, TRACEBACK_HEADER.as_bytes()).is_some()
        {
            let below = frames_below(hit);
            let from_below = phase::decide(&below, None);
            if by_frames(&from_below) {
                decision.phase = from_below.phase;
                decision.frames = from_below.frames;
                decision.evidence = from_below.evidence;
                decision.training_loop |= from_below.training_loop;
            }
        }
        // An engine refusing to start because its KV cache or budget does not fit is a
        // start-up check by definition, whatever the lines around it say.
        if decision.phase == crate::facts::phase::id::UNKNOWN
            && matches!(f.kind, "kv-capacity" | "no-kv-memory" | "engine-budget")
        {
            decision.phase = crate::facts::phase::id::ENGINE_STARTUP;
            decision.evidence = Some(format!("a {} check runs at engine start-up", f.kind));
        }
        let time_hint = meta
            .timestamp
            .clone()
            .or_else(|| preceding.iter().find_map(|l| l.meta.timestamp.clone()));
        set_phase_facts(&mut facts, &decision, &prov);
        if f.domain == engines::Domain::Device {
            failing_call_facts(hit, &mut facts, &prov);
        }
        let engine = match (f.engine, self.context_engine) {
            (engines::id::PYTORCH, Some(ctx)) => ctx,
            (e, _) => e,
        };
        let mut devices = BTreeSet::new();
        if let Some(d) = f.device {
            devices.insert(d);
        }
        let mut ranks = BTreeSet::new();
        if let Some(r) = meta.rank {
            ranks.insert(r);
        }
        self.incidents.push(Incident {
            input: self.input.clone(),
            kind: f.kind,
            domain: f.domain,
            engine,
            device: f.device,
            devices,
            ranks,
            copies: 1,
            first: Provenance { span: None, ..prov },
            last_line: line_no,
            timestamp: meta.timestamp.clone(),
            time_hint,
            pid: meta.pid,
            facts,
            phase: decision.phase,
            from_wrapper: f.wrapper,
            run: self.run,
            signature,
            requires: f.requires,
        });
    }
}

/// Whether `context` holds the reading `requirement` names, at least its value.
fn met(context: &Facts, (fact, min): (&'static str, f64)) -> bool {
    context.num(fact).is_some_and(|v| v >= min)
}

/// An issue paste often puts the command under the traceback (`my command:` and a `vllm
/// serve ...` below the error). Its start line ends the failed run, but a run that printed
/// nothing else and started right below the failure is that command, not a restart: its
/// configuration (the facts read from `started_at` on) is the failed run's, for what the
/// incident does not know already, and its engine where more specific.
fn adopt_pasted_command(
    incident: &mut Incident,
    context: &Facts,
    context_engine: Option<&'static str>,
    started_at: u64,
) {
    for (name, fact) in context.iter() {
        let from_the_command = fact
            .sources
            .iter()
            .any(|p| p.line.is_some_and(|l| l >= started_at));
        if from_the_command && name != "engine" {
            incident
                .facts
                .set_if_absent(name, fact.value.clone(), fact.sources.first().cloned());
        }
    }
    if let Some(e) = context_engine {
        let engine = more_specific_engine(incident.engine, e);
        if engine != incident.engine {
            incident.engine = engine;
            let at = context
                .get("engine")
                .and_then(|f| f.sources.first().cloned());
            incident.facts.set("engine", engine, at);
        }
    }
}

/// The facts a program's start keeps from the context before it: an `nvidia-smi` query's
/// reading of the device, which then is the memory in use before this run existed; and how
/// a TensorRT engine was built (`trtllm-build ... --gather_context_logits`, its own start
/// printed before the run that loads the engine), which holds for every run of it.
fn carried_across_start(old: &Facts) -> Facts {
    let mut kept = Facts::new();
    // The first of two readings of one thing wins: a GPU's use as the driver counts it
    // before one process's (`--query-compute-apps`).
    for (from, to) in [
        ("smi.query_used_bytes", "smi.used_before_start_bytes"),
        ("smi.apps_used_bytes", "smi.used_before_start_bytes"),
        ("smi.query_total_bytes", "smi.query_total_bytes"),
        ("trtllm.gather_logits", "trtllm.gather_logits"),
    ] {
        if let Some(f) = old.get(from).filter(|_| !kept.contains(to)) {
            kept.set(to, f.value.clone(), f.sources.first().cloned());
        }
    }
    kept
}

/// Records a phase decision as facts, with the failure line as their source.
fn set_phase_facts(facts: &mut Facts, decision: &phase::PhaseDecision, prov: &Provenance) {
    let phase_prov = Provenance {
        span: None,
        ..prov.clone()
    };
    facts.set("phase", decision.phase, Some(phase_prov.clone()));
    if let Some(fr) = &decision.frames {
        facts.set("phase.frames", fr.as_str(), Some(phase_prov.clone()));
    }
    if let Some(ev) = &decision.evidence {
        facts.set("phase.evidence", ev.as_str(), Some(phase_prov.clone()));
    }
    if let Some(s) = decision.steps_completed {
        facts.set("phase.steps_completed", s, Some(phase_prov.clone()));
    }
    if let Some(e) = decision.epoch {
        facts.set("phase.epoch", e, Some(phase_prov.clone()));
    }
    if let Some(r) = decision.evaluation_rounds {
        facts.set("phase.evaluation_rounds", r, Some(phase_prov.clone()));
    }
    if decision.training_loop {
        facts.set("phase.training_loop", true, Some(phase_prov));
    }
}

/// How specific an engine id is: the engine that ran the workload beats the framework under
/// it, which beats the infrastructure that killed it, which beats nothing.
fn engine_rank(e: &str) -> u8 {
    use engines::id;
    match e {
        id::UNKNOWN => 0,
        id::LINUX | id::SYSTEMD | id::KUBERNETES | id::RAY | "slurm" | "docker" => 1,
        id::PYTORCH | id::TRANSFORMERS => 2,
        _ => 3,
    }
}

/// The more specific of two engine ids (the first on a tie).
fn more_specific_engine(current: &'static str, new: &'static str) -> &'static str {
    if engine_rank(new) > engine_rank(current) {
        new
    } else {
        current
    }
}

/// How hard a failure is: an allocation that failed beats an engine refusing to start, which
/// beats pressure the engine survived (preemption, retraction storms).
fn kind_strength(kind: &str) -> u8 {
    match kind {
        "device-oom" | "host-oom" => 3,
        "kv-exhausted" => 1,
        _ => 2,
    }
}

/// A wrapper's facts minus the ones that identify the primary failure.
fn failure_facts_without_identity(f: &Facts) -> Facts {
    let mut out = f.clone();
    out.remove("failure.kind");
    out.remove("failure.engine");
    out
}

/// Failure facts that are the configured size of the workload: two failures that differ in
/// them are different errors even when everything else matches (restarts with another
/// `--max-model-len`).
const CONFIGURED_SIZE: &[&str] = &[
    "max_model_len",
    "n_ctx",
    "num_ctx",
    "max_total_tokens",
    "max_seq_len",
    "context_length",
];

/// What makes two failures "the same error": kind, engine, request, capacity and the
/// configured context size.
fn signature(f: &Failure) -> String {
    let n = |name: &str| {
        f.get(name)
            .and_then(Value::as_f64)
            .map(|v| format!("{v:.0}"))
            .unwrap_or_else(|| "-".into())
    };
    let mut sig = format!(
        "{}|{}|{}|{}",
        f.kind,
        f.engine,
        n("oom.requested_bytes"),
        n("oom.total_bytes")
    );
    for (name, value, _) in &f.facts {
        if CONFIGURED_SIZE
            .iter()
            .any(|suffix| name.rsplit('.').next() == Some(*suffix))
        {
            sig.push_str(&format!("|{name}={value}"));
        }
    }
    sig
}

/// What the failing call itself shows, read from the innermost frames of the traceback right
/// above a device failure (a restatement at the bottom of a notebook's report has them just
/// above it too); facts already set are kept.
/// - `oom.pinned_host_copy`: the failing source line copies to page-locked host memory
///   (`.to("cpu", non_blocking=True)`, `.pin_memory()`), so the `out of memory` is the pinned
///   host allocation, not the device.
/// - `oom.attention_scores`: the failing call builds an attention score matrix (batch x
///   heads x query x key): an attention function that materialises it (`eager_attention_forward`,
///   GPT-2's and GPT-NeoX's `_attn`) or a source line assigning it (`attn_weights = ...`).
/// - `oom.kv_cache_update`: the failing source line extends the KV cache (`torch.cat([
///   past_key_value[0], key_states], dim=2)`, the cache before Transformers' cache classes,
///   whose frames `cache_utils.py` names instead).
/// - `oom.accumulator`: the failing source line concatenates onto the tensor it assigns
///   (see [`accumulator`]); not where that tensor is a KV cache.
fn failing_call_facts(hit: &Hit<'_>, facts: &mut Facts, prov: &Provenance) {
    let call = FailingCall::read(hit);
    if call.pinned_host_copy && !facts.contains("oom.pinned_host_copy") {
        facts.set("oom.pinned_host_copy", true, Some(prov.clone()));
    }
    if call.attention_scores && !facts.contains("oom.attention_scores") {
        facts.set("oom.attention_scores", true, Some(prov.clone()));
    }
    if call.kv_cache_update && !facts.contains("oom.kv_cache_update") {
        facts.set("oom.kv_cache_update", true, Some(prov.clone()));
    }
    if let Some(name) = call.accumulator.filter(|_| !call.kv_cache_update)
        && !facts.contains("oom.accumulator")
    {
        facts.set("oom.accumulator", name, Some(prov.clone()));
    }
}

/// The target a source line (without spaces) assigns when the value concatenates onto that
/// same target: `preds=logitsifpredsisNoneelsetorch.cat((preds,logits),dim=0)` (Transformers
/// 3's prediction loop), `self.feats=torch.cat([self.feats,f])`, `preds_host=nested_concat(
/// preds_host,logits)`. Such a tensor holds every batch gathered so far, and each
/// concatenation asks for all of it again plus one batch.
fn accumulator(compact: &str) -> Option<&str> {
    let eq = compact.find('=')?;
    let (target, value) = (&compact[..eq], &compact[eq + 1..]);
    let plain = |c: char| c.is_ascii_alphanumeric() || "_.[]'\"".contains(c);
    if target.is_empty() || value.starts_with('=') || !target.chars().all(plain) {
        return None;
    }
    let onto_target = |call: &str| {
        value.match_indices(call).any(|(at, _)| {
            let args = &value[at + call.len()..];
            let args = args.strip_prefix(['(', '[']).unwrap_or(args);
            args.strip_prefix(target)
                .is_some_and(|rest| rest.starts_with(','))
        })
    };
    [
        "torch.cat(",
        "torch.concat(",
        "torch.concatenate(",
        "nested_concat(",
    ]
    .into_iter()
    .any(onto_target)
    .then_some(target)
}

/// Attention functions whose body holds the whole score matrix (the memory-efficient kernels,
/// SDPA and FlashAttention, never build it).
const SCORE_MATRIX_FUNCTIONS: &[&str] = &[
    "eager_attention_forward",
    "_attn",
    "_upcast_and_reordered_attn",
];

/// Names code gives the score matrix, as the target of an assignment on the failing line.
const SCORE_MATRIX_NAMES: &[&str] = &[
    "attn_weights=",
    "attn_scores=",
    "attention_scores=",
    "attention_probs=",
];

/// How many frames above a failure still speak for the failing call: the operation itself
/// (`softmax`, `matmul`) and the model code that called it.
const FAILING_CALL_FRAMES: usize = 3;

/// What [`failing_call_facts`] reads off the innermost frames.
#[derive(Default)]
struct FailingCall {
    pinned_host_copy: bool,
    attention_scores: bool,
    kv_cache_update: bool,
    accumulator: Option<String>,
}

impl FailingCall {
    fn read(hit: &Hit<'_>) -> Self {
        let mut call = FailingCall::default();
        let mut frames = 0;
        for raw in lines_back(hit.before).take(12 * FAILING_CALL_FRAMES) {
            let l = clean_line(raw);
            let t = l.text.trim_start();
            if t.starts_with("Traceback") {
                break;
            }
            let frame = phase::frame_location(&l.text);
            // IPython's notebook cell (`Cell In[5], line 3`) is a frame with no function.
            if frame.is_some() || t.starts_with("Cell In") {
                if let Some(frame) = frame {
                    let func = frame.func.rsplit('.').next().unwrap_or(frame.func);
                    call.attention_scores |= SCORE_MATRIX_FUNCTIONS.contains(&func);
                }
                frames += 1;
                if frames == FAILING_CALL_FRAMES {
                    break;
                }
                continue;
            }
            // Without spaces, and without the backslashes of a notebook's JSON error report.
            let compact: String = t
                .chars()
                .filter(|c| !c.is_whitespace() && *c != '\\')
                .collect();
            // The pinned copy is the innermost frame's own line: a `.to("cpu")` further up
            // the stack is not what failed.
            if frames == 0 {
                let to_cpu = compact.contains(".to(\"cpu\"") || compact.contains(".to('cpu'");
                call.pinned_host_copy |= (to_cpu && compact.contains("non_blocking=True"))
                    || compact.contains("pin_memory(");
                // The cache grown by a concatenation: GPT-2's `layer_past`, Llama's and
                // most 2023 models' `past_key_value`.
                call.kv_cache_update |= compact.contains("torch.cat(")
                    && ["past_key_value", "layer_past", "key_cache", "value_cache"]
                        .iter()
                        .any(|n| compact.contains(n));
                call.accumulator = accumulator(&compact).map(str::to_owned);
            }
            call.attention_scores |= SCORE_MATRIX_NAMES.iter().any(|n| compact.starts_with(n));
        }
        call
    }
}

/// How many lines after a failure a "failed to load the model" line still speaks of it.
const LOAD_FAILED_WINDOW: u64 = 12;

/// The header IPython and Python print above a traceback.
const TRACEBACK_HEADER: &str = "Traceback (most recent call last)";

/// Whether a phase was read from traceback frames (the strongest reading).
fn by_frames(decision: &phase::PhaseDecision) -> bool {
    decision
        .evidence
        .as_deref()
        .is_some_and(|e| e.starts_with("traceback frame"))
}

/// The lines of the traceback below an IPython header, nearest the (missing or cut) error
/// first, as [`preceding_lines`] orders the lines above an error: up to the exception's
/// own line (`OutOfMemoryError: CUDA out of memory...`), the next header, or 400 lines.
fn frames_below(hit: &Hit<'_>) -> Vec<CleanLine> {
    let mut below: Vec<CleanLine> = Vec::new();
    for raw in lines_forward(hit.after).take(400) {
        let line = clean_line(raw);
        let t = line.text.trim_start();
        if t.contains(TRACEBACK_HEADER) || EXCEPTION_LINE.is_match(t) {
            break;
        }
        below.push(line);
    }
    below.reverse();
    below
}

/// An exception's own line at the bottom of a traceback: `torch.OutOfMemoryError: ...`,
/// `RuntimeError: ...`.
static EXCEPTION_LINE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b:")
});

/// The cleaned lines before a failure, nearest first: the sub-lines of a packed line before
/// the failing one, then the look-back window.
fn preceding_lines(hit: &Hit<'_>, failure_text: Option<&str>) -> Vec<CleanLine> {
    let mut out = Vec::new();
    let cleaned = clean_line(hit.raw);
    if let Some(parts) = split_packed(&cleaned.text) {
        let idx = failure_text
            .and_then(|ft| {
                parts.iter().position(|p| {
                    !p.trim().is_empty() && (ft.starts_with(p.trim()) || p.contains(ft))
                })
            })
            .unwrap_or(parts.len());
        for p in parts[..idx].iter().rev() {
            let mut meta = cleaned.meta.clone();
            let text = strip_prefixes(p, &mut meta).to_string();
            out.push(CleanLine {
                text,
                meta,
                indented: false,
            });
        }
    }
    out.extend(lines_back(hit.before).take(600).map(clean_line));
    out
}

impl LineSink for LogAnalyzer {
    fn hit(&mut self, hit: &Hit<'_>) -> u32 {
        let mut emit = Emit::default();
        engines::recognize_raw(
            &self.input,
            hit.line_no,
            hit.raw,
            hit.before,
            hit.after,
            &mut emit,
        );
        for rec in emit.records {
            self.apply(rec, hit);
        }
        emit.consumed
    }
}

/// Scans a whole log.
pub fn analyze_log(
    reader: &mut dyn std::io::Read,
    input: &InputName,
) -> std::io::Result<(LogEvidence, crate::ingest::log::ScanStats)> {
    analyze_log_planned(reader, input, crate::ingest::log::ScanPlan::default())
}

/// [`analyze_log`] of a log held in a string, named `t.log` (tests).
#[cfg(test)]
pub(crate) fn analyze_text(text: &str) -> LogEvidence {
    let input: InputName = Arc::from("t.log");
    analyze_log(&mut text.as_bytes(), &input)
        .expect("reading a string")
        .0
}

/// [`analyze_log`], walking the anchors in full only where `plan` says.
pub fn analyze_log_planned(
    reader: &mut dyn std::io::Read,
    input: &InputName,
    plan: crate::ingest::log::ScanPlan,
) -> std::io::Result<(LogEvidence, crate::ingest::log::ScanStats)> {
    analyze_log_source(
        crate::ingest::log::scanner::Source::Read(reader),
        input,
        plan,
    )
}

/// [`analyze_log_planned`], over a reader or a mapped file.
pub fn analyze_log_source(
    source: crate::ingest::log::scanner::Source<'_>,
    input: &InputName,
    plan: crate::ingest::log::ScanPlan,
) -> std::io::Result<(LogEvidence, crate::ingest::log::ScanStats)> {
    let mut analyzer = LogAnalyzer::new(Arc::clone(input));
    let stats = crate::ingest::log::scanner::scan_source(
        source,
        engines::anchors(),
        Some(engines::gate()),
        plan,
        &mut analyzer,
    )?;
    Ok((analyzer.finish(), stats))
}

/// The facts one kind of memory reading aggregates into.
struct SampleFacts {
    first: &'static str,
    last: &'static str,
    /// The largest reading, where the kind keeps it.
    max: Option<&'static str>,
    samples: &'static str,
    increases: &'static str,
    growth: &'static str,
    /// How many readings in a row rose up to the latest one, and the reading the rise began
    /// from, where the kind keeps them.
    climb: Option<(&'static str, &'static str)>,
}

/// Device memory the run logged (`mem 10.2 GiB` in progress lines), in bytes.
const DEVICE_SAMPLES: SampleFacts = SampleFacts {
    first: "log.memory_first_bytes",
    last: "log.memory_last_bytes",
    max: Some("log.memory_max_bytes"),
    samples: "log.memory_samples",
    increases: "log.memory_increases",
    growth: "log.memory_growth_bytes",
    climb: Some(("log.memory_climb_readings", "log.memory_climb_from_bytes")),
};

/// Device memory the allocator held as the run logged it (`reserved 78.6G`), in bytes: the
/// cache, which grows around a steady load when its blocks split.
const RESERVED_SAMPLES: SampleFacts = SampleFacts {
    first: "log.reserved_first_bytes",
    last: "log.reserved_last_bytes",
    max: Some("log.reserved_max_bytes"),
    samples: "log.reserved_samples",
    increases: "log.reserved_increases",
    growth: "log.reserved_growth_bytes",
    climb: None,
};

/// The machine's memory in use (`free`, `top`), as a share of its total: the tables often
/// print no unit, so only the share is known.
const HOST_SAMPLES: SampleFacts = SampleFacts {
    first: "host.memory_first_share",
    last: "host.memory_last_share",
    max: Some("host.memory_max_share"),
    samples: "host.memory_samples",
    increases: "host.memory_increases",
    growth: "host.memory_growth_share",
    climb: None,
};

/// The process's own resident memory, as the program logged it (`rss_after=2655MB`), in
/// bytes.
const PROCESS_SAMPLES: SampleFacts = SampleFacts {
    first: "host.rss_first_bytes",
    last: "host.rss_last_bytes",
    max: Some("host.rss_max_bytes"),
    samples: "host.rss_samples",
    increases: "host.rss_increases",
    growth: "host.rss_growth_bytes",
    climb: None,
};

/// The incident kind of memory that a log shows climbing with no failure in it.
pub const MEMORY_GROWTH: &str = "memory-growth";

/// Memory that a log shows climbing with no failure in it (a run still going, or a paste cut
/// before the error): higher reading after reading, at its highest at the end, and half as
/// much again as at the start. It is an incident of its own kind, so a paste of a run that
/// is growing toward an OOM is not answered with "no out-of-memory incident found". A warm-up
/// (a rise, then a flat line) and a sawtooth are not steady growth.
fn growth_without_failure(
    input: &InputName,
    engine: Option<&'static str>,
    context: &Facts,
) -> Option<Incident> {
    use crate::facts::engine::Domain;
    let steady = |names: &SampleFacts, min_samples: f64, min_growth: f64| {
        let (Some(n), Some(up), Some(first), Some(last)) = (
            context.num(names.samples),
            context.num(names.increases),
            context.num(names.first),
            context.num(names.last),
        ) else {
            return false;
        };
        let max = names.max.and_then(|m| context.num(m)).unwrap_or(last);
        n >= min_samples
            && up >= 0.7 * (n - 1.0)
            && last - first >= min_growth
            && last >= 1.5 * first
            && last >= 0.98 * max
    };
    let (domain, names) = if steady(&DEVICE_SAMPLES, 4.0, 512.0 * 1048576.0) {
        (Domain::Device, &DEVICE_SAMPLES)
    } else if steady(&HOST_SAMPLES, 3.0, 0.2) {
        (Domain::Host, &HOST_SAMPLES)
    } else if steady(&PROCESS_SAMPLES, 4.0, 512.0 * 1048576.0) {
        (Domain::Host, &PROCESS_SAMPLES)
    } else {
        return None;
    };
    let first = context
        .get(names.last)
        .and_then(|f| f.sources.first().cloned())
        .unwrap_or_else(|| Provenance::at(input.clone(), "log"));
    Some(Incident::from_evidence(
        input.clone(),
        MEMORY_GROWTH,
        engine.unwrap_or(crate::facts::engine::id::UNKNOWN),
        domain,
        None,
        first,
        context.clone(),
    ))
}

/// Aggregates one memory reading into growth facts, in constant memory: first, last (and
/// largest), how many, how many rose over the one before, last minus first.
fn add_sample(c: &mut Facts, names: &SampleFacts, value: f64, prov: Provenance) {
    let prev = c.num(names.last);
    let n = c.num(names.samples).unwrap_or(0.0) + 1.0;
    if !c.contains(names.first) {
        c.set(names.first, value, Some(prov.clone()));
    }
    if prev.is_some_and(|p| value > p) {
        let inc = c.num(names.increases).unwrap_or(0.0) + 1.0;
        c.set(names.increases, inc, Some(prov.clone()));
    } else if !c.contains(names.increases) {
        c.set(names.increases, 0u32, Some(prov.clone()));
    }
    if let Some((run, from)) = names.climb {
        match prev {
            Some(p) if value > p => {
                let n = c.num(run).unwrap_or(0.0);
                if n == 0.0 {
                    c.set(from, p, Some(prov.clone()));
                }
                c.set(run, n + 1.0, Some(prov.clone()));
            }
            _ => {
                c.set(run, 0u32, Some(prov.clone()));
                c.set(from, value, Some(prov.clone()));
            }
        }
    }
    if let Some(max) = names.max {
        if c.num(max).is_none_or(|m| value > m) {
            c.set(max, value, Some(prov.clone()));
        }
    }
    c.set(names.last, value, Some(prov.clone()));
    c.set(names.samples, n, Some(prov));
    if let (Some(first), Some(last)) = (c.num(names.first), c.num(names.last)) {
        c.derive(names.growth, last - first, &[names.first, names.last]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str) -> LogEvidence {
        analyze_text(text)
    }

    const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.69 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 22.60 GiB memory in use. Of the allocated memory 20.00 GiB is allocated by PyTorch, and 2.10 GiB is reserved by PyTorch but unallocated.";

    /// The failing call's frames: an attention function or a line assigning the score matrix
    /// marks it; the memory-efficient kernel's call, or the matrix further up than the call
    /// that failed, does not.
    #[test]
    fn the_failing_call_is_read_from_the_innermost_frames() {
        let flag = |tb: &str, name: &str| {
            let ev = run(&format!(
                "Traceback (most recent call last):\n{tb}\n{OOM}\n"
            ));
            ev.incidents[0].facts.bool(name)
        };
        let eager = "  File \"/env/transformers/models/llama/modeling_llama.py\", line 290, in forward\n    attn_output, attn_weights = attention_interface(\n  File \"/env/transformers/models/llama/modeling_llama.py\", line 180, in eager_attention_forward\n    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)\n  File \"/env/torch/nn/functional.py\", line 2140, in softmax\n    ret = input.softmax(dim, dtype=dtype)";
        assert_eq!(flag(eager, "oom.attention_scores"), Some(true));
        let bert = "  File \"C:\\env\\transformers\\models\\bert\\modeling_bert.py\", line 325, in forward\n    attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))";
        assert_eq!(flag(bert, "oom.attention_scores"), Some(true));
        let sdpa = "  File \"/env/transformers/integrations/sdpa_attention.py\", line 96, in sdpa_attention_forward\n    attn_output = torch.nn.functional.scaled_dot_product_attention(";
        assert_eq!(flag(sdpa, "oom.attention_scores"), None);
        // The scores were computed three frames up; what failed is the MLP's projection.
        let mlp = "  File \"/m.py\", line 10, in forward\n    attn_weights = torch.softmax(s, -1)\n  File \"/m.py\", line 20, in block\n    h = self.mlp(h)\n  File \"/m.py\", line 30, in mlp\n    return self.up(x)\n  File \"/env/torch/nn/modules/linear.py\", line 125, in forward\n    return F.linear(input, self.weight, self.bias)";
        assert_eq!(flag(mlp, "oom.attention_scores"), None);
        // Pinned host memory: the innermost line only.
        let pinned = "  File \"/w/eval.py\", line 7, in collect\n    out = logits.to(\"cpu\", non_blocking=True)";
        assert_eq!(flag(pinned, "oom.pinned_host_copy"), Some(true));
        let further_up = "  File \"/w/eval.py\", line 7, in collect\n    out = step(x).to(\"cpu\", non_blocking=True)\n  File \"/w/eval.py\", line 3, in step\n    return model(x)";
        assert_eq!(flag(further_up, "oom.pinned_host_copy"), None);
        // The KV cache grown by concatenation on the failing line; not further up.
        let cat = "  File \"/env/transformers/models/llama/modeling_llama.py\", line 201, in forward\n    key_states = torch.cat([past_key_value[0], key_states], dim=2)";
        assert_eq!(flag(cat, "oom.kv_cache_update"), Some(true));
        let above = "  File \"/m.py\", line 201, in forward\n    key_states = torch.cat([past_key_value[0], key_states], dim=2)\n  File \"/m.py\", line 90, in proj\n    return self.o(x)";
        assert_eq!(flag(above, "oom.kv_cache_update"), None);
        // A tensor concatenated onto itself on the failing line; not a KV cache's, not
        // another tensor's, not further up.
        let text = |tb: &str| {
            let ev = run(&format!(
                "Traceback (most recent call last):\n{tb}\n{OOM}\n"
            ));
            ev.incidents[0]
                .facts
                .str("oom.accumulator")
                .map(str::to_owned)
        };
        let gathered = "  File \"/env/transformers/trainer.py\", line 1244, in prediction_loop\n    preds = logits if preds is None else torch.cat((preds, logits), dim=0)";
        assert_eq!(text(gathered).as_deref(), Some("preds"));
        let member = "  File \"/w/embed.py\", line 40, in run\n    self.feats[k] = torch.cat([self.feats[k], f.detach()], 0)";
        assert_eq!(text(member).as_deref(), Some("self.feats[k]"));
        let nested = "  File \"/env/transformers/trainer.py\", line 2980, in evaluation_loop\n    preds_host = logits if preds_host is None else nested_concat(preds_host, logits, padding_index=-100)";
        assert_eq!(text(nested).as_deref(), Some("preds_host"));
        let cache = "  File \"/env/transformers/cache_utils.py\", line 361, in update\n    self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)";
        assert_eq!(text(cache), None);
        let other = "  File \"/m.py\", line 3, in f\n    x = torch.cat((h, x), dim=1)";
        assert_eq!(text(other), None);
        let prefix = "  File \"/m.py\", line 3, in f\n    x = torch.cat((x_skip, y), dim=1)";
        assert_eq!(text(prefix), None);
        let up = "  File \"/m.py\", line 3, in f\n    preds = torch.cat((preds, model(x)))\n  File \"/m.py\", line 9, in forward\n    return self.net(x)";
        assert_eq!(text(up), None);
    }

    /// Readings that climb to the end make an incident without a failure; a warm-up (one
    /// rise, then flat), a sawtooth, or growth that peaked earlier do not.
    #[test]
    fn memory_that_only_grows_is_an_incident() {
        let log = |values: &[f64]| {
            values
                .iter()
                .enumerate()
                .map(|(i, v)| format!("step {i} loss 1.0 mem {v:.2} GiB\n"))
                .collect::<String>()
        };
        let ev = run(&log(&[2.0, 4.0, 6.5, 9.0, 11.0]));
        assert_eq!(ev.incidents.len(), 1);
        assert_eq!(ev.incidents[0].kind, MEMORY_GROWTH);
        assert_eq!(
            ev.incidents[0].facts.str("failure.kind"),
            Some(MEMORY_GROWTH)
        );
        for flat in [
            &[2.0, 9.0, 9.0, 9.0, 9.0, 9.0][..],
            &[2.0, 6.0, 2.0, 6.0, 2.0, 6.0][..],
            &[2.0, 4.0, 6.0, 8.0, 4.0][..],
            &[8.0, 8.1, 8.2, 8.3, 8.4][..],
        ] {
            assert!(run(&log(flat)).incidents.is_empty(), "{flat:?}");
        }
    }

    #[test]
    fn ranks_fold_into_one_incident() {
        let log = format!(
            "[rank0]: {OOM}\n[rank1]: {}\n[rank2]: {OOM}\n",
            OOM.replace("GPU 0", "GPU 1")
        );
        let ev = run(&log);
        assert_eq!(ev.incidents.len(), 1);
        let inc = &ev.incidents[0];
        assert_eq!(inc.copies, 3);
        assert_eq!(inc.ranks.len(), 3);
        assert_eq!(inc.devices.iter().copied().collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(inc.first.line, Some(1));
    }

    #[test]
    fn a_shell_kill_right_after_a_python_oom_is_the_same_death() {
        let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.69 GiB of which 1.00 GiB is free. Of the allocated memory 20.00 GiB is allocated by PyTorch, and 2.10 GiB is reserved by PyTorch but unallocated.";
        let kill = "train.sh: line 4: 4242 Killed                  python train.py";
        let input: InputName = Arc::from("t.log");
        let log = format!("{oom}\n{kill}\n");
        let ev = analyze_log(&mut log.as_bytes(), &input).unwrap().0;
        assert_eq!(ev.incidents.len(), 1);
        assert_eq!(ev.incidents[0].kind, "device-oom");
        // Far from any OOM it is a kill of its own.
        let log = format!("{oom}\n{}{kill}\n", "step\n".repeat(100));
        let ev = analyze_log(&mut log.as_bytes(), &input).unwrap().0;
        assert_eq!(ev.incidents.len(), 2);
    }

    #[test]
    fn a_command_pasted_under_its_traceback_is_the_failed_runs() {
        let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 384.00 MiB. GPU 0 has a total capacity of 79.33 GiB of which 351.81 MiB is free.";
        let command = "vllm serve qwen/Qwen1.5-72B-Chat --max-model-len 8192";
        let log = format!("{oom}\n\nmy command:\n{command}\n");
        let ev = run(&log);
        assert_eq!(ev.incidents.len(), 1);
        let inc = &ev.incidents[0];
        assert_eq!(inc.engine, "vllm");
        assert_eq!(inc.facts.str("model.name"), Some("qwen/Qwen1.5-72B-Chat"));
        assert_eq!(inc.facts.num("vllm.max_model_len"), Some(8192.0));
        assert_eq!(ev.restarts, 0);
        // A start that went on to fail again is a run of its own: its configuration is not
        // the first failure's.
        let log = format!("{oom}\n\n{command}\n{oom}\n");
        let ev = run(&log);
        assert!(ev.incidents[0].facts.str("model.name").is_none());
        // So is a command far below the failure.
        let log = format!("{oom}\n{}{command}\n", "step\n".repeat(40));
        let ev = run(&log);
        assert!(ev.incidents[0].facts.str("model.name").is_none());
    }

    #[test]
    fn wrapped_message_is_joined_and_numbers_read() {
        let log = "step 10 loss 1.0\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.69 GiB of which 1.00 GiB\n is free. Of the allocated memory 20.00 GiB is allocated by PyTorch, and 2.10 GiB is reserved by PyTorch but\n unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n";
        let ev = run(log);
        assert_eq!(ev.incidents.len(), 1);
        let f = &ev.incidents[0].facts;
        assert_eq!(f.num("oom.free_bytes"), Some(1073741824.0));
        assert_eq!(
            f.num("oom.reserved_unallocated_bytes").map(|v| v.round()),
            Some((2.1f64 * 1073741824.0).round())
        );
        assert_eq!(
            f.get("torch.expandable_segments"),
            None,
            "the hint is not configuration"
        );
    }

    #[test]
    fn context_and_phase_attach_to_the_incident() {
        let log = format!(
            "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n  Instantaneous batch size per device = 16\n{}\nTraceback (most recent call last):\n  File \"t.py\", line 3, in <module>\n    loss.backward()\n  File \"/x/torch/_tensor.py\", line 5, in backward\n{OOM}\n",
            (0..30)
                .map(|i| format!("step {i} loss 1.0"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        let ev = run(&log);
        let inc = &ev.incidents[0];
        assert_eq!(inc.facts.bool("torch.expandable_segments"), Some(true));
        assert_eq!(inc.facts.num("train.batch_size"), Some(16.0));
        assert_eq!(inc.phase, "backward");
        assert_eq!(inc.facts.num("phase.steps_completed"), Some(29.0));
        assert_eq!(
            inc.facts.get("train.batch_size").unwrap().sources[0].line,
            Some(2)
        );
    }

    /// `memory_summary()` pasted under the error is a table of dozens of lines: its rows
    /// still describe the failure; other accounting that far below does not.
    #[test]
    fn allocator_statistics_below_the_error_describe_it() {
        let rows = "| Allocated memory      |  20480 MiB |  21000 MiB |   900 GiB |   880 GiB |\n"
            .repeat(30);
        let log = format!(
            "{OOM}\n{rows}| Non-releasable memory |   2150 MiB |   2301 MiB |    880 GiB |    878 GiB |\n"
        );
        let inc = &run(&log).incidents[0];
        assert_eq!(
            inc.facts.num("torch.stats.inactive_split_bytes"),
            Some(2150.0 * 1048576.0)
        );
        let log = format!(
            "{OOM}\n{}| Non-releasable memory |   2150 MiB |\n",
            "x\n".repeat(90)
        );
        let inc = &run(&log).incidents[0];
        assert_eq!(inc.facts.num("torch.stats.inactive_split_bytes"), None);
    }

    /// A server that came up and was not seen to stop still holds its memory when the next
    /// one starts; one interrupted from the terminal does not.
    #[test]
    fn an_earlier_server_still_serving() {
        let first = "INFO 03-14 09:02:11 api_server.py:212] vLLM API server version 0.4.0.post1\nINFO 03-14 09:02:40 llm_engine.py:357] # GPU blocks: 2651, # CPU blocks: 512\nINFO:     Application startup complete.\n";
        let second = "INFO 03-14 09:05:37 api_server.py:212] vLLM API server version 0.4.0.post1\nINFO 03-14 09:06:03 llm_engine.py:357] # GPU blocks: 0, # CPU blocks: 512\nValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n";
        let flag = |log: String| {
            run(&log).incidents[0]
                .facts
                .bool("engine.earlier_instance_serving")
        };
        assert_eq!(flag(format!("{first}{second}")), Some(true));
        assert_eq!(flag(format!("{first}^C\n{second}")), None);
        assert_eq!(
            flag(format!("{first}INFO:     Shutting down\n{second}")),
            None
        );
        assert_eq!(flag(second.to_string()), None);
    }

    #[test]
    fn repeats_far_apart_fold_by_signature() {
        let filler = "noise\n".repeat(1000);
        let log = format!("{OOM}\n{filler}{OOM}\n{filler}{OOM}\n");
        let ev = run(&log);
        assert_eq!(ev.incidents.len(), 1);
        assert_eq!(ev.incidents[0].copies, 3);
        let other = OOM.replace("2.00 GiB. GPU", "4.00 GiB. GPU");
        let ev = run(&format!("{OOM}\n{filler}{other}\n"));
        assert_eq!(ev.incidents.len(), 2);
    }

    #[test]
    fn a_wrappers_failure_takes_the_phase_of_its_own_traceback() {
        // HAMi-core's refusal comes first, right under the loading bar; the error it
        // announces comes with a traceback through `generate`.
        let log = "Loading checkpoint shards: 100%|##########| 4/4 [00:06<00:00,  1.52s/it]
[HAMI-core ERROR (pid:7 thread=140360328144640 allocator.c:115)]: cuMemoryAllocate failed res=2
Traceback (most recent call last):
  File \"/workspace/infer.py\", line 41, in <module>
    out = model.generate(**batch)
  File \"/usr/lib/python3/site-packages/transformers/generation/utils.py\", line 2024, in generate
    result = self._sample(
RuntimeError: CUDA error: out of memory
";
        let ev = run(log);
        assert_eq!(ev.incidents.len(), 1);
        assert_eq!(ev.incidents[0].phase, crate::facts::phase::id::GENERATION);
        assert_eq!(ev.incidents[0].facts.str("vgpu.layer"), Some("hami-core"));
    }

    #[test]
    fn phase_comes_from_a_traceback_below_the_first_message() {
        // ComfyUI prints the message, then the traceback, then the exception again.
        let log = "got prompt
!!! Exception during processing !!! Allocation on device 
Traceback (most recent call last):
  File \"/srv/ComfyUI/comfy/model_management.py\", line 604, in load_models_gpu
    loaded_model.model_load(lowvram_model_memory)
  File \"/srv/ComfyUI/comfy/model_patcher.py\", line 829, in partially_load
    self.load(device_to)
torch.OutOfMemoryError: Allocation on device 

Got an OOM, unloading all loaded models.
";
        let ev = run(log);
        assert_eq!(ev.incidents.len(), 1);
        assert_eq!(ev.incidents[0].phase, crate::facts::phase::id::MODEL_LOAD);
        assert_eq!(ev.incidents[0].copies, 2);
    }

    #[test]
    fn a_model_that_could_not_be_loaded_names_the_phase_on_its_own_line() {
        let ev = run(
            "** model sd-2.1 could not be loaded: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 4.00 GiB total capacity; 3.41 GiB already allocated; 0 bytes free; 3.46 GiB reserved in total by PyTorch)\n",
        );
        assert_eq!(ev.incidents.len(), 1);
        assert_eq!(ev.incidents[0].phase, "model-load");
        // The same message with no word of loading before it decides nothing.
        let ev = run(
            "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 4.00 GiB total capacity; 3.41 GiB already allocated; 0 bytes free; 3.46 GiB reserved in total by PyTorch)\n",
        );
        assert_eq!(ev.incidents[0].phase, crate::facts::phase::id::UNKNOWN);
    }

    #[test]
    fn packed_traceback_line() {
        let log = format!(
            "{{\"log\": \"Traceback (most recent call last):\\n  File \\\"x.py\\\", line 1, in <module>\\n  File \\\"/t/modeling_utils.py\\\", line 9, in from_pretrained\\n{OOM}\\n\"}}\n"
        );
        let ev = run(&log);
        assert_eq!(ev.incidents.len(), 1);
        assert_eq!(ev.incidents[0].phase, "model-load");
    }

    /// One GPU's size in an `nvidia-smi` table pasted long after the error is the failed
    /// device's; the one size of several GPUs is not taken back to the failure.
    #[test]
    fn card_size_pasted_after_the_failure() {
        let table = |rows: &str| {
            format!(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n{}| GPU  Name        Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |\n| Fan  Temp  Perf  Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |\n|===============================+======================+======================|\n{rows}+-------------------------------+----------------------+----------------------+\n",
                "step\n".repeat(40)
            )
        };
        let row = |i: u32| {
            format!(
                "|   {i}  NVIDIA A10G      On   | 00000000:00:1E.0 Off |                    0 |\n|  0%   31C    P0    58W / 300W |  21012MiB / 23028MiB |      0%      Default |\n"
            )
        };
        let total = |log: String| run(&log).incidents[0].facts.num("smi.query_total_bytes");
        assert_eq!(total(table(&row(0))), Some(23028.0 * 1048576.0));
        assert_eq!(total(table(&(row(0) + &row(1)))), None);
    }

    /// Readings level for most of the run that then rise at every reading up to the failure:
    /// the climb's length and where it began are kept, and a fall ends it.
    #[test]
    fn memory_climbing_to_the_failure() {
        let mut log = String::new();
        for b in 1..=20 {
            log.push_str(&format!(
                "train batch {b} allocated 102.7 MB cached 872.0 MB\n"
            ));
        }
        for (i, b) in (21..=30).enumerate() {
            log.push_str(&format!(
                "valid batch {b} allocated {} MB cached 9000.0 MB\n",
                700 + 600 * i
            ));
        }
        log.push_str(OOM);
        let ev = run(&log);
        let f = &ev.incidents[0].facts;
        assert_eq!(f.num("log.memory_climb_readings"), Some(10.0));
        assert_eq!(
            f.num("log.memory_climb_from_bytes"),
            Some(102.7 * 1048576.0)
        );
        let fell = log.replacen(
            "valid batch 30 allocated 6100 MB",
            "valid batch 30 allocated 600 MB",
            1,
        );
        let ev = run(&fell);
        assert_eq!(
            ev.incidents[0].facts.num("log.memory_climb_readings"),
            Some(0.0)
        );
    }
}
