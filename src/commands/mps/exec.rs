//! `unilab mps exec`: a command run with a live daemon's environment, or on the GPU's shared
//! daemon (`--shared`), its exit status passed on.

use std::time::Duration;

use super::{say_cleared, settle, target};
use crate::cli::mps::{ClientLimitArgs, TargetArgs};
use crate::diagnostic::Exit;
use crate::env::STOP_GRACE_SECS;
use crate::error::Error;
use crate::event::DaemonLimits;
use crate::log::EventLog;
use crate::mps::{self, DaemonRecord, Mps, shared};
use crate::output::Output;

/// Runs `command` on the daemon `target` names, or on the GPU's shared daemon.
pub(super) fn exec(
    mps: &Mps,
    target: &TargetArgs,
    shared: bool,
    limits: &ClientLimitArgs,
    command: &[std::ffi::OsString],
    out: &mut Output,
) -> Result<Exit, Error> {
    let limits = DaemonLimits {
        active_thread_percentage: limits.active_thread_percentage,
        pinned_memory_limit: limits.pinned_memory_limit,
    };
    if shared {
        exec_shared(mps, target.name.as_deref(), &limits, command, out)
    } else {
        exec_on(mps, target, &limits, command, out)
    }
}

fn exec_on(
    mps: &Mps,
    target_args: &TargetArgs,
    limits: &DaemonLimits,
    command: &[std::ffi::OsString],
    out: &mut Output,
) -> Result<Exit, Error> {
    let record = target(mps, target_args, out)?;
    run_with(&record, limits, command, out)
}

/// `mps exec --shared`: attach to (or start) the GPU's shared daemon, run the command, release;
/// the last one out stops a daemon started for sharing.
fn exec_shared(
    mps: &Mps,
    selector: Option<&str>,
    limits: &DaemonLimits,
    command: &[std::ffi::OsString],
    out: &mut Output,
) -> Result<Exit, Error> {
    let open = || EventLog::open(&mps.paths.log_path(), mps.paths.scope(), crate::read::VIEWS);
    let attached = {
        let log = open()?;
        settle(mps, &log, out)?;
        shared::attach(mps, &log, selector)?
    };
    // The starter became a subreaper to launch the daemon (now its child); the command's
    // orphans are not its to collect.
    let _ = nix::sys::prctl::set_child_subreaper(false);
    let record = &attached.record;
    say_cleared(out, &attached.cleared);
    if attached.started {
        out.note(&format!(
            "started the shared daemon `{}` (pid {}) for {}",
            record.name,
            record.pid,
            record.gpu_uuids.join(",")
        ));
    }
    // The log is not held open while the command runs: it may run for days.
    let ran = run_with(record, limits, command, out);
    let grace = Duration::from_secs_f64(STOP_GRACE_SECS);
    match open()
        .map_err(Error::from)
        .and_then(|log| shared::release(mps, &log, &attached, grace).map_err(Error::from))
    {
        Ok(Some(method)) => out.note(&format!(
            "the last user of `{}` is done: it was stopped ({})",
            record.name,
            method.as_str()
        )),
        Ok(None) => {}
        // The command's own exit matters most; a daemon left running is said, and the next
        // shared run or `mps stop` ends it.
        Err(e) => out.warn(&format!(
            "could not release the shared daemon `{}`: {e}",
            record.name
        )),
    }
    ran
}

/// Runs `command` with the environment of `record`'s daemon, passing on its exit status.
fn run_with(
    record: &DaemonRecord,
    limits: &DaemonLimits,
    command: &[std::ffi::OsString],
    out: &mut Output,
) -> Result<Exit, Error> {
    use std::os::unix::process::ExitStatusExt;
    let (program, args) = command
        .split_first()
        .ok_or_else(|| Error::Internal("empty command".into()))?;
    out.flush()?;
    // unilab waits for the command; signals that would end unilab first are passed on instead.
    let forward =
        crate::commands::raised_on(&[signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP])?;
    // Ctrl-C reaches the command from the terminal itself: unilab only outlives it, to wait.
    crate::commands::raised_on(&[signal_hook::consts::SIGINT])?;
    let status = mps::exec::run_with(record, limits, (program, args), &forward)?;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    Ok(Exit::Passthrough(
        u8::try_from(code.clamp(0, 255)).unwrap_or(1),
    ))
}
