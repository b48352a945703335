//! One case from launch to verdict: start the instances, sample every tick,
//! watch budgets, exits, the timeout and Ctrl-C, then stop whatever is left
//! of the process tree.
//!
//! The loop polls rather than blocks: every `sample_interval` it samples the
//! tree, checks the budget, and collects exits with `try_wait`. Polling at
//! the sampling rate costs nothing extra (the tick happens anyway) and keeps
//! one thread deciding everything, so there is no race between "the
//! workload exited" and "the budget was exceeded".

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use super::Runner;
use super::checks::{budget_breached, budget_checks, leak_check, limit_checks};
use super::launch::{InstanceLogs, LaunchSpec, launch};
use super::logs::{TAIL_BYTES, read_tail};
use super::process::{self, Exit};
use crate::diagnose::{self, Diagnosis};
use crate::environment::is_allocator_variable;
use crate::measure::gpu::{CaseGpu, GpuFigures};
use crate::measure::{Sample, Timeline};
use crate::probe::{ProbeReader, StepSeen};
use crate::report::{Event, Reporter};
use crate::results::{CaseResult, Check, InstanceResult};
use crate::suite::{Case, ForeignPolicy};
use crate::units::{Bytes, format_duration};
use crate::verdict::{self, Observed, StopReason};

pub(super) struct Instance {
    index: u32,
    logs: InstanceLogs,
    pub(super) handle: Option<duct::Handle>,
    pub(super) pgid: i32,
    runs: u32,
    pub(super) exit: Option<Exit>,
    /// Length of its stderr log when its current run started: diagnosis
    /// reads only this run's output.
    stderr_offset: u64,
}

impl Instance {
    fn start(&mut self, case: &Case, case_dir: &Path) -> Result<(), String> {
        self.stderr_offset = std::fs::metadata(&self.logs.stderr).map_or(0, |m| m.len());
        let spec = LaunchSpec {
            case,
            index: self.index,
            case_dir,
            logs: &self.logs,
        };
        let handle = launch(&spec).map_err(|e| e.to_string())?;
        self.pgid = handle
            .pids()
            .first()
            .and_then(|pid| i32::try_from(*pid).ok())
            .unwrap_or(0);
        self.handle = Some(handle);
        self.runs += 1;
        self.exit = None;
        Ok(())
    }

    pub(super) fn running(&self) -> bool {
        self.handle.is_some()
    }

    pub(super) fn pid(&self) -> Option<i32> {
        self.running().then_some(self.pgid)
    }

    /// Collect the exit status if the instance has exited.
    pub(super) fn poll(&mut self) -> Option<Exit> {
        let handle = self.handle.as_ref()?;
        let exit = match handle.try_wait() {
            Ok(Some(output)) => Exit::from_status(output.status),
            Ok(None) => return None,
            // waitid failing on our own child means it is gone and its
            // status lost; report it as a failure, not a success.
            Err(_) => Exit::Code(-1),
        };
        self.handle = None;
        self.exit = Some(exit);
        Some(exit)
    }
}

impl Runner<'_> {
    /// Run one case once (`repeat` counts from 0). Later repeats append to
    /// the same logs, after a marker line.
    pub(super) fn run_case(
        &mut self,
        case: &Case,
        case_dir: &Path,
        repeat: u32,
        reporter: &mut dyn Reporter,
    ) -> CaseResult {
        let started_at = super::now_rfc3339();
        if repeat > 0 {
            let marker = format!(
                "\n[oomgate] repeat {} of {} starts\n",
                repeat + 1,
                case.repeat
            );
            for index in 0..case.concurrency {
                let logs = InstanceLogs::for_instance(case_dir, index);
                append(&logs.stdout, &marker);
                append(&logs.stderr, &marker);
            }
        }
        let start = Instant::now();
        let mut instances: Vec<Instance> = (0..case.concurrency)
            .map(|index| Instance {
                index,
                logs: InstanceLogs::for_instance(case_dir, index),
                handle: None,
                pgid: 0,
                runs: 0,
                exit: None,
                stderr_offset: 0,
            })
            .collect();

        // GPU preflight: the devices the case sees, their use before it
        // starts, and whatever else already runs on them.
        let mut gpu_slot = self.gpu.take();
        let mut stop = None;
        let mut foreign = Vec::new();
        let mut cuda_visible_devices = None;
        let mut case_gpu = gpu_slot.as_mut().map(|gpu| {
            let selection = super::gpu::selection(gpu, case);
            for note in &selection.notes {
                reporter
                    .handle(&Event::Warning {
                        message: format!("{}: {note}", case.id),
                    })
                    .ok();
            }
            cuda_visible_devices = selection.cuda_visible_devices;
            CaseGpu::begin(
                gpu,
                selection.positions,
                self.measurement.sample_interval_ms,
                selection.unmapped,
            )
        });
        if let Some(case_gpu) = case_gpu.as_mut() {
            if let Ok(tree) = self.scanner.descendants_of(process::self_pid()) {
                foreign = case_gpu.foreign_processes(tree);
            }
            if !foreign.is_empty() {
                let message = super::gpu::describe_foreign(&case.id, &foreign);
                if self.suite.foreign_processes == ForeignPolicy::Fail {
                    stop = Some(StopReason::ForeignProcesses {
                        message: format!("not run: {message} (foreign_processes = \"fail\")"),
                    });
                } else {
                    reporter.handle(&Event::Warning { message }).ok();
                }
            }
        }

        if stop.is_none() {
            for instance in &mut instances {
                if let Err(message) = instance.start(case, case_dir) {
                    stop = Some(StopReason::LaunchFailed { message });
                    break;
                }
            }
        }

        let mut timeline = Timeline::new();
        let mut soak_peaks: Vec<u64> = Vec::new();
        let mut run_peak = 0u64;
        let mut probe = ProbeReader::new(
            instances
                .iter()
                .map(|i| (i.index, i.logs.metrics.clone()))
                .collect(),
        );
        let mut sample_errors = 0u64;
        // Durations are bounded by validation; the fallbacks only guard the
        // arithmetic.
        let far = || start + Duration::from_secs(365 * 24 * 3600);
        let deadline = start.checked_add(case.timeout).unwrap_or_else(far);
        let soak_until = case
            .soak
            .map(|soak| start.checked_add(soak).unwrap_or_else(far));
        let mut zombies = Vec::new();
        let mut next_tick = start;
        while stop.is_none() {
            let elapsed = start.elapsed();
            let (sample, errors) = self.sample(elapsed, case_gpu.as_mut(), &mut zombies);
            sample_errors += errors;
            timeline.push(&sample);
            probe.poll();
            // Each soak run's peak (instance 0's runs), for leak detection.
            run_peak = run_peak.max(sample.gpu_bytes.or(sample.host_bytes).map_or(0, Bytes::get));
            let runs_before = instances.first().map_or(0, |i| i.runs);
            reporter
                .handle(&Event::CaseProgress {
                    case,
                    elapsed,
                    host_now: sample.host_bytes,
                    host_peak: timeline.host_peak.map(|p| Bytes(p.bytes)),
                })
                .ok();

            if budget_breached(case, &timeline, case_gpu.as_ref()) {
                stop = Some(StopReason::BudgetExceeded { at: elapsed });
                break;
            }
            // Orphans re-parented to oomgate are reaped as they exit, so a
            // long soak does not pile up zombies (pid limits in containers).
            let leaders: Vec<i32> = instances.iter().filter_map(Instance::pid).collect();
            process::reap(zombies.iter().copied().filter(|pid| !leaders.contains(pid)));
            let may_relaunch = !self.interrupt.requested() && Instant::now() < deadline;
            stop = self.collect_exits(
                case,
                case_dir,
                &mut instances,
                start,
                soak_until.filter(|_| may_relaunch),
            );
            if instances.first().map_or(0, |i| i.runs) > runs_before {
                soak_peaks.push(std::mem::take(&mut run_peak));
            }
            if stop.is_some() || instances.iter().all(|i| !i.running()) {
                break;
            }
            if self.interrupt.requested() {
                stop = Some(StopReason::Interrupted);
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                stop = Some(StopReason::TimedOut {
                    after: case.timeout,
                });
                break;
            }
            next_tick += self.suite.sample_interval;
            if next_tick <= now {
                next_tick = now + self.suite.sample_interval;
            }
            thread::sleep(next_tick.min(deadline).saturating_duration_since(now));
        }
        let wall_time = start.elapsed();

        // Whatever is still running now is either stopped on purpose or left
        // behind by a workload that exited: either way it must not outlive
        // the case.
        let leftovers = if stop.is_none() {
            self.live_descendants()
        } else {
            0
        };
        let stuck = self.stop_everything(&mut instances, case.kill_grace);
        if !stuck.is_empty() {
            reporter
                .handle(&Event::Warning {
                    message: format!(
                        "{}: pid(s) {stuck:?} did not exit even after SIGKILL (stuck in the kernel, e.g. a hung file system or GPU driver); oomgate leaves them",
                        case.id
                    ),
                })
                .ok();
        }
        timeline.finish();
        let gpu_figures = case_gpu.map(|case_gpu| {
            sample_errors += case_gpu.errors();
            case_gpu.finish()
        });
        self.gpu = gpu_slot;

        let probe = probe.finish();
        let mut checks = budget_checks(case, &timeline, gpu_figures.as_ref());
        checks.extend(limit_checks(case, probe.as_ref()));
        if let Some(leak) = case.leak {
            soak_peaks.push(run_peak);
            checks.push(leak_check(leak, probe.as_ref(), &soak_peaks));
        }
        let observed = Observed {
            stop,
            exits: instances.iter().map(|i| i.exit).collect(),
            host_peak: timeline.host_peak.map(|p| Bytes(p.bytes)),
        };
        let (status, message) = verdict::decide(&observed, &checks);

        let timeline_path = match repeat {
            0 => case_dir.join("timeline.json"),
            k => case_dir.join(format!("timeline.repeat-{}.json", k + 1)),
        };
        if let Err(e) = write_json(&timeline_path, &timeline) {
            reporter
                .handle(&Event::Warning {
                    message: format!("cannot write {}: {e}", timeline_path.display()),
                })
                .ok();
        }
        if leftovers > 0 {
            reporter
                .handle(&Event::Warning {
                    message: format!(
                        "{}: {leftovers} process(es) were still running after the command exited; oomgate stopped them",
                        case.id
                    ),
                })
                .ok();
        }

        // The instance whose output explains the verdict: the one that
        // failed on its own (not one oomgate stopped because of it), else
        // the first that failed, else instance 0.
        let focus = match &observed.stop {
            Some(StopReason::InstanceFailed { index }) => *index as usize,
            _ => instances
                .iter()
                .find(|i| i.exit.is_some_and(|e| !e.success()))
                .map_or(0, |i| i.index as usize),
        };
        let mut diagnosis = diagnose_case(status, &observed, &checks, &instances[focus]);
        if let (Some(diagnosis), Some(probe)) = (diagnosis.as_mut(), probe.as_ref()) {
            let last = probe.last_step.as_ref().and_then(|s| s.step);
            if diagnosis.kind == diagnose::FailureKind::GpuOom
                && last.is_some()
                && last == probe.first_step
            {
                diagnosis.hints.push(format!(
                    "The OOM came at the first step the workload reported (step {}): try a smaller micro-batch or input and see whether the failing step changes.",
                    last.unwrap_or_default()
                ));
            }
        }
        if let (Some(diagnosis), Some(leak)) = (
            diagnosis.as_mut(),
            checks.iter().find(|c| c.name == "leak" && !c.passed),
        ) {
            diagnosis.hints.push(format!(
                "Memory grows between comparable iterations ({}): look for references kept across iterations — losses kept as tensors, callbacks, metrics, stored outputs.",
                leak.message.trim_start_matches("leak: ")
            ));
        }
        let message = match (&diagnosis, message) {
            (Some(d), Some(message)) => Some(
                match self.headline(
                    d,
                    probe.as_ref().and_then(|p| p.last_step.as_ref()),
                    case,
                    &gpu_names(&gpu_figures),
                ) {
                    Some(headline) => format!("{headline} — {message}"),
                    None => message,
                },
            ),
            (_, message) => message,
        };
        let tail = |path: &Path| {
            read_tail(path, TAIL_BYTES)
                .unwrap_or_else(|e| format!("[oomgate: cannot read {}: {e}]", path.display()))
        };
        let relative = |path: &Path| -> PathBuf {
            path.strip_prefix(self.out_dir)
                .unwrap_or(path)
                .to_path_buf()
        };

        CaseResult {
            id: case.id.clone(),
            params: case.params.clone(),
            command: case.command.clone(),
            cwd: case.cwd.clone(),
            concurrency: case.concurrency,
            timeout_s: case.timeout.as_secs_f64(),
            soak_s: case.soak.map(|d| d.as_secs_f64()),
            status,
            message,
            started_at,
            wall_time_s: wall_time.as_secs_f64(),
            host_peak_bytes: timeline.host_peak.map(|p| p.bytes),
            host_peak_at_s: timeline.host_peak.map(|p| p.t_ms as f64 / 1000.0),
            gpu_peak_bytes: gpu_figures.as_ref().and_then(|g| g.peak_bytes),
            gpu_peak_method: gpu_figures.as_ref().map(|g| g.method.clone()),
            gpu_devices: gpu_figures.map(|g| g.devices).unwrap_or_default(),
            cuda_visible_devices,
            foreign_processes: foreign,
            env: case.env.clone(),
            allocator_env: allocator_env(case),
            baseline: None,
            repeats: Vec::new(),
            checks,
            instances: instances
                .iter()
                .map(|i| InstanceResult {
                    index: i.index,
                    runs: i.runs,
                    exit: i.exit,
                    stdout_log: relative(&i.logs.stdout),
                    stderr_log: relative(&i.logs.stderr),
                })
                .collect(),
            samples: timeline.samples,
            sample_errors,
            leftover_processes: leftovers,
            dir: relative(case_dir),
            timeline: relative(&timeline_path),
            diagnosis,
            probe,
            stdout_tail: tail(&instances[focus].logs.stdout),
            stderr_tail: tail(&instances[focus].logs.stderr),
        }
    }

    /// The diagnosis's headline, with the framework version when the suite
    /// records it and the case's matrix params.
    fn headline(
        &self,
        diagnosis: &Diagnosis,
        step: Option<&StepSeen>,
        case: &Case,
        device_names: &[String],
    ) -> Option<String> {
        let torch = self
            .environment
            .python
            .as_ref()
            .and_then(|p| p.packages.get("torch"))
            .filter(|v| v.as_str() != crate::environment::ABSENT);
        diagnose::headline(
            diagnosis,
            step,
            device_names,
            torch.map(String::as_str),
            &case.params,
        )
    }

    /// One tick: scan the tree once, let every sampler read it. `zombies`
    /// receives the exited processes waiting for oomgate to reap them.
    fn sample(
        &mut self,
        at: Duration,
        gpu: Option<&mut CaseGpu<'_>>,
        zombies: &mut Vec<i32>,
    ) -> (Sample, u64) {
        zombies.clear();
        let mut sample = Sample {
            at,
            ..Sample::default()
        };
        let mut errors = 0;
        match self.scanner.descendants_of(process::self_pid()) {
            Ok(tree) => {
                let me = process::self_pid();
                zombies.extend(
                    tree.members()
                        .iter()
                        .filter(|p| p.ppid == me && p.is_zombie())
                        .map(|p| p.pid),
                );
                for sampler in &mut self.samplers {
                    if sampler.sample(tree, &mut sample).is_err() {
                        errors += 1;
                    }
                }
                if let Some(gpu) = gpu {
                    // Counted in CaseGpu::errors, added to the case's total at the end.
                    gpu.sample(tree, &mut sample);
                }
            }
            Err(_) => errors += 1,
        }
        (sample, errors)
    }

    /// Collect exits; relaunch soak runs; a failed instance stops the case.
    fn collect_exits(
        &mut self,
        case: &Case,
        case_dir: &Path,
        instances: &mut [Instance],
        start: Instant,
        soak_until: Option<Instant>,
    ) -> Option<StopReason> {
        for instance in instances.iter_mut() {
            let Some(exit) = instance.poll() else {
                continue;
            };
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
                    append(path, &marker);
                }
                if let Err(message) = instance.start(case, case_dir) {
                    return Some(StopReason::LaunchFailed { message });
                }
            }
        }
        None
    }
}

/// The allocator- and device-related variables the case is launched with:
/// oomgate's own environment overlaid with the case's.
fn allocator_env(case: &Case) -> BTreeMap<String, String> {
    let mut variables: BTreeMap<String, String> = std::env::vars()
        .filter(|(name, _)| is_allocator_variable(name))
        .collect();
    for (name, value) in &case.env {
        if is_allocator_variable(name) {
            variables.insert(name.clone(), value.clone());
        }
    }
    variables
}

/// Classify a case that failed on its own, from its stderr and exit.
fn diagnose_case(
    status: crate::results::CaseStatus,
    observed: &Observed,
    checks: &[Check],
    focus: &Instance,
) -> Option<Diagnosis> {
    let stopped_by_oomgate = !matches!(
        observed.stop,
        None | Some(StopReason::InstanceFailed { .. })
    );
    let check_failed = checks.iter().any(|c| !c.passed);
    let mut diagnosis = diagnose::diagnose(
        status,
        focus.exit,
        stopped_by_oomgate,
        check_failed,
        &focus.logs.stderr,
        focus.stderr_offset,
    )?;
    diagnosis.hints = diagnose::hints::case_hints(&diagnosis, observed.host_peak.map(Bytes::get));
    Some(diagnosis)
}

/// The names of the case's GPUs, by the device index a framework reports,
/// when that index cannot point at the wrong model: every GPU the case sees
/// is the same model (CUDA's fastest-first numbering can differ from NVML's
/// order only between different models). Otherwise none are named.
fn gpu_names(figures: &Option<GpuFigures>) -> Vec<String> {
    let names: Vec<String> = figures
        .as_ref()
        .map(|g| g.devices.iter().map(|d| d.name.clone()).collect())
        .unwrap_or_default();
    if names.windows(2).all(|pair| pair[0] == pair[1]) {
        names
    } else {
        Vec::new()
    }
}

fn append(path: &Path, text: &str) {
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        file.write_all(text.as_bytes()).ok();
    }
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> std::io::Result<()> {
    let text = serde_json::to_string(value).map_err(std::io::Error::other)?;
    std::fs::write(path, text)
}
