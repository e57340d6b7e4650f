//! What the command is given and what is recorded of its environment: credentials never reach the
//! log or the artifact, `--env-clear`, `--meta-json`, unbuffered Python, and the runtime snapshot.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use predicates::prelude::*;
use serde_json::Value;

use super::*;

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
        assert!(
            bytes.windows(id.len()).any(|w| w == id.as_bytes()),
            "{view} does not show the soak"
        );
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

/// `unilab snapshot` printed a URL's password from its environment raw
/// (`HF_ENDPOINT=https://bob:…@host`), though a soak's snapshot masked it and the docs say the
/// command redacts: only credential-named variables lost their values.
#[test]
fn a_printed_snapshot_holds_no_urls_password() {
    let root = TestRoot::new();
    for json in [false, true] {
        let mut cmd = root.unilab();
        cmd.env("HF_ENDPOINT", "https://bob:pw12345@hub.example/x");
        if json {
            cmd.arg("--json");
        }
        let out = cmd
            .arg("snapshot")
            .arg(root.root())
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let text = String::from_utf8_lossy(&out);
        assert!(!text.contains("pw12345"), "{text}");
        assert!(
            text.contains("https://bob:[redacted]@hub.example/x"),
            "{text}"
        );
    }
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
