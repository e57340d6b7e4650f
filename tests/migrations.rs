//! Schema versions: the frozen fixture log of every released version opens with the current
//! code, reads back exactly as it did when it was frozen, and accepts new appends; a log of a
//! newer version is refused.
//!
//! To freeze a fixture for a new version, run
//! `UNILAB_FREEZE_FIXTURE=1 cargo test --test integration migrations::freeze_fixture -- --ignored`
//! with the new `SCHEMA_VERSION`, and commit `migrations/fixtures/v<N>/`.

use std::path::{Path, PathBuf};

use crate::common::*;
use predicates::prelude::*;
use unilab::PROJECTIONS;
use unilab::ProcessIdentity;
use unilab::testing::SCHEMA_VERSION;
use unilab::{Event, Scope, StoredEvent, Subject};
use unilab::{EventLog, LogError, LogReader};

mod holds;

fn fixture_scope() -> Scope {
    Scope {
        uid: 1000,
        host: "fixture-host".into(),
    }
}

/// `migrations/fixtures/v<N>`, or under `UNILAB_TEST_MIGRATIONS` when CI runs the tests from a
/// copy.
fn fixture_dir(version: u32) -> PathBuf {
    std::env::var_os("UNILAB_TEST_MIGRATIONS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations"))
        .join(format!("fixtures/v{version}"))
}

/// Copies a frozen log, and the archive files frozen beside it (schema 8 on), to where
/// `root`'s binary looks for the caller's log.
pub(crate) fn install(version: u32, root: &TestRoot) {
    let log = root.log_path();
    let dir = log.parent().unwrap();
    private_dir_all(dir);
    copy_log(&fixture_dir(version).join("events.redb"), &log);
    for entry in std::fs::read_dir(fixture_dir(version)).unwrap() {
        let name = entry.unwrap().file_name();
        let name = name.to_string_lossy();
        if name.starts_with("events.soak-") && name.ends_with(".zst") {
            copy_log(&fixture_dir(version).join(&*name), &dir.join(&*name));
        }
    }
}

/// The soak of [`every_event_kind`] that a frozen fixture (schema 8 on) holds archived: the
/// schema-1 one, whose records are interleaved with another soak's.
const ARCHIVED_IN_FIXTURE: &str = "20261202T124210-3f9a";

/// The soak a frozen fixture (schema 9 on) holds that saw its job's alarm.
const JOB_SOAK_IN_FIXTURE: &str = "20261207T090000-a1a1";

/// The soak a frozen fixture (schema 10 on) holds whose trainer beat.
const HEARTBEAT_SOAK_IN_FIXTURE: &str = "20261208T100000-b10b";

/// The soak a frozen fixture (schema 11 on) holds whose command line is recorded lossily.
const LOSSY_SOAK_IN_FIXTURE: &str = "20261209T110000-b11b";

/// The soak a frozen fixture (schema 12 on) holds whose samples carry their progress.
const NOTED_SOAK_IN_FIXTURE: &str = "20261210T120000-b12b";

/// The soak a frozen fixture (schema 13 on) holds whose start holds the run it joined.
const RUN_SOAK_IN_FIXTURE: &str = "20261211T130000-b13b";

/// The soak a frozen fixture (schema 15 on) holds whose verdict counts the beats not taken as
/// they came.
const COUNTED_SOAK_IN_FIXTURE: &str = "20261213T150000-b15b";

/// The soak a frozen fixture (schema 16 on) holds whose evidence holds its rank's collectives.
const COLLECTIVES_SOAK_IN_FIXTURE: &str = "20261214T160000-b16b";

/// The soak a frozen fixture (schema 8 on) holds with its samples packed.
const PACKED_IN_FIXTURE: &str = "20261206T080000-c8c8";

#[test]
#[ignore = "writes a new frozen fixture; run by hand when releasing a schema version"]
fn freeze_fixture() {
    if std::env::var_os("UNILAB_FREEZE_FIXTURE").is_none() {
        return;
    }
    let dir = fixture_dir(SCHEMA_VERSION);
    private_dir_all(&dir);
    let path = dir.join("events.redb");
    let _ = std::fs::remove_file(&path);
    let clock = SteppingClock::boxed(1_764_676_800_000_000, 1_000_000);
    let log = EventLog::open_with_clock(&path, fixture_scope(), PROJECTIONS, clock).unwrap();
    log.append_all(every_event_kind()).unwrap();
    // Schema 8: a soak long enough that its samples are stored packed, past a sample stored
    // whole, its tree growing and shrinking.
    let supervisor = ProcessIdentity {
        pid: 5000,
        start_ticks: 1_000_000,
    };
    log.append_all(measured_soak(
        PACKED_IN_FIXTURE,
        70,
        |i| 2 + (i % 5) as u32,
        supervisor,
    ))
    .unwrap();
    // Schema 9: a rank of a job that saw another rank's alarm and stopped.
    log.append_all(job_soak(JOB_SOAK_IN_FIXTURE, supervisor))
        .unwrap();
    // Schema 10: a soak whose trainer beat, its samples' beats packed.
    log.append_all(heartbeat_soak(HEARTBEAT_SOAK_IN_FIXTURE, supervisor))
        .unwrap();
    // Schema 11: a soak whose command was given an argument that is not UTF-8.
    log.append_all(lossy_soak(LOSSY_SOAK_IN_FIXTURE, supervisor))
        .unwrap();
    // Schema 12: a soak whose samples carry the progress their supervisor decided.
    log.append_all(noted_soak(NOTED_SOAK_IN_FIXTURE, supervisor))
        .unwrap();
    // Schema 13: a rank of a job's run, stopped by another rank's alarm.
    log.append_all(run_soak(RUN_SOAK_IN_FIXTURE, supervisor))
        .unwrap();
    // Schema 15: a soak whose verdict counts the beats not taken as they came.
    log.append_all(counted_soak(COUNTED_SOAK_IN_FIXTURE, supervisor))
        .unwrap();
    // Schema 16: a rank whose evidence holds its collectives.
    log.append_all(collectives_soak(COLLECTIVES_SOAK_IN_FIXTURE, supervisor))
        .unwrap();
    drop(log);
    // An archived soak: its records in an archive file beside the log, frozen with it.
    let log = EventLog::open_alone(&path, fixture_scope(), PROJECTIONS).unwrap();
    let archived = unilab::testing::archive_soaks(&log, &[ARCHIVED_IN_FIXTURE.to_owned()]).unwrap();
    assert_eq!(archived.len(), 1, "{archived:?}");
    log.compact().unwrap();
    drop(log);
    let root = TestRoot::new();
    install(SCHEMA_VERSION, &root);
    let history = root.unilab().args(["history", "--json"]).output().unwrap();
    std::fs::write(dir.join("history.jsonl"), history.stdout).unwrap();
    // Each finished soak's artifact, as this version renders it.
    let list = root
        .unilab()
        .args(["--json", "soak", "list"])
        .output()
        .unwrap();
    let soaks: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    for soak in soaks.as_array().unwrap() {
        if soak["outcome"]["status"] == "abandoned" {
            continue;
        }
        let id = soak["soak_id"].as_str().unwrap();
        let artifact = root.unilab().args(["soak", "export", id]).output().unwrap();
        assert!(artifact.status.success(), "{artifact:?}");
        std::fs::write(dir.join(format!("artifact-{id}.json")), artifact.stdout).unwrap();
    }
}

/// The sequence of the last event of the frozen fixture of `version`: the last line of its
/// history (an archived soak's records leave gaps before it).
fn fixture_head(version: u32) -> u64 {
    let history = std::fs::read_to_string(fixture_dir(version).join("history.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(history.lines().last().unwrap()).unwrap();
    last["seq"].as_u64().unwrap()
}

/// How many events the frozen fixture of `version` holds: one line of its history each.
fn fixture_events(version: u32) -> usize {
    std::fs::read_to_string(fixture_dir(version).join("history.jsonl"))
        .unwrap()
        .lines()
        .count()
}

/// Read by the test user, a fixture (recorded for uid 1000 on `fixture-host`) is another
/// scope's log: it is read as it is — never migrated, never written — and verifies at its own
/// version. Opening it for appending in its own scope migrates it (below).
#[test]
fn every_frozen_fixture_reads_back_as_it_was_frozen() {
    for version in 1..=SCHEMA_VERSION {
        let root = TestRoot::new();
        install(version, &root);
        let frozen = std::fs::read(root.log_path()).unwrap();
        let expected = std::fs::read_to_string(fixture_dir(version).join("history.jsonl")).unwrap();
        root.unilab()
            .args(["history", "--json"])
            .assert()
            .success()
            .stdout(expected);
        root.unilab()
            .args(["log", "verify"])
            .assert()
            .success()
            .stdout(predicate::str::contains(format!(
                "{} events",
                fixture_events(version)
            )))
            .stdout(predicate::str::contains(format!(
                "schema version {version}"
            )));
        assert!(
            std::fs::read(root.log_path()).unwrap() == frozen,
            "v{version}: reading another scope's log wrote to it"
        );
    }
}

/// A soak recorded by an older version exports exactly the artifact that version wrote: the
/// frozen `artifact-<id>.json` beside each fixture that has one.
#[test]
fn every_frozen_soak_exports_its_frozen_artifact() {
    let mut checked = 0;
    for version in 1..=SCHEMA_VERSION {
        let Ok(entries) = std::fs::read_dir(fixture_dir(version)) else {
            continue;
        };
        for entry in entries.map(Result::unwrap) {
            let name = entry.file_name().into_string().unwrap();
            let Some(id) = name
                .strip_prefix("artifact-")
                .and_then(|n| n.strip_suffix(".json"))
            else {
                continue;
            };
            let root = TestRoot::new();
            install(version, &root);
            let frozen = std::fs::read(entry.path()).unwrap();
            let exported = root.unilab().args(["soak", "export", id]).output().unwrap();
            assert!(
                exported.status.success(),
                "v{version} soak {id}: {exported:?}"
            );
            assert!(
                exported.stdout == frozen,
                "v{version} soak {id} no longer exports its frozen artifact"
            );
            checked += 1;
        }
    }
    assert!(checked >= 1, "no frozen artifact found");
}

#[test]
fn a_frozen_fixture_opens_for_appending_with_the_current_code() {
    for version in 1..=SCHEMA_VERSION {
        let root = TestRoot::new();
        install(version, &root);
        let log = EventLog::open(&root.log_path(), fixture_scope(), PROJECTIONS).unwrap();
        let appended = log
            .append(
                Subject::Host,
                Event::DaemonVerifiedLive {
                    process: ProcessIdentity {
                        pid: 1,
                        start_ticks: 2,
                    },
                },
            )
            .unwrap();
        assert_eq!(appended.seq, fixture_head(version) + 1);
        let report = log.snapshot().unwrap().verify(PROJECTIONS).unwrap();
        assert_eq!(report.schema_version, SCHEMA_VERSION);
        assert_eq!(report.scope, Some(fixture_scope()));
    }
}

#[test]
fn a_log_of_a_newer_schema_is_refused() {
    let root = TestRoot::new();
    root.damaged_on_purpose();
    install(1, &root);
    {
        let mut builder = redb::Builder::new();
        builder.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
        let db = builder.open(root.log_path()).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(unilab::testing::tables::META).unwrap();
            let newer = unilab::testing::codec::encode(&(SCHEMA_VERSION + 1)).unwrap();
            meta.insert(
                unilab::testing::tables::SCHEMA_VERSION_KEY,
                newer.as_slice(),
            )
            .unwrap();
        }
        txn.commit().unwrap();
    }
    let err = LogReader::open(&root.log_path(), &root.scope())
        .err()
        .expect("refused");
    assert!(matches!(err, LogError::NewerSchema { found, .. } if found == SCHEMA_VERSION + 1));
    let err = EventLog::open(&root.log_path(), fixture_scope(), PROJECTIONS)
        .err()
        .expect("refused");
    assert!(matches!(err, LogError::NewerSchema { .. }));
    refused(
        root.unilab().arg("history"),
        5,
        &[
            &format!(
                "has schema version {}; this unilab reads up to {SCHEMA_VERSION}",
                SCHEMA_VERSION + 1
            ),
            "hint: use the unilab version that wrote this log",
        ],
    );
}

/// Both schemas' soaks export as CSV: one row per sample and GPU, unknowns empty.
#[test]
fn frozen_soaks_export_as_csv_too() {
    let root = TestRoot::new();
    install(SCHEMA_VERSION, &root);
    for id in ["20261202T124210-3f9a", "20261202T130000-5b7c"] {
        let json: serde_json::Value = serde_json::from_slice(
            &root
                .unilab()
                .args(["soak", "export", id])
                .assert()
                .success()
                .get_output()
                .stdout,
        )
        .unwrap();
        let out = root
            .unilab()
            .args(["soak", "export", id, "--format", "csv"])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let mut reader = csv::Reader::from_reader(out.as_slice());
        let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
        assert_eq!(header[0], "soak_id");
        assert_eq!(header.last().unwrap(), "errors");
        let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
        assert!(!rows.is_empty(), "{id}: no row");
        let expected: usize = json["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["gpus"].as_array().map_or(1, |g| g.len().max(1)))
            .sum();
        assert_eq!(rows.len(), expected, "{id}");
        assert!(rows.iter().all(|r| &r[0] == id));
    }
}

/// A clock that reads, in turn, the times a log's records were recorded at.
struct Replay(std::sync::Mutex<std::vec::IntoIter<i64>>);

impl unilab::Clock for Replay {
    fn now_us(&self) -> i64 {
        self.0
            .lock()
            .unwrap()
            .next()
            .expect("a time for every record")
    }
}

/// `history --json` without the hashes, which cover the bytes a record is stored in.
fn without_hashes(history: &[u8]) -> Vec<serde_json::Value> {
    serde_json::Deserializer::from_slice(history)
        .into_iter::<serde_json::Value>()
        .map(|line| {
            let mut line = line.unwrap();
            let fields = line.as_object_mut().unwrap();
            assert!(fields.remove("hash").is_some() && fields.remove("prev_hash").is_some());
            line
        })
        .collect()
}

/// Compact samples change nothing a reader is given: the frozen logs whose samples are stored
/// whole (schemas 6 and 7), their events appended again by this version (which stores them
/// packed), replay, export and show as they were frozen, byte for byte — the hashes aside,
/// which commit to the bytes stored (history's `hash` and `prev_hash`, an artifact's
/// `log.chain_hash` and the `digest` over it).
#[test]
fn a_frozen_log_recorded_again_with_packed_samples_reads_the_same() {
    for version in [6, 7] {
        let old = TestRoot::new();
        install(version, &old);
        let reader = LogReader::open(&old.log_path(), &old.scope())
            .unwrap()
            .unwrap();
        let mut events = Vec::new();
        let mut times = Vec::new();
        // The events as they are stored, in the forms their version wrote.
        reader
            .snapshot()
            .unwrap()
            .scan_sized(|record, _| {
                times.push(record.envelope.recorded_at_us);
                events.push((record.envelope.subject, record.envelope.event));
                Ok(())
            })
            .unwrap();
        let new = TestRoot::new();
        private_dir_all(new.log_path().parent().unwrap());
        let clock = Box::new(Replay(std::sync::Mutex::new(times.into_iter())));
        let log = EventLog::open_with_clock(&new.log_path(), fixture_scope(), PROJECTIONS, clock)
            .unwrap();
        log.append_all(events).unwrap();
        let mut packed = 0;
        log.snapshot()
            .unwrap()
            .scan_sized(|record, _| {
                // Packed in the form of the schema they were written in.
                packed += usize::from(matches!(
                    record.envelope.event,
                    StoredEvent::SoakSampledCompactV9(_)
                ));
                Ok(())
            })
            .unwrap();
        drop(log);
        assert!(packed >= 2, "v{version}: {packed} samples stored packed");

        let history = |root: &TestRoot| {
            root.unilab()
                .args(["history", "--json"])
                .assert()
                .success()
                .get_output()
                .stdout
                .clone()
        };
        let frozen = std::fs::read(fixture_dir(version).join("history.jsonl")).unwrap();
        assert_eq!(history(&old), frozen, "v{version}");
        assert_eq!(
            without_hashes(&history(&new)),
            without_hashes(&frozen),
            "v{version}"
        );
        let list = new
            .unilab()
            .args(["--json", "soak", "list"])
            .output()
            .unwrap();
        let soaks: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
        let soaks = soaks.as_array().unwrap();
        assert!(soaks.len() >= 3, "v{version}: {soaks:?}");
        for soak in soaks {
            let id = soak["soak_id"].as_str().unwrap();
            for args in [
                &["soak", "export", id][..],
                &["soak", "export", id, "--format", "csv"],
                &["soak", "show", id],
                &["history", "--soak", id, "--json"],
            ] {
                let was = old.unilab().args(args).output().unwrap();
                let is = new.unilab().args(args).output().unwrap();
                assert_eq!(was.status.code(), is.status.code(), "v{version} {args:?}");
                if args[0] == "history" {
                    assert_eq!(without_hashes(&is.stdout), without_hashes(&was.stdout));
                } else if args.len() == 3 && args[1] == "export" {
                    // The artifact quotes the chain's hash at its end, and its digest covers it.
                    let was = String::from_utf8(was.stdout).unwrap();
                    let is = String::from_utf8(is.stdout).unwrap();
                    let mut rehashed = was.clone();
                    for hash in [&["digest"][..], &["log", "chain_hash"]] {
                        let of = |artifact: &str| {
                            let json: serde_json::Value = serde_json::from_str(artifact).unwrap();
                            let hash = hash.iter().fold(&json, |v, k| &v[k]);
                            hash.as_str().unwrap().to_owned()
                        };
                        rehashed = rehashed.replace(&of(&was), &of(&is));
                    }
                    assert_eq!(is, rehashed, "v{version} {args:?}");
                } else {
                    assert_eq!(
                        String::from_utf8_lossy(&is.stdout),
                        String::from_utf8_lossy(&was.stdout),
                        "v{version} {args:?}"
                    );
                }
            }
        }
    }
}
