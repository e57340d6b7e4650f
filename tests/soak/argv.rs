//! A command line that is not UTF-8: its arguments run as their bytes and are recorded lossily
//! (`command_lossy`); what `soak run` records of its own flags as text refuses such a value.

use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use crate::common::*;
use serde_json::Value;

use super::*;

/// An argument that is not UTF-8 could not be supervised: clap refused the command line (exit
/// 2), so a trainer given a path or a token in another encoding could not be soaked at all. It
/// is now run as its bytes — the command receives exactly them — and recorded lossily, U+FFFD
/// for what is not UTF-8, with `command_lossy: true` in the artifact, `soak show` and
/// `history`; a credential in it is masked as in any argument.
#[test]
fn an_argument_that_is_not_utf8_is_run_as_its_bytes_and_recorded_lossily() {
    let soak = Soak::new();
    let written = soak.root.root().join("written");
    let bytes = OsStr::from_bytes(b"\xff\xfe");
    let url = OsStr::from_bytes(b"https://bob:hunter2@example.com/\xff");
    let output = soak
        .unilab()
        .args(["--json", "soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--allow-no-progress", "--sample-interval", "0.1", "--"])
        .args(["sh", "-c", "printf %s \"$1\" > \"$2\"", "sh"])
        .arg(bytes)
        .arg(&written)
        .arg(url)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(std::fs::read(&written).unwrap(), b"\xff\xfe");

    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    let id = artifact["soak_id"].as_str().unwrap().to_owned();
    assert_eq!(artifact["command_lossy"], true, "{artifact}");
    assert_eq!(artifact["command"][4], "\u{fffd}\u{fffd}", "{artifact}");
    assert_eq!(
        artifact["command"][5],
        written.to_str().unwrap(),
        "{artifact}"
    );

    let shown: Value = serde_json::from_slice(
        &soak
            .unilab()
            .args(["--json", "soak", "show", &id])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(shown["command_lossy"], true, "{shown}");
    assert_eq!(shown["command"][4], "\u{fffd}\u{fffd}", "{shown}");
    let text = soak.unilab().args(["soak", "show", &id]).output().unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    let command = text.lines().find(|l| l.starts_with("command:")).unwrap();
    assert!(command.contains("not UTF-8"), "{text}");

    let history = soak
        .unilab()
        .args(["--json", "history", "--soak", &id])
        .output()
        .unwrap();
    let history = String::from_utf8(history.stdout).unwrap();
    let started: Value = history
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|record| record["kind"] == "soak_started")
        .unwrap();
    assert_eq!(started["command_lossy"], true, "{started}");
    assert_eq!(started["command"][4], "\u{fffd}\u{fffd}", "{started}");

    // The URL's password is masked in the lossy text as in any argument.
    for (view, text) in [
        ("artifact", artifact.to_string()),
        ("soak show", shown.to_string()),
        ("history", history),
    ] {
        assert!(!text.contains("hunter2"), "{view}: {text}");
    }
    soak.unilab().args(["log", "verify"]).assert().success();
}

/// What `soak run` records of its own flags as text — the command's directory, the progress
/// directory, the variables and metadata it sets, the job — must be the value given: one that
/// is not UTF-8 is a usage error (exit 2), before anything runs or is recorded. `--cwd` and
/// `--progress-dir` took such a name, ran, and recorded another.
#[test]
fn a_flag_recorded_as_text_refuses_a_value_that_is_not_utf8() {
    let soak = Soak::new();
    let ran = soak.root.root().join("ran");
    let odd = soak.root.root().join(OsStr::from_bytes(b"dir-\xff"));
    std::fs::DirBuilder::new().mode(0o700).create(&odd).unwrap();
    let not_utf8 = |prefix: &[u8]| {
        let mut value = prefix.to_vec();
        value.push(0xff);
        std::ffi::OsString::from_vec(value)
    };
    let cases: Vec<(&str, std::ffi::OsString, &str)> = vec![
        ("--cwd", odd.clone().into_os_string(), "is not UTF-8"),
        (
            "--progress-dir",
            odd.clone().into_os_string(),
            "is not UTF-8",
        ),
        ("--env", not_utf8(b"A="), "UTF-8"),
        ("--meta", not_utf8(b"k="), "UTF-8"),
        ("--job", not_utf8(b"j"), "UTF-8"),
    ];
    for (flag, value, saying) in cases {
        let mut cmd = soak.unilab();
        cmd.arg("soak").arg("run");
        if flag != "--progress-dir" {
            cmd.arg("--progress-dir").arg(soak.progress());
        }
        cmd.arg(flag)
            .arg(&value)
            .arg("--output")
            .arg(soak.artifact_path())
            .args(["--allow-no-progress", "--", "touch"])
            .arg(&ran);
        refused(cmd, 2, &[saying]);
        assert!(!ran.exists(), "{flag}: the command ran");
        assert!(soak_ids(&soak).is_empty(), "{flag}: a soak was recorded");
    }
}
