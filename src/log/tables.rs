//! The log's own redb tables. Each projection owns the definition of its table (see
//! [`View::table`](super::View::table)); the store creates and fills those through the views it
//! was handed.

use redb::TableDefinition;

/// Sequence → `prev_hash ‖ hash ‖ encoded envelope` (see `chain`).
pub const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");

/// Log metadata, values encoded by the codec: [`SCHEMA_VERSION_KEY`], `SCOPE_KEY`, and
/// `HEAD_KEY`, the `(sequence, hash)` of the last record, written by every append. A chain
/// cannot show that records were cut from its end; the head can.
pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
pub const SCHEMA_VERSION_KEY: &str = "schema_version";
pub(crate) const SCOPE_KEY: &str = "scope";
pub(crate) const HEAD_KEY: &str = "head";

/// `(subject, sequence)` → nothing: the sequences of each subject, in order.
pub const SUBJECT_INDEX: TableDefinition<(&str, u64), ()> = TableDefinition::new("subject_index");

/// The table type of every view: a string key to an encoded row.
pub(crate) type ViewTable = TableDefinition<'static, &'static str, &'static [u8]>;
