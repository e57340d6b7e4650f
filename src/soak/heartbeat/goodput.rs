//! Goodput: how much of a run was training, and where the rest went.
//!
//! The run's time, from its start to its end, is split at its beats' times:
//! - **startup**: from the start to the first beat;
//! - each **interval** from a beat to the next belongs to the phase the first beat set (a
//!   beat's phase is what the trainer does from it on: see [`super::summary`]): `train` is
//!   productive, `checkpoint` and `eval` are their own buckets of badput, any other phase is
//!   `other`;
//! - the **tail**, from the last beat to the end, is `stalled` when the soak failed on
//!   staleness (the time the command hung before it was stopped) and `other` otherwise (the
//!   phase of what ran after the last step is unknown).
//!
//! Times are clamped so that the pieces tile the run: a beat before the start counts as at
//! the start, a beat earlier than the one before it covers nothing (and does not move the
//! split back), and the end is taken as no earlier than the last beat. So `productive_seconds`
//! and every bucket are `>= 0` and add up to `run_seconds` (to rounding), and `fraction` =
//! productive over run time (0 for a run of no time). A run without beats is all startup.
//! [`GoodputClock`] keeps four numbers, however many beats the run has.

use super::beat::DEFAULT_PHASE;

/// The phase whose time is productive.
pub(crate) const PRODUCTIVE_PHASE: &str = DEFAULT_PHASE;

/// Where a run's time went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Goodput {
    pub(crate) run_seconds: f64,
    pub(crate) productive_seconds: f64,
    pub(crate) badput: Badput,
    /// `productive_seconds / run_seconds`, in `[0, 1]`.
    pub(crate) fraction: f64,
}

/// The run's time that was not productive, by bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Badput {
    pub(crate) startup: f64,
    pub(crate) checkpoint: f64,
    pub(crate) eval: f64,
    pub(crate) stalled: f64,
    pub(crate) other: f64,
}

#[cfg(test)]
impl Badput {
    pub(crate) fn total(&self) -> f64 {
        self.startup + self.checkpoint + self.eval + self.stalled + self.other
    }
}

/// A run's goodput, fed beat by beat in the file's order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GoodputClock {
    start: f64,
    /// Where the split has reached: the latest beat's time, clamped.
    reached: Option<f64>,
    /// The phase the last beat set: the interval to the next beat is its.
    phase: String,
    productive: f64,
    badput: Badput,
}

impl GoodputClock {
    /// A run that started at `start` (Unix seconds).
    pub(crate) fn new(start: f64) -> Self {
        GoodputClock {
            start,
            reached: None,
            phase: String::new(),
            productive: 0.0,
            badput: Badput::default(),
        }
    }

    /// A beat of `phase` at `t`: it ends the interval of the phase the beat before it set,
    /// and sets `phase` from now on.
    pub(crate) fn beat(&mut self, t: f64, phase: &str) {
        let t = t.max(self.start);
        match self.reached {
            None => self.badput.startup += t - self.start,
            Some(reached) if t > reached => {
                let interval = t - reached;
                match self.phase.as_str() {
                    PRODUCTIVE_PHASE => self.productive += interval,
                    "checkpoint" => self.badput.checkpoint += interval,
                    "eval" => self.badput.eval += interval,
                    _ => self.badput.other += interval,
                }
            }
            Some(_) => {
                self.phase.replace_range(.., phase);
                return;
            }
        }
        self.reached = Some(t);
        self.phase.replace_range(.., phase);
    }

    /// The split of the run that ended at `end`; `stalled` when the soak failed on staleness.
    pub(crate) fn finish(&self, end: f64, stalled: bool) -> Goodput {
        let mut badput = self.badput;
        let end = end.max(self.reached.unwrap_or(self.start)).max(self.start);
        match self.reached {
            None => badput.startup += end - self.start,
            Some(reached) if stalled => badput.stalled += end - reached,
            Some(reached) => badput.other += end - reached,
        }
        let run_seconds = end - self.start;
        Goodput {
            run_seconds,
            productive_seconds: self.productive,
            badput,
            fraction: if run_seconds > 0.0 {
                (self.productive / run_seconds).clamp(0.0, 1.0)
            } else {
                0.0
            },
        }
    }
}

/// The goodput of a run from `start` to `end` whose beats were `beats` (time, phase), in the
/// file's order.
#[cfg(test)]
pub(crate) fn goodput<'a>(
    start: f64,
    end: f64,
    beats: impl IntoIterator<Item = (f64, &'a str)>,
    stalled: bool,
) -> Goodput {
    let mut clock = GoodputClock::new(start);
    for (t, phase) in beats {
        clock.beat(t, phase);
    }
    clock.finish(end, stalled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_interval_belongs_to_the_phase_the_beat_that_starts_it_set() {
        let beats = [
            (110.0, "train"),
            (111.0, "train"),
            (112.0, "checkpoint"),
            (120.0, "checkpoint"),
            (120.0, "train"),
            (121.0, "eval"),
            (124.0, "data"),
            (125.0, "train"),
            (126.0, "train"),
        ];
        let g = goodput(100.0, 130.0, beats, false);
        assert_eq!(g.run_seconds, 30.0);
        assert_eq!(g.productive_seconds, 4.0);
        assert_eq!(
            g.badput,
            Badput {
                startup: 10.0,
                checkpoint: 8.0,
                eval: 3.0,
                stalled: 0.0,
                other: 1.0 + 4.0,
            }
        );
        assert!((g.fraction - 4.0 / 30.0).abs() < 1e-12);
        let stalled = goodput(100.0, 130.0, beats, true);
        assert_eq!((stalled.badput.stalled, stalled.badput.other), (4.0, 1.0));
    }

    #[test]
    fn times_out_of_the_run_or_out_of_order_are_clamped() {
        let g = goodput(
            100.0,
            110.0,
            [
                (90.0, "train"),
                (105.0, "train"),
                (103.0, "eval"),
                (115.0, "train"),
            ],
            true,
        );
        // The first beat is at the start (no startup); the eval beat, earlier than the one
        // before it, ends no interval but sets eval from then on; the run is taken to end at
        // its last beat.
        assert_eq!(g.badput.startup, 0.0);
        assert_eq!(g.badput.eval, 10.0);
        assert_eq!((g.run_seconds, g.productive_seconds), (15.0, 5.0));
        assert_eq!(g.fraction, 5.0 / 15.0);
    }

    #[test]
    fn a_run_without_beats_or_without_time() {
        let none = goodput(100.0, 160.0, [], true);
        assert_eq!((none.badput.startup, none.fraction), (60.0, 0.0));
        let empty = goodput(100.0, 90.0, [], false);
        assert_eq!((empty.run_seconds, empty.fraction), (0.0, 0.0));
    }

    proptest::proptest! {
        #[test]
        fn the_buckets_and_productive_time_add_up_to_the_run(
            start in 1.6e9f64..1.8e9,
            length in 0.0f64..1e6,
            beats in proptest::collection::vec(
                (-1e3f64..1.1e6, proptest::sample::select(vec!["train", "checkpoint", "eval", "x"])),
                0..200,
            ),
            sorted in proptest::bool::ANY,
            stalled in proptest::bool::ANY,
        ) {
            let mut beats: Vec<(f64, &str)> =
                beats.into_iter().map(|(t, p)| (start + t, p)).collect();
            if sorted {
                beats.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
            let g = goodput(start, start + length, beats.iter().copied(), stalled);
            let b = g.badput;
            for part in [g.productive_seconds, b.startup, b.checkpoint, b.eval, b.stalled, b.other] {
                proptest::prop_assert!(part >= 0.0);
            }
            let sum = g.productive_seconds + b.total();
            proptest::prop_assert!((sum - g.run_seconds).abs() <= 1e-6 * g.run_seconds.max(1.0));
            proptest::prop_assert!(g.run_seconds >= (start + length) - start);
            proptest::prop_assert!((0.0..=1.0).contains(&g.fraction));
            if !stalled {
                proptest::prop_assert_eq!(b.stalled, 0.0);
            }
        }
    }
}
