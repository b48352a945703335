//! Host memory of a case: the largest of the kernel's floors of memory the
//! case could not do without.
//!
//! No single kernel figure is the answer. Summing RSS over a tree counts a
//! page shared by five forked processes five times; a cgroup's charge misses
//! library pages already cached by someone else and includes page cache the
//! kernel would reclaim; sampling misses a spike between two ticks. Each of
//! these is a *floor* — memory that was certainly resident for the case at
//! some moment — and the gated peak is the largest of them:
//!
//! - `cgroup-anon-shmem`: the case cgroup's anonymous + shmem/tmpfs charge,
//!   sampled each tick (catches a file written to /dev/shm that no process
//!   maps);
//! - `pss-sum`: the tree's proportional set size, `/proc/PID/smaps_rollup`
//!   summed (shared pages counted once, split between their users);
//! - `pss-anon-shmem`: the anonymous + shmem part of it (`Pss_Anon` +
//!   `Pss_Shmem`, Linux 5.7 and later): the same pages as the cgroup's
//!   anonymous + shmem charge, for a tree without a cgroup, and no file
//!   pages, so it does not depend on what the page cache held;
//! - `vmhwm`: the largest `VmHWM` (a live process's own high-water mark, no
//!   sampling gap);
//! - `rusage-maxrss`: the largest `ru_maxrss` of a reaped process, from
//!   `wait4` (the same high-water mark, for processes that already exited,
//!   folded up through every parent that waited for its children).
//!
//! Page cache is not a floor: reading a 10 GiB checkpoint must not breach a
//! host budget. The cgroup's charged peak, page cache included, is reported
//! beside the gated figure as the one to hold against a container's memory
//! limit.
//!
//! PSS and `VmHWM` reads walk page tables and cost far more than the
//! cgroup's counters, so they are paced: each sweep is timed and the next
//! waits until the sweeps stay under a share of one core. With a cgroup,
//! whose anonymous + shmem charge is read every tick, sweeps are rarer
//! ([`Pace::WITH_CGROUP`]); without one, PSS is the only sampled figure and
//! is read every tick when the tree is small ([`Pace::WITHOUT_CGROUP`]).
//!
//! A sweep on a timer alone lands where the peak is only by luck: a torch
//! process's page tables make a sweep cost milliseconds, so a timer held
//! to a small share of a core sweeps a 20 s case two or three times, and a
//! 6 s plateau of spawned workers was in one run's figure and not in the
//! next. So the cheap per-tick figures steer the costly ones: a new high
//! of the cgroup's anonymous + shmem charge, or of the number of
//! processes, asks for a sweep, made once the charge stops rising (at the
//! top, not on the climb) and as soon as sweeps stay within
//! [`TRIGGERED_CPU_SHARE`] of a core; and for a tree of up to
//! [`PLATEAU_TREE`] processes no two sweeps are more than [`PLATEAU`]
//! apart, whatever they cost, so a plateau that long is always swept.
//! Beyond that size the share wins, and the figures say a plateau may have
//! been missed.

use std::fs;
use std::io::Read;
use std::time::{Duration, Instant};

use super::cgroup::CaseCgroup;
use super::procfs::ProcessTree;
use super::timeline::Peak;
use super::timeline::Sample;
use crate::units::Bytes;

mod figures;
pub mod session;

pub use figures::{HostFigures, HostFloor, HostFloors, HostMethod, HostNote};

/// Sweeps asked for by a new high of a cheap figure keep within this share
/// of one core, over the case, with [`SWEEP_BURST`] to start with (so the
/// first highs of a short case are read however costly a sweep is).
pub const TRIGGERED_CPU_SHARE: f64 = 0.02;
pub const SWEEP_BURST: Duration = Duration::from_millis(50);
/// The longest two sweeps are apart for a tree of up to [`PLATEAU_TREE`]
/// processes: a plateau this long is always swept.
pub const PLATEAU: Duration = Duration::from_secs(1);
/// The largest tree whose plateaus are always swept.
pub const PLATEAU_TREE: usize = 200;
/// How far above its level at the last sweep the cgroup's anonymous +
/// shmem charge must rise to ask for a sweep: a share of that level, and
/// at least [`NEW_HIGH_BYTES`].
const NEW_HIGH_SHARE: f64 = 0.01;
const NEW_HIGH_BYTES: u64 = 1024 * 1024;
/// The charge is still rising while a tick's exceeds the last one's by
/// more than this share of it and [`STILL_BYTES`].
const STILL_SHARE: f64 = 0.005;
const STILL_BYTES: u64 = 256 * 1024;

/// How often a case cgroup's anonymous + shmem charge (the working
/// memory) is read while the case runs and the charge moves, between the
/// ticks: the kernel keeps no maximum of it, so it is read often enough
/// that a rise is not missed. A rise and fall within one interval can be:
/// a process faults in about 4 MiB of 4 KiB pages (15 MiB of huge pages)
/// in 2 ms on the machines here (docs/host-measurement.md), under the
/// working tolerance's 16 MiB. A read costs about 3 µs on cgroup v1, but
/// each wake-up of the waiting thread costs tens of µs on a VM, so while
/// the charge stays still the interval grows to [`WORKING_READ_STILL`].
pub const WORKING_READ_INTERVAL: Duration = Duration::from_millis(2);
/// The longest interval between two reads of a charge that stays still
/// (moves by at most `WORKING_STILL_BYTES` from one read to the next).
pub const WORKING_READ_STILL: Duration = Duration::from_millis(6);
const WORKING_STILL_BYTES: u64 = 256 * 1024;

/// How often PSS and VmHWM sweeps may run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    /// Sweeps may take at most this share of one core.
    pub cpu_share: f64,
    /// However cheap, at most one sweep per this long.
    pub min_gap: Duration,
    /// However costly, at least one sweep per this long.
    pub max_gap: Duration,
}

impl Pace {
    /// The cgroup's charge is read every tick; PSS and VmHWM add what it
    /// misses (pages charged elsewhere, per-process high-water marks, which
    /// lose nothing by being read late).
    pub const WITH_CGROUP: Pace = Pace {
        cpu_share: 0.001,
        min_gap: Duration::from_millis(500),
        max_gap: Duration::from_secs(30),
    };
    /// PSS is the only sampled figure: every tick while that is cheap.
    pub const WITHOUT_CGROUP: Pace = Pace {
        cpu_share: 0.005,
        min_gap: Duration::from_millis(1),
        max_gap: Duration::from_secs(30),
    };

    /// The wait after a sweep that took `cost`.
    fn gap(self, cost: Duration) -> Duration {
        cost.div_f64(self.cpu_share)
            .clamp(self.min_gap, self.max_gap)
    }
}

/// Host measurement of one run of a case.
#[derive(Debug)]
pub struct HostMeter {
    method: HostMethod,
    notes: Vec<HostNote>,
    cgroup: Option<CaseCgroup>,
    /// False once some process of the case could not join the cgroup: it
    /// then holds part of the case, still a floor, but its charged peak is
    /// not the case's.
    cgroup_whole: bool,
    floors: [Option<Peak>; HostFloor::ALL.len()],
    pace: Pace,
    next_sweep: Option<Instant>,
    /// Where the steering of sweeps by cheap figures stands.
    steer: Steer,
    pss_sweeps: u64,
    pss_last: Option<u64>,
    /// The working memory at its last read, and the wait until the next.
    working_last: Option<u64>,
    working_gap: Duration,
    buffer: Vec<u8>,
    /// Each process's rank, and each rank's PSS summed per sweep and its
    /// processes' largest VmHWM (see `measure::ranks`).
    rank_of: super::ranks::RankOf,
    rank_pss: super::ranks::PerRank,
    rank_hwm: std::collections::BTreeMap<u32, u64>,
}

/// What decides when a sweep is asked for before its timer is due: a new
/// high of a cheap figure, once it stops rising (a sweep in the middle of
/// a climb spends the share on a level the peak will pass; the top is
/// where the costly floors matter, and a spike that falls at once is still
/// in the live processes' `VmHWM`).
#[derive(Debug, Default)]
struct Steer {
    /// The cheap figures at the last sweep.
    swept_anon_shmem: Option<u64>,
    swept_processes: usize,
    /// The highest anonymous + shmem charge seen by a tick.
    highest_anon_shmem: Option<u64>,
    /// The last tick's charge, and whether this tick's rose past it.
    last_anon_shmem: Option<u64>,
    rising: bool,
    /// A new high seen and not swept yet.
    pending: bool,
    /// When the first tick was, and the CPU every sweep since took: asked-
    /// for sweeps keep the total within [`TRIGGERED_CPU_SHARE`] of the time
    /// since, plus [`SWEEP_BURST`].
    since: Option<Instant>,
    spent: Duration,
    /// The longest gap between two sweeps of a tree too large for the
    /// plateau guarantee, if there was one longer than [`PLATEAU`].
    unguarded_gap: Option<Duration>,
}

impl Steer {
    /// Whether this tick's cheap figures are a new high worth a sweep.
    fn note(&mut self, anon_shmem: Option<u64>, processes: usize, at: Instant) {
        self.since.get_or_insert(at);
        self.rising = match (anon_shmem, self.last_anon_shmem) {
            (Some(now), Some(last)) => {
                now > last.saturating_add(((last as f64 * STILL_SHARE) as u64).max(STILL_BYTES))
            }
            // The first reading (or the first after a failed one): nothing
            // to compare with, and at a case's first tick its processes
            // are still loading, so the charge is taken as climbing.
            (Some(_), None) => true,
            _ => false,
        };
        self.last_anon_shmem = anon_shmem;
        if let Some(now) = anon_shmem {
            let highest = self.highest_anon_shmem.is_none_or(|h| now >= h);
            self.highest_anon_shmem = self.highest_anon_shmem.max(Some(now));
            let level = self.swept_anon_shmem.unwrap_or(0);
            let margin = ((level as f64 * NEW_HIGH_SHARE) as u64).max(NEW_HIGH_BYTES);
            if highest && now > level.saturating_add(margin) {
                self.pending = true;
            }
        }
        if processes > self.swept_processes {
            self.pending = true;
        }
    }

    fn asks(&self, now: Instant) -> bool {
        let allowed = SWEEP_BURST
            + self
                .since
                .map_or(Duration::ZERO, |since| now.saturating_duration_since(since))
                .mul_f64(TRIGGERED_CPU_SHARE);
        self.pending && !self.rising && self.spent <= allowed
    }

    /// A sweep was made with these cheap figures, at this CPU cost.
    fn swept(&mut self, anon_shmem: Option<u64>, processes: usize, cost: Duration) {
        self.swept_anon_shmem = anon_shmem.or(self.swept_anon_shmem);
        self.swept_processes = processes;
        self.pending = false;
        self.spent += cost;
    }
}

impl HostMeter {
    /// `cgroup`: the case's cgroup, or `None` and why (`note`).
    pub fn new(cgroup: Option<CaseCgroup>, note: Option<HostNote>) -> Self {
        HostMeter {
            method: cgroup
                .as_ref()
                .map_or(HostMethod::ProcfsPss, |c| HostMethod::of_cgroup(c.version)),
            notes: note.into_iter().collect(),
            pace: if cgroup.is_some() {
                Pace::WITH_CGROUP
            } else {
                Pace::WITHOUT_CGROUP
            },
            cgroup,
            cgroup_whole: true,
            floors: [None; HostFloor::ALL.len()],
            next_sweep: None,
            steer: Steer::default(),
            pss_sweeps: 0,
            pss_last: None,
            working_last: None,
            working_gap: WORKING_READ_INTERVAL,
            buffer: Vec::with_capacity(4096),
            rank_of: super::ranks::RankOf::default(),
            rank_pss: super::ranks::PerRank::default(),
            rank_hwm: std::collections::BTreeMap::new(),
        }
    }

    pub fn method(&self) -> HostMethod {
        self.method
    }

    pub fn cgroup(&self) -> Option<&CaseCgroup> {
        self.cgroup.as_ref()
    }

    /// The cgroup, when every process of the case joined it: then it holds
    /// exactly the case's live processes.
    pub fn whole_cgroup(&self) -> Option<&CaseCgroup> {
        self.cgroup.as_ref().filter(|_| self.cgroup_whole)
    }

    /// Some of the case's processes could not join the cgroup: it holds
    /// part of the case at most. Its charge stays a floor and its OOM kills
    /// stay certain, but the case is measured as `procfs-pss`, and why is
    /// said.
    pub fn distrust_cgroup(&mut self, why: HostNote) {
        if self.cgroup.is_none() || !self.cgroup_whole {
            return;
        }
        self.cgroup_whole = false;
        self.method = HostMethod::ProcfsPss;
        self.pace = Pace::WITHOUT_CGROUP;
        self.notes.push(why);
    }

    /// Read this tick's figures. `exclude`: pids of the tree that are not
    /// the workload's (oomgate's per-instance supervisors).
    pub fn sample(&mut self, tree: &ProcessTree, exclude: &[i32], sample: &mut Sample) -> bool {
        let t_ms = u64::try_from(sample.at.as_millis()).unwrap_or(u64::MAX);
        let mut ok = true;
        let mut anon_shmem = None;
        if let Some(cgroup) = self.cgroup.as_mut() {
            match cgroup.now() {
                Ok(now) => {
                    sample.host_charged_bytes = Some(Bytes(now.charged_bytes));
                    anon_shmem = Some(now.anon_shmem_bytes);
                    self.raise(HostFloor::CgroupAnonShmem, now.anon_shmem_bytes, t_ms);
                }
                Err(_) => ok = false,
            }
        }
        let processes = tree
            .members()
            .iter()
            .filter(|p| !exclude.contains(&p.pid))
            .count();
        let now = Instant::now();
        let first_tick = self.steer.since.is_none();
        self.steer.note(anon_shmem, processes, now);
        if first_tick && anon_shmem.is_some() {
            // With a cgroup, the case's first tick (right after its launch)
            // sweeps nothing: its processes are still being loaded, so a
            // sweep would read little more than their loader, and it would
            // hold the lock their `execve` and `mmap` wait for. The charge
            // is read; the first sweep comes once it stops rising, or on
            // the timer. A process that exits before is in
            // `rusage-maxrss`.
            self.next_sweep = Some(now + self.pace.min_gap);
        }
        let mut pss_now = None;
        if self.next_sweep.is_none_or(|next| now >= next) || self.steer.asks(now) {
            // The cost is the CPU the sweep took, not its wall time: on a
            // busy runner a sweep preempted halfway would otherwise put
            // the next one off by seconds, past the plateau.
            let before = thread_cpu_time();
            self.sweep(tree, exclude, t_ms);
            let cost = match (before, thread_cpu_time()) {
                (Some(before), Some(after)) => after.saturating_sub(before),
                _ => now.elapsed(),
            };
            let longest = if processes <= PLATEAU_TREE {
                PLATEAU.min(self.pace.max_gap)
            } else {
                self.pace.max_gap
            };
            let gap = self.pace.gap(cost).min(longest);
            self.next_sweep = Some(now + gap);
            self.steer.swept(anon_shmem, processes, cost);
            if processes > PLATEAU_TREE && gap > PLATEAU {
                self.steer.unguarded_gap = self.steer.unguarded_gap.max(Some(gap));
            }
            pss_now = self.pss_last;
        }
        // Only this tick's readings: an older PSS may describe memory
        // already freed.
        sample.host_bytes = match (anon_shmem, pss_now) {
            (Some(a), Some(p)) => Some(Bytes(a.max(p))),
            (a, p) => a.or(p).map(Bytes),
        };
        sample.processes = u32::try_from(processes).unwrap_or(u32::MAX);
        ok
    }

    /// PSS summed (all of it, and its anonymous + shmem part) and the
    /// largest VmHWM over the live members.
    fn sweep(&mut self, tree: &ProcessTree, exclude: &[i32], t_ms: u64) {
        let mut pss_sum = 0u64;
        let mut pss_seen = false;
        // `None` once a member's rollup lacks the split (Linux < 5.7):
        // a sum missing a member is no floor of the tree.
        let mut anon_sum = Some(0u64);
        let mut hwm_max = None;
        self.rank_of.keep_only(tree);
        self.rank_pss.begin();
        for member in tree.alive().filter(|p| !exclude.contains(&p.pid)) {
            let rank = self.rank_of.rank(member.pid);
            if self.read(member.pid, "smaps_rollup") {
                if let Some(pss) = kib_field(&self.buffer, "Pss:") {
                    pss_sum = pss_sum.saturating_add(pss);
                    pss_seen = true;
                    if let Some(rank) = rank {
                        self.rank_pss.add(rank, pss, None);
                    }
                    let anon = kib_field(&self.buffer, "Pss_Anon:")
                        .zip(kib_field(&self.buffer, "Pss_Shmem:"))
                        .map(|(anon, shmem)| anon.saturating_add(shmem));
                    anon_sum = anon_sum
                        .zip(anon)
                        .map(|(sum, anon)| sum.saturating_add(anon));
                }
            }
            if self.read(member.pid, "status") {
                if let Some(hwm) = kib_field(&self.buffer, "VmHWM:") {
                    hwm_max = hwm_max.max(Some(hwm));
                    if let Some(rank) = rank {
                        let peak = self.rank_hwm.entry(rank).or_default();
                        *peak = (*peak).max(hwm);
                    }
                }
            }
        }
        self.pss_sweeps += 1;
        if pss_seen {
            self.rank_pss.end();
        }
        // A tree whose every member vanished mid-sweep tells nothing.
        self.pss_last = pss_seen.then_some(pss_sum);
        if let Some(pss) = self.pss_last {
            self.raise(HostFloor::PssSum, pss, t_ms);
            if let Some(anon) = anon_sum {
                self.raise(HostFloor::PssAnonShmem, anon, t_ms);
            }
        }
        if let Some(hwm) = hwm_max {
            self.raise(HostFloor::Vmhwm, hwm, t_ms);
        }
    }

    /// Read `/proc/<pid>/<file>` into the buffer; false when it is gone.
    fn read(&mut self, pid: i32, file: &str) -> bool {
        self.buffer.clear();
        fs::File::open(format!("/proc/{pid}/{file}"))
            .and_then(|mut f| f.read_to_end(&mut self.buffer))
            .is_ok()
    }

    /// Read the working memory alone (see [`WORKING_READ_INTERVAL`]), and
    /// say when to read it next: soon while it moves, less often while it
    /// stays still. `None` when there is no cgroup holding the whole case
    /// to read.
    pub fn read_working(&mut self, at: Duration) -> Option<Duration> {
        if !self.cgroup_whole {
            return None;
        }
        let bytes = self.cgroup.as_mut()?.anon_shmem_now().ok()?;
        let t_ms = u64::try_from(at.as_millis()).unwrap_or(u64::MAX);
        self.raise(HostFloor::CgroupAnonShmem, bytes, t_ms);
        let moved = self
            .working_last
            .is_none_or(|last| bytes.abs_diff(last) > WORKING_STILL_BYTES);
        self.working_last = Some(bytes);
        self.working_gap = if moved {
            WORKING_READ_INTERVAL
        } else {
            (self.working_gap + WORKING_READ_INTERVAL).min(WORKING_READ_STILL)
        };
        Some(self.working_gap)
    }

    /// A reaped process's `ru_maxrss` (bytes), seen at `at`.
    pub fn record_rusage(&mut self, maxrss_bytes: u64, at: Duration) {
        if maxrss_bytes > 0 {
            let t_ms = u64::try_from(at.as_millis()).unwrap_or(u64::MAX);
            self.raise(HostFloor::RusageMaxrss, maxrss_bytes, t_ms);
        }
    }

    fn raise(&mut self, floor: HostFloor, bytes: u64, t_ms: u64) {
        let slot = &mut self.floors[floor.index()];
        if slot.is_none_or(|p| bytes > p.bytes) {
            *slot = Some(Peak { bytes, t_ms });
        }
    }

    /// The gated peak so far and the floor that set it (the first floor in
    /// [`HostFloor::ALL`] order wins a tie).
    pub fn peak(&self) -> Option<(Peak, HostFloor)> {
        HostFloor::ALL
            .iter()
            .filter_map(|&floor| self.floors[floor.index()].map(|p| (p, floor)))
            .fold(
                None,
                |best: Option<(Peak, HostFloor)>, (p, floor)| match best {
                    Some((b, _)) if b.bytes >= p.bytes => best,
                    _ => Some((p, floor)),
                },
            )
    }

    /// The figures of the finished case; the cgroup is read one last time
    /// and removed. A cgroup that cannot be removed (a process stuck in the
    /// kernel) is named in the note.
    pub fn finish(mut self, at: Duration) -> HostFigures {
        let t_ms = u64::try_from(at.as_millis()).unwrap_or(u64::MAX);
        let mut charged = None;
        let mut oom_kills = None;
        if let Some(cgroup) = self.cgroup.as_mut() {
            // tmpfs pages stay charged after their writer exits: a file
            // written to /dev/shm between the last tick and the exit is
            // seen here.
            let last = cgroup.now().ok();
            charged = cgroup.charged_peak();
            oom_kills = cgroup.oom_kills();
            if let Some(last) = last {
                self.raise(HostFloor::CgroupAnonShmem, last.anon_shmem_bytes, t_ms);
            }
        }
        if !self.cgroup_whole {
            charged = None;
        }
        let mut notes = std::mem::take(&mut self.notes);
        if let Some(gap) = self.steer.unguarded_gap {
            notes.push(HostNote::SweptEvery {
                tree: PLATEAU_TREE,
                gap,
                cpu_share: self.pace.cpu_share,
            });
        }
        if let Some(cgroup) = self.cgroup.take() {
            if let Err(e) = cgroup.remove() {
                notes.push(HostNote::CgroupNotRemoved {
                    error: e.to_string(),
                });
            }
        }
        let peak = self.peak();
        let floor = |f: HostFloor| self.floors[f.index()].map(|p| p.bytes);
        let floors = HostFloors {
            cgroup_anon_shmem_bytes: floor(HostFloor::CgroupAnonShmem),
            pss_sum_bytes: floor(HostFloor::PssSum),
            vmhwm_bytes: floor(HostFloor::Vmhwm),
            rusage_maxrss_bytes: floor(HostFloor::RusageMaxrss),
            pss_anon_shmem_bytes: floor(HostFloor::PssAnonShmem),
            session_tree_bytes: None,
        };
        HostFigures {
            method: self.method,
            peak_bytes: peak.map(|(p, _)| p.bytes),
            peak_at_ms: peak.map(|(p, _)| p.t_ms),
            peak_source: peak.map(|(_, f)| f),
            working_peak_bytes: floors
                .cgroup_anon_shmem_bytes
                .filter(|_| self.method.is_cgroup()),
            floors,
            charged_peak_bytes: charged.map(|(bytes, _)| bytes),
            charged_peak_source: charged.map(|(_, source)| source),
            oom_kills,
            pss_sweeps: self.pss_sweeps,
            notes,
            start_bytes: None,
            left_bytes: None,
            ranks: {
                // Each rank's floors: its PSS summed, its largest VmHWM.
                let mut ranks = std::collections::BTreeMap::new();
                for (rank, pss, _) in self.rank_pss.peaks() {
                    ranks.insert(rank, pss);
                }
                for (&rank, &hwm) in &self.rank_hwm {
                    let peak = ranks.entry(rank).or_default();
                    *peak = (*peak).max(hwm);
                }
                ranks
            },
        }
    }
}

/// The CPU time this thread has used (user and system: reading
/// `smaps_rollup` walks page tables in the kernel, on the reader's time).
fn thread_cpu_time() -> Option<Duration> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to the pointer we pass.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return None;
    }
    Some(Duration::new(
        u64::try_from(now.tv_sec).ok()?,
        u32::try_from(now.tv_nsec).ok()?,
    ))
}

/// The value of a `Key:   1234 kB` line, in bytes.
/// A plain number field of a `/proc` status file (`Threads:\t3`).
fn number_field(text: &[u8], key: &str) -> Option<u64> {
    let text = std::str::from_utf8(text).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].trim().parse().ok()
}

fn kib_field(text: &[u8], key: &str) -> Option<u64> {
    let text = std::str::from_utf8(text).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line[key.len()..]
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib.saturating_mul(1024))
}

#[cfg(test)]
mod tests;
