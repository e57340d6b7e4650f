//! Reading: what a snapshot hands the log's readers — records checked against their own hashes
//! as they are decoded, each sample whole (through `pack`'s unpacker, never the packed form a
//! record is stored in), the whole chain replayed, and the rows of any view's table.

use redb::ReadableTable;
use serde::de::DeserializeOwned;

use super::ahead::read_ahead;
use super::chain::{self, ChainWalker, Hash};
use super::codec;
use super::error::LogError;
use super::io::{damaged, guarded, open_read_table, unreadable};
use super::meta::{last_record, read_meta};
use super::pack::{self, Unpacker};
use super::snapshot::{Record, Snapshot, StoredRecord, decode_hashed, decode_record};
use super::tables::{self, ViewTable};
use crate::event::{Envelope, Scope, Subject};

/// A table's rows as stored, by key.
pub(crate) type EncodedRows = Vec<(String, Vec<u8>)>;

/// How many of a subject's records [`Snapshot::scan_subject`] reads on the calling thread before
/// it reads the rest on a second one: a daemon's whole life, a short soak.
const AHEAD_AFTER: usize = 1024;

impl Snapshot {
    /// The recorded schema version and scope; `None` for a log never written.
    pub(crate) fn meta(&self) -> Result<Option<(u32, Scope)>, LogError> {
        guarded(&self.path, || read_meta(&self.path, &self.txn))
    }

    /// The sequence and hash of the last record: `(0, GENESIS)` for an empty log.
    pub fn head(&self) -> Result<(u64, Hash), LogError> {
        let path = self.path.as_path();
        guarded(path, || {
            match open_read_table(path, &self.txn, tables::EVENTS)? {
                Some(events) => last_record(path, &events),
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
        })?
        .map(|record| self.whole(record))
        .transpose()
    }

    /// `record` upcast, with the whole sample in place of a packed one.
    fn whole(&self, record: StoredRecord) -> Result<Record, LogError> {
        Ok(Record {
            envelope: pack::unpack_alone(self, record.envelope)?,
            prev_hash: record.prev_hash,
            hash: record.hash,
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
            let mut unpacker = Unpacker::default();
            for entry in events.range(from..).map_err(unreadable(path))? {
                let (key, stored) = entry.map_err(unreadable(path))?;
                let record = decode_record(path, key.value(), stored.value())?;
                if !visit(unpacker.record(self, record)?)? {
                    break;
                }
            }
            Ok(())
        })
    }

    /// Calls `visit` with every record as it is stored, in order, and the bytes it is stored in
    /// (its encoded body, hashes and framing): what each record costs the log.
    pub fn scan_sized(
        &self,
        mut visit: impl FnMut(StoredRecord, usize) -> Result<(), LogError>,
    ) -> Result<(), LogError> {
        let path = self.path.as_path();
        guarded(path, || {
            let Some(events) = open_read_table(path, &self.txn, tables::EVENTS)? else {
                return Ok(());
            };
            for entry in events.range(0..).map_err(unreadable(path))? {
                let (key, stored) = entry.map_err(unreadable(path))?;
                let bytes = stored.value().len();
                visit(decode_record(path, key.value(), stored.value())?, bytes)?;
            }
            Ok(())
        })
    }

    /// Calls `visit` with every record of `subject` from sequence `from` on, in order, each
    /// checked against its own hash, until it returns `false`: one pass along the subject index
    /// and, in step with it, one range scan of the records (no lookup a record). `visit`'s error
    /// stops the scan and is returned.
    ///
    /// Past its first `AHEAD_AFTER` records, which a short subject never leaves, a long subject
    /// (a soak's samples) is read ahead (`read_ahead`).
    pub fn scan_subject<E: From<LogError>>(
        &self,
        subject: &Subject,
        from: u64,
        mut visit: impl FnMut(Record) -> Result<bool, E>,
    ) -> Result<(), E> {
        let path = self.path.as_path();
        let key = subject.key();
        let mut unpacker = Unpacker::default();
        let Some(resume) = self.subject_stored(&key, from, AHEAD_AFTER, &mut |seq, stored| {
            visit(unpacker.record(self, decode_record(path, seq, stored)?)?)
        })?
        else {
            return Ok(());
        };
        read_ahead(
            |give| {
                self.subject_stored(&key, resume, usize::MAX, &mut |seq, stored| {
                    Ok::<_, LogError>(give(seq, stored))
                })
                .map(drop)
            },
            |seq, stored, hash_holds| {
                visit(unpacker.record(self, decode_hashed(path, seq, stored, hash_holds)?)?)
            },
        )
    }

    /// Calls `visit` with the records of `subject` up to sequence `through`, newest first, each
    /// checked against its own hash, until it returns `false`: for what a subject's last events
    /// say (a soak's verdict just before its artifact) without reading the whole subject.
    pub fn scan_subject_back(
        &self,
        subject: &Subject,
        through: u64,
        mut visit: impl FnMut(Record) -> Result<bool, LogError>,
    ) -> Result<(), LogError> {
        self.scan_subject_back_raw(subject, through, |record| visit(self.whole(record)?))
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
    pub(crate) fn keyed_rows<Row: DeserializeOwned>(
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

    /// Every row of a view's table as stored, by key; `None` when the log has no such table
    /// (an older schema's, not migrated; or a view it has not met).
    pub(crate) fn table_rows(&self, table: ViewTable) -> Result<Option<EncodedRows>, LogError> {
        let path = self.path.as_path();
        guarded(path, || {
            let Some(table) = open_read_table(path, &self.txn, table)? else {
                return Ok(None);
            };
            let mut rows = Vec::new();
            for item in table.iter().map_err(unreadable(path))? {
                let (key, value) = item.map_err(unreadable(path))?;
                rows.push((key.value().to_owned(), value.value().to_vec()));
            }
            Ok(Some(rows))
        })
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
    /// link, hash, sequence), decoded and upcast, then handed to `visit`. Returns the walker, positioned
    /// after the last record, for the caller to check against the recorded head.
    pub fn replay(&self, mut visit: impl FnMut(Envelope)) -> Result<ChainWalker, LogError> {
        let path = self.path.as_path();
        let mut walker = ChainWalker::default();
        let mut unpacker = Unpacker::default();
        read_ahead(
            |give| {
                guarded(path, || {
                    let Some(events) = open_read_table(path, &self.txn, tables::EVENTS)? else {
                        return Ok(());
                    };
                    for entry in events.iter().map_err(unreadable(path))? {
                        let (key, stored) = entry.map_err(unreadable(path))?;
                        if !give(key.value(), stored.value()) {
                            break;
                        }
                    }
                    Ok(())
                })
            },
            |seq, stored, hash_holds| {
                let envelope =
                    walker
                        .step_hashed(seq, stored, hash_holds)
                        .map_err(|chain_break| LogError::Chain {
                            path: path.to_owned(),
                            chain_break,
                        })?;
                visit(unpacker.unpack(self, envelope)?);
                Ok::<_, LogError>(true)
            },
        )?;
        Ok(walker)
    }
}
