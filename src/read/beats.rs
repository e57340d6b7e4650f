//! What the artifact shows of a soak's heartbeats (schema 10 on): each row's beats, the
//! summary's `steps`, `heartbeat_errors` and `goodput`, and the parameters' step limits.
//!
//! Seconds are rounded: step times to the microsecond, goodput to the millisecond (the log keeps
//! them whole; the artifact is for reading, and rendering the same record gives the same bytes).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};

use crate::event::soak::{HeartbeatSettings, RunBeats, SampleBeats, StepTimeoutSetting};

/// A row's beats. Fields in the canonical (sorted) key order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BeatsRow<'a> {
    pub beats: u32,
    pub numbers: &'a BTreeMap<String, f64>,
    pub phase: Option<&'a str>,
    pub step: Option<u64>,
    pub step_seconds_max: Option<f64>,
    pub step_seconds_median: Option<f64>,
    pub step_seconds_min: Option<f64>,
}

impl<'a> BeatsRow<'a> {
    pub(crate) fn of(beats: &'a SampleBeats) -> Self {
        let micro = |s: Option<f32>| s.map(|s| round(f64::from(s), 1e6));
        BeatsRow {
            beats: beats.beats,
            numbers: &beats.numbers,
            phase: beats.phase.as_deref(),
            step: beats.step,
            step_seconds_max: micro(beats.step_seconds_max),
            step_seconds_median: micro(beats.step_seconds_median),
            step_seconds_min: micro(beats.step_seconds_min),
        }
    }
}

fn round(seconds: f64, per_second: f64) -> f64 {
    (seconds * per_second).round() / per_second
}

/// The summary's `steps` (by phase: `count`, `last`, `median_seconds`, `p99_seconds`),
/// `heartbeat_errors` and `goodput` (`null` without a beat), of a verdict's `found` (none
/// before the verdict: no steps, no errors, no goodput).
pub(crate) fn summary(found: Option<&RunBeats>) -> [(&'static str, Value); 3] {
    let empty = RunBeats::default();
    let found = found.unwrap_or(&empty);
    let steps: serde_json::Map<String, Value> = found
        .steps
        .iter()
        .map(|(phase, stats)| {
            let micro = |s: Option<f64>| s.map(|s| round(s, 1e6));
            let shown = json!({
                "count": stats.count,
                "last": stats.last,
                "median_seconds": micro(stats.median_seconds),
                "p99_seconds": micro(stats.p99_seconds),
            });
            (phase.clone(), shown)
        })
        .collect();
    let errors = found.errors;
    let goodput = found.goodput.map(|g| {
        let milli = |s: f64| round(s, 1e3);
        json!({
            "productive_seconds": milli(g.productive_seconds),
            "badput_seconds": {
                "startup": milli(g.startup_seconds),
                "checkpoint": milli(g.checkpoint_seconds),
                "eval": milli(g.eval_seconds),
                "stalled": milli(g.stalled_seconds),
                "other": milli(g.other_seconds),
            },
            "fraction": round(g.fraction(), 1e4),
        })
    });
    [
        ("steps", Value::Object(steps)),
        (
            "heartbeat_errors",
            json!({
                "malformed": errors.malformed,
                "oversized": errors.oversized,
                "dropped": errors.dropped_bytes,
                "truncations": errors.truncations,
            }),
        ),
        ("goodput", json!(goodput)),
    ]
}

/// The parameters' `step_timeout` (`"auto"`, seconds, or `null`) and `phase_timeouts` (seconds
/// by phase).
pub(crate) fn parameters(settings: Option<&HeartbeatSettings>) -> [(&'static str, Value); 2] {
    let seconds = |ms: u64| super::seconds(ms);
    let empty = HeartbeatSettings::default();
    let settings = settings.unwrap_or(&empty);
    let step_timeout = match settings.step_timeout {
        None => Value::Null,
        Some(StepTimeoutSetting::Auto) => "auto".into(),
        Some(StepTimeoutSetting::Fixed { limit_ms }) => seconds(limit_ms).into(),
    };
    let phases: serde_json::Map<String, Value> = settings
        .phase_timeouts
        .iter()
        .map(|(phase, &ms)| (phase.clone(), seconds(ms).into()))
        .collect();
    [
        ("step_timeout", step_timeout),
        ("phase_timeouts", Value::Object(phases)),
    ]
}
