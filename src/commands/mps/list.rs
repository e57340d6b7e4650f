//! `unilab mps list`: this user's recorded daemons, with their state and users.

use super::{read_log, to_json};
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::mps::{Mps, status};
use crate::output::{Output, age};

pub(super) fn list(mps: &Mps, out: &mut Output) -> Result<Exit, Error> {
    let snapshot = read_log(mps.paths, out)?;
    let daemons = status::managed(mps, snapshot.as_ref())?;
    crate::commands::checked_show(snapshot.as_ref(), || show_daemons(&daemons, out))
}

fn show_daemons(daemons: &[status::ManagedDaemon], out: &mut Output) -> Result<Exit, Error> {
    if out.json {
        out.json_line(&to_json(daemons)?)?;
        return Ok(Exit::Success);
    }
    if daemons.is_empty() {
        out.note("no daemons recorded; start one with `unilab mps start`");
        return Ok(Exit::Success);
    }
    let paint = out.paint;
    let rows: Vec<Vec<String>> = daemons
        .iter()
        .map(|daemon| {
            vec![
                daemon.record.name.clone(),
                daemon.record.pid.to_string(),
                paint.status(daemon.state),
                daemon.record.job.clone().unwrap_or_else(|| "-".into()),
                daemon.leases.to_string(),
                age(daemon.record.created_at),
                daemon.record.gpu_uuids.join(","),
                daemon.record.pipe_directory.clone(),
            ]
        })
        .collect();
    let header = ["NAME", "PID", "STATE", "JOB", "USERS", "AGE", "GPU", "PIPE"];
    for line in crate::output::table(&header, &rows) {
        out.line(&line)?;
    }
    Ok(Exit::Success)
}
