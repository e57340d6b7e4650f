//! `soak run`: the I/O shell around the rules in [`watch`](super::watch), as a soak's phases
//! (see [`phase`]): it records the start, spawns the guard, samples on schedule and feeds each
//! sample to the [`Watch`], stops the tree, reaps the guard, asks [`verdict`] for the outcome,
//! records it, and writes the artifact and the report.
//!
//! Here the order of the end is kept: the samples taken are committed before the teardown; the
//! evidence is captured and committed before the first signal; what a full disk held back of
//! either goes in with the verdict; the artifact and the report are written from the log once
//! the verdict is recorded, and neither's failure undoes it.
//!
//! - [`context`]: what a soak runs against;
//! - [`phase`]: the phases and their order, pure over `phase::Effects`;
//! - [`schedule`]: the samples on a fixed schedule, each fed to the watch;
//! - [`commit`]: the samples' group commit and the full-disk holdback;
//! - [`record`]: the start and the verdict; [`written`]: the artifact and the report;
//! - [`child`]: the guard and the command's output tails; [`stop`]: the teardown;
//! - [`beats`]: the heartbeat file; [`metrics`]: the metrics file (`--metrics-file`);
//! - [`alarm`]: a rank's side of its job's alarm; [`barrier`]: no rank of a failing run stops
//!   its tree before the run's ranks have captured;
//! - [`status`]: the live status line; [`waits`]: the waits between samples.
//!
//! [`verdict`]: crate::soak::watch::verdict

mod alarm;
mod barrier;
mod beats;
mod child;
mod commit;
mod context;
pub(crate) mod metrics;
mod phase;
mod record;
mod schedule;
mod status;
mod stop;
mod waits;
mod written;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use self::beats::Heartbeats;
use self::child::Guard;
pub(crate) use self::context::SoakContext;
use self::metrics::MetricsFile;
use self::phase::{Effects, Ended, Rules, Witnessed};
use self::record::Recording;
use self::schedule::{SampledSoFar, Sampling};
pub(crate) use self::written::Renderers;
use super::artifact::Placement;
use super::cost::{self, Part};
use super::error::{ProgressDirProblem, SoakError};
use super::guard::GuardStatus;
use super::request::SoakSpec;
use super::sampler::HeldDir;
use super::teardown::Stopped;
use super::watch::{Failure, Watch};
use super::witnesses::Witnesses;
use crate::event::soak::{FailureKind, Outcome};
use crate::event::{Event, Subject};
use crate::process::ProcessIdentity;
use crate::time::monotonic_ns;

/// What `soak run` reports.
#[derive(Debug)]
pub(crate) struct RunReport {
    pub soak_id: String,
    pub outcome: Outcome,
    pub artifact: PathBuf,
    /// The artifact's digest, or why it could not be written (the verdict is recorded: it can
    /// be exported later).
    pub digest: Result<String, SoakError>,
    /// The report asked for, and whether it was written.
    pub report: Option<(PathBuf, Result<(), SoakError>)>,
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
/// artifact or the report fails.
pub(crate) fn run(
    ctx: &SoakContext,
    spec: &SoakSpec,
    interrupted: &AtomicBool,
) -> Result<RunReport, SoakError> {
    // Held from now on: what the soak watches cannot be swapped under it.
    let held = HeldDir::open(&spec.progress_dir).map_err(|e| SoakError::ProgressDir {
        path: spec.progress_dir.clone(),
        problem: ProgressDirProblem::CannotOpen(e),
    })?;
    cost::from_env();
    let (soak, heartbeats) = cost::time(Part::Start, || Recording::begin(ctx, spec))?;
    let mut witnesses = cost::time(Part::Start, || Witnesses::start(spec, ctx.paths.uid));
    witnesses.capture.flight = soak.flight.as_ref().map(|(dir, _)| dir.clone());
    // Orphans of the guard's tree — should the guard itself die — come to this process instead
    // of init, so the soak can still find, stop and reap them.
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let mut watch = watch_for(spec, &held);
    let mut shell = Shell {
        ctx,
        spec,
        soak: &soak,
        witnesses,
        seen: HashSet::new(),
        unrecorded: Vec::new(),
        interrupted,
        job: alarm::JobWatch::of(spec),
        heartbeats,
        metrics: MetricsFile::of(ctx, spec),
        so_far: SampledSoFar::default(),
    };
    let rules = Rules {
        parameters: &spec.parameters,
        require_progress: spec.require_progress,
    };
    let judged = phase::drive(&mut shell, held, &mut watch, rules);
    let outcome = judged.outcome.clone();
    // A failure only the verdict tells (the command failed, ran too short) is this rank's too:
    // the job's other ranks are told now, if no alarm was raised or seen yet.
    if let (Some(job), Some(kind)) = (shell.job.as_mut(), outcome.failure_kind) {
        job.raise(ctx, spec, (kind, &outcome.reason), &mut shell.unrecorded);
    }
    let stalled = outcome.failure_kind == Some(FailureKind::StaleProgress);
    let judged_run = judged.times.run;
    let beats = shell.heartbeats.finish(judged_run, stalled);
    // The samples and the evidence a full disk held back, a last sample of the beats no sample
    // holds, then the verdict: one commit.
    let mut events = std::mem::take(&mut shell.unrecorded);
    if let Some((unsampled, after_spawn)) = beats.unsampled {
        let last = shell
            .so_far
            .last_sample(unsampled, after_spawn, watch.progress_noted());
        events.push((soak.subject(), last));
    }
    events.push((
        soak.subject(),
        record::finished(judged, &watch, spec, beats.run),
    ));
    let recorded = cost::time(Part::Verdict, || {
        record::record_verdict(ctx, &soak.id, &outcome, events)
    });
    // Nothing reads the heartbeat file any more.
    shell.heartbeats.remove();
    // The verdict as decided, recorded or not: a file left saying "running" would be served
    // as such for as long as it stays.
    let passed = outcome.status == crate::event::soak::OutcomeStatus::Passed;
    shell.metrics.finish(passed, judged_run, &ctx.console);
    recorded?;
    let _ = std::fs::remove_dir_all(&soak.work_dir);
    // Over what is there only with `--force`: another soak given the same name keeps its file.
    let placement = if spec.force {
        Placement::Replace
    } else {
        Placement::New
    };
    let (digest, report) = cost::time(Part::Artifact, || {
        let digest = written::write_artifact(
            ctx.log,
            &soak.id,
            (&spec.output, placement),
            &ctx.render,
            |events| record::record_patiently(ctx, events),
        );
        let report = spec.report.clone().map(|path| {
            let written = written::write_report(ctx.log, &soak.id, (&path, placement), &ctx.render);
            (path, written)
        });
        (digest, report)
    });
    cost::write();
    Ok(RunReport {
        soak_id: soak.id,
        outcome,
        artifact: spec.output.clone(),
        digest,
        report,
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

/// The phases' effects on this host: the guard spawned, sampled, its tree stopped, reaped.
struct Shell<'a> {
    ctx: &'a SoakContext<'a>,
    spec: &'a SoakSpec,
    soak: &'a Recording,
    witnesses: Witnesses,
    /// Every process of the tree a sample saw, to find them again should the guard die.
    seen: HashSet<ProcessIdentity>,
    /// What the log could not take yet (a full disk): samples, the evidence.
    unrecorded: Vec<(Subject, Event)>,
    interrupted: &'a AtomicBool,
    /// The job's alarm, for a rank of a job.
    job: Option<alarm::JobWatch<'a>>,
    heartbeats: Heartbeats,
    metrics: MetricsFile,
    /// What the samples taken leave for a last one.
    so_far: SampledSoFar,
}

impl Effects for Shell<'_> {
    type Guard = Guard;
    type Progress = HeldDir;

    fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::Relaxed)
    }

    fn now_ns(&self) -> u64 {
        monotonic_ns()
    }

    fn spawn(&mut self) -> Result<Guard, Failure> {
        let files = (&*self.soak.status_path, self.soak.heartbeat_path.as_deref());
        let variables = self.soak.command_variables();
        cost::time(Part::Start, || {
            Guard::spawn(self.ctx, self.spec, files, variables)
        })
    }

    fn sample(&mut self, guard: &Guard, progress: HeldDir, watch: &mut Watch) -> Option<Failure> {
        let (failure, held_back) = schedule::sample_until_done(
            self.ctx,
            self.spec,
            self.soak,
            guard,
            Sampling {
                progress,
                seen: &mut self.seen,
                witnesses: &mut self.witnesses,
                job: self.job.as_mut(),
                heartbeats: &mut self.heartbeats,
                metrics: &mut self.metrics,
                so_far: &mut self.so_far,
            },
            watch,
            self.interrupted,
        );
        self.unrecorded.extend(held_back);
        failure
    }

    fn stop(&mut self, guard: &Guard, trigger: Option<FailureKind>) -> Stopped {
        // A rank of a failing run, or of one being cancelled, stops its tree behind the run's
        // capture barrier.
        let failing = self.job.as_ref().and_then(|job| {
            job.alarmed()
                .or_else(|| (trigger == Some(FailureKind::Interrupted)).then(|| job.job()))
        });
        let (stopped, evidence) = cost::time(Part::Teardown, || {
            stop::teardown(
                self.ctx,
                self.spec,
                (guard, &self.witnesses.capture),
                &self.seen,
                (trigger, self.interrupted),
                failing,
            )
        });
        self.unrecorded
            .extend(evidence.map(|event| (self.soak.subject(), event)));
        stopped
    }

    fn reap(&mut self, guard: Guard) -> Ended {
        cost::time(Part::Teardown, || guard.finish())
    }

    fn witnessed(&mut self, status: &GuardStatus) -> Witnessed {
        let (oom, gpu_release) = cost::time(Part::Teardown, || {
            self.witnesses.end(&self.ctx.smi, self.spec, status)
        });
        Witnessed { oom, gpu_release }
    }
}
