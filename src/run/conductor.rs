//! The main thread's side of a run ([`Conductor`]): which case starts
//! when and on which GPUs, the baseline the cases are judged against, the
//! results as they grow, and the first file that could not be written.
//! `dispatch` is its event loop.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::fault::WriteFault;
use super::schedule::{self, Demand, Placement, Schedule};
use super::shared::{GpuAccess, Shared, now_rfc3339};
use crate::baseline::Lock;
use crate::environment::Environment;
use crate::judge;
use crate::measure::gpu::{Crowding, DeviceNote, GpuMethod};
use crate::report::{Event, Reporter};
use crate::results::{
    BaselineInfo, GpuEnvironment, RunResults, SCHEMA_VERSION, Scheduling, SharedGpu, SuiteInfo,
    Summary,
};
use crate::suite::{Case, Suite};
use crate::units::Bytes;
use std::io;

/// Which baseline to compare with, and how strictly.
#[derive(Debug, Default)]
pub struct BaselineSetup {
    /// The lock and where it was read from; `None`: no baseline.
    pub lock: Option<(PathBuf, Lock)>,
    /// A case without a baseline fails instead of passing with a notice.
    pub require: bool,
    /// Compare GPU figures even when the GPU model changed (a lock of
    /// before testbeds).
    pub compare_across_gpus: bool,
    /// `--baseline-testbed`: compare every case with this testbed's entries.
    pub testbed: Option<String>,
    /// Each case's past in the run history, read before the run (creep,
    /// steps); `None`: no history.
    pub history: Option<crate::history::pasts::Pasts>,
}

/// The main thread's side of a run: which case starts when, the baseline,
/// and the first file that could not be written.
pub(super) struct Conductor<'a> {
    pub(super) suite: &'a Suite,
    pub(super) baseline: BaselineSetup,
    /// Filled when the run starts, from the lock and this environment.
    pub(super) baseline_info: Option<BaselineInfo>,
    /// This run's environment, for the lock's entries of this machine's
    /// testbed before a case runs (packing, capacity).
    pub(super) environment: Environment,
    pub(super) partition: Option<crate::suite::Partition>,
    /// Where the run came from (commit, branch, CI run), for its results.
    pub(super) origin: crate::results::RunOrigin,
    pub(super) schedule: Schedule,
    /// The first file that could not be written: no case is launched
    /// after it.
    pub(super) fault: Option<WriteFault>,
    /// `Shared::faulted`, raised with `fault`: running cases start no
    /// more repeats.
    pub(super) faulted: Arc<AtomicBool>,
}

impl Conductor<'_> {
    /// What the run's cases are compared with, for the judge.
    pub(super) fn judge_baseline(&self) -> judge::Baseline<'_> {
        judge::Baseline {
            lock: self.baseline.lock.as_ref().map(|(_, lock)| lock),
            info: self.baseline_info.as_ref(),
            require: self.baseline.require,
            history: self.baseline.history.as_ref(),
        }
    }

    /// What the run is compared with: the lock's drift against this
    /// environment, and the locked cases that are gone from the suite.
    pub(super) fn baseline_info(&self, environment: &Environment) -> Option<BaselineInfo> {
        let (path, lock) = self.baseline.lock.as_ref()?;
        let planned: std::collections::HashSet<&str> =
            self.suite.cases.iter().map(|c| c.id.as_str()).collect();
        // Drift against the environment of this machine's testbed (or the
        // one asked for), else the lock's own.
        let locked_environment = match self
            .baseline
            .testbed
            .as_ref()
            .and_then(|t| lock.testbeds.get(t))
        {
            Some(bed) => &bed.environment,
            None => lock.environment_for(environment),
        };
        let mut removed: Vec<String> = lock
            .entries()
            .map(|(_, id, _)| id)
            .filter(|id| !planned.contains(id))
            .map(String::from)
            .collect();
        removed.sort();
        removed.dedup();
        Some(BaselineInfo {
            path: path.clone(),
            locked_at: lock.locked_at.clone(),
            drift: crate::baseline::drift::drift(locked_environment, environment),
            on_drift: self.suite.on_drift,
            gpu_compared: self.baseline.compare_across_gpus
                || self.baseline.testbed.is_some()
                || crate::baseline::drift::same_gpus(&lock.environment, environment),
            testbed: self.baseline.testbed.clone(),
            removed,
        })
    }

    /// The results of a run not started yet.
    pub(super) fn new_results(&self, shared: &Shared<'_>, planned: usize) -> RunResults {
        let schedule = &self.schedule;
        let scheduling = (schedule.parallel() || schedule.pool.is_some()).then(|| Scheduling {
            jobs: schedule.jobs,
            pack: schedule.pack,
            pool: schedule
                .pool
                .as_ref()
                .map(|gpus| gpus.iter().map(|g| g.reference()).collect()),
            ordered_by_past_times: !schedule.past_wall_s.is_empty(),
        });
        RunResults {
            schema: SCHEMA_VERSION,
            run_id: Some(crate::results::run_id::fresh()),
            origin: Some(self.origin.clone()),
            oomgate_version: env!("CARGO_PKG_VERSION").to_string(),
            suite: SuiteInfo {
                name: shared.suite.name.clone(),
                path: shared.suite.path.clone(),
                workdir: shared.suite.workdir.clone(),
            },
            host: host_name(),
            started_at: now_rfc3339(),
            finished_at: None,
            interrupted: false,
            measurement: shared.measurement.clone(),
            gpu: shared.gpu.as_ref().map(|gpu| GpuEnvironment {
                driver_version: gpu.driver_version.clone(),
                cuda_driver_version: gpu.cuda_driver_version.clone(),
                process_listing: Some(gpu.listing),
                devices: gpu.devices.iter().map(|d| d.info.clone()).collect(),
            }),
            summary: Summary {
                planned,
                ..Summary::default()
            },
            environment: shared.environment.clone(),
            baseline: None,
            cases: Vec::with_capacity(planned),
            not_run: Vec::new(),
            planned_cases: Vec::new(),
            pytest_cases: shared
                .suite
                .cases
                .iter()
                .filter(|c| c.pytest.is_some())
                .map(|c| c.id.clone())
                .collect(),
            partition: self.partition,
            scheduling,
            fault: None,
            runner_max_rss_bytes: None,
            runner_cpu_s: None,
            merged_from: None,
            parity: Vec::new(),
            parts: Vec::new(),
        }
    }

    /// What a case needs from the pool; `alone`: it is a retry, never
    /// packed.
    pub(super) fn demand(&self, case: &Case, alone: bool) -> Demand {
        if self.schedule.pool.is_none() {
            return Demand {
                gpus: 0,
                packed_bytes: None,
            };
        }
        let gpus = case.gpus.unwrap_or(1);
        let packed_bytes = (self.schedule.pack && gpus == 1 && !alone)
            .then(|| self.known_gpu_peak(case))
            .flatten()
            .map(|peak| peak.saturating_add(schedule::pack_margin(peak)));
        Demand { gpus, packed_bytes }
    }

    /// The GPU peak a case is packed by: the lock's, when it was measured
    /// per process (a device delta is no figure of the case's alone), else
    /// the suite's `gpu_memory`.
    pub(super) fn known_gpu_peak(&self, case: &Case) -> Option<u64> {
        let locked = self
            .baseline
            .lock
            .as_ref()
            .and_then(|(_, lock)| lock.entry_here(&case.id, &self.environment))
            .filter(|locked| {
                matches!(
                    locked.gpu_peak_method,
                    Some(GpuMethod::Sampled { .. } | GpuMethod::DriverAccounting)
                )
            })
            .and_then(|locked| locked.gpu_peak_bytes);
        locked.or(case.gpu_memory.map(Bytes::get))
    }

    /// The capacity the lock holds for a searched case.
    pub(super) fn locked_capacity(&self, case: &Case) -> Option<u64> {
        self.baseline
            .lock
            .as_ref()
            .and_then(|(_, lock)| lock.entry_here(&case.id, &self.environment))
            .and_then(|locked| locked.capacity)
    }

    /// The GPUs a placed case sees, and whether others may share them.
    pub(super) fn gpu_access(&self, shared: &Shared<'_>, placement: &Placement) -> GpuAccess {
        match &self.schedule.pool {
            Some(pool) => GpuAccess {
                visible: Some(
                    placement
                        .gpus
                        .iter()
                        .filter_map(|&at| pool.get(at))
                        .map(|gpu| gpu.uuid.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                ),
                crowding: placement.packed().then(|| Crowding {
                    reason: DeviceNote::Crowded { jobs: None },
                    seen: Arc::default(),
                }),
            },
            None => GpuAccess {
                visible: None,
                crowding: (shared.parallel && shared.gpu.is_some()).then(|| Crowding {
                    reason: DeviceNote::Crowded {
                        jobs: Some(self.schedule.jobs),
                    },
                    seen: Arc::default(),
                }),
            },
        }
    }

    /// The cases that shared a case's GPUs, by GPU, for the results.
    pub(super) fn sharing(
        &self,
        shared_with: &BTreeMap<usize, BTreeSet<usize>>,
        cases: &[&Case],
    ) -> Vec<SharedGpu> {
        let Some(pool) = &self.schedule.pool else {
            return Vec::new();
        };
        shared_with
            .iter()
            .filter(|(_, others)| !others.is_empty())
            .filter_map(|(&gpu, others)| {
                let gpu = pool.get(gpu)?;
                Some(SharedGpu {
                    gpu: gpu.reference(),
                    with: others.iter().map(|&n| cases[n].id.clone()).collect(),
                })
            })
            .collect()
    }

    /// Say at once that a file could not be written, and keep the first
    /// such failure: no case is launched after it.
    pub(super) fn record_fault(&mut self, fault: WriteFault, reporter: &mut dyn Reporter) {
        let message = match self.fault {
            None => format!("{fault}; no more cases are launched"),
            Some(_) => fault.to_string(),
        };
        self.fault.get_or_insert(fault);
        self.faulted.store(true, Ordering::Relaxed);
        // Only the displays act on a warning; a failure to show one is no
        // fault of the run's files.
        reporter.handle(&Event::Warning { message }).ok();
    }

    /// Record a reporter's failure, if it failed; whether it did.
    pub(super) fn report_failed(
        &mut self,
        outcome: io::Result<()>,
        reporter: &mut dyn Reporter,
    ) -> bool {
        match outcome {
            Ok(()) => false,
            Err(error) => {
                self.record_fault(WriteFault::Report(error), reporter);
                true
            }
        }
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::baseline::LockedCase;
    use crate::run::schedule::PoolGpu;

    const GIB: u64 = 1 << 30;

    fn pool_gpu() -> PoolGpu {
        PoolGpu {
            position: 0,
            gpu: crate::measure::nvml::GpuInfo {
                index: 0,
                uuid: "GPU-0".into(),
                name: "H100".into(),
                total_bytes: 80 * GIB,
                reserved_bytes: None,
                accounting: None,
                persistence: None,
                mig: None,
                mig_parent: None,
            },
        }
    }

    /// A case packed onto a shared GPU reserves its known peak and a
    /// margin: the lock's per-process figure, else the suite's
    /// `gpu_memory`; a device delta is no figure of its own.
    #[test]
    fn a_packed_case_reserves_its_known_peak_and_a_margin() {
        let text = "[suite]\nname = \"s\"\n[[case]]\nname = \"c\"\ncommand = [\"x\"]\ngpu_memory = \"4 GiB\"\n[[case]]\nname = \"two\"\ncommand = [\"x\"]\ngpus = 2\n";
        let suite = crate::suite::parse(text, Path::new("s.toml"), Path::new(".")).expect("suite");
        let lock_with = |method: GpuMethod| {
            let mut locked = LockedCase::empty();
            locked.gpu_peak_bytes = Some(10 * GIB);
            locked.gpu_peak_method = Some(method);
            Lock::of("s", "t", [("c", locked)])
        };
        let sampled = GpuMethod::Sampled { interval_ms: 50 };
        let margin = |peak: u64| peak + schedule::pack_margin(peak);
        // (pool, pack, lock's method, case, alone, gpus, reserved)
        let table = [
            (false, true, Some(sampled), 0, false, 0, None),
            (true, false, Some(sampled), 0, false, 1, None),
            (
                true,
                true,
                Some(sampled),
                0,
                false,
                1,
                Some(margin(10 * GIB)),
            ),
            (
                true,
                true,
                Some(GpuMethod::DeviceDelta),
                0,
                false,
                1,
                Some(margin(4 * GIB)),
            ),
            (true, true, None, 0, false, 1, Some(margin(4 * GIB))),
            // A retry runs alone; a case of two GPUs takes them whole.
            (true, true, Some(sampled), 0, true, 1, None),
            (true, true, Some(sampled), 1, false, 2, None),
        ];
        for (pool, pack, method, case, alone, gpus, reserved) in table {
            let conductor = Conductor {
                suite: &suite,
                baseline: BaselineSetup {
                    lock: method.map(|m| (PathBuf::from("s.lock"), lock_with(m))),
                    require: false,
                    compare_across_gpus: false,
                    testbed: None,
                    history: None,
                },
                baseline_info: None,
                environment: Environment::default(),
                partition: None,
                origin: Default::default(),
                schedule: crate::run::Schedule {
                    pool: pool.then(|| vec![pool_gpu()]),
                    pack,
                    ..Default::default()
                },
                fault: None,
                faulted: Default::default(),
            };
            let demand = conductor.demand(&suite.cases[case], alone);
            let row = format!("pool {pool} pack {pack} {method:?} case {case} alone {alone}");
            assert_eq!(demand.gpus, gpus, "{row}");
            assert_eq!(demand.packed_bytes, reserved, "{row}");
        }
    }
}
