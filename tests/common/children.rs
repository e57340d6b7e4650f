//! Child processes for the multi-process tests: this test binary run again as a writer that
//! appends to one log, one that crashes mid-append, or a reader that verifies it over and over.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use unilab::EventLog;
use unilab::PROJECTIONS;
use unilab::Scope;

use super::*;

/// Spawns this test binary again as a child that runs the ignored test [`child`] with `role`
/// and extra environment. The child's stdout is piped.
pub fn spawn_child(role: &str, env: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args([
        "common::children::child",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("UNILAB_TEST_CHILD", role)
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn a child test process")
}

/// What a child process started by [`spawn_child`] does, by `UNILAB_TEST_CHILD`:
/// - `long`: open the log once, append `UNILAB_TEST_COUNT` events;
/// - `short`: open, append one event and close, `UNILAB_TEST_COUNT` times;
/// - `crash`: append batches of `UNILAB_TEST_BATCH` events until killed, printing
///   `ACK <writer> <i> <seq>` once each append has returned;
/// - `reader`: open, snapshot and verify the log over and over until `UNILAB_TEST_STOP` exists,
///   then print `READS <n>`; any failure fails the child.
///
/// Does nothing when not run as a child, so that it passes when run by hand.
#[test]
#[ignore = "run as a child process by spawn_child"]
fn child() {
    use std::io::Write;
    let Ok(role) = std::env::var("UNILAB_TEST_CHILD") else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let path = PathBuf::from(var("UNILAB_TEST_LOG"));
    let scope = Scope {
        uid: var("UNILAB_TEST_UID").parse().expect("uid"),
        host: var("UNILAB_TEST_HOST"),
    };
    let writer: u32 = var("UNILAB_TEST_WRITER").parse().unwrap_or(0);
    let count: u64 = var("UNILAB_TEST_COUNT").parse().unwrap_or(0);
    let mut stdout = std::io::stdout().lock();
    match role.as_str() {
        "long" => {
            let log = EventLog::open(&path, scope, PROJECTIONS).expect("open");
            for i in 0..count {
                let (subject, event) = writer_event(writer, i);
                log.append(subject, event).expect("append");
            }
        }
        "short" => {
            for i in 0..count {
                let log = EventLog::open(&path, scope.clone(), PROJECTIONS).expect("open");
                let (subject, event) = writer_event(writer, i);
                log.append(subject, event).expect("append");
            }
        }
        "crash" => {
            let batch: u64 = var("UNILAB_TEST_BATCH").parse().unwrap_or(1).max(1);
            let log = EventLog::open(&path, scope, PROJECTIONS).expect("open");
            let mut i = 0;
            loop {
                let events: Vec<_> = (i..i + batch).map(|j| writer_event(writer, j)).collect();
                let appended = log.append_all(events).expect("append");
                for (j, a) in appended.iter().enumerate() {
                    writeln!(stdout, "ACK {writer} {} {}", i + j as u64, a.seq).expect("stdout");
                }
                stdout.flush().expect("flush");
                i += batch;
            }
        }
        "reader" => {
            let stop = PathBuf::from(var("UNILAB_TEST_STOP"));
            let long_lived = loop {
                if let Some(reader) = unilab::LogReader::open(&path, &scope).expect("open to read")
                {
                    break reader;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            };
            let mut reads = 0u64;
            let mut last_seen = 0u64;
            while !stop.exists() {
                // Alternate a long-lived handle and a fresh open, as `history --follow` and a
                // one-shot `history` would.
                let fresh;
                let reader = if reads.is_multiple_of(2) {
                    &long_lived
                } else {
                    fresh = unilab::LogReader::open(&path, &scope)
                        .expect("reopen to read")
                        .expect("the log exists");
                    &fresh
                };
                let report = reader
                    .snapshot()
                    .and_then(|s| s.verify(unilab::PROJECTIONS))
                    .unwrap_or_else(|e| panic!("a concurrent read failed: {e}"));
                assert!(
                    report.events >= last_seen,
                    "the log shrank from {last_seen} to {} events",
                    report.events
                );
                last_seen = report.events;
                reads += 1;
            }
            writeln!(stdout, "READS {reads} {last_seen}").expect("stdout");
        }
        other => panic!("unknown child role {other}"),
    }
}

/// The environment a child needs to find the log of `root`.
pub fn child_env(root: &TestRoot) -> Vec<(&'static str, String)> {
    let scope = root.scope();
    vec![
        ("UNILAB_TEST_LOG", root.log_path().display().to_string()),
        ("UNILAB_TEST_UID", scope.uid.to_string()),
        ("UNILAB_TEST_HOST", scope.host),
    ]
}
