//! The parts of the daemon's, the leases' and the soak's records but its samples and evidence:
//! the start, the verdict, the supervision and the limits, the job, the archive, the alarm.

use std::collections::BTreeMap;

use super::fresh::Fresh;
use crate::event::LeaseEnd;
use crate::event::daemon::{DaemonLimits, StaleReason, StartedDaemon, StopMethod};
use crate::event::soak::{
    Archived, ArchivedRun, ArchivedSoak, ExitInfo, FailureKind, HeartbeatSettings, JobAlarm,
    JobAlarmSeen, JobMember, LeakedProcess, Limits, OnJobAlarm, Outcome, OutcomeStatus,
    ResourceLimit, SoakParameters, StepTimeoutSetting, Supervision,
};
use crate::event::stored::{v1, v2, v9};
use crate::event::topology::{GpuIdentity, TopologyMode};

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

pub(super) fn failure_kind() -> FailureKind {
    FailureKind::JobAlarm
}

fn outcome(n: &mut Fresh) -> Outcome {
    Outcome {
        status: OutcomeStatus::Abandoned,
        failure_kind: Some(failure_kind()),
        reason: n.text(),
    }
}

pub(super) fn exit(n: &mut Fresh) -> ExitInfo {
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
        run: Some(n.text()),
    }
}

/// The job as schema 9–12's starts hold it.
pub(super) fn job_member_v12(n: &mut Fresh) -> crate::event::stored::v12::JobMember {
    crate::event::stored::v12::JobMember {
        job: n.text(),
        rank: Some(n.u32()),
        on_job_alarm: OnJobAlarm::Ignore,
    }
}

pub(super) fn resource_limit() -> ResourceLimit {
    ResourceLimit::MemoryGrowth
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
