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
mod summary;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use pickle::PickleError;

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
/// The most sites results.json keeps per case (the largest).
pub const MAX_SITES: usize = 200;
/// The most sites the lock keeps per case.
pub const LOCKED_SITES: usize = 50;
/// The most sites report.html draws per case.
pub const CHARTED_SITES: usize = 10;
/// How many sites each rank keeps (results.json's and the lock's
/// `ranks[].allocation_sites`).
pub const RANK_SITES: usize = 10;

/// What the snapshots a case left say about its allocations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocationSites {
    /// The snapshot files read, relative to the case's folder.
    pub files: Vec<String>,
    /// Whether the sites are those live at each device's peak (its trace
    /// replayed) or at the dump (no trace recorded, or a file too large).
    pub from: SitesFrom,
    /// The trace had lost its start: the peak is estimated.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
    /// Devices the snapshots cover.
    pub devices: usize,
    /// Allocated bytes at the peak (or the dump), every device and rank.
    pub allocated_bytes: u64,
    /// Reserved by the caching allocator at the dump (its segments).
    pub reserved_bytes: u64,
    /// Reserved less allocated, at the dump.
    pub fragmentation_bytes: u64,
    /// Reserved by CUDA graph pools (or other private pools).
    #[serde(skip_serializing_if = "is_zero")]
    pub graph_pool_bytes: u64,
    /// The allocator's settings, as the snapshot records them.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub allocator_settings: BTreeMap<String, String>,
    /// Largest first.
    pub sites: Vec<Site>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Each rank's own sites (a `memory_snapshot.rank-N.pickle`), its
    /// largest [`RANK_SITES`]; they go to the case's `ranks[]`.
    #[serde(skip)]
    pub by_rank: BTreeMap<u32, Vec<Site>>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where the sites were taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SitesFrom {
    /// Live at each device's peak, its trace replayed.
    #[default]
    Peak,
    /// Live when the snapshot was dumped.
    Dump,
}

/// An allocation site: the user's frame(s) that allocated, and what its
/// allocations held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    /// `model.py:88 attention` (with `sites = { depth = N }`, N frames
    /// joined by ` ← `, innermost first).
    pub site: String,
    pub bytes: u64,
    /// Blocks live from it.
    pub count: u64,
}

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

impl AllocationSites {
    /// Another rank's (or file's) summary added: sites and totals summed.
    fn add(&mut self, other: AllocationSites, already: bool) {
        if !already {
            let files = std::mem::take(&mut self.files);
            let notes = std::mem::take(&mut self.notes);
            *self = other;
            self.files = files;
            self.notes.splice(0..0, notes);
            return;
        }
        self.estimated |= other.estimated;
        if other.from == SitesFrom::Dump {
            self.from = SitesFrom::Dump;
        }
        self.devices += other.devices;
        self.allocated_bytes = self.allocated_bytes.saturating_add(other.allocated_bytes);
        self.reserved_bytes = self.reserved_bytes.saturating_add(other.reserved_bytes);
        self.fragmentation_bytes = self
            .fragmentation_bytes
            .saturating_add(other.fragmentation_bytes);
        self.graph_pool_bytes = self.graph_pool_bytes.saturating_add(other.graph_pool_bytes);
        for (key, value) in other.allocator_settings {
            self.allocator_settings.entry(key).or_insert(value);
        }
        self.sites.extend(other.sites);
        self.notes.extend(other.notes);
    }
}

/// How a case's sites changed against its baseline's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SiteGrowth {
    /// Sites that grew, most first (new ones with `before` 0).
    pub grown: Vec<SiteChange>,
    /// Allocator settings that changed: key, before, after.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub settings: Vec<(String, String, String)>,
}

/// One site's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteChange {
    pub site: String,
    pub before: u64,
    pub after: u64,
    /// Not among the baseline's sites.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub new: bool,
}

/// The sites that grew most from `before` to `after` (at most `limit`),
/// and the allocator settings that changed. A site missing from `before`
/// is new, unless the baseline kept only its largest sites and this one
/// is smaller than the least of them (then it may have been there).
pub fn grown(before: &AllocationSites, after: &AllocationSites, limit: usize) -> SiteGrowth {
    let grown = grown_sites(&before.sites, &after.sites, LOCKED_SITES, limit);
    let mut settings = Vec::new();
    for (key, value) in &after.allocator_settings {
        if let Some(old) = before.allocator_settings.get(key) {
            if old != value {
                settings.push((key.clone(), old.clone(), value.clone()));
            }
        }
    }
    SiteGrowth { grown, settings }
}

/// The sites of `after` that grew most against `before` (largest first,
/// at most `limit`), which kept its largest `kept`: a site missing from a
/// full `before` and smaller than the least of it may have been there,
/// and is not called new.
pub fn grown_sites(before: &[Site], after: &[Site], kept: usize, limit: usize) -> Vec<SiteChange> {
    let floor = if before.len() >= kept {
        before.last().map_or(0, |s| s.bytes)
    } else {
        0
    };
    let mut grown: Vec<SiteChange> = after
        .iter()
        .filter_map(|site| {
            let old = before.iter().find(|s| s.site == site.site);
            match old {
                Some(old) if site.bytes > old.bytes => Some(SiteChange {
                    site: site.site.clone(),
                    before: old.bytes,
                    after: site.bytes,
                    new: false,
                }),
                Some(_) => None,
                None if site.bytes > floor => Some(SiteChange {
                    site: site.site.clone(),
                    before: 0,
                    after: site.bytes,
                    new: true,
                }),
                None => None,
            }
        })
        .collect();
    grown.sort_by_key(|c| std::cmp::Reverse(c.after - c.before));
    grown.truncate(limit);
    grown
}

impl SiteGrowth {
    pub fn is_empty(&self) -> bool {
        self.grown.is_empty() && self.settings.is_empty()
    }

    /// One line: `model.py:88 attention +500.0 MiB (400.0 MiB → 900.0 MiB); new: ...`.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .grown
            .iter()
            .map(|c| {
                if c.new {
                    format!("{} new, {}", c.site, crate::units::Bytes(c.after))
                } else {
                    format!(
                        "{} +{} ({} → {})",
                        c.site,
                        crate::units::Bytes(c.after - c.before),
                        crate::units::Bytes(c.before),
                        crate::units::Bytes(c.after)
                    )
                }
            })
            .collect();
        parts.extend(
            self.settings
                .iter()
                .map(|(key, old, new)| format!("allocator {key} {old} → {new}")),
        );
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests;
