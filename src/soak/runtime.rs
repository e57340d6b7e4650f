//! A soak's runtime directory: where its short-lived files go (the heartbeat file), on the node
//! itself. unilab's runtime directory is the MPS pipe directories' ([`crate::mps::dirs`]):
//! `$XDG_RUNTIME_DIR/unilab` when that variable names a directory of the user's, else
//! `/tmp/unilab-<uid>`; a soak's is `soaks/<id>/` under it. Every level unilab creates is made
//! 0700, and every level from `/` down is checked as the pipe directories' are: no one else may
//! be able to replace what lies below it. Never the state root: under Slurm that is often a
//! network home directory, where every beat of every rank would be a write to NFS, `O_APPEND`
//! is not atomic and holes are not punched.
//!
//! A directory that cannot be made or trusted is no reason to refuse a soak: the soak runs
//! without what would have gone there, and says why ([`Unusable`]). The directory is removed
//! once the verdict is recorded.

use std::path::{Path, PathBuf};

use crate::mps::dirs::{creation_base, ensure_private, runtime_base};
use crate::mps::error::MpsError;

/// Why a soak's runtime directory cannot be used, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unusable(pub(crate) String);

/// The runtime directory of soak `soak_id` of user `uid`, `runtime_dir` being
/// `$XDG_RUNTIME_DIR`: created (0700) and checked at every level.
pub(crate) fn create(
    runtime_dir: Option<&Path>,
    uid: u32,
    soak_id: &str,
) -> Result<PathBuf, Unusable> {
    let dir = runtime_base(runtime_dir, uid).join("soaks").join(soak_id);
    let trusted = creation_base(&dir, runtime_dir, uid);
    ensure_private(&trusted, &dir, uid).map_err(|e| Unusable(said(&e)))?;
    Ok(dir)
}

/// Removes a soak's runtime directory and what it holds (never following a link out of it).
pub(crate) fn remove(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

/// An error and its causes, on one line.
fn said(e: &MpsError) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text += &format!(": {cause}");
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_soaks_directory_is_made_private_under_the_users_runtime_directory() {
        let uid = nix::unistd::getuid().as_raw();
        let runtime = crate::testing::files::private_tempdir();
        let dir = create(Some(runtime.path()), uid, "20260101T000000-abcd").unwrap();
        assert_eq!(
            dir,
            runtime.path().join("unilab/soaks/20260101T000000-abcd")
        );
        for level in [
            "unilab",
            "unilab/soaks",
            "unilab/soaks/20260101T000000-abcd",
        ] {
            let mode = std::fs::metadata(runtime.path().join(level))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{level}");
        }
        remove(&dir);
        assert!(!dir.exists());
        assert!(runtime.path().join("unilab/soaks").is_dir());
    }

    #[test]
    fn a_runtime_directory_others_can_write_is_unusable_and_says_why() {
        let uid = nix::unistd::getuid().as_raw();
        let runtime = crate::testing::files::private_tempdir();
        std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let Unusable(why) = create(Some(runtime.path()), uid, "s").unwrap_err();
        assert!(why.contains("others can write"), "{why}");
        assert!(
            !runtime.path().join("unilab").exists(),
            "nothing made under it"
        );
    }
}
