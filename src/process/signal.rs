//! Whether a recorded identity still names its process, and the only way unilab signals a
//! process it found rather than spawned: through a pidfd opened before the identity is checked.

use super::{ProcSource, ProcessIdentity};

/// What a recorded identity names now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The same process, alive, of the expected user.
    Live,
    /// No process has the pid, or only a zombie is left.
    Gone,
    /// The pid belongs to a process with another start time.
    Reused { start_ticks: u64 },
    /// The same process, but it belongs to another user.
    NotOwned { uid: u32 },
}

pub(crate) fn liveness(proc: &dyn ProcSource, identity: ProcessIdentity, uid: u32) -> Liveness {
    let Some(stat) = proc.stat(identity.pid) else {
        return Liveness::Gone;
    };
    if stat.start_ticks != identity.start_ticks {
        return Liveness::Reused {
            start_ticks: stat.start_ticks,
        };
    }
    if stat.has_exited() {
        return Liveness::Gone;
    }
    match proc.uid(identity.pid) {
        Some(owner) if owner == uid => Liveness::Live,
        Some(owner) => Liveness::NotOwned { uid: owner },
        None => Liveness::Gone,
    }
}

/// The signals unilab sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    Terminate,
    Kill,
    /// The signal a soak's `--dump-signal` names, by number (one a process can catch).
    Dump(i32),
}

/// A signal a process can catch, by name (`USR1`, `SIGUSR1`) or number, as `soak run
/// --dump-signal` gives it for [`Signal::Dump`]: SIGKILL and SIGSTOP, which no process can
/// catch, are refused (a usage error).
pub(crate) fn parse_dump_signal(text: &str) -> Result<i32, String> {
    use nix::sys::signal::Signal;
    let upper = text.trim().to_ascii_uppercase();
    let signal = match upper.parse::<i32>() {
        Ok(number) => Signal::try_from(number).ok(),
        Err(_) => {
            let name = if upper.starts_with("SIG") {
                upper
            } else {
                format!("SIG{upper}")
            };
            name.parse::<Signal>().ok()
        }
    };
    match signal {
        Some(Signal::SIGKILL | Signal::SIGSTOP) => Err(format!(
            "`{text}` cannot be caught, so nothing could print stacks on it (try USR1)"
        )),
        Some(signal) => Ok(signal as i32),
        None => Err(format!("`{text}` is not a signal (try USR1)")),
    }
}

impl Signal {
    fn to_rustix(self) -> Option<rustix::process::Signal> {
        match self {
            Signal::Terminate => Some(rustix::process::Signal::TERM),
            Signal::Kill => Some(rustix::process::Signal::KILL),
            Signal::Dump(number) => rustix::process::Signal::from_named_raw(number),
        }
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Signal::Terminate => "SIGTERM",
            Signal::Kill => "SIGKILL",
            Signal::Dump(number) => {
                return match nix::sys::signal::Signal::try_from(*number) {
                    Ok(signal) => f.write_str(signal.as_str()),
                    Err(_) => write!(f, "signal {number}"),
                };
            }
        })
    }
}

/// Why a signal was not sent.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    #[error(
        "{identity} is no longer the process unilab recorded ({liveness:?}); nothing was signalled"
    )]
    NotThatProcess {
        identity: ProcessIdentity,
        liveness: Liveness,
    },
    #[error("cannot signal {identity}")]
    Failed {
        identity: ProcessIdentity,
        #[source]
        source: std::io::Error,
    },
}

/// Sends `signal` to the process `identity` names, if and only if it is still that process and
/// belongs to `uid`. The pidfd is opened first and the identity checked after, so the signal
/// reaches the checked process even if the pid is reused in between.
pub(crate) fn signal(
    proc: &dyn ProcSource,
    identity: ProcessIdentity,
    uid: u32,
    signal: Signal,
) -> Result<(), SignalError> {
    let not_that = |liveness| SignalError::NotThatProcess { identity, liveness };
    let pid = i32::try_from(identity.pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or(not_that(Liveness::Gone))?;
    let pidfd = match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::SRCH) => return Err(not_that(Liveness::Gone)),
        Err(e) => {
            return Err(SignalError::Failed {
                identity,
                source: e.into(),
            });
        }
    };
    match liveness(proc, identity, uid) {
        Liveness::Live => {}
        other => return Err(not_that(other)),
    }
    let Some(sent) = signal.to_rustix() else {
        return Err(SignalError::Failed {
            identity,
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        });
    };
    match rustix::process::pidfd_send_signal(&pidfd, sent) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::SRCH) => Err(not_that(Liveness::Gone)),
        Err(e) => Err(SignalError::Failed {
            identity,
            source: e.into(),
        }),
    }
}

/// Waits up to `timeout` for the process to exit (gone, a zombie, or its pid reused). Returns
/// whether it did.
pub(crate) fn wait_for_exit(
    proc: &dyn ProcSource,
    identity: ProcessIdentity,
    timeout: std::time::Duration,
) -> bool {
    crate::time::poll_until(timeout, std::time::Duration::from_millis(20), || match proc
        .stat(identity.pid)
    {
        None => true,
        Some(stat) => stat.start_ticks != identity.start_ticks || stat.has_exited(),
    })
}

/// Reaps `pid`, a child of this process, if it has exited; never waits. A child's pid is not
/// reused before it is reaped, so this names exactly that process.
pub(crate) fn reap(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::wait::waitpid(
            nix::unistd::Pid::from_raw(pid),
            Some(nix::sys::wait::WaitPidFlag::WNOHANG),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::SystemProc;
    use crate::testing::proc::FakeProc;

    const RECORDED: ProcessIdentity = ProcessIdentity {
        pid: 4242,
        start_ticks: 100,
    };

    #[test]
    fn a_recorded_identity_is_live_only_while_pid_start_time_and_owner_all_match() {
        let cases = [
            (FakeProc::new(), Liveness::Gone),
            (
                FakeProc::new().with(RECORDED.pid, RECORDED.start_ticks, 'Z', 1000),
                Liveness::Gone,
            ),
            (
                FakeProc::new().with(RECORDED.pid, 101, 'S', 1000),
                Liveness::Reused { start_ticks: 101 },
            ),
            (
                FakeProc::new().with(RECORDED.pid, RECORDED.start_ticks, 'S', 0),
                Liveness::NotOwned { uid: 0 },
            ),
            (
                FakeProc::new().with(RECORDED.pid, RECORDED.start_ticks, 'S', 1000),
                Liveness::Live,
            ),
        ];
        for (proc, expected) in cases {
            assert_eq!(liveness(&proc, RECORDED, 1000), expected);
        }
    }

    #[test]
    fn a_reused_pid_counts_as_exited_for_a_waiter() {
        let reused = FakeProc::new().with(RECORDED.pid, 999, 'S', 1000);
        assert!(wait_for_exit(&reused, RECORDED, std::time::Duration::ZERO));
        let live = FakeProc::new().with(RECORDED.pid, RECORDED.start_ticks, 'R', 1000);
        assert!(!wait_for_exit(&live, RECORDED, std::time::Duration::ZERO));
    }

    #[test]
    fn our_own_process_is_live_and_signalling_a_reused_pid_is_refused() {
        let proc = SystemProc::default();
        let me = proc.stat(std::process::id()).unwrap();
        let uid = nix::unistd::getuid().as_raw();
        assert_eq!(liveness(&proc, me.identity(), uid), Liveness::Live);
        let other_start = ProcessIdentity {
            start_ticks: me.start_ticks + 1,
            ..me.identity()
        };
        assert!(matches!(
            liveness(&proc, other_start, uid),
            Liveness::Reused { .. }
        ));
        // Sending to a process with our pid but another start time must not reach us.
        let err = signal(&proc, other_start, uid, Signal::Kill).unwrap_err();
        assert!(matches!(err, SignalError::NotThatProcess { .. }));
        assert!(matches!(
            liveness(&proc, me.identity(), uid + 1),
            Liveness::NotOwned { .. }
        ));
    }
}
