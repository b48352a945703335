//! Process-group and process-tree control: the system calls std does not
//! wrap, for the runner, its supervisor and the environment's commands.
//!
//! Every instance is launched as the leader of a new process group, so one
//! `killpg` reaches it and everything it forks. Processes that leave the
//! group (`setsid()`, daemons) are still oomgate's descendants because
//! oomgate marks itself a child subreaper, and they are signalled through
//! the process tree. Only descendants of oomgate are ever signalled: a
//! process oomgate did not start is never touched.

pub use crate::vocabulary::{Exit, signal_name};
use std::io;

use crate::measure::procfs::Scanner;

/// oomgate's own pid.
pub fn self_pid() -> i32 {
    // std::process::id() is a u32 holding a pid_t, always below i32::MAX.
    i32::try_from(std::process::id()).unwrap_or(i32::MAX)
}

/// Make orphaned descendants re-parent to oomgate rather than init, so
/// they stay in the case's tree and can be measured and stopped.
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes one integer argument; no memory
    // is passed to the kernel.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Send `signal` to a process group. A group that no longer exists is not
/// an error.
pub fn signal_group(pgid: i32, signal: i32) {
    if pgid <= 1 {
        return; // never the caller's own group (0) or init's
    }
    // SAFETY: killpg has no memory arguments; errors are reported via errno
    // and ESRCH (already gone) is expected.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

/// Send `signal` to every live descendant of oomgate, except members of
/// `skip_groups` (already signalled through their group: a second SIGTERM
/// makes many programs skip their graceful shutdown). Returns how many
/// processes were signalled.
pub fn signal_descendants(scanner: &mut Scanner, signal: i32, skip_groups: &[i32]) -> usize {
    let Ok(tree) = scanner.all_descendants_of(self_pid()) else {
        return 0;
    };
    let mut count = 0;
    for process in tree.alive().filter(|p| !skip_groups.contains(&p.pgid)) {
        // SAFETY: kill has no memory arguments. The pid was a descendant a
        // moment ago; a pid is only reused after its parent reaped it, and
        // the parent is oomgate or one of its descendants.
        if unsafe { libc::kill(process.pid, signal) } == 0 {
            count += 1;
        }
    }
    count
}

/// Reap descendants that were re-parented to oomgate and have exited.
/// `exclude` are pids whose exit status an instance collects itself.
/// Returns the largest `ru_maxrss` (bytes) among the reaped.
pub fn reap_adopted(scanner: &mut Scanner, exclude: &[i32]) -> u64 {
    let me = self_pid();
    let Ok(tree) = scanner.descendants_of(me) else {
        return 0;
    };
    let zombies: Vec<i32> = tree
        .members()
        .iter()
        .filter(|p| p.ppid == me && p.is_zombie() && !exclude.contains(&p.pid))
        .map(|p| p.pid)
        .collect();
    reap(zombies.into_iter())
}

/// Reap these exited children of oomgate (none of them an instance's
/// supervisor); the largest `ru_maxrss` among them, in bytes.
pub fn reap(pids: impl Iterator<Item = i32>) -> u64 {
    pids.filter_map(|pid| wait(pid, false))
        .map(|(_, maxrss)| maxrss)
        .max()
        .unwrap_or(0)
}

/// `wait4` for one child: how it ended and its `ru_maxrss` in bytes (its
/// own high-water mark, or a waited-for descendant's if larger). `None`
/// while it runs (with `block` false) or when it is not a child.
pub fn wait(pid: i32, block: bool) -> Option<(Exit, u64)> {
    let flags = if block { 0 } else { libc::WNOHANG };
    wait4(pid, flags).map(|reaped| (Exit::from_wait_status(reaped.status), reaped.maxrss_bytes))
}

/// A child `wait4` collected.
#[derive(Debug, Clone, Copy)]
pub struct Reaped {
    pub pid: i32,
    /// The raw wait status.
    pub status: i32,
    /// Its `ru_maxrss` in bytes: its own high-water mark, or a waited-for
    /// descendant's if larger.
    pub maxrss_bytes: u64,
}

/// `wait4(pid, flags)` (`pid` -1: any child), retried when a signal
/// interrupts it. `None`: nothing collected (still running with
/// `WNOHANG`, or no such child).
pub fn wait4(pid: i32, flags: i32) -> Option<Reaped> {
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data the kernel fills in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 writes to the two locals passed.
        let reaped = unsafe { libc::wait4(pid, &mut status, flags, &mut usage) };
        if reaped > 0 {
            let kib = u64::try_from(usage.ru_maxrss).unwrap_or(0);
            return Some(Reaped {
                pid: reaped,
                status,
                maxrss_bytes: kib.saturating_mul(1024),
            });
        }
        if reaped < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return None;
    }
}

/// oomgate's children now, running or exited (`/proc/self/task/<tid>/children`
/// of each of its threads); `None` where the kernel does not list them.
fn children() -> Option<Vec<i32>> {
    let mut pids = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let children = std::fs::read_to_string(task.ok()?.path().join("children")).ok()?;
        pids.extend(
            children
                .split_ascii_whitespace()
                .filter_map(|pid| pid.parse::<i32>().ok()),
        );
    }
    Some(pids)
}

/// Whether every child of oomgate but `except` (its fork server) has
/// exited (zombies waiting to be reaped are fine). `false` when that cannot
/// be read (kernels without `/proc/<pid>/task/<tid>/children`): the caller
/// then scans.
pub fn no_live_children(except: Option<i32>) -> bool {
    let Some(children) = children() else {
        return false;
    };
    children
        .into_iter()
        .filter(|pid| Some(*pid) != except)
        .all(|pid| {
            !std::fs::read(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| crate::measure::procfs::parse_stat(&stat))
                // Gone between the two reads: reaped, so not alive.
                .is_some_and(|entry| entry.is_alive())
        })
}

/// Kill what is left of process group `group` (a finished environment
/// probe's) and reap the members that were or became oomgate's children,
/// for at most `limit`. Only that group is touched: no other child of
/// oomgate is signalled or reaped.
pub fn end_group(group: i32, limit: std::time::Duration) {
    if group <= 1 {
        return;
    }
    let deadline = std::time::Instant::now() + limit;
    loop {
        loop {
            let mut status = 0;
            // SAFETY: waitpid on the group's children; status is a local.
            if unsafe { libc::waitpid(-group, &mut status, libc::WNOHANG) } <= 0 {
                break;
            }
        }
        // SAFETY: killpg takes no memory; ESRCH once the group is empty.
        let members_left = unsafe { libc::killpg(group, libc::SIGKILL) } == 0;
        if !members_left || std::time::Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Reap every child of oomgate that has exited, without waiting; the
/// largest `ru_maxrss` among them, in bytes. Only for moments when no
/// instance's supervisor runs, whose status its instance collects.
///
/// `except` (oomgate's fork server) is left to its owner: killed from
/// outside, its zombie keeps its pid, which scans hide, from being given
/// to a process of a later case; and its high-water mark, oomgate's own
/// from before its exec, is no case's. Where oomgate's children cannot be
/// listed, every exited child is reaped and `except`'s figure left out.
pub fn reap_exited_children(except: Option<i32>) -> u64 {
    // Each exited child is looked at first without being reaped: the
    // usual answer, none, takes one call, where listing the children
    // takes a dozen. Only once `except` is found exited are they listed.
    let mut largest = 0;
    while let Some(pid) = exited_child() {
        if Some(pid) == except {
            return largest.max(reap_listed_children(except));
        }
        let Some(reaped) = wait4(pid, libc::WNOHANG) else {
            break;
        };
        largest = largest.max(reaped.maxrss_bytes);
    }
    largest
}

/// An exited child, still unreaped (`waitid` with `WNOWAIT`); `None` when
/// none has exited.
fn exited_child() -> Option<i32> {
    // SAFETY: siginfo_t is plain data the kernel fills in.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes one siginfo_t to the local passed.
    let rc = unsafe {
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: after a successful waitid the pid field is set (0: none).
    let pid = unsafe { info.si_pid() };
    (rc == 0 && pid > 0).then_some(pid)
}

/// [`reap_exited_children`] by the list of oomgate's children.
fn reap_listed_children(except: Option<i32>) -> u64 {
    let reaped: Vec<Reaped> = match except.and_then(|except| Some((except, children()?))) {
        Some((except, children)) => children
            .into_iter()
            .filter(|pid| *pid != except)
            .filter_map(|pid| wait4(pid, libc::WNOHANG))
            .collect(),
        None => std::iter::from_fn(|| wait4(-1, libc::WNOHANG))
            .filter(|reaped| Some(reaped.pid) != except)
            .collect(),
    };
    reaped
        .iter()
        .map(|reaped| reaped.maxrss_bytes)
        .max()
        .unwrap_or(0)
}

/// Collect a child that was told to exit, waiting at most `limit`: one
/// stuck in the kernel is left rather than waited for forever.
pub fn wait_for_exit(pid: i32, limit: std::time::Duration) -> Option<(Exit, u64)> {
    if let Some(done) = wait(pid, false) {
        return Some(done);
    }
    let deadline = std::time::Instant::now() + limit;
    // A pidfd turns readable the moment the child is a zombie: one wake-up,
    // when it happens. Where pidfd_open is refused (before Linux 5.3, a
    // seccomp filter), naps: a process that just closed its descriptors is
    // microseconds from being a zombie, so they start short.
    let pidfd = pidfd_open(pid);
    let mut nap = std::time::Duration::from_micros(20);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match &pidfd {
            Some(fd) => {
                use std::os::fd::AsRawFd;
                wait_readable([fd.as_raw_fd()], left);
            }
            None => {
                std::thread::sleep(nap.min(left));
                nap = (nap * 2).min(std::time::Duration::from_millis(5));
            }
        }
        if let Some(done) = wait(pid, false) {
            return Some(done);
        }
        if left.is_zero() {
            return None;
        }
    }
}

/// A pidfd of `pid` (which must be an unreaped child, so that its pid
/// cannot name another process), or `None` where the kernel refuses one.
fn pidfd_open(pid: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags, no memory; the descriptor
    // it returns is new and owned by nothing else.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: `fd` was just returned by the kernel, open and unowned.
    Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Wait until one of `fds` is readable (or closed), `limit` passes, or a
/// signal arrives. The limit is rounded up to a millisecond: rounded down,
/// a caller waiting for a deadline would wake early and spin until it.
pub fn wait_readable(
    fds: impl IntoIterator<Item = std::os::fd::RawFd>,
    limit: std::time::Duration,
) -> bool {
    let mut pollfds: Vec<libc::pollfd> = fds
        .into_iter()
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let millis = i32::try_from(limit.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
    // SAFETY: poll reads and writes the pollfd array it is given, of the
    // length given.
    let ready = unsafe { libc::poll(pollfds.as_mut_ptr(), pollfds.len() as libc::nfds_t, millis) };
    ready != 0
}

/// The open-file limit oomgate found at start, before raising its own: the
/// sampler keeps a file open per process of large trees, but workloads get
/// the limit they would have had without oomgate (some programs still use
/// `select()`, which breaks above 1024 descriptors).
static ORIGINAL_NOFILE: std::sync::OnceLock<libc::rlimit> = std::sync::OnceLock::new();

/// oomgate's soft open-file limit now.
pub fn open_file_limit() -> u64 {
    // SAFETY: getrlimit writes one local struct.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        limit.rlim_cur
    }
}

/// Raise oomgate's soft open-file limit to the hard limit. Returns the
/// soft limit now in force.
pub fn raise_open_file_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit read and write one local struct.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        let original = *ORIGINAL_NOFILE.get_or_init(|| limit);
        let raised = libc::rlimit {
            rlim_cur: original.rlim_max,
            rlim_max: original.rlim_max,
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
            raised.rlim_cur
        } else {
            limit.rlim_cur
        }
    }
}

/// The limits to restore in a launched process (copied before the fork).
#[derive(Debug, Clone, Copy)]
pub struct LaunchLimits {
    nofile: Option<libc::rlimit>,
}

pub fn launch_limits() -> LaunchLimits {
    LaunchLimits {
        nofile: ORIGINAL_NOFILE.get().copied(),
    }
}

impl LaunchLimits {
    /// `nofile=1024:1048576`, or `-` for nothing to restore: how a
    /// supervisor is told the limits to put back.
    pub fn describe(&self) -> String {
        match &self.nofile {
            Some(nofile) => format!("nofile={}:{}", nofile.rlim_cur, nofile.rlim_max),
            None => "-".to_string(),
        }
    }

    /// What [`LaunchLimits::describe`] wrote; `None` if it is not that.
    pub fn parse(text: &str) -> Option<Self> {
        if text == "-" {
            return Some(LaunchLimits { nofile: None });
        }
        let (soft, hard) = text.strip_prefix("nofile=")?.split_once(':')?;
        Some(LaunchLimits {
            nofile: Some(libc::rlimit {
                rlim_cur: soft.parse().ok()?,
                rlim_max: hard.parse().ok()?,
            }),
        })
    }
}

/// A process to start with `posix_spawn`.
pub struct Spawn<'a> {
    pub path: &'a std::path::Path,
    /// `argv[0]` first.
    pub argv: &'a [std::ffi::OsString],
    /// `NAME=value` entries; `None`: oomgate's own environment.
    pub env: Option<&'a [std::ffi::OsString]>,
    pub stdout: i32,
    pub stderr: i32,
    /// Descriptors the child gets at fixed numbers (above 2), `(from, to)`.
    pub inherit: &'a [Option<(i32, i32)>],
}

/// Start a process in a new process group with `posix_spawn`: stdin from
/// `/dev/null`, stdout and stderr and `inherit` as given, and no other
/// descriptor of oomgate's (it opens all of its own close-on-exec, which
/// exec closes), an empty signal mask and SIGPIPE at its default.
/// Returns its pid.
///
/// Not `std::process::Command`: what a supervisor needs (descriptors at
/// fixed numbers, no close-on-exec race with other threads' launches)
/// takes a `pre_exec` closure there, which makes std `fork` oomgate —
/// copying its page tables for every case, a cost that grows with the
/// results it holds (measured: docs/performance.md). `posix_spawn` starts
/// the child without copying them (glibc and musl use `CLONE_VFORK`).
pub fn spawn(spawn: &Spawn<'_>) -> io::Result<i32> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c_string = |bytes: &[u8]| {
        CString::new(bytes).map_err(|_| io::Error::other("an argument holds a NUL byte"))
    };
    let path = c_string(spawn.path.as_os_str().as_bytes())?;
    let argv: Vec<CString> = spawn
        .argv
        .iter()
        .map(|arg| c_string(arg.as_bytes()))
        .collect::<io::Result<_>>()?;
    let env: Option<Vec<CString>> = spawn
        .env
        .map(|env| env.iter().map(|entry| c_string(entry.as_bytes())).collect())
        .transpose()?;
    let pointers = |strings: &[CString]| -> Vec<*mut libc::c_char> {
        strings
            .iter()
            .map(|s| s.as_ptr().cast_mut())
            .chain(std::iter::once(std::ptr::null_mut()))
            .collect()
    };
    let argv_pointers = pointers(&argv);
    let env_pointers = env.as_deref().map(pointers);
    // The inherited descriptors are moved out of the way of their targets
    // first (`dup2` onto a descriptor another action still reads from
    // would clobber it), above every target, close-on-exec.
    let highest = spawn
        .inherit
        .iter()
        .flatten()
        .map(|&(_, to)| to)
        .max()
        .unwrap_or(2);
    let mut moved: Vec<(std::os::fd::OwnedFd, i32)> = Vec::new();
    for &(from, to) in spawn.inherit.iter().flatten() {
        // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor or -1.
        let fd = unsafe { libc::fcntl(from, libc::F_DUPFD_CLOEXEC, highest + 1) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the descriptor was just made and is owned here only.
        moved.push((unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }, to));
    }
    let check = |code: libc::c_int| match code {
        0 => Ok(()),
        code => Err(io::Error::from_raw_os_error(code)),
    };
    // SAFETY: the attribute and action objects are initialised before use
    // and destroyed on every path; every pointer handed to posix_spawn
    // (path, argv, envp, /dev/null) outlives the call.
    unsafe {
        let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        check(libc::posix_spawn_file_actions_init(&mut actions))?;
        if let Err(e) = check(libc::posix_spawnattr_init(&mut attr)) {
            libc::posix_spawn_file_actions_destroy(&mut actions);
            return Err(e);
        }
        let result = (|| {
            check(libc::posix_spawn_file_actions_addopen(
                &mut actions,
                0,
                c"/dev/null".as_ptr(),
                libc::O_RDONLY,
                0,
            ))?;
            check(libc::posix_spawn_file_actions_adddup2(
                &mut actions,
                spawn.stdout,
                1,
            ))?;
            check(libc::posix_spawn_file_actions_adddup2(
                &mut actions,
                spawn.stderr,
                2,
            ))?;
            for (fd, to) in &moved {
                use std::os::fd::AsRawFd;
                check(libc::posix_spawn_file_actions_adddup2(
                    &mut actions,
                    fd.as_raw_fd(),
                    *to,
                ))?;
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            let mut default: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut default);
            libc::sigaddset(&mut default, libc::SIGPIPE);
            check(libc::posix_spawnattr_setsigmask(&mut attr, &empty))?;
            check(libc::posix_spawnattr_setsigdefault(&mut attr, &default))?;
            check(libc::posix_spawnattr_setpgroup(&mut attr, 0))?;
            let flags = libc::POSIX_SPAWN_SETPGROUP
                | libc::POSIX_SPAWN_SETSIGMASK
                | libc::POSIX_SPAWN_SETSIGDEF;
            check(libc::posix_spawnattr_setflags(
                &mut attr,
                flags as libc::c_short,
            ))?;
            let mut pid: libc::pid_t = 0;
            let envp = match &env_pointers {
                Some(pointers) => pointers.as_ptr(),
                None => environ().cast_const(),
            };
            check(libc::posix_spawn(
                &mut pid,
                path.as_ptr(),
                &actions,
                &attr,
                argv_pointers.as_ptr(),
                envp,
            ))?;
            Ok(pid)
        })();
        libc::posix_spawn_file_actions_destroy(&mut actions);
        libc::posix_spawnattr_destroy(&mut attr);
        result
    }
}

/// The process's environment as the C library holds it.
fn environ() -> *mut *mut libc::c_char {
    unsafe extern "C" {
        static mut environ: *mut *mut libc::c_char;
    }
    // SAFETY: reading the pointer; oomgate never changes its environment
    // while cases run.
    unsafe { environ }
}

/// Put back the limits oomgate found. Async-signal-safe (setrlimit only):
/// called between fork and exec.
pub fn restore_limits(limits: &LaunchLimits) {
    if let Some(nofile) = &limits.nofile {
        // SAFETY: setrlimit reads one struct; a failure leaves the raised
        // limit, which is harmless.
        unsafe {
            libc::setrlimit(libc::RLIMIT_NOFILE, nofile);
        }
    }
}

/// Ask the kernel to SIGKILL the calling process when its parent thread
/// exits. Called in a freshly forked child before exec: in the instance's
/// supervisor, which replaces it once running with a signal it acts on
/// (killing the whole case: see `supervise` and `teardown`), and in the
/// workload the supervisor forks, so that it dies with its supervisor.
///
/// Must only do async-signal-safe work: it runs between fork and exec.
pub fn die_with_parent(parent: i32) -> io::Result<()> {
    // SAFETY: prctl and getppid are async-signal-safe system calls with no
    // memory arguments.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        // The parent may have died before the prctl took effect.
        if libc::getppid() != parent {
            libc::_exit(137);
        }
    }
    Ok(())
}

/// oomgate's own peak RSS in bytes, and its CPU time (user + system) in
/// seconds: what measuring costs, workloads not included. One
/// `getrusage` for both.
pub fn own_cost() -> (Option<u64>, Option<f64>) {
    let Some(usage) = own_usage() else {
        return (None, None);
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    // Linux reports ru_maxrss in KiB.
    let max_rss = u64::try_from(usage.ru_maxrss).ok().map(|kib| kib * 1024);
    (
        max_rss,
        Some(seconds(usage.ru_utime) + seconds(usage.ru_stime)),
    )
}

fn own_usage() -> Option<libc::rusage> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage struct to the pointer we pass,
    // which points to properly sized, zero-initialised memory.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    // SAFETY: on success the struct is initialised.
    (rc == 0).then(|| unsafe { usage.assume_init() })
}
