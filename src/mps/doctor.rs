//! `mps doctor`: a read-only checklist of everything `mps start` depends on.

use super::names;
use super::plan;
use super::spec;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::check::{Check, CheckStatus};
use super::dirs::{self, Occupant};
use super::error::MpsError;
use super::plan::PlanReport;
use super::{Mps, status};
use crate::diagnostic::Hint;
use crate::env::DEFAULT_MPS_PIPE_DIRECTORY;
use crate::event::GpuIdentity;
use crate::gpu::selector::Selector;
use crate::gpu::{GpuInfo, mask, smi};
use crate::log::{LogError, Snapshot};

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

/// What `mps doctor` found: every check that could run, and the plan the selector resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Report {
    /// No check failed.
    pub ok: bool,
    /// What the selector resolves to; `null` when it could not be resolved.
    pub plan: Option<PlanReport>,
    pub checks: Vec<Check>,
}

/// The daemon a start would launch, as far as doctor could plan it.
struct PlannedDaemon {
    name: String,
    gpu: String,
    pipe_directory: PathBuf,
    log_directory: PathBuf,
}

/// Runs every check that can run — one that depends on a failed one is reported as skipped —
/// through the same steps `mps start` takes. Nothing is created, started or recorded.
pub(crate) fn doctor(
    mps: &Mps,
    snapshot: Option<&Snapshot>,
    selector: Option<&str>,
    framework: Option<&super::framework::Source>,
) -> Result<Report, LogError> {
    let mut checks = Vec::new();
    let gpus = match smi::discover(&mps.smi) {
        Ok(gpus) => {
            checks.push(gpu_list_check(&gpus));
            Some(gpus)
        }
        Err(e) => {
            checks.push(failed("nvidia-smi", &MpsError::Smi(e)));
            None
        }
    };
    checks.push(control_check(mps));
    let topology = match gpus {
        Some(gpus) => match plan::under_mask(mps, gpus) {
            Ok(topology) => {
                checks.push(mask_check(mps, &topology));
                Some(topology)
            }
            Err(e) => {
                checks.push(failed("visibility mask", &e));
                None
            }
        },
        None => {
            checks.push(skipped(
                "visibility mask",
                "needs the GPU list from nvidia-smi",
            ));
            None
        }
    };
    checks.extend(
        topology
            .as_ref()
            .and_then(|t| order_check(mps, t, selector)),
    );
    if let Some(source) = framework {
        checks.push(match &topology {
            Some(topology) => {
                super::framework::check(super::framework::read(source), &topology.visible.gpus)
            }
            None => skipped("framework", "needs the visible GPUs"),
        });
    }
    let plan = match &topology {
        Some(topology) => match plan::report(mps, topology, selector) {
            Ok(report) => {
                checks.push(selector_check(&report));
                Some(report)
            }
            Err(e) => {
                checks.push(failed("selector", &e));
                None
            }
        },
        None => {
            checks.push(skipped("selector", "needs the visible GPUs"));
            None
        }
    };
    match plan.as_ref().and_then(|report| target(mps, report)) {
        Some(target) => {
            let managed = status::managed(mps, snapshot)?;
            let ours: Vec<&status::ManagedDaemon> = managed
                .iter()
                .filter(|m| {
                    m.record.name == target.name || m.record.gpu_uuids.contains(&target.gpu)
                })
                .collect();
            let live_here = ours
                .iter()
                .any(|m| m.live && Path::new(&m.record.pipe_directory) == target.pipe_directory);
            checks.push(daemon_check(&target, &ours));
            checks.extend(daemon_log_check(&target.log_directory));
            checks.push(pipe_check(mps, &target.pipe_directory, live_here));
            checks.push(log_check(&target.log_directory));
        }
        None => {
            checks.push(skipped("daemon", "needs a selector that names one GPU"));
            // Without a daemon's name: the directories its own would be created in.
            let some_pipe = spec::pipe_directory_for(mps, None, "_");
            checks.push(base_check(mps, some_pipe.parent().unwrap_or(&some_pipe)));
            checks.push(log_check(&mps.paths.user_dir().join("mps")));
        }
    }
    checks.extend(system_daemon_check(mps));
    Ok(Report {
        ok: checks.iter().all(|c| c.status != CheckStatus::Fail),
        plan,
        checks,
    })
}

/// The daemon a start would launch for a plan that can start one.
fn target(mps: &Mps, report: &PlanReport) -> Option<PlannedDaemon> {
    let gpu = match (report.can_start, report.gpus.as_slice()) {
        (true, [gpu]) => gpu.uuid.clone(),
        _ => return None,
    };
    let name = names::default_name(&gpu, mps.env.job.as_deref());
    Some(PlannedDaemon {
        pipe_directory: spec::pipe_directory_for(mps, None, &name),
        log_directory: spec::log_directory_for(mps, None, &name),
        name,
        gpu,
    })
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

fn skipped(name: &'static str, why: &str) -> Check {
    check(name, CheckStatus::Skip, format!("not checked: {why}"), None)
}

/// What nvidia-smi lists.
fn gpu_list_check(gpus: &[GpuInfo]) -> Check {
    let names: Vec<String> = gpus
        .iter()
        .map(|g| format!("{} {}", g.index, g.uuid))
        .collect();
    check(
        "nvidia-smi",
        CheckStatus::Ok,
        format!(
            "{}: {}",
            crate::text::count(gpus.len() as u64, "GPU"),
            names.join(", ")
        ),
        None,
    )
}

/// Whether the control tool that starts and answers for daemons can be run.
fn control_check(mps: &Mps) -> Check {
    match mps.control.locate() {
        Some(path) => check(
            "control tool",
            CheckStatus::Ok,
            format!("`{}`", path.display()),
            None,
        ),
        None => failed(
            "control tool",
            &MpsError::ControlMissing {
                program: mps.control.name(),
            },
        ),
    }
}

/// What the mask leaves visible.
fn mask_check(mps: &Mps, topology: &plan::Topology) -> Check {
    let mask = mps.env.cuda_visible_devices.as_deref();
    let visible: Vec<&str> = topology
        .visible
        .gpus
        .iter()
        .map(|g| g.uuid.as_str())
        .collect();
    match (&topology.visible.stopped_at, mask) {
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
    }
}

/// Whether CUDA's ordinals can differ from nvidia-smi's where the selector or the mask uses
/// them; GPUs named by UUID are the same in every order.
fn order_check(mps: &Mps, topology: &plan::Topology, selector: Option<&str>) -> Option<Check> {
    let by_ordinal = Selector::parse(selector).is_ok_and(|s| s.uses_ordinals())
        || mps
            .env
            .cuda_visible_devices
            .as_deref()
            .is_some_and(mask::uses_indices);
    let pci_order = mps.env.cuda_device_order.as_deref() == Some("PCI_BUS_ID");
    (topology.gpus.len() > 1 && by_ordinal && !pci_order).then(|| {
        check(
            "device order",
            CheckStatus::Warn,
            "GPUs are named by ordinal and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA's ordinals may differ from nvidia-smi's",
            Some("`export CUDA_DEVICE_ORDER=PCI_BUS_ID`, or select GPUs by UUID".into()),
        )
    })
}

/// What the selector resolves to, and whether a daemon can start for it.
fn selector_check(report: &PlanReport) -> Check {
    let shown = if report.selector.is_empty() {
        "(none)"
    } else {
        report.selector.as_str()
    };
    let listed = |gpus: &[GpuIdentity]| {
        gpus.iter()
            .map(|g| format!("{} {}", g.index, g.uuid))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (report.topology_mode, &report.cannot_start) {
        // No selector and several GPUs: nothing is wrong; a start just needs to be told which.
        (None, _) => check(
            "selector",
            CheckStatus::Ok,
            format!(
                "`{shown}`: {} GPUs are visible; `unilab mps start` needs a selector (one daemon per GPU): {}",
                report.choices.len(),
                report
                    .choices
                    .iter()
                    .map(|c| listed(&c.gpus))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            Some("e.g. `unilab mps start GPU-<uuid prefix>`".into()),
        ),
        (Some(mode), None) => check(
            "selector",
            CheckStatus::Ok,
            format!("`{shown}` → {mode} on {}", listed(&report.gpus)),
            None,
        ),
        (Some(_), Some(why)) => check(
            "selector",
            CheckStatus::Fail,
            why.clone(),
            Some("start one daemon per GPU, e.g. `unilab mps start GPU-<uuid prefix>`".into()),
        ),
    }
}

/// Whether a daemon of this user already serves the planned name or GPU.
fn daemon_check(plan: &PlannedDaemon, ours: &[&status::ManagedDaemon]) -> Check {
    if let Some(m) = ours.iter().find(|m| m.state == "wedged") {
        return check(
            "daemon",
            CheckStatus::Fail,
            format!(
                "`{}` (pid {}) is wedged: it accepts connections on its control socket but gave no answer in time; its clients hang",
                m.record.name, m.record.pid
            ),
            Some(format!(
                "`unilab mps stop {}` stops it by signal; then start a new daemon",
                m.record.name
            )),
        );
    }
    if let Some(m) = ours.iter().find(|m| m.live) {
        return check(
            "daemon",
            CheckStatus::Warn,
            format!(
                "`{}` (pid {}) already serves {}; `unilab mps start` would refuse",
                m.record.name, m.record.pid, plan.gpu
            ),
            Some(format!(
                "use it with `unilab mps exec {0} -- CMD`, or stop it with `unilab mps stop {0}`",
                m.record.name
            )),
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

/// What the planned daemon's own logs tell of trouble, if anything.
fn daemon_log_check(log_directory: &Path) -> Option<Check> {
    let found = super::daemon_log::findings(log_directory);
    let last = found.last()?;
    Some(check(
        "daemon log",
        CheckStatus::Warn,
        format!(
            "{} in `{}`; the latest, {}: {} (`{}`)",
            crate::text::count(found.len() as u64, "finding"),
            log_directory.display(),
            last.at.as_deref().unwrap_or("at an unknown time"),
            last.meaning(),
            last.line
        ),
        Some("`unilab mps status` lists each; see NVIDIA's MPS documentation for the line".into()),
    ))
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

/// The daemon's pipe directory, by the checks `mps start` makes, and whether a daemon unilab
/// did not start answers in it.
fn pipe_check(mps: &Mps, pipe_directory: &Path, ours_live: bool) -> Check {
    if let Err(e) = spec::check_pipe_directory(mps, pipe_directory) {
        return failed("pipe directory", &e);
    }
    if !ours_live && let Occupant::Live { pid } = dirs::occupant(mps.proc, pipe_directory) {
        let foreign = MpsError::ForeignDaemon {
            pipe_directory: pipe_directory.to_owned(),
            pid,
        };
        return failed("pipe directory", &foreign);
    }
    let len = pipe_directory.join(dirs::CONTROL_SOCKET).as_os_str().len();
    check(
        "pipe directory",
        CheckStatus::Ok,
        format!("`{}` ({len}-byte socket path)", pipe_directory.display()),
        None,
    )
}

/// With no daemon planned: whether the directory daemons' pipe directories go in is trustworthy.
fn base_check(mps: &Mps, base: &Path) -> Check {
    let trusted = dirs::creation_base(base, mps.env.runtime_dir.as_deref(), mps.paths.uid);
    match dirs::check_existing(&trusted, base, mps.paths.uid) {
        Ok(()) => check(
            "pipe directory",
            CheckStatus::Ok,
            format!("daemons' pipe directories go under `{}`", base.display()),
            None,
        ),
        Err(e) => failed("pipe directory", &e),
    }
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
