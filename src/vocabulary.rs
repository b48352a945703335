//! How a case and a process ended, the word for a case's kind of failure,
//! the version of the results schema, and a fact read from an older
//! schema in its words ([`OrWritten`]): the leaf types that the results
//! model, the diagnosis, the verdicts, the baselines and the runner all
//! speak, so none of them has to import another for them.

use serde::{Deserialize, Serialize};

/// The version of results.json's schema; fields are only ever added, and
/// each addition a reader may rely on bumps it. 2: `failure_kind`. 3: a
/// merged run's `merged_from` and `parts` (`oomgate lock --from` refuses
/// parts whose figures are not comparable; an oomgate that ignored them
/// would lock such a run). 4: checks are data (`outcome`, `baseline_bytes`,
/// `tolerance`, `facts` beside `message`), each case records the
/// tolerances it was judged with (`tolerance`), and `gpu_devices` carry
/// each device's whole description: `oomgate diff` judges a results file
/// with them, so one of an oomgate that ignored them would contradict the
/// run. 5: the facts of a check are data, no longer the judge's words (how
/// a budget's figure was measured, the devices and processes left out of
/// it, a leak's iterations); a file of schema 4 still reads, each such
/// fact as the words it was written with ([`OrWritten::Written`]). 6:
/// the environment's drift in a check's facts is data (`what`, `before`,
/// `after`), no longer a line each; older lines still read; a pytest test
/// pytest skipped or expected to fail has status `skipped`, counted in
/// the summary's `skipped` (older files: `passed`). 7: the run history —
/// a run's `run_id` and `origin`, a case's `trend`, the checks
/// `creep.<figure>` and `step.<figure>` and the failure kind `creep`,
/// which an oomgate before them could not read; older files still read.
pub const SCHEMA_VERSION: u32 = 7;

/// A fact of a check as data, or as results.json schema 4 wrote it, in
/// words (`"vmhwm, cgroup-v1"`, `"GPU 0 tainted by pid 4242 (sleep)"`).
/// Read untagged: the data's shape first, else the words. The reports
/// show written words as they are, so a schema-4 file reads as it did;
/// the judge only ever makes `Data`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OrWritten<T> {
    Data(T),
    Written(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CaseStatus {
    Passed,
    /// A pytest test pytest skipped (`skip`, `skipif`, a skip in its
    /// fixture) or whose failure was expected (`xfail`), and whose run
    /// broke none of oomgate's limits: it did not pass, and did not fail.
    /// Its figures are of the skip: never compared with a lock, never
    /// locked. `probe.pytest` says which.
    Skipped,
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
            CaseStatus::Skipped => "skipped",
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
            CaseStatus::Skipped => "SKIP",
            CaseStatus::Failed => "FAIL",
            CaseStatus::TimedOut => "TIMEOUT",
            CaseStatus::Interrupted => "INTERRUPTED",
            CaseStatus::Error => "ERROR",
            CaseStatus::Running => "RUNNING",
        }
    }

    /// Whether the case stands: it passed, or pytest skipped it.
    pub fn ok(self) -> bool {
        matches!(self, CaseStatus::Passed | CaseStatus::Skipped)
    }
}

/// The kind of a case's failure, one stable word (`gpu-oom`, `budget`,
/// ...): results.json's `failure_kind`, JUnit's failure `type`, the GitHub
/// annotation's title. `judge::failure_kind` decides it, with its
/// precedence; the words never change, since CI rules match on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureType {
    Interrupted,
    ForeignProcesses,
    LaunchError,
    GpuLost,
    GpuOom,
    HostOom,
    HostOomSuspected,
    SupervisorKilled,
    CudaSetup,
    CudaFault,
    Timeout,
    /// A pytest test failed as pytest says (an assertion): no crash.
    TestFailed,
    /// A pytest test's setup or teardown failed: pytest's `error`.
    TestError,
    Crash,
    Budget,
    Headroom,
    GpuLeft,
    Leak,
    Limit,
    Regression,
    /// A figure grew past its creep limit over its ratchet in the run
    /// history.
    Creep,
    Baseline,
    EnvironmentDrift,
    /// A merged part ran another definition of the case than the suite's
    /// (`oomgate merge --suite`), one its figures cannot be judged under.
    OtherDefinition,
}

impl FailureType {
    pub const ALL: [FailureType; 24] = [
        FailureType::Interrupted,
        FailureType::ForeignProcesses,
        FailureType::LaunchError,
        FailureType::GpuLost,
        FailureType::GpuOom,
        FailureType::HostOom,
        FailureType::HostOomSuspected,
        FailureType::SupervisorKilled,
        FailureType::CudaSetup,
        FailureType::CudaFault,
        FailureType::Timeout,
        FailureType::TestFailed,
        FailureType::TestError,
        FailureType::Crash,
        FailureType::Budget,
        FailureType::Headroom,
        FailureType::GpuLeft,
        FailureType::Leak,
        FailureType::Limit,
        FailureType::Regression,
        FailureType::Creep,
        FailureType::Baseline,
        FailureType::EnvironmentDrift,
        FailureType::OtherDefinition,
    ];

    /// The word results.json writes.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureType::Interrupted => "interrupted",
            FailureType::ForeignProcesses => "foreign-processes",
            FailureType::LaunchError => "launch-error",
            FailureType::GpuLost => "gpu-lost",
            FailureType::GpuOom => "gpu-oom",
            FailureType::HostOom => "host-oom",
            FailureType::HostOomSuspected => "host-oom-suspected",
            FailureType::SupervisorKilled => "supervisor-killed",
            FailureType::CudaSetup => "cuda-setup",
            FailureType::CudaFault => "cuda-fault",
            FailureType::Timeout => "timeout",
            FailureType::TestFailed => "test-failed",
            FailureType::TestError => "test-error",
            FailureType::Crash => "crash",
            FailureType::Budget => "budget",
            FailureType::Headroom => "headroom",
            FailureType::GpuLeft => "gpu-left",
            FailureType::Leak => "leak",
            FailureType::Limit => "limit",
            FailureType::Regression => "regression",
            FailureType::Creep => "creep",
            FailureType::Baseline => "baseline",
            FailureType::EnvironmentDrift => "environment-drift",
            FailureType::OtherDefinition => "other-definition",
        }
    }
}

impl std::fmt::Display for FailureType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a process ended, as a shell would report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_words_are_what_results_json_writes() {
        for kind in FailureType::ALL {
            let written = serde_json::to_value(kind).ok();
            assert_eq!(written, Some(kind.as_str().into()));
            let read: Option<FailureType> = serde_json::from_value(kind.as_str().into()).ok();
            assert_eq!(read, Some(kind));
        }
    }
}
