//! `unilab history`'s definitions: the event log replayed as a timeline.

use clap::Args;
use clap_complete::ArgValueCompleter;

use super::complete;

#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    /// Only the events of this soak
    #[arg(long, value_name = "ID", conflicts_with = "daemon", add = ArgValueCompleter::new(complete::soak_ids))]
    pub soak: Option<String>,
    /// Only the events of this daemon
    #[arg(long, value_name = "NAME", add = ArgValueCompleter::new(complete::daemon_names))]
    pub daemon: Option<String>,
    /// Start at this sequence number
    #[arg(long, value_name = "SEQ", default_value_t = 1)]
    pub since: u64,
    /// Keep printing events as they are appended
    #[arg(long, conflicts_with = "all_hosts")]
    pub follow: bool,
    /// Every host's log under the state root (read-only), merged in time order, each line with
    /// its host
    #[arg(long = "all-hosts")]
    pub all_hosts: bool,
}
