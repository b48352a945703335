//! The files oomgate holds an exclusive `flock` on (an out dir's marker,
//! a lock's `.held` file, a sealed folder): opened safely, locked without
//! waiting.

use std::io;
use std::path::Path;

use super::paths::with_path;

/// A file to `flock` (the out dir's marker, a lock's `.held` file), made
/// if missing: never opened through a symlink, never truncated before it
/// is held (the holder's pid may be read from it), a regular file.
/// Close-on-exec, as std opens every file: no process oomgate starts
/// holds it.
pub fn open_lock_file(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| with_path(e, path))?;
    if !file.metadata()?.is_file() {
        return Err(with_path(
            io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
            path,
        ));
    }
    Ok(file)
}

/// Take an exclusive `flock` on `file` without waiting: `WouldBlock`
/// while another holds any lock on it.
pub fn try_lock_exclusive(file: &std::fs::File) -> io::Result<()> {
    try_flock(file, libc::LOCK_EX)
}

/// Take a shared `flock` on `file` without waiting: `WouldBlock` while
/// another holds it exclusively (to ask whether it is held, as the lock
/// goes with `file`).
pub fn try_lock_shared(file: &std::fs::File) -> io::Result<()> {
    try_flock(file, libc::LOCK_SH)
}

fn try_flock(file: &std::fs::File, kind: i32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock takes a descriptor this process owns for the call.
    if unsafe { libc::flock(file.as_raw_fd(), kind | libc::LOCK_NB) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
