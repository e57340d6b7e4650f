//! A soak's life as one explicit phase at a time, each transition one function:
//!
//! ```text
//! Starting ─started─▶ Running ─decided─▶ Stopping { trigger } ─stopped─▶ Reaping ─reaped─▶ Judged
//!     └─started: not run (interrupted before, or no guard)──────────────────▲
//! ```
//!
//! - `Starting`: the start is recorded and the progress directory held. An interruption that
//!   came before the command started means it is not started at all.
//! - `Running`: the guard runs the command; samples are taken on schedule and fed to the pure
//!   [`Watch`], whose answer ends the phase. The samples taken are committed before it ends.
//! - `Stopping { trigger }`: the soak is decided. The tree is stopped; before the first signal
//!   (for a failure, or processes that outlived the command) its evidence is captured and
//!   committed. Whether unilab had been interrupted is read as sampling ended: an interruption
//!   later only hurries the teardown.
//! - `Reaping`: nothing of the tree runs. The guard is reaped, the output tails read, and the
//!   witnesses (the kernel's log, the GPUs) asked what they saw.
//! - `Judged`: the verdict ([`verdict`]) and everything it was made of, for the record. The
//!   verdict is recorded, then the artifact and the report written, by the supervisor.
//!
//! What a phase does to the world goes through [`Effects`]: the supervisor's spawns, samples,
//! signals and reaps; a test's are scripted, so the order of the phases and the verdict they
//! lead to are tested without a process.

use crate::event::soak::{
    ChildExit, ExitInfo, FailureKind, GpuRelease, Outcome, ResourceLimit, SoakParameters,
};
use crate::soak::guard::GuardStatus;
use crate::soak::oom::OomFound;
use crate::soak::teardown::Stopped;
use crate::soak::watch::{Failure, RunEnd, Watch, verdict};

/// Where a soak is: `G` is the guard running the command, `P` the held progress directory.
#[derive(Debug)]
pub(super) enum Phase<G, P> {
    /// The start is recorded; nothing runs yet.
    Starting { progress: P },
    /// The guard runs the command, sampled until the watch ends this.
    Running { guard: G, progress: P },
    /// The soak is decided and its samples committed; the tree is being stopped.
    Stopping { guard: G, trigger: Trigger },
    /// Nothing of the tree runs; the guard, if one was spawned, is to be reaped.
    Reaping {
        guard: Option<G>,
        trigger: Trigger,
        stopped: Stopped,
    },
    /// The verdict, and what it was made of.
    Judged(Box<Judgement>),
}

/// What ended the sampling, read as it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Trigger {
    /// The failure that decided the soak; `None` when the command exited on its own.
    pub failure: Option<Failure>,
    /// Whether unilab had been interrupted (SIGINT, SIGTERM) by then.
    pub interrupted: bool,
    /// When the supervisor began to stop the tree, monotonic nanoseconds: the command's run
    /// ends here at the latest.
    pub at_ns: u64,
}

impl Trigger {
    /// What the teardown is told: the kind of failure, or nothing after a clean exit.
    pub(super) fn kind(&self) -> Option<FailureKind> {
        self.failure.as_ref().map(|f| f.kind)
    }
}

/// What the guard left when it was done.
#[derive(Debug, Default)]
pub(super) struct Ended {
    pub status: GuardStatus,
    pub stdout_tail: Vec<u8>,
    pub stderr_tail: Vec<u8>,
}

/// What the witnesses saw once the tree was gone.
#[derive(Debug, Default)]
pub(super) struct Witnessed {
    pub oom: OomFound,
    pub gpu_release: Option<GpuRelease>,
}

/// A judged soak: its outcome and what the finish event records beside it.
#[derive(Debug)]
pub(super) struct Judgement {
    pub outcome: Outcome,
    /// How the command exited; `None` if it never started.
    pub exit: Option<ExitInfo>,
    /// The child whose failure failed the soak (`--fail-fast`).
    pub child: Option<ChildExit>,
    /// The budget the tree went over.
    pub limit: Option<ResourceLimit>,
    pub stopped: Stopped,
    pub ended: Ended,
    pub times: RunTimes,
    pub witnessed: Witnessed,
}

/// What each phase does to the world.
pub(super) trait Effects {
    type Guard;
    type Progress;
    /// Whether unilab has been interrupted (SIGINT, SIGTERM) by now.
    fn interrupted(&self) -> bool;
    /// The host's monotonic clock, in nanoseconds (the guard's clock).
    fn now_ns(&self) -> u64;
    /// Spawns the guard that runs the command.
    fn spawn(&mut self) -> Result<Self::Guard, Failure>;
    /// Samples on schedule, feeding each sample to `watch`, until it says the command exited or
    /// the soak fails; commits the samples taken, and says the failure, if any.
    fn sample(
        &mut self,
        guard: &Self::Guard,
        progress: Self::Progress,
        watch: &mut Watch,
    ) -> Option<Failure>;
    /// Stops the tree: `trigger` is the failure that decided the soak, `None` after a clean
    /// exit (then what outlives the command has leaked).
    fn stop(&mut self, guard: &Self::Guard, trigger: Option<FailureKind>) -> Stopped;
    /// Reaps the guard: the command's final status and the tails of its output.
    fn reap(&mut self, guard: Self::Guard) -> Ended;
    /// What the witnesses saw, once the tree is gone; `status` is the guard's last.
    fn witnessed(&mut self, status: &GuardStatus) -> Witnessed;
}

/// What a verdict is judged by, beside what the run ended with.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rules<'a> {
    pub parameters: &'a SoakParameters,
    /// A clean exit passes only if progress was seen.
    pub require_progress: bool,
}

/// Takes a soak from its start to its verdict, one phase after another.
pub(super) fn drive<E: Effects>(
    effects: &mut E,
    progress: E::Progress,
    watch: &mut Watch,
    rules: Rules,
) -> Judgement {
    let mut phase = Phase::Starting { progress };
    loop {
        phase = match phase {
            Phase::Starting { progress } => Phase::started(effects, progress),
            Phase::Running { guard, progress } => {
                let failure = effects.sample(&guard, progress, watch);
                Phase::decided(effects, guard, failure)
            }
            Phase::Stopping { guard, trigger } => {
                let stopped = effects.stop(&guard, trigger.kind());
                Phase::stopped(guard, trigger, stopped)
            }
            Phase::Reaping {
                guard,
                trigger,
                stopped,
            } => Phase::reaped(effects, (guard, trigger, stopped), watch, rules),
            Phase::Judged(judged) => return *judged,
        };
    }
}

impl<G, P> Phase<G, P> {
    /// `Starting` → `Running`, once the guard is spawned; → `Reaping` with nothing to reap when
    /// unilab was interrupted before (during the runtime snapshot) or the guard could not start.
    fn started<E: Effects<Guard = G, Progress = P>>(effects: &mut E, progress: P) -> Self {
        let interrupted = effects.interrupted();
        let spawned = if interrupted {
            Err(Failure::new(
                FailureKind::Interrupted,
                "unilab was interrupted before the command started; it was not run",
            ))
        } else {
            effects.spawn()
        };
        match spawned {
            Ok(guard) => Phase::Running { guard, progress },
            Err(failure) => Phase::Reaping {
                guard: None,
                trigger: Trigger {
                    failure: Some(failure),
                    interrupted,
                    at_ns: effects.now_ns(),
                },
                stopped: Stopped::default(),
            },
        }
    }

    /// `Running` → `Stopping`: the watch (or the supervisor) decided the soak with `failure`, or
    /// the command exited. Whether unilab was interrupted is read now, as sampling ends.
    fn decided<E: Effects>(effects: &mut E, guard: G, failure: Option<Failure>) -> Self {
        let interrupted = effects.interrupted();
        Phase::Stopping {
            guard,
            trigger: Trigger {
                failure,
                interrupted,
                at_ns: effects.now_ns(),
            },
        }
    }

    /// `Stopping` → `Reaping`: what the teardown left.
    fn stopped(guard: G, trigger: Trigger, stopped: Stopped) -> Self {
        Phase::Reaping {
            guard: Some(guard),
            trigger,
            stopped,
        }
    }

    /// `Reaping` → `Judged`: the guard reaped, the witnesses heard, the verdict given.
    fn reaped<E: Effects<Guard = G>>(
        effects: &mut E,
        (guard, trigger, stopped): (Option<G>, Trigger, Stopped),
        watch: &Watch,
        rules: Rules,
    ) -> Self {
        let ended = guard.map(|guard| effects.reap(guard)).unwrap_or_default();
        let times = RunTimes::of(&ended.status, trigger.at_ns, effects.now_ns());
        let witnessed = effects.witnessed(&ended.status);
        let status = &ended.status;
        let exit = ExitInfo {
            code: status.exit_code,
            signal: status.exit_signal,
        };
        let failure = trigger.failure;
        let child = failure.as_ref().and_then(|f| f.child.clone());
        let limit = failure.as_ref().and_then(|f| f.limit);
        let outcome = verdict(
            RunEnd {
                failure,
                exit,
                leaked: &stopped.leaked,
                unkillable: &stopped.unkillable,
                run_time: times.run,
                progress_seen: watch.first_progress().is_some(),
                interrupted: trigger.interrupted,
                oom: &witnessed.oom,
            },
            rules.parameters,
            rules.require_progress,
        );
        Phase::Judged(Box::new(Judgement {
            outcome,
            exit: status.started.map(|_| exit),
            child,
            limit,
            stopped,
            ended,
            times,
            witnessed,
        }))
    }
}

/// How long the command itself ran, and the teardown after it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct RunTimes {
    pub run: std::time::Duration,
    pub teardown: std::time::Duration,
}

impl RunTimes {
    /// The run is the command's spawn to its exit as the guard saw them, or to `stopping` — when
    /// the supervisor began to stop the tree — if that came first (the soak was failed). The
    /// teardown is from there to `done`. Monotonic nanoseconds throughout.
    fn of(status: &GuardStatus, stopping: u64, done: u64) -> Self {
        let Some(spawned) = status.started_ns else {
            return Self::default();
        };
        let run_end = status.exited_ns.unwrap_or(stopping).min(stopping);
        Self {
            run: std::time::Duration::from_nanos(run_end.saturating_sub(spawned)),
            teardown: std::time::Duration::from_nanos(done.saturating_sub(run_end)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::event::soak::{OutcomeStatus, ProgressSignature};
    use crate::soak::watch::{CommandState, Next, Observation, Resources};

    const PARAMETERS: SoakParameters = SoakParameters {
        sample_interval_ms: 1000,
        startup_timeout_ms: 10_000,
        stale_progress_ms: 5000,
        shutdown_grace_ms: 2000,
        min_duration_ms: 0,
    };

    const SECOND: u64 = 1_000_000_000;

    /// A soak's world, scripted: what the samples see, how the guard ends, and when an
    /// interruption comes. Every effect asked for is kept, in order.
    #[derive(Default)]
    struct Script {
        did: Vec<String>,
        /// Unilab is interrupted from the start.
        interrupted: bool,
        /// An interruption comes during the sampling, or during the teardown.
        interrupted_while: Option<&'static str>,
        spawn_fails: bool,
        /// The progress files each sample sees, a second apart, and whether the command has
        /// exited by then.
        samples: Vec<(u64, bool)>,
        /// The guard's final status.
        status: GuardStatus,
        now_ns: u64,
    }

    impl Effects for Script {
        type Guard = ();
        type Progress = ();

        fn interrupted(&self) -> bool {
            self.interrupted
        }

        fn now_ns(&self) -> u64 {
            self.now_ns
        }

        fn spawn(&mut self) -> Result<(), Failure> {
            self.did.push("spawn".into());
            if self.spawn_fails {
                return Err(Failure::new(FailureKind::SpawnFailed, "cannot start"));
            }
            Ok(())
        }

        fn sample(&mut self, (): &(), (): (), watch: &mut Watch) -> Option<Failure> {
            self.did.push("sample".into());
            self.interrupted |= self.interrupted_while == Some("sampling");
            for (n, &(files, exited)) in self.samples.iter().enumerate() {
                self.now_ns = n as u64 * SECOND;
                let next = watch.observe(&Observation {
                    elapsed: Duration::from_secs(n as u64),
                    now_us: n as i64 * 1_000_000,
                    progress: ProgressSignature {
                        files,
                        bytes: files,
                        newest_mtime_ns: None,
                    },
                    command: if exited {
                        CommandState::Exited
                    } else {
                        CommandState::Running
                    },
                    interrupted: false,
                    failed_child: None,
                    resources: Resources::default(),
                    beat_at_us: None,
                    step: None,
                });
                match next {
                    Next::Continue => {}
                    Next::Exited => return None,
                    Next::Fail(failure) => return Some(failure),
                }
            }
            None
        }

        fn stop(&mut self, (): &(), trigger: Option<FailureKind>) -> Stopped {
            self.did.push(format!(
                "stop {}",
                trigger.map_or("after the exit", FailureKind::as_str)
            ));
            self.interrupted |= self.interrupted_while == Some("teardown");
            self.now_ns += SECOND;
            Stopped::default()
        }

        fn reap(&mut self, (): ()) -> Ended {
            self.did.push("reap".into());
            Ended {
                status: self.status.clone(),
                ..Ended::default()
            }
        }

        fn witnessed(&mut self, _: &GuardStatus) -> Witnessed {
            self.did.push("witnessed".into());
            Witnessed::default()
        }
    }

    /// A guard that started the command at 0 and saw it end at `exited_s` with `code` or
    /// `signal`.
    fn guard_saw(exited_s: Option<u64>, code: Option<i32>, signal: Option<i32>) -> GuardStatus {
        GuardStatus {
            started: Some(crate::process::ProcessIdentity {
                pid: 7,
                start_ticks: 1,
            }),
            started_ns: Some(0),
            exit_code: code,
            exit_signal: signal,
            exited_ns: exited_s.map(|s| s * SECOND),
            ..GuardStatus::default()
        }
    }

    fn run(script: &mut Script) -> Judgement {
        let mut watch = Watch::new(&PARAMETERS, "/progress", ProgressSignature::default());
        let rules = Rules {
            parameters: &PARAMETERS,
            require_progress: true,
        };
        drive(script, (), &mut watch, rules)
    }

    #[test]
    fn a_soak_is_sampled_then_stopped_then_reaped_then_judged() {
        let mut script = Script {
            samples: vec![(0, false), (1, false), (2, false), (2, true)],
            status: guard_saw(Some(3), Some(0), None),
            ..Script::default()
        };
        let judged = run(&mut script);
        assert_eq!(
            script.did,
            [
                "spawn",
                "sample",
                "stop after the exit",
                "reap",
                "witnessed"
            ]
        );
        assert_eq!(judged.outcome.status, OutcomeStatus::Passed);
        assert_eq!(judged.exit.and_then(|e| e.code), Some(0));
        assert_eq!(
            judged.times,
            RunTimes {
                run: Duration::from_secs(3),
                teardown: Duration::from_secs(1),
            }
        );
    }

    #[test]
    fn the_failure_the_watch_decides_is_what_the_tree_is_stopped_for_and_the_verdict() {
        // Progress at 1 s, then none: stale at 6 s. The guard saw the command killed later, by
        // the teardown's signal.
        let mut script = Script {
            samples: vec![
                (0, false),
                (1, false),
                (1, false),
                (1, false),
                (1, false),
                (1, false),
                (1, false),
            ],
            status: guard_saw(Some(7), None, Some(15)),
            ..Script::default()
        };
        let judged = run(&mut script);
        assert_eq!(
            script.did,
            [
                "spawn",
                "sample",
                "stop stale_progress",
                "reap",
                "witnessed"
            ]
        );
        assert_eq!(
            judged.outcome.failure_kind,
            Some(FailureKind::StaleProgress)
        );
        assert_eq!(
            judged.times.run,
            Duration::from_secs(6),
            "the run ends where the supervisor began to stop it"
        );
    }

    #[test]
    fn a_soak_interrupted_before_its_command_started_is_judged_with_nothing_spawned_stopped_or_reaped()
     {
        let mut script = Script {
            interrupted: true,
            ..Script::default()
        };
        let judged = run(&mut script);
        assert_eq!(script.did, ["witnessed"]);
        assert_eq!(judged.outcome.failure_kind, Some(FailureKind::Interrupted));
        assert_eq!(
            judged.outcome.reason,
            "unilab was interrupted before the command started; it was not run"
        );
        assert_eq!(judged.exit, None);
        assert_eq!(judged.times, RunTimes::default());
    }

    #[test]
    fn a_guard_that_cannot_start_fails_the_soak_with_nothing_to_stop_or_reap() {
        let mut script = Script {
            spawn_fails: true,
            ..Script::default()
        };
        let judged = run(&mut script);
        assert_eq!(script.did, ["spawn", "witnessed"]);
        assert_eq!(judged.outcome.failure_kind, Some(FailureKind::SpawnFailed));
        assert_eq!(judged.outcome.reason, "cannot start");
    }

    #[test]
    fn an_interruption_counts_when_it_came_before_sampling_ended_not_during_the_teardown() {
        // The command exits by SIGTERM after progress: the interruption's doing only if unilab
        // had been interrupted by the time sampling ended.
        let judged = |when| {
            let mut script = Script {
                interrupted_while: Some(when),
                samples: vec![(0, false), (1, false), (1, true)],
                status: guard_saw(Some(2), None, Some(15)),
                ..Script::default()
            };
            run(&mut script).outcome.failure_kind
        };
        assert_eq!(judged("sampling"), Some(FailureKind::Interrupted));
        assert_eq!(judged("teardown"), Some(FailureKind::CommandFailed));
    }

    #[test]
    fn a_command_that_never_reported_its_start_has_no_run_time() {
        assert_eq!(
            RunTimes::of(&GuardStatus::default(), 5 * SECOND, 9 * SECOND),
            RunTimes::default()
        );
    }
}
