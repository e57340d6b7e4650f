//! `mps exec --shared`: one daemon per GPU — per Slurm job under Slurm — started by the first
//! process that needs it, used by every process that asks for it, and stopped when the last of
//! them is done.
//!
//! Each process holds a lease, tied to its own identity (pid and start time) and recorded in
//! the log (`lease_acquired`, `lease_released`). Whether to start, and the start itself, happen
//! under the daemon's name and GPU locks, so of processes arriving at once exactly one starts
//! the daemon and the others wait (bounded by the locks' patience) until it is verified live.
//! A holder that is gone (SIGKILL) keeps nothing alive: whoever takes the locks next releases
//! its lease. When a release leaves no live holder, a daemon started for sharing is stopped as
//! `mps stop` stops it; one started with `mps start` is left to whoever started it.

use super::decide;
use super::records;
use super::spec;
use super::start;
use super::stop;
use std::time::Duration;

use super::error::MpsError;
use super::{DaemonRecord, Mps, lock};
use crate::event::{Event, LeaseEnd, StopMethod, Subject};
use crate::log::EventLog;
use crate::process::{self, Liveness, ProcessIdentity};
use crate::projection::Leases;

/// A lease this process holds on a shared daemon.
#[derive(Debug)]
pub(crate) struct Attached {
    pub record: DaemonRecord,
    /// Whether this process started the daemon.
    pub started: bool,
    /// What the start cleared out of its way (nothing when it attached to a running daemon).
    pub cleared: start::Cleared,
    holder: ProcessIdentity,
}

/// Attaches to the live daemon of the GPU `selector` names in this scope, starting it first
/// when there is none; records this process's lease.
pub(crate) fn attach(
    mps: &Mps,
    log: &EventLog,
    selector: Option<&str>,
) -> Result<Attached, MpsError> {
    let spec = spec::spec(
        mps,
        &spec::StartRequest {
            selector: selector.map(str::to_owned),
            job: mps.env.job.clone(),
            ..spec::StartRequest::default()
        },
    )?;
    let holder = start::own_identity(mps)?;
    let _held = lock::daemon(mps, &spec.name, spec.job.as_deref(), [spec.gpu.as_str()])?;
    let live = records::records(mps, &log.snapshot()?)?
        .into_iter()
        .find(|r| r.name == spec.name && decide::stale_reason(records::liveness(mps, r)).is_none());
    let (record, cleared) = match live {
        Some(record) => {
            // A wedged daemon's clients would hang: refuse rather than hand it out.
            if records::observe(mps, &record).state == records::DaemonState::Wedged {
                return Err(MpsError::Wedged {
                    name: record.name,
                    pid: record.pid,
                });
            }
            (record, None)
        }
        None => {
            let started = start::start(mps, log, &spec)?;
            (started.record, Some(started.cleared))
        }
    };
    let started = cleared.is_some();
    release_the_gone(mps, log, &record.name)?;
    log.append(
        Subject::Daemon(record.name.clone()),
        Event::LeaseAcquired {
            holder,
            job: mps.env.job.clone(),
            started,
        },
    )?;
    Ok(Attached {
        record,
        started,
        cleared: cleared.unwrap_or_default(),
        holder,
    })
}

/// Ends this process's lease. When no live holder is left on a daemon started for sharing, it
/// is stopped: how, when it was.
pub(crate) fn release(
    mps: &Mps,
    log: &EventLog,
    attached: &Attached,
    grace: Duration,
) -> Result<Option<StopMethod>, MpsError> {
    let record = &attached.record;
    let _held = stop::lock_recorded(mps, record)?;
    log.append(
        Subject::Daemon(record.name.clone()),
        Event::LeaseReleased {
            holder: attached.holder,
            reason: LeaseEnd::Finished,
        },
    )?;
    release_the_gone(mps, log, &record.name)?;
    let leases = Leases::of(&log.snapshot()?, &record.name)?;
    if !leases.shared_start || !leases.holders.is_empty() {
        return Ok(None);
    }
    Ok(match stop::stop_held(mps, log, record, grace)? {
        stop::StopOutcome::Stopped { method, .. } => {
            // The process that started it is its parent (see `start::start`): collect it.
            process::reap(record.pid);
            Some(method)
        }
        stop::StopOutcome::Stale { .. } | stop::StopOutcome::Gone { .. } => None,
    })
}

/// Releases the leases of holders that are no longer running.
fn release_the_gone(mps: &Mps, log: &EventLog, name: &str) -> Result<(), MpsError> {
    for lease in Leases::of(&log.snapshot()?, name)?.holders {
        if process::liveness(mps.proc, lease.holder, mps.paths.uid) != Liveness::Live {
            log.append(
                Subject::Daemon(name.to_owned()),
                Event::LeaseReleased {
                    holder: lease.holder,
                    reason: LeaseEnd::HolderGone,
                },
            )?;
        }
    }
    Ok(())
}
