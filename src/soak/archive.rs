//! Archiving finished soaks: what the live log keeps of each (its `soaks` row and how long its
//! command ran), handed to the log, which moves the records (`log::archive`).

use crate::event::{Event, Subject};
use crate::log::{ArchiveDone, EventLog, LogError, Snapshot, ToArchive};
use crate::projection::{SoakState, SoakSummary, Soaks};
use crate::soak::error::SoakError;

/// Where a soak's records are, as far as archiving goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kept {
    /// In the live log; how long its command ran (its verdict's `run_ms`, none for an
    /// abandoned soak).
    Live { run_ms: Option<u64> },
    /// Moved to the archive file named, by the `soak_archived` event at this sequence, which
    /// kept how long its command ran.
    Archived {
        file: String,
        seq: u64,
        run_ms: Option<u64>,
    },
}

/// Where the records of `soak` are: told by its newest record, its `soak_archived` event if it
/// was archived, else its verdict (or artifact, after it).
pub(crate) fn kept(snapshot: &Snapshot, soak: &SoakSummary) -> Result<Kept, LogError> {
    let mut kept = Kept::Live { run_ms: None };
    let subject = Subject::Soak(soak.soak_id.clone());
    snapshot.scan_subject_back(&subject, u64::MAX, |record| {
        let run_ms = match record.envelope.event {
            Event::SoakArchived(archived) => {
                kept = Kept::Archived {
                    run_ms: archived.soak.run_ms,
                    file: archived.file,
                    seq: record.envelope.seq,
                };
                return Ok(false);
            }
            Event::SoakFinished { end, .. } => Some(end.run_ms),
            // Its verdict is its last event but the artifact's; an abandoned soak has none.
            Event::ArtifactWritten { .. } => return Ok(true),
            _ => None,
        };
        kept = Kept::Live { run_ms };
        Ok(false)
    })?;
    Ok(kept)
}

/// How long a finished soak's command ran, as its verdict recorded it (or its `soak_archived`
/// event kept it), in milliseconds: none for a running or abandoned soak.
pub(crate) fn run_ms(snapshot: &Snapshot, soak: &SoakSummary) -> Result<Option<u64>, LogError> {
    if soak.ended_at_us.is_none() {
        return Ok(None);
    }
    Ok(match kept(snapshot, soak)? {
        Kept::Live { run_ms } | Kept::Archived { run_ms, .. } => run_ms,
    })
}

/// Archives the finished soaks `soak_ids` (full ids) of `log`, which should be open alone
/// ([`EventLog::open_alone`]): each one's records to a file beside the log, in one transaction.
/// A soak archived already is left as it is; an unknown one or one still running is refused,
/// with nothing archived.
pub fn archive(log: &EventLog, soak_ids: &[String]) -> Result<Vec<ArchiveDone>, SoakError> {
    let snapshot = log.snapshot()?;
    let rows = Soaks::rows(&snapshot)?;
    let mut plans = Vec::new();
    for id in soak_ids {
        let soak = rows
            .iter()
            .find(|row| row.soak_id == *id)
            .ok_or_else(|| SoakError::NoSuchSoak(id.clone()))?;
        if soak.state == SoakState::Running {
            return Err(SoakError::NotFinished(id.clone()));
        }
        let Kept::Live { run_ms } = kept(&snapshot, soak)? else {
            continue;
        };
        // An abandoned soak keeps the end every view shows of it: its last sample's time.
        let kept = super::ended::as_shown(&snapshot, soak.clone())?
            .to_keep(run_ms)
            .ok_or_else(|| SoakError::NotFinished(id.clone()))?;
        plans.push(ToArchive {
            soak_id: id.clone(),
            soak: kept,
        });
    }
    // A snapshot held would keep what the archive frees from being reused, and compaction out.
    drop(snapshot);
    Ok(log.archive(plans)?)
}
