//! `oomgate`: parse the command line, run the subcommand, exit with its
//! documented status. Everything else lives in the library.

use std::process::ExitCode;

use clap::Parser;
use oomgate::cli::{self, Cli};
use oomgate::run::supervise;

fn main() -> ExitCode {
    // `oomgate __supervise ...` is the small process between oomgate and a
    // workload (see run::supervise): it must do nothing else first, so that
    // its memory stays small.
    let args: Vec<std::ffi::OsString> = std::env::args_os().take(2).collect();
    if args.get(1).is_some_and(|a| a == supervise::ARG) {
        let rest: Vec<std::ffi::OsString> = std::env::args_os().skip(2).collect();
        return ExitCode::from(u8::try_from(supervise::main(&rest)).unwrap_or(2));
    }
    // `oomgate __forkserver ...`: the process that makes those supervisors
    // without executing oomgate for each (see run::supervise::forkserver).
    if args.get(1).is_some_and(|a| a == supervise::forkserver::ARG) {
        let rest: Vec<std::ffi::OsString> = std::env::args_os().skip(2).collect();
        return ExitCode::from(u8::try_from(supervise::forkserver::main(&rest)).unwrap_or(2));
    }
    // `oomgate __cuda-devices`: which devices CUDA shows, asked of libcuda
    // in a process of its own (see measure::cuda).
    if args
        .get(1)
        .is_some_and(|a| a == oomgate::measure::cuda::ARG)
    {
        return ExitCode::from(u8::try_from(oomgate::measure::cuda::main()).unwrap_or(2));
    }
    // Reaping (the case's processes, their high-water marks) needs SIGCHLD
    // at its default: a parent that ignored it would pass that on, and the
    // kernel would reap oomgate's children before oomgate could.
    // SAFETY: setting a signal disposition takes no memory.
    unsafe {
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    }
    if bisect_check() {
        // `git bisect run` reads a panic's 101 as "bad": under the check,
        // a bug of oomgate's own aborts the bisect instead (128), after
        // the panic's message.
        let said = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            said(info);
            std::process::exit(i32::from(cli::Outcome::BisectAbort as u8));
        }));
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    match cli::execute(cli) {
        Ok(outcome) => outcome.into(),
        Err(error) => {
            cli::write_stderr(&format!("error: {error}"));
            error.outcome().into()
        }
    }
}

/// A command line clap refuses: its own message and code (2; help and
/// version are 0), except for `bisect --check`, which `git bisect run`
/// calls: there a mistake in the command line is 128, which aborts the
/// bisect, never a code git reads as "bad".
fn usage_error(error: &clap::Error) -> ExitCode {
    let checking = bisect_check();
    let informational = matches!(
        error.kind(),
        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
    );
    if checking && !informational {
        let _ = error.print();
        return ExitCode::from(cli::Outcome::BisectAbort as u8);
    }
    error.exit()
}

/// Whether the command line asks for `bisect --check` (read before clap,
/// which may refuse it).
fn bisect_check() -> bool {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    args.iter().any(|a| a == "bisect") && args.iter().any(|a| a == "--check")
}
