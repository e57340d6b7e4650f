//! Every environment variable unilab reads, and the defaults it falls back to.

/// Names of the environment variables unilab reads.
pub struct EnvVars;

impl EnvVars {
    /// The state root, when `--root` is not given.
    pub const UNILAB_ROOT: &'static str = "UNILAB_ROOT";
    /// XDG base directory for state; the state root defaults to `$XDG_STATE_HOME/unilab`.
    pub const XDG_STATE_HOME: &'static str = "XDG_STATE_HOME";
    /// The home directory; the state root falls back to `~/.local/state/unilab`.
    pub const HOME: &'static str = "HOME";
}

/// How often `history --follow` looks for new events, in milliseconds.
pub const FOLLOW_POLL_MS: u64 = 200;
