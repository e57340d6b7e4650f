//! The one append path: every record the log gains, by an append or by `log archive`, goes
//! through an [`Appender`], which opens the tables once in the write transaction, checks the
//! head it appends to, and then, record by record, packs and encodes the event, seals it into
//! the chain, indexes it under its subject and applies every view; at the end it records the
//! new head. The caller commits (or not) and decides what the transaction does besides.

use std::path::Path;

use redb::{ReadableTable, Table, WriteTransaction};

use super::chain::{self, Hash};
use super::codec::CodecError;
use super::error::LogError;
use super::io::{damaged, encode_for, encode_record_for, refused, unreadable};
use super::meta::{last_record, recorded_head};
use super::pack::{Packer, Stored};
use super::tables;
use super::view::{Update, View, Views};
use crate::event::{Envelope, Scope, StoredEnvelope, StoredEvent, Subject};
use crate::time::Clock;

/// What an append returns once it is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub seq: u64,
    pub hash: Hash,
    pub recorded_at_us: i64,
}

/// A table of string keys to encoded values (a view's, the metadata), open for writing.
type Keyed<'t> = Table<'t, &'static str, &'static [u8]>;

/// Records appended in one write transaction, after the head it found there.
pub(super) struct Appender<'t> {
    path: &'t Path,
    scope: &'t Scope,
    clock: &'t dyn Clock,
    records: Table<'t, u64, &'static [u8]>,
    index: Table<'t, (&'static str, u64), ()>,
    views: Vec<(&'static dyn View, Keyed<'t>)>,
    meta: Keyed<'t>,
    packer: Packer,
    /// The last record's sequence and hash: the head the next record links to.
    seq: u64,
    head: Hash,
}

impl<'t> Appender<'t> {
    /// Opens the tables of `txn` — the records, the subject index, `views`' tables and the
    /// metadata — and reads the head, which must be the one the last append recorded:
    /// appending to a log whose end was cut or changed would hide the damage under a new,
    /// consistent head, so it is refused, as `log verify` would. Samples are packed from
    /// `packed`, the sample the log's handle stored last.
    pub(super) fn open(
        txn: &'t WriteTransaction,
        path: &'t Path,
        (scope, clock): (&'t Scope, &'t dyn Clock),
        views: Views,
        packed: Option<Stored>,
    ) -> Result<Self, LogError> {
        let records = txn.open_table(tables::EVENTS).map_err(unreadable(path))?;
        let index = txn
            .open_table(tables::SUBJECT_INDEX)
            .map_err(unreadable(path))?;
        let views = views
            .iter()
            .map(|view| Ok((*view, txn.open_table(view.table())?)))
            .collect::<Result<Vec<_>, redb::TableError>>()
            .map_err(unreadable(path))?;
        let meta = txn.open_table(tables::META).map_err(unreadable(path))?;
        let (seq, head) = last_record(path, &records)?;
        if let Some(chain_break) = chain::head_break(recorded_head(path, &meta)?, (seq, head)) {
            return Err(LogError::Chain {
                path: path.to_owned(),
                chain_break,
            });
        }
        Ok(Self {
            path,
            scope,
            clock,
            records,
            index,
            views,
            meta,
            packer: Packer::new(packed),
            seq,
            head,
        })
    }

    /// The sequence and hash of the last record, which the next one follows.
    pub(super) fn head(&self) -> (u64, Hash) {
        (self.seq, self.head)
    }

    /// The records, for a caller that reads or removes some in the same transaction.
    pub(super) fn records(&mut self) -> &mut Table<'t, u64, &'static [u8]> {
        &mut self.records
    }

    /// The subject index, for a caller that reads or removes entries in the same transaction.
    pub(super) fn index(&mut self) -> &mut Table<'t, (&'static str, u64), ()> {
        &mut self.index
    }

    /// Appends `event` of `subject` after the head: packed if it is a sample (what the log's
    /// reader could not read back is refused here, before anything is committed), sealed into
    /// the chain, indexed under its subject and applied, upcast as a reader will see it, to
    /// every view. A domain event is stored in its newest form.
    pub(super) fn push(
        &mut self,
        subject: Subject,
        event: impl Into<StoredEvent>,
    ) -> Result<Appended, LogError> {
        let path = self.path;
        let seq = self.seq + 1;
        let mut record = StoredEnvelope {
            seq,
            recorded_at_us: self.clock.now_us(),
            scope: self.scope.clone(),
            subject,
            event: event.into(),
        };
        let key = record.subject.key();
        // A sample is stored packed; the views see it whole.
        let body = self
            .packer
            .store(path, &self.index, &key, &mut record, |stored| {
                encode_record_for(path, stored)
            })?;
        let (stored, hash) = chain::seal(&self.head, &body);
        self.records
            .insert(seq, stored.as_slice())
            .map_err(unreadable(path))?;
        self.index
            .insert((key.as_str(), seq), ())
            .map_err(unreadable(path))?;
        (self.seq, self.head) = (seq, hash);
        let appended = Appended {
            seq,
            hash,
            recorded_at_us: record.recorded_at_us,
        };
        // A packed sample handed in as it is (the crate's tests forge them) is seen by no
        // view: views see samples whole.
        if let Some(envelope) = record.upcast() {
            for (view, table) in &mut self.views {
                apply_view(path, *view, table, &envelope)?;
            }
            self.packer.stored(key, seq, envelope.event);
        }
        Ok(appended)
    }

    /// Records the head the appends left, for the caller to commit; the sample stored last, for
    /// the log's handle to keep once the commit is durable.
    pub(super) fn finish(mut self) -> Result<Option<Stored>, LogError> {
        let head = encode_for(self.path, &(self.seq, self.head))?;
        self.meta
            .insert(tables::HEAD_KEY, head.as_slice())
            .map_err(unreadable(self.path))?;
        Ok(self.packer.into_last())
    }
}

/// Applies `view` to `envelope` in its `table`.
fn apply_view(
    path: &Path,
    view: &dyn View,
    table: &mut Table<&str, &[u8]>,
    envelope: &Envelope,
) -> Result<(), LogError> {
    let Some(key) = view.key(&envelope.subject) else {
        return Ok(());
    };
    let update = {
        let current = table.get(key).map_err(unreadable(path))?;
        view.apply_encoded(current.as_ref().map(|c| c.value()), envelope)
            .map_err(|e| match e {
                CodecError::TooLarge { .. } | CodecError::TooLong { .. } => {
                    refused(path, &envelope.subject, envelope.event.kind(), e)
                }
                e => damaged(path, format!("projection row `{key}`: {e}")),
            })?
    };
    match update {
        Update::Keep => {}
        Update::Put(row) => {
            table
                .insert(key, row.as_slice())
                .map_err(unreadable(path))?;
        }
        Update::Delete => {
            table.remove(key).map_err(unreadable(path))?;
        }
    }
    Ok(())
}
