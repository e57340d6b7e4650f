//! `soak run`: supervise one command to a verdict, recording every sample, and leave an artifact.
//!
//! The schedule is fixed at spawn (sample n is due at `n × interval`), so it does not drift with
//! the sampler's own cost. Between samples the supervisor watches for the command's exit and for
//! signals, so a verdict never waits a whole interval.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::artifact;
use super::guard::{self, GuardStatus};
use super::progress;
use super::sampler::{GpuPoller, Sampler};
use crate::event::soak::*;
use crate::event::{Event, Subject};
use crate::log::{EventLog, LogError};
use crate::paths::StatePaths;
use crate::process::{self, ProcSource, ProcessIdentity, Signal, SystemProc};
use crate::redact::redact;
use crate::tool::Tool;

/// How much of each output stream the artifact keeps.
pub const TAIL_BYTES: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    #[error("{0}")]
    Invalid(String),
    #[error("refusing the progress directory `{}`: {reason}", .path.display())]
    ProgressDir { path: PathBuf, reason: String },
    #[error("cannot write the artifact `{}`", .path.display())]
    Output {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot prepare `{}`", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Log(Box<LogError>),
    #[error("no soak `{0}` is recorded")]
    NoSuchSoak(String),
}

impl From<LogError> for SoakError {
    fn from(e: LogError) -> Self {
        SoakError::Log(Box::new(e))
    }
}

impl SoakError {
    pub fn hint(&self) -> Option<String> {
        match self {
            SoakError::Invalid(_) => Some("see `unilab soak run --help`".into()),
            SoakError::ProgressDir { .. } => Some(
                "use a directory you own that others cannot write (e.g. `chmod go-w DIR`)".into(),
            ),
            SoakError::Output { .. } => {
                Some("`unilab soak export ID --output FILE` writes it again from the log".into())
            }
            SoakError::NoSuchSoak(_) => Some("see `unilab soak list`".into()),
            SoakError::Log(e) => e.hint(),
            SoakError::Io { .. } => None,
        }
    }
}

/// A validated `soak run`.
#[derive(Debug, Clone)]
pub struct SoakSpec {
    pub command: Vec<String>,
    pub progress_dir: PathBuf,
    pub output: PathBuf,
    pub parameters: SoakParameters,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub metadata: BTreeMap<String, String>,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl SoakSpec {
    /// Checks the limits against each other and the directories against the user.
    #[expect(
        clippy::too_many_arguments,
        reason = "one argument per `soak run` flag"
    )]
    pub fn validate(
        command: Vec<String>,
        progress_dir: PathBuf,
        output: PathBuf,
        interval: Duration,
        startup: Duration,
        stale: Duration,
        grace: Duration,
        min_duration: Duration,
        cwd: Option<PathBuf>,
        env: Vec<(String, String)>,
        metadata: Vec<(String, String)>,
        uid: u32,
    ) -> Result<Self, SoakError> {
        let invalid = |s: String| Err(SoakError::Invalid(s));
        if command.is_empty() {
            return invalid("no command to run: put it after `--`".into());
        }
        if interval < Duration::from_millis(10) {
            return invalid("`--sample-interval` must be at least 10 ms".into());
        }
        if startup < interval {
            return invalid("`--startup-timeout` must be at least one sample interval".into());
        }
        if stale < interval {
            return invalid("`--stale-progress` must be at least one sample interval".into());
        }
        let absolute = |p: PathBuf| -> Result<PathBuf, SoakError> {
            if p.is_absolute() {
                return Ok(p);
            }
            std::env::current_dir()
                .map(|cwd| cwd.join(&p))
                .map_err(|source| SoakError::Io { path: p, source })
        };
        let cwd = absolute(cwd.unwrap_or_else(|| PathBuf::from(".")))?;
        let cwd = match std::fs::canonicalize(&cwd) {
            Ok(resolved) if resolved.is_dir() => resolved,
            _ => return invalid(format!("`--cwd {}` is not a directory", cwd.display())),
        };
        let progress_dir = absolute(progress_dir)?;
        if !progress_dir.exists() {
            std::fs::create_dir_all(&progress_dir).map_err(|source| SoakError::Io {
                path: progress_dir.clone(),
                source,
            })?;
        }
        // Others' writes would fake progress: the directory must be the user's alone.
        if let Some(reason) = crate::paths::distrust_directory(&progress_dir, uid) {
            return Err(SoakError::ProgressDir {
                path: progress_dir,
                reason,
            });
        }
        let output = absolute(output)?;
        if !output.parent().is_some_and(Path::is_dir) {
            return invalid(format!(
                "the directory of `--output {}` does not exist",
                output.display()
            ));
        }
        Ok(Self {
            command,
            progress_dir,
            output,
            parameters: SoakParameters {
                sample_interval_ms: ms(interval),
                startup_timeout_ms: ms(startup),
                stale_progress_ms: ms(stale),
                shutdown_grace_ms: ms(grace),
                min_duration_ms: ms(min_duration),
            },
            cwd,
            env,
            metadata: metadata.into_iter().collect(),
        })
    }
}

/// What `soak run` reports.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub soak_id: String,
    pub outcome: Outcome,
    pub artifact: PathBuf,
    pub digest: String,
}

/// What a soak runs against; every part is a seam.
pub struct SoakContext<'a> {
    pub paths: &'a StatePaths,
    pub log: &'a EventLog,
    pub smi: Tool,
    /// The binary to run as the guard (`unilab` itself).
    pub guard_program: PathBuf,
    pub runtime_json: String,
    pub show_status: bool,
}

fn new_soak_id() -> String {
    let now = jiff::Timestamp::now();
    let mut hasher = blake3::Hasher::new();
    hasher.update(&std::process::id().to_le_bytes());
    hasher.update(&now.as_nanosecond().to_le_bytes());
    let salt = hasher.finalize().to_hex();
    format!("{}-{}", now.strftime("%Y%m%dT%H%M%S"), &salt[..4])
}

/// Copies a child's output through to ours, keeping the last [`TAIL_BYTES`].
fn pump(
    mut from: impl Read + Send + 'static,
    mut to: impl Write + Send + 'static,
) -> (JoinHandle<()>, Arc<Mutex<Vec<u8>>>) {
    let tail = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&tail);
    let handle = std::thread::spawn(move || {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match from.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    // A closed terminal must not stop the command: keep reading regardless.
                    let _ = to.write_all(&chunk[..n]).and_then(|()| to.flush());
                    if let Ok(mut tail) = kept.lock() {
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
    (handle, tail)
}

fn signal_tree(proc: &dyn ProcSource, root: u32, uid: u32, signal: Signal) {
    for stat in process::tree(Path::new("/proc"), root) {
        let _ = process::signal(proc, stat.identity(), uid, signal);
    }
}

/// Live descendants of `root` (zombies awaiting the guard's reaping do not count).
fn live_tree(root: u32) -> Vec<process::ProcStat> {
    process::tree(Path::new("/proc"), root)
        .into_iter()
        .filter(|s| !s.has_exited())
        .collect()
}

fn wait_until(deadline: Instant, mut done: impl FnMut() -> bool) -> bool {
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| {
            bytes
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn describe_exit(status: &GuardStatus) -> Option<String> {
    match (status.exit_code, status.exit_signal) {
        (Some(0), _) => None,
        (Some(code), _) => Some(format!("the command exited with code {code}")),
        (None, Some(signal)) => Some(format!(
            "the command was killed by signal {signal}{}",
            nix::sys::signal::Signal::try_from(signal)
                .map(|s| format!(" ({})", s.as_str()))
                .unwrap_or_default()
        )),
        (None, None) => Some("the command's exit status is unknown".into()),
    }
}

/// Runs the soak to its verdict. The verdict is recorded even when writing the artifact fails.
pub fn run(
    ctx: &SoakContext,
    spec: &SoakSpec,
    interrupted: &AtomicBool,
) -> Result<Verdict, SoakError> {
    let proc = SystemProc::default();
    let uid = ctx.paths.uid;
    let soak_id = new_soak_id();
    let subject = || Subject::Soak(soak_id.clone());
    let work_dir = ctx.paths.user_dir().join("soaks").join(&soak_id);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&work_dir)
        .map_err(|source| SoakError::Io {
            path: work_dir.clone(),
            source,
        })?;
    let status_path = work_dir.join("guard-status");
    let me = proc
        .stat(std::process::id())
        .map(|s| s.identity())
        .unwrap_or(ProcessIdentity {
            pid: std::process::id(),
            start_ticks: 0,
        });
    let params = spec.parameters.clone();
    ctx.log.append(
        subject(),
        Event::SoakStarted(Box::new(SoakStart {
            soak_id: soak_id.clone(),
            command: spec.command.clone(),
            cwd: spec.cwd.display().to_string(),
            progress_dir: spec.progress_dir.display().to_string(),
            output: spec.output.display().to_string(),
            parameters: params.clone(),
            metadata: spec.metadata.clone(),
            environment: spec
                .env
                .iter()
                .map(|(k, v)| (k.clone(), redact(k, v).to_owned()))
                .collect(),
            supervisor: me,
            runtime_json: ctx.runtime_json.clone(),
        })),
    )?;

    let interval = Duration::from_millis(params.sample_interval_ms);
    let grace = Duration::from_millis(params.shutdown_grace_ms);
    let baseline = progress::signature(&spec.progress_dir);
    let t0 = Instant::now();
    let spawned = Command::new(&ctx.guard_program)
        .arg(guard::SUBCOMMAND)
        .arg("--status")
        .arg(&status_path)
        .arg("--")
        .args(&spec.command)
        .current_dir(&spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut guard_child: Option<Child> = None;
    let mut pumps = Vec::new();
    let (mut stdout_tail, mut stderr_tail) = (Arc::default(), Arc::default());
    let mut failure: Option<(FailureKind, String)> = None;
    match spawned {
        Ok(mut child) => {
            if let Some(out) = child.stdout.take() {
                let (h, t) = pump(out, std::io::stdout());
                pumps.push(h);
                stdout_tail = t;
            }
            if let Some(err) = child.stderr.take() {
                let (h, t) = pump(err, std::io::stderr());
                pumps.push(h);
                stderr_tail = t;
            }
            guard_child = Some(child);
        }
        Err(e) => {
            failure = Some((
                FailureKind::SpawnFailed,
                format!("cannot start the soak guard: {e}"),
            ))
        }
    }
    let guard_pid = guard_child.as_ref().map(Child::id).unwrap_or(0);
    let sampler = Sampler {
        proc_root: PathBuf::from("/proc"),
        progress_dir: spec.progress_dir.clone(),
        gpus: Some(GpuPoller::start(ctx.smi.clone(), interval)),
    };

    let mut last_signature = baseline;
    let mut first_progress: Option<Duration> = None;
    let mut last_change: Option<Duration> = None;
    let mut index = 0u64;
    while failure.is_none() {
        let due = t0 + interval.mul_f64(index as f64);
        while Instant::now() < due
            && !interrupted.load(Ordering::Relaxed)
            && !GuardStatus::read(&status_path).exited()
        {
            std::thread::sleep(
                // The verdict may wait this long after the command exits; sampling does not.
                Duration::from_millis(100).min(due.saturating_duration_since(Instant::now())),
            );
        }
        let elapsed = t0.elapsed();
        let sample = sampler.sample(index, elapsed, guard_pid);
        if sample.progress != last_signature {
            last_signature = sample.progress;
            first_progress.get_or_insert(elapsed);
            last_change = Some(elapsed);
        }
        if ctx.show_status {
            let rss: u64 = sample.processes.iter().map(|p| p.rss_bytes).sum();
            let gpu_mib: u64 = sample
                .gpus
                .iter()
                .flat_map(|g| &g.processes)
                .filter_map(|p| p.used_memory_mib)
                .sum();
            let progress_age = last_change
                .map(|c| format!("{:.0} s ago", (elapsed - c).as_secs_f64()))
                .unwrap_or_else(|| "none yet".into());
            let mut err = std::io::stderr();
            let _ = write!(
                err,
                "\r\x1b[2Ksoak {soak_id}: {:.0} s, {} samples, progress {progress_age}, RSS {} MiB, GPU {gpu_mib} MiB",
                elapsed.as_secs_f64(),
                index + 1,
                rss >> 20
            );
            let _ = err.flush();
        }
        if let Err(e) = ctx
            .log
            .append(subject(), Event::SoakSampled(Box::new(sample)))
        {
            failure = Some((
                FailureKind::MonitorError,
                format!("cannot record a sample: {e}"),
            ));
            break;
        }
        index += 1;
        let status = GuardStatus::read(&status_path);
        if let Some(reason) = &status.spawn_failed {
            failure = Some((FailureKind::SpawnFailed, reason.clone()));
        } else if status.exited() {
            break;
        } else if interrupted.load(Ordering::Relaxed) {
            failure = Some((
                FailureKind::Interrupted,
                "unilab was interrupted; the command was stopped".into(),
            ));
        } else if first_progress.is_none()
            && elapsed >= Duration::from_millis(params.startup_timeout_ms)
        {
            failure = Some((
                FailureKind::StartupTimeout,
                format!(
                    "no progress in `{}` within the startup timeout of {} s",
                    spec.progress_dir.display(),
                    params.startup_timeout_ms as f64 / 1000.0
                ),
            ));
        } else if let Some(change) = last_change
            && elapsed.saturating_sub(change) >= Duration::from_millis(params.stale_progress_ms)
        {
            failure = Some((
                FailureKind::StaleProgress,
                format!(
                    "no progress for {:.1} s (stale after {} s)",
                    (elapsed - change).as_secs_f64(),
                    params.stale_progress_ms as f64 / 1000.0
                ),
            ));
        }
    }
    if ctx.show_status {
        let _ = writeln!(std::io::stderr());
    }
    drop(sampler);

    let mut leaked = Vec::new();
    if guard_pid != 0 {
        if failure.is_some() {
            // Fail closed: SIGTERM the whole tree, give it the grace period, SIGKILL the rest.
            signal_tree(&proc, guard_pid, uid, Signal::Terminate);
            let gone = wait_until(Instant::now() + grace, || live_tree(guard_pid).is_empty());
            if !gone {
                signal_tree(&proc, guard_pid, uid, Signal::Kill);
            }
        } else {
            // The command exited: whatever outlives it by the grace period has leaked.
            wait_until(Instant::now() + grace, || live_tree(guard_pid).is_empty());
            for stat in live_tree(guard_pid) {
                leaked.push(LeakedProcess {
                    identity: stat.identity(),
                    name: stat.comm.clone(),
                    cmdline: cmdline(stat.pid),
                });
                let _ = process::signal(&proc, stat.identity(), uid, Signal::Kill);
            }
        }
        wait_until(Instant::now() + Duration::from_secs(5), || {
            live_tree(guard_pid).is_empty() && GuardStatus::read(&status_path).exited()
        });
    }
    let status = GuardStatus::read(&status_path);
    if let Some(mut child) = guard_child {
        // Closing its input tells the guard to kill anything left and exit.
        drop(child.stdin.take());
        if !wait_until(Instant::now() + Duration::from_secs(5), || {
            matches!(child.try_wait(), Ok(Some(_)))
        }) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    for pump in pumps {
        let _ = pump.join();
    }
    let duration = t0.elapsed();
    let exit = status.started.map(|_| ExitInfo {
        code: status.exit_code,
        signal: status.exit_signal,
    });
    let min_duration = Duration::from_millis(params.min_duration_ms);
    let outcome = if let Some((kind, reason)) = failure {
        Outcome {
            status: OutcomeStatus::Failed,
            failure_kind: Some(kind),
            reason,
        }
    } else if let Some(reason) = describe_exit(&status) {
        Outcome {
            status: OutcomeStatus::Failed,
            failure_kind: Some(FailureKind::CommandFailed),
            reason,
        }
    } else if !leaked.is_empty() {
        let names: Vec<String> = leaked
            .iter()
            .map(|l| format!("{} ({})", l.identity.pid, l.name))
            .collect();
        Outcome {
            status: OutcomeStatus::Failed,
            failure_kind: Some(FailureKind::LeakedProcesses),
            reason: format!(
                "{} process(es) outlived the command by the {} s grace period and were killed: {}",
                leaked.len(),
                grace.as_secs_f64(),
                names.join(", ")
            ),
        }
    } else if duration < min_duration {
        Outcome {
            status: OutcomeStatus::Failed,
            failure_kind: Some(FailureKind::TooShort),
            reason: format!(
                "ran {:.1} s, less than the minimum of {} s",
                duration.as_secs_f64(),
                min_duration.as_secs_f64()
            ),
        }
    } else {
        Outcome {
            status: OutcomeStatus::Passed,
            failure_kind: None,
            reason: format!("the command exited 0 after {:.1} s", duration.as_secs_f64()),
        }
    };
    let tail = |t: &Arc<Mutex<Vec<u8>>>| t.lock().map(|t| t.clone()).unwrap_or_default();
    ctx.log.append(
        subject(),
        Event::SoakFinished(Box::new(SoakEnd {
            outcome: outcome.clone(),
            exit,
            duration_ms: ms(duration),
            first_progress_ms: first_progress.map(ms),
            last_progress_ms: last_change.map(ms),
            leaked_processes: leaked,
            stdout_tail: tail(&stdout_tail),
            stderr_tail: tail(&stderr_tail),
        })),
    )?;
    let _ = std::fs::remove_dir_all(&work_dir);
    let digest = write_artifact(ctx.log, &soak_id, &spec.output)?;
    Ok(Verdict {
        soak_id,
        outcome,
        artifact: spec.output.clone(),
        digest,
    })
}

/// Renders the soak's artifact from the log, writes it atomically to `path` and records that.
pub fn write_artifact(log: &EventLog, soak_id: &str, path: &Path) -> Result<String, SoakError> {
    let records = artifact::collect(&log.snapshot()?, soak_id)?
        .ok_or_else(|| SoakError::NoSuchSoak(soak_id.to_owned()))?;
    let (bytes, digest) = artifact::render(&records);
    artifact::write_atomically(path, &bytes).map_err(|source| SoakError::Output {
        path: path.to_owned(),
        source,
    })?;
    log.append(
        Subject::Soak(soak_id.to_owned()),
        Event::ArtifactWritten {
            path: path.display().to_string(),
            digest: digest.clone(),
            bytes: bytes.len() as u64,
        },
    )?;
    Ok(digest)
}

/// Whether an output stream is a terminal, for the live status line.
pub fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}
