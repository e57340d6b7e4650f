//! What the log keeps of each soak for the job views: the job it is a rank of ([`Member`]) and
//! its [`RankFold`], folded inside each append's write transaction as a view of the log
//! ([`KeptRanks`], table [`TABLE`]). `job show` reads a rank's row from here in the time one
//! row takes, however many samples the soak has; and a soak's job is known without its start,
//! so a soak outside a job is never read (nor its archive).
//!
//! Invariants:
//! - A row is what [`RankFold::event`] makes of the soak's events, the rule every reader of a
//!   soak takes; `log verify` folds the log again and compares.
//! - A row outlives the soak's archive ([`View::kept_past_archive`]): archiving moves the
//!   records but keeps what was folded of them. Where a table is built from the events (the
//!   migration to schema 14), an archived soak is folded from its archive, and has no row where
//!   that cannot be read: a reader then reads its records, as it does in a log that keeps no
//!   table (another host's, not migrated).
//! - The stored shape of a row is [`STATE_VERSION`], which names its table: a row of another
//!   shape is never decoded as this one. A log whose table is of another version is read as one
//!   that keeps none; this host's own log gets the table of this version built when it is
//!   opened.
//! - `seen_seq` follows the `soaks` view's `last_seq`: a row behind it (a writer that did not
//!   keep it) is not used.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::RankFold;
use crate::event::soak::{JobMember, SoakStart};
use crate::event::{Envelope, Event, Subject};
use crate::log::codec::{self, CodecError};
use crate::log::tables::ViewTable;
use crate::log::{LogError, Snapshot, Update, View};
use crate::soak::launch::{JOB_KEY, NODE_KEY, RANK_KEY, rank_number};

/// The shape of [`KeptRank`] as stored, and its table, named after it (`soak_ranks_v<N>`).
macro_rules! kept_as {
    ($version:literal) => {
        /// The shape of [`KeptRank`] as stored: changed whenever what it holds changes shape (a
        /// field added to [`RankFold`] or to any part of it), which the test of its bytes says.
        pub(crate) const STATE_VERSION: u32 = $version;
        /// The table of the rows, named after [`STATE_VERSION`].
        pub(crate) const TABLE: ViewTable = ViewTable::new(concat!("soak_ranks_v", $version));
    };
}

kept_as!(2);

/// The job a soak is a rank of, as its start recorded it: its recorded job (schema 9 on), else
/// the `job` of its metadata (`--meta job=`, before jobs were recorded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Member {
    pub job: String,
    /// The run of the job it joined (schema 13 on).
    pub run: Option<String>,
    /// Its rank: as recorded, else as its metadata says when that is a number.
    pub rank: Option<u32>,
    /// The rank as its metadata holds it, whether or not a number; else the recorded one.
    pub rank_text: Option<String>,
    /// Slurm's name for the host (`SLURMD_NODENAME`), when the soak recorded one.
    pub node: Option<String>,
}

impl Member {
    /// The job of a soak that started with `start` and, where its form recorded one, `job`.
    pub(crate) fn of(start: &SoakStart, job: Option<&JobMember>) -> Option<Self> {
        let metadata = &start.metadata;
        let name = job
            .map(|j| j.job.clone())
            .or_else(|| metadata.get(JOB_KEY).cloned())?;
        let recorded = job.and_then(|j| j.rank);
        Some(Member {
            job: name,
            run: job.and_then(|j| j.run.clone()),
            rank: recorded.or_else(|| metadata.get(RANK_KEY).and_then(|r| rank_number(r))),
            rank_text: metadata
                .get(RANK_KEY)
                .cloned()
                .or_else(|| recorded.map(|r| r.to_string())),
            node: metadata.get(NODE_KEY).cloned(),
        })
    }
}

/// The row of one soak.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct KeptRank {
    /// Its job; `None` for a soak outside a job (whose fold is not kept).
    pub member: Option<Member>,
    /// The sequence of its last event, as the `soaks` view counts them (a job's soak only).
    pub seen_seq: u64,
    pub fold: RankFold,
}

/// The view of the log that keeps [`KeptRank`]s, by soak id.
pub(crate) struct KeptRanks;

/// Whether `event` is one the `soaks` view counts in a soak's `last_seq`.
fn counted(event: &Event) -> bool {
    matches!(
        event,
        Event::SoakStarted { .. }
            | Event::SoakSampled { .. }
            | Event::SoakFinished { .. }
            | Event::SoakEvidenceCaptured(_)
            | Event::SoakJobAlarmSeen(_)
            | Event::SoakAbandoned { .. }
            | Event::ArtifactWritten { .. }
    )
}

impl KeptRanks {
    /// What `envelope` does to the row `current`. A soak outside a job keeps its row as its
    /// start left it, but for where it stands (its verdict, once): a start after that begins
    /// nothing, as for any soak.
    fn apply(current: Option<KeptRank>, envelope: &Envelope) -> Update<KeptRank> {
        let event = &envelope.event;
        let mut row = match (current, event) {
            (Some(row), _) => row,
            (None, Event::SoakStarted { .. }) => KeptRank {
                member: None,
                seen_seq: 0,
                fold: RankFold::default(),
            },
            // Events of a soak whose start is not in the log change nothing.
            (None, _) => return Update::Keep,
        };
        let at_us = envelope.recorded_at_us;
        match event {
            Event::SoakStarted { start, job, .. } => {
                if row.fold.event(event, at_us, None) {
                    row.member = Member::of(start, job.as_ref());
                }
            }
            Event::SoakFinished { .. } | Event::SoakAbandoned { .. } if row.member.is_none() => {
                if !row.fold.event(event, at_us, None) {
                    return Update::Keep;
                }
            }
            _ if row.member.is_none() => return Update::Keep,
            _ => {
                row.fold.event(event, at_us, None);
            }
        }
        if row.member.is_none() {
            row.fold.forget_run();
        }
        row.seen_seq = envelope.seq;
        Update::Put(row)
    }
}

impl View for KeptRanks {
    fn table(&self) -> ViewTable {
        TABLE
    }

    fn key<'s>(&self, subject: &'s Subject) -> Option<&'s str> {
        match subject {
            Subject::Soak(id) => Some(id),
            _ => None,
        }
    }

    fn apply_encoded(
        &self,
        current: Option<&[u8]>,
        envelope: &Envelope,
    ) -> Result<Update<Vec<u8>>, CodecError> {
        if !counted(&envelope.event) {
            return Ok(Update::Keep);
        }
        let current: Option<KeptRank> = current.map(codec::decode).transpose()?;
        Ok(match Self::apply(current, envelope) {
            Update::Keep => Update::Keep,
            // A row is read back as a record is: one its reader would refuse is not written.
            Update::Put(row) => Update::Put(codec::encode_record(&row)?),
            Update::Delete => Update::Delete,
        })
    }

    fn kept_past_archive(&self) -> bool {
        true
    }
}

/// The rows the log read in `snapshot` keeps, by soak id; `None` when it keeps none of this
/// shape (a log of an older schema, not migrated; or one whose rows are of another
/// [`STATE_VERSION`]). A row that does not decode is left out (its soak is read from its
/// records).
pub(crate) fn rows(snapshot: &Snapshot) -> Result<Option<BTreeMap<String, KeptRank>>, LogError> {
    let Some(stored) = snapshot.table_rows(TABLE)? else {
        return Ok(None);
    };
    Ok(Some(
        stored
            .into_iter()
            .filter_map(|(key, bytes)| Some((key, codec::decode(&bytes).ok()?)))
            .collect(),
    ))
}

#[cfg(test)]
mod tests;
