//! `unilab soak run`: a soak from the command line to its verdict.

use super::to_json;
use crate::cli::soak::SoakRunArgs;
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::event::soak::OutcomeStatus;
use crate::log::EventLog;
use crate::output::Output;
use crate::paths::StatePaths;
use crate::snapshot::runtime_snapshot;
use crate::soak::SoakRequest;
use crate::soak::console::Console;
use crate::soak::error::{OutputFile, SoakError};
use crate::soak::request::SoakSpec;
use crate::soak::supervise::{self, Renderers, SoakContext};
use crate::tool;
use std::sync::Arc;

/// How long `soak run` waits for nvidia-smi's part of the runtime snapshot before it starts the
/// command anyway.
const SNAPSHOT_SMI_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

pub(super) fn soak_run(
    paths: &StatePaths,
    args: SoakRunArgs,
    out: &mut Output,
) -> Result<Exit, Error> {
    let soak_id = supervise::new_soak_id();
    // Its job and rank are decided by the check, from the request and the launchers' variables.
    let spec = SoakSpec::check(request_of(args), soak_id, paths, &|name| {
        std::env::var_os(name)
    })?;
    if let Some(job) = &spec.job {
        for warning in &job.warnings {
            out.warn(warning);
        }
    }
    let verdict = supervised(paths, &spec, out);
    // However it ended, the rank has: its run is over for the ranks that arrive later.
    if let Some(job) = &spec.job
        && let Err(e) = job.end()
    {
        out.warn(&format!(
            "{}: ranks that start later may join this run",
            Error::from(e).chain_text()
        ));
    }
    tell(verdict?, out)
}

/// The soak `spec` describes, supervised to its verdict: the log opened, the runtime snapshot
/// taken, the command run.
fn supervised(
    paths: &StatePaths,
    spec: &SoakSpec,
    out: &mut Output,
) -> Result<supervise::RunReport, Error> {
    let log = EventLog::open(&paths.log_path(), paths.scope(), crate::read::VIEWS)?;
    room_warnings(
        paths,
        &log,
        std::time::Duration::from_millis(spec.parameters.sample_interval_ms),
        out,
    )?;
    // From here on an interruption is the soak's to handle: one that came while the snapshot's
    // nvidia-smi (hung, deaf to SIGTERM) ran would otherwise end unilab and leave it running.
    let interrupted = crate::commands::raised_on(&crate::commands::STOP_SIGNALS)?;
    let smi = tool::nvidia_smi();
    let gpu_tool_present = !tool::nvidia_smi_absent();
    if smi.locate().is_none() {
        out.note(&no_gpu_tool(&smi));
    }
    // A hung nvidia-smi must not hold the command back: the snapshot waits for it briefly, and
    // records that it did not answer.
    let runtime = runtime_snapshot(&spec.cwd, &smi.clone().within(SNAPSHOT_SMI_LIMIT));
    for error in runtime["errors"].as_array().into_iter().flatten() {
        crate::trace::detail!(
            crate::trace::STEPS,
            "runtime snapshot: {}",
            error.as_str().unwrap_or_default()
        );
    }
    let runtime_json = runtime.to_string();
    let guard_program = std::env::current_exe().map_err(Error::environment(
        "find the unilab binary to run as the soak guard",
    ))?;
    out.flush()?;
    let ctx = SoakContext {
        paths,
        log: &log,
        smi,
        gpu_tool_present,
        guard_program,
        runtime_json,
        console: Arc::new(Console::of_this_process(out.is_quiet(), out.json)),
        render: Renderers {
            artifact: crate::read::stream::write_file,
            report: crate::view::report::of_soak,
        },
    };
    Ok(supervise::run(&ctx, spec, &interrupted)?)
}

/// What `soak run` asks for, in the soak's own types: clap's arguments, every one of them
/// (a flag added and not mapped does not compile), nothing decided yet.
fn request_of(args: SoakRunArgs) -> SoakRequest {
    let SoakRunArgs {
        command,
        progress_dir,
        output,
        report,
        metrics_file,
        force,
        sample_interval,
        startup_timeout,
        stale_progress,
        shutdown_grace,
        min_duration,
        step_timeout,
        phase_timeout,
        cwd,
        env,
        env_clear,
        meta,
        meta_json,
        allow_no_progress,
        py_spy,
        dump_signal,
        dump_wait,
        fail_fast,
        max_memory,
        max_gpu_memory,
        max_memory_growth,
        warmup,
        job,
        rank,
        run,
        on_job_alarm,
    } = args;
    SoakRequest {
        command,
        progress_dir,
        output,
        report,
        metrics_file,
        force,
        sample_interval,
        startup_timeout,
        stale_progress,
        shutdown_grace,
        min_duration,
        step_timeout,
        phase_timeouts: phase_timeout,
        cwd,
        env,
        env_clear,
        meta,
        meta_json,
        allow_no_progress,
        py_spy,
        dump_signal,
        dump_wait,
        fail_fast,
        max_memory,
        max_gpu_memory,
        max_memory_growth,
        warmup,
        job,
        rank,
        run,
        on_job_alarm,
    }
}

/// What `soak run` says once, before the soak starts, when there is no nvidia-smi to run: the
/// samples will have no GPU data, and how to name one. Where `UNILAB_NVIDIA_SMI` names none
/// and `PATH` has none, that is all that is said of it (the samples record no error); a tool
/// named but missing is an error of every sample besides.
fn no_gpu_tool(smi: &tool::Tool) -> String {
    use crate::env::EnvVars;
    if std::env::var_os(EnvVars::UNILAB_NVIDIA_SMI).is_some_and(|v| !v.is_empty()) {
        format!(
            "no GPU tool: `{}` (named by `{}`) was not found or cannot be run, so the GPU \
columns will be empty; point it at nvidia-smi, or unset it to search `PATH`",
            smi.name(),
            EnvVars::UNILAB_NVIDIA_SMI
        )
    } else {
        format!(
            "no GPU tool: `{}` was not found on `PATH`, so the GPU columns will be empty; name \
one with `{}`",
            smi.name(),
            EnvVars::UNILAB_NVIDIA_SMI
        )
    }
}

/// Says, before the soak starts, when its record may not fit: a log over its warning size, a
/// filesystem with less free space than a week of this soak.
fn room_warnings(
    paths: &StatePaths,
    log: &EventLog,
    interval: std::time::Duration,
    out: &mut Output,
) -> Result<(), Error> {
    use crate::env::EnvVars;
    let warn_size = match std::env::var(EnvVars::UNILAB_LOG_WARN_SIZE) {
        Ok(text) => match crate::size::parse_size(&text) {
            Ok(size) => Some(size),
            Err(e) => {
                out.warn(&format!(
                    "{}: {e}; the default is used",
                    EnvVars::UNILAB_LOG_WARN_SIZE
                ));
                None
            }
        },
        Err(_) => None,
    };
    let free = crate::soak::retention::filesystem(&paths.user_dir()).map(|(_, free, _)| free);
    let snapshot = log.snapshot()?;
    for warning in
        crate::soak::retention::warnings(&paths.log_path(), &snapshot, interval, warn_size, free)
    {
        out.warn(&warning);
    }
    Ok(())
}

/// Tells the verdict and what was written. The verdict is recorded: whatever could not be
/// written is said after it, with the soak's id to write it again from the log.
fn tell(verdict: supervise::RunReport, out: &mut Output) -> Result<Exit, Error> {
    let (artifact, digest, mut failed): (_, _, Option<Error>) = match verdict.digest {
        Ok(digest) => (Some(&verdict.artifact), Some(digest), None),
        Err(e) => (
            None,
            None,
            Some(
                SoakError::NotWritten {
                    kind: OutputFile::Artifact,
                    soak_id: verdict.soak_id.clone(),
                    path: verdict.artifact.clone(),
                    source: Box::new(e),
                }
                .into(),
            ),
        ),
    };
    let mut report_written = None;
    if let Some((path, written)) = verdict.report {
        match (written.map_err(Error::from), &failed) {
            (Ok(()), _) => report_written = Some(path),
            (Err(e), None) => failed = Some(e),
            // The artifact's failure is the one returned; this one is said at least.
            (Err(e), Some(_)) => out.warn(&e.chain_text()),
        }
    }
    let status = verdict.outcome.status.as_str();
    if out.json {
        out.json_line(&serde_json::json!({
            "soak_id": verdict.soak_id,
            "outcome": to_json(&verdict.outcome)?,
            "artifact": artifact,
            "digest": digest,
            "report": report_written,
        }))?;
    } else {
        out.line(&format!(
            "soak {} {}: {}",
            verdict.soak_id,
            out.paint.status(status),
            // A job's failure tells the alarm's reason: another rank's text, or a forger's.
            crate::text::foreign(&verdict.outcome.reason)
        ))?;
        for (label, path) in [("artifact", artifact), ("report", report_written.as_ref())] {
            if let Some(path) = path {
                out.line(&format!("{label}: {}", path.display()))?;
            }
        }
    }
    if let Some(failed) = failed {
        return Err(failed);
    }
    Ok(if verdict.outcome.status == OutcomeStatus::Passed {
        Exit::Success
    } else {
        Exit::SoakFailed
    })
}
