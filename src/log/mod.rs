//! The event log: an append-only, hash-chained record of everything unilab does, per user and
//! per host, in one redb file.

pub mod chain;
pub mod codec;
pub mod error;
pub mod event;
pub mod migrate;
pub mod store;
pub mod tables;

pub use error::LogError;
pub use event::{Envelope, Event, Scope, Subject};
pub use store::{
    Appended, Clock, EventLog, LogReader, Record, Snapshot, SystemClock, VerifyReport,
};
