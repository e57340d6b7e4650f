//! What the rows tell of the beats as they go by, in memory that does not grow with the soak:
//! the latest beats and the pace over the last samples ([`BeatsLately`], a running soak's
//! `soak show`), and how much a `train` step processed of the counts a trainer beats
//! ([`PerStep`], `soak compare`'s throughput).
//!
//! **Throughput.** A trainer beats `samples` and `tokens` as what its step processed
//! (`unilab.heartbeat(7, samples=256)`), and a row keeps the last value of each. The count a
//! step is the mean of the rows' values, each weighted by its beats (exact while the count is
//! the same within a sample), over the rows whose last beat was of the `train` phase; the
//! throughput is that times the steps a second ([`super::Stepped::steps_per_second`]). A
//! running total beaten under those names is not a count a step, and reads as a throughput far
//! too high.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use crate::read::rows::SampleRow;
use crate::soak::heartbeat::goodput::PRODUCTIVE_PHASE;

/// The rows the pace of a running soak is taken over.
const PACE_ROWS: usize = 30;

/// The numbers whose throughput is told, as `soak compare` names it (`samples/s`).
pub(crate) const COUNTED: [&str; 2] = ["samples", "tokens"];

/// The latest beats, as a running soak's `soak show` tells them (its `--json` `live.heartbeat`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct LatestBeats {
    /// The last beat's step and phase.
    pub step: Option<u64>,
    pub phase: Option<String>,
    /// When the sample that read the last beat was taken (seconds since the start).
    pub sampled_seconds: f64,
    /// The median step time of that sample's steps.
    pub step_seconds_median: Option<f64>,
    /// The last value of each number.
    pub numbers: BTreeMap<String, f64>,
    /// Beats a second over the last samples (at most 30); `None` before two samples.
    pub steps_per_second: Option<f64>,
}

/// The rows' latest beats and their pace.
#[derive(Debug, Default)]
pub(crate) struct BeatsLately {
    latest: Option<LatestBeats>,
    /// (elapsed seconds, beats) of the last rows.
    recent: VecDeque<(f64, u64)>,
}

impl BeatsLately {
    pub(crate) fn take(&mut self, row: &SampleRow<'_>) {
        let beats = match &row.heartbeat {
            // Before schema 10: no beats read, nothing to tell.
            None => return,
            Some(None) => 0,
            Some(Some(beats)) => {
                self.latest = Some(LatestBeats {
                    step: beats.step,
                    phase: beats.phase.map(str::to_owned),
                    sampled_seconds: row.elapsed_seconds,
                    step_seconds_median: beats.step_seconds_median,
                    numbers: beats.numbers.clone(),
                    steps_per_second: None,
                });
                u64::from(beats.beats)
            }
        };
        if self.recent.len() == PACE_ROWS {
            self.recent.pop_front();
        }
        self.recent.push_back((row.elapsed_seconds, beats));
    }

    /// The latest beats with the pace over the last rows; `None` before a beat.
    pub(crate) fn latest(&self) -> Option<LatestBeats> {
        let mut latest = self.latest.clone()?;
        if let (Some(first), Some(last)) = (self.recent.front(), self.recent.back())
            && last.0 > first.0
        {
            // The first row's beats came before its time: the pace counts those after it.
            let beats: u64 = self.recent.iter().skip(1).map(|r| r.1).sum();
            latest.steps_per_second = Some(beats as f64 / (last.0 - first.0));
        }
        Some(latest)
    }
}

/// The counts a `train` step processed, as the rows tell them.
#[derive(Debug, Default)]
pub(crate) struct PerStep {
    /// For each of [`COUNTED`]: the sum of the rows' values times their beats, and the beats.
    sums: [(f64, u64); COUNTED.len()],
}

impl PerStep {
    pub(crate) fn take(&mut self, row: &SampleRow<'_>) {
        let Some(Some(beats)) = &row.heartbeat else {
            return;
        };
        if beats.phase != Some(PRODUCTIVE_PHASE) {
            return;
        }
        for (name, (sum, weight)) in COUNTED.iter().zip(&mut self.sums) {
            if let Some(value) = beats.numbers.get(*name).filter(|v| v.is_finite()) {
                *sum += value * f64::from(beats.beats);
                *weight += u64::from(beats.beats);
            }
        }
    }

    /// What a step processed of `name` (one of [`COUNTED`]); `None` where no `train` row beat
    /// it.
    pub(crate) fn per_step(&self, name: &str) -> Option<f64> {
        let at = COUNTED.iter().position(|n| *n == name)?;
        let (sum, weight) = self.sums[at];
        (weight > 0).then(|| sum / weight as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::beats::BeatsRow;

    fn row<'a>(at: f64, heartbeat: Option<Option<BeatsRow<'a>>>) -> SampleRow<'a> {
        SampleRow {
            heartbeat,
            processes: 1,
            threads: 1,
            ..SampleRow::of_test(at, 0, 0)
        }
    }

    fn beats<'a>(
        n: u32,
        step: u64,
        phase: &'a str,
        numbers: &'a BTreeMap<String, f64>,
    ) -> BeatsRow<'a> {
        BeatsRow {
            beats: n,
            numbers,
            phase: Some(phase),
            step: Some(step),
            step_seconds_max: Some(0.2),
            step_seconds_median: Some(0.1),
            step_seconds_min: Some(0.05),
        }
    }

    #[test]
    fn the_pace_is_the_beats_after_the_first_of_the_last_rows_over_their_time() {
        let numbers = BTreeMap::from([("loss".to_owned(), 0.5)]);
        let mut lately = BeatsLately::default();
        lately.take(&row(0.5, Some(None)));
        assert_eq!(lately.latest(), None, "no beat yet");
        for i in 1..=100u32 {
            let at = 0.5 + f64::from(i);
            lately.take(&row(
                at,
                Some(Some(beats(10, u64::from(i) * 10, "train", &numbers))),
            ));
        }
        // A sample without beats: the latest beats stay, the pace counts its nothing.
        lately.take(&row(101.5, Some(None)));
        let latest = lately.latest().unwrap();
        assert_eq!(
            (latest.step, latest.phase.as_deref()),
            (Some(1000), Some("train"))
        );
        assert_eq!(latest.sampled_seconds, 100.5);
        assert_eq!(latest.numbers, numbers);
        // The last 30 rows span 29 s and hold 28 × 10 beats after their first.
        assert_eq!(latest.steps_per_second, Some(280.0 / 29.0));

        let mut old = BeatsLately::default();
        old.take(&row(1.0, None));
        old.take(&row(2.0, None));
        assert_eq!(old.latest(), None, "a soak before schema 10 has none");
    }

    #[test]
    fn a_steps_count_is_its_rows_values_weighted_by_their_beats_in_train_only() {
        let small = BTreeMap::from([("tokens".to_owned(), 1000.0)]);
        let large = BTreeMap::from([("tokens".to_owned(), 4000.0), ("samples".to_owned(), 8.0)]);
        let mut per_step = PerStep::default();
        per_step.take(&row(1.0, Some(Some(beats(3, 3, "train", &small)))));
        per_step.take(&row(2.0, Some(Some(beats(1, 4, "train", &large)))));
        per_step.take(&row(3.0, Some(Some(beats(50, 5, "eval", &large)))));
        per_step.take(&row(4.0, Some(None)));
        assert_eq!(per_step.per_step("tokens"), Some(7000.0 / 4.0));
        assert_eq!(per_step.per_step("samples"), Some(8.0));
        assert_eq!(per_step.per_step("loss"), None);
        assert_eq!(PerStep::default().per_step("tokens"), None);
    }
}
