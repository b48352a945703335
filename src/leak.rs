//! Leak detection: does a per-iteration figure keep growing once the
//! workload has warmed up?
//!
//! Iterations are the probe's steps at one phase (the workload's allocated
//! memory at each), or, without a probe, the soak's relaunches (each run's
//! peak). Two noisy points prove nothing, so the trend is a Theil–Sen
//! slope: the median of the slopes between every pair of points, which
//! shrugs off outliers (a checkpoint, a one-off spike). The growth judged is
//! that slope over the iterations after warm-up. Its figures are data;
//! `report::words` words them.

use serde::{Deserialize, Serialize};

use crate::vocabulary::OrWritten;

/// Most points the slope is computed over; longer series are thinned
/// evenly (the pairwise median is quadratic in the number of points).
const MAX_POINTS: usize = 400;

/// What the iterations of a leak's series are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LeakSource {
    /// The probe's steps, of one instance at one phase (`None`: the
    /// workload named none); the figure is its allocated memory.
    ProbeSteps { phase: Option<String> },
    /// The soak's runs; the figure is each run's peak.
    SoakRuns,
}

/// A leak verdict's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeakFigures {
    /// What the iterations are (schema 4: `"probe steps (forward)"`,
    /// `"soak runs"`).
    pub source: OrWritten<LeakSource>,
    /// Iterations after warm-up that the slope was fitted on.
    pub iterations: usize,
    /// Theil–Sen slope, bytes per iteration.
    pub slope_bytes_per_iteration: f64,
    /// Slope × the iterations after warm-up.
    pub growth_bytes: f64,
    /// Iterations ignored at the start.
    pub warmup: usize,
    /// Where the fitted line crosses iteration 0 (the Theil–Sen intercept:
    /// the median of `y - slope·x`), so the trend can be drawn.
    pub intercept_bytes: f64,
}

impl LeakFigures {
    /// Whether the iterations are the probe's steps (the figure its
    /// allocated memory), not the soak's runs; a schema-4 file's words
    /// for them start so.
    pub fn of_probe_steps(&self) -> bool {
        match &self.source {
            OrWritten::Data(LeakSource::ProbeSteps { .. }) => true,
            OrWritten::Data(LeakSource::SoakRuns) => false,
            OrWritten::Written(words) => words.starts_with("probe"),
        }
    }
}

/// The Theil–Sen slope of `(x, y)` points: `None` with fewer than two
/// distinct x.
pub fn theil_sen(points: &[(f64, f64)]) -> Option<f64> {
    let points: Vec<(f64, f64)> = if points.len() > MAX_POINTS {
        (0..MAX_POINTS)
            .map(|i| points[i * (points.len() - 1) / (MAX_POINTS - 1)])
            .collect()
    } else {
        points.to_vec()
    };
    let mut slopes = Vec::with_capacity(points.len() * points.len() / 2);
    for (i, a) in points.iter().enumerate() {
        for b in &points[i + 1..] {
            if b.0 != a.0 {
                slopes.push((b.1 - a.1) / (b.0 - a.0));
            }
        }
    }
    if slopes.is_empty() {
        return None;
    }
    slopes.sort_by(f64::total_cmp);
    let middle = slopes.len() / 2;
    Some(if slopes.len() % 2 == 1 {
        slopes[middle]
    } else {
        (slopes[middle - 1] + slopes[middle]) / 2.0
    })
}

/// The growth of a per-iteration series after `warmup` iterations, or
/// `None` when fewer than three iterations remain (not enough to tell).
pub fn growth(series: &[u64], warmup: usize, source: LeakSource) -> Option<LeakFigures> {
    let after: Vec<(f64, f64)> = series
        .iter()
        .enumerate()
        .skip(warmup)
        .map(|(i, v)| (i as f64, *v as f64))
        .collect();
    if after.len() < 3 {
        return None;
    }
    let slope = theil_sen(&after)?;
    let span = after.last().map_or(0.0, |p| p.0) - after[0].0;
    let mut offsets: Vec<f64> = after.iter().map(|(x, y)| y - slope * x).collect();
    offsets.sort_by(f64::total_cmp);
    let intercept = offsets[offsets.len() / 2];
    Some(LeakFigures {
        source: OrWritten::Data(source),
        iterations: after.len(),
        slope_bytes_per_iteration: slope,
        growth_bytes: slope * span,
        warmup,
        intercept_bytes: intercept,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn slope_of_lines_noise_and_outliers() {
        let line: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 3.0 * i as f64 + 7.0)).collect();
        assert_eq!(theil_sen(&line), Some(3.0));
        // A steady series with one huge spike keeps a slope of zero.
        let mut steady: Vec<(f64, f64)> = (0..20)
            .map(|i| (i as f64, 100.0 + (i % 3) as f64))
            .collect();
        steady[10].1 = 1e9;
        assert!(theil_sen(&steady).is_some_and(|s| s.abs() < 1.0));
        assert_eq!(theil_sen(&[(1.0, 5.0)]), None);
        assert_eq!(theil_sen(&[(1.0, 5.0), (1.0, 9.0)]), None);
    }

    #[test]
    fn growth_after_warmup() {
        // Warm-up climbs fast, then 8 MiB per step.
        let mut series = vec![0, 500 * MIB, 900 * MIB];
        series.extend((0..20).map(|i| 1000 * MIB + i * 8 * MIB));
        let forward = || LeakSource::ProbeSteps {
            phase: Some("forward".into()),
        };
        let figures = growth(&series, 3, forward()).expect("enough points");
        assert_eq!(figures.iterations, 20);
        assert!((figures.slope_bytes_per_iteration - (8 * MIB) as f64).abs() < 1.0);
        assert!((figures.growth_bytes - (19 * 8 * MIB) as f64).abs() < 1.0);
        // The fitted line passes through the points after warm-up.
        let at_3 = figures.intercept_bytes + 3.0 * figures.slope_bytes_per_iteration;
        assert!((at_3 - (1000 * MIB) as f64).abs() < 1.0, "{at_3}");
        assert_eq!(figures.source, OrWritten::Data(forward()));
        assert_eq!(
            growth(&series[..5], 3, LeakSource::SoakRuns),
            None,
            "two iterations after warm-up are not enough"
        );
    }

    #[test]
    fn long_series_are_thinned_not_quadratic() {
        let series: Vec<(f64, f64)> = (0..100_000).map(|i| (i as f64, 2.0 * i as f64)).collect();
        assert_eq!(theil_sen(&series), Some(2.0));
    }
}
