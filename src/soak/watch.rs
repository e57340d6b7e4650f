//! The soak's rules as a pure core: no processes, no clock, no I/O.
//!
//! [`Watch`] is fed one [`Observation`] per sample — how long the command has run, the progress
//! directory's signature, what its guard reported, whether unilab was interrupted — and says
//! whether the soak goes on, the command has exited, or the soak must fail and why. [`verdict`]
//! turns what the run ended with into the recorded [`Outcome`]. The supervisor (`supervise`) is
//! a thin I/O shell over these two.

use std::time::Duration;

use super::growth;
use super::oom::OomFound;
use super::trend::Trend;
use crate::event::soak::{
    ChildExit, ExitInfo, FailureKind, LeakedProcess, Limits, Measures, Outcome, OutcomeStatus,
    ProgressSignature, ResourceLimit, Sample, SoakParameters,
};
use crate::text::bytes;

/// What the command's guard has reported so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CommandState {
    Running,
    Exited,
    SpawnFailed(String),
}

/// What the supervisor saw at one sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observation {
    /// Time since the command was spawned.
    pub elapsed: Duration,
    pub progress: ProgressSignature,
    pub command: CommandState,
    pub interrupted: bool,
    /// A process of the tree (not the command) that exited non-zero or by a signal, seen since
    /// the last observation; it matters only under `--fail-fast`.
    pub failed_child: Option<ChildExit>,
    /// What the tree uses, for its budgets.
    pub resources: Resources,
}

/// What the tree uses at one sample, as its budgets judge it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Resources {
    /// The sum of its processes' proportional set sizes; `None` where none could be read.
    pub tree_pss_bytes: Option<u64>,
    /// Its compute processes' memory on each GPU (index and MiB; `None` where unknown).
    pub gpu_tree_mib: Vec<(u32, Option<u64>)>,
}

impl Resources {
    pub(crate) fn of(sample: &Sample, measures: &Measures) -> Self {
        Self {
            tree_pss_bytes: measures.tree_pss_bytes(),
            gpu_tree_mib: sample
                .gpus
                .iter()
                .flatten()
                .map(|gpu| (gpu.index, gpu.tree_memory_mib()))
                .collect(),
        }
    }
}

/// Why a soak fails, decided before the command's own exit could judge it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub kind: FailureKind,
    pub reason: String,
    /// The child whose failure this is (`child_failed`).
    pub child: Option<ChildExit>,
    /// The budget the tree went over (`resource_limit`).
    pub limit: Option<ResourceLimit>,
}

impl Failure {
    pub(crate) fn new(kind: FailureKind, reason: impl Into<String>) -> Self {
        Self {
            kind,
            reason: reason.into(),
            child: None,
            limit: None,
        }
    }

    /// The tree went over its `limit`, as `reason` says.
    fn over(limit: ResourceLimit, reason: String) -> Self {
        Self {
            kind: FailureKind::ResourceLimit,
            reason,
            child: None,
            limit: Some(limit),
        }
    }

    /// `--fail-fast`: `child`, a process of the tree, failed while the command ran.
    fn child(child: ChildExit) -> Self {
        let how = match (child.exit.code, child.exit.signal) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(signal)) => format!("was killed by {}", signal_name(signal)),
            (None, None) => "failed".to_owned(),
        };
        Self {
            kind: FailureKind::ChildFailed,
            reason: format!(
                "process {} ({}) of the tree {how} while the command ran (--fail-fast)",
                child.pid, child.name
            ),
            child: Some(child),
            limit: None,
        }
    }
}

/// `signal 9 (SIGKILL)`, or the number alone where this host has no name for it.
fn signal_name(signal: i32) -> String {
    format!(
        "signal {signal}{}",
        nix::sys::signal::Signal::try_from(signal)
            .map(|s| format!(" ({})", s.as_str()))
            .unwrap_or_default()
    )
}

/// What the supervisor does after an observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Sample again at the next due time.
    Continue,
    /// The command exited: stop sampling and judge it.
    Exited,
    /// The soak fails: stop the tree.
    Fail(Failure),
}

/// The liveness rules of one soak, and what it has seen of the progress directory.
#[derive(Debug, Clone)]
pub(crate) struct Watch {
    startup_timeout: Duration,
    stale_progress: Duration,
    fail_fast: bool,
    limits: Limits,
    /// The tree's PSS over the run, for `--max-memory-growth`.
    memory: Trend,
    progress_dir: String,
    last_signature: ProgressSignature,
    first_progress: Option<Duration>,
    last_change: Option<Duration>,
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

fn secs(millis: u64) -> f64 {
    millis as f64 / 1000.0
}

impl Watch {
    /// A watch over `progress_dir`, whose signature before the command started is `baseline`.
    pub(crate) fn new(
        parameters: &SoakParameters,
        progress_dir: &str,
        baseline: ProgressSignature,
    ) -> Self {
        Self {
            startup_timeout: ms(parameters.startup_timeout_ms),
            stale_progress: ms(parameters.stale_progress_ms),
            fail_fast: false,
            limits: Limits::default(),
            memory: Trend::default(),
            progress_dir: progress_dir.to_owned(),
            last_signature: baseline,
            first_progress: None,
            last_change: None,
        }
    }

    /// This watch, failing the soak as soon as a process of the tree fails (`--fail-fast`).
    pub(crate) fn failing_fast(mut self, fail_fast: bool) -> Self {
        self.fail_fast = fail_fast;
        self
    }

    /// This watch, failing the soak when the tree goes over one of `limits`.
    pub(crate) fn limited(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// When progress was first seen, after spawn.
    pub(crate) fn first_progress(&self) -> Option<Duration> {
        self.first_progress
    }

    /// When the progress directory last changed, after spawn.
    pub(crate) fn last_change(&self) -> Option<Duration> {
        self.last_change
    }

    /// Once progress was seen: how long, at `elapsed` after spawn, until no change fails the soak
    /// as stale.
    pub(crate) fn stale_in(&self, elapsed: Duration) -> Option<Duration> {
        let change = self.last_change?;
        Some(
            self.stale_progress
                .saturating_sub(elapsed.saturating_sub(change)),
        )
    }

    /// Takes in one observation. Any change of the signature is progress. Then, in this order:
    /// a command that could not be spawned fails the soak; one that exited ends the watch; an
    /// interruption fails it; under `--fail-fast`, a child that failed fails it; a budget the tree
    /// went over fails it; no progress by the startup timeout fails it; and once progress was
    /// seen, no change for the stale period fails it.
    pub(crate) fn observe(&mut self, observation: &Observation) -> Next {
        let elapsed = observation.elapsed;
        if observation.progress != self.last_signature {
            self.last_signature = observation.progress;
            self.first_progress.get_or_insert(elapsed);
            self.last_change = Some(elapsed);
        }
        match &observation.command {
            CommandState::SpawnFailed(reason) => {
                return Next::Fail(Failure::new(FailureKind::SpawnFailed, reason.clone()));
            }
            CommandState::Exited => return Next::Exited,
            CommandState::Running => {}
        }
        if observation.interrupted {
            return Next::Fail(Failure::new(
                FailureKind::Interrupted,
                "unilab was interrupted; the command was stopped",
            ));
        }
        if self.fail_fast
            && let Some(child) = &observation.failed_child
        {
            return Next::Fail(Failure::child(child.clone()));
        }
        if let Some(failure) = self.over_budget(elapsed, &observation.resources) {
            return Next::Fail(failure);
        }
        if self.first_progress.is_none() && elapsed >= self.startup_timeout {
            return Next::Fail(Failure::new(
                FailureKind::StartupTimeout,
                format!(
                    "no progress in `{}` within the startup timeout of {} s",
                    self.progress_dir,
                    self.startup_timeout.as_secs_f64()
                ),
            ));
        }
        if let Some(change) = self.last_change
            && elapsed.saturating_sub(change) >= self.stale_progress
        {
            return Next::Fail(Failure::new(
                FailureKind::StaleProgress,
                format!(
                    "no progress for {:.1} s (stale after {} s)",
                    (elapsed - change).as_secs_f64(),
                    self.stale_progress.as_secs_f64()
                ),
            ));
        }
        Next::Continue
    }
}

impl Watch {
    /// The budget the tree is over at `elapsed`, if any: its PSS, its memory on one GPU, or the
    /// trend of its PSS after the warm-up. The trend is fed here, so every observation counts.
    fn over_budget(&mut self, elapsed: Duration, resources: &Resources) -> Option<Failure> {
        let elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        if let Some(pss) = resources.tree_pss_bytes {
            self.memory.add(elapsed_ms, pss as f64);
            if let Some(max) = self.limits.max_memory_bytes
                && pss > max
            {
                return Some(Failure::over(
                    ResourceLimit::Memory,
                    format!(
                        "the tree's memory (PSS) reached {}, over the --max-memory limit of {}",
                        bytes(pss),
                        bytes(max)
                    ),
                ));
            }
        }
        if let Some(max) = self.limits.max_gpu_memory_bytes
            && let Some((index, used)) = resources
                .gpu_tree_mib
                .iter()
                .find_map(|(index, mib)| Some((*index, (*mib)? << 20)))
                .filter(|(_, used)| *used > max)
        {
            return Some(Failure::over(
                ResourceLimit::GpuMemory,
                format!(
                    "the tree's memory on GPU {index} reached {}, over the --max-gpu-memory limit of {}",
                    bytes(used),
                    bytes(max)
                ),
            ));
        }
        let max = self.limits.max_memory_growth_bytes_per_hour?;
        growth::too_fast(&self.memory, max, self.limits.warmup_ms, elapsed_ms)
            .map(|reason| Failure::over(ResourceLimit::MemoryGrowth, reason))
    }
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
                "ran {:.1} s, less than the minimum of {} s",
                run_time.as_secs_f64(),
                min_duration.as_secs_f64()
            ),
        );
    }
    Outcome {
        status: OutcomeStatus::Passed,
        failure_kind: None,
        reason: format!("the command exited 0 after {:.1} s", run_time.as_secs_f64()),
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

    fn signature(files: u64) -> ProgressSignature {
        ProgressSignature {
            files,
            bytes: files * 10,
            newest_mtime_ns: Some(files as i64),
        }
    }

    fn at(seconds: u64, files: u64) -> Observation {
        Observation {
            elapsed: Duration::from_secs(seconds),
            progress: signature(files),
            command: CommandState::Running,
            interrupted: false,
            failed_child: None,
            resources: Resources::default(),
        }
    }

    /// Feeds `observations` to a fresh watch whose baseline has no files; returns every answer.
    fn given(observations: &[Observation]) -> (Watch, Vec<Next>) {
        let mut watch = Watch::new(&PARAMETERS, "/progress", signature(0));
        let answers = observations.iter().map(|o| watch.observe(o)).collect();
        (watch, answers)
    }

    fn kind(next: &Next) -> Option<FailureKind> {
        match next {
            Next::Fail(failure) => Some(failure.kind),
            _ => None,
        }
    }

    #[test]
    fn no_progress_before_the_startup_timeout_goes_on_and_at_it_fails() {
        let (_, answers) = given(&[at(0, 0), at(9, 0), at(10, 0)]);
        assert_eq!(answers[0], Next::Continue);
        assert_eq!(answers[1], Next::Continue);
        assert_eq!(kind(&answers[2]), Some(FailureKind::StartupTimeout));
        let Next::Fail(failure) = &answers[2] else {
            unreachable!()
        };
        assert_eq!(
            failure.reason,
            "no progress in `/progress` within the startup timeout of 10 s"
        );
    }

    #[test]
    fn progress_first_seen_at_the_startup_deadline_counts() {
        let (watch, answers) = given(&[at(0, 0), at(10, 1)]);
        assert_eq!(answers[1], Next::Continue);
        assert_eq!(watch.first_progress(), Some(Duration::from_secs(10)));
    }

    #[test]
    fn what_the_directory_held_before_the_command_is_not_progress() {
        let mut watch = Watch::new(&PARAMETERS, "/progress", signature(3));
        assert_eq!(watch.observe(&at(1, 3)), Next::Continue);
        assert_eq!(watch.first_progress(), None);
        assert_eq!(watch.observe(&at(2, 4)), Next::Continue);
        assert_eq!(watch.first_progress(), Some(Duration::from_secs(2)));
    }

    #[test]
    fn progress_that_stops_fails_exactly_at_the_stale_period() {
        let (watch, answers) = given(&[at(1, 1), at(2, 2), at(6, 2), at(7, 2)]);
        assert_eq!(
            answers[..3],
            [Next::Continue, Next::Continue, Next::Continue]
        );
        assert_eq!(kind(&answers[3]), Some(FailureKind::StaleProgress));
        assert_eq!(watch.first_progress(), Some(Duration::from_secs(1)));
        assert_eq!(watch.last_change(), Some(Duration::from_secs(2)));
        let Next::Fail(failure) = &answers[3] else {
            unreachable!()
        };
        assert_eq!(failure.reason, "no progress for 5.0 s (stale after 5 s)");
    }

    #[test]
    fn the_time_left_before_stale_counts_down_from_each_change() {
        let mut watch = Watch::new(&PARAMETERS, "/progress", signature(0));
        watch.observe(&at(1, 0));
        assert_eq!(
            watch.stale_in(Duration::from_secs(1)),
            None,
            "no progress yet"
        );
        watch.observe(&at(2, 1));
        assert_eq!(
            watch.stale_in(Duration::from_secs(4)),
            Some(Duration::from_secs(3))
        );
        assert_eq!(watch.stale_in(Duration::from_secs(9)), Some(Duration::ZERO));
    }

    #[test]
    fn any_change_of_the_signature_is_progress_even_a_shrinking_one() {
        let (watch, answers) = given(&[at(1, 5), at(5, 2), at(9, 2)]);
        assert!(answers.iter().all(|a| *a == Next::Continue), "{answers:?}");
        assert_eq!(watch.last_change(), Some(Duration::from_secs(5)));
    }

    #[test]
    fn once_progress_was_seen_the_startup_timeout_no_longer_applies() {
        let (_, answers) = given(&[at(1, 1), at(3, 2), at(5, 3), at(8, 4), at(12, 5)]);
        assert!(answers.iter().all(|a| *a == Next::Continue), "{answers:?}");
    }

    #[test]
    fn an_exited_command_ends_the_watch_even_when_progress_is_stale() {
        let mut exited = at(30, 1);
        exited.command = CommandState::Exited;
        let (_, answers) = given(&[at(1, 1), exited]);
        assert_eq!(answers[1], Next::Exited);
    }

    #[test]
    fn a_failed_child_fails_the_soak_only_under_fail_fast_and_only_while_the_command_runs() {
        let worker = ChildExit {
            pid: 77,
            name: "worker".into(),
            exit: ExitInfo {
                code: Some(3),
                signal: None,
            },
        };
        let mut failed = at(2, 1);
        failed.failed_child = Some(worker.clone());
        let (_, answers) = given(&[at(1, 1), failed.clone()]);
        assert_eq!(answers[1], Next::Continue, "off by default");

        let mut watch = Watch::new(&PARAMETERS, "/progress", signature(0)).failing_fast(true);
        let Next::Fail(failure) = watch.observe(&failed) else {
            panic!("a failed child fails the soak under --fail-fast");
        };
        assert_eq!(failure.kind, FailureKind::ChildFailed);
        assert_eq!(failure.child.as_ref(), Some(&worker));
        assert_eq!(
            failure.reason,
            "process 77 (worker) of the tree exited with code 3 while the command ran (--fail-fast)"
        );
        let mut killed = failed.clone();
        killed.failed_child = Some(ChildExit {
            exit: ExitInfo {
                code: None,
                signal: Some(9),
            },
            ..worker
        });
        let Next::Fail(failure) = watch.observe(&killed) else {
            panic!("a killed child fails the soak under --fail-fast");
        };
        assert!(
            failure.reason.contains("was killed by signal 9 (SIGKILL)"),
            "{}",
            failure.reason
        );
        let mut exited = failed;
        exited.command = CommandState::Exited;
        assert_eq!(
            watch.observe(&exited),
            Next::Exited,
            "the command's own exit is judged"
        );
    }

    #[test]
    fn a_spawn_failure_fails_with_the_guards_reason() {
        let mut observation = at(0, 0);
        observation.command = CommandState::SpawnFailed("cannot run `x`".into());
        let (_, answers) = given(&[observation]);
        assert_eq!(
            answers[0],
            Next::Fail(Failure::new(FailureKind::SpawnFailed, "cannot run `x`"))
        );
    }

    #[test]
    fn an_interruption_wins_over_a_timeout_seen_at_the_same_time() {
        let mut observation = at(60, 0);
        observation.interrupted = true;
        let (_, answers) = given(&[observation]);
        assert_eq!(kind(&answers[0]), Some(FailureKind::Interrupted));
    }

    #[test]
    fn an_exit_seen_with_an_interruption_is_judged_as_an_exit() {
        let mut observation = at(60, 1);
        observation.interrupted = true;
        observation.command = CommandState::Exited;
        let (_, answers) = given(&[observation]);
        assert_eq!(answers[0], Next::Exited);
    }

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
        assert_eq!(outcome.reason, "the command exited 0 after 30.0 s");
    }

    #[test]
    fn a_run_just_under_the_minimum_is_too_short() {
        let run = long_enough() - Duration::from_millis(1);
        let outcome = ended(None, CLEAN, &[], run);
        assert_eq!(outcome.failure_kind, Some(FailureKind::TooShort));
        assert_eq!(outcome.reason, "ran 30.0 s, less than the minimum of 30 s");
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
