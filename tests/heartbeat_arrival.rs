//! Beats timed where they arrive (issue 47): the supervisor reads the heartbeat file as lines
//! come, whatever the sample interval, so a trainer that writes `{"step": N}` alone is timed
//! right; a `t` on another clock is not believed; a beat that repeats its step is no progress;
//! a file rewritten at each beat is read each time; every beat read is in a sample; and the
//! file lives in the runtime directory, never the state root. Real soaks of the fixture
//! `heartbeat_trainer.py`; every bound is loose enough for a loaded host of two cores.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::*;
use crate::soak::Soak;

fn heartbeat_trainer() -> PathBuf {
    fixtures_dir().join("heartbeat_trainer.py")
}

/// `--json soak run` of `python3 heartbeat_trainer.py ACTIONS` sampled every `interval`
/// seconds, with `options`: its output and its artifact.
fn run_trainer(soak: &Soak, interval: &str, options: &[&str], actions: &[&str]) -> (Output, Value) {
    run_trainer_with(soak, soak.unilab(), interval, options, actions)
}

fn run_trainer_with(
    soak: &Soak,
    mut cmd: assert_cmd::Command,
    interval: &str,
    options: &[&str],
    actions: &[&str],
) -> (Output, Value) {
    let _ = std::fs::remove_file(soak.artifact_path());
    let mut args: Vec<OsString> = vec!["--json".into(), "soak".into(), "run".into()];
    args.extend([
        "--progress-dir".into(),
        soak.progress().into(),
        "--output".into(),
        soak.artifact_path().into(),
        "--sample-interval".into(),
        interval.into(),
        "--shutdown-grace".into(),
        "0.5".into(),
        "--py-spy".into(),
        "off".into(),
    ]);
    args.extend(options.iter().map(Into::into));
    args.extend(["--".into(), "python3".into(), heartbeat_trainer().into()]);
    args.extend(actions.iter().map(Into::into));
    let output = cmd.args(args).output().unwrap();
    let bytes = std::fs::read(soak.artifact_path()).unwrap_or_else(|e| {
        panic!(
            "no artifact ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output, serde_json::from_slice(&bytes).unwrap())
}

#[track_caller]
fn assert_exit(output: &Output, code: i32, artifact: &Value) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "outcome {}\nstderr: {}",
        artifact["outcome"],
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The beats of every row together.
fn beats_in_rows(artifact: &Value) -> u64 {
    artifact["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|row| row["heartbeat"]["beats"].as_u64())
        .sum()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Beats without `t` read once a sample all took the sample's time: a trainer stepping every
/// 50 ms read "step time median 995ms" at `--sample-interval 1`, twenty times its own. Read as
/// they arrive, the median is close to the trainer's own step times; and every beat read is in
/// a row, the rows adding up to the summary.
#[test]
fn beats_without_t_are_timed_by_their_arrival_not_by_the_samples() {
    let soak = Soak::new();
    let own = soak.root.root().join("own-times.json");
    let bare = format!("bare:60:0.05:{}", own.display());
    let (output, artifact) = run_trainer(&soak, "1", &["--stale-progress", "30s"], &[&bare]);
    assert_exit(&output, 0, &artifact);
    let own: Vec<f64> = serde_json::from_slice(&std::fs::read(&own).unwrap()).unwrap();
    let own = median(own);
    let train = &artifact["summary"]["steps"]["train"];
    let read = train["median_seconds"].as_f64().unwrap();
    assert!(read < 0.2, "median {read} s against the trainer's {own} s");
    assert!(
        (read - own).abs() < 0.06,
        "median {read} s against the trainer's {own} s"
    );
    assert_eq!(train["count"], 60, "{train}");
    assert_eq!(beats_in_rows(&artifact), 60, "every beat in a row");
}

/// 30 steps of 0.1 s beaten `{"step": N}` alone, then a hang: the steps were timed at the
/// sample grid, so `--step-timeout auto` never learned a limit and `--stale-progress 60s`
/// failed the soak after a minute. Timed as they arrive, the limit (at least 10 s) fails the
/// hung step long before.
#[test]
fn step_timeout_auto_fails_a_hung_step_of_bare_beats_long_before_stale_progress() {
    let soak = Soak::new();
    let own = soak.root.root().join("own-times.json");
    let bare = format!("bare:30:0.1:{}", own.display());
    let (output, artifact) = run_trainer(
        &soak,
        "1",
        &["--step-timeout", "auto", "--stale-progress", "60s"],
        &[&bare, "hang"],
    );
    assert_exit(&output, 1, &artifact);
    let outcome = &artifact["outcome"];
    assert_eq!(outcome["failure_kind"], "stale_progress", "{outcome}");
    let reason = outcome["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("no beat for ") && reason.contains("since step 29 of phase `train`"),
        "{reason}"
    );
    assert!(reason.contains("(learned: 5 × p99"), "{reason}");
    let duration = artifact["duration_seconds"].as_f64().unwrap();
    assert!(duration < 45.0, "failed after {duration} s: {reason}");
}

/// A `t` of `time.monotonic()` failed a healthy run under `--step-timeout` at once ("step 2 has
/// taken 1796583052.7s"); a `t` 30 s behind read a goodput of 0 % beside 30 train steps. Such
/// a `t` is not used: the beats are timed by their arrival, counted, and said once.
#[test]
fn a_t_on_another_clock_neither_fails_the_run_nor_zeroes_its_goodput() {
    for clock in ["monotonic", "-30"] {
        let soak = Soak::new();
        let clock_action = format!("clock:{clock}");
        let (output, artifact) = run_trainer(
            &soak,
            "0.2",
            &["--step-timeout", "5s", "--stale-progress", "5s"],
            &[&clock_action, "train:30:0.05"],
        );
        assert_exit(&output, 0, &artifact);
        let summary = &artifact["summary"];
        assert_eq!(summary["steps"]["train"]["count"], 30, "{clock}: {summary}");
        assert_eq!(
            summary["heartbeat_errors"]["clock"], 30,
            "{clock}: {summary}"
        );
        let productive = summary["goodput"]["productive_seconds"].as_f64().unwrap();
        assert!(productive >= 1.0, "{clock}: {}", summary["goodput"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            stderr.matches("beats whose `t` disagrees").count(),
            1,
            "said once: {stderr}"
        );
    }
}

/// A thread that beats the last step again every 0.2 s while the loop hangs: its beats were
/// steps ("50 train steps (last 9)" where 10 happened) and progress. Now they are neither:
/// the stale period fails the soak, the steps are the ten that happened, the repeats counted.
#[test]
fn a_thread_repeating_its_step_keeps_no_hung_loop_alive() {
    let soak = Soak::new();
    let (output, artifact) = run_trainer(
        &soak,
        "0.2",
        &["--stale-progress", "3s"],
        &["train:10:0.05", "again:0.2:60"],
    );
    assert_exit(&output, 1, &artifact);
    assert_eq!(artifact["outcome"]["failure_kind"], "stale_progress");
    let duration = artifact["duration_seconds"].as_f64().unwrap();
    assert!(duration < 40.0, "failed after {duration} s");
    let summary = &artifact["summary"];
    let train = &summary["steps"]["train"];
    assert_eq!((&train["count"], &train["last"]), (&10.into(), &9.into()));
    assert!(
        summary["heartbeat_errors"]["repeats"].as_u64().unwrap() >= 5,
        "{summary}"
    );
    assert_eq!(beats_in_rows(&artifact), 10);
}

/// A trainer that opens the file with `open(path, "w")` at each beat: read once, then the soak
/// failed stale while it beat ten times a second (`truncations` 0). Each rewrite is noticed and
/// read from the start, counted.
#[test]
fn beats_written_by_rewriting_the_file_are_read_and_counted() {
    let soak = Soak::new();
    let (output, artifact) = run_trainer(
        &soak,
        "0.2",
        &["--stale-progress", "2s"],
        &["rewrite:30:0.1"],
    );
    assert_exit(&output, 0, &artifact);
    let summary = &artifact["summary"];
    let count = summary["steps"]["train"]["count"].as_u64().unwrap();
    // A beat rewritten before it was read is the writer's loss; most are read.
    assert!(count >= 15, "{summary}");
    let truncations = summary["heartbeat_errors"]["truncations"].as_u64().unwrap();
    assert!(truncations + 1 >= count, "{summary}");
}

/// The heartbeat file was on the state root (`<root>/<host>/<uid>/soaks/<id>/heartbeat`), under
/// Slurm a network home directory. It is in the runtime directory: `$XDG_RUNTIME_DIR/unilab`
/// when that is the user's, then `soaks/<id>/`, 0700, gone once the verdict is recorded.
#[test]
fn the_heartbeat_file_is_in_the_runtime_directory_and_gone_after_the_verdict() {
    let soak = Soak::new();
    let runtime = private_tempdir("unilab-runtime-");
    let report = soak.root.root().join("mode.json");
    let mode_action = format!("mode:{}", report.display());
    let mut cmd = soak.unilab();
    cmd.env("XDG_RUNTIME_DIR", runtime.path());
    let (output, artifact) = run_trainer_with(
        &soak,
        cmd,
        "0.2",
        &["--stale-progress", "5s"],
        &["train:2:0.05", &mode_action, "train:2:0.05"],
    );
    assert_exit(&output, 0, &artifact);
    let found: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let id = artifact["soak_id"].as_str().unwrap();
    let expected = runtime
        .path()
        .join("unilab/soaks")
        .join(id)
        .join("heartbeat");
    assert_eq!(found["path"], expected.to_str().unwrap(), "{found}");
    assert_eq!(found["dir_mode"], 0o700, "{found}");
    assert!(!Path::new(&expected).exists());
    assert!(
        !expected.parent().unwrap().exists(),
        "the soak's directory is removed"
    );
    assert!(
        walk(soak.root.root())
            .iter()
            .all(|p| !p.ends_with("heartbeat")),
        "nothing of it under the state root"
    );
    assert_eq!(artifact["summary"]["steps"]["train"]["count"], 4);
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// A runtime directory others can write to cannot be trusted: the soak is not refused, it runs
/// without heartbeats (the variable is not set for the command) and says why.
#[test]
fn an_unusable_runtime_directory_is_warned_of_and_the_soak_runs_without_heartbeats() {
    let soak = Soak::new();
    let runtime = private_tempdir("unilab-runtime-");
    std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let output = soak
        .unilab()
        .env("XDG_RUNTIME_DIR", runtime.path())
        .args(["--json", "soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args([
            "--sample-interval",
            "0.2",
            "--allow-no-progress",
            "--py-spy",
            "off",
        ])
        .args(["--", "sh", "-c", r#"test -z "${UNILAB_HEARTBEAT+set}""#])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("others can write"), "{stderr}");
    assert!(
        stderr.contains("the soak runs without heartbeats"),
        "{stderr}"
    );
    assert!(!runtime.path().join("unilab").exists());
}

/// The beats read after the last sample — a trainer that beats once more as it is stopped —
/// were the summary's but no row's: the rows' `beats` did not add up to it. They have a last
/// row of their own, after the exit.
#[test]
fn beats_read_during_the_teardown_are_in_a_last_row() {
    let soak = Soak::new();
    let script = r#"trap 'printf "{\"step\": 99}\n" >> "$UNILAB_HEARTBEAT"; exit 0' TERM
printf '{"step": 1}\n' >> "$UNILAB_HEARTBEAT"; sleep 0.3
printf '{"step": 2}\n' >> "$UNILAB_HEARTBEAT"
while :; do sleep 0.1; done"#;
    let output = soak
        .unilab()
        .args(["--json", "soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--sample-interval", "0.2", "--stale-progress", "1s"])
        .args(["--shutdown-grace", "2", "--py-spy", "off"])
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap();
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    assert_exit(&output, 1, &artifact);
    assert_eq!(artifact["outcome"]["failure_kind"], "stale_progress");
    let train = &artifact["summary"]["steps"]["train"];
    assert_eq!((&train["count"], &train["last"]), (&3.into(), &99.into()));
    assert_eq!(beats_in_rows(&artifact), 3, "every beat read is in a row");
    let rows = artifact["samples"].as_array().unwrap();
    let last = rows.last().unwrap();
    assert_eq!(last["heartbeat"]["step"], 99, "{last}");
    assert_eq!(last["after_exit"], true, "{last}");
    let indices: Vec<u64> = rows.iter().map(|r| r["index"].as_u64().unwrap()).collect();
    assert!(
        indices
            .iter()
            .enumerate()
            .all(|(i, index)| *index == i as u64),
        "{indices:?}"
    );
}
