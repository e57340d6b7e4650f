//! The soak guard: the small process between the supervisor and the command.
//!
//! The supervisor re-executes unilab as the guard. The guard makes itself a child subreaper, so
//! every descendant that escapes the command's process group (a double fork, `setsid`) is
//! re-parented to it and stays in the tree the supervisor samples; it spawns the command in a
//! process group of its own, reaps every child, and writes what happens to a status file:
//!
//! ```text
//! started <pid> <start ticks> <monotonic ns>
//! exited code <n> <monotonic ns> | exited signal <n> <monotonic ns> | spawn_failed <reason>
//! child <pid> code <n> | child <pid> signal <n>
//! ```
//!
//! `child` lines name the other processes it reaped — orphans of the tree re-parented to it —
//! that exited non-zero or by a signal while the command ran (at most [`MAX_CHILD_LINES`]):
//! their parents are gone, so no zombie of theirs is left for the supervisor to read.
//!
//! The times are on the host's monotonic clock (`time::monotonic_ns`), so the supervisor measures
//! the command's own run time, spawn to exit, whatever it was doing meanwhile.
//!
//! Its standard input is a pipe from the supervisor. When that pipe closes — the supervisor is
//! done, or was killed, even by SIGKILL — the guard kills every process left in its tree and
//! exits: a soak leaves no survivors.

use crate::time::poll_until;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::wait::{WaitStatus, waitpid};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use super::watch::CommandState;
use crate::event::soak::ExitInfo;
use crate::process::{self, ProcSource, ProcessIdentity, Signal, SystemProc};
use crate::time::monotonic_ns;

/// The hidden subcommand the supervisor runs the guard as (`cli::internal` recognises it).
pub(crate) const SUBCOMMAND: &str = "__soak-guard";

/// What the guard reported in its status file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GuardStatus {
    pub started: Option<ProcessIdentity>,
    /// When the command was spawned, monotonic nanoseconds.
    pub started_ns: Option<u64>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// When the guard reaped the command, monotonic nanoseconds.
    pub exited_ns: Option<u64>,
    pub spawn_failed: Option<String>,
    /// Orphans it reaped that failed while the command ran: pid and how.
    pub failed_children: Vec<(u32, ExitInfo)>,
}

impl GuardStatus {
    pub(crate) fn read(path: &Path) -> Self {
        let mut status = GuardStatus::default();
        let Ok(text) = std::fs::read_to_string(path) else {
            return status;
        };
        for line in text.lines() {
            if let Some(reason) = line.strip_prefix("spawn_failed ") {
                status.spawn_failed = Some(reason.to_owned());
                continue;
            }
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["started", pid, ticks, ns] => {
                    if let (Ok(pid), Ok(start_ticks)) = (pid.parse(), ticks.parse()) {
                        status.started = Some(ProcessIdentity { pid, start_ticks });
                        status.started_ns = ns.parse().ok();
                    }
                }
                ["exited", "code", n, ns] => {
                    status.exit_code = n.parse().ok();
                    status.exited_ns = ns.parse().ok();
                }
                ["exited", "signal", n, ns] => {
                    status.exit_signal = n.parse().ok();
                    status.exited_ns = ns.parse().ok();
                }
                ["child", pid, how @ ("code" | "signal"), n] => {
                    if let (Ok(pid), Ok(n)) = (pid.parse(), n.parse()) {
                        let (code, signal) = if *how == "code" {
                            (Some(n), None)
                        } else {
                            (None, Some(n))
                        };
                        status
                            .failed_children
                            .push((pid, ExitInfo { code, signal }));
                    }
                }
                _ => {}
            }
        }
        status
    }

    pub(crate) fn exited(&self) -> bool {
        self.exit_code.is_some() || self.exit_signal.is_some() || self.spawn_failed.is_some()
    }

    /// The command's state as the soak's rules see it.
    pub(crate) fn command_state(&self) -> CommandState {
        match &self.spawn_failed {
            Some(reason) => CommandState::SpawnFailed(reason.clone()),
            None if self.exited() => CommandState::Exited,
            None => CommandState::Running,
        }
    }
}

fn report(path: &Path, line: &str) {
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        // One write a line, so that a reader never sees half of one.
        let _ = file.write_all(format!("{line}\n").as_bytes());
    }
}

/// Runs the guard; returns its exit code. It blocks rather than polls: one thread in
/// `waitpid`, one on its standard input, one on signals, so it costs nothing while it waits.
pub(crate) fn run(status_path: &Path, command: &[OsString]) -> i32 {
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let (shutdown, requested) = mpsc::channel::<()>();
    {
        // End of input: the supervisor is done with the soak, or gone.
        let shutdown = shutdown.clone();
        std::thread::spawn(move || {
            let mut sink = [0u8; 64];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            let _ = shutdown.send(());
        });
    }
    // Ctrl-C at the terminal is the supervisor's to handle; SIGTERM or SIGHUP mean shut down.
    if let Ok(mut signals) = Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        let shutdown = shutdown.clone();
        std::thread::spawn(move || {
            for signal in signals.forever() {
                if signal != SIGINT {
                    let _ = shutdown.send(());
                }
            }
        });
    }
    let proc = SystemProc::default();
    let command_pid = match command.split_first() {
        None => {
            report(status_path, "spawn_failed no command");
            None
        }
        Some((program, args)) => match Command::new(program)
            .args(args)
            .process_group(0)
            .stdin(Stdio::null())
            .spawn()
        {
            Ok(child) => {
                let pid = child.id();
                let spawned = monotonic_ns();
                let ticks = proc.stat(pid).map(|s| s.start_ticks).unwrap_or(0);
                report(status_path, &format!("started {pid} {ticks} {spawned}"));
                Some(pid)
            }
            Err(e) => {
                report(
                    status_path,
                    &format!(
                        "spawn_failed cannot run `{}`: {e}",
                        program.to_string_lossy()
                    ),
                );
                None
            }
        },
    };
    {
        let status_path = status_path.to_owned();
        std::thread::spawn(move || reap_forever(command_pid, &status_path));
    }
    let _ = requested.recv();
    // Kill until nothing is left: a process may fork while the tree is being killed. The reaper
    // thread collects the dead.
    let me = std::process::id();
    poll_until(Duration::from_secs(2), Duration::from_millis(10), || {
        kill_tree(&proc);
        proc.tree(me).iter().all(|s| s.has_exited())
    });
    0
}

/// The most `child` lines the guard writes: a tree that forks failing processes in a loop must
/// not fill the disk through it.
const MAX_CHILD_LINES: usize = 64;

/// Reaps every child as it exits, reporting the command's own exit, and — while the command
/// runs — the other children that failed.
fn reap_forever(command_pid: Option<u32>, status_path: &Path) {
    let command = command_pid.and_then(|p| i32::try_from(p).ok());
    let mut command_done = command.is_none();
    let mut child_lines = 0;
    let mut child_failed = |line: String, command_done: bool| {
        if !command_done && child_lines < MAX_CHILD_LINES {
            child_lines += 1;
            report(status_path, &line);
        }
    };
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, code)) if Some(pid.as_raw()) == command => {
                report(
                    status_path,
                    &format!("exited code {code} {}", monotonic_ns()),
                );
                command_done = true;
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) if Some(pid.as_raw()) == command => {
                report(
                    status_path,
                    &format!("exited signal {} {}", signal as i32, monotonic_ns()),
                );
                command_done = true;
            }
            Ok(WaitStatus::Exited(pid, code)) if code != 0 => {
                child_failed(format!("child {pid} code {code}"), command_done);
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) => {
                child_failed(
                    format!("child {pid} signal {}", signal as i32),
                    command_done,
                );
            }
            Ok(_) => {}
            // No children for now: adopted orphans may still arrive, so look again later.
            Err(Errno::ECHILD) => std::thread::sleep(Duration::from_millis(50)),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// SIGKILLs every descendant of the guard, each through an identity-checked pidfd.
fn kill_tree(proc: &SystemProc) {
    let uid = nix::unistd::getuid().as_raw();
    let me = std::process::id();
    for stat in proc.tree(me) {
        let _ = process::signal(proc, stat.identity(), uid, Signal::Kill);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_of(text: &str) -> GuardStatus {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        GuardStatus::read(file.path())
    }

    #[test]
    fn the_status_file_gives_the_commands_spawn_and_exit_with_their_times() {
        let status = status_of("started 42 1000 5000000\nexited code 3 9000000\n");
        assert_eq!(
            status.started,
            Some(ProcessIdentity {
                pid: 42,
                start_ticks: 1000
            })
        );
        assert_eq!(
            (status.started_ns, status.exited_ns),
            (Some(5_000_000), Some(9_000_000))
        );
        assert_eq!(status.exit_code, Some(3));
        assert_eq!(status.command_state(), CommandState::Exited);

        let killed = status_of("started 42 1000 5\nexited signal 9 7\n");
        assert_eq!((killed.exit_signal, killed.exited_ns), (Some(9), Some(7)));

        let orphans = status_of("started 42 1000 5\nchild 50 code 3\nchild 51 signal 9\n");
        assert_eq!(
            orphans.failed_children,
            [
                (
                    50,
                    ExitInfo {
                        code: Some(3),
                        signal: None
                    }
                ),
                (
                    51,
                    ExitInfo {
                        code: None,
                        signal: Some(9)
                    }
                )
            ]
        );
        assert_eq!(orphans.command_state(), CommandState::Running);

        let failed = status_of("spawn_failed cannot run `x`: No such file or directory\n");
        assert_eq!(
            failed.command_state(),
            CommandState::SpawnFailed("cannot run `x`: No such file or directory".into())
        );
        // A line being written, or nothing yet: still running.
        assert_eq!(
            status_of("started 42 10").command_state(),
            CommandState::Running
        );
        assert_eq!(status_of("").command_state(), CommandState::Running);
    }
}
