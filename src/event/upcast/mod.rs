//! Old forms upcast once, at load (cqrs-es's `EventUpcaster`): a [`StoredEvent`] of any form
//! becomes the domain [`Event`] of its kind, and the [`Envelope`] keeps the schema of the form
//! it was stored in; a domain event becomes its kind's newest stored form to be appended.
//!
//! The upcast keeps every value an old form holds, so that an event goes back into the form it
//! was read from ([`Event::into_stored`]) exactly — what `history --json` shows of an old record
//! and what a frozen artifact is rendered from. What an old form lacks is `None`, or the value
//! its schema meant where the newest form's field is no `Option`.
//!
//! This file holds the table of which schema introduced each form ([`StoredEvent::schema`])
//! and the two dispatches: a stored form to its upcast, an event to its kind's way back. A kind
//! with more than one form has its file, which says what each of its old forms lacks:
//! [`daemon`] (`daemon_started`, `daemon_starting`), [`soak_started`], [`soak_sampled`],
//! [`soak_finished`], [`soak_evidence_captured`], and [`v9`] for the payloads schema 5–9
//! shared. A kind of one form moves its fields across here.
//!
//! A schema step adds its form to the table and to the upcast's dispatch here, and its upcast
//! and its place in the way back to its kind's file (see `migrations/README.md`).

mod daemon;
mod soak_evidence_captured;
mod soak_finished;
mod soak_sampled;
mod soak_started;
mod v9;

use super::stored::{StoredEnvelope, StoredEvent};
use super::{Envelope, Event};

impl StoredEvent {
    /// The schema version that introduced this form.
    pub(crate) fn schema(&self) -> u32 {
        use StoredEvent as S;
        match self {
            S::TopologyResolved { .. }
            | S::DaemonStartedV3 { .. }
            | S::DaemonVerifiedLive { .. }
            | S::DaemonStartFailed { .. }
            | S::DaemonStaleCleaned { .. }
            | S::DaemonStopped { .. }
            | S::SoakStartedV1(_)
            | S::SoakSampledV1(_)
            | S::SoakFinishedV1(_)
            | S::SoakAbandoned { .. }
            | S::ArtifactWritten { .. } => 1,
            S::SoakStartedV4(_)
            | S::SoakSampledV5(_)
            | S::SoakFinishedV4(_)
            | S::DaemonStartingV3 { .. } => 2,
            S::LeaseAcquired { .. } | S::LeaseReleased { .. } => 3,
            S::DaemonStartedV6 { .. } | S::DaemonStarting { .. } => 4,
            S::SoakEvidenceCapturedV8(_) | S::SoakStartedV5 { .. } | S::SoakFinishedV5 { .. } => 5,
            S::SoakStartedV8 { .. } | S::SoakSampledV9 { .. } | S::SoakFinishedV9 { .. } => 6,
            S::DaemonStarted { .. } => 7,
            S::SoakSampledCompactV9(_) | S::SoakArchived(_) => 8,
            S::SoakStartedV9 { .. } | S::SoakEvidenceCapturedV15(_) | S::SoakJobAlarmSeen(_) => 9,
            S::SoakStartedV10 { .. }
            | S::SoakSampledV11 { .. }
            | S::SoakSampledCompactV11(_)
            | S::SoakFinishedV14 { .. } => 10,
            S::SoakStartedV12 { .. } => 11,
            S::SoakSampled { .. } | S::SoakSampledCompact { .. } => 12,
            S::SoakStarted { .. } => 13,
            S::SoakFinished { .. } => 15,
            S::SoakEvidenceCaptured(_) => 16,
        }
    }

    /// The domain event of this form and the schema of the form; `None` for a compact sample,
    /// which stands for a whole one only with the soak's sample before it: the log unpacks it
    /// against that first.
    #[expect(
        clippy::too_many_lines,
        reason = "one arm a stored form: the whole table in one match the compiler checks is complete"
    )]
    pub(crate) fn upcast(self) -> Option<(Event, u32)> {
        use StoredEvent as S;
        let schema = self.schema();
        let event = match self {
            S::TopologyResolved {
                selector,
                topology_mode,
                gpus,
                cuda_visible_devices,
            } => Event::TopologyResolved {
                selector,
                topology_mode,
                gpus,
                cuda_visible_devices,
            },
            S::DaemonStartedV3 { record, foreground } => daemon::started_v3(record, foreground),
            S::DaemonStartedV6 {
                record,
                foreground,
                job,
            } => daemon::started_v6(record, foreground, job),
            S::DaemonStarted {
                record,
                foreground,
                job,
                limits,
            } => daemon::started(record, foreground, job, limits),
            S::DaemonStartingV3 {
                gpu,
                pipe_directory,
                log_directory,
                starter,
            } => daemon::starting(gpu, pipe_directory, log_directory, starter, None),
            S::DaemonStarting {
                gpu,
                pipe_directory,
                log_directory,
                starter,
                job,
            } => daemon::starting(gpu, pipe_directory, log_directory, starter, Some(job)),
            S::DaemonVerifiedLive { process } => Event::DaemonVerifiedLive { process },
            S::DaemonStartFailed { reason, process } => {
                Event::DaemonStartFailed { reason, process }
            }
            S::DaemonStaleCleaned { process, reason } => {
                Event::DaemonStaleCleaned { process, reason }
            }
            S::DaemonStopped { process, method } => Event::DaemonStopped { process, method },
            S::SoakStartedV1(start) => soak_started::v1(*start),
            S::SoakStartedV4(start) => soak_started::v4(*start),
            S::SoakStartedV5 { start, supervision } => soak_started::v5(*start, supervision),
            S::SoakStartedV8 {
                start,
                supervision,
                limits,
            } => soak_started::v8(*start, supervision, limits),
            S::SoakStartedV9 {
                start,
                supervision,
                limits,
                job,
            } => soak_started::v9(*start, supervision, limits, job),
            S::SoakStartedV10 {
                start,
                supervision,
                limits,
                job,
            } => soak_started::v10(*start, supervision, limits, job),
            S::SoakStartedV12 {
                start,
                supervision,
                limits,
                job,
                command_lossy,
            } => soak_started::v12(*start, supervision, limits, job, command_lossy),
            S::SoakStarted {
                start,
                supervision,
                limits,
                job,
                command_lossy,
            } => soak_started::current(*start, supervision, limits, job, command_lossy),
            S::SoakSampledV1(sample) => soak_sampled::v1(*sample),
            S::SoakSampledV5(sample) => soak_sampled::v5(sample),
            S::SoakSampledV9 { sample, measures } => soak_sampled::v9(sample, *measures),
            S::SoakSampledV11 { sample, measures } => soak_sampled::v11(sample, measures),
            S::SoakSampled {
                sample,
                measures,
                noted,
            } => soak_sampled::current(sample, measures, noted),
            S::SoakSampledCompactV9(_)
            | S::SoakSampledCompactV11(_)
            | S::SoakSampledCompact { .. } => return None,
            S::SoakFinishedV1(end) => soak_finished::v1(*end),
            S::SoakFinishedV4(end) => soak_finished::v4(*end),
            S::SoakFinishedV5 { end, findings } => soak_finished::v5(*end, *findings),
            S::SoakFinishedV9 {
                end,
                findings,
                limit,
            } => soak_finished::v9(*end, *findings, limit),
            S::SoakFinishedV14 {
                end,
                findings,
                limit,
            } => soak_finished::v14(*end, *findings, limit),
            S::SoakFinished {
                end,
                findings,
                limit,
            } => soak_finished::current(*end, findings, limit),
            S::SoakEvidenceCapturedV8(evidence) => Event::SoakEvidenceCaptured(Box::new(
                soak_evidence_captured::evidence_of_v8(*evidence),
            )),
            S::SoakEvidenceCapturedV15(evidence) => Event::SoakEvidenceCaptured(Box::new(
                soak_evidence_captured::evidence_of_v15(*evidence),
            )),
            S::SoakEvidenceCaptured(evidence) => Event::SoakEvidenceCaptured(evidence),
            S::SoakAbandoned { supervisor, reason } => Event::SoakAbandoned { supervisor, reason },
            S::ArtifactWritten {
                path,
                digest,
                bytes,
            } => Event::ArtifactWritten {
                path,
                digest,
                bytes,
            },
            S::LeaseAcquired {
                holder,
                job,
                started,
            } => Event::LeaseAcquired {
                holder,
                job,
                started,
            },
            S::LeaseReleased { holder, reason } => Event::LeaseReleased { holder, reason },
            S::SoakArchived(archived) => Event::SoakArchived(archived),
            S::SoakJobAlarmSeen(seen) => Event::SoakJobAlarmSeen(seen),
        };
        Some((event, schema))
    }
}

impl StoredEnvelope {
    /// The record as readers see it (see [`StoredEvent::upcast`]); `None` for a compact
    /// sample.
    pub(crate) fn upcast(self) -> Option<Envelope> {
        let (event, schema) = self.event.upcast()?;
        Some(Envelope {
            seq: self.seq,
            recorded_at_us: self.recorded_at_us,
            scope: self.scope,
            subject: self.subject,
            event,
            schema,
        })
    }
}

impl Event {
    /// This event in the stored form of `schema` (the newest of its kind's forms introduced by
    /// then): for an event read from the log with the schema its envelope names, exactly what
    /// the record holds. Samples go whole: packing them is the log's.
    pub(crate) fn into_stored(self, schema: u32) -> StoredEvent {
        use StoredEvent as S;
        match self {
            Event::TopologyResolved {
                selector,
                topology_mode,
                gpus,
                cuda_visible_devices,
            } => S::TopologyResolved {
                selector,
                topology_mode,
                gpus,
                cuda_visible_devices,
            },
            Event::DaemonStarted {
                record,
                foreground,
                job,
                limits,
            } => daemon::started_into_stored(record, foreground, job, limits, schema),
            Event::DaemonStarting {
                gpu,
                pipe_directory,
                log_directory,
                starter,
                job,
            } => daemon::starting_into_stored(
                gpu,
                pipe_directory,
                log_directory,
                starter,
                job,
                schema,
            ),
            Event::DaemonVerifiedLive { process } => S::DaemonVerifiedLive { process },
            Event::DaemonStartFailed { reason, process } => {
                S::DaemonStartFailed { reason, process }
            }
            Event::DaemonStaleCleaned { process, reason } => {
                S::DaemonStaleCleaned { process, reason }
            }
            Event::DaemonStopped { process, method } => S::DaemonStopped { process, method },
            Event::SoakStarted {
                start,
                supervision,
                limits,
                job,
                command_lossy,
            } => soak_started::into_stored(*start, supervision, limits, job, command_lossy, schema),
            Event::SoakSampled {
                sample,
                measures,
                progress,
            } => soak_sampled::into_stored(sample, measures, progress, schema),
            Event::SoakFinished {
                end,
                findings,
                limit,
            } => soak_finished::into_stored(*end, findings, limit, schema),
            Event::SoakEvidenceCaptured(evidence) => {
                soak_evidence_captured::into_stored(evidence, schema)
            }
            Event::SoakAbandoned { supervisor, reason } => S::SoakAbandoned { supervisor, reason },
            Event::ArtifactWritten {
                path,
                digest,
                bytes,
            } => S::ArtifactWritten {
                path,
                digest,
                bytes,
            },
            Event::LeaseAcquired {
                holder,
                job,
                started,
            } => S::LeaseAcquired {
                holder,
                job,
                started,
            },
            Event::LeaseReleased { holder, reason } => S::LeaseReleased { holder, reason },
            Event::SoakArchived(archived) => S::SoakArchived(archived),
            Event::SoakJobAlarmSeen(seen) => S::SoakJobAlarmSeen(seen),
        }
    }
}

/// The writer's side: a domain event in its kind's newest form, what an append stores (a field
/// that is `None` stored as its kind's empty value).
impl From<Event> for StoredEvent {
    fn from(event: Event) -> Self {
        event.into_stored(u32::MAX)
    }
}

#[cfg(test)]
mod tests;
