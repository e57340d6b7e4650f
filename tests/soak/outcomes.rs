//! How a soak is judged: a healthy run passes; no progress, stale progress, a failing or killed
//! command, a run too short or a command that cannot start each fail, naming why.

use predicates::prelude::*;
use serde_json::Value;
use unilab::testing::artifact::digest_matches;

use super::*;

#[test]
fn a_healthy_run_passes_and_its_artifact_is_reproducible() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(
        &["--meta", "run=nightly"],
        &["--steps", "8", "--step-seconds", "0.1"],
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let verdict = verdict(&output);
    assert_eq!(verdict["outcome"]["status"], "passed");
    assert_eq!(
        verdict["artifact"],
        soak.artifact_path().display().to_string()
    );
    let id = verdict["soak_id"].as_str().unwrap();
    // The trainer's stdout passed through, to stderr under `--json`; no live status line when
    // stderr is not a terminal.
    assert!(String::from_utf8_lossy(&output.stderr).contains("step 8/8"));
    assert!(!String::from_utf8_lossy(&output.stderr).contains('\r'));

    for field in [
        "schema",
        "soak_id",
        "command",
        "cwd",
        "parameters",
        "metadata",
        "runtime",
        "started_at",
        "ended_at",
        "duration_seconds",
        "outcome",
        "exit",
        "progress",
        "samples",
        "summary",
        "leaked_processes",
        "output_tail",
        "log",
        "digest",
    ] {
        assert!(artifact.get(field).is_some(), "artifact.{field}");
    }
    assert_eq!(artifact["soak_id"], id);
    assert_eq!(artifact["exit"]["code"], 0);
    assert_eq!(artifact["metadata"]["run"], "nightly");
    assert_eq!(artifact["progress"]["files"], 4);
    assert!(
        artifact["output_tail"]["stdout"]
            .as_str()
            .unwrap()
            .ends_with("step 8/8 loss 0.8987\n")
    );
    assert!(artifact["samples"].as_array().unwrap().len() >= 3);
    assert!(
        artifact["summary"]["peak_rss_bytes"].as_u64().unwrap() > 1_000_000,
        "the trainer's RSS was sampled"
    );

    let written = std::fs::read(soak.artifact_path()).unwrap();
    assert!(digest_matches(&written), "the digest checks");
    let exported = soak
        .unilab()
        .args(["soak", "export", id])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert_eq!(exported, written, "export is byte-identical");
    let copy = soak.root.root().join("copy.json");
    soak.unilab()
        .args(["soak", "export", id, "--output"])
        .arg(&copy)
        .assert()
        .success();
    assert_eq!(std::fs::read(copy).unwrap(), written);

    let kinds = soak.history_kinds(id);
    assert_eq!(kinds.first().unwrap(), "soak_started");
    assert!(kinds.iter().filter(|k| *k == "soak_sampled").count() >= 3);
    assert_eq!(
        &kinds[kinds.len() - 2..],
        ["soak_finished", "artifact_written"]
    );
    let show: Value = serde_json::from_slice(
        &soak
            .unilab()
            .args(["--json", "soak", "show", id])
            .assert()
            .success()
            .get_output()
            .stdout,
    )
    .unwrap();
    assert_eq!(show["outcome"]["status"], "passed");
    assert_eq!(show["artifact"], soak.artifact_path().display().to_string());
    assert_eq!(show["digest"], artifact["digest"]);
    soak.unilab().args(["log", "verify"]).assert().success();
}

#[test]
fn no_progress_within_the_startup_timeout_fails() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(
        &["--startup-timeout", "1"],
        &["--no-progress", "--steps", "100"],
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(artifact["outcome"]["failure_kind"], "startup_timeout");
    assert!(
        artifact["outcome"]["reason"]
            .as_str()
            .unwrap()
            .contains("startup timeout of 1s")
    );
    assert!(artifact["duration_seconds"].as_f64().unwrap() < 5.0);
}

#[test]
fn stale_progress_fails_within_the_stale_period_and_two_intervals() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(
        &["--stale-progress", "1"],
        &[
            "--steps",
            "100",
            "--step-seconds",
            "0.1",
            "--checkpoint-every",
            "1",
            "--hang-after",
            "5",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(artifact["outcome"]["failure_kind"], "stale_progress");
    let last_change = artifact["progress"]["last_change_seconds"]
        .as_f64()
        .unwrap();
    let detected = artifact["samples"].as_array().unwrap().last().unwrap()["elapsed_seconds"]
        .as_f64()
        .unwrap();
    assert!(detected - last_change >= 1.0, "not before the stale period");
    assert!(
        detected - last_change <= 1.0 + 2.0 * 0.2 + 0.05,
        "detected {detected} s, last progress {last_change} s"
    );
    assert!(
        artifact["output_tail"]["stderr"]
            .as_str()
            .unwrap()
            .contains("stuck in a collective")
    );
    // The hung trainer was stopped.
    assert_eq!(artifact["exit"]["signal"], 15);
}

#[test]
fn a_failing_command_fails_the_soak() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(
        &[],
        &["--steps", "2", "--step-seconds", "0.1", "--exit-code", "3"],
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(artifact["outcome"]["failure_kind"], "command_failed");
    assert_eq!(artifact["exit"]["code"], 3);
    assert!(
        artifact["outcome"]["reason"]
            .as_str()
            .unwrap()
            .contains("exited with code 3")
    );
}

#[test]
fn a_command_killed_by_a_signal_fails_the_soak() {
    let soak = Soak::new();
    let mut cmd = soak.unilab();
    cmd.args(["--json", "soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args([
            "--sample-interval",
            "0.2",
            "--",
            "sh",
            "-c",
            "sleep 0.3; kill -KILL $$",
        ]);
    let output = cmd.output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    assert_eq!(artifact["outcome"]["failure_kind"], "command_failed");
    assert_eq!(artifact["exit"]["signal"], 9);
    assert!(
        artifact["outcome"]["reason"]
            .as_str()
            .unwrap()
            .contains("SIGKILL")
    );
}

#[test]
fn a_run_shorter_than_the_minimum_fails() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(
        &["--min-duration", "30s"],
        &["--steps", "2", "--step-seconds", "0.1"],
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(artifact["outcome"]["failure_kind"], "too_short");
}

#[test]
fn a_command_that_cannot_be_started_fails_as_spawn_failed() {
    let soak = Soak::new();
    let mut cmd = soak.unilab();
    cmd.args(["soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--sample-interval", "0.2", "--", "/nonexistent/trainer"]);
    cmd.assert()
        .code(1)
        .stdout(predicate::str::contains("failed"));
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    assert_eq!(artifact["outcome"]["failure_kind"], "spawn_failed");
    assert!(
        artifact["outcome"]["reason"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/trainer")
    );
    assert_eq!(artifact["exit"], Value::Null);
}

#[test]
fn a_soak_that_never_shows_progress_does_not_pass() {
    let soak = Soak::new();
    // A missing progress directory is refused before anything starts, and not created.
    let missing = soak.root.root().join("typo");
    refused(
        soak.unilab()
            .args(["soak", "run", "--progress-dir"])
            .arg(&missing)
            .arg("--output")
            .arg(soak.artifact_path())
            .args(["--", "true"]),
        3,
        &["it does not exist"],
    );
    assert!(!missing.exists());
    assert!(soak_ids(&soak).is_empty(), "nothing was recorded");

    let (output, artifact) = soak.run(
        &[],
        &["--no-progress", "--steps", "3", "--step-seconds", "0.05"],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(artifact["outcome"]["failure_kind"], "no_progress");
    assert_eq!(artifact["parameters"]["require_progress"], true);

    let (output, artifact) = soak.run(
        &["--allow-no-progress"],
        &["--no-progress", "--steps", "3", "--step-seconds", "0.05"],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(artifact["outcome"]["status"], "passed");
    assert_eq!(artifact["parameters"]["require_progress"], false);
}
