//! Launching one instance of a case with duct: its own process group, the
//! case's environment, output straight into its log files.
//!
//! Output goes to the log files by file descriptor, not through a pipe that
//! oomgate copies: a workload printing gigabytes costs oomgate no memory and
//! no CPU, nothing is lost if oomgate dies, and the bounded tail that reports
//! need is read back from the end of the file afterwards (see `logs`).
//!
//! The program is resolved before spawning (relative to the case directory,
//! or on the case's `PATH`) so that a missing or non-executable command gets
//! a message naming it, instead of the bare "No such file or directory" that
//! `execve` gives for a missing program and a missing working directory
//! alike.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use super::process;
use crate::suite::Case;

/// Where one instance writes its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceLogs {
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    /// The workload probe's JSON lines (`$OOMGATE_METRICS`).
    pub metrics: PathBuf,
}

impl InstanceLogs {
    /// Instance 0 keeps the plain names (`stdout.log`), so the common
    /// single-instance case has the files every script looks for; instance
    /// `i > 0` writes `stdout.<i>.log`.
    pub fn for_instance(case_dir: &Path, index: u32) -> Self {
        let name = |stream: &str| match index {
            0 => format!("{stream}.log"),
            i => format!("{stream}.{i}.log"),
        };
        let metrics = match index {
            0 => "metrics.jsonl".to_string(),
            i => format!("metrics.{i}.jsonl"),
        };
        InstanceLogs {
            stdout: case_dir.join(name("stdout")),
            stderr: case_dir.join(name("stderr")),
            metrics: case_dir.join(metrics),
        }
    }
}

/// Why an instance could not be started. The message names the command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LaunchError(pub String);

/// Everything about an instance that stays the same across soak runs.
pub struct LaunchSpec<'a> {
    pub case: &'a Case,
    pub index: u32,
    pub case_dir: &'a Path,
    pub logs: &'a InstanceLogs,
}

/// Start one run of an instance. The returned handle's single pid is also
/// the instance's process-group id.
pub fn launch(spec: &LaunchSpec<'_>) -> Result<duct::Handle, LaunchError> {
    let case = spec.case;
    if !case.cwd.is_dir() {
        return Err(LaunchError(format!(
            "cannot start `{}`: working directory {} does not exist",
            case.command[0],
            case.cwd.display()
        )));
    }
    let env = environment(spec);
    let program = resolve(case, &env)?;
    let open = |path: &Path| -> Result<File, LaunchError> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| LaunchError(format!("cannot open log file {}: {e}", path.display())))
    };
    let parent = process::self_pid();
    let stdout = open(&spec.logs.stdout)?;
    let stderr = open(&spec.logs.stderr)?;

    duct::cmd(&program, &case.command[1..])
        .dir(&case.cwd)
        .full_env(env)
        .stdin_null()
        .stdout_file(stdout)
        .stderr_file(stderr)
        .unchecked()
        .before_spawn(move |command| {
            command.process_group(0);
            // SAFETY: the closure runs between fork and exec and only makes
            // async-signal-safe system calls (see die_with_parent).
            unsafe {
                command.pre_exec(move || process::die_with_parent(parent));
            }
            Ok(())
        })
        .start()
        .map_err(|e| {
            LaunchError(format!(
                "cannot start `{}` ({}): {e}",
                case.command[0],
                program.display()
            ))
        })
}

/// oomgate's environment, then the suite's, then the instance variables.
fn environment(spec: &LaunchSpec<'_>) -> Vec<(OsString, OsString)> {
    let case = spec.case;
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let mut set = |key: &str, value: OsString| {
        env.retain(|(k, _)| k != key);
        env.push((key.into(), value));
    };
    for (key, value) in &case.env {
        set(key, value.into());
    }
    set("OOMGATE_CASE", case.id.clone().into());
    set("OOMGATE_INSTANCE", spec.index.to_string().into());
    set("OOMGATE_CONCURRENCY", case.concurrency.to_string().into());
    set("OOMGATE_OUT", spec.case_dir.as_os_str().to_owned());
    set("OOMGATE_METRICS", spec.logs.metrics.as_os_str().to_owned());
    env
}

/// The executable to run, checked to exist and be executable.
fn resolve(case: &Case, env: &[(OsString, OsString)]) -> Result<PathBuf, LaunchError> {
    let written = &case.command[0];
    if case.program.is_absolute() {
        return check_executable(&case.program)
            .map(|()| case.program.clone())
            .map_err(|why| {
                LaunchError(format!(
                    "cannot start `{written}`: {} {why}",
                    case.program.display()
                ))
            });
    }
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(&case.program);
        if check_executable(&candidate).is_ok() {
            return Ok(candidate);
        }
    }
    Err(LaunchError(format!(
        "cannot start `{written}`: command not found on PATH ({})",
        path.to_string_lossy()
    )))
}

fn check_executable(path: &Path) -> Result<(), &'static str> {
    let metadata = std::fs::metadata(path).map_err(|_| "does not exist")?;
    if metadata.is_dir() {
        return Err("is a directory");
    }
    if metadata.permissions().mode() & 0o111 == 0 {
        return Err("is not executable (chmod +x, or run it through its interpreter)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_zero_keeps_plain_log_names() {
        let dir = Path::new("/out/cases/a");
        assert_eq!(
            InstanceLogs::for_instance(dir, 0).stdout,
            dir.join("stdout.log")
        );
        assert_eq!(
            InstanceLogs::for_instance(dir, 2).stderr,
            dir.join("stderr.2.log")
        );
    }
}
