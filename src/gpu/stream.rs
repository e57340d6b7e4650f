//! The GPUs as a stream: one long-lived `nvidia-smi` in loop mode for the GPUs' memory,
//! utilisation and health and one for their compute processes, each read line by line on its own
//! thread — no process spawned a sample. On big multi-GPU hosts a one-shot `nvidia-smi` can take
//! seconds where its loop mode answers in a fraction of that.
//!
//! The GPU stream asks for what the driver knows. Before it starts, one query (not a loop, under
//! the tool timeout) probes every field; each field nvidia-smi refuses (`Field "x" is not a valid
//! field to query.`) is asked again under its older name (`clocks_throttle_reasons.active`
//! before driver 535) or dropped, a bounded number of times, and the rows are read by the
//! positions of the fields accepted. A field the driver does not know never breaks the stream.
//! A probe that fails otherwise (no driver, a hang, a flood) leaves the base fields — memory and
//! utilisation, as before health was asked for — and the next start probes again.
//!
//! The GPU stream is the heartbeat: it prints one line a GPU every interval, so no line within
//! an interval and the tool timeout is a fault. A stream that faults or exits is killed (its
//! process group, SIGKILL), reaped and started again after a back-off (1 s, doubling, at most
//! 60 s); the fault is what the next samples record. The compute-process stream prints nothing
//! while no process uses a GPU, so it has no heartbeat of its own: a process counts as on a GPU
//! while its line was printed within the last two intervals — the soak's own processes and other
//! tenants alike. Dropping the stream stops both tools (and a probe under way) and reaps them:
//! none outlives the soak.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::smi::{FORMAT, parse_value};
use crate::event::soak::{GpuHealth, GpuProcessSample, GpuSample};
use crate::tool::{Tool, kill_group};
use crate::trace::{STEPS, detail};

/// The fields of the GPU stream that every driver knows: the first of its rows, in this order.
const BASE_FIELDS: [&str; 5] = [
    "index",
    "uuid",
    "memory.used",
    "memory.total",
    "utilization.gpu",
];
/// The query of the compute-process stream.
const APPS_QUERY: &str = "--query-compute-apps=pid,used_gpu_memory,gpu_uuid";

/// A health figure of the GPU stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    Temperature,
    Power,
    SmClock,
    ThrottleMask,
    EccUncorrected,
    RetiredPending,
}

/// The health fields asked for after the base ones, each under every name drivers have given
/// it, newest first: a driver that refuses one name is asked the next.
const HEALTH_FIELDS: [(Health, &[&str]); 6] = [
    (Health::Temperature, &["temperature.gpu"]),
    (Health::Power, &["power.draw"]),
    (Health::SmClock, &["clocks.sm"]),
    (
        Health::ThrottleMask,
        &[
            "clocks_event_reasons.active",
            "clocks_throttle_reasons.active",
        ],
    ),
    (
        Health::EccUncorrected,
        &["ecc.errors.uncorrected.volatile.total"],
    ),
    (Health::RetiredPending, &["retired_pages.pending"]),
];

/// Back-off after a fault: from the first to the longest.
const BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));

/// The longest line a stream may print (its lines are under 300 bytes), and the most GPUs and
/// compute processes it may list at once. A stream past any of them is flooding: a fault, and it
/// is restarted, so that what it writes cannot grow the supervisor's memory.
const MAX_LINE: u64 = 64 << 10;
const MAX_GPUS: usize = 1 << 10;
const MAX_APPS: usize = 1 << 16;
/// The most a probe's answer may hold: a row for each of the most GPUs, with room to spare. A
/// probe that prints more failed.
const MAX_ANSWER: u64 = 1 << 20;
/// How often a probe under way looks whether it has its answer, or the stream was dropped.
const PROBE_TICK: Duration = Duration::from_millis(5);

/// The fields of the GPU stream's rows: [`BASE_FIELDS`], then each health field the driver
/// accepted, under the name it accepted. The default is the base fields alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Fields {
    health: Vec<(Health, &'static str)>,
}

impl Fields {
    /// Every health field under its newest name: what a probe asks first.
    fn all() -> Self {
        Self {
            health: HEALTH_FIELDS
                .iter()
                .filter_map(|(health, names)| Some((*health, *names.first()?)))
                .collect(),
        }
    }

    /// The `--query-gpu=` argument that asks for these fields.
    fn query(&self) -> String {
        let names: Vec<&str> = BASE_FIELDS
            .iter()
            .copied()
            .chain(self.health.iter().map(|(_, name)| *name))
            .collect();
        format!("--query-gpu={}", names.join(","))
    }

    /// How many fields a row of these has.
    fn count(&self) -> usize {
        BASE_FIELDS.len() + self.health.len()
    }

    /// These fields once the driver refused `refused`: its next older name in its place, or
    /// without it when it has none. `None` when `refused` is no health field asked for (a base
    /// field, or one never asked): no list of these fields can do without it.
    fn without(&self, refused: &str) -> Option<Self> {
        let at = self.health.iter().position(|(_, name)| *name == refused)?;
        let health = self.health[at].0;
        let (_, names) = HEALTH_FIELDS.iter().find(|(h, _)| *h == health)?;
        let mut fields = self.clone();
        match names.iter().skip_while(|name| **name != refused).nth(1) {
            Some(older) => fields.health[at].1 = older,
            None => {
                fields.health.remove(at);
            }
        }
        Some(fields)
    }

    /// The health figures of a row's values after its base fields, one a field.
    fn read(&self, values: &[&str]) -> GpuHealth {
        let mut health = GpuHealth::default();
        for ((field, _), value) in self.health.iter().zip(values) {
            match field {
                Health::Temperature => health.temperature_c = parse_value(value),
                Health::Power => health.power_mw = milliwatts(value),
                Health::SmClock => health.sm_clock_mhz = parse_value(value),
                Health::ThrottleMask => health.throttle_mask = hex_mask(value),
                Health::EccUncorrected => health.ecc_uncorrected_volatile = parse_value(value),
                Health::RetiredPending => health.retired_pages_pending = yes_no(value),
            }
        }
        health
    }
}

/// Watts as nvidia-smi prints them (`120.50`) in milliwatts; `None` for `[N/A]` and the like.
fn milliwatts(field: &str) -> Option<u64> {
    let watts: f64 = field.trim().parse().ok()?;
    // No GPU draws a gigawatt: a figure past that is not one to record.
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "checked finite, not negative and far below u64::MAX"
    )]
    (watts.is_finite() && (0.0..1e9).contains(&watts)).then(|| (watts * 1000.0).round() as u64)
}

/// A bit mask as nvidia-smi prints it (`0x0000000000000004`); `None` for `[N/A]` and the like.
fn hex_mask(field: &str) -> Option<u64> {
    let field = field.trim();
    let digits = field
        .strip_prefix("0x")
        .or_else(|| field.strip_prefix("0X"))?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// `Yes` or `No`; `None` for `[N/A]` and the like.
fn yes_no(field: &str) -> Option<bool> {
    match field.trim() {
        "Yes" => Some(true),
        "No" => Some(false),
        _ => None,
    }
}

/// The field nvidia-smi names where it says `Field "x" is not a valid field to query.`
fn refused_field(text: &str) -> Option<&str> {
    text.lines().find_map(|line| {
        line.trim()
            .strip_prefix("Field \"")?
            .strip_suffix("\" is not a valid field to query.")
    })
}

/// What nvidia-smi said to one probe of a list of fields.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// It answered (exit 0): it knows every field asked.
    Known,
    /// It refused the field named.
    Refused(String),
    /// It failed otherwise; with the fault to record where it did not answer in time.
    Failed(Option<String>),
    /// The stream was dropped meanwhile.
    Stopped,
}

/// What probing settled.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Probed {
    /// The fields the driver knows.
    Fields(Fields),
    /// None could be settled; with the fault to record, if any.
    Failed(Option<String>),
    /// The stream was dropped meanwhile.
    Stopped,
}

/// Asks `ask` about every field, then again after each refusal without the field refused (or
/// with its older name), until it answers; each refusal takes a name away, so it asks at most
/// once a name and once more.
fn probe(mut ask: impl FnMut(&Fields) -> Answer) -> Probed {
    let names: usize = HEALTH_FIELDS.iter().map(|(_, names)| names.len()).sum();
    let mut fields = Fields::all();
    for _ in 0..=names {
        match ask(&fields) {
            Answer::Known => return Probed::Fields(fields),
            Answer::Refused(field) => match fields.without(&field) {
                Some(fewer) => fields = fewer,
                None => return Probed::Failed(None),
            },
            Answer::Failed(fault) => return Probed::Failed(fault),
            Answer::Stopped => return Probed::Stopped,
        }
    }
    Probed::Failed(None)
}

/// One GPU line of a reading: its sample (with no processes yet) and its health (with no other
/// processes yet).
#[derive(Debug, Clone)]
struct GpuRow {
    sample: GpuSample,
    health: GpuHealth,
}

/// The compute processes the stream listed lately, by pid and GPU: memory, when last listed.
type Apps = HashMap<(u32, String), (Option<u64>, Instant)>;

/// What the streams have said.
#[derive(Debug, Default)]
struct State {
    /// The fields of the GPU stream's rows, as the last probe settled them.
    fields: Fields,
    /// The last complete reading of every GPU, and when it completed.
    gpus: Option<(Instant, Vec<GpuRow>)>,
    /// The GPU lines of the reading under way.
    pending: Vec<GpuRow>,
    /// When the GPU stream last printed a line (the heartbeat), since its start.
    heard: Option<Instant>,
    /// Compute processes by pid and GPU.
    apps: Apps,
    /// The last fault, until a new reading completes.
    fault: Option<String>,
    /// A stream printed more than it may: the fault that restarts the streams.
    flood: Option<String>,
}

impl State {
    /// One line of the GPU stream, read by the positions of [`State::fields`]. A line whose
    /// index is not above the previous one's starts a new reading: the one before is complete.
    fn gpu_line(&mut self, line: &str) {
        let values: Vec<&str> = line.split(',').map(str::trim).collect();
        if values.len() != self.fields.count() {
            return;
        }
        let (base, health) = values.split_at(BASE_FIELDS.len());
        let [index, uuid, used, total, util] = base else {
            return;
        };
        let (Ok(index), true) = (index.parse::<u32>(), uuid.starts_with("GPU-")) else {
            return;
        };
        let now = Instant::now();
        self.heard = Some(now);
        if self
            .pending
            .last()
            .is_some_and(|last| index <= last.sample.index)
        {
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
        self.pending.push(GpuRow {
            sample: GpuSample {
                index,
                uuid: (*uuid).to_owned(),
                memory_used_mib: parse_value(used),
                memory_total_mib: parse_value(total),
                utilization_percent: parse_value(util),
                processes: Vec::new(),
            },
            health: self.fields.read(health),
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

/// Each GPU of a reading with the compute processes listed on it: those of `pids` (the soak's
/// tree) in its sample, the others (other tenants) in its health, each by pid.
fn assemble(rows: &[GpuRow], apps: &Apps, pids: &[u32]) -> (Vec<GpuSample>, Vec<GpuHealth>) {
    rows.iter()
        .map(|row| {
            let (mut sample, mut health) = (row.sample.clone(), row.health.clone());
            for ((pid, uuid), (memory, _)) in apps {
                if *uuid != sample.uuid {
                    continue;
                }
                let process = GpuProcessSample {
                    pid: *pid,
                    used_memory_mib: *memory,
                };
                if pids.contains(pid) {
                    sample.processes.push(process);
                } else {
                    health.other_processes.push(process);
                }
            }
            sample.processes.sort_by_key(|p| p.pid);
            health.other_processes.sort_by_key(|p| p.pid);
            (sample, health)
        })
        .unzip()
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
    /// Starts `smi` in loop mode, printing every `interval`, once a probe settled its fields.
    /// With `leash` (the unilab binary), each `nvidia-smi` runs under `unilab __leash`, which
    /// kills it should this process die without stopping it (a SIGKILL): a stream, unlike a
    /// one-shot query, never ends by itself.
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
        let (gpus, _, error) = self.reading_with_health(pids);
        (gpus, error)
    }

    /// [`GpuStream::reading`], with each GPU's health beside it in the same order (`None`
    /// exactly when the reading is): its figures (`None` where the driver does not report one)
    /// and the compute processes on it that are not among `pids`, under the same rule as the
    /// tree's — listed within the last two intervals.
    pub(crate) fn reading_with_health(
        &self,
        pids: &[u32],
    ) -> (
        Option<Vec<GpuSample>>,
        Option<Vec<GpuHealth>>,
        Option<String>,
    ) {
        let resumed = self.away();
        let Ok(mut state) = self.state.lock() else {
            return (None, None, Some("the GPU stream's state is lost".into()));
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
            return (None, None, Some(error));
        }
        state.forget_apps_older_than(self.interval * 2);
        let (gpus, health) = state
            .gpus
            .as_ref()
            .map(|(_, rows)| assemble(rows, &state.apps, pids))
            .unzip();
        (gpus, health, state.fault.clone())
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

impl Launch {
    /// Starts `nvidia-smi ARGS` in a process group of its own, its standard output piped; with
    /// the leash's end of its pipe, to hold while it runs.
    fn spawn(&self, args: &[&str]) -> Result<(Child, Option<ChildStdin>), String> {
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
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => format!("`{}` was not found", smi.name()),
                _ => format!("cannot run `{}`: {e}", smi.name()),
            })?;
        let leash = child.stdin.take();
        Ok((child, leash))
    }
}

/// One probe: `fields` asked once, not in a loop, under the tool's timeout, started as the
/// streams are (leashed); given up as soon as the stream is dropped.
fn ask(launch: &Launch, fields: &Fields, stop: &Receiver<()>) -> Answer {
    let query = fields.query();
    let Ok((mut child, _leash)) = launch.spawn(&[&query, FORMAT]) else {
        return Answer::Failed(None);
    };
    let Some(stdout) = child.stdout.take() else {
        kill_group(&mut child);
        return Answer::Failed(None);
    };
    let (sender, answered) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = Read::take(stdout, MAX_ANSWER + 1).read_to_end(&mut text);
        let _ = sender.send(text);
    });
    let timeout = launch.smi.timeout;
    let deadline = Instant::now() + timeout;
    let mut text: Option<Vec<u8>> = None;
    let answer = loop {
        if text.is_none() {
            text = answered.try_recv().ok();
        }
        match (&text, child.try_wait()) {
            (Some(text), _) if text.len() as u64 > MAX_ANSWER => break Answer::Failed(None),
            (Some(text), Ok(Some(status))) => {
                if status.success() {
                    return Answer::Known;
                }
                return refused_field(&String::from_utf8_lossy(text))
                    .map_or(Answer::Failed(None), |field| {
                        Answer::Refused(field.to_owned())
                    });
            }
            (_, Err(_)) => break Answer::Failed(None),
            _ => {}
        }
        if Instant::now() >= deadline {
            break Answer::Failed(Some(format!(
                "nvidia-smi did not answer within {:.1} s",
                timeout.as_secs_f64()
            )));
        }
        if stopped(stop, PROBE_TICK) {
            break Answer::Stopped;
        }
    };
    kill_group(&mut child);
    answer
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
    fn kill(mut self) {
        if kill_group(&mut self.child) {
            // Its pipe closed with it: the reader is at its end.
            let _ = self.reader.join();
        }
    }
}

/// Settles the GPU stream's fields with `nvidia-smi` (see [`probe`]) and says so in the trace.
fn settle_fields(launch: &Launch, stop: &Receiver<()>) -> Probed {
    let probed = probe(|fields| {
        let answer = ask(launch, fields, stop);
        if let Answer::Refused(field) = &answer {
            detail!(
                STEPS,
                "nvidia-smi does not know `{field}`: asked without it"
            );
        }
        answer
    });
    match &probed {
        Probed::Fields(fields) => detail!(STEPS, "the GPU stream asks `{}`", fields.query()),
        Probed::Failed(fault) => detail!(
            STEPS,
            "no fields settled ({}): the GPU stream asks `{}`",
            fault.as_deref().unwrap_or("nvidia-smi failed"),
            Fields::default().query()
        ),
        Probed::Stopped => {}
    }
    probed
}

/// Runs both streams until `stop`, restarting them after a fault; each start until a probe
/// settles the GPU stream's fields probes first.
fn supervise(launch: &Launch, interval: Duration, state: &Arc<Mutex<State>>, stop: &Receiver<()>) {
    let smi = &launch.smi;
    let silence = interval + smi.timeout;
    let mut backoff = BACKOFF.0;
    let mut settled: Option<Fields> = None;
    loop {
        let fields = match &settled {
            Some(fields) => fields.clone(),
            None => match settle_fields(launch, stop) {
                Probed::Fields(fields) => {
                    settled = Some(fields.clone());
                    fields
                }
                Probed::Failed(fault) => {
                    if let (Some(fault), Ok(mut state)) = (fault, state.lock()) {
                        state.fault = Some(fault);
                    }
                    Fields::default()
                }
                Probed::Stopped => return,
            },
        };
        let query = fields.query();
        if let Ok(mut state) = state.lock() {
            state.fields = fields;
        }
        // The streams' silence is counted from here, after the probe.
        let started = Instant::now();
        let fault = match (
            Running::spawn(launch, &query, interval, state, State::gpu_line),
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
        assert_eq!(gpus[1].sample.utilization_percent, None);
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

    #[test]
    fn rows_are_read_by_the_positions_of_the_fields_accepted() {
        let mut state = State {
            fields: Fields {
                health: vec![
                    (Health::ThrottleMask, "clocks_throttle_reasons.active"),
                    (Health::Temperature, "temperature.gpu"),
                ],
            },
            ..State::default()
        };
        state.gpu_line("0, GPU-a, 10, 100, 5, 0x0000000000000004, 67");
        // A row of the base fields alone, or of every field, is not one of these.
        state.gpu_line("1, GPU-b, 10, 100, 5");
        state.gpu_line("1, GPU-b, 10, 100, 5, 45, 120.50, 1980, 0x0, 0, No");
        state.gpu_line("1, GPU-b, 20, 100, 7, [N/A], [Not Supported]");
        state.gpu_line("0, GPU-a, 11, 100, 6, 0x0000000000000000, 68");
        let (_, gpus) = state.gpus.as_ref().unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].sample.memory_used_mib, Some(10));
        assert_eq!(
            gpus[0].health,
            GpuHealth {
                temperature_c: Some(67),
                throttle_mask: Some(4),
                ..GpuHealth::default()
            }
        );
        assert_eq!(gpus[1].sample.utilization_percent, Some(7));
        assert_eq!(gpus[1].health, GpuHealth::default());
    }

    #[test]
    fn health_figures_parse_and_what_is_unavailable_is_none() {
        let all = Fields::all();
        let health = all.read(&["45", "120.50", "1980", "0x0000000000000044", "3", "Yes"]);
        assert_eq!(
            health,
            GpuHealth {
                temperature_c: Some(45),
                power_mw: Some(120_500),
                sm_clock_mhz: Some(1980),
                throttle_mask: Some(0x44),
                ecc_uncorrected_volatile: Some(3),
                retired_pages_pending: Some(true),
                other_processes: Vec::new(),
            }
        );
        let unknown = [
            "[N/A]",
            "[Not Supported]",
            "[Unknown Error]",
            "[N/A]",
            "[N/A]",
            "[N/A]",
        ];
        assert_eq!(all.read(&unknown), GpuHealth::default());
        assert_eq!(milliwatts("312.07"), Some(312_070));
        assert_eq!(milliwatts("0.00"), Some(0));
        for bad in ["-1.00", "NaN", "inf", "1e30", ""] {
            assert_eq!(milliwatts(bad), None, "{bad}");
        }
        assert_eq!(hex_mask("0x0000000000000000"), Some(0));
        assert_eq!(hex_mask("0xFFFFFFFFFFFFFFFF"), Some(u64::MAX));
        for bad in ["4", "0x", "0x+4", "0x10000000000000000", "[N/A]"] {
            assert_eq!(hex_mask(bad), None, "{bad}");
        }
        assert_eq!(yes_no("No"), Some(false));
        assert_eq!(yes_no("[N/A]"), None);
    }

    #[test]
    fn a_refusal_names_its_field() {
        assert_eq!(
            refused_field(
                "Field \"clocks_event_reasons.active\" is not a valid field to query.\n\n"
            ),
            Some("clocks_event_reasons.active")
        );
        assert_eq!(refused_field("No devices were found"), None);
    }

    /// A driver as a probe sees it: the names it refuses, each asked list recorded.
    fn driver<'a>(
        refuses: &'a [&'a str],
        asked: &'a mut Vec<String>,
    ) -> impl FnMut(&Fields) -> Answer + 'a {
        move |fields| {
            asked.push(fields.query());
            match fields
                .health
                .iter()
                .find(|(_, name)| refuses.contains(name))
            {
                Some((_, name)) => Answer::Refused((*name).to_owned()),
                None => Answer::Known,
            }
        }
    }

    #[test]
    fn probing_drops_refused_fields_and_falls_back_to_the_old_mask_spelling() {
        let mut asked = Vec::new();
        assert_eq!(
            probe(driver(&[], &mut asked)),
            Probed::Fields(Fields::all())
        );
        assert_eq!(
            asked.len(),
            1,
            "a driver that knows every field is asked once"
        );

        // Before driver 535, with no ECC on this board.
        let mut asked = Vec::new();
        let old = [
            "clocks_event_reasons.active",
            "ecc.errors.uncorrected.volatile.total",
        ];
        let Probed::Fields(fields) = probe(driver(&old, &mut asked)) else {
            panic!("no fields settled: {asked:?}");
        };
        assert_eq!(
            fields.query(),
            "--query-gpu=index,uuid,memory.used,memory.total,utilization.gpu,temperature.gpu,\
             power.draw,clocks.sm,clocks_throttle_reasons.active,retired_pages.pending"
        );
        assert_eq!(asked.len(), 3);
        assert_eq!(
            fields.read(&["50", "[N/A]", "1410", "0x0000000000000001", "No"]),
            GpuHealth {
                temperature_c: Some(50),
                sm_clock_mhz: Some(1410),
                throttle_mask: Some(1),
                retired_pages_pending: Some(false),
                ..GpuHealth::default()
            }
        );

        // Neither spelling of the mask.
        let mut asked = Vec::new();
        let neither = [
            "clocks_event_reasons.active",
            "clocks_throttle_reasons.active",
        ];
        let Probed::Fields(fields) = probe(driver(&neither, &mut asked)) else {
            panic!("no fields settled: {asked:?}");
        };
        assert!(!fields.query().contains("reasons"), "{}", fields.query());
        assert_eq!(fields.count(), BASE_FIELDS.len() + HEALTH_FIELDS.len() - 1);
    }

    #[test]
    fn probing_gives_up_on_a_base_field_a_failure_or_refusals_without_end() {
        let mut asked = Vec::new();
        assert_eq!(
            probe(|fields| {
                asked.push(fields.query());
                Answer::Refused("uuid".into())
            }),
            Probed::Failed(None)
        );
        assert_eq!(asked.len(), 1);
        assert_eq!(
            probe(|_| Answer::Refused("a.field.never.asked".into())),
            Probed::Failed(None)
        );
        let hung = Answer::Failed(Some("nvidia-smi did not answer within 5.0 s".into()));
        assert_eq!(
            probe(|_| hung.clone()),
            Probed::Failed(Some("nvidia-smi did not answer within 5.0 s".into()))
        );
        assert_eq!(probe(|_| Answer::Stopped), Probed::Stopped);
        // A driver that refuses every field it is asked for, one at a time: each refusal takes
        // a name away, so probing ends with the base fields and never loops.
        let mut asks = 0;
        let probed = probe(|fields| {
            asks += 1;
            fields.health.first().map_or(Answer::Known, |(_, name)| {
                Answer::Refused((*name).to_owned())
            })
        });
        assert_eq!(probed, Probed::Fields(Fields::default()));
        assert_eq!(asks, 8, "one ask a name, and one for the base fields");
    }

    #[test]
    fn processes_on_a_gpu_are_the_trees_or_other_tenants() {
        let mut state = State::default();
        state.gpu_line("0, GPU-a, 10, 100, 5");
        state.gpu_line("1, GPU-b, 10, 100, 5");
        state.gpu_line("0, GPU-a, 10, 100, 5");
        for line in [
            "42, 512, GPU-a",
            "7, 2048, GPU-a",
            "3, [N/A], GPU-a",
            "42, 1, GPU-b",
        ] {
            state.app_line(line);
        }
        let (_, rows) = state.gpus.as_ref().unwrap();
        let (gpus, health) = assemble(rows, &state.apps, &[42]);
        let process = |pid, used_memory_mib| GpuProcessSample {
            pid,
            used_memory_mib,
        };
        assert_eq!(gpus[0].processes, [process(42, Some(512))]);
        assert_eq!(
            health[0].other_processes,
            [process(3, None), process(7, Some(2048))]
        );
        assert_eq!(gpus[1].processes, [process(42, Some(1))]);
        assert!(health[1].other_processes.is_empty());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Loop mode reads whatever nvidia-smi prints, line by line: no line panics it, a reading
        /// holds only well-formed GPU lines, and no stream grows past its caps — whichever
        /// fields were accepted.
        #[test]
        fn no_stream_of_lines_panics_or_grows_past_its_caps(
            lines in proptest::collection::vec(
                proptest::prop_oneof![
                    "[0-9]{1,3}, GPU-[a-f0-9-]{1,12}, [0-9]{0,6}, [0-9N/A\\[\\]]{0,6}, .{0,8}",
                    "[0-9]{1,3}, GPU-[a-f0-9-]{1,12}, [0-9]{0,6}, [0-9]{0,6}, [0-9]{0,3}, \
                     [0-9]{0,3}, [0-9.]{0,8}, [0-9]{0,4}, 0x[0-9A-Fa-f+]{0,18}, [0-9]{0,3}, \
                     (Yes|No|\\[N/A\\])",
                    "[0-9]{1,7}, [0-9]{0,6} ?(MiB)?, GPU-[a-f0-9]{1,8}",
                    ".{0,300}",
                ],
                0..300,
            ),
        ) {
            for fields in [Fields::default(), Fields::all()] {
                let mut state = State { fields, ..State::default() };
                for line in &lines {
                    state.gpu_line(line);
                    state.app_line(line);
                }
                proptest::prop_assert!(state.pending.len() <= MAX_GPUS);
                proptest::prop_assert!(state.apps.len() <= MAX_APPS);
                for gpu in state.gpus.iter().flat_map(|(_, g)| g).chain(&state.pending) {
                    proptest::prop_assert!(gpu.sample.uuid.starts_with("GPU-"));
                }
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

    /// The real streams, against the fake `nvidia-smi` of the integration tests.
    mod against_the_fake {
        use super::*;
        use std::io::Write;
        use std::path::Path;

        const UUID: &str = "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f";
        const OTHER_UUID: &str = "GPU-1a2b3c4d-0000-4000-8000-000000000001";
        const INTERVAL: Duration = Duration::from_millis(100);

        /// The fake, run with `env` set after the shell lines of `prelude`: a wrapper in `dir`,
        /// written by a child process so that no thread of this test binary holds it open for
        /// writing while another one runs it (`ETXTBSY`).
        fn fake_smi(dir: &Path, env: &[(&str, &str)], prelude: &str, timeout: Duration) -> Tool {
            let fake = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/nvidia-smi");
            let mut script = format!("#!/bin/sh\n{prelude}\n");
            for (name, value) in env {
                script.push_str(&format!("export {name}='{value}'\n"));
            }
            script.push_str(&format!("exec '{fake}' \"$@\"\n"));
            let path = dir.join("nvidia-smi");
            let mut writer = Command::new("sh")
                .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
                .arg(&path)
                .stdin(Stdio::piped())
                .spawn()
                .unwrap();
            writer
                .stdin
                .take()
                .unwrap()
                .write_all(script.as_bytes())
                .unwrap();
            assert!(writer.wait().unwrap().success());
            Tool::new(path.as_os_str(), timeout)
        }

        fn stream(dir: &Path, env: &[(&str, &str)]) -> GpuStream {
            GpuStream::start(
                fake_smi(dir, env, "", Duration::from_secs(10)),
                INTERVAL,
                None,
            )
        }

        /// The first reading (of `pids`) that `wanted` accepts, within a generous bound.
        fn reading_such_that(
            stream: &GpuStream,
            pids: &[u32],
            wanted: impl Fn(&[GpuSample], &[GpuHealth]) -> bool,
        ) -> (Vec<GpuSample>, Vec<GpuHealth>) {
            crate::time::poll(Duration::from_secs(30), Duration::from_millis(20), || {
                let (gpus, health, _) = stream.reading_with_health(pids);
                let (gpus, health) = (gpus?, health?);
                assert_eq!(gpus.len(), health.len());
                wanted(&gpus, &health).then_some((gpus, health))
            })
            .unwrap_or_else(|| {
                panic!(
                    "no such reading within 30 s; the last: {:?}",
                    stream.reading_with_health(pids)
                )
            })
        }

        /// Replaces `path` at once, so that the fake never reads half of it.
        fn replace(path: &Path, text: &str) {
            let new = path.with_extension("new");
            std::fs::write(&new, text).unwrap();
            std::fs::rename(&new, path).unwrap();
        }

        #[test]
        fn a_real_stream_reads_the_throttle_mask_under_either_driver_spelling() {
            for driver in ["new", "old"] {
                let dir = tempfile::tempdir().unwrap();
                let stream = stream(
                    dir.path(),
                    &[
                        ("FAKE_NVIDIA_SMI_DRIVER", driver),
                        (
                            "FAKE_NVIDIA_SMI_HEALTH",
                            "71|312.25|1755|0x0000000000000044|3|Yes",
                        ),
                    ],
                );
                let (gpus, health) = reading_such_that(&stream, &[], |_, _| true);
                assert_eq!(gpus[0].uuid, UUID);
                assert_eq!(gpus[0].memory_total_mib, Some(143_771), "{driver}");
                assert_eq!(
                    health,
                    [GpuHealth {
                        temperature_c: Some(71),
                        power_mw: Some(312_250),
                        sm_clock_mhz: Some(1755),
                        throttle_mask: Some(0x44),
                        ecc_uncorrected_volatile: Some(3),
                        retired_pages_pending: Some(true),
                        other_processes: Vec::new(),
                    }],
                    "{driver}"
                );
            }
        }

        #[test]
        fn a_field_the_driver_does_not_know_is_dropped_and_the_rest_still_stream() {
            let dir = tempfile::tempdir().unwrap();
            let gpus =
                format!("{UUID}|NVIDIA H200|143771|100|5;{OTHER_UUID}|NVIDIA H200|143771|200|6");
            let stream = stream(
                dir.path(),
                &[
                    ("FAKE_NVIDIA_SMI_GPUS", &gpus),
                    ("FAKE_NVIDIA_SMI_DRIVER", "old"),
                    (
                        "FAKE_NVIDIA_SMI_UNKNOWN_FIELDS",
                        "power.draw,clocks_throttle_reasons.active",
                    ),
                    (
                        "FAKE_NVIDIA_SMI_HEALTH",
                        ";[N/A]|[N/A]|[Not Supported]|[N/A]|[Unknown Error]|[N/A]",
                    ),
                ],
            );
            let (gpus, health) = reading_such_that(&stream, &[], |_, _| true);
            assert_eq!(gpus.len(), 2);
            assert_eq!(gpus[1].memory_used_mib, Some(200));
            assert_eq!(gpus[1].utilization_percent, Some(6));
            assert_eq!(
                health[0],
                GpuHealth {
                    temperature_c: Some(45),
                    sm_clock_mhz: Some(1980),
                    ecc_uncorrected_volatile: Some(0),
                    retired_pages_pending: Some(false),
                    ..GpuHealth::default()
                }
            );
            assert_eq!(health[1], GpuHealth::default());
            assert_eq!(stream.reading_with_health(&[]).2, None);
        }

        #[test]
        fn another_tenants_process_is_apart_from_the_trees_while_it_is_listed() {
            let dir = tempfile::tempdir().unwrap();
            let apps = dir.path().join("apps");
            replace(&apps, &format!("777|python|2048|{UUID}"));
            let stream = stream(
                dir.path(),
                &[
                    ("FAKE_NVIDIA_SMI_APPS", &format!("4242|python|1024|{UUID}")),
                    ("FAKE_NVIDIA_SMI_APPS_FILE", apps.to_str().unwrap()),
                ],
            );
            let (gpus, health) = reading_such_that(&stream, &[4242, 1], |gpus, health| {
                !gpus[0].processes.is_empty() && !health[0].other_processes.is_empty()
            });
            assert_eq!(
                gpus[0].processes,
                [GpuProcessSample {
                    pid: 4242,
                    used_memory_mib: Some(1024)
                }]
            );
            assert_eq!(
                health[0].other_processes,
                [GpuProcessSample {
                    pid: 777,
                    used_memory_mib: Some(2048)
                }]
            );
            // It leaves the GPU: no longer listed, it is no longer there.
            replace(&apps, "");
            reading_such_that(&stream, &[4242], |gpus, health| {
                health[0].other_processes.is_empty() && !gpus[0].processes.is_empty()
            });
        }

        #[test]
        fn a_health_file_changed_mid_stream_is_seen() {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("health");
            replace(&file, "40|100.00|1400|0x0000000000000000|0|No");
            let stream = stream(
                dir.path(),
                &[("FAKE_NVIDIA_SMI_HEALTH_FILE", file.to_str().unwrap())],
            );
            reading_such_that(&stream, &[], |_, health| {
                health[0].temperature_c == Some(40)
            });
            replace(&file, "88|350.00|1200|0x0000000000000040|2|Yes");
            let (_, health) = reading_such_that(&stream, &[], |_, health| {
                health[0].temperature_c == Some(88)
            });
            assert_eq!(health[0].power_mw, Some(350_000));
            assert_eq!(health[0].throttle_mask, Some(0x40));
            assert_eq!(health[0].ecc_uncorrected_volatile, Some(2));
            assert_eq!(health[0].retired_pages_pending, Some(true));
        }

        #[test]
        fn a_probe_that_fails_leaves_the_stream_on_its_base_fields() {
            let dir = tempfile::tempdir().unwrap();
            // Only its one-shot queries fail; loop mode works.
            let prelude =
                "case \"$*\" in *-lms*) ;; *) echo 'No devices were found'; exit 6;; esac";
            let stream = GpuStream::start(
                fake_smi(dir.path(), &[], prelude, Duration::from_secs(10)),
                INTERVAL,
                None,
            );
            let (gpus, health) = reading_such_that(&stream, &[], |_, _| true);
            assert_eq!(gpus[0].memory_total_mib, Some(143_771));
            assert_eq!(health, [GpuHealth::default()]);
        }

        /// A probe that hangs as long as the tool timeout allows is stopped with the stream:
        /// dropping it neither waits for the timeout nor leaves the probe running.
        #[test]
        fn dropping_the_stream_during_a_probe_stops_the_probe_at_once() {
            let dir = tempfile::tempdir().unwrap();
            let pids = dir.path().join("pids");
            let prelude = format!(
                "case \"$*\" in *-lms*) ;; *) echo $$ >> '{}'; exec sleep 60;; esac",
                pids.display()
            );
            let stream = GpuStream::start(
                fake_smi(dir.path(), &[], &prelude, Duration::from_secs(60)),
                INTERVAL,
                None,
            );
            let pid: i32 =
                crate::time::poll(Duration::from_secs(30), Duration::from_millis(10), || {
                    std::fs::read_to_string(&pids).ok()?.trim().parse().ok()
                })
                .expect("the probe under way");
            let dropped = Instant::now();
            drop(stream);
            assert!(
                dropped.elapsed() < Duration::from_secs(5),
                "dropping waited {:?} for the probe",
                dropped.elapsed()
            );
            assert_eq!(
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
                Err(nix::errno::Errno::ESRCH),
                "the probe {pid} outlived its stream"
            );
        }
    }
}
