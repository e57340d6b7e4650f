//! Soak summaries: one row a soak, from its start to its verdict.

use redb::TableDefinition;
use serde::{Deserialize, Serialize};

use super::{Projection, Update};
use crate::log::event::{Envelope, Event, Subject};
use crate::log::tables;
use crate::process::ProcessIdentity;
use crate::soak::model::{FailureKind, OutcomeStatus};

/// Where a soak stands. `Running` with a vanished supervisor is reported as abandoned by the
/// soak commands, which then record `soak_abandoned`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SoakState {
    Running,
    Finished(OutcomeStatus),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoakSummary {
    pub soak_id: String,
    pub command: Vec<String>,
    pub output: String,
    pub supervisor: ProcessIdentity,
    pub started_at_us: i64,
    pub ended_at_us: Option<i64>,
    pub state: SoakState,
    pub failure_kind: Option<FailureKind>,
    pub reason: Option<String>,
    pub samples: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    pub artifact_digest: Option<String>,
}

pub struct Soaks;

impl Projection for Soaks {
    type Row = SoakSummary;
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = tables::SOAKS;

    fn key(subject: &Subject) -> Option<&str> {
        match subject {
            Subject::Soak(id) => Some(id),
            _ => None,
        }
    }

    fn apply(current: Option<&SoakSummary>, envelope: &Envelope) -> Update<SoakSummary> {
        if let Event::SoakStarted(start) = &envelope.event {
            return Update::Put(SoakSummary {
                soak_id: start.soak_id.clone(),
                command: start.command.clone(),
                output: start.output.clone(),
                supervisor: start.supervisor,
                started_at_us: envelope.recorded_at_us,
                ended_at_us: None,
                state: SoakState::Running,
                failure_kind: None,
                reason: None,
                samples: 0,
                first_seq: envelope.seq,
                last_seq: envelope.seq,
                artifact_digest: None,
            });
        }
        // Events of a soak whose start is not in the log change nothing.
        let Some(current) = current else {
            return Update::Keep;
        };
        let mut next = current.clone();
        next.last_seq = envelope.seq;
        match &envelope.event {
            Event::SoakSampled(_) => next.samples += 1,
            Event::SoakFinished(end) => {
                next.state = SoakState::Finished(end.outcome.status);
                next.failure_kind = end.outcome.failure_kind;
                next.reason = Some(end.outcome.reason.clone());
                next.ended_at_us = Some(envelope.recorded_at_us);
            }
            Event::SoakAbandoned { reason, .. } => {
                next.state = SoakState::Finished(OutcomeStatus::Abandoned);
                next.reason = Some(reason.clone());
                next.ended_at_us = Some(envelope.recorded_at_us);
            }
            Event::ArtifactWritten { digest, .. } => next.artifact_digest = Some(digest.clone()),
            _ => return Update::Keep,
        }
        Update::Put(next)
    }
}
