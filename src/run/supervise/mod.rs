//! The per-instance supervisor: a small process between oomgate and the
//! workload, so that the workload's own high-water mark can be read.
//!
//! Why it exists: a process's `ru_maxrss` includes the pages it had
//! *before* it executed the workload — a child forked from oomgate
//! starts with a copy of oomgate's page tables, and `execve` folds that
//! memory's high-water mark into the process's maximum for good. Measured:
//! `true` forked from a process of 200 MiB reports `ru_maxrss` = 210 MiB.
//! So oomgate (whose memory grows with the results it holds) starts a
//! supervisor instead, about 1–2 MiB resident, and that forks the
//! workload. The run's fork server makes it (a `clone` of a small
//! process: see `forkserver`); where it cannot, oomgate executes
//! `oomgate __supervise` — its own executable run afresh. Either way,
//! [`main`] runs with the same arguments. The supervisor:
//!
//! - runs with oomgate's environment, not the case's (a case's
//!   `LD_PRELOAD` must not load into it): the workload's comes on a
//!   descriptor of its own;
//! - ignores the signals a process sends its own group (SIGTERM, SIGINT,
//!   SIGUSR1, ...: they are for the workload, which shares the group) and
//!   hands the workload the dispositions it inherited (the fork server
//!   ignores them once, and its copies start so);
//! - makes the workload join the case's memory cgroup between fork and
//!   exec, so every descendant is charged to it; the workload dies with
//!   the supervisor (`PR_SET_PDEATHSIG` SIGKILL);
//! - is the child subreaper of the workload's tree and reaps with `wait4`,
//!   so the largest `ru_maxrss` of everything it reaped is known — the
//!   workload's own includes every descendant it waited for;
//! - outlives oomgate only to end the case: when oomgate dies, however it
//!   dies, the kernel sends it [`PARENT_DIED`] (`PR_SET_PDEATHSIG`), and it
//!   kills every process of its tree and of the case cgroup (see
//!   `teardown`), then exits. oomgate's pid comes as an argument: once the
//!   signal is set, a parent that is no longer oomgate (it died before)
//!   makes the supervisor exit before the workload exists;
//! - reports on a pipe, one line each: `cgroup <errno>` when joining the
//!   cgroup failed, `pid <pid>`, `rss <KiB>` when a process it reaped set a
//!   new largest `ru_maxrss`, then `exit code|signal <n> <maxrss KiB>`,
//!   with ` stays` when it stays (below). oomgate polls that pipe, so an
//!   exit is noticed at once;
//! - stays, after the workload's exit, as long as processes the workload
//!   left behind run (they were re-parented to it): it reaps them and
//!   reports their `rss` until the last is gone — oomgate stops them
//!   meanwhile — then exits, closing the pipe. Handed to oomgate instead,
//!   they would be handed to init if oomgate died before stopping them.
//!
//! It waits for its children and for oomgate's death in one place:
//! SIGCHLD and [`PARENT_DIED`] are blocked and taken with `sigwaitinfo`,
//! so neither can arrive between a check and the wait (a flag set by a
//! handler could, and the supervisor would sleep through oomgate's death).
//! A [`PARENT_DIED`] sent while oomgate lives (oomgate's own SIGTERM to the
//! instance's group when it stops a case, or the workload's `kill 0`) is
//! for the workload and changes nothing: only a parent that is no longer
//! oomgate (`getppid`) counts. Memory matters here too: the workload is
//! forked from the supervisor and inherits its high-water mark, so the
//! waiting adds no allocation; tearing down, after the fork, may allocate.
//!
//! It writes nothing else, but a line in the instance's stderr log when
//! oomgate died; the only files it holds are the instance's log files (as
//! its stdout and stderr, for the workload to inherit).

use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

pub mod forkserver;
mod report;
mod spawn;

pub use report::Report;
use report::{say, write_number_line};

/// The hidden first argument that makes `oomgate` a supervisor.
pub const ARG: &str = "__supervise";

/// The signal the kernel sends the supervisor when oomgate dies. SIGTERM,
/// which the supervisor never acts on otherwise (a group's SIGTERM is for
/// the workload); blocked and taken with `sigwaitinfo`, never delivered.
pub const PARENT_DIED: i32 = libc::SIGTERM;

/// How long a supervisor whose oomgate died keeps killing what is left
/// before it gives up on processes stuck in the kernel.
const TEARDOWN_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The descriptor a supervisor reports on, as oomgate starts it.
pub const REPORT_FD: i32 = 3;
/// The descriptor holding the workload's environment, when there is one.
pub const ENV_FD: i32 = 4;

/// `oomgate __supervise <oomgate-pid> <report-fd> <env-fd | -> <limits | ->
/// <cgroup.procs path | -> <cwd> -- <program> <args>...`
/// Returns the supervisor's exit status.
pub fn main(args: &[OsString]) -> i32 {
    run(args, None)
}

/// [`main`]; `ignored`: the fork server already ignores the signals meant
/// for the workload (so its copy, this supervisor, does), and these are
/// the dispositions it inherited of them.
fn run(args: &[OsString], ignored: Option<&[Disposition]>) -> i32 {
    let parsed = (|| {
        let oomgate: i32 = args.first()?.to_str()?.parse().ok()?;
        let fd: RawFd = args.get(1)?.to_str()?.parse().ok()?;
        let env_fd: Option<RawFd> = match args.get(2)?.as_bytes() {
            b"-" => None,
            text => Some(std::str::from_utf8(text).ok()?.parse().ok()?),
        };
        let limits = crate::process::LaunchLimits::parse(args.get(3)?.to_str()?)?;
        let cgroup = match args.get(4)?.as_bytes() {
            b"-" => None,
            path => Some(CString::new(path).ok()?),
        };
        let cwd = args.get(5)?;
        if args.get(6)?.as_bytes() != b"--" {
            return None;
        }
        let program = args.get(7)?;
        Some((
            oomgate,
            fd,
            env_fd,
            limits,
            cgroup,
            cwd,
            program,
            &args[8..],
        ))
    })();
    let Some((oomgate, fd, env_fd, limits, cgroup, cwd, program, rest)) = parsed else {
        eprintln!("oomgate: `{ARG}` is internal to `oomgate run`");
        return 2;
    };
    // The workload gets the limits oomgate found, not the ones it raised
    // for its own sampler; and it starts in the case's directory.
    crate::process::restore_limits(&limits);
    // SAFETY: fcntl, prctl and signal take no memory; the fd was given to
    // us by oomgate for this purpose and nothing else owns it.
    let mut report = unsafe {
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        // Reaping needs SIGCHLD at its default: ignored, the kernel reaps
        // children itself and wait4 learns nothing.
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        std::fs::File::from_raw_fd(fd)
    };
    let inherited = match ignored {
        Some(ignored) => std::borrow::Cow::Borrowed(ignored),
        None => std::borrow::Cow::Owned(ignore_signals_meant_for_the_workload()),
    };
    // The case's directory, as oomgate's own launch gave it before: the
    // workload inherits it.
    if let Err(e) = std::env::set_current_dir(cwd) {
        say(
            &mut report,
            format_args!(
                "spawn-error cannot enter {}: {e}",
                std::path::Path::new(cwd).display()
            ),
        );
        return 0;
    }
    let Some(signals) = Waited::block() else {
        say(
            &mut report,
            format_args!("spawn-error cannot block SIGCHLD and SIGTERM"),
        );
        return 0;
    };
    // From here oomgate's death is a signal to act on, not a SIGKILL. It
    // may have died before the prctl took effect: then nothing is started.
    // SAFETY: prctl and getppid take no memory.
    let orphaned = unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, PARENT_DIED, 0, 0, 0) != 0 || libc::getppid() != oomgate
    };
    if orphaned {
        return 0;
    }
    // The workload's environment comes on its own descriptor, so that the
    // supervisor itself runs without the case's LD_PRELOAD and the like.
    let environment = match env_fd.map(read_environment) {
        Some(Ok(environment)) => Some(environment),
        Some(Err(e)) => {
            say(
                &mut report,
                format_args!("spawn-error cannot read the environment: {e}"),
            );
            return 0;
        }
        None => None,
    };
    let supervisor = std::process::id() as i32;
    // The case cgroup's directory, to empty if oomgate dies.
    let cgroup_procs_dir = cgroup.as_ref().and_then(|procs| {
        std::path::Path::new(std::ffi::OsStr::from_bytes(procs.as_bytes()))
            .parent()
            .map(std::path::Path::to_path_buf)
    });
    // On cgroup v1 the workload joins through `tasks`: writing `0` there
    // moves the calling thread alone, which spares the global thread-group
    // lock that `cgroup.procs` takes — and, when no migration happened in
    // the last ~25 ms, its wait for an RCU grace period (4–26 ms of every
    // case's launch, measured: docs/performance.md). Between fork and exec
    // the child has one thread, so that thread is the whole process.
    let join = cgroup.as_ref().map(|procs| {
        let tasks = cgroup_procs_dir
            .as_ref()
            .map(|dir| dir.join("tasks"))
            .filter(|tasks| tasks.exists())
            .and_then(|tasks| CString::new(tasks.into_os_string().into_vec()).ok());
        (tasks, procs.clone())
    });
    let Some(program) = spawn::Program::new(program, rest, environment) else {
        say(
            &mut report,
            format_args!("spawn-error an argument holds a NUL byte"),
        );
        return 0;
    };
    // Between fork and exec, only async-signal-safe calls (signal,
    // sigprocmask, prctl, getppid, open, write, close) on memory prepared
    // before the fork.
    let between_fork_and_exec = || {
        restore_signals(&inherited);
        default_glibc_internal_signals();
        signals.restore_mask();
        // SAFETY: prctl, getppid, getpid and _exit take no memory.
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0
                || libc::getppid() != supervisor
            {
                libc::_exit(137);
            }
        }
        if let Some((tasks, procs)) = &join {
            join_cgroup(tasks.as_ref(), procs, fd);
        }
        // Said by the child itself: a workload that kills its supervisor
        // at once (`kill -9 $PPID`) is still known to have started, not
        // taken for a supervisor that never started it.
        // SAFETY: getpid takes no memory.
        write_number_line(fd, *b"forked ", unsafe { libc::getpid() }.unsigned_abs());
    };
    let pid = match spawn::spawn(&program, &between_fork_and_exec) {
        Ok(pid) => pid,
        Err(e) => {
            say(&mut report, format_args!("spawn-error {e}"));
            return 0;
        }
    };
    say(&mut report, format_args!("pid {pid}"));
    let mut largest = 0;
    let (status, mut maxrss_kib) =
        match reap_until(Some(pid), &mut report, &signals, oomgate, &mut largest) {
            Waiting::Exited { status, maxrss_kib } => (status, maxrss_kib),
            // Cannot happen while the workload is a child: status unknown.
            Waiting::NoChildren => (-1, largest),
            Waiting::OomgateDied => return end_case(oomgate, cgroup_procs_dir.as_deref()),
        };
    // Orphans that exited before the workload and were re-parented here
    // are reaped now.
    maxrss_kib = maxrss_kib.max(crate::process::reap_exited_children(None) / 1024);
    let (kind, value) = if libc::WIFEXITED(status) {
        ("code", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        ("signal", libc::WTERMSIG(status))
    } else {
        ("code", -1)
    };
    // Those still running, left by the workload, stay here: the supervisor
    // reaps them as they exit (reporting their high-water marks) and ends
    // with the last, or ends them all if oomgate dies first — oomgate
    // stops them meanwhile (they are the case's leftovers). Were they
    // handed to oomgate, its death would hand them to init. oomgate is
    // told whether the supervisor stays: if not, it exits at once.
    let stays = children_left();
    let stays_word = if stays { " stays" } else { "" };
    say(
        &mut report,
        format_args!("exit {kind} {value} {maxrss_kib}{stays_word}"),
    );
    if !stays {
        return 0;
    }
    largest = maxrss_kib;
    match reap_until(None, &mut report, &signals, oomgate, &mut largest) {
        Waiting::OomgateDied => end_case(oomgate, cgroup_procs_dir.as_deref()),
        Waiting::Exited { .. } | Waiting::NoChildren => 0,
    }
}

/// oomgate died before the case's processes: kill them all (see
/// `teardown`), say so in the instance's stderr log, and exit.
fn end_case(oomgate: i32, cgroup_dir: Option<&std::path::Path>) -> i32 {
    let killed = super::teardown::end_everything(cgroup_dir, TEARDOWN_LIMIT);
    // A full disk must not turn this line into a panic.
    let _ = writeln!(
        std::io::stderr(),
        "[oomgate] oomgate (pid {oomgate}) ended before the case's processes did; its supervisor killed {killed} process(es)"
    );
    0
}

/// A disposition the supervisor inherited of a signal it ignores, to hand
/// back to the workload: (signal, disposition). Made before the fork, read
/// between fork and exec.
type Disposition = (i32, libc::sighandler_t);

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
fn ignore_signals_meant_for_the_workload() -> Vec<Disposition> {
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
fn restore_signals(inherited: &[Disposition]) {
    for &(signal, disposition) in inherited {
        // SAFETY: setting a disposition takes no memory.
        unsafe {
            libc::signal(signal, disposition);
        }
    }
}

/// Signals 32 and 33 (up to `SIGRTMIN` as glibc reports it) are glibc's
/// own, and its `posix_spawn` leaves them ignored in the program it
/// starts: so the fork server and every supervisor have them ignored, and
/// an exec keeps an ignored signal ignored. The workload gets them at
/// their default, as a shell's fork and exec gives them. glibc's
/// `sigaction` refuses those numbers, so the system call is made directly,
/// with an all-zero action (`SIG_DFL`, no flags, an empty mask: the same
/// bytes whatever the architecture's layout). Async-signal-safe.
fn default_glibc_internal_signals() {
    let action = [0u64; 4];
    for signal in 32..libc::SIGRTMIN() {
        // SAFETY: rt_sigaction reads one zeroed kernel sigaction (32
        // bytes, at least its size on every architecture) and writes
        // nothing (null old action); the sigset size is the kernel's, 8.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                action.as_ptr(),
                std::ptr::null_mut::<u64>(),
                8usize,
            );
        }
    }
}

/// The workload's environment: `NAME=value` entries separated by NUL.
fn read_environment(fd: RawFd) -> std::io::Result<spawn::Environment> {
    use std::io::Read;
    // SAFETY: oomgate gave this descriptor for this purpose only.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut block = Vec::new();
    file.read_to_end(&mut block)?;
    Ok(spawn::Environment::new(block))
}

/// Write `0` (this process) to `tasks` (cgroup v1, when there is one;
/// a single-threaded process) or else to `cgroup.procs`; on failure report
/// the errno on the report pipe. Async-signal-safe: no allocation.
fn join_cgroup(tasks: Option<&CString>, procs: &CString, report_fd: RawFd) {
    // SAFETY: open/write/close on NUL-terminated paths and stack buffers.
    unsafe {
        let write_zero = |path: &CString| {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            let ok = fd >= 0 && libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
            (fd, ok)
        };
        let (mut fd, mut ok) = match tasks {
            Some(tasks) => write_zero(tasks),
            None => (-1, false),
        };
        if !ok {
            if fd >= 0 {
                libc::close(fd);
            }
            (fd, ok) = write_zero(procs);
        }
        let errno = if ok { 0 } else { *libc::__errno_location() };
        if fd >= 0 {
            libc::close(fd);
        }
        if !ok {
            write_number_line(report_fd, *b"cgroup ", errno.unsigned_abs());
        }
    }
}

/// How waiting ended.
enum Waiting {
    /// The workload exited: its wait status, and the largest `ru_maxrss`
    /// (KiB) of it and of everything reaped on the way.
    Exited { status: i32, maxrss_kib: u64 },
    /// No child is left (when waiting for no workload).
    NoChildren,
    /// oomgate died first.
    OomgateDied,
}

/// Reap every child as it exits — adopted orphans included — reporting
/// (`rss <KiB>`) each time one of them raised `largest`, the largest
/// `ru_maxrss`, so that oomgate holds it even if the supervisor is killed;
/// until `workload` exits, or, without one, until no child is left; or
/// until oomgate is no longer the parent.
fn reap_until(
    workload: Option<i32>,
    report: &mut std::fs::File,
    signals: &Waited,
    oomgate: i32,
    largest: &mut u64,
) -> Waiting {
    loop {
        // Everything that has exited by now; then sleep until a child
        // exits or a signal says oomgate may have died. A SIGCHLD that
        // arrives in between stays pending, so nothing is missed.
        while let Some(reaped) = crate::process::wait4(-1, libc::WNOHANG) {
            let maxrss = reaped.maxrss_bytes / 1024;
            if Some(reaped.pid) == workload {
                return Waiting::Exited {
                    status: reaped.status,
                    maxrss_kib: (*largest).max(maxrss),
                };
            }
            if maxrss > *largest {
                *largest = maxrss;
                say(report, format_args!("rss {largest}"));
            }
        }
        if workload.is_none() && !children_left() {
            return Waiting::NoChildren;
        }
        // SAFETY: getppid takes no arguments.
        if signals.wait() == PARENT_DIED && unsafe { libc::getppid() } != oomgate {
            return Waiting::OomgateDied;
        }
    }
}

/// Whether the supervisor has a child, running or exited and not yet
/// reaped (`waitid` with `WNOWAIT` collects nothing).
fn children_left() -> bool {
    // SAFETY: waitid writes one siginfo_t, plain data.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        ) == 0
    }
}

/// SIGCHLD and [`PARENT_DIED`], blocked, and the mask the supervisor had
/// before (the workload's, restored between fork and exec).
#[derive(Clone, Copy)]
struct Waited {
    set: libc::sigset_t,
    before: libc::sigset_t,
}

impl Waited {
    /// Block SIGCHLD and [`PARENT_DIED`]; `None` if the kernel refused.
    fn block() -> Option<Self> {
        // SAFETY: sigset_t is plain data, filled in by sigemptyset and
        // sigaddset; sigprocmask reads one set and writes the other.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut before: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGCHLD);
            libc::sigaddset(&mut set, PARENT_DIED);
            (libc::sigprocmask(libc::SIG_BLOCK, &set, &mut before) == 0)
                .then_some(Waited { set, before })
        }
    }

    /// The next of the blocked signals (its number), waiting for one.
    fn wait(&self) -> i32 {
        loop {
            // SAFETY: sigwaitinfo reads the set and writes one siginfo_t.
            let signal = unsafe {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                libc::sigwaitinfo(&self.set, &mut info)
            };
            if signal > 0 {
                return signal;
            }
            // EINTR: a signal with a handler (none is installed); retry.
        }
    }

    /// Put back the mask the supervisor inherited. Async-signal-safe:
    /// called between fork and exec.
    fn restore_mask(&self) {
        // SAFETY: sigprocmask reads one set made before the fork.
        unsafe {
            libc::sigprocmask(libc::SIG_SETMASK, &self.before, std::ptr::null_mut());
        }
    }
}
