//! The command-line definitions (clap), apart from the logic in `commands`: the top-level
//! [`Cli`] here, each verb group's arguments in a file of its own, as `commands` has them.
//!
//! The domain never sees these types: a command maps them into the domain's own request
//! (`soak::SoakRequest`, `mps::spec::StartRequest`) before it checks anything. What a flag's
//! value must be to mean anything (a job's name, a size, a duration, a signal one can catch)
//! is decided beside the type it becomes; what is here is clap's glue.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub(crate) mod complete;
pub(crate) mod history;
pub(crate) mod internal;
pub(crate) mod job;
pub(crate) mod log;
pub(crate) mod mps;
pub(crate) mod soak;
mod values;

use history::HistoryArgs;
use job::JobCommand;
use log::LogCommand;
use mps::MpsCommand;
use soak::SoakCommand;

/// What `unilab --help` adds after the commands: the environment, durations, exit codes.
const AFTER_HELP: &str = "\
Environment:
  UNILAB_ROOT          the state root when --root is not given
  UNILAB_NVIDIA_SMI    the nvidia-smi to run (default: nvidia-smi on PATH)
  UNILAB_MPS_CONTROL   the nvidia-cuda-mps-control to run (default: on PATH)
  UNILAB_TOOL_TIMEOUT  how long an external tool may take (a duration; default 10s)
  NO_COLOR             no colour unless --color=always asks for it

Durations: plain seconds (0.5, 90) or parts with units: 500ms, 90s, 10m, 2h, 2d, 1h30m.

Soak ids: a full id, a unique prefix of one or of its random part (`ff95`), or `latest`.

Exit codes: 0 success or a soak that passed · 1 a soak failed · 2 usage error ·
  3 refused (with what to do) · 4 a stale daemon record was cleaned · 5 the event log is damaged ·
  70 a bug · mps exec: its command's code, 126 cannot run, 127 not found.

Under --json, output is JSON on stdout and a failure is one JSON object on stderr.";

#[derive(Debug, Parser)]
#[command(
    name = "unilab",
    version,
    about = "User-owned CUDA MPS daemons and soak supervision on shared GPU hosts",
    long_about = None,
    propagate_version = true,
    after_help = AFTER_HELP
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// The options every command takes, under a heading of their own in every command's help, apart
/// from the command's own.
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub(crate) struct GlobalArgs {
    /// State root (default: `$UNILAB_ROOT`, else `$XDG_STATE_HOME/unilab`, else
    /// `~/.local/state/unilab`)
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Machine-readable output on standard output
    #[arg(long, global = true)]
    pub json: bool,
    /// Print only data and errors
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Print what unilab is doing on standard error (`-vv`: every sample of a soak too)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Colour statuses and errors: on a terminal (`auto`, unless `NO_COLOR` is set), `always`
    /// or `never`
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "WHEN",
        default_value = "auto"
    )]
    pub color: crate::style::ColorChoice,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Start, inspect and stop your own CUDA MPS control daemons
    #[command(subcommand)]
    Mps(MpsCommand),
    /// Supervise a long training command and judge it by its progress
    #[command(subcommand)]
    Soak(SoakCommand),
    /// A job's ranks side by side, from every host's log: which rank tripped, which hung
    #[command(subcommand)]
    Job(JobCommand),
    /// Print the runtime snapshot (source, GPU, software, environment) of a directory
    Snapshot {
        /// The directory whose git checkout to describe (default: the current one)
        dir: Option<PathBuf>,
    },
    /// Replay the event log as a timeline
    #[command(after_help = "\
Examples:
  unilab history                       every event of this user on this host
  unilab history --soak latest         one soak's timeline
  unilab --json history --follow       one JSON object a line, as events are recorded")]
    History(HistoryArgs),
    /// Inspect the event log itself
    #[command(subcommand)]
    Log(LogCommand),
    /// Print a completion script for a shell (bash, zsh, fish, elvish, powershell)
    Completions {
        /// The shell to complete for
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), made from the definitions `--help` shows; `--dir`: all pages
    #[command(after_help = "\
Examples:
  unilab man --dir ~/.local/share/man/man1     then: man unilab, man unilab-soak-run")]
    Man {
        /// Write every page (`unilab.1`, `unilab-soak.1`, `unilab-soak-run.1`, ...) into this
        /// directory, created if need be, and print their paths
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}
