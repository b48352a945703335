//! Room kept for the reports on the out dir's file system.
//!
//! A workload that fills the disk must not cost the record of what ran:
//! when the run starts, [`Reserve::make`] allocates a file of
//! [`reserve_bytes`] in the out dir (`.oomgate-reserve`); a checkpoint that
//! fails for lack of space frees half of it and is written again, and the
//! final reports free the rest first. What is left on disk after a full
//! disk is then the run's real end — every finished case with its status,
//! the rest not run, the fault named — not a stale checkpoint that lists a
//! finished case as `running`.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// The reserve's name in the out dir. A reserve left by a killed oomgate
/// is replaced by the next run's.
pub const RESERVE_NAME: &str = ".oomgate-reserve";

/// Room for the final results.json and junit.xml (without log tails, if it
/// comes to that) of `cases` cases: about 8 KiB a case and 64 KiB more,
/// at most 64 MiB.
pub fn reserve_bytes(cases: usize) -> u64 {
    (64 * 1024 + 8 * 1024 * cases as u64).min(64 * 1024 * 1024)
}

/// A file of allocated blocks, freed when the reports need the room.
#[derive(Debug)]
pub struct Reserve {
    path: PathBuf,
    file: Option<File>,
    bytes: u64,
}

impl Reserve {
    /// Allocate `bytes` at `path` (blocks really taken: `posix_fallocate`,
    /// which writes zeros where the file system cannot allocate). A file
    /// system too full for it is an error naming the path: the run's
    /// reports would have no room either.
    pub fn make(path: &Path, bytes: u64) -> io::Result<Reserve> {
        let with_path = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        // Only ever oomgate's own file: a link planted in its place is
        // removed, not followed.
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(with_path(e)),
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(with_path)?;
        let length = libc::off_t::try_from(bytes).unwrap_or(libc::off_t::MAX);
        // SAFETY: a valid descriptor owned by `file`; offsets in range.
        let rc =
            unsafe { libc::posix_fallocate(std::os::fd::AsRawFd::as_raw_fd(&file), 0, length) };
        if rc != 0 {
            let _ = std::fs::remove_file(path);
            return Err(with_path(io::Error::from_raw_os_error(rc)));
        }
        Ok(Reserve {
            path: path.to_path_buf(),
            file: Some(file),
            bytes,
        })
    }

    /// Free half of what is left; whether anything was freed.
    pub fn release_half(&mut self) -> bool {
        let keep = self.bytes / 2;
        match &self.file {
            Some(file) if self.bytes > 0 && file.set_len(keep).is_ok() => {
                self.bytes = keep;
                true
            }
            _ => false,
        }
    }

    /// Free all of it: the file goes.
    pub fn release(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.path);
            self.bytes = 0;
        }
    }
}

impl Drop for Reserve {
    fn drop(&mut self) {
        self.release();
    }
}

/// Whether a write failed for lack of space (or quota).
pub fn out_of_space(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOSPC) | Some(libc::EDQUOT)
    ) || error.to_string().contains("No space left on device")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_takes_its_blocks_and_gives_them_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(RESERVE_NAME);
        // A file a killed run left is replaced.
        std::fs::write(&path, "stale").expect("stale");
        let mut reserve = Reserve::make(&path, 256 * 1024).expect("reserve");
        let blocks = |path: &Path| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(path)
                .map(|m| m.blocks() * 512)
                .unwrap_or(0)
        };
        assert!(blocks(&path) >= 256 * 1024, "allocated: {}", blocks(&path));
        assert!(reserve.release_half());
        assert_eq!(
            std::fs::metadata(&path).map(|m| m.len()).ok(),
            Some(128 * 1024)
        );
        reserve.release();
        assert!(!path.exists());
        assert!(!reserve.release_half());
    }

    #[test]
    fn the_reserve_grows_with_the_suite_up_to_a_bound() {
        assert_eq!(reserve_bytes(0), 64 * 1024);
        assert_eq!(reserve_bytes(10), 144 * 1024);
        assert_eq!(reserve_bytes(1_000_000), 64 * 1024 * 1024);
    }
}
