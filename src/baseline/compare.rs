//! Comparing a figure with its baseline: pure functions, table tested at
//! every boundary.
//!
//! A regression is `new > base × (1 + relative) + absolute`; an improvement
//! is the mirror image, `new < base × (1 − relative) − absolute`. Anything
//! between is within tolerance. "Not enough data" (no baseline, an unknown
//! figure) is its own outcome, never an error and never a pass in disguise.

use serde::{Deserialize, Serialize};

use crate::suite::Tolerance;
use crate::units::Bytes;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Within,
    Regressed,
    Improved,
    /// The lock has no figure for this case.
    #[default]
    NoBaseline,
    /// This run has no figure (not measured, or unknown).
    Unknown,
    /// Not compared (GPU model changed).
    Skipped,
}

/// A figure compared with its baseline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Figure {
    /// The gated host peak.
    #[default]
    Host,
    /// The GPU peak over the case's devices.
    Gpu,
    /// The allocator's peak the workload's probe reported.
    Allocated,
    /// The case's working memory: its anonymous + shmem peak, what the
    /// kernel cannot reclaim without swap (`host_working_peak_bytes`).
    Working,
    /// GPU memory outside the framework's allocator, its peak
    /// (`outside_allocator_peak_bytes`).
    Outside,
}

impl Figure {
    pub const ALL: [Figure; 5] = [
        Figure::Host,
        Figure::Gpu,
        Figure::Allocated,
        Figure::Working,
        Figure::Outside,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Figure::Host => "host",
            Figure::Gpu => "gpu",
            Figure::Allocated => "allocated",
            Figure::Working => "working",
            Figure::Outside => "outside_allocator",
        }
    }
}

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no compared figure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a compared figure (host, gpu, allocated, working, outside_allocator)")]
pub struct UnknownFigure(String);

impl std::str::FromStr for Figure {
    type Err = UnknownFigure;

    fn from_str(name: &str) -> Result<Self, UnknownFigure> {
        Figure::ALL
            .into_iter()
            .find(|f| f.as_str() == name)
            .ok_or_else(|| UnknownFigure(name.to_string()))
    }
}

/// The tolerance a figure was compared with its baseline under:
/// `new > base × (1 + relative) + absolute` is a regression.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AppliedTolerance {
    pub relative: f64,
    pub absolute_bytes: u64,
    /// How many locked spreads a figure may move (see [`SpreadBound`]);
    /// results and locks written before it had the default.
    #[serde(default = "default_spread_k")]
    pub spread_k: f64,
}

fn default_spread_k() -> f64 {
    crate::suite::DEFAULT_SPREAD_K
}

impl From<Tolerance> for AppliedTolerance {
    fn from(tolerance: Tolerance) -> Self {
        AppliedTolerance {
            relative: tolerance.relative,
            absolute_bytes: tolerance.absolute.get(),
            spread_k: tolerance.spread_k,
        }
    }
}

impl From<AppliedTolerance> for Tolerance {
    fn from(tolerance: AppliedTolerance) -> Self {
        Tolerance {
            relative: tolerance.relative,
            absolute: Bytes(tolerance.absolute_bytes),
            spread_k: tolerance.spread_k,
        }
    }
}

/// The spread a figure showed over the locked runs (`lock --repeat N`:
/// the largest less the smallest), and the bound it gives: a run is a
/// regression only beyond `max(tolerance, k × spread)`, so a figure that
/// is noisy by nature does not fail an unchanged build.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpreadBound {
    pub spread_bytes: u64,
    pub k: f64,
    /// Whether `k × spread` was the wider bound, and so the one applied.
    pub applied: bool,
}

/// The tolerances a case is judged with against its baseline, recorded
/// with its results (and in the lock), so that `oomgate diff` judges a
/// results file as its run did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CaseTolerances {
    pub host: AppliedTolerance,
    pub gpu: AppliedTolerance,
    /// The working memory's; results and locks written before it was
    /// gated have the default.
    #[serde(default = "default_working_tolerance")]
    pub working: AppliedTolerance,
    /// GPU memory outside the allocator's; results and locks written
    /// before it was gated have the default.
    #[serde(default = "default_outside_tolerance")]
    pub outside: AppliedTolerance,
    /// With `search`: how far below the locked capacity a run may land.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<crate::capacity::Tolerance>,
}

fn default_working_tolerance() -> AppliedTolerance {
    crate::suite::Tolerances::default().working.into()
}

fn default_outside_tolerance() -> AppliedTolerance {
    crate::suite::Tolerances::default().outside.into()
}

impl CaseTolerances {
    pub fn figures(&self) -> crate::suite::Tolerances {
        crate::suite::Tolerances {
            host: self.host.into(),
            gpu: self.gpu.into(),
            working: self.working.into(),
            outside: self.outside.into(),
        }
    }
}

impl From<crate::suite::Tolerances> for CaseTolerances {
    fn from(tolerances: crate::suite::Tolerances) -> Self {
        CaseTolerances {
            host: tolerances.host.into(),
            gpu: tolerances.gpu.into(),
            working: tolerances.working.into(),
            outside: tolerances.outside.into(),
            capacity: None,
        }
    }
}

/// Why a figure was not compared with its baseline, or not gated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NotCompared {
    /// The host figure was locked as measured by another method.
    HostMethod { locked: String, now: String },
    /// Written by oomgate before every floor was compared (results read
    /// back, never made now): the host figure's floor the lock was taken
    /// on was not observed that run.
    HostSource {
        locked: crate::measure::host::HostFloor,
        now: Option<crate::measure::host::HostFloor>,
    },
    /// The GPU models differ from the baseline's.
    GpuModels,
    /// The GPU figure was locked as measured another way: torch's
    /// allocator in a shared pytest session against NVML in a process of
    /// its own (the CUDA context is in one and not the other).
    GpuMethod { locked: String, now: String },
    /// A device delta taken beside another process.
    Tainted,
    /// `diff` of two locks: the later lock has no such figure (a lock
    /// leaves out one that was not the case's own).
    NotInLock,
    /// The capacity moved, so the peaks are of another workload size.
    CapacityMoved {
        param: String,
        locked: u64,
        value: u64,
    },
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FigureComparison {
    pub figure: Figure,
    pub outcome: Outcome,
    pub new_bytes: Option<u64>,
    pub baseline_bytes: Option<u64>,
    /// `new - baseline`, signed.
    pub delta_bytes: Option<i64>,
    /// Relative change; `None` when the baseline is zero.
    pub delta_ratio: Option<f64>,
    /// Largest value that is not a regression.
    pub limit_bytes: Option<u64>,
    /// The tolerance applied; `None` when nothing was compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<AppliedTolerance>,
    /// The locked spread, when the lock has one, and whether its bound
    /// was the one applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<SpreadBound>,
    /// Why it was not compared (`outcome` `skipped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_compared: Option<NotCompared>,
    /// A floor of the host figure that grew past the bound in this run
    /// against the same floor of the lock (the largest such growth), while
    /// the gated figure itself may not have: it fails the host figure as
    /// much as the gated figure would (see `compare_case`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_breach: Option<FloorBreach>,
    /// The host figure (or one of its floors) went past its bound in a
    /// floor that counts file pages while the working memory, read often
    /// enough to see its peak, stayed within its own: the growth is in
    /// what the page cache held, not the workload's, and is not a
    /// regression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anon_within: Option<AnonWithin>,
    /// The comparison in words, as its check words it (`report::words`).
    #[serde(default)]
    pub message: String,
}

/// The working memory of a run and of its lock (see
/// `HostFloors::anon_shmem`), within the working tolerance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnonWithin {
    pub now_bytes: u64,
    pub locked_bytes: u64,
}

/// One floor of the host figure, past its bound against the same floor
/// of the lock: both figures, so the delta worded beside them is theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FloorBreach {
    pub floor: crate::measure::host::HostFloor,
    pub now_bytes: u64,
    pub locked_bytes: u64,
    /// The largest value of that floor that is not a regression.
    pub limit_bytes: u64,
}

impl FigureComparison {
    /// This figure, not compared for `why`.
    pub fn not_compared(mut self, why: NotCompared) -> Self {
        self.outcome = Outcome::Skipped;
        self.not_compared = Some(why);
        self
    }
}

/// `5% + 64.0 MiB`
pub fn describe_tolerance(tolerance: Tolerance) -> String {
    format!("{} + {}", percent(tolerance.relative), tolerance.absolute)
}

fn percent(ratio: f64) -> String {
    let value = ratio * 100.0;
    if (value - value.round()).abs() < 1e-9 {
        format!("{value:.0}%")
    } else {
        format!("{value:.1}%")
    }
}

/// A change as `+8.4%` / `-12.0%`; a change that rounds to zero is `+0.0%`.
pub fn signed_percent(ratio: f64) -> String {
    let value = ratio * 100.0;
    if value.abs() < 0.05 {
        "+0.0%".to_string()
    } else {
        format!("{value:+.1}%")
    }
}

/// The relative tolerance in parts per million: limits are computed in
/// integers, so a value exactly at the limit is never misjudged by a
/// floating-point rounding (`1.0 + 0.15` is just below 1.15).
fn parts_per_million(relative: f64) -> u128 {
    (relative * 1_000_000.0).round().max(0.0) as u128
}

/// `base × relative`, rounded down (`up`: rounded up), exactly.
fn scaled(base: u64, relative: f64, up: bool) -> u128 {
    let product = u128::from(base) * parts_per_million(relative);
    if up {
        product.div_ceil(1_000_000)
    } else {
        product / 1_000_000
    }
}

/// The largest value within tolerance above `base`.
pub fn upper_limit(base: u64, tolerance: Tolerance) -> u64 {
    let limit = u128::from(base)
        + scaled(base, tolerance.relative, false)
        + u128::from(tolerance.absolute.get());
    u64::try_from(limit).unwrap_or(u64::MAX)
}

/// The smallest value within tolerance below `base`.
pub fn lower_limit(base: u64, tolerance: Tolerance) -> u64 {
    let margin = scaled(base, tolerance.relative, true) + u128::from(tolerance.absolute.get());
    u64::try_from(u128::from(base).saturating_sub(margin)).unwrap_or(0)
}

/// Compare one figure with its baseline, and the spread the locked runs
/// showed when the lock has one.
pub fn compare(
    figure: Figure,
    new: Option<u64>,
    base: Option<u64>,
    tolerance: Tolerance,
    spread: Option<u64>,
) -> FigureComparison {
    let mut result = FigureComparison {
        figure,
        outcome: Outcome::Within,
        new_bytes: new,
        baseline_bytes: base,
        delta_bytes: None,
        delta_ratio: None,
        limit_bytes: None,
        tolerance: None,
        spread: None,
        not_compared: None,
        floor_breach: None,
        anon_within: None,
        message: String::new(),
    };
    let (new, base) = match (new, base) {
        (_, None) => {
            result.outcome = Outcome::NoBaseline;
            return result;
        }
        (None, Some(_)) => {
            result.outcome = Outcome::Unknown;
            return result;
        }
        (Some(new), Some(base)) => (new, base),
    };
    let delta = i128::from(new) - i128::from(base);
    result.delta_bytes = i64::try_from(delta).ok();
    result.delta_ratio = (base > 0).then(|| delta as f64 / base as f64);
    let mut limit = upper_limit(base, tolerance);
    let mut lower = lower_limit(base, tolerance);
    if let Some(spread_bytes) = spread.filter(|_| tolerance.spread_k > 0.0) {
        let margin = (spread_bytes as f64 * tolerance.spread_k).ceil();
        let margin = if margin >= u64::MAX as f64 {
            u64::MAX
        } else {
            margin as u64
        };
        let applied = margin > limit - base;
        if applied {
            limit = base.saturating_add(margin);
            lower = lower.min(base.saturating_sub(margin));
        }
        result.spread = Some(SpreadBound {
            spread_bytes,
            k: tolerance.spread_k,
            applied,
        });
    }
    result.limit_bytes = Some(limit);
    result.tolerance = Some(tolerance.into());
    result.outcome = if new > limit {
        Outcome::Regressed
    } else if new < lower {
        Outcome::Improved
    } else {
        Outcome::Within
    };
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    fn tolerance(relative: f64, absolute_mib: u64) -> Tolerance {
        Tolerance {
            relative,
            absolute: Bytes(absolute_mib * MIB),
            spread_k: 3.0,
        }
    }

    #[test]
    fn boundaries() {
        let t = tolerance(0.05, 64);
        let base = 1000 * MIB;
        let limit = upper_limit(base, t); // 1050 MiB + 64 MiB
        assert_eq!(limit, 1114 * MIB);
        let table: &[(Option<u64>, Option<u64>, Outcome)] = &[
            (Some(base), Some(base), Outcome::Within),
            (Some(limit), Some(base), Outcome::Within),
            (Some(limit + 1), Some(base), Outcome::Regressed),
            (Some(lower_limit(base, t)), Some(base), Outcome::Within),
            (
                Some(lower_limit(base, t) - 1),
                Some(base),
                Outcome::Improved,
            ),
            (Some(0), Some(0), Outcome::Within),
            (Some(64 * MIB), Some(0), Outcome::Within),
            (Some(64 * MIB + 1), Some(0), Outcome::Regressed),
            (Some(5), None, Outcome::NoBaseline),
            (None, None, Outcome::NoBaseline),
            (None, Some(base), Outcome::Unknown),
            (Some(u64::MAX), Some(u64::MAX), Outcome::Within),
        ];
        for (new, old, expected) in table {
            let result = compare(Figure::Gpu, *new, *old, t, None);
            assert_eq!(
                result.outcome, *expected,
                "{new:?} vs {old:?}: {}",
                result.message
            );
        }
    }

    /// Regression: with 15%, `1.0 + 0.15` rounded below 1.15 in floating
    /// point and a value exactly at the limit counted as a regression.
    #[test]
    fn exactly_at_the_limit_passes_for_every_tolerance() {
        for percent in [3u64, 7, 15, 20, 25, 30, 33] {
            let t = tolerance(percent as f64 / 100.0, 64);
            for base_mib in [3u64, 7, 20, 25, 30, 1000, 80_000] {
                let base = base_mib * MIB;
                let limit = base + base * percent / 100 + 64 * MIB;
                assert_eq!(upper_limit(base, t), limit, "{percent}% of {base_mib} MiB");
                assert_eq!(
                    compare(Figure::Gpu, Some(limit), Some(base), t, None).outcome,
                    Outcome::Within
                );
                assert_eq!(
                    compare(Figure::Gpu, Some(limit + 1), Some(base), t, None).outcome,
                    Outcome::Regressed
                );
            }
        }
    }

    #[test]
    fn zero_tolerance_is_exact() {
        let t = tolerance(0.0, 0);
        assert_eq!(
            compare(Figure::Host, Some(100), Some(100), t, None).outcome,
            Outcome::Within
        );
        assert_eq!(
            compare(Figure::Host, Some(101), Some(100), t, None).outcome,
            Outcome::Regressed
        );
        assert_eq!(
            compare(Figure::Host, Some(99), Some(100), t, None).outcome,
            Outcome::Improved
        );
    }

    /// A noisy figure is a regression only beyond `k ×` its locked spread
    /// when that is wider than the tolerance; the comparison says which
    /// bound applied.
    #[test]
    fn a_locked_spread_widens_the_bound_only_when_wider() {
        let t = tolerance(0.05, 16);
        let base = 1000 * MIB;
        // 3 × 40 MiB = 120 MiB > 50 + 16 MiB: the spread's bound applies.
        let wide = compare(
            Figure::Host,
            Some(base + 120 * MIB),
            Some(base),
            t,
            Some(40 * MIB),
        );
        assert_eq!(wide.outcome, Outcome::Within);
        assert_eq!(wide.limit_bytes, Some(base + 120 * MIB));
        assert_eq!(
            wide.spread,
            Some(SpreadBound {
                spread_bytes: 40 * MIB,
                k: 3.0,
                applied: true
            })
        );
        let beyond = compare(
            Figure::Host,
            Some(base + 120 * MIB + 1),
            Some(base),
            t,
            Some(40 * MIB),
        );
        assert_eq!(beyond.outcome, Outcome::Regressed);
        // Improvements mirror it.
        let down = compare(
            Figure::Host,
            Some(base - 100 * MIB),
            Some(base),
            t,
            Some(40 * MIB),
        );
        assert_eq!(down.outcome, Outcome::Within);
        // 3 × 5 MiB < 66 MiB: the tolerance applies, the spread is noted.
        let narrow = compare(
            Figure::Host,
            Some(base + 67 * MIB),
            Some(base),
            t,
            Some(5 * MIB),
        );
        assert_eq!(narrow.outcome, Outcome::Regressed);
        assert_eq!(narrow.spread.map(|s| s.applied), Some(false));
        // spread_k = 0 turns it off.
        let off = Tolerance { spread_k: 0.0, ..t };
        let off = compare(
            Figure::Host,
            Some(base + 100 * MIB),
            Some(base),
            off,
            Some(40 * MIB),
        );
        assert_eq!((off.outcome, off.spread), (Outcome::Regressed, None));
    }
}
