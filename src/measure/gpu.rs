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

use serde::Serialize;

use super::nvml::{Gpu, GpuProcess};
use super::{ProcessTree, Sample};
use crate::units::Bytes;

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
    pub method: String,
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
    pub method: String,
    pub devices: Vec<DeviceFigures>,
}

#[derive(Debug, Clone, Default)]
struct DeviceState {
    before: Option<u64>,
    peak_used: Option<u64>,
    tree_peak: Option<u64>,
    tree_seen: bool,
    unknown: bool,
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
    sampled_label: String,
    errors: u64,
}

impl<'g> CaseGpu<'g> {
    /// Read each device's use before the case starts.
    pub fn begin(gpu: &'g mut Gpu, positions: Vec<usize>, sample_interval_ms: u64) -> Self {
        let states = positions
            .iter()
            .map(|&position| DeviceState {
                before: gpu.used_bytes(position).ok(),
                ..DeviceState::default()
            })
            .collect();
        CaseGpu {
            gpu,
            positions,
            states,
            seen_pids: HashSet::new(),
            total_tree_peak: None,
            processes: Vec::with_capacity(16),
            sampled_label: format!("sampled@{sample_interval_ms}ms"),
            errors: 0,
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
        let mut total = 0u64;
        let mut total_tree = 0u64;
        let mut total_known = true;
        for (state, &position) in self.states.iter_mut().zip(&self.positions) {
            let used = match self.gpu.used_bytes(position) {
                Ok(used) => Some(used),
                Err(_) => {
                    errors += 1;
                    None
                }
            };
            if let Some(used) = used {
                state.peak_used = Some(state.peak_used.map_or(used, |p| p.max(used)));
            }
            if self.gpu.processes(position, &mut self.processes).is_err() {
                errors += 1;
                total_known = false;
                continue;
            }
            let mut sum = 0u64;
            let mut found = false;
            for process in self.processes.iter().filter(|p| in_tree(tree, p.pid)) {
                found = true;
                match process.used_bytes {
                    Some(bytes) => sum = sum.saturating_add(bytes),
                    None => state.unknown = true,
                }
            }
            if found {
                state.tree_seen = true;
                state.tree_peak = Some(state.tree_peak.map_or(sum, |p| p.max(sum)));
            }
            state.live = if state.tree_seen {
                sum
            } else {
                // Nothing of the tree on this device (yet): the device's rise
                // is the best figure (containers report host pids).
                match (used, state.before) {
                    (Some(used), Some(before)) => used.saturating_sub(before),
                    _ => 0,
                }
            };
            if state.unknown {
                total_known = false;
            }
            total = total.saturating_add(state.live);
            total_tree = total_tree.saturating_add(sum);
        }
        if total_known {
            self.total_tree_peak = Some(
                self.total_tree_peak
                    .map_or(total_tree, |p| p.max(total_tree)),
            );
        }
        sample.gpu_bytes = total_known.then_some(Bytes(total));
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
        let mut devices = Vec::with_capacity(self.positions.len());
        for (state, &position) in self.states.iter().zip(&self.positions) {
            let device = &self.gpu.devices[position];
            let accounting: Option<u64> = self
                .seen_pids
                .iter()
                .filter_map(|&pid| self.gpu.accounting_max_bytes(position, pid))
                .reduce(|a, b| a.saturating_add(b));
            let sampled = if state.unknown { None } else { state.tree_peak };
            let delta = match (state.peak_used, state.before) {
                (Some(peak), Some(before)) if peak > before => Some(peak - before),
                _ => None,
            };
            let (peak_bytes, method) = match (state.tree_seen, sampled, accounting) {
                (true, Some(s), Some(a)) if a > s => (Some(a), "driver-accounting".to_string()),
                (true, Some(s), _) => (Some(s), self.sampled_label.clone()),
                (true, None, Some(a)) => (Some(a), "driver-accounting".to_string()),
                (true, None, None) => (None, "unavailable".to_string()),
                (false, _, Some(a)) => (Some(a), "driver-accounting".to_string()),
                (false, _, None) => match delta {
                    Some(d) => (Some(d), "device-delta".to_string()),
                    None => (Some(0), self.sampled_label.clone()),
                },
            };
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
        let all_sampled = devices.iter().all(|d| d.method == self.sampled_label);
        let peak_bytes = if all_sampled && self.total_tree_peak.is_some() {
            self.total_tree_peak.or(Some(0))
        } else {
            devices
                .iter()
                .map(|d| d.peak_bytes)
                .try_fold(0u64, |sum, p| p.map(|p| sum.saturating_add(p)))
        };
        // Devices the case never touched (nothing of it seen, no rise) do
        // not decide how the total was obtained.
        let contributing: Vec<&DeviceFigures> = devices
            .iter()
            .filter(|d| d.method != self.sampled_label || d.peak_bytes != Some(0))
            .collect();
        let method = match contributing.first() {
            None => self.sampled_label.clone(),
            Some(first) if contributing.iter().all(|d| d.method == first.method) => {
                first.method.clone()
            }
            Some(_) => "mixed".to_string(),
        };
        GpuFigures {
            peak_bytes,
            method,
            devices,
        }
    }
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
