//! A daemon's life through `mps start`, `status`, `list` and `stop`: the one command path, a second
//! start refused, what `--verbose` shows, a failed start cleaned up, what read-only commands leave,
//! limits read back, and a start the log cannot record.

use std::path::PathBuf;

use crate::common::*;
use predicates::prelude::*;
use serde_json::Value;
use unilab::LogReader;

use super::*;

#[test]
fn the_one_command_path_on_a_one_gpu_mask_round_trips() {
    let host = Host::two_gpus();
    let record = host.json_with(&[("CUDA_VISIBLE_DEVICES", "1")], &["mps", "start"]);
    assert_eq!(record["name"], "gpu-2222bbbb");
    assert_eq!(record["gpu_uuids"][0], GPU_B);
    assert_eq!(record["topology_mode"], "single_gpu");
    let pid = record["pid"].as_u64().unwrap();
    assert!(alive(pid));
    let pipe = PathBuf::from(record["pipe_directory"].as_str().unwrap());
    assert_eq!(pipe, host.runtime().join("unilab/mps/gpu-2222bbbb"));
    let mode = std::fs::metadata(&pipe).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o700
    );

    let list = host.json(&["mps", "list"]);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["live"], true);
    assert_eq!(
        list[0]["process_start_ticks"],
        record["process_start_ticks"]
    );

    let env = host.json(&["mps", "env"]);
    assert_eq!(env["CUDA_MPS_PIPE_DIRECTORY"], record["pipe_directory"]);
    assert_eq!(env["CUDA_MPS_LOG_DIRECTORY"], record["log_directory"]);
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], GPU_B);
    host.unilab()
        .args(["mps", "env", "--gpu", "GPU-2222"])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!(
            "export CUDA_VISIBLE_DEVICES='{GPU_B}'"
        )));

    // exec: the command sees the daemon's environment, its exit code comes back, and a CUDA
    // client under it reaches the daemon through the pipe directory.
    host.unilab()
        .args(["mps", "exec", "--", "sh", "-c", "test \"$CUDA_VISIBLE_DEVICES\" = \"$0\" && echo get_server_list | nvidia-cuda-mps-control >/dev/null && exit 7", GPU_B])
        .assert()
        .code(7);

    host.unilab()
        .args(["mps", "stop"])
        .assert()
        .success()
        .stdout(predicate::str::contains("stopped `gpu-2222bbbb` (quit)"));
    assert!(gone(pid), "the daemon is really gone");
    assert!(
        !pipe.join("control").exists(),
        "the stale socket was removed"
    );
    assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
    assert_eq!(
        host.kinds("gpu-2222bbbb"),
        [
            "topology_resolved",
            "daemon_starting",
            "daemon_started",
            "daemon_verified_live",
            "daemon_stopped"
        ]
    );
    host.unilab().args(["log", "verify"]).assert().success();
}

#[test]
fn a_second_start_is_refused_while_the_first_runs() {
    let host = Host::two_gpus();
    let first = host.start(&["0"]);
    refused(
        host.unilab().args(["mps", "start", "0"]),
        3,
        &["already serves"],
    );
    // Another name on the same GPU is refused too.
    host.unilab()
        .args(["mps", "start", "0", "--name", "other"])
        .assert()
        .code(3);
    host.unilab().args(["mps", "stop"]).assert().success();
    assert!(gone(first["pid"].as_u64().unwrap()));
}

/// `-v` says what unilab does — the event log it uses, each external tool call with its exit
/// and duration, each commit with its time — and without it none of that is printed.
#[test]
fn verbose_shows_each_tool_call_and_commit() {
    let host = Host::two_gpus();
    let started = host
        .unilab()
        .args(["-v", "mps", "start", "0"])
        .assert()
        .success();
    let detail = String::from_utf8_lossy(&started.get_output().stderr).into_owned();
    for shown in [
        "event log: `",
        "ran `nvidia-smi ",
        "ran `nvidia-cuda-mps-control -d`: exit 0 in ",
        "event log: committed 1 event (seq 3: daemon_started) in ",
    ] {
        assert!(detail.contains(shown), "no `{shown}` in {detail}");
    }
    let quiet = host.unilab().args(["mps", "stop"]).assert().success();
    let stderr = String::from_utf8_lossy(&quiet.get_output().stderr).into_owned();
    assert!(
        !stderr.contains("ran `") && !stderr.contains("committed"),
        "{stderr}"
    );
}

#[test]
fn read_only_commands_change_nothing() {
    let host = Host::two_gpus();
    for args in [
        &["mps", "status"][..],
        &["mps", "list"][..],
        &["mps", "doctor", "0"][..],
    ] {
        host.unilab().args(args).assert().success();
    }
    refused(
        host.unilab().args(["mps", "env"]),
        3,
        &["no MPS daemon is recorded"],
    );
    assert!(!host.root.log_path().exists(), "no log was created");
    assert!(
        !host.runtime().join("unilab").exists(),
        "no pipe directory was created"
    );
    let record = host.start(&["0"]);
    let seq_before = LogReader::open(&host.root.log_path(), &host.root.scope())
        .unwrap()
        .unwrap()
        .snapshot()
        .unwrap()
        .head()
        .unwrap()
        .0;
    for args in [
        &["mps", "status"][..],
        &["mps", "list"][..],
        &["mps", "doctor", "0"][..],
        &["mps", "env"][..],
    ] {
        host.unilab().args(args).assert().success();
    }
    let seq_after = LogReader::open(&host.root.log_path(), &host.root.scope())
        .unwrap()
        .unwrap()
        .snapshot()
        .unwrap()
        .head()
        .unwrap()
        .0;
    assert_eq!(seq_before, seq_after, "no events");
    host.unilab().args(["mps", "stop"]).assert().success();
    assert!(gone(record["pid"].as_u64().unwrap()));
}

#[test]
fn status_finds_control_pipes_and_who_owns_them() {
    let host = Host::two_gpus();
    let record = host.start(&["0"]);
    let status = host.json_with(&[("CUDA_VISIBLE_DEVICES", "0")], &["mps", "status"]);
    for field in [
        "platform",
        "nvidia_smi_available",
        "cuda_visible_devices",
        "gpus",
        "control_pipes",
        "managed_daemons",
        "diagnostic",
        "compatible_topology_modes",
    ] {
        assert!(status.get(field).is_some(), "HostStatus.{field}");
    }
    assert_eq!(status["cuda_visible_devices"], "0");
    assert_eq!(
        status["compatible_topology_modes"],
        serde_json::json!(["single_gpu"])
    );
    let pipe = status["control_pipes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["managed_names"] == serde_json::json!(["gpu-1111aaaa"]))
        .expect("the daemon's control pipe");
    assert_eq!(pipe["kind"], "socket");
    host.unilab().args(["mps", "stop"]).assert().success();
    assert!(gone(record["pid"].as_u64().unwrap()));
}

#[test]
fn a_start_that_fails_stops_what_it_launched_and_leaves_the_gpu_startable() {
    let host = Host::two_gpus();
    // The daemon would take a minute to come up; unilab waits for it the tool timeout (5 s, so
    // that nvidia-smi answers in time on a loaded machine).
    let out = host
        .unilab()
        .env("FAKE_MPS_START_DELAY", "60")
        .args(["mps", "start", "0"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("did not start"))
        .stderr(predicate::str::contains("stopped what it launched: pid"))
        .get_output()
        .stderr
        .clone();
    let said = String::from_utf8_lossy(&out);
    let launched: u64 = said
        .split("stopped what it launched: pid ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {said}"));
    assert!(gone(launched), "what the failed start launched still runs");
    let pipe = host.runtime().join("unilab/mps/gpu-1111aaaa");
    assert!(
        daemons_for(&pipe).is_empty(),
        "a daemon outlived the failed start"
    );
    assert!(!pipe.join("nvidia-cuda-mps-control.pid").exists());
    assert!(!pipe.join("control").exists());
    assert_eq!(
        host.kinds("gpu-1111aaaa"),
        [
            "topology_resolved",
            "daemon_starting",
            "daemon_start_failed"
        ]
    );
    // The GPU is startable again, and nothing calls a daemon "not unilab's".
    let record = host.start(&["0"]);
    assert_eq!(record["name"], "gpu-1111aaaa");
    host.unilab().args(["mps", "stop"]).assert().success();
    assert!(gone(record["pid"].as_u64().unwrap()));
}

/// `mps start --active-thread-percentage P --pinned-memory-limit SIZE` sets both on the daemon,
/// reads them back and records them; `mps list` shows them; `mps exec` hands a client its own
/// limits as MPS clients take them.
#[test]
fn limits_set_on_a_daemon_are_read_back_recorded_and_shown() {
    let host = Host::two_gpus();
    let record = host.start(&[
        "0",
        "--active-thread-percentage",
        "25",
        "--pinned-memory-limit",
        "2GiB",
    ]);
    assert_eq!(record["active_thread_percentage"], 25.0);
    assert_eq!(record["pinned_memory_limit"], 2u64 << 30);
    let listed = &host.json(&["mps", "list"])[0];
    assert_eq!(listed["active_thread_percentage"], 25.0);
    assert_eq!(listed["pinned_memory_limit"], 2u64 << 30);
    assert_eq!(listed["job"], Value::Null);
    let seen = host
        .unilab()
        .args([
            "mps",
            "exec",
            "--active-thread-percentage",
            "10",
            "--pinned-memory-limit",
            "512MiB",
            "--",
            "sh",
            "-c",
            "echo $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE $CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
        ])
        .assert()
        .success();
    assert_eq!(
        String::from_utf8_lossy(&seen.get_output().stdout).trim(),
        "10 0=512M"
    );
    let help = host
        .unilab()
        .args(["mps", "exec", "--help"])
        .assert()
        .success();
    assert!(
        String::from_utf8_lossy(&help.get_output().stdout).contains("per client process"),
        "exec --help says the memory limit applies per client process"
    );
    host.unilab().args(["mps", "stop"]).assert().success();
    // Without limits, the record says so with nulls.
    let plain = host.start(&["0"]);
    assert_eq!(plain["active_thread_percentage"], Value::Null);
    assert_eq!(plain["pinned_memory_limit"], Value::Null);
    host.unilab().args(["mps", "stop"]).assert().success();
    // Values MPS cannot take are usage errors.
    for bad in [
        ["--active-thread-percentage", "0"],
        ["--pinned-memory-limit", "1000"],
    ] {
        host.unilab()
            .args(["mps", "start", "0"])
            .args(bad)
            .assert()
            .code(2);
    }
}

/// A limit the daemon does not hold (the value read back is not the one asked for) refuses the
/// start: the daemon is stopped, the start recorded as failed, and nothing is left running.
#[test]
fn a_limit_read_back_wrong_refuses_the_start_and_leaves_nothing_running() {
    let host = Host::two_gpus();
    for (knob, flag, value) in [
        (
            "FAKE_MPS_READBACK_PERCENTAGE",
            "--active-thread-percentage",
            "25",
        ),
        ("FAKE_MPS_READBACK_PINNED", "--pinned-memory-limit", "2GiB"),
    ] {
        let wrong = if knob == "FAKE_MPS_READBACK_PINNED" {
            "1G"
        } else {
            "100.0"
        };
        refused(
            host.unilab()
                .env(knob, wrong)
                .args(["mps", "start", "0", flag, value]),
            3,
            &["read back is"],
        );
        assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
        let pipe = host.runtime().join("unilab/mps/gpu-1111aaaa");
        assert!(daemons_for(&pipe).is_empty(), "{knob}: a daemon is left");
        assert_eq!(
            host.kinds("gpu-1111aaaa").last().unwrap(),
            "daemon_start_failed"
        );
    }
    // The GPU is startable again.
    host.start(&["0", "--active-thread-percentage", "50"]);
    host.unilab().args(["mps", "stop"]).assert().success();
}

/// On a full disk, a `mps start` whose `daemon_verified_live` could not be committed exited 3
/// but left its daemon running, recorded as started: a script told the start failed had a
/// daemon it did not know of. Now the daemon is stopped, the error says so and names the full
/// disk, and once there is space the next command cleans the unfinished record.
#[test]
fn a_start_the_log_cannot_record_live_stops_its_daemon() {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let Some(disk) = SmallDisk::mount(16 << 20) else {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    };
    let host = Host::two_gpus();
    let state = disk.path().join("state");
    let filler = disk.path().join("filler");
    let logs = host.root.root().join("mps-logs");
    let unilab = || {
        let mut cmd = assert_cmd::Command::new(unilab_bin());
        cmd.env_clear()
            .env("PATH", path_with_fixtures())
            .env("HOME", host.root.root())
            .env("FAKE_NVIDIA_SMI_GPUS", &host.gpus)
            .env("XDG_RUNTIME_DIR", host.runtime())
            .env("UNILAB_TOOL_TIMEOUT", "5")
            .env("FAKE_MPS_FILL_WHEN_ASKED", &filler)
            .arg("--root")
            .arg(&state);
        cmd
    };
    let out = unilab()
        .args(["mps", "start", "0", "--log-dir"])
        .arg(&logs)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(
        said.contains("answered, but the log could not record it"),
        "{said}"
    );
    assert!(said.contains("so nothing is left running"), "{said}");
    assert!(
        said.contains("no space left on the device holding"),
        "{said}"
    );
    let pid: u64 = said
        .split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {said}"));
    assert!(gone(pid), "the daemon the log could not record was stopped");

    // Space again: the unfinished start is cleaned, a new start records its daemon live.
    std::fs::remove_file(&filler).unwrap();
    let started = unilab()
        .args(["--json", "mps", "start", "0", "--log-dir"])
        .arg(&logs)
        .output()
        .unwrap();
    assert_eq!(
        started.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let kinds = history_kinds(unilab(), &["--daemon", "gpu-1111aaaa"]);
    assert!(
        kinds.contains(&"daemon_stale_cleaned".to_string()),
        "{kinds:?}"
    );
    assert_eq!(kinds.last().unwrap(), "daemon_verified_live", "{kinds:?}");
    unilab().args(["mps", "stop", "--all"]).assert().success();
    unilab().args(["log", "verify"]).assert().success();
}
