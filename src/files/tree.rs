//! Removing a folder oomgate made (a case folder, a plugin folder, a case
//! folder brought into a merged out dir), whatever a workload left in it:
//! one folder open at a time, so depth costs no descriptors, and time
//! linear in the entries.
//!
//! `std::fs::remove_dir_all` keeps a descriptor open for every level it
//! descends: a workload that leaves a folder 30,000 levels deep in its case
//! folder would make every later run into that out dir fail with "Too many
//! open files". Here the walk goes down by `openat` and back up by `..`,
//! checked to be the folder it came from (so a folder moved away meanwhile
//! stops the walk rather than lead it elsewhere), and a link is removed,
//! never followed.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Remove `path` and everything below it. A link or file at `path` is
/// removed itself; a missing `path` is `NotFound`, as `remove_dir_all`'s.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        return std::fs::remove_file(path);
    }
    let root = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path"))?;
    // SAFETY: open with a NUL-terminated path; the descriptor is owned below.
    let fd = unsafe { libc::open(root.as_ptr(), FOLDER_FLAGS) };
    let mut current = owned(fd)?;
    // The way back up: each folder's name in its parent, and the parent's
    // identity, to check `..` against.
    let mut up: Vec<(CString, Identity)> = Vec::new();
    loop {
        match clear_files(&current)? {
            Some(child) => {
                // SAFETY: openat on a descriptor this function owns.
                let fd = unsafe { libc::openat(current.as_raw_fd(), child.as_ptr(), FOLDER_FLAGS) };
                match owned(fd) {
                    Ok(folder) => {
                        up.push((child, identity(&current)?));
                        current = folder;
                    }
                    // Swapped for a link or a file since it was listed:
                    // removed as one, never followed.
                    Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                        unlink(&current, &child, 0)?;
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
            None => {
                let Some((name, parent_identity)) = up.pop() else {
                    break;
                };
                // SAFETY: openat on a descriptor this function owns.
                let fd = unsafe { libc::openat(current.as_raw_fd(), c"..".as_ptr(), FOLDER_FLAGS) };
                let parent = owned(fd)?;
                if identity(&parent)? != parent_identity {
                    return Err(io::Error::other(format!(
                        "a folder below {} was moved while it was being removed",
                        path.display()
                    )));
                }
                drop(current);
                unlink(&parent, &name, libc::AT_REMOVEDIR)?;
                current = parent;
            }
        }
    }
    drop(current);
    std::fs::remove_dir(path)
}

const FOLDER_FLAGS: i32 = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

type Identity = (u64, u64);

fn owned(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just returned by open/openat, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn identity(fd: &OwnedFd) -> io::Result<Identity> {
    // SAFETY: fstat fills the struct it is given; zeroed is a valid stat.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on a descriptor the caller owns.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((stat.st_dev, stat.st_ino))
}

fn unlink(folder: &OwnedFd, name: &CStr, flags: i32) -> io::Result<()> {
    // SAFETY: unlinkat on a descriptor the caller owns, a NUL-terminated name.
    if unsafe { libc::unlinkat(folder.as_raw_fd(), name.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    if error.kind() == io::ErrorKind::NotFound {
        return Ok(());
    }
    Err(error)
}

/// Remove every entry of `folder` that is not a folder, until the first
/// folder: its name, or `None` once `folder` is empty.
fn clear_files(folder: &OwnedFd) -> io::Result<Option<CString>> {
    // SAFETY: a duplicate of a descriptor the caller owns, for the stream
    // to own (closedir closes it).
    let dup = unsafe { libc::fcntl(folder.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fdopendir takes the duplicate; on failure it is closed here.
    let stream = unsafe { libc::fdopendir(dup) };
    if stream.is_null() {
        let error = io::Error::last_os_error();
        // SAFETY: the duplicate is still this function's on failure.
        unsafe { libc::close(dup) };
        return Err(error);
    }
    let stream = Stream(stream);
    // The duplicate shares the folder's offset with earlier streams over
    // it: from the start again (what was removed is gone).
    // SAFETY: a stream this function opened.
    unsafe { libc::rewinddir(stream.0) };
    loop {
        // SAFETY: errno is this thread's; readdir on an open stream.
        let entry = unsafe {
            *libc::__errno_location() = 0;
            libc::readdir(stream.0)
        };
        if entry.is_null() {
            // SAFETY: errno is this thread's.
            let errno = unsafe { *libc::__errno_location() };
            if errno != 0 {
                return Err(io::Error::from_raw_os_error(errno));
            }
            return Ok(None);
        }
        // SAFETY: readdir returned an entry valid until the next call; its
        // name is NUL-terminated.
        let (name, kind) = unsafe { (CStr::from_ptr((*entry).d_name.as_ptr()), (*entry).d_type) };
        if name == c"." || name == c".." {
            continue;
        }
        let is_folder = match kind {
            libc::DT_DIR => true,
            libc::DT_UNKNOWN => is_folder_at(folder, name)?,
            _ => false,
        };
        if is_folder {
            return Ok(Some(name.to_owned()));
        }
        unlink(folder, name, 0)?;
    }
}

/// Whether `name` in `folder` is a folder (not a link to one).
fn is_folder_at(folder: &OwnedFd, name: &CStr) -> io::Result<bool> {
    // SAFETY: fstatat fills the struct it is given; zeroed is a valid stat.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat on a descriptor the caller owns, a NUL-terminated name.
    let done = unsafe {
        libc::fstatat(
            folder.as_raw_fd(),
            name.as_ptr(),
            &mut stat,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if done != 0 {
        let error = io::Error::last_os_error();
        return if error.kind() == io::ErrorKind::NotFound {
            Ok(false)
        } else {
            Err(error)
        };
    }
    Ok(stat.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

/// A directory stream, closed when dropped.
struct Stream(*mut libc::DIR);

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: a stream opened by fdopendir and closed only here.
        unsafe { libc::closedir(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain of `depth` folders below `root`, each holding a file, made
    /// one open folder at a time (its paths are longer than PATH_MAX).
    fn deep_chain(root: &Path, depth: usize) {
        std::fs::create_dir(root).expect("root");
        let path = CString::new(root.as_os_str().as_bytes()).expect("path");
        // SAFETY: open with a NUL-terminated path.
        let mut current = owned(unsafe { libc::open(path.as_ptr(), FOLDER_FLAGS) }).expect("open");
        for _ in 0..depth {
            // SAFETY: calls on a descriptor this test owns, NUL-terminated names.
            unsafe {
                let file = libc::openat(
                    current.as_raw_fd(),
                    c"f".as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o644,
                );
                assert!(file >= 0, "{}", io::Error::last_os_error());
                libc::close(file);
                assert_eq!(libc::mkdirat(current.as_raw_fd(), c"d".as_ptr(), 0o755), 0);
            }
            // SAFETY: openat on a descriptor this test owns.
            let fd = unsafe { libc::openat(current.as_raw_fd(), c"d".as_ptr(), FOLDER_FLAGS) };
            current = owned(fd).expect("descend");
        }
    }

    /// With 64 descriptors allowed (std's remove_dir_all needs one per
    /// level), a chain 1,000 deep is removed whole.
    #[test]
    fn a_deep_chain_is_removed_with_few_descriptors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("deep");
        deep_chain(&root, 1_000);
        let mut before = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit fill or read the structs given. Each
        // test is a process of its own under nextest; the limit is put back.
        unsafe {
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut before);
            let low = libc::rlimit {
                rlim_cur: 64,
                rlim_max: before.rlim_max,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &low);
        }
        let removed = remove_tree(&root);
        // SAFETY: as above.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &before) };
        removed.expect("removed");
        assert!(!root.exists());
    }

    /// A link in the tree is removed, never followed: what it points to
    /// stays whole.
    #[test]
    fn links_are_removed_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(outside.join("sub")).expect("outside");
        std::fs::write(outside.join("sub/keep"), "keep").expect("keep");
        let root = dir.path().join("tree");
        std::fs::create_dir_all(root.join("a/b")).expect("tree");
        std::fs::write(root.join("a/b/file"), "x").expect("file");
        std::os::unix::fs::symlink(&outside, root.join("a/to-folder")).expect("link");
        std::os::unix::fs::symlink(outside.join("sub/keep"), root.join("a/b/to-file"))
            .expect("link");
        remove_tree(&root).expect("removed");
        assert!(!root.exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("sub/keep"))
                .ok()
                .as_deref(),
            Some("keep")
        );
        // A link given as the tree is the link alone.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&outside, &link).expect("link");
        remove_tree(&link).expect("removed");
        assert!(outside.join("sub/keep").exists());
        assert_eq!(
            remove_tree(&dir.path().join("missing")).map_err(|e| e.kind()),
            Err(io::ErrorKind::NotFound)
        );
    }

    /// Wide and deep at once: every entry goes.
    #[test]
    fn a_wide_tree_is_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("wide");
        for i in 0..50 {
            let sub = root.join(format!("d{i}/e/f"));
            std::fs::create_dir_all(&sub).expect("mkdir");
            for j in 0..5 {
                std::fs::write(sub.join(format!("file{j}")), "x").expect("file");
                std::fs::write(root.join(format!("d{i}/top{j}")), "x").expect("file");
            }
        }
        remove_tree(&root).expect("removed");
        assert!(!root.exists());
    }
}
