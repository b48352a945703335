//! `oomgate check`, `list`, `gpus` and `diff`: commands that only read.

use std::fmt::Write as _;
use std::path::Path;

use super::{CliError, DiffArgs, GpusArgs, Outcome, PlanArgs, shard, write_stdout};
use crate::baseline::{self, Lock, Outcome as Comparison};
use crate::measure::nvml::Gpu;
use crate::suite::{Case, Suite, Tolerances, shell_join};
use crate::units::{Bytes, format_duration};

/// `oomgate check`: the expanded plan, in full.
pub fn check(args: &PlanArgs) -> Result<Outcome, CliError> {
    let suite = super::load_suite(&args.suite)?;
    let cases = shard(&suite, &args.filter, args.partition)?;
    write_stdout(&describe_plan(&suite, &cases));
    Ok(Outcome::Passed)
}

/// `oomgate list`: one id per line.
pub fn list(args: &PlanArgs) -> Result<Outcome, CliError> {
    let suite = super::load_suite(&args.suite)?;
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
                let text = crate::report::gpus::render_json_unavailable(&why)
                    .map_err(|e| CliError::Infrastructure(e.to_string()))?;
                write_stdout(&text);
            }
            return Err(CliError::Infrastructure(why));
        }
    };
    let inventory = crate::report::gpus::Inventory::read(&mut gpu);
    let text = if args.json {
        crate::report::gpus::render_json(&inventory)
            .map_err(|e| CliError::Infrastructure(e.to_string()))?
    } else {
        crate::report::gpus::render_text(&inventory)
    };
    write_stdout(&text);
    Ok(Outcome::Passed)
}

/// `oomgate diff A B`: two results or lock files, compared with the default
/// tolerances; exit 1 when a figure regressed.
pub fn diff(args: &DiffArgs) -> Result<Outcome, CliError> {
    let before = read_any(&args.before)?;
    let after = read_any(&args.after)?;
    let (text, regressed) = render_diff(&before, &after, Tolerances::default());
    write_stdout(&text);
    Ok(if regressed {
        Outcome::CasesFailed
    } else {
        Outcome::Passed
    })
}

/// A results.json (any status) or a lock file, as a lock.
fn read_any(path: &Path) -> Result<Lock, CliError> {
    let text = crate::files::read_input(path, crate::files::MAX_RESULTS_BYTES, "a results file")
        .map_err(|e| CliError::BadInput(format!("cannot read {}: {e}", path.display())))?;
    if text.trim_start().starts_with('{') {
        let view = crate::results::view::ResultsView::parse(&text)
            .map_err(|why| CliError::BadInput(format!("{}: {why}", path.display())))?;
        return Ok(crate::results::view::lock_of(&view));
    }
    Ok(baseline::parse(&text, path)?)
}

/// The comparison table and the drift list; whether anything regressed.
pub fn render_diff(before: &Lock, after: &Lock, tolerance: Tolerances) -> (String, bool) {
    let mut rows = vec![
        [
            "CASE",
            "HOST BEFORE",
            "HOST AFTER",
            "HOST",
            "GPU BEFORE",
            "GPU AFTER",
            "GPU",
        ]
        .map(String::from),
    ];
    let mut regressed = false;
    let same_gpus = baseline::drift::same_gpus(&before.environment, &after.environment);
    let ids: std::collections::BTreeSet<&String> =
        before.cases.keys().chain(after.cases.keys()).collect();
    let figure = |bytes: Option<u64>| bytes.map_or("-".to_string(), |b| Bytes(b).to_string());
    for id in ids {
        let (a, b) = (before.cases.get(id), after.cases.get(id));
        let verdict = |what: baseline::Figure, old: Option<u64>, new: Option<u64>, t| {
            if a.is_none() {
                return "new case".to_string();
            }
            if b.is_none() {
                return "removed".to_string();
            }
            let comparison = baseline::compare::compare(what, new, old, t);
            let change = comparison.delta_ratio.map_or(String::new(), |r| {
                format!(" {}", baseline::compare::signed_percent(r))
            });
            match comparison.outcome {
                Comparison::Regressed => format!("REGRESSED{change}"),
                Comparison::Improved => format!("improved{change}"),
                Comparison::Within => format!("ok{change}"),
                Comparison::NoBaseline | Comparison::Unknown | Comparison::Skipped => {
                    "-".to_string()
                }
            }
        };
        // Host figures measured by different methods are not comparable.
        let host = match (a, b) {
            (Some(a), Some(b))
                if a.host_peak_bytes.is_some()
                    && b.host_peak_bytes.is_some()
                    && !a.host_method().comparable_with(b.host_method()) =>
            {
                format!("not compared ({} vs {})", a.host_method(), b.host_method())
            }
            _ => verdict(
                baseline::Figure::Host,
                a.and_then(|c| c.host_peak_bytes),
                b.and_then(|c| c.host_peak_bytes),
                tolerance.host,
            ),
        };
        // GPU figures of different models are not comparable, as in `run`.
        let gpu = if same_gpus {
            verdict(
                baseline::Figure::Gpu,
                a.and_then(|c| c.gpu_peak_bytes),
                b.and_then(|c| c.gpu_peak_bytes),
                tolerance.gpu,
            )
        } else {
            "not compared (GPU models differ)".to_string()
        };
        regressed |= host.starts_with("REGRESSED") || gpu.starts_with("REGRESSED");
        rows.push([
            id.clone(),
            figure(a.and_then(|c| c.host_peak_bytes)),
            figure(b.and_then(|c| c.host_peak_bytes)),
            host,
            figure(a.and_then(|c| c.gpu_peak_bytes)),
            figure(b.and_then(|c| c.gpu_peak_bytes)),
            gpu,
        ]);
    }
    let mut widths = [0usize; 7];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    let drift = baseline::drift::drift(&before.environment, &after.environment);
    if drift.is_empty() {
        let _ = writeln!(out, "\nenvironment: no differences");
    } else {
        let _ = writeln!(out, "\nenvironment changes:");
        for change in drift {
            let _ = writeln!(out, "  {change}");
        }
    }
    let _ = writeln!(
        out,
        "\ntolerances: host {}, gpu {}",
        baseline::compare::describe_tolerance(tolerance.host),
        baseline::compare::describe_tolerance(tolerance.gpu)
    );
    (out, regressed)
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
        if let Some(host) = case.budget.host {
            limits.push(format!("budget host {host}"));
        }
        if let Some(gpu) = case.budget.gpu {
            limits.push(format!("budget gpu {gpu}"));
        }
        if let Some(fraction) = case.budget.gpu_fraction {
            limits.push(format!("gpu headroom {:.0}%", fraction * 100.0));
        }
        if case.repeat > 1 {
            limits.push(format!("repeat {}", case.repeat));
        }
        let _ = writeln!(out, "  limits:      {}", limits.join(", "));
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
            let budget = &case.client_budget;
            let client: Vec<String> = [
                budget.host.map(|b| format!("host {b}")),
                budget.gpu.map(|b| format!("gpu {b}")),
                budget
                    .gpu_fraction
                    .map(|f| format!("gpu headroom {:.0}%", f * 100.0)),
            ]
            .into_iter()
            .flatten()
            .collect();
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
    out
}
