//! `unilab mps ...` end to end: the real binary, the fake `nvidia-smi` and the fake
//! `nvidia-cuda-mps-control` (which daemonizes like NVIDIA's), and real processes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use predicates::prelude::*;
use serde_json::Value;
use unilab::LogReader;
use unilab::{Event, StoredEvent, Subject};

const GPU_A: &str = "GPU-1111aaaa-0000-4000-8000-000000000001";
const GPU_B: &str = "GPU-2222bbbb-0000-4000-8000-000000000002";

/// A host with two fake GPUs, a private runtime directory for pipe directories, and cleanup of
/// every fake daemon the test left running.
struct Host {
    root: TestRoot,
    gpus: String,
}

impl Host {
    fn two_gpus() -> Self {
        let root = TestRoot::new();
        std::fs::create_dir(root.root().join("run")).unwrap();
        std::fs::set_permissions(
            root.root().join("run"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        Host {
            root,
            gpus: format!("{GPU_A}|NVIDIA H200|143771|0|0;{GPU_B}|NVIDIA H200|143771|0|0"),
        }
    }

    fn runtime(&self) -> PathBuf {
        self.root.root().join("run")
    }

    fn unilab(&self) -> assert_cmd::Command {
        let mut cmd = self.root.unilab();
        cmd.env("FAKE_NVIDIA_SMI_GPUS", &self.gpus)
            .env("XDG_RUNTIME_DIR", self.runtime())
            .env("UNILAB_TOOL_TIMEOUT", "5");
        cmd
    }

    fn json(&self, args: &[&str]) -> Value {
        self.json_with(&[], args)
    }

    /// `unilab` as [`Host::unilab`] sets it up, as a `std` command, to spawn and kill.
    fn command(&self) -> Command {
        let mut cmd = Command::new(unilab_bin());
        cmd.env_clear()
            .env("PATH", path_with_fixtures())
            .env("HOME", self.root.root())
            .env("LANG", "C.UTF-8")
            .env("FAKE_NVIDIA_SMI_GPUS", &self.gpus)
            .env("XDG_RUNTIME_DIR", self.runtime())
            .env("UNILAB_TOOL_TIMEOUT", "5")
            .arg("--root")
            .arg(self.root.root());
        cmd
    }

    /// `--json ARGS` with extra environment, which must succeed; its output parsed.
    fn json_with(&self, env: &[(&str, &str)], args: &[&str]) -> Value {
        let out = self
            .unilab()
            .envs(env.iter().copied())
            .arg("--json")
            .args(args)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out)))
    }

    fn start(&self, args: &[&str]) -> Value {
        let mut all = vec!["mps", "start"];
        all.extend_from_slice(args);
        self.json(&all)
    }

    /// `mps stop --all`, as an epilog runs it after round `round`: success, or a stale record
    /// cleaned (4).
    fn stop_all(&self, round: impl std::fmt::Display) {
        let code = self
            .unilab()
            .args(["mps", "stop", "--all"])
            .output()
            .unwrap()
            .status
            .code();
        assert!(
            matches!(code, Some(0 | 4)),
            "round {round}: `mps stop --all` exited {code:?}"
        );
    }

    fn kinds(&self, daemon: &str) -> Vec<String> {
        history_kinds(self.unilab(), &["--daemon", daemon])
    }

    /// [`Host::kinds`] for a daemon that may have nothing recorded yet (`history --daemon`
    /// refuses an unknown name with exit 3): none then.
    fn kinds_so_far(&self, daemon: &str) -> Vec<String> {
        let out = self
            .unilab()
            .args(["--json", "history", "--daemon", daemon])
            .output()
            .unwrap();
        match out.status.code() {
            Some(3) => Vec::new(),
            _ => history_kinds(self.unilab(), &["--daemon", daemon]),
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // Stop any fake daemon a failing test left behind: they are this test's own.
        let mut pid_files = Vec::new();
        for dir in [
            self.runtime().join("unilab/mps"),
            self.root.root().join("pipes"),
        ] {
            if let Ok(entries) = std::fs::read_dir(dir) {
                pid_files.extend(
                    entries
                        .flatten()
                        .map(|e| e.path().join("nvidia-cuda-mps-control.pid")),
                );
            }
        }
        for pid_file in pid_files {
            if let Some(pid) = std::fs::read_to_string(pid_file)
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok())
            {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::SIGKILL,
                );
            }
        }
    }
}

/// Whether `pid` is gone (or only a zombie), waiting up to 5 s.
fn gone(pid: u64) -> bool {
    within(Duration::from_secs(5), || exited(pid))
}

fn alive(pid: u64) -> bool {
    !exited(pid)
}

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
fn two_visible_gpus_need_a_selector() {
    let host = Host::two_gpus();
    host.unilab()
        .args(["mps", "start"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(
            "2 GPUs are visible, so a selector is needed",
        ))
        .stderr(predicate::str::contains(GPU_A))
        .stderr(predicate::str::contains(GPU_B))
        .stderr(predicate::str::contains("hint: pass one"));
    assert!(
        !host.root.log_path().exists(),
        "a refused start records nothing"
    );
}

#[test]
fn every_selector_form_resolves_through_doctor() {
    let host = Host::two_gpus();
    let selector = |sel: &str, mask: Option<&str>| -> Value {
        let mut cmd = host.unilab();
        if let Some(mask) = mask {
            cmd.env("CUDA_VISIBLE_DEVICES", mask);
        }
        let out = cmd
            .args(["--json", "mps", "doctor", sel])
            .assert()
            .get_output()
            .stdout
            .clone();
        let report: Value = serde_json::from_slice(&out).unwrap();
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "selector")
            .cloned()
            .unwrap()
    };
    assert!(
        selector("1", None)["detail"]
            .as_str()
            .unwrap()
            .contains(GPU_B)
    );
    assert!(
        selector("GPU-1111", None)["detail"]
            .as_str()
            .unwrap()
            .contains(GPU_A)
    );
    // Under a mask, ordinals follow the mask's order.
    assert!(
        selector("0", Some("1,0"))["detail"]
            .as_str()
            .unwrap()
            .contains(GPU_B)
    );
    assert!(
        selector("0", Some(GPU_B))["detail"]
            .as_str()
            .unwrap()
            .contains(GPU_B)
    );
    assert!(
        selector("1", Some("1"))["detail"]
            .as_str()
            .unwrap()
            .contains("GPU 1 is not visible")
    );
    // The mask stops at its first invalid entry.
    assert!(
        selector("1", Some("0,GPU-ffff,1"))["detail"]
            .as_str()
            .unwrap()
            .contains("not visible")
    );
    assert!(
        selector("all", Some(""))["detail"]
            .as_str()
            .unwrap()
            .contains("no GPU is visible")
    );
    assert_eq!(selector("all", Some("0"))["status"], "ok");
    for (sel, mode) in [
        ("0,1", "single_task_multi_gpu"),
        ("each:0,1", "task_per_gpu"),
        ("all", "single_task_multi_gpu"),
    ] {
        let check = selector(sel, None);
        assert_eq!(check["status"], "fail", "{sel}");
        assert!(
            check["detail"].as_str().unwrap().contains(mode),
            "{sel}: {check}"
        );
    }
    assert!(
        selector("GPU-12", None)["detail"]
            .as_str()
            .unwrap()
            .contains("at least 4 hex digits")
    );
    assert!(
        selector("GPU-9999", None)["detail"]
            .as_str()
            .unwrap()
            .contains("no visible GPU matches")
    );

    let mask_check = {
        let report = host.json_with(
            &[("CUDA_VISIBLE_DEVICES", "0,7,1")],
            &["mps", "doctor", "0"],
        );
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "visibility mask")
            .cloned()
            .unwrap()
    };
    assert_eq!(mask_check["status"], "warn");
    assert!(
        mask_check["detail"]
            .as_str()
            .unwrap()
            .contains("stops at `7`")
    );
}

#[test]
fn multi_gpu_modes_and_mig_are_refused_by_start() {
    let host = Host::two_gpus();
    for (sel, mode) in [
        ("0,1", "single_task_multi_gpu"),
        ("each:0,1", "task_per_gpu"),
        ("all", "single_task_multi_gpu"),
    ] {
        host.unilab()
            .args(["mps", "start", sel])
            .assert()
            .code(3)
            .stderr(predicate::str::contains(format!("resolves to {mode}")))
            .stderr(predicate::str::contains(
                "only single_gpu can start an MPS daemon",
            ));
    }
    host.unilab()
        .args(["mps", "start", "MIG-GPU-1111aaaa/1/0"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("is a MIG device"));
    host.unilab()
        .env("CUDA_VISIBLE_DEVICES", "MIG-1111aaaa")
        .args(["mps", "start", "0"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("names the MIG device"));
    assert!(!host.root.log_path().exists());
}

#[test]
fn a_second_start_is_refused_while_the_first_runs() {
    let host = Host::two_gpus();
    let first = host.start(&["0"]);
    host.unilab()
        .args(["mps", "start", "0"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("already serves"));
    // Another name on the same GPU is refused too.
    host.unilab()
        .args(["mps", "start", "0", "--name", "other"])
        .assert()
        .code(3);
    host.unilab().args(["mps", "stop"]).assert().success();
    assert!(gone(first["pid"].as_u64().unwrap()));
}

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
    host.unilab()
        .args(["mps", "env"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("is not running: process_gone"));
    host.unilab()
        .args(["mps", "stop"])
        .assert()
        .code(4)
        .stderr(predicate::str::contains(
            "its record was cleaned and nothing was signalled",
        ));
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

/// Starts a fake daemon unilab knows nothing about, in `pipe`.
fn foreign_daemon(pipe: &Path) -> u64 {
    let status = Command::new(fixtures_dir().join("nvidia-cuda-mps-control"))
        .arg("-d")
        .env("CUDA_MPS_PIPE_DIRECTORY", pipe)
        .env("CUDA_MPS_LOG_DIRECTORY", pipe.join("../foreign-log"))
        .status()
        .unwrap();
    assert!(status.success());
    let pid_file = pipe.join("nvidia-cuda-mps-control.pid");
    eventually(
        "the foreign daemon's pid file",
        Duration::from_secs(5),
        || pid_file.exists(),
    );
    std::fs::read_to_string(pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_foreign_daemon_in_the_pipe_directory_is_refused_and_untouched() {
    let host = Host::two_gpus();
    let pipes = host.root.root().join("pipes");
    private_dir_all(&pipes);
    let pipe = pipes.join("shared");
    std::fs::create_dir(&pipe).unwrap();
    std::fs::set_permissions(&pipe, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let foreign = foreign_daemon(&pipe);
    host.unilab()
        .args(["mps", "start", "0", "--pipe-dir"])
        .arg(&pipe)
        .assert()
        .code(3)
        .stderr(predicate::str::contains(
            "that unilab did not start answers in",
        ))
        .stderr(predicate::str::contains(
            "never touches a daemon it cannot prove it started",
        ));
    host.unilab()
        .args(["mps", "stop", "--all"])
        .assert()
        .success();
    assert!(alive(foreign), "the foreign daemon was left alone");
    assert!(pipe.join("control").exists());
    // status shows the foreign socket, owned by none of this user's records.
    let pipe_env = pipe.display().to_string();
    let status = host.json_with(
        &[("CUDA_MPS_PIPE_DIRECTORY", &pipe_env)],
        &["mps", "status"],
    );
    let listed = status["control_pipes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == pipe.join("control").display().to_string())
        .cloned()
        .expect("the foreign pipe is listed");
    assert_eq!(listed["managed_names"], serde_json::json!([]));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(foreign as i32),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
}

#[test]
fn unsafe_pipe_directories_are_refused() {
    let host = Host::two_gpus();
    let target = tempfile::tempdir().unwrap();
    let link = host.root.root().join("link");
    std::os::unix::fs::symlink(target.path(), &link).unwrap();
    host.unilab()
        .args(["mps", "start", "0", "--pipe-dir"])
        .arg(&link)
        .assert()
        .code(3)
        .stderr(predicate::str::contains("it is a symbolic link"));
    let open = host.root.root().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    host.unilab()
        .args(["mps", "start", "0", "--pipe-dir"])
        .arg(&open)
        .assert()
        .code(3)
        .stderr(predicate::str::contains("others can write to it"));
    let long = host.root.root().join("p".repeat(110));
    host.unilab()
        .args(["mps", "start", "0", "--pipe-dir"])
        .arg(&long)
        .assert()
        .code(3)
        .stderr(predicate::str::contains("UNIX sockets allow at most 107"));
    assert!(!long.exists(), "nothing is created before the length check");
    assert!(!host.root.log_path().exists());
}

#[test]
fn a_foreign_owned_pipe_directory_is_refused() {
    if !is_root() {
        eprintln!("skipped: needs root to give a directory to another user");
        return;
    }
    let host = Host::two_gpus();
    let theirs = host.root.root().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::set_permissions(&theirs, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    host.unilab()
        .args(["mps", "start", "0", "--pipe-dir"])
        .arg(&theirs)
        .assert()
        .code(3)
        .stderr(predicate::str::contains("it belongs to uid 65534"));
}

#[test]
fn nvidia_smi_missing_hung_or_garbled_gives_clear_errors_in_time() {
    let host = Host::two_gpus();
    host.unilab()
        .env(
            "UNILAB_NVIDIA_SMI",
            host.root.root().join("no-such-nvidia-smi"),
        )
        .args(["mps", "start"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(format!(
            "`{}` was not found",
            host.root.root().join("no-such-nvidia-smi").display()
        )))
        .stderr(predicate::str::contains("hint: `UNILAB_NVIDIA_SMI` names"));
    // Searched on a PATH that has none: the hint is to install it.
    host.unilab()
        .env("PATH", host.root.root().join("no-bin"))
        .args(["mps", "start"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("`nvidia-smi` was not found"))
        .stderr(predicate::str::contains(
            "hint: install the NVIDIA driver utilities",
        ));
    let started = Instant::now();
    host.unilab()
        .env("FAKE_NVIDIA_SMI_MODE", "hang")
        .env("UNILAB_TOOL_TIMEOUT", "1")
        .args(["mps", "start"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("did not answer within 1 s"));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the timeout held"
    );
    host.unilab()
        .env("FAKE_NVIDIA_SMI_MODE", "garbage")
        .args(["mps", "start"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(
            "printed no GPU list that unilab can read",
        ));
    for (mode, says) in [
        ("no-driver", "cannot communicate with the NVIDIA driver"),
        ("no-devices", "found no GPUs"),
        ("mismatch", "version mismatch"),
    ] {
        host.unilab()
            .env("FAKE_NVIDIA_SMI_MODE", mode)
            .args(["mps", "start"])
            .assert()
            .code(3)
            .stderr(predicate::str::contains(says));
    }
    // status still answers, with the diagnostic.
    let status = host.json_with(&[("FAKE_NVIDIA_SMI_MODE", "no-driver")], &["mps", "status"]);
    assert!(
        status["diagnostic"]
            .as_str()
            .unwrap()
            .contains("NVIDIA driver")
    );
    assert_eq!(status["gpus"].as_array().unwrap().len(), 0);
    // doctor fails its first check and says why.
    host.unilab()
        .env("FAKE_NVIDIA_SMI_MODE", "no-driver")
        .args(["mps", "doctor"])
        .assert()
        .code(3)
        .stdout(predicate::str::contains("[FAIL] nvidia-smi"));
}

#[test]
fn stop_all_stops_two_daemons() {
    let host = Host::two_gpus();
    let a = host.start(&["0"]);
    let b = host.start(&["GPU-2222"]);
    host.unilab()
        .args(["mps", "stop"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("several daemons are recorded"));
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
fn records_of_another_uid_or_host_are_never_listed_or_stopped() {
    let host = Host::two_gpus();
    // A daemon record that names this very test process, but for another uid and another host.
    let me = std::process::id();
    let ticks = proc_stat(me).unwrap().start_ticks;
    let log = host.root.log();
    let (subject, event) = every_event_kind().swap_remove(1);
    let StoredEvent::DaemonStarted {
        mut record,
        foreground,
        ..
    } = event
    else {
        unreachable!()
    };
    record.pid = me;
    record.process_start_ticks = ticks;
    for (name, uid, hostname) in [
        (
            "other-uid",
            host.root.scope().uid + 1,
            host.root.scope().host,
        ),
        ("other-host", host.root.scope().uid, "elsewhere".to_string()),
    ] {
        let mut r = record.clone();
        r.name = name.into();
        r.uid = uid;
        r.host = hostname;
        log.append(
            Subject::Daemon(name.into()),
            Event::DaemonStarted {
                record: r,
                foreground,
                job: None,
                limits: Default::default(),
            },
        )
        .unwrap();
    }
    drop(subject);
    assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
    assert!(
        host.json(&["mps", "status"])["managed_daemons"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    host.unilab()
        .args(["mps", "stop", "other-uid"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("no daemon named `other-uid`"));
    host.unilab()
        .args(["mps", "stop", "--all"])
        .assert()
        .success();
    // Still here: nothing signalled this process.
    let snapshot = LogReader::open(&host.root.log_path(), &host.root.scope())
        .unwrap()
        .unwrap()
        .snapshot()
        .unwrap();
    assert_eq!(
        unilab::Daemons::rows(&snapshot).unwrap().len(),
        2,
        "foreign records are not cleaned either"
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
    host.unilab()
        .args(["mps", "env"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("no MPS daemon is recorded"));
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

/// Starts `sleep 60` with exactly `pid`, by setting the kernel's last pid just below it.
fn process_with_pid(pid: u64) -> Option<std::process::Child> {
    for _ in 0..200 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).ok()?;
        let child = Command::new("sleep").arg("60").spawn().ok()?;
        if u64::from(child.id()) == pid {
            return Some(child);
        }
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
    }
    None
}

#[test]
fn a_pid_reused_by_another_process_is_never_signalled() {
    if !is_root() {
        eprintln!("skipped: forcing pid reuse through /proc/sys/kernel/ns_last_pid needs root");
        return;
    }
    let host = Host::two_gpus();
    let record = host.start(&["0"]);
    let pid = record["pid"].as_u64().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    // The pid is free only once the zombie is reaped, not merely dead.
    eventually(
        &format!("pid {pid} to be reaped"),
        Duration::from_secs(10),
        || proc_stat(pid).is_none(),
    );
    let Some(mut impostor) = process_with_pid(pid) else {
        eprintln!("skipped: the kernel would not hand out pid {pid} again");
        return;
    };
    assert_eq!(host.json(&["mps", "list"])[0]["state"], "pid_reused");
    host.unilab()
        .args(["mps", "stop", "--grace", "0.2"])
        .assert()
        .code(4)
        .stderr(predicate::str::contains("pid_reused"));
    assert!(
        impostor.try_wait().unwrap().is_none(),
        "the process that reused the pid was not signalled"
    );
    assert_eq!(
        host.kinds("gpu-1111aaaa").last().unwrap(),
        "daemon_stale_cleaned"
    );
    impostor.kill().unwrap();
    impostor.wait().unwrap();
}

#[test]
fn a_daemon_that_does_not_answer_is_stopped_and_the_start_recorded_as_failed() {
    let host = Host::two_gpus();
    host.unilab()
        .env("FAKE_MPS_GARBLED", "1")
        .args(["mps", "start", "0"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(
            "did not start: it did not answer on its control socket",
        ));
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

/// `mps plan --json` for `selector` under `mask` (unset when `None`), with its exit code.
fn plan(host: &Host, selector: Option<&str>, mask: Option<&str>) -> (i32, Value) {
    let mut cmd = host.unilab();
    if let Some(mask) = mask {
        cmd.env("CUDA_VISIBLE_DEVICES", mask);
    }
    let out = cmd
        .args(["--json", "mps", "plan"])
        .args(selector)
        .assert()
        .get_output()
        .clone();
    let code = out.status.code().unwrap();
    let value = if code == 0 {
        serde_json::from_slice(&out.stdout).unwrap()
    } else {
        Value::String(String::from_utf8_lossy(&out.stderr).into_owned())
    };
    (code, value)
}

fn uuids(plan: &Value) -> Vec<&str> {
    plan["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["uuid"].as_str().unwrap())
        .collect()
}

#[test]
fn plan_gives_the_topology_plan_for_every_selector_form_and_mask() {
    let host = Host::two_gpus();
    // (selector, mask, mode, GPUs in order, whether a daemon can start)
    for (selector, mask, mode, gpus, can_start) in [
        (Some("1"), None, "single_gpu", vec![GPU_B], true),
        (Some("GPU-1111"), None, "single_gpu", vec![GPU_A], true),
        (Some(GPU_B), None, "single_gpu", vec![GPU_B], true),
        // Ordinals follow the mask's order; the mask may name GPUs by UUID.
        (Some("0"), Some("1,0"), "single_gpu", vec![GPU_B], true),
        (Some("0"), Some(GPU_B), "single_gpu", vec![GPU_B], true),
        (None, Some("1"), "single_gpu", vec![GPU_B], true),
        // The mask stops at its first invalid entry, keeping what came before.
        (
            Some("all"),
            Some("0,GPU-ffff,1"),
            "single_gpu",
            vec![GPU_A],
            true,
        ),
        (
            Some("0,1"),
            None,
            "single_task_multi_gpu",
            vec![GPU_A, GPU_B],
            false,
        ),
        (
            Some("1,0"),
            None,
            "single_task_multi_gpu",
            vec![GPU_B, GPU_A],
            false,
        ),
        (
            Some("each:0,1"),
            None,
            "task_per_gpu",
            vec![GPU_A, GPU_B],
            false,
        ),
        (
            Some("all"),
            None,
            "single_task_multi_gpu",
            vec![GPU_A, GPU_B],
            false,
        ),
        (Some("all"), Some("0"), "single_gpu", vec![GPU_A], true),
    ] {
        let (code, plan) = plan(&host, selector, mask);
        let case = format!("{selector:?} under {mask:?}: {plan}");
        assert_eq!(code, 0, "{case}");
        assert_eq!(plan["selector"], selector.unwrap_or(""), "{case}");
        assert_eq!(plan["topology_mode"], mode, "{case}");
        assert_eq!(uuids(&plan), gpus, "{case}");
        assert_eq!(plan["can_start"], can_start, "{case}");
        assert_eq!(plan["cannot_start"].is_null(), can_start, "{case}");
        assert_eq!(
            plan["cuda_visible_devices"],
            mask.map_or(Value::Null, Value::from),
            "{case}"
        );
        if !can_start {
            assert!(
                plan["cannot_start"]
                    .as_str()
                    .unwrap()
                    .contains("only single_gpu can start"),
                "{case}"
            );
        }
    }
    let (_, stopped) = plan(&host, Some("all"), Some("0,GPU-ffff,1"));
    assert_eq!(stopped["mask_stopped_at"]["entry"], "GPU-ffff");

    // No selector with two GPUs: not an error; a single-GPU choice for each, by UUID.
    let (code, ambiguous) = plan(&host, None, None);
    assert_eq!(code, 0);
    assert_eq!(ambiguous["topology_mode"], Value::Null);
    assert_eq!(ambiguous["can_start"], false);
    let choices = ambiguous["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2);
    assert_eq!(choices[1]["selector"], GPU_B);
    assert_eq!(choices[1]["topology_mode"], "single_gpu");
    assert_eq!(uuids(&choices[1]), [GPU_B]);

    // Selectors that name no GPU are refused, saying why.
    for (selector, mask, says) in [
        ("1", Some("1"), "GPU 1 is not visible"),
        ("all", Some(""), "no GPU is visible"),
        ("GPU-12", None, "at least 4 hex digits"),
        ("GPU-9999", None, "no visible GPU matches"),
        ("0,0", None, "names GPU"),
        ("MIG-GPU-1111aaaa/1/0", None, "is a MIG device"),
        ("0", Some("MIG-1111aaaa"), "names the MIG device"),
    ] {
        let (code, stderr) = plan(&host, Some(selector), mask);
        assert_eq!(code, 3, "{selector} under {mask:?}");
        assert!(
            stderr.as_str().unwrap().contains(says),
            "{selector}: {stderr}"
        );
    }

    // The text form says the same, and doctor carries the same object under `plan`.
    host.unilab()
        .args(["mps", "plan", "0,1"])
        .assert()
        .success()
        .stdout(predicate::str::contains("mode: single_task_multi_gpu"))
        .stdout(predicate::str::contains(GPU_B))
        .stdout(predicate::str::contains("start: no:"));
    let (_, planned) = plan(&host, Some("GPU-2222"), None);
    assert_eq!(host.json(&["mps", "doctor", "GPU-2222"])["plan"], planned);
    assert!(!host.root.log_path().exists(), "plan records nothing");
}

/// `mps doctor --json` with extra environment: its exit code and its report.
fn doctor(host: &Host, env: &[(&str, &str)], selector: Option<&str>) -> (i32, Value) {
    let out = host
        .unilab()
        .envs(env.iter().copied())
        .args(["--json", "mps", "doctor"])
        .args(selector)
        .assert()
        .get_output()
        .clone();
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap(), report)
}

/// The status of each check by name, in order.
fn statuses(report: &Value) -> Vec<(String, String)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn status_of(report: &Value, name: &str) -> Option<String> {
    statuses(report)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, s)| s)
}

fn detail_of(report: &Value, name: &str) -> String {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .map(|c| c["detail"].as_str().unwrap().to_owned())
        .unwrap_or_default()
}

#[test]
fn doctor_runs_every_check_and_files_each_finding_under_its_own() {
    let host = Host::two_gpus();
    // Without nvidia-smi the checks that do not need it still run.
    let missing = host.root.root().join("no-such-nvidia-smi");
    let (code, report) = doctor(
        &host,
        &[("UNILAB_NVIDIA_SMI", missing.to_str().unwrap())],
        None,
    );
    assert_eq!(code, 3);
    assert_eq!(
        statuses(&report),
        [
            ("nvidia-smi", "fail"),
            ("control tool", "ok"),
            ("visibility mask", "skip"),
            ("selector", "skip"),
            ("daemon", "skip"),
            ("pipe directory", "ok"),
            ("log directory", "ok"),
        ]
        .map(|(n, s)| (n.to_owned(), s.to_owned()))
    );
    assert!(detail_of(&report, "nvidia-smi").contains(missing.to_str().unwrap()));
    assert_eq!(report["plan"], Value::Null);

    // Two GPUs and no selector: nothing is wrong; the plan shows each GPU, exit 0.
    let (code, report) = doctor(&host, &[], None);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["ok"], true);
    assert_eq!(status_of(&report, "selector").unwrap(), "ok");
    assert!(detail_of(&report, "selector").contains("needs a selector"));
    assert_eq!(report["plan"]["choices"].as_array().unwrap().len(), 2);

    // A socket path that is too long is the pipe directory's finding, not the selector's.
    let long = host.root.root().join("r".repeat(90));
    std::fs::create_dir(&long).unwrap();
    std::fs::set_permissions(&long, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let (code, report) = doctor(
        &host,
        &[("XDG_RUNTIME_DIR", long.to_str().unwrap())],
        Some("GPU-1111"),
    );
    assert_eq!(code, 3);
    assert_eq!(status_of(&report, "selector").unwrap(), "ok");
    assert_eq!(status_of(&report, "pipe directory").unwrap(), "fail");
    assert!(detail_of(&report, "pipe directory").contains("at most 107"));
    // `start` refuses it the same way, through the same check.
    host.unilab()
        .env("XDG_RUNTIME_DIR", &long)
        .args(["mps", "start", "GPU-1111"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("at most 107"));

    // A MIG mask is the mask's finding; nvidia-smi itself is fine.
    let (code, report) = doctor(
        &host,
        &[("CUDA_VISIBLE_DEVICES", "MIG-1111aaaa")],
        Some("0"),
    );
    assert_eq!(code, 3);
    assert_eq!(status_of(&report, "nvidia-smi").unwrap(), "ok");
    assert_eq!(status_of(&report, "visibility mask").unwrap(), "fail");
    assert!(detail_of(&report, "visibility mask").contains("MIG"));

    // The device order matters only where GPUs are named by ordinal.
    let (_, by_uuid) = doctor(&host, &[], Some("GPU-2222"));
    assert_eq!(status_of(&by_uuid, "device order"), None);
    let (_, by_uuid_mask) = doctor(&host, &[("CUDA_VISIBLE_DEVICES", GPU_B)], None);
    assert_eq!(status_of(&by_uuid_mask, "device order"), None);
    let (_, by_ordinal) = doctor(&host, &[], Some("1"));
    assert_eq!(status_of(&by_ordinal, "device order").unwrap(), "warn");
    let (_, by_mask_index) = doctor(&host, &[("CUDA_VISIBLE_DEVICES", "1")], None);
    assert_eq!(status_of(&by_mask_index, "device order").unwrap(), "warn");
    let (_, pci) = doctor(&host, &[("CUDA_DEVICE_ORDER", "PCI_BUS_ID")], Some("1"));
    assert_eq!(status_of(&pci, "device order"), None);
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

#[test]
fn env_and_exec_take_any_selector_that_names_one_gpu() {
    let host = Host::two_gpus();
    let b = host.start(&["1"]);
    for selector in ["1", "GPU-2222", GPU_B] {
        let env = host.json(&["mps", "env", "--gpu", selector]);
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], GPU_B, "{selector}");
    }
    host.unilab()
        .args(["mps", "env", "--gpu", "0"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(format!(
            "no live daemon serves {GPU_A}"
        )));
    host.unilab()
        .args(["mps", "env", "--gpu", "0,1"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("selects 2 GPUs"));
    host.unilab()
        .args(["mps", "exec", "--gpu", "1", "--", "true"])
        .assert()
        .success();
    host.unilab().args(["mps", "stop"]).assert().success();
    assert!(gone(b["pid"].as_u64().unwrap()));
}

#[test]
fn exit_codes_follow_conventions() {
    let host = Host::two_gpus();
    // A bad name is a usage error, before anything is resolved or recorded.
    host.unilab()
        .args(["mps", "start", "0", "--name", "a b"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is not a valid daemon name"));
    let a = host.start(&["0"]);
    // exec: 127 when the command is not found, 126 when it cannot be run, as env and sudo.
    host.unilab()
        .args(["mps", "exec", "--", "/nonexistent/command"])
        .assert()
        .code(127)
        .stderr(predicate::str::contains(
            "cannot run `/nonexistent/command`",
        ));
    let not_executable = host.root.root().join("not-executable");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").unwrap();
    host.unilab()
        .arg("mps")
        .arg("exec")
        .arg("--")
        .arg(&not_executable)
        .assert()
        .code(126);
    // Stale records: `stop NAME` and `stop --all` both clean them and exit 4.
    let b = host.start(&["1"]);
    for pid in [a["pid"].as_u64().unwrap(), b["pid"].as_u64().unwrap()] {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::SIGKILL,
        )
        .unwrap();
        assert!(gone(pid));
    }
    host.unilab()
        .args(["mps", "stop", "gpu-1111aaaa"])
        .assert()
        .code(4);
    host.unilab()
        .args(["mps", "stop", "--all"])
        .assert()
        .code(4)
        .stderr(predicate::str::contains(
            "`gpu-2222bbbb` was no longer running",
        ));
    assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
}

/// A runtime directory of the user's own but open to everyone (0777, not sticky): another user
/// could replace the pipe tree inside it. Every level up to the pipe directory is checked.
#[test]
fn a_runtime_directory_others_can_write_is_refused() {
    let host = Host::two_gpus();
    std::fs::set_permissions(
        host.runtime(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    host.unilab()
        .args(["mps", "start", "0"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(format!(
            "refusing the directory `{}`: others can write to it and it is not sticky",
            host.runtime().display()
        )));
    let (code, report) = doctor(&host, &[], Some("0"));
    assert_eq!(code, 3);
    assert_eq!(status_of(&report, "pipe directory").unwrap(), "fail");
    assert!(!host.root.log_path().exists(), "nothing was recorded");
}

/// The fake daemons answering for `pipe`: processes whose environment names it and whose
/// command line runs the fake control tool. What "one daemon" is counted by.
fn daemons_for(pipe: &Path) -> Vec<u32> {
    let wanted = format!("CUDA_MPS_PIPE_DIRECTORY={}", pipe.display()).into_bytes();
    live_pids_where(|pid| {
        let read = |file: &str| std::fs::read(format!("/proc/{pid}/{file}")).unwrap_or_default();
        let cmdline = read("cmdline");
        read("environ")
            .split(|b| *b == 0)
            .any(|entry| entry == wanted.as_slice())
            && String::from_utf8_lossy(&cmdline).contains("nvidia-cuda-mps-control")
    })
}

/// `n` copies of `unilab ARGS` started at once; their exit codes.
fn at_once(host: &Host, n: usize, args: impl Fn(usize) -> Vec<String>) -> Vec<i32> {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
    let runs: Vec<_> = (0..n)
        .map(|i| {
            let mut cmd = host.command();
            cmd.args(args(i))
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let barrier = std::sync::Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                cmd.status().unwrap().code().unwrap_or(-1)
            })
        })
        .collect();
    runs.into_iter().map(|r| r.join().unwrap()).collect()
}

/// `rounds` of `n` concurrent starts of one name, then `n` concurrent starts of other names on
/// the same GPU, then `n` concurrent stops: each time exactly one daemon, one record, one stop.
fn starts_and_stops_race(n: usize, rounds: usize) {
    let host = Host::two_gpus();
    let pipe = host.runtime().join("unilab/mps/cc");
    for round in 0..rounds {
        let codes = at_once(&host, n, |_| {
            ["mps", "start", "0", "--name", "cc"]
                .map(String::from)
                .to_vec()
        });
        assert_eq!(
            codes.iter().filter(|c| **c == 0).count(),
            1,
            "round {round}: {codes:?}"
        );
        assert!(
            codes.iter().all(|c| *c == 0 || *c == 3),
            "round {round}: {codes:?}"
        );
        let list = host.json(&["mps", "list"]);
        assert_eq!(list.as_array().unwrap().len(), 1, "round {round}: {list}");
        assert_eq!(list[0]["live"], true, "round {round}");
        assert_eq!(
            daemons_for(&pipe).len(),
            1,
            "round {round}: one daemon runs"
        );

        // Other names, the same GPU: refused while `cc` serves it.
        let codes = at_once(&host, n, |i| {
            vec![
                "mps".into(),
                "start".into(),
                "0".into(),
                "--name".into(),
                format!("other{i}"),
            ]
        });
        assert!(codes.iter().all(|c| *c == 3), "round {round}: {codes:?}");

        let codes = at_once(&host, n, |_| {
            ["mps", "stop", "cc"].map(String::from).to_vec()
        });
        assert!(
            codes.iter().all(|c| *c == 0 || *c == 3),
            "round {round}: {codes:?}"
        );
        assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
        assert!(
            within(Duration::from_secs(5), || daemons_for(&pipe).is_empty()),
            "round {round}: the daemon is gone"
        );
    }
    let kinds = host.kinds("cc");
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    assert_eq!(count("daemon_started"), rounds);
    assert_eq!(
        count("daemon_stopped"),
        rounds,
        "one stop recorded per daemon"
    );
    host.unilab().args(["log", "verify"]).assert().success();
}

#[test]
fn concurrent_starts_and_stops_of_one_daemon_act_once() {
    starts_and_stops_race(4, 2);
}

#[test]
#[ignore = "stress: cargo test --test integration mps::stress_ -- --ignored"]
fn stress_concurrent_starts_and_stops() {
    for n in [4, 8] {
        starts_and_stops_race(n, 20);
    }
}

/// `mps start` killed at varied points, `rounds` times: after each, the next command finds what
/// the start launched and stops it; no daemon is left without a record. Returns how many rounds
/// left one before the next command ran (for the figures), after asserting that none survive.
fn start_crash_loop(rounds: u32) -> u32 {
    let host = Host::two_gpus();
    let pipe = host.runtime().join("unilab/mps/gpu-1111aaaa");
    let mut orphaned_before_settle = 0;
    for round in 0..rounds {
        let mut cmd = host.command();
        // A daemon that takes a moment to come up widens the window between launch and record.
        cmd.env("FAKE_MPS_START_DELAY", format!("0.{}", round % 4))
            .args(["mps", "start", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut start = cmd.spawn().unwrap();
        std::thread::sleep(Duration::from_millis(u64::from(round * 37 % 700)));
        let _ = start.kill();
        let _ = start.wait();
        let recorded = host.json(&["mps", "list"]).as_array().unwrap().len();
        if recorded == 0 && !daemons_for(&pipe).is_empty() {
            orphaned_before_settle += 1;
        }
        // Any start or stop settles what the killed start left, then stops what is recorded.
        host.stop_all(round);
        assert!(
            within(Duration::from_secs(5), || daemons_for(&pipe).is_empty()),
            "round {round}: a daemon outlived the settle: {:?}",
            daemons_for(&pipe)
        );
        assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
    }
    host.unilab().args(["log", "verify"]).assert().success();
    orphaned_before_settle
}

#[test]
fn a_start_killed_at_any_point_leaves_no_daemon_without_a_record() {
    start_crash_loop(8);
}

#[test]
#[ignore = "stress: cargo test --test integration mps::stress_ -- --ignored --nocapture"]
fn stress_start_crash_loop() {
    let orphaned = start_crash_loop(60);
    eprintln!(
        "60 rounds: {orphaned} kills left a daemon with no record until the next command settled it"
    );
}

/// One duration syntax everywhere: `UNILAB_TOOL_TIMEOUT=1s` is a timeout of one second (it used
/// to be ignored for the 10 s default), and a bad value names the variable.
#[test]
fn the_tool_timeout_takes_the_duration_syntax_of_the_flags() {
    let host = Host::two_gpus();
    let started = Instant::now();
    host.unilab()
        .env("FAKE_NVIDIA_SMI_MODE", "hang")
        .env("UNILAB_TOOL_TIMEOUT", "1s")
        .args(["mps", "start", "0"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("did not answer within 1 s"));
    assert!(started.elapsed() < Duration::from_secs(8));
    host.unilab()
        .env("UNILAB_TOOL_TIMEOUT", "soon")
        .args(["mps", "status"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "`UNILAB_TOOL_TIMEOUT` is not usable",
        ));
}

/// The client `mps exec --shared` runs in the tests: it writes the pipe directory it was given
/// and the daemon pid it finds live there to `<dir>/<i>`, then sleeps `seconds`.
fn shared_client(dir: &Path, i: usize, seconds: &str) -> Vec<String> {
    let script = format!(
        "p=$(cat \"$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid\") && kill -0 \"$p\" \
         && echo \"$CUDA_MPS_PIPE_DIRECTORY $p $$\" > {}/{i} && exec sleep {seconds}",
        dir.display()
    );
    ["mps", "exec", "--shared", "0", "--", "sh", "-c", &script]
        .map(String::from)
        .to_vec()
}

/// What the clients saw: (pipe directory, daemon pid) of each.
fn seen_by_clients(dir: &Path, n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            let text = std::fs::read_to_string(dir.join(i.to_string())).unwrap_or_default();
            let mut words = text.split_whitespace().map(str::to_owned);
            (
                words.next().unwrap_or_default(),
                words.next().unwrap_or_default(),
            )
        })
        .collect()
}

/// Eight `mps exec --shared` at once on one GPU: the fake is asked to start exactly one daemon,
/// every client sees the same pipe directory with that daemon live in it, and the last one out
/// stops it; the history shows one start, eight leases and their ends, one stop.
#[test]
fn concurrent_shared_runs_start_one_daemon_and_the_last_stops_it() {
    let host = Host::two_gpus();
    let seen = host.root.root().join("seen");
    std::fs::create_dir(&seen).unwrap();
    let calls = host.root.root().join("calls");
    let runs: Vec<_> = (0..8)
        .map(|i| {
            host.command()
                .env("FAKE_MPS_CALL_LOG", &calls)
                .args(shared_client(&seen, i, "0.5"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut run in runs {
        assert!(run.wait().unwrap().success());
    }
    let log = std::fs::read_to_string(&calls).unwrap();
    assert_eq!(
        log.lines().filter(|l| l.ends_with(" -d")).count(),
        1,
        "{log}"
    );
    let clients = seen_by_clients(&seen, 8);
    assert!(
        clients.iter().all(|c| c == &clients[0] && !c.0.is_empty()),
        "{clients:?}"
    );
    let pid: u64 = clients[0].1.parse().unwrap();
    assert!(gone(pid), "the last one out stopped it");
    let name = "gpu-1111aaaa";
    let kinds = host.kinds(name);
    assert_eq!(shared_daemon_life(&kinds), (1, 8, 8, 1), "{kinds:?}");
    assert!(daemons_for(&host.runtime().join("unilab/mps").join(name)).is_empty());
}

/// A client killed with SIGKILL midway keeps nothing alive: the others release its lease and
/// the last of them stops the daemon.
#[test]
fn a_shared_client_killed_midway_does_not_keep_the_daemon() {
    let host = Host::two_gpus();
    let seen = host.root.root().join("seen");
    std::fs::create_dir(&seen).unwrap();
    let mut runs: Vec<_> = (0..3)
        .map(|i| {
            let seconds = if i == 0 { "60" } else { "2" };
            host.command()
                .args(shared_client(&seen, i, seconds))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    eventually("every client to attach", Duration::from_secs(20), || {
        seen_by_clients(&seen, 3).iter().all(|c| !c.1.is_empty())
    });
    let mut victim = runs.remove(0);
    // The victim's command (its `sleep`, exec'd by the shell that wrote its pid).
    let command: i32 = std::fs::read_to_string(seen.join("0"))
        .unwrap()
        .split_whitespace()
        .nth(2)
        .unwrap()
        .parse()
        .unwrap();
    victim.kill().unwrap();
    victim.wait().unwrap();
    // Left behind by the kill, it is this test's own to end.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(command),
        nix::sys::signal::SIGKILL,
    );
    for mut run in runs {
        assert!(run.wait().unwrap().success());
    }
    let pid: u64 = seen_by_clients(&seen, 3)[1].1.parse().unwrap();
    assert!(gone(pid), "the daemon outlived its last live user");
    let kinds = host.kinds("gpu-1111aaaa");
    assert_eq!(kinds.iter().filter(|k| *k == "daemon_stopped").count(), 1);
    let history = host
        .unilab()
        .args(["history", "--daemon", "gpu-1111aaaa"])
        .output()
        .unwrap();
    let history = String::from_utf8_lossy(&history.stdout);
    assert_eq!(history.matches("holder_gone").count(), 1, "{history}");
}

/// Under Slurm each job has its own daemons: default names carry the job, one daemon a GPU in
/// each job, commands without a name pick only the job's own, and `mps stop --job` stops one
/// job's and leaves the other's.
#[test]
fn each_slurm_job_has_its_own_daemons() {
    let host = Host::two_gpus();
    let job = |id: &'static str| [("SLURM_JOB_ID", id)];
    let five = host.json_with(&job("5"), &["mps", "start", "0"]);
    let six = host.json_with(&job("6"), &["mps", "start", "0"]);
    assert_eq!(five["name"], "job5-gpu-1111aaaa");
    assert_eq!(six["name"], "job6-gpu-1111aaaa");
    assert_ne!(five["pipe_directory"], six["pipe_directory"]);
    // A second daemon for the same GPU in the same job is refused, as outside a job.
    host.unilab()
        .env("SLURM_JOB_ID", "5")
        .args(["mps", "start", "0", "--name", "another"])
        .assert()
        .code(3);
    let env = host.json_with(&job("6"), &["mps", "env"]);
    assert_eq!(env["CUDA_MPS_PIPE_DIRECTORY"], six["pipe_directory"]);
    let listed = host.json(&["mps", "list"]);
    let jobs: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["job"].as_str().unwrap())
        .collect();
    assert_eq!(jobs, ["5", "6"]);
    host.unilab()
        .args(["mps", "status"])
        .assert()
        .success()
        .stdout(predicate::str::contains("job6-gpu-1111aaaa  pid"))
        .stdout(predicate::str::contains("live  job 6  0 users"));
    host.unilab()
        .args(["mps", "stop", "--job", "5"])
        .assert()
        .success()
        .stdout(predicate::str::contains("stopped `job5-gpu-1111aaaa`"));
    assert!(gone(five["pid"].as_u64().unwrap()));
    assert!(alive(six["pid"].as_u64().unwrap()));
    // Inside job 5, there is nothing of its own left to stop without a name.
    host.unilab()
        .env("SLURM_JOB_ID", "5")
        .args(["mps", "stop"])
        .assert()
        .code(3);
    host.unilab()
        .env("SLURM_JOB_ID", "6")
        .args(["mps", "stop"])
        .assert()
        .success();
    assert!(gone(six["pid"].as_u64().unwrap()));
}

/// Whether process `pid` has a file of unilab's MPS locks open: it is waiting for the locks or
/// holds them (a command opens the lock file before it waits).
fn has_a_lock_open(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .any(|target| target.to_string_lossy().contains("/mps/locks/"))
}

/// A starter killed while another rank waited for the locks left a daemon nobody stopped: the
/// leftovers of a cut-short start were settled *before* the locks were taken, so the waiting
/// rank went ahead without settling them; its own `-d` failed ("An instance of this daemon is
/// already running") and its `daemon_start_failed` closed the dead starter's intent too. The
/// dead starter's daemon then ran unrecorded: every later `exec --shared` exited 3 and `mps stop
/// --all` found nothing to stop. Now the rank that takes the locks settles the cut start first.
#[test]
fn a_starter_killed_while_another_waits_leaves_no_daemon_nobody_stops() {
    let host = Host::two_gpus();
    let pipe = host.runtime().join("unilab/mps/gpu-1111aaaa");
    fn shared<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec!["mps", "exec", "--shared", "0", "--"];
        args.extend_from_slice(extra);
        args
    }
    // The first start's daemon takes a while to come up.
    let mut first = host
        .command()
        .env("FAKE_MPS_START_DELAY", "3")
        .args(shared(&["sleep", "1"]))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually("the first start to launch", Duration::from_secs(30), || {
        !daemons_for(&pipe).is_empty()
    });
    // The second's launcher is slow, so that the first's daemon is up before it looks.
    let second = host
        .command()
        .env("FAKE_MPS_LAUNCH_DELAY", "4")
        .args(shared(&["true"]))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually(
        "the second to wait for the locks",
        Duration::from_secs(30),
        || has_a_lock_open(second.id()),
    );
    first.kill().unwrap();
    first.wait().unwrap();
    let second = second.wait_with_output().unwrap();
    assert!(
        second.status.success(),
        "the waiting rank runs: {}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(
        within(Duration::from_secs(10), || daemons_for(&pipe).is_empty()),
        "a daemon outlived both: {:?}",
        daemons_for(&pipe)
    );
    // Nothing stands in the way of the next rank, and nothing is left to stop.
    host.unilab().args(shared(&["true"])).assert().success();
    assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
    assert!(daemons_for(&pipe).is_empty());
    let kinds = host.kinds("gpu-1111aaaa");
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    assert_eq!(
        (count("daemon_starting"), count("daemon_start_failed")),
        (3, 1),
        "the cut start settled once, the two others started: {kinds:?}"
    );
    assert_eq!(
        count("daemon_started"),
        count("daemon_stopped"),
        "{kinds:?}"
    );
    host.unilab().args(["log", "verify"]).assert().success();
}

/// A SIGKILLed starter lets go of its locks a moment before it is gone, and a rank woken by that
/// found the start still open with its starter alive: it refused ("a start is under way", exit 3)
/// although nothing would ever finish that start (seen once in 6 rounds of 12 ranks). Here the
/// moment is stretched: the intent's starter holds no lock and ends within two seconds. The
/// start waits for it, settles the start it left, and goes ahead.
#[test]
fn a_start_left_open_by_a_starter_that_is_ending_is_settled_not_refused() {
    let host = Host::two_gpus();
    let mut ending = Command::new("sleep").arg("2").spawn().unwrap();
    let starter = unilab::ProcessIdentity {
        pid: ending.id(),
        start_ticks: proc_stat(ending.id()).unwrap().start_ticks,
    };
    let pipe = host.runtime().join("unilab/mps/gpu-1111aaaa");
    let subject = || Subject::Daemon("gpu-1111aaaa".into());
    host.root
        .log()
        .append(
            subject(),
            Event::DaemonStarting {
                gpu: GPU_A.into(),
                pipe_directory: pipe.display().to_string(),
                log_directory: host.root.root().join("log").display().to_string(),
                starter,
                job: None,
            },
        )
        .unwrap();
    let started = host.json(&["mps", "start", "0"]);
    assert!(
        exited(starter.pid),
        "the start went ahead while its starter ran"
    );
    ending.wait().unwrap();
    let kinds = host.kinds("gpu-1111aaaa");
    assert_eq!(
        kinds,
        [
            "daemon_starting",
            "daemon_start_failed",
            "topology_resolved",
            "daemon_starting",
            "daemon_started",
            "daemon_verified_live"
        ],
        "{started}"
    );
    host.stop_all("after");
    host.unilab().args(["log", "verify"]).assert().success();
}

/// Rounds of `ranks` concurrent `mps exec --shared` on one GPU, a few of them SIGKILLed at
/// random moments (starters among them, mid-launch), with daemons and launchers of varied speed.
/// Each round: no two daemons ever serve at once, every rank exits 0 unless it was killed, every
/// daemon still running at the end has a record, and the epilog (`mps stop --all`) leaves none.
/// Returns how many rounds ended with a recorded daemon left for the epilog (its last holder
/// killed), for the figures.
fn shared_kill_rounds(rounds: u64, ranks: usize) -> u64 {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let host = Host::two_gpus();
    let pipe = host.runtime().join("unilab/mps/gpu-1111aaaa");
    let serving = host.root.root().join("serving");
    std::fs::create_dir(&serving).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut random = move |below: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    };
    let serving_now = |dir: &Path| -> Vec<u32> {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| !exited(*pid))
            .collect()
    };
    let mut left_for_the_epilog = 0;
    for round in 0..rounds {
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let most = std::sync::Arc::new(AtomicUsize::new(0));
        let watcher = {
            let (done, most, serving) = (done.clone(), most.clone(), serving.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    most.fetch_max(serving_now(&serving).len(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        let said = |rank: usize| host.root.root().join(format!("rank-{rank}.err"));
        let mut runs: Vec<std::process::Child> = (0..ranks)
            .map(|rank| {
                let mut cmd = host.command();
                // Twelve ranks of Python fakes at once on a loaded machine: no tool call here may
                // be judged by how fast a process starts.
                cmd.env("UNILAB_TOOL_TIMEOUT", "60")
                    .env("FAKE_MPS_SERVING_DIR", &serving)
                    .env("FAKE_MPS_START_DELAY", format!("0.{}", random(7)))
                    .env(
                        "FAKE_MPS_LAUNCH_DELAY",
                        format!("0.{}", random(2) * random(6)),
                    )
                    .args(["mps", "exec", "--shared", "0", "--", "sleep", "0.2"])
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(said(rank)).unwrap());
                cmd.spawn().unwrap()
            })
            .collect();
        let mut kills: Vec<(u64, usize)> = (0..ranks / 3)
            .map(|_| (random(1500), random(ranks as u64) as usize))
            .collect();
        kills.sort_unstable();
        let began = Instant::now();
        let mut killed = vec![false; ranks];
        for (at, rank) in kills {
            let at = Duration::from_millis(at);
            if let Some(wait) = at.checked_sub(began.elapsed()) {
                std::thread::sleep(wait);
            }
            killed[rank] |= runs[rank].kill().is_ok();
        }
        for (rank, run) in runs.iter_mut().enumerate() {
            let status = run.wait().unwrap();
            assert!(
                status.success() || killed[rank],
                "round {round}: rank {rank} exited {status:?}: {}",
                std::fs::read_to_string(said(rank)).unwrap_or_default()
            );
        }
        done.store(true, Ordering::Relaxed);
        watcher.join().unwrap();
        assert!(
            most.load(Ordering::Relaxed) <= 1,
            "round {round}: {} daemons served at once",
            most.load(Ordering::Relaxed)
        );
        let recorded: Vec<u32> = host
            .json(&["mps", "list"])
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["pid"].as_u64().unwrap() as u32)
            .collect();
        let running = serving_now(&serving);
        assert!(
            running.iter().all(|pid| recorded.contains(pid)),
            "round {round}: daemons {running:?} run, records name {recorded:?}"
        );
        left_for_the_epilog += u64::from(!running.is_empty());
        host.stop_all(round);
        assert!(
            within(Duration::from_secs(10), || serving_now(&serving).is_empty()
                && daemons_for(&pipe).is_empty()),
            "round {round}: a daemon outlived the epilog: {:?}",
            daemons_for(&pipe)
        );
        assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
    }
    host.unilab().args(["log", "verify"]).assert().success();
    left_for_the_epilog
}

#[test]
fn shared_ranks_killed_at_random_leave_no_daemon_nobody_stops() {
    shared_kill_rounds(6, 12);
}

#[test]
#[ignore = "stress: cargo test --release --test integration mps::stress_ -- --ignored --nocapture"]
fn stress_shared_ranks_killed_at_random() {
    let left = shared_kill_rounds(25, 12);
    eprintln!("25 rounds of 12 ranks: {left} left a recorded daemon for the epilog to stop");
}

/// `mps stop NAME` while that start was in progress said "no daemon named …" and the daemon
/// then ran on: the stop read the records before the start had written one. It now waits for
/// the start's locks, then stops what the start recorded.
#[test]
fn a_stop_during_the_start_waits_for_it_and_stops_the_daemon() {
    let host = Host::two_gpus();
    let start = host
        .command()
        .env("FAKE_MPS_START_DELAY", "2")
        .args(["--json", "mps", "start", "0", "--name", "slow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually("the start to be under way", Duration::from_secs(30), || {
        has_a_lock_open(start.id())
            && host
                .kinds_so_far("slow")
                .iter()
                .any(|k| k == "daemon_starting")
    });
    host.unilab()
        .args(["mps", "stop", "slow"])
        .assert()
        .success()
        .stdout(predicate::str::contains("stopped `slow`"));
    let started = start.wait_with_output().unwrap();
    assert!(started.status.success());
    let record: Value = serde_json::from_slice(&started.stdout).unwrap();
    assert!(
        gone(record["pid"].as_u64().unwrap()),
        "the daemon was stopped"
    );
    assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
}

/// An `nvidia-smi` that floods its output grew unilab without bound (`mps status` reached 2.2 GB
/// within its timeout; under a 1 GiB address-space limit it aborted on a failed allocation).
/// What is read from a tool is capped: the tool is stopped at the cap and that is its fault.
#[test]
fn an_nvidia_smi_that_floods_its_output_is_stopped_and_blamed() {
    let host = Host::two_gpus();
    for mode in ["flood", "flood-lines"] {
        let mut status = host.command();
        status
            .env("FAKE_NVIDIA_SMI_MODE", mode)
            .env("UNILAB_TOOL_TIMEOUT", "60")
            .args(["--json", "mps", "status"]);
        let out = with_address_space_limit(&status, 1 << 30).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{mode}: {out:?}");
        let status: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            status["diagnostic"]
                .as_str()
                .unwrap()
                .contains("nvidia-smi wrote more than 4 MiB"),
            "{mode}: {status}"
        );
        let mut start = host.command();
        start
            .env("FAKE_NVIDIA_SMI_MODE", mode)
            .env("UNILAB_TOOL_TIMEOUT", "60")
            .args(["mps", "start", "0"]);
        let out = with_address_space_limit(&start, 1 << 30).output().unwrap();
        assert_eq!(out.status.code(), Some(3), "{mode}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("its answer refused"),
            "{mode}: {out:?}"
        );
    }
}

/// A daemon's job was guessed from its name: outside Slurm, `mps start --name job7-mine` was
/// listed as job 7's and stopped by `mps stop --job 7` (a job's epilog). The job is recorded
/// with the daemon now (`daemon_starting`, `daemon_started`, `mps list`'s `job`), never parsed
/// back from its name.
#[test]
fn a_daemons_job_is_recorded_never_read_from_its_name() {
    let host = Host::two_gpus();
    let mine = host.start(&["0", "--name", "job7-mine"]);
    assert_eq!(mine["job"], Value::Null, "{mine}");
    host.unilab()
        .args(["mps", "stop", "--job", "7"])
        .assert()
        .success()
        .stderr(predicate::str::contains("nothing to stop"));
    assert!(
        alive(mine["pid"].as_u64().unwrap()),
        "job 7's epilog stopped it"
    );
    let seven = host.json_with(&[("SLURM_JOB_ID", "7")], &["mps", "start", "1"]);
    assert_eq!(seven["job"], "7", "{seven}");
    let jobs: Vec<(String, Value)> = host
        .json(&["mps", "list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["name"].as_str().unwrap().to_owned(), d["job"].clone()))
        .collect();
    assert_eq!(
        jobs,
        [
            ("job7-gpu-2222bbbb".to_owned(), Value::from("7")),
            ("job7-mine".to_owned(), Value::Null)
        ]
    );
    host.unilab()
        .args(["mps", "stop", "--job", "7"])
        .assert()
        .success()
        .stdout(predicate::str::contains("stopped `job7-gpu-2222bbbb`"));
    assert!(gone(seven["pid"].as_u64().unwrap()));
    assert!(alive(mine["pid"].as_u64().unwrap()));
    host.unilab()
        .args(["mps", "stop", "job7-mine"])
        .assert()
        .success();
    let history = host
        .unilab()
        .args(["--json", "history", "--daemon", "job7-gpu-2222bbbb"])
        .output()
        .unwrap();
    let history = String::from_utf8_lossy(&history.stdout);
    assert!(
        history
            .lines()
            .filter(|l| l.contains("daemon_start"))
            .all(|l| l.contains(r#""job":"7""#)),
        "{history}"
    );
}

/// A daemon killed with SIGKILL leaves its pid file, and its pid may go to an unrelated process.
/// The occupant of the pipe directory trusted that pid: `mps start --name r2` refused ("a daemon
/// that unilab did not start answers") although nothing answered, and a record cleaned as
/// `pid_reused` left `control` and the pid file behind, listed by `mps status` as a pipe that is
/// not unilab's. Now a pid proves nothing without a control socket that answers.
#[test]
fn a_dead_daemons_pid_reused_by_another_process_blocks_nothing_and_its_leftovers_go() {
    if !is_root() {
        eprintln!("skipped: forcing pid reuse through /proc/sys/kernel/ns_last_pid needs root");
        return;
    }
    let host = Host::two_gpus();
    let mut impostors = Vec::new();
    for (name, gpu) in [("r1", "0"), ("r2", "1")] {
        let record = host.start(&[gpu, "--name", name]);
        let pid = record["pid"].as_u64().unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::SIGKILL,
        )
        .unwrap();
        eventually(
            &format!("pid {pid} to be reaped"),
            Duration::from_secs(10),
            || proc_stat(pid).is_none(),
        );
        let Some(impostor) = process_with_pid(pid) else {
            eprintln!("skipped: the kernel would not hand out pid {pid} again");
            return;
        };
        impostors.push((
            impostor,
            PathBuf::from(record["pipe_directory"].as_str().unwrap()),
        ));
    }
    // `mps stop r1` cleans the record and removes what the daemon left.
    host.unilab()
        .args(["mps", "stop", "r1", "--grace", "0.2"])
        .assert()
        .code(4)
        .stderr(predicate::str::contains("pid_reused"));
    let r1_pipe = &impostors[0].1;
    assert!(!r1_pipe.join("control").exists(), "its socket was removed");
    assert!(
        !r1_pipe.join("nvidia-cuda-mps-control.pid").exists(),
        "its pid file was removed"
    );
    // `mps start --name r2` cleans the stale record in its way and starts.
    let again = host.start(&["1", "--name", "r2"]);
    assert_eq!(again["name"], "r2");
    let pipes = host.json(&["mps", "status"])["control_pipes"].clone();
    assert!(
        pipes
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["path"]
                .as_str()
                .unwrap()
                .starts_with(host.runtime().to_str().unwrap()))
            .all(|p| !p["managed_names"].as_array().unwrap().is_empty()),
        "no pipe of this host is listed as not unilab's: {pipes}"
    );
    host.unilab().args(["mps", "stop", "r2"]).assert().success();
    for (mut impostor, _) in impostors {
        assert!(
            impostor.try_wait().unwrap().is_none(),
            "the process that reused the pid was not signalled"
        );
        impostor.kill().unwrap();
        impostor.wait().unwrap();
    }
}

/// `mps doctor` passed every check (exit 0) without `nvidia-cuda-mps-control`, and `mps start`
/// then blamed the daemon (`see control.log`): both now name the tool and `UNILAB_MPS_CONTROL`.
#[test]
fn a_missing_control_tool_fails_doctor_and_start_with_a_hint_at_the_variable() {
    let host = Host::two_gpus();
    let missing = host.root.root().join("no-such-mps-control");
    let env = [("UNILAB_MPS_CONTROL", missing.to_str().unwrap())];
    let (code, report) = doctor(&host, &env, Some("0"));
    assert_eq!(code, 3, "{report}");
    assert_eq!(status_of(&report, "control tool").unwrap(), "fail");
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "control tool")
        .unwrap();
    assert!(
        check["hint"]
            .as_str()
            .unwrap()
            .contains("UNILAB_MPS_CONTROL"),
        "{check}"
    );
    host.unilab()
        .envs(env)
        .args(["mps", "start", "0"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("was not found"))
        .stderr(predicate::str::contains("UNILAB_MPS_CONTROL"))
        .stderr(predicate::str::contains("control.log").not());
    assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
    // With the tool found, a GPU a live daemon serves is not `ok`: a start would refuse.
    host.start(&["0"]);
    let (_, report) = doctor(&host, &[], Some("0"));
    assert_eq!(status_of(&report, "control tool").unwrap(), "ok");
    assert_eq!(status_of(&report, "daemon").unwrap(), "warn");
    assert!(detail_of(&report, "daemon").contains("would refuse"));
    host.unilab().args(["mps", "stop"]).assert().success();
}

/// `mps env --help` offered `--shared`, which only `exec` has; a refused mode said "on 1 GPUs".
#[test]
fn help_and_messages_say_only_what_applies() {
    let host = Host::two_gpus();
    let help = host
        .unilab()
        .args(["mps", "env", "--help"])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&help.get_output().stdout).into_owned();
    assert!(!text.contains("--shared"), "{text}");
    host.unilab()
        .args(["mps", "start", "each:0"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("on 1 GPU;"));
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
        host.unilab()
            .env(knob, wrong)
            .args(["mps", "start", "0", flag, value])
            .assert()
            .code(3)
            .stderr(predicate::str::contains("read back is"));
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
    let quick = [("UNILAB_TOOL_TIMEOUT", "1")];
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
    host.unilab()
        .envs(quick)
        .args(["mps", "env"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("is wedged"))
        .stderr(predicate::str::contains("unilab mps stop"));
    host.unilab()
        .envs(quick)
        .args(["mps", "exec", "--shared", "0", "--", "true"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("is wedged"));
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
    host.unilab()
        .env("FAKE_MPS_WEDGED", "1")
        .env("UNILAB_TOOL_TIMEOUT", "1")
        .args(["mps", "start", "0"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("it is wedged"));
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

/// `mps status` and `doctor` read the tail of the daemon's `control.log` and `server.log` for
/// what MPS users hit — another user's client queued, a server that failed to start, a client
/// limit reached — and report each with its line and time.
#[test]
fn status_and_doctor_report_what_the_daemons_logs_tell_of_trouble() {
    let host = Host::two_gpus();
    host.json_with(
        &[("FAKE_MPS_LOG_EVENTS", "queued,server_failed,client_limit")],
        &["mps", "start", "0"],
    );
    let status = host.json(&["mps", "status"]);
    let findings = status["managed_daemons"][0]["log_findings"]
        .as_array()
        .unwrap()
        .clone();
    let kinds: Vec<(&str, &str)> = findings
        .iter()
        .map(|f| (f["kind"].as_str().unwrap(), f["file"].as_str().unwrap()))
        .collect();
    for expected in [
        ("queued_client", "control.log"),
        ("server_failed", "control.log"),
        ("server_failed", "server.log"),
        ("client_limit", "server.log"),
    ] {
        assert!(kinds.contains(&expected), "{expected:?} in {kinds:?}");
    }
    let queued = findings
        .iter()
        .find(|f| f["kind"] == "queued_client")
        .unwrap();
    assert!(
        queued["line"]
            .as_str()
            .unwrap()
            .contains("push client to pending list")
    );
    assert!(queued["at"].as_str().unwrap().starts_with("20"), "{queued}");
    let human = host.unilab().args(["mps", "status"]).assert().success();
    let text = String::from_utf8_lossy(&human.get_output().stdout).into_owned();
    assert!(text.contains("another user's client waits"), "{text}");
    let (_, report) = doctor(&host, &[], Some("0"));
    assert_eq!(status_of(&report, "daemon log").unwrap(), "warn");
    host.unilab().args(["mps", "stop"]).assert().success();
    // A daemon whose logs say nothing of trouble has no findings.
    host.start(&["1"]);
    let status = host.json(&["mps", "status"]);
    assert!(
        status["managed_daemons"][0]["log_findings"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{status}"
    );
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

/// A process that has come and gone: the starter of a start cut short.
fn gone_starter() -> unilab::ProcessIdentity {
    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    let starter = unilab::ProcessIdentity {
        pid: child.id(),
        start_ticks: proc_stat(child.id()).unwrap().start_ticks,
    };
    child.kill().unwrap();
    child.wait().unwrap();
    starter
}

/// Runs `cmd` for at most `limit`; its exit status (`None`: it was still running, and was
/// killed) and what it wrote to standard error.
fn run_at_most(mut cmd: Command, limit: Duration) -> (Option<std::process::ExitStatus>, String) {
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr.reopen().unwrap())
        .spawn()
        .unwrap();
    let mut status = None;
    within(limit, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if status.is_none() {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    (status, std::fs::read_to_string(stderr.path()).unwrap())
}

/// A process of the user whose memory map is locked (one thread has the kernel fault a page in
/// from a FUSE mount whose reads never return, another waits to change the map) makes reading
/// its `/proc/<pid>/environ` block in the kernel. `mps start`, `mps exec --shared`, `mps stop`
/// and `mps stop --all` settle a start cut short by reading the environment of each process
/// of the user started since, under the start's name and GPU locks: each hung there for good,
/// holding the locks (the next `mps start` gave up after 60 s). Now each such read is given up
/// after a few seconds: the command names the process it skipped and what it could not read,
/// settles the start, finishes and lets go of the locks — and exits although its reader is still
/// blocked (a command's exit is seen only once all its threads are gone).
#[test]
fn a_process_whose_map_is_locked_is_named_and_holds_up_no_mps_command() {
    let Some(mut mount) = HangingMount::new() else {
        return;
    };
    let host = Host::two_gpus();
    // One start cut short before each command, its starter gone before the stuck process began.
    let starters: Vec<_> = (0..4).map(|_| gone_starter()).collect();
    let stuck = mount.stuck_process();
    let commands: [&[&str]; 4] = [
        &["mps", "start", "0"],
        &["mps", "exec", "--shared", "0", "--", "true"],
        &["mps", "stop", "gpu-1111aaaa"],
        &["mps", "stop", "--all"],
    ];
    for (i, (args, starter)) in commands.iter().zip(starters).enumerate() {
        let name = format!("cut-{i}");
        host.root
            .log()
            .append(
                Subject::Daemon(name.clone()),
                Event::DaemonStarting {
                    gpu: GPU_B.into(),
                    pipe_directory: host.root.root().join(&name).display().to_string(),
                    log_directory: host.root.root().join("log").display().to_string(),
                    starter,
                    job: None,
                },
            )
            .unwrap();
        let mut cmd = host.command();
        cmd.args(*args);
        let (status, stderr) = run_at_most(cmd, Duration::from_secs(90));
        assert!(
            status.is_some_and(|s| s.success()),
            "`unilab {}` ended {status:?} (None: still running after 90 s): {stderr}",
            args.join(" ")
        );
        for said in [
            format!(
                "settling the cut-short start of `{name}` skipped pid {stuck} (`{STUCK_MM_NAME}`)"
            ),
            format!("reading /proc/{stuck}/environ did not return within"),
            format!("a start of `{name}` was cut short"),
        ] {
            assert!(stderr.contains(&said), "{args:?}: no `{said}` in: {stderr}");
        }
        let kinds = host.kinds(&name);
        assert_eq!(
            kinds,
            ["daemon_starting", "daemon_start_failed"],
            "{args:?}"
        );
    }
    assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
    assert!(daemons_for(&host.runtime().join("unilab/mps/gpu-1111aaaa")).is_empty());
    host.unilab().args(["log", "verify"]).assert().success();
    assert!(!exited(stuck), "the stuck process was left alone");
}
