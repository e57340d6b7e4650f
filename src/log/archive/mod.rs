//! Archives: a finished soak's records moved out of the live log into a file of their own
//! beside it, and the live log's `soak_archived` event that commits to them.
//!
//! The records go verbatim (`prev_hash ‖ hash ‖ body`), compressed, to one file a soak
//! ([`file`]); the transaction that removes them from the live log appends the event, and
//! only after the file is durable ([`write`]). Readers get a soak's records through one
//! function wherever they are ([`Snapshot::scan_records`](super::Snapshot::scan_records), in
//! [`read`]); `log verify` accounts for every gap with the events (`chain::ChainWalker`) and
//! checks each archive that is present against its event ([`check`]).

mod check;
mod file;
mod read;
mod write;

pub use check::ArchiveCheck;
pub(crate) use check::Met;
pub use write::{ArchiveDone, ToArchive};
