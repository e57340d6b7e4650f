//! Starts under way: one row for each daemon name whose `daemon_starting` has not yet been
//! followed by its `daemon_started` or `daemon_start_failed`. A row whose starter is gone is a
//! start that was cut short, and names the pipe directory where what it launched would answer.

use crate::event::{Envelope, Event, Subject};
use crate::log::tables::ViewTable;
use crate::log::{LogError, Projection, Snapshot, Update};
use crate::process::ProcessIdentity;

/// Daemon name → the start under way.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct IntentRow {
    pub gpu: String,
    pub pipe_directory: String,
    pub log_directory: String,
    pub starter: ProcessIdentity,
}

pub(crate) struct Intents;

impl Intents {
    /// Every start under way (or cut short), by daemon name.
    pub(crate) fn rows(snapshot: &Snapshot) -> Result<Vec<(String, IntentRow)>, LogError> {
        snapshot.keyed_rows(Self::TABLE)
    }
}

impl Projection for Intents {
    type Row = IntentRow;
    const TABLE: ViewTable = ViewTable::new("starting");

    fn key(subject: &Subject) -> Option<&str> {
        match subject {
            Subject::Daemon(name) => Some(name),
            _ => None,
        }
    }

    fn apply(_current: Option<&IntentRow>, envelope: &Envelope) -> Update<IntentRow> {
        match &envelope.event {
            Event::DaemonStarting {
                gpu,
                pipe_directory,
                log_directory,
                starter,
                ..
            } => Update::Put(IntentRow {
                gpu: gpu.clone(),
                pipe_directory: pipe_directory.clone(),
                log_directory: log_directory.clone(),
                starter: *starter,
            }),
            Event::DaemonStarted { .. } | Event::DaemonStartFailed { .. } => Update::Delete,
            _ => Update::Keep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Scope;
    use crate::event::{StoredEnvelope, StoredEvent};
    use crate::projection::fold;

    fn envelope(seq: u64, event: impl Into<StoredEvent>) -> Envelope {
        StoredEnvelope {
            seq,
            recorded_at_us: 0,
            scope: Scope {
                uid: 1000,
                host: "node".into(),
            },
            subject: Subject::Daemon("a".into()),
            event: event.into(),
        }
        .upcast()
        .unwrap()
    }

    #[test]
    fn a_start_is_under_way_from_its_intent_to_its_outcome() {
        let starting = Event::DaemonStarting {
            job: None,
            gpu: "GPU-aaaa".into(),
            pipe_directory: "/tmp/unilab-1000/mps/a".into(),
            log_directory: "/state/a/log".into(),
            starter: ProcessIdentity {
                pid: 5,
                start_ticks: 9,
            },
        };
        let open = fold(&Intents, &[envelope(1, starting.clone())]).unwrap();
        assert_eq!(open["a"].starter.pid, 5);
        let failed = Event::DaemonStartFailed {
            reason: "cut short".into(),
            process: None,
        };
        assert!(
            fold(&Intents, &[envelope(1, starting), envelope(2, failed)])
                .unwrap()
                .is_empty()
        );
    }
}
