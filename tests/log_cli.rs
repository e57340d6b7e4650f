//! `unilab history` and `unilab log verify` on real logs: good ones, tampered ones, files that
//! are not logs, and logs of another user or host.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::common::*;
use predicates::prelude::*;
use unilab::Clock;
use unilab::EVENT_KINDS;
use unilab::Projection;
use unilab::testing::Error;
use unilab::testing::Exit;
use unilab::testing::SCHEMA_VERSION;
use unilab::{Daemons, PROJECTIONS};
use unilab::{Event, Scope, StoredEvent, Subject};
use unilab::{EventLog, LogError};

/// A clock that starts at 2025-12-02 12:00:00 UTC and advances 1.5 s a reading.
fn fixed_clock() -> Box<dyn Clock> {
    SteppingClock::boxed(1_764_676_800_000_000, 1_500_000)
}

/// A root whose log holds one event of every kind, recorded by a fixed clock.
fn root_with_every_kind() -> TestRoot {
    let root = TestRoot::new();
    let log = EventLog::open_with_clock(&root.log_path(), root.scope(), PROJECTIONS, fixed_clock())
        .unwrap();
    log.append_all(every_event_kind()).unwrap();
    root
}

#[test]
fn history_prints_a_readable_timeline() {
    let root = root_with_every_kind();
    let output = root
        .unilab()
        .arg("history")
        .assert()
        .success()
        .get_output()
        .clone();
    assert!(
        output.stderr.is_empty(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    insta::assert_snapshot!(String::from_utf8(output.stdout).unwrap());
}

#[test]
fn history_json_is_one_object_a_line_with_every_kind() {
    let root = root_with_every_kind();
    let output = root
        .unilab()
        .args(["history", "--json"])
        .assert()
        .success()
        .get_output()
        .clone();
    let lines: Vec<serde_json::Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON object"))
        .collect();
    let kinds: Vec<&str> = every_event_kind().iter().map(|(_, e)| e.kind()).collect();
    let mut distinct = kinds.clone();
    distinct.sort();
    distinct.dedup();
    // A `soak_archived` is made by `log archive` moving a soak's records, never appended as
    // such: the `log_archive` tests show it.
    let mut all: Vec<&str> = EVENT_KINDS
        .into_iter()
        .filter(|kind| *kind != "soak_archived")
        .collect();
    all.sort();
    assert_eq!(distinct, all, "the sample log holds every kind once");
    assert_eq!(lines.len(), kinds.len());
    for (i, (line, kind)) in lines.iter().zip(kinds).enumerate() {
        assert_eq!(line["seq"], i as u64 + 1);
        assert_eq!(line["kind"], kind);
        assert_eq!(line["hash"].as_str().unwrap().len(), 64);
        assert!(line["recorded_at"].as_f64().unwrap() > 1.7e9);
        assert!(line["subject"].is_string());
    }
    // Each record links to the one before it.
    for pair in lines.windows(2) {
        assert_eq!(pair[1]["prev_hash"], pair[0]["hash"]);
    }
    // The event's own fields are flattened into the object.
    assert_eq!(lines[1]["record"]["pid"], 4242);
    assert_eq!(lines[1]["foreground"], false);
    assert_eq!(lines[5]["reason"], "pid_reused");
    assert_eq!(lines[0]["topology_mode"], "single_gpu");
}

/// `history --json` showed a soak start's runtime snapshot as a string of JSON inside the JSON
/// (`"runtime_json": "{\"software\":…}"`), the one field a script had to parse twice: the event
/// stores it as text so that artifacts embed it byte for byte, and the view passed that through.
#[test]
fn history_json_shows_the_runtime_snapshot_as_an_object() {
    let root = root_with_every_kind();
    let output = root
        .unilab()
        .args(["history", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let starts: Vec<serde_json::Value> = String::from_utf8(output)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|line| line["kind"] == "soak_started")
        .collect();
    // Every recorded form of the start: schema 1's, 4's, 5's and 6's.
    let versions: Vec<&str> = starts
        .iter()
        .map(|start| start["runtime"]["software"]["unilab"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["0.1.0", "0.2.0", "0.3.0", "0.4.0"], "{starts:?}");
    for start in &starts {
        assert!(start.get("runtime_json").is_none(), "{start}");
    }
}

#[test]
fn history_filters_by_subject_and_sequence() {
    let root = root_with_every_kind();
    let kinds = |args: &[&str]| history_kinds(root.unilab(), args);
    assert_eq!(
        kinds(&["--daemon", "gpu-0f8e0c2a"]),
        [
            "topology_resolved",
            "daemon_started",
            "daemon_verified_live",
            "daemon_stopped"
        ]
    );
    assert_eq!(
        kinds(&["--soak", "20261202T124210-3f9a"]),
        [
            "soak_started",
            "soak_sampled",
            "soak_finished",
            "artifact_written"
        ]
    );
    assert_eq!(
        kinds(&["--since", "10"]),
        [
            "soak_abandoned",
            "artifact_written",
            "soak_started",
            "soak_sampled",
            "soak_sampled",
            "soak_finished",
            "artifact_written",
            "soak_started",
            "soak_sampled",
            "soak_evidence_captured",
            "soak_finished",
            "artifact_written",
            "soak_started",
            "soak_sampled",
            "soak_sampled",
            "soak_sampled",
            "soak_finished",
            "daemon_starting",
            "lease_acquired",
            "lease_released"
        ]
    );
    assert_eq!(
        kinds(&["--daemon", "gpu-0f8e0c2a", "--since", "3"]),
        ["daemon_verified_live", "daemon_stopped"]
    );
    root.unilab()
        .args(["history", "--daemon", "nobody"])
        .assert()
        .code(3);
    root.unilab()
        .args(["history", "--soak", "a", "--daemon", "b"])
        .assert()
        .code(2);
}

#[test]
fn history_into_a_closed_pipe_ends_quietly() {
    let root = TestRoot::new();
    root.log()
        .append_all((0..2_000).map(|i| (Subject::Host, live(i))))
        .unwrap();
    let script = format!(
        "'{}' --root '{}' history | head -n 1 >/dev/null; echo \"${{PIPESTATUS[0]}}\"",
        unilab_bin().display(),
        root.root().display()
    );
    let output = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "0");
    assert!(
        output.stderr.is_empty(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn history_follow_prints_events_as_they_are_appended() {
    let root = TestRoot::new();
    let log = root.log();
    log.append(Subject::Host, live(1)).unwrap();
    let mut follower = std::process::Command::new(unilab_bin())
        .args(["--root"])
        .arg(root.root())
        .args(["history", "--follow", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(follower.stdout.take().unwrap()).lines();
    let first: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["seq"], 1);
    // Each append is followed before the next is made.
    for seq in 2..=4 {
        log.append(Subject::Daemon("d".into()), live(seq)).unwrap();
        let line: serde_json::Value =
            serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(line["seq"], seq);
        assert_eq!(line["process"]["pid"], seq);
    }
    follower.kill().unwrap();
    follower.wait().unwrap();
}

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
        .stdout(predicate::str::starts_with("ok: 29 events, chain head "))
        .stdout(predicate::str::contains(
            "(0 daemons, 4 soaks, 1 starting, 1 lease, 2 daemon_jobs, 1 daemon_limit)",
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
    assert_eq!(report["events"], 29);
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

#[test]
fn a_log_of_another_user_or_host_is_refused_for_writing_and_flagged_for_reading() {
    let root = TestRoot::new();
    let foreign = Scope {
        uid: root.scope().uid + 1,
        host: "another-host".into(),
    };
    EventLog::open(&root.log_path(), foreign.clone(), PROJECTIONS)
        .unwrap()
        .append(Subject::Host, live(1))
        .unwrap();

    let err = EventLog::open(&root.log_path(), root.scope(), PROJECTIONS)
        .err()
        .expect("refused");
    assert!(matches!(&err, LogError::ForeignScope { found, .. } if *found == foreign));
    let err = Error::from(err);
    assert_eq!(err.exit(), Exit::Refused);
    let rendered = err.render(unilab::testing::Palette::PLAIN);
    assert!(rendered.contains("belongs to uid"), "{rendered}");
    assert!(rendered.contains("another-host"), "{rendered}");
    assert!(rendered.contains("hint: "), "{rendered}");

    // Reading is forensics: allowed, with a warning.
    root.unilab()
        .arg("history")
        .assert()
        .success()
        .stdout(predicate::str::contains("daemon_verified_live"))
        .stderr(predicate::str::contains(
            "warning: this log was recorded for uid",
        ));
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .success()
        .stderr(predicate::str::contains("another-host"));
}

#[test]
fn the_log_lives_under_host_and_uid_with_private_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let root = TestRoot::new();
    drop(root.log());
    let paths = root.paths();
    assert_eq!(
        root.log_path(),
        root.root()
            .join(&paths.host)
            .join(paths.uid.to_string())
            .join("events.redb")
    );
    let dir_mode = std::fs::metadata(paths.user_dir())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    let file_mode = std::fs::metadata(root.log_path())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);
    assert_eq!(file_mode, 0o600);
}

#[test]
fn the_state_root_follows_the_documented_precedence() {
    let root = TestRoot::new();
    let env_root = root.root().join("from-env");
    let xdg = root.root().join("xdg");
    let verbose_path = |cmd: &mut assert_cmd::Command| -> String {
        let out = cmd
            .args(["-v", "log", "verify"])
            .assert()
            .success()
            .get_output()
            .stderr
            .clone();
        String::from_utf8(out).unwrap()
    };
    let mut cmd = assert_cmd::Command::new(unilab_bin());
    cmd.env_clear()
        .env("HOME", root.root())
        .env("UNILAB_ROOT", &env_root)
        .env("XDG_STATE_HOME", &xdg);
    assert!(verbose_path(&mut cmd).contains(&env_root.display().to_string()));
    let mut cmd = assert_cmd::Command::new(unilab_bin());
    cmd.env_clear()
        .env("HOME", root.root())
        .env("XDG_STATE_HOME", &xdg);
    assert!(verbose_path(&mut cmd).contains(&xdg.join("unilab").display().to_string()));
    let mut cmd = assert_cmd::Command::new(unilab_bin());
    cmd.env_clear().env("HOME", root.root());
    assert!(
        verbose_path(&mut cmd).contains(
            &root
                .root()
                .join(".local/state/unilab")
                .display()
                .to_string()
        )
    );
    assert_cmd::Command::new(unilab_bin())
        .env_clear()
        .args(["log", "verify"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("`HOME` is not set"))
        .stderr(predicate::str::contains("hint: pass `--root DIR`"));
}

/// Opens the log's redb file directly, as something other than unilab would.
fn raw_write(root: &TestRoot, change: impl FnOnce(&redb::WriteTransaction)) {
    let mut builder = redb::Builder::new();
    builder.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
    let db = builder.open(root.log_path()).unwrap();
    let txn = db.begin_write().unwrap();
    change(&txn);
    txn.commit().unwrap();
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
        root.unilab()
            .args(["log", "verify"])
            .assert()
            .code(5)
            .stderr(predicate::str::contains(
                "the subject index disagrees with the events",
            ));
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
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .code(5)
        .stderr(predicate::str::contains(format!(
            "fails verification at sequence {damaged}"
        )))
        .stderr(predicate::str::contains("do not match its hash"));
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
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .code(5)
        .stderr(predicate::str::contains(missing));
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
        root.unilab()
            .args(args)
            .assert()
            .code(5)
            .stderr(predicate::str::contains(missing.as_str()));
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
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .code(5)
        .stderr(predicate::str::contains(missing.as_str()));
}

/// Durations too long to compute deadlines with are refused when read (usage error), before
/// anything is done; what a user typed is escaped when unilab repeats it.
#[test]
fn hostile_inputs_are_refused_without_a_panic_or_a_raw_control_byte() {
    let root = root_with_every_kind();
    for (env, args) in [
        (
            None,
            &["mps", "stop", "--all", "--grace", "10000000000000000000"][..],
        ),
        (
            None,
            &[
                "soak",
                "run",
                "--progress-dir",
                "/tmp",
                "--output",
                "/tmp/x.json",
                "--sample-interval",
                "8785h",
                "--",
                "true",
            ],
        ),
        (Some("1e19"), &["mps", "status"]),
        (Some("0"), &["history"]),
    ] {
        let mut cmd = root.unilab();
        if let Some(timeout) = env {
            cmd.env("UNILAB_TOOL_TIMEOUT", timeout);
        }
        cmd.args(args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(
                "is not a duration of at most 366 days",
            ))
            .stderr(predicate::str::contains("panicked").not());
    }
    // Nothing was stopped or recorded by the refused stop.
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .success()
        .stdout(predicate::str::contains("ok: 29 events"));

    for args in [
        &["soak", "show", "\x1b]0;pwn\x07"][..],
        &["mps", "start", "--name", "\x1b]0;pwn\x07"],
        &["mps", "stop", "\x1b[2J"],
    ] {
        let out = root
            .unilab()
            .args(args)
            .assert()
            .failure()
            .get_output()
            .clone();
        assert!(
            !out.stderr.iter().any(|b| *b == 0x1b || *b == 0x07),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    root.unilab()
        .args(["soak", "show", "\x1b]0;pwn\x07"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(
            "no soak `\\u{1b}]0;pwn\\u{7}` is recorded",
        ));
}

/// A log that cannot be reached — a state root that is a file, a read-only log, a directory
/// that cannot be read — is a refusal (exit 3) that says so, not "damage" with advice to move
/// intact history aside (exit 5).
#[test]
fn permission_problems_are_refusals_not_damage() {
    let root = root_with_every_kind();
    let file = root.root().join("a-file");
    std::fs::write(&file, "").unwrap();
    let not_damage = |cmd: &mut assert_cmd::Command| {
        cmd.assert()
            .code(3)
            .stderr(predicate::str::contains("move the file aside").not());
    };
    for args in [
        &["soak", "list"][..],
        &["history"],
        &["log", "verify"],
        &["mps", "list"],
        &["mps", "stop", "--all"],
    ] {
        let mut cmd = assert_cmd::Command::new(unilab_bin());
        cmd.env_clear()
            .env("HOME", root.root())
            .arg("--root")
            .arg(&file);
        not_damage(cmd.args(args));
    }
    if is_root() {
        eprintln!("skipped the permission cases: root reads and writes through file modes");
        return;
    }
    let log = root.log_path();
    let dir = log.parent().unwrap().to_owned();
    let mode = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap()
    };
    mode(&log, 0o400);
    let refused = root
        .unilab()
        .args(["mps", "stop", "--all"])
        .assert()
        .code(3);
    refused.stderr(predicate::str::contains("Permission denied"));
    root.unilab().args(["soak", "list"]).assert().success();
    mode(&log, 0o600);
    mode(&dir, 0o000);
    not_damage(root.unilab().args(["soak", "list"]));
    not_damage(root.unilab().args(["mps", "stop", "--all"]));
    mode(&dir, 0o700);
    root.unilab().args(["log", "verify"]).assert().success();
}

/// A state root others could write to, a directory on the way owned by someone else, or a log
/// others could write: another user could plant a forged log that makes `mps stop` signal a
/// process of the victim's. Refused (exit 3) for reading and writing.
#[test]
fn a_log_others_could_have_written_is_refused() {
    let set_mode = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap()
    };
    let untrusted = |root: &TestRoot, args: &[&str], at: &std::path::Path| {
        root.unilab()
            .args(args)
            .assert()
            .code(3)
            .stderr(predicate::str::contains(format!(
                "refusing the event log: `{}` is not safe",
                at.display()
            )));
    };
    // A shared state root that is not sticky.
    let root = root_with_every_kind();
    let host_dir = root
        .log_path()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_owned();
    set_mode(&host_dir, 0o777);
    for args in [
        &["soak", "list"][..],
        &["mps", "stop", "--all"],
        &["log", "verify"],
    ] {
        untrusted(&root, args, &host_dir);
    }
    // Sticky, as /tmp is: others cannot replace what is below it.
    set_mode(&host_dir, 0o1777);
    root.unilab().args(["log", "verify"]).assert().success();
    set_mode(&host_dir, 0o700);
    // A log file others can write to.
    set_mode(&root.log_path(), 0o666);
    untrusted(&root, &["soak", "list"], &root.log_path());
    set_mode(&root.log_path(), 0o600);
    if !is_root() {
        eprintln!("skipped the foreign-owner cases: giving a file away needs root");
        return;
    }
    // A directory on the way, and a symbolic link in the log's place, owned by another user.
    let nobody = Some(nix::unistd::Uid::from_raw(65534));
    nix::unistd::chown(&host_dir, nobody, None).unwrap();
    untrusted(&root, &["mps", "stop", "--all"], &host_dir);
    nix::unistd::chown(&host_dir, Some(nix::unistd::getuid()), None).unwrap();
    let real = root.log_path().with_file_name("real.redb");
    std::fs::rename(root.log_path(), &real).unwrap();
    std::os::unix::fs::symlink(&real, root.log_path()).unwrap();
    nix::unistd::fchownat(
        nix::fcntl::AT_FDCWD,
        &root.log_path(),
        nobody,
        None,
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .unwrap();
    untrusted(&root, &["soak", "list"], &root.log_path());
}

/// Under `--json` a failure is one JSON object on standard error — message, causes, hint and
/// exit code — and standard output stays empty: a script never parses prose.
#[test]
fn failures_under_json_are_one_json_object() {
    let root = root_with_every_kind();
    for (args, code, says) in [
        (
            &["--json", "soak", "show", "nope"][..],
            3,
            "no soak `nope` is recorded",
        ),
        (&["--json", "soak", "bogus"], 2, "unrecognized subcommand"),
        (
            &["--json", "mps", "stop", "--grace", "forever"],
            2,
            "invalid value",
        ),
    ] {
        let out = root
            .unilab()
            .args(args)
            .assert()
            .code(code)
            .get_output()
            .clone();
        assert!(out.stdout.is_empty(), "{args:?}");
        let error: serde_json::Value = serde_json::from_slice(&out.stderr)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(error["exit_code"], code, "{args:?}");
        assert!(
            error["error"].as_str().unwrap().contains(says),
            "{args:?}: {error}"
        );
        assert!(error["hint"].is_string(), "{args:?}: {error}");
        assert!(error["causes"].is_array());
    }
}

/// Usage errors left people guessing: a command given without `--` before it got clap's bare
/// "unexpected argument", under `--json` a missing argument's error stopped at "the following
/// required arguments were not provided:" without naming it, and the hint was always the top
/// level's `--help`. Now the line says where the command goes and which help to read (exit 2).
#[test]
fn usage_errors_say_where_the_command_goes_and_which_help_to_read() {
    let root = TestRoot::new();
    let human = |args: &[&str]| -> String {
        let out = root.unilab().args(args).assert().code(2);
        String::from_utf8(out.get_output().stderr.clone()).unwrap()
    };
    let json = |args: &[&str]| -> serde_json::Value {
        let out = root.unilab().arg("--json").args(args).assert().code(2);
        assert!(out.get_output().stdout.is_empty());
        serde_json::from_slice(&out.get_output().stderr).unwrap()
    };
    let separator = "put `--` before the command to run";

    let text = human(&[
        "soak",
        "run",
        "--progress-dir",
        "p",
        "--output",
        "o",
        "python3",
        "train.py",
    ]);
    assert!(text.contains("unexpected argument 'python3'"), "{text}");
    assert!(
        text.contains(&format!(
            "{separator}: `unilab soak run [OPTIONS] -- CMD [ARGS]...`"
        )),
        "{text}"
    );
    assert!(
        text.contains("For more information, try 'unilab soak run --help'."),
        "{text}"
    );
    let text = human(&["mps", "exec", "python3", "train.py"]);
    assert!(text.contains(separator), "{text}");
    assert!(text.contains("'unilab mps exec --help'"), "{text}");

    // Under --json: the missing argument named, the tip and the subcommand's help in the hint.
    let error = json(&["soak", "run", "--progress-dir", "p", "--output", "o"]);
    assert_eq!(
        error["error"],
        "the following required arguments were not provided: <CMD>..."
    );
    let hint = error["hint"].as_str().unwrap();
    assert!(hint.contains(separator), "{hint}");
    assert!(hint.ends_with("see `unilab soak run --help`"), "{hint}");
    let error = json(&["--root", "soak", "soak", "show"]);
    assert_eq!(
        error["error"],
        "the following required arguments were not provided: <ID>"
    );
    assert_eq!(error["hint"], "see `unilab soak show --help`");

    // No `--` tip where it would mislead: a mistyped flag, a subcommand that runs no command.
    let text = human(&[
        "soak",
        "run",
        "--progress-dir",
        "p",
        "--output",
        "o",
        "--bogus",
        "--",
        "true",
    ]);
    assert!(!text.contains(separator), "{text}");
    let error = json(&["soak", "list", "--stauts", "failed"]);
    let hint = error["hint"].as_str().unwrap();
    assert!(!hint.contains(separator), "{hint}");
    assert!(
        hint.contains("'--status'"),
        "clap's suggestion is kept: {hint}"
    );
    assert!(hint.ends_with("see `unilab soak list --help`"), "{hint}");
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
            "(1 daemon, 0 soaks, 0 starting, 0 leases, 1 daemon_job, 1 daemon_limit)",
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
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .code(5)
        .stderr(predicate::str::contains(
            "the `daemons` projection disagrees with the events at `gpu-0f8e0c2a`",
        ));
}

/// A log is linked into place whole, so an empty `events.redb` is not a log being created: it
/// was truncated or made by something else. It used to be re-initialised silently, discarding
/// the history it stood for; now every command reports it (exit 5) and no writer touches it.
#[test]
fn an_empty_log_file_is_damage_not_a_new_log() {
    let root = TestRoot::new();
    private_dir_all(root.log_path().parent().unwrap());
    write_private(&root.log_path(), b"");
    for args in [
        &["history"][..],
        &["log", "verify"],
        &["soak", "list"],
        &["mps", "list"],
    ] {
        root.unilab()
            .args(args)
            .assert()
            .code(5)
            .stderr(predicate::str::contains("the file is empty"));
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

/// Completions for every shell and the man page come from the command-line definitions: each
/// is non-empty and names every subcommand; the man page leaves out the hidden guard.
#[test]
fn completions_and_the_man_page_name_every_subcommand() {
    let root = TestRoot::new();
    let top = [
        "mps",
        "soak",
        "snapshot",
        "history",
        "log",
        "completions",
        "man",
    ];
    let nested = [
        "start", "stop", "plan", "doctor", "exec", "run", "show", "export", "verify",
    ];
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = root
            .unilab()
            .args(["completions", shell])
            .assert()
            .success();
        let script = String::from_utf8(out.get_output().stdout.clone()).unwrap();
        assert!(script.len() > 1000, "{shell}: {} bytes", script.len());
        for name in top.iter().chain(&nested) {
            assert!(script.contains(name), "{shell} completes no `{name}`");
        }
    }
    let out = root.unilab().arg("man").assert().success();
    let page = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(page.contains(".TH unilab 1"), "{page}");
    for name in top {
        assert!(page.contains(name), "the man page names no `{name}`");
    }
    assert!(!page.contains("soak-guard"));
    root.unilab().args(["completions", "tcsh"]).assert().code(2);
}

/// `soak list` as a table: columns as wide as their widest cell, failed soaks with their kind,
/// commands shell-quoted so that they can be copied and run.
#[test]
fn soak_list_is_a_table_with_quoted_commands() {
    let root = root_with_every_kind();
    let output = root
        .unilab()
        .args(["soak", "list"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    insta::assert_snapshot!(String::from_utf8(output).unwrap());
}

/// What the binary offers when the shell asks it to complete `words` (the line typed so far, the
/// word being completed last), as the script of `COMPLETE=bash unilab` asks: its exit code,
/// candidates one a line, and its standard error.
fn shell_asks(
    root: &TestRoot,
    words: &[&str],
    env: &[(&str, &std::path::Path)],
) -> (i32, Vec<String>, String) {
    let mut cmd = assert_cmd::Command::new(unilab_bin());
    cmd.env_clear()
        .env("PATH", path_with_fixtures())
        .env("HOME", root.root())
        .env("COMPLETE", "bash")
        .env("_CLAP_COMPLETE_INDEX", (words.len() - 1).to_string())
        .env("_CLAP_COMPLETE_COMP_TYPE", "9")
        .env("_CLAP_COMPLETE_SPACE", "true")
        .env("_CLAP_IFS", "\n")
        .envs(env.iter().copied())
        .arg("--")
        .args(words);
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Completions offered subcommands and flags only: the soak ids and daemon names a command takes
/// had to be looked up and pasted. The binary now answers the shell's dynamic completion with
/// what the log records, read without writing it, and offers nothing — silently — when the log
/// cannot be read. The static scripts of `unilab completions SHELL` stay as they were.
#[test]
fn dynamic_completion_offers_recorded_soak_ids_and_daemon_names() {
    let root = root_with_every_kind();
    let (_, started) = every_event_kind()
        .into_iter()
        .find(|(_, event)| matches!(event, StoredEvent::DaemonStarted { .. }))
        .unwrap();
    let StoredEvent::DaemonStarted {
        mut record,
        foreground,
        job,
        limits,
    } = started
    else {
        unreachable!()
    };
    record.name = "trainer".into();
    root.log()
        .append_all([(
            Subject::Daemon("trainer".into()),
            StoredEvent::DaemonStarted {
                record,
                foreground,
                job,
                limits,
            },
        )])
        .unwrap();
    let log_before = std::fs::read(root.log_path()).unwrap();
    let root_dir = root.root().to_str().unwrap();

    let (code, offered, stderr) = shell_asks(
        &root,
        &["unilab", "--root", root_dir, "soak", "show", ""],
        &[],
    );
    assert_eq!((code, stderr.as_str()), (0, ""));
    for id in ["20261202T124210-3f9a", "20261205T100000-f6f6", "latest"] {
        assert!(offered.iter().any(|o| o == id), "{id} not in {offered:?}");
    }
    // By the random part too, as `soak show` takes it.
    let (_, offered, _) = shell_asks(
        &root,
        &["unilab", "--root", root_dir, "soak", "export", "3f"],
        &[],
    );
    assert_eq!(offered, ["20261202T124210-3f9a"]);
    // The state root from the environment, as for any command.
    let (_, offered, _) = shell_asks(
        &root,
        &["unilab", "mps", "stop", ""],
        &[("UNILAB_ROOT", root.root())],
    );
    // The daemon recorded as running, not the one recorded as stopped (beside the flags).
    assert!(offered.iter().any(|o| o == "trainer"), "{offered:?}");
    assert!(!offered.iter().any(|o| o == "gpu-0f8e0c2a"), "{offered:?}");
    let (_, offered, _) = shell_asks(
        &root,
        &["unilab", "--root", root_dir, "history", "--daemon", "tr"],
        &[],
    );
    assert_eq!(offered, ["trainer"]);
    // Subcommands are still completed.
    let (_, offered, _) = shell_asks(&root, &["unilab", "soak", "sh"], &[]);
    assert_eq!(offered, ["show"]);
    assert_eq!(
        std::fs::read(root.log_path()).unwrap(),
        log_before,
        "the log is only read"
    );

    // A log that cannot be read: nothing recorded is offered, and nothing is said.
    let broken = TestRoot::new();
    std::fs::create_dir_all(broken.log_path().parent().unwrap()).unwrap();
    write_private(&broken.log_path(), b"not a log at all");
    let broken_dir = broken.root().to_str().unwrap();
    let (code, offered, stderr) = shell_asks(
        &broken,
        &["unilab", "--root", broken_dir, "soak", "show", ""],
        &[],
    );
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert!(
        offered.iter().all(|o| o == "latest" || o.starts_with("--")),
        "{offered:?}"
    );

    // The script a shell sources to turn it on.
    let out = assert_cmd::Command::new(unilab_bin())
        .env("COMPLETE", "bash")
        .assert()
        .success();
    let script = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(script.contains("complete -o nospace"), "{script}");
    assert!(script.contains("COMPLETE=\"bash\""), "{script}");
}

/// The subcommands `unilab ARGS --help` lists, without `help`.
fn listed_subcommands(root: &TestRoot, args: &[&str]) -> Vec<String> {
    let out = root.unilab().args(args).arg("--help").assert().success();
    let help = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    help.lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.is_empty())
        // A command's line starts two spaces in; its wrapped description, further.
        .filter_map(|line| line.strip_prefix("  "))
        .filter(|line| !line.starts_with(' '))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The pages a roff page refers to, `unilab-soak(1)` → `unilab-soak`.
fn page_references(roff: &str) -> Vec<String> {
    let text = roff
        .replace("\\-", "-")
        .replace("\\fB", "")
        .replace("\\fR", "");
    text.match_indices("(1)")
        .map(|(at, _)| {
            let before = &text[..at];
            let start = before
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .map_or(0, |i| i + 1);
            before[start..].to_owned()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// `unilab man` documented the top level only, whose SUBCOMMANDS section names `unilab-soak(1)`,
/// `unilab-help(1)` and others that existed nowhere. `man --dir` writes a page for every command
/// `--help` lists, at every depth, and every page named in any page is one of them.
#[test]
fn man_writes_a_page_for_every_subcommand_and_names_only_those() {
    let root = TestRoot::new();
    let dir = root.root().join("share/man/man1");
    let out = root
        .unilab()
        .args(["man", "--dir"])
        .arg(&dir)
        .assert()
        .success();
    let printed = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    let mut listed: Vec<String> = printed
        .lines()
        .map(|line| line.rsplit('/').next().unwrap().to_owned())
        .collect();
    listed.sort();
    assert_eq!(listed, pages, "stdout names the pages written");

    // One page for each command `--help` lists, the groups' subcommands too.
    let mut expected = vec!["unilab.1".to_owned()];
    for top in listed_subcommands(&root, &[]) {
        expected.push(format!("unilab-{top}.1"));
        for nested in listed_subcommands(&root, &[&top]) {
            expected.push(format!("unilab-{top}-{nested}.1"));
        }
    }
    expected.sort();
    assert_eq!(pages, expected);
    for nested in [
        "unilab-soak-run.1",
        "unilab-mps-start.1",
        "unilab-log-verify.1",
    ] {
        assert!(pages.iter().any(|page| page == nested), "no {nested}");
    }

    let mut referenced = std::collections::BTreeSet::new();
    for page in &pages {
        let roff = std::fs::read_to_string(dir.join(page)).unwrap();
        let name = page.trim_end_matches(".1");
        assert!(roff.contains(&format!(".TH {name} 1")), "{page}: {roff}");
        for reference in page_references(&roff) {
            assert!(
                pages.contains(&format!("{reference}.1")),
                "{page} names `{reference}(1)`, which is not written"
            );
            if reference != name {
                referenced.insert(reference);
            }
        }
        if page != "unilab.1" {
            assert!(roff.contains(".SH \"SEE ALSO\""), "{page}: {roff}");
        }
    }
    // Each page is named by another: a subcommand's by its parent, the top one by SEE ALSO.
    assert_eq!(referenced.len(), pages.len(), "{referenced:?}");

    // Without `--dir`, the top-level page on standard output, as written.
    let out = root.unilab().arg("man").assert().success();
    assert_eq!(
        out.get_output().stdout,
        std::fs::read(dir.join("unilab.1")).unwrap()
    );
    // A directory that cannot be made is refused with its path.
    let file = root.root().join("a-file");
    std::fs::write(&file, "").unwrap();
    root.unilab()
        .args(["man", "--dir"])
        .arg(&file)
        .assert()
        .code(3)
        .stderr(predicate::str::contains(file.display().to_string()));
}

/// `soak list` had no filter: finding yesterday's failures among weeks of soaks meant reading
/// them all. `--status`, `--since` (a duration ago or a date) and `--limit` (the newest N) select,
/// in the table and under `--json` alike, and a bad value is a usage error.
#[test]
fn soak_list_filters_by_status_start_and_count() {
    let root = root_with_every_kind();
    // One more soak, started now by a supervisor that is not running: abandoned when listed.
    let (_, started) = every_event_kind()
        .into_iter()
        .rev()
        .find(|(_, event)| matches!(event, StoredEvent::SoakStarted { .. }))
        .unwrap();
    let StoredEvent::SoakStarted {
        mut start,
        supervision,
        limits,
    } = started
    else {
        unreachable!()
    };
    let recent = "20261205T100000-7a7a";
    start.soak_id = recent.into();
    root.log()
        .append_all([(
            Subject::Soak(recent.into()),
            StoredEvent::SoakStarted {
                start,
                supervision,
                limits,
            },
        )])
        .unwrap();
    let ids = |args: &[&str]| -> Vec<String> {
        let out = root
            .unilab()
            .args(["--json", "soak", "list"])
            .args(args)
            .assert()
            .success();
        let rows: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
        rows.as_array()
            .unwrap()
            .iter()
            .map(|row| row["soak_id"].as_str().unwrap()[16..].to_owned())
            .collect()
    };
    assert_eq!(ids(&[]), ["3f9a", "5b7c", "e5e5", "f6f6", "7a7a"]);
    assert_eq!(
        ids(&["--status", "failed"]),
        ["3f9a", "5b7c", "e5e5", "f6f6"]
    );
    assert_eq!(ids(&["--status", "abandoned"]), ["7a7a"]);
    assert!(ids(&["--status", "passed"]).is_empty());
    // The others were recorded by a clock of 2025-12-02 12:00 UTC, a reading every 1.5 s.
    assert_eq!(ids(&["--since", "1d"]), ["7a7a"]);
    assert_eq!(
        ids(&["--since", "2025-12-02T12:00:20Z"]),
        ["e5e5", "f6f6", "7a7a"]
    );
    assert_eq!(ids(&["--limit", "2"]), ["f6f6", "7a7a"]);
    assert_eq!(ids(&["--status", "failed", "--limit", "1"]), ["f6f6"]);

    // The table is filtered the same way; none left is said on stderr.
    let out = root
        .unilab()
        .args([
            "soak",
            "list",
            "--status",
            "failed",
            "--since",
            "2025-12-02 12:00:20",
        ])
        .assert()
        .success();
    let table = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let rows: Vec<&str> = table.lines().skip(1).map(|l| &l[16..20]).collect();
    assert_eq!(rows, ["e5e5", "f6f6"], "{table}");
    root.unilab()
        .args(["soak", "list", "--status", "passed"])
        .assert()
        .success()
        .stdout("")
        .stderr(predicate::str::contains(
            "no recorded soak matches the filters",
        ));
    for bad in [
        &["--since", "yesterday"][..],
        &["--limit", "0"],
        &["--status", "broken"],
    ] {
        root.unilab()
            .args(["soak", "list"])
            .args(bad)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(bad[1]));
    }
}

/// `soak show` of a failed soak: its verdict and why, the exit, times, progress, peaks and tails.
#[test]
fn soak_show_of_a_failed_soak() {
    let root = root_with_every_kind();
    let output = root
        .unilab()
        .args(["soak", "show", "20261202T124210-3f9a"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    insta::assert_snapshot!(String::from_utf8(output).unwrap());
}

/// The ANSI colour sequences in `text`.
fn colour_codes(text: &str) -> usize {
    text.matches("\x1b[").count()
}

/// Colour is used where it is asked for and a terminal takes it, and nowhere else: statuses in
/// tables (whose columns stay aligned), unilab's errors and clap's, in one palette.
#[test]
fn colour_follows_the_flag_the_terminal_and_no_color() {
    let root = root_with_every_kind();
    let list = |args: &[&str]| {
        let out = root
            .unilab()
            .args(args)
            .args(["soak", "list"])
            .assert()
            .success();
        String::from_utf8(out.get_output().stdout.clone()).unwrap()
    };
    let plain = list(&[]);
    assert_eq!(colour_codes(&plain), 0, "a pipe gets no colour: {plain}");
    assert_eq!(colour_codes(&list(&["--color", "never"])), 0);
    let coloured = list(&["--color=always"]);
    assert!(
        coloured.contains("\x1b[1m\x1b[31mfailed (stale_progress)\x1b[0m"),
        "{coloured:?}"
    );
    // Without its colour codes, the coloured table is the plain one: the codes take no columns.
    let stripped = coloured
        .replace("\x1b[1m\x1b[31m", "")
        .replace("\x1b[0m", "");
    assert_eq!(stripped, plain);

    // On a terminal: colour unless `never`, `NO_COLOR` or a dumb terminal; `always` wins.
    let on_terminal = |env: &[(&str, &str)], args: &[&str]| {
        let args = args.iter().copied().chain(["soak", "list"]);
        let (code, screen) = on_a_terminal(&root, env, args);
        assert_eq!(code, Some(0), "{screen}");
        colour_codes(&screen)
    };
    assert!(on_terminal(&[], &[]) > 0);
    assert_eq!(on_terminal(&[], &["--color", "never"]), 0);
    assert_eq!(on_terminal(&[("NO_COLOR", "1")], &[]), 0);
    assert_eq!(on_terminal(&[("TERM", "dumb")], &[]), 0);
    assert!(on_terminal(&[("NO_COLOR", "1")], &["--color", "always"]) > 0);

    // Errors: unilab's and clap's `error:` in the same red; none under `never`.
    for args in [&["soak", "show", "nope"][..], &["soak", "lst"]] {
        let failed = |colour: &str| {
            let out = root.unilab().arg(colour).args(args).assert().failure();
            String::from_utf8(out.get_output().stderr.clone()).unwrap()
        };
        let red = failed("--color=always");
        assert!(
            red.starts_with("\x1b[1m\x1b[31merror:\x1b[0m "),
            "{args:?}: {red:?}"
        );
        let plain = failed("--color=never");
        assert!(
            plain.starts_with("error: ") && colour_codes(&plain) == 0,
            "{plain:?}"
        );
    }
}

/// Counts read as English: one of a thing is not "1 things".
#[test]
fn counts_of_one_are_singular() {
    let root = TestRoot::new();
    root.log().append(Subject::Host, live(1)).unwrap();
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .success()
        .stdout(predicate::str::contains("ok: 1 event, "));
    let root = root_with_every_kind();
    let show = root
        .unilab()
        .args(["soak", "show", "20261202T124210-3f9a"])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&show.get_output().stdout).into_owned();
    assert!(
        !text.contains(" 1 files") && !text.contains(" 1 samples"),
        "{text}"
    );
}

/// A 44-character daemon name does not shift the other columns of `mps list`.
#[test]
fn mps_list_columns_hold_a_long_name() {
    let root = TestRoot::new();
    let log = root.log();
    let scope = root.scope();
    for (name, job) in [
        ("a", None),
        ("a-daemon-name-that-is-forty-four-characters", None),
        ("job77-gpu-0f8e0c2a", Some("77".to_owned())),
    ] {
        let (_, started) = every_event_kind()
            .into_iter()
            .find(|(_, e)| matches!(e, StoredEvent::DaemonStarted { .. }))
            .unwrap();
        let StoredEvent::DaemonStarted { mut record, .. } = started else {
            unreachable!()
        };
        record.name = name.into();
        record.uid = scope.uid;
        record.host = scope.host.clone();
        record.pipe_directory = format!("/tmp/pipes/{name}");
        // Above the kernel's largest pid, so that no process can have it: the record is stale.
        record.pid = 4_194_400;
        // Three days old, so that its age reads the same in the snapshot whenever it runs.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        record.created_at = now.as_secs_f64() - 3.0 * 86_400.0 - 60.0;
        log.append(
            Subject::Daemon(name.into()),
            StoredEvent::DaemonStarted {
                record,
                foreground: false,
                job,
                limits: Default::default(),
            },
        )
        .unwrap();
    }
    let output = root
        .unilab()
        .args(["mps", "list"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(output).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let pipe_at: Vec<usize> = lines
        .iter()
        .map(|l| {
            l.find("/tmp/pipes/")
                .unwrap_or_else(|| l.find("PIPE").unwrap())
        })
        .collect();
    assert!(pipe_at.windows(2).all(|w| w[0] == w[1]), "{text}");
    let state_at: Vec<usize> = lines[1..]
        .iter()
        .map(|l| l.find("process_gone").unwrap())
        .collect();
    assert!(state_at.windows(2).all(|w| w[0] == w[1]), "{text}");
    insta::assert_snapshot!(text);
}

/// `--help` says what a newcomer needs: the environment, durations, ids, exit codes, and
/// examples for the main commands.
#[test]
fn help_names_the_environment_the_exit_codes_and_gives_examples() {
    let root = TestRoot::new();
    let help = |args: &[&str]| {
        String::from_utf8(
            root.unilab()
                .args(args)
                .arg("--help")
                .assert()
                .success()
                .get_output()
                .stdout
                .clone(),
        )
        .unwrap()
    };
    let top = help(&[]);
    for needed in [
        "UNILAB_ROOT",
        "UNILAB_NVIDIA_SMI",
        "UNILAB_MPS_CONTROL",
        "UNILAB_TOOL_TIMEOUT",
        "1h30m",
        "latest",
        "Exit codes",
        "127 not found",
    ] {
        assert!(top.contains(needed), "`unilab --help` lacks {needed}");
    }
    for args in [&["soak", "run"][..], &["mps", "start"], &["history"]] {
        assert!(help(args).contains("Examples:"), "{args:?}");
    }
}

/// Reading another uid's copied log wrote to it: on a copy left unclean (taken while its writer
/// had it open), `log verify`, `history` and `mps list` repaired the file in place — its hash
/// changed each time — and `soak list`/`show` refused it (exit 3) to record an abandoned soak.
/// A log that is not the caller's own is strictly read-only now: an unclean one is read from a
/// repaired copy, and every command says whose it is.
#[test]
fn a_copied_log_of_another_user_is_read_and_never_written() {
    let root = TestRoot::new();
    let elsewhere = private_tempdir("unilab-elsewhere-");
    let theirs = elsewhere.path().join("events.redb");
    let writer = EventLog::open(
        &theirs,
        Scope {
            uid: 4242,
            host: "their-node".into(),
        },
        PROJECTIONS,
    )
    .unwrap();
    writer.append_all(every_event_kind()).unwrap();
    private_dir_all(root.log_path().parent().unwrap());
    // Copied while its writer has it open: what a writer killed there leaves.
    std::fs::copy(&theirs, root.log_path()).unwrap();
    drop(writer);
    let before = std::fs::read(root.log_path()).unwrap();
    let mut raw = redb::Builder::new();
    raw.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
    assert!(
        matches!(
            raw.open_read_only(root.log_path()),
            Err(redb::DatabaseError::RepairAborted)
        ),
        "the copy is unclean"
    );
    for args in [
        &["log", "verify"][..],
        &["history"],
        &["mps", "list"],
        &["soak", "list"],
        &["soak", "show", "latest"],
        &["soak", "list", "--job", "77"],
    ] {
        let out = root.unilab().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr)
                .matches("uid 4242 on host `their-node`")
                .count(),
            1,
            "{args:?} says once whose log it is: {out:?}"
        );
        assert!(
            std::fs::read(root.log_path()).unwrap() == before,
            "{args:?} wrote to the copied log"
        );
    }
    let out = root.unilab().args(["history"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("soak_started"),
        "its records are shown: {out:?}"
    );
}

/// `history --soak` of an id that names no soak printed nothing and exited 0 while `soak show`
/// said "no soak" with exit 3; `--daemon` of a name never recorded did the same. One rule now:
/// exit 3, saying so (`--follow` still waits for what is not there yet).
#[test]
fn history_of_a_soak_or_daemon_that_is_not_recorded_is_an_error() {
    let root = root_with_every_kind();
    for args in [["--soak", "nosuch"], ["--daemon", "nosuch"]] {
        let output = root.unilab().arg("history").args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(3), "{args:?}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("`nosuch`") && stderr.contains("is recorded"),
            "{args:?}: {stderr}"
        );
    }
    let shown = root
        .unilab()
        .args(["soak", "show", "nosuch"])
        .output()
        .unwrap();
    assert_eq!(shown.status.code(), Some(3), "{shown:?}");
    // A daemon the log knows still prints its events.
    root.unilab()
        .args(["history", "--daemon", "gpu-0f8e0c2a"])
        .assert()
        .success()
        .stdout(predicate::str::contains("daemon_started"));
}

/// Soak ids matched only by prefix, but the part people remember is the random suffix: `soak show
/// f6f6` finds `20261205T100000-f6f6`, and so does `history --soak`.
#[test]
fn a_soak_is_found_by_its_random_suffix() {
    let root = root_with_every_kind();
    root.unilab()
        .args(["soak", "show", "f6f6"])
        .assert()
        .success()
        .stdout(predicate::str::contains("soak:     20261205T100000-f6f6"));
    root.unilab()
        .args(["history", "--soak", "f6"])
        .assert()
        .success()
        .stdout(predicate::str::contains("soak/20261205T100000-f6f6"));
}

/// `log stats` counts what the log holds — events and record bytes by kind, the largest soak —
/// its size on disk, and the room left: the filesystem's free space and the user's quota where
/// `quota` reports one for the state root's filesystem.
#[test]
fn log_stats_tells_the_size_the_largest_soaks_and_the_room_left() {
    let soak = crate::soak::Soak::new();
    let (output, artifact) = soak.run(&[], &["--steps", "3", "--step-seconds", "0.1"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let id = artifact["soak_id"].as_str().unwrap();
    let events = history_kinds(soak.unilab(), &[]).len() as u64;
    let stats = soak
        .unilab()
        .env("FAKE_QUOTA_FS", soak.root.root())
        .env("FAKE_QUOTA_USED_KIB", "1024")
        .env("FAKE_QUOTA_LIMIT_KIB", "4096")
        .args(["--json", "log", "stats"])
        .output()
        .unwrap();
    assert_eq!(stats.status.code(), Some(0), "{stats:?}");
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(stats["events"], events);
    let soaks = stats["by_kind"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "soak")
        .unwrap();
    assert_eq!(stats["largest_soaks"][0]["soak_id"], id);
    assert_eq!(stats["largest_soaks"][0]["bytes"], soaks["bytes"]);
    assert!(stats["record_bytes"].as_u64().unwrap() >= soaks["bytes"].as_u64().unwrap());
    assert!(stats["disk_bytes"].as_u64().unwrap() >= stats["record_bytes"].as_u64().unwrap());
    assert!(stats["filesystem"]["free_bytes"].as_u64().unwrap() > 0);
    assert_eq!(
        stats["quota"],
        serde_json::json!({"used_bytes": 1024 * 1024, "limit_bytes": 4096 * 1024})
    );
    // Without a quota set, none is reported; the text form names the soak.
    let text = soak.unilab().args(["log", "stats"]).output().unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains(id) && !text.contains("quota"), "{text}");
}
