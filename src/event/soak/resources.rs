//! What schema 6 adds to a soak's record: the resource limits it is held to (with the start),
//! the measures beside each sample — each process's proportional set size and each GPU's health
//! and other tenants — and which limit failed it (with the verdict).
//!
//! Like every stored type these are frozen once released; new fields make new forms.

use serde::{Deserialize, Serialize};

use super::GpuProcessSample;
use super::beats::SampleBeats;

/// The budgets a soak fails closed on, fixed when it starts; `None` where not set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// `--max-memory`: the tree's proportional set size.
    pub max_memory_bytes: Option<u64>,
    /// `--max-gpu-memory`: this tree's memory on any one GPU.
    pub max_gpu_memory_bytes: Option<u64>,
    /// `--max-memory-growth`: the trend of the tree's PSS after the warm-up.
    pub max_memory_growth_bytes_per_hour: Option<u64>,
    /// `--warmup`: how long growth is not judged; `None` for the default (a tenth of the run so
    /// far, and at least 5 minutes).
    pub warmup_ms: Option<u64>,
    /// What the tree's memory can grow to before the kernel steps in, as the soak started: the
    /// command's memory cgroup's limit, or the host's available memory, whichever is lower;
    /// what a growth trend is projected against.
    pub memory_ceiling_bytes: Option<u64>,
    /// Where that ceiling comes from: `cgroup /…` or `MemAvailable`.
    pub memory_ceiling_source: Option<String>,
}

/// One GPU's health at one instant, from the same loop-mode query as its memory; `None` where
/// the GPU or its driver does not report a figure.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuHealth {
    pub temperature_c: Option<u32>,
    /// Power draw in milliwatts (nvidia-smi prints watts with two decimals).
    pub power_mw: Option<u64>,
    pub sm_clock_mhz: Option<u32>,
    /// The active clock event ("throttle") reasons, NVML's bit mask
    /// (`clocks_event_reasons.active`, `clocks_throttle_reasons.active` before driver 535).
    pub throttle_mask: Option<u64>,
    /// Volatile uncorrected ECC errors since the driver loaded.
    pub ecc_uncorrected_volatile: Option<u64>,
    /// Whether retired pages are pending retirement (a reset is due).
    pub retired_pages_pending: Option<bool>,
    /// Compute processes on this GPU that are not of the soak's tree: other jobs.
    pub other_processes: Vec<GpuProcessSample>,
}

/// What schema 6 measures beside a [`Sample`](super::Sample), in the same order as its lists.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measures {
    /// Each process's proportional set size (`Pss` of `/proc/<pid>/smaps_rollup`), one per
    /// entry of `Sample::processes`; `None` where it cannot be read. Read on the slow cadence
    /// (and in the first and last samples); between readings a process keeps its last value.
    pub pss_bytes: Vec<Option<u64>>,
    /// Each GPU's health, one per entry of `Sample::gpus` (none when that is `None`).
    pub gpus: Vec<GpuHealth>,
    /// The beats since the previous sample; `None` when none arrived, or where its form did
    /// not read them (before schema 10).
    pub heartbeat: Option<Box<SampleBeats>>,
}

impl Measures {
    /// The tree's proportional set size: the sum of its processes' that could be read; `None`
    /// where none could.
    pub fn tree_pss_bytes(&self) -> Option<u64> {
        self.pss_bytes
            .iter()
            .flatten()
            .copied()
            .reduce(|a, b| a + b)
    }
}

/// Which budget failed a soak (`resource_limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceLimit {
    Memory,
    GpuMemory,
    MemoryGrowth,
}

impl ResourceLimit {
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceLimit::Memory => "memory",
            ResourceLimit::GpuMemory => "gpu_memory",
            ResourceLimit::MemoryGrowth => "memory_growth",
        }
    }
}

/// NVML's clock event reasons, by bit.
pub(crate) const THROTTLE_REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The names of the reasons a mask holds (bits unknown here as `0x…`).
pub(crate) fn throttle_reasons(mask: u64) -> Vec<String> {
    let known: u64 = THROTTLE_REASONS.iter().map(|(bit, _)| bit).sum();
    let mut names: Vec<String> = THROTTLE_REASONS
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|(_, name)| (*name).to_owned())
        .collect();
    if mask & !known != 0 {
        names.push(format!("{:#x}", mask & !known));
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_mask_reads_as_names_and_keeps_what_is_unknown() {
        assert!(throttle_reasons(0).is_empty());
        assert_eq!(
            throttle_reasons(0x44),
            ["sw_power_cap", "hw_thermal_slowdown"]
        );
        assert_eq!(throttle_reasons(0x1001), ["gpu_idle", "0x1000"]);
    }
}
