//! What schema 16 adds to each process of the evidence: the collectives a rank had launched,
//! as PyTorch's flight recorder (or, failing it, the NCCL watchdog's lines) told of them when
//! the capture asked (`crate::collectives` reads them, `crate::soak::flight` asks).
//!
//! Per process group: the last enqueued, started and completed sequence numbers and the
//! entries not completed. Frozen once released, as every stored type is.

use serde::{Deserialize, Serialize};

/// What was had of one rank process's collectives, and from where.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessCollectives {
    /// Where what is below came from: `fifo` (`unilab.watch_collectives()`), `worker_server`
    /// (torch's `TORCH_WORKER_SERVER_SOCKET`), `dump_file` (a dump torch wrote itself),
    /// `nccl_pipe`, `output_tail` (the watchdog's lines).
    pub sources: Vec<String>,
    /// Why nothing (or not everything) could be had, in words.
    pub missing: Vec<String>,
    pub groups: Vec<CollectiveGroup>,
}

/// One process group as a rank saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectiveGroup {
    /// The group's id in this rank (`pg_status`'s key, an entry's `pg_id`).
    pub group: String,
    /// The group's name (an entry's `process_group[0]`), the same on every rank of it.
    pub name: Option<String>,
    /// What the user called it (`process_group[1]`: `default_pg`).
    pub desc: Option<String>,
    /// Its global ranks, when the dump says.
    pub ranks: Vec<u64>,
    pub last_enqueued: Option<i64>,
    pub last_started: Option<i64>,
    pub last_completed: Option<i64>,
    /// The collectives enqueued and not completed, oldest first.
    pub pending: Vec<PendingCollective>,
}

/// One collective not completed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCollective {
    pub seq: i64,
    /// torch's profiling name: `gloo:all_reduce`, `nccl:_allgather_base`.
    pub op: String,
    pub input_sizes: Vec<Vec<i64>>,
    pub input_dtypes: Vec<String>,
    pub output_sizes: Vec<Vec<i64>>,
    /// `scheduled`, `started`; from a watchdog line, `timed out` or `failed`.
    pub state: String,
    /// Where it was called from, innermost first.
    pub top_frames: Vec<CollectiveFrame>,
    /// When the rank enqueued it (`time_created_ns`), Unix microseconds.
    pub enqueued_at_us: Option<i64>,
    /// Element counts, where only a watchdog line told of it (it gives no shapes).
    pub numel_in: Option<i64>,
    pub numel_out: Option<i64>,
}

/// One Python frame of a collective's call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectiveFrame {
    pub name: String,
    pub file: String,
    pub line: i64,
}
