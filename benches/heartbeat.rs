//! Heartbeat benchmarks:
//! - `poll_and_summary/1000_beats`: one poll of a heartbeat file to which 1,000 beats were
//!   appended since the last (a second at 1,000 beats a second), each beat counted into a
//!   sample's summary, and the sample taken: what the supervisor would spend a second on
//!   heartbeats at that rate, whatever its sample interval.
//! - `poll_and_run/1000_beats`: the same poll, each beat taken in by the run as the supervisor
//!   takes it (the sample's summary, the run's steps by phase, goodput, the phase now), the
//!   sample taken and the step running judged: the supervisor's whole work for those beats.
//!
//! - `parse/1000_lines`: the same 1,000 lines parsed from memory, one by one: the parser's
//!   share.
//!
//! Run with `cargo bench --bench heartbeat`.

use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::Write;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use unilab::testing::heartbeat::{
    Beat, HeartbeatReader, HeartbeatRun, SampleSummary, StepLimits, Timed, parse,
};

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

/// The trainer's side of a heartbeat file: it appends a second of beats before each timed poll.
struct Trainer {
    _dir: tempfile::TempDir,
    writer: File,
    step: u64,
}

impl Trainer {
    /// A new heartbeat file, and a reader of it.
    fn new() -> (Self, HeartbeatReader) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("heartbeat");
        let writer = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("create the heartbeat file");
        let reader = HeartbeatReader::new(File::open(&path).expect("open the heartbeat file"));
        let trainer = Trainer {
            _dir: dir,
            writer,
            step: 1,
        };
        (trainer, reader)
    }

    /// Appending the next second's beats is the trainer's work, not timed; when they arrive,
    /// as the last one's `t` says (so every `t` agrees with it, as a trainer's own does).
    fn append_a_second(&mut self) -> f64 {
        self.writer
            .write_all(&second_of_beats(self.step))
            .expect("append beats");
        self.step += BEATS;
        1.754e9 + (self.step - 1) as f64 * 0.001
    }
}

/// The group `name`: a poll of a second's beats, each given to `add`, then `take` the sample.
fn poll_group<S, R>(
    c: &mut Criterion,
    name: &str,
    mut state: S,
    mut add: impl FnMut(&mut S, &Beat<'_>),
    mut take: impl FnMut(&mut S) -> R,
) {
    let (mut trainer, mut reader) = Trainer::new();
    let mut group = c.benchmark_group(name);
    group.throughput(criterion::Throughput::Elements(BEATS));
    group.bench_function("1000_beats", |b| {
        b.iter_batched(
            || trainer.append_a_second(),
            |arrived| {
                let polled = reader
                    .poll_each(arrived, |beat| add(&mut state, beat))
                    .expect("poll the heartbeat file");
                assert_eq!(polled.beats as u64, BEATS);
                black_box(take(&mut state))
            },
            BatchSize::PerIteration,
        );
    });
    group.finish();
}

fn poll_and_summary(c: &mut Criterion) {
    poll_group(
        c,
        "poll_and_summary",
        SampleSummary::new(),
        |summary, beat| {
            let at = Timed {
                at: beat.t,
                stamped: false,
            };
            summary.add(beat, at);
        },
        SampleSummary::take,
    );
}

fn poll_and_run(c: &mut Criterion) {
    poll_group(
        c,
        "poll_and_run",
        HeartbeatRun::new(1.754e9, StepLimits::default()),
        |run, beat| run.add(beat),
        HeartbeatRun::take_sample,
    );
}

fn parse_lines(c: &mut Criterion) {
    let lines = second_of_beats(1);
    let mut group = c.benchmark_group("parse");
    group.throughput(criterion::Throughput::Elements(BEATS));
    group.bench_function("1000_lines", |b| {
        b.iter(|| {
            let mut steps = 0;
            for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                steps += parse(black_box(line), 2e9).map_or(0, |beat| beat.step);
            }
            black_box(steps)
        });
    });
    group.finish();
}

criterion_group!(benches, poll_and_summary, poll_and_run, parse_lines);
criterion_main!(benches);
