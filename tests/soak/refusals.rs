//! What `soak run` checks before anything runs, and refuses with a hint: the progress directory
//! (trustworthy, present, readable, not swapped), the parameters, the output, `TMPDIR` and the
//! current directory.

use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use predicates::prelude::*;
use serde_json::Value;
use unilab::testing::artifact::digest_matches;

use super::*;

#[test]
fn an_untrustworthy_progress_directory_is_refused() {
    let soak = Soak::new();
    let open = soak.root.root().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    refused(
        soak.unilab()
            .args(["soak", "run", "--progress-dir"])
            .arg(&open)
            .arg("--output")
            .arg(soak.artifact_path())
            .args(["--", "true"]),
        3,
        &["others can write to it"],
    );
    if is_root() {
        let theirs = soak.root.root().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        refused(
            soak.unilab()
                .args(["soak", "run", "--progress-dir"])
                .arg(&theirs)
                .arg("--output")
                .arg(soak.artifact_path())
                .args(["--", "true"]),
            3,
            &["it belongs to uid 65534"],
        );
    } else {
        eprintln!("skipped the foreign-owner case: needs root to chown");
    }
    assert!(
        !soak.root.log_path().exists(),
        "a refused soak records nothing"
    );
}

#[test]
fn invalid_parameters_are_usage_errors() {
    let soak = Soak::new();
    let base = |extra: &[&str]| {
        let mut cmd = soak.unilab();
        cmd.args(["soak", "run", "--progress-dir"])
            .arg(soak.progress())
            .arg("--output")
            .arg(soak.artifact_path())
            .args(extra);
        cmd
    };
    refused(
        base(&[
            "--sample-interval",
            "5",
            "--startup-timeout",
            "1",
            "--",
            "true",
        ]),
        2,
        &["at least one sample interval"],
    );
    refused(
        base(&["--sample-interval", "fast", "--", "true"]),
        2,
        &["is not a duration"],
    );
    refused(
        base(&["--env", "=VALUE", "--", "true"]),
        2,
        &["is not KEY=VALUE"],
    );
    base(&[]).assert().code(2);
    refused(
        soak.unilab().args(["soak", "show", "nope"]),
        3,
        &["no soak `nope`"],
    );
}

/// A bad `--output` is found before the soak starts (not after days of running), a rename never
/// replaces what is not a regular file, and the artifact gets the mode the user's umask gives.
#[test]
fn the_output_is_checked_before_the_soak_and_written_with_the_users_umask() {
    let soak = Soak::new();
    let fifo = soak.root.root().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let link = soak.root.root().join("link");
    std::os::unix::fs::symlink(soak.root.root().join("elsewhere.json"), &link).unwrap();
    let mut targets = vec![fifo.clone(), link.clone(), soak.progress()];
    // A device of its own rather than the system's /dev/null: were the check ever lost, the
    // test must not replace the machine's.
    let null = soak.root.root().join("null");
    if is_root() {
        nix::sys::stat::mknod(
            &null,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        targets.push(null.clone());
    } else {
        // Root writes anywhere; an ordinary user cannot write into a directory of root's.
        targets.push(PathBuf::from("/artifact.json"));
    }
    for target in &targets {
        let started = std::time::Instant::now();
        refused(
            soak.unilab()
                .args(["soak", "run", "--progress-dir"])
                .arg(soak.progress())
                .arg("--output")
                .arg(target)
                .args(["--", "sleep", "30"]),
            3,
            &["cannot write the artifact"],
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{target:?}: refused at once"
        );
    }
    if is_root() {
        let null = std::fs::symlink_metadata(&null).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_char_device(
            &null.file_type()
        ));
    }
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        !soak.root.log_path().exists(),
        "nothing started, nothing recorded"
    );

    for (umask, mode) in [("077", 0o600), ("022", 0o644)] {
        // A new file each time: the mode of one the rename replaces is not the question.
        let _ = std::fs::remove_file(soak.artifact_path());
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!("umask {umask} && exec \"$@\""))
            .arg("sh")
            .arg(unilab_bin())
            .arg("--root")
            .arg(soak.root.root())
            .args(["soak", "run", "--allow-no-progress", "--progress-dir"])
            .arg(soak.progress())
            .arg("--output")
            .arg(soak.artifact_path())
            .args(["--sample-interval", "0.1", "--", "true"])
            .env("PATH", path_with_fixtures())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "umask {umask}");
        let written = std::fs::metadata(soak.artifact_path())
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&written) & 0o777,
            mode,
            "umask {umask}"
        );
    }
}

/// A mistyped `--progress-dir` was told to `chmod go-w DIR`: a directory that is not there is
/// said to be missing, with how to create it.
#[test]
fn a_missing_progress_directory_is_hinted_to_be_created_not_chmodded() {
    let soak = Soak::new();
    let typo = soak.root.root().join("progres");
    let refused = soak
        .unilab()
        .args(["soak", "run", "--progress-dir"])
        .arg(&typo)
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--", "true"])
        .assert()
        .code(3);
    let stderr = String::from_utf8_lossy(&refused.get_output().stderr).into_owned();
    assert!(stderr.contains("it does not exist"), "{stderr}");
    let hint = stderr.lines().find(|l| l.starts_with("hint: ")).unwrap();
    assert!(
        hint.contains(&format!("mkdir -p {}", typo.display())) && !hint.contains("chmod"),
        "{stderr}"
    );
}

/// An `--output` that cannot be written was refused with a hint to `soak export ID` (a literal
/// `ID`, of a soak that never ran); and as root, `access(2)` let a pseudo file system through,
/// so the whole command ran before the artifact failed. Writability is proven by creating a
/// file, before anything runs.
#[test]
fn an_output_that_cannot_be_created_is_refused_before_anything_runs() {
    let soak = Soak::new();
    let ran = soak.root.root().join("ran");
    // `/proc` takes no new file, not even root's.
    let refused = soak
        .unilab()
        .args(["soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .args(["--output", "/proc/unilab-artifact.json", "--", "touch"])
        .arg(&ran)
        .assert()
        .code(3);
    let stderr = String::from_utf8_lossy(&refused.get_output().stderr).into_owned();
    assert!(stderr.contains("cannot write the artifact"), "{stderr}");
    assert!(
        !stderr.contains("soak export") && !stderr.contains(" ID "),
        "no soak to export: {stderr}"
    );
    assert!(!ran.exists(), "the command did not run");
    assert!(!soak.root.log_path().exists(), "nothing was recorded");
}

/// `soak run` replaced an existing `--output` silently where `soak export` refuses without
/// `--force`: refused before the command runs, replaced with `--force`.
#[test]
fn an_existing_output_is_refused_before_the_soak_unless_forced() {
    let soak = Soak::new();
    std::fs::write(soak.artifact_path(), "kept").unwrap();
    let ran = soak.root.root().join("ran");
    let run = |force: &[&str]| {
        let mut cmd = soak.unilab();
        cmd.args([
            "soak",
            "run",
            "--allow-no-progress",
            "--sample-interval",
            "0.1",
        ])
        .args(force)
        .arg("--progress-dir")
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--", "touch"])
        .arg(&ran)
        .assert()
    };
    let refused = run(&[]).code(3);
    let stderr = String::from_utf8_lossy(&refused.get_output().stderr).into_owned();
    assert!(stderr.contains("already exists"), "{stderr}");
    assert!(stderr.contains("add `--force` to replace it"), "{stderr}");
    assert!(!ran.exists(), "refused before the command ran");
    assert_eq!(
        std::fs::read_to_string(soak.artifact_path()).unwrap(),
        "kept"
    );

    run(&["--force"]).success();
    assert!(ran.exists());
    assert!(digest_matches(
        &std::fs::read(soak.artifact_path()).unwrap()
    ));
}

/// With a parent others can write to, another user could swap the progress directory for one of
/// their own and fake progress: the whole way to it is checked, not its last component.
#[test]
fn a_progress_directory_under_a_directory_others_can_write_is_refused() {
    let soak = Soak::new();
    let open = soak.root.root().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let progress = open.join("progress");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&progress)
        .unwrap();
    refused(
        soak.unilab()
            .args(["soak", "run", "--progress-dir"])
            .arg(&progress)
            .arg("--output")
            .arg(soak.artifact_path())
            .args(["--", "true"]),
        3,
        &[&format!(
            "`{}` on the way to it: others can write to it and it is not sticky",
            open.display()
        )],
    );
    assert!(!soak.root.log_path().exists());
}

/// The progress directory is held from the start: swapping another directory in at its path
/// (as another user with a writable parent could) neither fakes progress nor hides the swap.
#[test]
fn a_progress_directory_swapped_under_the_soak_fakes_nothing() {
    let soak = Soak::new();
    let run = soak
        .command()
        .args(["--json", "soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args([
            "--sample-interval",
            "0.1",
            "--startup-timeout",
            "3s",
            "--",
            "sleep",
            "30",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Once it samples, the path is made to name a directory that "shows progress".
    eventually("the first sample", Duration::from_secs(20), || {
        soak.root.log_path().exists()
            && history_kinds(soak.unilab(), &[]).contains(&"soak_sampled".to_owned())
    });
    std::fs::rename(soak.progress(), soak.root.root().join("original")).unwrap();
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(soak.progress())
        .unwrap();
    // Each fake step is written, then a sample is taken after it: the soak had its chance to
    // see each.
    let sampled = || {
        history_kinds(soak.unilab(), &[])
            .iter()
            .filter(|k| *k == "soak_sampled")
            .count()
    };
    for i in 0..3 {
        let before = sampled();
        std::fs::write(soak.progress().join(format!("fake-{i}")), b"step").unwrap();
        if !within(Duration::from_secs(20), || sampled() > before) {
            break; // The soak ended (its startup timeout), which is what it is waiting for.
        }
    }
    let output = run.wait_with_output().unwrap();
    let verdict: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        verdict["outcome"]["failure_kind"], "startup_timeout",
        "{verdict}"
    );
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    let said = artifact["samples"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["errors"].as_array().cloned().unwrap_or_default())
        .any(|e| {
            e.as_str()
                .unwrap_or("")
                .contains("no longer names the directory the soak watches")
        });
    assert!(said, "the samples say the path was swapped");
}

/// `unilab snapshot` in a current directory that was removed reported "internal error" and exit
/// 70, a bug in unilab by the documented codes, although unilab was fine and the environment was
/// not. A failure of the environment is a user-actionable error: exit 3, saying what it could
/// not do and why.
#[test]
fn a_current_directory_that_is_gone_is_an_environment_error_not_a_bug() {
    let soak = Soak::new();
    let gone = soak.root.root().join("gone");
    std::fs::create_dir(&gone).unwrap();
    let output = Command::new("sh")
        .args([
            "-c",
            r#"cd "$GONE" && rmdir "$GONE" && exec "$UNILAB" --root "$ROOT" snapshot"#,
        ])
        .env("GONE", &gone)
        .env("UNILAB", unilab_bin())
        .env("ROOT", soak.root.root())
        .env("PATH", path_with_fixtures())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("error: cannot read the current directory\n  caused by: "),
        "{stderr}"
    );
    assert!(!stderr.contains("internal error"), "{stderr}");
}

/// Export and report pass the rows through a temporary file: where `$TMPDIR` cannot hold one,
/// they say so and how to fix it (not a failure to write the output); `soak show` keeps no rows
/// and needs none.
#[test]
fn an_unusable_tmpdir_is_named_as_such() {
    let soak = Soak::new();
    let (output, _) = soak.run(&[], &["--steps", "3", "--step-seconds", "0.05"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let missing = soak.root.root().join("no-such-tmp");
    for args in [
        &["soak", "export", "latest"][..],
        &["soak", "export", "latest", "--format", "csv"],
        &["soak", "report", "latest"],
    ] {
        soak.unilab()
            .env("TMPDIR", &missing)
            .args(args)
            .assert()
            .code(3)
            .stderr(predicate::str::contains(format!(
                "cannot keep the rows in a temporary file in `{}`",
                missing.display()
            )))
            .stderr(predicate::str::contains("set TMPDIR"))
            .stderr(predicate::str::contains("standard output").not());
    }
    soak.unilab()
        .env("TMPDIR", &missing)
        .args(["soak", "show", "latest"])
        .assert()
        .success();
}

/// A subdirectory of the progress directory that the soak cannot read was skipped without a
/// word: what it held silently counted for nothing. Each sample now says so. (As root every
/// directory is readable: the test needs an ordinary user, as CI's unprivileged run is.)
#[test]
fn an_unreadable_part_of_the_progress_directory_is_said() {
    use std::os::unix::fs::PermissionsExt;
    if is_root() {
        eprintln!("skipped: root reads every directory; run as an ordinary user");
        return;
    }
    let soak = Soak::new();
    let hidden = soak.progress().join("hidden");
    std::fs::create_dir(&hidden).unwrap();
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o000)).unwrap();
    let (output, artifact) = soak.run(&[], &["--steps", "4", "--step-seconds", "0.1"]);
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let first = &artifact["samples"][0]["errors"];
    assert!(
        first
            .to_string()
            .contains("cannot read 1 subdirectory of the progress directory"),
        "{first}"
    );
}

/// `--job`, `--rank` and `--on-job-alarm` are checked as they are parsed: a name that could not
/// be one directory of the state root, a rank that is not a whole number, or an unknown action
/// is a usage error that says what is wrong and what to give; good ones are taken.
#[test]
fn the_job_flags_are_checked_as_they_are_parsed() {
    let soak = Soak::new();
    let run = |extra: &[&str]| {
        let mut cmd = soak.unilab();
        cmd.args(["soak", "run", "--progress-dir"])
            .arg(soak.progress())
            .arg("--output")
            .arg(soak.artifact_path())
            .args(extra)
            .args(["--", "true"]);
        cmd
    };
    for (flags, says) in [
        (
            &["--job", "../x"][..],
            "holds `/`, which would put the job's directory elsewhere",
        ),
        (&["--job", ".."], "would name the directory itself"),
        (&["--job", "a b"], "holds a space"),
        (&["--job=-x"], "starts with `-`"),
        (&["--job", &"x".repeat(129)], "longer than 128 bytes"),
        (&["--job", "1", "--rank", "two"], "a rank is a whole number"),
        (&["--job", "1", "--rank=-1"], "a rank is a whole number"),
        (
            &["--on-job-alarm", "sometimes"],
            "[possible values: capture, stop, ignore]",
        ),
    ] {
        refused(run(flags), 2, &[says]);
    }
    let hint = refused(run(&["--job", "a/b"]), 2, &["`--job llama-run3`"]);
    assert!(hint.contains("for '--job <NAME>'"), "{hint}");
    assert!(
        !soak.root.log_path().exists(),
        "a refused soak records nothing"
    );
    let (output, artifact) = soak.run(
        &[
            "--job",
            "llama-run3",
            "--rank",
            "2",
            "--on-job-alarm",
            "stop",
        ],
        &["--steps", "2", "--step-seconds", "0.05"],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(artifact["outcome"]["status"], "passed");
}
