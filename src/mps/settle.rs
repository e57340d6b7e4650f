//! Starts that were cut short: a `daemon_starting` whose starter is gone, with nothing after it.
//! What such a start launched is found, stopped and recorded as a failed start; a start under
//! way is waited for.

use std::path::Path;
use std::time::Duration;

use super::decide::{self, OpenStart, Starter};
use super::dirs;
use super::error::MpsError;
use super::lock;
use super::spec::StartSpec;
use super::stop::{LAUNCH_GRACE, halt, what_was_stopped};
use super::{DaemonRecord, Mps};
use crate::env::EnvVars;
use crate::event::{Event, Subject, TopologyMode};
use crate::log::{EventLog, LogError, Snapshot};
use crate::proc_read::Blocked;
use crate::process::{self, ProcessIdentity};
use crate::projection::{DaemonJobs, IntentRow, Intents};

/// A start under way (or cut short): the daemon's name, its intent, and the job it runs in.
struct Start {
    name: String,
    intent: IntentRow,
    job: Option<String>,
}

/// What settling cut-short starts did: the names of the starts settled, and the processes it
/// could not check for being what one of them launched.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    pub names: Vec<String>,
    pub skipped: Vec<Skipped>,
}

impl Settled {
    /// Takes in what settling one start skipped, each process once.
    fn skipped(&mut self, skipped: Vec<Skipped>) {
        for one in skipped {
            if !self
                .skipped
                .iter()
                .any(|s| s.blocked.pid == one.blocked.pid)
            {
                self.skipped.push(one);
            }
        }
    }
}

/// A process a settle could not check, because reading it did not return (see `proc_read`):
/// it was left alone.
#[derive(Debug)]
pub(crate) struct Skipped {
    /// The start being settled.
    pub start: String,
    /// The process's name (`comm`).
    pub process: String,
    pub blocked: Blocked,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "settling the cut-short start of `{}` skipped pid {} (`{}`): {}; it was left alone",
            self.start, self.blocked.pid, self.process, self.blocked
        )
    }
}

/// Every start under way, with its job.
fn starts(snapshot: &Snapshot) -> Result<Vec<Start>, LogError> {
    let jobs = DaemonJobs::rows(snapshot)?;
    Ok(Intents::rows(snapshot)?
        .into_iter()
        .map(|(name, intent)| Start {
            job: DaemonJobs::job_of(&jobs, &name),
            name,
            intent,
        })
        .collect())
}

/// For a start that holds the locks of its name and GPU: settles the cut-short starts in its
/// way — one of the same name, and one of another name on the same GPU in the same scope (under
/// that name's lock, if it is free; a command that holds it settles that start itself). An open
/// start of the name whose starter still looks alive has let go of the locks this start holds,
/// so its starter is exiting (a SIGKILLed process lets go of its locks a moment before it is
/// gone): it is settled once the starter is gone, and refused rather than overwritten if the
/// starter is not gone within `STARTER_EXIT` — an intent is closed only by its starter or by a
/// command that proved the starter gone.
pub(crate) fn settle_in_the_way(
    mps: &Mps,
    log: &EventLog,
    spec: &StartSpec,
) -> Result<Settled, MpsError> {
    let claim = spec.claim();
    let mut settled = Settled::default();
    // Read first: no read transaction stays open while this waits for locks.
    for start in starts(&log.snapshot()?)? {
        let intent = &start.intent;
        let subject = (
            start.name.as_str(),
            intent.gpu.as_str(),
            start.job.as_deref(),
        );
        let _also = match decide::open_start_in_the_way(claim, subject, starter(mps, intent)) {
            OpenStart::Leave | OpenStart::AwaitLocks => continue,
            OpenStart::Settle => None,
            OpenStart::AwaitStarter => {
                if !process::wait_for_exit(mps.proc, intent.starter, STARTER_EXIT) {
                    return Err(MpsError::StartUnderWay {
                        name: start.name,
                        pid: intent.starter.pid,
                    });
                }
                None
            }
            OpenStart::SettleIfFree => match lock::name_if_free(mps, &start.name)? {
                Some(held) => Some(held),
                None => continue,
            },
        };
        settle_held(mps, log, &start, &mut settled)?;
    }
    Ok(settled)
}

/// Finishes the starts that were cut short: a `daemon_starting` whose starter is no longer
/// running, with no `daemon_started` or `daemon_start_failed` after it. What such a start
/// launched is unilab's — it answers in the pipe directory the intent names, which unilab
/// created for this user, and it started after the starter did — so it is stopped (quit, then
/// signals through a pidfd after an identity check), its leftovers removed, and the start
/// recorded as failed. Each is handled under its name's and GPU's locks.
pub(crate) fn settle_cut_starts(mps: &Mps, log: &EventLog) -> Result<Settled, MpsError> {
    let mut settled = Settled::default();
    // Read first: no read transaction stays open while this waits for locks.
    for start in starts(&log.snapshot()?)? {
        let starter = starter(mps, &start.intent);
        if decide::open_start_outside(starter, true, false) != OpenStart::Settle {
            continue;
        }
        let _held = lock_of(mps, &start)?;
        settle_held(mps, log, &start, &mut settled)?;
    }
    Ok(settled)
}

/// Waits until the starts under way that `wanted` picks (by name and job) have ended (their
/// starters hold the locks until the daemon is recorded or the start failed), so that a command
/// that acts on the records sees what they started.
pub(crate) fn wait_for_starts(
    mps: &Mps,
    log: &EventLog,
    wanted: impl Fn(&str, Option<&str>) -> bool,
) -> Result<(), MpsError> {
    // Read first: no read transaction stays open while this waits for locks.
    for start in starts(&log.snapshot()?)? {
        let wanted = wanted(&start.name, start.job.as_deref());
        let starter = starter(mps, &start.intent);
        if decide::open_start_outside(starter, false, wanted) == OpenStart::AwaitLocks {
            drop(lock_of(mps, &start)?);
        }
    }
    Ok(())
}

/// The locks a start holds while it is under way: its name's and its GPU's.
fn lock_of(mps: &Mps, start: &Start) -> Result<lock::Held, MpsError> {
    lock::daemon(
        mps,
        &start.name,
        start.job.as_deref(),
        [start.intent.gpu.as_str()],
    )
}

/// Settles one cut-short start, for a caller that holds its name's lock: stops what it
/// launched and records the start as failed; adds it to `settled`, unless another command
/// settled it first.
fn settle_held(
    mps: &Mps,
    log: &EventLog,
    start: &Start,
    settled: &mut Settled,
) -> Result<(), MpsError> {
    let Start { name, intent, job } = start;
    // Another command may have settled it meanwhile.
    let open = Intents::rows(&log.snapshot()?)?
        .into_iter()
        .any(|(n, i)| &n == name && &i == intent);
    if !open {
        return Ok(());
    }
    let pipe = Path::new(&intent.pipe_directory);
    let cut = format!("the start by pid {} was cut short", intent.starter.pid);
    let mut stopped = Vec::new();
    // A launcher killed mid-way may still be forking the daemon: scan again until two scans in
    // a row, 50 ms apart, find nothing.
    let mut quiet = 0;
    for _ in 0..SETTLE_SCANS {
        let (found, skipped) = launched_by(mps, name, intent);
        settled.skipped(skipped);
        if found.is_empty() {
            quiet += 1;
            if quiet == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        quiet = 0;
        for daemon in found {
            let record = DaemonRecord {
                name: name.to_owned(),
                uid: mps.paths.uid,
                host: mps.paths.host.clone(),
                topology_mode: TopologyMode::SingleGpu,
                gpu_uuids: vec![intent.gpu.clone()],
                pipe_directory: intent.pipe_directory.clone(),
                log_directory: intent.log_directory.clone(),
                pid: daemon.pid,
                process_start_ticks: daemon.start_ticks,
                created_at: 0.0,
                job: job.clone(),
                active_thread_percentage: None,
                pinned_memory_limit: None,
            };
            let method = halt(mps, &record, LAUNCH_GRACE)?;
            stopped.push((daemon, method));
        }
    }
    let reason = what_was_stopped(&cut, &stopped);
    let launched = stopped.first().map(|(daemon, _)| *daemon);
    dirs::remove_leftovers_of_the_gone(mps.proc, pipe);
    log.append(
        Subject::Daemon(name.to_owned()),
        Event::DaemonStartFailed {
            reason,
            process: launched,
        },
    )?;
    settled.names.push(name.to_owned());
    Ok(())
}

/// What a start cut short launched: processes of this user, started after the starter, whose
/// environment names the intent's pipe directory (only unilab hands out that private
/// directory, and no record did yet) and whose command line runs the control tool. The pid file
/// alone is not enough: a daemon still coming up has not written it. A process whose
/// environment or command line could not be read in time is skipped: it is returned apart.
fn launched_by(mps: &Mps, name: &str, intent: &IntentRow) -> (Vec<ProcessIdentity>, Vec<Skipped>) {
    let pipe = format!(
        "{}={}",
        EnvVars::CUDA_MPS_PIPE_DIRECTORY,
        intent.pipe_directory
    )
    .into_bytes();
    let tool = Path::new(&mps.control.program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    for stat in mps.proc.all() {
        // Not this command's own tool runs (the `quit` it sends while stopping them).
        let candidate = stat.ppid != std::process::id()
            && !stat.has_exited()
            && stat.start_ticks >= intent.starter.start_ticks
            && mps.proc.uid(stat.pid) == Some(mps.paths.uid);
        if !candidate {
            continue;
        }
        let runs_the_tool = |args: Vec<String>| {
            args.iter().any(|arg| {
                Path::new(arg)
                    .file_name()
                    .is_some_and(|n| n == tool.as_str())
            })
        };
        let launched = mps.proc.environ(stat.pid).and_then(|environ| {
            Ok(environ.contains(&pipe) && runs_the_tool(mps.proc.cmdline(stat.pid)?))
        });
        match launched {
            Ok(true) => found.push(stat.identity()),
            Ok(false) => {}
            Err(blocked) => skipped.push(Skipped {
                start: name.to_owned(),
                process: stat.comm,
                blocked,
            }),
        }
    }
    (found, skipped)
}

/// What an open start's starter is to this command: itself, a live process of this user, or
/// gone (the start was cut short).
fn starter(mps: &Mps, intent: &IntentRow) -> Starter {
    let liveness = process::liveness(mps.proc, intent.starter, mps.paths.uid);
    Starter::of(intent.starter.pid, liveness, std::process::id())
}

/// How many times a settle looks for what a start cut short launched, at most.
const SETTLE_SCANS: usize = 20;

/// How long a start waits for a starter that let go of its locks with its intent open to be
/// gone, before it refuses (see `settle_in_the_way`).
const STARTER_EXIT: Duration = Duration::from_secs(10);
