//! A run's beats, as the supervisor takes them in: each beat fed once, in the file's order, to
//! the run's clock ([`super::clock`]: when it happened), then to the sample's summary, the
//! run's steps and its goodput; at each sample what the sample records, when the last beat
//! that was progress arrived and the judgement of the step running now; at the end what the
//! verdict records. A beat whose `(step, phase)` is the beat's before it is counted
//! (`repeats`) and goes no further: it is no step, no progress, no time — a thread that
//! repeats the last beat while the loop is hung keeps no soak alive, nor makes its hang
//! productive. Pure: the file is read by the supervisor, the clock given.

use super::beat::{Beat, keep_phase};
use super::clock::BeatClock;
use super::goodput::GoodputClock;
use super::limits::{StepJudgement, StepLimits, judge};
use super::steps::RunSteps;
use super::summary::SampleSummary;
use crate::event::soak::{GoodputSplit, HeartbeatErrors, RunBeats, SampleBeats, StepStats};

/// The last beat taken in: the step running now is of its phase, begun at its time.
#[derive(Debug, Clone)]
struct Last {
    at: f64,
    step: u64,
    phase: String,
}

/// Everything a run's beats have said so far, in memory that does not grow with them.
#[derive(Debug, Clone)]
pub struct HeartbeatRun {
    limits: StepLimits,
    clock: BeatClock,
    summary: SampleSummary,
    steps: RunSteps,
    goodput: GoodputClock,
    last: Option<Last>,
    /// When the last beat that was progress arrived, since the previous call to
    /// [`Self::take_progress_at`].
    progress_at: Option<f64>,
    beats: u64,
    repeats: u64,
    /// Beats timed by their arrival (no `t`, or one that disagreed).
    stamped: u64,
    /// Every step timed so far, of any phase: how many, and their seconds together.
    timed: (u64, f64),
}

impl HeartbeatRun {
    /// A run that started at `start` (Unix seconds), its steps held to `limits`.
    pub fn new(start: f64, limits: StepLimits) -> Self {
        HeartbeatRun {
            limits,
            clock: BeatClock::new(start),
            summary: SampleSummary::new(),
            steps: RunSteps::default(),
            goodput: GoodputClock::new(start),
            last: None,
            progress_at: None,
            beats: 0,
            repeats: 0,
            stamped: 0,
            timed: (0, 0.0),
        }
    }

    /// Takes in one beat (beats in the file's order).
    pub fn add(&mut self, beat: &Beat<'_>) {
        if let Some(last) = &self.last
            && last.step == beat.step
            && *last.phase == *beat.phase
        {
            self.repeats += 1;
            return;
        }
        let at = self.clock.time(beat);
        self.beats += 1;
        self.stamped += u64::from(at.stamped);
        self.progress_at = Some(beat.arrived);
        let ended = self.summary.add(beat, at);
        if let Some((seconds, _)) = ended {
            self.timed = (self.timed.0 + 1, self.timed.1 + seconds);
        }
        self.steps.add(beat, ended);
        self.goodput.beat(at.at, &beat.phase);
        match &mut self.last {
            Some(last) => {
                last.at = at.at;
                last.step = beat.step;
                keep_phase(&mut last.phase, &beat.phase);
            }
            None => {
                self.last = Some(Last {
                    at: at.at,
                    step: beat.step,
                    phase: beat.phase.clone().into_owned(),
                });
            }
        }
    }

    /// The beats since the previous sample; `None` when none arrived.
    pub fn take_sample(&mut self) -> Option<SampleBeats> {
        Some(self.summary.take()).filter(|sample| sample.beats > 0)
    }

    /// When the last beat that was progress (its `(step, phase)` not the beat's before it)
    /// arrived since the previous call, Unix seconds; `None` when none did.
    pub(crate) fn take_progress_at(&mut self) -> Option<f64> {
        self.progress_at.take()
    }

    /// The first beat whose `t` was not used, in words, once.
    pub(crate) fn take_clock_news(&mut self) -> Option<String> {
        self.clock.take_news()
    }

    /// How many beats were timed by their arrival so far (no `t`, or one that disagreed): the
    /// reader reads closer to their writes while any are.
    pub(crate) fn stamped(&self) -> u64 {
        self.stamped
    }

    /// Every step timed so far, of any phase: how many, and their seconds together.
    pub(crate) fn timed(&self) -> (u64, f64) {
        self.timed
    }

    /// Beats whose `t` was not used, and beats that repeated the one before.
    #[cfg(test)]
    pub(crate) fn discarded(&self) -> (u64, u64) {
        (self.clock.disagreements(), self.repeats)
    }

    /// The step running at `now` (Unix seconds) against its phase's limit; `None` before the
    /// first beat, or when its phase has no limit (then `--stale-progress` judges it).
    pub(crate) fn judge(&self, now: f64) -> Option<StepJudgement> {
        let last = self.last.as_ref()?;
        judge(
            &self.limits,
            (&last.phase, last.step),
            self.steps.phase(&last.phase),
            (now - last.at).max(0.0),
        )
    }

    /// What the verdict records of a run that ended at `end` (Unix seconds), `stalled` when it
    /// failed on staleness, with the file's `errors` and the beats not taken as they came.
    pub(crate) fn finish(&self, end: f64, stalled: bool, errors: HeartbeatErrors) -> RunBeats {
        let errors = HeartbeatErrors {
            clock: Some(self.clock.disagreements()),
            repeats: Some(self.repeats),
            ..errors
        };
        let steps = self
            .steps
            .stats()
            .map(|(phase, stats)| {
                let recorded = StepStats {
                    count: stats.count,
                    last: stats.last,
                    timed: stats.timed,
                    median_seconds: stats.median_seconds,
                    p99_seconds: stats.p99_seconds,
                };
                (phase.to_owned(), recorded)
            })
            .collect();
        let goodput = (self.beats > 0).then(|| {
            let split = self.goodput.finish(end, stalled);
            GoodputSplit {
                productive_seconds: split.productive_seconds,
                startup_seconds: split.badput.startup,
                checkpoint_seconds: split.badput.checkpoint,
                eval_seconds: split.badput.eval,
                stalled_seconds: split.badput.stalled,
                other_seconds: split.badput.other,
            }
        });
        RunBeats {
            steps,
            untracked: self.steps.untracked(),
            errors,
            goodput,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::heartbeat::limits::{PhaseTimeout, StepTimeout};

    fn limits(step_timeout: Option<StepTimeout>, phases: &[(&str, u64)]) -> StepLimits {
        let phases = phases.iter().map(|&(phase, secs)| PhaseTimeout {
            phase: phase.to_owned(),
            limit: std::time::Duration::from_secs(secs),
            typed: format!("{phase}={secs}s"),
        });
        StepLimits::new(step_timeout, phases).unwrap()
    }

    #[test]
    fn a_checkpoint_is_judged_by_its_own_limit_and_train_by_its_learned_one() {
        let mut run = HeartbeatRun::new(
            100.0,
            limits(Some(StepTimeout::Auto), &[("checkpoint", 20)]),
        );
        assert_eq!(run.judge(105.0), None, "no beat yet");
        let mut t = 101.0;
        for step in 0..30 {
            run.add(&Beat::clocked_at(step, "train", t));
            t += 0.1;
        }
        let sample = run.take_sample().unwrap();
        assert_eq!((sample.beats, sample.step), (30, Some(29)));
        // The first beat ends no step: 29 steps of 0.1 s.
        let (count, seconds) = run.timed();
        assert_eq!(count, 29);
        assert!((seconds - 2.9).abs() < 1e-9, "{seconds}");
        assert_eq!(run.take_sample(), None, "nothing since");
        // Train's learned limit: 5 × p99 0.1 s is under the 10 s floor.
        let train = run.judge(t + 9.0).unwrap();
        assert!(!train.is_over());
        let late = run.judge(t + 11.0).unwrap();
        assert!(late.is_over());
        assert!(
            late.reason().contains("since step 29 of phase `train`"),
            "{}",
            late.reason()
        );
        // Entering the checkpoint, beaten once: its 20 s, not train's.
        run.add(&Beat::clocked_at(30, "checkpoint", t));
        assert!(!run.judge(t + 15.0).unwrap().is_over());
        assert!(run.judge(t + 21.0).unwrap().is_over());
    }

    /// Any beat was progress: a thread that kept beating the last `(step, phase)` while the
    /// training loop hung kept the soak alive for ever, counted its beats as steps ("50 train
    /// steps (last 9)" where 10 happened) and reset the step's limit.
    #[test]
    fn a_beat_that_repeats_the_last_step_and_phase_is_nothing_but_counted() {
        let limits = limits(
            Some(StepTimeout::Fixed(
                std::time::Duration::from_secs(5),
                "5s".into(),
            )),
            &[],
        );
        let mut run = HeartbeatRun::new(0.0, limits);
        run.add(&Beat::clocked_at(7, "train", 1.0));
        assert_eq!(
            run.take_progress_at(),
            Some(1.0),
            "the first beat is progress"
        );
        for t in 2..10 {
            run.add(&Beat::clocked_at(7, "train", f64::from(t)));
        }
        assert_eq!(
            run.take_progress_at(),
            None,
            "the same step and phase again"
        );
        assert!(run.judge(9.5).unwrap().is_over(), "the step runs from 1 s");
        run.add(&Beat::clocked_at(7, "checkpoint", 10.0));
        run.add(&Beat::clocked_at(7, "checkpoint", 11.0));
        run.add(&Beat::clocked_at(8, "checkpoint", 12.0));
        assert_eq!(
            run.take_progress_at(),
            Some(12.0),
            "a new phase, then a new step"
        );
        assert_eq!(run.take_progress_at(), None, "taken once");
        assert_eq!(run.discarded(), (0, 9));
        let sample = run.take_sample().unwrap();
        assert_eq!((sample.beats, sample.step), (3, Some(8)));
        let found = run.finish(13.0, false, HeartbeatErrors::default());
        assert_eq!(found.steps["train"].count, 1);
        // The repeats split nothing: train from 1 s to the checkpoint's beat at 10 s.
        assert_eq!(found.goodput.unwrap().productive_seconds, 9.0);
    }

    #[test]
    fn a_phase_without_a_limit_is_left_to_stale_progress() {
        let mut run = HeartbeatRun::new(0.0, limits(Some(StepTimeout::Auto), &[]));
        for step in 0..5 {
            run.add(&Beat::clocked_at(step, "train", f64::from(step as u32)));
        }
        assert_eq!(
            run.judge(1e6),
            None,
            "auto learns nothing from 4 timed steps"
        );
    }

    #[test]
    fn the_verdict_holds_the_steps_and_a_goodput_that_adds_up_to_the_run() {
        let mut run = HeartbeatRun::new(0.0, StepLimits::default());
        let beats = [
            (0, "train", 2.0),
            (1, "train", 3.0),
            (1, "checkpoint", 3.0),
            (1, "train", 7.0),
            (2, "train", 8.0),
        ];
        for (step, phase, t) in beats {
            run.add(&Beat::clocked_at(step, phase, t));
        }
        let errors = HeartbeatErrors {
            malformed: 3,
            ..HeartbeatErrors::default()
        };
        let found = run.finish(20.0, true, errors);
        let counted = HeartbeatErrors {
            clock: Some(0),
            repeats: Some(0),
            ..errors
        };
        assert_eq!(found.errors, counted);
        assert_eq!(found.steps["train"].count, 4);
        assert_eq!(found.steps["checkpoint"].last, 1);
        let g = found.goodput.unwrap();
        assert_eq!(
            (
                g.startup_seconds,
                g.productive_seconds,
                g.checkpoint_seconds,
                g.stalled_seconds
            ),
            (2.0, 2.0, 4.0, 12.0)
        );
        assert_eq!(g.run_seconds(), 20.0);
        let none = HeartbeatRun::new(0.0, StepLimits::default()).finish(5.0, false, errors);
        assert_eq!(none.goodput, None, "no beat: no goodput to tell");
    }
}
