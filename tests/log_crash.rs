//! A writer killed with SIGKILL at varied points — during its first open, between appends, in
//! the middle of a commit — never costs an acknowledged event: after each kill the log opens
//! (read-only, which needs the crashed writer's leftovers repaired first), verifies, and holds
//! every event whose append had returned, at the sequence the append reported.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::time::Duration;

use crate::common::*;
use unilab::LogReader;
use unilab::Subject;

const ROUNDS: u32 = 24;

/// `ACK <writer> <i> <seq>` anywhere in a line (libtest prints its own text before it).
fn parse_ack(line: &str) -> Option<((u32, u64), u64)> {
    let mut words = line.split("ACK ").nth(1)?.split_whitespace();
    let writer = words.next()?.parse().ok()?;
    let i = words.next()?.parse().ok()?;
    let seq = words.next()?.parse().ok()?;
    Some(((writer, i), seq))
}

/// A writer killed while it creates the log leaves either no log or a whole one — never a file
/// that no later command can open — and the next writer sweeps up what the dead one left.
#[test]
fn a_writer_killed_while_it_creates_the_log_leaves_no_half_made_log() {
    const CREATIONS: u32 = 30;
    for round in 0..CREATIONS {
        let root = TestRoot::new();
        let log_path = root.log_path();
        let dir = log_path.parent().expect("the log's directory").to_owned();
        private_dir_all(&dir);
        let mut env = child_env(&root);
        env.push(("UNILAB_TEST_WRITER", "1".to_owned()));
        let mut child = spawn_child("crash", &env);
        // Kill within a few milliseconds of the first file appearing: inside the creation,
        // which is that short, so the directory is watched without pausing.
        let started = std::time::Instant::now();
        while !std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some()) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "round {round}: the writer created nothing"
            );
            std::hint::spin_loop();
        }
        std::thread::sleep(Duration::from_micros(u64::from(round * 97 % 3000)));
        child.kill().expect("SIGKILL the writer");
        child.wait().expect("reap the writer");

        if let Some(reader) = LogReader::open(&log_path, &root.scope()).unwrap_or_else(|e| {
            panic!("round {round}: a creation cut short left a log that does not open: {e}")
        }) {
            let snapshot = reader.snapshot().expect("snapshot");
            snapshot
                .verify(unilab::PROJECTIONS)
                .unwrap_or_else(|e| panic!("round {round}: the log does not verify: {e}"));
        }
        root.log()
            .append(Subject::Host, live(1))
            .unwrap_or_else(|e| panic!("round {round}: no append after the kill: {e}"));
        let left: Vec<_> = std::fs::read_dir(&dir)
            .expect("list the log's directory")
            .map(|e| e.expect("entry").file_name())
            .filter(|name| name != "events.redb")
            .collect();
        assert!(left.is_empty(), "round {round}: left behind: {left:?}");
        root.unilab().args(["log", "verify"]).assert().success();
    }
}

#[test]
fn a_writer_killed_at_any_point_loses_no_acknowledged_event() {
    let root = TestRoot::new();
    let mut acked: BTreeMap<(u32, u64), u64> = BTreeMap::new();
    let mut left_unclean = 0;
    for round in 0..ROUNDS {
        let writer = round + 1;
        let batch = 1 + round % 4;
        // How many acknowledgements to wait for before the kill; 0 kills during the open.
        let wait_for = [0, 1, 3, 10, 37, 120][round as usize % 6];
        let extra_delay = Duration::from_micros(u64::from(round * 731 % 3000));
        let mut env = child_env(&root);
        env.push(("UNILAB_TEST_WRITER", writer.to_string()));
        env.push(("UNILAB_TEST_BATCH", batch.to_string()));
        let mut child = spawn_child("crash", &env);
        let mut lines = BufReader::new(child.stdout.take().expect("child stdout"));
        let mut seen = 0;
        let mut line = String::new();
        while seen < wait_for {
            line.clear();
            if lines.read_line(&mut line).expect("read the child's output") == 0 {
                panic!("round {round}: the writer exited before it was killed");
            }
            if let Some((id, seq)) = parse_ack(&line) {
                acked.insert(id, seq);
                seen += 1;
            }
        }
        if wait_for == 0 {
            std::thread::sleep(Duration::from_millis(u64::from(round % 5)));
        }
        std::thread::sleep(extra_delay);
        child.kill().expect("SIGKILL the writer");
        // Whatever it printed before dying was acknowledged too.
        for line in lines.lines() {
            if let Some((id, seq)) = parse_ack(&line.expect("read")) {
                acked.insert(id, seq);
            }
        }
        child.wait().expect("reap the writer");

        // The kill must leave what a crash leaves: redb's own read-only open refuses the file
        // until it is repaired. Count it, so the test shows it exercised that path.
        let mut raw = redb::Builder::new();
        raw.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
        if let Err(redb::DatabaseError::RepairAborted) = raw.open_read_only(root.log_path()) {
            left_unclean += 1;
        }

        let reader = LogReader::open(&root.log_path(), &root.scope())
            .unwrap_or_else(|e| panic!("round {round}: the log does not open after the kill: {e}"));
        let Some(reader) = reader else {
            assert!(acked.is_empty(), "round {round}: the log vanished");
            continue;
        };
        let snapshot = reader.snapshot().expect("snapshot");
        let report = snapshot.verify(unilab::PROJECTIONS).unwrap_or_else(|e| {
            panic!("round {round}: the log does not verify after the kill: {e}")
        });
        assert!(report.events >= acked.len() as u64);
        for (&id, &seq) in &acked {
            let record = snapshot.get(seq).expect("read").unwrap_or_else(|| {
                panic!("round {round}: acknowledged event {id:?} at {seq} is gone")
            });
            assert_eq!(
                writer_identity(&record.envelope.event),
                Some(id),
                "round {round}: sequence {seq} holds another event"
            );
        }
    }
    assert!(
        left_unclean >= ROUNDS / 2,
        "only {left_unclean} of {ROUNDS} kills left the log needing repair"
    );
    assert!(
        acked.len() > 100,
        "the rounds acknowledged too few events to mean anything: {}",
        acked.len()
    );

    // The log goes on: a new writer appends after the crashes, and the binary verifies it.
    let appended = root
        .log()
        .append(Subject::Host, live(1))
        .expect("append after the crashes");
    assert!(appended.seq > *acked.values().max().unwrap());
    root.unilab().args(["log", "verify"]).assert().success();
}
