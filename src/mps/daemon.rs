//! Starting, finding and stopping the daemons of this user on this host.
//!
//! Authority to stop comes only from a record: a daemon unilab started, whose `(pid, starttime)`
//! still names a live process of this user. Everything else is refused or left alone.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::control;
use super::dirs::{self, Occupant};
use super::error::MpsError;
use super::lock;
use super::{DaemonRecord, Mps};
use crate::env::EnvVars;
use crate::event::{Event, StaleReason, StartedDaemon, StopMethod, Subject, TopologyMode};
use crate::gpu::mask::{self, Visible};
use crate::gpu::selector::{Atom, Selector};
use crate::gpu::{GpuInfo, TopologyPlan, smi};
use crate::log::{EventLog, LogError, Snapshot};
use crate::process::{self, Liveness, ProcessIdentity, Signal};
use crate::projection::{DaemonJobs, Daemons, IntentRow, Intents};
use crate::time::{Clock, SystemClock, unix_seconds};
use crate::trace::{STEPS, detail};

/// What the GPUs of this host look like under the current mask.
pub(crate) struct Topology {
    pub gpus: Vec<GpuInfo>,
    pub visible: Visible,
}

pub(crate) fn topology(mps: &Mps) -> Result<Topology, MpsError> {
    let gpus = smi::discover(&mps.smi).map_err(MpsError::Smi)?;
    under_mask(mps, gpus)
}

/// The GPUs nvidia-smi listed, with the caller's mask applied.
pub(crate) fn under_mask(mps: &Mps, gpus: Vec<GpuInfo>) -> Result<Topology, MpsError> {
    let visible = mask::visible(mps.env.cuda_visible_devices.as_deref(), &gpus)?;
    Ok(Topology { gpus, visible })
}

pub(crate) fn resolve(
    mps: &Mps,
    topology: &Topology,
    selector: Option<&str>,
) -> Result<TopologyPlan, MpsError> {
    Selector::parse(selector)
        .and_then(|s| {
            s.resolve(
                selector.unwrap_or(""),
                &topology.visible.gpus,
                mps.env.cuda_visible_devices.as_deref(),
            )
        })
        .map_err(MpsError::Selector)
}

/// `gpu-` and the first 8 hex digits of the UUID: stable whatever the mask. Under a Slurm job,
/// `job<ID>-` first: each job's daemons are its own.
pub(crate) fn default_name(uuid: &str, job: Option<&str>) -> String {
    let hex: String = uuid
        .trim_start_matches("GPU-")
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(8)
        .collect();
    scoped_name(&format!("gpu-{}", hex.to_ascii_lowercase()), job)
}

/// What a job-scoped daemon name starts with: `job<ID>-`.
const JOB_PREFIX: &str = "job";

/// What a Slurm job id is made of here: letters, digits and `_`, at least one.
fn is_job_id(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A name as given, in a job's scope: `job<ID>-` first under a job (unless it has it already).
/// Naming only: which job a daemon belongs to is recorded with it, never read from its name.
pub(crate) fn scoped_name(name: &str, job: Option<&str>) -> String {
    match job {
        Some(job) if !name.starts_with(&format!("{JOB_PREFIX}{job}-")) => {
            format!("{JOB_PREFIX}{job}-{name}")
        }
        _ => name.to_owned(),
    }
}

/// A Slurm job id that can scope daemon names and lock files.
pub(crate) fn validate_job(job: &str) -> Result<(), MpsError> {
    if job.len() <= 32 && is_job_id(job) {
        Ok(())
    } else {
        Err(MpsError::BadJob(job.to_owned()))
    }
}

pub(crate) fn validate_name(name: &str) -> Result<(), MpsError> {
    let valid = (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(MpsError::BadName(name.to_owned()))
    }
}

/// The daemon records of this user on this host (a record of another scope is never returned).
pub(crate) fn records(mps: &Mps, snapshot: &Snapshot) -> Result<Vec<DaemonRecord>, LogError> {
    let jobs = DaemonJobs::rows(snapshot)?;
    Ok(Daemons::rows(snapshot)?
        .into_iter()
        .map(|row| {
            let job = DaemonJobs::job_of(&jobs, &row.0.name);
            DaemonRecord::of(row.0, job)
        })
        .filter(|r| r.uid == mps.paths.uid && r.host == mps.paths.host)
        .collect())
}

pub(crate) fn liveness(mps: &Mps, record: &DaemonRecord) -> Liveness {
    process::liveness(mps.proc, record.identity(), mps.paths.uid)
}

pub(crate) fn stale_reason(liveness: Liveness) -> Option<StaleReason> {
    match liveness {
        Liveness::Live => None,
        Liveness::Gone => Some(StaleReason::ProcessGone),
        Liveness::Reused { .. } => Some(StaleReason::PidReused),
        Liveness::NotOwned { .. } => Some(StaleReason::NotOwned),
    }
}

/// What `mps start` asks for.
#[derive(Debug, Clone, Default)]
pub(crate) struct StartRequest {
    pub selector: Option<String>,
    pub name: Option<String>,
    pub pipe_directory: Option<PathBuf>,
    pub log_directory: Option<PathBuf>,
    /// The Slurm job it starts in (`SLURM_JOB_ID`), which scopes its default name.
    pub job: Option<String>,
}

/// A daemon about to be started: everything checked, nothing created yet.
pub(crate) struct Plan {
    pub name: String,
    pub gpu: String,
    /// The Slurm job it is started in, recorded with it.
    pub job: Option<String>,
    pub topology: TopologyPlan,
    pub pipe_directory: PathBuf,
    pub log_directory: PathBuf,
}

/// Resolves and validates a start request without changing anything. `mps doctor` runs the
/// same steps one by one, so that each finding lands under its own check.
pub(crate) fn plan(mps: &Mps, request: &StartRequest) -> Result<Plan, MpsError> {
    let topology = topology(mps)?;
    let plan = resolve(mps, &topology, request.selector.as_deref())?;
    let gpu = super::plan::startable(&plan)?.uuid.clone();
    if let Some(job) = &request.job {
        validate_job(job)?;
    }
    let name = match &request.name {
        Some(name) => scoped_name(name, request.job.as_deref()),
        None => default_name(&gpu, request.job.as_deref()),
    };
    validate_name(&name)?;
    let pipe_directory = pipe_directory_for(mps, request.pipe_directory.as_deref(), &name);
    check_pipe_directory(mps, &pipe_directory)?;
    let log_directory = log_directory_for(mps, request.log_directory.as_deref(), &name);
    Ok(Plan {
        name,
        gpu,
        job: request.job.clone(),
        topology: plan,
        pipe_directory,
        log_directory,
    })
}

/// The daemon's pipe directory: the one asked for, else the default for `name`.
pub(crate) fn pipe_directory_for(mps: &Mps, asked: Option<&Path>, name: &str) -> PathBuf {
    match asked {
        Some(dir) => absolute(dir),
        None => dirs::default_pipe_directory(mps.env.runtime_dir.as_deref(), mps.paths.uid, name),
    }
}

/// The daemon's log directory: the one asked for, else `<root>/<host>/<uid>/mps/<name>/log`.
pub(crate) fn log_directory_for(mps: &Mps, asked: Option<&Path>, name: &str) -> PathBuf {
    match asked {
        Some(dir) => absolute(dir),
        None => mps.paths.user_dir().join("mps").join(name).join("log"),
    }
}

/// A pipe directory whose control socket path fits and whose existing levels are trustworthy.
pub(crate) fn check_pipe_directory(mps: &Mps, pipe_directory: &Path) -> Result<(), MpsError> {
    dirs::control_socket(pipe_directory)?;
    dirs::check_existing(
        &dirs::creation_base(
            pipe_directory,
            mps.env.runtime_dir.as_deref(),
            mps.paths.uid,
        ),
        pipe_directory,
        mps.paths.uid,
    )
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_owned())
    }
}

/// What a start found and did besides starting.
pub(crate) struct Started {
    pub record: DaemonRecord,
    pub cleared: Cleared,
}

/// Refuses a start while a live daemon already serves the name or the GPU; cleans stale records
/// that stand in the way. Returns the names cleaned.
fn clear_the_way(mps: &Mps, log: &EventLog, plan: &Plan) -> Result<Vec<String>, MpsError> {
    let mut cleaned = Vec::new();
    for record in records(mps, &log.snapshot()?)? {
        // One daemon a GPU in each scope: the user's own, and each Slurm job's.
        let same_gpu = record.gpu_uuids.contains(&plan.gpu) && record.job == plan.job;
        if record.name != plan.name && !same_gpu {
            continue;
        }
        match stale_reason(liveness(mps, &record)) {
            None => {
                return Err(MpsError::AlreadyRunning {
                    name: record.name.clone(),
                    pid: record.pid,
                    gpu: record.gpu_uuids.join(","),
                });
            }
            Some(reason) => {
                clean_stale(mps, log, &record, reason)?;
                cleaned.push(record.name);
            }
        }
    }
    Ok(cleaned)
}

/// Prepares the pipe and log directories, refusing one a foreign daemon answers in.
fn prepare_directories(mps: &Mps, plan: &Plan) -> Result<(), MpsError> {
    let uid = mps.paths.uid;
    let base = dirs::creation_base(&plan.pipe_directory, mps.env.runtime_dir.as_deref(), uid);
    dirs::ensure_private(&base, &plan.pipe_directory, uid)?;
    match dirs::occupant(mps.proc, &plan.pipe_directory) {
        Occupant::Live { pid } => {
            return Err(MpsError::ForeignDaemon {
                pipe_directory: plan.pipe_directory.clone(),
                pid,
            });
        }
        Occupant::Leftovers => dirs::remove_leftovers_keeping_dir(&plan.pipe_directory),
        Occupant::Empty => {}
    }
    let log_base = if plan.log_directory.starts_with(mps.paths.user_dir()) {
        std::fs::create_dir_all(mps.paths.user_dir()).map_err(|source| MpsError::Io {
            path: mps.paths.user_dir(),
            source,
        })?;
        mps.paths.user_dir()
    } else {
        plan.log_directory
            .parent()
            .map(Path::to_owned)
            .unwrap_or_else(|| PathBuf::from("/"))
    };
    dirs::ensure_private(&log_base, &plan.log_directory, uid)
}

/// Waits for the daemon's pid file and reads the daemon's identity.
fn wait_for_daemon(mps: &Mps, pipe_directory: &Path, timeout: Duration) -> Option<ProcessIdentity> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(pid) = dirs::read_pid_file(pipe_directory)
            && let Some(stat) = mps.proc.stat(pid)
            && !stat.has_exited()
            && mps.proc.uid(pid) == Some(mps.paths.uid)
        {
            return Some(stat.identity());
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn record_for(mps: &Mps, plan: &Plan, daemon: ProcessIdentity) -> StartedDaemon {
    StartedDaemon {
        name: plan.name.clone(),
        uid: mps.paths.uid,
        host: mps.paths.host.clone(),
        topology_mode: TopologyMode::SingleGpu,
        gpu_uuids: vec![plan.gpu.clone()],
        pipe_directory: plan.pipe_directory.display().to_string(),
        log_directory: plan.log_directory.display().to_string(),
        pid: daemon.pid,
        process_start_ticks: daemon.start_ticks,
        created_at: unix_seconds(SystemClock.now_us()),
    }
}

/// What a start cleared out of its way before it launched.
#[derive(Debug, Default)]
pub(crate) struct Cleared {
    /// Records found stale for the same name or GPU, cleaned.
    pub cleaned: Vec<String>,
    /// Starts of the same name or GPU that were cut short, settled.
    pub settled: Vec<String>,
}

/// Everything before the daemon is launched, under the start's locks: settles cut-short starts
/// in the way, clears the way, prepares the directories, and records the resolved topology.
fn begin(mps: &Mps, log: &EventLog, plan: &Plan) -> Result<Cleared, MpsError> {
    // Under the locks: a start cut short while this one waited for them is settled here, before
    // anything is decided (settling it before the wait would miss it).
    let settled = settle_in_the_way(mps, log, plan)?;
    let cleaned = clear_the_way(mps, log, plan)?;
    prepare_directories(mps, plan)?;
    let starter = own_identity(mps)?;
    let subject = || Subject::Daemon(plan.name.clone());
    // The intent goes in with the resolution, before anything is launched: if this process is
    // killed from here on, a later command finds what it launched (see `settle_cut_starts`).
    log.append_all([
        (
            subject(),
            Event::TopologyResolved {
                selector: plan.topology.selector.clone(),
                topology_mode: plan.topology.topology_mode,
                gpus: plan.topology.gpus.clone(),
                cuda_visible_devices: mps.env.cuda_visible_devices.clone(),
            },
        ),
        (
            subject(),
            Event::DaemonStarting {
                gpu: plan.gpu.clone(),
                pipe_directory: plan.pipe_directory.display().to_string(),
                log_directory: plan.log_directory.display().to_string(),
                starter,
                job: plan.job.clone(),
            },
        ),
    ])?;
    Ok(Cleared { cleaned, settled })
}

/// What a start cut short launched: processes of this user, started after the starter, whose
/// environment names the intent's pipe directory (only unilab hands out that private
/// directory, and no record did yet) and whose command line runs the control tool. The pid file
/// alone is not enough: a daemon still coming up has not written it.
fn launched_by(mps: &Mps, intent: &IntentRow) -> Vec<ProcessIdentity> {
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
    process::all_processes(Path::new("/proc"))
        .into_iter()
        .filter(|stat| {
            // Not this command's own tool runs (the `quit` it sends while stopping them).
            stat.ppid != std::process::id()
                && !stat.has_exited()
                && stat.start_ticks >= intent.starter.start_ticks
                && mps.proc.uid(stat.pid) == Some(mps.paths.uid)
                && process::environ(stat.pid).contains(&pipe)
                && process::cmdline(stat.pid).iter().any(|arg| {
                    Path::new(arg)
                        .file_name()
                        .is_some_and(|n| n == tool.as_str())
                })
        })
        .map(|stat| stat.identity())
        .collect()
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

/// Whether an open intent is a start that was cut short: its starter is neither this process
/// nor a live process of this user.
fn cut_short(mps: &Mps, intent: &IntentRow) -> bool {
    intent.starter.pid != std::process::id()
        && process::liveness(mps.proc, intent.starter, mps.paths.uid) != Liveness::Live
}

/// Finishes the starts that were cut short: a `daemon_starting` whose starter is no longer
/// running, with no `daemon_started` or `daemon_start_failed` after it. What such a start
/// launched is unilab's — it answers in the pipe directory the intent names, which unilab
/// created for this user, and it started after the starter did — so it is stopped (quit, then
/// signals through a pidfd after an identity check), its leftovers removed, and the start
/// recorded as failed. Each is handled under its name's and GPU's locks. Returns the names.
pub(crate) fn settle_cut_starts(mps: &Mps, log: &EventLog) -> Result<Vec<String>, MpsError> {
    let mut settled = Vec::new();
    // Read first: no read transaction stays open while this waits for locks.
    let open = starts(&log.snapshot()?)?;
    for start in open {
        if !cut_short(mps, &start.intent) {
            continue;
        }
        let _held = lock::daemon(
            mps,
            &start.name,
            start.job.as_deref(),
            [start.intent.gpu.as_str()],
        )?;
        if settle_held(mps, log, &start)? {
            settled.push(start.name);
        }
    }
    Ok(settled)
}

/// A start under way (or cut short): the daemon's name, its intent, and the job it runs in.
struct Start {
    name: String,
    intent: IntentRow,
    job: Option<String>,
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

/// For a start that holds the locks of `name` and `gpu`: settles the cut-short starts in its
/// way — one of the same name, and one of another name on the same GPU in the same scope (under
/// that name's lock, if it is free; a command that holds it settles that start itself). A start
/// of the name whose starter still runs, which the held locks should make impossible, is refused
/// rather than overwritten: an intent is closed only by its starter or by a command that proved
/// the starter gone. Returns the names settled.
fn settle_in_the_way(mps: &Mps, log: &EventLog, plan: &Plan) -> Result<Vec<String>, MpsError> {
    let name = plan.name.as_str();
    let mut settled = Vec::new();
    // Read first: no read transaction stays open while this waits for locks.
    let open = starts(&log.snapshot()?)?;
    for start in open {
        let intent = &start.intent;
        if start.name == name && !cut_short(mps, intent) {
            if intent.starter.pid == std::process::id() {
                continue;
            }
            // This command holds the name's lock, so that starter no longer does: its start
            // ended without closing the intent, and it is exiting (a SIGKILLed process lets go
            // of its locks a moment before it is gone). Give it that moment.
            if !process::wait_for_exit(mps.proc, intent.starter, STARTER_EXIT) {
                return Err(MpsError::StartUnderWay {
                    name: start.name,
                    pid: intent.starter.pid,
                });
            }
        }
        let same_gpu = intent.gpu == plan.gpu && start.job == plan.job;
        if !cut_short(mps, intent) || (start.name != name && !same_gpu) {
            continue;
        }
        let _also = if start.name == name {
            None
        } else {
            match lock::name_if_free(mps, &start.name)? {
                Some(held) => Some(held),
                None => continue,
            }
        };
        if settle_held(mps, log, &start)? {
            settled.push(start.name);
        }
    }
    Ok(settled)
}

/// Settles one cut-short start, for a caller that holds its name's lock: stops what it
/// launched and records the start as failed. `false` when another command settled it first.
fn settle_held(mps: &Mps, log: &EventLog, start: &Start) -> Result<bool, MpsError> {
    let Start { name, intent, job } = start;
    // Another command may have settled it meanwhile.
    let open = Intents::rows(&log.snapshot()?)?
        .into_iter()
        .any(|(n, i)| &n == name && &i == intent);
    if !open {
        return Ok(false);
    }
    let pipe = Path::new(&intent.pipe_directory);
    let cut = format!("the start by pid {} was cut short", intent.starter.pid);
    let mut stopped = Vec::new();
    // A launcher killed mid-way may still be forking the daemon: scan again until two scans in
    // a row, 50 ms apart, find nothing.
    let mut quiet = 0;
    for _ in 0..SETTLE_SCANS {
        let found = launched_by(mps, intent);
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
    Ok(true)
}

/// Records a failed start and returns the error that reports it.
fn failed(
    log: &EventLog,
    plan: &Plan,
    reason: String,
    process: Option<ProcessIdentity>,
) -> MpsError {
    let recorded = log.append(
        Subject::Daemon(plan.name.clone()),
        Event::DaemonStartFailed {
            reason: reason.clone(),
            process,
        },
    );
    match recorded {
        Ok(_) => MpsError::StartFailed {
            name: plan.name.clone(),
            reason,
        },
        Err(e) => e.into(),
    }
}

/// Records a launched daemon and verifies that it answers on its control socket; a daemon that
/// cannot be recorded or does not answer is stopped again.
fn record_and_verify(
    mps: &Mps,
    log: &EventLog,
    plan: &Plan,
    daemon: ProcessIdentity,
    foreground: bool,
) -> Result<DaemonRecord, MpsError> {
    let subject = || Subject::Daemon(plan.name.clone());
    let started = record_for(mps, plan, daemon);
    let appended = log.append(
        subject(),
        Event::DaemonStarted {
            record: started.clone(),
            foreground,
            job: plan.job.clone(),
        },
    );
    let record = DaemonRecord::of(started, plan.job.clone());
    if let Err(e) = appended {
        // A daemon without a record would have no owner: stop it before reporting.
        let _ = halt(mps, &record, Duration::from_secs(2));
        return Err(e.into());
    }
    match control::answers(&mps.control, &plan.pipe_directory, &plan.log_directory) {
        Ok(true) => {
            log.append(subject(), Event::DaemonVerifiedLive { process: daemon })?;
            Ok(record)
        }
        outcome => {
            let why = match outcome {
                Err(e) => e.to_string(),
                _ => "it did not answer on its control socket".to_owned(),
            };
            let _ = halt(mps, &record, Duration::from_secs(2));
            dirs::remove_leftovers(&plan.pipe_directory);
            Err(failed(log, plan, why, Some(daemon)))
        }
    }
}

/// Starts a detached daemon for a planned start, records it, and verifies that it answers.
///
/// The launcher forks the daemon and returns; the daemon detaches from it. unilab makes itself
/// the subreaper of the launch first, so the detached daemon is re-parented to unilab: until
/// unilab exits, its children are exactly what the launch left running. A start that fails
/// stops them, so no daemon comes up later that no record names.
pub(crate) fn start(mps: &Mps, log: &EventLog, plan: &Plan) -> Result<Started, MpsError> {
    let cleared = begin(mps, log, plan)?;
    // Without it (never seen on Linux ≥ 3.4) a failed start cannot find what it launched.
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let launch_failed = |reason: String| {
        let (reason, process) = stop_launched(mps, plan, reason);
        failed(log, plan, reason, process)
    };
    let output = control::start_detached(
        &mps.control,
        &plan.pipe_directory,
        &plan.log_directory,
        &plan.gpu,
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
    let Some(daemon) = wait_for_daemon(mps, &plan.pipe_directory, mps.control.timeout) else {
        return Err(launch_failed(format!(
            "no live daemon wrote `{}` within {} s",
            dirs::PID_FILE,
            mps.control.timeout.as_secs_f64()
        )));
    };
    let record = record_and_verify(mps, log, plan, daemon, false)?;
    Ok(Started { record, cleared })
}

/// Stops every process a failed launch left running — unilab's own children, each signalled
/// through its pidfd after its identity is checked, SIGTERM then SIGKILL — reaps them, and
/// removes what they left in the pipe directory. Returns the reason with what was done, and
/// the first process stopped.
fn stop_launched(mps: &Mps, plan: &Plan, reason: String) -> (String, Option<ProcessIdentity>) {
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
        dirs::occupant(mps.proc, &plan.pipe_directory),
        Occupant::Leftovers
    ) {
        dirs::remove_leftovers_keeping_dir(&plan.pipe_directory);
    }
    (
        what_was_stopped(&reason, &stopped),
        stopped.first().map(|(identity, _)| *identity),
    )
}

/// Why a start failed, and what of its launch was stopped: the reason a failed or cut-short
/// start records.
fn what_was_stopped(cause: &str, stopped: &[(ProcessIdentity, StopMethod)]) -> String {
    if stopped.is_empty() {
        return format!("{cause}; nothing it launched was left running");
    }
    let done: Vec<String> = stopped
        .iter()
        .map(|(identity, method)| format!("pid {} ({})", identity.pid, method.as_str()))
        .collect();
    format!("{cause}; stopped what it launched: {}", done.join(", "))
}

/// How many times a settle looks for what a start cut short launched, at most.
const SETTLE_SCANS: usize = 20;

/// How long a process a failed launch left gets after each signal.
const LAUNCH_GRACE: Duration = Duration::from_secs(2);
/// How long a start waits for a starter that let go of its locks with its intent open to be
/// gone, before it refuses (see `settle_in_the_way`).
const STARTER_EXIT: Duration = Duration::from_secs(10);

/// Runs the daemon in the foreground (`-f`) as a child, its log lines on standard error, until it
/// exits or `stop` is raised (Ctrl-C, SIGTERM): then it is asked to quit and, if needed,
/// escalated. Records the start and the stop like a detached daemon's.
pub(crate) fn run_foreground(
    mps: &Mps,
    log: &EventLog,
    plan: &Plan,
    stop: &std::sync::atomic::AtomicBool,
    grace: Duration,
    on_ready: impl FnOnce(&DaemonRecord, &Cleared),
) -> Result<StopMethod, MpsError> {
    use std::os::unix::process::CommandExt;
    use std::sync::atomic::Ordering;
    let cleared = begin(mps, log, plan)?;
    let mut cmd = control::foreground_command(
        &mps.control,
        &plan.pipe_directory,
        &plan.log_directory,
        &plan.gpu,
    );
    // Its own process group, so that Ctrl-C reaches unilab, which then asks it to quit.
    cmd.process_group(0).stdin(std::process::Stdio::null());
    if let Ok(stderr) = std::io::stderr().as_fd().try_clone_to_owned() {
        cmd.stdout(std::process::Stdio::from(stderr));
    }
    let mut child = cmd.spawn().map_err(|e| {
        failed(
            log,
            plan,
            format!("cannot run `{} -f`: {e}", mps.control.name()),
            None,
        )
    })?;
    let daemon = mps
        .proc
        .stat(child.id())
        .map(|s| s.identity())
        .filter(|_| wait_for_daemon(mps, &plan.pipe_directory, mps.control.timeout).is_some());
    let Some(daemon) = daemon else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(failed(
            log,
            plan,
            "the foreground daemon did not come up".into(),
            None,
        ));
    };
    let record = match record_and_verify(mps, log, plan, daemon, true) {
        Ok(record) => record,
        Err(e) => {
            let _ = child.wait();
            return Err(e);
        }
    };
    on_ready(&record, &cleared);
    let method = loop {
        if let Ok(Some(_)) = child.try_wait() {
            break StopMethod::Exited;
        }
        if stop.load(Ordering::Relaxed) {
            // The child is unreaped, so its pid cannot be reused while we signal it.
            let method = halt(mps, &record, grace)?;
            let _ = child.wait();
            break method;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    dirs::remove_leftovers(&plan.pipe_directory);
    log.append(
        Subject::Daemon(plan.name.clone()),
        Event::DaemonStopped {
            process: daemon,
            method,
        },
    )?;
    Ok(method)
}

/// Asks the daemon to quit, then escalates through its pidfd: SIGTERM, then SIGKILL, each after
/// `grace`. Every signal re-checks the daemon's identity first.
pub(crate) fn halt(
    mps: &Mps,
    record: &DaemonRecord,
    grace: Duration,
) -> Result<StopMethod, MpsError> {
    let daemon = record.identity();
    let pipe = Path::new(&record.pipe_directory);
    let log_dir = Path::new(&record.log_directory);
    // `quit` goes through the daemon's own socket; a daemon that cannot be reached is escalated.
    detail!(
        STEPS,
        "daemon `{}` (pid {}): sending `quit`",
        record.name,
        record.pid
    );
    let _ = control::send(&mps.control, pipe, log_dir, "quit");
    if process::wait_for_exit(mps.proc, daemon, grace) {
        detail!(STEPS, "daemon `{}`: exited after `quit`", record.name);
        return Ok(StopMethod::Quit);
    }
    for (signal, method) in [
        (Signal::Terminate, StopMethod::Terminated),
        (Signal::Kill, StopMethod::Killed),
    ] {
        detail!(
            STEPS,
            "daemon `{}`: still running after {}; sending {signal} through its pidfd",
            record.name,
            crate::trace::ms(grace)
        );
        match process::signal(mps.proc, daemon, mps.paths.uid, signal) {
            Ok(()) => {}
            // It exited (or its pid moved on) between the wait and the signal: it has stopped.
            Err(process::SignalError::NotThatProcess { .. }) => return Ok(method),
            Err(source) => {
                return Err(MpsError::Signal {
                    name: record.name.clone(),
                    source,
                });
            }
        }
        if process::wait_for_exit(mps.proc, daemon, grace) {
            detail!(STEPS, "daemon `{}`: exited after {signal}", record.name);
            return Ok(method);
        }
    }
    Err(MpsError::Signal {
        name: record.name.clone(),
        source: process::SignalError::Failed {
            identity: daemon,
            source: std::io::Error::other("it survived SIGKILL"),
        },
    })
}

/// How a stop ended for one daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StopOutcome {
    Stopped {
        name: String,
        method: StopMethod,
    },
    Stale {
        name: String,
        reason: StaleReason,
    },
    /// Another command stopped or cleaned it first.
    Gone {
        name: String,
    },
}

/// Stops one recorded daemon, or cleans its record when it is not the live process it names.
/// Holds the daemon's locks from the check to the record, and checks again under them that the
/// record still stands: of two stops at once, one stops the daemon and the other finds it gone.
pub(crate) fn stop(
    mps: &Mps,
    log: &EventLog,
    record: &DaemonRecord,
    grace: Duration,
) -> Result<StopOutcome, MpsError> {
    let _held = lock_recorded(mps, record)?;
    stop_held(mps, log, record, grace)
}

/// Takes the locks of a recorded daemon: its name's and its GPUs'.
pub(crate) fn lock_recorded(mps: &Mps, record: &DaemonRecord) -> Result<lock::Held, MpsError> {
    lock::daemon(
        mps,
        &record.name,
        record.job.as_deref(),
        record.gpu_uuids.iter().map(String::as_str),
    )
}

/// [`stop`], for a caller that holds the daemon's locks.
pub(crate) fn stop_held(
    mps: &Mps,
    log: &EventLog,
    record: &DaemonRecord,
    grace: Duration,
) -> Result<StopOutcome, MpsError> {
    let still = records(mps, &log.snapshot()?)?
        .into_iter()
        .any(|r| r.name == record.name && r.identity() == record.identity());
    if !still {
        return Ok(StopOutcome::Gone {
            name: record.name.clone(),
        });
    }
    let subject = Subject::Daemon(record.name.clone());
    if let Some(reason) = stale_reason(liveness(mps, record)) {
        clean_stale(mps, log, record, reason)?;
        return Ok(StopOutcome::Stale {
            name: record.name.clone(),
            reason,
        });
    }
    let method = halt(mps, record, grace)?;
    dirs::remove_leftovers(Path::new(&record.pipe_directory));
    log.append(
        subject,
        Event::DaemonStopped {
            process: record.identity(),
            method,
        },
    )?;
    Ok(StopOutcome::Stopped {
        name: record.name.clone(),
        method,
    })
}

/// Records that a record no longer names its daemon, and removes the socket and pid file the
/// daemon left, unless some daemon still answers in its pipe directory.
fn clean_stale(
    mps: &Mps,
    log: &EventLog,
    record: &DaemonRecord,
    reason: StaleReason,
) -> Result<(), MpsError> {
    log.append(
        Subject::Daemon(record.name.clone()),
        Event::DaemonStaleCleaned {
            process: record.identity(),
            reason,
        },
    )?;
    dirs::remove_leftovers_of_the_gone(mps.proc, Path::new(&record.pipe_directory));
    Ok(())
}

/// Whether a daemon is the caller's to pick without naming it: under a Slurm job only the job's
/// own daemons are (another job's are never taken for its own); outside one, every daemon.
pub(crate) fn in_scope(mps: &Mps, record: &DaemonRecord) -> bool {
    job_in_scope(mps, record.job.as_deref())
}

/// [`in_scope`], by the job a daemon (or a start under way) belongs to.
pub(crate) fn job_in_scope(mps: &Mps, job: Option<&str>) -> bool {
    match &mps.env.job {
        Some(mine) => job == Some(mine.as_str()),
        None => true,
    }
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
    let open = starts(&log.snapshot()?)?;
    for start in open {
        if wanted(&start.name, start.job.as_deref())
            && start.intent.starter.pid != std::process::id()
            && !cut_short(mps, &start.intent)
        {
            drop(lock::daemon(
                mps,
                &start.name,
                start.job.as_deref(),
                [start.intent.gpu.as_str()],
            )?);
        }
    }
    Ok(())
}

/// Picks one record: by name, else the sole record (of the caller's job, under Slurm), else the
/// sole live one.
pub(crate) fn select<'r>(
    mps: &Mps,
    records: &'r [DaemonRecord],
    name: Option<&str>,
) -> Result<&'r DaemonRecord, MpsError> {
    if let Some(name) = name {
        // Under a job, its own daemon of that name first.
        let scoped = scoped_name(name, mps.env.job.as_deref());
        return records
            .iter()
            .find(|r| r.name == scoped)
            .or_else(|| records.iter().find(|r| r.name == name))
            .ok_or_else(|| MpsError::NoSuchDaemon(name.to_owned()));
    }
    let mine: Vec<&DaemonRecord> = records.iter().filter(|r| in_scope(mps, r)).collect();
    match mine.as_slice() {
        [] => Err(MpsError::NoDaemon),
        [one] => Ok(one),
        several => {
            let live: Vec<&DaemonRecord> = several
                .iter()
                .copied()
                .filter(|r| liveness(mps, r) == Liveness::Live)
                .collect();
            match live.as_slice() {
                [one] => Ok(one),
                _ => Err(MpsError::SeveralDaemons(
                    several.iter().map(|r| r.name.clone()).collect(),
                )),
            }
        }
    }
}

/// The GPU a selector names for `--gpu`: a UUID or prefix as given (matched against the
/// records, so no nvidia-smi is needed), anything else resolved under the current mask, which
/// must come to exactly one GPU.
pub(crate) fn one_gpu(mps: &Mps, selector: &str) -> Result<String, MpsError> {
    let parsed = Selector::parse(Some(selector)).map_err(MpsError::Selector)?;
    if let Selector::One(Atom::UuidPrefix(prefix)) = parsed {
        return Ok(prefix);
    }
    let plan = resolve(mps, &topology(mps)?, Some(selector))?;
    match plan.gpus.as_slice() {
        [gpu] => Ok(gpu.uuid.clone()),
        gpus => Err(MpsError::NotOneGpu {
            selector: selector.to_owned(),
            count: gpus.len(),
        }),
    }
}

/// The sole live daemon serving `gpu` (a UUID or unique prefix).
pub(crate) fn select_for_gpu<'r>(
    mps: &Mps,
    records: &'r [DaemonRecord],
    gpu: &str,
) -> Result<&'r DaemonRecord, MpsError> {
    let serving: Vec<&DaemonRecord> = records
        .iter()
        .filter(|r| in_scope(mps, r))
        .filter(|r| r.gpu_uuids.iter().any(|u| u.starts_with(gpu)))
        .filter(|r| liveness(mps, r) == Liveness::Live)
        .collect();
    match serving.as_slice() {
        [one] => Ok(one),
        [] => Err(MpsError::NoDaemonForGpu(gpu.to_owned())),
        several => Err(MpsError::SeveralDaemons(
            several.iter().map(|r| r.name.clone()).collect(),
        )),
    }
}

/// The environment that points CUDA clients at a daemon.
pub(crate) fn environment(record: &DaemonRecord) -> Vec<(&'static str, String)> {
    let mut env: Vec<(&'static str, String)> = control::environment(
        Path::new(&record.pipe_directory),
        Path::new(&record.log_directory),
    )
    .into_iter()
    .collect();
    env.push((EnvVars::CUDA_VISIBLE_DEVICES, record.gpu_uuids.join(",")));
    env
}

/// A live record, or the reason it is not.
pub(crate) fn require_live(mps: &Mps, record: &DaemonRecord) -> Result<(), MpsError> {
    match stale_reason(liveness(mps, record)) {
        None => Ok(()),
        Some(reason) => Err(MpsError::NotRunning {
            name: record.name.clone(),
            pid: record.pid,
            reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::StatePaths;
    use crate::process::FakeProc;

    const UID: u32 = 1000;

    fn paths() -> StatePaths {
        StatePaths {
            root: PathBuf::from("/state"),
            host: "node".into(),
            uid: UID,
        }
    }

    fn record(name: &str, pid: u32, gpu: &str) -> DaemonRecord {
        DaemonRecord {
            name: name.into(),
            uid: UID,
            host: "node".into(),
            topology_mode: TopologyMode::SingleGpu,
            gpu_uuids: vec![gpu.into()],
            pipe_directory: format!("/tmp/unilab-{UID}/mps/{name}"),
            log_directory: format!("/state/node/{UID}/mps/{name}/log"),
            pid,
            process_start_ticks: 7,
            created_at: 0.0,
            job: None,
        }
    }

    fn mps<'a>(paths: &'a StatePaths, proc: &'a FakeProc) -> Mps<'a> {
        Mps {
            paths,
            proc,
            smi: crate::tool::Tool::new("nvidia-smi", Duration::from_secs(1)),
            control: crate::tool::Tool::new("nvidia-cuda-mps-control", Duration::from_secs(1)),
            env: crate::mps::HostEnv::default(),
        }
    }

    fn live(pids: &[u32]) -> FakeProc {
        pids.iter().fold(FakeProc::default(), |proc, pid| {
            proc.with(
                ProcessIdentity {
                    pid: *pid,
                    start_ticks: 7,
                },
                'S',
                UID,
            )
        })
    }

    #[test]
    fn without_a_name_the_sole_record_or_else_the_sole_live_one_is_chosen() {
        let paths = paths();
        let records = [
            record("a", 10, "GPU-aaaa1111"),
            record("b", 11, "GPU-bbbb2222"),
        ];
        let proc = live(&[11]);
        assert_eq!(
            select(&mps(&paths, &proc), &records, None).unwrap().name,
            "b"
        );
        let proc = live(&[]);
        assert_eq!(
            select(&mps(&paths, &proc), &records[..1], None)
                .unwrap()
                .name,
            "a",
            "a sole record is chosen even when it is stale, so that stop can clean it"
        );
        let proc = live(&[10, 11]);
        assert!(matches!(
            select(&mps(&paths, &proc), &records, None),
            Err(MpsError::SeveralDaemons(names)) if names == ["a", "b"]
        ));
        assert!(matches!(
            select(&mps(&paths, &proc), &records, Some("c")),
            Err(MpsError::NoSuchDaemon(_))
        ));
    }

    #[test]
    fn a_gpu_is_served_only_by_a_live_daemon_found_by_uuid_prefix() {
        let paths = paths();
        let records = [
            record("a", 10, "GPU-aaaa1111"),
            record("b", 11, "GPU-bbbb2222"),
        ];
        let proc = live(&[10]);
        let mps = mps(&paths, &proc);
        assert_eq!(
            select_for_gpu(&mps, &records, "GPU-aaaa").unwrap().name,
            "a"
        );
        assert!(matches!(
            select_for_gpu(&mps, &records, "GPU-bbbb"),
            Err(MpsError::NoDaemonForGpu(_))
        ));
    }

    #[test]
    fn default_names_come_from_the_uuid() {
        assert_eq!(
            default_name("GPU-0F8E0C2A-5b5e-4c47-9d0a-1a2b3c4d5e6f", None),
            "gpu-0f8e0c2a"
        );
        validate_name(&default_name("GPU-0f8e0c2a-5b5e", None)).unwrap();
    }

    #[test]
    fn names_are_validated() {
        for bad in ["", ".hidden", "a/b", "a b", &"x".repeat(65), "..", "ü"] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        for good in ["gpu-0f8e0c2a", "train_1", "a.b-c"] {
            validate_name(good).unwrap();
        }
    }
}
