//! `mps doctor`, and how the mps commands fail when NVIDIA's tools misbehave (missing, hung,
//! garbled, flooding) or the daemon's logs tell of trouble: every check filed under its own, exit
//! codes by convention, and messages that say only what applies.

use std::time::{Duration, Instant};

use crate::common::*;
use predicates::prelude::*;
use serde_json::Value;

use super::*;

#[test]
fn nvidia_smi_missing_hung_or_garbled_gives_clear_errors_in_time() {
    let host = Host::two_gpus();
    refused(
        host.unilab()
            .env(
                "UNILAB_NVIDIA_SMI",
                host.root.root().join("no-such-nvidia-smi"),
            )
            .args(["mps", "start"]),
        3,
        &[
            &format!(
                "`{}` was not found",
                host.root.root().join("no-such-nvidia-smi").display()
            ),
            "hint: `UNILAB_NVIDIA_SMI` names",
        ],
    );
    // Searched on a PATH that has none: the hint is to install it.
    refused(
        host.unilab()
            .env("PATH", host.root.root().join("no-bin"))
            .args(["mps", "start"]),
        3,
        &[
            "`nvidia-smi` was not found",
            "hint: install the NVIDIA driver utilities",
        ],
    );
    let started = Instant::now();
    refused(
        host.unilab()
            .env("FAKE_NVIDIA_SMI_MODE", "hang")
            .env("UNILAB_TOOL_TIMEOUT", "1")
            .args(["mps", "start"]),
        3,
        &["did not answer within 1 s"],
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the timeout held"
    );
    refused(
        host.unilab()
            .env("FAKE_NVIDIA_SMI_MODE", "garbage")
            .args(["mps", "start"]),
        3,
        &["printed no GPU list that unilab can read"],
    );
    for (mode, says) in [
        ("no-driver", "cannot communicate with the NVIDIA driver"),
        ("no-devices", "found no GPUs"),
        ("mismatch", "version mismatch"),
    ] {
        refused(
            host.unilab()
                .env("FAKE_NVIDIA_SMI_MODE", mode)
                .args(["mps", "start"]),
            3,
            &[says],
        );
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
    refused(
        host.unilab()
            .env("XDG_RUNTIME_DIR", &long)
            .args(["mps", "start", "GPU-1111"]),
        3,
        &["at most 107"],
    );

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
fn exit_codes_follow_conventions() {
    let host = Host::two_gpus();
    // A bad name is a usage error, before anything is resolved or recorded.
    refused(
        host.unilab().args(["mps", "start", "0", "--name", "a b"]),
        2,
        &["is not a valid daemon name"],
    );
    let a = host.start(&["0"]);
    // exec: 127 when the command is not found, 126 when it cannot be run, as env and sudo.
    refused(
        host.unilab()
            .args(["mps", "exec", "--", "/nonexistent/command"]),
        127,
        &["cannot run `/nonexistent/command`"],
    );
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
    refused(
        host.unilab().args(["mps", "stop", "--all"]),
        4,
        &["`gpu-2222bbbb` was no longer running"],
    );
    assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
}

/// One duration syntax everywhere: `UNILAB_TOOL_TIMEOUT=1s` is a timeout of one second (it used
/// to be ignored for the 10 s default), and a bad value names the variable.
#[test]
fn the_tool_timeout_takes_the_duration_syntax_of_the_flags() {
    let host = Host::two_gpus();
    let started = Instant::now();
    refused(
        host.unilab()
            .env("FAKE_NVIDIA_SMI_MODE", "hang")
            .env("UNILAB_TOOL_TIMEOUT", "1s")
            .args(["mps", "start", "0"]),
        3,
        &["did not answer within 1 s"],
    );
    assert!(started.elapsed() < Duration::from_secs(8));
    refused(
        host.unilab()
            .env("UNILAB_TOOL_TIMEOUT", "soon")
            .args(["mps", "status"]),
        2,
        &["`UNILAB_TOOL_TIMEOUT` is not usable"],
    );
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
    refused(
        host.unilab().args(["mps", "start", "each:0"]),
        3,
        &["on 1 GPU;"],
    );
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
