//! The collectives a rank had launched, read from what PyTorch says of them: its flight
//! recorder's dumps (JSON or pickle, [`read_dump`]) and, when there is none, the NCCL
//! watchdog's lines in an output tail ([`watchdog::from_tail`]). Both give the same shape:
//! per process group its last enqueued, started and completed sequence numbers and the
//! entries not yet completed.
//!
//! Invariants: a dump is untrusted bytes. Reading one never panics, never runs anything the
//! dump names (the pickle reader refuses every opcode but plain data), and stays inside
//! [`MAX_DUMP_BYTES`], [`value::MAX_DEPTH`] levels and [`value::MAX_VALUES`] values.
//! What differs between torch versions is tolerated: counters as strings (JSON) or integers
//! (pickle), Gloo's `''` group keys, an older dump that is a bare list of entries.

mod fr;
mod pickle;
mod value;
pub(crate) mod watchdog;

use std::io::Read;
use std::path::Path;

use serde::Serialize;

/// The largest dump read; a bigger one is refused, not truncated.
pub(crate) const MAX_DUMP_BYTES: usize = 64 << 20;

/// The frames kept of an entry's stack, innermost first, as torch records them.
pub(crate) const MAX_TOP_FRAMES: usize = 8;

/// Why a dump could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum DumpError {
    #[error("the dump is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the dump nests deeper than {limit} levels")]
    TooDeep { limit: usize },
    #[error("the dump expands to more than {limit} values")]
    TooManyValues { limit: usize },
    #[error("the dump is not JSON: {0}")]
    Json(String),
    #[error("the pickle cannot be read at byte {at}: {what}")]
    Pickle { at: usize, what: String },
    #[error("the dump is not a flight recorder's: {0}")]
    NotFlightRecorder(String),
    #[error("the dump cannot be read: {0}")]
    Io(String),
}

pub(crate) use crate::event::soak::{
    CollectiveFrame as Frame, CollectiveGroup as Group, PendingCollective as Pending,
};

/// What one dump said.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Dump {
    /// The dump's format version (`"2.10"`), when it says.
    pub(crate) version: Option<String>,
    pub(crate) groups: Vec<Group>,
}

/// Reads one dump, JSON or pickle (told apart by pickle's PROTO opcode).
pub(crate) fn read_dump(bytes: &[u8]) -> Result<Dump, DumpError> {
    if bytes.len() > MAX_DUMP_BYTES {
        return Err(DumpError::TooLarge {
            limit: MAX_DUMP_BYTES,
        });
    }
    let value = if bytes.first() == Some(&0x80) {
        pickle::from_pickle(bytes)?
    } else {
        value::from_json(bytes)?
    };
    fr::groups(&value)
}

/// Reads the dump at `path`, a regular file (a link is not followed), never more than
/// [`MAX_DUMP_BYTES`] of it.
pub(crate) fn read_dump_file(path: &Path) -> Result<Dump, DumpError> {
    let bytes =
        read_regular(path, MAX_DUMP_BYTES as u64 + 1).map_err(|e| DumpError::Io(e.to_string()))?;
    read_dump(&bytes)
}

/// At most `at_most` bytes of the regular file at `path`, opened without following a link
/// and without blocking (a FIFO put there is refused, not waited on).
pub(crate) fn read_regular(path: &Path, at_most: u64) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(at_most).read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests;
