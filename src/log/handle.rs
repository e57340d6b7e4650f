//! The log's handle for writing: [`EventLog`], opened (created, repaired or migrated as needed)
//! for one scope and kept open for as long as the process appends. Besides the database it
//! keeps what one append leaves the next: the sample it stored last (the next of its soak is
//! packed against it) and an append whose commit failed, until the log tells whether it
//! landed. Appending is in `append`, each record through `appender`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use redb::{ConcurrencyMode, Database};

use super::appender::Appended;
use super::chain::Hash;
use super::error::LogError;
use super::io::{damaged, guarded, unreadable};
use super::open::{
    builder, builder_in, create_whole, file_at, open_patiently, open_within, prepare, replaced,
    trusted, unfit_log,
};
use super::pack::Stored;
use super::snapshot::Snapshot;
use super::view::Views;
use crate::event::Scope;
use crate::time::{Clock, SystemClock};

/// How long [`EventLog::open_alone`] waits for the other processes to close the log: long
/// enough for a command such as `history` to end, short of keeping a person waiting on a soak,
/// which holds it for days.
const ALONE_PATIENCE: Duration = Duration::from_secs(2);

/// An append whose commit failed: whether it landed is told by the log, once it can be read
/// (see `EventLog::settle`).
#[derive(Debug, Clone)]
pub(super) struct Unsettled {
    /// The head the append was to leave: its last record's sequence and hash.
    pub(super) head: (u64, Hash),
    pub(super) appended: Vec<Appended>,
}

impl Unsettled {
    /// Whether the append's last record is in the log as it was to be.
    pub(super) fn landed(&self, snapshot: &Snapshot) -> Result<bool, LogError> {
        let (seq, hash) = self.head;
        Ok(snapshot.get(seq)?.is_some_and(|record| record.hash == hash))
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
    pub(super) unsettled: std::sync::Mutex<Option<Unsettled>>,
    /// The sample this handle stored last: the next of its soak is packed against it.
    pub(super) packed: std::sync::Mutex<Option<Stored>>,
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
        if let Some(unfit) = std::fs::metadata(path)
            .ok()
            .and_then(|meta| unfit_log(path, &meta))
        {
            return Err(unfit);
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
        if let Some(unfit) = std::fs::metadata(path)
            .ok()
            .and_then(|meta| unfit_log(path, &meta))
        {
            return Err(unfit);
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

    /// The sample this handle stored last, to pack the next append's samples against.
    pub(super) fn lock_packed(&self) -> std::sync::MutexGuard<'_, Option<Stored>> {
        // As for `unsettled`: a poisoned lock's value is whole (a packer's last sample or none).
        self.packed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The append whose commit failed, if its question is still open.
    pub(super) fn lock_unsettled(&self) -> std::sync::MutexGuard<'_, Option<Unsettled>> {
        // A poisoned lock holds a value as good as any: a panic cannot leave it half-set.
        self.unsettled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
