//! Writing oomgate's outputs safely, below every writer (reports, the
//! lock): a regular file is replaced atomically (temporary file, sync,
//! rename; through a symlink, its target), a file of the out dir's own
//! layout is renamed over its name and never written through a link, a
//! FIFO or device is written in place, two outputs that are one file are
//! told apart. What is written is the writers' business.
//!
//! Below this file: `outdir` (the out dir claimed with a marker and held
//! by one oomgate), `case` (files in a case folder, which the workload
//! shares, and their names), `sealed` (a read-only folder handed to
//! workloads), `tree` (removing a folder whatever its depth), `lock`
//! (files oomgate `flock`s), `paths` (errors that name their path, where a
//! symlink chain ends), `history` (where a run history is).

pub mod case;
mod history;
mod lock;
mod outdir;
mod paths;
pub mod sealed;
mod tree;

pub use history::{HistoryLocation, LocationError};
pub use lock::{open_lock_file, try_lock_exclusive};
pub use outdir::{
    OUT_DIR_MARKER, OutDirClaim, OutDirError, claim_out_dir, held_out_dir_around, own_folder,
};
pub(crate) use paths::with_path;
pub use paths::{folder_of, follow_links};
pub use sealed::SealedDir;
pub use tree::remove_tree;

use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The largest lock file oomgate reads (a lock of 10,000 cases is about
/// 6 MiB).
pub const MAX_LOCK_BYTES: u64 = 64 * 1024 * 1024;

/// The largest results.json oomgate reads back (`lock --from`, `diff`).
pub const MAX_RESULTS_BYTES: u64 = 512 * 1024 * 1024;

/// Read a file a user names as input (`what`: "a suite", "a lock", "a
/// results file"): a regular file of at most `limit` bytes, as UTF-8. A FIFO, a device such
/// as `/dev/zero` or an oversized file is refused at once, never read until
/// oomgate is killed.
pub fn read_input(path: &Path, limit: u64, what: &str) -> io::Result<String> {
    String::from_utf8(read_input_bytes(path, limit, what)?).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not UTF-8 text: {}", e.utf8_error()),
        )
    })
}

/// [`read_input`] as bytes, for a reader that says where text is not
/// UTF-8 (a suite: line and column).
pub fn read_input_bytes(path: &Path, limit: u64, what: &str) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let too_big = |size: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{size} bytes, more than the {limit} {what} may have"),
        )
    };
    if meta.len() > limit {
        return Err(too_big(meta.len().to_string()));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_end(&mut bytes)?;
    // The file grew while it was read.
    if bytes.len() as u64 > limit {
        return Err(too_big(format!("more than {limit}")));
    }
    Ok(bytes)
}

/// Replace `path` with `contents` so that a reader (or a crash) never sees
/// a half-written file: write a temporary file beside it, then rename. A
/// symlink is followed: its target is replaced, the link stays. A file
/// that is replaced keeps its mode and owner; where its owner cannot be
/// given to the new file (oomgate is not root and the file is someone
/// else's it may write), it is written in place instead, as an editor
/// does, so that it stays theirs.
pub fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let path = &follow_links(path);
    let folder = folder_of(path);
    std::fs::create_dir_all(folder)?;
    let existing = std::fs::metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_file);
    // Temporary files are private (0600); a new report or lock is for
    // everyone who may read the folder, as a file written in place would be.
    let mode = existing.as_ref().map_or(0o644, |meta| meta.mode() & 0o7777);
    let file = temporary_holding(folder, mode, contents)?;
    if let Some(meta) = &existing {
        let mine = file.as_file().metadata()?;
        if (mine.uid(), mine.gid()) != (meta.uid(), meta.gid()) {
            use std::os::fd::AsRawFd;
            // SAFETY: fchown on a descriptor the temporary file owns.
            let given = unsafe { libc::fchown(file.as_file().as_raw_fd(), meta.uid(), meta.gid()) };
            if given != 0 {
                drop(file);
                return write_in_place(path, contents);
            }
            // fchown clears set-id bits; put the mode back.
            file.as_file()
                .set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
    }
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// A temporary file in `folder`, of mode `mode`, holding `contents`,
/// synced: for its caller to rename over a name.
fn temporary_holding(
    folder: &Path,
    mode: u32,
    contents: &[u8],
) -> io::Result<tempfile::NamedTempFile> {
    use std::os::unix::fs::PermissionsExt;
    let file = tempfile::NamedTempFile::new_in(folder)?;
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    // Through the plain file: the temporary file's own writer adds its
    // random name to errors, which would hide the path that matters.
    let mut handle = file.as_file();
    handle.write_all(contents)?;
    handle.sync_data()?;
    Ok(file)
}

/// Replace `path`, a file of a claimed out dir's own layout, with
/// `contents`: a temporary file made beside it (in the out dir, a real
/// folder), synced, renamed over the name. What is at the name is never
/// opened: a link a workload planted there is replaced (the file it points
/// to is not written) and said once ([`take_replaced_links`]).
pub fn write_owned(path: &Path, contents: &[u8]) -> io::Result<()> {
    let file = temporary_holding(folder_of(path), 0o644, contents)?;
    note_planted_link(path);
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Links found (and replaced, or removed) where a file of an out dir's
/// own layout goes, said once each: `(the name, where it pointed)`.
static REPLACED_LINKS: std::sync::Mutex<Vec<(PathBuf, PathBuf)>> =
    std::sync::Mutex::new(Vec::new());

fn note_planted_link(path: &Path) {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link {
        return;
    }
    let target = std::fs::read_link(path).unwrap_or_default();
    let mut replaced = REPLACED_LINKS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !replaced.iter().any(|(name, _)| name == path) {
        replaced.push((path.to_path_buf(), target));
    }
}

/// Remove a link found at `path`, a file of an out dir's own layout, when
/// the out dir is claimed: an earlier run's workload may have planted it,
/// and nothing oomgate writes goes through it. Said as [`write_owned`]
/// says a replaced one.
pub fn remove_planted_link(path: &Path) -> io::Result<()> {
    note_planted_link(path);
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => std::fs::remove_file(path),
        _ => Ok(()),
    }
}

/// The links replaced or removed so far, each once: the caller says them.
pub fn take_replaced_links() -> Vec<(PathBuf, PathBuf)> {
    std::mem::take(
        &mut *REPLACED_LINKS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    )
}

/// Overwrite a regular file where it is (its inode, owner and mode kept).
fn write_in_place(path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut file = std::fs::OpenOptions::new().write(true).open(path)?;
    file.write_all(contents)?;
    file.set_len(contents.len() as u64)?;
    file.sync_data()
}

/// How one report reaches its path, decided before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportTarget {
    /// A regular file, or nothing yet: replaced atomically at every
    /// checkpoint (through a symlink, its target is replaced).
    File(PathBuf),
    /// A file of the out dir's own layout (results.json, junit.xml,
    /// summary.md, report.html): replaced by renaming a file oomgate made
    /// over the name, never opened or written through a link (a workload
    /// can reach the out dir and plant one; see [`write_owned`]).
    Owned(PathBuf),
    /// A FIFO, a device, `/dev/stdout`, anything under /dev or /proc:
    /// written in place, once, when the run ends — never renamed over,
    /// never opened twice.
    Stream(PathBuf),
}

impl ReportTarget {
    /// What `path` is now. A directory is an error.
    pub fn of(path: &Path) -> io::Result<Self> {
        let resolved = follow_links(path);
        let special = [Path::new("/dev"), Path::new("/proc")]
            .iter()
            .any(|root| path.starts_with(root) || resolved.starts_with(root));
        match std::fs::metadata(&resolved) {
            Ok(meta) if meta.is_dir() => Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("{} is a directory, not a file path", path.display()),
            )),
            Ok(meta) if !meta.is_file() || special => Ok(ReportTarget::Stream(path.to_path_buf())),
            _ if special => Ok(ReportTarget::Stream(path.to_path_buf())),
            _ => Ok(ReportTarget::File(path.to_path_buf())),
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            ReportTarget::File(path) | ReportTarget::Owned(path) | ReportTarget::Stream(path) => {
                path
            }
        }
    }

    /// The file this target writes, to tell two targets that are one file
    /// apart: the device and inode of what exists, else the resolved path
    /// with its folder made canonical.
    pub fn identity(&self) -> Option<FileIdentity> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let resolved = match self {
            // The name itself: a link there is replaced, not followed.
            ReportTarget::Owned(path) => path.clone(),
            _ => follow_links(self.path()),
        };
        let meta = match self {
            ReportTarget::Owned(_) => std::fs::symlink_metadata(&resolved),
            _ => std::fs::metadata(&resolved),
        };
        if let Ok(meta) = meta {
            // A character device (`/dev/null`, a terminal) takes any
            // number of writers without one undoing another.
            if meta.file_type().is_char_device() {
                return None;
            }
            return Some(FileIdentity::Inode(meta.dev(), meta.ino()));
        }
        let folder = folder_of(&resolved);
        let canonical = std::fs::canonicalize(folder).ok()?;
        Some(FileIdentity::Path(canonical.join(resolved.file_name()?)))
    }

    /// Write the whole report; an error names the path.
    pub fn write(&self, contents: &[u8]) -> io::Result<()> {
        match self {
            ReportTarget::File(path) => write_atomic(path, contents),
            ReportTarget::Owned(path) => write_owned(path, contents),
            ReportTarget::Stream(path) => write_stream(path, contents, STREAM_WAIT),
        }
        .map_err(|e| with_path(e, self.path()))
    }
}

/// How long a stream may keep a report waiting: for a FIFO's reader to
/// open it, and then for the reader to take more.
pub const STREAM_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Set when oomgate is asked to stop (Ctrl-C, SIGTERM): a report waiting
/// on a stream gives up at once rather than after [`STREAM_WAIT`].
static STOP_WAITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Give up every wait on a stream, now and from now on. Async-signal-safe
/// (one atomic store), for the stop signals' handler.
pub fn stop_waiting() {
    STOP_WAITING.store(true, std::sync::atomic::Ordering::SeqCst);
}

fn stopping() -> bool {
    STOP_WAITING.load(std::sync::atomic::Ordering::SeqCst)
}

/// Write `contents` to a FIFO, device or terminal in place, never blocked
/// for good: the path is opened non-blocking (a FIFO no one reads from
/// yet is retried until a reader opens it), and a reader that takes
/// nothing for `wait` (or a stop signal) ends the write with an error of
/// kind `TimedOut`. What a reader got before is not taken back.
fn write_stream(path: &Path, contents: &[u8], wait: std::time::Duration) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    use std::time::Instant;
    let gave_up = |what: &str| {
        let why = if stopping() {
            "oomgate was asked to stop".to_string()
        } else {
            format!("waited {} s", wait.as_secs())
        };
        io::Error::new(io::ErrorKind::TimedOut, format!("{what} ({why})"))
    };
    let opened_by = Instant::now() + wait;
    let mut stream = loop {
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
        {
            Ok(stream) => break stream,
            // A FIFO with no reader.
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                if stopping() || Instant::now() >= opened_by {
                    return Err(gave_up("no reader opened the FIFO"));
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    };
    let mut written = 0;
    let mut progress_by = Instant::now() + wait;
    while written < contents.len() {
        match stream.write(&contents[written..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                written += n;
                progress_by = Instant::now() + wait;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if stopping() || Instant::now() >= progress_by {
                    return Err(gave_up(&format!(
                        "the reader stopped taking the report after {written} of {} bytes",
                        contents.len()
                    )));
                }
                let mut ready = libc::pollfd {
                    fd: stream.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: poll reads and writes one pollfd this frame owns.
                unsafe { libc::poll(&mut ready, 1, 100) };
            }
            Err(e) => return Err(e),
        }
    }
    stream.flush()
}

/// Whether the file system holding `path` has no block left that this
/// process may write: then whatever is written there now, a workload's log
/// included, is cut short. `false` when it cannot be told (`statvfs`
/// fails, or the file system reports no size, as some network and
/// virtual ones do).
pub fn no_space_left(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: statvfs reads a NUL-terminated path and writes one struct to
    // the pointer, which points to zeroed memory of its size.
    if unsafe { libc::statvfs(c_path.as_ptr(), stats.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: statvfs succeeded, so the struct is initialised.
    let stats = unsafe { stats.assume_init() };
    // root may use the blocks reserved for it; anyone else only the
    // available ones. Workloads run as oomgate's own user.
    // SAFETY: geteuid has no failure mode.
    let free = if unsafe { libc::geteuid() } == 0 {
        stats.f_bfree
    } else {
        stats.f_bavail
    };
    stats.f_blocks > 0 && free == 0
}

/// How deep [`link_or_copy_tree`] goes: a case folder holds files and
/// perhaps a few folders a workload made, never a deep tree.
const TREE_DEPTH: usize = 16;

/// Replace the folder `to` with the files under `from`: each hard-linked
/// where the file system allows (no bytes copied, and a later run into
/// `from` makes new files rather than changing these), else copied.
/// Symbolic links and special files are left out, never followed: `from`
/// may be an artifact someone else made. Returns how many files arrived.
/// A `from` that is not a folder is an error of kind `NotFound`.
pub fn link_or_copy_tree(from: &Path, to: &Path) -> io::Result<u64> {
    let is_folder = std::fs::symlink_metadata(from).is_ok_and(|m| m.is_dir());
    if !is_folder {
        return Err(with_path(
            io::Error::new(io::ErrorKind::NotFound, "no such folder"),
            from,
        ));
    }
    match std::fs::symlink_metadata(to) {
        Ok(meta) if meta.is_dir() => remove_tree(to),
        Ok(_) => std::fs::remove_file(to),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
    .map_err(|e| with_path(e, to))?;
    link_or_copy_into(from, to, TREE_DEPTH)
}

fn link_or_copy_into(from: &Path, to: &Path, depth: usize) -> io::Result<u64> {
    std::fs::create_dir_all(to).map_err(|e| with_path(e, to))?;
    let mut files = 0;
    for entry in std::fs::read_dir(from).map_err(|e| with_path(e, from))? {
        let entry = entry.map_err(|e| with_path(e, from))?;
        let kind = entry.file_type().map_err(|e| with_path(e, &entry.path()))?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if kind.is_dir() && depth > 0 {
            files += link_or_copy_into(&source, &target, depth - 1)?;
        } else if kind.is_file() {
            if std::fs::hard_link(&source, &target).is_err() {
                std::fs::copy(&source, &target).map_err(|e| with_path(e, &source))?;
            }
            files += 1;
        }
    }
    Ok(files)
}

/// What makes two report paths one file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FileIdentity {
    Inode(u64, u64),
    Path(PathBuf),
}

/// The failures of writes that are each attempted whatever became of the
/// others (one full disk must not keep a report on another from being
/// written), as one error naming every path.
#[derive(Debug, Default)]
pub struct WriteFailures(Vec<io::Error>);

impl WriteFailures {
    pub fn note(&mut self, result: io::Result<()>) {
        if let Err(error) = result {
            self.0.push(error);
        }
    }

    /// `Ok` when every write succeeded; else the first failure's kind with
    /// every failure's message.
    pub fn into_result(mut self) -> io::Result<()> {
        if self.0.len() <= 1 {
            return self.0.pop().map_or(Ok(()), Err);
        }
        let kind = self.0[0].kind();
        let messages: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        Err(io::Error::new(kind, messages.join("; ")))
    }
}

#[cfg(test)]
mod tests;
