//! GitHub Actions annotations: `::error` for every case that did not pass
//! and every `[[parity]]` rule that did not hold,
//! `::warning` for environment drift and cases that passed only alone
//! after failing while sharing a GPU (flaky), `::notice` for improvements worth a
//! re-lock. Printed to stdout (where the runner reads workflow commands),
//! only when `GITHUB_ACTIONS=true`. Best effort: a stdout that cannot be
//! written (a closed pipe) loses the annotations, said once on stderr, and
//! never stops the suite.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::{Event, Reporter};
use crate::baseline::Outcome;

pub struct Annotations {
    enabled: bool,
}

impl Annotations {
    /// On under GitHub Actions, unless a report goes to stdout
    /// (`--json /dev/stdout`): annotations there would corrupt it, so they
    /// are left out, and that is said.
    pub fn from_env() -> Self {
        let github = std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true");
        let taken = super::terminal::stdout_is_taken();
        if github && taken {
            super::terminal::to_stderr(
                "warning: no GitHub annotations: a report is written to stdout, and they would corrupt it",
            );
        }
        Annotations {
            enabled: github && !taken,
        }
    }
}

/// Escape a workflow-command value (`%`, CR and LF), as the runner expects,
/// with every secret masked first (see `crate::redact`) and the text
/// [cleaned](crate::clean::block): ESC, BEL, bidi and noncharacters shown
/// as escapes; its newlines become `%0A`, so none starts a command.
pub fn escape(text: &str) -> String {
    crate::clean::block(&crate::redact::mask_written(text))
        .replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Where a pytest case's annotation stands in a pull request: its test's
/// file (relative to the checkout, `GITHUB_WORKSPACE`) and line, as
/// `file=…,line=…,`; empty for any other case.
fn place(result: &crate::results::CaseResult, workspace: Option<&Path>) -> String {
    let Some(test) = &result.pytest else {
        return String::new();
    };
    let file = result.cwd.join(&test.file);
    let file = workspace
        .and_then(|w| file.strip_prefix(w).ok())
        .unwrap_or(&file);
    match test.line {
        Some(line) => format!(
            "file={},line={line},",
            escape_property(&file.display().to_string())
        ),
        None => format!("file={},", escape_property(&file.display().to_string())),
    }
}

/// Properties (`title=`) additionally escape `:` and `,`.
fn escape_property(text: &str) -> String {
    escape(text).replace(':', "%3A").replace(',', "%2C")
}

impl Reporter for Annotations {
    fn handle(&mut self, event: &Event<'_>) -> io::Result<()> {
        if !self.enabled {
            return Ok(());
        }
        if let Err(e) = self.annotate(event) {
            self.enabled = false;
            super::terminal::to_stderr(&format!(
                "warning: GitHub annotations stop here: cannot write them to stdout ({e}); the cases go on and every report is still written"
            ));
        }
        Ok(())
    }
}

impl Annotations {
    fn annotate(&mut self, event: &Event<'_>) -> io::Result<()> {
        let workspace = std::env::var_os("GITHUB_WORKSPACE").map(PathBuf::from);
        let commands = commands(event, workspace.as_deref());
        if commands.is_empty() {
            return Ok(());
        }
        let mut out = io::stdout().lock();
        for command in &commands {
            writeln!(out, "{command}")?;
        }
        out.flush()
    }
}

/// The workflow commands an event earns, one a line; `workspace`: the
/// checkout a pytest case's file is named relative to.
pub(super) fn commands(event: &Event<'_>, workspace: Option<&Path>) -> Vec<String> {
    let mut commands = Vec::new();
    match event {
        Event::CaseFinished { result, .. } => {
            if !result.status.ok() {
                // The failure kind, as JUnit's type and results.json say it.
                let kind = result
                    .failure_kind
                    .map_or(result.status.as_str(), |kind| kind.as_str());
                let title = escape_property(&format!("oomgate {kind} {}", result.id));
                let message = result.message.as_deref().unwrap_or(result.status.as_str());
                let place = place(result, workspace);
                commands.push(format!("::error {place}title={title}::{}", escape(message)));
            } else if let Some(retried) = result.retried_alone.as_ref().filter(|_| result.flaky()) {
                let first = &retried.first_attempt;
                let title = escape_property(&format!("oomgate flaky {}", result.id));
                let message = format!(
                    "failed with {}, passed when run again: {}",
                    first.circumstance(),
                    first.message.as_deref().unwrap_or(first.status.as_str())
                );
                commands.push(format!("::warning title={title}::{}", escape(&message)));
            } else if let Some(comparison) = &result.baseline {
                let title = escape_property(&format!("oomgate improved {}", result.id));
                for figure in comparison.figures() {
                    if figure.outcome == Outcome::Improved {
                        commands.push(format!(
                            "::notice title={title}::{}",
                            escape(&figure.message)
                        ));
                    }
                }
                // A number from the logs that moved the good way.
                for check in result.checks.iter().filter(|c| {
                    matches!(c.kind, crate::results::CheckKind::Output(_))
                        && c.outcome == Some(crate::results::CheckOutcome::Improved)
                }) {
                    commands.push(format!(
                        "::notice title={title}::{}",
                        escape(&check.message)
                    ));
                }
            }
        }
        Event::RunFinished { results } => {
            // A parity rule that broke, or could not be verified, fails the
            // run: an error of its own, not of either case.
            for parity in results.parity.iter().filter(|p| !p.passed) {
                let title = escape_property(&format!(
                    "oomgate {} {}",
                    parity.outcome.as_str(),
                    parity.name
                ));
                commands.push(format!(
                    "::error title={title}::{}",
                    escape(&parity.message)
                ));
            }
            if let Some(baseline) = &results.baseline {
                for change in &baseline.drift {
                    let title = escape_property("oomgate environment drift");
                    commands.push(format!(
                        "::warning title={title}::{}",
                        escape(&change.to_string())
                    ));
                }
            }
        }
        _ => {}
    }
    commands
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pytest_case_is_annotated_on_its_test() {
        let mut case = crate::results::CaseResult::unmeasured("tests/test_a.py::test_x".into());
        assert_eq!(place(&case, None), "", "not a pytest case");
        case.cwd = "/work/repo/python".into();
        case.pytest = Some(crate::suite::PytestTest {
            file: "tests/test_a.py".into(),
            line: Some(12),
            classname: "tests.test_a".into(),
            name: "test_x".into(),
        });
        assert_eq!(
            place(&case, Some(Path::new("/work/repo"))),
            "file=python/tests/test_a.py,line=12,"
        );
        assert_eq!(
            place(&case, Some(Path::new("/elsewhere"))),
            "file=/work/repo/python/tests/test_a.py,line=12,"
        );
    }

    #[test]
    fn escapes_workflow_commands() {
        assert_eq!(escape("50% of\nGPU"), "50%25 of%0AGPU");
        assert_eq!(escape_property("a: b, c"), "a%3A b%2C c");
    }

    /// A parity that broke is an error of the run, titled by its rule's
    /// name; one that held or was left to a merge says nothing.
    #[test]
    fn a_broken_parity_is_an_error_of_the_run() {
        use crate::results::{ParityOutcome, ParityResult};
        let parity = |outcome, passed| ParityResult {
            name: "parity: offload vs train".into(),
            lhs: "offload".into(),
            rhs: "train".into(),
            figure: "gpu_peak".into(),
            rule: "lhs <= 0.6 * rhs".into(),
            lhs_value: None,
            rhs_value: None,
            bound: None,
            outcome,
            passed,
            missing: None,
            message: "offload gpu_peak 6.00 GiB is not <= 4.80 GiB".into(),
        };
        let mut results = crate::results::test_support::passed_results(&["offload", "train"]);
        results.parity = vec![
            parity(ParityOutcome::Broken, false),
            parity(ParityOutcome::Held, true),
            parity(ParityOutcome::NotJudged, true),
        ];
        let commands = commands(&Event::RunFinished { results: &results }, None);
        assert_eq!(
            commands,
            [
                "::error title=oomgate broken parity%3A offload vs train::offload gpu_peak 6.00 GiB is not <= 4.80 GiB"
            ]
        );
    }

    /// A number from the logs that improved on its locked value is a
    /// notice worth a re-lock, as a figure's improvement is.
    #[test]
    fn an_improved_number_from_the_logs_is_a_notice() {
        use crate::results::{Check, CheckKind, CheckOutcome};
        let mut results = crate::results::test_support::passed_results(&["serve"]);
        let case = &mut results.cases[0];
        case.baseline = Some(Default::default());
        let mut check = Check::new(
            CheckKind::Output("kv_tokens".into()),
            true,
            CheckOutcome::Improved,
        );
        check.message = "output.kv_tokens 1,600,000 improved on the baseline".into();
        case.checks.push(check);
        let event = Event::CaseFinished {
            result: &results.cases[0],
            index: 0,
            planned: 1,
            results: &results,
        };
        assert_eq!(
            commands(&event, None),
            [
                "::notice title=oomgate improved serve::output.kv_tokens 1,600,000 improved on the baseline"
            ]
        );
    }
}
