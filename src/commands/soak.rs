//! `unilab soak ...` and `unilab snapshot`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cli::{ExportFormat, SoakCommand, SoakRunArgs};
use crate::diagnostic::Exit;
use crate::error::{Error, stdout_error};
use crate::event::soak::OutcomeStatus;
use crate::event::{Event, Subject};
use crate::log::{EventLog, Snapshot};
use crate::output::{self, Output, human_time};
use crate::paths::StatePaths;
use crate::process::SystemProc;
use crate::projection::{self, Found, SoakState, SoakSummary, Soaks};
use crate::snapshot::runtime_snapshot;
use crate::soak::artifact::stream::{Piece, Row};
use crate::soak::console::Console;
use crate::soak::error::SoakError;
use crate::soak::launch::{JOB_KEY, Launch, Placeholders, RANK_KEY};
use crate::soak::request::SoakRequest;
use crate::soak::supervise::{self, SoakContext};
use crate::soak::{abandon, artifact};
use crate::text::count;
use crate::time::{Clock, SystemClock, unix_seconds};
use crate::tool;
use serde_json::{Value, json};

fn to_json<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, Error> {
    serde_json::to_value(value).map_err(|e| Error::Internal(e.to_string()))
}

pub(crate) fn run(
    paths: &StatePaths,
    command: SoakCommand,
    out: &mut Output,
) -> Result<Exit, Error> {
    match command {
        SoakCommand::Run(args) => soak_run(paths, *args, out),
        SoakCommand::List { job: None } => list(paths, out),
        SoakCommand::List { job: Some(job) } => list_job(paths, &job, out),
        SoakCommand::Show { id } => show(paths, &id, out),
        SoakCommand::Export {
            id,
            output,
            force,
            format,
        } => export(paths, &id, output.as_deref(), force, format, out),
        SoakCommand::Report { id, output, force } => {
            report(paths, &id, output.as_deref(), force, out)
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
    // A snapshot of a directory that is not there would describe a made-up one.
    match std::fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(SoakError::NotADirectory {
                path: dir,
                source: std::io::Error::from(std::io::ErrorKind::NotADirectory),
            }
            .into());
        }
        Err(source) => return Err(SoakError::NotADirectory { path: dir, source }.into()),
    }
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
    let soak_id = supervise::new_soak_id();
    let launch = Launch::from_env(|name| std::env::var(name).ok());
    // `--output 'soak-{rank}.json'`: each rank of a job its own files.
    let placeholders = Placeholders {
        launch: &launch,
        host: &paths.host,
        soak_id: &soak_id,
    };
    let fill = |path: &Path| -> Result<PathBuf, SoakError> {
        let text = path
            .to_str()
            .ok_or_else(|| SoakError::Invalid(format!("`{}` is not UTF-8", path.display())))?;
        placeholders
            .fill(text)
            .map(PathBuf::from)
            .map_err(SoakError::Invalid)
    };
    let output = fill(&args.output)?;
    let report = args.report.as_deref().map(fill).transpose()?;
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
        metadata: args.meta,
        allow_no_progress: args.allow_no_progress,
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
    let interrupted = super::raised_on(&super::STOP_SIGNALS)?;
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

/// A read of the soaks after settling the abandoned ones; `None` when nothing was recorded.
fn settled(paths: &StatePaths, out: &Output) -> Result<Option<Snapshot>, Error> {
    let Some(reader) = super::read_own_log(paths, out)? else {
        return Ok(None);
    };
    Ok(Some(abandon::settle(
        paths,
        &reader,
        &SystemProc::default(),
    )?))
}

/// The soak `id` names (an id, a unique prefix or `latest`), in a settled read of the log.
fn resolve(paths: &StatePaths, id: &str, out: &Output) -> Result<(Snapshot, SoakSummary), Error> {
    let snapshot = settled(paths, out)?.ok_or_else(|| SoakError::NoSuchSoak(id.to_owned()))?;
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
        // Only once it was written; `output` is where it goes.
        "artifact": summary.artifact_digest.as_ref().map(|_| &summary.output),
        "output": summary.output,
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
    let snapshot = settled(paths, out)?;
    let mut soaks = match &snapshot {
        Some(snapshot) => Soaks::rows(snapshot)?,
        None => Vec::new(),
    };
    soaks.sort_by_key(|s| s.first_seq);
    super::checked_show(snapshot.as_ref(), || list_soaks(&soaks, out))
}

/// One rank's soak of a job, on its host.
struct RankSoak {
    host: String,
    rank: Option<String>,
    summary: SoakSummary,
}

/// The soaks of Slurm job `job` in every host's log under the root, in the order they started.
/// This host's abandoned soaks are settled first; other hosts' logs are only read (whether their
/// supervisors live can be told only there).
fn list_job(paths: &StatePaths, job: &str, out: &mut Output) -> Result<Exit, Error> {
    let own = settled(paths, out)?;
    let mut soaks = Vec::new();
    super::for_every_host_log(paths, out, own, |host, snapshot| {
        // A host's soaks are taken whole or not at all: its log may fail half-way.
        let mut found = Vec::new();
        for summary in Soaks::rows(snapshot)? {
            let metadata = match snapshot.get(summary.first_seq)?.map(|r| r.envelope.event) {
                Some(Event::SoakStarted(start)) => start.metadata,
                Some(Event::SoakStartedV1(start)) => start.metadata,
                _ => continue,
            };
            if metadata.get(JOB_KEY).map(String::as_str) == Some(job) {
                found.push(RankSoak {
                    host: host.to_owned(),
                    rank: metadata.get(RANK_KEY).cloned(),
                    summary,
                });
            }
        }
        soaks.extend(found);
        Ok(())
    })?;
    soaks.sort_by_key(|s| (s.summary.started_at_us, s.host.clone()));
    if out.json {
        let rows = soaks.iter().map(|s| {
            let mut row = summary_json(&s.summary);
            row["host"] = s.host.clone().into();
            row["rank"] = s.rank.clone().into();
            row["job"] = job.into();
            row
        });
        out.json_line(&Value::Array(rows.collect()))?;
        return Ok(Exit::Success);
    }
    if soaks.is_empty() {
        out.note(&format!(
            "no soaks of job {job} are recorded under `{}`",
            paths.root.display()
        ));
        return Ok(Exit::Success);
    }
    let paint = out.paint;
    let rows: Vec<Vec<String>> = soaks
        .iter()
        .map(|s| {
            let mut cells = soak_cells(&s.summary, paint);
            // After the id, where it ran.
            let rank = s.rank.clone().unwrap_or_else(|| "-".into());
            cells.splice(1..1, [s.host.clone(), rank]);
            cells
        })
        .collect();
    let mut header = SOAK_COLUMNS.to_vec();
    header.splice(1..1, ["HOST", "RANK"]);
    for line in output::table(&header, &rows) {
        out.line(&line)?;
    }
    Ok(Exit::Success)
}

/// The columns of `soak list`, and the cells of one soak under them.
const SOAK_COLUMNS: [&str; 6] = ["ID", "STATUS", "STARTED", "DURATION", "SAMPLES", "COMMAND"];

fn soak_cells(soak: &SoakSummary, paint: crate::style::Palette) -> Vec<String> {
    // How long it ran, or has been running (`42s+`).
    let duration = match soak.ended_at_us {
        Some(end) => output::duration((end - soak.started_at_us) as f64 / 1e6),
        None => format!("{}+", output::age(unix_seconds(soak.started_at_us))),
    };
    vec![
        soak.soak_id.clone(),
        paint.status(&status_text(soak)),
        human_time(soak.started_at_us).chars().take(19).collect(),
        duration,
        soak.samples.to_string(),
        output::shell_command(&soak.command),
    ]
}

fn list_soaks(soaks: &[SoakSummary], out: &mut Output) -> Result<Exit, Error> {
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
    let paint = out.paint;
    let rows: Vec<Vec<String>> = soaks.iter().map(|soak| soak_cells(soak, paint)).collect();
    for line in output::table(&SOAK_COLUMNS, &rows) {
        out.line(&line)?;
    }
    Ok(Exit::Success)
}

/// How the progress went (and, for a running soak, how it is going now).
fn progress_lines(summary: &SoakSummary, details: &Value) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    let progress = &details["progress"];
    match (
        progress["first_seen_seconds"].as_f64(),
        progress["last_change_seconds"].as_f64(),
    ) {
        (Some(first), Some(last)) => lines.push((
            "progress",
            format!(
                "first at {}, last change at {} ({}, {})",
                output::duration(first),
                output::duration(last),
                crate::text::count(progress["files"].as_u64().unwrap_or(0), "file"),
                output::bytes(progress["bytes"].as_u64().unwrap_or(0))
            ),
        )),
        _ if summary.state != SoakState::Running => lines.push(("progress", "none seen".into())),
        _ => {}
    }
    let live = &details["live"];
    if !live.is_null() {
        lines.push((
            "elapsed",
            output::duration(live["elapsed_seconds"].as_f64().unwrap_or(0.0)),
        ));
        lines.push((
            "progress",
            match live["progress_age_seconds"].as_f64() {
                Some(age) => format!(
                    "last changed {} before the latest sample",
                    output::duration(age)
                ),
                None => "no change seen yet".into(),
            },
        ));
        if let Some(rss) = live["rss_bytes"].as_u64() {
            lines.push((
                "now",
                format!(
                    "RSS {}, {}",
                    output::bytes(rss),
                    count(live["processes"].as_u64().unwrap_or(0), "process")
                ),
            ));
        }
    }
    lines
}

/// The run's peaks, in one line.
fn peaks_line(peaks: &Value) -> String {
    let mut peak = vec![
        format!(
            "RSS {}",
            output::bytes(peaks["rss_bytes"].as_u64().unwrap_or(0))
        ),
        count(peaks["processes"].as_u64().unwrap_or(0), "process"),
        count(peaks["threads"].as_u64().unwrap_or(0), "thread"),
    ];
    if let Some(cpu) = peaks["cpu_percent"].as_f64() {
        peak.push(format!("CPU {cpu:.0}%"));
    }
    if let Some(gpu) = peaks["tree_gpu_memory_mib"].as_u64() {
        peak.push(format!("GPU {gpu} MiB"));
    }
    peak.join(", ")
}

/// How many lines of each output tail `soak show` prints.
const SHOWN_TAIL_LINES: usize = 10;

/// What `soak show` reads of the rows as they go by: the last one, and when the progress last
/// changed among them. Nothing here grows with the soak.
#[derive(Debug, Default, PartialEq)]
struct Latest {
    last: Option<Point>,
    progress_changed_at: Option<f64>,
}

/// The fields of a row `soak show` uses, as the artifact's JSON says them (either schema's).
#[derive(Debug, PartialEq)]
struct Point {
    elapsed_seconds: Option<f64>,
    rss_bytes: Value,
    processes: Value,
    /// Files and bytes in the progress directory.
    progress: (Value, Value),
}

impl Point {
    fn of(row: Row<'_>) -> Self {
        match row {
            Row::V1(row) => Self {
                elapsed_seconds: row["elapsed_seconds"].as_f64(),
                rss_bytes: row["rss_bytes"].clone(),
                processes: row["processes"].clone(),
                progress: (row["progress_files"].clone(), row["progress_bytes"].clone()),
            },
            Row::V2(row) => Self {
                elapsed_seconds: Some(row.elapsed_seconds),
                rss_bytes: row.rss_bytes.into(),
                processes: row.processes.into(),
                progress: (row.progress_files.into(), row.progress_bytes.into()),
            },
        }
    }
}

impl Latest {
    fn take(&mut self, piece: Piece<'_>) {
        match piece {
            Piece::Restart => *self = Self::default(),
            Piece::Row(row) => {
                let point = Point::of(row);
                if let Some(last) = &self.last
                    && last.progress != point.progress
                    && let Some(at) = point.elapsed_seconds
                {
                    self.progress_changed_at = Some(at);
                }
                self.last = Some(point);
            }
        }
    }
}

/// What `soak show` adds to the summary, read from the artifact's fields but `samples` (`head`)
/// and the rows as they went by: how the command exited, its progress, its peaks, the end of its
/// output; and for a running soak how it is going now.
fn details(head: &Value, latest: &Latest, summary: &SoakSummary, now_us: i64) -> Value {
    let last_lines = |text: &Value| -> Vec<String> {
        let lines: Vec<&str> = text.as_str().unwrap_or_default().lines().collect();
        lines[lines.len().saturating_sub(SHOWN_TAIL_LINES)..]
            .iter()
            .map(|l| (*l).to_owned())
            .collect()
    };
    let summary_of = &head["summary"];
    let live = (summary.state == SoakState::Running).then(|| {
        // The samples show the progress directory's files and bytes: its last change among them.
        let changed_at = latest.progress_changed_at;
        let last = latest.last.as_ref();
        let sampled_at = last.and_then(|p| p.elapsed_seconds);
        json!({
            "elapsed_seconds": (now_us - summary.started_at_us) as f64 / 1e6,
            "last_sample_seconds": sampled_at,
            "progress_changed_seconds": changed_at,
            "progress_age_seconds": changed_at.zip(sampled_at).map(|(c, s)| s - c),
            "rss_bytes": last.map(|p| p.rss_bytes.clone()),
            "processes": last.map(|p| p.processes.clone()),
        })
    });
    json!({
        "exit": head["exit"],
        "duration_seconds": head["duration_seconds"],
        "progress": head["progress"],
        "peaks": {
            "rss_bytes": summary_of["peak_rss_bytes"],
            "processes": summary_of["peak_processes"],
            "threads": summary_of["peak_threads"],
            "cpu_percent": summary_of["peak_cpu_percent"],
            "tree_gpu_memory_mib": summary_of["peak_tree_gpu_memory_mib"],
        },
        "final_cpu_seconds": summary_of["final_cpu_seconds"],
        "output_tail": {
            "stdout": last_lines(&head["output_tail"]["stdout"]),
            "stderr": last_lines(&head["output_tail"]["stderr"]),
        },
        "live": live,
    })
}

fn show(paths: &StatePaths, id: &str, out: &mut Output) -> Result<Exit, Error> {
    let (snapshot, summary) = resolve(paths, id, out)?;
    super::checked_show(Some(&snapshot), || show_soak(&snapshot, &summary, out))
}

fn show_soak(snapshot: &Snapshot, summary: &SoakSummary, out: &mut Output) -> Result<Exit, Error> {
    let mut latest = Latest::default();
    let head = artifact::stream::head(snapshot, &summary.soak_id, |piece| latest.take(piece))
        .map_err(SoakError::streaming(&std::env::temp_dir()))?;
    let details = details(&Value::Object(head), &latest, summary, SystemClock.now_us());
    if out.json {
        let mut object = summary_json(summary);
        if let (Value::Object(object), Value::Object(details)) = (&mut object, details) {
            object.extend(details);
        }
        out.json_line(&object)?;
        return Ok(Exit::Success);
    }
    let mut lines = vec![
        ("soak", summary.soak_id.clone()),
        ("command", output::shell_command(&summary.command)),
        ("status", out.paint.status(&status_text(summary))),
    ];
    if let Some(reason) = &summary.reason {
        lines.push(("reason", reason.clone()));
    }
    if let Some(exit) = details["exit"].as_object() {
        lines.push((
            "exit",
            match (exit["code"].as_i64(), exit["signal"].as_i64()) {
                (Some(code), _) => format!("code {code}"),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                _ => "unknown".into(),
            },
        ));
    }
    lines.push(("started", human_time(summary.started_at_us)));
    if let Some(end) = summary.ended_at_us {
        lines.push(("ended", human_time(end)));
    }
    if let Some(duration) = details["duration_seconds"].as_f64() {
        lines.push(("ran", output::duration(duration)));
    }
    lines.extend(progress_lines(summary, &details));
    lines.push(("peaks", peaks_line(&details["peaks"])));
    lines.push(("samples", summary.samples.to_string()));
    lines.push(match &summary.artifact_digest {
        Some(digest) => ("artifact", format!("{} (digest {digest})", summary.output)),
        None if summary.state == SoakState::Running => (
            "artifact",
            format!("written to {} when the soak ends", summary.output),
        ),
        None => (
            "artifact",
            format!(
                "not written (`unilab soak export {} --output FILE`)",
                summary.soak_id
            ),
        ),
    });
    lines.push((
        "history",
        format!("unilab history --soak {}", summary.soak_id),
    ));
    for (label, value) in lines {
        out.line(&format!("{:<10}{value}", format!("{label}:")))?;
    }
    for stream in ["stdout", "stderr"] {
        let tail = details["output_tail"][stream]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if !tail.is_empty() {
            out.line(&format!("last lines of {stream}:"))?;
            for line in tail {
                out.line(&format!("  {}", line.as_str().unwrap_or_default()))?;
            }
        }
    }
    Ok(Exit::Success)
}

fn export(
    paths: &StatePaths,
    id: &str,
    output: Option<&Path>,
    force: bool,
    format: ExportFormat,
    out: &mut Output,
) -> Result<Exit, Error> {
    let (snapshot, summary) = resolve(paths, id, out)?;
    if summary.state == SoakState::Running {
        return Err(SoakError::StillRunning(summary.soak_id).into());
    }
    if let Some(path) = output {
        refuse_to_replace(path, force)?;
    }
    if format == ExportFormat::Json {
        // Streamed from the log, in memory that does not grow with the soak.
        let soak_id = summary.soak_id.as_str();
        match output {
            Some(path) => {
                let written = artifact::write_atomically_with(path, |file| {
                    artifact::stream::write(&snapshot, soak_id, file)
                })
                .map_err(SoakError::streaming(path))?;
                out.note(&format!(
                    "wrote `{}` (digest {})",
                    path.display(),
                    written.digest
                ));
            }
            None => {
                out.stream(|stdout| artifact::stream::write(&snapshot, soak_id, stdout))
                    .map_err(streamed_to_stdout)?;
            }
        }
        return Ok(Exit::Success);
    }
    // Written as the rows go by, in memory that does not grow with the soak either.
    let to = output.unwrap_or(Path::new("-"));
    let mut sheet =
        artifact::csv::Sheet::new(&summary.soak_id).map_err(SoakError::streaming(to))?;
    artifact::stream::head(&snapshot, &summary.soak_id, |piece| sheet.take(piece))
        .map_err(SoakError::streaming(to))?;
    match output {
        Some(path) => {
            let digest = artifact::write_atomically_with(path, |file| sheet.finish(file))
                .map_err(SoakError::streaming(path))?;
            out.note(&format!("wrote `{}` (digest {digest})", path.display()));
        }
        None => {
            out.stream(|stdout| sheet.finish(stdout))
                .map_err(streamed_to_stdout)?;
        }
    }
    Ok(Exit::Success)
}

/// The error of something streamed to standard output: writing there is `stdout_error`'s.
fn streamed_to_stdout(e: artifact::stream::StreamError) -> Error {
    match e {
        artifact::stream::StreamError::Io(e) => stdout_error(e),
        other => SoakError::streaming(Path::new("-"))(other).into(),
    }
}

fn report(
    paths: &StatePaths,
    id: &str,
    output: Option<&Path>,
    force: bool,
    out: &mut Output,
) -> Result<Exit, Error> {
    let (snapshot, summary) = resolve(paths, id, out)?;
    if let Some(path) = output {
        refuse_to_replace(path, force)?;
    }
    let html = report_html(&snapshot, &summary.soak_id)?;
    match output {
        Some(path) => {
            artifact::write_atomically(path, html.as_bytes()).map_err(SoakError::output(path))?;
            out.note(&format!("wrote the report `{}`", path.display()));
        }
        None => out.raw(html.as_bytes())?,
    }
    Ok(Exit::Success)
}

/// The HTML report of a soak, from the log: its artifact's view, its events, the chain head.
pub(crate) fn report_html(snapshot: &Snapshot, soak_id: &str) -> Result<String, Error> {
    let mut charts = crate::soak::report::Charts::default();
    // The rows are spooled in the temporary directory.
    let spool = std::env::temp_dir();
    let mut gathered = artifact::stream::gather(snapshot, soak_id, |piece| charts.take(piece))
        .map_err(SoakError::streaming(&spool))?;
    let digest = gathered.digest().map_err(SoakError::streaming(&spool))?;
    let view = Value::Object(std::mem::take(&mut gathered.head));
    let timeline = timeline(snapshot, soak_id)?;
    let (_, head) = snapshot.head()?;
    Ok(crate::soak::report::render(
        &view,
        charts,
        &crate::soak::report::Extras {
            timeline: &timeline,
            digest: &digest,
            chain_head: &crate::log::chain::to_hex(&head),
        },
    ))
}

/// The soak's events as `history --soak` prints them, each run of samples shown by its first
/// and last with the number between: a week of samples is not a page of lines.
fn timeline(snapshot: &Snapshot, soak_id: &str) -> Result<Vec<String>, Error> {
    let mut lines = Vec::new();
    // The current run of samples: its first line, its last and how many there were.
    let mut run: Option<(String, String, u64)> = None;
    let flush = |run: &mut Option<(String, String, u64)>, lines: &mut Vec<String>| {
        if let Some((first, last, n)) = run.take() {
            lines.push(first);
            if n > 2 {
                lines.push(format!("        … {} …", count(n - 2, "more sample")));
            }
            if n > 1 {
                lines.push(last);
            }
        }
    };
    snapshot.scan_subject(&Subject::Soak(soak_id.to_owned()), 1, |record| {
        let line = super::history::record_line(&record);
        if record.envelope.event.kind() == "soak_sampled" {
            match &mut run {
                Some((_, last, n)) => {
                    *last = line;
                    *n += 1;
                }
                None => run = Some((line.clone(), line, 1)),
            }
        } else {
            flush(&mut run, &mut lines);
            lines.push(line);
        }
        Ok::<bool, Error>(true)
    })?;
    flush(&mut run, &mut lines);
    Ok(lines)
}

/// An existing `--output` is replaced only with `--force`, and only if it is a regular file: a
/// rename over a device, a FIFO or a symlink would replace that instead of writing into it.
fn refuse_to_replace(path: &Path, force: bool) -> Result<(), SoakError> {
    artifact::check_target(path).map_err(SoakError::output(path))?;
    if path.exists() && !force {
        return Err(SoakError::OutputExists(path.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::artifact::v2::SampleRow;

    fn row(elapsed_seconds: f64, rss_bytes: u64, progress_files: u64) -> SampleRow<'static> {
        SampleRow {
            after_exit: false,
            cpu_percent: None,
            cpu_seconds: 0.0,
            elapsed_seconds,
            errors: &[],
            gpus: None,
            host_gpu_memory_used_mib: None,
            index: 0,
            open_fds: 0,
            processes: 3,
            progress_bytes: 10 * progress_files,
            progress_files,
            read_bytes: 0,
            rss_bytes,
            sampler_cost_us: 0,
            threads: 0,
            tree_gpu_memory_mib: None,
            write_bytes: 0,
        }
    }

    /// `soak show` reads the same of a row whether it comes typed (schema 2) or as the JSON the
    /// artifact holds (schema 1's form), and a restart forgets the rows before it.
    #[test]
    fn the_latest_row_and_progress_change_read_alike_typed_and_as_json() {
        let rows = [
            row(1.0, 100, 0),
            row(2.0, 200, 1),
            row(3.0, 300, 1),
            row(4.0, 400, 2),
            row(5.0, 500, 2),
        ];
        let json: Vec<Value> = rows
            .iter()
            .map(|r| serde_json::to_value(r).unwrap())
            .collect();
        let (mut typed, mut from_json) = (Latest::default(), Latest::default());
        for (row, value) in rows.iter().zip(&json) {
            typed.take(Piece::Row(Row::V2(row)));
            from_json.take(Piece::Row(Row::V1(value)));
        }
        assert_eq!(typed, from_json);
        assert_eq!(typed.progress_changed_at, Some(4.0));
        let last = typed.last.as_ref().unwrap();
        assert_eq!(
            (last.elapsed_seconds, &last.rss_bytes, &last.processes),
            (Some(5.0), &json!(500), &json!(3))
        );

        typed.take(Piece::Restart);
        assert_eq!(typed, Latest::default());
        typed.take(Piece::Row(Row::V2(&rows[4])));
        assert_eq!(typed.progress_changed_at, None, "one row: no change seen");
    }
}
