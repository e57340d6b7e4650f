//! `unilab mps`: one file a verb (`status`, `doctor`, `plan`, `start`, `stop`, `list`, `env`,
//! `exec`); here the dispatch and what several verbs share: the log read, the JSON rule,
//! settling cut-short starts and saying so, and the daemon a command names.

mod doctor;
mod env;
mod exec;
mod list;
mod plan;
mod start;
mod status;
mod stop;

use crate::cli::mps::{MpsCommand, TargetArgs};
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::log::{EventLog, Snapshot};
use crate::mps::error::MpsError;
use crate::mps::start::Cleared;
use crate::mps::{DaemonRecord, Mps, records, settle};
use crate::output::Output;
use crate::paths::StatePaths;
use crate::process::SystemProc;

pub(crate) fn run(
    paths: &StatePaths,
    command: MpsCommand,
    out: &mut Output,
) -> Result<Exit, Error> {
    let proc = SystemProc::default();
    let mps = Mps::from_process(paths, &proc);
    match command {
        MpsCommand::Status => status::status(&mps, out),
        MpsCommand::Doctor {
            selector,
            python,
            framework_view,
        } => doctor::doctor(&mps, selector.as_deref(), python, framework_view, out),
        MpsCommand::Plan { selector } => plan::plan(&mps, selector.as_deref(), out),
        MpsCommand::Start(args) => start::start(&mps, args, out),
        MpsCommand::Stop(args) => stop::stop(&mps, &args, out),
        MpsCommand::List => list::list(&mps, out),
        MpsCommand::Env(target) => env::env(&mps, &target, out),
        MpsCommand::Exec {
            target,
            shared,
            limits,
            command,
        } => exec::exec(&mps, &target, shared, &limits, &command, out),
    }
}

/// A read-only view of the log, or none when nothing was ever recorded.
fn read_log(paths: &StatePaths, out: &Output) -> Result<Option<Snapshot>, Error> {
    Ok(match super::read_own_log(paths, out)? {
        Some(reader) => Some(reader.snapshot()?),
        None => None,
    })
}

fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<serde_json::Value, Error> {
    serde_json::to_value(value).map_err(|e| Error::Internal(e.to_string()))
}

/// Finishes the starts that were cut short before this command decides anything.
fn settle(mps: &Mps, log: &EventLog, out: &Output) -> Result<(), Error> {
    say_settled(out, &settle::settle_cut_starts(mps, log)?);
    Ok(())
}

/// Says which cut-short starts were settled, and which processes could not be checked.
fn say_settled(out: &Output, settled: &settle::Settled) {
    for skipped in &settled.skipped {
        out.warn(&skipped.to_string());
    }
    for name in &settled.names {
        out.warn(&format!(
            "a start of `{name}` was cut short; what it launched was stopped and the start recorded as failed"
        ));
    }
}

/// Says what a start cleared out of its way.
fn say_cleared(out: &Output, cleared: &Cleared) {
    say_settled(out, &cleared.settled);
    for name in &cleared.cleaned {
        out.note(&format!("cleaned the stale record of `{name}`"));
    }
}

/// The live daemon a command names, by name, GPU or as the sole one.
fn target(mps: &Mps, target: &TargetArgs, out: &Output) -> Result<DaemonRecord, Error> {
    let snapshot = read_log(mps.paths, out)?.ok_or(MpsError::NoDaemon)?;
    let records = records::records(mps, &snapshot)?;
    let record = match &target.gpu {
        Some(selector) => {
            let gpu = records::one_gpu(mps, selector)?;
            records::select_for_gpu(mps, &records, &gpu)?
        }
        None => records::select(mps, &records, target.name.as_deref())?,
    };
    records::require_live(mps, record)?;
    Ok(record.clone())
}
