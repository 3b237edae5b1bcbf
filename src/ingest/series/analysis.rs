//! Reading a cause out of memory series: runs, load ramps, baselines, steady growth, spikes,
//! churn, full-by-design devices, neighbours, KV pressure, and the drop that marks a crash.
//!
//! Each device's series is first cut into **runs** at crash drops (used memory falling
//! steeply and staying down: the process died and the driver released its memory). Each run
//! is summarised on at most [`MAX_BUCKETS`] buckets (median, floor = 10th percentile,
//! max), so ten million samples cost one pass plus work on a thousand points, and noise,
//! single-sample dips and short spikes do not move the levels:
//!
//! * **load ramp / baseline**: the floor's first plateau after it rose from its starting
//!   level (or the start, for a series that begins loaded);
//! * **steady growth**: Theil–Sen slope of the floor after load; steady when the rise is at
//!   least 5% of the device (and 512 MiB), the line explains ≥ 60% of the variance, the run
//!   lasts 5 minutes and every quarter of it sits higher than the one before (a single
//!   step up is not a leak); projected time to full from the fitted line;
//! * **spikes**: a bucket's max above the rolling median level by max(5% of the device,
//!   512 MiB, 6σ of noise), at most 1/20 of the run wide (3..25 buckets; wider is a change
//!   of level), and rare (if over a quarter of buckets qualify it is churn, not spikes);
//!   the run's *end* is checked separately: an excursion of up to a quarter of the run,
//!   entered from below, whose top stands that far above the maxima before it is the
//!   spike the failure came in (`series.spike`);
//! * **churn**: ≥ 8 swings between the 10th and 90th percentile, 5% of the device apart;
//! * **flat high**: from load on, the median ≥ 80% of the device and the floor within 4%:
//!   full by design (vLLM's `gpu_memory_utilization`), not a leak and not itself a problem;
//! * **crash drop**: used falls to half or less of the last three samples' high, by at least
//!   10% of the device (and 512 MiB), and stays below the midpoint for 3 samples and 20 s
//!   (or until the series ends); **filled** when the last minute before it reached ≥ 95%.
//!
//! A run that ends in a drop right after the device filled is a failure the series shows on
//! its own ([`SeriesFailure`]).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::model::{Clock, DeviceSeries, EngineSeries, InputSummary, ProcessSeries, SeriesSet};
use super::stats::{
    mad_sigma, median, median_of, quantile, r2, rolling_median, rolling_median_centred, theil_sen,
};
use crate::facts::evidence::{Facts, InputName};

/// Buckets a run is summarised on.
pub(crate) const MAX_BUCKETS: usize = 1024;
/// Spike patterns listed per run (the largest; the facts count them all).
const MAX_SPIKE_PATTERNS: usize = 5;
/// Points per device in the serialised (plotting) series.
const MAX_POINTS: usize = 1000;
const MIB: f64 = 1024.0 * 1024.0;

/// Fraction of the device that counts as full.
pub(crate) const FULL_RATIO: f64 = 0.95;
/// Fraction of the device a preallocating engine keeps from load on.
pub(crate) const FLAT_HIGH_RATIO: f64 = 0.80;

/// Thresholds scaled to a device: `scale` is its total (or the run's peak when the total
/// is unknown).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scale {
    pub scale: f64,
    pub total: Option<f64>,
}

impl Scale {
    pub(crate) fn new(total: Option<u64>, peak: f64) -> Scale {
        let total = total.map(|t| t as f64).filter(|&t| t > 0.0);
        Scale {
            scale: total.unwrap_or(peak).max(MIB),
            total,
        }
    }
    /// A change of level worth talking about.
    pub(crate) fn significant(&self) -> f64 {
        (0.03 * self.scale).max(256.0 * MIB)
    }
}

/// One bucket of a run.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// First sample index (absolute in the track) and one past the last.
    start: usize,
    end: usize,
    /// Time of the middle sample.
    t: i64,
    med: f64,
    floor: f64,
    max: f64,
    argmax: usize,
}

fn buckets(used: &[u64], t: &[i64], a: usize, b: usize) -> Vec<Bucket> {
    let n = b - a;
    let nb = n.min(MAX_BUCKETS);
    let mut out = Vec::with_capacity(nb);
    let mut scratch: Vec<f64> = Vec::new();
    for k in 0..nb {
        let s = a + k * n / nb;
        let e = a + (k + 1) * n / nb;
        scratch.clear();
        scratch.extend(used[s..e].iter().map(|&v| v as f64));
        let (mut max, mut argmax) = (f64::MIN, s);
        for (i, &v) in scratch.iter().enumerate() {
            if v > max {
                max = v;
                argmax = s + i;
            }
        }
        let med = median(&mut scratch).unwrap_or(max);
        // The floor from at least 9 samples (the bucket and its neighbours when buckets
        // are small), so one low sample is not a floor and a sawtooth's trough is.
        let floor = if e - s >= 9 {
            quantile(&mut scratch, 0.10).unwrap_or(max)
        } else {
            let (fs, fe) = (s.saturating_sub(4).max(a), (e + 4).min(b));
            scratch.clear();
            scratch.extend(used[fs..fe].iter().map(|&v| v as f64));
            quantile(&mut scratch, 0.10).unwrap_or(max)
        };
        out.push(Bucket {
            start: s,
            end: e,
            t: t[s + (e - s) / 2],
            med,
            floor,
            max,
            argmax,
        });
    }
    out
}

/// A fitted trend of the floor.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Growth {
    /// Bytes per second (per sample for sequence clocks).
    pub slope: f64,
    pub r2: f64,
    /// Rise of the fitted line over the fit.
    pub rise_bytes: f64,
    pub start_idx: usize,
    pub end_idx: usize,
    pub steady: bool,
    /// Seconds from the end of the window until the line reaches the total.
    pub time_to_full_seconds: Option<f64>,
}

/// A short excursion.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Spike {
    pub start_idx: usize,
    pub peak_idx: usize,
    pub end_idx: usize,
    pub peak_bytes: u64,
    /// Height above the level around it.
    pub height_bytes: f64,
    /// The excursion runs into the end of the window (the failure).
    pub at_end: bool,
}

/// The analysis of a window of one device's samples (a run, or a run cut at a failure).
#[derive(Clone, Debug, Serialize)]
pub struct Window {
    pub start_idx: usize,
    /// One past the last sample.
    pub end_idx: usize,
    pub duration_ms: i64,
    /// Median time between samples (ms; 1 for sequence clocks).
    pub interval_ms: i64,
    /// First sample of the baseline after the load ramp; `None` when the window starts loaded.
    pub ramp_end_idx: Option<usize>,
    pub baseline_bytes: f64,
    pub baseline_idx: usize,
    pub peak_bytes: u64,
    pub peak_idx: usize,
    pub growth: Option<Growth>,
    pub spikes: Vec<Spike>,
    /// Plateaus (start, end, level), longest first; empty when growth is steady.
    pub plateaus: Vec<(usize, usize, f64)>,
    /// (level, ratio of total) when full by design.
    pub flat_high: Option<(f64, f64)>,
    /// (low, high, cycles) when memory churns.
    pub churn: Option<(f64, f64, usize)>,
    /// ≥ 95% of the total in the last minute (or five samples) of the window.
    pub filled: bool,
    pub noise_bytes: f64,
}

/// Analyses samples `a..b` of a device track.
pub(crate) fn analyze_window(dev: &DeviceSeries, a: usize, b: usize) -> Option<Window> {
    let used = dev.used.values();
    let t = dev.used.times();
    if a >= b || b > used.len() {
        return None;
    }
    let timed = dev.clock.is_timed();
    let (mut peak, mut peak_idx) = (0u64, a);
    for (i, &u) in used[a..b].iter().enumerate() {
        if u > peak || i == 0 {
            peak = u;
            peak_idx = a + i;
        }
    }
    let sc = Scale::new(dev.total_bytes, peak as f64);
    let bk = buckets(used, t, a, b);
    let nb = bk.len();
    let floors: Vec<f64> = bk.iter().map(|x| x.floor).collect();
    let sf = rolling_median_centred(&floors, 2);
    let meds: Vec<f64> = bk.iter().map(|x| x.med).collect();
    let resid: Vec<f64> = meds
        .iter()
        .zip(rolling_median(&meds, 4))
        .map(|(m, r)| m - r)
        .collect();
    let sigma = mad_sigma(&resid);
    let band = (0.015 * sc.scale).max(3.0 * sigma).max(64.0 * MIB);
    let min_len = (nb / 25).max(3);
    let plateaus = plateaus(&sf, band, min_len);

    // Load ramp and baseline.
    let m = median_of(&sf).unwrap_or(0.0);
    let sf_min = sf.iter().cloned().fold(f64::MAX, f64::min);
    let sf0 = sf.first().copied().unwrap_or(0.0);
    let loaded = sf0 >= 0.5 * m || m < sc.significant();
    let (ramp_bucket, baseline) = if loaded {
        match plateaus.iter().find(|p| p.0 <= nb / 10) {
            Some(p) => (None, head_level(&sf, p)),
            None => (
                None,
                median_of(&sf[..(nb / 20).max(3).min(nb)]).unwrap_or(sf0),
            ),
        }
    } else {
        let need = sf_min + sc.significant().max(0.3 * (m - sf_min));
        match plateaus.iter().filter(|p| p.2 >= need).min_by_key(|p| p.0) {
            Some(p) => (Some(p.0), head_level(&sf, p)),
            None => {
                let k = sf
                    .iter()
                    .position(|&v| v >= sf_min + 0.8 * (m - sf_min))
                    .unwrap_or(0);
                (Some(k), sf.get(k).copied().unwrap_or(sf0))
            }
        }
    };
    let rb = ramp_bucket.unwrap_or(0);
    // The floor lags a ramp by a few samples; the ramp ends at the first sample already
    // within the band of the baseline.
    let ramp_end_idx = ramp_bucket.and_then(|k| bk.get(k)).map(|x| {
        let near = |i: usize| (used[i] as f64 - baseline).abs() <= band;
        let mut i = x.start;
        while i > a && near(i - 1) {
            i -= 1;
        }
        while i + 1 < x.end && !near(i) {
            i += 1;
        }
        i
    });
    let baseline_idx = ramp_end_idx.unwrap_or(a);

    // Growth of the floor after load.
    let x0 = bk.first().map_or(0, |x| x.t);
    let xs: Vec<f64> = bk[rb..]
        .iter()
        .map(|x| {
            if timed {
                (x.t - x0) as f64 / 1000.0
            } else {
                (x.start - a) as f64
            }
        })
        .collect();
    let ys: Vec<f64> = sf[rb..].to_vec();
    let growth = fit_growth(&xs, &ys, &bk[rb..], sc, timed, t[b - 1], x0);
    let steady = growth.is_some_and(|g| g.steady);

    // Spikes: short excursions of bucket maxima above the rolling level, and the
    // excursion the window ends in (the failure came during it).
    let thr = (0.05 * sc.scale).max(512.0 * MIB).max(6.0 * sigma);
    let mut spikes = middle_spikes(&bk, &meds, thr, used);
    if let Some(s) = tail_spike(&bk, &meds, thr, used) {
        spikes.retain(|x| x.end_idx < s.start_idx);
        spikes.push(s);
    }

    // Churn: repeated swings between a stable floor and a stable top.
    let post = ramp_end_idx.unwrap_or(a);
    let churn = churn(&used[post..b], sc).filter(|_| !steady);

    // Full by design: high and flat from load on.
    let flat_high = sc.total.and_then(|total| {
        let post_meds: Vec<f64> = meds[rb..].to_vec();
        let post_sf: Vec<f64> = sf[rb..].to_vec();
        let med = median_of(&post_meds)?;
        let spread = quantile(&mut post_sf.clone(), 0.95)? - quantile(&mut post_sf.clone(), 0.05)?;
        let swing = quantile(&mut post_meds.clone(), 0.9)? - quantile(&mut post_meds.clone(), 0.1)?;
        let duration = (t[b - 1] - t[a]) as f64;
        let ramp_time = (bk[rb].t - t[a]) as f64;
        let early = ramp_bucket.is_none()
            || ramp_time <= (0.15 * duration).max(if timed { 900_000.0 } else { 0.0 });
        (med >= FLAT_HIGH_RATIO * total
            && spread <= 0.04 * total
            && swing <= 0.05 * total
            && !steady
            && early)
            .then_some((med, med / total))
    });

    let filled = sc.total.is_some_and(|total| {
        let from = last_stretch(t, a, b - 1, timed);
        used[from..b]
            .iter()
            .any(|&u| u as f64 >= FULL_RATIO * total)
    });

    let mut pl: Vec<(usize, usize, f64)> = if steady {
        Vec::new()
    } else {
        let plateaus = merge_levels(&plateaus, sc.significant());
        plateaus
            .iter()
            .map(|p| (bk[p.0].start, bk[p.1].end - 1, p.2))
            .collect()
    };
    pl.sort_by_key(|p| std::cmp::Reverse(p.1 - p.0));
    pl.truncate(8);

    Some(Window {
        start_idx: a,
        end_idx: b,
        duration_ms: t[b - 1] - t[a],
        interval_ms: interval(&t[a..b]),
        ramp_end_idx,
        baseline_bytes: baseline,
        baseline_idx,
        peak_bytes: peak,
        peak_idx,
        growth,
        spikes,
        plateaus: pl,
        flat_high,
        churn,
        filled,
        noise_bytes: sigma,
    })
}

/// Widest excursion (in buckets) that is still a spike rather than a change of level.
fn spike_width(nb: usize) -> usize {
    (nb / 20).clamp(3, 25)
}

/// Excursions inside the window: bucket maxima at least `thr` above the rolling median
/// level (continuing while above `thr/2`), at most [`spike_width`] buckets wide, and rare:
/// when over a quarter of the buckets qualify, memory churns and nothing is a spike.
fn middle_spikes(bk: &[Bucket], meds: &[f64], thr: f64, used: &[u64]) -> Vec<Spike> {
    let nb = bk.len();
    let w = spike_width(nb);
    let level = rolling_median(meds, 3 * w);
    let excess: Vec<f64> = bk.iter().zip(&level).map(|(x, l)| x.max - l).collect();
    if excess.iter().filter(|&&e| e >= thr).count() * 4 > nb {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut k = 0;
    while k < nb {
        if excess[k] < thr {
            k += 1;
            continue;
        }
        let s = k;
        while k + 1 < nb && excess[k + 1] >= thr / 2.0 {
            k += 1;
        }
        let e = k;
        k += 1;
        // Wider is a change of level; touching the end is the tail's business.
        if e - s + 1 > w || e == nb - 1 {
            continue;
        }
        out.push(make_spike(bk, s, e, level[s], thr, used, false));
    }
    out
}

/// The excursion the window ends in, if any (the failure came during it).
///
/// The shortest final stretch whose maximum stands `thr` above the 90th percentile of the
/// maxima just before it, entered from below, is extended backwards while the bucket
/// before it is still above the level before it (a ramp into the excursion). It must be
/// at most a quarter of the window and mostly high (a climb that merely ends on a bump is
/// growth, not an excursion). Judged against maxima, so the top of a sawtooth is not an
/// excursion; the height is measured from the median level before it.
fn tail_spike(bk: &[Bucket], meds: &[f64], thr: f64, used: &[u64]) -> Option<Spike> {
    let nb = bk.len();
    let w = spike_width(nb);
    let max_len = w.max(nb / 4).min(nb.saturating_sub(3));
    let ref_of = |s: usize| (2 * w).min(s);
    let mut start = None;
    for len in 1..=max_len {
        let s = nb - len;
        let ref_len = ref_of(s);
        if ref_len < 3 {
            break;
        }
        let ref_max = quantile(
            &mut bk[s - ref_len..s].iter().map(|x| x.max).collect::<Vec<_>>(),
            0.9,
        )?;
        let tail_max = bk[s..].iter().map(|x| x.max).fold(f64::MIN, f64::max);
        let entered = bk[s].max >= ref_max + thr / 2.0 && bk[s - 1].max < ref_max + thr / 2.0;
        if tail_max >= ref_max + thr && entered {
            start = Some(s);
            break;
        }
    }
    let mut s = start?;
    let mut level = median_of(&meds[s - ref_of(s)..s])?;
    while nb - s < max_len && ref_of(s - 1) >= 3 && bk[s - 1].max >= level + thr / 2.0 {
        s -= 1;
        level = median_of(&meds[s - ref_of(s)..s])?;
    }
    let tail = &bk[s..];
    let high = tail.iter().filter(|x| x.max >= level + thr / 2.0).count();
    let peak = tail.iter().map(|x| x.max).fold(f64::MIN, f64::max);
    (high * 4 >= tail.len() * 3 && peak >= level + thr)
        .then(|| make_spike(bk, s, nb - 1, level, thr, used, true))
}

fn make_spike(
    bk: &[Bucket],
    s: usize,
    e: usize,
    level: f64,
    thr: f64,
    used: &[u64],
    at_end: bool,
) -> Spike {
    let pk = (s..=e)
        .map(|j| bk[j].argmax)
        .max_by_key(|&i| used[i])
        .unwrap_or(bk[s].start);
    let half = level + thr / 2.0;
    let first = (bk[s].start..bk[e].end)
        .find(|&i| used[i] as f64 >= half)
        .unwrap_or(pk);
    let last = (bk[s].start..bk[e].end)
        .rev()
        .find(|&i| used[i] as f64 >= half)
        .unwrap_or(pk);
    Spike {
        start_idx: first,
        peak_idx: pk,
        end_idx: last,
        peak_bytes: used[pk],
        height_bytes: used[pk] as f64 - level,
        at_end,
    }
}

/// The first sample of the last minute (at least five samples) before `last`.
pub(crate) fn last_stretch(t: &[i64], a: usize, last: usize, timed: bool) -> usize {
    let by_count = last.saturating_sub(4).max(a);
    if !timed {
        return by_count;
    }
    let by_time = t[a..=last].partition_point(|&x| x < t[last] - 60_000) + a;
    by_count.min(by_time)
}

/// Median time between samples.
pub(crate) fn interval(t: &[i64]) -> i64 {
    if t.len() < 2 {
        return 0;
    }
    let step = (t.len() / 10_000).max(1);
    let mut d: Vec<f64> = t
        .windows(2)
        .step_by(step)
        .map(|w| (w[1] - w[0]) as f64)
        .collect();
    median(&mut d).unwrap_or(0.0) as i64
}

/// Plateaus whose levels differ by less than `sig` merged into one (a wandering but
/// level series is one plateau, not eight).
fn merge_levels(p: &[(usize, usize, f64)], sig: f64) -> Vec<(usize, usize, f64)> {
    let mut out: Vec<(usize, usize, f64)> = Vec::new();
    for &(s, e, level) in p {
        match out.last_mut() {
            Some(last) if (last.2 - level).abs() < sig => {
                let (n1, n2) = ((last.1 - last.0 + 1) as f64, (e - s + 1) as f64);
                *last = (last.0, e, (last.2 * n1 + level * n2) / (n1 + n2));
            }
            _ => out.push((s, e, level)),
        }
    }
    out
}

/// The level at the start of a plateau (its first quarter): right after a load ramp, even
/// when a slow climb follows and lifts the plateau's median.
fn head_level(sf: &[f64], p: &(usize, usize, f64)) -> f64 {
    let len = p.1 - p.0 + 1;
    let head = (len / 4).max(3).min(len);
    median_of(&sf[p.0..p.0 + head]).unwrap_or(p.2)
}

/// Greedy plateaus of a smoothed series: maximal stretches within `band` of each other,
/// at least `min_len` buckets long, as (first bucket, last bucket, median level).
fn plateaus(sf: &[f64], band: f64, min_len: usize) -> Vec<(usize, usize, f64)> {
    let mut out = Vec::new();
    let mut s = 0;
    while s < sf.len() {
        let (mut lo, mut hi) = (sf[s], sf[s]);
        let mut e = s;
        while e + 1 < sf.len() {
            let v = sf[e + 1];
            if hi.max(v) - lo.min(v) > 2.0 * band {
                break;
            }
            lo = lo.min(v);
            hi = hi.max(v);
            e += 1;
        }
        if e - s + 1 >= min_len {
            out.push((s, e, median_of(&sf[s..=e]).unwrap_or(sf[s])));
            s = e + 1;
        } else {
            s += 1;
        }
    }
    out
}

fn fit_growth(
    xs: &[f64],
    ys: &[f64],
    bk: &[Bucket],
    sc: Scale,
    timed: bool,
    t_end: i64,
    x0: i64,
) -> Option<Growth> {
    if xs.len() < 6 {
        return None;
    }
    let line = theil_sen(xs, ys)?;
    let fit_r2 = r2(xs, ys, line).max(0.0);
    let span = xs.last()? - xs.first()?;
    let rise = line.slope * span;
    let q = xs.len() / 4;
    let quarters: Vec<f64> = (0..4)
        .filter_map(|i| median_of(&ys[i * q..if i == 3 { ys.len() } else { (i + 1) * q }]))
        .collect();
    let rising = quarters.len() == 4 && quarters.windows(2).all(|w| w[1] - w[0] >= 0.1 * rise);
    let long_enough = xs.len() >= 8 && (!timed || span >= 300.0);
    let steady =
        long_enough && rise >= (0.05 * sc.scale).max(512.0 * MIB) && fit_r2 >= 0.6 && rising;
    let x_end = if timed {
        (t_end - x0) as f64 / 1000.0
    } else {
        *xs.last()?
    };
    let time_to_full_seconds = match (steady && timed, sc.total) {
        (true, Some(total)) if line.slope > 0.0 => {
            Some(((total - line.at(x_end)) / line.slope).max(0.0))
        }
        _ => None,
    };
    Some(Growth {
        slope: line.slope,
        r2: fit_r2,
        rise_bytes: rise,
        start_idx: bk.first()?.start,
        end_idx: bk.last()?.end - 1,
        steady,
        time_to_full_seconds,
    })
}

/// Swings between the 10th and 90th percentile (hysteresis at 25%/75% of the range).
fn churn(used: &[u64], sc: Scale) -> Option<(f64, f64, usize)> {
    if used.len() < 16 {
        return None;
    }
    let step = (used.len() / 50_000).max(1);
    let mut v: Vec<f64> = used.iter().step_by(step).map(|&u| u as f64).collect();
    let lo = quantile(&mut v, 0.10)?;
    let hi = quantile(&mut v, 0.90)?;
    let amp = hi - lo;
    if amp < (0.05 * sc.scale).max(512.0 * MIB) {
        return None;
    }
    let (down, up) = (lo + 0.25 * amp, lo + 0.75 * amp);
    let mut high = false;
    let mut cycles = 0;
    for &u in used.iter().step_by(step) {
        let u = u as f64;
        if !high && u >= up {
            high = true;
            cycles += 1;
        } else if high && u <= down {
            high = false;
        }
    }
    (cycles >= 8).then_some((lo, hi, cycles))
}

/// A steep, lasting fall of used memory: the process died (or exited) and its memory was
/// released.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct MemoryDrop {
    /// The last sample before the fall that was still high.
    pub last_high_idx: usize,
    /// The first sample after it.
    pub first_low_idx: usize,
    pub from_bytes: u64,
    pub to_bytes: u64,
    /// The device was ≥ 95% full in the minute before.
    pub filled: bool,
}

fn find_drops(dev: &DeviceSeries) -> Vec<MemoryDrop> {
    let used = dev.used.values();
    let t = dev.used.times();
    let timed = dev.clock.is_timed();
    let peak = used.iter().copied().max().unwrap_or(0) as f64;
    let sc = Scale::new(dev.total_bytes, peak);
    let min_drop = (0.10 * sc.scale).max(512.0 * MIB);
    let mut out = Vec::new();
    for i in 1..used.len() {
        // The high must come after the previous drop: one fall is one drop.
        let after = out.last().map_or(0, |d: &MemoryDrop| d.first_low_idx);
        let from = i.saturating_sub(3).max(after);
        if from >= i {
            continue;
        }
        let recent = used[from..i].iter().copied().max().unwrap_or(0) as f64;
        let now = used[i] as f64;
        if !(now <= 0.5 * recent && recent - now >= min_drop) {
            continue;
        }
        let mid = (recent + now) / 2.0;
        let mut j = i + 1;
        let mut stays = true;
        while j < used.len() && (j - i < 3 || timed && t[j] - t[i] < 20_000) {
            if used[j] as f64 >= mid {
                stays = false;
                break;
            }
            j += 1;
        }
        if !stays {
            continue;
        }
        let last_high = (from..i)
            .rev()
            .find(|&k| used[k] as f64 > mid)
            .unwrap_or(i - 1);
        let filled = sc.total.is_some_and(|total| {
            let s = last_stretch(t, 0, last_high, timed);
            used[s..=last_high]
                .iter()
                .any(|&u| u as f64 >= FULL_RATIO * total)
        });
        out.push(MemoryDrop {
            last_high_idx: last_high,
            first_low_idx: i,
            from_bytes: used[last_high],
            to_bytes: used[i],
            filled,
        });
    }
    out
}

/// A stretch of a device's series from load (or a restart) to a drop or the end.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub start: String,
    pub end: String,
    #[serde(skip)]
    pub start_idx: usize,
    /// One past the last sample of the run (the last high sample before its drop).
    #[serde(skip)]
    pub end_idx: usize,
    pub drop: Option<MemoryDrop>,
    /// Only idle memory (nothing loaded): the gap after a crash.
    pub idle: bool,
    pub window: Option<Window>,
}

/// A process on a device, summarised.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessSummary {
    pub pid: u32,
    pub name: String,
    pub input: InputName,
    pub first_seen: String,
    pub last_seen: String,
    pub first_bytes: u64,
    pub peak_bytes: u64,
    pub last_bytes: u64,
    /// Gone before the series ended.
    pub exited: bool,
    #[serde(skip)]
    pub(crate) series: Arc<ProcessSeries>,
}

/// Downsampled used memory for plots: per point the first time, min and max.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Points {
    pub t: Vec<i64>,
    pub min: Vec<u64>,
    pub max: Vec<u64>,
}

/// One device, analysed.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceAnalysis {
    pub index: u32,
    pub index_inferred: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub input: InputName,
    pub clock: Clock,
    pub total_bytes: Option<u64>,
    pub samples: usize,
    pub runs: Vec<Run>,
    pub processes: Vec<ProcessSummary>,
    pub patterns: Vec<Pattern>,
    pub points: Points,
    #[serde(skip)]
    pub(crate) series: Arc<DeviceSeries>,
}

/// Engine metrics of one engine, summarised over the whole series.
#[derive(Clone, Debug, Serialize)]
pub struct EngineSummary {
    pub label: String,
    pub input: InputName,
    pub clock: Clock,
    pub samples: usize,
    pub kv_usage_max: Option<f64>,
    pub requests_waiting_max: Option<f64>,
    pub preemptions: Option<f64>,
    #[serde(skip)]
    pub(crate) series: Arc<EngineSeries>,
}

/// A detected pattern, with its time range and numbers (times formatted in the series'
/// clock: RFC 3339, `+12.0 s`, or `sample 12`).
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Pattern {
    LoadRamp {
        device: u32,
        start: String,
        end: String,
        from_bytes: u64,
        to_bytes: u64,
    },
    Baseline {
        device: u32,
        at: String,
        bytes: u64,
    },
    Plateau {
        device: u32,
        start: String,
        end: String,
        level_bytes: u64,
    },
    Growth {
        device: u32,
        start: String,
        end: String,
        steady: bool,
        bytes_per_second: Option<f64>,
        r2: f64,
        rise_bytes: i64,
        time_to_full_seconds: Option<f64>,
    },
    Spike {
        device: u32,
        start: String,
        peak_at: String,
        end: String,
        peak_bytes: u64,
        height_bytes: u64,
        at_failure: bool,
    },
    Churn {
        device: u32,
        start: String,
        end: String,
        low_bytes: u64,
        high_bytes: u64,
        cycles: usize,
    },
    FlatHigh {
        device: u32,
        start: String,
        end: String,
        level_bytes: u64,
        ratio: f64,
    },
    CrashDrop {
        device: u32,
        last_high: String,
        at: String,
        from_bytes: u64,
        to_bytes: u64,
        filled: bool,
    },
    OtherProcess {
        device: u32,
        pid: u32,
        name: String,
        appeared: Option<String>,
        first_bytes: u64,
        peak_bytes: u64,
        last_bytes: u64,
    },
    ProcessExit {
        device: u32,
        pid: u32,
        name: String,
        last_seen: String,
        bytes: u64,
    },
    KvPressure {
        engine: String,
        start: String,
        end: String,
        kv_max: f64,
        waiting_max: f64,
        preemptions: f64,
    },
}

impl Pattern {
    /// One sentence with the numbers, for explanations.
    pub fn describe(&self) -> String {
        use crate::facts::units::format_bytes as fb;
        match self {
            Pattern::LoadRamp {
                device,
                start,
                end,
                from_bytes,
                to_bytes,
            } => {
                format!(
                    "gpu {device}: load ramp {} → {} ({start} .. {end})",
                    fb(*from_bytes),
                    fb(*to_bytes)
                )
            }
            Pattern::Baseline { device, at, bytes } => format!(
                "gpu {device}: baseline after load {} (from {at})",
                fb(*bytes)
            ),
            Pattern::Plateau {
                device,
                start,
                end,
                level_bytes,
            } => format!(
                "gpu {device}: plateau at {} ({start} .. {end})",
                fb(*level_bytes)
            ),
            Pattern::Growth {
                device,
                start,
                end,
                steady,
                bytes_per_second,
                r2,
                rise_bytes,
                time_to_full_seconds,
            } => {
                let rate = bytes_per_second.map_or(String::new(), |r| {
                    format!(", {}/h", crate::facts::units::format_bytes_f(r * 3600.0))
                });
                let ttf = time_to_full_seconds
                    .map_or(String::new(), |s| format!(", full in {:.1} h", s / 3600.0));
                let what = if *steady { "steady growth" } else { "drift" };
                format!(
                    "gpu {device}: {what} of {}{rate} (R² {r2:.2}{ttf}) over {start} .. {end}",
                    crate::facts::units::format_bytes_f(*rise_bytes as f64)
                )
            }
            Pattern::Spike {
                device,
                peak_at,
                peak_bytes,
                height_bytes,
                at_failure,
                ..
            } => format!(
                "gpu {device}: spike of +{} to {} at {peak_at}{}",
                fb(*height_bytes),
                fb(*peak_bytes),
                if *at_failure { " (at the failure)" } else { "" }
            ),
            Pattern::Churn {
                device,
                low_bytes,
                high_bytes,
                cycles,
                ..
            } => {
                format!(
                    "gpu {device}: churn between {} and {} ({cycles} cycles)",
                    fb(*low_bytes),
                    fb(*high_bytes)
                )
            }
            Pattern::FlatHigh {
                device,
                level_bytes,
                ratio,
                start,
                ..
            } => {
                format!(
                    "gpu {device}: flat at {} ({:.0}% of the device) from {start}: full by design",
                    fb(*level_bytes),
                    ratio * 100.0
                )
            }
            Pattern::CrashDrop {
                device,
                last_high,
                from_bytes,
                to_bytes,
                filled,
                ..
            } => format!(
                "gpu {device}: memory fell from {} to {} after {last_high}{}",
                fb(*from_bytes),
                fb(*to_bytes),
                if *filled {
                    ", right after the device filled"
                } else {
                    ""
                }
            ),
            Pattern::OtherProcess {
                device,
                pid,
                name,
                appeared,
                last_bytes,
                ..
            } => format!(
                "gpu {device}: process {pid} ({name}) {} holding {}",
                appeared
                    .as_ref()
                    .map_or("present".to_string(), |a| format!("appeared at {a},")),
                fb(*last_bytes)
            ),
            Pattern::ProcessExit {
                device,
                pid,
                name,
                last_seen,
                bytes,
            } => {
                format!(
                    "gpu {device}: process {pid} ({name}) vanished after {last_seen} holding {}",
                    fb(*bytes)
                )
            }
            Pattern::KvPressure {
                engine,
                kv_max,
                waiting_max,
                preemptions,
                start,
                end,
            } => format!(
                "{engine}: KV cache pinned at {:.0}% with up to {waiting_max:.0} requests waiting and {preemptions:.0} preemptions ({start} .. {end})",
                kv_max * 100.0
            ),
        }
    }
}

/// A failure the series shows on its own: the device filled, then memory dropped.
#[derive(Clone, Debug, Serialize)]
pub struct SeriesFailure {
    pub device: u32,
    /// The last sample before the drop (wall clock only).
    #[serde(skip)]
    pub time: Option<DateTime<Utc>>,
    /// The same as the input wrote it (no zone when it had none), for the JSON.
    #[serde(rename = "time")]
    pub time_text: Option<String>,
    /// The same in the series' clock.
    pub at: i64,
    /// The first sample after the drop, in the series' clock.
    pub until: i64,
    pub clock: Clock,
    pub input: InputName,
    pub facts: Facts,
}

impl SeriesFailure {
    /// Whether a failure reported elsewhere at `time` is this one (between the last high
    /// and the first low sample, with `tolerance` either side).
    pub fn matches(&self, time: DateTime<Utc>, tolerance: chrono::Duration) -> bool {
        if self.clock != Clock::Wall {
            return false;
        }
        let ms = time.timestamp_millis();
        let tol = tolerance.num_milliseconds();
        ms >= self.at - tol && ms <= self.until + tol
    }
}

/// The analysis of a [`SeriesSet`].
#[derive(Clone, Debug, Serialize)]
pub struct SeriesAnalysis {
    pub inputs: Vec<InputSummary>,
    pub devices: Vec<DeviceAnalysis>,
    pub engines: Vec<EngineSummary>,
    /// Engine-level patterns (KV pressure).
    pub patterns: Vec<Pattern>,
    pub failures: Vec<SeriesFailure>,
    /// Processes on devices that have no device series (a compute-apps file alone).
    pub orphan_processes: Vec<ProcessSummary>,
}

/// Analyses every device, process and engine of a set.
pub fn analyze(set: &SeriesSet) -> SeriesAnalysis {
    let mut devices: Vec<DeviceAnalysis> =
        set.devices.iter().map(|d| analyze_device(d, set)).collect();
    let mut orphan_processes = Vec::new();
    for p in &set.processes {
        let on_device = set
            .devices
            .iter()
            .any(|d| d.index == p.device && d.clock == p.clock);
        if !on_device {
            let end = set
                .processes
                .iter()
                .filter(|q| q.clock == p.clock && q.input == p.input)
                .filter_map(|q| q.used.times().last())
                .max();
            orphan_processes.push(summarise_process(p, end.copied()));
        }
    }
    let engines: Vec<EngineSummary> = set.engines.iter().map(summarise_engine).collect();
    let mut patterns = Vec::new();
    for e in &set.engines {
        let n = e
            .kv_usage
            .len()
            .max(e.requests_waiting.len())
            .max(e.preemptions.len());
        if n == 0 {
            continue;
        }
        let w = super::facts::engine_window(e, None);
        if w.kv_pressure {
            patterns.push(Pattern::KvPressure {
                engine: e.label.clone(),
                start: e.time_text(w.pinned_from.unwrap_or(0)),
                end: e.time_text(w.end),
                kv_max: w.kv_max.unwrap_or(0.0),
                waiting_max: w.waiting_peak.unwrap_or(0.0),
                preemptions: w.preemptions.unwrap_or(0.0),
            });
        }
    }
    let mut analysis = SeriesAnalysis {
        inputs: set.inputs.clone(),
        devices: std::mem::take(&mut devices),
        engines,
        patterns,
        failures: Vec::new(),
        orphan_processes,
    };
    let mut failures = Vec::new();
    for (di, d) in analysis.devices.iter().enumerate() {
        for (ri, r) in d.runs.iter().enumerate() {
            let Some(drop) = r.drop.filter(|x| x.filled) else {
                continue;
            };
            let t = d.series.used.times();
            let at = t[drop.last_high_idx];
            failures.push(SeriesFailure {
                device: d.index,
                time: (d.clock == Clock::Wall)
                    .then(|| DateTime::from_timestamp_millis(at))
                    .flatten(),
                time_text: (d.clock == Clock::Wall).then(|| d.series.time_text(at)),
                at,
                until: t[drop.first_low_idx],
                clock: d.clock,
                input: d.input.clone(),
                facts: analysis.run_facts(di, ri, None),
            });
        }
    }
    analysis.failures = failures;
    analysis
}

fn analyze_device(dev: &Arc<DeviceSeries>, set: &SeriesSet) -> DeviceAnalysis {
    let t = dev.used.times();
    let used = dev.used.values();
    let n = used.len();
    let drops = find_drops(dev);
    let peak = used.iter().copied().max().unwrap_or(0) as f64;
    let sc = Scale::new(dev.total_bytes, peak);
    let mut runs = Vec::new();
    let mut start = 0;
    for d in &drops {
        runs.push((start, d.last_high_idx + 1, Some(*d)));
        start = d.first_low_idx;
    }
    if start < n {
        runs.push((start, n, None));
    }
    let runs: Vec<Run> = runs
        .into_iter()
        .map(|(a, b, drop)| {
            let max = used[a..b].iter().copied().max().unwrap_or(0) as f64;
            let min = used[a..b].iter().copied().min().unwrap_or(0) as f64;
            // Nothing loaded: flat at the idle level after a crash.
            let idle = drop.is_none() && a > 0 && max - min < sc.significant();
            Run {
                start: dev.time_text(t[a]),
                end: dev.time_text(t[b - 1]),
                start_idx: a,
                end_idx: b,
                drop,
                idle,
                window: if idle {
                    None
                } else {
                    analyze_window(dev, a, b)
                },
            }
        })
        .collect();
    let end = t.last().copied();
    let proc_end = set
        .processes
        .iter()
        .filter(|p| p.device == dev.index && p.clock == dev.clock)
        .filter_map(|p| p.used.times().last().copied())
        .chain(end)
        .max();
    let processes: Vec<ProcessSummary> = set
        .processes
        .iter()
        .filter(|p| p.device == dev.index && p.clock == dev.clock)
        .map(|p| summarise_process(p, proc_end))
        .collect();
    let mut da = DeviceAnalysis {
        index: dev.index,
        index_inferred: dev.index_inferred,
        uuid: dev.uuid.clone(),
        name: dev.name.clone(),
        host: dev.host.clone(),
        input: dev.input.clone(),
        clock: dev.clock,
        total_bytes: dev.total_bytes,
        samples: n,
        runs,
        processes,
        patterns: Vec::new(),
        points: points(dev),
        series: dev.clone(),
    };
    da.patterns = device_patterns(&da);
    da
}

fn summarise_process(p: &Arc<ProcessSeries>, series_end: Option<i64>) -> ProcessSummary {
    let t = p.used.times();
    let v = p.used.values();
    let first = t.first().copied().unwrap_or(0);
    let last = t.last().copied().unwrap_or(0);
    let iv = interval(t).max(1);
    let slack = if p.clock.is_timed() {
        (2 * iv).max(30_000)
    } else {
        1
    };
    ProcessSummary {
        pid: p.pid,
        name: p.name.clone(),
        input: p.input.clone(),
        first_seen: p.time_text(first),
        last_seen: p.time_text(last),
        first_bytes: v.first().copied().unwrap_or(0),
        peak_bytes: v.iter().copied().max().unwrap_or(0),
        last_bytes: v.last().copied().unwrap_or(0),
        exited: series_end.is_some_and(|e| last + slack < e),
        series: p.clone(),
    }
}

fn summarise_engine(e: &Arc<EngineSeries>) -> EngineSummary {
    let w = super::facts::engine_window(e, None);
    EngineSummary {
        label: e.label.clone(),
        input: e.input.clone(),
        clock: e.clock,
        samples: e.samples(),
        kv_usage_max: w.kv_max,
        requests_waiting_max: w.waiting_peak,
        preemptions: w.preemptions,
        series: e.clone(),
    }
}

/// At most [`MAX_POINTS`] points (first time, min, max of each bucket), so a plot shows
/// spikes the buckets contain.
fn points(dev: &DeviceSeries) -> Points {
    let t = dev.used.times();
    let v = dev.used.values();
    let n = v.len();
    let nb = n.min(MAX_POINTS);
    let mut p = Points::default();
    for k in 0..nb {
        let (s, e) = (k * n / nb, (k + 1) * n / nb);
        let slice = &v[s..e];
        p.t.push(t[s]);
        p.min.push(slice.iter().copied().min().unwrap_or(0));
        p.max.push(slice.iter().copied().max().unwrap_or(0));
    }
    p
}

fn device_patterns(d: &DeviceAnalysis) -> Vec<Pattern> {
    let dev = &d.series;
    let t = dev.used.times();
    let v = dev.used.values();
    let f = |i: usize| dev.time_text(t[i]);
    let timed = dev.clock.is_timed();
    let mut out = Vec::new();
    for r in &d.runs {
        let Some(w) = &r.window else { continue };
        if let Some(re) = w.ramp_end_idx {
            out.push(Pattern::LoadRamp {
                device: d.index,
                start: f(w.start_idx),
                end: f(re),
                from_bytes: v[w.start_idx],
                to_bytes: w.baseline_bytes as u64,
            });
        }
        out.push(Pattern::Baseline {
            device: d.index,
            at: f(w.baseline_idx),
            bytes: w.baseline_bytes as u64,
        });
        if let Some(g) = &w.growth {
            // Steady growth, or a clear drift (a good fit, not two points in a spike).
            let scale = dev.total_bytes.unwrap_or(w.peak_bytes) as f64;
            if g.steady || g.r2 >= 0.5 && g.rise_bytes.abs() >= 0.05 * scale {
                out.push(Pattern::Growth {
                    device: d.index,
                    start: f(g.start_idx),
                    end: f(g.end_idx),
                    steady: g.steady,
                    bytes_per_second: timed.then_some(g.slope),
                    r2: g.r2,
                    rise_bytes: g.rise_bytes as i64,
                    time_to_full_seconds: g.time_to_full_seconds,
                });
            }
        }
        for &(s, e, level) in &w.plateaus {
            out.push(Pattern::Plateau {
                device: d.index,
                start: f(s),
                end: f(e),
                level_bytes: level as u64,
            });
        }
        // The largest excursions and the one at the failure; the count is in the facts.
        let mut shown: Vec<&Spike> = w.spikes.iter().collect();
        shown.sort_by(|x, y| {
            (y.at_end, y.height_bytes)
                .partial_cmp(&(x.at_end, x.height_bytes))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        shown.truncate(MAX_SPIKE_PATTERNS);
        shown.sort_by_key(|s| s.start_idx);
        for s in shown {
            out.push(Pattern::Spike {
                device: d.index,
                start: f(s.start_idx),
                peak_at: f(s.peak_idx),
                end: f(s.end_idx),
                peak_bytes: s.peak_bytes,
                height_bytes: s.height_bytes.max(0.0) as u64,
                at_failure: s.at_end && r.drop.is_some(),
            });
        }
        if let Some((lo, hi, cycles)) = w.churn {
            out.push(Pattern::Churn {
                device: d.index,
                start: f(w.start_idx),
                end: f(w.end_idx - 1),
                low_bytes: lo as u64,
                high_bytes: hi as u64,
                cycles,
            });
        }
        if let Some((level, ratio)) = w.flat_high {
            out.push(Pattern::FlatHigh {
                device: d.index,
                start: f(w.ramp_end_idx.unwrap_or(w.start_idx)),
                end: f(w.end_idx - 1),
                level_bytes: level as u64,
                ratio,
            });
        }
        if let Some(dr) = &r.drop {
            out.push(Pattern::CrashDrop {
                device: d.index,
                last_high: f(dr.last_high_idx),
                at: f(dr.first_low_idx),
                from_bytes: dr.from_bytes,
                to_bytes: dr.to_bytes,
                filled: dr.filled,
            });
        }
    }
    let first_t = t.first().copied().unwrap_or(0);
    let slack = (2 * interval(t)).max(if timed { 30_000 } else { 1 });
    let sig =
        Scale::new(dev.total_bytes, v.iter().copied().max().unwrap_or(0) as f64).significant();
    for p in &d.processes {
        let pt = p.series.used.times();
        // A process that came after logging began, holding a significant amount (growth
        // of processes present from the start is judged per failure, in the facts).
        let appeared = pt.first().is_some_and(|&x| x > first_t + slack);
        if appeared && p.peak_bytes as f64 >= sig {
            out.push(Pattern::OtherProcess {
                device: d.index,
                pid: p.pid,
                name: p.name.clone(),
                appeared: appeared.then(|| p.first_seen.clone()),
                first_bytes: p.first_bytes,
                peak_bytes: p.peak_bytes,
                last_bytes: p.last_bytes,
            });
        }
        if p.exited {
            out.push(Pattern::ProcessExit {
                device: d.index,
                pid: p.pid,
                name: p.name.clone(),
                last_seen: p.last_seen.clone(),
                bytes: p.last_bytes,
            });
        }
    }
    out
}

impl SeriesAnalysis {
    /// Device indices with a device series, in order.
    pub fn devices(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.devices.iter().map(|d| d.index).collect();
        v.dedup();
        v
    }

    /// Failures the series shows on its own (device filled, then memory dropped).
    pub fn failures(&self) -> Vec<SeriesFailure> {
        self.failures.clone()
    }

    /// The series failure on `device` (any device when `None`) that matches a failure
    /// reported at `time` by another input, so the caller folds them into one incident.
    pub fn failure_near(
        &self,
        device: Option<u32>,
        time: DateTime<Utc>,
        tolerance: chrono::Duration,
    ) -> Option<&SeriesFailure> {
        self.failures
            .iter()
            .filter(|f| device.is_none_or(|d| d == f.device))
            .find(|f| f.matches(time, tolerance))
    }

    /// The wall-clock span of the device series (for the year of yearless log times, and
    /// to tell whether a log's failure falls inside the series at all).
    pub fn wall_span(&self) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let wall = self.devices.iter().filter(|d| d.clock == Clock::Wall);
        let start = wall
            .clone()
            .filter_map(|d| d.series.used.times().first().copied())
            .min()?;
        let end = wall
            .filter_map(|d| d.series.used.times().last().copied())
            .max()?;
        Some((
            DateTime::from_timestamp_millis(start)?,
            DateTime::from_timestamp_millis(end)?,
        ))
    }

    /// Every pattern: per device, then engine-level.
    pub fn patterns(&self) -> impl Iterator<Item = &Pattern> {
        self.devices
            .iter()
            .flat_map(|d| d.patterns.iter())
            .chain(self.patterns.iter())
    }
}
