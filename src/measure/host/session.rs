//! One test's host figures inside a shared pytest session, read from
//! outside the process (`/proc`) while the session waits between tests.
//!
//! A session runs many tests in one process, so a test's figures are what
//! it **added** over the memory the process held when it started:
//!
//! - `vmhwm` (growth): the kernel's high-water mark of the session
//!   process, reset at the test's start by writing `5` to
//!   `/proc/PID/clear_refs` (the mark is then the process's resident set),
//!   read at its end, less the resident set at its start. Exact for the
//!   process: no burst between two reads escapes it.
//! - `session-tree`: the process's resident set now, less the one at the
//!   start, plus the private memory (`Private_Clean + Private_Dirty` of
//!   `smaps_rollup`) of every process it started that is alive, read every
//!   tick of the test and at its end. Pages a forked child shares with the
//!   session are not counted again; a child that lives and dies between two
//!   reads is not seen.
//!
//! The gated figure is the larger of the two. `start_bytes` is the
//! resident set at the test's start and `left_bytes` what the process
//! held at its end beyond it: what the test kept (a cache, a leak).
//!
//! Both are read while the plugin waits for oomgate's next command, so
//! nothing of the next test is in them; a thread an earlier test left
//! running is (the docs say so).
//!
//! Where the session has a memory cgroup of its own (it and every process
//! its tests start are charged to it), the test's window also reads the
//! kernel's count of OOM kills in it (the test's `oom_kills`) and, on
//! cgroup v1, its charged peak, reset at the test's start (`charged`: page
//! cache included, reported beside the gated figure as an isolated
//! test's is; a child that lived between two reads is in it).

use std::time::{Duration, Instant};

use super::figures::{HostFigures, HostFloor, HostFloors, HostMethod};
use crate::measure::cgroup::{CaseCgroup, ChargedPeakSource};

/// The figures of one test, gathered from its start to its end.
#[derive(Debug)]
pub struct TestWindow {
    pid: i32,
    started: Instant,
    /// The session's resident set at the test's start.
    start_rss: Option<u64>,
    /// Why the high-water mark could not be reset: then it is no figure of
    /// the test.
    not_reset: Option<super::HostNote>,
    /// The largest `session-tree` reading so far, and when.
    tree: Option<(u64, Duration)>,
    reads: u64,
    /// The session cgroup's charge and OOM kills at the test's start; the
    /// charge `None` where its peak could not be reset.
    cgroup: Option<(Option<u64>, Option<u64>)>,
    /// The cgroup's anonymous + shmem charge at the test's start and its
    /// largest reading since, where the cgroup holds all of the session.
    working: Option<(u64, u64)>,
}

impl TestWindow {
    /// Read the session's memory and reset its high-water mark (and its
    /// cgroup's charged peak): the test starts now.
    pub fn open(pid: i32, mut cgroup: Option<&mut CaseCgroup>) -> TestWindow {
        let working = cgroup
            .as_mut()
            .filter(|cgroup| cgroup.holds_all)
            .and_then(|cgroup| cgroup.anon_shmem_now().ok())
            .map(|now| (now, now));
        let cgroup = cgroup.map(|cgroup| {
            let charged = cgroup.reset_peak().and_then(|()| cgroup.charged_now()).ok();
            (charged, cgroup.oom_kills())
        });
        let start_rss = status_fields(pid).and_then(|s| s.rss);
        let not_reset = reset_hwm(pid).err().map(|e| super::HostNote::HwmNotReset {
            pid,
            error: e.to_string(),
        });
        TestWindow {
            pid,
            started: Instant::now(),
            start_rss,
            not_reset,
            tree: None,
            reads: 0,
            cgroup,
            working,
        }
    }

    /// One reading while the test runs (`cgroup`: the session's).
    pub fn tick(&mut self, cgroup: Option<&mut CaseCgroup>) {
        let status = status_fields(self.pid);
        self.read_tree(status);
        self.read_working(cgroup);
    }

    fn read_working(&mut self, cgroup: Option<&mut CaseCgroup>) {
        if let (Some((_, peak)), Some(cgroup)) = (self.working.as_mut(), cgroup) {
            if let Ok(now) = cgroup.anon_shmem_now() {
                *peak = (*peak).max(now);
            }
        }
    }

    fn read_tree(&mut self, status: Option<Status>) {
        let (Some(start), Some(rss)) = (self.start_rss, status.and_then(|s| s.rss)) else {
            return;
        };
        self.reads += 1;
        let threads = status.and_then(|s| s.threads);
        let children: u64 = descendants(self.pid, threads)
            .into_iter()
            .filter_map(private_bytes)
            .sum();
        let tree = rss.saturating_sub(start).saturating_add(children);
        let at = self.started.elapsed();
        if self.tree.is_none_or(|(peak, _)| tree > peak) {
            self.tree = Some((tree, at));
        }
    }

    /// How many readings were taken (the end's included, once closed).
    pub fn reads(&self) -> u64 {
        self.reads
    }

    /// The test has ended (the session waits again): its figures. Read
    /// after the process died, they are what was seen before; `cgroup`:
    /// the session's, as at [`TestWindow::open`].
    pub fn close(mut self, mut cgroup: Option<&mut CaseCgroup>) -> HostFigures {
        self.read_working(cgroup.as_deref_mut());
        let working = self.working.map(|(start, peak)| peak.saturating_sub(start));
        let (charged, oom_kills) = match (self.cgroup, cgroup) {
            (Some((charged_start, kills_start)), Some(cgroup)) => {
                let peak = cgroup
                    .charged_peak()
                    .filter(|(_, source)| *source == ChargedPeakSource::Kernel);
                let charged = charged_start
                    .zip(peak)
                    .map(|(start, (peak, _))| peak.saturating_sub(start));
                let kills = cgroup
                    .oom_kills()
                    .map(|kills| kills.saturating_sub(kills_start.unwrap_or(0)));
                (charged, kills)
            }
            _ => (None, None),
        };
        let end = status_fields(self.pid);
        let rss = end.as_ref().and_then(|s| s.rss);
        self.read_tree(end);
        let growth = match (&self.not_reset, self.start_rss, end.and_then(|s| s.hwm)) {
            (None, Some(start), Some(hwm)) => Some(hwm.saturating_sub(start)),
            _ => None,
        };
        let tree = self.tree.map(|(bytes, _)| bytes);
        let floors = HostFloors {
            cgroup_anon_shmem_bytes: working,
            vmhwm_bytes: growth,
            session_tree_bytes: tree,
            ..HostFloors::default()
        };
        let peak = floors.largest();
        let peak_at_ms = match peak {
            Some((HostFloor::SessionTree, _)) => self.tree.map(|(_, at)| at),
            // The mark says how high, not when: by the end at the latest.
            _ => Some(self.started.elapsed()),
        }
        .map(|at| u64::try_from(at.as_millis()).unwrap_or(u64::MAX));
        HostFigures {
            method: HostMethod::PytestSession,
            peak_bytes: peak.map(|(_, bytes)| bytes),
            peak_at_ms: peak.and(peak_at_ms),
            peak_source: peak.map(|(floor, _)| floor),
            floors,
            working_peak_bytes: working,
            charged_peak_bytes: charged,
            charged_peak_source: charged.map(|_| ChargedPeakSource::Kernel),
            oom_kills,
            pss_sweeps: 0,
            notes: self.not_reset.into_iter().collect(),
            ranks: Default::default(),
            start_bytes: self.start_rss,
            left_bytes: self
                .start_rss
                .zip(rss)
                .map(|(start, end)| end.saturating_sub(start)),
        }
    }
}

/// `VmRSS` and `VmHWM` of a process, in bytes, and its thread count.
#[derive(Debug, Clone, Copy, Default)]
struct Status {
    rss: Option<u64>,
    hwm: Option<u64>,
    threads: Option<u64>,
}

/// A session's `/proc` files, kept open by the thread that reads them:
/// a reading is one `pread` (a test of a millisecond is read three times
/// or more), not an open, a stat, reads into a growing buffer and a
/// close. Each worker thread reads one session at a time.
struct ProcFiles {
    pid: i32,
    status: std::fs::File,
    /// Why it could not be opened for writing, else the file.
    clear_refs: std::io::Result<std::fs::File>,
    /// The main thread's `children`: a one-thread session's whole list.
    children: std::io::Result<std::fs::File>,
    buffer: Vec<u8>,
}

thread_local! {
    static FILES: std::cell::RefCell<Option<ProcFiles>> = const { std::cell::RefCell::new(None) };
}

impl ProcFiles {
    fn open(pid: i32) -> std::io::Result<ProcFiles> {
        let open = |name: &str| std::fs::File::open(format!("/proc/{pid}/{name}"));
        Ok(ProcFiles {
            pid,
            status: open("status")?,
            clear_refs: std::fs::OpenOptions::new()
                .write(true)
                .open(format!("/proc/{pid}/clear_refs")),
            children: open(&format!("task/{pid}/children")),
            buffer: vec![0; 8192],
        })
    }

    fn read(&mut self, children: bool) -> std::io::Result<&[u8]> {
        use std::os::unix::fs::FileExt;
        let file = match children {
            true => self.children.as_ref().map_err(clone_error)?,
            false => &self.status,
        };
        let length = file.read_at(&mut self.buffer, 0)?;
        Ok(&self.buffer[..length])
    }
}

/// `f` on `pid`'s files, opened on first use and once more after an error
/// (a session that ended, its pid since reused).
fn with_files<T>(
    pid: i32,
    mut f: impl FnMut(&mut ProcFiles) -> std::io::Result<T>,
) -> std::io::Result<T> {
    FILES.with(|cell| {
        let mut slot = cell.borrow_mut();
        if let Some(files) = slot.as_mut().filter(|files| files.pid == pid) {
            if let Ok(done) = f(files) {
                return Ok(done);
            }
        }
        *slot = None;
        let files = slot.insert(ProcFiles::open(pid)?);
        f(files)
    })
}

fn status_fields(pid: i32) -> Option<Status> {
    with_files(pid, |files| {
        let text = files.read(false)?;
        Ok(Status {
            rss: super::kib_field(text, "VmRSS:"),
            hwm: super::kib_field(text, "VmHWM:"),
            threads: super::number_field(text, "Threads:"),
        })
    })
    .ok()
}

/// `echo 5 > /proc/PID/clear_refs`: the process's high-water mark becomes
/// its resident set now.
fn reset_hwm(pid: i32) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    with_files(pid, |files| {
        let file = files.clear_refs.as_ref().map_err(clone_error)?;
        file.write_at(b"5", 0).map(drop)
    })
}

/// An error kept from opening a file, said again at each use.
fn clone_error(error: &std::io::Error) -> std::io::Error {
    match error.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code),
        None => std::io::Error::new(error.kind(), error.to_string()),
    }
}

/// Every process below `pid` now, from each thread's `children` list; of
/// a one-thread process (`threads`), from its own thread's list alone.
fn descendants(pid: i32, threads: Option<u64>) -> Vec<i32> {
    let mut found = Vec::new();
    let mut queue = vec![pid];
    if threads == Some(1) {
        queue.clear();
        let listed = with_files(pid, |files| {
            Ok(files
                .read(true)?
                .split(u8::is_ascii_whitespace)
                .filter_map(|c| std::str::from_utf8(c).ok()?.parse().ok())
                .collect::<Vec<i32>>())
        });
        match listed {
            Ok(children) => {
                found.extend(children.iter().take(MAX_DESCENDANTS));
                queue.extend(children.iter().take(MAX_DESCENDANTS));
            }
            Err(_) => queue.push(pid),
        }
    }
    while let Some(parent) = queue.pop() {
        let Ok(threads) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            continue;
        };
        for thread in threads.flatten() {
            let Ok(list) = std::fs::read_to_string(thread.path().join("children")) else {
                continue;
            };
            for child in list.split_ascii_whitespace().filter_map(|c| c.parse().ok()) {
                // A bound on a tree that forks without end.
                if found.len() < MAX_DESCENDANTS && !found.contains(&child) {
                    found.push(child);
                    queue.push(child);
                }
            }
        }
    }
    found
}

/// The most descendants of a session one reading follows.
const MAX_DESCENDANTS: usize = 4096;

/// A process's private memory: the pages no other process maps.
fn private_bytes(pid: i32) -> Option<u64> {
    let text = std::fs::read(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let clean = super::kib_field(&text, "Private_Clean:")?;
    let dirty = super::kib_field(&text, "Private_Dirty:")?;
    Some(clean.saturating_add(dirty))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that holds `mib` MiB once it says so on stdout, then waits
    /// for its stdin to close.
    fn holder(mib: usize) -> std::process::Child {
        use std::io::BufRead;
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                &format!(
                    "import sys; b = bytearray({mib} << 20); print('held', flush=True); sys.stdin.read()"
                ),
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.as_mut().expect("stdout"))
            .read_line(&mut line)
            .expect("held");
        child
    }

    #[test]
    fn a_test_that_allocates_is_measured_by_its_growth_and_what_it_kept() {
        // This test's own process is the session: it allocates and keeps
        // 64 MiB between open and close, touching every page.
        let window = TestWindow::open(std::process::id() as i32, None);
        let kept = vec![1u8; 64 << 20];
        std::hint::black_box(&kept);
        let figures = window.close(None);
        let mib = 1 << 20;
        assert_eq!(figures.method, HostMethod::PytestSession);
        assert!(figures.start_bytes.is_some_and(|s| s > 0));
        let growth = figures.floors.vmhwm_bytes.expect("the mark was reset");
        // Other tests' threads run in this process too: a floor, and not
        // far above.
        assert!(growth >= 60 * mib, "{figures:?}");
        assert!(figures.peak_bytes >= Some(growth));
        assert!(
            figures.left_bytes.is_some_and(|l| l >= 60 * mib),
            "{figures:?}"
        );
        drop(kept);
    }

    #[test]
    fn a_child_started_by_the_test_counts_by_its_private_memory() {
        let window = TestWindow::open(std::process::id() as i32, None);
        let mut child = holder(48);
        let figures = window.close(None);
        drop(child.stdin.take());
        child.wait().ok();
        let tree = figures.floors.session_tree_bytes.expect("read at the end");
        assert!(tree >= 40 << 20, "{figures:?}");
        assert!(figures.peak_source.is_some());
    }

    #[test]
    fn a_process_that_is_gone_leaves_no_figure() {
        let mut child = holder(1);
        let pid = child.id() as i32;
        let window = TestWindow::open(pid, None);
        drop(child.stdin.take());
        child.wait().expect("wait");
        let figures = window.close(None);
        assert_eq!(figures.peak_bytes, None);
        assert_eq!(figures.floors.vmhwm_bytes, None);
        assert_eq!(figures.left_bytes, None);
    }
}
