//! A directory of the job held open, and what is done in it: every file is created, replaced,
//! looked for, read and listed relative to the held directory (`openat`, `linkat`, `renameat`,
//! `fstatat`), never through a path again, and no link is followed.
//!
//! A file is written whole: to a temporary file of the directory (`.<name>.<random>.tmp`, 0600,
//! created exclusively), synced, then given its name — exclusively with `link(2)`, which fails
//! with `EEXIST` when another writer was first ([`Held::create`]), or in place of what was there
//! with `rename(2)` ([`Held::replace`]). So a reader finds either nothing or a whole file; it
//! never looks at the temporary names. A file is read only when it is a regular file of the
//! user's, and no more than a bound of it ([`Held::read`]): what another rank, a damaged file
//! or a forger left there cannot make a reader wait or fill its memory.

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::JobError;
use crate::paths::{Distrust, distrust_directory_meta};

/// A directory checked (the user's alone, closed to others) and held open.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    /// Where it was when it was checked, for messages.
    pub(super) path: PathBuf,
    pub(super) uid: u32,
    pub(super) fd: Arc<File>,
}

/// Why a file of a held directory could not be read.
#[derive(Debug)]
pub(crate) enum Unread {
    /// A link, a FIFO, a device, a directory: nothing unilab writes.
    NotRegular,
    /// Another user's file.
    NotYours {
        owner: u32,
    },
    /// Larger than the bound: `len` bytes.
    TooLarge {
        len: u64,
        max: u64,
    },
    Io(std::io::Error),
}

impl std::fmt::Display for Unread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unread::NotRegular => f.write_str("it is not a regular file"),
            Unread::NotYours { owner } => write!(f, "it belongs to uid {owner}"),
            Unread::TooLarge { len, max } => write!(f, "it is {len} bytes, over {max}"),
            Unread::Io(e) => write!(f, "{e}"),
        }
    }
}

/// How a temporary file's name starts: `.<name>.`; never read as a file of the directory.
fn temporary_prefix(name: &str) -> String {
    format!(".{name}.")
}

impl Held {
    /// `path`, already opened as `fd` and checked, held for user `uid`.
    pub(super) fn new(path: PathBuf, uid: u32, fd: File) -> Self {
        Self {
            path,
            uid,
            fd: Arc::new(fd),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in this directory, for messages.
    pub(crate) fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Whether something is at `name`: one `fstatat`, no link followed.
    pub(crate) fn stat(&self, name: &str) -> std::io::Result<Option<rustix::fs::Stat>> {
        match rustix::fs::statat(&*self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(stat)),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The bytes of the file `name`, at most `max` of them: `None` when nothing is there.
    pub(crate) fn read(&self, name: &str, max: u64) -> Result<Option<Vec<u8>>, Unread> {
        let Some(stat) = self.stat(name).map_err(Unread::Io)? else {
            return Ok(None);
        };
        // Nothing else is opened: a device or a FIFO is not a file of the job.
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(Unread::NotRegular);
        }
        // Not followed, and not waited on should it have become a FIFO since the `fstatat`.
        let opened = rustix::fs::openat(
            &*self.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        );
        let file = match opened {
            Ok(fd) => File::from(fd),
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(rustix::io::Errno::LOOP) => return Err(Unread::NotRegular),
            Err(e) => return Err(Unread::Io(e.into())),
        };
        // What was opened, checked: it may have been replaced since the `fstatat`.
        let meta = file.metadata().map_err(Unread::Io)?;
        if !meta.file_type().is_file() {
            return Err(Unread::NotRegular);
        }
        if meta.uid() != self.uid {
            return Err(Unread::NotYours { owner: meta.uid() });
        }
        if meta.len() > max {
            return Err(Unread::TooLarge {
                len: meta.len(),
                max,
            });
        }
        let mut bytes = Vec::new();
        file.take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(Unread::Io)?;
        if bytes.len() as u64 > max {
            return Err(Unread::TooLarge {
                len: bytes.len() as u64,
                max,
            });
        }
        Ok(Some(bytes))
    }

    /// Writes `bytes` whole as `name` unless something is there already: `true` when this
    /// writer's file is the one there now.
    pub(crate) fn create(&self, name: &str, bytes: &[u8]) -> std::io::Result<bool> {
        let temporary = self.written_aside(name, bytes)?;
        let dir = &*self.fd;
        let won = match rustix::fs::linkat(dir, &temporary.name, dir, name, AtFlags::empty()) {
            Ok(()) => true,
            // Over NFS, the reply to a `link` that was made can be lost and the retried call
            // answer EEXIST: then the temporary file has the name as its second.
            Err(rustix::io::Errno::EXIST) => temporary
                .file
                .metadata()
                .is_ok_and(|meta| meta.nlink() == 2),
            Err(e) => return Err(e.into()),
        };
        // The file holds its bytes under its own name now; a temporary name left behind by a
        // failed removal is never read.
        drop(temporary);
        if won {
            // The new name outlives a crash of this host.
            self.fd.sync_all()?;
        }
        Ok(won)
    }

    /// Writes `bytes` whole as `name`, in place of what is there.
    pub(crate) fn replace(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let temporary = self.written_aside(name, bytes)?;
        let dir = &*self.fd;
        rustix::fs::renameat(dir, &temporary.name, dir, name)?;
        self.fd.sync_all()
    }

    /// `bytes` in a temporary file of this directory, synced.
    fn written_aside(&self, name: &str, bytes: &[u8]) -> std::io::Result<Temporary<'_>> {
        let temporary = Temporary::create(self, name)?;
        let mut file = &temporary.file;
        file.write_all(bytes)?;
        file.sync_all()?;
        Ok(temporary)
    }

    /// The directory `name` in this one, held: made 0700 when `create` and missing, `None` when
    /// missing and not to be made. A link, or a directory that is not the user's alone, is
    /// refused.
    pub(crate) fn subdir(&self, name: &str, create: bool) -> Result<Option<Held>, JobError> {
        let made = create && self.make_dir(name)?;
        self.open_dir(name, made)
    }

    /// The directory `name` in this one, held (`made`: this process just made it, and sets its
    /// mode exactly); `None` when missing. A link, or a directory that is not the user's alone,
    /// is refused.
    pub(crate) fn open_dir(&self, name: &str, made: bool) -> Result<Option<Held>, JobError> {
        let path = self.join(name);
        let refused = |reason| JobError::UnsafeDirectory {
            path: path.clone(),
            reason,
        };
        let opened = rustix::fs::openat(
            &*self.fd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        );
        let fd: OwnedFd = match opened {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                let link =
                    self.stat(name).ok().flatten().is_some_and(|stat| {
                        FileType::from_raw_mode(stat.st_mode) == FileType::Symlink
                    });
                return Err(refused(if link {
                    Distrust::Symlink
                } else {
                    Distrust::NotADirectory
                }));
            }
            Err(e) => return Err(refused(Distrust::Uninspectable(e.into()))),
        };
        let file = File::from(fd);
        let meta = file
            .metadata()
            .map_err(|e| refused(Distrust::Uninspectable(e)))?;
        if made && meta.uid() == self.uid && meta.mode() & 0o7777 != 0o700 {
            // Exactly 0700, whatever the umask took from the mode of the one just made.
            rustix::fs::fchmod(&file, Mode::from_raw_mode(0o700))
                .map_err(|e| refused(Distrust::Uninspectable(e.into())))?;
        }
        match distrust_directory_meta(&meta, self.uid) {
            Some(reason) => Err(refused(reason)),
            None => Ok(Some(Held::new(path, self.uid, file))),
        }
    }

    /// Makes the directory `name` (0700, the umask aside) exclusively: whether this call made
    /// it (`false`: something is there already).
    pub(crate) fn make_dir(&self, name: &str) -> Result<bool, JobError> {
        match rustix::fs::mkdirat(&*self.fd, name, Mode::from_raw_mode(0o700)) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::EXIST) => Ok(false),
            Err(e) => Err(JobError::Directory {
                path: self.join(name),
                source: e.into(),
            }),
        }
    }

    /// The names in this directory, but `.`, `..` and the temporary files of writers (every
    /// name that starts with `.`).
    pub(crate) fn names(&self) -> std::io::Result<Vec<OsString>> {
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(&*self.fd)? {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name.starts_with(b".") {
                continue;
            }
            names.push(OsString::from_vec(name.to_vec()));
        }
        names.sort();
        Ok(names)
    }
}

/// A temporary file of a held directory (`.<name>.<random>.tmp`, 0600), created exclusively
/// relative to it; its name is removed when it is dropped.
struct Temporary<'a> {
    dir: &'a Held,
    name: String,
    file: File,
}

impl<'a> Temporary<'a> {
    fn create(dir: &'a Held, of: &str) -> std::io::Result<Self> {
        // A name no other writer picks; should one have all the same, another is drawn.
        let mut tries = 0;
        loop {
            let name = format!("{}{}.tmp", temporary_prefix(of), random_hex());
            let created: rustix::io::Result<OwnedFd> = rustix::fs::openat(
                &*dir.fd,
                name.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            );
            match created {
                Ok(fd) => {
                    let temporary = Self {
                        dir,
                        name,
                        file: File::from(fd),
                    };
                    // Exactly 0600, whatever the umask took from the mode.
                    rustix::fs::fchmod(&temporary.file, Mode::from_raw_mode(0o600))?;
                    return Ok(temporary);
                }
                Err(rustix::io::Errno::EXIST) if tries < 8 => tries += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Drop for Temporary<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::unlinkat(&*self.dir.fd, self.name.as_str(), AtFlags::empty());
    }
}

/// Sixteen hex digits no two writers are likely to draw alike: this process, this thread, the
/// time to the nanosecond and a count, hashed.
fn random_hex() -> String {
    static DRAWN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut hasher = blake3::Hasher::new();
    hasher.update(&std::process::id().to_le_bytes());
    hasher.update(format!("{:?}", std::thread::current().id()).as_bytes());
    hasher.update(&jiff::Timestamp::now().as_nanosecond().to_le_bytes());
    hasher.update(
        &DRAWN
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_le_bytes(),
    );
    hasher.finalize().to_hex()[..16].to_owned()
}
