//! The command line: clap definitions, the subcommands as short pipelines,
//! and the mapping from errors to documented exit codes.
//!
//! Library errors arrive here typed; this is the only place that decides
//! which exit code a problem earns: 2 when the user's input is wrong and
//! nothing ran, 3 when oomgate's surroundings failed it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::measure::nvml::Gpu;
use crate::measure::{HostSampler, Sampler};
use crate::report::files::ResultFiles;
use crate::report::terminal::Terminal;
use crate::report::{FanOut, Reporter};
use crate::results::{Measurement, RunResults};
use crate::run::{Interrupt, RunError, Runner, process};
use crate::suite::{self, Case, GpuMode, Suite, SuiteError, shell_join};
use crate::units::format_duration;

const EXIT_CODES: &str = "\
Exit codes:
  0    every case passed
  1    at least one case failed (budget exceeded, non-zero exit, timeout, killed)
  2    bad input: invalid suite, unknown flag, no case matched; nothing ran
  3    infrastructure error: cannot write the out dir, GPU required but NVML unavailable
  130  interrupted (Ctrl-C or SIGTERM); results so far were written";

#[derive(Debug, Parser)]
#[command(
    name = "oomgate",
    version,
    about = "Catch out-of-memory in CI, not in production: run a suite of workloads, \
             measure their peak memory, fail the build on a breach.",
    after_help = EXIT_CODES,
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a suite: launch every case, measure peak memory, write reports.
    #[command(after_help = concat!(
        "Examples:\n",
        "  oomgate run suites/quickstart.toml\n",
        "  oomgate run suites/train.toml --out ci-out --junit reports/oomgate.xml --filter bs64\n",
        "  oomgate run suites/train.toml --gpu required   # exit 3 if NVML cannot be loaded\n\n",
        "Writes OUT/results.json, OUT/junit.xml and OUT/cases/<case>/{stdout.log,stderr.log,timeline.json}.\n\n",
        "Exit codes:\n",
        "  0    every case passed\n",
        "  1    at least one case failed (budget exceeded, non-zero exit, timeout, killed)\n",
        "  2    bad input: invalid suite, unknown flag, no case matched; nothing ran\n",
        "  3    infrastructure error: cannot write the out dir, GPU required but NVML unavailable\n",
        "  130  interrupted (Ctrl-C or SIGTERM); results so far were written"
    ))]
    Run(RunArgs),
    /// Validate a suite and print every case after matrix expansion; runs nothing.
    #[command(
        after_help = "Examples:\n  oomgate check suites/quickstart.toml\n  oomgate check suites/train.toml --filter bs64\n\nExit codes: 0 valid, 2 invalid (every problem is listed with file:line:col)."
    )]
    Check(PlanArgs),
    /// Print the id of every case, one per line; runs nothing.
    #[command(
        after_help = "Examples:\n  oomgate list suites/quickstart.toml\n  oomgate list suites/train.toml --filter bs64 | wc -l\n\nExit codes: 0 listed, 2 invalid suite or no case matched."
    )]
    List(PlanArgs),
    /// Show every GPU NVML sees: memory, modes, processes, and how CUDA_VISIBLE_DEVICES maps.
    #[command(
        after_help = "Examples:\n  oomgate gpus\n  CUDA_VISIBLE_DEVICES=1 oomgate gpus --json | jq '.devices[].name'\n\nExit codes: 0 listed, 3 NVML cannot be loaded (the reason is printed in one line)."
    )]
    Gpus(GpusArgs),
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The suite file.
    pub suite: PathBuf,
    /// Only cases whose id contains this text; repeat to take the union.
    #[arg(long, value_name = "SUBSTRING")]
    pub filter: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub plan: PlanArgs,
    /// Folder for results.json, junit.xml and per-case logs.
    #[arg(long, value_name = "DIR", default_value = "oomgate-out")]
    pub out: PathBuf,
    /// Also write the JUnit report here.
    #[arg(long, value_name = "PATH")]
    pub junit: Option<PathBuf>,
    /// Also write results.json here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Measure GPU memory: auto (when NVML loads), required (else exit 3)
    /// or off. Overrides the suite's `gpu`.
    #[arg(long, value_enum, value_name = "MODE")]
    pub gpu: Option<GpuMode>,
}

#[derive(Debug, Args)]
pub struct GpusArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The outcomes oomgate reports through its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Passed = 0,
    CasesFailed = 1,
    BadInput = 2,
    Infrastructure = 3,
    Interrupted = 130,
}

impl From<Outcome> for ExitCode {
    fn from(outcome: Outcome) -> Self {
        ExitCode::from(outcome as u8)
    }
}

/// A problem that ends oomgate before or outside the cases' verdicts.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Suite(#[from] SuiteError),
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    Infrastructure(String),
    #[error(transparent)]
    Run(#[from] RunError),
}

impl CliError {
    pub fn outcome(&self) -> Outcome {
        match self {
            CliError::Suite(SuiteError::Invalid { .. }) | CliError::BadInput(_) => {
                Outcome::BadInput
            }
            // A suite path that cannot be read is the user's input too.
            CliError::Suite(SuiteError::Read { .. }) => Outcome::BadInput,
            CliError::Infrastructure(_) | CliError::Run(_) => Outcome::Infrastructure,
        }
    }
}

/// Dispatch a parsed command line.
pub fn execute(cli: Cli) -> Result<Outcome, CliError> {
    match cli.command {
        Command::Run(args) => run(&args),
        Command::Check(args) => check(&args),
        Command::List(args) => list(&args),
        Command::Gpus(args) => gpus(&args),
    }
}

/// `oomgate run`: load, plan, prepare outputs, run, judge.
pub fn run(args: &RunArgs) -> Result<Outcome, CliError> {
    let suite = suite::load(&args.plan.suite)?;
    let cases = plan(&suite, &args.plan.filter)?;
    let outputs = prepare_outputs(args)?;
    // Absolute, because workloads receive it as OOMGATE_OUT in their own cwd.
    let out_dir = std::path::absolute(&args.out).map_err(|e| {
        CliError::Infrastructure(format!("cannot resolve {}: {e}", args.out.display()))
    })?;
    let interrupt = Interrupt::install()
        .map_err(|e| CliError::Infrastructure(format!("cannot install signal handlers: {e}")))?;
    if let Err(e) = process::become_subreaper() {
        write_stderr(&format!(
            "warning: cannot become a child subreaper ({e}); processes that detach from a case may be missed"
        ));
    }

    let (gpu, gpu_note) = open_gpu(args.gpu.unwrap_or(suite.gpu))?;
    let samplers: Vec<Box<dyn Sampler>> = vec![Box::new(HostSampler)];
    let measurement = Measurement {
        sample_interval_ms: u64::try_from(suite.sample_interval.as_millis()).unwrap_or(u64::MAX),
        host_method: "procfs-rss".to_string(),
        gpu_method: gpu.as_ref().map(|_| "nvml".to_string()),
        gpu_note,
    };
    let mut reporter = FanOut::new(vec![
        Box::new(Terminal::new()),
        Box::new(outputs) as Box<dyn Reporter>,
    ]);
    let results = Runner::new(&suite, &out_dir, interrupt, samplers, gpu, measurement)
        .run(&cases, &mut reporter)?;
    Ok(judge(&results))
}

/// NVML as the GPU mode asks: the handle, or why there is none.
fn open_gpu(mode: GpuMode) -> Result<(Option<Gpu>, Option<String>), CliError> {
    match mode {
        GpuMode::Off => Ok((
            None,
            Some("GPU measurement is off (gpu = \"off\")".to_string()),
        )),
        GpuMode::Auto => match Gpu::open() {
            Ok(gpu) => Ok((Some(gpu), None)),
            Err(why) => Ok((None, Some(format!("{why}; measuring host memory only")))),
        },
        GpuMode::Required => match Gpu::open() {
            Ok(gpu) => Ok((Some(gpu), None)),
            Err(why) => Err(CliError::Infrastructure(format!(
                "GPU memory is required (gpu = \"required\") but cannot be measured: {why}"
            ))),
        },
    }
}

/// `oomgate gpus`: what NVML sees, for people or (`--json`) machines.
pub fn gpus(args: &GpusArgs) -> Result<Outcome, CliError> {
    let mut gpu = Gpu::open()
        .map_err(|why| CliError::Infrastructure(format!("no GPU can be inspected: {why}")))?;
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

/// The exit status a finished run earns.
pub fn judge(results: &RunResults) -> Outcome {
    if results.interrupted {
        Outcome::Interrupted
    } else if results.summary.not_passed() > 0 {
        Outcome::CasesFailed
    } else {
        Outcome::Passed
    }
}

/// `oomgate check`: the expanded plan, in full.
pub fn check(args: &PlanArgs) -> Result<Outcome, CliError> {
    let suite = suite::load(&args.suite)?;
    let cases = plan(&suite, &args.filter)?;
    write_stdout(&describe_plan(&suite, &cases));
    Ok(Outcome::Passed)
}

/// `oomgate list`: one id per line.
pub fn list(args: &PlanArgs) -> Result<Outcome, CliError> {
    let suite = suite::load(&args.suite)?;
    let ids: String = plan(&suite, &args.filter)?
        .iter()
        .map(|case| format!("{}\n", case.id))
        .collect();
    write_stdout(&ids);
    Ok(Outcome::Passed)
}

/// Print to stdout; a closed pipe (`oomgate list s.toml | head -1`) is not
/// an error worth a panic.
fn write_stdout(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// Print a line to stderr, ignoring a closed stream.
pub fn write_stderr(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// The cases to run. A filter that matches nothing is a mistake, not a pass.
fn plan<'s>(suite: &'s Suite, filters: &[String]) -> Result<Vec<&'s Case>, CliError> {
    let cases = suite.filtered(filters);
    if cases.is_empty() {
        let ids: Vec<&str> = suite.cases.iter().map(|c| c.id.as_str()).collect();
        return Err(CliError::BadInput(format!(
            "no case of {} matches --filter {}; case ids: {}",
            suite.path.display(),
            filters.join(" --filter "),
            ids.join(", ")
        )));
    }
    Ok(cases)
}

/// Create the out dir and check that every report path can be written
/// before any GPU time is spent.
fn prepare_outputs(args: &RunArgs) -> Result<ResultFiles, CliError> {
    let infra = |path: &Path, e: std::io::Error| {
        CliError::Infrastructure(format!("cannot write to {}: {e}", path.display()))
    };
    std::fs::create_dir_all(args.out.join("cases")).map_err(|e| infra(&args.out, e))?;
    let mut files = ResultFiles {
        json: vec![args.out.join("results.json")],
        junit: vec![args.out.join("junit.xml")],
    };
    files.json.extend(args.json.clone());
    files.junit.extend(args.junit.clone());
    for path in files.json.iter().chain(&files.junit) {
        let folder = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(folder).map_err(|e| infra(folder, e))?;
        tempfile::tempfile_in(folder).map_err(|e| infra(folder, e))?;
        if path.is_dir() {
            return Err(CliError::Infrastructure(format!(
                "{} is a directory, not a file path",
                path.display()
            )));
        }
    }
    Ok(files)
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
        let _ = writeln!(out, "  command:     {}", shell_join(&case.command));
        if case.program.is_absolute() {
            let _ = writeln!(out, "  program:     {}", case.program.display());
        }
        let _ = writeln!(out, "  cwd:         {}", case.cwd.display());
        if !case.env.is_empty() {
            let env: Vec<String> = case.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
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
        let _ = writeln!(out, "  limits:      {}", limits.join(", "));
        let _ = writeln!(out, "  folder:      cases/{}", case.folder);
    }
    out
}
