//! What the live log keeps of a soak whose records were moved to an archive file (schema 8).

use serde::{Deserialize, Serialize};

/// A run of consecutive sequences removed from the live log, with the hashes that link the
/// records on both sides of the gap it leaves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedRun {
    pub first: u64,
    pub last: u64,
    /// The previous hash of the run's first record (the hash of the record before it).
    pub prev_hash: [u8; 32],
    /// The hash of the run's last record (the previous hash of the record after it).
    pub last_hash: [u8; 32],
}

/// A finished soak's records, moved out of the live log into an archive file beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Archived {
    /// The archive file's name, in the log's directory.
    pub file: String,
    /// Every removed sequence, as runs.
    pub runs: Vec<ArchivedRun>,
    /// How many records were removed.
    pub records: u64,
    /// blake3 over every removed record's sequence (8 bytes, little endian) and hash, in order:
    /// commits to each of them.
    pub records_digest: [u8; 32],
}
