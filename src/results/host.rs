//! [`HostResult`]: a case's host figures as results.json holds them, the
//! same type for the case and for a server case's load client.
//!
//! results.json keeps the flat `host_*` keys it has always had (readers and
//! older files rely on them), so the struct is flattened into its owner by
//! serde and each field renamed; in code it is one value, moved and
//! compared whole (`case.host.peak_bytes`), never eight fields copied one
//! by one.

use serde::{Deserialize, Serialize};

use crate::measure::host::{HostFigures, HostFloor, HostFloors, HostMethod, HostNote};
use crate::units::Bytes;

/// The host figures of a case (or its load client). Read back leniently:
/// a key an older file lacks takes its empty value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostResult {
    /// The gated host peak: the largest of the kernel's floors in
    /// `floors`, named by `peak_source`; `None` when none was observed.
    /// Page cache is not in it (see `charged_peak_bytes`).
    #[serde(rename = "host_peak_bytes")]
    pub peak_bytes: Option<u64>,
    /// When the peak was reached, from the start of the run.
    #[serde(rename = "host_peak_at_s")]
    pub peak_at_s: Option<f64>,
    /// How the host figures were obtained: `cgroup-v1`, `cgroup-v2`, or
    /// `procfs-pss` (no cgroup; `note` says why when the run had one);
    /// absent in results written before methods were named: `procfs-rss`.
    #[serde(rename = "host_method")]
    pub method: HostMethod,
    /// The floor that set the peak: `cgroup-anon-shmem`, `pss-sum`,
    /// `vmhwm`, `rusage-maxrss` or `pss-anon-shmem`.
    #[serde(rename = "host_peak_source")]
    pub peak_source: Option<HostFloor>,
    /// Each floor's own peak; `None`: not observed.
    #[serde(rename = "host_floors")]
    pub floors: HostFloors,
    /// The working memory's peak: anonymous + shmem, what the kernel
    /// cannot reclaim without swap (the case cgroup's charge, read every
    /// 2 ms: `cgroup-anon-shmem`), a gated figure of its own. `None` without a case cgroup holding the whole case, where it
    /// is only sampled (its floors still say what was seen).
    #[serde(rename = "host_working_peak_bytes")]
    pub working_peak_bytes: Option<u64>,
    /// The case cgroup's largest charge, page cache included: the figure
    /// to hold against a container's memory limit. Not gated.
    #[serde(rename = "host_charged_peak_bytes")]
    pub charged_peak_bytes: Option<u64>,
    /// Processes killed by the kernel's OOM killer, counted by the cgroup;
    /// `None` without one.
    #[serde(rename = "host_oom_kills")]
    pub oom_kills: Option<u64>,
    /// Why these figures were not measured the way the run was, if not,
    /// and what they cannot promise: `notes` worded by `report::words`
    /// when the case is settled (a file read back keeps its words).
    #[serde(rename = "host_note")]
    pub note: Option<String>,
    /// The notes as data, from the measurement; not in results.json.
    #[serde(skip)]
    pub notes: Vec<HostNote>,
    /// A test of a shared pytest session (`host_method` `pytest-session`):
    /// the session's resident set when it started. Its `host_peak_bytes`
    /// is what it added over this. Absent for a case in a process of its
    /// own.
    #[serde(rename = "host_start_bytes", skip_serializing_if = "Option::is_none")]
    pub start_bytes: Option<u64>,
    /// A test of a shared pytest session: what the session still held
    /// when it ended beyond what it held at its start (what the test kept:
    /// a cache, a leak).
    #[serde(rename = "host_left_bytes", skip_serializing_if = "Option::is_none")]
    pub left_bytes: Option<u64>,
}

impl HostResult {
    /// Nothing observed, measured (or to be measured) by `method`.
    pub fn unmeasured(method: HostMethod) -> Self {
        HostResult {
            method,
            ..HostResult::default()
        }
    }

    pub fn peak(&self) -> Option<Bytes> {
        self.peak_bytes.map(Bytes)
    }

    /// `53.9 MiB (vmhwm, cgroup-v1)`, `unknown (why)`.
    pub fn describe(&self) -> String {
        match (self.peak_bytes, self.peak_source) {
            (Some(bytes), Some(source)) => {
                format!("{} ({}, {})", Bytes(bytes), source.as_str(), self.method)
            }
            (Some(bytes), None) => format!("{} ({})", Bytes(bytes), self.method),
            (None, _) => match &self.note {
                Some(note) => format!("unknown ({note})"),
                None => "unknown".to_string(),
            },
        }
    }
}

impl From<HostFigures> for HostResult {
    fn from(host: HostFigures) -> Self {
        HostResult {
            peak_bytes: host.peak_bytes,
            peak_at_s: host.peak_at_ms.map(|ms| ms as f64 / 1000.0),
            method: host.method,
            peak_source: host.peak_source,
            floors: host.floors,
            working_peak_bytes: host.working_peak_bytes,
            charged_peak_bytes: host.charged_peak_bytes,
            oom_kills: host.oom_kills,
            note: None,
            notes: host.notes,
            start_bytes: host.start_bytes,
            left_bytes: host.left_bytes,
        }
    }
}
