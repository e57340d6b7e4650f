//! `unilab log archive`: finished soaks' records moved to archive files and read back as they
//! were; `log verify` accounting for every gap and catching an archive changed, a record removed
//! without one, and another log's archive; the refusal beside a running soak.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use crate::common::*;
use crate::soak::Soak;
use predicates::prelude::*;
use serde_json::Value;
use unilab::PROJECTIONS;
use unilab::{Event, EventLog, StoredEvent, Subject};

mod damaged;

/// The schema-1 soak of [`every_event_kind`]: its records are interleaved with another soak's.
pub(crate) const V1_SOAK: &str = "20261202T124210-3f9a";
/// The schema-2 soak of [`every_event_kind`].
pub(crate) const V4_SOAK: &str = "20261202T130000-5b7c";

/// A root whose log holds one event of every kind, recorded by a clock that starts at
/// 2025-12-02 12:00:00 UTC and advances `step_us` a reading.
pub(crate) fn root_with_every_kind(step_us: i64) -> TestRoot {
    let root = TestRoot::new();
    let clock = SteppingClock::boxed(1_764_676_800_000_000, step_us);
    let log =
        EventLog::open_with_clock(&root.log_path(), root.scope(), PROJECTIONS, clock).unwrap();
    log.append_all(every_event_kind()).unwrap();
    root
}

/// `unilab ARGS` through `root`, which must succeed: its standard output.
fn stdout_of(root: &TestRoot, args: &[&str]) -> Vec<u8> {
    let output = root.unilab().args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// The JSON object `unilab --json ARGS` prints, whatever its exit code.
pub(crate) fn json_of(root: &TestRoot, args: &[&str]) -> Value {
    let output = root.unilab().arg("--json").args(args).output().unwrap();
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: {e}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The archive file of `soak_id` beside the log of `root`.
pub(crate) fn archive_of(root: &TestRoot, soak_id: &str) -> PathBuf {
    root.log_path()
        .with_file_name(format!("events.soak-{soak_id}.zst"))
}

/// Everything a person reads of soak `id` (and of `other`, beside it): each command's output.
/// The report cites the log's chain head, which any record appended since changes: it is
/// written `HEAD` here.
fn everything_read(root: &TestRoot, id: &str, other: &str) -> Vec<(String, Vec<u8>)> {
    let head = json_of(root, &["log", "verify"])["head"]
        .as_str()
        .unwrap()
        .to_owned();
    let commands: [&[&str]; 12] = [
        &["soak", "export", id],
        &["soak", "export", id, "--format", "csv"],
        &["soak", "show", id],
        &["--json", "soak", "show", id],
        &["history", "--soak", id],
        &["--json", "history", "--soak", id],
        &["soak", "list"],
        &["--json", "soak", "list"],
        &["soak", "compare", id, other],
        &["--json", "soak", "compare", other, id],
        &["soak", "report", id],
        &["--json", "history", "--soak", other],
    ];
    commands
        .iter()
        .map(|args| {
            let mut out = stdout_of(root, args);
            if args[1] == "report" {
                out = String::from_utf8(out)
                    .unwrap()
                    .replace(&head, "HEAD")
                    .into_bytes();
            }
            (args.join(" "), out)
        })
        .collect()
}

#[test]
fn an_archived_soak_reads_back_byte_for_byte_and_the_log_verifies() {
    let soak = Soak::new();
    let root = &soak.root;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (output, artifact) = soak.run(&[], &["--steps", "6", "--step-seconds", "0.1"]);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        ids.push(artifact["soak_id"].as_str().unwrap().to_owned());
    }
    // The soak archived is named by its random part, as `soak show` takes it: one whose four
    // hex digits name it alone (neither the other's nor what an id begins with), chosen from
    // the ids recorded, never assumed of them.
    let random = |id: &str| id.rsplit_once('-').unwrap().1.to_owned();
    let named_alone = |id: &str, other: &str| {
        let part = random(id);
        !id.starts_with(&part) && !other.starts_with(&part) && !random(other).starts_with(&part)
    };
    if !named_alone(&ids[0], &ids[1]) {
        ids.swap(0, 1);
    }
    let (id, other) = (&ids[0], &ids[1]);
    let name = if named_alone(id, other) {
        random(id)
    } else {
        eprintln!(
            "neither random part of {id} and {other} names its soak alone: {id} is named whole"
        );
        id.clone()
    };
    let before = everything_read(root, id, other);
    let live_before = json_of(root, &["log", "verify"])["events"]
        .as_u64()
        .unwrap();

    let archived = json_of(root, &["log", "archive", "--soak", &name]);
    let done = &archived["archived"][0];
    assert_eq!(done["soak_id"], id.as_str(), "{archived}");
    let records = done["records"].as_u64().unwrap();
    assert!(
        records > 6,
        "its start, samples, verdict and artifact: {archived}"
    );
    let file = archive_of(root, id);
    assert_eq!(done["file"], file.display().to_string());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "as private as the log");

    let after = everything_read(root, id, other);
    for ((command, was), (_, is)) in before.iter().zip(&after) {
        assert!(
            was == is,
            "`{command}` changed:\n{}\n---\n{}",
            String::from_utf8_lossy(was),
            String::from_utf8_lossy(is)
        );
    }
    let verified = json_of(root, &["log", "verify"]);
    assert_eq!(verified["ok"], true, "{verified}");
    assert_eq!(
        verified["events"].as_u64().unwrap(),
        live_before - records + 1,
        "its records left, its `soak_archived` came"
    );
    assert_eq!(verified["archives"][0]["checked"], true, "{verified}");
    assert_eq!(verified["archives"][0]["records"], records);
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .success()
        .stdout(predicate::str::contains("archives: 1 archive checked"));

    // The live timeline shows the archive where the soak's records were.
    let kinds = history_kinds(root.unilab(), &[]);
    assert_eq!(kinds.last().map(String::as_str), Some("soak_archived"));
    assert_eq!(kinds.len() as u64, live_before - records + 1);

    // Archived twice: nothing to do.
    root.unilab()
        .args(["log", "archive", "--soak", id])
        .assert()
        .success()
        .stderr(predicate::str::contains(format!(
            "soak {id} is archived already"
        )));
    assert_eq!(everything_read(root, id, other), after);
}

/// A soak whose records were interleaved with others': the live log keeps the others' records
/// between the gaps it leaves, which its event names as runs, and everything reads as before.
#[test]
fn interleaved_records_archive_as_runs_and_the_space_comes_back() {
    let root = root_with_every_kind(1_000_000);
    // Another subject's records after them.
    let log = root.log();
    let samples: Vec<(Subject, StoredEvent)> = (0..200)
        .map(|i| {
            (
                Subject::Soak("samples".into()),
                StoredEvent::SoakSampledV5(Box::new(sample(i, 4))),
            )
        })
        .collect();
    log.append_all(samples).unwrap();
    drop(log);
    let before_v1 = stdout_of(&root, &["--json", "history", "--soak", V1_SOAK]);
    let before_v4 = stdout_of(&root, &["soak", "export", V4_SOAK]);
    let report = json_of(&root, &["log", "archive", "--soak", V1_SOAK]);
    assert_eq!(report["archived"][0]["soak_id"], V1_SOAK, "{report}");
    assert_eq!(
        stdout_of(&root, &["--json", "history", "--soak", V1_SOAK]),
        before_v1
    );
    assert_eq!(stdout_of(&root, &["soak", "export", V4_SOAK]), before_v4);
    root.unilab().args(["log", "verify"]).assert().success();
    let history = stdout_of(&root, &["--json", "history"]);
    let archived: Value = String::from_utf8(history)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|line| line["kind"] == "soak_archived")
        .unwrap();
    assert!(
        archived["runs"].as_array().unwrap().len() > 1,
        "its records came in more than one run: {archived}"
    );
    assert_eq!(archived["records_digest"].as_str().unwrap().len(), 64);
    assert_eq!(archived["soak"]["status"], "failed", "as its verdict said");
}

/// A soak recorded in December 2025, started and sampled twice, its supervisor long gone: its
/// id.
fn abandoned_in_december(root: &TestRoot) -> &'static str {
    let (_, started) = every_event_kind()
        .into_iter()
        .find(|(_, event)| matches!(event, StoredEvent::SoakStartedV8 { .. }))
        .unwrap();
    let StoredEvent::SoakStartedV8 {
        mut start,
        supervision,
        limits,
    } = started
    else {
        unreachable!()
    };
    let lost = "20251202T120000-1057";
    start.soak_id = lost.into();
    let subject = || Subject::Soak(lost.into());
    let log = EventLog::open_with_clock(
        &root.log_path(),
        root.scope(),
        PROJECTIONS,
        SteppingClock::boxed(1_764_676_800_000_000, 1_000_000),
    )
    .unwrap();
    log.append_all(
        [(
            subject(),
            StoredEvent::SoakStartedV8 {
                start,
                supervision,
                limits,
            },
        )]
        .into_iter()
        .chain((0..2).map(|i| {
            (
                subject(),
                StoredEvent::SoakSampledV5(Box::new(sample(i, 2))),
            )
        })),
    )
    .unwrap();
    drop(log);
    lost
}

/// An abandoned soak's end is its last sample's time in every view, but archiving it kept the
/// moment it was found abandoned: once archived, `soak list` gave it another `ended_at`. The
/// archive now keeps the end the views show.
#[test]
fn an_abandoned_soak_archived_keeps_the_end_it_was_shown_with() {
    let root = TestRoot::new();
    let lost = abandoned_in_december(&root);
    let abandoned = |root: &TestRoot| -> Value {
        json_of(root, &["soak", "list"])
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["outcome"]["status"] == "abandoned")
            .cloned()
            .unwrap()
    };
    // Found abandoned now; its end is its last sample's, the third reading of the clock.
    let shown = abandoned(&root);
    assert_eq!(shown["ended"], "unknown", "{shown}");
    assert_eq!(shown["ended_at"], 1_764_676_802.0, "{shown}");
    let id = lost;
    let report = json_of(&root, &["log", "archive", "--soak", id]);
    assert_eq!(report["archived"][0]["soak_id"], id, "{report}");
    assert_eq!(abandoned(&root), shown);
    root.unilab().args(["log", "verify"]).assert().success();
}

/// `soak list` showed an abandoned soak of December 2025 as ended then, but `log archive
/// --finished-before 1d` judged it by when it was found abandoned (today) and kept it: the
/// views and the archive disagreed on when it ended. It is judged by the end every view shows.
#[test]
fn finished_before_judges_an_abandoned_soak_by_the_end_the_views_show() {
    let root = TestRoot::new();
    let lost = abandoned_in_december(&root);
    // Found abandoned now, as `soak list` shows it: ended in December 2025.
    let listed = json_of(&root, &["soak", "list"]);
    assert_eq!(listed[0]["outcome"]["status"], "abandoned", "{listed}");
    assert_eq!(listed[0]["ended_at"], 1_764_676_802.0, "{listed}");
    let report = json_of(&root, &["log", "archive", "--finished-before", "1d"]);
    assert_eq!(report["archived"][0]["soak_id"], lost, "{report}");
    root.unilab().args(["log", "verify"]).assert().success();
}

/// The size target, in the small: once a soak of most of the log's bytes is archived,
/// compaction leaves the file a fraction of what it was.
#[test]
fn compaction_gives_the_space_of_an_archived_soak_back() {
    let root = TestRoot::new();
    let log = root.log();
    let soak = || Subject::Soak("20261205T000000-big0".into());
    let (_, started) = every_event_kind()
        .into_iter()
        .find(|(_, e)| matches!(e, StoredEvent::SoakStartedV4(_)))
        .unwrap();
    let StoredEvent::SoakStartedV4(mut start) = started else {
        unreachable!()
    };
    start.soak_id = "20261205T000000-big0".into();
    log.append(soak(), StoredEvent::SoakStartedV4(start))
        .unwrap();
    for batch in 0..4 {
        log.append_all((0..500).map(|i| {
            (
                soak(),
                StoredEvent::SoakSampledV5(Box::new(sample(batch * 500 + i, 60))),
            )
        }))
        .unwrap();
    }
    log.append(
        soak(),
        Event::SoakAbandoned {
            supervisor: unilab::ProcessIdentity {
                pid: 1,
                start_ticks: 1,
            },
            reason: "gone".into(),
        },
    )
    .unwrap();
    drop(log);
    let report = json_of(&root, &["log", "archive", "--soak", "big0"]);
    let before = report["log_disk_bytes_before"].as_u64().unwrap();
    let after = report["log_disk_bytes_after"].as_u64().unwrap();
    assert!(
        after * 10 < before,
        "{after} bytes on disk after, {before} before: {report}"
    );
    let file = report["archived"][0]["file_bytes"].as_u64().unwrap();
    let bytes = report["archived"][0]["bytes"].as_u64().unwrap();
    assert!(file * 4 < bytes, "compressed: {report}");
    root.unilab().args(["log", "verify"]).assert().success();
}

/// A root with [`V1_SOAK`] archived, recorded by a 1 s clock.
pub(crate) fn root_with_v1_archived() -> TestRoot {
    let root = root_with_every_kind(1_000_000);
    root.unilab()
        .args(["log", "archive", "--soak", V1_SOAK])
        .assert()
        .success();
    root.unilab().args(["log", "verify"]).assert().success();
    root
}

#[test]
fn finished_before_archives_the_soaks_that_ended_before_then() {
    // Recorded in December 2025, then one soak now.
    let soak = Soak::new();
    let root = &soak.root;
    let log = EventLog::open_with_clock(
        &root.log_path(),
        root.scope(),
        PROJECTIONS,
        SteppingClock::boxed(1_764_676_800_000_000, 1_000_000),
    )
    .unwrap();
    log.append_all(every_event_kind()).unwrap();
    drop(log);
    let (output, artifact) = soak.run(&[], &["--steps", "3", "--step-seconds", "0.1"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let recent = artifact["soak_id"].as_str().unwrap().to_owned();
    let finished = |root: &TestRoot| -> Vec<(String, String)> {
        json_of(root, &["soak", "list"])
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["soak_id"].as_str().unwrap().to_owned(),
                    s["ended_at"].to_string(),
                )
            })
            .collect()
    };
    let listed = finished(root);

    let none = json_of(root, &["log", "archive", "--finished-before", "2025-01-01"]);
    assert_eq!(none["archived"], Value::Array(Vec::new()), "{none}");
    root.unilab()
        .args(["log", "archive", "--finished-before", "2025-01-01"])
        .assert()
        .success()
        .stderr(predicate::str::contains("no finished soak to archive"));

    let archived = json_of(root, &["log", "archive", "--finished-before", "1d"]);
    let mut ids: Vec<&str> = archived["archived"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["soak_id"].as_str().unwrap())
        .collect();
    ids.sort();
    // Every soak of the sample log that ended (the abandoned one was settled now: it ended
    // today), none of today's.
    let mut old: Vec<String> = every_event_kind()
        .into_iter()
        .filter_map(|(subject, event)| match subject {
            Subject::Soak(id) if event.kind() == "soak_finished" => Some(id),
            _ => None,
        })
        .collect();
    old.sort();
    assert_eq!(ids, old, "{archived}");
    assert!(!ids.contains(&recent.as_str()));
    assert_eq!(
        finished(root),
        listed,
        "`soak list` says the same of every soak"
    );
    root.unilab().args(["log", "verify"]).assert().success();
    // Again: they are archived already, and today's did not end before a day ago.
    let again = json_of(root, &["log", "archive", "--finished-before", "1d"]);
    assert_eq!(again["archived"], Value::Array(Vec::new()), "{again}");
    let all = json_of(root, &["log", "archive", "--finished-before", "0s"]);
    assert_eq!(all["archived"][0]["soak_id"], recent.as_str(), "{all}");
}

/// While a soak runs, its supervisor holds the log: `log archive` can neither compact it nor
/// archive beside it, and says who holds it. Nothing is archived. Once the soak has ended, the
/// same command archives.
#[test]
fn archive_is_refused_while_a_soak_runs_and_nothing_changes() {
    let soak = Soak::new();
    let root = &soak.root;
    let (output, artifact) = soak.run(&[], &["--steps", "3", "--step-seconds", "0.1"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let done = artifact["soak_id"].as_str().unwrap().to_owned();
    let mut running = soak
        .command()
        .args(["soak", "run", "--force"])
        .args(soak.trainer_soak(
            &["--sample-interval", "0.2"],
            &["--steps", "600", "--step-seconds", "0.1"],
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let supervisor = running.id();
    let mut running_id = String::new();
    eventually(
        "the second soak is recorded",
        Duration::from_secs(20),
        || {
            let list = json_of(root, &["soak", "list", "--status", "running"]);
            match list.as_array().and_then(|a| a.first()) {
                Some(soak) => {
                    running_id = soak["soak_id"].as_str().unwrap().to_owned();
                    true
                }
                None => false,
            }
        },
    );
    let export = stdout_of(root, &["soak", "export", &done]);

    refused(
        root.unilab().args(["log", "archive", "--soak", &done]),
        3,
        &[
            "another process has the event log",
            &format!("pid {supervisor} (`"),
            "soak run",
            "hint: wait until it ends",
        ],
    );
    root.unilab()
        .args(["log", "archive", "--finished-before", "0s"])
        .assert()
        .code(3);
    refused(
        root.unilab()
            .args(["log", "archive", "--soak", &running_id]),
        3,
        &[&format!(
            "soak `{running_id}` is still running: only a finished soak can be archived"
        )],
    );
    assert!(!archive_of(root, &done).exists(), "nothing archived");
    assert!(
        !history_kinds(root.unilab(), &[]).contains(&"soak_archived".to_owned()),
        "nothing recorded"
    );
    assert_eq!(stdout_of(root, &["soak", "export", &done]), export);

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor as i32),
        nix::sys::signal::SIGINT,
    )
    .unwrap();
    assert!(
        within(Duration::from_secs(30), || running
            .try_wait()
            .unwrap()
            .is_some()),
        "the soak ends on SIGINT"
    );
    let archived = json_of(root, &["log", "archive", "--finished-before", "0s"]);
    let ids: Vec<&str> = archived["archived"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["soak_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [done.as_str(), running_id.as_str()], "{archived}");
    assert_eq!(stdout_of(root, &["soak", "export", &done]), export);
    root.unilab().args(["log", "verify"]).assert().success();
}

#[test]
fn archive_errors_say_what_to_do() {
    let root = TestRoot::new();
    // Neither or both selections: a usage error.
    root.unilab().args(["log", "archive"]).assert().code(2);
    root.unilab()
        .args(["log", "archive", "--soak", "x", "--finished-before", "1d"])
        .assert()
        .code(2);
    refused(
        root.unilab()
            .args(["log", "archive", "--finished-before", "someday"]),
        2,
        &["neither a duration"],
    );
    // No log yet.
    refused(
        root.unilab().args(["log", "archive", "--soak", "latest"]),
        3,
        &["no soak `latest` is recorded"],
    );
    root.unilab()
        .args(["log", "archive", "--finished-before", "1d"])
        .assert()
        .success()
        .stderr(predicate::str::contains("no finished soak to archive"));
    let root = root_with_every_kind(1_000_000);
    refused(
        root.unilab().args(["log", "archive", "--soak", "nosuch"]),
        3,
        &[
            "no soak `nosuch` is recorded",
            "hint: see `unilab soak list`",
        ],
    );
    refused(
        root.unilab().args(["log", "archive", "--soak", "2026120"]),
        3,
        &["names", "give more of the id"],
    );
}

/// A log of another scope (a copy brought in for forensics) is read as it is, never written:
/// `log archive` refuses it.
#[test]
fn another_scopes_log_is_not_archived() {
    let root = TestRoot::new();
    let other = unilab::Scope {
        uid: root.scope().uid + 1,
        host: "elsewhere".into(),
    };
    private_dir_all(root.log_path().parent().unwrap());
    let log = EventLog::open(&root.log_path(), other, PROJECTIONS).unwrap();
    log.append_all(every_event_kind()).unwrap();
    drop(log);
    refused(
        root.unilab().args(["log", "archive", "--soak", V4_SOAK]),
        3,
        &["belongs to uid"],
    );
    assert!(!archive_of(&root, V4_SOAK).exists());
}
