//! The Python environment a package bisect runs its candidates in: one
//! virtual environment made once from the suite's interpreter's packages,
//! in which only the packages that change are installed again, so that a
//! torch bisect does not cost gigabytes a step (pip's wheel cache is
//! shared as pip shares it).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::spawn::{Ended, output, run_logged};
use crate::run::Interrupt;

/// Where pip looks for packages: the user's pip configuration, and these.
#[derive(Debug, Clone, Default)]
pub struct Index {
    pub find_links: Vec<PathBuf>,
    pub index_url: Option<String>,
    pub no_index: bool,
    /// Pre-releases and nightlies count as versions.
    pub pre: bool,
}

impl Index {
    fn args(&self) -> Vec<OsString> {
        let mut args = Vec::new();
        for folder in &self.find_links {
            args.push("--find-links".into());
            args.push(folder.clone().into_os_string());
        }
        if let Some(url) = &self.index_url {
            args.push("--index-url".into());
            args.push(url.into());
        }
        if self.no_index {
            args.push("--no-index".into());
        }
        if self.pre {
            args.push("--pre".into());
        }
        args
    }
}

/// A package name as PyPI compares them (PEP 503): `Typing_Extensions`
/// is `typing-extensions`.
pub fn normalise(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.trim().chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// `python -m pip …` with no prompt and no version check.
fn pip(python: &Path) -> Command {
    let mut command = Command::new(python);
    command
        .args(["-m", "pip"])
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .env("PIP_NO_INPUT", "1")
        .env_remove("PIP_REQUIRE_VIRTUALENV")
        .env_remove("VIRTUAL_ENV")
        .env_remove("PYTHONHOME");
    command
}

/// The interpreter a suite names (`python3`, `.venv/bin/python`): a
/// path with a `/` from the suite's folder, else found on `PATH`.
pub fn interpreter(python: &str, folder: &Path) -> Result<PathBuf, String> {
    if python.contains('/') {
        let path = folder.join(python);
        return match path.is_file() {
            true => Ok(path),
            false => Err(format!(
                "the suite's interpreter {} does not exist",
                path.display()
            )),
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(python))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("the suite's interpreter `{python}` is not on PATH"))
}

/// One line of `pip freeze`: a pin, or a line kept as written (an
/// editable install, a package from a URL or a folder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frozen {
    Pin { name: String, version: String },
    Other(String),
}

/// The packages an interpreter has, as `pip freeze` lists them (pip's
/// own tools left out: a virtual environment has its own).
pub fn freeze(python: &Path) -> Result<Vec<Frozen>, String> {
    let mut command = pip(python);
    command.args(["freeze", "--all"]);
    let text = output(command)?;
    Ok(parse_freeze(&text))
}

/// `pip freeze`'s lines read (pip's own tools left out).
pub fn parse_freeze(text: &str) -> Vec<Frozen> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|line| match line.split_once("==") {
            Some((name, version)) if !line.contains(" @ ") && !line.starts_with('-') => {
                let name = normalise(name);
                (!matches!(name.as_str(), "pip" | "setuptools" | "wheel" | "distribute")).then(
                    || Frozen::Pin {
                        name,
                        version: version.trim().to_string(),
                    },
                )
            }
            _ => Some(Frozen::Other(line.to_string())),
        })
        .collect()
}

/// The packages of the suite's `[environment] python` as `pip freeze`
/// lists them (or why they could not be listed; "no interpreter" for a
/// suite that names none): what a commit's run depends on besides the
/// commit.
pub fn interpreter_packages(suite: &Path) -> String {
    let Ok(loaded) = crate::suite::load(suite) else {
        return "an invalid suite".into();
    };
    let Some(python) = loaded.environment.python else {
        return "no interpreter".into();
    };
    let folder = loaded
        .path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let found = interpreter(&python, &folder).and_then(|path| {
        let listed = freeze(&path)?;
        Ok(listed
            .iter()
            .map(|line| match line {
                Frozen::Pin { name, version } => format!("{name}=={version}"),
                Frozen::Other(line) => line.clone(),
            })
            .collect::<Vec<_>>()
            .join("\n"))
    });
    match found {
        Ok(packages) => format!("python {python}\n{packages}"),
        Err(why) => format!("python {python}: {why}"),
    }
}

/// A virtual environment of the bisect's own.
#[derive(Debug, Clone)]
pub struct Venv {
    pub dir: PathBuf,
}

impl Venv {
    pub fn python(&self) -> PathBuf {
        self.dir.join("bin").join("python")
    }

    pub fn bin(&self) -> PathBuf {
        self.dir.join("bin")
    }

    /// Make one at `dir` from `base` (`base -m venv`).
    pub fn create(
        base: &Path,
        dir: &Path,
        log: &Path,
        interrupt: &Interrupt,
    ) -> Result<Venv, Failed> {
        let mut command = Command::new(base);
        command.args(["-m", "venv", "--clear"]).arg(dir);
        command.env_remove("VIRTUAL_ENV").env_remove("PYTHONHOME");
        ended(run_logged(command, log, interrupt), log, "python -m venv")?;
        Ok(Venv {
            dir: dir.to_path_buf(),
        })
    }

    /// `pip install -r requirements`, each package's version held by
    /// the `constraints` file where it names one; `no_deps` installs
    /// exactly what is listed (a `pip freeze` reproduced).
    pub fn install(
        &self,
        requirements: &Path,
        constraints: Option<&Path>,
        no_deps: bool,
        index: &Index,
        log: &Path,
        interrupt: &Interrupt,
    ) -> Result<(), Failed> {
        let mut command = pip(&self.python());
        command.args(["install", "--upgrade"]);
        if no_deps {
            command.arg("--no-deps");
        }
        if let Some(constraints) = constraints {
            command.arg("--constraint").arg(constraints);
        }
        command
            .args(index.args())
            .arg("--requirement")
            .arg(requirements);
        ended(run_logged(command, log, interrupt), log, "pip install")
    }

    /// The names of the packages `requirement` (`torch==2.10.0`) itself
    /// requires, as its metadata lists them (extras left out), asked of
    /// pip without installing anything (`--dry-run --report`: pip reads
    /// the index's metadata file where it serves one, else the wheel).
    pub fn requires(
        &self,
        requirement: &str,
        index: &Index,
        folder: &Path,
        interrupt: &Interrupt,
    ) -> Result<Vec<String>, Failed> {
        let report = folder.join("requires.json");
        let log = folder.join("requires.log");
        let mut command = pip(&self.python());
        command
            .args([
                "install",
                "--dry-run",
                "--no-deps",
                "--ignore-installed",
                "--quiet",
            ])
            .arg("--report")
            .arg(&report)
            .args(index.args())
            .arg(requirement);
        ended(
            run_logged(command, &log, interrupt),
            &log,
            "pip install --dry-run",
        )?;
        let text = std::fs::read_to_string(&report)
            .map_err(|e| Failed::Said(format!("cannot read {}: {e}", report.display())))?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Failed::Said(format!("pip's report {}: {e}", report.display())))?;
        let listed = value["install"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|item| {
                item["metadata"]["requires_dist"]
                    .as_array()
                    .into_iter()
                    .flatten()
            })
            .filter_map(serde_json::Value::as_str);
        Ok(required_names(listed))
    }

    /// `pip uninstall` these packages (one not installed is no error).
    pub fn uninstall(
        &self,
        names: &[String],
        log: &Path,
        interrupt: &Interrupt,
    ) -> Result<(), Failed> {
        if names.is_empty() {
            return Ok(());
        }
        let mut command = pip(&self.python());
        command.args(["uninstall", "--yes"]).args(names);
        ended(run_logged(command, log, interrupt), log, "pip uninstall")
    }

    /// The versions of `package` the index offers, oldest first.
    pub fn versions(&self, package: &str, index: &Index) -> Result<Vec<String>, String> {
        let mut command = pip(&self.python());
        command
            .args(["index", "versions"])
            .args(index.args())
            .arg(package);
        let text = output(command)?;
        parse_versions(&text).ok_or_else(|| {
            format!(
                "pip lists no version of `{package}`: {}",
                crate::clean::line(text.trim())
            )
        })
    }
}

/// The package names of `Requires-Dist` lines (`triton==3.5.0;
/// platform_system == "Linux"`), normalised; a requirement of an extra
/// only (`; extra == "cuda"`) is left out, as pip leaves it.
fn required_names<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut names: Vec<String> = lines
        .filter(|line| {
            line.split_once(';')
                .is_none_or(|(_, marker)| !marker.contains("extra"))
        })
        .map(|line| {
            let end = line
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
                .unwrap_or(line.len());
            normalise(&line[..end])
        })
        .filter(|name| !name.is_empty())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// `Available versions: 1.9, 1.8, …` (newest first, as pip orders them
/// by PEP 440), oldest first.
fn parse_versions(text: &str) -> Option<Vec<String>> {
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Available versions:"))?;
    let mut versions: Vec<String> = line
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    versions.reverse();
    (!versions.is_empty()).then_some(versions)
}

/// Why a pip or venv command failed: stopped, or its words.
#[derive(Debug)]
pub enum Failed {
    Interrupted,
    Said(String),
}

fn ended(result: std::io::Result<Ended>, log: &Path, what: &str) -> Result<(), Failed> {
    match result {
        Ok(Ended::Exited(0)) => Ok(()),
        Ok(Ended::Interrupted) => Err(Failed::Interrupted),
        Ok(Ended::Exited(code)) => Err(Failed::Said(format!(
            "{what} exited with code {code}: {}",
            super::spawn::tail(log, 3, &["INFO:"])
        ))),
        Err(e) => Err(Failed::Said(format!("cannot run {what}: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_compare_as_pypi_compares_them() {
        assert_eq!(normalise("Typing_Extensions"), "typing-extensions");
        assert_eq!(normalise("zope.interface"), "zope-interface");
        assert_eq!(normalise("a--_b"), "a-b");
    }

    #[test]
    fn freeze_keeps_pins_and_what_it_cannot_pin() {
        let frozen = parse_freeze(
            "numpy==2.1.0\nPyYAML==6.0\n-e git+https://x/y.git@abc#egg=mine\nlocal @ file:///src/local\npip==23.2\n",
        );
        assert_eq!(
            frozen,
            vec![
                Frozen::Pin {
                    name: "numpy".into(),
                    version: "2.1.0".into()
                },
                Frozen::Pin {
                    name: "pyyaml".into(),
                    version: "6.0".into()
                },
                Frozen::Other("-e git+https://x/y.git@abc#egg=mine".into()),
                Frozen::Other("local @ file:///src/local".into()),
            ]
        );
    }

    #[test]
    fn a_requirement_is_its_name_and_an_extra_is_left_out() {
        let lines = [
            "triton==3.5.0; platform_system == \"Linux\" and platform_machine == \"x86_64\"",
            "typing-extensions>=4.10.0",
            "Jinja2",
            "nvidia_cudnn_cu12 (==9.10.2.21)",
            "sympy>=1.13.3",
            "opt-einsum>=3.3; extra == \"opt-einsum\"",
            "numpy[extra]>=1.0",
        ];
        assert_eq!(
            required_names(lines.into_iter()),
            vec![
                "jinja2",
                "numpy",
                "nvidia-cudnn-cu12",
                "sympy",
                "triton",
                "typing-extensions"
            ]
        );
    }

    #[test]
    fn versions_come_oldest_first() {
        let text = "tinypkg (1.2)\nAvailable versions: 1.2, 1.1rc1, 1.0\n  INSTALLED: 1.0\n";
        assert_eq!(
            parse_versions(text),
            Some(vec!["1.0".into(), "1.1rc1".into(), "1.2".into()])
        );
        assert_eq!(parse_versions("ERROR: No matching distribution"), None);
    }
}
