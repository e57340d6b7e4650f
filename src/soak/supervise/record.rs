//! What a soak records of itself beyond its samples: its start, before anything runs, and its
//! verdict — with the samples and the evidence a full disk held back — waiting a while for
//! space on a full disk before it gives up, saying so.

use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::beats::{self, Heartbeats};
use super::context::SoakContext;
use super::phase::Judgement;
use crate::event::soak::{Findings, JobMember, Outcome, RunBeats, SoakEnd, SoakStart};
use crate::event::{Event, Subject};
use crate::log::LogError;
use crate::process::{self, ProcSource, ProcessIdentity, SystemProc};
use crate::redact::redact;
use crate::soak::error::SoakError;
use crate::soak::flight;
use crate::soak::request::{SoakSpec, ms};
use crate::soak::runtime::Unusable;
use crate::soak::watch::Watch;

/// A soak whose start is recorded: its id and its private working directory.
pub(super) struct Recording {
    pub id: String,
    pub work_dir: PathBuf,
    /// Where the guard reports the command's start and exit.
    pub status_path: PathBuf,
    /// The heartbeat file, named to the command in `UNILAB_HEARTBEAT`; `None` where the
    /// soak's runtime directory could not be used.
    pub heartbeat_path: Option<PathBuf>,
    /// The flight recorder's directory (`fr/` of the runtime directory) and the variables set
    /// for the command that point there ([`flight::variables`]); `None` without one.
    pub flight: Option<(PathBuf, Vec<(String, String)>)>,
}

impl Recording {
    /// Creates the soak's working directory and its heartbeat file (in its runtime directory:
    /// where that cannot be used, the soak runs without heartbeats, and says so), and records
    /// its start.
    pub(super) fn begin(
        ctx: &SoakContext,
        spec: &SoakSpec,
    ) -> Result<(Self, Heartbeats), SoakError> {
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
        let limits = spec.step_limits.clone();
        let heartbeats =
            Heartbeats::create(spec.xdg_runtime_dir.as_deref(), ctx.paths.uid, &id, limits)
                .unwrap_or_else(|Unusable(why)| {
                    ctx.console.warn(&format!(
                        "{why}: the soak runs without heartbeats (`{}` is not set for the command)",
                        beats::VARIABLE
                    ));
                    Heartbeats::none(spec.step_limits.clone())
                });
        let flight = flight_of(ctx, spec, &heartbeats);
        let recording = Self {
            status_path: work_dir.join("guard-status"),
            heartbeat_path: heartbeats.path(),
            flight,
            work_dir,
            id,
        };
        // unilab's own variables, recorded as set for the command.
        let heartbeat = recording
            .heartbeat_path
            .as_ref()
            .map(|path| (beats::VARIABLE.to_owned(), path.display().to_string()))
            .into_iter()
            .chain(recording.command_variables().iter().cloned());
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
                    environment: masked_map(
                        &mut spec
                            .env
                            .iter()
                            .filter(|(k, _)| k != beats::VARIABLE)
                            .map(|(k, v)| (k, v)),
                    )
                    .into_iter()
                    .chain(heartbeat)
                    .collect(),
                    supervisor: me,
                    runtime_json: mask(&ctx.runtime_json),
                    ticks_per_second: process::ticks_per_second(),
                }),
                supervision: Some(spec.supervision.clone()),
                limits: Some(spec.limits.clone()),
                job: spec.job.as_ref().map(|run| JobMember {
                    job: run.member.job.as_str().to_owned(),
                    rank: Some(run.member.rank),
                    on_job_alarm: run.on_alarm,
                    run: Some(run.run.id.to_string()),
                }),
                command_lossy: spec.command_lossy,
            },
        )?;
        Ok((recording, heartbeats))
    }

    /// The flight recorder's variables set for the command.
    pub(super) fn command_variables(&self) -> &[(String, String)] {
        self.flight.as_ref().map_or(&[], |(_, v)| v.as_slice())
    }

    pub(super) fn subject(&self) -> Subject {
        Subject::Soak(self.id.clone())
    }
}

/// The flight recorder's directory in the soak's runtime directory (made here) and the
/// variables set for the command that point there, but for those the user set; `None`
/// without a runtime directory, or where the directory cannot be made (said).
fn flight_of(
    ctx: &SoakContext,
    spec: &SoakSpec,
    heartbeats: &Heartbeats,
) -> Option<(PathBuf, Vec<(String, String)>)> {
    let dir = heartbeats.runtime_dir()?;
    let fr = flight::create(&dir)
        .map_err(|e| {
            ctx.console.warn(&format!(
                "cannot create `{}`: {e}: the soak runs without PyTorch's flight recorder set",
                dir.join("fr").display()
            ));
        })
        .ok()?;
    let user_set = |name: &str| {
        spec.env.iter().any(|(k, _)| k == name)
            || (!spec.env_clear && std::env::var_os(name).is_some())
    };
    let variables = flight::variables(&fr, user_set);
    Some((fr, variables))
}

/// How long the end of a soak waits for space on a full disk to record its verdict (and the
/// samples held back) and its artifact: then it gives up, saying so (exit 3); the log keeps
/// what it had, and the soak is reported abandoned later.
const FULL_DISK_PATIENCE: Duration = Duration::from_secs(10);

/// Records the verdict (with the samples a full disk held back); one that cannot be recorded is
/// said on standard error at least.
pub(super) fn record_verdict(
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
pub(super) fn record_patiently(
    ctx: &SoakContext,
    events: Vec<(Subject, Event)>,
) -> Result<(), SoakError> {
    let started = Instant::now();
    let mut warned = false;
    loop {
        match ctx.log.append_all(events.iter().cloned()) {
            Ok(_) => return Ok(()),
            Err(e @ LogError::NoSpace { .. }) if started.elapsed() < FULL_DISK_PATIENCE => {
                if !warned {
                    warned = true;
                    ctx.console.warn(&format!(
                        "{e}: waiting up to {} for space to record the verdict",
                        crate::text::duration(FULL_DISK_PATIENCE.as_secs_f64())
                    ));
                }
                // Each try opens the log again (a repair after the failed commit): not too often.
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The event that ends the soak: its verdict and what the run ended with, its output's tails
/// masked as everything recorded is.
pub(super) fn finished(
    judged: Judgement,
    watch: &Watch,
    spec: &SoakSpec,
    heartbeat: Option<RunBeats>,
) -> Event {
    let Judgement {
        outcome,
        exit,
        child,
        limit,
        stopped,
        ended,
        times,
        witnessed,
    } = judged;
    Event::finished(
        SoakEnd {
            outcome,
            exit,
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
            oom_kills: witnessed.oom.kills,
            unkillable: stopped.unkillable,
            gpu_release: witnessed.gpu_release,
            heartbeat: heartbeat.map(Box::new),
        },
        limit,
    )
}
