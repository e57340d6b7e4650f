//! The report of a soak as the log holds it: its record, its rows as charts, its events as a
//! timeline, its artifact's digest and the log's chain head — what `soak report` writes, and
//! what a soak run with `--report` writes when it ends.

use crate::event::Subject;
use crate::log::Snapshot;
use crate::read::stream::{gather, streaming};
use crate::soak::error::SoakError;
use crate::text::count;
use crate::view::timeline::record_line;

/// The HTML report of a soak, from the log: its record, its events, the chain head.
pub(crate) fn of_soak(snapshot: &Snapshot, soak_id: &str) -> Result<String, SoakError> {
    let mut charts = super::Charts::default();
    // The rows are spooled in the temporary directory.
    let spool = std::env::temp_dir();
    let mut gathered =
        gather(snapshot, soak_id, |piece| charts.take(piece)).map_err(streaming(&spool))?;
    let digest = gathered.digest().map_err(streaming(&spool))?;
    // The page shows the command lines masked; the digest is the artifact's as written.
    let record = gathered.record.masked();
    let timeline = timeline(snapshot, soak_id)?;
    let (_, head) = snapshot.head()?;
    Ok(super::render(
        &record,
        charts,
        &super::Extras {
            timeline: &timeline,
            digest: &digest,
            chain_head: &crate::log::chain::to_hex(&head),
        },
    ))
}

/// The soak's events as `history --soak` prints them, each run of samples shown by its first
/// and last with the number between: a week of samples is not a page of lines.
fn timeline(snapshot: &Snapshot, soak_id: &str) -> Result<Vec<String>, SoakError> {
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
        let line = record_line(&record);
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
