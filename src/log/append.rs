//! Appending through the log's handle: one durable write transaction a call, whose records go
//! through the [`Appender`] (sealed, indexed, the views applied), so the log and its caches never
//! disagree; and the question a failed commit leaves — did it land? — settled before a retry
//! can record the same events twice.

use redb::{ReadableTable, WriteTransaction};
use serde::de::DeserializeOwned;

use super::appender::{Appended, Appender};
use super::chain::{self, Hash};
use super::codec;
use super::error::LogError;
use super::handle::{EventLog, Unsettled};
use super::io::{damaged, encode_for, guarded, unreadable};
use super::tables::ViewTable;
use crate::event::{Envelope, Event, StoredEvent, Subject};

/// Events to append, each with its subject, in the form they are stored in.
type Events = Vec<(Subject, StoredEvent)>;

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
        let packed = self.lock_packed().take();
        let mut appender =
            Appender::open(&txn, path, (&self.scope, &*self.clock), self.views, packed)?;
        for (subject, event) in events {
            kinds.push(event.kind());
            appended.push(appender.push(subject, event)?);
        }
        let packed = appender.finish()?;
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
        *self.lock_packed() = packed;
        trace_commit(&appended, kinds, began);
        Ok(appended)
    }
}

fn seq_of(appended: &[Appended]) -> u64 {
    appended.last().map_or(0, |a| a.seq)
}

fn head_of(appended: &[Appended]) -> Hash {
    appended.last().map_or(chain::GENESIS, |a| a.hash)
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
                crate::text::step_time(began.elapsed().as_secs_f64())
            ));
        }
    }
}
