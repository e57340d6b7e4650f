//! When a beat happened: its `t` where that agrees with when it arrived, else its arrival.
//!
//! Every beat is stamped with the time its line arrived: the supervisor reads the file as lines
//! come, within about 10 ms of their write, whatever the sample interval. A line's `t` is the
//! trainer's own word for when its step ended, and finer; it is used only when it agrees with
//! the arrival — no more than [`AGREEMENT_SECONDS`] from it, not before the soak began, not
//! before the previous beat's time — and then never later than the arrival (a step does not end
//! after it was told). A `t` on another clock (`time.monotonic()`, a container's clock 30 s
//! behind) is not: the beat is timed by its arrival, the disagreement counted
//! (`heartbeat_errors.clock`), and the first one said. Times never go back: a beat is never
//! earlier than the one before it, so the steps, the goodput and the judgement of the step
//! running now all see one clock that only moves forward.

use super::beat::Beat;

/// How far a beat's `t` may be from its arrival and still be used.
pub(crate) const AGREEMENT_SECONDS: f64 = 1.0;

/// When a beat is taken to have happened.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timed {
    /// Unix seconds.
    pub at: f64,
    /// Whether `at` is the arrival (beats read together share it: the zero between them says
    /// nothing of a step).
    pub stamped: bool,
}

/// Why a beat's `t` was not used.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Disagreement {
    /// More than [`AGREEMENT_SECONDS`] from its arrival, by this many seconds (negative: behind).
    Far(f64),
    /// Before the soak began.
    BeforeStart,
    /// Before the previous beat's time.
    BeforePrevious,
}

/// The times of a run's beats, in the file's order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BeatClock {
    start: f64,
    previous: Option<f64>,
    disagreements: u64,
    /// The first disagreement, until it is said: the beat's step, its `t`, and why.
    unsaid: Option<(u64, f64, Disagreement)>,
}

impl BeatClock {
    /// The clock of a run that began at `start` (Unix seconds).
    pub(crate) fn new(start: f64) -> Self {
        BeatClock {
            start,
            previous: None,
            disagreements: 0,
            unsaid: None,
        }
    }

    /// When `beat` happened, by the rule in the module's doc.
    pub(crate) fn time(&mut self, beat: &Beat<'_>) -> Timed {
        let floor = self.previous.unwrap_or(f64::NEG_INFINITY);
        // A wall clock stepped back does not move the beats back either.
        let arrival = Timed {
            at: beat.arrived.max(floor),
            stamped: true,
        };
        let timed = if !beat.clocked {
            arrival
        } else if let Some(why) = self.disagreement(beat.t, beat.arrived) {
            self.disagreements += 1;
            if self.disagreements == 1 {
                self.unsaid = Some((beat.step, beat.t, why));
            }
            arrival
        } else {
            Timed {
                at: beat.t.min(beat.arrived).max(floor),
                stamped: false,
            }
        };
        self.previous = Some(timed.at);
        timed
    }

    fn disagreement(&self, t: f64, arrived: f64) -> Option<Disagreement> {
        if (t - arrived).abs() > AGREEMENT_SECONDS {
            Some(Disagreement::Far(t - arrived))
        } else if t < self.start {
            Some(Disagreement::BeforeStart)
        } else if self.previous.is_some_and(|previous| t < previous) {
            Some(Disagreement::BeforePrevious)
        } else {
            None
        }
    }

    /// How many beats' `t` was not used.
    pub(crate) fn disagreements(&self) -> u64 {
        self.disagreements
    }

    /// The first disagreement, in words, once.
    pub(crate) fn take_news(&mut self) -> Option<String> {
        let (step, t, why) = self.unsaid.take()?;
        let why = match why {
            Disagreement::Far(by) => format!(
                "{} {} its arrival",
                crate::text::duration(by.abs()),
                if by < 0.0 { "before" } else { "after" }
            ),
            Disagreement::BeforeStart => "before the soak began".to_owned(),
            Disagreement::BeforePrevious => "before the beat before it".to_owned(),
        };
        Some(format!(
            "the beat of step {step} gives `t` {t}, {why}: `t` must be the Unix time \
             (`time.time()`, not `time.monotonic()`) on a clock that agrees with this host's; \
             beats whose `t` disagrees are timed by their arrival (counted in \
             `heartbeat_errors.clock`)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clocked(step: u64, t: f64, arrived: f64) -> Beat<'static> {
        Beat {
            arrived,
            ..Beat::clocked_at(step, "train", t)
        }
    }

    #[test]
    fn a_t_that_agrees_is_used_and_never_later_than_the_arrival() {
        let mut clock = BeatClock::new(100.0);
        let timed = clock.time(&clocked(0, 101.25, 101.26));
        assert_eq!(
            timed,
            Timed {
                at: 101.25,
                stamped: false
            }
        );
        // Up to a second after its arrival: taken as the arrival.
        assert_eq!(clock.time(&clocked(1, 102.5, 101.75)).at, 101.75);
        assert_eq!(clock.disagreements(), 0);
        assert_eq!(clock.take_news(), None);
    }

    /// A `t` of `time.monotonic()` failed a healthy run at once ("step 2 has taken
    /// 1796583052.7s"), and one 30 s behind zeroed its goodput: neither is used, each beat is
    /// timed by its arrival, and the first is said once.
    #[test]
    fn a_t_on_another_clock_is_not_used_counted_and_said_once() {
        let start = 1.7e9;
        let mut clock = BeatClock::new(start);
        let monotonic = clock.time(&clocked(0, 5_000.5, start + 1.0));
        assert_eq!(
            monotonic,
            Timed {
                at: start + 1.0,
                stamped: true
            }
        );
        let behind = clock.time(&clocked(1, start + 2.0 - 30.0, start + 2.0));
        assert_eq!(behind.at, start + 2.0);
        let ahead = clock.time(&clocked(2, start + 33.0, start + 3.0));
        assert_eq!(ahead.at, start + 3.0);
        assert_eq!(clock.disagreements(), 3);
        let said = clock.take_news().unwrap();
        assert!(
            said.starts_with("the beat of step 0 gives `t` 5000.5, "),
            "{said}"
        );
        assert!(said.contains("before its arrival"), "{said}");
        assert_eq!(clock.take_news(), None, "once");
    }

    #[test]
    fn a_t_before_the_start_or_the_beat_before_is_not_used() {
        let mut clock = BeatClock::new(100.0);
        assert_eq!(clock.time(&clocked(0, 99.5, 100.2)).at, 100.2);
        assert!(clock.take_news().unwrap().contains("before the soak began"));
        assert_eq!(clock.time(&clocked(1, 100.9, 101.0)).at, 100.9);
        // Within a second of its arrival, but before the beat before it.
        let back = clock.time(&clocked(2, 100.8, 101.1));
        assert_eq!((back.at, back.stamped), (101.1, true));
        assert_eq!(clock.disagreements(), 2);
    }

    #[test]
    fn times_never_go_back_even_when_the_wall_clock_does() {
        let mut clock = BeatClock::new(0.0);
        assert_eq!(clock.time(&Beat::arrived_at(0, "train", 50.0)).at, 50.0);
        assert_eq!(clock.time(&Beat::arrived_at(1, "train", 49.0)).at, 50.0);
        assert_eq!(clock.time(&clocked(2, 49.5, 49.6)).at, 50.0);
    }
}
