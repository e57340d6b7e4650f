//! Schema 10's soak for the frozen fixtures (and schema 11's, the same with a command line
//! recorded lossily, and schema 12's, the same with the progress its supervisor decided at each
//! sample): a trainer that beat (train steps, a checkpoint
//! beaten as it started, an eval with `accuracy` beside `loss`, a sample without beats), judged
//! with `--step-timeout auto` and `--phase-timeout checkpoint=30m`, whose verdict holds its
//! steps, its heartbeat file's errors and its goodput. And schema 13's: a job's soak whose
//! start holds the run it joined; and schema 15's, [`noted_soak`]'s whose verdict counts the
//! beats not taken as they came.

use std::collections::BTreeMap;

use unilab::ProcessIdentity;
use unilab::*;

use super::events::measured_soak;
use super::job_events::job_soak;

/// The beats of sample `index`: `None` for the one during the checkpoint.
fn beats(index: u64) -> Option<SampleBeats> {
    let (phase, numbers) = match index {
        2 => ("checkpoint", vec![("loss", 0.5)]),
        3 => return None,
        4 => ("eval", vec![("accuracy", 0.75), ("loss", 0.375)]),
        _ => ("train", vec![("loss", 0.5 / (index + 1) as f64)]),
    };
    Some(SampleBeats {
        beats: 48 + index as u32,
        step: Some(1_000 + 50 * index),
        phase: Some(phase.into()),
        step_seconds_min: Some(0.09375),
        step_seconds_median: Some(0.1015625),
        step_seconds_max: Some(0.25),
        numbers: numbers
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value))
            .collect(),
    })
}

/// A soak of schema 10's forms, its samples [`measured_soak`]'s with beats.
pub fn heartbeat_soak(id: &str, supervisor: ProcessIdentity) -> Vec<(Subject, StoredEvent)> {
    measured_soak(id, 6, |_| 2, supervisor)
        .into_iter()
        .map(|(subject, event)| (subject, beating(event)))
        .collect()
}

/// A soak of schema 11's start: [`heartbeat_soak`]'s, its command given an argument that is not
/// UTF-8 (`$'\xff\xfe'`), recorded lossily.
pub fn lossy_soak(id: &str, supervisor: ProcessIdentity) -> Vec<(Subject, StoredEvent)> {
    heartbeat_soak(id, supervisor)
        .into_iter()
        .map(|(subject, event)| match event {
            StoredEvent::SoakStartedV10 {
                mut start,
                supervision,
                limits,
                job,
            } => {
                start.command = [
                    "sh",
                    "-c",
                    "printf %s \"$1\" > out",
                    "sh",
                    "\u{fffd}\u{fffd}",
                ]
                .map(str::to_owned)
                .to_vec();
                let event = StoredEvent::SoakStartedV12 {
                    start,
                    supervision,
                    limits,
                    job,
                    command_lossy: true,
                };
                (subject, event)
            }
            event => (subject, event),
        })
        .collect()
}

/// When the soak of [`noted_soak`] was spawned, Unix microseconds.
const NOTED_SPAWN_US: i64 = 1_764_676_900_000_000;

/// The progress decided at sample `index` of [`noted_soak`] (samples every 5 s): none at the
/// first; a beat at each sample with beats, a quarter of a second before it; at the sample
/// without beats (the checkpoint's) none, the last progress kept; at the last a file written
/// 1.5 s before it.
fn noted(index: u64) -> ProgressNoted {
    let at = |ms: u64| (Some(NOTED_SPAWN_US + ms as i64 * 1000), Some(ms));
    let (progress_seen, (last_progress_at_us, last_progress_ms)) = match index {
        0 => (None, (None, None)),
        3 => (None, at(2 * 5_000 - 250)),
        5 => (Some(ProgressSeen::Files), at(5 * 5_000 - 1_500)),
        _ => (Some(ProgressSeen::Beat), at(index * 5_000 - 250)),
    };
    ProgressNoted {
        progress_seen,
        last_progress_at_us,
        last_progress_ms,
    }
}

/// A soak of schema 12's samples: [`heartbeat_soak`]'s, started in schema 11's form, each
/// sample with the progress its supervisor decided ([`noted`]).
pub fn noted_soak(id: &str, supervisor: ProcessIdentity) -> Vec<(Subject, StoredEvent)> {
    heartbeat_soak(id, supervisor)
        .into_iter()
        .map(|(subject, event)| match event {
            StoredEvent::SoakStartedV10 {
                start,
                supervision,
                limits,
                job,
            } => {
                let event = StoredEvent::SoakStartedV12 {
                    start,
                    supervision,
                    limits,
                    job,
                    command_lossy: false,
                };
                (subject, event)
            }
            StoredEvent::SoakSampledV11 { sample, measures } => {
                let noted = Some(noted(sample.index));
                let event = StoredEvent::SoakSampled {
                    sample,
                    measures,
                    noted,
                };
                (subject, event)
            }
            event => (subject, event),
        })
        .collect()
}

/// `event`, of a soak of schema 6's forms, in schema 10's with beats.
fn beating(event: StoredEvent) -> StoredEvent {
    match event {
        StoredEvent::SoakStartedV8 {
            start,
            supervision,
            limits,
        } => StoredEvent::SoakStartedV10 {
            start,
            supervision: Supervision {
                heartbeat: Some(HeartbeatSettings {
                    step_timeout: Some(StepTimeoutSetting::Auto),
                    phase_timeouts: BTreeMap::from([("checkpoint".into(), 1_800_000)]),
                }),
                ..supervision.into()
            },
            limits,
            job: None,
        },
        StoredEvent::SoakSampledV9 { sample, measures } => {
            let mut measures: Measures = (*measures).into();
            measures.heartbeat = beats(sample.index).map(Box::new);
            StoredEvent::SoakSampledV11 {
                sample,
                measures: Box::new(measures),
            }
        }
        StoredEvent::SoakFinishedV9 {
            end,
            findings,
            limit,
        } => {
            let mut findings: Findings = (*findings).into();
            findings.heartbeat = Some(Box::new(RunBeats {
                steps: BTreeMap::from([
                    ("checkpoint".into(), stats(1, 1_050, 1, 2.0, 2.0)),
                    ("eval".into(), stats(52, 1_200, 51, 0.05, 0.0625)),
                    ("train".into(), stats(253, 1_250, 250, 0.1015625, 0.25)),
                ]),
                untracked: 0,
                errors: HeartbeatErrors {
                    malformed: 2,
                    oversized: 1,
                    dropped_bytes: 0,
                    truncations: 0,
                    clock: None,
                    repeats: None,
                    polling_fallbacks: None,
                },
                // The run's 10.5 s.
                goodput: Some(GoodputSplit {
                    productive_seconds: 6.0,
                    startup_seconds: 1.5,
                    checkpoint_seconds: 2.0,
                    eval_seconds: 0.5,
                    stalled_seconds: 0.0,
                    other_seconds: 0.5,
                }),
            }));
            StoredEvent::SoakFinishedV14 {
                end,
                findings: Box::new(findings.into()),
                limit,
            }
        }
        other => other,
    }
}

fn stats(count: u64, last: u64, timed: u64, median: f64, p99: f64) -> StepStats {
    StepStats {
        count,
        last,
        timed,
        median_seconds: Some(median),
        p99_seconds: Some(p99),
    }
}

/// A soak of schema 13's start: [`job_soak`]'s — rank 1 of job `ring`, stopped by rank 2's
/// alarm — its start holding the run it joined, `s0.r0`.
pub fn run_soak(id: &str, supervisor: ProcessIdentity) -> Vec<(Subject, StoredEvent)> {
    job_soak(id, supervisor)
        .into_iter()
        .map(|(subject, event)| match event {
            StoredEvent::SoakStartedV9 {
                start,
                supervision,
                limits,
                job,
            } => {
                let event = StoredEvent::SoakStarted {
                    start,
                    supervision: supervision.into(),
                    limits,
                    job: job.map(|job| unilab::JobMember {
                        job: job.job,
                        rank: job.rank,
                        on_job_alarm: job.on_job_alarm,
                        run: Some("s0.r0".into()),
                    }),
                    command_lossy: false,
                };
                (subject, event)
            }
            event => (subject, event),
        })
        .collect()
}

/// A soak of schema 15's verdict: [`noted_soak`]'s, started in schema 13's form, its verdict
/// counting 3 beats whose `t` disagreed with their arrival, 7 that repeated the beat before,
/// and 40 beats of phases past the first 16.
pub fn counted_soak(id: &str, supervisor: ProcessIdentity) -> Vec<(Subject, StoredEvent)> {
    noted_soak(id, supervisor)
        .into_iter()
        .map(|(subject, event)| match event {
            StoredEvent::SoakStartedV12 {
                start,
                supervision,
                limits,
                job,
                command_lossy,
            } => {
                let event = StoredEvent::SoakStarted {
                    start,
                    supervision,
                    limits,
                    job: job.map(|job| unilab::JobMember {
                        job: job.job,
                        rank: job.rank,
                        on_job_alarm: job.on_job_alarm,
                        run: None,
                    }),
                    command_lossy,
                };
                (subject, event)
            }
            StoredEvent::SoakFinishedV14 {
                end,
                findings,
                limit,
            } => {
                let mut findings: Findings = (*findings).into();
                if let Some(beats) = findings.heartbeat.as_mut() {
                    beats.untracked = 40;
                    beats.errors.clock = Some(3);
                    beats.errors.repeats = Some(7);
                    beats.errors.polling_fallbacks = Some(0);
                }
                let event = StoredEvent::SoakFinished {
                    end,
                    findings: Box::new(findings),
                    limit,
                };
                (subject, event)
            }
            event => (subject, event),
        })
        .collect()
}

/// A rank of schema 16: [`run_soak`]'s, whose evidence holds its collectives, as its
/// `unilab.watch_collectives()` answered — in all-reduce 8 of the default group, which it
/// enqueued at 12:00:03 and never completed.
pub fn collectives_soak(id: &str, supervisor: ProcessIdentity) -> Vec<(Subject, StoredEvent)> {
    run_soak(id, supervisor)
        .into_iter()
        .map(|(subject, event)| match event {
            StoredEvent::SoakEvidenceCaptured(mut evidence) => {
                for process in &mut evidence.processes {
                    process.collectives = Some(fixture_collectives());
                }
                (subject, StoredEvent::SoakEvidenceCaptured(evidence))
            }
            event => (subject, event),
        })
        .collect()
}

fn fixture_collectives() -> unilab::ProcessCollectives {
    unilab::ProcessCollectives {
        sources: vec!["fifo".into()],
        missing: Vec::new(),
        groups: vec![unilab::CollectiveGroup {
            group: "0".into(),
            name: Some("0".into()),
            desc: Some("default_pg".into()),
            ranks: vec![0, 1, 2, 3],
            last_enqueued: Some(8),
            last_started: Some(8),
            last_completed: Some(7),
            pending: vec![unilab::PendingCollective {
                seq: 8,
                op: "gloo:all_reduce".into(),
                input_sizes: vec![vec![1024]],
                input_dtypes: vec!["Float".into()],
                output_sizes: vec![vec![1024]],
                state: "started".into(),
                top_frames: vec![unilab::CollectiveFrame {
                    name: "train_step".into(),
                    file: "train.py".into(),
                    line: 41,
                }],
                enqueued_at_us: Some(1_764_679_203_000_000),
                numel_in: None,
                numel_out: None,
            }],
        }],
    }
}
