//! `unilab mps status`: what this host offers MPS, and this user's daemons on it.

use super::{read_log, to_json};
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::mps::{Mps, status};
use crate::output::Output;

pub(super) fn status(mps: &Mps, out: &mut Output) -> Result<Exit, Error> {
    let snapshot = read_log(mps.paths, out)?;
    let status = status::host_status(mps, snapshot.as_ref())?;
    crate::commands::checked_show(snapshot.as_ref(), || show_status(&status, out))
}

fn show_status(status: &status::HostStatus, out: &mut Output) -> Result<Exit, Error> {
    if out.json {
        out.json_line(&to_json(status)?)?;
        return Ok(Exit::Success);
    }
    out.line(&format!("platform: {}", status.platform))?;
    out.line(&format!(
        "nvidia-smi: {}",
        if status.nvidia_smi_available {
            "available"
        } else {
            "unavailable"
        }
    ))?;
    out.line(&format!(
        "CUDA_VISIBLE_DEVICES: {}",
        status
            .cuda_visible_devices
            .as_deref()
            .map(|m| format!("`{m}`"))
            .unwrap_or_else(|| "unset".into())
    ))?;
    if let Some(diagnostic) = &status.diagnostic {
        out.line(&format!("diagnostic: {diagnostic}"))?;
    }
    out.line(&format!("visible GPUs: {}", status.gpus.len()))?;
    for gpu in &status.gpus {
        out.line(&format!("  {}  {}", gpu.index, gpu.uuid))?;
    }
    let modes: Vec<&str> = status
        .compatible_topology_modes
        .iter()
        .map(|m| m.as_str())
        .collect();
    out.line(&format!(
        "topology modes: {}",
        if modes.is_empty() {
            "none".into()
        } else {
            modes.join(", ")
        }
    ))?;
    out.line(&format!("control pipes: {}", status.control_pipes.len()))?;
    for pipe in &status.control_pipes {
        let owner = if pipe.managed_names.is_empty() {
            "not unilab's".to_owned()
        } else {
            format!("daemon {}", pipe.managed_names.join(", "))
        };
        out.line(&format!("  {}  ({}, {owner})", pipe.path, pipe.kind))?;
    }
    out.line(&format!("your daemons: {}", status.managed_daemons.len()))?;
    for daemon in &status.managed_daemons {
        let job = daemon
            .record
            .job
            .as_ref()
            .map(|job| format!("  job {job}"))
            .unwrap_or_default();
        out.line(&format!(
            "  {}  pid {}  {}{job}  {}",
            daemon.record.name,
            daemon.record.pid,
            out.paint.status(daemon.state),
            crate::text::count(daemon.leases as u64, "user")
        ))?;
        for finding in &daemon.log_findings {
            out.line(&format!(
                "    {} {}: {} (`{}`)",
                finding.at.as_deref().unwrap_or("-"),
                finding.file,
                finding.meaning(),
                finding.line
            ))?;
        }
    }
    Ok(Exit::Success)
}
