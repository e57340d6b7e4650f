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
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};

use crate::process::{self, ProcSource, ProcessIdentity, Signal, SystemProc};

/// The hidden subcommand the supervisor runs the guard as.
pub const SUBCOMMAND: &str = "__soak-guard";

/// What the guard reported in its status file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuardStatus {
    pub started: Option<ProcessIdentity>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub spawn_failed: Option<String>,
}

impl GuardStatus {
    pub fn read(path: &Path) -> Self {
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

    pub fn exited(&self) -> bool {
        self.exit_code.is_some() || self.exit_signal.is_some() || self.spawn_failed.is_some()
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

/// Runs the guard; returns its exit code.
pub fn run(status_path: &Path, command: &[OsString]) -> i32 {
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let shutdown = Arc::new(AtomicBool::new(false));
    // Ctrl-C is the supervisor's to handle; SIGTERM or SIGHUP to the guard mean shut down.
    let ignored = Arc::new(AtomicBool::new(false));
    let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&ignored));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        let _ = signal_hook::flag::register(signal, Arc::clone(&shutdown));
    }
    {
        let shutdown = Arc::clone(&shutdown);
        std::thread::spawn(move || {
            let mut sink = [0u8; 64];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            shutdown.store(true, Ordering::Relaxed);
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
    while !shutdown.load(Ordering::Relaxed) {
        reap(command_pid, status_path);
        std::thread::sleep(Duration::from_millis(10));
    }
    // Kill until nothing is left: a process may fork while the tree is being killed.
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        kill_tree(&proc);
        if reap(command_pid, status_path) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    0
}

/// Reaps every child that has exited, reporting the command's status. Returns whether the guard
/// has no children left.
fn reap(command_pid: Option<u32>, status_path: &Path) -> bool {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => {
                if Some(pid.as_raw()) == command_pid.and_then(|p| i32::try_from(p).ok()) {
                    report(status_path, &format!("exited code {code}"));
                }
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) => {
                if Some(pid.as_raw()) == command_pid.and_then(|p| i32::try_from(p).ok()) {
                    report(status_path, &format!("exited signal {}", signal as i32));
                }
            }
            Ok(WaitStatus::StillAlive) => return false,
            Ok(_) => {}
            Err(Errno::ECHILD) => return true,
            Err(_) => return false,
        }
    }
}

/// SIGKILLs every descendant of the guard, each through an identity-checked pidfd.
fn kill_tree(proc: &SystemProc) {
    let uid = nix::unistd::getuid().as_raw();
    let me = std::process::id();
    for stat in process::descendants(me, &process::all_processes(Path::new("/proc"))) {
        let _ = process::signal(proc, stat.identity(), uid, Signal::Kill);
    }
}
