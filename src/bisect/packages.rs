//! The package axes: one package's versions, or subsets of the package
//! changes between two runs, installed in turn into one virtual
//! environment of the bisect's own.

use std::path::{Path, PathBuf};

use super::axis::{Place, Prepare, PrepareLinear, Prepared, Progress};
use super::pip::{self, Frozen, Index, Venv};
use super::{BisectError, Candidate, Options};
use crate::run::Interrupt;

/// What making an environment needs of the driver.
pub(super) struct Setup<'a> {
    pub(super) options: &'a Options,
    pub(super) progress: &'a mut dyn Progress,
    pub(super) interrupt: &'a Interrupt,
}

/// The environment a package bisect runs in: made once from the suite's
/// interpreter's packages (or a run's), every pin but the bisected
/// packages' held by a constraints file.
pub(super) struct Environment {
    venv: Venv,
    index: Index,
    /// `name==version` of every package that is not bisected: `pins`
    /// as pip's constraints file.
    constraints: PathBuf,
    pins: std::collections::BTreeMap<String, String>,
    /// Its interpreter and every line installed when it was made.
    identity: String,
}

impl Environment {
    /// Make the environment in `out/env`: the suite's interpreter's
    /// packages, with `recorded` (a run's versions) over them, less
    /// `bisected`.
    fn make(
        setup: &mut Setup<'_>,
        index: Index,
        recorded: &std::collections::BTreeMap<String, String>,
        bisected: &[String],
    ) -> Result<Environment, BisectError> {
        let suite = crate::suite::load(&setup.options.suite)
            .map_err(|e| BisectError::BadInput(e.to_string()))?;
        let python = suite
            .environment
            .python
            .clone()
            .unwrap_or_else(|| "python3".into());
        let folder = std::path::absolute(&setup.options.suite)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        let base = pip::interpreter(&python, &folder).map_err(BisectError::BadInput)?;
        let frozen = pip::freeze(&base).map_err(|e| {
            BisectError::BadInput(format!(
                "cannot list the packages of {}: {e}",
                base.display()
            ))
        })?;
        let skip = |name: &str| bisected.iter().any(|b| pip::normalise(b) == name);
        let mut pins: std::collections::BTreeMap<String, String> =
            std::collections::BTreeMap::new();
        let mut others = Vec::new();
        for line in frozen {
            match line {
                Frozen::Pin { name, version } => {
                    pins.insert(name, version);
                }
                Frozen::Other(line) => others.push(line),
            }
        }
        for (name, version) in recorded {
            let name = pip::normalise(name);
            match version.as_str() {
                crate::environment::ABSENT => pins.remove(&name),
                _ => pins.insert(name, version.clone()),
            };
        }
        pins.retain(|name, _| !skip(name));
        let folder = setup.options.out.join("env-setup");
        std::fs::create_dir_all(&folder).map_err(|e| {
            BisectError::Infrastructure(format!("cannot make {}: {e}", folder.display()))
        })?;
        let log = folder.join("setup.log");
        setup.progress.note(&format!(
            "making the environment {} from {}, pinning {} package(s)",
            setup.options.out.join("env").display(),
            base.display(),
            pins.len()
        ));
        let fail = |e: pip::Failed| match e {
            pip::Failed::Interrupted => BisectError::Interrupted,
            pip::Failed::Said(why) => BisectError::BadInput(format!(
                "cannot make the bisect's environment: {why} (log: {})",
                log.display()
            )),
        };
        let venv = Venv::create(&base, &setup.options.out.join("env"), &log, setup.interrupt)
            .map_err(fail)?;
        let constraints = folder.join("constraints.txt");
        let pinned: Vec<String> = pins.iter().map(|(n, v)| format!("{n}=={v}")).collect();
        std::fs::write(&constraints, pinned.join("\n") + "\n").map_err(|e| {
            BisectError::Infrastructure(format!("cannot write {}: {e}", constraints.display()))
        })?;
        let mut requirements = pinned;
        requirements.extend(others);
        let identity = format!(
            "python {}\nindex {:?}\n{}",
            base.display(),
            index,
            requirements.join("\n")
        );
        let environment = Environment {
            venv,
            index,
            constraints,
            pins,
            identity,
        };
        environment
            .install(&requirements, None, true, &folder, setup.interrupt)
            .map_err(fail)?;
        Ok(environment)
    }

    /// Install `requirements` (a requirements file's lines) in the
    /// environment, held by a constraints file, logged in
    /// `folder/install.log`.
    fn install(
        &self,
        requirements: &[String],
        constraints: Option<&Path>,
        no_deps: bool,
        folder: &Path,
        interrupt: &Interrupt,
    ) -> Result<(), pip::Failed> {
        if requirements.is_empty() {
            return Ok(());
        }
        let file = folder.join("requirements.txt");
        std::fs::write(&file, requirements.join("\n") + "\n")
            .map_err(|e| pip::Failed::Said(format!("cannot write {}: {e}", file.display())))?;
        self.venv.install(
            &file,
            constraints,
            no_deps,
            &self.index,
            &folder.join("install.log"),
            interrupt,
        )
    }

    /// A candidate installed, ready to run; one that did not install
    /// is skipped, never blamed.
    fn ready(
        &self,
        installed: Result<(), pip::Failed>,
        options: &Options,
    ) -> Result<Prepared, BisectError> {
        match installed {
            Ok(()) => Ok(Prepared::Ready(self.place(options))),
            Err(pip::Failed::Interrupted) => Err(BisectError::Interrupted),
            Err(pip::Failed::Said(why)) => Ok(Prepared::Skip(format!("does not install: {why}"))),
        }
    }

    fn place(&self, options: &Options) -> Place {
        Place {
            cwd: std::env::current_dir().unwrap_or_else(|_| options.out.clone()),
            suite: options.suite.clone(),
            python: Some(self.venv.python()),
        }
    }

    fn clean_up(&mut self) {
        let _ = std::fs::remove_dir_all(&self.venv.dir);
    }

    /// The pins less `released`, as a constraints file in `folder`.
    fn constraints_without(
        &self,
        released: &[String],
        folder: &Path,
    ) -> Result<PathBuf, pip::Failed> {
        let file = folder.join("constraints.txt");
        let lines: Vec<String> = self
            .pins
            .iter()
            .filter(|(name, _)| !released.contains(name))
            .map(|(name, version)| format!("{name}=={version}"))
            .collect();
        std::fs::write(&file, lines.join("\n") + "\n")
            .map_err(|e| pip::Failed::Said(format!("cannot write {}: {e}", file.display())))?;
        Ok(file)
    }

    /// `name==pin` of each of `names`.
    fn pinned(&self, names: impl Iterator<Item = String>) -> Vec<String> {
        names
            .filter_map(|name| self.pins.get(&name).map(|v| format!("{name}=={v}")))
            .collect()
    }
}

/// The versions axis: one package's versions, installed in turn.
pub(super) struct Versions {
    env: Environment,
    package: String,
    candidates: Vec<Candidate>,
    options: Options,
    /// The pinned packages a version installed before moved off their
    /// pins (its own requirements): put back for the next version that
    /// does not need them moved.
    moved: std::collections::BTreeSet<String>,
}

impl Versions {
    pub(super) fn new(
        setup: &mut Setup<'_>,
        package: &str,
        good: &str,
        bad: &str,
        index: Index,
        pins_from: Option<&Path>,
    ) -> Result<Versions, BisectError> {
        let recorded = match pins_from {
            Some(path) => recorded_packages(path)?.0,
            None => Default::default(),
        };
        let env = Environment::make(setup, index, &recorded, &[package.to_string()])?;
        let listed = env
            .venv
            .versions(package, &env.index)
            .map_err(BisectError::BadInput)?;
        let position = |version: &str| {
            listed.iter().position(|v| v == version).ok_or_else(|| {
                BisectError::BadInput(format!(
                    "the index has no version {version} of {package} (it lists {}){}",
                    listed.join(", "),
                    if version.contains(|c: char| c.is_ascii_alphabetic()) {
                        "; --pre lists pre-releases"
                    } else {
                        ""
                    }
                ))
            })
        };
        let (g, b) = (position(good)?, position(bad)?);
        if g == b {
            return Err(BisectError::BadInput(format!(
                "--good and --bad are both {good}"
            )));
        }
        let versions: Vec<String> = match g < b {
            true => listed[g..=b].to_vec(),
            false => listed[b..=g].iter().rev().cloned().collect(),
        };
        let candidates = versions
            .into_iter()
            .map(|v| Candidate {
                label: format!("{package}-{v}"),
                id: v,
                subject: String::new(),
            })
            .collect();
        Ok(Versions {
            env,
            package: package.to_string(),
            candidates,
            options: setup.options.clone(),
            moved: Default::default(),
        })
    }

    /// Install version `at`: with every other package at its pin where
    /// it installs so; else with the packages it requires itself let go
    /// of their pins (torch 2.10 requires another triton than 2.9's:
    /// the pair moves together, as it would for the user), and only
    /// those.
    fn install(
        &mut self,
        at: usize,
        folder: &Path,
        interrupt: &Interrupt,
    ) -> Result<(), pip::Failed> {
        let wanted = self.identity(at);
        let mut lines = vec![wanted.clone()];
        lines.extend(self.env.pinned(self.moved.iter().cloned()));
        let pinned = self.env.install(
            &lines,
            Some(&self.env.constraints),
            false,
            folder,
            interrupt,
        );
        let Err(pip::Failed::Said(why)) = pinned else {
            return pinned;
        };
        let required = match self
            .env
            .venv
            .requires(&wanted, &self.env.index, folder, interrupt)
        {
            Ok(names) => names,
            Err(pip::Failed::Interrupted) => return Err(pip::Failed::Interrupted),
            // Its metadata unreadable too: the install's words say why.
            Err(pip::Failed::Said(_)) => return Err(pip::Failed::Said(why)),
        };
        let released: Vec<String> = required
            .into_iter()
            .filter(|name| self.env.pins.contains_key(name))
            .collect();
        if released.is_empty() {
            return Err(pip::Failed::Said(why));
        }
        let mut lines = vec![wanted];
        lines.extend(
            self.env
                .pinned(self.moved.iter().filter(|n| !released.contains(n)).cloned()),
        );
        let constraints = self.env.constraints_without(&released, folder)?;
        let note = format!(
            "# {} does not install with the good end's pins; its own requirements ({}) are let go of theirs\n",
            self.identity(at),
            released.join(", ")
        );
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(folder.join("install.log"))
            .and_then(|mut log| std::io::Write::write_all(&mut log, note.as_bytes()));
        self.env
            .install(&lines, Some(&constraints), false, folder, interrupt)?;
        self.moved.extend(released);
        Ok(())
    }
}

impl Prepare for Versions {
    fn identity(&self, at: usize) -> String {
        format!("{}=={}", self.package, self.candidates[at].id)
    }

    fn environment(&self) -> String {
        self.env.identity.clone()
    }

    fn prepare(
        &mut self,
        at: usize,
        folder: &Path,
        interrupt: &Interrupt,
    ) -> Result<Prepared, BisectError> {
        let installed = self.install(at, folder, interrupt);
        self.env.ready(installed, &self.options)
    }

    fn release(&mut self, _at: usize) {}

    fn clean_up(&mut self) {
        self.env.clean_up();
    }
}

impl PrepareLinear for Versions {
    fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }
    fn as_prepare(&mut self) -> &mut dyn Prepare {
        self
    }
}

/// One package's change between two runs; `None` where it is absent.
#[derive(Debug, Clone)]
pub(super) struct Change {
    name: String,
    good: Option<String>,
    bad: Option<String>,
}

impl Change {
    fn as_in(&self, bad: bool) -> Option<String> {
        match bad {
            true => self.bad.clone(),
            false => self.good.clone(),
        }
    }

    /// The pin that puts it back as the good run had it.
    pub(super) fn restore(&self) -> String {
        match &self.good {
            Some(version) => format!("'{}=={version}'", self.name),
            None => format!("(uninstall {})", self.name),
        }
    }

    fn shown(&self, bad: bool) -> String {
        match self.as_in(bad) {
            Some(version) => format!("{}=={version}", self.name),
            None => format!("{} absent", self.name),
        }
    }
}

/// The package-set axis: subsets of the changes between two runs.
pub(super) struct Sets {
    env: Environment,
    pub(super) changes: Vec<Change>,
    /// The subsets the current call to `prepare` chooses among.
    pub(super) current: Vec<Vec<usize>>,
    options: Options,
}

impl Sets {
    pub(super) fn new(
        setup: &mut Setup<'_>,
        good_run: &Path,
        bad_run: &Path,
        index: Index,
    ) -> Result<Sets, BisectError> {
        let (good, good_case) = recorded_packages(good_run)?;
        let (bad, bad_case) = recorded_packages(bad_run)?;
        for (has, path) in [(good_case, good_run), (bad_case, bad_run)] {
            if !has.contains(&setup.options.case) {
                return Err(BisectError::BadInput(format!(
                    "{} holds no case `{}`",
                    path.display(),
                    setup.options.case
                )));
            }
        }
        let names: std::collections::BTreeSet<&String> = good.keys().chain(bad.keys()).collect();
        let present = |v: Option<&String>| {
            v.filter(|v| v.as_str() != crate::environment::ABSENT)
                .cloned()
        };
        let changes: Vec<Change> = names
            .into_iter()
            .map(|name| Change {
                name: name.clone(),
                good: present(good.get(name)),
                bad: present(bad.get(name)),
            })
            .filter(|c| c.good != c.bad)
            .collect();
        if changes.is_empty() {
            return Err(BisectError::BadInput(format!(
                "{} and {} record the same package versions; record more with `[environment] packages` or `freeze = true`",
                good_run.display(),
                bad_run.display()
            )));
        }
        let bisected: Vec<String> = changes.iter().map(|c| c.name.clone()).collect();
        let env = Environment::make(setup, index, &good, &bisected)?;
        Ok(Sets {
            env,
            changes,
            current: Vec::new(),
            options: setup.options.clone(),
        })
    }

    /// A subset as a candidate: its pins, named by a hash of them.
    pub(super) fn candidate(&self, subset: &[usize]) -> Candidate {
        let id = match subset.is_empty() {
            true => "the good run's packages".to_string(),
            false => subset
                .iter()
                .map(|&i| self.changes[i].shown(true))
                .collect::<Vec<_>>()
                .join(" "),
        };
        let label = match subset.len() {
            0 => "good-packages".to_string(),
            n if n == self.changes.len() => "bad-packages".to_string(),
            _ => format!("set-{:08x}", crate::suite::fnv1a(id.as_bytes()) as u32),
        };
        // The terminal names a candidate by its label: the pins it
        // applies are what says which set it is.
        let subject = match subset.is_empty() {
            true => String::new(),
            false => id.clone(),
        };
        Candidate { id, label, subject }
    }

    pub(super) fn candidates_now(&self) -> Vec<Candidate> {
        self.current.iter().map(|s| self.candidate(s)).collect()
    }
}

impl Prepare for Sets {
    fn identity(&self, at: usize) -> String {
        let subset = &self.current[at];
        let applied: Vec<String> = (0..self.changes.len())
            .map(|i| self.changes[i].shown(subset.contains(&i)))
            .collect();
        applied.join("\n")
    }

    fn environment(&self) -> String {
        self.env.identity.clone()
    }

    fn prepare(
        &mut self,
        at: usize,
        folder: &Path,
        interrupt: &Interrupt,
    ) -> Result<Prepared, BisectError> {
        let subset = self.current[at].clone();
        let wanted: Vec<Option<String>> = (0..self.changes.len())
            .map(|i| self.changes[i].as_in(subset.contains(&i)))
            .collect();
        let absent: Vec<String> = self
            .changes
            .iter()
            .zip(&wanted)
            .filter(|(_, v)| v.is_none())
            .map(|(c, _)| c.name.clone())
            .collect();
        let install: Vec<String> = self
            .changes
            .iter()
            .zip(&wanted)
            .filter_map(|(c, v)| v.as_ref().map(|v| format!("{}=={v}", c.name)))
            .collect();
        let log = folder.join("install.log");
        let result = self
            .env
            .venv
            .uninstall(&absent, &log, interrupt)
            .and_then(|()| {
                self.env.install(
                    &install,
                    Some(&self.env.constraints),
                    false,
                    folder,
                    interrupt,
                )
            });
        self.env.ready(result, &self.options)
    }

    fn release(&mut self, _at: usize) {}

    fn clean_up(&mut self) {
        self.env.clean_up();
    }
}

/// The package versions a run recorded (`[environment] packages`, and
/// `pip freeze` when asked), normalised names; and its case ids.
fn recorded_packages(
    path: &Path,
) -> Result<(std::collections::BTreeMap<String, String>, Vec<String>), BisectError> {
    let text = crate::files::read_input(path, crate::files::MAX_RESULTS_BYTES, "a results file")
        .map_err(|e| BisectError::BadInput(format!("cannot read {}: {e}", path.display())))?;
    let results = crate::results::readback::parse(&text)
        .map_err(|why| BisectError::BadInput(format!("{}: {why}", path.display())))?;
    let Some(python) = &results.environment.python else {
        return Err(BisectError::BadInput(format!(
            "{} records no Python packages: the suite needs `[environment] packages` or `freeze = true`",
            path.display()
        )));
    };
    let mut packages = std::collections::BTreeMap::new();
    let frozen = python.freeze.as_deref().unwrap_or_default().join("\n");
    for line in pip::parse_freeze(&frozen) {
        if let Frozen::Pin { name, version } = line {
            packages.insert(name, version);
        }
    }
    for (name, version) in &python.packages {
        packages.insert(pip::normalise(name), version.clone());
    }
    let cases = results.cases.iter().map(|c| c.id.clone()).collect();
    Ok((packages, cases))
}
