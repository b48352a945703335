//! Finding where case cgroups can be made: the hierarchy that has the
//! `memory` controller and oomgate's own cgroup in it (from
//! `/proc/self/mountinfo` and `/proc/self/cgroup`), proving a child can be
//! created, enabling the controller for children on cgroup v2, and making
//! each case's cgroup, named `oomgate-<pid>-<n>` (what a killed oomgate
//! left is cleared in `stale`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{CaseCgroup, CgroupVersion};

/// oomgate's own cgroup in the hierarchy that has the memory controller.
#[derive(Debug, Clone)]
pub struct MemoryHierarchy {
    pub version: CgroupVersion,
    /// oomgate's own cgroup directory (cases are created inside it).
    pub dir: PathBuf,
}

/// Why no per-case cgroup can be made; the run measures from /proc.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

impl MemoryHierarchy {
    /// Find the memory hierarchy and oomgate's cgroup in it, and prove that
    /// a child can be created there (create one, remove it). Leftovers of
    /// an oomgate that was killed are cleared afterwards, by
    /// [`MemoryHierarchy::clear_stale`].
    pub fn discover() -> Result<Self, Unavailable> {
        let hierarchy = Self::find()?;
        if hierarchy.version == CgroupVersion::V2 {
            hierarchy.enable_memory_for_children()?;
        }
        let probe = hierarchy
            .dir
            .join(format!("oomgate-{}-probe", std::process::id()));
        match fs::create_dir(&probe) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(Unavailable(format!(
                    "cannot create a memory cgroup in {}: {e} (a container's cgroup file system is often read-only: give oomgate a writable or delegated cgroup, or choose --host-method procfs)",
                    hierarchy.dir.display()
                )));
            }
        }
        let usable = CaseCgroup::open(hierarchy.version, probe.clone()).map(|_| ());
        fs::remove_dir(&probe).ok();
        usable.map_err(|e| {
            Unavailable(format!(
                "a memory cgroup made in {} lacks its memory files: {e}",
                hierarchy.dir.display()
            ))
        })?;
        Ok(hierarchy)
    }

    /// Only find the memory hierarchy and oomgate's cgroup in it, where its
    /// case cgroups are made, changing nothing: for a run that makes none
    /// (`--host-method procfs`, or none can be made) and still clears what
    /// a killed oomgate left there ([`MemoryHierarchy::clear_stale`]).
    pub fn find() -> Result<Self, Unavailable> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| Unavailable(format!("cannot read /proc/self/mountinfo: {e}")))?;
        let membership = fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| Unavailable(format!("cannot read /proc/self/cgroup: {e}")))?;
        let mut hierarchy = locate(&mountinfo, &membership, |dir| {
            fs::read_to_string(dir.join("cgroup.controllers"))
                .is_ok_and(|c| c.split_ascii_whitespace().any(|w| w == "memory"))
        })?;
        // Already moved into our own leaf (cgroup v2, an earlier call): the
        // cases go beside it, in the cgroup it was made in.
        let own_leaf = format!("oomgate-{}-self", std::process::id());
        if hierarchy
            .dir
            .file_name()
            .is_some_and(|name| *name == *own_leaf)
        {
            if let Some(parent) = hierarchy.dir.parent() {
                hierarchy.dir = parent.to_path_buf();
            }
        }
        Ok(hierarchy)
    }

    /// cgroup v2: children get the memory controller only if this cgroup
    /// lists it in `cgroup.subtree_control`, which the kernel allows only
    /// while no process sits in this cgroup itself (the "no internal
    /// processes" rule; the true root excepted). When oomgate is the only
    /// process here — as under `systemd-run --scope -p Delegate=yes` — it
    /// moves itself into a leaf, `oomgate-<pid>-self`, and enables it.
    fn enable_memory_for_children(&self) -> Result<(), Unavailable> {
        let control = self.dir.join("cgroup.subtree_control");
        let enabled = |control: &Path| {
            fs::read_to_string(control)
                .is_ok_and(|c| c.split_ascii_whitespace().any(|w| w == "memory"))
        };
        if enabled(&control) {
            return Ok(());
        }
        let first = match fs::write(&control, "+memory") {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        let refused = |why: String| {
            Unavailable(format!(
                "cgroup v2: cannot enable the memory controller for children of {} ({why}); \
                 run oomgate as the only process of a delegated cgroup (e.g. `systemd-run --user --scope -p Delegate=yes oomgate run ...`), or use --host-method procfs",
                self.dir.display()
            ))
        };
        if first.raw_os_error() != Some(libc::EBUSY) {
            return Err(refused(first.to_string()));
        }
        let procs = fs::read_to_string(self.dir.join("cgroup.procs"))
            .map_err(|e| refused(format!("{first}; cannot list its processes: {e}")))?;
        if let Err(others) = alone_in(&procs, std::process::id()) {
            return Err(refused(format!(
                "other processes share oomgate's cgroup: {}",
                others
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let leaf = self
            .dir
            .join(format!("oomgate-{}-self", std::process::id()));
        let moved = fs::create_dir(&leaf)
            .or_else(|e| {
                if e.kind() == io::ErrorKind::AlreadyExists {
                    Ok(())
                } else {
                    Err(e)
                }
            })
            .and_then(|()| fs::write(leaf.join("cgroup.procs"), "0"))
            .and_then(|()| fs::write(&control, "+memory"));
        moved.map_err(|e| refused(format!("moving oomgate into {}: {e}", leaf.display())))
    }

    /// A fresh cgroup for one run of a case.
    pub fn create_case(&self, serial: u64) -> io::Result<CaseCgroup> {
        let dir = self
            .dir
            .join(format!("oomgate-{}-{serial}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => {}
            // A leftover of ours (a case whose processes could not be
            // killed): never reuse its charge.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("{} already exists", dir.display()),
                ));
            }
            Err(e) => return Err(e),
        }
        CaseCgroup::open(self.version, dir.clone()).inspect_err(|_| {
            fs::remove_dir(&dir).ok();
        })
    }
}

/// Whether `me` is the only process in a `cgroup.procs` listing; else the
/// others.
fn alone_in(procs: &str, me: u32) -> Result<(), Vec<u32>> {
    let others: Vec<u32> = procs
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .filter(|pid| *pid != me)
        .collect();
    if others.is_empty() {
        Ok(())
    } else {
        Err(others)
    }
}

/// Find the hierarchy with the memory controller and oomgate's cgroup
/// directory in it. `v2_has_memory` says whether a cgroup2 directory lists
/// `memory` in its `cgroup.controllers`. A v1 `memory` hierarchy wins: where
/// both exist, v2 cannot have the controller.
fn locate(
    mountinfo: &str,
    membership: &str,
    v2_has_memory: impl Fn(&Path) -> bool,
) -> Result<MemoryHierarchy, Unavailable> {
    let mounts: Vec<Mount> = mountinfo.lines().filter_map(parse_mount).collect();
    let v1_path = membership.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then(|| path.to_string())
    });
    if let Some(path) = v1_path {
        let candidates: Vec<&Mount> = mounts
            .iter()
            .filter(|m| m.fstype == "cgroup" && m.super_options.split(',').any(|o| o == "memory"))
            .collect();
        if candidates.is_empty() {
            return Err(Unavailable(
                "cgroup v1: the memory controller is not mounted here".to_string(),
            ));
        }
        return Ok(MemoryHierarchy {
            version: CgroupVersion::V1,
            dir: first_dir(&candidates, &path)?,
        });
    }
    let v2_path = membership
        .lines()
        .find_map(|line| line.strip_prefix("0::").map(str::to_string));
    let candidates: Vec<&Mount> = mounts.iter().filter(|m| m.fstype == "cgroup2").collect();
    let Some(path) = v2_path.filter(|_| !candidates.is_empty()) else {
        return Err(Unavailable(
            "no cgroup hierarchy with the memory controller is mounted".to_string(),
        ));
    };
    let dir = first_dir(&candidates, &path)?;
    if !v2_has_memory(&dir) {
        return Err(Unavailable(format!(
            "cgroup v2: the memory controller is not available in {}",
            dir.display()
        )));
    }
    Ok(MemoryHierarchy {
        version: CgroupVersion::V2,
        dir,
    })
}

/// oomgate's cgroup directory under the first of `mounts` (of the same
/// hierarchy) that holds it: containers and hybrid systems mount a
/// hierarchy more than once, not always the part oomgate is in.
fn first_dir(mounts: &[&Mount], path: &str) -> Result<PathBuf, Unavailable> {
    let mut first_error = None;
    for mount in mounts {
        match mount.dir_of(path) {
            Ok(dir) => return Ok(dir),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| Unavailable("no mount of the hierarchy".to_string())))
}

/// What one line of `/proc/self/mountinfo` says that oomgate needs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    /// The path inside the hierarchy that is mounted (field 4).
    root: String,
    mount_point: PathBuf,
    fstype: String,
    super_options: String,
}

impl Mount {
    /// The directory of cgroup `path` under this mount. A path outside the
    /// mounted part (under a cgroup namespace, `/proc/self/cgroup` can say
    /// `/../..`) is refused, never joined.
    fn dir_of(&self, path: &str) -> Result<PathBuf, Unavailable> {
        if path.split('/').any(|part| part == "..") {
            return Err(Unavailable(format!(
                "oomgate's cgroup {path} lies outside this cgroup namespace's view"
            )));
        }
        let relative = if self.root == "/" {
            Some(path)
        } else {
            path.strip_prefix(self.root.as_str())
                .filter(|rest| rest.is_empty() || rest.starts_with('/'))
        }
        .ok_or_else(|| {
            Unavailable(format!(
                "oomgate's cgroup {path} is outside the mounted part ({}) of its hierarchy",
                self.root
            ))
        })?;
        Ok(self.mount_point.join(relative.trim_start_matches('/')))
    }
}

/// `36 25 0:32 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory`:
/// optional fields end at ` - `; paths escape spaces as `\040`.
fn parse_mount(line: &str) -> Option<Mount> {
    let (before, after) = line.split_once(" - ")?;
    let mut head = before.split(' ');
    let root = unescape(head.nth(3)?);
    let mount_point = PathBuf::from(unescape(head.next()?));
    let mut tail = after.split(' ');
    let fstype = tail.next()?.to_string();
    let _source = tail.next()?;
    let super_options = tail.next().unwrap_or_default().to_string();
    Some(Mount {
        root,
        mount_point,
        fstype,
        super_options,
    })
}

/// mountinfo's octal escapes (`\040` space, `\011` tab, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match octal {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn v1_memory_wins_over_a_v2_mount_without_it() {
        let membership = "4:memory:/process_api/abc\n1:cpu:/\n0::/\n";
        let found = locate(V1_MOUNTS, membership, |_| false).expect("found");
        assert_eq!(found.version, CgroupVersion::V1);
        assert_eq!(
            found.dir,
            PathBuf::from("/sys/fs/cgroup/memory/process_api/abc")
        );
    }

    #[test]
    fn v2_needs_the_controller() {
        let mounts = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let membership = "0::/user.slice/ci.scope\n";
        let found = locate(mounts, membership, |_| true).expect("found");
        assert_eq!(found.version, CgroupVersion::V2);
        assert_eq!(
            found.dir,
            PathBuf::from("/sys/fs/cgroup/user.slice/ci.scope")
        );
        let refused = locate(mounts, membership, |_| false).expect_err("no controller");
        assert!(refused.0.contains("not available"), "{refused}");
    }

    #[test]
    fn a_bind_mounted_subtree_is_resolved_or_refused() {
        // Containers mount only their part of the hierarchy.
        let mounts = "40 30 0:32 /docker/1234 /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n";
        let inside = locate(mounts, "9:memory:/docker/1234/ci\n", |_| false).expect("inside");
        assert_eq!(inside.dir, PathBuf::from("/sys/fs/cgroup/memory/ci"));
        let lookalike = locate(mounts, "9:memory:/docker/12345\n", |_| false);
        assert!(lookalike.is_err(), "{lookalike:?}");
    }

    #[test]
    fn the_mount_that_holds_oomgate_is_used() {
        // Two mounts of the v1 memory hierarchy; only the second holds it.
        let mounts = "\
40 30 0:32 /docker/other /mnt/other ro - cgroup cgroup rw,memory
41 30 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";
        let found = locate(mounts, "9:memory:/ci/job\n", |_| false).expect("found");
        assert_eq!(found.dir, PathBuf::from("/sys/fs/cgroup/memory/ci/job"));
        // A path outside the namespace's view is refused.
        let outside = locate(mounts, "9:memory:/../../x\n", |_| false).expect_err("outside");
        assert!(outside.0.contains("outside"), "{outside}");
    }

    #[test]
    fn oomgate_moves_itself_only_when_alone() {
        assert_eq!(alone_in("42\n", 42), Ok(()));
        assert_eq!(alone_in("", 42), Ok(()));
        assert_eq!(alone_in("7\n42\n9\n", 42), Err(vec![7, 9]));
    }

    #[test]
    fn nothing_mounted_says_so() {
        let error = locate("", "0::/\n", |_| true).expect_err("nothing");
        assert!(error.0.contains("no cgroup hierarchy"), "{error}");
        let no_v1_mount = locate("", "4:memory:/x\n", |_| true).expect_err("no mount");
        assert!(no_v1_mount.0.contains("not mounted"), "{no_v1_mount}");
    }

    #[test]
    fn mount_points_with_spaces_are_unescaped() {
        let mount =
            parse_mount("1 2 0:3 / /mnt/my\\040cgroups rw - cgroup2 none rw").expect("parses");
        assert_eq!(mount.mount_point, PathBuf::from("/mnt/my cgroups"));
        assert_eq!(unescape("a\\134b\\9"), "a\\b\\9");
    }
}
