//! How an error presents itself to a person: the exit code it ends unilab with, and a hint of
//! what to do next.
//!
//! Every error type that has something to suggest implements `Hint`, matching every variant
//! (no wildcard, so a new variant must say whether it has a hint): a variant that wraps an
//! error with hints of its own returns that error's hint. Each error at a boundary (the log,
//! the MPS commands, the soak commands, the state paths) implements `Boundary` and decides its
//! own exit code; the top-level error asks only its boundary error, never downcasts a chain.

/// unilab's exit codes, as documented in the README.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Success, or a soak that passed.
    Success,
    /// A soak failed; its artifact is still written.
    SoakFailed,
    /// The command line was not understood.
    Usage,
    /// A user-actionable refusal or error, including a failure of the environment (an
    /// unreadable current directory, a signal handler that cannot be installed).
    Refused,
    /// A recorded daemon was found stale and its record cleaned.
    Stale,
    /// The event log failed verification or cannot be read.
    LogBroken,
    /// A bug in unilab.
    Internal,
    /// The command unilab was to run for the user was found but cannot be run (`mps exec`),
    /// as `env` and `sudo` say it.
    CannotRun,
    /// The command unilab was to run for the user was not found (`mps exec`).
    CommandNotFound,
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
            Exit::CannotRun => 126,
            Exit::CommandNotFound => 127,
            Exit::Passthrough(code) => code,
        }
    }
}

/// An error that may suggest what to do next.
pub(crate) trait Hint: std::error::Error {
    /// A short suggestion, or `None` when this error has none of its own (its source may).
    fn hint(&self) -> Option<String>;
}

/// An error at a boundary of unilab, which decides the exit code it ends unilab with.
pub(crate) trait Boundary: Hint {
    fn exit(&self) -> Exit;
}

/// An error and its causes on one line, `: ` between them: for a warning that reports an error
/// and goes on.
pub(crate) fn chain_text(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    /// Every cause is said, outermost first, so a warning that goes on names why.
    #[test]
    fn a_chain_says_every_cause_outermost_first() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot mark rank 3's capture")]
        struct Outer(#[source] std::io::Error);
        let error = Outer(std::io::Error::other("no space left"));
        assert_eq!(
            super::chain_text(&error),
            "cannot mark rank 3's capture: no space left"
        );
    }
}
