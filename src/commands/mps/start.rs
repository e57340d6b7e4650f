//! `unilab mps start`: a daemon for one GPU, detached or in the foreground.

use std::time::Duration;

use super::{say_cleared, settle, to_json};
use crate::cli::mps::StartArgs;
use crate::diagnostic::Exit;
use crate::env::STOP_GRACE_SECS;
use crate::error::Error;
use crate::event::DaemonLimits;
use crate::log::EventLog;
use crate::mps::spec::{self, StartRequest};
use crate::mps::{DaemonRecord, Mps, foreground, lock};
use crate::output::Output;

pub(super) fn start(mps: &Mps, args: StartArgs, out: &mut Output) -> Result<Exit, Error> {
    let request = StartRequest {
        selector: args.selector,
        name: args.name,
        pipe_directory: args.pipe_dir,
        log_directory: args.log_dir,
        job: mps.env.job.clone(),
        limits: DaemonLimits {
            active_thread_percentage: args.limits.active_thread_percentage,
            pinned_memory_limit: args.limits.pinned_memory_limit,
        },
    };
    // Validate everything before the log is opened or anything created.
    let spec = spec::spec(mps, &request)?;
    let log = EventLog::open(&mps.paths.log_path(), mps.paths.scope(), crate::read::VIEWS)?;
    settle(mps, &log, out)?;
    // From the check that nothing serves the name or the GPU to the record of what started.
    let held = lock::daemon(mps, &spec.name, spec.job.as_deref(), [spec.gpu.as_str()])?;
    if args.foreground {
        let stop = crate::commands::raised_on(&crate::commands::STOP_SIGNALS)?;
        let grace = Duration::from_secs_f64(STOP_GRACE_SECS);
        // The record is printed, and flushed, the moment the daemon is verified: a script that
        // reads it must not wait until the daemon stops.
        let mut printed = Ok(());
        let mut held = Some(held);
        let method =
            foreground::run_foreground(mps, &log, &spec, &stop, grace, |record, cleared| {
                // Recorded: a stop may now come, and must not wait for this daemon to end.
                drop(held.take());
                say_cleared(out, cleared);
                out.note(&format!(
                    "daemon `{}` (pid {}) runs in the foreground for {}; Ctrl-C stops it",
                    record.name, record.pid, spec.gpu
                ));
                printed = print_record(out, record).and_then(|()| out.flush());
            })?;
        printed?;
        out.note(&format!(
            "daemon `{}` stopped ({})",
            spec.name,
            method.as_str()
        ));
        return Ok(Exit::Success);
    }
    let started = crate::mps::start::start(mps, &log, &spec)?;
    drop(held);
    say_cleared(out, &started.cleared);
    print_record(out, &started.record)?;
    out.note(&format!(
        "use it with `unilab mps exec {0} -- CMD`, or `eval \"$(unilab mps env {0})\"`",
        started.record.name
    ));
    Ok(Exit::Success)
}

fn print_record(out: &mut Output, record: &DaemonRecord) -> Result<(), Error> {
    if out.json {
        return out.json_line(&to_json(record)?);
    }
    out.line(&format!(
        "started `{}` (pid {}) for {}, pipe `{}`",
        record.name,
        record.pid,
        record.gpu_uuids.join(","),
        record.pipe_directory
    ))
}
