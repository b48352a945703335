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

use std::fs;
use std::io::Read;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::cgroup::{CaseCgroup, CgroupVersion, ChargedPeakSource};
use super::timeline::Peak;
use super::{ProcessTree, Sample};
use crate::units::Bytes;

/// How a case's host figure was obtained: which floors it is the largest of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostMethod {
    /// Case cgroup (v1) + PSS + VmHWM + reaped rusage.
    CgroupV1,
    /// Case cgroup (v2) + PSS + VmHWM + reaped rusage.
    CgroupV2,
    /// No cgroup: PSS + VmHWM + reaped rusage.
    ProcfsPss,
    /// The RSS summed over the tree (oomgate before per-case cgroups);
    /// only ever read back from old locks and results.
    ProcfsRss,
    /// A method this oomgate does not know (a newer one's lock): never
    /// comparable.
    #[serde(other)]
    Unknown,
}

impl Default for HostMethod {
    /// What a file that names no method measured: the RSS sum of the
    /// oomgate that wrote it.
    fn default() -> Self {
        HostMethod::ProcfsRss
    }
}

impl HostMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            HostMethod::CgroupV1 => "cgroup-v1",
            HostMethod::CgroupV2 => "cgroup-v2",
            HostMethod::ProcfsPss => "procfs-pss",
            HostMethod::ProcfsRss => "procfs-rss",
            HostMethod::Unknown => "unknown",
        }
    }

    /// Whether figures of the two methods measure the same thing. Both
    /// cgroup versions take the same floors; without a cgroup, memory no
    /// process maps is not seen; the RSS sum counts shared pages per
    /// process.
    pub fn comparable_with(self, other: HostMethod) -> bool {
        use HostMethod::{CgroupV1, CgroupV2, Unknown};
        match (self, other) {
            (Unknown, _) | (_, Unknown) => false,
            (CgroupV1 | CgroupV2, CgroupV1 | CgroupV2) => true,
            (a, b) => a == b,
        }
    }

    pub fn of_cgroup(version: CgroupVersion) -> Self {
        match version {
            CgroupVersion::V1 => HostMethod::CgroupV1,
            CgroupVersion::V2 => HostMethod::CgroupV2,
        }
    }
}

impl std::fmt::Display for HostMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One of the floors the gated host peak is the largest of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostFloor {
    CgroupAnonShmem,
    PssSum,
    Vmhwm,
    RusageMaxrss,
}

impl HostFloor {
    pub const ALL: [HostFloor; 4] = [
        HostFloor::CgroupAnonShmem,
        HostFloor::PssSum,
        HostFloor::Vmhwm,
        HostFloor::RusageMaxrss,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HostFloor::CgroupAnonShmem => "cgroup-anon-shmem",
            HostFloor::PssSum => "pss-sum",
            HostFloor::Vmhwm => "vmhwm",
            HostFloor::RusageMaxrss => "rusage-maxrss",
        }
    }

    /// What the floor is, for a reader.
    pub fn describe(self) -> &'static str {
        match self {
            HostFloor::CgroupAnonShmem => "the case cgroup's anonymous + shmem memory",
            HostFloor::PssSum => "the tree's PSS summed",
            HostFloor::Vmhwm => "a live process's VmHWM",
            HostFloor::RusageMaxrss => "an exited process's ru_maxrss",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for HostFloor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Each floor's peak over the case; `None`: never observed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HostFloors {
    pub cgroup_anon_shmem_bytes: Option<u64>,
    pub pss_sum_bytes: Option<u64>,
    pub vmhwm_bytes: Option<u64>,
    pub rusage_maxrss_bytes: Option<u64>,
}

impl HostFloors {
    /// The observed floors by name, as the lock records them.
    pub fn named(&self) -> std::collections::BTreeMap<String, u64> {
        HostFloor::ALL
            .into_iter()
            .filter_map(|floor| Some((floor.as_str().to_string(), self.get(floor)?)))
            .collect()
    }

    /// Floors read back by name; names of no floor are left out.
    pub fn from_named(named: &std::collections::BTreeMap<String, u64>) -> Self {
        let mut floors = HostFloors::default();
        for floor in HostFloor::ALL {
            let value = named.get(floor.as_str()).copied();
            match floor {
                HostFloor::CgroupAnonShmem => floors.cgroup_anon_shmem_bytes = value,
                HostFloor::PssSum => floors.pss_sum_bytes = value,
                HostFloor::Vmhwm => floors.vmhwm_bytes = value,
                HostFloor::RusageMaxrss => floors.rusage_maxrss_bytes = value,
            }
        }
        floors
    }

    pub fn get(&self, floor: HostFloor) -> Option<u64> {
        match floor {
            HostFloor::CgroupAnonShmem => self.cgroup_anon_shmem_bytes,
            HostFloor::PssSum => self.pss_sum_bytes,
            HostFloor::Vmhwm => self.vmhwm_bytes,
            HostFloor::RusageMaxrss => self.rusage_maxrss_bytes,
        }
    }
}

/// The host figures of one run of a case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostFigures {
    pub method: HostMethod,
    /// The gated peak: the largest floor. `None` when no floor was observed.
    pub peak_bytes: Option<u64>,
    pub peak_at_ms: Option<u64>,
    /// The floor that set the peak.
    pub peak_source: Option<HostFloor>,
    pub floors: HostFloors,
    /// The cgroup's largest charge, page cache included (not gated).
    pub charged_peak_bytes: Option<u64>,
    pub charged_peak_source: Option<ChargedPeakSource>,
    /// Processes of the case killed by the kernel's OOM killer (cgroup
    /// methods only; `None` without a cgroup).
    pub oom_kills: Option<u64>,
    /// PSS/VmHWM sweeps made (they are paced).
    pub pss_sweeps: u64,
    /// Why this case was not measured the way the run was, if it was not.
    pub note: Option<String>,
}

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
    note: Option<String>,
    cgroup: Option<CaseCgroup>,
    /// False once some process of the case could not join the cgroup: it
    /// then holds part of the case, still a floor, but its charged peak is
    /// not the case's.
    cgroup_whole: bool,
    floors: [Option<Peak>; 4],
    pace: Pace,
    next_sweep: Option<Instant>,
    pss_sweeps: u64,
    pss_last: Option<u64>,
    buffer: Vec<u8>,
}

impl HostMeter {
    /// `cgroup`: the case's cgroup, or `None` and why (`note`).
    pub fn new(cgroup: Option<CaseCgroup>, note: Option<String>) -> Self {
        HostMeter {
            method: cgroup
                .as_ref()
                .map_or(HostMethod::ProcfsPss, |c| HostMethod::of_cgroup(c.version)),
            note,
            pace: if cgroup.is_some() {
                Pace::WITH_CGROUP
            } else {
                Pace::WITHOUT_CGROUP
            },
            cgroup,
            cgroup_whole: true,
            floors: [None; 4],
            next_sweep: None,
            pss_sweeps: 0,
            pss_last: None,
            buffer: Vec::with_capacity(4096),
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
    pub fn distrust_cgroup(&mut self, why: String) {
        if self.cgroup.is_none() || !self.cgroup_whole {
            return;
        }
        self.cgroup_whole = false;
        self.method = HostMethod::ProcfsPss;
        self.pace = Pace::WITHOUT_CGROUP;
        self.note = Some(why);
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
        let now = Instant::now();
        let mut pss_now = None;
        if self.next_sweep.is_none_or(|next| now >= next) {
            self.sweep(tree, exclude, t_ms);
            self.next_sweep = Some(now + self.pace.gap(now.elapsed()));
            pss_now = self.pss_last;
        }
        // Only this tick's readings: an older PSS may describe memory
        // already freed.
        sample.host_bytes = match (anon_shmem, pss_now) {
            (Some(a), Some(p)) => Some(Bytes(a.max(p))),
            (a, p) => a.or(p).map(Bytes),
        };
        sample.processes = u32::try_from(
            tree.members()
                .iter()
                .filter(|p| !exclude.contains(&p.pid))
                .count(),
        )
        .unwrap_or(u32::MAX);
        ok
    }

    /// PSS summed and the largest VmHWM over the live members.
    fn sweep(&mut self, tree: &ProcessTree, exclude: &[i32], t_ms: u64) {
        let mut pss_sum = 0u64;
        let mut pss_seen = false;
        let mut hwm_max = None;
        for member in tree.alive().filter(|p| !exclude.contains(&p.pid)) {
            if let Some(pss) = self.read_kib(member.pid, "smaps_rollup", "Pss:") {
                pss_sum = pss_sum.saturating_add(pss);
                pss_seen = true;
            }
            if let Some(hwm) = self.read_kib(member.pid, "status", "VmHWM:") {
                hwm_max = hwm_max.max(Some(hwm));
            }
        }
        self.pss_sweeps += 1;
        // A tree whose every member vanished mid-sweep tells nothing.
        self.pss_last = pss_seen.then_some(pss_sum);
        if let Some(pss) = self.pss_last {
            self.raise(HostFloor::PssSum, pss, t_ms);
        }
        if let Some(hwm) = hwm_max {
            self.raise(HostFloor::Vmhwm, hwm, t_ms);
        }
    }

    /// A `Key:   1234 kB` line of `/proc/<pid>/<file>`, in bytes.
    fn read_kib(&mut self, pid: i32, file: &str, key: &str) -> Option<u64> {
        self.buffer.clear();
        fs::File::open(format!("/proc/{pid}/{file}"))
            .and_then(|mut f| f.read_to_end(&mut self.buffer))
            .ok()?;
        kib_field(&self.buffer, key)
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
        let mut note = self.note.take();
        if let Some(cgroup) = self.cgroup.take() {
            if let Err(e) = cgroup.remove() {
                let removal = format!("the case cgroup could not be removed: {e}");
                note = Some(match note {
                    Some(note) => format!("{note}; {removal}"),
                    None => removal,
                });
            }
        }
        let peak = self.peak();
        let floor = |f: HostFloor| self.floors[f.index()].map(|p| p.bytes);
        HostFigures {
            method: self.method,
            peak_bytes: peak.map(|(p, _)| p.bytes),
            peak_at_ms: peak.map(|(p, _)| p.t_ms),
            peak_source: peak.map(|(_, f)| f),
            floors: HostFloors {
                cgroup_anon_shmem_bytes: floor(HostFloor::CgroupAnonShmem),
                pss_sum_bytes: floor(HostFloor::PssSum),
                vmhwm_bytes: floor(HostFloor::Vmhwm),
                rusage_maxrss_bytes: floor(HostFloor::RusageMaxrss),
            },
            charged_peak_bytes: charged.map(|(bytes, _)| bytes),
            charged_peak_source: charged.map(|(_, source)| source),
            oom_kills,
            pss_sweeps: self.pss_sweeps,
            note,
        }
    }
}

/// The value of a `Key:   1234 kB` line, in bytes.
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
mod tests {
    use super::*;

    #[test]
    fn kib_fields() {
        let rollup =
            b"00400000-7ffd [rollup]\nRss:   2048 kB\nPss:   1536 kB\nPss_Anon:  1000 kB\n";
        assert_eq!(kib_field(rollup, "Pss:"), Some(1536 * 1024));
        let status = b"Name:\tx\nVmPeak:\t  9999 kB\nVmHWM:\t   300 kB\nVmRSS:\t 100 kB\n";
        assert_eq!(kib_field(status, "VmHWM:"), Some(300 * 1024));
        assert_eq!(kib_field(b"Name: x\n", "VmHWM:"), None);
        assert_eq!(kib_field(b"VmHWM: lots kB\n", "VmHWM:"), None);
    }

    #[test]
    fn the_largest_floor_is_the_peak_and_names_itself() {
        let mut meter = HostMeter::new(None, None);
        assert_eq!(meter.peak(), None);
        meter.raise(HostFloor::PssSum, 200, 10);
        meter.raise(HostFloor::Vmhwm, 150, 20);
        meter.record_rusage(300, Duration::from_millis(30));
        meter.record_rusage(0, Duration::from_millis(40)); // nothing learnt
        let (peak, floor) = meter.peak().expect("a peak");
        assert_eq!(
            (peak.bytes, peak.t_ms, floor),
            (300, 30, HostFloor::RusageMaxrss)
        );
        // A tie keeps the first floor in order, at its own time.
        meter.raise(HostFloor::PssSum, 300, 50);
        assert_eq!(meter.peak().map(|(_, f)| f), Some(HostFloor::PssSum));
        let figures = meter.finish(Duration::from_millis(60));
        assert_eq!(figures.method, HostMethod::ProcfsPss);
        assert_eq!(figures.floors.cgroup_anon_shmem_bytes, None);
        assert_eq!(figures.floors.rusage_maxrss_bytes, Some(300));
        assert_eq!(figures.oom_kills, None, "unknown without a cgroup, not 0");
    }

    #[test]
    fn sweeps_are_paced_by_their_cost() {
        let ms = Duration::from_millis;
        // Cheap sweeps: every tick without a cgroup, two a second with one.
        assert_eq!(Pace::WITHOUT_CGROUP.gap(Duration::from_micros(100)), ms(20));
        assert_eq!(Pace::WITH_CGROUP.gap(Duration::from_micros(100)), ms(500));
        // A 20 ms sweep (200 processes): 0.5 % / 0.1 % of a core.
        assert_eq!(Pace::WITHOUT_CGROUP.gap(ms(20)), ms(4000));
        assert_eq!(Pace::WITH_CGROUP.gap(ms(20)), ms(20_000));
        // However costly, at least every 30 s.
        assert_eq!(Pace::WITH_CGROUP.gap(ms(5000)), Duration::from_secs(30));
    }

    #[test]
    fn which_methods_compare() {
        use HostMethod::*;
        assert!(CgroupV1.comparable_with(CgroupV2));
        assert!(ProcfsPss.comparable_with(ProcfsPss));
        assert!(!CgroupV1.comparable_with(ProcfsPss));
        assert!(!ProcfsRss.comparable_with(CgroupV1));
        assert!(!Unknown.comparable_with(Unknown));
        let read: HostMethod = serde_json::from_str("\"cgroup-v9\"").expect("lenient");
        assert_eq!(read, Unknown);
    }

    #[test]
    fn method_names_are_stable() {
        for (method, name) in [
            (HostMethod::CgroupV1, "cgroup-v1"),
            (HostMethod::CgroupV2, "cgroup-v2"),
            (HostMethod::ProcfsPss, "procfs-pss"),
            (HostMethod::ProcfsRss, "procfs-rss"),
        ] {
            assert_eq!(serde_json::to_value(method).ok(), Some(name.into()));
            assert_eq!(method.as_str(), name);
        }
        for floor in HostFloor::ALL {
            assert_eq!(
                serde_json::to_value(floor).ok(),
                Some(floor.as_str().into())
            );
        }
    }
}
