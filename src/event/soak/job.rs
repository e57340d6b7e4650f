//! What schema 9 adds to a soak's record for the job it belongs to: the job, its rank and what
//! it does on another rank's alarm (with the start), the alarm another rank raised
//! (`soak_job_alarm_seen`), and in the evidence the MPS clients torn down before the first
//! signal.
//!
//! Like every stored type these are frozen once released; new fields make new forms.

use serde::{Deserialize, Serialize};

/// What a rank does when another rank of its job raised the job's alarm (`--on-job-alarm`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnJobAlarm {
    /// Record it, capture the evidence at once and keep supervising.
    #[default]
    Capture,
    /// Record it, capture the evidence and fail the soak as `job_failed`.
    Stop,
    /// Record it; neither capture nor stop.
    Ignore,
}

impl OnJobAlarm {
    pub fn as_str(self) -> &'static str {
        match self {
            OnJobAlarm::Capture => "capture",
            OnJobAlarm::Stop => "stop",
            OnJobAlarm::Ignore => "ignore",
        }
    }
}

/// The job a soak belongs to, fixed when it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobMember {
    /// `SLURM_JOB_ID` or `--job`.
    pub job: String,
    /// `SLURM_PROCID`, `RANK` or `--rank`; `None` where none was given (before schema 13).
    pub rank: Option<u32>,
    pub on_job_alarm: OnJobAlarm,
    /// The run of the job it joined (schema 13); `None` for a soak recorded before runs.
    pub run: Option<String>,
}

/// The job's alarm as the rank that tripped first wrote it (`<job dir>/alarm`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobAlarm {
    pub job: String,
    pub rank: Option<u32>,
    pub host: String,
    /// The soak of the rank that tripped.
    pub soak_id: String,
    /// As the alarm names it (a newer unilab may name a kind this one does not know).
    pub failure_kind: String,
    pub reason: String,
    /// When that rank tripped, Unix seconds, exactly as the alarm holds it.
    pub at: f64,
}

/// `soak_job_alarm_seen`: the job's alarm and when this soak saw it. Recorded also by a rank
/// that tripped at the same instant and lost the exclusive create. The alarm is kept whole
/// under `alarm` (its `host` is not the log's, which `history` shows as the record's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobAlarmSeen {
    pub alarm: JobAlarm,
    /// When this soak saw it, Unix seconds.
    pub seen_at: f64,
}

/// The MPS clients of the tree that a daemon unilab recorded was asked to end before the first
/// signal (`terminate_client`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MpsTeardown {
    /// The daemon's name.
    pub daemon: String,
    pub server_pid: u32,
    /// The clients' pids, in the order they were terminated.
    pub terminated: Vec<u32>,
}
