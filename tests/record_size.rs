//! Records too large for the log's own reader: the reader refuses a record whose decode would
//! claim more than 16 MiB, and the writer once committed whatever it was handed, so a tree of
//! processes with megabyte command lines made a record that left the log unreadable for good.
//! Now what a soak records is cut to budgets where it is built, with a note, and `append`
//! refuses, before committing, any record its reader could not decode.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use unilab::*;

use crate::common::*;
use crate::soak::Soak;

/// Twelve processes whose command lines take 1.44 MB each (twelve 120,000-byte arguments after
/// `marker`), as a launcher that passes its config inline makes; then the progress directory
/// changes twice; then the script waits for them (`wait`) or leaves them behind (`exit 0`).
fn launcher_script(dir: &Path, marker: &str, end: &str) -> PathBuf {
    let path = dir.join("launcher.sh");
    let script = format!(
        "#!/bin/sh\n\
         A=$(head -c 120000 /dev/zero | tr '\\0' A)\n\
         for i in 1 2 3 4 5 6 7 8 9 10 11 12; do\n\
         \x20 bash -c 'sleep 600; :' {marker} $A $A $A $A $A $A $A $A $A $A $A $A &\n\
         done\n\
         touch \"$1/a\"; sleep .5; touch \"$1/b\"\n\
         {end}\n"
    );
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// `soak run` of the launcher in `soak`'s root; its output and artifact (`Null` when none).
fn run_launcher(soak: &Soak, marker: &str, end: &str) -> (Output, Value) {
    let script = launcher_script(soak.root.root(), marker, end);
    let output = soak
        .unilab()
        .args(["--json", "soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--sample-interval", "0.5", "--stale-progress", "2s"])
        .args(["--shutdown-grace", "0.5", "--py-spy", "off", "--"])
        .arg(&script)
        .arg(soak.progress())
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let artifact = std::fs::read(soak.artifact_path())
        .map(|bytes| serde_json::from_slice(&bytes).unwrap())
        .unwrap_or(Value::Null);
    (output, artifact)
}

/// A marker no other test's processes carry: this test's pid and `what`.
fn marker(what: &str) -> String {
    format!("unilab-record-size-{}-{what}", std::process::id())
}

/// The live processes whose command line holds `marker`.
fn still_running(marker: &str) -> Vec<u32> {
    live_pids_where(|pid| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|cmdline| cmdline.split(|b| *b == 0).any(|a| a == marker.as_bytes()))
    })
}

/// The command lines of `list` (the evidence's processes, the leaked ones) that hold `marker`.
fn cmdlines_with<'a>(list: &'a Value, marker: &str) -> Vec<&'a Vec<Value>> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["cmdline"].as_array())
        .filter(|args| args.iter().any(|a| a == marker))
        .collect()
}

/// Each command line of the twelve launched processes in `list` (the evidence's processes, the
/// leaked ones) was cut to the 64 KiB a command line may keep, its last argument saying how
/// many bytes of how many arguments were cut. Fewer than twelve (seen twice on a loaded
/// machine) names what the list held instead, and what the artifact says it could not read.
fn assert_cut_with_a_note(artifact: &Value, list: &Value, marker: &str) {
    let cmdlines = cmdlines_with(list, marker);
    assert_eq!(
        cmdlines.len(),
        12,
        "the twelve launched processes; the list held {:?}; unavailable: {}",
        list.as_array()
            .into_iter()
            .flatten()
            .map(|p| (
                p["pid"].clone(),
                p["name"].clone(),
                p["cmdline"].as_array().map(|a| a.len())
            ))
            .collect::<Vec<_>>(),
        artifact["evidence"]["unavailable"]
    );
    for args in cmdlines {
        let kept: usize = args.iter().map(|a| a.as_str().unwrap().len()).sum();
        assert!(kept <= 64 << 10, "{kept} bytes kept");
        let note = args.last().unwrap().as_str().unwrap();
        assert!(
            note.starts_with("[… ") && note.ends_with(" bytes of 12 arguments cut by unilab]"),
            "the note says how much was cut: {note}"
        );
        let cut: usize = note["[… ".len()..note.find(" bytes").unwrap()]
            .parse()
            .unwrap();
        let first = args.iter().position(|a| a.as_str() == Some("sleep 600; :"));
        assert_eq!(
            first,
            Some(2),
            "the start is kept as it was: {:?}",
            &args[..3]
        );
        // `bash`, `-c`, the script and the marker are whole; of the twelve arguments, the
        // first is kept in part and the rest are cut.
        let whole =
            "bash".len() + "-c".len() + "sleep 600; :".len() + args[3].as_str().unwrap().len();
        assert_eq!(cut + kept - note.len(), whole + 12 * 120_000);
    }
}

/// `unilab ARGS` in `soak`'s root succeeds; its standard output.
fn succeeds(soak: &Soak, args: &[&str]) -> Vec<u8> {
    let output = soak.unilab().args(args).output().unwrap();
    assert!(
        output.status.success(),
        "`unilab {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// `soak export ID` writes the artifact's bytes again.
fn assert_exports_the_artifact(soak: &Soak, soak_id: &str, name: &str) {
    let again = soak.root.root().join(name);
    succeeds(
        soak,
        &[
            "soak",
            "export",
            soak_id,
            "--output",
            again.to_str().unwrap(),
        ],
    );
    assert!(
        std::fs::read(&again).unwrap() == std::fs::read(soak.artifact_path()).unwrap(),
        "the export is the artifact, byte for byte"
    );
}

/// A stale soak of twelve processes with 1.44 MB command lines captured evidence of about
/// 17 MB: committed whole, it was a record the log's reader refuses (`LimitExceeded`), so the
/// soak ended with exit 5 and no artifact, and `log verify`, `history`, `soak show` and
/// `soak export` failed on that log for good. Each command line is now cut to its budget with
/// a note; the soak ends as it should, with its artifact, and the log reads, verifies,
/// archives and exports.
#[test]
fn a_tree_with_megabyte_command_lines_leaves_a_readable_log_and_its_artifact() {
    let soak = Soak::new();
    let marker = marker("stale");
    let (output, artifact) = run_launcher(&soak, &marker, "wait");
    assert_eq!(
        output.status.code(),
        Some(1),
        "a failed soak, not a broken log: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(artifact["outcome"]["failure_kind"], "stale_progress");
    assert_cut_with_a_note(&artifact, &artifact["evidence"]["processes"], &marker);
    assert!(still_running(&marker).is_empty(), "the tree is gone");

    let soak_id = artifact["soak_id"].as_str().unwrap().to_owned();
    succeeds(&soak, &["log", "verify"]);
    succeeds(&soak, &["history", "--soak", &soak_id]);
    succeeds(&soak, &["soak", "show", &soak_id]);
    for args in [["--json", "history", "--soak"], ["--json", "soak", "show"]] {
        let json =
            String::from_utf8(succeeds(&soak, &[&args[..], &[soak_id.as_str()]].concat())).unwrap();
        assert!(
            json.contains(" bytes of 12 arguments cut by unilab]"),
            "`{}` shows the note",
            args.join(" ")
        );
    }
    assert_exports_the_artifact(&soak, &soak_id, "export.json");
    // Archived, its records read back from the archive as they were.
    succeeds(&soak, &["log", "archive", "--soak", &soak_id]);
    succeeds(&soak, &["log", "verify"]);
    assert_exports_the_artifact(&soak, &soak_id, "archived.json");
}

/// The same twelve processes left behind by a command that exits 0: the leaked list held their
/// 17 MB of command lines, and with it the verdict was a record the log's reader refuses (and
/// `log stats` failed too). The verdict now keeps each command line cut, with its note.
#[test]
fn leaked_processes_with_megabyte_command_lines_are_recorded_cut() {
    let soak = Soak::new();
    let marker = marker("leaked");
    let (output, artifact) = run_launcher(&soak, &marker, "exit 0");
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(artifact["outcome"]["failure_kind"], "leaked_processes");
    assert_cut_with_a_note(&artifact, &artifact["leaked_processes"], &marker);
    assert_cut_with_a_note(&artifact, &artifact["evidence"]["processes"], &marker);
    assert!(
        still_running(&marker).is_empty(),
        "the leaked tree was killed"
    );

    let soak_id = artifact["soak_id"].as_str().unwrap().to_owned();
    succeeds(&soak, &["log", "verify"]);
    succeeds(&soak, &["log", "stats"]);
    assert_exports_the_artifact(&soak, &soak_id, "export.json");
}

/// A `soak_evidence_captured` of one process whose command line is three million empty
/// arguments: 3 MB encoded, but decoding it claims 8 bytes an argument (each one's length),
/// 24 MB, more than the reader allows.
fn evidence_claiming_24_mb() -> StoredEvent {
    StoredEvent::SoakEvidenceCaptured(Box::new(Evidence {
        trigger: FailureKind::StaleProgress,
        captured_at_us: 1_764_676_800_000_000,
        processes: vec![ProcessEvidence {
            pid: 4242,
            ppid: 1,
            start_ticks: 7,
            name: "launcher".into(),
            state: 'S',
            cmdline: vec![String::new(); 3_000_000],
            threads: Vec::new(),
            kernel_stack: None,
            python_stack: None,
            holds_gpu_device: false,
            rank: None,
            collectives: None,
        }],
        cgroup: None,
        kernel_messages: Vec::new(),
        unavailable: Vec::new(),
        mps: Vec::new(),
    }))
}

/// `append` committed any record, while the reader refuses one whose decode claims more than
/// 16 MiB — which the encoded length does not tell (a one-byte length claims eight): such a
/// record broke the chain for every reader after it. It is now refused before anything is
/// committed, with an error that says why, and the log verifies as it did.
#[test]
fn append_refuses_a_record_its_reader_could_not_decode() {
    let root = TestRoot::new();
    let log = root.log();
    let subject = Subject::Soak("20261206T000000-cafe".into());
    log.append(subject.clone(), live(1)).unwrap();
    let before = log.snapshot().unwrap().head().unwrap();

    let refused = log.append(subject.clone(), evidence_claiming_24_mb());
    let error = match refused {
        Ok(appended) => panic!("committed at sequence {}", appended.seq),
        Err(error) => error,
    };
    let mut said = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        said.push_str(&format!("\ncaused by: {cause}"));
        source = cause.source();
    }
    assert!(
        said.contains(
            "refusing to record a `soak_evidence_captured` event of `soak/20261206T000000-cafe`"
        ) && said.contains("could not read it back")
            && said.contains("more than the 16777216 a record may hold"),
        "{said}"
    );
    assert_eq!(
        log.snapshot().unwrap().head().unwrap(),
        before,
        "nothing committed"
    );
    log.snapshot().unwrap().verify(PROJECTIONS).unwrap();
    // The log takes the next record as before.
    let next = log.append(subject, live(2)).unwrap();
    assert_eq!(next.seq, before.0 + 1);
    drop(log);
    root.unilab().args(["log", "verify"]).assert().success();
}

/// A log written by an older unilab that took a record its reader refuses (the 24 MB evidence)
/// into a soak before its verdict, chained and headed as that append left it. `log archive`
/// copied such a record into the soak's archive, which `log verify` then said was changed;
/// archiving now refuses it as the damage it is, and writes no archive.
#[test]
fn archiving_refuses_a_record_its_reader_could_not_decode() {
    use redb::ReadableTable;
    use unilab::testing::{chain, codec, tables};
    const SOAK: &str = "20261204T090000-e5e5";
    let subject = Subject::Soak(SOAK.into());
    let root = TestRoot::new();
    let log = root.log();
    let mut events = every_event_kind();
    let verdict = events
        .iter()
        .position(|(s, e)| *s == subject && e.kind() == "soak_finished")
        .unwrap();
    let after = events.split_off(verdict);
    log.append_all(events).unwrap();
    let (head, head_hash) = log.snapshot().unwrap().head().unwrap();
    let forged = head + 1;
    raw_write(&root, |txn| {
        let envelope = StoredEnvelope {
            seq: forged,
            recorded_at_us: 1_764_676_800_000_000,
            scope: root.scope(),
            subject: subject.clone(),
            event: evidence_claiming_24_mb(),
        };
        let (stored, hash) = chain::seal(&head_hash, &codec::encode(&envelope).unwrap());
        let mut records = txn.open_table(tables::EVENTS).unwrap();
        assert!(records.get(forged).unwrap().is_none());
        records.insert(forged, stored.as_slice()).unwrap();
        let mut index = txn.open_table(tables::SUBJECT_INDEX).unwrap();
        index.insert((subject.key().as_str(), forged), ()).unwrap();
        let mut meta = txn.open_table(tables::META).unwrap();
        let head = codec::encode(&(forged, hash)).unwrap();
        // The log's head, as every append records it (`log::tables::HEAD_KEY`).
        meta.insert("head", head.as_slice()).unwrap();
    });
    log.append_all(after).unwrap();
    drop(log);

    let archive = root
        .log_path()
        .with_file_name(format!("events.soak-{SOAK}.zst"));
    root.unilab()
        .args(["log", "archive", "--soak", SOAK])
        .assert()
        .code(5)
        .stderr(predicates::str::contains(format!(
            "fails verification at sequence {forged}: its contents cannot be decoded"
        )));
    assert!(!archive.exists(), "no archive of what its reader refuses");
    let log = root.log();
    assert!(
        log.snapshot().unwrap().get(forged + 1).unwrap().is_some(),
        "the records are where they were"
    );
}
