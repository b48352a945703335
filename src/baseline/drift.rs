//! Environment drift: every difference between the locked environment and
//! this run's, as "what: before → after" lines a reader can act on.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::environment::{ABSENT, Environment};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drift {
    /// `torch`, `driver`, `gpu 0`, `command torch_cuda`, ...
    pub what: String,
    pub before: String,
    pub after: String,
}

impl std::fmt::Display for Drift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} → {}", self.what, self.before, self.after)
    }
}

/// Everything that changed, in a stable order: GPU and driver first (the
/// usual suspects for GPU memory), then Python and packages, then the rest.
/// Facts about the machine rather than the software (OS image, kernel
/// build, CPU model) are left out: every runner differs in them.
pub fn drift(before: &Environment, after: &Environment) -> Vec<Drift> {
    let mut changes = Vec::new();
    let mut field = |what: &str, a: Option<&str>, b: Option<&str>| {
        if a != b {
            changes.push(Drift {
                what: what.to_string(),
                before: a.unwrap_or("unknown").to_string(),
                after: b.unwrap_or("unknown").to_string(),
            });
        }
    };
    for i in 0..before.gpu_models.len().max(after.gpu_models.len()) {
        field(
            &format!("gpu {i}"),
            before.gpu_models.get(i).map(String::as_str),
            after.gpu_models.get(i).map(String::as_str),
        );
    }
    field(
        "driver",
        before.driver_version.as_deref(),
        after.driver_version.as_deref(),
    );
    field(
        "cuda",
        before.cuda_driver_version.as_deref(),
        after.cuda_driver_version.as_deref(),
    );
    let python_version = |env: &Environment| env.python.as_ref().and_then(|p| p.version.clone());
    field(
        "python",
        python_version(before).as_deref(),
        python_version(after).as_deref(),
    );
    let packages = |env: &Environment| package_versions(env);
    let (old, new) = (packages(before), packages(after));
    for name in old.keys().chain(new.keys()).collect::<BTreeSet<_>>() {
        field(
            name,
            old.get(name).map(String::as_str),
            new.get(name).map(String::as_str),
        );
    }
    for name in before
        .commands
        .keys()
        .chain(after.commands.keys())
        .collect::<BTreeSet<_>>()
    {
        let output = |env: &Environment| {
            env.commands.get(name).map(|p| {
                if p.ok {
                    p.output.clone()
                } else {
                    format!("failed: {}", p.output)
                }
            })
        };
        field(
            &format!("command {name}"),
            output(before).as_deref(),
            output(after).as_deref(),
        );
    }
    // The OS image, the kernel build and the CPU model say which machine
    // ran, not what software the workload used: they are not drift (and a
    // lock no longer records them, see `Environment::software`). What the
    // workload runs on — driver, CUDA, GPUs, Python and its packages, the
    // suite's own probe commands — is.
    field(
        "oomgate",
        Some(before.oomgate_version.as_str()),
        Some(after.oomgate_version.as_str()),
    );
    changes
}

/// Whether GPU figures of the two environments can be compared: the same
/// set of GPU models. The number of GPUs, their order and their memory as
/// reported (ECC on or off) may differ — those are drift, listed, not a
/// reason to skip the gate. Unknown on either side counts as the same.
pub fn same_gpus(before: &Environment, after: &Environment) -> bool {
    let models = |env: &Environment| -> BTreeSet<String> {
        env.gpu_models
            .iter()
            .map(|m| {
                m.rsplit_once(" (")
                    .map_or(m.as_str(), |(name, _)| name)
                    .to_string()
            })
            .collect()
    };
    before.gpu_models.is_empty() || after.gpu_models.is_empty() || models(before) == models(after)
}

/// Package versions from the explicit list and, when recorded, `pip freeze`
/// (`name==version` lines; other forms are kept whole).
fn package_versions(env: &Environment) -> BTreeMap<String, String> {
    let mut versions = BTreeMap::new();
    let Some(python) = &env.python else {
        return versions;
    };
    for line in python.freeze.iter().flatten() {
        match line.split_once("==") {
            Some((name, version)) => {
                versions.insert(name.trim().to_lowercase(), version.trim().to_string())
            }
            None => versions.insert(line.trim().to_lowercase(), "installed".to_string()),
        };
    }
    for (name, version) in &python.packages {
        versions.insert(
            name.to_lowercase(),
            if version == ABSENT {
                ABSENT.to_string()
            } else {
                version.clone()
            },
        );
    }
    versions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environment::{ProbeOutput, PythonEnvironment};

    fn env(torch: &str, gpu: &str) -> Environment {
        let mut environment = Environment {
            oomgate_version: "0.1.0".into(),
            driver_version: Some("550.54.15".into()),
            gpu_models: vec![gpu.to_string()],
            python: Some(PythonEnvironment {
                interpreter: "python3".into(),
                version: Some("3.11.7".into()),
                packages: [("torch".to_string(), torch.to_string())].into(),
                ..PythonEnvironment::default()
            }),
            ..Environment::default()
        };
        environment.commands.insert(
            "probe".into(),
            ProbeOutput {
                ok: true,
                output: "a".into(),
            },
        );
        environment
    }

    #[test]
    fn lists_what_changed() {
        let before = env("2.4.1", "H100 (80.0 GiB)");
        assert!(drift(&before, &before).is_empty());
        let mut after = env("2.5.0", "H100 (80.0 GiB)");
        after.commands.insert(
            "probe".into(),
            ProbeOutput {
                ok: false,
                output: "boom".into(),
            },
        );
        let lines: Vec<String> = drift(&before, &after)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            lines,
            ["torch 2.4.1 → 2.5.0", "command probe a → failed: boom"]
        );
        let absent = env(ABSENT, "H100 (80.0 GiB)");
        assert_eq!(
            drift(&before, &absent)[0].to_string(),
            "torch 2.4.1 → absent"
        );
    }

    #[test]
    fn gpu_model_changes_make_gpu_figures_incomparable() {
        let before = env("2.4.1", "H100 (80.0 GiB)");
        let after = env("2.4.1", "A100 (40.0 GiB)");
        assert!(!same_gpus(&before, &after));
        assert_eq!(
            drift(&before, &after)[0].to_string(),
            "gpu 0 H100 (80.0 GiB) → A100 (40.0 GiB)"
        );
        assert!(same_gpus(&before, &Environment::default()));
        // Regression: one GPU fewer of the same model skipped every GPU
        // comparison.
        let mut two = env("2.4.1", "H100 (80.0 GiB)");
        two.gpu_models.push("H100 (80.0 GiB)".into());
        assert!(same_gpus(&two, &before));
        assert!(
            same_gpus(&before, &env("2.4.1", "H100 (79.2 GiB)")),
            "memory reported differently"
        );
    }

    #[test]
    fn freeze_lines_count_as_packages() {
        let mut before = env("2.4.1", "x");
        let mut after = env("2.4.1", "x");
        if let Some(p) = before.python.as_mut() {
            p.freeze = Some(vec![
                "numpy==1.26.4".into(),
                "-e git+https://x#egg=y".into(),
            ]);
        }
        if let Some(p) = after.python.as_mut() {
            p.freeze = Some(vec!["numpy==2.0.0".into()]);
        }
        let lines: Vec<String> = drift(&before, &after)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            lines,
            [
                "-e git+https://x#egg=y installed → unknown",
                "numpy 1.26.4 → 2.0.0"
            ]
        );
    }

    #[test]
    fn the_machine_is_not_drift_and_not_locked() {
        let before = env("2.4.1", "H100");
        let mut after = before.clone();
        after.cpu_model = Some("AMD EPYC".into());
        after.kernel = Some("6.18.0".into());
        after.os = Some("Ubuntu 24.04".into());
        assert_eq!(drift(&before, &after), []);
        let locked = after.software();
        assert_eq!(
            (locked.cpu_model, locked.kernel, locked.os),
            (None, None, None)
        );
        assert_eq!(locked.python, after.python);
    }
}
