//! User-owned CUDA MPS control daemons.
//!
//! A record gives stop authority only while its `(pid, process_start_ticks)` still names a live
//! process of the same user; a daemon unilab cannot prove it started is never touched.

pub mod control;
pub mod daemon;
pub mod dirs;
pub mod doctor;
pub mod error;
pub mod status;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::env::EnvVars;
use crate::gpu::TopologyMode;
use crate::paths::StatePaths;
use crate::process::ProcSource;
use crate::tool::{self, Tool};

/// The variables of the caller's environment that the MPS commands read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostEnv {
    pub cuda_visible_devices: Option<String>,
    pub cuda_device_order: Option<String>,
    pub runtime_dir: Option<PathBuf>,
    pub mps_pipe_directory: Option<PathBuf>,
}

impl HostEnv {
    pub fn from_process() -> Self {
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
        }
    }
}

/// What the MPS operations work with: where state lives, the process table, the two NVIDIA
/// tools, and the caller's environment. Each is a seam tests can replace.
pub struct Mps<'a> {
    pub paths: &'a StatePaths,
    pub proc: &'a dyn ProcSource,
    pub smi: Tool,
    pub control: Tool,
    pub env: HostEnv,
}

impl<'a> Mps<'a> {
    /// The tools as the process environment names them.
    pub fn from_process(paths: &'a StatePaths, proc: &'a dyn ProcSource) -> Self {
        Self {
            paths,
            proc,
            smi: tool::nvidia_smi(),
            control: tool::mps_control(),
            env: HostEnv::from_process(),
        }
    }
}

/// What unilab knows about a daemon it started. Field names follow the original design, since
/// they are the JSON surface of `mps list --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonRecord {
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
}

/// Why a record was found stale and cleaned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StaleReason {
    /// No process has the recorded pid.
    ProcessGone,
    /// The pid now belongs to a process with another start time.
    PidReused,
    /// The process belongs to another user.
    NotOwned,
}

impl StaleReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StaleReason::ProcessGone => "process_gone",
            StaleReason::PidReused => "pid_reused",
            StaleReason::NotOwned => "not_owned",
        }
    }
}

/// How a daemon came to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopMethod {
    /// It obeyed `quit` on its control socket.
    Quit,
    /// It ignored `quit` and ended on SIGTERM.
    Terminated,
    /// It survived SIGTERM and was killed.
    Killed,
    /// A foreground daemon that exited on its own or on Ctrl-C.
    Exited,
}

impl StopMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            StopMethod::Quit => "quit",
            StopMethod::Terminated => "terminated",
            StopMethod::Killed => "killed",
            StopMethod::Exited => "exited",
        }
    }
}
