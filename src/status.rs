//! How a case and a process ended, and the version of the results schema:
//! the leaf types that the results model, the diagnosis, the verdicts, the
//! baselines and the runner all speak, so none of them has to import
//! another for them.

use serde::{Deserialize, Serialize};

/// The version of results.json's schema; fields are only ever added, and
/// each addition a reader may rely on bumps it. 2: `failure_kind`.
pub const SCHEMA_VERSION: u32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CaseStatus {
    Passed,
    /// A check failed, or the workload exited non-zero or was killed.
    Failed,
    TimedOut,
    /// oomgate was interrupted while the case ran.
    Interrupted,
    /// The case could not be run at all (command not found, ...).
    Error,
    /// The case was in flight when the results were written: only in a
    /// checkpoint, never in the results of a run that ended. Read after
    /// the run, it means oomgate stopped (was killed) before the case
    /// finished; its message says so ([`IN_FLIGHT_MESSAGE`]).
    Running,
}

/// The message of a case in flight (status `running`): what it means to
/// whoever reads a checkpoint that oomgate did not replace at its end.
pub const IN_FLIGHT_MESSAGE: &str = "oomgate stopped before this case finished";

impl CaseStatus {
    /// The name results.json uses: `passed`, `timed-out`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            CaseStatus::Passed => "passed",
            CaseStatus::Failed => "failed",
            CaseStatus::TimedOut => "timed-out",
            CaseStatus::Interrupted => "interrupted",
            CaseStatus::Error => "error",
            CaseStatus::Running => "running",
        }
    }

    /// The word the terminal shows, nextest style.
    pub fn label(self) -> &'static str {
        match self {
            CaseStatus::Passed => "PASS",
            CaseStatus::Failed => "FAIL",
            CaseStatus::TimedOut => "TIMEOUT",
            CaseStatus::Interrupted => "INTERRUPTED",
            CaseStatus::Error => "ERROR",
            CaseStatus::Running => "RUNNING",
        }
    }
}

/// How a process ended, as a shell would report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl Exit {
    /// From a raw `wait` status.
    pub fn from_wait_status(status: i32) -> Self {
        if libc::WIFEXITED(status) {
            Exit::Code(libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            Exit::Signal(libc::WTERMSIG(status))
        } else {
            Exit::Code(-1)
        }
    }

    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }

    /// `exited with code 3`, `was killed by SIGKILL (signal 9)`.
    pub fn describe(self) -> String {
        match self {
            Exit::Code(code) => format!("exited with code {code}"),
            Exit::Signal(signal) => {
                format!("was killed by {} (signal {signal})", signal_name(signal))
            }
        }
    }
}

pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => "a signal",
    }
}
