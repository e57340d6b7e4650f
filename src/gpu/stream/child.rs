//! The `nvidia-smi` processes of the streams: how one is started (leashed, in a process group of
//! its own), the thread that reads its lines into the [`StreamState`], and the watch over two running
//! streams that says when one faults — it exited, flooded, or fell silent.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::super::smi::FORMAT;
use super::rows::StreamState;
use crate::tool::{Tool, kill_group};

/// The longest line a stream may print (its lines are under 300 bytes): a stream past it is
/// flooding, a fault, and it is restarted.
const MAX_LINE: u64 = 64 << 10;

/// How a stream's `nvidia-smi` is started: the tool, and the leash it runs under, if any.
pub(super) struct StreamLaunch {
    pub smi: Tool,
    pub leash: Option<PathBuf>,
}

impl StreamLaunch {
    /// Starts `nvidia-smi ARGS` in a process group of its own, its standard output piped; with
    /// the leash's end of its pipe, to hold while it runs.
    pub(super) fn spawn(&self, args: &[&str]) -> Result<(Child, Option<ChildStdin>), String> {
        let smi = &self.smi;
        let mut command = match &self.leash {
            Some(unilab) => {
                let mut command = Command::new(unilab);
                command
                    .args([crate::tool::LEASH, "--"])
                    .arg(&smi.program)
                    .stdin(Stdio::piped());
                command
            }
            None => {
                let mut command = smi.command();
                command.stdin(Stdio::null());
                command
            }
        };
        let mut child = command
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| {
                if crate::tool::not_found(&smi.program, &e) {
                    format!("`{}` was not found", smi.name())
                } else {
                    format!("cannot run `{}`: {e}", smi.name())
                }
            })?;
        let leash = child.stdin.take();
        Ok((child, leash))
    }
}

/// One `nvidia-smi` of a stream and the thread that reads its lines.
pub(super) struct Running {
    pub child: Child,
    reader: std::thread::JoinHandle<()>,
    /// The leash's end of the pipe: held while the stream runs.
    _leash: Option<ChildStdin>,
}

impl Running {
    pub(super) fn spawn(
        launch: &StreamLaunch,
        query: &str,
        interval: Duration,
        state: &Arc<Mutex<StreamState>>,
        take: fn(&mut StreamState, &str),
    ) -> Result<Self, String> {
        let millis = interval.as_millis().max(1).to_string();
        let (mut child, leash) = launch.spawn(&[query, FORMAT, "-lms", &millis])?;
        let stdout = child.stdout.take().ok_or("no output pipe")?;
        let state = Arc::clone(state);
        let reader = std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout);
            let mut line = Vec::new();
            while matches!(Read::take(&mut lines, MAX_LINE).read_until(b'\n', &mut line), Ok(n) if n > 0)
            {
                let Ok(mut state) = state.lock() else { return };
                if line.last() != Some(&b'\n') && line.len() as u64 >= MAX_LINE {
                    // Reading stops: the stream is killed for it.
                    state.flood = Some(format!(
                        "nvidia-smi printed a line of more than {} KiB; its stream is restarted",
                        MAX_LINE >> 10
                    ));
                    return;
                }
                take(&mut state, String::from_utf8_lossy(&line).trim_end());
                line.clear();
            }
        });
        Ok(Self {
            child,
            reader,
            _leash: leash,
        })
    }

    /// How it exited, if it did.
    fn exited(&mut self, smi: &Tool) -> Option<String> {
        match self.child.try_wait() {
            // What the leash says when it could not start the tool.
            Ok(Some(status)) if status.code() == Some(127) => {
                Some(format!("`{}` was not found", smi.name()))
            }
            Ok(Some(status)) if status.code() == Some(126) => {
                Some(format!("cannot run `{}`", smi.name()))
            }
            Ok(Some(status)) => Some(format!(
                "nvidia-smi's stream ended ({status}); it is restarted"
            )),
            Ok(None) => None,
            Err(e) => Some(format!("cannot watch nvidia-smi's stream: {e}")),
        }
    }

    /// Kills its process group and reaps it (see [`kill_group`]).
    pub(super) fn kill(mut self) {
        if kill_group(&mut self.child) {
            // Its pipe closed with it: the reader is at its end.
            let _ = self.reader.join();
        }
    }
}

/// Waits up to `wait` for the stream to be dropped; whether it was.
pub(super) fn stopped(stop: &Receiver<()>, wait: Duration) -> bool {
    !matches!(stop.recv_timeout(wait), Err(RecvTimeoutError::Timeout))
}

/// Watches two running streams until one faults (its description) or `stop` (`None`).
pub(super) fn watch(
    smi: &Tool,
    streams: [&mut Running; 2],
    state: &Mutex<StreamState>,
    stop: &Receiver<()>,
    silence: Duration,
    started: Instant,
) -> Option<String> {
    let [gpus, apps] = streams;
    // Often enough to notice a silence within a fraction of it, seldom enough to cost nothing.
    let tick = (silence / 4).clamp(Duration::from_millis(50), Duration::from_millis(500));
    // A silence is counted from the later of the last line and the last time this process came
    // back after not running: lines printed while it was stopped wait in the pipe.
    let mut excused = started;
    let mut woke = Instant::now();
    while !stopped(stop, tick) {
        if woke.elapsed() > tick + silence / 2 {
            excused = Instant::now();
        }
        woke = Instant::now();
        // A flood first: the reader stops reading at it, and the tool then fails to write.
        if let Some(flood) = state.lock().ok().and_then(|mut s| s.flood.take()) {
            return Some(flood);
        }
        if let Some(ended) = gpus.exited(smi).or_else(|| apps.exited(smi)) {
            return Some(ended);
        }
        let heard = state
            .lock()
            .ok()
            .and_then(|s| s.heard)
            .unwrap_or(started)
            .max(excused);
        if heard.elapsed() > silence {
            // Stopped after this round's check of its own stall, the process would blame the
            // tool for it: the stall is judged again on this side of the silence's reading.
            if woke.elapsed() > tick + silence / 2 {
                excused = Instant::now();
                continue;
            }
            return Some(format!(
                "nvidia-smi did not answer within {:.1} s; its stream is restarted",
                heard.elapsed().as_secs_f64()
            ));
        }
    }
    None
}
