//! The tables and pages people read of the log: `soak list` and its filters, `soak show`, `mps
//! list`, and `log stats`.

use crate::common::*;
use predicates::prelude::*;
use unilab::{StoredEvent, Subject};

use super::*;

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
    let recent = "20261205T100000-7a7a";
    start.soak_id = recent.into();
    root.log()
        .append_all([(
            Subject::Soak(recent.into()),
            StoredEvent::SoakStartedV8 {
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
        refused(root.unilab().args(["soak", "list"]).args(bad), 2, &[bad[1]]);
    }
}

/// `soak show` of the recorded soak that went stale and was ended by SIGTERM: its verdict and
/// why, the exit, times, progress, peaks and tails.
#[test]
fn soak_show_of_a_stale_soak_ended_by_sigterm() {
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

/// `log stats` told every log with a soak in it to archive, a 140 KiB one too. It advises it
/// only when the log matters: over `UNILAB_LOG_WARN_SIZE` (where `soak run` warns), or over a
/// tenth of the user's quota or of the room on its filesystem (its own size and the free space);
/// and says which (`archive_advice` under `--json`).
#[test]
fn log_stats_advises_archiving_only_when_the_log_matters() {
    let soak = crate::soak::Soak::new();
    let (output, _) = soak.run(&[], &["--steps", "3", "--step-seconds", "0.1"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let stats = |env: &[(&str, &str)]| {
        let cmd = || {
            let mut cmd = soak.unilab();
            cmd.env("FAKE_QUOTA_FS", soak.root.root())
                .env("FAKE_QUOTA_USED_KIB", "1024")
                .envs(env.iter().copied());
            cmd
        };
        let text = cmd().args(["log", "stats"]).output().unwrap();
        assert_eq!(text.status.code(), Some(0), "{text:?}");
        let json = cmd().args(["--json", "log", "stats"]).output().unwrap();
        let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        (String::from_utf8(text.stderr).unwrap(), json)
    };
    let (_, json) = stats(&[]);
    let disk_kib = json["disk_bytes"].as_u64().unwrap() / 1024;
    let roomy = (disk_kib * 100).to_string();
    let (said, json) = stats(&[("FAKE_QUOTA_LIMIT_KIB", &roomy)]);
    assert!(!said.contains("log archive"), "{said}");
    assert_eq!(json["archive_advice"], serde_json::Value::Null);

    let tight = (disk_kib * 5).to_string();
    let (said, json) = stats(&[("FAKE_QUOTA_LIMIT_KIB", &tight)]);
    assert!(said.contains("a tenth of your quota"), "{said}");
    assert!(said.contains("unilab log archive"), "{said}");
    assert!(
        json["archive_advice"]
            .as_str()
            .is_some_and(|a| a.contains("quota")),
        "{json}"
    );

    let (said, _) = stats(&[
        ("FAKE_QUOTA_LIMIT_KIB", &roomy),
        ("UNILAB_LOG_WARN_SIZE", "16KiB"),
    ]);
    assert!(
        said.contains("over 16.0 KiB (UNILAB_LOG_WARN_SIZE)"),
        "{said}"
    );
    assert!(said.contains("unilab log archive"), "{said}");
}
