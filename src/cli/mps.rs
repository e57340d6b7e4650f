//! `unilab mps`'s definitions: your own CUDA MPS control daemons.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use clap_complete::ArgValueCompleter;

use super::complete;
use crate::duration::parse_duration;
use crate::mps::names::name_flag;

#[derive(Debug, Subcommand)]
pub(crate) enum MpsCommand {
    /// What this host has: GPUs, control pipes, your daemons (read-only)
    Status,
    /// Check everything `mps start` depends on (read-only; exit 3 when a check fails)
    Doctor {
        /// GPU selector: `N`, `GPU-<uuid prefix>`, `A,B`, `each:A,B` or `all`
        selector: Option<String>,
        /// Also check the framework's view: run this Python, import torch in it, and compare
        /// the GPUs it numbers with unilab's (same GPUs, same order)
        #[arg(long, value_name = "PYTHON", conflicts_with = "framework_view")]
        python: Option<PathBuf>,
        /// The framework's view as JSON, as the Python package's `doctor(torch_module=...)`
        /// writes it (instead of running a Python)
        #[arg(long = "framework-view", value_name = "FILE")]
        framework_view: Option<PathBuf>,
    },
    /// What a selector resolves to under the current mask, and whether a daemon can start for it (read-only)
    Plan {
        /// GPU selector: `N`, `GPU-<uuid prefix>`, `A,B`, `each:A,B` or `all`
        selector: Option<String>,
    },
    /// Start an MPS control daemon for one GPU
    #[command(after_help = "\
Examples:
  unilab mps start                 the sole visible GPU
  unilab mps start 1               visible ordinal 1 (see `unilab mps plan 1`)
  unilab mps start GPU-1111aaaa --name trainer
  unilab mps start 0 --foreground  until Ctrl-C
  unilab mps start 0 --active-thread-percentage 25 --pinned-memory-limit 8GiB")]
    Start(StartArgs),
    /// Stop a daemon unilab started (the sole live one when no name is given); with none
    /// recorded, there is nothing to stop (exit 0)
    Stop(StopArgs),
    /// List your daemons with their liveness (read-only)
    List,
    /// Print the environment that points CUDA clients at a daemon
    Env(TargetArgs),
    /// Run a command with the environment of a daemon
    #[command(after_help = "\
With --shared, the positional argument is a GPU selector: the first process for the GPU (in this
Slurm job, under Slurm) starts its daemon, the others wait until it is verified live and use it,
and the last one to finish stops it:
  srun -N1 -n4 unilab mps exec --shared -- python train.py")]
    Exec {
        #[command(flatten)]
        target: TargetArgs,
        /// Attach to the GPU's shared daemon, starting it if none runs; the last one out stops it
        #[arg(long, conflicts_with = "gpu")]
        shared: bool,
        #[command(flatten)]
        limits: ClientLimitArgs,
        /// The command and its arguments
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
}

#[derive(Debug, Args)]
pub(crate) struct StartArgs {
    /// GPU selector: `N`, `GPU-<uuid prefix>`; omitted: the sole visible GPU
    pub selector: Option<String>,
    /// Daemon name (default: `gpu-` and the first 8 hex digits of the GPU's UUID)
    #[arg(long, value_parser = name_flag)]
    pub name: Option<String>,
    /// Pipe directory (default: under `$XDG_RUNTIME_DIR/unilab/mps` or `/tmp/unilab-<uid>/mps`)
    #[arg(long = "pipe-dir", value_name = "DIR")]
    pub pipe_dir: Option<PathBuf>,
    /// Log directory (default: under the state root)
    #[arg(long = "log-dir", value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// Run the daemon in the foreground; Ctrl-C stops it
    #[arg(long)]
    pub foreground: bool,
    #[command(flatten)]
    pub limits: DaemonLimitArgs,
}

/// The limits `mps start` sets on the daemon: the defaults of every client it serves.
#[derive(Debug, Args)]
pub(crate) struct DaemonLimitArgs {
    /// The share of the GPU's SMs each client may use, in percent (above 0, at most 100): set on
    /// the daemon and read back; the start is refused, and the daemon stopped, if it does not hold
    #[arg(long = "active-thread-percentage", value_name = "P", value_parser = crate::mps::limits::parse_percentage)]
    pub active_thread_percentage: Option<f64>,
    /// The device memory each client process may pin (`512MiB`, `40GiB`; whole MiB): set on the
    /// daemon and read back like `--active-thread-percentage`
    #[arg(long = "pinned-memory-limit", value_name = "SIZE", value_parser = crate::mps::limits::parse_pinned_limit)]
    pub pinned_memory_limit: Option<u64>,
}

/// The limits `mps exec` gives its command, as MPS clients take them.
#[derive(Debug, Args)]
pub(crate) struct ClientLimitArgs {
    /// The share of the GPU's SMs the command may use, in percent
    /// (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`); at most what the daemon allows
    #[arg(long = "active-thread-percentage", value_name = "P", value_parser = crate::mps::limits::parse_percentage)]
    pub active_thread_percentage: Option<f64>,
    /// The device memory each client process may pin (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`): the
    /// limit applies per client process, so a command that starts several CUDA processes may
    /// pin this much in each
    #[arg(long = "pinned-memory-limit", value_name = "SIZE", value_parser = crate::mps::limits::parse_pinned_limit)]
    pub pinned_memory_limit: Option<u64>,
}

#[derive(Debug, Args)]
pub(crate) struct StopArgs {
    /// The daemon to stop
    #[arg(conflicts_with = "all", add = ArgValueCompleter::new(complete::daemon_names))]
    pub name: Option<String>,
    /// Stop every daemon you have recorded
    #[arg(long, conflicts_with = "job")]
    pub all: bool,
    /// Stop every daemon of this Slurm job (for an epilog)
    #[arg(long, value_name = "ID", conflicts_with = "name")]
    pub job: Option<String>,
    /// How long to wait after `quit`, and after SIGTERM, before escalating
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub grace: Duration,
}

#[derive(Debug, Args)]
pub(crate) struct TargetArgs {
    /// The daemon (default: the sole live one)
    #[arg(conflicts_with = "gpu", add = ArgValueCompleter::new(complete::daemon_names))]
    pub name: Option<String>,
    /// The sole live daemon serving this GPU: `N` (the visible ordinal) or `GPU-<uuid prefix>`
    #[arg(long, value_name = "SELECTOR")]
    pub gpu: Option<String>,
}
