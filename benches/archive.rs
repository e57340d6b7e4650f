//! `log archive` of a soak of 100,000 samples of a 10- and of a 100-process tree, one shot
//! each (archiving consumes its log, so each run works on a fresh copy): the time to move the
//! records into the archive file and to compact the log, and the live log's size on disk after
//! against before (issue 26's targets: under 2 s; under 5 %).
//!
//! Run with `cargo bench --bench archive`. The logs are built once under
//! `target/bench-data/` (the 100-process one is about 1 GB).

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use unilab::testing::archive_soaks;
use unilab::*;

const SAMPLES: u64 = 100_000;

fn bench_scope() -> Scope {
    Scope {
        uid: nix::unistd::getuid().as_raw(),
        host: "bench-host".into(),
    }
}

/// A log holding one finished soak, `bench`, of [`SAMPLES`] samples of a `processes`-process
/// tree (each with its proportional set size, stored packed as unilab stores them), built once.
fn soak_log(processes: u32) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    let path = dir.join(format!("archive-100k-{processes}p-v2.redb"));
    let complete = dir.join(format!("archive-100k-{processes}p-v2.complete"));
    if complete.exists() {
        return path;
    }
    std::fs::create_dir_all(&dir).expect("bench data directory");
    let _ = std::fs::remove_file(&path);
    let log = EventLog::open(&path, bench_scope(), PROJECTIONS).expect("open");
    let subject = || Subject::Soak("bench".into());
    log.append(subject(), started()).expect("start");
    for start in (0..SAMPLES).step_by(10_000) {
        log.append_all((start..start + 10_000).map(|i| {
            let sample = Sample {
                index: i,
                elapsed_ms: i * 1000,
                after_exit: false,
                processes: common::training_tree(i, processes),
                reaped_cpu_ticks: i,
                gpus: None,
                progress: ProgressSignature {
                    files: i / 60,
                    bytes: i * 100,
                    newest_mtime_ns: Some(1_764_676_800_000_000_000 + i as i64),
                },
                sampler_cost_us: 900,
                errors: Vec::new(),
            };
            let measures = Measures {
                pss_bytes: sample
                    .processes
                    .iter()
                    .map(|p| Some(p.rss_bytes / 2))
                    .collect(),
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
    log.append(subject(), finished()).expect("finish");
    drop(log);
    std::fs::write(&complete, b"").expect("mark complete");
    path
}

fn started() -> StoredEvent {
    StoredEvent::SoakStartedV4(Box::new(soak_v2::SoakStart {
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
        supervisor: ProcessIdentity {
            pid: 1,
            start_ticks: 1,
        },
        runtime_json: "{}".into(),
        ticks_per_second: 100,
    }))
}

fn finished() -> StoredEvent {
    StoredEvent::SoakFinishedV4(Box::new(soak_v2::SoakEnd {
        outcome: Outcome {
            status: OutcomeStatus::Passed,
            failure_kind: None,
            reason: "ok".into(),
        },
        exit: None,
        run_ms: SAMPLES * 1000,
        teardown_ms: 50,
        first_progress_ms: Some(1000),
        last_progress_ms: Some(SAMPLES * 1000),
        leaked_processes: Vec::new(),
        stdout_tail: Vec::new(),
        stderr_tail: Vec::new(),
    }))
}

/// What a file takes on disk.
fn disk_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).expect("metadata").blocks() * 512
}

fn main() {
    // `cargo bench` passes `--bench`; a filter that names neither tree skips both.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    for processes in [10, 100] {
        let name = format!("archive_100k/{processes}p");
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let built = soak_log(processes);
        let work = tempfile::tempdir().expect("tempdir");
        let path = work.path().join("events.redb");
        std::fs::copy(&built, &path).expect("copy the log");
        let before = disk_bytes(&path);
        // A log freshly built here costs redb a one-time pass on its first open (about 0.5 s a
        // GiB), which a log in use (opened by every command) has long paid: timed apart.
        let first = Instant::now();
        drop(EventLog::open(&path, bench_scope(), PROJECTIONS).expect("open"));
        let first = first.elapsed();
        let began = Instant::now();
        let log = EventLog::open_alone(&path, bench_scope(), PROJECTIONS).expect("open alone");
        let mut done = Vec::new();
        let heap = common::peak_heap_mib(|| {
            done = archive_soaks(&log, &["bench".to_owned()]).expect("archive");
        });
        let archived = began.elapsed();
        log.compact().expect("compact");
        drop(log);
        let total = began.elapsed();
        let after = disk_bytes(&path);
        let file = done.first().expect("archived");
        println!(
            "{name}: archive {:.2} s + compaction {:.2} s = {:.2} s (first open after the build {:.2} s, apart; peak heap {heap:.1} MiB); log on disk {:.1} MiB -> {:.2} MiB ({:.2} % of before); archive file {:.1} MiB for {:.1} MiB of records",
            archived.as_secs_f64(),
            (total - archived).as_secs_f64(),
            total.as_secs_f64(),
            first.as_secs_f64(),
            before as f64 / 1048576.0,
            after as f64 / 1048576.0,
            100.0 * after as f64 / before as f64,
            file.file_bytes as f64 / 1048576.0,
            file.bytes as f64 / 1048576.0,
        );
    }
}
