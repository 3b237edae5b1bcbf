//! Fusion: what several inputs say about the same failure, joined into one incident.
//!
//! Each ingest stage yields incidents and facts on its own: a log's failures, a snapshot's
//! OOM, a series' moment where the device filled, a model file's geometry. [`fuse`] lines
//! them up (by device, then by time) so that `crash.log snapshot.pickle gpu.csv` is one
//! incident drawing on all three, makes incidents of failures no log shows, and then lets
//! the [`super::timeline`] decide each incident's phase once, from everything fused.

use crate::facts::evidence::Facts;
use crate::incident::Incident;
use crate::ingest::log::grouping::MEMORY_GROWTH;
use crate::ingest::series::{OomMark, SeriesSet};
use crate::ingest::snapshot::SnapshotAnalysis;

/// What the inputs yielded, before fusion.
#[derive(Default)]
pub struct Ingested {
    /// Incidents from logs, in input order.
    pub incidents: Vec<Incident>,
    pub snapshots: Vec<SnapshotAnalysis>,
    pub series: Vec<SeriesSet>,
    /// Facts that hold for every incident of the run (`--model`, a model file met in a
    /// directory): a log's own facts win over them, as it shows what actually ran.
    pub shared: Facts,
}

/// The run's incidents after fusion, and what the series report needs.
pub struct Fused {
    pub incidents: Vec<Incident>,
    /// Where each series failure (or fused incident) falls on the series' charts.
    pub ooms: Vec<OomMark>,
    /// The series' charts, marked with those failures.
    pub series_plots: Vec<crate::render::plot::SeriesPlot>,
}

/// Joins every input's evidence into incidents and decides each one's phase.
pub fn fuse(ingested: Ingested) -> Fused {
    let Ingested {
        mut incidents,
        snapshots,
        series,
        shared,
    } = ingested;
    fuse_snapshots(&mut incidents, &snapshots);
    let mut ooms = Vec::new();
    let mut series_plots = Vec::new();
    if !series.is_empty() {
        let mut set = SeriesSet::default();
        for s in series {
            set.merge(s);
        }
        let analysis = crate::ingest::series::analyze(&set);
        let snapshot_inputs: Vec<String> = snapshots.iter().map(|s| s.input.clone()).collect();
        ooms = fuse_series(&mut incidents, &analysis, &snapshot_inputs);
        series_plots = analysis.plots(&ooms);
    }
    if !shared.is_empty() {
        for inc in &mut incidents {
            inc.facts.merge(&shared, false);
        }
    }
    for inc in &mut incidents {
        super::timeline::settle_phase(inc);
    }
    Fused {
        incidents,
        ooms,
        series_plots,
    }
}

/// Joins snapshots to the log incidents they describe, or makes incidents of their own.
///
/// A snapshot describes a log incident on the same device (or the only device-OOM incident
/// when the log does not name a device): its facts join that incident, the log's facts
/// winning where both speak, so `crash.log snapshot.pickle` is one incident drawing on both.
/// A snapshot whose OOM no log shows is an incident by itself.
fn fuse_snapshots(
    incidents: &mut Vec<crate::incident::Incident>,
    snapshots: &[crate::ingest::snapshot::SnapshotAnalysis],
) {
    use crate::ingest::log::engines::Domain;
    for snap in snapshots {
        let device = snap.oom_device().or_else(|| snap.focus_device());
        // A snapshot without an OOM can still describe a log's growth without a failure.
        let joins = |kind: &str| {
            kind == "device-oom" || (kind == MEMORY_GROWTH && snap.oom_device().is_none())
        };
        let candidates: Vec<usize> = incidents
            .iter()
            .enumerate()
            .filter(|(_, i)| i.domain == Domain::Device && joins(i.kind))
            .filter(|(_, i)| match (device, i.device) {
                (Some(d), Some(id)) => d == id || i.devices.contains(&d),
                _ => true,
            })
            .map(|(k, _)| k)
            .collect();
        let facts = match device {
            Some(d) => snap.facts_for_device(d),
            None => snap.facts(),
        };
        match candidates.first() {
            Some(&k) if candidates.len() == 1 || device.is_some() => {
                let inc = &mut incidents[k];
                inc.facts.merge(&facts, false);
                if inc.device.is_none() {
                    inc.device = device;
                }
            }
            _ if snap.oom_device().is_some() => incidents.push(snapshot_incident(
                snap,
                facts,
                device,
                "device-oom",
                ("oom.requested_bytes", "oom"),
            )),
            // No OOM, but live memory rising step after step at one call site (what
            // `oomdoctor grow.pickle` is asked after a run was stopped): the growth is the
            // incident, as for a log that shows it.
            _ if snapshot_shows_growth(&facts) => incidents.push(snapshot_incident(
                snap,
                facts,
                device,
                MEMORY_GROWTH,
                ("snapshot.leak_growth_bytes", "trace"),
            )),
            _ => {}
        }
    }
}

/// An incident of a snapshot's own, of `kind`: first seen where the fact `anchor.0` was read,
/// else at the snapshot's `anchor.1` ("oom", "trace").
fn snapshot_incident(
    snap: &SnapshotAnalysis,
    facts: Facts,
    device: Option<u32>,
    kind: &'static str,
    anchor: (&str, &str),
) -> Incident {
    use crate::facts::evidence::{InputName, Provenance};
    use crate::ingest::log::engines::{Domain, id};
    let input: InputName = std::sync::Arc::from(snap.input.as_str());
    let first = facts
        .get(anchor.0)
        .and_then(|f| f.sources.first().cloned())
        .unwrap_or_else(|| Provenance::at(input.clone(), anchor.1));
    Incident::from_evidence(
        input,
        kind,
        id::PYTORCH,
        Domain::Device,
        device,
        first,
        facts,
    )
}

/// Whether a snapshot's trace shows live memory climbing step after step: three steps or
/// more, and at least 512 MiB and a tenth of the peak gained in all.
fn snapshot_shows_growth(facts: &Facts) -> bool {
    let (Some(steps), Some(slope), Some(growth)) = (
        facts.num("snapshot.leak_steps"),
        facts.num("snapshot.leak_slope_bytes_per_step"),
        facts.num("snapshot.leak_growth_bytes"),
    ) else {
        return false;
    };
    let peak = facts.num("snapshot.peak_live_bytes").unwrap_or(0.0);
    steps >= 3.0 && slope > 0.0 && growth >= 512.0 * 1048576.0 && growth >= 0.1 * peak
}

/// How far a log's failure time may be from a series' crash (between its last high and
/// first low sample) and still be the same failure.
const SERIES_MATCH_TOLERANCE_S: i64 = 60;

/// A log timestamp as a time the series can use. Yearless stamps (vLLM's `08-22 20:52:36`,
/// glog, syslog) take the year of the series; a span across New Year tries both years.
fn log_time(
    text: &str,
    span: Option<(chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)>,
) -> Option<(chrono::DateTime<chrono::Utc>, bool)> {
    use chrono::Datelike;
    let Some((start, end)) = span else {
        return crate::ingest::series::parse_log_time(text, None);
    };
    let day = chrono::Duration::days(1);
    let mut first = None;
    for year in [start.year(), end.year()] {
        if let Some((t, naive)) = crate::ingest::series::parse_log_time(text, Some(year)) {
            if t >= start - day && t <= end + day {
                return Some((t, naive));
            }
            first.get_or_insert((t, naive));
        }
    }
    first
}

/// The engine a series names: the failing process's name (`VLLM::EngineCore`,
/// `/app/llama-server`), else `unknown`. Engine metrics beside a device series do not say
/// which process filled the device, so they do not name it.
fn series_engine(facts: &Facts) -> &'static str {
    facts
        .str("series.own_process_name")
        .and_then(crate::facts::engine::mentioned_in)
        .unwrap_or(crate::facts::engine::id::UNKNOWN)
}

/// Facts that stay true when a series does not cover the failure's moment: which device,
/// its size, and that the series could not be lined up.
const SERIES_UNALIGNED_FACTS: &[&str] = &[
    "series.device",
    "series.device_uuid",
    "series.total_bytes",
    "series.time_aligned",
    "series.failure_gap_seconds",
    "series.failure_time",
    "series.skipped_rows",
];

/// Joins memory series to the incidents they describe, or makes incidents of their own.
///
/// Each device incident (from a log, or from a snapshot on a device the series has) is lined
/// up by device and time: the timestamp of its failure line (or the nearest one before it)
/// cuts the series there, and the `series.*` facts of that moment join the incident's, the
/// log's facts winning where both speak. A series failure (the device filled, then the
/// memory was released) at that time is the same incident, never a second one. A log
/// without timestamps is lined up by device only (`series.time_aligned = false`); a log
/// time outside the series keeps only the facts that do not depend on the moment. Series
/// failures no other input shows become incidents of their own, except a drop from a
/// device that was full by design (a preallocating engine stopping): that is a restart.
fn fuse_series(
    incidents: &mut Vec<crate::incident::Incident>,
    analysis: &crate::ingest::series::SeriesAnalysis,
    snapshot_inputs: &[String],
) -> Vec<crate::ingest::series::OomMark> {
    use crate::facts::engine::Domain;
    use crate::facts::evidence::Provenance;
    use crate::ingest::series::Clock;
    let span = analysis.wall_span();
    let wall = span.is_some()
        || analysis.engines.iter().any(|e| e.clock == Clock::Wall)
        || analysis
            .orphan_processes
            .iter()
            .any(|p| p.series.clock == Clock::Wall);
    let series_devices = analysis.devices();
    let failures = &analysis.failures;
    let mut used = vec![false; failures.len()];
    let mut marks = Vec::new();
    let tolerance = chrono::Duration::seconds(SERIES_MATCH_TOLERANCE_S);
    for inc in incidents.iter_mut() {
        if inc.domain != Domain::Device {
            continue;
        }
        // A snapshot's incident takes series facts only from its own device.
        if snapshot_inputs.iter().any(|s| **s == *inc.input)
            && !inc.device.is_some_and(|d| series_devices.contains(&d))
        {
            continue;
        }
        let (time, naive) = match inc.time_hint.as_deref().filter(|_| wall) {
            Some(t) => match log_time(t, span) {
                Some((t, naive)) => (Some(t), naive),
                None => (None, false),
            },
            None => (None, false),
        };
        // The series failure this incident is: same time, on one of its devices (or on
        // any device when the series has none of them: CUDA_VISIBLE_DEVICES renumbers).
        let on_device = |d: u32| {
            inc.devices.is_empty()
                || inc.devices.contains(&d)
                || !series_devices.iter().any(|x| inc.devices.contains(x))
        };
        let same: Vec<usize> = match time {
            Some(t) => failures
                .iter()
                .enumerate()
                .filter(|(k, f)| !used[*k] && on_device(f.device) && f.matches(t, tolerance))
                .map(|(k, _)| k)
                .collect(),
            None => Vec::new(),
        };
        let device = same
            .first()
            .map(|&k| failures[k].device)
            .or(inc.device)
            .or_else(|| inc.devices.iter().next().copied());
        let mut facts = analysis.facts_for_process(device, time, inc.pid);
        if !facts
            .iter()
            .any(|(name, _)| name != "series.skipped_rows" && name != "series.failure_time")
        {
            continue;
        }
        let aligned = facts.bool("series.time_aligned");
        if time.is_some() && aligned == Some(false) {
            // The series does not cover the failure: what it shows happened at another time.
            let names: Vec<String> = facts.iter().map(|(n, _)| n.to_string()).collect();
            for n in names {
                if !SERIES_UNALIGNED_FACTS.contains(&n.as_str()) {
                    facts.remove(&n);
                }
            }
        }
        facts.set_if_absent("series.time_aligned", time.is_some(), None);
        if let Some(t) = time {
            // The failure time came from the log line: say so.
            let at = Provenance {
                span: None,
                ..inc.first.clone()
            };
            facts.set(
                "series.failure_time",
                crate::ingest::series::format_wall(t.timestamp_millis(), naive),
                Some(at),
            );
        }
        // Without a time, the device's own failure (if any) is the one described.
        let mut same = same;
        if time.is_none() && facts.bool("series.crash_drop") == Some(true) {
            let dev = facts.num("series.device").map(|d| d as u32);
            let ft = facts.str("series.failure_time");
            same.extend(
                failures
                    .iter()
                    .enumerate()
                    .filter(|(k, f)| {
                        !used[*k]
                            && Some(f.device) == dev
                            && f.facts.str("series.failure_time") == ft
                    })
                    .map(|(k, _)| k),
            );
        }
        for &k in &same {
            used[k] = true;
        }
        // Short: the HTML chart prints it above the line.
        let file = std::path::Path::new(&*inc.input).file_name().map_or_else(
            || inc.input.to_string(),
            |f| f.to_string_lossy().into_owned(),
        );
        let label = match inc.first.line {
            Some(l) => format!("OOM ({file}:{l})"),
            None => format!("OOM ({file})"),
        };
        if let (Some(t), Some(true)) = (time, aligned) {
            if let Some(d) = facts.num("series.device").map(|d| d as u32) {
                if let Some(dev) = analysis.devices.iter().find(|x| x.index == d) {
                    marks.push(crate::ingest::series::OomMark {
                        device: d,
                        input: dev.input.clone(),
                        at: t.timestamp_millis(),
                        label,
                    });
                }
            }
        } else if let Some(&k) = same.first() {
            let f = &failures[k];
            marks.push(crate::ingest::series::OomMark {
                device: f.device,
                input: f.input.clone(),
                at: f.at,
                label,
            });
        }
        inc.facts.merge(&facts, false);
        if inc.device.is_none() {
            inc.device = facts.num("series.device").map(|d| d as u32);
            inc.devices.extend(inc.device);
        }
    }
    for (k, f) in failures.iter().enumerate() {
        if used[k] {
            continue;
        }
        // A preallocating engine's device drops when the engine stops; that is not an OOM
        // unless the failure came in an excursion above the preallocated level.
        if f.facts.bool("series.flat_high") == Some(true)
            && f.facts.bool("series.spike") != Some(true)
        {
            continue;
        }
        let facts = f.facts.clone();
        let first = [
            "series.used_at_failure_bytes",
            "series.device_filled",
            "series.crash_drop",
        ]
        .iter()
        .find_map(|n| facts.get(n).and_then(|x| x.sources.first().cloned()))
        // The incident is the whole row, not the used-memory cell that fact quotes.
        .map(|p| Provenance { span: None, ..p })
        .unwrap_or_else(|| {
            Provenance::at(
                f.input.clone(),
                format!(
                    "gpu {} at {}",
                    f.device,
                    f.time_text.clone().unwrap_or_else(|| f.clock.format(f.at))
                ),
            )
        });
        let engine = series_engine(&facts);
        let mut inc = crate::incident::Incident::from_evidence(
            f.input.clone(),
            "device-oom",
            engine,
            Domain::Device,
            Some(f.device),
            first,
            facts,
        );
        inc.timestamp = facts_time(f);
        marks.push(crate::ingest::series::OomMark {
            device: f.device,
            input: f.input.clone(),
            at: f.at,
            label: "OOM".to_string(),
        });
        incidents.push(inc);
    }
    marks
}

/// The time of a series failure as the report prints incident times.
fn facts_time(f: &crate::ingest::series::SeriesFailure) -> Option<String> {
    f.facts.str("series.failure_time").map(str::to_string)
}
