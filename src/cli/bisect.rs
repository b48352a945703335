//! `oomgate bisect`: which commit, package version or set of package
//! changes made a case grow (see `crate::bisect`), and the one-case check
//! for `git bisect run`.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::args::{BisectArgs, HostMode};
use super::shared::{CliError, Outcome, write_stderr};
use crate::bisect::{self, BisectError, Ending, Options, Progress, Range, Step, Verdict};
use crate::suite::GpuMode;

/// `oomgate bisect`.
pub fn bisect(args: &BisectArgs) -> Result<Outcome, CliError> {
    if args.check {
        return Ok(check(args));
    }
    let range = range(args)?;
    let out = out_dir(args)?;
    let mut progress = Printer::new();
    progress.note(&format!(
        "bisecting `{}` of {}; steps and logs in {}",
        args.case,
        args.suite.display(),
        out.display()
    ));
    let mut options = options(args, out.clone());
    options.gpu_slots = gpu_slots(args)?;
    let commits = args.package.is_none() && args.good_run.is_none();
    if options.gpu_slots.len() > 1 && commits {
        progress.note(&format!(
            "a pool of {} slots ({}): commits run {} at once",
            options.gpu_slots.len(),
            options.gpu_slots.join(" | "),
            options.gpu_slots.len()
        ));
    }
    let cache = cache(args)?;
    let bisected = match bisect::bisect(options, range, cache, &mut progress) {
        Ok(bisected) => bisected,
        Err(BisectError::BadInput(why)) => return Err(CliError::BadInput(why)),
        Err(BisectError::Infrastructure(why)) => return Err(CliError::Infrastructure(why)),
        Err(BisectError::Interrupted) => {
            progress.note("interrupted before the first run; the environment was removed");
            return Ok(Outcome::Interrupted);
        }
    };
    let mut written = vec![
        (
            out.join("bisect.json"),
            crate::report::bisect::json(&bisected),
        ),
        (
            out.join("bisect.md"),
            crate::report::bisect::markdown(&bisected),
        ),
    ];
    if let Some(json) = &args.json {
        written.push((json.clone(), crate::report::bisect::json(&bisected)));
    }
    let summary = crate::report::bisect::summary(&bisected);
    progress.log_only(&summary);
    super::shared::write_stdout(&format!("{summary}\n"));
    for (path, text) in written {
        let text = crate::redact::mask_written(&text);
        crate::files::write_atomic(&path, text.as_bytes()).map_err(|e| {
            CliError::Infrastructure(format!("cannot write {}: {e}", path.display()))
        })?;
    }
    Ok(match bisected.ending {
        Ending::Found => Outcome::Passed,
        Ending::NotReproducible | Ending::Undecided => Outcome::CasesFailed,
        Ending::Interrupted => Outcome::Interrupted,
    })
}

/// `oomgate bisect --check`: 0 good, 1 bad, 125 cannot tell, 128 for
/// anything that is not the figure's answer (git bisect aborts on it).
fn check(args: &BisectArgs) -> Outcome {
    let out = match out_dir(args) {
        Ok(out) => out,
        Err(e) => {
            write_stderr(&format!("error: {e}"));
            return Outcome::BisectAbort;
        }
    };
    let mut progress = Printer::new();
    // The suite's secrets and `redact` patterns are masked in what the
    // check says; a suite this commit cannot load is the run's to say.
    let _ = super::shared::load_suite(&args.suite, None);
    let options = options(args, out.clone());
    let checked = bisect::check(
        options,
        args.build.as_deref(),
        args.against.as_deref(),
        &mut progress,
    );
    // `git bisect run` calls it once a commit: without --out, the folder
    // made for the run goes with it (its verdict is said).
    let kept = args.out.is_some();
    if !kept {
        let _ = std::fs::remove_dir_all(&out);
    }
    match checked {
        Ok(step) => {
            progress.note(&crate::report::bisect::check_line(&step, kept));
            match step.verdict {
                Verdict::Good => Outcome::Passed,
                Verdict::Bad => Outcome::CasesFailed,
                Verdict::Skip => Outcome::CannotTell,
            }
        }
        Err(BisectError::Interrupted) => Outcome::Interrupted,
        Err(e) => {
            write_stderr(&format!("error: {e}"));
            Outcome::BisectAbort
        }
    }
}

/// The axis the flags ask for, checked.
fn range(args: &BisectArgs) -> Result<Range, CliError> {
    let index = crate::bisect::pip::Index {
        find_links: args.find_links.clone(),
        index_url: args.index_url.clone(),
        no_index: args.no_index,
        pre: args.pre,
    };
    let pip_flags =
        !args.find_links.is_empty() || args.index_url.is_some() || args.no_index || args.pre;
    let ends = || match (&args.good, &args.bad) {
        (Some(good), Some(bad)) => Ok((good.clone(), bad.clone())),
        _ => Err(CliError::BadInput(
            "name both ends: --good and --bad (or --good-run and --bad-run, or --check)".into(),
        )),
    };
    if let Some(package) = &args.package {
        if args.build.is_some() || args.all_parents {
            return Err(CliError::BadInput(
                "--build and --all-parents are for commits, not --package".into(),
            ));
        }
        if args.bad_run.is_some() {
            return Err(CliError::BadInput(
                "--bad-run bisects a set of packages, --package one package's versions: choose one"
                    .into(),
            ));
        }
        let (good, bad) = ends()?;
        return Ok(Range::Versions {
            package: package.clone(),
            good,
            bad,
            index,
            pins_from: args.good_run.clone(),
            all_steps: args.all_steps,
        });
    }
    if let Some(good_run) = &args.good_run {
        let Some(bad_run) = &args.bad_run else {
            return Err(CliError::BadInput(
                "--good-run needs --bad-run (or --package, to pin the other packages to its versions)".into(),
            ));
        };
        if args.good.is_some() || args.bad.is_some() || args.build.is_some() || args.all_steps {
            return Err(CliError::BadInput(
                "--good-run/--bad-run take no --good, --bad, --build or --all-steps".into(),
            ));
        }
        return Ok(Range::Sets {
            good_run: good_run.clone(),
            bad_run: bad_run.clone(),
            index,
        });
    }
    if pip_flags {
        return Err(CliError::BadInput(
            "--find-links, --index-url, --no-index and --pre are for --package and --good-run"
                .into(),
        ));
    }
    let (good, bad) = ends()?;
    Ok(Range::Commits {
        good,
        bad,
        build: args.build.clone(),
        all_parents: args.all_parents,
        all_steps: args.all_steps,
    })
}

fn options(args: &BisectArgs, out: PathBuf) -> Options {
    let gpu = args.gpu.map(|mode| match mode {
        GpuMode::Auto => "auto",
        GpuMode::Required => "required",
        GpuMode::Off => "off",
    });
    let host = args.host_method.map(|mode| match mode {
        HostMode::Auto => "auto",
        HostMode::Cgroup => "cgroup",
        HostMode::Procfs => "procfs",
    });
    Options {
        suite: args.suite.clone(),
        case: args.case.clone(),
        out,
        repeat: args.repeat,
        resume: args.resume,
        run_flags: crate::bisect::run_flags(gpu, host),
        gpu_slots: Vec::new(),
    }
}

/// `--gpus`, dealt into slots of the case's `gpus` each (one GPU for a
/// case that names none).
fn gpu_slots(args: &BisectArgs) -> Result<Vec<String>, CliError> {
    let Some(pool) = &args.gpus else {
        return Ok(Vec::new());
    };
    let devices: Vec<String> = match pool {
        super::pool::PoolSpec::Devices(list) => list.clone(),
        super::pool::PoolSpec::All => crate::measure::nvml::Gpu::open()
            .map_err(|e| CliError::Infrastructure(format!("--gpus all: {e}")))?
            .devices
            .iter()
            .map(|d| d.index.to_string())
            .collect(),
    };
    let suite = super::shared::load_suite(&args.suite, None)?;
    let each = suite
        .cases
        .iter()
        .find(|c| c.id == args.case)
        .and_then(|c| c.gpus)
        .unwrap_or(1)
        .max(1) as usize;
    if devices.len() < each {
        return Err(CliError::BadInput(format!(
            "--gpus names {} GPU(s); case `{}` needs {each}",
            devices.len(),
            args.case
        )));
    }
    Ok(devices
        .chunks(each)
        .filter(|slot| slot.len() == each)
        .map(|slot| slot.join(","))
        .collect())
}

/// The history that keeps steps: `--history`, `OOMGATE_HISTORY` or the
/// suite's `[suite] history`; one that cannot be opened is said, and the
/// bisect runs every step.
fn cache(args: &BisectArgs) -> Result<Option<bisect::Cache>, CliError> {
    let suite = super::shared::load_suite(&args.suite, None)?;
    let Some(store) = super::history::store_for(args.history.as_deref(), args.no_history, &suite)?
    else {
        return Ok(None);
    };
    Ok(Some(bisect::Cache::new(store)))
}

/// `--out`, or a new folder in the system's temporary directory.
fn out_dir(args: &BisectArgs) -> Result<PathBuf, CliError> {
    if let Some(out) = &args.out {
        return std::path::absolute(out)
            .map_err(|e| CliError::BadInput(format!("--out {}: {e}", out.display())));
    }
    tempfile::Builder::new()
        .prefix(crate::bisect::TEMP_PREFIX)
        .tempdir()
        .map(tempfile::TempDir::keep)
        .map_err(|e| CliError::Infrastructure(format!("cannot make a folder for the bisect: {e}")))
}

/// Prints each step and note, and appends them to OUT/bisect.log once
/// the folder is the bisect's (what was said before, then).
struct Printer {
    log: Option<PathBuf>,
    pending: Vec<String>,
}

impl Printer {
    fn new() -> Self {
        Printer {
            log: None,
            pending: Vec::new(),
        }
    }

    fn say(&mut self, text: &str) {
        write_stderr(text);
        self.log_only(text);
    }

    /// Append to bisect.log only (the answer, printed on stdout).
    fn log_only(&mut self, text: &str) {
        let text = crate::redact::mask_written(text).into_owned();
        let Some(log) = &self.log else {
            self.pending.push(text);
            return;
        };
        if let Ok(mut file) = std::fs::File::options().create(true).append(true).open(log) {
            let _ = writeln!(file, "{text}");
        }
    }
}

impl Progress for Printer {
    fn step(&mut self, step: &Step, good_end: Option<&Step>) {
        self.say(&crate::report::bisect::step_line(step, good_end));
    }

    fn note(&mut self, text: &str) {
        self.say(text);
    }

    fn claimed(&mut self, out: &Path) {
        self.log = Some(out.join("bisect.log"));
        for text in std::mem::take(&mut self.pending) {
            self.log_only(&text);
        }
    }
}
