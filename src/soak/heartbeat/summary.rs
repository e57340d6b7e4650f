//! What a sample records of the beats that arrived since the last sample.
//!
//! A beat's **step seconds** are the time from the beat before it (of any phase) to it: a beat
//! says that a step of its phase ended, so the step began when the previous one ended. This is
//! the same interval [`super::goodput`] gives the beat's phase, so a checkpoint beaten once after
//! the train step before it takes the checkpoint's own time (measured from the previous beat of
//! the *same* phase, it would take the time between two checkpoints). The first beat has no step
//! seconds (its interval is the startup), nor has a beat whose `t` is earlier than the latest
//! `t` before it, which does not move the clock back either (forked workers beating at once, a
//! clock stepped back: the next beat is timed from the latest `t`, as goodput splits the run),
//! nor one stamped when read (no `t`) in the same poll as the beat before it (both carry the
//! poll's time, and the zero between them says nothing).
//!
//! [`SampleSummary`] keeps the previous beat's time across samples, and per sample only
//! counters, the last step and phase, the step seconds' extremes and a [`Sketch`] for their
//! median (within 1 %), and the last value of at most [`MAX_NUMBERS`] numbers (the first keys
//! seen in the sample): its size does not depend on the beat rate. Encoded with bincode's
//! standard configuration, as the log encodes records, a sample of one phase and one number
//! (`loss`) takes 43 to 47 bytes whatever the beat rate, with `lr` too 56: each number costs its
//! key's length and 9 bytes, so a third short one passes the log's 64 (see the tests).

use std::collections::BTreeMap;

use super::beat::{Beat, MAX_NUMBERS};
use super::sketch::Sketch;
use crate::event::soak::SampleBeats;

/// The latest beat time so far, from which the next beat's step seconds are measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct StepClock {
    /// The latest `t` so far (the previous beat's unless one went back) and whether it came
    /// from its line.
    last: Option<(f64, bool)>,
}

impl StepClock {
    /// `beat`'s step seconds, by the rule in the module's doc; the beat becomes the previous.
    pub(crate) fn step_seconds(&mut self, beat: &Beat) -> Option<f64> {
        let Some((t, clocked)) = self.last else {
            self.last = Some((beat.t, beat.clocked));
            return None;
        };
        if beat.t < t {
            return None; // the clock does not move back (as goodput's split does not)
        }
        self.last = Some((beat.t, beat.clocked));
        let same_poll = !beat.clocked && !clocked && beat.t == t;
        Some(beat.t - t).filter(|_| !same_poll)
    }
}

/// The beats since the last sample, as they arrive.
#[derive(Debug, Clone, Default)]
pub struct SampleSummary {
    clock: StepClock,
    beats: u32,
    last: Option<(u64, String)>,
    min: Option<f64>,
    max: Option<f64>,
    seconds: Sketch,
    numbers: BTreeMap<String, f64>,
}

impl SampleSummary {
    pub fn new() -> Self {
        SampleSummary::default()
    }

    /// Counts `beat` (beats come in the file's order); returns its step seconds.
    pub fn add(&mut self, beat: &Beat) -> Option<f64> {
        self.beats = self.beats.saturating_add(1);
        match &mut self.last {
            Some((step, phase)) => {
                *step = beat.step;
                phase.clone_from(&beat.phase);
            }
            None => self.last = Some((beat.step, beat.phase.clone())),
        }
        for (key, &value) in &beat.numbers {
            if let Some(kept) = self.numbers.get_mut(key) {
                *kept = value;
            } else if self.numbers.len() < MAX_NUMBERS {
                self.numbers.insert(key.clone(), value);
            }
        }
        let seconds = self.clock.step_seconds(beat)?;
        self.min = Some(self.min.map_or(seconds, |m| m.min(seconds)));
        self.max = Some(self.max.map_or(seconds, |m| m.max(seconds)));
        self.seconds.add(seconds);
        Some(seconds)
    }

    /// The sample's beats; the next sample starts empty (but for the previous beat's time).
    pub fn take(&mut self) -> SampleBeats {
        let clock = self.clock;
        let taken = std::mem::take(self);
        self.clock = clock;
        let (step, phase) = taken.last.unzip();
        SampleBeats {
            beats: taken.beats,
            step,
            phase,
            step_seconds_min: taken.min.map(|s| s as f32),
            step_seconds_median: taken.seconds.quantile(0.5).map(|s| s as f32),
            step_seconds_max: taken.max.map(|s| s as f32),
            numbers: taken.numbers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::heartbeat::goodput::goodput;

    fn beat(step: u64, phase: &str, t: f64) -> Beat {
        Beat::clocked_at(step, phase, t)
    }

    fn with(mut b: Beat, numbers: &[(&str, f64)]) -> Beat {
        b.numbers = numbers.iter().map(|&(k, v)| (k.to_owned(), v)).collect();
        b
    }

    #[test]
    fn a_sample_holds_its_beats_and_the_next_starts_empty() {
        let mut s = SampleSummary::new();
        assert_eq!(s.add(&with(beat(1, "train", 10.0), &[("loss", 2.0)])), None);
        assert_eq!(s.add(&beat(2, "train", 10.5)), Some(0.5));
        s.add(&with(beat(3, "train", 12.0), &[("loss", 1.5), ("lr", 0.1)]));
        s.add(&beat(4, "train", 12.25));
        let sample = s.take();
        assert_eq!(sample.beats, 4);
        assert_eq!(
            (sample.step, sample.phase.as_deref()),
            (Some(4), Some("train"))
        );
        assert_eq!(sample.step_seconds_min, Some(0.25));
        assert_eq!(sample.step_seconds_max, Some(1.5));
        let median = sample.step_seconds_median.unwrap();
        assert!((median - 0.5).abs() <= 0.005, "{median}");
        assert_eq!(
            sample.numbers,
            BTreeMap::from([("loss".to_owned(), 1.5), ("lr".to_owned(), 0.1)])
        );
        assert_eq!(s.take(), SampleBeats::default());
        // The previous beat's time carries over: the next sample's first beat is timed.
        s.add(&beat(5, "checkpoint", 20.25));
        assert_eq!(s.take().step_seconds_max, Some(8.0));
    }

    #[test]
    fn a_beat_of_another_phase_is_timed_from_the_beat_before_it() {
        let mut clock = StepClock::default();
        let times: Vec<_> = [
            beat(1, "train", 0.0),
            beat(2, "train", 1.0),
            beat(2, "checkpoint", 9.0),
            beat(3, "train", 10.0),
        ]
        .iter()
        .map(|b| clock.step_seconds(b))
        .collect();
        assert_eq!(times, [None, Some(1.0), Some(8.0), Some(1.0)]);
    }

    #[test]
    fn beats_stamped_in_the_same_poll_or_going_back_are_not_timed() {
        let mut clock = StepClock::default();
        let read = |step, t| Beat {
            clocked: false,
            ..beat(step, "train", t)
        };
        assert_eq!(clock.step_seconds(&read(1, 5.0)), None);
        assert_eq!(clock.step_seconds(&read(2, 5.0)), None);
        assert_eq!(clock.step_seconds(&read(3, 10.0)), Some(5.0));
        assert_eq!(clock.step_seconds(&beat(4, "train", 9.0)), None);
        // The beat that went back does not move the clock back: the next is timed from 10.
        assert_eq!(clock.step_seconds(&beat(5, "train", 9.5)), None);
        assert_eq!(clock.step_seconds(&beat(6, "train", 10.5)), Some(0.5));
        assert_eq!(clock.step_seconds(&beat(7, "train", 10.5)), Some(0.0));
    }

    proptest::proptest! {
        /// Each beat's step seconds are the interval goodput gives its phase, in any order of
        /// `t` (forked workers beating at once, a clock stepped back).
        #[test]
        fn step_seconds_are_the_intervals_goodput_gives_the_phases(
            beats in proptest::collection::vec(
                (0.0f64..1e4, proptest::sample::select(vec!["train", "checkpoint", "eval", "x"])),
                1..100,
            ),
        ) {
            let start = 1.7e9;
            let mut clock = StepClock::default();
            let mut by_phase = BTreeMap::<&str, f64>::new();
            for (i, &(t, phase)) in beats.iter().enumerate() {
                let seconds = clock.step_seconds(&beat(i as u64, phase, start + t));
                *by_phase.entry(phase).or_default() += seconds.unwrap_or(0.0);
            }
            let g = goodput(start, start, beats.iter().map(|&(t, p)| (start + t, p)), false);
            let b = g.badput;
            for (phase, theirs) in [
                ("train", g.productive_seconds),
                ("checkpoint", b.checkpoint),
                ("eval", b.eval),
                ("x", b.other),
            ] {
                let ours = by_phase.get(phase).copied().unwrap_or(0.0);
                proptest::prop_assert!((ours - theirs).abs() <= 1e-6, "{phase}: {ours} vs {theirs}");
            }
        }
    }

    #[test]
    fn numbers_keep_their_first_keys_up_to_the_bound() {
        let mut s = SampleSummary::new();
        for i in 0..40u32 {
            let key = format!("k{i:02}");
            s.add(&with(
                beat(u64::from(i), "train", 0.0),
                &[(&key, 1.0), ("loss", f64::from(i))],
            ));
        }
        let sample = s.take();
        assert_eq!(sample.numbers.len(), MAX_NUMBERS);
        assert_eq!(sample.numbers["loss"], 39.0);
        assert!(sample.numbers.contains_key("k14"));
        assert!(!sample.numbers.contains_key("k15"));
    }

    fn encoded_len(sample: &SampleBeats) -> usize {
        bincode::serde::encode_to_vec(sample, bincode::config::standard())
            .unwrap()
            .len()
    }

    /// The log's budget for this is 64 bytes a sample, at any beat rate.
    #[test]
    fn a_typical_sample_encodes_in_under_64_bytes_at_any_beat_rate() {
        let sample = |beats: u32| {
            let mut s = SampleSummary::new();
            for i in 0..beats {
                let t = 1.7e9 + f64::from(i) * 0.001;
                s.add(&with(
                    beat(1_000_000 + u64::from(i), "train", t),
                    &[("loss", 0.25)],
                ));
            }
            s.take()
        };
        let sizes: Vec<usize> = [1, 10, 1_000, 100_000]
            .into_iter()
            .map(|beats| encoded_len(&sample(beats)))
            .collect();
        // One phase and `loss` at step 1,000,000: one beat has no step seconds (3 bytes
        // instead of 15); `beats` takes 1 byte up to 250, 3 up to 65,535, 5 past.
        assert_eq!(sizes, [31, 43, 45, 47], "{sizes:?}");
        // With `lr` too, still under the budget; a third number of a short key passes it.
        let mut two = sample(1_000);
        two.numbers.insert("lr".to_owned(), 1e-4);
        assert_eq!(encoded_len(&two), 56);
        two.numbers.insert("tokens".to_owned(), 4096.0);
        assert!(encoded_len(&two) > 64);
        // A sample without beats: 7 bytes (the log may rather leave it out).
        assert_eq!(encoded_len(&SampleBeats::default()), 7);
    }
}
