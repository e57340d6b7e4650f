//! What a soak records is bounded where it is built (`Event::sampled`, `Event::evidence_captured`,
//! `Event::finished`), and the log takes a record exactly when its reader can decode it: any
//! sample, evidence or verdict, however large its inputs, appends and reads back, and the
//! line between a record the log takes and one it refuses is where its reader's limit is.

use proptest::collection::vec;
use proptest::prelude::*;
use unilab::testing::codec::{MAX_RECORD_BYTES, claimed};
use unilab::*;

use crate::common::*;

/// Text of any length up to `max` bytes: mostly short, sometimes of one character repeated
/// (cheap to make at any size), now and then of several bytes a character.
fn text(max: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z0-9 /._-]{0,12}",
        2 => (prop_oneof![Just('x'), Just('é'), Just('€'), Just('𝄞')], 0..=max)
            .prop_map(|(c, bytes)| c.to_string().repeat(bytes / c.len_utf8())),
    ]
}

/// A count up to `max`, with the small ones most likely.
fn count(max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![3 => 0..=8usize, 1 => 0..=max]
}

fn process_sample(index: usize, name: &str) -> ProcessSample {
    ProcessSample {
        pid: 1000 + index as u32,
        ppid: 1000,
        start_ticks: 7 + index as u64,
        name: name.to_owned(),
        state: 'S',
        rss_bytes: 1 << 30,
        cpu_ticks: index as u64,
        reaped_children_cpu_ticks: 0,
        threads: 4,
        open_fds: Some(9),
        read_bytes: None,
        write_bytes: Some(u64::MAX),
    }
}

fn gpu_process(index: usize) -> GpuProcessSample {
    GpuProcessSample {
        pid: index as u32,
        used_memory_mib: Some(512),
    }
}

/// A sample of up to 200,000 processes, 100 GPUs of up to 3,000 processes each, 200 errors, and
/// names, UUIDs and errors of any length.
fn sample() -> impl Strategy<Value = (Sample, Measures)> {
    (
        (count(200_000), text(200), any::<bool>()),
        (count(100), count(3_000), text(4_096)),
        (count(200), text(8_192)),
    )
        .prop_map(
            |((processes, name, pss), (gpus, per_gpu, uuid), (errors, error))| {
                let sample = Sample {
                    index: 3,
                    elapsed_ms: 3_000,
                    after_exit: false,
                    processes: (0..processes).map(|i| process_sample(i, &name)).collect(),
                    reaped_cpu_ticks: 0,
                    gpus: Some(
                        (0..gpus)
                            .map(|i| GpuSample {
                                index: i as u32,
                                uuid: uuid.clone(),
                                memory_used_mib: Some(1),
                                memory_total_mib: None,
                                utilization_percent: Some(99),
                                processes: (0..per_gpu).map(gpu_process).collect(),
                            })
                            .collect(),
                    ),
                    progress: ProgressSignature::default(),
                    sampler_cost_us: 400,
                    errors: vec![error; errors],
                };
                let measures = Measures {
                    heartbeat: None,
                    pss_bytes: if pss {
                        vec![Some(1 << 20); processes]
                    } else {
                        Vec::new()
                    },
                    gpus: (0..gpus)
                        .map(|_| GpuHealth {
                            other_processes: (0..per_gpu).map(gpu_process).collect(),
                            ..GpuHealth::default()
                        })
                        .collect(),
                };
                (sample, measures)
            },
        )
}

/// A command line of up to `args` arguments of up to `bytes` bytes each.
fn cmdline(args: usize, bytes: usize) -> impl Strategy<Value = Vec<String>> {
    (count(args), text(bytes), text(64)).prop_map(|(n, long, short)| {
        (0..n)
            .map(|i| {
                if i % 2 == 0 {
                    long.clone()
                } else {
                    short.clone()
                }
            })
            .collect()
    })
}

/// Evidence of up to 1,500 processes — command lines of up to 40 MB all told, up to 2,000
/// threads each (100,000 all told), stacks of up to 2 MB — and up to 2,000 kernel lines and
/// notes of any length.
fn evidence() -> impl Strategy<Value = Evidence> {
    let process = (
        cmdline(40, 1 << 20),
        (count(2_000), text(100), text(600)),
        (text(2 << 20), text(64 << 10)),
    );
    (
        count(1_500),
        process,
        (count(2_000), text(4_096)),
        (count(2_000), text(4_096)),
    )
        .prop_map(
            |(processes, (cmdline, (threads, name, wchan), (python, kernel)), lines, notes)| {
                // Forty megabytes of command lines at most, however many processes hold them.
                let bytes: usize = cmdline.iter().map(String::len).sum();
                let holding = processes.min((40 << 20) / bytes.max(1)).max(1);
                let threads = threads.min(100_000 / processes.max(1));
                Evidence {
                    trigger: FailureKind::StaleProgress,
                    captured_at_us: 1_764_676_800_000_000,
                    processes: (0..processes)
                        .map(|i| ProcessEvidence {
                            pid: 1000 + i as u32,
                            ppid: 1000,
                            start_ticks: 7,
                            name: name.clone(),
                            state: 'D',
                            cmdline: if i < holding {
                                cmdline.clone()
                            } else {
                                Vec::new()
                            },
                            threads: (0..threads)
                                .map(|t| ThreadEvidence {
                                    tid: t as u32,
                                    name: name.clone(),
                                    state: 'S',
                                    wchan: Some(wchan.clone()),
                                    syscall: Some(wchan.clone()),
                                })
                                .collect(),
                            kernel_stack: (i < 64).then(|| kernel.clone()),
                            python_stack: (i < 4).then(|| python.clone()),
                            holds_gpu_device: true,
                            rank: None,
                            collectives: None,
                        })
                        .collect(),
                    cgroup: Some(CgroupEvidence {
                        version: 2,
                        path: notes.1.clone(),
                        memory_max_bytes: None,
                        oom_kill_count: Some(1),
                    }),
                    kernel_messages: (0..lines.0)
                        .map(|i| KernelMessage {
                            at_us: i as i64,
                            line: lines.1.clone(),
                        })
                        .collect(),
                    unavailable: vec![notes.1; notes.0],
                    mps: Vec::new(),
                }
            },
        )
}

/// A verdict with up to 1,500 leaked processes (command lines of up to 40 MB all told), tails
/// and a reason of up to 2 MB, and up to 2,000 OOM kills, unkillable processes and GPU holders.
fn verdict() -> impl Strategy<Value = (SoakEnd, Findings)> {
    (
        (count(1_500), cmdline(40, 1 << 20), text(200)),
        (text(2 << 20), vec(any::<u8>(), 0..64), count(2 << 20)),
        (count(2_000), text(1_000), count(200)),
    )
        .prop_map(
            |((leaked, cmdline, name), (reason, tail, tail_len), (listed, word, gpus))| {
                let bytes: usize = cmdline.iter().map(String::len).sum();
                let holding = leaked.min((40 << 20) / bytes.max(1)).max(1);
                let tail: Vec<u8> = tail.iter().copied().cycle().take(tail_len).collect();
                let end = SoakEnd {
                    outcome: Outcome {
                        status: OutcomeStatus::Failed,
                        failure_kind: Some(FailureKind::LeakedProcesses),
                        reason,
                    },
                    exit: Some(ExitInfo {
                        code: Some(0),
                        signal: None,
                    }),
                    run_ms: 1_000,
                    teardown_ms: 500,
                    first_progress_ms: Some(10),
                    last_progress_ms: None,
                    leaked_processes: (0..leaked)
                        .map(|i| LeakedProcess {
                            identity: ProcessIdentity {
                                pid: i as u32,
                                start_ticks: 7,
                            },
                            name: name.clone(),
                            cmdline: if i < holding {
                                cmdline.clone()
                            } else {
                                Vec::new()
                            },
                        })
                        .collect(),
                    stdout_tail: tail.clone(),
                    stderr_tail: tail,
                };
                let findings = Findings {
                    heartbeat: None,
                    child: Some(ChildExit {
                        pid: 1,
                        name: name.clone(),
                        exit: ExitInfo {
                            code: Some(1),
                            signal: None,
                        },
                    }),
                    oom_kills: (0..listed)
                        .map(|i| OomKill {
                            pid: i as u32,
                            name: name.clone(),
                            source: OomSource::Kmsg,
                        })
                        .collect(),
                    unkillable: (0..listed)
                        .map(|i| UnkillableProcess {
                            pid: i as u32,
                            name: name.clone(),
                            state: 'D',
                            wchan: Some(word.clone()),
                        })
                        .collect(),
                    gpu_release: Some(GpuRelease {
                        gpus: (0..gpus)
                            .map(|_| GpuReleased {
                                uuid: word.clone(),
                                memory_used_before_mib: Some(1),
                                memory_used_after_mib: None,
                                released: Some(false),
                            })
                            .collect(),
                        holders: (0..listed)
                            .map(|i| GpuHolder {
                                pid: i as u32,
                                name: name.clone(),
                                path: word.clone(),
                            })
                            .collect(),
                    }),
                };
                (end, findings)
            },
        )
}

/// The envelope `event` is stored in, for counting what it claims: the claims of numbers do not
/// depend on their values.
fn envelope(root: &TestRoot, subject: &Subject, event: Event) -> StoredEnvelope {
    StoredEnvelope {
        seq: 0,
        recorded_at_us: 0,
        scope: root.scope(),
        subject: subject.clone(),
        event: event.into(),
    }
}

/// Appends `event` to a fresh log, reads it back and verifies the log: what a built record
/// must survive. It also keeps to half of what the reader allows.
fn appends_and_reads_back(event: Event) -> Result<(), TestCaseError> {
    let root = TestRoot::new();
    let log = root.log();
    let subject = Subject::Soak("20261206T000000-b0b0".into());
    let claims = claimed(&envelope(&root, &subject, event.clone()));
    prop_assert!(claims <= MAX_RECORD_BYTES / 2, "{claims} bytes claimed");
    let appended = log.append(subject, event.clone());
    prop_assert!(appended.is_ok(), "{:?}", appended.err());
    let snapshot = log.snapshot().unwrap();
    let back = snapshot.get(appended.unwrap().seq).unwrap().unwrap();
    prop_assert!(back.envelope.event == event, "read back as it was appended");
    prop_assert!(snapshot.verify(PROJECTIONS).is_ok());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever the tree and the host hand the sampler, its sample is recorded and read back.
    #[test]
    fn any_sample_appends_and_reads_back((sample, measures) in sample()) {
        appends_and_reads_back(Event::sampled(sample, measures, None))?;
    }

    /// Whatever the tree's command lines, threads and stacks, its evidence is recorded and read
    /// back.
    #[test]
    fn any_evidence_appends_and_reads_back(evidence in evidence()) {
        appends_and_reads_back(Event::evidence_captured(evidence))?;
    }

    /// Whatever the processes left behind and the output, the verdict is recorded and read
    /// back.
    #[test]
    fn any_verdict_appends_and_reads_back((end, findings) in verdict()) {
        appends_and_reads_back(Event::finished(end, findings, None))?;
    }
}

/// Evidence whose envelope claims exactly `claims` bytes, made up with one long argument.
fn evidence_claiming(root: &TestRoot, subject: &Subject, claims: usize) -> Event {
    let with = |arg: String| {
        Event::SoakEvidenceCaptured(Box::new(Evidence {
            trigger: FailureKind::Interrupted,
            captured_at_us: 0,
            processes: vec![ProcessEvidence {
                pid: 1,
                ppid: 0,
                start_ticks: 1,
                name: "python3".into(),
                state: 'S',
                cmdline: vec![arg],
                threads: Vec::new(),
                kernel_stack: None,
                python_stack: None,
                holds_gpu_device: false,
                rank: None,
                collectives: None,
            }],
            cgroup: None,
            kernel_messages: Vec::new(),
            unavailable: Vec::new(),
            mps: Vec::new(),
        }))
    };
    let bare = claimed(&envelope(root, subject, with(String::new())));
    let event = with("a".repeat(claims - bare));
    assert_eq!(claimed(&envelope(root, subject, event.clone())), claims);
    event
}

/// The line between what `append` takes and what it refuses is exactly the reader's: a record
/// that claims 16 MiB is taken and reads back; one that claims a byte more is refused, and
/// nothing of it is committed.
#[test]
fn append_takes_a_record_up_to_the_readers_limit_and_not_a_byte_more() {
    let root = TestRoot::new();
    let log = root.log();
    let subject = Subject::Soak("20261206T000000-edge".into());
    let over = evidence_claiming(&root, &subject, MAX_RECORD_BYTES + 1);
    let refused = log.append(subject.clone(), over);
    assert!(
        matches!(refused, Err(LogError::TooLarge { .. })),
        "{refused:?}"
    );
    assert_eq!(
        log.snapshot().unwrap().head().unwrap().0,
        0,
        "nothing committed"
    );

    let at = evidence_claiming(&root, &subject, MAX_RECORD_BYTES);
    let appended = log.append(subject, at.clone()).unwrap();
    let snapshot = log.snapshot().unwrap();
    let back = snapshot.get(appended.seq).unwrap().unwrap();
    assert!(back.envelope.event == at);
    snapshot.verify(PROJECTIONS).unwrap();
}

/// A sample is stored packed, but every reader is handed it whole: a sample whose whole form
/// the reader could not decode is refused, though its packed form is small.
#[test]
fn append_refuses_a_sample_whose_whole_form_could_not_be_read() {
    let root = TestRoot::new();
    let log = root.log();
    let subject = Subject::Soak("20261206T000000-pack".into());
    // Some 80 bytes claimed a process whole, a few packed: 250,000 of them claim 20 MB whole.
    let sample = Sample {
        index: 1,
        elapsed_ms: 1_000,
        after_exit: false,
        processes: (0..250_000).map(|i| process_sample(i, "w")).collect(),
        reaped_cpu_ticks: 0,
        gpus: None,
        progress: ProgressSignature::default(),
        sampler_cost_us: 1,
        errors: Vec::new(),
    };
    let raw = Event::SoakSampled {
        sample: Box::new(sample),
        measures: Some(Box::new(Measures::default())),
        progress: None,
    };
    assert!(claimed(&envelope(&root, &subject, raw.clone())) > MAX_RECORD_BYTES);
    let refused = log.append(subject.clone(), raw.clone());
    assert!(
        matches!(refused, Err(LogError::TooLarge { .. })),
        "{refused:?}"
    );
    assert_eq!(
        log.snapshot().unwrap().head().unwrap().0,
        0,
        "nothing committed"
    );
    // Built as the soak builds it, it is kept to its budget, and recorded.
    let Event::SoakSampled {
        sample,
        measures: Some(measures),
        ..
    } = raw
    else {
        unreachable!()
    };
    let bounded = Event::sampled(*sample, *measures, None);
    let Event::SoakSampled { sample, .. } = &bounded else {
        unreachable!()
    };
    assert_eq!(sample.processes.len(), 8192);
    assert!(
        sample
            .errors
            .contains(&"unilab kept 8192 of the tree's 250000 processes in this sample".into()),
        "{:?}",
        sample.errors
    );
    log.append(subject, bounded).unwrap();
    log.snapshot().unwrap().verify(PROJECTIONS).unwrap();
}

/// Evidence of `n` processes, each over every budget a process has: its command line, its
/// threads and their names and wait channels, its stacks; with kernel lines and notes over
/// theirs.
fn evidence_over_every_budget(n: usize) -> Evidence {
    let over = |bytes: usize| "y".repeat(bytes + 1);
    let share = |each: usize, all: usize| each.min(all / n) + 1;
    Evidence {
        trigger: FailureKind::StaleProgress,
        captured_at_us: 0,
        processes: (0..n)
            .map(|i| ProcessEvidence {
                pid: i as u32,
                ppid: 0,
                start_ticks: 0,
                name: over(64),
                state: 'S',
                cmdline: vec![over(share(64 << 10, 2 << 20))],
                threads: (0..share(1024, 4096))
                    .map(|t| ThreadEvidence {
                        tid: t as u32,
                        name: over(64),
                        state: 'S',
                        wchan: Some(over(128)),
                        syscall: Some(over(128)),
                    })
                    .collect(),
                kernel_stack: Some(over(share(16 << 10, 512 << 10))),
                python_stack: Some(over(share(256 << 10, 1 << 20))),
                holds_gpu_device: true,
                rank: None,
                collectives: None,
            })
            .collect(),
        cgroup: Some(CgroupEvidence {
            version: 2,
            path: over(1024),
            memory_max_bytes: Some(1),
            oom_kill_count: Some(1),
        }),
        kernel_messages: (0..513)
            .map(|i| KernelMessage {
                at_us: i,
                line: over(1024),
            })
            .collect(),
        unavailable: vec![over(1024); 257],
        mps: (0..65)
            .map(|server| MpsTeardown {
                daemon: over(64),
                server_pid: server,
                terminated: (0..1025).collect(),
            })
            .collect(),
    }
}

/// Whatever the tree, the budgets keep each record within half of what the reader allows: a
/// tree at the evidence's process budget and one whose few processes each get their full
/// budgets, every one of them over all of its budgets.
#[test]
fn the_budgets_keep_each_record_within_half_the_limit_whatever_the_tree() {
    let root = TestRoot::new();
    let subject = Subject::Soak("20261206T000000-full".into());
    let half = MAX_RECORD_BYTES / 2;
    for n in [1, 4, 32, 1024, 1025] {
        let evidence = Event::evidence_captured(evidence_over_every_budget(n));
        let claims = claimed(&envelope(&root, &subject, evidence));
        assert!(claims <= half, "evidence of {n} processes: {claims} bytes");
    }

    let over = |bytes: usize| "z".repeat(bytes + 1);
    let gpu_processes = || (0..1025).map(gpu_process).collect::<Vec<_>>();
    let sample = Sample {
        index: 1,
        elapsed_ms: 0,
        after_exit: true,
        processes: (0..8193).map(|i| process_sample(i, &over(64))).collect(),
        reaped_cpu_ticks: 0,
        gpus: Some(
            (0..65)
                .map(|i| GpuSample {
                    index: i,
                    uuid: over(128),
                    memory_used_mib: Some(1),
                    memory_total_mib: Some(1),
                    utilization_percent: Some(1),
                    processes: gpu_processes(),
                })
                .collect(),
        ),
        progress: ProgressSignature::default(),
        sampler_cost_us: 0,
        errors: vec![over(1024); 65],
    };
    let measures = Measures {
        heartbeat: None,
        pss_bytes: vec![Some(u64::MAX); 8193],
        gpus: (0..65)
            .map(|_| GpuHealth {
                other_processes: gpu_processes(),
                ..GpuHealth::default()
            })
            .collect(),
    };
    let sampled = Event::sampled(sample, measures, None);
    let claims = claimed(&envelope(&root, &subject, sampled));
    assert!(claims <= half, "a sample: {claims} bytes");

    let (mut end, mut findings) = (
        SoakEnd {
            outcome: Outcome {
                status: OutcomeStatus::Failed,
                failure_kind: Some(FailureKind::LeakedProcesses),
                reason: over(16 << 10),
            },
            exit: None,
            run_ms: 0,
            teardown_ms: 0,
            first_progress_ms: None,
            last_progress_ms: None,
            leaked_processes: Vec::new(),
            stdout_tail: vec![b'o'; (256 << 10) + 1],
            stderr_tail: vec![b'e'; (256 << 10) + 1],
        },
        Findings::default(),
    );
    end.leaked_processes = (0..1025)
        .map(|i| LeakedProcess {
            identity: ProcessIdentity {
                pid: i,
                start_ticks: 0,
            },
            name: over(64),
            cmdline: vec![over(2 << 10)],
        })
        .collect();
    findings.oom_kills = (0..1025)
        .map(|i| OomKill {
            pid: i,
            name: over(64),
            source: OomSource::Cgroup,
        })
        .collect();
    findings.unkillable = (0..1025)
        .map(|i| UnkillableProcess {
            pid: i,
            name: over(64),
            state: 'D',
            wchan: Some(over(128)),
        })
        .collect();
    findings.gpu_release = Some(GpuRelease {
        gpus: (0..65)
            .map(|_| GpuReleased {
                uuid: over(128),
                memory_used_before_mib: None,
                memory_used_after_mib: None,
                released: None,
            })
            .collect(),
        holders: (0..1025)
            .map(|i| GpuHolder {
                pid: i,
                name: over(64),
                path: over(128),
            })
            .collect(),
    });
    let finished = Event::finished(end, findings, Some(ResourceLimit::Memory));
    let claims = claimed(&envelope(&root, &subject, finished));
    assert!(claims <= half, "a verdict: {claims} bytes");
}

/// The MPS clients an evidence names are bounded like its processes: 64 servers, 1,024 clients
/// in all, and a note says how many were left out.
#[test]
fn the_mps_clients_of_an_evidence_are_bounded_and_the_cut_said() {
    let Event::SoakEvidenceCaptured(evidence) =
        Event::evidence_captured(evidence_over_every_budget(1))
    else {
        panic!("an evidence");
    };
    assert_eq!(evidence.mps.len(), 64);
    let clients: usize = evidence.mps.iter().map(|m| m.terminated.len()).sum();
    assert_eq!(clients, 1024);
    assert!(evidence.mps.iter().all(|m| m.daemon.len() <= 64));
    for note in [
        "unilab kept 64 of the 65 MPS servers whose clients were ended",
        "unilab kept 1024 of the MPS clients ended: 64576 left out",
    ] {
        assert!(
            evidence.unavailable.iter().any(|n| n == note),
            "{note:?} in {:?}",
            &evidence.unavailable[evidence.unavailable.len().saturating_sub(4)..]
        );
    }
}
