//! Files in a case folder. The workload runs with `$OOMGATE_OUT` pointing
//! at its case folder and may leave anything there: a symlink to a file
//! elsewhere, a FIFO, the folder itself swapped for a link. So oomgate
//! opens every file there through the folder opened without following a
//! link (`O_DIRECTORY | O_NOFOLLOW`), then the file by name without
//! following one either (`O_NOFOLLOW | O_NONBLOCK`), and uses it only if
//! it is a regular file; a file it writes whole is written beside and
//! renamed over the name, which replaces a planted link, never its
//! target. A planted link or special file is an error, never a write
//! elsewhere, a read of someone else's file or a hang. Errors name the
//! folder when it is the folder that was refused; the file's path is the
//! caller's to add, as every caller's message already says it.
//!
//! A case's files are opened one after another from the same folder (its
//! logs, its timeline, its metrics, its logs again for their tails), so
//! each thread keeps the last folder it walked to open, and uses it again
//! while that folder's path still leads to it (see `remembered`).
//!
//! The names of an instance's files in its case folder are here too
//! ([`InstanceLogs`]): whoever runs a case, reports on it or merges it
//! finds them in one place.

use std::cell::RefCell;
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::paths::with_path;

/// Where one instance writes its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceLogs {
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    /// The workload probe's JSON lines (`$OOMGATE_METRICS`).
    pub metrics: PathBuf,
}

impl InstanceLogs {
    /// A case's server: `server.stdout.log`, `server.stderr.log`,
    /// `server.metrics.jsonl`.
    pub fn for_server(case_dir: &Path) -> Self {
        InstanceLogs {
            stdout: case_dir.join("server.stdout.log"),
            stderr: case_dir.join("server.stderr.log"),
            metrics: case_dir.join("server.metrics.jsonl"),
        }
    }

    /// Instance 0 keeps the plain names (`stdout.log`), so the common
    /// single-instance case has the files every script looks for; instance
    /// `i > 0` writes `stdout.<i>.log`.
    pub fn for_instance(case_dir: &Path, index: u32) -> Self {
        let name = |stream: &str| match index {
            0 => format!("{stream}.log"),
            i => format!("{stream}.{i}.log"),
        };
        let metrics = match index {
            0 => "metrics.jsonl".to_string(),
            i => format!("metrics.{i}.jsonl"),
        };
        InstanceLogs {
            stdout: case_dir.join(name("stdout")),
            stderr: case_dir.join(name("stderr")),
            metrics: case_dir.join(metrics),
        }
    }

    /// Where a capacity search keeps the probe lines of its probe
    /// `param = value` once it ran (`metrics.batch-16.jsonl`,
    /// `metrics.1.batch-16.jsonl`), as it keeps its timeline.
    pub fn probe_metrics(&self, param: &str, value: u64) -> PathBuf {
        self.metrics
            .with_extension(format!("{param}-{value}.jsonl"))
    }
}

/// Open a case file to read it.
pub fn open_read(path: &Path) -> io::Result<File> {
    open(path, libc::O_RDONLY, false)
}

/// Open a case file to append to, made (mode 0644) when missing: a log
/// the workload writes through, or a marker line oomgate adds.
pub fn open_append(path: &Path) -> io::Result<File> {
    let file = open(path, libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT, false)?;
    // O_NONBLOCK kept a FIFO from hanging the open; a regular file does
    // not need it (nor do oomgate's own reads and writes mind it), but a
    // workload given this file as its output should not see it.
    // SAFETY: fcntl on a descriptor `file` owns.
    unsafe {
        let status = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if status >= 0 {
            libc::fcntl(file.as_raw_fd(), libc::F_SETFL, status & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// Make a case file empty, made when missing.
pub fn create(path: &Path) -> io::Result<File> {
    open(path, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, false)
}

/// Replace a case file with `contents`: written to a new file beside it,
/// then renamed over the name. A failure leaves no file under either
/// name, so no reader takes half a file for a whole one.
pub fn replace(path: &Path, contents: &[u8]) -> io::Result<()> {
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let (folder, name) = open_folder(path)?;
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    let mut temporary = name.as_bytes().to_vec();
    temporary.splice(0..0, b".".iter().copied());
    temporary.extend_from_slice(format!(".oomgate-{}-{serial}", std::process::id()).as_bytes());
    let temporary = c_name(temporary, path)?;
    let file = open_at(&folder, &temporary, libc::O_WRONLY | libc::O_CREAT, true)?;
    let written = (&file).write_all(contents).and_then(|()| {
        // SAFETY: both names are NUL-terminated and relative to a folder
        // descriptor this process holds.
        let renamed = unsafe {
            libc::renameat(
                folder.as_raw_fd(),
                temporary.as_ptr(),
                folder.as_raw_fd(),
                name.as_ptr(),
            )
        };
        if renamed == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    });
    if written.is_err() {
        // SAFETY: as above.
        unsafe { libc::unlinkat(folder.as_raw_fd(), temporary.as_ptr(), 0) };
    }
    written
}

fn open(path: &Path, flags: libc::c_int, exclusive: bool) -> io::Result<File> {
    let (folder, name) = open_folder(path)?;
    open_at(&folder, &name, flags, exclusive)
}

/// The folder holding `path`, opened without following a link, and the
/// file's name in it. Below an out dir this process holds, no folder on
/// the way is followed if it is a link either (a workload may swap
/// `cases` or its own folder for one); above it the path is the user's.
fn open_folder(path: &Path) -> io::Result<(Rc<OwnedFd>, CString)> {
    let name = path
        .file_name()
        .ok_or_else(|| with_path(io::Error::from(io::ErrorKind::InvalidInput), path))?;
    let folder = super::paths::folder_of(path);
    let name = c_name(name.as_bytes().to_vec(), path)?;
    let below = |dir: &OwnedFd, step: &Path, so_far: &Path| {
        let step = c_name(step.as_os_str().as_bytes().to_vec(), so_far)?;
        // SAFETY: a NUL-terminated name relative to a folder this process
        // holds; the descriptor returned is owned below.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), step.as_ptr(), FOLDER) };
        owned(fd).map_err(|e| with_path(folder_refused(e, so_far), so_far))
    };
    let Some(root) = super::outdir::claimed_root(folder) else {
        let start = c_name(folder.as_os_str().as_bytes().to_vec(), folder)?;
        // SAFETY: a NUL-terminated path; the descriptor is owned below.
        let fd = unsafe { libc::open(start.as_ptr(), FOLDER) };
        let folder_fd = owned(fd).map_err(|e| with_path(folder_refused(e, folder), folder))?;
        return Ok((Rc::new(folder_fd), name));
    };
    if let Some(walked) = remembered(folder) {
        return Ok((walked, name));
    }
    let start = c_name(root.as_os_str().as_bytes().to_vec(), &root)?;
    // SAFETY: as above; the out dir itself is followed, as the user named it.
    let fd = unsafe { libc::open(start.as_ptr(), FOLDER & !libc::O_NOFOLLOW) };
    let mut current = owned(fd).map_err(|e| with_path(e, &root))?;
    let mut so_far = root.clone();
    for step in folder
        .strip_prefix(&root)
        .unwrap_or(Path::new(""))
        .components()
    {
        let std::path::Component::Normal(step) = step else {
            return Err(with_path(
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "not a plain path below the out dir",
                ),
                folder,
            ));
        };
        so_far.push(step);
        current = below(&current, Path::new(step), &so_far)?;
    }
    Ok((remember(folder, current), name))
}

/// The last folder below an out dir this thread walked to, kept open.
struct Walked {
    path: PathBuf,
    folder: Rc<OwnedFd>,
    /// The folder's device and inode, when it was opened.
    id: (u64, u64),
}

thread_local! {
    static WALKED: RefCell<Option<Walked>> = const { RefCell::new(None) };
}

/// The folder this thread last walked to, if it was `path` and `path`
/// still leads to that very folder: one `lstat` instead of a walk. A
/// folder removed, replaced (by a new one, or by a link to another) or
/// moved away from its path is walked to again, and a link refused as a
/// walk refuses it. The folder kept is one a walk reached, so nothing
/// outside it is opened through it; a link on the way that leads to that
/// very folder is let pass.
fn remembered(path: &Path) -> Option<Rc<OwnedFd>> {
    WALKED.with_borrow(|walked| {
        let walked = walked.as_ref().filter(|w| w.path == path)?;
        let now = std::fs::symlink_metadata(path).ok()?;
        ((now.dev(), now.ino()) == walked.id).then(|| Rc::clone(&walked.folder))
    })
}

/// Keep `folder`, just walked to at `path`, for this thread's next open.
fn remember(path: &Path, folder: OwnedFd) -> Rc<OwnedFd> {
    let folder = File::from(folder);
    let id = folder.metadata().ok().map(|m| (m.dev(), m.ino()));
    let folder = Rc::new(OwnedFd::from(folder));
    WALKED.with_borrow_mut(|walked| {
        *walked = id.map(|id| Walked {
            path: path.to_path_buf(),
            folder: Rc::clone(&folder),
            id,
        });
    });
    folder
}

/// How a folder is opened: only a folder, never through a link.
const FOLDER: libc::c_int = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn open_at(
    folder: &OwnedFd,
    name: &CString,
    flags: libc::c_int,
    exclusive: bool,
) -> io::Result<File> {
    let flags = flags
        | libc::O_NOFOLLOW
        | libc::O_NONBLOCK
        | libc::O_CLOEXEC
        | if exclusive { libc::O_EXCL } else { 0 };
    // SAFETY: a NUL-terminated name relative to a folder this process
    // holds; the descriptor returned is owned below.
    let fd = unsafe {
        libc::openat(
            folder.as_raw_fd(),
            name.as_ptr(),
            flags,
            0o644 as libc::c_uint,
        )
    };
    let file = File::from(owned(fd).map_err(link_refused)?);
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (oomgate reads and writes only regular files in a case folder)",
        ));
    }
    Ok(file)
}

/// `O_NOFOLLOW` refuses a link with ELOOP ("too many levels of symbolic
/// links"), which would send a reader looking for a loop.
fn link_refused(error: io::Error) -> io::Error {
    if error.raw_os_error() == Some(libc::ELOOP) {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a symbolic link (oomgate does not follow links in a case folder)",
        )
    } else {
        error
    }
}

/// A folder opened with `O_DIRECTORY | O_NOFOLLOW` that is a link fails
/// with ENOTDIR, as a file would: say which it is.
fn folder_refused(error: io::Error, folder: &Path) -> io::Error {
    let is_link = std::fs::symlink_metadata(folder).is_ok_and(|m| m.file_type().is_symlink());
    if is_link && matches!(error.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) {
        link_refused(io::Error::from_raw_os_error(libc::ELOOP))
    } else {
        error
    }
}

fn c_name(bytes: Vec<u8>, path: &Path) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        with_path(
            io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"),
            path,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_planted_link_is_replaced_never_written_through() {
        let dir = tempfile::tempdir().expect("tempdir");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "keep").expect("write");
        let case = dir.path().join("case");
        std::fs::create_dir(&case).expect("mkdir");
        let planted = case.join("timeline.json");
        std::os::unix::fs::symlink(&elsewhere, &planted).expect("symlink");

        replace(&planted, b"{}").expect("replace");
        assert_eq!(std::fs::read_to_string(&elsewhere).expect("read"), "keep");
        assert!(
            !std::fs::symlink_metadata(&planted)
                .expect("meta")
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&planted).expect("read"), "{}");
        let names: Vec<_> = std::fs::read_dir(&case).expect("list").collect();
        assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
    }

    #[test]
    fn links_fifos_and_a_swapped_folder_are_refused_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "secret").expect("write");
        let case = dir.path().join("case");
        std::fs::create_dir(&case).expect("mkdir");
        let log = case.join("stdout.log");
        std::os::unix::fs::symlink(&elsewhere, &log).expect("symlink");
        for error in [open_read(&log).err(), open_append(&log).err()] {
            let error = error.expect("refused");
            assert!(error.to_string().contains("symbolic link"), "{error}");
        }
        assert_eq!(std::fs::read_to_string(&elsewhere).expect("read"), "secret");

        let fifo = case.join("metrics.jsonl");
        let name = CString::new(fifo.as_os_str().as_bytes()).expect("name");
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0);
        let error = open_read(&fifo).expect_err("a FIFO is refused, at once");
        assert!(error.to_string().contains("not a regular file"), "{error}");

        let swapped = dir.path().join("swapped");
        std::os::unix::fs::symlink(dir.path(), &swapped).expect("symlink");
        let error = open_read(&swapped.join("elsewhere")).expect_err("refused");
        assert!(error.to_string().contains("swapped"), "{error}");
    }

    #[test]
    fn below_a_held_out_dir_no_folder_on_the_way_is_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("out");
        let _claim = super::super::claim_out_dir(&out, false).expect("claim");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(elsewhere.join("a")).expect("mkdir");
        std::os::unix::fs::symlink(&elsewhere, out.join("cases")).expect("symlink");
        let error = replace(&out.join("cases/a/timeline.json"), b"{}").expect_err("refused");
        assert!(
            error.to_string().contains("cases: a symbolic link"),
            "{error}"
        );
        assert!(!elsewhere.join("a/timeline.json").exists());

        std::fs::remove_file(out.join("cases")).expect("unlink");
        std::fs::create_dir_all(out.join("cases/a")).expect("mkdir");
        replace(&out.join("cases/a/timeline.json"), b"{}").expect("a real folder");
        let relative = out.join("cases/../cases/a/timeline.json");
        assert!(open_read(&relative).is_err(), "`..` below the out dir");
    }

    /// The folder kept from the last walk is used only while its path
    /// still leads to it: a folder replaced by a new one is written in the
    /// new one, never in the old one, gone; one replaced by a link is
    /// refused as a walk refuses it.
    #[test]
    fn a_folder_walked_to_before_is_walked_again_once_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("out");
        let _claim = super::super::claim_out_dir(&out, false).expect("claim");
        let case = out.join("cases/a");
        std::fs::create_dir_all(&case).expect("mkdir");
        replace(&case.join("timeline.json"), b"one").expect("replace");
        create(&case.join("stdout.log")).expect("the same folder again");

        std::fs::rename(&case, out.join("cases/old")).expect("rename");
        std::fs::create_dir(&case).expect("mkdir");
        replace(&case.join("timeline.json"), b"two").expect("replace");
        assert_eq!(
            std::fs::read(case.join("timeline.json")).expect("read"),
            b"two"
        );
        assert_eq!(
            std::fs::read(out.join("cases/old/timeline.json")).expect("read"),
            b"one"
        );

        std::fs::rename(&case, out.join("cases/moved")).expect("rename");
        std::os::unix::fs::symlink(out.join("cases/moved"), &case).expect("symlink");
        let error = create(&case.join("stdout.log")).expect_err("refused");
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert!(!out.join("cases/moved/stdout.log").exists());
    }

    #[test]
    fn a_log_opened_for_a_workload_is_blocking_and_appends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("stderr.log");
        create(&log).expect("create");
        let mut file = open_append(&log).expect("open");
        // SAFETY: fcntl on a descriptor the test owns.
        let status = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(status & libc::O_NONBLOCK, 0);
        file.write_all(b"one\n").expect("write");
        open_append(&log)
            .expect("open")
            .write_all(b"two\n")
            .expect("write");
        let mut text = String::new();
        open_read(&log)
            .expect("open")
            .read_to_string(&mut text)
            .expect("read");
        assert_eq!(text, "one\ntwo\n");
    }
}
