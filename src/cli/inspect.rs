//! `oomgate check`, `list`, `gpus` and `diff`: commands that only read.

use std::fmt::Write as _;
use std::path::Path;

use super::args::{DiffArgs, GpusArgs, PlanArgs};
use super::shared::{CliError, Outcome, shard, write_stdout};
use crate::baseline::{self, Lock};
use crate::measure::nvml::Gpu;
use crate::suite::{Case, Suite, Tolerances, shell_join};
use crate::units::{Bytes, format_duration};

/// `oomgate check`: the expanded plan, in full.
pub fn check(args: &PlanArgs) -> Result<Outcome, CliError> {
    let suite = super::shared::load_collected(&args.suite, args.python.as_deref())?;
    let cases = shard(&suite, &args.filter, args.partition)?;
    write_stdout(&describe_plan(&suite, &cases));
    Ok(Outcome::Passed)
}

/// `oomgate list`: one id per line.
pub fn list(args: &PlanArgs) -> Result<Outcome, CliError> {
    let suite = super::shared::load_collected(&args.suite, args.python.as_deref())?;
    let ids: String = shard(&suite, &args.filter, args.partition)?
        .iter()
        .map(|case| format!("{}\n", case.id))
        .collect();
    write_stdout(&ids);
    Ok(Outcome::Passed)
}

/// `oomgate gpus`: what NVML sees, for people or (`--json`) machines.
pub fn gpus(args: &GpusArgs) -> Result<Outcome, CliError> {
    let mut gpu = match Gpu::open() {
        Ok(gpu) => gpu,
        Err(why) => {
            let why = format!("no GPU can be inspected: {why}");
            if args.json {
                let text = crate::report::inventory::render_json_unavailable(&why)
                    .map_err(|e| CliError::Infrastructure(e.to_string()))?;
                write_stdout(&text);
            }
            return Err(CliError::Infrastructure(why));
        }
    };
    let inventory = crate::measure::inventory::Inventory::read(&mut gpu);
    let text = if args.json {
        crate::report::inventory::render_json(&inventory)
            .map_err(|e| CliError::Infrastructure(e.to_string()))?
    } else {
        crate::report::inventory::render_text(&inventory)
    };
    write_stdout(&text);
    Ok(Outcome::Passed)
}

/// `oomgate diff A B`: two results or lock files, each case of B judged
/// against A as `oomgate run` judges it against its lock — the same
/// comparison, with the tolerances B's figures were judged with (recorded
/// in results.json and the lock), or `--suite`'s.
pub fn diff(args: &DiffArgs) -> Result<Outcome, CliError> {
    let before = read_side(&args.before)?;
    let after = read_side(&args.after)?;
    let suite = args
        .suite
        .as_deref()
        .map(|path| super::shared::load_suite(path, None))
        .transpose()?;
    let text = render_diff(&before, &after, suite.as_ref());
    write_stdout(&text.text);
    Ok(if text.failed {
        Outcome::CasesFailed
    } else {
        Outcome::Passed
    })
}

/// One side of a diff: a lock, or a results.json read as the lock it
/// would make (and, for the later side, as the figures its run judged).
pub struct Side {
    pub path: std::path::PathBuf,
    pub lock: Lock,
    /// The cases of a results.json (`None`: a lock file).
    pub results: Option<crate::results::RunResults>,
}

/// A results.json (any status) or a lock file.
fn read_side(path: &Path) -> Result<Side, CliError> {
    let text = crate::files::read_input(path, crate::files::MAX_RESULTS_BYTES, "a results file")
        .map_err(|e| CliError::BadInput(format!("cannot read {}: {e}", path.display())))?;
    let path_buf = path.to_path_buf();
    if text.trim_start().starts_with('{') {
        let view = crate::results::readback::parse(&text)
            .map_err(|why| CliError::BadInput(format!("{}: {why}", path.display())))?;
        return Ok(Side {
            path: path_buf,
            lock: crate::results::readback::lock_of(&view),
            results: Some(view),
        });
    }
    Ok(Side {
        path: path_buf,
        lock: baseline::parse(&text, path)?,
        results: None,
    })
}

/// What `diff` prints, and whether a case of the later side failed.
pub struct DiffText {
    pub text: String,
    pub failed: bool,
}

/// Where the tolerances a diff judged with came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum ToleranceSource {
    Suite,
    After,
    Before,
    Default,
}

/// Each case of `after` judged against `before`: the comparison table, a
/// line per check that failed, the environment's drift, and the
/// tolerances used.
pub fn render_diff(before: &Side, after: &Side, suite: Option<&Suite>) -> DiffText {
    let cases = diff_cases(before, after, suite);
    let with_capacity = cases.iter().any(|c| {
        [&c.before, &c.after]
            .into_iter()
            .flatten()
            .any(|entry| entry.capacity.is_some())
    });
    let mut header = vec![
        "CASE",
        "HOST BEFORE",
        "HOST AFTER",
        "HOST",
        "WORKING",
        "GPU BEFORE",
        "GPU AFTER",
        "GPU",
    ];
    if with_capacity {
        header.push("CAPACITY");
    }
    let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
    rows.extend(cases.iter().map(|case| case.row(with_capacity)));
    let mut failures: Vec<String> = cases.iter().flat_map(DiffCase::failure_lines).collect();
    let drift = baseline::drift::drift(&before.lock.environment, &after.lock.environment);
    // The drift policy the later run was judged with (`--suite`'s first):
    // under `on_drift = "fail"` a drifted environment fails, as in `run`.
    let policy = suite.map(|s| s.on_drift).unwrap_or_else(|| {
        after
            .results
            .as_ref()
            .and_then(|r| r.baseline.as_ref())
            .map_or_else(Default::default, |b| b.on_drift)
    });
    if let Some(check) = crate::judge::drift_verdict(&drift, policy) {
        failures.push(format!(
            "  environment: {}",
            crate::report::words::check_message(&check)
        ));
    }
    let mut out = table(&rows);
    if !failures.is_empty() {
        let _ = writeln!(out, "\nfailed:");
        for line in &failures {
            let _ = writeln!(out, "{line}");
        }
    }
    if drift.is_empty() {
        let _ = writeln!(out, "\nenvironment: no differences");
    } else {
        let _ = writeln!(out, "\nenvironment changes:");
        for change in drift {
            let _ = writeln!(out, "  {change}");
        }
    }
    let sources: std::collections::BTreeSet<ToleranceSource> =
        cases.iter().filter_map(|c| c.tolerances).collect();
    if let Some(said) = tolerances_said(&sources, before, after) {
        let _ = writeln!(out, "\ntolerances: each case's, {said}");
    }
    DiffText {
        text: out,
        failed: !failures.is_empty(),
    }
}

/// One case of a diff: both entries, and the judge's checks of the later
/// against the earlier (worded), with what grew.
struct DiffCase {
    /// The case, and its testbed when the entry is one's.
    label: String,
    before: Option<baseline::LockedCase>,
    after: Option<baseline::LockedCase>,
    checks: Vec<crate::results::Check>,
    /// Where its tolerances came from; `None`: not compared (new or
    /// removed).
    tolerances: Option<ToleranceSource>,
    rank_growth: Option<crate::measure::ranks::RankChange>,
    site_growth: Option<crate::snapshot::SiteGrowth>,
}

/// Each entry of either side, by testbed and case, judged: like is
/// compared with like (a testbed's with the same testbed's, or a lock of
/// before testbeds of the same GPU model), through the run's own
/// `judge::against_lock`.
fn diff_cases(before: &Side, after: &Side, suite: Option<&Suite>) -> Vec<DiffCase> {
    let legacy_gpu_compared =
        baseline::drift::same_gpus(&before.lock.environment, &after.lock.environment);
    let keys: std::collections::BTreeSet<(Option<&str>, &str)> = before
        .lock
        .entries()
        .chain(after.lock.entries())
        .map(|(testbed, id, _)| (testbed, id))
        .collect();
    let exact = |lock: &'_ Lock, testbed: Option<&str>, id: &str| -> Option<baseline::LockedCase> {
        match testbed {
            None => lock.cases.get(id).cloned(),
            Some(t) => lock.testbeds.get(t).and_then(|b| b.cases.get(id)).cloned(),
        }
    };
    let suite_case = |id: &str| suite.and_then(|s| s.cases.iter().find(|c| c.id == id));
    let mut cases = Vec::new();
    for (testbed, id) in keys {
        let later = exact(&after.lock, testbed, id);
        let (earlier, gpu_compared) = match &later {
            Some(_) => {
                let found = before.lock.baseline_for(id, testbed, None);
                let compared = match found.source {
                    baseline::testbed::Source::Testbed(_) => true,
                    baseline::testbed::Source::Legacy => legacy_gpu_compared,
                };
                (found.entry.cloned(), compared)
            }
            None => (exact(&before.lock, testbed, id), legacy_gpu_compared),
        };
        // An entry of the lock before that the lock after replaced with
        // its testbed's is the same case, not a removed one.
        if later.is_none() && testbed.is_none() && after.lock.has_case(id) {
            continue;
        }
        let label = match testbed {
            Some(t) => format!("{id} [{t}]"),
            None => id.to_string(),
        };
        let mut case = DiffCase {
            label,
            before: earlier,
            after: later,
            checks: Vec::new(),
            tolerances: None,
            rank_growth: None,
            site_growth: None,
        };
        let (Some(a), Some(b)) = (&case.before, &case.after) else {
            cases.push(case);
            continue;
        };
        let (tolerances, source) = match suite_case(id) {
            Some(case) => (crate::judge::tolerances(case), ToleranceSource::Suite),
            None => match (b.tolerance, a.tolerance) {
                (Some(t), _) => (t, ToleranceSource::After),
                (None, Some(t)) => (t, ToleranceSource::Before),
                (None, None) => (Tolerances::default().into(), ToleranceSource::Default),
            },
        };
        let now_case = after
            .results
            .as_ref()
            .and_then(|r| r.cases.iter().find(|c| c.id == id));
        let max = suite_case(id)
            .and_then(|c| c.search.as_ref())
            .map(|s| s.max);
        let mut checks = crate::judge::against_entry(
            a,
            &before.path,
            b,
            now_case,
            tolerances,
            max,
            gpu_compared,
        );
        for check in &mut checks {
            check.message = crate::report::words::check_message(check);
        }
        case.site_growth = crate::judge::site_growth(
            a.allocation_sites.as_ref(),
            b.allocation_sites.as_ref(),
            &checks,
        );
        case.rank_growth = crate::judge::rank_growth(Some(&a.ranks), &b.ranks, &checks);
        case.checks = checks;
        case.tolerances = Some(source);
        cases.push(case);
    }
    cases
}

impl DiffCase {
    /// Its row of the table.
    fn row(&self, with_capacity: bool) -> Vec<String> {
        let figure = |bytes: Option<u64>| bytes.map_or("-".to_string(), |b| Bytes(b).to_string());
        let both = |pick: fn(&baseline::LockedCase) -> Option<u64>| {
            (
                figure(self.before.as_ref().and_then(pick)),
                figure(self.after.as_ref().and_then(pick)),
            )
        };
        let (host_before, host_after) = both(|c| c.host_peak_bytes);
        let (gpu_before, gpu_after) = both(|c| c.gpu_peak_bytes);
        use crate::results::CheckKind::Baseline;
        let (host, working, gpu, capacity) = match (&self.before, &self.after) {
            (Some(a), Some(b)) => (
                cell(&self.checks, Baseline(baseline::Figure::Host)),
                cell(&self.checks, Baseline(baseline::Figure::Working)),
                cell(&self.checks, Baseline(baseline::Figure::Gpu)),
                capacity_cell(a.capacity, b.capacity, &self.checks),
            ),
            // A cell under every column, the working memory's too.
            (None, _) => ["new case"; 4].map(String::from).into(),
            (_, None) => ["removed"; 4].map(String::from).into(),
        };
        let mut row = vec![
            self.label.clone(),
            host_before,
            host_after,
            host,
            working,
            gpu_before,
            gpu_after,
            gpu,
        ];
        if with_capacity {
            row.push(capacity);
        }
        row
    }

    /// Its lines under `failed:`: each failed check in run's words, then
    /// the rank and the sites that grew.
    fn failure_lines(&self) -> Vec<String> {
        let label = &self.label;
        let failed = self
            .checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.message.clone());
        let ranks = self
            .rank_growth
            .as_ref()
            .map(crate::report::words::rank_growth);
        let sites = self
            .site_growth
            .as_ref()
            .map(crate::report::words::site_growth);
        failed
            .chain(ranks)
            .chain(sites)
            .map(|line| format!("  {label}: {line}"))
            .collect()
    }
}

/// A figure's cell: `REGRESSED +12.0%`, `ok +1.2%`, `not compared (…)`.
fn cell(checks: &[crate::results::Check], kind: crate::results::CheckKind) -> String {
    use crate::results::{CheckOutcome, Facts};
    let Some(check) = checks.iter().find(|c| c.kind == kind) else {
        return "-".to_string();
    };
    let change = check.delta_ratio().map_or(String::new(), |r| {
        format!(" {}", baseline::compare::signed_percent(r))
    });
    let not_compared = match &check.facts {
        Some(Facts::Baseline { not_compared, .. }) => not_compared.as_ref(),
        _ => None,
    };
    match check.outcome {
        Some(CheckOutcome::Breached) => format!("REGRESSED{change}"),
        Some(CheckOutcome::Improved) => format!("improved{change}"),
        Some(CheckOutcome::Within) => match &check.facts {
            Some(Facts::Baseline {
                anon_within: Some(_),
                ..
            }) => format!("ok{change} (file pages only)"),
            _ => format!("ok{change}"),
        },
        Some(CheckOutcome::Unknown) => "UNKNOWN".to_string(),
        Some(CheckOutcome::NotGated) => format!("not gated{change}"),
        Some(CheckOutcome::NotCompared) => match not_compared {
            Some(baseline::NotCompared::HostMethod { locked, now }) => {
                format!("not compared ({locked} vs {now})")
            }
            Some(baseline::NotCompared::GpuModels) => {
                "not compared (GPU models differ)".to_string()
            }
            Some(baseline::NotCompared::GpuMethod { locked, now }) => {
                format!("not compared ({locked} vs {now})")
            }
            Some(baseline::NotCompared::HostSource { locked, .. }) => {
                format!("not compared (no {locked} figure)")
            }
            _ => "not compared".to_string(),
        },
        Some(CheckOutcome::NoBaseline) | None => "-".to_string(),
    }
}

/// The capacity's cell: `88 → 72 REGRESSED`, `96 (no capacity before)`.
fn capacity_cell(
    before: Option<u64>,
    after: Option<u64>,
    checks: &[crate::results::Check],
) -> String {
    use crate::results::{CheckKind, CheckOutcome};
    let check = checks.iter().find(|c| c.kind == CheckKind::Capacity);
    match (before, after, check) {
        (Some(old), Some(new), Some(check)) => {
            let mark = match check.outcome {
                Some(CheckOutcome::Breached) => " REGRESSED",
                Some(CheckOutcome::Improved) => " grew",
                Some(CheckOutcome::NotCompared) => " not compared",
                _ => " ok",
            };
            format!("{old} → {new}{mark}")
        }
        (_, Some(new), _) => format!("{new} (no capacity before)"),
        (Some(old), None, Some(check)) if !check.passed => format!("{old} → none FAILED"),
        (Some(old), None, _) => format!("{old} → none"),
        (None, None, _) => "-".to_string(),
    }
}

/// Where the tolerances came from, said once for every source used.
fn tolerances_said(
    sources: &std::collections::BTreeSet<ToleranceSource>,
    before: &Side,
    after: &Side,
) -> Option<String> {
    let defaults = Tolerances::default();
    let default_text = format!(
        "oomgate's defaults (host {}, gpu {})",
        baseline::compare::describe_tolerance(defaults.host),
        baseline::compare::describe_tolerance(defaults.gpu)
    );
    let said: Vec<String> = sources
        .iter()
        .map(|source| match source {
            ToleranceSource::Suite => "the suite's (--suite)".to_string(),
            ToleranceSource::After => format!("as recorded in {}", after.path.display()),
            ToleranceSource::Before => format!("as recorded in {}", before.path.display()),
            ToleranceSource::Default => format!("{default_text}, where neither file records them"),
        })
        .collect();
    (!said.is_empty()).then(|| said.join("; "))
}

/// Rows as left-aligned columns.
pub(super) fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; columns];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

/// Where a pytest case runs: its table's shared session, or a process of
/// its own and why (a run on a pool of GPUs isolates every test too).
fn pytest_mode(case: &Case) -> String {
    if case.pytest_session.is_some() {
        return "its table's shared pytest session (a process of its own with a --gpus pool)"
            .to_string();
    }
    match crate::suite::needs_own_process(case) {
        Some(key) => format!("a process of its own (`{key}`: a shared session cannot apply it)"),
        None => "a process of its own (`isolate`, or `granularity = \"file\"`)".to_string(),
    }
}

/// The text `oomgate check` prints.
pub fn describe_plan(suite: &Suite, cases: &[&Case]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "suite {} ({}): {} case(s), sampling every {}, workdir {}",
        suite.name,
        suite.path.display(),
        cases.len(),
        format_duration(suite.sample_interval),
        suite.workdir.display()
    );
    for case in cases {
        let _ = writeln!(out, "\n{}", case.id);
        let _ = writeln!(
            out,
            "  command:     {}",
            shell_join(&crate::redact::command(&case.command))
        );
        if case.program.is_absolute() {
            let _ = writeln!(out, "  program:     {}", case.program.display());
        }
        let _ = writeln!(out, "  cwd:         {}", case.cwd.display());
        if !case.env.is_empty() {
            let env: Vec<String> = case
                .env
                .iter()
                .map(|(k, v)| format!("{k}={}", crate::redact::env_value(k, v)))
                .collect();
            let _ = writeln!(out, "  env:         {}", shell_join(&env));
        }
        let mut limits = vec![
            format!("timeout {}", format_duration(case.timeout)),
            format!("concurrency {}", case.concurrency),
        ];
        if let Some(soak) = case.soak {
            limits.push(format!("soak {}", format_duration(soak)));
        }
        limits.extend(crate::report::words::budget_settings(&case.budget, false));
        if case.repeat > 1 {
            limits.push(format!("repeat {}", case.repeat));
        }
        if let Some(creep) = case.creep {
            limits.push(format!(
                "creep {:.0}% over {}{}",
                creep.limit * 100.0,
                humantime::format_duration(creep.window),
                match creep.action {
                    crate::suite::CreepAction::Fail => "",
                    crate::suite::CreepAction::Warn => " (warn)",
                }
            ));
        }
        let _ = writeln!(out, "  limits:      {}", limits.join(", "));
        if case.pytest.is_some() {
            let _ = writeln!(out, "  runs in:     {}", pytest_mode(case));
        }
        if let Some(server) = &case.server {
            let _ = writeln!(
                out,
                "  server:      {}",
                shell_join(&crate::redact::command(&server.command))
            );
            let _ = writeln!(
                out,
                "               ready on {} within {}, stopped with {} ({} grace)",
                server.ready.fill(&case.params).describe(),
                format_duration(server.ready_timeout),
                server.stop_signal.name,
                format_duration(server.kill_grace)
            );
            let client = crate::report::words::budget_settings(&case.client_budget, true);
            if !client.is_empty() {
                let _ = writeln!(out, "  client:      budget {}", client.join(", "));
            }
        }
        if let Some(spec) = &case.search {
            let mut words = format!(
                "largest {} from {} to {}, step {}, at most {} probes",
                spec.param, spec.min, spec.max, spec.step, spec.max_probes
            );
            if let Some(timeout) = spec.timeout {
                words.push_str(&format!(", {} in all", format_duration(timeout)));
            }
            let _ = writeln!(out, "  search:      {words}");
        }
        for output in &case.outputs {
            let _ = writeln!(
                out,
                "  output:      {} from the logs ({} match of /{}/), {} is better, tolerance {}",
                output.name,
                output.pick.as_str(),
                crate::clean::line(&output.regex),
                output.better.as_str(),
                crate::report::words::percent_of(output.tolerance)
            );
        }
        let mut pool = Vec::new();
        if let Some(gpus) = case.gpus {
            pool.push(format!("{gpus} GPU(s) of a pool (--gpus)"));
        }
        match (case.gpu_memory, case.gpus.unwrap_or(1)) {
            (Some(memory), 1) => pool.push(format!("packed by a GPU peak of {memory} (--pack)")),
            (Some(memory), n) => pool.push(format!(
                "GPU peak {memory} (not packed: --pack shares GPUs between one-GPU cases, this one needs {n})"
            )),
            (None, _) => {}
        }
        if !pool.is_empty() {
            let _ = writeln!(out, "  pool:        {}", pool.join(", "));
        }
        let mut checks: Vec<String> = case
            .limits
            .iter()
            .map(|l| format!("{} {}", l.key, l.text))
            .collect();
        if let Some(leak) = case.leak {
            checks.push(format!(
                "leak: growth at most {} after {} warm-up iteration(s)",
                leak.max_growth, leak.warmup
            ));
        }
        if !checks.is_empty() {
            let _ = writeln!(out, "  checks:      {}", checks.join(", "));
        }
        let _ = writeln!(out, "  folder:      cases/{}", case.folder);
    }
    for parity in &suite.parity {
        let _ = writeln!(
            out,
            "\n{}\n  rule:        {} on {}, judged once both have run",
            parity.name,
            parity.text,
            parity.figure.name()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::LockedCase;
    use crate::measure::HostMethod;

    const MIB: u64 = 1024 * 1024;

    fn lock(cases: &[(&str, u64, Option<u64>)]) -> Lock {
        Lock {
            version: crate::baseline::LOCK_VERSION,
            suite: "train-gate".into(),
            locked_at: "2026-12-04T10:00:00.000+00:00".into(),
            environment: Default::default(),
            cases: cases
                .iter()
                .map(|&(id, host_mib, gpu_mib)| {
                    let mut locked = LockedCase::empty();
                    locked.host_peak_bytes = Some(host_mib * MIB);
                    locked.host_peak_method = Some(HostMethod::CgroupV1);
                    locked.gpu_peak_bytes = gpu_mib.map(|mib| mib * MIB);
                    (id.to_string(), locked)
                })
                .collect(),
            testbeds: Default::default(),
        }
    }

    fn side(path: &str, lock: Lock) -> Side {
        Side {
            path: path.into(),
            lock,
            results: None,
        }
    }

    /// `oomgate diff` as a reader sees it: the table, the failed checks in
    /// `run`'s words, the environment, where the tolerances came from;
    /// the exit it earns is `failed`.
    #[test]
    fn diff_table() {
        let before = side(
            "before.lock",
            lock(&[
                ("same", 100, None),
                ("grew", 100, None),
                ("gpu", 200, Some(10_240)),
                ("removed", 50, None),
            ]),
        );
        let after = side(
            "after.lock",
            lock(&[
                ("same", 101, None),
                ("grew", 200, None),
                ("gpu", 200, Some(8_192)),
                ("new", 70, None),
            ]),
        );
        let diff = render_diff(&before, &after, None);
        assert!(diff.failed, "the growth fails the diff");
        insta::assert_snapshot!(diff.text);
    }
}
