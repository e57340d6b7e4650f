//! The redb-backed event log: opening (with repair, initialisation and migration), appending,
//! and consistent read snapshots.
//!
//! Several processes share one log: a soak supervisor appends for days while `mps stop` or
//! `history` run beside it. Every handle opens the file in redb's `MultiWriter` mode; writers
//! serialise on redb's write lock, readers see a snapshot and never block a writer. Each append is
//! one durable write transaction that reads the head, links the new records to it, and updates
//! the subject index and the projections, so the log and its caches never disagree.
//!
//! redb may panic on a file that is not what it expects (a damaged or foreign file). No input
//! may make unilab panic, so every call into redb on a user's file goes through `guarded`.

use std::fs::{DirBuilder, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redb::{
    ConcurrencyMode, Database, DatabaseError, ReadOnlyDatabase, ReadOnlyTable, ReadTransaction,
    ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition, TableError,
    TableHandle, WriteTransaction,
};

use super::chain::{self, ChainBreak, ChainWalker, Hash};
use super::codec;
use super::error::LogError;
use super::event::{Envelope, Event, Scope, Subject};
use super::migrate::{self, SCHEMA_VERSION};
use super::tables;
use crate::mps::DaemonRecord;
use crate::projection::daemons::Daemons;
use crate::projection::soaks::{SoakSummary, Soaks};
use crate::projection::{Projection, Update};

/// redb's page cache. The default (1 GiB) is far more than a log needs, and a supervisor that
/// appends for days would grow into it; appends touch only the right edge of each tree.
const CACHE_BYTES: usize = 1024 * 1024;

/// How long an open waits for a process that holds the file in a conflicting way.
const OPEN_PATIENCE: Duration = Duration::from_secs(10);

/// Wall-clock source for `recorded_at`, replaceable in tests and fixture generation.
pub trait Clock: Send + Sync {
    /// Unix microseconds.
    fn now_us(&self) -> i64;
}

pub struct SystemClock;

impl Clock for SystemClock {
    fn now_us(&self) -> i64 {
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_micros()).unwrap_or(i64::MAX),
        }
    }
}

/// What an append returns once it is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub seq: u64,
    pub hash: Hash,
    pub recorded_at_us: i64,
}

/// A stored record, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub envelope: Envelope,
    pub prev_hash: Hash,
    pub hash: Hash,
}

/// What `log verify` found in a log that verifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    pub events: u64,
    pub head: Hash,
    pub schema_version: u32,
    pub scope: Option<Scope>,
    pub daemons: usize,
    pub soaks: usize,
}

fn builder() -> redb::Builder {
    let mut builder = redb::Builder::new();
    builder
        .set_concurrency_mode(ConcurrencyMode::MultiWriter)
        .set_cache_size(CACHE_BYTES);
    builder
}

/// Runs `f`, turning a panic inside redb into [`LogError::Damaged`].
pub(crate) fn guarded<T>(
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

fn unreadable<E: Into<redb::Error>>(path: &Path) -> impl Fn(E) -> LogError + '_ {
    move |e| LogError::Unreadable {
        path: path.to_owned(),
        source: Box::new(e.into()),
    }
}

fn damaged(path: &Path, detail: impl Into<String>) -> LogError {
    LogError::Damaged {
        path: path.to_owned(),
        detail: detail.into(),
    }
}

/// Opens with `open`, retrying while another process holds the file in a way that excludes us.
fn open_patiently<T>(
    path: &Path,
    mut open: impl FnMut() -> Result<T, DatabaseError>,
) -> Result<T, LogError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        match open() {
            Ok(db) => return Ok(db),
            Err(DatabaseError::DatabaseAlreadyOpen) if started.elapsed() < OPEN_PATIENCE => {
                sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Err(DatabaseError::DatabaseAlreadyOpen) => {
                return Err(LogError::Busy {
                    path: path.to_owned(),
                    waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                });
            }
            Err(e) => return Err(unreadable(path)(e)),
        }
    }
}

/// Creates the log's directory (0700) and the file (0600) if they do not exist.
fn create_file(path: &Path) -> Result<(), LogError> {
    if let Some(parent) = path.parent() {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|source| LogError::StateDir {
                path: parent.to_owned(),
                source,
            })?;
    }
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(LogError::StateDir {
            path: path.to_owned(),
            source,
        }),
    }
}

/// The version and scope recorded in a log, `None` for a file that was never initialised.
fn read_meta(path: &Path, txn: &ReadTransaction) -> Result<Option<(u32, Scope)>, LogError> {
    match open_read_table(path, txn, tables::META)? {
        Some(meta) => meta_of(path, &meta),
        None => Ok(None),
    }
}

/// The version and scope in a `meta` table, read or write.
fn meta_of(
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

/// Opens a table for reading; `None` when it was never created.
fn open_read_table<K: redb::Key + 'static, V: redb::Value + 'static>(
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

/// A log opened for appending. Keep it open for as long as the process appends: opening costs a
/// read of the metadata, appending costs one durable commit.
pub struct EventLog {
    db: Database,
    path: PathBuf,
    scope: Scope,
    clock: Box<dyn Clock>,
}

impl EventLog {
    /// Opens (creating, repairing or migrating as needed) the log at `path` for `scope`, and
    /// refuses a log that belongs to another scope.
    pub fn open(path: &Path, scope: Scope) -> Result<Self, LogError> {
        Self::open_with_clock(path, scope, Box::new(SystemClock))
    }

    pub fn open_with_clock(
        path: &Path,
        scope: Scope,
        clock: Box<dyn Clock>,
    ) -> Result<Self, LogError> {
        create_file(path)?;
        let db = guarded(path, || open_patiently(path, || builder().create(path)))?;
        guarded(path, || prepare(&db, path, &scope))?;
        Ok(Self {
            db,
            path: path.to_owned(),
            scope,
            clock,
        })
    }

    /// Appends one event; durable when it returns.
    pub fn append(&self, subject: Subject, event: Event) -> Result<Appended, LogError> {
        let appended = self.append_all([(subject, event)])?;
        appended
            .into_iter()
            .next()
            .ok_or_else(|| damaged(&self.path, "an append returned nothing"))
    }

    /// Appends events in one transaction: all of them or none, with one durable commit.
    pub fn append_all(
        &self,
        events: impl IntoIterator<Item = (Subject, Event)>,
    ) -> Result<Vec<Appended>, LogError> {
        guarded(&self.path, || self.append_in_transaction(events))
    }

    fn append_in_transaction(
        &self,
        events: impl IntoIterator<Item = (Subject, Event)>,
    ) -> Result<Vec<Appended>, LogError> {
        let path = self.path.as_path();
        let txn = self.db.begin_write().map_err(unreadable(path))?;
        let mut appended = Vec::new();
        {
            let mut records = txn.open_table(tables::EVENTS).map_err(unreadable(path))?;
            let mut index = txn
                .open_table(tables::SUBJECT_INDEX)
                .map_err(unreadable(path))?;
            let mut daemons = txn.open_table(Daemons::TABLE).map_err(unreadable(path))?;
            let mut soaks = txn.open_table(Soaks::TABLE).map_err(unreadable(path))?;
            let mut meta = txn.open_table(tables::META).map_err(unreadable(path))?;

            let (mut seq, mut head) = match records.last().map_err(unreadable(path))? {
                Some((key, stored)) => (
                    key.value(),
                    chain::stored_hash(stored.value())
                        .ok_or_else(|| damaged(path, "its last record is truncated"))?,
                ),
                None => (0, chain::GENESIS),
            };
            for (subject, event) in events {
                seq += 1;
                let envelope = Envelope {
                    seq,
                    recorded_at_us: self.clock.now_us(),
                    scope: self.scope.clone(),
                    subject,
                    event,
                };
                let body = encode_for(path, &envelope)?;
                let (stored, hash) = chain::seal(&head, &body);
                records
                    .insert(seq, stored.as_slice())
                    .map_err(unreadable(path))?;
                index
                    .insert((envelope.subject.key().as_str(), seq), ())
                    .map_err(unreadable(path))?;
                apply_projection::<Daemons>(path, &mut daemons, &envelope)?;
                apply_projection::<Soaks>(path, &mut soaks, &envelope)?;
                head = hash;
                appended.push(Appended {
                    seq,
                    hash,
                    recorded_at_us: envelope.recorded_at_us,
                });
            }
            meta.insert(tables::HEAD_KEY, encode_for(path, &(seq, head))?.as_slice())
                .map_err(unreadable(path))?;
        }
        txn.commit().map_err(unreadable(path))?;
        Ok(appended)
    }

    /// A consistent view of everything committed so far.
    pub fn snapshot(&self) -> Result<Snapshot, LogError> {
        let txn = guarded(&self.path, || {
            self.db.begin_read().map_err(unreadable(&self.path))
        })?;
        Ok(Snapshot {
            txn,
            path: self.path.clone(),
        })
    }
}

/// Initialises a new log or migrates an old one, and checks its scope.
fn prepare(db: &Database, path: &Path, scope: &Scope) -> Result<(), LogError> {
    let check_scope = |found: &Scope| {
        if found == scope {
            Ok(())
        } else {
            Err(LogError::ForeignScope {
                path: path.to_owned(),
                found: found.clone(),
                expected: scope.clone(),
            })
        }
    };
    let newer = |found| LogError::NewerSchema {
        path: path.to_owned(),
        found,
        supported: SCHEMA_VERSION,
    };

    // The common case, a current log, needs no write transaction.
    let txn = db.begin_read().map_err(unreadable(path))?;
    match read_meta(path, &txn)? {
        Some((version, found)) if version == SCHEMA_VERSION => return check_scope(&found),
        Some((version, _)) if version > SCHEMA_VERSION => return Err(newer(version)),
        _ => {}
    }
    drop(txn);

    // Another process may initialise or migrate meanwhile: decide again under the write lock.
    let txn = db.begin_write().map_err(unreadable(path))?;
    let recorded = {
        let meta = txn.open_table(tables::META).map_err(unreadable(path))?;
        meta_of(path, &meta)?
    };
    match recorded {
        None => {
            let events = txn.open_table(tables::EVENTS).map_err(unreadable(path))?;
            if !events.is_empty().map_err(unreadable(path))? {
                return Err(damaged(path, "it holds events but no schema version"));
            }
            drop(events);
            create_tables(path, &txn)?;
            write_meta(path, &txn, SCHEMA_VERSION, scope)?;
        }
        Some((version, _)) if version > SCHEMA_VERSION => return Err(newer(version)),
        Some((version, found)) => {
            check_scope(&found)?;
            if version < SCHEMA_VERSION {
                migrate::run(&txn, version, SCHEMA_VERSION, migrate::STEPS).map_err(|source| {
                    LogError::Migration {
                        path: path.to_owned(),
                        source,
                    }
                })?;
                create_tables(path, &txn)?;
                write_meta(path, &txn, SCHEMA_VERSION, &found)?;
            }
        }
    }
    txn.commit().map_err(unreadable(path))
}

fn create_tables(path: &Path, txn: &WriteTransaction) -> Result<(), LogError> {
    txn.open_table(tables::EVENTS).map_err(unreadable(path))?;
    txn.open_table(tables::SUBJECT_INDEX)
        .map_err(unreadable(path))?;
    txn.open_table(tables::DAEMONS).map_err(unreadable(path))?;
    txn.open_table(tables::SOAKS).map_err(unreadable(path))?;
    Ok(())
}

fn write_meta(
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

fn encode_for<T: serde::Serialize>(path: &Path, value: &T) -> Result<Vec<u8>, LogError> {
    codec::encode(value).map_err(|source| LogError::Encode {
        path: path.to_owned(),
        source,
    })
}

fn apply_projection<P: Projection>(
    path: &Path,
    table: &mut redb::Table<&str, &[u8]>,
    envelope: &Envelope,
) -> Result<(), LogError> {
    let Some(key) = P::key(&envelope.subject) else {
        return Ok(());
    };
    let current: Option<P::Row> = match table.get(key).map_err(unreadable(path))? {
        Some(stored) => Some(
            codec::decode(stored.value())
                .map_err(|e| damaged(path, format!("projection row `{key}`: {e}")))?,
        ),
        None => None,
    };
    match P::apply(current.as_ref(), envelope) {
        Update::Keep => {}
        Update::Put(row) => {
            let bytes = encode_for(path, &row)?;
            table
                .insert(key, bytes.as_slice())
                .map_err(unreadable(path))?;
        }
        Update::Delete => {
            table.remove(key).map_err(unreadable(path))?;
        }
    }
    Ok(())
}

/// A log opened read-only. It never blocks a writer and sees each writer's commits in new
/// snapshots.
pub struct LogReader {
    db: ReadOnlyDatabase,
    path: PathBuf,
}

impl LogReader {
    /// Opens the log at `path`; `Ok(None)` when there is none. A log left unclean by a writer
    /// that crashed is repaired first by a writable open, as redb's read-only open refuses it.
    pub fn open(path: &Path) -> Result<Option<Self>, LogError> {
        match std::fs::metadata(path) {
            // A writer creates the file (0600) before redb initialises it: for that instant the
            // log exists but holds nothing, which is no log yet, not a damaged one.
            Ok(meta) if meta.len() == 0 => return Ok(None),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(LogError::Unreadable {
                    path: path.to_owned(),
                    source: Box::new(redb::Error::Io(source)),
                });
            }
        }
        guarded(path, || {
            // redb refuses a read-only open of a file a writer left unclean until a writable
            // open repairs it. Under concurrent writers the same refusal also shows up for an
            // instant while a peer opens or closes (seen in the multi-process stress test), so
            // each refusal is answered by a writable open, which repairs a crashed writer's
            // leftovers and is harmless beside live writers, and the read is tried again.
            let started = Instant::now();
            let mut pause = Duration::from_millis(1);
            loop {
                match open_patiently(path, || builder().open_read_only(path)) {
                    Err(LogError::Unreadable { source, .. })
                        if matches!(*source, redb::Error::RepairAborted)
                            && started.elapsed() < OPEN_PATIENCE =>
                    {
                        drop(open_patiently(path, || builder().open(path))?);
                        sleep(pause);
                        pause = (pause * 2).min(Duration::from_millis(50));
                    }
                    Err(e) => return Err(e),
                    Ok(db) => return Self::checked(db, path),
                }
            }
        })
    }

    fn checked(db: ReadOnlyDatabase, path: &Path) -> Result<Option<Self>, LogError> {
        let txn = db.begin_read().map_err(unreadable(path))?;
        match read_meta(path, &txn)? {
            Some((version, _)) if version > SCHEMA_VERSION => Err(LogError::NewerSchema {
                path: path.to_owned(),
                found: version,
                supported: SCHEMA_VERSION,
            }),
            Some((version, scope)) if version < SCHEMA_VERSION => {
                // A read-only handle cannot migrate: do it through a writable open of the log's
                // own scope, then read the migrated log.
                drop(txn);
                drop(db);
                drop(EventLog::open(path, scope)?);
                let db = open_patiently(path, || builder().open_read_only(path))?;
                Ok(Some(Self {
                    db,
                    path: path.to_owned(),
                }))
            }
            _ => {
                drop(txn);
                Ok(Some(Self {
                    db,
                    path: path.to_owned(),
                }))
            }
        }
    }

    pub fn snapshot(&self) -> Result<Snapshot, LogError> {
        let txn = guarded(&self.path, || {
            self.db.begin_read().map_err(unreadable(&self.path))
        })?;
        Ok(Snapshot {
            txn,
            path: self.path.clone(),
        })
    }
}

/// One consistent read of the log.
pub struct Snapshot {
    txn: ReadTransaction,
    path: PathBuf,
}

impl Snapshot {
    /// The recorded schema version and scope; `None` for a log never written.
    pub fn meta(&self) -> Result<Option<(u32, Scope)>, LogError> {
        guarded(&self.path, || read_meta(&self.path, &self.txn))
    }

    /// The sequence and hash of the last record: `(0, GENESIS)` for an empty log.
    pub fn head(&self) -> Result<(u64, Hash), LogError> {
        let path = self.path.as_path();
        guarded(path, || {
            let Some(events) = open_read_table(path, &self.txn, tables::EVENTS)? else {
                return Ok((0, chain::GENESIS));
            };
            match events.last().map_err(unreadable(path))? {
                Some((key, stored)) => Ok((
                    key.value(),
                    chain::stored_hash(stored.value())
                        .ok_or_else(|| damaged(path, "its last record is truncated"))?,
                )),
                None => Ok((0, chain::GENESIS)),
            }
        })
    }

    /// The head the log recorded with its last append: `(0, GENESIS)` before the first.
    fn recorded_head(&self) -> Result<(u64, Hash), LogError> {
        let path = self.path.as_path();
        guarded(path, || {
            let Some(meta) = open_read_table(path, &self.txn, tables::META)? else {
                return Ok((0, chain::GENESIS));
            };
            match meta.get(tables::HEAD_KEY).map_err(unreadable(path))? {
                Some(stored) => codec::decode(stored.value())
                    .map_err(|e| damaged(path, format!("its recorded head: {e}"))),
                None => Ok((0, chain::GENESIS)),
            }
        })
    }

    /// The record at `seq`, decoded after checking its own hash.
    pub fn get(&self, seq: u64) -> Result<Option<Record>, LogError> {
        let path = self.path.as_path();
        guarded(path, || {
            let Some(events) = open_read_table(path, &self.txn, tables::EVENTS)? else {
                return Ok(None);
            };
            let Some(stored) = events.get(seq).map_err(unreadable(path))? else {
                return Ok(None);
            };
            decode_record(path, seq, stored.value()).map(Some)
        })
    }

    /// The last record, if any.
    pub fn last(&self) -> Result<Option<Record>, LogError> {
        match self.head()? {
            (0, _) => Ok(None),
            (seq, _) => self.get(seq),
        }
    }

    /// Calls `visit` with every record from `from` on, in order, each checked against its own
    /// hash. `visit` returns `false` to stop.
    pub fn scan(
        &self,
        from: u64,
        mut visit: impl FnMut(Record) -> Result<bool, LogError>,
    ) -> Result<(), LogError> {
        let path = self.path.as_path();
        guarded(path, || {
            let Some(events) = open_read_table(path, &self.txn, tables::EVENTS)? else {
                return Ok(());
            };
            for entry in events.range(from..).map_err(unreadable(path))? {
                let (key, stored) = entry.map_err(unreadable(path))?;
                if !visit(decode_record(path, key.value(), stored.value())?)? {
                    break;
                }
            }
            Ok(())
        })
    }

    /// The sequences of `subject`, from `from` on, by the subject index.
    pub fn subject_seqs(&self, subject: &Subject, from: u64) -> Result<Vec<u64>, LogError> {
        let path = self.path.as_path();
        let key = subject.key();
        guarded(path, || {
            let Some(index) = open_read_table(path, &self.txn, tables::SUBJECT_INDEX)? else {
                return Ok(Vec::new());
            };
            let range = index
                .range((key.as_str(), from)..=(key.as_str(), u64::MAX))
                .map_err(unreadable(path))?;
            range
                .map(|entry| entry.map(|(k, _)| k.value().1).map_err(unreadable(path)))
                .collect()
        })
    }

    /// Every daemon currently recorded as running, by name.
    pub fn daemons(&self) -> Result<Vec<DaemonRecord>, LogError> {
        self.projection_rows::<Daemons>()
            .map(|rows| rows.into_iter().map(|(_, r)| r).collect())
    }

    /// Every soak, by id.
    pub fn soaks(&self) -> Result<Vec<SoakSummary>, LogError> {
        self.projection_rows::<Soaks>()
            .map(|rows| rows.into_iter().map(|(_, r)| r).collect())
    }

    fn projection_rows<P: Projection>(&self) -> Result<Vec<(String, P::Row)>, LogError> {
        let path = self.path.as_path();
        guarded(path, || {
            let Some(table) = open_read_table(path, &self.txn, P::TABLE)? else {
                return Ok(Vec::new());
            };
            let mut rows = Vec::new();
            for entry in table.iter().map_err(unreadable(path))? {
                let (key, value) = entry.map_err(unreadable(path))?;
                let row = codec::decode(value.value())
                    .map_err(|e| damaged(path, format!("projection row `{}`: {e}", key.value())))?;
                rows.push((key.value().to_owned(), row));
            }
            Ok(rows)
        })
    }

    /// Replays the whole log in order: every record is checked against the chain (continuity,
    /// link, hash, sequence) and decoded, then handed to `visit`. Returns the walker, positioned
    /// after the last record, for the caller to check against the recorded head.
    pub fn replay(&self, mut visit: impl FnMut(Envelope)) -> Result<ChainWalker, LogError> {
        let path = self.path.as_path();
        let mut walker = ChainWalker::default();
        guarded(path, || {
            let Some(events) = open_read_table(path, &self.txn, tables::EVENTS)? else {
                return Ok(());
            };
            for entry in events.iter().map_err(unreadable(path))? {
                let (key, stored) = entry.map_err(unreadable(path))?;
                let envelope = walker
                    .step(key.value(), stored.value())
                    .map_err(|chain_break| LogError::Chain {
                        path: path.to_owned(),
                        chain_break,
                    })?;
                visit(envelope);
            }
            Ok(())
        })?;
        Ok(walker)
    }

    /// Walks the whole chain, then rebuilds the subject index and every projection from the
    /// events and compares them with the materialised tables.
    pub fn verify(&self) -> Result<VerifyReport, LogError> {
        let path = self.path.as_path();
        let meta = self.meta()?;
        let mut index = Vec::new();
        let mut daemons = Rebuild::<Daemons>::default();
        let mut soaks = Rebuild::<Soaks>::default();
        let mut foreign = None;
        let walker = self.replay(|envelope| {
            if let Some((_, scope)) = &meta
                && envelope.scope != *scope
                && foreign.is_none()
            {
                foreign = Some(format!(
                    "sequence {} was recorded for {}, not for the log's {scope}",
                    envelope.seq, envelope.scope
                ));
            }
            index.push((envelope.subject.key(), envelope.seq));
            daemons.apply(&envelope);
            soaks.apply(&envelope);
        })?;
        if let Some(detail) = foreign {
            return Err(damaged(path, detail));
        }
        if walker.is_empty() && meta.is_none() {
            return Ok(VerifyReport {
                events: 0,
                head: chain::GENESIS,
                schema_version: SCHEMA_VERSION,
                scope: None,
                daemons: 0,
                soaks: 0,
            });
        }
        let Some((schema_version, scope)) = meta else {
            return Err(damaged(path, "it holds events but no metadata"));
        };
        let (events, head) = walker
            .finish(self.recorded_head()?)
            .map_err(|chain_break| LogError::Chain {
                path: path.to_owned(),
                chain_break,
            })?;

        let stored_index: Vec<(String, u64)> = guarded(path, || {
            let Some(table) = open_read_table(path, &self.txn, tables::SUBJECT_INDEX)? else {
                return Ok(Vec::new());
            };
            table
                .iter()
                .map_err(unreadable(path))?
                .map(|entry| {
                    entry
                        .map(|(k, _)| {
                            let (subject, seq) = k.value();
                            (subject.to_owned(), seq)
                        })
                        .map_err(unreadable(path))
                })
                .collect()
        })?;
        index.sort();
        if let Some(first) = first_difference(&index, &stored_index) {
            return Err(LogError::Inconsistent {
                path: path.to_owned(),
                detail: format!("the subject index disagrees with the events at entry {first}"),
            });
        }
        let daemon_count = daemons.compare(path, self.projection_rows::<Daemons>()?)?;
        let soak_count = soaks.compare(path, self.projection_rows::<Soaks>()?)?;
        Ok(VerifyReport {
            events,
            head,
            schema_version,
            scope: Some(scope),
            daemons: daemon_count,
            soaks: soak_count,
        })
    }
}

fn decode_record(path: &Path, seq: u64, stored: &[u8]) -> Result<Record, LogError> {
    let fault = |fault| LogError::Chain {
        path: path.to_owned(),
        chain_break: ChainBreak { seq, fault },
    };
    let raw = chain::split(stored).ok_or_else(|| fault(chain::ChainFault::Truncated))?;
    if chain::hash_of(&raw.prev_hash, raw.body) != raw.hash {
        return Err(fault(chain::ChainFault::HashMismatch));
    }
    let envelope: Envelope = codec::decode(raw.body)
        .map_err(|e| fault(chain::ChainFault::Undecodable(e.to_string())))?;
    Ok(Record {
        envelope,
        prev_hash: raw.prev_hash,
        hash: raw.hash,
    })
}

/// Where two sorted lists first differ, described for a person.
fn first_difference(rebuilt: &[(String, u64)], stored: &[(String, u64)]) -> Option<String> {
    let describe = |entry: Option<&(String, u64)>| match entry {
        Some((subject, seq)) => format!("`{subject}` sequence {seq}"),
        None => "the end".to_owned(),
    };
    let at = (0..rebuilt.len().max(stored.len())).find(|&i| rebuilt.get(i) != stored.get(i))?;
    Some(format!(
        "{} (events say {}, index says {})",
        at,
        describe(rebuilt.get(at)),
        describe(stored.get(at))
    ))
}

/// A projection folded in memory, for comparison with its table.
struct Rebuild<P: Projection> {
    rows: std::collections::BTreeMap<String, P::Row>,
}

impl<P: Projection> Default for Rebuild<P> {
    fn default() -> Self {
        Self {
            rows: Default::default(),
        }
    }
}

impl<P: Projection> Rebuild<P> {
    fn apply(&mut self, envelope: &Envelope) {
        let Some(key) = P::key(&envelope.subject) else {
            return;
        };
        match P::apply(self.rows.get(key), envelope) {
            Update::Keep => {}
            Update::Put(row) => {
                self.rows.insert(key.to_owned(), row);
            }
            Update::Delete => {
                self.rows.remove(key);
            }
        }
    }

    fn compare(self, path: &Path, stored: Vec<(String, P::Row)>) -> Result<usize, LogError> {
        let table = P::TABLE.name();
        let count = self.rows.len();
        let mut rebuilt = self.rows.into_iter();
        let mut stored = stored.into_iter();
        loop {
            match (rebuilt.next(), stored.next()) {
                (None, None) => return Ok(count),
                (Some(a), Some(b)) if a == b => {}
                (a, b) => {
                    let key = a
                        .as_ref()
                        .or(b.as_ref())
                        .map(|(k, _)| k.clone())
                        .unwrap_or_default();
                    return Err(LogError::Inconsistent {
                        path: path.to_owned(),
                        detail: format!(
                            "the `{table}` projection disagrees with the events at `{key}`"
                        ),
                    });
                }
            }
        }
    }
}
