//! A shared pytest session: one pytest process over a `[[pytest]]`
//! table's paths, with oomgate's plugin and two pipes (`OOMGATE_SESSION`,
//! the descriptors of oomgate's commands and of the plugin's answers).
//!
//! Once pytest has collected, the plugin says it is ready (with its pid:
//! the process whose memory is the tests'); then it runs each test oomgate
//! names (`{"run": NODEID}`), one at a time, and answers with pytest's
//! outcome and the output pytest captured. Between two tests it waits on
//! oomgate. Closing the commands ends the session: the plugin tears the
//! fixtures down and pytest exits.
//!
//! `run` starts one for its collection ([`crate::pytest::collect`] with
//! [`super::Collecting::Session`]): the session collects once, writes the
//! collection (`OOMGATE_COLLECT`), and waits, parked ([`Parked`]), until a
//! worker takes it. A worker starts another after a test ended its session.
//! What the session prints goes to a file of its own, whose tail explains
//! a session that died.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::measure::gpu::AllocatorPeaks;
use crate::probe::TestOutcome;
use crate::suite::{Case, PytestSession};
use crate::vocabulary::Exit;

/// The sessions of this oomgate that are running (their process groups'
/// leaders): oomgate's children, but no case's processes, so a case's
/// scans leave them out.
static RUNNING: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// The pids of the sessions running now.
pub fn running() -> Vec<i32> {
    RUNNING.lock().map(|r| r.clone()).unwrap_or_default()
}

/// The longest an answer line may be: the plugin sends at most 64 KiB of
/// each output, escaped.
const MAX_LINE: usize = 1 << 20;

/// A running session.
pub struct Session {
    table: usize,
    child: std::process::Child,
    /// The plugin's process (pytest's), whose memory is the tests'.
    pid: i32,
    /// `None` once closed: the plugin reads the end of its commands as
    /// the end of the session.
    commands: Option<File>,
    answers: Lines,
    /// What the session printed (stdout and stderr, as on a terminal).
    output: File,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("table", &self.table)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// What the plugin answered for a test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// It ran the test: pytest's outcome, phase and short message, and
    /// the output pytest captured (with the failure's report, if any).
    Ran {
        outcome: TestOutcome,
        when: Option<String>,
        message: String,
        stdout: String,
        stderr: String,
        /// torch's allocator peaks during the test, where torch had CUDA
        /// initialised at its end.
        allocator: Option<Box<AllocatorPeaks>>,
    },
    /// Its collection has no test of that node id.
    Missing,
    /// Something that is no answer to that test: the plugin's line, as
    /// it came.
    Other(String),
}

/// What a wait for an answer found.
#[derive(Debug)]
pub enum Heard {
    Answer(Answer),
    /// Nothing within the wait.
    Quiet,
    /// The session closed its answers: it ended.
    Ended,
}

/// Why a session did not become ready.
#[derive(Debug)]
pub struct NotReady {
    /// `exited with code 4`, `was interrupted`, ...
    pub how: String,
    /// How the process ended, once it did.
    pub exit: Option<Exit>,
    /// The last of what the session printed, masked.
    pub output: String,
}

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
        #[serde(default)]
        gpu: Option<Box<AllocatorPeaks>>,
    },
    Missing {
        missing: String,
    },
}

impl Session {
    /// Start the session of `spec`'s table and wait until pytest has
    /// collected (at most `collect_timeout`, or until `stop` says so).
    /// `collect_to`: where the plugin writes the collection.
    pub fn start(
        case: &Case,
        spec: &PytestSession,
        collect_to: Option<&Path>,
        collect_timeout: Duration,
        stop: &dyn Fn() -> bool,
    ) -> Result<Session, NotReady> {
        let not_started = |how: String| NotReady {
            how,
            exit: None,
            output: String::new(),
        };
        let output = tempfile::tempfile().map_err(|e| not_started(format!("a file: {e}")))?;
        let (command_read, command_write) =
            pipe().map_err(|e| not_started(format!("a pipe: {e}")))?;
        let (answer_read, answer_write) =
            pipe().map_err(|e| not_started(format!("a pipe: {e}")))?;
        let handed: [RawFd; 2] = [command_read.as_raw_fd(), answer_write.as_raw_fd()];
        let mut command = std::process::Command::new(&case.program);
        command
            .args(&spec.command[1..])
            .current_dir(&case.cwd)
            .envs(&case.env)
            .stdin(std::process::Stdio::null())
            .stdout(output.try_clone().map_err(|e| not_started(e.to_string()))?)
            .stderr(output.try_clone().map_err(|e| not_started(e.to_string()))?)
            // Its own group, so what its tests start is stopped with it.
            .process_group(0);
        // Variables oomgate sets for a running case would point the
        // plugin at files of no case.
        for name in crate::suite::RESERVED_ENV {
            command.env_remove(name);
        }
        command.env("OOMGATE_SESSION", format!("{},{}", handed[0], handed[1]));
        if let Some(path) = collect_to {
            command.env("OOMGATE_COLLECT", path);
        }
        let parent = std::process::id() as i32;
        // SAFETY: fcntl and prctl are async-signal-safe; the two
        // descriptors are open in the child, and close on exec unless
        // cleared here.
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
        let child = command.spawn().map_err(|e| not_started(e.to_string()))?;
        if let Ok(mut running) = RUNNING.lock() {
            running.push(child.id() as i32);
        }
        drop((command_read, answer_write));
        let mut session = Session {
            table: spec.table,
            pid: child.id() as i32,
            child,
            commands: Some(File::from(command_write)),
            answers: Lines::new(File::from(answer_read)),
            output,
        };
        match session.ready(collect_timeout, stop) {
            Ok(()) => Ok(session),
            Err(how) => {
                let exit = session.end(Duration::from_secs(1));
                Err(NotReady {
                    how: match (how.is_empty(), exit) {
                        (false, _) => how,
                        (true, Some(exit)) => exit.describe(),
                        (true, None) => "ended".to_string(),
                    },
                    exit,
                    output: session.output_since(0, "the session's output"),
                })
            }
        }
    }

    /// Wait for the plugin's "ready"; what went wrong, else.
    fn ready(&mut self, timeout: Duration, stop: &dyn Fn() -> bool) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if stop() {
                return Err("was interrupted".into());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "did not finish collecting in {}",
                    humantime::format_duration(timeout)
                ));
            }
            match self.answers.next(left.min(Duration::from_millis(100))) {
                Ok(None) => {}
                Ok(Some(line)) => {
                    return match serde_json::from_slice::<Said>(&line) {
                        Ok(Said::Ready { pid, .. }) => {
                            if pid != self.pid && !descends_from(pid, self.pid) {
                                return Err(format!(
                                    "named pid {pid}, no process of the session, as its own"
                                ));
                            }
                            self.pid = pid;
                            Ok(())
                        }
                        _ => Err(format!(
                            "said `{}` where oomgate's plugin says it is ready",
                            crate::clean::line(&String::from_utf8_lossy(&line))
                        )),
                    };
                }
                Err(_) => return Err(String::new()),
            }
        }
    }

    /// Whether its process is still running (it may have died between
    /// two tests, by a thread a test left behind).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The `[[pytest]]` table it runs the tests of.
    pub fn table(&self) -> usize {
        self.table
    }

    /// The process whose memory is the tests'.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Ask for the test `nodeid`.
    pub fn ask(&mut self, nodeid: &str) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(&serde_json::json!({ "run": nodeid }))
            .map_err(std::io::Error::other)?;
        line.push(b'\n');
        match self.commands.as_mut() {
            Some(commands) => commands.write_all(&line),
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        }
    }

    /// The answer for `nodeid`, waiting at most `wait` for it.
    pub fn answer(&mut self, nodeid: &str, wait: Duration) -> Heard {
        let line = match self.answers.next(wait) {
            Ok(Some(line)) => line,
            Ok(None) => return Heard::Quiet,
            Err(_) => return Heard::Ended,
        };
        Heard::Answer(match serde_json::from_slice::<Said>(&line) {
            Ok(Said::Done {
                done,
                outcome,
                when,
                message,
                stdout,
                stderr,
                gpu,
            }) if done == nodeid => Answer::Ran {
                outcome,
                when,
                message,
                stdout,
                stderr,
                allocator: gpu,
            },
            Ok(Said::Missing { missing }) if missing == nodeid => Answer::Missing,
            _ => Answer::Other(String::from_utf8_lossy(&line).into_owned()),
        })
    }

    /// How much the session has printed so far.
    pub fn output_len(&self) -> u64 {
        self.output.metadata().map_or(0, |m| m.len())
    }

    /// The last 64 KiB of what the session printed after `offset`,
    /// masked (`Redactor::masked_tail`); `whole`: where all of it is, for
    /// the note on what was left out.
    pub fn output_since(&self, offset: u64, whole: &str) -> String {
        const KEEP: u64 = 64 * 1024;
        let redactor = crate::redact::active();
        let context = redactor.context() as u64;
        let from = offset.max(self.output_len().saturating_sub(KEEP + context));
        let bytes = self.output_bytes(from, KEEP + context);
        redactor.masked_tail(&bytes, from - offset, KEEP, whole)
    }

    /// At most `most` bytes of the output from `from`. Read at an offset:
    /// the session writes through the same open file, whose position a
    /// seek here would move.
    pub fn output_bytes(&self, from: u64, most: u64) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let mut bytes = vec![0u8; usize::try_from(most).unwrap_or(usize::MAX).min(1 << 30)];
        let mut filled = 0;
        while filled < bytes.len() {
            match self
                .output
                .read_at(&mut bytes[filled..], from + filled as u64)
            {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        bytes.truncate(filled);
        bytes
    }

    /// End the session: its commands closed, `grace` to tear down and
    /// exit, then its group killed. How it exited, when it did.
    pub fn end(&mut self, grace: Duration) -> Option<Exit> {
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
                    // SAFETY: kill of the process group this session made.
                    unsafe {
                        libc::kill(-group, libc::SIGKILL);
                    }
                    break self.child.wait().ok();
                }
            }
        };
        crate::process::end_group(group, Duration::from_secs(2));
        self.forget();
        status.map(|s| Exit::from_wait_status(s.into_raw()))
    }

    /// No longer among the [`running`] sessions: its pid may be another
    /// process's from now on.
    fn forget(&self) {
        let group = self.child.id() as i32;
        if let Ok(mut running) = RUNNING.lock() {
            running.retain(|&pid| pid != group);
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        match self.child.try_wait() {
            Ok(None) => {
                self.end(Duration::ZERO);
            }
            _ => self.forget(),
        }
    }
}

/// Sessions started for a run's collection, waiting for a worker to take
/// them, by table. Dropped with the suite: a session no test was left to
/// is ended.
#[derive(Debug, Clone, Default)]
pub struct Parked(Arc<Mutex<HashMap<usize, Session>>>);

impl Parked {
    pub fn park(&self, session: Session) {
        if let Ok(mut parked) = self.0.lock() {
            parked.insert(session.table, session);
        }
    }

    /// The parked session of `table`, taken.
    pub fn take(&self, table: usize) -> Option<Session> {
        self.0.lock().ok()?.remove(&table)
    }

    /// End every parked session but those of `kept` tables now: no test
    /// will run in them.
    pub fn keep_only(&self, kept: &std::collections::BTreeSet<usize>) {
        if let Ok(mut parked) = self.0.lock() {
            let unused: Vec<usize> = parked
                .keys()
                .filter(|table| !kept.contains(table))
                .copied()
                .collect();
            for table in unused {
                if let Some(mut session) = parked.remove(&table) {
                    session.end(Duration::from_secs(2));
                }
            }
        }
    }
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

    /// The next whole line (`None`: none within `wait`); an error when
    /// the session closed its answers or sent a line past [`MAX_LINE`].
    fn next(&mut self, wait: Duration) -> std::io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(at) = self.buffer.iter().position(|&b| b == b'\n') {
                let rest = self.buffer.split_off(at + 1);
                let mut line = std::mem::replace(&mut self.buffer, rest);
                line.pop();
                return Ok(Some(line));
            }
            if self.buffer.len() > MAX_LINE {
                return Err(std::io::Error::other("an answer longer than 1 MiB"));
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
                return Ok(None);
            }
            let mut chunk = [0u8; 16 * 1024];
            match self.file.read(&mut chunk) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
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
