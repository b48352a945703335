//! A case's limits, its keys over `[defaults]`: time (timeout, kill grace,
//! soak), instances, memory budgets, tolerances, repeats, probe limits,
//! leak and GPUs.
//!
//! [`Limits`] holds them; [`limits`] reads them for a case, or for
//! `[defaults]` alone. Budgets and probe limits merge key by key, unlike
//! every other key, whose case value replaces the default whole: a case
//! that tightens `budget.host` should not silently lose the suite's
//! `budget.gpu`.

use std::time::Duration;

use toml::Spanned;

use super::shared::pick;
use crate::suite::budget::{Budget, BudgetKind, BudgetValue, Takes};
use crate::suite::checker::Checker;
use crate::suite::model::{
    Creep, CreepAction, DEFAULT_CREEP_WINDOW, DEFAULT_KILL_GRACE, DEFAULT_SETTLE_TIMEOUT,
    DEFAULT_TIMEOUT, Leak, Limit, MAX_CASE_TIME, Tolerances,
};
use crate::suite::raw::{RawBudget, RawSettingsRef};
use crate::units::Bytes;

/// The time and memory limits of a case (or of `[defaults]` alone).
pub(super) struct Limits {
    pub(super) timeout: Option<Duration>,
    pub(super) kill_grace: Option<Duration>,
    pub(super) soak: Option<Duration>,
    pub(super) concurrency: u32,
    pub(super) budget: Budget,
    pub(super) tolerance: Tolerances,
    pub(super) repeat: u32,
    pub(super) limits: Vec<Limit>,
    pub(super) leak: Option<Leak>,
    pub(super) gpus: Option<u32>,
    pub(super) gpu_memory: Option<Bytes>,
    pub(super) settle_timeout: Duration,
    pub(super) sites_depth: u32,
    pub(super) creep: Option<Creep>,
}

/// The most user frames that may name an allocation site.
const MAX_SITES_DEPTH: u32 = 16;

/// Most GPUs a case may ask for: more than any machine has.
const MAX_CASE_GPUS: u32 = 64;

const MAX_KILL_GRACE: Duration = Duration::from_secs(3600);
/// The longest a case waits for its GPUs to settle.
const MAX_SETTLE: Duration = Duration::from_secs(3600);

pub(super) fn limits(
    check: &mut Checker,
    own: RawSettingsRef<'_>,
    defaults: RawSettingsRef<'_>,
    suite_tolerance: Tolerances,
) -> Limits {
    let timeout = match pick(own.timeout, defaults.timeout) {
        None => Some(DEFAULT_TIMEOUT),
        Some(text) => check
            .bounded_duration("timeout", text, MAX_CASE_TIME)
            .filter(|d| {
                let ok = !d.is_zero();
                if !ok {
                    check.error(text.span(), "`timeout` must be longer than zero");
                }
                ok
            }),
    };
    let kill_grace = match pick(own.kill_grace, defaults.kill_grace) {
        None => Some(DEFAULT_KILL_GRACE),
        Some(text) => check.bounded_duration("kill_grace", text, MAX_KILL_GRACE),
    };
    let soak = match pick(own.duration, defaults.duration) {
        None => None,
        Some(text) => {
            let soak = check.bounded_duration("duration", text, MAX_CASE_TIME);
            if let (Some(soak), Some(timeout)) = (soak, timeout) {
                if soak >= timeout {
                    check.error(
                        text.span(),
                        format!(
                            "`duration` ({}) must be shorter than `timeout` ({})",
                            text.get_ref(),
                            humantime::format_duration(timeout)
                        ),
                    )
                    .help = Some("the timeout covers the whole soak, including the last run started before `duration` ends".into());
                }
            }
            soak
        }
    };
    let concurrency = match pick(own.concurrency, defaults.concurrency) {
        None => 1,
        Some(n) => match u32::try_from(*n.get_ref()) {
            Ok(value) if (1..=1024).contains(&value) => value,
            _ => {
                check.error(
                    n.span(),
                    format!(
                        "`concurrency` must be between 1 and 1024, not {}",
                        n.get_ref()
                    ),
                );
                1
            }
        },
    };

    // Keys merge one by one: a case's budget.host does not drop a default budget.gpu.
    let budget = budget_keys(check, "budget", [defaults.budget, own.budget]);
    let tolerance = check.tolerance(suite_tolerance, defaults.tolerance);
    let tolerance = check.tolerance(tolerance, own.tolerance);
    let repeat = match pick(own.repeat, defaults.repeat) {
        None => 1,
        Some(n) => match u32::try_from(*n.get_ref()) {
            Ok(value) if (1..=100).contains(&value) => value,
            _ => {
                check.error(
                    n.span(),
                    format!("`repeat` must be between 1 and 100, not {}", n.get_ref()),
                );
                1
            }
        },
    };
    // Keys merge one by one: a case's limit replaces the default's for the
    // same key and keeps the others.
    let mut limits: Vec<Limit> = Vec::new();
    for raw in [defaults.limits, own.limits].into_iter().flatten() {
        for (key, value) in raw.get_ref() {
            if let Some(limit) = check.limit(key, value) {
                limits.retain(|l| l.key != limit.key);
                limits.push(limit);
            }
        }
    }
    let leak = pick(own.leak, defaults.leak).map(|raw| {
        let raw = raw.get_ref();
        let warmup = match &raw.warmup {
            None => 3,
            Some(n) => u32::try_from(*n.get_ref()).unwrap_or_else(|_| {
                check.error(
                    n.span(),
                    format!("`leak.warmup` must be 0 or more, not {}", n.get_ref()),
                );
                3
            }),
        };
        let max_growth = match &raw.max_growth {
            None => Bytes::from_mib(64),
            Some(value) => check
                .size("leak.max_growth", value)
                .unwrap_or(Bytes::from_mib(64)),
        };
        Leak { warmup, max_growth }
    });
    let gpus = pick(own.gpus, defaults.gpus).and_then(|n| match u32::try_from(*n.get_ref()) {
        Ok(value) if value <= MAX_CASE_GPUS => Some(value),
        _ => {
            check
                .error(
                    n.span(),
                    format!(
                        "`gpus` must be between 0 and {MAX_CASE_GPUS}, not {}",
                        n.get_ref()
                    ),
                )
                .help = Some(
                "whole GPUs the case needs from the pool (`--gpus`); 0 for a host-only case".into(),
            );
            None
        }
    });
    let gpu_memory =
        pick(own.gpu_memory, defaults.gpu_memory).and_then(|value| check.size("gpu_memory", value));
    if let (Some(0), Some(value)) = (gpus, pick(own.gpu_memory, defaults.gpu_memory)) {
        check.error(
            value.span(),
            "`gpu_memory` is set but `gpus = 0` gives the case no GPU",
        );
    }
    if gpus == Some(0) {
        let on_a_gpu = BudgetKind::ALL
            .into_iter()
            .filter(|kind| kind.needs_gpu() && budget.get(*kind).is_some());
        for kind in on_a_gpu {
            let span = pick(own.gpus, defaults.gpus)
                .map(|n| n.span())
                .unwrap_or_default();
            check.error(
                span,
                format!(
                    "`gpus = 0` gives the case no GPU, yet it has a `{}`",
                    kind.name()
                ),
            );
        }
    }
    let settle_timeout = match pick(own.settle_timeout, defaults.settle_timeout) {
        None => DEFAULT_SETTLE_TIMEOUT,
        Some(text) => check
            .bounded_duration("settle_timeout", text, MAX_SETTLE)
            .unwrap_or(DEFAULT_SETTLE_TIMEOUT),
    };
    let sites_depth = match pick(own.sites, defaults.sites).and_then(|s| s.get_ref().depth.as_ref())
    {
        None => crate::suite::model::DEFAULT_SITES_DEPTH,
        Some(n) => match u32::try_from(*n.get_ref()) {
            Ok(depth) if (1..=MAX_SITES_DEPTH).contains(&depth) => depth,
            _ => {
                check
                    .error(
                        n.span(),
                        format!(
                            "`sites.depth` must be between 1 and {MAX_SITES_DEPTH}, not {}",
                            n.get_ref()
                        ),
                    )
                    .help = Some(
                    "how many of the user's frames name an allocation site (docs/diagnosis.md)"
                        .into(),
                );
                crate::suite::model::DEFAULT_SITES_DEPTH
            }
        },
    };
    let creep = pick(own.creep, defaults.creep).and_then(|raw| creep(check, raw.get_ref()));
    Limits {
        creep,
        sites_depth,
        settle_timeout,
        timeout,
        kill_grace,
        soak,
        concurrency,
        budget,
        tolerance,
        repeat,
        limits,
        leak,
        gpus,
        gpu_memory,
    }
}

/// A budget's keys, later tables overriding earlier ones key by key.
/// `key` names the table (`budget`, `client_budget`).
pub(super) fn budget_keys<const N: usize>(
    check: &mut Checker,
    key: &str,
    tables: [Option<&Spanned<RawBudget>>; N],
) -> Budget {
    let mut budget = Budget::default();
    for raw_budget in tables.into_iter().flatten() {
        for kind in BudgetKind::ALL {
            let Some(value) = raw_budget.get_ref().get(kind) else {
                continue;
            };
            if let Some(why) = kind.not_for_a_client().filter(|_| key == "client_budget") {
                check.error(value.span(), why);
                continue;
            }
            let name = format!("{key}.{}", kind.key());
            let value = match kind.takes() {
                Takes::Size => check.size(&name, value).map(BudgetValue::Size),
                Takes::Share => check.fraction(&name, value).map(BudgetValue::Share),
            };
            budget.set(kind, value);
        }
    }
    budget
}

/// The longest creep window: a ratchet older than this says little.
const MAX_CREEP_WINDOW: Duration = Duration::from_secs(5 * 365 * 24 * 3600);

/// `creep = { limit, window, action }`, checked.
fn creep(check: &mut Checker, raw: &crate::suite::raw::RawCreep) -> Option<Creep> {
    let limit = check.relative("creep.limit", &raw.limit);
    if limit == Some(0.0) {
        check.error(
            raw.limit.span(),
            "`creep.limit` is 0: any growth at all would fail; give the growth allowed over the ratchet, e.g. \"10%\"",
        );
        return None;
    }
    let window = match &raw.window {
        None => DEFAULT_CREEP_WINDOW,
        Some(text) => check
            .bounded_duration("creep.window", text, MAX_CREEP_WINDOW)
            .unwrap_or(DEFAULT_CREEP_WINDOW),
    };
    let action = check.choice(
        "creep.action",
        raw.action.as_ref(),
        &[("fail", CreepAction::Fail), ("warn", CreepAction::Warn)],
    );
    Some(Creep {
        limit: limit?,
        window,
        action,
    })
}
