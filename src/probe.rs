//! The workload probe: JSON lines a workload appends to `$OOMGATE_METRICS`.
//!
//! ```text
//! {"event":"step","step":12,"phase":"forward","allocated":1073741824,"reserved":2147483648,"peak_allocated":1610612736}
//! {"event":"metric","name":"tokens_per_s","value":1834.2}
//! ```
//!
//! Any language can write them; `python/oomgate_probe/__init__.py` is a
//! dependency-free helper for Python. oomgate reads each instance's file
//! while the case runs, from where it left off, so a probe that writes
//! thousands of lines costs a read per tick, never the whole file again.
//! Malformed lines are counted and reported, never fatal; a line longer
//! than [`MAX_LINE`] is dropped as malformed. What is kept is bounded: the
//! last step seen, the allocator peaks, and per metric its last, smallest
//! and largest value.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Longest probe line accepted.
pub const MAX_LINE: usize = 64 * 1024;
/// Most bytes read from one file per tick; the rest waits for the next.
const MAX_READ_PER_TICK: usize = 4 * 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Line {
    Step {
        step: Option<u64>,
        phase: Option<String>,
        /// The rank of the process that wrote it (the probe adds `RANK`).
        rank: Option<u32>,
        /// The pid of the process that wrote it (the probe adds it): whose
        /// GPU memory its allocator's figures are set against.
        pid: Option<u32>,
        allocated: Option<u64>,
        reserved: Option<u64>,
        peak_allocated: Option<u64>,
        peak_reserved: Option<u64>,
        /// Whose figures they are: `torch`, `jax`.
        allocator: Option<String>,
        /// What the probe said about them, once (a JAX on CPU has none;
        /// JAX's preallocation makes NVML's figure its pool).
        allocator_note: Option<String>,
    },
    Metric {
        name: String,
        value: f64,
    },
    /// oomgate's pytest plugin: how the test of this process ended.
    Pytest(PytestReport),
}

/// How a pytest test ended, as pytest's summary words it, with pytest's
/// short message (an assertion's line, a skip's reason). The plugin writes
/// it from inside the test's process, so it informs (what failed) and
/// never decides: the exit status does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PytestReport {
    pub nodeid: String,
    pub outcome: TestOutcome,
    /// The phase it ended in: `setup`, `call` or `teardown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl PytestReport {
    /// The test failed, in its call or its setup or teardown.
    pub fn failed(&self) -> bool {
        matches!(self.outcome, TestOutcome::Failed | TestOutcome::Error)
    }
}

/// pytest's words for a test's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestOutcome {
    Passed,
    Failed,
    /// Its setup or teardown failed.
    Error,
    Skipped,
    Xfailed,
    Xpassed,
}

impl TestOutcome {
    /// pytest's word: `passed`, `xfailed`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            TestOutcome::Passed => "passed",
            TestOutcome::Failed => "failed",
            TestOutcome::Error => "error",
            TestOutcome::Skipped => "skipped",
            TestOutcome::Xfailed => "xfailed",
            TestOutcome::Xpassed => "xpassed",
        }
    }
}

/// The last step a workload reported: where an OOM interrupted it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepSeen {
    pub instance: u32,
    pub step: Option<u64>,
    pub phase: Option<String>,
    /// The rank that reported it, in a distributed case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
}

/// One custom metric over the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricSeen {
    pub last: f64,
    pub min: f64,
    pub max: f64,
    pub count: u64,
}

/// A figure `limits` can check, by the name a suite writes it with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LimitKey {
    /// `probe.peak_allocated`: the allocator's peak the probe reported.
    PeakAllocated,
    /// `probe.peak_reserved`.
    PeakReserved,
    /// `probe.last_step`.
    LastStep,
    /// `metric.<name>`: its last value; `metric.<name>.min` / `.max`, its
    /// least and largest (a metric whose own name ends in `.min` is read
    /// as itself first). Holds what follows `metric.`.
    Metric(String),
}

impl LimitKey {
    /// The keys that are not metrics, as a suite writes them.
    pub const PROBE: [&'static str; 3] = [
        "probe.peak_allocated",
        "probe.peak_reserved",
        "probe.last_step",
    ];

    /// The figure is a size, shown as one (`300.0 MiB`).
    pub fn is_size(&self) -> bool {
        matches!(self, LimitKey::PeakAllocated | LimitKey::PeakReserved)
    }
}

impl std::fmt::Display for LimitKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitKey::PeakAllocated => f.write_str(Self::PROBE[0]),
            LimitKey::PeakReserved => f.write_str(Self::PROBE[1]),
            LimitKey::LastStep => f.write_str(Self::PROBE[2]),
            LimitKey::Metric(name) => write!(f, "metric.{name}"),
        }
    }
}

/// A name that is no figure `limits` can check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a figure limits can check")]
pub struct UnknownLimitKey(pub String);

impl std::str::FromStr for LimitKey {
    type Err = UnknownLimitKey;

    fn from_str(name: &str) -> Result<Self, UnknownLimitKey> {
        Ok(match name {
            "probe.peak_allocated" => LimitKey::PeakAllocated,
            "probe.peak_reserved" => LimitKey::PeakReserved,
            "probe.last_step" => LimitKey::LastStep,
            _ => match name.strip_prefix("metric.") {
                Some(metric) if !metric.is_empty() => LimitKey::Metric(metric.to_string()),
                _ => return Err(UnknownLimitKey(name.to_string())),
            },
        })
    }
}

/// What the probe reported over a case (all instances).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeSummary {
    pub lines: u64,
    pub malformed: u64,
    pub last_step: Option<StepSeen>,
    /// The lowest step number reported (0 or 1, usually).
    pub first_step: Option<u64>,
    /// Largest `allocated` / `peak_allocated` reported (bytes).
    pub peak_allocated: Option<u64>,
    /// Largest `reserved` / `peak_reserved` reported (bytes).
    pub peak_reserved: Option<u64>,
    pub metrics: BTreeMap<String, MetricSeen>,
    /// Whose allocator the figures are (`torch`, `jax`), as the probe
    /// said; `None` where it named none (figures the workload gave).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocator: Option<String>,
    /// What the probe said about those figures, first said first: that a
    /// JAX on CPU has none, what JAX's preallocation does to NVML's figure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocator_notes: Vec<String>,
    /// A pytest case: how its test ended, as oomgate's plugin reported it
    /// (of a file run as one case, the first test that failed, else the
    /// last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pytest: Option<PytestReport>,
    /// `allocated` at each step, per (instance, phase), for leak detection;
    /// bounded (halved, keeping every other point, when full).
    #[serde(skip)]
    pub series: BTreeMap<(u32, String), Vec<u64>>,
    /// `reserved` at each step, the same way (for the report's chart).
    #[serde(skip)]
    pub reserved_series: BTreeMap<(u32, String), Vec<u64>>,
    /// The allocator's figures read by the last poll, the latest of each
    /// process: what this tick's GPU figures are set against
    /// (`measure::outside`).
    #[serde(skip)]
    pub fresh: Vec<AllocatorReport>,
}

/// What one process's allocator held, as its probe last said within a
/// tick: reserved (its pool) and allocated (in use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocatorReport {
    pub instance: u32,
    /// The process that said it; `None` from a probe that does not say.
    pub pid: Option<u32>,
    pub rank: Option<u32>,
    pub reserved: u64,
    pub allocated: Option<u64>,
}

/// The most notes kept from a probe, and the most characters of each: a
/// workload writes them, and results.json keeps them.
const MAX_NOTES: usize = 8;
const MAX_NOTE: usize = 400;

/// `text` cut to at most `chars` characters.
fn clip(text: &str, chars: usize) -> String {
    text.chars().take(chars).collect()
}

/// Add a step's figure to its series; a full series is halved (every
/// other point kept) first, so memory stays bounded however long the run.
fn push_bounded(series: &mut BTreeMap<(u32, String), Vec<u64>>, key: &(u32, String), bytes: u64) {
    let values = series.entry(key.clone()).or_default();
    if values.len() >= MAX_SERIES {
        let halved: Vec<u64> = values.iter().step_by(2).copied().collect();
        *values = halved;
    }
    values.push(bytes);
}

/// Most points kept per series before it is halved.
const MAX_SERIES: usize = 100_000;

impl ProbeSummary {
    /// The longest per-step series of `allocated` (by instance and phase):
    /// the one a leak is judged on and its trend drawn over.
    pub fn longest_series(&self) -> Option<(&(u32, String), &Vec<u64>)> {
        self.series.iter().max_by_key(|(_, series)| series.len())
    }

    /// The figure a `limits` key names; `None`: the workload never
    /// reported it.
    pub fn figure(&self, key: &LimitKey) -> Option<f64> {
        match key {
            LimitKey::PeakAllocated => self.peak_allocated.map(|b| b as f64),
            LimitKey::PeakReserved => self.peak_reserved.map(|b| b as f64),
            LimitKey::LastStep => self
                .last_step
                .as_ref()
                .and_then(|s| s.step)
                .map(|s| s as f64),
            LimitKey::Metric(name) => {
                if let Some(metric) = self.metrics.get(name) {
                    return Some(metric.last);
                }
                let (name, which) = name.rsplit_once('.')?;
                let metric = self.metrics.get(name)?;
                match which {
                    "min" => Some(metric.min),
                    "max" => Some(metric.max),
                    _ => None,
                }
            }
        }
    }

    fn record(&mut self, instance: u32, line: &[u8]) {
        self.lines += 1;
        let parsed = std::str::from_utf8(line)
            .ok()
            .and_then(|text| serde_json::from_str::<Line>(text).ok());
        match parsed {
            Some(Line::Step {
                step,
                phase,
                rank,
                pid,
                allocated,
                reserved,
                peak_allocated,
                peak_reserved,
                allocator,
                allocator_note,
            }) => {
                if let Some(allocator) = allocator {
                    self.allocator = Some(crate::clean::line(&clip(&allocator, 32)).into_owned());
                }
                if let Some(note) = allocator_note {
                    let note = crate::clean::line(&clip(&note, MAX_NOTE)).into_owned();
                    if self.allocator_notes.len() < MAX_NOTES
                        && !self.allocator_notes.contains(&note)
                    {
                        self.allocator_notes.push(note);
                    }
                }
                if let Some(n) = step {
                    self.first_step = Some(self.first_step.map_or(n, |first| first.min(n)));
                }
                let key = (instance, phase.clone().unwrap_or_default());
                if let Some(bytes) = allocated {
                    push_bounded(&mut self.series, &key, bytes);
                }
                if let Some(bytes) = reserved {
                    push_bounded(&mut self.reserved_series, &key, bytes);
                    let report = AllocatorReport {
                        instance,
                        pid,
                        rank,
                        reserved: bytes,
                        allocated,
                    };
                    let same =
                        |r: &AllocatorReport| (r.instance, r.pid, r.rank) == (instance, pid, rank);
                    match self.fresh.iter_mut().find(|r| same(r)) {
                        Some(kept) => *kept = report,
                        None => self.fresh.push(report),
                    }
                }
                self.last_step = Some(StepSeen {
                    instance,
                    step,
                    phase,
                    rank,
                });
                let max = |current: Option<u64>, values: [Option<u64>; 2]| {
                    values.into_iter().flatten().chain(current).max()
                };
                self.peak_allocated = max(self.peak_allocated, [allocated, peak_allocated]);
                self.peak_reserved = max(self.peak_reserved, [reserved, peak_reserved]);
            }
            // A file run as one case reports each of its tests: the first
            // that failed explains the case, else the last.
            Some(Line::Pytest(report)) => {
                if !self.pytest.as_ref().is_some_and(PytestReport::failed) {
                    self.pytest = Some(report);
                }
            }
            Some(Line::Metric { name, value }) if value.is_finite() => {
                let metric = self.metrics.entry(name).or_insert(MetricSeen {
                    last: value,
                    min: value,
                    max: value,
                    count: 0,
                });
                metric.last = value;
                metric.min = metric.min.min(value);
                metric.max = metric.max.max(value);
                metric.count += 1;
            }
            _ => self.malformed += 1,
        }
    }
}

/// One instance's probe file, read incrementally.
#[derive(Debug)]
struct Source {
    instance: u32,
    path: PathBuf,
    offset: u64,
    /// The start of a line not yet terminated.
    partial: Vec<u8>,
    /// The partial line grew past MAX_LINE: drop until the next newline.
    skipping: bool,
}

/// The probe files of a case's instances.
#[derive(Debug, Default)]
pub struct ProbeReader {
    sources: Vec<Source>,
    summary: ProbeSummary,
    buffer: Vec<u8>,
}

impl ProbeReader {
    pub fn new(paths: Vec<(u32, PathBuf)>) -> Self {
        ProbeReader {
            sources: paths
                .into_iter()
                .map(|(instance, path)| Source {
                    instance,
                    path,
                    offset: 0,
                    partial: Vec::new(),
                    skipping: false,
                })
                .collect(),
            summary: ProbeSummary::default(),
            buffer: Vec::new(),
        }
    }

    /// Read what was appended since the last call; whether a file was
    /// read up to the per-tick cap (more may be waiting there).
    pub fn poll(&mut self) -> bool {
        let mut capped = false;
        self.summary.fresh.clear();
        for source in &mut self.sources {
            let Ok(mut file) = crate::files::case::open_read(&source.path) else {
                continue;
            };
            let Ok(length) = file.metadata().map(|m| m.len()) else {
                continue;
            };
            if length < source.offset {
                // Truncated and rewritten: start over.
                source.offset = 0;
                source.partial.clear();
            }
            if length == source.offset || file.seek(SeekFrom::Start(source.offset)).is_err() {
                continue;
            }
            self.buffer.clear();
            let Ok(read) = file
                .take(MAX_READ_PER_TICK as u64)
                .read_to_end(&mut self.buffer)
            else {
                continue;
            };
            source.offset += read as u64;
            capped |= read >= MAX_READ_PER_TICK;
            for &byte in &self.buffer[..read] {
                if byte == b'\n' {
                    if source.skipping {
                        self.summary.lines += 1;
                        self.summary.malformed += 1;
                    } else if !source.partial.iter().all(u8::is_ascii_whitespace) {
                        self.summary.record(source.instance, &source.partial);
                    }
                    source.partial.clear();
                    source.skipping = false;
                } else if !source.skipping {
                    if source.partial.len() >= MAX_LINE {
                        source.partial.clear();
                        source.skipping = true;
                    } else {
                        source.partial.push(byte);
                    }
                }
            }
        }
        capped
    }

    /// The allocator's figures the last poll read, the latest of each
    /// process.
    pub fn fresh(&self) -> &[AllocatorReport] {
        &self.summary.fresh
    }

    /// Everything read, after a last poll (a final line without a newline
    /// counts too).
    pub fn finish(mut self) -> Option<ProbeSummary> {
        // Drain what is left beyond the per-tick cap.
        for _ in 0..1025 {
            if !self.poll() {
                break;
            }
        }
        for source in &mut self.sources {
            if !source.partial.is_empty() && !source.skipping {
                let line = std::mem::take(&mut source.partial);
                self.summary.record(source.instance, &line);
            }
        }
        (self.summary.lines > 0).then_some(self.summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn key(name: &str) -> LimitKey {
        name.parse().expect("a limit key")
    }

    #[test]
    fn limit_keys_read_back_as_written() {
        for name in [
            "probe.peak_allocated",
            "probe.peak_reserved",
            "probe.last_step",
            "metric.tokens_per_s",
            "metric.loss.min",
        ] {
            assert_eq!(key(name).to_string(), name);
        }
        assert!(key("probe.peak_reserved").is_size());
        assert!(!key("metric.peak_bytes").is_size());
        for bad in ["probe.peak", "metric.", "tokens_per_s", ""] {
            assert!(bad.parse::<LimitKey>().is_err(), "{bad}");
        }
    }

    /// A pytest outcome line is kept as the plugin wrote it; of several
    /// (a file run as one case), the first failure, else the last.
    #[test]
    fn a_pytest_outcome_keeps_the_first_failure() {
        let line = |nodeid: &str, outcome: &str| {
            format!(
                r#"{{"event": "pytest", "nodeid": "{nodeid}", "outcome": "{outcome}", "when": "call"}}"#
            )
        };
        // (outcomes in the order written, the node id kept)
        let table: [(&[(&str, &str)], &str); 4] = [
            (&[("t::a", "passed")], "t::a"),
            (&[("t::a", "passed"), ("t::b", "skipped")], "t::b"),
            (
                &[("t::a", "failed"), ("t::b", "error"), ("t::c", "passed")],
                "t::a",
            ),
            (
                &[("t::a", "passed"), ("t::b", "error"), ("t::c", "failed")],
                "t::b",
            ),
        ];
        for (lines, kept) in table {
            let mut summary = ProbeSummary::default();
            for (nodeid, outcome) in lines {
                summary.record(0, line(nodeid, outcome).as_bytes());
            }
            let report = summary.pytest.as_ref().expect("a report");
            assert_eq!(report.nodeid, kept, "{lines:?}");
            assert_eq!(summary.malformed, 0);
        }
        let mut summary = ProbeSummary::default();
        summary.record(
            0,
            br#"{"event": "pytest", "nodeid": "t::a", "outcome": "exploded"}"#,
        );
        assert_eq!((summary.pytest, summary.malformed), (None, 1));
    }

    #[test]
    fn reads_incrementally_counts_garbage_and_keeps_peaks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("metrics.jsonl");
        let mut reader = ProbeReader::new(vec![(0, path.clone())]);
        reader.poll(); // no file yet: nothing, no error
        let mut file = std::fs::File::create(&path).expect("create");
        writeln!(
            file,
            r#"{{"event":"step","step":1,"phase":"forward","allocated":100,"reserved":200}}"#
        )
        .expect("w");
        write!(file, r#"{{"event":"step","step":2,"phase":"back"#).expect("w"); // half a line
        reader.poll();
        writeln!(file, r#"ward","allocated":150,"peak_allocated":300}}"#).expect("w");
        writeln!(file, "not json").expect("w");
        writeln!(
            file,
            r#"{{"event":"metric","name":"tokens_per_s","value":1834.2}}"#
        )
        .expect("w");
        writeln!(
            file,
            r#"{{"event":"metric","name":"tokens_per_s","value":1500}}"#
        )
        .expect("w");
        writeln!(file, r#"{{"event":"unknown"}}"#).expect("w");
        writeln!(file).expect("w");
        reader.poll();
        let summary = reader.finish().expect("lines were read");
        assert_eq!(summary.lines, 6);
        assert_eq!(summary.malformed, 2);
        assert_eq!(
            summary.last_step,
            Some(StepSeen {
                instance: 0,
                step: Some(2),
                phase: Some("backward".into()),
                rank: None,
            })
        );
        assert_eq!(summary.peak_allocated, Some(300));
        assert_eq!(summary.peak_reserved, Some(200));
        assert_eq!(summary.figure(&key("metric.tokens_per_s")), Some(1500.0));
        assert_eq!(
            summary.figure(&key("metric.tokens_per_s.max")),
            Some(1834.2)
        );
        assert_eq!(summary.figure(&key("probe.peak_allocated")), Some(300.0));
        assert_eq!(summary.figure(&key("metric.nope")), None);
    }

    #[test]
    fn an_endless_line_is_dropped_not_buffered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("metrics.jsonl");
        let mut text = "x".repeat(MAX_LINE * 3);
        text.push('\n');
        text.push_str(r#"{"event":"step","step":7}"#);
        std::fs::write(&path, text).expect("write");
        let summary = ProbeReader::new(vec![(3, path)]).finish().expect("lines");
        assert_eq!(summary.malformed, 1);
        assert_eq!(
            summary.last_step.map(|s| (s.instance, s.step)),
            Some((3, Some(7)))
        );
    }

    #[test]
    fn thousands_of_lines_beyond_one_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("metrics.jsonl");
        let line = r#"{"event":"step","step":1,"allocated":5}"#;
        let count = MAX_READ_PER_TICK / line.len() + 1000;
        std::fs::write(&path, format!("{line}\n").repeat(count)).expect("write");
        let summary = ProbeReader::new(vec![(0, path)]).finish().expect("lines");
        assert_eq!(summary.lines, count as u64);
        assert_eq!(summary.malformed, 0);
    }
}

#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Whatever a workload appends to `$OOMGATE_METRICS` — garbage,
        /// truncated JSON, huge numbers, NaN-like text — reading it never
        /// panics and every line is counted.
        #[test]
        fn any_probe_lines_are_read_without_panic(
            lines in proptest::collection::vec(
                prop_oneof![
                    proptest::collection::vec(any::<u8>(), 0..200),
                    "\\{\"(step|metric|phase|allocated|reserved|name|value)\": ?(-?[0-9eE.+]{0,30}|\"[a-z]{0,8}\"|null|true|\\[\\]|\\{\\})(, ?\"[a-z_]{1,12}\": ?-?[0-9.eE+]{0,20})?\\}"
                        .prop_map(String::into_bytes),
                ],
                0..20,
            )
        ) {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("metrics.jsonl");
            let mut text = Vec::new();
            for line in &lines {
                text.extend(line.iter().copied().filter(|b| *b != b'\n'));
                text.push(b'\n');
            }
            std::fs::write(&path, &text).expect("write");
            let mut reader = ProbeReader::new(vec![(0, path)]);
            reader.poll();
            let summary = reader.finish();
            // Blank lines are not lines of the protocol.
            let counted = lines
                .iter()
                .filter(|line| !line.iter().filter(|b| **b != b'\n').all(u8::is_ascii_whitespace))
                .count() as u64;
            prop_assert_eq!(summary.map_or(0, |s| s.lines), counted);
        }
    }
}
