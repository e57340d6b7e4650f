//! What heartbeats cost unilab, one shot, printed:
//! - `supervisor`: the CPU time and the wake-ups of `unilab soak run` itself (not its guard's,
//!   not the trainer's) over a trainer that beats 1,000 times a second, against the same
//!   trainer running the same loop without writing a beat (`tests/fixtures/heartbeat_trainer.py`,
//!   `rate:1000:S` — and `bare-rate:1000:S`, the same beats without `t` — against
//!   `idle:1000:S`), in the same run, interleaved, a round of each at a time. The supervisor's CPU time is read from `/proc`: each thread's `schedstat` (its time
//!   on a CPU, in nanoseconds) while it runs, and the main thread's once more when the process
//!   is a zombie, so that nothing it did is missed; its wake-ups are each thread's voluntary
//!   context switches (`status`: each time it slept and was woken), those of the thread that
//!   reads the heartbeat file (`heartbeat`) apart. Printed: the CPU a beat (with beats minus
//!   without, over the beats) and the wake-ups a second, of the whole supervisor and of the
//!   heartbeat thread. With `HEARTBEAT_BENCH_BEFORE` naming another build, it is measured in the
//!   same rounds, interleaved (before and after in one run).
//! - `log`: what a sample's beat summary costs the log: samples of a 10-process tree recorded
//!   with and without the beats that arrived since the sample before (1, 1,000 and 100,000 a
//!   sample, each with 1 to 4 numbers, fed one by one through the summary the supervisor keeps),
//!   the log packing each sample's beats against the previous sample's. The records' own bytes
//!   (encoded, with their hashes and framing), with beats minus without, per sample.
//!
//! Run with `cargo bench --bench heartbeat_cost` (both; about 5 minutes), or
//! `cargo bench --bench heartbeat_cost -- supervisor` / `-- log` (one). The supervisor's run:
//! `HEARTBEAT_BENCH_SECONDS` (default 30) a soak, `HEARTBEAT_BENCH_ROUNDS` (default 2) rounds,
//! `HEARTBEAT_BENCH_INTERVAL` (default `1s`) between samples, `HEARTBEAT_BENCH_UNILAB` (default
//! this build's `unilab`) the binary to measure, `HEARTBEAT_BENCH_BEFORE` another to measure
//! beside it.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use unilab::testing::heartbeat::{Beat, SampleSummary, Timed};
use unilab::*;

fn main() {
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let run = |name: &str| wanted.is_empty() || wanted.iter().any(|w| name.contains(w.as_str()));
    if run("supervisor") {
        supervisor_cost();
    }
    if run("log") {
        log_cost();
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// What one soak cost its supervisor.
#[derive(Debug, Default, Clone, Copy)]
struct Cost {
    /// Every thread's time on a CPU.
    cpu_ns: u64,
    /// The main thread's.
    main_ns: u64,
    /// `utime + stime` of the zombie, in clock ticks.
    ticks: u64,
    /// Every thread's voluntary context switches: its wake-ups.
    wakeups: u64,
    /// The heartbeat thread's.
    heartbeat_wakeups: u64,
    /// The soak's run, seconds.
    seconds: f64,
    samples: u64,
    beats: u64,
}

impl std::ops::AddAssign for Cost {
    fn add_assign(&mut self, other: Cost) {
        self.cpu_ns += other.cpu_ns;
        self.main_ns += other.main_ns;
        self.ticks += other.ticks;
        self.wakeups += other.wakeups;
        self.heartbeat_wakeups += other.heartbeat_wakeups;
        self.seconds += other.seconds;
        self.samples += other.samples;
        self.beats += other.beats;
    }
}

/// `voluntary_ctxt_switches` of a task's `status`.
fn voluntary_switches(task: &Path) -> Option<u64> {
    std::fs::read_to_string(task.join("status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
        .trim()
        .parse()
        .ok()
}

/// What the bench keeps of one thread: its CPU time, its wake-ups, whether it reads the beats.
#[derive(Debug, Default, Clone, Copy)]
struct Thread {
    ns: u64,
    wakeups: u64,
    heartbeat: bool,
}

/// `soak run` of the heartbeat trainer running `action` by `unilab` (named `who`), in `dir`;
/// what it cost its supervisor.
fn soak_once(
    (who, unilab): (&str, &Path),
    dir: &Path,
    name: &str,
    interval: &str,
    action: &str,
) -> Cost {
    // A state root a build: an older one refuses a log of a newer schema.
    let root = dir.join(format!("root-{who}"));
    let progress = dir.join("progress");
    let output = dir.join(format!("{name}.json"));
    let mut path = vec![fixtures()];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let mut child = Command::new(unilab)
        .env_clear()
        .env("PATH", std::env::join_paths(path).expect("a PATH"))
        .env("HOME", dir)
        .arg("--root")
        .arg(&root)
        .args(["soak", "run", "--progress-dir"])
        .arg(&progress)
        .arg("--output")
        .arg(&output)
        .args(["--sample-interval", interval, "--stale-progress", "1h"])
        .args(["--allow-no-progress", "--py-spy", "off", "--", "python3"])
        .arg(fixtures().join("heartbeat_trainer.py"))
        .arg(action)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn unilab soak run");
    let pid = child.id();
    let mut threads: BTreeMap<u32, Thread> = BTreeMap::new();
    let ticks = loop {
        let fields = common::stat_fields(pid).expect("the supervisor's stat");
        if fields[0] == "Z" {
            let task = PathBuf::from(format!("/proc/{pid}"));
            let main = threads.entry(pid).or_default();
            main.ns =
                common::schedstat_ns(&task.join("schedstat")).expect("the zombie's schedstat");
            main.wakeups = main.wakeups.max(voluntary_switches(&task).unwrap_or(0));
            break fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        }
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for task in tasks.flatten() {
                let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
                    continue;
                };
                let path = task.path();
                let kept = threads.entry(tid).or_default();
                if let Some(ns) = common::schedstat_ns(&path.join("schedstat")) {
                    kept.ns = kept.ns.max(ns);
                }
                if let Some(wakeups) = voluntary_switches(&path) {
                    kept.wakeups = kept.wakeups.max(wakeups);
                }
                kept.heartbeat |= std::fs::read_to_string(path.join("comm"))
                    .is_ok_and(|comm| comm.trim() == "heartbeat");
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let status = child.wait().expect("wait for the supervisor");
    assert!(status.success(), "{name}: soak run exited {status}");
    let artifact: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&output).expect("the artifact")).unwrap();
    std::fs::remove_file(&output).unwrap();
    let summary = &artifact["summary"];
    Cost {
        cpu_ns: threads.values().map(|t| t.ns).sum(),
        main_ns: threads[&pid].ns,
        ticks,
        wakeups: threads.values().map(|t| t.wakeups).sum(),
        heartbeat_wakeups: threads
            .values()
            .filter(|t| t.heartbeat)
            .map(|t| t.wakeups)
            .sum(),
        seconds: artifact["duration_seconds"].as_f64().unwrap_or(0.0),
        samples: summary["samples"].as_u64().unwrap(),
        beats: summary["steps"]["train"]["count"].as_u64().unwrap_or(0),
    }
}

/// One build's totals over every round, by variant: without beats first.
#[derive(Debug, Default, Clone)]
struct Totals(Vec<Cost>);

impl Totals {
    /// What variant `name` (the totals' `i`th) cost over the one without beats: the
    /// supervisor's CPU a beat, in microseconds, and its wake-ups a second, all and the
    /// heartbeat thread's.
    fn say(
        &self,
        who: &str,
        (i, name): (usize, &str),
        (rounds, seconds, interval): (u32, u64, &str),
    ) {
        let (idle, beating) = (self.0[0], self.0[i]);
        let per_second = |wakeups: u64, cost: &Cost| wakeups as f64 / cost.seconds;
        println!(
            "heartbeat_cost/supervisor {who}, {name}, {rounds} x {seconds} s at {interval}: \
             {:.2} us of CPU a beat ({:.1} ms against {:.1} ms without beats, {} beats; {:.2}x \
             the CPU, main thread {:.2}x, by ticks {:.2}x); {:.0} wake-ups a second against \
             {:.0} without beats, {:.0} of them the heartbeat thread's",
            (beating.cpu_ns as f64 - idle.cpu_ns as f64) / 1e3 / beating.beats as f64,
            beating.cpu_ns as f64 / 1e6,
            idle.cpu_ns as f64 / 1e6,
            beating.beats,
            beating.cpu_ns as f64 / idle.cpu_ns as f64,
            beating.main_ns as f64 / idle.main_ns as f64,
            beating.ticks as f64 / idle.ticks.max(1) as f64,
            per_second(beating.wakeups, &beating),
            per_second(idle.wakeups, &idle),
            per_second(beating.heartbeat_wakeups, &beating),
        );
    }
}

fn supervisor_cost() {
    let seconds: u64 = env_or("HEARTBEAT_BENCH_SECONDS", 30);
    let rounds: u32 = env_or("HEARTBEAT_BENCH_ROUNDS", 2);
    let interval: String = env_or("HEARTBEAT_BENCH_INTERVAL", "1s".to_owned());
    let dir = tempfile::Builder::new()
        .prefix("unilab-heartbeat-bench-")
        .tempdir()
        .expect("a temporary directory");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir.path().join("progress"))
        .unwrap();
    // `HEARTBEAT_BENCH_UNILAB`: another build to measure (a copy of an earlier one, to compare);
    // `HEARTBEAT_BENCH_BEFORE`: one to measure beside it.
    let after = std::env::var_os("HEARTBEAT_BENCH_UNILAB").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_unilab")),
        PathBuf::from,
    );
    let mut builds = vec![("after", after)];
    builds.extend(std::env::var_os("HEARTBEAT_BENCH_BEFORE").map(|b| ("before", b.into())));
    let variants = [
        ("without beats", format!("idle:1000:{seconds}")),
        ("1,000 beats/s with t", format!("rate:1000:{seconds}")),
        (
            "1,000 beats/s without t",
            format!("bare-rate:1000:{seconds}"),
        ),
    ];
    let mut totals = vec![Totals(vec![Cost::default(); variants.len()]); builds.len()];
    let began = Instant::now();
    for round in 0..rounds {
        for (b, (who, unilab)) in builds.iter().enumerate() {
            for (i, (name, action)) in variants.iter().enumerate() {
                let tag = format!("r{round}-{who}-{i}");
                let cost = soak_once((who, unilab), dir.path(), &tag, &interval, action);
                println!(
                    "heartbeat_cost/supervisor round {round}, {who}, {name}: {:.1} ms CPU ({:.1} \
                     ms main thread; {} ticks), {:.0} wake-ups/s ({:.0} the heartbeat \
                     thread's), {} samples, {} beats",
                    cost.cpu_ns as f64 / 1e6,
                    cost.main_ns as f64 / 1e6,
                    cost.ticks,
                    cost.wakeups as f64 / cost.seconds,
                    cost.heartbeat_wakeups as f64 / cost.seconds,
                    cost.samples,
                    cost.beats,
                );
                totals[b].0[i] += cost;
            }
        }
    }
    for ((who, _), totals) in builds.iter().zip(&totals) {
        for (i, (name, _)) in variants.iter().enumerate().skip(1) {
            totals.say(who, (i, name), (rounds, seconds, &interval));
        }
    }
    println!(
        "heartbeat_cost/supervisor {:.1} s in all",
        began.elapsed().as_secs_f64()
    );
}

/// Samples recorded in each log.
const SAMPLES: u64 = 1_000;
/// Samples a commit, as a soak sampled every second groups them.
const GROUP: u64 = 10;
const NUMBERS: [&str; 4] = ["loss", "lr", "samples", "tokens"];

fn sample(i: u64, heartbeat: Option<SampleBeats>) -> StoredEvent {
    let processes = common::training_tree(i, 10);
    let pss = processes.iter().map(|p| Some(p.rss_bytes / 2)).collect();
    StoredEvent::SoakSampled {
        sample: Box::new(Sample {
            index: i,
            elapsed_ms: i * 1000,
            after_exit: false,
            processes,
            reaped_cpu_ticks: i,
            gpus: None,
            progress: ProgressSignature {
                files: i / 60,
                bytes: i * 100,
                newest_mtime_ns: Some(1_764_676_800_000_000_000 + i as i64 * 1_000_000_000),
            },
            sampler_cost_us: 900 + i % 50,
            errors: Vec::new(),
        }),
        measures: Box::new(Measures {
            pss_bytes: pss,
            gpus: Vec::new(),
            heartbeat: heartbeat.map(Box::new),
        }),
        noted: None,
    }
}

/// The beats of each sample: `rate` a sample (a second), each with `numbers` numbers that move
/// at every step, step times jittered around a second over `rate`; fed through the summary as
/// the supervisor feeds it.
struct Trainer {
    beat: Beat<'static>,
    keys: &'static [&'static str],
    summary: SampleSummary,
    rate: u64,
    /// A step's jitter, deterministic.
    x: u64,
}

impl Trainer {
    fn new(rate: u64, numbers: usize) -> Self {
        let keys = &NUMBERS[..numbers];
        Trainer {
            beat: Beat {
                step: 0,
                phase: "train".into(),
                t: 1.754e9,
                clocked: true,
                arrived: 1.754e9,
                numbers: keys.iter().map(|&k| (k, 0.0)).collect(),
            },
            keys,
            summary: SampleSummary::new(),
            rate,
            x: 0x9E37_79B9_7F4A_7C15,
        }
    }

    fn sample(&mut self) -> SampleBeats {
        let step_seconds = 1.0 / self.rate as f64;
        for _ in 0..self.rate {
            self.x ^= self.x << 13;
            self.x ^= self.x >> 7;
            self.x ^= self.x << 17;
            let jitter = 0.9 + (self.x % 1000) as f64 / 5000.0;
            let beat = &mut self.beat;
            beat.step += 1;
            beat.t += step_seconds * jitter;
            let step = beat.step as f64;
            let value = |key: &str| match key {
                "loss" => 2.0 / (1.0 + step).ln(),
                "lr" => 3e-4 * (1.0 - step / 1e9),
                "samples" => step * 32.0,
                _ => step * 4096.0,
            };
            beat.numbers = self.keys.iter().map(|&k| (k, value(k))).collect();
            let at = Timed {
                at: self.beat.t,
                stamped: false,
            };
            self.summary.add(&self.beat, at);
        }
        self.summary.take()
    }
}

/// The records' own bytes a sample, of [`SAMPLES`] samples recorded in a fresh log with the
/// beats `beats` gives each (none without).
fn stored_per_sample(mut beats: Option<&mut Trainer>) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("events.redb");
    let scope = Scope {
        uid: nix::unistd::getuid().as_raw(),
        host: "bench-host".into(),
    };
    let log = EventLog::open(&path, scope, PROJECTIONS).expect("open");
    for start in (0..SAMPLES).step_by(GROUP as usize) {
        let events: Vec<_> = (start..start + GROUP)
            .map(|i| {
                let heartbeat = beats.as_deref_mut().map(Trainer::sample);
                (Subject::Soak("bench".into()), sample(i, heartbeat))
            })
            .collect();
        log.append_all(events).expect("append");
    }
    let mut stored = 0;
    let snapshot = log.snapshot().expect("snapshot");
    snapshot
        .scan_sized(|_, bytes| {
            stored += bytes;
            Ok(())
        })
        .expect("scan");
    stored as f64 / SAMPLES as f64
}

fn log_cost() {
    unilab::testing::store_samples_whole(false);
    let without = stored_per_sample(None);
    println!(
        "heartbeat_cost/log a sample of a 10-process tree without beats: {without:.1} bytes \
         (records, packed)"
    );
    for rate in [1, 1_000, 100_000] {
        let mut line = format!("heartbeat_cost/log {rate} beats a sample, the beats' bytes:");
        for numbers in 1..=NUMBERS.len() {
            let mut trainer = Trainer::new(rate, numbers);
            let with = stored_per_sample(Some(&mut trainer));
            line += &format!(" {numbers} number(s) {:.1}", with - without);
        }
        println!("{line}");
    }
}
