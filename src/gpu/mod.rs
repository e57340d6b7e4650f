//! GPUs as unilab names them: a canonical UUID, and the ordinal under which the current
//! `CUDA_VISIBLE_DEVICES` mask shows it.

use serde::{Deserialize, Serialize};

use crate::event::{GpuIdentity, TopologyMode};

pub(crate) mod mask;
#[cfg(test)]
mod props;
pub(crate) mod selector;
pub(crate) mod smi;
pub(crate) mod stream;

/// A GPU as `nvidia-smi` lists it, before the visibility mask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GpuInfo {
    /// nvidia-smi's own index (PCI order), not the CUDA ordinal.
    pub index: u32,
    pub uuid: String,
    pub name: String,
}

/// A resolved selector: the GPUs it names and how they are to be used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TopologyPlan {
    pub selector: String,
    pub topology_mode: TopologyMode,
    pub gpus: Vec<GpuIdentity>,
}
