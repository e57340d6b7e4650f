//! `unilab soak run`: a soak from the command line to its verdict.

use super::report::report_html;
use super::to_json;
use crate::cli::SoakRunArgs;
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::event::soak::OutcomeStatus;
use crate::log::EventLog;
use crate::output::Output;
use crate::paths::StatePaths;
use crate::projection::{self};
use crate::snapshot::runtime_snapshot;
use crate::soak::artifact;
use crate::soak::console::Console;
use crate::soak::error::{Invalid, SoakError};
use crate::soak::launch::{Launch, Placeholders};
use crate::soak::request::{Budgets, SoakRequest};
use crate::soak::supervise::{self, SoakContext};
use crate::tool;
use std::path::{Path, PathBuf};
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
    let launch = Launch::from_env(|name| std::env::var(name).ok());
    // `--output 'soak-{rank}.json'`: each rank of a job its own files.
    let placeholders = Placeholders {
        launch: &launch,
        host: &paths.host,
        soak_id: &soak_id,
    };
    let fill = |path: &Path| -> Result<PathBuf, Invalid> {
        let text = path
            .to_str()
            .ok_or_else(|| Invalid::NotUtf8(path.to_owned()))?;
        Ok(PathBuf::from(placeholders.fill(text)?))
    };
    let output = fill(&args.output).map_err(SoakError::from)?;
    let report = args
        .report
        .as_deref()
        .map(fill)
        .transpose()
        .map_err(SoakError::from)?;
    let budgets = budgets(&args);
    let spec = SoakRequest {
        command: args.command,
        progress_dir: args.progress_dir,
        output,
        sample_interval: args.sample_interval,
        startup_timeout: args.startup_timeout,
        stale_progress: args.stale_progress,
        shutdown_grace: args.shutdown_grace,
        min_duration: args.min_duration,
        cwd: args.cwd,
        env: args.env,
        env_clear: args.env_clear,
        metadata: args.meta.into_iter().chain(args.meta_json).collect(),
        allow_no_progress: args.allow_no_progress,
        py_spy: args.py_spy,
        dump_signal: args.dump_signal,
        dump_wait: args.dump_wait,
        fail_fast: args.fail_fast,
        budgets,
        soak_id,
        launch,
    }
    .validate(paths.uid)?;
    // Found now, not when the soak ends.
    if let Some(report) = &report {
        artifact::check_target(report).map_err(SoakError::output(report))?;
    }
    let log = EventLog::open(&paths.log_path(), paths.scope(), projection::ALL)?;
    // From here on an interruption is the soak's to handle: one that came while the snapshot's
    // nvidia-smi (hung, deaf to SIGTERM) ran would otherwise end unilab and leave it running.
    let interrupted = crate::commands::raised_on(&crate::commands::STOP_SIGNALS)?;
    let smi = tool::nvidia_smi();
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
        guard_program,
        runtime_json,
        console: Arc::new(Console::of_this_process(out.is_quiet(), out.json)),
    };
    let verdict = supervise::run(&ctx, &spec, &interrupted)?;
    if let Some(report) = &report {
        let html = report_html(&log.snapshot()?, &verdict.soak_id)?;
        artifact::write_atomically(report, html.as_bytes()).map_err(SoakError::output(report))?;
        out.note(&format!("report: {}", report.display()));
    }
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
            "soak {} {}: {}",
            verdict.soak_id,
            out.paint.status(status),
            verdict.outcome.reason
        ))?;
        out.line(&format!("artifact: {}", verdict.artifact.display()))?;
    }
    Ok(if verdict.outcome.status == OutcomeStatus::Passed {
        Exit::Success
    } else {
        Exit::SoakFailed
    })
}

/// The budgets `soak run` was given.
fn budgets(args: &SoakRunArgs) -> Budgets {
    Budgets {
        max_memory: args.max_memory,
        max_gpu_memory: args.max_gpu_memory,
        max_memory_growth: args.max_memory_growth,
        warmup: args.warmup,
    }
}
