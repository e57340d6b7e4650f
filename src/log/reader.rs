//! The log's reader: [`LogReader`], a log opened read-only, which never blocks a writer and
//! sees each writer's commits in new snapshots. It writes only to repair or migrate a log of
//! the caller's own scope, through a writable open; another's is read as it is.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redb::{ReadOnlyDatabase, ReadableDatabase};

use super::build;
use super::error::LogError;
use super::handle::EventLog;
use super::io::{damaged, guarded, unreadable};
use super::meta::read_meta;
use super::migrate::SCHEMA_VERSION;
use super::open::{OPEN_PATIENCE, builder, open_patiently, repaired_copy, trusted, unfit_log};
use super::snapshot::Snapshot;
use super::view::Views;
use crate::event::Scope;

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
        Self::open_as(path, Writes::IfOwn(own), &[])
    }

    /// [`open`](Self::open), and a log of `own` that has no table for one of `views` (migrated
    /// by a reader handed none, or older) gets it, built from its events through a writable open
    /// (see `build`): what a command that reads the views opens its own log with.
    pub fn open_keeping(path: &Path, own: &Scope, views: Views) -> Result<Option<Self>, LogError> {
        Self::open_as(path, Writes::IfOwn(own), views)
    }

    /// Opens another host's log (under a state root shared between hosts) strictly read-only:
    /// nothing is repaired or migrated from here — one writer host a file. A log its own host
    /// left unclean cannot be read until that host opens it.
    pub(crate) fn open_other_hosts(path: &Path) -> Result<Option<Self>, LogError> {
        Self::open_as(path, Writes::Never, &[])
    }

    /// The scope the log was recorded for.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    fn open_as(path: &Path, writes: Writes<'_>, views: Views) -> Result<Option<Self>, LogError> {
        match std::fs::metadata(path) {
            Ok(meta) => match unfit_log(path, &meta) {
                Some(unfit) => return Err(unfit),
                None => trusted(path, nix::unistd::geteuid().as_raw())?,
            },
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
                                let reader = Self::checked(db, path, Writes::Never, views)?;
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
                    Ok(db) => return Self::checked(db, path, writes, views),
                }
            }
        })
    }

    fn checked(
        db: ReadOnlyDatabase,
        path: &Path,
        writes: Writes<'_>,
        views: Views,
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
            version
                if writes.allowed_for(&scope)
                    && (version < SCHEMA_VERSION || build::lacks_any(path, &txn, views)?) =>
            {
                // A read-only handle cannot migrate: do it through a writable open of the log's
                // own scope (the tables of views it was not handed come with the next append,
                // or the next open handed them), then read the migrated log.
                drop(txn);
                drop(db);
                drop(EventLog::open(path, scope.clone(), views)?);
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
