//! Which cases get a chart and a section in report.html.
//!
//! A chart costs tens of kilobytes and a section can carry 128 KiB of log
//! tails, so a suite of thousands of cases cannot have one of each per case.
//! Up to [`CHART_CAP`] cases, every case is charted. Beyond it, the cases
//! worth a look are, in this order: those that did not pass, those that
//! regressed against the baseline, and the [`TOP_BY_PEAK`] largest host and
//! GPU peaks; at most [`CHART_CAP`] of them. Every case keeps a row in the
//! page's table. The choice is a pure function of a few figures per case
//! ([`Candidate`]), so it is tested without building whole results.

use crate::baseline::Outcome;
use crate::results::CaseResult;

/// The most cases report.html charts.
pub const CHART_CAP: usize = 50;

/// How many of the largest host peaks, and of the largest GPU peaks, are
/// charted in a suite larger than [`CHART_CAP`].
pub const TOP_BY_PEAK: usize = 5;

/// What the choice needs to know about a case.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Candidate {
    pub passed: bool,
    pub regressed: bool,
    pub host_peak_bytes: Option<u64>,
    pub gpu_peak_bytes: Option<u64>,
}

impl Candidate {
    pub fn of(case: &CaseResult) -> Self {
        Candidate {
            passed: case.status.ok(),
            regressed: case
                .baseline
                .as_ref()
                .is_some_and(|b| b.figures().iter().any(|f| f.outcome == Outcome::Regressed)),
            host_peak_bytes: case.host.peak_bytes,
            gpu_peak_bytes: case.gpu_peak_bytes,
        }
    }
}

/// Why a case is charted; a case charted for several reasons shows the
/// first of this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The suite is small enough to chart every case.
    Every,
    NotPassed,
    Regressed,
    LargestGpuPeak,
    LargestHostPeak,
}

/// The charted cases and what the page says about the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChartPlan {
    /// Indices into the cases, in run order, with why each is charted.
    pub charted: Vec<(usize, Reason)>,
    /// Cases that did not pass but found no room under the cap.
    pub not_passed_uncharted: usize,
}

impl ChartPlan {
    pub fn reason(&self, index: usize) -> Option<Reason> {
        self.charted
            .binary_search_by_key(&index, |(i, _)| *i)
            .ok()
            .map(|at| self.charted[at].1)
    }

    pub fn count(&self, reason: Reason) -> usize {
        self.charted.iter().filter(|(_, r)| *r == reason).count()
    }
}

pub fn plan(cases: &[Candidate]) -> ChartPlan {
    if cases.len() <= CHART_CAP {
        return ChartPlan {
            charted: (0..cases.len()).map(|i| (i, Reason::Every)).collect(),
            not_passed_uncharted: 0,
        };
    }
    let mut reasons: Vec<Option<Reason>> = vec![None; cases.len()];
    let mut room = CHART_CAP;
    let mut choose = |wanted: &mut dyn Iterator<Item = usize>, reason: Reason| {
        for index in wanted {
            if room == 0 {
                break;
            }
            if reasons[index].is_none() {
                reasons[index] = Some(reason);
                room -= 1;
            }
        }
    };
    choose(
        &mut (0..cases.len()).filter(|&i| !cases[i].passed),
        Reason::NotPassed,
    );
    choose(
        &mut (0..cases.len()).filter(|&i| cases[i].regressed),
        Reason::Regressed,
    );
    choose(
        &mut largest(cases, |c| c.gpu_peak_bytes).into_iter(),
        Reason::LargestGpuPeak,
    );
    choose(
        &mut largest(cases, |c| c.host_peak_bytes).into_iter(),
        Reason::LargestHostPeak,
    );
    let charted: Vec<(usize, Reason)> = reasons
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.map(|r| (i, r)))
        .collect();
    let not_passed_uncharted = cases
        .iter()
        .zip(&reasons)
        .filter(|(c, r)| !c.passed && r.is_none())
        .count();
    ChartPlan {
        charted,
        not_passed_uncharted,
    }
}

/// The indices of the [`TOP_BY_PEAK`] largest known figures, largest first;
/// among equal figures the earlier case.
fn largest(cases: &[Candidate], figure: fn(&Candidate) -> Option<u64>) -> Vec<usize> {
    let mut known: Vec<(u64, usize)> = cases
        .iter()
        .enumerate()
        .filter_map(|(i, c)| figure(c).map(|bytes| (bytes, i)))
        .collect();
    known.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    known
        .into_iter()
        .take(TOP_BY_PEAK)
        .map(|(_, i)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passing(n: usize) -> Vec<Candidate> {
        (0..n)
            .map(|i| Candidate {
                passed: true,
                host_peak_bytes: Some(1000 + i as u64 % 17),
                ..Candidate::default()
            })
            .collect()
    }

    fn indices(plan: &ChartPlan, reason: Reason) -> Vec<usize> {
        plan.charted
            .iter()
            .filter(|(_, r)| *r == reason)
            .map(|(i, _)| *i)
            .collect()
    }

    #[test]
    fn a_suite_up_to_the_cap_charts_every_case() {
        for n in [0, 1, CHART_CAP] {
            let plan = plan(&passing(n));
            assert_eq!(plan.charted.len(), n);
            assert_eq!(plan.count(Reason::Every), n);
        }
    }

    #[test]
    fn one_case_over_the_cap_charts_only_the_largest() {
        let plan = plan(&passing(CHART_CAP + 1));
        assert_eq!(plan.charted.len(), TOP_BY_PEAK);
        assert_eq!(plan.count(Reason::LargestHostPeak), TOP_BY_PEAK);
    }

    #[test]
    fn a_failing_case_is_always_charted_first() {
        for at in [0, 999, 1999] {
            let mut cases = passing(2000);
            cases[at].passed = false;
            cases[at].host_peak_bytes = None; // not even a figure
            let plan = plan(&cases);
            assert_eq!(plan.reason(at), Some(Reason::NotPassed), "case {at}");
            assert_eq!(plan.not_passed_uncharted, 0);
        }
    }

    #[test]
    fn failures_beyond_the_cap_are_counted_not_charted() {
        let mut cases = passing(2000);
        for case in cases.iter_mut().step_by(10) {
            case.passed = false; // 200 failures
        }
        let plan = plan(&cases);
        assert_eq!(plan.charted.len(), CHART_CAP);
        assert_eq!(plan.count(Reason::NotPassed), CHART_CAP);
        assert_eq!(plan.not_passed_uncharted, 200 - CHART_CAP);
        // The first failures in run order, so the page is predictable.
        assert_eq!(indices(&plan, Reason::NotPassed)[..3], [0, 10, 20]);
    }

    #[test]
    fn regressions_come_after_failures() {
        let mut cases = passing(100);
        cases[7].regressed = true;
        cases[8].regressed = true;
        cases[8].passed = false;
        let plan = plan(&cases);
        assert_eq!(plan.reason(7), Some(Reason::Regressed));
        assert_eq!(plan.reason(8), Some(Reason::NotPassed));
    }

    #[test]
    fn the_largest_peaks_of_each_figure_are_charted() {
        let mut cases = passing(500);
        for (i, case) in cases.iter_mut().enumerate() {
            case.gpu_peak_bytes = Some(i as u64);
            case.host_peak_bytes = Some(10_000 - i as u64);
        }
        cases[250].gpu_peak_bytes = None; // unknown is not large
        let plan = plan(&cases);
        assert_eq!(
            indices(&plan, Reason::LargestGpuPeak),
            [495, 496, 497, 498, 499]
        );
        assert_eq!(indices(&plan, Reason::LargestHostPeak), [0, 1, 2, 3, 4]);
        assert_eq!(plan.charted.len(), 2 * TOP_BY_PEAK);
    }

    #[test]
    fn a_large_peak_already_charted_is_not_charted_twice() {
        let mut cases = passing(100);
        cases[3].host_peak_bytes = Some(u64::MAX);
        cases[3].passed = false;
        let plan = plan(&cases);
        assert_eq!(plan.reason(3), Some(Reason::NotPassed));
        // Four more largest host peaks beside the failure.
        assert_eq!(plan.count(Reason::LargestHostPeak), TOP_BY_PEAK - 1);
    }

    #[test]
    fn equal_peaks_prefer_the_earlier_case() {
        let mut cases = passing(100);
        for case in &mut cases {
            case.host_peak_bytes = Some(42);
        }
        let plan = plan(&cases);
        assert_eq!(indices(&plan, Reason::LargestHostPeak), [0, 1, 2, 3, 4]);
    }

    #[test]
    fn charted_cases_are_in_run_order() {
        let mut cases = passing(300);
        cases[299].passed = false;
        cases[5].regressed = true;
        let plan = plan(&cases);
        assert!(plan.charted.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(plan.charted.len() <= CHART_CAP);
    }
}
