//! How a job's identity, its directory and its alarm fail.

use std::path::PathBuf;

use super::id::BadJobId;
use crate::diagnostic::{Boundary, Exit, Hint};
use crate::paths::Distrust;

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// What a launcher's variable holds cannot name a job.
    #[error("`{}` (from `{variable}`) cannot name a job: it {}", shown(.value), .why.why())]
    BadJob {
        value: String,
        variable: &'static str,
        why: BadJobId,
    },
    /// What a launcher's variable holds is not a rank.
    #[error("`{}` (from `{variable}`) is not a rank: {RANK_IS}", shown(.value))]
    BadRank {
        value: String,
        variable: &'static str,
    },
    #[error("no soak of job `{job}` is recorded under `{}`", .root.display())]
    NoSuchJob { job: String, root: PathBuf },
    #[error("`--rank` gives a rank, but this soak belongs to no job")]
    RankWithoutJob,
    #[error("refusing the job directory `{}`: {reason}", .path.display())]
    UnsafeDirectory { path: PathBuf, reason: Distrust },
    #[error("cannot create the job directory `{}`", .path.display())]
    Directory {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the job's alarm `{}`", .path.display())]
    WriteAlarm {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read the job's alarm `{}`", .path.display())]
    ReadAlarm {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the job's alarm `{}` is not an alarm: {why}", .path.display())]
    MalformedAlarm { path: PathBuf, why: String },
    #[error("refusing the job's alarm `{}`: {reason}", .path.display())]
    UntrustedAlarm { path: PathBuf, reason: Distrust },
    #[error(
        "job `{}` has failed already: rank {} on {} raised its alarm ({}: {})",
        .alarm.job,
        .alarm.rank.map_or_else(|| "?".to_owned(), |rank| rank.to_string()),
        .alarm.host,
        .alarm.failure_kind,
        .alarm.reason
    )]
    AlarmBefore {
        path: PathBuf,
        alarm: Box<super::alarm::Alarm>,
    },
}

impl Boundary for JobError {
    fn exit(&self) -> Exit {
        match self {
            JobError::RankWithoutJob => Exit::Usage,
            // The command line is right; what a launcher set is refused, as `{rank}` in
            // `--output` refuses it. (A bad `--job` or `--rank` is clap's usage error.)
            JobError::BadJob { .. }
            | JobError::NoSuchJob { .. }
            | JobError::BadRank { .. }
            | JobError::UnsafeDirectory { .. }
            | JobError::Directory { .. }
            | JobError::WriteAlarm { .. }
            | JobError::ReadAlarm { .. }
            | JobError::MalformedAlarm { .. }
            | JobError::UntrustedAlarm { .. }
            | JobError::AlarmBefore { .. } => Exit::Refused,
        }
    }
}

impl Hint for JobError {
    fn hint(&self) -> Option<String> {
        match self {
            JobError::BadJob { variable, .. } => Some(format!(
                "`{variable}` should be the job's number; `--job NAME` names the job instead"
            )),
            JobError::BadRank { variable, .. } => Some(format!(
                "`{variable}` should be this process's rank; `--rank N` gives it instead"
            )),
            JobError::NoSuchJob { .. } => Some(
                "see `unilab job list`; a soak joins a job with `soak run --job NAME` or under Slurm"
                    .into(),
            ),
            JobError::RankWithoutJob => {
                Some("add `--job NAME`: outside Slurm, a job is what `--job` names".into())
            }
            JobError::UnsafeDirectory { .. } => Some(
                "a job directory must be yours and closed to others; a state root shared by several users needs `<root>/jobs` made by root with mode 1777, as `/tmp` is"
                    .into(),
            ),
            JobError::MalformedAlarm { path, .. } | JobError::UntrustedAlarm { path, .. } => {
                Some(format!(
                    "no rank of unilab wrote it; remove `{}` if the job's ranks are to raise their alarm there",
                    path.display()
                ))
            }
            JobError::AlarmBefore { path, .. } => Some(format!(
                "a job's alarm is for one run of it: if that run is over, remove `{}`, or name this run anew with `--job NAME`",
                path.display()
            )),
            JobError::Directory { .. } | JobError::WriteAlarm { .. } | JobError::ReadAlarm { .. } => {
                None
            }
        }
    }
}

/// What a rank is, as a refusal of one says it.
pub(crate) const RANK_IS: &str = "a rank is a whole number, 0 or more";

/// A value as a message shows it: on one line, and cut short past 64 characters (a variable
/// may hold kilobytes).
fn shown(value: &str) -> String {
    const SHOWN: usize = 64;
    let text = crate::text::foreign(value);
    match text.char_indices().nth(SHOWN) {
        Some((at, _)) => format!("{}… ({} bytes)", &text[..at], value.len()),
        None => text.into_owned(),
    }
}
