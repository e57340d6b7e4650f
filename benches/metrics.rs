//! What `soak run --metrics-file` adds to a sample, in one run:
//! - `metrics/sample/100`: one sample of a real tree of 100 processes, as `benches/soak.rs`'s
//!   `sampler/tree/100` takes it (the `/proc` walk, every process's stat, fds and I/O, the
//!   progress directory), without GPUs;
//! - `metrics/render/100`: that sample's part alone, without the file (below);
//! - `metrics/render_write/100`: that sample (with a GPU, its health and a heartbeat of two
//!   numbers added) taken into the soak's metrics, rendered, and written as the supervisor
//!   writes it: a new file beside the target, renamed over it, in a directory under `target/`
//!   (a disk, as a textfile collector's directory is; not a memory file system).
//!
//! Then it prints the second's median as a share of the first's; the target is at most 10 %.
//! Run with `cargo bench --bench metrics`.

mod common;

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion};
use unilab::testing::metrics::{SoakLabels, SoakMetrics, write_atomically};
use unilab::{GpuHealth, GpuSample, SampleBeats};

const PROCESSES: usize = 100;

fn bench(c: &mut Criterion) {
    let (_progress, sampler) = common::checkpoint_sampler();
    let tree = common::Tree::spawn(PROCESSES);
    let root = tree.root.id();
    let mut group = c.benchmark_group("metrics");
    let mut index = 0;
    group.bench_with_input(
        BenchmarkId::new("sample", PROCESSES),
        &PROCESSES,
        |b, &n| {
            b.iter(|| {
                index += 1;
                let sample = sampler.sample(index, Duration::ZERO, root, false);
                assert!(sample.0.processes.len() >= n);
                black_box(sample)
            })
        },
    );
    let (mut sample, mut measures) =
        sampler.sample(index + 1, Duration::from_secs(60), root, false);
    assert!(sample.processes.len() >= PROCESSES);
    sample.gpus = Some(vec![GpuSample {
        index: 0,
        uuid: "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f".into(),
        memory_used_mib: Some(40_000),
        memory_total_mib: Some(143_771),
        utilization_percent: Some(97),
        processes: Vec::new(),
    }]);
    measures.gpus = vec![GpuHealth {
        temperature_c: Some(61),
        power_mw: Some(312_450),
        sm_clock_mhz: Some(1980),
        throttle_mask: Some(0x4),
        ..GpuHealth::default()
    }];
    measures.heartbeat = Some(Box::new(SampleBeats {
        beats: 120,
        step: Some(41_000),
        phase: Some("train".into()),
        step_seconds_min: Some(0.09),
        step_seconds_median: Some(0.1),
        step_seconds_max: Some(0.3),
        numbers: [("loss".to_owned(), 0.25), ("lr".to_owned(), 3e-4)].into(),
    }));
    let labels = SoakLabels {
        soak: "20261206T120000-ab12".into(),
        host: "node-7".into(),
        job: Some("llama-run3".into()),
        rank: Some(3),
        command: "torchrun --nproc-per-node 8 train.py --config configs/llama-8b.yaml".into(),
    };
    let mut metrics = SoakMetrics::new(&labels, 100);
    std::fs::create_dir_all("target").expect("target/");
    let dir = tempfile::tempdir_in("target").expect("a directory under target/");
    let path = dir.path().join("unilab.prom");
    let mut text = String::new();
    group.bench_with_input(BenchmarkId::new("render", PROCESSES), &PROCESSES, |b, _| {
        b.iter(|| {
            metrics.observe(&sample, &measures, (40_000, 4_000.0));
            metrics.progressed_at(Some(1.796e9));
            metrics.render(&mut text);
            black_box(text.len())
        })
    });
    group.bench_with_input(
        BenchmarkId::new("render_write", PROCESSES),
        &PROCESSES,
        |b, _| {
            b.iter(|| {
                metrics.observe(&sample, &measures, (40_000, 4_000.0));
                metrics.progressed_at(Some(1.796e9));
                metrics.render(&mut text);
                write_atomically(&path, text.as_bytes()).expect("write the metrics file");
            })
        },
    );
    group.finish();
    println!("metrics file: {} bytes", text.len());
    drop(tree);
}

/// Criterion's median estimate of `metrics/<id>/100`, in nanoseconds.
fn median_ns(id: &str) -> Option<f64> {
    let base = std::env::var_os("CRITERION_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR").map(|d| PathBuf::from(d).join("criterion"))
        })
        .unwrap_or_else(|| PathBuf::from("target/criterion"));
    let path = base.join(format!("metrics/{id}/{PROCESSES}/new/estimates.json"));
    let estimates: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    estimates["median"]["point_estimate"].as_f64()
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    let [sample, render, write] = ["sample", "render", "render_write"].map(median_ns);
    match (sample, render, write) {
        (Some(sample), Some(render), Some(write)) => println!(
            "metrics file at {PROCESSES} processes: {:.1} µs a sample, {:.1} µs to render and write it ({:.1} µs of it rendering): {:.1} % (target ≤ 10 %)",
            sample / 1e3,
            write / 1e3,
            render / 1e3,
            write / sample * 100.0
        ),
        _ => println!("(criterion's estimates not found: no ratio)"),
    }
}
