//! What a sample records of the beats that arrived since the last sample.
//!
//! A beat marks a boundary: the step before it ended, and its `phase` is what the trainer does
//! from it on (`train` by default; `checkpoint` beaten as a checkpoint starts, and a plain beat
//! once it is done). So the time from one beat to the next belongs to the first beat's phase:
//! in a loop of train steps each beaten as it ends, all of it is `train`; a checkpoint beaten as
//! it starts takes the time until the next beat. This is the interval [`super::goodput`] gives
//! that phase, and the phase [`super::limits`] judges the step running now by. Such an interval
//! is a **step** only when the step number changes across it: one that begins and ends at one
//! step number (`(s, train)` → `(s, checkpoint)`: the checkpoint pattern's beat as saving
//! starts) is its phase's time, but no step — a zero-length train step would say nothing. The
//! first beat ends no step (the time before it is the startup), nor does one stamped on its
//! arrival together with the beat before it (both read at once: the zero between them says
//! nothing). Times are the run's ([`super::clock`]): they never go back. Every beat, timed or
//! not, sets the phase from then on. (A beat that repeats the `(step, phase)` of the beat before
//! it never comes here: [`super::run`] counts it and drops it.)
//!
//! [`SampleSummary`] keeps the previous beat's time and phase across samples, and per sample
//! only counters, the last step and phase, the step seconds' extremes and a [`Sketch`] for their
//! median (within 1 %), and the last value of at most [`MAX_NUMBERS`] numbers (the first keys
//! seen in the sample): its size does not depend on the beat rate. Encoded with bincode's
//! standard configuration, as the log encodes records, a sample of one phase and one number
//! (`loss`) takes 43 to 47 bytes whatever the beat rate, with `lr` too 56: each number costs its
//! key's length and 9 bytes (the log packs a sample's phase and keys against the previous
//! sample's: see `event::soak::compact`).

use std::collections::BTreeMap;

use super::beat::{Beat, MAX_NUMBERS, keep_phase};
use super::clock::Timed;
use super::sketch::Sketch;
use crate::event::soak::SampleBeats;

/// The latest beat time so far and the phase the last beat set: the next beat ends a step of
/// that phase, begun then, if it changes the step number.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct StepClock {
    /// The latest time so far (the previous beat's unless one went back), whether it was the
    /// arrival, and the previous beat's step.
    last: Option<(f64, bool, u64)>,
    /// The phase the last beat set.
    phase: String,
    /// The phase of the interval the last beat ended (the one before it set).
    ended: String,
}

impl StepClock {
    /// The step `beat`, at `at`, ends, by the rule in the module's doc: its seconds and its
    /// phase (the previous beat's); `beat` sets the phase from now on.
    pub(crate) fn step(&mut self, beat: &Beat<'_>, at: Timed) -> Option<(f64, &str)> {
        std::mem::swap(&mut self.ended, &mut self.phase);
        keep_phase(&mut self.phase, &beat.phase);
        let Some((t, stamped, step)) = self.last else {
            self.last = Some((at.at, at.stamped, beat.step));
            return None;
        };
        if at.at < t {
            // The clock does not move back (as goodput's split does not).
            self.last = Some((t, stamped, beat.step));
            return None;
        }
        self.last = Some((at.at, at.stamped, beat.step));
        let same_read = at.stamped && stamped && at.at == t;
        if beat.step == step || same_read {
            return None;
        }
        Some((at.at - t, &self.ended))
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

    /// Counts `beat`, at `at` (beats come in the file's order); returns the step it ended: its
    /// seconds and phase.
    pub fn add(&mut self, beat: &Beat<'_>, at: Timed) -> Option<(f64, &str)> {
        self.beats = self.beats.saturating_add(1);
        match &mut self.last {
            Some((step, phase)) => {
                *step = beat.step;
                keep_phase(phase, &beat.phase);
            }
            None => self.last = Some((beat.step, beat.phase.clone().into_owned())),
        }
        for (key, value) in beat.numbers.iter() {
            if let Some(kept) = self.numbers.get_mut(key) {
                *kept = value;
            } else if self.numbers.len() < MAX_NUMBERS {
                self.numbers.insert(key.to_owned(), value);
            }
        }
        let (seconds, phase) = self.clock.step(beat, at)?;
        self.min = Some(self.min.map_or(seconds, |m| m.min(seconds)));
        self.max = Some(self.max.map_or(seconds, |m| m.max(seconds)));
        self.seconds.add(seconds);
        Some((seconds, phase))
    }

    /// The sample's beats; the next sample starts empty (but for the previous beat's time and
    /// phase).
    pub fn take(&mut self) -> SampleBeats {
        let clock = std::mem::take(&mut self.clock);
        let taken = std::mem::take(self);
        self.clock = clock;
        let (step, phase) = taken.last.unzip();
        SampleBeats {
            beats: taken.beats,
            step,
            phase,
            step_seconds_min: taken.min.map(|s| s as f32),
            // The sketch's median, within 1 %, kept between the exact extremes.
            step_seconds_median: taken
                .seconds
                .quantile(0.5)
                .map(|s| s.clamp(taken.min.unwrap_or(s), taken.max.unwrap_or(s)) as f32),
            step_seconds_max: taken.max.map(|s| s as f32),
            numbers: taken.numbers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::heartbeat::goodput::goodput;

    fn beat(step: u64, phase: &str, t: f64) -> Beat<'static> {
        Beat::clocked_at(step, phase, t)
    }

    /// When `b` happened, as the run would say: its `t`, or its arrival without one.
    fn timed(b: &Beat<'_>) -> Timed {
        Timed {
            at: b.t,
            stamped: !b.clocked,
        }
    }

    fn add<'s>(s: &'s mut SampleSummary, b: &Beat<'_>) -> Option<(f64, &'s str)> {
        s.add(b, timed(b))
    }

    fn step<'c>(clock: &'c mut StepClock, b: &Beat<'_>) -> Option<(f64, &'c str)> {
        clock.step(b, timed(b))
    }

    fn with(mut b: Beat<'static>, numbers: &[(&str, f64)]) -> Beat<'static> {
        b.numbers = numbers.iter().map(|&(k, v)| (k.to_owned(), v)).collect();
        b
    }

    #[test]
    fn a_sample_holds_its_beats_and_the_next_starts_empty() {
        let mut s = SampleSummary::new();
        assert_eq!(
            add(&mut s, &with(beat(1, "train", 10.0), &[("loss", 2.0)])),
            None
        );
        assert_eq!(add(&mut s, &beat(2, "train", 10.5)), Some((0.5, "train")));
        add(
            &mut s,
            &with(beat(3, "train", 12.0), &[("loss", 1.5), ("lr", 0.1)]),
        );
        add(&mut s, &beat(4, "train", 12.25));
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
        // The previous beat's time and phase carry over: the next sample's first beat ends a
        // step of train, timed.
        assert_eq!(
            add(&mut s, &beat(5, "checkpoint", 20.25)),
            Some((8.0, "train"))
        );
        assert_eq!(s.take().step_seconds_max, Some(8.0));
    }

    /// The sketch's median is within 1 %: steps all alike would otherwise read a median under
    /// their minimum.
    #[test]
    fn the_median_is_never_outside_the_extremes() {
        let mut s = SampleSummary::new();
        for i in 0..50u32 {
            add(
                &mut s,
                &beat(u64::from(i), "train", f64::from(i) * 0.100212),
            );
        }
        let sample = s.take();
        let (min, median, max) = (
            sample.step_seconds_min.unwrap(),
            sample.step_seconds_median.unwrap(),
            sample.step_seconds_max.unwrap(),
        );
        assert!(min <= median && median <= max, "{min} {median} {max}");
    }

    /// A step belongs to the phase the beat before it set, and ends only where the step number
    /// changes: the checkpoint pattern counted a zero-length train step ("79.6µs a step")
    /// from the last train beat to the checkpoint's beat at the same step.
    #[test]
    fn a_step_is_of_the_phase_the_beat_before_it_set_and_ends_where_the_number_changes() {
        let steps = |beats: &[Beat<'static>]| {
            let mut clock = StepClock::default();
            beats
                .iter()
                .map(|b| step(&mut clock, b).map(|(s, p)| (s, p.to_owned())))
                .collect::<Vec<_>>()
        };
        let timed = |s: f64, p: &str| Some((s, p.to_owned()));
        // The docs' pattern: beat the step, the checkpoint as it starts, the step once saved.
        assert_eq!(
            steps(&[
                beat(1, "train", 0.0),
                beat(2, "train", 1.0),
                beat(2, "checkpoint", 1.0001),
                beat(2, "train", 10.0),
                beat(3, "train", 11.0),
            ]),
            [None, timed(1.0, "train"), None, None, timed(1.0, "train")]
        );
        // Beaten as it starts, ended by the next step's beat: the checkpoint's time.
        assert_eq!(
            steps(&[
                beat(1, "train", 0.0),
                beat(2, "train", 1.0),
                beat(2, "checkpoint", 1.0001),
                beat(3, "train", 9.0001),
            ]),
            [None, timed(1.0, "train"), None, timed(8.0, "checkpoint")]
        );
    }

    #[test]
    fn beats_stamped_in_the_same_poll_or_going_back_are_not_timed() {
        let mut clock = StepClock::default();
        let read = |step, t| Beat {
            clocked: false,
            ..beat(step, "train", t)
        };
        assert_eq!(step(&mut clock, &read(1, 5.0)), None);
        assert_eq!(step(&mut clock, &read(2, 5.0)), None);
        assert_eq!(step(&mut clock, &read(3, 10.0)), Some((5.0, "train")));
        assert_eq!(step(&mut clock, &beat(4, "train", 9.0)), None);
        // The beat that went back does not move the clock back: the next is timed from 10.
        assert_eq!(step(&mut clock, &beat(5, "train", 9.5)), None);
        assert_eq!(
            step(&mut clock, &beat(6, "train", 10.5)),
            Some((0.5, "train"))
        );
        assert_eq!(
            step(&mut clock, &beat(7, "train", 10.5)),
            Some((0.0, "train"))
        );
    }

    proptest::proptest! {
        /// The steps' seconds by phase are the intervals goodput gives the phases, in any order
        /// of `t` (forked workers beating at once, a clock stepped back).
        #[test]
        fn step_seconds_are_the_intervals_goodput_gives_the_phases(
            beats in proptest::collection::vec(
                (0.0f64..1e4, proptest::sample::select(vec!["train", "checkpoint", "eval", "x"])),
                1..100,
            ),
        ) {
            let start = 1.7e9;
            let mut clock = StepClock::default();
            let mut by_phase = BTreeMap::<String, f64>::new();
            for (i, &(t, phase)) in beats.iter().enumerate() {
                if let Some((seconds, of)) = step(&mut clock, &beat(i as u64, phase, start + t)) {
                    *by_phase.entry(of.to_owned()).or_default() += seconds;
                }
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
            add(
                &mut s,
                &with(
                    beat(u64::from(i), "train", 0.0),
                    &[(&key, 1.0), ("loss", f64::from(i))],
                ),
            );
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
                add(
                    &mut s,
                    &with(
                        beat(1_000_000 + u64::from(i), "train", t),
                        &[("loss", 0.25)],
                    ),
                );
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
