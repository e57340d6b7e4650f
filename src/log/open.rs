//! Opening a log, what its handle ([`EventLog`](super::EventLog)) and its reader
//! ([`LogReader`](super::LogReader)) share: redb's settings, patience with a process that holds
//! the file, creating a log whole, trusting its path, repairing a copy, and preparing a log —
//! initialising, migrating, and checking its scope.
//!
//! Several processes share one log: a soak supervisor appends for days while `mps stop` or
//! `history` run beside it. Every handle opens the file in redb's `MultiWriter` mode; writers
//! serialise on redb's write lock, readers see a snapshot and never block a writer.

use std::fs::{DirBuilder, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use redb::{
    ConcurrencyMode, Database, DatabaseError, ReadableDatabase, ReadableTableMetadata,
    WriteTransaction,
};

use super::build;
use super::error::LogError;
use super::io::{damaged, guarded, unreadable, what_kind};
use super::meta::{meta_of, read_meta, write_meta};
use super::migrate::{self, MigrationError, SCHEMA_VERSION};
use super::tables;
use super::view::Views;
use crate::event::Scope;

/// redb's page cache. The default (1 GiB) is far more than a log needs, and a supervisor that
/// appends for days would grow into it; appends touch only the right edge of each tree.
const CACHE_BYTES: usize = 1024 * 1024;

/// How long an open waits for a process that holds the file in a conflicting way.
pub(super) const OPEN_PATIENCE: Duration = Duration::from_secs(10);

pub(super) fn builder() -> redb::Builder {
    builder_in(ConcurrencyMode::MultiWriter)
}

pub(super) fn builder_in(mode: ConcurrencyMode) -> redb::Builder {
    let mut builder = redb::Builder::new();
    builder
        .set_concurrency_mode(mode)
        .set_cache_size(CACHE_BYTES);
    builder
}

/// Opens with `open`, retrying while another process holds the file in a way that excludes us.
pub(super) fn open_patiently<T>(
    path: &Path,
    open: impl FnMut() -> Result<T, DatabaseError>,
) -> Result<T, LogError> {
    open_within(path, OPEN_PATIENCE, open)
}

/// [`open_patiently`], waiting at most `patience`.
pub(super) fn open_within<T>(
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
pub(super) fn create_whole(path: &Path, scope: &Scope, views: Views) -> Result<(), LogError> {
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
pub(super) fn trusted(path: &Path, uid: u32) -> Result<(), LogError> {
    match crate::paths::distrust_path(path, uid) {
        None => Ok(()),
        Some((path, reason)) => Err(LogError::Untrusted { path, reason }),
    }
}

/// What is wrong with the file at a log's path, told by its metadata before anything opens it.
/// Something other than a regular file (a named pipe, whose open would wait for a writer; a
/// directory; a device) is named for what it is. An empty file is not a log being created —
/// a log is linked into place whole — but something else truncated or made it. Neither is ever
/// initialised over (that would discard whatever history it stood for).
pub(super) fn unfit_log(path: &Path, meta: &std::fs::Metadata) -> Option<LogError> {
    if !meta.is_file() {
        return Some(LogError::NotAFile {
            path: path.to_owned(),
            what: what_kind(meta.file_type()),
        });
    }
    (meta.len() == 0).then(|| {
        damaged(
            path,
            "the file is empty; unilab never leaves an empty log, so something else truncated or created it",
        )
    })
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

/// A copy of the unclean log at `path`, repaired (a writable open of the copy, never of the
/// log), in the temporary directory; and the scope it was recorded for.
pub(super) fn repaired_copy(path: &Path) -> Result<(tempfile::TempPath, Scope), LogError> {
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
pub(super) fn file_at(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

pub(super) fn replaced(path: &Path) -> LogError {
    LogError::Replaced {
        path: path.to_owned(),
    }
}

/// Initialises a new log or migrates an old one, and checks its scope.
pub(super) fn prepare(
    db: &Database,
    path: &Path,
    scope: &Scope,
    views: Views,
) -> Result<(), LogError> {
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

    // The common case, a current log with a table for every view, needs no write transaction.
    let txn = db.begin_read().map_err(unreadable(path))?;
    match read_meta(path, &txn)? {
        Some((version, found))
            if version == SCHEMA_VERSION && !build::lacks_any(path, &txn, views)? =>
        {
            return check_scope(&found);
        }
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
                write_meta(path, &txn, SCHEMA_VERSION, &found)?;
            }
            // A view the log has no table for (one a step added, or whose rows took a new
            // shape) has its table built from the events, in this transaction.
            build::build_lacking(db, path, &txn, views)?;
            create_tables(path, &txn, views)?;
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
