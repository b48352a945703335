//! Driving a bisect: the out dir and its owner's lock, each candidate
//! prepared (a worktree and a build, or packages installed), run by
//! `oomgate run` against the good end's lock, read back and classified;
//! the ends proved first; what is left behind by a bisect that was
//! killed, pruned.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::commits::Commits;
use super::folder::{claim, prune_stale};
use super::git::Repo;
use super::packages::{Sets, Versions};
use super::search::{Bisection, Verdict, ddmin, log2_bound};
use super::spawn::{Ended, run_logged, tail};
use super::{
    Axis, BisectError, Bisected, Candidate, Ending, Finding, Options, Ran, Range, Role, Step,
};
use crate::results::RunResults;
use crate::run::Interrupt;

/// What a driver tells whoever watches: each step as it is judged, and
/// short notes (a worktree made, a build that failed).
pub trait Progress {
    fn step(&mut self, step: &Step, good_end: Option<&Step>);
    fn note(&mut self, text: &str);
    /// The bisect's folder is this bisect's now: a log may be kept there.
    fn claimed(&mut self, out: &Path);
}

/// Where and how one candidate runs.
pub(super) struct Place {
    pub(super) cwd: PathBuf,
    pub(super) suite: PathBuf,
    /// The interpreter to run the suite with (`--python`), first on PATH.
    pub(super) python: Option<PathBuf>,
}

/// A candidate made ready, or why it cannot be judged.
pub(super) enum Prepared {
    Ready(Place),
    Skip(String),
}

/// An axis's way of making a candidate ready, and of undoing it.
pub(super) trait Prepare {
    fn prepare(
        &mut self,
        at: usize,
        folder: &Path,
        interrupt: &Interrupt,
    ) -> Result<Prepared, BisectError>;
    fn release(&mut self, at: usize);
    /// Remove what it made (worktrees, the environment).
    fn clean_up(&mut self);
}

pub(super) struct Driver<'p> {
    pub(super) options: Options,
    exe: PathBuf,
    pub(super) interrupt: Interrupt,
    pub(super) progress: &'p mut dyn Progress,
    steps: Vec<Step>,
    runs: usize,
    /// Held for as long as the bisect runs: its owner's lock.
    _marker: File,
}

/// Run a bisect to its answer. An interrupt ends it with what it found so
/// far (`Ending::Interrupted`); its worktrees and environment are
/// removed, its log and steps kept.
pub fn bisect(
    options: Options,
    range: Range,
    progress: &mut dyn Progress,
) -> Result<Bisected, BisectError> {
    let interrupt = Interrupt::install()
        .map_err(|e| BisectError::Infrastructure(format!("cannot watch for Ctrl-C: {e}")))?;
    let exe = std::env::current_exe().map_err(|e| {
        BisectError::Infrastructure(format!("cannot find oomgate's own binary: {e}"))
    })?;
    // A commit range is checked before anything is written.
    let mut commits = match &range {
        Range::Commits {
            good,
            bad,
            build,
            all_parents,
            ..
        } => {
            let repo = Repo::around(&options.suite).map_err(BisectError::BadInput)?;
            Some(Commits::new(
                &options,
                repo,
                good,
                bad,
                build.clone(),
                *all_parents,
            )?)
        }
        _ => None,
    };
    let repo = commits.as_ref().map(Commits::repo);
    prune_stale(repo, progress);
    let marker = claim(&options.out, options.resume, repo)?;
    progress.claimed(&options.out);
    let mut driver = Driver {
        options,
        exe,
        interrupt,
        progress,
        steps: Vec::new(),
        runs: 0,
        _marker: marker,
    };
    let env = driver.options.out.join("env");
    match range {
        Range::Commits { all_steps, .. } => {
            let mut axis = commits
                .take()
                .ok_or_else(|| BisectError::Infrastructure("no commit range".into()))?;
            let result = driver.linear(&mut axis, Axis::Commits, None, all_steps);
            axis.clean_up();
            result
        }
        Range::Versions {
            package,
            good,
            bad,
            index,
            pins_from,
            all_steps,
        } => {
            let axis = Versions::new(
                &mut driver,
                &package,
                &good,
                &bad,
                index,
                pins_from.as_deref(),
            );
            let mut axis = made(axis, &env)?;
            let result = driver.linear(&mut axis, Axis::Versions, Some(package), all_steps);
            axis.clean_up();
            result
        }
        Range::Sets {
            good_run,
            bad_run,
            index,
        } => {
            let mut axis = made(Sets::new(&mut driver, &good_run, &bad_run, index), &env)?;
            let result = driver.sets(&mut axis);
            axis.clean_up();
            result
        }
    }
}

/// An axis made, or its environment, half made, removed.
fn made<T>(result: Result<T, BisectError>, env: &Path) -> Result<T, BisectError> {
    if result.is_err() {
        let _ = std::fs::remove_dir_all(env);
    }
    result
}

/// The one-case check for `git bisect run`: the case run in place (after
/// `build`), judged against `against` (a lock, or a good run's
/// results.json) or, without one, by its budgets and limits alone.
pub fn check(
    options: Options,
    build: Option<&str>,
    against: Option<&Path>,
    progress: &mut dyn Progress,
) -> Result<Step, BisectError> {
    let interrupt = Interrupt::install()
        .map_err(|e| BisectError::Infrastructure(format!("cannot watch for Ctrl-C: {e}")))?;
    let exe = std::env::current_exe().map_err(|e| {
        BisectError::Infrastructure(format!("cannot find oomgate's own binary: {e}"))
    })?;
    let lock = against.map(reference_lock).transpose()?;
    let marker = claim(&options.out, false, None)?;
    progress.claimed(&options.out);
    let cwd = std::env::current_dir()
        .map_err(|e| BisectError::Infrastructure(format!("no current folder: {e}")))?;
    let mut driver = Driver {
        options,
        exe,
        interrupt,
        progress,
        steps: Vec::new(),
        runs: 0,
        _marker: marker,
    };
    let here = Candidate {
        id: "HEAD".into(),
        label: "here".into(),
        subject: String::new(),
    };
    let folder = driver.folder(Role::Step, &here.label, 0);
    if let Some(build) = build {
        if let Some(why) = build_in(&cwd, build, &folder, &driver.interrupt)? {
            let step = driver.skipped(&here, Role::Step, why);
            return Ok(step);
        }
    }
    let lock_path = match lock {
        Some(lock) => {
            let path = driver.options.out.join("against.lock");
            crate::baseline::write(&path, &lock)
                .map_err(|e| BisectError::Infrastructure(e.to_string()))?;
            Some(path)
        }
        None => None,
    };
    let place = Place {
        cwd,
        suite: driver.options.suite.clone(),
        python: None,
    };
    let (step, _) = driver.run(&here, Role::Step, &place, lock_path.as_deref(), &folder)?;
    Ok(step)
}

/// The lock a check judges against: a lock file, or a lock made from a
/// good run's results.json.
fn reference_lock(path: &Path) -> Result<crate::baseline::Lock, BisectError> {
    let text = crate::files::read_input(
        path,
        crate::files::MAX_RESULTS_BYTES,
        "a lock or results file",
    )
    .map_err(|e| BisectError::BadInput(format!("cannot read {}: {e}", path.display())))?;
    if let Ok(results) = crate::results::readback::parse(&text) {
        return crate::results::readback::lock_from_results(&results).map_err(|why| {
            BisectError::BadInput(format!(
                "{} cannot be judged against: {why}",
                path.display()
            ))
        });
    }
    crate::baseline::read(path).map_err(|e| BisectError::BadInput(e.to_string()))
}

impl Driver<'_> {
    /// The folder of one run: `steps/<label>` (`good-<label>` for the
    /// good end; `s<N>-` before both past the first segment of
    /// `--all-steps`), the same name each time so that `--resume` finds
    /// it.
    fn folder(&self, role: Role, label: &str, segment: usize) -> PathBuf {
        let mut name = String::new();
        if segment > 0 {
            name.push_str(&format!("s{}-", segment + 1));
        }
        if role == Role::GoodEnd {
            name.push_str("good-");
        }
        name.extend(label.chars().map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+') {
                c
            } else {
                '_'
            }
        }));
        self.options.out.join("steps").join(name)
    }

    fn skipped(&mut self, candidate: &Candidate, role: Role, why: String) -> Step {
        let step = Step {
            candidate: candidate.clone(),
            role,
            verdict: Verdict::Skip,
            reason: Some(why),
            host_peak_bytes: None,
            host_peak_method: None,
            gpu_peak_bytes: None,
            gpu_peak_method: None,
            case_folder: None,
            reused: false,
            ran: None,
        };
        let good = self.good_end().cloned();
        self.progress.step(&step, good.as_ref());
        self.steps.push(step.clone());
        step
    }

    fn good_end(&self) -> Option<&Step> {
        self.steps.iter().rev().find(|s| s.role == Role::GoodEnd)
    }

    /// Run the case at `place`, judged against `lock` (none: its budgets
    /// and limits alone); the step, and the run's results when it
    /// finished.
    fn run(
        &mut self,
        candidate: &Candidate,
        role: Role,
        place: &Place,
        lock: Option<&Path>,
        folder: &Path,
    ) -> Result<(Step, Option<RunResults>), BisectError> {
        let out = folder.join("run");
        let results_path = out.join("results.json");
        let reused = self.options.resume && finished(&results_path).is_some();
        let code = if reused {
            None
        } else {
            if out.exists() {
                // A step of an earlier bisect in this folder: ours.
                std::fs::remove_dir_all(&out).map_err(|e| {
                    BisectError::Infrastructure(format!("cannot clear {}: {e}", out.display()))
                })?;
            }
            std::fs::create_dir_all(folder).map_err(|e| {
                BisectError::Infrastructure(format!("cannot make {}: {e}", folder.display()))
            })?;
            let mut command = Command::new(&self.exe);
            command
                .arg("run")
                .arg(&place.suite)
                .arg("--filter")
                .arg(format!("={}", self.options.case))
                .arg("--out")
                .arg(&out)
                .args(["--no-history", "--progress", "lines"]);
            match lock {
                Some(lock) => command.arg("--baseline").arg(lock),
                None => command.arg("--no-baseline"),
            };
            if let Some(repeat) = self.options.repeat.filter(|r| *r > 1) {
                command.arg("--repeat").arg(repeat.to_string());
            }
            if let Some(python) = &place.python {
                command.arg("--python").arg(python);
                let mut path = vec![python.parent().unwrap_or(Path::new("/")).to_path_buf()];
                path.extend(
                    std::env::var_os("PATH")
                        .iter()
                        .flat_map(std::env::split_paths),
                );
                if let Ok(joined) = std::env::join_paths(path) {
                    command.env("PATH", joined);
                }
                if let Some(venv) = python.parent().and_then(Path::parent) {
                    command.env("VIRTUAL_ENV", venv);
                }
            }
            command
                .args(&self.options.run_flags)
                .current_dir(&place.cwd)
                .env_remove("GITHUB_STEP_SUMMARY")
                .env_remove("OOMGATE_HISTORY");
            let log = folder.join("oomgate.log");
            let ended = run_logged(command, &log, &self.interrupt).map_err(|e| {
                BisectError::Infrastructure(format!(
                    "cannot run oomgate for {}: {e}",
                    candidate.label
                ))
            })?;
            self.runs += 1;
            match ended {
                Ended::Interrupted | Ended::Exited(130) => return Err(BisectError::Interrupted),
                Ended::Exited(code) => Some(code),
            }
        };
        let results = finished(&results_path);
        let found = results.as_ref().and_then(|r| {
            r.cases
                .iter()
                .find(|c| c.id == self.options.case)
                .map(|c| (c.clone(), r.environment.clone()))
        });
        let mut step = Step {
            candidate: candidate.clone(),
            role,
            verdict: Verdict::Skip,
            reason: None,
            host_peak_bytes: None,
            host_peak_method: None,
            gpu_peak_bytes: None,
            gpu_peak_method: None,
            case_folder: None,
            reused,
            ran: None,
        };
        match found {
            Some((case, environment)) => {
                let (verdict, reason) = super::verdict::classify(&case);
                step.verdict = verdict;
                step.reason = reason;
                step.host_peak_bytes = case.host.peak_bytes;
                step.host_peak_method = case.host.peak_bytes.map(|_| {
                    wire_name(&case.host.peak_source)
                        .unwrap_or_else(|| wire_name(&case.host.method).unwrap_or_default())
                });
                step.gpu_peak_bytes = case.gpu_peak_bytes;
                step.gpu_peak_method = case
                    .gpu_peak_bytes
                    .and_then(|_| wire_name(&case.gpu_peak_method));
                step.case_folder =
                    Some(out.join("cases").join(crate::suite::folder_name(&case.id)));
                step.ran = Some(Box::new(Ran { case, environment }));
            }
            None => {
                let log = folder.join("oomgate.log");
                step.reason = Some(match code {
                    Some(2) => {
                        with_tail("oomgate cannot run the case here (bad input)".into(), &log)
                    }
                    Some(code) => with_tail(format!("oomgate exited with code {code}"), &log),
                    None => "its results hold no such case".into(),
                });
            }
        }
        let good = self.good_end().cloned();
        self.progress.step(&step, good.as_ref());
        self.steps.push(step.clone());
        Ok((step, results))
    }

    /// Prepare, run and release one candidate of a linear axis.
    fn try_candidate(
        &mut self,
        axis: &mut dyn Prepare,
        candidates: &[Candidate],
        at: usize,
        role: Role,
        lock: Option<&Path>,
        segment: usize,
    ) -> Result<(Step, Option<RunResults>), BisectError> {
        let candidate = &candidates[at];
        let folder = self.folder(role, &candidate.label, segment);
        let results = folder.join("run").join("results.json");
        if self.options.resume && finished(&results).is_some() {
            let place = Place {
                cwd: self.options.out.clone(),
                suite: self.options.suite.clone(),
                python: None,
            };
            return self.run(candidate, role, &place, lock, &folder);
        }
        std::fs::create_dir_all(&folder).map_err(|e| {
            BisectError::Infrastructure(format!("cannot make {}: {e}", folder.display()))
        })?;
        let prepared = axis.prepare(at, &folder, &self.interrupt);
        let outcome = match prepared {
            Ok(Prepared::Ready(place)) => self.run(candidate, role, &place, lock, &folder),
            Ok(Prepared::Skip(why)) => Ok((self.skipped(candidate, role, why), None)),
            Err(e) => Err(e),
        };
        axis.release(at);
        outcome
    }

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
    fn linear(
        &mut self,
        axis: &mut dyn PrepareLinear,
        kind: Axis,
        package: Option<String>,
        all_steps: bool,
    ) -> Result<Bisected, BisectError> {
        let candidates = axis.candidates().to_vec();
        let last = candidates.len() - 1;
        let mut bisected = Bisected {
            axis: kind,
            suite: self.options.suite.clone(),
            case: self.options.case.clone(),
            package,
            ending: Ending::NotReproducible,
            findings: Vec::new(),
            steps: Vec::new(),
            runs: 0,
            candidates: last.saturating_sub(1),
            bound: log2_bound(last),
            out: self.options.out.clone(),
        };
        let result = self.linear_segments(axis.as_prepare(), &candidates, all_steps, &mut bisected);
        if let Some(package) = &bisected.package {
            for finding in &mut bisected.findings {
                finding.restore = Some(format!(
                    "pip install '{package}=={}'",
                    finding.last_good.candidate.id
                ));
            }
        }
        bisected.steps = std::mem::take(&mut self.steps);
        bisected.runs = self.runs;
        match result {
            Ok(()) => Ok(bisected),
            Err(BisectError::Interrupted) => {
                bisected.ending = Ending::Interrupted;
                Ok(bisected)
            }
            Err(e) => Err(e),
        }
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
                Verdict::Skip => return Ok(()),
                Verdict::Bad => {}
            }
            let mut search = Bisection::new(last - from);
            let mut results_at = std::collections::HashMap::new();
            while let Some(offset) = search.next() {
                let at = from + offset;
                let (step, results) =
                    self.try_candidate(axis, candidates, at, Role::Step, Some(&lock), segment)?;
                search.record(offset, step.verdict);
                if let Some(results) = results {
                    results_at.insert(at, results);
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
            bisected.ending = match finding.maybe_first_bad.is_empty() {
                true => Ending::Found,
                false => Ending::Undecided,
            };
            bisected.findings.push(finding);
            if !all_steps || bad_at == last || bisected.ending == Ending::Undecided {
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
            .unwrap_or_else(|| placeholder(&candidates[good_at]));
        let bad = find(bad_at, &[Role::Step, Role::BadEnd])
            .unwrap_or_else(|| placeholder(&candidates[bad_at]));
        why(good, bad, maybe, None)
    }

    /// Delta debugging over the package changes between two runs.
    fn sets(&mut self, axis: &mut Sets) -> Result<Bisected, BisectError> {
        let n = axis.changes.len();
        let mut bisected = Bisected {
            axis: Axis::PackageSet,
            suite: self.options.suite.clone(),
            case: self.options.case.clone(),
            package: None,
            ending: Ending::NotReproducible,
            findings: Vec::new(),
            steps: Vec::new(),
            runs: 0,
            candidates: n,
            bound: log2_bound(n),
            out: self.options.out.clone(),
        };
        let result = self.sets_search(axis, &mut bisected);
        bisected.steps = std::mem::take(&mut self.steps);
        bisected.runs = self.runs;
        match result {
            Ok(()) => Ok(bisected),
            Err(BisectError::Interrupted) => {
                bisected.ending = Ending::Interrupted;
                Ok(bisected)
            }
            Err(e) => Err(e),
        }
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
            .unwrap_or_else(|| placeholder(&axis.candidate(&none)));
        let found_candidate = axis.candidate(&found);
        let bad = self
            .steps
            .iter()
            .rev()
            .find(|s| s.candidate == found_candidate && s.verdict == Verdict::Bad)
            .cloned()
            .unwrap_or_else(|| placeholder(&found_candidate));
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

/// A step never run (a candidate whose run was skipped).
fn placeholder(candidate: &Candidate) -> Step {
    Step {
        candidate: candidate.clone(),
        role: Role::Step,
        verdict: Verdict::Skip,
        reason: None,
        host_peak_bytes: None,
        host_peak_method: None,
        gpu_peak_bytes: None,
        gpu_peak_method: None,
        case_folder: None,
        reused: false,
        ran: None,
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

/// A value's name as results.json writes it (`cgroup-anon-shmem`).
fn wire_name<T: serde::Serialize>(value: &T) -> Option<String> {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
}

/// A run's results, when its run ended (not a checkpoint).
fn finished(path: &Path) -> Option<RunResults> {
    let text =
        crate::files::read_input(path, crate::files::MAX_RESULTS_BYTES, "a results file").ok()?;
    let results = crate::results::readback::parse(&text).ok()?;
    (results.finished_at.is_some() && !results.interrupted).then_some(results)
}

/// `what`, and the last lines of `log` when it has any.
fn with_tail(what: String, log: &Path) -> String {
    match tail(log, 2) {
        last if last.is_empty() => what,
        last => format!("{what}: {last}"),
    }
}

/// Run `build` with `sh -c` in `dir`, its output in `folder/build.log`;
/// why the candidate cannot be judged when it fails.
pub(super) fn build_in(
    dir: &Path,
    build: &str,
    folder: &Path,
    interrupt: &Interrupt,
) -> Result<Option<String>, BisectError> {
    std::fs::create_dir_all(folder).map_err(|e| {
        BisectError::Infrastructure(format!("cannot make {}: {e}", folder.display()))
    })?;
    let log = folder.join("build.log");
    let mut command = Command::new("sh");
    command.arg("-c").arg(build).current_dir(dir);
    match run_logged(command, &log, interrupt) {
        Ok(Ended::Exited(0)) => Ok(None),
        Ok(Ended::Interrupted) => Err(BisectError::Interrupted),
        Ok(Ended::Exited(code)) => Ok(Some(with_tail(
            format!("does not build (--build exited with code {code})"),
            &log,
        ))),
        Err(e) => Ok(Some(format!("cannot run --build: {e}"))),
    }
}

/// What both linear axes share: their candidates, in order.
pub(super) trait PrepareLinear: Prepare {
    fn candidates(&self) -> &[Candidate];
    fn as_prepare(&mut self) -> &mut dyn Prepare;
}

/// Flags of `oomgate run` a bisect hands on.
pub fn run_flags(gpu: Option<&str>, host_method: Option<&str>) -> Vec<OsString> {
    let mut flags = Vec::new();
    if let Some(gpu) = gpu {
        flags.push("--gpu".into());
        flags.push(gpu.into());
    }
    if let Some(method) = host_method {
        flags.push("--host-method".into());
        flags.push(method.into());
    }
    flags
}
