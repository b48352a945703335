//! One instance of a case: its logs, its runs (one, or many in a soak),
//! and the supervisor of the current run, read through its report pipe.

use std::ffi::CString;
use std::os::fd::RawFd;
use std::path::Path;
use std::time::Duration;

use super::launch::{InstanceLogs, LaunchSpec, ReportReader, launch};
use super::process::{self, Exit};
use super::supervise::Report;
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
    /// The largest `ru_maxrss` (bytes) any run reported.
    pub(super) maxrss_bytes: Option<u64>,
    /// The errno of a run's failed attempt to join the case cgroup.
    pub(super) cgroup_error: Option<i32>,
}

/// The run in progress: its supervisor and what it reported.
struct Current {
    supervisor: i32,
    reader: ReportReader,
    exited: Option<Exit>,
}

impl Instance {
    pub(super) fn new(case_dir: &Path, index: u32) -> Self {
        Instance {
            index,
            logs: InstanceLogs::for_instance(case_dir, index),
            runs: 0,
            exit: None,
            stderr_offset: 0,
            current: None,
            maxrss_bytes: None,
            cgroup_error: None,
        }
    }

    /// Start a run. `cgroup_procs`: the case cgroup to join.
    pub(super) fn start(
        &mut self,
        case: &Case,
        case_dir: &Path,
        cgroup_procs: Option<&CString>,
    ) -> Result<(), String> {
        self.stderr_offset = std::fs::metadata(&self.logs.stderr).map_or(0, |m| m.len());
        let spec = LaunchSpec {
            case,
            index: self.index,
            case_dir,
            logs: &self.logs,
            cgroup_procs,
        };
        let launched = launch(&spec).map_err(|e| e.to_string())?;
        if launched.cgroup_error.is_some() {
            self.cgroup_error = launched.cgroup_error;
        }
        self.current = Some(Current {
            supervisor: launched.supervisor,
            reader: ReportReader::resume(launched.report, launched.unread),
            exited: None,
        });
        self.runs += 1;
        self.exit = None;
        Ok(())
    }

    pub(super) fn running(&self) -> bool {
        self.current.is_some()
    }

    /// The process group of the current run (the supervisor's pid).
    pub(super) fn group(&self) -> Option<i32> {
        self.current.as_ref().map(|c| c.supervisor)
    }

    /// The report pipe to wait on while the run goes on.
    pub(super) fn report_fd(&self) -> Option<RawFd> {
        self.current.as_ref().map(|c| c.reader.fd())
    }

    /// Read what the supervisor reported; once its pipe closes, collect it
    /// and return how the workload ended.
    pub(super) fn poll(&mut self) -> Option<Exit> {
        let current = self.current.as_mut()?;
        while let Some(report) = current.reader.next_report() {
            match report {
                Report::Exited { exit, maxrss_kib } => {
                    current.exited = Some(exit);
                    let bytes = maxrss_kib.saturating_mul(1024);
                    self.maxrss_bytes = self.maxrss_bytes.max(Some(bytes));
                }
                Report::Rss(kib) => {
                    let bytes = kib.saturating_mul(1024);
                    self.maxrss_bytes = self.maxrss_bytes.max(Some(bytes));
                }
                Report::CgroupFailed(errno) => self.cgroup_error = Some(errno),
                Report::Started(_) | Report::SpawnFailed(_) => {}
            }
        }
        if !current.reader.closed() {
            return None;
        }
        // The pipe closes when the supervisor exits: collect it. A
        // supervisor killed before it could report (SIGKILL when a case is
        // stopped) took the workload with it: its signal is the exit.
        let supervisor = process::wait_for_exit(current.supervisor, Duration::from_secs(5))
            .map(|(exit, _)| exit);
        let exit = match (current.exited, supervisor) {
            (Some(exit), _) => exit,
            (None, Some(Exit::Signal(signal))) => Exit::Signal(signal),
            (None, _) => Exit::Code(-1),
        };
        self.current = None;
        self.exit = Some(exit);
        Some(exit)
    }

    /// Give up on a run whose supervisor outlived SIGKILL (stuck in the
    /// kernel): its status is unknown.
    pub(super) fn abandon(&mut self) {
        self.current = None;
        self.exit = None;
    }
}
