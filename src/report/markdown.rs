//! `summary.md`: the run as a Markdown table, the environment drift, and
//! every failure with its message. [`render`] only builds the text;
//! `files::ReportFiles` writes it to the out dir once, when the run
//! finishes, and appends it to `$GITHUB_STEP_SUMMARY` when GitHub Actions
//! sets it, so the job's summary page shows it. Appended, not replaced:
//! earlier steps of the job own the rest of that file.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::results::{CaseResult, CaseStatus, RunResults};
use crate::units::Bytes;

/// `$GITHUB_STEP_SUMMARY`, when set and not empty.
pub fn step_summary_from_env() -> Option<PathBuf> {
    std::env::var_os("GITHUB_STEP_SUMMARY")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Add the summary to the job's step summary file, after what is there.
/// Opened non-blocking: a FIFO there with no reader is an error at once,
/// never a run that hangs at its end.
pub fn append_step_summary(path: &Path, summary: &str) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    file.write_all(summary.as_bytes())?;
    file.write_all(b"\n")
}

fn icon(status: CaseStatus) -> &'static str {
    match status {
        CaseStatus::Passed => "✅ passed",
        CaseStatus::Skipped => "⏭️ skipped",
        CaseStatus::Failed => "❌ failed",
        CaseStatus::TimedOut => "⏱️ timed out",
        CaseStatus::Interrupted => "⚠️ interrupted",
        CaseStatus::Error => "❌ error",
        CaseStatus::Running => "⏳ running",
    }
}

/// A table cell of oomgate's own words and figures: [cleaned](crate::clean::line)
/// to one line, `|` escaped (a cell cannot hold one), `<` as an entity (a
/// tag would be rendered as HTML; the entity reads the same).
fn cell(text: &str) -> String {
    crate::clean::line(text)
        .replace('|', "\\|")
        .replace('<', "&lt;")
}

/// Text oomgate did not write itself — a case id, a message naming a
/// frame, a hint, an environment command's output, a lock's values — as a
/// code span: [cleaned](crate::clean::line) to one line, between more
/// backticks than any run of them in it, so that nothing in it renders
/// (no image or link that would load from elsewhere, no HTML, no
/// emphasis). In a table (`in_table`) its `|` is escaped, which GFM
/// undoes inside the span.
pub(crate) fn code(text: &str, in_table: bool) -> String {
    let text = crate::clean::line(text);
    if text.is_empty() {
        return String::new();
    }
    let text = match in_table {
        true => text.replace('|', "\\|"),
        false => text.into_owned(),
    };
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let ticks = "`".repeat(longest + 1);
    // One space each side is taken off a span that has both, so one is
    // added where the text begins or ends with a space or a backtick.
    let pad = if text.starts_with([' ', '`']) || text.ends_with([' ', '`']) {
        " "
    } else {
        ""
    };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

/// A fence that nothing in `text` can close: backticks, one more than the
/// longest run of them in it (and at least three), as CommonMark allows.
fn fence_for(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    "`".repeat((longest + 1).max(3))
}

fn bytes(value: Option<u64>) -> String {
    value.map_or("–".to_string(), |b| Bytes(b).to_string())
}

/// The summary of a run, as clean text: no control, bidi or noncharacter
/// but newline and tab, whatever a workload printed or a snapshot or lock
/// held (`super::clean`, every output's one rule), so the job summary
/// GitHub shows holds no NUL, terminal escape or carriage return. Text
/// oomgate did not write is a code span (`code`; or, for an exception, a
/// fenced block), cleaned as it is written (before its backticks are
/// chosen); the whole text once more.
pub fn render(results: &RunResults) -> String {
    let markdown = render_markdown(results);
    match crate::clean::block(&markdown) {
        std::borrow::Cow::Borrowed(_) => markdown,
        std::borrow::Cow::Owned(clean) => clean,
    }
}

fn render_markdown(results: &RunResults) -> String {
    let s = &results.summary;
    let mut out = String::new();
    let counts = super::summary_counts(s);
    let _ = writeln!(
        out,
        "## oomgate: {} — {}\n",
        cell(&results.suite.name),
        counts.join(", ")
    );
    if let Some(fault) = &results.fault {
        let _ = writeln!(
            out,
            "**oomgate stopped launching cases**: {}\n",
            cell(fault)
        );
    }
    let _ = writeln!(
        out,
        "| case | status | GPU peak | baseline | delta | host peak |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- |");
    for case in &results.cases {
        let gpu = match (&case.gpu_peak_method, case.gpu_peak_bytes) {
            (Some(method), Some(b)) => format!(
                "{}{} ({method})",
                Bytes(b),
                super::spread_note(case, crate::baseline::Figure::Gpu)
            ),
            (Some(_), None) => "unknown".to_string(),
            (None, _) => "not measured".to_string(),
        };
        let (baseline, delta) = super::baseline_cells(case);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {}{} |",
            code(&case.id, true),
            if case.flaky() {
                "✅ passed (flaky: failed sharing its GPU, passed alone)"
            } else {
                icon(case.status)
            },
            cell(&gpu),
            cell(&baseline),
            cell(&delta),
            bytes(case.host.peak_bytes),
            super::spread_note(case, crate::baseline::Figure::Host)
        );
    }
    for id in &results.not_run {
        let _ = writeln!(out, "| {} | not run | – | – | – | – |", code(id, true));
    }
    let no_part = super::parts::held_by_no_part(results);
    if !no_part.is_empty() {
        let _ = writeln!(
            out,
            "\n**Not run by any part**: {} — {}.",
            code(&no_part.join(", "), false),
            super::NO_PART_MESSAGE
        );
    }
    let unfinished = super::parts::left_by_a_killed_part(results);
    if !unfinished.is_empty() {
        let _ = writeln!(
            out,
            "\n**Not finished by its part**: {} — {}.",
            code(&unfinished.join(", "), false),
            super::UNFINISHED_MESSAGE
        );
    }
    if let Some(baseline) = &results.baseline {
        let _ = writeln!(
            out,
            "\nBaseline: {}, locked {}.",
            code(&baseline.path.display().to_string(), false),
            code(&baseline.locked_at, false)
        );
        if baseline.drift.is_empty() {
            let _ = writeln!(
                out,
                "\n### Environment drift\n\nNone: the environment matches the baseline's."
            );
        } else {
            let _ = writeln!(out, "\n### Environment drift\n");
            for change in &baseline.drift {
                let _ = writeln!(out, "- {}", code(&change.to_string(), false));
            }
        }
        if !baseline.gpu_compared {
            let _ = writeln!(
                out,
                "\nGPU figures were not compared: the GPU model differs from the baseline's."
            );
        }
        if !baseline.removed.is_empty() {
            let _ = writeln!(
                out,
                "\nIn the baseline but no longer in the suite: {}.",
                code(&baseline.removed.join(", "), false)
            );
        }
    }
    if let Some(parts) = super::parts::of(results) {
        render_parts(&mut out, &parts);
    }
    let improved = super::improved_cases(results);
    if !improved.is_empty() {
        let _ = writeln!(
            out,
            "\nImproved beyond tolerance: {}. Re-lock (`oomgate lock … --from results.json`) to tighten the gate.",
            code(&improved.join(", "), false)
        );
    }
    let notices = super::history_notices(results);
    let trends = super::history_trends(results);
    if !notices.is_empty() || !trends.is_empty() {
        let _ = writeln!(out, "\nAgainst the run history:");
        for trend in trends {
            let _ = writeln!(out, "- {}", code(&trend, false));
        }
        for notice in notices {
            let _ = writeln!(out, "- {}", code(&notice, false));
        }
    }
    let uncompared = super::uncompared_in_run(results);
    if !uncompared.is_empty() {
        let _ = writeln!(
            out,
            "\nFigures not compared with the baseline: {}. Re-lock to gate them; `--require-baseline` fails them.",
            code(&uncompared.join(", "), false)
        );
    }
    let changed: Vec<String> = results
        .cases
        .iter()
        .filter_map(|c| {
            c.baseline
                .as_ref()
                .filter(|b| !b.changes.is_empty())
                .map(|b| (c, b))
        })
        .map(|(c, b)| {
            format!(
                "- **{}**: {}",
                code(&c.id, false),
                code(&b.changes.join("; "), false)
            )
        })
        .collect();
    if !changed.is_empty() {
        let _ = writeln!(
            out,
            "\n### Changed since the baseline\n\n{}",
            changed.join("\n")
        );
    }
    case_section(&mut out, results, "Repeats", super::repeat_spread);
    case_section(&mut out, results, "Capacity", |c| {
        c.capacity.as_ref().map(|capacity| capacity.describe())
    });
    case_section(&mut out, results, "Servers under load", |c| {
        let server = c.server.as_ref()?.describe();
        Some(match &c.client {
            Some(client) => format!("{server}; {}", client.describe()),
            None => server,
        })
    });
    if !results.parity.is_empty() {
        let _ = writeln!(out, "\n### Parity\n");
        for parity in &results.parity {
            use crate::results::ParityOutcome;
            let icon = match parity.outcome {
                ParityOutcome::Held => "✅",
                ParityOutcome::Broken | ParityOutcome::Unknown => "❌",
                ParityOutcome::NotJudged => "⏭️",
            };
            let _ = writeln!(
                out,
                "- {icon} **{}** {} — {}",
                code(&parity.name, false),
                parity.outcome.as_str(),
                code(&parity.message, false)
            );
        }
    }
    let failures: Vec<&CaseResult> = results.cases.iter().filter(|c| !c.status.ok()).collect();
    if !failures.is_empty() {
        let _ = writeln!(out, "\n### Failures\n");
        for case in failures {
            let _ = writeln!(
                out,
                "- **{}** — {} (logs: {})",
                code(&case.id, false),
                code(
                    case.message.as_deref().unwrap_or(case.status.as_str()),
                    false
                ),
                code(&case.dir.display().to_string(), false)
            );
            for hint in case.diagnosis.iter().flat_map(|d| &d.hints) {
                let _ = writeln!(out, "  - hint: {}", code(hint, false));
            }
            if let Some(exception) = case.diagnosis.as_ref().and_then(|d| d.exception.as_deref()) {
                // Cleaned before its fence is chosen: a control character
                // between backticks, dropped later, would lengthen their run.
                let exception = crate::clean::block(exception);
                let fence = fence_for(&exception);
                let _ = writeln!(out, "\n  {fence}text\n{}\n  {fence}", indent(&exception));
            }
        }
    }
    out
}

/// A section of one line per case that has something to say:
/// `- **id**: line`; no section when none has.
fn case_section(
    out: &mut String,
    results: &RunResults,
    title: &str,
    line: impl Fn(&CaseResult) -> Option<String>,
) {
    let lines: Vec<String> = results
        .cases
        .iter()
        .filter_map(|c| {
            Some(format!(
                "- **{}**: {}",
                code(&c.id, false),
                code(&line(c)?, false)
            ))
        })
        .collect();
    if !lines.is_empty() {
        let _ = writeln!(out, "\n### {title}\n\n{}", lines.join("\n"));
    }
}

/// A merged run's parts, and where their environments differ.
fn render_parts(out: &mut String, parts: &super::parts::Parts) {
    let _ = writeln!(
        out,
        "\n### Parts\n\nMerged from {} parts; the environment above is the first's.\n",
        parts.rows.len()
    );
    let _ = writeln!(out, "| {} |", super::parts::COLUMNS.join(" | "));
    let _ = writeln!(out, "|{}", " --- |".repeat(super::parts::COLUMNS.len()));
    for row in &parts.rows {
        let cells: Vec<String> = row.iter().map(|c| code(c, true)).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    let _ = writeln!(out, "\n### Environment differences between parts\n");
    if parts.drift.is_empty() {
        let _ = writeln!(out, "None: every part ran in the first part's environment.");
    } else {
        let _ = writeln!(
            out,
            "Against the first part, {}:\n",
            code(&parts.first, false)
        );
        for (part, drift) in &parts.drift {
            let _ = writeln!(
                out,
                "- **{}**: {}",
                code(part, false),
                code(&drift.join("; "), false)
            );
        }
    }
    if !parts.incomparable.is_empty() {
        let _ = writeln!(
            out,
            "\n**Not comparable**: {}; {}.",
            code(&parts.incomparable.join("; "), false),
            super::parts::INCOMPARABLE_NOTE
        );
    }
}

/// Indent every line by two spaces, to nest a block under a list item.
fn indent(text: &str) -> String {
    text.lines()
        .map(|line| format!("  {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::test_support::results_with_diagnosis;

    /// The table keeps its columns, every code block closes, and no text
    /// from a workload becomes HTML or markup outside a code block.
    fn well_formed(markdown: &str) -> Result<(), String> {
        let mut fence: Option<String> = None;
        for line in markdown.lines() {
            let trimmed = line.trim_start();
            if let Some(open) = &fence {
                if trimmed == open.as_str() {
                    fence = None;
                }
                continue;
            }
            if trimmed.starts_with("```") {
                fence = Some(trimmed.trim_end_matches("text").to_string());
                continue;
            }
            if line.starts_with('|') {
                let pipes = line.matches('|').count() - line.matches("\\|").count();
                if pipes != 7 {
                    return Err(format!("{pipes} cells in {line:?}"));
                }
            }
            let outside = outside_code_spans(line);
            if outside.contains('<')
                || outside.contains("![")
                || outside.contains("](")
                || line.trim_start().starts_with('>')
            {
                return Err(format!("markup outside a code block: {line:?}"));
            }
        }
        match fence {
            Some(open) => Err(format!("{open} never closed")),
            None => Ok(()),
        }
    }

    /// `line` with its code spans (CommonMark's: a run of backticks to
    /// the next run of the same length) taken out.
    fn outside_code_spans(line: &str) -> String {
        let mut out = String::new();
        let mut rest = line;
        while let Some(start) = rest.find('`') {
            out.push_str(&rest[..start]);
            let ticks = rest[start..].len() - rest[start..].trim_start_matches('`').len();
            let after = &rest[start + ticks..];
            let mut at = 0;
            let close = loop {
                match after[at..].find('`') {
                    None => break None,
                    Some(i) => {
                        let run =
                            after[at + i..].len() - after[at + i..].trim_start_matches('`').len();
                        if run == ticks {
                            break Some((at + i, run));
                        }
                        at += i + run;
                    }
                }
            };
            match close {
                Some((i, run)) => rest = &after[i + run..],
                None => {
                    out.push_str(&rest[start..start + ticks]);
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// Text from outside (a frame name in a message, an id) is a code
    /// span: an image or link in it never renders, whatever backticks,
    /// pipes and spaces it holds.
    #[test]
    fn outside_text_is_a_code_span_that_nothing_closes() {
        for text in [
            "![t](https://evil.test/p.png)",
            "a`b``c",
            "`x`",
            " ` ",
            "<img src=x>",
            "a|b",
        ] {
            let span = code(text, false);
            assert_eq!(outside_code_spans(&span), "", "{span}");
            let ticks = span.len() - span.trim_start_matches('`').len();
            let inner = &span[ticks..span.len() - ticks];
            let inner = match inner.starts_with(' ') && inner.ends_with(' ') && inner.trim() != "" {
                true => &inner[1..inner.len() - 1],
                false => inner,
            };
            assert_eq!(inner, text, "{span}");
        }
        assert_eq!(code("a|b", true), "`a\\|b`");
        assert_eq!(code("x\n::error::y", false), "`x\\n::error::y`");
    }

    #[test]
    fn backticks_and_markup_in_an_exception_stay_in_its_block() {
        let text = "a | b\n```\n<script>x</script>\n````` done";
        let markdown = render(&results_with_diagnosis(text));
        assert_eq!(well_formed(&markdown), Ok(()), "{markdown}");
        assert!(markdown.contains("``````text"), "{markdown}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// A workload's NUL, ESC and other control bytes, bidi overrides
        /// and noncharacters never reach the job summary raw.
        #[test]
        fn summary_md_holds_no_control_character_but_newline_and_tab(text in "(?s).{0,80}|[a\n\u{0}-\u{1f}\u{7f}-\u{9f}\u{202e}\u{fffe}]{0,40}") {
            let markdown = render(&results_with_diagnosis(&text));
            let stray: Vec<char> = markdown.chars().filter(|&c| crate::clean::is_unsafe(c) && c != '\n' && c != '\t').collect();
            proptest::prop_assert!(stray.is_empty(), "{:?} in {:?}", stray, markdown);
        }

        #[test]
        fn any_text_keeps_summary_md_well_formed(text in "[a-z|<>`\n\r*_ \u{0}\u{1b}\u{85}]{0,80}|\\PC{0,80}") {
            let markdown = render(&results_with_diagnosis(&text));
            proptest::prop_assert_eq!(well_formed(&markdown), Ok(()), "{}", markdown);
        }
    }
}
