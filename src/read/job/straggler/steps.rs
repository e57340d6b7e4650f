//! A rank's last step and median step time, as `job show` lists them, read from its records in
//! one pass.
//!
//! A finished soak's verdict has the whole run's steps by phase: its median of the `train`
//! phase's step seconds (within 1 %), and its last step is the highest phase's last (a trainer
//! counts its steps on across phases). Until then — a soak still running, or a verdict of a form
//! without them — the samples speak: the last step beaten, and the median of the medians of the
//! samples whose last beat left the trainer in the `train` phase, each weighed by its number of
//! beats (a sample of 50 beats counts 50 times one of a single beat). A sample records one phase,
//! its last beat's, for steps that may be of two (a step belongs to the phase the beat before it
//! set: `soak::heartbeat::summary`): the sample whose last beat starts a checkpoint is left out,
//! and the one after it, back in `train`, counts the checkpoint among its steps — once among
//! many, which moves a median little. Kept in a [`Sketch`], so its memory does not grow with the
//! samples.

use crate::event::soak::{RunBeats, SampleBeats};
use crate::soak::heartbeat::beat::DEFAULT_PHASE;
use crate::soak::heartbeat::sketch::Sketch;

/// The phase whose steps are compared.
pub(crate) const TRAIN: &str = DEFAULT_PHASE;

/// A rank's steps as its records are read: [`RankSteps::sample`] each sample's beats,
/// [`RankSteps::verdict`] the verdict's, then [`RankSteps::done`].
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RankSteps {
    last_step: Option<u64>,
    train: Sketch,
    verdict_last: Option<u64>,
    verdict_median: Option<f64>,
}

impl RankSteps {
    pub(crate) fn sample(&mut self, beats: &SampleBeats) {
        if beats.step.is_some() {
            self.last_step = beats.step;
        }
        if let (Some(TRAIN), Some(median)) = (beats.phase.as_deref(), beats.step_seconds_median) {
            self.train
                .add_times(f64::from(median), u64::from(beats.beats.max(1)));
        }
    }

    pub(crate) fn verdict(&mut self, run: &RunBeats) {
        self.verdict_last = run.steps.values().map(|s| s.last).max();
        self.verdict_median = run.steps.get(TRAIN).and_then(|s| s.median_seconds);
    }

    /// The last step and the median step seconds of the `train` phase; `None` where unknown.
    pub(crate) fn done(self) -> (Option<u64>, Option<f64>) {
        (
            self.verdict_last.or(self.last_step),
            self.verdict_median.or_else(|| self.train.quantile(0.5)),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::event::soak::StepStats;

    fn beats(n: u32, step: u64, phase: &str, median: f32) -> SampleBeats {
        SampleBeats {
            beats: n,
            step: Some(step),
            phase: Some(phase.into()),
            step_seconds_min: Some(median),
            step_seconds_median: Some(median),
            step_seconds_max: Some(median),
            numbers: BTreeMap::new(),
        }
    }

    /// While running: the last step beaten, and the median of the train samples' medians
    /// weighed by their beats (a checkpoint's sample left out); nothing without beats.
    #[test]
    fn while_running_the_samples_speak() {
        assert_eq!(RankSteps::default().done(), (None, None));
        let mut steps = RankSteps::default();
        steps.sample(&beats(40, 40, "train", 0.1));
        steps.sample(&beats(1, 41, "checkpoint", 20.0));
        steps.sample(&beats(3, 44, "train", 0.5));
        steps.sample(&beats(2, 46, "train", 0.5));
        steps.sample(&SampleBeats::default());
        let (last, median) = steps.done();
        assert_eq!(last, Some(46));
        let median = median.unwrap();
        assert!((median / 0.1 - 1.0).abs() <= 0.01, "{median}");
    }

    /// Finished: the verdict's train median and highest last step win over the samples'; a
    /// verdict without a train phase leaves the median to the samples.
    #[test]
    fn a_verdict_speaks_for_the_whole_run() {
        let stats = |last, median| StepStats {
            count: last,
            last,
            timed: last,
            median_seconds: median,
            p99_seconds: median,
        };
        let mut steps = RankSteps::default();
        steps.sample(&beats(40, 40, "train", 0.1));
        let mut run = RunBeats::default();
        run.steps.insert("train".into(), stats(100, Some(0.25)));
        run.steps.insert("eval".into(), stats(101, Some(3.0)));
        steps.verdict(&run);
        assert_eq!(steps.clone().done(), (Some(101), Some(0.25)));
        run.steps.remove("train");
        steps.verdict(&run);
        let (last, median) = steps.done();
        assert_eq!(last, Some(101));
        assert!((median.unwrap() / 0.1 - 1.0).abs() <= 0.01);
    }
}
