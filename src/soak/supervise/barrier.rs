//! The capture barrier: no rank of a failing run signals its tree until every rank registered
//! in the run has captured its evidence, or a bound has passed. The first teardown is what
//! breaks the others' collectives — a rank whose peer's socket closes exits at once, as Gloo's
//! do — so a rank that stopped its tree as soon as it had its own evidence would leave the
//! others nothing to capture.
//!
//! Each rank marks its capture in the run (`captured/<rank>`, [`mark_captured`]): the one made
//! at the alarm, or before its own teardown, whichever came first; `captured: false` at once
//! under `--on-job-alarm ignore`. Before its first signal a rank waits for the others' marks
//! ([`hold`]) — two sample intervals and the time a capture may take, 30 s at most; 5 s for a
//! rank being interrupted (`scancel` gives a step Slurm's KillWait, 30 s by default, before
//! SIGKILL) — not for a rank that has ended, nor for one on this host whose supervisor is gone.
//! Then it marks its teardown (`torn/<rank>`, [`mark_torn`]): a capture made after the run's
//! first teardown says how late it came (`late_by`). Across hosts the barrier holds as far as
//! the shared filesystem shows the files in time (NFS: `actimeo`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::context::SoakContext;
use crate::job::JobRun;
use crate::soak::request::SoakSpec;
use crate::text::duration;
use crate::time::unix_seconds;

/// The longest a rank waits for the others' captures.
const BOUND_MAX: Duration = Duration::from_secs(30);
/// The longest an interrupted rank waits for them.
const INTERRUPTED_MAX: Duration = Duration::from_secs(5);
/// How often the run's marks are looked at while waiting: a few dozen small files, over NFS.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// How long a rank of the soak `spec` describes, whose capture may take `capture` (the
/// evidence's budget), waits for the others': two sample intervals and `capture` and the dump
/// signal's wait, [`BOUND_MAX`] at most; [`INTERRUPTED_MAX`] at most when `interrupted`.
pub(super) fn bound(spec: &SoakSpec, capture: Duration, interrupted: bool) -> Duration {
    let interval = Duration::from_millis(spec.parameters.sample_interval_ms);
    let dump = Duration::from_millis(spec.supervision.dump_wait_ms);
    let bound = (interval * 2 + capture + dump).min(BOUND_MAX);
    if interrupted {
        bound.min(INTERRUPTED_MAX)
    } else {
        bound
    }
}

/// Marks this rank's capture in its run (`captured`: whether it captured anything), unless it
/// is marked already; says so when it came after the run's first teardown.
pub(super) fn mark_captured(ctx: &SoakContext, job: &JobRun, captured: bool) {
    let now = unix_seconds(jiff::Timestamp::now().as_microsecond());
    match job.run.mark_captured(job.member.rank, captured, now) {
        Ok(Some(mark)) if mark.late_by > 0.0 => ctx.console.warn(&format!(
            "this rank's evidence was captured {} after the first teardown of run `{}`: what its tree was doing may be that teardown's doing",
            duration(mark.late_by),
            job.run.id
        )),
        Ok(_) => {}
        Err(e) => ctx.console.warn(&format!(
            "{}: the other ranks of the run may wait for this rank's capture until their bound passes",
            crate::diagnostic::chain_text(&e)
        )),
    }
}

/// Waits until every other rank registered in this rank's run has marked its capture, has
/// ended, or (on this host) has lost its supervisor — or `bound` has passed, or `hurry` says
/// to stop now — then marks this rank's teardown. What was not waited for is said.
pub(super) fn hold(ctx: &SoakContext, job: &JobRun, bound: Duration, hurry: &dyn Fn() -> bool) {
    let started = Instant::now();
    let mut said = false;
    let missing = loop {
        let missing = missing(ctx, job);
        if missing.is_empty() || hurry() || started.elapsed() >= bound {
            break missing;
        }
        if !std::mem::replace(&mut said, true) {
            ctx.console.note(&format!(
                "run `{}` of job `{}`: waiting up to {} for {} to capture {} evidence before this rank's tree is stopped",
                job.run.id,
                job.member.job,
                duration(bound.as_secs_f64()),
                ranks(&missing),
                their(&missing)
            ));
        }
        std::thread::sleep(LOOK_EVERY.min(bound.saturating_sub(started.elapsed())));
    };
    if !missing.is_empty() {
        ctx.console.warn(&format!(
            "{} of run `{}` had not captured {} evidence after {}: this rank's tree is stopped anyway",
            ranks(&missing),
            job.run.id,
            their(&missing),
            duration(started.elapsed().as_secs_f64())
        ));
    }
    mark_torn(ctx, job);
}

/// Marks this rank's first signal to its tree: a capture of another rank made after it says
/// how late it came.
fn mark_torn(ctx: &SoakContext, job: &JobRun) {
    let now = unix_seconds(jiff::Timestamp::now().as_microsecond());
    if let Err(e) = job.run.mark_torn(job.member.rank, now) {
        ctx.console.warn(&format!(
            "{}: a later capture of another rank will not say it came after this teardown",
            crate::diagnostic::chain_text(&e)
        ));
    }
}

/// The other ranks of the run still to capture: registered, not marked, not ended, and not of
/// a supervisor this host knows is gone.
fn missing(ctx: &SoakContext, job: &JobRun) -> BTreeSet<u32> {
    let (ranks, _) = job.run.ranks();
    let (captured, _) = job.run.captures();
    ranks
        .into_iter()
        .filter(|entry| {
            entry.rank != job.member.rank
                && !captured.contains_key(&entry.rank)
                && entry.ended_at.is_none()
                && !job.gone(&ctx.paths.host, entry)
        })
        .map(|entry| entry.rank)
        .collect()
}

/// `its` for one rank, `their` for more.
fn their(ranks: &BTreeSet<u32>) -> &'static str {
    if ranks.len() == 1 { "its" } else { "their" }
}

/// `rank 3`, `ranks 1, 3`.
fn ranks(ranks: &BTreeSet<u32>) -> String {
    let list: Vec<String> = ranks.iter().map(u32::to_string).collect();
    match list.len() {
        1 => format!("rank {}", list[0]),
        _ => format!("ranks {}", list.join(", ")),
    }
}
