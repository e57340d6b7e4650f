//! Errors of the MPS commands: each says what was refused and why, and what to do instead.

use std::path::PathBuf;

use crate::diagnostic::{Boundary, Exit, Hint};
use crate::event::{StaleReason, StopMethod, TopologyMode};
use crate::gpu::mask::MaskError;
use crate::gpu::selector::SelectorError;
use crate::gpu::smi::SmiError;
use crate::log::LogError;
use crate::process::SignalError;
use crate::tool::ToolError;

#[derive(Debug, thiserror::Error)]
pub enum MpsError {
    #[error(transparent)]
    Log(Box<LogError>),
    #[error("cannot list this host's GPUs")]
    Smi(#[source] SmiError),
    #[error(transparent)]
    Mask(#[from] MaskError),
    #[error("cannot use the selector")]
    Selector(#[source] SelectorError),
    #[error("`{selector}` resolves to {mode} on {}; only single_gpu can start an MPS daemon", crate::text::count(.gpus.len() as u64, "GPU"))]
    ModeNotStartable {
        selector: String,
        mode: TopologyMode,
        gpus: Vec<String>,
    },
    #[error("`{0}` is not a valid daemon name")]
    BadName(String),
    #[error("the Slurm job id `{0}` cannot scope a daemon name")]
    BadJob(String),
    #[error("no live daemon is shared for {gpu}; its start failed or it was stopped")]
    NotShared { gpu: String },
    #[error("daemon `{name}` (pid {pid}) already serves {gpu}")]
    AlreadyRunning { name: String, pid: u32, gpu: String },
    #[error("an MPS control daemon that unilab did not start answers in `{}`{}", .pipe_directory.display(), pid_note(*.pid))]
    ForeignDaemon {
        pipe_directory: PathBuf,
        pid: Option<u32>,
    },
    #[error("refusing the directory `{}`: {reason}", .path.display())]
    UnsafeDirectory {
        path: PathBuf,
        reason: crate::paths::Distrust,
    },
    #[error("the control socket path `{}` is {len} bytes; UNIX sockets allow at most 107", .path.display())]
    SocketPathTooLong { path: PathBuf, len: usize },
    #[error("cannot prepare `{}`", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the MPS control daemon `{name}` (pid {pid}) {}, but the log could not record it: {}",
        .step.what(),
        stopped_note(*.stopped)
    )]
    NotRecorded {
        name: String,
        pid: u32,
        step: Unrecorded,
        /// How it was stopped; `None` when stopping it failed too.
        stopped: Option<StopMethod>,
        #[source]
        source: Box<LogError>,
    },
    #[error("the MPS control daemon `{name}` did not start: {reason}")]
    StartFailed { name: String, reason: String },
    #[error("cannot run the MPS control client")]
    Control(#[source] ToolError),
    #[error("the MPS control tool `{program}` was not found")]
    ControlMissing { program: String },
    #[error("no MPS daemon is recorded for this user on this host")]
    NoDaemon,
    #[error("no daemon named `{0}` is recorded")]
    NoSuchDaemon(String),
    #[error("no live daemon serves {0}")]
    NoDaemonForGpu(String),
    #[error("`{selector}` selects {count} GPUs; `--gpu` takes a selector that names one")]
    NotOneGpu { selector: String, count: usize },
    #[error("several daemons are recorded ({}); name one", .0.join(", "))]
    SeveralDaemons(Vec<String>),
    #[error("daemon `{name}` (pid {pid}) is not running: {}", .reason.as_str())]
    NotRunning {
        name: String,
        pid: u32,
        reason: StaleReason,
    },
    #[error(
        "daemon `{name}` (pid {pid}) is wedged: it accepts connections on its control socket but gives no answer"
    )]
    Wedged { name: String, pid: u32 },
    #[error("cannot stop daemon `{name}`")]
    Signal {
        name: String,
        #[source]
        source: SignalError,
    },
    #[error("another unilab command held `{}` for {} s", .lock.display(), .waited.as_secs())]
    Busy {
        lock: PathBuf,
        waited: std::time::Duration,
    },
    #[error("a start of `{name}` by pid {pid} is under way")]
    StartUnderWay { name: String, pid: u32 },
    #[error("cannot run `{command}`")]
    Exec {
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// The command runs but cannot be waited for: the environment failed unilab, exit 3.
    #[error("cannot wait for the command")]
    Wait(#[source] std::io::Error),
}

impl From<LogError> for MpsError {
    fn from(e: LogError) -> Self {
        MpsError::Log(Box::new(e))
    }
}

/// Which step of a start the log could not take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unrecorded {
    Started,
    VerifiedLive,
}

impl Unrecorded {
    fn what(self) -> &'static str {
        match self {
            Unrecorded::Started => "was launched",
            Unrecorded::VerifiedLive => "answered",
        }
    }
}

fn stopped_note(stopped: Option<StopMethod>) -> String {
    match stopped {
        Some(method) => format!(
            "it was stopped ({}), so nothing is left running",
            method.as_str()
        ),
        None => "stopping it failed too: it may still run".into(),
    }
}

fn pid_note(pid: Option<u32>) -> String {
    pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
}

impl Boundary for MpsError {
    fn exit(&self) -> Exit {
        match self {
            MpsError::Log(e) => e.exit(),
            MpsError::NotRecorded { source, .. } => source.exit(),
            MpsError::BadName(_) => Exit::Usage,
            MpsError::Exec { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Exit::CommandNotFound
            }
            MpsError::Exec { .. } => Exit::CannotRun,
            _ => Exit::Refused,
        }
    }
}

impl Hint for MpsError {
    fn hint(&self) -> Option<String> {
        Some(match self {
            MpsError::Mask(_) => "set `CUDA_VISIBLE_DEVICES` to whole-GPU indices or UUIDs".into(),
            MpsError::ModeNotStartable { gpus, .. } => format!(
                "start one daemon per GPU, e.g. `unilab mps start {}`",
                gpus.first().map(String::as_str).unwrap_or("0")
            ),
            MpsError::BadName(_) => {
                "use 1 to 64 letters, digits, `-`, `_` or `.`, not starting with `.`".into()
            }
            MpsError::BadJob(_) => {
                "`SLURM_JOB_ID` should be the job's number; unset it to run outside the job".into()
            }
            MpsError::NotShared { .. } => "see `unilab history` for why".into(),
            MpsError::AlreadyRunning { name, .. } => format!(
                "use it with `unilab mps exec {name} -- CMD`, or stop it with `unilab mps stop {name}`"
            ),
            MpsError::ForeignDaemon { .. } => {
                "unilab never touches a daemon it cannot prove it started; choose another `--pipe-dir`"
                    .into()
            }
            MpsError::UnsafeDirectory { .. } => {
                "use a directory you own that others cannot write, or let unilab choose one".into()
            }
            MpsError::SocketPathTooLong { .. } => {
                "choose a shorter `--pipe-dir` or `--name`".into()
            }
            MpsError::StartFailed { name, .. } => format!(
                "see the daemon's `control.log`, and `unilab history --daemon {name}`"
            ),
            MpsError::ControlMissing { .. } => "install NVIDIA's MPS (`nvidia-cuda-mps-control`, part of the CUDA driver), or name it with `UNILAB_MPS_CONTROL=/path/to/nvidia-cuda-mps-control`".into(),
            MpsError::NoDaemon => "start one with `unilab mps start`".into(),
            MpsError::Busy { .. } => {
                "another start or stop of this daemon or GPU is under way; retry once it has finished (`unilab history` shows it)".into()
            }
            MpsError::StartUnderWay { name, .. } => format!(
                "retry once it has finished; `unilab history --daemon {name}` shows it"
            ),
            MpsError::NoSuchDaemon(_) | MpsError::SeveralDaemons(_) => {
                "see `unilab mps list`".into()
            }
            MpsError::NoDaemonForGpu(_) => "see `unilab mps list`, or start one with `unilab mps start`".into(),
            MpsError::NotOneGpu { .. } => {
                "`--gpu` takes `N` or `GPU-<uuid prefix>`; see `unilab mps plan`".into()
            }
            MpsError::Wedged { name, .. } => format!(
                "`unilab mps stop {name}` stops it (by signal, as it cannot take `quit`); then start a new daemon"
            ),
            MpsError::NotRunning { name, .. } => {
                format!("`unilab mps stop {name}` cleans the record; then start a new daemon")
            }
            // What they wrap knows what to suggest.
            MpsError::Log(e) => return e.hint(),
            MpsError::NotRecorded {
                name,
                stopped: None,
                ..
            } => format!("once the log can take it, `unilab mps stop {name}` stops the daemon"),
            MpsError::NotRecorded { source, .. } => return source.hint(),
            MpsError::Smi(e) => return e.hint(),
            MpsError::Selector(e) => return e.hint(),
            MpsError::Io { .. }
            | MpsError::Control(_)
            | MpsError::Signal { .. }
            | MpsError::Exec { .. }
            | MpsError::Wait(_) => return None,
        })
    }
}
