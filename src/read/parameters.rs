//! What a soak ran with, typed as the artifact shows it (`parameters`): the limits, where the
//! progress was watched and what unilab set for the command; from `/2` on whether progress was
//! required; from `/3` on how the tree was supervised; from `/4` on the budgets it was held to;
//! from schema 10 on the step limits. What a soak's schema did not record is `None`, and left
//! out when serialised, as its own artifact leaves it out.

use std::collections::BTreeMap;

use serde::Serialize;

use super::fold::{Form, Soak};
use super::seconds;
use crate::event::soak::{HeartbeatSettings, StepTimeoutSetting};

/// `parameters`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Parameters {
    pub sample_interval_seconds: f64,
    pub startup_timeout_seconds: f64,
    pub stale_progress_seconds: f64,
    pub shutdown_grace_seconds: f64,
    pub min_duration_seconds: f64,
    pub progress_dir: String,
    pub output: String,
    pub environment: BTreeMap<String, String>,
    /// `/2` on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_progress: Option<bool>,
    /// `/3` on.
    #[serde(flatten)]
    pub supervision: Option<SupervisionParameters>,
    /// `/4` on.
    #[serde(flatten)]
    pub budgets: Option<Budgets>,
    /// Schema 10 on.
    #[serde(flatten)]
    pub steps: Option<StepLimits>,
}

/// How the tree was supervised.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SupervisionParameters {
    pub fail_fast: bool,
    pub py_spy: Option<String>,
    pub dump_signal: Option<SignalName>,
    pub dump_wait_seconds: f64,
}

/// A signal by its name (`SIGUSR1`), or its number where this host has no name for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub(crate) enum SignalName {
    Name(&'static str),
    Number(i32),
}

impl SignalName {
    fn of(signal: i32) -> Self {
        nix::sys::signal::Signal::try_from(signal)
            .map_or(SignalName::Number(signal), |s| SignalName::Name(s.as_str()))
    }
}

/// The budgets the tree was held to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Budgets {
    pub max_memory_bytes: Option<u64>,
    pub max_gpu_memory_bytes: Option<u64>,
    pub max_memory_growth_bytes_per_hour: Option<u64>,
    pub warmup_seconds: Option<f64>,
}

/// The limits of the steps the trainer's beats tell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct StepLimits {
    /// `"auto"`, seconds, or `None` without `--step-timeout`.
    pub step_timeout: Option<StepTimeout>,
    /// Seconds by phase.
    pub phase_timeouts: BTreeMap<String, f64>,
}

/// `--step-timeout`: learned (`"auto"`) or fixed, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub(crate) enum StepTimeout {
    Auto(&'static str),
    Seconds(f64),
}

impl Parameters {
    /// What `soak` ran with, as much as its schema recorded.
    pub(crate) fn of(soak: &Soak) -> Self {
        let start = &soak.start;
        let params = &start.parameters;
        let recorded = soak.recorded();
        let supervision = soak.supervision.clone().unwrap_or_default();
        let limits = soak.limits.clone().unwrap_or_default();
        Self {
            sample_interval_seconds: seconds(params.sample_interval_ms),
            startup_timeout_seconds: seconds(params.startup_timeout_ms),
            stale_progress_seconds: seconds(params.stale_progress_ms),
            shutdown_grace_seconds: seconds(params.shutdown_grace_ms),
            min_duration_seconds: seconds(params.min_duration_ms),
            progress_dir: start.progress_dir.clone(),
            output: start.output.clone(),
            environment: start.environment.clone(),
            require_progress: (recorded.form >= Form::Second).then_some(start.require_progress),
            supervision: (recorded.form >= Form::Third).then(|| SupervisionParameters {
                fail_fast: supervision.fail_fast,
                py_spy: supervision.py_spy.clone(),
                dump_signal: supervision.dump_signal.map(SignalName::of),
                dump_wait_seconds: seconds(supervision.dump_wait_ms),
            }),
            budgets: (recorded.form >= Form::Current).then(|| Budgets {
                max_memory_bytes: limits.max_memory_bytes,
                max_gpu_memory_bytes: limits.max_gpu_memory_bytes,
                max_memory_growth_bytes_per_hour: limits.max_memory_growth_bytes_per_hour,
                warmup_seconds: limits.warmup_ms.map(seconds),
            }),
            steps: recorded
                .beats
                .then(|| StepLimits::of(supervision.heartbeat.as_ref())),
        }
    }
}

impl StepLimits {
    fn of(settings: Option<&HeartbeatSettings>) -> Self {
        let empty = HeartbeatSettings::default();
        let settings = settings.unwrap_or(&empty);
        Self {
            step_timeout: settings.step_timeout.map(|timeout| match timeout {
                StepTimeoutSetting::Auto => StepTimeout::Auto("auto"),
                StepTimeoutSetting::Fixed { limit_ms } => StepTimeout::Seconds(seconds(limit_ms)),
            }),
            phase_timeouts: settings
                .phase_timeouts
                .iter()
                .map(|(phase, &ms)| (phase.clone(), seconds(ms)))
                .collect(),
        }
    }
}
