//! Soak summaries: one row a soak, from its start to its verdict — and, once its records are
//! archived, as its `soak_archived` event kept it.

use serde::{Deserialize, Serialize};

use crate::event::soak::{ArchivedSoak, FailureKind, OutcomeStatus};
use crate::event::{Envelope, Event, Subject};
use crate::log::tables::ViewTable;
use crate::log::{LogError, Projection, Snapshot, Update};
use crate::process::ProcessIdentity;

/// Where a soak stands. A `Running` soak whose supervisor is gone is settled as abandoned by
/// `soak::abandon`, which records `soak_abandoned`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SoakState {
    Running,
    Finished(OutcomeStatus),
}

impl SoakState {
    /// `running`, or the verdict's status: how every command and the artifact spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            SoakState::Running => "running",
            SoakState::Finished(status) => status.as_str(),
        }
    }

    /// How its end is known, as every view names it (`ended`): `recorded` by its verdict,
    /// `unknown` for an abandoned soak (its supervisor died unseen after its last sample, whose
    /// time stands for its end); `None` while it runs.
    pub fn end(self) -> Option<&'static str> {
        match self {
            SoakState::Running => None,
            SoakState::Finished(OutcomeStatus::Abandoned) => Some("unknown"),
            SoakState::Finished(_) => Some("recorded"),
        }
    }
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

impl SoakSummary {
    /// The row of soak `id` as its `soak_archived` event kept it: what it was when archived.
    fn kept(id: &str, soak: &ArchivedSoak) -> Self {
        Self {
            soak_id: id.to_owned(),
            command: soak.command.clone(),
            output: soak.output.clone(),
            supervisor: soak.supervisor,
            started_at_us: soak.started_at_us,
            ended_at_us: soak.ended_at_us,
            state: SoakState::Finished(soak.status),
            failure_kind: soak.failure_kind,
            reason: soak.reason.clone(),
            samples: soak.samples,
            first_seq: soak.first_seq,
            last_seq: soak.last_seq,
            artifact_digest: soak.artifact_digest.clone(),
        }
    }

    /// What the live log keeps of this (finished) soak once its records are archived: this
    /// row, and how long its command ran (`None` for an abandoned one). `None` while it runs.
    pub(crate) fn to_keep(&self, run_ms: Option<u64>) -> Option<ArchivedSoak> {
        let SoakState::Finished(status) = self.state else {
            return None;
        };
        Some(ArchivedSoak {
            command: self.command.clone(),
            output: self.output.clone(),
            supervisor: self.supervisor,
            started_at_us: self.started_at_us,
            ended_at_us: self.ended_at_us,
            status,
            failure_kind: self.failure_kind,
            reason: self.reason.clone(),
            samples: self.samples,
            first_seq: self.first_seq,
            last_seq: self.last_seq,
            artifact_digest: self.artifact_digest.clone(),
            run_ms,
        })
    }
}

pub(crate) struct Soaks;

impl Soaks {
    /// Every soak, by id.
    pub(crate) fn rows(snapshot: &Snapshot) -> Result<Vec<SoakSummary>, LogError> {
        snapshot.rows(Self::TABLE)
    }

    /// The soak `id` names: its full id, a unique prefix of one, or `latest` (the most recently
    /// started).
    pub(crate) fn find(snapshot: &Snapshot, id: &str) -> Result<SoakMatch, LogError> {
        Ok(SoakMatch::among(Self::rows(snapshot)?, id))
    }
}

/// What a soak id, as a person types it, names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SoakMatch {
    One(Box<SoakSummary>),
    None,
    /// A prefix of several ids: all of them, oldest first.
    Ambiguous(Vec<String>),
}

impl SoakMatch {
    fn among(mut soaks: Vec<SoakSummary>, id: &str) -> Self {
        soaks.sort_by_key(|s| s.first_seq);
        if id == "latest" {
            return soaks
                .pop()
                .map_or(SoakMatch::None, |s| SoakMatch::One(Box::new(s)));
        }
        if let Some(exact) = soaks.iter().position(|s| s.soak_id == id) {
            return SoakMatch::One(Box::new(soaks.swap_remove(exact)));
        }
        // A prefix of the id, else of its random suffix (`ff95` of `20261203T183607-ff95`): the
        // part people remember.
        let prefix = |s: &SoakSummary| s.soak_id.starts_with(id);
        let suffix = |s: &SoakSummary| {
            s.soak_id
                .rsplit_once('-')
                .is_some_and(|(_, random)| random.starts_with(id))
        };
        let by_prefix = soaks.iter().any(prefix);
        let mut matching: Vec<SoakSummary> = soaks
            .into_iter()
            .filter(|s| !id.is_empty() && if by_prefix { prefix(s) } else { suffix(s) })
            .collect();
        match matching.len() {
            0 => SoakMatch::None,
            1 => SoakMatch::One(Box::new(matching.remove(0))),
            _ => SoakMatch::Ambiguous(matching.into_iter().map(|s| s.soak_id).collect()),
        }
    }
}

impl Projection for Soaks {
    type Row = SoakSummary;
    const TABLE: ViewTable = ViewTable::new("soaks");

    fn key(subject: &Subject) -> Option<&str> {
        match subject {
            Subject::Soak(id) => Some(id),
            _ => None,
        }
    }

    fn apply(current: Option<&SoakSummary>, envelope: &Envelope) -> Update<SoakSummary> {
        // The soak's records left the live log; its row is what the event kept of it.
        if let (Event::SoakArchived(archived), Subject::Soak(id)) =
            (&envelope.event, &envelope.subject)
        {
            return Update::Put(SoakSummary::kept(id, &archived.soak));
        }
        if let Event::SoakStarted { start, .. } = &envelope.event {
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
        if Self::advance(&mut next, envelope) {
            Update::Put(next)
        } else {
            Update::Keep
        }
    }
}

impl Soaks {
    /// What [`Soaks::apply`] does to a started soak's row for any event but a start, in place:
    /// whether the event changed it (belongs to the soak). A caller folding many events (an
    /// export) need not copy the row for each.
    pub(crate) fn advance(summary: &mut SoakSummary, envelope: &Envelope) -> bool {
        if let Event::SoakFinished { end, .. } = &envelope.event {
            let outcome = &end.outcome;
            summary.state = SoakState::Finished(outcome.status);
            summary.failure_kind = outcome.failure_kind;
            summary.reason = Some(outcome.reason.clone());
            summary.ended_at_us = Some(envelope.recorded_at_us);
        } else {
            match &envelope.event {
                Event::SoakSampled { .. } => summary.samples += 1,
                Event::SoakEvidenceCaptured(_) | Event::SoakJobAlarmSeen(_) => {}
                Event::SoakAbandoned { reason, .. } => {
                    summary.state = SoakState::Finished(OutcomeStatus::Abandoned);
                    summary.reason = Some(reason.clone());
                    summary.ended_at_us = Some(envelope.recorded_at_us);
                }
                Event::ArtifactWritten { digest, .. } => {
                    summary.artifact_digest = Some(digest.clone());
                }
                _ => return false,
            }
        }
        summary.last_seq = envelope.seq;
        true
    }

    /// Whether `event` starts a soak.
    pub(crate) fn starts(event: &Event) -> bool {
        matches!(event, Event::SoakStarted { .. })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::event::Scope;
    use crate::event::soak::{Outcome, Sample, SoakEnd, SoakParameters, SoakStart};
    use crate::event::{StoredEnvelope, StoredEvent};
    use crate::projection::fold;

    const SUPERVISOR: ProcessIdentity = ProcessIdentity {
        pid: 99,
        start_ticks: 5,
    };

    fn envelope(seq: u64, id: &str, event: impl Into<StoredEvent>) -> Envelope {
        StoredEnvelope {
            seq,
            recorded_at_us: seq as i64 * 1_000_000,
            scope: Scope {
                uid: 1000,
                host: "node".into(),
            },
            subject: Subject::Soak(id.into()),
            event: event.into(),
        }
        .upcast()
        .unwrap()
    }

    fn started(id: &str) -> Event {
        let start = Box::new(SoakStart {
            soak_id: id.into(),
            command: vec!["python3".into(), "train.py".into()],
            cwd: "/work".into(),
            progress_dir: "/work/progress".into(),
            output: "/work/soak.json".into(),
            parameters: SoakParameters {
                sample_interval_ms: 1000,
                startup_timeout_ms: 10_000,
                stale_progress_ms: 5000,
                shutdown_grace_ms: 1000,
                min_duration_ms: 0,
            },
            require_progress: true,
            metadata: BTreeMap::new(),
            environment: BTreeMap::new(),
            supervisor: SUPERVISOR,
            runtime_json: "{}".into(),
            ticks_per_second: 100,
        });
        Event::SoakStarted {
            start,
            supervision: None,
            limits: None,
            job: None,
            command_lossy: false,
        }
    }

    fn sampled(index: u64) -> Event {
        let sample = Box::new(Sample {
            index,
            elapsed_ms: index * 1000,
            after_exit: false,
            processes: Vec::new(),
            reaped_cpu_ticks: 0,
            gpus: None,
            progress: Default::default(),
            sampler_cost_us: 10,
            errors: Vec::new(),
        });
        Event::SoakSampled {
            sample,
            measures: None,
            progress: None,
        }
    }

    fn finished(status: OutcomeStatus, kind: Option<FailureKind>) -> Event {
        let end = SoakEnd {
            outcome: Outcome {
                status,
                failure_kind: kind,
                reason: "because".into(),
            },
            exit: None,
            run_ms: 3000,
            teardown_ms: 10,
            first_progress_ms: None,
            last_progress_ms: None,
            leaked_processes: Vec::new(),
            stdout_tail: Vec::new(),
            stderr_tail: Vec::new(),
        };
        Event::finished(end, Default::default(), None)
    }

    #[test]
    fn given_a_start_and_samples_the_soak_is_running_and_counts_them() {
        let events = [
            envelope(3, "s", started("s")),
            envelope(4, "s", sampled(0)),
            envelope(5, "s", sampled(1)),
        ];
        let row = &fold(&Soaks, &events).unwrap()["s"];
        assert_eq!(row.state, SoakState::Running);
        assert_eq!(row.state.as_str(), "running");
        assert_eq!(row.state.end(), None, "no end yet");
        assert_eq!((row.samples, row.first_seq, row.last_seq), (2, 3, 5));
        assert_eq!(row.started_at_us, 3_000_000);
        assert_eq!(row.supervisor, SUPERVISOR);
        assert_eq!(row.ended_at_us, None);
    }

    #[test]
    fn given_a_verdict_and_an_artifact_the_soak_is_finished_with_its_digest() {
        let events = [
            envelope(1, "s", started("s")),
            envelope(2, "s", sampled(0)),
            envelope(
                3,
                "s",
                finished(OutcomeStatus::Failed, Some(FailureKind::StaleProgress)),
            ),
            envelope(
                4,
                "s",
                Event::ArtifactWritten {
                    path: "/work/soak.json".into(),
                    digest: "abc".into(),
                    bytes: 10,
                },
            ),
        ];
        let row = &fold(&Soaks, &events).unwrap()["s"];
        assert_eq!(row.state, SoakState::Finished(OutcomeStatus::Failed));
        assert_eq!(row.state.as_str(), "failed");
        assert_eq!(row.state.end(), Some("recorded"));
        assert_eq!(row.failure_kind, Some(FailureKind::StaleProgress));
        assert_eq!(row.reason.as_deref(), Some("because"));
        assert_eq!(row.ended_at_us, Some(3_000_000));
        assert_eq!(row.artifact_digest.as_deref(), Some("abc"));
        assert_eq!(row.last_seq, 4);
    }

    #[test]
    fn given_an_abandonment_the_soak_is_abandoned_with_the_reason() {
        let events = [
            envelope(1, "s", started("s")),
            envelope(
                2,
                "s",
                Event::SoakAbandoned {
                    supervisor: SUPERVISOR,
                    reason: "gone".into(),
                },
            ),
        ];
        let row = &fold(&Soaks, &events).unwrap()["s"];
        assert_eq!(row.state.as_str(), "abandoned");
        assert_eq!(row.state.end(), Some("unknown"));
        assert_eq!(row.reason.as_deref(), Some("gone"));
        assert_eq!(row.failure_kind, None);
    }

    #[test]
    fn events_of_a_soak_whose_start_is_not_in_the_log_change_nothing() {
        let events = [
            envelope(1, "s", sampled(0)),
            envelope(2, "s", finished(OutcomeStatus::Passed, None)),
        ];
        assert!(fold(&Soaks, &events).unwrap().is_empty());
    }

    #[test]
    fn soaks_are_kept_apart() {
        let events = [
            envelope(1, "a", started("a")),
            envelope(2, "b", started("b")),
            envelope(3, "b", finished(OutcomeStatus::Passed, None)),
        ];
        let rows = fold(&Soaks, &events).unwrap();
        assert_eq!(rows["a"].state, SoakState::Running);
        assert_eq!(rows["b"].state, SoakState::Finished(OutcomeStatus::Passed));
    }

    #[test]
    fn a_soak_is_named_by_its_id_a_unique_prefix_its_suffix_or_latest() {
        let events = [
            envelope(1, "20261202T100000-aaaa", started("20261202T100000-aaaa")),
            envelope(2, "20261202T110000-bbbb", started("20261202T110000-bbbb")),
            envelope(3, "20261202T110000-bbbc", started("20261202T110000-bbbc")),
        ];
        let rows: Vec<SoakSummary> = fold(&Soaks, &events).unwrap().into_values().collect();
        let found = |id: &str| match SoakMatch::among(rows.clone(), id) {
            SoakMatch::One(s) => Ok(s.soak_id),
            SoakMatch::None => Err(Vec::new()),
            SoakMatch::Ambiguous(ids) => Err(ids),
        };
        assert_eq!(
            found("20261202T100000-aaaa").unwrap(),
            "20261202T100000-aaaa"
        );
        assert_eq!(found("20261202T10").unwrap(), "20261202T100000-aaaa");
        assert_eq!(found("latest").unwrap(), "20261202T110000-bbbc");
        assert_eq!(
            found("20261202T11").unwrap_err(),
            ["20261202T110000-bbbb", "20261202T110000-bbbc"]
        );
        assert_eq!(found("2025").unwrap_err(), Vec::<String>::new());
        assert_eq!(
            found("aaaa").unwrap(),
            "20261202T100000-aaaa",
            "by its random part"
        );
        assert_eq!(found("bbbc").unwrap(), "20261202T110000-bbbc");
        assert_eq!(
            found("bbb").unwrap_err(),
            ["20261202T110000-bbbb", "20261202T110000-bbbc"]
        );
        assert_eq!(found("").unwrap_err(), Vec::<String>::new());
        assert!(matches!(
            SoakMatch::among(Vec::new(), "latest"),
            SoakMatch::None
        ));
    }
}
