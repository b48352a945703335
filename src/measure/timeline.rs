//! A case's memory over time, in bounded storage that never loses the peak.
//!
//! A soak case sampled every 50 ms for a day is 1.7 million samples. The
//! timeline keeps at most [`Timeline::CAPACITY`] points: when full, it merges
//! neighbours pairwise and doubles the number of samples each point covers.
//! A merged point keeps the *maximum* of each figure, so downsampling can
//! only widen a spike in time, never lower it, and the exact peak (with the
//! moment it happened) is also kept on the side.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::units::Bytes;

/// One reading of every figure, at one moment of a case.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// Time since the case started.
    pub at: Duration,
    /// The case's unreclaimable host memory now: the larger of its cgroup's
    /// anonymous + shmem charge and its tree's PSS sum (the last one read;
    /// PSS reads are paced).
    pub host_bytes: Option<Bytes>,
    /// Everything the case's cgroup is charged now, page cache included;
    /// `None` without a cgroup.
    pub host_charged_bytes: Option<Bytes>,
    /// GPU memory of the case's processes. `None` means not measured (no
    /// GPU sampler) or unknown, never zero.
    pub gpu_bytes: Option<Bytes>,
    /// Memory in use on the case's GPUs, everyone's (device `used`, summed).
    pub gpu_device_bytes: Option<Bytes>,
    /// The workload's processes in the tree at this moment.
    pub processes: u32,
    /// Beside a server (whose figures the ones above are then): its load
    /// client's unreclaimable host memory and GPU memory now.
    pub client_host_bytes: Option<Bytes>,
    pub client_gpu_bytes: Option<Bytes>,
}

/// One point: the largest figures seen over the samples it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TimelinePoint {
    /// Start of the covered span, milliseconds since the case started.
    pub t_ms: u64,
    /// The case's unreclaimable host memory (see `Sample::host_bytes`).
    pub host_bytes: Option<u64>,
    /// The case cgroup's whole charge, page cache included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_charged_bytes: Option<u64>,
    pub gpu_bytes: Option<u64>,
    /// Device `used` over the case's GPUs (everyone's memory).
    pub gpu_device_bytes: Option<u64>,
    pub processes: u32,
    /// Beside a server: its load client's figures (the ones above are the
    /// server's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_host_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_gpu_bytes: Option<u64>,
}

/// A server's figures in its two phases: starting (until it is ready) and
/// under load (after). Peaks of the samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ServerPhases {
    /// When the server was ready, milliseconds since the case started.
    pub ready_at_ms: Option<u64>,
    pub startup_host_peak: Option<Peak>,
    pub startup_gpu_peak: Option<Peak>,
    pub load_host_peak: Option<Peak>,
    pub load_gpu_peak: Option<Peak>,
}

/// The exact maximum of a figure and when it was first reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Peak {
    pub bytes: u64,
    pub t_ms: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    /// Samples merged into each point of `points`.
    pub samples_per_point: u64,
    pub samples: u64,
    pub host_peak: Option<Peak>,
    pub gpu_peak: Option<Peak>,
    /// A server case's phases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerPhases>,
    pub points: Vec<TimelinePoint>,
    /// A distributed case's ranks, each its own line: its GPU memory
    /// summed over its devices at each tick (`gpu_bytes`; the other
    /// figures are the case's only), bounded and downsampled alike, with
    /// its exact peak and when (`gpu_peak`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub ranks: BTreeMap<u32, Timeline>,
    /// Samples being gathered into the next point.
    #[serde(skip)]
    pending: Option<(TimelinePoint, u64)>,
}

impl Default for Timeline {
    fn default() -> Self {
        Self::new()
    }
}

impl Timeline {
    pub const CAPACITY: usize = 2048;

    pub fn new() -> Self {
        Timeline {
            samples_per_point: 1,
            samples: 0,
            host_peak: None,
            gpu_peak: None,
            server: None,
            points: Vec::with_capacity(Self::CAPACITY),
            ranks: BTreeMap::new(),
            pending: None,
        }
    }

    pub fn push(&mut self, sample: &Sample) {
        let t_ms = millis(sample.at);
        let point = TimelinePoint {
            t_ms,
            host_bytes: sample.host_bytes.map(Bytes::get),
            host_charged_bytes: sample.host_charged_bytes.map(Bytes::get),
            gpu_bytes: sample.gpu_bytes.map(Bytes::get),
            gpu_device_bytes: sample.gpu_device_bytes.map(Bytes::get),
            processes: sample.processes,
            client_host_bytes: sample.client_host_bytes.map(Bytes::get),
            client_gpu_bytes: sample.client_gpu_bytes.map(Bytes::get),
        };
        self.samples += 1;
        raise(&mut self.host_peak, point.host_bytes, t_ms);
        raise(&mut self.gpu_peak, point.gpu_bytes, t_ms);
        if let Some(phases) = self.server.as_mut() {
            let (host, gpu) = match phases.ready_at_ms {
                None => (&mut phases.startup_host_peak, &mut phases.startup_gpu_peak),
                Some(_) => (&mut phases.load_host_peak, &mut phases.load_gpu_peak),
            };
            raise(host, point.host_bytes, t_ms);
            raise(gpu, point.gpu_bytes, t_ms);
        }

        let (merged, count) = match self.pending.take() {
            Some((pending, count)) => (merge(pending, point), count + 1),
            None => (point, 1),
        };
        if count < self.samples_per_point {
            self.pending = Some((merged, count));
            return;
        }
        if self.points.len() == Self::CAPACITY {
            self.halve();
        }
        self.points.push(merged);
    }

    /// A server case's timeline: its samples are the server's, in two
    /// phases.
    pub fn serving() -> Self {
        Timeline {
            server: Some(ServerPhases::default()),
            ..Self::new()
        }
    }

    /// The server was ready at `at`: later samples are under load.
    pub fn mark_ready(&mut self, at: Duration) {
        if let Some(phases) = self.server.as_mut() {
            phases.ready_at_ms.get_or_insert(millis(at));
        }
    }

    /// Each rank's GPU memory at `at` (see [`Timeline::ranks`]).
    pub fn push_ranks(&mut self, at: Duration, ranks: impl Iterator<Item = (u32, u64)>) {
        for (rank, bytes) in ranks {
            let line = self.ranks.entry(rank).or_insert_with(|| Timeline {
                points: Vec::new(),
                ..Timeline::new()
            });
            line.push(&Sample {
                at,
                gpu_bytes: Some(Bytes(bytes)),
                ..Sample::default()
            });
        }
    }

    /// The points including the one still being gathered, for writing out.
    pub fn finish(&mut self) {
        for line in self.ranks.values_mut() {
            line.finish();
        }
        if let Some((pending, _)) = self.pending.take() {
            if self.points.len() == Self::CAPACITY {
                self.halve();
            }
            self.points.push(pending);
        }
    }

    fn halve(&mut self) {
        let merged: Vec<TimelinePoint> = self
            .points
            .chunks(2)
            .map(|pair| pair.iter().copied().reduce(merge).unwrap_or(pair[0]))
            .collect();
        self.points.clear();
        self.points.extend(merged);
        self.samples_per_point *= 2;
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn raise(peak: &mut Option<Peak>, value: Option<u64>, t_ms: u64) {
    if let Some(bytes) = value {
        if peak.is_none_or(|p| bytes > p.bytes) {
            *peak = Some(Peak { bytes, t_ms });
        }
    }
}

fn merge(a: TimelinePoint, b: TimelinePoint) -> TimelinePoint {
    TimelinePoint {
        t_ms: a.t_ms.min(b.t_ms),
        host_bytes: max_known(a.host_bytes, b.host_bytes),
        host_charged_bytes: max_known(a.host_charged_bytes, b.host_charged_bytes),
        gpu_bytes: max_known(a.gpu_bytes, b.gpu_bytes),
        gpu_device_bytes: max_known(a.gpu_device_bytes, b.gpu_device_bytes),
        processes: a.processes.max(b.processes),
        client_host_bytes: max_known(a.client_host_bytes, b.client_host_bytes),
        client_gpu_bytes: max_known(a.client_gpu_bytes, b.client_gpu_bytes),
    }
}

/// The larger of two figures; unknown only when both are.
fn max_known(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ms: u64, host: u64) -> Sample {
        Sample {
            at: Duration::from_millis(ms),
            host_bytes: Some(Bytes(host)),
            host_charged_bytes: None,
            gpu_bytes: None,
            gpu_device_bytes: None,
            processes: 1,
            ..Sample::default()
        }
    }

    #[test]
    fn empty_timeline_has_no_peak() {
        let mut timeline = Timeline::new();
        timeline.finish();
        assert_eq!(timeline.host_peak, None);
        assert!(timeline.points.is_empty());
    }

    #[test]
    fn stays_bounded_and_keeps_a_one_sample_spike() {
        let mut timeline = Timeline::new();
        let total = 100_000u64;
        for i in 0..total {
            let host = if i == 77_777 { 9_999 } else { 100 + i % 7 };
            timeline.push(&sample(i * 50, host));
            assert!(timeline.points.len() <= Timeline::CAPACITY);
        }
        timeline.finish();
        assert!(timeline.points.len() <= Timeline::CAPACITY);
        assert_eq!(timeline.samples, total);
        assert_eq!(
            timeline.host_peak,
            Some(Peak {
                bytes: 9_999,
                t_ms: 77_777 * 50
            })
        );
        let visible_max = timeline.points.iter().filter_map(|p| p.host_bytes).max();
        assert_eq!(
            visible_max,
            Some(9_999),
            "downsampling must not lower the spike"
        );
        assert!(timeline.points.windows(2).all(|w| w[0].t_ms < w[1].t_ms));
    }

    #[test]
    fn first_moment_of_a_plateau_is_the_peak_time() {
        let mut timeline = Timeline::new();
        for (ms, host) in [(0, 5), (50, 8), (100, 8), (150, 3)] {
            timeline.push(&sample(ms, host));
        }
        assert_eq!(timeline.host_peak, Some(Peak { bytes: 8, t_ms: 50 }));
    }

    #[test]
    fn unknown_figures_never_become_zero() {
        let mut timeline = Timeline::new();
        timeline.push(&Sample {
            at: Duration::ZERO,
            host_bytes: None,
            host_charged_bytes: None,
            gpu_bytes: None,
            gpu_device_bytes: None,
            processes: 0,
            ..Sample::default()
        });
        timeline.finish();
        assert_eq!(timeline.host_peak, None);
        assert_eq!(timeline.points[0].host_bytes, None);
        assert_eq!(max_known(None, Some(0)), Some(0));
    }

    #[test]
    fn a_server_timeline_keeps_its_startup_and_load_peaks_apart() {
        let mut timeline = Timeline::serving();
        timeline.push(&sample(0, 5));
        timeline.push(&sample(50, 9));
        timeline.mark_ready(Duration::from_millis(100));
        timeline.push(&sample(100, 7));
        timeline.push(&sample(150, 8));
        let phases = timeline.server.expect("phases");
        assert_eq!(phases.ready_at_ms, Some(100));
        assert_eq!(phases.startup_host_peak, Some(Peak { bytes: 9, t_ms: 50 }));
        assert_eq!(
            phases.load_host_peak,
            Some(Peak {
                bytes: 8,
                t_ms: 150
            })
        );
        assert_eq!(phases.load_gpu_peak, None, "never measured: null");
    }

    #[test]
    fn each_rank_is_a_line_of_its_own_with_its_peak() {
        let mut timeline = Timeline::new();
        for (i, (a, b)) in [(10, 40), (30, 20), (20, 10)].into_iter().enumerate() {
            let at = Duration::from_millis(i as u64 * 50);
            timeline.push(&sample(i as u64 * 50, 1));
            timeline.push_ranks(at, [(0, a), (1, b)].into_iter());
        }
        timeline.finish();
        let peaks: Vec<_> = timeline
            .ranks
            .iter()
            .map(|(rank, line)| (*rank, line.gpu_peak))
            .collect();
        assert_eq!(
            peaks,
            [
                (
                    0,
                    Some(Peak {
                        bytes: 30,
                        t_ms: 50
                    })
                ),
                (1, Some(Peak { bytes: 40, t_ms: 0 }))
            ]
        );
        assert_eq!(timeline.ranks[&1].points.len(), 3);
        let json = serde_json::to_value(&timeline).expect("serialise");
        assert_eq!(json["ranks"]["0"]["points"][1]["gpu_bytes"], 30);
        // A case without ranks writes no `ranks` key.
        let json = serde_json::to_value(Timeline::new()).expect("serialise");
        assert!(json.get("ranks").is_none(), "{json}");
    }
}
