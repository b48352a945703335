//! The charts of report.html, as inline SVG under an HTML legend: the
//! run's overview (each case's peak against its baseline and budget,
//! `overview`), a case's memory over time from its `timeline.json` with
//! its gated peaks, budgets and baselines marked (`timeline`), a searched
//! case's memory against the searched value beside the locked capacity
//! (`capacity`), what its probe reported per step (`probe`), and its
//! figure over its recent runs in the run history (`trend`). Every
//! x–y chart is drawn the one way `plot` draws, on axes from 0 (`axis`).
//!
//! A timeline holds up to 2048 points per series, more than the chart has
//! pixels for, so each series is [`downsample`]d to
//! [`MAX_POINTS_PER_SERIES`] first. Like the timeline's own merging, it
//! keeps each group's highest point: a peak is never lowered or lost,
//! only the dips between samples may be.

mod axis;
mod capacity;
mod labels;
pub(super) mod overview;
mod plot;
mod probe;
mod timeline;
mod trend;

pub(super) use capacity::capacity_chart;
pub(super) use probe::probe_chart;
pub(super) use timeline::chart;
pub(super) use trend::trend_chart;

use crate::results::{CaseResult, CheckKind};

/// Points per series in a chart: about one per two pixels of its width.
pub const MAX_POINTS_PER_SERIES: usize = 400;

/// At most `max_points` of `points` (time, value), in time order: runs of
/// consecutive points become their highest one, at the moment it happened.
pub fn downsample(points: &[(f64, f64)], max_points: usize) -> Vec<(f64, f64)> {
    let max_points = max_points.max(1);
    if points.len() <= max_points {
        return points.to_vec();
    }
    // ceil(n / max) per group makes at most `max_points` groups.
    let group = points.len().div_ceil(max_points);
    points
        .chunks(group)
        .filter_map(|run| run.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1)))
        .collect()
}

/// A chart as HTML (its legend and SVG), and what it leaves out and why.
pub(super) struct Chart {
    pub(super) html: String,
    /// Lines not drawn, in words (`host budget 40.0 GiB: far above …`).
    pub(super) notes: Vec<String>,
}

/// A budget line is drawn when it is within this factor of the highest
/// figure; farther, it would squash the figures into a flat line at the
/// bottom of an axis from 0, and it is named under the chart instead.
const BUDGET_IN_VIEW: f64 = 2.0;

/// Colours of the series: one per figure, instance, phase or probe. Red
/// is kept for budgets and failures.
const PALETTE: [&str; 8] = [
    "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#7f7f7f",
];
const HOST_COLOUR: &str = "#1f77b4";
const GPU_COLOUR: &str = "#2ca02c";
const RED: &str = "#c62828";
const GPU_BUDGET_COLOUR: &str = "#ad1457";
const BASELINE_COLOUR: &str = "#424242";
const GREY: &str = "#9e9e9e";

/// A budget (or the devices' memory) as a dashed level named `label` —
/// unless it is far above the figures (see [`BUDGET_IN_VIEW`]): then a note
/// under the chart names it instead.
fn level_in_view(
    plot: &mut plot::Plot,
    notes: &mut Vec<String>,
    highest: f64,
    (label, about): (&str, String),
    bytes: u64,
    colour: &'static str,
) {
    if highest > 0.0 && bytes as f64 > highest * BUDGET_IN_VIEW {
        notes.push(format!(
            "{label} {} is far above these figures: not drawn, so they keep their scale",
            crate::units::Bytes(bytes)
        ));
        return;
    }
    plot.levels.push(plot::Level {
        label: format!("{label} {}", crate::units::Bytes(bytes)),
        about,
        y: bytes as f64,
        colour,
        dash: plot::Dash::Dashed,
    });
}

/// The limit of the case's check of this kind (a budget), if it has one.
fn limit(case: &CaseResult, kind: CheckKind) -> Option<u64> {
    case.checks
        .iter()
        .find(|c| c.kind == kind)
        .and_then(|c| c.limit_bytes)
}

/// Whether the case's GPU memory is worth drawing: measured above zero, or
/// held to a GPU budget or baseline. A host-only workload on a GPU machine
/// reads 0 B on the GPU, a line that says nothing.
fn gpu_matters(case: &CaseResult) -> bool {
    case.gpu_peak_bytes.is_some_and(|b| b > 0)
        || limit(case, CheckKind::GpuBudget).is_some()
        || case
            .baseline
            .as_ref()
            .and_then(|b| b.gpu.baseline_bytes)
            .is_some_and(|b| b > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(n: usize) -> Vec<(f64, f64)> {
        (0..n).map(|i| (i as f64, (i % 7) as f64)).collect()
    }

    fn highest(points: &[(f64, f64)]) -> f64 {
        points.iter().map(|p| p.1).fold(f64::MIN, f64::max)
    }

    #[test]
    fn short_series_are_kept_whole() {
        for n in [0, 1, 399, 400] {
            assert_eq!(downsample(&ramp(n), 400), ramp(n), "{n} points");
        }
    }

    #[test]
    fn long_series_are_bounded() {
        for n in [401, 799, 800, 801, 2048, 100_000] {
            let kept = downsample(&ramp(n), 400);
            assert!(
                kept.len() <= 400 && kept.len() >= 200,
                "{n} -> {}",
                kept.len()
            );
            assert!(kept.windows(2).all(|w| w[0].0 < w[1].0), "in time order");
        }
    }

    #[test]
    fn a_one_sample_spike_survives_with_its_moment() {
        for at in [0, 1, 1023, 2046, 2047] {
            let mut points: Vec<(f64, f64)> = (0..2048).map(|i| (i as f64, 10.0)).collect();
            points[at].1 = 5000.0;
            let kept = downsample(&points, 400);
            assert!(kept.contains(&(at as f64, 5000.0)), "spike at {at}");
            assert_eq!(highest(&kept), highest(&points));
        }
    }

    #[test]
    fn no_value_is_raised_or_invented() {
        let points = ramp(3000);
        for kept in downsample(&points, 400) {
            assert!(points.contains(&kept), "{kept:?} is a real point");
        }
    }

    #[test]
    fn a_zero_bound_still_keeps_the_peak() {
        let kept = downsample(&ramp(50), 0);
        assert_eq!(kept.len(), 1);
        assert_eq!(highest(&kept), 6.0);
    }
}
