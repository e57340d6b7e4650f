//! `unilab mps stop`: this user's daemons stopped by name, job or all, each after an identity
//! check; a record that no longer names its daemon is cleaned (exit 4). Where nothing is
//! recorded there is nothing to stop: exit 0 with a note, whatever form the command takes.

use std::io::Write as _;

use super::{settle, to_json};
use crate::cli::mps::StopArgs;
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::log::EventLog;
use crate::mps::error::MpsError;
use crate::mps::stop::StopOutcome;
use crate::mps::{DaemonRecord, Mps, names, records};
use crate::output::Output;

pub(super) fn stop(mps: &Mps, args: &StopArgs, out: &mut Output) -> Result<Exit, Error> {
    let log = EventLog::open(&mps.paths.log_path(), mps.paths.scope(), crate::read::VIEWS)?;
    settle(mps, &log, out)?;
    // A daemon still being started is stopped once its start has recorded it.
    let scoped = args
        .name
        .as_deref()
        .map(|name| names::scoped_name(name, mps.env.job.as_deref()));
    settle::wait_for_starts(mps, &log, |name, job| {
        if let Some(wanted) = &args.job {
            job == Some(wanted.as_str())
        } else if let Some(given) = &args.name {
            Some(name) == scoped.as_deref() || name == given
        } else {
            records::job_in_scope(mps, job)
        }
    })?;
    let records = records::records(mps, &log.snapshot()?)?;
    let targets: Vec<&DaemonRecord> = if args.all {
        // Under a Slurm job, `--all` is the job's daemons.
        records
            .iter()
            .filter(|r| records::in_scope(mps, r))
            .collect()
    } else if let Some(job) = &args.job {
        records
            .iter()
            .filter(|r| r.job.as_deref() == Some(job.as_str()))
            .collect()
    } else {
        match records::select(mps, &records, args.name.as_deref()) {
            Ok(record) => vec![record],
            // Where no daemon is recorded, none runs: what `stop` asks for holds already, as
            // for `--all` (an epilog needs one answer). A name not recorded is still refused.
            Err(MpsError::NoDaemon) => Vec::new(),
            Err(e) => return Err(e.into()),
        }
    };
    if targets.is_empty() {
        let recorded = match args.job.as_deref().or(mps.env.job.as_deref()) {
            Some(job) => format!("no daemon of job {job} is recorded"),
            None => "no daemon is recorded".to_owned(),
        };
        out.note(&format!("{recorded}; nothing to stop"));
        if out.json {
            out.json_line(&serde_json::json!([]))?;
        }
        return Ok(Exit::Success);
    }
    let mut results = Vec::new();
    let mut first_error = None;
    for record in targets {
        match crate::mps::stop::stop(mps, &log, record, args.grace) {
            Ok(outcome) => results.push((record, outcome)),
            Err(e) => {
                out.warn(&format!("daemon `{}`: {e}", record.name));
                first_error.get_or_insert(e);
            }
        }
    }
    let stale = report_stops(mps, &results, out)?;
    if let Some(e) = first_error {
        return Err(e.into());
    }
    if stale.is_empty() {
        return Ok(Exit::Success);
    }
    if out.json {
        // Like every other error under `--json`: one object on standard error.
        let error = serde_json::json!({
            "error": stale.join("; "),
            "causes": [],
            "hint": "start a new daemon with `unilab mps start`",
            "exit_code": Exit::Stale.code(),
        });
        let _ = writeln!(std::io::stderr(), "{error}");
    }
    Ok(Exit::Stale)
}

/// Says how each stop ended; under `--json`, prints the records stopped, each with its
/// `outcome`, `method` and `reason`. Returns what was said of the stale records cleaned.
fn report_stops(
    mps: &Mps,
    results: &[(&DaemonRecord, StopOutcome)],
    out: &mut Output,
) -> Result<Vec<String>, Error> {
    let mut json = Vec::new();
    let mut stale = Vec::new();
    for (record, result) in results {
        let (outcome, method, reason) = match result {
            StopOutcome::Stopped {
                name,
                method,
                wedged,
            } => {
                if *wedged {
                    out.warn(&format!(
                        "daemon `{name}` was wedged: it gave no answer to `quit` within {}, so it was stopped by signal",
                        crate::text::duration(mps.control.timeout.as_secs_f64())
                    ));
                }
                if !out.json {
                    out.line(&format!("stopped `{name}` ({})", method.as_str()))?;
                }
                let outcome = if *wedged { "wedged" } else { "stopped" };
                (outcome, Some(method.as_str()), None)
            }
            StopOutcome::Gone { name } => {
                out.note(&format!(
                    "daemon `{name}` was stopped by another command meanwhile; nothing was signalled"
                ));
                ("already_stopped", None, None)
            }
            StopOutcome::Stale { name, reason } => {
                let said = format!(
                    "daemon `{name}` was no longer running ({}); its record was cleaned and nothing was signalled",
                    reason.as_str()
                );
                if !out.json {
                    out.warn(&said);
                }
                stale.push(said);
                ("stale_cleaned", None, Some(reason.as_str()))
            }
        };
        let mut value = to_json(record)?;
        if let Some(object) = value.as_object_mut() {
            object.insert("outcome".into(), outcome.into());
            object.insert("method".into(), method.into());
            object.insert("reason".into(), reason.into());
        }
        json.push(value);
    }
    if out.json {
        out.json_line(&serde_json::Value::Array(json))?;
    }
    Ok(stale)
}
