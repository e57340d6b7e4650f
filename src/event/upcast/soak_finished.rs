//! `soak_finished`'s forms, one function a form (named after its variant), and the way back.
//!
//! Schema 1's verdict lacks what schema 2 added: no teardown apart from the run (its
//! `duration_ms` is the run's). The findings (schema 5) and the limit that failed the soak (6)
//! are `None` where a form did not record them; schema 5–9's findings have no heartbeat
//! ([`super::v9`]); schema 10–14's heartbeat errors do not count the beats not taken as they
//! came nor the reads without a watch ([`v14::HeartbeatErrors`]): those are `None`.

use crate::event::Event;
use crate::event::soak::{Findings, HeartbeatErrors, ResourceLimit, RunBeats, SoakEnd};
use crate::event::stored::{StoredEvent, v1, v2, v9, v14};

pub(super) fn v1(end: v1::SoakEnd) -> Event {
    Event::SoakFinished {
        end: Box::new(end_of_v1(end)),
        findings: None,
        limit: None,
    }
}

pub(super) fn v4(end: v2::SoakEnd) -> Event {
    Event::SoakFinished {
        end: Box::new(end.into()),
        findings: None,
        limit: None,
    }
}

pub(super) fn v5(end: v2::SoakEnd, findings: v9::Findings) -> Event {
    Event::SoakFinished {
        end: Box::new(end.into()),
        findings: Some(Box::new(findings.into())),
        limit: None,
    }
}

pub(super) fn v9(end: v2::SoakEnd, findings: v9::Findings, limit: Option<ResourceLimit>) -> Event {
    Event::SoakFinished {
        end: Box::new(end.into()),
        findings: Some(Box::new(findings.into())),
        limit,
    }
}

pub(super) fn v14(
    end: v2::SoakEnd,
    findings: v14::Findings,
    limit: Option<ResourceLimit>,
) -> Event {
    Event::SoakFinished {
        end: Box::new(end.into()),
        findings: Some(Box::new(findings.into())),
        limit,
    }
}

pub(super) fn current(
    end: v2::SoakEnd,
    findings: Box<Findings>,
    limit: Option<ResourceLimit>,
) -> Event {
    Event::SoakFinished {
        end: Box::new(end.into()),
        findings: Some(findings),
        limit,
    }
}

/// The verdict in the form of `schema` (see [`Event::into_stored`]).
pub(super) fn into_stored(
    end: SoakEnd,
    findings: Option<Box<Findings>>,
    limit: Option<ResourceLimit>,
    schema: u32,
) -> StoredEvent {
    use StoredEvent as S;
    if schema <= 1 {
        return S::SoakFinishedV1(Box::new(end_to_v1(end)));
    }
    // Every form since schema 2 holds schema 2's verdict.
    let end = Box::new(v2::SoakEnd::from(end));
    match schema {
        ..=4 => S::SoakFinishedV4(end),
        5 => S::SoakFinishedV5 {
            end,
            findings: Box::new((*findings.unwrap_or_default()).into()),
        },
        6..=9 => S::SoakFinishedV9 {
            end,
            findings: Box::new((*findings.unwrap_or_default()).into()),
            limit,
        },
        10..=14 => S::SoakFinishedV14 {
            end,
            findings: Box::new((*findings.unwrap_or_default()).into()),
            limit,
        },
        _ => S::SoakFinished {
            end,
            findings: findings.unwrap_or_default(),
            limit,
        },
    }
}

impl From<v14::Findings> for Findings {
    fn from(old: v14::Findings) -> Self {
        Findings {
            child: old.child,
            oom_kills: old.oom_kills,
            unkillable: old.unkillable,
            gpu_release: old.gpu_release,
            heartbeat: old.heartbeat.map(|beats| {
                let v14::RunBeats {
                    steps,
                    untracked,
                    errors,
                    goodput,
                } = *beats;
                Box::new(RunBeats {
                    steps,
                    untracked,
                    errors: HeartbeatErrors {
                        malformed: errors.malformed,
                        oversized: errors.oversized,
                        dropped_bytes: errors.dropped_bytes,
                        truncations: errors.truncations,
                        clock: None,
                        repeats: None,
                        polling_fallbacks: None,
                    },
                    goodput,
                })
            }),
        }
    }
}

/// The findings as schema 10–14 stored them: without the counts they did not keep.
impl From<Findings> for v14::Findings {
    fn from(new: Findings) -> Self {
        v14::Findings {
            child: new.child,
            oom_kills: new.oom_kills,
            unkillable: new.unkillable,
            gpu_release: new.gpu_release,
            heartbeat: new.heartbeat.map(|beats| {
                let RunBeats {
                    steps,
                    untracked,
                    errors,
                    goodput,
                } = *beats;
                Box::new(v14::RunBeats {
                    steps,
                    untracked,
                    errors: v14::HeartbeatErrors {
                        malformed: errors.malformed,
                        oversized: errors.oversized,
                        dropped_bytes: errors.dropped_bytes,
                        truncations: errors.truncations,
                    },
                    goodput,
                })
            }),
        }
    }
}

pub(super) fn end_of_v1(end: v1::SoakEnd) -> SoakEnd {
    SoakEnd {
        outcome: end.outcome,
        exit: end.exit,
        run_ms: end.duration_ms,
        teardown_ms: 0,
        first_progress_ms: end.first_progress_ms,
        last_progress_ms: end.last_progress_ms,
        leaked_processes: end.leaked_processes,
        stdout_tail: end.stdout_tail,
        stderr_tail: end.stderr_tail,
    }
}

fn end_to_v1(end: SoakEnd) -> v1::SoakEnd {
    v1::SoakEnd {
        outcome: end.outcome,
        exit: end.exit,
        duration_ms: end.run_ms,
        first_progress_ms: end.first_progress_ms,
        last_progress_ms: end.last_progress_ms,
        leaked_processes: end.leaked_processes,
        stdout_tail: end.stdout_tail,
        stderr_tail: end.stderr_tail,
    }
}

impl From<v2::SoakEnd> for SoakEnd {
    fn from(end: v2::SoakEnd) -> Self {
        SoakEnd {
            outcome: end.outcome,
            exit: end.exit,
            run_ms: end.run_ms,
            teardown_ms: end.teardown_ms,
            first_progress_ms: end.first_progress_ms,
            last_progress_ms: end.last_progress_ms,
            leaked_processes: end.leaked_processes,
            stdout_tail: end.stdout_tail,
            stderr_tail: end.stderr_tail,
        }
    }
}

impl From<SoakEnd> for v2::SoakEnd {
    fn from(end: SoakEnd) -> Self {
        v2::SoakEnd {
            outcome: end.outcome,
            exit: end.exit,
            run_ms: end.run_ms,
            teardown_ms: end.teardown_ms,
            first_progress_ms: end.first_progress_ms,
            last_progress_ms: end.last_progress_ms,
            leaked_processes: end.leaked_processes,
            stdout_tail: end.stdout_tail,
            stderr_tail: end.stderr_tail,
        }
    }
}
