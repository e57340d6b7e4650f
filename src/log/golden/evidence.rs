//! The parts of a soak's evidence and of what its verdict found.

use std::collections::BTreeMap;

use super::fresh::Fresh;
use super::parts::{exit, failure_kind};
use crate::event::soak::{
    CgroupEvidence, ChildExit, CollectiveFrame, CollectiveGroup, Evidence, Findings, GoodputSplit,
    GpuHolder, GpuRelease, GpuReleased, HeartbeatErrors, KernelMessage, MpsTeardown, OomKill,
    OomSource, PendingCollective, ProcessCollectives, ProcessEvidence, RunBeats, StepStats,
    ThreadEvidence, UnkillableProcess,
};
use crate::event::stored::{v8, v9, v14, v15};

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

pub(super) fn evidence_v15(n: &mut Fresh) -> v15::Evidence {
    v15::Evidence {
        trigger: failure_kind(),
        captured_at_us: n.i64(),
        processes: vec![v15::ProcessEvidence {
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
            collectives: Some(collectives(n)),
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

fn collectives(n: &mut Fresh) -> ProcessCollectives {
    ProcessCollectives {
        sources: vec![n.text()],
        missing: vec![n.text()],
        groups: vec![CollectiveGroup {
            group: n.text(),
            name: Some(n.text()),
            desc: Some(n.text()),
            ranks: vec![n.u64()],
            last_enqueued: Some(n.i64()),
            last_started: Some(n.i64()),
            last_completed: Some(n.i64()),
            pending: vec![PendingCollective {
                seq: n.i64(),
                op: n.text(),
                input_sizes: vec![vec![n.i64()]],
                input_dtypes: vec![n.text()],
                output_sizes: vec![vec![n.i64()]],
                state: n.text(),
                top_frames: vec![CollectiveFrame {
                    name: n.text(),
                    file: n.text(),
                    line: n.i64(),
                }],
                enqueued_at_us: Some(n.i64()),
                numel_in: Some(n.i64()),
                numel_out: Some(n.i64()),
            }],
        }],
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

/// The findings as schema 10–14's verdicts hold them.
pub(super) fn findings_v14(n: &mut Fresh) -> v14::Findings {
    v14::Findings {
        child: Some(child(n)),
        oom_kills: vec![oom_kill(n)],
        unkillable: vec![unkillable(n)],
        gpu_release: Some(gpu_release(n)),
        heartbeat: Some(Box::new(v14::RunBeats {
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
            errors: v14::HeartbeatErrors {
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
                clock: Some(n.u64()),
                repeats: Some(n.u64()),
                polling_fallbacks: Some(n.u64()),
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
