//! `unilab soak show`: a soak's summary, how it exited, its progress, peaks and output tail;
//! and, for a running one, how it is going.

use super::{resolve, status_text, summary_json};
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::log::Snapshot;
use crate::output::{self, Output, human_time};
use crate::paths::StatePaths;
use crate::projection::{SoakState, SoakSummary};
use crate::soak::artifact;
use crate::soak::artifact::stream::{Piece, Row};
use crate::soak::error::SoakError;
use crate::text::count;
use crate::time::{Clock, SystemClock};
use serde_json::{Value, json};

pub(super) fn show(paths: &StatePaths, id: &str, out: &mut Output) -> Result<Exit, Error> {
    let (snapshot, summary) = resolve(paths, id, out)?;
    crate::commands::checked_show(Some(&snapshot), || show_soak(&snapshot, &summary, out))
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
