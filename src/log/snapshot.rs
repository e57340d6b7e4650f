//! One consistent read of the log, and its records as they are stored: each checked against
//! its own hash and decoded in its stored form, samples packed or whole as they were written.
//! The reads that hand records on to the log's readers (`read`) give them whole and upcast,
//! through `pack`'s unpacker, which walks back over stored records through here.

use std::path::{Path, PathBuf};

use redb::{ReadTransaction, ReadableDatabase};

use super::chain::{self, ChainBreak, Hash};
use super::codec;
use super::error::LogError;
use super::io::{damaged, guarded, open_read_table, unreadable};
use super::tables;
use crate::event::{Envelope, StoredEnvelope, Subject};

/// A stored record, decoded and upcast: what every reader above the log is given.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub envelope: Envelope,
    pub prev_hash: Hash,
    pub hash: Hash,
}

/// A stored record, decoded as it is stored (a sample perhaps packed): for what the log itself
/// and `log stats` look at.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRecord {
    pub envelope: StoredEnvelope,
    pub prev_hash: Hash,
    pub hash: Hash,
}

/// One consistent read of the log.
pub struct Snapshot {
    pub(super) txn: ReadTransaction,
    pub(super) path: PathBuf,
}

impl Snapshot {
    pub(super) fn begin(db: &impl ReadableDatabase, path: &Path) -> Result<Self, LogError> {
        let txn = guarded(path, || db.begin_read().map_err(unreadable(path)))?;
        Ok(Self {
            txn,
            path: path.to_owned(),
        })
    }

    /// [`Snapshot::scan_subject_back`] with records as they are stored, samples packed or whole.
    pub(super) fn scan_subject_back_raw(
        &self,
        subject: &Subject,
        through: u64,
        mut visit: impl FnMut(StoredRecord) -> Result<bool, LogError>,
    ) -> Result<(), LogError> {
        let path = self.path.as_path();
        let key = subject.key();
        guarded(path, || {
            let (Some(index), Some(events)) = (
                open_read_table(path, &self.txn, tables::SUBJECT_INDEX)?,
                open_read_table(path, &self.txn, tables::EVENTS)?,
            ) else {
                return Ok(());
            };
            let seqs = index
                .range((key.as_str(), 0)..=(key.as_str(), through))
                .map_err(unreadable(path))?;
            for entry in seqs.rev() {
                let seq = entry.map_err(unreadable(path))?.0.value().1;
                let Some(stored) = events.get(seq).map_err(unreadable(path))? else {
                    return Err(damaged(
                        path,
                        format!("the subject index names record {seq}, which is missing"),
                    ));
                };
                if !visit(decode_record(path, seq, stored.value())?)? {
                    break;
                }
            }
            Ok(())
        })
    }
}

/// Decodes a stored record after checking it against its own hash.
pub(super) fn decode_record(
    path: &Path,
    seq: u64,
    stored: &[u8],
) -> Result<StoredRecord, LogError> {
    decode_hashed(path, seq, stored, chain::hash_holds(stored))
}

/// [`decode_record`] for a record whose own hash was checked ahead: `hash_holds` is what
/// [`chain::hash_holds`] said of it. The faults are found in the same order.
pub(super) fn decode_hashed(
    path: &Path,
    seq: u64,
    stored: &[u8],
    hash_holds: bool,
) -> Result<StoredRecord, LogError> {
    let fault = |fault| LogError::Chain {
        path: path.to_owned(),
        chain_break: ChainBreak { seq, fault },
    };
    let raw = chain::split(stored).ok_or_else(|| fault(chain::ChainFault::Truncated))?;
    if !hash_holds {
        return Err(fault(chain::ChainFault::HashMismatch));
    }
    let envelope: StoredEnvelope = codec::decode(raw.body)
        .map_err(|e| fault(chain::ChainFault::Undecodable(e.to_string())))?;
    Ok(StoredRecord {
        envelope,
        prev_hash: raw.prev_hash,
        hash: raw.hash,
    })
}
