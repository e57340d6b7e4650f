//! The limits of each daemon name's latest start, as its `daemon_started` recorded them. A
//! daemon whose start recorded none has no row here: it was started without limits.

use crate::event::{DaemonLimits, Envelope, Event, Subject};
use crate::log::tables::ViewTable;
use crate::log::{LogError, Projection, Snapshot, Update};

/// Daemon name → the limits its latest start set.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct LimitsRow(pub DaemonLimits);

pub(crate) struct DaemonLimitsView;

impl DaemonLimitsView {
    /// The limits by daemon name, for the daemons whose start recorded some.
    pub(crate) fn rows(snapshot: &Snapshot) -> Result<Vec<(String, LimitsRow)>, LogError> {
        snapshot.keyed_rows(Self::TABLE)
    }

    /// The limits of the daemon `name`: none for a daemon recorded without them.
    pub(crate) fn limits_of(rows: &[(String, LimitsRow)], name: &str) -> DaemonLimits {
        rows.iter()
            .find(|(n, _)| n == name)
            .map(|(_, LimitsRow(limits))| *limits)
            .unwrap_or_default()
    }
}

impl Projection for DaemonLimitsView {
    type Row = LimitsRow;
    const TABLE: ViewTable = ViewTable::new("daemon_limits");

    fn key(subject: &Subject) -> Option<&str> {
        match subject {
            Subject::Daemon(name) => Some(name),
            _ => None,
        }
    }

    fn apply(_current: Option<&LimitsRow>, envelope: &Envelope) -> Update<LimitsRow> {
        match &envelope.event {
            Event::DaemonStarted {
                limits: Some(limits),
                ..
            } if !limits.is_empty() => Update::Put(LimitsRow(*limits)),
            Event::DaemonStarted { .. } => Update::Delete,
            _ => Update::Keep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Scope, StartedDaemon, TopologyMode};
    use crate::event::{StoredEnvelope, StoredEvent};
    use crate::projection::fold;

    fn started(name: &str, limits: DaemonLimits) -> Envelope {
        StoredEnvelope {
            seq: 1,
            recorded_at_us: 0,
            scope: Scope {
                uid: 1000,
                host: "node".into(),
            },
            subject: Subject::Daemon(name.into()),
            event: StoredEvent::from(Event::DaemonStarted {
                record: StartedDaemon {
                    name: name.into(),
                    uid: 1000,
                    host: "node".into(),
                    topology_mode: TopologyMode::SingleGpu,
                    gpu_uuids: vec!["GPU-aaaa".into()],
                    pipe_directory: "/tmp/p".into(),
                    log_directory: "/tmp/l".into(),
                    pid: 10,
                    process_start_ticks: 7,
                    created_at: 0.0,
                },
                foreground: false,
                job: None,
                limits: Some(limits),
            }),
        }
        .upcast()
        .unwrap()
    }

    #[test]
    fn a_daemons_limits_are_those_its_latest_start_recorded() {
        let set = DaemonLimits {
            active_thread_percentage: Some(25.0),
            pinned_memory_limit: Some(2 << 30),
        };
        let rows: Vec<(String, LimitsRow)> = fold(
            &DaemonLimitsView,
            &[
                started("a", set),
                started("b", set),
                started("b", DaemonLimits::default()),
            ],
        )
        .unwrap()
        .into_iter()
        .collect();
        assert_eq!(DaemonLimitsView::limits_of(&rows, "a"), set);
        assert_eq!(
            DaemonLimitsView::limits_of(&rows, "b"),
            DaemonLimits::default()
        );
        assert_eq!(
            DaemonLimitsView::limits_of(&rows, "never"),
            DaemonLimits::default()
        );
    }
}
