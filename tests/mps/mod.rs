//! `unilab mps ...` end to end: the real binary, the fake `nvidia-smi` and the fake
//! `nvidia-cuda-mps-control` (which daemonizes like NVIDIA's), and real processes.
//!
//! This module holds what the subjects share: a host with two fake GPUs ([`Host`]), and the ways
//! to ask it for a plan, a doctor's report or its daemons; each subject is a module of its own.

mod clients;
mod doctor;
mod lifecycle;
mod races;
mod safety;
mod selection;
mod shared;
mod stopping;
mod stress;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

const GPU_A: &str = "GPU-1111aaaa-0000-4000-8000-000000000001";
const GPU_B: &str = "GPU-2222bbbb-0000-4000-8000-000000000002";

/// A host with two fake GPUs, a private runtime directory for pipe directories, and cleanup of
/// every fake daemon the test left running.
pub(crate) struct Host {
    pub(crate) root: TestRoot,
    gpus: String,
}

impl Host {
    pub(crate) fn two_gpus() -> Self {
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

    pub(crate) fn unilab(&self) -> assert_cmd::Command {
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

    pub(crate) fn start(&self, args: &[&str]) -> Value {
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
