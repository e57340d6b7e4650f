//! Locks that make deciding and acting one step: a start holds the locks of its name and its
//! GPU from the check that no daemon serves them, through the launch, to the record; a stop
//! holds those of the daemon it stops from the liveness check to the record. Two starts of one
//! name or one GPU, or two stops of one daemon, run one after the other, and the later one sees
//! what the earlier one recorded.
//!
//! The locks are `flock`s on files in `<root>/<host>/<uid>/mps/locks`: the kernel releases them
//! when their holder exits, however it exits, so a crashed command never leaves one behind.

use crate::time::poll;
use std::fs::{DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};

use super::Mps;
use super::error::MpsError;

/// How long a command waits for another that holds a lock it needs (a start waits at most for
/// its tool timeout and a stop for its grace periods; this leaves room for both).
const PATIENCE: Duration = Duration::from_secs(60);

/// Held locks; dropping them releases them.
#[derive(Debug)]
pub(crate) struct Held {
    _locks: Vec<Flock<File>>,
}

/// Takes the locks of the daemon `name` serving `gpus`: its name's, and each GPU's in the
/// daemon's scope — the Slurm `job` it belongs to, whose daemons are apart from the user's
/// others.
pub(crate) fn daemon<'g>(
    mps: &Mps,
    name: &str,
    job: Option<&str>,
    gpus: impl IntoIterator<Item = &'g str>,
) -> Result<Held, MpsError> {
    let mut keys = vec![name_key(name)];
    keys.extend(gpus.into_iter().map(|uuid| match job {
        Some(job) => format!("gpu-{uuid}-job{job}"),
        None => format!("gpu-{uuid}"),
    }));
    acquire(mps, &keys, PATIENCE)
}

/// The lock of the daemon name `name` alone, if no other command holds it; `None` at once if one
/// does. For a caller that already holds other locks: waiting for one more could deadlock
/// against a command that holds it and waits for one of the caller's.
pub(crate) fn name_if_free(mps: &Mps, name: &str) -> Result<Option<Held>, MpsError> {
    match acquire(mps, &[name_key(name)], Duration::ZERO) {
        Ok(held) => Ok(Some(held)),
        Err(MpsError::Busy { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

fn name_key(name: &str) -> String {
    format!("name-{name}")
}

/// Takes the locks named by `keys` (names and UUIDs as validated elsewhere, so they are safe
/// file names), in one order whoever asks, waiting up to `patience` for each.
fn acquire(mps: &Mps, keys: &[String], patience: Duration) -> Result<Held, MpsError> {
    let dir = mps.paths.user_dir().join("mps").join("locks");
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|source| MpsError::Io {
            path: dir.clone(),
            source,
        })?;
    let mut keys: Vec<&String> = keys.iter().collect();
    keys.sort();
    keys.dedup();
    let mut locks = Vec::with_capacity(keys.len());
    for key in keys {
        locks.push(lock(&dir.join(format!("{key}.lock")), patience)?);
    }
    Ok(Held { _locks: locks })
}

fn lock(path: &Path, patience: Duration) -> Result<Flock<File>, MpsError> {
    let io = |source| MpsError::Io {
        path: path.to_owned(),
        source,
    };
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(io)?;
    // Flock hands the file back when the lock is taken elsewhere: it waits here between tries.
    let mut file = Some(file);
    let taken = poll(patience, Duration::from_millis(20), || {
        match Flock::lock(file.take()?, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Some(Ok(lock)),
            Err((back, nix::errno::Errno::EWOULDBLOCK)) => {
                file = Some(back);
                None
            }
            Err((_, errno)) => Some(Err(io(std::io::Error::from(errno)))),
        }
    });
    taken.unwrap_or_else(|| {
        Err(MpsError::Busy {
            lock: PathBuf::from(path),
            waited: patience,
        })
    })
}
