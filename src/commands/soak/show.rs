//! `unilab soak show`: a soak's summary, how it exited, its progress, peaks and output tail;
//! and, for a running one, how it is going. After a failure, what tells why comes first, right
//! after the verdict: the evidence captured before the tree was signalled, what the verdict
//! found (a failed child, OOM kills, processes no signal ended, GPUs not given back) and the
//! last lines of the output; a soak that passed with nothing to tell reads as it always did.
//! When the trainer beat, its steps lead the figures: their pace and times, the other phases
//! and the goodput (for a running soak, the latest beats and their pace); a soak without beats,
//! or recorded before schema 10, reads as it always did.

mod job;

use serde::Serialize;
use serde_json::{Value, json};

use super::{resolve, status_text, summary_json};
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::event::soak::OutcomeStatus;
use crate::log::Snapshot;
use crate::output::{self, Output, human_time};
use crate::paths::StatePaths;
use crate::projection::{SoakState, SoakSummary};
use crate::read::record::SoakRecord;
use crate::read::rows::PointShown;
use crate::read::shown::{EvidenceShown, ExitShown, GpuReleaseShown, Judged, ProgressShown};
use crate::read::stepped::Stepped;
use crate::read::stepped::rows::{BeatsLately, LatestBeats};
use crate::read::stream;
use crate::read::stream::Piece;
use crate::style::Tone;
use crate::text::{count, foreign};
use crate::time::{Clock, SystemClock};
use crate::view::explained::{EvidenceExplained, Excerpt, Explained, last_lines};
use crate::view::judged::JudgedText;
use crate::view::stepped::{SteppedText, latest_line};
use job::JobShown;

pub(super) fn show(paths: &StatePaths, id: &str, out: &mut Output) -> Result<Exit, Error> {
    let (snapshot, summary) = resolve(paths, id, out)?;
    crate::commands::checked_show(Some(&snapshot), || show_soak(&snapshot, &summary, out))
}

fn show_soak(snapshot: &Snapshot, summary: &SoakSummary, out: &mut Output) -> Result<Exit, Error> {
    let mut latest = Latest::default();
    let record = stream::read(snapshot, &summary.soak_id, |piece| latest.take(piece))
        .map_err(stream::streaming(&std::env::temp_dir()))?
        .masked();
    let details = Details::of(&record, &latest, summary, SystemClock.now_us());
    if out.json {
        out.json_line(&json_of(summary, &details, &record)?)?;
        return Ok(Exit::Success);
    }
    let explained = record
        .found
        .as_ref()
        .map(Explained::of)
        .filter(|e| !e.is_empty());
    let judged = record
        .judged
        .as_ref()
        .map(|j| JudgedText::of(j, record.duration_seconds))
        .unwrap_or_default();
    let stepped = record
        .stepped
        .as_ref()
        .map(SteppedText::of)
        .unwrap_or_default();
    // After a failure, or with anything to tell, why comes before the figures.
    let why_first =
        explained.is_some() || summary.state == SoakState::Finished(OutcomeStatus::Failed);
    let mut command = output::shell_command(&crate::redact::mask_argv(&summary.command));
    if details.command_lossy {
        command.push_str("  (an argument is not UTF-8: shown lossily, run as its bytes)");
    }
    let mut lines = vec![
        ("soak", foreign(&summary.soak_id).into_owned()),
        ("command", foreign(&command).into_owned()),
        ("status", out.paint.status(&status_text(summary))),
    ];
    if let Some(reason) = &summary.reason {
        lines.push(("reason", foreign(reason).into_owned()));
    }
    if let Some(job) = &details.job {
        lines.extend(job.lines());
    }
    if let Some(exit) = details.exit {
        lines.push((
            "exit",
            match (exit.code, exit.signal) {
                (Some(code), _) => format!("code {code}"),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                _ => "unknown".into(),
            },
        ));
    }
    for (label, value) in lines.drain(..) {
        out.line(&labelled(label, &value))?;
    }
    if why_first {
        if let Some(explained) = &explained {
            for line in explained_lines(explained, &out.paint.paint(Tone::Warn, "warning:")) {
                out.line(&line)?;
            }
        }
        print_tails(&details.output_tail, out)?;
    }
    lines.extend(stepped.lines.iter().cloned());
    lines.push(("started", human_time(summary.started_at_us)));
    let last_sample = latest.last.as_ref().map(|p| p.elapsed_seconds);
    lines.extend(end_lines(summary, details.duration_seconds, last_sample));
    lines.extend(details.progress_lines(summary));
    lines.push(("peaks", details.peaks.line()));
    lines.extend(judged.lines.iter().cloned());
    lines.push(("samples", summary.samples.to_string()));
    lines.push(artifact_line(summary));
    lines.push((
        "history",
        format!("unilab history --soak {}", foreign(&summary.soak_id)),
    ));
    for (label, value) in lines {
        out.line(&labelled(label, &value))?;
    }
    for warned in judged.warnings.iter().chain(&stepped.warnings) {
        out.line(&warning_line(
            &out.paint.paint(Tone::Warn, "warning:"),
            warned,
        ))?;
    }
    if !why_first {
        print_tails(&details.output_tail, out)?;
    }
    Ok(Exit::Success)
}

/// `soak show --json`: the summary, the details, and what the verdict found in the outcome.
fn json_of(summary: &SoakSummary, details: &Details, record: &SoakRecord) -> Result<Value, Error> {
    let mut object = summary_json(summary);
    let details = serde_json::to_value(details).map_err(|e| Error::Internal(e.to_string()))?;
    if let (Value::Object(object), Value::Object(details)) = (&mut object, details) {
        object.extend(details);
    }
    // What the verdict found joins the outcome, as in the artifact; `null` where the soak's
    // schema records none.
    let findings = record.found.as_ref().map(|f| &f.outcome);
    if let Some(Value::Object(outcome)) = object.get_mut("outcome") {
        outcome.insert("child".into(), json!(findings.map(|f| &f.child)));
        outcome.insert("oom_kills".into(), json!(findings.map(|f| &f.oom_kills)));
        outcome.insert("unkillable".into(), json!(findings.map(|f| &f.unkillable)));
        outcome.insert(
            "job_alarm".into(),
            json!(findings.and_then(|f| f.job_alarm.as_ref())),
        );
    }
    Ok(object)
}

/// When the soak ended and how long its command ran (`duration_seconds`, its verdict's). An
/// abandoned soak's end is unknown: its supervisor died unseen after its last sample (at
/// `last_sample` seconds, recorded at its `ended_at`: `soak::ended`).
fn end_lines(
    summary: &SoakSummary,
    duration_seconds: Option<f64>,
    last_sample: Option<f64>,
) -> Vec<(&'static str, String)> {
    if summary.state == SoakState::Finished(OutcomeStatus::Abandoned) {
        let found = summary
            .ended_at_us
            .map(|at| format!(" ({})", human_time(at)))
            .unwrap_or_default();
        return match last_sample {
            Some(last) => vec![
                (
                    "ended",
                    format!(
                        "unknown: its supervisor vanished after the last sample at {}{found}",
                        output::duration(last)
                    ),
                ),
                (
                    "ran",
                    format!("{} to its last sample", output::duration(last)),
                ),
            ],
            None => vec![(
                "ended",
                "unknown: its supervisor vanished before any sample".to_owned(),
            )],
        };
    }
    let mut lines = Vec::new();
    if let Some(end) = summary.ended_at_us {
        lines.push(("ended", human_time(end)));
    }
    if let Some(duration) = duration_seconds {
        lines.push(("ran", output::duration(duration)));
    }
    lines
}

/// `label:` and its value, the values of a block in one column.
fn labelled(label: &str, value: &str) -> String {
    format!("{:<10}{value}", format!("{label}:"))
}

fn print_tails(tails: &Tails, out: &mut Output) -> Result<(), Error> {
    for (stream, tail) in [("stdout", &tails.stdout), ("stderr", &tails.stderr)] {
        if !tail.is_empty() {
            out.line(&format!("last lines of {stream}:"))?;
            for line in tail {
                out.line(&format!("  {}", foreign(line)))?;
            }
        }
    }
    Ok(())
}

/// The evidence and the findings as `soak show` prints them: each capture (see
/// [`evidence_lines`]), then one labelled line a finding and `warning` (as painted) before each
/// warning.
fn explained_lines(explained: &Explained, warning: &str) -> Vec<String> {
    let mut lines = Vec::new();
    // The job alarm's capture first: it was made first.
    for evidence in [&explained.job_evidence, &explained.evidence]
        .into_iter()
        .flatten()
    {
        evidence_lines(&mut lines, evidence);
    }
    for (label, finding) in &explained.findings {
        lines.push(labelled(label, finding));
    }
    for warned in &explained.warnings {
        lines.push(warning_line(warning, warned));
    }
    lines
}

/// One capture's lines: its summary on its label, where its ranks stood, each process indented
/// under it with its command, its threads and its stacks indented further; then the cgroup, the
/// kernel's lines, what could not be captured.
fn evidence_lines(lines: &mut Vec<String>, evidence: &EvidenceExplained) {
    let excerpt = |lines: &mut Vec<String>, excerpt: &Excerpt| {
        for line in excerpt.lines.iter().chain(&excerpt.left_out) {
            // A blank line of a stack stays blank, without the indent.
            lines.push(if line.is_empty() {
                String::new()
            } else {
                format!("      {line}")
            });
        }
    };
    lines.push(labelled("evidence", &evidence.summary));
    if let Some(ranks) = &evidence.ranks {
        lines.push(format!("  ranks: {ranks}"));
    }
    for process in &evidence.processes {
        lines.push(format!("  {}", process.title));
        if !process.command.is_empty() {
            lines.push(format!("    $ {}", process.command));
        }
        for thread in &process.threads {
            lines.push(format!("    {thread}"));
        }
        for (title, stack) in [
            ("kernel stack", &process.kernel_stack),
            ("python stack (py-spy)", &process.python_stack),
        ] {
            if let Some(stack) = stack {
                lines.push(format!("    {title}:"));
                excerpt(lines, stack);
            }
        }
    }
    if let Some(more) = &evidence.more_processes {
        lines.push(format!("  {more}"));
    }
    if let Some(cgroup) = &evidence.cgroup {
        lines.push(format!("  cgroup: {cgroup}"));
    }
    for line in &evidence.kernel_messages {
        lines.push(format!("  kernel: {line}"));
    }
    for line in &evidence.unavailable {
        lines.push(format!("  not captured: {line}"));
    }
}

/// `warning:` (as painted) and what it warns of, in the column of the labelled values.
fn warning_line(warning: &str, warned: &str) -> String {
    // Padded by hand: the colour codes take no column.
    let pad = 10_usize.saturating_sub("warning:".len());
    format!("{warning}{:pad$}{warned}", "")
}

/// Where the artifact is, or will be, or how to write it.
fn artifact_line(summary: &SoakSummary) -> (&'static str, String) {
    let said = match &summary.artifact_digest {
        Some(digest) => format!("{} (digest {digest})", foreign(&summary.output)),
        None if summary.state == SoakState::Running => {
            format!("written to {} when the soak ends", foreign(&summary.output))
        }
        None => format!(
            "not written (`unilab soak export {} --output FILE`)",
            foreign(&summary.soak_id)
        ),
    };
    ("artifact", said)
}

/// What `soak show` adds to the summary (its `--json` fields): read from the soak's record, and
/// from the rows as they went by.
#[derive(Debug, Serialize)]
struct Details {
    /// An argument of the command is not UTF-8: `command` holds it lossily.
    command_lossy: bool,
    /// The job it is a rank of; `null` for a soak outside a job.
    job: Option<JobShown>,
    exit: Option<ExitShown>,
    duration_seconds: Option<f64>,
    progress: ProgressShown,
    /// When progress last happened (Unix seconds), as the supervisor recorded it with the
    /// samples; `null` before any, and for a soak recorded before schema 12.
    last_progress_at: Option<f64>,
    peaks: Peaks,
    final_cpu_seconds: f64,
    output_tail: Tails,
    /// For a running soak, how it is going now.
    live: Option<Live>,
    /// The evidence captured before the tree was signalled, as in the artifact; `null` when
    /// none was (or the soak's schema records none).
    evidence: Option<EvidenceShown>,
    /// The capture made when another rank of its job raised the alarm, as in the artifact;
    /// `null` when none was.
    job_evidence: Option<EvidenceShown>,
    /// Whether the GPUs were given back, as in the artifact.
    gpu_release: Option<GpuReleaseShown>,
    /// What the summary judges of the resources (`/4` on), as in the artifact.
    resources: Option<Judged>,
    /// The steps by phase, the heartbeat file's errors and the goodput, as in the artifact's
    /// summary, with the steps a second; left out for soaks recorded before schema 10.
    #[serde(flatten)]
    steps: Option<StepsDetails>,
}

#[derive(Debug, Serialize)]
struct StepsDetails {
    #[serde(flatten)]
    stepped: Stepped,
    /// The `train` phase's beats over the time its steps took; `null` without such steps.
    steps_per_second: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Peaks {
    /// The tree's proportional set size (`/4` on).
    tree_pss_bytes: Option<u64>,
    rss_bytes: u64,
    processes: u64,
    threads: u64,
    cpu_percent: Option<f64>,
    tree_gpu_memory_mib: Option<u64>,
}

/// The last lines of each output stream.
#[derive(Debug, Serialize)]
struct Tails {
    stdout: Vec<String>,
    stderr: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Live {
    elapsed_seconds: f64,
    last_sample_seconds: Option<f64>,
    progress_changed_seconds: Option<f64>,
    progress_age_seconds: Option<f64>,
    tree_pss_bytes: Option<u64>,
    rss_bytes: Option<u64>,
    processes: Option<u64>,
    /// The latest beats and their pace; `null` before a beat.
    heartbeat: Option<LatestBeats>,
}

impl Details {
    fn of(record: &SoakRecord, latest: &Latest, summary: &SoakSummary, now_us: i64) -> Self {
        let tail = |text: &str| -> Vec<String> {
            last_lines(text).into_iter().map(str::to_owned).collect()
        };
        let live = (summary.state == SoakState::Running).then(|| {
            // When progress last happened, as the samples say.
            let changed_at = record
                .sampled_progress
                .and_then(|p| p.last_progress_ms)
                .map(|ms| ms as f64 / 1000.0);
            let last = latest.last.as_ref();
            let sampled_at = last.map(|p| p.elapsed_seconds);
            Live {
                elapsed_seconds: (now_us - summary.started_at_us) as f64 / 1e6,
                last_sample_seconds: sampled_at,
                progress_changed_seconds: changed_at,
                progress_age_seconds: changed_at.zip(sampled_at).map(|(c, s)| s - c),
                tree_pss_bytes: last.and_then(|p| p.tree_pss_bytes),
                rss_bytes: last.map(|p| p.rss_bytes),
                processes: last.map(|p| p.processes),
                heartbeat: latest.beats.latest(),
            }
        });
        let of = &record.summary;
        Self {
            command_lossy: record.command_lossy.unwrap_or(false),
            job: JobShown::of(record),
            exit: record.exit,
            duration_seconds: record.duration_seconds,
            progress: record.progress,
            last_progress_at: record
                .sampled_progress
                .and_then(|p| p.last_progress_at_us)
                .map(crate::time::unix_seconds),
            peaks: Peaks {
                tree_pss_bytes: record.judged.as_ref().and_then(|j| j.peak_tree_pss_bytes),
                rss_bytes: of.peak_rss_bytes,
                processes: of.peak_processes,
                threads: of.peak_threads,
                cpu_percent: of.peak_cpu_percent,
                tree_gpu_memory_mib: of.peak_tree_gpu_memory_mib,
            },
            final_cpu_seconds: of.final_cpu_seconds,
            output_tail: Tails {
                stdout: tail(&record.output_tail.stdout),
                stderr: tail(&record.output_tail.stderr),
            },
            live,
            evidence: record.found.as_ref().and_then(|f| f.evidence.clone()),
            job_evidence: record.found.as_ref().and_then(|f| f.job_evidence.clone()),
            gpu_release: record.found.as_ref().and_then(|f| f.gpu_release.clone()),
            resources: record.judged.clone(),
            steps: record.stepped.clone().map(|stepped| StepsDetails {
                steps_per_second: stepped.steps_per_second(),
                stepped,
            }),
        }
    }

    /// How the progress went (and, for a running soak, how it is going now).
    fn progress_lines(&self, summary: &SoakSummary) -> Vec<(&'static str, String)> {
        let mut lines = Vec::new();
        let progress = &self.progress;
        match (progress.first_seen_seconds, progress.last_change_seconds) {
            (Some(first), Some(last)) => lines.push((
                "progress",
                format!(
                    "first at {}, last change at {} ({}, {})",
                    output::duration(first),
                    output::duration(last),
                    count(progress.files, "file"),
                    output::bytes(progress.bytes)
                ),
            )),
            _ if summary.state != SoakState::Running => {
                lines.push(("progress", "none seen".into()));
            }
            _ => {}
        }
        if let Some(live) = &self.live {
            lines.push(("elapsed", output::duration(live.elapsed_seconds)));
            lines.push((
                "progress",
                match live.progress_age_seconds {
                    Some(age) => format!(
                        "last changed {} before the latest sample",
                        output::duration(age)
                    ),
                    None => "no change seen yet".into(),
                },
            ));
            if let Some(rss) = live.rss_bytes {
                lines.push((
                    "now",
                    format!(
                        "{}RSS {}, {}",
                        live.tree_pss_bytes
                            .map(|pss| format!("PSS {}, ", output::bytes(pss)))
                            .unwrap_or_default(),
                        output::bytes(rss),
                        count(live.processes.unwrap_or(0), "process")
                    ),
                ));
            }
            if let Some(beats) = &live.heartbeat {
                lines.push(("beats", latest_line(beats, live.last_sample_seconds)));
            }
        }
        lines
    }
}

impl Peaks {
    /// The run's peaks, in one line.
    fn line(&self) -> String {
        let mut peak: Vec<String> = self
            .tree_pss_bytes
            .map(|pss| format!("PSS {}", output::bytes(pss)))
            .into_iter()
            .collect();
        peak.extend([
            format!("RSS {}", output::bytes(self.rss_bytes)),
            count(self.processes, "process"),
            count(self.threads, "thread"),
        ]);
        if let Some(cpu) = self.cpu_percent {
            peak.push(format!("CPU {cpu:.0}%"));
        }
        if let Some(gpu) = self.tree_gpu_memory_mib {
            peak.push(format!("GPU {gpu} MiB"));
        }
        peak.join(", ")
    }
}

/// What `soak show` reads of the rows as they go by: the last one and the latest beats.
/// Nothing here grows with the soak.
#[derive(Debug, Default)]
struct Latest {
    last: Option<PointShown>,
    beats: BeatsLately,
}

impl Latest {
    fn take(&mut self, piece: Piece<'_>) {
        match piece {
            Piece::Restart => *self = Self::default(),
            Piece::Row(row) => {
                self.last = Some(PointShown::of(row));
                self.beats.take(row);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::rows::SampleRow;

    fn row(elapsed_seconds: f64, rss_bytes: u64, progress_files: u64) -> SampleRow<'static> {
        SampleRow::of_test(elapsed_seconds, rss_bytes, progress_files)
    }

    /// `soak show` reads the same of a row whether its soak renders today's artifact or schema
    /// 1's (whose rows say nothing of the exit, and hold one GPU figure), and a restart forgets
    /// the rows before it. (When progress last happened is the record's: `read::progress`.)
    #[test]
    fn the_latest_row_reads_alike_whatever_the_schema() {
        let rows = [
            row(1.0, 100, 0),
            row(2.0, 200, 1),
            row(3.0, 300, 1),
            row(4.0, 400, 2),
            row(5.0, 500, 2),
        ];
        let first_schema: Vec<SampleRow> = rows
            .iter()
            .map(|r| SampleRow {
                after_exit: None,
                host_gpu_memory_used_mib: Some(0),
                gpu_utilization_percent: Some(0),
                ..r.clone()
            })
            .collect();
        let (mut today, mut first) = (Latest::default(), Latest::default());
        for (row, old) in rows.iter().zip(&first_schema) {
            today.take(Piece::Row(row));
            first.take(Piece::Row(old));
        }
        assert_eq!(today.last, first.last);
        let last = today.last.unwrap();
        assert_eq!(
            (last.elapsed_seconds, last.rss_bytes, last.processes),
            (5.0, 500, 3)
        );

        today.take(Piece::Restart);
        assert_eq!(today.last, None);
        today.take(Piece::Row(&rows[4]));
        assert_eq!(today.last.map(|p| p.elapsed_seconds), Some(5.0));
    }
}
