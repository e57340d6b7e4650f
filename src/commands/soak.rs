//! `unilab soak ...` and `unilab snapshot`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::cli::{SoakCommand, SoakRunArgs};
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::event::soak::OutcomeStatus;
use crate::log::{EventLog, Snapshot};
use crate::output::{self, Output, human_time};
use crate::paths::StatePaths;
use crate::process::SystemProc;
use crate::projection::{self, Found, SoakState, SoakSummary, Soaks};
use crate::snapshot::runtime_snapshot;
use crate::soak::console::Console;
use crate::soak::error::SoakError;
use crate::soak::request::SoakRequest;
use crate::soak::supervise::{self, SoakContext};
use crate::soak::{abandon, artifact};
use crate::time::unix_seconds;
use crate::tool;

fn to_json<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, Error> {
    serde_json::to_value(value).map_err(|e| Error::Internal(e.to_string()))
}

pub(crate) fn run(
    paths: &StatePaths,
    command: SoakCommand,
    out: &mut Output,
) -> Result<Exit, Error> {
    match command {
        SoakCommand::Run(args) => soak_run(paths, args, out),
        SoakCommand::List => list(paths, out),
        SoakCommand::Show { id } => show(paths, &id, out),
        SoakCommand::Export { id, output, force } => {
            export(paths, &id, output.as_deref(), force, out)
        }
    }
}

pub(crate) fn snapshot(dir: Option<&Path>, out: &mut Output) -> Result<Exit, Error> {
    let dir = match dir {
        Some(dir) => dir.to_owned(),
        None => {
            std::env::current_dir().map_err(Error::environment("read the current directory"))?
        }
    };
    let value = runtime_snapshot(&dir, &tool::nvidia_smi());
    if out.json {
        out.json_line(&value)?;
    } else {
        out.line(
            &serde_json::to_string_pretty(&value).map_err(|e| Error::Internal(e.to_string()))?,
        )?;
    }
    Ok(Exit::Success)
}

/// How long `soak run` waits for nvidia-smi's part of the runtime snapshot before it starts the
/// command anyway.
const SNAPSHOT_SMI_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

fn soak_run(paths: &StatePaths, args: SoakRunArgs, out: &mut Output) -> Result<Exit, Error> {
    let spec = SoakRequest {
        command: args.command,
        progress_dir: args.progress_dir,
        output: args.output,
        sample_interval: args.sample_interval,
        startup_timeout: args.startup_timeout,
        stale_progress: args.stale_progress,
        shutdown_grace: args.shutdown_grace,
        min_duration: args.min_duration,
        cwd: args.cwd,
        env: args.env,
        metadata: args.meta,
        allow_no_progress: args.allow_no_progress,
    }
    .validate(paths.uid)?;
    let log = EventLog::open(&paths.log_path(), paths.scope(), projection::ALL)?;
    let smi = tool::nvidia_smi();
    // A hung nvidia-smi must not hold the command back: the snapshot waits for it briefly, and
    // records that it did not answer.
    let runtime = runtime_snapshot(&spec.cwd, &smi.clone().within(SNAPSHOT_SMI_LIMIT));
    for error in runtime["errors"].as_array().into_iter().flatten() {
        out.detail(&format!(
            "runtime snapshot: {}",
            error.as_str().unwrap_or_default()
        ));
    }
    let runtime_json = runtime.to_string();
    let guard_program = std::env::current_exe().map_err(Error::environment(
        "find the unilab binary to run as the soak guard",
    ))?;
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(signal, Arc::clone(&interrupted))
            .map_err(Error::environment("install a signal handler"))?;
    }
    out.flush()?;
    let ctx = SoakContext {
        paths,
        log: &log,
        smi,
        guard_program,
        runtime_json,
        console: Arc::new(Console::of_this_process(out.is_quiet(), out.json)),
    };
    let verdict = supervise::run(&ctx, &spec, &interrupted)?;
    let status = verdict.outcome.status.as_str();
    if out.json {
        out.json_line(&serde_json::json!({
            "soak_id": verdict.soak_id,
            "outcome": to_json(&verdict.outcome)?,
            "artifact": verdict.artifact,
            "digest": verdict.digest,
        }))?;
    } else {
        out.line(&format!(
            "soak {} {status}: {}",
            verdict.soak_id, verdict.outcome.reason
        ))?;
        out.line(&format!("artifact: {}", verdict.artifact.display()))?;
    }
    Ok(if verdict.outcome.status == OutcomeStatus::Passed {
        Exit::Success
    } else {
        Exit::SoakFailed
    })
}

/// A read of the soaks after settling the abandoned ones; `None` when nothing was recorded.
fn settled(paths: &StatePaths) -> Result<Option<Snapshot>, Error> {
    Ok(abandon::settle(paths, &SystemProc::default())?.map(|(_, snapshot)| snapshot))
}

/// The soak `id` names (an id, a unique prefix or `latest`), in a settled read of the log.
fn resolve(paths: &StatePaths, id: &str) -> Result<(Snapshot, SoakSummary), Error> {
    let snapshot = settled(paths)?.ok_or_else(|| SoakError::NoSuchSoak(id.to_owned()))?;
    let summary = named(&snapshot, id)?.ok_or_else(|| SoakError::NoSuchSoak(id.to_owned()))?;
    Ok((snapshot, summary))
}

/// The soak `id` names, if any; a prefix of several is an error that lists them.
pub(crate) fn named(snapshot: &Snapshot, id: &str) -> Result<Option<SoakSummary>, SoakError> {
    match Soaks::find(snapshot, id)? {
        Found::One(summary) => Ok(Some(*summary)),
        Found::None => Ok(None),
        Found::Ambiguous(candidates) => Err(SoakError::Ambiguous {
            id: id.to_owned(),
            candidates,
        }),
    }
}

/// `failed (stale_progress)`, or just the state.
fn status_text(summary: &SoakSummary) -> String {
    match summary.failure_kind {
        Some(kind) => format!("{} ({})", summary.state.as_str(), kind.as_str()),
        None => summary.state.as_str().to_owned(),
    }
}

fn summary_json(summary: &SoakSummary) -> serde_json::Value {
    serde_json::json!({
        "soak_id": summary.soak_id,
        "outcome": {
            "status": summary.state.as_str(),
            "failure_kind": summary.failure_kind,
            "reason": summary.reason,
        },
        "artifact": summary.output,
        "digest": summary.artifact_digest,
        "command": summary.command,
        "samples": summary.samples,
        "started_at": unix_seconds(summary.started_at_us),
        "ended_at": summary.ended_at_us.map(unix_seconds),
        "first_seq": summary.first_seq,
        "last_seq": summary.last_seq,
    })
}

fn list(paths: &StatePaths, out: &mut Output) -> Result<Exit, Error> {
    let soaks = match settled(paths)? {
        Some(snapshot) => {
            let mut soaks = Soaks::rows(&snapshot)?;
            soaks.sort_by_key(|s| s.first_seq);
            soaks
        }
        None => Vec::new(),
    };
    if out.json {
        out.json_line(&serde_json::Value::Array(
            soaks.iter().map(summary_json).collect(),
        ))?;
        return Ok(Exit::Success);
    }
    if soaks.is_empty() {
        out.note("no soaks recorded; run one with `unilab soak run`");
        return Ok(Exit::Success);
    }
    let statuses: Vec<String> = soaks.iter().map(status_text).collect();
    let width = statuses.iter().map(String::len).max().unwrap_or(0).max(6);
    out.line(&format!(
        "{:<22} {:<width$} {:<19} {:>8} {:>8}  {}",
        "ID", "STATUS", "STARTED", "DURATION", "SAMPLES", "COMMAND"
    ))?;
    for (soak, status) in soaks.iter().zip(&statuses) {
        let duration = match soak.ended_at_us {
            Some(end) => output::duration((end - soak.started_at_us) as f64 / 1e6),
            None => format!("{}+", output::age(unix_seconds(soak.started_at_us))),
        };
        let started: String = human_time(soak.started_at_us).chars().take(19).collect();
        out.line(&format!(
            "{:<22} {status:<width$} {started:<19} {duration:>8} {:>8}  {}",
            soak.soak_id,
            soak.samples,
            soak.command.join(" ")
        ))?;
    }
    Ok(Exit::Success)
}

fn show(paths: &StatePaths, id: &str, out: &mut Output) -> Result<Exit, Error> {
    let (_, summary) = resolve(paths, id)?;
    if out.json {
        out.json_line(&summary_json(&summary))?;
        return Ok(Exit::Success);
    }
    out.line(&format!("soak:     {}", summary.soak_id))?;
    out.line(&format!("command:  {}", summary.command.join(" ")))?;
    out.line(&format!("status:   {}", summary.state.as_str()))?;
    if let Some(kind) = summary.failure_kind {
        out.line(&format!("failure:  {}", kind.as_str()))?;
    }
    if let Some(reason) = &summary.reason {
        out.line(&format!("reason:   {reason}"))?;
    }
    out.line(&format!("started:  {}", human_time(summary.started_at_us)))?;
    if let Some(end) = summary.ended_at_us {
        out.line(&format!("ended:    {}", human_time(end)))?;
    }
    out.line(&format!("samples:  {}", summary.samples))?;
    out.line(&format!("artifact: {}", summary.output))?;
    if let Some(digest) = &summary.artifact_digest {
        out.line(&format!("digest:   {digest}"))?;
    }
    out.line(&format!(
        "history:  unilab history --soak {}",
        summary.soak_id
    ))?;
    Ok(Exit::Success)
}

fn export(
    paths: &StatePaths,
    id: &str,
    output: Option<&Path>,
    force: bool,
    out: &mut Output,
) -> Result<Exit, Error> {
    let (snapshot, summary) = resolve(paths, id)?;
    if summary.state == SoakState::Running {
        return Err(SoakError::StillRunning(summary.soak_id).into());
    }
    if let Some(path) = output {
        refuse_to_replace(path, force)?;
    }
    let records = artifact::collect(&snapshot, &summary.soak_id)?
        .ok_or_else(|| SoakError::NoSuchSoak(summary.soak_id.clone()))?;
    let (bytes, digest) = artifact::render(&records);
    match output {
        Some(path) => {
            artifact::write_atomically(path, &bytes).map_err(|source| SoakError::Output {
                path: path.to_owned(),
                source,
            })?;
            out.note(&format!("wrote `{}` (digest {digest})", path.display()));
        }
        None => out.raw(&bytes)?,
    }
    Ok(Exit::Success)
}

/// An existing `--output` is replaced only with `--force`, and only if it is a regular file: a
/// rename over a device, a FIFO or a symlink would replace that instead of writing into it.
fn refuse_to_replace(path: &Path, force: bool) -> Result<(), SoakError> {
    match std::fs::symlink_metadata(path) {
        Err(_) => Ok(()),
        Ok(meta) if !meta.file_type().is_file() => Err(SoakError::Output {
            path: path.to_owned(),
            source: std::io::Error::other("it exists and is not a regular file"),
        }),
        Ok(_) if force => Ok(()),
        Ok(_) => Err(SoakError::OutputExists(path.to_owned())),
    }
}
