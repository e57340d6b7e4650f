//! What an artifact says of a soak's steps, from the beats its trainer wrote (soaks recorded in
//! schema 10 on): the summary's `steps` by phase, `goodput` and `heartbeat_errors`, typed, with
//! the figures `soak show`, the report and `soak compare` lead with; [`text`] says them in
//! words, and [`rows`] reads what the rows tell of the beats as they go by (a running soak's
//! latest beats and pace, the counts a step processed).
//!
//! Read from the artifact's own JSON, as [`super::shown`] reads the rest: a summary that has
//! `steps` must have the other two (a dropped key is an error that names it, never "no
//! beats"); one without `steps` (a soak recorded before schema 10) has nothing to show and reads
//! as `None`, so that such a soak shows as it always did.
//!
//! **Steps a second** are the `train` phase's beats over the time its steps took (the goodput's
//! productive seconds): the pace while training, apart from checkpoints and evaluations, which
//! the goodput's fraction accounts for.

pub(crate) mod rows;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::soak::heartbeat::goodput::PRODUCTIVE_PHASE;

/// The summary's figures of the beats. Serialised, each part is the artifact's own object.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub(crate) struct Stepped {
    /// Steps by phase (beats of the phase; step times of the steps that phase's beats began).
    pub steps: BTreeMap<String, PhaseShown>,
    pub heartbeat_errors: HeartbeatErrorsShown,
    /// `None` when no beat arrived.
    #[serde(deserialize_with = "Option::deserialize")]
    pub goodput: Option<GoodputShown>,
}

/// One phase of `summary.steps`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
pub(crate) struct PhaseShown {
    pub count: u64,
    pub last: u64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub median_seconds: Option<f64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub p99_seconds: Option<f64>,
}

/// `summary.heartbeat_errors`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub(crate) struct HeartbeatErrorsShown {
    /// Complete lines that were not beats.
    pub malformed: u64,
    /// Lines over 64 KiB.
    pub oversized: u64,
    /// Bytes skipped unread.
    pub dropped: u64,
    /// Times the file was found cut short or rewritten.
    pub truncations: u64,
}

impl HeartbeatErrorsShown {
    pub(crate) fn any(&self) -> bool {
        *self != Self::default()
    }
}

/// `summary.goodput`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
pub(crate) struct GoodputShown {
    pub productive_seconds: f64,
    pub badput_seconds: BadputShown,
    /// Productive over the run time.
    pub fraction: f64,
}

/// `summary.goodput.badput_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
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
    /// The figures of an artifact's head or view; `None` where its summary has no `steps` (a
    /// soak recorded before schema 10, or an artifact of an older schema).
    pub(crate) fn of(view: &Value) -> Result<Option<Self>, serde_json::Error> {
        let summary = &view["summary"];
        if summary.get("steps").is_none() {
            return Ok(None);
        }
        Self::deserialize(summary).map(Some)
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn view() -> Value {
        json!({
            "schema": "unilab.soak.artifact/4",
            "summary": {
                "samples": 12,
                "steps": {
                    "train": {"count": 101, "last": 100, "median_seconds": 0.1, "p99_seconds": 0.2},
                    "checkpoint": {"count": 2, "last": 100, "median_seconds": 8.0, "p99_seconds": 8.0},
                    "eval": {"count": 5, "last": 4, "median_seconds": null, "p99_seconds": null},
                },
                "heartbeat_errors": {"malformed": 0, "oversized": 0, "dropped": 0, "truncations": 0},
                "goodput": {
                    "productive_seconds": 10.0,
                    "badput_seconds": {"startup": 1.5, "checkpoint": 16.0, "eval": 0.0, "stalled": 0.0, "other": 2.5},
                    "fraction": 0.3333,
                },
            },
        })
    }

    #[test]
    fn steps_a_second_are_the_train_beats_over_their_time() {
        let stepped = Stepped::of(&view()).unwrap().unwrap();
        assert!(stepped.beaten());
        assert_eq!(stepped.steps_per_second(), Some(10.1));
        let goodput = stepped.goodput.unwrap();
        assert_eq!(goodput.run_seconds(), 30.0);
        assert_eq!(
            goodput.largest_badput(2),
            [("checkpoint", 16.0), ("other", 2.5)]
        );
        let others: Vec<&str> = stepped.other_phases().iter().map(|p| p.0).collect();
        assert_eq!(others, ["eval", "checkpoint"]);
    }

    /// A soak recorded before schema 10 has no `steps` and nothing to show; one of schema 10
    /// whose `goodput` or errors went missing is an error that names the key.
    #[test]
    fn an_artifact_without_steps_has_none_and_one_missing_a_part_is_an_error() {
        let mut old = view();
        old["summary"] = json!({"samples": 3});
        assert_eq!(Stepped::of(&old).unwrap(), None);

        for key in ["goodput", "heartbeat_errors"] {
            let mut lacking = view();
            lacking["summary"].as_object_mut().unwrap().remove(key);
            let error = Stepped::of(&lacking).unwrap_err().to_string();
            assert!(error.contains(&format!("missing field `{key}`")), "{error}");
        }

        let mut unbeaten = view();
        unbeaten["summary"]["steps"] = json!({});
        unbeaten["summary"]["goodput"] = Value::Null;
        let stepped = Stepped::of(&unbeaten).unwrap().unwrap();
        assert!(!stepped.beaten());
        assert_eq!(stepped.steps_per_second(), None);
    }
}
