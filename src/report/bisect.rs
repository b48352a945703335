//! The words of `oomgate bisect`: a line per step as it is judged, the
//! answer in the terminal, bisect.md (pastes into an issue) and
//! bisect.json.

use std::fmt::Write as _;

use super::markdown::code;

use serde::Serialize;

use crate::results::bisect::{
    Axis, Bisected, Candidate, Ending, Finding, Role, Step, Taken, Verdict,
};
use crate::units::Bytes;

/// The version of bisect.json's layout.
pub const SCHEMA: u32 = 1;

/// A figure and how it was measured: `host 96.0 MiB (cgroup-anon-shmem)`;
/// with the good end's, its change.
fn figure(
    what: &str,
    bytes: Option<u64>,
    method: Option<&str>,
    good: Option<u64>,
) -> Option<String> {
    let bytes = bytes?;
    let mut text = format!("{what} {}", Bytes(bytes));
    if let Some(method) = method {
        let _ = write!(text, " ({method})");
    }
    if let Some(good) = good.filter(|g| *g > 0) {
        let change = (bytes as f64 - good as f64) / good as f64 * 100.0;
        let _ = write!(text, " {change:+.1}%");
    }
    Some(text)
}

/// A step's figures, host then GPU, each against the good end's.
fn figures(step: &Step, good: Option<&Step>) -> String {
    let parts: Vec<String> = [
        figure(
            "host",
            step.host_peak_bytes,
            step.host_peak_source.as_deref(),
            good.and_then(|g| g.host_peak_bytes)
                .filter(|_| step.role != Role::GoodEnd),
        ),
        figure(
            "gpu",
            step.gpu_peak_bytes,
            step.gpu_peak_method.as_deref(),
            good.and_then(|g| g.gpu_peak_bytes)
                .filter(|_| step.role != Role::GoodEnd),
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    match parts.is_empty() {
        true => "no figure".into(),
        false => parts.join(", "),
    }
}

/// Why a step is bad or cannot be told: the judge's words, or its
/// failed check's sentence.
fn why(step: &Step) -> Option<String> {
    match step.why() {
        Some(words) => Some(words.to_string()),
        None => step.check.as_ref().map(crate::report::words::check_message),
    }
}

/// The steps with their checks worded, for bisect.json.
fn worded(bisected: &Bisected) -> Bisected {
    let mut bisected = bisected.clone();
    let steps = bisected.steps.iter_mut().chain(
        bisected
            .findings
            .iter_mut()
            .flat_map(|f| [&mut f.last_good, &mut f.first_bad]),
    );
    for step in steps {
        if let Some(check) = &mut step.check {
            if check.message.is_empty() {
                check.message = crate::report::words::check_message(check);
            }
        }
    }
    bisected
}

fn verdict_word(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Good => "good",
        Verdict::Bad => "BAD ",
        Verdict::Skip => "skip",
    }
}

/// One line as a step is judged: `  BAD   1a2b3c4d5e6f  host 96.0 MiB
/// (cgroup-anon-shmem) +200.0%  grow the cache — <why>`.
pub fn step_line(step: &Step, good_end: Option<&Step>) -> String {
    let role = match step.role {
        Role::GoodEnd => " (good end)",
        Role::BadEnd => " (bad end)",
        Role::Step => "",
    };
    let mut line = format!(
        "  {}  {}{role}",
        verdict_word(step.verdict),
        step.candidate.label
    );
    if step.verdict != Verdict::Skip || step.host_peak_bytes.is_some() {
        let _ = write!(line, "  {}", figures(step, good_end));
    }
    if !step.candidate.subject.is_empty() {
        let _ = write!(line, "  \"{}\"", step.candidate.subject);
    }
    match step.taken_from {
        Some(Taken::Resumed) => line.push_str("  (run by the bisect resumed)"),
        Some(Taken::History) => line.push_str("  (from the history: run by an earlier bisect)"),
        None => {}
    }
    if let Some(reason) = why(step) {
        let _ = write!(line, "\n        {reason}");
    }
    line
}

/// `bisect --check`'s answer: `good (exit 0): host 33.1 MiB (…); the
/// run: DIR` (the folder where it is `kept`), `bad (exit 1): …`, `cannot
/// tell (exit 125): …`.
pub fn check_line(step: &Step, kept: bool) -> String {
    let verdict = match step.verdict {
        Verdict::Good => "good (exit 0)",
        Verdict::Bad => "bad (exit 1)",
        Verdict::Skip => "cannot tell (exit 125)",
    };
    let mut line = format!("{verdict}: {}", figures(step, None));
    if let Some(reason) = why(step) {
        let _ = write!(line, "; {reason}");
    }
    if let Some(folder) = step.case_folder.as_ref().filter(|_| kept) {
        let _ = write!(line, "; the run: {}", folder.display());
    }
    line
}

fn named(candidate: &Candidate) -> String {
    match candidate.subject.is_empty() {
        true => candidate.label.clone(),
        false => format!("{} \"{}\"", candidate.label, candidate.subject),
    }
}

/// The answer, for the terminal.
pub fn summary(bisected: &Bisected) -> String {
    let mut text = String::new();
    let good_end = bisected.steps.iter().find(|s| s.role == Role::GoodEnd);
    let bad_end = bisected.steps.iter().find(|s| s.role == Role::BadEnd);
    match bisected.ending {
        Ending::NotReproducible => {
            let _ = writeln!(
                text,
                "not reproducible here: the bad end does not fail against the good end's figures beyond their noise"
            );
            for step in [good_end, bad_end].into_iter().flatten() {
                let _ = writeln!(
                    text,
                    "  {}: {}",
                    named(&step.candidate),
                    figures(step, None)
                );
            }
        }
        Ending::Interrupted => {
            let _ = writeln!(
                text,
                "interrupted: {} run(s) made; the log is kept",
                bisected.runs
            );
        }
        Ending::Found | Ending::Undecided => {}
    }
    for (n, finding) in bisected.findings.iter().enumerate() {
        if bisected.findings.len() > 1 {
            let _ = writeln!(text, "step {} of {}:", n + 1, bisected.findings.len());
        }
        write_finding(&mut text, finding, good_end);
    }
    let between = match bisected.axis {
        Axis::PackageSet => format!("{} package change(s)", bisected.candidates),
        _ => format!("{} candidate(s) between the ends", bisected.candidates),
    };
    let _ = write!(
        text,
        "{} run(s) ({between}; a binary search needs at most {} between the ends, +2 for the ends); {} skipped",
        bisected.runs,
        bisected.bound,
        skipped(bisected).len()
    );
    if bisected.slots > 1 {
        let _ = write!(
            text,
            "; {} round(s) of up to {} at once",
            bisected.rounds, bisected.slots
        );
    }
    text.push('\n');
    let _ = write!(
        text,
        "steps, logs and case folders: {}",
        bisected.out.display()
    );
    text
}

fn write_finding(text: &mut String, finding: &Finding, good_end: Option<&Step>) {
    let first = &finding.first_bad;
    let last = &finding.last_good;
    if finding.maybe_first_bad.is_empty() {
        let _ = writeln!(text, "first bad: {}", named(&first.candidate));
    } else {
        let skipped: Vec<String> = finding
            .maybe_first_bad
            .iter()
            .map(|c| c.label.clone())
            .collect();
        let _ = writeln!(
            text,
            "first bad: one of {}, {} ({} could not be judged)",
            skipped.join(", "),
            first.candidate.label,
            skipped.join(", ")
        );
    }
    let _ = writeln!(text, "  {}", figures(first, good_end));
    if let Some(reason) = why(first) {
        let _ = writeln!(text, "  {reason}");
    }
    let _ = writeln!(text, "last good: {}", named(&last.candidate));
    let _ = writeln!(text, "  {}", figures(last, None));
    for (what, said) in explained(finding) {
        let _ = writeln!(text, "{what}: {said}");
    }
    for (what, folder) in case_folders(finding) {
        let _ = writeln!(text, "{what}'s case folder: {}", folder.display());
    }
}

/// The last good's and the first bad's case folders, where they ran
/// here (a step from the history has none).
fn case_folders(finding: &Finding) -> impl Iterator<Item = (&'static str, &std::path::Path)> {
    [
        ("last good", &finding.last_good),
        ("first bad", &finding.first_bad),
    ]
    .into_iter()
    .filter_map(|(what, step)| step.case_folder.as_deref().map(|f| (what, f)))
}

/// A finding's why, each part named: the drift, the sites that grew,
/// the pin that restores the good figure.
fn explained(finding: &Finding) -> Vec<(&'static str, String)> {
    let mut parts = Vec::new();
    if !finding.drift.is_empty() {
        parts.push(("environment drift", finding.drift.join("; ")));
    }
    if let Some(sites) = &finding.sites {
        parts.push(("allocation sites that grew", sites.clone()));
    }
    if let Some(restore) = &finding.restore {
        parts.push(("restores the good figure", restore.clone()));
    }
    parts
}

/// Every candidate skipped, with why.
fn skipped(bisected: &Bisected) -> Vec<&Step> {
    bisected
        .steps
        .iter()
        .filter(|s| s.verdict == Verdict::Skip)
        .collect()
}

/// bisect.md: the answer as Markdown, to paste into an issue.
pub fn markdown(bisected: &Bisected) -> String {
    let mut md = String::new();
    let what = match bisected.axis {
        Axis::Commits => "commits".to_string(),
        Axis::Versions => format!(
            "versions of {}",
            code(bisected.package.as_deref().unwrap_or("?"), false)
        ),
        Axis::PackageSet => "package changes".to_string(),
    };
    let _ = writeln!(
        md,
        "## oomgate bisect: {} over {what}\n",
        code(&bisected.case, false)
    );
    let ending = match bisected.ending {
        Ending::Found => "found",
        Ending::NotReproducible => "not reproducible here",
        Ending::Undecided => "undecided (candidates that could not be judged)",
        Ending::Interrupted => "interrupted",
    };
    let _ = writeln!(
        md,
        "**{ending}** · suite {}\n",
        code(&bisected.suite.display().to_string(), false)
    );
    let good_end = bisected.steps.iter().find(|s| s.role == Role::GoodEnd);
    for finding in &bisected.findings {
        let _ = writeln!(
            md,
            "| | candidate | host peak | GPU peak |\n|---|---|---|---|"
        );
        for (what, step) in [
            ("last good", &finding.last_good),
            ("first bad", &finding.first_bad),
        ] {
            let host = figure(
                "",
                step.host_peak_bytes,
                step.host_peak_source.as_deref(),
                None,
            );
            let gpu = figure(
                "",
                step.gpu_peak_bytes,
                step.gpu_peak_method.as_deref(),
                None,
            );
            let _ = writeln!(
                md,
                "| {what} | {} | {} | {} |",
                in_table(&step.candidate.id, &step.candidate.subject),
                host.as_deref().map_or("—", str::trim),
                gpu.as_deref().map_or("—", str::trim),
            );
        }
        let _ = writeln!(md);
        if !finding.maybe_first_bad.is_empty() {
            let maybe: Vec<String> = finding
                .maybe_first_bad
                .iter()
                .map(|c| code(&c.id, false))
                .collect();
            let _ = writeln!(
                md,
                "The first bad may also be {} (could not be judged).\n",
                maybe.join(", ")
            );
        }
        if let Some(reason) = why(&finding.first_bad) {
            let _ = writeln!(md, "- why bad: {}", code(&reason, false));
        }
        let _ = writeln!(
            md,
            "- against the good end: {}",
            figures(&finding.first_bad, good_end)
        );
        for (what, said) in explained(finding) {
            let _ = writeln!(md, "- {what}: {}", code(&said, false));
        }
        for (what, folder) in case_folders(finding) {
            let _ = writeln!(
                md,
                "- {what}'s case folder: {}",
                code(&folder.display().to_string(), false)
            );
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(
        md,
        "<details><summary>{} run(s), {} skipped (bound ⌈log2 N⌉ = {} between the ends)</summary>\n",
        bisected.runs,
        skipped(bisected).len(),
        bisected.bound
    );
    let _ = writeln!(
        md,
        "| verdict | candidate | figures | note |\n|---|---|---|---|"
    );
    for step in &bisected.steps {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            verdict_word(step.verdict).trim(),
            in_table(&step.candidate.label, &step.candidate.subject),
            figures(step, good_end),
            code(&why(step).unwrap_or_default().replace('\n', " "), true)
        );
    }
    let _ = writeln!(md, "\n</details>");
    md
}

/// A candidate in a Markdown table cell: `name` and its subject (a
/// commit's line, a set's pins), each a code span; the subject left out
/// where it says nothing more than the name.
fn in_table(name: &str, subject: &str) -> String {
    match subject.is_empty() || subject == name {
        true => code(name, true),
        false => format!("{} {}", code(name, true), code(subject, true)),
    }
}

/// bisect.json's layout.
#[derive(Serialize)]
struct Json<'b> {
    schema: u32,
    oomgate_version: &'static str,
    #[serde(flatten)]
    bisected: &'b Bisected,
    /// The first step's first bad: a whole hash, a version or a set.
    first_bad: Option<&'b str>,
    last_good: Option<&'b str>,
    skipped: Vec<Skipped<'b>>,
}

#[derive(Serialize)]
struct Skipped<'b> {
    candidate: &'b str,
    reason: Option<&'b str>,
}

/// bisect.json.
pub fn json(bisected: &Bisected) -> String {
    let bisected = &worded(bisected);
    let first = bisected.findings.first();
    let json = Json {
        schema: SCHEMA,
        oomgate_version: env!("CARGO_PKG_VERSION"),
        bisected,
        first_bad: first
            .filter(|f| f.maybe_first_bad.is_empty())
            .map(|f| f.first_bad.candidate.id.as_str()),
        last_good: first.map(|f| f.last_good.candidate.id.as_str()),
        skipped: skipped(bisected)
            .into_iter()
            .map(|s| Skipped {
                candidate: &s.candidate.id,
                reason: s.why(),
            })
            .collect(),
    };
    serde_json::to_string_pretty(&json).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}")) + "\n"
}
