//! The progress directory's signature.
//!
//! Growth of the directory is the backend-independent liveness signal: any change of file count,
//! total size or newest modification time is progress.

use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::event::soak::ProgressSignature;

/// The progress directory, held open from the start of the soak. Its signature is read through
/// the held descriptor, so whoever could rename or replace the directory's path later cannot
/// change what the soak watches; each reading also says when the path no longer names it.
#[derive(Debug)]
pub struct HeldDir {
    path: PathBuf,
    dir: std::fs::File,
    dev: u64,
    ino: u64,
}

impl HeldDir {
    /// Opens `path`, which must be a directory and not a symbolic link.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc_flags::O_DIRECTORY | libc_flags::O_NOFOLLOW)
            .open(path)?;
        let meta = dir.metadata()?;
        Ok(Self {
            path: path.to_owned(),
            dir,
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// The signature of the held directory, and what is wrong with it: its path no longer
    /// naming it, subdirectories that cannot be read (their files count for nothing).
    pub fn signature(&self) -> (ProgressSignature, Vec<String>) {
        let held = PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd()));
        let mut problems = Vec::new();
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if meta.dev() == self.dev && meta.ino() == self.ino => {}
            _ => problems.push(format!(
                "`{}` no longer names the directory the soak watches; the soak keeps watching the one it named at the start",
                self.path.display()
            )),
        }
        let (signature, unreadable) = signature(&held);
        if let Some((first, error)) = unreadable.first() {
            let within = first.strip_prefix(&held).unwrap_or(first);
            problems.push(format!(
                "cannot read {} of the progress directory (`{}`: {error}); what they hold is not counted as progress",
                crate::text::count(unreadable.len() as u64, "subdirectory"),
                self.path.join(within).display()
            ));
        }
        (signature, problems)
    }
}

/// The open(2) flags `std` does not name.
mod libc_flags {
    pub(super) const O_DIRECTORY: i32 = nix::fcntl::OFlag::O_DIRECTORY.bits();
    pub(super) const O_NOFOLLOW: i32 = nix::fcntl::OFlag::O_NOFOLLOW.bits();
}

/// Walks the directory (not following symlinks) and sums it up, with the directories that
/// could not be read (and why). An entry gone between the listing and its look is skipped: a
/// trainer may be replacing files while unilab looks.
pub(super) fn signature(dir: &Path) -> (ProgressSignature, Vec<(PathBuf, std::io::Error)>) {
    let mut sig = ProgressSignature::default();
    let mut unreadable = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(current) = stack.pop() {
        let entries = match std::fs::read_dir(&current) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                unreadable.push((current, e));
                continue;
            }
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            let mtime_ns = meta
                .mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(meta.mtime_nsec());
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                sig.files += 1;
                sig.bytes += meta.len();
            } else {
                continue;
            }
            sig.newest_mtime_ns = Some(sig.newest_mtime_ns.map_or(mtime_ns, |n| n.max(mtime_ns)));
        }
    }
    (sig, unreadable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_changes_with_files_sizes_and_times() {
        let dir = tempfile::tempdir().unwrap();
        let (empty, unreadable) = signature(dir.path());
        assert_eq!(empty, ProgressSignature::default());
        assert!(unreadable.is_empty());
        std::fs::write(dir.path().join("a"), b"12345").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), b"1").unwrap();
        let (two, _) = signature(dir.path());
        assert_eq!((two.files, two.bytes), (2, 6));
        assert!(two.newest_mtime_ns.is_some());
        std::fs::write(dir.path().join("a"), b"123456").unwrap();
        assert_ne!(signature(dir.path()).0, two);
    }
}
