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

#[test]
fn soak_show_of_a_failed_soak() {
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
