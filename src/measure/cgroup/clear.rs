//! Emptying a cgroup by force and removing it: for an instance's supervisor
//! whose oomgate died (see `run::teardown`), and for the stale case cgroups
//! a killed oomgate left behind (see `hierarchy`).
//!
//! A cgroup lists its processes, whatever their parents and process
//! groups, so it reaches a daemon that left the process tree as surely as
//! one that stayed. cgroup v2 has `cgroup.kill` (Linux 5.14), which the
//! kernel applies to the whole subtree at once, forks in flight included;
//! elsewhere every pid listed in `cgroup.procs` of the cgroup and of every
//! cgroup below it gets SIGKILL, and the caller repeats until the listing
//! is empty: a process forked between the read and the kill is in the
//! next listing. No freezer is needed for that: SIGKILL cannot be caught,
//! so every round strictly shrinks what is left, save for forks.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// How deep below a case cgroup the cgroups a workload made are followed.
const MOST_DEPTH: u32 = 32;

/// The pids of every process in the cgroup at `dir` and below it.
pub fn processes_in_subtree(dir: &Path) -> io::Result<BTreeSet<i32>> {
    let mut pids = BTreeSet::new();
    collect(dir, 0, &mut pids)?;
    Ok(pids)
}

fn collect(dir: &Path, depth: u32, pids: &mut BTreeSet<i32>) -> io::Result<()> {
    let procs = fs::read_to_string(dir.join("cgroup.procs"))?;
    pids.extend(
        procs
            .lines()
            .filter_map(|line| line.trim().parse::<i32>().ok()),
    );
    if depth >= MOST_DEPTH {
        return Ok(());
    }
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            // A cgroup removed since the listing is simply gone.
            match collect(&entry.path(), depth + 1, pids) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                other => other?,
            }
        }
    }
    Ok(())
}

/// SIGKILL every process in the cgroup at `dir` and below it, once
/// (`cgroup.kill` where the kernel has it, too). Returns the pids that were
/// listed: the caller repeats until none is.
pub fn kill_subtree(dir: &Path) -> io::Result<BTreeSet<i32>> {
    let pids = processes_in_subtree(dir)?;
    if pids.is_empty() {
        return Ok(pids);
    }
    // cgroup v2 only: a v1 cgroup has no such file (never created here).
    let _ = fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.kill"))
        .and_then(|mut file| file.write_all(b"1"));
    for &pid in &pids {
        if pid > 1 {
            // SAFETY: kill takes no memory. The pid was listed in the
            // cgroup a moment ago; a listed process that exits is reaped
            // by its parent and its pid is reused only after the pid space
            // wraps, which takes far longer than this call.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
    Ok(pids)
}

/// What [`empty_by_force`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Emptied {
    /// Every process that got SIGKILL, each counted once.
    pub killed: BTreeSet<i32>,
    /// Whether the cgroup (subtree included) holds no process now.
    pub empty: bool,
}

/// SIGKILL everything in the cgroup at `dir` and below it, again and again,
/// until no process is listed there or `limit` has passed (a process stuck
/// in the kernel never leaves: it is left, and said to be).
pub fn empty_by_force(dir: &Path, limit: Duration) -> io::Result<Emptied> {
    let deadline = Instant::now() + limit;
    let mut killed = BTreeSet::new();
    loop {
        let listed = kill_subtree(dir)?;
        if listed.is_empty() {
            return Ok(Emptied {
                killed,
                empty: true,
            });
        }
        killed.extend(listed);
        if Instant::now() >= deadline {
            return Ok(Emptied {
                killed,
                empty: false,
            });
        }
        // The kernel tears a killed process down in microseconds to a few
        // milliseconds (more for a large address space).
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Remove the cgroup at `dir` and every cgroup below it, deepest first.
/// Each must be empty; the kernel finishes tearing exited processes down
/// asynchronously, so a busy one is retried for up to `limit`.
pub fn remove_subtree(dir: &Path, limit: Duration) -> io::Result<()> {
    remove(dir, 0, Instant::now() + limit)
}

fn remove(dir: &Path, depth: u32, deadline: Instant) -> io::Result<()> {
    if depth < MOST_DEPTH {
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                match remove(&entry.path(), depth + 1, deadline) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    other => other?,
                }
            }
        }
    }
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => {
                return Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display())));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cgroup_of_the_subtree_is_listed() {
        // Plain folders stand in for cgroups: only `cgroup.procs` is read.
        let root = tempfile::tempdir().expect("tempdir");
        let write =
            |path: &Path, text: &str| fs::write(path.join("cgroup.procs"), text).expect("write");
        write(root.path(), "10\n11\n");
        let nested = root.path().join("workload").join("inner");
        fs::create_dir_all(&nested).expect("mkdir");
        write(&root.path().join("workload"), "");
        write(&nested, "12\n10\n");
        let listed = processes_in_subtree(root.path()).expect("listed");
        assert_eq!(listed.into_iter().collect::<Vec<_>>(), vec![10, 11, 12]);
        // A cgroup below that is gone by the time it is read (removed
        // meanwhile) holds nothing; the cgroup asked about must be there.
        fs::remove_file(nested.join("cgroup.procs")).expect("rm");
        let listed = processes_in_subtree(root.path()).expect("listed");
        assert_eq!(listed.into_iter().collect::<Vec<_>>(), vec![10, 11]);
        assert!(processes_in_subtree(&root.path().join("gone")).is_err());
    }
}
