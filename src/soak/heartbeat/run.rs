//! A run's beats, as the supervisor takes them in: each beat fed once, in the file's order, to
//! the sample's summary, the run's steps and its goodput; at each sample what the sample
//! records, how many of its beats were progress (a beat whose `(step, phase)` is the beat's
//! before it is none: a thread that repeats the last beat while the loop is hung keeps no soak
//! alive) and the judgement of the step running now; at the end what the verdict records.
//! Pure: the file is read by the supervisor, the clock given.

use super::beat::{Beat, keep_phase};
use super::goodput::GoodputClock;
use super::limits::{StepJudgement, StepLimits, judge};
use super::steps::RunSteps;
use super::summary::SampleSummary;
use crate::event::soak::{GoodputSplit, HeartbeatErrors, RunBeats, SampleBeats, StepStats};

/// Everything a run's beats have said so far, in memory that does not grow with them.
#[derive(Debug, Clone)]
pub struct HeartbeatRun {
    limits: StepLimits,
    summary: SampleSummary,
    steps: RunSteps,
    goodput: GoodputClock,
    /// The latest beat time so far and the phase of the last beat read: the step running now
    /// is of that phase, begun then.
    last: Option<(f64, String)>,
    /// The step of the last beat read (its phase is `last`'s).
    step: Option<u64>,
    /// The beats since the last sample whose `(step, phase)` differs from the beat's before.
    progressed: u32,
    beats: u64,
    /// Every step timed so far, of any phase: how many, and their seconds together.
    timed: (u64, f64),
}

impl HeartbeatRun {
    /// A run that started at `start` (Unix seconds), its steps held to `limits`.
    pub fn new(start: f64, limits: StepLimits) -> Self {
        HeartbeatRun {
            limits,
            summary: SampleSummary::new(),
            steps: RunSteps::default(),
            goodput: GoodputClock::new(start),
            last: None,
            step: None,
            progressed: 0,
            beats: 0,
            timed: (0, 0.0),
        }
    }

    /// Takes in one beat (beats in the file's order).
    pub fn add(&mut self, beat: &Beat<'_>) {
        self.beats += 1;
        let repeated = self.step == Some(beat.step)
            && self
                .last
                .as_ref()
                .is_some_and(|(_, phase)| *phase == *beat.phase);
        if !repeated {
            self.progressed = self.progressed.saturating_add(1);
        }
        self.step = Some(beat.step);
        let ended = self.summary.add(beat);
        if let Some((seconds, _)) = ended {
            self.timed = (self.timed.0 + 1, self.timed.1 + seconds);
        }
        self.steps.add(beat, ended);
        self.goodput.beat(beat.t, &beat.phase);
        let latest = self.last.as_ref().map_or(beat.t, |(t, _)| t.max(beat.t));
        match &mut self.last {
            Some((t, phase)) => {
                *t = latest;
                keep_phase(phase, &beat.phase);
            }
            None => self.last = Some((latest, beat.phase.clone().into_owned())),
        }
    }

    /// The beats since the previous sample; `None` when none arrived.
    pub fn take_sample(&mut self) -> Option<SampleBeats> {
        Some(self.summary.take()).filter(|sample| sample.beats > 0)
    }

    /// How many beats since the previous call were progress: their `(step, phase)` differs
    /// from the beat's before them.
    pub(crate) fn take_progressed(&mut self) -> u32 {
        std::mem::take(&mut self.progressed)
    }

    /// Every step timed so far, of any phase: how many, and their seconds together.
    pub(crate) fn timed(&self) -> (u64, f64) {
        self.timed
    }

    /// The step running at `now` (Unix seconds) against its phase's limit; `None` before the
    /// first beat, or when its phase has no limit (then `--stale-progress` judges it).
    pub(crate) fn judge(&self, now: f64) -> Option<StepJudgement> {
        let (t, phase) = self.last.as_ref()?;
        judge(
            &self.limits,
            phase,
            self.steps.phase(phase),
            (now - t).max(0.0),
        )
    }

    /// What the verdict records of a run that ended at `end` (Unix seconds), `stalled` when it
    /// failed on staleness, with the file's `errors`.
    pub(crate) fn finish(&self, end: f64, stalled: bool, errors: HeartbeatErrors) -> RunBeats {
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
            late.reason().contains("step 30 of phase `train`"),
            "{}",
            late.reason()
        );
        // Entering the checkpoint, beaten once: its 20 s, not train's.
        run.add(&Beat::clocked_at(30, "checkpoint", t));
        assert!(!run.judge(t + 15.0).unwrap().is_over());
        assert!(run.judge(t + 21.0).unwrap().is_over());
    }

    /// Any beat was progress: a thread that kept beating the last `(step, phase)` while the
    /// training loop hung kept the soak alive for ever.
    #[test]
    fn a_beat_that_repeats_the_last_step_and_phase_is_no_progress() {
        let mut run = HeartbeatRun::new(0.0, StepLimits::default());
        run.add(&Beat::clocked_at(7, "train", 1.0));
        assert_eq!(run.take_progressed(), 1, "the first beat is progress");
        for t in 2..10 {
            run.add(&Beat::clocked_at(7, "train", f64::from(t)));
        }
        assert_eq!(run.take_progressed(), 0, "the same step and phase again");
        run.add(&Beat::clocked_at(7, "checkpoint", 10.0));
        run.add(&Beat::clocked_at(7, "checkpoint", 11.0));
        run.add(&Beat::clocked_at(8, "checkpoint", 12.0));
        assert_eq!(run.take_progressed(), 2, "a new phase, then a new step");
        assert_eq!(run.take_progressed(), 0, "counted once");
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
        assert_eq!(found.errors, errors);
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
