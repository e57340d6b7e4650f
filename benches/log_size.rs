//! What a sample costs the log on disk, per process, with samples stored whole (as schema 7
//! did) and packed (schema 8), on a 100-process tree: the benchmark tree of the other benches
//! (every process's counters move by a little each sample) and a busy one (ranks, dataloader
//! workers and sleeping compile workers, moving as a training tree's do). Counted in disk
//! blocks used (`st_blocks`), as a quota counts them; the file's length beside it. And what
//! storing a sample costs the supervisor (its append, packing included), per sample.
//!
//! Run with `cargo bench --bench log_size` (about a minute; one shot, printed).

mod common;

use std::time::{Duration, Instant};

use unilab::*;

const PROCESSES: u32 = 100;
const SAMPLES: u64 = 20_000;
/// Samples a commit, as a soak sampled every second groups them.
const GROUP: u64 = 10;

fn sample(i: u64, processes: Vec<ProcessSample>, pss: Vec<Option<u64>>) -> StoredEvent {
    StoredEvent::SoakSampled {
        sample: Box::new(Sample {
            index: i,
            elapsed_ms: i * 1000,
            after_exit: false,
            processes,
            reaped_cpu_ticks: i,
            gpus: Some(vec![GpuSample {
                index: 0,
                uuid: "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f".into(),
                memory_used_mib: Some(40_000 + i % 700),
                memory_total_mib: Some(143_771),
                utilization_percent: Some(90 + (i % 10) as u32),
                processes: vec![GpuProcessSample {
                    pid: 1000,
                    used_memory_mib: Some(39_000 + i % 700),
                }],
            }]),
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
            heartbeat: None,
        }),
        // The directory grows a file a minute: the progress the supervisor records with each.
        noted: Some(ProgressNoted {
            progress_seen: i.is_multiple_of(60).then_some(ProgressSeen::Files),
            last_progress_at_us: Some(1_764_676_800_000_000 + (i / 60 * 60) as i64 * 1_000_000),
            last_progress_ms: Some(i / 60 * 60_000),
        }),
    }
}

struct Cost {
    /// The records' own bytes (encoded, with their hashes and framing).
    stored_per_process: f64,
    blocks_per_process: f64,
    length_per_process: f64,
    append: Duration,
}

/// Records [`SAMPLES`] samples of `tree` in a fresh log, stored whole or packed.
fn record(tree: &dyn Fn(u64) -> StoredEvent, whole: bool) -> Cost {
    use std::os::unix::fs::MetadataExt;
    unilab::testing::store_samples_whole(whole);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("events.redb");
    let scope = Scope {
        uid: nix::unistd::getuid().as_raw(),
        host: "bench-host".into(),
    };
    let log = EventLog::open(&path, scope, PROJECTIONS).expect("open");
    let subject = || Subject::Soak("bench".into());
    let mut append = Duration::ZERO;
    for start in (0..SAMPLES).step_by(GROUP as usize) {
        let events: Vec<_> = (start..start + GROUP)
            .map(|i| (subject(), tree(i)))
            .collect();
        let began = Instant::now();
        log.append_all(events).expect("append");
        append += began.elapsed();
    }
    let mut stored = 0;
    let snapshot = log.snapshot().expect("snapshot");
    snapshot
        .scan_sized(|_, bytes| {
            stored += bytes;
            Ok(())
        })
        .expect("scan");
    drop(snapshot);
    drop(log);
    let meta = std::fs::metadata(&path).expect("metadata");
    let per = (SAMPLES * u64::from(PROCESSES)) as f64;
    Cost {
        stored_per_process: stored as f64 / per,
        blocks_per_process: (meta.blocks() * 512) as f64 / per,
        length_per_process: meta.len() as f64 / per,
        append: append / SAMPLES as u32,
    }
}

fn main() {
    let benchmark = |i| {
        let processes = common::training_tree(i, PROCESSES);
        let pss = processes.iter().map(|p| Some(p.rss_bytes / 2)).collect();
        sample(i, processes, pss)
    };
    let busy = |i| {
        let (processes, pss) = busy_training_tree(i, PROCESSES);
        sample(i, processes, pss)
    };
    let trees: [(&str, &dyn Fn(u64) -> StoredEvent); 2] =
        [("benchmark tree", &benchmark), ("busy tree", &busy)];
    for (name, tree) in trees {
        let whole = record(tree, true);
        let packed = record(tree, false);
        println!(
            "log_size/{PROCESSES}p {name}: bytes a process a sample, whole -> packed: disk blocks \
             {:.1} -> {:.1} ({:.1}x less), records {:.1} -> {:.1} ({:.1}x less), file length \
             {:.1} -> {:.1}; append {:.0} -> {:.0} us a sample",
            whole.blocks_per_process,
            packed.blocks_per_process,
            whole.blocks_per_process / packed.blocks_per_process,
            whole.stored_per_process,
            packed.stored_per_process,
            whole.stored_per_process / packed.stored_per_process,
            whole.length_per_process,
            packed.length_per_process,
            whole.append.as_secs_f64() * 1e6,
            packed.append.as_secs_f64() * 1e6,
        );
    }
}

/// The processes of the `i`-th sample of an `n`-process training tree whose processes are as
/// busy as a real one's: 8 ranks always running (CPU, RSS and I/O moving every sample, a thread
/// and a file descriptor now and then), dataloader workers for three quarters of the rest (CPU
/// and reads moving, RSS by a few pages), and compile workers asleep (nothing moves). Each
/// process's proportional set size beside it. Deterministic: a hash of `i` and the process
/// stands in for chance.
pub fn busy_training_tree(i: u64, n: u32) -> (Vec<ProcessSample>, Vec<Option<u64>>) {
    let chance = |p: u32, salt: u64| {
        let mut x = (i << 20 | u64::from(p) << 4 | salt).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^= x >> 31;
        x.wrapping_mul(0xBF58_476D_1CE4_E5B9) >> 40
    };
    let workers = 8 + (n.saturating_sub(8)) * 3 / 4;
    (0..n)
        .map(|p| {
            let (state, cpu, rss, read, write, threads, fds) = match p {
                0..8 => (
                    if chance(p, 1) % 4 == 0 { 'S' } else { 'R' },
                    i * 90 + chance(p, 2) % 10,
                    (12 << 30) + (chance(p, 3) % 4096) * 4096,
                    i * (3 << 20) + chance(p, 4) % (1 << 20),
                    i * (64 << 10),
                    40 + (chance(p, 5) % 3) as u32,
                    200 + (chance(p, 6) % 4) as u32,
                ),
                p if p < workers => (
                    'S',
                    i * 20 + chance(p, 2) % 5,
                    (2 << 30) + (chance(p, 3) % 64) * 4096,
                    i * (8 << 20) + chance(p, 4) % (1 << 16),
                    0,
                    4,
                    30,
                ),
                _ => ('S', 1_500, 300 << 20, 1 << 20, 4096, 1, 12),
            };
            let process = ProcessSample {
                pid: 40_000 + p * 7,
                ppid: if p == 0 { 39_999 } else { 40_000 },
                start_ticks: 90_000 + u64::from(p) * 3,
                name: match p {
                    0..8 => "python3".to_owned(),
                    p if p < workers => "pt_data_worker".to_owned(),
                    _ => "cc1plus".to_owned(),
                },
                state,
                rss_bytes: rss,
                cpu_ticks: cpu,
                reaped_children_cpu_ticks: 0,
                threads,
                open_fds: Some(fds),
                read_bytes: Some(read),
                write_bytes: Some(write),
            };
            let pss = Some(rss / 3 * 2);
            (process, pss)
        })
        .unzip()
}
