//! A case's definition as a run records it: one short hash per part of
//! it (its command, env, each budget, its tolerances, ...), so that
//! `oomgate merge --suite` can tell whether a part ran the case the suite
//! defines, and which part of it differs when it did not.
//!
//! The hashes are of what results.json already shows of the case: the
//! command with secret arguments masked, secret-named variables by their
//! recorded hash, params masked with the suite's secrets; the working
//! directory relative to the suite's workdir, so that shards checked out
//! in other folders agree. Nothing secret is hashed that results.json
//! does not already hold in a recorded form.

use std::collections::BTreeMap;
use std::path::Path;

use crate::redact;
use crate::suite::{Case, fnv1a};

/// The parts of a definition a merge judges again from the part's
/// figures when only they differ: budgets measured once for the whole run
/// (host, GPU, headroom, GPU left) and the probe's limits. The others —
/// what runs, how often, for how long, a rank's budget, the tolerances
/// against the baseline, the leak rule — cannot be judged again from
/// what a part recorded.
pub const JUDGED_AGAIN: [&str; 5] = [
    "budget.host",
    "budget.gpu",
    "budget.gpu_fraction",
    "budget.gpu_left",
    "limits",
];

/// The definition of `case` as results record it, `workdir` the suite's.
pub fn of(case: &Case, workdir: &Path) -> BTreeMap<String, String> {
    let mut parts: Vec<(&str, String)> = Vec::new();
    let joined = |items: Vec<String>| items.join("\u{0}");
    let env = |env: &indexmap::IndexMap<String, String>| {
        let sorted: BTreeMap<&String, String> = env
            .iter()
            .map(|(name, value)| (name, redact::env_value(name, value)))
            .collect();
        format!("{sorted:?}")
    };
    parts.push(("command", joined(redact::command(&case.command))));
    let cwd = case.cwd.strip_prefix(workdir).unwrap_or(&case.cwd);
    parts.push(("cwd", cwd.display().to_string()));
    parts.push(("env", env(&case.env)));
    let params: Vec<String> = case
        .params
        .iter()
        .map(|(name, value)| format!("{name}={}", redact::mask_suite(value)))
        .collect();
    parts.push(("params", joined(params)));
    parts.push((
        "server",
        match &case.server {
            Some(server) => format!(
                "{}\u{0}{}\u{0}{:?}\u{0}{:?}\u{0}{:?}",
                joined(redact::command(&server.command)),
                env(&server.templates.env),
                server.ready,
                server.ready_timeout,
                server.stop_signal
            ),
            None => String::new(),
        },
    ));
    parts.push(("concurrency", case.concurrency.to_string()));
    parts.push(("timeout", format!("{:?}", case.timeout)));
    parts.push(("soak", format!("{:?}", case.soak)));
    parts.push(("repeat", case.repeat.to_string()));
    parts.push(("gpus", format!("{:?}", case.gpus)));
    parts.push(("search", format!("{:?}", case.search)));
    parts.push(("pytest", format!("{:?}", case.pytest)));
    let budget = &case.budget;
    parts.push(("budget.host", format!("{:?}", budget.host)));
    parts.push(("budget.gpu", format!("{:?}", budget.gpu)));
    parts.push(("budget.gpu_fraction", format!("{:?}", budget.gpu_fraction)));
    parts.push(("budget.gpu_left", format!("{:?}", budget.gpu_left)));
    parts.push(("budget.gpu_rank", format!("{:?}", budget.gpu_rank)));
    parts.push(("client_budget", format!("{:?}", case.client_budget)));
    parts.push(("tolerance", format!("{:?}", case.tolerance)));
    let limits: Vec<String> = case
        .limits
        .iter()
        .map(|l| format!("{:?} {:?} {}", l.key, l.op, l.value))
        .collect();
    parts.push(("limits", joined(limits)));
    parts.push(("leak", format!("{:?}", case.leak)));
    parts
        .into_iter()
        .map(|(name, text)| (name.to_string(), format!("{:016x}", fnv1a(text.as_bytes()))))
        .collect()
}

/// The parts of two definitions that differ (one's part the other lacks
/// among them), in name order.
pub fn differences(ran: &BTreeMap<String, String>, now: &BTreeMap<String, String>) -> Vec<String> {
    let mut names: Vec<&String> = ran.keys().chain(now.keys()).collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .filter(|name| ran.get(*name) != now.get(*name))
        .cloned()
        .collect()
}
