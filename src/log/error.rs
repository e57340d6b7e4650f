//! Errors of the event log boundary.

use std::path::PathBuf;

use super::chain::ChainBreak;
use super::codec::CodecError;
use super::migrate::MigrationError;
use crate::diagnostic::{Boundary, Exit, Hint};
use crate::event::Scope;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("`{path}` is not a readable unilab event log")]
    Unreadable {
        path: PathBuf,
        #[source]
        source: Box<redb::Error>,
    },
    #[error("the event log `{path}` is damaged: {detail}")]
    Damaged { path: PathBuf, detail: String },
    #[error("the event log `{path}` fails verification at {chain_break}")]
    Chain {
        path: PathBuf,
        chain_break: ChainBreak,
    },
    #[error("the event log `{path}` belongs to {found}, not to {expected}")]
    ForeignScope {
        path: PathBuf,
        found: Scope,
        expected: Scope,
    },
    #[error("the event log `{path}` is inconsistent: {detail}")]
    Inconsistent { path: PathBuf, detail: String },
    #[error(
        "the event log `{path}` has schema version {found}; this unilab reads up to {supported}"
    )]
    NewerSchema {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("cannot migrate the event log `{path}`")]
    Migration {
        path: PathBuf,
        #[source]
        source: MigrationError,
    },
    #[error("the event log `{path}` stayed locked by another process for {waited_ms} ms")]
    Busy { path: PathBuf, waited_ms: u64 },
    /// The log could not be reached or opened as asked, for a reason that says nothing about
    /// its contents: a permission, a path component that is not a directory, a read-only file
    /// system. Not damage: the history in it may be intact.
    #[error("cannot open the event log `{path}`")]
    Access {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file system holding the log is full (or the user's quota on it is spent). Not damage:
    /// what was committed before is intact, and a later append succeeds once there is space.
    #[error("no space left on the device holding `{path}`")]
    NoSpace {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `path` no longer names the file this process opened: it was moved, removed or replaced
    /// under it. Nothing more is written to the file it holds.
    #[error("the event log `{path}` was moved or replaced while this process was writing it")]
    Replaced { path: PathBuf },
    /// Another user could have written or replaced the log through `path`.
    #[error("refusing the event log: `{path}` is not safe: {reason}")]
    Untrusted {
        path: PathBuf,
        reason: crate::paths::Distrust,
    },
    #[error("cannot prepare the state directory `{path}`")]
    StateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot encode an event for `{path}`")]
    Encode {
        path: PathBuf,
        #[source]
        source: CodecError,
    },
    /// An event the log's reader could not read back, for its size: refused before anything
    /// was committed (see `codec::encode_record`).
    #[error(
        "refusing to record a `{kind}` event of `{subject}` in `{path}`: the log could not read it back"
    )]
    TooLarge {
        path: PathBuf,
        subject: String,
        kind: &'static str,
        #[source]
        source: CodecError,
    },
    /// Another process has the log open, where this needs it alone (`log archive`). `holders`
    /// names them where `/proc` tells (`: pid 4242 (unilab soak run …)`), else it is empty.
    #[error("another process has the event log `{path}` open{holders}")]
    InUse { path: PathBuf, holders: String },
    /// An archive file does not hold what the log's `soak_archived` event committed to, or is
    /// not an archive.
    #[error("the archive `{path}` does not hold what the event log committed to: {detail}")]
    Archive { path: PathBuf, detail: String },
    /// A soak's records were moved to an archive file that is not there to read.
    #[error("the records of soak `{soak_id}` were moved to the archive `{path}`, which is missing")]
    ArchiveMissing { path: PathBuf, soak_id: String },
    /// Something other than a file is where the log should be (a named pipe, a directory): it
    /// is not opened, and no reader waits on it.
    #[error("the event log `{path}` is not a regular file: it is {what}")]
    NotAFile { path: PathBuf, what: &'static str },
    /// Something other than a file is where an archive should be (a named pipe, a directory):
    /// it is not read, and no reader waits on it.
    #[error("the archive `{path}` is not a regular file: it is {what}")]
    ArchiveNotAFile { path: PathBuf, what: &'static str },
    /// An archive this user may not open: a permission, which says nothing of what it holds.
    #[error("cannot open the archive `{path}`")]
    ArchiveAccess {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An archive file could not be written (the live log is left as it was).
    #[error("cannot write the archive `{path}`")]
    ArchiveWrite {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Whether an I/O error is the file system being full, or the user's quota on it spent.
pub(super) fn is_no_space(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(error.kind(), StorageFull | QuotaExceeded)
}

impl LogError {
    /// Whether it is about a soak's archive file (missing, damaged, not a file, not to be
    /// opened), not about the live log: what a view of many soaks can leave one soak out for.
    pub(crate) fn is_archive(&self) -> bool {
        matches!(
            self,
            LogError::Archive { .. }
                | LogError::ArchiveMissing { .. }
                | LogError::ArchiveNotAFile { .. }
                | LogError::ArchiveAccess { .. }
        )
    }
}

/// Whether an I/O error is about reaching the file rather than about what it holds.
pub(super) fn is_access(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        error.kind(),
        PermissionDenied | NotADirectory | ReadOnlyFilesystem | IsADirectory
    )
}

impl Boundary for LogError {
    fn exit(&self) -> Exit {
        match self {
            LogError::ForeignScope { .. }
            | LogError::Busy { .. }
            | LogError::StateDir { .. }
            | LogError::Access { .. }
            | LogError::Replaced { .. }
            | LogError::NoSpace { .. }
            | LogError::Untrusted { .. }
            | LogError::InUse { .. }
            | LogError::TooLarge { .. }
            | LogError::ArchiveWrite { .. }
            | LogError::ArchiveAccess { .. } => Exit::Refused,
            LogError::Encode { .. } => Exit::Internal,
            _ => Exit::LogBroken,
        }
    }
}

impl Hint for LogError {
    fn hint(&self) -> Option<String> {
        match self {
            LogError::Unreadable { .. } | LogError::Damaged { .. } => Some(
                "move the file aside to keep it for forensics; unilab starts a new log at that path"
                    .into(),
            ),
            LogError::Chain { .. } => Some(
                "the log was modified or corrupted after it was written; keep a copy and inspect it with `unilab history`"
                    .into(),
            ),
            LogError::Inconsistent { .. } => Some(
                "the events verify but a view derived from them does not; keep a copy of the file for forensics"
                    .into(),
            ),
            LogError::ForeignScope { .. } => Some(
                "each user and host has its own log; pass `--root` to use another state root".into(),
            ),
            LogError::NewerSchema { .. } => {
                Some("use the unilab version that wrote this log, or a newer one".into())
            }
            LogError::Busy { .. } => Some("retry once the other unilab command has finished".into()),
            LogError::Access { .. } => Some(
                "check the permissions of the log and of every directory above it, or choose another state root with `--root` or `UNILAB_ROOT`; the log itself was not touched"
                    .into(),
            ),
            LogError::NoSpace { .. } => Some(
                "free space on that file system (or ask for a larger quota), then run the command again; the log is intact"
                    .into(),
            ),
            LogError::Replaced { .. } => Some(
                "what this process recorded until then is in the file that was moved; put it back at that path to keep one history, and run the command again"
                    .into(),
            ),
            LogError::Untrusted { .. } => Some(
                "keep the state root where only you can write (e.g. `chmod go-w` it), or choose another with `--root` or `UNILAB_ROOT`"
                    .into(),
            ),
            LogError::StateDir { .. } => Some(
                "check the permissions of the state root, or choose another with `--root` or `UNILAB_ROOT`"
                    .into(),
            ),
            LogError::InUse { .. } => Some(
                "wait until it ends (a running soak holds the log until its verdict), then run the command again"
                    .into(),
            ),
            LogError::Archive { .. } => Some(
                "the archive was changed, cut short or replaced by another log's; keep a copy of it and of the log for forensics"
                    .into(),
            ),
            LogError::ArchiveMissing { .. } => Some(
                "put the archive file back beside the log (`unilab log verify` names every archive and whether it is there)"
                    .into(),
            ),
            LogError::NotAFile { .. } => Some(
                "something else took the log's place: move it aside; unilab starts a new log at that path"
                    .into(),
            ),
            LogError::ArchiveNotAFile { .. } => Some(
                "something else took the archive's place: move it aside and put the archive file back beside the log (`unilab log verify` names every archive)"
                    .into(),
            ),
            LogError::ArchiveAccess { .. } => Some(
                "check the permissions of the archive and of the directory holding it: the log's owner must be able to read it; the archive itself was not touched"
                    .into(),
            ),
            LogError::ArchiveWrite { .. } => Some(
                "check the space and permissions of the log's directory, then run the command again; nothing was removed from the log"
                    .into(),
            ),
            LogError::TooLarge { .. } => Some(
                "nothing was recorded and the log is intact; unilab bounds what it records, so this is a defect: please report it with the command that led to it"
                    .into(),
            ),
            LogError::Migration { .. } | LogError::Encode { .. } => None,
        }
    }
}
