//! Soak benchmarks:
//! - `sampler/tree_N`: one sample of a real process tree of N processes (10, 100, 1000), without
//!   GPUs: the `/proc` walk, every process's stat, fds and I/O, and the progress directory;
//! - `export_100k/streamed`: `soak export` of a soak of 100,000 samples of a 10-process tree as
//!   unilab does it (one scan, rows spooled, the object composed around them), against
//!   `export_100k/whole_object` (gather every sample, build the whole JSON object, render it: how
//!   unilab exported before), and `export_100k/read_floor` (only reading, checking and decoding
//!   the records), in the same run;
//! - `export_memory`: the peak heap of each way, for 100,000 samples of a 10- and of a
//!   100-process tree (a counting allocator), and the streamed export's time for the latter;
//! - `report_100k`: the HTML report of the 10-process soak.
//!
//! Run with `cargo bench --bench soak`. The logs are built once under `target/bench-data/`
//! (the 100-process one is about 500 MB).

mod common;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use unilab::PROJECTIONS;
use unilab::ProcessIdentity;
use unilab::testing as process;
use unilab::testing::artifact;
use unilab::*;
use unilab::{EventLog, LogReader};
use unilab::{Scope, StoredEvent, Subject};

const EXPORT_SAMPLES: u64 = 100_000;

/// The scope the benchmark logs are recorded for.
fn bench_scope() -> Scope {
    Scope {
        uid: nix::unistd::getuid().as_raw(),
        host: "bench-host".into(),
    }
}

fn sampler(c: &mut Criterion) {
    let (_progress, sampler) = common::checkpoint_sampler();
    let mut group = c.benchmark_group("sampler");
    for n in [10, 100, 1000] {
        let tree = common::Tree::spawn(n);
        let root = tree.root.id();
        group.bench_with_input(BenchmarkId::new("tree", n), &n, |b, &n| {
            let mut index = 0;
            b.iter(|| {
                index += 1;
                let sample = sampler.sample(index, Duration::ZERO, root, false);
                assert!(sample.0.processes.len() >= n);
                black_box(sample)
            })
        });
        // The floor: one read of each process's `stat`, the least a sample can do.
        let pids: Vec<u32> =
            process::descendants(root, &process::all_processes(Path::new("/proc")))
                .iter()
                .map(|p| p.pid)
                .collect();
        group.bench_with_input(BenchmarkId::new("floor", n), &n, |b, _| {
            b.iter(|| {
                let mut bytes = 0;
                for pid in &pids {
                    bytes += std::fs::read(format!("/proc/{pid}/stat")).map_or(0, |s| s.len());
                }
                black_box(bytes)
            })
        });
        drop(tree);
    }
    group.finish();
}

fn sample(i: u64, processes: u32) -> Sample {
    Sample {
        index: i,
        elapsed_ms: i * 1000,
        after_exit: false,
        processes: common::training_tree(i, processes),
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

/// A log holding one soak of [`EXPORT_SAMPLES`] samples of a `processes`-process tree (each
/// with its proportional set size) and its verdict, every record in the form this unilab
/// writes (so it exports the current artifact), its samples stored packed, as unilab stores
/// them, or `whole`, as schema 7 did.
fn soak_log(processes: u32, whole: bool) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    let name = format!(
        "soak-100k-{processes}p-v4{}",
        if whole { "-whole" } else { "" }
    );
    let path = dir.join(format!("{name}.redb"));
    let complete = dir.join(format!("{name}.complete"));
    if complete.exists() {
        return path;
    }
    std::fs::create_dir_all(&dir).expect("bench data directory");
    let _ = std::fs::remove_file(&path);
    let log = EventLog::open(&path, bench_scope(), PROJECTIONS).expect("open");
    let subject = || Subject::Soak("bench".into());
    let supervisor = ProcessIdentity {
        pid: 1,
        start_ticks: 1,
    };
    log.append(
        subject(),
        StoredEvent::SoakStarted {
            start: Box::new(soak_v2::SoakStart {
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
            }),
            supervision: Supervision {
                fail_fast: false,
                py_spy: None,
                dump_signal: None,
                dump_wait_ms: 2000,
                evidence_unavailable: Vec::new(),
                heartbeat: None,
            },
            limits: Limits::default(),
            job: None,
            command_lossy: false,
        },
    )
    .expect("start");
    unilab::testing::store_samples_whole(whole);
    for start in (0..EXPORT_SAMPLES).step_by(10_000) {
        log.append_all((start..start + 10_000).map(|i| {
            let sample = sample(i, processes);
            let pss = sample.processes.iter().map(|p| Some(p.rss_bytes / 2));
            let measures = Measures {
                pss_bytes: pss.collect(),
                gpus: Vec::new(),
                heartbeat: None,
            };
            (
                subject(),
                StoredEvent::SoakSampled {
                    sample: Box::new(sample),
                    measures: Box::new(measures),
                    noted: None,
                },
            )
        }))
        .expect("samples");
    }
    unilab::testing::store_samples_whole(false);
    log.append(
        subject(),
        StoredEvent::SoakFinished {
            end: Box::new(soak_v2::SoakEnd {
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
            }),
            findings: Box::default(),
            limit: None,
        },
    )
    .expect("finish");
    drop(log);
    std::fs::write(&complete, b"").expect("mark complete");
    path
}

/// The artifact as unilab exported it before: every sample gathered, the whole object built
/// and rendered.
fn whole_object(reader: &LogReader) -> usize {
    let snapshot = reader.snapshot().expect("snapshot");
    let records = artifact::collect(&snapshot, "bench")
        .expect("collect")
        .expect("the soak");
    artifact::render(&records).0.len()
}

/// The artifact as unilab exports it: streamed.
fn streamed(reader: &LogReader) -> usize {
    let snapshot = reader.snapshot().expect("snapshot");
    let mut out = std::io::sink();
    artifact::write(&snapshot, "bench", &mut out)
        .expect("export")
        .bytes as usize
}

fn export(c: &mut Criterion) {
    let reader = LogReader::open(&soak_log(10, false), &bench_scope())
        .expect("open")
        .expect("exists");
    let stored_whole = LogReader::open(&soak_log(10, true), &bench_scope())
        .expect("open")
        .expect("exists");
    assert_eq!(streamed(&reader), whole_object(&reader), "the same bytes");
    let mut group = c.benchmark_group("export_100k");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.bench_function("streamed", |b| b.iter(|| black_box(streamed(&reader))));
    // The same soak with its samples stored whole: what unpacking costs a reader.
    group.bench_function("streamed_stored_whole", |b| {
        b.iter(|| black_box(streamed(&stored_whole)))
    });
    // The floor of any export: reading the soak's records and checking them against their
    // hashes, decoded, and nothing else.
    group.bench_function("read_floor", |b| {
        b.iter(|| {
            let snapshot = reader.snapshot().expect("snapshot");
            let mut n = 0u64;
            snapshot
                .scan_subject(&Subject::Soak("bench".into()), 1, |_| {
                    n += 1;
                    Ok::<bool, unilab::LogError>(true)
                })
                .expect("scan");
            black_box(n)
        })
    });
    group.bench_function("whole_object", |b| {
        b.iter(|| black_box(whole_object(&reader)))
    });
    group.finish();
}

/// Peak heap of each way of exporting, and the streamed export's time on the 100-process soak:
/// one-shot figures, printed (too slow and too large for criterion's repetitions).
fn export_memory(_: &mut Criterion) {
    for (processes, whole) in [(10, false), (100, false), (100, true)] {
        let reader = LogReader::open(&soak_log(processes, whole), &bench_scope())
            .expect("open")
            .expect("exists");
        let streamed_mib = common::peak_heap_mib(|| streamed(&reader));
        // Wall and CPU time (both threads: the read-ahead's and the caller's).
        let mut times: Vec<(f64, f64)> = (0..3)
            .map(|_| {
                let (began, cpu) = (std::time::Instant::now(), cpu_time());
                black_box(streamed(&reader));
                (
                    began.elapsed().as_secs_f64(),
                    (cpu_time() - cpu).as_secs_f64(),
                )
            })
            .collect();
        times.sort_by(|a, b| a.0.total_cmp(&b.0));
        let whole_mib = common::peak_heap_mib(|| whole_object(&reader));
        println!(
            "export_memory/{processes}_processes{}: streamed peak heap {streamed_mib:.1} MiB \
             (median of 3: {:.3} s, {:.3} s of CPU), whole object {whole_mib:.1} MiB",
            if whole { "_stored_whole" } else { "" },
            times[1].0,
            times[1].1
        );
    }
}

/// This process's CPU time, all its threads together.
fn cpu_time() -> Duration {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .expect("the process CPU clock");
    Duration::new(now.tv_sec() as u64, now.tv_nsec() as u32)
}

/// unilab's own CPU time for the GPUs of one sample, against the bundled fake nvidia-smi: the
/// loop-mode stream (what the sampler uses) against a process spawned a sample for each of the
/// two queries (how the sampler read the GPUs before). One-shot figures, printed.
fn gpu_sampling(_: &mut Criterion) {
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nvidia-smi");
    let samples = 100u32;
    let interval = Duration::from_millis(20);

    let before = cpu_time();
    for _ in 0..samples {
        for query in [
            "--query-gpu=index,uuid,memory.used,memory.total,utilization.gpu",
            "--query-compute-apps=pid,used_gpu_memory,gpu_uuid",
        ] {
            let out = Command::new(&fake)
                .args([query, "--format=csv,noheader,nounits"])
                .output()
                .expect("the fake nvidia-smi");
            black_box(out.stdout.len());
        }
    }
    let spawned = (cpu_time() - before) / samples;

    // The sampling loop itself (a sleep an interval), whose CPU is not the GPUs'.
    let before = cpu_time();
    for _ in 0..samples {
        std::thread::sleep(interval);
    }
    let idle = (cpu_time() - before) / samples;

    let stream = unilab::testing::sampler::GpuStream::start(
        unilab::testing::sampler::nvidia_smi_at(&fake),
        interval,
        None,
    );
    // Its first readings in, so that only the steady state is measured.
    while stream.reading(&[]).0.is_none() {
        std::thread::sleep(interval);
    }
    let before = cpu_time();
    for _ in 0..samples {
        std::thread::sleep(interval);
        black_box(stream.reading(&[]));
    }
    let streamed = (cpu_time() - before) / samples;
    drop(stream);
    let streamed = streamed.saturating_sub(idle);
    println!(
        "gpu_sampling: unilab CPU a sample: streamed {:.1} us, spawned {:.1} us ({:.1}x less; \
         the loop's own sleep, {:.1} us, taken out)",
        streamed.as_secs_f64() * 1e6,
        spawned.as_secs_f64() * 1e6,
        spawned.as_secs_f64() / streamed.as_secs_f64().max(1e-9),
        idle.as_secs_f64() * 1e6
    );
}

/// The HTML report of the same 100,000-sample soak: decimated charts keep it small and fast.
fn report(c: &mut Criterion) {
    let path = soak_log(10, false);
    let reader = LogReader::open(&path, &bench_scope())
        .expect("open")
        .expect("exists");
    let render = || {
        let snapshot = reader.snapshot().expect("snapshot");
        let mut charts = unilab::testing::report::Charts::default();
        let mut gathered =
            artifact::gather(&snapshot, "bench", |piece| charts.take(piece)).expect("the soak");
        let digest = gathered.digest().expect("digest");
        unilab::testing::report::render_gathered(
            gathered,
            charts,
            &unilab::testing::report::Extras {
                timeline: &[],
                digest: &digest,
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

/// The trend of a week-long soak's memory: 100,000 samples fed to the bucketed estimator, then
/// its slope after the warm-up, as the artifact's summary takes it (target: under 50 ms, memory
/// bounded by its 256 buckets).
fn trend(c: &mut Criterion) {
    c.bench_function("trend/100000 samples", |b| {
        b.iter(|| {
            let mut trend = unilab::testing::Trend::default();
            for i in 0..100_000u64 {
                let noise = ((i * 7919) % 97) as f64 * 4096.0;
                trend.add(i * 6_000, 2e9 + i as f64 * 1_000.0 + noise);
            }
            black_box(trend.slope_since(60_000_000))
        })
    });
}

/// What `--max-memory-growth` costs at each sample of a long soak, its trend full (256 buckets,
/// 32,640 pairs): the slope alone, as growth was judged before, and the slope with its Sen
/// bound, as it is judged now.
fn judged(c: &mut Criterion) {
    let mut trend = unilab::testing::Trend::default();
    for i in 0..100_000u64 {
        let noise = ((i * 7919) % 97) as f64 * 4096.0;
        trend.add(i * 6_000, 2e9 + i as f64 * 1_000.0 + noise);
    }
    let mut group = c.benchmark_group("trend/judged at one sample");
    group.bench_function("slope", |b| {
        b.iter(|| black_box(trend.slope_since(black_box(60_000_000))))
    });
    group.bench_function("slope_and_bound", |b| {
        b.iter(|| {
            black_box(trend.bounded_since(
                black_box(60_000_000),
                unilab::testing::Confidence::NINETY_FIVE,
            ))
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    sampler,
    trend,
    judged,
    gpu_sampling,
    export,
    export_memory,
    report
);
criterion_main!(benches);
