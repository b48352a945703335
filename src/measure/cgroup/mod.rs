//! One memory cgroup per case: the kernel's own account of what the case's
//! processes were charged, with no sampling gap and no double counting.
//!
//! [`MemoryHierarchy::discover`] finds the hierarchy that has the `memory`
//! controller (machines mix versions: a cgroup2 mount without `memory` next
//! to a v1 `memory` hierarchy is common) from `/proc/self/mountinfo` and
//! `/proc/self/cgroup`, and oomgate's own cgroup in it. Each run of a case
//! gets a child [`CaseCgroup`] beside nothing else, which the case's
//! processes join before they execute the workload (see `run::supervise`),
//! so every descendant — setsid'd, daemonised, re-parented — is charged to
//! it. It is removed after the case — when oomgate was killed, by the
//! instances' supervisors once they have emptied it, or by a later run
//! (`clear`, `stale`).
//!
//! What is read, and why:
//! - the charged peak (v2 `memory.peak`, v1 `memory.max_usage_in_bytes`):
//!   exact, but it includes page cache the case brought in (reading a
//!   10 GiB checkpoint), which the kernel reclaims under pressure, so it is
//!   reported beside the gated figure and never gated by default;
//! - anonymous + shmem/tmpfs memory (`memory.stat`), sampled each tick: the
//!   part of the charge that cannot be reclaimed without swap, one of the
//!   floors the gated host peak is the largest of (see `measure::host`);
//! - the charge now (`memory.current`, `memory.usage_in_bytes`), for the
//!   timeline;
//! - OOM kills (v2 `memory.events` `oom_kill`, v1 `memory.oom_control`
//!   `oom_kill`), counted in the victim's cgroup whether the kill came from
//!   a cgroup limit above (a container's) or from the whole host, so an OOM
//!   kill of a case is a certainty, not a guess from exit status 137.
//!
//! The one design choice a newcomer may question: the case cgroups are
//! children of oomgate's own cgroup. In v1 that needs only write access; in
//! v2 it needs `memory` in that cgroup's `cgroup.subtree_control`, which
//! the kernel refuses while processes sit in the cgroup itself (the "no
//! internal processes" rule). When oomgate is alone there (a delegated
//! scope of its own) it moves itself into a leaf to make room; it never
//! moves anyone else's process (a CI agent sharing its cgroup): it then
//! falls back to /proc and says why.

pub mod clear;
mod hierarchy;
mod stale;

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use hierarchy::{MemoryHierarchy, Unavailable};
pub use stale::{STALE_KILL_LIMIT, StaleCgroup};

/// The cgroup interface a hierarchy speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CgroupVersion {
    V1,
    V2,
}

/// The memory cgroup of one run of a case, its files kept open: one
/// `pread` each per tick.
#[derive(Debug)]
pub struct CaseCgroup {
    pub version: CgroupVersion,
    pub dir: PathBuf,
    /// `cgroup.procs`, as a C string: a process joins by writing `0` to it
    /// between fork and exec, where nothing may allocate.
    procs: CString,
    stat: fs::File,
    current: fs::File,
    /// v2 `memory.peak` is missing before Linux 5.19: the peak of the
    /// sampled charge stands in, and says so.
    peak: Option<fs::File>,
    events: fs::File,
    /// v1's `memory.max_usage_in_bytes` opened for writing, once a reset
    /// was asked for ([`CaseCgroup::reset_peak`]).
    reset: Option<fs::File>,
    /// Everything its processes hold is charged to it: they were in it
    /// from their start, or their charge moved with them
    /// ([`CaseCgroup::join`]).
    pub holds_all: bool,
    sampled_charge_peak: u64,
    buffer: Vec<u8>,
}

/// The cgroup's figures at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupNow {
    /// Everything charged now, page cache included.
    pub charged_bytes: u64,
    /// Anonymous memory plus shmem/tmpfs: what cannot be reclaimed without
    /// swap.
    pub anon_shmem_bytes: u64,
}

/// How the charged peak was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ChargedPeakSource {
    /// `memory.peak` or `memory.max_usage_in_bytes`: exact.
    #[serde(rename = "kernel")]
    Kernel,
    /// The largest charge sampled (v2 without `memory.peak`).
    #[serde(rename = "sampled")]
    Sampled,
}

impl CaseCgroup {
    pub(super) fn open(version: CgroupVersion, dir: PathBuf) -> io::Result<Self> {
        let file = |name: &str| fs::File::open(dir.join(name));
        let (current, peak, events) = match version {
            CgroupVersion::V1 => (
                file("memory.usage_in_bytes")?,
                Some(file("memory.max_usage_in_bytes")?),
                file("memory.oom_control")?,
            ),
            CgroupVersion::V2 => (
                file("memory.current")?,
                file("memory.peak").ok(),
                file("memory.events")?,
            ),
        };
        let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
            .map_err(|_| io::Error::other("cgroup path holds a NUL byte"))?;
        Ok(CaseCgroup {
            version,
            stat: file("memory.stat")?,
            current,
            peak,
            events,
            procs,
            dir,
            reset: None,
            holds_all: true,
            sampled_charge_peak: 0,
            buffer: vec![0; 8192],
        })
    }

    /// The path a process writes `0` to in order to join.
    pub fn procs_path(&self) -> &CString {
        &self.procs
    }

    fn read(&mut self, which: Which) -> io::Result<&str> {
        let file = match which {
            Which::Stat => &self.stat,
            Which::Current => &self.current,
            Which::Peak => self.peak.as_ref().ok_or(io::ErrorKind::NotFound)?,
            Which::Events => &self.events,
        };
        let length = file.read_at(&mut self.buffer, 0)?;
        std::str::from_utf8(&self.buffer[..length]).map_err(io::Error::other)
    }

    /// The charge and its unreclaimable part now.
    pub fn now(&mut self) -> io::Result<CgroupNow> {
        let charged_bytes = parse_number(self.read(Which::Current)?)?;
        let anon_shmem_bytes = self.anon_shmem_now()?;
        self.sampled_charge_peak = self.sampled_charge_peak.max(charged_bytes);
        Ok(CgroupNow {
            charged_bytes,
            anon_shmem_bytes,
        })
    }

    /// The anonymous + shmem charge now, alone: one read of `memory.stat`
    /// (about 3 µs on cgroup v1), cheap enough to be made every few
    /// milliseconds, since the kernel keeps no maximum of it.
    pub fn anon_shmem_now(&mut self) -> io::Result<u64> {
        let version = self.version;
        anon_shmem(version, self.read(Which::Stat)?)
    }

    /// The largest charge of the cgroup's life, page cache included.
    pub fn charged_peak(&mut self) -> Option<(u64, ChargedPeakSource)> {
        if self.peak.is_some() {
            if let Ok(peak) = self.read(Which::Peak).and_then(parse_number) {
                return Some((peak, ChargedPeakSource::Kernel));
            }
        }
        (self.sampled_charge_peak > 0)
            .then_some((self.sampled_charge_peak, ChargedPeakSource::Sampled))
    }

    /// Move a running process (`pid`, with all its threads) into the
    /// cgroup. On v1 its charge moves with it (`move_charge_at_immigrate`),
    /// so the cgroup holds what it held before; v2 moves no charge, and the
    /// cgroup then counts what it takes from now on.
    pub fn join(&mut self, pid: i32) -> io::Result<()> {
        // Anonymous and file pages both; refused on a kernel without it,
        // which then moves nothing (as v2).
        self.holds_all = self.version == CgroupVersion::V1
            && fs::write(self.dir.join("memory.move_charge_at_immigrate"), "3").is_ok();
        fs::write(self.dir.join("cgroup.procs"), pid.to_string())
    }

    /// Start the kernel's charged peak again from the charge now: v1's
    /// `memory.max_usage_in_bytes` is reset by writing `0` to it. v2's
    /// `memory.peak` is only reset per open file (Linux 6.12), which this
    /// cgroup's files are not: unsupported there.
    pub fn reset_peak(&mut self) -> io::Result<()> {
        if self.version == CgroupVersion::V2 {
            return Err(io::ErrorKind::Unsupported.into());
        }
        let file = match &mut self.reset {
            Some(file) => file,
            None => self.reset.insert(
                fs::OpenOptions::new()
                    .write(true)
                    .open(self.dir.join("memory.max_usage_in_bytes"))?,
            ),
        };
        file.write_at(b"0", 0).map(drop)
    }

    /// Everything charged now, page cache included (one read).
    pub fn charged_now(&mut self) -> io::Result<u64> {
        parse_number(self.read(Which::Current)?)
    }

    /// Processes of the cgroup killed by the kernel's OOM killer.
    pub fn oom_kills(&mut self) -> Option<u64> {
        let text = self.read(Which::Events).ok()?;
        keyed(text, "oom_kill")
    }

    /// Whether no live process is in the cgroup or any cgroup below it (a
    /// workload may make its own: a nested oomgate does). Zombies are not
    /// listed in `cgroup.procs`. An error is not "empty".
    pub fn is_empty(&self) -> io::Result<bool> {
        subtree_is_empty(&self.dir, 0)
    }

    /// Remove the cgroup; it must be empty. A few retries: the kernel
    /// finishes tearing down exited processes asynchronously.
    pub fn remove(self) -> io::Result<()> {
        let CaseCgroup { dir, .. } = self;
        let mut last = Ok(());
        for _ in 0..50 {
            last = fs::remove_dir(&dir);
            match &last {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(_) => break,
            }
        }
        last.map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))
    }
}

fn subtree_is_empty(dir: &Path, depth: u32) -> io::Result<bool> {
    if depth > 32 {
        return Ok(false); // deeper than anything sane: let the caller scan
    }
    let procs = fs::read_to_string(dir.join("cgroup.procs"))?;
    if procs.lines().any(|line| !line.trim().is_empty()) {
        return Ok(false);
    }
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() && !subtree_is_empty(&entry.path(), depth + 1)? {
            return Ok(false);
        }
    }
    Ok(true)
}

#[derive(Clone, Copy)]
enum Which {
    Stat,
    Current,
    Peak,
    Events,
}

fn parse_number(text: &str) -> io::Result<u64> {
    text.trim()
        .parse()
        .map_err(|_| io::Error::other(format!("not a number: {:?}", text.trim())))
}

/// The value of `key` in a `key value` per line file.
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(' ')?;
        (name == key).then(|| value.trim().parse().ok()).flatten()
    })
}

/// Anonymous + shmem bytes from `memory.stat`. v1's `total_rss` is
/// anonymous memory (and swap cache) of the cgroup and its children; shmem
/// is part of `cache` there and listed on its own as `total_shmem`.
fn anon_shmem(version: CgroupVersion, stat: &str) -> io::Result<u64> {
    let (anon, shmem) = match version {
        CgroupVersion::V1 => ("total_rss", "total_shmem"),
        CgroupVersion::V2 => ("anon", "shmem"),
    };
    match (keyed(stat, anon), keyed(stat, shmem)) {
        (Some(a), Some(s)) => Ok(a.saturating_add(s)),
        _ => Err(io::Error::other(format!(
            "memory.stat lacks `{anon}` or `{shmem}`"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anon_and_shmem_per_version() {
        let v1 = "cache 4096\nrss 100\nshmem 0\ntotal_cache 314572800\ntotal_rss 1048576\ntotal_shmem 314572800\n";
        assert_eq!(
            anon_shmem(CgroupVersion::V1, v1).ok(),
            Some(1_048_576 + 314_572_800)
        );
        let v2 = "anon 2097152\nfile 999\nkernel 5\nshmem 4096\nfile_mapped 1\n";
        assert_eq!(
            anon_shmem(CgroupVersion::V2, v2).ok(),
            Some(2_097_152 + 4096)
        );
        // `anon_thp` must not be read as `anon`.
        let thp_first = "anon_thp 7\nanon 1\nshmem 2\n";
        assert_eq!(anon_shmem(CgroupVersion::V2, thp_first).ok(), Some(3));
        assert!(anon_shmem(CgroupVersion::V2, "file 1\n").is_err());
    }

    #[test]
    fn oom_kill_counters() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(keyed(v1, "oom_kill"), Some(2));
        let v2 = "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(keyed(v2, "oom_kill"), Some(1));
        assert_eq!(keyed("oom_kill_disable 0\n", "oom_kill"), None);
    }
}
