//! A soak's steps, from the beats its trainer wrote (soaks recorded in schema 10 on): the
//! summary's `steps` by phase, `goodput` and `heartbeat_errors`, typed and rounded as the
//! artifact shows them, with the figures `soak show`, the report and `soak compare` lead with
//! (`view::stepped` says them in words); and [`rows`], what the rows tell of the beats as they
//! go by (a running soak's latest beats and pace, the counts a step processed).
//!
//! Seconds are rounded: step times to the microsecond, goodput to the millisecond (the log keeps
//! them whole; the artifact is for reading, and rendering the same record gives the same bytes).
//!
//! **Steps a second** are the `train` phase's beats over the time its steps took (the goodput's
//! productive seconds): the pace while training, apart from checkpoints and evaluations, which
//! the goodput's fraction accounts for.

pub(crate) mod rows;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::event::soak::RunBeats;
use crate::soak::heartbeat::goodput::PRODUCTIVE_PHASE;

/// The summary's figures of the beats. Serialised, each part is the artifact's own object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Stepped {
    /// Steps by phase (beats of the phase; step times of the steps that phase's beats began).
    pub steps: BTreeMap<String, PhaseShown>,
    /// Beats of phases past the first 16, whose steps are not kept; shown from schema 15 on
    /// (before, the artifact left it out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untracked: Option<u64>,
    pub heartbeat_errors: HeartbeatErrorsShown,
    /// `None` when no beat arrived.
    pub goodput: Option<GoodputShown>,
}

/// One phase of `summary.steps`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct PhaseShown {
    pub count: u64,
    pub last: u64,
    pub median_seconds: Option<f64>,
    pub p99_seconds: Option<f64>,
}

/// `summary.heartbeat_errors`; what schema 15 added only for the soaks it recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct HeartbeatErrorsShown {
    /// Complete lines that were not beats.
    pub malformed: u64,
    /// Lines over 64 KiB.
    pub oversized: u64,
    /// Bytes skipped unread.
    pub dropped: u64,
    /// Times the file was found cut short, rewritten or replaced.
    pub truncations: u64,
    /// Beats whose `t` disagreed with their arrival, timed by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<u64>,
    /// Beats that repeated the `(step, phase)` of the beat before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeats: Option<u64>,
    /// Times the file was polled for want of an inotify watch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub polling_fallbacks: Option<u64>,
}

/// `summary.goodput`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct GoodputShown {
    pub productive_seconds: f64,
    pub badput_seconds: BadputShown,
    /// Productive over the run time.
    pub fraction: f64,
}

/// `summary.goodput.badput_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct BadputShown {
    pub startup: f64,
    pub checkpoint: f64,
    pub eval: f64,
    pub stalled: f64,
    pub other: f64,
}

impl BadputShown {
    /// Each bucket by name, in the artifact's order.
    pub(crate) fn buckets(&self) -> [(&'static str, f64); 5] {
        [
            ("startup", self.startup),
            ("checkpoint", self.checkpoint),
            ("eval", self.eval),
            ("stalled", self.stalled),
            ("other", self.other),
        ]
    }
}

impl GoodputShown {
    /// The run time it splits.
    pub(crate) fn run_seconds(&self) -> f64 {
        self.productive_seconds
            + self
                .badput_seconds
                .buckets()
                .iter()
                .map(|b| b.1)
                .sum::<f64>()
    }

    /// The buckets that took any time, the largest first (equal ones in the artifact's order),
    /// at most `n`.
    pub(crate) fn largest_badput(&self, n: usize) -> Vec<(&'static str, f64)> {
        let mut buckets: Vec<(&'static str, f64)> = self
            .badput_seconds
            .buckets()
            .into_iter()
            .filter(|(_, seconds)| *seconds > 0.0)
            .collect();
        buckets.sort_by(|a, b| b.1.total_cmp(&a.1));
        buckets.truncate(n);
        buckets
    }
}

impl Stepped {
    /// The figures of the beats a verdict found (`None` before the verdict: no steps, no
    /// errors, no goodput).
    pub(crate) fn of(found: Option<&RunBeats>) -> Self {
        let empty = RunBeats::default();
        let found = found.unwrap_or(&empty);
        let micro = |s: Option<f64>| s.map(|s| round(s, 1e6));
        let milli = |s: f64| round(s, 1e3);
        Self {
            steps: found
                .steps
                .iter()
                .map(|(phase, stats)| {
                    let shown = PhaseShown {
                        count: stats.count,
                        last: stats.last,
                        median_seconds: micro(stats.median_seconds),
                        p99_seconds: micro(stats.p99_seconds),
                    };
                    (phase.clone(), shown)
                })
                .collect(),
            // Counted with the errors schema 15 added: a verdict of that form on.
            untracked: found.errors.clock.map(|_| found.untracked),
            heartbeat_errors: HeartbeatErrorsShown {
                malformed: found.errors.malformed,
                oversized: found.errors.oversized,
                dropped: found.errors.dropped_bytes,
                truncations: found.errors.truncations,
                clock: found.errors.clock,
                repeats: found.errors.repeats,
                polling_fallbacks: found.errors.polling_fallbacks,
            },
            goodput: found.goodput.map(|g| GoodputShown {
                productive_seconds: milli(g.productive_seconds),
                badput_seconds: BadputShown {
                    startup: milli(g.startup_seconds),
                    checkpoint: milli(g.checkpoint_seconds),
                    eval: milli(g.eval_seconds),
                    stalled: milli(g.stalled_seconds),
                    other: milli(g.other_seconds),
                },
                fraction: round(g.fraction(), 1e4),
            }),
        }
    }

    /// Whether any beat arrived.
    pub(crate) fn beaten(&self) -> bool {
        self.goodput.is_some()
    }

    /// The productive phase's steps.
    pub(crate) fn train(&self) -> Option<&PhaseShown> {
        self.steps.get(PRODUCTIVE_PHASE)
    }

    /// The `train` phase's beats over the time its steps took; `None` without such steps.
    pub(crate) fn steps_per_second(&self) -> Option<f64> {
        let productive = self.goodput?.productive_seconds;
        let count = self.train()?.count;
        (count > 0 && productive > 0.0).then(|| count as f64 / productive)
    }

    /// Each phase but `train`, those with the most beats first (equal ones by name).
    pub(crate) fn other_phases(&self) -> Vec<(&str, &PhaseShown)> {
        let mut phases: Vec<(&str, &PhaseShown)> = self
            .steps
            .iter()
            .filter(|(name, _)| name.as_str() != PRODUCTIVE_PHASE)
            .map(|(name, phase)| (name.as_str(), phase))
            .collect();
        phases.sort_by_key(|(_, phase)| std::cmp::Reverse(phase.count));
        phases
    }
}

/// `seconds` rounded to the nearest `1 / per_second`.
pub(crate) fn round(seconds: f64, per_second: f64) -> f64 {
    (seconds * per_second).round() / per_second
}

#[cfg(test)]
mod tests {
    use crate::event::soak::{GoodputSplit, StepStats};

    use super::*;

    fn phase(count: u64, last: u64, median: Option<f64>, p99: Option<f64>) -> StepStats {
        StepStats {
            count,
            last,
            timed: count,
            median_seconds: median,
            p99_seconds: p99,
        }
    }

    /// A run of 101 train steps, two checkpoints and five evals, with what each took.
    fn found() -> RunBeats {
        RunBeats {
            steps: BTreeMap::from([
                ("train".to_owned(), phase(101, 100, Some(0.1), Some(0.2))),
                ("checkpoint".to_owned(), phase(2, 100, Some(8.0), Some(8.0))),
                ("eval".to_owned(), phase(5, 4, None, None)),
            ]),
            goodput: Some(GoodputSplit {
                productive_seconds: 10.0,
                startup_seconds: 1.5,
                checkpoint_seconds: 16.0,
                other_seconds: 2.5,
                ..GoodputSplit::default()
            }),
            ..RunBeats::default()
        }
    }

    #[test]
    fn steps_a_second_are_the_train_beats_over_their_time() {
        let stepped = Stepped::of(Some(&found()));
        assert!(stepped.beaten());
        assert_eq!(stepped.steps_per_second(), Some(10.1));
        let goodput = stepped.goodput.unwrap();
        assert_eq!(goodput.run_seconds(), 30.0);
        assert_eq!(goodput.fraction, 0.3333);
        assert_eq!(
            goodput.largest_badput(2),
            [("checkpoint", 16.0), ("other", 2.5)]
        );
        let others: Vec<&str> = stepped.other_phases().iter().map(|p| p.0).collect();
        assert_eq!(others, ["eval", "checkpoint"]);
    }

    /// Step times are kept to the microsecond and goodput to the millisecond, as the artifact
    /// shows them; before the verdict nothing was found: no steps, no errors, no goodput.
    #[test]
    fn seconds_read_as_the_artifact_rounds_them_and_none_before_the_verdict() {
        let mut run = found();
        run.steps.insert(
            "train".to_owned(),
            phase(3, 2, Some(0.123_456_7), Some(0.2)),
        );
        if let Some(goodput) = &mut run.goodput {
            goodput.productive_seconds = 10.000_4;
        }
        let stepped = Stepped::of(Some(&run));
        assert_eq!(stepped.train().unwrap().median_seconds, Some(0.123_457));
        assert_eq!(stepped.goodput.unwrap().productive_seconds, 10.0);

        let unbeaten = Stepped::of(None);
        assert!(!unbeaten.beaten() && unbeaten.steps.is_empty());
        assert_eq!(unbeaten.heartbeat_errors, HeartbeatErrorsShown::default());
        assert_eq!(unbeaten.steps_per_second(), None);
    }
}
