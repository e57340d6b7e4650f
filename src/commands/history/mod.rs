//! `unilab history`: the event log as a timeline, for forensics: a line a record ([`timeline`])
//! or, with `--json`, an object a record with the fields of the form it is stored in. One
//! soak's timeline (`--soak`) also says where the trainer's beats changed phase ([`phases`]).

#[cfg(test)]
mod old_and_new_forms;
mod phases;

use std::thread::sleep;
use std::time::Duration;

use crate::cli::history::HistoryArgs;
use crate::diagnostic::Exit;
use crate::env::FOLLOW_POLL_MS;
use crate::error::Error;
use crate::event::Subject;
use crate::log::chain::to_hex;
use crate::log::{LogReader, Record, Snapshot};
use crate::mps::error::MpsError;
use crate::output::Output;
use crate::paths::StatePaths;
use crate::soak::error::SoakError;
use crate::time::unix_seconds;
use crate::view::timeline::record_line;
use phases::PhaseLines;

/// The full id of the soak `id` names (a unique prefix, `latest`), or `id` as given when the log
/// holds events under it all the same (a log whose start of that soak is lost: forensics). One
/// the log does not know at all is an error, as for `soak show` — unless `follow`ing, which
/// waits for it.
fn soak_id(reader: Option<&LogReader>, id: &str, follow: bool) -> Result<String, Error> {
    if let Some(reader) = reader
        && let Some(summary) = crate::read::naming::named(&reader.snapshot()?, id)?
    {
        return Ok(summary.soak_id);
    }
    if follow || recorded(reader, &Subject::Soak(id.to_owned()))? {
        Ok(id.to_owned())
    } else {
        Err(SoakError::NoSuchSoak(id.to_owned()).into())
    }
}

/// `--daemon NAME` of a name the log never recorded is an error, as `--soak` of an unknown id is
/// — unless `follow`ing, which waits for it.
fn known_daemon(reader: Option<&LogReader>, name: &str, follow: bool) -> Result<(), Error> {
    if follow || recorded(reader, &Subject::Daemon(name.to_owned()))? {
        Ok(())
    } else {
        Err(MpsError::NoSuchDaemon(name.to_owned()).into())
    }
}

/// Whether the log holds any event under `subject`.
fn recorded(reader: Option<&LogReader>, subject: &Subject) -> Result<bool, Error> {
    let Some(reader) = reader else {
        return Ok(false);
    };
    let mut any = false;
    reader
        .snapshot()?
        .scan_subject(subject, 1, |_| -> Result<bool, crate::log::LogError> {
            any = true;
            Ok(false)
        })?;
    Ok(any)
}

pub(crate) fn run(paths: &StatePaths, args: &HistoryArgs, out: &mut Output) -> Result<Exit, Error> {
    if args.all_hosts {
        return all_hosts(paths, args, out);
    }
    let log_path = paths.log_path();
    let mut reader = super::read_own_log(paths, out)?;
    let subject = match (&args.soak, &args.daemon) {
        (Some(id), _) => Some(Subject::Soak(soak_id(reader.as_ref(), id, args.follow)?)),
        (_, Some(name)) => {
            known_daemon(reader.as_ref(), name, args.follow)?;
            Some(Subject::Daemon(name.clone()))
        }
        _ => None,
    };
    if reader.is_none() && !args.follow {
        out.note(&format!(
            "no events recorded yet in `{}`",
            log_path.display()
        ));
        return Ok(Exit::Success);
    }
    let mut next = args.since.max(1);
    let mut phases = PhaseLines::default();
    loop {
        if let Some(log) = &reader {
            let snapshot = log.snapshot()?;
            next = print_from(&snapshot, subject.as_ref(), next, &mut phases, out)?;
        }
        if !args.follow {
            if let Some(line) = phases.left_out().filter(|_| !out.json) {
                out.line(&line)?;
            }
            return Ok(Exit::Success);
        }
        out.flush()?;
        sleep(Duration::from_millis(FOLLOW_POLL_MS));
        if reader.is_none() {
            reader = super::read_own_log(paths, out)?;
        }
    }
}

/// Prints the records from `from` on and returns the next sequence to look at; a soak's
/// timeline with the phase changes `phases` tracks.
fn print_from(
    snapshot: &Snapshot,
    subject: Option<&Subject>,
    from: u64,
    phases: &mut PhaseLines,
    out: &mut Output,
) -> Result<u64, Error> {
    let mut next = from;
    // Phase changes are one soak's: not told in a timeline of several.
    let one_soak = matches!(subject, Some(Subject::Soak(_)));
    let mut print = |record: Record, out: &mut Output| -> Result<(), Error> {
        next = record.envelope.seq + 1;
        if out.json {
            out.json_line(&record_json(&record))
        } else if one_soak {
            soak_line(&record, phases, out, &record_line)
        } else {
            out.line(&record_line(&record))
        }
    };
    match subject {
        Some(subject) => snapshot.scan_records(subject, from, |record| {
            print(record, out)?;
            Ok::<bool, Error>(true)
        })?,
        None => {
            let mut failure = None;
            snapshot.scan(from, |record| match print(record, out) {
                Ok(()) => Ok(true),
                Err(e) => {
                    failure = Some(e);
                    Ok(false)
                }
            })?;
            if let Some(e) = failure {
                return Err(e);
            }
        }
    }
    Ok(next)
}

/// A soak's record's line (`line` of it), with the phase changes `phases` says before and after
/// it.
fn soak_line(
    record: &Record,
    phases: &mut PhaseLines,
    out: &mut Output,
    line: &dyn Fn(&Record) -> String,
) -> Result<(), Error> {
    let event = &record.envelope.event;
    for said in [
        phases.before(event),
        Some(line(record)),
        phases.after(event),
    ]
    .into_iter()
    .flatten()
    {
        out.line(&said)?;
    }
    Ok(())
}

/// `history --all-hosts`: every host's log of this user under the root, read-only, merged by
/// the time each event was recorded; each line starts with its host (`--json` objects carry
/// `host` already). A soak is named by its full id here: prefixes are a host's own.
fn all_hosts(paths: &StatePaths, args: &HistoryArgs, out: &mut Output) -> Result<Exit, Error> {
    let subject = match (&args.soak, &args.daemon) {
        (Some(id), _) => Some(Subject::Soak(id.clone())),
        (_, Some(name)) => Some(Subject::Daemon(name.clone())),
        _ => None,
    };
    let mut records = Vec::new();
    super::for_every_host_log(paths, out, None, |host, snapshot| {
        // A host's records are taken whole or not at all: its log may fail half-way.
        let mut found = Vec::new();
        let keep = |record: Record| {
            found.push((record.envelope.recorded_at_us, host.to_owned(), record));
            Ok::<bool, crate::log::LogError>(true)
        };
        match &subject {
            Some(subject) => snapshot.scan_records(subject, args.since, keep)?,
            None => snapshot.scan(args.since, keep)?,
        }
        records.extend(found);
        Ok(())
    })?;
    records.sort_by(|a, b| (a.0, &a.1, a.2.envelope.seq).cmp(&(b.0, &b.1, b.2.envelope.seq)));
    // A host is a directory's name under the root: anyone's text.
    let records: Vec<_> = records
        .into_iter()
        .map(|(at, host, record)| (at, crate::text::foreign(&host).into_owned(), record))
        .collect();
    let width = records
        .iter()
        .map(|r| r.1.chars().count())
        .max()
        .unwrap_or(0);
    // Phase changes are one soak's: not told in a timeline of several.
    let mut phases = PhaseLines::default();
    for (_, host, record) in &records {
        if out.json {
            out.json_line(&record_json(record))?;
        } else if args.soak.is_some() {
            let line = |r: &Record| format!("{host:<width$}  {}", record_line(r));
            soak_line(record, &mut phases, out, &line)?;
        } else {
            out.line(&format!("{host:<width$}  {}", record_line(record)))?;
        }
    }
    if let Some(line) = phases.left_out().filter(|_| !out.json) {
        out.line(&line)?;
    }
    Ok(Exit::Success)
}

/// One object of `history --json`: the envelope's fields, then the event's own.
pub(crate) fn record_json(record: &Record) -> serde_json::Value {
    let envelope = &record.envelope;
    let mut object = serde_json::Map::new();
    object.insert("seq".into(), envelope.seq.into());
    object.insert(
        "recorded_at".into(),
        unix_seconds(envelope.recorded_at_us).into(),
    );
    object.insert("subject".into(), envelope.subject.to_string().into());
    object.insert("kind".into(), envelope.event.kind().into());
    object.insert("uid".into(), envelope.scope.uid.into());
    object.insert("host".into(), envelope.scope.host.clone().into());
    object.insert("prev_hash".into(), to_hex(&record.prev_hash).into());
    object.insert("hash".into(), to_hex(&record.hash).into());
    let event = crate::redact::shown::event(&envelope.event);
    for (key, value) in crate::event::fields_json(&event, envelope.schema) {
        object.entry(key).or_insert(value);
    }
    serde_json::Value::Object(object)
}
