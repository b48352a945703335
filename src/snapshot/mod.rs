//! Allocation sites from torch memory snapshots: which allocations were
//! live at a case's GPU peak, grouped by the user's code that made them.
//!
//! A case leaves snapshots in its folder — the probe's `record_memory()`
//! (`OOMGATE_SNAPSHOT`), or the workload's own
//! `torch.cuda.memory._dump_snapshot()` — named `memory_snapshot.pickle`,
//! `memory_snapshot_oom.pickle`, and `memory_snapshot.rank-N.pickle` /
//! `memory_snapshot_oom.rank-N.pickle` per rank. [`read_case`] reads them
//! (opened with `O_NOFOLLOW`: a planted link is refused), `pickle` reads
//! the pickle without executing anything, and `summary` replays each
//! device's trace to its peak. A case's sites are the sum of its ranks'.
//! [`grown`] compares a case's sites with its baseline's.

mod pickle;
mod sites;
mod summary;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use pickle::PickleError;
pub use sites::{
    AllocationSites, CHARTED_SITES, LOCKED_SITES, MAX_SITES, RANK_SITES, Site, SiteChange,
    SiteGrowth, SitesFrom, grown, grown_sites,
};

/// Files over this size are summarised from `segments` alone (the blocks
/// live at the dump): their traces are dropped as they are read.
pub const TRACE_LIMIT_BYTES: u64 = 1 << 30;
/// The longest a case's snapshots (or one given to `oomgate sites`) are
/// read for: past it, the rest is "not read".
pub const READ_LIMIT: Duration = Duration::from_secs(60);
/// The memory a snapshot's values may take while it is read: this many
/// times the file's size, and [`MEMORY_FLOOR`] more.
pub const MEMORY_PER_BYTE: u64 = 4;
pub const MEMORY_FLOOR: u64 = 64 << 20;
/// The reading thread's stack: nothing it does recurses.
const READER_STACK: usize = 8 << 20;

/// Why a case's snapshot could not be summarised (a note, never fatal).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{file}: not read: {reason}")]
    Refused { file: String, reason: String },
    #[error("{file}: {source}")]
    Pickle { file: String, source: PickleError },
    #[error("{file}: {reason}")]
    Format { file: String, reason: String },
}

/// The snapshot files of a case folder: the end-of-run ones, else the
/// OOM ones, each rank's.
fn snapshot_files(case_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(case_dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.starts_with("memory_snapshot") && name.ends_with(".pickle"))
        .collect();
    names.sort();
    // The end-of-run snapshots hold the whole run; the OOM ones only up to
    // the failure: read those only where a rank left no other.
    let exit: Vec<&String> = names.iter().filter(|n| !n.contains("_oom")).collect();
    let exit_ranks: HashSet<Option<u32>> = exit.iter().map(|n| rank_of(n)).collect();
    let mut chosen: Vec<PathBuf> = exit.iter().map(|n| case_dir.join(n)).collect();
    chosen.extend(
        names
            .iter()
            .filter(|n| n.contains("_oom") && !exit_ranks.contains(&rank_of(n)))
            .map(|n| case_dir.join(n)),
    );
    chosen
}

/// The rank a snapshot file is of: `memory_snapshot.rank-3.pickle`,
/// `memory_snapshot_oom.rank-3.pickle`.
fn rank_of(name: &str) -> Option<u32> {
    name.trim_end_matches(".pickle")
        .rsplit_once(".rank-")
        .and_then(|(_, rank)| rank.parse().ok())
}

/// The allocation sites of the snapshots a case left in its folder;
/// `None` when it left none. Problems with a file are notes. They are read
/// within [`READ_LIMIT`] in all.
pub fn read_case(case_dir: &Path, depth: usize, cwd: &Path) -> Option<AllocationSites> {
    read_case_within(case_dir, depth, cwd, READ_LIMIT)
}

fn read_case_within(
    case_dir: &Path,
    depth: usize,
    cwd: &Path,
    limit: Duration,
) -> Option<AllocationSites> {
    let deadline = Instant::now() + limit;
    let files = snapshot_files(case_dir);
    if files.is_empty() {
        return None;
    }
    let mut total = AllocationSites::default();
    let mut by_rank = BTreeMap::new();
    let mut read_any = false;
    for file in &files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match read_file_by(file, &name, depth, cwd, deadline, limit) {
            Ok(summary) => {
                if let Some(rank) = rank_of(&name) {
                    let sites = summary.sites.iter().take(RANK_SITES).cloned().collect();
                    by_rank.insert(rank, sites);
                }
                total.add(summary, read_any);
                total.files.push(name);
                read_any = true;
            }
            Err(e) => total.notes.push(e.to_string()),
        }
    }
    total.sites = summed(std::mem::take(&mut total.sites));
    total.sites.truncate(MAX_SITES);
    total.by_rank = by_rank;
    Some(total)
}

/// Sites of the same name as one, largest first.
fn summed(sites: Vec<Site>) -> Vec<Site> {
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut out: Vec<Site> = Vec::new();
    for site in sites {
        match index.get(&site.site) {
            Some(&i) => {
                out[i].bytes = out[i].bytes.saturating_add(site.bytes);
                out[i].count = out[i].count.saturating_add(site.count);
            }
            None => {
                index.insert(site.site.clone(), out.len());
                out.push(site);
            }
        }
    }
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    out
}

/// One snapshot file summarised, within [`READ_LIMIT`].
pub fn read_file(
    path: &Path,
    name: &str,
    depth: usize,
    cwd: &Path,
) -> Result<AllocationSites, SnapshotError> {
    read_file_by(
        path,
        name,
        depth,
        cwd,
        Instant::now() + READ_LIMIT,
        READ_LIMIT,
    )
}

/// One snapshot file summarised on a thread of its own, so that nothing
/// it holds can end the caller: read by `deadline` (a limit of `limit`),
/// in at most [`MEMORY_PER_BYTE`] times its size and [`MEMORY_FLOOR`]
/// more; past either, or should the reader fail, it is "not read".
fn read_file_by(
    path: &Path,
    name: &str,
    depth: usize,
    cwd: &Path,
    deadline: Instant,
    limit: Duration,
) -> Result<AllocationSites, SnapshotError> {
    let refused = |reason: String| SnapshotError::Refused {
        file: name.to_string(),
        reason,
    };
    let late = || refused(format!("reading took longer than {} s", limit.as_secs()));
    if Instant::now() >= deadline {
        return Err(late());
    }
    let (path, owned_name, cwd) = (path.to_path_buf(), name.to_string(), cwd.to_path_buf());
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("snapshot".into())
        .stack_size(READER_STACK)
        .spawn(move || {
            let summary = read_here(&path, &owned_name, depth, &cwd, deadline);
            // The caller may have stopped waiting.
            let _ = send.send(summary);
        })
        .map_err(|e| refused(format!("cannot start its reader: {e}")))?;
    // The reader looks at the clock itself; a second more is for the
    // summary after it.
    let wait = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(1);
    match receive.recv_timeout(wait) {
        Ok(Err(SnapshotError::Pickle {
            source: PickleError::Late,
            ..
        }))
        | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(late()),
        Ok(Err(SnapshotError::Pickle {
            source: PickleError::Bound(reason),
            ..
        })) => Err(refused(reason)),
        Ok(result) => result,
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            Err(refused("its reader failed".into()))
        }
    }
}

/// One snapshot file summarised on this thread.
fn read_here(
    path: &Path,
    name: &str,
    depth: usize,
    cwd: &Path,
    deadline: Instant,
) -> Result<AllocationSites, SnapshotError> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt;
    let refused = |reason: String| SnapshotError::Refused {
        file: name.to_string(),
        reason,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => refused("it is a symbolic link".into()),
            _ => refused(e.to_string()),
        })?;
    let meta = file.metadata().map_err(|e| refused(e.to_string()))?;
    if !meta.is_file() {
        return Err(refused("not a regular file".into()));
    }
    let keep_events = meta.len() <= TRACE_LIMIT_BYTES;
    let limits = pickle::Limits {
        memory: usize::try_from(
            meta.len()
                .saturating_mul(MEMORY_PER_BYTE)
                .saturating_add(MEMORY_FLOOR),
        )
        .unwrap_or(usize::MAX),
        deadline: Some(deadline),
        size: Some(meta.len()),
    };
    // Only the bytes it had when opened: a file that grows is not followed.
    let value = pickle::read(
        std::io::BufReader::with_capacity(1 << 20, file.take(meta.len())),
        keep_events,
        limits,
    )
    .map_err(|source| SnapshotError::Pickle {
        file: name.to_string(),
        source,
    })?;
    let mut summary =
        summary::summarise(&value, depth, cwd).map_err(|reason| SnapshotError::Format {
            file: name.to_string(),
            reason,
        })?;
    if !keep_events {
        summary.from = SitesFrom::Dump;
        summary.notes.push(format!(
            "{name} is {}, over {}: summarised from the blocks live at the dump, its trace left out",
            crate::units::Bytes(meta.len()),
            crate::units::Bytes(TRACE_LIMIT_BYTES)
        ));
    }
    Ok(summary)
}

#[cfg(test)]
mod tests;
