//! The processes of a case, read from /proc.
//!
//! A case's processes are every descendant of oomgate itself: oomgate runs
//! one case at a time and makes itself a child subreaper (see
//! `run::process`), so a grandchild whose parent exits is re-parented to
//! oomgate instead of init and stays in the tree, and one that calls
//! `setsid()` to leave the process group is still found through its parent
//! links. A scan reads `/proc/<pid>/stat` (parent, group and RSS in one
//! small read) and walks the parent links from the root.
//!
//! Cost: reading every process's stat on every tick is most of oomgate's
//! CPU on a busy host. A process that is not a descendant can only become
//! one by being a new pid (descendants are born by fork, and orphans are
//! re-parented to oomgate only if they already were descendants), so pids
//! found outside the tree are skipped on later scans and the skip list is
//! dropped every [`RESCAN_EVERY`] scans. The one thing that can slip through
//! is a pid reused by a new descendant right after an outsider with the same
//! pid exited; it joins the tree at the next full rescan (about a second at
//! the default interval). See docs/performance.md for measurements.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Read};

/// Every this many scans, every process is read again.
pub const RESCAN_EVERY: u64 = 20;

/// What one `/proc/<pid>/stat` says that oomgate needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcEntry {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    /// Resident set size in bytes.
    pub rss_bytes: u64,
    /// The state letter; `Z` for a zombie waiting to be reaped.
    pub state: u8,
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

    pub fn total_rss_bytes(&self) -> u64 {
        self.members.iter().map(|p| p.rss_bytes).sum()
    }

    pub fn pids(&self) -> impl Iterator<Item = i32> + '_ {
        self.members.iter().map(|p| p.pid)
    }

    /// Members still running (zombies excluded).
    pub fn alive(&self) -> impl Iterator<Item = &ProcEntry> + '_ {
        self.members.iter().filter(|p| p.state != b'Z')
    }
}

/// Reads /proc; buffers are reused so a tick allocates nothing once warm.
#[derive(Debug)]
pub struct Scanner {
    page_size: u64,
    buffer: [u8; STAT_BUFFER],
    scans: u64,
    /// Pids seen outside the tree since the last full rescan.
    outsiders: HashSet<i32>,
    all: Vec<ProcEntry>,
    queue: Vec<i32>,
    tree: ProcessTree,
}

impl Default for Scanner {
    fn default() -> Self {
        Self::new()
    }
}

impl Scanner {
    pub fn new() -> Self {
        // SAFETY: sysconf has no preconditions; it returns -1 on error.
        let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        Scanner {
            page_size: u64::try_from(page_size)
                .ok()
                .filter(|p| *p > 0)
                .unwrap_or(4096),
            buffer: [0; STAT_BUFFER],
            scans: 0,
            outsiders: HashSet::new(),
            all: Vec::new(),
            queue: Vec::new(),
            tree: ProcessTree::default(),
        }
    }

    /// Every descendant of `root` now. Processes that exit during the scan
    /// are skipped; only failing to list /proc at all is an error.
    pub fn descendants_of(&mut self, root: i32) -> io::Result<&ProcessTree> {
        if self.scans % RESCAN_EVERY == 0 {
            self.outsiders.clear();
        }
        self.scans += 1;
        self.all.clear();
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
        self.all.sort_unstable_by_key(|p| p.ppid);
        self.tree.members.clear();
        self.queue.clear();
        self.queue.push(root);
        while let Some(parent) = self.queue.pop() {
            let start = self.all.partition_point(|p| p.ppid < parent);
            let end = self.all.partition_point(|p| p.ppid <= parent);
            for child in &self.all[start..end] {
                // A pid can only appear once, so no cycle; the check guards
                // against a root that is its own parent (pid 0 quirks).
                if child.pid != root {
                    self.tree.members.push(*child);
                    self.queue.push(child.pid);
                }
            }
        }
        let members: HashSet<i32> = self.tree.pids().collect();
        self.outsiders.extend(
            self.all
                .iter()
                .map(|p| p.pid)
                .filter(|pid| !members.contains(pid)),
        );
        Ok(&self.tree)
    }

    fn read_stat(&mut self, pid: i32) -> Option<ProcEntry> {
        // One open, one read, one close: `read_to_end` would add a statx,
        // an lseek and a second read per process.
        let path = format!("/proc/{pid}/stat");
        let length = fs::File::open(path).ok()?.read(&mut self.buffer).ok()?;
        parse_stat(&self.buffer[..length], self.page_size)
    }
}

/// `/proc/<pid>/stat` is about 300 bytes; the command name is at most 64.
const STAT_BUFFER: usize = 1024;

/// Parse `/proc/<pid>/stat`. The command name (field 2) is in parentheses
/// and may itself hold spaces and `)`, so fields are counted from the last
/// `)`.
fn parse_stat(text: &[u8], page_size: u64) -> Option<ProcEntry> {
    let text = std::str::from_utf8(text).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let mut fields = text.get(close + 1..)?.split_ascii_whitespace();
    let state = fields.next()?.bytes().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    // Fields 6..=23 (session .. vsize) are not needed; rss is field 24.
    let rss_pages: u64 = fields.nth(23 - 6 + 1)?.parse().ok()?;
    Some(ProcEntry {
        pid,
        ppid,
        pgid,
        rss_bytes: rss_pages.saturating_mul(page_size),
        state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_command_names() {
        let line = b"4242 (python3 (x) y) S 4000 4242 4000 0 -1 4194560 1000 0 0 0 5 1 0 0 20 0 1 0 123456 123456789 2560 18446744073709551615 1 1 0 0 0 0 0 16781312 2 0 0 0 17 1 0 0 0 0 0\n";
        let entry = parse_stat(line, 4096).expect("parses");
        assert_eq!(entry.pid, 4242);
        assert_eq!(entry.ppid, 4000);
        assert_eq!(entry.pgid, 4242);
        assert_eq!(entry.state, b'S');
        assert_eq!(entry.rss_bytes, 2560 * 4096);
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
            assert_eq!(parse_stat(bad, 4096), None);
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

    #[test]
    fn finds_this_process_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawn sleep");
        let mut scanner = Scanner::new();
        let me = i32::try_from(std::process::id()).expect("pid fits");
        let child_pid = i32::try_from(child.id()).expect("pid fits");
        // Between fork and exec a child can show no resident pages yet.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let tree = scanner.descendants_of(me).expect("scan /proc");
            assert!(tree.pids().any(|p| p == child_pid), "{tree:?}");
            assert!(tree.pids().all(|p| p != me));
            if tree.total_rss_bytes() > 0 || std::time::Instant::now() > deadline {
                assert!(tree.total_rss_bytes() > 0, "{tree:?}");
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        child.kill().ok();
        child.wait().ok();
    }
}
