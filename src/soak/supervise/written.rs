//! What a soak writes when it ends, once its verdict is recorded: the artifact, rendered from
//! the log and recorded as written, then the HTML report, if asked for. Both are written
//! atomically; neither can undo the verdict, which is recorded already.

use std::path::Path;

use serde_json::Value;

use crate::event::{Event, Subject};
use crate::log::{EventLog, Record, Snapshot};
use crate::soak::artifact;
use crate::soak::error::{OutputFile, SoakError};
use crate::text::count;

/// How a record reads as a line of the report's timeline (`history`'s line, which the command
/// layer hands down).
pub(crate) type RecordLine = fn(&Record) -> String;

/// Renders the soak's artifact from the log, writes it atomically to `path` and records that.
pub(crate) fn write_artifact(
    log: &EventLog,
    soak_id: &str,
    path: &Path,
    record: impl FnOnce(Vec<(Subject, Event)>) -> Result<(), SoakError>,
) -> Result<String, SoakError> {
    let snapshot = log.snapshot()?;
    let written = artifact::write_atomically_with(path, |file| {
        artifact::stream::write(&snapshot, soak_id, file)
    })
    .map_err(SoakError::streaming(path))?;
    drop(snapshot);
    record(vec![(
        Subject::Soak(soak_id.to_owned()),
        Event::ArtifactWritten {
            path: path.display().to_string(),
            digest: written.digest.clone(),
            bytes: written.bytes,
        },
    )])?;
    Ok(written.digest)
}

/// Writes the soak's HTML report to `path`, from the log as it is now (its verdict and
/// artifact recorded); what cannot be written says how to write it again.
pub(super) fn write_report(
    log: &EventLog,
    soak_id: &str,
    path: &Path,
    line: RecordLine,
) -> Result<(), SoakError> {
    let html = report_html(&log.snapshot()?, soak_id, line)?;
    artifact::write_atomically(path, html.as_bytes()).map_err(|e| SoakError::NotWritten {
        kind: OutputFile::Report,
        soak_id: soak_id.to_owned(),
        path: path.to_owned(),
        source: Box::new(SoakError::output(OutputFile::Report, path)(e)),
    })
}

/// The HTML report of a soak, from the log: its artifact's view, its events, the chain head.
pub(crate) fn report_html(
    snapshot: &Snapshot,
    soak_id: &str,
    line: RecordLine,
) -> Result<String, SoakError> {
    let mut charts = crate::soak::report::Charts::default();
    // The rows are spooled in the temporary directory.
    let spool = std::env::temp_dir();
    let mut gathered = artifact::stream::gather(snapshot, soak_id, |piece| charts.take(piece))
        .map_err(SoakError::streaming(&spool))?;
    let digest = gathered.digest().map_err(SoakError::streaming(&spool))?;
    // The page shows the command lines masked; the digest is the artifact's as written.
    crate::redact::shown::artifact(&mut gathered.head);
    let view = Value::Object(std::mem::take(&mut gathered.head));
    let timeline = timeline(snapshot, soak_id, line)?;
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
fn timeline(
    snapshot: &Snapshot,
    soak_id: &str,
    line_of: RecordLine,
) -> Result<Vec<String>, SoakError> {
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
    snapshot.scan_records(&Subject::Soak(soak_id.to_owned()), 1, |record| {
        let line = line_of(&record);
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
        Ok::<bool, SoakError>(true)
    })?;
    flush(&mut run, &mut lines);
    Ok(lines)
}
