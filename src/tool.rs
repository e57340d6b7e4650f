//! Running an external tool (`nvidia-smi`, `nvidia-cuda-mps-control`) with a timeout.
//!
//! A tool runs in its own process group; on timeout the group is killed. A process stuck in
//! uninterruptible sleep (a wedged GPU) cannot be killed or reaped, so unilab never waits on one
//! past the timeout: it stops reading, leaves it, and reports the timeout. Output is collected by
//! reader threads into shared buffers, so a daemon that inherited the pipes and keeps them open
//! cannot stall the caller either.

use crate::time::{poll, poll_until};
use std::ffi::{OsStr, OsString};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::duration::{DurationError, parse_timeout};
use crate::env::{EnvVars, TOOL_TIMEOUT_SECS};

/// How long to keep reading output after the tool exited, for pipes a daemon it forked holds.
const DRAIN: Duration = Duration::from_millis(200);

/// The most a tool may write on each of its outputs: far more than any answer of nvidia-smi or
/// the MPS control client holds (a host of 8 GPUs and a thousand compute processes lists under
/// 100 KiB). A tool that writes more is killed and its answer refused, so a tool flooding its
/// output cannot grow unilab's memory.
pub(crate) const MAX_OUTPUT: usize = 4 << 20;

/// An external program unilab calls, as found on `PATH` or named by a variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    pub program: OsString,
    pub timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl ToolOutput {
    /// The exit code, or `128 + signal` for a tool killed by a signal.
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .or_else(|| self.status.signal().map(|s| 128 + s))
            .unwrap_or(-1)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("`{}` was not found", program.to_string_lossy())]
    NotFound { program: OsString },
    #[error("cannot run `{}`", program.to_string_lossy())]
    Spawn {
        program: OsString,
        #[source]
        source: std::io::Error,
    },
    #[error("`{}` did not finish within {} s", program.to_string_lossy(), timeout.as_secs_f64())]
    Timeout {
        program: OsString,
        timeout: Duration,
    },
    #[error("`{}` wrote more than {} MiB; it was stopped and its answer refused", program.to_string_lossy(), MAX_OUTPUT >> 20)]
    Flooded { program: OsString },
}

impl Tool {
    pub fn new(program: impl Into<OsString>, timeout: Duration) -> Self {
        Self {
            program: program.into(),
            timeout,
        }
    }

    /// This tool with at most `limit` to answer.
    pub(crate) fn within(mut self, limit: Duration) -> Self {
        self.timeout = self.timeout.min(limit);
        self
    }

    pub fn name(&self) -> String {
        self.program.to_string_lossy().into_owned()
    }

    /// Where this tool is: the path it is named by, or the first executable of its name on
    /// `PATH`. `None` when there is none to run.
    pub(crate) fn locate(&self) -> Option<std::path::PathBuf> {
        locate(&self.program)
    }

    /// A command for this tool; add arguments and environment, then [`Tool::run`] it.
    pub fn command(&self) -> Command {
        Command::new(&self.program)
    }

    /// Runs `cmd` (made by [`Tool::command`]) to completion or timeout, feeding it `stdin`.
    pub fn run(&self, cmd: Command, stdin: &[u8]) -> Result<ToolOutput, ToolError> {
        if !crate::trace::enabled(crate::trace::STEPS) {
            return self.run_to_end(cmd, stdin);
        }
        let line = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(OsStr::to_string_lossy)
            .collect::<Vec<_>>();
        let line = crate::text::shell_command(&line);
        let started = Instant::now();
        let result = self.run_to_end(cmd, stdin);
        let took = crate::text::step_time(started.elapsed().as_secs_f64());
        match &result {
            Ok(output) => crate::trace::emit(format_args!(
                "ran `{line}`: exit {} in {took}",
                output.code()
            )),
            Err(e) => crate::trace::emit(format_args!("ran `{line}`: {e} (after {took})")),
        }
        result
    }

    fn run_to_end(&self, mut cmd: Command, stdin: &[u8]) -> Result<ToolOutput, ToolError> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn().map_err(|source| {
            if not_found(&self.program, &source) {
                ToolError::NotFound {
                    program: self.program.clone(),
                }
            } else {
                ToolError::Spawn {
                    program: self.program.clone(),
                    source,
                }
            }
        })?;
        let stdout = collect(child.stdout.take());
        let stderr = collect(child.stderr.take());
        if let Some(mut input) = child.stdin.take() {
            // A tool that exits without reading its input closes the pipe: not an error here.
            let _ = input.write_all(stdin);
        }
        let flooded = || stdout.flooded() || stderr.flooded();
        // `Some(None)`: it flooded its output, or cannot be waited for; `None`: it timed out.
        let ended = poll(self.timeout, Duration::from_millis(5), || {
            match child.try_wait() {
                Ok(Some(status)) => Some(Some(status)),
                Ok(None) if !flooded() => None,
                Ok(None) | Err(_) => Some(None),
            }
        });
        let Some(Some(status)) = ended else {
            kill_group(&mut child);
            return Err(if flooded() {
                ToolError::Flooded {
                    program: self.program.clone(),
                }
            } else {
                ToolError::Timeout {
                    program: self.program.clone(),
                    timeout: self.timeout,
                }
            });
        };
        poll_until(DRAIN, Duration::from_millis(2), || {
            stdout.done() && stderr.done()
        });
        if flooded() {
            // What it forked may hold the pipe and write on.
            kill_group(&mut child);
            return Err(ToolError::Flooded {
                program: self.program.clone(),
            });
        }
        Ok(ToolOutput {
            status,
            stdout: stdout.text(),
            stderr: stderr.text(),
        })
    }
}

/// Kills a tool's process group (the tool and what it forked without leaving the group) and
/// reaps the tool if it dies promptly; whether it was reaped. A process in uninterruptible sleep
/// (on a wedged GPU) is left after half a second.
pub(crate) fn kill_group(child: &mut std::process::Child) -> bool {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    poll_until(
        Duration::from_millis(500),
        Duration::from_millis(10),
        || matches!(child.try_wait(), Ok(Some(_))),
    )
}

/// What a reader thread has read of one output.
#[derive(Default)]
struct Buffer {
    bytes: Vec<u8>,
    /// The pipe reached its end (or was never there).
    done: bool,
    /// The tool wrote more than [`MAX_OUTPUT`]: reading stopped there.
    flooded: bool,
}

/// Output read by a background thread, at most [`MAX_OUTPUT`] of it.
struct Collected {
    buffer: Arc<Mutex<Buffer>>,
}

impl Collected {
    fn done(&self) -> bool {
        self.buffer.lock().map(|b| b.done).unwrap_or(true)
    }

    fn flooded(&self) -> bool {
        self.buffer.lock().map(|b| b.flooded).unwrap_or(false)
    }

    fn text(&self) -> String {
        self.buffer
            .lock()
            .map(|b| String::from_utf8_lossy(&b.bytes).into_owned())
            .unwrap_or_default()
    }
}

fn collect(pipe: Option<impl Read + Send + 'static>) -> Collected {
    let buffer = Arc::new(Mutex::new(Buffer {
        done: pipe.is_none(),
        ..Buffer::default()
    }));
    if let Some(mut pipe) = pipe {
        let shared = Arc::clone(&buffer);
        std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let Ok(mut b) = shared.lock() else { break };
                        if b.bytes.len() + n > MAX_OUTPUT {
                            b.flooded = true;
                            break;
                        }
                        b.bytes.extend_from_slice(&chunk[..n]);
                    }
                }
            }
            if let Ok(mut b) = shared.lock() {
                b.done = true;
            }
        });
    }
    Collected { buffer }
}

/// The program named by `variable` if set and not empty, else `default` (found on `PATH`).
fn program_from(variable: Option<OsString>, default: &str) -> OsString {
    variable
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| OsStr::new(default).to_owned())
}

/// The timeout of every external tool: `UNILAB_TOOL_TIMEOUT` (seconds), else the default.
/// A value that is not valid never gets here: [`check_timeout_variable`] refuses it first.
fn timeout_from(value: Option<OsString>) -> Duration {
    value
        .and_then(|v| v.to_str().and_then(|s| parse_timeout(s).ok()))
        .unwrap_or(Duration::from_secs_f64(TOOL_TIMEOUT_SECS))
}

/// Refuses a `UNILAB_TOOL_TIMEOUT` that is set but not a positive number of seconds of at
/// most [`crate::duration::MAX_DURATION`], before any command acts on it.
pub(crate) fn check_timeout_variable() -> Result<(), DurationError> {
    match std::env::var_os(EnvVars::UNILAB_TOOL_TIMEOUT) {
        Some(value) => parse_timeout(&value.to_string_lossy()).map(drop),
        None => Ok(()),
    }
}

/// `program` (found on `PATH`) under the one timeout policy of every external tool.
pub(crate) fn external(program: impl Into<OsString>) -> Tool {
    Tool::new(
        program,
        timeout_from(std::env::var_os(EnvVars::UNILAB_TOOL_TIMEOUT)),
    )
}

/// `nvidia-smi`, as the process environment names it.
pub(crate) fn nvidia_smi() -> Tool {
    external(program_from(
        std::env::var_os(EnvVars::UNILAB_NVIDIA_SMI),
        "nvidia-smi",
    ))
}

/// Whether this host has no GPU tool at all: `UNILAB_NVIDIA_SMI` names none and no
/// `nvidia-smi` is on `PATH` (a machine without GPUs). A tool named but missing is no such
/// host: it was asked for, and not finding it is an error.
pub(crate) fn nvidia_smi_absent() -> bool {
    let named = std::env::var_os(EnvVars::UNILAB_NVIDIA_SMI).is_some_and(|v| !v.is_empty());
    !named && nvidia_smi().locate().is_none()
}

/// `nvidia-cuda-mps-control`, as the process environment names it.
pub(crate) fn mps_control() -> Tool {
    external(program_from(
        std::env::var_os(EnvVars::UNILAB_MPS_CONTROL),
        "nvidia-cuda-mps-control",
    ))
}

/// Where `program` is: the path it names, or the first executable of its name on `PATH`.
/// `None` when there is none to run.
fn locate(program: &OsStr) -> Option<std::path::PathBuf> {
    use std::path::Path;
    let executable = |path: &Path| {
        path.is_file() && nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
    };
    let program = Path::new(program);
    if program.components().count() > 1 {
        return executable(program).then(|| program.to_owned());
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join(program))
        .find(|path| executable(path))
}

/// Whether `error`, from starting `program`, means there is no such program: not found, or
/// refused while searching `PATH` for a name no directory of it holds — a directory this user
/// may not search (another user's home) fails the search so, where a shell says "not found".
/// A file that is there but may not be run is not "not found".
pub(crate) fn not_found(program: &OsStr, error: &std::io::Error) -> bool {
    let searched = std::path::Path::new(program).components().count() == 1;
    match error.kind() {
        ErrorKind::NotFound => true,
        ErrorKind::PermissionDenied if searched => {
            !std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .any(|dir| dir.join(program).exists())
        }
        _ => false,
    }
}

/// The hidden subcommand a long-lived tool runs under: see [`leash`].
pub(crate) const LEASH: &str = "__leash";

/// `unilab __leash -- PROGRAM ARGS...`: runs a long-lived tool (nvidia-smi in loop mode) for a
/// caller that may die without stopping it. Its standard input is a pipe from the caller, never
/// written: when it closes — the caller is done, or was killed, even by SIGKILL — PROGRAM is
/// killed through a pidfd (never a pid that may have been reused) and the leash ends. PROGRAM
/// shares the leash's process group, so a caller may also kill both at once. Returns PROGRAM's
/// exit code (`128 + signal` when killed; 127 when not found, 126 when it cannot be run).
pub(crate) fn leash(command: &[OsString]) -> i32 {
    let Some((program, args)) = command.split_first() else {
        return 2;
    };
    let mut child = match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if not_found(program, &e) => return 127,
        Err(_) => return 126,
    };
    let pidfd = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
        });
    std::thread::spawn(move || {
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        if let Some(pidfd) = pidfd {
            let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
        }
    });
    match child.wait() {
        Ok(status) => status
            .code()
            .or_else(|| status.signal().map(|s| 128 + s))
            .unwrap_or(1),
        Err(_) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_and_status_are_collected() {
        let tool = Tool::new("sh", Duration::from_secs(5));
        let mut cmd = tool.command();
        cmd.args(["-c", "read x; echo out:$x; echo err >&2; exit 3"]);
        let out = tool.run(cmd, b"hello\n").unwrap();
        assert_eq!(out.code(), 3);
        assert_eq!(out.stdout, "out:hello\n");
        assert_eq!(out.stderr, "err\n");
    }

    #[test]
    fn a_hung_tool_times_out_and_is_killed() {
        let tool = Tool::new("sh", Duration::from_millis(300));
        let mut cmd = tool.command();
        cmd.args(["-c", "trap '' TERM; sleep 30"]);
        let started = Instant::now();
        let err = tool.run(cmd, b"").unwrap_err();
        assert!(matches!(err, ToolError::Timeout { .. }));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    /// A tool writing endless output grew unilab's memory without bound (2.2 GB within the
    /// timeout for `mps status`): what is read is capped, and the tool stopped at the cap.
    #[test]
    fn a_tool_that_floods_its_output_is_stopped_at_the_cap() {
        for script in ["yes", "tr '\\0' x < /dev/zero >&2"] {
            let tool = Tool::new("sh", Duration::from_secs(60));
            let mut cmd = tool.command();
            cmd.args(["-c", script]);
            let started = Instant::now();
            let err = tool.run(cmd, b"").unwrap_err();
            assert!(matches!(err, ToolError::Flooded { .. }), "{script}: {err}");
            assert!(started.elapsed() < Duration::from_secs(30), "{script}");
        }
    }

    #[test]
    fn a_missing_tool_says_so() {
        let tool = Tool::new("unilab-no-such-tool", Duration::from_secs(1));
        let err = tool.run(tool.command(), b"").unwrap_err();
        assert!(matches!(err, ToolError::NotFound { .. }));
    }
}
