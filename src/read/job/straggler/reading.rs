//! What the straggler rule needs of one rank's records, read as they go by: its steps
//! ([`RankSteps`]) and its GPUs' health ([`RankGpus`], its `CUDA_VISIBLE_DEVICES` taken from
//! its start). Keeps no sample.

use std::collections::BTreeMap;

use super::gpus::{GpuRun, RankGpus};
use super::steps::RankSteps;
use crate::event::soak::{Findings, Measures, Sample, SoakStart};

/// One rank's steps and GPUs, as its records are read in order.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RankReading {
    steps: RankSteps,
    gpus: RankGpus,
}

/// What was read: the last step, the median step seconds of `train`, and the GPUs' health.
pub(crate) struct RankRead {
    pub last_step: Option<u64>,
    pub median_step_seconds: Option<f64>,
    pub gpus: Vec<GpuRun>,
}

impl RankReading {
    pub(crate) fn start(&mut self, start: &SoakStart) {
        let mask = visible_devices(&start.environment, &start.runtime_json);
        self.gpus = RankGpus::new(mask.as_deref());
    }

    pub(crate) fn sample(&mut self, sample: &Sample, measures: Option<&Measures>) {
        let Some(measures) = measures else {
            return;
        };
        if let Some(beats) = &measures.heartbeat {
            self.steps.sample(beats);
        }
        if let Some(gpus) = &sample.gpus {
            self.gpus.add(gpus, &measures.gpus);
        }
    }

    pub(crate) fn verdict(&mut self, findings: Option<&Findings>) {
        if let Some(run) = findings.and_then(|f| f.heartbeat.as_deref()) {
            self.steps.verdict(run);
        }
    }

    pub(crate) fn done(self) -> RankRead {
        let (last_step, median_step_seconds) = self.steps.done();
        RankRead {
            last_step,
            median_step_seconds,
            gpus: self.gpus.done(),
        }
    }
}

/// `CUDA_VISIBLE_DEVICES` as the soak's command got it: as `--env` set it (`environment`), else
/// as unilab had it (the environment of its runtime snapshot, `runtime_json`); `None` when
/// unset or unreadable.
fn visible_devices(environment: &BTreeMap<String, String>, runtime_json: &str) -> Option<String> {
    let name = crate::env::EnvVars::CUDA_VISIBLE_DEVICES;
    if let Some(set) = environment.get(name) {
        return Some(set.clone());
    }
    let runtime: serde_json::Value = serde_json::from_str(runtime_json).ok()?;
    runtime["environment"][name].as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--env` wins over the environment unilab ran in; neither, or a snapshot that is no JSON,
    /// is no mask.
    #[test]
    fn the_mask_is_the_one_the_command_got() {
        let runtime = r#"{"environment":{"CUDA_VISIBLE_DEVICES":"1,2"}}"#;
        let mut set = BTreeMap::new();
        assert_eq!(visible_devices(&set, runtime).as_deref(), Some("1,2"));
        set.insert("CUDA_VISIBLE_DEVICES".to_owned(), "3".to_owned());
        assert_eq!(visible_devices(&set, runtime).as_deref(), Some("3"));
        let none = BTreeMap::new();
        assert_eq!(visible_devices(&none, r#"{"environment":{}}"#), None);
        assert_eq!(visible_devices(&none, "not json"), None);
    }
}
