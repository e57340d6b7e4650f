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
    /// What a launcher's variable holds cannot make a run's id.
    #[error("`{}` (from `{variable}`) cannot name a run: it {why}", shown(.value))]
    BadRun {
        value: String,
        variable: &'static str,
        why: String,
    },
    #[error("this soak of job `{job}` has no rank")]
    NoRank { job: String },
    #[error(
        "rank {rank} of run `{run}` is taken already{}",
        .holder.as_ref().map_or_else(String::new, |h| format!(", by {h}"))
    )]
    DuplicateRank {
        rank: u32,
        run: String,
        path: PathBuf,
        /// The soak whose entry holds the rank, as its entry says (escaped).
        holder: Option<String>,
    },
    #[error("cannot write `{}`", .path.display())]
    WriteEntry {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "`--meta {key}={}` contradicts the {key} this soak records ({})",
        shown(.given),
        .recorded.as_deref().map_or_else(|| "none".to_owned(), |r| format!("`{}`", shown(r)))
    )]
    MetaContradicts {
        key: &'static str,
        given: String,
        recorded: Option<String>,
    },
}

impl Boundary for JobError {
    fn exit(&self) -> Exit {
        match self {
            JobError::RankWithoutJob
            | JobError::NoRank { .. }
            | JobError::MetaContradicts { .. } => Exit::Usage,
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
            | JobError::BadRun { .. }
            | JobError::DuplicateRank { .. }
            | JobError::WriteEntry { .. } => Exit::Refused,
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
                    "no rank of unilab wrote it; remove `{}` if the run's ranks are to raise their alarm there",
                    path.display()
                ))
            }
            JobError::BadRun { variable, .. } => Some(format!(
                "`{variable}` should be the launcher's own; `--run ID` names the run instead"
            )),
            JobError::NoRank { .. } => Some(
                "give it with `--rank N`, or start it where the launcher sets `SLURM_PROCID` or `RANK`: the ranks of a job are told apart by it"
                    .into(),
            ),
            JobError::DuplicateRank { path, .. } => Some(format!(
                "each rank of a run is one soak: give this one its own `--rank`, or start the next run once that soak has ended (`--run ID` names a run); its entry is `{}`",
                path.display()
            )),
            JobError::MetaContradicts { key, .. } => Some(format!(
                "unilab records the {key} itself: leave `--meta {key}=` out, or give the value with the flag that sets it (`--job`, `--run`, `--rank`)"
            )),
            JobError::Directory { .. }
            | JobError::WriteAlarm { .. }
            | JobError::ReadAlarm { .. }
            | JobError::WriteEntry { .. } => None,
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
