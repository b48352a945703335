//! Starting the workload: `fork`, the steps oomgate needs between fork
//! and exec, then `execve` — what std's `Command` with a `pre_exec`
//! closure does, without its set-up: a sorted map of the environment and a
//! string per variable, built and freed on every launch. The supervisor is
//! a fresh copy of the fork server each time (or a fresh exec of
//! oomgate), so every page that set-up writes is a page fault, and the
//! code it runs is more pages to map (docs/performance.md). Here the environment stays the block oomgate
//! sent, pointed into.

use std::ffi::{CStr, CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// The workload's environment: `NAME=value` entries, each ending in NUL,
/// as oomgate sends them on the environment descriptor.
pub(super) struct Environment {
    block: Vec<u8>,
}

impl Environment {
    pub(super) fn new(mut block: Vec<u8>) -> Self {
        if block.last().is_some_and(|b| *b != 0) {
            block.push(0);
        }
        Environment { block }
    }

    /// The entries as `execve` takes them: sorted by name, the last of a
    /// repeated name kept, entries without `=` left out (as std's
    /// `Command::envs` would have had them).
    fn pointers(&self) -> Vec<*const libc::c_char> {
        let mut entries: Vec<&[u8]> = Vec::new();
        let mut start = 0;
        for (at, byte) in self.block.iter().enumerate() {
            if *byte == 0 {
                let entry = &self.block[start..=at];
                if entry.len() > 1 && entry.contains(&b'=') {
                    entries.push(entry);
                }
                start = at + 1;
            }
        }
        let name = |entry: &[u8]| -> usize { entry.iter().position(|b| *b == b'=').unwrap_or(0) };
        // Stable: among entries of one name, the last stays last.
        entries.sort_by(|a, b| a[..name(a)].cmp(&b[..name(b)]));
        let mut kept: Vec<&[u8]> = Vec::with_capacity(entries.len());
        for entry in entries {
            match kept.last_mut() {
                Some(last) if last[..name(last)] == entry[..name(entry)] => *last = entry,
                _ => kept.push(entry),
            }
        }
        kept.iter()
            .map(|entry| entry.as_ptr().cast())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    }
}

/// What to execute: the program's path and its arguments (the path as
/// `argv[0]`), and its environment (`None`: the supervisor's own).
pub(super) struct Program {
    path: CString,
    argv: Vec<CString>,
    environment: Option<Environment>,
}

impl Program {
    /// `None` when an argument holds a NUL byte (it came NUL-separated, so
    /// it cannot).
    pub(super) fn new(
        program: &OsString,
        args: &[OsString],
        environment: Option<Environment>,
    ) -> Option<Program> {
        let mut path = program.as_bytes().to_vec();
        // A name without a slash was found on an empty `PATH` entry: the
        // directory the workload runs in.
        if !path.contains(&b'/') {
            path.splice(0..0, *b"./");
        }
        let path = CString::new(path).ok()?;
        let argv = std::iter::once(program)
            .chain(args)
            .map(|arg| CString::new(arg.as_bytes()).ok())
            .collect::<Option<Vec<_>>>()?;
        Some(Program {
            path,
            argv,
            environment,
        })
    }
}

/// Fork; in the child, SIGPIPE back to its default (Rust programs ignore
/// it), then `between_fork_and_exec` (which must be async-signal-safe and
/// may `_exit`), then the program. The child's pid once it executed the
/// program (or ended before: killed, or by `between_fork_and_exec`); the
/// reason it could not execute it, the child reaped.
pub(super) fn spawn(program: &Program, between_fork_and_exec: &dyn Fn()) -> io::Result<i32> {
    // Everything the child reads is made before the fork.
    let argv: Vec<*const libc::c_char> = program
        .argv
        .iter()
        .map(|arg| arg.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp = program.environment.as_ref().map(Environment::pointers);
    let path: &CStr = &program.path;
    let (said, say) = pipe()?;
    // SAFETY: the supervisor is single-threaded; the child runs only
    // async-signal-safe calls (signal, the caller's steps, execve, write,
    // _exit) over memory made before the fork, and never returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: as above.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            between_fork_and_exec();
            match &envp {
                Some(envp) => libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()),
                None => libc::execv(path.as_ptr(), argv.as_ptr()),
            };
            let errno = *libc::__errno_location();
            libc::write(say.as_raw_fd(), errno.to_ne_bytes().as_ptr().cast(), 4);
            libc::_exit(127)
        }
    }
    drop(say);
    let mut word = [0u8; 4];
    let mut got = 0;
    while got < word.len() {
        // SAFETY: read into a local buffer from a descriptor owned here.
        let read = unsafe {
            libc::read(
                said.as_raw_fd(),
                word[got..].as_mut_ptr().cast(),
                word.len() - got,
            )
        };
        match read {
            0 => break,
            n if n > 0 => got += n as usize,
            _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            _ => break,
        }
    }
    if got < word.len() {
        // The pipe closed on exec (or the child ended before it): started.
        return Ok(pid);
    }
    let mut status = 0;
    // SAFETY: waitpid writes one local; the child is ours and exiting.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    Err(io::Error::from_raw_os_error(i32::from_ne_bytes(word)))
}

/// A pipe, both ends close-on-exec: (read, write).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just made and are owned here only.
    Ok(unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(block: &[u8]) -> Vec<String> {
        let environment = Environment::new(block.to_vec());
        let pointers = environment.pointers();
        assert!(pointers.last().expect("terminated").is_null());
        pointers[..pointers.len() - 1]
            .iter()
            // SAFETY: each points at a NUL-terminated entry of the block.
            .map(|p| unsafe { CStr::from_ptr(*p) }.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_environment_is_sorted_with_the_last_of_a_name_kept() {
        assert_eq!(
            entries(b"PATH=/bin\0A=1\0B=\0PATH=/usr/bin\0junk\0\0A=2\0Z=last"),
            ["A=2", "B=", "PATH=/usr/bin", "Z=last"]
        );
        assert!(entries(b"").is_empty());
    }

    #[test]
    fn a_program_that_cannot_be_executed_is_an_error_and_leaves_no_child() {
        let program = Program::new(
            &OsString::from("/nonexistent/program"),
            &[],
            Some(Environment::new(b"A=1\0".to_vec())),
        )
        .expect("program");
        let error = spawn(&program, &|| {}).expect_err("not executed");
        assert_eq!(error.raw_os_error(), Some(libc::ENOENT));
        assert_eq!(error.to_string(), "No such file or directory (os error 2)");
    }

    #[test]
    fn the_program_runs_with_its_arguments_and_environment() {
        let out = tempfile::tempdir().expect("tempdir");
        let file = out.path().join("said");
        let program = Program::new(
            &OsString::from("/bin/sh"),
            &[
                "-c".into(),
                "printf '%s %s' \"$1\" \"$GREETING\" > \"$2\"".into(),
                "sh".into(),
                "one".into(),
                file.clone().into_os_string(),
            ],
            Some(Environment::new(b"GREETING=hello\0".to_vec())),
        )
        .expect("program");
        let pid = spawn(&program, &|| {}).expect("executed");
        let mut status = 0;
        // SAFETY: waitpid writes one local; the child is this test's.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(std::fs::read_to_string(file).expect("written"), "one hello");
    }
}
