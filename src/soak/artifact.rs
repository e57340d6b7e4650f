//! Where a soak's artifact and report go: the file checked before the command runs (so that a
//! soak is never refused days later, at its verdict), and written atomically with the mode the
//! user's umask gives a new file. What is written there is the read layer's (`read::artifact`,
//! `view::report`), handed down to the supervisor by the command layer.
//!
//! A soak puts its files in place only where nothing is ([`Placement::New`]), unless `--force`:
//! the check at its start cannot stop two soaks started with the same `--output` (ranks that
//! forgot `{rank}`) from both finding the name free, and the later must not replace the earlier's
//! artifact when it ends. The name is taken with `renameat2(RENAME_NOREPLACE)` — by its system
//! call (rustix, through `tempfile`), as the metrics file's exchange is, glibc having no wrapper
//! before 2.28 — or, on a filesystem without it, a hard link, which fails the same way.

use std::path::Path;

/// What was written of an artifact: its digest and its length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub digest: String,
    pub bytes: u64,
}

/// Whether an artifact can be written to `path`: its directory takes a new file, the name
/// itself can be created there, and `path` is absent or a regular file. Anything else (a device, a FIFO, a symlink, a directory) would be
/// replaced by the rename that writes the artifact, so it is refused — before a soak starts, not
/// days later. The directory is proven by creating (and removing) a file in it: `access(2)`
/// grants root a read-only or pseudo file system (`/sys`) where creating one fails.
pub(crate) fn check_target(path: &Path) -> std::io::Result<()> {
    check_kind(path)?;
    tempfile::Builder::new()
        .prefix(".unilab-probe-")
        .tempfile_in(directory_of(path))
        .map(drop)?;
    check_name(path)
}

/// Whether the filesystem takes `path`'s own name: a temporary file beside it proves the
/// directory writable, not that a name of 300 bytes, or a path past the system's limit, can be
/// created there — that would be found only when the verdict is written. Proven by creating
/// the file (exclusively: nothing there is touched) and removing it again; a file already there
/// is proof enough.
fn check_name(path: &Path) -> std::io::Result<()> {
    if std::fs::symlink_metadata(path).is_ok() {
        return Ok(());
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(file) => {
            drop(file);
            std::fs::remove_file(path)
        }
        // Made meanwhile by someone else: the name is taken, so it can be.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether `path` is absent or a regular file, which a rename may replace. The error says
/// nothing of what was to be written there: the caller's names it (the artifact, the report, the
/// metrics file).
fn check_kind(path: &Path) -> std::io::Result<()> {
    if std::fs::symlink_metadata(path).is_ok_and(|meta| !meta.file_type().is_file()) {
        return Err(std::io::Error::other(
            "it exists and is not a regular file, which the rename that writes the file would replace",
        ));
    }
    Ok(())
}

fn directory_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// How a file is put at its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Over a regular file there, if any (`--force`, an export, a report asked for).
    Replace,
    /// Only where nothing is: a file there meanwhile is kept, and the write fails
    /// ([`std::io::ErrorKind::AlreadyExists`]).
    New,
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, synced, then renamed over
/// `path` (only ever a regular file, checked again just before), and the directory synced so the
/// rename survives a crash. The file gets the mode the user's umask gives a new file: it holds
/// the command line and output tails, which are the user's to share.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_placed(path, bytes, Placement::Replace)
}

/// [`write_atomically`], put in place as `placement` says.
pub(crate) fn write_placed(path: &Path, bytes: &[u8], placement: Placement) -> std::io::Result<()> {
    use std::io::Write;
    write_placed_with(path, placement, |file| file.write_all(bytes))
}

/// [`write_atomically`] what `write` writes into the file (buffered; flushed here).
pub(crate) fn write_atomically_with<T, E: From<std::io::Error>>(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<&std::fs::File>) -> Result<T, E>,
) -> Result<T, E> {
    write_placed_with(path, Placement::Replace, write)
}

/// [`write_atomically_with`], put in place as `placement` says.
pub(crate) fn write_placed_with<T, E: From<std::io::Error>>(
    path: &Path,
    placement: Placement,
    write: impl FnOnce(&mut std::io::BufWriter<&std::fs::File>) -> Result<T, E>,
) -> Result<T, E> {
    use std::io::Write;
    let dir = directory_of(path);
    let temp = tempfile::NamedTempFile::new_in(dir)?;
    let mut buffered = std::io::BufWriter::with_capacity(1 << 16, temp.as_file());
    let written = write(&mut buffered)?;
    buffered.flush()?;
    drop(buffered);
    std::fs::set_permissions(
        temp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o666 & !umask()),
    )?;
    temp.as_file().sync_all()?;
    match placement {
        Placement::Replace => {
            check_kind(path)?;
            temp.persist(path).map_err(|e| e.error)?;
        }
        Placement::New => {
            temp.persist_noclobber(path).map_err(|e| match e.error.kind() {
                std::io::ErrorKind::AlreadyExists => std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "a file was put there while the soak ran (another soak given the same name?); it is kept as it is",
                ),
                _ => e.error,
            })?;
        }
    }
    std::fs::File::open(dir)?.sync_all()?;
    Ok(written)
}

/// This process's umask, read from `/proc` (changing it to read it would race other threads);
/// `022` where it cannot be read.
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Umask:"))
                .and_then(|mask| u32::from_str_radix(mask.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Put only where nothing is: a file there is kept whole, the write fails as taken, and no
    /// temporary file is left beside it; where nothing is, the file is written.
    #[test]
    fn a_new_file_never_replaces_one_put_there_meanwhile() {
        let dir = crate::testing::files::private_tempdir();
        let path = dir.path().join("artifact.json");
        write_placed(&path, b"first", Placement::New).unwrap();
        let e = write_placed(&path, b"second", Placement::New).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        write_placed(&path, b"third", Placement::Replace).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"third");
    }
}
