//! Every redb table of the event log, in one place.
//!
//! `events` is the log itself; the others are caches derived from it, updated in the same write
//! transaction as the append and rebuilt and compared by `unilab log verify`.

use redb::TableDefinition;

/// Sequence → `prev_hash ‖ hash ‖ encoded envelope` (see `chain`).
pub const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");

/// Log metadata, values encoded by the codec: [`SCHEMA_VERSION_KEY`], [`SCOPE_KEY`], and
/// [`HEAD_KEY`], the `(sequence, hash)` of the last record, written by every append. A chain
/// cannot show that records were cut from its end; the head can.
pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
pub const SCHEMA_VERSION_KEY: &str = "schema_version";
pub const SCOPE_KEY: &str = "scope";
pub const HEAD_KEY: &str = "head";

/// `(subject, sequence)` → nothing: the sequences of each subject, in order.
pub const SUBJECT_INDEX: TableDefinition<(&str, u64), ()> = TableDefinition::new("subject_index");

/// Daemon name → encoded `DaemonRecord` of every daemon currently recorded as running.
pub const DAEMONS: TableDefinition<&str, &[u8]> = TableDefinition::new("daemons");

/// Soak id → encoded `SoakSummary`.
pub const SOAKS: TableDefinition<&str, &[u8]> = TableDefinition::new("soaks");
