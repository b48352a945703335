//! The fork server: one small process per run that makes every instance's
//! supervisor with a `clone`, instead of an `exec` of oomgate per launch.
//!
//! Why: a supervisor must be a small process (the workload it forks
//! inherits its high-water mark: see the module above), so it cannot be
//! forked from oomgate. Executing oomgate afresh for each launch costs
//! about 1.5 ms of CPU — the dynamic loader, glibc's CPU-feature detection
//! (`cpuid`, which a virtual machine traps), the kernel's exec and teardown
//! — most of the harness's cost for a short case (docs/performance.md).
//!
//! The fork server is oomgate's executable run once per run
//! (`oomgate __forkserver`), as small as a supervisor. For each launch
//! oomgate sends it the supervisor's arguments, and its descriptors (the
//! log files, the report pipe, the environment) with `SCM_RIGHTS`, on a
//! `SOCK_SEQPACKET` socket, and does not wait for an answer. The fork
//! server makes the supervisor with `clone(CLONE_PARENT)`: a copy of the
//! small fork server that is *oomgate's* child, exactly as an executed
//! supervisor is — oomgate reaps it with `wait4` and signals its process
//! group, and the kernel sends it the parent-death signal when oomgate
//! dies. The copy puts the descriptors in place, leads a process group of
//! its own, says its pid on the report pipe (`supervisor <pid>`, its first
//! line) and runs [`super::main`] with the arguments an executed supervisor
//! would have been given. Everything oomgate learns of a launch so comes
//! on the one pipe it waits on anyway: one wake-up less per launch than an
//! answer on the socket. A `clone` refused is said there too (`refused
//! <errno>`), and a pipe that closes before the `supervisor` line means
//! nothing was started (the fork server died): either way, oomgate
//! executes the supervisor instead.
//!
//! Nothing depends on it. Where it cannot start, where `clone` is refused
//! (a seccomp filter), where a launch's arguments do not fit a message, or
//! once it died, a launch executes `oomgate __supervise` as before. It is
//! started by the thread that runs the cases' loop (its supervisors'
//! parent-death signal is tied to that thread), ends when oomgate closes
//! its socket, dies with oomgate (`PR_SET_PDEATHSIG`), and is hidden from
//! every scan of oomgate's descendants: it is no process of any case. It
//! ignores the signals meant for a workload's process group, a terminal's
//! Ctrl-C among them, as every supervisor must: its copies start so.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use crate::process;
use crate::record::Warning;

/// The hidden first argument that makes `oomgate` a fork server.
pub const ARG: &str = "__forkserver";

/// The fork server's end of its socket.
const SOCKET_FD: RawFd = 3;

/// The largest request: a launch whose arguments are longer executes its
/// supervisor (a socket's default buffer holds about 200 KiB).
const MAX_REQUEST: usize = 64 * 1024;

/// The descriptors a supervisor gets, at 1, 2, [`super::REPORT_FD`] and
/// [`super::ENV_FD`].
#[derive(Debug, Clone, Copy)]
pub struct Descriptors {
    pub stdout: RawFd,
    pub stderr: RawFd,
    pub report: RawFd,
    pub environment: RawFd,
}

impl Descriptors {
    fn sent(&self) -> [RawFd; 4] {
        [self.stdout, self.stderr, self.report, self.environment]
    }
}

/// Where, in a supervisor, each sent descriptor goes (in [`Descriptors::sent`]'s order).
const TARGETS: [RawFd; 4] = [1, 2, super::REPORT_FD, super::ENV_FD];

/// oomgate's side: the fork server's pid and socket.
#[derive(Debug)]
pub struct Forkserver {
    pid: i32,
    /// `None` once it failed: launches execute their supervisors.
    socket: Mutex<Option<OwnedFd>>,
    /// The case it was last asked to start an instance of.
    last_case: Mutex<Option<String>>,
    /// Why it was set aside, until said ([`Forkserver::take_note`]).
    note: Mutex<Option<Warning>>,
}

impl Forkserver {
    /// Start the fork server. Call it on the thread that launches or
    /// outlives every case (the cases' loop): the supervisors it makes are
    /// that thread's children.
    pub fn start() -> io::Result<Forkserver> {
        let (ours, theirs) = socket_pair()?;
        let argv: Vec<OsString> = vec![
            "oomgate-forkserver".into(),
            ARG.into(),
            process::self_pid().to_string().into(),
            process::launch_limits().describe().into(),
        ];
        let pid = process::spawn(&process::Spawn {
            path: Path::new("/proc/self/exe"),
            argv: &argv,
            env: None,
            stdout: 2,
            stderr: 2,
            inherit: &[Some((theirs.as_raw_fd(), SOCKET_FD))],
        })?;
        Ok(Forkserver {
            pid,
            socket: Mutex::new(Some(ours)),
            last_case: Mutex::new(None),
            note: Mutex::new(None),
        })
    }

    /// Its pid: hidden from scans of oomgate's descendants.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Ask for a supervisor, started with `args` (those of `oomgate
    /// __supervise`) and `descriptors`. `true`: asked; the supervisor says
    /// its pid on the report pipe, or the fork server says why it made none
    /// (or the pipe closes with neither: it died). `false`: not asked
    /// (no fork server any more, arguments too long): execute one.
    ///
    /// A fork server that was stopped (a workload of an earlier case can
    /// send it `SIGSTOP`: it runs as the same user) would leave the launch
    /// waiting for a supervisor that never comes. So its state is read
    /// first (`/proc/<pid>/stat`, a few µs); a stopped one is killed and
    /// set aside, said once ([`Forkserver::take_note`]), and this launch
    /// and every later one executes its supervisor.
    pub fn request(&self, case: &str, args: &[OsString], descriptors: Descriptors) -> bool {
        let mut request = Vec::new();
        for arg in args {
            if arg.as_bytes().contains(&0) {
                return false;
            }
            request.extend_from_slice(arg.as_bytes());
            request.push(0);
        }
        if request.len() > MAX_REQUEST {
            return false;
        }
        let mut socket = self.socket.lock().unwrap_or_else(|e| e.into_inner());
        let Some(fd) = socket.as_ref().map(AsRawFd::as_raw_fd) else {
            return false;
        };
        let mut last_case = self.last_case.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(state @ ('T' | 't')) = process_state(self.pid) {
            // Killed (it leads a process group of its own), so that it can
            // make no supervisor later; collected when dropped.
            process::signal_group(self.pid, libc::SIGKILL);
            *socket = None;
            *self.note.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(Warning::ForkserverSetAside {
                    pid: self.pid,
                    traced: state == 't',
                    after: last_case.clone(),
                });
            return false;
        }
        *last_case = Some(case.to_string());
        if send(fd, &request, &descriptors.sent()).is_err() {
            // Gone (killed from outside): nothing was received.
            *socket = None;
            return false;
        }
        true
    }

    /// Why it was set aside, once: the caller says it.
    pub fn take_note(&self) -> Option<Warning> {
        self.note.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Stop asking it (it made no supervisor when asked: `clone` refused,
    /// or it died): later launches execute their supervisors. Closing the
    /// socket ends it, if it still runs.
    pub fn stop_using(&self) {
        *self.socket.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

impl Drop for Forkserver {
    /// Close the socket: the fork server exits. Collect it, unless it
    /// was collected already (killed from outside, and reaped with a
    /// case's orphans where oomgate's children cannot be listed).
    fn drop(&mut self) {
        let socket = self.socket.get_mut().unwrap_or_else(|e| e.into_inner());
        drop(socket.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes one local.
            let waited = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            let interrupted =
                waited < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted;
            if waited != 0 && !interrupted {
                // Collected now, or no longer oomgate's child to collect.
                return;
            }
            if std::time::Instant::now() >= deadline {
                process::signal_group(self.pid, libc::SIGKILL);
                process::wait_for_exit(self.pid, Duration::from_secs(2));
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// The state letter of process `pid` (`R`, `S`, `T` stopped, `t`
/// traced, `Z`…), from `/proc/<pid>/stat`; `None` when it cannot be read.
fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    crate::measure::procfs::parse_stat(&stat).map(|entry| char::from(entry.state))
}

/// `oomgate __forkserver <oomgate-pid> <limits | ->`, its socket at
/// `SOCKET_FD`. Returns its exit status; a supervisor it makes exits
/// with the supervisor's own.
pub fn main(args: &[OsString]) -> i32 {
    let parsed = (|| {
        let oomgate: i32 = args.first()?.to_str()?.parse().ok()?;
        let limits = process::LaunchLimits::parse(args.get(1)?.to_str()?)?;
        Some((oomgate, limits))
    })();
    let Some((oomgate, limits)) = parsed else {
        eprintln!("oomgate: `{ARG}` is internal to `oomgate run`");
        return 2;
    };
    // Every supervisor starts with the limits a workload gets.
    process::restore_limits(&limits);
    // SAFETY: prctl, getppid and fcntl take no memory.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0
            || libc::getppid() != oomgate
        {
            return 0;
        }
        libc::fcntl(SOCKET_FD, libc::F_SETFD, libc::FD_CLOEXEC);
    }
    // Ignored here once rather than in every supervisor, which inherits
    // them ignored, with what to give the workload back.
    let inherited = super::ignore_signals_meant_for_the_workload();
    // One buffer for every request: the fork server's memory, which each
    // supervisor and workload starts from, stays what it is.
    let mut buffer = vec![0u8; MAX_REQUEST];
    loop {
        let request = match receive(SOCKET_FD, &mut buffer) {
            Ok(Some(request)) => request,
            // oomgate closed its end, or the socket failed: done.
            Ok(None) | Err(_) => return 0,
        };
        // A request that is not one (cut short, or not four descriptors)
        // makes nothing; its descriptors close, and with them the pipe.
        if let Ok(descriptors) = <[OwnedFd; 4]>::try_from(request.fds) {
            if !request.cut {
                let request = &buffer[..request.length];
                if let Err(errno) = fork_supervisor(request, &descriptors, &inherited) {
                    super::write_number_line(
                        descriptors[2].as_raw_fd(),
                        *b"refused ",
                        errno.unsigned_abs(),
                    );
                }
            }
        }
    }
}

/// Make a supervisor: `clone` with `CLONE_PARENT` (oomgate's child); the
/// copy runs [`super::main`] and never returns here. The errno of a
/// `clone` refused.
fn fork_supervisor(
    request: &[u8],
    descriptors: &[OwnedFd; 4],
    inherited: &[super::Disposition],
) -> Result<(), i32> {
    let args: Vec<OsString> = request
        .split(|b| *b == 0)
        .map(|arg| OsString::from_vec(arg.to_vec()))
        .collect();
    // The request ends with a NUL: the last piece is empty.
    let args = &args[..args.len().saturating_sub(1)];
    // SAFETY: a raw clone without CLONE_VM is a fork: the child runs on a
    // copy of this single-threaded process's memory, and no lock is held.
    // Its parent is oomgate; the signal it ends with is this process's
    // own (SIGCHLD).
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_PARENT | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    match pid {
        0 => {
            let code = become_supervisor(args, descriptors, inherited);
            // SAFETY: _exit ends the copy without running anything of the
            // fork server's (destructors, buffers: the copy has none of its
            // own to flush).
            unsafe { libc::_exit(code) }
        }
        pid if pid > 0 => Ok(()),
        _ => Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)),
    }
}

/// In the copy: the socket closed, the descriptors at their places, a
/// process group of its own, then the supervisor.
fn become_supervisor(
    args: &[OsString],
    descriptors: &[OwnedFd; 4],
    inherited: &[super::Disposition],
) -> i32 {
    // SAFETY: close, fcntl, dup2 and setpgid take no memory; the sent
    // descriptors are this process's own, moved above every target first
    // so that no dup2 overwrites one still to be placed.
    unsafe {
        libc::close(SOCKET_FD);
        let mut moved = [-1; 4];
        for (slot, fd) in moved.iter_mut().zip(descriptors) {
            *slot = libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 16);
            if *slot < 0 {
                return 2;
            }
        }
        // The copy's own handles of the received descriptors (the fork
        // server closes its handles itself): closed, so that the report
        // pipe closes when the supervisor exits. Never dropped: the copy
        // ends with _exit.
        for fd in descriptors {
            libc::close(fd.as_raw_fd());
        }
        for (from, to) in moved.into_iter().zip(TARGETS) {
            if libc::dup2(from, to) < 0 {
                return 2;
            }
            libc::close(from);
        }
        libc::setpgid(0, 0);
        // The group exists before oomgate learns the pid to signal it by.
        super::write_number_line(
            super::REPORT_FD,
            *b"supervisor ",
            libc::getpid().unsigned_abs(),
        );
    }
    super::run(args, Some(inherited))
}

/// A connected pair of sequenced-packet sockets, both ends close-on-exec.
fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into the array.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just created and are owned here only.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Room for the control message of four descriptors, aligned as
/// `cmsghdr` must be.
type Control = [u64; 8];

/// One message: `payload`, with `fds` attached (`SCM_RIGHTS`, at most
/// four).
fn send(socket: RawFd, payload: &[u8], fds: &[RawFd; 4]) -> io::Result<()> {
    let mut control: Control = [0; 8];
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr().cast_mut().cast(),
        iov_len: payload.len(),
    };
    // SAFETY: msghdr and cmsghdr are plain data; the control buffer is
    // large and aligned enough for four descriptors (CMSG_SPACE(16) = 32
    // bytes), and every pointer outlives the sendmsg.
    unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        let bytes = std::mem::size_of_val(fds) as libc::c_uint;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = libc::CMSG_SPACE(bytes) as _;
        let header = libc::CMSG_FIRSTHDR(&message);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(bytes) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr().cast::<u8>(),
            libc::CMSG_DATA(header),
            bytes as usize,
        );
        loop {
            let sent = libc::sendmsg(socket, &message, libc::MSG_NOSIGNAL);
            if sent >= 0 {
                return Ok(());
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

/// A message received.
struct Message {
    /// Its length in the buffer.
    length: usize,
    /// The descriptors it carried (close-on-exec).
    fds: Vec<OwnedFd>,
    /// It did not fit the buffer, or its descriptors the control space.
    cut: bool,
}

/// One message into `buffer`; `None` once the other end closed.
fn receive(socket: RawFd, buffer: &mut [u8]) -> io::Result<Option<Message>> {
    let mut control: Control = [0; 8];
    let mut iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    // SAFETY: as in `send`; the kernel writes at most msg_controllen bytes
    // of control data, and each descriptor it passed is taken exactly once.
    unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = std::mem::size_of::<Control>() as _;
        let length = loop {
            let length = libc::recvmsg(socket, &mut message, libc::MSG_CMSG_CLOEXEC);
            if length >= 0 {
                break length as usize;
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        };
        let mut fds = Vec::new();
        let mut header = libc::CMSG_FIRSTHDR(&message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(header);
                let bytes = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let fd = data.cast::<RawFd>().add(i).read_unaligned();
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            header = libc::CMSG_NXTHDR(&message, header);
        }
        if length == 0 && fds.is_empty() {
            return Ok(None);
        }
        Ok(Some(Message {
            length,
            fds,
            cut: message.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0,
        }))
    }
}
