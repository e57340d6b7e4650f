//! The contract between the store and the views materialised beside the events.
//!
//! The store names no view: it is handed a list of [`View`]s when a log is opened and, on every
//! append, applies each to the new envelopes inside the same write transaction; `log verify`
//! folds the whole log through the same views in memory ([`FoldedView`]) and compares. A view is a
//! pure fold over the events of one kind of subject, so a projection is written once, as a typed
//! [`Projection`], and the store sees it through the byte-level [`View`] every projection gets.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::codec::{self, CodecError};
use super::tables::ViewTable;
use crate::event::{Envelope, Subject};

/// What an event does to a row.
#[derive(Debug, PartialEq)]
pub enum Update<Row> {
    Keep,
    Put(Row),
    Delete,
}

/// A typed projection: one row per subject it follows, changed by each event of that subject.
pub trait Projection: Sync {
    type Row: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug;
    /// The table this projection is materialised in.
    const TABLE: ViewTable;

    /// The row key for a subject, or `None` when this projection ignores the subject.
    fn key(subject: &Subject) -> Option<&str>;

    /// How `envelope` changes the row `current`.
    fn apply(current: Option<&Self::Row>, envelope: &Envelope) -> Update<Self::Row>;
}

/// A projection as the store sees it: encoded rows in a table.
pub trait View: Sync {
    fn table(&self) -> ViewTable;

    /// The row key for a subject, or `None` when this view ignores the subject.
    fn key<'s>(&self, subject: &'s Subject) -> Option<&'s str>;

    /// How `envelope` changes the encoded row `current`.
    fn apply_encoded(
        &self,
        current: Option<&[u8]>,
        envelope: &Envelope,
    ) -> Result<Update<Vec<u8>>, CodecError>;

    /// Whether its row of a soak outlives the soak's records when they are archived (its
    /// `soak_archived` event keeps the row, which no event in the live log can rebuild): such a
    /// view is folded over the archive's records, where they can be read, when its table is
    /// built or checked (`log verify`), and its stored row is taken where they cannot.
    fn kept_past_archive(&self) -> bool {
        false
    }
}

impl<P: Projection> View for P {
    fn table(&self) -> ViewTable {
        P::TABLE
    }

    fn key<'s>(&self, subject: &'s Subject) -> Option<&'s str> {
        P::key(subject)
    }

    fn apply_encoded(
        &self,
        current: Option<&[u8]>,
        envelope: &Envelope,
    ) -> Result<Update<Vec<u8>>, CodecError> {
        let current: Option<P::Row> = current.map(codec::decode).transpose()?;
        Ok(match P::apply(current.as_ref(), envelope) {
            Update::Keep => Update::Keep,
            // A row is read back as a record is: one its reader would refuse is not written.
            Update::Put(row) => Update::Put(codec::encode_record(&row)?),
            Update::Delete => Update::Delete,
        })
    }
}

/// The views a log keeps up to date: handed to [`EventLog::open`](super::EventLog::open) and to
/// [`Snapshot::verify`](super::Snapshot::verify).
pub(crate) type Views = &'static [&'static dyn View];

/// A view folded in memory: what its table must hold after the events folded so far.
pub(crate) struct FoldedView<'v> {
    view: &'v dyn View,
    rows: BTreeMap<String, Vec<u8>>,
}

impl<'v> FoldedView<'v> {
    pub(crate) fn new(view: &'v dyn View) -> Self {
        Self {
            view,
            rows: BTreeMap::new(),
        }
    }

    pub(crate) fn apply(&mut self, envelope: &Envelope) -> Result<(), CodecError> {
        let Some(key) = self.view.key(&envelope.subject) else {
            return Ok(());
        };
        match self
            .view
            .apply_encoded(self.rows.get(key).map(Vec::as_slice), envelope)?
        {
            Update::Keep => {}
            Update::Put(row) => {
                self.rows.insert(key.to_owned(), row);
            }
            Update::Delete => {
                self.rows.remove(key);
            }
        }
        Ok(())
    }

    /// The view folded.
    pub(crate) fn view(&self) -> &'v dyn View {
        self.view
    }

    /// Takes `row` as the row at `key` (or none), as stored: what the events in reach cannot
    /// rebuild (a row kept past an archive that cannot be read).
    pub(crate) fn seed(&mut self, key: &str, row: Option<Vec<u8>>) {
        match row {
            Some(row) => self.rows.insert(key.to_owned(), row),
            None => self.rows.remove(key),
        };
    }

    /// The encoded rows, by key.
    pub(crate) fn into_rows(self) -> BTreeMap<String, Vec<u8>> {
        self.rows
    }
}
