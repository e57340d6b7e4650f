//! Heartbeat files that are not what a trainer should write, under `soak run`: malformed lines
//! and a torn last line, counted while the beats around them are judged as ever; a 100 MB line
//! and a 200 MB flood, skipped and counted by a supervisor held to a 1 GiB address space whose
//! tree never grows past [`PEAK_RSS_MAX`].

use std::ffi::OsString;
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::*;
use crate::heartbeat::{
    artifact, assert_exit, assert_goodput_adds_up, count_of, heartbeat_errors, run_soak,
    shell_running, soak_args, trainer_running,
};
use crate::soak::Soak;

/// Python's, reporting on its last line of standard error the peak resident size, in KiB, of
/// the largest process of the tree it ran (`ru_maxrss` of its waited-for children).
const PEAK_RSS: &str = "import resource, subprocess, sys
code = subprocess.run(sys.argv[1:]).returncode
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f'peak_rss_kib={peak}', file=sys.stderr)
sys.exit(code)";

/// Runs the soak under a 1 GiB address-space limit, as the flood tests of `nvidia-smi` do: its
/// output, its artifact, and the peak resident size of the largest process of its tree, the
/// supervisor's own included, in bytes.
fn run_bounded_soak(soak: &Soak, options: &[&str], command: Vec<OsString>) -> (Output, Value, u64) {
    let _ = std::fs::remove_file(soak.artifact_path());
    let mut cmd = soak.command();
    cmd.env("UNILAB_TOOL_TIMEOUT", "2")
        .args(soak_args(soak, options, command));
    let limited = with_address_space_limit(&cmd, 1 << 30);
    let output = Command::new("python3")
        .env_clear()
        .envs(
            limited
                .get_envs()
                .filter_map(|(key, value)| Some((key.to_owned(), value?.to_owned()))),
        )
        .args(["-c", PEAK_RSS])
        .arg(limited.get_program())
        .args(limited.get_args())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let peak_kib: u64 = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("peak_rss_kib="))
        .next_back()
        .unwrap_or_else(|| panic!("no peak size reported: {stderr}"))
        .parse()
        .unwrap();
    (output, artifact(soak), peak_kib * 1024)
}

/// Lines that are not beats — not JSON, JSON of the wrong shape, out-of-range fields, bytes
/// that are not UTF-8 — are counted, one each, and the beats around them judged as ever.
#[test]
fn malformed_lines_are_counted_and_the_beats_around_them_recorded() {
    let soak = Soak::new();
    let malformed: [&[u8]; 8] = [
        b"not json",
        b"[1, 2, 3]",
        br#"{"phase": "train"}"#,
        br#"{"step": -1}"#,
        br#"{"step": 1.5}"#,
        br#"{"step": 2, "phase": ""}"#,
        br#"{"step": 2, "phase": "a\u0007b"}"#,
        b"{\"step\": 3, \"phase\": \"\xff\xfe\"}",
    ];
    let mut command = trainer_running(&["train:5:0.05"]);
    for line in malformed {
        let hex: String = line.iter().map(|b| format!("{b:02x}")).collect();
        command.push(format!("bytes:{hex}").into());
    }
    command.extend(["train:5:0.05".into(), "line:{\"step\": 9".into()]);
    command.push("train:1:0.05".into());
    let (output, artifact) = run_soak(&soak, &["--stale-progress", "5s"], command);
    assert_exit(&output, 0, &artifact);
    let summary = &artifact["summary"];
    // The 8, and a beat's line cut short before its newline.
    assert_eq!(summary["heartbeat_errors"], heartbeat_errors(9));
    assert_eq!(count_of(&summary["steps"]["train"]["count"]), 11);
    assert_eq!(
        summary["steps"].as_object().unwrap().len(),
        1,
        "no phase of a malformed line: {}",
        summary["steps"]
    );
}

/// A line cut short at the end of the file — the trainer died halfway through writing it — is
/// a malformed line: it ends no step and is counted.
#[test]
fn a_last_line_without_its_newline_is_counted_malformed() {
    let soak = Soak::new();
    let (output, artifact) = run_soak(
        &soak,
        &["--stale-progress", "5s"],
        shell_running(r#"$TRAINER train:5:0.05 && printf '{"step": 5, "lo' >> "$BEATS""#),
    );
    assert_exit(&output, 0, &artifact);
    let summary = &artifact["summary"];
    assert_eq!(count_of(&summary["steps"]["train"]["count"]), 5);
    assert_eq!(
        summary["heartbeat_errors"]["malformed"], 1,
        "{}",
        summary["heartbeat_errors"]
    );
}

/// The most a supervisor of these soaks may hold resident: holding the 100 MB line or the
/// 200 MB flood would go over it.
const PEAK_RSS_MAX: u64 = 64 << 20;

/// One line of 100 MB, written in two parts with a pause between (so the supervisor reads the
/// start of it): counted `oversized` (what was past the backlog's bound skipped as `dropped`),
/// never held, and the beats after it (steps 100 on) recorded; the soak passes on its own
/// terms. Under a 1 GiB address-space limit, and no process of the tree grew past
/// [`PEAK_RSS_MAX`].
#[test]
fn a_line_of_100_mb_is_counted_and_skipped_in_bounded_memory() {
    let soak = Soak::new();
    let (output, artifact, peak) = run_bounded_soak(
        &soak,
        &["--stale-progress", "20s", "--startup-timeout", "60s"],
        shell_running(
            r#"$TRAINER train:3:0.1 &&
            head -c 1000000 /dev/zero | tr '\0' x >> "$BEATS" && sleep 2 &&
            head -c 99000000 /dev/zero | tr '\0' x >> "$BEATS" && echo >> "$BEATS" &&
            $TRAINER from:100 sleep:1 train:100:0.1"#,
        ),
    );
    assert_exit(&output, 0, &artifact);
    let errors = &artifact["summary"]["heartbeat_errors"];
    let oversized = count_of(&errors["oversized"]);
    let dropped = count_of(&errors["dropped"]);
    assert!(oversized <= 1, "one line: {errors}");
    assert!(oversized + dropped > 0, "the line is counted: {errors}");
    assert!(dropped <= 100_000_001, "{errors}");
    assert_eq!(count_of(&errors["malformed"]), 0, "{errors}");
    let train = &artifact["summary"]["steps"]["train"];
    assert!(count_of(&train["count"]) <= 103, "{train}");
    assert!(
        count_of(&train["last"]) >= 100,
        "the beats after the line are read: {train}"
    );
    assert!(
        peak < PEAK_RSS_MAX,
        "a process of the soak peaked at {} MiB",
        peak >> 20
    );
}

/// 200 MB appended as fast as `yes` writes it: of beats (more than a poll takes), then of lines
/// that are not beats. The reader keeps to its budget and skips the backlog it cannot read,
/// counting it; memory stays bounded (a 1 GiB address-space limit, no process past
/// [`PEAK_RSS_MAX`]), and the soak is judged on its own terms: the trainer that beats on after
/// the flood passes; the one that stops beating fails on the stale period.
#[test]
fn a_flood_of_200_mb_is_skipped_and_counted_in_bounded_memory_and_the_soak_still_judged() {
    let soak = Soak::new();
    let (output, artifact, peak) = run_bounded_soak(
        &soak,
        &["--stale-progress", "20s", "--startup-timeout", "60s"],
        shell_running(
            r#"$TRAINER train:3:0.1 &&
            yes '{"step": 7, "phase": "train", "loss": 0.5}' | head -c 200000000 >> "$BEATS" &&
            $TRAINER sleep:1 train:30:0.1"#,
        ),
    );
    assert_exit(&output, 0, &artifact);
    let errors = &artifact["summary"]["heartbeat_errors"];
    assert!(
        count_of(&errors["dropped"]) > 0,
        "a backlog past 64 MiB is skipped: {errors}"
    );
    assert!(count_of(&errors["dropped"]) <= 200_000_000, "{errors}");
    assert!(
        peak < PEAK_RSS_MAX,
        "a process of the soak peaked at {} MiB",
        peak >> 20
    );
    assert_goodput_adds_up(&artifact);

    let (output, artifact, peak) = run_bounded_soak(
        &soak,
        &["--stale-progress", "5s", "--startup-timeout", "60s"],
        shell_running(
            r#"$TRAINER train:3:0.1 sleep:2 &&
            yes | head -c 200000000 >> "$BEATS" && $TRAINER hang"#,
        ),
    );
    assert_exit(&output, 1, &artifact);
    let outcome = &artifact["outcome"];
    assert_eq!(outcome["failure_kind"], "stale_progress", "{outcome}");
    let errors = &artifact["summary"]["heartbeat_errors"];
    assert!(
        count_of(&errors["malformed"]) > 0,
        "`y` is not a beat: {errors}"
    );
    // The beats before the flood, read in the 2 s before it came (one the flood overtook
    // unread is skipped with it).
    let train = count_of(&artifact["summary"]["steps"]["train"]["count"]);
    assert!((1..=3).contains(&train), "{train} beats");
    assert!(
        peak < PEAK_RSS_MAX,
        "a process of the soak peaked at {} MiB",
        peak >> 20
    );
}
