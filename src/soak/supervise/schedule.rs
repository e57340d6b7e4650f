//! The schedule: the samples of a running command, each due at `n × interval` after the guard's
//! spawn, so it does not drift with the sampler's own cost; ticks missed (a slow sample, a
//! supervisor that did not run) are skipped and said, never caught up. Between samples it
//! sleeps until the command exits, the guard dies, a signal comes or the sample is due
//! ([`Waits`]), so a verdict never waits a whole interval and no wake-up finds nothing to do.
//! Each sample is fed to the [`Watch`], whose answer ends the sampling or not, then goes to the
//! [`GroupCommit`] with the progress the watch decided at it.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::alarm::{JobWatch, Running};
use super::beats::Heartbeats;
use super::child::Guard;
use super::commit::GroupCommit;
use super::context::{LOOK_EVERY, SoakContext};
use super::metrics::MetricsFile;
use super::record::Recording;
use super::status::{StatusLine, warn_of_others};
use super::waits::Waits;
use crate::event::soak::{
    FailureKind, Measures, ProcessSample, ProgressNoted, ProgressSignature, Sample, SampleBeats,
};
use crate::event::{Event, Subject};
use crate::process::{self, ProcessIdentity};
use crate::soak::cost::{self, Part};
use crate::soak::guard::GuardStatus;
use crate::soak::heartbeat::limits::StepJudgement;
use crate::soak::request::SoakSpec;
use crate::soak::sampler::{GpuStream, HeldDir, Sampler};
use crate::soak::watch::{CommandState, Failure, Next, Observation, Resources, Watch};
use crate::soak::witnesses::Witnesses;
use crate::time::poll_until;

/// How long after the guard's death an interruption still counts as its cause.
const INTERRUPT_SKEW: Duration = Duration::from_millis(500);

/// What sampling works with and leaves behind: the held progress directory, and every process
/// of the tree a sample saw (to find them again should the guard die).
pub(super) struct Sampling<'a, 'j> {
    pub progress: HeldDir,
    pub seen: &'a mut HashSet<ProcessIdentity>,
    pub witnesses: &'a mut Witnesses,
    /// The job's alarm, for a rank of a job.
    pub job: Option<&'a mut JobWatch<'j>>,
    pub heartbeats: &'a mut Heartbeats,
    /// The metrics file, rewritten after each sample.
    pub metrics: &'a mut MetricsFile,
    /// What the samples taken leave for a last one after them.
    pub so_far: &'a mut SampledSoFar,
}

/// What the samples taken so far leave for a last sample after them (the beats no sample
/// holds, read once the tree is gone).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SampledSoFar {
    /// How many were taken: the next one's index.
    pub samples: u64,
    /// The tree's CPU ticks at the last one, its processes' and those reaped: all of it is
    /// reaped by the next.
    pub tree_ticks: u64,
    pub progress: ProgressSignature,
}

impl SampledSoFar {
    fn took(&mut self, sample: &Sample) {
        self.samples = sample.index + 1;
        self.tree_ticks = sample.reaped_cpu_ticks
            + sample
                .processes
                .iter()
                .map(|p| p.cpu_ticks + p.reaped_children_cpu_ticks)
                .sum::<u64>();
        self.progress = sample.progress;
    }

    /// The sample after the last, once the tree is gone and the soak decided: it holds the beats
    /// no sample holds (`beats`, read `after_spawn`), and decides no progress (the progress
    /// recorded is the last sample's, `noted`, without what made it).
    pub(super) fn last_sample(
        &self,
        beats: SampleBeats,
        after_spawn: Duration,
        noted: ProgressNoted,
    ) -> Event {
        let sample = Sample {
            index: self.samples,
            elapsed_ms: u64::try_from(after_spawn.as_millis()).unwrap_or(u64::MAX),
            after_exit: true,
            processes: Vec::new(),
            reaped_cpu_ticks: self.tree_ticks,
            gpus: None,
            progress: self.progress,
            sampler_cost_us: 0,
            errors: Vec::new(),
        };
        let measures = Measures {
            heartbeat: Some(Box::new(beats)),
            ..Measures::default()
        };
        let noted = ProgressNoted {
            progress_seen: None,
            ..noted
        };
        Event::sampled(sample, measures, Some(noted))
    }
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

/// Samples on schedule until the watch says the command exited or the soak fails; returns the
/// failure, if any, once the samples taken are committed, and what a full disk held back.
pub(super) fn sample_until_done(
    ctx: &SoakContext,
    spec: &SoakSpec,
    soak: &Recording,
    guard: &Guard,
    sampling: Sampling<'_, '_>,
    watch: &mut Watch,
    interrupted: &AtomicBool,
) -> (Option<Failure>, Vec<(Subject, Event)>) {
    let t0 = guard.t0;
    let interval = Duration::from_millis(spec.parameters.sample_interval_ms);
    let Sampling {
        progress,
        seen,
        witnesses,
        mut job,
        heartbeats,
        metrics,
        so_far,
    } = sampling;
    // What the log could not take of the job's alarm and the evidence it called for.
    let mut held = Vec::new();
    let sampler = sampler_for(ctx, progress, interval);
    await_spawn(guard, spec, interrupted);
    // From the spawn on, its beats are read as they arrive.
    let now = crate::time::unix_seconds(jiff::Timestamp::now().as_microsecond());
    heartbeats.start(now - t0.elapsed().as_secs_f64());
    let mut index = 0u64;
    // The schedule's tick, apart from the samples' index: ticks missed are skipped, not caught up.
    let mut tick = 0u64;
    let mut behind: Option<String> = None;
    // Until the GPUs were read once: whether others already use them is said then.
    let mut gpus_unread = true;
    let mut samples = GroupCommit::new(ctx.log, &ctx.console, soak.subject(), interval);
    // The tree's CPU % between samples, for the status line.
    let mut cpu = crate::soak::sampler::CpuClock::new(process::ticks_per_second());
    let mut waits = Waits::new(&soak.work_dir, guard);
    let timed = cost::Loop::begin();
    let failure = loop {
        let due = t0 + interval.mul_f64(tick as f64);
        let status = match await_sample(&mut waits, due, guard, interrupted) {
            Ok(status) => status,
            Err(failure) => break Some(failure),
        };
        let command = status.command_state();
        let (elapsed, now_us) = (t0.elapsed(), jiff::Timestamp::now().as_microsecond());
        let running = command == CommandState::Running;
        let (mut sample, mut measures) = sampler.sample(index, elapsed, guard.pid, !running);
        sample.errors.extend(behind.take());
        let (beat_at, step) = read_beats(ctx, heartbeats, now_us, (&mut sample, &mut measures));
        if gpus_unread && sample.gpus.is_some() {
            gpus_unread = false;
            warn_of_others(&ctx.console, &sample, &measures);
        }
        seen.extend(sample.processes.iter().map(ProcessSample::identity));
        let failed_child = witnesses.saw(&mut sample, &status);
        let sample_cost = sample.sampler_cost_us;
        let status_line = status_line(ctx, &mut cpu, (&sample, &measures));
        metrics.observe(&mut sample, &measures, heartbeats.timed());
        let next = cost::time(Part::Watch, || {
            let observation = Observation {
                elapsed,
                now_us,
                progress: sample.progress,
                command,
                interrupted: interrupted.load(Ordering::Relaxed),
                failed_child,
                resources: Resources::of(&sample, &measures),
                beat_at_us: beat_at,
                step,
            };
            watch.observe(&observation)
        });
        let committing = Instant::now();
        so_far.took(&sample);
        if let Err(failure) = samples.push(sample, measures, watch.progress_noted()) {
            break Some(failure);
        }
        index += 1;
        // The sample's own cost and its commit's: what this thread spent on it.
        let cost = Duration::from_micros(sample_cost) + committing.elapsed();
        let (next_tick, missed) = next_tick(tick, t0.elapsed(), interval);
        tick = next_tick;
        behind = missed.map(|missed| fell_behind(missed, interval, cost));
        show(ctx, soak, (metrics, status_line), (elapsed, index), watch);
        let tree = Running {
            guard: guard.pid,
            seen,
            capture: &witnesses.capture,
        };
        let job = job.as_deref_mut();
        match next {
            Next::Continue => {
                let failure = alarm_seen((ctx, spec), job, &mut samples, &tree, &mut held);
                if let Some(failure) = failure {
                    break Some(failure);
                }
            }
            Next::Exited => {
                break exited_in_job((ctx, spec), job, &mut samples, (&status, &tree), &mut held);
            }
            Next::Fail(failure) => break Some(failure),
        }
    };
    timed.end(index);
    if let (Some(failure), Some(job)) = (&failure, job) {
        // The others are told at once; this rank's tree is stopped only once they captured.
        job.raise(ctx, spec, (failure.kind, &failure.reason), &mut held);
    }
    ctx.console.finish();
    // Whatever ended the sampling, the samples taken are recorded before the verdict; those a
    // full disk holds back go in with it.
    let (failure, mut unrecorded) = match samples.commit() {
        Ok(()) => (failure, samples.held()),
        Err(commit_failed) => (failure.or(Some(commit_failed)), samples.held()),
    };
    unrecorded.extend(held);
    (failure, unrecorded)
}

/// The beats since the last sample, into `measures` (why they could not be read into the
/// sample's errors; what is said once, on standard error), at `now_us` (Unix microseconds):
/// when the last that was progress arrived, and the step running now against its phase's
/// limit.
fn read_beats(
    ctx: &SoakContext,
    heartbeats: &mut Heartbeats,
    now_us: i64,
    (sample, measures): (&mut Sample, &mut Measures),
) -> (Option<i64>, Option<StepJudgement>) {
    let polled = cost::time(Part::Heartbeat, || heartbeats.poll(now_us));
    for news in &polled.news {
        ctx.console.warn(news);
    }
    sample.errors.extend(polled.error);
    measures.heartbeat = polled.beats.map(Box::new);
    (polled.progress_at_us, polled.step)
}

/// The status line of a sample, on a terminal only: nothing is formatted that nobody reads.
fn status_line(
    ctx: &SoakContext,
    cpu: &mut crate::soak::sampler::CpuClock,
    (sample, measures): (&Sample, &Measures),
) -> Option<StatusLine> {
    cost::time(Part::Status, || {
        ctx.console
            .shows_status()
            .then(|| StatusLine::of(sample, measures, cpu.advance(sample).1))
    })
}

/// What a sample shows outside the record once the watch judged it: the metrics file, rewritten,
/// and the status line after the sample `index`, taken at `elapsed`.
fn show(
    ctx: &SoakContext,
    soak: &Recording,
    (metrics, line): (&mut MetricsFile, Option<StatusLine>),
    (elapsed, index): (Duration, u64),
    watch: &Watch,
) {
    cost::time(Part::Metrics, || {
        metrics.write(watch.progress_noted().last_progress_at_us, &ctx.console);
    });
    let Some(line) = line else { return };
    cost::time(Part::Status, || {
        ctx.console.status(line.text(
            &soak.id,
            elapsed,
            index,
            watch.last_change(),
            watch.stale_in(elapsed),
        ));
    });
}

/// Waits for the sample `due`, then gives the guard's status — read before sampling: a sample
/// taken after the exit was known says so; the failure when the guard died.
fn await_sample(
    waits: &mut Waits,
    due: Instant,
    guard: &Guard,
    interrupted: &AtomicBool,
) -> Result<GuardStatus, Failure> {
    waits.until(due, guard, interrupted);
    match waits.status(guard) {
        (_, Some(failure)) => Err(died(failure, interrupted)),
        (status, None) => Ok(status),
    }
}

/// The failure of a guard that died: an interruption's, when unilab learns it was interrupted
/// just after (`scancel` and a job's end signal the whole step at once).
fn died(failure: Failure, interrupted: &AtomicBool) -> Failure {
    if poll_until(INTERRUPT_SKEW, LOOK_EVERY, || {
        interrupted.load(Ordering::Relaxed)
    }) {
        return Failure::new(
            FailureKind::Interrupted,
            "unilab was interrupted; the signal ended the soak's guard too",
        );
    }
    failure
}

/// A command that ended once its job had failed may have ended of it (a collective whose peer
/// is gone): the alarm is recorded and what is left of the tree captured, and under `stop` a
/// command that failed fails the soak as the job's. `None` (the verdict is the command's)
/// otherwise.
fn exited_in_job(
    (ctx, spec): (&SoakContext, &SoakSpec),
    job: Option<&mut JobWatch<'_>>,
    samples: &mut GroupCommit<'_>,
    (status, tree): (&GuardStatus, &Running<'_>),
    held: &mut Vec<(Subject, Event)>,
) -> Option<Failure> {
    let job = job?;
    let alarm = job.check(ctx, spec)?;
    if let Err(failure) = samples.commit() {
        return Some(failure);
    }
    let failure = job.seen_after_exit(ctx, spec, alarm, tree, held);
    failure.filter(|_| status.exit_code != Some(0))
}

/// One look for the job's alarm, a sample the soak goes on from; once seen, the samples taken
/// are committed before what it brings (the record of it, the evidence), and under `stop` the
/// soak's failure comes back (its tree is stopped behind the run's capture barrier).
fn alarm_seen(
    (ctx, spec): (&SoakContext, &SoakSpec),
    job: Option<&mut JobWatch<'_>>,
    samples: &mut GroupCommit<'_>,
    tree: &Running<'_>,
    held: &mut Vec<(Subject, Event)>,
) -> Option<Failure> {
    let job = job?;
    let alarm = cost::time(Part::Alarm, || job.check(ctx, spec))?;
    if let Err(failure) = samples.commit() {
        return Some(failure);
    }
    job.seen(ctx, spec, alarm, tree, held)
}

/// The sampler of a soak sampled every `interval`, its GPUs read by a stream of its own — none
/// on a host without a GPU tool, whose samples then have no GPU data and no error for it.
fn sampler_for(ctx: &SoakContext, progress: HeldDir, interval: Duration) -> Sampler {
    let gpus = ctx
        .gpu_tool_present
        .then(|| GpuStream::start(ctx.smi.clone(), interval, Some(ctx.guard_program.clone())));
    Sampler::new(PathBuf::from("/proc"), progress, gpus)
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

#[cfg(test)]
mod tests {
    use super::*;

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
