//! Waiting, before a case starts, for its GPUs to give back what the run's
//! earlier cases held: the driver frees a finished process's memory
//! asynchronously, and a process an earlier case left may still be
//! exiting, so a case started at once can find its GPU fuller than it will
//! be a second later — and fail with an OOM that is not its own, or carry
//! an earlier case's memory in its device delta.
//!
//! A device has settled when its use is back within [`SETTLED_WITHIN`] of
//! its idle level, taken when the run started, not counting what other
//! tenants' processes hold (processes visible here that oomgate did not
//! start: the `foreign_processes` policy is for them, and waiting on them
//! could take forever). The wait polls every `POLL` and ends at
//! `settle_timeout` or an interrupt; [`Settle`] records it.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{ForeignPid, GpuProcess, is_foreign, process_name};
use crate::measure::nvml::Gpu;

/// How far above its idle level a device may be and count as settled.
pub const SETTLED_WITHIN: u64 = 256 * 1024 * 1024;
const POLL: Duration = Duration::from_millis(50);

/// How the wait for a case's GPUs went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settle {
    /// Seconds waited before the case started.
    pub waited_s: f64,
    /// Every device was back within the threshold; `false`: the case
    /// started at `settle_timeout` (or an interrupt) without it.
    pub settled: bool,
    /// Each device the case sees, as the wait left it.
    pub devices: Vec<SettledDevice>,
}

/// One device at the end of the wait.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettledDevice {
    pub index: u32,
    pub uuid: String,
    /// Its use above its idle level, other tenants' left out; `None`: not
    /// readable.
    pub above_idle_bytes: Option<u64>,
    /// The processes of this run (or unknown ones) still on it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<ForeignPid>,
}

/// Wait until every device at `positions` is back within `within` (before
/// a case, [`SETTLED_WITHIN`]) of `idle[position]`, for at most `timeout`,
/// or until `stop` says so. In a container (NVML's pids are the host's) no process
/// can be told to be another tenant's, so all the rise is waited on.
pub fn wait(
    gpu: &Gpu,
    positions: &[usize],
    idle: &[Option<u64>],
    within: u64,
    timeout: Duration,
    stop: impl Fn() -> bool,
) -> Settle {
    let started = Instant::now();
    let mut processes = Vec::new();
    loop {
        let devices: Vec<SettledDevice> = positions
            .iter()
            .map(|&position| {
                look(
                    gpu,
                    position,
                    idle.get(position).copied().flatten(),
                    &mut processes,
                )
            })
            .collect();
        let settled = devices
            .iter()
            .all(|d| d.above_idle_bytes.is_none_or(|above| above <= within));
        if settled || started.elapsed() >= timeout || stop() {
            return Settle {
                waited_s: started.elapsed().as_secs_f64(),
                settled,
                devices,
            };
        }
        std::thread::sleep(POLL.min(timeout.saturating_sub(started.elapsed())));
    }
}

/// A device's idle level when the run starts: its use less what other
/// tenants' processes hold, as [`wait`] measures it later — so a tenant
/// there from the start is neither in the level nor in what is waited on.
pub fn idle_level(gpu: &Gpu, position: usize) -> Option<u64> {
    let mut processes = Vec::new();
    let (level, _) = own_level(gpu, position, &mut processes);
    level
}

/// One device now: its use above idle, other tenants' processes left out,
/// and who of this run holds it.
fn look(
    gpu: &Gpu,
    position: usize,
    idle: Option<u64>,
    processes: &mut Vec<GpuProcess>,
) -> SettledDevice {
    let device = &gpu.devices[position];
    let (level, held_by) = own_level(gpu, position, processes);
    SettledDevice {
        index: device.index,
        uuid: device.uuid.clone(),
        above_idle_bytes: level
            .zip(idle)
            .map(|(level, idle)| level.saturating_sub(idle)),
        held_by,
    }
}

/// A device's use less what other tenants' processes hold (`None`: not
/// readable), and the processes on it that are not another tenant's.
fn own_level(
    gpu: &Gpu,
    position: usize,
    processes: &mut Vec<GpuProcess>,
) -> (Option<u64>, Vec<ForeignPid>) {
    let listed = gpu.processes(position, processes).is_ok();
    let mut others = 0u64;
    let mut held_by = Vec::new();
    for process in processes.iter().filter(|_| listed) {
        if gpu.foreign_pids.is_none() && is_foreign(process.pid) {
            others = others.saturating_add(process.used_bytes.unwrap_or(0));
        } else {
            held_by.push(ForeignPid {
                pid: process.pid,
                name: process_name(process.pid),
            });
        }
    }
    let level = gpu
        .used_bytes(position)
        .ok()
        .map(|used| used.saturating_sub(others));
    (level, held_by)
}

impl Settle {
    /// What the devices still held above their idle level, together;
    /// `None` when one could not be read.
    pub fn left_bytes(&self) -> Option<u64> {
        self.devices.iter().try_fold(0u64, |sum, d| {
            d.above_idle_bytes.map(|a| sum.saturating_add(a))
        })
    }
}
