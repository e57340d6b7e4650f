//! The stored payloads of the daemon events.

use serde::{Deserialize, Serialize};

use super::topology::TopologyMode;

/// What `daemon_started` records about a daemon unilab started: the payload that gives stop
/// authority while `(pid, process_start_ticks)` still names a live process of `uid`.
///
/// Its field names are also the event's fields in `history --json`; its field *order* is the
/// stored encoding and must not change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartedDaemon {
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

/// The limits a daemon was started with (schema 7), each read back from the daemon before it
/// was recorded live; `None` where none was set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DaemonLimits {
    /// The share of the GPU's SMs each client may use, in percent
    /// (`set_default_active_thread_percentage`).
    pub active_thread_percentage: Option<f64>,
    /// The device memory each client process may pin, in bytes
    /// (`set_default_device_pinned_mem_limit`).
    pub pinned_memory_limit: Option<u64>,
}

impl DaemonLimits {
    pub fn is_empty(&self) -> bool {
        self.active_thread_percentage.is_none() && self.pinned_memory_limit.is_none()
    }
}

/// The job of a daemon recorded before schema 4, which did not record it: the `job<ID>-` its
/// name was given under a Slurm job is the only witness left. Never used for a daemon recorded
/// since, whose job is recorded with it.
pub(crate) fn legacy_job(name: &str) -> Option<String> {
    let (job, _) = name.strip_prefix("job")?.split_once('-')?;
    (!job.is_empty() && job.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then(|| job.to_owned())
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
