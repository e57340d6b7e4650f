//! Strategies for the parts of events: texts, identities, samples in every form, a soak's start,
//! end, supervision, evidence and findings.

use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use unilab::ProcessIdentity;
use unilab::StartedDaemon;
use unilab::TopologyMode;
use unilab::*;

pub(super) fn text() -> impl Strategy<Value = String> {
    prop_oneof![".{0,24}", "[a-zA-Z0-9/_.-]{0,40}"]
}

pub(super) fn identity() -> impl Strategy<Value = ProcessIdentity> {
    (any::<u32>(), any::<u64>()).prop_map(|(pid, start_ticks)| ProcessIdentity { pid, start_ticks })
}

pub(super) fn mode() -> impl Strategy<Value = TopologyMode> {
    prop_oneof![
        Just(TopologyMode::SingleGpu),
        Just(TopologyMode::SingleTaskMultiGpu),
        Just(TopologyMode::TaskPerGpu)
    ]
}

pub(super) fn record() -> impl Strategy<Value = StartedDaemon> {
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

pub(super) fn process_sample() -> impl Strategy<Value = soak_v1::ProcessSample> {
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

pub(super) fn gpu_sample() -> impl Strategy<Value = GpuSample> {
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

pub(super) fn sample_v1() -> impl Strategy<Value = soak_v1::Sample> {
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

pub(super) fn soak_start_v1() -> impl Strategy<Value = soak_v1::SoakStart> {
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

pub(super) fn failure_kind() -> impl Strategy<Value = FailureKind> {
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

pub(super) fn limits() -> impl Strategy<Value = Limits> {
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

pub(super) fn gpu_health() -> impl Strategy<Value = GpuHealth> {
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

pub(super) fn measures() -> impl Strategy<Value = Measures> {
    (
        vec(option::of(any::<u64>()), 0..8),
        vec(gpu_health(), 0..3),
        option::of(sample_beats()),
    )
        .prop_map(|(pss_bytes, gpus, heartbeat)| Measures {
            pss_bytes,
            gpus,
            heartbeat: heartbeat.map(Box::new),
        })
}

/// What a sample saw of the beats since the last.
pub(super) fn sample_beats() -> impl Strategy<Value = SampleBeats> {
    (
        any::<(u32, Option<u64>)>(),
        option::of(text()),
        any::<(Option<f32>, Option<f32>, Option<f32>)>(),
        btree_map(text(), any::<f64>(), 0..4),
    )
        .prop_map(
            |((beats, step), phase, (min, median, max), numbers)| SampleBeats {
                beats,
                step,
                phase,
                step_seconds_min: min,
                step_seconds_median: median,
                step_seconds_max: max,
                numbers,
            },
        )
}

/// A sample's beats packed against the previous sample's.
pub(super) fn packed_beats() -> impl Strategy<Value = PackedBeats> {
    (
        any::<(u32, Option<u64>)>(),
        option::of(option::of(text())),
        any::<(Option<f32>, Option<f32>, Option<f32>)>(),
        option::of(vec(text(), 0..4)),
        vec(any::<f64>(), 0..4),
    )
        .prop_map(
            |((beats, step), phase, (min, median, max), keys, values)| PackedBeats {
                beats,
                step,
                phase,
                step_seconds_min: min,
                step_seconds_median: median,
                step_seconds_max: max,
                keys,
                values,
            },
        )
}

/// How a soak's heartbeats are judged.
pub(super) fn heartbeat_settings() -> impl Strategy<Value = HeartbeatSettings> {
    (
        option::of(option::of(any::<u64>())),
        btree_map(text(), any::<u64>(), 0..3),
    )
        .prop_map(|(step_timeout, phase_timeouts)| HeartbeatSettings {
            step_timeout: step_timeout.map(|fixed| match fixed {
                None => StepTimeoutSetting::Auto,
                Some(limit_ms) => StepTimeoutSetting::Fixed { limit_ms },
            }),
            phase_timeouts,
        })
}

/// What a verdict found of a run's beats.
pub(super) fn run_beats() -> impl Strategy<Value = RunBeats> {
    let stats = any::<(u64, u64, u64, Option<f64>, Option<f64>)>().prop_map(
        |(count, last, timed, median_seconds, p99_seconds)| StepStats {
            count,
            last,
            timed,
            median_seconds,
            p99_seconds,
        },
    );
    let goodput = any::<[f64; 6]>().prop_map(|s| GoodputSplit {
        productive_seconds: s[0],
        startup_seconds: s[1],
        checkpoint_seconds: s[2],
        eval_seconds: s[3],
        stalled_seconds: s[4],
        other_seconds: s[5],
    });
    (
        btree_map(text(), stats, 0..3),
        any::<(u64, [u64; 4], [Option<u64>; 3])>(),
        option::of(goodput),
    )
        .prop_map(|(steps, (untracked, e, counted), goodput)| RunBeats {
            steps,
            untracked,
            errors: HeartbeatErrors {
                malformed: e[0],
                oversized: e[1],
                dropped_bytes: e[2],
                truncations: e[3],
                clock: counted[0],
                repeats: counted[1],
                polling_fallbacks: counted[2],
            },
            goodput,
        })
}

pub(super) fn resource_limit() -> impl Strategy<Value = ResourceLimit> {
    prop_oneof![
        Just(ResourceLimit::Memory),
        Just(ResourceLimit::GpuMemory),
        Just(ResourceLimit::MemoryGrowth),
    ]
}

pub(super) fn soak_end_v1() -> impl Strategy<Value = soak_v1::SoakEnd> {
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
pub(super) fn sample() -> impl Strategy<Value = Sample> {
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

pub(super) fn soak_start() -> impl Strategy<Value = soak_v2::SoakStart> {
    (soak_start_v1(), any::<(bool, u64)>()).prop_map(|(old, (require_progress, ticks))| {
        soak_v2::SoakStart {
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
        }
    })
}

pub(super) fn soak_end() -> impl Strategy<Value = soak_v2::SoakEnd> {
    (soak_end_v1(), any::<u64>()).prop_map(|(old, teardown_ms)| soak_v2::SoakEnd {
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

pub(super) fn exit_info() -> impl Strategy<Value = ExitInfo> {
    any::<(Option<i32>, Option<i32>)>().prop_map(|(code, signal)| ExitInfo { code, signal })
}

pub(super) fn supervision() -> impl Strategy<Value = Supervision> {
    (
        any::<(bool, Option<i32>, u64)>(),
        option::of(text()),
        vec(text(), 0..3),
        option::of(heartbeat_settings()),
    )
        .prop_map(
            |((fail_fast, dump_signal, dump_wait_ms), py_spy, evidence_unavailable, heartbeat)| {
                Supervision {
                    fail_fast,
                    py_spy,
                    dump_signal,
                    dump_wait_ms,
                    evidence_unavailable,
                    heartbeat,
                }
            },
        )
}

pub(super) fn thread_evidence() -> impl Strategy<Value = ThreadEvidence> {
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

pub(super) fn process_evidence() -> impl Strategy<Value = ProcessEvidence> {
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
                    rank: Some(pid % 8).filter(|_| holds_gpu_device),
                    collectives: None,
                }
            },
        )
}

pub(super) fn evidence() -> impl Strategy<Value = Evidence> {
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
                mps: (0..captured_at_us.rem_euclid(3))
                    .map(|server| MpsTeardown {
                        daemon: format!("gpu{server}"),
                        server_pid: 7 + server as u32,
                        terminated: vec![captured_at_us.unsigned_abs() as u32],
                    })
                    .collect(),
            },
        )
}

pub(super) fn findings() -> impl Strategy<Value = Findings> {
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
        .prop_flat_map(|(child, oom_kills, unkillable, gpu_release)| {
            option::of(run_beats()).prop_map(move |heartbeat| Findings {
                child: child.clone(),
                oom_kills: oom_kills.clone(),
                unkillable: unkillable.clone(),
                gpu_release: gpu_release.clone(),
                heartbeat: heartbeat.map(Box::new),
            })
        })
}
