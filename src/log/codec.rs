//! The one place that knows how log records are encoded.
//!
//! Everything that turns a value into stored bytes, or stored bytes back into a value, goes
//! through [`encode`] and [`decode`]. The format is bincode 2 (`config::standard()`: varint
//! integers, little endian) over serde, with a hard limit on how much a decode may allocate, so
//! a corrupt or hostile length prefix cannot make a reader allocate gigabytes. Keeping it here
//! means a later format change touches this file and a migration step, nothing else.
//!
//! What is written must be what can be read: [`encode_record`] refuses a value whose decode
//! would go over the limit (counted exactly by [`super::claim`]) or whose encoding is longer
//! than a record may be, so that nothing the log commits, nor any archive it writes, is a
//! record its own reader refuses.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::claim::{MOST_CLAIMED_PER_BYTE, claimed};

/// The largest record a decode accepts, in what the decode claims (see [`super::claim`]), and
/// the longest encoding [`encode_record`] writes. A soak sample of a 1,000-process tree is
/// about 100 KiB; what the soak records is bounded well within this where it is built (see
/// `event::soak::bounds`), while absurd length prefixes are refused.
pub const MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;

/// An encoding at most this long claims at most [`MAX_RECORD_BYTES`] however it is made up:
/// records this short (nearly all) are not counted.
const SURELY_READABLE_BYTES: usize = MAX_RECORD_BYTES / MOST_CLAIMED_PER_BYTE;

fn config() -> impl bincode::config::Config {
    bincode::config::standard()
}

fn limited_config() -> impl bincode::config::Config {
    limited::<MAX_RECORD_BYTES>()
}

fn limited<const LIMIT: usize>() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<LIMIT>()
}

/// A value that could not be encoded or decoded, with bincode's own explanation.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("cannot encode a log record: {0}")]
    Encode(String),
    #[error("cannot decode a log record: {0}")]
    Decode(String),
    #[error("a log record has {0} bytes left over after its value")]
    TrailingBytes(usize),
    /// A value the reader would refuse: its decode would claim more than a record may hold.
    #[error(
        "decoding it would claim {claimed} bytes, more than the {} a record may hold",
        MAX_RECORD_BYTES
    )]
    TooLarge { claimed: usize },
    /// A value whose encoding is longer than a record may be.
    #[error(
        "its encoding takes {encoded} bytes, more than the {} a record may hold",
        MAX_RECORD_BYTES
    )]
    TooLong { encoded: usize },
}

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    bincode::serde::encode_to_vec(value, config()).map_err(|e| CodecError::Encode(e.to_string()))
}

/// Encodes a value to be stored as a record, refusing one that [`decode`] would refuse for its
/// size: the check is exact, and free for an encoding of at most [`SURELY_READABLE_BYTES`].
pub(crate) fn encode_record<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    let encoded = encode(value)?;
    readable(value, encoded.len())?;
    Ok(encoded)
}

/// Whether `value`, whose encoding takes `encoded` bytes, is one [`decode`] takes: an
/// encoding within [`MAX_RECORD_BYTES`] whose decode claims no more than that.
fn readable<T: Serialize + ?Sized>(value: &T, encoded: usize) -> Result<(), CodecError> {
    if encoded <= SURELY_READABLE_BYTES {
        return Ok(());
    }
    if encoded > MAX_RECORD_BYTES {
        return Err(CodecError::TooLong { encoded });
    }
    match claimed(value) {
        claimed if claimed > MAX_RECORD_BYTES => Err(CodecError::TooLarge { claimed }),
        _ => Ok(()),
    }
}

/// Whether `value` is one [`decode`] would take if it were encoded, counting what its decode
/// would claim: for a value that is stored in another form and handed out as this one (a
/// packed sample, read whole).
pub(crate) fn claims_within_limit<T: Serialize + ?Sized>(value: &T) -> Result<(), CodecError> {
    match claimed(value) {
        claimed if claimed > MAX_RECORD_BYTES => Err(CodecError::TooLarge { claimed }),
        _ => Ok(()),
    }
}

/// Whether a stored record's `body` is one [`decode`] takes as a `T`, for what was written
/// before [`encode_record`] checked: decoded (by the reader's own rules) only when it is too
/// long to be sure of.
pub(crate) fn decodes_as<T: DeserializeOwned>(body: &[u8]) -> Result<(), CodecError> {
    if body.len() <= SURELY_READABLE_BYTES {
        return Ok(());
    }
    if body.len() > MAX_RECORD_BYTES {
        return Err(CodecError::TooLong {
            encoded: body.len(),
        });
    }
    decode::<T>(body).map(drop)
}

/// Decodes a whole buffer: bytes left over after the value are an error, since a record that
/// carries more than its value is not what was written.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, read) = bincode::serde::decode_from_slice(bytes, limited_config())
        .map_err(|e| CodecError::Decode(e.to_string()))?;
    if read != bytes.len() {
        return Err(CodecError::TrailingBytes(bytes.len() - read));
    }
    Ok(value)
}

/// Whether `bytes` decode as a `T` within a limit of `LIMIT`, as [`decode`] does within
/// [`MAX_RECORD_BYTES`]: for tests of what a limit counts.
#[cfg(test)]
pub(crate) fn decodes_within<T: DeserializeOwned, const LIMIT: usize>(bytes: &[u8]) -> bool {
    bincode::serde::decode_from_slice::<T, _>(bytes, limited::<LIMIT>()).is_ok()
}
