//! Event log benchmarks:
//! - `append/durable_single`: one event, one durable commit (what a soak sample costs);
//! - `append/batch_100`: 100 events in one commit;
//! - `append/sample_100p`: one sample of a 100-process tree (with each process's PSS, stored
//!   packed against the one before), one durable commit;
//! - `append/samples_100p_batch_100`: 100 such samples in one commit, where what an append
//!   spends on each sample, not on the commit, shows;
//! - `append/job_samples_100p_batch_100`: the same of a rank of a job whose trainer beats, with
//!   every view (what the log keeps of the rank folded at each sample), and `…_unkept` without
//!   that view: the cost of keeping it;
//! - `open_read_last`: open a 1,000,000-event log read-only and read its last event;
//! - `replay_1m`: decode and chain-verify every event of that log;
//! - `verify_1m`: `log verify` of it (the chain, the subject index, every projection), and its
//!   peak heap (printed).
//!
//! Run with `cargo bench --bench event_log`. The 1,000,000-event log is built once under
//! `target/bench-data/` and reused.

mod common;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use unilab::PROJECTIONS;
use unilab::ProcessIdentity;
use unilab::{EventLog, LogReader};
use unilab::{Measures, ProgressSignature, Sample};
use unilab::{Scope, StoredEvent, Subject};

const REPLAY_EVENTS: u64 = 1_000_000;

fn scope() -> Scope {
    Scope {
        uid: nix::unistd::getuid().as_raw(),
        host: "bench-host".into(),
    }
}

/// The `i`-th event of the benchmark log: mostly daemon heartbeats, every 100th a soak sample
/// of a 10-process tree, so the mix has small and larger records.
fn event(i: u64) -> (Subject, StoredEvent) {
    if i % 100 == 99 {
        let sample = Sample {
            index: i,
            elapsed_ms: i * 1000,
            after_exit: false,
            processes: common::training_tree(i, 10),
            reaped_cpu_ticks: 0,
            gpus: Some(Vec::new()),
            progress: ProgressSignature {
                files: i / 100,
                bytes: i * 10,
                newest_mtime_ns: Some(1_764_676_800_000_000_000 + i as i64),
            },
            sampler_cost_us: 400,
            errors: Vec::new(),
        };
        return (
            Subject::Soak("bench-soak".into()),
            StoredEvent::SoakSampledV5(Box::new(sample)),
        );
    }
    (
        Subject::Daemon(format!("gpu-{}", i % 8)),
        StoredEvent::DaemonVerifiedLive {
            process: ProcessIdentity {
                pid: (i % 60_000) as u32,
                start_ticks: i,
            },
        },
    )
}

/// The `i`-th sample of a soak of a 100-process tree, as a soak records it now.
fn sample_100p(i: u64) -> (Subject, StoredEvent) {
    let sample = Sample {
        index: i,
        elapsed_ms: i * 1000,
        after_exit: false,
        processes: common::training_tree(i, 100),
        reaped_cpu_ticks: 0,
        gpus: Some(Vec::new()),
        progress: ProgressSignature {
            files: i / 100,
            bytes: i * 10,
            newest_mtime_ns: Some(1_764_676_800_000_000_000 + i as i64),
        },
        sampler_cost_us: 400,
        errors: Vec::new(),
    };
    let measures = Measures {
        pss_bytes: (0..100).map(|p| Some((i + p) << 20)).collect(),
        gpus: Vec::new(),
        heartbeat: None,
    };
    (
        Subject::Soak("bench-soak-100p".into()),
        StoredEvent::SoakSampled {
            sample: Box::new(sample),
            measures: Box::new(measures),
            noted: None,
        },
    )
}

/// The start of a rank of a job whose samples are [`job_sample_100p`]'s.
fn job_started() -> (Subject, StoredEvent) {
    let start = unilab::SoakStart {
        soak_id: "bench-job-soak".into(),
        command: vec!["python3".into(), "train.py".into()],
        cwd: "/work".into(),
        progress_dir: "/work/progress".into(),
        output: "/work/soak.json".into(),
        parameters: unilab::SoakParameters {
            sample_interval_ms: 1000,
            startup_timeout_ms: 600_000,
            stale_progress_ms: 120_000,
            shutdown_grace_ms: 5000,
            min_duration_ms: 0,
        },
        require_progress: true,
        metadata: Default::default(),
        environment: Default::default(),
        supervisor: ProcessIdentity {
            pid: 1,
            start_ticks: 1,
        },
        runtime_json: "{}".into(),
        ticks_per_second: 100,
    };
    let started = unilab::Event::SoakStarted {
        start: Box::new(start),
        supervision: None,
        limits: None,
        job: Some(unilab::JobMember {
            job: "J".into(),
            rank: Some(0),
            on_job_alarm: unilab::OnJobAlarm::Capture,
            run: Some("1".into()),
        }),
        command_lossy: false,
    };
    (Subject::Soak("bench-job-soak".into()), started.into())
}

/// [`sample_100p`] of the rank [`job_started`] starts, its trainer's beats with it.
fn job_sample_100p(i: u64) -> (Subject, StoredEvent) {
    let (_, event) = sample_100p(i);
    let StoredEvent::SoakSampled {
        sample,
        mut measures,
        noted,
    } = event
    else {
        unreachable!("sample_100p is a whole sample")
    };
    measures.heartbeat = Some(Box::new(unilab::SampleBeats {
        beats: 2,
        step: Some(i * 2),
        phase: Some("train".into()),
        step_seconds_min: Some(0.4 + (i % 5) as f32 * 0.01),
        step_seconds_median: Some(0.5 + (i % 7) as f32 * 0.01),
        step_seconds_max: Some(0.6),
        numbers: Default::default(),
    }));
    (
        Subject::Soak("bench-job-soak".into()),
        StoredEvent::SoakSampled {
            sample,
            measures,
            noted,
        },
    )
}

/// Every view, or every view but what the log keeps of each rank.
fn views(kept: bool) -> &'static [&'static dyn unilab::View] {
    use redb::TableHandle;
    if kept {
        return PROJECTIONS;
    }
    let unkept: Vec<&'static dyn unilab::View> = PROJECTIONS
        .iter()
        .copied()
        .filter(|v| !v.table().name().starts_with("soak_ranks"))
        .collect();
    Box::leak(unkept.into_boxed_slice())
}

/// A log of [`REPLAY_EVENTS`] events, built once and reused across runs.
fn big_log() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    let path = dir.join("replay-1m.redb");
    let complete = dir.join("replay-1m.complete");
    if complete.exists() {
        return path;
    }
    std::fs::create_dir_all(&dir).expect("bench data directory");
    let _ = std::fs::remove_file(&path);
    let log = EventLog::open(&path, scope(), PROJECTIONS).expect("open the bench log");
    let batch = 20_000;
    for start in (0..REPLAY_EVENTS).step_by(batch) {
        log.append_all((start..start + batch as u64).map(event))
            .expect("append a batch");
    }
    drop(log);
    std::fs::write(&complete, b"").expect("mark the bench log complete");
    path
}

fn append(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = EventLog::open(&dir.path().join("append.redb"), scope(), PROJECTIONS).expect("open");
    let mut group = c.benchmark_group("append");
    group.measurement_time(Duration::from_secs(10));
    let mut i = 0;
    group.throughput(Throughput::Elements(1));
    group.bench_function("durable_single", |b| {
        b.iter(|| {
            i += 1;
            let (subject, event) = event(i);
            black_box(log.append(subject, event).expect("append"))
        })
    });
    group.throughput(Throughput::Elements(100));
    group.bench_function("batch_100", |b| {
        b.iter_batched(
            || {
                i += 100;
                (i..i + 100).map(event).collect::<Vec<_>>()
            },
            |events| black_box(log.append_all(events).expect("append")),
            BatchSize::SmallInput,
        )
    });
    let mut index = 0;
    group.throughput(Throughput::Elements(1));
    group.bench_function("sample_100p", |b| {
        b.iter(|| {
            index += 1;
            let (subject, event) = sample_100p(index);
            black_box(log.append(subject, event).expect("append"))
        })
    });
    group.throughput(Throughput::Elements(100));
    group.bench_function("samples_100p_batch_100", |b| {
        b.iter_batched(
            || {
                index += 100;
                (index..index + 100).map(sample_100p).collect::<Vec<_>>()
            },
            |events| black_box(log.append_all(events).expect("append")),
            BatchSize::SmallInput,
        )
    });
    for kept in [true, false] {
        let log = EventLog::open(
            &dir.path().join(format!("job-{kept}.redb")),
            scope(),
            views(kept),
        )
        .expect("open");
        let (subject, start) = job_started();
        log.append(subject, start).expect("start");
        let mut index = 0;
        let name = if kept {
            "job_samples_100p_batch_100"
        } else {
            "job_samples_100p_batch_100_unkept"
        };
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    index += 100;
                    (index..index + 100)
                        .map(job_sample_100p)
                        .collect::<Vec<_>>()
                },
                |events| black_box(log.append_all(events).expect("append")),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

fn read(c: &mut Criterion) {
    let path = big_log();
    c.bench_function("open_read_last", |b| {
        b.iter(|| {
            let reader = LogReader::open(&path, &scope())
                .expect("open")
                .expect("exists");
            let last = reader.snapshot().expect("snapshot").last().expect("read");
            black_box(last.expect("a last event").envelope.seq)
        })
    });
    let reader = LogReader::open(&path, &scope())
        .expect("open")
        .expect("exists");
    let mut group = c.benchmark_group("replay");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::Elements(REPLAY_EVENTS));
    group.bench_function("replay_1m", |b| {
        b.iter(|| {
            let snapshot = reader.snapshot().expect("snapshot");
            let mut sum = 0u64;
            let walker = snapshot
                .replay(|envelope| sum = sum.wrapping_add(envelope.seq))
                .expect("replay");
            assert_eq!(walker.len(), REPLAY_EVENTS);
            black_box(sum)
        })
    });
    let verify = || {
        let report = reader
            .snapshot()
            .expect("snapshot")
            .verify(PROJECTIONS)
            .expect("verify");
        assert_eq!(report.events, REPLAY_EVENTS);
        report.events
    };
    println!(
        "verify_1m: peak heap {:.0} KiB",
        common::peak_heap_mib(verify) * 1024.0
    );
    group.bench_function("verify_1m", |b| b.iter(|| black_box(verify())));
    group.finish();
}

criterion_group!(benches, append, read);
criterion_main!(benches);
