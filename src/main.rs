//! `oomgate`: parse the command line, run the subcommand, exit with its
//! documented status. Everything else lives in the library.

use std::process::ExitCode;

use clap::Parser;
use oomgate::cli::{self, Cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli::execute(cli) {
        Ok(outcome) => outcome.into(),
        Err(error) => {
            cli::write_stderr(&format!("error: {error}"));
            error.outcome().into()
        }
    }
}
