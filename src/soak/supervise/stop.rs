//! The teardown, once the soak is decided: evidence of the tree captured, its MPS clients ended
//! through their daemons, the evidence committed before the first signal, the dump signal and
//! its wait, then — for a rank of a failing run — the other ranks' captures waited for
//! ([`barrier`]), then the tree stopped (see [`stop_tree`]), what it leaked named with its
//! credentials masked.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::barrier;
use super::child::Guard;
use super::context::{LOOK_EVERY, SoakContext};
use crate::event::soak::{FailureKind, MpsTeardown};
use crate::event::{Event, Subject};
use crate::job::JobRun;
use crate::process::{ProcStat, ProcessIdentity, Signal, SystemProc};
use crate::soak::capture::Capture;
use crate::soak::request::SoakSpec;
use crate::soak::teardown::{Hands, SETTLE, Stopped, SystemHands, Tree, stop_tree};
use crate::time::poll_until;

/// Stops the soak's tree (see [`stop_tree`]) once the soak is decided; the leaks, their
/// credentials masked, and what no signal could end. Before the first signal the evidence is
/// captured, the tree's MPS clients ended, the evidence recorded, then the dump signal sent and
/// its wait kept; then, for a rank of `failing` (its run, failing or being interrupted), its
/// capture is marked and the other ranks' waited for ([`barrier::hold`]). The evidence comes
/// back when it could not be recorded (a full disk), to go in with the verdict.
pub(super) fn teardown(
    ctx: &SoakContext,
    spec: &SoakSpec,
    (guard, capture): (&Guard, &Capture),
    seen: &HashSet<ProcessIdentity>,
    (failure, interrupted): (Option<FailureKind>, &AtomicBool),
    failing: Option<&JobRun>,
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
    let guard_done = || guard.done();
    let mut unrecorded = None;
    let grace = Duration::from_millis(spec.parameters.shutdown_grace_ms);
    let before_first = |live: &[ProcStat], trigger| {
        unrecorded = capture_evidence(
            ctx,
            spec,
            capture,
            (&tree, &hands),
            live,
            (trigger, true),
            None,
        )
        .map(|(_, event)| event);
        if let Some(job) = failing {
            barrier::mark_captured(ctx, job, true);
            let interrupted = failure == Some(FailureKind::Interrupted);
            let bound = barrier::bound(spec, capture.budget(), interrupted);
            barrier::hold(ctx, job, bound, &hurry);
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
        leak.cmdline = spec
            .secrets
            .mask_command_line_kept(&leak.cmdline, crate::event::soak::CMDLINE_BYTES);
    }
    (stopped, unrecorded)
}

/// Captures the evidence of the tree's `live` processes for `trigger` and records it, then
/// sends the dump signal, if one is asked for, and keeps its wait. When the tree is about to be
/// stopped (`stopping`), its MPS clients are ended through their daemons between the capture
/// and the record, which says so: no signal of the teardown, the dump signal included, reaches
/// a client its server still serves. The capture at a job's alarm is no teardown's: its tree
/// runs on, served, and gets the dump signal as asked (one a trainer handles, as
/// `faulthandler` does). `note` is what the capture could not see, said among what was
/// unavailable. The evidence comes back when the log could not take it (a full disk), to go in
/// with the verdict.
pub(super) fn capture_evidence(
    ctx: &SoakContext,
    spec: &SoakSpec,
    capture: &Capture,
    (tree, hands): (&Tree<'_>, &SystemHands<'_>),
    live: &[ProcStat],
    (trigger, stopping): (FailureKind, bool),
    note: Option<&str>,
) -> Option<(Subject, Event)> {
    let subject = Subject::Soak(spec.soak_id.clone());
    let mut evidence = capture.take(live, trigger, jiff::Timestamp::now().as_microsecond());
    evidence.unavailable.extend(note.map(str::to_owned));
    if stopping {
        evidence.mps = end_mps_clients(ctx, live);
    }
    let event = Event::evidence_captured(evidence);
    let unrecorded = match ctx.log.append(subject.clone(), event.clone()) {
        Ok(_) => None,
        Err(e) => {
            ctx.console.warn(&format!(
                "{e}: the evidence of the soak's tree is recorded with the verdict instead"
            ));
            Some((subject, event))
        }
    };
    if let Some(number) = spec.supervision.dump_signal {
        for stat in tree.live() {
            hands.signal(stat.identity(), Signal::Dump(number));
        }
        let wait = Duration::from_millis(spec.supervision.dump_wait_ms);
        poll_until(wait, LOOK_EVERY, || tree.live().is_empty());
    }
    unrecorded
}

/// Asks each MPS daemon this user recorded on this host, and can prove its own, to end its
/// clients among `live` (see [`crate::mps::clients`]), within twice the control tool's timeout;
/// what was ended, and what stood in the way, said on the console.
fn end_mps_clients(ctx: &SoakContext, live: &[ProcStat]) -> Vec<MpsTeardown> {
    let snapshot = match ctx.log.snapshot() {
        Ok(snapshot) => snapshot,
        Err(e) => {
            ctx.console.warn(&crate::mps::clients::records_unread(&e));
            return Vec::new();
        }
    };
    let tree: Vec<ProcessIdentity> = live.iter().map(ProcStat::identity).collect();
    let teardown = crate::mps::clients::for_tree(
        ctx.paths,
        &snapshot,
        &SystemProc::default(),
        crate::tool::mps_control(),
        &tree,
    );
    for note in &teardown.notes {
        ctx.console.warn(note);
    }
    for ended in &teardown.terminated {
        ctx.console.note(&format!(
            "MPS daemon {} (server {}) ended the tree's clients {}",
            ended.daemon,
            ended.server_pid,
            ended
                .terminated
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    teardown.terminated
}
