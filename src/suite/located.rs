//! Located suite errors: `file:line:col`, the offending line, a caret under
//! the exact span, and advice.
//!
//! Every check in `suite` reports through [`Diagnostic`] with a byte span
//! into the source, and [`SuiteError::Invalid`] renders them all at once, so
//! a user fixes every mistake in one pass instead of one per run.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

/// One problem found in a suite file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub span: Option<Range<usize>>,
    pub message: String,
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn new(span: Option<Range<usize>>, message: impl Into<String>) -> Self {
        Diagnostic {
            span,
            message: message.into(),
            help: None,
        }
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// A diagnostic resolved against the source text, ready to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// 1-based line of the span's start, when the error has a place.
    pub line: Option<usize>,
    /// 1-based column, in characters.
    pub column: Option<usize>,
    pub message: String,
    pub help: Option<String>,
    /// The source line and a caret line under the span.
    snippet: Option<(String, String)>,
}

impl Located {
    pub fn resolve(source: &str, diagnostic: Diagnostic) -> Self {
        let Some(span) = diagnostic.span.clone() else {
            return Located {
                line: None,
                column: None,
                message: diagnostic.message,
                help: diagnostic.help,
                snippet: None,
            };
        };
        let start = floor_char_boundary(source, span.start.min(source.len()));
        let line_start = source[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = source[start..]
            .find('\n')
            .map_or(source.len(), |i| start + i);
        let line_number = source[..start].matches('\n').count() + 1;
        let column = source[line_start..start].chars().count() + 1;
        let text = source[line_start..line_end].trim_end_matches('\r');
        let end = floor_char_boundary(source, span.end.clamp(start, line_end));
        let width = source[start..end].chars().count().max(1);
        let (text, caret) = snippet(text, column - 1, width);
        Located {
            line: Some(line_number),
            column: Some(column),
            message: diagnostic.message,
            help: diagnostic.help,
            snippet: Some((text, caret)),
        }
    }
}

/// The most characters of a source line shown: a longer line (a 60 KB
/// matrix value on one line) is shown as a window around the span, its
/// cut ends marked `…`.
const SNIPPET_CHARS: usize = 120;

/// The line as shown, and the caret line under the span (`before`: the
/// characters before it, `width`: its own).
fn snippet(line: &str, before: usize, width: usize) -> (String, String) {
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= SNIPPET_CHARS {
        return (
            line.to_string(),
            format!("{}{}", " ".repeat(before), "^".repeat(width)),
        );
    }
    // A little of what leads up to the span, then as much of it as fits.
    let from = before.saturating_sub(SNIPPET_CHARS / 4);
    let to = (from + SNIPPET_CHARS).min(chars.len());
    let mut text: String = chars[from..to].iter().collect();
    let mut lead = before - from;
    if from > 0 {
        text.insert(0, '…');
        lead += 1;
    }
    if to < chars.len() {
        text.push('…');
    }
    let shown = width.min(to.saturating_sub(before)).max(1);
    (text, format!("{}{}", " ".repeat(lead), "^".repeat(shown)))
}

fn floor_char_boundary(text: &str, mut index: usize) -> usize {
    while index > 0 && !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

/// Why a suite could not be loaded. Nothing has run when this is returned.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error("cannot read suite {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", render(path, problems))]
    Invalid {
        path: PathBuf,
        problems: Vec<Located>,
    },
}

fn render(path: &std::path::Path, problems: &[Located]) -> String {
    let mut out = String::new();
    for (i, problem) in problems.iter().enumerate() {
        if i > 0 {
            out.push_str("\n\n");
        }
        out.push_str(&problem.display_with(path).to_string());
    }
    if problems.len() > 1 {
        out.push_str(&format!(
            "\n\n{} problems in {}",
            problems.len(),
            path.display()
        ));
    }
    out
}

impl Located {
    pub fn display_with<'a>(&'a self, path: &'a std::path::Path) -> impl fmt::Display + 'a {
        LocatedDisplay {
            located: self,
            path,
        }
    }
}

struct LocatedDisplay<'a> {
    located: &'a Located,
    path: &'a std::path::Path,
}

impl fmt::Display for LocatedDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = self.located;
        match (l.line, l.column) {
            (Some(line), Some(column)) => {
                write!(f, "{}:{line}:{column}: {}", self.path.display(), l.message)?
            }
            _ => write!(f, "{}: {}", self.path.display(), l.message)?,
        }
        if let (Some((text, caret)), Some(line)) = (&l.snippet, l.line) {
            let gutter = " ".repeat(line.to_string().len());
            write!(f, "\n{gutter} |\n{line} | {text}\n{gutter} | {caret}")?;
        }
        if let Some(help) = &l.help {
            write!(f, "\n  = help: {help}")?;
        }
        Ok(())
    }
}

/// The valid key closest to a misspelt one, when one is close enough to be
/// what the user meant.
pub fn closest<'a>(typo: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|candidate| (strsim::jaro_winkler(typo, candidate), candidate))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

/// Turn a `toml` parse or type error into a diagnostic. Unknown keys get the
/// closest valid key as advice; serde names the valid ones in its message.
/// `source` is the text the error's span points into.
pub fn from_toml_error(error: &toml::de::Error, source: &str) -> Diagnostic {
    let message = error.message().trim().to_string();
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let typo = rest.split('`').next().unwrap_or_default().to_string();
        let valid: Vec<&str> = rest
            .split_once("expected")
            .map(|(_, list)| list.split('`').skip(1).step_by(2).collect())
            .unwrap_or_default();
        let mut diagnostic = Diagnostic::new(error.span(), format!("unknown key `{typo}`"));
        let list = valid
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ");
        diagnostic.help = match closest(&typo, valid.iter().copied()) {
            Some(best) => Some(format!("did you mean `{best}`? valid keys here: {list}")),
            None if !valid.is_empty() => Some(format!("valid keys here: {list}")),
            None => Some("no keys are allowed here".to_string()),
        };
        return diagnostic;
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let key = rest.split('`').next().unwrap_or_default();
        let diagnostic = Diagnostic::new(error.span(), format!("missing key `{key}`"));
        // The table the key is missing from starts the span.
        let table = error
            .span()
            .and_then(|span| source.get(span))
            .unwrap_or_default()
            .trim_start();
        return match key {
            "suite" => diagnostic.with_help(
                "a suite file starts with its name: add `[suite]` and `name = \"…\"` at the top",
            ),
            "name" if table.starts_with("[suite]") => diagnostic.with_help(
                "add `name = \"…\"` under `[suite]`: it names the run in the reports and the lock",
            ),
            _ => diagnostic,
        };
    }
    Diagnostic::new(error.span(), message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_line_and_column_in_characters() {
        let source = "a = 1\nbé = \"x\"\n";
        let start = source
            .find('=')
            .map(|_| source.rfind('=').unwrap_or(0))
            .unwrap_or(0);
        let located = Located::resolve(source, Diagnostic::new(Some(start..start + 1), "bad"));
        assert_eq!(located.line, Some(2));
        assert_eq!(located.column, Some(4));
        let shown = located
            .display_with(std::path::Path::new("s.toml"))
            .to_string();
        assert!(shown.starts_with("s.toml:2:4: bad"), "{shown}");
        assert!(shown.contains("2 | bé = \"x\"\n  |    ^"), "{shown}");
    }

    /// A line of 60 KB (one matrix value) is shown as a window around the
    /// span, the caret under it, never whole.
    #[test]
    fn a_long_line_is_shown_around_its_span() {
        let value = "x".repeat(60_000);
        let source = format!("matrix = {{ v = [\"{value}\"] }}\n");
        let start = source.find("[\"").expect("the value");
        let located = Located::resolve(&source, Diagnostic::new(Some(start..start + 1), "big"));
        assert_eq!(located.column, Some(start + 1));
        let shown = located
            .display_with(std::path::Path::new("s.toml"))
            .to_string();
        assert!(shown.len() < 600, "{} characters", shown.len());
        let lines: Vec<&str> = shown.lines().collect();
        let (text, caret) = (lines[2], lines[3]);
        assert!(
            text.contains("matrix = { v = [\"xxx") && text.ends_with('…'),
            "{text}"
        );
        // The caret is under the `[`.
        let at = caret.find('^').expect("a caret");
        assert_eq!(text.chars().nth(at), Some('['), "{shown}");
        // A span far into the line: a window with both ends cut.
        let far = start + 30_000;
        let located = Located::resolve(&source, Diagnostic::new(Some(far..far + 5), "far"));
        let shown = located
            .display_with(std::path::Path::new("s.toml"))
            .to_string();
        let lines: Vec<&str> = shown.lines().collect();
        assert!(
            lines[2].contains("| …x") && lines[2].ends_with('…'),
            "{shown}"
        );
        assert!(lines[3].ends_with("^^^^^"), "{shown}");
    }

    #[test]
    fn span_past_end_is_clamped() {
        let located = Located::resolve("x", Diagnostic::new(Some(10..20), "eof"));
        assert_eq!(located.line, Some(1));
        assert_eq!(located.column, Some(2));
    }

    fn suite_error(source: &str) -> Diagnostic {
        use serde::Deserialize;
        #[derive(Debug, Deserialize)]
        struct File {
            #[allow(dead_code)]
            suite: Suite,
        }
        #[derive(Debug, Deserialize)]
        struct Suite {
            #[allow(dead_code)]
            name: String,
        }
        let error = toml::from_str::<File>(source).expect_err("invalid on purpose");
        from_toml_error(&error, source)
    }

    #[test]
    fn a_file_without_its_suite_table_is_told_what_to_add() {
        for source in ["", "[[case]]\nname = \"a\"\n"] {
            let diagnostic = suite_error(source);
            assert_eq!(diagnostic.message, "missing key `suite`");
            let help = diagnostic.help.unwrap_or_default();
            assert!(help.contains("add `[suite]` and `name = \"…\"`"), "{help}");
        }
        let diagnostic = suite_error("[suite]\nsample_interval = \"50ms\"\n");
        assert_eq!(diagnostic.message, "missing key `name`");
        let help = diagnostic.help.unwrap_or_default();
        assert!(help.contains("`name = \"…\"` under `[suite]`"), "{help}");
    }

    #[test]
    fn closest_key() {
        let keys = ["timeout", "env", "cwd", "concurrency", "duration"];
        assert_eq!(closest("tmeout", keys), Some("timeout"));
        assert_eq!(closest("concurency", keys), Some("concurrency"));
        assert_eq!(closest("zzz", keys), None);
    }
}
