//! A soak whose log fails under it: a log moved away fails it loudly; a full disk is named as such
//! and the soak outlasts it.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

use super::*;

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
    assert!(indices.len() >= 2, "samples before and after: {indices:?}");
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
    assert!(said.contains("waiting up to 10s for space"), "{said}");
    assert!(
        said.contains(r#""error":"no space left on the device holding"#),
        "{said}"
    );
    assert!(!said.contains("not a readable"), "{said}");
}
