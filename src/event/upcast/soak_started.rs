//! `soak_started`'s forms, one function a form (named after its variant), and the way back.
//!
//! Schema 1's start lacks what schema 2 added: no progress required (schema 1 had no such
//! failure), no tick rate recorded (`0`: its artifact reads ticks at the exporting host's rate).
//! The supervision (schema 5), the limits (6) and the job (9) are `None` where a form did not
//! record them; schema 5–9's supervision has no heartbeat ([`super::v9`]). Schema 1–10's starts
//! could not record a command line that is not UTF-8 (the command line refused one):
//! `command_lossy` is `false`. Schema 9–12's job has no run ([`v12::JobMember`]): its soaks
//! were recorded before runs, and form run `None`.

use crate::event::Event;
use crate::event::soak::{JobMember, Limits, SoakStart, Supervision};
use crate::event::stored::{StoredEvent, v1, v2, v9, v12};

pub(super) fn v1(start: v1::SoakStart) -> Event {
    Event::SoakStarted {
        start: Box::new(start_of_v1(start)),
        supervision: None,
        limits: None,
        job: None,
        command_lossy: false,
    }
}

pub(super) fn v4(start: v2::SoakStart) -> Event {
    Event::SoakStarted {
        start: Box::new(start.into()),
        supervision: None,
        limits: None,
        job: None,
        command_lossy: false,
    }
}

pub(super) fn v5(start: v2::SoakStart, supervision: v9::Supervision) -> Event {
    Event::SoakStarted {
        start: Box::new(start.into()),
        supervision: Some(supervision.into()),
        limits: None,
        job: None,
        command_lossy: false,
    }
}

pub(super) fn v8(start: v2::SoakStart, supervision: v9::Supervision, limits: Limits) -> Event {
    Event::SoakStarted {
        start: Box::new(start.into()),
        supervision: Some(supervision.into()),
        limits: Some(limits),
        job: None,
        command_lossy: false,
    }
}

pub(super) fn v9(
    start: v2::SoakStart,
    supervision: v9::Supervision,
    limits: Limits,
    job: Option<v12::JobMember>,
) -> Event {
    Event::SoakStarted {
        start: Box::new(start.into()),
        supervision: Some(supervision.into()),
        limits: Some(limits),
        job: job.map(JobMember::from),
        command_lossy: false,
    }
}

pub(super) fn v10(
    start: v2::SoakStart,
    supervision: Supervision,
    limits: Limits,
    job: Option<v12::JobMember>,
) -> Event {
    Event::SoakStarted {
        start: Box::new(start.into()),
        supervision: Some(supervision),
        limits: Some(limits),
        job: job.map(JobMember::from),
        command_lossy: false,
    }
}

pub(super) fn v12(
    start: v2::SoakStart,
    supervision: Supervision,
    limits: Limits,
    job: Option<v12::JobMember>,
    command_lossy: bool,
) -> Event {
    Event::SoakStarted {
        start: Box::new(start.into()),
        supervision: Some(supervision),
        limits: Some(limits),
        job: job.map(JobMember::from),
        command_lossy,
    }
}

pub(super) fn current(
    start: v2::SoakStart,
    supervision: Supervision,
    limits: Limits,
    job: Option<JobMember>,
    command_lossy: bool,
) -> Event {
    Event::SoakStarted {
        start: Box::new(start.into()),
        supervision: Some(supervision),
        limits: Some(limits),
        job,
        command_lossy,
    }
}

/// The start in the form of `schema` (see [`Event::into_stored`]).
pub(super) fn into_stored(
    start: SoakStart,
    supervision: Option<Supervision>,
    limits: Option<Limits>,
    job: Option<JobMember>,
    command_lossy: bool,
    schema: u32,
) -> StoredEvent {
    use StoredEvent as S;
    if schema <= 1 {
        return S::SoakStartedV1(Box::new(start_to_v1(start)));
    }
    // Every form since schema 2 holds schema 2's start.
    let start = Box::new(v2::SoakStart::from(start));
    match schema {
        ..=4 => S::SoakStartedV4(start),
        5 => S::SoakStartedV5 {
            start,
            supervision: supervision.unwrap_or_default().into(),
        },
        6..=8 => S::SoakStartedV8 {
            start,
            supervision: supervision.unwrap_or_default().into(),
            limits: limits.unwrap_or_default(),
        },
        9 => S::SoakStartedV9 {
            start,
            supervision: supervision.unwrap_or_default().into(),
            limits: limits.unwrap_or_default(),
            job: job.map(v12::JobMember::from),
        },
        10 => S::SoakStartedV10 {
            start,
            supervision: supervision.unwrap_or_default(),
            limits: limits.unwrap_or_default(),
            job: job.map(v12::JobMember::from),
        },
        11..=12 => S::SoakStartedV12 {
            start,
            supervision: supervision.unwrap_or_default(),
            limits: limits.unwrap_or_default(),
            job: job.map(v12::JobMember::from),
            command_lossy,
        },
        _ => S::SoakStarted {
            start,
            supervision: supervision.unwrap_or_default(),
            limits: limits.unwrap_or_default(),
            job,
            command_lossy,
        },
    }
}

pub(super) fn start_of_v1(start: v1::SoakStart) -> SoakStart {
    SoakStart {
        soak_id: start.soak_id,
        command: start.command,
        cwd: start.cwd,
        progress_dir: start.progress_dir,
        output: start.output,
        parameters: start.parameters,
        require_progress: false,
        metadata: start.metadata,
        environment: start.environment,
        supervisor: start.supervisor,
        runtime_json: start.runtime_json,
        ticks_per_second: 0,
    }
}

fn start_to_v1(start: SoakStart) -> v1::SoakStart {
    v1::SoakStart {
        soak_id: start.soak_id,
        command: start.command,
        cwd: start.cwd,
        progress_dir: start.progress_dir,
        output: start.output,
        parameters: start.parameters,
        metadata: start.metadata,
        environment: start.environment,
        supervisor: start.supervisor,
        runtime_json: start.runtime_json,
    }
}

/// Schema 9–12's job: recorded before runs, it forms run `None`.
impl From<v12::JobMember> for JobMember {
    fn from(job: v12::JobMember) -> Self {
        JobMember {
            job: job.job,
            rank: job.rank,
            on_job_alarm: job.on_job_alarm,
            run: None,
        }
    }
}

/// The job as schema 9–12 stored it: without the run, which no start of theirs had.
impl From<JobMember> for v12::JobMember {
    fn from(job: JobMember) -> Self {
        v12::JobMember {
            job: job.job,
            rank: job.rank,
            on_job_alarm: job.on_job_alarm,
        }
    }
}

impl From<v2::SoakStart> for SoakStart {
    fn from(start: v2::SoakStart) -> Self {
        SoakStart {
            soak_id: start.soak_id,
            command: start.command,
            cwd: start.cwd,
            progress_dir: start.progress_dir,
            output: start.output,
            parameters: start.parameters,
            require_progress: start.require_progress,
            metadata: start.metadata,
            environment: start.environment,
            supervisor: start.supervisor,
            runtime_json: start.runtime_json,
            ticks_per_second: start.ticks_per_second,
        }
    }
}

impl From<SoakStart> for v2::SoakStart {
    fn from(start: SoakStart) -> Self {
        v2::SoakStart {
            soak_id: start.soak_id,
            command: start.command,
            cwd: start.cwd,
            progress_dir: start.progress_dir,
            output: start.output,
            parameters: start.parameters,
            require_progress: start.require_progress,
            metadata: start.metadata,
            environment: start.environment,
            supervisor: start.supervisor,
            runtime_json: start.runtime_json,
            ticks_per_second: start.ticks_per_second,
        }
    }
}
