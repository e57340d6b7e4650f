//! The daemon records: one row for each daemon recorded as started and not yet recorded as
//! stopped, stale or failed.

use crate::event::{Envelope, Event, StartedDaemon, Subject};
use crate::log::tables::ViewTable;
use crate::log::{LogError, Projection, Snapshot, Update};
use crate::process::ProcessIdentity;

/// Daemon name → the payload of its `daemon_started`. A row is the payload as is (a newtype
/// encodes as its one field), so the table's format is the event's.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DaemonRow(pub StartedDaemon);

pub struct Daemons;

impl Daemons {
    /// Every daemon currently recorded as running, by name.
    pub fn rows(snapshot: &Snapshot) -> Result<Vec<DaemonRow>, LogError> {
        snapshot.rows(Self::TABLE)
    }
}

impl Projection for Daemons {
    type Row = DaemonRow;
    const TABLE: ViewTable = ViewTable::new("daemons");

    fn key(subject: &Subject) -> Option<&str> {
        match subject {
            Subject::Daemon(name) => Some(name),
            _ => None,
        }
    }

    /// An end (stopped, stale, failed) removes the row only when it names the row's process: a
    /// failed start that launched nothing, or an end of another process recorded under the same
    /// name, leaves the record of the daemon that runs.
    fn apply(current: Option<&DaemonRow>, envelope: &Envelope) -> Update<DaemonRow> {
        let ends = |process: &ProcessIdentity| {
            current.is_some_and(|row| {
                row.0.pid == process.pid && row.0.process_start_ticks == process.start_ticks
            })
        };
        match &envelope.event {
            Event::DaemonStarted { record, .. } => Update::Put(DaemonRow(record.clone())),
            Event::DaemonStopped { process, .. }
            | Event::DaemonStaleCleaned { process, .. }
            | Event::DaemonStartFailed {
                process: Some(process),
                ..
            } if ends(process) => Update::Delete,
            _ => Update::Keep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Scope, StaleReason, StopMethod, TopologyMode};
    use crate::event::{StoredEnvelope, StoredEvent};
    use crate::projection::fold;

    fn envelope(seq: u64, name: &str, event: impl Into<StoredEvent>) -> Envelope {
        StoredEnvelope {
            seq,
            recorded_at_us: seq as i64,
            scope: Scope {
                uid: 1000,
                host: "node".into(),
            },
            subject: Subject::Daemon(name.into()),
            event: event.into(),
        }
        .upcast()
        .unwrap()
    }

    fn started(name: &str, pid: u32) -> Event {
        Event::DaemonStarted {
            record: StartedDaemon {
                name: name.into(),
                uid: 1000,
                host: "node".into(),
                topology_mode: TopologyMode::SingleGpu,
                gpu_uuids: vec!["GPU-aaaa".into()],
                pipe_directory: format!("/tmp/unilab-1000/mps/{name}"),
                log_directory: format!("/state/mps/{name}/log"),
                pid,
                process_start_ticks: 7,
                created_at: 1.5,
            },
            foreground: false,
            job: None,
            limits: Default::default(),
        }
    }

    const PROCESS: ProcessIdentity = ProcessIdentity {
        pid: 10,
        start_ticks: 7,
    };

    #[test]
    fn given_a_started_daemon_it_holds_its_record() {
        let rows = fold(&Daemons, &[envelope(1, "a", started("a", 10))]).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows["a"].0.pid, 10);
    }

    #[test]
    fn given_a_stop_a_stale_clean_or_a_failed_start_the_record_is_gone() {
        for end in [
            Event::DaemonStopped {
                process: PROCESS,
                method: StopMethod::Quit,
            },
            Event::DaemonStaleCleaned {
                process: PROCESS,
                reason: StaleReason::PidReused,
            },
            Event::DaemonStartFailed {
                reason: "no answer".into(),
                process: Some(PROCESS),
            },
        ] {
            let events = [envelope(1, "a", started("a", 10)), envelope(2, "a", end)];
            assert!(fold(&Daemons, &events).unwrap().is_empty());
        }
    }

    /// A losing concurrent start recorded its failure under the winner's name; the winner's
    /// record must survive it, or unilab would call its own daemon foreign.
    #[test]
    fn given_an_end_of_another_process_the_record_stays() {
        let other = ProcessIdentity {
            pid: 11,
            start_ticks: 7,
        };
        for end in [
            Event::DaemonStartFailed {
                reason: "an instance is already running".into(),
                process: None,
            },
            Event::DaemonStartFailed {
                reason: "no answer".into(),
                process: Some(other),
            },
            Event::DaemonStopped {
                process: other,
                method: StopMethod::Quit,
            },
            Event::DaemonStaleCleaned {
                process: other,
                reason: StaleReason::ProcessGone,
            },
        ] {
            let events = [envelope(1, "a", started("a", 10)), envelope(2, "a", end)];
            let rows = fold(&Daemons, &events).unwrap();
            assert_eq!(rows["a"].0.pid, 10);
        }
    }

    #[test]
    fn given_a_restart_the_newest_record_wins_and_others_are_untouched() {
        let events = [
            envelope(1, "a", started("a", 10)),
            envelope(2, "b", started("b", 20)),
            envelope(3, "a", Event::DaemonVerifiedLive { process: PROCESS }),
            envelope(4, "a", started("a", 11)),
        ];
        let rows = fold(&Daemons, &events).unwrap();
        assert_eq!(rows["a"].0.pid, 11);
        assert_eq!(rows["b"].0.pid, 20);
    }

    #[test]
    fn events_of_other_subjects_are_ignored() {
        let mut event = envelope(1, "a", started("a", 10));
        event.subject = Subject::Soak("a".into());
        assert!(fold(&Daemons, &[event]).unwrap().is_empty());
    }
}
