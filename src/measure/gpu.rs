//! GPU memory of one case: per-tick sampling against the case's process
//! tree, and the figures at the end, each with the method that produced it
//! ([`GpuMethod`]).
//!
//! Three methods, best first, chosen per device:
//! - `sampled@<interval>`: the peak, over ticks, of the summed
//!   `used_gpu_memory` of every process of the case's tree on the device;
//! - `driver-accounting`: with NVML accounting mode on, the driver's exact
//!   per-process maximum (no sampling gap), summed over the tree's pids —
//!   used when larger than the sampled figure, which a short spike makes it;
//! - `device-delta`: only while no per-process figure of the case exists on
//!   any device (before its first process appears; in containers, where
//!   NVML reports host pids, for the whole case), the device's use minus
//!   its use before the case.
//!
//! Per-process figures win whenever they exist, live and at the end. A
//! device delta counts everyone's growth, so one taken while a process not
//! of the case was on the device is *tainted*: it is reported, with those
//! processes (`tainted_by`), but [`CaseGpu::gated_total`] and
//! [`CaseGpu::gated_by_device`] leave it out, and the budget checks pass it
//! with a note. Another tenant's growth must never stop or fail a case.
//!
//! A process whose memory NVML reports as unavailable makes its device's
//! figure unknown (`None`), never zero.

mod figures;
pub mod settle;

use std::collections::{BTreeMap, HashSet};

pub use figures::{
    AllocatorPeaks, DeviceFigures, DeviceLoss, DeviceNote, ForeignPid, ForeignProcess, GpuFigures,
    GpuMethod, concurrent_peak,
};
use figures::{DeviceEnd, device_figure};

use super::nvml::{AccountingRecord, Gpu, GpuProcess, epoch_us};
use super::procfs::ProcessTree;
use super::timeline::Sample;
use crate::units::Bytes;

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
    /// `live` is a device delta taken while a foreign process was on the
    /// device: it may not stop the case.
    live_tainted: bool,
    /// Processes not of the case seen on the device so far, at preflight
    /// or at a tick, with their names.
    foreign: BTreeMap<u32, Option<String>>,
    /// The device was lost, or refused NVML, at a tick: when (since the
    /// case started) and NVML's error. It is not read again, and its
    /// figure is unknown.
    lost: Option<(std::time::Duration, String)>,
}

/// Whether an NVML error means the device's figures can no longer be
/// complete: it fell off the bus, access to it was taken away, or it
/// stopped answering. Anything else fails only that tick.
fn loses_the_device(error: &nvml_wrapper::error::NvmlError) -> bool {
    use nvml_wrapper::error::NvmlError;
    matches!(
        error,
        NvmlError::GpuLost | NvmlError::NoPermission | NvmlError::Timeout
    )
}

/// GPU measurement of one case, on the devices it sees.
pub struct CaseGpu<'g> {
    gpu: &'g Gpu,
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
    /// This tick's total without tainted device deltas; `None` if unknown.
    gated_now: Option<u64>,
    /// Other cases of the run that may share the case's GPUs (packing,
    /// parallel cases without a pool): once one did, a device's rise is no
    /// more this case's than theirs.
    crowding: Option<Crowding>,
    /// Said of a device delta this case reports: what else it may hold.
    delta_note: Option<DeviceNote>,
    /// A process of this case, or of its twin's part (see [`Self::twin`]),
    /// was seen on a device: NVML's pids are this machine's, so a part
    /// none of whose processes appear holds nothing there.
    pids_seen: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// NVML's pids are not this namespace's (`Gpu::foreign_pids`): none is
    /// matched to the case, tainted as foreign, or looked up in the
    /// driver's accounting — a container pid that equals a host pid would
    /// otherwise pass a stranger's memory off as the case's.
    pids_unmatchable: bool,
    /// Another part of the case (its twin) measures the same devices: a
    /// process the driver recorded may be either's.
    twinned: bool,
    /// Each process's rank (see `measure::ranks`), and each rank's GPU
    /// memory summed over the devices, per tick.
    rank_of: super::ranks::RankOf,
    ranks: super::ranks::PerRank,
    /// Each process of the case on a device this tick: its pid, its GPU
    /// memory summed over the devices, its rank.
    processes_now: Vec<super::outside::ProcessNow>,
}

/// Whether another case of the run has shared a case's GPUs, raised by
/// the scheduler (on another thread) when a neighbour starts on them.
#[derive(Debug, Clone)]
pub struct Crowding {
    /// Why a device delta is then refused, for the figure's note.
    pub reason: DeviceNote,
    pub seen: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Crowding {
    /// Another case has run on the GPUs since this case started.
    pub fn seen(&self) -> bool {
        self.seen.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl<'g> CaseGpu<'g> {
    /// A meter of another part of the same case (a server's load client),
    /// over the same devices and from the same readings before it
    /// started. `shared`: why a device's rise is not this part's alone,
    /// which refuses it as this part's figure (its per-process figures
    /// stand).
    pub fn twin(&mut self, shared: DeviceNote) -> CaseGpu<'g> {
        self.twinned = true;
        CaseGpu {
            gpu: self.gpu,
            positions: self.positions.clone(),
            states: self
                .states
                .iter()
                .map(|state| DeviceState {
                    before: state.before,
                    foreign: state.foreign.clone(),
                    ..DeviceState::default()
                })
                .collect(),
            seen_pids: HashSet::new(),
            total_tree_peak: None,
            processes: Vec::with_capacity(16),
            sampled: self.sampled,
            errors: 0,
            started_us: self.started_us,
            unmapped: self.unmapped,
            gated_now: None,
            crowding: Some(Crowding {
                reason: shared,
                seen: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true)),
            }),
            delta_note: self.delta_note.clone().filter(|_| self.pids_unmatchable),
            pids_seen: self.pids_seen.clone(),
            pids_unmatchable: self.pids_unmatchable,
            twinned: true,
            rank_of: super::ranks::RankOf::default(),
            ranks: super::ranks::PerRank::default(),
            processes_now: Vec::new(),
        }
    }

    /// Say `note` of a device delta this meter reports (what else the
    /// device's rise may hold).
    pub fn note_delta(&mut self, note: DeviceNote) {
        self.delta_note = Some(note);
    }

    /// Read each device's use before the case starts. `unmapped`: the case
    /// also sees devices that could not be mapped to NVML ones.
    /// `crowding`: whether other cases of the run share its GPUs, when
    /// they may.
    pub fn begin(
        gpu: &'g Gpu,
        positions: Vec<usize>,
        sample_interval_ms: u64,
        unmapped: bool,
        crowding: Option<Crowding>,
    ) -> Self {
        let states = positions
            .iter()
            .map(|&position| DeviceState {
                before: gpu.used_bytes(position).ok(),
                ..DeviceState::default()
            })
            .collect();
        let started_us = epoch_us();
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
            gated_now: None,
            crowding,
            delta_note: gpu
                .foreign_pids
                .as_ref()
                .map(|namespace| DeviceNote::Container {
                    namespace: namespace.clone(),
                }),
            pids_seen: std::sync::Arc::default(),
            pids_unmatchable: gpu.foreign_pids.is_some(),
            twinned: false,
            rank_of: super::ranks::RankOf::default(),
            ranks: super::ranks::PerRank::default(),
            processes_now: Vec::new(),
        }
    }

    /// Compute processes on the case's devices that are not in `tree`,
    /// before the case starts. They taint the devices' delta figures.
    pub fn foreign_processes(&mut self, tree: &ProcessTree) -> Vec<ForeignProcess> {
        let mut foreign = Vec::new();
        for (state, &position) in self.states.iter_mut().zip(&self.positions) {
            if self.gpu.processes(position, &mut self.processes).is_err() {
                continue;
            }
            let device = &self.gpu.devices[position];
            for process in &self.processes {
                // In a container no listed pid can be matched, but none
                // listed before the case started is the case's: another
                // tenant's, whose memory taints the device's rise. Its pid
                // is the host's: no name can be read for it here.
                if self.pids_unmatchable || !in_tree(tree, process.pid) {
                    let name = match self.pids_unmatchable {
                        true => None,
                        false => process_name(process.pid),
                    };
                    state.foreign.insert(process.pid, name.clone());
                    foreign.push(ForeignProcess {
                        pid: process.pid,
                        name,
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
        if !self.pids_unmatchable {
            self.seen_pids
                .extend(tree.pids().filter_map(|p| u32::try_from(p).ok()));
        }
        let mut lists_complete = true;
        let since_start = self.since_start();
        self.rank_of.keep_only(tree);
        self.ranks.begin();
        self.processes_now.clear();
        for (state, &position) in self.states.iter_mut().zip(&self.positions) {
            state.tree_now = 0;
            if state.lost.is_some() {
                state.used_now = None;
                lists_complete = false;
                continue;
            }
            state.used_now = match self.gpu.used_bytes(position) {
                Ok(used) => Some(used),
                Err(e) => {
                    errors += 1;
                    if loses_the_device(&e) {
                        state.lost = Some((since_start, e.to_string()));
                        lists_complete = false;
                        continue;
                    }
                    None
                }
            };
            if let Some(used) = state.used_now {
                state.peak_used = Some(state.peak_used.map_or(used, |p| p.max(used)));
            }
            if let Err(e) = self.gpu.processes(position, &mut self.processes) {
                errors += 1;
                lists_complete = false;
                if loses_the_device(&e) {
                    state.lost = Some((since_start, e.to_string()));
                }
                continue;
            }
            state.listed = true;
            let mut found = false;
            let matchable = if self.pids_unmatchable {
                &[][..]
            } else {
                &self.processes[..]
            };
            for process in matchable {
                if !in_tree(tree, process.pid) {
                    if !state.foreign.contains_key(&process.pid) && is_foreign(process.pid) {
                        state.foreign.insert(process.pid, process_name(process.pid));
                    }
                    continue;
                }
                found = true;
                match process.used_bytes {
                    Some(bytes) => {
                        state.tree_now = state.tree_now.saturating_add(bytes);
                        let pid = i32::try_from(process.pid).unwrap_or(-1);
                        let rank = self.rank_of.rank(pid);
                        if let Some(rank) = rank {
                            let index = self.gpu.devices[position].index;
                            self.ranks.add(rank, bytes, Some(index));
                        }
                        match self.processes_now.iter_mut().find(|p| p.pid == process.pid) {
                            Some(now) => now.bytes = now.bytes.saturating_add(bytes),
                            None => self.processes_now.push(super::outside::ProcessNow {
                                pid: process.pid,
                                bytes,
                                rank,
                            }),
                        }
                    }
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
        // blame on the case. Only when none was ever seen (containers, or
        // before the case's first process appears) is a device's rise the
        // best figure, and only a rise with no foreign process about may
        // stop the case.
        use std::sync::atomic::Ordering;
        if self.states.iter().any(|s| s.tree_seen) {
            self.pids_seen.store(true, Ordering::Relaxed);
        }
        let any_seen = self.pids_seen.load(Ordering::Relaxed);
        let crowded = self.crowding.as_ref().is_some_and(Crowding::seen);
        let mut total = 0u64;
        let mut total_tree = 0u64;
        let mut gated = 0u64;
        for state in &mut self.states {
            (state.live, state.live_tainted) = if any_seen {
                (state.tree_now, false)
            } else {
                let delta = match (state.used_now, state.before) {
                    (Some(used), Some(before)) => used.saturating_sub(before),
                    _ => 0,
                };
                (delta, !state.foreign.is_empty() || crowded)
            };
            total = total.saturating_add(state.live);
            total_tree = total_tree.saturating_add(state.tree_now);
            if !state.live_tainted {
                gated = gated.saturating_add(state.live);
            }
        }
        let known = lists_complete && !self.unmapped && !self.states.iter().any(|s| s.unknown);
        self.gated_now = known.then_some(gated);
        if known && any_seen {
            self.ranks.end();
        }
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

    /// This tick's figure of each device that may stop the case, with its
    /// device, for headroom checks: every live figure but a tainted device
    /// delta (a foreign process was on the device, and may be what grew).
    pub fn gated_by_device(&self) -> impl Iterator<Item = (&super::nvml::GpuDevice, u64)> + '_ {
        self.positions
            .iter()
            .zip(&self.states)
            .filter(|(_, s)| !s.live_tainted)
            .map(|(&p, s)| (&self.gpu.devices[p], s.live))
    }

    /// This tick's total over the devices of [`Self::gated_by_device`], for
    /// the live GPU budget; `None` when this tick's figure is unknown. The
    /// total in `Sample::gpu_bytes` keeps tainted deltas: it is reported.
    pub fn gated_total(&self) -> Option<u64> {
        self.gated_now
    }

    pub fn errors(&self) -> u64 {
        self.errors
    }

    /// Time since the case started, by the wall clock it started on.
    fn since_start(&self) -> std::time::Duration {
        std::time::Duration::from_micros(epoch_us().saturating_sub(self.started_us))
    }

    /// The case's figures, once its processes are gone. Accounting
    /// records are read now, so they include pids that already exited.
    pub fn finish(self) -> GpuFigures {
        let accounting: Vec<Option<u64>> = self
            .positions
            .iter()
            .zip(&self.states)
            .map(|(&position, state)| self.accounting_peak(position, state))
            .collect();
        // The driver's record of a pid of the tree is a per-process figure
        // too: NVML's pids are ours, even if sampling never caught one.
        let pids_match = self.states.iter().any(|s| s.tree_seen)
            || accounting.iter().any(Option::is_some)
            || self.pids_seen.load(std::sync::atomic::Ordering::Relaxed);
        // Read once, now that the case is over: a neighbour at any time
        // may be in a device's peak.
        let crowding = self.crowding.as_ref().filter(|c| c.seen());
        let mut devices = Vec::with_capacity(self.positions.len());
        for ((state, &position), accounting) in
            self.states.iter().zip(&self.positions).zip(accounting)
        {
            let device = &self.gpu.devices[position];
            let sampled = if state.unknown { None } else { state.tree_peak };
            let lost = state.lost.as_ref().map(|(at, reason)| DeviceLoss {
                at_s: at.as_secs_f64(),
                reason: reason.clone(),
            });
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
                    shared: crowding.is_some(),
                },
                &self.sampled,
            );
            // A figure missing the time since the loss is no figure.
            let (peak_bytes, method) = match &lost {
                Some(_) => (None, GpuMethod::Unavailable),
                None => (peak_bytes, method),
            };
            let note = crowding
                .filter(|_| method == GpuMethod::Unavailable && state.listed && !self.unmapped)
                .map(|c| c.reason.clone())
                .or_else(|| {
                    self.delta_note
                        .clone()
                        .filter(|_| method == GpuMethod::DeviceDelta)
                });
            let tainted_by = if method == GpuMethod::DeviceDelta {
                state
                    .foreign
                    .iter()
                    .map(|(&pid, name)| ForeignPid {
                        pid,
                        name: name.clone(),
                    })
                    .collect()
            } else {
                Vec::new()
            };
            devices.push(DeviceFigures {
                gpu: device.info.clone(),
                before_bytes: state.before,
                device_peak_bytes: state.peak_used,
                peak_bytes,
                method,
                sampled_peak_bytes: sampled.filter(|_| state.tree_seen),
                accounting_peak_bytes: accounting,
                tainted_by,
                device_note: note,
                note: None,
                lost,
            });
        }
        let known = |d: &DeviceFigures| d.peak_bytes;
        let all_sampled = devices.iter().all(|d| d.method == self.sampled);
        let peak_bytes = if self.unmapped || devices.iter().any(|d| d.lost.is_some()) {
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
            _ if self.unmapped || devices.iter().any(|d| d.lost.is_some()) => {
                GpuMethod::Unavailable
            }
            None => self.sampled,
            Some(first) if contributing.iter().all(|d| d.method == first.method) => first.method,
            Some(_) => GpuMethod::Mixed,
        };
        GpuFigures {
            peak_bytes,
            method,
            devices,
            left_bytes: None,
            ranks: self.ranks,
            outside: None,
        }
    }

    /// Each process of the case on a device this tick, its memory summed
    /// over the devices (none when this tick's figures are not known).
    pub fn processes_now(&self) -> &[super::outside::ProcessNow] {
        match self.gated_now {
            Some(_) => &self.processes_now,
            None => &[],
        }
    }

    /// Each rank's GPU memory this tick, summed over its devices (none
    /// when this tick's figures are not known).
    pub fn ranks_now(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.ranks.now().filter(|_| self.gated_now.is_some())
    }

    /// The largest rank's GPU memory this tick, summed over its devices:
    /// what `budget.gpu_rank` judges. `None` without ranks.
    pub fn largest_rank_now(&self) -> Option<(u32, u64)> {
        self.gated_now.and(self.ranks.largest_now())
    }

    /// The GPU and the positions of the devices this meter measures.
    pub fn devices(&self) -> (&'g Gpu, &[usize]) {
        (self.gpu, &self.positions)
    }

    /// The driver's accounting figure of the case's processes on one
    /// device: every pid of the tree seen at a tick, and — on a device the
    /// case had to itself (no process of another tenant seen on it, no
    /// other case of the run beside it) — every pid the driver recorded
    /// that started after the case did and is not visibly another's: a
    /// process born and dead between two ticks, the very spike accounting
    /// is for, is seen by no tick.
    fn accounting_peak(&self, position: usize, state: &DeviceState) -> Option<u64> {
        if self.pids_unmatchable {
            return None;
        }
        // Records from before the case are another process that once had
        // this pid (a second's slack for a pid seen in the tree).
        let seen = self
            .seen_pids
            .iter()
            .filter_map(|&pid| self.gpu.accounting_record(position, pid))
            .filter(|r| r.start_us >= self.started_us.saturating_sub(1_000_000));
        let alone = state.foreign.is_empty()
            && !self.twinned
            && !self.crowding.as_ref().is_some_and(Crowding::seen);
        let unseen: Vec<u32> = match alone {
            true => self
                .gpu
                .accounting_pids(position)
                .into_iter()
                .filter(|pid| !self.seen_pids.contains(pid) && !is_foreign(*pid))
                .collect(),
            false => Vec::new(),
        };
        let unseen = unseen
            .into_iter()
            .filter_map(|pid| self.gpu.accounting_record(position, pid))
            .filter(|r| r.start_us >= self.started_us);
        let records: Vec<AccountingRecord> = seen.chain(unseen).collect();
        (!records.is_empty())
            .then(|| concurrent_peak(&records).min(self.gpu.devices[position].total_bytes))
    }
}

fn in_tree(tree: &ProcessTree, pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(|pid| tree.pids().any(|p| p == pid))
}

/// Whether a pid NVML lists outside the case's tree is certainly another
/// tenant: a process visible in this pid namespace that does not descend
/// from oomgate (every process of a case does: oomgate is their subreaper;
/// the ancestry walk also covers one started since the tree was scanned).
/// A pid not visible here may be the case's own — NVML reports host pids
/// inside a container — so it is not called foreign, and neither is one
/// whose ancestry cannot be read to the end (it is asked again next tick).
fn is_foreign(pid: u32) -> bool {
    let me = std::process::id();
    let mut current = pid;
    // Bounded: a pid-reuse race must not make this loop forever.
    for _ in 0..64 {
        if current == me || current == 0 {
            return false;
        }
        match parent_pid(current) {
            // The top of this namespace's tree, without meeting oomgate.
            Some(0) => return true,
            Some(parent) => current = parent,
            None => return false,
        }
    }
    false
}

/// The parent of a visible process, from `/proc/<pid>/stat`.
fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the
    // last `)`, state first, then the parent.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
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

    #[test]
    fn foreign_means_visible_and_not_descended_from_oomgate() {
        let me = std::process::id();
        assert!(!is_foreign(me), "oomgate itself");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        assert!(!is_foreign(child.id()), "a process oomgate started");
        child.kill().ok();
        child.wait().ok();
        let parent = parent_pid(me).expect("the test's parent");
        assert!(is_foreign(parent), "a process above oomgate");
        // Above the kernel's pid limit: never visible, as a host pid in a
        // container may not be; it may be the case's own.
        assert!(!is_foreign(4_194_305));
        assert!(!is_foreign(0));
    }
}
