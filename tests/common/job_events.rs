//! A job's soak as schema 9 recorded it: a rank that saw another rank's alarm, captured its
//! tree and failed.

use unilab::ProcessIdentity;
use unilab::*;

use super::events::measured_soak;

/// Schema 9: rank 1 of job `ring`, run with `--on-job-alarm stop`, that saw rank 2's alarm,
/// captured its tree (trigger `job_alarm`, its process carrying `RANK`) and failed as
/// `job_failed`, its MPS client ended before its tree was signalled. Its samples are [`measured_soak`]'s.
pub fn job_soak(id: &str, supervisor: ProcessIdentity) -> Vec<(Subject, StoredEvent)> {
    let subject = || Subject::Soak(id.into());
    let alarm_at = 1_764_679_312.5;
    let mut events = measured_soak(id, 3, |_| 2, supervisor);
    let finished = events.pop();
    if let Some((
        _,
        StoredEvent::SoakStartedV8 {
            start,
            supervision,
            limits,
        },
    )) = events.first().cloned()
    {
        events[0].1 = StoredEvent::SoakStartedV9 {
            start,
            supervision,
            limits,
            job: Some(unilab::job_v12::JobMember {
                job: "ring".into(),
                rank: Some(1),
                on_job_alarm: OnJobAlarm::Stop,
            }),
        };
    }
    events.push((
        subject(),
        StoredEvent::SoakJobAlarmSeen(Box::new(JobAlarmSeen {
            alarm: JobAlarm {
                job: "ring".into(),
                rank: Some(2),
                host: "node-8".into(),
                soak_id: "20261207T090000-b2b2".into(),
                failure_kind: "stale_progress".into(),
                reason: "no progress for 30.0 s (limit 30.0 s)".into(),
                at: alarm_at,
            },
            seen_at: alarm_at + 4.25,
        })),
    ));
    events.push((
        subject(),
        StoredEvent::SoakEvidenceCaptured(Box::new(Evidence {
            trigger: FailureKind::JobAlarm,
            captured_at_us: 1_764_679_316_750_000,
            processes: vec![ProcessEvidence {
                pid: 5000,
                ppid: 4999,
                start_ticks: 1_000_000,
                name: "python3".into(),
                state: 'S',
                cmdline: vec!["python3".into(), "ring_allreduce.py".into()],
                threads: vec![ThreadEvidence {
                    tid: 5000,
                    name: "python3".into(),
                    state: 'S',
                    wchan: Some("sk_wait_data".into()),
                    syscall: Some("recvfrom".into()),
                }],
                kernel_stack: None,
                python_stack: Some(
                    "Thread 5000 (idle): \"MainThread\"\n    all_reduce (ring_allreduce.py:41)\n"
                        .into(),
                ),
                holds_gpu_device: false,
                rank: Some(1),
                collectives: None,
            }],
            cgroup: None,
            kernel_messages: Vec::new(),
            unavailable: vec!["kernel stacks: /proc/PID/stack is readable by root only".into()],
            mps: Vec::new(),
        })),
    ));
    // Then its own teardown's capture, its MPS client ended through its daemon first.
    if let Some((subject, StoredEvent::SoakEvidenceCaptured(alarm_capture))) = events.last() {
        let mut teardown = (**alarm_capture).clone();
        teardown.trigger = FailureKind::JobFailed;
        teardown.captured_at_us += 2_000_000;
        teardown.mps = vec![MpsTeardown {
            daemon: "gpu-0f8e0c2a".into(),
            server_pid: 4100,
            terminated: vec![5000],
        }];
        events.push((
            subject.clone(),
            StoredEvent::SoakEvidenceCaptured(Box::new(teardown)),
        ));
    }
    if let Some((
        subject,
        StoredEvent::SoakFinishedV9 {
            mut end, findings, ..
        },
    )) = finished
    {
        end.outcome = Outcome {
            status: OutcomeStatus::Failed,
            failure_kind: Some(FailureKind::JobFailed),
            reason: "rank 2 of job ring on node-8 tripped (stale_progress): no progress for 30.0 s (limit 30.0 s)".into(),
        };
        events.push((
            subject,
            StoredEvent::SoakFinishedV9 {
                end,
                findings,
                limit: None,
            },
        ));
    }
    events
}
