//! A damaged log is found and named, never read past: `log verify` on flipped bytes, a file that
//! is not a log, a truncated or emptied one, records cut from its end, and an index or a
//! projection that disagrees with the events; reading ahead and reading without threads.

use crate::common::*;
use predicates::prelude::*;
use unilab::Projection;
use unilab::testing::Error;
use unilab::testing::Exit;
use unilab::testing::SCHEMA_VERSION;
use unilab::{Daemons, PROJECTIONS};
use unilab::{Event, StoredEvent, Subject};
use unilab::{EventLog, LogError};

use super::*;

#[test]
fn verify_passes_on_a_good_log_and_without_one() {
    let root = TestRoot::new();
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .success()
        .stderr(predicate::str::contains("nothing to verify"));
    let root = root_with_every_kind();
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .success()
        .stdout(predicate::str::starts_with("ok: 30 events, chain head "))
        .stdout(predicate::str::contains(
            "(0 daemons, 4 soaks, 1 starting, 1 lease, 2 daemon_jobs, 1 daemon_limit, 4 soak_ranks_v2)",
        ));
    let out = root
        .unilab()
        .args(["--json", "log", "verify"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let report: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(report["ok"], true);
    assert_eq!(report["events"], 30);
    assert_eq!(report["schema_version"], SCHEMA_VERSION);
}

/// Flips one byte in every copy of `needle` in the file (redb's copy-on-write pages may leave
/// stale copies; flipping all of them reaches the live one). Returns how many were found.
fn flip_in_file(path: &std::path::Path, needle: &[u8]) -> usize {
    let mut bytes = std::fs::read(path).unwrap();
    let mut found = 0;
    let mut at = 0;
    while let Some(offset) = bytes[at..].windows(needle.len()).position(|w| w == needle) {
        let i = at + offset;
        bytes[i + needle.len() / 2] ^= 0x01;
        found += 1;
        at = i + needle.len();
    }
    std::fs::write(path, bytes).unwrap();
    found
}

#[test]
fn a_flipped_byte_inside_an_event_fails_verification_naming_its_sequence() {
    let root = root_with_every_kind();
    root.damaged_on_purpose();
    // Sequence 7 is the soak start; its progress directory appears in no other event.
    assert!(flip_in_file(&root.log_path(), b"/home/u/project/progress") > 0);
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .code(5)
        .stderr(predicate::str::contains("fails verification at sequence 7"))
        .stderr(predicate::str::contains("do not match its hash"))
        .stderr(predicate::str::contains("panicked").not());
    let out = root
        .unilab()
        .args(["--json", "log", "verify"])
        .assert()
        .code(5)
        .get_output()
        .stdout
        .clone();
    let report: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(report["ok"], false);
    assert_eq!(report["first_bad_seq"], 7);
    // history shows what it can and stops at the damaged record with the same verdict.
    root.unilab()
        .arg("history")
        .assert()
        .code(5)
        .stdout(predicate::str::contains("daemon_stale_cleaned"))
        .stdout(predicate::str::contains("soak_started").not())
        .stderr(predicate::str::contains("sequence 7"));
}

#[test]
fn a_file_that_is_not_a_log_is_refused_with_exit_5() {
    let root = TestRoot::new();
    root.damaged_on_purpose();
    private_dir_all(root.log_path().parent().unwrap());
    write_private(
        &root.log_path(),
        &b"this is not a redb file, just some text\n".repeat(200),
    );
    for args in [&["log", "verify"][..], &["history"][..]] {
        root.unilab()
            .args(args)
            .assert()
            .code(5)
            .stderr(predicate::str::contains(
                "is not a readable unilab event log",
            ))
            .stderr(predicate::str::contains("hint: move the file aside"))
            .stderr(predicate::str::contains("panicked").not());
    }
    let err = EventLog::open(&root.log_path(), root.scope(), PROJECTIONS)
        .err()
        .expect("refused");
    assert_eq!(Error::from(err).exit(), Exit::LogBroken);
}

#[test]
fn a_truncated_log_is_refused_with_exit_5() {
    let root = TestRoot::new();
    root.log()
        .append_all((0..3_000).map(|i| (Subject::Host, live(i))))
        .unwrap();
    let len = std::fs::metadata(root.log_path()).unwrap().len();
    for keep in [len / 2, len / 3, 4096, 100] {
        let copy = TestRoot::new();
        copy.damaged_on_purpose();
        private_dir_all(copy.log_path().parent().unwrap());
        let bytes = std::fs::read(root.log_path()).unwrap();
        write_private(&copy.log_path(), &bytes[..keep as usize]);
        for args in [&["log", "verify"][..], &["history"][..]] {
            let assert = copy.unilab().args(args).assert().code(5);
            let stderr = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
            assert!(stderr.starts_with("error: "), "kept {keep} bytes: {stderr}");
            assert!(!stderr.contains("panicked"), "kept {keep} bytes: {stderr}");
        }
    }
}

/// Removes the last two records of `root_with_every_kind`'s log, as something other than unilab.
/// What `log verify` then says: the first of them is missing.
fn cut_the_last_two_records(root: &TestRoot) -> String {
    let mut first = 0;
    raw_write(root, |txn| {
        use redb::ReadableTable;
        let mut events = txn.open_table(unilab::testing::tables::EVENTS).unwrap();
        let last = events.last().unwrap().unwrap().0.value();
        events.remove(last).unwrap();
        events.remove(last - 1).unwrap();
        first = last - 1;
    });
    format!("at sequence {first}: it is missing")
}

/// The subject index is compared with the events as a whole, in constant memory: an entry
/// removed, added or moved to another subject fails verification.
#[test]
fn a_subject_index_that_disagrees_with_the_events_fails_verification() {
    use unilab::testing::tables::SUBJECT_INDEX;
    type Index<'t> = redb::Table<'t, (&'static str, u64), ()>;
    let changes: [fn(&mut Index); 3] = [
        |index| {
            index.remove(("host", 1)).unwrap();
        },
        |index| {
            index.insert(("soak/nobody", 3), ()).unwrap();
        },
        |index| {
            index.remove(("host", 1)).unwrap();
            index.insert(("soak/nobody", 1), ()).unwrap();
        },
    ];
    for change in changes {
        let root = TestRoot::new();
        root.log().append(Subject::Host, live(1)).unwrap();
        root.unilab().args(["log", "verify"]).assert().success();
        raw_write(&root, |txn| {
            change(&mut txn.open_table(SUBJECT_INDEX).unwrap())
        });
        refused(
            root.unilab().args(["log", "verify"]),
            5,
            &["the subject index disagrees with the events"],
        );
    }
}

/// A long subject is read ahead on a second thread past its first records: what `visit` sees is
/// still every record of the subject in order and nothing else; stopping early, an error of
/// `visit` and a damaged record late in the subject each end the scan where they happen, and
/// `log verify`, which reads the whole chain ahead, names that record.
#[test]
fn a_long_subject_read_ahead_is_every_record_in_order_and_stops_where_asked() {
    use unilab::{LogReader, Record};
    const SAMPLES: u64 = 3_000;
    let root = TestRoot::new();
    let soak = || Subject::Soak("long".into());
    let log = root.log();
    // The soak's samples, every seventh followed by another subject's record.
    let events: Vec<(Subject, StoredEvent)> = (0..SAMPLES)
        .flat_map(|i| {
            let other = (i % 7 == 0).then(|| (Subject::Host, live(1).into()));
            std::iter::once((soak(), StoredEvent::SoakSampledV5(Box::new(sample(i, 3)))))
                .chain(other)
        })
        .collect();
    let subjects: Vec<Subject> = events.iter().map(|(subject, _)| subject.clone()).collect();
    let appended = log.append_all(events).unwrap();
    let wanted: Vec<u64> = appended
        .iter()
        .zip(&subjects)
        .filter(|(_, subject)| **subject == soak())
        .map(|(appended, _)| appended.seq)
        .collect();
    drop(log);

    #[derive(Debug)]
    enum Stop {
        Log(LogError),
        Mine(u64),
    }
    impl From<LogError> for Stop {
        fn from(e: LogError) -> Self {
            Stop::Log(e)
        }
    }
    // Every record the scan gives, until `stop` says to stop (`Some(false)`) or fail (`None`).
    let scan = |stop: &dyn Fn(usize) -> Option<bool>| {
        let reader = LogReader::open(&root.log_path(), &root.scope())
            .unwrap()
            .unwrap();
        let snapshot = reader.snapshot().unwrap();
        let mut seen = Vec::new();
        let result = snapshot.scan_subject(&soak(), 1, |record: Record| {
            assert_eq!(record.envelope.subject, soak());
            let Event::SoakSampled { sample, .. } = &record.envelope.event else {
                panic!("not a sample: {:?}", record.envelope.event);
            };
            assert_eq!(sample.index, seen.len() as u64, "in order");
            seen.push(record.envelope.seq);
            stop(seen.len()).ok_or(Stop::Mine(record.envelope.seq))
        });
        (seen, result)
    };
    // The records seen are the first `n` wanted (said briefly: the lists are long).
    let first = |seen: &[u64], n: usize| {
        let differ = seen.iter().zip(&wanted).position(|(a, b)| a != b);
        assert!(
            seen.len() == n && differ.is_none(),
            "saw {} records, wanted the first {n}; first difference at {differ:?}",
            seen.len()
        );
    };
    let (seen, result) = scan(&|_| Some(true));
    assert!(result.is_ok(), "{result:?}");
    first(&seen, wanted.len());

    let (seen, result) = scan(&|n| Some(n < 2_000));
    assert!(result.is_ok(), "{result:?}");
    first(&seen, 2_000);

    let (seen, result) = scan(&|n| (n < 2_500).then_some(true));
    first(&seen, 2_500);
    assert!(
        matches!(result, Err(Stop::Mine(seq)) if seq == wanted[2_499]),
        "{result:?}"
    );

    // A byte of the 2,800th sample changed behind unilab's back.
    let damaged = wanted[2_799];
    raw_write(&root, |txn| {
        use redb::ReadableTable;
        let mut events = txn.open_table(unilab::testing::tables::EVENTS).unwrap();
        let mut stored = events.get(damaged).unwrap().unwrap().value().to_vec();
        let last = stored.len() - 1;
        stored[last] ^= 0x01;
        events.insert(damaged, stored.as_slice()).unwrap();
    });
    let (seen, result) = scan(&|_| Some(true));
    first(&seen, 2_799);
    match result {
        Err(Stop::Log(e)) => assert!(
            e.to_string().contains(&format!("sequence {damaged}")),
            "{e}"
        ),
        other => panic!("the damage is not reported: {other:?}"),
    }
    // `log verify` reads the whole chain ahead the same way, and names the same record.
    refused(
        root.unilab().args(["log", "verify"]),
        5,
        &[
            &format!("fails verification at sequence {damaged}"),
            "do not match its hash",
        ],
    );
}

/// Where no thread can be started (the user's process limit reached, as on a host full of
/// their own training processes), reading ahead falls back to reading on the one thread:
/// `history` of a long subject and `log verify` still work. Root is not held to the limit, so
/// this runs for a user only.
#[test]
fn reading_works_where_no_thread_can_be_started() {
    if is_root() {
        eprintln!(
            "skipped: root is not held to RLIMIT_NPROC; run the tests as a user to check this"
        );
        return;
    }
    let root = TestRoot::new();
    let soak = || Subject::Soak("long".into());
    root.log()
        .append_all(
            (0..1_500).map(|i| (soak(), StoredEvent::SoakSampledV5(Box::new(sample(i, 2))))),
        )
        .unwrap();
    // One process at most for this user: every fork and every new thread is refused.
    fn one_process() -> std::io::Result<()> {
        let one = rustix::process::Rlimit {
            current: Some(1),
            maximum: Some(1),
        };
        rustix::process::setrlimit(rustix::process::Resource::Nproc, one).map_err(Into::into)
    }
    let limited = |args: &[&str]| {
        let mut cmd = std::process::Command::new(unilab_bin());
        cmd.env_clear()
            .env("PATH", path_with_fixtures())
            .env("HOME", root.root())
            .arg("--root")
            .arg(root.root())
            .args(args);
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(one_process);
        }
        cmd.output().unwrap()
    };
    // The limit bites: a shell under it cannot start a process.
    let mut probe = std::process::Command::new("sh");
    probe.args(["-c", "true & wait"]);
    unsafe {
        use std::os::unix::process::CommandExt;
        probe.pre_exec(one_process);
    }
    let probed = probe.output().unwrap();
    assert!(
        !probed.status.success() || !probed.stderr.is_empty(),
        "the process limit does not bite here: {probed:?}"
    );
    let history = limited(&["history", "--soak", "long"]);
    let stderr = String::from_utf8_lossy(&history.stderr);
    assert!(history.status.success(), "{}: {stderr}", history.status);
    assert_eq!(
        String::from_utf8_lossy(&history.stdout).lines().count(),
        1_500
    );
    let verify = limited(&["log", "verify"]);
    let stderr = String::from_utf8_lossy(&verify.stderr);
    assert!(verify.status.success(), "{}: {stderr}", verify.status);
}

#[test]
fn records_cut_from_the_end_fail_verification() {
    let root = root_with_every_kind();
    let missing = cut_the_last_two_records(&root);
    refused(root.unilab().args(["log", "verify"]), 5, &[&missing]);
}

/// `soak list`/`show` and `mps list`/`status` read projections; they check the log's head too,
/// so a log cut at its end is reported (exit 5) after what can be shown is shown, and no
/// writer hides the cut under a new head.
#[test]
fn commands_that_show_records_report_a_log_cut_at_its_end() {
    let root = root_with_every_kind();
    for args in [&["soak", "list"][..], &["mps", "list"]] {
        root.unilab().args(args).assert().success();
    }
    let missing = cut_the_last_two_records(&root);
    for args in [
        &["soak", "list"][..],
        &["soak", "show", "20261202T124210-3f9a"],
        &["mps", "list"],
        &["mps", "status"],
        &["mps", "doctor"],
    ] {
        refused(root.unilab().args(args), 5, &[missing.as_str()]);
    }
    root.unilab()
        .args(["soak", "list"])
        .assert()
        .code(5)
        .stdout(predicate::str::contains("20261202T124210-3f9a"));
    let appended = root.log().append(Subject::Host, live(1));
    let refused = appended.expect_err("an append over a cut end is refused");
    assert!(
        refused.to_string().contains("fails verification"),
        "{refused}"
    );
    crate::common::refused(
        root.unilab().args(["log", "verify"]),
        5,
        &[missing.as_str()],
    );
}

#[test]
fn a_projection_that_disagrees_with_the_events_fails_verification() {
    let root = TestRoot::new();
    let log = root.log();
    let (subject, started) = every_event_kind().swap_remove(1);
    log.append(subject, started).unwrap();
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .success()
        .stdout(predicate::str::contains("ok: 1 event, chain head"))
        .stdout(predicate::str::contains(
            "(1 daemon, 0 soaks, 0 starting, 0 leases, 1 daemon_job, 1 daemon_limit, 0 soak_ranks_v2)",
        ));
    // A daemon row the events never put there.
    raw_write(&root, |txn| {
        let mut daemons = txn.open_table(Daemons::TABLE).unwrap();
        let mut record = Daemons::rows(&log.snapshot().unwrap()).unwrap().remove(0);
        record.0.pid += 1;
        daemons
            .insert(
                "gpu-0f8e0c2a",
                unilab::testing::codec::encode(&record).unwrap().as_slice(),
            )
            .unwrap();
    });
    refused(
        root.unilab().args(["log", "verify"]),
        5,
        &["the `daemons` projection disagrees with the events at `gpu-0f8e0c2a`"],
    );
}

/// A log is linked into place whole, so an empty `events.redb` is not a log being created: it
/// was truncated or made by something else. It used to be re-initialised silently, discarding
/// the history it stood for; now every command reports it (exit 5) and no writer touches it.
#[test]
fn an_empty_log_file_is_damage_not_a_new_log() {
    let root = TestRoot::new();
    root.damaged_on_purpose();
    private_dir_all(root.log_path().parent().unwrap());
    write_private(&root.log_path(), b"");
    for args in [
        &["history"][..],
        &["log", "verify"],
        &["soak", "list"],
        &["mps", "list"],
    ] {
        refused(root.unilab().args(args), 5, &["the file is empty"]);
    }
    let refused = EventLog::open(&root.log_path(), root.scope(), PROJECTIONS)
        .err()
        .expect("a writer refuses an empty log");
    assert!(
        refused.to_string().contains("the file is empty"),
        "{refused}"
    );
    assert_eq!(
        std::fs::metadata(root.log_path()).unwrap().len(),
        0,
        "left as it was"
    );
}

/// A named pipe at a log's path — another host's under a shared state root, or this host's —
/// was reported as "the file is empty … something else truncated or created it": a pipe's size
/// is 0, and nothing said what it was. It is named for what it is, and never opened (the open
/// of a pipe waits for a writer).
#[test]
fn a_named_pipe_at_a_logs_path_is_named_for_what_it_is_not_called_empty() {
    let root = TestRoot::new();
    root.damaged_on_purpose();
    drop(root.log());
    let uid = nix::unistd::getuid().as_raw().to_string();
    let elsewhere = root.root().join("elsewhere").join(uid);
    private_dir_all(&elsewhere);
    let fifo = |path: &std::path::Path| {
        nix::unistd::mkfifo(path, nix::sys::stat::Mode::S_IRWXU).unwrap();
    };
    fifo(&elsewhere.join("events.redb"));
    let said = "is not a regular file: it is a named pipe (FIFO)";
    let out = root
        .unilab()
        .args(["history", "--all-hosts"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("cannot read the log of host `elsewhere`") && stderr.contains(said),
        "{stderr}"
    );
    assert!(!stderr.contains("empty"), "{stderr}");

    std::fs::remove_file(root.log_path()).unwrap();
    fifo(&root.log_path());
    for args in [
        &["history"][..],
        &["log", "verify"],
        &["soak", "list"],
        &["mps", "list"],
    ] {
        let stderr = refused(root.unilab().args(args), 5, &[said]);
        assert!(!stderr.contains("empty"), "{stderr}");
    }
    let refused = EventLog::open(&root.log_path(), root.scope(), PROJECTIONS)
        .err()
        .expect("a writer refuses a named pipe");
    assert!(refused.to_string().contains(said), "{refused}");
    let kind = std::fs::symlink_metadata(root.log_path())
        .unwrap()
        .file_type();
    assert!(
        std::os::unix::fs::FileTypeExt::is_fifo(&kind),
        "left as it was"
    );
}
