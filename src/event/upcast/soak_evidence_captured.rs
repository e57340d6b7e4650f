//! `soak_evidence_captured`'s forms and the way back. Schema 5–8's evidence lacks each
//! process's rank and the MPS clients ended: `None` both (no rank read, no client ended);
//! schema 9–15's lacks each process's collectives: `None` (none asked for).

use crate::event::soak::{Evidence, ProcessEvidence};
use crate::event::stored::{StoredEvent, v8, v15};

/// The evidence in the form of `schema` (see [`crate::event::Event::into_stored`]).
pub(super) fn into_stored(evidence: Box<Evidence>, schema: u32) -> StoredEvent {
    match schema {
        ..=8 => StoredEvent::SoakEvidenceCapturedV8(Box::new(evidence_to_v8(*evidence))),
        9..=15 => StoredEvent::SoakEvidenceCapturedV15(Box::new(evidence_to_v15(*evidence))),
        _ => StoredEvent::SoakEvidenceCaptured(evidence),
    }
}

pub(super) fn evidence_of_v8(evidence: v8::Evidence) -> Evidence {
    Evidence {
        trigger: evidence.trigger,
        captured_at_us: evidence.captured_at_us,
        processes: evidence
            .processes
            .into_iter()
            .map(|p| ProcessEvidence {
                pid: p.pid,
                ppid: p.ppid,
                start_ticks: p.start_ticks,
                name: p.name,
                state: p.state,
                cmdline: p.cmdline,
                threads: p.threads,
                kernel_stack: p.kernel_stack,
                python_stack: p.python_stack,
                holds_gpu_device: p.holds_gpu_device,
                rank: None,
                collectives: None,
            })
            .collect(),
        cgroup: evidence.cgroup,
        kernel_messages: evidence.kernel_messages,
        unavailable: evidence.unavailable,
        mps: Vec::new(),
    }
}

pub(super) fn evidence_to_v8(evidence: Evidence) -> v8::Evidence {
    v8::Evidence {
        trigger: evidence.trigger,
        captured_at_us: evidence.captured_at_us,
        processes: evidence
            .processes
            .into_iter()
            .map(|p| v8::ProcessEvidence {
                pid: p.pid,
                ppid: p.ppid,
                start_ticks: p.start_ticks,
                name: p.name,
                state: p.state,
                cmdline: p.cmdline,
                threads: p.threads,
                kernel_stack: p.kernel_stack,
                python_stack: p.python_stack,
                holds_gpu_device: p.holds_gpu_device,
            })
            .collect(),
        cgroup: evidence.cgroup,
        kernel_messages: evidence.kernel_messages,
        unavailable: evidence.unavailable,
    }
}

pub(super) fn evidence_of_v15(evidence: v15::Evidence) -> Evidence {
    Evidence {
        trigger: evidence.trigger,
        captured_at_us: evidence.captured_at_us,
        processes: evidence
            .processes
            .into_iter()
            .map(|p| ProcessEvidence {
                pid: p.pid,
                ppid: p.ppid,
                start_ticks: p.start_ticks,
                name: p.name,
                state: p.state,
                cmdline: p.cmdline,
                threads: p.threads,
                kernel_stack: p.kernel_stack,
                python_stack: p.python_stack,
                holds_gpu_device: p.holds_gpu_device,
                rank: p.rank,
                collectives: None,
            })
            .collect(),
        cgroup: evidence.cgroup,
        kernel_messages: evidence.kernel_messages,
        unavailable: evidence.unavailable,
        mps: evidence.mps,
    }
}

pub(super) fn evidence_to_v15(evidence: Evidence) -> v15::Evidence {
    v15::Evidence {
        trigger: evidence.trigger,
        captured_at_us: evidence.captured_at_us,
        processes: evidence
            .processes
            .into_iter()
            .map(|p| v15::ProcessEvidence {
                pid: p.pid,
                ppid: p.ppid,
                start_ticks: p.start_ticks,
                name: p.name,
                state: p.state,
                cmdline: p.cmdline,
                threads: p.threads,
                kernel_stack: p.kernel_stack,
                python_stack: p.python_stack,
                holds_gpu_device: p.holds_gpu_device,
                rank: p.rank,
            })
            .collect(),
        cgroup: evidence.cgroup,
        kernel_messages: evidence.kernel_messages,
        unavailable: evidence.unavailable,
        mps: evidence.mps,
    }
}
