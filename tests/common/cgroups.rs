//! The memory cgroup of the test process, found without oomgate's code,
//! so that oomgate falling back to /proc where it need not, or reading the
//! wrong cgroup, fails the tests instead of passing them.

use std::path::PathBuf;

/// Whether a memory cgroup can be made here, found out without oomgate's
/// code, so that oomgate falling back to /proc where it need not fails the
/// tests: the test process's own memory cgroup (from /proc/self/cgroup and
/// /proc/self/mountinfo), a child made in it, its memory files there.
pub fn cgroups_available() -> bool {
    static PROBED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PROBED.get_or_init(|| {
        let Some((dir, memory_file)) = own_memory_cgroup() else {
            return false;
        };
        let child = dir.join(format!("oomgate-test-probe-{}", std::process::id()));
        if std::fs::create_dir(&child).is_err() {
            return false;
        }
        let usable = child.join(memory_file).exists();
        std::fs::remove_dir(&child).ok();
        usable
    })
}

/// This process's memory cgroup directory and a file a child of it has
/// when the memory controller applies to it.
pub fn own_memory_cgroup() -> Option<(PathBuf, &'static str)> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mounts: Vec<(String, String, String, String)> = mountinfo
        .lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let fields: Vec<&str> = before.split(' ').collect();
            let tail: Vec<&str> = after.split(' ').collect();
            Some((
                fields.get(3)?.to_string(),
                fields.get(4)?.to_string(),
                tail.first()?.to_string(),
                tail.get(2).unwrap_or(&"").to_string(),
            ))
        })
        .collect();
    let under = |root: &str, point: &str, path: &str| -> Option<PathBuf> {
        let relative = if root == "/" {
            path
        } else {
            path.strip_prefix(root)?
        };
        Some(PathBuf::from(point).join(relative.trim_start_matches('/')))
    };
    for line in membership.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        if controllers.split(',').any(|c| c == "memory") {
            let (root, point, _, _) = mounts.iter().find(|(_, _, kind, options)| {
                kind == "cgroup" && options.split(',').any(|o| o == "memory")
            })?;
            return Some((under(root, point, path)?, "memory.max_usage_in_bytes"));
        }
    }
    let path = membership.lines().find_map(|l| l.strip_prefix("0::"))?;
    let (root, point, _, _) = mounts.iter().find(|(_, _, kind, _)| kind == "cgroup2")?;
    Some((under(root, point, path)?, "memory.current"))
}
