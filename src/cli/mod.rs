//! The command-line definitions (clap), apart from the logic in `commands`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "unilab",
    version,
    about = "User-owned CUDA MPS daemons and soak supervision on shared GPU hosts",
    long_about = None,
    propagate_version = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct GlobalArgs {
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
    /// Print more detail on standard error
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay the event log as a timeline
    History(HistoryArgs),
    /// Inspect the event log itself
    #[command(subcommand)]
    Log(LogCommand),
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only the events of this soak
    #[arg(long, value_name = "ID", conflicts_with = "daemon")]
    pub soak: Option<String>,
    /// Only the events of this daemon
    #[arg(long, value_name = "NAME")]
    pub daemon: Option<String>,
    /// Start at this sequence number
    #[arg(long, value_name = "SEQ", default_value_t = 1)]
    pub since: u64,
    /// Keep printing events as they are appended
    #[arg(long)]
    pub follow: bool,
}

#[derive(Debug, Subcommand)]
pub enum LogCommand {
    /// Walk the hash chain and rebuild every projection from the events
    Verify,
}
