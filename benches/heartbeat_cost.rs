//! What heartbeats cost unilab, one shot, printed:
//! - `supervisor`: the CPU time of `unilab soak run` itself (not its guard's, not the
//!   trainer's) over a trainer that beats 1,000 times a second, against the same trainer
//!   running the same loop without writing a beat (`tests/fixtures/heartbeat_trainer.py`,
//!   `rate:1000:S` against `idle:1000:S`), in the same run, interleaved, a round of each at a
//!   time. The supervisor's CPU time is read from `/proc`: each thread's `schedstat` (its time
//!   on a CPU, in nanoseconds) while it runs, and the main thread's — where the beats are read
//!   and judged — once more when the process is a zombie, so that nothing it did is missed.
//!   The clock ticks of its `stat` (all threads, to the end, in 10 ms) are printed beside.
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
//! this build's `unilab`) the binary to measure.

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
    samples: u64,
    beats: u64,
}

impl std::ops::AddAssign for Cost {
    fn add_assign(&mut self, other: Cost) {
        self.cpu_ns += other.cpu_ns;
        self.main_ns += other.main_ns;
        self.ticks += other.ticks;
        self.samples += other.samples;
        self.beats += other.beats;
    }
}

fn schedstat_ns(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The fields of `/proc/<pid>/stat` after the command's name: `[0]` the state, `[11]` and
/// `[12]` utime and stime.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = text.rsplit_once(") ")?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// `soak run` of the heartbeat trainer running `action`, in `dir`; what it cost its supervisor.
fn soak_once(dir: &Path, name: &str, interval: &str, action: &str) -> Cost {
    let root = dir.join("root");
    let progress = dir.join("progress");
    let output = dir.join(format!("{name}.json"));
    let mut path = vec![fixtures()];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    // `HEARTBEAT_BENCH_UNILAB`: another build to measure (a copy of an earlier one, to compare).
    let unilab = std::env::var_os("HEARTBEAT_BENCH_UNILAB").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_unilab")),
        PathBuf::from,
    );
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
    let mut threads: BTreeMap<u32, u64> = BTreeMap::new();
    let ticks = loop {
        let fields = stat_fields(pid).expect("the supervisor's stat");
        if fields[0] == "Z" {
            let main = schedstat_ns(Path::new(&format!("/proc/{pid}/schedstat")));
            threads.insert(pid, main.expect("the zombie's schedstat"));
            break fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        }
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for task in tasks.flatten() {
                let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
                    continue;
                };
                if let Some(ns) = schedstat_ns(&task.path().join("schedstat")) {
                    let kept = threads.entry(tid).or_default();
                    *kept = (*kept).max(ns);
                }
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
        cpu_ns: threads.values().sum(),
        main_ns: threads[&pid],
        ticks,
        samples: summary["samples"].as_u64().unwrap(),
        beats: summary["steps"]["train"]["count"].as_u64().unwrap_or(0),
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
    let tck = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let variants = [
        ("without beats", format!("idle:1000:{seconds}")),
        ("1,000 beats/s", format!("rate:1000:{seconds}")),
    ];
    let mut totals = [Cost::default(); 2];
    let began = Instant::now();
    for round in 0..rounds {
        for (i, (name, action)) in variants.iter().enumerate() {
            let cost = soak_once(dir.path(), &format!("r{round}-{i}"), &interval, action);
            println!(
                "heartbeat_cost/supervisor round {round}, {name}: {:.1} ms CPU ({:.1} ms main \
                 thread; {} ticks), {} samples, {} beats: {:.0} us a sample",
                cost.cpu_ns as f64 / 1e6,
                cost.main_ns as f64 / 1e6,
                cost.ticks,
                cost.samples,
                cost.beats,
                cost.cpu_ns as f64 / 1e3 / cost.samples as f64,
            );
            totals[i] += cost;
        }
    }
    let [idle, beating] = totals;
    let per_sample = |c: &Cost| c.cpu_ns as f64 / 1e3 / c.samples as f64;
    println!(
        "heartbeat_cost/supervisor {rounds} x {seconds} s at {interval}: without beats {:.1} ms \
         CPU ({:.0} us a sample, {:.2} s by ticks), with {} beats {:.1} ms ({:.0} us a sample, \
         {:.2} s by ticks): {:.2}x the CPU, {:.2}x a sample ({:.2}x by ticks; main thread \
         {:.2}x); {:.1} s in all",
        idle.cpu_ns as f64 / 1e6,
        per_sample(&idle),
        idle.ticks as f64 / tck,
        beating.beats,
        beating.cpu_ns as f64 / 1e6,
        per_sample(&beating),
        beating.ticks as f64 / tck,
        beating.cpu_ns as f64 / idle.cpu_ns as f64,
        per_sample(&beating) / per_sample(&idle),
        beating.ticks as f64 / idle.ticks.max(1) as f64,
        beating.main_ns as f64 / idle.main_ns as f64,
        began.elapsed().as_secs_f64(),
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
