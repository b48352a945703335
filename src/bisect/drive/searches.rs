//! The searches a driver runs: the ends proved (the good end's run
//! locked), a range bisected — segment by segment with `--all-steps`, a
//! batch at a time on a GPU pool — and a set of package changes
//! minimised; each answer with its why (the drift, the sites that grew).

use std::path::{Path, PathBuf};

use super::Driver;
use crate::bisect::axis::{Prepare, PrepareLinear};
use crate::bisect::packages::Sets;
use crate::bisect::search::{Bisection, Verdict, ddmin, log2_bound};
use crate::bisect::{Axis, BisectError, Bisected, Candidate, Ending, Finding, Role, Step};
use crate::results::RunResults;

impl Driver<'_> {
    /// Prove the good end: it passes on its own; its lock, written in its
    /// folder.
    fn prove_good(
        &mut self,
        axis: &mut dyn Prepare,
        candidates: &[Candidate],
        at: usize,
        segment: usize,
    ) -> Result<PathBuf, BisectError> {
        let (step, results) =
            self.try_candidate(axis, candidates, at, Role::GoodEnd, None, segment)?;
        let results = match (step.verdict, results) {
            (Verdict::Good, Some(results)) => results,
            _ => {
                return Err(BisectError::BadInput(format!(
                    "the good end {} is not good here: {}",
                    candidates[at].label,
                    step.reason.as_deref().unwrap_or("it failed")
                )));
            }
        };
        self.lock_of(
            &results,
            &self.folder(Role::GoodEnd, &candidates[at].label, segment),
        )
    }

    /// A lock from a run's results, written as `good.lock` in `folder`.
    fn lock_of(&self, results: &RunResults, folder: &Path) -> Result<PathBuf, BisectError> {
        let lock = crate::results::readback::lock_from_results(results)
            .map_err(|why| BisectError::BadInput(format!("its run cannot be locked: {why}")))?;
        let path = folder.join("good.lock");
        crate::baseline::write(&path, &lock)
            .map_err(|e| BisectError::Infrastructure(e.to_string()))?;
        Ok(path)
    }

    /// Bisect candidates `0..=last` (0 good, `last` bad) of a linear
    /// axis; with `all_steps`, again past each step found.
    pub(super) fn linear(
        &mut self,
        axis: &mut dyn PrepareLinear,
        kind: Axis,
        package: Option<String>,
        all_steps: bool,
    ) -> Result<Bisected, BisectError> {
        let candidates = axis.candidates().to_vec();
        let last = candidates.len() - 1;
        let slots = self.slots(axis.as_prepare());
        let mut bisected = self.answer(
            kind,
            package,
            slots,
            last.saturating_sub(1),
            log2_bound(last),
        );
        let result = self.linear_segments(axis.as_prepare(), &candidates, all_steps, &mut bisected);
        if let Some(package) = &bisected.package {
            for finding in &mut bisected.findings {
                finding.restore = Some(format!(
                    "pip install '{package}=={}'",
                    finding.last_good.candidate.id
                ));
            }
        }
        self.finish(bisected, result)
    }

    fn linear_segments(
        &mut self,
        axis: &mut dyn Prepare,
        candidates: &[Candidate],
        all_steps: bool,
        bisected: &mut Bisected,
    ) -> Result<(), BisectError> {
        let last = candidates.len() - 1;
        let mut from = 0usize;
        let mut lock = self.prove_good(axis, candidates, 0, 0)?;
        let mut segment = 0usize;
        loop {
            let (bad, _) =
                self.try_candidate(axis, candidates, last, Role::BadEnd, Some(&lock), segment)?;
            match bad.verdict {
                Verdict::Good if segment == 0 => {
                    bisected.ending = Ending::NotReproducible;
                    return Ok(());
                }
                Verdict::Good => return Ok(()),
                Verdict::Skip if segment == 0 => {
                    return Err(BisectError::BadInput(format!(
                        "the bad end {} cannot be judged here: {}",
                        candidates[last].label,
                        bad.reason.as_deref().unwrap_or("it did not run")
                    )));
                }
                Verdict::Skip => {
                    self.progress.note(&format!(
                        "no search past {}: the bad end cannot be judged against it ({})",
                        candidates[from].label,
                        bad.why().unwrap_or("it did not run")
                    ));
                    return Ok(());
                }
                Verdict::Bad => {}
            }
            let mut search = Bisection::new(last - from);
            let mut results_at = std::collections::HashMap::new();
            let slots = self.slots(axis);
            loop {
                let batch = search.next_batch(slots);
                if batch.is_empty() {
                    break;
                }
                let ats: Vec<usize> = batch.iter().map(|offset| from + offset).collect();
                let ran =
                    self.try_batch(axis, candidates, &ats, Role::Step, Some(&lock), segment)?;
                let verdicts: Vec<(usize, Verdict)> = batch
                    .iter()
                    .zip(&ran)
                    .map(|(offset, (step, _))| (*offset, step.verdict))
                    .collect();
                search.record_all(&verdicts);
                for (at, (_, results)) in ats.into_iter().zip(ran) {
                    if let Some(results) = results {
                        results_at.insert(at, results);
                    }
                }
            }
            let answer = search.answer();
            let (good_at, bad_at) = (from + answer.last_good, from + answer.first_bad);
            let finding = self.finding(
                candidates,
                good_at,
                bad_at,
                answer
                    .skipped_between
                    .iter()
                    .map(|o| candidates[from + o].clone())
                    .collect(),
            );
            let decided = finding.maybe_first_bad.is_empty();
            // The answer is the first step's: a later one that could not
            // be told apart says so in its own finding.
            if segment == 0 {
                bisected.ending = match decided {
                    true => Ending::Found,
                    false => Ending::Undecided,
                };
            }
            bisected.findings.push(finding);
            if !all_steps || bad_at == last || !decided {
                return Ok(());
            }
            // The next segment starts at the step just found: its run,
            // locked, is the new good end.
            let Some(results) = results_at.remove(&bad_at) else {
                return Ok(());
            };
            let folder = self.folder(Role::Step, &candidates[bad_at].label, segment);
            match self.lock_of(&results, &folder) {
                Ok(next) => lock = next,
                Err(BisectError::BadInput(why)) => {
                    self.progress.note(&format!(
                        "no search past {}: {why}; a later step cannot be told from this one",
                        candidates[bad_at].label
                    ));
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
            from = bad_at;
            segment += 1;
        }
    }

    /// The finding between two positions: their steps, and why.
    fn finding(
        &self,
        candidates: &[Candidate],
        good_at: usize,
        bad_at: usize,
        maybe: Vec<Candidate>,
    ) -> Finding {
        let find = |at: usize, roles: &[Role]| {
            self.steps
                .iter()
                .rev()
                .find(|s| {
                    s.candidate == candidates[at]
                        && roles.contains(&s.role)
                        && s.verdict != Verdict::Skip
                })
                .cloned()
        };
        let good = find(good_at, &[Role::GoodEnd, Role::Step])
            .or_else(|| find(good_at, &[Role::BadEnd]))
            .unwrap_or_else(|| Step::unjudged(&candidates[good_at], Role::Step));
        let bad = find(bad_at, &[Role::Step, Role::BadEnd])
            .unwrap_or_else(|| Step::unjudged(&candidates[bad_at], Role::Step));
        why(good, bad, maybe, None)
    }

    /// Delta debugging over the package changes between two runs.
    pub(super) fn sets(&mut self, axis: &mut Sets) -> Result<Bisected, BisectError> {
        let n = axis.changes.len();
        let mut bisected = self.answer(Axis::PackageSet, None, 1, n, log2_bound(n));
        let result = self.sets_search(axis, &mut bisected);
        self.finish(bisected, result)
    }

    fn sets_search(&mut self, axis: &mut Sets, bisected: &mut Bisected) -> Result<(), BisectError> {
        let n = axis.changes.len();
        let none: Vec<usize> = Vec::new();
        let all: Vec<usize> = (0..n).collect();
        axis.current = vec![none.clone(), all];
        let ends = axis.candidates_now();
        let lock = self.prove_good(axis, &ends, 0, 0)?;
        let (bad, _) = self.try_candidate(axis, &ends, 1, Role::BadEnd, Some(&lock), 0)?;
        match bad.verdict {
            Verdict::Good => return Ok(()),
            Verdict::Skip => {
                return Err(BisectError::BadInput(format!(
                    "the bad run's packages cannot be judged here: {}",
                    bad.reason.as_deref().unwrap_or("they did not run")
                )));
            }
            Verdict::Bad => {}
        }
        let found = ddmin(n, |subset: &[usize]| {
            if subset.len() == n {
                return Ok(Verdict::Bad);
            }
            axis.current = vec![subset.to_vec()];
            let candidates = axis.candidates_now();
            let (step, _) = self.try_candidate(axis, &candidates, 0, Role::Step, Some(&lock), 0)?;
            Ok::<_, BisectError>(step.verdict)
        })?;
        // The last good: the good end; the first bad: the smallest set.
        let good = self
            .steps
            .iter()
            .find(|s| s.role == Role::GoodEnd)
            .cloned()
            .unwrap_or_else(|| Step::unjudged(&axis.candidate(&none), Role::GoodEnd));
        let found_candidate = axis.candidate(&found);
        let bad = self
            .steps
            .iter()
            .rev()
            .find(|s| s.candidate == found_candidate && s.verdict == Verdict::Bad)
            .cloned()
            .unwrap_or_else(|| Step::unjudged(&found_candidate, Role::Step));
        let restore = found
            .iter()
            .map(|&i| axis.changes[i].restore())
            .collect::<Vec<_>>()
            .join(" ");
        bisected.findings.push(why(
            good,
            bad,
            Vec::new(),
            Some(format!("pip install {restore}")),
        ));
        bisected.ending = Ending::Found;
        Ok(())
    }
}

impl Driver<'_> {
    /// Candidates run at once on this axis: the pool's slots where each
    /// candidate has its own worktree, else one.
    fn slots(&self, axis: &dyn Prepare) -> usize {
        match axis.parallel() {
            true => self.options.gpu_slots.len().max(1),
            false => 1,
        }
    }

    /// An answer not found yet: no finding, no step, nothing run.
    fn answer(
        &self,
        axis: Axis,
        package: Option<String>,
        slots: usize,
        candidates: usize,
        bound: u32,
    ) -> Bisected {
        Bisected {
            axis,
            suite: self.options.suite.clone(),
            case: self.options.case.clone(),
            package,
            ending: Ending::NotReproducible,
            findings: Vec::new(),
            steps: Vec::new(),
            runs: 0,
            rounds: 0,
            slots,
            candidates,
            bound,
            out: self.options.out.clone(),
        }
    }

    /// A search's answer with every step and count; an interrupt ends it
    /// with what it found so far.
    fn finish(
        &mut self,
        mut bisected: Bisected,
        result: Result<(), BisectError>,
    ) -> Result<Bisected, BisectError> {
        bisected.steps = std::mem::take(&mut self.steps);
        bisected.runs = self.runs;
        bisected.rounds = self.rounds;
        match result {
            Ok(()) => Ok(bisected),
            Err(BisectError::Interrupted) => {
                bisected.ending = Ending::Interrupted;
                Ok(bisected)
            }
            Err(e) => Err(e),
        }
    }
}

/// A finding with its why: the environment's drift from one to the
/// other and the allocation sites that grew.
fn why(good: Step, bad: Step, maybe: Vec<Candidate>, restore: Option<String>) -> Finding {
    let (drift, sites) = match (&good.ran, &bad.ran) {
        (Some(g), Some(b)) => {
            let drift = crate::baseline::drift::drift(&g.environment, &b.environment)
                .iter()
                .map(ToString::to_string)
                .collect();
            let sites = match (&g.case.allocation_sites, &b.case.allocation_sites) {
                (Some(before), Some(after)) => {
                    let growth = crate::snapshot::grown(before, after, 5);
                    (!growth.is_empty()).then(|| growth.describe())
                }
                _ => None,
            };
            (drift, sites)
        }
        _ => (Vec::new(), None),
    };
    Finding {
        last_good: good,
        first_bad: bad,
        maybe_first_bad: maybe,
        drift,
        sites,
        restore,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bisect::Ran;
    use crate::results::CaseResult;
    use crate::snapshot::{AllocationSites, Site};

    const MIB: u64 = 1024 * 1024;

    /// A judged step whose run left `sites` (MiB by site) and ran with
    /// torch `torch`.
    fn step(label: &str, torch: &str, sites: &[(&str, u64)]) -> Step {
        let mut case = CaseResult::unmeasured("train".into());
        case.allocation_sites = Some(AllocationSites {
            sites: sites
                .iter()
                .map(|(site, mib)| Site {
                    site: (*site).into(),
                    bytes: mib * MIB,
                    count: 1,
                })
                .collect(),
            ..AllocationSites::default()
        });
        let mut environment = crate::environment::Environment::default();
        environment.python = Some(crate::environment::PythonEnvironment {
            interpreter: "python3".into(),
            packages: [("torch".to_string(), torch.to_string())].into(),
            ..Default::default()
        });
        let candidate = Candidate {
            id: label.into(),
            label: label.into(),
            subject: String::new(),
        };
        Step {
            ran: Some(Box::new(Ran { case, environment })),
            ..Step::unjudged(&candidate, Role::Step)
        }
    }

    #[test]
    fn a_finding_says_why_the_sites_that_grew_and_the_drift() {
        let good = step(
            "2.9.1",
            "2.9.1",
            &[("model.py:88 attention", 400), ("train.py:12 step", 100)],
        );
        let bad = step(
            "2.10.0",
            "2.10.0",
            &[("model.py:88 attention", 900), ("train.py:12 step", 100)],
        );
        let finding = why(good, bad, Vec::new(), None);
        assert_eq!(finding.drift, vec!["torch 2.9.1 → 2.10.0".to_string()]);
        let sites = finding.sites.expect("the sites that grew");
        assert!(
            sites.contains("model.py:88 attention +500.0 MiB"),
            "{sites}"
        );
        assert!(!sites.contains("train.py:12"), "{sites}");
        // Without runs (a candidate never run), no why is made up.
        let none = why(
            Step::unjudged(&step("a", "1", &[]).candidate, Role::Step),
            Step::unjudged(&step("b", "2", &[]).candidate, Role::Step),
            Vec::new(),
            None,
        );
        assert!(none.drift.is_empty() && none.sites.is_none());
    }
}
