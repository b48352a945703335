//! Deciding a case: pure functions from what was measured to a status and a
//! message.
//!
//! The runner records facts (how each instance ended, why it stopped the
//! case, the peaks); this module alone turns them into a [`CaseStatus`] and
//! the one line a person reads first. Being pure, every boundary is table
//! tested: exactly at a budget passes, one byte over fails.
//!
//! A GPU figure that is a device's rise taken while another process was on
//! the device ([`Gated`]) is not judged: it passes with a note rather than
//! failing as unverified, since failing it would still let a neighbour
//! fail the case.

use std::time::Duration;

use crate::results::{CaseResult, CaseStatus, Check, CheckKind};
use crate::status::{Exit, FailureType};
use crate::units::{Bytes, format_duration};

/// Why oomgate itself stopped a case before its instances finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// A budget check failed while the case ran.
    BudgetExceeded {
        at: Duration,
    },
    TimedOut {
        after: Duration,
    },
    Interrupted,
    /// One instance failed, so the others were stopped.
    InstanceFailed {
        index: u32,
    },
    /// The case was not started: its GPUs run processes oomgate did not
    /// start, and the suite says `foreign_processes = "fail"`.
    ForeignProcesses {
        message: String,
    },
    /// An instance (or a soak relaunch) could not be started.
    LaunchFailed {
        message: String,
    },
    /// The case's server exited on its own: before it was ready, or
    /// under load. `at`: since the case started.
    ServerExited {
        exit: Exit,
        at: Duration,
        ready: bool,
    },
    /// The case's server was not ready within its `ready_timeout`:
    /// `target` is what was asked, `last` why the last check failed.
    ServerNotReady {
        after: Duration,
        target: String,
        last: Option<String>,
    },
}

/// What the runner observed about a case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub stop: Option<StopReason>,
    /// How each instance's last run ended; `None` if it never started.
    pub exits: Vec<Option<Exit>>,
    pub host_peak: Option<Bytes>,
    /// The instances are a server's load client (the peak is the server's).
    pub serving: bool,
}

/// A memory budget exceeded: strictly above the limit. A peak exactly at the
/// limit passes, as a limit of "512 MiB" reads.
pub fn breaches(peak: Bytes, limit: Bytes) -> bool {
    peak > limit
}

/// The host budget verdict, on the gated host peak; `how` names the floor
/// that set it and the method (`vmhwm, cgroup-v1`). An unknown peak fails:
/// a budget that cannot be verified must not pass silently.
pub fn host_budget_check(peak: Option<Bytes>, how: &str, limit: Bytes) -> Check {
    budget_check(
        CheckKind::HostBudget,
        "host",
        &format!(" ({how})"),
        peak,
        limit,
    )
}

/// What of a GPU figure a limit judges. A device-delta figure taken while a
/// process not of the case was on the device (tainted) may hold that
/// process's memory: it is reported, never judged on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gated {
    /// Nothing is tainted: the whole figure is judged.
    Whole,
    /// Some devices are tainted (`left_out` names them and why, e.g.
    /// `GPU 0 tainted by pid 4242 (sleep)`): the figure of the others,
    /// `rest` (`None`: unknown), is judged.
    Rest {
        rest: Option<Bytes>,
        left_out: String,
    },
    /// Every device that counts is tainted: nothing is judged.
    Nothing { left_out: String },
}

/// The GPU budget verdict, on the case's peak over all its devices; the
/// method that produced the figure is named in the message.
pub fn gpu_budget_check(peak: Option<Bytes>, method: &str, gated: &Gated, limit: Bytes) -> Check {
    match gated {
        Gated::Whole => budget_check(
            CheckKind::GpuBudget,
            "gpu",
            &format!(" ({method})"),
            peak,
            limit,
        ),
        Gated::Rest { rest, left_out } => budget_check(
            CheckKind::GpuBudget,
            "gpu",
            &format!(" ({method}, without {left_out}: not gated)"),
            *rest,
            limit,
        ),
        Gated::Nothing { left_out } => {
            let shown = peak.map_or("unknown".to_string(), |p| p.to_string());
            Check {
                kind: CheckKind::GpuBudget,
                passed: true,
                figure_bytes: peak.map(Bytes::get),
                limit_bytes: Some(limit.get()),
                message: format!(
                    "gpu peak {shown} ({method}) not gated against budget {limit}: {left_out}, whose memory may be in it"
                ),
            }
        }
    }
}

fn budget_check(
    kind: CheckKind,
    what: &str,
    how: &str,
    peak: Option<Bytes>,
    limit: Bytes,
) -> Check {
    let (passed, message) = match peak {
        Some(peak) if breaches(peak, limit) => (
            false,
            format!(
                "{what} peak {peak}{how} exceeded budget {limit} (by {})",
                Bytes(peak.0 - limit.0)
            ),
        ),
        Some(peak) => (
            true,
            format!("{what} peak {peak}{how} within budget {limit}"),
        ),
        None => (
            false,
            format!("{what} memory could not be measured, so budget {limit} is unverified"),
        ),
    };
    Check {
        kind,
        passed,
        figure_bytes: peak.map(Bytes::get),
        limit_bytes: Some(limit.get()),
        message,
    }
}

/// The most a case may use of a device with `total` bytes under a
/// `gpu_fraction` headroom rule (rounded down to a byte).
pub fn headroom_limit(total: u64, fraction: f64) -> Bytes {
    Bytes((total as f64 * fraction).floor() as u64)
}

/// The headroom verdict for one device (`index`, named `device` in the
/// message): the case's peak on it against a share of its total memory.
/// `taint` (`tainted by pid 4242 (sleep)`): the figure is a device delta
/// with another process about, and is not judged.
pub fn headroom_check(
    index: u32,
    device: &str,
    peak: Option<Bytes>,
    method: &str,
    taint: Option<&str>,
    total: Bytes,
    fraction: f64,
) -> Check {
    let limit = headroom_limit(total.get(), fraction);
    let share = |bytes: Bytes| 100.0 * bytes.get() as f64 / total.get().max(1) as f64;
    let percent = fraction * 100.0;
    let (passed, message) = match (peak, taint) {
        (Some(peak), Some(taint)) => (
            true,
            format!(
                "{device} peak {peak} ({method}) is {:.1}% of its {total}, not gated against the {percent:.0}% headroom limit: {taint}, whose memory may be in it",
                share(peak)
            ),
        ),
        (Some(peak), None) if breaches(peak, limit) => (
            false,
            format!(
                "{device} peak {peak} ({method}) is {:.1}% of its {total}, above the {percent:.0}% headroom limit ({limit})",
                share(peak)
            ),
        ),
        (Some(peak), None) => (
            true,
            format!(
                "{device} peak {peak} ({method}) is {:.1}% of its {total}, within {percent:.0}%",
                share(peak)
            ),
        ),
        (None, _) => (
            false,
            format!(
                "{device} memory could not be measured, so the {percent:.0}% headroom is unverified"
            ),
        ),
    };
    Check {
        kind: CheckKind::GpuHeadroom { device: index },
        passed,
        figure_bytes: peak.map(Bytes::get),
        limit_bytes: Some(limit.get()),
        message,
    }
}

/// The message a reader sees first: the diagnosis's headline (the kind of
/// failure and its figures), then the verdict's own words.
pub fn with_headline(headline: Option<&str>, message: Option<String>) -> Option<String> {
    match (headline, message) {
        (Some(headline), Some(message)) => Some(format!("{headline} — {message}")),
        (_, message) => message,
    }
}

/// The case's status and, when it did not pass, why — most important first:
/// how oomgate stopped it (interrupt, launch failure, timeout), then its own
/// limits (budgets, headroom, OOM kills, probe limits, leaks: a breach is
/// why oomgate stopped it), then how an instance ended, then the judgement
/// of its figures against the baseline and the environment's drift (a run
/// that failed on its own has figures that say little). The one place a
/// case's status is decided: for each run, and again for the case once the
/// baseline's checks are in.
pub fn decide(observed: &Observed, checks: &[Check]) -> (CaseStatus, Option<String>) {
    let peak = match observed.host_peak {
        Some(peak) => format!("host peak {peak}"),
        None => "host peak unknown".to_string(),
    };
    match &observed.stop {
        Some(StopReason::Interrupted) => {
            return (
                CaseStatus::Interrupted,
                Some(format!("interrupted before it finished; {peak} so far")),
            );
        }
        Some(StopReason::LaunchFailed { message } | StopReason::ForeignProcesses { message }) => {
            return (CaseStatus::Error, Some(message.clone()));
        }
        Some(StopReason::TimedOut { after }) => {
            return (
                CaseStatus::TimedOut,
                Some(format!(
                    "timed out after {}; stopped with its whole process tree; {peak}",
                    format_duration(*after)
                )),
            );
        }
        Some(StopReason::ServerNotReady {
            after,
            target,
            last,
        }) => {
            let why = last
                .as_ref()
                .map_or(String::new(), |why| format!(": {why}"));
            return (
                CaseStatus::TimedOut,
                Some(format!(
                    "the server was not ready after {} (waited for {target}{why}); stopped with its whole process tree; {peak}",
                    format_duration(*after)
                )),
            );
        }
        _ => {}
    }
    let failed = |judgement: bool| -> Vec<&str> {
        checks
            .iter()
            .filter(|c| !c.passed && is_judgement(&c.kind) == judgement)
            .map(|c| c.message.as_str())
            .collect()
    };
    let own = failed(false);
    if !own.is_empty() {
        let mut message = own.join("; ");
        if let Some(StopReason::BudgetExceeded { at }) = observed.stop {
            message.push_str(&format!(" — stopped at {}", format_duration(at)));
        }
        return (CaseStatus::Failed, Some(message));
    }
    // A server that ended on its own is the cause; its clients were
    // stopped because of it (or never started).
    if let Some(StopReason::ServerExited { exit, at, ready }) = observed.stop {
        let when = if ready {
            format!("under load, {} into the case", format_duration(at))
        } else {
            format!(
                "before it was ready, {} after it started",
                format_duration(at)
            )
        };
        let mut message = format!("the server {} {when}", exit.describe());
        if exit == Exit::Signal(libc::SIGKILL) || exit == Exit::Code(137) {
            message.push_str(&format!(
                " — not sent by oomgate: suspect the host's out-of-memory killer ({peak}); check `dmesg` or the container's memory limit"
            ));
        }
        return (CaseStatus::Failed, Some(message));
    }
    // With several instances, the first to fail is the cause; the others
    // were stopped because of it.
    let first_failure = match observed.stop {
        Some(StopReason::InstanceFailed { index }) => observed
            .exits
            .get(index as usize)
            .copied()
            .flatten()
            .map(|exit| (index, exit)),
        _ => None,
    }
    .or_else(|| {
        observed
            .exits
            .iter()
            .enumerate()
            .find_map(|(i, exit)| match exit {
                Some(exit) if !exit.success() => Some((i as u32, *exit)),
                _ => None,
            })
    });
    if let Some((index, exit)) = first_failure {
        let who = match (observed.serving, observed.exits.len() > 1) {
            (false, true) => format!("instance {index}"),
            (false, false) => "the command".to_string(),
            (true, true) => format!("load client instance {index}"),
            (true, false) => "the load client".to_string(),
        };
        let mut message = format!("{who} {}", exit.describe());
        if exit == Exit::Signal(libc::SIGKILL) || exit == Exit::Code(137) {
            message.push_str(&format!(
                " — not sent by oomgate: suspect the host's out-of-memory killer ({peak}); check `dmesg` or the container's memory limit"
            ));
        }
        return (CaseStatus::Failed, Some(message));
    }
    let judged = failed(true);
    if !judged.is_empty() {
        return (CaseStatus::Failed, Some(judged.join("; ")));
    }
    (CaseStatus::Passed, None)
}

/// A check that judges the figures after the run (baseline, drift) rather
/// than a limit the run itself had to hold.
fn is_judgement(kind: &CheckKind) -> bool {
    kind.is_baseline() || *kind == CheckKind::EnvironmentDrift
}

/// The kind of a case's failure, one stable word for CI (JUnit's failure
/// `type`, results.json's `failure_kind`, the GitHub annotation's title),
/// or `None` for a case that passed. When several apply, the first in this
/// order wins: how the case ended (`interrupted`, `foreign-processes` — not
/// started beside another's processes —, `launch-error`), then
/// the diagnosis of a case that failed on its own (`gpu-oom`, `host-oom`,
/// `host-oom-suspected`, `cuda-setup`, `cuda-fault`, `timeout`, `crash`) —
/// so an OOM outranks the budget breach it caused — then the failed checks
/// (`host-oom`, `budget`, `headroom`, `leak`, `limit`, `regression`,
/// `baseline`, `environment-drift`).
pub fn failure_kind(case: &CaseResult, stop: Option<&StopReason>) -> Option<FailureType> {
    use crate::diagnose::FailureKind;
    match case.status {
        CaseStatus::Passed => return None,
        CaseStatus::Interrupted | CaseStatus::Running => return Some(FailureType::Interrupted),
        CaseStatus::Error if matches!(stop, Some(StopReason::ForeignProcesses { .. })) => {
            return Some(FailureType::ForeignProcesses);
        }
        CaseStatus::Error => return Some(FailureType::LaunchError),
        CaseStatus::Failed | CaseStatus::TimedOut => {}
    }
    if let Some(diagnosis) = &case.diagnosis {
        return Some(match diagnosis.kind {
            FailureKind::GpuOom => FailureType::GpuOom,
            FailureKind::HostOom | FailureKind::HostAllocFailed => FailureType::HostOom,
            FailureKind::HostOomSuspected => FailureType::HostOomSuspected,
            FailureKind::CudaSetup => FailureType::CudaSetup,
            FailureKind::CudaFault => FailureType::CudaFault,
            FailureKind::Timeout => FailureType::Timeout,
            FailureKind::ExitNonzero => FailureType::Crash,
        });
    }
    if case.status == CaseStatus::TimedOut {
        return Some(FailureType::Timeout);
    }
    Some(
        case.failed_checks()
            .map(|check| rank(&check.kind, check.figure_bytes.is_some()))
            .min_by_key(|(rank, _)| *rank)
            .map_or(FailureType::Crash, |(_, word)| word),
    )
}

/// A failed check's place in the failure kinds' precedence, and its word.
/// `measured`: the check has a figure.
fn rank(kind: &CheckKind, measured: bool) -> (u8, FailureType) {
    match kind {
        CheckKind::HostOomKill => (0, FailureType::HostOom),
        CheckKind::HostBudget | CheckKind::GpuBudget => (1, FailureType::Budget),
        CheckKind::GpuHeadroom { .. } => (2, FailureType::Headroom),
        CheckKind::Leak => (3, FailureType::Leak),
        CheckKind::Limit(_) => (4, FailureType::Limit),
        // A figure measured against its baseline; without one (no
        // baseline, or none it can be compared with) it is the baseline
        // that failed, not the figure.
        CheckKind::Baseline(_) if measured => (5, FailureType::Regression),
        CheckKind::Baseline(_) | CheckKind::BaselineMissing => (6, FailureType::Baseline),
        CheckKind::EnvironmentDrift => (7, FailureType::EnvironmentDrift),
        // A server case's load client: its checks are of the case's kinds.
        CheckKind::Client(check) => rank(check, measured),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    fn observed(stop: Option<StopReason>, exits: &[Option<Exit>], peak: Option<u64>) -> Observed {
        Observed {
            stop,
            exits: exits.to_vec(),
            host_peak: peak.map(Bytes),
            serving: false,
        }
    }

    #[test]
    fn budget_boundaries() {
        let limit = Bytes(512 * MIB);
        let table: &[(Option<u64>, bool)] = &[
            (Some(0), true),
            (Some(512 * MIB - 1), true),
            (Some(512 * MIB), true),
            (Some(512 * MIB + 1), false),
            (Some(u64::MAX), false),
            (None, false),
        ];
        for (peak, passes) in table {
            let check = host_budget_check(peak.map(Bytes), "pss-sum, cgroup-v1", limit);
            assert_eq!(check.passed, *passes, "{peak:?}: {}", check.message);
            assert_eq!(check.limit_bytes, Some(512 * MIB));
        }
        let over = host_budget_check(Some(Bytes(612 * MIB)), "vmhwm, cgroup-v1", limit);
        assert_eq!(
            over.message,
            "host peak 612.0 MiB (vmhwm, cgroup-v1) exceeded budget 512.0 MiB (by 100.0 MiB)"
        );
        let zero_budget = host_budget_check(Some(Bytes(1)), "x", Bytes(0));
        assert!(!zero_budget.passed);
    }

    #[test]
    fn tainted_gpu_figures_are_reported_not_judged() {
        let limit = Bytes(512 * MIB);
        let left_out = || "GPU 0 tainted by pid 4242 (sleep)".to_string();
        let table: &[(Option<u64>, Gated, bool, &str)] = &[
            (Some(513 * MIB), Gated::Whole, false, "exceeded budget"),
            (Some(512 * MIB), Gated::Whole, true, "within budget"),
            (None, Gated::Whole, false, "unverified"),
            (
                Some(4096 * MIB),
                Gated::Nothing {
                    left_out: left_out(),
                },
                true,
                "gpu peak 4.00 GiB (device-delta) not gated against budget 512.0 MiB: GPU 0 tainted by pid 4242 (sleep), whose memory may be in it",
            ),
            (
                None,
                Gated::Nothing {
                    left_out: left_out(),
                },
                true,
                "gpu peak unknown (device-delta) not gated",
            ),
            // The other devices' figures are still judged, one byte over
            // fails, exactly at the budget passes.
            (
                Some(4096 * MIB),
                Gated::Rest {
                    rest: Some(Bytes(512 * MIB + 1)),
                    left_out: left_out(),
                },
                false,
                "(device-delta, without GPU 0 tainted by pid 4242 (sleep): not gated) exceeded budget",
            ),
            (
                Some(4096 * MIB),
                Gated::Rest {
                    rest: Some(limit),
                    left_out: left_out(),
                },
                true,
                "gpu peak 512.0 MiB (device-delta, without GPU 0 tainted by pid 4242 (sleep): not gated) within budget",
            ),
            (
                Some(4096 * MIB),
                Gated::Rest {
                    rest: None,
                    left_out: left_out(),
                },
                false,
                "unverified",
            ),
        ];
        for (peak, gated, passes, fragment) in table {
            let check = gpu_budget_check(peak.map(Bytes), "device-delta", gated, limit);
            assert_eq!(check.passed, *passes, "{gated:?}: {}", check.message);
            assert!(
                check.message.contains(fragment),
                "`{fragment}` not in `{}`",
                check.message
            );
            assert_eq!(check.limit_bytes, Some(512 * MIB));
        }

        let total = Bytes(8 * 1024 * MIB);
        let headroom = |peak: Option<u64>, taint: Option<&str>| {
            headroom_check(
                0,
                "GPU 0 (H100)",
                peak.map(Bytes),
                "device-delta",
                taint,
                total,
                0.5,
            )
        };
        let taint = Some("tainted by pid 4242 (sleep)");
        assert!(!headroom(Some(4096 * MIB + 1), None).passed);
        assert!(headroom(Some(4096 * MIB), None).passed);
        let tainted = headroom(Some(8 * 1024 * MIB), taint);
        assert!(tainted.passed, "{}", tainted.message);
        assert_eq!(
            tainted.message,
            "GPU 0 (H100) peak 8.00 GiB (device-delta) is 100.0% of its 8.00 GiB, not gated against the 50% headroom limit: tainted by pid 4242 (sleep), whose memory may be in it"
        );
        assert!(!headroom(None, taint).passed, "unknown stays unverified");
    }

    #[test]
    fn a_judgement_ranks_below_how_the_run_ended() {
        let regression = Check {
            kind: CheckKind::Baseline("host".into()),
            passed: false,
            figure_bytes: None,
            limit_bytes: None,
            message: "host peak regressed".into(),
        };
        let drift = Check {
            kind: CheckKind::EnvironmentDrift,
            message: "drifted".into(),
            ..regression.clone()
        };
        let over = host_budget_check(Some(Bytes(2)), "vmhwm, cgroup-v1", Bytes(1));
        let ok = [Some(Exit::Code(0))];
        // A clean run judged against its baseline.
        let (status, message) = decide(
            &observed(None, &ok, None),
            std::slice::from_ref(&regression),
        );
        assert_eq!(
            (status, message.as_deref()),
            (CaseStatus::Failed, Some("host peak regressed"))
        );
        let (_, message) = decide(&observed(None, &ok, None), &[regression.clone(), drift]);
        assert_eq!(message.as_deref(), Some("host peak regressed; drifted"));
        // A run that failed on its own keeps its own cause first.
        let (_, message) = decide(
            &observed(None, &[Some(Exit::Code(3))], None),
            std::slice::from_ref(&regression),
        );
        assert_eq!(message.as_deref(), Some("the command exited with code 3"));
        // A breached limit outranks the judgement.
        let (_, message) = decide(&observed(None, &ok, None), &[regression, over]);
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.starts_with("host peak 2 B")),
            "{message:?}"
        );
        // Passing checks change nothing.
        let passing = host_budget_check(Some(Bytes(1)), "x", Bytes(1));
        assert_eq!(
            decide(&observed(None, &ok, None), &[passing]).0,
            CaseStatus::Passed
        );
        assert_eq!(
            with_headline(
                Some("gpu-oom: tried to allocate 2 GiB"),
                Some("exited".into())
            )
            .as_deref(),
            Some("gpu-oom: tried to allocate 2 GiB — exited")
        );
        assert_eq!(with_headline(Some("x"), None), None);
    }

    #[test]
    fn a_server_that_ended_is_the_cause_after_the_cases_own_limits() {
        let died = |ready| StopReason::ServerExited {
            exit: Exit::Code(1),
            at: Duration::from_millis(4100),
            ready,
        };
        let stopped_clients = [Some(Exit::Signal(15)), None];
        let mut serving = observed(Some(died(true)), &stopped_clients, Some(MIB));
        serving.serving = true;
        assert_eq!(
            decide(&serving, &[]),
            (
                CaseStatus::Failed,
                Some("the server exited with code 1 under load, 4.1s into the case".into())
            ),
            "not the clients it took down with it"
        );
        serving.stop = Some(died(false));
        assert!(
            decide(&serving, &[])
                .1
                .is_some_and(|m| m.contains("before it was ready, 4.1s after it started"))
        );
        let over = host_budget_check(Some(Bytes(2)), "vmhwm, cgroup-v1", Bytes(1));
        assert!(
            decide(&serving, &[over])
                .1
                .is_some_and(|m| m.starts_with("host peak")),
            "a breach of the case's own budget comes first"
        );
        serving.stop = Some(StopReason::ServerNotReady {
            after: Duration::from_secs(300),
            target: "tcp://127.0.0.1:9".into(),
            last: Some("connection refused".into()),
        });
        let (status, message) = decide(&serving, &[]);
        assert_eq!(status, CaseStatus::TimedOut);
        assert!(message.is_some_and(|m| m.starts_with(
            "the server was not ready after 5m00s (waited for tcp://127.0.0.1:9: connection refused)"
        )));
        serving.stop = Some(StopReason::InstanceFailed { index: 1 });
        serving.exits = vec![Some(Exit::Code(0)), Some(Exit::Code(2))];
        assert_eq!(
            decide(&serving, &[]).1.as_deref(),
            Some("load client instance 1 exited with code 2")
        );
    }

    #[test]
    fn status_priorities() {
        let ok = Some(Exit::Code(0));
        let failing_check = host_budget_check(Some(Bytes(2)), "pss-sum, procfs-pss", Bytes(1));
        let passing_check = host_budget_check(Some(Bytes(1)), "pss-sum, procfs-pss", Bytes(1));
        let table: Vec<(Observed, Vec<Check>, CaseStatus, &str)> = vec![
            (
                observed(None, &[ok], Some(MIB)),
                vec![],
                CaseStatus::Passed,
                "",
            ),
            (observed(None, &[ok], None), vec![], CaseStatus::Passed, ""),
            (
                observed(None, &[ok], Some(1)),
                vec![passing_check.clone()],
                CaseStatus::Passed,
                "",
            ),
            (
                observed(
                    Some(StopReason::BudgetExceeded {
                        at: Duration::from_millis(1200),
                    }),
                    &[Some(Exit::Signal(15))],
                    Some(2),
                ),
                vec![failing_check.clone()],
                CaseStatus::Failed,
                "exceeded budget 1 B (by 1 B) — stopped at 1.2s",
            ),
            (
                observed(None, &[Some(Exit::Code(3))], Some(MIB)),
                vec![],
                CaseStatus::Failed,
                "the command exited with code 3",
            ),
            (
                observed(None, &[ok, Some(Exit::Code(1))], Some(MIB)),
                vec![],
                CaseStatus::Failed,
                "instance 1 exited with code 1",
            ),
            (
                observed(
                    Some(StopReason::InstanceFailed { index: 2 }),
                    &[Some(Exit::Signal(15)), ok, Some(Exit::Code(4))],
                    None,
                ),
                vec![],
                CaseStatus::Failed,
                "instance 2 exited with code 4",
            ),
            (
                observed(None, &[Some(Exit::Signal(9))], Some(MIB)),
                vec![],
                CaseStatus::Failed,
                "the command was killed by SIGKILL (signal 9) — not sent by oomgate: suspect the host's out-of-memory killer",
            ),
            (
                observed(None, &[Some(Exit::Signal(11))], None),
                vec![],
                CaseStatus::Failed,
                "the command was killed by SIGSEGV (signal 11)",
            ),
            (
                observed(
                    Some(StopReason::TimedOut {
                        after: Duration::from_secs(120),
                    }),
                    &[Some(Exit::Signal(9))],
                    Some(MIB),
                ),
                vec![failing_check.clone()],
                CaseStatus::TimedOut,
                "timed out after 2m00s",
            ),
            (
                observed(
                    Some(StopReason::Interrupted),
                    &[Some(Exit::Signal(15))],
                    None,
                ),
                vec![failing_check],
                CaseStatus::Interrupted,
                "interrupted before it finished; host peak unknown so far",
            ),
            (
                observed(
                    Some(StopReason::LaunchFailed {
                        message: "cannot start `x`".into(),
                    }),
                    &[None],
                    None,
                ),
                vec![],
                CaseStatus::Error,
                "cannot start `x`",
            ),
        ];
        for (observed, checks, status, fragment) in table {
            let (got_status, message) = decide(&observed, &checks);
            assert_eq!(got_status, status, "{observed:?}");
            let message = message.unwrap_or_default();
            assert!(
                message.contains(fragment),
                "`{fragment}` not in `{message}`"
            );
            assert_eq!(
                status == CaseStatus::Passed,
                message.is_empty(),
                "{message}"
            );
        }
    }

    #[test]
    fn failure_kinds_follow_their_precedence() {
        let check = |kind: CheckKind, figure: Option<u64>| Check {
            kind,
            passed: false,
            figure_bytes: figure,
            limit_bytes: None,
            message: String::new(),
        };
        let case = |status: CaseStatus, checks: Vec<Check>| {
            let mut case = CaseResult::unmeasured("c".into());
            case.status = status;
            case.checks = checks;
            case
        };
        let regression = || check(CheckKind::Baseline("gpu".into()), Some(1));
        for (status, checks, expected) in [
            (CaseStatus::Passed, vec![], None),
            (
                CaseStatus::Interrupted,
                vec![regression()],
                Some("interrupted"),
            ),
            (CaseStatus::Error, vec![], Some("launch-error")),
            (CaseStatus::TimedOut, vec![regression()], Some("timeout")),
            (CaseStatus::Failed, vec![], Some("crash")),
            (
                CaseStatus::Failed,
                vec![regression(), check(CheckKind::HostBudget, Some(1))],
                Some("budget"),
            ),
            (
                CaseStatus::Failed,
                vec![
                    check(CheckKind::Leak, None),
                    check(CheckKind::GpuHeadroom { device: 0 }, Some(1)),
                ],
                Some("headroom"),
            ),
            (
                CaseStatus::Failed,
                vec![
                    check(CheckKind::Limit("metric.x".into()), None),
                    check(CheckKind::Leak, None),
                ],
                Some("leak"),
            ),
            (
                CaseStatus::Failed,
                vec![check(CheckKind::EnvironmentDrift, None), regression()],
                Some("regression"),
            ),
            (
                CaseStatus::Failed,
                vec![check(CheckKind::Baseline("gpu".into()), None)],
                Some("baseline"),
            ),
            (
                CaseStatus::Failed,
                vec![
                    check(CheckKind::HostBudget, Some(1)),
                    check(CheckKind::HostOomKill, None),
                ],
                Some("host-oom"),
            ),
        ] {
            assert_eq!(
                failure_kind(&case(status, checks.clone()), None).map(FailureType::as_str),
                expected,
                "{status:?} {checks:?}"
            );
        }
        // A diagnosis outranks the checks: the OOM, not the budget it broke.
        let mut oom = case(
            CaseStatus::Failed,
            vec![check(CheckKind::GpuBudget, Some(1))],
        );
        oom.diagnosis = Some(crate::diagnose::Diagnosis {
            kind: crate::diagnose::FailureKind::GpuOom,
            oom: None,
            exception: None,
            rank: None,
            oom_ranks: Vec::new(),
            hints: Vec::new(),
        });
        assert_eq!(failure_kind(&oom, None), Some(FailureType::GpuOom));
        let refused = case(CaseStatus::Error, vec![]);
        let stop = StopReason::ForeignProcesses {
            message: String::new(),
        };
        assert_eq!(
            failure_kind(&refused, Some(&stop)),
            Some(FailureType::ForeignProcesses)
        );
        assert_eq!(failure_kind(&refused, None), Some(FailureType::LaunchError));
    }
}
