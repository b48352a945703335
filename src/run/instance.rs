//! One instance of a case: its logs, its runs (one, or many in a soak),
//! and the supervisor of the current run, read through its report pipe.
//!
//! A run ends when its supervisor reports the workload's exit. The
//! supervisor itself stays while processes the workload left behind run
//! (see `supervise`): it is kept here, read until its pipe closes and
//! then collected, and left out of every figure and count of the case's
//! processes, like a supervisor whose workload runs.

use std::ffi::CString;
use std::os::fd::RawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use super::launch::{LaunchError, LaunchSpec, ReportReader, launch};
use super::supervise::Report;
use super::supervise::forkserver::Forkserver;
use crate::files::case::InstanceLogs;
use crate::measure::HostMeter;
use crate::process::{self, Exit};
use crate::suite::Case;

pub(super) struct Instance {
    pub(super) index: u32,
    pub(super) logs: InstanceLogs,
    /// Launches so far (more than one in a soak).
    pub(super) runs: u32,
    /// How the last run ended; `None` while it runs or if it never started.
    pub(super) exit: Option<Exit>,
    /// Length of its stderr log when its current run started: diagnosis
    /// reads only this run's output.
    pub(super) stderr_offset: u64,
    current: Option<Current>,
    /// Supervisors of ended runs that stay with what their workload left.
    lingering: Vec<Current>,
    /// The largest `ru_maxrss` (bytes) any run reported.
    pub(super) maxrss_bytes: Option<u64>,
    /// The errno of a run's failed attempt to join the case cgroup.
    pub(super) cgroup_error: Option<i32>,
    /// Beside a server: its port, and this instance's side.
    serving: Option<(u16, &'static str)>,
    /// The current run's supervisor ended without reporting the workload's
    /// exit: killed (by oomgate stopping the case, or from outside it),
    /// and the workload with it. The last run's; `false` while one runs.
    pub(super) supervisor_lost: bool,
}

/// The run in progress: its supervisor and what it reported.
struct Current {
    supervisor: i32,
    reader: ReportReader,
    exited: Option<Exit>,
    /// The supervisor stays after the exit, with what the workload left.
    stays: bool,
}

impl Instance {
    pub(super) fn new(case_dir: &Path, index: u32) -> Self {
        Self::with_logs(index, InstanceLogs::for_instance(case_dir, index))
    }

    /// A case's server, its logs apart from the instances'.
    pub(super) fn server(case_dir: &Path, port: u16) -> Self {
        let mut server = Self::with_logs(0, InstanceLogs::for_server(case_dir));
        server.serving = Some((port, "server"));
        server
    }

    /// A load client of the server on `port`.
    pub(super) fn client(mut self, port: u16) -> Self {
        self.serving = Some((port, "client"));
        self
    }

    fn with_logs(index: u32, logs: InstanceLogs) -> Self {
        Instance {
            index,
            logs,
            runs: 0,
            exit: None,
            stderr_offset: 0,
            current: None,
            lingering: Vec::new(),
            maxrss_bytes: None,
            cgroup_error: None,
            serving: None,
            supervisor_lost: false,
        }
    }

    /// Start a run. `cgroup_procs`: the case cgroup to join; `gpus`: the
    /// pool's `CUDA_VISIBLE_DEVICES` for the case; `forkserver`: the run's,
    /// which makes the supervisor.
    pub(super) fn start(
        &mut self,
        case: &Case,
        case_dir: &Path,
        cgroup_procs: Option<&CString>,
        gpus: Option<&str>,
        forkserver: Option<&Forkserver>,
    ) -> Result<(), LaunchError> {
        self.stderr_offset = std::fs::metadata(&self.logs.stderr).map_or(0, |m| m.len());
        let spec = LaunchSpec {
            case,
            index: self.index,
            case_dir,
            logs: &self.logs,
            cgroup_procs,
            gpus,
            serving: self.serving,
            forkserver,
        };
        let launched = launch(&spec)?;
        if launched.cgroup_error.is_some() {
            self.cgroup_error = launched.cgroup_error;
        }
        self.current = Some(Current {
            supervisor: launched.supervisor,
            reader: ReportReader::resume(launched.report, launched.unread),
            exited: None,
            stays: false,
        });
        self.runs += 1;
        self.exit = None;
        self.supervisor_lost = false;
        Ok(())
    }

    /// For messages: `instance 2`, or `the server`.
    pub(super) fn name(&self) -> String {
        match self.serving {
            Some((_, "server")) => "the server".to_string(),
            _ => format!("instance {}", self.index),
        }
    }

    /// Whether the workload of a run is running.
    pub(super) fn running(&self) -> bool {
        self.current.is_some()
    }

    /// Every supervisor of this instance still to collect: the current
    /// run's and those that stay with what an ended run left. Each leads
    /// its own process group.
    pub(super) fn supervisors(&self) -> impl Iterator<Item = i32> + '_ {
        self.current
            .iter()
            .chain(&self.lingering)
            .map(|c| c.supervisor)
    }

    /// The report pipes to wait on: an exit, or a lingering supervisor
    /// that ends.
    pub(super) fn report_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.current
            .iter()
            .chain(&self.lingering)
            .map(|c| c.reader.fd())
    }

    /// Read what the supervisors reported. Once the current run's
    /// workload exited, return how it ended; its supervisor is collected
    /// when its pipe closes, then or later.
    pub(super) fn poll(&mut self) -> Option<Exit> {
        self.poll_lingering();
        self.read_reports_of(None);
        let current = self.current.as_ref()?;
        let exit = match (current.exited, current.reader.closed()) {
            // The workload ended, and its supervisor stays with what it
            // left: collected later.
            (Some(exit), false) if current.stays => {
                self.lingering.extend(self.current.take());
                exit
            }
            // Running; or ended, the supervisor exiting at once.
            (_, false) => return None,
            // The pipe closes when the supervisor exits: collect it. A
            // supervisor killed before it could report (SIGKILL when a
            // case is stopped) took the workload with it: its signal is
            // the exit.
            (exited, true) => {
                let supervisor = self.current.take()?.supervisor;
                let status = process::wait_for_exit(supervisor, Duration::from_secs(5))
                    .map(|(exit, _)| exit);
                self.supervisor_lost = exited.is_none();
                match (exited, status) {
                    (Some(exit), _) => exit,
                    (None, Some(Exit::Signal(signal))) => Exit::Signal(signal),
                    (None, _) => Exit::Code(-1),
                }
            }
        };
        self.exit = Some(exit);
        Some(exit)
    }

    /// Read the lingering supervisors' reports; collect those that ended.
    fn poll_lingering(&mut self) {
        let mut index = 0;
        while index < self.lingering.len() {
            self.read_reports_of(Some(index));
            if self.lingering[index].reader.closed() {
                let ended = self.lingering.swap_remove(index);
                process::wait_for_exit(ended.supervisor, Duration::from_secs(5));
            } else {
                index += 1;
            }
        }
    }

    /// Read every report line there is of the current run (`None`) or of
    /// a lingering supervisor.
    fn read_reports_of(&mut self, lingering: Option<usize>) {
        let run = match lingering {
            None => self.current.as_mut(),
            Some(index) => self.lingering.get_mut(index),
        };
        let Some(run) = run else { return };
        while let Some(report) = run.reader.next_report() {
            match report {
                Report::Exited {
                    exit,
                    maxrss_kib,
                    stays,
                } => {
                    run.exited = Some(exit);
                    run.stays = stays;
                    let bytes = maxrss_kib.saturating_mul(1024);
                    self.maxrss_bytes = self.maxrss_bytes.max(Some(bytes));
                }
                Report::Rss(kib) => {
                    let bytes = kib.saturating_mul(1024);
                    self.maxrss_bytes = self.maxrss_bytes.max(Some(bytes));
                }
                Report::CgroupFailed(errno) => self.cgroup_error = Some(errno),
                Report::Forked(_)
                | Report::Started(_)
                | Report::SpawnFailed(_)
                | Report::Supervisor(_)
                | Report::Refused(_) => {}
            }
        }
    }

    /// Give up on supervisors that outlived SIGKILL (stuck in the kernel):
    /// the status of a run whose workload had not exited is unknown.
    pub(super) fn abandon(&mut self) {
        if self.current.take().is_some() {
            self.exit = None;
        }
        self.lingering.clear();
    }
}

impl Drop for Instance {
    /// An instance dropped with its supervisors still running was never
    /// stopped (its case's thread panicked): its process groups are
    /// killed, so nothing of it holds a GPU the pool gives to the next
    /// case. A stopped instance has none left, and this does nothing.
    fn drop(&mut self) {
        for group in self.supervisors() {
            crate::process::signal_group(group, libc::SIGKILL);
        }
    }
}

/// Sleep until `until`, or until an instance's supervisor reports (an exit),
/// or a signal arrives — whichever comes first.
pub(super) fn wait_for_exit_until<'i>(
    instances: impl Iterator<Item = &'i Instance>,
    until: Instant,
) {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return;
    }
    // A signal (Ctrl-C) ends the wait early.
    process::wait_readable(instances.flat_map(Instance::report_fds), left);
}

/// [`wait_for_exit_until`], reading the case cgroup's working memory every
/// [`crate::measure::host::WORKING_READ_INTERVAL`] while it moves (less often while it stays
/// still) as it waits: the kernel keeps no maximum of it, and a burst
/// between two ticks would otherwise be missed.
/// `start`: when the case started, for the time of a new peak; `hosts`:
/// the case's meters (beside a server, its own and its load client's).
pub(super) fn wait_reading_working<'i>(
    instances: impl Iterator<Item = &'i Instance>,
    hosts: &mut [&mut HostMeter],
    start: Instant,
    until: Instant,
) {
    let fds: Vec<RawFd> = instances.flat_map(Instance::report_fds).collect();
    loop {
        let now = Instant::now();
        if now >= until {
            return;
        }
        let at = now.saturating_duration_since(start);
        let gap = hosts
            .iter_mut()
            .filter_map(|host| host.read_working(at))
            .min();
        let Some(gap) = gap else {
            process::wait_readable(fds.iter().copied(), until - now);
            return;
        };
        let next = (now + gap).min(until);
        if process::wait_readable(fds.iter().copied(), next.saturating_duration_since(now)) {
            return;
        }
    }
}

/// The high-water marks the instances' supervisors reported, as floors of
/// the host peak (recording one again changes nothing).
pub(super) fn record_instances_rusage(instances: &[Instance], host: &mut HostMeter, at: Duration) {
    for bytes in instances.iter().filter_map(|i| i.maxrss_bytes) {
        host.record_rusage(bytes, at);
    }
}

/// A cgroup some instance could not join holds part of the case at most:
/// its figures would be too low, so the case is measured from /proc.
pub(super) fn distrust_cgroup_if_not_joined(instances: &[Instance], host: &mut HostMeter) {
    if host.cgroup().is_none() {
        return;
    }
    if let Some((name, errno)) = instances
        .iter()
        .find_map(|i| i.cgroup_error.map(|e| (i.name(), e)))
    {
        host.distrust_cgroup(crate::measure::host::HostNote::NotJoined {
            instance: name.to_string(),
            error: std::io::Error::from_raw_os_error(errno).to_string(),
        });
    }
}
