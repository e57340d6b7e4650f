//! The stored form of a resolved GPU topology.

use serde::{Deserialize, Serialize};

/// One GPU. `index` is the visible ordinal (as CUDA numbers devices under the current mask);
/// `uuid` is the canonical `GPU-...` identifier that stays stable when the mask changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuIdentity {
    pub index: u32,
    pub uuid: String,
}

/// How a resolved set of GPUs is to be used. Only `SingleGpu` may start an MPS daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TopologyMode {
    SingleGpu,
    SingleTaskMultiGpu,
    TaskPerGpu,
}

impl TopologyMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TopologyMode::SingleGpu => "single_gpu",
            TopologyMode::SingleTaskMultiGpu => "single_task_multi_gpu",
            TopologyMode::TaskPerGpu => "task_per_gpu",
        }
    }
}

impl std::fmt::Display for TopologyMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
