//! Driving a bisect: the folder claimed (and what a killed bisect left,
//! pruned), each candidate taken from a resumed bisect or the history or
//! made ready by its axis, run by `oomgate run`, read back, judged
//! against the good end's lock and classified (`searches`: the ends
//! proved, the search loops).

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::Verdict;
use super::axis::{Place, Prepare, Prepared, Progress, build_in, with_tail};
use super::cache::{Cache, Keys};
use super::commits::Commits;
use super::folder::{claim, prune_stale};
use super::git::Repo;
use super::packages::{Sets, Setup, Versions};
use super::spawn::{Ended, Running};
use super::verdict::Why;
use super::{Axis, BisectError, Bisected, Candidate, Options, Ran, Range, Role, Step, Taken};
use crate::results::RunResults;
use crate::run::Interrupt;

mod searches;

/// The file beside each step's run that holds its key: what it ran under
/// (see `cache`), checked before `--resume` takes the step.
const KEY_FILE: &str = "key.txt";

pub(super) struct Driver<'p> {
    pub(super) options: Options,
    exe: PathBuf,
    pub(super) interrupt: Interrupt,
    pub(super) progress: &'p mut dyn Progress,
    steps: Vec<Step>,
    runs: usize,
    /// Rounds that ran something (a batch of a pool, or one run).
    rounds: usize,
    /// Each step's key: what it ran under.
    keys: Keys,
    /// Where steps are kept for later bisects, if anywhere.
    cache: Option<Cache>,
    /// What the axis's candidates run in, for the cache's keys.
    environment: String,
    /// Held for as long as the bisect runs: its owner's lock.
    _marker: File,
}

/// Run a bisect to its answer. An interrupt ends it with what it found so
/// far (`Ending::Interrupted`); its worktrees and environment are
/// removed, its log and steps kept.
pub fn bisect(
    options: Options,
    range: Range,
    cache: Option<Cache>,
    progress: &mut dyn Progress,
) -> Result<Bisected, BisectError> {
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
    let mut driver = Driver::start(options, progress, marker)?;
    if let Some(cache) = &cache {
        driver.progress.note(&format!(
            "steps are kept in, and taken from, the history {}",
            cache.location()
        ));
    }
    driver.cache = cache;
    let env = driver.options.out.join("env");
    match range {
        Range::Commits { all_steps, .. } => {
            let mut axis = commits
                .take()
                .ok_or_else(|| BisectError::Infrastructure("no commit range".into()))?;
            driver.environment_of(&axis);
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
                &mut driver.setup(),
                &package,
                &good,
                &bad,
                index,
                pins_from.as_deref(),
            );
            let mut axis = made(axis, &env)?;
            driver.environment_of(&axis);
            let result = driver.linear(&mut axis, Axis::Versions, Some(package), all_steps);
            axis.clean_up();
            result
        }
        Range::Sets {
            good_run,
            bad_run,
            index,
        } => {
            let mut axis = made(
                Sets::new(&mut driver.setup(), &good_run, &bad_run, index),
                &env,
            )?;
            driver.environment_of(&axis);
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
    let lock = against.map(reference_lock).transpose()?;
    if let (Some(lock), Some(path)) = (&lock, against) {
        // A case the good end never ran is a mistyped name, not a commit
        // that lacks it: every commit would be skipped.
        if !lock.cases.contains_key(&options.case) {
            return Err(BisectError::BadInput(format!(
                "{} holds no case `{}` to judge against",
                path.display(),
                options.case
            )));
        }
    }
    // `git bisect run` calls the check once a commit: a bisect folder
    // named with --out is taken again each time, its last run cleared.
    let again = options.out.join(super::MARKER).exists();
    let marker = claim(&options.out, again, None)?;
    progress.claimed(&options.out);
    let cwd = std::env::current_dir()
        .map_err(|e| BisectError::Infrastructure(format!("no current folder: {e}")))?;
    let mut driver = Driver::start(options, progress, marker)?;
    let here = Candidate {
        id: "HEAD".into(),
        label: "here".into(),
        subject: String::new(),
    };
    let folder = driver.folder(Role::Step, &here.label, 0);
    if folder.exists() {
        std::fs::remove_dir_all(&folder).map_err(|e| {
            BisectError::Infrastructure(format!("cannot clear {}: {e}", folder.display()))
        })?;
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
    let mut axis = Here {
        cwd,
        suite: driver.options.suite.clone(),
        build: build.map(str::to_string),
    };
    let (step, _) = driver.try_candidate(
        &mut axis,
        std::slice::from_ref(&here),
        0,
        Role::Step,
        lock_path.as_deref(),
        0,
    )?;
    // oomgate's own infrastructure failing (its out dir, git, a report
    // it cannot write) says nothing of this commit, and would not of the
    // next: git aborts rather than skip every commit.
    if step.exit_code == Some(RUN_INFRASTRUCTURE) {
        return Err(BisectError::Infrastructure(step.why().map_or_else(
            || "oomgate could not run the case here (exit 3)".to_string(),
            str::to_string,
        )));
    }
    Ok(step)
}

/// `oomgate run`'s exit code for its own infrastructure failing (the
/// README's exit codes): not an answer about the case.
const RUN_INFRASTRUCTURE: i32 = 3;

/// The check's one candidate: the checkout as it is (`git bisect` has
/// checked the commit out), built there with `--build`.
struct Here {
    cwd: PathBuf,
    suite: PathBuf,
    build: Option<String>,
}

impl Prepare for Here {
    fn identity(&self, _at: usize) -> String {
        format!("here\nbuild {}", self.build.as_deref().unwrap_or(""))
    }

    fn environment(&self) -> String {
        String::new()
    }

    fn prepare(
        &mut self,
        _at: usize,
        folder: &Path,
        interrupt: &Interrupt,
    ) -> Result<Prepared, BisectError> {
        if let Some(build) = &self.build {
            if let Some(why) = build_in(&self.cwd, build, folder, interrupt)? {
                return Ok(Prepared::Skip(why));
            }
        }
        Ok(Prepared::Ready(Place {
            cwd: self.cwd.clone(),
            suite: self.suite.clone(),
            python: None,
        }))
    }

    fn release(&mut self, _at: usize) {}

    fn clean_up(&mut self) {}
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

impl<'p> Driver<'p> {
    /// A driver of a claimed folder: Ctrl-C watched, oomgate's own binary
    /// found (each run is `oomgate run`).
    fn start(
        options: Options,
        progress: &'p mut dyn Progress,
        marker: File,
    ) -> Result<Self, BisectError> {
        let interrupt = Interrupt::install()
            .map_err(|e| BisectError::Infrastructure(format!("cannot watch for Ctrl-C: {e}")))?;
        let exe = std::env::current_exe().map_err(|e| {
            BisectError::Infrastructure(format!("cannot find oomgate's own binary: {e}"))
        })?;
        let keys = Keys::new(options.repeat, &options.run_flags, &options.gpu_slots);
        Ok(Driver {
            options,
            exe,
            interrupt,
            progress,
            steps: Vec::new(),
            runs: 0,
            rounds: 0,
            keys,
            cache: None,
            environment: String::new(),
            _marker: marker,
        })
    }
    /// The folder of one run: `steps/<label>` (`good-<label>` for the
    /// good end; `s<N>-` before both past the first segment of
    /// `--all-steps`), the same name each time so that `--resume` finds
    /// it.
    fn folder(&self, role: Role, label: &str, segment: usize) -> PathBuf {
        let mut name = String::new();
        if segment > 0 {
            name.push_str(&format!("s{}-", segment + 1));
        }
        if role == Role::GoodEnd && !label.starts_with("good-") {
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
            reason: Some(why),
            ..Step::unjudged(candidate, role)
        };
        let good = self.good_end().cloned();
        self.progress.step(&step, good.as_ref());
        self.steps.push(step.clone());
        step
    }

    fn good_end(&self) -> Option<&Step> {
        self.steps.iter().rev().find(|s| s.role == Role::GoodEnd)
    }

    /// The `oomgate run` of the case at `place`, writing into `folder`,
    /// on the GPUs of pool slot `slot` (with `--gpus`): its budgets and
    /// limits judged there, against no lock; the good end's lock is the
    /// bisect's to judge by, after (`judge_step`), so a step taken from an
    /// earlier bisect or the history is judged the same way.
    fn command(&self, place: &Place, folder: &Path, slot: usize) -> Result<Command, BisectError> {
        let out = folder.join("run");
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
            .args(["--no-history", "--no-baseline", "--progress", "lines"]);
        if let Some(gpus) = self.options.gpu_slots.get(slot) {
            command.arg("--gpus").arg(gpus);
        }
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
        Ok(command)
    }

    /// The step of a run in `folder`: its case read back, judged against
    /// `lock` (none: its budgets and limits alone) and classified, said
    /// and recorded; with the run's results when it finished. `code`:
    /// the exit code of a run made now.
    fn judge_step(
        &mut self,
        candidate: &Candidate,
        role: Role,
        lock: Option<&Path>,
        folder: &Path,
        code: Option<i32>,
        taken: Option<Taken>,
    ) -> Result<(Step, Option<RunResults>), BisectError> {
        let out = folder.join("run");
        let results = finished(&out.join("results.json"));
        let found = results.as_ref().and_then(|r| {
            r.cases
                .iter()
                .find(|c| c.id == self.options.case)
                .map(|c| (c.clone(), r.environment.clone()))
        });
        let mut step = Step {
            taken_from: taken,
            exit_code: code,
            ..Step::unjudged(candidate, role)
        };
        let good_lock = match lock {
            Some(path) => Some((
                crate::baseline::read(path)
                    .map_err(|e| BisectError::Infrastructure(e.to_string()))?,
                path,
            )),
            None => None,
        };
        match found {
            Some((case, environment)) => {
                let against = match (&good_lock, &results) {
                    (Some((lock, path)), Some(results)) => {
                        super::verdict::against_good_end(lock, path, results, &case)
                    }
                    _ => Vec::new(),
                };
                let (verdict, why) = super::verdict::classify(&case, &against);
                step.verdict = verdict;
                match why {
                    Some(Why::Said(words)) => step.reason = Some(words),
                    Some(Why::Check(check)) => step.check = Some(*check),
                    None => {}
                }
                step.host_peak_bytes = case.host.peak_bytes;
                step.host_peak_source = case.host.peak_bytes.map(|_| {
                    wire_name(&case.host.peak_source)
                        .unwrap_or_else(|| wire_name(&case.host.method).unwrap_or_default())
                });
                step.gpu_peak_bytes = case.gpu_peak_bytes;
                step.gpu_peak_method = case
                    .gpu_peak_bytes
                    .and_then(|_| wire_name(&case.gpu_peak_method));
                // A step from the history has its figures, not its folder.
                let case_folder = out.join("cases").join(crate::suite::folder_name(&case.id));
                step.case_folder = case_folder.exists().then_some(case_folder);
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

    /// A step's results.json from the history, written where its run
    /// would have written it; `None` when the history has none (or
    /// cannot be read: said once, and the history is no longer asked).
    fn take_from_history(&mut self, key: &str, folder: &Path) -> Option<()> {
        let cache = self.cache.as_mut()?;
        let text = match cache.get(key) {
            Ok(text) => text?,
            Err(why) => {
                let location = cache.location();
                self.cache = None;
                self.progress.note(&format!(
                    "warning: the history {location} cannot be read ({why}); steps are run, not taken from it"
                ));
                return None;
            }
        };
        let path = folder.join("run").join("results.json");
        std::fs::create_dir_all(folder.join("run")).ok()?;
        std::fs::write(&path, text).ok()?;
        match finished(&path) {
            Some(_) => Some(()),
            None => {
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Keep a step's finished run in the history, for later bisects.
    fn keep(&mut self, key: &str, candidate: &Candidate, folder: &Path) {
        let Some(cache) = self.cache.as_mut() else {
            return;
        };
        let path = folder.join("run").join("results.json");
        let Ok(results) =
            crate::files::read_input(&path, crate::files::MAX_RESULTS_BYTES, "a results file")
        else {
            return;
        };
        let step = crate::history::BisectStep {
            key: key.to_string(),
            suite: self.options.suite.display().to_string(),
            case_id: self.options.case.clone(),
            candidate: candidate.id.clone(),
            results,
        };
        if let Err(why) = cache.keep(&step) {
            let location = cache.location();
            self.cache = None;
            self.progress.note(&format!(
                "warning: the history {location} cannot keep this bisect's steps ({why})"
            ));
        }
    }

    /// One candidate: a batch of one (see [`Self::try_batch`]).
    fn try_candidate(
        &mut self,
        axis: &mut dyn Prepare,
        candidates: &[Candidate],
        at: usize,
        role: Role,
        lock: Option<&Path>,
        segment: usize,
    ) -> Result<(Step, Option<RunResults>), BisectError> {
        let mut ran = self.try_batch(axis, candidates, &[at], role, lock, segment)?;
        ran.pop().ok_or_else(|| {
            BisectError::Infrastructure("a candidate was neither run nor skipped".into())
        })
    }

    /// What the package axes need of the driver to make their
    /// environment.
    fn setup(&mut self) -> Setup<'_> {
        Setup {
            options: &self.options,
            progress: &mut *self.progress,
            interrupt: &self.interrupt,
        }
    }

    /// What every candidate runs in, for the step keys (it may run pip
    /// freeze once).
    fn environment_of(&mut self, axis: &dyn Prepare) {
        self.environment = axis.environment();
    }

    /// Candidates at once, each on its slot of the GPU pool (one without
    /// a pool): each taken from the bisect resumed or the history where it
    /// can be; the others all made ready first (worktrees built, packages
    /// installed), then run together, waited for, judged in order and
    /// released. A run that was started is always waited for: an error or
    /// an interrupt stops it (as Ctrl-C would), never leaves it behind.
    fn try_batch(
        &mut self,
        axis: &mut dyn Prepare,
        candidates: &[Candidate],
        ats: &[usize],
        role: Role,
        lock: Option<&Path>,
        segment: usize,
    ) -> Result<Vec<(Step, Option<RunResults>)>, BisectError> {
        let mut done: Vec<Option<(Step, Option<RunResults>)>> = vec![None; ats.len()];
        let mut ready: Vec<(usize, usize, PathBuf, Place, String)> = Vec::new();
        let mut failed = None;
        for (slot, &at) in ats.iter().enumerate() {
            let candidate = &candidates[at];
            let folder = self.folder(role, &candidate.label, segment);
            let key = self.key(axis, at);
            if let Some(taken) = self.taken(&key, &folder) {
                done[slot] =
                    Some(self.judge_step(candidate, role, lock, &folder, None, Some(taken))?);
                continue;
            }
            if let Err(e) = std::fs::create_dir_all(&folder) {
                failed = Some(BisectError::Infrastructure(format!(
                    "cannot make {}: {e}",
                    folder.display()
                )));
                break;
            }
            let prepared = axis.prepare(at, &folder, &self.interrupt);
            match prepared {
                // A build or install the interrupt stopped is no skip.
                _ if self.interrupt.requested() => {
                    axis.release(at);
                    failed = Some(BisectError::Interrupted);
                    break;
                }
                Ok(Prepared::Ready(place)) => ready.push((slot, at, folder, place, key)),
                Ok(Prepared::Skip(why)) => {
                    axis.release(at);
                    done[slot] = Some((self.skipped(candidate, role, why), None));
                }
                Err(e) => {
                    axis.release(at);
                    failed = Some(e);
                    break;
                }
            }
        }
        let mut running = Vec::new();
        if failed.is_none() {
            for (slot, at, folder, place, key) in &ready {
                let started = self.command(place, folder, *slot).and_then(|command| {
                    Running::start(command, &folder.join("oomgate.log")).map_err(|e| {
                        BisectError::Infrastructure(format!(
                            "cannot run oomgate for {}: {e}",
                            candidates[*at].label
                        ))
                    })
                });
                match started {
                    Ok(process) => {
                        running.push((*slot, *at, folder.clone(), key.clone(), process, None))
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
        }
        if !running.is_empty() {
            self.rounds += 1;
        }
        // Stop what runs when something failed, as one Ctrl-C would: with
        // the grace period (a second request would skip it).
        if failed.is_some() && !self.interrupt.requested() {
            self.interrupt.request();
        }
        while running.iter().any(|r| r.5.is_none()) {
            for (_, _, _, _, process, ended) in running.iter_mut().filter(|r| r.5.is_none()) {
                *ended = match process.poll(&self.interrupt) {
                    Ok(found) => found,
                    Err(_) => Some(Ended::Interrupted),
                };
            }
            std::thread::sleep(super::spawn::POLL);
        }
        let mut interrupted = false;
        let mut ended_runs = Vec::new();
        for (slot, at, folder, key, _, ended) in running {
            self.runs += 1;
            match ended {
                Some(Ended::Exited(code)) if code != 130 => {
                    ended_runs.push((slot, at, folder, key, code))
                }
                _ => interrupted = true,
            }
        }
        if !interrupted && failed.is_none() {
            for (slot, at, folder, key, code) in ended_runs {
                let candidate = &candidates[at];
                let judged = self.judge_step(candidate, role, lock, &folder, Some(code), None)?;
                // The conditions it ran under, for a --resume; a step that
                // could not be judged (a crash, a setup that failed) is not
                // kept for a later bisect.
                let _ = std::fs::write(folder.join(KEY_FILE), &key);
                if judged.0.verdict != Verdict::Skip {
                    self.keep(&key, candidate, &folder);
                }
                done[slot] = Some(judged);
            }
        }
        for (_, at, _, _, _) in &ready {
            axis.release(*at);
        }
        if let Some(e) = failed {
            return Err(e);
        }
        if interrupted {
            return Err(BisectError::Interrupted);
        }
        Ok(done.into_iter().flatten().collect())
    }

    /// Candidate `at`'s step key (see `cache`).
    fn key(&self, axis: &dyn Prepare, at: usize) -> String {
        self.keys
            .key(&self.options.case, &axis.identity(at), &self.environment)
    }

    /// Where a candidate's run can be taken from instead of run: the
    /// bisect resumed, when its step ran under the same conditions (its
    /// key); or the history (its results.json then written into
    /// `folder`).
    fn taken(&mut self, key: &str, folder: &Path) -> Option<Taken> {
        if self.options.resume {
            let same = std::fs::read_to_string(folder.join(KEY_FILE)).is_ok_and(|k| k == key);
            if same && finished(&folder.join("run").join("results.json")).is_some() {
                return Some(Taken::Resumed);
            }
        }
        self.take_from_history(key, folder).map(|()| Taken::History)
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
