//! The verdict: what a soak's run ended with — a failure decided during it, the command's exit,
//! what outlived it, progress, the run time, the kernel's OOM kills, what no signal ended — to
//! the recorded [`Outcome`], by rules applied in a fixed order (see [`verdict`]).

use std::time::Duration;

use super::{Failure, ms, signal_name};
use crate::event::soak::{
    ExitInfo, FailureKind, LeakedProcess, Outcome, OutcomeStatus, SoakParameters,
};
use crate::soak::oom::OomFound;
use crate::text::duration;

fn secs(millis: u64) -> f64 {
    millis as f64 / 1000.0
}

/// How the command exited, in words, or `None` for exit code 0.
fn describe_exit(exit: ExitInfo) -> Option<String> {
    match (exit.code, exit.signal) {
        (Some(0), _) => None,
        (Some(code), _) => Some(format!("the command exited with code {code}")),
        (None, Some(signal)) => Some(format!("the command was killed by {}", signal_name(signal))),
        (None, None) => Some("the command's exit status is unknown".into()),
    }
}

fn failed(kind: FailureKind, reason: String) -> Outcome {
    Outcome {
        status: OutcomeStatus::Failed,
        failure_kind: Some(kind),
        reason,
    }
}

/// A process of the tree still there after SIGKILL and the teardown's bounded wait: in
/// uninterruptible sleep (`D`), most often, which no signal ends.
pub(crate) use crate::event::soak::UnkillableProcess as Unkillable;

/// What the outcome says of processes no signal could end: which, in what state, where.
fn unkillable_note(unkillable: &[Unkillable]) -> Option<String> {
    if unkillable.is_empty() {
        return None;
    }
    let named: Vec<String> = unkillable
        .iter()
        .map(|p| match (p.state, &p.wchan) {
            ('D', Some(wchan)) => format!(
                "{} ({}) in uninterruptible sleep in `{wchan}`",
                p.pid, p.name
            ),
            ('D', None) => format!("{} ({}) in uninterruptible sleep", p.pid, p.name),
            (state, _) => format!("{} ({}, state {state})", p.pid, p.name),
        })
        .collect();
    let stuck = unkillable.iter().any(|p| p.state == 'D');
    Some(format!(
        "{} could not be killed: {}{}",
        crate::text::count(unkillable.len() as u64, "process"),
        named.join(", "),
        if stuck {
            "; the host may need a reset"
        } else {
            ""
        }
    ))
}

/// How a run ended, for the [`verdict`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunEnd<'a> {
    /// A failure the watch or the supervisor decided during the run.
    pub failure: Option<Failure>,
    pub exit: ExitInfo,
    pub leaked: &'a [LeakedProcess],
    /// What of the tree the teardown could not kill.
    pub unkillable: &'a [Unkillable],
    /// The command's own run time: spawn to exit (or to the failure).
    pub run_time: Duration,
    /// Whether the progress directory ever changed while it ran.
    pub progress_seen: bool,
    /// Whether unilab had been interrupted (SIGINT, SIGTERM) when sampling ended.
    pub interrupted: bool,
    /// What the kernel's OOM killer did to the tree.
    pub oom: &'a OomFound,
}

/// The outcome of a soak, from the first that applies: a failure the watch or the supervisor
/// decided; the command's own failure — an interruption when unilab had been interrupted by
/// then (`scancel` and a job's end signal every process of the step, the command with unilab,
/// so the command's death by that signal is the interruption's doing); processes that outlived
/// it; no progress ever (when progress is required); a run shorter than the minimum; else it
/// passed. OOM kills are named with the reason, and processes that could not be killed after it.
pub(crate) fn verdict(end: RunEnd, parameters: &SoakParameters, require_progress: bool) -> Outcome {
    let note = unkillable_note(end.unkillable);
    let oom = end.oom;
    let mut outcome = judge(end, parameters, require_progress);
    outcome.reason = oom.explain(outcome.failure_kind, outcome.reason);
    if let Some(note) = note {
        outcome.reason = format!("{}; {note}", outcome.reason);
    }
    outcome
}

fn judge(end: RunEnd, parameters: &SoakParameters, require_progress: bool) -> Outcome {
    let RunEnd {
        failure,
        exit,
        leaked,
        unkillable,
        run_time,
        progress_seen,
        interrupted,
        oom: _,
    } = end;
    if let Some(Failure { kind, reason, .. }) = failure {
        return failed(kind, reason);
    }
    if let Some(reason) = describe_exit(exit) {
        if interrupted {
            return failed(
                FailureKind::Interrupted,
                format!("unilab was interrupted, and {reason}"),
            );
        }
        return failed(FailureKind::CommandFailed, reason);
    }
    if !leaked.is_empty() {
        let names: Vec<String> = leaked
            .iter()
            .map(|l| format!("{} ({})", l.identity.pid, l.name))
            .collect();
        return failed(
            FailureKind::LeakedProcesses,
            format!(
                "{} outlived the command by the {} s grace period and {} {}: {}",
                crate::text::count(leaked.len() as u64, "process"),
                secs(parameters.shutdown_grace_ms),
                if leaked.len() == 1 { "was" } else { "were" },
                // Killed, unless some survived SIGKILL: those are named after the reason.
                if unkillable.is_empty() {
                    "killed"
                } else {
                    "sent SIGKILL"
                },
                names.join(", ")
            ),
        );
    }
    if require_progress && !progress_seen {
        return failed(
            FailureKind::NoProgress,
            "the command exited 0 but its progress directory never changed (pass \
             `--allow-no-progress` if that is expected)"
                .into(),
        );
    }
    let min_duration = ms(parameters.min_duration_ms);
    if run_time < min_duration {
        return failed(
            FailureKind::TooShort,
            format!(
                "ran {}, less than the minimum of {}",
                duration(run_time.as_secs_f64()),
                duration(min_duration.as_secs_f64())
            ),
        );
    }
    Outcome {
        status: OutcomeStatus::Passed,
        failure_kind: None,
        reason: format!(
            "the command exited 0 after {}",
            duration(run_time.as_secs_f64())
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::ProcessIdentity;

    static NO_OOM: OomFound = OomFound {
        kills: Vec::new(),
        command: None,
        unnamed: 0,
        cgroup: None,
    };

    const PARAMETERS: SoakParameters = SoakParameters {
        sample_interval_ms: 1000,
        startup_timeout_ms: 10_000,
        stale_progress_ms: 5000,
        shutdown_grace_ms: 2000,
        min_duration_ms: 30_000,
    };

    const CLEAN: ExitInfo = ExitInfo {
        code: Some(0),
        signal: None,
    };

    fn long_enough() -> Duration {
        Duration::from_secs(30)
    }

    /// A run that ended with `exit` after `run_time`, progress seen.
    fn ended(
        failure: Option<Failure>,
        exit: ExitInfo,
        leaked: &[LeakedProcess],
        run_time: Duration,
    ) -> Outcome {
        let end = RunEnd {
            failure,
            exit,
            leaked,
            unkillable: &[],
            run_time,
            progress_seen: true,
            interrupted: false,
            oom: &NO_OOM,
        };
        verdict(end, &PARAMETERS, true)
    }

    #[test]
    fn a_command_killed_along_with_an_interrupted_unilab_is_an_interruption() {
        let killed = ExitInfo {
            code: None,
            signal: Some(15),
        };
        let end = |exit, interrupted| RunEnd {
            failure: None,
            exit,
            leaked: &[],
            unkillable: &[],
            run_time: long_enough(),
            progress_seen: true,
            interrupted,
            oom: &NO_OOM,
        };
        let outcome = verdict(end(killed, true), &PARAMETERS, true);
        assert_eq!(outcome.failure_kind, Some(FailureKind::Interrupted));
        assert!(outcome.reason.contains("signal 15"), "{}", outcome.reason);
        let outcome = verdict(end(killed, false), &PARAMETERS, true);
        assert_eq!(outcome.failure_kind, Some(FailureKind::CommandFailed));
        // A command that finished cleanly as unilab was interrupted passed.
        let outcome = verdict(end(CLEAN, true), &PARAMETERS, true);
        assert_eq!(outcome.status, OutcomeStatus::Passed);
    }

    #[test]
    fn a_clean_exit_after_the_minimum_passes() {
        let outcome = ended(None, CLEAN, &[], long_enough());
        assert_eq!(outcome.status, OutcomeStatus::Passed);
        assert_eq!(outcome.reason, "the command exited 0 after 30s");
    }

    #[test]
    fn a_run_just_under_the_minimum_is_too_short() {
        let run = long_enough() - Duration::from_millis(1);
        let outcome = ended(None, CLEAN, &[], run);
        assert_eq!(outcome.failure_kind, Some(FailureKind::TooShort));
        assert_eq!(outcome.reason, "ran 30s, less than the minimum of 30s");
    }

    #[test]
    fn a_failure_decided_during_the_run_wins_over_everything_after_it() {
        let failure = Failure::new(FailureKind::StaleProgress, "stale");
        let outcome = ended(Some(failure), CLEAN, &[], Duration::ZERO);
        assert_eq!(outcome.failure_kind, Some(FailureKind::StaleProgress));
        assert_eq!(outcome.reason, "stale");
    }

    #[test]
    fn the_commands_exit_is_judged_before_leaks_and_duration() {
        for (exit, reason) in [
            (
                ExitInfo {
                    code: Some(3),
                    signal: None,
                },
                "the command exited with code 3",
            ),
            (
                ExitInfo {
                    code: None,
                    signal: Some(9),
                },
                "the command was killed by signal 9 (SIGKILL)",
            ),
            (
                ExitInfo {
                    code: None,
                    signal: None,
                },
                "the command's exit status is unknown",
            ),
        ] {
            let outcome = ended(None, exit, &leak(), Duration::ZERO);
            assert_eq!(outcome.failure_kind, Some(FailureKind::CommandFailed));
            assert_eq!(outcome.reason, reason);
        }
    }

    fn leak() -> Vec<LeakedProcess> {
        vec![LeakedProcess {
            identity: ProcessIdentity {
                pid: 77,
                start_ticks: 1,
            },
            name: "sleep".into(),
            cmdline: vec!["sleep".into(), "600".into()],
        }]
    }

    #[test]
    fn processes_that_outlive_a_clean_exit_fail_the_soak_by_name() {
        let outcome = ended(None, CLEAN, &leak(), long_enough());
        assert_eq!(outcome.failure_kind, Some(FailureKind::LeakedProcesses));
        assert_eq!(
            outcome.reason,
            "1 process outlived the command by the 2 s grace period and was killed: 77 (sleep)"
        );
    }

    #[test]
    fn a_clean_exit_without_any_progress_fails_unless_allowed() {
        let end = |progress_seen| RunEnd {
            failure: None,
            exit: CLEAN,
            leaked: &[],
            unkillable: &[],
            run_time: long_enough(),
            progress_seen,
            interrupted: false,
            oom: &NO_OOM,
        };
        let outcome = verdict(end(false), &PARAMETERS, true);
        assert_eq!(outcome.failure_kind, Some(FailureKind::NoProgress));
        assert!(
            outcome.reason.contains("--allow-no-progress"),
            "{}",
            outcome.reason
        );
        assert_eq!(
            verdict(end(false), &PARAMETERS, false).status,
            OutcomeStatus::Passed
        );
        assert_eq!(
            verdict(end(true), &PARAMETERS, true).status,
            OutcomeStatus::Passed
        );
        // A failing exit is judged as such first.
        let mut failing = end(false);
        failing.exit.code = Some(1);
        assert_eq!(
            verdict(failing, &PARAMETERS, true).failure_kind,
            Some(FailureKind::CommandFailed)
        );
    }

    #[test]
    fn given_processes_no_signal_ended_when_the_soak_is_judged_then_the_reason_names_them() {
        let stuck = [
            Unkillable {
                pid: 77,
                name: "python3".into(),
                state: 'D',
                wchan: Some("nv_wait".into()),
            },
            Unkillable {
                pid: 78,
                name: "worker".into(),
                state: 'S',
                wchan: None,
            },
        ];
        let end = |failure, leaked| RunEnd {
            failure,
            exit: CLEAN,
            leaked,
            unkillable: &stuck,
            run_time: long_enough(),
            progress_seen: true,
            interrupted: false,
            oom: &NO_OOM,
        };
        let stale = Failure::new(FailureKind::StaleProgress, "no progress for 120 s");
        let outcome = verdict(end(Some(stale), &[]), &PARAMETERS, true);
        assert_eq!(outcome.failure_kind, Some(FailureKind::StaleProgress));
        assert_eq!(
            outcome.reason,
            "no progress for 120 s; 2 processes could not be killed: 77 (python3) in \
             uninterruptible sleep in `nv_wait`, 78 (worker, state S); the host may need a reset"
        );
        let leaked = [LeakedProcess {
            identity: ProcessIdentity {
                pid: 77,
                start_ticks: 1,
            },
            name: "python3".into(),
            cmdline: Vec::new(),
        }];
        let outcome = verdict(end(None, &leaked), &PARAMETERS, true);
        assert!(
            outcome
                .reason
                .starts_with("1 process outlived the command by the 2 s grace period and was sent SIGKILL: 77 (python3); 2 processes could not be killed"),
            "never claimed killed: {}",
            outcome.reason
        );
    }
}
