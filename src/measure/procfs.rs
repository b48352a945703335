//! The processes of a case, read from /proc.
//!
//! A case's processes are every descendant of oomgate itself: oomgate runs
//! one case at a time and makes itself (and each instance's supervisor) a
//! child subreaper (see `run::process`), so a grandchild whose parent exits
//! is re-parented inside the tree instead of to init, and one that calls
//! `setsid()` to leave the process group is still found through its parent
//! links. A scan reads `/proc/<pid>/stat` (parent, group, state and threads
//! in one small read) and walks the parent links from the root. Memory is
//! not read here: see `host`.
//!
//! Cost: reading every process's stat on every tick is most of oomgate's
//! CPU on a busy host. A process that is not a descendant can only become
//! one by being a new pid (descendants are born by fork, and orphans are
//! re-parented inside the tree only if they already were descendants), so
//! pids found outside the tree are skipped on later scans and the skip list
//! is dropped every [`RESCAN_EVERY`] scans. The one thing that can slip
//! through is a pid reused by a new descendant right after an outsider with
//! the same pid exited; it joins the tree at the next full rescan (about
//! five seconds at the default interval). When no pid at all was allocated
//! since the last scan, nothing is read: the tree is as it was, less
//! members that exited since, which the members' re-read every
//! [`REFRESH_EVERY`] scans drops. See docs/performance.md.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

/// Every this many scans, every process is read again.
pub const RESCAN_EVERY: u64 = 100;
/// Every this many scans, the members are read again (dropping those that
/// exited, seeing those that became zombies) even when no pid was
/// allocated.
pub const REFRESH_EVERY: u64 = 10;

/// What one `/proc/<pid>/stat` says that oomgate needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcEntry {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    /// The state letter; `Z` for a zombie waiting to be reaped, or for a
    /// process whose main thread exited while other threads still run.
    pub state: u8,
    pub threads: u32,
}

impl ProcEntry {
    /// Running, or a leader whose other threads still run (and hold memory).
    pub fn is_alive(&self) -> bool {
        self.state != b'Z' || self.threads > 1
    }

    /// Exited, waiting for its parent to collect its status.
    pub fn is_zombie(&self) -> bool {
        !self.is_alive()
    }
}

/// The descendants of one process at one moment (the root excluded).
#[derive(Debug, Clone, Default)]
pub struct ProcessTree {
    members: Vec<ProcEntry>,
}

impl ProcessTree {
    pub fn members(&self) -> &[ProcEntry] {
        &self.members
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn pids(&self) -> impl Iterator<Item = i32> + '_ {
        self.members.iter().map(|p| p.pid)
    }

    /// Members still running (zombies excluded).
    pub fn alive(&self) -> impl Iterator<Item = &ProcEntry> + '_ {
        self.members.iter().filter(|p| p.is_alive())
    }

    /// The members that are `roots` or descend from one of them, into
    /// `into` (cleared first): one scan shared by the parts of a case
    /// measured apart (a server and its load client).
    pub fn subtree_into(&self, roots: &[i32], into: &mut ProcessTree) {
        into.members.clear();
        let mut taken: HashSet<i32> = HashSet::with_capacity(self.members.len());
        // A scan lists parents before their children, so one pass takes
        // the whole subtree; another is made while one adds members (an
        // orphan re-parented since it was listed).
        loop {
            let before = taken.len();
            for member in &self.members {
                if !taken.contains(&member.pid)
                    && (roots.contains(&member.pid) || taken.contains(&member.ppid))
                {
                    taken.insert(member.pid);
                    into.members.push(*member);
                }
            }
            if taken.len() == before {
                break;
            }
        }
    }
}

/// Reads /proc; buffers are reused so a tick allocates nothing once warm.
#[derive(Debug)]
pub struct Scanner {
    buffer: [u8; STAT_BUFFER],
    scans: u64,
    /// Pids seen outside the tree since the last full rescan.
    outsiders: HashSet<i32>,
    all: Vec<ProcEntry>,
    queue: Vec<i32>,
    tree: ProcessTree,
    /// Open `/proc/<pid>/stat` of tree members, re-read each scan.
    open_stats: HashMap<i32, fs::File>,
    /// Files opened during this scan, kept if their process is a member.
    fresh: Vec<(i32, fs::File)>,
    last_pid_file: Option<fs::File>,
    /// The last allocated pid and the root at the previous scan.
    seen_last_pid: Option<u64>,
    seen_root: i32,
    /// How many `stat` files of members may stay open.
    max_open: usize,
    /// The members' pids, rebuilt each scan (reused).
    member_pids: HashSet<i32>,
    /// When set, the tree is these processes (a case's supervisors) and
    /// their descendants, not every descendant of the root: the cases of a
    /// parallel run share oomgate as their ancestor. See [`Scanner::limit_to`].
    scope: Option<Vec<i32>>,
    /// The scope changed since the last scan: the quick path may not reuse
    /// the tree.
    scope_changed: bool,
    /// A process no tree holds (see [`Scanner::hide`]).
    hidden: Vec<i32>,
}

/// At most this many members' `stat` files stay open by default (well
/// under the usual limit of 1024 descriptors); members beyond are opened
/// per scan. oomgate raises its open-file limit at start and gives the
/// scanner more (see [`Scanner::with_open_files`]).
const DEFAULT_OPEN_STATS: usize = 200;
/// However high the limit, at most this many of each stay open.
const MOST_OPEN_STATS: usize = 8192;

impl Default for Scanner {
    fn default() -> Self {
        Self::new()
    }
}

impl Scanner {
    pub fn new() -> Self {
        Scanner {
            buffer: [0; STAT_BUFFER],
            scans: 0,
            outsiders: HashSet::new(),
            all: Vec::new(),
            queue: Vec::new(),
            tree: ProcessTree::default(),
            open_stats: HashMap::new(),
            fresh: Vec::new(),
            last_pid_file: None,
            seen_last_pid: None,
            seen_root: 0,
            max_open: DEFAULT_OPEN_STATS,
            member_pids: HashSet::new(),
            scope: None,
            scope_changed: false,
            hidden: Vec::new(),
        }
    }

    /// A scanner that may keep files open up to a share of `limit`, the
    /// process's open-file limit: a quarter, so the rest stays for
    /// everything else oomgate opens (logs, pipes, NVML, reports).
    pub fn with_open_files(limit: u64) -> Self {
        let quarter = usize::try_from(limit / 4).unwrap_or(usize::MAX);
        Scanner {
            max_open: quarter.clamp(DEFAULT_OPEN_STATS / 4, MOST_OPEN_STATS),
            ..Self::new()
        }
    }

    /// Limit the trees this scanner returns to `roots` (they included,
    /// when they descend from the root) and their descendants; `None`:
    /// every descendant of the root. Cases that run at once each scan
    /// with their own supervisors as the scope, so one case's figures,
    /// signals and reaping never reach another's processes. The cost: a
    /// process re-parented to oomgate itself (its supervisor was killed
    /// from outside) is in no case's scope; its memory still counts in the
    /// case's cgroup.
    pub fn limit_to(&mut self, roots: Option<&[i32]>) {
        if self.scope.as_deref() != roots {
            self.scope = roots.map(<[i32]>::to_vec);
            self.scope_changed = true;
        }
    }

    /// Leave `pids` and their descendants out of every tree: oomgate's
    /// fork server and its shared pytest sessions, its children but no
    /// process of any case.
    pub fn hide(&mut self, pids: &[i32]) {
        if self.hidden != pids {
            self.hidden = pids.to_vec();
            self.scope_changed = true;
        }
    }

    /// Whether the trees are limited to a scope ([`Scanner::limit_to`]).
    pub fn is_limited(&self) -> bool {
        self.scope.is_some()
    }

    /// Every descendant of `root` now (within the scope, if one is set).
    /// Processes that exit during the scan are skipped; only failing to
    /// list /proc at all is an error.
    pub fn descendants_of(&mut self, root: i32) -> io::Result<&ProcessTree> {
        let full = self.scans % RESCAN_EVERY == 0;
        let refresh = self.scans % REFRESH_EVERY == 0;
        if full {
            self.outsiders.clear();
        }
        self.scans += 1;
        self.all.clear();
        // Whether a pid was allocated since the last scan of this root:
        // if not, the tree can only have lost members (see below).
        let last_pid = self.last_pid();
        let unchanged = last_pid.is_some()
            && last_pid == self.seen_last_pid
            && self.seen_root == root
            && !std::mem::take(&mut self.scope_changed);
        self.seen_last_pid = last_pid;
        self.seen_root = root;
        if unchanged && !full {
            // Members stay members (orphans are re-parented to a subreaper
            // of the tree), so the tree can only have lost members since
            // the last scan: it is returned as it was. A member that exited
            // since is still listed until the next refresh (at most
            // REFRESH_EVERY scans away), which re-reads the members only;
            // every user of the tree tolerates that — reading an exited
            // process's files fails, reaping an already reaped pid does
            // nothing.
            if refresh {
                let previous = std::mem::take(&mut self.tree.members);
                for member in previous {
                    let refreshed = self.read_stat(member.pid);
                    self.tree.members.extend(refreshed);
                }
                self.keep_member_files();
            }
            return Ok(&self.tree);
        }
        for entry in fs::read_dir("/proc")? {
            let Ok(entry) = entry else { continue };
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            if self.outsiders.contains(&pid) {
                continue;
            }
            if let Some(proc_entry) = self.read_stat(pid) {
                self.all.push(proc_entry);
            }
        }
        self.build_tree(root);
        self.mark_outsiders(root);
        self.keep_member_files();
        Ok(&self.tree)
    }

    /// Walk the parent links in `all` down from `root`, or from the
    /// scope's processes (listed themselves when they descend from `root`).
    fn build_tree(&mut self, root: i32) {
        self.all.sort_unstable_by_key(|p| p.ppid);
        self.tree.members.clear();
        self.queue.clear();
        match &self.scope {
            None => self.queue.push(root),
            Some(roots) => {
                // Scope roots are children of the root (a case's
                // supervisors are oomgate's); a pid found elsewhere was
                // reused by someone else and is not walked.
                let start = self.all.partition_point(|p| p.ppid < root);
                let end = self.all.partition_point(|p| p.ppid <= root);
                for entry in &self.all[start..end] {
                    if roots.contains(&entry.pid) {
                        self.tree.members.push(*entry);
                        self.queue.push(entry.pid);
                    }
                }
            }
        }
        while let Some(parent) = self.queue.pop() {
            let start = self.all.partition_point(|p| p.ppid < parent);
            let end = self.all.partition_point(|p| p.ppid <= parent);
            for child in &self.all[start..end] {
                // A pid can only appear once, so no cycle; the check guards
                // against a root that is its own parent (pid 0 quirks).
                if child.pid != root && !self.hidden.contains(&child.pid) {
                    self.tree.members.push(*child);
                    self.queue.push(child.pid);
                }
            }
        }
    }

    /// The most recently allocated pid in this pid namespace, from
    /// `/proc/sys/kernel/ns_last_pid` (kept open and re-read in place).
    /// Not `/proc/loadavg`'s last field: LXCFS-style virtualisation of that
    /// file refreshes it only now and then, which would hide new children.
    /// `None` (no such file): every scan lists /proc.
    fn last_pid(&mut self) -> Option<u64> {
        if self.last_pid_file.is_none() {
            self.last_pid_file = fs::File::open("/proc/sys/kernel/ns_last_pid").ok();
        }
        let length = self
            .last_pid_file
            .as_ref()?
            .read_at(&mut self.buffer, 0)
            .ok()?;
        std::str::from_utf8(&self.buffer[..length])
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Like [`Scanner::descendants_of`], but reads every process, now: for
    /// stopping a case, where a skipped process could survive it, and for
    /// counting what is left.
    pub fn all_descendants_of(&mut self, root: i32) -> io::Result<&ProcessTree> {
        self.outsiders.clear();
        // Not the quick path either: its tree may still hold exited members.
        self.seen_last_pid = None;
        self.descendants_of(root)
    }

    /// Keep the stat files of members open for the next scan; close the rest.
    fn keep_member_files(&mut self) {
        self.member_pids.clear();
        self.member_pids
            .extend(self.tree.members.iter().map(|m| m.pid));
        let members = &self.member_pids;
        self.open_stats.retain(|pid, _| members.contains(pid));
        for (pid, file) in self.fresh.drain(..) {
            if self.open_stats.len() < self.max_open && members.contains(&pid) {
                self.open_stats.insert(pid, file);
            }
        }
    }

    /// Remember the pids proven to be outside the tree: those whose parent
    /// chain, read in full, leads to pid 0 (the kernel's) or to a known
    /// outsider without passing through the root. A process whose parent
    /// could not be read (it exited mid-scan) is not proven outside and is
    /// read again next time.
    fn mark_outsiders(&mut self, root: i32) {
        let members: HashSet<i32> = self.tree.pids().collect();
        self.queue.clear();
        self.queue.push(0);
        self.queue.extend(self.outsiders.iter().copied());
        while let Some(parent) = self.queue.pop() {
            let start = self.all.partition_point(|p| p.ppid < parent);
            let end = self.all.partition_point(|p| p.ppid <= parent);
            for child in &self.all[start..end] {
                if child.pid != root
                    && !members.contains(&child.pid)
                    && self.outsiders.insert(child.pid)
                {
                    self.queue.push(child.pid);
                }
            }
        }
    }

    fn read_stat(&mut self, pid: i32) -> Option<ProcEntry> {
        // A member's stat file stays open between scans and is re-read in
        // place: one pread instead of open, read and close. Once the process
        // is gone the read fails and the file is dropped, so a reused pid is
        // never read through a stale handle.
        let length = match self.open_stats.get(&pid) {
            Some(file) => match file.read_at(&mut self.buffer, 0) {
                Ok(length) => length,
                Err(_) => {
                    self.open_stats.remove(&pid);
                    return None;
                }
            },
            None => {
                // One open, one read, one close: `read_to_end` would add a
                // statx, an lseek and a second read.
                let mut file = fs::File::open(format!("/proc/{pid}/stat")).ok()?;
                let length = file.read(&mut self.buffer).ok()?;
                self.fresh.push((pid, file));
                length
            }
        };
        parse_stat(&self.buffer[..length])
    }
}

/// `/proc/<pid>/stat` is about 300 bytes; the command name is at most 64.
const STAT_BUFFER: usize = 1024;

/// Parse `/proc/<pid>/stat`. The command name (field 2) is in parentheses,
/// may hold spaces and `)`, and need not be UTF-8 (the kernel cuts names at
/// 15 bytes, possibly inside a character), so the bytes are parsed and the
/// fields counted from the last `)`.
pub(crate) fn parse_stat(bytes: &[u8]) -> Option<ProcEntry> {
    let open = bytes.iter().position(|b| *b == b'(')?;
    let close = bytes.iter().rposition(|b| *b == b')')?;
    let pid = std::str::from_utf8(bytes.get(..open)?)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let rest = std::str::from_utf8(bytes.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.bytes().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    // Fields 6..=19 (session .. nice) are not needed.
    let threads: u32 = fields.nth(19 - 6 + 1)?.parse().ok()?;
    Some(ProcEntry {
        pid,
        ppid,
        pgid,
        state,
        threads,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subtree_holds_its_roots_and_their_descendants_only() {
        let entry = |pid, ppid| ProcEntry {
            pid,
            ppid,
            pgid: pid,
            state: b'S',
            threads: 1,
        };
        // 10 and 20 are supervisors; 13 was listed before its new parent.
        let tree = ProcessTree {
            members: vec![
                entry(13, 11),
                entry(10, 1),
                entry(11, 10),
                entry(20, 1),
                entry(21, 20),
                entry(22, 21),
            ],
        };
        let mut part = ProcessTree::default();
        tree.subtree_into(&[10], &mut part);
        let mut pids: Vec<i32> = part.pids().collect();
        pids.sort_unstable();
        assert_eq!(pids, [10, 11, 13]);
        tree.subtree_into(&[20], &mut part);
        assert_eq!(part.pids().collect::<Vec<_>>(), [20, 21, 22]);
        tree.subtree_into(&[], &mut part);
        assert!(part.is_empty());
    }

    #[test]
    fn parses_stat_with_awkward_command_names() {
        let line = b"4242 (python3 (x) y) S 4000 4242 4000 0 -1 4194560 1000 0 0 0 5 1 0 0 20 0 1 0 123456 123456789 2560 18446744073709551615 1 1 0 0 0 0 0 16781312 2 0 0 0 17 1 0 0 0 0 0\n";
        let entry = parse_stat(line).expect("parses");
        assert_eq!(entry.pid, 4242);
        assert_eq!(entry.ppid, 4000);
        assert_eq!(entry.pgid, 4242);
        assert_eq!(entry.state, b'S');
        assert_eq!(entry.threads, 1);
        assert!(entry.is_alive());
    }

    /// Regression: a name cut by the kernel inside a multi-byte character
    /// made the whole line unreadable, and the process (with its memory and
    /// its children) invisible.
    #[test]
    fn names_that_are_not_utf8_still_parse() {
        let mut line = b"77 (a\xe6\xa8".to_vec();
        line.extend_from_slice(b") S 1 77 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 3 0 1 1 100 0 0\n");
        let entry = parse_stat(&line).expect("parses");
        assert_eq!((entry.pid, entry.ppid, entry.threads), (77, 1, 3));
    }

    #[test]
    fn a_zombie_leader_with_live_threads_is_alive() {
        let line = b"9 (x) Z 1 9 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 4 0 1 1 0 0 0\n";
        let entry = parse_stat(line).expect("parses");
        assert!(entry.is_alive());
        let reaped = b"9 (x) Z 1 9 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 1 0 0 0\n";
        assert!(parse_stat(reaped).expect("parses").is_zombie());
    }

    #[test]
    fn garbage_is_skipped_not_misread() {
        for bad in [
            &b""[..],
            b"12 (x",
            b"12 (x) S",
            b"x (y) S 1 1 1",
            b"\xff\xfe",
        ] {
            assert_eq!(parse_stat(bad), None);
        }
    }

    #[test]
    fn a_child_born_after_a_scan_is_found_by_the_next() {
        let mut scanner = Scanner::new();
        let me = i32::try_from(std::process::id()).expect("pid fits");
        let before: Vec<i32> = scanner.descendants_of(me).expect("scan").pids().collect();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawn sleep");
        let child_pid = i32::try_from(child.id()).expect("pid fits");
        assert!(!before.contains(&child_pid));
        let found = scanner
            .descendants_of(me)
            .expect("scan")
            .pids()
            .any(|p| p == child_pid);
        child.kill().ok();
        child.wait().ok();
        assert!(found, "a new descendant was skipped as an outsider");
    }

    /// Two "cases" under one root: each scope sees its own process and
    /// that one's children, never the other's, and dropping the scope
    /// sees both again.
    #[test]
    fn a_scope_holds_its_roots_and_their_descendants_only() {
        let spawn = |script: &str| {
            std::process::Command::new("sh")
                .args(["-c", script])
                .spawn()
                .expect("spawn sh")
        };
        // Each parent forks a sleeping child and waits for it.
        let mut first = spawn("sleep 30 & wait");
        let mut second = spawn("sleep 30 & wait");
        let pid = |c: &std::process::Child| i32::try_from(c.id()).expect("pid fits");
        let (a, b) = (pid(&first), pid(&second));
        let me = i32::try_from(std::process::id()).expect("pid fits");
        let mut scanner = Scanner::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        // Until both shells have forked their sleep.
        while scanner.descendants_of(me).expect("scan").len() < 4 {
            assert!(std::time::Instant::now() < deadline, "children never seen");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let parents_in = |scanner: &mut Scanner, scope: Option<&[i32]>| {
            scanner.limit_to(scope);
            let tree = scanner.descendants_of(me).expect("scan");
            let ppids: HashSet<i32> = tree.members().iter().map(|m| m.ppid).collect();
            (tree.pids().collect::<HashSet<i32>>(), ppids)
        };
        let (pids, ppids) = parents_in(&mut scanner, Some(&[a]));
        assert!(pids.contains(&a) && !pids.contains(&b), "{pids:?}");
        assert_eq!(pids.len(), 2, "the shell and its sleep: {pids:?}");
        assert!(ppids.contains(&a) && !ppids.contains(&b));
        let (pids, _) = parents_in(&mut scanner, Some(&[b]));
        assert!(pids.contains(&b) && !pids.contains(&a) && pids.len() == 2);
        assert!(scanner.is_limited());
        let (pids, _) = parents_in(&mut scanner, None);
        assert!(pids.contains(&a) && pids.contains(&b) && pids.len() >= 4);
        for pid in pids {
            // SAFETY: signalling this test's own descendants.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        for child in [&mut first, &mut second] {
            child.kill().ok();
            child.wait().ok();
        }
    }

    /// A member turning into a zombie and then disappearing is seen, at
    /// the latest by the next full scan.
    #[test]
    fn a_member_that_exits_becomes_a_zombie_then_leaves_the_tree() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = i32::try_from(child.id()).expect("pid fits");
        let me = i32::try_from(std::process::id()).expect("pid fits");
        let mut scanner = Scanner::new();
        let find = |scanner: &mut Scanner| {
            scanner
                .descendants_of(me)
                .expect("scan")
                .members()
                .iter()
                .find(|p| p.pid == pid)
                .copied()
        };
        assert!(find(&mut scanner).is_some_and(|p| p.is_alive()));
        // SAFETY: signalling the child this test started.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !find(&mut scanner).is_some_and(|p| p.is_zombie()) {
            assert!(
                std::time::Instant::now() < deadline,
                "the zombie was never seen"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        child.wait().expect("reap");
        let gone = (0..REFRESH_EVERY).any(|_| find(&mut scanner).is_none());
        assert!(gone, "a reaped child stayed in the tree past a refresh");
    }

    #[test]
    fn finds_this_process_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawn sleep");
        let mut scanner = Scanner::new();
        let me = i32::try_from(std::process::id()).expect("pid fits");
        let child_pid = i32::try_from(child.id()).expect("pid fits");
        let tree = scanner.descendants_of(me).expect("scan /proc");
        assert!(tree.pids().any(|p| p == child_pid), "{tree:?}");
        assert!(tree.pids().all(|p| p != me));
        child.kill().ok();
        child.wait().ok();
    }
}
