//! The job's directory on the state root: `<root>/jobs/<uid>/<job>/`, shared by every rank of
//! the job on every host that mounts the root.
//!
//! It is held to the state directories' rules ([`crate::paths`]): no directory on the way to
//! the root may be replaceable by another user, `<root>/jobs` must be the user's or root's (and
//! sticky if others may write to it, as a root shared by several users has it), and the user's
//! and the job's levels must be the user's alone: real directories, owned by the user, closed to
//! writes by others. Whatever unilab creates is 0700 whatever the umask.

use std::fs::DirBuilder;
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{JobError, JobId};
use crate::paths::{distrust_directory, distrust_path};

/// The alarm's name in the job's directory.
pub(crate) const ALARM: &str = "alarm";

/// The directory under the state root that holds every user's jobs.
pub(crate) const JOBS: &str = "jobs";

/// A job's directory, made and checked: where its alarm is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobDir {
    pub(super) path: PathBuf,
    /// `<path>/alarm`, joined once: looking for it is one `stat` a sample.
    pub(super) alarm: PathBuf,
    pub(super) uid: u32,
}

/// `<root>/jobs/<uid>/<job>`
pub(crate) fn job_dir_path(root: &Path, uid: u32, job: &JobId) -> PathBuf {
    root.join(JOBS).join(uid.to_string()).join(job.as_str())
}

impl JobDir {
    /// Creates the job's directory of user `uid` under `root`, and the levels above it that are
    /// missing, or checks them where they exist: refused when another user owns or can write
    /// to a level, or could replace one.
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
        Ok(Self {
            alarm: path.join(ALARM),
            path,
            uid,
        })
    }

    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.path
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
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::paths::Distrust;
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
        assert_eq!(JobDir::ensure(&state, uid(), &job).unwrap(), dir);
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
