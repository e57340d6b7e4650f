//! Errors of the soak commands.

use std::path::PathBuf;

use crate::diagnostic::{Boundary, Exit, Hint};
use crate::log::LogError;
use crate::paths::Distrust;
use crate::soak::launch::PlaceholderError;

#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("refusing the progress directory `{}`: {problem}", .path.display())]
    ProgressDir {
        path: PathBuf,
        problem: ProgressDirProblem,
    },
    #[error("cannot write the artifact `{}`", .path.display())]
    Output {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot keep the rows in a temporary file in `{}`", .dir.display())]
    Spool {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot prepare `{}`", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Log(Box<LogError>),
    #[error("no soak `{0}` is recorded")]
    NoSuchSoak(String),
    #[error("`{id}` names {} soaks: {}", .candidates.len(), .candidates.join(", "))]
    Ambiguous { id: String, candidates: Vec<String> },
    #[error("soak `{0}` is still running: it has no verdict and no artifact yet")]
    StillRunning(String),
    #[error("`{}` already exists", .0.display())]
    OutputExists(PathBuf),
    #[error("cannot describe `{}`: it is not a directory that can be read", .path.display())]
    NotADirectory {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What a soak's parameters got wrong: refused before anything starts, like a bad flag.
#[derive(Debug, thiserror::Error)]
pub enum Invalid {
    #[error("no command to run: put it after `--`")]
    NoCommand,
    #[error("`--sample-interval` must be at least 10 ms")]
    IntervalTooShort,
    /// A limit (`--startup-timeout`, `--stale-progress`) shorter than one sample interval.
    #[error("`{0}` must be at least one sample interval")]
    ShorterThanInterval(&'static str),
    #[error("`--cwd {}` is not a directory", .0.display())]
    Cwd(PathBuf),
    #[error("the directory of `--output {}` does not exist", .0.display())]
    NoOutputDirectory(PathBuf),
    #[error("`{}` is not UTF-8", .0.display())]
    NotUtf8(PathBuf),
    #[error(
        "`--py-spy {0}` is not an executable file (give its path, a program on PATH, or `off`)"
    )]
    NoPySpy(String),
    #[error("`{0} 0` would fail every soak; give a budget above zero, or leave the flag out")]
    ZeroBudget(&'static str),
    #[error(transparent)]
    Placeholder(#[from] PlaceholderError),
}

/// Why a progress directory cannot be watched: progress that others could fake, or that is not
/// there, would be no liveness signal.
#[derive(Debug, thiserror::Error)]
pub enum ProgressDirProblem {
    #[error("it does not exist")]
    Missing,
    #[error(transparent)]
    Distrusted(Distrust),
    #[error("`{}` on the way to it: {reason}", .at.display())]
    OnTheWay { at: PathBuf, reason: Distrust },
    #[error("cannot open it: {0}")]
    CannotOpen(std::io::Error),
}

impl SoakError {
    /// The error for an artifact or report that cannot be written to `path`.
    pub(crate) fn output(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| SoakError::Output {
            path: path.to_owned(),
            source,
        }
    }
}

impl SoakError {
    /// The error for the temporary file the rows of an artifact, report or CSV pass through.
    pub(crate) fn spool(source: std::io::Error) -> Self {
        SoakError::Spool {
            dir: std::env::temp_dir(),
            source,
        }
    }

    /// The error for an artifact that could not be streamed to `path`.
    pub(crate) fn streaming(
        path: &std::path::Path,
    ) -> impl FnOnce(crate::soak::artifact::stream::StreamError) -> Self + '_ {
        use crate::soak::artifact::stream::StreamError;
        move |e| match e {
            StreamError::Log(e) => e.into(),
            StreamError::Io(source) => SoakError::output(path)(source),
            StreamError::Spool(source) => SoakError::spool(source),
            StreamError::NoSuchSoak(id) => SoakError::NoSuchSoak(id),
        }
    }
}

impl From<LogError> for SoakError {
    fn from(e: LogError) -> Self {
        SoakError::Log(Box::new(e))
    }
}

impl Boundary for SoakError {
    fn exit(&self) -> Exit {
        match self {
            SoakError::Invalid(_) => Exit::Usage,
            SoakError::Log(e) => e.exit(),
            _ => Exit::Refused,
        }
    }
}

impl Hint for SoakError {
    fn hint(&self) -> Option<String> {
        match self {
            SoakError::Invalid(_) => Some("see `unilab soak run --help`".into()),
            SoakError::ProgressDir { .. } => Some(
                "use a directory you own that others cannot write (e.g. `chmod go-w DIR`)".into(),
            ),
            SoakError::Output { .. } => {
                Some("`unilab soak export ID --output FILE` writes it again from the log".into())
            }
            SoakError::NoSuchSoak(_) => Some("see `unilab soak list`".into()),
            SoakError::Ambiguous { .. } => {
                Some("give more of the id (`unilab soak list` shows them)".into())
            }
            SoakError::StillRunning(id) => Some(format!(
                "wait for its verdict; `unilab soak show {id}` shows how it is going"
            )),
            SoakError::OutputExists(_) => {
                Some("choose another file, or add `--force` to replace it".into())
            }
            SoakError::Log(e) => e.hint(),
            SoakError::NotADirectory { .. } => {
                Some("name an existing directory, or run it inside one".into())
            }
            SoakError::Spool { .. } => Some(
                "set TMPDIR to a directory you can write, with room for the soak's rows".into(),
            ),
            SoakError::Io { .. } => None,
        }
    }
}
