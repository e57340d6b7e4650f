//! What schema 5 adds to a soak's record: how the supervisor gathers evidence and whether a
//! child's failure fails the soak (with the start), the evidence captured before the first
//! signal to the tree (its own event), and what the verdict found about the tree's end — a child
//! that failed, OOM kills, processes no signal ended, the GPUs given back (with the verdict).
//!
//! Like every stored type these are frozen once released; new fields make new forms.

use serde::{Deserialize, Serialize};

use super::beats::{HeartbeatSettings, RunBeats};
use super::{ExitInfo, FailureKind};

/// How a soak supervises beyond its limits, fixed when it starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Supervision {
    /// `--fail-fast`: a process of the tree that fails while the command runs fails the soak.
    pub fail_fast: bool,
    /// The `py-spy` that dumps Python stacks into the evidence: the path found or given, or
    /// `None` when off or not found (the reason is in `evidence_unavailable`).
    pub py_spy: Option<String>,
    /// `--dump-signal`: sent to the tree after the evidence is recorded, before the first
    /// signal that stops it.
    pub dump_signal: Option<i32>,
    /// `--dump-wait`: how long the tree has after the dump signal to write its stacks.
    pub dump_wait_ms: u64,
    /// Why parts of the evidence cannot be gathered, known at the start ("py-spy not found").
    pub evidence_unavailable: Vec<String>,
    /// How its heartbeats are judged; `None` where its form did not record them (before
    /// schema 10).
    pub heartbeat: Option<HeartbeatSettings>,
}

/// One thread of a process, as `/proc/<pid>/task/<tid>` showed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadEvidence {
    pub tid: u32,
    pub name: String,
    pub state: char,
    /// Where in the kernel it waits; `None` where unreadable or running.
    pub wchan: Option<String>,
    /// Its current system call by name (`futex`), `running`, or the number where the name is
    /// not known; `None` where unreadable.
    pub syscall: Option<String>,
}

/// One live process of the tree at the moment it was to be signalled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessEvidence {
    pub pid: u32,
    pub ppid: u32,
    pub start_ticks: u64,
    pub name: String,
    pub state: char,
    /// Credential values masked.
    pub cmdline: Vec<String>,
    pub threads: Vec<ThreadEvidence>,
    /// `/proc/<pid>/stack`, where the caller may read it (root).
    pub kernel_stack: Option<String>,
    /// What `py-spy dump` printed for it, for a Python process.
    pub python_stack: Option<String>,
    /// Whether it holds a GPU device file open (`/dev/nvidia*`).
    pub holds_gpu_device: bool,
    /// `RANK` in its environment; `None` without it, or where its form did not read it
    /// (before schema 9).
    pub rank: Option<u32>,
    /// Its collectives, for a process with a rank where the soak asks for them (schema 16 on);
    /// `None` for any other process, or where its form did not hold them.
    pub collectives: Option<super::ProcessCollectives>,
}

/// The memory cgroup the command ran in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupEvidence {
    /// 1 or 2.
    pub version: u8,
    /// Its path within the hierarchy (`/user.slice/…`).
    pub path: String,
    /// Its memory limit; `None` where unlimited or unreadable.
    pub memory_max_bytes: Option<u64>,
    /// How many processes the kernel's OOM killer has killed in it.
    pub oom_kill_count: Option<u64>,
}

/// A line of the kernel's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelMessage {
    /// When the kernel logged it, Unix microseconds.
    pub at_us: i64,
    pub line: String,
}

/// Everything captured about the tree before it was signalled: `soak_evidence_captured`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// What the supervisor was about to signal the tree for, or [`FailureKind::JobAlarm`] for
    /// the capture made when another rank of its job raised the alarm.
    pub trigger: FailureKind,
    /// Unix microseconds.
    pub captured_at_us: i64,
    pub processes: Vec<ProcessEvidence>,
    pub cgroup: Option<CgroupEvidence>,
    /// The kernel's lines about OOM kills and GPU faults (`NVRM: Xid`) since the soak started.
    pub kernel_messages: Vec<KernelMessage>,
    /// What could not be captured, and why.
    pub unavailable: Vec<String>,
    /// The MPS clients of the tree ended before the first signal, one entry a server that had
    /// some (a tree of several ranks may be the clients of several daemons); empty where there
    /// were none, where the capture was no teardown's (a job alarm's), or before schema 9.
    pub mps: Vec<super::MpsTeardown>,
}

/// A process of the tree that exited non-zero or by a signal while the command ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildExit {
    pub pid: u32,
    pub name: String,
    pub exit: ExitInfo,
}

/// Where an OOM kill was learnt from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OomSource {
    /// The memory cgroup's `oom_kill` counter grew.
    Cgroup,
    /// The kernel's log named the process.
    Kmsg,
}

impl OomSource {
    pub fn as_str(self) -> &'static str {
        match self {
            OomSource::Cgroup => "cgroup",
            OomSource::Kmsg => "kmsg",
        }
    }
}

/// A process of the tree the kernel's OOM killer killed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomKill {
    pub pid: u32,
    pub name: String,
    pub source: OomSource,
}

/// A process of the tree no signal ended (in uninterruptible sleep, most often).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnkillableProcess {
    pub pid: u32,
    pub name: String,
    pub state: char,
    pub wchan: Option<String>,
}

/// One GPU's memory before the soak and once its tree was gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuReleased {
    pub uuid: String,
    pub memory_used_before_mib: Option<u64>,
    pub memory_used_after_mib: Option<u64>,
    /// Whether the memory used came back to what it was before (within a small tolerance).
    pub released: Option<bool>,
}

/// A process of this user still holding a GPU device file after the tree was gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuHolder {
    pub pid: u32,
    pub name: String,
    pub path: String,
}

/// Whether the GPUs were given back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRelease {
    pub gpus: Vec<GpuReleased>,
    pub holders: Vec<GpuHolder>,
}

/// What the verdict found about the tree's end, beside schema 2's [`SoakEnd`](super::SoakEnd).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Findings {
    /// The child whose failure failed the soak (`child_failed`).
    pub child: Option<ChildExit>,
    pub oom_kills: Vec<OomKill>,
    pub unkillable: Vec<UnkillableProcess>,
    /// `None` when it could not be checked (no GPU reading before the soak).
    pub gpu_release: Option<GpuRelease>,
    /// The run's steps, the heartbeat file's errors and the goodput; `None` where its form did
    /// not record them (before schema 10).
    pub heartbeat: Option<Box<RunBeats>>,
}
