//! The measurement record: what one run of a case observed, as plain
//! data, and nothing else.
//!
//! The runner (`run`) makes one [`RunRecord`] per run — the figures its
//! meters took, how each instance ended, why oomgate stopped the case, the
//! files the run left read back (the probe's lines, a torch snapshot, the
//! logs of the instance that explains it) — and hands it over. No status
//! is in it and no sentence: `results::assemble` turns it into the results
//! model, `judge` decides about it, `report::words` words the decision.
//! Being plain data, a measurement can be made in a test without running a
//! process (see `judge`'s tests).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::diagnose::Scan;
use crate::measure::HostFigures;
use crate::measure::gpu::settle::Settle;
use crate::measure::gpu::{ForeignProcess, GpuFigures};
use crate::measure::timeline::ServerPhases;
use crate::probe::ProbeSummary;
use crate::snapshot::AllocationSites;
use crate::vocabulary::Exit;

/// One run of a case, as measured.
#[derive(Debug, Clone)]
pub struct RunRecord {
    /// Which repeat this is (0 for the first).
    pub repeat: u32,
    /// With a capacity search: the value this run probed. The case's
    /// definition is recorded as written; its limits are the probe's.
    pub probe_value: Option<u64>,
    /// How many instances ran (a search over `concurrency` changes it).
    pub concurrency: u32,
    /// RFC 3339, when the run started.
    pub started_at: String,
    pub wall_time: Duration,
    /// Why oomgate stopped the case, if it did.
    pub stop: Option<StopReason>,
    pub instances: Vec<InstanceRecord>,
    /// With a server: how it ran (`host` and `gpu` below are its figures).
    pub server: Option<ServerRecord>,
    /// Samples taken.
    pub samples: u64,
    /// A server case's phases (startup, load), with their peaks.
    pub server_phases: Option<ServerPhases>,
    /// Where the timeline was written, under the out dir.
    pub timeline_file: PathBuf,
    /// The case's folder, under the out dir.
    pub dir: PathBuf,
    pub host: HostFigures,
    /// The GPU figures, already held to `allocator_floor`.
    pub gpu: Option<GpuFigures>,
    /// The allocator's own peak, when it was above the sampled GPU peak
    /// (a spike the samples missed, which the GPU figure was raised to).
    pub allocator_floor: Option<u64>,
    pub foreign: Vec<ForeignProcess>,
    pub cuda_visible_devices: Option<String>,
    pub settle: Option<Settle>,
    pub probe: Option<ProbeSummary>,
    /// Each soak run's peak (instance 0's runs), for leak detection.
    pub soak_peaks: Vec<u64>,
    pub sample_errors: u64,
    /// Processes still running after every instance exited.
    pub leftovers: usize,
    /// Whatever torch memory snapshot the case left, by allocation site
    /// (masked: its frames are the workload's text).
    pub allocation_sites: Option<AllocationSites>,
    /// The allocator- and device-related variables the case ran with (a
    /// secret-named one by its hash).
    pub allocator_env: BTreeMap<String, String>,
    /// The logs of the instance that explains the run, as
    /// `judge::focus` picks it.
    pub focus: FocusLogs,
    /// The numbers its logs printed (`metrics_from_output`).
    pub outputs: Vec<crate::measure::output::OutputFigure>,
}

/// How one instance of a case ran.
#[derive(Debug, Clone)]
pub struct InstanceRecord {
    pub index: u32,
    /// Launches (more than one in a soak).
    pub runs: u32,
    /// How its last run ended; `None` if it never started or never ended.
    pub exit: Option<Exit>,
    /// Under the out dir.
    pub stdout_log: PathBuf,
    pub stderr_log: PathBuf,
    /// Its last run's supervisor ended without reporting the workload's
    /// exit (killed: by oomgate stopping the case, or from outside).
    pub supervisor_lost: bool,
}

/// How a case's server ran, and what its load client used.
#[derive(Debug, Clone)]
pub struct ServerRecord {
    pub instance: InstanceRecord,
    pub port: u16,
    /// The readiness target, the port in.
    pub ready: String,
    /// When it was ready, since the case started.
    pub ready_at: Option<Duration>,
    /// The signal oomgate stopped it with.
    pub stopped_with: Option<&'static str>,
    pub client_host: HostFigures,
    pub client_gpu: Option<GpuFigures>,
}

/// The process whose output explains a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    Instance(u32),
    Server,
}

/// What the explaining process left in its logs: their tails (masked) and,
/// when it did not exit well, a scan of this run's error output.
#[derive(Debug, Clone)]
pub struct FocusLogs {
    pub focus: Focus,
    pub stdout_tail: String,
    pub stderr_tail: String,
    /// `None`: it exited well (nothing to diagnose), or was not scanned.
    pub scan: Option<Scan>,
}

/// What a case's run tells its reader while it runs, as data: a line of
/// the run's warnings each, worded by `report::words::warning` (which
/// names the case before it).
#[derive(Debug, Clone, PartialEq)]
pub enum Warning {
    /// How the case's `CUDA_VISIBLE_DEVICES` was read.
    Selection(crate::measure::visible::SelectionNote),
    /// Its GPUs had not settled back to their idle level when it started.
    Unsettled(Settle),
    /// Processes oomgate did not start already ran on its GPUs.
    Foreign(Vec<ForeignProcess>),
    /// A torch memory snapshot's own note (`snapshot` words its notes).
    Snapshot(String),
    /// Processes of the case still ran after its command exited, and
    /// oomgate stopped them.
    Leftovers(usize),
    /// The host measurement's notes (`client`: the load client's).
    Host {
        client: bool,
        notes: Vec<crate::measure::host::HostNote>,
    },
    /// Pids that did not exit even after SIGKILL (stuck in the kernel).
    Stuck(Vec<i32>),
    /// oomgate's fork server was stopped from outside, so it was killed
    /// and each supervisor is executed from this case on.
    ForkserverSetAside {
        pid: i32,
        /// Stopped under a tracer, not by a signal.
        traced: bool,
        /// The case it started last, whose processes could have done it.
        after: Option<String>,
    },
}

/// Why a case was not run, where no launch failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotRun {
    /// Its table's shared pytest session did not collect this test (its
    /// collection differs from oomgate's).
    NotCollected { nodeid: String },
    /// The shared pytest session answered with a line that is not the
    /// plugin's (the session is then replaced).
    Garbled { nodeid: String, line: String },
    /// The case was run no times: an internal error, said rather than a
    /// panic.
    NoRuns,
}

/// Why oomgate itself stopped a case before its instances finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// A budget check failed while the case ran.
    BudgetExceeded {
        at: Duration,
    },
    TimedOut {
        after: Duration,
    },
    Interrupted,
    /// One instance failed, so the others were stopped.
    InstanceFailed {
        index: u32,
    },
    /// The case was not started: its GPUs run processes oomgate did not
    /// start, and the suite says `foreign_processes = "fail"`.
    ForeignProcesses {
        processes: Vec<ForeignProcess>,
    },
    /// An instance (or a soak relaunch) could not be started: the
    /// launcher's error (for a test of a shared session, pytest's words
    /// when the session could not start).
    LaunchFailed {
        message: String,
    },
    /// Not run, for a reason of oomgate's own.
    NotRun(NotRun),
    /// The case's server exited on its own: before it was ready, or
    /// under load. `at`: since the case started.
    ServerExited {
        exit: Exit,
        at: Duration,
        ready: bool,
    },
    /// The case's server was not ready within its `ready_timeout`:
    /// `target` is what was asked, `last` why the last check failed.
    ServerNotReady {
        after: Duration,
        target: String,
        last: Option<String>,
    },
}

impl RunRecord {
    /// Stopped by Ctrl-C before any of its instances was launched (a
    /// test handed to its worker behind another, for one): a case not
    /// run, not one interrupted.
    pub fn never_began(&self) -> bool {
        self.stop == Some(StopReason::Interrupted) && self.instances.iter().all(|i| i.runs == 0)
    }

    /// A run of these instances, in `dir`, with these host figures, and
    /// nothing else observed: no timeline, no GPU, no probe, no server. The
    /// start of a record a runner fills in (`run::session`'s tests of a
    /// shared session), and of the tests'.
    pub fn bare(
        started_at: String,
        wall_time: Duration,
        dir: PathBuf,
        instances: Vec<InstanceRecord>,
        host: HostFigures,
    ) -> RunRecord {
        RunRecord {
            repeat: 0,
            probe_value: None,
            concurrency: instances.len() as u32,
            started_at,
            wall_time,
            stop: None,
            instances,
            server: None,
            samples: 0,
            server_phases: None,
            timeline_file: PathBuf::new(),
            dir,
            host,
            gpu: None,
            allocator_floor: None,
            foreign: Vec::new(),
            cuda_visible_devices: None,
            settle: None,
            probe: None,
            soak_peaks: Vec::new(),
            sample_errors: 0,
            leftovers: 0,
            allocation_sites: None,
            allocator_env: BTreeMap::new(),
            focus: FocusLogs {
                focus: Focus::Instance(0),
                stdout_tail: String::new(),
                stderr_tail: String::new(),
                scan: None,
            },
            outputs: Vec::new(),
        }
    }
}

#[cfg(test)]
impl RunRecord {
    /// A run of one process per exit, whose host peak was `host_peak`
    /// (cgroup v1), that took a second: for the tests.
    pub(crate) fn ended(host_peak: Option<u64>, exits: &[Option<Exit>]) -> RunRecord {
        use crate::measure::host::HostMethod;
        let instances = exits
            .iter()
            .enumerate()
            .map(|(index, exit)| InstanceRecord {
                index: index as u32,
                runs: u32::from(exit.is_some()),
                exit: *exit,
                stdout_log: PathBuf::from(format!("c/stdout.{index}.log")),
                stderr_log: PathBuf::from(format!("c/stderr.{index}.log")),
                supervisor_lost: false,
            })
            .collect();
        RunRecord {
            samples: 1,
            timeline_file: PathBuf::from("c/timeline.json"),
            ..RunRecord::bare(
                "2026-12-06T00:00:00.000+00:00".into(),
                Duration::from_secs(1),
                PathBuf::from("c"),
                instances,
                HostFigures {
                    peak_bytes: host_peak,
                    ..HostFigures::unmeasured(HostMethod::CgroupV1)
                },
            )
        }
    }
}
