//! What schema 10 adds to a soak's record: its heartbeats. How the steps are judged (with the
//! start's supervision), what each sample saw of the beats since the last (with its measures),
//! and the whole run's steps by phase, the heartbeat file's errors (schema 15 adds the beats not
//! taken as they came) and the run's goodput (with the verdict's findings). `soak::heartbeat` reads and judges the beats; these are what it
//! records.
//!
//! Seconds here are `f64` (step times `f32` in a sample): the log stores them bit for bit, so
//! the artifact renders the same numbers at every export.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `--step-timeout`, as the start records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepTimeoutSetting {
    /// Each phase's limit learned from its own steps.
    Auto,
    /// One limit for every phase, in milliseconds.
    Fixed { limit_ms: u64 },
}

/// How a soak judges the steps its trainer beats.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatSettings {
    /// `None` without `--step-timeout`.
    pub step_timeout: Option<StepTimeoutSetting>,
    /// Each `--phase-timeout PHASE=D`: the phase's limit in milliseconds.
    pub phase_timeouts: BTreeMap<String, u64>,
}

/// The beats that arrived since the previous sample, in a size that does not grow with them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SampleBeats {
    /// How many beats arrived (at most `u32::MAX`: more are counted as that).
    pub beats: u32,
    /// The last beat's step and phase.
    pub step: Option<u64>,
    pub phase: Option<String>,
    pub step_seconds_min: Option<f32>,
    /// Within 1 %.
    pub step_seconds_median: Option<f32>,
    pub step_seconds_max: Option<f32>,
    /// The last value of each number (at most 16, the first keys seen in the sample).
    pub numbers: BTreeMap<String, f64>,
}

/// Lines of the heartbeat file that were not beats, bytes never read, and beats that were not
/// taken as they came (schema 15 on: `None` where the form did not count them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatErrors {
    /// Complete lines that were not beats.
    pub malformed: u64,
    /// Lines longer than 64 KiB.
    pub oversized: u64,
    /// Bytes skipped unread because the trainer wrote faster than the file could be read.
    pub dropped_bytes: u64,
    /// Times the file was found cut short (or rewritten, or replaced) and read again from its
    /// start.
    pub truncations: u64,
    /// Beats whose `t` disagreed with their arrival (another clock), timed by the arrival.
    pub clock: Option<u64>,
    /// Beats that repeated the `(step, phase)` of the beat before: neither a step nor progress.
    pub repeats: Option<u64>,
    /// Times the file was polled for want of an inotify watch (the user's watches ran out).
    pub polling_fallbacks: Option<u64>,
}

impl HeartbeatErrors {
    /// Whether anything went wrong.
    pub fn any(&self) -> bool {
        let counted = [self.clock, self.repeats, self.polling_fallbacks];
        self.malformed + self.oversized + self.dropped_bytes + self.truncations > 0
            || counted.iter().any(|n| n.unwrap_or(0) > 0)
    }
}

/// One phase's steps over the whole run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepStats {
    /// Beats of the phase.
    pub count: u64,
    /// The last beat's step.
    pub last: u64,
    /// How many of them were timed.
    pub timed: u64,
    /// Within 1 %; `None` before a step was timed.
    pub median_seconds: Option<f64>,
    pub p99_seconds: Option<f64>,
}

/// Where the run's time went, split at its beats (see `soak::heartbeat::goodput`): the
/// productive time and the buckets add up to the run time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct GoodputSplit {
    pub productive_seconds: f64,
    pub startup_seconds: f64,
    pub checkpoint_seconds: f64,
    pub eval_seconds: f64,
    pub stalled_seconds: f64,
    pub other_seconds: f64,
}

impl GoodputSplit {
    /// The run time it splits.
    pub fn run_seconds(&self) -> f64 {
        self.productive_seconds
            + self.startup_seconds
            + self.checkpoint_seconds
            + self.eval_seconds
            + self.stalled_seconds
            + self.other_seconds
    }

    /// Productive over run time, in `[0, 1]`; 0 for a run of no time.
    pub fn fraction(&self) -> f64 {
        let run = self.run_seconds();
        if run > 0.0 {
            (self.productive_seconds / run).clamp(0.0, 1.0)
        } else {
            0.0
        }
    }
}

/// What the verdict found of the run's beats.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunBeats {
    /// Steps by phase (at most 16 phases, the first seen).
    pub steps: BTreeMap<String, StepStats>,
    /// Beats of phases past that bound.
    pub untracked: u64,
    pub errors: HeartbeatErrors,
    /// `None` when no beat arrived.
    pub goodput: Option<GoodputSplit>,
}
