//! Property tests: every event kind survives the codec round trip, arbitrary bytes never make
//! a decoder panic, and the chain rejects any single modified, dropped or reordered record.

use std::collections::BTreeMap;

use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use unilab::EVENT_KINDS;
use unilab::ProcessIdentity;
use unilab::testing::chain::{self, ChainWalker, Hash};
use unilab::testing::codec;
use unilab::*;
use unilab::{DaemonLimits, LeaseEnd, StaleReason, StartedDaemon, StopMethod};
use unilab::{Event, Scope, StoredEnvelope, StoredEvent, Subject};
use unilab::{GpuIdentity, TopologyMode};

fn text() -> impl Strategy<Value = String> {
    prop_oneof![".{0,24}", "[a-zA-Z0-9/_.-]{0,40}"]
}

fn identity() -> impl Strategy<Value = ProcessIdentity> {
    (any::<u32>(), any::<u64>()).prop_map(|(pid, start_ticks)| ProcessIdentity { pid, start_ticks })
}

fn mode() -> impl Strategy<Value = TopologyMode> {
    prop_oneof![
        Just(TopologyMode::SingleGpu),
        Just(TopologyMode::SingleTaskMultiGpu),
        Just(TopologyMode::TaskPerGpu)
    ]
}

fn record() -> impl Strategy<Value = StartedDaemon> {
    (
        text(),
        any::<u32>(),
        text(),
        mode(),
        vec(text(), 0..3),
        text(),
        text(),
        identity(),
        any::<f64>(),
    )
        .prop_map(
            |(name, uid, host, topology_mode, gpu_uuids, pipe, log, p, created_at)| StartedDaemon {
                name,
                uid,
                host,
                topology_mode,
                gpu_uuids,
                pipe_directory: pipe,
                log_directory: log,
                pid: p.pid,
                process_start_ticks: p.start_ticks,
                created_at,
            },
        )
}

fn process_sample() -> impl Strategy<Value = soak_v1::ProcessSample> {
    (
        identity(),
        any::<u32>(),
        text(),
        any::<char>(),
        any::<(u64, u64, u32)>(),
        any::<(Option<u32>, Option<u64>, Option<u64>)>(),
    )
        .prop_map(
            |(
                id,
                ppid,
                name,
                state,
                (rss_bytes, cpu_ticks, threads),
                (open_fds, read_bytes, write_bytes),
            )| {
                soak_v1::ProcessSample {
                    pid: id.pid,
                    ppid,
                    start_ticks: id.start_ticks,
                    name,
                    state,
                    rss_bytes,
                    cpu_ticks,
                    threads,
                    open_fds,
                    read_bytes,
                    write_bytes,
                }
            },
        )
}

fn gpu_sample() -> impl Strategy<Value = GpuSample> {
    (
        any::<u32>(),
        text(),
        any::<(Option<u64>, Option<u64>, Option<u32>)>(),
        vec(any::<(u32, Option<u64>)>(), 0..3),
    )
        .prop_map(|(index, uuid, (used, total, util), procs)| GpuSample {
            index,
            uuid,
            memory_used_mib: used,
            memory_total_mib: total,
            utilization_percent: util,
            processes: procs
                .into_iter()
                .map(|(pid, used_memory_mib)| GpuProcessSample {
                    pid,
                    used_memory_mib,
                })
                .collect(),
        })
}

fn sample_v1() -> impl Strategy<Value = soak_v1::Sample> {
    (
        any::<(u64, u64, u64)>(),
        vec(process_sample(), 0..5),
        vec(gpu_sample(), 0..3),
        any::<(u64, u64, Option<i64>)>(),
        vec(text(), 0..3),
    )
        .prop_map(
            |(
                (index, elapsed_ms, sampler_cost_us),
                processes,
                gpus,
                (files, bytes, mtime),
                errors,
            )| soak_v1::Sample {
                index,
                elapsed_ms,
                processes,
                gpus,
                progress: ProgressSignature {
                    files,
                    bytes,
                    newest_mtime_ns: mtime,
                },
                sampler_cost_us,
                errors,
            },
        )
}

fn soak_start_v1() -> impl Strategy<Value = soak_v1::SoakStart> {
    (
        (text(), vec(text(), 1..4), text(), text(), text()),
        any::<[u64; 5]>(),
        btree_map(text(), text(), 0..3),
        btree_map(text(), text(), 0..3),
        identity(),
        text(),
    )
        .prop_map(
            |(
                (soak_id, command, cwd, progress_dir, output),
                p,
                metadata,
                environment,
                supervisor,
                runtime_json,
            )| {
                soak_v1::SoakStart {
                    soak_id,
                    command,
                    cwd,
                    progress_dir,
                    output,
                    parameters: SoakParameters {
                        sample_interval_ms: p[0],
                        startup_timeout_ms: p[1],
                        stale_progress_ms: p[2],
                        shutdown_grace_ms: p[3],
                        min_duration_ms: p[4],
                    },
                    metadata,
                    environment,
                    supervisor,
                    runtime_json,
                }
            },
        )
}

fn failure_kind() -> impl Strategy<Value = FailureKind> {
    prop_oneof![
        Just(FailureKind::StartupTimeout),
        Just(FailureKind::StaleProgress),
        Just(FailureKind::CommandFailed),
        Just(FailureKind::TooShort),
        Just(FailureKind::LeakedProcesses),
        Just(FailureKind::Interrupted),
        Just(FailureKind::SpawnFailed),
        Just(FailureKind::MonitorError),
        Just(FailureKind::NoProgress),
        Just(FailureKind::ChildFailed),
        Just(FailureKind::ResourceLimit),
    ]
}

fn limits() -> impl Strategy<Value = Limits> {
    (
        option::of(any::<u64>()),
        option::of(any::<u64>()),
        option::of(any::<u64>()),
        option::of(any::<u64>()),
        option::of((any::<u64>(), text())),
    )
        .prop_map(|(memory, gpu, growth, warmup, ceiling)| Limits {
            max_memory_bytes: memory,
            max_gpu_memory_bytes: gpu,
            max_memory_growth_bytes_per_hour: growth,
            warmup_ms: warmup,
            memory_ceiling_bytes: ceiling.as_ref().map(|c| c.0),
            memory_ceiling_source: ceiling.map(|c| c.1),
        })
}

fn gpu_health() -> impl Strategy<Value = GpuHealth> {
    (
        option::of(any::<u32>()),
        option::of(any::<u64>()),
        option::of(any::<u32>()),
        option::of(any::<u64>()),
        option::of(any::<u64>()),
        option::of(any::<bool>()),
        vec(
            (any::<u32>(), option::of(any::<u64>())).prop_map(|(pid, used_memory_mib)| {
                GpuProcessSample {
                    pid,
                    used_memory_mib,
                }
            }),
            0..3,
        ),
    )
        .prop_map(
            |(temperature_c, power_mw, sm_clock_mhz, throttle_mask, ecc, retired, others)| {
                GpuHealth {
                    temperature_c,
                    power_mw,
                    sm_clock_mhz,
                    throttle_mask,
                    ecc_uncorrected_volatile: ecc,
                    retired_pages_pending: retired,
                    other_processes: others,
                }
            },
        )
}

fn measures() -> impl Strategy<Value = Measures> {
    (vec(option::of(any::<u64>()), 0..8), vec(gpu_health(), 0..3))
        .prop_map(|(pss_bytes, gpus)| Measures { pss_bytes, gpus })
}

fn resource_limit() -> impl Strategy<Value = ResourceLimit> {
    prop_oneof![
        Just(ResourceLimit::Memory),
        Just(ResourceLimit::GpuMemory),
        Just(ResourceLimit::MemoryGrowth),
    ]
}

fn soak_end_v1() -> impl Strategy<Value = soak_v1::SoakEnd> {
    (
        prop_oneof![
            Just(OutcomeStatus::Passed),
            Just(OutcomeStatus::Failed),
            Just(OutcomeStatus::Abandoned)
        ],
        option::of(failure_kind()),
        text(),
        option::of(any::<(Option<i32>, Option<i32>)>()),
        any::<(u64, Option<u64>, Option<u64>)>(),
        vec((identity(), text(), vec(text(), 0..3)), 0..3),
        (vec(any::<u8>(), 0..64), vec(any::<u8>(), 0..64)),
    )
        .prop_map(
            |(
                status,
                failure_kind,
                reason,
                exit,
                (duration_ms, first, last),
                leaked,
                (stdout_tail, stderr_tail),
            )| {
                soak_v1::SoakEnd {
                    outcome: Outcome {
                        status,
                        failure_kind,
                        reason,
                    },
                    exit: exit.map(|(code, signal)| ExitInfo { code, signal }),
                    duration_ms,
                    first_progress_ms: first,
                    last_progress_ms: last,
                    leaked_processes: leaked
                        .into_iter()
                        .map(|(identity, name, cmdline)| LeakedProcess {
                            identity,
                            name,
                            cmdline,
                        })
                        .collect(),
                    stdout_tail,
                    stderr_tail,
                }
            },
        )
}

/// Schema 2's sample: schema 1's and what it added.
fn sample() -> impl Strategy<Value = Sample> {
    (
        sample_v1(),
        any::<(bool, u64, bool)>(),
        vec(any::<u64>(), 0..5),
    )
        .prop_map(
            |(old, (after_exit, reaped_cpu_ticks, gpus_known), reaped)| Sample {
                index: old.index,
                elapsed_ms: old.elapsed_ms,
                after_exit,
                processes: old
                    .processes
                    .into_iter()
                    .zip(reaped.into_iter().chain(std::iter::repeat(0)))
                    .map(|(p, reaped_children_cpu_ticks)| ProcessSample {
                        pid: p.pid,
                        ppid: p.ppid,
                        start_ticks: p.start_ticks,
                        name: p.name,
                        state: p.state,
                        rss_bytes: p.rss_bytes,
                        cpu_ticks: p.cpu_ticks,
                        reaped_children_cpu_ticks,
                        threads: p.threads,
                        open_fds: p.open_fds,
                        read_bytes: p.read_bytes,
                        write_bytes: p.write_bytes,
                    })
                    .collect(),
                reaped_cpu_ticks,
                gpus: gpus_known.then_some(old.gpus),
                progress: old.progress,
                sampler_cost_us: old.sampler_cost_us,
                errors: old.errors,
            },
        )
}

fn soak_start() -> impl Strategy<Value = SoakStart> {
    (soak_start_v1(), any::<(bool, u64)>()).prop_map(|(old, (require_progress, ticks))| SoakStart {
        soak_id: old.soak_id,
        command: old.command,
        cwd: old.cwd,
        progress_dir: old.progress_dir,
        output: old.output,
        parameters: old.parameters,
        require_progress,
        metadata: old.metadata,
        environment: old.environment,
        supervisor: old.supervisor,
        runtime_json: old.runtime_json,
        ticks_per_second: ticks,
    })
}

fn soak_end() -> impl Strategy<Value = SoakEnd> {
    (soak_end_v1(), any::<u64>()).prop_map(|(old, teardown_ms)| SoakEnd {
        outcome: old.outcome,
        exit: old.exit,
        run_ms: old.duration_ms,
        teardown_ms,
        first_progress_ms: old.first_progress_ms,
        last_progress_ms: old.last_progress_ms,
        leaked_processes: old.leaked_processes,
        stdout_tail: old.stdout_tail,
        stderr_tail: old.stderr_tail,
    })
}

fn exit_info() -> impl Strategy<Value = ExitInfo> {
    any::<(Option<i32>, Option<i32>)>().prop_map(|(code, signal)| ExitInfo { code, signal })
}

fn supervision() -> impl Strategy<Value = Supervision> {
    (
        any::<(bool, Option<i32>, u64)>(),
        option::of(text()),
        vec(text(), 0..3),
    )
        .prop_map(
            |((fail_fast, dump_signal, dump_wait_ms), py_spy, evidence_unavailable)| Supervision {
                fail_fast,
                py_spy,
                dump_signal,
                dump_wait_ms,
                evidence_unavailable,
            },
        )
}

fn thread_evidence() -> impl Strategy<Value = ThreadEvidence> {
    (
        any::<(u32, char)>(),
        text(),
        option::of(text()),
        option::of(text()),
    )
        .prop_map(|((tid, state), name, wchan, syscall)| ThreadEvidence {
            tid,
            name,
            state,
            wchan,
            syscall,
        })
}

fn process_evidence() -> impl Strategy<Value = ProcessEvidence> {
    (
        any::<(u32, u32, u64, char, bool)>(),
        text(),
        vec(text(), 0..3),
        vec(thread_evidence(), 0..3),
        option::of(text()),
        option::of(text()),
    )
        .prop_map(
            |(
                (pid, ppid, start_ticks, state, holds_gpu_device),
                name,
                cmdline,
                threads,
                kernel_stack,
                python_stack,
            )| {
                ProcessEvidence {
                    pid,
                    ppid,
                    start_ticks,
                    name,
                    state,
                    cmdline,
                    threads,
                    kernel_stack,
                    python_stack,
                    holds_gpu_device,
                }
            },
        )
}

fn evidence() -> impl Strategy<Value = Evidence> {
    (
        failure_kind(),
        any::<i64>(),
        vec(process_evidence(), 0..3),
        option::of((any::<(u8, Option<u64>, Option<u64>)>(), text()).prop_map(
            |((version, memory_max_bytes, oom_kill_count), path)| CgroupEvidence {
                version,
                path,
                memory_max_bytes,
                oom_kill_count,
            },
        )),
        vec(
            (any::<i64>(), text()).prop_map(|(at_us, line)| KernelMessage { at_us, line }),
            0..3,
        ),
        vec(text(), 0..3),
    )
        .prop_map(
            |(trigger, captured_at_us, processes, cgroup, kernel_messages, unavailable)| Evidence {
                trigger,
                captured_at_us,
                processes,
                cgroup,
                kernel_messages,
                unavailable,
            },
        )
}

fn findings() -> impl Strategy<Value = Findings> {
    (
        option::of(
            (any::<u32>(), text(), exit_info()).prop_map(|(pid, name, exit)| ChildExit {
                pid,
                name,
                exit,
            }),
        ),
        vec(
            (any::<(u32, bool)>(), text()).prop_map(|((pid, kmsg), name)| OomKill {
                pid,
                name,
                source: if kmsg {
                    OomSource::Kmsg
                } else {
                    OomSource::Cgroup
                },
            }),
            0..3,
        ),
        vec(
            (any::<(u32, char)>(), text(), option::of(text())).prop_map(
                |((pid, state), name, wchan)| UnkillableProcess {
                    pid,
                    name,
                    state,
                    wchan,
                },
            ),
            0..3,
        ),
        option::of(
            (
                vec(
                    (text(), any::<(Option<u64>, Option<u64>, Option<bool>)>()).prop_map(
                        |(uuid, (before, after, released))| GpuReleased {
                            uuid,
                            memory_used_before_mib: before,
                            memory_used_after_mib: after,
                            released,
                        },
                    ),
                    0..3,
                ),
                vec(
                    (any::<u32>(), text(), text()).prop_map(|(pid, name, path)| GpuHolder {
                        pid,
                        name,
                        path,
                    }),
                    0..3,
                ),
            )
                .prop_map(|(gpus, holders)| GpuRelease { gpus, holders }),
        ),
    )
        .prop_map(|(child, oom_kills, unkillable, gpu_release)| Findings {
            child,
            oom_kills,
            unkillable,
            gpu_release,
        })
}

fn event() -> impl Strategy<Value = StoredEvent> {
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
            supervision
        }),
        evidence().prop_map(|e| StoredEvent::SoakEvidenceCaptured(Box::new(e))),
        (soak_end(), findings()).prop_map(|(end, findings)| StoredEvent::SoakFinishedV5 {
            end: Box::new(end),
            findings: Box::new(findings)
        }),
        (soak_start(), supervision(), limits()).prop_map(|(start, supervision, limits)| {
            StoredEvent::SoakStarted {
                start: Box::new(start),
                supervision,
                limits,
            }
        }),
        (sample(), measures()).prop_map(|(sample, measures)| StoredEvent::SoakSampled {
            sample: Box::new(sample),
            measures: Box::new(measures)
        }),
        (soak_end(), findings(), option::of(resource_limit())).prop_map(
            |(end, findings, limit)| StoredEvent::SoakFinished {
                end: Box::new(end),
                findings: Box::new(findings),
                limit
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
                StoredEvent::SoakSampledCompact(Box::new(CompactSample {
                    base,
                    sample,
                    measures,
                    pss,
                    processes,
                }))
            }),
    ]
}

/// What the live log keeps of an archived soak: its row, and what the event commits to.
fn archived() -> impl Strategy<Value = Archived> {
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

/// Events a chain may hold as they are generated: all but `soak_archived`, whose runs must
/// name records removed from that very chain (`log_archive` tests make real ones), and a packed
/// sample, which only the log's own packing makes (`compact` tests).
fn chained_event() -> impl Strategy<Value = StoredEvent> {
    event().prop_filter("archives and packed samples are the log's to make", |e| {
        !matches!(
            e,
            StoredEvent::SoakArchived(_) | StoredEvent::SoakSampledCompact(_)
        )
    })
}

fn subject() -> impl Strategy<Value = Subject> {
    prop_oneof![
        Just(Subject::Host),
        text().prop_map(Subject::Daemon),
        text().prop_map(Subject::Soak)
    ]
}

fn envelope() -> impl Strategy<Value = StoredEnvelope> {
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

/// A valid chain of the given events, as `(key, stored bytes)` pairs from sequence 1.
fn build_chain(events: Vec<(Subject, StoredEvent)>) -> Vec<(u64, Vec<u8>)> {
    let mut head: Hash = chain::GENESIS;
    events
        .into_iter()
        .enumerate()
        .map(|(i, (subject, event))| {
            let seq = i as u64 + 1;
            let envelope = StoredEnvelope {
                seq,
                recorded_at_us: 1_764_676_800_000_000 + seq as i64,
                scope: Scope {
                    uid: 1000,
                    host: "node".into(),
                },
                subject,
                event,
            };
            let (stored, hash) = chain::seal(&head, &codec::encode(&envelope).unwrap());
            head = hash;
            (seq, stored)
        })
        .collect()
}

/// Walks a chain against the head its last record claims, as `log verify` walks a log against
/// the head it recorded; the anchor is taken from the unmodified chain.
fn walk(records: &[(u64, Vec<u8>)], anchor: (u64, Hash)) -> Result<(), u64> {
    let mut walker = ChainWalker::default();
    for (key, stored) in records {
        walker.step(*key, stored).map_err(|b| b.seq)?;
    }
    walker.finish(anchor).map(|_| ()).map_err(|b| b.seq)
}

fn anchor_of(records: &[(u64, Vec<u8>)]) -> (u64, Hash) {
    records
        .last()
        .map(|(k, v)| (*k, chain::stored_hash(v).unwrap()))
        .unwrap_or((0, chain::GENESIS))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_envelope_round_trips(envelope in envelope()) {
        let bytes = codec::encode(&envelope).unwrap();
        let back: StoredEnvelope = codec::decode(&bytes).unwrap();
        // f64 NaN is not equal to itself; compare the encodings instead.
        prop_assert_eq!(codec::encode(&back).unwrap(), bytes);
    }

    #[test]
    fn arbitrary_bytes_never_panic_a_decoder(bytes in vec(any::<u8>(), 0..512)) {
        let _ = codec::decode::<StoredEnvelope>(&bytes);
        let _ = ChainWalker::default().step(1, &bytes);
    }

    /// A valid encoding with a byte changed, cut short or run on: decoded or refused, never a
    /// panic, never an allocation of what a corrupted length claims.
    #[test]
    fn a_corrupted_encoding_never_panics_a_decoder(
        envelope in envelope(),
        offset in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        cut in any::<prop::sample::Index>(),
        tail in vec(any::<u8>(), 0..64),
    ) {
        let bytes = codec::encode(&envelope).unwrap();
        let mut flipped = bytes.clone();
        let at = offset.index(flipped.len());
        flipped[at] ^= flip;
        let _ = codec::decode::<StoredEnvelope>(&flipped);
        let _ = codec::decode::<StoredEnvelope>(&bytes[..cut.index(bytes.len())]);
        let mut longer = bytes.clone();
        longer.extend_from_slice(&tail);
        let _ = codec::decode::<StoredEnvelope>(&longer);
        // A length field set to its largest: refused, not allocated.
        let mut huge = bytes;
        for b in huge.iter_mut().skip(at).take(8) {
            *b = 0xff;
        }
        let _ = codec::decode::<StoredEnvelope>(&huge);
    }

    #[test]
    fn a_modified_byte_breaks_the_chain_at_its_record(
        events in vec((subject(), chained_event()), 1..12),
        pick in any::<prop::sample::Index>(),
        offset in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let mut records = build_chain(events);
        let anchor = anchor_of(&records);
        prop_assert_eq!(walk(&records, anchor), Ok(()));
        let i = pick.index(records.len());
        let at = offset.index(records[i].1.len());
        records[i].1[at] ^= flip;
        prop_assert_eq!(walk(&records, anchor), Err(i as u64 + 1));
    }

    #[test]
    fn a_dropped_record_breaks_the_chain_at_its_place(
        events in vec((subject(), chained_event()), 1..12),
        pick in any::<prop::sample::Index>(),
    ) {
        let mut records = build_chain(events);
        let anchor = anchor_of(&records);
        let i = pick.index(records.len());
        records.remove(i);
        prop_assert_eq!(walk(&records, anchor), Err(i as u64 + 1));
    }

    #[test]
    fn swapped_records_break_the_chain_at_the_first(
        events in vec((subject(), chained_event()), 2..12),
        a in any::<prop::sample::Index>(),
        b in any::<prop::sample::Index>(),
    ) {
        let mut records = build_chain(events);
        let anchor = anchor_of(&records);
        let (i, j) = (a.index(records.len()), b.index(records.len()));
        prop_assume!(i != j && records[i].1 != records[j].1);
        // Swap the stored values, keeping the keys: the records trade places.
        let (lo, hi) = (i.min(j), i.max(j));
        let moved = std::mem::take(&mut records[lo].1);
        records[lo].1 = std::mem::replace(&mut records[hi].1, moved);
        prop_assert_eq!(walk(&records, anchor), Err(lo as u64 + 1));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// A megabyte of noise: a decoder reads it without panicking or running away.
    #[test]
    fn a_large_input_never_panics_a_decoder(bytes in vec(any::<u8>(), 0..(1 << 20))) {
        let _ = codec::decode::<StoredEnvelope>(&bytes);
        let _ = ChainWalker::default().step(1, &bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// The log refuses a record by what its decode would claim (`codec::claimed`), counted
    /// without decoding: that count is exactly where the decoder's limit stops it. Each
    /// envelope, its host made as long as takes it to the limit, decodes; a byte more, and it
    /// does not.
    #[test]
    fn what_an_envelope_claims_is_where_the_decoder_stops(mut envelope in envelope()) {
        let claims = codec::claimed(&envelope);
        prop_assume!(claims <= codec::MAX_RECORD_BYTES);
        envelope.scope.host.push_str(&"h".repeat(codec::MAX_RECORD_BYTES - claims));
        prop_assert_eq!(codec::claimed(&envelope), codec::MAX_RECORD_BYTES);
        let bytes = codec::encode(&envelope).unwrap();
        prop_assert!(codec::decode::<StoredEnvelope>(&bytes).is_ok());
        envelope.scope.host.push('h');
        let bytes = codec::encode(&envelope).unwrap();
        let refused = codec::decode::<StoredEnvelope>(&bytes).err().map(|e| e.to_string());
        prop_assert_eq!(
            refused.as_deref(),
            Some("cannot decode a log record: LimitExceeded")
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The budgets of a sample, the evidence and a verdict bite only beyond them: built within
    /// them, a record is what it was given, so what was recorded before reads the same.
    #[test]
    fn a_record_within_its_budgets_is_built_as_it_was(event in event()) {
        let built = match event.clone() {
            StoredEvent::SoakSampled { sample, measures } => Event::sampled(*sample, *measures).into(),
            StoredEvent::SoakEvidenceCaptured(evidence) => Event::evidence_captured(*evidence).into(),
            StoredEvent::SoakFinished { end, findings, limit } => {
                Event::finished(*end, *findings, limit).into()
            }
            other => other,
        };
        prop_assert_eq!(codec::encode(&built).unwrap(), codec::encode(&event).unwrap());
    }
}

#[test]
fn the_strategy_covers_every_kind() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut seen = BTreeMap::new();
    for _ in 0..2_000 {
        let event = event().new_tree(&mut runner).unwrap().current();
        *seen.entry(event.kind()).or_insert(0) += 1;
    }
    for kind in EVENT_KINDS {
        assert!(seen.contains_key(kind), "no {kind} generated");
    }
}
