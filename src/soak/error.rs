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
    /// The soak's job or rank, as the request and the launcher give them, or joining the job.
    #[error(transparent)]
    Job(#[from] crate::job::JobError),
    #[error("refusing the progress directory `{}`: {problem}", .path.display())]
    ProgressDir {
        path: PathBuf,
        problem: ProgressDirProblem,
    },
    #[error("cannot write the {} `{}`", .kind.as_str(), .path.display())]
    Output {
        kind: OutputFile,
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
    /// The soak ended and its verdict is recorded, but its artifact or report could not be
    /// written.
    #[error("soak `{soak_id}` ended, but writing its {} `{}` failed", .kind.as_str(), .path.display())]
    NotWritten {
        kind: OutputFile,
        soak_id: String,
        path: PathBuf,
        #[source]
        source: Box<SoakError>,
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
    #[error("soak `{0}` is still running: only a finished soak can be archived")]
    NotFinished(String),
    #[error("`{}` already exists", .0.display())]
    OutputExists(PathBuf),
    /// `--metrics-file` names the file of a soak that may still be running.
    #[error("`{}` is the metrics file of soak `{soak_id}`, which may still be running: {why}", .path.display())]
    MetricsFileInUse {
        path: PathBuf,
        soak_id: String,
        why: String,
    },
    #[error("cannot describe `{}`: it is not a directory that can be read", .path.display())]
    NotADirectory {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What `soak run` writes when the soak ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFile {
    Artifact,
    Report,
    /// `--metrics-file`, rewritten at every sample.
    Metrics,
}

impl OutputFile {
    /// The command that writes it from the log.
    fn command(self) -> &'static str {
        match self {
            OutputFile::Artifact => "export",
            // (No command writes the metrics file again: its `NotWritten` has no hint.)
            OutputFile::Report | OutputFile::Metrics => "report",
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            OutputFile::Artifact => "artifact",
            OutputFile::Report => "report",
            OutputFile::Metrics => "metrics file",
        }
    }
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
    /// Two of `--output`, `--report` and `--metrics-file` name one file: the later write would
    /// replace the earlier.
    #[error("`{first}` and `{second}` name the same file `{}`", .path.display())]
    SameFile {
        first: &'static str,
        second: &'static str,
        path: PathBuf,
    },
    #[error("`{}` is not UTF-8", .0.display())]
    NotUtf8(PathBuf),
    #[error(
        "`--py-spy {0}` is not an executable file (give its path, a program on PATH, or `off`)"
    )]
    NoPySpy(String),
    #[error(transparent)]
    Placeholder(#[from] PlaceholderError),
    #[error(transparent)]
    StepLimit(#[from] crate::soak::heartbeat::limits::LimitError),
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
    /// It holds, or lies inside, what unilab writes while the soak runs (`what`, at `at`):
    /// unilab's own writes would count as the command's progress.
    #[error("{} {what} `{}`, which unilab writes while the soak runs: its own writes would count as the command's progress", if *.holds { "it holds" } else { "it is inside" }, .at.display())]
    Overlaps {
        what: &'static str,
        at: PathBuf,
        holds: bool,
    },
}

/// `path` as a shell takes it back, for a command in a hint.
fn quoted(path: &std::path::Path) -> String {
    let text = path.to_string_lossy();
    shlex::try_quote(&text).map_or_else(|_| text.to_string(), |q| q.into_owned())
}

impl ProgressDirProblem {
    /// What to do about it, for the directory at `path`.
    fn hint(&self, path: &std::path::Path) -> String {
        match self {
            ProgressDirProblem::Missing => format!(
                "the command's checkpoints or logs are watched there, so it must exist before the soak starts: check `--progress-dir` for a typo, or create it (`mkdir -p {}`)",
                quoted(path)
            ),
            ProgressDirProblem::Distrusted(Distrust::NotADirectory) => {
                "name the directory the command writes its checkpoints or logs into".into()
            }
            ProgressDirProblem::Distrusted(Distrust::Symlink) => {
                "name the directory itself, not a symbolic link to it".into()
            }
            ProgressDirProblem::Distrusted(Distrust::OthersCanWrite { .. }) => format!(
                "others could fake progress there: close it to them (`chmod go-w {}`)",
                quoted(path)
            ),
            ProgressDirProblem::OnTheWay {
                at,
                reason: Distrust::OthersCanWrite { .. } | Distrust::NotSticky { .. },
            } => format!(
                "others could swap the directory: close `{}` to them (`chmod go-w`, or `chmod +t` for a shared one), or use a directory under your home",
                at.display()
            ),
            ProgressDirProblem::Distrusted(_) | ProgressDirProblem::OnTheWay { .. } => {
                "use a directory of your own that others cannot write, e.g. under your home".into()
            }
            ProgressDirProblem::CannotOpen(_) => {
                "check that the directory still exists and that you can read it".into()
            }
            ProgressDirProblem::Overlaps { .. } => {
                "give the command a progress directory apart from unilab's files (the state root `--root`, `--metrics-file`, the runtime directory under `XDG_RUNTIME_DIR` or `/tmp/unilab-<uid>`)".into()
            }
        }
    }
}

impl SoakError {
    /// The error for an artifact or report (`kind`) that cannot be written to `path`.
    pub(crate) fn output(
        kind: OutputFile,
        path: &std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| SoakError::Output {
            kind,
            path: path.to_owned(),
            source,
        }
    }
}

impl SoakError {
    /// Whether this is a file found at its name when it was to be put there, which was kept
    /// ([`crate::soak::artifact::Placement::New`]).
    fn is_taken(&self) -> bool {
        matches!(self, SoakError::Output { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists)
    }
}

/// `path` with `soak_id` before its extension: a name of this soak's own beside it.
fn beside(path: &std::path::Path, soak_id: &str) -> std::path::PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{soak_id}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{soak_id}"),
    };
    path.with_file_name(name)
}

impl SoakError {
    /// The error for the temporary file the rows of an artifact, report or CSV pass through.
    pub(crate) fn spool(source: std::io::Error) -> Self {
        SoakError::Spool {
            dir: std::env::temp_dir(),
            source,
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
            // The template is right; what the environment filled it with is refused.
            SoakError::Invalid(Invalid::Placeholder(e)) if e.is_refusal() => Exit::Refused,
            SoakError::Invalid(_) => Exit::Usage,
            SoakError::Log(e) => e.exit(),
            SoakError::Job(e) => e.exit(),
            SoakError::NotWritten { source, .. } => source.exit(),
            _ => Exit::Refused,
        }
    }
}

impl Hint for SoakError {
    fn hint(&self) -> Option<String> {
        match self {
            SoakError::Invalid(Invalid::Placeholder(e)) if e.is_refusal() => Some(
                "check what the launcher set, or leave the placeholder out of the file name".into(),
            ),
            SoakError::Invalid(Invalid::SameFile { .. }) => Some(
                "give each its own file; a placeholder such as `{soak_id}` keeps them apart".into(),
            ),
            SoakError::Invalid(_) => Some("see `unilab soak run --help`".into()),
            SoakError::ProgressDir { path, problem } => Some(problem.hint(path)),
            SoakError::Output { source, .. }
                if source.raw_os_error() == Some(nix::errno::Errno::ENAMETOOLONG as i32) =>
            {
                Some("choose a shorter name: a file's name may hold at most 255 bytes on most filesystems, its path 4096".into())
            }
            SoakError::Output { .. } => Some("choose a file in a directory you can write".into()),
            SoakError::NotWritten {
                kind: OutputFile::Metrics,
                ..
            } => None,
            SoakError::NotWritten {
                kind,
                soak_id,
                path,
                source,
            } if source.is_taken() => Some(format!(
                "`{}` is kept; `unilab soak {} {soak_id} --output {}` writes this soak's from the log to a file of its own",
                path.display(),
                kind.command(),
                quoted(&beside(path, soak_id))
            )),
            SoakError::NotWritten {
                kind,
                soak_id,
                path,
                ..
            } => Some(format!(
                "once that is fixed, `unilab soak {} {soak_id} --output {}` writes it from the log",
                kind.command(),
                quoted(path)
            )),
            SoakError::NoSuchSoak(_) => Some("see `unilab soak list`".into()),
            SoakError::Ambiguous { .. } => {
                Some("give more of the id (`unilab soak list` shows them)".into())
            }
            SoakError::StillRunning(id) => Some(format!(
                "wait for its verdict; `unilab soak show {id}` shows how it is going"
            )),
            SoakError::NotFinished(id) => Some(format!(
                "archive it once it has its verdict (`unilab soak show {id}` shows how it is going); `unilab log archive --finished-before DATE` archives only finished soaks"
            )),
            SoakError::OutputExists(_) => {
                Some("choose another file, or add `--force` to replace it".into())
            }
            SoakError::MetricsFileInUse { .. } => Some(
                "give each soak its own file (`--metrics-file 'unilab-{soak_id}.prom'`), or add `--force` once that soak is known to have ended".into(),
            ),
            SoakError::Log(e) => e.hint(),
            SoakError::Job(e) => e.hint(),
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
