//! A soak's events folded once, upcast: its start, samples, verdict, evidence and job alarm in
//! today's shapes, with the schema of the form its start was recorded in — what every reader of
//! a soak starts from ([`collect`] gathers them whole; the streamed artifact, `soak show`, the
//! report and the CSV take them as they go by, through [`walk`] and [`Folded`]).

use crate::event::soak::{self, Measures, ProgressNoted, Sample};
use crate::event::{Event, Subject};
use crate::log::chain::Hash;
use crate::log::{LogError, Projection, Snapshot, Update};
use crate::process::ProcessIdentity;
use crate::projection::{SoakState, SoakSummary, Soaks};

/// A sample with what was measured beside it, where its form measured it, and the progress its
/// supervisor decided at it, where its form recorded that (schema 12 on).
pub type Measured = (Sample, Option<Measures>, Option<ProgressNoted>);

/// A soak as its events tell it, upcast: its start, samples and verdict in today's shape, and
/// the schema of the form its start was recorded in, which decides the artifact it renders.
#[derive(Debug, Clone, PartialEq)]
pub struct Soak {
    /// The schema of the form its start was recorded in (as its envelope says).
    pub schema: u32,
    pub start: soak::SoakStart,
    pub supervision: Option<soak::Supervision>,
    pub limits: Option<soak::Limits>,
    /// An argument of its command is not UTF-8: `start.command` holds it lossily (schema 11).
    pub command_lossy: bool,
    /// The job it is a rank of (schema 9), and the run it joined (schema 13).
    pub job: Option<soak::JobMember>,
    /// Every sample, when gathered whole ([`collect`]); the streamed artifact turns them into
    /// rows as they go by instead.
    pub samples: Vec<Measured>,
    pub end: Option<Box<Verdict>>,
}

impl Soak {
    /// What its schema recorded, decided from the schema its start was stored in: the one
    /// place a reader asks how old a soak's record is.
    pub(crate) fn recorded(&self) -> Recorded {
        let form = match self.schema {
            ..=1 => Form::First,
            2..=4 => Form::Second,
            5 => Form::Third,
            _ => Form::Current,
        };
        Recorded {
            form,
            job: self.schema >= 9,
            beats: self.schema >= 10,
            lossy: self.schema >= 11,
            runs: self.schema >= 13,
        }
    }
}

/// The artifact a soak renders, by the forms it was recorded in: the one this unilab writes,
/// `unilab.soak.artifact/4`, or the frozen one its own version wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Form {
    /// `/1`: schema 1's forms (no CPU share, the host's GPU figures, no teardown time).
    First,
    /// `/2`: schema 2–4's (a list of GPUs a row, `require_progress`).
    Second,
    /// `/3`: schema 5's (the evidence, the GPUs' release, the verdict's findings, how the tree
    /// was supervised).
    Third,
    /// `/4`: schema 6's on (what the summary judges of the resources, the budgets).
    Current,
}

/// What a soak's record holds, by the schema its start was stored in; what it lacks, a reader
/// reads as unknown — never as zero or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recorded {
    pub form: Form,
    /// Schema 9 on: its job (each process's rank, the MPS clients ended, the capture at the
    /// job's alarm and the alarm that failed it).
    pub job: bool,
    /// Schema 10 on: the trainer's beats (each sample's, the run's steps and goodput, the step
    /// limits).
    pub beats: bool,
    /// Schema 11 on: whether its command line is recorded lossily.
    pub lossy: bool,
    /// Schema 13 on: the run of its job it joined.
    pub runs: bool,
}

/// A soak's verdict: how it ended, what it found about the tree's end, the budget that failed
/// it.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub end: soak::SoakEnd,
    pub findings: Option<soak::Findings>,
    pub limit: Option<soak::ResourceLimit>,
}

/// The supervisor vanished before a verdict: `soak_abandoned`.
#[derive(Debug, Clone, PartialEq)]
pub struct Abandonment {
    pub supervisor: ProcessIdentity,
    pub reason: String,
}

/// Everything the artifact is made of: the soak's events up to and including its verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct SoakRecords {
    /// The `soaks` projection folded over exactly these events: state, times and sequences.
    pub summary: SoakSummary,
    pub soak: Soak,
    pub abandoned: Option<Abandonment>,
    /// What the tree was doing when it was to be signalled.
    pub evidence: Option<Box<soak::Evidence>>,
    /// What the tree was doing when another rank of its job raised the alarm, if one did.
    pub job_evidence: Option<Box<soak::Evidence>>,
    /// The job's alarm, as this soak saw it, if it saw one.
    pub job_alarm: Option<Box<soak::JobAlarmSeen>>,
    /// The hash of the last of these events, which ties the artifact to the chain.
    pub last_hash: Hash,
    /// The host the log is scoped to.
    pub host: String,
}

impl SoakRecords {
    /// These records without their samples (kept, when gathered whole, for the rows alone).
    pub(crate) fn without_samples(&self) -> Self {
        Self {
            summary: self.summary.clone(),
            soak: Soak {
                schema: self.soak.schema,
                start: self.soak.start.clone(),
                supervision: self.soak.supervision.clone(),
                limits: self.soak.limits.clone(),
                command_lossy: self.soak.command_lossy,
                job: self.soak.job.clone(),
                samples: Vec::new(),
                end: self.soak.end.clone(),
            },
            abandoned: self.abandoned.clone(),
            evidence: self.evidence.clone(),
            job_evidence: self.job_evidence.clone(),
            job_alarm: self.job_alarm.clone(),
            last_hash: self.last_hash,
            host: self.host.clone(),
        }
    }
}

/// What [`walk`] found of a soak besides its events.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Walked {
    /// The `soaks` projection folded over exactly the soak's events.
    pub summary: SoakSummary,
    /// The hash of the last of them.
    pub last_hash: Hash,
    /// The host of the log they are in.
    pub host: String,
}

/// A soak's events folded as they go by: what [`collect`] and the streamed artifact
/// ([`stream`](super::stream)) take from them alike. Samples are handed back, to be kept or turned into rows
/// by the caller.
#[derive(Debug, Default)]
pub(crate) struct Folded {
    pub soak: Option<Soak>,
    pub abandoned: Option<Abandonment>,
    pub evidence: Option<Box<soak::Evidence>>,
    pub job_evidence: Option<Box<soak::Evidence>>,
    pub job_alarm: Option<Box<soak::JobAlarmSeen>>,
}

/// What one event did to a [`Folded`] soak.
pub(crate) enum Fold {
    /// A start began the soak afresh: what came before is not part of it.
    Restarted,
    /// A sample, with what was measured beside it and the progress decided at it.
    Sample(Box<Sample>, Option<Box<Measures>>, Option<ProgressNoted>),
    /// Anything else.
    Folded,
}

impl Folded {
    /// Folds `event`, stored in the form of `schema`.
    pub(crate) fn fold(&mut self, event: Event, schema: u32) -> Fold {
        match (event, &mut self.soak) {
            (
                Event::SoakStarted {
                    start,
                    supervision,
                    limits,
                    command_lossy,
                    job,
                },
                _,
            ) => {
                self.soak = Some(Soak {
                    schema,
                    start: *start,
                    supervision,
                    limits,
                    command_lossy,
                    job,
                    samples: Vec::new(),
                    end: None,
                });
                self.evidence = None;
                self.job_evidence = None;
                self.job_alarm = None;
                return Fold::Restarted;
            }
            (
                Event::SoakSampled {
                    sample,
                    measures,
                    progress,
                },
                Some(_),
            ) => {
                return Fold::Sample(sample, measures, progress);
            }
            (
                Event::SoakFinished {
                    end,
                    findings,
                    limit,
                    ..
                },
                Some(soak),
            ) => {
                soak.end = Some(Box::new(Verdict {
                    end: *end,
                    findings: findings.map(|f| *f),
                    limit,
                }));
            }
            (Event::SoakEvidenceCaptured(captured), Some(_)) => {
                if captured.trigger == soak::FailureKind::JobAlarm {
                    self.job_evidence = Some(captured);
                } else {
                    self.evidence = Some(captured);
                }
            }
            // The first alarm seen is the job's (one alarm a job).
            (Event::SoakJobAlarmSeen(seen), Some(_)) if self.job_alarm.is_none() => {
                self.job_alarm = Some(seen);
            }
            (Event::SoakAbandoned { supervisor, reason }, _) => {
                self.abandoned = Some(Abandonment { supervisor, reason });
            }
            _ => {}
        }
        Fold::Folded
    }

    /// Keeps a sample [`fold`](Self::fold) handed back.
    pub(crate) fn keep(&mut self, measured: Measured) {
        if let Some(soak) = &mut self.soak {
            soak.samples.push(measured);
        }
    }

    /// The records, with what [`walk`] found of the soak; `None` for an unknown soak.
    pub(crate) fn records(self, walked: Option<Walked>) -> Option<SoakRecords> {
        let (walked, soak) = (walked?, self.soak?);
        Some(SoakRecords {
            summary: walked.summary,
            soak,
            abandoned: self.abandoned,
            evidence: self.evidence,
            job_evidence: self.job_evidence,
            job_alarm: self.job_alarm,
            last_hash: walked.last_hash,
            host: walked.host,
        })
    }
}

/// Gathers a soak's events, up to and including its verdict; `None` for an unknown soak.
pub fn collect(snapshot: &Snapshot, soak_id: &str) -> Result<Option<SoakRecords>, LogError> {
    let mut folded = Folded::default();
    let walked = walk(snapshot, soak_id, |event, schema, _| {
        if let Fold::Sample(sample, measures, progress) = folded.fold(event, schema) {
            folded.keep((*sample, measures.map(|m| *m), progress));
        }
        Ok::<(), LogError>(())
    })?;
    Ok(folded.records(walked))
}

/// Calls `visit` with each event of a soak, in order, up to and including its verdict, in one
/// scan of the log; then returns the `soaks` projection folded over exactly those events (an
/// abandoned soak's end at its last sample, as every view has it:
/// [`crate::soak::ended::end_at_last_sample`]), the hash of the last of them and the log's
/// host (`None` for an unknown soak). Which events belong to the soak is the projection's rule
/// ([`Soaks::apply`]), applied here too. `visit` is given each event with the schema of the form
/// it is stored in and when it was recorded (Unix microseconds).
pub(crate) fn walk<E: From<LogError>>(
    snapshot: &Snapshot,
    soak_id: &str,
    mut visit: impl FnMut(Event, u32, i64) -> Result<(), E>,
) -> Result<Option<Walked>, E> {
    let mut summary: Option<SoakSummary> = None;
    let mut last_hash = None;
    let mut host = None;
    // When its last sample was recorded: an abandoned soak's end.
    let mut last_sample_at_us = None;
    snapshot.scan_records(
        &Subject::Soak(soak_id.to_owned()),
        1,
        |record| -> Result<bool, E> {
            if summary
                .as_ref()
                .is_some_and(|s| s.state != SoakState::Running)
            {
                return Ok(false);
            }
            match &mut summary {
                // A sample (most events) changes the row in place: no copy an event.
                Some(current) if !Soaks::starts(&record.envelope.event) => {
                    if !Soaks::advance(current, &record.envelope) {
                        return Ok(true);
                    }
                }
                _ => match Soaks::apply(summary.as_ref(), &record.envelope) {
                    Update::Put(next) => {
                        summary = Some(next);
                        last_sample_at_us = None;
                    }
                    _ => return Ok(true),
                },
            }
            if let Event::SoakSampled { .. } = record.envelope.event {
                last_sample_at_us = Some(record.envelope.recorded_at_us);
            }
            last_hash = Some(record.hash);
            if host.is_none() {
                host = Some(record.envelope.scope.host.clone());
            }
            let envelope = record.envelope;
            visit(envelope.event, envelope.schema, envelope.recorded_at_us)?;
            Ok(true)
        },
    )?;
    Ok(match (summary, last_hash, host) {
        (Some(mut summary), Some(last_hash), Some(host)) => Some(Walked {
            summary: {
                crate::soak::ended::end_at_last_sample(&mut summary, last_sample_at_us);
                summary
            },
            last_hash,
            host,
        }),
        _ => None,
    })
}
