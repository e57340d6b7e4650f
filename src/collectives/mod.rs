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

/// One process group as a rank saw it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Group {
    /// The group's id in this rank (`pg_status`'s key, an entry's `pg_id`).
    pub(crate) group: String,
    /// The group's name (an entry's `process_group[0]`), the same on every rank of it.
    pub(crate) name: Option<String>,
    /// What the user called it (`process_group[1]`: `default_pg`, a description).
    pub(crate) desc: Option<String>,
    /// Its global ranks, when the dump says.
    pub(crate) ranks: Vec<u64>,
    pub(crate) last_enqueued: Option<i64>,
    pub(crate) last_started: Option<i64>,
    pub(crate) last_completed: Option<i64>,
    /// The collectives enqueued and not completed, oldest first.
    pub(crate) pending: Vec<Pending>,
}

/// One collective not completed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Pending {
    pub(crate) seq: i64,
    /// torch's profiling name: `gloo:all_reduce`, `nccl:_allgather_base`.
    pub(crate) op: String,
    pub(crate) input_sizes: Vec<Vec<i64>>,
    pub(crate) input_dtypes: Vec<String>,
    pub(crate) output_sizes: Vec<Vec<i64>>,
    /// `scheduled`, `started`; from a watchdog line, `timed out` or `failed`.
    pub(crate) state: String,
    /// Where it was called from, innermost first, at most [`MAX_TOP_FRAMES`].
    pub(crate) top_frames: Vec<Frame>,
    /// Element counts, where only a watchdog line told of it (it gives no shapes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) numel_in: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) numel_out: Option<i64>,
}

/// One Python frame of a collective's call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Frame {
    pub(crate) name: String,
    pub(crate) file: String,
    pub(crate) line: i64,
}

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

/// Reads the dump at `path`, never more than [`MAX_DUMP_BYTES`] of it.
pub(crate) fn read_dump_file(path: &Path) -> Result<Dump, DumpError> {
    let file = std::fs::File::open(path).map_err(|e| DumpError::Io(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_DUMP_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| DumpError::Io(e.to_string()))?;
    read_dump(&bytes)
}

#[cfg(test)]
mod tests;
