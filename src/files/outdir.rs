//! The out dir: claimed with a marker so oomgate writes and deletes only
//! in a folder of its own, held by one oomgate at a time (an exclusive
//! `flock` on the marker), and its own folders made real where a workload
//! left a link.

use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::lock::{open_lock_file, try_lock_exclusive, try_lock_shared};
use super::paths::{follow_links, with_path};

/// The file that marks a folder as an oomgate out dir: oomgate writes and
/// deletes files in no other folder.
pub const OUT_DIR_MARKER: &str = ".oomgate-out";

/// What a folder without a marker may hold and still be taken as an out
/// dir: `lost+found`, of a fresh volume.
const OUT_DIR_EMPTY: [&str; 1] = ["lost+found"];

/// What an earlier oomgate (before the marker) left in an out dir: the
/// names [`claim_out_dir`] adopts when asked to (`--adopt-out-dir`).
const OUT_DIR_LAYOUT: [&str; 6] = [
    "results.json",
    "junit.xml",
    "summary.md",
    "report.html",
    "cases",
    "lost+found",
];

/// How many of a refused folder's names its error lists.
const NAMES_LISTED: usize = 8;

/// Why a folder cannot be an out dir.
#[derive(Debug, thiserror::Error)]
pub enum OutDirError {
    #[error(
        "{} is not an oomgate out dir: it holds {}{}, and no {OUT_DIR_MARKER} marker. oomgate replaces and deletes files in its out dir, so it takes over no folder it did not mark; choose an empty or new folder with --out{}",
        dir.display(),
        examples.join(", "),
        if *more > 0 { format!(" and {more} more") } else { String::new() },
        if *adoptable {
            ", or, if an oomgate from before the marker wrote these, adopt the folder once with --adopt-out-dir"
        } else {
            ""
        }
    )]
    NotOurs {
        dir: PathBuf,
        /// The names found there (the first few, sorted).
        examples: Vec<String>,
        /// How many more there are.
        more: usize,
        /// Whether every name is of oomgate's own layout, so that
        /// `--adopt-out-dir` would take the folder.
        adoptable: bool,
    },
    /// Another oomgate holds the out dir's lock: two writers would delete
    /// each other's logs and replace each other's reports.
    #[error(
        "{} is in use by another oomgate{}: one run writes an out dir at a time; wait for it, or give this run its own --out",
        dir.display(),
        holder.map(|pid| format!(" (pid {pid})")).unwrap_or_default()
    )]
    InUse { dir: PathBuf, holder: Option<u32> },
    #[error("cannot write to {}: {source}", dir.display())]
    Io {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// An out dir held by this process: an exclusive `flock` on its marker,
/// released when the claim is dropped (or the process ends, however it
/// ends). Workloads do not inherit it (the descriptor is close-on-exec),
/// so a process a case leaves behind never holds the dir.
#[derive(Debug)]
pub struct OutDirClaim {
    _marker: std::fs::File,
    dir: PathBuf,
}

impl Drop for OutDirClaim {
    fn drop(&mut self) {
        let mut claimed = CLAIMED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(at) = claimed.iter().position(|dir| *dir == self.dir) {
            claimed.swap_remove(at);
        }
    }
}

/// The out dirs this process holds. Below one, [`case`] follows no link:
/// the folders there are oomgate's, and a workload may have swapped one.
static CLAIMED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// The out dir this process holds that `path` is in, if any.
pub(super) fn claimed_root(path: &Path) -> Option<PathBuf> {
    let claimed = CLAIMED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    claimed
        .iter()
        .filter(|dir| path.starts_with(dir))
        .max_by_key(|dir| dir.as_os_str().len())
        .cloned()
}

/// What the marker says, above the holder's pid.
const MARKER_TEXT: &str = "This folder is an oomgate out dir: oomgate replaces and deletes only the files it writes here.\nThe oomgate that writes here now (it holds a lock on this file):\n";

/// Make `dir` an out dir of oomgate's and hold it, or refuse it: a new or
/// empty folder is claimed with the marker file; a folder with anything in
/// it and no marker is someone else's ([`OutDirError::NotOurs`]) and left
/// untouched — with `adopt`, unless all it holds is oomgate's own layout
/// (an out dir of an oomgate from before the marker), which is claimed; a
/// folder another oomgate holds is [`OutDirError::InUse`], and left
/// untouched.
pub fn claim_out_dir(dir: &Path, adopt: bool) -> Result<OutDirClaim, OutDirError> {
    let io_error = |source| OutDirError::Io {
        dir: dir.to_path_buf(),
        source,
    };
    let marker = dir.join(OUT_DIR_MARKER);
    if std::fs::symlink_metadata(&marker).is_err() {
        refuse_foreign_dir(dir, adopt)?;
        std::fs::create_dir_all(dir).map_err(io_error)?;
    }
    let mut file = open_lock_file(&marker).map_err(io_error)?;
    if let Err(e) = try_lock_exclusive(&file) {
        if e.kind() == io::ErrorKind::WouldBlock {
            return Err(OutDirError::InUse {
                dir: dir.to_path_buf(),
                holder: marker_holder(&mut file),
            });
        }
        return Err(io_error(e));
    }
    // Held: say who holds it, for the next one that is refused.
    let text = format!("{MARKER_TEXT}pid {}\n", std::process::id());
    file.set_len(0)
        .and_then(|()| file.write_all_at(text.as_bytes(), 0))
        .map_err(io_error)?;
    CLAIMED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(dir.to_path_buf());
    Ok(OutDirClaim {
        _marker: file,
        dir: dir.to_path_buf(),
    })
}

/// A folder with anything in it and no marker (with `adopt`: anything
/// but oomgate's own layout).
fn refuse_foreign_dir(dir: &Path, adopt: bool) -> Result<(), OutDirError> {
    let mut names = Vec::new();
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.map_err(|source| OutDirError::Io {
                    dir: dir.to_path_buf(),
                    source,
                })?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if !OUT_DIR_EMPTY.contains(&name.as_str()) {
                    names.push(name);
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(OutDirError::Io {
                dir: dir.to_path_buf(),
                source,
            });
        }
    }
    let adoptable = names
        .iter()
        .all(|name| OUT_DIR_LAYOUT.contains(&name.as_str()));
    if names.is_empty() || (adopt && adoptable) {
        return Ok(());
    }
    if adopt {
        // Said: what keeps it from being adopted.
        names.retain(|name| !OUT_DIR_LAYOUT.contains(&name.as_str()));
    }
    names.sort();
    let more = names.len().saturating_sub(NAMES_LISTED);
    names.truncate(NAMES_LISTED);
    Err(OutDirError::NotOurs {
        dir: dir.to_path_buf(),
        examples: names
            .iter()
            // A name is anyone's: no control character reaches the terminal.
            .map(|name| name.escape_debug().to_string())
            .collect(),
        more,
        adoptable,
    })
}

/// The out dir another oomgate holds now that `path` (a report path the
/// user gave) is inside, with the holder's pid when it can be read:
/// writing there would replace what that run writes. Out dirs this
/// process holds are not another's.
pub fn held_out_dir_around(path: &Path) -> Option<(PathBuf, Option<u32>)> {
    let resolved = follow_links(path);
    let folder = super::paths::folder_of(&resolved);
    let folder = std::fs::canonicalize(folder).ok()?;
    let ours: Vec<PathBuf> = CLAIMED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter_map(|dir| std::fs::canonicalize(dir).ok())
        .collect();
    for dir in folder.ancestors() {
        if ours.iter().any(|own| own == dir) {
            return None;
        }
        let marker = dir.join(OUT_DIR_MARKER);
        let is_marker = std::fs::symlink_metadata(&marker).is_ok_and(|m| m.is_file());
        if !is_marker {
            continue;
        }
        let Ok(mut file) = std::fs::File::open(&marker) else {
            continue;
        };
        // A shared lock is refused only while an exclusive one is held.
        if try_lock_shared(&file).is_err() {
            return Some((dir.to_path_buf(), marker_holder(&mut file)));
        }
    }
    None
}

/// The pid the holder wrote into the marker, when it can be read.
fn marker_holder(file: &mut std::fs::File) -> Option<u32> {
    use std::io::Read;
    let mut text = String::new();
    file.take(4096).read_to_string(&mut text).ok()?;
    text.lines()
        .rev()
        .find_map(|line| line.strip_prefix("pid ")?.trim().parse().ok())
}

/// Make `path`, a folder of oomgate's layout in a claimed out dir
/// (`cases`), a real folder: a link or file a workload left under its name
/// is removed (the link, never what it points to) before the folder is
/// made, so nothing oomgate deletes or writes below it lands elsewhere.
pub fn own_folder(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(_) => std::fs::remove_file(path).map_err(|e| with_path(e, path))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(with_path(e, path)),
    }
    std::fs::create_dir_all(path).map_err(|e| with_path(e, path))
}
