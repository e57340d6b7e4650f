//! A daemon in the foreground (`mps start --foreground`): a child of unilab, its log on
//! standard error, stopped when unilab is asked to stop.

use std::os::fd::AsFd;
use std::time::Duration;

use super::control;
use super::dirs;
use super::error::MpsError;
use super::spec::StartSpec;
use super::start::{Cleared, begin, failed, record_and_verify, wait_for_daemon};
use super::stop::halt;
use super::{DaemonRecord, Mps};
use crate::event::{Event, StopMethod, Subject};
use crate::log::EventLog;

/// Runs the daemon in the foreground (`-f`) as a child, its log lines on standard error, until it
/// exits or `stop` is raised (Ctrl-C, SIGTERM): then it is asked to quit and, if needed,
/// escalated. Records the start and the stop like a detached daemon's.
pub(crate) fn run_foreground(
    mps: &Mps,
    log: &EventLog,
    spec: &StartSpec,
    stop: &std::sync::atomic::AtomicBool,
    grace: Duration,
    on_ready: impl FnOnce(&DaemonRecord, &Cleared),
) -> Result<StopMethod, MpsError> {
    use std::os::unix::process::CommandExt;
    use std::sync::atomic::Ordering;
    let cleared = begin(mps, log, spec)?;
    let mut cmd = control::foreground_command(
        &mps.control,
        &spec.pipe_directory,
        &spec.log_directory,
        &spec.gpu,
    );
    // Its own process group, so that Ctrl-C reaches unilab, which then asks it to quit.
    cmd.process_group(0).stdin(std::process::Stdio::null());
    if let Ok(stderr) = std::io::stderr().as_fd().try_clone_to_owned() {
        cmd.stdout(std::process::Stdio::from(stderr));
    }
    let mut child = cmd.spawn().map_err(|e| {
        failed(
            log,
            spec,
            format!("cannot run `{} -f`: {e}", mps.control.name()),
            None,
        )
    })?;
    let daemon = mps
        .proc
        .stat(child.id())
        .map(|s| s.identity())
        .filter(|_| wait_for_daemon(mps, &spec.pipe_directory, mps.control.timeout).is_some());
    let Some(daemon) = daemon else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(failed(
            log,
            spec,
            "the foreground daemon did not come up".into(),
            None,
        ));
    };
    let record = match record_and_verify(mps, log, spec, daemon, true) {
        Ok(record) => record,
        Err(e) => {
            let _ = child.wait();
            return Err(e);
        }
    };
    on_ready(&record, &cleared);
    let method = loop {
        if let Ok(Some(_)) = child.try_wait() {
            break StopMethod::Exited;
        }
        if stop.load(Ordering::Relaxed) {
            // The child is unreaped, so its pid cannot be reused while we signal it.
            let method = halt(mps, &record, grace)?;
            let _ = child.wait();
            break method;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    dirs::remove_leftovers(&spec.pipe_directory);
    log.append(
        Subject::Daemon(spec.name.clone()),
        Event::DaemonStopped {
            process: daemon,
            method,
        },
    )?;
    Ok(method)
}
