//! What a row shows of the trainer's beats (schema 10 on): how many arrived since the previous
//! sample, the last one's step, phase and numbers, and the step times among them (to the
//! microsecond, as the summary's: [`super::stepped`]).

use std::collections::BTreeMap;

use serde::Serialize;

use super::stepped::round;
use crate::event::soak::SampleBeats;

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
