//! The command line: clap definitions, the subcommands as short pipelines,
//! and the mapping from errors to documented exit codes.
//!
//! Library errors arrive here typed; this is the only place that decides
//! which exit code a problem earns: 2 when the user's input is wrong and
//! nothing ran, 3 when oomgate's surroundings failed it. When a run meets
//! more than one, the first of 3 (a file not written), 130, 1, 0 wins: a
//! write failure is never hidden behind a verdict (`shared::CliError`,
//! from the judge's verdict of a run in `run::judge`). `args` holds the
//! clap definitions, `shared` what every subcommand uses (the errors and
//! their codes, loading a suite, printing); `run` holds the commands that
//! run a suite (`run`, `lock`), `merge` the one that joins the results of
//! a suite's shards, `bisect` the one that finds what made a case grow,
//! `inspect` those that only read (`check`, `list`,
//! `gpus`, `diff`), `budgets` and `sites` theirs. This file only
//! dispatches.

mod args;
mod bisect;
mod budgets;
mod history;
mod inspect;
mod merge;
mod outputs;
mod pool;
mod run;
mod shared;
mod sites;

pub use args::*;
pub use inspect::describe_plan;
pub use run::judge;
pub use shared::{CliError, Outcome, write_stderr};

/// Dispatch a parsed command line.
pub fn execute(cli: Cli) -> Result<Outcome, CliError> {
    match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Lock(args) => run::lock(&args),
        Command::Check(args) => inspect::check(&args),
        Command::List(args) => inspect::list(&args),
        Command::Gpus(args) => inspect::gpus(&args),
        Command::Diff(args) => inspect::diff(&args),
        Command::Merge(args) => merge::merge(&args),
        Command::Bisect(args) => bisect::bisect(&args),
        Command::Budgets(args) => budgets::budgets(&args),
        Command::Sites(args) => sites::sites(&args),
        Command::History(command) => history::history(&command),
    }
}
