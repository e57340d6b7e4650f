//! The MPS control client: `nvidia-cuda-mps-control` with commands on stdin, pointed at one
//! daemon by `CUDA_MPS_PIPE_DIRECTORY`.

use std::path::Path;
use std::process::Command;

use crate::env::EnvVars;
use crate::tool::{Tool, ToolError, ToolOutput};

/// What the client prints when no daemon answers in the pipe directory.
pub(crate) const NO_DAEMON: &str = "Cannot find MPS control daemon process";

/// The environment that points the control client, the daemon and CUDA clients at one daemon.
pub(crate) fn environment(
    pipe_directory: &Path,
    log_directory: &Path,
) -> [(&'static str, String); 2] {
    [
        (
            EnvVars::CUDA_MPS_PIPE_DIRECTORY,
            pipe_directory.display().to_string(),
        ),
        (
            EnvVars::CUDA_MPS_LOG_DIRECTORY,
            log_directory.display().to_string(),
        ),
    ]
}

fn command(control: &Tool, pipe_directory: &Path, log_directory: &Path) -> Command {
    let mut cmd = control.command();
    cmd.envs(environment(pipe_directory, log_directory));
    cmd
}

/// Sends one command line to the daemon of `pipe_directory`. `Ok(None)` when no daemon answers.
pub(crate) fn send(
    control: &Tool,
    pipe_directory: &Path,
    log_directory: &Path,
    line: &str,
) -> Result<Option<String>, ToolError> {
    let cmd = command(control, pipe_directory, log_directory);
    let output = control.run(cmd, format!("{line}\n").as_bytes())?;
    if output.stdout.contains(NO_DAEMON)
        || output.stderr.contains(NO_DAEMON)
        || !output.status.success()
    {
        return Ok(None);
    }
    Ok(Some(output.stdout))
}

/// What a daemon did when asked a command that must answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// It answered as a daemon answers.
    Answered,
    /// It took the command and gave no answer within the tool timeout: wedged.
    Silent,
    /// No daemon took the command, or what answered is not a daemon's answer.
    Unanswered,
}

/// Asks the daemon for its server list (`get_server_list`: the pids of its servers, one a
/// line), which a working daemon always answers. A daemon that accepts the connection but never
/// replies — what liveness checks of the process cannot see — is [`Answer::Silent`].
pub(crate) fn probe(
    control: &Tool,
    pipe_directory: &Path,
    log_directory: &Path,
) -> Result<Answer, ToolError> {
    match send(control, pipe_directory, log_directory, "get_server_list") {
        Ok(Some(reply)) if is_server_list(&reply) => Ok(Answer::Answered),
        Ok(_) => Ok(Answer::Unanswered),
        Err(ToolError::Timeout { .. }) => Ok(Answer::Silent),
        Err(e) => Err(e),
    }
}

fn is_server_list(reply: &str) -> bool {
    reply
        .lines()
        .map(str::trim)
        .all(|line| line.chars().all(|c| c.is_ascii_digit()))
}

/// Runs `nvidia-cuda-mps-control -d` for one GPU; returns once the daemon has detached.
pub(crate) fn start_detached(
    control: &Tool,
    pipe_directory: &Path,
    log_directory: &Path,
    gpu_uuid: &str,
) -> Result<ToolOutput, ToolError> {
    let mut cmd = command(control, pipe_directory, log_directory);
    cmd.arg("-d").env(EnvVars::CUDA_VISIBLE_DEVICES, gpu_uuid);
    control.run(cmd, b"")
}

/// The command for a foreground daemon (`-f`), for the caller to spawn and supervise.
pub(crate) fn foreground_command(
    control: &Tool,
    pipe_directory: &Path,
    log_directory: &Path,
    gpu_uuid: &str,
) -> Command {
    let mut cmd = command(control, pipe_directory, log_directory);
    cmd.arg("-f").env(EnvVars::CUDA_VISIBLE_DEVICES, gpu_uuid);
    cmd
}
