//! User-owned CUDA MPS control daemons.
//!
//! A record gives stop authority only while its `(pid, process_start_ticks)` still names a live
//! process of the same user; a daemon unilab cannot prove it started is never touched.
//!
//! The rules are a pure core in `decide` (what stands in a start's way, what to do about an
//! open start, what a stop does with a record). Around it: `plan` (the GPUs under the mask and
//! what a selector names), `names`, `records` (this user's records, picking one), `spec` (a
//! start request resolved and checked), `start` (a detached start: clearing the way, launch,
//! record and verify), `settle` (starts cut short), `stop` (and what a stopped launch records),
//! `foreground`, `exec` (a command with a daemon's environment), `shared` (leases on a job's
//! daemon), `clients` (a tree's MPS clients ended by their daemon before it is signalled),
//! `doctor` with `framework` (the checklist, each finding a `check`), `status`, and the I/O they
//! use: `control` (the NVIDIA tool), `dirs` (pipe and log directories), `lock`,
//! `limits`, `daemon_log`.

pub(crate) mod check;
pub(crate) mod clients;
pub(crate) mod control;
pub(crate) mod daemon_log;
pub(crate) mod decide;
pub(crate) mod dirs;
pub(crate) mod doctor;
pub(crate) mod error;
pub(crate) mod exec;
pub(crate) mod foreground;
pub(crate) mod framework;
pub(crate) mod limits;
pub(crate) mod lock;
pub(crate) mod names;
pub(crate) mod plan;
pub(crate) mod records;
pub(crate) mod settle;
pub(crate) mod shared;
pub(crate) mod spec;
pub(crate) mod start;
pub(crate) mod status;
pub(crate) mod stop;

use std::path::PathBuf;

use serde::Serialize;

use crate::env::EnvVars;
use crate::event::{DaemonLimits, StartedDaemon, TopologyMode};
use crate::paths::StatePaths;
use crate::process::{ProcSource, ProcessIdentity};
use crate::tool::{self, Tool};

/// The variables of the caller's environment that the MPS commands read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HostEnv {
    pub cuda_visible_devices: Option<String>,
    pub cuda_device_order: Option<String>,
    pub runtime_dir: Option<PathBuf>,
    pub mps_pipe_directory: Option<PathBuf>,
    /// The Slurm job this runs in (`SLURM_JOB_ID`): it scopes default daemon names.
    pub job: Option<String>,
}

impl HostEnv {
    pub(crate) fn from_process() -> Self {
        let var = |name| std::env::var_os(name);
        Self {
            cuda_visible_devices: var(EnvVars::CUDA_VISIBLE_DEVICES)
                .map(|v| v.to_string_lossy().into_owned()),
            cuda_device_order: var(EnvVars::CUDA_DEVICE_ORDER)
                .map(|v| v.to_string_lossy().into_owned()),
            runtime_dir: var(EnvVars::XDG_RUNTIME_DIR)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            mps_pipe_directory: var(EnvVars::CUDA_MPS_PIPE_DIRECTORY)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            job: var(EnvVars::SLURM_JOB_ID)
                .map(|v| v.to_string_lossy().trim().to_owned())
                .filter(|v| !v.is_empty()),
        }
    }
}

/// What the MPS operations work with: where state lives, the process table, the two NVIDIA
/// tools, and the caller's environment. Each is a seam tests can replace.
pub(crate) struct Mps<'a> {
    pub paths: &'a StatePaths,
    pub proc: &'a dyn ProcSource,
    pub smi: Tool,
    pub control: Tool,
    pub env: HostEnv,
}

impl<'a> Mps<'a> {
    /// The tools as the process environment names them.
    pub(crate) fn from_process(paths: &'a StatePaths, proc: &'a dyn ProcSource) -> Self {
        Self {
            paths,
            proc,
            smi: tool::nvidia_smi(),
            control: tool::mps_control(),
            env: HostEnv::from_process(),
        }
    }
}

/// A daemon of this user as the MPS commands show it: the JSON of `mps list`, `mps start --json`
/// and the daemons in `mps status`. Field names follow the original design. Built from the
/// stored [`StartedDaemon`], so that a change here never changes the stored format.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct DaemonRecord {
    pub name: String,
    pub uid: u32,
    pub host: String,
    pub topology_mode: TopologyMode,
    pub gpu_uuids: Vec<String>,
    pub pipe_directory: String,
    pub log_directory: String,
    pub pid: u32,
    pub process_start_ticks: u64,
    /// Unix seconds.
    pub created_at: f64,
    /// The Slurm job it was started in, as recorded (never read back from its name).
    pub job: Option<String>,
    /// The share of SMs each client may use, in percent, as set and read back at its start.
    pub active_thread_percentage: Option<f64>,
    /// The device memory each client process may pin, in bytes, as set and read back.
    pub pinned_memory_limit: Option<u64>,
}

impl DaemonRecord {
    /// The record of a started daemon, with the job and limits its start recorded.
    pub(crate) fn of(started: StartedDaemon, job: Option<String>, limits: DaemonLimits) -> Self {
        let StartedDaemon {
            name,
            uid,
            host,
            topology_mode,
            gpu_uuids,
            pipe_directory,
            log_directory,
            pid,
            process_start_ticks,
            created_at,
        } = started;
        Self {
            name,
            uid,
            host,
            topology_mode,
            gpu_uuids,
            pipe_directory,
            log_directory,
            pid,
            process_start_ticks,
            created_at,
            job,
            active_thread_percentage: limits.active_thread_percentage,
            pinned_memory_limit: limits.pinned_memory_limit,
        }
    }
}

impl DaemonRecord {
    /// The process this record gives authority over.
    pub(crate) fn identity(&self) -> ProcessIdentity {
        ProcessIdentity {
            pid: self.pid,
            start_ticks: self.process_start_ticks,
        }
    }
}
