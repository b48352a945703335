//! A `[[parity]]` as a run judged it: one case's figure against another's
//! (`judge::parity` makes it, `report::words::parity_message` words it).

use serde::{Deserialize, Serialize};

/// How a parity stood.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ParityOutcome {
    /// The rule held.
    Held,
    /// It broke: the run fails.
    Broken,
    /// A side ran but has no such figure: the rule cannot be verified,
    /// and the run fails.
    Unknown,
    /// A side did not run here (another shard's, filtered out, not run, or
    /// a skipped test): `oomgate merge` judges it once both are present.
    NotJudged,
}

impl ParityOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ParityOutcome::Held => "held",
            ParityOutcome::Broken => "broken",
            ParityOutcome::Unknown => "unknown",
            ParityOutcome::NotJudged => "not-judged",
        }
    }
}

/// One parity, judged: its definition as the suite wrote it (what `merge`
/// judges again from), both figures, the bound, and the verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParityResult {
    /// `parity: train-offload vs train`: its JUnit testcase and check.
    pub name: String,
    pub lhs: String,
    pub rhs: String,
    /// `gpu_peak`, `output.kv_tokens`, …
    pub figure: String,
    /// As written: `lhs <= 0.6 * rhs`.
    pub rule: String,
    /// Each side's figure (bytes, seconds, or the number); `None`: the
    /// side did not run, or has no such figure.
    pub lhs_value: Option<f64>,
    pub rhs_value: Option<f64>,
    /// What the rule holds the left side to, from the right's figure.
    pub bound: Option<f64>,
    pub outcome: ParityOutcome,
    pub passed: bool,
    /// Why a side has no figure, or did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
    /// The verdict in words (`report::words`).
    #[serde(default)]
    pub message: String,
}
