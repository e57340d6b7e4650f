//! Several real processes on one log at once: long-lived and short-lived writers and a reader.
//! No event may be lost, duplicated or reordered, the sequence stays gap-free, the chain
//! verifies, and the reader never fails.

use std::collections::BTreeMap;
use std::io::Read;

use crate::common::*;
use unilab::LogReader;

const WRITERS: u32 = 4;
const EVENTS_EACH: u64 = 500;

#[test]
fn four_writers_and_a_reader_share_one_log() {
    let root = TestRoot::new();
    // Create the log first so the reader has something to open from the start.
    drop(root.log());
    let stop = root.root().join("stop-reader");
    let mut reader_env = child_env(&root);
    reader_env.push(("UNILAB_TEST_STOP", stop.display().to_string()));
    let mut reader = spawn_child("reader", &reader_env);

    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            // Two keep the log open throughout, two reopen it for every event.
            let role = if writer % 2 == 0 { "long" } else { "short" };
            let mut env = child_env(&root);
            env.push(("UNILAB_TEST_WRITER", (writer + 1).to_string()));
            env.push(("UNILAB_TEST_COUNT", EVENTS_EACH.to_string()));
            spawn_child(role, &env)
        })
        .collect();
    for mut writer in writers {
        let status = writer.wait().expect("wait for a writer");
        assert!(status.success(), "a writer failed: {status}");
    }
    std::fs::write(&stop, b"").expect("stop the reader");
    let mut reader_out = String::new();
    reader
        .stdout
        .take()
        .expect("reader stdout")
        .read_to_string(&mut reader_out)
        .expect("read the reader's output");
    let status = reader.wait().expect("wait for the reader");
    assert!(status.success(), "the concurrent reader failed: {status}");
    let reads: u64 = reader_out
        .lines()
        .find_map(|l| l.split("READS ").nth(1))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the reader reports its reads: {reader_out:?}"));
    assert!(reads > 0, "the reader never read the log");

    let log = LogReader::open(&root.log_path(), &root.scope())
        .unwrap()
        .unwrap();
    let snapshot = log.snapshot().unwrap();
    let report = snapshot
        .verify(unilab::PROJECTIONS)
        .expect("the chain verifies");
    let total = u64::from(WRITERS) * EVENTS_EACH;
    assert_eq!(report.events, total);

    // Every (writer, i) exactly once, and each writer's events in the order it appended them.
    let mut seen: BTreeMap<(u32, u64), u64> = BTreeMap::new();
    let mut last_i: BTreeMap<u32, u64> = BTreeMap::new();
    let mut expected_seq = 1;
    snapshot
        .scan(1, |record| {
            assert_eq!(record.envelope.seq, expected_seq, "sequence gap");
            expected_seq += 1;
            let id = writer_identity(&record.envelope.event).expect("a writer's event");
            if let Some(previous) = last_i.insert(id.0, id.1) {
                assert!(
                    id.1 > previous,
                    "writer {} reordered: {} after {previous}",
                    id.0,
                    id.1
                );
            }
            assert!(
                seen.insert(id, record.envelope.seq).is_none(),
                "event {id:?} appears twice"
            );
            Ok(true)
        })
        .unwrap();
    assert_eq!(seen.len() as u64, total);
    for writer in 1..=WRITERS {
        for i in 0..EVENTS_EACH {
            assert!(
                seen.contains_key(&(writer, i)),
                "event ({writer}, {i}) is missing"
            );
        }
    }

    // The real binary agrees.
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .success()
        .stdout(predicates::str::contains(format!("ok: {total} events")));
}
