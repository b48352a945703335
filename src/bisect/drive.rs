//! Driving a bisect: the folder claimed (and what a killed bisect left,
//! pruned), each candidate taken from a resumed bisect or the history or
//! made ready by its axis, run by `oomgate run`, read back, judged
//! against the good end's lock and classified (`searches`: the ends
//! proved, the search loops).

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::axis::{Place, Prepare, Prepared, Progress, build_in, with_tail};
use super::cache::Cache;
use super::commits::Commits;
use super::folder::{claim, prune_stale};
use super::git::Repo;
use super::packages::{Sets, Setup, Versions};
use super::spawn::{Ended, Running, run_logged};
use super::verdict::Why;
use super::{Axis, BisectError, Bisected, Candidate, Options, Ran, Range, Role, Step, Taken};
use crate::results::RunResults;
use crate::run::Interrupt;

mod searches;

pub(super) struct Driver<'p> {
    pub(super) options: Options,
    exe: PathBuf,
    pub(super) interrupt: Interrupt,
    pub(super) progress: &'p mut dyn Progress,
    steps: Vec<Step>,
    runs: usize,
    /// Rounds that ran something (a batch of a pool, or one run).
    rounds: usize,
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
    let marker = claim(&options.out, false, None)?;
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
    let code = driver.launch(&here, &place, &folder)?;
    let (step, _) = driver.judge_step(
        &here,
        Role::Step,
        lock_path.as_deref(),
        &folder,
        Some(code),
        None,
    )?;
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
        Ok(Driver {
            options,
            exe,
            interrupt,
            progress,
            steps: Vec::new(),
            runs: 0,
            rounds: 0,
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

    /// Run the case at `place` with `oomgate run` (its budgets and
    /// limits judged there, the good end's lock here, after: a step taken
    /// from an earlier bisect or the history is judged the same way);
    /// its exit code.
    fn launch(
        &mut self,
        candidate: &Candidate,
        place: &Place,
        folder: &Path,
    ) -> Result<i32, BisectError> {
        let command = self.command(place, folder, 0)?;
        self.rounds += 1;
        let log = folder.join("oomgate.log");
        let ended = run_logged(command, &log, &self.interrupt).map_err(|e| {
            BisectError::Infrastructure(format!("cannot run oomgate for {}: {e}", candidate.label))
        })?;
        self.runs += 1;
        match ended {
            Ended::Interrupted | Ended::Exited(130) => Err(BisectError::Interrupted),
            Ended::Exited(code) => Ok(code),
        }
    }

    /// The `oomgate run` of the case at `place`, writing into `folder`,
    /// on the GPUs of pool slot `slot` (with `--gpus`).
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

    /// Prepare, run and release one candidate; or take its run from the
    /// bisect resumed, or from the history.
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
        if let Some(taken) = self.taken(axis, at, &folder) {
            return self.judge_step(candidate, role, lock, &folder, None, Some(taken));
        }
        let key = self.key(axis, at);
        std::fs::create_dir_all(&folder).map_err(|e| {
            BisectError::Infrastructure(format!("cannot make {}: {e}", folder.display()))
        })?;
        let prepared = axis.prepare(at, &folder, &self.interrupt);
        let outcome = match prepared {
            Ok(Prepared::Ready(place)) => self
                .launch(candidate, &place, &folder)
                .and_then(|code| self.judge_step(candidate, role, lock, &folder, Some(code), None)),
            Ok(Prepared::Skip(why)) => Ok((self.skipped(candidate, role, why), None)),
            Err(e) => Err(e),
        };
        axis.release(at);
        if let (Ok((_, Some(_))), Some(key)) = (&outcome, &key) {
            self.keep(key, candidate, &folder);
        }
        outcome
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

    /// What every candidate runs in, for the history's keys: asked of
    /// the axis only when a history keeps steps (it may run pip).
    fn environment_of(&mut self, axis: &dyn Prepare) {
        if self.cache.is_some() {
            self.environment = axis.environment();
        }
    }

    /// Several candidates at once, each on its slot of the GPU pool: made
    /// ready one after another, run together, judged in order. One
    /// candidate is [`Self::try_candidate`].
    fn try_batch(
        &mut self,
        axis: &mut dyn Prepare,
        candidates: &[Candidate],
        ats: &[usize],
        lock: Option<&Path>,
        segment: usize,
    ) -> Result<Vec<(Step, Option<RunResults>)>, BisectError> {
        if ats.len() == 1 {
            return Ok(vec![self.try_candidate(
                axis,
                candidates,
                ats[0],
                Role::Step,
                lock,
                segment,
            )?]);
        }
        let mut done: Vec<Option<(Step, Option<RunResults>)>> = vec![None; ats.len()];
        let mut running = Vec::new();
        let mut failed = None;
        for (slot, &at) in ats.iter().enumerate() {
            let candidate = &candidates[at];
            let folder = self.folder(Role::Step, &candidate.label, segment);
            if let Some(taken) = self.taken(axis, at, &folder) {
                done[slot] = Some(self.judge_step(
                    candidate,
                    Role::Step,
                    lock,
                    &folder,
                    None,
                    Some(taken),
                )?);
                continue;
            }
            if let Err(e) = std::fs::create_dir_all(&folder) {
                failed = Some(BisectError::Infrastructure(format!(
                    "cannot make {}: {e}",
                    folder.display()
                )));
                break;
            }
            match axis.prepare(at, &folder, &self.interrupt) {
                Ok(Prepared::Ready(place)) => {
                    let started = self.command(&place, &folder, slot).and_then(|command| {
                        Running::start(command, &folder.join("oomgate.log")).map_err(|e| {
                            BisectError::Infrastructure(format!(
                                "cannot run oomgate for {}: {e}",
                                candidate.label
                            ))
                        })
                    });
                    match started {
                        Ok(process) => running.push((slot, at, folder, process, None)),
                        Err(e) => {
                            axis.release(at);
                            failed = Some(e);
                            break;
                        }
                    }
                }
                Ok(Prepared::Skip(why)) => {
                    axis.release(at);
                    done[slot] = Some((self.skipped(candidate, Role::Step, why), None));
                }
                Err(e) => {
                    axis.release(at);
                    failed = Some(e);
                    break;
                }
            }
        }
        if !running.is_empty() {
            self.rounds += 1;
        }
        // Every run started is waited for, whatever happened since: none
        // is left behind (an error or an interrupt stops them).
        if failed.is_some() {
            self.interrupt.request();
        }
        while running.iter().any(|(_, _, _, _, ended)| ended.is_none()) {
            for (_, _, _, process, ended) in running.iter_mut().filter(|r| r.4.is_none()) {
                *ended = match process.poll(&self.interrupt) {
                    Ok(found) => found,
                    Err(_) => Some(Ended::Interrupted),
                };
            }
            std::thread::sleep(super::spawn::POLL);
        }
        let mut interrupted = false;
        for (slot, at, folder, _, ended) in running {
            self.runs += 1;
            let code = match ended {
                Some(Ended::Exited(130) | Ended::Interrupted) | None => {
                    interrupted = true;
                    None
                }
                Some(Ended::Exited(code)) => Some(code),
            };
            if let (Some(code), false) = (code, interrupted || failed.is_some()) {
                let candidate = &candidates[at];
                done[slot] = Some(self.judge_step(
                    candidate,
                    Role::Step,
                    lock,
                    &folder,
                    Some(code),
                    None,
                )?);
                if let Some(key) = self.key(axis, at) {
                    self.keep(&key, candidate, &folder);
                }
            }
            axis.release(at);
        }
        if let Some(e) = failed {
            return Err(e);
        }
        if interrupted {
            return Err(BisectError::Interrupted);
        }
        Ok(done.into_iter().flatten().collect())
    }

    /// The history's key of candidate `at`, when a history keeps steps.
    fn key(&self, axis: &dyn Prepare, at: usize) -> Option<String> {
        self.cache
            .as_ref()
            .map(|cache| cache.key(&self.options.case, &axis.identity(at), &self.environment))
    }

    /// Where candidate `at`'s run can be taken from instead of run: the
    /// bisect resumed, or the history (its results.json written into
    /// `folder` then).
    fn taken(&mut self, axis: &dyn Prepare, at: usize, folder: &Path) -> Option<Taken> {
        if self.options.resume && finished(&folder.join("run").join("results.json")).is_some() {
            return Some(Taken::Resumed);
        }
        let key = self.key(axis, at)?;
        self.take_from_history(&key, folder)
            .map(|()| Taken::History)
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
