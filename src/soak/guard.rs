//! The soak guard: the small process between the supervisor and the command.
//!
//! The supervisor re-executes unilab as the guard. The guard makes itself a child subreaper, so
//! every descendant that escapes the command's process group (a double fork, `setsid`) is
//! re-parented to it and stays in the tree the supervisor samples; it spawns the command in a
//! process group of its own, reaps every child, and writes what happens to a status file:
//!
//! ```text
//! started <pid> <start ticks>
//! exited code <n> | exited signal <n> | spawn_failed <reason>
//! ```
//!
//! Its standard input is a pipe from the supervisor. When that pipe closes — the supervisor is
//! done, or was killed, even by SIGKILL — the guard kills every process left in its tree and
//! exits: a soak leaves no survivors.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::wait::{WaitStatus, waitpid};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use super::watch::CommandState;
use crate::process::{self, ProcSource, ProcessIdentity, Signal, SystemProc};

/// The hidden subcommand the supervisor runs the guard as.
pub(crate) const SUBCOMMAND: &str = "__soak-guard";

/// What the guard reported in its status file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GuardStatus {
    pub started: Option<ProcessIdentity>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub spawn_failed: Option<String>,
}

impl GuardStatus {
    pub(crate) fn read(path: &Path) -> Self {
        let mut status = GuardStatus::default();
        let Ok(text) = std::fs::read_to_string(path) else {
            return status;
        };
        for line in text.lines() {
            let words: Vec<&str> = line.splitn(3, ' ').collect();
            match words.as_slice() {
                ["started", pid, ticks] => {
                    if let (Ok(pid), Ok(start_ticks)) = (pid.parse(), ticks.parse()) {
                        status.started = Some(ProcessIdentity { pid, start_ticks });
                    }
                }
                ["exited", "code", n] => status.exit_code = n.parse().ok(),
                ["exited", "signal", n] => status.exit_signal = n.parse().ok(),
                ["spawn_failed", rest @ ..] => status.spawn_failed = Some(rest.join(" ")),
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
        let _ = writeln!(file, "{line}");
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
                let ticks = proc.stat(pid).map(|s| s.start_ticks).unwrap_or(0);
                report(status_path, &format!("started {pid} {ticks}"));
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
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        kill_tree(&proc);
        std::thread::sleep(Duration::from_millis(10));
        let left = process::tree(Path::new("/proc"), me);
        if left.iter().all(|s| s.has_exited()) || Instant::now() >= deadline {
            break;
        }
    }
    0
}

/// Reaps every child as it exits, reporting the command's own exit.
fn reap_forever(command_pid: Option<u32>, status_path: &Path) {
    let command = command_pid.and_then(|p| i32::try_from(p).ok());
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, code)) if Some(pid.as_raw()) == command => {
                report(status_path, &format!("exited code {code}"));
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) if Some(pid.as_raw()) == command => {
                report(status_path, &format!("exited signal {}", signal as i32));
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
    for stat in process::tree(Path::new("/proc"), me) {
        let _ = process::signal(proc, stat.identity(), uid, Signal::Kill);
    }
}
