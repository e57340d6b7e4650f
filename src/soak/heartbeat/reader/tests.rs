//! The reader against real files: lines whole and torn, floods, budgets, truncation and
//! rewrites, and a property that polls read what one whole read does.

use std::io::Write;

use super::*;

struct Fixture {
    writer: File,
    reader: HeartbeatReader,
    _dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heartbeat");
    let writer = File::create(&path).unwrap();
    let reader = HeartbeatReader::new(File::open(&path).unwrap());
    Fixture {
        writer,
        reader,
        _dir: dir,
    }
}

impl Fixture {
    fn write(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    fn poll(&mut self) -> Polled {
        self.reader.poll(5.0).unwrap()
    }

    /// Makes the file `len` bytes long, the new bytes zeros (sparse: nothing is written).
    fn grow_to(&mut self, len: u64) {
        self.writer.set_len(len).unwrap();
        let mut end = &self.writer;
        std::io::Seek::seek(&mut end, std::io::SeekFrom::End(0)).unwrap();
    }
}

fn steps(polled: &Polled) -> Vec<u64> {
    polled.beats.iter().map(|b| b.step).collect()
}

#[test]
fn a_line_is_read_once_its_newline_has_come() {
    let mut f = fixture();
    f.write(b"{\"step\":1}\n{\"step\":2,\"lo");
    let first = f.poll();
    assert_eq!(steps(&first), [1]);
    assert_eq!(first.beats[0].t, 5.0);
    f.write(b"ss\":0.5}\n");
    let second = f.poll();
    assert_eq!(steps(&second), [2]);
    assert_eq!(second.beats[0].numbers.get("loss"), Some(0.5));
    assert_eq!(f.poll(), Polled::default());
}

#[test]
fn malformed_lines_are_counted_and_reading_goes_on() {
    let mut f = fixture();
    f.write(b"garbage\n\x00\xff\xfe\n\n{\"step\":3}\n[]\n");
    let polled = f.poll();
    assert_eq!(steps(&polled), [3]);
    assert_eq!(polled.errors.malformed, 3);
    assert_eq!(f.reader.errors().malformed, 3);
}

#[test]
fn a_long_line_is_counted_once_and_not_kept_across_polls() {
    let mut f = fixture();
    f.write(b"{\"step\":1}\n{\"step\":2,\"pad\":\"");
    // Ten megabytes of zeros without a newline, then the line's end and one more beat.
    f.grow_to(10 * 1024 * 1024);
    f.write(b"\"}\n{\"step\":3}\n");
    let mut beats = Vec::new();
    let mut oversized = 0;
    for _ in 0..4 {
        let polled = f.poll();
        beats.extend(steps(&polled));
        oversized += polled.errors.oversized;
        assert!(f.reader.partial.capacity() <= 2 * MAX_LINE);
    }
    assert_eq!(beats, [1, 3]);
    assert_eq!(oversized, 1);
    let totals = f.reader.errors();
    assert_eq!((totals.malformed, totals.dropped_bytes), (0, 0));
}

#[test]
fn a_line_of_exactly_the_limit_is_read_and_one_byte_more_is_not() {
    let mut f = fixture();
    let fill = |len: usize| {
        let head = b"{\"step\":1,\"pad\":\"";
        let mut line = head.to_vec();
        line.resize(len - 2, b'x');
        line.extend_from_slice(b"\"}\n");
        line
    };
    f.write(&fill(MAX_LINE));
    f.write(&fill(MAX_LINE + 1));
    let polled = f.poll();
    assert_eq!(steps(&polled), [1]);
    assert_eq!(polled.errors.oversized, 1);
}

#[test]
fn a_flood_past_the_backlog_bound_is_skipped_and_counted() {
    let mut f = fixture();
    // A gigabyte of zeros (sparse) and then beats: the reader jumps to the last budget's
    // worth, drops the rest of the zeros' "line", and reads the beats.
    f.grow_to(1 << 30);
    f.write(b"\n{\"step\":7}\n");
    let polled = f.poll();
    assert_eq!(steps(&polled), [7]);
    assert_eq!(polled.errors.dropped_bytes, (1 << 30) + 1);
    assert_eq!((polled.errors.oversized, polled.errors.malformed), (0, 0));
    assert_eq!(polled.backlog_bytes, 0);
}

#[test]
fn skipping_ahead_onto_a_line_start_drops_no_beat_after_it() {
    let mut f = fixture();
    let line = b"{\"step\":1}\n";
    let lines = (MAX_BACKLOG as usize / line.len()) + 1;
    f.write(&line.repeat(lines));
    let polled = f.poll();
    // The skip lands on a line start (every line is 11 bytes and the budget is a multiple
    // of nothing in particular), or inside a line whose rest is dropped: either way every
    // byte read or dropped is accounted for.
    let read = polled.beats.len() as u64 * line.len() as u64;
    let accounted = read + polled.errors.dropped_bytes + polled.backlog_bytes;
    assert_eq!(
        accounted,
        (lines * line.len()) as u64,
        "{:?}",
        polled.errors
    );
    assert!(polled.errors.dropped_bytes > MAX_BACKLOG - POLL_BUDGET);
}

#[test]
fn the_budget_stops_a_poll_and_the_next_poll_goes_on_where_it_stopped() {
    let mut f = fixture();
    let total = MAX_BEATS_A_POLL as u64 + 1000;
    for step in 0..total {
        f.write(format!("{{\"step\":{step}}}\n").as_bytes());
    }
    let first = f.poll();
    assert_eq!(first.beats.len(), MAX_BEATS_A_POLL);
    assert!(first.backlog_bytes > 0);
    let second = f.poll();
    let all: Vec<u64> = steps(&first).into_iter().chain(steps(&second)).collect();
    assert_eq!(all, (0..total).collect::<Vec<_>>());

    // And by bytes: lines of 4 KiB, six megabytes of them.
    let mut f = fixture();
    let pad = "x".repeat(4096 - 30);
    let lines = 6 * 1024 / 4;
    for step in 0..lines {
        f.write(format!("{{\"step\":{step},\"pad\":\"{pad}\"}}\n").as_bytes());
    }
    let first = f.poll();
    assert!(first.beats.len() < lines);
    assert!(first.backlog_bytes > 0);
    let second = f.poll();
    assert_eq!(first.beats.len() + second.beats.len(), lines);
    assert_eq!(second.backlog_bytes, 0);
}

#[test]
fn a_truncated_file_is_read_again_from_its_start() {
    let mut f = fixture();
    f.write(b"{\"step\":1}\n{\"step\":2}\n");
    assert_eq!(steps(&f.poll()), [1, 2]);
    f.writer.set_len(0).unwrap();
    f.grow_to(0);
    f.write(b"{\"step\":9}\n");
    let polled = f.poll();
    assert!(polled.truncated);
    assert_eq!(steps(&polled), [9]);

    // Cut and written again past where the reader was, between two polls.
    f.writer.set_len(0).unwrap();
    f.grow_to(0);
    f.write(b"{\"step\":10,\"loss\":1.0}\n");
    let polled = f.poll();
    assert!(polled.truncated);
    assert_eq!(steps(&polled), [10]);
    assert_eq!(f.reader.errors().truncations, 2);
}

/// A trainer that rewrites the file at each beat (`open(path, "w")`) with lines of one
/// length: the size and the last byte read were the same, so the first beat was read and
/// no other, and the soak was failed stale while it beat ten times a second.
#[test]
fn a_file_rewritten_with_a_line_of_the_same_length_is_read_again() {
    let mut f = fixture();
    f.write(b"{\"step\": 10}\n");
    assert_eq!(steps(&f.poll()), [10]);
    for step in 11..14 {
        f.writer.set_len(0).unwrap();
        f.grow_to(0);
        f.write(format!("{{\"step\": {step}}}\n").as_bytes());
        let polled = f.poll();
        assert!(polled.truncated, "step {step}");
        assert_eq!(steps(&polled), [step]);
    }
    assert_eq!(f.reader.errors().truncations, 3);
    // Another file in its place: read from its start.
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other");
    std::fs::write(&other, b"{\"step\": 20}\n").unwrap();
    f.reader.replace(File::open(&other).unwrap());
    assert_eq!(steps(&f.poll()), [20]);
    assert_eq!(f.reader.errors().truncations, 4);
}

#[test]
fn a_file_rewritten_past_the_offset_while_a_line_is_held_is_read_again() {
    // Half a line held, then the file cut and written again longer than what was read.
    let mut f = fixture();
    f.write(b"{\"step\":1}\n{\"step\":2,\"lo");
    assert_eq!(steps(&f.poll()), [1]);
    let offset = f.reader.offset as usize;
    f.writer.set_len(0).unwrap();
    f.grow_to(0);
    let again = b"{\"step\":10,\"loss\":1.0,\"pad\":\"abcdefghijklmnopqrst\"}\n{\"step\":11}\n";
    assert_ne!(again[offset - 1], b'o', "the test needs another byte there");
    f.write(again);
    let polled = f.poll();
    assert!(polled.truncated);
    assert_eq!(steps(&polled), [10, 11]);
    assert_eq!(polled.errors.malformed, 0);

    // The same while an oversized line is being skipped.
    let mut f = fixture();
    f.write(b"{\"step\":1}\n");
    f.write(&[b'x'; MAX_LINE + 10]);
    assert_eq!(steps(&f.poll()), [1]);
    assert_eq!(f.reader.skipping, Skipping::Oversized);
    let offset = f.reader.offset;
    f.writer.set_len(0).unwrap();
    f.grow_to(0);
    let mut step = 0;
    while f.writer.metadata().unwrap().len() <= offset + 20 {
        f.write(format!("{{\"step\":{step}}}\n").as_bytes());
        step += 1;
    }
    let polled = f.poll();
    assert!(polled.truncated);
    assert_eq!(steps(&polled), (0..step).collect::<Vec<_>>());
    assert_eq!(f.reader.errors().truncations, 1);
}

#[test]
fn the_last_poll_counts_a_torn_last_line() {
    let mut f = fixture();
    f.write(b"{\"step\":1}\n{\"step\":2,\"loss\":0.12");
    let polled = f.reader.finish(5.0).unwrap();
    assert_eq!(steps(&polled), [1]);
    assert_eq!(polled.errors.malformed, 1);
}

/// What the last poll cannot read in its budget will never be read: it is dropped, and
/// counted so.
#[test]
fn the_last_poll_counts_what_is_past_its_budget_as_dropped() {
    let mut f = fixture();
    let line = b"{\"step\":1}\n";
    let lines = MAX_BEATS_A_POLL + 100;
    for _ in 0..lines {
        f.write(line);
    }
    let polled = f.reader.finish(5.0).unwrap();
    assert_eq!(polled.beats.len(), MAX_BEATS_A_POLL);
    assert_eq!(polled.errors.dropped_bytes, 100 * line.len() as u64);
    assert_eq!(f.reader.errors().dropped_bytes, 100 * line.len() as u64);
    assert_eq!(polled.errors.malformed, 0);
}

/// What the file's bytes hold when read whole: the beats of its complete lines, and how
/// many complete lines were malformed.
fn read_whole(bytes: &[u8]) -> (Vec<Beat<'static>>, u64) {
    let mut polled = Polled::default();
    let mut beats = Vec::new();
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    for piece in bytes[..complete].split(|&b| b == b'\n') {
        line(piece, 5.0, &mut polled, &mut |beat| {
            beats.push(beat.clone().into_owned())
        });
    }
    // `split` yields an empty piece after the last newline: a blank line, not counted.
    (beats, polled.errors.malformed)
}

use proptest::strategy::Strategy as _;

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    #[test]
    fn reading_in_pieces_reads_what_reading_whole_does(
        lines in proptest::collection::vec(
            proptest::prop_oneof![
                (0u64..1000).prop_map(|s| format!("{{\"step\":{s},\"t\":{s}.5}}\n").into_bytes()),
                proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            ],
            0..40,
        ),
        cuts in proptest::collection::vec(0usize..2000, 0..8),
    ) {
        let bytes: Vec<u8> = lines.concat();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
        cuts.push(bytes.len());
        cuts.sort_unstable();
        let mut f = fixture();
        let (mut beats, mut malformed, mut at) = (Vec::new(), 0, 0);
        for cut in cuts {
            f.write(&bytes[at..cut]);
            at = cut;
            let polled = f.poll();
            beats.extend(polled.beats);
            malformed += polled.errors.malformed;
        }
        let (whole_beats, whole_malformed) = read_whole(&bytes);
        proptest::prop_assert_eq!(beats, whole_beats);
        proptest::prop_assert_eq!(malformed, whole_malformed);
    }
}
