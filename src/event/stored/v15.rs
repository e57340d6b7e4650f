//! The evidence as schema 9–15 stored it, frozen: `soak_evidence_captured` recorded before
//! schema 16 is stored in these forms and read as the current one (`event::upcast`), which keeps
//! every value they hold (schema 16 adds each process's collectives). Nothing here may change.

use serde::{Deserialize, Serialize};

use crate::event::soak::{CgroupEvidence, FailureKind, KernelMessage, MpsTeardown, ThreadEvidence};

/// One live process of the tree at the moment it was to be signalled (schema 9–15).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessEvidence {
    pub pid: u32,
    pub ppid: u32,
    pub start_ticks: u64,
    pub name: String,
    pub state: char,
    pub cmdline: Vec<String>,
    pub threads: Vec<ThreadEvidence>,
    pub kernel_stack: Option<String>,
    pub python_stack: Option<String>,
    pub holds_gpu_device: bool,
    pub rank: Option<u32>,
}

/// Everything captured about the tree before it was signalled (schema 9–15).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub trigger: FailureKind,
    pub captured_at_us: i64,
    pub processes: Vec<ProcessEvidence>,
    pub cgroup: Option<CgroupEvidence>,
    pub kernel_messages: Vec<KernelMessage>,
    pub unavailable: Vec<String>,
    pub mps: Vec<MpsTeardown>,
}
