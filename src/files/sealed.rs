//! A sealed folder: files oomgate writes once for one of its processes to
//! hand to workloads (its pytest plugin), which the workloads must read
//! and must not change.
//!
//! The folder is fresh (`<base>/<prefix><pid>-<random>`), read-only (0500,
//! its files 0400), held with a `flock` for the life of the process that
//! made it, and removed when dropped; one left by a process that was
//! killed (nobody holds its lock) is removed by the next that seals one
//! there. A workload runs as the same user and could make it writable
//! again, so [`check`] says whether it still holds exactly what was
//! written, before each use.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// A sealed folder of this process; removed when dropped.
#[derive(Debug)]
pub struct SealedDir {
    dir: tempfile::TempDir,
    /// The folder itself, open and `flock`ed while this process uses it.
    _held: File,
}

impl SealedDir {
    /// Seal `files` (name, contents) into a fresh folder in `base`, a
    /// folder only this user can write. Stale folders of `prefix` that no
    /// process holds are removed first.
    pub fn create(base: &Path, prefix: &str, files: &[(&str, &[u8])]) -> io::Result<SealedDir> {
        remove_stale(base, prefix);
        let dir = tempfile::Builder::new()
            .prefix(&format!("{prefix}{}-", std::process::id()))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(base)?;
        let held = File::open(dir.path())?;
        super::lock::try_lock_exclusive(&held)?;
        for (name, contents) in files {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o400)
                .open(dir.path().join(name))?;
            file.write_all(contents)?;
            file.sync_all()?;
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o500))?;
        let sealed = SealedDir { dir, _held: held };
        check(sealed.path(), files).map_err(io::Error::other)?;
        Ok(sealed)
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SealedDir {
    fn drop(&mut self) {
        // Writable again, so that its entries can be removed (the TempDir
        // removes the folder after this).
        let _ = std::fs::set_permissions(self.dir.path(), std::fs::Permissions::from_mode(0o700));
    }
}

/// Whether `dir` still holds exactly `files` as sealed: the user's own,
/// nobody's to write, each file with its contents, nothing added, nothing
/// removed. `Err` says what changed.
pub fn check(dir: &Path, files: &[(&str, &[u8])]) -> Result<(), String> {
    // SAFETY: geteuid takes nothing and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("cannot read it: {e}"))?;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o222 != 0 {
        return Err(format!(
            "it is no longer a read-only folder of this user's (mode {:o})",
            meta.permissions().mode() & 0o7777
        ));
    }
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| format!("cannot list it: {e}"))? {
        let entry = entry.map_err(|e| format!("cannot list it: {e}"))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((_, contents)) = files.iter().find(|(sealed, _)| *sealed == name) else {
            return Err(format!("`{}` was added to it", name.escape_debug()));
        };
        let meta = std::fs::symlink_metadata(entry.path())
            .map_err(|e| format!("cannot read {name}: {e}"))?;
        let same = meta.is_file()
            && meta.len() == contents.len() as u64
            && meta.permissions().mode() & 0o222 == 0
            && std::fs::read(entry.path()).is_ok_and(|read| read == *contents);
        if !same {
            return Err(format!("`{name}` was changed"));
        }
        seen += 1;
    }
    if seen != files.len() {
        return Err("a file of it was removed".to_string());
    }
    Ok(())
}

/// Remove the sealed folders of `prefix` in `base` whose process is gone
/// (nobody holds their lock). Only names [`SealedDir::create`] gives,
/// `<prefix><pid>-<random>`, are touched.
fn remove_stale(base: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = name
            .strip_prefix(prefix)
            .and_then(|rest| rest.split_once('-'))
            .is_some_and(|(pid, _)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()));
        if !ours || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        // Held while it is removed, so no process can take it meanwhile.
        let Some(_free) = File::open(&path)
            .ok()
            .filter(|dir| super::lock::try_lock_exclusive(dir).is_ok())
        else {
            continue;
        };
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700));
        let _ = super::tree::remove_tree(&path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILES: [(&str, &[u8]); 2] = [("plugin.py", b"print('hi')\n"), ("__pycache__", b"")];

    #[test]
    fn a_sealed_folder_is_checked_and_removed_with_its_owner() {
        let base = tempfile::tempdir().expect("base");
        let sealed = SealedDir::create(base.path(), "t-", &FILES).expect("sealed");
        let path = sealed.path().to_path_buf();
        assert_eq!(check(&path, &FILES), Ok(()));
        // Made writable and changed, as a workload of the same user can.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        assert!(check(&path, &FILES).is_err(), "a writable folder");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o500)).expect("chmod");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        std::fs::write(path.join("extra.pyc"), "x").expect("plant");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o500)).expect("chmod");
        let changed = check(&path, &FILES).expect_err("a planted file");
        assert!(changed.contains("extra.pyc"), "{changed}");
        drop(sealed);
        assert!(!path.exists(), "removed with its owner");
    }

    #[test]
    fn only_folders_nobody_holds_are_removed_as_stale() {
        let base = tempfile::tempdir().expect("base");
        let held = SealedDir::create(base.path(), "t-", &FILES).expect("held");
        // A killed process's folder: the same shape, no lock held.
        let stale = base.path().join("t-999999-abcdef");
        std::fs::create_dir(&stale).expect("stale");
        std::fs::write(stale.join("plugin.py"), "old").expect("file");
        // Someone else's names are not touched.
        let other = base.path().join("t-notapid");
        std::fs::create_dir(&other).expect("other");
        let second = SealedDir::create(base.path(), "t-", &FILES).expect("second");
        assert!(!stale.exists(), "the stale folder is removed");
        assert!(held.path().exists(), "a held one stays");
        assert!(other.exists(), "a name not of this shape stays");
        drop(second);
    }
}
