//! `mps exec`: a command run with a daemon's environment, unilab waiting for it.

use std::ffi::{OsStr, OsString};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::DaemonRecord;
use super::error::MpsError;
use super::records;
use crate::event::DaemonLimits;

/// Runs `program` with `args`, the environment of `record`'s daemon and the client `limits`
/// until it exits. Whenever `forward`
/// is raised (a SIGTERM or SIGHUP that would have ended unilab), the command gets a SIGTERM
/// instead: unilab outlives it, to wait for it.
pub(crate) fn run_with(
    record: &DaemonRecord,
    limits: &DaemonLimits,
    (program, args): (&OsStr, &[OsString]),
    forward: &AtomicBool,
) -> Result<ExitStatus, MpsError> {
    let mut child = std::process::Command::new(program)
        .args(args)
        .envs(records::environment(record))
        .envs(super::limits::client_environment(limits))
        .spawn()
        .map_err(|source| MpsError::Exec {
            command: program.to_string_lossy().into_owned(),
            source,
        })?;
    loop {
        if let Some(status) = child.try_wait().map_err(MpsError::Wait)? {
            return Ok(status);
        }
        if forward.swap(false, Ordering::Relaxed)
            && let Ok(pid) = i32::try_from(child.id())
        {
            // Our own unreaped child: its pid cannot have been reused.
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGTERM);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
