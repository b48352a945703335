//! The command line as clap reads it: `Cli`, each subcommand's arguments,
//! and the exit codes `--help` lists.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::pool;
use crate::suite::GpuMode;

const EXIT_CODES: &str = "\
Exit codes:
  0    every case passed
  1    at least one case failed (budget exceeded, non-zero exit, timeout, killed)
  2    bad input: invalid suite, unknown flag, no case matched, a --gpus pool that
       cannot be used; nothing ran
  3    infrastructure error: the out dir, a report or a case's files cannot be written
       (no case is launched after it; 3 wins over 130, 1 and 0), GPU required (or
       --gpus) but NVML unavailable, --host-method cgroup but no memory cgroup can be created
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
        "  oomgate run suites/train.toml --gpu required   # exit 3 if NVML cannot be loaded\n",
        "  oomgate run suites/train.toml --gpus all       # cases at once, each on its own GPU(s)\n",
        "  oomgate run suites/serve.toml --gpus 0,1 --pack  # small cases share a GPU\n\n",
        "Writes OUT/results.json, OUT/junit.xml, OUT/summary.md, OUT/report.html and OUT/cases/<case>/{stdout.log,stderr.log,timeline.json}.\n",
        "A suite with [[pytest]]: one case per test, collected and run in one shared pytest session per table, each test judged by the memory it added; `isolate = true` runs each in a process of its own (docs/pytest.md).\n\n",
        "Exit codes:\n",
        "  0    every case passed\n",
        "  1    at least one case failed (budget exceeded, non-zero exit, timeout, killed)\n",
        "  2    bad input: invalid suite, unknown flag, no case matched; nothing ran\n",
        "  3    infrastructure error: the out dir, a report or a case's files cannot be written\n",
        "       (no case is launched after it; 3 wins over 130, 1 and 0), GPU required but NVML\n",
        "       unavailable, --host-method cgroup but no memory cgroup can be created\n",
        "  130  interrupted (Ctrl-C or SIGTERM); results so far were written"
    ))]
    Run(RunArgs),
    /// Validate a suite and print every case after matrix expansion; runs no case.
    #[command(
        after_help = "Examples:\n  oomgate check suites/quickstart.toml\n  oomgate check suites/train.toml --filter bs64\n\nA suite with [[pytest]] is collected first (`pytest --collect-only`), which imports its\ntest modules; a collection error is exit 2 with pytest's own message.\n\nExit codes: 0 valid, 2 invalid (every problem is listed with file:line:col)."
    )]
    Check(PlanArgs),
    /// Print the id of every case, one per line; runs no case.
    #[command(
        after_help = "Examples:\n  oomgate list suites/quickstart.toml\n  oomgate list suites/train.toml --filter bs64 | wc -l\n\nA suite with [[pytest]] is collected first (`pytest --collect-only`), which imports its\ntest modules; a pytest case's id is its node id.\n\nExit codes: 0 listed, 2 invalid suite, collection error or no case matched."
    )]
    List(PlanArgs),
    /// Show every GPU NVML sees: memory, modes, processes, and how CUDA_VISIBLE_DEVICES maps.
    #[command(
        after_help = "Examples:\n  oomgate gpus\n  CUDA_VISIBLE_DEVICES=1 oomgate gpus --json | jq '.devices[].name'\n\nExit codes: 0 listed, 3 NVML cannot be loaded or lists no GPU (the reason is printed in one line)."
    )]
    Gpus(GpusArgs),
    /// Lock a passing run as the baseline: run the suite, or take a results.json.
    #[command(after_help = concat!(
        "Examples:\n",
        "  oomgate lock suites/quickstart.toml                  # run, and lock if every case passes\n",
        "  oomgate lock suites/train.toml --from ci-out/results.json   # lock a CI artifact, no GPU time\n",
        "  oomgate lock suites/train.toml --filter bs64          # re-lock some cases, keep the others'\n\n",
        "Writes <suite>.lock beside the suite (or --output). A run with a case that failed on its own writes\n",
        "nothing; results whose cases failed only against the old baseline are locked (an intended change).\n",
        "A suite with [[pytest]] is collected first, unless --from names the results to lock.\n\n",
        "Exit codes: 0 locked, 1 not locked (a case failed), 2 bad input (suite, results file), 3 infrastructure, 130 interrupted."
    ))]
    Lock(LockArgs),
    /// Merge the results of a suite's shards (run on several CI runners) into one set of reports.
    #[command(after_help = concat!(
        "Examples:\n",
        "  oomgate merge shards/1 shards/2 shards/3 --out merged --suite suites/train.toml\n",
        "  oomgate merge shard-*/results.json --out merged\n\n",
        "Each DIR is the out dir of one shard (`oomgate run ... --partition count:M/N`), or its\n",
        "results.json. Writes OUT/results.json, OUT/junit.xml, OUT/summary.md and OUT/report.html,\n",
        "with each case's folder under OUT/cases/ (linked where the file system allows, else copied),\n",
        "and appends summary.md to $GITHUB_STEP_SUMMARY when it is set. With --suite, the suite's\n",
        "cases that no part ran are listed as not run (a failure) and the cases follow its order.\n\n",
        "Exit codes:\n",
        "  0    every case of every part passed, and none is missing\n",
        "  1    a case failed, or was not run (a shard interrupted or stopped, or missing with --suite)\n",
        "  2    bad input: a part that cannot be read, parts that overlap (a case in two), come from\n",
        "       different suites or results schemas, or cases --suite does not have; nothing written\n",
        "  3    infrastructure error: the out dir or a report cannot be written"
    ))]
    Merge(MergeArgs),
    /// Find the commit, package version or set of package changes that made a case grow.
    #[command(after_help = concat!(
        "Examples:\n",
        "  oomgate bisect suite.toml --case train --good v1.4 --bad main --build 'make'\n",
        "  oomgate bisect suite.toml --case train --package torch --good 2.9.1 --bad 2.10.0\n",
        "  oomgate bisect suite.toml --case train --good-run good/results.json --bad-run bad/results.json\n",
        "  git bisect run oomgate bisect suite.toml --case train --check --against good.lock\n\n",
        "Commits run in worktrees of their own under --out (the checkout is never touched), package\n",
        "versions in one virtual environment of the bisect's own. Both ends are run first (--repeat\n",
        "times); each candidate is judged by `oomgate run` against a lock of the good end. A candidate\n",
        "that does not build, install or start, or fails for a reason that is not memory, is skipped,\n",
        "never blamed. Writes OUT/bisect.json, OUT/bisect.md, OUT/bisect.log and each step under\n",
        "OUT/steps/ (docs/bisect.md).\n\n",
        "Exit codes:\n",
        "  0    the first bad candidate was found\n",
        "  1    no answer: the ends do not differ here, or the first bad is one of several skipped\n",
        "  2    bad input: unknown revision or version, an end that is not what it was said to be\n",
        "  3    infrastructure: git or the out dir failed\n",
        "  130  interrupted; worktrees and environment removed, the log kept (--resume continues)\n\n",
        "With --check (for `git bisect run`): 0 good, 1 bad (memory), 125 cannot tell (no build,\n",
        "a crash that is not memory, no such case at this commit), 128 bad input or a broken\n",
        "environment (aborts git bisect)."
    ))]
    Bisect(BisectArgs),
    /// Compare two results.json or lock files, running nothing.
    #[command(after_help = concat!(
        "Examples:\n",
        "  oomgate diff suites/train.lock ci-out/results.json\n",
        "  oomgate diff old/results.json new/results.json\n\n",
        "Exit codes: 0 no regression, 1 a figure regressed beyond the default tolerances, 2 a file cannot be read."
    ))]
    Diff(DiffArgs),
    /// Propose budgets from a profiled run: a pytest marker or suite TOML per case, from its peaks.
    #[command(after_help = concat!(
        "Examples:\n",
        "  oomgate budgets oomgate-out/results.json                 # @pytest.mark.oomgate(host=..., gpu=...)\n",
        "  oomgate budgets oomgate-out/results.json --factor 1.25 --format toml\n\n",
        "Each case that passed gets its measured host and GPU peaks times --factor, rounded up\n",
        "(whole MiB below 1 GiB, tenths of a GiB above). Cases that did not pass get none.\n\n",
        "Exit codes: 0 printed, 2 the results cannot be read or no case matched."
    ))]
    Budgets(BudgetsArgs),
    /// Print the allocation sites of a run's cases, or of one torch memory snapshot.
    #[command(after_help = concat!(
        "Examples:\n",
        "  oomgate sites oomgate-out/results.json\n",
        "  oomgate sites oomgate-out/results.json --case train-bs64\n",
        "  oomgate sites oomgate-out/cases/train-bs64/memory_snapshot.pickle --depth 3\n\n",
        "A case's sites come from the torch memory snapshots it left in its folder\n",
        "(OOMGATE_SNAPSHOT, or its own torch.cuda.memory._dump_snapshot): the bytes live at each\n",
        "device's peak, by the first frame of the user's code (docs/diagnosis.md#allocation-sites).\n\n",
        "Exit codes: 0 printed, 2 the file cannot be read, or holds no sites."
    ))]
    Sites(SitesArgs),
    /// The run history: record past runs, show each case's figures over
    /// time, prune old runs (docs/history.md).
    #[command(subcommand)]
    History(HistoryCommand),
}

#[derive(Debug, Args)]
pub struct SitesArgs {
    /// A results.json, or a memory snapshot (`.pickle`).
    pub path: PathBuf,
    /// Only this case (its id).
    #[arg(long, value_name = "ID")]
    pub case: Option<String>,
    /// With a .pickle: how many of the user's frames name a site.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=16))]
    pub depth: Option<u32>,
    /// How many sites to print per case (the rest summed).
    #[arg(long, value_name = "N", default_value = "20")]
    pub top: usize,
    /// Print JSON: each case's sites as results.json holds them.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BudgetsArgs {
    /// A results.json of a run that measured the cases.
    pub results: PathBuf,
    /// Headroom over the measured peaks: 1.1 proposes 10% more.
    #[arg(long, default_value = "1.1", value_parser = parse_factor)]
    pub factor: f64,
    /// `marker`: `@pytest.mark.oomgate(...)` for each pytest test;
    /// `toml`: a `budget = { ... }` line for any case.
    #[arg(long, value_enum, default_value = "marker")]
    pub format: BudgetFormat,
    /// Only cases whose id contains this text (`=ID`: that case alone; a
    /// whole pytest node id: that test alone); repeat to take the union.
    #[arg(long, value_name = "SUBSTRING")]
    pub filter: Vec<String>,
}

/// How `oomgate budgets` writes a proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BudgetFormat {
    Marker,
    Toml,
}

fn parse_factor(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if (1.0..=100.0).contains(&f) => Ok(f),
        _ => Err(format!(
            "`{text}` is not a factor from 1 to 100 (1.1 is 10% of headroom)"
        )),
    }
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The suite file.
    pub suite: PathBuf,
    /// Only cases whose id contains this text (`=ID`: that case alone; a
    /// whole pytest node id: that test alone); repeat to take the union.
    #[arg(long, value_name = "SUBSTRING")]
    pub filter: Vec<String>,
    /// Only this shard of the cases (after --filter): count:M/N deals them
    /// round-robin in the suite's order, hash:M/N by a hash of the case id
    /// (stable when cases are added). Every shard computes the same split.
    #[arg(long, value_name = "count:M/N|hash:M/N")]
    pub partition: Option<crate::suite::Partition>,
    /// Use this interpreter as the suite's `[environment] python` (and for
    /// `[[pytest]]` tables that name none).
    #[arg(long, value_name = "PATH")]
    pub python: Option<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub plan: PlanArgs,
    /// Folder for results.json, junit.xml and per-case logs.
    #[arg(long, value_name = "DIR", default_value = "oomgate-out")]
    pub out: PathBuf,
    #[command(flatten)]
    pub adopt: AdoptArgs,
    #[command(flatten)]
    pub record: RecordArgs,
    /// Also write the JUnit report here.
    #[arg(long, value_name = "PATH")]
    pub junit: Option<PathBuf>,
    /// Also write results.json here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Measure GPU memory: auto (when NVML loads), required (else exit 3)
    /// or off. Overrides the suite's `gpu`. (A pool of GPUs is `--gpus`.)
    #[arg(long, value_name = "MODE", value_parser = pool::parse_gpu_mode)]
    pub gpu: Option<GpuMode>,
    #[command(flatten)]
    pub schedule: pool::ScheduleArgs,
    /// Measure host memory with a memory cgroup per case: auto (when one
    /// can be created, else from /proc, saying why), cgroup (else exit 3)
    /// or procfs (never).
    #[arg(long, value_enum, value_name = "METHOD", default_value = "auto")]
    pub host_method: HostMode,
    /// How progress is shown: auto (a live line on an interactive terminal,
    /// plain lines in CI, on a 0x0 terminal or in a log), bar, lines, none.
    #[arg(long, value_enum, value_name = "STYLE", default_value = "auto")]
    pub progress: ProgressMode,
    /// Run each case at least N times; the judge takes the repeat that
    /// stands, as for a case's own `repeat` (which, if larger, stands).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=100))]
    pub repeat: Option<u32>,
    /// Compare with this lock instead of `<suite>.lock`.
    #[arg(long, value_name = "PATH", conflicts_with = "no_baseline")]
    pub baseline: Option<PathBuf>,
    /// Compare with no baseline, even if `<suite>.lock` exists.
    #[arg(long)]
    pub no_baseline: bool,
    /// Fail cases that have no baseline instead of passing them with a notice.
    #[arg(long)]
    pub require_baseline: bool,
    /// Compare GPU figures even when the GPU model differs from the
    /// baseline's (a lock written before testbeds).
    #[arg(long)]
    pub compare_across_gpus: bool,
    /// Compare every case with this testbed's entries of the lock
    /// (`"NVIDIA A100-SXM4-80GB ×1"`), whatever GPUs it ran on; by default
    /// a case is compared with its own testbed's only.
    #[arg(long, value_name = "TESTBED")]
    pub baseline_testbed: Option<String>,
}

/// Where a run is recorded, and where it came from (`run`, `lock`,
/// `merge`, `history add`).
#[derive(Debug, Args, Default)]
pub struct RecordArgs {
    /// Record the run in this history: `sqlite:PATH` or `postgres://…`
    /// (else `OOMGATE_HISTORY`, else the suite's `[suite] history`).
    #[arg(long, value_name = "LOCATION", conflicts_with = "no_history")]
    pub history: Option<String>,
    /// Record nothing, whatever `OOMGATE_HISTORY` or the suite says.
    #[arg(long)]
    pub no_history: bool,
    /// The run's commit (else the CI's variables, else git where the
    /// suite lives).
    #[arg(long, value_name = "SHA")]
    pub commit: Option<String>,
    /// The run's branch (else the CI's variables, else git).
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
}

/// `--adopt-out-dir`, for the commands that write an out dir (`run`,
/// `lock`, `merge`).
#[derive(Debug, Args)]
pub struct AdoptArgs {
    /// Take over, once, an out dir an oomgate from before the
    /// `.oomgate-out` marker wrote (results.json, junit.xml, summary.md,
    /// report.html, cases/ and nothing else): it is marked, and its files
    /// are replaced as a run's. Without it such a folder is refused, as is
    /// any folder with files and no marker.
    #[arg(long)]
    pub adopt_out_dir: bool,
}

#[derive(Debug, Args)]
pub struct BisectArgs {
    /// The suite file (for commits: its path in the repository).
    pub suite: PathBuf,
    /// The case to bisect: its whole id.
    #[arg(long, value_name = "ID")]
    pub case: String,
    /// The good end: a commit (any git revision), or with --package a version.
    #[arg(long, value_name = "REV|VERSION")]
    pub good: Option<String>,
    /// The bad end: a commit, or with --package a version.
    #[arg(long, value_name = "REV|VERSION")]
    pub bad: Option<String>,
    /// A shell command run in each commit's worktree before the case
    /// (with --check: here); one that fails skips the commit.
    #[arg(long, value_name = "CMD")]
    pub build: Option<String>,
    /// Every commit of the range, not only those along first parents
    /// (where a merge is one step).
    #[arg(long)]
    pub all_parents: bool,
    /// Find every step in the range, not only the first.
    #[arg(long)]
    pub all_steps: bool,
    /// Bisect this package's versions from --good to --bad.
    #[arg(long, value_name = "NAME")]
    pub package: Option<String>,
    /// Bisect the package changes between this run's results.json
    /// (good) and --bad-run's; with --package, pin the other packages
    /// to this run's versions.
    #[arg(long, value_name = "RESULTS")]
    pub good_run: Option<PathBuf>,
    /// The bad run's results.json (with --good-run).
    #[arg(long, value_name = "RESULTS", requires = "good_run")]
    pub bad_run: Option<PathBuf>,
    /// Also look for packages in this folder (pip's --find-links).
    #[arg(long, value_name = "DIR")]
    pub find_links: Vec<PathBuf>,
    /// Take packages from this index instead of pip's configured one.
    #[arg(long, value_name = "URL")]
    pub index_url: Option<String>,
    /// No index: only --find-links.
    #[arg(long)]
    pub no_index: bool,
    /// Pre-releases and nightlies count as versions.
    #[arg(long)]
    pub pre: bool,
    /// Judge the case here, once, for `git bisect run` (exit 0 good, 1
    /// bad, 125 cannot tell, 128 bad input).
    #[arg(long, conflicts_with_all = ["good", "bad", "package", "good_run", "all_steps", "resume"])]
    pub check: bool,
    /// With --check: judge against this lock or good run's results.json
    /// (else by the case's budgets and limits alone).
    #[arg(long, value_name = "PATH", requires = "check")]
    pub against: Option<PathBuf>,
    /// Run each end and each candidate at least N times: a bad verdict
    /// must pass the good end's spread.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=100))]
    pub repeat: Option<u32>,
    /// The bisect's folder (default: a new one in the system's temporary
    /// directory, printed).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Also write bisect.json here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Continue the bisect in --out: the steps it ran are taken, not run again.
    #[arg(long, requires = "out")]
    pub resume: bool,
    /// Keep each step's run in this history, and take those a bisect
    /// before ran from it (`sqlite:PATH` or `postgres://…`; else
    /// `OOMGATE_HISTORY`, else the suite's `[suite] history`).
    #[arg(long, value_name = "LOCATION", conflicts_with = "no_history")]
    pub history: Option<String>,
    /// Keep nothing in a history, whatever `OOMGATE_HISTORY` or the suite says.
    #[arg(long)]
    pub no_history: bool,
    /// GPU mode for each run; see `run --help`.
    #[arg(long, value_name = "MODE", value_parser = pool::parse_gpu_mode)]
    pub gpu: Option<GpuMode>,
    /// A pool of GPUs (`0,1,2,3`, UUIDs, or `all`): each run gets the
    /// case's `gpus` of them, and commits run as many at once as the pool
    /// holds (a k-way split instead of halving).
    #[arg(long, value_name = "all|LIST", value_parser = pool::parse_pool)]
    pub gpus: Option<pool::PoolSpec>,
    /// Host memory method for each run; see `run --help`.
    #[arg(long, value_enum, value_name = "METHOD")]
    pub host_method: Option<HostMode>,
}

#[derive(Debug, Args)]
pub struct LockArgs {
    /// The suite file.
    pub suite: PathBuf,
    /// Lock this results.json (e.g. a CI artifact) instead of running the suite.
    #[arg(long, value_name = "RESULTS")]
    pub from: Option<PathBuf>,
    /// Only cases whose id contains this text (`=ID`: that case alone; a
    /// whole pytest node id: that test alone); the others keep their
    /// locked baseline. Repeat to take the union.
    #[arg(long, value_name = "SUBSTRING")]
    pub filter: Vec<String>,
    /// Write the lock here instead of `<suite>.lock`.
    #[arg(long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Use this interpreter as the suite's `[environment] python` (and for
    /// `[[pytest]]` tables that name none).
    #[arg(long, value_name = "PATH")]
    pub python: Option<String>,
    /// Folder for the run's reports (without --from).
    #[arg(long, value_name = "DIR", default_value = "oomgate-out")]
    pub out: PathBuf,
    #[command(flatten)]
    pub adopt: AdoptArgs,
    /// Where the run is recorded (without --from: a locked results.json
    /// is recorded with `history add`).
    #[command(flatten)]
    pub record: RecordArgs,
    /// Also accept the locked figures as each case's new ratchet in the
    /// history, with this reason (a re-lock alone never moves one).
    #[arg(long, value_name = "REASON")]
    pub accept: Option<String>,
    /// Run each case at least N times and lock each figure's spread (the
    /// largest less the smallest): later runs are a regression only beyond
    /// `max(tolerance, spread_k × spread)`. A case's own `repeat`, if
    /// larger, stands.
    #[arg(long, value_name = "N", conflicts_with = "from", value_parser = clap::value_parser!(u32).range(2..=100))]
    pub repeat: Option<u32>,
    /// GPU mode for the run (without --from).
    #[arg(long, value_name = "MODE", value_parser = pool::parse_gpu_mode)]
    pub gpu: Option<GpuMode>,
    /// The GPU pool, jobs and packing for the run (without --from); see
    /// `run --help`.
    #[command(flatten)]
    pub schedule: pool::ScheduleArgs,
    /// Host memory method for the run (without --from); see `run --help`.
    #[arg(long, value_enum, value_name = "METHOD", default_value = "auto")]
    pub host_method: HostMode,
    /// How progress is shown (without --from); see `run --help`.
    #[arg(long, value_enum, value_name = "STYLE", default_value = "auto")]
    pub progress: ProgressMode,
}

/// How progress is shown while cases run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// A live line on an interactive terminal; plain lines in CI (`CI`,
    /// `GITHUB_ACTIONS`, `GITLAB_CI`, `JENKINS_URL`, ... set),
    /// on a terminal without a size, with `TERM=dumb`, or in a log file.
    #[default]
    Auto,
    /// The live line, redrawn in place.
    Bar,
    /// One line per finished case, and a RUNNING line every minute.
    Lines,
    /// Warnings, the final table and the summary only.
    None,
}

impl From<ProgressMode> for crate::report::terminal::Progress {
    fn from(mode: ProgressMode) -> Self {
        use crate::report::terminal::Progress;
        match mode {
            ProgressMode::Auto => Progress::Auto,
            ProgressMode::Bar => Progress::Bar,
            ProgressMode::Lines => Progress::Lines,
            ProgressMode::None => Progress::None,
        }
    }
}

/// How host memory is measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum HostMode {
    /// A memory cgroup per case when one can be created; else /proc.
    #[default]
    Auto,
    /// A memory cgroup per case, or exit 3.
    Cgroup,
    /// /proc only (PSS, VmHWM, reaped rusage), never a cgroup.
    Procfs,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shards' out dirs (or their results.json), in the order to merge.
    #[arg(required = true, value_name = "DIR")]
    pub parts: Vec<PathBuf>,
    /// Folder for the merged results.json, junit.xml, summary.md, report.html
    /// and case folders.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    #[command(flatten)]
    pub adopt: AdoptArgs,
    /// The suite the shards ran: its cases no part ran are listed as not run,
    /// and the cases follow its order.
    #[arg(long, value_name = "SUITE.toml")]
    pub suite: Option<PathBuf>,
    /// Where the merged run is recorded (the shards record nothing).
    #[command(flatten)]
    pub record: RecordArgs,
}

/// `oomgate history`'s subcommands.
#[derive(Debug, Subcommand)]
pub enum HistoryCommand {
    /// Record past runs from their results.json (CI artifacts), oldest
    /// first or in any order: each run once, by its id.
    #[command(after_help = concat!(
        "Examples:\n",
        "  oomgate history add artifacts/*/results.json --history sqlite:oomgate-history.sqlite\n",
        "  oomgate history add ci-out/results.json --commit 3f2a9c1 --branch main\n\n",
        "A results.json written before run ids is recorded under a hash of its content, so adding\n",
        "it twice keeps one. A shard's results (--partition) are refused: record the merge.\n\n",
        "Exit codes: 0 recorded (or already there), 2 a file is not results or the location is\n",
        "wrong, 3 the history cannot be opened or written."
    ))]
    Add(HistoryAddArgs),
    /// Show each case's figure over the recorded runs, with a sparkline.
    #[command(after_help = concat!(
        "Examples:\n",
        "  oomgate history show --history sqlite:oomgate-history.sqlite\n",
        "  oomgate history show --case train-bs64 --last 50 --figure host_peak_bytes\n",
        "  oomgate history show --branch main --json | jq '.runs[-1].cases'\n\n",
        "Exit codes: 0 shown, 2 bad input, 3 the history cannot be opened or read."
    ))]
    Show(HistoryShowArgs),
    /// Accept a case's current figures as its new ratchet: growth so far is
    /// intended (a bigger model), and creep is measured from here.
    #[command(after_help = concat!(
        "Examples:\n",
        "  oomgate history accept train-bs64 --reason \"batch 64 now keeps activations\" --history sqlite:h.sqlite\n",
        "  oomgate history accept train-bs64 serve-c32 --reason \"torch 2.6\" --branch main\n\n",
        "Each case's figures in its newest run on the branch (--branch, else the CI's or git's) become\n",
        "its ratchet there, recorded with who (--by, else the CI's user, else $USER), when and why.\n",
        "A re-lock alone never moves a ratchet; `oomgate lock --accept REASON` does both.\n\n",
        "Exit codes: 0 accepted, 2 a case with no run in the history, or bad input, 3 the history\n",
        "cannot be opened or written."
    ))]
    Accept(HistoryAcceptArgs),
    /// Remove runs older than a duration, with their cases and figures.
    #[command(after_help = concat!(
        "Examples:\n",
        "  oomgate history prune --older-than 180d --history sqlite:oomgate-history.sqlite\n\n",
        "Exit codes: 0 pruned, 2 bad input, 3 the history cannot be opened or written."
    ))]
    Prune(HistoryPruneArgs),
}

/// The history a `history` subcommand reads.
#[derive(Debug, Args)]
pub struct HistoryAt {
    /// The history: `sqlite:PATH` or `postgres://…` (else `OOMGATE_HISTORY`).
    #[arg(long, value_name = "LOCATION")]
    pub history: Option<String>,
}

#[derive(Debug, Args)]
pub struct HistoryAddArgs {
    /// results.json files (or out dirs holding one).
    #[arg(required = true, value_name = "RESULTS")]
    pub results: Vec<PathBuf>,
    #[command(flatten)]
    pub at: HistoryAt,
    /// The runs' commit, when their CI's variables are gone.
    #[arg(long, value_name = "SHA")]
    pub commit: Option<String>,
    /// The runs' branch.
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
}

#[derive(Debug, Args)]
pub struct HistoryShowArgs {
    #[command(flatten)]
    pub at: HistoryAt,
    /// Only this suite's runs (its name).
    #[arg(long, value_name = "NAME")]
    pub suite: Option<String>,
    /// Only this case (its id).
    #[arg(long, value_name = "ID")]
    pub case: Option<String>,
    /// Only cases on this testbed (`"NVIDIA H100 80GB HBM3 ×1"`).
    #[arg(long, value_name = "TESTBED")]
    pub testbed: Option<String>,
    /// Only runs of this branch.
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
    /// The newest N runs.
    #[arg(long, value_name = "N", default_value = "30", value_parser = clap::value_parser!(u32).range(1..))]
    pub last: u32,
    /// The figure to draw: gpu_peak_bytes (the default where a case has
    /// one, else host_peak_bytes), host_working_peak_bytes, capacity, ...
    #[arg(long, value_name = "NAME")]
    pub figure: Option<String>,
    /// Print JSON: `runs`, one entry per run, oldest first.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HistoryAcceptArgs {
    /// The cases (their ids).
    #[arg(required = true, value_name = "CASE")]
    pub cases: Vec<String>,
    /// Why the growth is intended: kept with the acceptance.
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
    #[command(flatten)]
    pub at: HistoryAt,
    /// The suite (its name), where several suites have the case.
    #[arg(long, value_name = "NAME")]
    pub suite: Option<String>,
    /// The branch whose ratchet moves (else the CI's, else git's).
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
    /// Who accepts (else the CI's user, else $USER).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
}

#[derive(Debug, Args)]
pub struct HistoryPruneArgs {
    #[command(flatten)]
    pub at: HistoryAt,
    /// Remove the runs that started longer ago than this (`180d`, `12w`).
    #[arg(long, value_name = "DURATION", value_parser = parse_age)]
    pub older_than: std::time::Duration,
}

fn parse_age(text: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("`{text}` is not a duration (180d, 12w, 720h): {e}"))
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The earlier results.json or lock file: the baseline.
    pub before: PathBuf,
    /// The later results.json or lock file: judged against the earlier.
    pub after: PathBuf,
    /// Judge with this suite's tolerances (and search `max`) instead of
    /// those recorded with the later file's figures.
    #[arg(long, value_name = "SUITE")]
    pub suite: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct GpusArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}
