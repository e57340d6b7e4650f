//! `unilab soak ...` end to end, with real trainers: every outcome, the artifact and its export,
//! what is left running afterwards (nothing), and what reaches the log (no credentials).

use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use predicates::prelude::*;
use serde_json::Value;
use unilab::testing::artifact::digest_matches;

/// A state root with a private progress directory.
pub(crate) struct Soak {
    pub(crate) root: TestRoot,
}

impl Soak {
    pub(crate) fn new() -> Self {
        let root = TestRoot::new();
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(root.root().join("progress"))
            .unwrap();
        Soak { root }
    }

    pub(crate) fn progress(&self) -> PathBuf {
        self.root.root().join("progress")
    }

    pub(crate) fn artifact_path(&self) -> PathBuf {
        self.root.root().join("artifact.json")
    }

    /// `unilab --root ROOT` as a `std` command, to spawn, signal or limit: the fakes first on
    /// `PATH`, nothing else inherited.
    pub(crate) fn command(&self) -> Command {
        let mut cmd = Command::new(unilab_bin());
        cmd.env_clear()
            .env("PATH", path_with_fixtures())
            .env("HOME", self.root.root())
            .arg("--root")
            .arg(self.root.root());
        cmd
    }

    /// What `soak run` takes after its name for a soak of the example trainer: this soak's
    /// progress directory and output, `options`, then the trainer with `trainer_args`.
    pub(crate) fn trainer_soak(
        &self,
        options: &[&str],
        trainer_args: &[&str],
    ) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec![
            "--progress-dir".into(),
            self.progress().into(),
            "--output".into(),
            self.artifact_path().into(),
        ];
        args.extend(options.iter().map(Into::into));
        args.extend(["--".into(), "python3".into(), trainer().into()]);
        args.extend(["--progress-dir".into(), self.progress().into()]);
        args.extend(trainer_args.iter().map(Into::into));
        args
    }

    pub(crate) fn unilab(&self) -> assert_cmd::Command {
        let mut cmd = self.root.unilab();
        cmd.env("UNILAB_TOOL_TIMEOUT", "2");
        cmd
    }

    /// `soak run` with fast defaults, then `trainer_args` for the example trainer.
    pub(crate) fn run(&self, soak_args: &[&str], trainer_args: &[&str]) -> (Output, Value) {
        self.run_with(self.unilab(), soak_args, trainer_args)
    }

    pub(crate) fn run_with(
        &self,
        mut cmd: assert_cmd::Command,
        soak_args: &[&str],
        trainer_args: &[&str],
    ) -> (Output, Value) {
        let mut options = default_unless(soak_args, ["--sample-interval", "0.2"]);
        options.extend(default_unless(soak_args, ["--shutdown-grace", "0.5"]));
        options.extend(soak_args);
        // Each run is a soak of its own, read back from the artifact it writes: the previous
        // run's (already returned) would be refused as an existing `--output`.
        let _ = std::fs::remove_file(self.artifact_path());
        cmd.args(["--json", "soak", "run"])
            .args(self.trainer_soak(&options, trainer_args));
        let output = cmd.output().unwrap();
        let artifact = std::fs::read(self.artifact_path())
            .map(|bytes| serde_json::from_slice(&bytes).unwrap())
            .unwrap_or(Value::Null);
        (output, artifact)
    }

    pub(crate) fn history_kinds(&self, soak_id: &str) -> Vec<String> {
        history_kinds(self.unilab(), &["--soak", soak_id])
    }
}

/// `flag` and its value, unless `args` give the flag.
fn default_unless<'a>(args: &[&str], flag: [&'a str; 2]) -> Vec<&'a str> {
    if args.contains(&flag[0]) {
        Vec::new()
    } else {
        flag.to_vec()
    }
}

trait DirBuilderMode {
    fn mode(&mut self, mode: u32) -> &mut Self;
}
impl DirBuilderMode for std::fs::DirBuilder {
    fn mode(&mut self, mode: u32) -> &mut Self {
        std::os::unix::fs::DirBuilderExt::mode(self, mode)
    }
}

/// `soak run` of the example trainer in the background, sampled every `interval`.
fn spawn_soak(soak: &Soak, interval: &str, trainer_args: &[&str]) -> std::process::Child {
    soak.command()
        // Every nvidia-smi stream the fake starts notes its pid here.
        .env("FAKE_NVIDIA_SMI_PIDS", soak.root.root().join("smi-pids"))
        .args(["soak", "run"])
        .args(soak.trainer_soak(&["--sample-interval", interval], trainer_args))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn unilab soak run")
}

pub(crate) fn verdict(output: &Output) -> Value {
    let text = String::from_utf8_lossy(&output.stdout);
    // Under `--json` standard output is exactly one JSON object: the command's output is not
    // mixed in.
    assert_eq!(
        text.lines().count(),
        1,
        "stdout: {text}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Whether the process a leaked or sampled entry names is gone (or its pid reused).
fn identity_gone(pid: u64, start_ticks: u64) -> bool {
    proc_stat(pid).is_none_or(|stat| stat.has_exited() || stat.start_ticks != start_ticks)
}

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
            .contains("startup timeout of 1 s")
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
fn a_grandchild_that_escapes_with_setsid_is_a_leak_and_is_killed() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(&[], &["--steps", "3", "--step-seconds", "0.1", "--leak"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(artifact["outcome"]["failure_kind"], "leaked_processes");
    let leaked = artifact["leaked_processes"].as_array().unwrap();
    assert_eq!(leaked.len(), 1, "{leaked:?}");
    assert_eq!(leaked[0]["name"], "sleep");
    assert_eq!(leaked[0]["cmdline"], serde_json::json!(["sleep", "600"]));
    let (pid, ticks) = (
        leaked[0]["pid"].as_u64().unwrap(),
        leaked[0]["start_ticks"].as_u64().unwrap(),
    );
    eventually("the leaked process to die", Duration::from_secs(5), || {
        identity_gone(pid, ticks)
    });
}

#[test]
fn a_child_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let soak = Soak::new();
    let started = Instant::now();
    let (output, artifact) = soak.run(
        &["--stale-progress", "0.4", "--shutdown-grace", "1"],
        &[
            "--steps",
            "100",
            "--step-seconds",
            "0.1",
            "--checkpoint-every",
            "1",
            "--hang-after",
            "2",
            "--ignore-sigterm",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(artifact["outcome"]["failure_kind"], "stale_progress");
    assert_eq!(
        artifact["exit"]["signal"], 9,
        "SIGTERM was ignored, so SIGKILL ended it"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// `soak list` said a soak ran 17 s (to its verdict's record, the tree's shutdown included)
/// where `soak show` said 12 s: a soak's duration is its command's run time, in every command.
#[test]
fn list_show_and_history_tell_the_same_run_time() {
    let soak = Soak::new();
    // SIGTERM ignored: the shutdown waits out its grace, seconds the command did not run.
    let (output, artifact) = soak.run(
        &["--stale-progress", "0.4", "--shutdown-grace", "3"],
        &[
            "--steps",
            "100",
            "--step-seconds",
            "0.1",
            "--checkpoint-every",
            "1",
            "--hang-after",
            "2",
            "--ignore-sigterm",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    let id = verdict(&output)["soak_id"].as_str().unwrap().to_owned();
    assert!(
        artifact["teardown_seconds"].as_f64().unwrap() >= 3.0,
        "{artifact}"
    );
    let text = |args: &[&str]| -> String {
        String::from_utf8(
            soak.unilab()
                .args(args)
                .assert()
                .success()
                .get_output()
                .stdout
                .clone(),
        )
        .unwrap()
    };
    let list = text(&["soak", "list"]);
    let row: Vec<&str> = list
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap()
        .split_whitespace()
        .collect();
    // ID STATUS(2 words) DATE TIME DURATION
    let listed = row[5];
    let show = text(&["soak", "show", &id]);
    let ran = show
        .lines()
        .find_map(|l| l.strip_prefix("ran:"))
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(listed, ran, "{list}\n{show}");
    let history = text(&["history", "--soak", &id]);
    assert!(
        history.contains(&format!("failed after {ran}: ")),
        "{history}"
    );
}

/// The pids and start ticks of the last sampled tree of a soak.
fn sampled_tree(soak: &Soak, id: &str) -> Vec<(u64, u64)> {
    let out = soak
        .unilab()
        .args(["--json", "history", "--soak", id])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let Some(last) = String::from_utf8(out)
        .unwrap()
        .lines()
        .rev()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["kind"] == "soak_sampled")
    else {
        return Vec::new();
    };
    last["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["pid"].as_u64().unwrap(),
                p["start_ticks"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn soak_ids(soak: &Soak) -> Vec<Value> {
    let out = soak
        .unilab()
        .args(["--json", "soak", "list"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice::<Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// The pids of the fake nvidia-smi streams started so far, one a line.
fn smi_streams(soak: &Soak) -> String {
    std::fs::read_to_string(soak.root.root().join("smi-pids")).unwrap_or_default()
}

#[test]
fn a_supervisor_killed_with_sigkill_leaves_no_survivors_and_is_reported_abandoned() {
    // At 0.05 s the samples are committed in groups: the kill lands between two.
    for interval in ["0.2", "0.05"] {
        killed_with_sigkill(interval);
    }
}

fn killed_with_sigkill(interval: &str) {
    let soak = Soak::new();
    let mut supervisor = spawn_soak(
        &soak,
        interval,
        &[
            "--steps",
            "1000",
            "--step-seconds",
            "0.1",
            "--children",
            "2",
            "--leak",
        ],
    );
    let mut id = String::new();
    let mut tree = Vec::new();
    eventually(
        "the whole tree to be sampled",
        Duration::from_secs(15),
        || {
            if let Some(soak_id) = soak_ids(&soak)
                .first()
                .and_then(|s| s["soak_id"].as_str().map(str::to_owned))
            {
                id = soak_id;
                tree = sampled_tree(&soak, &id);
            }
            // The trainer, its two children and the escaped grandchild, and both nvidia-smi
            // streams started (a loaded machine may start them after the tree).
            tree.len() >= 4 && smi_streams(&soak).lines().count() >= 2
        },
    );
    supervisor.kill().unwrap();
    supervisor.wait().unwrap();
    for (pid, ticks) in &tree {
        eventually(&format!("pid {pid} to die"), Duration::from_secs(5), || {
            identity_gone(*pid, *ticks)
        });
    }
    // Its nvidia-smi streams, which never end by themselves, end with it.
    let streams = smi_streams(&soak);
    for pid in streams.lines() {
        eventually(
            &format!("nvidia-smi {pid} to die"),
            Duration::from_secs(5),
            || exited(pid),
        );
    }
    let listed = soak_ids(&soak);
    assert_eq!(listed[0]["outcome"]["status"], "abandoned");
    soak.unilab()
        .args(["soak", "list"])
        .assert()
        .success()
        .stdout(predicate::str::contains("abandoned"));
    let kinds = soak.history_kinds(&id);
    assert_eq!(
        kinds.iter().filter(|k| *k == "soak_abandoned").count(),
        1,
        "recorded once"
    );
    // The artifact of an abandoned soak can still be made from the log.
    let exported = soak
        .unilab()
        .args(["soak", "export", &id])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let artifact: Value = serde_json::from_slice(&exported).unwrap();
    assert_eq!(artifact["outcome"]["status"], "abandoned");
    assert!(digest_matches(&exported));
    soak.unilab().args(["log", "verify"]).assert().success();
}

/// Below a second, samples are committed together at most once a second: a 0.05 s soak of
/// about two seconds makes a handful of commits, not forty, and every sample is in the log.
#[test]
fn samples_taken_faster_than_a_second_are_committed_together() {
    let soak = Soak::new();
    let mut cmd = soak.unilab();
    cmd.arg("-vv");
    let (output, artifact) = soak.run_with(
        cmd,
        &["--sample-interval", "0.05"],
        &["--steps", "40", "--step-seconds", "0.05"],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let detail = String::from_utf8_lossy(&output.stderr);
    // The trainer's output shares standard error: a detail line may follow its text on a line.
    let groups: Vec<u64> = detail
        .lines()
        .filter_map(|l| {
            let at = l.find("event log: committed ")?;
            let rest = &l[at + "event log: committed ".len()..];
            rest.contains(": soak_sampled)")
                .then(|| rest.split(' ').next().unwrap().parse().unwrap())
        })
        .collect();
    let samples = artifact["summary"]["samples"].as_u64().unwrap();
    assert!(samples >= 30, "{samples} samples");
    assert_eq!(groups.iter().sum::<u64>(), samples, "{detail}");
    let seconds = artifact["duration_seconds"].as_f64().unwrap() + 1.0;
    assert!(
        (groups.len() as f64) <= seconds + 1.0,
        "{} commits of samples in {seconds:.1} s: {groups:?}",
        groups.len()
    );
}

/// Ctrl-C gave no feedback while the tree had its grace period, and a second Ctrl-C did nothing:
/// a trainer that ignores SIGTERM kept unilab silent for the whole grace. Now it says what it is
/// doing, and the second interruption kills the tree at once.
#[test]
fn a_second_ctrl_c_kills_the_tree_at_once_and_the_first_says_so() {
    let soak = Soak::new();
    let mut supervisor = soak
        .command()
        .args(["soak", "run"])
        .args(soak.trainer_soak(
            &[
                "--sample-interval",
                "0.2",
                "--shutdown-grace",
                "120",
                "--py-spy",
                "off",
            ],
            &[
                "--steps",
                "1000",
                "--step-seconds",
                "0.1",
                "--ignore-sigterm",
            ],
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let said = gather_lines(supervisor.stderr.take().unwrap());
    eventually("a first checkpoint", Duration::from_secs(60), || {
        std::fs::read_dir(soak.progress()).is_ok_and(|mut d| d.next().is_some())
    });
    let pid = nix::unistd::Pid::from_raw(supervisor.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::SIGINT).unwrap();
    eventually("the stopping note", Duration::from_secs(60), || {
        said.contains("stopping the tree (interrupted): SIGTERM now, SIGKILL in 2m 00s — Ctrl-C again to kill it now")
    });
    let second = std::time::Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::SIGINT).unwrap();
    let status = supervisor.wait().unwrap();
    assert!(
        second.elapsed() < Duration::from_secs(60),
        "killed at once, not after the 120 s grace: {:?}",
        second.elapsed()
    );
    assert_eq!(status.code(), Some(1));
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    assert_eq!(artifact["outcome"]["failure_kind"], "interrupted");
}

#[test]
fn an_interrupted_soak_stops_its_tree_and_says_so() {
    let soak = Soak::new();
    let mut supervisor = spawn_soak(
        &soak,
        "0.2",
        &[
            "--steps",
            "1000",
            "--step-seconds",
            "0.1",
            "--children",
            "1",
        ],
    );
    let mut tree = Vec::new();
    eventually("a sampled tree", Duration::from_secs(15), || {
        if let Some(id) = soak_ids(&soak)
            .first()
            .and_then(|s| s["soak_id"].as_str().map(str::to_owned))
        {
            tree = sampled_tree(&soak, &id);
        }
        tree.len() >= 2
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor.id() as i32),
        nix::sys::signal::SIGINT,
    )
    .unwrap();
    let status = supervisor.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    assert_eq!(artifact["outcome"]["failure_kind"], "interrupted");
    for (pid, ticks) in &tree {
        eventually(&format!("pid {pid} to die"), Duration::from_secs(5), || {
            identity_gone(*pid, *ticks)
        });
    }
}

#[test]
fn a_hung_or_missing_nvidia_smi_is_recorded_and_the_soak_is_judged_on_progress() {
    for (variable, value, says) in [
        ("FAKE_NVIDIA_SMI_MODE", "hang", "did not answer within"),
        (
            "UNILAB_NVIDIA_SMI",
            "/nonexistent/nvidia-smi",
            "was not found",
        ),
    ] {
        let soak = Soak::new();
        let mut cmd = soak.unilab();
        cmd.env(variable, value).env("UNILAB_TOOL_TIMEOUT", "0.3");
        let started = Instant::now();
        let (output, artifact) =
            soak.run_with(cmd, &[], &["--steps", "12", "--step-seconds", "0.1"]);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{value}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(started.elapsed() < Duration::from_secs(20));
        assert!(
            artifact["summary"]["sampler_errors"].as_u64().unwrap() > 0,
            "{value}"
        );
        let errors: Vec<String> = artifact["samples"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| {
                s["errors"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| e.as_str().unwrap().to_owned())
            })
            .collect();
        assert!(
            errors
                .iter()
                .any(|e| e.contains(says) || e.contains("has not answered")),
            "{value}: {errors:?}"
        );
        // Nothing is known of the GPUs: null, never a made-up 0, and each such sample says why
        // (the first may precede the first answer).
        for sample in artifact["samples"].as_array().unwrap() {
            assert_eq!(sample["gpus"], Value::Null, "{value}: {sample}");
            assert_eq!(sample["host_gpu_memory_used_mib"], Value::Null);
            assert_eq!(sample["tree_gpu_memory_mib"], Value::Null);
        }
        assert_eq!(artifact["summary"]["peak_tree_gpu_memory_mib"], Value::Null);
        // Sampling kept its schedule: about one sample per 0.2 s of the run.
        let samples = artifact["samples"].as_array().unwrap().len() as f64;
        let expected = artifact["duration_seconds"].as_f64().unwrap() / 0.2;
        assert!(
            samples >= expected - 2.0,
            "{value}: {samples} samples in {expected} intervals"
        );
    }
}

#[test]
fn gpu_samples_name_each_gpu_and_keep_the_trees_memory_apart_from_the_hosts() {
    let soak = Soak::new();
    let gpu = "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f";
    let mut cmd = soak.unilab();
    // Another tenant (pid 1) holds 512 MiB; the trainer lists itself with 300 MiB.
    cmd.env("FAKE_NVIDIA_SMI_APPS", format!("1|init|512|{gpu}"))
        .env("FAKE_NVIDIA_SMI_APPS_FILE", soak.root.root().join("apps"))
        .env(
            "FAKE_NVIDIA_SMI_GPUS",
            format!("{gpu}|NVIDIA H200|143771|2048|55;GPU-11111111-2222-3333-4444-555555555555|NVIDIA H200|143771|[N/A]|0"),
        );
    let (output, artifact) = soak.run_with(
        cmd,
        &[],
        &[
            "--steps",
            "10",
            "--step-seconds",
            "0.1",
            "--gpu-memory",
            "300",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(artifact["schema"], "unilab.soak.artifact/4");
    let summary = &artifact["summary"];
    assert_eq!(summary["peak_host_gpu_memory_used_mib"], 2048);
    assert_eq!(
        summary["peak_tree_gpu_memory_mib"], 300,
        "the tenant's 512 MiB is not ours"
    );
    let samples = artifact["samples"].as_array().unwrap();
    let known: Vec<&Value> = samples.iter().filter(|s| !s["gpus"].is_null()).collect();
    assert!(!known.is_empty(), "{samples:?}");
    for sample in &known {
        let gpus = sample["gpus"].as_array().unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0]["uuid"], gpu);
        assert_eq!(gpus[0]["index"], 0);
        assert_eq!(gpus[0]["utilization_percent"], 55);
        assert_eq!(gpus[0]["memory_used_mib"], 2048);
        assert_eq!(gpus[0]["memory_total_mib"], 143771);
        // Unknown is null, not 0.
        assert_eq!(gpus[1]["memory_used_mib"], Value::Null);
        assert_eq!(gpus[1]["tree_memory_mib"], 0);
        assert_eq!(sample["host_gpu_memory_used_mib"], 2048);
    }
    assert!(
        known
            .iter()
            .any(|s| s["gpus"][0]["tree_memory_mib"] == 300 && s["tree_gpu_memory_mib"] == 300),
        "{known:?}"
    );
    // Until nvidia-smi first answers, the GPUs are unknown: null, not zeros, and no error.
    for sample in samples.iter().filter(|s| s["gpus"].is_null()) {
        assert_eq!(sample["host_gpu_memory_used_mib"], Value::Null);
        assert_eq!(sample["tree_gpu_memory_mib"], Value::Null);
    }
    assert_eq!(artifact["runtime"]["gpu"]["gpus"][0]["name"], "NVIDIA H200");
    assert_eq!(artifact["runtime"]["gpu"]["driver_version"], "580.95.05");
    assert_eq!(artifact["runtime"]["gpu"]["cuda_version"], "13.0");
}

#[test]
fn an_untrustworthy_progress_directory_is_refused() {
    let soak = Soak::new();
    let open = soak.root.root().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    soak.unilab()
        .args(["soak", "run", "--progress-dir"])
        .arg(&open)
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--", "true"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("others can write to it"));
    if is_root() {
        let theirs = soak.root.root().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        soak.unilab()
            .args(["soak", "run", "--progress-dir"])
            .arg(&theirs)
            .arg("--output")
            .arg(soak.artifact_path())
            .args(["--", "true"])
            .assert()
            .code(3)
            .stderr(predicate::str::contains("it belongs to uid 65534"));
    } else {
        eprintln!("skipped the foreign-owner case: needs root to chown");
    }
    assert!(
        !soak.root.log_path().exists(),
        "a refused soak records nothing"
    );
}

#[test]
fn invalid_parameters_are_usage_errors() {
    let soak = Soak::new();
    let base = |extra: &[&str]| {
        let mut cmd = soak.unilab();
        cmd.args(["soak", "run", "--progress-dir"])
            .arg(soak.progress())
            .arg("--output")
            .arg(soak.artifact_path())
            .args(extra);
        cmd
    };
    base(&[
        "--sample-interval",
        "5",
        "--startup-timeout",
        "1",
        "--",
        "true",
    ])
    .assert()
    .code(2)
    .stderr(predicate::str::contains("at least one sample interval"));
    base(&["--sample-interval", "fast", "--", "true"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is not a duration"));
    base(&["--env", "=VALUE", "--", "true"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is not KEY=VALUE"));
    base(&[]).assert().code(2);
    soak.unilab()
        .args(["soak", "show", "nope"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("no soak `nope`"));
}

#[test]
fn credentials_never_reach_the_log_or_the_artifact() {
    let soak = Soak::new();
    let mut cmd = soak.unilab();
    cmd.env("WANDB_API_KEY", "sekrit-wandb-31337")
        .env("CUDA_VISIBLE_DEVICES", "0");
    let (output, artifact) = soak.run_with(
        cmd,
        &[
            "--env",
            "HF_TOKEN=sekrit-hf-424242",
            "--env",
            "NCCL_DEBUG=INFO",
            "--meta",
            "note=run with sekrit-hf-424242",
            "--meta",
            "repo=https://me:sekrit-url-777@git.example.com/r.git",
        ],
        // The command prints them, and carries one on its command line.
        &[
            "--steps",
            "4",
            "--step-seconds",
            "0.1",
            "--print-env",
            "HF_TOKEN",
            "--print-env",
            "WANDB_API_KEY",
            "--print-env",
            "sekrit-wandb-31337",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let tail = artifact["output_tail"]["stdout"].as_str().unwrap();
    assert!(
        tail.starts_with("HF_TOKEN=[redacted]\nWANDB_API_KEY=[redacted]\n[redacted]=None\n"),
        "{tail}"
    );
    assert_eq!(artifact["metadata"]["note"], "run with [redacted]");
    assert_eq!(
        artifact["metadata"]["repo"],
        "https://me:[redacted]@git.example.com/r.git"
    );
    assert!(
        artifact["command"]
            .as_array()
            .unwrap()
            .contains(&Value::from("[redacted]"))
    );
    assert_eq!(
        artifact["parameters"]["environment"]["HF_TOKEN"],
        "[redacted]"
    );
    assert_eq!(artifact["parameters"]["environment"]["NCCL_DEBUG"], "INFO");
    assert_eq!(
        artifact["runtime"]["environment"]["WANDB_API_KEY"],
        "[redacted]"
    );
    assert_eq!(
        artifact["runtime"]["environment"]["CUDA_VISIBLE_DEVICES"],
        "0"
    );
    let log = std::fs::read(soak.root.log_path()).unwrap();
    let written = std::fs::read(soak.artifact_path()).unwrap();
    for secret in [
        &b"sekrit-wandb-31337"[..],
        b"sekrit-hf-424242",
        b"sekrit-url-777",
    ] {
        assert!(
            !log.windows(secret.len()).any(|w| w == secret),
            "a secret reached the log"
        );
        assert!(
            !written.windows(secret.len()).any(|w| w == secret),
            "a secret reached the artifact"
        );
    }
}

/// A trainer given credentials as flags, that echoes its arguments and starts a worker (escaping
/// its session, so that it is leaked and in the evidence) with credentials of its own.
const CREDENTIAL_FLAGS_TRAINER: &str = r#"
import os, subprocess, sys, time
progress = sys.argv[1]
print("args:", " ".join(sys.argv[2:]), flush=True)
subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(600)",
     "--api-key=key-child-5150", "--secret", "child-sekrit-99", "--lr", "0.1"],
    start_new_session=True,
)
for step in range(6):
    with open(os.path.join(progress, f"step-{step}"), "w") as f:
        f.write("x")
    time.sleep(0.2)
"#;

/// Credentials given as flags reached every record: `python3 train.py --token=tok_abc…` and a
/// child's `--password hunter2` were kept raw in the log, and so in `history`, `export`,
/// `show`, the report, `list` and the evidence, while only variables' values and URL passwords
/// were masked. The values of credential-named flags (`--flag=V` and `--flag V`) are masked
/// where a command line enters the record; the flags' names stay.
#[test]
fn credentials_given_as_flags_never_reach_the_log_or_any_view_of_it() {
    let soak = Soak::new();
    let script = soak.root.root().join("creds.py");
    std::fs::write(&script, CREDENTIAL_FLAGS_TRAINER).unwrap();
    let output = soak
        .unilab()
        .args(["--json", "soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--sample-interval", "0.2", "--shutdown-grace", "0.5"])
        .args(["--py-spy", "off", "--", "python3"])
        .arg(&script)
        .arg(soak.progress())
        .args([
            "--token=tok_abc123",
            "--password",
            "hunter2",
            "--steps",
            "6",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    assert_eq!(
        artifact["outcome"]["failure_kind"], "leaked_processes",
        "{artifact}"
    );
    let id = artifact["soak_id"].as_str().unwrap().to_owned();
    let args = |value: &Value| -> Vec<String> {
        let args = value
            .as_array()
            .unwrap_or_else(|| panic!("a list: {value}"));
        args.iter()
            .skip(3)
            .map(|a| a.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        args(&artifact["command"]),
        [
            "--token=[redacted]",
            "--password",
            "[redacted]",
            "--steps",
            "6"
        ]
    );
    let worker = [
        "--api-key=[redacted]",
        "--secret",
        "[redacted]",
        "--lr",
        "0.1",
    ];
    let leaked = &artifact["leaked_processes"][0];
    assert_eq!(args(&leaked["cmdline"]), worker, "{artifact}");
    let in_evidence = artifact["evidence"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == leaked["pid"])
        .unwrap_or_else(|| panic!("the worker is in the evidence: {artifact}"));
    assert_eq!(args(&in_evidence["cmdline"]), worker);
    let tail = artifact["output_tail"]["stdout"].as_str().unwrap();
    assert!(
        tail.starts_with("args: --token=[redacted] --password [redacted] --steps 6\n"),
        "the values are masked where the command echoes them: {tail}"
    );

    let text = |args: &[&str]| -> Vec<u8> {
        soak.unilab()
            .args(args)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone()
    };
    let report = soak.root.root().join("report.html");
    soak.unilab()
        .args(["soak", "report", &id, "--output"])
        .arg(&report)
        .assert()
        .success();
    let views: Vec<(&str, Vec<u8>)> = vec![
        ("the log file", std::fs::read(soak.root.log_path()).unwrap()),
        ("the artifact", std::fs::read(soak.artifact_path()).unwrap()),
        ("history", text(&["history", "--soak", &id])),
        (
            "history --json",
            text(&["--json", "history", "--soak", &id]),
        ),
        ("export", text(&["soak", "export", &id])),
        ("show", text(&["soak", "show", &id])),
        ("show --json", text(&["--json", "soak", "show", &id])),
        ("list", text(&["soak", "list"])),
        ("list --json", text(&["--json", "soak", "list"])),
        ("the report", std::fs::read(&report).unwrap()),
    ];
    for (view, bytes) in &views {
        for secret in ["tok_abc123", "hunter2", "key-child-5150", "child-sekrit-99"] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "`{secret}` reached {view}"
            );
        }
    }
    let history = String::from_utf8_lossy(&views[3].1);
    assert!(history.contains("--token=[redacted]") && history.contains("--api-key=[redacted]"));
    soak.unilab().args(["log", "verify"]).assert().success();
    let (pid, ticks) = (
        leaked["pid"].as_u64().unwrap(),
        leaked["start_ticks"].as_u64().unwrap(),
    );
    eventually("the leaked worker to die", Duration::from_secs(5), || {
        identity_gone(pid, ticks)
    });
}

#[test]
fn status_and_history_work_while_a_soak_appends() {
    let soak = Soak::new();
    let mut supervisor = spawn_soak(&soak, "0.05", &["--steps", "30", "--step-seconds", "0.1"]);
    let mut reads = 0;
    while supervisor.try_wait().unwrap().is_none() {
        soak.unilab().args(["mps", "status"]).assert().success();
        soak.unilab().args(["history", "--json"]).assert().success();
        soak.unilab().args(["log", "verify"]).assert().success();
        reads += 1;
    }
    assert!(supervisor.wait().unwrap().success());
    assert!(
        reads >= 3,
        "only {reads} rounds of reads overlapped the soak"
    );
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

/// A bad `--output` is found before the soak starts (not after days of running), a rename never
/// replaces what is not a regular file, and the artifact gets the mode the user's umask gives.
#[test]
fn the_output_is_checked_before_the_soak_and_written_with_the_users_umask() {
    let soak = Soak::new();
    let fifo = soak.root.root().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let link = soak.root.root().join("link");
    std::os::unix::fs::symlink(soak.root.root().join("elsewhere.json"), &link).unwrap();
    let mut targets = vec![fifo.clone(), link.clone(), soak.progress()];
    // A device of its own rather than the system's /dev/null: were the check ever lost, the
    // test must not replace the machine's.
    let null = soak.root.root().join("null");
    if is_root() {
        nix::sys::stat::mknod(
            &null,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        targets.push(null.clone());
    } else {
        // Root writes anywhere; an ordinary user cannot write into a directory of root's.
        targets.push(PathBuf::from("/artifact.json"));
    }
    for target in &targets {
        let started = std::time::Instant::now();
        soak.unilab()
            .args(["soak", "run", "--progress-dir"])
            .arg(soak.progress())
            .arg("--output")
            .arg(target)
            .args(["--", "sleep", "30"])
            .assert()
            .code(3)
            .stderr(predicate::str::contains("cannot write the artifact"));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{target:?}: refused at once"
        );
    }
    if is_root() {
        let null = std::fs::symlink_metadata(&null).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_char_device(
            &null.file_type()
        ));
    }
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        !soak.root.log_path().exists(),
        "nothing started, nothing recorded"
    );

    for (umask, mode) in [("077", 0o600), ("022", 0o644)] {
        // A new file each time: the mode of one the rename replaces is not the question.
        let _ = std::fs::remove_file(soak.artifact_path());
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!("umask {umask} && exec \"$@\""))
            .arg("sh")
            .arg(unilab_bin())
            .arg("--root")
            .arg(soak.root.root())
            .args(["soak", "run", "--allow-no-progress", "--progress-dir"])
            .arg(soak.progress())
            .arg("--output")
            .arg(soak.artifact_path())
            .args(["--sample-interval", "0.1", "--", "true"])
            .env("PATH", path_with_fixtures())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "umask {umask}");
        let written = std::fs::metadata(soak.artifact_path())
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&written) & 0o777,
            mode,
            "umask {umask}"
        );
    }
}

/// A mistyped `--progress-dir` was told to `chmod go-w DIR`: a directory that is not there is
/// said to be missing, with how to create it.
#[test]
fn a_missing_progress_directory_is_hinted_to_be_created_not_chmodded() {
    let soak = Soak::new();
    let typo = soak.root.root().join("progres");
    let refused = soak
        .unilab()
        .args(["soak", "run", "--progress-dir"])
        .arg(&typo)
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--", "true"])
        .assert()
        .code(3);
    let stderr = String::from_utf8_lossy(&refused.get_output().stderr).into_owned();
    assert!(stderr.contains("it does not exist"), "{stderr}");
    let hint = stderr.lines().find(|l| l.starts_with("hint: ")).unwrap();
    assert!(
        hint.contains(&format!("mkdir -p {}", typo.display())) && !hint.contains("chmod"),
        "{stderr}"
    );
}

/// An `--output` that cannot be written was refused with a hint to `soak export ID` (a literal
/// `ID`, of a soak that never ran); and as root, `access(2)` let a pseudo file system through,
/// so the whole command ran before the artifact failed. Writability is proven by creating a
/// file, before anything runs.
#[test]
fn an_output_that_cannot_be_created_is_refused_before_anything_runs() {
    let soak = Soak::new();
    let ran = soak.root.root().join("ran");
    // `/proc` takes no new file, not even root's.
    let refused = soak
        .unilab()
        .args(["soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .args(["--output", "/proc/unilab-artifact.json", "--", "touch"])
        .arg(&ran)
        .assert()
        .code(3);
    let stderr = String::from_utf8_lossy(&refused.get_output().stderr).into_owned();
    assert!(stderr.contains("cannot write the artifact"), "{stderr}");
    assert!(
        !stderr.contains("soak export") && !stderr.contains(" ID "),
        "no soak to export: {stderr}"
    );
    assert!(!ran.exists(), "the command did not run");
    assert!(!soak.root.log_path().exists(), "nothing was recorded");
}

/// When the artifact cannot be written at the end after all (its directory went away while the
/// soak ran), the verdict and the soak's id are still printed, and the hint names that id.
#[test]
fn an_artifact_that_fails_at_the_end_still_prints_the_verdict_and_how_to_export_it() {
    let soak = Soak::new();
    let gone = soak.root.root().join("gone");
    std::fs::create_dir(&gone).unwrap();
    let output = gone.join("soak.json");
    let script = format!(
        "rmdir {} && exec python3 {} --progress-dir {} --steps 3 --step-seconds 0.05",
        gone.display(),
        trainer().display(),
        soak.progress().display()
    );
    let failed = soak
        .unilab()
        .args(["soak", "run", "--sample-interval", "0.1", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(&output)
        .args(["--", "sh", "-c", &script])
        .assert()
        .code(3);
    let stdout = String::from_utf8_lossy(&failed.get_output().stdout).into_owned();
    let stderr = String::from_utf8_lossy(&failed.get_output().stderr).into_owned();
    let id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("soak ")?.split_once(" passed: "))
        .map(|(id, _)| id.to_owned())
        .unwrap_or_else(|| panic!("the verdict: {stdout}\n{stderr}"));
    assert!(!stdout.contains("artifact:"), "{stdout}");
    let hint = format!(
        "hint: once that is fixed, `unilab soak export {id} --output {}` writes it from the log",
        output.display()
    );
    assert!(stderr.contains(&hint), "{stderr}");
    std::fs::create_dir(&gone).unwrap();
    soak.unilab()
        .args(["soak", "export", &id, "--output"])
        .arg(&output)
        .assert()
        .success();
    assert!(digest_matches(&std::fs::read(&output).unwrap()));
}

/// `soak run` replaced an existing `--output` silently where `soak export` refuses without
/// `--force`: refused before the command runs, replaced with `--force`.
#[test]
fn an_existing_output_is_refused_before_the_soak_unless_forced() {
    let soak = Soak::new();
    std::fs::write(soak.artifact_path(), "kept").unwrap();
    let ran = soak.root.root().join("ran");
    let run = |force: &[&str]| {
        let mut cmd = soak.unilab();
        cmd.args([
            "soak",
            "run",
            "--allow-no-progress",
            "--sample-interval",
            "0.1",
        ])
        .args(force)
        .arg("--progress-dir")
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--", "touch"])
        .arg(&ran)
        .assert()
    };
    let refused = run(&[]).code(3);
    let stderr = String::from_utf8_lossy(&refused.get_output().stderr).into_owned();
    assert!(stderr.contains("already exists"), "{stderr}");
    assert!(stderr.contains("add `--force` to replace it"), "{stderr}");
    assert!(!ran.exists(), "refused before the command ran");
    assert_eq!(
        std::fs::read_to_string(soak.artifact_path()).unwrap(),
        "kept"
    );

    run(&["--force"]).success();
    assert!(ran.exists());
    assert!(digest_matches(
        &std::fs::read(soak.artifact_path()).unwrap()
    ));
}

/// `report:` went to standard error with the path as typed while `artifact:` went to standard
/// output, absolute: both are what the run produced, on standard output, absolute.
#[test]
fn the_artifact_and_the_report_are_told_alike() {
    let soak = Soak::new();
    let done = soak
        .unilab()
        .current_dir(soak.root.root())
        .args([
            "soak",
            "run",
            "--allow-no-progress",
            "--sample-interval",
            "0.1",
        ])
        .arg("--progress-dir")
        .arg(soak.progress())
        .args(["--output", "a.json", "--report", "r.html", "--", "true"])
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&done.get_output().stdout).into_owned();
    let root = soak.root.root().display().to_string();
    assert!(
        stdout.contains(&format!(
            "\nartifact: {root}/a.json\nreport: {root}/r.html\n"
        )),
        "{stdout}"
    );
    assert!(soak.root.root().join("r.html").is_file());

    let json = soak
        .unilab()
        .current_dir(soak.root.root())
        .args(["--json", "soak", "run", "--allow-no-progress", "--force"])
        .args(["--sample-interval", "0.1", "--progress-dir"])
        .arg(soak.progress())
        .args(["--output", "a.json", "--report", "r.html", "--", "true"])
        .assert()
        .success();
    let told: Value = serde_json::from_slice(&json.get_output().stdout).unwrap();
    assert_eq!(told["artifact"], format!("{root}/a.json"));
    assert_eq!(told["report"], format!("{root}/r.html"));
}

/// With a parent others can write to, another user could swap the progress directory for one of
/// their own and fake progress: the whole way to it is checked, not its last component.
#[test]
fn a_progress_directory_under_a_directory_others_can_write_is_refused() {
    let soak = Soak::new();
    let open = soak.root.root().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let progress = open.join("progress");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&progress)
        .unwrap();
    soak.unilab()
        .args(["soak", "run", "--progress-dir"])
        .arg(&progress)
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--", "true"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(format!(
            "`{}` on the way to it: others can write to it and it is not sticky",
            open.display()
        )));
    assert!(!soak.root.log_path().exists());
}

/// The progress directory is held from the start: swapping another directory in at its path
/// (as another user with a writable parent could) neither fakes progress nor hides the swap.
#[test]
fn a_progress_directory_swapped_under_the_soak_fakes_nothing() {
    let soak = Soak::new();
    let run = soak
        .command()
        .args(["--json", "soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args([
            "--sample-interval",
            "0.1",
            "--startup-timeout",
            "3s",
            "--",
            "sleep",
            "30",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Once it samples, the path is made to name a directory that "shows progress".
    eventually("the first sample", Duration::from_secs(20), || {
        soak.root.log_path().exists()
            && history_kinds(soak.unilab(), &[]).contains(&"soak_sampled".to_owned())
    });
    std::fs::rename(soak.progress(), soak.root.root().join("original")).unwrap();
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(soak.progress())
        .unwrap();
    // Each fake step is written, then a sample is taken after it: the soak had its chance to
    // see each.
    let sampled = || {
        history_kinds(soak.unilab(), &[])
            .iter()
            .filter(|k| *k == "soak_sampled")
            .count()
    };
    for i in 0..3 {
        let before = sampled();
        std::fs::write(soak.progress().join(format!("fake-{i}")), b"step").unwrap();
        if !within(Duration::from_secs(20), || sampled() > before) {
            break; // The soak ended (its startup timeout), which is what it is waiting for.
        }
    }
    let output = run.wait_with_output().unwrap();
    let verdict: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        verdict["outcome"]["failure_kind"], "startup_timeout",
        "{verdict}"
    );
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    let said = artifact["samples"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["errors"].as_array().cloned().unwrap_or_default())
        .any(|e| {
            e.as_str()
                .unwrap_or("")
                .contains("no longer names the directory the soak watches")
        });
    assert!(said, "the samples say the path was swapped");
}

#[test]
fn a_snapshot_of_a_directory_that_is_not_there_is_refused() {
    let root = TestRoot::new();
    let file = root.root().join("a-file");
    std::fs::write(&file, "").unwrap();
    for dir in [root.root().join("missing"), file] {
        root.unilab()
            .arg("snapshot")
            .arg(&dir)
            .assert()
            .code(3)
            .stdout("")
            .stderr(predicate::str::contains(
                "is not a directory that can be read",
            ));
    }
}

#[test]
fn the_runtime_snapshot_describes_source_gpu_software_and_environment() {
    let soak = Soak::new();
    let repo = soak.root.root().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(&repo)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("git");
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("train.py"), "print(1)\n").unwrap();
    git(&["add", "train.py"]);
    git(&["commit", "-q", "-m", "first"]);
    std::fs::write(repo.join("train.py"), "print(2)\n").unwrap();
    let out = soak
        .unilab()
        .env("NCCL_DEBUG", "INFO")
        .env("HF_TOKEN", "sekrit-77")
        .args(["--json", "snapshot"])
        .arg(&repo)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let snapshot: Value = serde_json::from_slice(&out).unwrap();
    let git_info = &snapshot["source"]["git"];
    assert_eq!(git_info["commit"].as_str().unwrap().len(), 40);
    assert_eq!(git_info["branch"], "main");
    assert_eq!(git_info["dirty"], true);
    assert_eq!(git_info["diff_blake3"].as_str().unwrap().len(), 64);
    assert_eq!(
        snapshot["gpu"]["gpus"][0]["uuid"],
        "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f"
    );
    assert_eq!(snapshot["software"]["unilab"], env!("CARGO_PKG_VERSION"));
    assert!(snapshot["software"]["kernel"].is_string());
    assert_eq!(snapshot["environment"]["NCCL_DEBUG"], "INFO");
    assert_eq!(snapshot["environment"]["HF_TOKEN"], "[redacted]");
    assert!(!String::from_utf8_lossy(&out).contains("sekrit-77"));
}

/// `unilab snapshot` in a current directory that was removed reported "internal error" and exit
/// 70, a bug in unilab by the documented codes, although unilab was fine and the environment was
/// not. A failure of the environment is a user-actionable error: exit 3, saying what it could
/// not do and why.
#[test]
fn a_current_directory_that_is_gone_is_an_environment_error_not_a_bug() {
    let soak = Soak::new();
    let gone = soak.root.root().join("gone");
    std::fs::create_dir(&gone).unwrap();
    let output = Command::new("sh")
        .args([
            "-c",
            r#"cd "$GONE" && rmdir "$GONE" && exec "$UNILAB" --root "$ROOT" snapshot"#,
        ])
        .env("GONE", &gone)
        .env("UNILAB", unilab_bin())
        .env("ROOT", soak.root.root())
        .env("PATH", path_with_fixtures())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("error: cannot read the current directory\n  caused by: "),
        "{stderr}"
    );
    assert!(!stderr.contains("internal error"), "{stderr}");
}

/// `soak run` of the trainer on a pseudo-terminal, with `TERM=term`: what the terminal
/// received.
fn soak_on_a_terminal(soak: &Soak, term: &str, trainer_args: &[&str]) -> String {
    soak_on_a_terminal_with(soak, &[("TERM", term)], &[], trainer_args)
}

/// `soak run` of the trainer on a pseudo-terminal with `env` and the soak's `options`: what the
/// terminal received.
fn soak_on_a_terminal_with(
    soak: &Soak,
    env: &[(&str, &str)],
    options: &[&str],
    trainer_args: &[&str],
) -> String {
    let mut args: Vec<std::ffi::OsString> =
        vec!["soak".into(), "run".into(), "--progress-dir".into()];
    args.push(soak.progress().into());
    args.extend(["--output".into(), soak.artifact_path().into()]);
    args.extend(["--sample-interval", "0.05"].map(Into::into));
    args.extend(options.iter().map(Into::into));
    args.extend(["--".into(), "python3".into(), trainer().into()]);
    args.extend(["--progress-dir".into(), soak.progress().into()]);
    args.extend(trainer_args.iter().map(Into::into));
    let mut env = env.to_vec();
    env.push(("UNILAB_TOOL_TIMEOUT", "2"));
    let (code, screen) = on_a_terminal(&soak.root, &env, args);
    assert_eq!(code, Some(0), "{screen}");
    screen
}

/// The status lines a terminal was shown: what follows each clearing of the line.
fn status_lines(screen: &str) -> Vec<&str> {
    screen
        .split("\r\x1b[2K")
        .filter_map(|piece| piece.lines().next())
        .filter(|line| line.starts_with("soak ") && line.contains("samples, progress"))
        .collect()
}

/// The status line said `GPU 0 MiB` on a host where nvidia-smi is missing (unknown is not
/// zero), and neither the tree's CPU use nor how long before the stale limit fails the soak.
#[test]
fn the_status_line_shows_cpu_the_stale_countdown_and_no_gpu_memory_it_cannot_know() {
    let soak = Soak::new();
    let missing = soak.root.root().join("no-nvidia-smi");
    let missing = missing.to_str().unwrap();
    let screen = soak_on_a_terminal_with(
        &soak,
        &[("UNILAB_NVIDIA_SMI", missing)],
        &["--stale-progress", "10m"],
        &["--steps", "40", "--step-seconds", "0.05"],
    );
    let lines = status_lines(&screen);
    assert!(!lines.is_empty(), "no status line: {screen:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.ends_with("GPU –") && !l.contains("GPU 0")),
        "{lines:#?}"
    );
    let cpu_percent = |line: &str| {
        line.split_once(", CPU ").is_some_and(|(_, rest)| {
            let digits = rest.chars().take_while(char::is_ascii_digit).count();
            digits > 0 && rest[digits..].starts_with("%, ")
        })
    };
    assert!(lines.iter().any(|l| cpu_percent(l)), "{lines:#?}");
    // Under the 10 minutes of `--stale-progress` since the last change.
    assert!(
        lines
            .iter()
            .any(|l| l.contains(" ago, stale in 9m ") || l.contains(" ago, stale in 10m 00s")),
        "{lines:#?}"
    );
}

#[test]
fn the_status_line_never_splices_into_the_commands_output() {
    let soak = Soak::new();
    let screen = soak_on_a_terminal(&soak, "xterm", &["--steps", "30", "--step-seconds", "0.03"]);
    assert!(
        screen.contains("samples, progress"),
        "a status line: {screen:?}"
    );
    let steps: Vec<usize> = screen.match_indices("step ").map(|(at, _)| at).collect();
    assert_eq!(steps.len(), 30, "{screen:?}");
    for at in steps {
        let before = &screen[..at];
        assert!(
            before.is_empty() || before.ends_with('\n') || before.ends_with("\r\x1b[2K"),
            "a line of the command starts mid-line: {:?}",
            &screen[at.saturating_sub(60)..at + 20]
        );
    }
    // The status line itself starts on a cleared line, and is gone at the end.
    for (at, _) in screen.match_indices("soak ") {
        let before = &screen[..at];
        assert!(
            before.ends_with("\r\x1b[2K") || before.ends_with('\n'),
            "{:?}",
            &screen[at.saturating_sub(40)..at + 10]
        );
    }
}

#[test]
fn no_status_line_on_a_dumb_terminal() {
    let soak = Soak::new();
    let screen = soak_on_a_terminal(&soak, "dumb", &["--steps", "10", "--step-seconds", "0.03"]);
    assert!(screen.contains("step 10/10"), "{screen:?}");
    assert!(!screen.contains("\x1b["), "{screen:?}");
    assert!(!screen.contains("samples, progress"), "{screen:?}");
}

#[test]
fn python_output_is_unbuffered_unless_the_user_says_otherwise() {
    for (env, expected) in [
        (None, "PYTHONUNBUFFERED=1"),
        (Some("PYTHONUNBUFFERED=0"), "PYTHONUNBUFFERED=0"),
    ] {
        let soak = Soak::new();
        let mut args = vec![];
        if let Some(env) = env {
            args.extend(["--env", env]);
        }
        let (output, artifact) = soak.run(
            &args,
            &[
                "--steps",
                "4",
                "--step-seconds",
                "0.05",
                "--print-env",
                "PYTHONUNBUFFERED",
            ],
        );
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let tail = artifact["output_tail"]["stdout"].as_str().unwrap();
        assert!(tail.starts_with(&format!("{expected}\n")), "{tail:?}");
        assert_eq!(
            artifact["parameters"]["environment"]["PYTHONUNBUFFERED"],
            expected.split_once('=').unwrap().1
        );
    }
}

#[test]
fn soaks_are_named_by_prefix_or_latest_and_list_shows_why_they_failed() {
    let soak = Soak::new();
    let (first, _) = soak.run(&[], &["--steps", "2", "--step-seconds", "0.05"]);
    let (second, _) = soak.run(
        &[],
        &["--steps", "2", "--step-seconds", "0.05", "--exit-code", "3"],
    );
    let first = verdict(&first)["soak_id"].as_str().unwrap().to_owned();
    let second = verdict(&second)["soak_id"].as_str().unwrap().to_owned();

    let list = soak.unilab().args(["soak", "list"]).assert().success();
    let list = String::from_utf8_lossy(&list.get_output().stdout).into_owned();
    let row = list.lines().find(|l| l.starts_with(&second)).unwrap();
    assert!(row.contains("failed (command_failed)"), "{list}");
    // Durations read as a person would write them: tenths below ten seconds.
    assert!(
        row.split_whitespace()
            .any(|w| w.ends_with('s') && w.contains('.')),
        "{list}"
    );

    let shown = |id: &str| -> Value {
        serde_json::from_slice(
            &soak
                .unilab()
                .args(["--json", "soak", "show", id])
                .assert()
                .success()
                .get_output()
                .stdout,
        )
        .unwrap()
    };
    assert_eq!(shown("latest")["soak_id"], second.as_str());
    assert_eq!(shown(&first[..first.len() - 1])["soak_id"], first.as_str());
    soak.unilab()
        .args(["soak", "export", "latest"])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!(
            "\"soak_id\": \"{second}\""
        )));
    soak.unilab()
        .args(["history", "--soak", "latest"])
        .assert()
        .success()
        .stdout(predicate::str::contains("soak_finished"));
    soak.unilab()
        .args(["soak", "show", "20"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("names 2 soaks"))
        .stderr(predicate::str::contains(&first))
        .stderr(predicate::str::contains(&second));
    soak.unilab()
        .args(["soak", "show", "19"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("no soak `19` is recorded"));
}

#[test]
fn export_refuses_a_running_soak_and_an_existing_file() {
    let soak = Soak::new();
    let mut child = spawn_soak(&soak, "0.1", &["--steps", "200", "--step-seconds", "0.05"]);
    eventually("the soak to be recorded", Duration::from_secs(10), || {
        !soak_ids(&soak).is_empty()
    });
    soak.unilab()
        .args(["soak", "export", "latest"])
        .assert()
        .code(3)
        .stdout("")
        .stderr(predicate::str::contains("is still running"));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    child.wait().unwrap();

    let existing = soak.root.root().join("existing.json");
    std::fs::write(&existing, "keep me").unwrap();
    soak.unilab()
        .args(["soak", "export", "latest", "--output"])
        .arg(&existing)
        .assert()
        .code(3)
        .stderr(predicate::str::contains("already exists"))
        .stderr(predicate::str::contains("--force"));
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me");
    soak.unilab()
        .args(["soak", "export", "latest", "--force", "--output"])
        .arg(&existing)
        .assert()
        .success();
    assert!(digest_matches(&std::fs::read(&existing).unwrap()));
    // Never a rename over something that is not a regular file, even with --force.
    soak.unilab()
        .args([
            "soak",
            "export",
            "latest",
            "--force",
            "--output",
            "/dev/null",
        ])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("not a regular file"));
    assert!(
        std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device()
    );
}

#[test]
fn cpu_time_counts_reaped_children_and_never_decreases() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(
        &[],
        &[
            "--burn-child",
            "0.6",
            "--steps",
            "6",
            "--step-seconds",
            "0.1",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let samples = artifact["samples"].as_array().unwrap();
    let cpu: Vec<f64> = samples
        .iter()
        .map(|s| s["cpu_seconds"].as_f64().unwrap())
        .collect();
    assert!(cpu.windows(2).all(|w| w[0] <= w[1]), "{cpu:?}");
    let total = artifact["summary"]["final_cpu_seconds"].as_f64().unwrap();
    assert!(
        total >= 0.55,
        "the burning child's 0.6 s are counted: {total}"
    );
    assert_eq!(total, *cpu.last().unwrap());
    assert_eq!(samples[0]["cpu_percent"], Value::Null);
    assert!(
        samples[1..]
            .iter()
            .all(|s| s["cpu_percent"].as_f64().is_some()),
        "{samples:?}"
    );
    assert!(artifact["summary"]["peak_cpu_percent"].as_f64().unwrap() > 10.0);
}

#[test]
fn the_series_starts_with_the_running_command_and_marks_the_sample_after_its_exit() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(&[], &["--steps", "6", "--step-seconds", "0.1"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let samples = artifact["samples"].as_array().unwrap();
    assert!(
        samples[0]["processes"].as_u64().unwrap() >= 1,
        "the first sample sees the command: {}",
        samples[0]
    );
    let (last, running) = samples.split_last().unwrap();
    assert_eq!(last["after_exit"], true, "{last}");
    assert!(running.iter().all(|s| s["after_exit"] == false));
}

#[test]
fn the_duration_is_the_commands_own_and_the_teardown_is_reported_apart() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(
        &["--shutdown-grace", "2"],
        &["--leak", "--steps", "4", "--step-seconds", "0.05"],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(artifact["outcome"]["failure_kind"], "leaked_processes");
    let duration = artifact["duration_seconds"].as_f64().unwrap();
    let teardown = artifact["teardown_seconds"].as_f64().unwrap();
    assert!(
        duration < 1.5,
        "the grace period is not run time: {duration}"
    );
    assert!(duration >= 0.2, "{duration}");
    assert!(teardown >= 2.0, "the grace period is teardown: {teardown}");
}

#[test]
fn the_sampling_hosts_tick_rate_is_recorded_with_the_soak() {
    let soak = Soak::new();
    let (output, _) = soak.run(&[], &["--steps", "2", "--step-seconds", "0.05"]);
    let id = verdict(&output)["soak_id"].as_str().unwrap().to_owned();
    let history = soak
        .unilab()
        .args(["--json", "history", "--soak", &id])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let started: Value =
        serde_json::from_str(String::from_utf8_lossy(&history).lines().next().unwrap()).unwrap();
    assert_eq!(started["kind"], "soak_started");
    let getconf = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    let ticks: u64 = String::from_utf8_lossy(&getconf.stdout)
        .trim()
        .parse()
        .unwrap();
    assert_eq!(started["ticks_per_second"], ticks);
}

#[test]
fn a_soak_that_never_shows_progress_does_not_pass() {
    let soak = Soak::new();
    // A missing progress directory is refused before anything starts, and not created.
    let missing = soak.root.root().join("typo");
    soak.unilab()
        .args(["soak", "run", "--progress-dir"])
        .arg(&missing)
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--", "true"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("it does not exist"));
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

#[test]
fn a_hung_nvidia_smi_neither_delays_the_start_nor_outlives_the_soak() {
    let soak = Soak::new();
    let pids = soak.root.root().join("smi-pids");
    let mut cmd = soak.unilab();
    // Longer than the whole soak: a poll is in flight when it ends.
    cmd.env("FAKE_NVIDIA_SMI_MODE", "hang")
        .env("FAKE_NVIDIA_SMI_PIDS", &pids)
        .env("UNILAB_TOOL_TIMEOUT", "20");
    let started = Instant::now();
    let (output, artifact) = soak.run_with(cmd, &[], &["--steps", "6", "--step-seconds", "0.1"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "the runtime snapshot waited {:?} for nvidia-smi",
        started.elapsed()
    );
    let errors = artifact["runtime"]["errors"].to_string();
    assert!(errors.contains("did not answer within 2 s"), "{errors}");
    let pids = std::fs::read_to_string(&pids).unwrap();
    assert!(
        pids.lines().count() >= 2,
        "the snapshot's and the poller's: {pids}"
    );
    for pid in pids.lines() {
        let pid: u64 = pid.parse().unwrap();
        assert!(
            proc_stat(pid).is_none(),
            "nvidia-smi {pid} outlived the soak (or was left unreaped)"
        );
    }
}

#[test]
fn show_says_why_a_soak_failed_and_how_a_running_one_is_going() {
    let soak = Soak::new();
    let (output, _) = soak.run(
        &[],
        &["--steps", "4", "--step-seconds", "0.05", "--exit-code", "3"],
    );
    assert_eq!(output.status.code(), Some(1));
    let shown = soak
        .unilab()
        .args(["soak", "show", "latest"])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&shown.get_output().stdout).into_owned();
    for expected in [
        "status:   failed (command_failed)",
        "exit:     code 3",
        "progress: first at ",
        "peaks:    PSS ",
        ", RSS ",
        "last lines of stdout:\n",
        "  step 4/4 loss",
    ] {
        assert!(text.contains(expected), "{expected:?} in:\n{text}");
    }
    let json: Value = serde_json::from_slice(
        &soak
            .unilab()
            .args(["--json", "soak", "show", "latest"])
            .assert()
            .success()
            .get_output()
            .stdout,
    )
    .unwrap();
    assert_eq!(json["exit"]["code"], 3);
    assert!(json["peaks"]["rss_bytes"].as_u64().unwrap() > 0);
    assert!(json["progress"]["last_change_seconds"].as_f64().is_some());
    assert!(json["output_tail"]["stdout"].as_array().unwrap().len() <= 10);
    assert_eq!(json["live"], Value::Null);

    // A running soak: how long, how its progress is, what it uses now; no artifact yet.
    let live = Soak::new();
    let mut child = spawn_soak(&live, "0.1", &["--steps", "400", "--step-seconds", "0.05"]);
    eventually("a few samples", Duration::from_secs(10), || {
        soak_ids(&live)
            .first()
            .is_some_and(|s| s["samples"].as_u64().unwrap_or(0) >= 5)
    });
    let json: Value = serde_json::from_slice(
        &live
            .unilab()
            .args(["--json", "soak", "show", "latest"])
            .assert()
            .success()
            .get_output()
            .stdout,
    )
    .unwrap();
    assert_eq!(json["outcome"]["status"], "running");
    assert_eq!(json["artifact"], Value::Null, "not written yet");
    assert!(json["live"]["elapsed_seconds"].as_f64().unwrap() > 0.3);
    assert!(json["live"]["rss_bytes"].as_u64().unwrap() > 1_000_000);
    let text = live
        .unilab()
        .args(["soak", "show", "latest"])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&text.get_output().stdout).into_owned();
    assert!(text.contains("elapsed:  "), "{text}");
    assert!(
        text.contains("now:      PSS ") && text.contains(", RSS "),
        "{text}"
    );
    assert!(text.contains("when the soak ends"), "{text}");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    child.wait().unwrap();
}

/// Export and report pass the rows through a temporary file: where `$TMPDIR` cannot hold one,
/// they say so and how to fix it (not a failure to write the output); `soak show` keeps no rows
/// and needs none.
#[test]
fn an_unusable_tmpdir_is_named_as_such() {
    let soak = Soak::new();
    let (output, _) = soak.run(&[], &["--steps", "3", "--step-seconds", "0.05"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let missing = soak.root.root().join("no-such-tmp");
    for args in [
        &["soak", "export", "latest"][..],
        &["soak", "export", "latest", "--format", "csv"],
        &["soak", "report", "latest"],
    ] {
        soak.unilab()
            .env("TMPDIR", &missing)
            .args(args)
            .assert()
            .code(3)
            .stderr(predicate::str::contains(format!(
                "cannot keep the rows in a temporary file in `{}`",
                missing.display()
            )))
            .stderr(predicate::str::contains("set TMPDIR"))
            .stderr(predicate::str::contains("standard output").not());
    }
    soak.unilab()
        .env("TMPDIR", &missing)
        .args(["soak", "show", "latest"])
        .assert()
        .success();
}

/// Readers that find a soak whose supervisor is gone record `soak_abandoned` once, however many
/// find it at the same moment: the decision is taken inside the append's transaction.
#[test]
fn concurrent_readers_record_an_abandoned_soak_once() {
    for round in 0..5 {
        let root = TestRoot::new();
        // A supervisor that is gone: a process started and reaped.
        let mut gone = Command::new("true").spawn().unwrap();
        let pid = gone.id();
        let start_ticks = proc_stat(pid).map_or(1, |s| s.start_ticks);
        gone.wait().unwrap();
        let (subject, started) = every_event_kind()
            .into_iter()
            .find(|(_, e)| matches!(e, unilab::StoredEvent::SoakStartedV4(_)))
            .unwrap();
        let unilab::StoredEvent::SoakStartedV4(mut start) = started else {
            unreachable!()
        };
        start.supervisor = unilab::ProcessIdentity { pid, start_ticks };
        root.log()
            .append(subject, unilab::StoredEvent::SoakStartedV4(start))
            .unwrap();
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let readers: Vec<_> = (0..8)
            .map(|_| {
                let mut cmd = root.unilab();
                cmd.args(["soak", "list"]);
                let barrier = std::sync::Arc::clone(&barrier);
                std::thread::spawn(move || {
                    barrier.wait();
                    cmd.assert().success();
                })
            })
            .collect();
        for reader in readers {
            reader.join().unwrap();
        }
        let kinds = history_kinds(root.unilab(), &[]);
        let abandoned = kinds.iter().filter(|k| *k == "soak_abandoned").count();
        assert_eq!(abandoned, 1, "round {round}: {kinds:?}");
    }
}

/// The soak's guard killed with SIGKILL: the supervisor notices at once, stops the command the
/// guard can no longer stop (and what it leaked, which holds the output pipes), records
/// `monitor_error` — not "interrupted" — and ends without waiting for the orphans.
#[test]
fn a_guard_killed_with_sigkill_is_noticed_and_its_tree_stopped() {
    let soak = Soak::new();
    let marker = format!("guard-death-{}", std::process::id());
    let sleeper = "python3 -c 'import time; time.sleep(600)'";
    let script = format!("(setsid {sleeper} {marker}-leaked &) ; exec {sleeper} {marker}-command");
    let started = Instant::now();
    let mut run = soak
        .command()
        .args([
            "--json",
            "soak",
            "run",
            "--allow-no-progress",
            "--progress-dir",
        ])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--sample-interval", "0.1", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let supervisor = run.id();
    let find = |what: &str| {
        live_pids_where(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(what))
        })
    };
    let mut guard = None;
    eventually(
        "the command and its leak to run",
        Duration::from_secs(20),
        || {
            guard = find("soak-guard")
                .into_iter()
                .find(|pid| proc_stat(pid).is_some_and(|s| s.ppid == supervisor));
            guard.is_some()
                && !find(&format!("{marker}-command")).is_empty()
                && !find(&format!("{marker}-leaked")).is_empty()
        },
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(guard.unwrap() as i32),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    let ended = within(Duration::from_secs(20), || {
        matches!(run.try_wait(), Ok(Some(_)))
    });
    if !ended {
        let _ = run.kill();
    }
    let output = run.wait_with_output().unwrap();
    assert!(ended, "the supervisor ended on its own");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(1));
    let verdict: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        verdict["outcome"]["failure_kind"], "monitor_error",
        "{verdict}"
    );
    assert!(
        verdict["outcome"]["reason"]
            .as_str()
            .unwrap()
            .contains("guard"),
        "{verdict}"
    );
    assert!(
        within(Duration::from_secs(5), || find(&marker).is_empty()),
        "nothing of the soak survives: {:?}",
        find(&marker)
    );
}

/// A browser, if this host has one: `chromium`, or what `UNILAB_TEST_CHROMIUM` names. CI
/// installs it; there its absence fails the test rather than skipping it.
fn chromium() -> Option<PathBuf> {
    if let Some(named) = std::env::var_os("UNILAB_TEST_CHROMIUM") {
        return Some(PathBuf::from(named));
    }
    let found = ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    });
    assert!(
        found.is_some() || std::env::var_os("CI").is_none(),
        "CI must install chromium for the report test (apt-get install chromium)"
    );
    found
}

/// The report of a real failed soak (stale progress, two fake GPUs, one used by the trainer):
/// self-contained, its charts present, and — in headless Chromium — it loads without console
/// errors; the screenshot is kept in the target directory.
#[test]
fn the_report_of_a_failed_soak_renders_in_a_browser() {
    let soak = Soak::new();
    let apps = soak.root.root().join("apps");
    let (output, artifact) = soak.run_with(
        {
            let mut cmd = soak.unilab();
            cmd.env(
                "FAKE_NVIDIA_SMI_GPUS",
                "GPU-1111aaaa-0000-4000-8000-000000000001|NVIDIA H200|143771|20000|37;\
                 GPU-2222bbbb-0000-4000-8000-000000000002|NVIDIA H200|143771|1000|5",
            )
            .env("FAKE_NVIDIA_SMI_APPS_FILE", &apps);
            cmd
        },
        &["--stale-progress", "1.5s"],
        &[
            "--steps",
            "40",
            "--step-seconds",
            "0.1",
            "--hang-after",
            "8",
            "--gpu-memory",
            "3000",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(artifact["outcome"]["failure_kind"], "stale_progress");
    let report = soak.root.root().join("report.html");
    soak.unilab()
        .args(["soak", "report", "latest", "--output"])
        .arg(&report)
        .assert()
        .success();
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.matches("<svg").count() >= 6, "every chart is drawn");
    assert!(html.contains("stale_progress"));
    assert!(
        html.contains(artifact["digest"].as_str().unwrap()),
        "tied to the artifact"
    );
    // The timeline shows a run of samples by its first and last, not line by line.
    let samples = artifact["summary"]["samples"].as_u64().unwrap();
    assert!(samples > 3, "{samples} samples");
    assert_eq!(html.matches("soak_sampled").count(), 2, "{html}");
    assert!(html.contains(&format!("{} more samples", samples - 2)));
    // One file: nothing loaded from elsewhere (the chart library is inline).
    for external in ["<link", " src=", "url(", "@import", "href=\"http"] {
        assert!(!html.contains(external), "the page loads `{external}`");
    }
    let Some(browser) = chromium() else {
        eprintln!("skipped the browser check: no chromium on this host");
        return;
    };
    // The page as a reader without script sees it: the static charts.
    let without_script = soak.root.root().join("report-static.html");
    std::fs::write(&without_script, strip_scripts(&html)).unwrap();
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    for width in [1400, 700] {
        for (page, name) in [(&report, "zoomable"), (&without_script, "static")] {
            let shot = shots.join(format!("failed-soak-{name}-{width}.png"));
            let log = chromium_run(
                &browser,
                &soak,
                page,
                &[
                    format!("--window-size={width},2400"),
                    format!("--screenshot={}", shot.display()),
                ],
            );
            let console_errors: Vec<&str> = log
                .lines()
                .filter(|l| {
                    l.contains("CONSOLE") && (l.contains("Uncaught") || l.contains("ERROR"))
                })
                .collect();
            assert!(
                console_errors.is_empty(),
                "{name} at {width} px: {console_errors:?}"
            );
            let png = std::fs::read(&shot).expect("a screenshot");
            assert!(
                png.starts_with(b"\x89PNG") && png.len() > 20_000,
                "{} bytes",
                png.len()
            );
        }
        // With script every chart is the zoomable one.
        let dom = chromium_dom(&browser, &soak, &report, width);
        let sections = dom.matches("<section class=\"chart\"").count();
        assert!(sections >= 6, "{sections} charts");
        assert_eq!(
            dom.matches("class=\"uplot").count(),
            sections,
            "at {width} px"
        );
        assert!(dom.contains("class=\"zoomable\""), "at {width} px");
        // Without it the static ones are there, one an SVG.
        let dom = chromium_dom(&browser, &soak, &without_script, width);
        assert_eq!(dom.matches("<svg class=\"chart\"").count(), sections);
        assert!(!dom.contains("class=\"uplot"));
    }
    eprintln!("screenshots of the report: {}", shots.display());
}

/// The page without its scripts: what a reader with script off gets.
fn strip_scripts(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(at) = rest.find("<script") {
        out.push_str(&rest[..at]);
        let end = rest[at..].find("</script>").expect("a closed script") + at;
        rest = &rest[end + "</script>".len()..];
    }
    out.push_str(rest);
    out
}

/// Headless Chromium on `page` with `args`, its log returned; it must succeed.
fn chromium_run(
    browser: &std::path::Path,
    soak: &Soak,
    page: &std::path::Path,
    args: &[String],
) -> String {
    let profile = soak.root.root().join("chromium-profile");
    let run = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--enable-logging=stderr",
        ])
        .args(args)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", page.display()))
        .env("HOME", soak.root.root())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "chromium failed: {log}");
    log + &String::from_utf8_lossy(&run.stdout)
}

/// The page's DOM once its scripts ran, in a window `width` pixels wide.
fn chromium_dom(
    browser: &std::path::Path,
    soak: &Soak,
    page: &std::path::Path,
    width: u32,
) -> String {
    chromium_run(
        browser,
        soak,
        page,
        &[format!("--window-size={width},2400"), "--dump-dom".into()],
    )
}

/// A soak on a host whose driver does not answer: every sample has a sampler error. The report
/// says the error once, shades the runs of erring samples instead of a line a sample, keeps the
/// progress and verdict markers, and leaves the GPU charts out.
#[test]
fn the_report_of_a_soak_without_gpu_data_says_the_error_once() {
    let soak = Soak::new();
    let (output, artifact) = soak.run_with(
        {
            let mut cmd = soak.unilab();
            cmd.env("FAKE_NVIDIA_SMI_MODE", "no-driver");
            cmd
        },
        &["--sample-interval", "0.1"],
        &["--steps", "20", "--step-seconds", "0.1"],
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let erred = artifact["summary"]["sampler_errors"].as_u64().unwrap();
    let samples = artifact["summary"]["samples"].as_u64().unwrap();
    assert!(erred >= 5, "{erred} of {samples} samples erred");
    let html = soak
        .unilab()
        .args(["soak", "report", "latest"])
        .output()
        .unwrap()
        .stdout;
    let html = String::from_utf8(html).unwrap();
    let message = artifact["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|s| s["errors"][0].as_str())
        .unwrap()
        .to_owned();
    let escaped = message
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;");
    assert_eq!(html.matches(&escaped).count(), 1, "{message} said once");
    assert!(html.contains("no GPU data"));
    assert!(!html.contains("GPU utilisation"));
    let charts = html.matches("<svg class=\"chart\"").count();
    assert!(charts >= 4);
    // Shaded runs, not a line a sample; the three markers on each chart.
    let bands = html.matches("class=\"band\"").count();
    assert!(
        bands >= charts && bands <= 3 * charts,
        "{bands} bands on {charts} charts"
    );
    assert_eq!(html.matches("class=\"marker\"").count(), 3 * charts);
}

/// The streamed artifact (one scan, rows spooled, the object composed around them) is byte for
/// byte the rendering of the whole object at once, for a large soak whose samples vary (GPUs
/// unread, errors, a sample after the exit) and interleave with another soak's, for a soak
/// still running, and for schema 1's frozen form.
#[test]
fn the_streamed_artifact_is_the_whole_objects_rendering_byte_for_byte() {
    use unilab::testing::artifact;
    use unilab::{StoredEvent, Subject};
    let root = TestRoot::new();
    let log = root.log();
    let events = every_event_kind();
    let started = |id: &str| {
        let (_, start) = events
            .iter()
            .find(|(_, e)| matches!(e, StoredEvent::SoakStartedV4(_)))
            .unwrap()
            .clone();
        let StoredEvent::SoakStartedV4(mut start) = start else {
            unreachable!()
        };
        start.soak_id = id.into();
        (Subject::Soak(id.into()), StoredEvent::SoakStartedV4(start))
    };
    log.append_all(events.clone()).unwrap();
    log.append_all([started("big"), started("running")])
        .unwrap();
    for batch in 0..6u64 {
        let mut records = Vec::new();
        for i in batch * 500..(batch + 1) * 500 {
            let mut s = sample(i, 1 + (i % 7) as u32);
            if i % 5 == 0 {
                s.gpus = None;
            }
            if i % 3 != 0 {
                s.errors.clear();
            }
            s.after_exit = i == 2_999;
            records.push((
                Subject::Soak("big".into()),
                StoredEvent::SoakSampledV5(Box::new(s)),
            ));
            if i % 4 == 0 {
                let other = sample(i, 2);
                records.push((
                    Subject::Soak("running".into()),
                    StoredEvent::SoakSampledV5(Box::new(other)),
                ));
            }
        }
        log.append_all(records).unwrap();
    }
    let (_, end) = events
        .iter()
        .rfind(|(_, e)| matches!(e, StoredEvent::SoakFinishedV4(_)))
        .unwrap()
        .clone();
    log.append(Subject::Soak("big".into()), end).unwrap();

    let snapshot = log.snapshot().unwrap();
    for id in [
        "big",
        "running",
        "20261202T124210-3f9a",
        "20261202T130000-5b7c",
    ] {
        let records = artifact::collect(&snapshot, id).unwrap().unwrap();
        let (whole, digest) = artifact::render(&records);
        let mut streamed = Vec::new();
        let written = artifact::write(&snapshot, id, &mut streamed).unwrap();
        assert_eq!(written.digest, digest, "{id}");
        assert_eq!(written.bytes, streamed.len() as u64, "{id}");
        if streamed != whole {
            let at = streamed
                .iter()
                .zip(&whole)
                .take_while(|(a, b)| a == b)
                .count();
            panic!(
                "{id}: differs at byte {at}: {:?} against {:?}",
                String::from_utf8_lossy(
                    &streamed[at.saturating_sub(80)..(at + 80).min(streamed.len())]
                ),
                String::from_utf8_lossy(&whole[at.saturating_sub(80)..(at + 80).min(whole.len())]),
            );
        }
        assert!(digest_matches(&streamed), "{id}");
    }
    let unknown = artifact::write(&snapshot, "nope", &mut Vec::new());
    assert!(matches!(unknown, Err(artifact::StreamError::NoSuchSoak(_))));
}

/// Under a launcher, `--output` takes the rank's placeholders and the soak records its job and
/// rank; `soak list --job` shows the job's soaks from every host's log under the root, with
/// their hosts, in the order they started. A placeholder with no value here is refused.
#[test]
fn a_jobs_soaks_are_listed_across_hosts_with_their_ranks() {
    use unilab::{Scope, StoredEvent, Subject};
    let soak = Soak::new();
    // Rank 1 ran on another host that shares this state root: its own log there.
    let other = soak
        .root
        .root()
        .join("other-node")
        .join(nix::unistd::getuid().as_raw().to_string());
    private_dir_all(&other);
    let log = unilab::EventLog::open(
        &other.join("events.redb"),
        Scope {
            uid: nix::unistd::getuid().as_raw(),
            host: "other-node".into(),
        },
        unilab::PROJECTIONS,
    )
    .unwrap();
    let (_, start) = every_event_kind()
        .into_iter()
        .find(|(_, e)| matches!(e, StoredEvent::SoakStartedV4(_)))
        .unwrap();
    let StoredEvent::SoakStartedV4(mut start) = start else {
        unreachable!()
    };
    start.soak_id = "20200101T000000-aaaa".into();
    start.metadata.insert("job".into(), "77".into());
    start.metadata.insert("rank".into(), "1".into());
    log.append(
        Subject::Soak(start.soak_id.clone()),
        StoredEvent::SoakStartedV4(start),
    )
    .unwrap();
    drop(log);

    let mut cmd = soak.unilab();
    cmd.env("SLURM_JOB_ID", "77")
        .env("SLURM_STEP_ID", "0")
        .env("SLURM_PROCID", "0")
        .current_dir(soak.root.root());
    let output = cmd
        .args(["--json", "soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .args([
            "--output",
            "soak-{job}-{rank}.json",
            "--report",
            "soak-{rank}.html",
        ])
        .args(["--sample-interval", "0.1", "--", "python3"])
        .arg(trainer())
        .arg("--progress-dir")
        .arg(soak.progress())
        .args(["--steps", "4", "--step-seconds", "0.05"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.root.root().join("soak-77-0.json")).unwrap())
            .unwrap();
    assert_eq!(artifact["metadata"]["job"], "77");
    assert_eq!(artifact["metadata"]["job_step"], "0");
    assert_eq!(artifact["metadata"]["rank"], "0");
    assert!(soak.root.root().join("soak-0.html").is_file());

    let listed: Value = serde_json::from_slice(
        &soak
            .unilab()
            .args(["--json", "soak", "list", "--job", "77"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let ranks: Vec<(&str, &str)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["host"].as_str().unwrap(), s["rank"].as_str().unwrap()))
        .collect();
    let here = nix::unistd::gethostname().unwrap().into_string().unwrap();
    assert_eq!(ranks, [("other-node", "1"), (here.as_str(), "0")]);
    let table = soak
        .unilab()
        .args(["soak", "list", "--job", "77"])
        .assert()
        .success();
    let table = String::from_utf8_lossy(&table.get_output().stdout).into_owned();
    assert!(table.starts_with("ID") && table.contains("HOST") && table.contains("other-node"));
    // A third host's log, of an older schema: read where it lies, never migrated (or repaired)
    // from here — one writer host a file.
    let old = soak
        .root
        .root()
        .join("old-node")
        .join(nix::unistd::getuid().as_raw().to_string());
    private_dir_all(&old);
    let frozen =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/fixtures/v2/events.redb");
    copy_log(&frozen, &old.join("events.redb"));
    // The history of every host, merged in time order: the other node's start came first.
    let merged = soak
        .unilab()
        .args(["--json", "history", "--all-hosts"])
        .output()
        .unwrap();
    assert!(merged.status.success(), "{merged:?}");
    let events: Vec<Value> = String::from_utf8_lossy(&merged.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The frozen log's events are the oldest; of this job's, the other node's start came first.
    let first_of_job = events.iter().find(|e| e["host"] != "fixture-host").unwrap();
    assert_eq!(first_of_job["host"], "other-node");
    assert!(events.iter().any(|e| e["host"] == here.as_str()));
    let times: Vec<f64> = events
        .iter()
        .map(|e| e["recorded_at"].as_f64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert!(events.iter().any(|e| e["host"] == "fixture-host"));
    assert_eq!(
        std::fs::read(old.join("events.redb")).unwrap(),
        std::fs::read(&frozen).unwrap(),
        "another host's log is only read"
    );
    let none = soak
        .unilab()
        .args(["--json", "soak", "list", "--job", "78"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&none.stdout).trim(), "[]");

    // Outside a job, `{rank}` has no value: refused before anything runs.
    soak.unilab()
        .args(["soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .args(["--output", "soak-{rank}.json", "--", "true"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("`{rank}` has no value here"));
}

/// The GPUs are read from nvidia-smi's loop mode, not a process a sample: a stream that exits
/// or stops printing is a recorded fault, is killed and started again, and the samples after it
/// have GPUs again; no nvidia-smi the soak started outlives it.
#[test]
fn the_gpu_stream_recovers_from_an_exit_and_a_hang_and_leaves_nothing_behind() {
    for (mode, says) in [
        // A second of readings before each failure, so that a loaded machine still sees the
        // GPUs come back between two failures.
        ("exit-after:10", "stream ended"),
        ("hang-after:10", "did not answer within"),
    ] {
        let soak = Soak::new();
        let pids = soak.root.root().join("smi-pids");
        let mut cmd = soak.unilab();
        // Two seconds for each start to answer: the fake is a Python program, slow to start on
        // a loaded machine (one second was not always enough beside a release build).
        cmd.env("FAKE_NVIDIA_SMI_STREAM", mode)
            .env("FAKE_NVIDIA_SMI_PIDS", &pids)
            .env("UNILAB_TOOL_TIMEOUT", "2");
        let (output, artifact) = soak.run_with(
            cmd,
            &["--sample-interval", "0.1"],
            &["--steps", "120", "--step-seconds", "0.1"],
        );
        assert_eq!(output.status.code(), Some(0), "{mode}: {output:?}");
        let samples = artifact["samples"].as_array().unwrap();
        let fault = samples
            .iter()
            .position(|s| {
                s["errors"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|e| e.as_str().unwrap().contains(says))
            })
            .unwrap_or_else(|| panic!("{mode}: no fault recorded: {samples:?}"));
        assert!(
            samples[fault..].iter().any(|s| s["gpus"].is_array()),
            "{mode}: the GPUs never came back after sample {fault}"
        );
        let started: Vec<i32> = std::fs::read_to_string(&pids)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert!(started.len() >= 4, "{mode}: restarted: {started:?}");
        for pid in started {
            assert!(
                within(Duration::from_secs(2), || exited(pid)),
                "{mode}: nvidia-smi {pid} outlived the soak"
            );
        }
    }
}

/// An `nvidia-smi` flooding its output grew the supervisor without bound (2.3 GB): the runtime
/// snapshot's query and the loop-mode streams read at most a capped amount (a line, the GPUs and
/// compute processes of one reading); past it the stream is a fault, killed and restarted, and
/// the soak is judged on its progress as with a hung one. Run under a 1 GiB address-space limit.
#[test]
fn an_nvidia_smi_that_floods_its_output_is_a_recorded_fault_not_a_memory_leak() {
    for (mode, says) in [
        ("flood", "printed a line of more than 64 KiB"),
        ("flood-lines", "listed more than 1024 GPUs"),
    ] {
        let soak = Soak::new();
        let mut cmd = soak.command();
        cmd.env("FAKE_NVIDIA_SMI_MODE", mode)
            .env("UNILAB_TOOL_TIMEOUT", "2")
            .args(["--json", "soak", "run", "--sample-interval", "0.2"])
            .args(soak.trainer_soak(&[], &["--steps", "15", "--step-seconds", "0.2"]));
        let output = with_address_space_limit(&cmd, 1 << 30).output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{mode}: {output:?}");
        let artifact: Value =
            serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
        let errors: Vec<&str> = artifact["samples"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["errors"].as_array().unwrap())
            .map(|e| e.as_str().unwrap())
            .collect();
        assert!(
            errors.iter().any(|e| e.contains(says)),
            "{mode}: {errors:?}"
        );
        assert!(
            artifact["runtime"]
                .to_string()
                .contains("wrote more than 4 MiB"),
            "{mode}: the snapshot says why it has no GPUs: {}",
            artifact["runtime"]
        );
    }
}

/// Raw control sequences reached the terminal from `soak list`, `soak show` (the command and
/// its output tails), `history` and `soak list --job` (host directory names): clear-screen, a
/// window title, an OSC 52 clipboard write. Everything printed that came from outside unilab is
/// escaped now; and a newline in `SLURM_JOB_ID` no longer forges a line in an error.
#[test]
fn control_sequences_from_outside_never_reach_the_terminal() {
    let evil = "\u{1b}[2J\u{1b}]0;pwned\u{7}\u{1b}]52;c;aGk=\u{7}";
    let soak = Soak::new();
    let mut cmd = soak.unilab();
    cmd.env("SLURM_JOB_ID", "77")
        .args(["soak", "run", "--sample-interval", "0.1", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--", "sh", "-c"])
        .arg(format!(
            "printf '{evil}\\n'; printf '{evil}\\n' >&2; \"$0\" \"$@\""
        ))
        .arg("python3")
        .arg(trainer())
        .arg("--progress-dir")
        .arg(soak.progress())
        .args(["--steps", "3", "--step-seconds", "0.05"])
        .assert()
        .success();
    // Another host's log under a directory whose name carries the sequences.
    let uid = nix::unistd::getuid().as_raw().to_string();
    let here = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let other = soak.root.root().join(format!("node{evil}")).join(&uid);
    private_dir_all(&other);
    std::fs::copy(
        soak.root.root().join(&here).join(&uid).join("events.redb"),
        other.join("events.redb"),
    )
    .unwrap();
    for args in [
        &["soak", "list"][..],
        &["soak", "show", "latest"],
        &["history"],
        &["history", "--soak", "latest"],
        &["soak", "list", "--job", "77"],
    ] {
        let out = soak.unilab().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        for (stream, text) in [("stdout", &stdout), ("stderr", &stderr)] {
            assert!(
                !text.contains('\u{1b}') && !text.contains('\u{7}'),
                "{args:?}: a raw control character on {stream}: {text:?}"
            );
        }
        assert!(
            stdout.contains("\\u{1b}]52;c;aGk=\\u{7}") || args[0] == "history" && args.len() == 1,
            "{args:?}: the sequence is shown escaped: {stdout}"
        );
    }
    let out = soak
        .unilab()
        .env("SLURM_JOB_ID", "5\nerror: forged")
        .args(["mps", "start"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("5\\nerror: forged"), "{stderr}");
    assert!(
        !stderr.lines().any(|l| l.starts_with("error: forged")),
        "{stderr}"
    );
}

/// One bad log of another host broke the job view: `soak list --job` and `history --all-hosts`
/// exited 5 and listed nothing if any host's log was empty, truncated, not a log or left unclean
/// by a writer killed there — the last being when the view is needed most — and logs that were
/// a FIFO or a directory were skipped without a word. Now what can be read is shown, and each
/// log that cannot is named in a warning with why.
#[test]
fn one_bad_log_of_another_host_does_not_hide_the_others() {
    let soak = Soak::new();
    soak.unilab()
        .env("SLURM_JOB_ID", "77")
        .args(["soak", "run", "--sample-interval", "0.1"])
        .args(soak.trainer_soak(&[], &["--steps", "3", "--step-seconds", "0.05"]))
        .assert()
        .success();
    let uid = nix::unistd::getuid().as_raw().to_string();
    let here = soak.root.log_path();
    let log_of = |host: &str| {
        let dir = soak.root.root().join(host).join(&uid);
        private_dir_all(&dir);
        dir.join("events.redb")
    };
    write_private(&log_of("empty"), b"");
    write_private(&log_of("text"), &b"not a log at all\n".repeat(100));
    let bytes = std::fs::read(&here).unwrap();
    write_private(&log_of("truncated"), &bytes[..bytes.len() / 3]);
    nix::unistd::mkfifo(&log_of("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::fs::create_dir(log_of("directory")).unwrap();
    // A copy taken while a writer has the log open is what a writer killed there leaves.
    let writer = soak.root.log();
    std::fs::copy(&here, log_of("unclean")).unwrap();
    drop(writer);
    let mut raw = redb::Builder::new();
    raw.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
    assert!(
        matches!(
            raw.open_read_only(log_of("unclean")),
            Err(redb::DatabaseError::RepairAborted)
        ),
        "the copy is unclean"
    );
    let bad = ["directory", "empty", "fifo", "text", "truncated", "unclean"];
    for args in [
        &["--json", "soak", "list", "--job", "77"][..],
        &["--json", "history", "--all-hosts"],
    ] {
        let out = soak.unilab().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        for host in bad {
            assert!(
                stderr.contains(&format!("cannot read the log of host `{host}`")),
                "{args:?}: {host} is named: {stderr}"
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("soak_id"),
            "{args:?}: this host's soak is shown: {stdout}"
        );
    }
}

/// A hung nvidia-smi outlived a soak interrupted during its runtime snapshot: SIGTERM (or SIGINT
/// before the command started) ended unilab at once, and the snapshot's own nvidia-smi, which
/// ignores SIGTERM, ran on. The interruption is the soak's to handle from before the snapshot:
/// the snapshot's nvidia-smi is killed at its limit, the soak recorded as interrupted.
#[test]
fn a_soak_interrupted_during_its_snapshot_leaves_no_nvidia_smi_behind() {
    for signal in [nix::sys::signal::SIGTERM, nix::sys::signal::SIGINT] {
        let soak = Soak::new();
        let pids = soak.root.root().join("smi-pids");
        let mut cmd = soak.command();
        cmd.env("FAKE_NVIDIA_SMI_MODE", "hang")
            .env("FAKE_NVIDIA_SMI_PIDS", &pids)
            .args(["--json", "soak", "run", "--progress-dir"])
            .arg(soak.progress())
            .arg("--output")
            .arg(soak.artifact_path())
            .args(["--", "sleep", "30"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let unilab = cmd.spawn().unwrap();
        eventually("the snapshot's nvidia-smi", Duration::from_secs(30), || {
            std::fs::read_to_string(&pids).is_ok_and(|p| !p.trim().is_empty())
        });
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(unilab.id() as i32), signal).unwrap();
        let out = unilab.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{signal}: {out:?}");
        let verdict: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            verdict["outcome"]["failure_kind"], "interrupted",
            "{signal}"
        );
        assert!(
            verdict["outcome"]["reason"]
                .as_str()
                .unwrap()
                .contains("before the command started; it was not run"),
            "{signal}: the command was started all the same: {verdict}"
        );
        for pid in std::fs::read_to_string(&pids).unwrap().lines() {
            let pid: i32 = pid.parse().unwrap();
            let left = !within(Duration::from_secs(5), || exited(pid));
            if left {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::SIGKILL,
                );
            }
            assert!(!left, "{signal}: nvidia-smi {pid} outlived the soak");
        }
    }
}

/// A log replaced while a soak appended lost the soak silently: after `mv` of `events.redb` the
/// soak passed, all its records went to the moved file, and the log at the path verified clean
/// without it. Each commit now checks that the path still names the file being written: the
/// soak fails loudly (exit 3, naming the log), its tree stopped.
#[test]
fn a_log_moved_while_a_soak_appends_fails_the_soak_loudly() {
    let soak = Soak::new();
    let mut cmd = soak.command();
    cmd.args(["soak", "run", "--sample-interval", "0.1"])
        .args(soak.trainer_soak(&[], &["--steps", "300", "--step-seconds", "0.1"]))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let run = cmd.spawn().unwrap();
    // Until the soak is recorded, `history --soak latest` says there is none (exit 3).
    eventually("samples in the log", Duration::from_secs(30), || {
        soak.unilab()
            .args(["--json", "history", "--soak", "latest"])
            .output()
            .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("\"soak_sampled\""))
    });
    let moved = soak.root.log_path().with_extension("moved");
    std::fs::rename(soak.root.log_path(), &moved).unwrap();
    let out = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("was moved or replaced"), "{stderr}");
    assert!(
        live_pids_where(
            |pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                String::from_utf8_lossy(&c).contains(&*soak.progress().to_string_lossy())
            })
        )
        .is_empty(),
        "the trainer was stopped"
    );
}

/// Lines a child writes on `pipe`, gathered as they come; [`Gathered::all`] waits for the
/// pipe's end.
fn gather_lines(pipe: impl std::io::Read + Send + 'static) -> Gathered {
    use std::io::BufRead;
    let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let shared = std::sync::Arc::clone(&text);
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            let mut text = shared.lock().unwrap();
            text.push_str(&line);
            text.push('\n');
        }
    });
    Gathered { text, reader }
}

struct Gathered {
    text: std::sync::Arc<std::sync::Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl Gathered {
    fn contains(&self, what: &str) -> bool {
        self.text.lock().unwrap().contains(what)
    }

    /// Everything, once the pipe is closed.
    fn all(self) -> String {
        self.reader.join().unwrap();
        self.text.lock().unwrap().clone()
    }
}

/// A full disk was called a damaged log: ENOSPC on an append (mid-soak, at open, at `mps
/// start`) exited 5 "is not a readable unilab event log", hid the ENOSPC behind redb's "Previous
/// I/O error occurred", advised moving a healthy log aside, and the soak recorded no verdict.
/// Now a full disk is exit 3 "no space left on the device holding …"; a soak goes on, holds its
/// samples in memory, records them and its verdict once there is space, and says why when there
/// is none by the end.
#[test]
fn a_full_disk_is_named_as_such_and_a_soak_outlasts_it() {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let Some(disk) = SmallDisk::mount(2 << 20) else {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    };
    let soak = Soak::new();
    let unilab = |root: &str, args: &[&str]| {
        let mut cmd = Command::new(unilab_bin());
        cmd.env_clear()
            .env("PATH", path_with_fixtures())
            .env("HOME", soak.root.root())
            .env("UNILAB_TOOL_TIMEOUT", "5")
            .arg("--root")
            .arg(disk.path().join(root))
            .args(args);
        cmd
    };
    // A soak that runs until it is interrupted, sampling often so that its log fills the disk.
    let start_soak = || {
        let mut cmd = unilab(
            "state",
            &["--json", "soak", "run", "--sample-interval", "0.02"],
        );
        cmd.args(soak.trainer_soak(&[], &["--steps", "3000", "--step-seconds", "0.1"]))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut run = cmd.spawn().unwrap();
        let stderr = gather_lines(run.stderr.take().unwrap());
        (run, stderr)
    };
    let interrupt = |run: &std::process::Child| {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(run.id() as i32),
            nix::sys::signal::SIGINT,
        )
        .unwrap();
    };

    // Full at the start of a command that appends to a new log: named, exit 3.
    let filler = disk.fill();
    let out = unilab("fresh", &["mps", "start"]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(
        said.contains("no space left on the device holding"),
        "{said}"
    );
    assert!(
        !said.contains("not a readable") && !said.contains("Previous I/O"),
        "{said}"
    );
    std::fs::remove_file(&filler).unwrap();

    // Space runs out mid-soak and comes back before its end.
    let (run, stderr) = start_soak();
    eventually("samples in the log", Duration::from_secs(30), || {
        stderr.contains("step 3/")
    });
    let filler = disk.fill();
    eventually(
        "the soak to hold its samples",
        Duration::from_secs(60),
        || stderr.contains("the soak goes on"),
    );
    std::fs::remove_file(&filler).unwrap();
    eventually(
        "the samples to be recorded",
        Duration::from_secs(30),
        || stderr.contains("has space again"),
    );
    interrupt(&run);
    let out = run.wait_with_output().unwrap();
    let said = stderr.all();
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("no space left on the device holding"),
        "{said}"
    );
    assert!(!said.contains("not a readable"), "{said}");
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    assert_eq!(artifact["outcome"]["failure_kind"], "interrupted");
    let indices: Vec<u64> = artifact["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["index"].as_u64().unwrap())
        .collect();
    assert!(
        indices.windows(2).all(|w| w[1] == w[0] + 1),
        "no sample was lost: {indices:?}"
    );
    assert!(
        unilab("state", &["log", "verify"])
            .status()
            .unwrap()
            .success()
    );

    // Full from the middle of a soak to its end: it says so, exit 3.
    std::fs::remove_file(soak.artifact_path()).unwrap();
    let (run, stderr) = start_soak();
    eventually("a second soak's samples", Duration::from_secs(30), || {
        stderr.contains("step 3/")
    });
    let _filler = disk.fill();
    eventually(
        "the second soak to hold its samples",
        Duration::from_secs(60),
        || stderr.contains("the soak goes on"),
    );
    interrupt(&run);
    let out = run.wait_with_output().unwrap();
    let said = stderr.all();
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(said.contains("waiting up to 10 s for space"), "{said}");
    assert!(
        said.contains(r#""error":"no space left on the device holding"#),
        "{said}"
    );
    assert!(!said.contains("not a readable"), "{said}");
}

/// A subdirectory of the progress directory that the soak cannot read was skipped without a
/// word: what it held silently counted for nothing. Each sample now says so. (As root every
/// directory is readable: the test needs an ordinary user, as CI's unprivileged run is.)
#[test]
fn an_unreadable_part_of_the_progress_directory_is_said() {
    use std::os::unix::fs::PermissionsExt;
    if is_root() {
        eprintln!("skipped: root reads every directory; run as an ordinary user");
        return;
    }
    let soak = Soak::new();
    let hidden = soak.progress().join("hidden");
    std::fs::create_dir(&hidden).unwrap();
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o000)).unwrap();
    let (output, artifact) = soak.run(&[], &["--steps", "4", "--step-seconds", "0.1"]);
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let first = &artifact["samples"][0]["errors"];
    assert!(
        first
            .to_string()
            .contains("cannot read 1 subdirectory of the progress directory"),
        "{first}"
    );
}

/// A supervisor stopped with SIGSTOP blamed nvidia-smi once it resumed ("did not answer" in 20
/// samples, its streams restarted), and caught up on the samples due meanwhile in a burst (the
/// tool timeout is 4 s, the stops 6 s: longer than the patience). It tells its own stall from
/// the tool's by its own clock now: the due samples it missed are
/// skipped and counted, the streams are not restarted, nvidia-smi is not blamed.
#[test]
fn a_stopped_supervisor_blames_itself_not_nvidia_smi() {
    let soak = Soak::new();
    let starts = soak.root.root().join("smi-starts");
    let mut cmd = soak.command();
    cmd.env("UNILAB_TOOL_TIMEOUT", "4")
        .env("FAKE_NVIDIA_SMI_STARTS", &starts)
        .args(["soak", "run", "--sample-interval", "0.2"])
        .args(soak.trainer_soak(&[], &["--steps", "200", "--step-seconds", "0.1"]))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut run = cmd.spawn().unwrap();
    let stdout = gather_lines(run.stdout.take().unwrap());
    eventually("the soak under way", Duration::from_secs(30), || {
        stdout.contains("step 5/")
    });
    let pid = nix::unistd::Pid::from_raw(run.id() as i32);
    for _ in 0..2 {
        nix::sys::signal::kill(pid, nix::sys::signal::SIGSTOP).unwrap();
        // How long the supervisor is stopped: the test's input, not a wait for something.
        std::thread::sleep(Duration::from_secs(6));
        nix::sys::signal::kill(pid, nix::sys::signal::SIGCONT).unwrap();
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(run.wait().unwrap().success());
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    let errors: Vec<&str> = artifact["samples"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["errors"].as_array().unwrap())
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(
        !errors
            .iter()
            .any(|e| e.contains("did not answer") || e.contains("has not answered")),
        "nvidia-smi was blamed: {errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("skipped: the supervisor did not run for about")),
        "{errors:?}"
    );
    let started = std::fs::read_to_string(&starts).unwrap();
    assert_eq!(
        started.lines().count(),
        2,
        "the streams were restarted: {started}"
    );
}

/// `--env-clear` gives the command the `--env` variables and nothing else (as `subprocess`'s
/// `env=` does); `--env NAME` passes NAME's value from unilab's own environment, so a value
/// need not appear on a command line other users can read.
#[test]
fn env_clear_gives_the_command_only_what_env_gives() {
    let soak = Soak::new();
    let (output, artifact) = soak.run_with(
        {
            let mut cmd = soak.unilab();
            cmd.env("RUN_NAME", "from-unilabs-env")
                .env("OUTSIDE", "leaked");
            cmd
        },
        &[
            "--env-clear",
            "--env",
            "PATH",
            "--env",
            "RUN_NAME",
            "--env",
            "STEP=7",
        ],
        &[
            "--steps",
            "2",
            "--step-seconds",
            "0.1",
            "--print-env",
            "RUN_NAME",
            "--print-env",
            "STEP",
            "--print-env",
            "OUTSIDE",
            "--print-env",
            "PYTHONUNBUFFERED",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let tail = artifact["output_tail"]["stdout"].as_str().unwrap();
    assert!(
        tail.starts_with(
            "RUN_NAME=from-unilabs-env\nSTEP=7\nOUTSIDE=None\nPYTHONUNBUFFERED=None\n"
        ),
        "{tail}"
    );
    assert_eq!(
        artifact["parameters"]["environment"]["RUN_NAME"],
        "from-unilabs-env"
    );
    // A name unilab's environment lacks is a usage error, before anything runs.
    let refused = soak
        .unilab()
        .env_remove("NOT_SET_ANYWHERE")
        .args(["soak", "run"])
        .args(soak.trainer_soak(&["--env", "NOT_SET_ANYWHERE"], &[]))
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("`NOT_SET_ANYWHERE` is not set"),
        "{refused:?}"
    );
}

/// `--meta-json` records any JSON value — the artifact shows it as JSON, its export gives the
/// same bytes, and a credential-named value inside it never reaches the log; a value that is
/// not JSON is a usage error.
#[test]
fn meta_json_records_json_values() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(
        &[
            "--meta",
            "plain=3",
            "--meta-json",
            "lr=0.0003",
            "--meta-json",
            r#"tags=["baseline","bf16"]"#,
            "--meta-json",
            r#"cfg={"depth":2,"wandb":{"api_key":"sekrit-json-5150"},"x":null}"#,
        ],
        &["--steps", "2", "--step-seconds", "0.1"],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let meta = &artifact["metadata"];
    assert_eq!(meta["plain"], "3");
    assert_eq!(meta["lr"], 0.0003);
    assert_eq!(meta["tags"], serde_json::json!(["baseline", "bf16"]));
    assert_eq!(
        meta["cfg"],
        serde_json::json!({"depth": 2, "wandb": {"api_key": "[redacted]"}, "x": null})
    );
    let log = std::fs::read(soak.root.log_path()).unwrap();
    assert!(
        !log.windows(16).any(|w| w == b"sekrit-json-5150"),
        "a secret reached the log"
    );
    let id = artifact["soak_id"].as_str().unwrap();
    let exported = soak.unilab().args(["soak", "export", id]).output().unwrap();
    assert_eq!(
        exported.stdout,
        std::fs::read(soak.artifact_path()).unwrap()
    );
    let refused = soak
        .unilab()
        .args(["soak", "run"])
        .args(soak.trainer_soak(&["--meta-json", "lr=3e-"], &[]))
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("is not JSON"),
        "{refused:?}"
    );
}

/// A soak says at its start when its record may not fit: a log over `UNILAB_LOG_WARN_SIZE`,
/// and (as root, on a 4 MiB tmpfs state root) a filesystem with less free space than a week of
/// the soak at its interval needs. Neither stops it.
#[test]
fn a_soak_warns_at_its_start_when_its_record_may_not_fit() {
    let soak = Soak::new();
    let (output, _) = soak.run(&[], &["--steps", "2", "--step-seconds", "0.1"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let (output, artifact) = soak.run_with(
        {
            let mut cmd = soak.unilab();
            cmd.env("UNILAB_LOG_WARN_SIZE", "1KiB");
            cmd
        },
        &[],
        &["--steps", "2", "--step-seconds", "0.1"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(artifact["outcome"]["status"], "passed");
    assert!(
        stderr.contains("over 1.0 KiB (UNILAB_LOG_WARN_SIZE)"),
        "{stderr}"
    );
    assert!(stderr.contains("unilab log stats"), "{stderr}");

    if !is_root() {
        eprintln!("skipped the small-filesystem warning: mounting a tmpfs needs root");
        return;
    }
    let small = soak.root.root().join("small");
    std::fs::create_dir(&small).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs"])
        .arg(&small)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped the small-filesystem warning: this host refuses a tmpfs mount");
        return;
    }
    let output = Command::new(unilab_bin())
        .env_clear()
        .env("PATH", path_with_fixtures())
        .env("HOME", soak.root.root())
        .arg("--root")
        .arg(&small)
        .args(["soak", "run"])
        .args(soak.trainer_soak(
            &["--sample-interval", "1s", "--force"],
            &["--steps", "2", "--step-seconds", "0.1"],
        ))
        .output()
        .unwrap();
    let _ = Command::new("umount").arg(&small).status();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("a week of this soak sampled every 1.0s needs about"),
        "{stderr}"
    );
}
