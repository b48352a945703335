//! What a killed oomgate left: its case cgroups, `oomgate-<pid>-<n>`, are
//! normally emptied by its supervisors as it dies (see `run::teardown`),
//! but not when they were killed too (`kill -9` of every process of a job,
//! the OOM killer). A later run kills what such a cgroup still holds, says
//! so, and removes it ([`MemoryHierarchy::clear_stale`]). Only names of
//! oomgate's strict pattern are read, and never one whose owner may still
//! run: a pid that runs, or one that runs in another pid namespace sharing
//! this cgroup, keeps the cgroup as it is — a reused pid only delays the
//! clearing until a later run, where a mistake would kill a live oomgate's
//! case.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::MemoryHierarchy;
use super::clear;

impl MemoryHierarchy {
    /// Clear the cgroups an oomgate that no longer runs left here: those
    /// named `oomgate-<pid>-<n>`, `-probe<n>` or `-self` (nothing else is
    /// read) whose owner may not run any more (see
    /// `MemoryHierarchy::owner_may_run`). Whatever processes one still
    /// holds — a case of that oomgate's, which would hold its memory and
    /// GPUs into this run — get SIGKILL, again until none is left (for at
    /// most [`STALE_KILL_LIMIT`]), and the cgroup is removed. Returns one
    /// entry per cgroup that held processes, for the run to report; empty
    /// ones are removed without a word.
    pub fn clear_stale(&self) -> Vec<StaleCgroup> {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut cleared = Vec::new();
        let nested = std::cell::OnceCell::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(owner) = name.to_str().and_then(owner_of) else {
                continue;
            };
            if !entry.file_type().is_ok_and(|t| t.is_dir()) || self.owner_may_run(owner, &nested) {
                continue;
            }
            let dir = entry.path();
            let emptied = clear::empty_by_force(&dir, STALE_KILL_LIMIT);
            let removed = clear::remove_subtree(&dir, Duration::from_secs(1));
            match emptied {
                Ok(emptied) if emptied.killed.is_empty() => {}
                Ok(emptied) => cleared.push(StaleCgroup {
                    dir,
                    owner,
                    killed: emptied.killed.len(),
                    left: if emptied.empty {
                        removed.err().map(|e| e.to_string())
                    } else {
                        Some("processes stuck in the kernel did not exit".to_string())
                    },
                }),
                Err(e) => cleared.push(StaleCgroup {
                    dir,
                    owner,
                    killed: 0,
                    left: Some(format!("cannot list its processes: {e}")),
                }),
            }
        }
        cleared
    }

    /// Whether the oomgate of pid `owner` may still run: a process has that
    /// pid here, or — another oomgate sharing this cgroup from another pid
    /// namespace, where pids differ — a process in this cgroup, or in the
    /// owner's `oomgate-<owner>-self` leaf, has that pid in its own
    /// namespace (the last of `NSpid` in its status). `nested` caches the
    /// latter for this cgroup. A pid reused by another process keeps a
    /// stale cgroup until a later run: erring that way never kills a live
    /// oomgate's case.
    fn owner_may_run(&self, owner: i32, nested: &std::cell::OnceCell<Vec<i32>>) -> bool {
        if Path::new(&format!("/proc/{owner}")).exists() {
            return true;
        }
        let leaf = self.dir.join(format!("oomgate-{owner}-self"));
        nested
            .get_or_init(|| own_namespace_pids_in(&self.dir))
            .contains(&owner)
            || own_namespace_pids_in(&leaf).contains(&owner)
    }
}

/// How long a run keeps killing what a stale cgroup holds before it gives
/// up on processes stuck in the kernel and leaves the cgroup.
pub const STALE_KILL_LIMIT: Duration = Duration::from_secs(5);

/// A cgroup of an oomgate that no longer runs that still held processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleCgroup {
    pub dir: PathBuf,
    /// The pid of the oomgate that made it.
    pub owner: i32,
    /// Processes that got SIGKILL.
    pub killed: usize,
    /// Why the cgroup is still there; `None`: removed.
    pub left: Option<String>,
}

impl StaleCgroup {
    /// One line for the run's warnings.
    pub fn describe(&self) -> String {
        let what = format!(
            "killed {} process(es) left in {} by oomgate pid {}, which no longer runs",
            self.killed,
            self.dir.display(),
            self.owner
        );
        match &self.left {
            None => format!("{what}; the cgroup was removed"),
            Some(why) => format!("{what}; the cgroup is left: {why}"),
        }
    }
}

/// The pids, each in its own pid namespace, of the processes of the cgroup
/// at `dir` that live in a pid namespace below this one (none when it
/// cannot be read).
fn own_namespace_pids_in(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse::<i32>().ok())
        .filter_map(|pid| {
            let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            own_namespace_pid(&status).filter(|own| *own != pid)
        })
        .collect()
}

/// A process's pid in its own (innermost) pid namespace: the last field
/// of `NSpid:` in `/proc/<pid>/status`.
fn own_namespace_pid(status: &str) -> Option<i32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))?
        .split_ascii_whitespace()
        .last()?
        .parse()
        .ok()
}

/// The pid of the oomgate that made a cgroup named `oomgate-<pid>-<n>`,
/// `oomgate-<pid>-probe<n>` or `oomgate-<pid>-self`; `None` for any other
/// name.
fn owner_of(name: &str) -> Option<i32> {
    let rest = name.strip_prefix("oomgate-")?;
    let (pid, suffix) = rest.split_once('-')?;
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let ours = suffix == "self"
        || digits(suffix)
        || suffix
            .strip_prefix("probe")
            .is_some_and(|n| n.is_empty() || digits(n));
    if !ours || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_own_names_are_stale_cleanup_candidates() {
        assert_eq!(owner_of("oomgate-1234-7"), Some(1234));
        assert_eq!(owner_of("oomgate-1234-probe"), Some(1234));
        assert_eq!(owner_of("oomgate-1234-probe17"), Some(1234));
        assert_eq!(owner_of("oomgate-1234-probex"), None);
        assert_eq!(owner_of("oomgate-1234-self"), Some(1234));
        for other in [
            "oomgate-1234-ci.scope",
            "oomgate-1234-",
            "oomgate--7",
            "oomgate-x-7",
            "oomgate-test-limit-1",
            "user.slice",
        ] {
            assert_eq!(owner_of(other), None, "{other}");
        }
    }

    #[test]
    fn the_pid_in_its_own_namespace_is_the_last_nspid() {
        let host = "Name:\toomgate\nPid:\t4242\nNSpid:\t4242\nNSpgid:\t4242\n";
        assert_eq!(own_namespace_pid(host), Some(4242));
        let nested = "Name:\toomgate\nNSpid:\t4242\t17\t1\nNSsid:\t1\n";
        assert_eq!(own_namespace_pid(nested), Some(1));
        // Kernels before 4.1 have no NSpid line.
        assert_eq!(own_namespace_pid("Name:\tx\nPid:\t9\n"), None);
        assert_eq!(own_namespace_pid("NSpid:\n"), None);
    }

    #[test]
    fn a_stale_cgroup_says_what_was_killed_and_what_is_left() {
        let mut stale = StaleCgroup {
            dir: PathBuf::from("/sys/fs/cgroup/memory/ci/oomgate-77-3"),
            owner: 77,
            killed: 2,
            left: None,
        };
        assert_eq!(
            stale.describe(),
            "killed 2 process(es) left in /sys/fs/cgroup/memory/ci/oomgate-77-3 by oomgate pid 77, which no longer runs; the cgroup was removed"
        );
        stale.left = Some("processes stuck in the kernel did not exit".to_string());
        assert!(
            stale
                .describe()
                .ends_with("the cgroup is left: processes stuck in the kernel did not exit"),
            "{}",
            stale.describe()
        );
    }
}
