//! A run's measurement assembled into the results model: one pure
//! function, [`assemble`], that decides nothing — the status, checks and
//! diagnosis are the judge's to fill in (`judge::judge_run`), the words
//! `report::words`'s.

use indexmap::IndexMap;

use super::{CaseResult, CaseStatus, ClientResult, HostResult, InstanceResult, ServerResult};
use crate::measure::timeline::{Peak, ServerPhases};
use crate::record::{InstanceRecord, RunRecord};
use crate::redact;
use crate::suite::{Case, server_env};

/// `case`'s result from one run's measurement, as written in the suite
/// (with a search: `{batch}` and all — the value is the search's, in
/// `capacity`, so the case's definition stays the same across probes).
/// Judged as passed until the judge says otherwise.
pub fn assemble(case: &Case, measured: RunRecord) -> CaseResult {
    let RunRecord {
        repeat: _,
        probe_value: _,
        concurrency,
        started_at,
        wall_time,
        stop: _,
        instances,
        server,
        samples,
        server_phases,
        timeline_file,
        dir,
        host,
        gpu,
        allocator_floor,
        foreign,
        cuda_visible_devices,
        settle,
        probe,
        soak_peaks: _,
        sample_errors,
        leftovers,
        allocation_sites,
        allocator_env,
        focus,
        outputs,
    } = measured;
    let recorded = recorded(case);
    // Each rank's own figures (a distributed case's workers).
    let mut ranks = crate::measure::ranks::merge(&host.ranks, gpu.as_ref().map(|g| &g.ranks));
    if let Some(sites) = &allocation_sites {
        crate::measure::ranks::attach_sites(&mut ranks, &sites.by_rank);
    }
    let outside = gpu.as_ref().and_then(|g| g.outside.clone());
    if let Some(outside) = &outside {
        crate::measure::ranks::attach_outside(&mut ranks, &outside.ranks);
    }
    let outside_case = outside.as_ref().map(|o| o.case);
    // The GPUs the case was given: its baseline is theirs.
    let testbed = crate::baseline::testbed::name_of(
        gpu.iter()
            .flat_map(|g| &g.devices)
            .map(|d| d.gpu.name.as_str()),
    );
    let phase = |pick: fn(&ServerPhases) -> Option<Peak>| {
        server_phases.as_ref().and_then(pick).map(|peak| peak.bytes)
    };
    // A client that never started (its server never got ready) has no
    // figures: null, not its empty cgroup's 0.
    let client_ran = instances.iter().any(|i| i.runs > 0);
    CaseResult {
        id: case.id.clone(),
        params: recorded.params,
        command: recorded.command,
        cwd: case.cwd.clone(),
        concurrency,
        timeout_s: case.timeout.as_secs_f64(),
        soak_s: case.soak.map(|d| d.as_secs_f64()),
        status: CaseStatus::Passed,
        failure_kind: None,
        message: None,
        started_at,
        wall_time_s: wall_time.as_secs_f64(),
        host: host.into(),
        gpu_peak_bytes: gpu.as_ref().and_then(|g| g.peak_bytes),
        gpu_peak_method: gpu.as_ref().map(|g| g.method),
        gpu_allocator_floor_bytes: allocator_floor,
        outside_allocator_peak_bytes: outside_case.map(|o| o.peak_bytes),
        outside_allocator_bytes: outside_case.map(|o| o.bytes),
        gpu_fragmentation_bytes: outside_case.and_then(|o| o.fragmentation_bytes),
        outside_allocator: outside,
        gpu_left_bytes: gpu.as_ref().and_then(|g| g.left_bytes),
        settle,
        gpu_devices: gpu.map(|g| g.devices).unwrap_or_default(),
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
            stdout_log: server.instance.stdout_log.clone(),
            stderr_log: server.instance.stderr_log.clone(),
            startup_host_peak_bytes: phase(|p| p.startup_host_peak),
            startup_gpu_peak_bytes: phase(|p| p.startup_gpu_peak),
            load_host_peak_bytes: phase(|p| p.load_host_peak),
            load_gpu_peak_bytes: phase(|p| p.load_gpu_peak),
        }),
        client: server.map(|server| {
            let gpu = server.client_gpu.filter(|_| client_ran);
            ClientResult {
                host: match client_ran {
                    true => server.client_host.into(),
                    false => HostResult {
                        oom_kills: server.client_host.oom_kills,
                        notes: vec![crate::measure::host::HostNote::ClientNotStarted {
                            server_started: server.instance.runs > 0,
                        }],
                        ..HostResult::unmeasured(server.client_host.method)
                    },
                },
                gpu_peak_bytes: gpu.as_ref().and_then(|g| g.peak_bytes),
                gpu_peak_method: gpu.as_ref().map(|g| g.method),
                gpu_devices: gpu.map(|g| g.devices).unwrap_or_default(),
            }
        }),
        pytest: case.pytest.clone(),
        allocation_sites,
        site_growth: None,
        testbed,
        ranks,
        rank_growth: None,
        trend: None,
        env: recorded.env,
        allocator_env,
        tolerance: None,
        // The case's, not a probe's: set once the case is judged.
        definition: Default::default(),
        baseline: None,
        repeats: Vec::new(),
        checks: Vec::new(),
        instances: instances.iter().map(instance_result).collect(),
        samples,
        sample_errors,
        leftover_processes: leftovers,
        dir,
        timeline: timeline_file,
        diagnosis: None,
        probe,
        outputs,
        leak: None,
        stdout_tail: focus.stdout_tail,
        stderr_tail: focus.stderr_tail,
    }
}

fn instance_result(instance: &InstanceRecord) -> InstanceResult {
    InstanceResult {
        index: instance.index,
        runs: instance.runs,
        exit: instance.exit,
        stdout_log: instance.stdout_log.clone(),
        stderr_log: instance.stderr_log.clone(),
    }
}

/// A case's definition as results record it: the command with secret
/// arguments as `***`, params masked, secret-named variables by their hash
/// (see `crate::redact`).
pub struct Recorded {
    pub command: Vec<String>,
    /// The server's command and own env, with `{port}` as written.
    pub server_command: Option<Vec<String>>,
    pub server_env: IndexMap<String, String>,
    pub params: IndexMap<String, String>,
    pub env: IndexMap<String, String>,
}

/// `case`'s definition as results record it.
pub fn recorded(case: &Case) -> Recorded {
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
