//! `[[pytest]]`: a pytest suite as oomgate cases, one per collected test
//! (or per file), each run in its own process.
//!
//! What is here is pure: the checked table ([`PytestSource`]), what
//! oomgate's pytest plugin reports of a collection ([`Collected`]), and the
//! cases made of the two, each with its `@pytest.mark.oomgate` markers
//! layered over the table's settings (module, class, function: the
//! closest wins, keyword by keyword). Running pytest to collect is
//! `crate::pytest`'s business.

use serde::{Deserialize, Serialize};

use super::template::folder_name;
use super::{Case, Templates};

/// The module name oomgate's copy of its pytest plugin is loaded as
/// (`-p oomgate_pytest`); the wheel's copy is `oomgate_probe.pytest_plugin`,
/// registered as `oomgate`, which oomgate's runs block (`-p no:oomgate`)
/// so that the marker is not registered twice.
pub const PYTEST_PLUGIN_MODULE: &str = "oomgate_pytest";

/// How a `[[pytest]]`'s tests are made cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Granularity {
    /// One case per test: `python -m pytest <nodeid>`.
    Test,
    /// One case per file; only module-level markers apply.
    File,
}

/// A `[[pytest]]` table, checked, before pytest collected it.
#[derive(Debug, Clone)]
pub struct PytestSource {
    /// 0-based place among the suite's `[[pytest]]` tables.
    pub index: usize,
    /// 1-based line of the table in the suite, for messages.
    pub line: usize,
    /// Where the tests are, relative to the table's `cwd`.
    pub paths: Vec<String>,
    /// Extra pytest arguments, for the collection and every test.
    pub args: Vec<String>,
    pub granularity: Granularity,
    /// Every test's case before its node id and markers: `python -m
    /// pytest -p no:oomgate -p oomgate_pytest ARGS`, and the table's keys
    /// over `[defaults]`.
    pub template: Case,
}

impl PytestSource {
    /// The command that collects the tests (run in the template's cwd).
    pub fn collect_command(&self) -> Vec<String> {
        let mut command = self.template.command.clone();
        command.extend(["--collect-only", "-q"].map(String::from));
        command.extend(self.paths.iter().cloned());
        command
    }

    /// The table, for messages: `[[pytest]] at suite line 12 (tests/gpu)`.
    pub fn describe(&self) -> String {
        format!(
            "[[pytest]] at suite line {} ({})",
            self.line,
            self.paths.join(", ")
        )
    }

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
        match self.granularity {
            Granularity::Test => {
                for test in tests {
                    let markers: Vec<&CollectedMarker> = test.markers.iter().collect();
                    let identity = PytestTest::of_test(test);
                    let mut case = self.case_of(&test.nodeid, &test.arg, identity);
                    let problems = super::validate::apply_markers(&mut case, &markers);
                    if problems.is_empty() {
                        expanded.cases.push(case);
                    } else {
                        expanded.errors.extend(
                            problems
                                .into_iter()
                                .map(|p| format!("{}: {}", test.located(), crate::clean::line(&p))),
                        );
                    }
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
                    let mut case = self.case_of(module, &first.file, identity);
                    let problems = super::validate::apply_markers(&mut case, &module_markers);
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

    fn case_of(&self, id: &str, arg: &str, identity: PytestTest) -> Case {
        let mut case = self.template.clone();
        case.id = id.to_string();
        case.folder = folder_name(id);
        case.command.push(arg.to_string());
        case.templates = Templates {
            command: case.command.clone(),
            env: case.env.clone(),
        };
        case.pytest = Some(identity);
        case
    }
}

/// The cases of one collection, and what was wrong with it.
#[derive(Debug, Default)]
pub struct Expanded {
    pub cases: Vec<Case>,
    pub warnings: Vec<String>,
    /// One line each, naming the test.
    pub errors: Vec<String>,
}

/// What oomgate's pytest plugin writes of a collection (`OOMGATE_COLLECT`).
#[derive(Debug, Clone, Deserialize)]
pub struct Collected {
    /// pytest's version.
    pub pytest: String,
    pub rootdir: String,
    pub tests: Vec<CollectedTest>,
}

/// One collected test.
#[derive(Debug, Clone, Deserialize)]
pub struct CollectedTest {
    /// pytest's id: `tests/gpu/test_model.py::TestA::test_forward[bf16]`,
    /// relative to the rootdir.
    pub nodeid: String,
    /// The same test as a command-line argument from the invocation
    /// directory (the table's `cwd`).
    pub arg: String,
    /// Its file, relative to the invocation directory.
    pub file: String,
    /// Its module's node id (`tests/gpu/test_model.py`).
    pub module_nodeid: String,
    /// 1-based line of the test (its first decorator).
    pub line: Option<u32>,
    pub class: Option<String>,
    /// The test's name with its parameters: `test_forward[bf16]`.
    pub name: String,
    /// Its `oomgate` markers, closest first.
    pub markers: Vec<CollectedMarker>,
}

impl CollectedTest {
    /// `tests/gpu/test_model.py:6: tests/gpu/test_model.py::test_x`.
    /// Both [cleaned](crate::clean::line): a file's name may
    /// hold anything.
    fn located(&self) -> String {
        let file = crate::clean::line(&self.file);
        let nodeid = crate::clean::line(&self.nodeid);
        match self.line {
            Some(line) => format!("{file}:{line}: {nodeid}"),
            None => format!("{file}: {nodeid}"),
        }
    }
}

/// One `@pytest.mark.oomgate(...)` that applies to a test.
#[derive(Debug, Clone, Deserialize)]
pub struct CollectedMarker {
    /// `module`, `class`, `function` (or `package`).
    pub level: String,
    /// The node it stands on.
    pub node: String,
    pub args: Vec<serde_json::Value>,
    pub kwargs: serde_json::Map<String, serde_json::Value>,
}

/// A pytest case's names, as pytest's own JUnit report writes them, so a
/// CI's test history lines up with the team's pytest reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PytestTest {
    /// The test's file, relative to the case's cwd.
    pub file: String,
    /// 1-based line of the test; `None` for a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The module path with dots, then the class: `tests.gpu.test_model.TestA`.
    pub classname: String,
    /// The test with its parameters (`test_forward[bf16]`), or the file's name.
    pub name: String,
}

impl PytestTest {
    fn of_test(test: &CollectedTest) -> Self {
        let (classname, name) = junit_names(&test.nodeid);
        PytestTest {
            file: test.file.clone(),
            line: test.line,
            classname,
            name,
        }
    }

    fn of_file(test: &CollectedTest) -> Self {
        let (classname, name) = junit_names(&test.module_nodeid);
        PytestTest {
            file: test.file.clone(),
            line: None,
            classname,
            name,
        }
    }
}

/// A node id's JUnit `classname` and `name` as pytest's junitxml writes
/// them: `tests/gpu/test_model.py::TestA::test_forward[bf16]` is
/// `tests.gpu.test_model.TestA` and `test_forward[bf16]` (parameters, `::`
/// and all, stay in the name). A file alone (`granularity = "file"`),
/// which pytest never reports, is its module and its node id.
pub fn junit_names(nodeid: &str) -> (String, String) {
    let (path, params) = match nodeid.find('[') {
        Some(at) => nodeid.split_at(at),
        None => (nodeid, ""),
    };
    let mut names: Vec<String> = path.split("::").map(String::from).collect();
    let file = names[0].clone();
    names[0] = file.strip_suffix(".py").unwrap_or(&file).replace('/', ".");
    if names.len() == 1 {
        return (names.remove(0), nodeid.to_string());
    }
    let mut name = names.pop().unwrap_or_default();
    name.push_str(params);
    (names.join("."), name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn junit_names_follow_pytest() {
        let table = [
            (
                "tests/gpu/test_model.py::TestA::test_forward[bf16]",
                "tests.gpu.test_model.TestA",
                "test_forward[bf16]",
            ),
            (
                "tests/gpu/test_model.py::test_plain",
                "tests.gpu.test_model",
                "test_plain",
            ),
            ("test_a.py::test_x[a::b]", "test_a", "test_x[a::b]"),
            (
                "test_a.py::TestOuter::TestInner::test_y",
                "test_a.TestOuter.TestInner",
                "test_y",
            ),
            (
                "tests/gpu/test_model.py",
                "tests.gpu.test_model",
                "tests/gpu/test_model.py",
            ),
        ];
        for (nodeid, classname, name) in table {
            assert_eq!(
                junit_names(nodeid),
                (classname.to_string(), name.to_string()),
                "{nodeid}"
            );
        }
    }
}
