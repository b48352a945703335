//! The per-instance supervisor: a small process between oomgate and the
//! workload, so that the workload's own high-water mark can be read.
//!
//! Why it exists: a process's `ru_maxrss` includes the pages it had
//! *before* it executed the workload — a child forked from oomgate
//! starts with a copy of oomgate's page tables, and `execve` folds that
//! memory's high-water mark into the process's maximum for good. Measured:
//! `true` forked from a process of 200 MiB reports `ru_maxrss` = 210 MiB.
//! So oomgate (whose memory grows with the results it holds) starts
//! `oomgate __supervise` instead — oomgate's own executable run afresh,
//! about 1–2 MiB resident — and that forks the workload. The supervisor:
//!
//! - runs with oomgate's environment, not the case's (a case's
//!   `LD_PRELOAD` must not load into it): the workload's comes on a
//!   descriptor of its own;
//! - ignores the signals a process sends its own group (SIGTERM, SIGINT,
//!   SIGUSR1, ...: they are for the workload, which shares the group) and
//!   hands the workload the dispositions it inherited; dies with oomgate
//!   (`PR_SET_PDEATHSIG`, set by oomgate before exec);
//! - makes the workload join the case's memory cgroup between fork and
//!   exec, so every descendant is charged to it, and dies with the
//!   supervisor the same way;
//! - is the child subreaper of the workload's tree and reaps with `wait4`,
//!   so the largest `ru_maxrss` of everything it reaped is known — the
//!   workload's own includes every descendant it waited for;
//! - reports on a pipe, one line each: `cgroup <errno>` when joining the
//!   cgroup failed, `pid <pid>`, `rss <KiB>` when a process it reaped set a
//!   new largest `ru_maxrss`, then `exit code|signal <n> <maxrss KiB>`.
//!   oomgate polls that pipe, so an exit is noticed at once.
//!
//! It writes nothing else; the only files it holds are the instance's log
//! files (as its stdout and stderr, for the workload to inherit).

use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;

/// The hidden first argument that makes `oomgate` a supervisor.
pub const ARG: &str = "__supervise";

/// A line of the supervisor's report, as oomgate reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// The workload could not join the case cgroup (errno); it runs anyway.
    CgroupFailed(i32),
    /// The workload started with this pid.
    Started(i32),
    /// The workload could not be started.
    SpawnFailed(String),
    /// A process the supervisor reaped (re-parented to it) had this
    /// `ru_maxrss` (KiB), the largest so far.
    Rss(u64),
    /// The workload ended: how, and the largest `ru_maxrss` (KiB) of it and
    /// every process the supervisor reaped.
    Exited {
        exit: super::process::Exit,
        maxrss_kib: u64,
    },
}

impl Report {
    pub fn parse(line: &str) -> Option<Report> {
        let mut words = line.split(' ');
        match words.next()? {
            "cgroup" => Some(Report::CgroupFailed(words.next()?.parse().ok()?)),
            "pid" => Some(Report::Started(words.next()?.parse().ok()?)),
            "rss" => Some(Report::Rss(words.next()?.parse().ok()?)),
            "spawn-error" => Some(Report::SpawnFailed(
                line.trim_start_matches("spawn-error").trim().to_string(),
            )),
            "exit" => {
                let kind = words.next()?;
                let value: i32 = words.next()?.parse().ok()?;
                let maxrss_kib = words.next()?.parse().ok()?;
                let exit = match kind {
                    "code" => super::process::Exit::Code(value),
                    "signal" => super::process::Exit::Signal(value),
                    _ => return None,
                };
                Some(Report::Exited { exit, maxrss_kib })
            }
            _ => None,
        }
    }
}

/// `oomgate __supervise <report-fd> <env-fd | -> <cgroup.procs path | -> -- <program> <args>...`
/// Returns the supervisor's exit status.
pub fn main(args: &[OsString]) -> i32 {
    let parsed = (|| {
        let fd: RawFd = args.first()?.to_str()?.parse().ok()?;
        let env_fd: Option<RawFd> = match args.get(1)?.as_bytes() {
            b"-" => None,
            text => Some(std::str::from_utf8(text).ok()?.parse().ok()?),
        };
        let cgroup = match args.get(2)?.as_bytes() {
            b"-" => None,
            path => Some(CString::new(path).ok()?),
        };
        if args.get(3)?.as_bytes() != b"--" {
            return None;
        }
        let program = args.get(4)?;
        Some((fd, env_fd, cgroup, program, &args[5..]))
    })();
    let Some((fd, env_fd, cgroup, program, rest)) = parsed else {
        eprintln!("oomgate: `{ARG}` is internal to `oomgate run`");
        return 2;
    };
    // SAFETY: fcntl, prctl and signal take no memory; the fd was given to
    // us by oomgate for this purpose and nothing else owns it.
    let (mut report, inherited) = unsafe {
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        // Reaping needs SIGCHLD at its default: ignored, the kernel reaps
        // children itself and wait4 learns nothing.
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        (
            std::fs::File::from_raw_fd(fd),
            ignore_signals_meant_for_the_workload(),
        )
    };
    // The workload's environment comes on its own descriptor, so that the
    // supervisor itself runs without the case's LD_PRELOAD and the like.
    let environment = match env_fd.map(read_environment) {
        Some(Ok(environment)) => Some(environment),
        Some(Err(e)) => {
            writeln!(report, "spawn-error cannot read the environment: {e}").ok();
            return 0;
        }
        None => None,
    };
    let supervisor = std::process::id() as i32;
    let mut command = std::process::Command::new(program);
    command.args(rest);
    if let Some(environment) = environment {
        command.env_clear().envs(environment);
    }
    // SAFETY: the closure runs between fork and exec and makes only
    // async-signal-safe calls (signal, prctl, getppid, open, write, close)
    // on memory prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            restore_signals(&inherited);
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0
                || libc::getppid() != supervisor
            {
                libc::_exit(137);
            }
            if let Some(procs) = &cgroup {
                join_cgroup(procs, fd);
            }
            Ok(())
        });
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            writeln!(report, "spawn-error {e}").ok();
            return 0;
        }
    };
    let pid = child.id() as i32;
    // The child is reaped below with wait4, never through `child`.
    drop(child);
    writeln!(report, "pid {pid}").ok();
    let (status, mut maxrss_kib) = wait_for(pid, &mut report);
    // Orphans that exited before the workload and were re-parented here
    // are reaped; those still running go to oomgate with the supervisor's
    // exit, and oomgate reaps them.
    maxrss_kib = maxrss_kib.max(super::process::reap_exited_children() / 1024);
    let (kind, value) = if libc::WIFEXITED(status) {
        ("code", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        ("signal", libc::WTERMSIG(status))
    } else {
        ("code", -1)
    };
    writeln!(report, "exit {kind} {value} {maxrss_kib}").ok();
    0
}

/// Dispositions the supervisor inherited of the signals it ignores, to hand
/// back to the workload: (signal, disposition). Made before the fork, read
/// between fork and exec.
type Dispositions = Vec<(i32, libc::sighandler_t)>;

/// Signals a process sends to its process group (`kill 0`, `killpg`) and
/// whose default action would end the supervisor: SIGTERM, SIGINT, SIGHUP,
/// SIGQUIT, SIGUSR1/2, SIGALRM, job control, SIGPROF, the real-time ones.
/// They are meant for the workload, which shares the group; the
/// supervisor ignores them. Faults (SIGSEGV, ...) and SIGPIPE, which the
/// Rust runtime manages, are left alone.
fn sent_signals() -> impl Iterator<Item = i32> {
    [
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGALRM,
        libc::SIGTERM,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGIO,
        libc::SIGPWR,
    ]
    .into_iter()
    .chain(libc::SIGRTMIN()..=libc::SIGRTMAX())
}

/// Ignore [`sent_signals`]; returns what each was before (a handler
/// cannot survive exec, so anything but "ignored" was the default).
fn ignore_signals_meant_for_the_workload() -> Dispositions {
    sent_signals()
        .filter_map(|signal| {
            // SAFETY: setting a disposition takes no memory.
            let before = unsafe { libc::signal(signal, libc::SIG_IGN) };
            (before != libc::SIG_ERR).then(|| {
                let inherited = if before == libc::SIG_IGN {
                    libc::SIG_IGN
                } else {
                    libc::SIG_DFL
                };
                (signal, inherited)
            })
        })
        .collect()
}

/// Give the workload the dispositions the supervisor inherited of the
/// signals it ignored (an ignored signal stays ignored, as it would have
/// been without oomgate); the others it never touched. Async-signal-safe:
/// `signal` over memory made before the fork.
fn restore_signals(inherited: &Dispositions) {
    for &(signal, disposition) in inherited {
        // SAFETY: setting a disposition takes no memory.
        unsafe {
            libc::signal(signal, disposition);
        }
    }
}

/// The workload's environment: `NAME=value` entries separated by NUL.
fn read_environment(fd: RawFd) -> std::io::Result<Vec<(OsString, OsString)>> {
    use std::io::Read;
    use std::os::unix::ffi::OsStringExt;
    // SAFETY: oomgate gave this descriptor for this purpose only.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut block = Vec::new();
    file.read_to_end(&mut block)?;
    Ok(block
        .split(|b| *b == 0)
        .filter(|entry| !entry.is_empty())
        .filter_map(|entry| {
            let equals = entry.iter().position(|b| *b == b'=')?;
            Some((
                OsString::from_vec(entry[..equals].to_vec()),
                OsString::from_vec(entry[equals + 1..].to_vec()),
            ))
        })
        .collect())
}

/// Write `0` (this process) to `cgroup.procs`; on failure report the errno
/// on the report pipe. Async-signal-safe: no allocation.
fn join_cgroup(procs: &CString, report_fd: RawFd) {
    // SAFETY: open/write/close on a NUL-terminated path and stack buffers.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        let ok = fd >= 0 && libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
        let errno = if ok { 0 } else { *libc::__errno_location() };
        if fd >= 0 {
            libc::close(fd);
        }
        if !ok {
            let mut line = *b"cgroup 0000000000\n";
            let mut n = errno.unsigned_abs();
            for slot in line[7..17].iter_mut().rev() {
                *slot = b'0' + (n % 10) as u8;
                n /= 10;
            }
            libc::write(report_fd, line.as_ptr().cast(), line.len());
        }
    }
}

/// Wait for `pid`, reaping every other child (adopted orphans) on the way,
/// and reporting (`rss <KiB>`) each time one of them raised the largest
/// `ru_maxrss`, so that oomgate holds it even if the supervisor is killed.
/// Returns the wait status and the largest `ru_maxrss` (KiB) seen.
fn wait_for(pid: i32, report: &mut std::fs::File) -> (i32, u64) {
    let mut largest = 0u64;
    loop {
        // ECHILD: nothing left to wait for (cannot happen before `pid`).
        let Some(reaped) = super::process::wait4(-1, 0) else {
            return (-1, largest);
        };
        let maxrss = reaped.maxrss_bytes / 1024;
        if reaped.pid == pid {
            return (reaped.status, largest.max(maxrss));
        }
        if maxrss > largest {
            largest = maxrss;
            writeln!(report, "rss {largest}").ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::process::Exit;

    #[test]
    fn report_lines() {
        assert_eq!(Report::parse("pid 42"), Some(Report::Started(42)));
        assert_eq!(Report::parse("rss 2048"), Some(Report::Rss(2048)));
        assert_eq!(
            Report::parse("cgroup 0000000013"),
            Some(Report::CgroupFailed(13))
        );
        assert_eq!(
            Report::parse("exit code 3 2048"),
            Some(Report::Exited {
                exit: Exit::Code(3),
                maxrss_kib: 2048
            })
        );
        assert_eq!(
            Report::parse("exit signal 9 100"),
            Some(Report::Exited {
                exit: Exit::Signal(9),
                maxrss_kib: 100
            })
        );
        assert_eq!(
            Report::parse("spawn-error Permission denied (os error 13)"),
            Some(Report::SpawnFailed(
                "Permission denied (os error 13)".to_string()
            ))
        );
        for bad in ["", "pid", "pid x", "exit code", "exit maybe 1 2", "hello"] {
            assert_eq!(Report::parse(bad), None, "{bad:?}");
        }
    }
}
