//! One run of a case, in three stages: a preflight (the GPUs the case sees
//! and who else is on them, its memory cgroup), a sampling loop that
//! launches the instances and watches them until they are done and returns
//! a [`CaseOutcome`] — plain facts, no verdict — and the assembly of the
//! result (`assemble`).
//!
//! The loop samples every `sample_interval` and, between ticks, waits on
//! the instances' report pipes (see `supervise`), so an exit is noticed the
//! moment it happens rather than at the next tick: a 50 ms workload at a 2 s
//! interval takes about 50 ms. One thread decides everything about a case,
//! so "exited" and "over budget" cannot race: the case's own
//! [`CaseRunner`], which tells the main thread what it sees through
//! [`Note`]s. When cases run at once, each one's /proc scans are limited to
//! its own supervisors' descendants (`Scanner::limit_to`), so its figures,
//! its signals and its reaping never reach another case's processes.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use super::checks::budget_breached;
use super::instance::Instance;
use super::ready;
use super::serve::{self, ServerSide};
use super::{GpuAccess, Note, Shared, WriteFault};
use crate::measure::gpu::{CaseGpu, ForeignProcess, GpuFigures};
use crate::measure::nvml::Gpu;
use crate::measure::procfs::Scanner;
use crate::measure::{HostFigures, HostMeter, ProcessTree, Sample, Timeline};
use crate::probe::{ProbeReader, ProbeSummary};
use crate::process;
use crate::suite::{Case, ForeignPolicy};
use crate::units::{Bytes, format_duration};
use crate::verdict::StopReason;

/// What the preflight found out before anything was launched.
struct Preflight<'g> {
    gpu: Option<CaseGpu<'g>>,
    foreign: Vec<ForeignProcess>,
    cuda_visible_devices: Option<String>,
    host: HostMeter,
    /// Set when the case must not run (foreign processes under "fail").
    stop: Option<StopReason>,
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
    /// The case's number in the plan, which tags its notes.
    number: usize,
    access: GpuAccess,
    notes: Sender<(usize, Note)>,
    /// Scans, signals and reaping are limited to the processes of one
    /// part of the case at a time: cases run at once, or the case has a
    /// server and a client to keep apart.
    pub(super) scoped: bool,
}

impl<'s, 'a> CaseRunner<'s, 'a> {
    /// `scanner`: one an earlier case used, if any (what it learned of
    /// /proc saves reading every process again).
    pub(super) fn new(
        shared: &'s Shared<'a>,
        number: usize,
        access: GpuAccess,
        notes: Sender<(usize, Note)>,
        scanner: Option<Scanner>,
    ) -> Self {
        CaseRunner {
            shared,
            scanner: scanner.unwrap_or_else(|| Scanner::with_open_files(shared.open_files_each)),
            number,
            access,
            notes,
            scoped: shared.parallel,
        }
    }

    /// The scanner, for the next case.
    pub(super) fn into_scanner(self) -> Scanner {
        self.scanner
    }

    /// Tell the main thread. It listens until every case is done, so a
    /// send only fails when the run is being torn down anyway.
    fn note(&self, note: Note) {
        self.notes.send((self.number, note)).ok();
    }

    pub(super) fn warn(&self, message: String) {
        self.note(Note::Warning(message));
    }

    /// A file could not be written: no case or repeat starts after this
    /// one; the main thread says so and keeps the first such fault.
    pub(super) fn record_fault(&self, fault: WriteFault) {
        self.shared.faulted.store(true, Ordering::Relaxed);
        self.note(Note::Fault(fault));
    }

    /// Run one case once (`repeat` counts from 0), and say when it started
    /// and what was observed; `assemble` makes its result. Later repeats
    /// append to the same logs, after a marker line.
    pub(super) fn run_case(
        &mut self,
        case: &Case,
        case_dir: &Path,
        repeat: u32,
    ) -> (String, CaseOutcome) {
        let started_at = super::now_rfc3339();
        // The scanner comes from the last case, scope and all: this case
        // sets its own (a scope of the last case's supervisors would make
        // every scan of this one empty).
        self.scoped = self.shared.parallel || case.server.is_some();
        self.scanner.limit_to(None);
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

    /// The GPUs the case sees, their use before it starts, whatever else
    /// already runs on them, and the case's memory cgroup.
    fn preflight<'g>(&mut self, case: &Case, gpu: Option<&'g Gpu>) -> Preflight<'g> {
        let mut stop = None;
        let mut foreign = Vec::new();
        let mut cuda_visible_devices = None;
        let mut case_gpu = gpu.map(|gpu| {
            let selection = super::gpu::selection(gpu, case, self.access.visible.as_deref());
            for note in &selection.notes {
                self.warn(format!("{}: {note}", case.id));
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
                let message = super::gpu::describe_foreign(&case.id, &foreign);
                if self.shared.suite.foreign_processes == ForeignPolicy::Fail {
                    stop = Some(StopReason::ForeignProcesses {
                        message: format!("not run: {message} (foreign_processes = \"fail\")"),
                    });
                } else {
                    self.warn(message);
                }
            }
        }
        let host = self.host_meter("the case's");
        Preflight {
            gpu: case_gpu,
            foreign,
            cuda_visible_devices,
            host,
            stop,
        }
    }

    /// A host meter with a memory cgroup of its own (`whose`: for the
    /// message when it cannot be made).
    fn host_meter(&self, whose: &str) -> HostMeter {
        let serial = self.shared.cgroup_serial.fetch_add(1, Ordering::Relaxed) + 1;
        match &self.shared.memory {
            Some(hierarchy) => match hierarchy.create_case(serial) {
                Ok(cgroup) => HostMeter::new(Some(cgroup), None),
                Err(e) => HostMeter::new(
                    None,
                    Some(format!(
                        "cannot create {whose} memory cgroup ({e}); measured from /proc"
                    )),
                ),
            },
            None => HostMeter::new(None, None),
        }
    }

    /// With a server: its side, measured by the case's own meters, which
    /// the instances (its load client) hand over for new ones of their
    /// own. Not started yet.
    fn server_side<'c, 'g>(
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
        let server_host = std::mem::replace(host, self.host_meter("the load client's"));
        let client_gpu = gpu
            .as_ref()
            .map(|g| g.twin(serve::CLIENT_DELTA_REASON.to_string()));
        let mut server_gpu = std::mem::replace(gpu, client_gpu);
        if let Some(server_gpu) = server_gpu.as_mut() {
            server_gpu.note_delta(serve::SERVER_DELTA_NOTE.to_string());
        }
        Ok(ServerSide::new(
            case,
            case_dir,
            port,
            server_host,
            server_gpu,
        ))
    }

    /// Launch the instances and watch them — samples, budgets, exits, soak
    /// relaunches, the timeout and Ctrl-C — then stop whatever is left of
    /// the process tree.
    fn sample_until_done(
        &mut self,
        case: &Case,
        case_dir: &Path,
        preflight: Preflight<'_>,
    ) -> CaseOutcome {
        let Preflight {
            gpu: mut case_gpu,
            foreign,
            cuda_visible_devices,
            mut host,
            mut stop,
        } = preflight;
        let visible = self.access.visible.as_deref();
        // With a server, `host` and `case_gpu` measure its load client (the
        // instances), and the server takes the case's own meters.
        let mut server = match self.server_side(case, case_dir, &mut host, &mut case_gpu) {
            Ok(server) => server,
            Err(message) => {
                stop.get_or_insert(StopReason::LaunchFailed { message });
                None
            }
        };
        let client_case = server.as_ref().map(|s| case.client_at(s.port));
        let launched = client_case.as_ref().unwrap_or(case);
        let start = Instant::now();
        let mut instances: Vec<Instance> = (0..case.concurrency)
            .map(|index| Instance::new(case_dir, index))
            .map(|instance| match &server {
                Some(server) => instance.client(server.port),
                None => instance,
            })
            .collect();
        if stop.is_none() {
            match server.as_mut() {
                // The load starts once the server is ready.
                Some(server) => {
                    if let Err(message) = server.start(case_dir, visible) {
                        stop = Some(StopReason::LaunchFailed { message });
                    }
                    distrust_cgroup_if_not_joined(
                        std::slice::from_ref(&server.instance),
                        &mut server.host,
                    );
                }
                None => stop = self.start_instances(launched, case_dir, &mut instances, &mut host),
            }
        }

        let mut timeline = match server {
            Some(_) => Timeline::serving(),
            None => Timeline::new(),
        };
        let mut soak_peaks = SoakPeaks::default();
        let mut metrics: Vec<(u32, std::path::PathBuf)> = instances
            .iter()
            .map(|i| (i.index, i.logs.metrics.clone()))
            .collect();
        // The server's probe lines count as the instance after the last.
        metrics.extend(
            server
                .as_ref()
                .map(|s| (case.concurrency, s.instance.logs.metrics.clone())),
        );
        let mut probe = ProbeReader::new(metrics);
        let mut sample_errors = 0u64;
        // Durations are bounded by validation; the fallbacks only guard the
        // arithmetic.
        let far = || start + Duration::from_secs(365 * 24 * 3600);
        let deadline = start.checked_add(case.timeout).unwrap_or_else(far);
        let soak_from = |from: Instant| {
            case.soak
                .map(|soak| from.checked_add(soak).unwrap_or_else(far))
        };
        let mut soak_until = soak_from(start);
        let mut zombies = Vec::new();
        let mut next_tick = start;
        while stop.is_none() {
            let now = Instant::now();
            if now >= next_tick {
                let elapsed = start.elapsed();
                let groups: Vec<i32> = instances.iter().flat_map(Instance::supervisors).collect();
                let (sample, errors) = self.sample(
                    elapsed,
                    (&mut host, case_gpu.as_mut()),
                    server.as_mut(),
                    &groups,
                    &mut zombies,
                );
                sample_errors += errors;
                timeline.push(&sample);
                probe.poll();
                // The series a leak is judged on: the case's own figures
                // (the server's, when it has one).
                let own_gpu = match &server {
                    Some(server) => server.gpu.as_ref(),
                    None => case_gpu.as_ref(),
                };
                soak_peaks.sample(
                    own_gpu.and_then(CaseGpu::gated_total),
                    sample.host_bytes.map(Bytes::get),
                );
                // Orphans re-parented to oomgate are reaped as they exit
                // (a long soak must not pile up zombies), their high-water
                // marks kept. Supervisors are collected by their instance.
                let server_groups: Vec<i32> = server
                    .iter()
                    .flat_map(|s| s.instance.supervisors())
                    .collect();
                let maxrss = process::reap(
                    zombies
                        .iter()
                        .copied()
                        .filter(|p| !groups.contains(p) && !server_groups.contains(p)),
                );
                // An orphan reaped here is of the instances' tree or the
                // server's; its high-water mark is a floor of the case's
                // own figure, which is the server's beside a client.
                match server.as_mut() {
                    Some(server) => server.host.record_rusage(maxrss, elapsed),
                    None => host.record_rusage(maxrss, elapsed),
                }
                record_instances_rusage(&instances, &mut host, elapsed);
                let client_peak = host.peak().map(|(peak, _)| Bytes(peak.bytes));
                let host_peak = match server.as_mut() {
                    Some(server) => {
                        record_instances_rusage(
                            std::slice::from_ref(&server.instance),
                            &mut server.host,
                            elapsed,
                        );
                        server.host.peak().map(|(peak, _)| Bytes(peak.bytes))
                    }
                    None => client_peak,
                };
                self.note(Note::Progress {
                    elapsed,
                    host_now: sample.host_bytes,
                    host_peak,
                });
                let breached = match &server {
                    Some(server) => {
                        budget_breached(&case.budget, host_peak, server.gpu.as_ref())
                            || budget_breached(&case.client_budget, client_peak, case_gpu.as_ref())
                    }
                    None => budget_breached(&case.budget, host_peak, case_gpu.as_ref()),
                };
                if breached {
                    stop = Some(StopReason::BudgetExceeded { at: elapsed });
                    break;
                }
                next_tick += self.shared.suite.sample_interval;
                if next_tick <= now {
                    next_tick = now + self.shared.suite.sample_interval;
                }
            }
            // The server first: one that ended is why its clients fail.
            if let Some(server) = server.as_mut() {
                match server.look(start.elapsed()) {
                    serve::Seen::Stop(reason) => {
                        stop = Some(reason);
                        break;
                    }
                    serve::Seen::BecameReady => {
                        timeline.mark_ready(start.elapsed());
                        soak_until = soak_from(Instant::now());
                        stop = self.start_instances(launched, case_dir, &mut instances, &mut host);
                        if stop.is_some() {
                            break;
                        }
                    }
                    serve::Seen::Starting => {
                        stop = self.stop_now(case, deadline);
                        if stop.is_some() {
                            break;
                        }
                        let until = next_tick.min(deadline).min(Instant::now() + ready::POLL);
                        wait_for_exit_until(instances.iter().chain([&server.instance]), until);
                        continue;
                    }
                    serve::Seen::Ready => {}
                }
            }
            let runs_before = instances.first().map_or(0, |i| i.runs);
            let may_relaunch = !self.shared.interrupt.requested() && Instant::now() < deadline;
            stop = self.collect_exits(
                launched,
                case_dir,
                &mut instances,
                &mut host,
                start,
                soak_until.filter(|_| may_relaunch),
            );
            if instances.first().map_or(0, |i| i.runs) > runs_before {
                soak_peaks.next_run();
            }
            if stop.is_some() || instances.iter().all(|i| !i.running()) {
                break;
            }
            stop = self.stop_now(case, deadline);
            if stop.is_some() {
                break;
            }
            wait_for_exit_until(
                instances.iter().chain(server.as_ref().map(|s| &s.instance)),
                next_tick.min(deadline),
            );
        }
        // A server that ended just as its last client did is judged, not
        // taken for one oomgate stopped.
        if let (None, Some(server)) = (&stop, server.as_mut()) {
            if let serve::Seen::Stop(reason) = server.look(start.elapsed()) {
                stop = Some(reason);
            }
        }
        let wall_time = start.elapsed();

        // Whatever is still running now is either stopped on purpose or left
        // behind by a workload that exited: either way it must not outlive
        // the case.
        let leftovers = if stop.is_none() {
            let supervisors: Vec<i32> = instances.iter().flat_map(Instance::supervisors).collect();
            self.live_processes(host.whole_cgroup(), &supervisors)
        } else {
            0
        };
        // The load client first, then its server (with its own signal and
        // grace): a client stopped after its server would fail on it.
        let (mut stuck, maxrss) = self.stop_everything(
            &mut instances,
            libc::SIGTERM,
            case.kill_grace,
            host.whole_cgroup(),
        );
        host.record_rusage(maxrss, start.elapsed());
        record_instances_rusage(&instances, &mut host, start.elapsed());
        if let Some(server) = server.as_mut() {
            if !server.exited_on_its_own && server.instance.runs > 0 {
                server.stopped_with = Some(server.spec.stop_signal.name);
            }
            let (server_stuck, maxrss) = self.stop_everything(
                std::slice::from_mut(&mut server.instance),
                server.spec.stop_signal.number,
                server.spec.kill_grace,
                server.host.whole_cgroup(),
            );
            stuck.extend(server_stuck);
            server.host.record_rusage(maxrss, start.elapsed());
            record_instances_rusage(
                std::slice::from_ref(&server.instance),
                &mut server.host,
                start.elapsed(),
            );
        }
        if !stuck.is_empty() {
            self.warn(format!(
                "{}: pid(s) {stuck:?} did not exit even after SIGKILL (stuck in the kernel, e.g. a hung file system or GPU driver); oomgate leaves them",
                case.id
            ));
        }
        timeline.finish();
        let mut finish_gpu = |gpu: Option<CaseGpu<'_>>| {
            gpu.map(|gpu| {
                sample_errors += gpu.errors();
                gpu.finish()
            })
        };
        let (host, gpu, server) = match server {
            Some(side) => {
                let outcome = ServerOutcome {
                    port: side.port,
                    ready: side.ready.describe(),
                    ready_at: side.ready_at,
                    stopped_with: side.stopped_with,
                    client_host: host.finish(start.elapsed()),
                    client_gpu: finish_gpu(case_gpu),
                    instance: side.instance,
                };
                let gpu = finish_gpu(side.gpu);
                (side.host, gpu, Some(outcome))
            }
            None => (host, finish_gpu(case_gpu), None),
        };
        if case.leak.is_some() {
            soak_peaks.next_run();
        }
        let host = host.finish(start.elapsed());
        // The timeline's peak is the case's gated peak, which may come
        // from a high-water mark no sample saw.
        timeline.host_peak = host
            .peak_bytes
            .zip(host.peak_at_ms)
            .map(|(bytes, t_ms)| crate::measure::timeline::Peak { bytes, t_ms });
        CaseOutcome {
            stop,
            instances,
            timeline,
            host,
            gpu,
            foreign,
            cuda_visible_devices,
            probe: probe.finish(),
            soak_peaks: soak_peaks.series(),
            sample_errors,
            leftovers,
            wall_time,
            server,
        }
    }

    /// One tick: scan the tree once, let every meter read it. `zombies`
    /// receives the exited children of oomgate waiting to be reaped;
    /// `supervisors` are left out of the host figures.
    ///
    /// With a server, the scan covers the server's supervisor and the
    /// instances' (`supervisors`), and is split between them: the
    /// sample's own figures are the server's, its `client_*` figures the
    /// instances'.
    fn sample(
        &mut self,
        at: Duration,
        (host, gpu): (&mut HostMeter, Option<&mut CaseGpu<'_>>),
        server: Option<&mut ServerSide<'_, '_>>,
        supervisors: &[i32],
        zombies: &mut Vec<i32>,
    ) -> (Sample, u64) {
        zombies.clear();
        let mut sample = Sample {
            at,
            ..Sample::default()
        };
        let mut errors = 0;
        let me = process::self_pid();
        let server_groups: Vec<i32> = server
            .as_ref()
            .map(|s| s.instance.supervisors().collect())
            .unwrap_or_default();
        let scope: Vec<i32> = supervisors.iter().chain(&server_groups).copied().collect();
        self.limit_scan(&scope);
        let tree = match self.scanner.descendants_of(me) {
            Ok(tree) => tree,
            Err(_) => return (sample, errors + 1),
        };
        zombies.extend(
            tree.members()
                .iter()
                .filter(|p| p.ppid == me && p.is_zombie())
                .map(|p| p.pid),
        );
        let mut measure = |tree: &ProcessTree,
                           host: &mut HostMeter,
                           gpu: Option<&mut CaseGpu<'_>>,
                           exclude: &[i32],
                           sample: &mut Sample| {
            if !host.sample(tree, exclude, sample) {
                errors += 1;
            }
            if let Some(gpu) = gpu {
                // Counted in CaseGpu::errors, added to the case's total at the end.
                gpu.sample(tree, sample);
            }
        };
        match server {
            None => measure(tree, host, gpu, supervisors, &mut sample),
            Some(server) => {
                let mut part = ProcessTree::default();
                tree.subtree_into(&server_groups, &mut part);
                measure(
                    &part,
                    &mut server.host,
                    server.gpu.as_mut(),
                    &server_groups,
                    &mut sample,
                );
                // The client starts once the server is ready: until then
                // it has no figure (null, not its empty cgroup's 0).
                if server.ready_at.is_some() {
                    tree.subtree_into(supervisors, &mut part);
                    let mut client = Sample {
                        at,
                        ..Sample::default()
                    };
                    measure(&part, host, gpu, supervisors, &mut client);
                    sample.client_host_bytes = client.host_bytes;
                    sample.client_gpu_bytes = client.gpu_bytes;
                }
            }
        }
        (sample, errors)
    }

    /// Ctrl-C, or the case's time is up: the reason to stop it now.
    fn stop_now(&self, case: &Case, deadline: Instant) -> Option<StopReason> {
        if self.shared.interrupt.requested() {
            Some(StopReason::Interrupted)
        } else if Instant::now() >= deadline {
            Some(StopReason::TimedOut {
                after: case.timeout,
            })
        } else {
            None
        }
    }

    /// Launch every instance (in the cgroup of `host`); the reason to
    /// stop the case if one cannot be.
    fn start_instances(
        &self,
        case: &Case,
        case_dir: &Path,
        instances: &mut [Instance],
        host: &mut HostMeter,
    ) -> Option<StopReason> {
        let procs = host.cgroup().map(|c| c.procs_path().clone());
        let visible = self.access.visible.as_deref();
        let mut stop = None;
        for instance in instances.iter_mut() {
            if let Err(message) = instance.start(case, case_dir, procs.as_ref(), visible) {
                stop = Some(StopReason::LaunchFailed { message });
                break;
            }
        }
        distrust_cgroup_if_not_joined(instances, host);
        stop
    }
}

impl CaseRunner<'_, '_> {
    /// When cases run at once, limit the scans to this case's processes:
    /// its instances' supervisors and their descendants.
    pub(super) fn limit_scan(&mut self, supervisors: &[i32]) {
        if self.scoped {
            self.scanner.limit_to(Some(supervisors));
        }
    }
}

/// Each soak run's peak (instance 0's runs), for leak detection, kept for
/// GPU memory (without tainted device deltas: a neighbour's growth is no
/// leak of the case's) and host memory apart; the GPU series is the one
/// used when the case holds any GPU memory of its own.
#[derive(Default)]
struct SoakPeaks {
    gpu_run: u64,
    host_run: u64,
    gpu: Vec<u64>,
    host: Vec<u64>,
}

impl SoakPeaks {
    fn sample(&mut self, gpu: Option<u64>, host: Option<u64>) {
        self.gpu_run = self.gpu_run.max(gpu.unwrap_or(0));
        self.host_run = self.host_run.max(host.unwrap_or(0));
    }

    /// The run in progress ended.
    fn next_run(&mut self) {
        self.gpu.push(std::mem::take(&mut self.gpu_run));
        self.host.push(std::mem::take(&mut self.host_run));
    }

    fn series(self) -> Vec<u64> {
        if self.gpu.iter().any(|peak| *peak > 0) {
            self.gpu
        } else {
            self.host
        }
    }
}

/// The high-water marks the instances' supervisors reported, as floors of
/// the host peak (recording one again changes nothing).
fn record_instances_rusage(instances: &[Instance], host: &mut HostMeter, at: Duration) {
    for bytes in instances.iter().filter_map(|i| i.maxrss_bytes) {
        host.record_rusage(bytes, at);
    }
}

/// A cgroup some instance could not join holds part of the case at most:
/// its figures would be too low, so the case is measured from /proc.
fn distrust_cgroup_if_not_joined(instances: &[Instance], host: &mut HostMeter) {
    if host.cgroup().is_none() {
        return;
    }
    if let Some((name, errno)) = instances
        .iter()
        .find_map(|i| i.cgroup_error.map(|e| (i.name(), e)))
    {
        host.distrust_cgroup(format!(
            "{name} could not join its memory cgroup ({}); measured from /proc",
            std::io::Error::from_raw_os_error(errno)
        ));
    }
}

impl CaseRunner<'_, '_> {
    /// Collect exits; relaunch soak runs; a failed instance stops the case.
    /// A soak marker that cannot be added to a log is a fault; the case goes
    /// on.
    fn collect_exits(
        &self,
        case: &Case,
        case_dir: &Path,
        instances: &mut [Instance],
        host: &mut HostMeter,
        start: Instant,
        soak_until: Option<Instant>,
    ) -> Option<StopReason> {
        let visible = self.access.visible.as_deref();
        let mut marker_fault = None;
        let procs = host.cgroup().map(|c| c.procs_path().clone());
        for instance in instances.iter_mut() {
            let Some(exit) = instance.poll() else {
                continue;
            };
            if let Some(bytes) = instance.maxrss_bytes {
                host.record_rusage(bytes, start.elapsed());
            }
            if !exit.success() {
                return Some(StopReason::InstanceFailed {
                    index: instance.index,
                });
            }
            if soak_until.is_some_and(|until| Instant::now() < until) {
                let marker = format!(
                    "\n[oomgate] soak: run {} of instance {} starts at +{}\n",
                    instance.runs + 1,
                    instance.index,
                    format_duration(start.elapsed())
                );
                for path in [&instance.logs.stdout, &instance.logs.stderr] {
                    if let Err(fault) = append(path, &marker) {
                        marker_fault.get_or_insert(fault);
                    }
                }
                if let Some(fault) = marker_fault.take() {
                    self.record_fault(fault);
                }
                if let Err(message) = instance.start(case, case_dir, procs.as_ref(), visible) {
                    return Some(StopReason::LaunchFailed { message });
                }
            }
        }
        distrust_cgroup_if_not_joined(instances, host);
        None
    }
}

/// Sleep until `until`, or until an instance's supervisor reports (an exit),
/// or a signal arrives — whichever comes first.
fn wait_for_exit_until<'i>(instances: impl Iterator<Item = &'i Instance>, until: Instant) {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return;
    }
    let mut fds: Vec<libc::pollfd> = instances
        .flat_map(Instance::report_fds)
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // Rounded up: a zero timeout would spin until the tick.
    let millis = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
    // SAFETY: poll reads and writes the pollfd array it is given, of the
    // length given. A signal (Ctrl-C) ends the wait early with EINTR.
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, millis);
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
    use super::launch::InstanceLogs;
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
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|source| WriteFault::CaseFile {
            path: path.to_path_buf(),
            source,
        })
}
