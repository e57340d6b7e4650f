//! The event log: an append-only, hash-chained record of everything unilab does, per user and
//! per host, in one redb file.
//!
//! It stores the events of [`crate::event`] and keeps the views it is handed ([`View`]) up to
//! date in the same transaction as each append; it names no view itself. Its parts, from the
//! top down (each uses only parts listed after it):
//! - `reader` ([`LogReader`], read-only), `append` (retry-safe appends), `verify` (chain, views
//!   and archives) and `archive` (a finished soak's records moved to a file of their own);
//! - `handle` ([`EventLog`], what a writer holds), opened through `open` (create, repair,
//!   migrate, check scope);
//! - `appender`: the one append path, which every record takes — packed, sealed into the
//!   chain, indexed under its subject, the views applied;
//! - `read`: what readers are handed — records with their samples whole, through `pack`
//!   (samples written packed, read whole);
//! - `snapshot` (one consistent read, records as stored), `ahead` (reading on a second thread)
//!   and `meta` (version, scope, head), over one [`codec`] and one [`chain`].

mod ahead;
mod append;
mod appender;
mod archive;
mod build;
pub(crate) mod chain;
pub(crate) mod claim;
pub(crate) mod codec;
mod error;
#[cfg(test)]
mod faults;
#[cfg(test)]
mod golden;
mod handle;
mod io;
mod meta;
pub(crate) mod migrate;
mod open;
mod pack;
mod read;
mod reader;
mod snapshot;
pub(crate) mod tables;
mod verify;
mod view;

pub use appender::Appended;
pub use archive::{ArchiveCheck, ArchiveDone, ToArchive};
pub use error::LogError;
pub use handle::EventLog;
pub use pack::store_samples_whole;
pub use reader::LogReader;
pub use snapshot::{Record, Snapshot, StoredRecord};
pub use verify::VerifyReport;
#[cfg(test)]
pub(crate) use view::FoldedView;
pub(crate) use view::Views;
pub use view::{Projection, Update, View};
