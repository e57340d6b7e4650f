//! `unilab mps ...`: the MPS daemons of this user on this host.

use crate::mps::exec;
use crate::mps::foreground;
use crate::mps::names;
use crate::mps::plan;
use crate::mps::records;
use crate::mps::settle;
use crate::mps::start;
use crate::mps::stop;
use std::io::Write as _;
use std::time::Duration;

use crate::cli::{MpsCommand, StartArgs, StopArgs, TargetArgs};
use crate::diagnostic::Exit;
use crate::env::STOP_GRACE_SECS;
use crate::error::Error;
use crate::event::{DaemonLimits, GpuIdentity};
use crate::log::{EventLog, Snapshot};
use crate::mps::doctor::{self, CheckStatus};
use crate::mps::error::MpsError;
use crate::mps::{DaemonRecord, Mps, lock, shared, status};
use crate::output::{Output, age};
use crate::paths::StatePaths;
use crate::process::SystemProc;
use crate::projection;

pub(crate) fn run(
    paths: &StatePaths,
    command: MpsCommand,
    out: &mut Output,
) -> Result<Exit, Error> {
    let proc = SystemProc::default();
    let mps = Mps::from_process(paths, &proc);
    match command {
        MpsCommand::Status => status_command(&mps, out),
        MpsCommand::Doctor {
            selector,
            python,
            framework_view,
        } => {
            let framework = python
                .map(crate::mps::framework::Source::Python)
                .or(framework_view.map(crate::mps::framework::Source::File));
            doctor_command(&mps, selector.as_deref(), framework.as_ref(), out)
        }
        MpsCommand::Plan { selector } => plan_command(&mps, selector.as_deref(), out),
        MpsCommand::Start(args) => start(&mps, args, out),
        MpsCommand::Stop(args) => stop(&mps, &args, out),
        MpsCommand::List => list(&mps, out),
        MpsCommand::Env(target) => env(&mps, &target, out),
        MpsCommand::Exec {
            target,
            shared,
            limits,
            command,
        } => {
            let limits = DaemonLimits {
                active_thread_percentage: limits.active_thread_percentage,
                pinned_memory_limit: limits.pinned_memory_limit,
            };
            if shared {
                exec_shared(&mps, target.name.as_deref(), &limits, &command, out)
            } else {
                exec(&mps, &target, &limits, &command, out)
            }
        }
    }
}

/// A read-only view of the log, or none when nothing was ever recorded.
fn read_log(paths: &StatePaths, out: &Output) -> Result<Option<Snapshot>, Error> {
    Ok(match super::read_own_log(paths, out)? {
        Some(reader) => Some(reader.snapshot()?),
        None => None,
    })
}

fn status_command(mps: &Mps, out: &mut Output) -> Result<Exit, Error> {
    let snapshot = read_log(mps.paths, out)?;
    let status = status::host_status(mps, snapshot.as_ref())?;
    super::checked_show(snapshot.as_ref(), || show_status(&status, out))
}

fn show_status(status: &status::HostStatus, out: &mut Output) -> Result<Exit, Error> {
    if out.json {
        out.json_line(&to_json(status)?)?;
        return Ok(Exit::Success);
    }
    out.line(&format!("platform: {}", status.platform))?;
    out.line(&format!(
        "nvidia-smi: {}",
        if status.nvidia_smi_available {
            "available"
        } else {
            "unavailable"
        }
    ))?;
    out.line(&format!(
        "CUDA_VISIBLE_DEVICES: {}",
        status
            .cuda_visible_devices
            .as_deref()
            .map(|m| format!("`{m}`"))
            .unwrap_or_else(|| "unset".into())
    ))?;
    if let Some(diagnostic) = &status.diagnostic {
        out.line(&format!("diagnostic: {diagnostic}"))?;
    }
    out.line(&format!("visible GPUs: {}", status.gpus.len()))?;
    for gpu in &status.gpus {
        out.line(&format!("  {}  {}", gpu.index, gpu.uuid))?;
    }
    let modes: Vec<&str> = status
        .compatible_topology_modes
        .iter()
        .map(|m| m.as_str())
        .collect();
    out.line(&format!(
        "topology modes: {}",
        if modes.is_empty() {
            "none".into()
        } else {
            modes.join(", ")
        }
    ))?;
    out.line(&format!("control pipes: {}", status.control_pipes.len()))?;
    for pipe in &status.control_pipes {
        let owner = if pipe.managed_names.is_empty() {
            "not unilab's".to_owned()
        } else {
            format!("daemon {}", pipe.managed_names.join(", "))
        };
        out.line(&format!("  {}  ({}, {owner})", pipe.path, pipe.kind))?;
    }
    out.line(&format!("your daemons: {}", status.managed_daemons.len()))?;
    for daemon in &status.managed_daemons {
        let job = daemon
            .record
            .job
            .as_ref()
            .map(|job| format!("  job {job}"))
            .unwrap_or_default();
        out.line(&format!(
            "  {}  pid {}  {}{job}  {}",
            daemon.record.name,
            daemon.record.pid,
            out.paint.status(daemon.state),
            crate::text::count(daemon.leases as u64, "user")
        ))?;
        for finding in &daemon.log_findings {
            out.line(&format!(
                "    {} {}: {} (`{}`)",
                finding.at.as_deref().unwrap_or("-"),
                finding.file,
                finding.meaning(),
                finding.line
            ))?;
        }
    }
    Ok(Exit::Success)
}

fn doctor_command(
    mps: &Mps,
    selector: Option<&str>,
    framework: Option<&crate::mps::framework::Source>,
    out: &mut Output,
) -> Result<Exit, Error> {
    let snapshot = read_log(mps.paths, out)?;
    let report = doctor::doctor(mps, snapshot.as_ref(), selector, framework)?;
    super::checked_show(snapshot.as_ref(), || show_report(&report, out))
}

fn show_report(report: &doctor::Report, out: &mut Output) -> Result<Exit, Error> {
    if out.json {
        out.json_line(&to_json(&report)?)?;
    } else {
        for check in &report.checks {
            let mark = match check.status {
                CheckStatus::Ok => "ok  ",
                CheckStatus::Warn => "warn",
                CheckStatus::Fail => "FAIL",
                CheckStatus::Skip => "skip",
            };
            out.line(&format!(
                "[{}] {:<16} {}",
                out.paint.status(mark),
                check.name,
                check.detail
            ))?;
            if let Some(hint) = &check.hint {
                out.line(&format!("       {:<16} hint: {hint}", ""))?;
            }
        }
    }
    Ok(if report.ok {
        Exit::Success
    } else {
        Exit::Refused
    })
}

fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<serde_json::Value, Error> {
    serde_json::to_value(value).map_err(|e| Error::Internal(e.to_string()))
}

fn plan_command(mps: &Mps, selector: Option<&str>, out: &mut Output) -> Result<Exit, Error> {
    let topology = plan::topology(mps)?;
    let report = plan::report(mps, &topology, selector)?;
    if out.json {
        out.json_line(&to_json(&report)?)?;
        return Ok(Exit::Success);
    }
    let mask = match &report.cuda_visible_devices {
        Some(mask) => format!("CUDA_VISIBLE_DEVICES=`{mask}`"),
        None => "CUDA_VISIBLE_DEVICES unset".to_owned(),
    };
    let shown = selector
        .map(|s| format!("`{s}`"))
        .unwrap_or("(none)".into());
    out.line(&format!("selector: {shown} under {mask}"))?;
    if let Some(stop) = &report.mask_stopped_at {
        out.line(&format!(
            "mask: CUDA stops reading it at `{}`, which {}",
            stop.entry, stop.reason
        ))?;
    }
    let gpu_line = |g: &GpuIdentity| format!("  {}  {}", g.index, g.uuid);
    match report.topology_mode {
        Some(mode) => {
            out.line(&format!("mode: {mode}"))?;
            out.line("gpus:")?;
            for gpu in &report.gpus {
                out.line(&gpu_line(gpu))?;
            }
        }
        None => {
            out.line("mode: none until a selector names the GPUs; one daemon per GPU:")?;
            for choice in &report.choices {
                for gpu in &choice.gpus {
                    out.line(&format!(
                        "{}   `unilab mps start {}`",
                        gpu_line(gpu),
                        choice.selector
                    ))?;
                }
            }
        }
    }
    match &report.cannot_start {
        None => out.line("start: yes, one daemon for this GPU")?,
        Some(why) => out.line(&format!("start: no: {why}"))?,
    }
    Ok(Exit::Success)
}

fn start(mps: &Mps, args: StartArgs, out: &mut Output) -> Result<Exit, Error> {
    let request = start::StartRequest {
        selector: args.selector,
        name: args.name,
        pipe_directory: args.pipe_dir,
        log_directory: args.log_dir,
        job: mps.env.job.clone(),
        limits: DaemonLimits {
            active_thread_percentage: args.limits.active_thread_percentage,
            pinned_memory_limit: args.limits.pinned_memory_limit,
        },
    };
    // Validate everything before the log is opened or anything created.
    let spec = start::spec(mps, &request)?;
    let log = EventLog::open(&mps.paths.log_path(), mps.paths.scope(), projection::ALL)?;
    settle(mps, &log, out)?;
    // From the check that nothing serves the name or the GPU to the record of what started.
    let held = lock::daemon(mps, &spec.name, spec.job.as_deref(), [spec.gpu.as_str()])?;
    if args.foreground {
        let stop = super::raised_on(&super::STOP_SIGNALS)?;
        let grace = Duration::from_secs_f64(STOP_GRACE_SECS);
        // The record is printed, and flushed, the moment the daemon is verified: a script that
        // reads it must not wait until the daemon stops.
        let mut printed = Ok(());
        let mut held = Some(held);
        let method =
            foreground::run_foreground(mps, &log, &spec, &stop, grace, |record, cleared| {
                // Recorded: a stop may now come, and must not wait for this daemon to end.
                drop(held.take());
                say_cleared(out, cleared);
                out.note(&format!(
                    "daemon `{}` (pid {}) runs in the foreground for {}; Ctrl-C stops it",
                    record.name, record.pid, spec.gpu
                ));
                printed = print_record(out, record).and_then(|()| out.flush());
            })?;
        printed?;
        out.note(&format!(
            "daemon `{}` stopped ({})",
            spec.name,
            method.as_str()
        ));
        return Ok(Exit::Success);
    }
    let started = start::start(mps, &log, &spec)?;
    drop(held);
    say_cleared(out, &started.cleared);
    print_record(out, &started.record)?;
    out.note(&format!(
        "use it with `unilab mps exec {0} -- CMD`, or `eval \"$(unilab mps env {0})\"`",
        started.record.name
    ));
    Ok(Exit::Success)
}

fn print_record(out: &mut Output, record: &DaemonRecord) -> Result<(), Error> {
    if out.json {
        return out.json_line(&to_json(record)?);
    }
    out.line(&format!(
        "started `{}` (pid {}) for {}, pipe `{}`",
        record.name,
        record.pid,
        record.gpu_uuids.join(","),
        record.pipe_directory
    ))
}

/// Finishes the starts that were cut short before this command decides anything.
fn settle(mps: &Mps, log: &EventLog, out: &Output) -> Result<(), Error> {
    say_settled(out, &settle::settle_cut_starts(mps, log)?);
    Ok(())
}

/// Says which cut-short starts were settled, and which processes could not be checked.
fn say_settled(out: &Output, settled: &settle::Settled) {
    for skipped in &settled.skipped {
        out.warn(&skipped.to_string());
    }
    for name in &settled.names {
        out.warn(&format!(
            "a start of `{name}` was cut short; what it launched was stopped and the start recorded as failed"
        ));
    }
}

/// Says what a start cleared out of its way.
fn say_cleared(out: &Output, cleared: &start::Cleared) {
    say_settled(out, &cleared.settled);
    for name in &cleared.cleaned {
        out.note(&format!("cleaned the stale record of `{name}`"));
    }
}

fn stop(mps: &Mps, args: &StopArgs, out: &mut Output) -> Result<Exit, Error> {
    let log = EventLog::open(&mps.paths.log_path(), mps.paths.scope(), projection::ALL)?;
    settle(mps, &log, out)?;
    // A daemon still being started is stopped once its start has recorded it.
    let scoped = args
        .name
        .as_deref()
        .map(|name| names::scoped_name(name, mps.env.job.as_deref()));
    settle::wait_for_starts(mps, &log, |name, job| {
        if let Some(wanted) = &args.job {
            job == Some(wanted.as_str())
        } else if let Some(given) = &args.name {
            Some(name) == scoped.as_deref() || name == given
        } else {
            records::job_in_scope(mps, job)
        }
    })?;
    let records = records::records(mps, &log.snapshot()?)?;
    let targets: Vec<&DaemonRecord> = if args.all {
        // Under a Slurm job, `--all` is the job's daemons.
        records
            .iter()
            .filter(|r| records::in_scope(mps, r))
            .collect()
    } else if let Some(job) = &args.job {
        records
            .iter()
            .filter(|r| r.job.as_deref() == Some(job.as_str()))
            .collect()
    } else {
        vec![records::select(mps, &records, args.name.as_deref())?]
    };
    if targets.is_empty() {
        out.note("no daemon is recorded; nothing to stop");
        if out.json {
            out.json_line(&serde_json::json!([]))?;
        }
        return Ok(Exit::Success);
    }
    let mut results = Vec::new();
    let mut first_error = None;
    for record in targets {
        match stop::stop(mps, &log, record, args.grace) {
            Ok(outcome) => results.push((record, outcome)),
            Err(e) => {
                out.warn(&format!("daemon `{}`: {e}", record.name));
                first_error.get_or_insert(e);
            }
        }
    }
    let stale = report_stops(mps, &results, out)?;
    if let Some(e) = first_error {
        return Err(e.into());
    }
    if stale.is_empty() {
        return Ok(Exit::Success);
    }
    if out.json {
        // Like every other error under `--json`: one object on standard error.
        let error = serde_json::json!({
            "error": stale.join("; "),
            "causes": [],
            "hint": "start a new daemon with `unilab mps start`",
            "exit_code": Exit::Stale.code(),
        });
        let _ = writeln!(std::io::stderr(), "{error}");
    }
    Ok(Exit::Stale)
}

/// Says how each stop ended; under `--json`, prints the records stopped, each with its
/// `outcome`, `method` and `reason`. Returns what was said of the stale records cleaned.
fn report_stops(
    mps: &Mps,
    results: &[(&DaemonRecord, stop::StopOutcome)],
    out: &mut Output,
) -> Result<Vec<String>, Error> {
    let mut json = Vec::new();
    let mut stale = Vec::new();
    for (record, result) in results {
        let (outcome, method, reason) = match result {
            stop::StopOutcome::Stopped {
                name,
                method,
                wedged,
            } => {
                if *wedged {
                    out.warn(&format!(
                        "daemon `{name}` was wedged: it gave no answer to `quit` within {} s, so it was stopped by signal",
                        mps.control.timeout.as_secs_f64()
                    ));
                }
                if !out.json {
                    out.line(&format!("stopped `{name}` ({})", method.as_str()))?;
                }
                let outcome = if *wedged { "wedged" } else { "stopped" };
                (outcome, Some(method.as_str()), None)
            }
            stop::StopOutcome::Gone { name } => {
                out.note(&format!(
                    "daemon `{name}` was stopped by another command meanwhile; nothing was signalled"
                ));
                ("already_stopped", None, None)
            }
            stop::StopOutcome::Stale { name, reason } => {
                let said = format!(
                    "daemon `{name}` was no longer running ({}); its record was cleaned and nothing was signalled",
                    reason.as_str()
                );
                if !out.json {
                    out.warn(&said);
                }
                stale.push(said);
                ("stale_cleaned", None, Some(reason.as_str()))
            }
        };
        let mut value = to_json(record)?;
        if let Some(object) = value.as_object_mut() {
            object.insert("outcome".into(), outcome.into());
            object.insert("method".into(), method.into());
            object.insert("reason".into(), reason.into());
        }
        json.push(value);
    }
    if out.json {
        out.json_line(&serde_json::Value::Array(json))?;
    }
    Ok(stale)
}

fn list(mps: &Mps, out: &mut Output) -> Result<Exit, Error> {
    let snapshot = read_log(mps.paths, out)?;
    let daemons = status::managed(mps, snapshot.as_ref())?;
    super::checked_show(snapshot.as_ref(), || show_daemons(&daemons, out))
}

fn show_daemons(daemons: &[status::ManagedDaemon], out: &mut Output) -> Result<Exit, Error> {
    if out.json {
        out.json_line(&to_json(daemons)?)?;
        return Ok(Exit::Success);
    }
    if daemons.is_empty() {
        out.note("no daemons recorded; start one with `unilab mps start`");
        return Ok(Exit::Success);
    }
    let paint = out.paint;
    let rows: Vec<Vec<String>> = daemons
        .iter()
        .map(|daemon| {
            vec![
                daemon.record.name.clone(),
                daemon.record.pid.to_string(),
                paint.status(daemon.state),
                daemon.record.job.clone().unwrap_or_else(|| "-".into()),
                daemon.leases.to_string(),
                age(daemon.record.created_at),
                daemon.record.gpu_uuids.join(","),
                daemon.record.pipe_directory.clone(),
            ]
        })
        .collect();
    let header = ["NAME", "PID", "STATE", "JOB", "USERS", "AGE", "GPU", "PIPE"];
    for line in crate::output::table(&header, &rows) {
        out.line(&line)?;
    }
    Ok(Exit::Success)
}

/// The live daemon a command names, by name, GPU or as the sole one.
fn target(mps: &Mps, target: &TargetArgs, out: &Output) -> Result<DaemonRecord, Error> {
    let snapshot = read_log(mps.paths, out)?.ok_or(MpsError::NoDaemon)?;
    let records = records::records(mps, &snapshot)?;
    let record = match &target.gpu {
        Some(selector) => {
            let gpu = records::one_gpu(mps, selector)?;
            records::select_for_gpu(mps, &records, &gpu)?
        }
        None => records::select(mps, &records, target.name.as_deref())?,
    };
    records::require_live(mps, record)?;
    Ok(record.clone())
}

/// Quotes a value for a POSIX shell.
fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "'\\''"))
}

fn env(mps: &Mps, target_args: &TargetArgs, out: &mut Output) -> Result<Exit, Error> {
    let record = target(mps, target_args, out)?;
    let env = records::environment(&record);
    if out.json {
        let object: serde_json::Map<String, serde_json::Value> = env
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.into()))
            .collect();
        out.json_line(&serde_json::Value::Object(object))?;
    } else {
        for (key, value) in env {
            out.line(&format!("export {key}={}", shell_quote(&value)))?;
        }
    }
    Ok(Exit::Success)
}

fn exec(
    mps: &Mps,
    target_args: &TargetArgs,
    limits: &DaemonLimits,
    command: &[std::ffi::OsString],
    out: &mut Output,
) -> Result<Exit, Error> {
    let record = target(mps, target_args, out)?;
    run_with(&record, limits, command, out)
}

/// `mps exec --shared`: attach to (or start) the GPU's shared daemon, run the command, release;
/// the last one out stops a daemon started for sharing.
fn exec_shared(
    mps: &Mps,
    selector: Option<&str>,
    limits: &DaemonLimits,
    command: &[std::ffi::OsString],
    out: &mut Output,
) -> Result<Exit, Error> {
    let open = || EventLog::open(&mps.paths.log_path(), mps.paths.scope(), projection::ALL);
    let attached = {
        let log = open()?;
        settle(mps, &log, out)?;
        shared::attach(mps, &log, selector)?
    };
    // The starter became a subreaper to launch the daemon (now its child); the command's
    // orphans are not its to collect.
    let _ = nix::sys::prctl::set_child_subreaper(false);
    let record = &attached.record;
    say_cleared(out, &attached.cleared);
    if attached.started {
        out.note(&format!(
            "started the shared daemon `{}` (pid {}) for {}",
            record.name,
            record.pid,
            record.gpu_uuids.join(",")
        ));
    }
    // The log is not held open while the command runs: it may run for days.
    let ran = run_with(record, limits, command, out);
    let grace = Duration::from_secs_f64(STOP_GRACE_SECS);
    match open()
        .map_err(Error::from)
        .and_then(|log| shared::release(mps, &log, &attached, grace).map_err(Error::from))
    {
        Ok(Some(method)) => out.note(&format!(
            "the last user of `{}` is done: it was stopped ({})",
            record.name,
            method.as_str()
        )),
        Ok(None) => {}
        // The command's own exit matters most; a daemon left running is said, and the next
        // shared run or `mps stop` ends it.
        Err(e) => out.warn(&format!(
            "could not release the shared daemon `{}`: {e}",
            record.name
        )),
    }
    ran
}

/// Runs `command` with the environment of `record`'s daemon, passing on its exit status.
fn run_with(
    record: &DaemonRecord,
    limits: &DaemonLimits,
    command: &[std::ffi::OsString],
    out: &mut Output,
) -> Result<Exit, Error> {
    use std::os::unix::process::ExitStatusExt;
    let (program, args) = command
        .split_first()
        .ok_or_else(|| Error::Internal("empty command".into()))?;
    out.flush()?;
    // unilab waits for the command; signals that would end unilab first are passed on instead.
    let forward = super::raised_on(&[signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP])?;
    // Ctrl-C reaches the command from the terminal itself: unilab only outlives it, to wait.
    super::raised_on(&[signal_hook::consts::SIGINT])?;
    let status = exec::run_with(record, limits, (program, args), &forward)?;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    Ok(Exit::Passthrough(
        u8::try_from(code.clamp(0, 255)).unwrap_or(1),
    ))
}
