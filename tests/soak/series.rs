//! The series a soak records: how samples are committed, CPU time and its reaped children, the
//! sample after the command's exit, the command's own duration and the host's tick rate.

use std::process::Command;

use crate::common::*;
use serde_json::Value;

use super::*;

/// Below a second, samples are committed together at most once a second: a 0.05 s soak of
/// about two seconds makes a handful of commits, not forty, and every sample is in the log.
#[test]
fn samples_taken_faster_than_a_second_are_committed_together() {
    let soak = Soak::new();
    let mut cmd = soak.unilab();
    cmd.arg("-vv");
    let (output, artifact) = soak.run_with(
        cmd,
        &["--sample-interval", "0.05"],
        &["--steps", "40", "--step-seconds", "0.05"],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let detail = String::from_utf8_lossy(&output.stderr);
    // The trainer's output shares standard error: a detail line may follow its text on a line.
    let groups: Vec<u64> = detail
        .lines()
        .filter_map(|l| {
            let at = l.find("event log: committed ")?;
            let rest = &l[at + "event log: committed ".len()..];
            rest.contains(": soak_sampled)")
                .then(|| rest.split(' ').next().unwrap().parse().unwrap())
        })
        .collect();
    let samples = artifact["summary"]["samples"].as_u64().unwrap();
    assert!(samples >= 30, "{samples} samples");
    assert_eq!(groups.iter().sum::<u64>(), samples, "{detail}");
    let seconds = artifact["duration_seconds"].as_f64().unwrap() + 1.0;
    assert!(
        (groups.len() as f64) <= seconds + 1.0,
        "{} commits of samples in {seconds:.1} s: {groups:?}",
        groups.len()
    );
}

#[test]
fn cpu_time_counts_reaped_children_and_never_decreases() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(
        &[],
        &[
            "--burn-child",
            "0.6",
            "--steps",
            "6",
            "--step-seconds",
            "0.1",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let samples = artifact["samples"].as_array().unwrap();
    let cpu: Vec<f64> = samples
        .iter()
        .map(|s| s["cpu_seconds"].as_f64().unwrap())
        .collect();
    assert!(cpu.windows(2).all(|w| w[0] <= w[1]), "{cpu:?}");
    let total = artifact["summary"]["final_cpu_seconds"].as_f64().unwrap();
    assert!(
        total >= 0.55,
        "the burning child's 0.6 s are counted: {total}"
    );
    assert_eq!(total, *cpu.last().unwrap());
    assert_eq!(samples[0]["cpu_percent"], Value::Null);
    assert!(samples.len() >= 2, "{samples:?}");
    assert!(
        samples[1..]
            .iter()
            .all(|s| s["cpu_percent"].as_f64().is_some()),
        "{samples:?}"
    );
    assert!(artifact["summary"]["peak_cpu_percent"].as_f64().unwrap() > 10.0);
}

#[test]
fn the_series_starts_with_the_running_command_and_marks_the_sample_after_its_exit() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(&[], &["--steps", "6", "--step-seconds", "0.1"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let samples = artifact["samples"].as_array().unwrap();
    assert!(
        samples[0]["processes"].as_u64().unwrap() >= 1,
        "the first sample sees the command: {}",
        samples[0]
    );
    let (last, running) = samples.split_last().unwrap();
    assert_eq!(last["after_exit"], true, "{last}");
    assert!(!running.is_empty(), "{samples:?}");
    assert!(running.iter().all(|s| s["after_exit"] == false));
}

#[test]
fn the_duration_is_the_commands_own_and_the_teardown_is_reported_apart() {
    let soak = Soak::new();
    // A grace period far longer than the command's 0.2 s of steps: counted as run time, it
    // would make the duration longer than itself, however slow a loaded machine starts Python.
    let (output, artifact) = soak.run(
        &["--shutdown-grace", "5"],
        &["--leak", "--steps", "4", "--step-seconds", "0.05"],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(artifact["outcome"]["failure_kind"], "leaked_processes");
    let duration = artifact["duration_seconds"].as_f64().unwrap();
    let teardown = artifact["teardown_seconds"].as_f64().unwrap();
    assert!(
        duration < 5.0,
        "the grace period is not run time: {duration}"
    );
    assert!(duration >= 0.2, "{duration}");
    assert!(teardown >= 5.0, "the grace period is teardown: {teardown}");
}

#[test]
fn the_sampling_hosts_tick_rate_is_recorded_with_the_soak() {
    let soak = Soak::new();
    let (output, _) = soak.run(&[], &["--steps", "2", "--step-seconds", "0.05"]);
    let id = verdict(&output)["soak_id"].as_str().unwrap().to_owned();
    let history = soak
        .unilab()
        .args(["--json", "history", "--soak", &id])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let started: Value =
        serde_json::from_str(String::from_utf8_lossy(&history).lines().next().unwrap()).unwrap();
    assert_eq!(started["kind"], "soak_started");
    let getconf = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    let ticks: u64 = String::from_utf8_lossy(&getconf.stdout)
        .trim()
        .parse()
        .unwrap();
    assert_eq!(started["ticks_per_second"], ticks);
}

/// A soak says at its start when its record may not fit: a log over `UNILAB_LOG_WARN_SIZE`,
/// and (as root, on a 4 MiB tmpfs state root) a filesystem with less free space than a week of
/// the soak at its interval needs. Neither stops it.
#[test]
fn a_soak_warns_at_its_start_when_its_record_may_not_fit() {
    let soak = Soak::new();
    let (output, _) = soak.run(&[], &["--steps", "2", "--step-seconds", "0.1"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let (output, artifact) = soak.run_with(
        {
            let mut cmd = soak.unilab();
            cmd.env("UNILAB_LOG_WARN_SIZE", "1KiB");
            cmd
        },
        &[],
        &["--steps", "2", "--step-seconds", "0.1"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(artifact["outcome"]["status"], "passed");
    assert!(
        stderr.contains("over 1.0 KiB (UNILAB_LOG_WARN_SIZE)"),
        "{stderr}"
    );
    assert!(stderr.contains("unilab log stats"), "{stderr}");

    if !is_root() {
        eprintln!("skipped the small-filesystem warning: mounting a tmpfs needs root");
        return;
    }
    let small = soak.root.root().join("small");
    std::fs::create_dir(&small).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs"])
        .arg(&small)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped the small-filesystem warning: this host refuses a tmpfs mount");
        return;
    }
    let output = Command::new(unilab_bin())
        .env_clear()
        .env("PATH", path_with_fixtures())
        .env("HOME", soak.root.root())
        .arg("--root")
        .arg(&small)
        .args(["soak", "run"])
        .args(soak.trainer_soak(
            &["--sample-interval", "1s", "--force"],
            &["--steps", "2", "--step-seconds", "0.1"],
        ))
        .output()
        .unwrap();
    let _ = Command::new("umount").arg(&small).status();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("a week of this soak sampled every 1s needs about"),
        "{stderr}"
    );
}
