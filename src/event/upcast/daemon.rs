//! `daemon_started`'s and `daemon_starting`'s forms, one function a form (named after its
//! variant), and the way back.
//!
//! What a form did not record is `None`, never a value that says something: a daemon started
//! before jobs were recorded (schema 1–3) has no job (`None`), one started outside a job
//! `Some(None)`; one started before limits were recorded (schema 1–6) has no limits.

use crate::event::Event;
use crate::event::daemon::{DaemonLimits, StartedDaemon};
use crate::event::stored::StoredEvent;
use crate::process::ProcessIdentity;

pub(super) fn started_v3(record: StartedDaemon, foreground: bool) -> Event {
    Event::DaemonStarted {
        record,
        foreground,
        job: None,
        limits: None,
    }
}

pub(super) fn started_v6(record: StartedDaemon, foreground: bool, job: Option<String>) -> Event {
    Event::DaemonStarted {
        record,
        foreground,
        job: Some(job),
        limits: None,
    }
}

pub(super) fn started(
    record: StartedDaemon,
    foreground: bool,
    job: Option<String>,
    limits: DaemonLimits,
) -> Event {
    Event::DaemonStarted {
        record,
        foreground,
        job: Some(job),
        limits: Some(limits),
    }
}

/// `daemon_started` in the form of `schema` (see [`Event::into_stored`]).
pub(super) fn started_into_stored(
    record: StartedDaemon,
    foreground: bool,
    job: Option<Option<String>>,
    limits: Option<DaemonLimits>,
    schema: u32,
) -> StoredEvent {
    match schema {
        ..=3 => StoredEvent::DaemonStartedV3 { record, foreground },
        4..=6 => StoredEvent::DaemonStartedV6 {
            record,
            foreground,
            job: job.flatten(),
        },
        _ => StoredEvent::DaemonStarted {
            record,
            foreground,
            job: job.flatten(),
            limits: limits.unwrap_or_default(),
        },
    }
}

/// `daemon_starting` of either form: `job` is `None` in schema 2–3's, which has no such field.
pub(super) fn starting(
    gpu: String,
    pipe_directory: String,
    log_directory: String,
    starter: ProcessIdentity,
    job: Option<Option<String>>,
) -> Event {
    Event::DaemonStarting {
        gpu,
        pipe_directory,
        log_directory,
        starter,
        job,
    }
}

/// `daemon_starting` in the form of `schema` (see [`Event::into_stored`]).
pub(super) fn starting_into_stored(
    gpu: String,
    pipe_directory: String,
    log_directory: String,
    starter: ProcessIdentity,
    job: Option<Option<String>>,
    schema: u32,
) -> StoredEvent {
    match schema {
        ..=3 => StoredEvent::DaemonStartingV3 {
            gpu,
            pipe_directory,
            log_directory,
            starter,
        },
        _ => StoredEvent::DaemonStarting {
            gpu,
            pipe_directory,
            log_directory,
            starter,
            job: job.flatten(),
        },
    }
}
