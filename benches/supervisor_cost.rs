//! Where a sample's CPU goes: the real `unilab soak run` (release) over a tree of sleeping
//! processes (`benches/sleeping_tree.py`: 1 and 100 processes, the first appending a line to a
//! file of the progress directory every half second), sampled every 1 s and every 0.1 s, one
//! shot, printed as a table a configuration.
//!
//! Every unilab process of the soak counts: the supervisor, each of its threads, and its guard.
//! Their CPU time is read from `/proc` while they run (each thread's `schedstat`, every 20 ms),
//! the supervisor's main thread once more as a zombie, so nothing it did is missed. The split
//! comes from the supervisor itself (`UNILAB_COST_SPLIT`, `src/soak/cost.rs`): its main thread's
//! CPU clock around each part of the sampling loop. Rows:
//! - the loop's parts (main thread), a sample: sampling (the tree from `/proc`), progress scan,
//!   guard status (the command's state), alarm check, heartbeat poll, metrics, watch, log append
//!   and commit, status line, wait (the wake-ups between samples that find nothing to do), and
//!   the loop's other (what no part holds);
//! - the other threads of the supervisor, by name, over the whole soak, a sample (the `/proc`
//!   reader thread reads `smaps_rollup` for the sampler; `unilab` threads are the output pumps
//!   and the signal thread);
//! - the main thread outside the loop (the start, the teardown, the verdict, the artifact), the
//!   guard, both a sample too, and what the split cannot place: the `/proc` total less every
//!   row (the exit after the split is written, reads missed between two looks).
//!
//! Run with `cargo bench --bench supervisor_cost`. `SUPERVISOR_COST_SECONDS` (default 20) a soak,
//! `SUPERVISOR_COST_INTERVALS` (default `1,0.1`), `SUPERVISOR_COST_PROCESSES` (default `1,100`),
//! `SUPERVISOR_COST_UNILAB` the build to measure (default this one's), `SUPERVISOR_COST_BEFORE`
//! another (one with the split: a build of the same accounting) measured in the same run,
//! interleaved; `SUPERVISOR_COST_ROUNDS` (default 1) rounds, summed.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn state(pid: u32) -> Option<char> {
    common::stat_fields(pid)?.first()?.chars().next()
}

/// The guard: the supervisor's child running `__soak-guard`.
fn guard_of(pid: u32) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    children.split_whitespace().find_map(|c| {
        let cmdline = std::fs::read(format!("/proc/{c}/cmdline")).ok()?;
        let guard = cmdline.split(|&b| b == 0).any(|arg| arg == b"__soak-guard");
        guard.then(|| c.parse().ok())?
    })
}

/// Each thread of `pid` as last seen: name and CPU time.
fn look(pid: u32, threads: &mut BTreeMap<u32, (String, u64)>) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return;
    };
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let path = task.path();
        let Some(ns) = common::schedstat_ns(&path.join("schedstat")) else {
            continue;
        };
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        let kept = threads.entry(tid).or_insert((comm.trim().to_owned(), 0));
        kept.1 = kept.1.max(ns);
    }
}

/// One soak's costs, nanoseconds, summed over rounds.
#[derive(Debug, Default, Clone)]
struct Run {
    samples: u64,
    seconds: f64,
    /// The loop's parts (main thread) and the loop's whole.
    parts: BTreeMap<String, u64>,
    /// The parts outside the loop (main thread): the start, the teardown, the verdict, the
    /// artifact.
    once: BTreeMap<String, u64>,
    loop_ns: u64,
    /// The main thread's time in all, as `/proc` saw it and as the split did when written.
    main_ns: u64,
    split_main_ns: u64,
    /// Its wake-ups in the loop, and the wait's.
    loop_wakeups: u64,
    wait_wakeups: u64,
    /// The other threads, by name.
    threads: BTreeMap<String, u64>,
    guard_ns: u64,
    /// Everything `/proc` saw.
    total_ns: u64,
}

impl Run {
    fn add(&mut self, other: &Run) {
        self.samples += other.samples;
        self.seconds += other.seconds;
        for (k, v) in &other.parts {
            *self.parts.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &other.once {
            *self.once.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &other.threads {
            *self.threads.entry(k.clone()).or_default() += v;
        }
        self.loop_ns += other.loop_ns;
        self.main_ns += other.main_ns;
        self.split_main_ns += other.split_main_ns;
        self.loop_wakeups += other.loop_wakeups;
        self.wait_wakeups += other.wait_wakeups;
        self.guard_ns += other.guard_ns;
        self.total_ns += other.total_ns;
    }
}

fn soak_once(unilab: &Path, dir: &Path, processes: u32, interval: &str, seconds: u64) -> Run {
    let progress = dir.join("progress");
    let _ = std::fs::remove_dir_all(&progress);
    std::fs::create_dir_all(&progress).unwrap();
    let split = dir.join("split.json");
    let _ = std::fs::remove_file(&split);
    let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/sleeping_tree.py");
    let mut child = Command::new(unilab)
        .env("UNILAB_COST_SPLIT", &split)
        .env("HOME", dir)
        .arg("--root")
        .arg(dir.join("root"))
        .args(["soak", "run", "--progress-dir"])
        .arg(&progress)
        .arg("--output")
        .arg(dir.join("soak.json"))
        .args(["--sample-interval", interval, "--stale-progress", "1h"])
        .args(["--py-spy", "off", "--", "python3"])
        .arg(tree)
        .arg(processes.to_string())
        .arg(seconds.to_string())
        .arg(&progress)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn unilab soak run");
    let pid = child.id();
    let mut threads = BTreeMap::new();
    let mut guard = None;
    let mut guard_threads = BTreeMap::new();
    loop {
        if state(pid) == Some('Z') {
            let main = threads.entry(pid).or_insert((String::new(), 0));
            main.1 = common::schedstat_ns(Path::new(&format!("/proc/{pid}/schedstat")))
                .unwrap_or(main.1);
            break;
        }
        look(pid, &mut threads);
        guard = guard.or_else(|| guard_of(pid));
        if let Some(guard) = guard {
            look(guard, &mut guard_threads);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = child.wait().expect("wait for the supervisor");
    assert!(status.success(), "soak run exited {status}");
    let split: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&split).expect("the split (a build with it?)"))
            .unwrap();
    let artifact: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("soak.json")).unwrap()).unwrap();
    let _ = std::fs::remove_file(dir.join("soak.json"));
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    // Threads given no name of their own bear the program's.
    let program = threads[&pid].0.clone();
    let mut named = BTreeMap::new();
    for (tid, (name, ns)) in &threads {
        if *tid != pid {
            let name = if *name == program {
                "unnamed threads (output pumps, signals)"
            } else {
                name
            };
            *named.entry(format!("thread {name}")).or_default() += ns;
        }
    }
    let guard_ns = guard_threads.values().map(|(_, ns)| ns).sum::<u64>();
    Run {
        samples: n(&split["samples"]),
        seconds: artifact["duration_seconds"].as_f64().unwrap_or(0.0),
        parts: split["parts_ns"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), n(v)))
            .collect(),
        once: split["once_ns"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), n(v)))
            .collect(),
        loop_ns: n(&split["loop_ns"]),
        main_ns: threads[&pid].1,
        split_main_ns: n(&split["main_ns"]),
        loop_wakeups: n(&split["loop_wakeups"]),
        wait_wakeups: n(&split["wait_wakeups"]),
        threads: named,
        guard_ns,
        total_ns: threads.values().map(|(_, ns)| ns).sum::<u64>() + guard_ns,
    }
}

/// The table of one configuration: µs a sample, each build a column.
fn table(title: &str, runs: &[(&str, Run)]) {
    println!("supervisor_cost {title}");
    let per = |run: &Run, ns: u64| ns as f64 / 1e3 / run.samples.max(1) as f64;
    let mut rows: Vec<String> = runs[0].1.parts.keys().cloned().collect();
    for (_, run) in runs {
        for k in run.threads.keys() {
            if !rows.contains(k) {
                rows.push(k.clone());
            }
        }
    }
    print!("| µs a sample |");
    for (who, run) in runs {
        print!(" {who} ({} samples, {:.0} s) |", run.samples, run.seconds);
    }
    println!();
    println!("|---|{}", "---|".repeat(runs.len()));
    let row = |name: &str, value: &dyn Fn(&Run) -> f64| {
        print!("| {name} |");
        for (_, run) in runs {
            print!(" {:.1} |", value(run));
        }
        println!();
    };
    for name in &rows {
        let value = |run: &Run| {
            let ns = run.parts.get(name).or_else(|| run.threads.get(name));
            per(run, ns.copied().unwrap_or(0))
        };
        row(name, &value);
    }
    let parts = |run: &Run| run.parts.values().sum::<u64>();
    let threads = |run: &Run| run.threads.values().sum::<u64>();
    row("loop other", &|run| {
        per(run, run.loop_ns.saturating_sub(parts(run)))
    });
    let once = |run: &Run| run.once.values().sum::<u64>();
    let outside: std::collections::BTreeSet<&String> =
        runs.iter().flat_map(|(_, run)| run.once.keys()).collect();
    for name in outside {
        row(&format!("outside the loop: {name}"), &|run| {
            per(run, run.once.get(name).copied().unwrap_or(0))
        });
    }
    row("outside the loop: other", &|run| {
        per(
            run,
            run.split_main_ns.saturating_sub(run.loop_ns + once(run)),
        )
    });
    row("guard process", &|run| per(run, run.guard_ns));
    let placed = |run: &Run| run.split_main_ns + threads(run) + run.guard_ns;
    row(
        "unaccounted (/proc total less the rows: the exit)",
        &|run| (run.total_ns as f64 - placed(run) as f64) / 1e3 / run.samples.max(1) as f64,
    );
    row("**total (/proc schedstat)**", &|run| per(run, run.total_ns));
    row("the loop alone (main thread)", &|run| per(run, run.loop_ns));
    // What a sample costs once the start and the end are spread thin: the loop and the threads.
    let steady = |run: &Run| run.loop_ns + threads(run);
    row(
        "**a sample in a long soak (the loop and the threads)**",
        &|run| per(run, steady(run)),
    );
    let sampling = |run: &Run| {
        run.parts.get("sampling").copied().unwrap_or(0)
            + run
                .threads
                .get("thread unilab-proc-rea")
                .copied()
                .unwrap_or(0)
    };
    let commit = |run: &Run| run.parts.get("commit").copied().unwrap_or(0);
    row(
        "all but sampling (+ its reader thread) and commit, over sampling: long soak",
        &|run| {
            let rest = steady(run) as f64 - sampling(run) as f64 - commit(run) as f64;
            rest / sampling(run).max(1) as f64
        },
    );
    row("the same, this soak whole", &|run| {
        let rest = run.total_ns as f64 - sampling(run) as f64 - commit(run) as f64;
        rest / sampling(run).max(1) as f64
    });
    row("main thread wake-ups in the loop", &|run| {
        run.loop_wakeups as f64 / run.samples.max(1) as f64
    });
    row("of them the wait's", &|run| {
        run.wait_wakeups as f64 / run.samples.max(1) as f64
    });
    println!();
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let seconds: u64 = env_or("SUPERVISOR_COST_SECONDS", "20").parse().unwrap();
    let rounds: u32 = env_or("SUPERVISOR_COST_ROUNDS", "1").parse().unwrap();
    let after = std::env::var_os("SUPERVISOR_COST_UNILAB").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_unilab")),
        PathBuf::from,
    );
    let mut builds = vec![("after", after)];
    if let Some(before) = std::env::var_os("SUPERVISOR_COST_BEFORE") {
        builds.insert(0, ("before", PathBuf::from(before)));
    }
    let dir = tempfile::tempdir().unwrap();
    for processes in env_or("SUPERVISOR_COST_PROCESSES", "1,100").split(',') {
        for interval in env_or("SUPERVISOR_COST_INTERVALS", "1,0.1").split(',') {
            let processes: u32 = processes.parse().unwrap();
            let mut runs: Vec<(&str, Run)> = builds
                .iter()
                .map(|(who, _)| (*who, Run::default()))
                .collect();
            for _ in 0..rounds {
                for (i, (_, unilab)) in builds.iter().enumerate() {
                    // A state root a build: an older one refuses a log of a newer schema.
                    let own = dir.path().join(format!("build{i}"));
                    std::fs::create_dir_all(&own).unwrap();
                    let run = soak_once(unilab, &own, processes, interval, seconds);
                    runs[i].1.add(&run);
                }
            }
            table(
                &format!(
                    "{processes} processes, --sample-interval {interval}, {rounds} x {seconds} s"
                ),
                &runs,
            );
        }
    }
}
