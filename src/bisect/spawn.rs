//! The commands a bisect runs (git, a build, pip, oomgate itself), each
//! in a process group of its own with its output in a log, stopped as a
//! group when the bisect is interrupted: Ctrl-C or SIGTERM leaves no
//! process behind.

use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::run::Interrupt;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code (a signal `s` reads as 128 + s).
    Exited(i32),
    /// The bisect was interrupted; the command was stopped.
    Interrupted,
}

/// How long a stopped command gets between SIGTERM and SIGKILL: an
/// oomgate run stops its case within its own grace period, and writes its
/// results.
const GRACE: Duration = Duration::from_secs(30);

/// A command started by [`Running::start`], watched until it ends.
pub struct Running {
    child: std::process::Child,
    /// When it was asked to stop (SIGTERM to its group).
    stopping: Option<Instant>,
}

impl Running {
    /// Start `command` with stdin closed and its output appended to
    /// `log`, in a process group of its own.
    pub fn start(mut command: Command, log: &Path) -> io::Result<Running> {
        let file = File::options().create(true).append(true).open(log)?;
        command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe and allocates nothing. A bisect
        // that is killed outright (SIGKILL) cannot stop its command; the
        // kernel asks it to stop then, and an oomgate run stops its case.
        let parent = std::process::id();
        unsafe {
            command.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                // The bisect may have died before the signal was asked
                // for: then nothing would ever send it.
                if libc::getppid() as u32 != parent {
                    return Err(io::Error::other("the bisect that started it has ended"));
                }
                Ok(())
            });
        }
        Ok(Running {
            child: command.spawn()?,
            stopping: None,
        })
    }

    /// How it ended, once it has; stopped (its group) when the bisect is
    /// interrupted.
    pub fn poll(&mut self, interrupt: &Interrupt) -> io::Result<Option<Ended>> {
        let group = self.child.id() as libc::pid_t;
        if let Some(status) = self.child.try_wait()? {
            // Whatever the command left running in its group goes too.
            // SAFETY: kill takes no memory; a group that is gone is ESRCH.
            unsafe { libc::kill(-group, libc::SIGKILL) };
            if self.stopping.is_some() {
                return Ok(Some(Ended::Interrupted));
            }
            use std::os::unix::process::ExitStatusExt;
            return Ok(Some(Ended::Exited(
                status
                    .code()
                    .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
            )));
        }
        if interrupt.requested() {
            let signal = match self.stopping {
                None => {
                    self.stopping = Some(Instant::now());
                    Some(libc::SIGTERM)
                }
                Some(since) if interrupt.insisted() || since.elapsed() > GRACE => {
                    Some(libc::SIGKILL)
                }
                Some(_) => None,
            };
            if let Some(signal) = signal {
                // SAFETY: as above.
                unsafe { libc::kill(-group, signal) };
            }
        }
        Ok(None)
    }
}

/// How often a running command is looked at.
pub const POLL: Duration = Duration::from_millis(20);

/// Run `command` to its end (see [`Running`]); `Err` when it cannot be
/// started or the log not written.
pub fn run_logged(command: Command, log: &Path, interrupt: &Interrupt) -> io::Result<Ended> {
    let mut running = Running::start(command, log)?;
    loop {
        if let Some(ended) = running.poll(interrupt)? {
            return Ok(ended);
        }
        std::thread::sleep(POLL);
    }
}

/// Run `command` to its end and take its stdout (at most 16 MiB); its
/// stderr's last lines in the error when it fails. For quick questions
/// (git rev-parse, pip index) that are not worth a log.
pub fn output(mut command: Command) -> Result<String, String> {
    // Named by its program and first words only: an index URL may
    // carry a password.
    let shown: Vec<String> = std::iter::once(command.get_program())
        .chain(command.get_args().take(3))
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let shown = format!("`{}`", shown.join(" "));
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!(
            "{shown} failed ({}): {}",
            out.status,
            crate::clean::line(&tail.join(" / "))
        ));
    }
    let stdout = &out.stdout[..out.stdout.len().min(16 << 20)];
    Ok(String::from_utf8_lossy(stdout).into_owned())
}

/// The last `lines` lines of a log, cleaned for a terminal; empty when
/// it cannot be read. Lines starting with one of `noise` (pip's `INFO:`
/// chatter) are left out.
pub fn tail(log: &Path, lines: usize, noise: &[&str]) -> String {
    let text = std::fs::read(log).unwrap_or_default();
    let text = String::from_utf8_lossy(&text[text.len().saturating_sub(64 << 10)..]).into_owned();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !noise.iter().any(|n| l.starts_with(n)))
        .collect();
    let from = kept.len().saturating_sub(lines);
    crate::clean::line(&kept[from..].join(" / ")).into_owned()
}
