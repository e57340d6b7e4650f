//! What `soak run` writes its verdict to, proven before it starts; and how `soak list` and
//! `soak show` tell the end of a soak whose supervisor vanished.

use std::path::Path;

use crate::common::*;
use crate::soak::Soak;
use predicates::prelude::*;
use serde_json::Value;

/// `soak run` with `env` set, writing `--output output` (and `--report report`) for a command
/// that leaves `ran` behind if it is ever started.
fn run_writing(
    soak: &Soak,
    env: &[(&str, &str)],
    output: &str,
    report: Option<&str>,
    ran: &Path,
) -> assert_cmd::assert::Assert {
    let mut cmd = soak.unilab();
    cmd.current_dir(soak.root.root())
        .envs(env.iter().copied())
        .args(["soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .args(["--output", output]);
    if let Some(report) = report {
        cmd.args(["--report", report]);
    }
    cmd.args(["--allow-no-progress", "--sample-interval", "0.1", "--"])
        .arg("touch")
        .arg(ran)
        .assert()
}

/// The soaks the log records, as `soak list --json` gives them.
fn listed(soak: &Soak) -> Vec<Value> {
    let out = soak
        .unilab()
        .args(["--json", "soak", "list"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// A name over 255 bytes (typed, or a `{job}` of 10 KB) passed the check before the soak —
/// a temporary file of another name was created beside it — so the soak ran to its end and
/// only then failed with "File name too long"; for `--report` the error even said it could not
/// write "the artifact". The real name is now created (and removed) before anything starts:
/// refused with exit 3, nothing run, nothing recorded, and the report named as the report.
#[test]
fn a_name_too_long_for_the_filesystem_is_refused_before_the_soak_starts() {
    let soak = Soak::new();
    let ran = soak.root.root().join("ran");
    let long = format!("{}.json", "a".repeat(300));
    let huge_job = "7".repeat(10 * 1024);
    let slurm = [("SLURM_JOB_ID", huge_job.as_str()), ("SLURM_PROCID", "0")];
    for (env, output, report, names) in [
        (&[][..], long.as_str(), None, "cannot write the artifact"),
        (
            &slurm[..],
            "soak-{job}.json",
            None,
            "cannot write the artifact",
        ),
        (
            &[][..],
            "fine.json",
            Some(long.as_str()),
            "cannot write the report",
        ),
    ] {
        let refused = run_writing(&soak, env, output, report, &ran);
        assert!(!ran.exists(), "{output}: the command ran");
        assert_eq!(
            listed(&soak),
            Vec::<Value>::new(),
            "{output}: a soak was recorded"
        );
        refused
            .code(3)
            .stderr(predicate::str::contains(names))
            .stderr(predicate::str::contains("File name too long"))
            .stderr(predicate::str::contains("hint: choose a shorter name"));
    }
    assert!(!soak.root.root().join("fine.json").exists());
}

/// `{rank}` was filled in with whatever the launcher's variable held: `SLURM_PROCID=../x`
/// wrote the artifact outside the directory given, a newline ended up in a file's name, and
/// `SLURM_JOB_ID=..` climbed out of the directory as a whole path component. A placeholder
/// whose value holds `/`, `..` or a control character is refused now, before anything starts
/// (exit 3: the command line is right, what the environment gave cannot name a file safely).
#[test]
fn a_placeholder_whose_value_would_leave_the_directory_or_break_the_name_is_refused() {
    let soak = Soak::new();
    let ran = soak.root.root().join("ran");
    private_dir_all(&soak.root.root().join("out/inner"));
    for (job, rank, output, says) in [
        (
            "1",
            "../x",
            "out/{rank}.json",
            "`{rank}` stands for `../x` here (SLURM_PROCID or RANK)",
        ),
        (
            "1",
            "a\nb",
            "out/{rank}.json",
            "`{rank}` stands for `a\\nb`",
        ),
        ("..", "0", "out/{job}/x.json", "`{job}` stands for `..`"),
        ("..", "0", "out/inner/{job}", "`{job}` stands for `..`"),
    ] {
        let refused = run_writing(
            &soak,
            &[("SLURM_JOB_ID", job), ("SLURM_PROCID", rank)],
            output,
            None,
            &ran,
        );
        assert!(!ran.exists(), "{output}: the command ran");
        refused.code(3).stderr(predicate::str::contains(says));
    }
    let written: Vec<_> = walk(soak.root.root())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(written, Vec::<std::path::PathBuf>::new());
    assert!(!soak.root.root().join("x.json").exists());
    assert_eq!(listed(&soak), Vec::<Value>::new());
    // A value that is only unusual is taken as it is.
    run_writing(
        &soak,
        &[("SLURM_JOB_ID", "12_3"), ("SLURM_PROCID", "0")],
        "out/{job}-{rank}.json",
        None,
        &ran,
    )
    .success();
    assert!(soak.root.root().join("out/12_3-0.json").is_file());
    soak.unilab().args(["log", "verify"]).assert().success();
}

/// Every file under `dir`, directories followed.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
