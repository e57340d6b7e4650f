//! Strategies for events of every kind (every form a schema has written), archived runs, subjects
//! and envelopes.

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use unilab::GpuIdentity;
use unilab::*;
use unilab::{DaemonLimits, LeaseEnd, StaleReason, StopMethod};
use unilab::{Scope, StoredEnvelope, StoredEvent, Subject};

use super::*;

pub(super) fn event() -> impl Strategy<Value = StoredEvent> {
    prop_oneof![
        (
            text(),
            mode(),
            vec((any::<u32>(), text()), 0..3),
            option::of(text())
        )
            .prop_map(|(selector, topology_mode, gpus, cuda_visible_devices)| {
                StoredEvent::TopologyResolved {
                    selector,
                    topology_mode,
                    gpus: gpus
                        .into_iter()
                        .map(|(index, uuid)| GpuIdentity { index, uuid })
                        .collect(),
                    cuda_visible_devices,
                }
            }),
        (record(), any::<bool>())
            .prop_map(|(record, foreground)| StoredEvent::DaemonStartedV3 { record, foreground }),
        (record(), any::<bool>(), option::of(text())).prop_map(|(record, foreground, job)| {
            StoredEvent::DaemonStartedV6 {
                record,
                foreground,
                job,
            }
        }),
        (
            record(),
            any::<bool>(),
            option::of(text()),
            option::of(0.0f64..=100.0),
            option::of(any::<u64>())
        )
            .prop_map(
                |(record, foreground, job, active_thread_percentage, pinned_memory_limit)| {
                    StoredEvent::DaemonStarted {
                        record,
                        foreground,
                        job,
                        limits: DaemonLimits {
                            active_thread_percentage,
                            pinned_memory_limit,
                        },
                    }
                }
            ),
        identity().prop_map(|process| StoredEvent::DaemonVerifiedLive { process }),
        (text(), text(), text(), identity()).prop_map(
            |(gpu, pipe_directory, log_directory, starter)| StoredEvent::DaemonStartingV3 {
                gpu,
                pipe_directory,
                log_directory,
                starter,
            }
        ),
        (text(), text(), text(), identity(), option::of(text())).prop_map(
            |(gpu, pipe_directory, log_directory, starter, job)| StoredEvent::DaemonStarting {
                gpu,
                pipe_directory,
                log_directory,
                starter,
                job,
            }
        ),
        (text(), option::of(identity()))
            .prop_map(|(reason, process)| StoredEvent::DaemonStartFailed { reason, process }),
        (identity(), option::of(text()), any::<bool>()).prop_map(|(holder, job, started)| {
            StoredEvent::LeaseAcquired {
                holder,
                job,
                started,
            }
        }),
        (
            identity(),
            prop_oneof![Just(LeaseEnd::Finished), Just(LeaseEnd::HolderGone)]
        )
            .prop_map(|(holder, reason)| StoredEvent::LeaseReleased { holder, reason }),
        (
            identity(),
            prop_oneof![
                Just(StaleReason::ProcessGone),
                Just(StaleReason::PidReused),
                Just(StaleReason::NotOwned)
            ]
        )
            .prop_map(|(process, reason)| StoredEvent::DaemonStaleCleaned { process, reason }),
        (
            identity(),
            prop_oneof![
                Just(StopMethod::Quit),
                Just(StopMethod::Terminated),
                Just(StopMethod::Killed),
                Just(StopMethod::Exited)
            ]
        )
            .prop_map(|(process, method)| StoredEvent::DaemonStopped { process, method }),
        soak_start_v1().prop_map(|s| StoredEvent::SoakStartedV1(Box::new(s))),
        sample_v1().prop_map(|s| StoredEvent::SoakSampledV1(Box::new(s))),
        soak_end_v1().prop_map(|e| StoredEvent::SoakFinishedV1(Box::new(e))),
        soak_start().prop_map(|s| StoredEvent::SoakStartedV4(Box::new(s))),
        sample().prop_map(|s| StoredEvent::SoakSampledV5(Box::new(s))),
        soak_end().prop_map(|e| StoredEvent::SoakFinishedV4(Box::new(e))),
        (soak_start(), supervision()).prop_map(|(start, supervision)| StoredEvent::SoakStartedV5 {
            start: Box::new(start),
            supervision: supervision.into()
        }),
        evidence().prop_map(|e| StoredEvent::SoakEvidenceCaptured(Box::new(e))),
        (soak_end(), findings()).prop_map(|(end, findings)| StoredEvent::SoakFinishedV5 {
            end: Box::new(end),
            findings: Box::new(findings.into())
        }),
        (soak_start(), supervision(), limits()).prop_map(|(start, supervision, limits)| {
            StoredEvent::SoakStartedV8 {
                start: Box::new(start),
                supervision: supervision.into(),
                limits,
            }
        }),
        (
            soak_start(),
            supervision(),
            limits(),
            option::of((text(), option::of(any::<u32>()), 0..3u8)),
            (option::of(any::<bool>()), option::of(option::of(text())))
        )
            .prop_map(|(start, supervision, limits, job, (command_lossy, run))| {
                let on = |on: u8| {
                    [OnJobAlarm::Capture, OnJobAlarm::Stop, OnJobAlarm::Ignore][usize::from(on)]
                };
                if let (Some(command_lossy), Some(run)) = (command_lossy, run) {
                    let job = job.map(|(job, rank, on_job_alarm)| JobMember {
                        job,
                        rank,
                        on_job_alarm: on(on_job_alarm),
                        run,
                    });
                    return StoredEvent::SoakStarted {
                        start: Box::new(start),
                        supervision,
                        limits,
                        job,
                        command_lossy,
                    };
                }
                let job = job.map(|(job, rank, on_job_alarm)| unilab::job_v12::JobMember {
                    job,
                    rank,
                    on_job_alarm: on(on_job_alarm),
                });
                if let Some(command_lossy) = command_lossy {
                    StoredEvent::SoakStartedV12 {
                        start: Box::new(start),
                        supervision,
                        limits,
                        job,
                        command_lossy,
                    }
                } else if supervision.heartbeat.is_some() {
                    StoredEvent::SoakStartedV10 {
                        start: Box::new(start),
                        supervision,
                        limits,
                        job,
                    }
                } else {
                    StoredEvent::SoakStartedV9 {
                        start: Box::new(start),
                        supervision: supervision.into(),
                        limits,
                        job,
                    }
                }
            }),
        (
            (text(), option::of(any::<u32>()), text(), text()),
            (text(), text(), any::<u32>(), any::<u32>()),
        )
            .prop_map(
                |((job, rank, host, soak_id), (failure_kind, reason, at, seen))| {
                    StoredEvent::SoakJobAlarmSeen(Box::new(JobAlarmSeen {
                        alarm: JobAlarm {
                            job,
                            rank,
                            host,
                            soak_id,
                            failure_kind,
                            reason,
                            at: f64::from(at) / 8.0,
                        },
                        seen_at: f64::from(at) / 8.0 + f64::from(seen),
                    }))
                }
            ),
        (sample(), measures(), 0..3u8, option::of(progress_noted())).prop_map(
            |(sample, measures, form, noted)| {
                let sample = Box::new(sample);
                match form {
                    0 => StoredEvent::SoakSampledV9 {
                        sample,
                        measures: Box::new(measures.into()),
                    },
                    1 => StoredEvent::SoakSampledV11 {
                        sample,
                        measures: Box::new(measures),
                    },
                    _ => StoredEvent::SoakSampled {
                        sample,
                        measures: Box::new(measures),
                        noted,
                    },
                }
            }
        ),
        (soak_end(), findings(), option::of(resource_limit()), 0..3u8).prop_map(
            |(end, findings, limit, form)| {
                let end = Box::new(end);
                match form {
                    0 => StoredEvent::SoakFinishedV9 {
                        end,
                        findings: Box::new(findings.into()),
                        limit,
                    },
                    1 => StoredEvent::SoakFinishedV14 {
                        end,
                        findings: Box::new(findings.into()),
                        limit,
                    },
                    _ => StoredEvent::SoakFinished {
                        end,
                        findings: Box::new(findings),
                        limit,
                    },
                }
            }
        ),
        (identity(), text())
            .prop_map(|(supervisor, reason)| StoredEvent::SoakAbandoned { supervisor, reason }),
        (text(), text(), any::<u64>()).prop_map(|(path, digest, bytes)| {
            StoredEvent::ArtifactWritten {
                path,
                digest,
                bytes,
            }
        }),
        archived().prop_map(|a| StoredEvent::SoakArchived(Box::new(a))),
        (
            option::of(any::<u64>()),
            sample(),
            measures(),
            any::<bool>(),
            vec(any::<u8>(), 0..64),
        )
            .prop_map(|(base, sample, measures, pss, processes)| {
                StoredEvent::SoakSampledCompactV9(Box::new(soak_v9::CompactSample {
                    base,
                    sample,
                    measures: measures.into(),
                    pss,
                    processes,
                }))
            }),
        (
            option::of(any::<u64>()),
            sample(),
            measures(),
            any::<bool>(),
            vec(any::<u8>(), 0..64),
            option::of(packed_beats()),
            option::of(option::of(progress_noted())),
        )
            .prop_map(|(base, sample, measures, pss, processes, beats, noted)| {
                let packed = Box::new(CompactSample {
                    base,
                    sample,
                    measures,
                    pss,
                    processes,
                    beats,
                });
                match noted {
                    None => StoredEvent::SoakSampledCompactV11(packed),
                    Some(noted) => StoredEvent::SoakSampledCompact { packed, noted },
                }
            }),
    ]
}

/// The progress a supervisor decided at a sample (schema 12).
fn progress_noted() -> impl Strategy<Value = ProgressNoted> {
    (
        option::of(prop_oneof![
            Just(ProgressSeen::Files),
            Just(ProgressSeen::Beat)
        ]),
        option::of(any::<i64>()),
        option::of(any::<u64>()),
    )
        .prop_map(
            |(progress_seen, last_progress_at_us, last_progress_ms)| ProgressNoted {
                progress_seen,
                last_progress_at_us,
                last_progress_ms,
            },
        )
}

/// What the live log keeps of an archived soak: its row, and what the event commits to.
pub(super) fn archived() -> impl Strategy<Value = Archived> {
    let soak = (
        vec(text(), 0..3),
        text(),
        identity(),
        any::<i64>(),
        option::of(any::<i64>()),
        prop_oneof![
            Just(OutcomeStatus::Passed),
            Just(OutcomeStatus::Failed),
            Just(OutcomeStatus::Abandoned)
        ],
        option::of(failure_kind()),
        option::of(text()),
        (any::<u64>(), any::<u64>(), any::<u64>()),
        option::of(text()),
        option::of(any::<u64>()),
    )
        .prop_map(
            |(
                command,
                output,
                supervisor,
                started_at_us,
                ended_at_us,
                status,
                failure_kind,
                reason,
                (samples, first_seq, last_seq),
                artifact_digest,
                run_ms,
            )| ArchivedSoak {
                command,
                output,
                supervisor,
                started_at_us,
                ended_at_us,
                status,
                failure_kind,
                reason,
                samples,
                first_seq,
                last_seq,
                artifact_digest,
                run_ms,
            },
        );
    (
        text(),
        soak,
        vec((any::<u64>(), any::<u64>()), 0..8),
        (any::<u64>(), any::<u64>()),
        any::<[u8; 32]>(),
        any::<[u8; 32]>(),
    )
        .prop_map(
            |(file, soak, runs, (records, bytes), records_digest, gaps_digest)| Archived {
                file,
                soak,
                runs: runs
                    .into_iter()
                    .map(|(kept, removed)| ArchivedRun { kept, removed })
                    .collect(),
                records,
                bytes,
                records_digest,
                gaps_digest,
            },
        )
}

pub(super) fn subject() -> impl Strategy<Value = Subject> {
    prop_oneof![
        Just(Subject::Host),
        text().prop_map(Subject::Daemon),
        text().prop_map(Subject::Soak)
    ]
}

pub(super) fn envelope() -> impl Strategy<Value = StoredEnvelope> {
    (
        any::<u64>(),
        any::<i64>(),
        any::<u32>(),
        text(),
        subject(),
        event(),
    )
        .prop_map(
            |(seq, recorded_at_us, uid, host, subject, event)| StoredEnvelope {
                seq,
                recorded_at_us,
                scope: Scope { uid, host },
                subject,
                event,
            },
        )
}
