//! `mps status` and `mps list`: what this host has, read-only.

use super::daemon_log;
use super::plan;
use super::records;
use std::collections::BTreeSet;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{DaemonRecord, Mps, dirs};
use crate::env::DEFAULT_MPS_PIPE_DIRECTORY;
use crate::event::{GpuIdentity, TopologyMode};
use crate::log::{LogError, Snapshot};

/// A control pipe found on the host, and which of this user's records own it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ControlPipeStatus {
    pub path: String,
    pub kind: &'static str,
    pub managed_names: Vec<String>,
}

/// A record with what it names now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ManagedDaemon {
    #[serde(flatten)]
    pub record: DaemonRecord,
    pub live: bool,
    /// `live`, `wedged` (its process is there but its control socket gives no answer in time),
    /// or why the record is stale.
    pub state: &'static str,
    /// The evidence: the start time of the process that has the recorded pid now (against the
    /// record's `process_start_ticks`), `null` when no process has it.
    pub observed_start_ticks: Option<u64>,
    /// Whether the daemon answered `get_server_list` in time; `null` when it was not asked.
    pub answered: Option<bool>,
    /// What the tail of its `control.log` and `server.log` tells of trouble.
    pub log_findings: Vec<daemon_log::LogFinding>,
    /// The processes using it through `mps exec --shared`.
    pub leases: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct HostStatus {
    pub platform: String,
    pub nvidia_smi_available: bool,
    pub cuda_visible_devices: Option<String>,
    pub gpus: Vec<GpuIdentity>,
    pub control_pipes: Vec<ControlPipeStatus>,
    pub managed_daemons: Vec<ManagedDaemon>,
    pub diagnostic: Option<String>,
    pub compatible_topology_modes: Vec<TopologyMode>,
}

pub(crate) fn managed(
    mps: &Mps,
    snapshot: Option<&Snapshot>,
) -> Result<Vec<ManagedDaemon>, LogError> {
    let Some(snapshot) = snapshot else {
        return Ok(Vec::new());
    };
    let leases = crate::projection::Leases::rows(snapshot)?;
    Ok(records::records(mps, snapshot)?
        .into_iter()
        .map(|record| {
            let observed = records::observe(mps, &record);
            ManagedDaemon {
                live: observed.state == records::DaemonState::Live,
                state: observed.state.as_str(),
                observed_start_ticks: observed.observed_start_ticks,
                answered: observed.answered,
                log_findings: daemon_log::findings(Path::new(&record.log_directory)),
                leases: leases
                    .iter()
                    .find(|(name, _)| *name == record.name)
                    .map_or(0, |(_, row)| row.holders.len()),
                record,
            }
        })
        .collect())
}

pub(crate) fn host_status(mps: &Mps, snapshot: Option<&Snapshot>) -> Result<HostStatus, LogError> {
    let managed_daemons = managed(mps, snapshot)?;
    let (nvidia_smi_available, gpus, diagnostic) = match plan::topology(mps) {
        Ok(topology) => {
            let note = topology.visible.stopped_at.as_ref().map(|s| {
                format!(
                    "CUDA_VISIBLE_DEVICES stops at `{}`, which {}",
                    s.entry, s.reason
                )
            });
            (true, topology.visible.gpus, note)
        }
        Err(super::error::MpsError::Smi(e)) => (
            !matches!(e, crate::gpu::smi::SmiError::Missing { .. }),
            Vec::new(),
            Some(e.to_string()),
        ),
        Err(e) => (true, Vec::new(), Some(e.to_string())),
    };
    let compatible_topology_modes = match gpus.len() {
        0 => Vec::new(),
        1 => vec![TopologyMode::SingleGpu],
        _ => vec![
            TopologyMode::SingleGpu,
            TopologyMode::SingleTaskMultiGpu,
            TopologyMode::TaskPerGpu,
        ],
    };
    Ok(HostStatus {
        platform: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
        nvidia_smi_available,
        cuda_visible_devices: mps.env.cuda_visible_devices.clone(),
        gpus,
        control_pipes: control_pipes(mps, &managed_daemons),
        managed_daemons,
        diagnostic,
        compatible_topology_modes,
    })
}

/// NVIDIA's default pipe directory, `$CUDA_MPS_PIPE_DIRECTORY`, the records' pipe directories and
/// every directory under unilab's own pipe roots: those whose `control` exists.
fn control_pipes(mps: &Mps, managed: &[ManagedDaemon]) -> Vec<ControlPipeStatus> {
    let mut candidates: BTreeSet<PathBuf> = BTreeSet::new();
    candidates.insert(PathBuf::from(DEFAULT_MPS_PIPE_DIRECTORY));
    candidates.extend(mps.env.mps_pipe_directory.clone());
    candidates.extend(
        managed
            .iter()
            .map(|m| PathBuf::from(&m.record.pipe_directory)),
    );
    let mut roots = vec![PathBuf::from(format!("/tmp/unilab-{}/mps", mps.paths.uid))];
    roots.extend(mps.env.runtime_dir.as_ref().map(|d| d.join("unilab/mps")));
    for root in roots {
        if let Ok(entries) = std::fs::read_dir(&root) {
            candidates.extend(entries.filter_map(|e| e.ok().map(|e| e.path())));
        }
    }
    candidates
        .into_iter()
        .filter_map(|dir| {
            let control = dir.join(dirs::CONTROL_SOCKET);
            let meta = std::fs::symlink_metadata(&control).ok()?;
            let kind = if meta.file_type().is_socket() {
                "socket"
            } else if meta.file_type().is_fifo() {
                "fifo"
            } else {
                "other"
            };
            Some(ControlPipeStatus {
                path: control.display().to_string(),
                kind,
                managed_names: managed
                    .iter()
                    .filter(|m| Path::new(&m.record.pipe_directory) == dir)
                    .map(|m| m.record.name.clone())
                    .collect(),
            })
        })
        .collect()
}
