//! A rank's GPUs over its run, summed as its samples are read: how often each slowdown reason
//! was active on each, and its mean SM clock and power draw — what [`super::cause`] compares.
//!
//! A rank's GPUs are those its tree's processes appear on among nvidia-smi's compute processes
//! (a sample's `gpus[].processes` are the tree's own); a rank seen on none is taken to use what
//! its `CUDA_VISIBLE_DEVICES` names (an index in nvidia-smi's order, or a `GPU-` UUID or unique
//! prefix of one, as [`crate::gpu::mask`] applies it), and with neither it has no GPU. The
//! memory kept grows with the GPUs seen, never with the samples (at most [`MAX_GPUS`] a rank).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::soak::{GpuHealth, GpuSample};
use crate::gpu::GpuInfo;

/// The most GPUs kept of one rank (of either kind, seen and named); more are not counted.
pub(crate) const MAX_GPUS: usize = 64;

/// The clock event reasons that slow a GPU down, by bit, with what they are for in a sentence.
/// Left out: `gpu_idle` (an idle GPU waits, it is not slowed), the clocks an administrator set,
/// sync boost and the display's clock.
pub(crate) const SLOWDOWNS: [(u64, &str, &str); 5] = [
    (0x4, "sw_power_cap", "throttled for power"),
    (0x80, "hw_power_brake_slowdown", "throttled for power"),
    (0x8, "hw_slowdown", "slowed by the hardware"),
    (0x20, "sw_thermal_slowdown", "throttled for heat"),
    (0x40, "hw_thermal_slowdown", "throttled for heat"),
];

/// A mean built as values come.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Mean {
    pub sum: f64,
    pub count: u64,
}

impl Mean {
    pub(crate) fn add(&mut self, value: f64) {
        self.sum += value;
        self.count += 1;
    }

    pub(crate) fn merge(&mut self, other: &Mean) {
        self.sum += other.sum;
        self.count += other.count;
    }

    pub(crate) fn value(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }
}

/// One GPU's health over the samples of a rank's run that read it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct GpuRun {
    /// nvidia-smi's index on its host.
    pub index: u32,
    pub uuid: String,
    /// Samples that read its clock event reasons.
    pub masks: u64,
    /// Of those, how many had each of [`SLOWDOWNS`] active, in its order.
    pub slowed: [u64; SLOWDOWNS.len()],
    pub sm_clock_mhz: Mean,
    pub power_watts: Mean,
}

impl GpuRun {
    fn new(gpu: &GpuSample) -> Self {
        GpuRun {
            index: gpu.index,
            uuid: gpu.uuid.clone(),
            ..GpuRun::default()
        }
    }

    fn add(&mut self, health: &GpuHealth) {
        if let Some(mask) = health.throttle_mask {
            self.masks += 1;
            for (slowed, (bit, _, _)) in self.slowed.iter_mut().zip(SLOWDOWNS) {
                if mask & bit != 0 {
                    *slowed += 1;
                }
            }
        }
        if let Some(clock) = health.sm_clock_mhz {
            self.sm_clock_mhz.add(f64::from(clock));
        }
        if let Some(mw) = health.power_mw {
            self.power_watts.add(mw as f64 / 1000.0);
        }
    }

    /// Adds another run's counts (of another GPU: a pool of them).
    pub(crate) fn merge(&mut self, other: &GpuRun) {
        self.masks += other.masks;
        for (mine, theirs) in self.slowed.iter_mut().zip(other.slowed) {
            *mine += theirs;
        }
        self.sm_clock_mhz.merge(&other.sm_clock_mhz);
        self.power_watts.merge(&other.power_watts);
    }
}

/// A rank's GPUs as its samples are read: [`RankGpus::add`] each sample, [`RankGpus::done`]
/// at the end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct RankGpus {
    /// `CUDA_VISIBLE_DEVICES` as the rank's command got it; `None` when unset.
    mask: Option<String>,
    /// By UUID: the GPUs the tree's processes appeared on.
    seen: BTreeMap<String, GpuRun>,
    /// By UUID: the GPUs the mask names.
    named: BTreeMap<String, GpuRun>,
}

impl RankGpus {
    /// A rank whose command was given `CUDA_VISIBLE_DEVICES=mask` (`None` when unset).
    pub(crate) fn new(mask: Option<&str>) -> Self {
        RankGpus {
            mask: mask.map(str::to_owned),
            ..RankGpus::default()
        }
    }

    /// One sample's GPUs and their health (one per GPU, in the same order; fewer where the
    /// sample measured none).
    pub(crate) fn add(&mut self, gpus: &[GpuSample], health: &[GpuHealth]) {
        let named: Vec<String> = match &self.mask {
            Some(mask) => {
                let infos: Vec<GpuInfo> = gpus
                    .iter()
                    .map(|g| GpuInfo {
                        index: g.index,
                        uuid: g.uuid.clone(),
                        name: String::new(),
                    })
                    .collect();
                crate::gpu::mask::visible(Some(mask), &infos)
                    .map(|v| v.gpus.into_iter().map(|g| g.uuid).collect())
                    .unwrap_or_default()
            }
            None => Vec::new(),
        };
        for (gpu, health) in gpus.iter().zip(health) {
            if !gpu.processes.is_empty() {
                count(&mut self.seen, gpu, health);
            }
            if named.contains(&gpu.uuid) {
                count(&mut self.named, gpu, health);
            }
        }
    }

    /// The rank's GPUs: those its processes appeared on, else those its mask names; by index.
    pub(crate) fn done(self) -> Vec<GpuRun> {
        let kept = if self.seen.is_empty() {
            self.named
        } else {
            self.seen
        };
        let mut runs: Vec<GpuRun> = kept.into_values().collect();
        runs.sort_by(|a, b| (a.index, &a.uuid).cmp(&(b.index, &b.uuid)));
        runs
    }
}

fn count(runs: &mut BTreeMap<String, GpuRun>, gpu: &GpuSample, health: &GpuHealth) {
    if let Some(run) = runs.get_mut(&gpu.uuid) {
        run.add(health);
    } else if runs.len() < MAX_GPUS {
        let mut run = GpuRun::new(gpu);
        run.add(health);
        runs.insert(gpu.uuid.clone(), run);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::soak::GpuProcessSample;

    fn gpu(index: u32, pids: &[u32]) -> GpuSample {
        GpuSample {
            index,
            uuid: format!("GPU-{index}{index}{index}{index}-aaaa"),
            memory_used_mib: None,
            memory_total_mib: None,
            utilization_percent: None,
            processes: pids
                .iter()
                .map(|&pid| GpuProcessSample {
                    pid,
                    used_memory_mib: None,
                })
                .collect(),
        }
    }

    fn health(mask: u64, clock: u32, mw: u64) -> GpuHealth {
        GpuHealth {
            throttle_mask: Some(mask),
            sm_clock_mhz: Some(clock),
            power_mw: Some(mw),
            ..GpuHealth::default()
        }
    }

    /// The GPU the tree's processes appear on is the rank's, whatever its mask says; its
    /// slowdowns are counted by reason, idle left out, and its clock and power averaged.
    #[test]
    fn the_gpus_a_rank_runs_on_are_its_own() {
        let mut gpus = RankGpus::new(Some("0"));
        let healthy = health(0x1, 1980, 300_000);
        gpus.add(
            &[gpu(0, &[]), gpu(1, &[]), gpu(2, &[42])],
            &[healthy.clone(), healthy.clone(), health(0x4, 1400, 250_000)],
        );
        gpus.add(
            &[gpu(0, &[]), gpu(1, &[]), gpu(2, &[42])],
            &[healthy.clone(), healthy.clone(), health(0x1, 1600, 350_000)],
        );
        // A sample without health counts nothing.
        gpus.add(&[gpu(0, &[]), gpu(1, &[]), gpu(2, &[42])], &[]);
        let runs = gpus.done();
        assert_eq!(runs.len(), 1);
        let run = &runs[0];
        assert_eq!((run.index, run.masks), (2, 2));
        assert_eq!(run.slowed, [1, 0, 0, 0, 0]);
        assert_eq!(run.sm_clock_mhz.value(), Some(1500.0));
        assert_eq!(run.power_watts.value(), Some(300.0));
    }

    /// A rank seen on no GPU is taken to use what its `CUDA_VISIBLE_DEVICES` names (an index,
    /// or a UUID prefix); unset or naming nothing, it has none.
    #[test]
    fn a_rank_seen_on_no_gpu_uses_its_mask() {
        let sample = [gpu(0, &[]), gpu(1, &[]), gpu(2, &[])];
        let health = [
            health(0, 1980, 1),
            health(0x40, 1200, 1),
            health(0x4, 1300, 1),
        ];
        for (mask, indices) in [
            (Some("1"), vec![1]),
            (Some("GPU-2222,0"), vec![0, 2]),
            (Some(""), vec![]),
            (Some("7"), vec![]),
            (Some("MIG-1"), vec![]),
            (None, vec![]),
        ] {
            let mut gpus = RankGpus::new(mask);
            gpus.add(&sample, &health);
            let runs = gpus.done();
            assert_eq!(
                runs.iter().map(|r| r.index).collect::<Vec<_>>(),
                indices,
                "{mask:?}"
            );
        }
        let mut gpus = RankGpus::new(Some("1"));
        gpus.add(&sample, &health);
        assert_eq!(gpus.done()[0].slowed, [0, 0, 0, 0, 1]);
    }

    /// However many GPUs a host lists, a rank keeps at most [`MAX_GPUS`].
    #[test]
    fn the_gpus_kept_are_bounded() {
        let sample: Vec<GpuSample> = (0..200).map(|i| gpu(i, &[1])).collect();
        let health = vec![GpuHealth::default(); 200];
        let mut gpus = RankGpus::new(None);
        gpus.add(&sample, &health);
        gpus.add(&sample, &health);
        assert_eq!(gpus.done().len(), MAX_GPUS);
    }
}
