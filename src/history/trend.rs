//! Steps and creep in one figure's past: pure functions over its values,
//! oldest first, table-tested. The judge holds a run's figure against
//! them (`judge::history`).
//!
//! - A **step** is a level shift beyond the series' own noise: a value
//!   that leaves the level of the runs before it (the median of up to the
//!   last five of its stretch) by more than the series' noise, followed
//!   by one that stays on the same side (the latest value, which nothing
//!   follows yet, is a step of its own). Allocator figures (the probe's)
//!   are steady to about a MiB: their noise is [`EXACT_NOISE_BYTES`].
//!   Sampled figures get four times their noise, estimated from the
//!   spread of consecutive differences (a median, so a step itself does
//!   not widen it), and at least 1% of their level and a MiB.
//! - The **ratchet** is the lowest level among the runs that passed in
//!   the window, each level the median of three consecutive such runs (so
//!   one noisy low run never sets it), or the level last accepted, when
//!   that is in the window: only runs after it count then. Creep is the
//!   growth of a run's figure over the ratchet; the series' noise never
//!   widens a creep limit.

/// The noise of a figure the allocator reports: it is exact, and moves by
/// a block at a time.
pub const EXACT_NOISE_BYTES: f64 = 1024.0 * 1024.0;

/// How steady a figure is between unchanged runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steadiness {
    /// Reported by the allocator (the probe's `peak_allocated`).
    Exact,
    /// Sampled, or read by the kernel: noisy by its own spread.
    Sampled,
}

/// A level shift: the value at `at` (an index into the values) and after
/// it stand at `after`, the runs before it at `before`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub at: usize,
    pub before: f64,
    pub after: f64,
}

impl Step {
    /// Its size as a fraction of the level before it.
    pub fn relative(&self) -> f64 {
        if self.before > 0.0 {
            (self.after - self.before) / self.before
        } else {
            0.0
        }
    }
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// The smallest change that is a step in `values`.
pub fn step_threshold(values: &[f64], steadiness: Steadiness) -> f64 {
    if steadiness == Steadiness::Exact {
        return EXACT_NOISE_BYTES;
    }
    let level = median(&mut values.to_vec());
    let mut differences: Vec<f64> = values.windows(2).map(|w| w[1] - w[0]).collect();
    let centre = median(&mut differences.clone());
    let mut deviations: Vec<f64> = differences
        .iter_mut()
        .map(|d| (*d - centre).abs())
        .collect();
    // MAD → σ of one difference → σ of one value.
    let sigma = 1.4826 * median(&mut deviations) / std::f64::consts::SQRT_2;
    (4.0 * sigma).max(0.01 * level.abs()).max(EXACT_NOISE_BYTES)
}

/// Every step in `values` (oldest first).
pub fn steps(values: &[f64], steadiness: Steadiness) -> Vec<Step> {
    let threshold = step_threshold(values, steadiness);
    let mut found = Vec::new();
    let mut stretch_start = 0;
    let mut at = 1;
    while at < values.len() {
        let from = stretch_start.max(at.saturating_sub(5));
        let level = median(&mut values[from..at].to_vec());
        let change = values[at] - level;
        if change.abs() > threshold {
            let confirmed = match values.get(at + 1) {
                None => true,
                Some(next) => {
                    (next - level).abs() > threshold && (next - level).signum() == change.signum()
                }
            };
            if confirmed {
                let to = (at + 3).min(values.len());
                found.push(Step {
                    at,
                    before: level,
                    after: median(&mut values[at..to].to_vec()),
                });
                stretch_start = at;
            }
        }
        at += 1;
    }
    found
}

/// One past run's value, as the ratchet reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Past {
    pub value: f64,
    /// The case passed in that run.
    pub passed: bool,
    pub started_ms: i64,
}

/// The ratchet's level, and what set it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratchet {
    pub level: f64,
    pub set_by: SetBy,
}

/// What set a ratchet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetBy {
    /// The runs from this one (an index into the past) on.
    Runs { from: usize },
    /// An explicit acceptance of the level.
    Accepted,
}

/// The ratchet of `past` (oldest first) over the runs that started at or
/// after `since_ms`, and after `accepted` (its level and when) when there
/// is one; `None` when no run counts and nothing was accepted.
pub fn ratchet(past: &[Past], since_ms: i64, accepted: Option<(f64, i64)>) -> Option<Ratchet> {
    let after = accepted.map_or(since_ms, |(_, at)| at.max(since_ms));
    let counted: Vec<(usize, f64)> = past
        .iter()
        .enumerate()
        .filter(|(_, p)| p.passed && p.started_ms >= after && p.value.is_finite())
        .map(|(i, p)| (i, p.value))
        .collect();
    let levels: Vec<(usize, f64)> = match counted.len() {
        0 => Vec::new(),
        // Too few for a median of three: one noisy low run must not set
        // the ratchet, so two give the larger.
        1 => counted.clone(),
        2 => vec![if counted[1].1 > counted[0].1 {
            counted[1]
        } else {
            counted[0]
        }],
        _ => counted
            .windows(3)
            .map(|w| (w[0].0, median(&mut [w[0].1, w[1].1, w[2].1])))
            .collect(),
    };
    let from_runs = levels
        .into_iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(from, level)| Ratchet {
            level,
            set_by: SetBy::Runs { from },
        });
    let from_accepted = accepted
        .filter(|(_, at)| *at >= since_ms)
        .map(|(level, _)| Ratchet {
            level,
            set_by: SetBy::Accepted,
        });
    match (from_runs, from_accepted) {
        (Some(runs), Some(accepted)) if runs.level < accepted.level => Some(runs),
        (_, Some(accepted)) => Some(accepted),
        (runs, None) => runs,
    }
}

/// How much `now` grew over `ratchet`, as a fraction of it.
pub fn growth(now: f64, ratchet: &Ratchet) -> f64 {
    if ratchet.level > 0.0 {
        (now - ratchet.level) / ratchet.level
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = 1024.0 * 1024.0;

    fn mib(values: &[f64]) -> Vec<f64> {
        values.iter().map(|v| v * MIB).collect()
    }

    #[test]
    fn five_small_steps_are_five_steps() {
        // +3% each, with a few tenths of a percent of noise.
        let values = mib(&[
            1000.0, 1002.0, 999.0, 1030.0, 1031.0, 1029.0, 1061.0, 1060.0, 1093.0, 1092.0, 1094.0,
            1126.0, 1125.0, 1160.0,
        ]);
        let found = steps(&values, Steadiness::Sampled);
        let at: Vec<usize> = found.iter().map(|s| s.at).collect();
        assert_eq!(at, [3, 6, 8, 11, 13], "{found:?}");
        assert!(
            found.iter().all(|s| (0.025..0.035).contains(&s.relative())),
            "{found:?}"
        );
    }

    #[test]
    fn noise_and_one_outlier_are_no_step() {
        let values = mib(&[1000.0, 1004.0, 997.0, 1003.0, 1060.0, 1001.0, 998.0, 1002.0]);
        assert_eq!(steps(&values, Steadiness::Sampled), []);
    }

    #[test]
    fn the_latest_value_is_a_step_of_its_own() {
        let values = mib(&[1000.0, 1001.0, 999.0, 1100.0]);
        let found = steps(&values, Steadiness::Sampled);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].at, 3);
    }

    #[test]
    fn an_exact_figure_steps_at_a_mib() {
        let values = mib(&[100.0, 100.0, 102.0, 102.0]);
        assert_eq!(steps(&values, Steadiness::Exact).len(), 1);
        let values = mib(&[100.0, 100.0, 100.5, 100.5]);
        assert_eq!(steps(&values, Steadiness::Exact), []);
    }

    fn past(values: &[f64]) -> Vec<Past> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| Past {
                value: *v,
                passed: true,
                started_ms: i as i64 * 1000,
            })
            .collect()
    }

    #[test]
    fn the_ratchet_is_the_lowest_median_of_three_and_ignores_one_low_run() {
        let runs = past(&[100.0, 60.0, 101.0, 103.0, 106.0]);
        let ratchet = ratchet(&runs, 0, None).expect("a ratchet");
        assert_eq!(ratchet.level, 100.0);
        assert_eq!(ratchet.set_by, SetBy::Runs { from: 0 });
        // Creep in small steps is measured from where it began.
        let creeping = past(&[100.0, 100.0, 100.0, 103.0, 106.0, 109.0, 113.0, 116.0]);
        let level = super::ratchet(&creeping, 0, None).expect("a ratchet");
        assert!((growth(116.0, &level) - 0.16).abs() < 1e-9);
    }

    #[test]
    fn failed_runs_and_runs_before_the_window_do_not_count() {
        let mut runs = past(&[50.0, 50.0, 50.0, 100.0, 100.0, 100.0]);
        assert_eq!(ratchet(&runs, 3000, None).map(|r| r.level), Some(100.0));
        runs[3].passed = false;
        runs[4].passed = false;
        // One run counts: its own value.
        assert_eq!(ratchet(&runs, 3000, None).map(|r| r.level), Some(100.0));
        assert_eq!(ratchet(&runs, 9000, None), None);
    }

    #[test]
    fn an_accepted_level_moves_the_ratchet_and_only_later_runs_count() {
        let runs = past(&[100.0, 100.0, 100.0, 130.0, 130.0, 130.0]);
        let accepted = ratchet(&runs, 0, Some((130.0, 3000))).expect("a ratchet");
        assert_eq!(accepted.level, 130.0);
        assert_eq!(accepted.set_by, SetBy::Accepted);
        // Later runs that came down lower the ratchet again.
        let lower = past(&[100.0, 100.0, 100.0, 120.0, 120.0, 120.0]);
        let level = ratchet(&lower, 0, Some((130.0, 2500))).expect("a ratchet");
        assert_eq!(level.level, 120.0);
        // An acceptance before the window is forgotten with its runs.
        assert_eq!(
            ratchet(&runs, 4000, Some((130.0, 3000))).map(|r| r.set_by),
            Some(SetBy::Runs { from: 4 })
        );
    }
}
