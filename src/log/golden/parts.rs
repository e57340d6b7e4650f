//! The parts the fixed forms are built of: every type a stored form reaches, each field given a
//! value no other field of its form holds ([`Fresh`]), every `Option` a `Some` and every list
//! and map one entry at least, each enum its last variant (a variant inserted before it, or one
//! removed, moves its index). No `..Default::default()`: a field added to a type must be given
//! a value here, and then changes the bytes of every form that holds it.

use std::collections::BTreeMap;

use crate::event::LeaseEnd;
use crate::event::daemon::{DaemonLimits, StaleReason, StartedDaemon, StopMethod};
use crate::event::soak::{
    Archived, ArchivedRun, ArchivedSoak, CgroupEvidence, ChildExit, CompactSample, Evidence,
    ExitInfo, FailureKind, Findings, GoodputSplit, GpuHealth, GpuHolder, GpuProcessSample,
    GpuRelease, GpuReleased, GpuSample, HeartbeatErrors, HeartbeatSettings, JobAlarm, JobAlarmSeen,
    JobMember, KernelMessage, LeakedProcess, Limits, Measures, MpsTeardown, OnJobAlarm, OomKill,
    OomSource, Outcome, OutcomeStatus, PackedBeats, ProcessEvidence, ProcessSample,
    ProgressSignature, ResourceLimit, RunBeats, Sample, SampleBeats, SoakParameters, StepStats,
    StepTimeoutSetting, Supervision, ThreadEvidence, UnkillableProcess,
};
use crate::event::stored::{v1, v2, v8, v9};
use crate::event::topology::{GpuIdentity, TopologyMode};
use crate::process::ProcessIdentity;

/// A new value at each call, so that no two fields of one form hold the same: two fields
/// swapped change the form's bytes. Each form starts its own, so that a change to one form's
/// parts changes no other form's bytes.
pub(super) struct Fresh(u64);

impl Fresh {
    pub(super) fn new() -> Self {
        Fresh(0)
    }

    pub(super) fn u64(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }

    pub(super) fn u32(&mut self) -> u32 {
        u32::try_from(self.u64()).unwrap_or(u32::MAX)
    }

    fn u8(&mut self) -> u8 {
        u8::try_from(self.u64()).unwrap_or(u8::MAX)
    }

    fn i64(&mut self) -> i64 {
        i64::try_from(self.u64()).unwrap_or(i64::MAX)
    }

    fn i32(&mut self) -> i32 {
        i32::try_from(self.u64()).unwrap_or(i32::MAX)
    }

    /// Not a whole number: its bytes are not those of one.
    pub(super) fn f64(&mut self) -> f64 {
        f64::from(self.u32()) + 0.25
    }

    fn f32(&mut self) -> f32 {
        f32::from(self.u8()) + 0.5
    }

    /// Alternates, from `true`.
    pub(super) fn bool(&mut self) -> bool {
        self.u64() % 2 == 1
    }

    fn char(&mut self) -> char {
        char::from(b'A' + self.u8() % 26)
    }

    pub(super) fn text(&mut self) -> String {
        format!("text{}", self.u64())
    }

    fn bytes(&mut self) -> Vec<u8> {
        vec![self.u8(), self.u8()]
    }

    pub(super) fn identity(&mut self) -> ProcessIdentity {
        ProcessIdentity {
            pid: self.u32(),
            start_ticks: self.u64(),
        }
    }
}

pub(super) fn topology_mode() -> TopologyMode {
    TopologyMode::TaskPerGpu
}

pub(super) fn gpu_identity(n: &mut Fresh) -> GpuIdentity {
    GpuIdentity {
        index: n.u32(),
        uuid: n.text(),
    }
}

pub(super) fn daemon(n: &mut Fresh) -> StartedDaemon {
    StartedDaemon {
        name: n.text(),
        uid: n.u32(),
        host: n.text(),
        topology_mode: topology_mode(),
        gpu_uuids: vec![n.text()],
        pipe_directory: n.text(),
        log_directory: n.text(),
        pid: n.u32(),
        process_start_ticks: n.u64(),
        created_at: n.f64(),
    }
}

pub(super) fn daemon_limits(n: &mut Fresh) -> DaemonLimits {
    DaemonLimits {
        active_thread_percentage: Some(n.f64()),
        pinned_memory_limit: Some(n.u64()),
    }
}

pub(super) fn stale_reason() -> StaleReason {
    StaleReason::NotOwned
}

pub(super) fn stop_method() -> StopMethod {
    StopMethod::Exited
}

pub(super) fn lease_end() -> LeaseEnd {
    LeaseEnd::HolderGone
}

fn parameters(n: &mut Fresh) -> SoakParameters {
    SoakParameters {
        sample_interval_ms: n.u64(),
        startup_timeout_ms: n.u64(),
        stale_progress_ms: n.u64(),
        shutdown_grace_ms: n.u64(),
        min_duration_ms: n.u64(),
    }
}

fn map(n: &mut Fresh) -> BTreeMap<String, String> {
    BTreeMap::from([(n.text(), n.text())])
}

pub(super) fn start_v1(n: &mut Fresh) -> v1::SoakStart {
    v1::SoakStart {
        soak_id: n.text(),
        command: vec![n.text()],
        cwd: n.text(),
        progress_dir: n.text(),
        output: n.text(),
        parameters: parameters(n),
        metadata: map(n),
        environment: map(n),
        supervisor: n.identity(),
        runtime_json: n.text(),
    }
}

pub(super) fn start(n: &mut Fresh) -> v2::SoakStart {
    v2::SoakStart {
        soak_id: n.text(),
        command: vec![n.text()],
        cwd: n.text(),
        progress_dir: n.text(),
        output: n.text(),
        parameters: parameters(n),
        require_progress: n.bool(),
        metadata: map(n),
        environment: map(n),
        supervisor: n.identity(),
        runtime_json: n.text(),
        ticks_per_second: n.u64(),
    }
}

fn gpu_process(n: &mut Fresh) -> GpuProcessSample {
    GpuProcessSample {
        pid: n.u32(),
        used_memory_mib: Some(n.u64()),
    }
}

fn gpu_sample(n: &mut Fresh) -> GpuSample {
    GpuSample {
        index: n.u32(),
        uuid: n.text(),
        memory_used_mib: Some(n.u64()),
        memory_total_mib: Some(n.u64()),
        utilization_percent: Some(n.u32()),
        processes: vec![gpu_process(n)],
    }
}

fn progress(n: &mut Fresh) -> ProgressSignature {
    ProgressSignature {
        files: n.u64(),
        bytes: n.u64(),
        newest_mtime_ns: Some(n.i64()),
    }
}

pub(super) fn sample_v1(n: &mut Fresh) -> v1::Sample {
    v1::Sample {
        index: n.u64(),
        elapsed_ms: n.u64(),
        processes: vec![v1::ProcessSample {
            pid: n.u32(),
            ppid: n.u32(),
            start_ticks: n.u64(),
            name: n.text(),
            state: n.char(),
            rss_bytes: n.u64(),
            cpu_ticks: n.u64(),
            threads: n.u32(),
            open_fds: Some(n.u32()),
            read_bytes: Some(n.u64()),
            write_bytes: Some(n.u64()),
        }],
        gpus: vec![gpu_sample(n)],
        progress: progress(n),
        sampler_cost_us: n.u64(),
        errors: vec![n.text()],
    }
}

pub(super) fn sample(n: &mut Fresh) -> Sample {
    Sample {
        index: n.u64(),
        elapsed_ms: n.u64(),
        after_exit: n.bool(),
        processes: vec![ProcessSample {
            pid: n.u32(),
            ppid: n.u32(),
            start_ticks: n.u64(),
            name: n.text(),
            state: n.char(),
            rss_bytes: n.u64(),
            cpu_ticks: n.u64(),
            reaped_children_cpu_ticks: n.u64(),
            threads: n.u32(),
            open_fds: Some(n.u32()),
            read_bytes: Some(n.u64()),
            write_bytes: Some(n.u64()),
        }],
        reaped_cpu_ticks: n.u64(),
        gpus: Some(vec![gpu_sample(n)]),
        progress: progress(n),
        sampler_cost_us: n.u64(),
        errors: vec![n.text()],
    }
}

fn failure_kind() -> FailureKind {
    FailureKind::JobAlarm
}

fn outcome(n: &mut Fresh) -> Outcome {
    Outcome {
        status: OutcomeStatus::Abandoned,
        failure_kind: Some(failure_kind()),
        reason: n.text(),
    }
}

fn exit(n: &mut Fresh) -> ExitInfo {
    ExitInfo {
        code: Some(n.i32()),
        signal: Some(n.i32()),
    }
}

fn leaked(n: &mut Fresh) -> LeakedProcess {
    LeakedProcess {
        identity: n.identity(),
        name: n.text(),
        cmdline: vec![n.text()],
    }
}

pub(super) fn end_v1(n: &mut Fresh) -> v1::SoakEnd {
    v1::SoakEnd {
        outcome: outcome(n),
        exit: Some(exit(n)),
        duration_ms: n.u64(),
        first_progress_ms: Some(n.u64()),
        last_progress_ms: Some(n.u64()),
        leaked_processes: vec![leaked(n)],
        stdout_tail: n.bytes(),
        stderr_tail: n.bytes(),
    }
}

pub(super) fn end(n: &mut Fresh) -> v2::SoakEnd {
    v2::SoakEnd {
        outcome: outcome(n),
        exit: Some(exit(n)),
        run_ms: n.u64(),
        teardown_ms: n.u64(),
        first_progress_ms: Some(n.u64()),
        last_progress_ms: Some(n.u64()),
        leaked_processes: vec![leaked(n)],
        stdout_tail: n.bytes(),
        stderr_tail: n.bytes(),
    }
}

fn thread(n: &mut Fresh) -> ThreadEvidence {
    ThreadEvidence {
        tid: n.u32(),
        name: n.text(),
        state: n.char(),
        wchan: Some(n.text()),
        syscall: Some(n.text()),
    }
}

fn cgroup(n: &mut Fresh) -> CgroupEvidence {
    CgroupEvidence {
        version: n.u8(),
        path: n.text(),
        memory_max_bytes: Some(n.u64()),
        oom_kill_count: Some(n.u64()),
    }
}

fn kernel_message(n: &mut Fresh) -> KernelMessage {
    KernelMessage {
        at_us: n.i64(),
        line: n.text(),
    }
}

pub(super) fn evidence_v8(n: &mut Fresh) -> v8::Evidence {
    v8::Evidence {
        trigger: failure_kind(),
        captured_at_us: n.i64(),
        processes: vec![v8::ProcessEvidence {
            pid: n.u32(),
            ppid: n.u32(),
            start_ticks: n.u64(),
            name: n.text(),
            state: n.char(),
            cmdline: vec![n.text()],
            threads: vec![thread(n)],
            kernel_stack: Some(n.text()),
            python_stack: Some(n.text()),
            holds_gpu_device: n.bool(),
        }],
        cgroup: Some(cgroup(n)),
        kernel_messages: vec![kernel_message(n)],
        unavailable: vec![n.text()],
    }
}

pub(super) fn evidence(n: &mut Fresh) -> Evidence {
    Evidence {
        trigger: failure_kind(),
        captured_at_us: n.i64(),
        processes: vec![ProcessEvidence {
            pid: n.u32(),
            ppid: n.u32(),
            start_ticks: n.u64(),
            name: n.text(),
            state: n.char(),
            cmdline: vec![n.text()],
            threads: vec![thread(n)],
            kernel_stack: Some(n.text()),
            python_stack: Some(n.text()),
            holds_gpu_device: n.bool(),
            rank: Some(n.u32()),
        }],
        cgroup: Some(cgroup(n)),
        kernel_messages: vec![kernel_message(n)],
        unavailable: vec![n.text()],
        mps: vec![MpsTeardown {
            daemon: n.text(),
            server_pid: n.u32(),
            terminated: vec![n.u32()],
        }],
    }
}

pub(super) fn supervision_v9(n: &mut Fresh) -> v9::Supervision {
    v9::Supervision {
        fail_fast: n.bool(),
        py_spy: Some(n.text()),
        dump_signal: Some(n.i32()),
        dump_wait_ms: n.u64(),
        evidence_unavailable: vec![n.text()],
    }
}

pub(super) fn supervision(n: &mut Fresh) -> Supervision {
    Supervision {
        fail_fast: n.bool(),
        py_spy: Some(n.text()),
        dump_signal: Some(n.i32()),
        dump_wait_ms: n.u64(),
        evidence_unavailable: vec![n.text()],
        heartbeat: Some(HeartbeatSettings {
            step_timeout: Some(StepTimeoutSetting::Fixed { limit_ms: n.u64() }),
            phase_timeouts: BTreeMap::from([(n.text(), n.u64())]),
        }),
    }
}

pub(super) fn limits(n: &mut Fresh) -> Limits {
    Limits {
        max_memory_bytes: Some(n.u64()),
        max_gpu_memory_bytes: Some(n.u64()),
        max_memory_growth_bytes_per_hour: Some(n.u64()),
        warmup_ms: Some(n.u64()),
        memory_ceiling_bytes: Some(n.u64()),
        memory_ceiling_source: Some(n.text()),
    }
}

pub(super) fn job_member(n: &mut Fresh) -> JobMember {
    JobMember {
        job: n.text(),
        rank: Some(n.u32()),
        on_job_alarm: OnJobAlarm::Ignore,
    }
}

pub(super) fn resource_limit() -> ResourceLimit {
    ResourceLimit::MemoryGrowth
}

fn gpu_health(n: &mut Fresh) -> GpuHealth {
    GpuHealth {
        temperature_c: Some(n.u32()),
        power_mw: Some(n.u64()),
        sm_clock_mhz: Some(n.u32()),
        throttle_mask: Some(n.u64()),
        ecc_uncorrected_volatile: Some(n.u64()),
        retired_pages_pending: Some(n.bool()),
        other_processes: vec![gpu_process(n)],
    }
}

pub(super) fn measures_v9(n: &mut Fresh) -> v9::Measures {
    v9::Measures {
        pss_bytes: vec![Some(n.u64())],
        gpus: vec![gpu_health(n)],
    }
}

pub(super) fn measures(n: &mut Fresh) -> Measures {
    Measures {
        pss_bytes: vec![Some(n.u64())],
        gpus: vec![gpu_health(n)],
        heartbeat: Some(Box::new(SampleBeats {
            beats: n.u32(),
            step: Some(n.u64()),
            phase: Some(n.text()),
            step_seconds_min: Some(n.f32()),
            step_seconds_median: Some(n.f32()),
            step_seconds_max: Some(n.f32()),
            numbers: BTreeMap::from([(n.text(), n.f64())]),
        })),
    }
}

pub(super) fn compact_v9(n: &mut Fresh) -> v9::CompactSample {
    v9::CompactSample {
        base: Some(n.u64()),
        sample: sample(n),
        measures: measures_v9(n),
        pss: n.bool(),
        processes: n.bytes(),
    }
}

pub(super) fn compact(n: &mut Fresh) -> CompactSample {
    CompactSample {
        base: Some(n.u64()),
        sample: sample(n),
        measures: measures(n),
        pss: n.bool(),
        processes: n.bytes(),
        beats: Some(PackedBeats {
            beats: n.u32(),
            step: Some(n.u64()),
            phase: Some(Some(n.text())),
            step_seconds_min: Some(n.f32()),
            step_seconds_median: Some(n.f32()),
            step_seconds_max: Some(n.f32()),
            keys: Some(vec![n.text()]),
            values: vec![n.f64()],
        }),
    }
}

fn child(n: &mut Fresh) -> ChildExit {
    ChildExit {
        pid: n.u32(),
        name: n.text(),
        exit: exit(n),
    }
}

fn oom_kill(n: &mut Fresh) -> OomKill {
    OomKill {
        pid: n.u32(),
        name: n.text(),
        source: OomSource::Kmsg,
    }
}

fn unkillable(n: &mut Fresh) -> UnkillableProcess {
    UnkillableProcess {
        pid: n.u32(),
        name: n.text(),
        state: n.char(),
        wchan: Some(n.text()),
    }
}

fn gpu_release(n: &mut Fresh) -> GpuRelease {
    GpuRelease {
        gpus: vec![GpuReleased {
            uuid: n.text(),
            memory_used_before_mib: Some(n.u64()),
            memory_used_after_mib: Some(n.u64()),
            released: Some(n.bool()),
        }],
        holders: vec![GpuHolder {
            pid: n.u32(),
            name: n.text(),
            path: n.text(),
        }],
    }
}

pub(super) fn findings_v9(n: &mut Fresh) -> v9::Findings {
    v9::Findings {
        child: Some(child(n)),
        oom_kills: vec![oom_kill(n)],
        unkillable: vec![unkillable(n)],
        gpu_release: Some(gpu_release(n)),
    }
}

pub(super) fn findings(n: &mut Fresh) -> Findings {
    Findings {
        child: Some(child(n)),
        oom_kills: vec![oom_kill(n)],
        unkillable: vec![unkillable(n)],
        gpu_release: Some(gpu_release(n)),
        heartbeat: Some(Box::new(RunBeats {
            steps: BTreeMap::from([(
                n.text(),
                StepStats {
                    count: n.u64(),
                    last: n.u64(),
                    timed: n.u64(),
                    median_seconds: Some(n.f64()),
                    p99_seconds: Some(n.f64()),
                },
            )]),
            untracked: n.u64(),
            errors: HeartbeatErrors {
                malformed: n.u64(),
                oversized: n.u64(),
                dropped_bytes: n.u64(),
                truncations: n.u64(),
            },
            goodput: Some(GoodputSplit {
                productive_seconds: n.f64(),
                startup_seconds: n.f64(),
                checkpoint_seconds: n.f64(),
                eval_seconds: n.f64(),
                stalled_seconds: n.f64(),
                other_seconds: n.f64(),
            }),
        })),
    }
}

pub(super) fn archived(n: &mut Fresh) -> Archived {
    Archived {
        file: n.text(),
        soak: ArchivedSoak {
            command: vec![n.text()],
            output: n.text(),
            supervisor: n.identity(),
            started_at_us: n.i64(),
            ended_at_us: Some(n.i64()),
            status: OutcomeStatus::Abandoned,
            failure_kind: Some(failure_kind()),
            reason: Some(n.text()),
            samples: n.u64(),
            first_seq: n.u64(),
            last_seq: n.u64(),
            artifact_digest: Some(n.text()),
            run_ms: Some(n.u64()),
        },
        runs: vec![ArchivedRun {
            kept: n.u64(),
            removed: n.u64(),
        }],
        records: n.u64(),
        bytes: n.u64(),
        records_digest: [n.u8(); 32],
        gaps_digest: [n.u8(); 32],
    }
}

pub(super) fn alarm_seen(n: &mut Fresh) -> JobAlarmSeen {
    JobAlarmSeen {
        alarm: JobAlarm {
            job: n.text(),
            rank: Some(n.u32()),
            host: n.text(),
            soak_id: n.text(),
            failure_kind: n.text(),
            reason: n.text(),
            at: n.f64(),
        },
        seen_at: n.f64(),
    }
}
