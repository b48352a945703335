//! `oomgate run` and `oomgate lock`: the commands that run a suite.

use std::path::{Path, PathBuf};

use super::args::{HostMode, LockArgs, RunArgs};
use super::outputs::{Outputs, prepare_outputs, refuse_overwriting, suite_files};
use super::shared::{CliError, Outcome, plan, shard, write_stderr};
use crate::baseline::{self, Lock};
use crate::environment;
use crate::files::OutDirClaim;
use crate::measure::HostMethod;
use crate::measure::cgroup::{MemoryHierarchy, StaleCgroup};
use crate::measure::nvml::Gpu;
use crate::process;
use crate::report::outputs::{ReportFiles, ReportPaths};
use crate::report::terminal::Terminal;
use crate::report::{FanOut, Reporter, github};
use crate::results::{HostCgroup, Measurement, RunResults};
use crate::run::{BaselineSetup, Interrupt, RunSetup, Runner};
use crate::suite::{GpuMode, Suite};

/// What to compare a run with.
enum BaselineChoice {
    /// `<suite>.lock` when it exists.
    Default,
    /// This lock; it must exist.
    Path(PathBuf),
    None,
}

/// `oomgate run`: load, plan, run, judge.
pub fn run(args: &RunArgs) -> Result<Outcome, CliError> {
    let (mut suite, parked) =
        super::shared::load_to_run(&args.plan.suite, args.plan.python.as_deref())?;
    if let Some(repeat) = args.repeat {
        for case in &mut suite.cases {
            case.repeat = case.repeat.max(repeat);
        }
    }
    let cases = shard(&suite, &args.plan.filter, args.plan.partition)?;
    let choice = match (&args.baseline, args.no_baseline) {
        (_, true) => BaselineChoice::None,
        (Some(path), false) => BaselineChoice::Path(path.clone()),
        (None, false) => BaselineChoice::Default,
    };
    let default_lock = matches!(choice, BaselineChoice::Default);
    let lock = load_baseline(&suite, choice)?;
    let mut keep = suite_files(&suite);
    if let Some((path, _)) = &lock {
        keep.push(("the baseline lock", path.clone()));
    }
    let first_run = default_lock && lock.is_none();
    if let (Some(chosen), Some((path, lock))) = (&args.baseline_testbed, &lock) {
        if !lock.testbeds.is_empty() && !lock.testbeds.contains_key(chosen) {
            return Err(CliError::BadInput(format!(
                "--baseline-testbed \"{chosen}\": {} has no such testbed; it has: {}",
                path.display(),
                lock.testbeds
                    .keys()
                    .map(|t| format!("\"{t}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    let origin = super::history::origin_now(&args.record, suite.path.parent());
    let history = super::history::pasts_for_run(&suite, &cases, &args.record, &origin)?;
    let setup = BaselineSetup {
        lock,
        require: args.require_baseline,
        compare_across_gpus: args.compare_across_gpus,
        testbed: args.baseline_testbed.clone(),
        history,
    };
    let outputs = Outputs {
        out: &args.out,
        adopt: args.adopt.adopt_out_dir,
        junit: args.junit.as_deref(),
        json: args.json.as_deref(),
        keep,
    };
    let (results, _claim) = execute(
        &suite,
        &cases,
        &outputs,
        Modes {
            gpu: args.gpu.unwrap_or(suite.gpu),
            host: args.host_method,
            progress: args.progress,
            partition: args.plan.partition,
            schedule: &args.schedule,
            pytest_sessions: parked,
            origin,
        },
        setup,
    )?;
    super::history::record_run(&results, &args.record, &suite)?;
    if first_run && results.summary.not_passed() == 0 && !results.cases.is_empty() {
        crate::report::terminal::to_stderr(&format!(
            "hint: no baseline yet ({} does not exist); to gate the next runs against this one: oomgate lock {} --from {}\n",
            baseline::default_path(&args.plan.suite).display(),
            args.plan.suite.display(),
            args.out.join("results.json").display()
        ));
    }
    Ok(judge(&results))
}

/// `oomgate lock`: lock a passing run, fresh or from a results file.
pub fn lock(args: &LockArgs) -> Result<Outcome, CliError> {
    // Results to lock (`--from`) name their pytest cases: no collection.
    let (mut suite, parked) = match args.from {
        Some(_) => (
            super::shared::load_suite(&args.suite, args.python.as_deref())?,
            crate::pytest::session::Parked::default(),
        ),
        None => super::shared::load_to_run(&args.suite, args.python.as_deref())?,
    };
    if let Some(repeat) = args.repeat {
        for case in &mut suite.cases {
            case.repeat = case.repeat.max(repeat);
        }
    }
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| baseline::default_path(&args.suite));
    let mut inputs = suite_files(&suite);
    match &args.from {
        Some(from) => inputs.push(("the results it locks (--from)", from.clone())),
        None => {
            let reports = ReportPaths::in_out_dir(&args.out);
            for target in reports.json.iter().chain(&reports.junit) {
                inputs.push(("a report of the run it locks", target.path().to_path_buf()));
            }
            inputs.push(("a report of the run it locks", reports.summary_md));
            inputs.push(("a report of the run it locks", reports.html));
        }
    }
    refuse_overwriting(&[("the lock", &output)], &inputs)?;
    // An existing lock that cannot be read is never overwritten: it may be
    // a newer oomgate's, or damage worth a look. Checked before any run.
    if output.exists() {
        baseline::read(&output)?;
    }
    let mut accepted = Vec::new();
    let skipped;
    // With --accept: the results whose figures become the ratchets.
    let mut to_accept: Option<RunResults> = None;
    // Held from the run to the lock file, when the lock comes of a run.
    let mut _claim = None;
    let (lock, outcome, tainted) = match &args.from {
        Some(results_path) => {
            let text = crate::files::read_input(
                results_path,
                crate::files::MAX_RESULTS_BYTES,
                "a results file",
            )
            .map_err(|e| {
                CliError::BadInput(format!(
                    "cannot read results {}: {e}",
                    results_path.display()
                ))
            })?;
            let mut view = crate::results::readback::parse(&text)
                .map_err(|why| CliError::BadInput(format!("{}: {why}", results_path.display())))?;
            if !args.filter.is_empty() {
                view.cases.retain(|c| {
                    args.filter
                        .iter()
                        .any(|f| crate::suite::filter_matches(&c.id, f))
                });
                if view.cases.is_empty() {
                    return Err(CliError::BadInput(format!(
                        "no case of {} matches --filter {}",
                        results_path.display(),
                        args.filter.join(" --filter ")
                    )));
                }
            }
            if view.suite.name != suite.name {
                return Err(CliError::BadInput(format!(
                    "{} holds results of suite `{}`, not of `{}` ({})",
                    results_path.display(),
                    view.suite.name,
                    suite.name,
                    args.suite.display()
                )));
            }
            refuse_results_not_of(&suite, &view, results_path)?;
            accepted = crate::results::readback::accepted_changes(&view);
            skipped = crate::results::readback::skipped(&view);
            if args.accept.is_some() {
                to_accept = Some(view.clone());
            }
            (
                crate::results::readback::lock_from_results(&view),
                Outcome::Passed,
                gpu_tainted(&view),
            )
        }
        None => {
            let cases = plan(&suite, &args.filter)?;
            let outputs = Outputs {
                out: &args.out,
                adopt: args.adopt.adopt_out_dir,
                junit: None,
                json: None,
                keep: suite_files(&suite),
            };
            let (results, claim) = execute(
                &suite,
                &cases,
                &outputs,
                Modes {
                    gpu: args.gpu.unwrap_or(suite.gpu),
                    host: args.host_method,
                    progress: args.progress,
                    partition: None,
                    schedule: &args.schedule,
                    pytest_sessions: parked.clone(),
                    origin: super::history::origin_now(&args.record, suite.path.parent()),
                },
                BaselineSetup::default(),
            )?;
            _claim = Some(claim);
            if args.accept.is_some() {
                to_accept = Some(results.clone());
            }
            super::history::record_run(&results, &args.record, &suite)?;
            skipped = crate::results::readback::skipped(&results);
            (
                crate::results::readback::lock_from_results(&results),
                judge(&results),
                gpu_tainted(&results),
            )
        }
    };
    let mut lock = match lock {
        Ok(lock) => lock,
        Err(why) => {
            write_stderr(&format!(
                "not locked: {why}; {} was left as it was",
                output.display()
            ));
            return Ok(if outcome == Outcome::Passed {
                Outcome::CasesFailed
            } else {
                outcome
            });
        }
    };
    // Results of a filtered run, or of one testbed, lock only some entries:
    // the others keep their previous baseline rather than silently losing
    // it — other testbeds' entries of the same case included.
    let fresh: std::collections::HashSet<String> =
        lock.entries().map(|(_, id, _)| id.to_string()).collect();
    let testbeds: Vec<String> = lock.testbeds.keys().cloned().collect();
    // Held from reading the lock to replacing it: another `oomgate lock`
    // into the same file at once (another testbed's results) waits, then
    // reads this one's entries back in, rather than renaming its own copy
    // of the old lock over them.
    let _held = baseline::hold(&output, baseline::HOLD_WAIT)?;
    let previous = if output.exists() {
        Some(baseline::read(&output)?)
    } else {
        None
    };
    if let Some(previous) = previous {
        lock = previous.relock(lock);
    }
    // A case the suite no longer has leaves the lock; a suite's pytest
    // cases are known only when it was collected (not with --from).
    let known: std::collections::HashSet<&str> =
        suite.cases.iter().map(|c| c.id.as_str()).collect();
    if args.from.is_none() || suite.pytest.is_empty() {
        let keep = |id: &String| known.contains(id.as_str()) || fresh.contains(id);
        lock.cases.retain(|id, _| keep(id));
        for bed in lock.testbeds.values_mut() {
            bed.cases.retain(|id, _| keep(id));
        }
        lock.testbeds.retain(|_, bed| !bed.cases.is_empty());
    }
    let mut kept = Vec::new();
    let mut missing = Vec::new();
    for case in &suite.cases {
        if fresh.contains(&case.id) {
            continue;
        }
        if lock.has_case(&case.id) {
            kept.push(case.id.as_str());
        } else {
            missing.push(case.id.as_str());
        }
    }
    baseline::write(&output, &lock)?;
    if let (Some(reason), Some(results)) = (&args.accept, &to_accept) {
        super::history::accept_locked(results, reason, &args.record, suite.history.as_ref())?;
    }
    if !accepted.is_empty() {
        write_stderr(&format!(
            "accepted what changed since the old baseline (these cases failed only against it):\n  {}",
            accepted.join("\n  ")
        ));
    }
    write_stderr(&format!(
        "locked {} case(s) of suite `{}` in {}{}",
        fresh.len(),
        lock.suite,
        output.display(),
        match testbeds.as_slice() {
            [] => String::new(),
            names => format!(" (testbed {})", names.join(", ")),
        }
    ));
    if !kept.is_empty() {
        write_stderr(&format!(
            "warning: not in these results, their previous baseline was kept: {}",
            kept.join(", ")
        ));
    }
    // A skipped test's figures are of the skip: not locked.
    let (skipped_kept, skipped_new): (Vec<&String>, Vec<&String>) =
        skipped.iter().partition(|id| lock.has_case(id));
    for (ids, what) in [
        (&skipped_kept, "their previous baseline was kept"),
        (&skipped_new, "they have no baseline"),
    ] {
        if !ids.is_empty() {
            let ids: Vec<&str> = ids.iter().map(|id| id.as_str()).collect();
            write_stderr(&format!(
                "warning: skipped by pytest, so not locked ({what}): {}",
                ids.join(", ")
            ));
        }
    }
    if !missing.is_empty() {
        write_stderr(&format!(
            "warning: no baseline for (no result for them): {}",
            missing.join(", ")
        ));
    }
    let gpu_unknown: Vec<&str> = lock
        .entries()
        .filter(|(_, id, c)| {
            fresh.contains(*id) && c.gpu_peak_bytes.is_none() && c.gpu_peak_method.is_some()
        })
        .map(|(_, id, _)| id)
        .collect();
    if !gpu_unknown.is_empty() {
        write_stderr(&format!(
            "warning: GPU figure unknown for {}: their GPU memory is not gated by this lock",
            gpu_unknown.join(", ")
        ));
    }
    if !tainted.is_empty() {
        write_stderr(&format!(
            "warning: GPU figure tainted by another process on the GPU for {}: not locked, so their GPU memory is not gated by this lock; lock again from a run without neighbours",
            tainted.join(", ")
        ));
    }
    Ok(Outcome::Passed)
}

/// Results to lock must be this suite's and complete: a case id the suite
/// does not have (another suite of the same name, or an older version of
/// this one) or a case without a host figure (always measured) would put a
/// baseline in the lock that gates nothing, or nothing where one belongs.
fn refuse_results_not_of(
    suite: &Suite,
    view: &crate::results::RunResults,
    path: &Path,
) -> Result<(), CliError> {
    // A pytest case is the suite's when the suite has a `[[pytest]]`:
    // its tests are known to the run that collected them, not here.
    let unknown: Vec<&str> = view
        .cases
        .iter()
        .filter(|c| c.pytest.is_none() || suite.pytest.is_empty())
        .filter(|c| !suite.cases.iter().any(|s| s.id == c.id))
        .map(|c| c.id.as_str())
        .collect();
    if !unknown.is_empty() {
        return Err(CliError::BadInput(format!(
            "{} has cases suite `{}` ({}) does not: {}; lock results of this suite's own run",
            path.display(),
            suite.name,
            suite.path.display(),
            unknown.join(", ")
        )));
    }
    let unmeasured: Vec<&str> = view
        .cases
        .iter()
        .filter(|c| c.host.peak_bytes.is_none())
        .map(|c| c.id.as_str())
        .collect();
    if !unmeasured.is_empty() {
        return Err(CliError::BadInput(format!(
            "{}: no host figure for {}, so there is nothing to lock for them; run them again",
            path.display(),
            unmeasured.join(", ")
        )));
    }
    Ok(())
}

/// The cases whose GPU figure another process on the device may be in.
fn gpu_tainted(results: &crate::results::RunResults) -> Vec<String> {
    results
        .cases
        .iter()
        .filter(|c| crate::results::readback::gpu_tainted(c))
        .map(|c| c.id.clone())
        .collect()
}

/// Read the baseline the choice names. A lock that exists but cannot be
/// used is an error (exit 2): comparing with nothing would pass silently.
fn load_baseline(
    suite: &Suite,
    choice: BaselineChoice,
) -> Result<Option<(PathBuf, Lock)>, CliError> {
    let path = match choice {
        BaselineChoice::None => return Ok(None),
        BaselineChoice::Path(path) => path,
        BaselineChoice::Default => {
            let path = baseline::default_path(&suite.path);
            if !path.exists() {
                return Ok(None);
            }
            path
        }
    };
    let lock = baseline::read(&path)?;
    // A lock of another suite would compare nothing, or the wrong cases.
    if lock.suite != suite.name {
        return Err(CliError::BadInput(format!(
            "{} is the lock of suite `{}`, not of `{}` ({}); pass the right one with --baseline, or --no-baseline",
            path.display(),
            lock.suite,
            suite.name,
            suite.path.display()
        )));
    }
    if lock.entries().next().is_some() && !suite.cases.iter().any(|c| lock.has_case(&c.id)) {
        return Err(CliError::BadInput(format!(
            "{} shares no case with suite `{}` ({}): it cannot be this suite's baseline; re-lock with `oomgate lock`",
            path.display(),
            suite.name,
            suite.path.display()
        )));
    }
    write_stderr(&format!(
        "baseline: {} (locked {})",
        path.display(),
        lock.locked_at
    ));
    Ok(Some((path, lock)))
}

/// How GPU and host memory are to be measured, and cases scheduled.
struct Modes<'a> {
    gpu: GpuMode,
    host: HostMode,
    progress: super::args::ProgressMode,
    /// The shard this run is, recorded in its results.
    partition: Option<crate::suite::Partition>,
    schedule: &'a super::pool::ScheduleArgs,
    /// The shared pytest sessions the collection left, by table.
    pytest_sessions: crate::pytest::session::Parked,
    /// Where the run came from (commit, branch, CI run).
    origin: crate::results::RunOrigin,
}

/// The shared pipeline of `run` and `lock`: prepare outputs, open the GPU,
/// find the memory cgroups, capture the environment, run every case, report.
fn execute(
    suite: &Suite,
    cases: &[&crate::suite::Case],
    outputs: &Outputs<'_>,
    modes: Modes<'_>,
    baseline: BaselineSetup,
) -> Result<(RunResults, OutDirClaim), CliError> {
    // Absolute, because workloads receive it as OOMGATE_OUT in their own cwd.
    let out_dir = std::path::absolute(outputs.out).map_err(|e| {
        CliError::Infrastructure(format!("cannot resolve {}: {e}", outputs.out.display()))
    })?;
    // Read before this run replaces it.
    let past_wall_s = super::pool::past_wall_times(
        &out_dir.join("results.json"),
        baseline.lock.as_ref().map(|(_, lock)| lock),
    );
    // The GPUs and the schedule are checked before the out dir is touched:
    // a pool mistake leaves it as it was.
    let (gpu, no_gpu) = open_gpu(modes.gpu)?;
    let schedule = super::pool::schedule(
        modes.schedule,
        modes.gpu,
        gpu.as_ref()
            .ok_or(no_gpu.as_deref().unwrap_or("NVML was not opened")),
        cases,
        past_wall_s,
        suite.xdist_workers,
    )?;
    let (paths, claim) = prepare_outputs(outputs, &out_dir)?;
    let interrupt = Interrupt::install()
        .map_err(|e| CliError::Infrastructure(format!("cannot install signal handlers: {e}")))?;
    if let Err(e) = process::become_subreaper() {
        write_stderr(&format!(
            "warning: cannot become a child subreaper ({e}); processes that detach from a case may be missed"
        ));
    }
    // The sampler keeps a file open per process of large trees.
    process::raise_open_file_limit();
    let (memory, host_note, stale) = open_memory_cgroups(modes.host)?;
    let environment = environment::capture(&suite.environment, &suite.workdir, gpu.as_ref());
    let measurement = Measurement {
        sample_interval_ms: u64::try_from(suite.sample_interval.as_millis()).unwrap_or(u64::MAX),
        host_method: memory
            .as_ref()
            .map_or(HostMethod::ProcfsPss, |m| HostMethod::of_cgroup(m.version)),
        host_note,
        host_cgroup: memory.as_ref().map(|m| HostCgroup {
            version: m.version,
            dir: m.dir.clone(),
        }),
        gpu_method: gpu.as_ref().map(|_| "nvml".to_string()),
        gpu_note: no_gpu.map(|why| match modes.gpu {
            GpuMode::Auto => format!("{why}; measuring host memory only"),
            _ => why,
        }),
    };
    // Every file, and when it is written, is ReportFiles' business.
    let mut reporter = FanOut::new(vec![
        Box::new(Terminal::new(modes.progress.into())),
        Box::new(ReportFiles::new(paths)) as Box<dyn Reporter>,
        Box::new(github::Annotations::from_env()),
    ]);
    // What a killed oomgate left is this run's business once it is gone:
    // said before the first case, like any other warning.
    for cleared in &stale {
        reporter
            .handle(&crate::report::Event::Warning {
                message: cleared.describe(),
            })
            .map_err(|e| CliError::Infrastructure(format!("cannot report: {e}")))?;
    }
    let setup = RunSetup {
        interrupt,
        memory,
        gpu,
        measurement,
        environment,
        baseline,
        partition: modes.partition,
        schedule,
        pytest_sessions: modes.pytest_sessions,
        origin: modes.origin,
    };
    let results = Runner::new(suite, &out_dir, setup).run(cases, &mut reporter);
    super::outputs::say_replaced_links();
    Ok((results?, claim))
}

/// The memory cgroup hierarchy as the host mode asks: where each case gets
/// its cgroup, or why host memory is measured from /proc only (said once);
/// and the cgroups of a killed oomgate that still held processes, cleared.
fn open_memory_cgroups(mode: HostMode) -> Result<OpenedCgroups, CliError> {
    let found = match mode {
        HostMode::Procfs => {
            return Ok((
                None,
                Some("no memory cgroups (--host-method procfs)".to_string()),
                clear_stale_without_cgroups(),
            ));
        }
        HostMode::Auto => match MemoryHierarchy::discover() {
            Ok(hierarchy) => hierarchy,
            Err(why) => {
                write_stderr(&format!(
                    "note: host memory is measured from /proc (PSS, VmHWM, reaped rusage), without a memory cgroup per case: {why}"
                ));
                return Ok((None, Some(why.to_string()), clear_stale_without_cgroups()));
            }
        },
        HostMode::Cgroup => MemoryHierarchy::discover().map_err(|why| {
            CliError::Infrastructure(format!(
                "a memory cgroup per case is required (--host-method cgroup) but cannot be made: {why}"
            ))
        })?,
    };
    let stale = found.clear_stale();
    Ok((Some(found), None, stale))
}

/// What a killed oomgate left in its case cgroups, cleared by a run that
/// makes none: its processes would hold memory and GPUs into this run
/// whatever the host method. Only found, never set up (no controller
/// enabled, no probe made); where no memory hierarchy is found, there is
/// none to clear.
fn clear_stale_without_cgroups() -> Vec<StaleCgroup> {
    MemoryHierarchy::find()
        .map(|hierarchy| hierarchy.clear_stale())
        .unwrap_or_default()
}

/// The hierarchy (if any), why there is none, and the stale cgroups
/// cleared on the way.
type OpenedCgroups = (Option<MemoryHierarchy>, Option<String>, Vec<StaleCgroup>);

/// NVML as the GPU mode asks: the handle, or why there is none (the GPU
/// mode off, or NVML's own reason). GPUs that could not be opened are
/// named once; the others are measured.
fn open_gpu(mode: GpuMode) -> Result<(Option<Gpu>, Option<String>), CliError> {
    let opened = open_gpu_quietly(mode)?;
    if let (Some(gpu), _) = &opened {
        for why in &gpu.unusable {
            write_stderr(&format!("warning: not measuring {why}"));
        }
    }
    Ok(opened)
}

fn open_gpu_quietly(mode: GpuMode) -> Result<(Option<Gpu>, Option<String>), CliError> {
    match mode {
        GpuMode::Off => Ok((
            None,
            Some("GPU measurement is off (gpu = \"off\")".to_string()),
        )),
        GpuMode::Auto => match Gpu::open() {
            Ok(gpu) => Ok((Some(gpu), None)),
            Err(why) => Ok((None, Some(why.to_string()))),
        },
        GpuMode::Required => match Gpu::open() {
            Ok(gpu) => Ok((Some(gpu), None)),
            Err(why) => Err(CliError::Infrastructure(format!(
                "GPU memory is required (gpu = \"required\") but cannot be measured: {why}"
            ))),
        },
    }
}

/// The exit status a finished run earns: the judge's verdict of the run
/// (`judge::run_verdict`), a file that could not be written first (the run
/// is incomplete, whatever its verdicts), then an interruption, then the
/// cases: 3 > 130 > 1 > 0.
pub fn judge(results: &RunResults) -> Outcome {
    match crate::judge::run_verdict(results) {
        crate::judge::RunVerdict::Faulted => Outcome::Infrastructure,
        crate::judge::RunVerdict::Interrupted => Outcome::Interrupted,
        crate::judge::RunVerdict::CasesFailed => Outcome::CasesFailed,
        crate::judge::RunVerdict::Passed => Outcome::Passed,
    }
}
