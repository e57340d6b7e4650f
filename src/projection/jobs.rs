//! The Slurm job of each daemon name's latest start, as its `daemon_starting` and
//! `daemon_started` recorded it. A daemon whose start did not record its job has no row here:
//! its name is then the only witness of its job (see [`legacy_job`]).

use crate::event::daemon::legacy_job;
use crate::event::{Envelope, Event, Subject};
use crate::log::tables::ViewTable;
use crate::log::{LogError, Projection, Snapshot, Update};

/// Daemon name → the job its latest start ran in (`None`: outside any job).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct JobRow(pub Option<String>);

pub(crate) struct DaemonJobs;

impl DaemonJobs {
    /// The jobs by daemon name, for the daemons whose start recorded one.
    pub(crate) fn rows(snapshot: &Snapshot) -> Result<Vec<(String, JobRow)>, LogError> {
        snapshot.keyed_rows(Self::TABLE)
    }

    /// The job of the daemon `name`: as recorded, or for a daemon recorded before jobs were,
    /// as its name gives it.
    pub(crate) fn job_of(rows: &[(String, JobRow)], name: &str) -> Option<String> {
        match rows.iter().find(|(n, _)| n == name) {
            Some((_, JobRow(job))) => job.clone(),
            None => legacy_job(name),
        }
    }
}

impl Projection for DaemonJobs {
    type Row = JobRow;
    const TABLE: ViewTable = ViewTable::new("daemon_jobs");

    fn key(subject: &Subject) -> Option<&str> {
        match subject {
            Subject::Daemon(name) => Some(name),
            _ => None,
        }
    }

    fn apply(_current: Option<&JobRow>, envelope: &Envelope) -> Update<JobRow> {
        match &envelope.event {
            Event::DaemonStarting { job: Some(job), .. }
            | Event::DaemonStarted { job: Some(job), .. } => Update::Put(JobRow(job.clone())),
            _ => Update::Keep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Scope;
    use crate::event::{StoredEnvelope, StoredEvent};
    use crate::process::ProcessIdentity;
    use crate::projection::fold;

    fn starting(name: &str, job: Option<&str>) -> Envelope {
        StoredEnvelope {
            seq: 1,
            recorded_at_us: 0,
            scope: Scope {
                uid: 1000,
                host: "node".into(),
            },
            subject: Subject::Daemon(name.into()),
            event: StoredEvent::from(Event::DaemonStarting {
                gpu: "GPU-aaaa".into(),
                pipe_directory: "/tmp/p".into(),
                log_directory: "/tmp/l".into(),
                starter: ProcessIdentity {
                    pid: 5,
                    start_ticks: 9,
                },
                job: Some(job.map(str::to_owned)),
            }),
        }
        .upcast()
        .unwrap()
    }

    #[test]
    fn a_daemons_job_is_what_its_start_recorded_never_its_name() {
        let rows: Vec<(String, JobRow)> = fold(
            &DaemonJobs,
            &[starting("job7-mine", None), starting("train", Some("42"))],
        )
        .unwrap()
        .into_iter()
        .collect();
        assert_eq!(
            DaemonJobs::job_of(&rows, "job7-mine"),
            None,
            "outside a job"
        );
        assert_eq!(DaemonJobs::job_of(&rows, "train").as_deref(), Some("42"));
        // Recorded before jobs were: the name is all there is.
        assert_eq!(
            DaemonJobs::job_of(&rows, "job5-gpu-aaaa").as_deref(),
            Some("5")
        );
        assert_eq!(DaemonJobs::job_of(&rows, "gpu-aaaa"), None);
    }
}
