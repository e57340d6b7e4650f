//! Heartbeats end to end, the supervisor's side: `soak run` over trainers that beat (the
//! fixture `heartbeat_trainer.py`, raw lines or the Python package's `unilab.heartbeat`), and
//! what the artifact then shows — each row's beats, the summary's steps by phase, the heartbeat
//! file's errors and the goodput — and how the steps are judged: `--phase-timeout`,
//! `--step-timeout auto`, or `--stale-progress` where neither applies; the limit flags refused;
//! the file's mode. Heartbeat files that are not what a trainer should write: `heartbeat_files`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::*;
use crate::soak::{Soak, verdict};

/// The sample interval of these soaks, in seconds.
const INTERVAL: f64 = 0.2;

fn heartbeat_trainer() -> PathBuf {
    fixtures_dir().join("heartbeat_trainer.py")
}

/// `python3 heartbeat_trainer.py ACTIONS...`, as a soak's command.
pub(crate) fn trainer_running(actions: &[&str]) -> Vec<OsString> {
    let mut command: Vec<OsString> = vec!["python3".into(), heartbeat_trainer().into()];
    command.extend(actions.iter().map(Into::into));
    command
}

/// `sh -c SCRIPT`, as a soak's command: `$TRAINER` runs the heartbeat trainer, `$BEATS` is
/// the heartbeat file.
pub(crate) fn shell_running(script: &str) -> Vec<OsString> {
    let trainer = heartbeat_trainer();
    let script = format!(
        "BEATS=\"$UNILAB_HEARTBEAT\"; TRAINER=\"python3 {}\"; {script}",
        trainer.display()
    );
    vec!["sh".into(), "-c".into(), script.into()]
}

/// `--json soak run` of `command` in this soak's progress directory and output, sampled every
/// [`INTERVAL`] with a short shutdown grace, then `options`.
pub(crate) fn soak_args(soak: &Soak, options: &[&str], command: Vec<OsString>) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["--json".into(), "soak".into(), "run".into()];
    args.extend([
        "--progress-dir".into(),
        soak.progress().into(),
        "--output".into(),
        soak.artifact_path().into(),
        "--sample-interval".into(),
        INTERVAL.to_string().into(),
        "--shutdown-grace".into(),
        "0.5".into(),
    ]);
    args.extend(options.iter().map(Into::into));
    args.push("--".into());
    args.extend(command);
    args
}

pub(crate) fn artifact(soak: &Soak) -> Value {
    let bytes = std::fs::read(soak.artifact_path())
        .unwrap_or_else(|e| panic!("no artifact at {}: {e}", soak.artifact_path().display()));
    serde_json::from_slice(&bytes).unwrap()
}

/// Runs the soak of `command` with `options`: its output and artifact.
pub(crate) fn run_soak(soak: &Soak, options: &[&str], command: Vec<OsString>) -> (Output, Value) {
    run_soak_with(soak, soak.unilab(), options, command)
}

fn run_soak_with(
    soak: &Soak,
    mut cmd: assert_cmd::Command,
    options: &[&str],
    command: Vec<OsString>,
) -> (Output, Value) {
    let _ = std::fs::remove_file(soak.artifact_path());
    let output = cmd
        .args(soak_args(soak, options, command))
        .output()
        .unwrap();
    (output, artifact(soak))
}

#[track_caller]
pub(crate) fn assert_exit(output: &Output, code: i32, artifact: &Value) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "outcome {}\nstderr: {}",
        artifact["outcome"],
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Each row's beats (`null` where none arrived).
fn rows_beats(artifact: &Value) -> Vec<&Value> {
    artifact["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.get("heartbeat")
                .unwrap_or_else(|| panic!("a schema 10 row shows its beats: {row}"))
        })
        .collect()
}

/// `summary.heartbeat_errors` of a file that held `malformed` lines that were not beats, and
/// nothing else amiss.
pub(crate) fn heartbeat_errors(malformed: u64) -> Value {
    serde_json::json!({
        "clock": 0, "dropped": 0, "malformed": malformed, "oversized": 0,
        "polling_fallbacks": 0, "repeats": 0, "truncations": 0,
    })
}

pub(crate) fn count_of(value: &Value) -> u64 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("not a count: {value}"))
}

/// The goodput's buckets and productive time add up to the run time (`duration_seconds`),
/// within one sample interval (and the artifact's rounding): the run is split at its beats, and
/// taken to end no earlier than the last of them. A beat without `t` is stamped when read, so
/// one read by the sample after the command's exit may end the run up to that sample's time.
#[track_caller]
pub(crate) fn assert_goodput_adds_up(artifact: &Value) -> f64 {
    let goodput = &artifact["summary"]["goodput"];
    let productive = goodput["productive_seconds"].as_f64().unwrap();
    let buckets = goodput["badput_seconds"].as_object().unwrap();
    let names: Vec<&str> = buckets.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["checkpoint", "eval", "other", "stalled", "startup"],
        "{goodput}"
    );
    let badput: f64 = buckets.values().map(|v| v.as_f64().unwrap()).sum();
    let duration = artifact["duration_seconds"].as_f64().unwrap();
    let last_sample = artifact["samples"]
        .as_array()
        .and_then(|rows| rows.last())
        .and_then(|row| row["elapsed_seconds"].as_f64())
        .unwrap();
    let run = productive + badput;
    assert!(
        run >= duration - 0.01 && run <= (duration + INTERVAL).max(last_sample) + 0.01,
        "productive {productive} s + badput {badput} s against a run of {duration} s, \
         the last sample at {last_sample} s: {goodput}"
    );
    let fraction = goodput["fraction"].as_f64().unwrap();
    assert!(
        (fraction - productive / (productive + badput)).abs() < 1e-3,
        "{goodput}"
    );
    productive
}

/// A checkpoint beaten as it starts runs for 8 s: the stale period of 3 s would fail it, its
/// `--phase-timeout` of 20 s holds it instead, and the train steps after it are judged by the
/// stale period again. The artifact records the steps by phase, each row's beats and the
/// goodput. The same trainer without the phase's limit fails on the stale period.
#[test]
fn a_checkpoint_is_held_to_its_phase_limit_and_its_steps_and_goodput_are_recorded() {
    let soak = Soak::new();
    let actions = ["train:30:0.1", "phase:checkpoint:8", "train:10:0.1"];
    let (output, artifact) = run_soak(
        &soak,
        &[
            "--stale-progress",
            "3s",
            "--phase-timeout",
            "checkpoint=20s",
        ],
        trainer_running(&actions),
    );
    assert_exit(&output, 0, &artifact);
    assert_eq!(verdict(&output)["outcome"]["status"], "passed");
    assert_eq!(artifact["outcome"]["status"], "passed");
    assert_eq!(
        artifact["parameters"]["phase_timeouts"],
        serde_json::json!({"checkpoint": 20.0})
    );
    assert_eq!(artifact["parameters"]["step_timeout"], Value::Null);

    let summary = &artifact["summary"];
    let steps = &summary["steps"];
    let names: Vec<&String> = steps.as_object().unwrap().keys().collect();
    assert_eq!(names, ["checkpoint", "train"], "{steps}");
    assert_eq!(count_of(&steps["train"]["count"]), 40, "{steps}");
    assert_eq!(count_of(&steps["train"]["last"]), 39, "{steps}");
    assert_eq!(count_of(&steps["checkpoint"]["count"]), 1, "{steps}");
    assert_eq!(count_of(&steps["checkpoint"]["last"]), 29, "{steps}");
    // The checkpoint's one step: from its beat, at the last train step's number, to the next
    // step's beat, 8 s and more (the median within 1 %); the train steps slept 0.1 s each, and
    // none is of zero length (from the last train beat to the checkpoint's, at one step).
    let checkpoint = steps["checkpoint"]["median_seconds"].as_f64().unwrap();
    assert!(checkpoint >= 8.0 * 0.99, "{steps}");
    let train = steps["train"]["median_seconds"].as_f64().unwrap();
    assert!(
        (0.099..checkpoint).contains(&train),
        "the checkpoint is not a train step: {steps}"
    );
    assert_eq!(summary["heartbeat_errors"], heartbeat_errors(0));

    let goodput = &summary["goodput"];
    assert!(
        goodput["badput_seconds"]["checkpoint"].as_f64().unwrap() >= 8.0,
        "{goodput}"
    );
    assert_eq!(goodput["badput_seconds"]["stalled"], 0.0, "{goodput}");
    let productive = assert_goodput_adds_up(&artifact);
    // 38 steps of train: 29 before the checkpoint (the checkpoint's beat right after the 30th
    // train beat), 9 after it.
    assert!(productive >= 38.0 * 0.1 * 0.99, "{goodput}");

    // Each row: the beats since the row before, `null` where none arrived.
    let rows = rows_beats(&artifact);
    let total: u64 = rows
        .iter()
        .filter(|b| !b.is_null())
        .map(|b| count_of(&b["beats"]))
        .sum();
    assert_eq!(total, 41, "every beat in one row: {rows:?}");
    assert!(
        rows.iter()
            .any(|b| b["phase"] == "checkpoint" && b["step"] == 29),
        "the checkpoint's beat is the last of a row: {rows:?}"
    );
    assert!(
        rows.iter().any(|b| b.is_null()),
        "the rows of the checkpoint's 8 s have no beat: {rows:?}"
    );
    let last = rows.iter().rev().find(|b| !b.is_null()).unwrap();
    assert_eq!(
        (&last["step"], &last["phase"]),
        (&39.into(), &"train".into())
    );
    assert_eq!(last["numbers"]["loss"], 2.0 / 41.0, "{last}");
    assert_eq!(last["numbers"]["samples"], 32.0, "{last}");
    assert!(last["step_seconds_median"].as_f64().unwrap() >= 0.099);

    // Without the checkpoint's limit the stale period judges the checkpoint, and fails it.
    let (output, artifact) = run_soak(
        &soak,
        &["--stale-progress", "3s"],
        trainer_running(&actions),
    );
    assert_exit(&output, 1, &artifact);
    let outcome = &artifact["outcome"];
    assert_eq!(outcome["failure_kind"], "stale_progress", "{outcome}");
    let reason = outcome["reason"].as_str().unwrap();
    assert!(reason.starts_with("no progress for "), "{reason}");
    assert!(reason.ends_with("(stale after 3s)"), "{reason}");
    let steps = &artifact["summary"]["steps"];
    assert_eq!(count_of(&steps["checkpoint"]["count"]), 1, "{steps}");
    assert!(
        artifact["summary"]["goodput"]["badput_seconds"]["stalled"]
            .as_f64()
            .unwrap()
            >= 3.0
    );
    assert_goodput_adds_up(&artifact);
}

/// 30 train steps of 0.1 s, then a step that never ends: with `--step-timeout auto` the phase's
/// limit is learned from its steps (5 × p99, at least 10 s), and the hung step fails the soak as
/// `stale_progress` long before the stale period of an hour, naming the last step beaten, how
/// long since and the limit with where it came from. The time it hung is the goodput's `stalled`.
#[test]
fn a_hung_train_step_fails_at_the_limit_learned_from_its_phase() {
    let soak = Soak::new();
    let (output, artifact) = run_soak(
        &soak,
        &["--step-timeout", "auto", "--stale-progress", "1h"],
        trainer_running(&["train:30:0.1", "hang"]),
    );
    assert_exit(&output, 1, &artifact);
    assert_eq!(artifact["parameters"]["step_timeout"], "auto");
    let outcome = &artifact["outcome"];
    assert_eq!(outcome["failure_kind"], "stale_progress", "{outcome}");
    assert_eq!(verdict(&output)["outcome"]["reason"], outcome["reason"]);
    let reason = outcome["reason"].as_str().unwrap();
    // "no beat for 10.1s since step 29 of phase `train`; its limit is 10.0s (learned: 5 × p99
    // 0.10s, at least 10s)": the step as it was beaten.
    let (taken, limit) = reason
        .strip_prefix("no beat for ")
        .and_then(|rest| rest.split_once("s since step 29 of phase `train`; its limit is "))
        .unwrap_or_else(|| panic!("{reason}"));
    let (limit, source) = limit.split_once("s (").unwrap();
    let (taken, limit): (f64, f64) = (taken.parse().unwrap(), limit.parse().unwrap());
    assert!(
        source.starts_with("learned: 5 × p99 "),
        "the limit says where it came from: {reason}"
    );
    let p99 = artifact["summary"]["steps"]["train"]["p99_seconds"]
        .as_f64()
        .unwrap();
    assert!(
        (limit - (5.0 * p99).max(10.0)).abs() < 0.1,
        "the rule: the larger of 5 × p99 ({p99} s) and 10 s: {reason}"
    );
    if 5.0 * p99 < 10.0 {
        assert!(source.ends_with(", at least 10s)"), "{reason}");
    }
    assert!(taken >= limit, "{reason}");
    let duration = artifact["duration_seconds"].as_f64().unwrap();
    assert!(
        duration < 3600.0,
        "failed on the step, not the stale period"
    );

    let steps = &artifact["summary"]["steps"];
    assert_eq!(count_of(&steps["train"]["count"]), 30, "{steps}");
    assert_eq!(count_of(&steps["train"]["last"]), 29, "{steps}");
    let goodput = &artifact["summary"]["goodput"];
    let stalled = goodput["badput_seconds"]["stalled"].as_f64().unwrap();
    assert!(
        stalled >= limit,
        "the hung step, until it was stopped: {goodput}"
    );
    assert_goodput_adds_up(&artifact);
}

/// Without `--step-timeout` or a phase's limit, beats are progress and the stale period judges
/// them: a trainer that beats and never writes its progress directory passes a run four times
/// longer than the stale period, and one that stops beating fails on it as before.
#[test]
fn beats_without_step_limits_are_progress_judged_by_the_stale_period() {
    let soak = Soak::new();
    let (output, artifact) = run_soak(
        &soak,
        &["--stale-progress", "1s"],
        trainer_running(&["train:40:0.1"]),
    );
    assert_exit(&output, 0, &artifact);
    assert_eq!(artifact["progress"]["files"], 0, "no file was written");
    assert_eq!(
        count_of(&artifact["summary"]["steps"]["train"]["count"]),
        40
    );

    let (output, artifact) = run_soak(
        &soak,
        &["--stale-progress", "2s"],
        trainer_running(&["train:20:0.1", "hang"]),
    );
    assert_exit(&output, 1, &artifact);
    let outcome = &artifact["outcome"];
    assert_eq!(outcome["failure_kind"], "stale_progress", "{outcome}");
    let reason = outcome["reason"].as_str().unwrap();
    assert!(reason.ends_with("(stale after 2s)"), "{reason}");
    assert_eq!(
        count_of(&artifact["summary"]["steps"]["train"]["count"]),
        20
    );
    assert_goodput_adds_up(&artifact);
}

/// The Python package's `unilab.heartbeat`, called by a real trainer under `soak run`: every
/// beat is recorded, with its phase and numbers, and neither side counts an error (the trainer
/// exits 4 if the package dropped a beat).
#[test]
fn the_python_helper_beats_a_real_trainer_under_soak_run() {
    let soak = Soak::new();
    let mut cmd = soak.unilab();
    cmd.env("PYTHONPATH", python_package_dir());
    let (output, artifact) = run_soak_with(
        &soak,
        cmd,
        &["--stale-progress", "5s"],
        trainer_running(&[
            "--python",
            "train:25:0.05",
            "phase:eval:0.5",
            "train:5:0.05",
        ]),
    );
    assert_exit(&output, 0, &artifact);
    let summary = &artifact["summary"];
    let steps = &summary["steps"];
    assert_eq!(count_of(&steps["train"]["count"]), 30, "{steps}");
    assert_eq!(count_of(&steps["eval"]["count"]), 1, "{steps}");
    assert_eq!(count_of(&steps["eval"]["last"]), 24, "{steps}");
    assert!(steps["eval"]["median_seconds"].as_f64().unwrap() >= 0.5 * 0.99);
    assert!(
        summary["goodput"]["badput_seconds"]["eval"]
            .as_f64()
            .unwrap()
            >= 0.5
    );
    assert_eq!(summary["heartbeat_errors"], heartbeat_errors(0));
    let rows = rows_beats(&artifact);
    let last = rows.iter().rev().find(|b| !b.is_null()).unwrap();
    assert_eq!(last["step"], 29, "{last}");
    assert_eq!(last["numbers"]["loss"], 2.0 / 31.0, "{last}");
    assert_goodput_adds_up(&artifact);
}

/// Limit flags that do not parse, and a phase given two limits: usage errors (exit 2) that name
/// the flag as typed, before anything runs.
#[test]
fn limit_flags_that_do_not_parse_are_refused_before_anything_runs() {
    let soak = Soak::new();
    let ran = soak.root.root().join("ran");
    let command = vec!["touch".into(), ran.clone().into_os_string()];
    for (flags, says) in [
        (
            &["--phase-timeout", "nonsense"][..],
            "`--phase-timeout nonsense` is not PHASE=DURATION",
        ),
        (
            &["--phase-timeout", "x=0s"],
            "`--phase-timeout x=0s` is not PHASE=DURATION",
        ),
        (
            &["--phase-timeout", "=20s"],
            "`--phase-timeout =20s` is not PHASE=DURATION",
        ),
        (
            &[
                "--phase-timeout",
                "checkpoint=20s",
                "--phase-timeout",
                "checkpoint=30m",
            ],
            "`--phase-timeout` gives phase `checkpoint` two limits (`checkpoint=20s` and `checkpoint=30m`); keep one",
        ),
        (
            &["--step-timeout", "soon"],
            "`--step-timeout soon` is neither `auto` nor a duration above zero",
        ),
        (
            &["--step-timeout", "0s"],
            "`--step-timeout 0s` is neither `auto` nor a duration above zero",
        ),
    ] {
        let mut cmd = soak.unilab();
        cmd.args(soak_args(&soak, flags, command.clone()));
        refused(cmd, 2, &[says]);
        assert!(!ran.exists(), "{flags:?}: the command ran");
        assert!(!soak.artifact_path().exists(), "{flags:?}: an artifact");
    }
}

/// The heartbeat file is the user's alone: 0600, owned by the user the soak runs as, in a
/// directory others cannot enter; as root, user `nobody` cannot open it (as an ordinary user
/// that part is skipped, saying so). It is gone after the soak.
#[test]
fn the_heartbeat_file_is_readable_by_its_user_alone() {
    let soak = Soak::new();
    let report = soak.root.root().join("mode.json");
    let mode_action = format!("mode:{}", report.display());
    let (output, artifact) = run_soak(
        &soak,
        &["--stale-progress", "5s"],
        trainer_running(&["train:2:0.05", &mode_action, "train:2:0.05"]),
    );
    assert_exit(&output, 0, &artifact);
    let found: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(found["mode"], 0o600, "{found}");
    assert_eq!(found["owner"], found["uid"], "{found}");
    assert_eq!(
        found["uid"],
        nix::unistd::geteuid().as_raw(),
        "the trainer runs as the user who ran the soak: {found}"
    );
    assert_eq!(
        found["dir_mode"].as_u64().unwrap() & 0o077,
        0,
        "others cannot enter the directory: {found}"
    );
    if is_root() {
        assert_eq!(found["nobody_reads"], false, "{found}");
    } else {
        eprintln!("skipped: whether another user can open the file needs root to switch to one");
        assert_eq!(found["nobody_reads"], Value::Null, "{found}");
    }
    let path = artifact["parameters"]["environment"]["UNILAB_HEARTBEAT"]
        .as_str()
        .unwrap();
    assert!(Path::new(path).is_absolute(), "{path}");
    assert!(!Path::new(path).exists(), "{path} outlived the soak");
}
