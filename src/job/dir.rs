//! The job's directory on the state root: `<root>/jobs/<uid>/<job>/`, shared by every rank of
//! the job on every host that mounts the root.
//!
//! It is held to the state directories' rules ([`crate::paths`]): no directory on the way to
//! the root may be replaceable by another user, `<root>/jobs` must be the user's or root's (and
//! sticky if others may write to it, as a root shared by several users has it), and the user's
//! and the job's levels must be the user's alone: real directories, owned by the user, closed to
//! writes by others. Whatever unilab creates is 0700 whatever the umask.
//!
//! Once checked, the job's directory is held open ([`JobDir`]): its runs ([`super::runs`]) are
//! made, looked for and read relative to the held directory, never through its path again. A
//! path swapped for a link to another directory during the run leads nowhere: the rank goes on
//! with the directories it checked (and the ranks that joined before the swap, with them).

use std::fs::{DirBuilder, File};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

#[cfg(test)]
use super::alarm::ALARM;
use super::held::Held;
use super::{JobError, JobId};
use crate::paths::{Distrust, distrust_directory, distrust_directory_meta, distrust_path};

/// The directory under the state root that holds every user's jobs.
pub(crate) const JOBS: &str = "jobs";

/// A job's directory, made, checked and held open: where its runs are.
#[derive(Debug, Clone)]
pub(crate) struct JobDir {
    /// The directory that was checked, opened without following a link: its runs are reached
    /// relative to it.
    pub(super) held: Held,
}

/// `<root>/jobs/<uid>/<job>`
pub(crate) fn job_dir_path(root: &Path, uid: u32, job: &JobId) -> PathBuf {
    root.join(JOBS).join(uid.to_string()).join(job.as_str())
}

impl JobDir {
    /// Creates the job's directory of user `uid` under `root`, and the levels above it that are
    /// missing, or checks them where they exist: refused when another user owns or can write
    /// to a level, or could replace one. The job's level is held open from then on.
    pub(crate) fn ensure(root: &Path, uid: u32, job: &JobId) -> Result<Self, JobError> {
        // Nothing is made under a way another user could change.
        trusted_way(root, uid)?;
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)
            .map_err(|source| JobError::Directory {
                path: root.to_owned(),
                source,
            })?;
        let jobs = root.join(JOBS);
        create_private(&jobs)?;
        trusted_way(&jobs, uid)?;
        let user = jobs.join(uid.to_string());
        let path = user.join(job.as_str());
        for level in [&user, &path] {
            create_private(level)?;
            if let Some(reason) = distrust_directory(level, uid) {
                return Err(JobError::UnsafeDirectory {
                    path: level.clone(),
                    reason,
                });
            }
        }
        let checked = std::fs::symlink_metadata(&path).map_err(|e| JobError::UnsafeDirectory {
            path: path.clone(),
            reason: Distrust::Uninspectable(e),
        })?;
        let held = hold(&path, uid)?.ok_or_else(|| JobError::UnsafeDirectory {
            path: path.clone(),
            reason: Distrust::Replaced,
        })?;
        let meta = held.metadata().map_err(|e| JobError::UnsafeDirectory {
            path: path.clone(),
            reason: Distrust::Uninspectable(e),
        })?;
        // What is held is what was checked: the path was not swapped in between.
        if (meta.dev(), meta.ino()) != (checked.dev(), checked.ino()) {
            return Err(JobError::UnsafeDirectory {
                path,
                reason: Distrust::Replaced,
            });
        }
        Ok(Self {
            held: Held::new(path, uid, held),
        })
    }

    /// The job's directory of user `uid` under `root` as a reader finds it, held: `None` when
    /// the job never had one. Nothing is created; a link or a directory that is not the
    /// user's alone is refused.
    pub(crate) fn existing(root: &Path, uid: u32, job: &JobId) -> Result<Option<Self>, JobError> {
        let path = job_dir_path(root, uid, job);
        Ok(hold(&path, uid)?.map(|held| Self {
            held: Held::new(path, uid, held),
        }))
    }

    /// Where the job's directory was when it was checked.
    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        self.held.path()
    }
}

/// `path` opened as a directory, a link not followed, and checked as held (`fstat`): the
/// user's own, closed to others. `None` when nothing is there.
fn hold(path: &Path, uid: u32) -> Result<Option<File>, JobError> {
    let refused = |reason| JobError::UnsafeDirectory {
        path: path.to_owned(),
        reason,
    };
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC).bits())
        .open(path);
    let held = match opened {
        Ok(held) => held,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        // A link answers ELOOP or, with O_DIRECTORY, ENOTDIR: which it is, is said.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(nix::libc::ELOOP | nix::libc::ENOTDIR)
            ) =>
        {
            let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
            return Err(refused(if link {
                Distrust::Symlink
            } else {
                Distrust::NotADirectory
            }));
        }
        Err(e) => return Err(refused(Distrust::Uninspectable(e))),
    };
    let meta = held
        .metadata()
        .map_err(|e| refused(Distrust::Uninspectable(e)))?;
    match distrust_directory_meta(&meta, uid) {
        Some(reason) => Err(refused(reason)),
        None => Ok(Some(held)),
    }
}

/// Every existing directory from `/` down to `path` is the user's or root's, and sticky where
/// others may write to it.
fn trusted_way(path: &Path, uid: u32) -> Result<(), JobError> {
    match distrust_path(path, uid) {
        None => Ok(()),
        Some((path, reason)) => Err(JobError::UnsafeDirectory { path, reason }),
    }
}

/// Creates `path` 0700 if it is missing: exactly 0700, whatever the umask took from the mode.
fn create_private(path: &Path) -> Result<(), JobError> {
    let failed = |source| JobError::Directory {
        path: path.to_owned(),
        source,
    };
    match DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(failed)
        }
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(failed(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::files::private_tempdir as private_root;

    fn uid() -> u32 {
        nix::unistd::getuid().as_raw()
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn the_job_directory_is_made_0700_at_every_level_and_found_again() {
        let root = private_root();
        let state = root.path().join("state");
        let job = JobId::parse("4242").unwrap();
        let dir = JobDir::ensure(&state, uid(), &job).unwrap();
        assert_eq!(dir.path(), job_dir_path(&state, uid(), &job));
        assert_eq!(
            dir.path(),
            state.join("jobs").join(uid().to_string()).join("4242")
        );
        for level in [
            state.clone(),
            state.join("jobs"),
            state.join("jobs").join(uid().to_string()),
            dir.path().to_owned(),
        ] {
            assert_eq!(mode(&level), 0o700, "{}", level.display());
        }
        let again = JobDir::ensure(&state, uid(), &job).unwrap();
        assert_eq!(again.path(), dir.path());
        let held = |dir: &JobDir| {
            let meta = dir.held.fd.metadata().unwrap();
            (meta.dev(), meta.ino())
        };
        assert_eq!(held(&again), held(&dir), "the same directory is held");
    }

    /// The job's directory was trusted after the start: checked when the soak began, then
    /// swapped for a link to another directory, the alarm was written and read through the
    /// link. Held open, the run the rank joined is the one it writes its alarm in and looks for
    /// one in; the link's target gets nothing and is never read.
    #[test]
    fn a_job_directory_swapped_for_a_link_after_the_start_is_not_followed() {
        use crate::job::alarm::{Alarm, Raised};
        use crate::job::run::RunId;
        let root = private_root();
        let job = JobId::parse("swap").unwrap();
        let dir = JobDir::ensure(root.path(), uid(), &job).unwrap();
        let id = RunId::parse("1").unwrap();
        let run = dir.made_run(&id).unwrap();
        let path = dir.path().to_owned();
        let moved = root.path().join("moved");
        std::fs::rename(&path, &moved).unwrap();
        let elsewhere = private_root();
        std::os::unix::fs::symlink(elsewhere.path(), &path).unwrap();
        let alarm = |rank: u32, soak_id: &str| {
            Alarm::new(
                &job,
                Some(&id),
                Some(rank),
                "n0",
                soak_id,
                "stale_progress",
                "stalled",
                1_000_000,
            )
        };
        // An alarm put where the link leads is not this run's.
        let planted = alarm(1, "planted");
        let planted_run = elsewhere.path().join("runs").join("1");
        std::fs::create_dir_all(&planted_run).unwrap();
        std::fs::write(
            planted_run.join(ALARM),
            serde_json::to_vec(&planted).unwrap(),
        )
        .unwrap();
        assert_eq!(run.check().unwrap(), None, "the link's target is not read");
        let own = alarm(0, "own");
        assert_eq!(run.raise(&own).unwrap(), Raised::Won);
        assert_eq!(run.check().unwrap(), Some(own.clone()));
        let written = std::fs::read(moved.join("runs").join("1").join(ALARM)).unwrap();
        assert_eq!(serde_json::from_slice::<Alarm>(&written).unwrap(), own);
        let there: Vec<_> = std::fs::read_dir(&planted_run)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(there, [ALARM], "nothing written where the link leads");
        assert_eq!(
            serde_json::from_slice::<Alarm>(&std::fs::read(planted_run.join(ALARM)).unwrap())
                .unwrap(),
            planted
        );
        // A reader (`job show`) opening the job's directory afresh refuses the link.
        let err = JobDir::existing(root.path(), uid(), &job).unwrap_err();
        assert!(
            matches!(
                &err,
                JobError::UnsafeDirectory {
                    reason: Distrust::Symlink,
                    ..
                }
            ),
            "{err:?}"
        );
        // And a rank starting now refuses it, as before.
        let err = JobDir::ensure(root.path(), uid(), &job).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
    }

    /// A reader finds no job directory where none was made, and the one made, held.
    #[test]
    fn a_reader_finds_the_job_directory_or_none_and_creates_nothing() {
        let root = private_root();
        let job = JobId::parse("r").unwrap();
        assert!(
            JobDir::existing(root.path(), uid(), &job)
                .unwrap()
                .is_none()
        );
        assert!(!root.path().join(JOBS).exists());
        let made = JobDir::ensure(root.path(), uid(), &job).unwrap();
        let found = JobDir::existing(root.path(), uid(), &job).unwrap().unwrap();
        assert_eq!(found.path(), made.path());
    }

    #[test]
    fn a_job_directory_others_can_write_to_or_a_link_is_refused() {
        let root = private_root();
        let job = JobId::parse("7").unwrap();
        let dir = JobDir::ensure(root.path(), uid(), &job).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o770)).unwrap();
        let err = JobDir::ensure(root.path(), uid(), &job).unwrap_err();
        assert!(
            matches!(&err, JobError::UnsafeDirectory { path, reason: Distrust::OthersCanWrite { mode: 0o770 } } if path == dir.path()),
            "{err:?}"
        );
        std::fs::remove_dir(dir.path()).unwrap();
        let elsewhere = private_root();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path()).unwrap();
        let err = JobDir::ensure(root.path(), uid(), &job).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        // A `<root>/jobs` anyone may write to, not sticky: another user could swap the levels
        // below it.
        let open = private_root();
        std::fs::create_dir(open.path().join(JOBS)).unwrap();
        std::fs::set_permissions(
            open.path().join(JOBS),
            std::fs::Permissions::from_mode(0o777),
        )
        .unwrap();
        let err = JobDir::ensure(open.path(), uid(), &job).unwrap_err();
        assert!(
            matches!(
                &err,
                JobError::UnsafeDirectory {
                    reason: Distrust::NotSticky { .. },
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            crate::diagnostic::Hint::hint(&err)
                .unwrap()
                .contains("1777")
        );
    }

    /// Another user's directories, told by the owner the check expects rather than by `chown`,
    /// so that this runs as any user.
    #[test]
    fn a_job_directory_of_another_uid_is_refused() {
        let root = private_root();
        let job = JobId::parse("7").unwrap();
        let mine = JobDir::ensure(root.path(), uid(), &job).unwrap();
        // The user's level made by someone else: as if `uid() + 1` owned `jobs/<uid>`.
        let other = uid() + 1;
        let theirs = root.path().join(JOBS).join(other.to_string());
        std::fs::rename(mine.path().parent().unwrap(), &theirs).unwrap();
        let err = JobDir::ensure(root.path(), other, &job).unwrap_err();
        // As root the way (root's own) is trusted and the user's level is refused; as another
        // user the way is already someone else's.
        assert!(
            matches!(
                &err,
                JobError::UnsafeDirectory {
                    reason: Distrust::NotYours { .. } | Distrust::NeitherYoursNorRoot { .. },
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains(&other.to_string()), "{err}");
    }

    /// As root, a real directory of another user (`nobody`) in place of the job's: refused, and
    /// nothing is written into it.
    #[test]
    fn as_root_a_job_directory_chowned_to_another_user_is_refused() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: only root can give a directory to another user");
            return;
        }
        let root = private_root();
        let job = JobId::parse("7").unwrap();
        let dir = JobDir::ensure(root.path(), uid(), &job).unwrap();
        std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).unwrap();
        let err = JobDir::ensure(root.path(), uid(), &job).unwrap_err();
        assert!(
            err.to_string().contains("it belongs to uid 65534, not 0"),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
