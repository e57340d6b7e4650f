//! Appending: one durable write transaction that reads the head, links the new records to it,
//! and updates the subject index and every view, so the log and its caches never disagree.

use std::path::Path;

use redb::{ReadableTable, Table, WriteTransaction};
use serde::de::DeserializeOwned;

use super::chain::{self, Hash};
use super::codec;
use super::codec::CodecError;
use super::error::LogError;
use super::io::{damaged, encode_for, encode_record_for, guarded, refused, unreadable};
use super::open::EventLog;
use super::pack::Packer;
use super::tables::{self, ViewTable};
use super::view::{Update, View};
use crate::event::{Envelope, Event, StoredEnvelope, StoredEvent, Subject};

/// An append whose commit failed: whether it landed is told by the log, once it can be read
/// (see `EventLog::settle`).
#[derive(Debug, Clone)]
pub(super) struct Unsettled {
    /// The head the append was to leave: its last record's sequence and hash.
    pub(super) head: (u64, Hash),
    pub(super) appended: Vec<Appended>,
}

/// Events to append, each with its subject, in the form they are stored in.
type Events = Vec<(Subject, StoredEvent)>;

impl Unsettled {
    /// Whether the append's last record is in the log as it was to be.
    fn landed(&self, snapshot: &super::Snapshot) -> Result<bool, LogError> {
        let (seq, hash) = self.head;
        Ok(snapshot.get(seq)?.is_some_and(|record| record.hash == hash))
    }
}

fn seq_of(appended: &[Appended]) -> u64 {
    appended.last().map_or(0, |a| a.seq)
}

fn head_of(appended: &[Appended]) -> Hash {
    appended.last().map_or(chain::GENESIS, |a| a.hash)
}

/// What an append returns once it is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub seq: u64,
    pub hash: Hash,
    pub recorded_at_us: i64,
}

impl EventLog {
    /// Appends one event; durable when it returns. A domain [`Event`] is stored in its newest
    /// form; a [`StoredEvent`] as it is (the crate's tests record old forms so).
    pub fn append(
        &self,
        subject: Subject,
        event: impl Into<StoredEvent>,
    ) -> Result<Appended, LogError> {
        let appended = self.append_all([(subject, event)])?;
        appended
            .into_iter()
            .next()
            .ok_or_else(|| damaged(&self.path, "an append returned nothing"))
    }

    /// Appends events in one transaction: all of them or none, with one durable commit. Each
    /// is stored as [`append`](Self::append) stores it.
    pub fn append_all<E: Into<StoredEvent>>(
        &self,
        events: impl IntoIterator<Item = (Subject, E)>,
    ) -> Result<Vec<Appended>, LogError> {
        let events = events.into_iter().map(|(s, e)| (s, e.into())).collect();
        let (mut landed, events) = self.landed_before(events)?;
        if events.is_empty() && !landed.is_empty() {
            return Ok(landed);
        }
        let result = guarded(&self.path, || {
            self.with_db(|db| self.append_in_transaction(db, events, |_| Ok(true)))
        });
        landed.extend(self.settle(result)?);
        Ok(landed)
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
        let (landed, events) = self.landed_before(vec![(subject, event.into())])?;
        if let Some(landed) = landed.into_iter().next() {
            return Ok(Some(landed));
        }
        let result = guarded(path, || {
            self.with_db(|db| self.append_in_transaction(db, events, decide))
        });
        Ok(self.settle(result)?.into_iter().next())
    }

    /// An append whose commit failed may still have landed: redb makes a commit durable, then
    /// writes its header once more, and an error in that last write fails the commit (as does
    /// a failed sync whose data the reopen's recovery flushes again and adopts). Reported as
    /// failed, such an append would be tried again by its caller (a soak holds its samples
    /// through a full disk) and recorded twice. So the log, opened again, is asked: if the last
    /// record the append was to make is in it with the hash it was to have (another process
    /// may have appended since), the append is in. When the log cannot be read yet, the
    /// question waits for the next append (`landed_before`).
    fn settle(&self, result: Result<Vec<Appended>, LogError>) -> Result<Vec<Appended>, LogError> {
        let Err(error) = result else {
            return result;
        };
        let Some(unsettled) = self.lock_unsettled().clone() else {
            return Err(error);
        };
        let Ok(landed) = self.snapshot().and_then(|s| unsettled.landed(&s)) else {
            return Err(error);
        };
        self.lock_unsettled().take();
        if landed {
            Ok(unsettled.appended)
        } else {
            Err(error)
        }
    }

    /// Before an append: settles the question an earlier append left (see `settle`). If that
    /// append landed, the events given that it made — a retry holds them, perhaps among newer
    /// ones — are not appended again: their records are returned, with the events left to
    /// append.
    fn landed_before(&self, events: Events) -> Result<(Vec<Appended>, Events), LogError> {
        let Some(unsettled) = self.lock_unsettled().clone() else {
            return Ok((Vec::new(), events));
        };
        let snapshot = self.snapshot()?;
        if !unsettled.landed(&snapshot)? {
            self.lock_unsettled().take();
            return Ok((Vec::new(), events));
        }
        // What each landed record holds, encoded as a retry's events would be.
        let mut made = Vec::with_capacity(unsettled.appended.len());
        for appended in &unsettled.appended {
            let record = snapshot
                .get(appended.seq)?
                .ok_or_else(|| damaged(&self.path, "a record it committed is missing"))?;
            let Envelope {
                subject,
                event,
                schema,
                ..
            } = record.envelope;
            let stored = (&subject, &event.into_stored(schema));
            made.push(Some((encode_for(&self.path, &stored)?, *appended)));
        }
        let mut landed = Vec::new();
        let mut rest = Vec::new();
        for (subject, event) in events {
            let encoded = encode_for(&self.path, &(&subject, &event))?;
            match made
                .iter_mut()
                .find(|m| m.as_ref().is_some_and(|(bytes, _)| *bytes == encoded))
                .and_then(Option::take)
            {
                Some((_, appended)) => landed.push(appended),
                None => rest.push((subject, event)),
            }
        }
        self.lock_unsettled().take();
        Ok((landed, rest))
    }

    fn lock_packed(&self) -> std::sync::MutexGuard<'_, Option<super::pack::Stored>> {
        // As for `unsettled`: a poisoned lock's value is whole (a packer's last sample or none).
        self.packed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn lock_unsettled(&self) -> std::sync::MutexGuard<'_, Option<Unsettled>> {
        // A poisoned lock holds a value as good as any: a panic cannot leave it half-set.
        self.unsettled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends `events` in one write transaction if `decide`, run inside it first, says so.
    fn append_in_transaction(
        &self,
        db: &redb::Database,
        events: Events,
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
        // Taken for the transaction: a commit that fails leaves none, and the next sample of the
        // soak is packed against nothing.
        let mut packer = Packer::new(self.lock_packed().take());
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
                let mut record = StoredEnvelope {
                    seq,
                    recorded_at_us: self.clock.now_us(),
                    scope: self.scope.clone(),
                    subject,
                    event,
                };
                let key = record.subject.key();
                // A sample is stored packed; the views see it whole and upcast, as a reader
                // will. What the log's reader could not read back is refused here, before
                // anything is committed.
                let body = packer.store(path, &index, &key, &mut record, |stored| {
                    encode_record_for(path, stored)
                })?;
                let (stored, hash) = chain::seal(&head, &body);
                records
                    .insert(seq, stored.as_slice())
                    .map_err(unreadable(path))?;
                index
                    .insert((key.as_str(), seq), ())
                    .map_err(unreadable(path))?;
                appended.push(Appended {
                    seq,
                    hash,
                    recorded_at_us: record.recorded_at_us,
                });
                head = hash;
                // A packed sample handed in as it is (the crate's tests forge them) is seen by
                // no view: views see samples whole.
                if let Some(envelope) = record.upcast() {
                    for (view, table) in &mut views {
                        apply_view(path, *view, table, &envelope)?;
                    }
                    packer.stored(key, seq, envelope.event);
                }
            }
            meta.insert(tables::HEAD_KEY, encode_for(path, &(seq, head))?.as_slice())
                .map_err(unreadable(path))?;
        }
        // Checked at every commit: what a moved or replaced log is sent would be lost silently.
        if let Err(e) = self.check_still_at_path() {
            txn.abort().map_err(unreadable(path))?;
            return Err(e);
        }
        if let Err(e) = txn.commit() {
            *self.lock_unsettled() = Some(Unsettled {
                head: (seq_of(&appended), head_of(&appended)),
                appended,
            });
            return Err(unreadable(path)(e));
        }
        *self.lock_packed() = packer.into_last();
        trace_commit(&appended, kinds, began);
        Ok(appended)
    }
}

/// Says what a commit wrote, at `-v` (a soak's samples at `-vv`).
fn trace_commit(appended: &[Appended], mut kinds: Vec<&'static str>, began: std::time::Instant) {
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
}

pub(super) fn apply_view(
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
