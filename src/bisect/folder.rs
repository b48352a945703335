//! A bisect's folder: taken by one bisect at a time (an `flock` on its
//! marker), and what a bisect that was killed left in it pruned by the
//! next.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::BisectError;
use super::axis::Progress;
use super::git::Repo;

/// Take `out` for this bisect: made when missing; one holding files is
/// refused unless it is a bisect's folder and `resume` says to continue
/// it. Its marker is locked for as long as the bisect runs.
pub(super) fn claim(out: &Path, resume: bool, repo: Option<&Repo>) -> Result<File, BisectError> {
    let marker = out.join(MARKER);
    let has_files = std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some());
    if has_files && !marker.exists() {
        return Err(BisectError::BadInput(format!(
            "{} holds files that are not a bisect's; choose an empty or new --out",
            out.display()
        )));
    }
    if has_files && !resume {
        return Err(BisectError::BadInput(format!(
            "{} holds an earlier bisect; --resume continues it, or choose a new --out",
            out.display()
        )));
    }
    if resume && !marker.exists() {
        return Err(BisectError::BadInput(format!(
            "--resume: {} holds no bisect to continue",
            out.display()
        )));
    }
    std::fs::create_dir_all(out)
        .map_err(|e| BisectError::Infrastructure(format!("cannot make {}: {e}", out.display())))?;
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&marker)
        .map_err(|e| {
            BisectError::Infrastructure(format!("cannot write {}: {e}", marker.display()))
        })?;
    // Another bisect's prune may hold the lock for a moment while it
    // asks whether this folder is abandoned: a held lock is only "in
    // use" when it stays held.
    let mut tries = 0;
    while !try_lock(&file) {
        tries += 1;
        if tries == 20 {
            return Err(BisectError::BadInput(format!(
                "another bisect is running in {}",
                out.display()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    let owner = serde_json::json!({
        "pid": std::process::id(),
        "repository": repo.map(|r| r.top.clone()),
    });
    let _ = file.set_len(0);
    let _ = std::io::Write::write_all(&mut &file, owner.to_string().as_bytes());
    Ok(file)
}

/// Lock `file` exclusively without waiting; whether it was free.
fn try_lock(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this process owns.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Whether the bisect that owned `folder` is gone (its marker is not
/// locked); a folder with no marker is no bisect's.
fn abandoned(folder: &Path) -> bool {
    File::options()
        .write(true)
        .open(folder.join(MARKER))
        .is_ok_and(|file| try_lock(&file))
}

/// What a bisect that was killed (SIGKILL, a lost machine) left: the
/// worktrees it registered in this repository, and the worktrees and
/// environments in the bisect folders of the temporary directory.
/// Their logs and steps are kept.
pub(super) fn prune_stale(repo: Option<&Repo>, progress: &mut dyn Progress) {
    let mut folders: Vec<PathBuf> = Vec::new();
    if let Some(repo) = repo {
        for worktree in repo.worktrees() {
            let Some(folder) = worktree.parent().and_then(Path::parent) else {
                continue;
            };
            if worktree.parent().and_then(Path::file_name) == Some("worktrees".as_ref())
                && abandoned(folder)
            {
                repo.remove_worktree(&worktree);
                progress.note(&format!(
                    "removed {} (left by a bisect that was killed)",
                    worktree.display()
                ));
                folders.push(folder.to_path_buf());
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
        for entry in entries.flatten() {
            let path = entry.path();
            let ours = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(TEMP_PREFIX));
            if ours && abandoned(&path) {
                folders.push(path);
            }
        }
    }
    folders.sort();
    folders.dedup();
    for folder in folders {
        for left in ["worktrees", "env"] {
            let path = folder.join(left);
            if path.exists() && std::fs::remove_dir_all(&path).is_ok() {
                progress.note(&format!(
                    "removed {} (left by a bisect that was killed)",
                    path.display()
                ));
            }
        }
    }
}

/// The file that marks a folder as a bisect's, locked (`flock`) by the
/// bisect that uses it for as long as it runs.
pub const MARKER: &str = ".oomgate-bisect";

/// The start of the name of a bisect's folder in the temporary directory.
pub const TEMP_PREFIX: &str = "oomgate-bisect-";
