//! A checked `[[pytest]]` table ([`PytestSource`]): its paths, arguments
//! and the case every test starts from, and the command that collects
//! it. The cases made of it and a collection (each with its
//! `@pytest.mark.oomgate` markers layered over the table's settings) are
//! `validate::pytest`'s, which checks the markers. Pure.

use super::case::Case;
use super::pytest::Granularity;

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
    /// `isolate = true`: every test in a process of its own; otherwise the
    /// tests share one pytest session, but for those whose keys need
    /// their own process.
    pub isolate: bool,
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

    /// The command of the table's shared session: pytest over the
    /// table's paths, `extra` arguments after the table's; oomgate's
    /// plugin then runs the tests oomgate names, one at a time.
    pub fn session_command(&self, extra: &[&str]) -> Vec<String> {
        let mut command = self.template.command.clone();
        command.extend(extra.iter().map(|a| a.to_string()));
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
}

/// The cases of one collection, and what was wrong with it.
#[derive(Debug, Default)]
pub struct Expanded {
    pub cases: Vec<Case>,
    pub warnings: Vec<String>,
    /// One line each, naming the test.
    pub errors: Vec<String>,
}
