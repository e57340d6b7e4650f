//! The supervisor's one child: the guard (see `soak::guard`), running the command under it, and
//! the command's two output streams, relayed through the console with their tails kept for the
//! artifact.
//!
//! The guard is this process's unreaped child until [`Guard::finish`], so its pid names it until
//! then: its death is read from `/proc` without any risk of naming another process.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::context::{LOOK_EVERY, SoakContext};
use super::phase::Ended;
use crate::event::soak::FailureKind;
use crate::process::{ProcSource, SystemProc};
use crate::soak::console::{Console, Stream};
use crate::soak::guard::{self, GuardStatus};
use crate::soak::request::SoakSpec;
use crate::soak::watch::Failure;
use crate::time::poll_until;

/// How much of each output stream the artifact keeps.
const TAIL_BYTES: usize = 64 * 1024;

/// How long the end of a soak waits for its output pipes to close once its tree is gone.
const TAIL_PATIENCE: Duration = Duration::from_secs(2);

/// One output stream of the command, passed through to ours with its tail kept.
struct Tail {
    pump: JoinHandle<()>,
    kept: Arc<Mutex<Vec<u8>>>,
}

impl Tail {
    /// Relays `from` through the console as `stream`, keeping the last [`TAIL_BYTES`].
    fn pump(mut from: impl Read + Send + 'static, console: Arc<Console>, stream: Stream) -> Self {
        let kept = Arc::new(Mutex::new(Vec::new()));
        let tail = Arc::clone(&kept);
        let pump = std::thread::spawn(move || {
            let mut chunk = [0u8; 16 * 1024];
            loop {
                match from.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        console.relay(stream, &chunk[..n]);
                        if let Ok(mut tail) = tail.lock() {
                            tail.extend_from_slice(&chunk[..n]);
                            if tail.len() > TAIL_BYTES {
                                let excess = tail.len() - TAIL_BYTES;
                                tail.drain(..excess);
                            }
                        }
                    }
                }
            }
        });
        Self { pump, kept }
    }

    /// Waits for the stream to close and returns its tail. A process the soak could not stop
    /// (one that escaped to another user, say) may still hold the pipe: after [`TAIL_PATIENCE`]
    /// the tail so far is taken and the pump left to end with this process.
    fn finish(self) -> Vec<u8> {
        if poll_until(TAIL_PATIENCE, LOOK_EVERY, || self.pump.is_finished()) {
            let _ = self.pump.join();
        }
        self.kept.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

/// The guard process, running the command under it.
pub(super) struct Guard {
    /// When the guard was about to be spawned: the soak's clock starts here.
    pub t0: Instant,
    child: Child,
    pub pid: u32,
    status_path: PathBuf,
    stdout: Option<Tail>,
    stderr: Option<Tail>,
}

impl Guard {
    /// Spawns the guard that runs the command, `heartbeat` named to it in `UNILAB_HEARTBEAT`
    /// (with `--env-clear` too: it is unilab's, as the guard's own arguments are); without
    /// one, the variable is not set (not even as unilab's own environment has it).
    pub(super) fn spawn(
        ctx: &SoakContext,
        spec: &SoakSpec,
        (status_path, heartbeat): (&Path, Option<&Path>),
        flight: &[(String, String)],
    ) -> Result<Self, Failure> {
        let t0 = Instant::now();
        let mut command = Command::new(&ctx.guard_program);
        if spec.env_clear {
            // The guard needs no variable: the command gets what `--env` gave, nothing else.
            command.env_clear();
        }
        command
            .arg(guard::SUBCOMMAND)
            .arg("--status")
            .arg(status_path)
            .arg("--")
            .args(&spec.argv)
            .current_dir(&spec.cwd)
            .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Over what `--env` gave: the variable is unilab's.
        match heartbeat {
            Some(path) => command.env(super::beats::VARIABLE, path),
            None => command.env_remove(super::beats::VARIABLE),
        };
        // The flight recorder's, where the user did not set them.
        command.envs(flight.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let mut child = command.spawn().map_err(|e| {
            Failure::new(
                FailureKind::SpawnFailed,
                format!("cannot start the soak guard: {e}"),
            )
        })?;
        let stdout = child
            .stdout
            .take()
            .map(|out| Tail::pump(out, Arc::clone(&ctx.console), Stream::Stdout));
        let stderr = child
            .stderr
            .take()
            .map(|err| Tail::pump(err, Arc::clone(&ctx.console), Stream::Stderr));
        Ok(Self {
            t0,
            pid: child.id(),
            child,
            status_path: status_path.to_owned(),
            stdout,
            stderr,
        })
    }

    pub(super) fn status(&self) -> GuardStatus {
        GuardStatus::read(&self.status_path)
    }

    /// A failure when the guard has died before the command it runs was reported to exit: it
    /// only ends once the supervisor closes its input, so its death is something else's doing
    /// (a SIGKILL, the OOM killer). The guard is this process's unreaped child, so its pid
    /// names it until it is reaped.
    pub(super) fn died(&self, status: &GuardStatus) -> Option<Failure> {
        let dead = SystemProc::default()
            .stat(self.pid)
            .is_none_or(|s| s.has_exited());
        (dead && !status.exited()).then(|| {
            Failure::new(
                FailureKind::MonitorError,
                format!(
                    "the soak's guard (pid {}) died while the command ran; the command was no longer supervised, so its processes were stopped",
                    self.pid
                ),
            )
        })
    }

    /// Whether the guard is done: the command reported to exit, or the guard dead.
    pub(super) fn done(&self) -> bool {
        let status = self.status();
        status.exited() || self.died(&status).is_some()
    }

    /// Reads the final status, then closes the guard's input — which tells it to kill anything
    /// left and exit — and waits for it and for the output to end.
    pub(super) fn finish(mut self) -> Ended {
        let status = self.status();
        drop(self.child.stdin.take());
        if !poll_until(Duration::from_secs(5), LOOK_EVERY, || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        }) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        Ended {
            status,
            stdout_tail: self.stdout.map(Tail::finish).unwrap_or_default(),
            stderr_tail: self.stderr.map(Tail::finish).unwrap_or_default(),
        }
    }
}
