//! A `[[pytest]]` table, checked: its paths, interpreter, arguments and
//! granularity, the case keys it may not have, and its settings over
//! `[defaults]`, made the template every one of its tests starts from.

use std::path::Path;

use toml::Spanned;

use super::limits::limits;
use super::shared::{check_env, lexical_join, merged_env, pick, resolve_program};
use crate::suite::budget::Budget;
use crate::suite::case::{Case, PytestSession};
use crate::suite::checker::Checker;
use crate::suite::model::Tolerances;
use crate::suite::pytest::{
    Collected, CollectedMarker, CollectedTest, Granularity, PYTEST_PLUGIN_MODULE, PytestTest,
};
use crate::suite::pytest_table::{Expanded, PytestSource};
use crate::suite::raw::{RawPytest, RawSettingsRef};
use crate::suite::template::substitute;
use crate::suite::template::{Templates, folder_name};

/// The table checked; `None` when it is wrong (its problems are in `check`).
pub(super) fn source(
    check: &mut Checker,
    index: usize,
    table: &Spanned<RawPytest>,
    defaults: RawSettingsRef<'_>,
    suite_tolerance: Tolerances,
    workdir: &Path,
    environment_python: Option<&str>,
) -> Option<PytestSource> {
    let before = check.problems.len();
    let raw = table.get_ref();
    for (key, value, why) in [
        (
            "name",
            &raw.name,
            "each test's case id is its pytest node id",
        ),
        (
            "command",
            &raw.command,
            "each test runs as `python -m pytest <node id>`; set `python` and `args` instead",
        ),
        (
            "matrix",
            &raw.matrix,
            "parametrize the tests in pytest; each parameter set is its own case",
        ),
        ("search", &raw.search, "a capacity search is a `[[case]]`'s"),
        (
            "capacity_tolerance",
            &raw.capacity_tolerance,
            "a capacity search is a `[[case]]`'s",
        ),
        ("server", &raw.server, "a server is a `[[case]]`'s"),
        (
            "client_budget",
            &raw.client_budget,
            "a server is a `[[case]]`'s",
        ),
    ] {
        if let Some(value) = value {
            check
                .error(value.span(), format!("`{key}` is not a `[[pytest]]` key"))
                .help = Some(why.to_string());
        }
    }
    let paths: Vec<String> = raw
        .paths
        .get_ref()
        .iter()
        .map(|p| p.get_ref().clone())
        .collect();
    if paths.is_empty() {
        check.error(raw.paths.span(), "`paths` is empty").help =
            Some("name the test files or folders, e.g. paths = [\"tests/gpu\"]".into());
    }
    for path in raw.paths.get_ref() {
        if path.get_ref().trim().is_empty() || path.get_ref().contains('\0') {
            check.error(
                path.span(),
                "a path must be a file or folder name, not empty",
            );
        } else if path.get_ref().starts_with('-') {
            check
                .error(
                    path.span(),
                    "a path may not start with `-`: pytest would read it as an option",
                )
                .help = Some("put pytest options in `args`".into());
        }
    }
    let args: Vec<String> = raw
        .args
        .iter()
        .flatten()
        .map(|a| a.get_ref().clone())
        .collect();
    for arg in raw.args.iter().flatten() {
        if arg.get_ref().contains('\0') {
            check.error(
                arg.span(),
                "contains a NUL byte, which no process argument can hold",
            );
        }
    }
    let granularity = check.choice(
        "granularity",
        raw.granularity.as_ref(),
        &[("test", Granularity::Test), ("file", Granularity::File)],
    );
    let python = match &raw.python {
        Some(python) if python.get_ref().trim().is_empty() => {
            check.error(
                python.span(),
                "`python` is empty: name the interpreter that runs pytest",
            );
            None
        }
        Some(python) => Some(python.get_ref().clone()),
        None => Some(environment_python.unwrap_or("python3").to_string()),
    };
    let own = raw.settings();
    check_env(check, own, defaults);
    let limits = limits(check, own, defaults, suite_tolerance);
    if check.problems.len() > before {
        return None;
    }
    let (Some(python), Some(timeout), Some(kill_grace)) =
        (python, limits.timeout, limits.kill_grace)
    else {
        return None;
    };
    let no_params = indexmap::IndexMap::new();
    let cwd = match pick(own.cwd, defaults.cwd) {
        Some(dir) => lexical_join(workdir, Path::new(&substitute(dir.get_ref(), &no_params))),
        None => workdir.to_path_buf(),
    };
    let env: indexmap::IndexMap<String, String> = merged_env(own, defaults)
        .into_iter()
        .map(|(k, v)| (k.get_ref().clone(), v.get_ref().clone()))
        .collect();
    let mut command: Vec<String> = [
        python.as_str(),
        "-m",
        "pytest",
        "-p",
        "no:oomgate",
        "-p",
        PYTEST_PLUGIN_MODULE,
    ]
    .map(String::from)
    .to_vec();
    command.extend(args.iter().cloned());
    let template = Case {
        id: String::new(),
        folder: String::new(),
        params: indexmap::IndexMap::new(),
        program: resolve_program(&python, &cwd),
        templates: Templates {
            command: command.clone(),
            env: env.clone(),
        },
        command,
        cwd,
        env,
        timeout,
        kill_grace,
        concurrency: limits.concurrency,
        soak: limits.soak,
        budget: limits.budget,
        tolerance: limits.tolerance,
        repeat: limits.repeat,
        limits: limits.limits,
        leak: limits.leak,
        creep: limits.creep,
        gpus: limits.gpus,
        gpu_memory: limits.gpu_memory,
        settle_timeout: limits.settle_timeout,
        sites_depth: limits.sites_depth,
        search: None,
        server: None,
        client_budget: Budget::default(),
        outputs: Vec::new(),
        pytest: None,
        pytest_session: None,
    };
    Some(PytestSource {
        index,
        line: check.source[..table.span().start].lines().count().max(1),
        paths,
        args,
        granularity,
        isolate: raw.isolate.as_ref().is_some_and(|i| *i.get_ref()),
        template,
    })
}

/// The cases of a collection: each test (or file) a case, its markers
/// checked and layered over the table's settings.
impl PytestSource {
    /// The cases of a collection: one per test, or one per file, each
    /// with its markers applied. A test whose marker is wrong is an error
    /// naming the test; a test-level marker that `granularity = "file"`
    /// ignores is a warning.
    pub fn cases(&self, collected: &Collected) -> Expanded {
        let mut expanded = Expanded::default();
        // A node id is a case id, and pytest's argument to run it: one
        // with a control character (a file named with a newline or ESC) is
        // refused as a `[[case]]` id would be — pytest itself cannot run
        // it — located at the test, the id shown escaped.
        let id_of = |test: &'_ CollectedTest| match self.granularity {
            Granularity::Test => test.nodeid.clone(),
            Granularity::File => test.module_nodeid.clone(),
        };
        let mut refused = indexmap::IndexSet::new();
        for test in &collected.tests {
            let id = id_of(test);
            if id.chars().any(char::is_control) && refused.insert(id) {
                expanded.errors.push(format!(
                    "{}: the test's node id holds a control character (a newline, tab or escape, from its file's or its own name): it cannot be a case id, nor be given to pytest to run; rename the file or the test",
                    test.located()
                ));
            }
        }
        let tests: Vec<&CollectedTest> = collected
            .tests
            .iter()
            .filter(|t| !id_of(t).chars().any(char::is_control))
            .collect();
        // Each case is a pytest process of its own: workers pytest-xdist
        // would start there are measured as the test's memory and time
        // (a test of 47 MiB read 92 MiB under `-n 2`). `-n 0` after the
        // project's options runs the test in the process oomgate measures.
        let xdist_off: &[&str] = match &collected.xdist_workers {
            Some(workers) => {
                expanded.warnings.push(format!(
                    "{}: pytest-xdist is asked for `-n {}` (the project's addopts or the block's args): oomgate turns xdist off (`-n 0`), whose workers would be counted as a test's own memory, and runs that many tests at once itself, each measured on its own (as `--jobs`, which overrides it)",
                    self.describe(),
                    crate::clean::line(workers)
                ));
                &["-n", "0"]
            }
            None => &[],
        };
        match self.granularity {
            Granularity::Test => {
                // In a session the plugin turns xdist off itself (before xdist
                // reads `-n`), and the session that collected is the one
                // that runs: no `-n 0` on its command.
                let session_command = self.session_command(&[]);
                // Tests isolated for a key a session cannot apply, with it.
                let mut isolated: Vec<(String, &str)> = Vec::new();
                for test in tests {
                    let markers: Vec<&CollectedMarker> = test.markers.iter().collect();
                    let identity = PytestTest::of_test(test);
                    let mut case = self.case_of(&test.nodeid, &test.arg, identity, xdist_off);
                    let applied = super::markers::apply_markers(&mut case, &markers);
                    let problems = applied.problems;
                    if problems.is_empty() {
                        match (self.isolate || applied.isolate, needs_own_process(&case)) {
                            (true, _) => {}
                            (false, Some(key)) => isolated.push((test.nodeid.clone(), key)),
                            (false, None) => {
                                case.pytest_session = Some(PytestSession {
                                    table: self.index,
                                    command: session_command.clone(),
                                    nodeid: test.nodeid.clone(),
                                });
                            }
                        }
                        expanded.cases.push(case);
                    } else {
                        expanded.errors.extend(
                            problems
                                .into_iter()
                                .map(|p| format!("{}: {}", test.located(), crate::clean::line(&p))),
                        );
                    }
                }
                if !isolated.is_empty() {
                    expanded.warnings.push(self.isolated_warning(&isolated));
                }
            }
            Granularity::File => {
                let mut files: indexmap::IndexMap<&str, Vec<&CollectedTest>> =
                    indexmap::IndexMap::new();
                for test in tests {
                    files.entry(&test.module_nodeid).or_default().push(test);
                }
                for (module, tests) in files {
                    let first = tests[0];
                    let module_markers: Vec<&CollectedMarker> = first
                        .markers
                        .iter()
                        .filter(|m| m.level == "module")
                        .collect();
                    let ignored = tests
                        .iter()
                        .flat_map(|t| &t.markers)
                        .filter(|m| m.level != "module")
                        .map(|m| crate::clean::line(&m.node))
                        .collect::<indexmap::IndexSet<_>>();
                    if !ignored.is_empty() {
                        expanded.warnings.push(format!(
                            "{}: granularity = \"file\" runs the file as one case, judged by its module-level marker; the oomgate marker(s) of {} are ignored",
                            crate::clean::line(module),
                            ignored.into_iter().collect::<Vec<_>>().join(", ")
                        ));
                    }
                    let identity = PytestTest::of_file(first);
                    let mut case = self.case_of(module, &first.file, identity, xdist_off);
                    let problems =
                        super::markers::apply_markers(&mut case, &module_markers).problems;
                    if problems.is_empty() {
                        expanded.cases.push(case);
                    } else {
                        expanded.errors.extend(problems.into_iter().map(|p| {
                            format!("{}: {}", crate::clean::line(module), crate::clean::line(&p))
                        }));
                    }
                }
            }
        }
        expanded
    }

    /// `[[pytest]] at suite line 12 (tests): 3 tests run in a process of
    /// their own, for keys a shared session cannot apply: a::t1 (repeat),
    /// ...`.
    fn isolated_warning(&self, isolated: &[(String, &str)]) -> String {
        const SHOWN: usize = 5;
        let mut named: Vec<String> = isolated
            .iter()
            .take(SHOWN)
            .map(|(nodeid, key)| format!("{} ({key})", crate::clean::line(nodeid)))
            .collect();
        if isolated.len() > SHOWN {
            named.push(format!("and {} more", isolated.len() - SHOWN));
        }
        format!(
            "{}: {} test(s) run in a process of their own, for keys a shared pytest session cannot apply: {}",
            self.describe(),
            isolated.len(),
            named.join(", ")
        )
    }

    /// The case of one test (or file), `extra` arguments before its own.
    fn case_of(&self, id: &str, arg: &str, identity: PytestTest, extra: &[&str]) -> Case {
        let mut case = self.template.clone();
        case.id = id.to_string();
        case.folder = folder_name(id);
        case.command.extend(extra.iter().map(|a| a.to_string()));
        case.command.push(arg.to_string());
        case.templates = Templates {
            command: case.command.clone(),
            env: case.env.clone(),
        };
        case.pytest = Some(identity);
        case
    }
}

/// The key that keeps a test out of its table's shared session, if one
/// does: what a session cannot apply to one test among others (its own
/// runs, instances, duration, GPUs, a leak over its iterations, limits on
/// its probe's figures), and the GPU budgets that are no figure of one
/// test among others (`gpu_left`: the session keeps the allocator's
/// cache; `gpu_rank`: ranks are processes of their own).
pub fn needs_own_process(case: &Case) -> Option<&'static str> {
    if case.repeat > 1 {
        return Some("repeat");
    }
    if case.concurrency > 1 {
        return Some("concurrency");
    }
    if case.soak.is_some() {
        return Some("duration");
    }
    if case.gpus.is_some() {
        return Some("gpus");
    }
    if case.leak.is_some() {
        return Some("leak");
    }
    if !case.limits.is_empty() {
        return Some("limits");
    }
    crate::suite::BudgetKind::ALL
        .into_iter()
        .find(|kind| !kind.judged_in_a_session() && case.budget.get(*kind).is_some())
        .map(crate::suite::BudgetKind::key)
}
