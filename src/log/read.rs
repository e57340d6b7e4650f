//! Reading: one consistent snapshot of the log, its records checked against their own hashes as
//! they are decoded, and the rows of any view's table.

use std::path::{Path, PathBuf};
use std::sync::mpsc;

use redb::{ReadTransaction, ReadableDatabase, ReadableTable};
use serde::de::DeserializeOwned;

use super::chain::{self, ChainBreak, ChainWalker, Hash};
use super::codec;
use super::error::LogError;
use super::io::{damaged, guarded, open_read_table, unreadable};
use super::open::read_meta;
use super::tables::{self, ViewTable};
use crate::event::{Envelope, Scope, Subject};

/// How many of a subject's records [`Snapshot::scan_subject`] reads on the calling thread before
/// it reads the rest on a second one: a daemon's whole life, a short soak.
const AHEAD_AFTER: usize = 1024;

/// How many records the reading thread hands over at once.
const BATCH: usize = 256;

/// A stored record, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub envelope: Envelope,
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

    /// The recorded schema version and scope; `None` for a log never written.
    pub fn meta(&self) -> Result<Option<(u32, Scope)>, LogError> {
        guarded(&self.path, || read_meta(&self.path, &self.txn))
    }

    /// The sequence and hash of the last record: `(0, GENESIS)` for an empty log.
    pub fn head(&self) -> Result<(u64, Hash), LogError> {
        let path = self.path.as_path();
        guarded(path, || {
            let Some(events) = open_read_table(path, &self.txn, tables::EVENTS)? else {
                return Ok((0, chain::GENESIS));
            };
            match events.last().map_err(unreadable(path))? {
                Some((key, stored)) => Ok((
                    key.value(),
                    chain::stored_hash(stored.value())
                        .ok_or_else(|| damaged(path, "its last record is truncated"))?,
                )),
                None => Ok((0, chain::GENESIS)),
            }
        })
    }

    /// The record at `seq`, decoded after checking its own hash.
    pub fn get(&self, seq: u64) -> Result<Option<Record>, LogError> {
        let path = self.path.as_path();
        guarded(path, || {
            let Some(events) = open_read_table(path, &self.txn, tables::EVENTS)? else {
                return Ok(None);
            };
            let Some(stored) = events.get(seq).map_err(unreadable(path))? else {
                return Ok(None);
            };
            decode_record(path, seq, stored.value()).map(Some)
        })
    }

    /// The last record, if any.
    pub fn last(&self) -> Result<Option<Record>, LogError> {
        match self.head()? {
            (0, _) => Ok(None),
            (seq, _) => self.get(seq),
        }
    }

    /// Calls `visit` with every record from `from` on, in order, each checked against its own
    /// hash. `visit` returns `false` to stop.
    pub fn scan(
        &self,
        from: u64,
        mut visit: impl FnMut(Record) -> Result<bool, LogError>,
    ) -> Result<(), LogError> {
        let path = self.path.as_path();
        guarded(path, || {
            let Some(events) = open_read_table(path, &self.txn, tables::EVENTS)? else {
                return Ok(());
            };
            for entry in events.range(from..).map_err(unreadable(path))? {
                let (key, stored) = entry.map_err(unreadable(path))?;
                if !visit(decode_record(path, key.value(), stored.value())?)? {
                    break;
                }
            }
            Ok(())
        })
    }

    /// Calls `visit` with every record of `subject` from sequence `from` on, in order, each
    /// checked against its own hash, until it returns `false`: one pass along the subject index
    /// and, in step with it, one range scan of the records (no lookup a record). `visit`'s error
    /// stops the scan and is returned.
    ///
    /// A long subject (a soak's samples) is read, checked and decoded on a second thread a few
    /// batches ahead of `visit`, so that the two halves of the work overlap: past the first
    /// [`AHEAD_AFTER`] records, which a short subject never leaves, the rest come through a
    /// channel of at most two batches of [`BATCH`], so memory stays flat however long the subject.
    pub fn scan_subject<E: From<LogError>>(
        &self,
        subject: &Subject,
        from: u64,
        mut visit: impl FnMut(Record) -> Result<bool, E>,
    ) -> Result<(), E> {
        let path = self.path.as_path();
        let key = subject.key();
        let Some(resume) = self.subject_stored(&key, from, AHEAD_AFTER, &mut |seq, stored| {
            visit(decode_record(path, seq, stored)?)
        })?
        else {
            return Ok(());
        };
        std::thread::scope(|scope| {
            let (batches, received) = mpsc::sync_channel::<Result<Batch, LogError>>(2);
            scope.spawn(move || {
                let mut batch = Batch::default();
                let read = self.subject_stored(&key, resume, usize::MAX, &mut |seq, stored| {
                    check_record(path, seq, stored)?;
                    batch.push(seq, stored);
                    Ok::<_, LogError>(
                        batch.records.len() < BATCH
                            || batches.send(Ok(std::mem::take(&mut batch))).is_ok(),
                    )
                });
                // The records checked before a fault go first; a closed channel means `visit`
                // stopped, and there is nothing more to say.
                if batches.send(Ok(batch)).is_ok()
                    && let Err(e) = read
                {
                    let _ = batches.send(Err(e));
                }
            });
            // Returning drops `received`, which ends the reader at its next batch.
            for batch in received {
                let batch = batch?;
                for (seq, stored) in batch.records() {
                    if !visit(decode_checked(path, seq, stored)?)? {
                        return Ok(());
                    }
                }
            }
            Ok(())
        })
    }

    /// Gives `take` the stored bytes of the records of the subject keyed `key` from sequence
    /// `from` on, at most `limit` of them, until it returns `false` or an error. `Some(next)`
    /// when it stopped at the limit, with records perhaps left from `next` on.
    fn subject_stored<E: From<LogError>>(
        &self,
        key: &str,
        from: u64,
        limit: usize,
        take: &mut impl FnMut(u64, &[u8]) -> Result<bool, E>,
    ) -> Result<Option<u64>, E> {
        let path = self.path.as_path();
        let mut failed = None;
        let rest = guarded(path, || {
            let (Some(index), Some(events)) = (
                open_read_table(path, &self.txn, tables::SUBJECT_INDEX)?,
                open_read_table(path, &self.txn, tables::EVENTS)?,
            ) else {
                return Ok(None);
            };
            let mut seqs = index
                .range((key, from)..=(key, u64::MAX))
                .map_err(unreadable(path))?
                .map(|entry| entry.map(|(k, _)| k.value().1).map_err(unreadable(path)));
            let Some(first) = seqs.next().transpose()? else {
                return Ok(None);
            };
            let mut records = events.range(first..).map_err(unreadable(path))?;
            let mut wanted = Some(first);
            let mut given = 0;
            while let Some(seq) = wanted {
                if given == limit {
                    return Ok(Some(seq));
                }
                // The records between two of the subject's belong to others: skipped undecoded.
                let stored = loop {
                    match records.next().transpose().map_err(unreadable(path))? {
                        Some((k, stored)) if k.value() == seq => break stored,
                        Some((k, _)) if k.value() < seq => {}
                        _ => {
                            return Err(damaged(
                                path,
                                format!("the subject index names record {seq}, which is missing"),
                            ));
                        }
                    }
                };
                given += 1;
                match take(seq, stored.value()) {
                    Ok(true) => {}
                    Ok(false) => return Ok(None),
                    Err(e) => {
                        failed = Some(e);
                        return Ok(None);
                    }
                }
                wanted = seqs.next().transpose()?;
            }
            Ok(None)
        })?;
        failed.map_or(Ok(rest), Err)
    }

    /// Every row of a view's table, decoded, by key.
    pub fn rows<Row: DeserializeOwned>(&self, table: ViewTable) -> Result<Vec<Row>, LogError> {
        Ok(self
            .keyed_rows(table)?
            .into_iter()
            .map(|(_, row)| row)
            .collect())
    }

    /// Every row of a view's table with its key, in key order.
    pub fn keyed_rows<Row: DeserializeOwned>(
        &self,
        table: ViewTable,
    ) -> Result<Vec<(String, Row)>, LogError> {
        self.encoded_rows(table)?
            .into_iter()
            .map(|(key, bytes)| {
                codec::decode(&bytes)
                    .map(|row| (key.clone(), row))
                    .map_err(|e| damaged(&self.path, format!("projection row `{key}`: {e}")))
            })
            .collect()
    }

    /// Every row of a view's table as stored, by key.
    pub(super) fn encoded_rows(
        &self,
        table: ViewTable,
    ) -> Result<Vec<(String, Vec<u8>)>, LogError> {
        self.entries(table, |key, value| (key.to_owned(), value.to_vec()))
    }

    /// Every entry of a table, in key order, as `entry` makes it; none for a missing table.
    pub(super) fn entries<K: redb::Key + 'static, V: redb::Value + 'static, T>(
        &self,
        definition: redb::TableDefinition<K, V>,
        entry: impl Fn(K::SelfType<'_>, V::SelfType<'_>) -> T,
    ) -> Result<Vec<T>, LogError> {
        let mut all = Vec::new();
        self.each_entry(definition, |key, value| all.push(entry(key, value)))?;
        Ok(all)
    }

    /// Calls `visit` with every entry of a table, in key order, holding none of them.
    pub(super) fn each_entry<K: redb::Key + 'static, V: redb::Value + 'static>(
        &self,
        definition: redb::TableDefinition<K, V>,
        mut visit: impl FnMut(K::SelfType<'_>, V::SelfType<'_>),
    ) -> Result<(), LogError> {
        let path = self.path.as_path();
        guarded(path, || {
            let Some(table) = open_read_table(path, &self.txn, definition)? else {
                return Ok(());
            };
            for item in table.iter().map_err(unreadable(path))? {
                let (key, value) = item.map_err(unreadable(path))?;
                visit(key.value(), value.value());
            }
            Ok(())
        })
    }

    /// Replays the whole log in order: every record is checked against the chain (continuity,
    /// link, hash, sequence) and decoded, then handed to `visit`. Returns the walker, positioned
    /// after the last record, for the caller to check against the recorded head.
    pub fn replay(&self, mut visit: impl FnMut(Envelope)) -> Result<ChainWalker, LogError> {
        let path = self.path.as_path();
        let mut walker = ChainWalker::default();
        guarded(path, || {
            let Some(events) = open_read_table(path, &self.txn, tables::EVENTS)? else {
                return Ok(());
            };
            for entry in events.iter().map_err(unreadable(path))? {
                let (key, stored) = entry.map_err(unreadable(path))?;
                let envelope = walker
                    .step(key.value(), stored.value())
                    .map_err(|chain_break| LogError::Chain {
                        path: path.to_owned(),
                        chain_break,
                    })?;
                visit(envelope);
            }
            Ok(())
        })?;
        Ok(walker)
    }
}

/// Stored records checked against their own hashes, on their way to being decoded: one buffer.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    /// Each record's sequence and the end of its bytes.
    records: Vec<(u64, usize)>,
}

impl Batch {
    fn push(&mut self, seq: u64, stored: &[u8]) {
        self.bytes.extend_from_slice(stored);
        self.records.push((seq, self.bytes.len()));
    }

    fn records(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let mut start = 0;
        self.records.iter().map(move |&(seq, end)| {
            let stored = &self.bytes[start..end];
            start = end;
            (seq, stored)
        })
    }
}

fn chain_fault(path: &Path, seq: u64) -> impl Fn(chain::ChainFault) -> LogError {
    move |fault| LogError::Chain {
        path: path.to_owned(),
        chain_break: ChainBreak { seq, fault },
    }
}

/// Checks a stored record against its own hash.
fn check_record(path: &Path, seq: u64, stored: &[u8]) -> Result<(), LogError> {
    let fault = chain_fault(path, seq);
    let raw = chain::split(stored).ok_or_else(|| fault(chain::ChainFault::Truncated))?;
    if chain::hash_of(&raw.prev_hash, raw.body) != raw.hash {
        return Err(fault(chain::ChainFault::HashMismatch));
    }
    Ok(())
}

/// Decodes a stored record [`check_record`] has checked.
fn decode_checked(path: &Path, seq: u64, stored: &[u8]) -> Result<Record, LogError> {
    let fault = chain_fault(path, seq);
    let raw = chain::split(stored).ok_or_else(|| fault(chain::ChainFault::Truncated))?;
    let envelope: Envelope = codec::decode(raw.body)
        .map_err(|e| fault(chain::ChainFault::Undecodable(e.to_string())))?;
    Ok(Record {
        envelope,
        prev_hash: raw.prev_hash,
        hash: raw.hash,
    })
}

fn decode_record(path: &Path, seq: u64, stored: &[u8]) -> Result<Record, LogError> {
    check_record(path, seq, stored)?;
    decode_checked(path, seq, stored)
}
