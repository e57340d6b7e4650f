//! A soak's record made up from a few figures, for the tests of its views (the crate's own, the
//! browser's): what a view shows of a soak that ran so long, started then, passed or failed,
//! showed progress at such times. Everything else is empty, or zero.

use std::collections::BTreeMap;

use crate::event::soak::{
    ExitInfo, FailureKind, Outcome, OutcomeStatus, SoakEnd, SoakParameters, SoakStart,
};
use crate::log::migrate::SCHEMA_VERSION;
use crate::process::ProcessIdentity;
use crate::projection::{SoakState, SoakSummary};
use crate::read::fold::{Soak, SoakRecords, Verdict};
use crate::read::record::SoakRecord;
use crate::read::rows::Tally;
use crate::read::shown::{Judged, SummaryShown};

/// The figures of a soak made up for a test of its views.
#[derive(Debug, Clone)]
pub struct Sketch {
    pub soak_id: String,
    pub command: Vec<String>,
    /// Unix microseconds.
    pub started_at_us: i64,
    /// How long its command ran (its verdict's); `None` for a soak without a verdict.
    pub duration_seconds: Option<f64>,
    /// `None` for a soak that passed.
    pub failure_kind: Option<FailureKind>,
    pub reason: String,
    pub first_progress_seconds: Option<f64>,
    pub last_progress_seconds: Option<f64>,
    pub sample_interval_seconds: f64,
    pub samples: u64,
    pub sampler_errors: u64,
}

impl Default for Sketch {
    fn default() -> Self {
        Self {
            soak_id: "20261205T120000-ab12".into(),
            command: vec!["python3".into(), "train.py".into()],
            started_at_us: 1_796_479_200_000_000,
            duration_seconds: None,
            failure_kind: None,
            reason: String::new(),
            first_progress_seconds: None,
            last_progress_seconds: None,
            sample_interval_seconds: 0.1,
            samples: 0,
            sampler_errors: 0,
        }
    }
}

impl Sketch {
    /// The record of the soak sketched, as a soak recorded in today's forms.
    pub(crate) fn record(&self) -> SoakRecord {
        let ms = |seconds: f64| (seconds * 1000.0).round() as u64;
        let status = match self.failure_kind {
            Some(_) => OutcomeStatus::Failed,
            None => OutcomeStatus::Passed,
        };
        let supervisor = ProcessIdentity {
            pid: 1,
            start_ticks: 1,
        };
        let end = self.verdict(status);
        let records = SoakRecords {
            summary: SoakSummary {
                soak_id: self.soak_id.clone(),
                command: self.command.clone(),
                output: "artifact.json".into(),
                supervisor,
                started_at_us: self.started_at_us,
                ended_at_us: self
                    .duration_seconds
                    .map(|s| self.started_at_us + (s * 1e6) as i64),
                state: match end {
                    Some(_) => SoakState::Finished(status),
                    None => SoakState::Running,
                },
                failure_kind: self.failure_kind,
                reason: end.as_ref().map(|_| self.reason.clone()),
                samples: self.samples,
                first_seq: 1,
                last_seq: 1,
                artifact_digest: None,
            },
            soak: Soak {
                schema: SCHEMA_VERSION,
                start: SoakStart {
                    soak_id: self.soak_id.clone(),
                    command: self.command.clone(),
                    cwd: "/".into(),
                    progress_dir: "progress".into(),
                    output: "artifact.json".into(),
                    parameters: SoakParameters {
                        sample_interval_ms: ms(self.sample_interval_seconds),
                        startup_timeout_ms: 0,
                        stale_progress_ms: 0,
                        shutdown_grace_ms: 0,
                        min_duration_ms: 0,
                    },
                    require_progress: true,
                    metadata: BTreeMap::new(),
                    environment: BTreeMap::new(),
                    supervisor,
                    runtime_json: "{}".into(),
                    ticks_per_second: 100,
                },
                supervision: None,
                limits: None,
                command_lossy: false,
                job: None,
                samples: Vec::new(),
                end,
            },
            abandoned: None,
            evidence: None,
            job_evidence: None,
            job_alarm: None,
            last_hash: [0; 32],
            host: "host".into(),
        };
        let tally = Tally {
            summary: SummaryShown {
                samples: self.samples,
                sampler_errors: self.sampler_errors,
                ..SummaryShown::default()
            },
            last_progress: Default::default(),
            judged: Some(Judged {
                peak_tree_pss_bytes: None,
                memory_trend: None,
                gpu_health: Vec::new(),
                contention: Vec::new(),
                progress_rate: None,
                limit: None,
            }),
        };
        SoakRecord::of(records, tally, None)
    }

    /// The verdict of the soak sketched, when it has one.
    fn verdict(&self, status: OutcomeStatus) -> Option<Box<Verdict>> {
        let ms = |seconds: f64| (seconds * 1000.0).round() as u64;
        self.duration_seconds.map(|seconds| {
            Box::new(Verdict {
                end: SoakEnd {
                    outcome: Outcome {
                        status,
                        failure_kind: self.failure_kind,
                        reason: self.reason.clone(),
                    },
                    exit: Some(ExitInfo {
                        code: Some(0),
                        signal: None,
                    }),
                    run_ms: ms(seconds),
                    teardown_ms: 0,
                    first_progress_ms: self.first_progress_seconds.map(ms),
                    last_progress_ms: self.last_progress_seconds.map(ms),
                    leaked_processes: Vec::new(),
                    stdout_tail: Vec::new(),
                    stderr_tail: Vec::new(),
                },
                findings: None,
                limit: None,
            })
        })
    }
}
