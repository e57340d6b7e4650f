//! The top-level error, and how it is shown to a person.
//!
//! Rendered as `error: <what>`, then one `caused by: <why>` line for each source, then an
//! optional `hint: <what to do>` — the first hint found walking from the error along its
//! `source()` chain. No colour, no trailing period. The exit code is the boundary error's own
//! decision (`Boundary::exit`).

use std::error::Error as StdError;
use std::fmt::Write as _;

use crate::diagnostic::{Boundary, Exit};
use crate::duration::DurationError;
use crate::log::LogError;
use crate::mps::error::MpsError;
use crate::paths::PathError;
use crate::soak::error::SoakError;
use crate::style::{Palette, Tone};
use crate::text::foreign;

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
    #[error(transparent)]
    Job(#[from] crate::job::JobError),
    #[error("cannot write to standard output")]
    Stdout(#[source] std::io::Error),
    /// The reader of our standard output went away (`unilab history | head`): not a failure.
    #[error("standard output was closed")]
    BrokenPipe,
    /// The environment unilab runs in failed it: not a bug, and not the user's input.
    #[error("cannot {action}")]
    Environment {
        action: String,
        #[source]
        source: std::io::Error,
    },
    /// A variable of the environment that unilab reads holds what it cannot use: refused
    /// before anything is done, like a bad flag.
    #[error("`{name}` is not usable")]
    Variable {
        name: &'static str,
        #[source]
        source: DurationError,
    },
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
            SoakError::Job(job) => Error::Job(job),
            other => Error::Soak(other),
        }
    }
}

impl Error {
    /// An environment failure while trying to `action` (e.g. "read the current directory").
    pub fn environment(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        move |source| Error::Environment {
            action: action.into(),
            source,
        }
    }

    /// The boundary error this wraps, if any.
    fn boundary(&self) -> Option<&dyn Boundary> {
        match self {
            Error::Log(e) => Some(e),
            Error::Paths(e) => Some(e),
            Error::Mps(e) => Some(e),
            Error::Soak(e) => Some(e),
            Error::Job(e) => Some(e),
            Error::Stdout(_)
            | Error::BrokenPipe
            | Error::Environment { .. }
            | Error::Variable { .. }
            | Error::Internal(_) => None,
        }
    }

    pub fn exit(&self) -> Exit {
        match (self.boundary(), self) {
            (Some(boundary), _) => boundary.exit(),
            (None, Error::BrokenPipe) => Exit::Success,
            (None, Error::Internal(_)) => Exit::Internal,
            (None, Error::Variable { .. }) => Exit::Usage,
            (None, _) => Exit::Refused,
        }
    }

    /// What to do next: the boundary error's hint (each boundary error asks what it wraps, by
    /// type, so a new error type cannot go unasked), or this error's own.
    pub fn hint(&self) -> Option<String> {
        if let Some(boundary) = self.boundary() {
            return boundary.hint();
        }
        match self {
            Error::Internal(_) => {
                Some("this is a bug in unilab; please report it with the command you ran".into())
            }
            Error::Variable { name, .. } => Some(format!(
                "unset `{name}`, or give it a duration above 0, e.g. `{name}=30`"
            )),
            Error::Log(_)
            | Error::Paths(_)
            | Error::Mps(_)
            | Error::Soak(_)
            | Error::Job(_)
            | Error::Stdout(_)
            | Error::BrokenPipe
            | Error::Environment { .. } => None,
        }
    }

    /// The error and its causes on one line, `: ` between them: for a warning that reports an
    /// error and goes on.
    pub(crate) fn chain_text(&self) -> String {
        crate::diagnostic::chain_text(self)
    }

    /// The error as one JSON object, shown on standard error under `--json` so that a script
    /// never parses prose: `error`, `causes` (outermost first), `hint` and `exit_code`.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let mut causes = Vec::new();
        let mut source = StdError::source(self);
        while let Some(cause) = source {
            causes.push(cause.to_string());
            source = cause.source();
        }
        serde_json::json!({
            "error": self.to_string(),
            "causes": causes,
            "hint": self.hint(),
            "exit_code": self.exit().code(),
        })
    }

    /// The text shown on standard error.
    pub fn render(&self, palette: Palette) -> String {
        let mut out = format!(
            "{} {}\n",
            palette.paint(Tone::Bad, "error:"),
            foreign(&self.to_string())
        );
        let mut source = StdError::source(self);
        while let Some(cause) = source {
            let _ = writeln!(out, "  caused by: {}", foreign(&cause.to_string()));
            source = cause.source();
        }
        if let Some(hint) = self.hint() {
            let _ = writeln!(
                out,
                "{} {}",
                palette.paint(Tone::Aside, "hint:"),
                foreign(&hint)
            );
        }
        out
    }
}

/// Turns a write error on stdout into the right [`Error`].
pub(crate) fn stdout_error(e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Error::BrokenPipe
    } else {
        Error::Stdout(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boundary_error_gives_the_hint_of_what_it_wraps() {
        // The MPS error has no hint of its own for nvidia-smi's failure: what it wraps does.
        let error = Error::from(MpsError::Smi(crate::gpu::smi::SmiError::NoDriver));
        assert_eq!(error.exit(), Exit::Refused);
        let rendered = error.render(Palette::PLAIN);
        assert_eq!(
            rendered,
            "error: cannot list this host's GPUs\n  caused by: nvidia-smi cannot communicate with the NVIDIA driver\nhint: load the NVIDIA kernel module, or run on a host with a GPU\n"
        );
    }

    #[test]
    fn each_boundary_decides_its_exit_code() {
        let log = |e: LogError| Error::from(e).exit();
        assert_eq!(
            log(LogError::Busy {
                path: "/x".into(),
                waited_ms: 1
            }),
            Exit::Refused
        );
        assert_eq!(
            log(LogError::Damaged {
                path: "/x".into(),
                detail: "torn".into()
            }),
            Exit::LogBroken
        );
        assert_eq!(
            Error::from(SoakError::Invalid(crate::soak::error::Invalid::NoCommand)).exit(),
            Exit::Usage
        );
        // A log error inside a domain error is still the log's to classify.
        let wrapped = Error::from(MpsError::from(LogError::Damaged {
            path: "/x".into(),
            detail: "torn".into(),
        }));
        assert_eq!(wrapped.exit(), Exit::LogBroken);
        assert_eq!(Error::Internal("oops".into()).exit(), Exit::Internal);
        assert_eq!(Error::BrokenPipe.exit(), Exit::Success);
    }

    #[test]
    fn an_environment_failure_is_not_a_bug() {
        let error = Error::environment("read the current directory")(std::io::Error::from(
            std::io::ErrorKind::NotFound,
        ));
        assert_eq!(error.exit(), Exit::Refused);
        assert!(error.hint().is_none());
        assert!(
            error
                .render(Palette::PLAIN)
                .starts_with("error: cannot read the current directory\n  caused by: ")
        );
    }
}
