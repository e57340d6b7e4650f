//! What the supervisor does between samples and around them, as its own accounting
//! (`UNILAB_COST_SPLIT`) tells: it sleeps until something happens or a sample is due, and
//! looks at nothing that did not change.

use std::path::Path;

use serde_json::Value;

use crate::soak::Soak;

/// `soak run` of `sh -c SCRIPT` every `interval` with the cost split asked for: the artifact
/// and the split.
fn split_of(soak: &Soak, interval: &str, script: &str) -> (Value, Value) {
    let split = soak.root.root().join("split.json");
    let output = soak
        .command()
        .env("UNILAB_COST_SPLIT", &split)
        .args(["--json", "soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--sample-interval", interval, "--stale-progress", "1h"])
        .args([
            "--allow-no-progress",
            "--py-spy",
            "off",
            "--",
            "sh",
            "-c",
            script,
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    (read_json(&soak.artifact_path()), read_json(&split))
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The supervisor used to wake every 100 ms between samples to read the guard's status file,
/// whatever the interval: ten wake-ups a second that found nothing to do. Now a wait sleeps
/// until the guard writes its status, dies, a stop signal comes, or the sample is due: at
/// most one wake-up a sample while nothing happens.
#[test]
fn a_wait_between_samples_wakes_only_when_the_sample_is_due() {
    let soak = Soak::new();
    let (artifact, split) = split_of(&soak, "0.5", "sleep 3");
    assert_eq!(artifact["outcome"]["status"], "passed", "{artifact}");
    let samples = split["samples"].as_u64().unwrap();
    assert!(samples >= 4, "{split}");
    let woke = split["wait_wakeups"].as_u64().unwrap();
    // One a sample, and a few for what did happen: the guard's status written at the command's
    // start and at its exit, a timer that fired a little early on a loaded host (CI saw 10 for
    // 8 samples). The old wait woke 31 times for 8.
    assert!(
        woke <= samples + 4,
        "{woke} wake-ups for {samples} samples: {split}"
    );
}

/// The command's exit still ends the wait at once, whatever the interval: a 30 s interval does
/// not hold a command that ran 1 s for 30 s.
#[test]
fn the_commands_exit_ends_a_long_wait() {
    let soak = Soak::new();
    let began = std::time::Instant::now();
    let (artifact, _) = split_of(&soak, "30", "sleep 1");
    assert_eq!(artifact["outcome"]["status"], "passed", "{artifact}");
    assert!(began.elapsed().as_secs() < 20, "{:?}", began.elapsed());
}

/// A stop signal ends a long wait: SIGINT during a 60 s interval stops the soak well before
/// the next sample was due (the wait sleeps on a socket the stop signals write to, not on a
/// clock that would look at the flag only when the sample is due).
#[test]
fn a_stop_signal_ends_a_long_wait() {
    let soak = Soak::new();
    let mut supervisor = soak
        .command()
        .args(["soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--sample-interval", "60", "--stale-progress", "1h"])
        .args(["--shutdown-grace", "1", "--py-spy", "off", "--", "sh", "-c"])
        .arg(r#"touch "$1/started"; exec sleep 120"#)
        .arg("sh")
        .arg(soak.progress())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    crate::common::eventually(
        "the command's start",
        std::time::Duration::from_secs(60),
        || soak.progress().join("started").exists(),
    );
    let signalled = std::time::Instant::now();
    let pid = nix::unistd::Pid::from_raw(supervisor.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::SIGINT).unwrap();
    let status = supervisor.wait().unwrap();
    assert!(
        signalled.elapsed() < std::time::Duration::from_secs(40),
        "stopped {:?} after the signal",
        signalled.elapsed()
    );
    assert_eq!(status.code(), Some(1));
    let artifact = read_json(&soak.artifact_path());
    assert_eq!(
        artifact["outcome"]["failure_kind"], "interrupted",
        "{artifact}"
    );
}
