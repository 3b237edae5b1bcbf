//! Robust statistics for series analysis: medians, quantiles, Theil–Sen slopes, MAD noise.
//!
//! Memory series have spikes (one long request) and dips (a cache flush) that would drag a
//! least-squares fit anywhere; medians and the Theil–Sen estimator (the median of pairwise
//! slopes) ignore up to ~29% of outliers, which is what "spikes don't fool it" needs.

/// Quantile `q` (0..1) of `v` by selection (reorders `v`); `None` for an empty slice.
pub(crate) fn quantile(v: &mut [f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let k = ((v.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    let (_, x, _) = v.select_nth_unstable_by(k, f64::total_cmp);
    Some(*x)
}

/// Median of `v` (reorders `v`).
pub(crate) fn median(v: &mut [f64]) -> Option<f64> {
    quantile(v, 0.5)
}

/// Median of a copy of `v`.
pub(crate) fn median_of(v: &[f64]) -> Option<f64> {
    median(&mut v.to_vec())
}

/// Points used for the pairwise slopes: above this, an even subsample (400 points give
/// 79,800 pairs, a few milliseconds).
const MAX_TS_POINTS: usize = 400;

/// A robust straight line `y = slope·x + intercept`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Line {
    pub slope: f64,
    pub intercept: f64,
}

impl Line {
    pub(crate) fn at(&self, x: f64) -> f64 {
        self.slope * x + self.intercept
    }
}

/// Theil–Sen fit: the median of pairwise slopes, intercept the median of `y - slope·x`.
pub(crate) fn theil_sen(x: &[f64], y: &[f64]) -> Option<Line> {
    let n = x.len().min(y.len());
    if n < 2 {
        return None;
    }
    let step = n.div_ceil(MAX_TS_POINTS).max(1);
    let idx: Vec<usize> = (0..n).step_by(step).collect();
    let mut slopes = Vec::with_capacity(idx.len() * idx.len() / 2);
    for (a, &i) in idx.iter().enumerate() {
        for &j in &idx[a + 1..] {
            let dx = x[j] - x[i];
            if dx != 0.0 {
                slopes.push((y[j] - y[i]) / dx);
            }
        }
    }
    let slope = median(&mut slopes)?;
    let mut resid: Vec<f64> = (0..n).map(|i| y[i] - slope * x[i]).collect();
    let intercept = median(&mut resid)?;
    Some(Line { slope, intercept })
}

/// Fraction of the variance of `y` the line explains (may be negative for a bad line).
pub(crate) fn r2(x: &[f64], y: &[f64], line: Line) -> f64 {
    let n = x.len().min(y.len());
    if n < 2 {
        return 0.0;
    }
    let mean = y[..n].iter().sum::<f64>() / n as f64;
    let ss_tot: f64 = y[..n].iter().map(|v| (v - mean).powi(2)).sum();
    let ss_res: f64 = (0..n).map(|i| (y[i] - line.at(x[i])).powi(2)).sum();
    if ss_tot <= 0.0 {
        // A perfectly flat series: a flat line explains it fully, anything else does not.
        return if ss_res <= 0.0 { 1.0 } else { 0.0 };
    }
    1.0 - ss_res / ss_tot
}

/// Robust standard deviation: 1.4826 × the median absolute deviation from the median.
pub(crate) fn mad_sigma(v: &[f64]) -> f64 {
    let Some(m) = median_of(v) else { return 0.0 };
    let mut dev: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    1.4826 * median(&mut dev).unwrap_or(0.0)
}

/// Pearson correlation of two equally long series; `None` when either is constant.
pub(crate) fn pearson(a: &[f64], b: &[f64]) -> Option<f64> {
    let n = a.len().min(b.len());
    if n < 3 {
        return None;
    }
    let ma = a[..n].iter().sum::<f64>() / n as f64;
    let mb = b[..n].iter().sum::<f64>() / n as f64;
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for i in 0..n {
        let (da, db) = (a[i] - ma, b[i] - mb);
        sab += da * db;
        saa += da * da;
        sbb += db * db;
    }
    if saa <= 0.0 || sbb <= 0.0 {
        return None;
    }
    Some((sab / (saa * sbb).sqrt()).clamp(-1.0, 1.0))
}

/// Rolling median of `v` with a window of `2w+1` points; near the ends the window is shifted
/// inward so it always holds `2w+1` points (when `v` has that many), which keeps a short
/// excursion at the very end from raising its own baseline.
pub(crate) fn rolling_median(v: &[f64], w: usize) -> Vec<f64> {
    let n = v.len();
    let span = (2 * w + 1).min(n);
    let mut out = Vec::with_capacity(n);
    let mut buf = Vec::with_capacity(span);
    for i in 0..n {
        let start = i.saturating_sub(w).min(n - span);
        buf.clear();
        buf.extend_from_slice(&v[start..start + span]);
        out.push(median(&mut buf).unwrap_or(v[i]));
    }
    out
}

/// Rolling median with a centred window of `2w+1` points, shrinking at the ends (so the
/// first and last points are not all given the same value, which would look like a
/// plateau).
pub(crate) fn rolling_median_centred(v: &[f64], w: usize) -> Vec<f64> {
    let n = v.len();
    let mut buf = Vec::with_capacity(2 * w + 1);
    (0..n)
        .map(|i| {
            let (s, e) = (i.saturating_sub(w), (i + w + 1).min(n));
            buf.clear();
            buf.extend_from_slice(&v[s..e]);
            median(&mut buf).unwrap_or(v[i])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_medians() {
        let mut v = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(median(&mut v), Some(3.0));
        assert_eq!(quantile(&mut v, 0.0), Some(1.0));
        assert_eq!(quantile(&mut v, 1.0), Some(5.0));
        assert_eq!(median(&mut []), None);
    }

    #[test]
    fn theil_sen_ignores_spikes_that_least_squares_would_follow() {
        let x: Vec<f64> = (0..100).map(f64::from).collect();
        let mut y: Vec<f64> = x.iter().map(|v| 2.0 * v + 10.0).collect();
        for i in [10, 30, 50, 70, 90] {
            y[i] += 1000.0;
        }
        let l = theil_sen(&x, &y).unwrap();
        assert!((l.slope - 2.0).abs() < 1e-9, "{l:?}");
        assert!((l.intercept - 10.0).abs() < 1e-9, "{l:?}");
    }

    #[test]
    fn theil_sen_subsamples_long_series() {
        let x: Vec<f64> = (0..5000).map(f64::from).collect();
        let y: Vec<f64> = x.iter().map(|v| -0.5 * v + 3.0).collect();
        let l = theil_sen(&x, &y).unwrap();
        assert!((l.slope + 0.5).abs() < 1e-9);
        assert!((r2(&x, &y, l) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn noise_and_correlation() {
        let v = [10.0, 11.0, 9.0, 10.0, 10.0, 500.0];
        assert!(mad_sigma(&v) < 1.5);
        assert_eq!(pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]), Some(1.0));
        assert_eq!(pearson(&[1.0, 2.0, 3.0], &[5.0, 5.0, 5.0]), None);
    }

    #[test]
    fn rolling_median_keeps_a_full_window_at_the_ends() {
        let v = [1.0, 1.0, 1.0, 1.0, 1.0, 9.0, 9.0];
        let m = rolling_median(&v, 2);
        // The last two points are an excursion; their baseline stays at the level before.
        assert_eq!(m[6], 1.0);
        assert_eq!(m[0], 1.0);
        let c = rolling_median_centred(&[1.0, 2.0, 3.0, 4.0, 5.0], 2);
        assert_eq!(c, vec![2.0, 3.0, 3.0, 4.0, 4.0]);
    }
}
