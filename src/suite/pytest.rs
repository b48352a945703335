//! `[[pytest]]`: a pytest suite as oomgate cases, one per collected test
//! (or per file), each run in its own process.
//!
//! What is here is plain data: what oomgate's pytest plugin reports of a
//! collection ([`Collected`]), and the identity a case made of a test
//! keeps ([`PytestTest`]). The checked table and the cases made of it are
//! `pytest_table`; running pytest to collect is `crate::pytest`'s
//! business.

use serde::{Deserialize, Serialize};

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

/// What oomgate's pytest plugin writes of a collection (`OOMGATE_COLLECT`).
#[derive(Debug, Clone, Deserialize)]
pub struct Collected {
    /// pytest's version.
    pub pytest: String,
    pub rootdir: String,
    /// The workers pytest-xdist was asked for (`-n 2`, `auto`), when it
    /// is loaded and asked for any; `None` otherwise.
    #[serde(default)]
    pub xdist_workers: Option<String>,
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
    pub(super) fn located(&self) -> String {
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
    pub(super) fn of_test(test: &CollectedTest) -> Self {
        let (classname, name) = junit_names(&test.nodeid);
        PytestTest {
            file: test.file.clone(),
            line: test.line,
            classname,
            name,
        }
    }

    pub(super) fn of_file(test: &CollectedTest) -> Self {
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
