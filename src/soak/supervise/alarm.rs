//! A rank's side of its run's alarm (`--job`, or Slurm's job): the first rank whose soak trips
//! a failure raises the alarm ([`JobWatch::raise`]); every other rank looks for it once a
//! sample, one `fstatat` ([`JobWatch::check`]), and on seeing it records `soak_job_alarm_seen`,
//! then, as `--on-job-alarm` says, captures its evidence at once with trigger `job_alarm` (the
//! same capture as its own failure, the dump signal included) and keeps supervising
//! (`capture`), or also fails the soak as `job_failed` (`stop`), or does neither (`ignore`).
//! Either way it marks its capture in the run ([`super::barrier`]): no rank of the run stops
//! its tree before every rank has captured, so every rank's evidence is of one moment, the one
//! the first rank failed at. A rank whose command ended before it saw the alarm captures what
//! is left of its tree, and says so.
//!
//! An alarm that names another job or run, or a time that is no time, before this rank joined
//! its run or more than a minute ahead of this host's clock, is not believed
//! ([`crate::job::doubt`]): said once in a warning, neither recorded nor acted on. Any rank of
//! the user can write the file, and a damaged one reads as anything.

use std::collections::HashSet;

use super::barrier;
use super::context::SoakContext;
use super::stop::capture_evidence;
use crate::event::soak::{FailureKind, JobAlarmSeen, OnJobAlarm};
use crate::event::{Event, Subject};
use crate::job::JobRun;
use crate::job::alarm::{Alarm, Raised};
use crate::process::{ProcessIdentity, SystemProc};
use crate::soak::capture::Capture;
use crate::soak::request::SoakSpec;
use crate::soak::teardown::{SystemHands, Tree};
use crate::soak::watch::Failure;
use crate::text::foreign;

/// What a rank knows of its run's alarm.
pub(super) struct JobWatch<'a> {
    run: &'a JobRun,
    /// The alarm is seen (or this rank's own is the run's): it is looked for no more.
    settled: bool,
    /// The run is failing, as this rank knows: it raised the alarm, or lost the race to one it
    /// believes, or saw one. Its tree is then stopped only once the run's ranks have captured.
    alarmed: bool,
    /// An alarm that is not believed was warned of: said once.
    doubted: bool,
}

/// The tree as it runs, for a capture while sampling goes on.
pub(super) struct Running<'a> {
    pub guard: u32,
    pub seen: &'a HashSet<ProcessIdentity>,
    pub capture: &'a Capture,
}

impl<'a> JobWatch<'a> {
    /// The watch of a soak that is a rank of a job; `None` for one that is not.
    pub(super) fn of(spec: &'a SoakSpec) -> Option<Self> {
        spec.job.as_ref().map(|run| Self {
            run,
            settled: false,
            alarmed: false,
            doubted: false,
        })
    }

    /// The rank's run, when it is failing: its tree is stopped behind the capture barrier.
    pub(super) fn alarmed(&self) -> Option<&'a JobRun> {
        self.alarmed.then_some(self.run)
    }

    /// The rank's part in its job.
    pub(super) fn job(&self) -> &'a JobRun {
        self.run
    }

    /// Once a sample, one `fstatat`: the alarm another rank raised, the first time it is there
    /// and believed.
    pub(super) fn check(&mut self, ctx: &SoakContext, spec: &SoakSpec) -> Option<Alarm> {
        if self.settled {
            return None;
        }
        match self.run.run.check() {
            Ok(Some(alarm)) if alarm.soak_id != spec.soak_id => self.believed(ctx, alarm),
            Ok(_) => None,
            Err(e) => {
                // Said once; the job's alarm is not looked for again.
                self.settled = true;
                ctx.console.warn(&format!(
                    "{e}: this rank no longer looks for its job's alarm"
                ));
                None
            }
        }
    }

    /// `alarm` if it is to be believed; else `None`, warned of the first time.
    fn believed(&mut self, ctx: &SoakContext, alarm: Alarm) -> Option<Alarm> {
        let now = crate::time::unix_seconds(jiff::Timestamp::now().as_microsecond());
        let run = (&self.run.member.job, &self.run.run.id);
        let Some(doubt) = alarm.doubt(run, self.run.joined_at, now) else {
            return Some(alarm);
        };
        if !std::mem::replace(&mut self.doubted, true) {
            ctx.console.warn(&format!(
                "the job's alarm `{}` (rank {} on {}, {}) is not believed: {doubt}; this rank ignores it",
                self.run.run.alarm_path().display(),
                rank_text(alarm.rank),
                foreign(&alarm.host),
                foreign(&alarm.failure_kind),
            ));
        }
        None
    }

    /// Another rank raised `alarm`: it is recorded as seen, and the evidence captured (unless
    /// `ignore`); under `stop` the soak fails as `job_failed`. What the log could not take goes
    /// to `held`, to be recorded with the verdict.
    pub(super) fn seen(
        &mut self,
        ctx: &SoakContext,
        spec: &SoakSpec,
        alarm: Alarm,
        tree: &Running<'_>,
        held: &mut Vec<(Subject, Event)>,
    ) -> Option<Failure> {
        self.settled = true;
        ctx.console.note(&format!(
            "job `{}`: rank {} on {} failed first ({}): {}",
            alarm.job,
            rank_text(alarm.rank),
            alarm.host,
            alarm.failure_kind,
            match self.run.on_alarm {
                OnJobAlarm::Capture => "capturing this rank's evidence, and supervising on",
                OnJobAlarm::Stop => "capturing this rank's evidence, then stopping it",
                OnJobAlarm::Ignore => "ignored (--on-job-alarm ignore)",
            }
        ));
        let failure = (self.run.on_alarm == OnJobAlarm::Stop).then(|| job_failed(&alarm));
        self.alarmed = true;
        record(ctx, spec, seen(&alarm), held);
        self.capture(ctx, spec, tree, None, held);
        failure
    }

    /// Another rank raised `alarm`, seen once the command had ended (a collective whose peer
    /// went ends a rank on its own): it is recorded as seen, and what is left of the tree
    /// captured, saying the command had ended; under `stop` the job's failure comes back.
    pub(super) fn seen_after_exit(
        &mut self,
        ctx: &SoakContext,
        spec: &SoakSpec,
        alarm: Alarm,
        tree: &Running<'_>,
        held: &mut Vec<(Subject, Event)>,
    ) -> Option<Failure> {
        self.settled = true;
        self.alarmed = true;
        let failure = (self.run.on_alarm == OnJobAlarm::Stop).then(|| job_failed(&alarm));
        record(ctx, spec, seen(&alarm), held);
        let ended = "the command had ended before this rank saw the job's alarm: what was left of its tree is all there was to capture";
        self.capture(ctx, spec, tree, Some(ended), held);
        failure
    }

    /// The capture at the run's alarm, with trigger `job_alarm`, unless `--on-job-alarm
    /// ignore`; then this rank's mark in the run (`captured: false` under `ignore`). `note`
    /// says what the capture could not see.
    fn capture(
        &self,
        ctx: &SoakContext,
        spec: &SoakSpec,
        tree: &Running<'_>,
        note: Option<&str>,
        held: &mut Vec<(Subject, Event)>,
    ) {
        if self.run.on_alarm == OnJobAlarm::Ignore {
            barrier::mark_captured(ctx, self.run, false);
            return;
        }
        let proc = SystemProc::default();
        // The supervisor's own children while it samples are its tools (the GPU stream),
        // not orphans of the tree: no pid is `u32::MAX`, so none counts as one.
        let live = Tree {
            proc: &proc,
            guard: tree.guard,
            me: u32::MAX,
            seen: tree.seen,
        };
        let hands = SystemHands {
            proc: &proc,
            uid: ctx.paths.uid,
        };
        let processes = live.live();
        held.extend(capture_evidence(
            ctx,
            spec,
            tree.capture,
            (&live, &hands),
            &processes,
            (FailureKind::JobAlarm, false),
            note,
        ));
        barrier::mark_captured(ctx, self.run, true);
    }

    /// This soak tripped `failure`: it raises the job's alarm, unless the alarm is settled
    /// already or the failure is not this rank's own (the job's, or an interruption, which
    /// ends every rank of a cancelled job at once). A rank that lost the race records the
    /// winner's alarm as seen. Returns whether an alarm was raised.
    pub(super) fn raise(
        &mut self,
        ctx: &SoakContext,
        spec: &SoakSpec,
        failure: (FailureKind, &str),
        held: &mut Vec<(Subject, Event)>,
    ) -> bool {
        let (kind, reason) = failure;
        if self.settled || matches!(kind, FailureKind::JobFailed | FailureKind::Interrupted) {
            return false;
        }
        self.settled = true;
        let alarm = Alarm::new(
            &self.run.member.job,
            Some(&self.run.run.id),
            Some(self.run.member.rank),
            &ctx.paths.host,
            &spec.soak_id,
            kind.as_str(),
            reason,
            jiff::Timestamp::now().as_microsecond(),
        );
        match self.run.run.raise(&alarm) {
            Ok(Raised::Won) => ctx.console.note(&format!(
                "job `{}`: this rank failed first; its alarm tells the others",
                alarm.job
            )),
            Ok(Raised::Lost(first)) => {
                if first.soak_id == spec.soak_id {
                    self.alarmed = true;
                    return true;
                }
                // Lost to an alarm not believed: nothing was told, nothing is recorded.
                let first = self.believed(ctx, first);
                let Some(first) = first else {
                    return false;
                };
                record(ctx, spec, seen(&first), held);
            }
            Err(e) => {
                ctx.console.warn(&format!(
                    "{e}: the other ranks of the job are not told of this failure"
                ));
                return false;
            }
        }
        self.alarmed = true;
        true
    }
}

/// `alarm` as this soak saw it, now (recorded without its run: the soak's start records it).
fn seen(alarm: &Alarm) -> Event {
    Event::SoakJobAlarmSeen(Box::new(JobAlarmSeen {
        alarm: alarm.recorded(),
        seen_at: crate::time::unix_seconds(jiff::Timestamp::now().as_microsecond()),
    }))
}

/// Records `event` of the soak, or holds it for the verdict when the log cannot take it.
fn record(ctx: &SoakContext, spec: &SoakSpec, event: Event, held: &mut Vec<(Subject, Event)>) {
    let subject = Subject::Soak(spec.soak_id.clone());
    if let Err(e) = ctx.log.append(subject.clone(), event.clone()) {
        ctx.console.warn(&format!(
            "{e}: the job's alarm is recorded with the verdict instead"
        ));
        held.push((subject, event));
    }
}

/// The failure of a rank stopped by `alarm` (`--on-job-alarm stop`).
fn job_failed(alarm: &Alarm) -> Failure {
    Failure::new(
        FailureKind::JobFailed,
        format!(
            "rank {} of job `{}` on {} failed first ({}: {}); --on-job-alarm stop",
            rank_text(alarm.rank),
            alarm.job,
            alarm.host,
            alarm.failure_kind,
            alarm.reason
        ),
    )
}

fn rank_text(rank: Option<u32>) -> String {
    rank.map_or_else(|| "?".to_owned(), |rank| rank.to_string())
}
