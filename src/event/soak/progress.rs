//! What schema 12 adds to each sample: the progress the supervisor decided at it, by the rule
//! `soak::watch::progress` keeps (the design's "Progress in the record"), so that every reader
//! takes it as recorded and none decides it again.
//!
//! Like every stored type these are frozen once released; new fields make new forms.

use serde::{Deserialize, Serialize};

/// What made a sample's progress: a change of the progress directory, or a beat whose
/// `(step, phase)` differs from the previous beat's (`beat` when both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgressSeen {
    Files,
    Beat,
}

impl ProgressSeen {
    pub fn as_str(self) -> &'static str {
        match self {
            ProgressSeen::Files => "files",
            ProgressSeen::Beat => "beat",
        }
    }
}

/// The progress the supervisor noted at one sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressNoted {
    /// What made progress at this sample; `None` when nothing did.
    pub progress_seen: Option<ProgressSeen>,
    /// When progress last happened, Unix microseconds: the newest modification time in the
    /// progress directory, or the arrival of the last beat that was progress; `None` before any.
    pub last_progress_at_us: Option<i64>,
    /// The same instant as milliseconds after the command's spawn, on the soak's own clock
    /// (what `--stale-progress` runs from, and the verdict's `last_progress_ms`).
    pub last_progress_ms: Option<u64>,
}
