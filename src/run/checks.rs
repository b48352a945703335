//! The verdicts a finished (or running) case's figures earn against its
//! own limits: host and GPU budgets, per-device headroom, and `limits` on
//! what its probe reported. The decisions themselves are `verdict`'s; this
//! file gathers the figures for them.

use crate::measure::HostFigures;
use crate::measure::gpu::{CaseGpu, GpuFigures};
use crate::probe::ProbeSummary;
use crate::results::{Check, CheckKind};
use crate::suite::{Budget, Case, Leak};
use crate::units::Bytes;
use crate::verdict;

/// Whether a figure measured so far is over its budget: the gated host peak
/// so far (see `measure::host`), and this tick's GPU figures (a tick over
/// budget stops the case, so earlier ones were within) without tainted
/// device deltas, in total and as each device's share of its memory.
pub(super) fn budget_breached(
    budget: &Budget,
    host_peak: Option<Bytes>,
    gpu: Option<&CaseGpu<'_>>,
) -> bool {
    let over = |limit: Option<Bytes>, peak: Option<u64>| match (limit, peak) {
        (Some(limit), Some(peak)) => verdict::breaches(Bytes(peak), limit),
        _ => false,
    };
    if over(budget.host, host_peak.map(Bytes::get))
        || over(budget.gpu, gpu.and_then(CaseGpu::gated_total))
    {
        return true;
    }
    match (budget.gpu_fraction, gpu) {
        (Some(fraction), Some(gpu)) => gpu.gated_by_device().any(|(device, live)| {
            verdict::breaches(
                Bytes(live),
                verdict::headroom_limit(device.total_bytes, fraction),
            )
        }),
        _ => false,
    }
}

/// The case's `limits` on what its probe reported. A figure the workload
/// never reported fails its limit: it cannot be verified.
pub(super) fn limit_checks(case: &Case, probe: Option<&ProbeSummary>) -> Vec<Check> {
    case.limits
        .iter()
        .map(|limit| {
            let figure = probe.and_then(|p| p.figure(&limit.key));
            let shown = |value: f64| {
                if limit.key.starts_with("probe.peak") {
                    Bytes(value as u64).to_string()
                } else {
                    crate::units::format_figure(value)
                }
            };
            let (passed, message) = match figure {
                Some(value) if limit.op.holds(value, limit.value) => (
                    true,
                    format!(
                        "{} = {} within limit {}",
                        limit.key,
                        shown(value),
                        limit.text
                    ),
                ),
                Some(value) => (
                    false,
                    format!(
                        "{} = {} breaks limit {}",
                        limit.key,
                        shown(value),
                        limit.text
                    ),
                ),
                None => (
                    false,
                    format!(
                        "{} was not reported by the workload, so limit {} is unverified",
                        limit.key, limit.text
                    ),
                ),
            };
            Check {
                kind: CheckKind::Limit(limit.key.clone()),
                passed,
                figure_bytes: None,
                limit_bytes: None,
                message,
            }
        })
        .collect()
}

/// A server case's load client's checks (its `client_budget`, its OOM
/// kills), named and worded as the client's: `client.budget.host`.
pub(super) fn client_checks(checks: impl IntoIterator<Item = Check>) -> Vec<Check> {
    checks
        .into_iter()
        .map(|check| Check {
            kind: CheckKind::Client(Box::new(check.kind)),
            message: format!("client {}", check.message),
            ..check
        })
        .collect()
}

/// Every budget verdict of a finished case.
pub(super) fn budget_checks(
    budget: &Budget,
    host: &HostFigures,
    gpu: Option<&GpuFigures>,
) -> Vec<Check> {
    let mut checks = Vec::new();
    if let Some(limit) = budget.host {
        let how = match host.peak_source {
            Some(source) => format!("{}, {}", source.as_str(), host.method),
            None => host.method.to_string(),
        };
        checks.push(verdict::host_budget_check(
            host.peak_bytes.map(Bytes),
            &how,
            limit,
        ));
    }
    let unmeasured = || "GPU memory was not measured".to_string();
    if let Some(limit) = budget.gpu {
        checks.push(match gpu {
            Some(gpu) => verdict::gpu_budget_check(
                gpu.peak_bytes.map(Bytes),
                &gpu.method.to_string(),
                &gated(gpu),
                limit,
            ),
            None => verdict::gpu_budget_check(None, &unmeasured(), &verdict::Gated::Whole, limit),
        });
    }
    if let Some(fraction) = budget.gpu_fraction {
        for device in gpu.map(|g| g.devices.as_slice()).unwrap_or_default() {
            checks.push(verdict::headroom_check(
                device.index,
                &format!("GPU {} ({})", device.index, device.name),
                device.peak_bytes.map(Bytes),
                &device.method.to_string(),
                device.taint().as_deref(),
                Bytes(device.total_bytes),
                fraction,
            ));
        }
    }
    checks
}

/// What of the case's GPU figure its budget judges: all of it, unless some
/// devices' figures are tainted device deltas, which are left out.
fn gated(gpu: &GpuFigures) -> verdict::Gated {
    let left_out: Vec<String> = gpu
        .devices
        .iter()
        .filter_map(|d| Some(format!("GPU {} {}", d.index, d.taint()?)))
        .collect();
    if left_out.is_empty() {
        return verdict::Gated::Whole;
    }
    let left_out = left_out.join("; ");
    match gpu.untainted_peak_bytes() {
        // Only devices the case left alone remain.
        Some(0) => verdict::Gated::Nothing { left_out },
        rest => verdict::Gated::Rest {
            rest: rest.map(Bytes),
            left_out,
        },
    }
}

/// The leak verdict: growth of a per-iteration figure after warm-up. The
/// probe's steps are the iterations when the workload reports them (the
/// longest series of one instance and phase), else the soak's runs (each
/// run's peak). Too few iterations to tell passes, and says so.
pub(super) fn leak_check(
    leak: Leak,
    probe: Option<&ProbeSummary>,
    soak_peaks: &[u64],
) -> (Check, Option<crate::leak::LeakFigures>) {
    let warmup = leak.warmup as usize;
    let probe_series = probe
        .and_then(ProbeSummary::longest_series)
        .filter(|(_, series)| series.len() >= warmup + 3);
    let figures = match probe_series {
        Some(((_, phase), series)) => {
            let source = if phase.is_empty() {
                "probe steps".to_string()
            } else {
                format!("probe steps ({phase})")
            };
            crate::leak::growth(series, warmup, &source).map(|f| ("allocated memory", f))
        }
        None => crate::leak::growth(soak_peaks, warmup, "soak runs").map(|f| ("the peak", f)),
    };
    let (passed, message) = match &figures {
        Some((what, figures)) if figures.growth_bytes > leak.max_growth.get() as f64 => (
            false,
            format!(
                "leak: {what} {}, more than the {} allowed",
                crate::leak::describe(figures),
                leak.max_growth
            ),
        ),
        Some((what, figures)) => (
            true,
            format!(
                "no leak: {what} {}, within {}",
                crate::leak::describe(figures),
                leak.max_growth
            ),
        ),
        None => (
            true,
            format!(
                "leak not checked: fewer than 3 iterations after a warm-up of {warmup}, from probe steps or soak runs"
            ),
        ),
    };
    let check = Check {
        kind: CheckKind::Leak,
        passed,
        figure_bytes: None,
        limit_bytes: Some(leak.max_growth.get()),
        message,
    };
    (check, figures.map(|(_, figures)| figures))
}

/// A process of the case killed by the kernel's OOM killer fails it, even
/// when the workload recovered (a data-loader worker respawned): the case
/// ran out of host memory. Only known with a cgroup.
pub(super) fn oom_kill_check(host: &HostFigures) -> Option<Check> {
    let kills = host.oom_kills.filter(|kills| *kills > 0)?;
    Some(Check {
        kind: CheckKind::HostOomKill,
        passed: false,
        figure_bytes: None,
        limit_bytes: None,
        message: format!(
            "the kernel's OOM killer killed {kills} process(es) of the case (counted by its memory cgroup, {})",
            host.method
        ),
    })
}
