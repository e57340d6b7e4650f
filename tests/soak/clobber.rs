//! What a soak writes never takes the place of what another flag asked for, nor of what it
//! watches: `--output`, `--report` and `--metrics-file` naming one file are refused (exit 2)
//! however the file is spelled; a progress directory that holds, or lies inside, what unilab
//! writes while it runs is refused (exit 3), since unilab's own writes would be taken for the
//! command's progress.

use std::path::Path;
use std::process::Command;

use crate::common::*;

use super::*;

/// `soak run` of a command that leaves `ran` behind if it ever starts, with `flags` after the
/// progress directory.
pub(super) fn run_flags(
    soak: &Soak,
    flags: &[&std::ffi::OsStr],
    ran: &Path,
) -> assert_cmd::Command {
    let mut cmd = soak.unilab();
    cmd.current_dir(soak.root.root())
        .args(["soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .args(flags)
        .args(["--allow-no-progress", "--sample-interval", "0.1", "--"])
        .arg("touch")
        .arg(ran);
    cmd
}

/// `--output F --report F` was taken: the report, written after the artifact, replaced it, and
/// the artifact was lost; with `--metrics-file F` every sample rewrote it. The three files are
/// compared by their directory's device and inode and their name, after the placeholders, so
/// `d/../F` and `link/F` are `F` too.
#[test]
fn one_file_named_by_two_of_output_report_and_metrics_file_is_refused_however_spelled() {
    let soak = Soak::new();
    let ran = soak.root.root().join("ran");
    let dir = soak.root.root().join("d");
    private_dir_all(&dir);
    std::os::unix::fs::symlink(&dir, soak.root.root().join("link")).unwrap();
    let output = dir.join("F.json");
    for (flag, other) in [
        ("--report", "d/F.json"),
        ("--metrics-file", "d/F.json"),
        ("--report", "d/../d/F.json"),
        ("--metrics-file", "link/F.json"),
        // Filled in, the placeholder names the same file.
        ("--report", "link/{host}.json"),
    ] {
        let output = if other.contains("{host}") {
            dir.join(format!("{}.json", soak.root.paths().host))
        } else {
            output.clone()
        };
        let said = refused(
            run_flags(
                &soak,
                &[
                    "--output".as_ref(),
                    output.as_os_str(),
                    flag.as_ref(),
                    other.as_ref(),
                ],
                &ran,
            ),
            2,
            &["`--output` and `", "name the same file"],
        );
        assert!(said.contains(&format!("`{flag}`")), "{said}");
        assert!(!ran.exists(), "{flag} {other}: the command ran");
    }
    refused(
        run_flags(
            &soak,
            &[
                "--output".as_ref(),
                "d/A.json".as_ref(),
                "--report".as_ref(),
                "d/R.html".as_ref(),
                "--metrics-file".as_ref(),
                "link/R.html".as_ref(),
            ],
            &ran,
        ),
        2,
        &["`--report` and `--metrics-file` name the same file"],
    );
    assert!(!ran.exists());
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing written"
    );
}

/// A `--metrics-file` inside `--progress-dir`, or a state root inside it, made unilab's own
/// writes (every sample) the command's progress: a hung trainer was never judged stale. So was
/// a progress directory inside unilab's state directory. Each is refused before anything runs,
/// exit 3, by the directories' devices and inodes (a spelling through a link included).
#[test]
fn a_progress_directory_holding_or_inside_what_unilab_writes_is_refused() {
    let soak = Soak::new();
    let ran = soak.root.root().join("ran");
    let link = soak.root.root().join("to-progress");
    std::os::unix::fs::symlink(soak.progress(), &link).unwrap();
    let output = soak.root.root().join("artifact.json");
    let inside_metrics = link.join("unilab.prom");
    let mut cmd = run_flags(
        &soak,
        &[
            "--output".as_ref(),
            output.as_os_str(),
            "--metrics-file".as_ref(),
            inside_metrics.as_os_str(),
        ],
        &ran,
    );
    refused(
        &mut cmd,
        3,
        &[
            "refusing the progress directory",
            "it holds the metrics file",
        ],
    );
    // The state root inside the progress directory.
    let mut cmd = Command::new(unilab_bin());
    cmd.env_clear()
        .env("PATH", path_with_fixtures())
        .env("HOME", soak.root.root())
        .arg("--root")
        .arg(soak.progress().join("state"))
        .args(["soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(&output)
        .args(["--allow-no-progress", "--", "touch"])
        .arg(&ran);
    let out = cmd.output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(said.contains("it holds unilab's state directory"), "{said}");
    // The progress directory inside the state directory, where the log and the soaks' files are.
    let inside = soak.root.paths().user_dir().join("soaks");
    private_dir_all(&inside);
    let mut cmd = soak.unilab();
    cmd.args(["soak", "run", "--progress-dir"])
        .arg(&inside)
        .arg("--output")
        .arg(&output)
        .args(["--allow-no-progress", "--", "touch"])
        .arg(&ran);
    refused(
        &mut cmd,
        3,
        &[
            "it is inside unilab's state directory",
            "own writes would count",
        ],
    );
    assert!(!ran.exists(), "the command ran");
    assert!(!output.exists());
}
