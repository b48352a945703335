//! One run of a case, in three stages: a preflight (the GPUs the case sees
//! and who else is on them, its memory cgroup); a sampling loop (`watch`,
//! which first sets up the case's server, `server_side`, when it has one)
//! that launches the instances, watches them until they are done and
//! returns a [`CaseOutcome`] — plain facts, no verdict; and the run's
//! measurement record (`measured`), which the main thread judges.
//!
//! One thread decides everything about a case, so "exited" and "over
//! budget" cannot race: the case's own [`CaseRunner`], which tells the main
//! thread what it sees through [`Note`]s. When cases run at once, each
//! one's /proc scans are limited to its own supervisors' descendants
//! (`Scanner::limit_to`), so its figures, its signals and its reaping never
//! reach another case's processes.

use std::cell::Cell;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::time::Duration;

use super::fault::WriteFault;
use super::instance::Instance;
use super::serve::{self, ServerSide};
use super::shared::{GpuAccess, Note, Shared, now_rfc3339};
use crate::measure::cgroup::CaseCgroup;
use crate::measure::gpu::settle::{self, Settle};
use crate::measure::gpu::{CaseGpu, DeviceNote, ForeignProcess, GpuFigures};
use crate::measure::nvml::Gpu;
use crate::measure::procfs::Scanner;
use crate::measure::{HostFigures, HostMeter, Timeline};
use crate::probe::ProbeSummary;
use crate::process;
use crate::record::{StopReason, Warning};
use crate::suite::{Case, ForeignPolicy};

/// What the preflight found out before anything was launched.
pub(super) struct Preflight<'g> {
    pub(super) gpu: Option<CaseGpu<'g>>,
    pub(super) foreign: Vec<ForeignProcess>,
    pub(super) cuda_visible_devices: Option<String>,
    pub(super) host: HostMeter,
    /// Set when the case must not run (foreign processes under "fail").
    pub(super) stop: Option<StopReason>,
    /// How the wait for its GPUs to settle went, when it waited.
    pub(super) settle: Option<Settle>,
}

/// What the sampling loop observed about one run of a case: facts only.
pub(super) struct CaseOutcome {
    /// Why oomgate stopped the case, if it did.
    pub(super) stop: Option<StopReason>,
    pub(super) instances: Vec<Instance>,
    pub(super) timeline: Timeline,
    pub(super) host: HostFigures,
    pub(super) gpu: Option<GpuFigures>,
    pub(super) foreign: Vec<ForeignProcess>,
    pub(super) cuda_visible_devices: Option<String>,
    pub(super) settle: Option<Settle>,
    pub(super) probe: Option<ProbeSummary>,
    /// Each soak run's peak (instance 0's runs), for leak detection.
    pub(super) soak_peaks: Vec<u64>,
    pub(super) sample_errors: u64,
    /// Processes still running after every instance exited.
    pub(super) leftovers: usize,
    pub(super) wall_time: Duration,
    /// With a server: how it ran (`host` and `gpu` above are its figures),
    /// and its load client's figures.
    pub(super) server: Option<ServerOutcome>,
}

/// How a case's server ran, and what its load client used.
pub(super) struct ServerOutcome {
    pub(super) instance: Instance,
    pub(super) port: u16,
    pub(super) ready: String,
    pub(super) ready_at: Option<Duration>,
    pub(super) stopped_with: Option<&'static str>,
    pub(super) client_host: HostFigures,
    pub(super) client_gpu: Option<GpuFigures>,
}

/// One case, run on its own thread: its scanner, cgroup, sampler and
/// supervisors are its own; what it sees goes to the main thread.
pub(super) struct CaseRunner<'s, 'a> {
    pub(super) shared: &'s Shared<'a>,
    pub(super) scanner: Scanner,
    /// A memory cgroup made ahead, while the workload of this worker's
    /// last case ran (see [`CaseRunner::make_spare_cgroup`]).
    spare_cgroup: Cell<SpareCgroup>,
    /// Making a spare failed during this case: not tried again before the
    /// next (a full or read-only hierarchy would fail every tick).
    spare_refused: Cell<bool>,
    /// The case's number in the plan, which tags its notes.
    number: usize,
    pub(super) access: GpuAccess,
    notes: Sender<(usize, Note)>,
    /// Scans, signals and reaping are limited to the processes of one
    /// part of the case at a time: cases run at once, or the case has a
    /// server and a client to keep apart.
    pub(super) scoped: bool,
}

/// What a worker keeps from one case to the next.
pub(super) struct Carried {
    scanner: Scanner,
    spare_cgroup: SpareCgroup,
}

/// A memory cgroup made ahead for a worker's next case; removed when no
/// case takes it (the run is over, or the worker's case panicked).
#[derive(Default)]
pub(super) struct SpareCgroup(Option<CaseCgroup>);

impl Drop for SpareCgroup {
    fn drop(&mut self) {
        if let Some(spare) = self.0.take() {
            spare.remove().ok();
        }
    }
}

impl<'s, 'a> CaseRunner<'s, 'a> {
    /// `carried`: what the worker's earlier case left, if any (what its
    /// scanner learned of /proc saves reading every process again).
    pub(super) fn new(
        shared: &'s Shared<'a>,
        number: usize,
        access: GpuAccess,
        notes: Sender<(usize, Note)>,
        carried: Option<Carried>,
    ) -> Self {
        let (mut scanner, spare_cgroup) = match carried {
            Some(carried) => (carried.scanner, carried.spare_cgroup),
            None => (
                Scanner::with_open_files(shared.open_files_each),
                SpareCgroup::default(),
            ),
        };
        // oomgate's own children that are no case's: its fork server, and
        // the shared pytest sessions (parked, or a worker's between tests).
        let mut hidden = crate::pytest::session::running();
        hidden.extend(shared.forkserver_pid());
        scanner.hide(&hidden);
        CaseRunner {
            shared,
            scanner,
            spare_cgroup: Cell::new(spare_cgroup),
            spare_refused: Cell::new(false),
            number,
            access,
            notes,
            scoped: shared.parallel,
        }
    }

    /// oomgate's fork server, when there is one: its child, no process of
    /// the case.
    pub(super) fn forkserver_pid(&self) -> Option<i32> {
        self.shared.forkserver_pid()
    }

    /// What the worker's next case starts from.
    pub(super) fn into_carried(self) -> Carried {
        Carried {
            scanner: self.scanner,
            spare_cgroup: self.spare_cgroup.into_inner(),
        }
    }

    /// Make the next case's memory cgroup now, while this case's workload
    /// runs and the worker would only wait: making one (a `mkdir` in the
    /// kernel's cgroup file system, and its files opened) is then off the
    /// path from one case to the next. Called before each wait; makes one
    /// only when there is none. A cgroup that cannot be made now is tried
    /// again, and reported, when the next case asks for one; not before.
    pub(super) fn make_spare_cgroup(&self) {
        if self.shared.memory.is_none() || self.spare_refused.get() {
            return;
        }
        let mut spare = self.spare_cgroup.take();
        if spare.0.is_none() {
            spare.0 = self.shared.new_cgroup().and_then(Result::ok);
            self.spare_refused.set(spare.0.is_none());
        }
        self.spare_cgroup.set(spare);
    }

    /// Tell the main thread. It listens until every case is done, so a
    /// send only fails when the run is being torn down anyway.
    pub(super) fn note(&self, note: Note) {
        self.notes.send((self.number, note)).ok();
    }

    pub(super) fn warn(&self, warning: Warning) {
        self.note(Note::Warning(warning));
    }

    /// A file could not be written: no case or repeat starts after this
    /// one; the main thread says so and keeps the first such fault.
    pub(super) fn record_fault(&self, fault: WriteFault) {
        self.shared.faulted.store(true, Ordering::Relaxed);
        self.note(Note::Fault(fault));
    }

    /// Run one case once (`repeat` counts from 0), and say when it started
    /// and what was observed; `measured` makes its measurement record. Later repeats
    /// append to the same logs, after a marker line.
    pub(super) fn run_case(
        &mut self,
        case: &Case,
        case_dir: &Path,
        repeat: u32,
    ) -> (String, CaseOutcome) {
        let started_at = now_rfc3339();
        self.scoped = self.shared.parallel || case.server.is_some();
        if repeat > 0 {
            let marker = format!(
                "\n[oomgate] repeat {} of {} starts\n",
                repeat + 1,
                case.repeat
            );
            for fault in mark_logs(case_dir, case.concurrency, case.server.is_some(), &marker) {
                self.record_fault(fault);
            }
        }
        let gpu = self.shared.gpu.as_ref();
        let preflight = self.preflight(case, gpu);
        let outcome = self.sample_until_done(case, case_dir, preflight);
        // The workload writes its logs itself: a full file system is the
        // one sign oomgate can see that they were cut short.
        if crate::files::no_space_left(case_dir) {
            let fault = WriteFault::NoSpace {
                dir: case_dir.to_path_buf(),
                case_ended: true,
            };
            self.record_fault(fault);
        }
        (started_at, outcome)
    }

    /// Wait, for at most the case's `settle_timeout`, until its GPUs at
    /// `positions` are back within `within` of their idle level; `None`
    /// where other cases of the run may be on them (`--pack`, cases at
    /// once without a pool), whose memory is no leftover.
    fn settle(&self, case: &Case, gpu: &Gpu, positions: &[usize], within: u64) -> Option<Settle> {
        if self.access.crowding.is_some() {
            return None;
        }
        let interrupt = &self.shared.interrupt;
        Some(settle::wait(
            gpu,
            positions,
            &self.shared.gpu_idle,
            within,
            case.settle_timeout,
            || interrupt.requested(),
        ))
    }

    /// Its processes gone, what the case's GPUs (those `meter` measured)
    /// do not give back: waited for as the next case would wait (its own
    /// `settle_timeout`; with none and a `gpu_left` budget, one look).
    pub(super) fn gpu_left(&self, case: &Case, meter: Option<&CaseGpu<'_>>) -> Option<u64> {
        if case.budget.gpu_left.is_none() && case.settle_timeout.is_zero() {
            return None;
        }
        let (gpu, positions) = meter?.devices();
        // Under a `gpu_left` budget smaller than the threshold, memory
        // still coming back must not count against it.
        let within = case.budget.gpu_left.map_or(settle::SETTLED_WITHIN, |left| {
            left.get().min(settle::SETTLED_WITHIN)
        });
        self.settle(case, gpu, positions, within)?.left_bytes()
    }

    /// The GPUs the case sees, their use before it starts, whatever else
    /// already runs on them, and the case's memory cgroup.
    fn preflight<'g>(&mut self, case: &Case, gpu: Option<&'g Gpu>) -> Preflight<'g> {
        let mut stop = None;
        let mut foreign = Vec::new();
        let mut cuda_visible_devices = None;
        let mut waited = None;
        let mut case_gpu = gpu.map(|gpu| {
            let selection = super::gpu::selection(gpu, case, self.access.visible.as_deref());
            for note in &selection.notes {
                self.warn(Warning::Selection(note.clone()));
            }
            // Its GPUs back to their idle level first — unless another
            // case of the run may be on them now (`--pack`, cases at once
            // without a pool), whose memory is no leftover.
            if !case.settle_timeout.is_zero() && !selection.positions.is_empty() {
                waited = self.settle(case, gpu, &selection.positions, settle::SETTLED_WITHIN);
                if let Some(unsettled) = waited.as_ref().filter(|settle| !settle.settled) {
                    self.warn(Warning::Unsettled(unsettled.clone()));
                }
            }
            cuda_visible_devices = selection.cuda_visible_devices;
            CaseGpu::begin(
                gpu,
                selection.positions,
                self.shared.measurement.sample_interval_ms,
                selection.unmapped,
                self.access.crowding.clone(),
            )
        });
        if let Some(case_gpu) = case_gpu.as_mut() {
            // Every descendant of oomgate: another case's process on the
            // GPU is no foreign tenant.
            self.scanner.limit_to(None);
            if let Ok(tree) = self.scanner.descendants_of(process::self_pid()) {
                foreign = case_gpu.foreign_processes(tree);
            }
            if !foreign.is_empty() {
                if self.shared.suite.foreign_processes == ForeignPolicy::Fail {
                    stop = Some(StopReason::ForeignProcesses {
                        processes: foreign.clone(),
                    });
                } else {
                    self.warn(Warning::Foreign(foreign.clone()));
                }
            }
        }
        let host = self.host_meter(false);
        Preflight {
            gpu: case_gpu,
            foreign,
            cuda_visible_devices,
            host,
            stop,
            settle: waited,
        }
    }

    /// A host meter with a memory cgroup of its own (`client`: the load
    /// client's, for the note when it cannot be made).
    fn host_meter(&self, client: bool) -> HostMeter {
        if let Some(spare) = self.spare_cgroup.take().0.take() {
            return HostMeter::new(Some(spare), None);
        }
        match self.shared.new_cgroup() {
            Some(Ok(cgroup)) => HostMeter::new(Some(cgroup), None),
            Some(Err(e)) => HostMeter::new(
                None,
                Some(crate::measure::host::HostNote::NoCgroup {
                    client,
                    error: e.to_string(),
                }),
            ),
            None => HostMeter::new(None, None),
        }
    }

    /// With a server: its side, measured by the case's own meters, which
    /// the instances (its load client) hand over for new ones of their
    /// own. Not started yet.
    pub(super) fn server_side<'c, 'g>(
        &self,
        case: &'c Case,
        case_dir: &Path,
        host: &mut HostMeter,
        gpu: &mut Option<CaseGpu<'g>>,
    ) -> Result<Option<ServerSide<'c, 'g>>, String> {
        if case.server.is_none() {
            return Ok(None);
        }
        let port = serve::free_port(&self.shared.ports)
            .map_err(|e| format!("no free port for the server: {e}"))?;
        let server_host = std::mem::replace(host, self.host_meter(true));
        let client_gpu = gpu.as_mut().map(|g| g.twin(DeviceNote::ServersClient));
        let mut server_gpu = std::mem::replace(gpu, client_gpu);
        if let Some(server_gpu) = server_gpu.as_mut() {
            server_gpu.note_delta(DeviceNote::WithClient);
        }
        Ok(ServerSide::new(
            case,
            case_dir,
            port,
            server_host,
            server_gpu,
        ))
    }
}

impl CaseRunner<'_, '_> {
    /// Set the scans' scope for what comes next: when the case's parts
    /// must be kept apart (cases at once, a server and its client), these
    /// supervisors and their descendants; otherwise every descendant of
    /// oomgate. Set at every call, never left over: the scanner goes from
    /// case to case, and a scope of an earlier case's supervisors would
    /// make every scan of this one empty.
    pub(super) fn limit_scan(&mut self, supervisors: &[i32]) {
        self.scanner.limit_to(self.scoped.then_some(supervisors));
    }
}

/// Add a marker line to the stdout and stderr logs of instances
/// `0..instances`, and of the server (a log not there yet is created):
/// each log that could not be written, as a fault.
pub(super) fn mark_logs(
    case_dir: &Path,
    instances: u32,
    server: bool,
    marker: &str,
) -> Vec<WriteFault> {
    use crate::files::case::InstanceLogs;
    let mut faults = Vec::new();
    let server = server.then(|| InstanceLogs::for_server(case_dir));
    let all = (0..instances).map(|index| InstanceLogs::for_instance(case_dir, index));
    for logs in all.chain(server) {
        for log in [&logs.stdout, &logs.stderr] {
            faults.extend(append(log, marker).err());
        }
    }
    faults
}

/// Add a marker line to a log.
pub(super) fn append(path: &Path, text: &str) -> Result<(), WriteFault> {
    crate::files::case::open_append(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|source| WriteFault::CaseFile {
            path: path.to_path_buf(),
            source,
        })
}
