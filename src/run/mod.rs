//! Running a plan: cases one after another — or, with a GPU pool or
//! `--jobs`, several at once, each on its own thread — the instances of a
//! case at once, every event handed to a [`Reporter`].
//!
//! The [`Runner`] owns everything that lives for the whole run. What the
//! cases share — NVML, the memory cgroup hierarchy, the interrupt counter,
//! the environment — is [`Shared`], read by every case's thread; the main
//! thread keeps the rest ([`Conductor`]: the schedule, the baseline, the
//! first fault) and is the only one that talks to the reporters. A case's
//! thread ([`CaseRunner`], in `case`) owns its /proc scanner, its cgroup,
//! its sampler and its supervisors, and sends what it sees to the main
//! thread as [`Note`]s: warnings, progress ticks, faults and, last, its
//! runs. `dispatch` is the main thread's loop, an event handler per note
//! (`launch_next`, `on_progress`, `on_done`); `schedule` decides which case
//! starts next and on which GPUs; `instance` and `launch` start a case's
//! processes through `supervise`, `record` makes a run's result, and
//! `folder` keeps its folder. The runner decides nothing about a case —
//! the judge (`crate::judge`) does — and never formats anything: it builds
//! the results model and emits events, and the reporters write files and
//! the terminal. When a case starts, with each of its ticks and
//! when it finishes, the reporters get the whole results so far — cases
//! still running listed as in flight (`running`) — and results.json and
//! junit.xml are checkpointed about once a second, so a crash loses at
//! most the last second or so of finished cases, never a case it
//! interrupted, and a Ctrl-C nothing. A file that cannot be written (a
//! report, a case's folder, logs or timeline) stops the launching of
//! cases, and the final reports are attempted once more (`fault`).

mod case;
mod dispatch;
mod fault;
mod folder;
mod gpu;
mod instance;
pub mod interrupt;
pub mod launch;
pub mod logs;
mod ready;
mod record;
mod repeat;
pub mod schedule;
mod serve;
mod soak;
mod stop;
pub mod supervise;
mod teardown;
mod watch;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

pub use fault::{RunError, WriteFault};
pub use interrupt::Interrupt;
pub use schedule::{PoolGpu, Schedule};

use crate::baseline::Lock;
use crate::environment::Environment;
use crate::judge::{self, CaseRun};
use crate::measure::cgroup::MemoryHierarchy;
use crate::measure::gpu::{Crowding, GpuMethod};
use crate::measure::nvml::Gpu;
use crate::process;
use crate::report::{Event, Reporter};
use crate::results::{
    BaselineInfo, CaseResult, GpuEnvironment, Measurement, RunResults, SCHEMA_VERSION, Scheduling,
    SharedGpu, SuiteInfo, Summary,
};
use crate::suite::{Case, Suite};
use crate::units::Bytes;
use dispatch::{case_error, settle};
use schedule::{Demand, Placement, Scheduler};

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
    /// The GPU pool, `--jobs`, packing, and past wall times.
    pub schedule: Schedule,
}

/// Which baseline to compare with, and how strictly.
#[derive(Debug, Default)]
pub struct BaselineSetup {
    /// The lock and where it was read from; `None`: no baseline.
    pub lock: Option<(PathBuf, Lock)>,
    /// A case without a baseline fails instead of passing with a notice.
    pub require: bool,
    /// Compare GPU figures even when the GPU model changed (a lock of
    /// before testbeds).
    pub compare_across_gpus: bool,
    /// `--baseline-testbed`: compare every case with this testbed's entries.
    pub testbed: Option<String>,
}

pub struct Runner<'a> {
    shared: Shared<'a>,
    conductor: Conductor<'a>,
}

/// What every case of the run reads, from its own thread.
struct Shared<'a> {
    suite: &'a Suite,
    out_dir: &'a Path,
    interrupt: Interrupt,
    memory: Option<MemoryHierarchy>,
    gpu: Option<Gpu>,
    measurement: Measurement,
    environment: Environment,
    /// Case cgroups made so far (each gets a new name).
    cgroup_serial: AtomicU64,
    /// A file could not be written: no repeat or case is started after it.
    /// Set by a case's thread or by the main thread (`Conductor`).
    faulted: Arc<AtomicBool>,
    /// More than one case may run at once: each case's processes are its
    /// own supervisors' descendants, not all of oomgate's.
    parallel: bool,
    /// The open files each case's /proc scanner may keep.
    open_files_each: u64,
    /// Ports given to the cases' servers so far: never one twice.
    ports: std::sync::Mutex<std::collections::HashSet<u16>>,
    /// Each GPU's use when the run started (by position in the device
    /// table): the level a case waits for its GPUs to settle back to.
    gpu_idle: Vec<Option<u64>>,
    /// Makes the instances' supervisors (see `supervise::forkserver`);
    /// `None` where it could not start: each supervisor is executed.
    forkserver: Option<supervise::forkserver::Forkserver>,
}

/// The main thread's side of a run: which case starts when, the baseline,
/// and the first file that could not be written.
struct Conductor<'a> {
    suite: &'a Suite,
    baseline: BaselineSetup,
    /// Filled when the run starts, from the lock and this environment.
    baseline_info: Option<BaselineInfo>,
    /// This run's environment, for the lock's entries of this machine's
    /// testbed before a case runs (packing, capacity).
    environment: Environment,
    partition: Option<crate::suite::Partition>,
    schedule: Schedule,
    /// The first file that could not be written: no case is launched
    /// after it.
    fault: Option<WriteFault>,
    /// `Shared::faulted`, raised with `fault`: running cases start no
    /// more repeats.
    faulted: Arc<AtomicBool>,
}

/// What a case's thread tells the main thread.
enum Note {
    Warning(String),
    /// One sampling tick.
    Progress {
        elapsed: Duration,
        host_now: Option<Bytes>,
        host_peak: Option<Bytes>,
    },
    /// A file could not be written; the case goes on.
    Fault(WriteFault),
    /// The case is over: each of its runs (one per repeat; with a search,
    /// those of the probe it is judged by) and what its search found;
    /// `completed` is `false` when its thread panicked instead (no run,
    /// nothing stopped).
    Done {
        runs: Vec<CaseRun>,
        capacity: Option<crate::capacity::Capacity>,
        completed: bool,
    },
}

/// The GPUs a case may use, as the schedule gave them.
#[derive(Debug, Clone, Default)]
struct GpuAccess {
    /// `CUDA_VISIBLE_DEVICES` for the case: the UUIDs of its pool GPUs
    /// (empty: none); `None`: no pool, the case sees what oomgate sees.
    visible: Option<String>,
    /// Whether another case shared its GPUs, when others may: a device
    /// delta then never stands for the case.
    crowding: Option<Crowding>,
}

/// A case on its way: started, not yet judged.
struct Live {
    placement: Placement,
    dir: PathBuf,
    /// Its number in the order cases started (the events' `index`).
    index: usize,
    /// Other cases that ran on its GPUs while it ran, by pool GPU.
    shared_with: BTreeMap<usize, BTreeSet<usize>>,
    /// Its packed attempt's result, when this run is the retry alone.
    first_attempt: Option<CaseResult>,
    /// Raised when another case starts on its GPUs.
    crowded: Option<Arc<AtomicBool>>,
    /// The worker thread running it.
    worker: usize,
}

/// A case for a worker thread to run.
struct Job<'c> {
    number: usize,
    case: &'c Case,
    dir: PathBuf,
    access: GpuAccess,
    /// The lock's capacity of a searched case: the search starts there.
    locked_capacity: Option<u64>,
}

/// A worker thread: run each case it is given, keeping its /proc scanner
/// from case to case, until the run closes its queue. A panic must not
/// leave the main thread waiting for a case forever: that case ends as
/// run no times, an error that says so, and the worker goes on with a new
/// scanner.
fn work(shared: &Shared<'_>, queue: &mpsc::Receiver<Job<'_>>, notes: &mpsc::Sender<(usize, Note)>) {
    let mut carried = None;
    for job in queue {
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut runner = case::CaseRunner::new(
                shared,
                job.number,
                job.access,
                notes.clone(),
                carried.take(),
            );
            let ran = match &job.case.search {
                Some(search) => {
                    let (runs, capacity) =
                        runner.run_search(job.case, &job.dir, search, job.locked_capacity);
                    (runs, Some(capacity))
                }
                None => (runner.run_repeats(job.case, &job.dir), None),
            };
            carried = Some(runner.into_carried());
            ran
        }));
        let note = match ran {
            Ok((runs, capacity)) => Note::Done {
                runs,
                capacity,
                completed: true,
            },
            Err(_) => Note::Done {
                runs: Vec::new(),
                capacity: None,
                completed: false,
            },
        };
        // The main thread listens until every case is done.
        notes.send((job.number, note)).ok();
    }
    // The worker's spare cgroup, if any, goes with what it carried.
    drop(carried);
}

impl<'a> Runner<'a> {
    pub fn new(suite: &'a Suite, out_dir: &'a Path, setup: RunSetup) -> Self {
        let jobs = setup.schedule.jobs.max(1);
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
                // Started here, on the thread that runs the cases' loop and
                // outlives every case: the supervisors it makes are this
                // thread's children.
                forkserver: supervise::forkserver::Forkserver::start().ok(),
            },
            conductor: Conductor {
                suite,
                baseline: setup.baseline,
                baseline_info: None,
                environment: Environment::default(),
                partition: setup.partition,
                schedule: setup.schedule,
                fault: None,
                faulted,
            },
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
        let Runner { shared, conductor } = self;
        let shared: &Shared<'_> = shared;
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
                conductor: &mut *conductor,
                cases,
                results: &mut results,
                scheduler: &mut scheduler,
                live: &mut live,
                workers: Vec::new(),
                idle: Vec::new(),
                started: 0,
                ahead: folder::Ahead::default(),
                notes: sender,
                scope,
            };
            loop {
                dispatch.launch_next(reporter);
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

impl Conductor<'_> {
    /// What the run's cases are compared with, for the judge.
    fn judge_baseline(&self) -> judge::Baseline<'_> {
        judge::Baseline {
            lock: self.baseline.lock.as_ref().map(|(_, lock)| lock),
            info: self.baseline_info.as_ref(),
            require: self.baseline.require,
        }
    }

    /// What the run is compared with: the lock's drift against this
    /// environment, and the locked cases that are gone from the suite.
    fn baseline_info(&self, environment: &Environment) -> Option<BaselineInfo> {
        let (path, lock) = self.baseline.lock.as_ref()?;
        let planned: std::collections::HashSet<&str> =
            self.suite.cases.iter().map(|c| c.id.as_str()).collect();
        // Drift against the environment of this machine's testbed (or the
        // one asked for), else the lock's own.
        let locked_environment = match self
            .baseline
            .testbed
            .as_ref()
            .and_then(|t| lock.testbeds.get(t))
        {
            Some(bed) => &bed.environment,
            None => lock.environment_for(environment),
        };
        let mut removed: Vec<String> = lock
            .entries()
            .map(|(_, id, _)| id)
            .filter(|id| !planned.contains(id))
            .map(String::from)
            .collect();
        removed.sort();
        removed.dedup();
        Some(BaselineInfo {
            path: path.clone(),
            locked_at: lock.locked_at.clone(),
            drift: crate::baseline::drift::drift(locked_environment, environment),
            on_drift: self.suite.on_drift,
            gpu_compared: self.baseline.compare_across_gpus
                || self.baseline.testbed.is_some()
                || crate::baseline::drift::same_gpus(&lock.environment, environment),
            testbed: self.baseline.testbed.clone(),
            removed,
        })
    }

    /// The results of a run not started yet.
    fn new_results(&self, shared: &Shared<'_>, planned: usize) -> RunResults {
        let schedule = &self.schedule;
        let scheduling = (schedule.parallel() || schedule.pool.is_some()).then(|| Scheduling {
            jobs: schedule.jobs,
            pack: schedule.pack,
            pool: schedule
                .pool
                .as_ref()
                .map(|gpus| gpus.iter().map(|g| g.reference()).collect()),
            ordered_by_past_times: !schedule.past_wall_s.is_empty(),
        });
        RunResults {
            schema: SCHEMA_VERSION,
            oomgate_version: env!("CARGO_PKG_VERSION").to_string(),
            suite: SuiteInfo {
                name: shared.suite.name.clone(),
                path: shared.suite.path.clone(),
                workdir: shared.suite.workdir.clone(),
            },
            host: host_name(),
            started_at: now_rfc3339(),
            finished_at: None,
            interrupted: false,
            measurement: shared.measurement.clone(),
            gpu: shared.gpu.as_ref().map(|gpu| GpuEnvironment {
                driver_version: gpu.driver_version.clone(),
                cuda_driver_version: gpu.cuda_driver_version.clone(),
                process_listing: Some(gpu.listing),
                devices: gpu.devices.iter().map(|d| d.info.clone()).collect(),
            }),
            summary: Summary {
                planned,
                ..Summary::default()
            },
            environment: shared.environment.clone(),
            baseline: None,
            cases: Vec::with_capacity(planned),
            not_run: Vec::new(),
            planned_cases: Vec::new(),
            pytest_cases: shared
                .suite
                .cases
                .iter()
                .filter(|c| c.pytest.is_some())
                .map(|c| c.id.clone())
                .collect(),
            partition: self.partition,
            scheduling,
            fault: None,
            runner_max_rss_bytes: None,
            runner_cpu_s: None,
            merged_from: None,
            parts: Vec::new(),
        }
    }

    /// What a case needs from the pool; `alone`: it is a retry, never
    /// packed.
    fn demand(&self, case: &Case, alone: bool) -> Demand {
        if self.schedule.pool.is_none() {
            return Demand {
                gpus: 0,
                packed_bytes: None,
            };
        }
        let gpus = case.gpus.unwrap_or(1);
        let packed_bytes = (self.schedule.pack && gpus == 1 && !alone)
            .then(|| self.known_gpu_peak(case))
            .flatten()
            .map(|peak| peak.saturating_add(schedule::pack_margin(peak)));
        Demand { gpus, packed_bytes }
    }

    /// The GPU peak a case is packed by: the lock's, when it was measured
    /// per process (a device delta is no figure of the case's alone), else
    /// the suite's `gpu_memory`.
    fn known_gpu_peak(&self, case: &Case) -> Option<u64> {
        let locked = self
            .baseline
            .lock
            .as_ref()
            .and_then(|(_, lock)| lock.entry_here(&case.id, &self.environment))
            .filter(|locked| {
                matches!(
                    locked.gpu_peak_method,
                    Some(GpuMethod::Sampled { .. } | GpuMethod::DriverAccounting)
                )
            })
            .and_then(|locked| locked.gpu_peak_bytes);
        locked.or(case.gpu_memory.map(Bytes::get))
    }

    /// The capacity the lock holds for a searched case.
    fn locked_capacity(&self, case: &Case) -> Option<u64> {
        self.baseline
            .lock
            .as_ref()
            .and_then(|(_, lock)| lock.entry_here(&case.id, &self.environment))
            .and_then(|locked| locked.capacity)
    }

    /// The GPUs a placed case sees, and whether others may share them.
    fn gpu_access(&self, shared: &Shared<'_>, placement: &Placement) -> GpuAccess {
        match &self.schedule.pool {
            Some(pool) => GpuAccess {
                visible: Some(
                    placement
                        .gpus
                        .iter()
                        .filter_map(|&at| pool.get(at))
                        .map(|gpu| gpu.uuid.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                ),
                crowding: placement.packed().then(|| Crowding {
                    reason: "device-delta not used: another case ran on this GPU meanwhile (--pack)"
                        .to_string(),
                    seen: Arc::default(),
                }),
            },
            None => GpuAccess {
                visible: None,
                crowding: (shared.parallel && shared.gpu.is_some()).then(|| Crowding {
                    reason: format!(
                        "device-delta not used: another case ran on this GPU meanwhile (--jobs {} without a --gpus pool)",
                        self.schedule.jobs
                    ),
                    seen: Arc::default(),
                }),
            },
        }
    }

    /// The cases that shared a case's GPUs, by GPU, for the results.
    fn sharing(
        &self,
        shared_with: &BTreeMap<usize, BTreeSet<usize>>,
        cases: &[&Case],
    ) -> Vec<SharedGpu> {
        let Some(pool) = &self.schedule.pool else {
            return Vec::new();
        };
        shared_with
            .iter()
            .filter(|(_, others)| !others.is_empty())
            .filter_map(|(&gpu, others)| {
                let gpu = pool.get(gpu)?;
                Some(SharedGpu {
                    gpu: gpu.reference(),
                    with: others.iter().map(|&n| cases[n].id.clone()).collect(),
                })
            })
            .collect()
    }

    /// Say at once that a file could not be written, and keep the first
    /// such failure: no case is launched after it.
    fn record_fault(&mut self, fault: WriteFault, reporter: &mut dyn Reporter) {
        let message = match self.fault {
            None => format!("{fault}; no more cases are launched"),
            Some(_) => fault.to_string(),
        };
        self.fault.get_or_insert(fault);
        self.faulted.store(true, Ordering::Relaxed);
        // Only the displays act on a warning; a failure to show one is no
        // fault of the run's files.
        reporter.handle(&Event::Warning { message }).ok();
    }

    /// Record a reporter's failure, if it failed; whether it did.
    fn report_failed(&mut self, outcome: io::Result<()>, reporter: &mut dyn Reporter) -> bool {
        match outcome {
            Ok(()) => false,
            Err(error) => {
                self.record_fault(WriteFault::Report(error), reporter);
                true
            }
        }
    }
}

impl Shared<'_> {
    /// Whether a file could not be written: nothing more is started.
    fn faulted(&self) -> bool {
        self.faulted.load(Ordering::Relaxed)
    }

    /// The run's fork server, when there is one: oomgate's child, no
    /// process of any case.
    fn forkserver_pid(&self) -> Option<i32> {
        self.forkserver
            .as_ref()
            .map(supervise::forkserver::Forkserver::pid)
    }
}

fn now_rfc3339() -> String {
    chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}
