//! Running a plan: cases one after another, the instances of a case at
//! once, every event handed to a [`Reporter`].
//!
//! The [`Runner`] owns everything that lives for the whole run — the /proc
//! scanner, NVML, the memory cgroup hierarchy, the interrupt counter — and
//! `case` runs one case with them (`instance` and `launch` start its
//! processes through `supervise`, `assemble` makes its result). The runner
//! never formats anything: it builds the results model and emits events,
//! and the reporters write files and the terminal. When a case starts,
//! with each of its ticks and when it finishes, the reporters get the whole
//! results so far — while it runs, with the case itself listed last as in
//! flight (`running`) — and results.json and junit.xml are checkpointed
//! about once a second, so a crash loses at most the last second or so of
//! finished cases, never the case it interrupted, and a Ctrl-C nothing. A
//! file that cannot be written (a report, a case's folder, logs or
//! timeline) stops the launching of cases, and the final reports are
//! attempted once more (`fault`).

mod assemble;
mod case;
mod checks;
mod fault;
mod gpu;
mod instance;
pub mod interrupt;
mod judge;
pub mod launch;
pub mod logs;
mod stop;
pub mod supervise;
mod teardown;

use std::io;
use std::path::{Path, PathBuf};

pub use fault::{RunError, WriteFault};
pub use interrupt::Interrupt;

use crate::baseline::Lock;
use crate::environment::Environment;
use crate::measure::cgroup::MemoryHierarchy;
use crate::measure::nvml::Gpu;
use crate::measure::procfs::Scanner;
use crate::process;
use crate::report::{Event, Reporter};
use crate::results::{
    BaselineInfo, CaseResult, CaseStatus, GpuEnvironment, IN_FLIGHT_MESSAGE, Measurement,
    RunResults, SCHEMA_VERSION, SuiteInfo, Summary,
};
use crate::suite::{Case, Suite};

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
}

/// Which baseline to compare with, and how strictly.
#[derive(Debug, Default)]
pub struct BaselineSetup {
    /// The lock and where it was read from; `None`: no baseline.
    pub lock: Option<(PathBuf, Lock)>,
    /// A case without a baseline fails instead of passing with a notice.
    pub require: bool,
    /// Compare GPU figures even when the GPU model changed.
    pub compare_across_gpus: bool,
}

pub struct Runner<'a> {
    suite: &'a Suite,
    out_dir: &'a Path,
    interrupt: Interrupt,
    scanner: Scanner,
    memory: Option<MemoryHierarchy>,
    /// Case cgroups made so far (each gets a new name).
    cgroup_serial: u64,
    gpu: Option<Gpu>,
    measurement: Measurement,
    environment: Environment,
    baseline: BaselineSetup,
    /// Filled when the run starts, from the lock and this environment.
    baseline_info: Option<BaselineInfo>,
    /// The first file that could not be written: no case is launched
    /// after it.
    partition: Option<crate::suite::Partition>,
    fault: Option<WriteFault>,
}

impl<'a> Runner<'a> {
    pub fn new(suite: &'a Suite, out_dir: &'a Path, setup: RunSetup) -> Self {
        Runner {
            suite,
            out_dir,
            interrupt: setup.interrupt,
            scanner: Scanner::with_open_files(process::open_file_limit()),
            memory: setup.memory,
            cgroup_serial: 0,
            gpu: setup.gpu,
            measurement: setup.measurement,
            environment: setup.environment,
            baseline: setup.baseline,
            baseline_info: None,
            partition: setup.partition,
            fault: None,
        }
    }

    /// Run the cases in order. Only infrastructure problems are errors;
    /// failing cases are results.
    pub fn run(
        &mut self,
        cases: &[&Case],
        reporter: &mut dyn Reporter,
    ) -> Result<RunResults, RunError> {
        let mut results = RunResults {
            schema: SCHEMA_VERSION,
            oomgate_version: env!("CARGO_PKG_VERSION").to_string(),
            suite: SuiteInfo {
                name: self.suite.name.clone(),
                path: self.suite.path.clone(),
                workdir: self.suite.workdir.clone(),
            },
            host: host_name(),
            started_at: now_rfc3339(),
            finished_at: None,
            interrupted: false,
            measurement: self.measurement.clone(),
            gpu: self.gpu.as_ref().map(|gpu| GpuEnvironment {
                driver_version: gpu.driver_version.clone(),
                cuda_driver_version: gpu.cuda_driver_version.clone(),
                devices: gpu.devices.iter().map(Into::into).collect(),
            }),
            summary: Summary {
                planned: cases.len(),
                ..Summary::default()
            },
            environment: self.environment.clone(),
            baseline: None,
            cases: Vec::with_capacity(cases.len()),
            not_run: Vec::new(),
            partition: self.partition,
            fault: None,
            runner_max_rss_bytes: None,
            runner_cpu_s: None,
            merged_from: None,
            parts: Vec::new(),
        };
        self.baseline_info = self.baseline_info(&results.environment);
        results.baseline = self.baseline_info.clone();
        let started = reporter.handle(&Event::RunStarted {
            suite: self.suite,
            planned: cases.len(),
            measurement: &self.measurement,
        });
        self.report_failed(started, reporter);

        for (index, case) in cases.iter().enumerate() {
            if self.interrupt.requested() || self.fault.is_some() {
                results
                    .not_run
                    .extend(cases[index..].iter().map(|c| c.id.clone()));
                break;
            }
            let case_dir = match self.prepare_case_dir(case) {
                Ok(dir) => dir,
                Err(fault) => {
                    self.record_fault(fault, reporter);
                    results
                        .not_run
                        .extend(cases[index..].iter().map(|c| c.id.clone()));
                    break;
                }
            };
            // Listed as in flight until it finishes, so a checkpoint written
            // meanwhile names it, and one left by a killed oomgate reads as
            // a case it did not finish, not as one it never ran.
            results.cases.push(self.in_flight(case, &case_dir));
            let case_started = reporter.handle(&Event::CaseStarted {
                case,
                index,
                planned: cases.len(),
                results: &results,
            });
            if self.report_failed(case_started, reporter) {
                results.cases.pop();
                results
                    .not_run
                    .extend(cases[index..].iter().map(|c| c.id.clone()));
                break;
            }
            let mut runs = Vec::new();
            for repeat in 0..case.repeat {
                if repeat > 0 && (self.interrupt.requested() || self.fault.is_some()) {
                    break;
                }
                let (started_at, outcome) =
                    self.run_case(case, &case_dir, repeat, reporter, &results);
                let run = self.assemble(case, &case_dir, repeat, started_at, outcome, reporter);
                let passed = run.result.status == CaseStatus::Passed;
                runs.push(run);
                if !passed {
                    break; // one failing repeat decides; more runs only cost time
                }
            }
            let mut run = judge::merge_repeats(runs);
            self.compare_with_baseline(case, &mut run.result);
            let result = judge::decide(run);
            results.cases.pop(); // the in-flight entry, replaced by the result
            results.summary.count(result.status);
            results.cases.push(result);
            results.runner_max_rss_bytes = runner_max_rss_bytes();
            results.runner_cpu_s = runner_cpu_seconds();
            results.fault = self.fault.as_ref().map(ToString::to_string);
            if let Some(result) = results.cases.last() {
                let finished = reporter.handle(&Event::CaseFinished {
                    result,
                    index,
                    planned: cases.len(),
                    results: &results,
                });
                self.report_failed(finished, reporter);
            }
        }

        judge::largest_values_hints(&mut results.cases);
        results.interrupted = self.interrupt.requested();
        results.finished_at = Some(now_rfc3339());
        results.runner_max_rss_bytes = runner_max_rss_bytes();
        results.runner_cpu_s = runner_cpu_seconds();
        results.fault = self.fault.as_ref().map(ToString::to_string);
        // Written whatever failed before: what was measured is kept where
        // it still can be.
        let at_end = reporter
            .handle(&Event::RunFinished { results: &results })
            .err();
        match (self.fault.take(), at_end) {
            (None, None) => Ok(results),
            (during, at_end) => Err(RunError::Write {
                during,
                not_run: results.not_run,
                at_end,
            }),
        }
    }

    /// Say at once that a file could not be written, and keep the first
    /// such failure: no case is launched after it.
    fn record_fault(&mut self, fault: WriteFault, reporter: &mut dyn Reporter) {
        let message = match self.fault {
            None => format!("{fault}; no more cases are launched"),
            Some(_) => fault.to_string(),
        };
        self.fault.get_or_insert(fault);
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

    /// The entry of a case in flight: what it is, when it started, where
    /// its logs are, status `running`; no figure is known yet.
    fn in_flight(&self, case: &Case, case_dir: &Path) -> CaseResult {
        let mut entry = CaseResult::unmeasured(case.id.clone());
        let recorded = assemble::recorded(case);
        entry.params = recorded.params;
        entry.command = recorded.command;
        entry.cwd = case.cwd.clone();
        entry.concurrency = case.concurrency;
        entry.timeout_s = case.timeout.as_secs_f64();
        entry.soak_s = case.soak.map(|d| d.as_secs_f64());
        entry.status = CaseStatus::Running;
        entry.failure_kind = crate::verdict::failure_kind(&entry, None);
        entry.message = Some(IN_FLIGHT_MESSAGE.to_string());
        entry.started_at = now_rfc3339();
        entry.host_method = self.measurement.host_method;
        entry.env = recorded.env;
        entry.dir = case_dir
            .strip_prefix(self.out_dir)
            .unwrap_or(case_dir)
            .to_path_buf();
        entry
    }

    /// A fresh `cases/<folder>`, with every instance's log files: logs of
    /// an earlier run in the same out dir must not be mistaken for this
    /// run's, and a case whose output cannot be kept is not launched.
    fn prepare_case_dir(&self, case: &Case) -> Result<PathBuf, WriteFault> {
        let path = self.out_dir.join("cases").join(&case.folder);
        let fail = |at: &Path, source| WriteFault::CaseFile {
            path: at.to_path_buf(),
            source,
        };
        match std::fs::remove_dir_all(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(&path, e)),
        }
        std::fs::create_dir_all(&path).map_err(|e| fail(&path, e))?;
        for index in 0..case.concurrency {
            let logs = launch::InstanceLogs::for_instance(&path, index);
            for log in [&logs.stdout, &logs.stderr] {
                std::fs::File::create(log).map_err(|e| fail(log, e))?;
            }
        }
        if crate::files::no_space_left(&path) {
            return Err(WriteFault::NoSpace {
                dir: path,
                case_ended: false,
            });
        }
        Ok(path)
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

/// oomgate's own peak RSS; workloads are not included.
fn runner_max_rss_bytes() -> Option<u64> {
    // Linux reports ru_maxrss in KiB.
    own_usage()
        .and_then(|usage| u64::try_from(usage.ru_maxrss).ok())
        .map(|kib| kib * 1024)
}

/// oomgate's own CPU time (user + system), workloads excluded: what
/// measuring costs.
fn runner_cpu_seconds() -> Option<f64> {
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    own_usage().map(|usage| seconds(usage.ru_utime) + seconds(usage.ru_stime))
}

fn own_usage() -> Option<libc::rusage> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage struct to the pointer we pass,
    // which points to properly sized, zero-initialised memory.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    // SAFETY: on success the struct is initialised.
    (rc == 0).then(|| unsafe { usage.assume_init() })
}
