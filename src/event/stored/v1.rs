//! Version 1 of the soak payloads (schema 1), frozen: soaks recorded by unilab before schema 2
//! are stored in these forms, and read as the current ones (`event::upcast`), which keep every
//! value they hold. Nothing here may change.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::soak::{
    ExitInfo, GpuSample, LeakedProcess, Outcome, ProgressSignature, SoakParameters,
};
use crate::process::ProcessIdentity;

/// Everything fixed when a soak starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SoakStart {
    pub soak_id: String,
    pub command: Vec<String>,
    pub cwd: String,
    pub progress_dir: String,
    pub output: String,
    pub parameters: SoakParameters,
    pub metadata: BTreeMap<String, String>,
    /// Variables set with `--env`, credentials already redacted.
    pub environment: BTreeMap<String, String>,
    /// The supervising unilab process; a soak whose supervisor is gone is abandoned.
    pub supervisor: ProcessIdentity,
    /// The runtime snapshot as canonical JSON, embedded verbatim in the artifact.
    pub runtime_json: String,
}

/// One process of the supervised tree at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSample {
    pub pid: u32,
    pub ppid: u32,
    pub start_ticks: u64,
    pub name: String,
    pub state: char,
    pub rss_bytes: u64,
    /// User plus system time, in clock ticks.
    pub cpu_ticks: u64,
    pub threads: u32,
    /// `None` where `/proc/<pid>/fd` could not be read.
    pub open_fds: Option<u32>,
    pub read_bytes: Option<u64>,
    pub write_bytes: Option<u64>,
}

/// One sample of the soak.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// 0 for the first sample.
    pub index: u64,
    /// Milliseconds since the command was spawned.
    pub elapsed_ms: u64,
    pub processes: Vec<ProcessSample>,
    pub gpus: Vec<GpuSample>,
    pub progress: ProgressSignature,
    /// Wall time the sampler spent on this sample.
    pub sampler_cost_us: u64,
    /// What the sampler could not read this time (a hung nvidia-smi, a vanished `/proc` entry).
    pub errors: Vec<String>,
}

/// The verdict, written once the last child is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoakEnd {
    pub outcome: Outcome,
    pub exit: Option<ExitInfo>,
    pub duration_ms: u64,
    /// Milliseconds after spawn at which progress was first observed.
    pub first_progress_ms: Option<u64>,
    pub last_progress_ms: Option<u64>,
    pub leaked_processes: Vec<LeakedProcess>,
    pub stdout_tail: Vec<u8>,
    pub stderr_tail: Vec<u8>,
}
