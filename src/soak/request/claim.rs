//! A soak's claim on its `--metrics-file`, held for the soak's life: two soaks started at one
//! moment with one file would both find it free (not there yet, or its soak ended) and then
//! take turns rewriting it. The check of what is at the file ([`super::outputs::metrics_file`])
//! is made under the claim, so of soaks started together exactly one takes the file.
//!
//! The claim is an exclusive `flock` on a file of the user's runtime directory (node-local,
//! private: [`crate::mps::dirs::runtime_base`]), `claims/metrics-<hash>`, the hash of the metrics
//! file's directory's device and inode and its name: every spelling of one file is one claim,
//! and nothing is put beside the user's file. What it keeps:
//! - **A claim file is its holder's from its first byte**: it is made aside with the holder's
//!   soak id and pid, locked, and only then linked in at its name (a link fails where the name
//!   is taken); so a soak that finds it locked reads whose it is. A claim file found unlocked is
//!   a soak's that ended without removing it (killed): it is removed, under its lock, and the
//!   claim made again.
//! - **The lock ends with the soak's process** (the kernel's), and is not handed to the command
//!   (the file is closed at `exec`). The soak removes the file, under its lock, when done.
//! - **A claim that cannot be made** for any reason but another soak's (no runtime directory it
//!   can trust, the file's directory unreadable) is no reason to refuse a soak: it runs with the
//!   check alone, as before there were claims ([`Claimed::Unavailable`]).

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

/// The directory of the claims, under the user's runtime directory.
const CLAIMS: &str = "claims";

/// How many times a claim is tried again after its file changed under it.
const TRIES: usize = 8;

/// The most of a claim file read back: a soak id and a pid.
const READ_AT_MOST: u64 = 256;

/// A soak's claim on its metrics file: while it lives, no other soak of this user on this node
/// takes the file.
#[derive(Debug)]
pub(crate) struct MetricsClaim {
    /// The claim file.
    path: PathBuf,
    /// Open, locked.
    file: std::fs::File,
}

/// Who holds a claim, as its file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Holder {
    pub soak_id: String,
    pub pid: u32,
}

/// What came of claiming a metrics file.
#[derive(Debug)]
pub(super) enum Claimed {
    Held(MetricsClaim),
    /// Another soak holds it: the one its claim file names, if it names one.
    Taken(Option<Holder>),
    /// No claim can be made here, and why.
    Unavailable(String),
}

/// Claims the metrics file `metrics` (absolute) for soak `soak_id` of this process, user `uid`,
/// `runtime_dir` being `$XDG_RUNTIME_DIR`.
pub(super) fn claim(
    metrics: &Path,
    runtime_dir: Option<&Path>,
    uid: u32,
    soak_id: &str,
) -> Claimed {
    let Some(name) = claim_name(metrics) else {
        return Claimed::Unavailable("the file's directory cannot be read".into());
    };
    let dir = crate::mps::dirs::runtime_base(runtime_dir, uid).join(CLAIMS);
    let trusted = crate::mps::dirs::creation_base(&dir, runtime_dir, uid);
    if let Err(e) = crate::mps::dirs::ensure_private(&trusted, &dir, uid) {
        return Claimed::Unavailable(e.to_string());
    }
    let path = dir.join(name);
    let holder = format!("{soak_id} {}\n", std::process::id());
    for _ in 0..TRIES {
        match try_claim(&path, &holder) {
            Ok(Some(claimed)) => return claimed,
            Ok(None) => {}
            Err(e) => return Claimed::Unavailable(format!("`{}`: {e}", path.display())),
        }
    }
    Claimed::Unavailable(format!("`{}` kept changing", path.display()))
}

/// One try at the claim file `path`; `None` when it changed under the try (another soak's
/// ended, or a stale one was removed) and the claim is to be tried again.
fn try_claim(path: &Path, holder: &str) -> std::io::Result<Option<Claimed>> {
    let (aside, file) = made_aside(path, holder)?;
    let linked = std::fs::hard_link(&aside, path);
    let _ = std::fs::remove_file(&aside);
    match linked {
        Ok(()) => {
            return Ok(Some(Claimed::Held(MetricsClaim {
                path: path.to_owned(),
                file,
            })));
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => drop(file),
        Err(e) => return Err(e),
    }
    let found = match open(path) {
        Ok(found) => found,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match flock(&found, FlockOperation::NonBlockingLockExclusive) {
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(Some(Claimed::Taken(read_holder(found)))),
        Err(e) => Err(e.into()),
        // Left by a soak that ended without removing it: removed while locked, unless the name
        // is another file's by now.
        Ok(()) => {
            if same_file(&found, path) {
                std::fs::remove_file(path)?;
            }
            Ok(None)
        }
    }
}

/// A new file beside `path`, holding `holder`, locked.
fn made_aside(path: &Path, holder: &str) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static MADE: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    // A name no other try makes: this process's, this try's, and the time (a file left by a
    // process killed meanwhile whose pid this one has is not in the way).
    let aside = path.with_file_name(format!(
        ".{name}.{}.{}.{}",
        std::process::id(),
        MADE.fetch_add(1, Ordering::Relaxed),
        jiff::Timestamp::now().as_nanosecond()
    ));
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&aside)?;
    let locked = file
        .write_all(holder.as_bytes())
        .and_then(|()| Ok(flock(&file, FlockOperation::NonBlockingLockExclusive)?));
    if let Err(e) = locked {
        let _ = std::fs::remove_file(&aside);
        return Err(e);
    }
    Ok((aside, file))
}

fn open(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
}

/// Whether `path` is the file `file` has open.
fn same_file(file: &std::fs::File, path: &Path) -> bool {
    match (file.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(open), Ok(named)) => (open.dev(), open.ino()) == (named.dev(), named.ino()),
        _ => false,
    }
}

/// Whose claim `file` is, as its holder wrote it: `<soak id> <pid>`.
fn read_holder(file: std::fs::File) -> Option<Holder> {
    let mut text = String::new();
    file.take(READ_AT_MOST).read_to_string(&mut text).ok()?;
    let (soak_id, pid) = text.strip_suffix('\n')?.split_once(' ')?;
    Some(Holder {
        soak_id: soak_id.to_owned(),
        pid: pid.parse().ok()?,
    })
}

/// The claim file's name for the metrics file `metrics`: by its directory's device and inode
/// and its name; `None` when its directory cannot be read.
fn claim_name(metrics: &Path) -> Option<String> {
    let name = metrics.file_name()?;
    let meta = std::fs::metadata(metrics.parent()?).ok()?;
    let mut hasher = blake3::Hasher::new();
    hasher.update(&meta.dev().to_le_bytes());
    hasher.update(&meta.ino().to_le_bytes());
    hasher.update(std::os::unix::ffi::OsStrExt::as_bytes(name));
    Some(format!("metrics-{}", &hasher.finalize().to_hex()[..32]))
}

impl Drop for MetricsClaim {
    /// The claim file removed while still locked, so that a soak that opens it meanwhile finds
    /// it taken, or finds it gone once unlocked and makes its own.
    fn drop(&mut self) {
        if same_file(&self.file, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn names(dir: &Path) -> Vec<std::ffi::OsString> {
        std::fs::read_dir(dir)
            .map(|entries| entries.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn a_claim_held_is_refused_to_the_next_naming_its_holder_and_free_once_dropped() {
        let uid = nix::unistd::getuid().as_raw();
        let runtime = crate::testing::files::private_tempdir();
        let files = crate::testing::files::private_tempdir();
        let metrics = files.path().join("unilab.prom");
        let Claimed::Held(first) = claim(&metrics, Some(runtime.path()), uid, "s1") else {
            panic!("not claimed");
        };
        // Another spelling of the same file is the same claim.
        let dotted = files.path().join(".").join("unilab.prom");
        match claim(&dotted, Some(runtime.path()), uid, "s2") {
            Claimed::Taken(Some(holder)) => assert_eq!(
                holder,
                Holder {
                    soak_id: "s1".into(),
                    pid: std::process::id()
                }
            ),
            other => panic!("{other:?}"),
        }
        // Another file is another claim.
        let other = claim(
            &files.path().join("b.prom"),
            Some(runtime.path()),
            uid,
            "s3",
        );
        assert!(matches!(other, Claimed::Held(_)), "{other:?}");
        drop(other);
        drop(first);
        let claims = runtime.path().join("unilab").join(CLAIMS);
        assert_eq!(names(&claims), Vec::<std::ffi::OsString>::new());
        assert!(matches!(
            claim(&metrics, Some(runtime.path()), uid, "s2"),
            Claimed::Held(_)
        ));
        assert_eq!(names(files.path()), Vec::<std::ffi::OsString>::new());
    }

    /// A soak killed leaves its claim file, unlocked: the next soak takes it over.
    #[test]
    fn a_claim_file_left_unlocked_is_taken_over() {
        let uid = nix::unistd::getuid().as_raw();
        let runtime = crate::testing::files::private_tempdir();
        let files = crate::testing::files::private_tempdir();
        let metrics = files.path().join("unilab.prom");
        let Claimed::Held(first) = claim(&metrics, Some(runtime.path()), uid, "s1") else {
            panic!("not claimed");
        };
        let left = first.path.clone();
        // As when its process is killed: unlocked, the file left.
        flock(&first.file, FlockOperation::Unlock).unwrap();
        std::mem::forget(first);
        assert!(left.exists());
        let Claimed::Held(second) = claim(&metrics, Some(runtime.path()), uid, "s2") else {
            panic!("not taken over");
        };
        assert_eq!(second.path, left);
        let mut text = String::new();
        std::fs::File::open(&left)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert!(text.starts_with("s2 "), "{text}");
    }

    /// A runtime directory others can write is no place for a claim: none is made, and why is
    /// said.
    #[test]
    fn no_trusted_runtime_directory_makes_the_claim_unavailable() {
        let uid = nix::unistd::getuid().as_raw();
        let runtime = crate::testing::files::private_tempdir();
        std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let files = crate::testing::files::private_tempdir();
        let claimed = claim(&files.path().join("m.prom"), Some(runtime.path()), uid, "s");
        assert!(matches!(claimed, Claimed::Unavailable(_)), "{claimed:?}");
        let gone = claim(Path::new("/nonexistent/dir/m.prom"), None, uid, "s");
        assert!(matches!(gone, Claimed::Unavailable(_)), "{gone:?}");
    }
}
