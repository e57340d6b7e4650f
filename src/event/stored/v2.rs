//! The soak's start and verdict as schema 2 introduced them, frozen: every form of
//! `soak_started` since schema 2 (`SoakStartedV4` to the newest) and of `soak_finished` since
//! schema 2 (`SoakFinishedV4` to the newest) holds them, and they are read as the domain's
//! `SoakStart` and `SoakEnd` (`event::upcast`), which keep every value they hold. Nothing here
//! may change: a field the domain's start or verdict gains is a new form, holding a new copy.
//! The types they hold are pinned by `log::golden` (see `migrations/README.md`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::soak::{ExitInfo, LeakedProcess, Outcome, SoakParameters};
use crate::process::ProcessIdentity;

/// Everything fixed when a soak starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SoakStart {
    pub soak_id: String,
    /// Credential values masked; since schema 11, an argument that is not UTF-8 held lossily
    /// (see the start's `command_lossy`).
    pub command: Vec<String>,
    pub cwd: String,
    pub progress_dir: String,
    pub output: String,
    pub parameters: SoakParameters,
    /// Whether a command that exits 0 must have shown progress to pass.
    pub require_progress: bool,
    /// Credential values masked.
    pub metadata: BTreeMap<String, String>,
    /// Variables unilab set for the command, credentials masked.
    pub environment: BTreeMap<String, String>,
    /// The supervising unilab process.
    pub supervisor: ProcessIdentity,
    /// The runtime snapshot as canonical JSON, embedded verbatim in the artifact.
    pub runtime_json: String,
    /// `sysconf(_SC_CLK_TCK)` of the sampling host.
    pub ticks_per_second: u64,
}

/// The verdict, written once the last child is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoakEnd {
    pub outcome: Outcome,
    pub exit: Option<ExitInfo>,
    /// How long the command itself ran.
    pub run_ms: u64,
    /// From then until every process of the tree was gone.
    pub teardown_ms: u64,
    /// Milliseconds after spawn at which progress was first observed.
    pub first_progress_ms: Option<u64>,
    pub last_progress_ms: Option<u64>,
    pub leaked_processes: Vec<LeakedProcess>,
    /// Credential values masked.
    pub stdout_tail: Vec<u8>,
    pub stderr_tail: Vec<u8>,
}
