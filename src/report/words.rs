//! The sentences of verdicts: one renderer for every check and every
//! case's cause, from the judge's data.
//!
//! The judge (`crate::judge`) decides and writes no English; this file
//! writes the `message` that results.json keeps for each check and case,
//! which every report then shows, and `oomgate diff` words its checks here
//! too. A report that wants other words (the terminal's `88 → 72`) reads
//! the same data. Secrets are masked once the words are made (a case's
//! params may hold what the suite redacts).

use crate::baseline::compare::{describe_tolerance, signed_percent};
use crate::baseline::{AnonWithin, FigureComparison, FloorBreach, NotCompared, SpreadBound};
use crate::diagnose::{self, Diagnosis, FailureKind};
use crate::judge::{Cause, Verdict, Who};
use std::borrow::Cow;

use crate::leak::{LeakFigures, LeakSource};
use crate::measure::gpu::{ForeignPid, GpuMethod};
use crate::results::{
    CaseResult, Check, CheckKind, CheckOutcome, Device, Facts, Measured, OrWritten, TaintedDevice,
};
use crate::suite::{Budget, BudgetKind, BudgetValue};
use crate::units::{Bytes, format_duration, format_figure};
use crate::vocabulary::Exit;

/// Fill in the words of a judged case: each check's message, each compared
/// figure's, its diagnosis's hints, and the case's own message (its
/// diagnosis's headline first). `torch`: the installed torch's version,
/// which a headline of torch's failure names.
pub fn word_case(result: &mut CaseResult, verdict: &Verdict, torch: Option<&str>) {
    let headline = result
        .diagnosis
        .as_ref()
        .and_then(|diagnosis| headline(result, diagnosis, torch))
        // The rest of a headline is the suite's own text (its params).
        .map(|h| crate::redact::mask_suite(&h).into_owned());
    let headline = headline.as_deref();
    // The host notes, from the measurement's data (a result read back
    // keeps the words it was written with).
    let hosts =
        std::iter::once(&mut result.host).chain(result.client.as_mut().map(|c| &mut c.host));
    for host in hosts {
        if let Some(note) = host_notes(&host.notes) {
            host.note = Some(note);
        }
    }
    let devices = result.gpu_devices.iter_mut().chain(
        result
            .client
            .iter_mut()
            .flat_map(|client| &mut client.gpu_devices),
    );
    for device in devices {
        if let Some(note) = &device.device_note {
            device.note = Some(device_note(note));
        }
    }
    say_repeat_methods(result);
    let hints = result.diagnosis.as_ref().map(|d| hints(result, d));
    if let (Some(diagnosis), Some(hints)) = (result.diagnosis.as_mut(), hints) {
        diagnosis.hints = hints;
    }
    for check in &mut result.checks {
        if check.facts.is_some() {
            check.message = check_message(check);
        }
    }
    if let Some(comparison) = &mut result.baseline {
        for figure in comparison.figures_mut() {
            let check = result
                .checks
                .iter()
                .find(|c| c.kind == CheckKind::Baseline(figure.figure));
            figure.message = match check {
                Some(check) => check.message.clone(),
                None => comparison_message(figure),
            };
        }
    }
    let supervisor_killed = result
        .diagnosis
        .as_ref()
        .is_some_and(|d| d.kind == FailureKind::SupervisorKilled);
    let message = case_message(verdict, &result.checks, supervisor_killed);
    // pytest's exit 1 is "a test failed": a failed test's own words say
    // all of it.
    let test_failed = result
        .diagnosis
        .as_ref()
        .is_some_and(|d| matches!(d.kind, FailureKind::TestFailed | FailureKind::TestError))
        && matches!(
            verdict.cause,
            Some(Cause::Exited {
                exit: Exit::Code(1),
                ..
            })
        );
    let message = match (headline, message) {
        (Some(headline), Some(_)) if test_failed => Some(headline.to_string()),
        (Some(headline), Some(message)) => Some(format!("{headline} — {message}")),
        (_, message) => message,
    };
    // What to look at first when the GPU figure grew: the rank, the sites.
    let message = match (message, &result.rank_growth) {
        (Some(message), Some(change)) => Some(format!("{message} — {}", rank_growth(change))),
        (message, _) => message,
    };
    // The rank's own sites, when it names them, say where; the case's
    // (the ranks' sum) would repeat them, all but a settings change.
    let rank_sites = result
        .rank_growth
        .as_ref()
        .is_some_and(|change| !change.sites.is_empty());
    let case_sites = result.site_growth.as_ref().map(|growth| match rank_sites {
        true => crate::snapshot::SiteGrowth {
            grown: Vec::new(),
            settings: growth.settings.clone(),
        },
        false => growth.clone(),
    });
    let message = match (message, case_sites.filter(|g| !g.is_empty())) {
        (Some(message), Some(growth)) => Some(format!("{message} — {}", site_growth(&growth))),
        (message, _) => message,
    };
    // A skipped test: pytest's outcome and reason (`skipped: needs a GPU`).
    let message = match (result.status, message) {
        (crate::results::CaseStatus::Skipped, None) => result
            .probe
            .as_ref()
            .and_then(|p| p.pytest.as_ref())
            .map(
                |pytest| match pytest.message.as_deref().filter(|m| !m.is_empty()) {
                    Some(reason) => format!("{}: {reason}", pytest.outcome.as_str()),
                    None => pytest.outcome.as_str().to_string(),
                },
            ),
        (_, message) => message,
    };
    result.message = message.map(|m| crate::redact::mask(&m).into_owned());
}

/// Repeats whose host figures were measured by different methods (one
/// with its cgroup, one without): the host note says so, once.
fn say_repeat_methods(result: &mut CaseResult) {
    const SAID: &str = "the repeats' host figures were measured by different methods";
    let mut methods = result.repeats.iter().filter_map(|r| r.host_method);
    let first = methods.next();
    let differ = methods.any(|method| Some(method) != first);
    let note = &mut result.host.note;
    if differ && !note.as_deref().is_some_and(|n| n.contains(SAID)) {
        *note = Some(match note.take() {
            Some(earlier) => format!("{earlier}; {SAID}"),
            None => SAID.to_string(),
        });
    }
}

/// A diagnosis's first line: what failed, where (the step the probe saw
/// last), on which GPU, with which torch, at which params.
fn headline(result: &CaseResult, diagnosis: &Diagnosis, torch: Option<&str>) -> Option<String> {
    // A searched case is recorded as written: the value it failed at is
    // its last probe's.
    let mut params = result.params.clone();
    if let Some(capacity) = &result.capacity {
        if let Some(last) = capacity.probes.last() {
            params.insert(capacity.param.clone(), last.value.to_string());
        }
    }
    diagnose::headline(
        diagnosis,
        result.probe.as_ref().and_then(|p| p.last_step.as_ref()),
        &gpu_names(&result.gpu_devices),
        torch,
        &params,
    )
}

/// The names of the case's GPUs, by the device index a framework reports,
/// when that index cannot point at the wrong model: every GPU the case sees
/// is the same model (CUDA's fastest-first numbering can differ from NVML's
/// order only between different models). Otherwise none are named.
fn gpu_names(devices: &[crate::measure::gpu::DeviceFigures]) -> Vec<String> {
    let names: Vec<String> = devices.iter().map(|d| d.name.clone()).collect();
    match names.windows(2).all(|pair| pair[0] == pair[1]) {
        true => names,
        false => Vec::new(),
    }
}

/// What to look at first for a diagnosed failure: the diagnosis's own
/// hints, then what the case's figures add (an OOM at the first step the
/// workload reported; memory growing between iterations).
fn hints(result: &CaseResult, diagnosis: &Diagnosis) -> Vec<String> {
    let mut hints = diagnose::hints::case_hints(diagnosis, result.host.peak_bytes);
    if let Some(probe) = &result.probe {
        let last = probe.last_step.as_ref().and_then(|s| s.step);
        if diagnosis.kind == FailureKind::GpuOom && last.is_some() && last == probe.first_step {
            hints.push(format!(
                "The OOM came at the first step the workload reported (step {}): try a smaller micro-batch or input and see whether the failing step changes.",
                last.unwrap_or_default()
            ));
        }
    }
    // Out of GPU memory with the allocator's figures set against NVML's:
    // what it held, and what was outside it.
    if let (FailureKind::GpuOom, Some(outside)) = (diagnosis.kind, &result.outside_allocator) {
        let at = &outside.case;
        let fragmentation = at
            .fragmentation_bytes
            .map(|b| format!(", {} of it reserved and not allocated", Bytes(b)))
            .unwrap_or_default();
        hints.push(format!(
            "At its GPU peak the allocator held {}{fragmentation}; {} more were outside it (NVML {} for the case's processes): NCCL buffers, CUDA graphs, cuBLAS workspaces or the CUDA context. The most outside it at any moment: {}.",
            Bytes(at.reserved_bytes),
            Bytes(at.bytes),
            Bytes(at.gpu_bytes),
            Bytes(at.peak_bytes)
        ));
    }
    if let Some(leak) = result
        .checks
        .iter()
        .find(|c| c.kind == CheckKind::Leak && !c.passed)
    {
        hints.push(format!(
            "Memory grows between comparable iterations ({}): look for references kept across iterations — losses kept as tensors, callbacks, metrics, stored outputs.",
            check_message(leak).trim_start_matches("leak: ")
        ));
    }
    hints
}

/// `rank 3 grew most: 3.00 GiB → 4.00 GiB`, and where, when its
/// snapshots tell: `, at stage0.py:41 forward +1.00 GiB (…)`.
pub fn rank_growth(change: &crate::measure::ranks::RankChange) -> String {
    let mut line = format!(
        "rank {} grew most: {} → {}",
        change.rank,
        Bytes(change.before),
        Bytes(change.after)
    );
    if !change.sites.is_empty() {
        let sites = crate::snapshot::SiteGrowth {
            grown: change.sites.clone(),
            settings: Vec::new(),
        };
        line.push_str(&format!(", at {}", crate::clean::line(&sites.describe())));
    }
    line
}

/// `grew most: model.py:88 attention +500.0 MiB (100.0 MiB → 600.0 MiB)`.
/// With only the allocator's settings changed, just those.
/// Frame names and allocator values come from snapshots and the lock:
/// [cleaned](crate::clean::line) to one line here, so the message that
/// names them is clean wherever it goes (results.json included).
pub fn site_growth(growth: &crate::snapshot::SiteGrowth) -> String {
    let described = growth.describe();
    let described = crate::clean::line(&described);
    match growth.grown.is_empty() {
        true => described.into_owned(),
        false => format!("grew most: {described}"),
    }
}

/// A figure's comparison with no check of its own: `gpu peak: no baseline`.
fn comparison_message(figure: &FigureComparison) -> String {
    format!("{} peak: no baseline", figure.figure)
}

/// The one line a person reads first about a case that did not pass;
/// `None` for one that passed. `supervisor_killed`: the diagnosis found
/// the workload's supervisor killed from outside oomgate, which is then
/// what a SIGKILL is said to be.
pub fn case_message(
    verdict: &Verdict,
    checks: &[Check],
    supervisor_killed: bool,
) -> Option<String> {
    let peak = |host_peak: &Option<Bytes>| match host_peak {
        Some(peak) => format!("host peak {peak}"),
        None => "host peak unknown".to_string(),
    };
    let joined = |failed: &[usize]| {
        failed
            .iter()
            .filter_map(|&i| checks.get(i))
            .map(|c| c.message.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let killed = |exit: Exit, host_peak: &Option<Bytes>| {
        let sigkill = exit == Exit::Signal(libc::SIGKILL) || exit == Exit::Code(137);
        if sigkill && supervisor_killed {
            format!(
                " — not sent by oomgate: its supervisor (the workload's parent, oomgate's) was killed from outside oomgate, and the workload with it; a process of the case or of the host sent it ({})",
                peak(host_peak)
            )
        } else if sigkill {
            format!(
                " — not sent by oomgate: suspect the host's out-of-memory killer ({}); check `dmesg` or the container's memory limit",
                peak(host_peak)
            )
        } else {
            String::new()
        }
    };
    Some(match verdict.cause.as_ref()? {
        Cause::Interrupted { host_peak } => {
            format!("interrupted before it finished; {} so far", peak(host_peak))
        }
        Cause::NotStarted { message } => message.clone(),
        Cause::NotRun(crate::record::NotRun::NotCollected { nodeid }) => format!(
            "not run: the shared pytest session did not collect {} (its collection differs from oomgate's: a test made at collection time, or a random parameter); `isolate = true` runs it in a process of its own",
            crate::clean::line(nodeid)
        ),
        Cause::NotRun(crate::record::NotRun::Garbled { nodeid, line }) => format!(
            "the shared pytest session said what is not oomgate's plugin's answer for {}: {}",
            crate::clean::line(nodeid),
            crate::clean::line(line)
        ),
        Cause::NotRun(crate::record::NotRun::NoRuns) => {
            "oomgate ran this case no times (an internal error)".to_string()
        }
        Cause::Foreign { processes } => format!(
            "not run: {} (foreign_processes = \"fail\")",
            foreign_processes(processes)
        ),
        Cause::TimedOut { after, host_peak } => format!(
            "timed out after {}; stopped with its whole process tree; {}",
            format_duration(*after),
            peak(host_peak)
        ),
        Cause::ServerNotReady {
            after,
            target,
            last,
            host_peak,
        } => {
            let why = last
                .as_ref()
                .map_or(String::new(), |why| format!(": {why}"));
            format!(
                "the server was not ready after {} (waited for {target}{why}); stopped with its whole process tree; {}",
                format_duration(*after),
                peak(host_peak)
            )
        }
        Cause::GpuLost(loss) => format!(
            "GPU {} ({}) stopped answering NVML {} into the case ({}): its GPU figures are incomplete, so its GPU memory is unknown — check the driver (`nvidia-smi`, `dmesg` for Xid errors) before running it again",
            loss.device.index,
            loss.device.name,
            format_duration(loss.at),
            loss.reason
        ),
        Cause::Limits { failed, stopped_at } => {
            let mut message = joined(failed);
            if let Some(at) = stopped_at {
                message.push_str(&format!(" — stopped at {}", format_duration(*at)));
            }
            message
        }
        Cause::ServerExited {
            exit,
            at,
            ready,
            host_peak,
        } => {
            let when = if *ready {
                format!("under load, {} into the case", format_duration(*at))
            } else {
                format!(
                    "before it was ready, {} after it started",
                    format_duration(*at)
                )
            };
            format!(
                "the server {} {when}{}",
                exit.describe(),
                killed(*exit, host_peak)
            )
        }
        Cause::Exited {
            who,
            exit,
            host_peak,
        } => {
            let who = match who {
                Who::Command => "the command".to_string(),
                Who::Instance(index) => format!("instance {index}"),
                Who::Client => "the load client".to_string(),
                Who::ClientInstance(index) => format!("load client instance {index}"),
            };
            format!("{who} {}{}", exit.describe(), killed(*exit, host_peak))
        }
        Cause::Judged { failed, drift } => {
            let mut message = joined(failed);
            if !drift.is_empty() {
                message.push_str(&format!(
                    "; environment changes since the baseline: {}",
                    joined_display(drift)
                ));
            }
            message
        }
    })
}

/// A check's sentence, from its data. A check read from results written
/// before checks were data keeps the message it was written with, and so
/// does one whose facts are not of its kind (no oomgate writes such).
pub fn check_message(check: &Check) -> String {
    let Some(facts) = &check.facts else {
        return check.message.clone();
    };
    let outcome = check.outcome.unwrap_or(if check.passed {
        CheckOutcome::Within
    } else {
        CheckOutcome::Breached
    });
    let written = || check.message.clone();
    match &check.kind {
        CheckKind::Client(inner) => {
            let inner = Check {
                kind: (**inner).clone(),
                ..check.clone()
            };
            format!("client {}", check_message(&inner))
        }
        CheckKind::Budget(kind) => budget_message(*kind, check, outcome, facts),
        CheckKind::GpuHeadroom { .. } => {
            budget_message(BudgetKind::GpuFraction, check, outcome, facts)
        }
        CheckKind::HostOomKill => match facts {
            Facts::OomKill { kills, method } => format!(
                "the kernel's OOM killer killed {kills} process(es) of the case (counted by its memory cgroup, {method})"
            ),
            _ => written(),
        },
        CheckKind::Limit(key) => match facts {
            Facts::Limit { text, value, bytes } => limit(key, text, *value, *bytes, outcome),
            _ => written(),
        },
        CheckKind::Leak => match facts {
            Facts::Leak {
                what,
                figures,
                warmup,
            } => leak(check, what.as_deref(), figures.as_ref(), *warmup),
            _ => written(),
        },
        CheckKind::Baseline(figure) => match facts {
            Facts::Baseline {
                not_compared,
                required,
                spread,
                floor_breach,
                anon_within,
            } => baseline_figure(
                check,
                figure.as_str(),
                outcome,
                not_compared.as_ref(),
                *required,
                (spread.as_ref(), *floor_breach, *anon_within),
            ),
            _ => written(),
        },
        CheckKind::Output(name) => match facts {
            Facts::Output { .. } => output_message(name, outcome, facts),
            _ => written(),
        },
        CheckKind::BaselineMissing => match facts {
            Facts::Missing {
                lock,
                required,
                testbed,
            } => {
                let mut message = match (lock, testbed) {
                    (Some(lock), Some(testbed)) => {
                        format!("no baseline for testbed {testbed} in {}", lock.display())
                    }
                    (Some(lock), None) => {
                        format!("no baseline for this case in {}", lock.display())
                    }
                    (None, _) => "no baseline: no lock file".to_string(),
                };
                if *required {
                    message.push_str(" (--require-baseline)");
                }
                message
            }
            _ => written(),
        },
        CheckKind::Capacity => capacity(facts, outcome).unwrap_or_else(written),
        CheckKind::EnvironmentDrift => match facts {
            Facts::Drift { changes } => format!(
                "the environment drifted from the baseline (on_drift = \"fail\"): {}",
                joined_display(changes.iter().map(|change| match change {
                    OrWritten::Data(drift) => drift.to_string(),
                    OrWritten::Written(words) => words.clone(),
                }))
            ),
            _ => written(),
        },
        CheckKind::Creep(figure) => match facts {
            Facts::Creep {
                limit,
                growth,
                warn_only,
                since,
                steps,
                branch,
                window_days,
            } => creep(
                check,
                figure.as_str(),
                (*limit, *growth, *warn_only),
                since,
                *steps,
                (branch.as_deref(), *window_days),
            ),
            _ => written(),
        },
        CheckKind::Step(figure) => match facts {
            Facts::Step {
                level_bytes,
                runs,
                noise_bytes,
                branch,
            } => {
                let now = check
                    .figure_bytes
                    .map_or("?".to_string(), |b| Bytes(b).to_string());
                let change = check
                    .figure_bytes
                    .filter(|_| *level_bytes > 0)
                    .map(|b| (b as f64 - *level_bytes as f64) / *level_bytes as f64 * 100.0)
                    .unwrap_or(0.0);
                let on = branch
                    .as_deref()
                    .map(|b| format!(" on {b}"))
                    .unwrap_or_default();
                format!(
                    "{} peak {now} stepped {change:+.1}% from {}, the level of the {runs} run(s) before it{on} (a step is a change of more than {}, this series' noise)",
                    figure.as_str(),
                    Bytes(*level_bytes),
                    Bytes(*noise_bytes)
                )
            }
            _ => written(),
        },
    }
}

/// `creep.<figure>`'s sentence: the figure, its growth over the
/// ratchet, what set the ratchet, the limit.
fn creep(
    check: &Check,
    figure: &str,
    (limit, growth, warn_only): (f64, f64, bool),
    since: &crate::results::HistoryMark,
    steps: u32,
    (branch, window_days): (Option<&str>, u32),
) -> String {
    use crate::results::HistoryMark;
    let now = check
        .figure_bytes
        .map_or("?".to_string(), |b| Bytes(b).to_string());
    let ratchet = check
        .limit_bytes
        .map_or("?".to_string(), |b| Bytes(b).to_string());
    let on = branch.map(|b| format!(" on {b}")).unwrap_or_default();
    let set_by = match since {
        HistoryMark::Run {
            started_at, commit, ..
        } => {
            let day = started_at.get(..10).unwrap_or(started_at);
            let commit = commit
                .as_deref()
                .map(|c| format!(", commit {}", c.get(..10).unwrap_or(c)))
                .unwrap_or_default();
            format!(
                "the lowest level of the runs that passed{on} in {window_days} days, since {day}{commit}"
            )
        }
        HistoryMark::Accepted {
            accepted_at,
            by,
            reason,
        } => {
            let day = accepted_at.get(..10).unwrap_or(accepted_at);
            format!("accepted{on} on {day} by {by}: \"{reason}\"")
        }
    };
    let steps = match steps {
        0 => String::new(),
        1 => "; 1 step since".to_string(),
        n => format!("; {n} steps since"),
    };
    let verb = if growth > limit { "grew" } else { "is" };
    let mut message = format!(
        "{figure} peak {now} {verb} {:+.1}% over its ratchet {ratchet} ({set_by}{steps}); creep limit {}",
        growth * 100.0,
        percent_of(limit)
    );
    if growth > limit && warn_only {
        message.push_str(", a warning only (creep action \"warn\")");
    }
    message
}

/// `10%`, `2.5%`.
pub fn percent_of(fraction: f64) -> String {
    let percent = fraction * 100.0;
    if (percent - percent.round()).abs() < 1e-9 {
        format!("{percent:.0}%")
    } else {
        format!("{percent:.1}%")
    }
}

/// A budget's sentence, by its kind. Every kind has its words here: a
/// kind added to `BudgetKind` does not compile until it has them.
fn budget_message(kind: BudgetKind, check: &Check, outcome: CheckOutcome, facts: &Facts) -> String {
    match (kind, facts) {
        (BudgetKind::Host, Facts::Budget { method, .. }) => {
            let method = measured(method);
            budget("host", outcome, check, &format!(" ({method})"))
        }
        (
            BudgetKind::Gpu,
            Facts::Budget {
                method,
                left_out,
                whole_bytes,
            },
        ) => {
            let method = measured(method);
            match (outcome, left_out.as_ref().map(left_out_words)) {
                (CheckOutcome::NotGated, Some(left_out)) => format!(
                    "gpu peak {} ({method}) not gated against budget {}: {left_out}, whose memory may be in it",
                    shown(whole_bytes.or(check.figure_bytes)),
                    shown(check.limit_bytes)
                ),
                (_, Some(left_out)) => budget(
                    "gpu",
                    outcome,
                    check,
                    &format!(" ({method}, without {left_out}: not gated)"),
                ),
                (_, None) => budget("gpu", outcome, check, &format!(" ({method})")),
            }
        }
        (BudgetKind::GpuRank, Facts::Budget { method, .. }) => {
            let method = measured(method);
            budget("gpu rank", outcome, check, &format!(" ({method})"))
        }
        // Its figure and limit say it all.
        (BudgetKind::GpuLeft, _) => gpu_left(check, outcome),
        (BudgetKind::GpuOutsideAllocator, Facts::Budget { method, .. }) => match check.figure_bytes
        {
            Some(_) => budget(
                "gpu memory outside the allocator",
                outcome,
                check,
                &format!(" ({})", measured(method)),
            ),
            None => format!(
                "gpu memory outside the allocator is unknown: no probe step reported the allocator's `reserved` while NVML listed the case's processes, so budget {} is unverified (oomgate_probe.step() in the workload reports it)",
                shown(check.limit_bytes)
            ),
        },
        (
            BudgetKind::GpuFraction,
            Facts::Headroom {
                device,
                method,
                taint,
                total_bytes,
                reserved_bytes,
                fraction,
            },
        ) => headroom(
            check,
            outcome,
            (
                &device_words(device),
                *method,
                taint.as_ref().map(taint_words),
            ),
            (*total_bytes, *reserved_bytes),
            *fraction,
        ),
        // Facts of another kind: the words it came with.
        (
            BudgetKind::Host
            | BudgetKind::Gpu
            | BudgetKind::GpuRank
            | BudgetKind::GpuFraction
            | BudgetKind::GpuOutsideAllocator,
            _,
        ) => check.message.clone(),
    }
}

/// `metric.tokens_per_s = 1200 breaks limit >= 1500`
fn limit(key: &str, text: &str, value: Option<f64>, bytes: bool, outcome: CheckOutcome) -> String {
    let shown = |value: f64| {
        if bytes {
            Bytes(value as u64).to_string()
        } else {
            format_figure(value)
        }
    };
    match (value, outcome) {
        (Some(value), CheckOutcome::Within) => {
            format!("{key} = {} within limit {text}", shown(value))
        }
        (Some(value), _) => format!("{key} = {} breaks limit {text}", shown(value)),
        (None, _) => {
            format!("{key} was not reported by the workload, so limit {text} is unverified")
        }
    }
}

/// How a budget's figure was measured: `vmhwm, cgroup-v1`,
/// `sampled@50ms`, `rank 3 on GPU 2,3`; a schema-4 file's words as they
/// are.
fn measured(method: &OrWritten<Measured>) -> Cow<'_, str> {
    let measured = match method {
        OrWritten::Written(words) => return Cow::Borrowed(words),
        OrWritten::Data(measured) => measured,
    };
    Cow::Owned(match measured {
        Measured::Host {
            floor: Some(floor),
            method,
        } => format!("{}, {method}", floor.as_str()),
        Measured::Host { floor: None, method } => method.to_string(),
        Measured::Gpu {
            method: Some(method),
        } => method.to_string(),
        Measured::Gpu { method: None } => "GPU memory was not measured".to_string(),
        Measured::OutsideAllocator { moments } => {
            format!("NVML per process less the allocator's reserved, at {moments} moment(s)")
        }
        Measured::Rank {
            rank: Some(rank),
            devices,
        } => match devices.as_slice() {
            [] => format!("rank {rank}"),
            devices => format!(
                "rank {rank} on GPU {}",
                devices
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        },
        Measured::Rank { rank: None, .. } => "no rank was seen: no process of the case has RANK, LOCAL_RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID".to_string(),
        Measured::AfterCase => "after the case".to_string(),
    })
}

/// The devices left out of a judged GPU figure: `GPU 0 tainted by pid
/// 4242 (sleep); GPU 2 tainted by pid 77`.
fn left_out_words(left_out: &OrWritten<Vec<TaintedDevice>>) -> String {
    match left_out {
        OrWritten::Written(words) => words.clone(),
        OrWritten::Data(devices) => devices
            .iter()
            .map(|device| format!("GPU {} {}", device.index, tainted_by(&device.by)))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// `GPU 0 (NVIDIA H100 80GB HBM3)`.
fn device_words(device: &OrWritten<Device>) -> String {
    match device {
        OrWritten::Written(words) => words.clone(),
        OrWritten::Data(device) => format!("GPU {} ({})", device.index, device.name),
    }
}

fn taint_words(taint: &OrWritten<Vec<ForeignPid>>) -> String {
    match taint {
        OrWritten::Written(words) => words.clone(),
        OrWritten::Data(pids) => tainted_by(pids),
    }
}

/// `tainted by pid 4242 (sleep), pid 4243`: why a device-delta figure is
/// not gated.
pub fn tainted_by(pids: &[ForeignPid]) -> String {
    let pids: Vec<String> = pids.iter().map(ToString::to_string).collect();
    format!("tainted by {}", pids.join(", "))
}

/// `leak: allocated memory grows 8.00 MiB per iteration over ...`; `what`:
/// a schema-4 file's words for the figure.
fn leak(check: &Check, what: Option<&str>, figures: Option<&LeakFigures>, warmup: u32) -> String {
    match figures {
        Some(figures) => {
            let what = what.unwrap_or(if figures.of_probe_steps() {
                "allocated memory"
            } else {
                "the peak"
            });
            let max = shown(check.limit_bytes);
            let trend = leak_trend(figures);
            if check.passed {
                format!("no leak: {what} {trend}, within {max}")
            } else {
                format!("leak: {what} {trend}, more than the {max} allowed")
            }
        }
        None => format!(
            "leak not checked: fewer than 3 iterations after a warm-up of {warmup}, from probe steps or soak runs"
        ),
    }
}

/// `grows 8.00 MiB per iteration over 27 probe steps (forward) after
/// warm-up: 208.0 MiB (Theil–Sen slope)`
pub fn leak_trend(figures: &LeakFigures) -> String {
    let per = Bytes(figures.slope_bytes_per_iteration.abs() as u64);
    let total = Bytes(figures.growth_bytes.abs() as u64);
    let verb = if figures.slope_bytes_per_iteration >= 0.0 {
        "grows"
    } else {
        "shrinks"
    };
    let iterations = match &figures.source {
        OrWritten::Written(words) => words.clone(),
        OrWritten::Data(LeakSource::ProbeSteps { phase: Some(phase) }) => {
            format!("probe steps ({phase})")
        }
        OrWritten::Data(LeakSource::ProbeSteps { phase: None }) => "probe steps".to_string(),
        OrWritten::Data(LeakSource::SoakRuns) => "soak runs".to_string(),
    };
    format!(
        "{verb} {per} per iteration over {} {iterations} after warm-up: {total} (Theil–Sen slope)",
        figures.iterations
    )
}

/// `capacity regressed: batch 296 → 248 (capacity_tolerance ...)`;
/// `None` for facts that are not a capacity's.
fn capacity(facts: &Facts, outcome: CheckOutcome) -> Option<String> {
    let Facts::Capacity {
        param,
        value,
        complete,
        probes,
        locked,
        least_accepted,
        tolerance,
        lock_counts,
        counts,
        required,
    } = facts
    else {
        return None;
    };
    let found = match (value, complete) {
        (Some(value), true) => value.to_string(),
        (Some(value), false) => format!(">= {value} (the search was cut short)"),
        (None, _) => "none".to_string(),
    };
    Some(match (outcome, value, locked) {
        (CheckOutcome::NotCompared, _, _) => format!(
            "capacity not compared: the lock's counts {}, this search {}; lock again to gate it",
            lock_counts.as_deref().unwrap_or("something else"),
            counts.as_deref().unwrap_or(param)
        ),
        (_, None, _) => format!(
            "no {param} fits: the smallest probed failed ({})",
            plural(*probes, "probe")
        ),
        (CheckOutcome::Breached, Some(_), Some(locked)) => format!(
            "capacity regressed: {param} {locked} → {found} (capacity_tolerance {tolerance} accepts {} and up)",
            least_accepted.unwrap_or(*locked)
        ),
        (CheckOutcome::Improved, Some(_), Some(locked)) => {
            format!("capacity grew: {param} {locked} → {found}; re-lock to keep it")
        }
        (_, Some(value), Some(locked)) if value < locked => {
            format!("capacity {param} {locked} → {found}, within capacity_tolerance {tolerance}")
        }
        (_, Some(value), Some(locked)) if value > locked => {
            format!("capacity {param} {found}, at least the locked {locked}")
        }
        (_, Some(_), Some(_)) => format!("capacity {param} {found}, as locked"),
        (_, Some(_), None) if *required => {
            "no locked capacity to compare with (--require-baseline)".to_string()
        }
        (_, Some(_), None) => "no locked capacity to compare with".to_string(),
    })
}

/// The order `oomgate list` names a case's budgets in.
const LISTED_IN_ORDER: [BudgetKind; BudgetKind::COUNT] = BudgetKind::every_once([
    BudgetKind::Host,
    BudgetKind::Gpu,
    BudgetKind::GpuRank,
    BudgetKind::GpuFraction,
    BudgetKind::GpuLeft,
    BudgetKind::GpuOutsideAllocator,
]);

/// `oomgate list`'s words for the budgets set: `budget host 512.0 MiB`,
/// `gpu headroom 90%`; for a load client's (`client`), listed after the
/// word `budget`, without it: `host 512.0 MiB`.
pub fn budget_settings(budget: &Budget, client: bool) -> Vec<String> {
    let prefix = if client { "" } else { "budget " };
    LISTED_IN_ORDER
        .into_iter()
        .filter_map(|kind| {
            let value = budget.get(kind)?;
            let size = match value {
                BudgetValue::Size(bytes) => bytes.to_string(),
                BudgetValue::Share(share) => format!("{:.0}%", share * 100.0),
            };
            Some(match kind {
                BudgetKind::Host
                | BudgetKind::Gpu
                | BudgetKind::GpuRank
                | BudgetKind::GpuLeft
                | BudgetKind::GpuOutsideAllocator => format!("{prefix}{} {size}", kind.key()),
                BudgetKind::GpuFraction => format!("gpu headroom {size}"),
            })
        })
        .collect()
}

fn shown(bytes: Option<u64>) -> String {
    bytes.map_or("unknown".to_string(), |b| Bytes(b).to_string())
}

fn plural(count: usize, what: &str) -> String {
    match count {
        1 => format!("1 {what}"),
        n => format!("{n} {what}s"),
    }
}

/// `host peak 612.0 MiB (vmhwm, cgroup-v1) exceeded budget 512.0 MiB (by 100.0 MiB)`
fn budget(what: &str, outcome: CheckOutcome, check: &Check, how: &str) -> String {
    let limit = shown(check.limit_bytes);
    match (check.figure_bytes, outcome) {
        (Some(peak), CheckOutcome::Breached) => format!(
            "{what} peak {}{how} exceeded budget {limit} (by {})",
            Bytes(peak),
            Bytes(peak.saturating_sub(check.limit_bytes.unwrap_or(0)))
        ),
        (Some(peak), _) => format!("{what} peak {}{how} within budget {limit}", Bytes(peak)),
        (None, _) => {
            format!("{what} memory could not be measured, so budget {limit} is unverified")
        }
    }
}

/// `gpu memory not given back after the case 2.00 GiB (…) exceeded budget 64.0 MiB (by …)`
fn gpu_left(check: &Check, outcome: CheckOutcome) -> String {
    let limit = shown(check.limit_bytes);
    let what = "gpu memory not given back after the case";
    let how = "above its GPUs' idle level once its processes were gone";
    match (check.figure_bytes, outcome) {
        (Some(left), CheckOutcome::Breached) => format!(
            "{what} {} ({how}) exceeded budget {limit} (by {})",
            Bytes(left),
            Bytes(left.saturating_sub(check.limit_bytes.unwrap_or(0)))
        ),
        (Some(left), _) => format!("{what} {} ({how}) within budget {limit}", Bytes(left)),
        (None, _) => format!(
            "the GPU memory left after the case could not be measured (no GPU, or GPUs other cases share), so budget {limit} is unverified"
        ),
    }
}

/// `(device, method, taint)`, `(total, reserved)`.
fn headroom(
    check: &Check,
    outcome: CheckOutcome,
    (device, method, taint): (&str, GpuMethod, Option<String>),
    (total_bytes, reserved_bytes): (u64, Option<u64>),
    fraction: f64,
) -> String {
    let usable = total_bytes.saturating_sub(reserved_bytes.unwrap_or(0));
    // `80.0 GiB`, or `79.4 GiB usable (80.0 GiB less 0.6 GiB the driver
    // reserves)`: the share is of what processes can have.
    let total = match reserved_bytes.filter(|&r| r > 0) {
        Some(reserved) => format!(
            "{} usable ({} less {} the driver reserves)",
            Bytes(usable),
            Bytes(total_bytes),
            Bytes(reserved)
        ),
        None => Bytes(total_bytes).to_string(),
    };
    let share = |bytes: u64| 100.0 * bytes as f64 / usable.max(1) as f64;
    let percent = fraction * 100.0;
    match (check.figure_bytes, outcome) {
        (None, _) => format!(
            "{device} memory could not be measured, so the {percent:.0}% headroom is unverified"
        ),
        (Some(peak), CheckOutcome::NotGated) => format!(
            "{device} peak {} ({method}) is {:.1}% of its {total}, not gated against the {percent:.0}% headroom limit: {}, whose memory may be in it",
            Bytes(peak),
            share(peak),
            taint.as_deref().unwrap_or("another process was on it")
        ),
        (Some(peak), CheckOutcome::Breached) => format!(
            "{device} peak {} ({method}) is {:.1}% of its {total}, above the {percent:.0}% headroom limit ({})",
            Bytes(peak),
            share(peak),
            shown(check.limit_bytes)
        ),
        (Some(peak), _) => format!(
            "{device} peak {} ({method}) is {:.1}% of its {total}, within {percent:.0}%",
            Bytes(peak),
            share(peak)
        ),
    }
}

/// GPU memory outside the allocator, as a case's details show it:
/// `outside:     9.30 GiB outside the allocator at the GPU peak (NVML
/// 50.3 GiB less reserved 41.0 GiB; largest 9.50 GiB), 1.20 GiB
/// reserved and not allocated`.
pub fn outside_line(label: &str, outside: &crate::measure::outside::Outside) -> String {
    let fragmentation = outside
        .fragmentation_bytes
        .map(|b| format!(", {} reserved and not allocated", Bytes(b)))
        .unwrap_or_default();
    format!(
        "{label} {} outside the allocator at the GPU peak (NVML {} less reserved {}; largest {}){fragmentation}",
        Bytes(outside.bytes),
        Bytes(outside.gpu_bytes),
        Bytes(outside.reserved_bytes),
        Bytes(outside.peak_bytes)
    )
}

/// Each parity's sentence, from its figures: once, at the output.
pub fn word_parities(parities: &mut [crate::results::ParityResult]) {
    for parity in parities {
        parity.message = parity_message(parity);
    }
}

/// A parity's figure in its unit: a size, seconds, or the number.
pub fn parity_figure(figure: &str, value: f64) -> String {
    use crate::suite::{ParityFigure, ParityUnit};
    match ParityFigure::parse(figure).map(|f| f.unit()) {
        Some(ParityUnit::Bytes) => {
            let shown = Bytes(value.abs().round() as u64).to_string();
            if value < 0.0 {
                format!("-{shown}")
            } else {
                shown
            }
        }
        Some(ParityUnit::Seconds) => format!("{value:.1}s"),
        _ => output_number(value),
    }
}

/// `train-offload gpu_peak 6.20 GiB is not <= 4.80 GiB (0.6 × train's
/// 8.00 GiB; lhs <= 0.6 * rhs): 77.5% of train's`
pub fn parity_message(parity: &crate::results::ParityResult) -> String {
    use crate::results::ParityOutcome;
    let show = |value: f64| parity_figure(&parity.figure, value);
    let missing = parity.missing.as_deref().map(crate::clean::line);
    match (
        parity.outcome,
        parity.lhs_value,
        parity.rhs_value,
        parity.bound,
    ) {
        (ParityOutcome::NotJudged, ..) => format!(
            "not judged: {}; `oomgate merge` judges it once both sides are in",
            missing.unwrap_or_default()
        ),
        (ParityOutcome::Unknown, ..) => format!(
            "cannot be verified: {} (rule `{}`)",
            missing.unwrap_or_default(),
            crate::clean::line(&parity.rule)
        ),
        (outcome, Some(lhs), Some(rhs), Some(bound)) => {
            let op = crate::suite::Parity::read(
                &parity.name,
                &parity.lhs,
                &parity.rhs,
                &parity.figure,
                &parity.rule,
            )
            .map_or("?", |p| p.rule.op.as_str());
            let ratio = if rhs != 0.0 {
                format!(": {:.1}% of {}'s", lhs / rhs * 100.0, parity.rhs)
            } else {
                String::new()
            };
            let verb = if outcome == ParityOutcome::Held {
                ""
            } else {
                "is not "
            };
            format!(
                "{} {} {} {verb}{op} {} ({}'s {}; {}){ratio}",
                parity.lhs,
                parity.figure,
                show(lhs),
                show(bound),
                parity.rhs,
                show(rhs),
                crate::clean::line(&parity.rule)
            )
        }
        _ => format!(
            "cannot be verified (rule `{}`)",
            crate::clean::line(&parity.rule)
        ),
    }
}

/// A number the logs printed, as a case's details show it: `output:
/// kv_tokens = 1,489,281 (last of 3 lines, at cases/c/stderr.log:12)`.
pub fn output_line(output: &crate::measure::output::OutputFigure) -> String {
    let name = crate::clean::line(&output.name);
    let mut text = match output.value {
        Some(value) => format!(
            "output:      {name} = {} ({} of {} line(s) matched{})",
            output_number(value),
            output.pick.as_str(),
            output.matches,
            output
                .at
                .as_deref()
                .map(|at| format!(", at {}", crate::clean::line(at)))
                .unwrap_or_default()
        ),
        None if output.matches > 0 => format!(
            "output:      {name} unknown: {} line(s) matched, none with a number in the capture group",
            output.matches
        ),
        None => format!("output:      {name} unknown: no line of the logs matched its regex"),
    };
    if output.unreadable > 0 && output.value.is_some() {
        text.push_str(&format!("; {} without a number", output.unreadable));
    }
    if let Some(error) = &output.error {
        text.push_str(&format!("; {}", crate::clean::line(error)));
    }
    text
}

/// A number from the logs as a reader writes it: its whole part grouped
/// by thousands (`1,489,281`, `1,474,388.19`), the rest as printed.
pub fn output_number(value: f64) -> String {
    if !value.is_finite() || value.abs() >= 1e15 {
        return format!("{value:e}");
    }
    let text = format!("{value}");
    let (sign, unsigned) = match text.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", text.as_str()),
    };
    let (whole, fraction) = match unsigned.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (unsigned, None),
    };
    let mut grouped = String::from(sign);
    for (at, digit) in whole.chars().enumerate() {
        if at > 0 && (whole.len() - at) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if let Some(fraction) = fraction {
        grouped.push('.');
        grouped.push_str(fraction);
    }
    grouped
}

/// `output.kv_tokens 1,135,957 < 1,474,388 accepted (locked 1,489,281,
/// −23.7%; higher is better, tolerance 1%), printed at
/// cases/serve/server.stderr.log:42`
fn output_message(name: &str, outcome: CheckOutcome, facts: &Facts) -> String {
    let Facts::Output {
        value,
        matches,
        at,
        locked,
        bound,
        better,
        tolerance,
        not_compared,
        required,
    } = facts
    else {
        return String::new();
    };
    let figure = format!("output.{name}");
    let tolerance = percent_of(*tolerance);
    let printed = at
        .as_deref()
        .map(|at| format!(", printed at {}", crate::clean::line(at)))
        .unwrap_or_default();
    let change = |value: f64, locked: f64| -> String {
        if locked == 0.0 {
            return String::new();
        }
        let ratio = (value - locked) / locked.abs() * 100.0;
        format!(
            ", {}{:.1}%",
            if ratio >= 0.0 { "+" } else { "−" },
            ratio.abs()
        )
    };
    let Some(value) = value else {
        let seen = match matches {
            0 => "no line matched its regex".to_string(),
            n => format!("{n} line(s) matched its regex, none with a number in its capture group"),
        };
        return match locked {
            Some(locked) => format!(
                "{figure} was not printed: {seen}; locked {}: the gate cannot be verified (look at the case's logs: did the workload get as far?)",
                output_number(*locked)
            ),
            None => format!("{figure} was not printed: {seen}; none locked either"),
        };
    };
    let shown = output_number(*value);
    let require = if *required {
        " (--require-baseline)"
    } else {
        ""
    };
    let (Some(locked), Some(bound)) = (locked, bound) else {
        return format!(
            "{figure} {shown}: none locked; `oomgate lock` to gate it{require}{printed}"
        );
    };
    let direction = match better {
        crate::suite::Better::Higher => "higher is better",
        crate::suite::Better::Lower => "lower is better",
    };
    let against = format!(
        "locked {}{}; {direction}, tolerance {tolerance}",
        output_number(*locked),
        change(*value, *locked)
    );
    let moved = |words: String| match not_compared {
        Some(NotCompared::CapacityMoved {
            param,
            locked,
            value,
        }) => format!(
            "{words} (not gated: the capacity moved, {param} {locked} → {value}, so it is of another size; lock again to compare it)"
        ),
        _ => words,
    };
    let (sign, accepted) = match better {
        crate::suite::Better::Higher => ("<", "least accepted"),
        crate::suite::Better::Lower => (">", "most accepted"),
    };
    match outcome {
        CheckOutcome::Breached => format!(
            "{figure} {shown} {sign} {} {accepted} ({against}){printed}",
            output_number(*bound)
        ),
        CheckOutcome::Improved => moved(format!(
            "{figure} {shown} improved on the baseline ({against}): re-lock to tighten the gate"
        )),
        CheckOutcome::NotGated => {
            moved(format!("{figure} {shown} against the baseline ({against})"))
        }
        _ => format!("{figure} {shown} within the baseline ({against})"),
    }
}

/// `gpu peak 41.2 GiB > baseline 38.0 GiB (+8.4%, tolerance 5% + 64.0 MiB)`
fn baseline_figure(
    check: &Check,
    what: &str,
    outcome: CheckOutcome,
    not_compared: Option<&NotCompared>,
    required: bool,
    (spread, floor_breach, anon_within): (
        Option<&SpreadBound>,
        Option<FloorBreach>,
        Option<AnonWithin>,
    ),
) -> String {
    let require = if required {
        " (--require-baseline)"
    } else {
        ""
    };
    let new = check.figure_bytes.map(Bytes);
    let base = check.baseline_bytes.map(Bytes);
    if let Some(why) = not_compared {
        let reason = match why {
            NotCompared::HostMethod { locked, now } => format!(
                "host peak not comparable: locked as measured by {locked}, measured by {now} now; re-lock (oomgate lock) to gate it again"
            ),
            NotCompared::HostSource { locked, now } => format!(
                "host peak not compared: locked as {locked} ({}), which this run did not observe{}; re-lock (oomgate lock) to gate it on this run's definition",
                locked.describe(),
                now.map(|now| format!(" (its figure is {now})"))
                    .unwrap_or_default()
            ),
            NotCompared::GpuMethod { locked, now } => format!(
                "{what} peak not comparable: locked as measured by {locked}, measured by {now} now (torch's allocator in a shared pytest session, NVML in a process of its own: the CUDA context is in one only); re-lock (oomgate lock) to gate it again"
            ),
            // The GPU peak's reasons, which the memory outside the
            // allocator shares (it is compared only where the peak is).
            NotCompared::GpuModels => format!(
                "{what} peak not compared: the GPU models differ from the baseline's (use --compare-across-gpus to compare anyway)"
            ),
            NotCompared::Tainted => format!(
                "{what} peak not compared: it is a device delta taken while another process was on the GPU, whose memory may be in it"
            ),
            NotCompared::NotInLock => format!(
                "{what} peak not compared: the later lock has none (not measured, or not the case's own when it was locked)"
            ),
            NotCompared::CapacityMoved {
                param,
                locked,
                value,
            } => {
                // Worded as the comparison it would have been.
                let over = check
                    .figure_bytes
                    .zip(check.limit_bytes)
                    .is_some_and(|(new, limit)| new > limit);
                let compared = Check {
                    facts: Some(Facts::Baseline {
                        not_compared: None,
                        required: false,
                        spread: spread.copied(),
                        floor_breach,
                        anon_within,
                    }),
                    outcome: Some(if over {
                        CheckOutcome::Breached
                    } else {
                        CheckOutcome::Improved
                    }),
                    ..check.clone()
                };
                let words = check_message(&compared);
                let words = words
                    .strip_suffix(": re-lock to tighten the gate")
                    .unwrap_or(&words);
                return format!(
                    "{words} (not gated: the capacity moved, {param} {locked} → {value}, so the peaks are of another size; lock again to compare them)"
                );
            }
        };
        return format!("{reason}{require}");
    }
    let (new, base) = match (new, base) {
        (Some(new), Some(base)) => (new, base),
        (None, Some(base)) => {
            return format!(
                "{what} peak unknown this run (baseline {base}): the regression gate cannot be verified"
            );
        }
        (_, None) => return format!("{what} peak: no baseline in the lock{require}"),
    };
    let change = match check.delta_ratio() {
        Some(ratio) => signed_percent(ratio),
        None => format!("+{new} from zero"),
    };
    let tolerance = check
        .tolerance
        .map_or_else(|| "none".to_string(), |t| describe_tolerance(t.into()));
    // Which bound applied, when the lock has a spread.
    let tolerance = match spread {
        Some(spread) => {
            let by_spread = format!(
                "{} × the locked spread of {}",
                spread.k,
                Bytes(spread.spread_bytes)
            );
            if spread.applied {
                format!("{by_spread}, wider than {tolerance}")
            } else {
                format!("{tolerance}, wider than {by_spread}")
            }
        }
        None => tolerance,
    };
    let what = format!("{what} peak");
    let over = check
        .figure_bytes
        .zip(check.limit_bytes)
        .is_some_and(|(new, limit)| new > limit);
    // A floor that grew past its bound, where the gated figure did not.
    let floor = floor_breach.filter(|_| !over).map(|breach| {
        let ratio = (breach.locked_bytes > 0).then(|| {
            (breach.now_bytes as f64 - breach.locked_bytes as f64) / breach.locked_bytes as f64
        });
        format!(
            "its floor {} ({}) grew {} → {} ({}, beyond {})",
            breach.floor,
            breach.floor.describe(),
            Bytes(breach.locked_bytes),
            Bytes(breach.now_bytes),
            ratio.map_or_else(
                || format!("+{} from zero", Bytes(breach.now_bytes)),
                signed_percent
            ),
            Bytes(breach.limit_bytes)
        )
    });
    // Every delta is worded beside the two figures it is computed from.
    if let Some(working) = anon_within {
        let grew = match (over, floor) {
            (true, _) => format!("{what} {new} vs baseline {base} ({change}, beyond {tolerance})"),
            (false, Some(floor)) => {
                format!("{what} {new} vs baseline {base} ({change}), but {floor},")
            }
            (false, None) => format!("{what} {new} vs baseline {base} ({change})"),
        };
        return format!(
            "{grew} in file pages only: its working memory, {} vs {}, is within its own tolerance, so what grew is what the page cache held, not a regression",
            Bytes(working.now_bytes),
            Bytes(working.locked_bytes)
        );
    }
    match (over, outcome, floor) {
        (true, _, _) => format!("{what} {new} > baseline {base} ({change}, tolerance {tolerance})"),
        (false, _, Some(floor)) => {
            format!("{what} {new} vs baseline {base} ({change}), but {floor}")
        }
        (false, CheckOutcome::Improved, None) => format!(
            "{what} {new} < baseline {base} ({change}, beyond tolerance {tolerance}): re-lock to tighten the gate"
        ),
        (false, _, None) => {
            format!("{what} {new} vs baseline {base} ({change}, within {tolerance})")
        }
    }
}

#[cfg(test)]
mod tests;

/// `a, b, c` of anything displayable.
fn joined_display<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items
        .into_iter()
        .map(|item| item.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `2 process(es) not started by oomgate already run on its GPUs: pid 7
/// (python3) on GPU 0 using 2.00 GiB, …; its GPU figures share the device
/// with them`.
pub fn foreign(processes: &[crate::measure::gpu::ForeignProcess]) -> String {
    format!(
        "{}; its GPU figures share the device with them",
        foreign_processes(processes)
    )
}

/// `2 process(es) not started by oomgate already run on its GPUs: pid 7
/// (python3) on GPU 0 using 2.00 GiB, …`.
fn foreign_processes(processes: &[crate::measure::gpu::ForeignProcess]) -> String {
    let list: Vec<String> = processes
        .iter()
        .map(|p| {
            let name = p
                .name
                .as_deref()
                .map_or(String::new(), |n| format!(" ({})", crate::clean::line(n)));
            let used = p
                .used_bytes
                .map_or("unknown memory".to_string(), |b| Bytes(b).to_string());
            format!("pid {}{name} on GPU {} using {used}", p.pid, p.device_index)
        })
        .collect();
    format!(
        "{} process(es) not started by oomgate already run on its GPUs: {}",
        processes.len(),
        list.join(", ")
    )
}

/// A warning a case's run gave, as the terminal's warnings show it (the
/// case's id before it, where it is of the case).
pub fn warning(case: &str, warning: &crate::record::Warning) -> String {
    use crate::record::Warning;
    let said = match warning {
        Warning::Selection(note) => selection_note(note),
        Warning::Unsettled(settle) => {
            unsettled(settle).unwrap_or_else(|| "its GPUs settled late".to_string())
        }
        Warning::Foreign(processes) => foreign(processes),
        Warning::Snapshot(note) => format!("memory snapshot: {note}"),
        Warning::Leftovers(count) => format!(
            "{count} process(es) were still running after the command exited; oomgate stopped them"
        ),
        Warning::Host { client, notes } => {
            let note = host_notes(notes).unwrap_or_default();
            match client {
                true => format!("load client: {note}"),
                false => note,
            }
        }
        Warning::Stuck(pids) => format!(
            "pid(s) {pids:?} did not exit even after SIGKILL (stuck in the kernel, e.g. a hung file system or GPU driver); oomgate leaves them"
        ),
        Warning::ForkserverSetAside { pid, traced, after } => {
            let how = match traced {
                true => "stopped under a tracer",
                false => "stopped by a signal",
            };
            let after = after.as_deref().map_or(String::new(), |last| {
                format!(" after it started `{last}`, whose processes could have done it")
            });
            return format!(
                "oomgate's fork server (pid {pid}) was {how} from outside oomgate{after}; it was killed, and from `{case}` on each supervisor is executed instead (about 1.5 ms more per launch)"
            );
        }
    };
    format!("{case}: {said}")
}

/// What a device's figure says of the case (`measure::gpu::DeviceNote`).
pub fn device_note(note: &crate::measure::gpu::DeviceNote) -> String {
    use crate::measure::gpu::DeviceNote;
    match note {
        DeviceNote::Crowded { jobs: None } => {
            "device-delta not used: another case ran on this GPU meanwhile (--pack)".to_string()
        }
        DeviceNote::Crowded { jobs: Some(jobs) } => format!(
            "device-delta not used: another case ran on this GPU meanwhile (--jobs {jobs} without a --gpus pool)"
        ),
        DeviceNote::ServersClient => "a device rise is its server's and its load client's together: it is not the client's alone".to_string(),
        DeviceNote::WithClient => "a device rise: it includes the load client's GPU memory, if the client holds any (per-process figures keep them apart)".to_string(),
        DeviceNote::SessionAllocator => "a test of a shared pytest session: the figure is what the test added to torch's allocator at its peak, as oomgate's plugin reported it from inside the session's process (max_memory_reserved and max_memory_allocated, reset at its start, less what the allocator held then; the CUDA context and memory outside torch are not in it); NVML's figure of the session (sampled) holds what the session kept from earlier tests".to_string(),
        DeviceNote::SessionUnreported => "a test of a shared pytest session: the session holds GPU memory, but torch's allocator reported none for this test (torch not imported, CUDA not initialised, or memory outside torch), so its figure is unknown; `isolate` it to measure it through NVML".to_string(),
        DeviceNote::Container { namespace } => format!(
            "in a container: oomgate runs in a pid namespace of its own ({namespace}): NVML reports the host's pids, which cannot be matched to the case's processes, so the figure is the device's rise during the case, including anyone else's"
        ),
    }
}

/// How a case's (or this shell's) `CUDA_VISIBLE_DEVICES` was read.
pub fn selection_note(note: &crate::measure::visible::SelectionNote) -> String {
    use crate::measure::visible::{SelectionNote, Unusable};
    const UNKNOWN: &str = "GPU figures are unknown, never the GPU's own, which hold every slice";
    match note {
        SelectionNote::MigFirstInstance { gpu, instance } => format!(
            "GPU {gpu} is in MIG mode: a CUDA process uses one MIG device, its first instance {instance}, which is what is measured"
        ),
        SelectionNote::MigUnopened { gpu, entry: None } => {
            format!("GPU {gpu} is in MIG mode and none of its instances could be opened: {UNKNOWN}")
        }
        SelectionNote::MigUnopened {
            entry: Some(entry), ..
        } => format!(
            "CUDA_VISIBLE_DEVICES entry `{entry}` is a GPU in MIG mode none of whose instances could be opened: {UNKNOWN}"
        ),
        SelectionNote::MigUnlisted { entry } => format!(
            "CUDA_VISIBLE_DEVICES entry `{entry}` is a MIG instance NVML does not list here (or oomgate could not open): GPU figures are unknown, never its GPU's, which hold every slice"
        ),
        SelectionNote::Repeated { position } => format!(
            "CUDA_VISIBLE_DEVICES lists device {position} twice; CUDA ignores it and every entry after it"
        ),
        SelectionNote::Ignored { entry, why } => {
            let why = match why {
                Unusable::NoDevice { count } => {
                    format!("names no usable device (there are {count})")
                }
                Unusable::NoUuid => "matches no device UUID".to_string(),
                Unusable::SeveralUuids => "matches several device UUIDs".to_string(),
                Unusable::Malformed => "is neither a device index nor a GPU UUID".to_string(),
            };
            format!(
                "CUDA_VISIBLE_DEVICES entry `{entry}` {why}; CUDA ignores it and every entry after it"
            )
        }
        SelectionNote::IndexOrder => "indices in CUDA_VISIBLE_DEVICES are matched in PCI bus order (as nvidia-smi); set CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA numbers devices the same way, or use GPU UUIDs".to_string(),
        SelectionNote::CudaUnlisted { uuid } => {
            format!("CUDA shows a device ({uuid}) NVML does not list here: GPU figures are unknown")
        }
        SelectionNote::CudaOrder { cuda, by_rules } => {
            let name = |uuids: &[String]| match uuids.is_empty() {
                true => "none".to_string(),
                false => uuids.join(", "),
            };
            format!(
                "CUDA shows the case {} (asked of libcuda); CUDA_VISIBLE_DEVICES read in PCI bus order would give {}: set CUDA_DEVICE_ORDER=PCI_BUS_ID or use UUIDs",
                name(cuda),
                name(by_rules)
            )
        }
    }
}

/// `GPU 0 still held 2.00 GiB above its idle level (pid 4242 (python3)) after
/// waiting 30.0s for it to settle; the case started anyway`, for a wait
/// that ran out; `None` when the GPUs settled.
pub fn unsettled(settle: &crate::measure::gpu::settle::Settle) -> Option<String> {
    use crate::measure::gpu::settle::SETTLED_WITHIN;
    if settle.settled {
        return None;
    }
    let held: Vec<String> = settle
        .devices
        .iter()
        .filter(|d| d.above_idle_bytes.is_some_and(|b| b > SETTLED_WITHIN))
        .map(|d| {
            let who = match d.held_by.is_empty() {
                true => "no process listed: memory the driver has not returned".to_string(),
                false => joined_display(&d.held_by),
            };
            format!(
                "GPU {} still held {} above its idle level ({who})",
                d.index,
                Bytes(d.above_idle_bytes.unwrap_or(0))
            )
        })
        .collect();
    let held = match held.is_empty() {
        true => "the GPUs were not read back to their idle level".to_string(),
        false => held.join("; "),
    };
    Some(format!(
        "{held} after waiting {:.1}s for it to settle; the case started anyway",
        settle.waited_s
    ))
}

/// A run's host notes, one sentence each, joined; `None` without any.
pub fn host_notes(notes: &[crate::measure::host::HostNote]) -> Option<String> {
    use crate::measure::host::HostNote;
    let said: Vec<String> = notes
        .iter()
        .map(|note| match note {
            HostNote::NoCgroup { client, error } => {
                let whose = match client {
                    true => "the load client's",
                    false => "the case's",
                };
                format!("cannot create {whose} memory cgroup ({error}); measured from /proc")
            }
            HostNote::NotJoined { instance, error } => {
                format!("{instance} could not join its memory cgroup ({error}); measured from /proc")
            }
            HostNote::SweptEvery {
                tree,
                gap,
                cpu_share,
            } => format!(
                "a tree of more than {tree} processes was swept for PSS and VmHWM only every {:.1} s, to keep the sweeps within {}% of a core: a plateau shorter than that may be missing from those floors",
                gap.as_secs_f64(),
                cpu_share * 100.0
            ),
            HostNote::CgroupNotRemoved { error } => {
                format!("the case cgroup could not be removed: {error}")
            }
            HostNote::HwmNotReset { pid, error } => format!(
                "the session's VmHWM could not be reset (/proc/{pid}/clear_refs: {error})"
            ),
            HostNote::ClientNotStarted {
                server_started: false,
            } => "never started: its server did not start".to_string(),
            HostNote::ClientNotStarted {
                server_started: true,
            } => "never started: its server was not ready".to_string(),
        })
        .collect();
    (!said.is_empty()).then(|| said.join("; "))
}
