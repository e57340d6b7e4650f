//! The steps of a whole run, by phase: how many, the last, and the median and p99 of their
//! step seconds — in memory that does not grow with the steps.
//!
//! Each phase keeps a count, its last step and a [`Sketch`] of its step seconds (as
//! [`super::summary`] times them): median and p99 are within 1 % of the exact nearest-rank
//! quantiles, for any number of steps, in a few kilobytes a phase. At most [`MAX_PHASES`]
//! phases are kept, the first seen; the beats of any other are counted as
//! [`RunSteps::untracked`] only.

use std::collections::BTreeMap;

use super::beat::Beat;
use super::sketch::Sketch;

/// The most phases a run keeps steps of.
pub(crate) const MAX_PHASES: usize = 16;

/// One phase's steps so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PhaseSteps {
    /// Beats of the phase.
    pub(crate) count: u64,
    /// The last beat's step.
    pub(crate) last: u64,
    seconds: Sketch,
}

/// A phase's steps as the summary shows them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PhaseStats {
    pub(crate) count: u64,
    pub(crate) last: u64,
    /// How many of its steps were timed (all but a first beat, and beats the rule skips).
    pub(crate) timed: u64,
    pub(crate) median_seconds: Option<f64>,
    pub(crate) p99_seconds: Option<f64>,
}

impl PhaseSteps {
    pub(crate) fn stats(&self) -> PhaseStats {
        PhaseStats {
            count: self.count,
            last: self.last,
            timed: self.seconds.count(),
            median_seconds: self.seconds.quantile(0.5),
            p99_seconds: self.seconds.quantile(0.99),
        }
    }
}

/// The run's steps, by phase.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RunSteps {
    phases: BTreeMap<String, PhaseSteps>,
    untracked: u64,
}

impl RunSteps {
    /// Counts `beat` among its phase's, and times the step it ended (if timed): its seconds
    /// and its phase, the one the beat before it set.
    pub(crate) fn add(&mut self, beat: &Beat<'_>, ended: Option<(f64, &str)>) {
        match self.kept(&beat.phase) {
            Some(phase) => {
                phase.count += 1;
                phase.last = beat.step;
            }
            None => self.untracked += 1,
        }
        if let Some((seconds, of)) = ended
            && let Some(phase) = self.kept(of)
        {
            phase.seconds.add(seconds);
        }
    }

    /// The steps of phase `name`, kept from now on if fewer than [`MAX_PHASES`] are.
    fn kept(&mut self, name: &str) -> Option<&mut PhaseSteps> {
        if !self.phases.contains_key(name) {
            if self.phases.len() >= MAX_PHASES {
                return None;
            }
            self.phases.insert(name.to_owned(), PhaseSteps::default());
        }
        self.phases.get_mut(name)
    }

    pub(crate) fn phase(&self, name: &str) -> Option<&PhaseSteps> {
        self.phases.get(name)
    }

    /// Every phase kept, by name.
    pub(crate) fn stats(&self) -> impl Iterator<Item = (&str, PhaseStats)> {
        self.phases
            .iter()
            .map(|(name, p)| (name.as_str(), p.stats()))
    }

    /// Beats of phases past the first [`MAX_PHASES`].
    pub(crate) fn untracked(&self) -> u64 {
        self.untracked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::heartbeat::clock::Timed;
    use crate::soak::heartbeat::sketch::RELATIVE_ERROR;
    use crate::soak::heartbeat::summary::StepClock;

    fn beat(step: u64, phase: &str, t: f64) -> Beat<'static> {
        Beat::clocked_at(step, phase, t)
    }

    /// The step `b` ends, at its `t`.
    fn ended<'c>(clock: &'c mut StepClock, b: &Beat<'_>) -> Option<(f64, &'c str)> {
        let at = Timed {
            at: b.t,
            stamped: false,
        };
        clock.step(b, at)
    }

    #[test]
    fn phases_are_counted_apart_and_timed_from_the_beat_before() {
        let (mut steps, mut clock) = (RunSteps::default(), StepClock::default());
        let mut t = 0.0;
        for step in 0..100u64 {
            t += if step % 10 == 9 { 0.2 } else { 0.1 };
            let b = beat(step, "train", t);
            steps.add(&b, ended(&mut clock, &b));
            if step % 50 == 49 {
                // A checkpoint of 5 s, beaten as it starts and once it is saved (the docs'
                // pattern): its time is no step, of either phase.
                let b = beat(step, "checkpoint", t);
                steps.add(&b, ended(&mut clock, &b));
                t += 5.0;
                let b = beat(step, "train", t);
                steps.add(&b, ended(&mut clock, &b));
            }
        }
        let stats: BTreeMap<_, _> = steps.stats().collect();
        let train = stats["train"];
        // 102 train beats; timed: the 99 steps between them, none of zero length (from a train
        // beat to the checkpoint's at the same step).
        assert_eq!((train.count, train.last, train.timed), (102, 99, 99));
        let within = |read: Option<f64>, truth: f64| {
            (read.unwrap() - truth).abs() <= truth * (RELATIVE_ERROR + 1e-9)
        };
        assert!(within(train.median_seconds, 0.1), "{train:?}");
        assert!(within(train.p99_seconds, 0.2), "{train:?}");
        let checkpoint = stats["checkpoint"];
        assert_eq!(
            (checkpoint.count, checkpoint.last, checkpoint.timed),
            (2, 99, 0)
        );
        assert_eq!(checkpoint.p99_seconds, None);
        assert_eq!(steps.phase("eval"), None);
    }

    #[test]
    fn phases_past_the_bound_are_counted_but_not_kept() {
        let mut steps = RunSteps::default();
        for i in 0..1000u64 {
            steps.add(&beat(i, &format!("phase{i}"), 0.0), Some((1.0, "phase0")));
        }
        assert_eq!(steps.stats().count(), MAX_PHASES);
        assert_eq!(steps.untracked(), 1000 - MAX_PHASES as u64);
        steps.add(&beat(7, "phase0", 0.0), None);
        assert_eq!(
            steps.phase("phase0").map(|p| (p.count, p.last)),
            Some((2, 7))
        );
    }

    #[test]
    fn millions_of_steps_keep_a_few_kilobytes() {
        let mut steps = RunSteps::default();
        let b = beat(0, "train", 0.0);
        for i in 0..3_000_000u32 {
            steps.add(&b, Some((0.05 + f64::from(i % 7919) * 1e-5, "train")));
        }
        let sketch = &steps.phase("train").unwrap().seconds;
        assert_eq!(sketch.count(), 3_000_000);
        // Steps from 50 to 129 ms: 4 % apart at the ends, so 48 buckets of 2 %.
        assert!(sketch.buckets() <= 50, "{}", sketch.buckets());
        let stats = steps.phase("train").unwrap().stats();
        // The exact median of 0.05 + k·1e-5 over k uniform in 0..7919 is about 0.0896.
        assert!((stats.median_seconds.unwrap() / 0.0896 - 1.0).abs() < 0.011);
    }
}
