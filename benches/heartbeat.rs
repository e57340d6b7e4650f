//! Heartbeat benchmarks:
//! - `poll_and_summary/1000_beats`: one poll of a heartbeat file to which 1,000 beats were
//!   appended since the last (a second at 1,000 beats a second), each beat counted into a
//!   sample's summary, and the sample taken: what the supervisor would spend a second on
//!   heartbeats at that rate, whatever its sample interval.
//!
//! Run with `cargo bench --bench heartbeat`.

use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::Write;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use unilab::testing::heartbeat::{HeartbeatReader, SampleSummary};

const BEATS: u64 = 1_000;

/// 1,000 lines as the Python helper writes them: step, phase, time, and two numbers.
fn second_of_beats(first_step: u64) -> Vec<u8> {
    let mut lines = Vec::new();
    for i in 0..BEATS {
        let step = first_step + i;
        let t = 1.754e9 + step as f64 * 0.001;
        let loss = 2.0 / (1.0 + step as f64).ln();
        writeln!(
            lines,
            r#"{{"step": {step}, "phase": "train", "t": {t:.6}, "loss": {loss}, "tokens": 4096}}"#
        )
        .expect("write to a vector");
    }
    lines
}

fn poll_and_summary(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("heartbeat");
    let mut writer = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .expect("create the heartbeat file");
    let mut reader = HeartbeatReader::new(File::open(&path).expect("open the heartbeat file"));
    let mut summary = SampleSummary::new();
    let mut step = 1;
    let mut group = c.benchmark_group("poll_and_summary");
    group.throughput(criterion::Throughput::Elements(BEATS));
    group.bench_function("1000_beats", |b| {
        b.iter_batched(
            || {
                // Appending the next second's beats is the trainer's work, not timed.
                writer
                    .write_all(&second_of_beats(step))
                    .expect("append beats");
                step += BEATS;
            },
            |()| {
                let polled = reader.poll(2e9).expect("poll the heartbeat file");
                assert_eq!(polled.beats.len() as u64, BEATS);
                for beat in &polled.beats {
                    summary.add(beat);
                }
                black_box(summary.take())
            },
            BatchSize::PerIteration,
        );
    });
    group.finish();
}

criterion_group!(benches, poll_and_summary);
criterion_main!(benches);
