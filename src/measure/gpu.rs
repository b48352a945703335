//! GPU memory of one case: per-tick sampling against the case's process
//! tree, and the figures at the end, each with the method that produced it.
//!
//! Three methods, best first, chosen per device:
//! - `sampled@<interval>`: the peak, over ticks, of the summed
//!   `used_gpu_memory` of every process of the case's tree on the device;
//! - `driver-accounting`: with NVML accounting mode on, the driver's exact
//!   per-process maximum (no sampling gap), summed over the tree's pids —
//!   used when larger than the sampled figure, which a short spike makes it;
//! - `device-delta`: when no process of the tree ever appeared on a device
//!   whose use rose (containers: NVML reports host pids), the device's peak
//!   use minus its use before the case.
//!
//! A process whose memory NVML reports as unavailable makes its device's
//! figure unknown (`None`), never zero.

use std::collections::HashSet;
use std::fmt;

use serde::{Serialize, Serializer};

use super::nvml::{AccountingRecord, Gpu, GpuProcess};
use super::{ProcessTree, Sample};
use crate::units::Bytes;

/// How a GPU figure was obtained. Serialized (results.json, the lock) and
/// shown by the names reports have always used: `sampled@50ms`,
/// `driver-accounting`, `device-delta`, `mixed`, `unavailable`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuMethod {
    /// The peak over ticks of the tree's summed per-process memory, read
    /// every `interval_ms`.
    Sampled { interval_ms: u64 },
    /// The driver's per-process maxima (accounting mode).
    DriverAccounting,
    /// The device's rise during the case: no process of the case was seen.
    DeviceDelta,
    /// The total's method when its devices used different ones.
    Mixed,
    /// Unknown: NVML could not tell (or the device is not mapped).
    Unavailable,
}

impl fmt::Display for GpuMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuMethod::Sampled { interval_ms } => write!(f, "sampled@{interval_ms}ms"),
            GpuMethod::DriverAccounting => f.write_str("driver-accounting"),
            GpuMethod::DeviceDelta => f.write_str("device-delta"),
            GpuMethod::Mixed => f.write_str("mixed"),
            GpuMethod::Unavailable => f.write_str("unavailable"),
        }
    }
}

impl Serialize for GpuMethod {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A process on one of the case's GPUs that oomgate did not start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ForeignProcess {
    pub pid: u32,
    /// From /proc, when the pid is visible in this namespace.
    pub name: Option<String>,
    pub device_index: u32,
    pub device_uuid: String,
    pub used_bytes: Option<u64>,
}

/// The figures of one device for one case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceFigures {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub total_bytes: u64,
    /// Device use just before the case started.
    pub before_bytes: Option<u64>,
    /// Peak of the device's use while the case ran (everyone's).
    pub device_peak_bytes: Option<u64>,
    /// The case's peak on this device, by `method`; `None` when unknown.
    pub peak_bytes: Option<u64>,
    pub method: GpuMethod,
    pub sampled_peak_bytes: Option<u64>,
    pub accounting_peak_bytes: Option<u64>,
}

/// The GPU figures of one case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuFigures {
    /// All devices together; `None` when any device's figure is unknown.
    pub peak_bytes: Option<u64>,
    /// `sampled@50ms`, `driver-accounting`, `device-delta`, or `mixed` when
    /// devices used different methods (each device says its own).
    pub method: GpuMethod,
    pub devices: Vec<DeviceFigures>,
}

#[derive(Debug, Clone, Default)]
struct DeviceState {
    before: Option<u64>,
    peak_used: Option<u64>,
    tree_peak: Option<u64>,
    tree_seen: bool,
    unknown: bool,
    /// Whether the process list was ever read (else nothing is known).
    listed: bool,
    /// This tick's readings, before the live figure is decided.
    used_now: Option<u64>,
    tree_now: u64,
    /// This tick's figure for live budget checks.
    live: u64,
}

/// GPU measurement of one case, on the devices it sees.
pub struct CaseGpu<'g> {
    gpu: &'g mut Gpu,
    positions: Vec<usize>,
    states: Vec<DeviceState>,
    /// Every pid of the case's tree seen during the run, for accounting.
    seen_pids: HashSet<u32>,
    total_tree_peak: Option<u64>,
    processes: Vec<GpuProcess>,
    /// `sampled@<interval>`, this case's sampled method.
    sampled: GpuMethod,
    errors: u64,
    /// Microseconds since the epoch when the case started: driver
    /// accounting records older than this belong to someone else.
    started_us: u64,
    /// The case sees a device oomgate cannot map (a MIG instance): its GPU
    /// figures are unknown rather than a misleading zero.
    unmapped: bool,
}

impl<'g> CaseGpu<'g> {
    /// Read each device's use before the case starts. `unmapped`: the case
    /// also sees devices that could not be mapped to NVML ones.
    pub fn begin(
        gpu: &'g mut Gpu,
        positions: Vec<usize>,
        sample_interval_ms: u64,
        unmapped: bool,
    ) -> Self {
        let states = positions
            .iter()
            .map(|&position| DeviceState {
                before: gpu.used_bytes(position).ok(),
                ..DeviceState::default()
            })
            .collect();
        let started_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        CaseGpu {
            gpu,
            positions,
            states,
            seen_pids: HashSet::new(),
            total_tree_peak: None,
            processes: Vec::with_capacity(16),
            sampled: GpuMethod::Sampled {
                interval_ms: sample_interval_ms,
            },
            errors: 0,
            started_us,
            unmapped,
        }
    }

    /// Compute processes on the case's devices that are not in `tree`.
    pub fn foreign_processes(&mut self, tree: &ProcessTree) -> Vec<ForeignProcess> {
        let mut foreign = Vec::new();
        for &position in &self.positions {
            if self.gpu.processes(position, &mut self.processes).is_err() {
                continue;
            }
            let device = &self.gpu.devices[position];
            for process in &self.processes {
                if !in_tree(tree, process.pid) {
                    foreign.push(ForeignProcess {
                        pid: process.pid,
                        name: process_name(process.pid),
                        device_index: device.index,
                        device_uuid: device.uuid.clone(),
                        used_bytes: process.used_bytes,
                    });
                }
            }
        }
        foreign
    }

    /// One tick: fill `sample.gpu_bytes` with the case's GPU memory now
    /// (the figure budgets are checked against). Returns the number of
    /// NVML calls that failed.
    pub fn sample(&mut self, tree: &ProcessTree, sample: &mut Sample) -> u64 {
        let mut errors = 0;
        self.seen_pids
            .extend(tree.pids().filter_map(|p| u32::try_from(p).ok()));
        let mut lists_complete = true;
        for (state, &position) in self.states.iter_mut().zip(&self.positions) {
            state.used_now = match self.gpu.used_bytes(position) {
                Ok(used) => Some(used),
                Err(_) => {
                    errors += 1;
                    None
                }
            };
            if let Some(used) = state.used_now {
                state.peak_used = Some(state.peak_used.map_or(used, |p| p.max(used)));
            }
            state.tree_now = 0;
            if self.gpu.processes(position, &mut self.processes).is_err() {
                errors += 1;
                lists_complete = false;
                continue;
            }
            state.listed = true;
            let mut found = false;
            for process in self.processes.iter().filter(|p| in_tree(tree, p.pid)) {
                found = true;
                match process.used_bytes {
                    Some(bytes) => state.tree_now = state.tree_now.saturating_add(bytes),
                    None => state.unknown = true,
                }
            }
            if found {
                state.tree_seen = true;
                state.tree_peak = Some(
                    state
                        .tree_peak
                        .map_or(state.tree_now, |p| p.max(state.tree_now)),
                );
            }
        }
        // Once a process of the case was seen on any device, NVML's pids are
        // ours: a device where none appears is untouched (0), not a rise to
        // blame on the case. Only when none was ever seen (containers) is a
        // device's rise the best figure.
        let any_seen = self.states.iter().any(|s| s.tree_seen);
        let mut total = 0u64;
        let mut total_tree = 0u64;
        for state in &mut self.states {
            state.live = if any_seen {
                state.tree_now
            } else {
                match (state.used_now, state.before) {
                    (Some(used), Some(before)) => used.saturating_sub(before),
                    _ => 0,
                }
            };
            total = total.saturating_add(state.live);
            total_tree = total_tree.saturating_add(state.tree_now);
        }
        let known = lists_complete && !self.unmapped && !self.states.iter().any(|s| s.unknown);
        if known {
            self.total_tree_peak = Some(
                self.total_tree_peak
                    .map_or(total_tree, |p| p.max(total_tree)),
            );
        }
        sample.gpu_bytes = known.then_some(Bytes(total));
        let device_used: Option<u64> = self
            .states
            .iter()
            .map(|s| s.used_now)
            .try_fold(0u64, |sum, used| used.map(|u| sum.saturating_add(u)));
        sample.gpu_device_bytes = device_used.filter(|_| !self.states.is_empty()).map(Bytes);
        self.errors += errors;
        errors
    }

    /// Each device's live figure with its device, for headroom checks.
    pub fn live_by_device(&self) -> impl Iterator<Item = (&super::nvml::GpuDevice, u64)> + '_ {
        self.positions
            .iter()
            .zip(&self.states)
            .map(|(&p, s)| (&self.gpu.devices[p], s.live))
    }

    pub fn errors(&self) -> u64 {
        self.errors
    }

    /// The case's figures, once its processes are gone. Accounting
    /// records are read now, so they include pids that already exited.
    pub fn finish(self) -> GpuFigures {
        let accounting: Vec<Option<u64>> = self
            .positions
            .iter()
            .map(|&position| self.accounting_peak(position))
            .collect();
        // The driver's record of a pid of the tree is a per-process figure
        // too: NVML's pids are ours, even if sampling never caught one.
        let pids_match =
            self.states.iter().any(|s| s.tree_seen) || accounting.iter().any(Option::is_some);
        let mut devices = Vec::with_capacity(self.positions.len());
        for ((state, &position), accounting) in
            self.states.iter().zip(&self.positions).zip(accounting)
        {
            let device = &self.gpu.devices[position];
            let sampled = if state.unknown { None } else { state.tree_peak };
            let (peak_bytes, method) = device_figure(
                DeviceEnd {
                    readable: !self.unmapped && state.listed,
                    pids_match,
                    tree_seen: state.tree_seen,
                    sampled,
                    accounting,
                    delta: match (state.peak_used, state.before) {
                        (Some(peak), Some(before)) => Some(peak.saturating_sub(before)),
                        _ => None,
                    },
                },
                &self.sampled,
            );
            devices.push(DeviceFigures {
                index: device.index,
                uuid: device.uuid.clone(),
                name: device.name.clone(),
                total_bytes: device.total_bytes,
                before_bytes: state.before,
                device_peak_bytes: state.peak_used,
                peak_bytes,
                method,
                sampled_peak_bytes: sampled.filter(|_| state.tree_seen),
                accounting_peak_bytes: accounting,
            });
        }
        let known = |d: &DeviceFigures| d.peak_bytes;
        let all_sampled = devices.iter().all(|d| d.method == self.sampled);
        let peak_bytes = if self.unmapped {
            None
        } else if all_sampled {
            // The peak of the per-sample sum; never below one device's own
            // peak (a tick where another device could not be read is not in
            // the sum).
            let device_max = devices.iter().filter_map(known).max();
            match (self.total_tree_peak, device_max) {
                (Some(total), Some(device)) => Some(total.max(device)),
                (total, device) => total.or(device).or(Some(0)),
            }
        } else {
            devices
                .iter()
                .map(known)
                .try_fold(0u64, |sum, p| p.map(|p| sum.saturating_add(p)))
        };
        // Devices the case never touched (nothing of it seen, no rise) do
        // not decide how the total was obtained.
        let contributing: Vec<&DeviceFigures> = devices
            .iter()
            .filter(|d| d.method != self.sampled || d.peak_bytes != Some(0))
            .collect();
        let method = match contributing.first() {
            _ if self.unmapped => GpuMethod::Unavailable,
            None => self.sampled.clone(),
            Some(first) if contributing.iter().all(|d| d.method == first.method) => {
                first.method.clone()
            }
            Some(_) => GpuMethod::Mixed,
        };
        GpuFigures {
            peak_bytes,
            method,
            devices,
        }
    }

    /// The driver's accounting figure of the tree's pids on one device.
    fn accounting_peak(&self, position: usize) -> Option<u64> {
        let records: Vec<AccountingRecord> = self
            .seen_pids
            .iter()
            .filter_map(|&pid| self.gpu.accounting_record(position, pid))
            // Records from before the case are another process that once
            // had this pid.
            .filter(|r| r.start_us >= self.started_us.saturating_sub(1_000_000))
            .collect();
        (!records.is_empty())
            .then(|| concurrent_peak(&records).min(self.gpu.devices[position].total_bytes))
    }
}

/// What is known of one device once the case is over.
#[derive(Debug, Clone, Copy)]
struct DeviceEnd {
    /// The process list was read and the device is mapped.
    readable: bool,
    /// A per-process figure of the case exists on some device (sampled or
    /// the driver's): NVML's pids are the case's.
    pids_match: bool,
    /// A process of the case's tree was seen on this device.
    tree_seen: bool,
    /// The sampled peak of the tree on this device; `None` if unknown.
    sampled: Option<u64>,
    accounting: Option<u64>,
    /// The device's peak use minus its use before the case.
    delta: Option<u64>,
}

/// A device's figure and method: per-process whenever per-process figures
/// exist, the device delta only when none does.
fn device_figure(end: DeviceEnd, sampled_method: &GpuMethod) -> (Option<u64>, GpuMethod) {
    let unavailable = (None, GpuMethod::Unavailable);
    if !end.readable {
        return unavailable;
    }
    match (end.tree_seen, end.sampled, end.accounting) {
        (true, Some(s), Some(a)) if a > s => (Some(a), GpuMethod::DriverAccounting),
        (true, Some(s), _) => (Some(s), sampled_method.clone()),
        (true, None, Some(a)) => (Some(a), GpuMethod::DriverAccounting),
        (true, None, None) => unavailable,
        (false, _, Some(a)) => (Some(a), GpuMethod::DriverAccounting),
        // The case ran on other devices; this one it left alone.
        (false, _, None) if end.pids_match => (Some(0), sampled_method.clone()),
        (false, _, None) => match end.delta {
            Some(0) => (Some(0), sampled_method.clone()),
            Some(d) => (Some(d), GpuMethod::DeviceDelta),
            None => unavailable,
        },
    }
}

/// The largest sum of per-process maxima over processes whose lifetimes
/// overlap: an upper bound of the true peak that, unlike a plain sum, does
/// not add up processes that ran one after another.
pub fn concurrent_peak(records: &[AccountingRecord]) -> u64 {
    let mut events: Vec<(u64, bool, u64)> = Vec::with_capacity(records.len() * 2);
    for record in records {
        events.push((record.start_us, true, record.max_bytes));
        events.push((record.end_us.max(record.start_us), false, record.max_bytes));
    }
    // At equal times, ends come first: a process that ended as another
    // began did not overlap it.
    events.sort_by_key(|&(time, is_start, _)| (time, is_start));
    let (mut now, mut peak) = (0u64, 0u64);
    for (_, is_start, bytes) in events {
        if is_start {
            now = now.saturating_add(bytes);
            peak = peak.max(now);
        } else {
            now = now.saturating_sub(bytes);
        }
    }
    peak
}

fn in_tree(tree: &ProcessTree, pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(|pid| tree.pids().any(|p| p == pid))
}

/// A process's command name from /proc, when visible.
pub fn process_name(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|name| name.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(start_us: u64, end_us: u64, max_bytes: u64) -> AccountingRecord {
        AccountingRecord {
            start_us,
            end_us,
            max_bytes,
        }
    }

    #[test]
    fn methods_keep_the_names_results_and_locks_use() {
        let table = [
            (GpuMethod::Sampled { interval_ms: 50 }, "sampled@50ms"),
            (GpuMethod::Sampled { interval_ms: 1000 }, "sampled@1000ms"),
            (GpuMethod::DriverAccounting, "driver-accounting"),
            (GpuMethod::DeviceDelta, "device-delta"),
            (GpuMethod::Mixed, "mixed"),
            (GpuMethod::Unavailable, "unavailable"),
        ];
        for (method, name) in table {
            assert_eq!(method.to_string(), name);
            assert_eq!(
                serde_json::to_value(method).ok(),
                Some(serde_json::json!(name))
            );
        }
    }

    const SAMPLED: GpuMethod = GpuMethod::Sampled { interval_ms: 50 };

    fn end(tree_seen: bool, sampled: Option<u64>, accounting: Option<u64>) -> DeviceEnd {
        DeviceEnd {
            readable: true,
            pids_match: tree_seen || accounting.is_some(),
            tree_seen,
            sampled,
            accounting,
            delta: Some(5000),
        }
    }

    #[test]
    fn per_process_figures_win_whenever_they_exist() {
        let other_device_seen = DeviceEnd {
            pids_match: true,
            ..end(false, None, None)
        };
        let none_seen = end(false, None, None);
        let table: &[(DeviceEnd, Option<u64>, GpuMethod)] = &[
            (end(true, Some(100), None), Some(100), SAMPLED),
            (end(true, Some(100), Some(100)), Some(100), SAMPLED),
            (
                end(true, Some(100), Some(101)),
                Some(101),
                GpuMethod::DriverAccounting,
            ),
            (
                end(true, None, Some(7)),
                Some(7),
                GpuMethod::DriverAccounting,
            ),
            (end(true, None, None), None, GpuMethod::Unavailable),
            // Sampling never caught the case's process; the driver did: its
            // figure, not the device's rise.
            (
                end(false, None, Some(7)),
                Some(7),
                GpuMethod::DriverAccounting,
            ),
            // The case ran elsewhere: this device's rise is someone else's.
            (other_device_seen, Some(0), SAMPLED),
            (none_seen, Some(5000), GpuMethod::DeviceDelta),
            (
                DeviceEnd {
                    delta: Some(0),
                    ..none_seen
                },
                Some(0),
                SAMPLED,
            ),
            (
                DeviceEnd {
                    delta: None,
                    ..none_seen
                },
                None,
                GpuMethod::Unavailable,
            ),
            (
                DeviceEnd {
                    readable: false,
                    ..end(true, Some(100), Some(200))
                },
                None,
                GpuMethod::Unavailable,
            ),
        ];
        for (end, bytes, method) in table {
            assert_eq!(
                device_figure(*end, &SAMPLED),
                (*bytes, method.clone()),
                "{end:?}"
            );
        }
    }

    #[test]
    fn accounting_sums_only_processes_that_overlapped() {
        // One after another: the peak is the larger, not the sum.
        assert_eq!(
            concurrent_peak(&[record(0, 10, 100), record(10, 20, 300), record(20, 30, 200)]),
            300
        );
        // Together: the sum.
        assert_eq!(
            concurrent_peak(&[record(0, 10, 100), record(5, 20, 300)]),
            400
        );
        // A parent with two overlapping children, then a third alone.
        let records = [
            record(0, 100, 50),
            record(10, 30, 100),
            record(20, 40, 100),
            record(50, 60, 500),
        ];
        assert_eq!(concurrent_peak(&records), 550);
        assert_eq!(concurrent_peak(&[]), 0);
    }
}
