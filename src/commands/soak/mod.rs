//! `unilab soak`: one file a verb (`run`, `list`, `show`, `compare`, `export`, `report`), and
//! `snapshot`; here the dispatch and what several verbs share: a soak named
//! ([`crate::read::naming`]), its summary, the output rule.

mod compare;
mod export;
mod list;
mod report;
mod run;
mod show;
mod snapshot;

use crate::cli::soak::SoakCommand;
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::log::Snapshot;
use crate::output::Output;
use crate::paths::StatePaths;
use crate::process::SystemProc;
use crate::projection::SoakSummary;
use crate::read::naming::named;
use crate::soak::error::SoakError;
use crate::soak::request::refuse_to_replace;
use crate::soak::{abandon, ended};
use crate::time::unix_seconds;

fn to_json<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, Error> {
    serde_json::to_value(value).map_err(|e| Error::Internal(e.to_string()))
}

pub(crate) fn run(
    paths: &StatePaths,
    command: SoakCommand,
    out: &mut Output,
) -> Result<Exit, Error> {
    match command {
        SoakCommand::Run(args) => run::soak_run(paths, *args, out),
        SoakCommand::List(args) => list::list(paths, &args, out),
        SoakCommand::Show { id } => show::show(paths, &id, out),
        SoakCommand::Compare { a, b } => compare::compare(paths, &a, &b, out),
        SoakCommand::Export {
            id,
            output,
            force,
            format,
        } => export::export(paths, &id, output.as_deref(), force, format, out),
        SoakCommand::Report { id, output, force } => {
            report::report(paths, &id, output.as_deref(), force, out)
        }
    }
}

/// A read of the soaks after settling the abandoned ones; `None` when nothing was recorded.
fn settled(paths: &StatePaths, out: &Output) -> Result<Option<Snapshot>, Error> {
    let Some(reader) = super::read_own_log(paths, out)? else {
        return Ok(None);
    };
    Ok(Some(abandon::settle(
        paths,
        &reader,
        &SystemProc::default(),
        crate::read::VIEWS,
    )?))
}

/// The soak `id` names (an id, a unique prefix or `latest`), in a settled read of the log.
fn resolve(paths: &StatePaths, id: &str, out: &Output) -> Result<(Snapshot, SoakSummary), Error> {
    let snapshot = settled(paths, out)?.ok_or_else(|| SoakError::NoSuchSoak(id.to_owned()))?;
    let summary = named(&snapshot, id)?.ok_or_else(|| SoakError::NoSuchSoak(id.to_owned()))?;
    let summary = ended::as_shown(&snapshot, summary)?;
    Ok((snapshot, summary))
}

/// `failed (stale_progress)`, or just the state.
fn status_text(summary: &SoakSummary) -> String {
    match summary.failure_kind {
        Some(kind) => format!("{} ({})", summary.state.as_str(), kind.as_str()),
        None => summary.state.as_str().to_owned(),
    }
}

fn summary_json(summary: &SoakSummary) -> serde_json::Value {
    serde_json::json!({
        "soak_id": summary.soak_id,
        "outcome": {
            "status": summary.state.as_str(),
            "failure_kind": summary.failure_kind,
            "reason": summary.reason,
        },
        // Only once it was written; `output` is where it goes.
        "artifact": summary.artifact_digest.as_ref().map(|_| &summary.output),
        "output": summary.output,
        "digest": summary.artifact_digest,
        "command": crate::redact::mask_argv(&summary.command),
        "samples": summary.samples,
        "started_at": unix_seconds(summary.started_at_us),
        // An abandoned soak's is its last sample's, and its end `unknown`
        // (`soak::ended`).
        "ended_at": summary.ended_at_us.map(unix_seconds),
        "ended": summary.state.end(),
        "first_seq": summary.first_seq,
        "last_seq": summary.last_seq,
    })
}

pub(crate) use snapshot::snapshot;
