//! One finding of `mps doctor`: a check's name, how it ended, what it found and what to do.
//! The checks are made where what they check is known (`doctor`, `framework`); the report
//! lists them in order.

use serde::Serialize;

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CheckStatus {
    Ok,
    Warn,
    Fail,
    /// Not run: it depends on a check that failed.
    Skip,
}

/// A check, as `mps doctor` shows it (and its JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Check {
    pub name: &'static str,
    pub status: CheckStatus,
    pub detail: String,
    pub hint: Option<String>,
}
