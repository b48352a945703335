//! Paths as oomgate's errors and writers see them: an I/O error that
//! names its path, where a chain of symlinks ends, the folder a path is in.

use std::io;
use std::path::{Path, PathBuf};

pub(crate) fn with_path(error: io::Error, path: &Path) -> io::Error {
    io::Error::new(error.kind(), format!("{}: {error}", path.display()))
}

/// Where a symlink chain ends (the path itself when it is none). A link to
/// nothing yet resolves to where its target would be.
pub fn follow_links(path: &Path) -> PathBuf {
    let mut current = path.to_path_buf();
    for _ in 0..40 {
        let is_link = std::fs::symlink_metadata(&current).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            break;
        }
        let Ok(target) = std::fs::read_link(&current) else {
            break;
        };
        current = match current.parent() {
            Some(parent) if target.is_relative() => parent.join(target),
            _ => target,
        };
    }
    current
}

/// The folder `path` is in: its parent, or `.` for a bare file name.
pub fn folder_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}
