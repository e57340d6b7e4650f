//! The one place that knows how log records are encoded.
//!
//! Everything that turns a value into stored bytes, or stored bytes back into a value, goes
//! through [`encode`] and [`decode`]. The format is bincode 2 (`config::standard()`: varint
//! integers, little endian) over serde, with a hard limit on how much a decode may allocate, so
//! a corrupt or hostile length prefix cannot make a reader allocate gigabytes. Keeping it here
//! means a later format change touches this file and a migration step, nothing else.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The largest record a decode accepts. A soak sample of a 1,000-process tree is about 100 KiB;
/// this leaves room for output tails and big trees while refusing absurd length prefixes.
pub(crate) const MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;

fn config() -> impl bincode::config::Config {
    bincode::config::standard()
}

fn limited_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_RECORD_BYTES>()
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
}

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    bincode::serde::encode_to_vec(value, config()).map_err(|e| CodecError::Encode(e.to_string()))
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
