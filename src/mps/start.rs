//! Starting a detached daemon from its checked spec (`spec`): clearing its way, launching,
//! recording and verifying it, and stopping a launch that failed.

use crate::time::poll;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::control::{self, Answer};
use super::decide;
use super::dirs::{self, Occupant};
use super::error::{MpsError, Unrecorded};
use super::limits;
use super::records::{liveness, records};
use super::settle::{Settled, settle_in_the_way};
use super::spec::StartSpec;
use super::stop::{LAUNCH_GRACE, clean_stale, halt, what_was_stopped};
use super::{DaemonRecord, Mps};
use crate::event::{Event, StartedDaemon, StopMethod, Subject, TopologyMode};
use crate::log::EventLog;
use crate::process::{self, ProcessIdentity, Signal};
use crate::time::{Clock, SystemClock, unix_seconds};

/// What a start found and did besides starting.
pub(crate) struct Started {
    pub record: DaemonRecord,
    pub cleared: Cleared,
}

/// What a start cleared out of its way before it launched.
#[derive(Debug, Default)]
pub(crate) struct Cleared {
    /// Records found stale for the same name or GPU, cleaned.
    pub cleaned: Vec<String>,
    /// Starts of the same name or GPU that were cut short, settled, and the processes that
    /// could not be checked meanwhile.
    pub settled: Settled,
}

/// Everything before the daemon is launched, under the start's locks: settles cut-short starts
/// in the way, clears the way, prepares the directories, and records the resolved topology.
pub(crate) fn begin(mps: &Mps, log: &EventLog, spec: &StartSpec) -> Result<Cleared, MpsError> {
    // Under the locks: a start cut short while this one waited for them is settled here, before
    // anything is decided (settling it before the wait would miss it).
    let settled = settle_in_the_way(mps, log, spec)?;
    let cleaned = clear_the_way(mps, log, spec)?;
    prepare_directories(mps, spec)?;
    let starter = own_identity(mps)?;
    let subject = || Subject::Daemon(spec.name.clone());
    // The intent goes in with the resolution, before anything is launched: if this process is
    // killed from here on, a later command finds what it launched (see `settle_cut_starts`).
    log.append_all([
        (
            subject(),
            Event::TopologyResolved {
                selector: spec.topology.selector.clone(),
                topology_mode: spec.topology.topology_mode,
                gpus: spec.topology.gpus.clone(),
                cuda_visible_devices: mps.env.cuda_visible_devices.clone(),
            },
        ),
        (
            subject(),
            Event::DaemonStarting {
                gpu: spec.gpu.clone(),
                pipe_directory: spec.pipe_directory.display().to_string(),
                log_directory: spec.log_directory.display().to_string(),
                starter,
                job: Some(spec.job.clone()),
            },
        ),
    ])?;
    Ok(Cleared { cleaned, settled })
}

/// Cleans the stale records that stand in a start's way, then refuses the start while a live
/// daemon already serves its name or GPU. Returns the names cleaned.
fn clear_the_way(mps: &Mps, log: &EventLog, spec: &StartSpec) -> Result<Vec<String>, MpsError> {
    let records: Vec<_> = records(mps, &log.snapshot()?)?
        .into_iter()
        .map(|record| {
            let liveness = liveness(mps, &record);
            (record, liveness)
        })
        .collect();
    let way = decide::the_way(spec.claim(), &records);
    for (record, reason) in &way.stale {
        clean_stale(mps, log, record, *reason)?;
    }
    match way.refused_by {
        Some(record) => Err(MpsError::AlreadyRunning {
            name: record.name.clone(),
            pid: record.pid,
            gpu: record.gpu_uuids.join(","),
        }),
        None => Ok(way.stale.into_iter().map(|(r, _)| r.name.clone()).collect()),
    }
}

/// Prepares the pipe and log directories, refusing one a foreign daemon answers in.
fn prepare_directories(mps: &Mps, spec: &StartSpec) -> Result<(), MpsError> {
    let uid = mps.paths.uid;
    let base = dirs::creation_base(&spec.pipe_directory, mps.env.runtime_dir.as_deref(), uid);
    dirs::ensure_private(&base, &spec.pipe_directory, uid)?;
    match dirs::occupant(mps.proc, &spec.pipe_directory) {
        Occupant::Live { pid } => {
            return Err(MpsError::ForeignDaemon {
                pipe_directory: spec.pipe_directory.clone(),
                pid,
            });
        }
        Occupant::Leftovers => dirs::remove_leftovers_keeping_dir(&spec.pipe_directory),
        Occupant::Empty => {}
    }
    let log_base = if spec.log_directory.starts_with(mps.paths.user_dir()) {
        std::fs::create_dir_all(mps.paths.user_dir()).map_err(|source| MpsError::Io {
            path: mps.paths.user_dir(),
            source,
        })?;
        mps.paths.user_dir()
    } else {
        spec.log_directory
            .parent()
            .map(Path::to_owned)
            .unwrap_or_else(|| PathBuf::from("/"))
    };
    dirs::ensure_private(&log_base, &spec.log_directory, uid)
}

/// Starts a detached daemon for a planned start, records it, and verifies that it answers.
///
/// The launcher forks the daemon and returns; the daemon detaches from it. unilab makes itself
/// the subreaper of the launch first, so the detached daemon is re-parented to unilab: until
/// unilab exits, its children are exactly what the launch left running. A start that fails
/// stops them, so no daemon comes up later that no record names.
pub(crate) fn start(mps: &Mps, log: &EventLog, spec: &StartSpec) -> Result<Started, MpsError> {
    let cleared = begin(mps, log, spec)?;
    // Without it (never seen on Linux ≥ 3.4) a failed start cannot find what it launched.
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let launch_failed = |reason: String| {
        let (reason, process) = stop_launched(mps, spec, reason);
        failed(log, spec, reason, process)
    };
    let output = control::start_detached(
        &mps.control,
        &spec.pipe_directory,
        &spec.log_directory,
        &spec.gpu,
    )
    .map_err(|e| launch_failed(e.to_string()))?;
    if !output.status.success() {
        let said = format!("{}{}", output.stdout, output.stderr);
        return Err(launch_failed(format!(
            "`{} -d` exited with code {}: {}",
            mps.control.name(),
            output.code(),
            said.trim()
        )));
    }
    let Some(daemon) = wait_for_daemon(mps, &spec.pipe_directory, mps.control.timeout) else {
        return Err(launch_failed(format!(
            "no live daemon wrote `{}` within {} s",
            dirs::PID_FILE,
            mps.control.timeout.as_secs_f64()
        )));
    };
    let record = record_and_verify(mps, log, spec, daemon, false)?;
    Ok(Started { record, cleared })
}

/// Waits for the daemon's pid file and reads the daemon's identity. The pid is believed only
/// for a live process of this user that started no earlier than this command did: a daemon this
/// start launched cannot be older than the start.
pub(crate) fn wait_for_daemon(
    mps: &Mps,
    pipe_directory: &Path,
    timeout: Duration,
) -> Option<ProcessIdentity> {
    let me = mps.proc.stat(std::process::id())?.start_ticks;
    poll(timeout, Duration::from_millis(20), || {
        let pid = dirs::read_pid_file(pipe_directory)?;
        let stat = mps
            .proc
            .stat(pid)
            .filter(|s| !s.has_exited() && s.start_ticks >= me)?;
        (mps.proc.uid(pid) == Some(mps.paths.uid)).then(|| stat.identity())
    })
}

fn record_for(mps: &Mps, spec: &StartSpec, daemon: ProcessIdentity) -> StartedDaemon {
    StartedDaemon {
        name: spec.name.clone(),
        uid: mps.paths.uid,
        host: mps.paths.host.clone(),
        topology_mode: TopologyMode::SingleGpu,
        gpu_uuids: vec![spec.gpu.clone()],
        pipe_directory: spec.pipe_directory.display().to_string(),
        log_directory: spec.log_directory.display().to_string(),
        pid: daemon.pid,
        process_start_ticks: daemon.start_ticks,
        created_at: unix_seconds(SystemClock.now_us()),
    }
}

/// This process, as a record names it.
pub(crate) fn own_identity(mps: &Mps) -> Result<ProcessIdentity, MpsError> {
    let pid = std::process::id();
    mps.proc
        .stat(pid)
        .map(|stat| stat.identity())
        .ok_or_else(|| MpsError::Io {
            path: PathBuf::from(format!("/proc/{pid}/stat")),
            source: std::io::Error::other("cannot read this process's own start time"),
        })
}

/// Records a launched daemon and verifies that it answers on its control socket; a daemon that
/// cannot be recorded or does not answer is stopped again.
///
/// A daemon whose start or verification the log cannot take (a full disk) is stopped too: the
/// command fails, and a failed `mps start` leaves nothing running that a script would not know
/// of. Its start may stay recorded without an end; the next command finds that process gone and
/// cleans the record as stale, as it does for any daemon that died unrecorded.
pub(crate) fn record_and_verify(
    mps: &Mps,
    log: &EventLog,
    spec: &StartSpec,
    daemon: ProcessIdentity,
    foreground: bool,
) -> Result<DaemonRecord, MpsError> {
    let subject = || Subject::Daemon(spec.name.clone());
    let started = record_for(mps, spec, daemon);
    let record = DaemonRecord::of(started.clone(), spec.job.clone(), spec.limits);
    let unrecorded = |step: Unrecorded, source| {
        let stopped = halt(mps, &record, Duration::from_secs(2)).ok();
        dirs::remove_leftovers(&spec.pipe_directory);
        MpsError::NotRecorded {
            name: spec.name.clone(),
            pid: daemon.pid,
            step,
            stopped,
            source: Box::new(source),
        }
    };
    let appended = log.append(
        subject(),
        Event::DaemonStarted {
            record: started,
            foreground,
            job: Some(spec.job.clone()),
            limits: Some(spec.limits),
        },
    );
    if let Err(e) = appended {
        return Err(unrecorded(Unrecorded::Started, e));
    }
    match verify(mps, spec) {
        Ok(()) => match log.append(subject(), Event::DaemonVerifiedLive { process: daemon }) {
            Ok(_) => Ok(record),
            Err(e) => Err(unrecorded(Unrecorded::VerifiedLive, e)),
        },
        Err(why) => {
            let _ = halt(mps, &record, Duration::from_secs(2));
            dirs::remove_leftovers(&spec.pipe_directory);
            Err(failed(log, spec, why, Some(daemon)))
        }
    }
}

/// Whether a launched daemon answers a command that must answer, and holds the limits asked
/// for once they are set and read back; why not.
fn verify(mps: &Mps, spec: &StartSpec) -> Result<(), String> {
    let (pipe, log_dir) = (&spec.pipe_directory, &spec.log_directory);
    match control::probe(&mps.control, pipe, log_dir) {
        Ok(Answer::Answered) => {}
        Ok(Answer::Silent) => {
            return Err(format!(
                "it is wedged: it took `get_server_list` and gave no answer within {} s",
                mps.control.timeout.as_secs_f64()
            ));
        }
        Ok(Answer::Unanswered) => return Err("it did not answer on its control socket".into()),
        Err(e) => return Err(e.to_string()),
    }
    limits::apply(&mps.control, pipe, log_dir, &spec.limits)
}

/// Records a failed start and returns the error that reports it.
pub(crate) fn failed(
    log: &EventLog,
    spec: &StartSpec,
    reason: String,
    process: Option<ProcessIdentity>,
) -> MpsError {
    let recorded = log.append(
        Subject::Daemon(spec.name.clone()),
        Event::DaemonStartFailed {
            reason: reason.clone(),
            process,
        },
    );
    match recorded {
        Ok(_) => MpsError::StartFailed {
            name: spec.name.clone(),
            reason,
        },
        Err(e) => e.into(),
    }
}

/// Stops every process a failed launch left running — unilab's own children, each signalled
/// through its pidfd after its identity is checked, SIGTERM then SIGKILL — reaps them, and
/// removes what they left in the pipe directory. Returns the reason with what was done, and
/// the first process stopped.
fn stop_launched(mps: &Mps, spec: &StartSpec, reason: String) -> (String, Option<ProcessIdentity>) {
    let me = std::process::id();
    let mut stopped = Vec::new();
    for child in mps.proc.children(me) {
        let identity = child.identity();
        if !child.has_exited() {
            let method = [
                (Signal::Terminate, StopMethod::Terminated),
                (Signal::Kill, StopMethod::Killed),
            ]
            .into_iter()
            .find(|(signal, _)| {
                process::signal(mps.proc, identity, mps.paths.uid, *signal).is_ok()
                    && process::wait_for_exit(mps.proc, identity, LAUNCH_GRACE)
            });
            if let Some((_, method)) = method {
                stopped.push((identity, method));
            }
        }
        process::reap(identity.pid);
    }
    if matches!(
        dirs::occupant(mps.proc, &spec.pipe_directory),
        Occupant::Leftovers
    ) {
        dirs::remove_leftovers_keeping_dir(&spec.pipe_directory);
    }
    (
        what_was_stopped(&reason, &stopped),
        stopped.first().map(|(identity, _)| *identity),
    )
}
