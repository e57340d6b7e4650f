//! Soak benchmarks:
//! - `sampler/tree_N`: one sample of a real process tree of N processes (10, 100, 1000), without
//!   GPUs: the `/proc` walk, every process's stat, fds and I/O, and the progress directory;
//! - `export_100k`: `soak export` of a soak of 100,000 samples (gather from the log + render).
//!
//! Run with `cargo bench --bench soak`. The 100,000-sample log is built once under
//! `target/bench-data/`.

mod common;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use unilab::event::soak::*;
use unilab::event::{Event, Scope, Subject};
use unilab::log::{EventLog, LogReader};
use unilab::process::{self, ProcessIdentity};
use unilab::projection;
use unilab::soak::artifact;
use unilab::soak::sampler::{HeldDir, Sampler};

const EXPORT_SAMPLES: u64 = 100_000;

/// A shell with `n` sleeping children; killed with its children on drop.
struct Tree {
    root: Child,
}

impl Tree {
    fn spawn(n: usize) -> Self {
        let root = Command::new("sh")
            .arg("-c")
            .arg(format!("for i in $(seq {n}); do sleep 600 & done; wait"))
            .spawn()
            .expect("spawn the tree");
        let pid = root.id();
        let started = std::time::Instant::now();
        while process::descendants(pid, &process::all_processes(Path::new("/proc"))).len() < n {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the tree never grew"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Tree { root }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let pid = self.root.id();
        for stat in process::descendants(pid, &process::all_processes(Path::new("/proc"))) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(stat.pid as i32),
                nix::sys::signal::SIGKILL,
            );
        }
        let _ = self.root.kill();
        let _ = self.root.wait();
    }
}

fn sampler(c: &mut Criterion) {
    let progress = tempfile::tempdir().expect("tempdir");
    for i in 0..20 {
        std::fs::write(progress.path().join(format!("checkpoint-{i}")), b"x").expect("write");
    }
    let sampler = Sampler {
        proc_root: PathBuf::from("/proc"),
        progress: HeldDir::open(progress.path()).expect("hold the progress directory"),
        gpus: None,
    };
    let mut group = c.benchmark_group("sampler");
    for n in [10, 100, 1000] {
        let tree = Tree::spawn(n);
        let root = tree.root.id();
        group.bench_with_input(BenchmarkId::new("tree", n), &n, |b, &n| {
            b.iter(|| {
                let sample = sampler.sample(0, Duration::ZERO, root, false);
                assert!(sample.processes.len() >= n);
                black_box(sample)
            })
        });
        drop(tree);
    }
    group.finish();
}

fn sample(i: u64) -> Sample {
    Sample {
        index: i,
        elapsed_ms: i * 1000,
        after_exit: false,
        processes: common::training_tree(i),
        reaped_cpu_ticks: i,
        gpus: Some(vec![GpuSample {
            index: 0,
            uuid: "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f".into(),
            memory_used_mib: Some(40_000),
            memory_total_mib: Some(143_771),
            utilization_percent: Some(97),
            processes: vec![GpuProcessSample {
                pid: 1000,
                used_memory_mib: Some(39_000),
            }],
        }]),
        progress: ProgressSignature {
            files: i / 60,
            bytes: i * 100,
            newest_mtime_ns: Some(1_764_676_800_000_000_000 + i as i64),
        },
        sampler_cost_us: 900,
        errors: Vec::new(),
    }
}

/// A log holding one soak of [`EXPORT_SAMPLES`] samples and its verdict.
fn soak_log() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    let path = dir.join("soak-100k-v2.redb");
    let complete = dir.join("soak-100k-v2.complete");
    if complete.exists() {
        return path;
    }
    std::fs::create_dir_all(&dir).expect("bench data directory");
    let _ = std::fs::remove_file(&path);
    let scope = Scope {
        uid: nix::unistd::getuid().as_raw(),
        host: "bench-host".into(),
    };
    let log = EventLog::open(&path, scope, projection::ALL).expect("open");
    let subject = || Subject::Soak("bench".into());
    let supervisor = ProcessIdentity {
        pid: 1,
        start_ticks: 1,
    };
    log.append(
        subject(),
        Event::SoakStarted(Box::new(SoakStart {
            soak_id: "bench".into(),
            command: vec!["python3".into(), "train.py".into()],
            cwd: "/work".into(),
            progress_dir: "/work/progress".into(),
            output: "/work/soak.json".into(),
            parameters: SoakParameters {
                sample_interval_ms: 1000,
                startup_timeout_ms: 600_000,
                stale_progress_ms: 120_000,
                shutdown_grace_ms: 5000,
                min_duration_ms: 0,
            },
            require_progress: true,
            metadata: Default::default(),
            environment: Default::default(),
            supervisor,
            runtime_json: "{}".into(),
            ticks_per_second: 100,
        })),
    )
    .expect("start");
    for start in (0..EXPORT_SAMPLES).step_by(10_000) {
        log.append_all(
            (start..start + 10_000).map(|i| (subject(), Event::SoakSampled(Box::new(sample(i))))),
        )
        .expect("samples");
    }
    log.append(
        subject(),
        Event::SoakFinished(Box::new(SoakEnd {
            outcome: Outcome {
                status: OutcomeStatus::Passed,
                failure_kind: None,
                reason: "ok".into(),
            },
            exit: Some(ExitInfo {
                code: Some(0),
                signal: None,
            }),
            run_ms: EXPORT_SAMPLES * 1000,
            teardown_ms: 50,
            first_progress_ms: Some(1000),
            last_progress_ms: Some(EXPORT_SAMPLES * 1000),
            leaked_processes: Vec::new(),
            stdout_tail: Vec::new(),
            stderr_tail: Vec::new(),
        })),
    )
    .expect("finish");
    drop(log);
    std::fs::write(&complete, b"").expect("mark complete");
    path
}

fn export(c: &mut Criterion) {
    let path = soak_log();
    let reader = LogReader::open(&path).expect("open").expect("exists");
    let mut group = c.benchmark_group("export");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(30));
    group.bench_function("export_100k", |b| {
        b.iter(|| {
            let snapshot = reader.snapshot().expect("snapshot");
            let records = artifact::collect(&snapshot, "bench")
                .expect("collect")
                .expect("the soak");
            let artifact::Recorded::V2(soak) = &records.soak else {
                panic!("recorded in schema 2's form")
            };
            assert_eq!(soak.samples.len() as u64, EXPORT_SAMPLES);
            black_box(artifact::render(&records).0.len())
        })
    });
    group.finish();
}

/// The HTML report of the same 100,000-sample soak: decimated charts keep it small and fast.
fn report(c: &mut Criterion) {
    let path = soak_log();
    let reader = LogReader::open(&path).expect("open").expect("exists");
    let render = || {
        let snapshot = reader.snapshot().expect("snapshot");
        let records = artifact::collect(&snapshot, "bench")
            .expect("collect")
            .expect("the soak");
        unilab::soak::report::render(
            &artifact::view(&records),
            &unilab::soak::report::Extras {
                timeline: &[],
                digest: "bench",
                chain_head: "bench",
            },
        )
    };
    let size = render().len();
    eprintln!("report of {EXPORT_SAMPLES} samples: {size} bytes");
    assert!(
        size < 2 * 1024 * 1024,
        "the report stays under 2 MiB: {size} bytes"
    );
    let mut group = c.benchmark_group("report");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.bench_function("report_100k", |b| b.iter(|| black_box(render().len())));
    group.finish();
}

criterion_group!(benches, sampler, export, report);
criterion_main!(benches);
