//! Opening a log: creating, repairing, initialising and migrating it, and checking its scope.
//!
//! Several processes share one log: a soak supervisor appends for days while `mps stop` or
//! `history` run beside it. Every handle opens the file in redb's `MultiWriter` mode; writers
//! serialise on redb's write lock, readers see a snapshot and never block a writer.

use std::fs::{DirBuilder, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redb::{
    ConcurrencyMode, Database, DatabaseError, ReadOnlyDatabase, ReadTransaction, ReadableDatabase,
    ReadableTable, ReadableTableMetadata, WriteTransaction,
};

use super::error::LogError;
use super::io::{damaged, encode_for, guarded, open_read_table, unreadable};
use super::migrate::{self, SCHEMA_VERSION};
use super::read::Snapshot;
use super::tables;
use super::view::Views;
use super::{codec, migrate::MigrationError};
use crate::event::Scope;
use crate::time::{Clock, SystemClock};

/// redb's page cache. The default (1 GiB) is far more than a log needs, and a supervisor that
/// appends for days would grow into it; appends touch only the right edge of each tree.
const CACHE_BYTES: usize = 1024 * 1024;

/// How long an open waits for a process that holds the file in a conflicting way.
const OPEN_PATIENCE: Duration = Duration::from_secs(10);

/// How long [`EventLog::open_alone`] waits for the other processes to close the log: long
/// enough for a command such as `history` to end, short of keeping a person waiting on a soak,
/// which holds it for days.
const ALONE_PATIENCE: Duration = Duration::from_secs(2);

fn builder() -> redb::Builder {
    builder_in(ConcurrencyMode::MultiWriter)
}

fn builder_in(mode: ConcurrencyMode) -> redb::Builder {
    let mut builder = redb::Builder::new();
    builder
        .set_concurrency_mode(mode)
        .set_cache_size(CACHE_BYTES);
    builder
}

/// Opens with `open`, retrying while another process holds the file in a way that excludes us.
fn open_patiently<T>(
    path: &Path,
    open: impl FnMut() -> Result<T, DatabaseError>,
) -> Result<T, LogError> {
    open_within(path, OPEN_PATIENCE, open)
}

/// [`open_patiently`], waiting at most `patience`.
fn open_within<T>(
    path: &Path,
    patience: Duration,
    mut open: impl FnMut() -> Result<T, DatabaseError>,
) -> Result<T, LogError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        match open() {
            Ok(db) => return Ok(db),
            Err(DatabaseError::DatabaseAlreadyOpen) if started.elapsed() < patience => {
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

/// Makes sure a whole, initialised log exists at `path`, in a directory of its own (0700).
///
/// redb writes a new file's header last, so a creator killed half-way would leave a file no
/// open accepts, and every later command would refuse the log. A new log is therefore built
/// under a temporary name beside it (0600), initialised and committed there, and only then
/// linked into place, which fails rather than replaces if another process got there first: at
/// `path` there is either nothing or a complete log. Temporary files of creators that died are
/// removed on the way.
fn create_whole(path: &Path, scope: &Scope, views: Views) -> Result<(), LogError> {
    let failed_at = |at: &Path| {
        let at = at.to_owned();
        move |source: std::io::Error| {
            let path = at.clone();
            if super::error::is_no_space(&source) {
                LogError::NoSpace { path, source }
            } else {
                LogError::StateDir { path, source }
            }
        }
    };
    let state_dir = failed_at(path);
    let parent = path.parent().unwrap_or(Path::new("."));
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent)
        .map_err(failed_at(parent))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let prefix = format!(".{name}.");
    // Also when the log exists: a creator killed after linking it, before removing its
    // temporary name, leaves that name behind.
    remove_dead_creators(parent, &prefix);
    match std::fs::symlink_metadata(path) {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(state_dir(e)),
    }
    let temp = parent.join(format!("{prefix}{}{CREATING}", std::process::id()));
    // A leftover of an earlier process with this pid (the pid was reused): no one builds it now.
    let _ = std::fs::remove_file(&temp);
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .map_err(&state_dir)?;
    let built = guarded(path, || {
        let db = open_patiently(path, || builder().create(&temp))?;
        prepare(&db, path, scope, views)
    })
    .and_then(|()| match std::fs::hard_link(&temp, path) {
        Ok(()) => sync_dir(parent).map_err(&state_dir),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(state_dir(e)),
    });
    let _ = std::fs::remove_file(&temp);
    built
}

/// Refuses a log another user could have written or replaced: through a directory on its way
/// that is neither `uid`'s nor root's, or that others may write to without the sticky bit, or
/// a log file others may write to.
fn trusted(path: &Path, uid: u32) -> Result<(), LogError> {
    match crate::paths::distrust_path(path, uid) {
        None => Ok(()),
        Some((path, reason)) => Err(LogError::Untrusted { path, reason }),
    }
}

/// The error for an empty file at a log's path. A log is linked into place whole, so an empty file at its path is not a log being created:
/// something else truncated or made it. It is never initialised over (that would discard
/// whatever history it stood for); it is reported as damage.
fn empty_log(path: &Path) -> LogError {
    damaged(
        path,
        "the file is empty; unilab never leaves an empty log, so something else truncated or created it",
    )
}

/// How the temporary file of a log being created ends: `.<log name>.<pid>.creating`.
const CREATING: &str = ".creating";

/// Removes the temporary files of log creators that no longer run (killed half-way).
fn remove_dead_creators(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix)?.strip_suffix(CREATING))
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        // Signal 0 delivers nothing; it only asks whether the process exists.
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            == Err(nix::errno::Errno::ESRCH);
        if gone {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Makes a new directory entry durable.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

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

/// A log opened for appending. Keep it open for as long as the process appends: opening costs a
/// read of the metadata, appending costs one durable commit.
pub struct EventLog {
    /// `None` while an open after an I/O failure has not succeeded yet (see `with_db`).
    db: std::sync::RwLock<Option<Database>>,
    /// An I/O failure (a full disk) left redb refusing every later transaction ("Previous I/O
    /// error occurred") until the database is opened again: the next use opens it again first.
    reopen: std::sync::atomic::AtomicBool,
    /// An append whose commit failed, not known yet to have landed or not.
    pub(super) unsettled: std::sync::Mutex<Option<super::append::Unsettled>>,
    /// The sample this handle stored last: the next of its soak is packed against it.
    pub(super) packed: std::sync::Mutex<Option<super::pack::Stored>>,
    pub(super) path: PathBuf,
    /// The file opened, as `(device, inode)`: each commit checks that `path` still names it.
    pub(super) file: (u64, u64),
    pub(super) scope: Scope,
    pub(super) clock: Box<dyn Clock>,
    pub(super) views: Views,
}

impl EventLog {
    /// Opens (creating, repairing or migrating as needed) the log at `path` for `scope`, keeping
    /// `views` up to date with every append, and refuses a log that belongs to another scope.
    pub fn open(path: &Path, scope: Scope, views: Views) -> Result<Self, LogError> {
        Self::open_with_clock(path, scope, views, Box::new(SystemClock))
    }

    pub fn open_with_clock(
        path: &Path,
        scope: Scope,
        views: Views,
        clock: Box<dyn Clock>,
    ) -> Result<Self, LogError> {
        // Trust is the running user's: whose files could replace the log under them.
        let me = nix::unistd::geteuid().as_raw();
        trusted(path, me)?;
        create_whole(path, &scope, views)?;
        trusted(path, me)?;
        if std::fs::metadata(path).is_ok_and(|meta| meta.len() == 0) {
            return Err(empty_log(path));
        }
        let before = file_at(path);
        let db = guarded(path, || open_patiently(path, || builder().open(path)))?;
        // The same file before and after the open is the file opened.
        let file = match (before, file_at(path)) {
            (Some(before), Some(after)) if before == after => after,
            _ => return Err(replaced(path)),
        };
        guarded(path, || prepare(&db, path, &scope, views))?;
        Ok(Self::assembled(db, path, file, scope, clock, views))
    }

    /// Opens the existing log at `path` for `scope` as the only process that has it open, and
    /// keeps every other out for as long as the handle lives (their opens wait, then report the
    /// log busy): for what must not run beside another process, such as compaction. Refused
    /// with [`LogError::InUse`] when another process keeps it open — a running soak holds it for
    /// its whole run — after waiting [`ALONE_PATIENCE`] for a short command to finish.
    pub fn open_alone(path: &Path, scope: Scope, views: Views) -> Result<Self, LogError> {
        trusted(path, nix::unistd::geteuid().as_raw())?;
        if std::fs::metadata(path).is_ok_and(|meta| meta.len() == 0) {
            return Err(empty_log(path));
        }
        let before = file_at(path);
        let db = guarded(path, || {
            open_within(path, ALONE_PATIENCE, || {
                builder_in(ConcurrencyMode::ExclusiveWriter).open(path)
            })
        })
        .map_err(|e| match e {
            LogError::Busy { path, .. } => LogError::InUse {
                path,
                holders: String::new(),
            },
            other => other,
        })?;
        let file = match (before, file_at(path)) {
            (Some(before), Some(after)) if before == after => after,
            _ => return Err(replaced(path)),
        };
        guarded(path, || prepare(&db, path, &scope, views))?;
        Ok(Self::assembled(
            db,
            path,
            file,
            scope,
            Box::new(SystemClock),
            views,
        ))
    }

    /// Gives the space of removed records back to the file system: redb's compaction, which
    /// moves the pages in use to the file's start and cuts its end. Only for a log opened with
    /// [`open_alone`](Self::open_alone), with no snapshot of it held; whether it moved anything.
    pub fn compact(&self) -> Result<bool, LogError> {
        let path = self.path.as_path();
        let mut db = self
            .db
            .write()
            .map_err(|_| damaged(path, "a thread using it panicked"))?;
        let db = db
            .as_mut()
            .ok_or_else(|| damaged(path, "it could not be opened again"))?;
        guarded(path, || {
            db.compact()
                .map_err(|e| unreadable(path)(redb::Error::from(e)))
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A consistent view of everything committed so far.
    pub fn snapshot(&self) -> Result<Snapshot, LogError> {
        self.with_db(|db| Snapshot::begin(db, &self.path))
    }

    /// A handle on `db`, opened and prepared, as the file `file` at `path`.
    fn assembled(
        db: Database,
        path: &Path,
        file: (u64, u64),
        scope: Scope,
        clock: Box<dyn Clock>,
        views: Views,
    ) -> Self {
        Self {
            db: std::sync::RwLock::new(Some(db)),
            reopen: std::sync::atomic::AtomicBool::new(false),
            unsettled: std::sync::Mutex::new(None),
            packed: std::sync::Mutex::new(None),
            path: path.to_owned(),
            file,
            scope,
            clock,
            views,
        }
    }

    /// The log at `path` (which must exist and be whole), read and written through `backend`:
    /// for tests that make the storage fail.
    #[cfg(test)]
    pub(super) fn on_backend(
        path: &Path,
        scope: Scope,
        views: Views,
        backend: impl redb::StorageBackend,
    ) -> Result<Self, LogError> {
        let db = builder()
            .create_with_backend(backend)
            .map_err(unreadable(path))?;
        guarded(path, || prepare(&db, path, &scope, views))?;
        Ok(Self::assembled(
            db,
            path,
            file_at(path).ok_or_else(|| replaced(path))?,
            scope,
            Box::new(SystemClock),
            views,
        ))
    }

    /// Runs `use_db` on the database, opening it again first after an I/O failure; an I/O
    /// failure of `use_db` (a full disk) marks it to be opened again before its next use.
    pub(super) fn with_db<T>(
        &self,
        use_db: impl FnOnce(&Database) -> Result<T, LogError>,
    ) -> Result<T, LogError> {
        use std::sync::atomic::Ordering;
        let poisoned = || damaged(&self.path, "a thread using it panicked");
        if self.reopen.load(Ordering::Acquire) {
            let mut db = self.db.write().map_err(|_| poisoned())?;
            if self.reopen.load(Ordering::Acquire) {
                // The old handle goes first: it holds the file's locks and the broken state.
                drop(db.take());
                let path = self.path.as_path();
                *db = Some(guarded(path, || {
                    open_patiently(path, || builder().open(path))
                })?);
                self.reopen.store(false, Ordering::Release);
            }
        }
        let db = self.db.read().map_err(|_| poisoned())?;
        let db = db
            .as_ref()
            .ok_or_else(|| damaged(&self.path, "it could not be opened again"))?;
        let result = use_db(db);
        if matches!(
            result,
            Err(LogError::NoSpace { .. } | LogError::Unreadable { .. })
        ) {
            self.reopen.store(true, Ordering::Release);
        }
        result
    }

    /// Refuses to go on writing a file that `path` no longer names (moved, removed or replaced
    /// while this process held it): its appends would go where no later command looks.
    pub(super) fn check_still_at_path(&self) -> Result<(), LogError> {
        match file_at(&self.path) {
            Some(file) if file == self.file => Ok(()),
            _ => Err(replaced(&self.path)),
        }
    }
}

/// A copy of the unclean log at `path`, repaired (a writable open of the copy, never of the
/// log), in the temporary directory; and the scope it was recorded for.
fn repaired_copy(path: &Path) -> Result<(tempfile::TempPath, Scope), LogError> {
    let aside = |source: std::io::Error| LogError::Access {
        path: path.to_owned(),
        source: std::io::Error::new(
            source.kind(),
            format!(
                "it was left unclean by a writer that stopped, and whose it is can be told only from a repaired copy, which could not be made in the temporary directory (set `TMPDIR` to one with room for it, or let a command that writes to your log — `mps start`, `soak run` — repair it in place): {source}"
            ),
        ),
    };
    let copy = tempfile::Builder::new()
        .prefix(".unilab-log-copy-")
        .tempfile()
        .map_err(aside)?
        .into_temp_path();
    std::fs::copy(path, &copy).map_err(aside)?;
    let db = open_patiently(path, || builder().open(&copy))?;
    let txn = db.begin_read().map_err(unreadable(path))?;
    let scope = read_meta(path, &txn)?
        .map(|(_, scope)| scope)
        .ok_or_else(|| damaged(path, "it holds no metadata"))?;
    Ok((copy, scope))
}

/// The `(device, inode)` of what `path` names, if anything.
fn file_at(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn replaced(path: &Path) -> LogError {
    LogError::Replaced {
        path: path.to_owned(),
    }
}

/// Initialises a new log or migrates an old one, and checks its scope.
fn prepare(db: &Database, path: &Path, scope: &Scope, views: Views) -> Result<(), LogError> {
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
            create_tables(path, &txn, views)?;
            write_meta(path, &txn, SCHEMA_VERSION, scope)?;
        }
        Some((version, _)) if version > SCHEMA_VERSION => return Err(newer(version)),
        Some((version, found)) => {
            check_scope(&found)?;
            if version < SCHEMA_VERSION {
                migrate::run(&txn, version, SCHEMA_VERSION, migrate::STEPS).map_err(
                    |source: MigrationError| LogError::Migration {
                        path: path.to_owned(),
                        source,
                    },
                )?;
                create_tables(path, &txn, views)?;
                write_meta(path, &txn, SCHEMA_VERSION, &found)?;
            }
        }
    }
    txn.commit().map_err(unreadable(path))
}

fn create_tables(path: &Path, txn: &WriteTransaction, views: Views) -> Result<(), LogError> {
    txn.open_table(tables::EVENTS).map_err(unreadable(path))?;
    txn.open_table(tables::SUBJECT_INDEX)
        .map_err(unreadable(path))?;
    for view in views {
        txn.open_table(view.table()).map_err(unreadable(path))?;
    }
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

/// Whether opening a log for reading may write to it — repair what a crashed writer left, or
/// migrate an older schema: only a log of the caller's own scope (`IfOwn`), never another's
/// (another host's under a shared root, or a copy brought in for forensics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writes<'a> {
    IfOwn(&'a Scope),
    Never,
}

impl Writes<'_> {
    fn allowed_for(self, scope: &Scope) -> bool {
        matches!(self, Writes::IfOwn(own) if own == scope)
    }
}

/// How long a read-only open refused as unclean is tried again before the refusal is taken for
/// a crashed writer's leftovers: the refusal a peer's open or close causes lasts an instant.
const REFUSAL_PASSES: Duration = Duration::from_millis(200);

/// A log opened read-only. It never blocks a writer and sees each writer's commits in new
/// snapshots.
pub struct LogReader {
    db: ReadOnlyDatabase,
    path: PathBuf,
    scope: Scope,
    /// The read that checked the log on opening, handed out as the first snapshot: a command
    /// that reads once does so in one transaction.
    first: std::sync::Mutex<Option<Snapshot>>,
    /// A repaired copy read instead of a log that is not the caller's and was left unclean (it
    /// is removed when the reader is dropped).
    _copy: Option<tempfile::TempPath>,
}

impl LogReader {
    /// Opens the log at `path` for the caller of scope `own`; `Ok(None)` when there is none.
    /// A log of `own` left unclean by a writer that crashed is repaired first by a writable open,
    /// as redb's read-only open refuses it, and an older one migrated. A log of another scope
    /// is never written: an unclean one is read from a repaired copy.
    pub fn open(path: &Path, own: &Scope) -> Result<Option<Self>, LogError> {
        Self::open_as(path, Writes::IfOwn(own))
    }

    /// Opens another host's log (under a state root shared between hosts) strictly read-only:
    /// nothing is repaired or migrated from here — one writer host a file. A log its own host
    /// left unclean cannot be read until that host opens it.
    pub(crate) fn open_other_hosts(path: &Path) -> Result<Option<Self>, LogError> {
        Self::open_as(path, Writes::Never)
    }

    /// The scope the log was recorded for.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    fn open_as(path: &Path, writes: Writes<'_>) -> Result<Option<Self>, LogError> {
        match std::fs::metadata(path) {
            Ok(meta) if meta.len() == 0 => return Err(empty_log(path)),
            Ok(_) => trusted(path, nix::unistd::geteuid().as_raw())?,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(unreadable(path)(redb::Error::Io(source))),
        }
        guarded(path, || {
            // redb refuses a read-only open of a file a writer left unclean until a writable
            // open repairs it. Under concurrent writers the same refusal also shows up for an
            // instant while a peer opens or closes (seen in the multi-process stress test): it
            // is tried again for a moment. One that lasts is a crashed writer's: the log is
            // repaired by a writable open if it is the caller's own — decided on a repaired
            // copy, as its scope cannot be read before — and read from that copy if not.
            let started = Instant::now();
            let mut pause = Duration::from_millis(1);
            let mut own = false;
            loop {
                match open_patiently(path, || builder().open_read_only(path)) {
                    Err(LogError::Unreadable { source, .. })
                        if matches!(*source, redb::Error::RepairAborted)
                            && writes != Writes::Never
                            && started.elapsed() < OPEN_PATIENCE =>
                    {
                        if !own && started.elapsed() >= REFUSAL_PASSES {
                            let (copy, scope) = repaired_copy(path)?;
                            if !writes.allowed_for(&scope) {
                                let db = open_patiently(path, || builder().open_read_only(&copy))?;
                                let reader = Self::checked(db, path, Writes::Never)?;
                                return Ok(reader.map(|reader| Self {
                                    _copy: Some(copy),
                                    ..reader
                                }));
                            }
                            own = true;
                        }
                        if own {
                            drop(open_patiently(path, || builder().open(path))?);
                        }
                        sleep(pause);
                        pause = (pause * 2).min(Duration::from_millis(50));
                    }
                    Err(e) => return Err(e),
                    Ok(db) => return Self::checked(db, path, writes),
                }
            }
        })
    }

    fn checked(
        db: ReadOnlyDatabase,
        path: &Path,
        writes: Writes<'_>,
    ) -> Result<Option<Self>, LogError> {
        let txn = db.begin_read().map_err(unreadable(path))?;
        let mut first = None;
        let Some((version, scope)) = read_meta(path, &txn)? else {
            return Err(damaged(path, "it holds no metadata"));
        };
        let db = match version {
            version if version > SCHEMA_VERSION => {
                return Err(LogError::NewerSchema {
                    path: path.to_owned(),
                    found: version,
                    supported: SCHEMA_VERSION,
                });
            }
            version if version < SCHEMA_VERSION && writes.allowed_for(&scope) => {
                // A read-only handle cannot migrate: do it through a writable open of the log's
                // own scope (the views' tables come with the next append), then read the migrated log.
                drop(txn);
                drop(db);
                drop(EventLog::open(path, scope.clone(), &[])?);
                open_patiently(path, || builder().open_read_only(path))?
            }
            _ => {
                first = Some(Snapshot {
                    txn,
                    path: path.to_owned(),
                });
                db
            }
        };
        Ok(Some(Self {
            db,
            path: path.to_owned(),
            scope,
            first: std::sync::Mutex::new(first),
            _copy: None,
        }))
    }

    /// A consistent read of the log as it is now (the first one: as it was when opened).
    pub fn snapshot(&self) -> Result<Snapshot, LogError> {
        if let Some(first) = self.first.lock().ok().and_then(|mut first| first.take()) {
            return Ok(first);
        }
        Snapshot::begin(&self.db, &self.path)
    }
}
