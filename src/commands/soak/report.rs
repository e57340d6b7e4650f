//! `unilab soak report`: the self-contained HTML report.

use super::{refuse_to_replace, resolve};
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::event::Subject;
use crate::log::Snapshot;
use crate::output::Output;
use crate::paths::StatePaths;
use crate::soak::artifact;
use crate::soak::error::{SoakError, Written};
use crate::text::count;
use serde_json::Value;
use std::path::Path;

pub(super) fn report(
    paths: &StatePaths,
    id: &str,
    output: Option<&Path>,
    force: bool,
    out: &mut Output,
) -> Result<Exit, Error> {
    let (snapshot, summary) = resolve(paths, id, out)?;
    if let Some(path) = output {
        refuse_to_replace(path, Written::Report, force)?;
    }
    let html = report_html(&snapshot, &summary.soak_id)?;
    match output {
        Some(path) => {
            artifact::write_atomically(path, html.as_bytes())
                .map_err(SoakError::output(Written::Report, path))?;
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
    snapshot.scan_records(&Subject::Soak(soak_id.to_owned()), 1, |record| {
        let line = crate::commands::history::record_line(&record);
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
