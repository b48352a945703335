//! The sampling loop of one run of a case: launch its instances (beside a
//! server, once the server is ready), watch them until they are done, then
//! stop whatever is left and return a [`CaseOutcome`] — plain facts, no
//! verdict.
//!
//! The loop samples every `sample_interval` and, between ticks, waits on
//! the supervisors' report pipes (see `supervise`), so an exit is noticed
//! the moment it happens rather than at the next tick: a 50 ms workload at
//! a 2 s interval takes about 50 ms. While it waits it reads the case
//! cgroup's working memory every `WORKING_READ_INTERVAL` (2 ms), of which
//! the kernel keeps no maximum (see `measure::host`). Its state lives in a
//! [`Watch`]; the work is done by `CaseRunner` methods that take it
//! (`launch`, `step`, `tick`, `finish`), since they need the runner's
//! scanner and shared state too. Each turn is a [`CaseRunner::step`]: a tick when one is due
//! (samples, budgets), a look at the server, then the instances' exits,
//! soak relaunches, the timeout and Ctrl-C.

use std::borrow::Cow;
use std::path::Path;
use std::time::{Duration, Instant};

use super::case::{CaseOutcome, CaseRunner, Preflight, ServerOutcome, append};
use super::instance::{
    Instance, distrust_cgroup_if_not_joined, record_instances_rusage, wait_for_exit_until,
    wait_reading_working,
};
use super::launch::LaunchError;
use super::ready;
use super::serve::{self, ServerSide};
use super::shared::Note;
use super::soak::{SoakPeaks, soak_end};
use crate::judge::StopReason;
use crate::judge::budget_breached;
use crate::measure::gpu::{CaseGpu, ForeignProcess};
use crate::measure::live::Live;
use crate::measure::outside::{OutsideMeter, ProcessNow};
use crate::measure::{HostMeter, ProcessTree, Sample, Timeline};
use crate::probe::ProbeReader;
use crate::process;
use crate::record::Warning;
use crate::suite::Case;
use crate::units::{Bytes, format_duration};
use crate::vocabulary::Exit;

/// How long processes a workload left running get to end by themselves
/// after its command exited before they are stopped and reported as
/// left behind (docs/reliability.md).
pub const HELPER_GRACE: Duration = Duration::from_millis(500);
/// How often the case is looked at for them meanwhile.
const HELPER_POLL: Duration = Duration::from_millis(20);

/// What the loop keeps while a case runs.
struct Watch<'c, 'g> {
    case: &'c Case,
    case_dir: &'c Path,
    /// The case as its instances are launched: beside a server, with its
    /// `{port}` filled in.
    launched: Cow<'c, Case>,
    instances: Vec<Instance>,
    /// The instances' meters: beside a server, its load client's (the
    /// server has the case's own, in `server`).
    host: HostMeter,
    gpu: Option<CaseGpu<'g>>,
    server: Option<ServerSide<'c, 'g>>,
    timeline: Timeline,
    probe: ProbeReader,
    /// GPU memory outside the allocator, from the probe's reports set
    /// against NVML's per-process figures at each tick.
    outside: OutsideMeter,
    soak_peaks: SoakPeaks,
    sample_errors: u64,
    /// Exited children of oomgate found by this tick's scan (reused).
    zombies: Vec<i32>,
    /// When the case started (its server, beside one).
    start: Instant,
    /// When its `timeout` runs out.
    deadline: Instant,
    /// Instances that exit 0 before this are launched again (a soak);
    /// `None` without `duration`. Beside a server it counts from the
    /// moment the server was ready.
    soak_until: Option<Instant>,
    /// When the next sample is due.
    next_tick: Instant,
    foreign: Vec<ForeignProcess>,
    cuda_visible_devices: Option<String>,
    settle: Option<crate::measure::gpu::settle::Settle>,
}

impl Watch<'_, '_> {
    /// Every supervisor of the instances (not the server's).
    fn groups(&self) -> Vec<i32> {
        self.instances
            .iter()
            .flat_map(Instance::supervisors)
            .collect()
    }
}

/// What one turn of the loop found.
enum Step {
    /// Go on watching.
    Go,
    /// Every instance is done.
    Done,
    /// Stop the case.
    Stop(StopReason),
}

impl CaseRunner<'_, '_> {
    /// Launch the instances and watch them — samples, budgets, exits, soak
    /// relaunches, the timeout and Ctrl-C; beside a server, its readiness
    /// and its exit — then stop whatever is left of the process tree.
    pub(super) fn sample_until_done(
        &mut self,
        case: &Case,
        case_dir: &Path,
        preflight: Preflight<'_>,
    ) -> CaseOutcome {
        let (mut watch, mut stop) = self.launch(case, case_dir, preflight);
        while stop.is_none() {
            match self.step(&mut watch) {
                Step::Go => {}
                Step::Done => break,
                Step::Stop(reason) => stop = Some(reason),
            }
        }
        // A server that ended just as its last client did is judged, not
        // taken for one oomgate stopped.
        if let (None, Some(server)) = (&stop, watch.server.as_mut()) {
            if let serve::Seen::Stop(reason) = server.look(watch.start.elapsed()) {
                stop = Some(reason);
            }
        }
        self.finish(watch, stop)
    }

    /// Start the case and build its `Watch`. Beside a server: pick its
    /// port, hand it the case's meters (the instances get new ones) and
    /// launch it; `step` starts the instances once it is ready. Without
    /// one: launch the instances. The reason the case cannot run, if so.
    fn launch<'c, 'g>(
        &self,
        case: &'c Case,
        case_dir: &'c Path,
        preflight: Preflight<'g>,
    ) -> (Watch<'c, 'g>, Option<StopReason>) {
        let Preflight {
            gpu: mut case_gpu,
            foreign,
            cuda_visible_devices,
            mut host,
            mut stop,
            settle,
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
        let launched = match &server {
            Some(server) => Cow::Owned(case.client_at(server.port)),
            None => Cow::Borrowed(case),
        };
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
                    let started = server.start(case_dir, visible, self.shared.forkserver.as_ref());
                    self.say_forkserver_note();
                    if let Err(LaunchError(message)) = started {
                        stop = Some(StopReason::LaunchFailed { message });
                    }
                    distrust_cgroup_if_not_joined(
                        std::slice::from_ref(&server.instance),
                        &mut server.host,
                    );
                }
                None => stop = self.start_instances(&launched, case_dir, &mut instances, &mut host),
            }
        }
        let timeline = match server {
            Some(_) => Timeline::serving(),
            None => Timeline::new(),
        };
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
        // Bounded by validation; the fallback only guards the arithmetic.
        let deadline = start
            .checked_add(case.timeout)
            .unwrap_or_else(|| start + Duration::from_secs(365 * 24 * 3600));
        let watch = Watch {
            case,
            case_dir,
            launched,
            instances,
            host,
            gpu: case_gpu,
            server,
            timeline,
            probe: ProbeReader::new(metrics),
            outside: OutsideMeter::new(self.shared.suite.sample_interval),
            soak_peaks: SoakPeaks::default(),
            sample_errors: 0,
            zombies: Vec::new(),
            start,
            deadline,
            soak_until: soak_end(case.soak, start, deadline),
            next_tick: start,
            foreign,
            cuda_visible_devices,
            settle,
        };
        (watch, stop)
    }

    /// One turn of the loop: a tick when one is due, a look at the server,
    /// then the instances.
    fn step(&mut self, watch: &mut Watch<'_, '_>) -> Step {
        let now = Instant::now();
        if now >= watch.next_tick {
            if let Some(reason) = self.tick(watch) {
                return Step::Stop(reason);
            }
            watch.next_tick = next_tick(watch.next_tick, now, self.shared.suite.sample_interval);
        }
        // The server first: one that ended is why its clients fail.
        if let Some(server) = watch.server.as_mut() {
            match server.look(watch.start.elapsed()) {
                serve::Seen::Stop(reason) => return Step::Stop(reason),
                serve::Seen::BecameReady => {
                    watch.timeline.mark_ready(watch.start.elapsed());
                    watch.soak_until = soak_end(watch.case.soak, Instant::now(), watch.deadline);
                    if let Some(reason) = self.start_instances(
                        &watch.launched,
                        watch.case_dir,
                        &mut watch.instances,
                        &mut watch.host,
                    ) {
                        return Step::Stop(reason);
                    }
                }
                serve::Seen::Starting => {
                    if let Some(reason) = self.stop_now(watch.case, watch.deadline) {
                        return Step::Stop(reason);
                    }
                    let until = watch
                        .next_tick
                        .min(watch.deadline)
                        .min(Instant::now() + ready::POLL);
                    wait_for_exit_until(watch.instances.iter().chain([&server.instance]), until);
                    return Step::Go;
                }
                serve::Seen::Ready => {}
            }
        }
        let runs_before = watch.instances.first().map_or(0, |i| i.runs);
        let may_relaunch = !self.shared.interrupt.requested() && Instant::now() < watch.deadline;
        let stop = self.collect_exits(
            &watch.launched,
            watch.case_dir,
            &mut watch.instances,
            &mut watch.host,
            watch.start,
            watch.soak_until.filter(|_| may_relaunch),
        );
        if watch.instances.first().map_or(0, |i| i.runs) > runs_before {
            watch.soak_peaks.next_run();
        }
        if let Some(reason) = stop {
            return Step::Stop(reason);
        }
        if watch.instances.iter().all(|i| !i.running()) {
            return Step::Done;
        }
        if let Some(reason) = self.stop_now(watch.case, watch.deadline) {
            return Step::Stop(reason);
        }
        self.make_spare_cgroup();
        let mut hosts = vec![&mut watch.host];
        let mut server_instance = None;
        if let Some(server) = watch.server.as_mut() {
            server_instance = Some(&server.instance);
            hosts.push(&mut server.host);
        }
        wait_reading_working(
            watch.instances.iter().chain(server_instance),
            &mut hosts,
            watch.start,
            watch.next_tick.min(watch.deadline),
        );
        Step::Go
    }

    /// Start a run of `instance` in the case's cgroup (`procs`), with the
    /// case's GPUs, its supervisor made by the run's fork server.
    fn start_instance(
        &self,
        instance: &mut Instance,
        case: &Case,
        case_dir: &Path,
        procs: Option<&std::ffi::CString>,
    ) -> Result<(), LaunchError> {
        let started = instance.start(
            case,
            case_dir,
            procs,
            self.access.visible.as_deref(),
            self.shared.forkserver.as_ref(),
        );
        self.say_forkserver_note();
        started
    }

    /// Say, once, that the fork server was set aside (see
    /// `supervise::forkserver::Forkserver::request`).
    fn say_forkserver_note(&self) {
        if let Some(note) = self
            .shared
            .forkserver
            .as_ref()
            .and_then(super::supervise::forkserver::Forkserver::take_note)
        {
            self.warn(note);
        }
    }

    /// One tick: sample every meter from one scan, read the probe, reap
    /// orphans, tell the main thread, check the budgets. The reason to stop
    /// the case if one is breached.
    fn tick(&mut self, watch: &mut Watch<'_, '_>) -> Option<StopReason> {
        let elapsed = watch.start.elapsed();
        let groups = watch.groups();
        let (sample, errors) = self.sample(
            elapsed,
            (&mut watch.host, watch.gpu.as_mut()),
            watch.server.as_mut(),
            &groups,
            &mut watch.zombies,
        );
        watch.sample_errors += errors;
        watch.timeline.push(&sample);
        if let Some(gpu) = watch.gpu.as_ref() {
            watch.timeline.push_ranks(elapsed, gpu.ranks_now());
        }
        watch.probe.poll();
        if watch.outside.wants(watch.probe.fresh()) {
            // The server's processes and the clients': a probe's report
            // is matched by its process, wherever it runs.
            let processes: Vec<ProcessNow> = watch
                .gpu
                .iter()
                .chain(watch.server.iter().filter_map(|s| s.gpu.as_ref()))
                .flat_map(|gpu| gpu.processes_now().iter().copied())
                .collect();
            watch.outside.tick(elapsed, &processes, watch.probe.fresh());
        }
        // The series a leak is judged on: the case's own figures (the
        // server's, when it has one).
        let own_gpu = match &watch.server {
            Some(server) => server.gpu.as_ref(),
            None => watch.gpu.as_ref(),
        };
        watch.soak_peaks.sample(
            own_gpu.and_then(CaseGpu::gated_total),
            sample.host_bytes.map(Bytes::get),
        );
        // Orphans re-parented to oomgate are reaped as they exit (a long
        // soak must not pile up zombies), their high-water marks kept.
        let maxrss = process::reap(watch.zombies.iter().copied());
        // An orphan reaped here is of the instances' tree or the server's;
        // its high-water mark is a floor of the case's own figure, which is
        // the server's beside a client.
        match watch.server.as_mut() {
            Some(server) => server.host.record_rusage(maxrss, elapsed),
            None => watch.host.record_rusage(maxrss, elapsed),
        }
        record_instances_rusage(&watch.instances, &mut watch.host, elapsed);
        let client_peak = watch.host.peak().map(|(peak, _)| Bytes(peak.bytes));
        let host_peak = match watch.server.as_mut() {
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
        let case = watch.case;
        let breached = match &watch.server {
            Some(server) => {
                budget_breached(&case.budget, &Live::of(host_peak, server.gpu.as_ref()))
                    || budget_breached(
                        &case.client_budget,
                        &Live::of(client_peak, watch.gpu.as_ref()),
                    )
            }
            None => budget_breached(&case.budget, &Live::of(host_peak, watch.gpu.as_ref())),
        };
        breached.then_some(StopReason::BudgetExceeded { at: elapsed })
    }

    /// After the loop: count what the instances left, stop it all (the
    /// load client first, then its server, with its own signal and grace),
    /// and finish the meters.
    fn finish(&mut self, watch: Watch<'_, '_>, stop: Option<StopReason>) -> CaseOutcome {
        let Watch {
            case,
            mut instances,
            mut host,
            gpu: case_gpu,
            mut server,
            mut timeline,
            probe,
            outside,
            mut soak_peaks,
            mut sample_errors,
            start,
            foreign,
            cuda_visible_devices,
            settle,
            ..
        } = watch;
        let wall_time = start.elapsed();

        // Whatever is still running now is either stopped on purpose or left
        // behind by a workload that exited: either way it must not outlive
        // the case.
        let supervisors: Vec<i32> = instances.iter().flat_map(Instance::supervisors).collect();
        let mut leftovers = if stop.is_none() {
            self.live_processes(host.whole_cgroup(), &supervisors)
        } else {
            0
        };
        // A helper that ends by itself once the command is gone (Python
        // multiprocessing's resource tracker, on its pipe's end) is no
        // leftover: it gets `HELPER_GRACE`, its memory still measured.
        let grace_ends = Instant::now() + HELPER_GRACE;
        while leftovers > 0 && Instant::now() < grace_ends && !self.shared.interrupt.requested() {
            wait_reading_working(
                std::iter::empty(),
                &mut [&mut host],
                start,
                (Instant::now() + HELPER_POLL).min(grace_ends),
            );
            leftovers = self.live_processes(host.whole_cgroup(), &supervisors);
        }
        // Nothing of the case runs and no supervisor stays with it: nothing
        // is left that could start a process, so stopping need not look
        // again.
        let gone = stop.is_none() && leftovers == 0 && supervisors.is_empty();
        // The load client first, then its server (with its own signal and
        // grace): a client stopped after its server would fail on it.
        let (mut stuck, maxrss) = self.stop_everything(
            &mut instances,
            libc::SIGTERM,
            case.kill_grace,
            host.whole_cgroup(),
            gone,
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
                false,
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
            self.warn(Warning::Stuck(stuck));
        }
        timeline.finish();
        let own_gpu = server.as_ref().and_then(|side| side.gpu.as_ref());
        let left = self.gpu_left(case, own_gpu.or(case_gpu.as_ref()));
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
        // The probe's reports were set against the server's processes and
        // the clients' alike: the case's own figure.
        let mut outside = outside.finish();
        let gpu = gpu.map(|mut figures| {
            figures.left_bytes = left;
            figures.outside = outside.take();
            figures
        });
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
            settle,
            probe: probe.finish(),
            soak_peaks: soak_peaks.series(),
            sample_errors,
            leftovers,
            wall_time,
            server,
        }
    }

    /// One tick: scan the tree once, let every meter read it. `zombies`
    /// receives the exited children of oomgate waiting to be reaped, but
    /// supervisors (each collected by its instance); `supervisors` are
    /// left out of the host figures.
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
                .filter(|p| p.ppid == me && p.is_zombie() && !scope.contains(&p.pid))
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
        stop_now(
            self.shared.interrupt.requested(),
            Instant::now(),
            deadline,
            case.timeout,
        )
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
        let mut stop = None;
        for instance in instances.iter_mut() {
            if let Err(LaunchError(message)) =
                self.start_instance(instance, case, case_dir, procs.as_ref())
            {
                stop = Some(StopReason::LaunchFailed { message });
                break;
            }
        }
        distrust_cgroup_if_not_joined(instances, host);
        stop
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
        let mut marker_fault = None;
        let procs = host.cgroup().map(|c| c.procs_path().clone());
        for instance in instances.iter_mut() {
            let Some(exit) = instance.poll() else {
                continue;
            };
            if let Some(bytes) = instance.maxrss_bytes {
                host.record_rusage(bytes, start.elapsed());
            }
            match after_exit(exit, soak_until, Instant::now()) {
                AfterExit::Failed => {
                    return Some(StopReason::InstanceFailed {
                        index: instance.index,
                    });
                }
                AfterExit::Ended => {}
                AfterExit::Relaunch => {
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
                    if let Err(LaunchError(message)) =
                        self.start_instance(instance, case, case_dir, procs.as_ref())
                    {
                        return Some(StopReason::LaunchFailed { message });
                    }
                }
            }
        }
        distrust_cgroup_if_not_joined(instances, host);
        None
    }
}

/// When the tick after one due at `due` is due, at `now`, every
/// `interval`: on the beat, unless the loop fell behind it, then an
/// interval from now (ticks missed are not made up in a burst).
fn next_tick(due: Instant, now: Instant, interval: Duration) -> Instant {
    let next = due + interval;
    match next <= now {
        true => now + interval,
        false => next,
    }
}

/// Ctrl-C first, then the case's time: the reason to stop it `now`.
fn stop_now(
    interrupted: bool,
    now: Instant,
    deadline: Instant,
    timeout: Duration,
) -> Option<StopReason> {
    if interrupted {
        Some(StopReason::Interrupted)
    } else if now >= deadline {
        Some(StopReason::TimedOut { after: timeout })
    } else {
        None
    }
}

/// What an instance's exit calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterExit {
    /// It failed: the case stops, and this instance explains it.
    Failed,
    /// It ended well inside a soak: it runs again.
    Relaunch,
    /// It ended well, and its part is done.
    Ended,
}

/// An instance ended with `exit` at `now`; `soak_until`: when relaunching
/// ends (`None`: no soak, or relaunching is over — Ctrl-C, the deadline).
fn after_exit(exit: Exit, soak_until: Option<Instant>, now: Instant) -> AfterExit {
    if !exit.success() {
        AfterExit::Failed
    } else if soak_until.is_some_and(|until| now < until) {
        AfterExit::Relaunch
    } else {
        AfterExit::Ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn ticks_keep_their_beat_and_a_late_loop_does_not_burst() {
        let start = Instant::now();
        let interval = 50 * MS;
        // (due, now, next), in ms from the start
        let table = [
            (0, 0, 50),
            (0, 49, 50),
            (0, 50, 100),
            (0, 180, 230),
            (100, 120, 150),
        ];
        for (due, now, next) in table {
            let got = next_tick(start + due * MS, start + now * MS, interval);
            assert_eq!(got, start + next * MS, "due {due} now {now}");
        }
    }

    #[test]
    fn ctrl_c_outranks_the_timeout_and_the_deadline_is_inclusive() {
        let start = Instant::now();
        let deadline = start + 1000 * MS;
        let timeout = Duration::from_secs(1);
        let timed_out = Some(StopReason::TimedOut { after: timeout });
        let table = [
            (false, 999, None),
            (false, 1000, timed_out.clone()),
            (false, 5000, timed_out),
            (true, 10, Some(StopReason::Interrupted)),
            (true, 5000, Some(StopReason::Interrupted)),
        ];
        for (interrupted, now, stop) in table {
            let got = stop_now(interrupted, start + now * MS, deadline, timeout);
            assert_eq!(got, stop, "interrupted {interrupted} at {now} ms");
        }
    }

    #[test]
    fn a_failure_stops_the_case_and_a_success_relaunches_only_inside_its_soak() {
        let start = Instant::now();
        let until = Some(start + 1000 * MS);
        let table = [
            (Exit::Code(1), until, 10, AfterExit::Failed),
            (Exit::Signal(9), None, 10, AfterExit::Failed),
            (Exit::Code(0), until, 999, AfterExit::Relaunch),
            (Exit::Code(0), until, 1000, AfterExit::Ended),
            (Exit::Code(0), None, 10, AfterExit::Ended),
        ];
        for (exit, soak_until, now, after) in table {
            assert_eq!(
                after_exit(exit, soak_until, start + now * MS),
                after,
                "{exit:?} at {now} ms"
            );
        }
    }
}
