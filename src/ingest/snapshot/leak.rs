//! Leak detection: live memory that grows iteration after iteration at the same call sites.
//!
//! This module owns `snapshot-format.md` §4.7. A leak is called only when three things
//! hold together, because growth alone is also what a KV cache, a warming cache or a
//! forward pass looks like:
//!
//! 1. **Iterations.** Taken from `external_annotations` when the user recorded them
//!    (`ProfilerStep#N` starts; else `Optimizer.step#...` or `Optimizer.zero_grad#...`
//!    starts, one per training iteration). Without annotations, from a repeating call-site
//!    pattern: at some depth of the user-code frames (outermost first) the loop body's lines
//!    alternate (forward line, backward line, step line, ...); the depth and line entered
//!    most often mark the iteration starts.
//! 2. **Survivors at the same sites.** Allocations never freed in the trace, at one site,
//!    in at least three iterations and at least half of them. Churn (alloc then free)
//!    leaves no survivors; a `torch.cat` KV-cache staircase frees each step's predecessor,
//!    so only the last step survives. Sites classified as weights or KV cache are not leak
//!    candidates: they grow by design.
//! 3. **Rising live bytes at comparable points** (the iteration starts, the first one left
//!    out as warm-up when there are four or more): a positive least-squares slope, rising in at least two thirds of the steps, at least 1 MiB in
//!    all, and the survivors explaining at least a quarter of the slope.
//!
//! Without annotations one more check guards against mistaking one forward pass for a loop
//! (its layers repeat too, and their saved activations survive until backward): each
//! iteration must free at least half of what it allocates, as a real training or inference
//! iteration does.

use serde::Serialize;

use super::analyze::{DeviceCtx, SiteBytes};
use super::attribution::Category;
use super::fxhash::{FxHashMap, new_map};
use super::schema::{Action, Annotation, FrameListId};

const NONE: u32 = u32::MAX;
const MIN_ITERATIONS: usize = 3;
const MIN_GROWTH_BYTES: u64 = 1 << 20;
/// How deep into the user frames the iteration pattern is looked for.
const MAX_PHASE_DEPTH: usize = 12;

/// How the iterations were found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeakMethod {
    /// `ProfilerStep#N` annotations.
    ProfilerSteps,
    /// `Optimizer.step#...` / `Optimizer.zero_grad#...` annotations.
    OptimizerSteps,
    /// A repeating call-site pattern in the trace.
    RepeatedCallSites,
}

/// A detected leak.
#[derive(Clone, Debug, Serialize)]
pub struct Leak {
    pub method: LeakMethod,
    /// Iterations observed in the trace.
    pub steps: u64,
    /// Iterations that left surviving allocations at the leak sites.
    pub leaking_steps: u64,
    /// Least-squares slope of live bytes at iteration starts.
    pub slope_bytes_per_step: f64,
    /// Live bytes at the last iteration start minus at the first.
    pub growth_bytes: i64,
    /// Live bytes at each iteration start (at most 200, evenly picked).
    pub live_at_steps: Vec<u64>,
    /// The leak sites with the bytes their survivors hold.
    pub sites: Vec<SiteBytes>,
    pub surviving_bytes: u64,
}

/// Iteration starts as entry positions (entry index where the iteration begins).
fn annotation_boundaries(
    ctx: &DeviceCtx<'_, '_, '_>,
    annotations: &[Annotation],
) -> Option<(LeakMethod, Vec<usize>)> {
    let families: [(&str, LeakMethod); 3] = [
        ("ProfilerStep#", LeakMethod::ProfilerSteps),
        ("Optimizer.step#", LeakMethod::OptimizerSteps),
        ("Optimizer.zero_grad#", LeakMethod::OptimizerSteps),
    ];
    let is_start = |a: &Annotation, prefix: &str| {
        a.name.starts_with(prefix) && a.stage.eq_ignore_ascii_case("START")
    };
    // No family with enough starts: the trace's timestamps need no look (two passes over
    // a trace that may hold millions of entries).
    if !families.iter().any(|(prefix, _)| {
        annotations
            .iter()
            .filter(|a| is_start(a, prefix))
            .nth(MIN_ITERATIONS - 1)
            .is_some()
    }) {
        return None;
    }
    let entries = ctx.entries;
    if entries.is_empty() || entries.iter().any(|e| e.time().is_none()) {
        return None;
    }
    if !entries.windows(2).all(|w| w[0].time_us <= w[1].time_us) {
        return None;
    }
    for (prefix, method) in families {
        let mut times: Vec<i64> = annotations
            .iter()
            .filter(|a| is_start(a, prefix))
            .map(|a| a.time_us)
            .collect();
        if times.len() < MIN_ITERATIONS {
            continue;
        }
        times.sort_unstable();
        let mut positions: Vec<usize> = times
            .iter()
            .map(|&t| entries.partition_point(|e| e.time_us < t))
            .collect();
        positions.dedup();
        // An iteration that starts after the last entry has no events: drop it.
        positions.retain(|&p| p < entries.len());
        if positions.len() >= MIN_ITERATIONS {
            return Some((method, positions));
        }
    }
    None
}

/// Iteration starts from the repeating outermost varying user frame.
fn call_site_boundaries(ctx: &mut DeviceCtx<'_, '_, '_>) -> Option<Vec<usize>> {
    // Each distinct list's user frames are looked up once and laid out flat; an alloc
    // keeps where its list's frames are, so the walk per depth below reads one number per
    // alloc instead of a hash lookup and a pointer chase.
    let mut span_of: FxHashMap<FrameListId, (u32, u32)> = new_map();
    let mut flat: Vec<u32> = Vec::new();
    let mut allocs: Vec<(usize, (u32, u32))> = Vec::new();
    for (i, e) in ctx.entries.iter().enumerate() {
        if e.action == Action::Alloc && !e.frames.is_empty() {
            let span = *span_of.entry(e.frames).or_insert_with(|| {
                let start = flat.len();
                ctx.classifier
                    .push_user_frames_outermost_first(e.frames, &mut flat);
                (start as u32, (flat.len() - start) as u32)
            });
            allocs.push((i, span));
        }
    }
    if allocs.len() < MIN_ITERATIONS * 2 {
        return None;
    }
    let max_depth = span_of
        .values()
        .map(|&(_, len)| len as usize)
        .max()
        .unwrap_or(0)
        .min(MAX_PHASE_DEPTH);
    loop_starts(&allocs, &flat, max_depth)
}

/// The iteration starts among `allocs` (entry index, span of its user frames in `flat`,
/// outermost first), looked for at depths `0..max_depth`.
///
/// The loop body: the depth at which one frame is entered again and again. Setup code
/// (model loading) differs from the loop at a shallow depth but is entered once, so the
/// depth whose most re-entered frame has the most runs wins; ties go to the shallower
/// depth (the whole iteration, not one layer of it).
fn loop_starts(
    allocs: &[(usize, (u32, u32))],
    flat: &[u32],
    max_depth: usize,
) -> Option<Vec<usize>> {
    // A depth's runs (maximal stretches of allocs at one phase) are counted per phase in
    // a table indexed by frame id, not collected: the allocs are walked once per depth, and
    // only the winning depth's runs are walked again for their starts.
    let phases = flat.iter().map(|&f| f as usize + 1).max().unwrap_or(0);
    let mut counts: Vec<(usize, usize)> = vec![(0, 0); phases];
    let mut seen: Vec<u32> = Vec::new();
    let phase_at = |depth: usize, &(start, len): &(u32, u32)| {
        (depth < len as usize).then(|| flat[start as usize + depth])
    };
    let mut best: Option<(usize, usize, u32)> = None;
    for depth in 0..max_depth {
        for &f in &seen {
            counts[f as usize] = (0, 0);
        }
        seen.clear();
        let mut last = None;
        let mut runs = 0;
        for (_, span) in allocs {
            let Some(phase) = phase_at(depth, span) else {
                continue;
            };
            if last != Some(phase) {
                let slot = &mut counts[phase as usize];
                if slot.0 == 0 {
                    *slot = (0, runs);
                    seen.push(phase);
                }
                slot.0 += 1;
                runs += 1;
                last = Some(phase);
            }
        }
        // The phase entered most often; among equals, the one entered first.
        let Some(&anchor) = seen.iter().max_by(|&&a, &&b| {
            let (a, b) = (counts[a as usize], counts[b as usize]);
            a.0.cmp(&b.0).then(b.1.cmp(&a.1))
        }) else {
            continue;
        };
        let n = counts[anchor as usize].0;
        if n >= MIN_ITERATIONS && best.is_none_or(|(bn, _, _)| n > bn) {
            best = Some((n, depth, anchor));
        }
    }
    let (_, depth, anchor) = best?;
    let mut starts = Vec::new();
    let mut last = None;
    for (i, span) in allocs {
        let Some(phase) = phase_at(depth, span) else {
            continue;
        };
        if last != Some(phase) {
            if phase == anchor {
                starts.push(*i);
            }
            last = Some(phase);
        }
    }
    Some(starts)
}

fn slope(ys: &[u64]) -> f64 {
    let n = ys.len() as f64;
    if ys.len() < 2 {
        return 0.0;
    }
    let mean_x = (n - 1.0) / 2.0;
    let mean_y = ys.iter().map(|&y| y as f64).sum::<f64>() / n;
    let mut num = 0.0;
    let mut den = 0.0;
    for (x, &y) in ys.iter().enumerate() {
        let dx = x as f64 - mean_x;
        num += dx * (y as f64 - mean_y);
        den += dx * dx;
    }
    if den == 0.0 { 0.0 } else { num / den }
}

/// Where a device's iterations start, and how that was found (the first step of the
/// detection). It reads the trace and the frames but neither the classifier's site
/// numbering nor the live bytes, so it may run before the timeline is done.
pub(crate) fn iteration_starts(
    ctx: &mut DeviceCtx<'_, '_, '_>,
    annotations: &[Annotation],
) -> Option<(LeakMethod, Vec<usize>)> {
    if ctx.entries.is_empty() {
        return None;
    }
    annotation_boundaries(ctx, annotations)
        .or_else(|| call_site_boundaries(ctx).map(|starts| (LeakMethod::RepeatedCallSites, starts)))
}

/// Looks for a leak on one device, its iterations found by [`iteration_starts`].
pub(crate) fn detect(
    ctx: &mut DeviceCtx<'_, '_, '_>,
    iterations: Option<(LeakMethod, Vec<usize>)>,
) -> Option<Leak> {
    let entries = ctx.entries;
    let (method, starts) = iterations?;
    let iterations = starts.len();
    if iterations < MIN_ITERATIONS {
        return None;
    }
    let iteration_of = |i: usize| -> Option<usize> {
        let k = starts.partition_point(|&s| s <= i);
        k.checked_sub(1)
    };

    // Without annotations: each iteration must free at least half of what it allocates.
    if method == LeakMethod::RepeatedCallSites {
        let mut allocated = vec![0u64; iterations];
        let mut freed_inside = vec![0u64; iterations];
        for (i, e) in entries.iter().enumerate() {
            if e.action != Action::Alloc {
                continue;
            }
            let Some(k) = iteration_of(i) else { continue };
            allocated[k] = allocated[k].saturating_add(e.size);
            let end = starts.get(k + 1).copied().unwrap_or(entries.len());
            let partner = ctx.pairing.partner.get(i).copied().unwrap_or(NONE);
            if partner != NONE && (partner as usize) < end {
                freed_inside[k] = freed_inside[k].saturating_add(e.size);
            }
        }
        // The last iteration may be cut short by the dump (or the OOM); judge the full ones.
        let full = iterations - 1;
        let ratio: f64 = (0..full)
            .map(|k| {
                if allocated[k] == 0 {
                    1.0
                } else {
                    freed_inside[k] as f64 / allocated[k] as f64
                }
            })
            .sum::<f64>()
            / full.max(1) as f64;
        if ratio < 0.5 {
            return None;
        }
    }

    // Survivors per site and iteration.
    struct SiteAcc {
        bytes: u64,
        blocks: u64,
        iterations: Vec<bool>,
        category: Category,
    }
    let mut per_site: FxHashMap<u32, SiteAcc> = new_map();
    let mut open: Vec<(u32, u64)> = ctx
        .pairing
        .open_alloc
        .iter()
        .map(|(&a, &i)| (i, a))
        .collect();
    open.sort_unstable();
    for (i, addr) in open {
        let i = i as usize;
        let Some(e) = entries.get(i) else { continue };
        if e.addr != addr {
            continue;
        }
        let Some(k) = iteration_of(i) else { continue };
        let category = ctx.category_of(e.frames, Some(i as u32));
        if matches!(category, Category::Weights | Category::KvCache) {
            continue;
        }
        let Some(site) = ctx.classifier.site(e.frames) else {
            continue;
        };
        let acc = per_site.entry(site).or_insert_with(|| SiteAcc {
            bytes: 0,
            blocks: 0,
            iterations: vec![false; iterations],
            category,
        });
        acc.bytes = acc.bytes.saturating_add(e.size);
        acc.blocks += 1;
        acc.iterations[k] = true;
    }
    let need = MIN_ITERATIONS.max(iterations.div_ceil(2));
    let mut leak_sites: Vec<(u32, SiteAcc)> = per_site
        .into_iter()
        .filter(|(_, a)| a.iterations.iter().filter(|&&b| b).count() >= need)
        .collect();
    if leak_sites.is_empty() {
        return None;
    }
    leak_sites.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));

    // Live bytes at each iteration start. The first iteration is warm-up (optimizer state,
    // allocator cache, lazily built buffers); with four or more iterations it is left out.
    let all_live: Vec<u64> = starts
        .iter()
        .map(|&s| ctx.live_at(s.checked_sub(1)))
        .collect();
    let live: Vec<u64> = if all_live.len() >= 4 {
        all_live[1..].to_vec()
    } else {
        all_live
    };
    let slope = slope(&live);
    let rising = live.windows(2).filter(|w| w[1] > w[0]).count();
    let growth =
        (*live.last()? as i128 - live[0] as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64;
    if slope <= 0.0 || rising * 3 < (live.len() - 1) * 2 || growth < MIN_GROWTH_BYTES as i64 {
        return None;
    }
    let mut leaking = vec![false; iterations];
    let mut surviving_bytes = 0u64;
    for (_, a) in &leak_sites {
        surviving_bytes = surviving_bytes.saturating_add(a.bytes);
        for (k, b) in a.iterations.iter().enumerate() {
            leaking[k] |= *b;
        }
    }
    let leaking_steps = leaking.iter().filter(|&&b| b).count() as u64;
    if (surviving_bytes as f64 / leaking_steps.max(1) as f64) < 0.25 * slope {
        return None;
    }
    let sites = leak_sites
        .into_iter()
        .take(5)
        .filter_map(|(id, a)| {
            ctx.classifier.sites.get(id as usize).map(|s| SiteBytes {
                site: s.clone(),
                bytes: a.bytes,
                blocks: a.blocks,
                category: Some(a.category),
            })
        })
        .collect();
    let live_at_steps = if live.len() <= 200 {
        live.clone()
    } else {
        (0..200).map(|j| live[j * (live.len() - 1) / 199]).collect()
    };
    Some(Leak {
        method,
        steps: iterations as u64,
        leaking_steps,
        slope_bytes_per_step: slope,
        growth_bytes: growth,
        live_at_steps,
        sites,
        surviving_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::{MIN_ITERATIONS, loop_starts, slope};

    /// The search as first written: every depth's runs collected, then counted in a map.
    fn loop_starts_by_collecting(
        allocs: &[(usize, (u32, u32))],
        flat: &[u32],
        max_depth: usize,
    ) -> Option<Vec<usize>> {
        let mut best: Option<(usize, Vec<usize>)> = None;
        for depth in 0..max_depth {
            let mut runs: Vec<(u32, usize)> = Vec::new();
            for &(i, (start, len)) in allocs {
                if depth < len as usize {
                    let phase = flat[start as usize + depth];
                    if runs.last().is_none_or(|r| r.0 != phase) {
                        runs.push((phase, i));
                    }
                }
            }
            let mut counts = std::collections::HashMap::<u32, (usize, usize)>::new();
            for (k, (phase, _)) in runs.iter().enumerate() {
                counts.entry(*phase).or_insert((0, k)).0 += 1;
            }
            let Some((&anchor, &(n, _))) = counts
                .iter()
                .max_by(|a, b| a.1.0.cmp(&b.1.0).then(b.1.1.cmp(&a.1.1)))
            else {
                continue;
            };
            if n >= MIN_ITERATIONS && best.as_ref().is_none_or(|(bn, _)| n > *bn) {
                best = Some((
                    n,
                    runs.iter().filter(|r| r.0 == anchor).map(|r| r.1).collect(),
                ));
            }
        }
        best.map(|(_, starts)| starts)
    }

    #[test]
    fn loop_starts_count_runs_as_collecting_them_does() {
        // Lists of 0..6 user frames from 8 frame ids; allocs pick lists in runs.
        let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        let mut found = 0;
        for _ in 0..300 {
            let mut flat = Vec::new();
            let spans: Vec<(u32, u32)> = (0..1 + next(6))
                .map(|_| {
                    let start = flat.len() as u32;
                    let len = next(6) as u32;
                    flat.extend((0..len).map(|_| next(8) as u32));
                    (start, len)
                })
                .collect();
            let mut allocs = Vec::new();
            let mut i = 0;
            while allocs.len() < 40 {
                let span = spans[next(spans.len() as u64) as usize];
                for _ in 0..1 + next(3) {
                    allocs.push((i, span));
                    i += 1 + next(2) as usize;
                }
            }
            for max_depth in [0, 1, 3, 6] {
                let starts = loop_starts(&allocs, &flat, max_depth);
                assert_eq!(
                    starts,
                    loop_starts_by_collecting(&allocs, &flat, max_depth),
                    "{allocs:?} {flat:?} {max_depth}"
                );
                found += usize::from(starts.is_some());
            }
        }
        // Most cases have a loop to find (not a comparison of two `None`s).
        assert!(found > 600, "{found}");
    }

    #[test]
    fn loop_starts_prefer_the_shallower_depth_and_the_phase_entered_first() {
        // Depth 0 alternates 1, 2 (three runs each: 1 entered first); depth 1 repeats 5
        // three times too: depth 0 and phase 1 win.
        let flat = [1, 5, 2, 6];
        let a = (0, 2);
        let b = (2, 2);
        let allocs: Vec<(usize, (u32, u32))> = [a, b, a, b, a, b]
            .iter()
            .enumerate()
            .map(|(i, &s)| (i * 10, s))
            .collect();
        assert_eq!(loop_starts(&allocs, &flat, 2), Some(vec![0, 20, 40]));
    }

    #[test]
    fn least_squares_slope() {
        assert_eq!(slope(&[10, 20, 30, 40]), 10.0);
        assert_eq!(slope(&[5, 5, 5]), 0.0);
        assert!(slope(&[40, 30, 20]) < 0.0);
    }
}
