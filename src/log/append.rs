//! Appending: one durable write transaction that reads the head, links the new records to it,
//! and updates the subject index and every view, so the log and its caches never disagree.

use std::path::Path;

use redb::{ReadableTable, Table, WriteTransaction};
use serde::de::DeserializeOwned;

use super::chain::{self, Hash};
use super::codec;
use super::error::LogError;
use super::io::{damaged, encode_for, guarded, unreadable};
use super::open::EventLog;
use super::tables::{self, ViewTable};
use super::view::{Update, View};
use crate::event::{Envelope, Event, Subject};

/// What an append returns once it is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub seq: u64,
    pub hash: Hash,
    pub recorded_at_us: i64,
}

impl EventLog {
    /// Appends one event; durable when it returns.
    pub fn append(&self, subject: Subject, event: Event) -> Result<Appended, LogError> {
        let appended = self.append_all([(subject, event)])?;
        appended
            .into_iter()
            .next()
            .ok_or_else(|| damaged(&self.path, "an append returned nothing"))
    }

    /// Appends events in one transaction: all of them or none, with one durable commit.
    pub fn append_all(
        &self,
        events: impl IntoIterator<Item = (Subject, Event)>,
    ) -> Result<Vec<Appended>, LogError> {
        guarded(&self.path, || {
            self.with_db(|db| self.append_in_transaction(db, events, |_| Ok(true)))
        })
    }

    /// Appends `event` only if `still` holds for the row `table` has at `key` — decided inside
    /// the write transaction, so no other writer can append between the decision and the
    /// append. `None` when `still` said no (nothing was written).
    pub(crate) fn append_if<Row: DeserializeOwned>(
        &self,
        subject: Subject,
        event: Event,
        table: ViewTable,
        key: &str,
        still: impl FnOnce(Option<Row>) -> bool,
    ) -> Result<Option<Appended>, LogError> {
        let path = self.path.as_path();
        let decide = |txn: &WriteTransaction| {
            let rows = txn.open_table(table).map_err(unreadable(path))?;
            let row = rows.get(key).map_err(unreadable(path))?;
            let row = row
                .map(|stored| codec::decode(stored.value()))
                .transpose()
                .map_err(|e| damaged(path, format!("projection row `{key}`: {e}")))?;
            Ok(still(row))
        };
        let appended = guarded(path, || {
            self.with_db(|db| self.append_in_transaction(db, [(subject, event)], decide))
        })?;
        Ok(appended.into_iter().next())
    }

    /// Appends `events` in one write transaction if `decide`, run inside it first, says so.
    fn append_in_transaction(
        &self,
        db: &redb::Database,
        events: impl IntoIterator<Item = (Subject, Event)>,
        decide: impl FnOnce(&WriteTransaction) -> Result<bool, LogError>,
    ) -> Result<Vec<Appended>, LogError> {
        let path = self.path.as_path();
        let began = std::time::Instant::now();
        let txn = db.begin_write().map_err(unreadable(path))?;
        if !decide(&txn)? {
            txn.abort().map_err(unreadable(path))?;
            return Ok(Vec::new());
        }
        let mut appended = Vec::new();
        let mut kinds = Vec::new();
        {
            let mut records = txn.open_table(tables::EVENTS).map_err(unreadable(path))?;
            let mut index = txn
                .open_table(tables::SUBJECT_INDEX)
                .map_err(unreadable(path))?;
            let mut views = self
                .views
                .iter()
                .map(|view| Ok((*view, txn.open_table(view.table())?)))
                .collect::<Result<Vec<_>, redb::TableError>>()
                .map_err(unreadable(path))?;
            let mut meta = txn.open_table(tables::META).map_err(unreadable(path))?;

            let (mut seq, mut head) = match records.last().map_err(unreadable(path))? {
                Some((key, stored)) => (
                    key.value(),
                    chain::stored_hash(stored.value())
                        .ok_or_else(|| damaged(path, "its last record is truncated"))?,
                ),
                None => (0, chain::GENESIS),
            };
            // Appending to a log whose end was cut or changed would hide the damage under a
            // new, consistent head: refuse, as `log verify` would.
            let recorded = match meta.get(tables::HEAD_KEY).map_err(unreadable(path))? {
                Some(stored) => codec::decode(stored.value())
                    .map_err(|e| damaged(path, format!("its recorded head: {e}")))?,
                None => (0, chain::GENESIS),
            };
            if let Some(chain_break) = chain::head_break(recorded, (seq, head)) {
                return Err(LogError::Chain {
                    path: path.to_owned(),
                    chain_break,
                });
            }
            for (subject, event) in events {
                seq += 1;
                kinds.push(event.kind());
                let envelope = Envelope {
                    seq,
                    recorded_at_us: self.clock.now_us(),
                    scope: self.scope.clone(),
                    subject,
                    event,
                };
                let body = encode_for(path, &envelope)?;
                let (stored, hash) = chain::seal(&head, &body);
                records
                    .insert(seq, stored.as_slice())
                    .map_err(unreadable(path))?;
                index
                    .insert((envelope.subject.key().as_str(), seq), ())
                    .map_err(unreadable(path))?;
                for (view, table) in &mut views {
                    apply_view(path, *view, table, &envelope)?;
                }
                head = hash;
                appended.push(Appended {
                    seq,
                    hash,
                    recorded_at_us: envelope.recorded_at_us,
                });
            }
            meta.insert(tables::HEAD_KEY, encode_for(path, &(seq, head))?.as_slice())
                .map_err(unreadable(path))?;
        }
        // Checked at every commit: what a moved or replaced log is sent would be lost silently.
        if let Err(e) = self.check_still_at_path() {
            txn.abort().map_err(unreadable(path))?;
            return Err(e);
        }
        txn.commit().map_err(unreadable(path))?;
        // A soak's samples are shown with `-vv`; every other commit with `-v`.
        let detail = if kinds.iter().all(|k| *k == "soak_sampled") {
            crate::trace::SAMPLES
        } else {
            crate::trace::STEPS
        };
        if crate::trace::enabled(detail) {
            kinds.dedup();
            let kinds = kinds.join(", ");
            if let (Some(first), Some(last)) = (appended.first(), appended.last()) {
                let seqs = if first.seq == last.seq {
                    format!("seq {}", first.seq)
                } else {
                    format!("seq {}..={}", first.seq, last.seq)
                };
                crate::trace::emit(format_args!(
                    "event log: committed {} ({seqs}: {kinds}) in {}",
                    crate::text::count(appended.len() as u64, "event"),
                    crate::trace::ms(began.elapsed())
                ));
            }
        }
        Ok(appended)
    }
}

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
            .map_err(|e| damaged(path, format!("projection row `{key}`: {e}")))?
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
