//! Where a soak supervisor's CPU goes, part by part: an accounting kept only when
//! `UNILAB_COST_SPLIT` names a file, for the benchmark (`benches/supervisor_cost.rs`).
//!
//! Each part of the sampling loop is timed on the calling thread's CPU clock
//! (`CLOCK_THREAD_CPUTIME_ID`), exclusively: a part timed inside another (the progress scan
//! inside a sample) is taken out of the outer one, so the parts add up to the loop. At the end
//! the supervisor writes the totals as JSON: the parts, the loop's own CPU time on its thread
//! (what no part holds is the loop's `other`), the parts outside it (the start, the teardown,
//! the verdict, the artifact), the main thread's whole time, every other
//! thread's (by name), and the process's.
//!
//! Unset, it costs one load and one branch a part: nothing is read, nothing kept.

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use crate::env::EnvVars;

/// The parts of a sample, as the split names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// The tree from `/proc` and the GPUs' reading (without the progress scan).
    Sampling,
    /// The progress directory's signature.
    Progress,
    /// The guard's status file and whether it still lives: the command's state.
    Guard,
    /// The job's alarm, for a rank of a job.
    Alarm,
    /// The beats since the sample before.
    Heartbeat,
    /// The metrics file: its figures taken in and the file written.
    Metrics,
    /// The watch's judgement of the sample.
    Watch,
    /// The log's append and its commit.
    Commit,
    /// The status line on a terminal.
    Status,
    /// The wait between two samples: each wake-up that found nothing to do.
    Wait,
    /// Outside the loop: the start recorded, the witnesses started, the guard spawned.
    Start,
    /// Outside the loop: the tree stopped, the guard reaped, the witnesses heard.
    Teardown,
    /// Outside the loop: the verdict recorded.
    Verdict,
    /// Outside the loop: the artifact and the report written.
    Artifact,
}

const PARTS: [Part; 14] = [
    Part::Sampling,
    Part::Progress,
    Part::Guard,
    Part::Alarm,
    Part::Heartbeat,
    Part::Metrics,
    Part::Watch,
    Part::Commit,
    Part::Status,
    Part::Wait,
    Part::Start,
    Part::Teardown,
    Part::Verdict,
    Part::Artifact,
];

impl Part {
    fn name(self) -> &'static str {
        match self {
            Part::Sampling => "sampling",
            Part::Progress => "progress",
            Part::Guard => "guard_status",
            Part::Alarm => "alarm",
            Part::Heartbeat => "heartbeat",
            Part::Metrics => "metrics",
            Part::Watch => "watch",
            Part::Commit => "commit",
            Part::Status => "status_line",
            Part::Wait => "wait",
            Part::Start => "start",
            Part::Teardown => "teardown",
            Part::Verdict => "verdict",
            Part::Artifact => "artifact",
        }
    }

    /// Whether the part is outside the sampling loop: once a soak, not a sample.
    fn once(self) -> bool {
        matches!(
            self,
            Part::Start | Part::Teardown | Part::Verdict | Part::Artifact
        )
    }
}

static ON: AtomicBool = AtomicBool::new(false);
static PATH: OnceLock<PathBuf> = OnceLock::new();
static SPENT: [AtomicU64; PARTS.len()] = [const { AtomicU64::new(0) }; PARTS.len()];
/// The sampling loop's CPU time on its thread, the samples it took, and the wake-ups of its
/// waits between samples.
static LOOP_NS: AtomicU64 = AtomicU64::new(0);
static SAMPLES: AtomicU64 = AtomicU64::new(0);
static WAKEUPS: AtomicU64 = AtomicU64::new(0);
static LOOP_SWITCHES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The time spent in parts timed within the part under way on this thread.
    static INNER: Cell<u64> = const { Cell::new(0) };
}

/// Turns the accounting on when `UNILAB_COST_SPLIT` names a file.
pub(crate) fn from_env() {
    if let Some(path) = std::env::var_os(EnvVars::UNILAB_COST_SPLIT).filter(|p| !p.is_empty()) {
        let _ = PATH.set(PathBuf::from(path));
        ON.store(true, Relaxed);
    }
}

fn on() -> bool {
    ON.load(Relaxed)
}

/// This thread's CPU time, nanoseconds.
fn thread_ns() -> u64 {
    clock_ns(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
}

fn clock_ns(clock: nix::time::ClockId) -> u64 {
    nix::time::clock_gettime(clock).map_or(0, |t| {
        u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
            + u64::try_from(t.tv_nsec()).unwrap_or(0)
    })
}

/// Runs `f` as `part`.
pub(crate) fn time<T>(part: Part, f: impl FnOnce() -> T) -> T {
    if !on() {
        return f();
    }
    let outer = INNER.replace(0);
    let began = thread_ns();
    let out = f();
    let spent = thread_ns().saturating_sub(began);
    let inner = INNER.get();
    SPENT[part as usize].fetch_add(spent.saturating_sub(inner), Relaxed);
    INNER.set(outer + spent);
    out
}

/// Counts one wake-up of the wait between samples.
pub(crate) fn woke() {
    if on() {
        WAKEUPS.fetch_add(1, Relaxed);
    }
}

/// The sampling loop, timed whole on its thread from [`Loop::begin`] to [`Loop::end`].
pub(crate) struct Loop(Option<(u64, u64)>);

impl Loop {
    pub(crate) fn begin() -> Self {
        Self(on().then(|| (thread_ns(), voluntary_switches().unwrap_or(0))))
    }

    /// The loop is over after `samples`.
    pub(crate) fn end(self, samples: u64) {
        let Some((began, switches)) = self.0 else {
            return;
        };
        LOOP_NS.fetch_add(thread_ns().saturating_sub(began), Relaxed);
        let now = voluntary_switches().unwrap_or(switches);
        LOOP_SWITCHES.fetch_add(now.saturating_sub(switches), Relaxed);
        SAMPLES.fetch_add(samples, Relaxed);
    }
}

/// This thread's voluntary context switches: each time it slept and was woken.
fn voluntary_switches() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
        .trim()
        .parse()
        .ok()
}

/// Every thread of this process but the caller's: its name, CPU time (`schedstat`) and
/// wake-ups.
fn other_threads() -> Vec<serde_json::Value> {
    let me = nix::unistd::gettid().as_raw().to_string();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter(|task| task.file_name().to_str() != Some(me.as_str()))
        .map(|task| {
            let path = task.path();
            let read = |name: &str| std::fs::read_to_string(path.join(name)).unwrap_or_default();
            let ns: u64 = read("schedstat")
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let wakeups: u64 = read("status")
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            serde_json::json!({ "name": read("comm").trim(), "ns": ns, "wakeups": wakeups })
        })
        .collect()
}

/// Writes the split, when asked for, from the thread that ran the loop. A failure is said on
/// standard error: the split is for a benchmark, never the soak's business.
pub(crate) fn write() {
    let Some(path) = PATH.get().filter(|_| on()) else {
        return;
    };
    let parts = |once: bool| -> serde_json::Map<String, serde_json::Value> {
        PARTS
            .iter()
            .filter(|part| part.once() == once)
            .map(|&part| {
                (
                    part.name().to_owned(),
                    SPENT[part as usize].load(Relaxed).into(),
                )
            })
            .collect()
    };
    let split = serde_json::json!({
        "samples": SAMPLES.load(Relaxed),
        "loop_ns": LOOP_NS.load(Relaxed),
        "loop_wakeups": LOOP_SWITCHES.load(Relaxed),
        "wait_wakeups": WAKEUPS.load(Relaxed),
        "parts_ns": parts(false),
        "once_ns": parts(true),
        "main_ns": thread_ns(),
        "main_wakeups": voluntary_switches(),
        "threads": other_threads(),
        "process_ns": clock_ns(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID),
    });
    if let Err(e) = std::fs::write(path, split.to_string()) {
        eprintln!(
            "unilab: cannot write the cost split to `{}`: {e}",
            path.display()
        );
    }
}
