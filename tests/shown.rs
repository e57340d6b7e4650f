//! The human output of the commands that show what was recorded (`soak show`, `history`, `mps
//! list`, `log stats`), snapshotted from real runs: the example trainer, the fake NVIDIA tools.
//! What varies between runs and machines is filtered ([`snapshot_settings`]); a change in what a
//! person reads shows up as a snapshot to review.

use crate::common::*;
use crate::mps::Host;
use crate::soak::Soak;

/// What `cmd ARGS` prints on standard output; it must succeed.
fn shown(mut cmd: assert_cmd::Command, args: &[&str]) -> String {
    let output = cmd.args(args).output().unwrap();
    assert!(output.status.success(), "{args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// A short run of the example trainer that passes.
fn passed(soak: &Soak) {
    let (output, _) = soak.run(&[], &["--steps", "3", "--step-seconds", "0.1"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

#[test]
fn soak_show_and_history_of_a_passed_soak() {
    let soak = Soak::new();
    passed(&soak);
    let show = shown(soak.unilab(), &["soak", "show", "latest"]);
    let history = shown(soak.unilab(), &["history", "--soak", "latest"]);
    snapshot_settings(&soak.root).bind(|| {
        insta::assert_snapshot!("soak_show_of_a_passed_soak", show);
        insta::assert_snapshot!("history_of_a_soak", collapsed_timeline(&history));
    });
}

/// A run of the example trainer that exits with code 3: `soak show` says the command failed and
/// how, with its last lines.
#[test]
fn soak_show_of_a_run_whose_command_exited_3() {
    let soak = Soak::new();
    let (output, _) = soak.run(
        &[],
        &["--steps", "2", "--step-seconds", "0.1", "--exit-code", "3"],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let show = shown(soak.unilab(), &["soak", "show", "latest"]);
    snapshot_settings(&soak.root).bind(|| insta::assert_snapshot!(show));
}

#[test]
fn mps_list_and_history_of_a_daemon() {
    let host = Host::two_gpus();
    host.start(&["0"]);
    let list = shown(host.unilab(), &["mps", "list"]);
    shown(host.unilab(), &["mps", "stop"]);
    let history = shown(host.unilab(), &["history", "--daemon", "gpu-1111aaaa"]);
    let mut settings = snapshot_settings(&host.root);
    settings.bind(|| insta::assert_snapshot!("history_of_a_daemon", history));
    // The table's columns are as wide as their widest value, a pid's as wide as its digits.
    settings.add_filter(r"(?m)^(gpu-1111aaaa +)\d+", "${1}[PID]");
    settings.add_filter(" {2,}", "  ");
    settings.bind(|| insta::assert_snapshot!("mps_list", list));
}

/// `mps status` and `mps doctor` of a host of two GPUs with a daemon of this user on GPU 0: what
/// a person reads of the host, pinned so that a change of either is made on purpose.
#[test]
fn mps_status_and_doctor_of_a_host_with_a_daemon() {
    let host = Host::two_gpus();
    host.start(&["0"]);
    let status = shown(host.unilab(), &["mps", "status"]);
    let doctor = shown(host.unilab(), &["mps", "doctor", "0"]);
    shown(host.unilab(), &["mps", "stop"]);
    let mut settings = snapshot_settings(&host.root);
    settings.add_filter(
        &regex_escape(&fixtures_dir().display().to_string()),
        "[FIXTURES]",
    );
    settings.add_filter(r"\(\d+-byte socket path\)", "([N]-byte socket path)");
    settings.add_filter(r"/tmp/unilab-\d+/", "/tmp/unilab-[UID]/");
    settings.add_filter(r"\bpid \d+", "pid [PID]");
    settings.add_filter(r"(?m)(gpu-1111aaaa +)\d+", "${1}[PID]");
    settings.add_filter(" {2,}", "  ");
    settings.bind(|| {
        insta::assert_snapshot!("mps_status_of_a_host_with_a_daemon", status);
        insta::assert_snapshot!("mps_doctor_of_a_host_with_a_daemon", doctor);
    });
}

/// The CSV export of the frozen soaks that beat (schema 10) and that record their progress
/// (schema 12): the columns and rows a spreadsheet reads, pinned so that a change of either is
/// made on purpose.
#[test]
fn csv_of_the_frozen_beaten_and_progress_soaks() {
    let root = TestRoot::new();
    crate::migrations::install(12, &root);
    for id in ["20261208T100000-b10b", "20261210T120000-b12b"] {
        let csv = shown(root.unilab(), &["soak", "export", id, "--format", "csv"]);
        insta::assert_snapshot!(format!("csv_of_{id}"), csv);
    }
}

#[test]
fn log_stats_of_a_soak_under_a_quota() {
    let soak = Soak::new();
    passed(&soak);
    let mut cmd = soak.unilab();
    cmd.env("FAKE_QUOTA_FS", soak.root.root())
        .env("FAKE_QUOTA_USED_KIB", "1024")
        .env("FAKE_QUOTA_LIMIT_KIB", "4096");
    let stats = shown(cmd, &["log", "stats"]);
    snapshot_settings(&soak.root).bind(|| insta::assert_snapshot!(stats));
}

/// A soak of `sh -c 'echo a; exit 0' sh --password=hunter2` through `soak run`, sampled every
/// second, stale after two minutes, with the default startup timeout; its id.
fn a_soak_of_a_quoted_command(soak: &Soak) -> String {
    let done = soak
        .unilab()
        .args(["--json", "soak", "run", "--allow-no-progress"])
        .args(["--sample-interval", "1", "--stale-progress", "120"])
        .arg("--progress-dir")
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args([
            "--",
            "sh",
            "-c",
            "echo a; exit 0",
            "sh",
            "--password=hunter2",
        ])
        .assert()
        .success();
    let told: serde_json::Value = serde_json::from_slice(&done.get_output().stdout).unwrap();
    told["soak_id"].as_str().unwrap().to_owned()
}

/// `history` (and so the report's timeline, made of its lines) and the report's header joined
/// the command's words with spaces — `sh -c echo a; exit 0`, which a shell runs differently —
/// while `soak show` and `soak list` quoted them: every view shows the one quoted form, its
/// secret masked.
#[test]
fn a_command_reads_with_its_shell_quoting_in_every_view() {
    let soak = Soak::new();
    let id = a_soak_of_a_quoted_command(&soak);
    let quoted = "sh -c 'echo a; exit 0' sh '--password=[redacted]'";
    let show = shown(soak.unilab(), &["soak", "show", &id]);
    assert!(show.contains(&format!("command:  {quoted}\n")), "{show}");
    let list = shown(soak.unilab(), &["soak", "list"]);
    assert!(list.contains(quoted), "{list}");
    let history = shown(soak.unilab(), &["history", "--soak", &id]);
    assert!(history.contains(&format!("`{quoted}`")), "{history}");
    let html = shown(soak.unilab(), &["soak", "report", &id]);
    let escaped = "sh -c &#39;echo a; exit 0&#39; sh &#39;--password=[redacted]&#39;";
    assert!(
        html.contains(&format!("<p class=\"command\"><code>{escaped}</code></p>")),
        "the header: {html}"
    );
    let timeline = html
        .split_once("<pre class=\"timeline\">")
        .map(|(_, timeline)| timeline)
        .unwrap_or_else(|| panic!("a timeline: {html}"));
    assert!(timeline.contains(&format!("`{escaped}`")), "{timeline}");
    for view in [show, list, history, html] {
        assert!(!view.contains("hunter2"), "{view}");
    }
}

/// `history`'s line for a soak's start gave its settings in milliseconds (`every 1000 ms, stale
/// after 120000 ms`) where every other line reads durations as people do, and left out the
/// startup timeout, though it decides a soak that never shows progress.
#[test]
fn history_tells_a_soaks_settings_as_durations_with_its_startup_timeout() {
    let soak = Soak::new();
    let id = a_soak_of_a_quoted_command(&soak);
    let history = shown(soak.unilab(), &["history", "--soak", &id]);
    assert!(
        history.contains("(every 1s, stale after 2m, startup timeout 10m)"),
        "{history}"
    );
}

/// A trainer that starts a child whose command line carries credentials written into its
/// arguments, shows progress twice, then hangs: its soak fails as stale and captures both.
const SECRET_ARGS_TRAINER: &str = r#"
import os, subprocess, sys, time
progress = sys.argv[1]
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)",
                  "Authorization: Bearer childbearer-77aa", '{"password": "childjson-88bb"}'])
for step in range(2):
    with open(os.path.join(progress, f"step-{step}"), "w") as f:
        f.write("x")
    time.sleep(0.2)
time.sleep(600)
"#;

/// What the soak of [`SECRET_ARGS_TRAINER`] and its child were given and no record or view may
/// hold.
const WRITTEN_SECRETS: [&str; 6] = [
    "s3cr3tbearer-11",
    "hunter2x",
    "pairsecret-22",
    "scriptbearer-33",
    "childbearer-77aa",
    "childjson-88bb",
];

/// Asserts that none of `secrets` is among `bytes` of `view`.
fn holds_none(view: &str, bytes: &[u8], secrets: &[&str]) {
    for secret in secrets {
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "`{secret}` reached {view}: {}",
            String::from_utf8_lossy(bytes)
        );
    }
}

/// Credentials written into a command's arguments were recorded raw: `'Authorization: Bearer
/// …'`, a JSON argument `'{"password": "…"}'`, `password=…` in a script — the soak's own and
/// a child's read for the evidence — reached the artifact, the log, every view of it and the
/// metrics file's `command` label (a 0644 file node_exporter serves), as only credential-named
/// flags, variables' values and URL passwords were masked.
#[test]
fn credentials_written_into_a_commands_arguments_reach_no_record_or_view() {
    let soak = Soak::new();
    let script = soak.root.root().join("secret_args.py");
    std::fs::write(&script, SECRET_ARGS_TRAINER).unwrap();
    let metrics = soak.root.root().join("soak.prom");
    let run = soak
        .unilab()
        .args(["--json", "soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .arg("--metrics-file")
        .arg(&metrics)
        .args(["--sample-interval", "0.2", "--stale-progress", "1"])
        .args([
            "--shutdown-grace",
            "0.5",
            "--py-spy",
            "off",
            "--",
            "python3",
        ])
        .arg(&script)
        .arg(soak.progress())
        .args([
            "Authorization: Bearer s3cr3tbearer-11",
            r#"{"password": "hunter2x", "lr": 0.1}"#,
            "user=bob password=pairsecret-22",
            "curl -H \"Authorization: Bearer scriptbearer-33\" https://h",
        ])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    let artifact: serde_json::Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    assert_eq!(artifact["outcome"]["failure_kind"], "stale_progress");
    let id = artifact["soak_id"].as_str().unwrap().to_owned();
    assert_eq!(
        artifact["command"].as_array().unwrap()[3..],
        [
            "Authorization: Bearer [redacted]",
            r#"{"password": "[redacted]", "lr": 0.1}"#,
            "user=bob password=[redacted]",
            "curl -H \"Authorization: Bearer [redacted]\" https://h",
        ]
    );
    let child = artifact["evidence"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["cmdline"][1] == "-c")
        .unwrap_or_else(|| panic!("the child is in the evidence: {artifact}"));
    assert_eq!(
        child["cmdline"].as_array().unwrap()[3..],
        [
            "Authorization: Bearer [redacted]",
            r#"{"password": "[redacted]"}"#
        ]
    );

    let report = soak.root.root().join("report.html");
    soak.unilab()
        .args(["soak", "report", &id, "--output"])
        .arg(&report)
        .assert()
        .success();
    let views = [
        ("soak run", [run.stdout, run.stderr].concat()),
        ("the artifact", std::fs::read(soak.artifact_path()).unwrap()),
        ("the log file", std::fs::read(soak.root.log_path()).unwrap()),
        ("the metrics file", std::fs::read(&metrics).unwrap()),
        ("show", shown(soak.unilab(), &["soak", "show", &id]).into()),
        (
            "show --json",
            shown(soak.unilab(), &["--json", "soak", "show", &id]).into(),
        ),
        ("list", shown(soak.unilab(), &["soak", "list"]).into()),
        (
            "list --json",
            shown(soak.unilab(), &["--json", "soak", "list"]).into(),
        ),
        (
            "history",
            shown(soak.unilab(), &["history", "--soak", &id]).into(),
        ),
        (
            "history --json",
            shown(soak.unilab(), &["--json", "history", "--soak", &id]).into(),
        ),
        ("the report", std::fs::read(&report).unwrap()),
    ];
    for (view, bytes) in &views {
        assert!(
            bytes.windows(id.len()).any(|w| w == id.as_bytes()),
            "{view} does not show the soak: {}",
            String::from_utf8_lossy(bytes)
        );
        holds_none(view, bytes, &WRITTEN_SECRETS);
    }
    let text = |view: &str| {
        let (_, bytes) = views.iter().find(|(name, _)| *name == view).unwrap();
        String::from_utf8_lossy(bytes).into_owned()
    };
    assert!(
        text("the metrics file").contains("Authorization: Bearer [redacted]"),
        "{}",
        text("the metrics file")
    );
    let show = text("show");
    assert!(
        show.contains("'Authorization: Bearer [redacted]'")
            && show
                .contains(" -c 'import time; time.sleep(600)' 'Authorization: Bearer [redacted]'"),
        "the command and the child's, masked: {show}"
    );
    soak.unilab().args(["log", "verify"]).assert().success();
}

/// The soak a log recorded with credentials written into its command lines raw, as unilab
/// recorded them before it masked them: its start's command, its evidence's process and its
/// leaked process carry `Authorization: Bearer oldbearer-44cc` and `{"token": "oldjson-55dd"}`.
fn a_soak_recorded_raw(root: &TestRoot, id: &str) {
    use unilab::{
        Evidence, FailureKind, LeakedProcess, ProcessEvidence, ProcessIdentity, StoredEvent,
        Subject,
    };
    let raw = || -> Vec<String> {
        [
            "python3",
            "train.py",
            "Authorization: Bearer oldbearer-44cc",
        ]
        .into_iter()
        .map(Into::into)
        .chain([r#"{"token": "oldjson-55dd"}"#.to_owned()])
        .collect()
    };
    let supervisor = ProcessIdentity {
        pid: 5000,
        start_ticks: 1_000_000,
    };
    let mut events = measured_soak(id, 3, |_| 2, supervisor);
    for (_, event) in &mut events {
        match event {
            StoredEvent::SoakStartedV8 { start, .. } => start.command = raw(),
            StoredEvent::SoakFinishedV9 { end, .. } => {
                end.leaked_processes = vec![LeakedProcess {
                    identity: ProcessIdentity {
                        pid: 5001,
                        start_ticks: 1_000_001,
                    },
                    name: "python3".into(),
                    cmdline: raw(),
                }];
            }
            _ => {}
        }
    }
    let finished = events.pop().unwrap();
    events.push((
        Subject::Soak(id.into()),
        StoredEvent::SoakEvidenceCaptured(Box::new(Evidence {
            trigger: FailureKind::StaleProgress,
            captured_at_us: 1_764_679_316_750_000,
            processes: vec![ProcessEvidence {
                pid: 5000,
                ppid: 4999,
                start_ticks: 1_000_000,
                name: "python3".into(),
                state: 'S',
                cmdline: raw(),
                threads: Vec::new(),
                kernel_stack: None,
                python_stack: None,
                holds_gpu_device: false,
                rank: None,
                collectives: None,
            }],
            cgroup: None,
            kernel_messages: Vec::new(),
            unavailable: Vec::new(),
            mps: Vec::new(),
        })),
    ));
    events.push(finished);
    root.log().append_all(events).unwrap();
}

/// A log written before a form of credential was masked kept showing it: `soak show`, `soak
/// list`, `history` and the report read the command lines as recorded. They are masked when
/// shown; `soak export` still gives the artifact as it was written, byte for byte.
#[test]
fn a_credential_recorded_raw_is_masked_when_shown_and_exported_as_written() {
    let root = TestRoot::new();
    let id = "20261205T100000-5ec7";
    a_soak_recorded_raw(&root, id);
    let secrets = ["oldbearer-44cc", "oldjson-55dd"];
    let views = [
        ("show", &["soak", "show", id][..]),
        ("show --json", &["--json", "soak", "show", id]),
        ("list", &["soak", "list"]),
        ("list --json", &["--json", "soak", "list"]),
        ("history", &["history", "--soak", id]),
        ("history --json", &["--json", "history", "--soak", id]),
        ("history of the log", &["history"]),
        ("report", &["soak", "report", id]),
    ];
    for (view, args) in views {
        let text = shown(root.unilab(), args);
        holds_none(view, text.as_bytes(), &secrets);
        if view != "history of the log" {
            assert!(text.contains("Bearer [redacted]"), "{view}: {text}");
        }
    }
    let show = shown(root.unilab(), &["soak", "show", id]);
    assert!(
        show.contains(r#"'Authorization: Bearer [redacted]' '{"token": "[redacted]"}'"#),
        "{show}"
    );
    let history = shown(root.unilab(), &["--json", "history", "--soak", id]);
    assert!(
        history.contains(r#"{\"token\": \"[redacted]\"}"#),
        "the start, the evidence and the leak, each masked: {history}"
    );

    let exported = root
        .unilab()
        .args(["soak", "export", id])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let log = root.log();
    let snapshot = log.snapshot().unwrap();
    let records = unilab::testing::artifact::collect(&snapshot, id)
        .unwrap()
        .unwrap();
    let (whole, _) = unilab::testing::artifact::render(&records);
    assert_eq!(
        String::from_utf8_lossy(&exported),
        String::from_utf8_lossy(&whole),
        "the artifact as it was recorded"
    );
    for secret in secrets {
        assert!(String::from_utf8_lossy(&exported).contains(secret));
    }
    root.unilab().args(["log", "verify"]).assert().success();
}

/// `tests/fixtures/heartbeat_trainer.py` with `actions`, as a soak's command.
fn heartbeat_trainer(actions: &[&str]) -> Vec<String> {
    let mut command = vec![
        "python3".to_owned(),
        fixtures_dir()
            .join("heartbeat_trainer.py")
            .display()
            .to_string(),
    ];
    command.extend(actions.iter().map(|a| (*a).to_owned()));
    command
}

/// The snapshot settings of `root`, and the fixtures' directory and what varies in a trainer's
/// beats from run to run: its step numbers, its pace, its loss, its goodput's share.
fn beaten_settings(root: &TestRoot) -> insta::Settings {
    let mut settings = snapshot_settings(root);
    let fixtures = fixtures_dir().display().to_string();
    settings.add_filter(&regex_literal(&fixtures), "[FIXTURES]");
    settings.add_filter(r"(?m)^(beats: +step )\d+", "${1}[STEP]");
    settings.add_filter(r"\b\d+(\.\d+)?/s\b", "[RATE]/s");
    settings.add_filter(r"\bloss -?\d+(\.\d+)?(e-?\d+)?", "loss [LOSS]");
    settings.add_filter(r"; none in the \[DURATION\] before the latest sample", "");
    settings.add_filter(r"\b\d+\.\d% productive", "[SHARE] productive");
    // The two largest badput buckets: which is larger (Python's startup, or the checkpoint)
    // depends on the machine.
    settings.add_filter(r"(?m); badput: .*$", "; badput: [BUCKETS]");
    settings
}

/// `text` with regular expression syntax escaped, to match itself.
fn regex_literal(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escape = "\\.+*?()|[]{}^$#&-~".contains(c);
            escape.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

/// A soak of a trainer that beats, while it runs: `soak show` says how it is going now — its
/// latest beats and their pace, its tree now, when its progress last changed.
#[test]
fn soak_show_of_a_running_soak_that_beats() {
    let soak = Soak::new();
    let mut started = Started::default();
    let pid = started.spawn(
        soak.command()
            .args(["--quiet", "soak", "run", "--allow-no-progress"])
            .args(["--sample-interval", "0.2", "--shutdown-grace", "0.5"])
            .arg("--progress-dir")
            .arg(soak.progress())
            .arg("--output")
            .arg(soak.artifact_path())
            .arg("--")
            .args(heartbeat_trainer(&["rate:20:600"]))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    );
    let mut show = String::new();
    eventually(
        "the running soak's beats and tree",
        std::time::Duration::from_secs(60),
        || {
            let output = soak
                .unilab()
                .args(["--json", "soak", "show", "latest"])
                .output()
                .unwrap();
            let live: serde_json::Value =
                serde_json::from_slice(&output.stdout).unwrap_or_default();
            let live = &live["live"];
            if !(live["heartbeat"]["step"].is_u64() && live["rss_bytes"].is_u64()) {
                return false;
            }
            show = shown(soak.unilab(), &["soak", "show", "latest"]);
            true
        },
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(
        started
            .exit_code(pid, std::time::Duration::from_secs(60))
            .is_some(),
        "the soak ends once stopped"
    );
    beaten_settings(&soak.root).bind(|| insta::assert_snapshot!(show));
}

/// A soak whose trainer beat train steps, a checkpoint and an eval, and passed: its steps, other
/// phases and goodput lead the figures.
#[test]
fn soak_show_of_a_beaten_soak() {
    let soak = Soak::new();
    soak.unilab()
        .args(["--quiet", "soak", "run", "--allow-no-progress"])
        .args(["--sample-interval", "0.2", "--shutdown-grace", "0.5"])
        .arg("--progress-dir")
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .arg("--")
        .args(heartbeat_trainer(&[
            "train:6:0.1",
            "phase:checkpoint:0.5",
            "train:4:0.1",
            "phase:eval:0.2",
            "train:2:0.1",
        ]))
        .assert()
        .success();
    let show = shown(soak.unilab(), &["soak", "show", "latest"]);
    beaten_settings(&soak.root).bind(|| insta::assert_snapshot!(show));
}

/// `job show` of a job of two ranks, each its own soak of a trainer that beats: one a row, the
/// job's verdict under them.
#[test]
fn job_show_of_a_job_of_two_ranks() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-job-shown-");
    for (rank, steps) in [(0, "train:8:0.1"), (1, "train:5:0.1")] {
        let (mut cmd, _) = job_rank_soak(&root, dir.path(), "J", rank);
        let status = cmd
            .args(["--sample-interval", "0.2", "--shutdown-grace", "0.5"])
            .args(["--allow-no-progress", "--py-spy", "off", "--"])
            .args(heartbeat_trainer(&[steps]))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "rank {rank}: {status}");
    }
    let show = shown(root.unilab(), &["job", "show", "J"]);
    let mut settings = snapshot_settings(&root);
    settings.add_filter(r"\b\d{2}:\d{2}:\d{2}\b", "[CLOCK]");
    // The columns are as wide as their widest value.
    settings.add_filter(" {2,}", "  ");
    settings.bind(|| insta::assert_snapshot!(show));
}
