//! The top-level error, its exit code, and how it is shown to a person.
//!
//! Rendered as `error: <what>`, then one `caused by: <why>` line for each source, then an
//! optional `hint: <what to do>`. No colour, no trailing period.

use std::fmt::Write as _;

use crate::log::LogError;
use crate::mps::error::MpsError;
use crate::paths::PathError;
use crate::soak::supervise::SoakError;

/// unilab's exit codes, as documented in the README.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Success, or a soak that passed.
    Success,
    /// A soak failed; its artifact is still written.
    SoakFailed,
    /// The command line was not understood.
    Usage,
    /// A user-actionable refusal or error.
    Refused,
    /// A recorded daemon was found stale and its record cleaned.
    Stale,
    /// The event log failed verification or cannot be read.
    LogBroken,
    /// A bug in unilab.
    Internal,
    /// The exit status of a command unilab ran for the user (`mps exec`).
    Passthrough(u8),
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::SoakFailed => 1,
            Exit::Usage => 2,
            Exit::Refused => 3,
            Exit::Stale => 4,
            Exit::LogBroken => 5,
            Exit::Internal => 70,
            Exit::Passthrough(code) => code,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Paths(#[from] PathError),
    #[error(transparent)]
    Mps(MpsError),
    #[error(transparent)]
    Soak(SoakError),
    #[error("cannot write to standard output")]
    Stdout(#[source] std::io::Error),
    /// The reader of our standard output went away (`unilab history | head`): not a failure.
    #[error("standard output was closed")]
    BrokenPipe,
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<MpsError> for Error {
    fn from(e: MpsError) -> Self {
        match e {
            MpsError::Log(log) => Error::Log(*log),
            other => Error::Mps(other),
        }
    }
}

impl From<SoakError> for Error {
    fn from(e: SoakError) -> Self {
        match e {
            SoakError::Log(log) => Error::Log(*log),
            other => Error::Soak(other),
        }
    }
}

impl Error {
    pub fn exit(&self) -> Exit {
        match self {
            Error::Soak(SoakError::Invalid(_)) => Exit::Usage,
            Error::Soak(_) => Exit::Refused,
            Error::Mps(e) if e.is_stale() => Exit::Stale,
            Error::Mps(_) => Exit::Refused,
            Error::Log(e) => match e {
                LogError::ForeignScope { .. }
                | LogError::Busy { .. }
                | LogError::StateDir { .. } => Exit::Refused,
                LogError::Encode { .. } => Exit::Internal,
                _ => Exit::LogBroken,
            },
            Error::Paths(_) => Exit::Refused,
            Error::Stdout(_) => Exit::Refused,
            Error::BrokenPipe => Exit::Success,
            Error::Internal(_) => Exit::Internal,
        }
    }

    pub fn hint(&self) -> Option<String> {
        match self {
            Error::Log(e) => e.hint(),
            Error::Paths(e) => e.hint(),
            Error::Mps(e) => e.hint(),
            Error::Soak(e) => e.hint(),
            Error::Internal(_) => {
                Some("this is a bug in unilab; please report it with the command you ran".into())
            }
            Error::Stdout(_) | Error::BrokenPipe => None,
        }
    }

    /// The text shown on standard error.
    pub fn render(&self) -> String {
        let mut out = format!("error: {self}\n");
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            let _ = writeln!(out, "  caused by: {cause}");
            source = cause.source();
        }
        if let Some(hint) = self.hint() {
            let _ = writeln!(out, "hint: {hint}");
        }
        out
    }
}

/// Turns a write error on stdout into the right [`Error`].
pub fn stdout_error(e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Error::BrokenPipe
    } else {
        Error::Stdout(e)
    }
}
