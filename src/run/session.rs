//! The tests of a `[[pytest]]` table in one shared pytest session.
//!
//! A worker thread keeps one session alive for the tests it is handed: a
//! pytest process over the table's paths, started with oomgate's plugin
//! and two pipes (`OOMGATE_SESSION`). Once pytest has collected, the
//! plugin says it is ready; then oomgate names one test at a time and the
//! plugin runs it and answers with pytest's outcome and the output pytest
//! captured. Between two tests the plugin waits on oomgate, and oomgate
//! reads the test's memory from `/proc` (`measure::host::session`): the
//! kernel's high-water mark, reset at the test's start.
//!
//! A test that hangs past its `timeout`, a session that dies under a test
//! (a segfault, `os._exit`, the OOM killer) or Ctrl-C ends the session:
//! that test is judged by what happened to it, and the next test starts a
//! fresh session. A session that cannot start (pytest errors out while
//! collecting) fails each test of its table with pytest's words, without
//! trying again.
//!
//! Each test makes one [`RunRecord`], judged by the one judge as any run:
//! its exit is the one pytest gives a session of that test alone (0 when
//! it passed, was skipped or xfailed; 1 when it failed or errored), its
//! host figures what it added over the session's memory at its start.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::shared::{Job, Shared, now_rfc3339};
use crate::diagnose;
use crate::files::case::InstanceLogs;
use crate::measure::host::session::TestWindow;
use crate::probe::{ProbeSummary, PytestReport, TestOutcome};
use crate::record::{Focus, FocusLogs, InstanceRecord, RunRecord, StopReason};
use crate::redact;
use crate::suite::{Case, PytestSession};
use crate::vocabulary::Exit;

/// How often a running test's memory is read.
const TICK: Duration = Duration::from_millis(5);

/// The longest an answer line may be: the plugin sends at most 64 KiB of
/// each output, escaped.
const MAX_LINE: usize = 1 << 20;

/// How long a session that was told it is over may take to tear down and
/// exit before it is killed.
const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// A worker thread's sessions: the one alive, and the tables whose
/// session could not start.
#[derive(Default)]
pub(super) struct Sessions {
    live: Option<Live>,
    broken: HashMap<usize, String>,
    /// Sessions this worker started, for their folders' names.
    started: u64,
}

/// A running session.
struct Live {
    table: usize,
    child: std::process::Child,
    /// The plugin's process (pytest's), whose memory is the tests'.
    pid: i32,
    /// `None` once closed: the plugin reads the end of its commands as
    /// the end of the session.
    commands: Option<File>,
    answers: Lines,
    logs: InstanceLogs,
}

/// What the plugin says.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Said {
    Ready {
        /// The tests pytest collected.
        #[serde(rename = "ready")]
        _collected: u64,
        pid: i32,
    },
    Done {
        done: String,
        outcome: TestOutcome,
        when: Option<String>,
        #[serde(default)]
        message: String,
        #[serde(default)]
        stdout: String,
        #[serde(default)]
        stderr: String,
    },
    Missing {
        missing: String,
    },
}

/// How a test's wait ended.
enum Ended {
    Answered(Said),
    /// The session died (or closed its answers) under the test.
    Died,
    TimedOut,
    Interrupted,
    /// The plugin said something that is not an answer.
    Garbled(String),
}

impl Sessions {
    /// Run one test of `spec`'s table in the worker's session.
    pub(super) fn run(
        &mut self,
        shared: &Shared<'_>,
        job: &Job<'_>,
        spec: &PytestSession,
        worker: usize,
    ) -> RunRecord {
        let case = job.case;
        let started_at = now_rfc3339();
        let start = Instant::now();
        if self
            .live
            .as_ref()
            .is_some_and(|live| live.table != spec.table)
        {
            self.close();
        }
        if self.live.is_none() {
            if let Some(why) = self.broken.get(&spec.table) {
                return not_started(shared, job, started_at, why.clone());
            }
            self.started += 1;
            let folder = format!(".pytest-session-{}-{worker}-{}", spec.table, self.started);
            match Live::start(shared, case, spec, &folder) {
                Ok(live) => self.live = Some(live),
                Err(why) => {
                    self.broken.insert(spec.table, why.clone());
                    return not_started(shared, job, started_at, why);
                }
            }
        }
        let Some(live) = self.live.as_mut() else {
            return not_started(shared, job, started_at, "no session".into());
        };
        let stderr_offset = std::fs::metadata(&live.logs.stderr).map_or(0, |m| m.len());
        let mut window = TestWindow::open(live.pid);
        let ended = match live.ask(&spec.nodeid) {
            Err(_) => Ended::Died,
            Ok(()) => live.wait(shared, start + case.timeout, &mut window),
        };
        let host = window.close();
        let wall_time = start.elapsed();
        let mut record = base_record(shared, job, started_at, wall_time, host);
        match ended {
            Ended::Answered(Said::Done {
                done,
                outcome,
                when,
                message,
                stdout,
                stderr,
            }) if done == spec.nodeid => {
                answered(&mut record, job, (outcome, when, message), stdout, stderr);
            }
            Ended::Answered(Said::Missing { missing }) if missing == spec.nodeid => {
                record.stop = Some(StopReason::LaunchFailed {
                    message: format!(
                        "not run: the shared pytest session did not collect {} (its collection differs from oomgate's: a test made at collection time, or a random parameter); `isolate = true` runs it in a process of its own",
                        crate::clean::line(&spec.nodeid)
                    ),
                });
            }
            Ended::Answered(other) => {
                let said = format!("{other:?}");
                self.lost(shared, &mut record, stderr_offset, None);
                record.stop = Some(StopReason::LaunchFailed {
                    message: format!(
                        "the shared pytest session answered another test than {}: {}",
                        crate::clean::line(&spec.nodeid),
                        crate::clean::line(&said)
                    ),
                });
            }
            Ended::Garbled(line) => {
                self.lost(shared, &mut record, stderr_offset, None);
                record.stop = Some(StopReason::LaunchFailed {
                    message: format!(
                        "the shared pytest session said what is not an answer of oomgate's plugin: {}",
                        crate::clean::line(&line)
                    ),
                });
            }
            Ended::Died => self.lost(shared, &mut record, stderr_offset, None),
            Ended::TimedOut => self.lost(
                shared,
                &mut record,
                stderr_offset,
                Some(StopReason::TimedOut {
                    after: case.timeout,
                }),
            ),
            Ended::Interrupted => self.lost(
                shared,
                &mut record,
                stderr_offset,
                Some(StopReason::Interrupted),
            ),
        }
        record
    }

    /// The session ended under a test (or is ended, for `stop`): killed,
    /// its exit and its error output the test's.
    fn lost(
        &mut self,
        shared: &Shared<'_>,
        record: &mut RunRecord,
        stderr_offset: u64,
        stop: Option<StopReason>,
    ) {
        let Some(mut live) = self.live.take() else {
            return;
        };
        let exit = live.end(if stop.is_some() {
            Duration::ZERO
        } else {
            Duration::from_secs(1)
        });
        let stderr = live.logs.stderr.clone();
        let stdout = live.logs.stdout.clone();
        record.instances[0].exit = exit;
        let relative = |path: &Path| {
            path.strip_prefix(shared.out_dir)
                .unwrap_or(path)
                .to_path_buf()
        };
        record.instances[0].stdout_log = relative(&stdout);
        record.instances[0].stderr_log = relative(&stderr);
        record.focus.stdout_tail = tail(&stdout);
        record.focus.stderr_tail = tail(&stderr);
        record.focus.scan =
            (stop.is_none()).then(|| masked_scan(diagnose::scan_log(&stderr, stderr_offset)));
        record.stop = stop;
    }

    /// Tell the live session it is over, and wait for it.
    fn close(&mut self) {
        if let Some(mut live) = self.live.take() {
            live.end(CLOSE_GRACE);
        }
    }
}

impl Drop for Sessions {
    fn drop(&mut self) {
        self.close();
    }
}

impl Live {
    /// Start the table's session and wait until pytest has collected.
    fn start(
        shared: &Shared<'_>,
        case: &Case,
        spec: &PytestSession,
        folder: &str,
    ) -> Result<Live, String> {
        let shown = crate::suite::shell_join(&spec.command);
        if let Some(plugin) = case
            .env
            .get("PYTHONPATH")
            .and_then(|path| path.split(':').next())
        {
            crate::pytest::check_plugin(Path::new(plugin)).map_err(|why| {
                format!(
                    "not started: oomgate's pytest plugin in {plugin} is not as oomgate wrote it ({why}): a test of this run changed it, and a changed plugin could report a failed test as passed"
                )
            })?;
        }
        if !case.cwd.is_dir() {
            return Err(format!(
                "cannot start the shared pytest session `{shown}`: working directory {} does not exist",
                case.cwd.display()
            ));
        }
        let dir = shared.out_dir.join("cases").join(folder);
        let cannot = |what: &str, e: std::io::Error| format!("{what}: {e}");
        match crate::files::remove_tree(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(cannot(&dir.display().to_string(), e));
            }
            _ => {}
        }
        std::fs::create_dir_all(&dir).map_err(|e| cannot(&dir.display().to_string(), e))?;
        let logs = InstanceLogs::for_instance(&dir, 0);
        let stdout = crate::files::case::create(&logs.stdout)
            .map_err(|e| cannot(&logs.stdout.display().to_string(), e))?;
        let stderr = crate::files::case::create(&logs.stderr)
            .map_err(|e| cannot(&logs.stderr.display().to_string(), e))?;
        let (command_read, command_write) = pipe().map_err(|e| cannot("a pipe", e))?;
        let (answer_read, answer_write) = pipe().map_err(|e| cannot("a pipe", e))?;
        let handed: [RawFd; 2] = [command_read.as_raw_fd(), answer_write.as_raw_fd()];
        let mut command = std::process::Command::new(&case.program);
        command
            .args(&spec.command[1..])
            .current_dir(&case.cwd)
            .envs(&case.env)
            .env("OOMGATE_SESSION", format!("{},{}", handed[0], handed[1]))
            .stdin(std::process::Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            // Its own group, so what its tests start is stopped with it.
            .process_group(0);
        for name in crate::suite::RESERVED_ENV {
            command.env_remove(name);
        }
        let parent = std::process::id() as i32;
        // SAFETY: fcntl and prctl are async-signal-safe; the descriptors
        // are open in the child (they close on exec unless cleared here).
        unsafe {
            command.pre_exec(move || {
                for fd in handed {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                crate::process::die_with_parent(parent)
            });
        }
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start the shared pytest session `{shown}`: {e}"))?;
        drop((command_read, answer_write));
        let mut live = Live {
            table: spec.table,
            pid: child.id() as i32,
            child,
            commands: Some(File::from(command_write)),
            answers: Lines::new(File::from(answer_read)),
            logs,
        };
        let deadline = Instant::now() + crate::pytest::COLLECT_TIMEOUT;
        let failed = |live: &mut Live, how: String| {
            let exit = live.end(Duration::from_secs(1));
            let said = [&live.logs.stdout, &live.logs.stderr]
                .into_iter()
                .map(|path| tail(path))
                .filter(|t| !t.trim().is_empty())
                .collect::<Vec<_>>()
                .join("\n");
            let how = match (how.is_empty(), exit) {
                (true, Some(exit)) => exit.describe(),
                (true, None) => "ended".to_string(),
                (false, _) => how,
            };
            format!("the shared pytest session `{shown}` {how} before it ran a test:\n{said}")
        };
        loop {
            if shared.interrupt.requested() {
                return Err(failed(&mut live, "was interrupted".into()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(failed(
                    &mut live,
                    format!(
                        "did not finish collecting in {}",
                        humantime::format_duration(crate::pytest::COLLECT_TIMEOUT)
                    ),
                ));
            }
            match live.answers.next(left.min(Duration::from_millis(100))) {
                Ok(Heard::Quiet) => {}
                Ok(Heard::Line(line)) => {
                    return match serde_json::from_slice::<Said>(&line) {
                        Ok(Said::Ready { pid, .. }) => {
                            if pid != live.pid && !descends_from(pid, live.pid) {
                                return Err(failed(
                                    &mut live,
                                    format!("named pid {pid}, no process of the session,"),
                                ));
                            }
                            live.pid = pid;
                            Ok(live)
                        }
                        _ => Err(failed(
                            &mut live,
                            format!(
                                "said `{}` where its plugin says it is ready",
                                crate::clean::line(&String::from_utf8_lossy(&line))
                            ),
                        )),
                    };
                }
                Ok(Heard::End) | Err(_) => return Err(failed(&mut live, String::new())),
            }
        }
    }

    fn ask(&mut self, nodeid: &str) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(&serde_json::json!({ "run": nodeid }))
            .map_err(std::io::Error::other)?;
        line.push(b'\n');
        match self.commands.as_mut() {
            Some(commands) => commands.write_all(&line),
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        }
    }

    /// Wait for the test's answer until `deadline`, reading its memory
    /// every tick.
    fn wait(&mut self, shared: &Shared<'_>, deadline: Instant, window: &mut TestWindow) -> Ended {
        loop {
            if shared.interrupt.requested() {
                return Ended::Interrupted;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ended::TimedOut;
            }
            match self.answers.next(left.min(TICK)) {
                Ok(Heard::Quiet) => window.tick(),
                Ok(Heard::Line(line)) => {
                    return match serde_json::from_slice::<Said>(&line) {
                        Ok(said) => Ended::Answered(said),
                        Err(_) => Ended::Garbled(String::from_utf8_lossy(&line).into_owned()),
                    };
                }
                Ok(Heard::End) | Err(_) => return Ended::Died,
            }
        }
    }

    /// End the session: its commands closed, given `grace` to exit, then
    /// its group killed. How it exited, when it did.
    fn end(&mut self, grace: Duration) -> Option<Exit> {
        // Closing the commands tells the plugin the session is over.
        self.commands = None;
        let deadline = Instant::now() + grace;
        let group = self.child.id() as i32;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                _ => {
                    // SAFETY: kill with a process group id this session made.
                    unsafe {
                        libc::kill(-group, libc::SIGKILL);
                    }
                    break self.child.wait().ok();
                }
            }
        };
        crate::process::end_group(group, Duration::from_secs(2));
        status.map(|s| Exit::from_wait_status(s.into_raw()))
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.end(Duration::ZERO);
        }
    }
}

/// What a read of the answers found.
enum Heard {
    Line(Vec<u8>),
    /// Nothing within the wait.
    Quiet,
    /// The session closed its answers (it ended).
    End,
}

/// The plugin's answers, a line at a time.
struct Lines {
    file: File,
    buffer: Vec<u8>,
}

impl Lines {
    fn new(file: File) -> Self {
        Lines {
            file,
            buffer: Vec::with_capacity(4096),
        }
    }

    /// The next whole line, waiting at most `wait` for more bytes.
    fn next(&mut self, wait: Duration) -> std::io::Result<Heard> {
        loop {
            if let Some(at) = self.buffer.iter().position(|&b| b == b'\n') {
                let rest = self.buffer.split_off(at + 1);
                let mut line = std::mem::replace(&mut self.buffer, rest);
                line.pop();
                return Ok(Heard::Line(line));
            }
            if self.buffer.len() > MAX_LINE {
                return Ok(Heard::End);
            }
            let mut poll = libc::pollfd {
                fd: self.file.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let millis = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
            // SAFETY: one pollfd, valid for the call.
            let ready = unsafe { libc::poll(&mut poll, 1, millis) };
            if ready < 0 {
                let error = std::io::Error::last_os_error();
                if error.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            if ready == 0 {
                return Ok(Heard::Quiet);
            }
            let mut chunk = [0u8; 16 * 1024];
            match self.file.read(&mut chunk) {
                Ok(0) => return Ok(Heard::End),
                Ok(n) => self.buffer.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// A pipe whose two ends close on exec.
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the descriptors were just created and are owned here only.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Whether `pid` is below `ancestor` (a wrapper that started Python).
fn descends_from(pid: i32, ancestor: i32) -> bool {
    let mut current = pid;
    for _ in 0..64 {
        let Ok(stat) = std::fs::read(format!("/proc/{current}/stat")) else {
            return false;
        };
        let Some(entry) = crate::measure::procfs::parse_stat(&stat) else {
            return false;
        };
        if entry.ppid == ancestor {
            return true;
        }
        if entry.ppid <= 1 {
            return false;
        }
        current = entry.ppid;
    }
    false
}

/// The record of a test of a session before its end is known: its host
/// figures, one instance, no exit yet.
fn base_record(
    shared: &Shared<'_>,
    job: &Job<'_>,
    started_at: String,
    wall_time: Duration,
    host: crate::measure::HostFigures,
) -> RunRecord {
    let case = job.case;
    let dir = job
        .dir
        .strip_prefix(shared.out_dir)
        .unwrap_or(&job.dir)
        .to_path_buf();
    let logs = InstanceLogs::for_instance(&dir, 0);
    RunRecord {
        repeat: 0,
        probe_value: None,
        concurrency: 1,
        started_at,
        wall_time,
        stop: None,
        instances: vec![InstanceRecord {
            index: 0,
            runs: 1,
            exit: None,
            stdout_log: logs.stdout,
            stderr_log: logs.stderr,
            supervisor_lost: false,
        }],
        server: None,
        samples: 0,
        server_phases: None,
        // A test of a session has no timeline: its window is read at its
        // ends (and at ticks, for its children), not drawn.
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
        allocator_env: super::measured::allocator_env(case),
        focus: FocusLogs {
            focus: Focus::Instance(0),
            stdout_tail: String::new(),
            stderr_tail: String::new(),
            scan: None,
        },
    }
}

/// A test the session ran and answered for: pytest's outcome, its
/// captured output written to its folder's logs.
fn answered(
    record: &mut RunRecord,
    job: &Job<'_>,
    (outcome, when, message): (TestOutcome, Option<String>, String),
    stdout: String,
    stderr: String,
) {
    let logs = InstanceLogs::for_instance(&job.dir, 0);
    // Its logs are the test's captured output; a folder a test swapped
    // for a link is not written through (the tails below still hold it).
    crate::files::case::replace(&logs.stdout, stdout.as_bytes()).ok();
    crate::files::case::replace(&logs.stderr, stderr.as_bytes()).ok();
    let report = PytestReport {
        nodeid: job
            .case
            .pytest_session
            .as_ref()
            .map_or_else(|| job.case.id.clone(), |s| s.nodeid.clone()),
        outcome,
        when,
        message: (!message.is_empty()).then(|| redact::active().mask(&message).into_owned()),
    };
    let failed = report.failed();
    record.instances[0].exit = Some(Exit::Code(i32::from(failed)));
    record.probe = Some(ProbeSummary {
        pytest: Some(report),
        ..ProbeSummary::default()
    });
    let mask = |text: &str| redact::active().mask(text).into_owned();
    record.focus.stdout_tail = mask(last(&stdout));
    record.focus.stderr_tail = mask(last(&stderr));
    record.focus.scan = failed.then(|| masked_scan(diagnose::scan(stderr.as_bytes())));
}

/// A test that did not run: its table's session could not start, or the
/// session did not know it.
fn not_started(shared: &Shared<'_>, job: &Job<'_>, started_at: String, why: String) -> RunRecord {
    let host = crate::measure::HostFigures {
        method: crate::measure::host::HostMethod::PytestSession,
        peak_bytes: None,
        peak_at_ms: None,
        peak_source: None,
        floors: Default::default(),
        working_peak_bytes: None,
        charged_peak_bytes: None,
        charged_peak_source: None,
        oom_kills: None,
        pss_sweeps: 0,
        note: None,
        ranks: Default::default(),
        start_bytes: None,
        left_bytes: None,
    };
    let mut record = base_record(shared, job, started_at, Duration::ZERO, host);
    record.instances[0].runs = 0;
    record.stop = Some(StopReason::LaunchFailed { message: why });
    record
}

/// The last [`super::logs::TAIL_BYTES`] of a test's output, cut at a
/// character.
fn last(text: &str) -> &str {
    let keep = usize::try_from(super::logs::TAIL_BYTES).unwrap_or(usize::MAX);
    let mut from = text.len().saturating_sub(keep);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    &text[from..]
}

/// A session log's tail, masked.
fn tail(path: &Path) -> String {
    super::logs::read_tail(path, super::logs::TAIL_BYTES, &redact::active())
        .unwrap_or_else(|e| format!("[oomgate: cannot read {}: {e}]", path.display()))
}

fn masked_scan(scan: diagnose::Scan) -> diagnose::Scan {
    super::measured::masked_scan(scan)
}
