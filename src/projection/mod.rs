//! Projections: views of the event log, materialised as tables.
//!
//! A projection is a pure fold over the events of one kind of subject. The store applies it
//! inside the append's write transaction; `log verify` folds the whole log again in memory and
//! compares. Projections are caches: the events are the truth.

pub mod daemons;
pub mod soaks;

use redb::TableDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::log::event::{Envelope, Subject};

/// What an event does to a projection's row.
#[derive(Debug, PartialEq)]
pub enum Update<Row> {
    Keep,
    Put(Row),
    Delete,
}

pub trait Projection {
    type Row: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug;
    /// The table this projection is materialised in.
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]>;

    /// The row key for a subject, or `None` when this projection ignores the subject.
    fn key(subject: &Subject) -> Option<&str>;

    /// How `envelope` changes the row `current`.
    fn apply(current: Option<&Self::Row>, envelope: &Envelope) -> Update<Self::Row>;
}
