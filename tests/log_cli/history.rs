//! `history`: the readable timeline, one JSON object a line, filters by subject and sequence, a
//! closed pipe, `--follow`, and subjects that are not recorded or named by a suffix.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::common::*;
use predicates::prelude::*;
use unilab::EVENT_KINDS;
use unilab::Subject;

use super::*;

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
            "soak_job_alarm_seen",
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
