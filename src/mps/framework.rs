//! The framework's view of the GPUs, checked against unilab's: `mps doctor --python PYTHON`
//! runs the probe (`python/unilab/_framework_probe.py`, the same file the Python package's
//! `doctor(torch_module=...)` uses) with PYTHON; `--framework-view FILE` reads a view the
//! package wrote. The framework must see the GPUs unilab sees under the mask, in the same
//! order: CUDA's default order (fastest first) can differ from nvidia-smi's, and then device 0
//! in the trainer is not the GPU the daemon serves.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::check::{Check, CheckStatus};
use crate::event::GpuIdentity;

/// The probe's source, run as `PYTHON -c PROBE`.
pub(crate) const PROBE: &str = include_str!("../../python/unilab/_framework_probe.py");

/// Importing a framework takes seconds (CUDA's libraries): at least this long, whatever the
/// tool timeout.
const IMPORT_TIME: Duration = Duration::from_secs(60);

/// Where the view comes from.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// The probe run by this Python.
    Python(PathBuf),
    /// A view written by the Python package.
    File(PathBuf),
}

/// What the framework said.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct FrameworkView {
    #[serde(default)]
    module: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    cuda_available: bool,
    #[serde(default)]
    devices: Vec<Device>,
    /// Why the probe could not say (torch did not import...).
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
struct Device {
    index: u32,
    #[serde(default)]
    uuid: Option<String>,
}

/// The view from `source`, or why there is none.
pub(crate) fn read(source: &Source) -> Result<FrameworkView, String> {
    let text = match source {
        Source::File(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?,
        Source::Python(python) => probe(python)?,
    };
    serde_json::from_str(text.trim()).map_err(|e| format!("the view does not read ({e})"))
}

fn probe(python: &Path) -> Result<String, String> {
    let tool = crate::tool::external(python.as_os_str());
    let tool = crate::tool::Tool::new(tool.program, tool.timeout.max(IMPORT_TIME));
    let mut cmd = tool.command();
    cmd.args(["-c", PROBE]);
    let out = tool.run(cmd, b"").map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "`{}` exited with {}: {}",
            python.display(),
            out.code(),
            out.stderr.trim()
        ));
    }
    Ok(out.stdout)
}

/// A UUID as both sides write it: without `GPU-`, lower case.
fn bare(uuid: &str) -> String {
    uuid.trim().trim_start_matches("GPU-").to_ascii_lowercase()
}

/// The check: the framework sees `visible` (unilab's GPUs under the mask, in CUDA's numbering),
/// each device the GPU of the same ordinal.
pub(crate) fn check(view: Result<FrameworkView, String>, visible: &[GpuIdentity]) -> Check {
    const NAME: &str = "framework";
    let hint = |text: &str| Some(text.to_owned());
    let view = match view {
        Ok(view) => view,
        Err(why) => {
            return Check {
                name: NAME,
                status: CheckStatus::Fail,
                detail: format!("the framework's view could not be read: {why}"),
                hint: hint("check the Python given to --python imports torch"),
            };
        }
    };
    if let Some(error) = &view.error {
        return Check {
            name: NAME,
            status: CheckStatus::Fail,
            detail: format!("the framework could not say: {error}"),
            hint: hint("install torch in the Python given to --python, or leave --python out"),
        };
    }
    let who = format!("{} {}", view.module, view.version)
        .trim()
        .to_owned();
    if !view.cuda_available {
        return Check {
            name: NAME,
            status: if visible.is_empty() {
                CheckStatus::Ok
            } else {
                CheckStatus::Fail
            },
            detail: format!(
                "{who} sees no CUDA device; unilab sees {} under the mask",
                crate::text::count(visible.len() as u64, "GPU")
            ),
            hint: hint("check CUDA_VISIBLE_DEVICES and that this torch build has CUDA"),
        };
    }
    if view.devices.len() != visible.len() {
        return Check {
            name: NAME,
            status: CheckStatus::Fail,
            detail: format!(
                "{who} sees {} where unilab sees {} under the mask",
                crate::text::count(view.devices.len() as u64, "device"),
                crate::text::count(visible.len() as u64, "GPU")
            ),
            hint: hint("run the framework with the same CUDA_VISIBLE_DEVICES as unilab"),
        };
    }
    for (device, gpu) in view.devices.iter().zip(visible) {
        let Some(uuid) = &device.uuid else { continue };
        if bare(uuid) != bare(&gpu.uuid) {
            return Check {
                name: NAME,
                status: CheckStatus::Fail,
                detail: format!(
                    "{who}'s device {} is GPU-{} where unilab's ordinal {} is {}",
                    device.index,
                    bare(uuid),
                    gpu.index,
                    gpu.uuid
                ),
                hint: hint(
                    "set CUDA_DEVICE_ORDER=PCI_BUS_ID so that CUDA numbers GPUs as nvidia-smi does",
                ),
            };
        }
    }
    Check {
        name: NAME,
        status: CheckStatus::Ok,
        detail: format!(
            "{who} sees the same {} in the same order",
            crate::text::count(visible.len() as u64, "GPU")
        ),
        hint: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(uuids: &[&str]) -> Vec<GpuIdentity> {
        uuids
            .iter()
            .enumerate()
            .map(|(i, u)| GpuIdentity {
                index: i as u32,
                uuid: (*u).to_owned(),
            })
            .collect()
    }

    fn view(uuids: &[&str]) -> FrameworkView {
        FrameworkView {
            module: "torch".into(),
            version: "2.5".into(),
            cuda_available: true,
            devices: uuids
                .iter()
                .enumerate()
                .map(|(i, u)| Device {
                    index: i as u32,
                    uuid: Some((*u).to_owned()),
                })
                .collect(),
            error: None,
        }
    }

    #[test]
    fn the_same_gpus_in_the_same_order_pass() {
        let found = check(
            Ok(view(&["aaaa-1", "BBBB-2"])),
            &gpus(&["GPU-aaaa-1", "GPU-bbbb-2"]),
        );
        assert_eq!(found.status, CheckStatus::Ok, "{found:?}");
    }

    #[test]
    fn another_order_another_count_or_no_cuda_fail_with_a_hint() {
        let visible = gpus(&["GPU-aaaa-1", "GPU-bbbb-2"]);
        let swapped = check(Ok(view(&["bbbb-2", "aaaa-1"])), &visible);
        assert_eq!(swapped.status, CheckStatus::Fail);
        assert!(
            swapped
                .hint
                .unwrap()
                .contains("CUDA_DEVICE_ORDER=PCI_BUS_ID")
        );
        assert_eq!(
            check(Ok(view(&["aaaa-1"])), &visible).status,
            CheckStatus::Fail
        );
        let none = FrameworkView {
            cuda_available: false,
            ..view(&[])
        };
        assert_eq!(check(Ok(none), &visible).status, CheckStatus::Fail);
        let broken = FrameworkView {
            error: Some("ModuleNotFoundError: No module named 'torch'".into()),
            ..FrameworkView::default()
        };
        assert!(
            check(Ok(broken), &visible)
                .detail
                .contains("No module named")
        );
        assert_eq!(
            check(Err("gone".into()), &visible).status,
            CheckStatus::Fail
        );
    }
}
