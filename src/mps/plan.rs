//! The GPUs under the current mask, what a selector resolves to there (the TopologyPlan), and
//! `mps plan`'s report of it: as data, with whether a daemon can be started for it. `mps doctor
//! --json` carries the same report under `plan`.

use serde::Serialize;

use super::Mps;
use super::error::MpsError;
use crate::event::{GpuIdentity, TopologyMode};
use crate::gpu::mask::{self, StoppedAt, Visible};
use crate::gpu::selector::{Selector, SelectorError};
use crate::gpu::{GpuInfo, TopologyPlan, smi};

/// What the GPUs of this host look like under the current mask.
pub(crate) struct Topology {
    pub gpus: Vec<GpuInfo>,
    pub visible: Visible,
}

/// The GPUs nvidia-smi lists, under the caller's mask.
pub(crate) fn topology(mps: &Mps) -> Result<Topology, MpsError> {
    let gpus = smi::discover(&mps.smi).map_err(MpsError::Smi)?;
    under_mask(mps, gpus)
}

/// The GPUs nvidia-smi listed, with the caller's mask applied.
pub(crate) fn under_mask(mps: &Mps, gpus: Vec<GpuInfo>) -> Result<Topology, MpsError> {
    let visible = mask::visible(mps.env.cuda_visible_devices.as_deref(), &gpus)?;
    Ok(Topology { gpus, visible })
}

/// What `selector` names among the GPUs the mask leaves visible.
pub(crate) fn resolve(
    mps: &Mps,
    topology: &Topology,
    selector: Option<&str>,
) -> Result<TopologyPlan, MpsError> {
    Selector::parse(selector)
        .and_then(|s| {
            s.resolve(
                selector.unwrap_or(""),
                &topology.visible.gpus,
                mps.env.cuda_visible_devices.as_deref(),
            )
        })
        .map_err(MpsError::Selector)
}

/// A resolved selector with what it was resolved under. The TopologyPlan's fields
/// (`selector`, `topology_mode`, `gpus`) come first; `topology_mode` is `null` only when no
/// selector was given and several GPUs are visible: then `choices` holds a single-GPU plan for
/// each, selected by UUID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PlanReport {
    pub selector: String,
    pub topology_mode: Option<TopologyMode>,
    pub gpus: Vec<GpuIdentity>,
    /// The mask it was resolved under; `null` when `CUDA_VISIBLE_DEVICES` is unset.
    pub cuda_visible_devices: Option<String>,
    /// Where CUDA stops reading the mask, when it stops early.
    pub mask_stopped_at: Option<StoppedAt>,
    /// Whether `mps start` can start a daemon for this plan.
    pub can_start: bool,
    /// Why it cannot, when it cannot.
    pub cannot_start: Option<String>,
    pub choices: Vec<TopologyPlan>,
}

/// The one GPU a plan may start a daemon for: only `single_gpu` can.
pub(crate) fn startable(plan: &TopologyPlan) -> Result<&GpuIdentity, MpsError> {
    match (plan.topology_mode, plan.gpus.as_slice()) {
        (TopologyMode::SingleGpu, [gpu]) => Ok(gpu),
        _ => Err(MpsError::ModeNotStartable {
            selector: plan.selector.clone(),
            mode: plan.topology_mode,
            gpus: plan.gpus.iter().map(|g| g.uuid.clone()).collect(),
        }),
    }
}

/// Resolves `selector` against `topology` as `mps start` would. A selector that names no GPU is
/// an error; no selector with several GPUs visible is a plan with a choice for each.
pub(crate) fn report(
    mps: &Mps,
    topology: &Topology,
    selector: Option<&str>,
) -> Result<PlanReport, MpsError> {
    let mask = mps.env.cuda_visible_devices.clone();
    let stopped_at = topology.visible.stopped_at.clone();
    match resolve(mps, topology, selector) {
        Ok(plan) => {
            let cannot_start = startable(&plan).err().map(|e| e.to_string());
            Ok(PlanReport {
                selector: plan.selector,
                topology_mode: Some(plan.topology_mode),
                gpus: plan.gpus,
                cuda_visible_devices: mask,
                mask_stopped_at: stopped_at,
                can_start: cannot_start.is_none(),
                cannot_start,
                choices: Vec::new(),
            })
        }
        Err(MpsError::Selector(SelectorError::Ambiguous { visible })) => {
            let choices = visible
                .iter()
                .map(|gpu| TopologyPlan {
                    selector: gpu.uuid.clone(),
                    topology_mode: TopologyMode::SingleGpu,
                    gpus: vec![gpu.clone()],
                })
                .collect();
            Ok(PlanReport {
                selector: String::new(),
                topology_mode: None,
                gpus: Vec::new(),
                cuda_visible_devices: mask,
                mask_stopped_at: stopped_at,
                can_start: false,
                cannot_start: Some(SelectorError::Ambiguous { visible }.to_string()),
                choices,
            })
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32) -> GpuIdentity {
        GpuIdentity {
            index,
            uuid: format!("GPU-{index}{index}{index}{index}aaaa"),
        }
    }

    #[test]
    fn only_single_gpu_plans_can_start_a_daemon() {
        let plan = |topology_mode, gpus| TopologyPlan {
            selector: "x".into(),
            topology_mode,
            gpus,
        };
        assert_eq!(
            startable(&plan(TopologyMode::SingleGpu, vec![gpu(1)])).unwrap(),
            &gpu(1)
        );
        for (mode, gpus) in [
            (TopologyMode::SingleTaskMultiGpu, vec![gpu(0), gpu(1)]),
            (TopologyMode::TaskPerGpu, vec![gpu(0), gpu(1)]),
            (TopologyMode::TaskPerGpu, vec![gpu(0)]),
        ] {
            let refused = startable(&plan(mode, gpus)).unwrap_err();
            assert!(matches!(refused, MpsError::ModeNotStartable { .. }));
        }
    }
}
