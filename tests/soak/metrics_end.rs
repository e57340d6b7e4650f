//! The metrics file after the soak: its last figures kept beside the verdict; removed, and said,
//! when the verdict cannot be written into it; and the same file taken up by a later soak once
//! its soak no longer runs, without `--force`, while a running soak's file is still refused.

use std::path::Path;
use std::time::Duration;

use crate::common::*;

use super::metrics::{has, label_value, spawn_trainer, stderr_of, verdict};
use super::*;

/// The value of the series `name{soak="…"}` in `text`, if it has one.
fn value_of<'t>(text: &'t str, name: &str) -> Option<&'t str> {
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{soak=")))
        .and_then(|l| l.rsplit_once(' '))
        .map(|(_, v)| v)
}

/// Waits until the metrics file at `path` is a running soak's; its soak's id.
fn running_soak(path: &Path) -> String {
    let mut text = String::new();
    eventually("the running soak's file", Duration::from_secs(120), || {
        text = std::fs::read_to_string(path).unwrap_or_default();
        text.contains("unilab_soak_tree_rss_bytes{")
            && value_of(&text, "unilab_soak_running") == Some("1")
    });
    label_value(&text, "unilab_soak_running", "soak").expect("a soak label")
}

/// After the verdict the file dropped `unilab_soak_tree_pss_bytes` and said RSS, processes and
/// threads were 0: the last sample, after the command's exit, found the tree gone, and an alert
/// on memory or on a tree of no processes read that as the run's end state. The tree's last
/// figures stay beside `unilab_soak_running 0` and the verdict.
#[test]
fn the_final_metrics_file_keeps_the_trees_last_figures_beside_the_verdict() {
    let soak = Soak::new();
    let metrics = soak.root.root().join("unilab.prom");
    let stop = soak.root.root().join("stop");
    let child = spawn_trainer(&soak, &metrics, &stop, 0, &[]);
    let soak_id = running_soak(&metrics);
    std::fs::write(&stop, "").unwrap();
    let verdict = verdict(child);
    assert_eq!(verdict["outcome"]["status"], "passed", "{verdict}");
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert!(has(&text, "unilab_soak_running", &soak_id, "0"), "{text}");
    assert!(has(&text, "unilab_soak_passed", &soak_id, "1"), "{text}");
    for series in [
        "unilab_soak_tree_pss_bytes",
        "unilab_soak_tree_rss_bytes",
        "unilab_soak_processes",
        "unilab_soak_threads",
    ] {
        let value = value_of(&text, series).unwrap_or_else(|| panic!("no {series}: {text}"));
        assert_ne!(value, "0", "{series}: {text}");
    }
}

/// A soak of the beating trainer whose metrics file is at `metrics`, stopped by `stop` once
/// `between` was done to its running file; its standard error and verdict.
fn soak_ending_after(
    soak: &Soak,
    metrics: &Path,
    between: impl FnOnce(),
) -> (String, serde_json::Value) {
    let stop = soak.root.root().join("stop");
    let mut child = spawn_trainer(soak, metrics, &stop, 0, &[]);
    let stderr = stderr_of(&mut child);
    running_soak(metrics);
    between();
    std::fs::write(&stop, "").unwrap();
    let verdict = verdict(child);
    let said = stderr.lock().unwrap().clone();
    (said, verdict)
}

/// The final write failed (a full disk) and the file was left as the last sample wrote it:
/// `unilab_soak_running 1` for as long as it was served, a soak running for ever. The file is
/// removed, so an alert on the missing series fires, and that is said.
#[test]
fn a_final_metrics_write_that_fails_on_a_full_disk_removes_the_file_and_says_so() {
    if !is_root() {
        eprintln!(
            "skipped: mounting a small tmpfs needs root (the unprivileged case is tested with a read-only directory)"
        );
        return;
    }
    let Some(disk) = SmallDisk::mount(1 << 20) else {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    };
    let soak = Soak::new();
    let metrics = disk.path().join("unilab.prom");
    let (said, verdict) = soak_ending_after(&soak, &metrics, || {
        disk.fill();
    });
    assert_eq!(verdict["outcome"]["status"], "passed", "{verdict}");
    assert!(!metrics.exists(), "the file is removed");
    assert!(
        said.contains("cannot write the verdict to the metrics file")
            && said.contains("it is removed, so that it does not say the soak still runs"),
        "{said}"
    );
}

/// As an unprivileged user a read-only directory fails the final write and the removal alike:
/// that is said, so that whoever reads the file knows it still says "running".
#[test]
fn a_final_metrics_write_that_fails_in_a_read_only_directory_says_the_file_is_left() {
    use std::os::unix::fs::PermissionsExt;
    if is_root() {
        eprintln!("skipped: root writes a read-only directory (the full disk's test covers root)");
        return;
    }
    let soak = Soak::new();
    let dir = soak.root.root().join("textfiles");
    private_dir_all(&dir);
    let metrics = dir.join("unilab.prom");
    let (said, verdict) = soak_ending_after(&soak, &metrics, || {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o500)).unwrap();
    });
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(verdict["outcome"]["status"], "passed", "{verdict}");
    assert!(
        said.contains("cannot write the verdict to the metrics file")
            && said.contains("it still says the soak runs"),
        "{said}"
    );
}

/// `soak run` of `true` with `--metrics-file metrics`: its status and standard error.
fn quick_soak(soak: &Soak, metrics: &Path) -> (Option<i32>, String) {
    let _ = std::fs::remove_file(soak.artifact_path());
    let out = soak
        .unilab()
        .args(["soak", "run", "--allow-no-progress", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .arg("--metrics-file")
        .arg(metrics)
        .args(["--sample-interval", "0.1", "--", "true"])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The soak id the metrics file at `path` names.
fn soak_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    label_value(&text, "unilab_soak_running", "soak").expect("a soak label")
}

/// The next soak given the same `--metrics-file` was refused ("already exists", `--force`),
/// though a textfile is rewritten by design: a file whose soak ended (it says
/// `unilab_soak_running 0`) or whose supervisor is gone (killed, it says it runs) is taken up
/// without `--force`; a running soak's file is still refused, naming that soak.
#[test]
fn a_later_soak_rewrites_the_metrics_file_of_a_soak_that_no_longer_runs() {
    let soak = Soak::new();
    let metrics = soak.root.root().join("unilab.prom");
    let (code, said) = quick_soak(&soak, &metrics);
    assert_eq!(code, Some(0), "{said}");
    let first = soak_of(&metrics);
    let (code, said) = quick_soak(&soak, &metrics);
    assert_eq!(code, Some(0), "{said}");
    let second = soak_of(&metrics);
    assert_ne!(first, second, "rewritten by the later soak");

    // A running soak's file is refused, naming it.
    std::fs::remove_file(soak.artifact_path()).unwrap();
    let stop = soak.root.root().join("stop");
    let mut child = spawn_trainer(&soak, &metrics, &stop, 0, &[]);
    let running = running_soak(&metrics);
    let (code, said) = quick_soak(&soak, &metrics);
    assert_eq!(code, Some(3), "{said}");
    for part in [
        format!("is the metrics file of soak `{running}`, which may still be running"),
        format!("its supervisor, pid {}, is running", child.id()),
        "--force".into(),
    ] {
        assert!(said.contains(&part), "{part}: {said}");
    }
    assert_eq!(soak_of(&metrics), running, "left as it is");

    // Its supervisor killed, the file says it runs: no one will write it again.
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::write(&stop, "").unwrap();
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert!(has(&text, "unilab_soak_running", &running, "1"), "{text}");
    let (code, said) = quick_soak(&soak, &metrics);
    assert_eq!(code, Some(0), "{said}");
    assert_ne!(soak_of(&metrics), running);
}
