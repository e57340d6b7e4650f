//! Two soaks given one `--output` (ranks that forgot `{rank}`): both find the name free at
//! their start, so the artifact is put in place only where nothing is — the second to end keeps
//! the first's artifact and exits 3 saying how to write its own — unless `--force` asks to
//! replace it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

use super::clobber::run_flags;
use super::*;

/// A soak of `sh` waiting for the file `stop`, writing `--output output`, spawned.
fn waiting_soak(soak: &Soak, output: &Path, stop: &Path) -> std::process::Child {
    soak.command()
        .env("UNILAB_TOOL_TIMEOUT", "5")
        .args(["--json", "soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(output)
        .args(["--allow-no-progress", "--sample-interval", "0.1", "--"])
        .args([
            "sh",
            "-c",
            "while [ ! -e \"$1\" ]; do sleep 0.05; done",
            "wait",
        ])
        .arg(stop)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unilab starts")
}

/// Two soaks started with one `--output` (ranks that forgot `{rank}`) both found the name
/// free at their start, and the later to end silently replaced the earlier's artifact. The
/// artifact is put in place only where nothing is (`renameat2(RENAME_NOREPLACE)`): the first
/// to end keeps its artifact; the second exits 3, its verdict recorded, saying how to write its
/// own from the log.
#[test]
fn of_two_soaks_given_one_output_the_second_to_end_keeps_the_firsts_artifact_and_exits_3() {
    let soak = Soak::new();
    let output = soak.root.root().join("artifact.json");
    let stops: [PathBuf; 2] = ["stop-a", "stop-b"].map(|s| soak.root.root().join(s));
    let first = waiting_soak(&soak, &output, &stops[0]);
    let second = waiting_soak(&soak, &output, &stops[1]);
    eventually("both soaks running", Duration::from_secs(60), || {
        let soaks = soak_ids(&soak);
        soaks.len() == 2 && soaks.iter().all(|s| s["outcome"]["status"] == "running")
    });
    std::fs::write(&stops[0], "").unwrap();
    let first = first.wait_with_output().unwrap();
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let first_id = verdict(&first)["soak_id"].as_str().unwrap().to_owned();
    let kept = std::fs::read(&output).unwrap();
    std::fs::write(&stops[1], "").unwrap();
    let second = second.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(3), "{said}");
    let second_id = verdict(&second)["soak_id"].as_str().unwrap().to_owned();
    assert_ne!(first_id, second_id);
    assert!(said.contains("is kept"), "{said}");
    assert!(
        said.contains(&format!("`unilab soak export {second_id} --output ")),
        "{said}"
    );
    assert_eq!(
        std::fs::read(&output).unwrap(),
        kept,
        "the first's artifact"
    );
    let artifact: Value = serde_json::from_slice(&kept).unwrap();
    assert_eq!(artifact["soak_id"], first_id.as_str());
    // The second's verdict is recorded: the hint's export writes its artifact.
    let own = soak.root.root().join("second.json");
    let exported = soak
        .unilab()
        .args(["soak", "export", &second_id, "--output"])
        .arg(&own)
        .output()
        .unwrap();
    assert!(exported.status.success(), "{exported:?}");
    let own: Value = serde_json::from_slice(&std::fs::read(&own).unwrap()).unwrap();
    assert_eq!(own["soak_id"], second_id.as_str());
    assert_eq!(own["outcome"]["status"], "passed");
}

/// `--output` as `--force` has it: the second soak to end replaces the first's artifact, as
/// asked.
#[test]
fn with_force_the_later_soak_replaces_the_artifact() {
    let soak = Soak::new();
    let output = soak.root.root().join("artifact.json");
    let ran = soak.root.root().join("ran");
    std::fs::write(&output, "old").unwrap();
    run_flags(
        &soak,
        &["--output".as_ref(), output.as_os_str(), "--force".as_ref()],
        &ran,
    )
    .assert()
    .success();
    let artifact: Value = serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap();
    assert_eq!(artifact["outcome"]["status"], "passed");
}
