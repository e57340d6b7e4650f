//! A running soak as Prometheus metrics: the text format (0.0.4) that node_exporter's textfile
//! collector reads, for `soak run --metrics-file`. Pure: the supervisor feeds it each sample and
//! the verdict, and writes what [`SoakMetrics::render`] gives (see `supervise::metrics`).
//!
//! What it keeps:
//! - **Labels**: every series has `soak` (the soak's id); `unilab_soak_info` alone has `host`,
//!   `job`, `rank` and `command`, to be joined on `soak`; GPU series add `gpu` (its UUID) and
//!   `unilab_gpu_throttled` `reason` (NVML's nine names, and unknown bits as one `0x…`);
//!   `unilab_soak_heartbeat_number` adds `name`, the first [`MAX_NUMBERS`] the run's beats
//!   named. Nothing is labelled per process: the file's series do not grow with the tree.
//! - **Escaping**: label values as the format asks (`\\`, `\"`, `\n`); the command line is
//!   cut at [`MAX_COMMAND_CHARS`] characters.
//! - **Families** each once, contiguous, with `# HELP` and `# TYPE`; one whose value is unknown
//!   (no PSS read, no progress yet, no beat yet, no answer from nvidia-smi) is left out rather
//!   than written as 0. The file ends with `# EOF`, which the 0.0.4 parsers (promtool's,
//!   node_exporter's) read as a comment and OpenMetrics' as the end.
//! - **Counters** never go back: the tree's CPU time holds its highest value (a process reaped
//!   by the kernel takes its time with it), the sampler's errors and the step summary's
//!   `_sum`/`_count` count the whole run.
//! - **The step summary**: `quantile="0.5"` is the median step time of the steps that ended
//!   since the previous sample (`NaN` when none did, as a summary whose window is empty says),
//!   `_sum` and `_count` every step timed in the run, of any phase (a step is the time from one
//!   beat to the next: `soak::heartbeat::summary`).
//! - **The end**: `unilab_soak_running` 0 and `unilab_soak_passed` 0 or 1, the elapsed time the
//!   command's run, the soak's last figures kept — a sample that finds the tree gone (the last,
//!   after the command exited) keeps the tree's figures of the one before, rather than zeros
//!   and no PSS; the GPU series are left out, since they would tell of a device the soak no
//!   longer watches for as long as the file is served.
//! - **No GPU tool** is no error: `unilab_soak_gpu_tool_present` 0 says the host has none
//!   (nothing was sampled of the GPUs, so nothing erred).
//! - **Whose file it is**: the first line, a comment ([`mark`]), names the soak, its host and
//!   its supervisor (pid and start time), so that a later soak can tell a file whose soak no
//!   longer runs (and rewrite it) from a running soak's (and leave it).

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::event::soak::{Measures, Sample, THROTTLE_REASONS};
use crate::process::ProcessIdentity;
use crate::soak::heartbeat::beat::MAX_NUMBERS;
use crate::soak::sampler::CpuClock;

pub(crate) mod mark;

/// The most characters of the command line its label keeps.
pub(crate) const MAX_COMMAND_CHARS: usize = 1024;

/// Who the soak is: the labels of `unilab_soak_info`.
#[derive(Debug, Clone)]
pub struct SoakLabels {
    pub soak: String,
    pub host: String,
    /// Its job and rank in it, for a rank of a job.
    pub job: Option<String>,
    pub rank: Option<u32>,
    /// The command line as recorded (credentials masked), one string.
    pub command: String,
}

/// One GPU at the latest sample.
#[derive(Debug, Clone)]
struct GpuReading {
    /// `gpu="…"`, escaped.
    label: String,
    utilization_percent: Option<u32>,
    memory_used_mib: Option<u64>,
    temperature_c: Option<u32>,
    power_mw: Option<u64>,
    throttle_mask: Option<u64>,
}

/// The tree at the latest sample.
#[derive(Debug, Clone, Default)]
struct Reading {
    elapsed_seconds: f64,
    pss_bytes: Option<u64>,
    rss_bytes: u64,
    processes: u64,
    threads: u64,
    progress_bytes: u64,
    gpus: Vec<GpuReading>,
}

/// The beats of the run so far.
#[derive(Debug, Clone, Default)]
struct Steps {
    /// The last beat's step.
    step: u64,
    /// The median step time of the latest sample's steps.
    median: Option<f32>,
    /// Every step timed in the run: how many, and their seconds together.
    timed: (u64, f64),
    /// The last value of each number, the first [`MAX_NUMBERS`] the run named.
    numbers: BTreeMap<String, f64>,
}

/// A soak's metrics as its samples come.
pub struct SoakMetrics {
    /// `soak="…"`, escaped.
    soak: String,
    /// The whole label set of `unilab_soak_info`, escaped.
    info: String,
    cpu: CpuClock,
    cpu_seconds: f64,
    sampler_errors: u64,
    reading: Option<Reading>,
    steps: Option<Steps>,
    /// When the progress last changed, Unix seconds.
    last_progress: Option<f64>,
    /// Whether it passed, once the verdict is in.
    passed: Option<bool>,
    /// Whether the host has a GPU tool.
    gpu_tool_present: bool,
    /// The first line: whose file this is.
    mark: Option<String>,
}

impl SoakMetrics {
    /// The metrics of the soak `labels` names, whose CPU time is counted at `ticks_per_second`.
    pub fn new(labels: &SoakLabels, ticks_per_second: u64) -> Self {
        let soak = label("soak", &labels.soak);
        let mut info = format!("{soak},{}", label("host", &labels.host));
        if let Some(job) = &labels.job {
            info.push(',');
            info.push_str(&label("job", job));
        }
        if let Some(rank) = labels.rank {
            info.push(',');
            info.push_str(&label("rank", &rank.to_string()));
        }
        info.push(',');
        let command = match labels.command.char_indices().nth(MAX_COMMAND_CHARS) {
            Some((at, _)) => format!("{}…", &labels.command[..at]),
            None => labels.command.clone(),
        };
        info.push_str(&label("command", &command));
        SoakMetrics {
            soak,
            info,
            cpu: CpuClock::new(ticks_per_second),
            cpu_seconds: 0.0,
            sampler_errors: 0,
            reading: None,
            steps: None,
            last_progress: None,
            passed: None,
            gpu_tool_present: true,
            mark: None,
        }
    }

    /// These metrics on a host that has a GPU tool (`present`) or none.
    pub fn with_gpu_tool(mut self, present: bool) -> Self {
        self.gpu_tool_present = present;
        self
    }

    /// These metrics marked as the soak `labels` names, of `host`, supervised by `supervisor`:
    /// the file's first line ([`mark`]).
    pub fn marked(mut self, labels: &SoakLabels, supervisor: ProcessIdentity) -> Self {
        self.mark = Some(mark::line(&labels.soak, &labels.host, supervisor));
        self
    }

    /// Takes in a sample, its `measures`, and every step the run's beats timed so far (how
    /// many, their seconds together).
    pub fn observe(&mut self, sample: &Sample, measures: &Measures, timed: (u64, f64)) {
        self.cpu_seconds = self.cpu.advance(sample).0;
        self.sampler_errors += sample.errors.len() as u64;
        let health = measures
            .gpus
            .iter()
            .map(Some)
            .chain(std::iter::repeat(None));
        let gpus = sample
            .gpus
            .iter()
            .flatten()
            .zip(health)
            .map(|(gpu, health)| GpuReading {
                label: label("gpu", &gpu.uuid),
                utilization_percent: gpu.utilization_percent,
                memory_used_mib: gpu.memory_used_mib,
                temperature_c: health.and_then(|h| h.temperature_c),
                power_mw: health.and_then(|h| h.power_mw),
                throttle_mask: health.and_then(|h| h.throttle_mask),
            })
            .collect();
        let mut reading = Reading {
            elapsed_seconds: sample.elapsed_ms as f64 / 1000.0,
            pss_bytes: measures.tree_pss_bytes(),
            rss_bytes: sample.processes.iter().map(|p| p.rss_bytes).sum(),
            processes: sample.processes.len() as u64,
            threads: sample.processes.iter().map(|p| u64::from(p.threads)).sum(),
            progress_bytes: sample.progress.bytes,
            gpus,
        };
        // The tree gone (the command exited): its last figures stay, not zeros.
        if let (true, Some(before)) = (sample.processes.is_empty(), &self.reading) {
            reading.pss_bytes = before.pss_bytes;
            reading.rss_bytes = before.rss_bytes;
            reading.processes = before.processes;
            reading.threads = before.threads;
        }
        self.reading = Some(reading);
        match (&mut self.steps, measures.heartbeat.as_deref()) {
            (Some(steps), None) => steps.median = None,
            (steps, Some(beats)) => {
                let steps = steps.get_or_insert_with(Steps::default);
                if let Some(step) = beats.step {
                    steps.step = step;
                }
                steps.median = beats.step_seconds_median;
                for (name, &value) in &beats.numbers {
                    if let Some(kept) = steps.numbers.get_mut(name) {
                        *kept = value;
                    } else if steps.numbers.len() < MAX_NUMBERS {
                        steps.numbers.insert(name.clone(), value);
                    }
                }
            }
            (None, None) => {}
        }
        if let Some(steps) = &mut self.steps {
            steps.timed = timed;
        }
    }

    /// The progress last changed at `unix` (Unix seconds), if it changed yet.
    pub fn progressed_at(&mut self, unix: Option<f64>) {
        self.last_progress = unix.or(self.last_progress);
    }

    /// The verdict: whether it `passed`, after the command ran for `run_seconds`.
    pub fn finish(&mut self, passed: bool, run_seconds: f64) {
        self.passed = Some(passed);
        let reading = self.reading.get_or_insert_with(Reading::default);
        reading.elapsed_seconds = run_seconds;
        reading.gpus.clear();
    }

    /// The file's text, into `out` (emptied first).
    pub fn render(&self, out: &mut String) {
        out.clear();
        if let Some(mark) = &self.mark {
            out.push_str(mark);
            out.push('\n');
        }
        let mut w = Writer {
            out,
            soak: &self.soak,
        };
        w.family(
            "unilab_soak_info",
            "gauge",
            "A soak supervised by unilab (always 1): its host, job, rank and command",
        );
        w.line("unilab_soak_info", &self.info, Value::Int(1));
        let running = u64::from(self.passed.is_none());
        w.soak_gauge(
            "unilab_soak_running",
            "1 while the soak runs, 0 once its verdict is recorded",
            Value::Int(running),
        );
        if let Some(passed) = self.passed {
            w.soak_gauge(
                "unilab_soak_passed",
                "The soak's verdict: 1 passed, 0 failed",
                Value::Int(u64::from(passed)),
            );
        }
        if let Some(r) = &self.reading {
            w.soak_gauge(
                "unilab_soak_elapsed_seconds",
                "Time since the command started (at the end: how long it ran)",
                Value::Float(r.elapsed_seconds),
            );
            if let Some(pss) = r.pss_bytes {
                w.soak_gauge("unilab_soak_tree_pss_bytes", "The process tree's proportional set size (shared pages split among their sharers)", Value::Int(pss));
            }
            w.soak_gauge(
                "unilab_soak_tree_rss_bytes",
                "The process tree's resident set size, summed over its processes",
                Value::Int(r.rss_bytes),
            );
            w.family(
                "unilab_soak_cpu_seconds_total",
                "counter",
                "CPU time of the process tree, living and reaped",
            );
            w.line(
                "unilab_soak_cpu_seconds_total",
                w.soak,
                Value::Float(self.cpu_seconds),
            );
            w.soak_gauge(
                "unilab_soak_processes",
                "Processes in the tree",
                Value::Int(r.processes),
            );
            w.soak_gauge(
                "unilab_soak_threads",
                "Threads of the tree's processes",
                Value::Int(r.threads),
            );
            w.soak_gauge(
                "unilab_soak_progress_bytes",
                "Bytes in the progress directory",
                Value::Int(r.progress_bytes),
            );
        }
        if let Some(at) = self.last_progress {
            w.soak_gauge(
                "unilab_soak_last_progress_timestamp_seconds",
                "When the soak last saw progress (the directory changed, or a beat), Unix time",
                Value::Float(at),
            );
        }
        if let Some(steps) = &self.steps {
            self.render_steps(&mut w, steps);
        }
        w.family("unilab_soak_sampler_errors_total", "counter", "What the sampler could not read, counted over the run (nvidia-smi, /proc, the heartbeat file, this file)");
        w.line(
            "unilab_soak_sampler_errors_total",
            w.soak,
            Value::Int(self.sampler_errors),
        );
        w.soak_gauge(
            "unilab_soak_gpu_tool_present",
            "1 when the host has a GPU tool (nvidia-smi) to read the GPUs with, 0 when it has none (its GPUs are not read, and that is no error)",
            Value::Int(u64::from(self.gpu_tool_present)),
        );
        if let Some(r) = &self.reading {
            render_gpus(&mut w, &r.gpus);
        }
        w.out.push_str("# EOF\n");
    }

    fn render_steps(&self, w: &mut Writer<'_>, steps: &Steps) {
        w.soak_gauge(
            "unilab_soak_step",
            "The step the trainer's last heartbeat told",
            Value::Int(steps.step),
        );
        w.family("unilab_soak_step_seconds", "summary", "Step time: the median of the steps since the previous sample; sum and count over the run");
        let quantile = format!("{},quantile=\"0.5\"", self.soak);
        let median = steps.median.map_or(Value::Float(f64::NAN), Value::Single);
        w.line("unilab_soak_step_seconds", &quantile, median);
        w.line(
            "unilab_soak_step_seconds_sum",
            w.soak,
            Value::Float(steps.timed.1),
        );
        w.line(
            "unilab_soak_step_seconds_count",
            w.soak,
            Value::Int(steps.timed.0),
        );
        if !steps.numbers.is_empty() {
            w.family(
                "unilab_soak_heartbeat_number",
                "gauge",
                "The last value of each number the trainer's heartbeats told (the first 16 names)",
            );
            for (name, &value) in &steps.numbers {
                let labels = format!("{},{}", self.soak, label("name", name));
                w.line("unilab_soak_heartbeat_number", &labels, Value::Float(value));
            }
        }
    }
}

/// The GPU families: one series a GPU (whose value is known) each.
fn render_gpus(w: &mut Writer<'_>, gpus: &[GpuReading]) {
    type Of = fn(&GpuReading) -> Option<Value>;
    let families: [(&str, &str, Of); 4] = [
        (
            "unilab_gpu_utilization_ratio",
            "The GPU's utilization, as nvidia-smi reports it (0 to 1)",
            |g| {
                g.utilization_percent
                    .map(|p| Value::Float(f64::from(p) / 100.0))
            },
        ),
        (
            "unilab_gpu_memory_used_bytes",
            "The GPU's memory in use, by every process on it",
            |g| {
                g.memory_used_mib
                    .map(|m| Value::Int(m.saturating_mul(1 << 20)))
            },
        ),
        (
            "unilab_gpu_temperature_celsius",
            "The GPU's temperature",
            |g| g.temperature_c.map(|t| Value::Int(u64::from(t))),
        ),
        ("unilab_gpu_power_watts", "The GPU's power draw", |g| {
            g.power_mw.map(|mw| Value::Float(mw as f64 / 1000.0))
        }),
    ];
    for (name, help, of) in families {
        let known: Vec<(&GpuReading, Value)> =
            gpus.iter().filter_map(|g| Some((g, of(g)?))).collect();
        if known.is_empty() {
            continue;
        }
        w.family(name, "gauge", help);
        for (gpu, value) in known {
            let labels = format!("{},{}", w.soak, gpu.label);
            w.line(name, &labels, value);
        }
    }
    let throttled: Vec<(&GpuReading, u64)> = gpus
        .iter()
        .filter_map(|g| Some((g, g.throttle_mask?)))
        .collect();
    if throttled.is_empty() {
        return;
    }
    w.family(
        "unilab_gpu_throttled",
        "gauge",
        "1 while the GPU's clocks are held down for this reason (NVML's clock event reasons)",
    );
    let known: u64 = THROTTLE_REASONS.iter().map(|(bit, _)| bit).sum();
    for (gpu, mask) in throttled {
        let unknown = (mask & !known != 0).then(|| format!("{:#x}", mask & !known));
        let reasons = THROTTLE_REASONS
            .iter()
            .map(|&(bit, name)| (name, mask & bit != 0));
        for (reason, on) in reasons.chain(unknown.as_deref().map(|bits| (bits, true))) {
            let labels = format!("{},{},{}", w.soak, gpu.label, label("reason", reason));
            w.line("unilab_gpu_throttled", &labels, Value::Int(u64::from(on)));
        }
    }
}

/// A sample's value.
#[derive(Debug, Clone, Copy)]
enum Value {
    Int(u64),
    Float(f64),
    /// An `f32` as it was measured (not widened to `f64`'s longer decimals).
    Single(f32),
}

/// The text being written.
struct Writer<'a> {
    out: &'a mut String,
    /// `soak="…"`.
    soak: &'a str,
}

impl Writer<'_> {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn line(&mut self, name: &str, labels: &str, value: Value) {
        let _ = write!(self.out, "{name}{{{labels}}} ");
        match value {
            Value::Int(v) => {
                let _ = write!(self.out, "{v}");
            }
            Value::Float(v) => float(self.out, v),
            Value::Single(v) if v.is_finite() => {
                let _ = write!(self.out, "{v:?}");
            }
            Value::Single(v) => float(self.out, f64::from(v)),
        }
        self.out.push('\n');
    }

    /// A gauge family of one series, labelled with the soak alone.
    fn soak_gauge(&mut self, name: &str, help: &str, value: Value) {
        self.family(name, "gauge", help);
        let soak = self.soak;
        self.line(name, soak, value);
    }
}

/// `v` as Go's `strconv.ParseFloat` reads it: `NaN`, `+Inf`, `-Inf`, or the shortest decimal
/// that gives `v` back.
fn float(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{v:?}");
    }
}

/// `name="value"`, the value escaped.
fn label(name: &str, value: &str) -> String {
    let mut out = String::with_capacity(name.len() + value.len() + 3);
    out.push_str(name);
    out.push_str("=\"");
    escape_label_value(value, &mut out);
    out.push('"');
    out
}

/// `value` as a label value of the text format: a backslash, a double quote and a line feed
/// escaped (`\\`, `\"`, `\n`); everything else as it is.
pub(crate) fn escape_label_value(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests;
