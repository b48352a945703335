//! Numbers a workload prints (`metrics_from_output`), read from its logs
//! once it has run: an inference server's capacity is in its log ("GPU KV
//! cache size: 1,489,281 tokens"), not in any peak.
//!
//! Each log is read once, line by line, every metric's regex tried on
//! each line: linear in what was printed (the `regex` crate never
//! backtracks), and flat in memory (a line is cut at [`MAX_LINE`]). The
//! first capture group of a matching line, with `,` and `_` digit
//! separators removed, is a reading; the metric's `pick` (the last, the
//! largest or the smallest) is the figure. A metric no line gave a
//! number is `None`, and the figure says how many lines matched.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::suite::{Better, OutputMetric, Pick, read_number};

/// The longest line matched; the rest of a longer one is not read.
pub const MAX_LINE: usize = 64 * 1024;

/// One output metric over a run: its figure and how it was found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputFigure {
    pub name: String,
    /// The figure: the picked reading; `None` when no line gave one.
    pub value: Option<f64>,
    /// Lines the regex matched.
    pub matches: u64,
    /// Of those, lines whose capture was no number (`n/a`, `75K`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unreadable: u64,
    /// Where the picked reading was printed: `cases/serve/server.stderr.log:812`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// A log that could not be read (the figure may miss its lines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How it is judged, as the suite said when it ran.
    pub better: Better,
    pub pick: Pick,
    pub tolerance: f64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A log to read: where it is, and how reports name it (under the out
/// dir).
#[derive(Debug, Clone)]
pub struct Log {
    pub path: PathBuf,
    pub shown: PathBuf,
}

/// A reading in progress.
struct Reading {
    regex: Option<regex::Regex>,
    figure: OutputFigure,
}

impl Reading {
    fn take(&mut self, value: f64, at: impl FnOnce() -> String) {
        let better = match (self.figure.value, self.figure.pick) {
            (None, _) | (Some(_), Pick::Last) => true,
            (Some(kept), Pick::Max) => value > kept,
            (Some(kept), Pick::Min) => value < kept,
        };
        if better {
            self.figure.value = Some(value);
            self.figure.at = Some(at());
        }
    }
}

/// The figures of `metrics` over `logs`, read in their order (a server's
/// logs, then each instance's stdout and stderr): `pick = "last"` is the
/// last reading of the last log that printed one.
pub fn read(metrics: &[OutputMetric], logs: &[Log]) -> Vec<OutputFigure> {
    let mut readings: Vec<Reading> = metrics
        .iter()
        .map(|metric| Reading {
            regex: crate::suite::output_regex(&metric.regex).ok(),
            figure: OutputFigure {
                name: metric.name.clone(),
                value: None,
                matches: 0,
                unreadable: 0,
                at: None,
                error: None,
                better: metric.better,
                pick: metric.pick,
                tolerance: metric.tolerance,
            },
        })
        .collect();
    if readings.is_empty() {
        return Vec::new();
    }
    for log in logs {
        let result = each_line(&log.path, |number, line| {
            let text = String::from_utf8_lossy(line);
            for reading in &mut readings {
                let Some(captures) = reading.regex.as_ref().and_then(|r| r.captures(&text)) else {
                    continue;
                };
                reading.figure.matches += 1;
                match captures.get(1).and_then(|m| read_number(m.as_str())) {
                    Some(value) => {
                        reading.take(value, || format!("{}:{number}", log.shown.display()))
                    }
                    None => reading.figure.unreadable += 1,
                }
            }
        });
        if let Err(e) = result {
            for reading in &mut readings {
                reading
                    .figure
                    .error
                    .get_or_insert_with(|| format!("cannot read {}: {e}", log.shown.display()));
            }
        }
    }
    readings.into_iter().map(|r| r.figure).collect()
}

/// Call `line` with each line of the file at `path` (its number from 1,
/// without its newline, cut at [`MAX_LINE`]); a missing file has none.
fn each_line(path: &Path, mut line: impl FnMut(u64, &[u8])) -> std::io::Result<()> {
    let file = match crate::files::case::open_read(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut current: Vec<u8> = Vec::new();
    let mut number = 0u64;
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            if !current.is_empty() {
                line(number + 1, &current);
            }
            return Ok(());
        }
        let (chunk, ends) = match buffer.iter().position(|b| *b == b'\n') {
            Some(at) => (&buffer[..at], Some(at + 1)),
            None => (buffer, None),
        };
        let room = MAX_LINE.saturating_sub(current.len());
        current.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = ends.unwrap_or(buffer.len());
        reader.consume(used);
        if ends.is_some() {
            number += 1;
            line(number, &current);
            current.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(name: &str, regex: &str, pick: Pick) -> OutputMetric {
        OutputMetric {
            name: name.into(),
            regex: regex.into(),
            better: Better::Higher,
            pick,
            tolerance: 0.01,
        }
    }

    fn log(dir: &Path, name: &str, text: &[u8]) -> Log {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        Log {
            path,
            shown: PathBuf::from(format!("cases/c/{name}")),
        }
    }

    /// vLLM's lines, over a server log and a client log: the last is the
    /// last printed, max and min over both; a line of no number is
    /// counted, and a metric no line matched is None.
    #[test]
    fn each_pick_over_logs_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = [
            log(
                dir.path(),
                "server.stderr.log",
                b"INFO GPU KV cache size: 1,489,281 tokens\nINFO # GPU blocks: 1464\nINFO GPU KV cache size: n/a tokens\n",
            ),
            log(
                dir.path(),
                "stdout.log",
                b"warmup\nINFO GPU KV cache size: 1,135,957 tokens",
            ),
        ];
        let regex = r"KV cache size: ([\d,]+|n/a) tokens";
        let figures = read(
            &[
                metric("last", regex, Pick::Last),
                metric("max", regex, Pick::Max),
                metric("min", regex, Pick::Min),
                metric("blocks", r"# GPU blocks: (\d+)", Pick::Last),
                metric("never", r"throughput: (\d+)", Pick::Last),
            ],
            &logs,
        );
        let by = |name: &str| figures.iter().find(|f| f.name == name).expect(name);
        assert_eq!(by("last").value, Some(1_135_957.0));
        assert_eq!(by("last").at.as_deref(), Some("cases/c/stdout.log:2"));
        assert_eq!(by("last").matches, 3);
        assert_eq!(by("last").unreadable, 1);
        assert_eq!(by("max").value, Some(1_489_281.0));
        assert_eq!(by("max").at.as_deref(), Some("cases/c/server.stderr.log:1"));
        assert_eq!(by("min").value, Some(1_135_957.0));
        assert_eq!(by("blocks").value, Some(1464.0));
        assert_eq!(by("never").value, None);
        assert_eq!(by("never").matches, 0);
        assert_eq!(by("never").at, None);
    }

    /// A line longer than MAX_LINE is cut, not held whole: a number at its
    /// start is read, and the lines after it keep their numbers.
    #[test]
    fn a_long_line_is_cut_and_counted_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut text = b"blocks: 7 ".to_vec();
        text.extend(std::iter::repeat_n(b'x', 3 * MAX_LINE));
        text.extend(b"\nblocks: 9\n");
        let logs = [log(dir.path(), "stderr.log", &text)];
        let figures = read(&[metric("b", r"blocks: (\d+)", Pick::Min)], &logs);
        assert_eq!(figures[0].value, Some(7.0));
        assert_eq!(figures[0].matches, 2);
        let last = read(&[metric("b", r"blocks: (\d+)", Pick::Last)], &logs);
        assert_eq!(last[0].at.as_deref(), Some("cases/c/stderr.log:2"));
    }

    /// A log that is missing holds no line; one that cannot be read says
    /// so beside the figure.
    #[test]
    fn a_missing_log_is_empty_and_an_unreadable_one_is_said() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = Log {
            path: dir.path().join("nope.log"),
            shown: "cases/c/nope.log".into(),
        };
        let folder = Log {
            path: dir.path().to_path_buf(),
            shown: "cases/c".into(),
        };
        let figures = read(&[metric("b", r"b: (\d+)", Pick::Last)], &[missing, folder]);
        assert_eq!(figures[0].value, None);
        assert!(
            figures[0]
                .error
                .as_deref()
                .is_some_and(|e| e.starts_with("cannot read cases/c:")),
            "{:?}",
            figures[0].error
        );
    }
}
