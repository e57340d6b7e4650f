//! How long a step may take, by phase: `--phase-timeout PHASE=D` (repeatable) and
//! `--step-timeout auto|D`, and the judgement of the step running now.
//!
//! The step running now is taken to be of the phase of the last beat, and it has taken the
//! time since that beat (of any phase); a reason names that beat's step and phase as beaten. So a trainer that enters a phase of long steps (a
//! checkpoint) after steps of another beats once with the new phase as it enters it: the wait
//! is then judged by the new phase's limit (and the beat's short interval is the new phase's,
//! as [`super::goodput`] counts it).
//!
//! A phase's limit, the first that applies:
//! 1. its `--phase-timeout`;
//! 2. `--step-timeout D`: `D`, for every phase;
//! 3. `--step-timeout auto`, once the phase has [`AUTO_MIN_STEPS`] timed steps: the larger of
//!    [`AUTO_P99_FACTOR`] × its p99 step seconds and [`AUTO_FLOOR_SECONDS`] (learned anew at
//!    every judgement, from all its steps so far).
//!
//! A phase with none of these has no limit: [`judge`] returns `None`, and the soak's
//! `--stale-progress` goes on judging it.

use std::collections::BTreeMap;
use std::time::Duration;

use super::beat::phase_is_well_formed;
use super::steps::PhaseSteps;
use crate::duration::parse_timeout;
use crate::event::soak::{HeartbeatSettings, StepTimeoutSetting};

/// The fewest timed steps a phase needs before `auto` learns its limit.
pub(crate) const AUTO_MIN_STEPS: u64 = 20;
/// A learned limit is this many times the phase's p99 step seconds...
pub(crate) const AUTO_P99_FACTOR: f64 = 5.0;
/// ...and at least this many seconds.
pub(crate) const AUTO_FLOOR_SECONDS: f64 = 10.0;

/// A limit flag that does not parse; each says what was typed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error(
        "`--phase-timeout {0}` is not PHASE=DURATION; write the phase as the heartbeats name it (1 to 64 characters) and a duration above zero, e.g. `--phase-timeout checkpoint=30m`"
    )]
    PhaseTimeout(String),
    #[error(
        "`--step-timeout {0}` is neither `auto` nor a duration above zero; e.g. `--step-timeout auto` or `--step-timeout 10m`"
    )]
    StepTimeout(String),
    #[error(
        "`--phase-timeout` gives phase `{phase}` two limits (`{first}` and `{second}`); keep one"
    )]
    Repeated {
        phase: String,
        first: String,
        second: String,
    },
}

/// `--step-timeout`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StepTimeout {
    Auto,
    /// The duration, and the text it was typed as.
    Fixed(Duration, String),
}

pub(crate) fn parse_step_timeout(text: &str) -> Result<StepTimeout, LimitError> {
    if text.trim() == "auto" {
        return Ok(StepTimeout::Auto);
    }
    let limit = parse_timeout(text).map_err(|_| LimitError::StepTimeout(text.to_owned()))?;
    Ok(StepTimeout::Fixed(limit, text.trim().to_owned()))
}

/// One `--phase-timeout PHASE=D`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PhaseTimeout {
    pub(crate) phase: String,
    pub(crate) limit: Duration,
    /// The flag's value as typed.
    pub(crate) typed: String,
}

/// Split at the last `=`: a phase may hold one (as a heartbeat's may), a duration never does.
pub(crate) fn parse_phase_timeout(text: &str) -> Result<PhaseTimeout, LimitError> {
    let err = || LimitError::PhaseTimeout(text.to_owned());
    let (phase, limit) = text.rsplit_once('=').ok_or_else(err)?;
    if !phase_is_well_formed(phase) {
        return Err(err());
    }
    Ok(PhaseTimeout {
        phase: phase.to_owned(),
        limit: parse_timeout(limit).map_err(|_| err())?,
        typed: text.to_owned(),
    })
}

impl StepLimits {
    /// The limits as the start records them.
    pub(crate) fn settings(&self) -> HeartbeatSettings {
        let ms = |d: &Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        HeartbeatSettings {
            step_timeout: self.step_timeout.as_ref().map(|timeout| match timeout {
                StepTimeout::Auto => StepTimeoutSetting::Auto,
                StepTimeout::Fixed(limit, _) => StepTimeoutSetting::Fixed {
                    limit_ms: ms(limit),
                },
            }),
            phase_timeouts: self
                .phases
                .iter()
                .map(|(phase, timeout)| (phase.clone(), ms(&timeout.limit)))
                .collect(),
        }
    }
}

/// The limits a soak was given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepLimits {
    step_timeout: Option<StepTimeout>,
    phases: BTreeMap<String, PhaseTimeout>,
}

impl StepLimits {
    /// The limits of `--step-timeout` (if given) and every `--phase-timeout`; a phase given two
    /// is refused.
    pub(crate) fn new(
        step_timeout: Option<StepTimeout>,
        phase_timeouts: impl IntoIterator<Item = PhaseTimeout>,
    ) -> Result<Self, LimitError> {
        let mut phases = BTreeMap::new();
        for timeout in phase_timeouts {
            if let Some(first) = phases.get(&timeout.phase) {
                let first: &PhaseTimeout = first;
                return Err(LimitError::Repeated {
                    phase: timeout.phase.clone(),
                    first: first.typed.clone(),
                    second: timeout.typed,
                });
            }
            phases.insert(timeout.phase.clone(), timeout);
        }
        Ok(StepLimits {
            step_timeout,
            phases,
        })
    }

    /// `phase`'s limit now, given its steps so far; `None` without one.
    pub(crate) fn limit(&self, phase: &str, steps: Option<&PhaseSteps>) -> Option<Limit> {
        if let Some(timeout) = self.phases.get(phase) {
            return Some(Limit {
                seconds: timeout.limit.as_secs_f64(),
                source: Source::PhaseTimeout(timeout.typed.clone()),
            });
        }
        match self.step_timeout.as_ref()? {
            StepTimeout::Fixed(limit, typed) => Some(Limit {
                seconds: limit.as_secs_f64(),
                source: Source::StepTimeout(typed.clone()),
            }),
            StepTimeout::Auto => {
                let stats = steps?.stats();
                let p99 = stats
                    .p99_seconds
                    .filter(|_| stats.timed >= AUTO_MIN_STEPS)?;
                Some(Limit {
                    seconds: (AUTO_P99_FACTOR * p99).max(AUTO_FLOOR_SECONDS),
                    source: Source::Learned { p99 },
                })
            }
        }
    }
}

/// A phase's limit, and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Limit {
    pub(crate) seconds: f64,
    pub(crate) source: Source,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Source {
    /// `--phase-timeout`, as typed.
    PhaseTimeout(String),
    /// `--step-timeout D`, `D` as typed.
    StepTimeout(String),
    /// `--step-timeout auto`, from the phase's p99 step seconds.
    Learned { p99: f64 },
}

/// The step running now, against its phase's limit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StepJudgement {
    /// The phase of the last beat: the step running now is of it.
    pub(crate) phase: String,
    /// The last beat's step, as beaten.
    pub(crate) step: u64,
    /// Since the last beat.
    pub(crate) elapsed_seconds: f64,
    pub(crate) limit: Limit,
}

impl StepJudgement {
    /// Whether the step has taken longer than its limit.
    pub(crate) fn is_over(&self) -> bool {
        self.elapsed_seconds > self.limit.seconds
    }

    /// E.g. "no beat for 12.4s since step 30 of phase `train`; its limit is 10.0s (learned:
    /// 5 × p99 0.11s, at least 10s)": the step and phase as the last beat gave them, the seconds
    /// with the digits that tell the wait from its limit.
    pub(crate) fn reason(&self) -> String {
        let source = match &self.limit.source {
            Source::PhaseTimeout(typed) => format!("--phase-timeout {typed}"),
            Source::StepTimeout(typed) => format!("--step-timeout {typed}"),
            Source::Learned { p99 } if AUTO_P99_FACTOR * p99 >= AUTO_FLOOR_SECONDS => {
                format!("learned: {AUTO_P99_FACTOR} × p99 {}", seconds(*p99))
            }
            Source::Learned { p99 } => format!(
                "learned: {AUTO_P99_FACTOR} × p99 {}, at least {}",
                seconds(*p99),
                crate::text::duration(AUTO_FLOOR_SECONDS)
            ),
        };
        format!(
            "no beat for {} since step {} of phase `{}`; its limit is {} ({source})",
            seconds(self.elapsed_seconds),
            self.step,
            self.phase,
            seconds(self.limit.seconds),
        )
    }
}

/// The step running now — of `phase`, the last beat's (at `step`), whose steps so far are
/// `steps`, begun `since_last_beat` seconds ago — against its limit; `None` where the phase has
/// none.
pub(crate) fn judge(
    limits: &StepLimits,
    (phase, step): (&str, u64),
    steps: Option<&PhaseSteps>,
    since_last_beat: f64,
) -> Option<StepJudgement> {
    Some(StepJudgement {
        phase: phase.to_owned(),
        step,
        elapsed_seconds: since_last_beat,
        limit: limits.limit(phase, steps)?,
    })
}

/// Seconds as a reason tells them: one decimal from a second up, two significant digits under.
fn seconds(s: f64) -> String {
    if !(s.is_finite() && s > 0.0) {
        return "0s".to_owned();
    }
    if s >= 1.0 {
        return format!("{s:.1}s");
    }
    let decimals = (1 - s.log10().floor() as i32).clamp(2, 6) as usize;
    format!("{s:.decimals$}s")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::heartbeat::beat::Beat;
    use crate::soak::heartbeat::steps::RunSteps;

    /// A run whose `train` steps took `seconds` each, the last numbered `n - 1`.
    fn trained(n: u64, seconds: f64) -> RunSteps {
        let mut steps = RunSteps::default();
        for step in 0..n {
            let beat = Beat::clocked_at(step, "train", 0.0);
            steps.add(&beat, Some((seconds, "train")));
        }
        steps
    }

    fn limits(step: Option<&str>, phases: &[&str]) -> StepLimits {
        let step = step.map(|s| parse_step_timeout(s).unwrap());
        let phases = phases.iter().map(|p| parse_phase_timeout(p).unwrap());
        StepLimits::new(step, phases).unwrap()
    }

    #[test]
    fn auto_learns_once_a_phase_has_twenty_timed_steps() {
        let auto = limits(Some("auto"), &[]);
        let few = trained(20, 0.11);
        // 20 beats, 20 timed steps here (the test times every beat).
        let judged = judge(&auto, ("train", 19), few.phase("train"), 12.4).unwrap();
        assert!(judged.is_over());
        assert_eq!(
            judged.reason(),
            "no beat for 12.4s since step 19 of phase `train`; its limit is 10.0s (learned: 5 × p99 0.11s, at least 10s)"
        );
        assert!(
            !judge(&auto, ("train", 19), few.phase("train"), 9.9)
                .unwrap()
                .is_over()
        );
        assert_eq!(
            judge(&auto, ("train", 18), trained(19, 0.11).phase("train"), 1e6),
            None
        );
        assert_eq!(judge(&auto, ("eval", 19), few.phase("eval"), 1e6), None);

        let slow = trained(30, 3.2);
        let judged = judge(&auto, ("train", 29), slow.phase("train"), 15.0).unwrap();
        assert!(!judged.is_over());
        assert!((judged.limit.seconds - 16.0).abs() < 16.0 * 0.011);
        assert!(
            judged.reason().ends_with("(learned: 5 × p99 3.2s)"),
            "{}",
            judged.reason()
        );
    }

    #[test]
    fn a_phase_timeout_comes_first_then_a_fixed_step_timeout() {
        let both = limits(Some("30s"), &["checkpoint=20s", "eval=1h30m"]);
        let steps = trained(100, 0.1);
        let checkpoint = judge(&both, ("checkpoint", 99), None, 21.0).unwrap();
        assert!(checkpoint.is_over());
        assert_eq!(
            checkpoint.reason(),
            "no beat for 21.0s since step 99 of phase `checkpoint`; its limit is 20.0s (--phase-timeout checkpoint=20s)"
        );
        let train = judge(&both, ("train", 99), steps.phase("train"), 29.0).unwrap();
        assert!(!train.is_over());
        assert_eq!(
            train.reason(),
            "no beat for 29.0s since step 99 of phase `train`; its limit is 30.0s (--step-timeout 30s)"
        );
        assert_eq!(
            judge(&both, ("eval", 0), None, 0.0).unwrap().limit.seconds,
            5400.0
        );
        let only_phase = limits(None, &["checkpoint=20s"]);
        assert_eq!(
            judge(&only_phase, ("train", 99), steps.phase("train"), 1e9),
            None
        );
    }

    #[test]
    fn what_was_typed_is_named_when_it_does_not_parse() {
        for bad in [
            "",
            "checkpoint",
            "=20s",
            "checkpoint=",
            "checkpoint=0",
            "checkpoint=-1s",
            "checkpoint=soon",
            "a\tb=1s",
        ] {
            let err = parse_phase_timeout(bad).unwrap_err();
            assert_eq!(err, LimitError::PhaseTimeout(bad.to_owned()));
            assert!(
                err.to_string()
                    .starts_with(&format!("`--phase-timeout {bad}`"))
            );
        }
        let long = format!("{}=1s", "p".repeat(65));
        assert!(parse_phase_timeout(&long).is_err());
        for bad in ["", "0", "automatic", "10 parsecs"] {
            assert_eq!(
                parse_step_timeout(bad),
                Err(LimitError::StepTimeout(bad.to_owned()))
            );
        }
        let twice = StepLimits::new(
            None,
            ["checkpoint=20s", "checkpoint=30m"].map(|p| parse_phase_timeout(p).unwrap()),
        );
        assert_eq!(
            twice.unwrap_err().to_string(),
            "`--phase-timeout` gives phase `checkpoint` two limits (`checkpoint=20s` and `checkpoint=30m`); keep one"
        );
    }

    /// `--phase-timeout x=y=5s` was refused: the flag was split at its first `=`, so a phase
    /// whose name holds one (heartbeats allow it) could never be given a limit. A duration holds
    /// no `=`, so the phase is everything before the last.
    #[test]
    fn a_phase_whose_name_holds_an_equals_sign_gets_its_limit() {
        let timeout = parse_phase_timeout("x=y=5s").unwrap();
        assert_eq!(timeout.phase, "x=y");
        assert_eq!(timeout.limit, Duration::from_secs(5));
        assert_eq!(timeout.typed, "x=y=5s");
        let judged = judge(&limits(None, &["x=y=5s"]), ("x=y", 0), None, 6.0).unwrap();
        assert!(judged.is_over());
        assert!(
            judged.reason().ends_with("(--phase-timeout x=y=5s)"),
            "{}",
            judged.reason()
        );
        assert!(parse_phase_timeout("x=y=").is_err());
    }

    #[test]
    fn seconds_read_with_the_digits_that_matter() {
        assert_eq!(seconds(0.11), "0.11s");
        assert_eq!(seconds(0.0043), "0.0043s");
        assert_eq!(seconds(12.44), "12.4s");
        assert_eq!(seconds(1840.0), "1840.0s");
        assert_eq!(seconds(f64::NAN), "0s");
    }

    proptest::proptest! {
        #[test]
        fn no_flag_text_panics(text in "\\PC{0,80}") {
            let _ = parse_phase_timeout(&text);
            let _ = parse_step_timeout(&text);
        }

        #[test]
        fn a_learned_limit_is_never_under_its_floor_nor_under_five_p99(step_seconds in 1e-6f64..1e4) {
            let steps = trained(25, step_seconds);
            let limit = limits(Some("auto"), &[]).limit("train", steps.phase("train")).unwrap();
            proptest::prop_assert!(limit.seconds >= AUTO_FLOOR_SECONDS);
            proptest::prop_assert!(limit.seconds >= AUTO_P99_FACTOR * step_seconds * 0.99);
        }
    }
}
