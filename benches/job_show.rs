//! `unilab job show` of a job of 64 ranks, each a soak of `SAMPLES` samples (1,000 and
//! 10,000): its wall time and peak memory (`/usr/bin/time`), as this unilab reads it from what
//! the log keeps of each rank, and as it reads a log that keeps nothing (another host's, of
//! schema 13, never migrated: every sample folded); the one-off migration of such a log as this
//! host's own; and, with `UNILAB_BENCH_BEFORE=<a unilab binary>` (`benches/job_show.sh` builds
//! main's), that unilab on the schema-13 log.
//!
//! Each rank's samples are what a training rank's are: a 10-process tree, one GPU it runs on
//! with its health, the tree's PSS, the beats of a `train` phase and the progress decided; the
//! 64 ranks' samples interleaved as their supervisors append them. The logs are built once
//! under `target/bench-data/` and reused; the schema-13 log is the schema-14 one without the
//! view's table, its version set back (schema 14 changed no event form).
//!
//! Run with `cargo bench --bench job_show` (`RUNS=N`, default 5, runs of each fast case).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use unilab::{
    Event, EventLog, ExitInfo, GpuHealth, GpuProcessSample, GpuSample, JobMember, Measures,
    OnJobAlarm, Outcome, OutcomeStatus, PROJECTIONS, ProcessIdentity, ProgressNoted, ProgressSeen,
    ProgressSignature, Sample, SampleBeats, Scope, SoakEnd, SoakParameters, SoakStart, Subject,
};

const RANKS: u32 = 64;

/// This host's name: the benchmark's logs are this host's own.
fn host() -> String {
    nix::unistd::gethostname()
        .expect("hostname")
        .to_string_lossy()
        .into_owned()
}

fn scope() -> Scope {
    Scope {
        uid: nix::unistd::getuid().as_raw(),
        host: host(),
    }
}

fn soak_id(rank: u32) -> String {
    format!("20261201T000000-r{rank:03}")
}

/// When rank 0's soak started, Unix microseconds.
const T0_US: i64 = 1_796_479_200_000_000;

fn started(rank: u32) -> Event {
    Event::SoakStarted {
        start: Box::new(SoakStart {
            soak_id: soak_id(rank),
            command: vec!["python3".into(), "train.py".into()],
            cwd: "/work".into(),
            progress_dir: "/work/progress".into(),
            output: format!("/work/soak-{rank}.json"),
            parameters: SoakParameters {
                sample_interval_ms: 10_000,
                startup_timeout_ms: 600_000,
                stale_progress_ms: 600_000,
                shutdown_grace_ms: 5000,
                min_duration_ms: 0,
            },
            require_progress: true,
            metadata: BTreeMap::from([
                ("job".to_owned(), "J".to_owned()),
                ("rank".to_owned(), rank.to_string()),
            ]),
            environment: BTreeMap::new(),
            supervisor: ProcessIdentity {
                pid: 1000 + rank,
                start_ticks: 1,
            },
            runtime_json: "{}".into(),
            ticks_per_second: 100,
        }),
        supervision: None,
        limits: None,
        job: Some(JobMember {
            job: "J".into(),
            rank: Some(rank),
            on_job_alarm: OnJobAlarm::Capture,
            run: Some("1".into()),
        }),
        command_lossy: false,
    }
}

/// Sample `i` of rank `rank`, taken every 10 s.
fn sampled(rank: u32, i: u64) -> Event {
    let mut processes = common::training_tree(i, 10);
    for p in &mut processes {
        p.pid += rank * 100;
    }
    let elapsed_ms = i * 10_000;
    let at_us = T0_US + elapsed_ms as i64 * 1000;
    let sample = Sample {
        index: i,
        elapsed_ms,
        after_exit: false,
        reaped_cpu_ticks: 0,
        gpus: Some(vec![GpuSample {
            index: rank % 8,
            uuid: format!("GPU-{:08x}", rank % 8),
            memory_used_mib: Some(40_000),
            memory_total_mib: Some(81_920),
            utilization_percent: Some(90 + (i % 10) as u32),
            processes: vec![GpuProcessSample {
                pid: processes[0].pid,
                used_memory_mib: Some(40_000),
            }],
        }]),
        progress: ProgressSignature {
            files: i / 10,
            bytes: i * 4096,
            newest_mtime_ns: Some(at_us * 1000),
        },
        sampler_cost_us: 900,
        errors: Vec::new(),
        processes,
    };
    let measures = Measures {
        pss_bytes: (0..10).map(|p| Some((1 << 29) + ((i + p) << 12))).collect(),
        gpus: vec![GpuHealth {
            temperature_c: Some(70),
            power_mw: Some(400_000),
            sm_clock_mhz: Some(1800),
            throttle_mask: Some(if i.is_multiple_of(7) { 0x4 } else { 0 }),
            ecc_uncorrected_volatile: Some(0),
            retired_pages_pending: Some(false),
            other_processes: Vec::new(),
        }],
        heartbeat: Some(Box::new(SampleBeats {
            beats: 20,
            step: Some(i * 20),
            phase: Some("train".into()),
            step_seconds_min: Some(0.45),
            step_seconds_median: Some(0.5),
            step_seconds_max: Some(0.6),
            numbers: BTreeMap::from([("loss".to_owned(), 2.0 / (1.0 + i as f64))]),
        })),
    };
    Event::SoakSampled {
        sample: Box::new(sample),
        measures: Some(Box::new(measures)),
        progress: Some(ProgressNoted {
            progress_seen: Some(ProgressSeen::Beat),
            last_progress_at_us: Some(at_us),
            last_progress_ms: Some(elapsed_ms),
        }),
    }
}

fn finished(samples: u64) -> Event {
    Event::SoakFinished {
        end: Box::new(SoakEnd {
            outcome: Outcome {
                status: OutcomeStatus::Passed,
                failure_kind: None,
                reason: "the command exited 0".into(),
            },
            exit: Some(ExitInfo {
                code: Some(0),
                signal: None,
            }),
            run_ms: samples * 10_000,
            teardown_ms: 500,
            first_progress_ms: Some(10_000),
            last_progress_ms: Some(samples * 10_000),
            leaked_processes: Vec::new(),
            stdout_tail: b"done\n".to_vec(),
            stderr_tail: Vec::new(),
        }),
        findings: None,
        limit: None,
    }
}

/// The directory of this benchmark's logs.
fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data")
}

/// A schema-14 log of the job, `samples` samples a rank, built once.
fn job_log(samples: u64) -> PathBuf {
    let path = data_dir().join(format!("job-{RANKS}x{samples}-{}.redb", host()));
    let complete = path.with_extension("complete");
    if complete.exists() {
        return path;
    }
    std::fs::create_dir_all(data_dir()).expect("bench data directory");
    let _ = std::fs::remove_file(&path);
    append_job(&path, samples, PROJECTIONS);
    std::fs::write(&complete, b"").expect("mark the bench log complete");
    path
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

/// Appends the job of `samples` samples a rank to a new log at `path`, keeping `views`: the
/// seconds its samples took to append.
fn append_job(path: &Path, samples: u64, views: &'static [&'static dyn unilab::View]) -> f64 {
    let log = EventLog::open(path, scope(), views).expect("open the bench log");
    let subject = |rank: u32| Subject::Soak(soak_id(rank));
    log.append_all((0..RANKS).map(|rank| (subject(rank), started(rank))))
        .expect("starts");
    let began = std::time::Instant::now();
    let batch = 50;
    for first in (0..samples).step_by(batch) {
        let last = (first + batch as u64).min(samples);
        log.append_all(
            (first..last)
                .flat_map(|i| (0..RANKS).map(move |rank| (subject(rank), sampled(rank, i)))),
        )
        .expect("samples");
    }
    let spent = began.elapsed().as_secs_f64();
    log.append_all((0..RANKS).map(|rank| (subject(rank), finished(samples))))
        .expect("verdicts");
    spent
}

/// What keeping each rank's summary costs an append: the job's samples (64 ranks × 300, 50 a
/// rank a commit) appended with every view and without that one, alternately, three times;
/// the median time a sample of each, and their ratio.
fn append_cost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let samples = 300;
    let mut spent = [Vec::new(), Vec::new()];
    for round in 0..3 {
        for (i, kept) in [true, false].into_iter().enumerate() {
            let path = dir.path().join(format!("append-{round}-{kept}.redb"));
            spent[i].push(append_job(&path, samples, views(kept)));
        }
    }
    let per_sample = |mut s: Vec<f64>| {
        s.sort_by(f64::total_cmp);
        s[1] / (samples * u64::from(RANKS)) as f64 * 1e6
    };
    let [kept, unkept] = spent;
    let (kept, unkept) = (per_sample(kept), per_sample(unkept));
    println!(
        "append of a rank's sample (10-process tree, GPU, beats; 3,200 a commit): {kept:.1} µs with its summary kept, {unkept:.1} µs without: {:.3}×",
        kept / unkept
    );
}

/// `log` as a schema-13 log: without the view's table, its version set back.
fn as_schema_13(log: &Path, to: &Path) {
    std::fs::copy(log, to).expect("copy the log");
    let db = redb::Database::open(to).expect("open the copy");
    let txn = db.begin_write().expect("write");
    let kept: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("soak_ranks_v1");
    txn.delete_table(kept).expect("drop the view's table");
    {
        let mut meta = txn.open_table(unilab::testing::tables::META).expect("meta");
        let version = unilab::testing::codec::encode(&13u32).expect("encode");
        meta.insert(
            unilab::testing::tables::SCHEMA_VERSION_KEY,
            version.as_slice(),
        )
        .expect("set the version");
    }
    txn.commit().expect("commit");
}

/// A state root `name` whose log on host `host` is `log` (copied).
fn root_with(dir: &Path, name: &str, host: &str, log: &Path) -> PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let root = dir.join(name);
    let at = root
        .join(host)
        .join(nix::unistd::getuid().as_raw().to_string());
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&at)
        .expect("root");
    std::fs::copy(log, at.join("events.redb")).expect("copy the log");
    root
}

/// `bin --root ROOT job show J` under `/usr/bin/time`: wall seconds (from its spawn to its
/// exit, `/usr/bin/time`'s own exec included) and peak RSS (MiB, as `/usr/bin/time` says).
fn timed(bin: &Path, root: &Path) -> (f64, f64) {
    let began = std::time::Instant::now();
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .arg(bin)
        .arg("--root")
        .arg(root)
        .args(["--json", "job", "show", "J"])
        .env_clear()
        .env("HOME", root)
        .env("LANG", "C.UTF-8")
        .output()
        .expect("run /usr/bin/time");
    let wall = began.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", bin.display());
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("job show's JSON");
    assert_eq!(
        view["ranks"].as_array().map(Vec::len),
        Some(RANKS as usize),
        "{stderr}"
    );
    let last = stderr.lines().last().unwrap_or_default();
    let kib = last.trim().parse::<f64>().unwrap_or(f64::NAN);
    (wall, kib / 1024.0)
}

/// The median wall time and the largest peak RSS of `runs` runs.
fn measured(bin: &Path, root: &Path, runs: usize) -> (f64, f64) {
    let mut walls = Vec::new();
    let mut peak: f64 = 0.0;
    for _ in 0..runs {
        let (wall, rss) = timed(bin, root);
        walls.push(wall);
        peak = peak.max(rss);
    }
    walls.sort_by(f64::total_cmp);
    (walls[walls.len() / 2], peak)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let after = PathBuf::from(env!("CARGO_BIN_EXE_unilab"));
    let before = std::env::var_os("UNILAB_BENCH_BEFORE").map(PathBuf::from);
    append_cost();
    println!(
        "job show of {RANKS} ranks (median wall of {runs} runs, or 1 where marked; peak RSS):"
    );
    for samples in [1_000, 10_000] {
        let log = job_log(samples);
        let dir = tempfile::tempdir().expect("tempdir");
        let v13 = dir.path().join("v13.redb");
        as_schema_13(&log, &v13);
        let here = host();
        let kept = root_with(dir.path(), "kept", &here, &log);
        let (wall, rss) = measured(&after, &kept, runs);
        println!(
            "  {samples:>6} samples a rank, this unilab, kept summaries:        {wall:7.3} s  {rss:7.1} MiB"
        );
        // Another host's log of schema 13: read as it is, every sample folded.
        let other = root_with(dir.path(), "other", "other-host", &v13);
        let (wall, rss) = measured(&after, &other, 1);
        println!(
            "  {samples:>6} samples a rank, this unilab, an unmigrated log (1): {wall:7.3} s  {rss:7.1} MiB"
        );
        // This host's own log of schema 13: migrated (the table built) by the first read.
        let own = root_with(dir.path(), "own", &here, &v13);
        let (wall, rss) = timed(&after, &own);
        println!(
            "  {samples:>6} samples a rank, this unilab, migrating its log (1):  {wall:7.3} s  {rss:7.1} MiB"
        );
        if let Some(before) = &before {
            let base = root_with(dir.path(), "base", &here, &v13);
            let (wall, rss) = measured(before, &base, 1);
            println!(
                "  {samples:>6} samples a rank, UNILAB_BENCH_BEFORE (1):            {wall:7.3} s  {rss:7.1} MiB"
            );
        }
    }
}
