//! Stopping a recorded daemon: `quit`, then signals through its pidfd, each after an identity
//! check; or cleaning its record when it no longer names the daemon. Also what a start whose
//! launch was stopped (it failed, or was cut short) gives that launch, and records of it.

use std::path::Path;
use std::time::Duration;

use super::control;
use super::decide::{self, Stop};
use super::dirs;
use super::error::MpsError;
use super::lock;
use super::records::{liveness, records};
use super::{DaemonRecord, Mps};
use crate::event::{Event, StaleReason, StopMethod, Subject};
use crate::log::EventLog;
use crate::process::{self, ProcessIdentity, Signal};
use crate::trace::{STEPS, detail};

/// How a stop ended for one daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StopOutcome {
    Stopped {
        name: String,
        method: StopMethod,
        /// It took `quit` but gave no answer in time: it was stopped by signal.
        wedged: bool,
    },
    Stale {
        name: String,
        reason: StaleReason,
    },
    /// Another command stopped or cleaned it first.
    Gone {
        name: String,
    },
}

/// Stops one recorded daemon, or cleans its record when it is not the live process it names.
/// Holds the daemon's locks from the check to the record, and checks again under them that the
/// record still stands: of two stops at once, one stops the daemon and the other finds it gone.
pub(crate) fn stop(
    mps: &Mps,
    log: &EventLog,
    record: &DaemonRecord,
    grace: Duration,
) -> Result<StopOutcome, MpsError> {
    let _held = lock_recorded(mps, record)?;
    stop_held(mps, log, record, grace)
}

/// Takes the locks of a recorded daemon: its name's and its GPUs'.
pub(crate) fn lock_recorded(mps: &Mps, record: &DaemonRecord) -> Result<lock::Held, MpsError> {
    lock::daemon(
        mps,
        &record.name,
        record.job.as_deref(),
        record.gpu_uuids.iter().map(String::as_str),
    )
}

/// [`stop`], for a caller that holds the daemon's locks.
pub(crate) fn stop_held(
    mps: &Mps,
    log: &EventLog,
    record: &DaemonRecord,
    grace: Duration,
) -> Result<StopOutcome, MpsError> {
    let still = records(mps, &log.snapshot()?)?
        .into_iter()
        .any(|r| r.name == record.name && r.identity() == record.identity());
    let name = record.name.clone();
    match decide::stop(still, liveness(mps, record)) {
        Stop::Gone => Ok(StopOutcome::Gone { name }),
        Stop::Clean(reason) => {
            clean_stale(mps, log, record, reason)?;
            Ok(StopOutcome::Stale { name, reason })
        }
        Stop::Halt => {
            let Halted { method, wedged } = halt_daemon(mps, record, grace)?;
            dirs::remove_leftovers(Path::new(&record.pipe_directory));
            log.append(
                Subject::Daemon(name.clone()),
                Event::DaemonStopped {
                    process: record.identity(),
                    method,
                },
            )?;
            Ok(StopOutcome::Stopped {
                name,
                method,
                wedged,
            })
        }
    }
}

/// Records that a record no longer names its daemon, and removes the socket and pid file the
/// daemon left, unless some daemon still answers in its pipe directory.
pub(crate) fn clean_stale(
    mps: &Mps,
    log: &EventLog,
    record: &DaemonRecord,
    reason: StaleReason,
) -> Result<(), MpsError> {
    log.append(
        Subject::Daemon(record.name.clone()),
        Event::DaemonStaleCleaned {
            process: record.identity(),
            reason,
        },
    )?;
    dirs::remove_leftovers_of_the_gone(mps.proc, Path::new(&record.pipe_directory));
    Ok(())
}

/// How a daemon was halted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Halted {
    pub method: StopMethod,
    /// It took `quit` and gave no answer within the tool timeout.
    pub wedged: bool,
}

/// [`halt_daemon`], for a caller that needs only how it ended.
pub(crate) fn halt(
    mps: &Mps,
    record: &DaemonRecord,
    grace: Duration,
) -> Result<StopMethod, MpsError> {
    halt_daemon(mps, record, grace).map(|halted| halted.method)
}

/// Asks the daemon to quit, then escalates through its pidfd: SIGTERM, then SIGKILL, each after
/// `grace`. Every signal re-checks the daemon's identity first. A wedged daemon — one that took
/// `quit` and gave no answer within the tool timeout — is escalated at once.
pub(crate) fn halt_daemon(
    mps: &Mps,
    record: &DaemonRecord,
    grace: Duration,
) -> Result<Halted, MpsError> {
    let daemon = record.identity();
    let pipe = Path::new(&record.pipe_directory);
    let log_dir = Path::new(&record.log_directory);
    // `quit` goes through the daemon's own socket; a daemon that cannot be reached is escalated.
    detail!(
        STEPS,
        "daemon `{}` (pid {}): sending `quit`",
        record.name,
        record.pid
    );
    let quit = control::send(&mps.control, pipe, log_dir, "quit");
    let wedged = matches!(quit, Err(crate::tool::ToolError::Timeout { .. }));
    let halted = |method| Halted { method, wedged };
    if wedged {
        detail!(
            STEPS,
            "daemon `{}`: wedged, no answer to `quit` within {}",
            record.name,
            crate::text::step_time(mps.control.timeout.as_secs_f64())
        );
        if process::wait_for_exit(mps.proc, daemon, Duration::ZERO) {
            return Ok(halted(StopMethod::Quit));
        }
    } else if process::wait_for_exit(mps.proc, daemon, grace) {
        detail!(STEPS, "daemon `{}`: exited after `quit`", record.name);
        return Ok(halted(StopMethod::Quit));
    }
    for (signal, method) in [
        (Signal::Terminate, StopMethod::Terminated),
        (Signal::Kill, StopMethod::Killed),
    ] {
        detail!(
            STEPS,
            "daemon `{}`: still running after {}; sending {signal} through its pidfd",
            record.name,
            crate::text::step_time(grace.as_secs_f64())
        );
        match process::signal(mps.proc, daemon, mps.paths.uid, signal) {
            Ok(()) => {}
            // It exited (or its pid moved on) between the wait and the signal: it has stopped.
            Err(process::SignalError::NotThatProcess { .. }) => return Ok(halted(method)),
            Err(source) => {
                return Err(MpsError::Signal {
                    name: record.name.clone(),
                    source,
                });
            }
        }
        if process::wait_for_exit(mps.proc, daemon, grace) {
            detail!(STEPS, "daemon `{}`: exited after {signal}", record.name);
            return Ok(halted(method));
        }
    }
    Err(MpsError::Signal {
        name: record.name.clone(),
        source: process::SignalError::Failed {
            identity: daemon,
            source: std::io::Error::other("it survived SIGKILL"),
        },
    })
}

/// Why a start failed, and what of its launch was stopped: the reason a failed or cut-short
/// start records.
pub(crate) fn what_was_stopped(cause: &str, stopped: &[(ProcessIdentity, StopMethod)]) -> String {
    if stopped.is_empty() {
        return format!("{cause}; nothing it launched was left running");
    }
    let done: Vec<String> = stopped
        .iter()
        .map(|(identity, method)| format!("pid {} ({})", identity.pid, method.as_str()))
        .collect();
    format!("{cause}; stopped what it launched: {}", done.join(", "))
}

/// How long a process a failed launch left gets after each signal.
pub(crate) const LAUNCH_GRACE: Duration = Duration::from_secs(2);
