//! The software environment of a run, captured once before the first case:
//! driver, CUDA, GPU models, OS, kernel, CPU, Python packages and the
//! suite's own probe commands.
//!
//! Captured so that a memory regression can be read next to what changed
//! ("torch 2.4.1 → 2.5.0"), and stored in results.json and in the lock.
//! Every field is optional: a probe that fails is recorded as failed, never
//! fatal. Maps are ordered (`BTreeMap`) so the lock file diffs cleanly.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::measure::nvml::Gpu;
use crate::suite::EnvironmentSpec;
use crate::units::Bytes;

/// How long one probe command may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub oomgate_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_driver_version: Option<String>,
    /// One entry per GPU, in NVML order: `NVIDIA H100 80GB HBM3 (79.6 GiB)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_models: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub python: Option<PythonEnvironment>,
    /// The suite's `[environment].commands`, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub commands: BTreeMap<String, ProbeOutput>,
}

impl Environment {
    /// What a lock records: the software the workloads ran on, without the
    /// machine's identity (OS image, kernel build, CPU model), which
    /// differs from runner to runner and is kept in results.json only.
    pub fn software(&self) -> Environment {
        Environment {
            os: None,
            cpu_model: None,
            kernel: None,
            ..self.clone()
        }
    }

    /// The installed torch's version, when the suite records it: a
    /// diagnosis of torch's failure names it.
    pub fn torch_version(&self) -> Option<&str> {
        self.python
            .as_ref()
            .and_then(|p| p.packages.get("torch"))
            .map(String::as_str)
            .filter(|v| *v != ABSENT)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PythonEnvironment {
    pub interpreter: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Installed version of each package asked for; `"absent"` when not
    /// installed (TOML has no null).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub packages: BTreeMap<String, String>,
    /// `pip freeze`, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub freeze: Option<Vec<String>>,
    /// Why the interpreter could not be asked, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The marker for a package that is not installed.
pub const ABSENT: &str = "absent";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeOutput {
    pub ok: bool,
    /// Trimmed stdout; for a failed command, why and the end of its stderr.
    pub output: String,
}

impl ProbeOutput {
    /// The output of a probe that answered, or why it did not.
    fn into_result(self) -> Result<String, String> {
        if self.ok {
            Ok(self.output)
        } else {
            Err(self.output)
        }
    }
}

/// Environment variables that change how much memory a workload takes, or
/// on which device: recorded for every case as launched.
pub fn is_allocator_variable(name: &str) -> bool {
    matches!(
        name,
        "PYTORCH_ALLOC_CONF"
            | "PYTORCH_CUDA_ALLOC_CONF"
            | "CUDA_VISIBLE_DEVICES"
            | "CUDA_DEVICE_ORDER"
            | "TF_GPU_ALLOCATOR"
            | "TF_FORCE_GPU_ALLOW_GROWTH"
    ) || name.starts_with("XLA_PYTHON_CLIENT_")
        || name.starts_with("NCCL_")
}

/// Capture everything once. `workdir` is where the suite's commands run.
pub fn capture(spec: &EnvironmentSpec, workdir: &Path, gpu: Option<&Gpu>) -> Environment {
    let mut environment = Environment {
        oomgate_version: env!("CARGO_PKG_VERSION").to_string(),
        os: os_name(),
        kernel: read_trimmed("/proc/sys/kernel/osrelease"),
        cpu_model: cpu_model(),
        ..Environment::default()
    };
    if let Some(gpu) = gpu {
        environment.driver_version = Some(gpu.driver_version.clone());
        environment.cuda_driver_version = gpu.cuda_driver_version.clone();
        environment.gpu_models = gpu
            .devices
            .iter()
            .map(|d| format!("{} ({})", d.name, Bytes(d.total_bytes)))
            .collect();
    }
    if let Some(python) = &spec.python {
        environment.python = Some(python_environment(
            python,
            &spec.packages,
            spec.freeze,
            workdir,
        ));
    }
    for (name, argv) in &spec.commands {
        environment
            .commands
            .insert(name.clone(), run_probe(argv, workdir));
    }
    environment
}

const PACKAGES_SCRIPT: &str = r#"
import json, sys
import importlib.metadata as metadata
found = {}
for name in sys.argv[1:]:
    try:
        found[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        found[name] = None
print(json.dumps({"version": sys.version.split()[0], "packages": found}))
"#;

fn python_environment(
    python: &str,
    packages: &[String],
    freeze: bool,
    workdir: &Path,
) -> PythonEnvironment {
    // Recorded as the suite writes it, so a lock committed from one machine
    // names no path of that machine (`.venv/bin/python`, not
    // `/home/ci/checkout/.venv/bin/python`); run_probe resolves a path
    // from the workdir.
    let interpreter = python.to_string();
    let mut result = PythonEnvironment {
        interpreter: interpreter.clone(),
        ..PythonEnvironment::default()
    };
    let mut argv = vec![
        interpreter.clone(),
        "-c".to_string(),
        PACKAGES_SCRIPT.to_string(),
    ];
    argv.extend(packages.iter().cloned());
    match run_probe(&argv, workdir).into_result() {
        Ok(stdout) => match serde_json::from_str::<serde_json::Value>(&stdout) {
            Ok(value) => {
                result.version = value["version"].as_str().map(str::to_string);
                for name in packages {
                    let version = value["packages"][name].as_str().unwrap_or(ABSENT);
                    result.packages.insert(name.clone(), version.to_string());
                }
            }
            Err(e) => result.error = Some(format!("unexpected output from {interpreter}: {e}")),
        },
        Err(why) => result.error = Some(why),
    }
    if freeze {
        let argv = [
            interpreter,
            "-m".to_string(),
            "pip".to_string(),
            "freeze".to_string(),
        ];
        match run_probe(&argv, workdir).into_result() {
            Ok(stdout) => result.freeze = Some(stdout.lines().map(str::to_string).collect()),
            Err(why) => {
                let error = result
                    .error
                    .take()
                    .map_or(String::new(), |e| format!("{e}; "));
                result.error = Some(format!("{error}pip freeze: {why}"));
            }
        }
    }
    result
}

/// The most of a probe's output that is kept (the rest is cut, and says
/// so): the environment is recorded in every results.json and lock.
const PROBE_OUTPUT_LIMIT: u64 = 1024 * 1024;

/// Run a probe with a time limit; its trimmed stdout, or why it failed.
/// The probe is done when its own process exits: its output goes to
/// anonymous files, not pipes, so a background child it left holding them
/// cannot keep oomgate waiting; whatever it left running in its process
/// group is killed and reaped then, before any case starts, so nothing of
/// it is counted against a case.
/// A probe command's output, or why it failed, masked (see
/// `crate::redact`): it goes into results.json and the committed lock.
fn run_probe(argv: &[String], workdir: &Path) -> ProbeOutput {
    let masked = |text: &str| crate::redact::mask(text).into_owned();
    match run_probe_raw(argv, workdir) {
        Ok(out) => ProbeOutput {
            ok: true,
            output: masked(&out),
        },
        Err(why) => ProbeOutput {
            ok: false,
            output: masked(&why.to_string()),
        },
    }
}

/// Why an `[environment]` probe gave no answer; the text is recorded
/// (masked) in results.json and the lock.
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    #[error("cannot capture `{program}`: {source}")]
    Capture {
        program: String,
        source: std::io::Error,
    },
    #[error("cannot start `{program}`: {source}")]
    Start {
        program: String,
        source: std::io::Error,
    },
    #[error("`{program}` did not finish within {}s", PROBE_TIMEOUT.as_secs())]
    Timeout { program: String },
    #[error("`{program}`: {source}")]
    Wait {
        program: String,
        source: std::io::Error,
    },
    #[error("`{program}` failed ({status}): {stderr_tail}")]
    Failed {
        program: String,
        status: std::process::ExitStatus,
        stderr_tail: String,
    },
}

fn run_probe_raw(argv: &[String], workdir: &Path) -> Result<String, ProbeError> {
    use std::io::{Read, Seek};
    use std::os::unix::process::CommandExt;
    // A bare name is looked up on PATH; a path is relative to the workdir.
    let program: std::ffi::OsString = if argv[0].contains('/') {
        workdir.join(&argv[0]).into_os_string()
    } else {
        argv[0].clone().into()
    };
    let named = || argv[0].clone();
    let capture = |file: std::io::Result<std::fs::File>| {
        file.map_err(|source| ProbeError::Capture {
            program: named(),
            source,
        })
    };
    let (mut stdout, mut stderr) = (
        capture(tempfile::tempfile())?,
        capture(tempfile::tempfile())?,
    );
    let mut command = std::process::Command::new(&program);
    command
        .args(&argv[1..])
        .current_dir(workdir)
        .stdin(std::process::Stdio::null())
        .stdout(capture(stdout.try_clone())?)
        .stderr(capture(stderr.try_clone())?)
        // Its own process group, so what it starts is stopped with it.
        .process_group(0);
    let parent = std::process::id() as i32;
    // SAFETY: die_with_parent only makes async-signal-safe system calls.
    // It dies with oomgate (a cancelled job's SIGKILL), as workloads do.
    unsafe {
        command.pre_exec(move || crate::process::die_with_parent(parent));
    }
    let mut child = command.spawn().map_err(|source| ProbeError::Start {
        program: named(),
        source,
    })?;
    let group = i32::try_from(child.id()).unwrap_or(0);
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                child.kill().ok();
                child.wait().ok();
                break Err(ProbeError::Timeout { program: named() });
            }
            Err(source) => {
                break Err(ProbeError::Wait {
                    program: named(),
                    source,
                });
            }
        }
    };
    crate::process::end_group(group, Duration::from_secs(2));
    let status = status?;
    // Masked with what follows the cut in view (see `Redactor::mask_range`);
    // `run_probe` masks the whole answer again.
    let redactor = crate::redact::active();
    let read = |file: &mut std::fs::File| -> String {
        let mut bytes = Vec::new();
        file.rewind().ok();
        file.take(PROBE_OUTPUT_LIMIT + redactor.context() as u64)
            .read_to_end(&mut bytes)
            .ok();
        let text = String::from_utf8_lossy(&bytes);
        if bytes.len() as u64 <= PROBE_OUTPUT_LIMIT {
            return text.trim().to_string();
        }
        let keep = usize::try_from(PROBE_OUTPUT_LIMIT).unwrap_or(usize::MAX);
        let kept = redactor.mask_range(&text, 0..keep);
        format!(
            "{}\n[oomgate: output cut at {PROBE_OUTPUT_LIMIT} bytes]",
            kept.trim()
        )
    };
    let out = read(&mut stdout);
    if status.success() {
        return Ok(out);
    }
    let err = read(&mut stderr);
    let tail: String = err
        .lines()
        .rev()
        .take(5)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    Err(ProbeError::Failed {
        program: named(),
        status,
        stderr_tail: tail,
    })
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn os_name() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("PRETTY_NAME="))
        .map(|value| value.trim_matches('"').to_string())
}

fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines().find_map(|line| {
        line.strip_prefix("model name")
            .and_then(|rest| rest.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocator_variables() {
        for name in [
            "PYTORCH_CUDA_ALLOC_CONF",
            "PYTORCH_ALLOC_CONF",
            "CUDA_VISIBLE_DEVICES",
            "XLA_PYTHON_CLIENT_MEM_FRACTION",
            "NCCL_DEBUG",
            "TF_GPU_ALLOCATOR",
        ] {
            assert!(is_allocator_variable(name), "{name}");
        }
        for name in ["PATH", "PYTHONPATH", "XLA_FLAGS", "NCCLX"] {
            assert!(!is_allocator_variable(name), "{name}");
        }
    }

    #[test]
    fn probes_record_output_and_failures() {
        let dir = std::env::temp_dir();
        assert_eq!(
            run_probe(&["echo".into(), " hi ".into()], &dir).into_result(),
            Ok("hi".to_string())
        );
        let failed = run_probe(
            &["sh".into(), "-c".into(), "echo oops >&2; exit 3".into()],
            &dir,
        )
        .into_result()
        .unwrap_err();
        assert!(failed.contains("oops"), "{failed}");
        assert!(
            run_probe(&["no-such-probe-oomgate".into()], &dir)
                .into_result()
                .unwrap_err()
                .contains("cannot start")
        );
    }

    #[test]
    fn python_packages_present_and_absent() {
        let env = python_environment(
            "python3",
            &["pip".into(), "no-such-package-oomgate".into()],
            false,
            &std::env::temp_dir(),
        );
        assert_eq!(env.error, None);
        assert!(env.version.is_some());
        assert_ne!(env.packages.get("pip").map(String::as_str), Some(ABSENT));
        assert_eq!(
            env.packages
                .get("no-such-package-oomgate")
                .map(String::as_str),
            Some(ABSENT)
        );
    }
}
