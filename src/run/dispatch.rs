//! The main thread's loop over a run, as event handlers (in the manner of
//! nextest's `runner/dispatcher.rs`): [`Dispatch::launch_next`] starts what
//! the schedule allows, and each note a case's thread sends is handled by
//! its own method — [`Dispatch::on_progress`], a warning or a fault, and
//! [`Dispatch::on_done`], which hands the case's runs to the judge and
//! either queues its retry alone or settles its result. The dispatch
//! decides nothing about a case: the judge does.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use super::conductor::Conductor;
use super::fault::WriteFault;
use super::folder::{Ahead, in_flight, keep_shared_attempt};
use super::launcher::{Launcher, work};
use super::schedule::Scheduler;
use super::shared::{Job, Live, Note, Shared};
use crate::capacity::Capacity;
use crate::judge;
use crate::record::RunRecord;
use crate::report::{Event, Reporter};
use crate::results::{CaseResult, CaseStatus, RunResults, SharedGpu};
use crate::suite::Case;
use crate::units::Bytes;

/// What the main thread holds while cases run: the results so far, the
/// schedule, the cases in flight and the worker threads.
pub(super) struct Dispatch<'d, 'a, 'scope, 'env> {
    pub(super) shared: &'env Shared<'a>,
    /// What runs each case on its worker thread.
    pub(super) launcher: &'env dyn Launcher,
    pub(super) conductor: &'d mut Conductor<'a>,
    pub(super) cases: &'env [&'env Case],
    pub(super) results: &'d mut RunResults,
    pub(super) scheduler: &'d mut Scheduler,
    pub(super) live: &'d mut HashMap<usize, Live>,
    /// Worker threads, each running one case at a time, kept for the next
    /// case (a thread and a /proc scanner per case cost a millisecond of a
    /// trivial case): their job queues, and which are idle. One case at a
    /// time is one worker for the whole run. The queues close when the
    /// dispatch is dropped, and the workers end.
    pub(super) workers: Vec<mpsc::Sender<Job<'env>>>,
    pub(super) idle: Vec<usize>,
    /// The case queued behind the one each worker runs, by worker: a
    /// shared session's next test ([`Dispatch::follow`]).
    pub(super) followers: HashMap<usize, usize>,
    /// Cases started so far (the events' `index`).
    pub(super) started: usize,
    /// The folder of the case to start next, made while others run.
    pub(super) ahead: Ahead,
    pub(super) notes: mpsc::Sender<(usize, Note)>,
    pub(super) scope: &'scope std::thread::Scope<'scope, 'env>,
}

impl<'d, 'a, 'scope, 'env> Dispatch<'d, 'a, 'scope, 'env>
where
    'a: 'env,
{
    /// Start every case the schedule allows now, unless the run is
    /// stopping. `end_follows`: a case's end is reported right after, in
    /// this turn (`Event::CaseStarted::end_follows`).
    pub(super) fn launch_next(&mut self, reporter: &mut dyn Reporter, end_follows: bool) {
        while !self.stopping() {
            let (cases, conductor) = (self.cases, &*self.conductor);
            let Some((number, placement, alone)) = self
                .scheduler
                .next(|n, alone| conductor.demand(cases[n], alone))
            else {
                break;
            };
            if !self.launch(number, placement, alone, reporter, end_follows, None) {
                break;
            }
        }
        self.follow(reporter, end_follows);
    }

    /// Queue a shared session's next test behind the test each worker
    /// runs in that session (at most one; see `Scheduler::follow`): the
    /// worker asks the session for it the moment the test before answers
    /// (`session::Sessions::ask_next`), so the session does not wait on
    /// this thread's turn between two tests: the test before's judging,
    /// words and reports, and the next one's start. A short test takes
    /// about as long as that turn.
    fn follow(&mut self, reporter: &mut dyn Reporter, end_follows: bool) {
        if !self.shared.pytest_sessions {
            return;
        }
        let leaders: Vec<(usize, usize)> = self
            .live
            .iter()
            .filter(|(_, live)| !self.followers.contains_key(&live.worker))
            .filter_map(|(&number, live)| {
                let table = self.cases[number].pytest_session.as_ref()?.table;
                Some((live.worker, table))
            })
            .collect();
        for (worker, table) in leaders {
            if self.stopping() {
                return;
            }
            let (cases, conductor) = (self.cases, &*self.conductor);
            let Some(number) = self.scheduler.follow(|n| {
                cases[n]
                    .pytest_session
                    .as_ref()
                    .is_some_and(|s| s.table == table)
                    && conductor.demand(cases[n], false).gpus == 0
            }) else {
                continue;
            };
            self.followers.insert(worker, number);
            let placement = super::schedule::Placement::default();
            if !self.launch(
                number,
                placement,
                false,
                reporter,
                end_follows,
                Some(worker),
            ) {
                // Not started (a file could not be written): nothing more is.
                self.followers.remove(&worker);
                self.scheduler.lead();
                return;
            }
        }
    }

    /// The run is stopping: Ctrl-C, or a file that could not be written
    /// (a case's thread may have met a fault whose note is still on its
    /// way: `faulted` says so at once). Nothing more is started.
    fn stopping(&self) -> bool {
        self.shared.interrupt.requested() || self.conductor.fault.is_some() || self.shared.faulted()
    }

    /// While cases run, make the folder of the case most likely to start
    /// next (see [`Ahead`]).
    pub(super) fn prepare_ahead(&mut self) {
        if self.live.is_empty() || self.stopping() {
            return;
        }
        if let Some(number) = self.scheduler.first_waiting() {
            self.ahead.make(self.shared, number, self.cases[number]);
        }
    }

    /// Start one case (or its retry alone) on a worker; `false` when a
    /// file could not be written, and nothing more is to be launched.
    fn launch(
        &mut self,
        number: usize,
        placement: super::schedule::Placement,
        alone: bool,
        reporter: &mut dyn Reporter,
        end_follows: bool,
        on: Option<usize>,
    ) -> bool {
        let case = self.cases[number];
        let mut first_attempt = None;
        let (dir, index) = match self.live.remove(&number) {
            // The retry alone: same folder, the logs go on.
            Some(earlier) if alone => {
                first_attempt = earlier.first_attempt;
                if let Err(fault) = keep_shared_attempt(&earlier.dir, case) {
                    self.conductor.record_fault(fault, reporter);
                }
                (earlier.dir, earlier.index)
            }
            _ => match self.start(number, case, &placement, reporter, end_follows) {
                Some(started) => started,
                None => return false,
            },
        };
        let access = self.conductor.gpu_access(self.shared, &placement);
        let crowded = access.crowding.as_ref().map(|c| Arc::clone(&c.seen));
        let shared_with = self.crowd(number, &placement, crowded.as_ref());
        let worker = on.or_else(|| self.idle.pop()).unwrap_or_else(|| {
            let (jobs, queue) = mpsc::channel::<Job<'env>>();
            let (launcher, shared, notes) = (self.launcher, self.shared, self.notes.clone());
            // Named, for a profiler's and a debugger's sake.
            let named = std::thread::Builder::new()
                .name(format!("oomgate-worker-{}", self.workers.len()))
                .spawn_scoped(self.scope, move || work(launcher, shared, &queue, &notes));
            if let Err(e) = named {
                panic!("cannot start a worker thread: {e}");
            }
            self.workers.push(jobs);
            self.workers.len() - 1
        });
        let job = Job {
            number,
            case,
            dir: dir.clone(),
            access,
            locked_capacity: self.conductor.locked_capacity(case),
        };
        // A worker lives as long as its queue: until the run ends.
        self.workers[worker].send(job).ok();
        self.live.insert(
            number,
            Live {
                placement,
                dir,
                index,
                shared_with,
                first_attempt,
                crowded,
                worker,
            },
        );
        true
    }

    /// A case's first start: its folder, its in-flight entry in the
    /// results, `CaseStarted`. `None` when a file could not be written.
    fn start(
        &mut self,
        number: usize,
        case: &Case,
        placement: &super::schedule::Placement,
        reporter: &mut dyn Reporter,
        end_follows: bool,
    ) -> Option<(PathBuf, usize)> {
        let dir = match self.ahead.take(self.shared, number, case) {
            Ok(dir) => dir,
            Err(fault) => {
                self.not_launched(number, case, placement, fault, reporter);
                return None;
            }
        };
        // Listed as in flight until it finishes, so a checkpoint written
        // meanwhile names it, and one left by a killed oomgate reads as a
        // case it did not finish, not as one it never ran.
        self.results.cases.push(in_flight(self.shared, case, &dir));
        let case_started = reporter.handle(&Event::CaseStarted {
            case,
            index: self.started,
            planned: self.cases.len(),
            results: self.results,
            end_follows,
        });
        if self.conductor.report_failed(case_started, reporter) {
            self.results.cases.pop();
            self.results.not_run.push(case.id.clone());
            self.scheduler.finished(number, placement);
            return None;
        }
        self.started += 1;
        Some((dir, self.started - 1))
    }

    fn not_launched(
        &mut self,
        number: usize,
        case: &Case,
        placement: &super::schedule::Placement,
        fault: WriteFault,
        reporter: &mut dyn Reporter,
    ) {
        self.conductor.record_fault(fault, reporter);
        self.scheduler.finished(number, placement);
        self.results.not_run.push(case.id.clone());
    }

    /// Who runs on a starting case's GPUs from now on: under a pool, the
    /// packed cases of its GPUs; without one, every GPU case. Each side is
    /// told it is crowded, and under a pool each records the other.
    fn crowd(
        &mut self,
        number: usize,
        placement: &super::schedule::Placement,
        crowded: Option<&Arc<std::sync::atomic::AtomicBool>>,
    ) -> BTreeMap<usize, BTreeSet<usize>> {
        let mut shared_with: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
        let Some(crowded) = crowded else {
            return shared_with;
        };
        let neighbours: Vec<(Option<usize>, usize)> = match self.conductor.schedule.pool {
            Some(_) => placement
                .gpus
                .iter()
                .flat_map(|&gpu| {
                    self.scheduler
                        .tenants(gpu)
                        .iter()
                        .map(move |&c| (Some(gpu), c))
                })
                .collect(),
            None => self.live.keys().map(|&c| (None, c)).collect(),
        };
        for (gpu, other) in neighbours.into_iter().filter(|(_, c)| *c != number) {
            let Some(neighbour) = self.live.get_mut(&other) else {
                continue;
            };
            let Some(theirs) = &neighbour.crowded else {
                continue;
            };
            theirs.store(true, Ordering::Relaxed);
            crowded.store(true, Ordering::Relaxed);
            if let Some(gpu) = gpu {
                neighbour.shared_with.entry(gpu).or_default().insert(number);
                shared_with.entry(gpu).or_default().insert(other);
            }
        }
        shared_with
    }

    /// What a case's thread said.
    pub(super) fn on_note(&mut self, number: usize, note: Note, reporter: &mut dyn Reporter) {
        match note {
            Note::Warning(warning) => {
                let message = crate::report::words::warning(&self.cases[number].id, &warning);
                reporter.handle(&Event::Warning { message }).ok();
            }
            Note::Fault(fault) => self.conductor.record_fault(fault, reporter),
            Note::Progress {
                elapsed,
                host_now,
                host_peak,
            } => self.on_progress(number, elapsed, host_now, host_peak, reporter),
            Note::Done {
                runs,
                capacity,
                completed,
            } => self.on_done(number, runs, capacity, completed, reporter),
        }
    }

    fn on_progress(
        &mut self,
        number: usize,
        elapsed: Duration,
        host_now: Option<Bytes>,
        host_peak: Option<Bytes>,
        reporter: &mut dyn Reporter,
    ) {
        reporter
            .handle(&Event::CaseProgress {
                case: self.cases[number],
                elapsed,
                host_now,
                host_peak,
                results: self.results,
            })
            .ok();
    }

    /// A case's thread is done with it: judged, then queued again alone
    /// (the judge's call) or settled in the results and reported.
    fn on_done(
        &mut self,
        number: usize,
        runs: Vec<RunRecord>,
        capacity: Option<Capacity>,
        completed: bool,
        reporter: &mut dyn Reporter,
    ) {
        let case = self.cases[number];
        let Some(mut done) = self.live.remove(&number) else {
            return;
        };
        // The case queued behind it on its worker now leads there.
        match self.followers.remove(&done.worker) {
            Some(_) => self.scheduler.lead(),
            None => self.idle.push(done.worker),
        }
        if completed {
            self.scheduler.finished(number, &done.placement);
        } else {
            // Its thread panicked: what it started may still hold its GPUs.
            self.scheduler.lost(&done.placement);
        }
        // Handed to its worker (queued behind another) but Ctrl-C came
        // first: not run, as a case never handed; its in-flight entry goes.
        if completed && !runs.is_empty() && runs.iter().all(RunRecord::never_began) {
            if let Some(at) = self
                .results
                .cases
                .iter()
                .position(|c| c.id == case.id && c.status == CaseStatus::Running)
            {
                self.results.cases.remove(at);
            }
            self.results.not_run.push(case.id.clone());
            return;
        }
        let sharing = self.conductor.sharing(&done.shared_with, self.cases);
        // A case the judge cannot send back to run alone (it shared no
        // GPU, and no GPU of it was unsettled, or it is that retry) frees
        // its worker now: the next case starts before this one is judged,
        // so a short test of a shared session waits on no judging.
        let may_retry = done.first_attempt.is_none()
            && (!sharing.is_empty()
                || runs
                    .iter()
                    .any(|run| run.settle.as_ref().is_some_and(|s| !s.settled)));
        if !may_retry {
            self.launch_next(reporter, true);
        }
        let mut result = if runs.is_empty() {
            case_error(
                self.shared,
                case,
                "oomgate's thread for this case failed (an internal error); its processes were killed",
            )
        } else {
            let judgement = judge::judge_case(
                judge::Finished {
                    case,
                    runs,
                    capacity,
                    shared: !sharing.is_empty(),
                    first_attempt: done.first_attempt.take(),
                    stopping: self.shared.interrupt.requested() || self.conductor.fault.is_some(),
                },
                &self.conductor.judge_baseline(),
            );
            let mut result = judgement.result;
            let torch = self.shared.environment.torch_version();
            if let Some(retry) = judgement.retry {
                crate::report::words::word_case(&mut result, &judgement.verdict, torch);
                let message = match retry {
                    judge::Retry::Shared => format!(
                        "{}: failed while sharing its GPU with {}; retried alone",
                        case.id,
                        shared_names(&sharing)
                    ),
                    judge::Retry::Unsettled => format!(
                        "{}: ran out of GPU memory while its GPU had not settled at its start (an earlier case's memory not yet given back); retried once",
                        case.id
                    ),
                };
                reporter.handle(&Event::Warning { message }).ok();
                result.gpus = match retry {
                    judge::Retry::Shared => Some(case.gpus.unwrap_or(1)),
                    judge::Retry::Unsettled => self
                        .conductor
                        .schedule
                        .pool
                        .as_ref()
                        .map(|_| case.gpus.unwrap_or(1)),
                };
                result.gpu_sharing = sharing;
                done.first_attempt = Some(result);
                done.shared_with.clear();
                self.scheduler.retry_alone(number);
                self.live.insert(number, done);
                return;
            }
            // Settled: the next case starts before this one is worded and
            // reported, so its thread runs while this one does that (a
            // short test of a shared session takes about as long as the
            // wording and the reports of the test before it).
            self.launch_next(reporter, true);
            crate::report::words::word_case(&mut result, &judgement.verdict, torch);
            result
        };
        result.gpus = self
            .conductor
            .schedule
            .pool
            .as_ref()
            .map(|_| case.gpus.unwrap_or(1));
        result.gpu_sharing = sharing;
        result.definition = crate::results::definition::of(case, &self.shared.suite.workdir);
        // Its in-flight entry went in as the `index`-th case started.
        let at = settle(self.results, result, Some(done.index));
        (self.results.runner_max_rss_bytes, self.results.runner_cpu_s) = crate::process::own_cost();
        self.results.fault = self.conductor.fault.as_ref().map(ToString::to_string);
        let finished = reporter.handle(&Event::CaseFinished {
            result: &self.results.cases[at],
            index: done.index,
            planned: self.cases.len(),
            results: self.results,
        });
        self.conductor.report_failed(finished, reporter);
    }
}

/// A case oomgate could not run or follow to its end: an error with
/// nothing measured, never a quiet skip.
pub(super) fn case_error(shared: &Shared<'_>, case: &Case, message: &str) -> CaseResult {
    let mut result = CaseResult::unmeasured(case.id.clone());
    result.message = Some(message.to_string());
    result.host.method = shared.measurement.host_method;
    result.pytest = case.pytest.clone();
    result.failure_kind = judge::failure_kind(&result, None);
    result
}

/// A case's final result joins the run: counted, and in place of its
/// in-flight entry. Where it now is in `results.cases`.
pub(super) fn settle(results: &mut RunResults, result: CaseResult, at: Option<usize>) -> usize {
    results.summary.add(&result);
    // Where it was put when it started, else found by its id: no scan of
    // every case per case finished.
    let at = at
        .filter(|&at| results.cases.get(at).is_some_and(|c| c.id == result.id))
        .or_else(|| results.cases.iter().position(|c| c.id == result.id));
    match at {
        Some(at) => {
            results.cases[at] = result;
            at
        }
        None => {
            results.cases.push(result);
            results.cases.len() - 1
        }
    }
}

/// `a, b (GPU 1)` for a warning.
fn shared_names(sharing: &[SharedGpu]) -> String {
    let names: Vec<String> = sharing
        .iter()
        .map(|s| format!("{} (GPU {})", s.with.join(", "), s.gpu.index))
        .collect();
    names.join("; ")
}

#[cfg(test)]
mod tests;
