//! Progress as the supervisor decides it, end to end (the design's "Progress in the record"):
//! what counts — an append in place, a change in a nested directory, a beat whose step or
//! phase moved, not one that repeats the last — and when it happened, recorded with each
//! sample and read as recorded by `history`, `soak show` and `job show`.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common::*;
use crate::soak::{Soak, verdict};

/// `--json soak run` of `sh -c SCRIPT sh PROGRESS_DIR` (the script finds the progress directory
/// in `$1`), sampled every 0.2 s, then `options`: its output and artifact.
fn run_script(soak: &Soak, options: &[&str], script: &str) -> (Output, Value) {
    let _ = std::fs::remove_file(soak.artifact_path());
    let mut args: Vec<OsString> = vec!["--json".into(), "soak".into(), "run".into()];
    args.extend([
        "--progress-dir".into(),
        soak.progress().into(),
        "--output".into(),
        soak.artifact_path().into(),
        "--sample-interval".into(),
        "0.2".into(),
        "--shutdown-grace".into(),
        "0.5".into(),
        "--py-spy".into(),
        "off".into(),
    ]);
    args.extend(options.iter().map(Into::into));
    args.extend(["--".into(), "sh".into(), "-c".into(), script.into()]);
    args.extend(["sh".into(), soak.progress().into()]);
    let output = soak.unilab().args(args).output().unwrap();
    let artifact = std::fs::read(soak.artifact_path())
        .map(|bytes| serde_json::from_slice(&bytes).unwrap())
        .unwrap_or(Value::Null);
    (output, artifact)
}

/// A file's or directory's modification time, Unix microseconds (as the log records times).
fn mtime_us(path: &Path) -> i64 {
    let meta = std::fs::metadata(path).unwrap();
    meta.mtime() * 1_000_000 + meta.mtime_nsec() / 1_000
}

/// The `soak_sampled` records of a soak, as `history --json` shows them.
fn sampled(root: &TestRoot, soak_id: &str) -> Vec<Value> {
    let out = root
        .unilab()
        .args(["history", "--soak", soak_id, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .filter(|line| line["kind"] == "soak_sampled")
        .collect()
}

/// The progress the last sample recorded: what made it then, and when progress last happened.
fn last_noted(samples: &[Value]) -> (Value, Option<i64>) {
    let last = samples.last().expect("a sample");
    (
        last["progress_seen"].clone(),
        last["last_progress_at_us"].as_i64(),
    )
}

/// A trainer whose only progress is an append to a file that was there before it started —
/// no new file, its directory's time unchanged — goes on well past `--stale-progress`, and
/// when progress last happened is the file's time, not a sample's.
#[test]
fn an_append_in_place_is_progress_at_the_files_time() {
    let soak = Soak::new();
    let log = soak.progress().join("train.log");
    std::fs::write(&log, b"started\n").unwrap();
    let dir_before = mtime_us(&soak.progress());
    // Twenty appends 0.2 s apart: 4 s of progress against a stale period of 3 s.
    let script = r#"i=0
while [ "$i" -lt 20 ]; do sleep 0.2; echo "step $i" >> "$1/train.log"; i=$((i + 1)); done"#;
    let (output, artifact) = run_script(&soak, &["--stale-progress", "3s"], script);
    let shown = verdict(&output);
    assert_eq!(output.status.code(), Some(0), "{shown}");
    assert_eq!(artifact["outcome"]["status"], "passed", "{artifact}");
    assert_eq!(mtime_us(&soak.progress()), dir_before, "no entry was added");
    assert_eq!(
        std::fs::read_dir(soak.progress()).unwrap().count(),
        1,
        "one file"
    );
    let id = artifact["soak_id"].as_str().unwrap();
    let samples = sampled(&soak.root, id);
    let appended = samples
        .iter()
        .filter(|s| s["progress_seen"] == "files")
        .count();
    assert!(appended >= 2, "{appended} samples saw an append");
    assert_eq!(last_noted(&samples).1, Some(mtime_us(&log)));
}

/// A trainer that only adds and removes an entry in a directory two levels down (the files,
/// their bytes and every other time unchanged) goes on past `--stale-progress`, and when
/// progress last happened is that directory's time.
#[test]
fn a_change_in_a_nested_directory_is_progress_at_its_time() {
    let soak = Soak::new();
    let nested = soak.progress().join("run/ckpt");
    std::fs::create_dir_all(&nested).unwrap();
    std::fs::write(nested.join("weights"), b"w").unwrap();
    let script = r#"i=0
while [ "$i" -lt 20 ]; do
  sleep 0.2; mkdir "$1/run/ckpt/.tmp"; rmdir "$1/run/ckpt/.tmp"; i=$((i + 1))
done"#;
    let (output, artifact) = run_script(&soak, &["--stale-progress", "3s"], script);
    assert_eq!(output.status.code(), Some(0), "{}", verdict(&output));
    assert_eq!(artifact["outcome"]["status"], "passed", "{artifact}");
    let id = artifact["soak_id"].as_str().unwrap();
    let samples = sampled(&soak.root, id);
    assert!(samples.len() >= 10, "{} samples", samples.len());
    for sample in &samples {
        assert_eq!(
            (&sample["progress"]["files"], &sample["progress"]["bytes"]),
            (&Value::from(1), &Value::from(1))
        );
    }
    assert_eq!(last_noted(&samples).1, Some(mtime_us(&nested)));
}

/// A trainer whose loop hangs after one step while a thread keeps beating that step again:
/// each beat was progress, and the soak ran until the thread stopped and the trainer exited
/// 0, passing. A repeated `(step, phase)` is no progress: it fails as stale.
#[test]
fn a_beat_that_repeats_the_last_step_keeps_no_hung_trainer_alive() {
    let soak = Soak::new();
    let trainer = fixtures_dir().join("heartbeat_trainer.py");
    let script = format!("python3 {} train:1:0.1 again:0.1:20", trainer.display());
    let (output, artifact) = run_script(&soak, &["--stale-progress", "2s"], &script);
    assert_eq!(output.status.code(), Some(1), "{}", verdict(&output));
    assert_eq!(
        artifact["outcome"]["failure_kind"], "stale_progress",
        "{}",
        artifact["outcome"]
    );
    let beaten: u64 = artifact["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|row| row["heartbeat"]["beats"].as_u64())
        .sum();
    assert!(
        beaten >= 10,
        "the thread beat {beaten} times before the soak failed"
    );
    let id = artifact["soak_id"].as_str().unwrap();
    let samples = sampled(&soak.root, id);
    let progressed: Vec<_> = samples
        .iter()
        .filter(|s| s["progress_seen"] == "beat")
        .collect();
    assert_eq!(progressed.len(), 1, "only the first beat: {progressed:#?}");
}

/// When progress last happened is the time of the last change (the newest file's time), not
/// the sample that noticed it: recorded with that sample and kept by those after it, and what
/// `soak show` and `job show` say (`job show` said a time estimated from the samples' record
/// times and the verdict).
#[test]
fn when_progress_stopped_is_the_last_files_time_in_every_view() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-progress-");
    let (mut cmd, progress) = job_rank_soak(&root, dir.path(), "P", 0);
    let out = cmd
        .args(["--sample-interval", "0.2", "--stale-progress", "1.5s"])
        .args(["--shutdown-grace", "0.5", "--py-spy", "off", "--"])
        .args([
            "sh",
            "-c",
            r#"sleep 0.3; echo x > "$1/ckpt"; sleep 3600"#,
            "sh",
        ])
        .arg(&progress)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let written = mtime_us(&progress.join("ckpt"));
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("soak-0.json")).unwrap()).unwrap();
    assert_eq!(artifact["outcome"]["failure_kind"], "stale_progress");
    let id = artifact["soak_id"].as_str().unwrap();

    let samples = sampled(&root, id);
    let first = samples
        .iter()
        .position(|s| s["progress_seen"] == "files")
        .expect("a sample saw the file");
    let after = &samples[first..];
    assert!(
        after.len() >= 3,
        "{} samples from the change on",
        after.len()
    );
    for sample in after {
        assert_eq!(sample["last_progress_at_us"], written, "{sample:#}");
    }
    let at = written as f64 / 1e6;
    let rows = artifact["samples"].as_array().unwrap();
    assert_eq!(rows.last().unwrap()["last_progress_at"], at);

    let json = |args: &[&str]| -> Value {
        let out = root.unilab().arg("--json").args(args).output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
    };
    assert_eq!(json(&["soak", "show", id])["last_progress_at"], at);
    let view = json(&["job", "show", "P"]);
    assert_eq!(view["ranks"][0]["last_progress_at"], at, "{view:#}");
    // A rank alone stalled first of no one.
    assert_eq!(view["first_stalled"], Value::Null, "{view:#}");
}
