//! What is left running when a soak ends, however it ends: leaks and escapes killed, a child
//! that ignores SIGTERM, Ctrl-C, a supervisor or guard killed with SIGKILL (nothing survives, the
//! soak is reported abandoned once), and no nvidia-smi left behind.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use predicates::prelude::*;
use serde_json::Value;
use unilab::testing::artifact::digest_matches;

use super::*;

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
    // A bound to finish at all: on a loaded machine the tree and the streams start late.
    eventually(
        "the whole tree to be sampled",
        Duration::from_secs(60),
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
        said.contains("stopping the tree (interrupted): SIGTERM now, SIGKILL in 2m — Ctrl-C again to kill it now")
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
