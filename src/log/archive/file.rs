//! The archive file: one soak's records as the live log stored them, compressed.
//!
//! A zstd stream (so `zstd -dc` opens it) of [`MAGIC`], then each record as its sequence (8
//! bytes, little endian), its length (4 bytes, little endian) and its stored bytes
//! (`prev_hash ‖ hash ‖ body`, verbatim: their hashes hold as they did in the log), in sequence
//! order, to the end of the stream. What the records must be is the log's `soak_archived`
//! event's to say; this module only writes and reads them, never trusting a length beyond what
//! a record may hold.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::log::codec::MAX_RECORD_BYTES;
use crate::log::io::what_kind;

/// What every archive starts with, inside the compressed stream.
const MAGIC: &[u8] = b"unilab soak archive 1\n";

/// zstd's level: fast, and samples of a tree that changes little compress well at any level.
const LEVEL: i32 = 1;

/// The largest stored record: a body the codec accepts and its two hashes.
const MAX_STORED: usize = MAX_RECORD_BYTES + 2 * crate::log::chain::HASH_LEN;

/// The name of the archive of soak `soak_id` beside the log `log_name` (`events.redb` →
/// `events.soak-<id>.zst`): bytes a file name should not hold are written `%XX`.
pub(crate) fn name_for(log_name: &str, soak_id: &str) -> String {
    let stem = log_name.strip_suffix(".redb").unwrap_or(log_name);
    let mut name = format!("{stem}.soak-");
    for byte in soak_id.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.') {
            name.push(char::from(byte));
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    name.push_str(".zst");
    name
}

/// Whether `name` is a plain file name (no directory, not `.` or `..`): an archive is only ever
/// looked for beside its log, whatever a damaged or hand-made event names.
pub(crate) fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0')
}

/// An archive being written under a temporary name beside where it goes; it takes that name,
/// durably, in [`finish`](Self::finish), and is removed if dropped before.
pub(crate) struct ArchiveWriter {
    encoder: Option<zstd::stream::write::Encoder<'static, BufWriter<File>>>,
    temp: PathBuf,
    path: PathBuf,
}

impl ArchiveWriter {
    /// Starts the archive that will be `path`, readable by its owner alone.
    pub(crate) fn create(path: &Path) -> std::io::Result<Self> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let temp = dir.join(format!(".{name}.{}.writing", std::process::id()));
        remove_dead_writers(dir, &name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        let mut writer = Self {
            encoder: None,
            temp,
            path: path.to_owned(),
        };
        let mut encoder = zstd::stream::write::Encoder::new(BufWriter::new(file), LEVEL)?;
        // Compression on a thread of its own, beside the reading and hashing of the records
        // (where it cannot have one, zstd compresses on this thread).
        let _ = encoder.multithread(1);
        encoder.write_all(MAGIC)?;
        writer.encoder = Some(encoder);
        Ok(writer)
    }

    /// Appends one record; one longer than [`read`] takes is refused.
    pub(crate) fn push(&mut self, seq: u64, stored: &[u8]) -> std::io::Result<()> {
        let len = u32::try_from(stored.len())
            .ok()
            .filter(|_| stored.len() <= MAX_STORED)
            .ok_or_else(|| {
                std::io::Error::new(
                    ErrorKind::InvalidData,
                    format!(
                        "record {seq} takes {} bytes, more than a record may hold",
                        stored.len()
                    ),
                )
            })?;
        let encoder = self
            .encoder
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the archive was finished"))?;
        encoder.write_all(&seq.to_le_bytes())?;
        encoder.write_all(&len.to_le_bytes())?;
        encoder.write_all(stored)
    }

    /// Ends the stream, makes it durable and gives it its name (and that name durable). Where
    /// that fails, nothing of it is left: neither the temporary file nor the name.
    pub(crate) fn finish(mut self) -> std::io::Result<()> {
        let encoder = self
            .encoder
            .take()
            .ok_or_else(|| std::io::Error::other("the archive was finished"))?;
        let file = encoder
            .finish()?
            .into_inner()
            .map_err(std::io::IntoInnerError::into_error)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&self.temp, &self.path)?;
        let synced =
            File::open(self.path.parent().unwrap_or(Path::new("."))).and_then(|dir| dir.sync_all());
        if synced.is_err() {
            let _ = std::fs::remove_file(&self.path);
        }
        synced
    }
}

/// Removes what writers of the archive `name` that no longer run left (killed half-way), and
/// a leftover of an earlier process with this one's pid.
fn remove_dead_writers(dir: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!(".{name}.");
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(pid) = file
            .to_str()
            .and_then(|f| f.strip_prefix(&prefix)?.strip_suffix(".writing"))
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        // Signal 0 delivers nothing; it only asks whether the process exists.
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            == Err(nix::errno::Errno::ESRCH);
        if gone || u32::try_from(pid) == Ok(std::process::id()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

impl Drop for ArchiveWriter {
    /// Removes the temporary file, unless it took its name: an archive abandoned, or whose
    /// [`finish`](ArchiveWriter::finish) failed, leaves nothing behind. (No other process can
    /// have made a file of that name since: it holds this process's pid.)
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.temp);
    }
}

/// Why an archive could not be read through.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("it is missing")]
    Missing,
    /// This user may not open it: a permission, not damage.
    #[error("it cannot be opened")]
    Access(#[source] std::io::Error),
    /// Something else is in its place: a named pipe, a directory, a device.
    #[error("it is not a regular file: it is {0}")]
    NotAFile(&'static str),
    #[error("it cannot be read: {0}")]
    Io(std::io::Error),
    #[error("it is not a unilab soak archive")]
    NotAnArchive,
    #[error("it ends in the middle of a record")]
    Truncated,
    #[error("it holds a record of {0} bytes, more than a record may hold")]
    TooLong(u64),
}

/// Gives `take` each record of the archive at `path` (its sequence and stored bytes), in the
/// order written, until it returns `false` or the archive ends.
pub(crate) fn read(path: &Path, take: &mut dyn FnMut(u64, &[u8]) -> bool) -> Result<(), ReadError> {
    let file = open(path)?;
    let mut stream = zstd::stream::read::Decoder::new(file).map_err(ReadError::Io)?;
    let mut magic = [0; MAGIC.len()];
    match read_full(&mut stream, &mut magic) {
        Ok(true) if magic == MAGIC => {}
        Ok(_) | Err(ReadError::Io(_) | ReadError::Truncated) => {
            return Err(ReadError::NotAnArchive);
        }
        Err(e) => return Err(e),
    }
    let mut header = [0; 12];
    let mut stored = Vec::new();
    loop {
        if !read_full(&mut stream, &mut header)? {
            return Ok(());
        }
        let (seq, len) = header.split_at(8);
        let seq = u64::from_le_bytes(seq.try_into().map_err(|_| ReadError::Truncated)?);
        let len = u32::from_le_bytes(len.try_into().map_err(|_| ReadError::Truncated)?);
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > MAX_STORED {
            return Err(ReadError::TooLong(len as u64));
        }
        stored.resize(len, 0);
        if !read_full(&mut stream, &mut stored)? && len > 0 {
            return Err(ReadError::Truncated);
        }
        if !take(seq, &stored) {
            return Ok(());
        }
    }
}

/// Opens the archive at `path` for reading, without blocking: a named pipe in its place would
/// hold `open` until something wrote to it, forever. What is opened must be a regular file
/// ([`ReadError::NotAFile`]); a permission refused is [`ReadError::Access`], not damage. Every
/// reader of an archive opens it here.
fn open(path: &Path) -> Result<File, ReadError> {
    use nix::fcntl::OFlag;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
        .open(path)
        .map_err(|e| match e.kind() {
            ErrorKind::NotFound => ReadError::Missing,
            _ if crate::log::error::is_access(&e) => ReadError::Access(e),
            _ => ReadError::Io(e),
        })?;
    let kind = file.metadata().map_err(ReadError::Io)?.file_type();
    if !kind.is_file() {
        return Err(ReadError::NotAFile(what_kind(kind)));
    }
    // A regular file's reads never block; the flag is cleared all the same, so that nothing
    // that reads it ever sees `WouldBlock`.
    let flags = nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_GETFL)
        .map(|flags| OFlag::from_bits_truncate(flags) - OFlag::O_NONBLOCK)
        .and_then(|flags| nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETFL(flags)));
    flags.map_err(|errno| ReadError::Io(errno.into()))?;
    Ok(file)
}

/// Fills `buf`: `false` when the stream ended before its first byte, [`ReadError::Truncated`]
/// when it ended after.
fn read_full(stream: &mut impl Read, buf: &mut [u8]) -> Result<bool, ReadError> {
    let mut filled = 0;
    while filled < buf.len() {
        match stream.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => return Err(ReadError::Truncated),
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(path: &Path) -> Result<Vec<(u64, Vec<u8>)>, ReadError> {
        let mut all = Vec::new();
        read(path, &mut |seq, stored| {
            all.push((seq, stored.to_vec()));
            true
        })?;
        Ok(all)
    }

    #[test]
    fn records_come_back_as_they_were_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir
            .path()
            .join(name_for("events.redb", "20261203T183607-ff95"));
        assert!(path.ends_with("events.soak-20261203T183607-ff95.zst"));
        let mut writer = ArchiveWriter::create(&path).unwrap();
        let written = [(3, vec![1; 70]), (4, vec![2; 64]), (9, Vec::new())];
        for (seq, stored) in &written {
            writer.push(*seq, stored).unwrap();
        }
        assert!(!path.exists(), "it takes its name only when finished");
        writer.finish().unwrap();
        assert_eq!(records(&path).unwrap(), written);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_dead_writers_leftover_is_removed_by_the_next() {
        let dir = tempfile::tempdir().unwrap();
        // No process has pid 2^22 + 1 (past the kernel's largest): its writer is gone.
        let leftover = dir.path().join(".a.zst.4194305.writing");
        std::fs::write(&leftover, b"half").unwrap();
        let writer = ArchiveWriter::create(&dir.path().join("a.zst")).unwrap();
        assert!(!leftover.exists());
        writer.finish().unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn an_unfinished_archive_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = ArchiveWriter::create(&dir.path().join("a.zst")).unwrap();
        writer.push(1, b"x").unwrap();
        drop(writer);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn an_archive_that_cannot_take_its_name_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.zst");
        // A directory that is not empty: no rename replaces it.
        std::fs::create_dir_all(path.join("in-the-way")).unwrap();
        let mut writer = ArchiveWriter::create(&path).unwrap();
        writer.push(1, b"x").unwrap();
        assert!(writer.finish().is_err());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["a.zst"], "only the directory in the way");
    }

    #[test]
    fn what_is_not_a_regular_file_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.zst");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // On a thread, so that a read that waits for a writer fails the test, not hangs it.
        let (tx, rx) = std::sync::mpsc::channel();
        let fifo = path.clone();
        std::thread::spawn(move || tx.send(records(&fifo)));
        let read = rx.recv_timeout(std::time::Duration::from_secs(60));
        assert!(
            matches!(read, Ok(Err(ReadError::NotAFile("a named pipe (FIFO)")))),
            "{read:?}"
        );
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        assert!(matches!(
            records(&path),
            Err(ReadError::NotAFile("a directory"))
        ));
    }

    #[test]
    fn what_is_not_a_whole_archive_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.zst");
        assert!(matches!(records(&path), Err(ReadError::Missing)));
        std::fs::write(&path, b"plain text").unwrap();
        assert!(matches!(records(&path), Err(ReadError::NotAnArchive)));
        let compress = |bytes: &[u8]| zstd::stream::encode_all(bytes, 1).unwrap();
        std::fs::write(&path, compress(b"another zstd stream")).unwrap();
        assert!(matches!(records(&path), Err(ReadError::NotAnArchive)));
        let mut cut = MAGIC.to_vec();
        cut.extend_from_slice(&7u64.to_le_bytes());
        cut.extend_from_slice(&10u32.to_le_bytes());
        cut.extend_from_slice(b"short");
        std::fs::write(&path, compress(&cut)).unwrap();
        assert!(matches!(records(&path), Err(ReadError::Truncated)));
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&7u64.to_le_bytes());
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&path, compress(&huge)).unwrap();
        assert!(matches!(records(&path), Err(ReadError::TooLong(_))));
    }

    /// The writer never writes a record its reader refuses as too long.
    #[test]
    fn a_record_longer_than_a_reader_takes_is_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.zst");
        let mut writer = ArchiveWriter::create(&path).unwrap();
        writer.push(1, &vec![7; MAX_STORED]).unwrap();
        let refused = writer.push(2, &vec![7; MAX_STORED + 1]).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::InvalidData);
        writer.finish().unwrap();
        assert_eq!(records(&path).unwrap(), [(1, vec![7; MAX_STORED])]);
    }

    #[test]
    fn odd_soak_ids_make_plain_names() {
        let name = name_for("events.redb", "../a b");
        assert_eq!(name, "events.soak-..%2Fa%20b.zst");
        assert!(is_plain_name(&name));
        for bad in ["", ".", "..", "a/b", "/abs"] {
            assert!(!is_plain_name(bad), "{bad}");
        }
    }
}
