//! The upcasts and their way back, form by form.

use std::collections::BTreeMap;

use super::soak_evidence_captured::{evidence_to_v8, evidence_to_v15};
use super::soak_finished::end_of_v1;
use super::soak_sampled::sample_of_v1;
use super::soak_started::start_of_v1;
use super::*;
use crate::event::soak::{Evidence, ProcessEvidence};
use crate::event::soak::{
    ExitInfo, Findings, GoodputSplit, GpuSample, HeartbeatErrors, HeartbeatSettings, Limits,
    Measures, Outcome, OutcomeStatus, ProgressNoted, ProgressSeen, ProgressSignature,
    ResourceLimit, RunBeats, SampleBeats, SoakParameters, StepStats, StepTimeoutSetting,
    Supervision,
};
use crate::event::soak::{
    JobAlarm, JobAlarmSeen, JobMember, MpsTeardown, OnJobAlarm, ThreadEvidence,
};
use crate::event::stored::{v1, v2, v9, v12};
use crate::event::{DaemonLimits, StartedDaemon, TopologyMode};
use crate::process::ProcessIdentity;

const SUPERVISOR: ProcessIdentity = ProcessIdentity {
    pid: 99,
    start_ticks: 5,
};

/// Evidence of one process, with the rank and the MPS teardown that schema 9 adds.
fn evidence(rank: Option<u32>, mps: Vec<MpsTeardown>) -> Evidence {
    Evidence {
        trigger: crate::event::soak::FailureKind::JobAlarm,
        captured_at_us: 1_764_676_801_000_000,
        processes: vec![ProcessEvidence {
            pid: 100,
            ppid: 1,
            start_ticks: 7,
            name: "python3".into(),
            state: 'S',
            cmdline: vec!["python3".into()],
            threads: vec![ThreadEvidence {
                tid: 100,
                name: "python3".into(),
                state: 'S',
                wchan: Some("futex_wait_queue".into()),
                syscall: Some("futex".into()),
            }],
            kernel_stack: None,
            python_stack: None,
            holds_gpu_device: false,
            rank,
            collectives: None,
        }],
        cgroup: None,
        kernel_messages: Vec::new(),
        unavailable: Vec::new(),
        mps,
    }
}

fn start_v1() -> v1::SoakStart {
    v1::SoakStart {
        soak_id: "20261202T124210-3f9a".into(),
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
        metadata: BTreeMap::from([("node".into(), "n7".into())]),
        environment: BTreeMap::new(),
        supervisor: SUPERVISOR,
        runtime_json: "{}".into(),
    }
}

fn sample_v1() -> v1::Sample {
    v1::Sample {
        index: 3,
        elapsed_ms: 3000,
        processes: vec![v1::ProcessSample {
            pid: 10,
            ppid: 1,
            start_ticks: 7,
            name: "python3".into(),
            state: 'R',
            rss_bytes: 1 << 20,
            cpu_ticks: 250,
            threads: 4,
            open_fds: Some(9),
            read_bytes: None,
            write_bytes: Some(5),
        }],
        gpus: vec![GpuSample {
            index: 0,
            uuid: "GPU-1".into(),
            memory_used_mib: Some(10),
            memory_total_mib: None,
            utilization_percent: Some(50),
            processes: Vec::new(),
        }],
        progress: ProgressSignature {
            files: 2,
            bytes: 20,
            newest_mtime_ns: Some(1),
        },
        sampler_cost_us: 40,
        errors: vec!["nvidia-smi did not answer".into()],
    }
}

fn end_v1() -> v1::SoakEnd {
    v1::SoakEnd {
        outcome: Outcome {
            status: OutcomeStatus::Failed,
            failure_kind: None,
            reason: "because".into(),
        },
        exit: Some(ExitInfo {
            code: Some(1),
            signal: None,
        }),
        duration_ms: 4200,
        first_progress_ms: Some(1000),
        last_progress_ms: None,
        leaked_processes: Vec::new(),
        stdout_tail: b"out".to_vec(),
        stderr_tail: Vec::new(),
    }
}

fn daemon() -> StartedDaemon {
    StartedDaemon {
        name: "job7-gpu-aaaa".into(),
        uid: 1000,
        host: "node".into(),
        topology_mode: TopologyMode::SingleGpu,
        gpu_uuids: vec!["GPU-aaaa".into()],
        pipe_directory: "/tmp/p".into(),
        log_directory: "/tmp/l".into(),
        pid: 10,
        process_start_ticks: 7,
        created_at: 1.5,
    }
}

/// One of each form of the kinds whose payload changed, in schema order.
fn changed_forms() -> Vec<StoredEvent> {
    let start = || Box::new(v2::SoakStart::from(start_of_v1(start_v1())));
    let sample = || Box::new(sample_of_v1(sample_v1()));
    let end = || Box::new(v2::SoakEnd::from(end_of_v1(end_v1())));
    let supervision = v9::Supervision {
        fail_fast: true,
        py_spy: Some("/usr/bin/py-spy".into()),
        dump_signal: Some(10),
        dump_wait_ms: 2000,
        evidence_unavailable: vec!["no kernel stacks".into()],
    };
    let findings = || Box::new(v9::Findings::default());
    let starting = |job| StoredEvent::DaemonStarting {
        gpu: "GPU-aaaa".into(),
        pipe_directory: "/tmp/p".into(),
        log_directory: "/tmp/l".into(),
        starter: SUPERVISOR,
        job,
    };
    vec![
        StoredEvent::DaemonStartedV3 {
            record: daemon(),
            foreground: true,
        },
        StoredEvent::SoakStartedV1(Box::new(start_v1())),
        StoredEvent::SoakSampledV1(Box::new(sample_v1())),
        StoredEvent::SoakFinishedV1(Box::new(end_v1())),
        StoredEvent::SoakStartedV4(start()),
        StoredEvent::SoakSampledV5(sample()),
        StoredEvent::SoakFinishedV4(end()),
        StoredEvent::DaemonStartingV3 {
            gpu: "GPU-aaaa".into(),
            pipe_directory: "/tmp/p".into(),
            log_directory: "/tmp/l".into(),
            starter: SUPERVISOR,
        },
        StoredEvent::DaemonStartedV6 {
            record: daemon(),
            foreground: false,
            job: None,
        },
        starting(Some("7".into())),
        StoredEvent::SoakStartedV5 {
            start: start(),
            supervision: supervision.clone(),
        },
        StoredEvent::SoakFinishedV5 {
            end: end(),
            findings: findings(),
        },
        StoredEvent::SoakStartedV8 {
            start: start(),
            supervision: supervision.clone(),
            limits: Limits {
                max_memory_bytes: Some(1 << 30),
                ..Limits::default()
            },
        },
        StoredEvent::SoakSampledV9 {
            sample: sample(),
            measures: Box::new(v9::Measures {
                pss_bytes: vec![Some(4096)],
                gpus: Vec::new(),
            }),
        },
        StoredEvent::SoakFinishedV9 {
            end: end(),
            findings: findings(),
            limit: Some(ResourceLimit::Memory),
        },
        StoredEvent::DaemonStarted {
            record: daemon(),
            foreground: false,
            job: Some("7".into()),
            limits: DaemonLimits {
                active_thread_percentage: Some(25.0),
                pinned_memory_limit: None,
            },
        },
    ]
    .into_iter()
    .chain(schema_9_forms(supervision))
    .chain(schema_10_forms())
    .chain(schema_11_forms())
    .chain(schema_12_forms())
    .chain(schema_13_forms())
    .chain(schema_15_forms())
    .chain(schema_16_forms())
    .collect()
}

/// The form schema 16 adds: evidence whose rank process holds its collectives.
fn schema_16_forms() -> Vec<StoredEvent> {
    let mut captured = evidence(Some(2), Vec::new());
    captured.processes[0].collectives = Some(crate::event::soak::ProcessCollectives {
        sources: vec!["fifo".into()],
        missing: Vec::new(),
        groups: Vec::new(),
    });
    vec![StoredEvent::SoakEvidenceCaptured(Box::new(captured))]
}

/// Schema 9–15's evidence reads with no collectives, all else kept.
#[test]
fn evidence_of_schema_15_reads_without_collectives() {
    let mut asked = evidence(Some(2), Vec::new());
    let stored = StoredEvent::SoakEvidenceCapturedV15(Box::new(evidence_to_v15(asked.clone())));
    let (event, schema) = stored.upcast().unwrap();
    assert_eq!(schema, 9);
    assert_eq!(event, Event::SoakEvidenceCaptured(Box::new(asked.clone())));
    asked.processes[0].collectives = Some(crate::event::soak::ProcessCollectives::default());
    let written = StoredEvent::from(Event::SoakEvidenceCaptured(Box::new(asked)));
    assert_eq!(written.schema(), 16);
}

/// The form schema 15 adds: a verdict counting the beats not taken as they came.
fn schema_15_forms() -> Vec<StoredEvent> {
    let run = RunBeats {
        untracked: 3,
        errors: HeartbeatErrors {
            clock: Some(4),
            repeats: Some(9),
            polling_fallbacks: Some(1),
            ..HeartbeatErrors::default()
        },
        ..RunBeats::default()
    };
    vec![StoredEvent::SoakFinished {
        end: Box::new(end_of_v1(end_v1()).into()),
        findings: Box::new(Findings {
            heartbeat: Some(Box::new(run)),
            ..Findings::default()
        }),
        limit: None,
    }]
}

/// A verdict of schema 10–14's forms reads without the counts of the beats not taken as they
/// came (`None`: not zero, which would say none were); schema 15's with what it counted.
#[test]
fn a_verdict_counts_the_beats_not_taken_only_where_its_form_does() {
    let mut counted = Vec::new();
    for stored in changed_forms() {
        let schema = stored.schema();
        if let Some((Event::SoakFinished { findings, .. }, _)) = stored.upcast()
            && let Some(beats) = findings.and_then(|f| f.heartbeat)
        {
            let errors = beats.errors;
            counted.push((
                schema,
                errors.clock,
                errors.repeats,
                errors.polling_fallbacks,
            ));
        }
    }
    assert_eq!(
        counted,
        [(10, None, None, None), (15, Some(4), Some(9), Some(1))]
    );
}

/// The forms schema 12 adds: a sample with the progress its supervisor decided, and one a
/// test built (no supervisor's progress).
fn schema_12_forms() -> Vec<StoredEvent> {
    let noted = ProgressNoted {
        progress_seen: Some(ProgressSeen::Files),
        last_progress_at_us: Some(1_764_676_800_250_000),
        last_progress_ms: Some(2_250),
    };
    [Some(noted), None]
        .into_iter()
        .map(|noted| StoredEvent::SoakSampled {
            sample: Box::new(sample_of_v1(sample_v1())),
            measures: Box::new(Measures::default()),
            noted,
        })
        .collect()
}

/// A sample of schema 1–11's forms reads with no progress decided (readers decide it, by the
/// rule its supervisor followed); schema 12's with what its supervisor recorded.
#[test]
fn a_sample_carries_its_progress_only_where_its_form_records_it() {
    let mut recorded = 0;
    for stored in changed_forms() {
        let schema = stored.schema();
        let noted = match &stored {
            StoredEvent::SoakSampled { noted, .. } => *noted,
            _ => None,
        };
        if let Some((Event::SoakSampled { progress, .. }, _)) = stored.upcast() {
            assert_eq!(progress, noted, "schema {schema}");
            assert!(schema >= 12 || progress.is_none(), "schema {schema}");
            recorded += usize::from(progress.is_some());
        }
    }
    assert_eq!(recorded, 1);
}

/// The form schema 11 adds: a start whose command line is recorded lossily.
fn schema_11_forms() -> Vec<StoredEvent> {
    let mut start = v2::SoakStart::from(start_of_v1(start_v1()));
    start.command = vec!["sh".into(), "\u{fffd}\u{fffd}".into()];
    vec![StoredEvent::SoakStartedV12 {
        start: Box::new(start),
        supervision: Supervision::default(),
        limits: Limits::default(),
        job: None,
        command_lossy: true,
    }]
}

/// The form schema 13 adds: a start whose job holds the run its rank joined.
fn schema_13_forms() -> Vec<StoredEvent> {
    vec![StoredEvent::SoakStarted {
        start: Box::new(v2::SoakStart::from(start_of_v1(start_v1()))),
        supervision: Supervision::default(),
        limits: Limits::default(),
        job: Some(JobMember {
            job: "ring".into(),
            rank: Some(2),
            on_job_alarm: OnJobAlarm::Capture,
            run: Some("s0.r1".into()),
        }),
        command_lossy: false,
    }]
}

/// A start of schema 9–12's forms reads as its job's soak recorded before runs (run `None`);
/// schema 13's with the run its rank joined.
#[test]
fn a_starts_job_has_a_run_only_where_its_form_records_one() {
    let mut runs = Vec::new();
    for stored in changed_forms() {
        let schema = stored.schema();
        if let Some((Event::SoakStarted { job: Some(job), .. }, _)) = stored.upcast() {
            assert_eq!(job.job, "ring", "schema {schema}");
            assert_eq!(job.run.is_some(), schema >= 13, "schema {schema}");
            runs.push((schema, job.run));
        }
    }
    assert_eq!(runs, [(9, None), (13, Some("s0.r1".into()))]);
}

/// A start of schema 1–10's forms reads with its command line whole, as recorded: none of them
/// could hold an argument that is not UTF-8. Schema 11's on say what they hold.
#[test]
fn a_start_reads_as_lossy_only_where_its_form_says_so() {
    let mut lossy = 0;
    for stored in changed_forms() {
        let schema = stored.schema();
        if let Some((Event::SoakStarted { command_lossy, .. }, _)) = stored.upcast() {
            assert!(!command_lossy || schema >= 11, "schema {schema}");
            lossy += usize::from(command_lossy);
        }
    }
    assert_eq!(lossy, 1, "the one lossy start of the forms");
}

/// The forms schema 9 adds.
fn schema_9_forms(supervision: v9::Supervision) -> Vec<StoredEvent> {
    let start = || Box::new(v2::SoakStart::from(start_of_v1(start_v1())));
    vec![
        StoredEvent::SoakStartedV9 {
            start: start(),
            supervision,
            limits: Limits::default(),
            job: Some(v12::JobMember {
                job: "ring".into(),
                rank: Some(2),
                on_job_alarm: OnJobAlarm::Stop,
            }),
        },
        StoredEvent::SoakEvidenceCapturedV8(Box::new(evidence_to_v8(evidence(None, Vec::new())))),
        StoredEvent::SoakEvidenceCapturedV15(Box::new(evidence_to_v15(evidence(
            Some(3),
            vec![MpsTeardown {
                daemon: "gpu0".into(),
                server_pid: 77,
                terminated: vec![100],
            }],
        )))),
        StoredEvent::SoakJobAlarmSeen(Box::new(JobAlarmSeen {
            alarm: JobAlarm {
                job: "ring".into(),
                rank: Some(2),
                host: "n2".into(),
                soak_id: "20261202T124210-3f9a".into(),
                failure_kind: "stale_progress".into(),
                reason: "no progress for 5s".into(),
                at: 1_764_676_800.25,
            },
            seen_at: 1_764_676_801.5,
        })),
    ]
}

/// The forms schema 10 adds, with heartbeats.
fn schema_10_forms() -> Vec<StoredEvent> {
    let start = || Box::new(v2::SoakStart::from(start_of_v1(start_v1())));
    let beats = SampleBeats {
        beats: 40,
        step: Some(120),
        phase: Some("train".into()),
        step_seconds_min: Some(0.09),
        step_seconds_median: Some(0.1),
        step_seconds_max: Some(0.4),
        numbers: BTreeMap::from([("loss".into(), 0.25)]),
    };
    let run = RunBeats {
        steps: BTreeMap::from([(
            "train".into(),
            StepStats {
                count: 120,
                last: 120,
                timed: 119,
                median_seconds: Some(0.1),
                p99_seconds: Some(0.38),
            },
        )]),
        untracked: 0,
        errors: HeartbeatErrors {
            malformed: 2,
            ..HeartbeatErrors::default()
        },
        goodput: Some(GoodputSplit {
            productive_seconds: 11.9,
            startup_seconds: 1.5,
            ..GoodputSplit::default()
        }),
    };
    vec![
        StoredEvent::SoakStartedV10 {
            start: start(),
            supervision: Supervision {
                heartbeat: Some(HeartbeatSettings {
                    step_timeout: Some(StepTimeoutSetting::Auto),
                    phase_timeouts: BTreeMap::from([("checkpoint".into(), 1_800_000)]),
                }),
                ..Supervision::default()
            },
            limits: Limits::default(),
            job: None,
        },
        StoredEvent::SoakSampledV11 {
            sample: Box::new(sample_of_v1(sample_v1())),
            measures: Box::new(Measures {
                heartbeat: Some(Box::new(beats)),
                ..Measures::default()
            }),
        },
        StoredEvent::SoakFinishedV14 {
            end: Box::new(end_of_v1(end_v1()).into()),
            findings: Box::new(
                Findings {
                    heartbeat: Some(Box::new(run)),
                    ..Findings::default()
                }
                .into(),
            ),
            limit: None,
        },
    ]
}

/// Schema 5–9's supervision, findings and measures read without a heartbeat.
#[test]
fn soak_payloads_of_schema_9_read_without_heartbeats() {
    for stored in changed_forms().into_iter().filter(|s| s.schema() < 10) {
        match stored.upcast() {
            Some((Event::SoakStarted { supervision, .. }, _)) => {
                assert!(supervision.is_none_or(|s| s.heartbeat.is_none()));
            }
            Some((Event::SoakSampled { measures, .. }, _)) => {
                assert!(measures.is_none_or(|m| m.heartbeat.is_none()));
            }
            Some((Event::SoakFinished { findings, .. }, _)) => {
                assert!(findings.is_none_or(|f| f.heartbeat.is_none()));
            }
            _ => {}
        }
    }
}

/// Every value an old form holds survives its upcast: the domain event goes back into the
/// form it was read from exactly, which is what `history --json` shows of an old record and
/// what the frozen artifacts are rendered from.
#[test]
fn every_form_goes_back_into_the_form_it_was_read_from() {
    for stored in changed_forms() {
        let schema = stored.schema();
        let (event, upcast_schema) = stored.clone().upcast().expect("not a packed sample");
        assert_eq!(upcast_schema, schema, "{stored:?}");
        assert_eq!(event.kind(), stored.kind());
        assert_eq!(event.into_stored(schema), stored);
    }
}

/// Moved from the `soaks` view, which sees only domain events now: a soak recorded in
/// schema 1's forms reads as the same start, sample and verdict as any other, what the
/// forms lack `None` or the value schema 1 meant, the run time its `duration_ms`.
/// Schema 5–8's evidence reads with no rank and no MPS teardown: none of either.
#[test]
fn evidence_of_schema_8_reads_without_ranks_or_mps() {
    let stored = StoredEvent::SoakEvidenceCapturedV8(Box::new(evidence_to_v8(evidence(
        Some(3),
        vec![MpsTeardown {
            daemon: "gpu0".into(),
            server_pid: 77,
            terminated: vec![100],
        }],
    ))));
    let (event, schema) = stored.upcast().unwrap();
    assert_eq!(schema, 5);
    assert_eq!(
        event,
        Event::SoakEvidenceCaptured(Box::new(evidence(None, Vec::new())))
    );
}

#[test]
fn soaks_recorded_in_schema_1s_forms_read_as_the_events_of_any_soak() {
    let upcast = |stored: StoredEvent| stored.upcast().expect("not packed");
    let (started, schema) = upcast(StoredEvent::SoakStartedV1(Box::new(start_v1())));
    assert_eq!(schema, 1);
    let Event::SoakStarted {
        start,
        supervision: None,
        limits: None,
        job: None,
        command_lossy: false,
    } = started
    else {
        panic!("{started:?}")
    };
    assert_eq!(start.soak_id, "20261202T124210-3f9a");
    assert_eq!(start.supervisor, SUPERVISOR);
    assert_eq!((start.require_progress, start.ticks_per_second), (false, 0));

    let (sampled, _) = upcast(StoredEvent::SoakSampledV1(Box::new(sample_v1())));
    let Event::SoakSampled {
        sample,
        measures: None,
        progress: None,
    } = sampled
    else {
        panic!("{sampled:?}")
    };
    assert_eq!((sample.index, sample.processes[0].cpu_ticks), (3, 250));
    assert_eq!(
        sample.gpus.as_ref().map(Vec::len),
        Some(1),
        "its GPUs known"
    );

    let (finished, _) = upcast(StoredEvent::SoakFinishedV1(Box::new(end_v1())));
    let Event::SoakFinished {
        end,
        findings: None,
        limit: None,
        ..
    } = finished
    else {
        panic!("{finished:?}")
    };
    assert_eq!((end.run_ms, end.teardown_ms), (4200, 0));
    assert_eq!(end.outcome.reason, "because");
}

/// What a form did not record is `None`, never a value that says something: a daemon
/// started before jobs were recorded has no job (`None`), one started outside a job has
/// `Some(None)`.
#[test]
fn what_an_old_form_did_not_record_is_none() {
    let job = |stored: StoredEvent| match stored.upcast() {
        Some((Event::DaemonStarted { job, limits, .. }, _)) => (job, limits),
        other => panic!("{other:?}"),
    };
    let forms = changed_forms();
    assert_eq!(job(forms[0].clone()), (None, None), "schema 1–3");
    assert_eq!(job(forms[8].clone()), (Some(None), None), "schema 4–6");
    assert_eq!(job(forms[15].clone()).0, Some(Some("7".into())), "schema 7");
}

/// The writer's side stores a domain event in its kind's newest form, what it lacks as the
/// kind's empty value.
#[test]
fn an_event_is_written_in_its_kinds_newest_form() {
    for stored in changed_forms() {
        let (event, _) = stored.upcast().expect("not packed");
        let written = StoredEvent::from(event);
        let newest = match written.kind() {
            "daemon_started" => 7,
            "daemon_starting" => 4,
            "soak_sampled" => 12,
            "soak_started" => 13,
            "soak_finished" => 15,
            "soak_evidence_captured" => 16,
            "soak_job_alarm_seen" => 9,
            _ => 6,
        };
        assert_eq!(written.schema(), newest, "{written:?}");
    }
}
