//! The soak's rules as a pure core: no processes, no clock, no I/O.
//!
//! [`Watch`] is fed one [`Observation`] per sample — how long the command has run, the progress
//! directory's signature and the beats that were progress, what its guard reported, whether
//! unilab was interrupted — and says whether the soak goes on, the command has exited, or the
//! soak must fail and why; what made progress, and when, is [`progress`]'s to decide, and the
//! watch keeps what it decided at each sample for the sample's record. [`verdict()`] turns
//! what the run ended with into the recorded outcome. The supervisor (`supervise`) is a thin
//! I/O shell over these: its phases are driven by the watch's answers.

pub(crate) mod progress;
mod verdict;

use std::time::Duration;

use super::growth;
use super::trend::Trend;
use crate::event::soak::{
    ChildExit, FailureKind, Limits, Measures, ProgressNoted, ProgressSignature, ResourceLimit,
    Sample, SoakParameters,
};
use crate::soak::heartbeat::limits::StepJudgement;
use crate::text::{bytes, duration};
use progress::{ProgressWatch, Sighting};
pub(crate) use verdict::{RunEnd, Unkillable, verdict};

/// What the command's guard has reported so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CommandState {
    Running,
    Exited,
    SpawnFailed(String),
}

/// What the supervisor saw at one sample.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Observation {
    /// Time since the command was spawned.
    pub elapsed: Duration,
    /// When the sample was taken, Unix microseconds.
    pub now_us: i64,
    pub progress: ProgressSignature,
    pub command: CommandState,
    pub interrupted: bool,
    /// A process of the tree (not the command) that exited non-zero or by a signal, seen since
    /// the last observation; it matters only under `--fail-fast`.
    pub failed_child: Option<ChildExit>,
    /// What the tree uses, for its budgets.
    pub resources: Resources,
    /// When the last beat that was progress (its `(step, phase)` not the beat's before it)
    /// arrived since the last observation, Unix microseconds; `None` when none did.
    pub beat_at_us: Option<i64>,
    /// The step running now against its phase's limit, when its phase has one: it judges the
    /// soak's staleness in place of `--stale-progress`.
    pub step: Option<StepJudgement>,
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
    progress: ProgressWatch,
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
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
            progress: ProgressWatch::new(baseline),
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

    /// When progress first happened, after spawn.
    pub(crate) fn first_progress(&self) -> Option<Duration> {
        self.progress.first()
    }

    /// When progress last happened, after spawn.
    pub(crate) fn last_change(&self) -> Option<Duration> {
        self.progress.last()
    }

    /// What the last observation's sample records of its progress.
    pub(crate) fn progress_noted(&self) -> ProgressNoted {
        self.progress.noted()
    }

    /// Once progress was seen: how long, at `elapsed` after spawn, until no change fails the soak
    /// as stale.
    pub(crate) fn stale_in(&self, elapsed: Duration) -> Option<Duration> {
        let change = self.last_change()?;
        Some(
            self.stale_progress
                .saturating_sub(elapsed.saturating_sub(change)),
        )
    }

    /// Takes in one observation: first its progress, as [`progress`] decides it. Then, in this
    /// order:
    /// a command that could not be spawned fails the soak; one that exited ends the watch; an
    /// interruption fails it; under `--fail-fast`, a child that failed fails it; a budget the tree
    /// went over fails it; no progress by the startup timeout fails it; and once progress was
    /// seen, no progress for the stale period since it last happened fails it — unless the
    /// heartbeats say a step of a phase with a limit runs: then that step over its limit fails
    /// it, and nothing else.
    pub(crate) fn observe(&mut self, observation: &Observation) -> Next {
        let elapsed = observation.elapsed;
        self.progress.see(&Sighting {
            elapsed,
            now_us: observation.now_us,
            signature: observation.progress,
            beat_at_us: observation.beat_at_us,
        });
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
        if self.first_progress().is_none() && elapsed >= self.startup_timeout {
            return Next::Fail(Failure::new(
                FailureKind::StartupTimeout,
                format!(
                    "no progress in `{}` within the startup timeout of {}",
                    self.progress_dir,
                    duration(self.startup_timeout.as_secs_f64())
                ),
            ));
        }
        if let Some(step) = &observation.step {
            if step.is_over() {
                return Next::Fail(Failure::new(FailureKind::StaleProgress, step.reason()));
            }
            return Next::Continue;
        }
        if let Some(change) = self.last_change()
            && elapsed.saturating_sub(change) >= self.stale_progress
        {
            return Next::Fail(Failure::new(
                FailureKind::StaleProgress,
                format!(
                    "no progress for {} (stale after {})",
                    duration((elapsed - change).as_secs_f64()),
                    duration(self.stale_progress.as_secs_f64())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::soak::ExitInfo;

    const PARAMETERS: SoakParameters = SoakParameters {
        sample_interval_ms: 1000,
        startup_timeout_ms: 10_000,
        stale_progress_ms: 5000,
        shutdown_grace_ms: 2000,
        min_duration_ms: 30_000,
    };

    /// The spawn of the soaks below, Unix microseconds.
    const SPAWN_US: i64 = 1_767_225_600_000_000;

    /// A directory of `files` files whose newest is stamped far ahead: its progress is held to
    /// the time it was seen.
    fn signature(files: u64) -> ProgressSignature {
        ProgressSignature {
            files,
            bytes: files * 10,
            newest_mtime_ns: Some(i64::MAX),
        }
    }

    fn at(seconds: u64, files: u64) -> Observation {
        Observation {
            elapsed: Duration::from_secs(seconds),
            now_us: SPAWN_US + seconds as i64 * 1_000_000,
            progress: signature(files),
            command: CommandState::Running,
            interrupted: false,
            failed_child: None,
            resources: Resources::default(),
            beat_at_us: None,
            step: None,
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
            "no progress in `/progress` within the startup timeout of 10s"
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
        assert_eq!(failure.reason, "no progress for 5s (stale after 5s)");
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

    /// The stale period ran from the sample that saw a change, not from the change: a file
    /// written just after one sample and seen at the next gave the trainer up to a sample
    /// interval more than `--stale-progress`, and `last_progress_ms` said the sample's time.
    #[test]
    fn the_stale_period_runs_from_the_newest_files_time_not_from_the_sample_that_saw_it() {
        let written = |seconds, files, mtime_ms: i64| Observation {
            progress: ProgressSignature {
                newest_mtime_ns: Some((SPAWN_US + mtime_ms * 1000) * 1000),
                ..signature(files)
            },
            ..at(seconds, files)
        };
        // Written at 0.5 s, seen at 2 s; nothing after. Stale after 5 s: at 5.5 s.
        let (watch, answers) = given(&[written(2, 1, 500), written(5, 1, 500), written(6, 1, 500)]);
        assert_eq!(answers[..2], [Next::Continue, Next::Continue]);
        assert_eq!(watch.last_change(), Some(Duration::from_millis(500)));
        let Next::Fail(failure) = &answers[2] else {
            panic!("{answers:?}")
        };
        assert_eq!(failure.reason, "no progress for 5.5s (stale after 5s)");
        assert_eq!(
            watch.progress_noted().last_progress_at_us,
            Some(SPAWN_US + 500_000)
        );
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

    #[test]
    fn a_heartbeat_is_progress_though_the_directory_does_not_change() {
        let beat = |seconds, beaten: bool| {
            let observation = at(seconds, 0);
            Observation {
                beat_at_us: beaten.then_some(observation.now_us),
                ..observation
            }
        };
        let (watch, answers) = given(&[
            beat(1, true),
            beat(5, true),
            beat(9, false),
            beat(10, false),
        ]);
        assert_eq!(watch.first_progress(), Some(Duration::from_secs(1)));
        assert_eq!(watch.last_change(), Some(Duration::from_secs(5)));
        assert_eq!(kind(&answers[2]), None);
        assert_eq!(kind(&answers[3]), Some(FailureKind::StaleProgress));
    }

    #[test]
    fn a_step_with_a_limit_is_judged_by_it_in_place_of_the_stale_period() {
        use crate::soak::heartbeat::limits::{Limit, Source};
        let step = |elapsed_seconds| StepJudgement {
            phase: "checkpoint".into(),
            step: 31,
            elapsed_seconds,
            limit: Limit {
                seconds: 20.0,
                source: Source::PhaseTimeout("checkpoint=20s".into()),
            },
        };
        let judged = |seconds, elapsed| Observation {
            step: Some(step(elapsed)),
            ..at(seconds, 1)
        };
        // Stale after 5 s by the directory, but the checkpoint may take 20.
        let (_, answers) = given(&[at(1, 1), judged(9, 8.0), judged(19, 18.0)]);
        assert!(answers.iter().all(|a| *a == Next::Continue), "{answers:?}");
        let (_, answers) = given(&[at(1, 1), judged(22, 21.0)]);
        let Next::Fail(failure) = &answers[1] else {
            panic!("{answers:?}")
        };
        assert_eq!(failure.kind, FailureKind::StaleProgress);
        assert_eq!(
            failure.reason,
            "no beat for 21.0s since step 31 of phase `checkpoint`; its limit is 20.0s (--phase-timeout checkpoint=20s)"
        );
    }
}
