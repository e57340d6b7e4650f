//! Daemons that do not go quietly: killed behind unilab's back, ignoring `quit`, not answering,
//! wedged, in the foreground on Ctrl-C; `stop --all` and what `stop --json` returns.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use predicates::prelude::*;
use serde_json::Value;
use unilab::Event;
use unilab::LogReader;

use super::*;

#[test]
fn a_daemon_killed_behind_unilabs_back_is_cleaned_with_exit_4() {
    let host = Host::two_gpus();
    let record = host.start(&["1"]);
    let pid = record["pid"].as_u64().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    assert!(gone(pid));
    assert_eq!(host.json(&["mps", "list"])[0]["state"], "process_gone");
    refused(
        host.unilab().args(["mps", "env"]),
        3,
        &["is not running: process_gone"],
    );
    refused(
        host.unilab().args(["mps", "stop"]),
        4,
        &["its record was cleaned and nothing was signalled"],
    );
    assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
    assert_eq!(
        host.kinds("gpu-2222bbbb").last().unwrap(),
        "daemon_stale_cleaned"
    );
    // The daemon is proven gone: what it left in its pipe directory goes with its record, and
    // status no longer lists a socket that is "not unilab's".
    let pipe = PathBuf::from(record["pipe_directory"].as_str().unwrap());
    assert!(!pipe.join("control").exists(), "its socket was removed");
    assert!(
        !pipe.join("nvidia-cuda-mps-control.pid").exists(),
        "its pid file was removed"
    );
    assert!(
        host.json(&["mps", "status"])["control_pipes"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // The way is clear for a new daemon.
    let again = host.start(&["1"]);
    host.unilab().args(["mps", "stop"]).assert().success();
    assert!(gone(again["pid"].as_u64().unwrap()));
}

#[test]
fn a_daemon_that_ignores_quit_is_escalated() {
    let host = Host::two_gpus();
    let ignore_quit = ("FAKE_MPS_IGNORE_QUIT", "1");
    let ignore_term = ("FAKE_MPS_IGNORE_SIGTERM", "1");
    for (behaviour, method) in [
        (vec![ignore_quit], "(terminated)"),
        (vec![ignore_quit, ignore_term], "(killed)"),
    ] {
        // The fake daemon inherits these from unilab, which starts it.
        let record = host.json_with(&behaviour, &["mps", "start", "0"]);
        let pid = record["pid"].as_u64().unwrap();
        let stopped = host
            .unilab()
            .args(["-v", "mps", "stop", "--grace", "0.5"])
            .assert()
            .success()
            .stdout(predicate::str::contains(method));
        assert!(gone(pid), "{method}");
        // `-v` tells each step of the escalation.
        let steps = String::from_utf8_lossy(&stopped.get_output().stderr).into_owned();
        let mut expected = vec!["sending `quit`", "sending SIGTERM"];
        if method == "(killed)" {
            expected.push("sending SIGKILL");
        }
        for step in expected {
            assert!(steps.contains(step), "{method}: no `{step}` in {steps}");
        }
    }
    assert_eq!(
        host.kinds("gpu-1111aaaa")
            .iter()
            .filter(|k| *k == "daemon_stopped")
            .count(),
        2
    );
}

#[test]
fn stop_all_stops_two_daemons() {
    let host = Host::two_gpus();
    let a = host.start(&["0"]);
    let b = host.start(&["GPU-2222"]);
    refused(
        host.unilab().args(["mps", "stop"]),
        3,
        &["several daemons are recorded"],
    );
    let stopped = host.json(&["mps", "stop", "--all"]);
    assert_eq!(stopped.as_array().unwrap().len(), 2);
    assert!(
        stopped
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["outcome"] == "stopped")
    );
    assert!(gone(a["pid"].as_u64().unwrap()));
    assert!(gone(b["pid"].as_u64().unwrap()));
}

#[test]
fn foreground_daemons_stop_cleanly_on_ctrl_c() {
    let host = Host::two_gpus();
    let mut cmd = Command::new(unilab_bin());
    cmd.env_clear()
        .env("PATH", path_with_fixtures())
        .env("HOME", host.root.root())
        .env("FAKE_NVIDIA_SMI_GPUS", &host.gpus)
        .env("XDG_RUNTIME_DIR", host.runtime())
        .arg("--root")
        .arg(host.root.root())
        .args(["mps", "start", "1", "--foreground"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    // The "started" line must reach a reader while the daemon runs, not when it stops.
    let stdout = child.stdout.take().unwrap();
    let (first_line, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
        let _ = first_line.send(line);
    });
    let mut live = Value::Null;
    eventually(
        "the foreground daemon to come up",
        Duration::from_secs(10),
        || {
            let list = host.json(&["mps", "list"]);
            match list.as_array() {
                Some(l) if l.len() == 1 && l[0]["live"] == true => {
                    live = l[0].clone();
                    true
                }
                _ => false,
            }
        },
    );
    // Wait for verification before interrupting.
    eventually(
        "the foreground daemon's verification",
        Duration::from_secs(10),
        || {
            host.kinds("gpu-2222bbbb")
                .contains(&"daemon_verified_live".to_string())
        },
    );
    let line = received
        .recv_timeout(Duration::from_secs(10))
        .expect("the started line arrives while the daemon runs");
    assert!(line.starts_with("started `gpu-2222bbbb`"), "{line:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::SIGINT,
    )
    .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(gone(live["pid"].as_u64().unwrap()));
    let kinds = host.kinds("gpu-2222bbbb");
    assert_eq!(kinds.last().unwrap(), "daemon_stopped");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("Starting control daemon using socket"),
        "its log lines reach stderr"
    );
}

#[test]
fn a_daemon_that_does_not_answer_is_stopped_and_the_start_recorded_as_failed() {
    let host = Host::two_gpus();
    refused(
        host.unilab()
            .env("FAKE_MPS_GARBLED", "1")
            .args(["mps", "start", "0"]),
        3,
        &["did not start: it did not answer on its control socket"],
    );
    assert_eq!(
        host.kinds("gpu-1111aaaa"),
        [
            "topology_resolved",
            "daemon_starting",
            "daemon_started",
            "daemon_start_failed"
        ]
    );
    let started = LogReader::open(&host.root.log_path(), &host.root.scope())
        .unwrap()
        .unwrap()
        .snapshot()
        .unwrap();
    let pid = started
        .get(3)
        .unwrap()
        .map(|r| match r.envelope.event {
            Event::DaemonStarted { record, .. } => u64::from(record.pid),
            other => panic!("{other:?}"),
        })
        .unwrap();
    assert!(gone(pid), "the daemon that did not answer was stopped");
    assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
}

/// A wedged daemon accepts its control socket's connections but never replies: its process is
/// the recorded one, so liveness by identity called it `live`, and clients handed its
/// environment hung. `mps list`, `status` and `doctor` now ask it `get_server_list` under the
/// tool timeout: no answer is `wedged`, never `live`; `env` and `exec --shared` refuse it; `mps
/// stop` escalates to signals at once and says so.
#[test]
fn a_wedged_daemon_is_told_apart_refused_and_stopped_by_signal() {
    let host = Host::two_gpus();
    let wedge = host.root.root().join("wedge");
    let record = host.json_with(
        &[("FAKE_MPS_WEDGE_WHEN", wedge.to_str().unwrap())],
        &["mps", "start", "0"],
    );
    let pid = record["pid"].as_u64().unwrap();
    let listed = &host.json(&["mps", "list"])[0];
    assert_eq!(listed["state"], "live");
    assert_eq!(listed["answered"], true);
    assert_eq!(
        listed["observed_start_ticks"],
        record["process_start_ticks"]
    );
    std::fs::write(&wedge, "").unwrap();
    // Short enough that each probe of the wedged daemon ends soon, long enough that the fake
    // nvidia-smi, which must answer, starts in time on a loaded machine.
    let quick = [("UNILAB_TOOL_TIMEOUT", "3")];
    let listed = &host.json_with(&quick, &["mps", "list"])[0];
    assert_eq!(listed["state"], "wedged", "{listed}");
    assert_eq!(listed["live"], false);
    assert_eq!(listed["answered"], false);
    assert_eq!(
        listed["observed_start_ticks"],
        record["process_start_ticks"]
    );
    let status = host.json_with(&quick, &["mps", "status"]);
    assert_eq!(status["managed_daemons"][0]["state"], "wedged");
    let (code, report) = doctor(&host, &quick, Some("0"));
    assert_eq!(code, 3, "{report}");
    assert_eq!(status_of(&report, "daemon").unwrap(), "fail");
    assert!(detail_of(&report, "daemon").contains("wedged"));
    refused(
        host.unilab().envs(quick).args(["mps", "env"]),
        3,
        &["is wedged", "unilab mps stop"],
    );
    refused(
        host.unilab()
            .envs(quick)
            .args(["mps", "exec", "--shared", "0", "--", "true"]),
        3,
        &["is wedged"],
    );
    let stopped = host
        .unilab()
        .envs(quick)
        .args(["--json", "mps", "stop", "--grace", "0.5"])
        .assert()
        .success();
    let stopped: Value = serde_json::from_slice(&stopped.get_output().stdout).unwrap();
    assert_eq!(stopped[0]["outcome"], "wedged", "{stopped}");
    assert_eq!(stopped[0]["method"], "terminated");
    assert_eq!(stopped[0]["pid"], pid);
    assert!(gone(pid));
    assert_eq!(host.kinds("gpu-1111aaaa").last().unwrap(), "daemon_stopped");
}

/// A daemon that is wedged from the start is never recorded live: the start says why.
#[test]
fn a_daemon_wedged_from_the_start_is_refused() {
    let host = Host::two_gpus();
    refused(
        host.unilab()
            .env("FAKE_MPS_WEDGED", "1")
            .env("UNILAB_TOOL_TIMEOUT", "3")
            .args(["mps", "start", "0"]),
        3,
        &["it is wedged"],
    );
    assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
    assert!(daemons_for(&host.runtime().join("unilab/mps/gpu-1111aaaa")).is_empty());
}

/// `mps stop --json` gave `[{name, outcome, method}]`; the original's `stop_daemon` returns the
/// record stopped. And under `--json` the warning of a stale clean-up (exit 4) was prose on
/// stderr; it is one JSON object now, like every other error.
#[test]
fn stop_json_returns_the_records_and_a_stale_clean_up_is_one_json_object() {
    let host = Host::two_gpus();
    let record = host.start(&["0", "--active-thread-percentage", "30"]);
    let stopped = host.json(&["mps", "stop"]);
    let one = &stopped[0];
    for field in [
        "name",
        "pid",
        "process_start_ticks",
        "pipe_directory",
        "gpu_uuids",
    ] {
        assert_eq!(one[field], record[field], "{field}");
    }
    assert_eq!(one["active_thread_percentage"], 30.0);
    assert_eq!(one["outcome"], "stopped");
    assert_eq!(one["method"], "quit");
    let record = host.start(&["0"]);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(record["pid"].as_u64().unwrap() as i32),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    assert!(gone(record["pid"].as_u64().unwrap()));
    let out = host
        .unilab()
        .args(["--json", "mps", "stop"])
        .assert()
        .code(4)
        .get_output()
        .clone();
    let stdout: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stdout[0]["outcome"], "stale_cleaned");
    assert_eq!(stdout[0]["reason"], "process_gone");
    assert_eq!(stdout[0]["method"], Value::Null);
    let stderr: Value = serde_json::from_slice(&out.stderr)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(stderr["exit_code"], 4);
    assert!(stderr["error"].as_str().unwrap().contains("process_gone"));
}

/// An epilog's `mps stop` where nothing was recorded exited 3 ("no daemon is recorded") while
/// `mps stop --all` exited 0: stopping where nothing runs leaves what was asked for, so every
/// form of `mps stop` exits 0 with a note then (`[]` under `--json`). A name that is not
/// recorded is still refused (exit 3): a typo should not pass for a daemon stopped.
#[test]
fn stop_with_nothing_recorded_succeeds_with_a_note_as_stop_all_does() {
    let host = Host::two_gpus();
    let nothing = |host: &Host| {
        for args in [
            &["mps", "stop"][..],
            &["mps", "stop", "--all"],
            &["mps", "stop", "--job", "4242"],
        ] {
            host.unilab()
                .args(args)
                .assert()
                .success()
                .stderr(predicate::str::contains("nothing to stop"));
            let out = host.unilab().arg("--json").args(args).assert().success();
            assert_eq!(out.get_output().stdout, b"[]\n", "{args:?}");
        }
    };
    nothing(&host);
    let record = host.start(&["0"]);
    host.unilab().args(["mps", "stop"]).assert().success();
    assert!(gone(record["pid"].as_u64().unwrap()));
    nothing(&host);
    refused(
        host.unilab().args(["mps", "stop", "trainer"]),
        3,
        &["no daemon named `trainer` is recorded"],
    );
}
