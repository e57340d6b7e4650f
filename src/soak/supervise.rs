//! `soak run`: the I/O shell around the rules in [`watch`](super::watch). It records the start,
//! spawns the guard, samples on a fixed schedule, feeds each sample to the [`Watch`], stops the
//! tree, asks [`verdict`] for the outcome, records it and writes the artifact.
//!
//! The schedule is fixed at spawn (sample n is due at `n × interval`), so it does not drift with
//! the sampler's own cost. Between samples the supervisor watches for the command's exit and for
//! signals, so a verdict never waits a whole interval.

use super::capture::Capture;
use super::teardown::{Hands, SETTLE, Stopped, SystemHands, Tree, stop_tree};
use crate::time::poll_until;
use std::collections::HashSet;
use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::artifact;
use super::console::{Console, Stream};
use super::error::{ProgressDirProblem, SoakError};
use super::guard::{self, GuardStatus};
use super::request::{SoakSpec, ms};
use super::sampler::{GpuStream, HeldDir, Sampler};
use super::watch::{CommandState, Failure, Next, Observation, Resources, RunEnd, Watch, verdict};
use super::witnesses::Witnesses;
use crate::event::soak::{
    ExitInfo, FailureKind, Findings, Measures, Outcome, Sample, SoakEnd, SoakStart,
};
use crate::event::{Event, Subject};
use crate::log::{EventLog, LogError};
use crate::paths::StatePaths;
use crate::process::{self, ProcSource, ProcStat, ProcessIdentity, Signal, SystemProc};
use crate::redact::redact;
use crate::time::monotonic_ns;
use crate::tool::Tool;

/// How much of each output stream the artifact keeps.
pub(crate) const TAIL_BYTES: usize = 64 * 1024;

/// How long after the guard's death an interruption still counts as its cause.
const INTERRUPT_SKEW: Duration = Duration::from_millis(500);

/// How often the supervisor looks again at what it waits for.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// What `soak run` reports.
#[derive(Debug)]
pub(crate) struct Verdict {
    pub soak_id: String,
    pub outcome: Outcome,
    pub artifact: PathBuf,
    /// The artifact's digest, or why it could not be written (the verdict is recorded: it can
    /// be exported later).
    pub digest: Result<String, SoakError>,
}

/// What a soak runs against.
pub(crate) struct SoakContext<'a> {
    pub paths: &'a StatePaths,
    pub log: &'a EventLog,
    pub smi: Tool,
    /// The binary to run as the guard (`unilab` itself).
    pub guard_program: PathBuf,
    pub runtime_json: String,
    /// Where the command's output and the live status line go.
    pub console: Arc<Console>,
}

pub(crate) fn new_soak_id() -> String {
    let now = jiff::Timestamp::now();
    let mut hasher = blake3::Hasher::new();
    hasher.update(&std::process::id().to_le_bytes());
    hasher.update(&now.as_nanosecond().to_le_bytes());
    let salt = hasher.finalize().to_hex();
    format!("{}-{}", now.strftime("%Y%m%dT%H%M%S"), &salt[..4])
}

/// Runs the soak to its verdict. The verdict is recorded, and returned, even when writing the
/// artifact fails.
pub(crate) fn run(
    ctx: &SoakContext,
    spec: &SoakSpec,
    interrupted: &AtomicBool,
) -> Result<Verdict, SoakError> {
    // Held from now on: what the soak watches cannot be swapped under it.
    let held = HeldDir::open(&spec.progress_dir).map_err(|e| SoakError::ProgressDir {
        path: spec.progress_dir.clone(),
        problem: ProgressDirProblem::CannotOpen(e),
    })?;
    let soak = Recording::begin(ctx, spec)?;
    let mut witnesses = Witnesses::start(spec, ctx.paths.uid);
    // Orphans of the guard's tree — should the guard itself die — come to this process instead
    // of init, so the soak can still find, stop and reap them.
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let mut watch = watch_for(spec, &held);
    // Interrupted before the command started (during the runtime snapshot): it is not started.
    let mut was_interrupted = interrupted.load(Ordering::Relaxed);
    // Samples a full disk kept from the log, recorded with the verdict.
    let mut to_record = Vec::new();
    let (failure, stopped, ended, times) = match spawn_unless(was_interrupted, ctx, spec, &soak) {
        Err(failure) => (
            Some(failure),
            Stopped::default(),
            Ended::default(),
            RunTimes::default(),
        ),
        Ok(guard) => {
            let ran = supervise(
                ctx,
                spec,
                &soak,
                guard,
                (held, &mut witnesses),
                &mut watch,
                interrupted,
            );
            (to_record, was_interrupted) = (ran.unrecorded, ran.interrupted);
            (ran.failure, ran.stopped, ran.ended, ran.times)
        }
    };
    let status = ended.status;
    let exit = ExitInfo {
        code: status.exit_code,
        signal: status.exit_signal,
    };
    let (oom, gpu_release) = witnesses.end(&ctx.smi, spec, &status);
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
            interrupted: was_interrupted,
            oom: &oom,
        },
        &spec.parameters,
        spec.require_progress,
    );
    to_record.push((
        soak.subject(),
        Event::finished(
            SoakEnd {
                outcome: outcome.clone(),
                exit: status.started.map(|_| exit),
                run_ms: ms(times.run),
                teardown_ms: ms(times.teardown),
                first_progress_ms: watch.first_progress().map(ms),
                last_progress_ms: watch.last_change().map(ms),
                leaked_processes: stopped.leaked,
                stdout_tail: spec.secrets.mask_tail(&ended.stdout_tail),
                stderr_tail: spec.secrets.mask_tail(&ended.stderr_tail),
            },
            Findings {
                child,
                oom_kills: oom.kills,
                unkillable: stopped.unkillable,
                gpu_release,
            },
            limit,
        ),
    ));
    record_verdict(ctx, &soak.id, &outcome, to_record)?;
    let _ = std::fs::remove_dir_all(&soak.work_dir);
    let digest = write_artifact(ctx.log, &soak.id, &spec.output, |events| {
        record_patiently(ctx, events)
    });
    Ok(Verdict {
        soak_id: soak.id,
        outcome,
        artifact: spec.output.clone(),
        digest,
    })
}

/// The rules of the soak `spec` describes, over `held` as it is before the command starts.
fn watch_for(spec: &SoakSpec, held: &HeldDir) -> Watch {
    let (baseline, _) = held.signature();
    Watch::new(
        &spec.parameters,
        &spec.progress_dir.display().to_string(),
        baseline,
    )
    .failing_fast(spec.supervision.fail_fast)
    .limited(spec.limits.clone())
}

/// What the supervision of a running command ended with.
struct Ran {
    failure: Option<Failure>,
    stopped: Stopped,
    ended: Ended,
    times: RunTimes,
    /// What the log could not take yet (a full disk): samples, the evidence.
    unrecorded: Vec<(Subject, Event)>,
    /// Whether unilab had been interrupted when sampling ended.
    interrupted: bool,
}

/// Samples the command `guard` runs until it exits or the soak fails, then stops its tree.
fn supervise(
    ctx: &SoakContext,
    spec: &SoakSpec,
    soak: &Recording,
    guard: Guard,
    (held, witnesses): (HeldDir, &mut Witnesses),
    watch: &mut Watch,
    interrupted: &AtomicBool,
) -> Ran {
    let mut seen = HashSet::new();
    let (failure, mut unrecorded) = sample_until_done(
        ctx,
        spec,
        soak,
        &guard,
        Sampling {
            progress: held,
            seen: &mut seen,
            witnesses,
        },
        watch,
        interrupted,
    );
    // Read as sampling ends: an interruption later, in the teardown, caused nothing.
    let was_interrupted = interrupted.load(Ordering::Relaxed);
    let stopping = monotonic_ns();
    let trigger = failure.as_ref().map(|f| f.kind);
    let (stopped, evidence) = teardown(
        ctx,
        spec,
        (&guard, &witnesses.capture),
        &seen,
        (trigger, interrupted),
    );
    unrecorded.extend(evidence.map(|event| (soak.subject(), event)));
    let ended = guard.finish();
    let times = RunTimes::of(&ended.status, stopping, monotonic_ns());
    Ran {
        failure,
        stopped,
        ended,
        times,
        unrecorded,
        interrupted: was_interrupted,
    }
}

/// The guard running the command, unless unilab was interrupted before it could start it.
fn spawn_unless(
    interrupted: bool,
    ctx: &SoakContext,
    spec: &SoakSpec,
    soak: &Recording,
) -> Result<Guard, Failure> {
    if interrupted {
        return Err(Failure::new(
            FailureKind::Interrupted,
            "unilab was interrupted before the command started; it was not run",
        ));
    }
    Guard::spawn(ctx, spec, &soak.status_path)
}

/// How long the end of a soak waits for space on a full disk to record its verdict (and the
/// samples held back) and its artifact: then it gives up, saying so (exit 3); the log keeps
/// what it had, and the soak is reported abandoned later.
const FULL_DISK_PATIENCE: Duration = Duration::from_secs(10);

/// Records the verdict (with the samples a full disk held back); one that cannot be recorded is
/// said on standard error at least.
fn record_verdict(
    ctx: &SoakContext,
    soak_id: &str,
    outcome: &Outcome,
    events: Vec<(Subject, Event)>,
) -> Result<(), SoakError> {
    record_patiently(ctx, events).inspect_err(|_| {
        ctx.console.warn(&format!(
            "soak {soak_id} {}{}: {}; this verdict could not be recorded",
            outcome.status.as_str(),
            outcome
                .failure_kind
                .map(|kind| format!(" ({})", kind.as_str()))
                .unwrap_or_default(),
            outcome.reason
        ));
    })
}

/// Appends `events` in one commit, waiting up to [`FULL_DISK_PATIENCE`] while the log's disk is
/// full.
fn record_patiently(ctx: &SoakContext, events: Vec<(Subject, Event)>) -> Result<(), SoakError> {
    let started = Instant::now();
    let mut warned = false;
    loop {
        match ctx.log.append_all(events.iter().cloned()) {
            Ok(_) => return Ok(()),
            Err(e @ LogError::NoSpace { .. }) if started.elapsed() < FULL_DISK_PATIENCE => {
                if !warned {
                    warned = true;
                    ctx.console.warn(&format!(
                        "{e}: waiting up to {} s for space to record the verdict",
                        FULL_DISK_PATIENCE.as_secs()
                    ));
                }
                // Each try opens the log again (a repair after the failed commit): not too often.
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// How long the command itself ran, and the teardown after it.
#[derive(Debug, Default, Clone, Copy)]
struct RunTimes {
    run: Duration,
    teardown: Duration,
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
            run: Duration::from_nanos(run_end.saturating_sub(spawned)),
            teardown: Duration::from_nanos(done.saturating_sub(run_end)),
        }
    }
}

/// A soak whose start is recorded: its id and its private working directory.
struct Recording {
    id: String,
    work_dir: PathBuf,
    /// Where the guard reports the command's start and exit.
    status_path: PathBuf,
}

impl Recording {
    fn begin(ctx: &SoakContext, spec: &SoakSpec) -> Result<Self, SoakError> {
        let id = spec.soak_id.clone();
        let work_dir = ctx.paths.user_dir().join("soaks").join(&id);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&work_dir)
            .map_err(|source| SoakError::Io {
                path: work_dir.clone(),
                source,
            })?;
        let me = SystemProc::default()
            .stat(std::process::id())
            .map(|s| s.identity())
            .unwrap_or(ProcessIdentity {
                pid: std::process::id(),
                start_ticks: 0,
            });
        let recording = Self {
            status_path: work_dir.join("guard-status"),
            work_dir,
            id,
        };
        let secrets = &spec.secrets;
        let mask = |text: &str| secrets.mask(text).into_owned();
        // What the user named a credential keeps its name only; any value that is one is masked.
        let masked_map = |pairs: &mut dyn Iterator<Item = (&String, &String)>| {
            pairs
                .map(|(k, v)| (k.clone(), mask(redact(k, v))))
                .collect()
        };
        ctx.log.append(
            recording.subject(),
            Event::SoakStarted {
                start: Box::new(SoakStart {
                    soak_id: recording.id.clone(),
                    command: secrets.mask_command_line(&spec.command),
                    cwd: spec.cwd.display().to_string(),
                    progress_dir: spec.progress_dir.display().to_string(),
                    output: spec.output.display().to_string(),
                    parameters: spec.parameters.clone(),
                    require_progress: spec.require_progress,
                    metadata: masked_map(&mut spec.metadata.iter()),
                    environment: masked_map(&mut spec.env.iter().map(|(k, v)| (k, v))),
                    supervisor: me,
                    runtime_json: mask(&ctx.runtime_json),
                    ticks_per_second: process::ticks_per_second(),
                }),
                supervision: Some(spec.supervision.clone()),
                limits: Some(spec.limits.clone()),
            },
        )?;
        Ok(recording)
    }

    fn subject(&self) -> Subject {
        Subject::Soak(self.id.clone())
    }
}

/// Samples on schedule until the watch says the command exited or the soak fails; returns the
/// failure, if any.
/// What sampling works with and leaves behind: the held progress directory, and every process
/// of the tree a sample saw (to find them again should the guard die).
struct Sampling<'a> {
    progress: HeldDir,
    seen: &'a mut HashSet<ProcessIdentity>,
    witnesses: &'a mut Witnesses,
}

/// The series starts with the running command: wait for the guard to report its spawn — or its
/// death, which the first turn of the sampling loop tells (a guard killed before it reported
/// would otherwise hold the soak for the whole startup timeout).
fn await_spawn(guard: &Guard, spec: &SoakSpec, interrupted: &AtomicBool) {
    let startup = Duration::from_millis(spec.parameters.startup_timeout_ms);
    poll_until(
        startup.saturating_sub(guard.t0.elapsed()),
        LOOK_EVERY,
        || {
            let status = guard.status();
            status.started.is_some()
                || status.exited()
                || guard.died(&status).is_some()
                || interrupted.load(Ordering::Relaxed)
        },
    );
}

fn sample_until_done(
    ctx: &SoakContext,
    spec: &SoakSpec,
    soak: &Recording,
    guard: &Guard,
    sampling: Sampling<'_>,
    watch: &mut Watch,
    interrupted: &AtomicBool,
) -> (Option<Failure>, Vec<(Subject, Event)>) {
    let t0 = guard.t0;
    let interval = Duration::from_millis(spec.parameters.sample_interval_ms);
    let Sampling {
        progress,
        seen,
        witnesses,
    } = sampling;
    let sampler = sampler_for(ctx, progress, interval);
    await_spawn(guard, spec, interrupted);
    let mut index = 0u64;
    // The schedule's tick, apart from the samples' index: ticks missed are skipped, not caught up.
    let mut tick = 0u64;
    let mut behind: Option<String> = None;
    // Until the GPUs were read once: whether others already use them is said then.
    let mut gpus_unread = true;
    let mut samples = GroupCommit::new(ctx.log, &ctx.console, soak.subject(), interval);
    // The tree's CPU % between samples, for the status line.
    let mut cpu = artifact::CpuClock::new(process::ticks_per_second());
    let failure = loop {
        let due = t0 + interval.mul_f64(tick as f64);
        while Instant::now() < due
            && !interrupted.load(Ordering::Relaxed)
            && !guard.status().exited()
        {
            // The verdict may wait this long after the command exits; sampling does not.
            std::thread::sleep(
                Duration::from_millis(100).min(due.saturating_duration_since(Instant::now())),
            );
        }
        // Read before sampling: a sample taken after the exit was known says so.
        let status = guard.status();
        if let Some(failure) = guard.died(&status) {
            // `scancel` and a job's end signal the whole step at once: the guard may die of it
            // just before this process learns it was interrupted too.
            if poll_until(INTERRUPT_SKEW, LOOK_EVERY, || {
                interrupted.load(Ordering::Relaxed)
            }) {
                break Some(Failure::new(
                    FailureKind::Interrupted,
                    "unilab was interrupted; the signal ended the soak's guard too",
                ));
            }
            break Some(failure);
        }
        let command = status.command_state();
        let elapsed = t0.elapsed();
        let after_exit = command != CommandState::Running;
        let (mut sample, measures) = sampler.sample(index, elapsed, guard.pid, after_exit);
        sample.errors.extend(behind.take());
        if gpus_unread && sample.gpus.is_some() {
            gpus_unread = false;
            warn_of_others(&ctx.console, &sample, &measures);
        }
        seen.extend(sample.processes.iter().map(|p| ProcessIdentity {
            pid: p.pid,
            start_ticks: p.start_ticks,
        }));
        let failed_child = witnesses.saw(&mut sample, &status);
        let progress = sample.progress;
        let sample_cost = sample.sampler_cost_us;
        let status_line = ctx
            .console
            .shows_status()
            .then(|| StatusLine::of(&sample, &measures, cpu.advance(&sample).1));
        let resources = Resources::of(&sample, &measures);
        let committing = Instant::now();
        if let Err(failure) = samples.push(sample, measures) {
            break Some(failure);
        }
        index += 1;
        // The sample's own cost and its commit's: what this thread spent on it.
        let cost = Duration::from_micros(sample_cost) + committing.elapsed();
        let (next_tick, missed) = next_tick(tick, t0.elapsed(), interval);
        tick = next_tick;
        behind = missed.map(|missed| fell_behind(missed, interval, cost));
        let next = watch.observe(&Observation {
            elapsed,
            progress,
            command,
            interrupted: interrupted.load(Ordering::Relaxed),
            failed_child,
            resources,
        });
        if let Some(line) = status_line {
            ctx.console.status(line.text(
                &soak.id,
                elapsed,
                index,
                watch.last_change(),
                watch.stale_in(elapsed),
            ));
        }
        match next {
            Next::Continue => {}
            Next::Exited => break None,
            Next::Fail(failure) => break Some(failure),
        }
    };
    ctx.console.finish();
    // Whatever ended the sampling, the samples taken are recorded before the verdict; those a
    // full disk holds back go in with it.
    match samples.commit() {
        Ok(()) => (failure, samples.held()),
        Err(commit_failed) => (failure.or(Some(commit_failed)), samples.held()),
    }
}

/// Says which of the GPUs the soak watches other processes already use, at its first reading of
/// them (as the command starts): that memory, that load and the timing are not the soak's.
fn warn_of_others(console: &Console, sample: &Sample, measures: &Measures) {
    for (gpu, health) in sample.gpus.iter().flatten().zip(&measures.gpus) {
        if health.other_processes.is_empty() {
            continue;
        }
        let mib: u64 = health
            .other_processes
            .iter()
            .filter_map(|p| p.used_memory_mib)
            .sum();
        console.warn(&format!(
            "GPU {} ({}) is already in use by {} not of this soak ({} MiB): its memory, load and timing are shared",
            gpu.index,
            gpu.uuid,
            crate::text::count(health.other_processes.len() as u64, "process"),
            mib
        ));
    }
}

/// The sampler of a soak sampled every `interval`, its GPUs read by a stream of its own.
fn sampler_for(ctx: &SoakContext, progress: HeldDir, interval: Duration) -> Sampler {
    Sampler::new(
        PathBuf::from("/proc"),
        progress,
        Some(GpuStream::start(
            ctx.smi.clone(),
            interval,
            Some(ctx.guard_program.clone()),
        )),
    )
    // Half of each interval at most: a huge progress directory cannot take the whole schedule.
    .with_walk_budget((interval / 2).max(WALK_BUDGET_FLOOR))
}

/// The least a sample may spend walking the progress directory, however short the interval.
const WALK_BUDGET_FLOOR: Duration = Duration::from_millis(20);

/// The tick to sample next after `tick`, at `elapsed`: the following one, or — when ticks went by
/// unsampled (sampling took longer than the interval, or the supervisor did not run) — the one
/// under way now, at once; and how many due ticks were missed.
fn next_tick(tick: u64, elapsed: Duration, interval: Duration) -> (u64, Option<u64>) {
    let now = (elapsed.as_secs_f64() / interval.as_secs_f64().max(1e-9)).floor() as u64;
    match now.checked_sub(tick + 1) {
        // The tick under way now is sampled at once.
        Some(missed) if missed > 0 => (now, Some(missed)),
        _ => (tick + 1, None),
    }
}

/// What a sample says when the ones due before it were missed: whether sampling itself took
/// too long (its cost, a large progress directory's walk) or the supervisor did not run at all
/// (stopped with SIGSTOP, starved of CPU, a suspended host).
fn fell_behind(missed: u64, interval: Duration, cost: Duration) -> String {
    let due = crate::text::count(missed, "due sample");
    if cost >= interval {
        format!(
            "{due} skipped: the last sample took {:.2} s, longer than the {:.2} s interval (a large progress directory takes long to walk)",
            cost.as_secs_f64(),
            interval.as_secs_f64()
        )
    } else {
        format!(
            "{due} skipped: the supervisor did not run for about {:.1} s (stopped, or starved of CPU)",
            interval.as_secs_f64() * missed as f64
        )
    }
}

/// How often samples taken faster than this are committed, together.
const GROUP_COMMIT: Duration = Duration::from_secs(1);

/// The samples of a soak on their way to the log: each committed at once when the interval is
/// a second or more; below that, gathered and committed together at most once a second, so a
/// 50 ms interval costs two syncs a second, not forty. A crash loses at most the samples of the
/// last second; lifecycle events never wait here.
struct GroupCommit<'a> {
    log: &'a EventLog,
    console: &'a Console,
    subject: Subject,
    pending: Vec<(Subject, Event)>,
    every: Duration,
    last: Instant,
    /// While the log's disk is full: the samples dropped, oldest first, to keep what is held
    /// within [`MAX_HELD_BYTES`].
    full: Option<Full>,
}

/// What a full disk has cost so far.
#[derive(Debug, Default)]
struct Full {
    dropped: u64,
}

/// How often a soak tries its log again while its disk is full.
const FULL_RETRY: Duration = Duration::from_secs(5);

/// How much the samples a full disk holds back may take in memory (estimated): past it the
/// oldest are dropped, and the first sample recorded afterwards says how many.
const MAX_HELD_BYTES: usize = 16 << 20;

/// About what a sample takes in memory: its processes and GPUs.
fn held_size(event: &Event) -> usize {
    match event {
        Event::SoakSampled { sample, .. } => {
            512 + 168 * sample.processes.len()
                + sample.gpus.as_ref().map_or(0, |gpus| 128 * gpus.len())
                + sample.errors.iter().map(String::len).sum::<usize>()
        }
        _ => 256,
    }
}

impl<'a> GroupCommit<'a> {
    fn new(log: &'a EventLog, console: &'a Console, subject: Subject, interval: Duration) -> Self {
        Self {
            log,
            console,
            subject,
            pending: Vec::new(),
            every: if interval >= GROUP_COMMIT {
                Duration::ZERO
            } else {
                GROUP_COMMIT
            },
            last: Instant::now(),
            full: None,
        }
    }

    fn push(&mut self, sample: Sample, measures: Measures) -> Result<(), Failure> {
        let sampled = Event::sampled(sample, measures);
        self.pending.push((self.subject.clone(), sampled));
        if self.last.elapsed() >= self.every {
            self.commit()?;
        }
        Ok(())
    }

    /// Commits what is pending. A full disk does not fail the soak: the samples are held (the
    /// oldest dropped past [`MAX_HELD_BYTES`]) and tried again at the next commit.
    fn commit(&mut self) -> Result<(), Failure> {
        if self.pending.is_empty() {
            self.last = Instant::now();
            return Ok(());
        }
        // While the disk is full each try opens the log again (a repair, which takes a while
        // on a long log): tried every few seconds, not every sample.
        if self.full.is_some() && self.last.elapsed() < FULL_RETRY {
            self.trim_held();
            return Ok(());
        }
        self.last = Instant::now();
        match self.log.append_all(self.noted()) {
            Ok(_) => {
                self.pending.clear();
                if self.full.take().is_some() {
                    self.console
                        .warn("the event log has space again: the samples held back are recorded");
                }
                Ok(())
            }
            Err(e @ LogError::NoSpace { .. }) => {
                if self.full.is_none() {
                    self.console.warn(&format!(
                        "{e}: the soak goes on; its samples are held in memory (at most {} MiB) until there is space",
                        MAX_HELD_BYTES >> 20
                    ));
                }
                self.full.get_or_insert_with(Full::default);
                self.trim_held();
                Ok(())
            }
            Err(e) => {
                self.pending.clear();
                Err(Failure::new(
                    FailureKind::MonitorError,
                    format!("cannot record a sample: {e}"),
                ))
            }
        }
    }

    /// Keeps what a full disk holds back within [`MAX_HELD_BYTES`], dropping the oldest.
    fn trim_held(&mut self) {
        let Some(full) = &mut self.full else {
            return;
        };
        let mut size: usize = self.pending.iter().map(|(_, e)| held_size(e)).sum();
        let mut drop_first = 0;
        while size > MAX_HELD_BYTES && drop_first + 1 < self.pending.len() {
            size -= held_size(&self.pending[drop_first].1);
            drop_first += 1;
        }
        self.pending.drain(..drop_first);
        full.dropped += drop_first as u64;
    }

    /// The samples pending, the first saying how many a full disk made drop before it: what a
    /// commit records (the note goes in only with a commit that succeeds).
    fn noted(&self) -> impl Iterator<Item = (Subject, Event)> + '_ {
        let mut note = self.full.as_ref().filter(|f| f.dropped > 0).map(|full| {
            format!(
                "{} taken while the disk holding the event log was full could not be kept",
                crate::text::count(full.dropped, "sample")
            )
        });
        self.pending
            .iter()
            .cloned()
            .map(move |(subject, mut event)| {
                if let (Some(text), Event::SoakSampled { sample, .. }) = (note.take(), &mut event) {
                    sample.errors.push(text);
                }
                (subject, event)
            })
    }

    /// What could not be recorded yet (a full disk), with the note of what was dropped.
    fn held(&mut self) -> Vec<(Subject, Event)> {
        let held = self.noted().collect();
        self.pending.clear();
        held
    }
}

/// The live status line on a terminal: the tree's totals at the latest sample. What is unknown
/// (no answer from nvidia-smi) reads `–`, never `0`.
struct StatusLine {
    rss_bytes: u64,
    pss_bytes: Option<u64>,
    /// The tree's CPU use since the previous sample, in % of one CPU.
    cpu_percent: Option<f64>,
    /// `None` on a host without GPUs; `Some(None)` where the tree's GPU memory is unknown.
    gpu_mib: Option<Option<u64>>,
}

impl StatusLine {
    fn of(sample: &Sample, measures: &Measures, cpu_percent: Option<f64>) -> Self {
        Self {
            rss_bytes: sample.processes.iter().map(|p| p.rss_bytes).sum(),
            pss_bytes: measures.tree_pss_bytes(),
            cpu_percent,
            gpu_mib: match &sample.gpus {
                Some(gpus) if gpus.is_empty() => None,
                _ => Some(sample.tree_gpu_memory_mib()),
            },
        }
    }

    /// The line at `elapsed` after spawn, `samples` taken, the progress directory last changed
    /// at `last_change` and the soak failing as stale in `stale_in`.
    fn text(
        &self,
        soak_id: &str,
        elapsed: Duration,
        samples: u64,
        last_change: Option<Duration>,
        stale_in: Option<Duration>,
    ) -> String {
        use crate::text::duration;
        let progress = match (last_change, stale_in) {
            (Some(change), Some(left)) => format!(
                "{} ago, stale in {}",
                duration(elapsed.saturating_sub(change).as_secs_f64()),
                duration(left.as_secs_f64())
            ),
            (Some(change), None) => {
                format!(
                    "{} ago",
                    duration(elapsed.saturating_sub(change).as_secs_f64())
                )
            }
            (None, _) => "none yet".into(),
        };
        let mut line = format!(
            "soak {soak_id}: {}, {}, progress {progress}, CPU {}",
            duration(elapsed.as_secs_f64()),
            crate::text::count(samples, "sample"),
            self.cpu_percent
                .map_or_else(|| "–".to_owned(), |p| format!("{p:.0}%")),
        );
        if let Some(pss) = self.pss_bytes {
            line.push_str(&format!(", PSS {} MiB", pss >> 20));
        }
        line.push_str(&format!(", RSS {} MiB", self.rss_bytes >> 20));
        match self.gpu_mib {
            Some(Some(mib)) => line.push_str(&format!(", GPU {mib} MiB")),
            Some(None) => line.push_str(", GPU –"),
            None => {}
        }
        line
    }
}

/// How long the end of a soak waits for its output pipes to close once its tree is gone.
const TAIL_PATIENCE: Duration = Duration::from_secs(2);

/// One output stream of the command, passed through to ours with its tail kept.
struct Tail {
    pump: JoinHandle<()>,
    kept: Arc<Mutex<Vec<u8>>>,
}

impl Tail {
    /// Relays `from` through the console as `stream`, keeping the last [`TAIL_BYTES`].
    fn pump(mut from: impl Read + Send + 'static, console: Arc<Console>, stream: Stream) -> Self {
        let kept = Arc::new(Mutex::new(Vec::new()));
        let tail = Arc::clone(&kept);
        let pump = std::thread::spawn(move || {
            let mut chunk = [0u8; 16 * 1024];
            loop {
                match from.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        console.relay(stream, &chunk[..n]);
                        if let Ok(mut tail) = tail.lock() {
                            tail.extend_from_slice(&chunk[..n]);
                            if tail.len() > TAIL_BYTES {
                                let excess = tail.len() - TAIL_BYTES;
                                tail.drain(..excess);
                            }
                        }
                    }
                }
            }
        });
        Self { pump, kept }
    }

    /// Waits for the stream to close and returns its tail. A process the soak could not stop
    /// (one that escaped to another user, say) may still hold the pipe: after [`TAIL_PATIENCE`]
    /// the tail so far is taken and the pump left to end with this process.
    fn finish(self) -> Vec<u8> {
        if poll_until(TAIL_PATIENCE, LOOK_EVERY, || self.pump.is_finished()) {
            let _ = self.pump.join();
        }
        self.kept.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

/// The guard process, running the command under it.
struct Guard {
    /// When the guard was about to be spawned: the soak's clock starts here.
    t0: Instant,
    child: Child,
    pid: u32,
    status_path: PathBuf,
    stdout: Option<Tail>,
    stderr: Option<Tail>,
}

/// What the guard left when it was done.
#[derive(Default)]
struct Ended {
    status: GuardStatus,
    stdout_tail: Vec<u8>,
    stderr_tail: Vec<u8>,
}

impl Guard {
    fn spawn(ctx: &SoakContext, spec: &SoakSpec, status_path: &Path) -> Result<Self, Failure> {
        let t0 = Instant::now();
        let mut command = Command::new(&ctx.guard_program);
        if spec.env_clear {
            // The guard needs no variable: the command gets what `--env` gave, nothing else.
            command.env_clear();
        }
        let mut child = command
            .arg(guard::SUBCOMMAND)
            .arg("--status")
            .arg(status_path)
            .arg("--")
            .args(&spec.command)
            .current_dir(&spec.cwd)
            .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                Failure::new(
                    FailureKind::SpawnFailed,
                    format!("cannot start the soak guard: {e}"),
                )
            })?;
        let stdout = child
            .stdout
            .take()
            .map(|out| Tail::pump(out, Arc::clone(&ctx.console), Stream::Stdout));
        let stderr = child
            .stderr
            .take()
            .map(|err| Tail::pump(err, Arc::clone(&ctx.console), Stream::Stderr));
        Ok(Self {
            t0,
            pid: child.id(),
            child,
            status_path: status_path.to_owned(),
            stdout,
            stderr,
        })
    }

    fn status(&self) -> GuardStatus {
        GuardStatus::read(&self.status_path)
    }

    /// A failure when the guard has died before the command it runs was reported to exit: it
    /// only ends once the supervisor closes its input, so its death is something else's doing
    /// (a SIGKILL, the OOM killer). The guard is this process's unreaped child, so its pid
    /// names it until it is reaped.
    fn died(&self, status: &GuardStatus) -> Option<Failure> {
        let dead = SystemProc::default()
            .stat(self.pid)
            .is_none_or(|s| s.has_exited());
        (dead && !status.exited()).then(|| {
            Failure::new(
                FailureKind::MonitorError,
                format!(
                    "the soak's guard (pid {}) died while the command ran; the command was no longer supervised, so its processes were stopped",
                    self.pid
                ),
            )
        })
    }

    /// Reads the final status, then closes the guard's input — which tells it to kill anything
    /// left and exit — and waits for it and for the output to end.
    fn finish(mut self) -> Ended {
        let status = self.status();
        drop(self.child.stdin.take());
        if !poll_until(Duration::from_secs(5), LOOK_EVERY, || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        }) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        Ended {
            status,
            stdout_tail: self.stdout.map(Tail::finish).unwrap_or_default(),
            stderr_tail: self.stderr.map(Tail::finish).unwrap_or_default(),
        }
    }
}

/// Stops the soak's tree (see [`stop_tree`]) once the soak is decided; the leaks, their
/// credentials masked, and what no signal could end. Before the first signal the evidence is
/// captured and recorded, then the dump signal sent and its wait kept; the evidence comes back
/// when it could not be recorded (a full disk), to go in with the verdict.
fn teardown(
    ctx: &SoakContext,
    spec: &SoakSpec,
    (guard, capture): (&Guard, &Capture),
    seen: &HashSet<ProcessIdentity>,
    (failure, interrupted): (Option<FailureKind>, &AtomicBool),
) -> (Stopped, Option<Event>) {
    let proc = SystemProc::default();
    // From here on an interruption (a second Ctrl-C) means: kill now.
    interrupted.store(false, Ordering::Relaxed);
    let hurry = || interrupted.load(Ordering::Relaxed);
    let tree = Tree {
        proc: &proc,
        guard: guard.pid,
        me: std::process::id(),
        seen,
    };
    let hands = SystemHands {
        proc: &proc,
        uid: ctx.paths.uid,
    };
    let guard_done = || {
        let status = guard.status();
        status.exited() || guard.died(&status).is_some()
    };
    let subject = Subject::Soak(spec.soak_id.clone());
    let mut unrecorded = None;
    let grace = Duration::from_millis(spec.parameters.shutdown_grace_ms);
    let before_first = |live: &[ProcStat], trigger| {
        let evidence = capture.take(live, trigger, jiff::Timestamp::now().as_microsecond());
        let event = Event::evidence_captured(evidence);
        if let Err(e) = ctx.log.append(subject.clone(), event.clone()) {
            ctx.console.warn(&format!(
                "{e}: the evidence of the soak's tree is recorded with the verdict instead"
            ));
            unrecorded = Some(event);
        }
        if let Some(number) = spec.supervision.dump_signal {
            for stat in tree.live() {
                hands.signal(stat.identity(), Signal::Dump(number));
            }
            let wait = Duration::from_millis(spec.supervision.dump_wait_ms);
            poll_until(wait, LOOK_EVERY, || tree.live().is_empty());
        }
        if trigger != FailureKind::LeakedProcesses {
            ctx.console.note(&format!(
                "stopping the tree ({}): SIGTERM now, SIGKILL in {}{}",
                trigger.as_str(),
                crate::text::duration(grace.as_secs_f64()),
                if trigger == FailureKind::Interrupted {
                    " — Ctrl-C again to kill it now"
                } else {
                    ""
                }
            ));
        }
    };
    let mut stopped = stop_tree(
        &tree,
        &hands,
        failure,
        (grace, SETTLE),
        (guard_done, &hurry),
        before_first,
    );
    for leak in &mut stopped.leaked {
        leak.cmdline = spec.secrets.mask_command_line(&leak.cmdline);
    }
    (stopped, unrecorded)
}

/// Renders the soak's artifact from the log, writes it atomically to `path` and records that.
pub(crate) fn write_artifact(
    log: &EventLog,
    soak_id: &str,
    path: &Path,
    record: impl FnOnce(Vec<(Subject, Event)>) -> Result<(), SoakError>,
) -> Result<String, SoakError> {
    let snapshot = log.snapshot()?;
    let written = artifact::write_atomically_with(path, |file| {
        artifact::stream::write(&snapshot, soak_id, file)
    })
    .map_err(SoakError::streaming(path))?;
    drop(snapshot);
    record(vec![(
        Subject::Soak(soak_id.to_owned()),
        Event::ArtifactWritten {
            path: path.display().to_string(),
            digest: written.digest.clone(),
            bytes: written.bytes,
        },
    )])?;
    Ok(written.digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::soak::ProgressSignature;

    fn sample(index: u64, processes: usize) -> Sample {
        Sample {
            index,
            elapsed_ms: index * 50,
            after_exit: false,
            processes: crate::event::soak::a_tree(processes),
            reaped_cpu_ticks: 0,
            gpus: None,
            progress: ProgressSignature::default(),
            sampler_cost_us: 0,
            errors: vec!["x".into()],
        }
    }

    fn private_log() -> (tempfile::TempDir, EventLog) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .unwrap();
        let scope = crate::event::Scope {
            uid: nix::unistd::getuid().as_raw(),
            host: "node".into(),
        };
        let log = EventLog::open(
            &dir.path().join("events.redb"),
            scope,
            crate::projection::ALL,
        )
        .unwrap();
        (dir, log)
    }

    fn recorded_samples(log: &EventLog) -> usize {
        let mut n = 0;
        log.snapshot()
            .unwrap()
            .scan(1, |record| {
                n += usize::from(matches!(record.envelope.event, Event::SoakSampled { .. }));
                Ok::<bool, LogError>(true)
            })
            .unwrap();
        n
    }

    #[test]
    fn samples_faster_than_a_second_are_committed_together() {
        let (_dir, log) = private_log();
        let console = Console::new(false, false, false);
        let subject = Subject::Soak("s".into());
        let mut samples = GroupCommit::new(&log, &console, subject, Duration::from_millis(50));
        for index in 0..3 {
            samples.push(sample(index, 1), Measures::default()).unwrap();
        }
        assert_eq!(recorded_samples(&log), 0, "held for the group's commit");
        samples.commit().unwrap();
        assert_eq!(recorded_samples(&log), 3);
    }

    #[test]
    fn samples_a_full_disk_holds_back_stay_within_their_bound_and_say_what_was_dropped() {
        let (_dir, log) = private_log();
        let console = Console::new(false, false, false);
        let subject = Subject::Soak("s".into());
        let mut samples = GroupCommit::new(&log, &console, subject, Duration::from_secs(1));
        // As after a commit that found the disk full: the next tries wait, and what waits is bounded.
        samples.full = Some(Full::default());
        samples.last = Instant::now();
        for index in 0..40 {
            samples
                .push(sample(index, 4_000), Measures::default())
                .unwrap();
        }
        let held: usize = samples.pending.iter().map(|(_, e)| held_size(e)).sum();
        assert!(held <= MAX_HELD_BYTES, "{held}");
        let dropped = samples.full.as_ref().unwrap().dropped;
        assert_eq!(dropped as usize + samples.pending.len(), 40);
        assert!(dropped > 0);
        let kept = samples.held();
        let Some((_, Event::SoakSampled { sample: first, .. })) = kept.first() else {
            panic!("nothing held");
        };
        assert_eq!(first.index, dropped, "the oldest were dropped");
        assert!(
            first
                .errors
                .last()
                .unwrap()
                .starts_with(&format!("{dropped} samples taken while the disk")),
            "{:?}",
            first.errors.last()
        );
        assert!(
            matches!(kept.last(), Some((_, Event::SoakSampled { sample, .. })) if sample.index == 39)
        );
        assert_eq!(
            recorded_samples(&log),
            0,
            "nothing was tried before the retry is due"
        );
    }

    #[test]
    fn missed_ticks_are_skipped_and_counted_not_caught_up() {
        let interval = Duration::from_millis(200);
        let at = Duration::from_millis;
        assert_eq!(next_tick(0, at(10), interval), (1, None));
        assert_eq!(next_tick(3, at(790), interval), (4, None));
        assert_eq!(
            next_tick(3, at(810), interval),
            (4, None),
            "only late: no tick missed"
        );
        assert_eq!(next_tick(3, at(1_010), interval), (5, Some(1)));
        // Stopped for four seconds after tick 3: ticks 4 to 22 were due meanwhile.
        assert_eq!(next_tick(3, at(4_650), interval), (23, Some(19)));
        assert!(fell_behind(19, interval, at(3)).contains("did not run for about 3.8 s"));
        assert!(fell_behind(2, interval, at(450)).contains("the last sample took 0.45 s"));
    }
}
