//! `mps doctor`: a read-only checklist of everything `mps start` depends on.

use std::path::Path;

use serde::Serialize;

use super::daemon::{self, Plan, StartRequest, Topology};
use super::dirs::{self, Occupant};
use super::error::MpsError;
use super::{Mps, status};
use crate::diagnostic::Hint;
use crate::env::DEFAULT_MPS_PIPE_DIRECTORY;
use crate::log::{LogError, Snapshot};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CheckStatus {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Check {
    pub name: &'static str,
    pub status: CheckStatus,
    pub detail: String,
    pub hint: Option<String>,
}

fn check(
    name: &'static str,
    status: CheckStatus,
    detail: impl Into<String>,
    hint: Option<String>,
) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
        hint,
    }
}

/// Runs every check; nothing is created, started or recorded.
pub(crate) fn doctor(
    mps: &Mps,
    snapshot: Option<&Snapshot>,
    selector: Option<&str>,
) -> Result<Vec<Check>, LogError> {
    let mut checks = Vec::new();
    let topology = match daemon::topology(mps) {
        Ok(topology) => topology,
        Err(e) => {
            checks.push(failed("nvidia-smi", &e));
            return Ok(checks);
        }
    };
    checks.extend(topology_checks(mps, &topology));
    let request = StartRequest {
        selector: selector.map(str::to_owned),
        ..StartRequest::default()
    };
    let plan = match daemon::plan(mps, &request) {
        Ok(plan) => {
            checks.push(check(
                "selector",
                CheckStatus::Ok,
                format!(
                    "`{}` → {} on {}",
                    selector.unwrap_or("(none)"),
                    plan.topology.topology_mode,
                    plan.gpu
                ),
                None,
            ));
            plan
        }
        Err(e) => {
            checks.push(failed("selector", &e));
            return Ok(checks);
        }
    };
    let managed = status::managed(mps, snapshot)?;
    let ours: Vec<&status::ManagedDaemon> = managed
        .iter()
        .filter(|m| m.record.name == plan.name || m.record.gpu_uuids.contains(&plan.gpu))
        .collect();
    let live_here = ours
        .iter()
        .any(|m| m.live && Path::new(&m.record.pipe_directory) == plan.pipe_directory);
    checks.push(daemon_check(&plan, &ours));
    checks.push(pipe_check(mps, &plan.pipe_directory, live_here));
    checks.push(log_check(&plan.log_directory));
    checks.extend(system_daemon_check(mps));
    Ok(checks)
}

/// A failed check, in the words of the error that failed it: the nvidia-smi or selector error
/// itself where the MPS error wraps one.
fn failed(name: &'static str, e: &MpsError) -> Check {
    let (detail, hint) = match e {
        MpsError::Smi(source) => (source.to_string(), source.hint()),
        MpsError::Selector(source) => (source.to_string(), source.hint()),
        other => (other.to_string(), other.hint()),
    };
    check(name, CheckStatus::Fail, detail, hint)
}

/// What nvidia-smi lists, what the mask leaves visible, and whether CUDA's ordinals match.
fn topology_checks(mps: &Mps, topology: &Topology) -> Vec<Check> {
    let names: Vec<String> = topology
        .gpus
        .iter()
        .map(|g| format!("{} {}", g.index, g.uuid))
        .collect();
    let mut checks = vec![check(
        "nvidia-smi",
        CheckStatus::Ok,
        format!("{} GPU(s): {}", topology.gpus.len(), names.join(", ")),
        None,
    )];
    let mask = mps.env.cuda_visible_devices.as_deref();
    let visible: Vec<&str> = topology
        .visible
        .gpus
        .iter()
        .map(|g| g.uuid.as_str())
        .collect();
    checks.push(match (&topology.visible.stopped_at, mask) {
        (Some(stop), Some(mask)) => check(
            "visibility mask",
            CheckStatus::Warn,
            format!(
                "CUDA_VISIBLE_DEVICES=`{mask}` stops at `{}`, which {}; CUDA sees {}",
                stop.entry,
                stop.reason,
                if visible.is_empty() {
                    "no GPU".into()
                } else {
                    visible.join(", ")
                }
            ),
            Some("remove or fix that entry and everything after it".into()),
        ),
        (_, Some(mask)) => check(
            "visibility mask",
            CheckStatus::Ok,
            format!("CUDA_VISIBLE_DEVICES=`{mask}`: {} visible", visible.len()),
            None,
        ),
        (_, None) => check(
            "visibility mask",
            CheckStatus::Ok,
            format!("CUDA_VISIBLE_DEVICES unset: all {} visible", visible.len()),
            None,
        ),
    });
    if topology.gpus.len() > 1 && mps.env.cuda_device_order.as_deref() != Some("PCI_BUS_ID") {
        checks.push(check(
            "device order",
            CheckStatus::Warn,
            "several GPUs and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA ordinals may differ from nvidia-smi's",
            Some("`export CUDA_DEVICE_ORDER=PCI_BUS_ID`, or select GPUs by UUID".into()),
        ));
    }
    checks
}

/// Whether a daemon of this user already serves the planned name or GPU.
fn daemon_check(plan: &Plan, ours: &[&status::ManagedDaemon]) -> Check {
    if let Some(m) = ours.iter().find(|m| m.live) {
        return check(
            "daemon",
            CheckStatus::Ok,
            format!(
                "`{}` (pid {}) serves {}",
                m.record.name, m.record.pid, plan.gpu
            ),
            None,
        );
    }
    match ours.first() {
        Some(m) => check(
            "daemon",
            CheckStatus::Warn,
            format!("the record of `{}` is stale ({})", m.record.name, m.state),
            Some(format!("`unilab mps stop {}` cleans it", m.record.name)),
        ),
        None => check(
            "daemon",
            CheckStatus::Ok,
            format!(
                "none yet for {}; `unilab mps start` would name it `{}`",
                plan.gpu, plan.name
            ),
            None,
        ),
    }
}

/// A daemon in NVIDIA's default pipe directory, which clients reach unless told otherwise.
fn system_daemon_check(mps: &Mps) -> Option<Check> {
    let Occupant::Live { pid } = dirs::occupant(mps.proc, Path::new(DEFAULT_MPS_PIPE_DIRECTORY))
    else {
        return None;
    };
    Some(check(
        "system daemon",
        CheckStatus::Warn,
        format!(
            "a daemon{} answers in NVIDIA's default `{DEFAULT_MPS_PIPE_DIRECTORY}`; clients without CUDA_MPS_PIPE_DIRECTORY use it",
            pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
        ),
        Some("run clients through `unilab mps exec` or `unilab mps env` to reach your own".into()),
    ))
}

fn pipe_check(mps: &Mps, pipe_directory: &Path, ours_live: bool) -> Check {
    let control = pipe_directory.join(dirs::CONTROL_SOCKET);
    let len = control.as_os_str().len();
    if len > dirs::MAX_SOCKET_PATH {
        return check(
            "pipe directory",
            CheckStatus::Fail,
            format!(
                "`{}` is {len} bytes (at most {})",
                control.display(),
                dirs::MAX_SOCKET_PATH
            ),
            Some("choose a shorter `--pipe-dir` or `--name`".into()),
        );
    }
    // Every existing level that unilab would create or rely on must be trustworthy.
    let base = dirs::creation_base(
        pipe_directory,
        mps.env.runtime_dir.as_deref(),
        mps.paths.uid,
    );
    if let Err(e) = dirs::check_existing(&base, pipe_directory, mps.paths.uid) {
        return check("pipe directory", CheckStatus::Fail, e.to_string(), e.hint());
    }
    if !ours_live && let Occupant::Live { pid } = dirs::occupant(mps.proc, pipe_directory) {
        return check(
            "pipe directory",
            CheckStatus::Fail,
            format!(
                "a daemon unilab did not start{} answers in `{}`",
                pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
                pipe_directory.display()
            ),
            Some("unilab will not touch it; choose another `--pipe-dir`".into()),
        );
    }
    check(
        "pipe directory",
        CheckStatus::Ok,
        format!("`{}` ({len}-byte socket path)", pipe_directory.display()),
        None,
    )
}

fn log_check(log_directory: &Path) -> Check {
    let mut existing = log_directory;
    while std::fs::symlink_metadata(existing).is_err() {
        match existing.parent() {
            Some(parent) => existing = parent,
            None => break,
        }
    }
    let writable = nix::unistd::access(
        existing,
        nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
    )
    .is_ok();
    if writable {
        check(
            "log directory",
            CheckStatus::Ok,
            format!("`{}`", log_directory.display()),
            None,
        )
    } else {
        check(
            "log directory",
            CheckStatus::Fail,
            format!("cannot write under `{}`", existing.display()),
            Some("choose another with `--log-dir` or `--root`".into()),
        )
    }
}
