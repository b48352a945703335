//! What an instance's supervisor does when oomgate dies: end every process
//! of the instance, however far it left the process tree, and everything in
//! the case cgroup with them.
//!
//! oomgate stops a case itself (SIGTERM, a grace period, SIGKILL: see
//! `stop`) — unless it is killed first: SIGKILL to a cancelled CI job
//! leaves it no chance, and a grandchild that survived it would hold its
//! GPU memory into the next job. So the kernel tells each supervisor when
//! oomgate dies (`PR_SET_PDEATHSIG`, see `supervise`), and the supervisor,
//! the child subreaper of its workload's tree, kills, round after round
//! until nothing is left or a time limit passes:
//!
//! - every process in the case cgroup and the cgroups below it: a process
//!   is listed there whatever its parent, session or process group;
//! - every descendant of its own: an orphan is re-parented to the nearest
//!   subreaper, so a process that calls `setsid()` or double-forks into a
//!   daemon stays one. This is what reaches a case's processes where there
//!   is no cgroup, or one that left it.
//!
//! It reaps its children as they die (a round ends with no descendant and
//! an empty cgroup only once they are gone), then removes the cgroup.
//! SIGKILL at once, with no grace period: no one is left to wait for a
//! graceful exit, and a GPU's memory is freed when the process holding it
//! ends, however it ends.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::measure::cgroup::clear;
use crate::process;

/// Kill every process of the instance — the calling process's descendants
/// and everything in the cgroup at `cgroup` — until none is left or `limit`
/// has passed, reaping the caller's children; then remove the cgroup
/// (another instance's supervisor may be doing the same: whichever is last
/// removes it). Returns how many processes got SIGKILL, each counted once.
pub fn end_everything(cgroup: Option<&Path>, limit: Duration) -> usize {
    let me = process::self_pid();
    let deadline = Instant::now() + limit;
    let mut killed = BTreeSet::new();
    loop {
        let in_cgroup = cgroup.and_then(|dir| clear::kill_subtree(dir).ok());
        let cgroup_empty = in_cgroup.as_ref().is_none_or(BTreeSet::is_empty);
        killed.extend(in_cgroup.unwrap_or_default());
        let descendants = descendants(me);
        for &pid in &descendants {
            // SAFETY: kill takes no memory. The pid is a descendant: it is
            // reused only once its parent, itself a descendant or this
            // process, has reaped it.
            if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                killed.insert(pid);
            }
        }
        while process::wait4(-1, libc::WNOHANG).is_some() {}
        if (descendants.is_empty() && cgroup_empty) || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if let Some(dir) = cgroup {
        // Best effort: the next run removes what is left (see `hierarchy`).
        let _ = clear::remove_subtree(dir, Duration::from_secs(1));
    }
    killed.len()
}

/// The descendants of `root` now, zombies included: from
/// `/proc/<pid>/task/<tid>/children`, or, where the kernel lacks those
/// files, from the parent of every process on the host.
pub fn descendants(root: i32) -> Vec<i32> {
    let listable = fs::read_dir(format!("/proc/{root}/task"))
        .ok()
        .and_then(|mut tasks| tasks.next())
        .and_then(Result::ok)
        .is_some_and(|task| task.path().join("children").exists());
    if listable {
        descendants_by_children(root)
    } else {
        descendants_by_scan(root)
    }
}

fn descendants_by_children(root: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let mut seen = BTreeSet::from([root]);
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        // A process that exited since it was listed has no files left.
        let Ok(tasks) = fs::read_dir(format!("/proc/{parent}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(children) = fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            for child in children
                .split_ascii_whitespace()
                .filter_map(|word| word.parse::<i32>().ok())
            {
                if seen.insert(child) {
                    found.push(child);
                    queue.push(child);
                }
            }
        }
    }
    found
}

fn descendants_by_scan(root: i32) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(i32, i32)> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = fs::read(format!("/proc/{pid}/stat")).ok()?;
            crate::measure::procfs::parse_stat(&stat).map(|entry| (entry.pid, entry.ppid))
        })
        .collect();
    descendants_in(&parents, root)
}

/// The descendants of `root` among `(pid, parent)` pairs.
fn descendants_in(parents: &[(i32, i32)], root: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let mut seen = BTreeSet::from([root]);
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        for &(pid, _) in parents.iter().filter(|(_, ppid)| *ppid == parent) {
            if seen.insert(pid) {
                found.push(pid);
                queue.push(pid);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_follow_parent_links_only_down_from_the_root() {
        // 10 ─ 11 ─ 12 ─ 13, 10 ─ 14; 20 ─ 21 is someone else's.
        let parents = [(11, 10), (12, 11), (13, 12), (14, 10), (21, 20), (10, 1)];
        let mut found = descendants_in(&parents, 10);
        found.sort_unstable();
        assert_eq!(found, vec![11, 12, 13, 14]);
        assert_eq!(descendants_in(&parents, 13), Vec::<i32>::new());
        // A cycle (a pid reused between two reads) ends.
        assert_eq!(descendants_in(&[(2, 3), (3, 2)], 2), vec![3]);
    }

    #[test]
    fn both_listings_find_a_child_and_its_child() {
        // sh starts sleep and waits: a child and a grandchild of this test.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .expect("spawn sh");
        let shell = i32::try_from(child.id()).expect("pid");
        let deadline = Instant::now() + Duration::from_secs(10);
        let grandchild = loop {
            if let Some(&pid) = descendants_by_scan(shell).first() {
                break pid;
            }
            assert!(Instant::now() < deadline, "sleep never started");
            std::thread::sleep(Duration::from_millis(10));
        };
        let me = process::self_pid();
        for found in [descendants_by_children(me), descendants_by_scan(me)] {
            assert!(found.contains(&shell), "{found:?}");
            assert!(found.contains(&grandchild), "{found:?}");
        }
        // SAFETY: signalling the processes this test started.
        unsafe {
            libc::kill(grandchild, libc::SIGKILL);
        }
        child.kill().ok();
        child.wait().ok();
    }
}
