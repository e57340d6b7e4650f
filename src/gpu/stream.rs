//! The GPUs as a stream: one long-lived `nvidia-smi` in loop mode for the GPUs' memory and
//! utilisation and one for their compute processes, each read line by line on its own thread —
//! no process spawned a sample. On big multi-GPU hosts a one-shot `nvidia-smi` can take seconds
//! where its loop mode answers in a fraction of that.
//!
//! The GPU stream is the heartbeat: it prints one line a GPU every interval, so no line within
//! an interval and the tool timeout is a fault. A stream that faults or exits is killed (its
//! process group, SIGKILL), reaped and started again after a back-off (1 s, doubling, at most
//! 60 s); the fault is what the next samples record. The compute-process stream prints nothing
//! while no process uses a GPU, so it has no heartbeat of its own: a process counts as on a GPU
//! while its line was printed within the last two intervals. Dropping the stream stops both
//! tools and reaps them: none outlives the soak.

use crate::time::poll_until;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::smi::{FORMAT, parse_value};
use crate::event::soak::{GpuProcessSample, GpuSample};
use crate::tool::Tool;
use crate::trace::{STEPS, detail};

/// The query of the GPU stream, and how many fields its lines have.
const GPU_QUERY: &str = "--query-gpu=index,uuid,memory.used,memory.total,utilization.gpu";
/// The query of the compute-process stream.
const APPS_QUERY: &str = "--query-compute-apps=pid,used_gpu_memory,gpu_uuid";

/// Back-off after a fault: from the first to the longest.
const BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));

/// The longest line a stream may print (its lines are under 200 bytes), and the most GPUs and
/// compute processes it may list at once. A stream past any of them is flooding: a fault, and it
/// is restarted, so that what it writes cannot grow the supervisor's memory.
const MAX_LINE: u64 = 64 << 10;
const MAX_GPUS: usize = 1 << 10;
const MAX_APPS: usize = 1 << 16;

/// What the streams have said.
#[derive(Debug, Default)]
struct State {
    /// The last complete reading of every GPU, and when it completed.
    gpus: Option<(Instant, Vec<GpuSample>)>,
    /// The GPU lines of the reading under way.
    pending: Vec<GpuSample>,
    /// When the GPU stream last printed a line (the heartbeat), since its start.
    heard: Option<Instant>,
    /// Compute processes by pid: the GPU, its memory, when last printed.
    apps: HashMap<(u32, String), (Option<u64>, Instant)>,
    /// The last fault, until a new reading completes.
    fault: Option<String>,
    /// A stream printed more than it may: the fault that restarts the streams.
    flood: Option<String>,
}

impl State {
    /// One line of the GPU stream. A line whose index is not above the previous one's starts a
    /// new reading: the one before is complete.
    fn gpu_line(&mut self, line: &str) {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [index, uuid, used, total, util] = fields.as_slice() else {
            return;
        };
        let (Ok(index), true) = (index.parse::<u32>(), uuid.starts_with("GPU-")) else {
            return;
        };
        let now = Instant::now();
        self.heard = Some(now);
        if self.pending.last().is_some_and(|last| index <= last.index) {
            self.gpus = Some((now, std::mem::take(&mut self.pending)));
            self.fault = None;
        }
        if self.pending.len() >= MAX_GPUS {
            self.flood = Some(format!(
                "nvidia-smi listed more than {MAX_GPUS} GPUs in one reading; its stream is restarted"
            ));
            self.pending.clear();
            return;
        }
        self.pending.push(GpuSample {
            index,
            uuid: (*uuid).to_owned(),
            memory_used_mib: parse_value(used),
            memory_total_mib: parse_value(total),
            utilization_percent: parse_value(util),
            processes: Vec::new(),
        });
    }

    /// Processes not listed within `recent` are on no GPU: forgotten, so that a week of
    /// processes coming and going does not pile up.
    fn forget_apps_older_than(&mut self, recent: Duration) {
        self.apps.retain(|_, (_, seen)| seen.elapsed() <= recent);
    }

    fn app_line(&mut self, line: &str) {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [pid, memory, uuid] = fields.as_slice() else {
            return;
        };
        if let Ok(pid) = pid.parse() {
            let key = (pid, (*uuid).to_owned());
            if self.apps.len() >= MAX_APPS && !self.apps.contains_key(&key) {
                self.flood = Some(format!(
                    "nvidia-smi listed more than {MAX_APPS} compute processes; its stream is restarted"
                ));
                self.apps.clear();
                return;
            }
            self.apps.insert(key, (parse_value(memory), Instant::now()));
        }
    }
}

/// Both streams, supervised by a thread of their own.
pub struct GpuStream {
    state: Arc<Mutex<State>>,
    /// Dropping it wakes the supervising thread, which then stops both tools.
    stop: Option<Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    interval: Duration,
    /// How long without a reading before that is itself the error: two intervals and a timeout.
    patience: Duration,
    started: Instant,
    /// When a reading was last asked for, and when this process came back after not running
    /// for longer than the patience (SIGSTOP, starved of CPU) and for how long: the streams'
    /// silence meanwhile was this process's, not nvidia-smi's.
    asked: Mutex<Asked>,
}

#[derive(Debug, Default)]
struct Asked {
    last: Option<Instant>,
    resumed: Option<(Instant, Duration)>,
}

impl GpuStream {
    /// Starts `smi` in loop mode, printing every `interval`. With `leash` (the unilab binary),
    /// each `nvidia-smi` runs under `unilab __leash`, which kills it should this process die
    /// without stopping it (a SIGKILL): a stream, unlike a one-shot query, never ends by itself.
    pub fn start(smi: Tool, interval: Duration, leash: Option<PathBuf>) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let (stop, stopped) = std::sync::mpsc::channel();
        let thread = {
            let state = Arc::clone(&state);
            let smi = smi.clone();
            let launch = Launch { smi, leash };
            std::thread::spawn(move || supervise(&launch, interval, &state, &stopped))
        };
        Self {
            state,
            stop: Some(stop),
            thread: Some(thread),
            interval,
            patience: interval * 2 + smi.timeout,
            started: Instant::now(),
            asked: Mutex::new(Asked::default()),
        }
    }

    /// The latest reading, with its compute processes narrowed to `pids`; `None` while none is
    /// known — before the first reading (no error: it is on its way), after a fault, or when
    /// none completed for too long (with the error saying so).
    pub fn reading(&self, pids: &[u32]) -> (Option<Vec<GpuSample>>, Option<String>) {
        let resumed = self.away();
        let Ok(mut state) = self.state.lock() else {
            return (None, Some("the GPU stream's state is lost".into()));
        };
        let since = state.gpus.as_ref().map_or(self.started, |(at, _)| *at);
        if since.elapsed() > self.patience {
            // Stale because this process did not run (its readers have lines to catch up on),
            // not because nvidia-smi fell silent: said as such for a patience after it resumed.
            if let Some((resumed, away)) = resumed
                && resumed.elapsed() <= self.patience
            {
                return (
                    None,
                    Some(format!(
                        "no GPU reading since this supervisor resumed: it did not run for {:.1} s (stopped, or starved of CPU)",
                        away.as_secs_f64()
                    )),
                );
            }
            let error = state.fault.clone().unwrap_or_else(|| {
                format!(
                    "nvidia-smi has not answered for {:.1} s",
                    since.elapsed().as_secs_f64()
                )
            });
            return (None, Some(error));
        }
        let recent = self.interval * 2;
        state.forget_apps_older_than(recent);
        let gpus = state.gpus.as_ref().map(|(_, gpus)| {
            gpus.iter()
                .map(|gpu| {
                    let mut gpu = gpu.clone();
                    gpu.processes = state
                        .apps
                        .iter()
                        .filter(|((pid, uuid), _)| *uuid == gpu.uuid && pids.contains(pid))
                        .map(|((pid, _), (memory, _))| GpuProcessSample {
                            pid: *pid,
                            used_memory_mib: *memory,
                        })
                        .collect();
                    gpu.processes.sort_by_key(|p| p.pid);
                    gpu
                })
                .collect()
        });
        (gpus, state.fault.clone())
    }
}

impl GpuStream {
    /// When this process last came back after not running for longer than the patience, and
    /// for how long it was away, told by the gap between two readings asked for.
    fn away(&self) -> Option<(Instant, Duration)> {
        let now = Instant::now();
        let mut asked = self.asked.lock().ok()?;
        if let Some(gap) = asked.last.map(|last| now - last)
            && gap > self.patience
        {
            asked.resumed = Some((now, gap));
        }
        asked.last = Some(now);
        asked.resumed
    }
}

impl Drop for GpuStream {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// How a stream's `nvidia-smi` is started: the tool, and the leash it runs under, if any.
struct Launch {
    smi: Tool,
    leash: Option<PathBuf>,
}

/// One `nvidia-smi` of a stream and the thread that reads its lines.
struct Running {
    child: Child,
    reader: std::thread::JoinHandle<()>,
    /// The leash's end of the pipe: held while the stream runs.
    _leash: Option<ChildStdin>,
}

impl Running {
    fn spawn(
        launch: &Launch,
        query: &str,
        interval: Duration,
        state: &Arc<Mutex<State>>,
        take: fn(&mut State, &str),
    ) -> Result<Self, String> {
        let smi = &launch.smi;
        let millis = interval.as_millis().max(1).to_string();
        let mut command = match &launch.leash {
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
            .args([query, FORMAT, "-lms", &millis])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => format!("`{}` was not found", smi.name()),
                _ => format!("cannot run `{}`: {e}", smi.name()),
            })?;
        let leash = child.stdin.take();
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

    /// Kills its process group and reaps it; a process that cannot be killed (uninterruptible
    /// sleep on a wedged GPU) is left after half a second, as `Tool::run` leaves one.
    fn kill(mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        if poll_until(
            Duration::from_millis(500),
            Duration::from_millis(10),
            || matches!(self.child.try_wait(), Ok(Some(_))),
        ) {
            // Its pipe closed with it: the reader is at its end.
            let _ = self.reader.join();
        }
    }
}

/// Runs both streams until `stop`, restarting them after a fault.
fn supervise(launch: &Launch, interval: Duration, state: &Arc<Mutex<State>>, stop: &Receiver<()>) {
    let smi = &launch.smi;
    let silence = interval + smi.timeout;
    let mut backoff = BACKOFF.0;
    loop {
        let started = Instant::now();
        let fault = match (
            Running::spawn(launch, GPU_QUERY, interval, state, State::gpu_line),
            Running::spawn(launch, APPS_QUERY, interval, state, State::app_line),
        ) {
            (Ok(mut gpus), Ok(mut apps)) => {
                detail!(
                    STEPS,
                    "started `{}` in loop mode (every {}), pids {} and {}",
                    smi.name(),
                    crate::trace::ms(interval),
                    gpus.child.id(),
                    apps.child.id()
                );
                let fault = watch(smi, [&mut gpus, &mut apps], state, stop, silence, started);
                gpus.kill();
                apps.kill();
                fault
            }
            (gpus, apps) => {
                let mut faults = Vec::new();
                for running in [gpus, apps] {
                    match running {
                        Ok(running) => running.kill(),
                        Err(e) => faults.push(e),
                    }
                }
                faults.dedup();
                Some(faults.join("; "))
            }
        };
        let Some(fault) = fault else {
            return;
        };
        detail!(STEPS, "{fault}, after {}", crate::trace::ms(backoff));
        if let Ok(mut state) = state.lock() {
            state.fault = Some(fault);
            state.pending.clear();
            state.heard = None;
        }
        // A stream that ran well for a while starts again promptly.
        if started.elapsed() > BACKOFF.1 {
            backoff = BACKOFF.0;
        }
        if stopped(stop, backoff) {
            return;
        }
        backoff = (backoff * 2).min(BACKOFF.1);
    }
}

/// Waits up to `wait` for the stream to be dropped; whether it was.
fn stopped(stop: &Receiver<()>, wait: Duration) -> bool {
    !matches!(stop.recv_timeout(wait), Err(RecvTimeoutError::Timeout))
}

/// Watches two running streams until one faults (its description) or `stop` (`None`).
fn watch(
    smi: &Tool,
    streams: [&mut Running; 2],
    state: &Mutex<State>,
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
            return Some(format!(
                "nvidia-smi did not answer within {:.1} s; its stream is restarted",
                heard.elapsed().as_secs_f64()
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_completes_when_the_next_one_begins() {
        let mut state = State::default();
        state.gpu_line("0, GPU-a, 10, 100, 5");
        state.gpu_line("1, GPU-b, 20, 100, [N/A]");
        assert!(
            state.gpus.is_none(),
            "the second GPU's line may not be the last"
        );
        state.gpu_line("0, GPU-a, 11, 100, 6");
        let (_, gpus) = state.gpus.as_ref().unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[1].utilization_percent, None);
        state.gpu_line("Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus.");
        state.gpu_line("garbage");
        assert_eq!(state.pending.len(), 1);
        state.app_line("4242, 512, GPU-a");
        state.app_line("not, a, pid");
        assert_eq!(state.apps.len(), 1);
        state.forget_apps_older_than(Duration::from_secs(60));
        assert_eq!(state.apps.len(), 1, "listed just now");
        std::thread::sleep(Duration::from_millis(20));
        state.forget_apps_older_than(Duration::from_millis(10));
        assert!(state.apps.is_empty(), "not listed lately");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Loop mode reads whatever nvidia-smi prints, line by line: no line panics it, a reading
        /// holds only well-formed GPU lines, and no stream grows past its caps.
        #[test]
        fn no_stream_of_lines_panics_or_grows_past_its_caps(
            lines in proptest::collection::vec(
                proptest::prop_oneof![
                    "[0-9]{1,3}, GPU-[a-f0-9-]{1,12}, [0-9]{0,6}, [0-9N/A\\[\\]]{0,6}, .{0,8}",
                    "[0-9]{1,7}, [0-9]{0,6} ?(MiB)?, GPU-[a-f0-9]{1,8}",
                    ".{0,300}",
                ],
                0..300,
            ),
        ) {
            let mut state = State::default();
            for line in &lines {
                state.gpu_line(line);
                state.app_line(line);
            }
            proptest::prop_assert!(state.pending.len() <= MAX_GPUS);
            proptest::prop_assert!(state.apps.len() <= MAX_APPS);
            for gpu in state.gpus.iter().flat_map(|(_, g)| g).chain(&state.pending) {
                proptest::prop_assert!(gpu.uuid.starts_with("GPU-"));
            }
        }
    }

    #[test]
    fn a_reading_of_more_gpus_than_any_host_has_is_a_flood_not_a_heap() {
        let mut state = State::default();
        for i in 0..=MAX_GPUS {
            state.gpu_line(&format!("{i}, GPU-{i:08x}, 1, 2, 3"));
        }
        assert!(state.flood.is_some());
        assert!(state.pending.len() <= MAX_GPUS);
        let huge = format!("{}, GPU-a, 1, 2, 3", "9".repeat(70_000));
        state.gpu_line(&huge);
        state.app_line(&huge);
    }
}
