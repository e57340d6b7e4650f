//! The event log: an append-only, hash-chained record of everything unilab does, per user and
//! per host, in one redb file.
//!
//! It stores the events of [`crate::event`] and keeps the views it is handed ([`View`]) up to
//! date in the same transaction as each append; it names no view itself. Its parts: `open`
//! (create, repair, migrate, check scope), `append`, `read` (snapshots), `pack` (compact
//! samples written packed, read whole), `archive` (a finished soak's records moved to a file of
//! their own), `verify` (chain, views and archives), over one [`codec`] and one [`chain`].

mod append;
mod archive;
pub(crate) mod chain;
pub(crate) mod claim;
pub(crate) mod codec;
mod error;
#[cfg(test)]
mod faults;
mod io;
pub(crate) mod migrate;
mod open;
mod pack;
mod read;
pub(crate) mod tables;
mod verify;
mod view;

pub use append::Appended;
pub use archive::{ArchiveCheck, ArchiveDone, ToArchive};
pub use error::LogError;
pub use open::{EventLog, LogReader};
pub use pack::store_samples_whole;
pub use read::{Record, Snapshot, StoredRecord};
pub use verify::VerifyReport;
#[cfg(test)]
pub(crate) use view::Fold;
pub(crate) use view::Views;
pub use view::{Projection, Update, View};
