//! Leases on shared daemons: one row for each daemon that processes use through
//! `mps exec --shared`, from its first lease until it stops, with every holder whose lease has
//! not ended and whether it was started for sharing. A holder that is no longer running keeps
//! nothing alive: whoever finds it gone releases its lease. A daemon that stopped or whose
//! record went stale holds no leases.

use serde::{Deserialize, Serialize};

use crate::event::{Envelope, Event, Subject};
use crate::log::tables::ViewTable;
use crate::log::{LogError, Projection, Snapshot, Update};
use crate::process::ProcessIdentity;

/// One holder of a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Lease {
    pub holder: ProcessIdentity,
    pub job: Option<String>,
    /// When it was acquired, Unix microseconds.
    pub acquired_at_us: i64,
}

/// Daemon name → its holders, in the order they came, from the first lease to the daemon's
/// stop.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct LeaseRow {
    /// The daemon was started for sharing (by `mps exec --shared`), so the end of its last
    /// lease stops it.
    pub shared_start: bool,
    pub holders: Vec<Lease>,
}

pub(crate) struct Leases;

impl Leases {
    /// The leases of `daemon` (none when it has no row).
    pub(crate) fn of(snapshot: &Snapshot, daemon: &str) -> Result<LeaseRow, LogError> {
        Ok(Self::rows(snapshot)?
            .into_iter()
            .find(|(name, _)| name == daemon)
            .map(|(_, row)| row)
            .unwrap_or_default())
    }

    /// Every daemon's leases, by daemon name.
    pub(crate) fn rows(snapshot: &Snapshot) -> Result<Vec<(String, LeaseRow)>, LogError> {
        snapshot.keyed_rows(Self::TABLE)
    }
}

impl Projection for Leases {
    type Row = LeaseRow;
    const TABLE: ViewTable = ViewTable::new("leases");

    fn key(subject: &Subject) -> Option<&str> {
        match subject {
            Subject::Daemon(name) => Some(name),
            _ => None,
        }
    }

    fn apply(current: Option<&LeaseRow>, envelope: &Envelope) -> Update<LeaseRow> {
        match &envelope.event {
            Event::LeaseAcquired {
                holder,
                job,
                started,
            } => {
                let mut row = current.cloned().unwrap_or_default();
                row.shared_start |= *started;
                row.holders.retain(|l| l.holder != *holder);
                row.holders.push(Lease {
                    holder: *holder,
                    job: job.clone(),
                    acquired_at_us: envelope.recorded_at_us,
                });
                Update::Put(row)
            }
            Event::LeaseReleased { holder, .. } => {
                let Some(current) = current else {
                    return Update::Keep;
                };
                let mut row = current.clone();
                row.holders.retain(|l| l.holder != *holder);
                Update::Put(row)
            }
            Event::DaemonStopped { .. } | Event::DaemonStaleCleaned { .. } if current.is_some() => {
                Update::Delete
            }
            _ => Update::Keep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{LeaseEnd, Scope, StopMethod};
    use crate::event::{StoredEnvelope, StoredEvent};
    use crate::projection::fold;

    fn envelope(seq: u64, event: impl Into<StoredEvent>) -> Envelope {
        StoredEnvelope {
            seq,
            recorded_at_us: seq as i64,
            scope: Scope {
                uid: 1000,
                host: "node".into(),
            },
            subject: Subject::Daemon("shared".into()),
            event: event.into(),
        }
        .upcast()
        .unwrap()
    }

    fn holder(pid: u32) -> ProcessIdentity {
        ProcessIdentity {
            pid,
            start_ticks: 7,
        }
    }

    #[test]
    fn holders_come_and_go_and_a_stop_ends_them_all() {
        let acquired = |pid| Event::LeaseAcquired {
            holder: holder(pid),
            job: Some("42".into()),
            started: pid == 10,
        };
        let released = |pid, reason| Event::LeaseReleased {
            holder: holder(pid),
            reason,
        };
        let events = [
            envelope(1, acquired(10)),
            envelope(2, acquired(11)),
            envelope(3, acquired(12)),
            envelope(4, released(11, LeaseEnd::Finished)),
            envelope(5, released(12, LeaseEnd::HolderGone)),
        ];
        let rows = fold(&Leases, &events).unwrap();
        let pids: Vec<u32> = rows["shared"]
            .holders
            .iter()
            .map(|l| l.holder.pid)
            .collect();
        assert_eq!(pids, [10]);
        assert!(rows["shared"].shared_start);
        let mut all = events.to_vec();
        all.push(envelope(6, released(10, LeaseEnd::Finished)));
        let rows = fold(&Leases, &all).unwrap();
        assert!(rows["shared"].holders.is_empty(), "the last release");
        assert!(rows["shared"].shared_start, "kept until the daemon stops");
        let mut stopped = events.to_vec();
        stopped.push(envelope(
            6,
            Event::DaemonStopped {
                process: holder(99),
                method: StopMethod::Quit,
            },
        ));
        assert!(fold(&Leases, &stopped).unwrap().is_empty(), "a stop");
    }
}
