//! Running a plan: cases one after another — or, with a GPU pool or
//! `--jobs`, several at once, each on its own thread — the instances of a
//! case at once, every event handed to a [`Reporter`].
//!
//! The [`Runner`] owns everything that lives for the whole run. What the
//! cases share — NVML, the memory cgroup hierarchy, the interrupt counter,
//! the environment — is `Shared`, read by every case's thread; the main
//! thread keeps the rest (`Conductor`: the schedule, the baseline, the
//! first fault) and is the only one that talks to the reporters. A case's
//! thread (`CaseRunner`, in `case`) owns its /proc scanner, its cgroup,
//! its sampler and its supervisors, and sends what it sees to the main
//! thread as `Note`s: warnings, progress ticks, faults and, last, its
//! runs. `dispatch` is the main thread's loop, an event handler per note
//! (`launch_next`, `on_progress`, `on_done`); `schedule` decides which case
//! starts next and on which GPUs; `instance` and `launch` start a case's
//! processes through `supervise`, `measured` makes a run's measurement
//! record (`crate::record`), and `folder` keeps its folder. The runner
//! decides nothing about a case — the judge (`crate::judge`) does, on the
//! main thread, from the measurements a case's thread hands over — and
//! never formats anything: it emits events, and the reporters write files
//! and the terminal. When a case starts, with each of its ticks and
//! when it finishes, the reporters get the whole results so far — cases
//! still running listed as in flight (`running`) — and results.json and
//! junit.xml are checkpointed about once a second, so a crash loses at
//! most the last second or so of finished cases, never a case it
//! interrupted, and a Ctrl-C nothing. A file that cannot be written (a
//! report, a case's folder, logs or timeline) stops the launching of
//! cases, and the final reports are attempted once more (`fault`).

mod case;
mod conductor;
mod dispatch;
mod fault;
mod folder;
mod gpu;
mod instance;
pub mod interrupt;
pub mod launch;
mod launcher;
pub mod logs;
mod measured;
mod ready;
mod repeat;
pub mod schedule;
mod serve;
mod session;
mod shared;
mod soak;
mod stop;
pub mod supervise;
mod teardown;
mod watch;

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::mpsc;

pub use conductor::BaselineSetup;
pub use fault::{RunError, WriteFault};
pub use interrupt::Interrupt;
pub use schedule::{PoolGpu, Schedule};

use crate::environment::Environment;
use crate::measure::cgroup::MemoryHierarchy;
use crate::measure::nvml::Gpu;
use crate::process;
use crate::report::{Event, Reporter};
use crate::results::{Measurement, RunResults};
use crate::suite::{Case, Suite};
use conductor::Conductor;
use dispatch::{case_error, settle};
use schedule::Scheduler;
use shared::{Live, Note, Shared, now_rfc3339};

/// Everything a run needs besides the suite and the out dir.
pub struct RunSetup {
    pub interrupt: Interrupt,
    /// Where each case gets a memory cgroup; `None`: host memory is
    /// measured from /proc (the measurement's note says why).
    pub memory: Option<MemoryHierarchy>,
    /// NVML, opened once for the whole run; `None` when GPU memory is not
    /// measured (the measurement's note says why).
    pub gpu: Option<Gpu>,
    pub measurement: Measurement,
    pub environment: Environment,
    pub baseline: BaselineSetup,
    /// The shard of the suite this run is (`--partition`).
    pub partition: Option<crate::suite::Partition>,
    /// Where the run came from (commit, branch, CI run).
    pub origin: crate::results::RunOrigin,
    /// The GPU pool, `--jobs`, packing, and past wall times.
    pub schedule: Schedule,
    /// The shared pytest sessions the collection started, by table.
    pub pytest_sessions: crate::pytest::session::Parked,
}

pub struct Runner<'a> {
    shared: Shared<'a>,
    conductor: Conductor<'a>,
    /// What runs each case: its processes, or in the tests a script.
    launcher: Box<dyn launcher::Launcher>,
}

impl<'a> Runner<'a> {
    pub fn new(suite: &'a Suite, out_dir: &'a Path, setup: RunSetup) -> Self {
        // Started here, on the thread that runs the cases' loop and
        // outlives every case: the supervisors it makes are this thread's
        // children.
        let forkserver = supervise::forkserver::Forkserver::start().ok();
        Self::with_launcher(
            suite,
            out_dir,
            setup,
            Box::new(launcher::Processes),
            forkserver,
        )
    }

    /// A runner whose cases are run by `launcher`.
    fn with_launcher(
        suite: &'a Suite,
        out_dir: &'a Path,
        setup: RunSetup,
        launcher: Box<dyn launcher::Launcher>,
        forkserver: Option<supervise::forkserver::Forkserver>,
    ) -> Self {
        let jobs = setup.schedule.jobs.max(1);
        // A pool gives each case its GPUs through its environment, which a
        // session started with one environment cannot follow.
        let pytest_sessions = setup.gpu.is_none() || setup.schedule.pool.is_none();
        let faulted = Arc::new(AtomicBool::new(false));
        let gpu_idle = setup.gpu.as_ref().map_or(Vec::new(), |gpu| {
            (0..gpu.devices.len())
                .map(|position| crate::measure::gpu::settle::idle_level(gpu, position))
                .collect()
        });
        Runner {
            shared: Shared {
                gpu_idle,
                suite,
                out_dir,
                interrupt: setup.interrupt,
                memory: setup.memory,
                gpu: setup.gpu,
                measurement: setup.measurement,
                environment: setup.environment,
                cgroup_serial: AtomicU64::new(0),
                ports: std::sync::Mutex::default(),
                faulted: Arc::clone(&faulted),
                parallel: setup.schedule.parallel(),
                open_files_each: process::open_file_limit() / jobs as u64,
                pytest_sessions,
                parked: setup.pytest_sessions,
                forkserver,
            },
            conductor: Conductor {
                suite,
                baseline: setup.baseline,
                baseline_info: None,
                environment: Environment::default(),
                partition: setup.partition,
                origin: setup.origin,
                schedule: setup.schedule,
                fault: None,
                faulted,
            },
            launcher,
        }
    }

    /// Run the cases (given in the suite's order; they start in the
    /// schedule's). Only infrastructure problems are errors; failing cases
    /// are results.
    pub fn run(
        &mut self,
        cases: &[&Case],
        reporter: &mut dyn Reporter,
    ) -> Result<RunResults, RunError> {
        let Runner {
            shared,
            conductor,
            launcher,
        } = self;
        let launcher: &dyn launcher::Launcher = launcher.as_ref();
        let shared: &Shared<'_> = shared;
        // The sessions collection left for tables none of whose tests
        // run in one (a filter, a shard, GPU memory measured) end now.
        let in_sessions: std::collections::BTreeSet<usize> = cases
            .iter()
            .filter_map(|case| case.pytest_session.as_ref())
            .filter(|_| shared.pytest_sessions)
            .map(|session| session.table)
            .collect();
        shared.parked.keep_only(&in_sessions);
        let mut results = conductor.new_results(shared, cases.len());
        // Every checkpoint names the cases planned, so that one left by a
        // killed oomgate says which it never reached.
        results.planned_cases = cases.iter().map(|c| c.id.clone()).collect();
        conductor.baseline_info = conductor.baseline_info(&results.environment);
        conductor.environment = results.environment.clone();
        results.baseline = conductor.baseline_info.clone();
        let started = reporter.handle(&Event::RunStarted {
            suite: shared.suite,
            planned: cases.len(),
            measurement: &shared.measurement,
        });
        conductor.report_failed(started, reporter);
        let isolated = cases
            .iter()
            .filter(|case| case.pytest_session.is_some() && !shared.pytest_sessions)
            .count();
        if isolated > 0 {
            let message = format!(
                "this run places cases on a pool of GPUs (--gpus): {isolated} pytest test(s) each run in a process of their own, not in their table's shared session, which cannot move between the pool's GPUs"
            );
            reporter.handle(&Event::Warning { message }).ok();
        }

        let ids: Vec<&str> = cases.iter().map(|c| c.id.as_str()).collect();
        let order = schedule::launch_order(&ids, &conductor.schedule.past_wall_s);
        let mut scheduler = Scheduler::new(
            order,
            conductor.schedule.pool.as_deref(),
            conductor.schedule.jobs,
        );
        let (sender, notes) = mpsc::channel::<(usize, Note)>();
        let mut live: HashMap<usize, Live> = HashMap::new();
        std::thread::scope(|scope| {
            let mut dispatch = dispatch::Dispatch {
                shared,
                launcher,
                conductor: &mut *conductor,
                cases,
                results: &mut results,
                scheduler: &mut scheduler,
                live: &mut live,
                workers: Vec::new(),
                idle: Vec::new(),
                followers: HashMap::new(),
                started: 0,
                ahead: folder::Ahead::default(),
                notes: sender,
                scope,
            };
            loop {
                dispatch.launch_next(reporter, false);
                if dispatch.scheduler.idle() {
                    break;
                }
                dispatch.prepare_ahead();
                // Every live case's thread holds a sender: this returns.
                let Ok((number, note)) = notes.recv() else {
                    break;
                };
                dispatch.on_note(number, note, reporter);
            }
            dispatch.ahead.discard();
        });
        // Cases left waiting did not run, in the suite's order: after
        // Ctrl-C or a fault, not run; otherwise no GPU ever came free for
        // them (a case's thread died holding its GPUs), an error each. A
        // retry that never ran keeps its failed first attempt.
        let stopped = shared.interrupt.requested() || shared.faulted();
        let mut waiting = scheduler.drain_waiting();
        waiting.sort_unstable();
        for number in waiting {
            let result = match live.remove(&number).and_then(|l| l.first_attempt) {
                Some(first) => first,
                None if stopped => {
                    results.not_run.push(cases[number].id.clone());
                    continue;
                }
                None => case_error(
                    shared,
                    cases[number],
                    "not run: no GPU of the pool came free for it (a case's thread failed while holding its GPUs; see the warnings)",
                ),
            };
            settle(&mut results, result, None);
        }
        if shared.parallel {
            // Orphans of a supervisor killed from outside were re-parented
            // to oomgate, outside every case's scope.
            process::reap_exited_children(shared.forkserver_pid());
        }
        // Results in the suite's order, whatever order the cases ran in.
        let position: HashMap<&str, usize> =
            ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        results
            .cases
            .sort_by_key(|c| position.get(c.id.as_str()).copied().unwrap_or(usize::MAX));
        results
            .not_run
            .sort_by_key(|id| position.get(id.as_str()).copied().unwrap_or(usize::MAX));

        crate::judge::largest_values_hints(&mut results.cases);
        // One case against another, once both are in.
        results.parity = crate::judge::judge_parity(&shared.suite.parity, &results.cases);
        crate::report::words::word_parities(&mut results.parity);
        // The run ended: its cases and not_run hold every planned case.
        results.planned_cases = Vec::new();
        results.interrupted = shared.interrupt.requested();
        results.finished_at = Some(now_rfc3339());
        results.fault = conductor.fault.as_ref().map(ToString::to_string);
        // Written whatever failed before: what was measured is kept where
        // it still can be. oomgate's own figures are taken once the pages
        // are written, so they include writing them; only results.json,
        // which carries them, comes after.
        let pages = reporter
            .handle(&Event::RunFinishing { results: &results })
            .err();
        (results.runner_max_rss_bytes, results.runner_cpu_s) = process::own_cost();
        let json = reporter
            .handle(&Event::RunFinished { results: &results })
            .err();
        let at_end = match (pages, json) {
            (Some(pages), Some(json)) => {
                Some(io::Error::new(json.kind(), format!("{pages}; {json}")))
            }
            (pages, json) => pages.or(json),
        };
        match (conductor.fault.take(), at_end) {
            (None, None) => Ok(results),
            (during, at_end) => Err(RunError::Write {
                during,
                not_run: results.not_run,
                at_end,
            }),
        }
    }
}
