//! The log's metadata as every part of the store reads and writes it: the schema version and
//! scope a log was initialised with, and its head — the last record found, and the one its
//! last append recorded, which must agree (a chain cannot show that records were cut from its
//! end; the recorded head can).

use std::path::Path;

use redb::{ReadTransaction, ReadableTable, WriteTransaction};

use super::chain::{self, Hash};
use super::codec;
use super::error::LogError;
use super::io::{damaged, encode_for, open_read_table, unreadable};
use super::tables;
use crate::event::Scope;

/// The version and scope recorded in a log, `None` for a file that was never initialised.
pub(super) fn read_meta(
    path: &Path,
    txn: &ReadTransaction,
) -> Result<Option<(u32, Scope)>, LogError> {
    match open_read_table(path, txn, tables::META)? {
        Some(meta) => meta_of(path, &meta),
        None => Ok(None),
    }
}

/// The version and scope in a `meta` table, read or write.
pub(super) fn meta_of(
    path: &Path,
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Option<(u32, Scope)>, LogError> {
    let version = meta
        .get(tables::SCHEMA_VERSION_KEY)
        .map_err(unreadable(path))?;
    let scope = meta.get(tables::SCOPE_KEY).map_err(unreadable(path))?;
    match (version, scope) {
        (None, None) => Ok(None),
        (Some(version), Some(scope)) => {
            let version =
                codec::decode(version.value()).map_err(|e| damaged(path, e.to_string()))?;
            let scope = codec::decode(scope.value()).map_err(|e| damaged(path, e.to_string()))?;
            Ok(Some((version, scope)))
        }
        _ => Err(damaged(path, "its metadata is incomplete")),
    }
}

/// Records `version` and `scope` in the log's `meta` table.
pub(super) fn write_meta(
    path: &Path,
    txn: &WriteTransaction,
    version: u32,
    scope: &Scope,
) -> Result<(), LogError> {
    let mut meta = txn.open_table(tables::META).map_err(unreadable(path))?;
    meta.insert(
        tables::SCHEMA_VERSION_KEY,
        encode_for(path, &version)?.as_slice(),
    )
    .map_err(unreadable(path))?;
    meta.insert(tables::SCOPE_KEY, encode_for(path, scope)?.as_slice())
        .map_err(unreadable(path))?;
    Ok(())
}

/// The sequence and hash of the last record in `records`: `(0, GENESIS)` when it holds none.
pub(super) fn last_record(
    path: &Path,
    records: &impl ReadableTable<u64, &'static [u8]>,
) -> Result<(u64, Hash), LogError> {
    match records.last().map_err(unreadable(path))? {
        Some((key, stored)) => Ok((
            key.value(),
            chain::stored_hash(stored.value())
                .ok_or_else(|| damaged(path, "its last record is truncated"))?,
        )),
        None => Ok((0, chain::GENESIS)),
    }
}

/// The head the log recorded with its last append: `(0, GENESIS)` before the first.
pub(super) fn recorded_head(
    path: &Path,
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<(u64, Hash), LogError> {
    match meta.get(tables::HEAD_KEY).map_err(unreadable(path))? {
        Some(stored) => codec::decode(stored.value())
            .map_err(|e| damaged(path, format!("its recorded head: {e}"))),
        None => Ok((0, chain::GENESIS)),
    }
}
