//! A case's figure over its recent runs in the history, as the judge
//! read it (`judge::history`) and report.html draws it: the past runs'
//! values, the ratchet and creep limit that held it, the steps.

use serde::{Deserialize, Serialize};

/// The most past runs a trend keeps (the newest).
pub const TREND_RUNS: usize = 60;

/// One figure of a case over its past runs on a branch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trend {
    /// As the history names it (`gpu_peak_bytes`, `host_peak_bytes`).
    pub figure: String,
    /// The branch whose runs these are (`None`: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The runs before this one, oldest first (at most [`TREND_RUNS`]).
    pub past: Vec<TrendPoint>,
    /// Where a creep limit holds the figure: the ratchet's level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratchet_bytes: Option<u64>,
    /// And the limit, as a fraction (0.1: 10%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creep_limit: Option<f64>,
    /// Where a step begins: an index into `past`, or `past.len()` for
    /// this run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<usize>,
}

/// A past run's value of the figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrendPoint {
    pub started_at: String,
    pub value_bytes: u64,
    /// The case passed in that run.
    pub passed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}
