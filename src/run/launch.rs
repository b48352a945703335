//! Launching one instance of a case: its own process group, the case's
//! environment, output straight into its log files, through a supervisor.
//!
//! Output goes to the log files by file descriptor, not through a pipe that
//! oomgate copies: a workload printing gigabytes costs oomgate no memory and
//! no CPU, nothing is lost if oomgate dies, and the bounded tail that reports
//! need is read back from the end of the file afterwards (see `logs`).
//!
//! oomgate does not fork the workload itself: it starts a supervisor (see
//! `supervise` for why: a process forked from oomgate carries oomgate's
//! memory in its high-water mark), which forks the workload into the
//! case's memory cgroup and reports its pid, its exit and its `ru_maxrss`
//! on a pipe. The supervisor is the process-group leader; the workload
//! shares the group, so one `killpg` still reaches both. The run's fork
//! server makes it (`supervise::forkserver`: a clone, no exec of oomgate);
//! without one, `oomgate __supervise` is started with `posix_spawn`
//! (`process::spawn`), not `fork`: a fork copies oomgate's page tables, a
//! cost that grew with the results it holds.
//!
//! The program is resolved before spawning (relative to the case directory,
//! or on the case's `PATH`) so that a missing or non-executable command gets
//! a message naming it, instead of the bare "No such file or directory" that
//! `execve` gives for a missing program and a missing working directory
//! alike.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::supervise;
use crate::files::case::InstanceLogs;
use crate::process;
use crate::suite::Case;

/// Why an instance could not be started. The message names the command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LaunchError(pub String);

/// Everything about an instance that stays the same across soak runs.
pub struct LaunchSpec<'a> {
    pub case: &'a Case,
    pub index: u32,
    pub case_dir: &'a Path,
    pub logs: &'a InstanceLogs,
    /// The case cgroup's `cgroup.procs`, for the workload to join.
    pub cgroup_procs: Option<&'a CString>,
    /// `CUDA_VISIBLE_DEVICES` as the GPU pool gives the case (its GPUs'
    /// UUIDs; empty: none); `None`: no pool.
    pub gpus: Option<&'a str>,
    /// Beside a server: its port, and which side this is (`server`,
    /// `client`), as `OOMGATE_PORT` and `OOMGATE_ROLE`.
    pub serving: Option<(u16, &'static str)>,
    /// The run's fork server, which makes supervisors without executing
    /// oomgate; `None`: each is executed.
    pub forkserver: Option<&'a supervise::forkserver::Forkserver>,
}

/// A started run of an instance.
#[derive(Debug)]
pub struct Launched {
    /// The supervisor's pid, also the process-group id of the instance.
    pub supervisor: i32,
    /// The read end of the supervisor's report pipe (non-blocking), and
    /// what was read from it past the `pid` line.
    pub report: File,
    pub unread: Vec<u8>,
    /// The errno of the workload's failed attempt to join the cgroup.
    pub cgroup_error: Option<i32>,
}

/// How long a supervisor may take to start the workload before the launch
/// counts as failed (it takes about a millisecond).
const START_TIMEOUT_MS: i32 = 30_000;

/// A test of a `[[pytest]]` runs with oomgate's plugin first on its
/// `PYTHONPATH`; an earlier test of this run could have changed it (it runs
/// as the same user), and a changed plugin could report a failure as a
/// pass. So it is checked before each test starts, and a test is not
/// started with a plugin that is not the one built in.
pub(super) fn check_pytest_plugin() -> Result<(), LaunchError> {
    let Some(dir) = crate::pytest::installed_plugin() else {
        return Err(LaunchError(
            "not started: oomgate's pytest plugin was never installed (the suite was not collected)".into(),
        ));
    };
    crate::pytest::check_plugin(&dir).map_err(|why| {
        LaunchError(format!(
            "not started: oomgate's pytest plugin in {} is not as oomgate wrote it ({why}): a test of this run changed it, and a changed plugin could report a failed test as passed",
            dir.display()
        ))
    })
}

/// Start one run of an instance.
pub fn launch(spec: &LaunchSpec<'_>) -> Result<Launched, LaunchError> {
    let case = spec.case;
    if !case.cwd.is_dir() {
        return Err(LaunchError(format!(
            "cannot start `{}`: working directory {} does not exist",
            case.command[0],
            case.cwd.display()
        )));
    }
    if case.pytest.is_some() {
        check_pytest_plugin()?;
    }
    let env = environment(spec);
    let program = resolve(case, &env)?;
    let open = |path: &Path| -> Result<File, LaunchError> {
        crate::files::case::open_append(path)
            .map_err(|e| LaunchError(format!("cannot open log file {}: {e}", path.display())))
    };
    let stdout = open(&spec.logs.stdout)?;
    let stderr = open(&spec.logs.stderr)?;
    let parent = process::self_pid();
    let limits = process::launch_limits();
    // The workload's environment travels on a descriptor of its own, so the
    // supervisor runs with oomgate's (a case's LD_PRELOAD must not load
    // into it). Where memfd_create is refused (seccomp), the supervisor
    // gets the workload's environment, as a plain launcher would.
    let env_block = environment_block(&env).ok();
    let env_fd = env_block.as_ref().map(AsRawFd::as_raw_fd);

    let mut argv: Vec<OsString> = vec![
        "oomgate-supervise".into(),
        supervise::ARG.into(),
        parent.to_string().into(),
        supervise::REPORT_FD.to_string().into(),
        env_block
            .as_ref()
            .map_or("-".to_string(), |_| supervise::ENV_FD.to_string())
            .into(),
        limits.describe().into(),
        match spec.cgroup_procs {
            Some(procs) => OsString::from(std::ffi::OsStr::from_bytes(procs.as_bytes())),
            None => OsString::from("-"),
        },
        case.cwd.clone().into_os_string(),
        "--".into(),
        program.clone().into_os_string(),
    ];
    argv.extend(case.command[1..].iter().map(OsString::from));
    // Without the memfd, the supervisor gets the workload's environment,
    // as a plain launcher would; with it, oomgate's own.
    let child_env: Option<Vec<OsString>> = env_block.is_none().then(|| {
        env.iter()
            .map(|(name, value)| {
                let mut entry = name.clone();
                entry.push("=");
                entry.push(value);
                entry
            })
            .collect()
    });
    let cannot = |why: String, supervisor: Option<i32>| {
        // The supervisor is gone or about to be: collect it, without ever
        // blocking on one stuck in the kernel.
        if let Some(supervisor) = supervisor {
            process::wait_for_exit(supervisor, std::time::Duration::from_secs(5));
        }
        LaunchError(format!(
            "cannot start `{}` ({}): {why}",
            case.command[0],
            program.display()
        ))
    };
    let pipe = || {
        report_pipe().map_err(|e| {
            LaunchError(format!(
                "cannot create a pipe for `{}`: {e}",
                case.command[0]
            ))
        })
    };
    // Made by the fork server where there is one (a clone, not an exec of
    // oomgate: see `supervise::forkserver`); executed where there is none,
    // or where it made none.
    if let (Some(server), Some(env_fd)) = (spec.forkserver, env_fd) {
        let (report, writer) = pipe()?;
        let descriptors = supervise::forkserver::Descriptors {
            stdout: stdout.as_raw_fd(),
            stderr: stderr.as_raw_fd(),
            report: writer.as_raw_fd(),
            environment: env_fd,
        };
        if server.request(&case.id, &argv[2..], descriptors) {
            drop(writer);
            match wait_for_start(report, None, &spec.logs.stderr) {
                Start::Started(launched) => return Ok(launched),
                Start::Failed { why, supervisor } => {
                    if supervisor.is_none() {
                        // No word from it: it is stuck, and may yet make
                        // one; none is made twice.
                        server.stop_using();
                    }
                    return Err(cannot(why, supervisor));
                }
                Start::NotMade => server.stop_using(),
            }
        }
    }
    let (report, writer) = pipe()?;
    let supervisor = process::spawn(&process::Spawn {
        path: Path::new("/proc/self/exe"),
        argv: &argv,
        env: child_env.as_deref(),
        stdout: stdout.as_raw_fd(),
        stderr: stderr.as_raw_fd(),
        inherit: &[
            Some((writer.as_raw_fd(), supervise::REPORT_FD)),
            env_fd.map(|fd| (fd, supervise::ENV_FD)),
        ],
    })
    .map_err(|e| cannot(e.to_string(), None))?;
    // The supervisor is reaped by the instance with wait4 once its report
    // pipe closes.
    drop(writer);
    drop(env_block);
    match wait_for_start(report, Some(supervisor), &spec.logs.stderr) {
        Start::Started(launched) => Ok(launched),
        Start::Failed { why, supervisor } => Err(cannot(why, supervisor)),
        // Only the fork server's supervisor can be not made.
        Start::NotMade => Err(cannot(ended_early(&spec.logs.stderr), Some(supervisor))),
    }
}

/// How waiting for a supervisor to start the workload ended.
enum Start {
    Started(Launched),
    /// The fork server made no supervisor (it said so, or died first):
    /// nothing was started.
    NotMade,
    /// Why the workload was not started, and the supervisor to collect.
    Failed {
        why: String,
        supervisor: Option<i32>,
    },
}

/// Read the report pipe until the workload started (or was about to when
/// its supervisor ended). `supervisor`: its pid, when oomgate executed it;
/// one the fork server made says it first.
fn wait_for_start(report: File, mut supervisor: Option<i32>, stderr: &Path) -> Start {
    let mut reader = ReportReader::new(report);
    let mut cgroup_error = None;
    let mut forked = false;
    loop {
        let started = match reader.next_blocking(START_TIMEOUT_MS) {
            Ok(Some(supervise::Report::Supervisor(pid))) => {
                supervisor = Some(pid);
                continue;
            }
            Ok(Some(supervise::Report::Refused(_))) | Ok(None) if supervisor.is_none() => {
                return Start::NotMade;
            }
            Ok(Some(supervise::Report::CgroupFailed(errno))) => {
                cgroup_error = Some(errno);
                continue;
            }
            Ok(Some(supervise::Report::Forked(_))) => {
                forked = true;
                continue;
            }
            Ok(Some(supervise::Report::Rss(_) | supervise::Report::Refused(_))) => continue,
            // The workload was about to run when its supervisor ended
            // without a word (killed, perhaps by the workload itself): it
            // started, and its run's end is the supervisor's.
            Ok(None) if forked => true,
            Ok(Some(supervise::Report::Started(_))) => true,
            Ok(Some(supervise::Report::SpawnFailed(why))) => {
                return Start::Failed { why, supervisor };
            }
            Ok(Some(supervise::Report::Exited { .. })) | Ok(None) => false,
            Err(e) => {
                if let Some(supervisor) = supervisor {
                    process::signal_group(supervisor, libc::SIGKILL);
                }
                return Start::Failed {
                    why: format!("no word from its supervisor: {e}"),
                    supervisor,
                };
            }
        };
        return match (started, supervisor) {
            (true, Some(supervisor)) => {
                let (report, unread) = reader.into_parts();
                Start::Started(Launched {
                    supervisor,
                    report,
                    unread,
                    cgroup_error,
                })
            }
            _ => Start::Failed {
                why: ended_early(stderr),
                supervisor,
            },
        };
    }
}

fn ended_early(stderr: &Path) -> String {
    format!(
        "its supervisor ended before starting it (its error is in {})",
        stderr.display()
    )
}

/// Reads the supervisor's report lines from the non-blocking pipe.
#[derive(Debug)]
pub struct ReportReader {
    file: File,
    buffer: Vec<u8>,
    closed: bool,
}

impl ReportReader {
    pub fn new(file: File) -> Self {
        Self::resume(file, Vec::new())
    }

    pub fn resume(file: File, unread: Vec<u8>) -> Self {
        ReportReader {
            file,
            buffer: unread,
            closed: false,
        }
    }

    pub fn into_parts(self) -> (File, Vec<u8>) {
        (self.file, self.buffer)
    }

    pub fn fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }

    /// The supervisor closed its end: it exited.
    pub fn closed(&self) -> bool {
        self.closed && !self.buffer.contains(&b'\n')
    }

    /// The next complete line, if one is there now. Unknown lines are
    /// skipped.
    pub fn next_report(&mut self) -> Option<supervise::Report> {
        use std::io::Read;
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                let text = String::from_utf8_lossy(&line[..end]);
                match supervise::Report::parse(&text) {
                    Some(report) => return Some(report),
                    None => continue,
                }
            }
            if self.closed {
                return None;
            }
            let mut chunk = [0u8; 512];
            match (&self.file).read(&mut chunk) {
                Ok(0) => self.closed = true,
                Ok(n) => self.buffer.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None, // WouldBlock: nothing yet
            }
        }
    }

    /// The next line, waiting up to `timeout_ms`; `Ok(None)` once closed.
    fn next_blocking(&mut self, timeout_ms: i32) -> std::io::Result<Option<supervise::Report>> {
        let deadline = std::time::Instant::now()
            + std::time::Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
        loop {
            if let Some(report) = self.next_report() {
                return Ok(Some(report));
            }
            if self.closed {
                return Ok(None);
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "timed out",
                ));
            }
            crate::process::wait_readable([self.fd()], left);
        }
    }
}

/// The environment as `NAME=value` entries separated by NUL, in an
/// anonymous memory file (closed on exec) read from its start.
fn environment_block(env: &[(OsString, OsString)]) -> std::io::Result<File> {
    use std::io::{Seek, Write};
    // SAFETY: memfd_create takes a NUL-terminated name and flags.
    let fd = unsafe { libc::memfd_create(c"oomgate-env".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just created and is owned here only.
    let mut file = unsafe { File::from_raw_fd(fd) };
    let mut block = Vec::new();
    for (name, value) in env {
        block.extend_from_slice(name.as_bytes());
        block.push(b'=');
        block.extend_from_slice(value.as_bytes());
        block.push(0);
    }
    file.write_all(&block)?;
    file.rewind()?;
    Ok(file)
}

/// A pipe whose read end is non-blocking; both ends close on exec.
fn report_pipe() -> std::io::Result<(File, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the descriptors were just created and are owned here only.
    let (read, write) = unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // The write end blocks: the supervisor's few short lines never fill it.
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        libc::fcntl(write.as_raw_fd(), libc::F_SETFL, 0);
    }
    Ok((read, write))
}

/// oomgate's environment, then the suite's, then the instance variables.
fn environment(spec: &LaunchSpec<'_>) -> Vec<(OsString, OsString)> {
    let case = spec.case;
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let mut set = |key: &str, value: OsString| {
        env.retain(|(k, _)| k != key);
        env.push((key.into(), value));
    };
    for (key, value) in &case.env {
        set(key, value.into());
    }
    // A pytest case loads oomgate's plugin from this process's copy.
    if let (Some(_), Some(plugin)) = (&case.pytest, crate::pytest::installed_plugin()) {
        let own = case.env.get("PYTHONPATH").map(String::as_str);
        set(
            "PYTHONPATH",
            crate::pytest::plugin_path(own, &plugin).into(),
        );
    }
    if let Some(gpus) = spec.gpus {
        // UUIDs, not indices: CUDA's fastest-first numbering cannot move
        // the case to another GPU. `PCI_BUS_ID` makes a workload's own
        // index 0 the pool's first GPU given, whatever the models.
        set("CUDA_VISIBLE_DEVICES", gpus.into());
        set("CUDA_DEVICE_ORDER", "PCI_BUS_ID".into());
    }
    set("OOMGATE_CASE", case.id.clone().into());
    set("OOMGATE_INSTANCE", spec.index.to_string().into());
    set("OOMGATE_CONCURRENCY", case.concurrency.to_string().into());
    set("OOMGATE_OUT", spec.case_dir.as_os_str().to_owned());
    set("OOMGATE_METRICS", spec.logs.metrics.as_os_str().to_owned());
    if let Some((port, role)) = spec.serving {
        set("OOMGATE_PORT", port.to_string().into());
        set("OOMGATE_ROLE", role.into());
    }
    env
}

/// The executable to run, checked to exist and be executable.
fn resolve(case: &Case, env: &[(OsString, OsString)]) -> Result<PathBuf, LaunchError> {
    let written = &case.command[0];
    if case.program.is_absolute() {
        return check_executable(&case.program)
            .map(|()| case.program.clone())
            .map_err(|why| {
                LaunchError(format!(
                    "cannot start `{written}`: {} {why}",
                    case.program.display()
                ))
            });
    }
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(&case.program);
        if check_executable(&candidate).is_ok() {
            return Ok(candidate);
        }
    }
    Err(LaunchError(format!(
        "cannot start `{written}`: command not found on PATH ({})",
        path.to_string_lossy()
    )))
}

fn check_executable(path: &Path) -> Result<(), &'static str> {
    let metadata = std::fs::metadata(path).map_err(|_| "does not exist")?;
    if metadata.is_dir() {
        return Err("is a directory");
    }
    if metadata.permissions().mode() & 0o111 == 0 {
        return Err("is not executable (chmod +x, or run it through its interpreter)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `wait_for_start` makes of the lines a supervisor (or the fork
    /// server) wrote before the pipe closed.
    fn start_after(lines: &str, executed: Option<i32>) -> Start {
        use std::io::Write;
        let (report, writer) = report_pipe().expect("pipe");
        File::from(writer)
            .write_all(lines.as_bytes())
            .expect("write");
        wait_for_start(report, executed, Path::new("stderr.log"))
    }

    #[test]
    fn a_supervisor_the_fork_server_did_not_make_is_executed_instead() {
        // Refused, or the fork server died before the supervisor's line:
        // nothing was started.
        for lines in ["refused 0000000001\n", ""] {
            assert!(
                matches!(start_after(lines, None), Start::NotMade),
                "{lines:?}"
            );
        }
        // One it made says its pid first; the workload started.
        match start_after("supervisor 0000000005\nforked 0000000006\npid 6\n", None) {
            Start::Started(launched) => assert_eq!(launched.supervisor, 5),
            _ => panic!("not started"),
        }
        // Killed by its workload once forked: started all the same.
        match start_after("supervisor 0000000005\nforked 0000000006\n", None) {
            Start::Started(launched) => assert_eq!(launched.supervisor, 5),
            _ => panic!("not started"),
        }
        // Made, then gone before forking: a failure to collect, never a
        // second supervisor.
        match start_after("supervisor 0000000005\n", None) {
            Start::Failed { supervisor, why } => {
                assert_eq!(supervisor, Some(5));
                assert!(why.contains("ended before starting it"), "{why}");
            }
            _ => panic!("not a failure"),
        }
        // An executed supervisor that ends without a word failed.
        assert!(matches!(
            start_after("", Some(7)),
            Start::Failed {
                supervisor: Some(7),
                ..
            }
        ));
    }

    #[test]
    fn instance_zero_keeps_plain_log_names() {
        let dir = Path::new("/out/cases/a");
        assert_eq!(
            InstanceLogs::for_instance(dir, 0).stdout,
            dir.join("stdout.log")
        );
        assert_eq!(
            InstanceLogs::for_instance(dir, 2).stderr,
            dir.join("stderr.2.log")
        );
    }
}
