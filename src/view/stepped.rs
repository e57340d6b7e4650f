//! A soak's steps in words, as `soak show` prints them and the report lays them out: the
//! `train` steps and their pace, the other phases, the goodput and where the rest of the time
//! went, and a warning when the heartbeat file held what was not a beat; and a running soak's
//! latest beats in one line.

use crate::read::stepped::rows::LatestBeats;
use crate::read::stepped::{PhaseShown, Stepped};
use crate::soak::heartbeat::goodput::PRODUCTIVE_PHASE;
use crate::text::{bytes, count, duration, foreign, step_time};

/// The phases besides `train` named one by one; more are counted.
const PHASES_NAMED: usize = 3;
/// The badput buckets named after the goodput.
const BADPUT_NAMED: usize = 2;

/// What a person is told of a soak's steps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SteppedText {
    /// Labelled lines: `steps`, `phases`, `goodput`; none without beats.
    pub lines: Vec<(&'static str, String)>,
    pub warnings: Vec<String>,
}

impl SteppedText {
    pub(crate) fn of(stepped: &Stepped) -> Self {
        let mut text = Self::default();
        if let Some(goodput) = stepped.goodput {
            if let Some(train) = stepped.train() {
                let mut line = format!(
                    "{} (last {})",
                    count(train.count, &format!("{PRODUCTIVE_PHASE} step")),
                    train.last
                );
                if let Some(rate) = stepped.steps_per_second() {
                    line.push_str(&format!(" at {}/s", per_second(rate)));
                }
                if let Some(times) = times(train) {
                    line.push_str(&format!("; step time {times}"));
                }
                text.lines.push(("steps", line));
            }
            let others = stepped.other_phases();
            if !others.is_empty() {
                let mut said: Vec<String> = others
                    .iter()
                    .take(PHASES_NAMED)
                    .map(|(name, phase)| {
                        let mut line = format!("{}: {}", foreign(name), count(phase.count, "step"));
                        if let Some(times) = times(phase) {
                            line.push_str(&format!(", {times}"));
                        }
                        line
                    })
                    .collect();
                if others.len() > PHASES_NAMED {
                    said.push(count((others.len() - PHASES_NAMED) as u64, "more phase"));
                }
                text.lines.push(("phases", said.join("; ")));
            }
            let mut line = format!(
                "{:.1}% productive ({} of {})",
                goodput.fraction * 100.0,
                duration(goodput.productive_seconds),
                duration(goodput.run_seconds())
            );
            let badput: Vec<String> = goodput
                .largest_badput(BADPUT_NAMED)
                .iter()
                .map(|(bucket, seconds)| format!("{bucket} {}", duration(*seconds)))
                .collect();
            if !badput.is_empty() {
                line.push_str(&format!("; badput: {}", badput.join(", ")));
            }
            text.lines.push(("goodput", line));
        }
        let errors = stepped.heartbeat_errors;
        let mut said = Vec::new();
        if errors.malformed > 0 {
            said.push(format!("{} not a beat", count(errors.malformed, "line")));
        }
        if errors.oversized > 0 {
            said.push(format!("{} over 64 KiB", count(errors.oversized, "line")));
        }
        if errors.dropped > 0 {
            said.push(format!("{} skipped unread", bytes(errors.dropped)));
        }
        if errors.truncations > 0 {
            said.push(format!(
                "cut short or rewritten {}",
                count(errors.truncations, "time")
            ));
        }
        if !said.is_empty() {
            text.warnings.push(format!(
                "the heartbeat file held what was not read as beats: {}",
                said.join(", ")
            ));
        }
        let mut said = Vec::new();
        if let Some(clock) = errors.clock.filter(|n| *n > 0) {
            said.push(format!(
                "{} whose `t` disagreed with its arrival, timed by the arrival",
                count(clock, "beat")
            ));
        }
        if let Some(repeats) = errors.repeats.filter(|n| *n > 0) {
            said.push(format!(
                "{} repeating the step and phase of the one before, no step and no progress",
                count(repeats, "beat")
            ));
        }
        if !said.is_empty() {
            text.warnings.push(said.join("; "));
        }
        if errors.polling_fallbacks.is_some_and(|n| n > 0) {
            text.warnings
                .push("the heartbeat file was polled, for want of an inotify watch".to_owned());
        }
        if let Some(untracked) = stepped.untracked.filter(|n| *n > 0) {
            text.warnings.push(format!(
                "{} of phases past the first 16 were counted, their steps not kept",
                count(untracked, "beat")
            ));
        }
        text
    }
}

/// `median 101ms, p99 120ms`; `None` before a step was timed.
fn times(phase: &PhaseShown) -> Option<String> {
    let median = phase.median_seconds?;
    Some(match phase.p99_seconds {
        Some(p99) => format!("median {}, p99 {}", step_time(median), step_time(p99)),
        None => format!("median {}", step_time(median)),
    })
}

/// The numbers a running soak's beats line names.
const NUMBERS_SHOWN: usize = 4;

/// A running soak's latest beats: `step 120 (train) at 9.81/s lately, step time median 101ms;
/// loss 0.3125`, and how long before the latest sample the last beat was read.
pub(crate) fn latest_line(beats: &LatestBeats, last_sample: Option<f64>) -> String {
    let mut line = match (beats.step, &beats.phase) {
        (Some(step), Some(phase)) => format!("step {step} ({})", foreign(phase)),
        (Some(step), None) => format!("step {step}"),
        _ => "beaten".to_owned(),
    };
    if let Some(rate) = beats.steps_per_second {
        line.push_str(&format!(" at {}/s lately", per_second(rate)));
    }
    if let Some(median) = beats.step_seconds_median {
        line.push_str(&format!(", step time median {}", step_time(median)));
    }
    let numbers: Vec<String> = beats
        .numbers
        .iter()
        .take(NUMBERS_SHOWN)
        .map(|(name, value)| format!("{} {}", foreign(name), number(*value)))
        .collect();
    if !numbers.is_empty() {
        line.push_str(&format!("; {}", numbers.join(", ")));
    }
    if let Some(age) = last_sample
        .map(|last| last - beats.sampled_seconds)
        .filter(|age| *age > 0.0)
    {
        line.push_str(&format!(
            "; none in the {} before the latest sample",
            duration(age)
        ));
    }
    line
}

/// A number a trainer beat, as short as reads well: `4096`, `0.3125`, `1.235e-5`.
fn number(value: f64) -> String {
    let magnitude = value.abs();
    if value == value.trunc() && magnitude < 1e15 {
        format!("{value:.0}")
    } else if (1e-3..1e6).contains(&magnitude) {
        let decimals = (3 - magnitude.log10().floor() as i32).clamp(0, 6) as usize;
        format!("{value:.decimals$}")
    } else {
        format!("{value:.3e}")
    }
}

/// A rate with three significant digits: `9.81`, `98.1`, `981`, `12345`.
pub(crate) fn per_second(rate: f64) -> String {
    match rate {
        r if r < 9.995 => format!("{r:.2}"),
        r if r < 99.95 => format!("{r:.1}"),
        r => format!("{r:.0}"),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::read::stepped::{BadputShown, GoodputShown, HeartbeatErrorsShown};

    fn phase(count: u64, median: Option<f64>) -> PhaseShown {
        PhaseShown {
            count,
            last: count.saturating_sub(1),
            median_seconds: median,
            p99_seconds: median.map(|m| m * 1.5),
        }
    }

    fn stepped(phases: &[(&str, PhaseShown)], goodput: Option<GoodputShown>) -> Stepped {
        Stepped {
            steps: phases
                .iter()
                .map(|(name, phase)| ((*name).to_owned(), *phase))
                .collect::<BTreeMap<_, _>>(),
            untracked: None,
            heartbeat_errors: HeartbeatErrorsShown::default(),
            goodput,
        }
    }

    fn goodput(productive: f64, checkpoint: f64, startup: f64) -> GoodputShown {
        let badput = BadputShown {
            startup,
            checkpoint,
            eval: 0.0,
            stalled: 0.0,
            other: 0.0,
        };
        let run = productive + checkpoint + startup;
        GoodputShown {
            productive_seconds: productive,
            badput_seconds: badput,
            fraction: productive / run,
        }
    }

    #[test]
    fn a_beaten_soak_says_its_pace_its_phases_and_where_the_time_went() {
        let text = SteppedText::of(&stepped(
            &[
                ("train", phase(100, Some(0.1012))),
                ("checkpoint", phase(2, Some(8.0))),
                ("eval", phase(4, None)),
            ],
            Some(goodput(10.0, 16.0, 1.5)),
        ));
        assert_eq!(
            text.lines,
            [
                (
                    "steps",
                    "100 train steps (last 99) at 10.0/s; step time median 101ms, p99 152ms".into()
                ),
                (
                    "phases",
                    "eval: 4 steps; checkpoint: 2 steps, median 8.00s, p99 12s".into()
                ),
                (
                    "goodput",
                    "36.4% productive (10s of 28s); badput: checkpoint 16s, startup 1.5s".into()
                ),
            ]
        );
        assert!(text.warnings.is_empty());
    }

    /// Without beats nothing is said, unless the file held lines that were not beats.
    #[test]
    fn an_unbeaten_soak_says_nothing_but_what_its_file_held() {
        let mut quiet = stepped(&[], None);
        assert_eq!(SteppedText::of(&quiet), SteppedText::default());
        quiet.heartbeat_errors.malformed = 3;
        quiet.heartbeat_errors.dropped = 2048;
        let text = SteppedText::of(&quiet);
        assert!(text.lines.is_empty());
        assert_eq!(
            text.warnings,
            [
                "the heartbeat file held what was not read as beats: 3 lines not a beat, 2.0 KiB skipped unread"
            ]
        );
    }

    /// A running soak's beats line: the step and phase, the pace, the median step, the first
    /// four numbers as short as reads well, and how long no beat came.
    #[test]
    fn a_running_soaks_beats_read_in_one_line() {
        let numbers = [
            ("a", 4096.0),
            ("b", 0.3125),
            ("c", 1.235e-5),
            ("d", -2.5),
            ("e", 1.0),
        ];
        let beats = LatestBeats {
            step: Some(120),
            phase: Some("train".into()),
            sampled_seconds: 30.0,
            step_seconds_median: Some(0.1013),
            numbers: numbers.iter().map(|(k, v)| ((*k).into(), *v)).collect(),
            steps_per_second: Some(9.812),
        };
        assert_eq!(
            latest_line(&beats, Some(41.0)),
            "step 120 (train) at 9.81/s lately, step time median 101ms; a 4096, b 0.3125, \
             c 1.235e-5, d -2.500; none in the 11s before the latest sample"
        );
        assert_eq!(
            latest_line(&beats, Some(30.0)),
            "step 120 (train) at 9.81/s lately, step time median 101ms; a 4096, b 0.3125, \
             c 1.235e-5, d -2.500"
        );
    }

    #[test]
    fn phases_past_the_first_few_are_counted() {
        let names = ["a", "b", "c", "d", "e"];
        let phases: Vec<(&str, PhaseShown)> = names.iter().map(|n| (*n, phase(1, None))).collect();
        let text = SteppedText::of(&stepped(&phases, Some(goodput(0.0, 0.0, 1.0))));
        assert_eq!(
            text.lines[0],
            (
                "phases",
                "a: 1 step; b: 1 step; c: 1 step; 2 more phases".into()
            )
        );
        assert_eq!(
            text.lines[1],
            (
                "goodput",
                "0.0% productive (0s of 1s); badput: startup 1s".into()
            )
        );
    }
}
