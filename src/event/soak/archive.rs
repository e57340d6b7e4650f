//! What the live log keeps of a soak whose records were moved to an archive file (schema 8).
//!
//! The event commits to every record it removed — which sequences (as runs), how many, and a
//! digest over each one's sequence and hash — and to the gaps the live log was left with, with
//! the hashes of the records on both sides of each, so that `log verify` proves, with or without
//! the archive file, that nothing else went missing and that the records beside each gap are
//! the ones that were there. It also keeps what the `soaks` view and `soak list` show of the
//! soak, which can no longer be folded from its records.

use serde::{Deserialize, Serialize};

use super::{FailureKind, OutcomeStatus};
use crate::process::ProcessIdentity;

/// A run of consecutive sequences removed from the live log, placed after the run before it:
/// compact however the soak's records were interleaved with others' (a soak beside seven other
/// ranks' leaves a run a sample).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedRun {
    /// How many sequences the live log keeps between the end of the run before (or sequence 0)
    /// and the first of this one.
    pub kept: u64,
    /// How many consecutive sequences this run removed.
    pub removed: u64,
}

/// What `soak list` and `soak show` know of a soak without its records: the `soaks` view's
/// row as it was when the soak was archived, and how long its command ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedSoak {
    pub command: Vec<String>,
    pub output: String,
    pub supervisor: ProcessIdentity,
    pub started_at_us: i64,
    pub ended_at_us: Option<i64>,
    pub status: OutcomeStatus,
    pub failure_kind: Option<FailureKind>,
    pub reason: Option<String>,
    pub samples: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    pub artifact_digest: Option<String>,
    /// How long its command ran, as its verdict recorded it (none for an abandoned soak).
    pub run_ms: Option<u64>,
}

/// A finished soak's records, moved out of the live log into an archive file beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Archived {
    /// The archive file's name, in the log's directory.
    pub file: String,
    pub soak: ArchivedSoak,
    /// Every removed sequence, as runs in order.
    pub runs: Vec<ArchivedRun>,
    /// How many records were removed.
    pub records: u64,
    /// Their stored bytes (hashes and encoded bodies), before compression.
    pub bytes: u64,
    /// blake3 over every removed record's sequence (8 bytes, little endian) and hash, in order.
    pub records_digest: [u8; 32],
    /// blake3 over every gap the live log was left with by the archive that recorded this event
    /// (its first and last sequence, 8 bytes each, little endian; the hash of the record before
    /// it, or zeros at the log's start; the previous hash of the record after it), in order.
    pub gaps_digest: [u8; 32],
}

impl Archived {
    /// The removed sequences as `(first, last)` ranges, in order; `None` past a run that would
    /// leave `u64` (a damaged or hand-made event).
    pub fn ranges(&self) -> impl Iterator<Item = Option<(u64, u64)>> + '_ {
        let mut end = Some(0u64);
        self.runs.iter().map(move |run| {
            let first = end?.checked_add(run.kept)?.checked_add(1)?;
            let last = first.checked_add(run.removed.checked_sub(1)?)?;
            end = Some(last);
            Some((first, last))
        })
    }

    /// Whether `seq` is one of the removed sequences.
    pub fn covers(&self, seq: u64) -> bool {
        self.ranges()
            .map_while(|range| range)
            .take_while(|(first, _)| *first <= seq)
            .any(|(_, last)| seq <= last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_place_themselves_after_the_run_before() {
        let archived = Archived {
            file: "f".into(),
            soak: ArchivedSoak {
                command: Vec::new(),
                output: String::new(),
                supervisor: ProcessIdentity {
                    pid: 1,
                    start_ticks: 1,
                },
                started_at_us: 0,
                ended_at_us: None,
                status: OutcomeStatus::Passed,
                failure_kind: None,
                reason: None,
                samples: 0,
                first_seq: 1,
                last_seq: 9,
                artifact_digest: None,
                run_ms: None,
            },
            runs: vec![
                ArchivedRun {
                    kept: 0,
                    removed: 3,
                },
                ArchivedRun {
                    kept: 2,
                    removed: 1,
                },
                ArchivedRun {
                    kept: 1,
                    removed: 2,
                },
            ],
            records: 6,
            bytes: 0,
            records_digest: [0; 32],
            gaps_digest: [0; 32],
        };
        let ranges: Vec<_> = archived.ranges().collect();
        assert_eq!(ranges, [Some((1, 3)), Some((6, 6)), Some((8, 9))]);
        let covered: Vec<u64> = (0..12).filter(|s| archived.covers(*s)).collect();
        assert_eq!(covered, [1, 2, 3, 6, 8, 9]);
        let empty_run = Archived {
            runs: vec![ArchivedRun {
                kept: 0,
                removed: 0,
            }],
            ..archived
        };
        assert_eq!(empty_run.ranges().collect::<Vec<_>>(), [None]);
    }
}
