//! The few helpers every part of the store uses to talk to redb: a panic guard, and the mapping
//! of redb's and the codec's errors onto [`LogError`].

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use redb::{ReadOnlyTable, ReadTransaction, TableDefinition, TableError};

use super::codec::{self, CodecError};
use super::error::{LogError, is_access, is_no_space};
use crate::event::{StoredEnvelope, Subject};

/// Runs `f`, turning a panic inside redb into [`LogError::Damaged`]. redb may panic on a file
/// that is not what it expects (a damaged or foreign file), and no input may make unilab panic,
/// so every call into redb on a user's file goes through here.
pub(super) fn guarded<T>(
    path: &Path,
    f: impl FnOnce() -> Result<T, LogError>,
) -> Result<T, LogError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let detail = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "the storage engine gave up on it".to_owned());
        Err(LogError::Damaged {
            path: path.to_owned(),
            detail,
        })
    })
}

/// A redb error on the log at `path`: [`LogError::Access`] when the file could not be reached
/// (a permission, a path that is not a directory), [`LogError::NoSpace`] when its file system
/// is full, else [`LogError::Unreadable`].
pub(super) fn unreadable<E: Into<redb::Error>>(path: &Path) -> impl Fn(E) -> LogError + '_ {
    move |e| match e.into() {
        redb::Error::Io(io) if is_access(&io) => LogError::Access {
            path: path.to_owned(),
            source: io,
        },
        redb::Error::Io(io) if is_no_space(&io) => LogError::NoSpace {
            path: path.to_owned(),
            source: io,
        },
        other => LogError::Unreadable {
            path: path.to_owned(),
            source: Box::new(other),
        },
    }
}

pub(super) fn damaged(path: &Path, detail: impl Into<String>) -> LogError {
    LogError::Damaged {
        path: path.to_owned(),
        detail: detail.into(),
    }
}

pub(super) fn encode_for<T: serde::Serialize>(path: &Path, value: &T) -> Result<Vec<u8>, LogError> {
    codec::encode(value).map_err(|source| LogError::Encode {
        path: path.to_owned(),
        source,
    })
}

/// The stored body of `envelope`: its encoding, refused ([`LogError::TooLarge`]) when the
/// log's reader could not decode it.
pub(super) fn encode_record_for(
    path: &Path,
    envelope: &StoredEnvelope,
) -> Result<Vec<u8>, LogError> {
    codec::encode_record(envelope)
        .map_err(|source| refused(path, &envelope.subject, envelope.event.kind(), source))
}

/// `source`, an encoding of an event of `kind` about `subject` that failed, as the log's error.
pub(super) fn refused(
    path: &Path,
    subject: &Subject,
    kind: &'static str,
    source: CodecError,
) -> LogError {
    match source {
        CodecError::TooLarge { .. } | CodecError::TooLong { .. } => LogError::TooLarge {
            path: path.to_owned(),
            subject: subject.to_string(),
            kind,
            source,
        },
        source => LogError::Encode {
            path: path.to_owned(),
            source,
        },
    }
}

/// Opens a table for reading; `None` when it was never created.
pub(super) fn open_read_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    path: &Path,
    txn: &ReadTransaction,
    definition: TableDefinition<K, V>,
) -> Result<Option<ReadOnlyTable<K, V>>, LogError> {
    match txn.open_table(definition) {
        Ok(table) => Ok(Some(table)),
        Err(TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(unreadable(path)(e)),
    }
}

/// What a file that is not a regular one is, for a person.
pub(super) fn what_kind(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a named pipe (FIFO)"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "something other than a file"
    }
}
