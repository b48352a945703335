//! GPU memory outside the framework's allocator: what NVML counts for a
//! process less what its caching allocator holds (`reserved`), at the same
//! moment. The CUDA context, NCCL's buffers, CUDA-graph pools and cuBLAS
//! workspaces live there, and no `memory_reserved()` shows them.
//!
//! A moment is a tick at which a process's probe had said, within
//! a window (two sampling intervals, at least 100 ms; see [`OutsideMeter::new`]),
//! what its allocator reserved: its latest step line is set against the
//! GPU memory NVML lists for that process on this tick (by its pid; by its
//! rank, summed over the rank's processes, from a probe that gives no pid;
//! by the case's only process on a GPU, from one that gives neither). The
//! case's figure at a tick is the sum over the processes matched then. A
//! report older than the window is not used: NVML's figure may have moved
//! with the allocator since. Until a probe has reported a `reserved`
//! above zero there is no figure: never NVML's own figure less nothing.
//!
//! One process on two GPUs: the allocator's figure is its current
//! device's (`torch.cuda.memory_reserved()`), NVML's both devices', so
//! the other device's memory counts as outside.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::probe::AllocatorReport;

/// A process of the case on a GPU at a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessNow {
    pub pid: u32,
    /// Its GPU memory as NVML lists it, over every device.
    pub bytes: u64,
    pub rank: Option<u32>,
}

/// One moment: NVML's figure, and what the allocator held then.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Moment {
    gpu: u64,
    reserved: u64,
    /// `None` when a report of the moment gave no `allocated`.
    allocated: Option<u64>,
}

impl Moment {
    fn outside(&self) -> u64 {
        self.gpu.saturating_sub(self.reserved)
    }

    fn add(&mut self, other: Moment) {
        self.gpu = self.gpu.saturating_add(other.gpu);
        self.reserved = self.reserved.saturating_add(other.reserved);
        self.allocated = self
            .allocated
            .zip(other.allocated)
            .map(|(a, b)| a.saturating_add(b));
    }
}

/// A figure's course over the moments: its largest outside figure, and
/// the moment its GPU memory was largest.
#[derive(Debug, Clone, Copy, Default)]
struct Track {
    peak: u64,
    largest: Moment,
    seen: bool,
}

impl Track {
    fn record(&mut self, moment: Moment) {
        self.peak = self.peak.max(moment.outside());
        if !self.seen || moment.gpu > self.largest.gpu {
            self.largest = moment;
        }
        self.seen = true;
    }

    fn figures(&self) -> Outside {
        Outside {
            peak_bytes: self.peak,
            bytes: self.largest.outside(),
            gpu_bytes: self.largest.gpu,
            reserved_bytes: self.largest.reserved,
            fragmentation_bytes: self
                .largest
                .allocated
                .map(|allocated| self.largest.reserved.saturating_sub(allocated)),
        }
    }
}

/// Memory outside the allocator of a case, a process or a rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outside {
    /// The largest it was at any moment (`outside_allocator_peak_bytes`).
    pub peak_bytes: u64,
    /// At the moment NVML's figure was largest (`outside_allocator_bytes`).
    pub bytes: u64,
    /// NVML's figure at that moment.
    pub gpu_bytes: u64,
    /// The allocator's `reserved` at that moment.
    pub reserved_bytes: u64,
    /// `reserved` less `allocated` at that moment: what the allocator held
    /// and did not use. `None` when the probe gave no `allocated`.
    pub fragmentation_bytes: Option<u64>,
}

/// One process's figures (or one rank's, from a probe that gave no pid).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessOutside {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    pub instance: u32,
    #[serde(flatten)]
    pub figures: Outside,
}

/// What a case's run measured outside the allocator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutsideFigures {
    /// The case's: its matched processes summed at each moment.
    #[serde(flatten)]
    pub case: Outside,
    /// Moments set against NVML.
    pub moments: u64,
    /// Each process's own.
    pub processes: Vec<ProcessOutside>,
    /// Each rank's own, its processes summed at each moment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ranks: BTreeMap<u32, Outside>,
}

/// The meter: fed each tick, finished once the case is over.
#[derive(Debug)]
pub struct OutsideMeter {
    /// How old a report may be and still be set against this tick's
    /// NVML figure.
    window: Duration,
    /// Each process's latest report, and when it was read.
    reports: Vec<(AllocatorReport, Duration)>,
    case: Track,
    moments: u64,
    processes: BTreeMap<(Option<u32>, Option<u32>, u32), Track>,
    ranks: BTreeMap<u32, Track>,
}

impl OutsideMeter {
    /// A meter for a case sampled every `interval`.
    pub fn new(interval: Duration) -> Self {
        OutsideMeter {
            window: (interval * 2).max(Duration::from_millis(100)),
            reports: Vec::new(),
            case: Track::default(),
            moments: 0,
            processes: BTreeMap::new(),
            ranks: BTreeMap::new(),
        }
    }

    /// Whether a tick has anything to set against NVML: a report read
    /// now, or one still within the window.
    pub fn wants(&self, fresh: &[AllocatorReport]) -> bool {
        !fresh.is_empty() || !self.reports.is_empty()
    }

    /// One tick, `now` since the case started: the case's processes on a
    /// GPU now, and the allocator's figures the probe reported since the
    /// tick before.
    pub fn tick(&mut self, now: Duration, processes: &[ProcessNow], fresh: &[AllocatorReport]) {
        for report in fresh {
            let key = (report.instance, report.pid, report.rank);
            match self
                .reports
                .iter_mut()
                .find(|(r, _)| (r.instance, r.pid, r.rank) == key)
            {
                Some(kept) => *kept = (*report, now),
                None => self.reports.push((*report, now)),
            }
        }
        let window = self.window;
        self.reports
            .retain(|(_, read_at)| now.saturating_sub(*read_at) <= window);
        if processes.is_empty() || self.reports.is_empty() {
            return;
        }
        let mut taken: Vec<u32> = Vec::new();
        let mut case = Moment {
            allocated: Some(0),
            ..Moment::default()
        };
        let mut ranks: BTreeMap<u32, Moment> = BTreeMap::new();
        let mut matched = false;
        for (report, _) in self.reports.iter().filter(|(r, _)| r.reserved > 0) {
            let whose: Vec<&ProcessNow> = match (report.pid, report.rank) {
                (Some(pid), _) => processes.iter().filter(|p| p.pid == pid).collect(),
                (None, Some(rank)) => processes.iter().filter(|p| p.rank == Some(rank)).collect(),
                (None, None) if processes.len() == 1 => processes.iter().collect(),
                (None, None) => Vec::new(),
            };
            // A process is set against one report only.
            if whose.is_empty() || whose.iter().any(|p| taken.contains(&p.pid)) {
                continue;
            }
            taken.extend(whose.iter().map(|p| p.pid));
            let moment = Moment {
                gpu: whose.iter().map(|p| p.bytes).fold(0, u64::saturating_add),
                reserved: report.reserved,
                allocated: report.allocated,
            };
            let rank = report.rank.or_else(|| whose.iter().find_map(|p| p.rank));
            let pid = report
                .pid
                .or_else(|| (whose.len() == 1).then(|| whose[0].pid));
            self.processes
                .entry((pid, rank, report.instance))
                .or_default()
                .record(moment);
            if let Some(rank) = rank {
                ranks
                    .entry(rank)
                    .or_insert(Moment {
                        allocated: Some(0),
                        ..Moment::default()
                    })
                    .add(moment);
            }
            case.add(moment);
            matched = true;
        }
        if !matched {
            return;
        }
        self.moments += 1;
        self.case.record(case);
        for (rank, moment) in ranks {
            self.ranks.entry(rank).or_default().record(moment);
        }
    }

    /// The figures; `None` when no moment was set against NVML.
    pub fn finish(self) -> Option<OutsideFigures> {
        (self.moments > 0).then(|| OutsideFigures {
            case: self.case.figures(),
            moments: self.moments,
            processes: self
                .processes
                .iter()
                .map(|(&(pid, rank, instance), track)| ProcessOutside {
                    pid,
                    rank,
                    instance,
                    figures: track.figures(),
                })
                .collect(),
            ranks: self
                .ranks
                .iter()
                .map(|(&rank, track)| (rank, track.figures()))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    /// Ticks a second apart: no report outlives its own tick.
    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn process(pid: u32, mib: u64, rank: Option<u32>) -> ProcessNow {
        ProcessNow {
            pid,
            bytes: mib * MIB,
            rank,
        }
    }

    fn report(
        pid: Option<u32>,
        rank: Option<u32>,
        reserved: u64,
        allocated: u64,
    ) -> AllocatorReport {
        AllocatorReport {
            instance: 0,
            pid,
            rank,
            reserved: reserved * MIB,
            allocated: Some(allocated * MIB),
        }
    }

    /// No report of `reserved`, or one of 0, is no figure at all: never
    /// NVML's figure less nothing.
    #[test]
    fn without_a_reserved_there_is_no_figure() {
        let mut meter = OutsideMeter::new(Duration::from_millis(50));
        meter.tick(at(1000), &[process(7, 900, None)], &[]);
        meter.tick(
            at(2000),
            &[process(7, 900, None)],
            &[report(Some(7), None, 0, 0)],
        );
        assert_eq!(meter.finish(), None);
    }

    /// NVML's 1000 MiB against a reserved 700: 300 outside; the moment of
    /// the largest NVML figure gives the figure at the peak and the
    /// fragmentation; the peak is the largest at any moment.
    #[test]
    fn a_process_is_set_against_its_own_report_each_tick() {
        let mut meter = OutsideMeter::new(Duration::from_millis(50));
        meter.tick(
            at(3000),
            &[process(7, 1000, None)],
            &[report(Some(7), None, 700, 500)],
        );
        meter.tick(
            at(4000),
            &[process(7, 1400, None)],
            &[report(Some(7), None, 1200, 1100)],
        );
        meter.tick(
            at(5000),
            &[process(7, 900, None)],
            &[report(Some(7), None, 400, 400)],
        );
        // A tick with no report since the one before sets nothing.
        meter.tick(at(6000), &[process(7, 5000, None)], &[]);
        let figures = meter.finish().expect("figures");
        assert_eq!(figures.moments, 3);
        assert_eq!(figures.case.peak_bytes, 500 * MIB);
        assert_eq!(figures.case.bytes, 200 * MIB);
        assert_eq!(figures.case.gpu_bytes, 1400 * MIB);
        assert_eq!(figures.case.fragmentation_bytes, Some(100 * MIB));
        assert_eq!(figures.processes.len(), 1);
        assert_eq!(figures.processes[0].pid, Some(7));
    }

    /// Two ranks, each by its pid: each its own figures, the case their
    /// sum at each moment; a probe without a pid is matched by its rank.
    #[test]
    fn ranks_are_kept_apart_and_summed_for_the_case() {
        let mut meter = OutsideMeter::new(Duration::from_millis(50));
        let processes = [process(10, 2000, Some(0)), process(11, 2600, Some(1))];
        meter.tick(
            at(7000),
            &processes,
            &[
                report(Some(10), Some(0), 1500, 1000),
                report(None, Some(1), 1500, 1400),
            ],
        );
        let figures = meter.finish().expect("figures");
        assert_eq!(figures.case.bytes, 1600 * MIB);
        assert_eq!(figures.ranks[&0].bytes, 500 * MIB);
        assert_eq!(figures.ranks[&1].bytes, 1100 * MIB);
        assert_eq!(figures.ranks[&1].fragmentation_bytes, Some(100 * MIB));
        assert_eq!(figures.processes.len(), 2);
    }

    /// A report that names no process is matched only when the case has
    /// one process on a GPU: with two, it could be either's.
    #[test]
    fn a_report_naming_no_process_is_matched_only_when_there_is_one() {
        let mut meter = OutsideMeter::new(Duration::from_millis(50));
        meter.tick(
            at(8000),
            &[process(7, 1000, None)],
            &[report(None, None, 600, 600)],
        );
        assert_eq!(meter.finish().map(|f| f.case.bytes), Some(400 * MIB));
        let mut meter = OutsideMeter::new(Duration::from_millis(50));
        meter.tick(
            at(9000),
            &[process(7, 1000, None), process(8, 1000, None)],
            &[report(None, None, 600, 600)],
        );
        assert_eq!(meter.finish(), None);
    }

    /// Two processes reporting at their own pace: a report read a tick
    /// ago, within the window, still counts, so the case's figure sums
    /// both; past the window it no longer does.
    #[test]
    fn a_report_within_the_window_counts_beside_a_fresh_one() {
        let mut meter = OutsideMeter::new(Duration::from_millis(50));
        let processes = [process(10, 1000, None), process(11, 600, None)];
        meter.tick(
            Duration::from_millis(20),
            &processes,
            &[report(Some(10), None, 700, 700)],
        );
        meter.tick(
            Duration::from_millis(40),
            &processes,
            &[report(Some(11), None, 400, 400)],
        );
        let figures = meter.finish().expect("figures");
        assert_eq!(figures.case.gpu_bytes, 1600 * MIB);
        assert_eq!(figures.case.bytes, 500 * MIB);

        let mut meter = OutsideMeter::new(Duration::from_millis(50));
        meter.tick(
            Duration::from_millis(20),
            &processes,
            &[report(Some(10), None, 700, 700)],
        );
        meter.tick(
            Duration::from_millis(200),
            &processes,
            &[report(Some(11), None, 400, 400)],
        );
        let figures = meter.finish().expect("figures");
        assert_eq!(
            figures.case.gpu_bytes,
            1000 * MIB,
            "the first report is too old by then"
        );
    }

    /// An allocator that reports more than NVML lists (a figure read just
    /// before the allocator let go) has nothing outside, never less.
    #[test]
    fn a_reserved_above_nvml_is_nothing_outside() {
        let mut meter = OutsideMeter::new(Duration::from_millis(50));
        meter.tick(
            at(10000),
            &[process(7, 500, None)],
            &[report(Some(7), None, 800, 800)],
        );
        assert_eq!(meter.finish().map(|f| f.case.peak_bytes), Some(0));
    }
}
