//! Sample events: one of every kind (in every form a schema has written), soak samples, and the
//! events test writers append, each identifiable by writer and index.

use std::collections::BTreeMap;

use unilab::ProcessIdentity;
use unilab::*;
use unilab::{DaemonLimits, LeaseEnd, StaleReason, StartedDaemon, StopMethod};
use unilab::{Event, Subject};
use unilab::{GpuIdentity, TopologyMode};

/// A `daemon_verified_live` of `pid`: the cheapest event to append.
pub fn live(pid: u32) -> Event {
    Event::DaemonVerifiedLive {
        process: ProcessIdentity {
            pid,
            start_ticks: 7,
        },
    }
}

/// One event of every kind, each about a plausible subject, in the forms each schema wrote.
pub fn every_event_kind() -> Vec<(Subject, StoredEvent)> {
    let gpu = "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f".to_string();
    let daemon = ProcessIdentity {
        pid: 4242,
        start_ticks: 987_654,
    };
    let record = StartedDaemon {
        name: "gpu-0f8e0c2a".into(),
        uid: 1000,
        host: "node-7".into(),
        topology_mode: TopologyMode::SingleGpu,
        gpu_uuids: vec![gpu.clone()],
        pipe_directory: "/run/user/1000/unilab/mps/gpu-0f8e0c2a".into(),
        log_directory: "/home/u/.local/state/unilab/node-7/1000/mps/gpu-0f8e0c2a/log".into(),
        pid: daemon.pid,
        process_start_ticks: daemon.start_ticks,
        created_at: 1_764_679_315.5,
    };
    let d = || Subject::Daemon(record.name.clone());
    let s = || Subject::Soak("20261202T124210-3f9a".into());
    let supervisor = ProcessIdentity {
        pid: 5000,
        start_ticks: 1_000_000,
    };
    let mut events = vec![
        (
            d(),
            StoredEvent::TopologyResolved {
                selector: "0".into(),
                topology_mode: TopologyMode::SingleGpu,
                gpus: vec![GpuIdentity {
                    index: 0,
                    uuid: gpu.clone(),
                }],
                cuda_visible_devices: Some("0".into()),
            },
        ),
        (
            d(),
            StoredEvent::DaemonStarted {
                record: record.clone(),
                foreground: false,
                job: None,
                limits: DaemonLimits {
                    active_thread_percentage: Some(25.0),
                    pinned_memory_limit: Some(8 << 30),
                },
            },
        ),
        (d(), StoredEvent::DaemonVerifiedLive { process: daemon }),
        (
            d(),
            StoredEvent::DaemonStopped {
                process: daemon,
                method: StopMethod::Quit,
            },
        ),
        (
            Subject::Daemon("other".into()),
            StoredEvent::DaemonStartFailed {
                reason: "the control socket did not answer within 5 s".into(),
                process: Some(daemon),
            },
        ),
        (
            Subject::Daemon("stale".into()),
            StoredEvent::DaemonStaleCleaned {
                process: daemon,
                reason: StaleReason::PidReused,
            },
        ),
        (
            s(),
            StoredEvent::SoakStartedV1(Box::new(soak_v1::SoakStart {
                soak_id: "20261202T124210-3f9a".into(),
                command: vec![
                    "python3".into(),
                    "train.py".into(),
                    "--steps".into(),
                    "100".into(),
                ],
                cwd: "/home/u/project".into(),
                progress_dir: "/home/u/project/progress".into(),
                output: "/home/u/soak.json".into(),
                parameters: SoakParameters {
                    sample_interval_ms: 5_000,
                    startup_timeout_ms: 600_000,
                    stale_progress_ms: 120_000,
                    shutdown_grace_ms: 5_000,
                    min_duration_ms: 0,
                },
                metadata: BTreeMap::from([("run".into(), "nightly".into())]),
                environment: BTreeMap::from([("WANDB_API_KEY".into(), "[redacted]".into())]),
                supervisor,
                runtime_json: r#"{"software":{"unilab":"0.1.0"}}"#.into(),
            })),
        ),
        (s(), StoredEvent::SoakSampledV1(Box::new(sample_v1(0, 3)))),
        (
            s(),
            StoredEvent::SoakFinishedV1(Box::new(soak_v1::SoakEnd {
                outcome: Outcome {
                    status: OutcomeStatus::Failed,
                    failure_kind: Some(FailureKind::StaleProgress),
                    reason: "no progress for 120 s".into(),
                },
                exit: Some(ExitInfo {
                    code: None,
                    signal: Some(15),
                }),
                duration_ms: 250_000,
                first_progress_ms: Some(12_000),
                last_progress_ms: Some(130_000),
                leaked_processes: vec![LeakedProcess {
                    identity: ProcessIdentity {
                        pid: 5100,
                        start_ticks: 1_000_500,
                    },
                    name: "dataloader".into(),
                    cmdline: vec!["python3".into(), "-c".into(), "loop()".into()],
                }],
                stdout_tail: b"step 99\n".to_vec(),
                stderr_tail: b"warning: slow\n".to_vec(),
            })),
        ),
        (
            Subject::Soak("20261201T000000-0000".into()),
            StoredEvent::SoakAbandoned {
                supervisor,
                reason: "the supervisor is gone".into(),
            },
        ),
        (
            s(),
            StoredEvent::ArtifactWritten {
                path: "/home/u/soak.json".into(),
                digest: "ab".repeat(32),
                bytes: 123_456,
            },
        ),
    ];
    // Schema 2: a soak recorded in the new forms.
    let s2 = || Subject::Soak("20261202T130000-5b7c".into());
    events.extend([
        (
            s2(),
            StoredEvent::SoakStartedV4(Box::new(soak_v2::SoakStart {
                soak_id: "20261202T130000-5b7c".into(),
                command: vec!["python3".into(), "train.py".into()],
                cwd: "/home/u/project".into(),
                progress_dir: "/home/u/project/progress".into(),
                output: "/home/u/soak-2.json".into(),
                parameters: SoakParameters {
                    sample_interval_ms: 1_000,
                    startup_timeout_ms: 60_000,
                    stale_progress_ms: 30_000,
                    shutdown_grace_ms: 2_000,
                    min_duration_ms: 0,
                },
                require_progress: true,
                metadata: BTreeMap::from([("HF_TOKEN".into(), "[redacted]".into())]),
                environment: BTreeMap::from([("PYTHONUNBUFFERED".into(), "1".into())]),
                supervisor,
                runtime_json: r#"{"software":{"unilab":"0.2.0"}}"#.into(),
                ticks_per_second: 100,
            })),
        ),
        (s2(), StoredEvent::SoakSampledV5(Box::new(sample(0, 3)))),
        (s2(), StoredEvent::SoakSampledV5(Box::new(sample(1, 2)))),
        (
            s2(),
            StoredEvent::SoakFinishedV4(Box::new(soak_v2::SoakEnd {
                outcome: Outcome {
                    status: OutcomeStatus::Failed,
                    failure_kind: Some(FailureKind::NoProgress),
                    reason: "the command exited 0 but its progress directory never changed".into(),
                },
                exit: Some(ExitInfo {
                    code: Some(0),
                    signal: None,
                }),
                run_ms: 9_500,
                teardown_ms: 120,
                first_progress_ms: None,
                last_progress_ms: None,
                leaked_processes: Vec::new(),
                stdout_tail: b"step 10/10\n".to_vec(),
                stderr_tail: Vec::new(),
            })),
        ),
        (
            s2(),
            StoredEvent::ArtifactWritten {
                path: "/home/u/soak-2.json".into(),
                digest: "cd".repeat(32),
                bytes: 4_321,
            },
        ),
    ]);
    // Schema 5: a soak with its supervision, the evidence captured before the first signal,
    // and what the verdict found.
    let s5 = || Subject::Soak("20261204T090000-e5e5".into());
    events.extend([
        (
            s5(),
            StoredEvent::SoakStartedV5 {
                start: Box::new(soak_v2::SoakStart {
                    soak_id: "20261204T090000-e5e5".into(),
                    command: vec!["python3".into(), "train.py".into()],
                    cwd: "/home/u/project".into(),
                    progress_dir: "/home/u/project/progress".into(),
                    output: "/home/u/soak-5.json".into(),
                    parameters: SoakParameters {
                        sample_interval_ms: 1_000,
                        startup_timeout_ms: 60_000,
                        stale_progress_ms: 30_000,
                        shutdown_grace_ms: 2_000,
                        min_duration_ms: 0,
                    },
                    require_progress: true,
                    metadata: BTreeMap::from([("node".into(), "node-7".into())]),
                    environment: BTreeMap::from([("PYTHONUNBUFFERED".into(), "1".into())]),
                    supervisor,
                    runtime_json: r#"{"software":{"unilab":"0.3.0"}}"#.into(),
                    ticks_per_second: 100,
                }),
                supervision: soak_v9::Supervision {
                    fail_fast: true,
                    py_spy: Some("/usr/bin/py-spy".into()),
                    dump_signal: Some(10),
                    dump_wait_ms: 2_000,
                    evidence_unavailable: Vec::new(),
                },
            },
        ),
        (s5(), StoredEvent::SoakSampledV5(Box::new(sample(0, 2)))),
        (
            s5(),
            StoredEvent::SoakEvidenceCapturedV8(Box::new(evidence_v8::Evidence {
                trigger: FailureKind::StaleProgress,
                captured_at_us: 1_764_838_830_000_000,
                processes: vec![evidence_v8::ProcessEvidence {
                    pid: 5000,
                    ppid: 4999,
                    start_ticks: 1_000_000,
                    name: "python3".into(),
                    state: 'S',
                    cmdline: vec!["python3".into(), "train.py".into()],
                    threads: vec![ThreadEvidence {
                        tid: 5000,
                        name: "python3".into(),
                        state: 'S',
                        wchan: Some("futex_wait_queue".into()),
                        syscall: Some("futex".into()),
                    }],
                    kernel_stack: None,
                    python_stack: Some("Thread 5000 (idle): \"MainThread\"\n    wait_for_allreduce (train.py:12)\n".into()),
                    holds_gpu_device: true,
                }],
                cgroup: Some(CgroupEvidence {
                    version: 2,
                    path: "/user.slice/user-1000.slice".into(),
                    memory_max_bytes: Some(16 << 30),
                    oom_kill_count: Some(0),
                }),
                kernel_messages: vec![KernelMessage {
                    at_us: 1_764_838_829_000_000,
                    line: "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.".into(),
                }],
                unavailable: vec!["kernel stacks: /proc/PID/stack is readable by root only".into()],
            })),
        ),
        (
            s5(),
            StoredEvent::SoakFinishedV5 {
                end: Box::new(soak_v2::SoakEnd {
                    outcome: Outcome {
                        status: OutcomeStatus::Failed,
                        failure_kind: Some(FailureKind::ChildFailed),
                        reason: "process 5001 (python3) exited 3 while the command ran".into(),
                    },
                    exit: Some(ExitInfo {
                        code: None,
                        signal: Some(15),
                    }),
                    run_ms: 31_000,
                    teardown_ms: 2_100,
                    first_progress_ms: Some(1_000),
                    last_progress_ms: Some(1_000),
                    leaked_processes: Vec::new(),
                    stdout_tail: b"step 1\n".to_vec(),
                    stderr_tail: Vec::new(),
                }),
                findings: Box::new(soak_v9::Findings {
                    child: Some(ChildExit {
                        pid: 5001,
                        name: "python3".into(),
                        exit: ExitInfo {
                            code: Some(3),
                            signal: None,
                        },
                    }),
                    oom_kills: vec![OomKill {
                        pid: 5002,
                        name: "worker".into(),
                        source: OomSource::Kmsg,
                    }],
                    unkillable: vec![UnkillableProcess {
                        pid: 5003,
                        name: "python3".into(),
                        state: 'D',
                        wchan: Some("nv_wait".into()),
                    }],
                    gpu_release: Some(GpuRelease {
                        gpus: vec![GpuReleased {
                            uuid: "GPU-1111aaaa-0000-4000-8000-000000000001".into(),
                            memory_used_before_mib: Some(0),
                            memory_used_after_mib: Some(512),
                            released: Some(false),
                        }],
                        holders: vec![GpuHolder {
                            pid: 5004,
                            name: "worker".into(),
                            path: "/dev/nvidia0".into(),
                        }],
                    }),
                }),
            },
        ),
        (
            s5(),
            StoredEvent::ArtifactWritten {
                path: "/home/u/soak-5.json".into(),
                digest: "ef".repeat(32),
                bytes: 5_432,
            },
        ),
    ]);
    // Schema 6's soak, which saw another rank's job alarm (schema 9) before its verdict.
    let mut soak = schema_6_soak(supervisor);
    let verdict = soak.pop();
    soak.push((
        Subject::Soak("20261205T100000-f6f6".into()),
        StoredEvent::SoakJobAlarmSeen(Box::new(JobAlarmSeen {
            alarm: JobAlarm {
                job: "4242".into(),
                rank: Some(3),
                host: "node-8".into(),
                soak_id: "20261205T095959-a1a1".into(),
                failure_kind: "stale_progress".into(),
                reason: "no progress for 30.0 s (limit 30.0 s)".into(),
                at: 1_764_925_205.5,
            },
            seen_at: 1_764_925_206.25,
        })),
    ));
    soak.extend(verdict);
    events.extend(soak);
    // A start under way (its starter long gone).
    events.push((
        Subject::Daemon("gpu-1111aaaa".into()),
        StoredEvent::DaemonStarting {
            gpu: "GPU-1111aaaa-0000-4000-8000-000000000001".into(),
            pipe_directory: "/run/user/1000/unilab/mps/gpu-1111aaaa".into(),
            log_directory: "/home/u/.local/state/unilab/node-7/1000/mps/gpu-1111aaaa/log".into(),
            starter: ProcessIdentity {
                pid: 4243,
                start_ticks: 987_000,
            },
            job: Some("4242".into()),
        },
    ));
    // Schema 3: a lease on a shared daemon, taken by the process that started it, and ended.
    let holder = ProcessIdentity {
        pid: 4301,
        start_ticks: 988_000,
    };
    events.extend([
        (
            Subject::Daemon("job77-gpu-1111aaaa".into()),
            StoredEvent::LeaseAcquired {
                holder,
                job: Some("77".into()),
                started: true,
            },
        ),
        (
            Subject::Daemon("job77-gpu-1111aaaa".into()),
            StoredEvent::LeaseReleased {
                holder,
                reason: LeaseEnd::HolderGone,
            },
        ),
    ]);
    events
}

/// Schema 6: a soak held to budgets, its samples measured (PSS, GPU health, another tenant on
/// its GPU), failed as `resource_limit` for its memory growth.
fn schema_6_soak(supervisor: ProcessIdentity) -> Vec<(Subject, StoredEvent)> {
    measured_soak("20261205T100000-f6f6", 3, |_| 2, supervisor)
}

/// A soak like [`schema_6_soak`]'s of `samples` samples, the `i`-th of a tree of `processes(i)`
/// processes.
pub fn measured_soak(
    id: &str,
    samples: u64,
    processes: impl Fn(u64) -> u32,
    supervisor: ProcessIdentity,
) -> Vec<(Subject, StoredEvent)> {
    let s6 = || Subject::Soak(id.into());
    let measured = |index: u64| {
        let sample = sample(index, processes(index));
        let measures = soak_v9::Measures {
            pss_bytes: (0..sample.processes.len())
                .map(|i| (i == 0).then_some((100 + 50 * index) << 20))
                .collect(),
            gpus: vec![GpuHealth {
                temperature_c: Some(60 + index as u32),
                power_mw: Some(250_500),
                sm_clock_mhz: Some(1_980),
                throttle_mask: Some(if index == 0 { 0 } else { 0x44 }),
                ecc_uncorrected_volatile: Some(index),
                retired_pages_pending: Some(false),
                other_processes: vec![GpuProcessSample {
                    pid: 7777,
                    used_memory_mib: Some(40_960),
                }],
            }],
        };
        (
            s6(),
            StoredEvent::SoakSampledV9 {
                sample: Box::new(sample),
                measures: Box::new(measures),
            },
        )
    };
    vec![
        (
            s6(),
            StoredEvent::SoakStartedV8 {
                start: Box::new(soak_v2::SoakStart {
                    soak_id: id.into(),
                    command: vec!["python3".into(), "train.py".into()],
                    cwd: "/home/u/project".into(),
                    progress_dir: "/home/u/project/progress".into(),
                    output: "/home/u/soak-6.json".into(),
                    parameters: SoakParameters {
                        sample_interval_ms: 5_000,
                        startup_timeout_ms: 60_000,
                        stale_progress_ms: 30_000,
                        shutdown_grace_ms: 2_000,
                        min_duration_ms: 0,
                    },
                    require_progress: true,
                    metadata: BTreeMap::from([("node".into(), "node-7".into())]),
                    environment: BTreeMap::from([("PYTHONUNBUFFERED".into(), "1".into())]),
                    supervisor,
                    runtime_json: r#"{"software":{"unilab":"0.4.0"}}"#.into(),
                    ticks_per_second: 100,
                }),
                supervision: soak_v9::Supervision {
                    fail_fast: false,
                    py_spy: None,
                    dump_signal: None,
                    dump_wait_ms: 2_000,
                    evidence_unavailable: vec!["python stacks: off (--py-spy off)".into()],
                },
                limits: Limits {
                    max_memory_bytes: Some(64 << 30),
                    max_gpu_memory_bytes: Some(40 << 30),
                    max_memory_growth_bytes_per_hour: Some(200 << 20),
                    warmup_ms: Some(3_000),
                    memory_ceiling_bytes: Some(128 << 30),
                    memory_ceiling_source: Some("cgroup /slurm/job_7".into()),
                },
            },
        ),
    ]
    .into_iter()
    .chain((0..samples).map(measured))
    .chain([(
            s6(),
            StoredEvent::SoakFinishedV9 {
                end: Box::new(soak_v2::SoakEnd {
                    outcome: Outcome {
                        status: OutcomeStatus::Failed,
                        failure_kind: Some(FailureKind::ResourceLimit),
                        reason: "the tree's memory (PSS) grows 36.0 GiB/h since 5.0 s, over the --max-memory-growth limit of 200.0 MiB/h".into(),
                    },
                    exit: Some(ExitInfo {
                        code: None,
                        signal: Some(15),
                    }),
                    run_ms: 10_500,
                    teardown_ms: 300,
                    first_progress_ms: Some(5_000),
                    last_progress_ms: Some(10_000),
                    leaked_processes: Vec::new(),
                    stdout_tail: b"step 2\n".to_vec(),
                    stderr_tail: Vec::new(),
                }),
                findings: Box::new(soak_v9::Findings {
                    child: None,
                    oom_kills: Vec::new(),
                    unkillable: Vec::new(),
                    gpu_release: None,
                }),
                limit: Some(ResourceLimit::MemoryGrowth),
            },
        )])
    .collect()
}

/// A soak sample in schema 1's form, of a tree of `processes` processes.
pub fn sample_v1(index: u64, processes: u32) -> soak_v1::Sample {
    soak_v1::Sample {
        index,
        elapsed_ms: index * 5_000,
        processes: (0..processes)
            .map(|i| soak_v1::ProcessSample {
                pid: 5000 + i,
                ppid: if i == 0 { 4999 } else { 5000 },
                start_ticks: 1_000_000 + u64::from(i),
                name: format!("worker-{i}"),
                state: 'S',
                rss_bytes: 512 * 1024 * 1024,
                cpu_ticks: 1_234 + u64::from(i),
                threads: 8,
                open_fds: Some(64),
                read_bytes: Some(1 << 20),
                write_bytes: None,
            })
            .collect(),
        gpus: vec![GpuSample {
            index: 0,
            uuid: "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f".into(),
            memory_used_mib: Some(40_000),
            memory_total_mib: Some(143_771),
            utilization_percent: None,
            processes: vec![GpuProcessSample {
                pid: 5000,
                used_memory_mib: Some(39_000),
            }],
        }],
        progress: ProgressSignature {
            files: 3,
            bytes: 4096,
            newest_mtime_ns: Some(1_764_679_315_000_000_000),
        },
        sampler_cost_us: 850,
        errors: vec!["nvidia-smi did not answer within 10 s".into()],
    }
}

/// A soak sample of a tree of `processes` processes, the command still running.
pub fn sample(index: u64, processes: u32) -> Sample {
    let old = sample_v1(index, processes);
    Sample {
        index,
        elapsed_ms: old.elapsed_ms,
        after_exit: false,
        processes: old
            .processes
            .into_iter()
            .map(|p| ProcessSample {
                pid: p.pid,
                ppid: p.ppid,
                start_ticks: p.start_ticks,
                name: p.name,
                state: p.state,
                rss_bytes: p.rss_bytes,
                cpu_ticks: p.cpu_ticks + index * 100,
                reaped_children_cpu_ticks: 7,
                threads: p.threads,
                open_fds: p.open_fds,
                read_bytes: p.read_bytes,
                write_bytes: p.write_bytes,
            })
            .collect(),
        reaped_cpu_ticks: 2_000 * index,
        gpus: Some(old.gpus),
        progress: old.progress,
        sampler_cost_us: old.sampler_cost_us,
        errors: old.errors,
    }
}

/// The event a test writer appends as its `i`-th: identifiable by `(writer, i)`, and every
/// 50th one a large sample, so records vary in size.
pub fn writer_event(writer: u32, i: u64) -> (Subject, StoredEvent) {
    if i % 50 == 49 {
        let mut big = sample(i, 200);
        big.processes[0].pid = writer;
        big.processes[0].start_ticks = i;
        return (
            Subject::Soak(format!("writer-{writer}")),
            StoredEvent::SoakSampledV5(Box::new(big)),
        );
    }
    (
        Subject::Daemon(format!("writer-{writer}")),
        StoredEvent::DaemonVerifiedLive {
            process: ProcessIdentity {
                pid: writer,
                start_ticks: i,
            },
        },
    )
}

/// Recovers `(writer, i)` from an event made by [`writer_event`], as the log reads it.
pub fn writer_identity(event: &Event) -> Option<(u32, u64)> {
    match event {
        Event::DaemonVerifiedLive { process } => Some((process.pid, process.start_ticks)),
        Event::SoakSampled { sample, .. } => {
            sample.processes.first().map(|p| (p.pid, p.start_ticks))
        }
        _ => None,
    }
}
