//! The result of one run of a case, from what the sampling loop observed:
//! the results model's `CaseResult` with the judge's checks against the
//! case's own limits and its verdict, the diagnosis of a failure and its
//! headline, log tails. The decisions are the judge's and `diagnose`'s
//! pure functions; this file gathers their inputs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::case::CaseOutcome;
use super::case::CaseRunner;
use super::fault::WriteFault;
use super::instance::Instance;
use super::logs::{TAIL_BYTES, read_tail};
use crate::diagnose::{self, Diagnosis};
use crate::environment::is_allocator_variable;
use crate::judge::{self, CaseRun, Observed, StopReason};
use crate::measure::gpu::GpuFigures;
use crate::measure::timeline::{Peak, ServerPhases};
use crate::probe::StepSeen;
use crate::redact;
use crate::results::{
    CaseResult, Check, CheckKind, ClientResult, HostResult, InstanceResult, ServerResult,
};
use crate::suite::{Case, server_env};
use crate::units::Bytes;

impl CaseRunner<'_, '_> {
    /// The case's result from what one run observed, with the facts its
    /// final verdict is decided from once the baseline has been compared.
    pub(super) fn record(
        &mut self,
        case: &Case,
        case_dir: &Path,
        repeat: u32,
        started_at: String,
        outcome: CaseOutcome,
    ) -> CaseRun {
        let CaseOutcome {
            stop,
            instances,
            timeline,
            host,
            gpu: mut gpu_figures,
            foreign,
            cuda_visible_devices,
            settle,
            probe,
            soak_peaks,
            sample_errors,
            leftovers,
            wall_time,
            server,
        } = outcome;
        // The allocator's own peak is a floor no sampling gap can miss:
        // the figure the budgets judge is never below it.
        let allocator_floor = gpu_figures.as_mut().and_then(|gpu| {
            gpu.hold_to_allocator_floor(probe.as_ref().and_then(|p| p.peak_reserved))
        });
        let (checks, leak_figures) = judge::run_checks(
            case,
            &host,
            gpu_figures.as_ref(),
            server
                .as_ref()
                .map(|s| (&s.client_host, s.client_gpu.as_ref())),
            probe.as_ref(),
            &soak_peaks,
        );
        let observed = Observed {
            stop,
            exits: instances.iter().map(|i| i.exit).collect(),
            host_peak: host.peak_bytes.map(Bytes),
            serving: server.is_some(),
            gpu_lost: gpu_figures.as_ref().and_then(judge::GpuLoss::of),
        };
        let verdict = judge::decide(&observed, &checks);
        let status = verdict.status;

        let timeline_path = match repeat {
            0 => case_dir.join("timeline.json"),
            k => case_dir.join(format!("timeline.repeat-{}.json", k + 1)),
        };
        if let Err(source) = write_json(&timeline_path, &timeline) {
            let fault = WriteFault::CaseFile {
                path: timeline_path.clone(),
                source,
            };
            self.record_fault(fault);
        }
        // Whatever torch memory snapshot the case left (its probe's, or
        // its own `_dump_snapshot`), summarised by allocation site.
        let allocation_sites =
            crate::snapshot::read_case(case_dir, case.sites_depth as usize, &case.cwd)
                .map(masked_sites);
        for note in allocation_sites.iter().flat_map(|s| &s.notes) {
            self.warn(format!("{}: memory snapshot: {note}", case.id));
        }
        if leftovers > 0 {
            self.warn(format!(
                        "{}: {leftovers} process(es) were still running after the command exited; oomgate stopped them",
                        case.id
                    ));
        }
        if let Some(note) = &host.note {
            self.warn(format!("{}: {note}", case.id));
        }
        if let Some(note) = server.as_ref().and_then(|s| s.client_host.note.as_ref()) {
            self.warn(format!("{}: load client: {note}", case.id));
        }

        // The instance whose output explains the verdict: the one that
        // failed on its own (not one oomgate stopped because of it), else
        // the first that failed, else instance 0.
        // A server that ended or never got ready explains the case; so
        // does one stopped when nothing else failed (a budget breach).
        let focus = match &observed.stop {
            Some(StopReason::InstanceFailed { index }) => *index as usize,
            _ => instances
                .iter()
                .find(|i| i.exit.is_some_and(|e| !e.success()))
                .map_or(0, |i| i.index as usize),
        };
        let server_first = matches!(
            observed.stop,
            Some(StopReason::ServerExited { .. } | StopReason::ServerNotReady { .. })
        ) || (!matches!(observed.stop, Some(StopReason::InstanceFailed { .. }))
            && instances.iter().all(|i| i.exit.is_none_or(|e| e.success())));
        let (focus, oom_kills) = match &server {
            Some(server) if server_first => (&server.instance, host.oom_kills),
            Some(server) => (&instances[focus], server.client_host.oom_kills),
            None => (&instances[focus], host.oom_kills),
        };
        let mut diagnosis = diagnose_case(status, &observed, &checks, focus, oom_kills);
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
            checks
                .iter()
                .find(|c| c.kind == CheckKind::Leak && !c.passed),
        ) {
            diagnosis.hints.push(format!(
                "Memory grows between comparable iterations ({}): look for references kept across iterations — losses kept as tensors, callbacks, metrics, stored outputs.",
                crate::report::words::check_message(leak).trim_start_matches("leak: ")
            ));
        }
        // What oomgate copies from the workload's output is masked (its
        // logs stay its own bytes).
        let redactor = redact::active();
        if let Some(exception) = diagnosis.as_mut().and_then(|d| d.exception.as_mut()) {
            *exception = redactor.mask(exception).into_owned();
        }
        let headline = diagnosis.as_ref().and_then(|d| {
            self.headline(
                d,
                probe.as_ref().and_then(|p| p.last_step.as_ref()),
                case,
                &gpu_names(&gpu_figures),
            )
        });
        // The rest of a headline is the suite's own text (its params).
        let headline = headline.map(|h| redactor.mask_suite(&h).into_owned());
        // Masked with the text before the tail's cut in view.
        let tail = |path: &Path| {
            read_tail(path, TAIL_BYTES, &redactor)
                .unwrap_or_else(|e| format!("[oomgate: cannot read {}: {e}]", path.display()))
        };
        let relative = |path: &Path| -> PathBuf {
            path.strip_prefix(self.shared.out_dir)
                .unwrap_or(path)
                .to_path_buf()
        };

        let recorded = recorded(case);
        // Each rank's own figures (a distributed case's workers).
        let mut ranks =
            crate::measure::ranks::merge(&host.ranks, gpu_figures.as_ref().map(|g| &g.ranks));
        if let Some(sites) = &allocation_sites {
            crate::measure::ranks::attach_sites(&mut ranks, &sites.by_rank);
        }
        // The GPUs the case was given: its baseline is theirs.
        let testbed = crate::baseline::testbed::name_of(
            gpu_figures
                .iter()
                .flat_map(|g| &g.devices)
                .map(|d| d.gpu.name.as_str()),
        );
        let phases = timeline.server;
        let phase = |pick: fn(&ServerPhases) -> Option<Peak>| {
            phases.as_ref().and_then(pick).map(|peak| peak.bytes)
        };
        let mut result = CaseResult {
            id: case.id.clone(),
            params: recorded.params,
            command: recorded.command,
            cwd: case.cwd.clone(),
            concurrency: case.concurrency,
            timeout_s: case.timeout.as_secs_f64(),
            soak_s: case.soak.map(|d| d.as_secs_f64()),
            status,
            // Decided with the final verdict (`judge::judge_case`).
            failure_kind: None,
            // Worded below, from the verdict.
            message: None,
            started_at,
            wall_time_s: wall_time.as_secs_f64(),
            host: host.into(),
            gpu_peak_bytes: gpu_figures.as_ref().and_then(|g| g.peak_bytes),
            gpu_peak_method: gpu_figures.as_ref().map(|g| g.method),
            gpu_allocator_floor_bytes: allocator_floor,
            gpu_left_bytes: gpu_figures.as_ref().and_then(|g| g.left_bytes),
            settle,
            gpu_devices: gpu_figures.map(|g| g.devices).unwrap_or_default(),
            cuda_visible_devices,
            foreign_processes: foreign,
            gpus: None,
            gpu_sharing: Vec::new(),
            retried_alone: None,
            capacity: None,
            server: server.as_ref().map(|server| ServerResult {
                command: recorded.server_command.clone().unwrap_or_default(),
                env: recorded.server_env.clone(),
                port: server.port,
                ready: server.ready.clone(),
                ready_after_s: server.ready_at.map(|at| at.as_secs_f64()),
                exit: server.instance.exit,
                stopped_with: server.stopped_with.map(str::to_string),
                stdout_log: relative(&server.instance.logs.stdout),
                stderr_log: relative(&server.instance.logs.stderr),
                startup_host_peak_bytes: phase(|p| p.startup_host_peak),
                startup_gpu_peak_bytes: phase(|p| p.startup_gpu_peak),
                load_host_peak_bytes: phase(|p| p.load_host_peak),
                load_gpu_peak_bytes: phase(|p| p.load_gpu_peak),
            }),
            client: server.as_ref().map(|server| {
                let host = &server.client_host;
                let gpu = server.client_gpu.as_ref();
                // A client that never started (its server never got ready)
                // has no figures: null, not its empty cgroup's 0.
                let ran = instances.iter().any(|i| i.runs > 0);
                ClientResult {
                    host: match ran {
                        true => host.clone().into(),
                        false => HostResult {
                            oom_kills: host.oom_kills,
                            note: Some(match server.instance.runs {
                                0 => "never started: its server did not start".into(),
                                _ => "never started: its server was not ready".into(),
                            }),
                            ..HostResult::unmeasured(host.method)
                        },
                    },
                    gpu_peak_bytes: gpu.and_then(|g| g.peak_bytes).filter(|_| ran),
                    gpu_peak_method: gpu.map(|g| g.method).filter(|_| ran),
                    gpu_devices: gpu
                        .filter(|_| ran)
                        .map(|g| g.devices.clone())
                        .unwrap_or_default(),
                }
            }),
            pytest: case.pytest.clone(),
            allocation_sites,
            site_growth: None,
            testbed,
            ranks,
            rank_growth: None,
            env: recorded.env,
            allocator_env: allocator_env(case),
            tolerance: None,
            // The case's, not a probe's: set once the case is judged.
            definition: Default::default(),
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
            leak: leak_figures,
            stdout_tail: tail(&focus.logs.stdout),
            stderr_tail: tail(&focus.logs.stderr),
        };
        crate::report::words::word_case(&mut result, &verdict, headline.as_deref());
        CaseRun {
            result,
            observed,
            headline,
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
            .shared
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
}

/// A case's definition as results record it: the command with secret
/// arguments as `***`, params masked, secret-named variables by their hash
/// (see `crate::redact`).
pub(super) struct Recorded {
    pub(super) command: Vec<String>,
    /// The server's command and own env, with `{port}` as written.
    pub(super) server_command: Option<Vec<String>>,
    pub(super) server_env: indexmap::IndexMap<String, String>,
    pub(super) params: indexmap::IndexMap<String, String>,
    pub(super) env: indexmap::IndexMap<String, String>,
}

pub(super) fn recorded(case: &Case) -> Recorded {
    Recorded {
        command: redact::command(&case.command),
        server_command: case.server.as_ref().map(|s| redact::command(&s.command)),
        server_env: server_env(case)
            .iter()
            .map(|(name, value)| (name.clone(), redact::env_value(name, value)))
            .collect(),
        params: case
            .params
            .iter()
            .map(|(name, value)| (name.clone(), redact::mask_suite(value).into_owned()))
            .collect(),
        env: case
            .env
            .iter()
            .map(|(name, value)| (name.clone(), redact::env_value(name, value)))
            .collect(),
    }
}

/// The allocator- and device-related variables the case is launched with:
/// oomgate's own environment overlaid with the case's, and with a server's
/// own — the server is what the case's figures measure (as recorded: a
/// secret-named one by its hash).
fn allocator_env(case: &Case) -> BTreeMap<String, String> {
    let mut variables: BTreeMap<String, String> = std::env::vars()
        .filter(|(name, _)| is_allocator_variable(name))
        .collect();
    for (name, value) in case.env.iter().chain(&server_env(case)) {
        if is_allocator_variable(name) {
            variables.insert(name.clone(), value.clone());
        }
    }
    variables
        .into_iter()
        .map(|(name, value)| {
            let value = redact::env_value(&name, &value);
            (name, value)
        })
        .collect()
}

/// Classify a case that failed on its own, from its stderr and exit.
fn diagnose_case(
    status: crate::results::CaseStatus,
    observed: &Observed,
    checks: &[Check],
    focus: &Instance,
    host_oom_kills: Option<u64>,
) -> Option<Diagnosis> {
    let stopped_by_oomgate = !matches!(
        observed.stop,
        None | Some(StopReason::InstanceFailed { .. } | StopReason::ServerExited { .. })
    );
    let check_failed = checks.iter().any(|c| !c.passed);
    let mut diagnosis = diagnose::diagnose(
        status,
        focus.exit,
        stopped_by_oomgate,
        check_failed,
        &focus.logs.stderr,
        focus.stderr_offset,
        host_oom_kills,
    )?;
    // Its supervisor killed from outside: the exit is the supervisor's.
    if focus.supervisor_lost && !stopped_by_oomgate {
        diagnosis = diagnose::with_supervisor_killed(diagnosis);
    }
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

/// Write a case's JSON file, replacing whatever the workload left under
/// its name (a link is replaced, never written through); a write cut
/// short leaves no file, so no reader takes half a timeline for one.
fn write_json(path: &Path, value: &impl serde::Serialize) -> std::io::Result<()> {
    let text = serde_json::to_string(value).map_err(std::io::Error::other)?;
    crate::files::case::replace(path, text.as_bytes())
}

/// A snapshot's text is the workload's (its frames' file and function
/// names, its files' names): masked as it enters the results, as its
/// output is, before any report shortens a site's name.
fn masked_sites(mut sites: crate::snapshot::AllocationSites) -> crate::snapshot::AllocationSites {
    let redactor = redact::active();
    let mask = |text: &mut String| {
        if let std::borrow::Cow::Owned(masked) = redactor.mask(text) {
            *text = masked;
        }
    };
    for site in sites
        .sites
        .iter_mut()
        .chain(sites.by_rank.values_mut().flatten())
    {
        mask(&mut site.site);
    }
    sites
        .files
        .iter_mut()
        .chain(&mut sites.notes)
        .chain(sites.allocator_settings.values_mut())
        .for_each(mask);
    sites
}
