//! Reading soaks back: `soak list`, `soak show`, `soak export` and `history`, of finished and
//! running soaks, by prefix or `latest`, across the hosts of a job.

use std::os::unix::fs::FileTypeExt;
use std::time::Duration;

use crate::common::*;
use predicates::prelude::*;
use serde_json::Value;
use unilab::testing::artifact::digest_matches;

use super::*;

/// `soak list` said a soak ran 17 s (to its verdict's record, the tree's shutdown included)
/// where `soak show` said 12 s: a soak's duration is its command's run time, in every command.
#[test]
fn list_show_and_history_tell_the_same_run_time() {
    let soak = Soak::new();
    // SIGTERM ignored: the shutdown waits out its grace, seconds the command did not run.
    let (output, artifact) = soak.run(
        &["--stale-progress", "0.4", "--shutdown-grace", "3"],
        &[
            "--steps",
            "100",
            "--step-seconds",
            "0.1",
            "--checkpoint-every",
            "1",
            "--hang-after",
            "2",
            "--ignore-sigterm",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    let id = verdict(&output)["soak_id"].as_str().unwrap().to_owned();
    assert!(
        artifact["teardown_seconds"].as_f64().unwrap() >= 3.0,
        "{artifact}"
    );
    let text = |args: &[&str]| -> String {
        String::from_utf8(
            soak.unilab()
                .args(args)
                .assert()
                .success()
                .get_output()
                .stdout
                .clone(),
        )
        .unwrap()
    };
    let list = text(&["soak", "list"]);
    let row: Vec<&str> = list
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap()
        .split_whitespace()
        .collect();
    // ID STATUS(2 words) DATE TIME DURATION
    let listed = row[5];
    let show = text(&["soak", "show", &id]);
    let ran = show
        .lines()
        .find_map(|l| l.strip_prefix("ran:"))
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(listed, ran, "{list}\n{show}");
    let history = text(&["history", "--soak", &id]);
    assert!(
        history.contains(&format!("failed after {ran}: ")),
        "{history}"
    );
}

/// Three rounds of reads were to overlap a soak of three seconds: on a loaded machine a round
/// can take longer than a second, and the test failed with nothing wrong. The trainer now runs
/// from its first progress until the reads are done, whatever they take.
#[test]
fn status_and_history_work_while_a_soak_appends() {
    let soak = Soak::new();
    let stop = soak.root.root().join("stop");
    let mut supervisor = soak
        .command()
        .args(["soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--sample-interval", "0.05", "--", "sh", "-c"])
        .arg(r#"i=0; until [ -e "$1" ]; do i=$((i+1)); echo "$i" >"$2/step-$i"; sleep 0.1; done"#)
        .args(["sh".as_ref(), stop.as_os_str(), soak.progress().as_os_str()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn unilab soak run");
    // The command runs (and writes progress) before the reads begin.
    eventually(
        "the command writes progress",
        Duration::from_secs(60),
        || std::fs::read_dir(soak.progress()).is_ok_and(|d| d.count() >= 2),
    );
    for _ in 0..3 {
        assert!(
            supervisor.try_wait().unwrap().is_none(),
            "the soak ended before the reads"
        );
        soak.unilab().args(["mps", "status"]).assert().success();
        soak.unilab().args(["history", "--json"]).assert().success();
        soak.unilab().args(["log", "verify"]).assert().success();
    }
    std::fs::write(&stop, b"").unwrap();
    let status = supervisor.wait().unwrap();
    let artifact = std::fs::read_to_string(soak.artifact_path()).unwrap_or_default();
    assert!(status.success(), "{status:?}: {artifact}");
}

/// `soak show 19` was expected to name no soak, but a soak whose random part begins `19`
/// (`…-1938`) is named by it: the test held only for most ids. The prefixes it names soaks by
/// are now chosen from the ids recorded, never assumed of them.
#[test]
fn soaks_are_named_by_prefix_or_latest_and_list_shows_why_they_failed() {
    let soak = Soak::new();
    let (first, _) = soak.run(&[], &["--steps", "2", "--step-seconds", "0.05"]);
    let (second, _) = soak.run(
        &[],
        &["--steps", "2", "--step-seconds", "0.05", "--exit-code", "3"],
    );
    let first = verdict(&first)["soak_id"].as_str().unwrap().to_owned();
    let second = verdict(&second)["soak_id"].as_str().unwrap().to_owned();

    let list = soak.unilab().args(["soak", "list"]).assert().success();
    let list = String::from_utf8_lossy(&list.get_output().stdout).into_owned();
    let row = list.lines().find(|l| l.starts_with(&second)).unwrap();
    assert!(row.contains("failed (command_failed)"), "{list}");
    // Durations read as a person would write them: tenths below ten seconds.
    assert!(
        row.split_whitespace()
            .any(|w| w.ends_with('s') && w.contains('.')),
        "{list}"
    );

    let shown = |id: &str| -> Value {
        serde_json::from_slice(
            &soak
                .unilab()
                .args(["--json", "soak", "show", id])
                .assert()
                .success()
                .get_output()
                .stdout,
        )
        .unwrap()
    };
    // What both ids begin with (their dates, from one clock seconds apart, share the century
    // at least), that and one character more (a prefix of the first alone), and two hex digits
    // that begin neither id nor its random part.
    let shared = first
        .char_indices()
        .zip(second.chars())
        .find(|((_, a), b)| a != b)
        .map_or(first.len(), |((at, _), _)| at);
    assert!(shared > 0, "{first} and {second} share no prefix");
    let (shared, first_alone) = (&first[..shared], &first[..=shared]);
    let unknown = (0..=u8::MAX)
        .map(|n| format!("{n:02x}"))
        .find(|prefix| {
            [&first, &second].iter().all(|id| {
                let random = id.rsplit_once('-').map_or("", |(_, random)| random);
                !id.starts_with(prefix.as_str()) && !random.starts_with(prefix.as_str())
            })
        })
        .unwrap();

    assert_eq!(shown("latest")["soak_id"], second.as_str());
    assert_eq!(shown(first_alone)["soak_id"], first.as_str());
    soak.unilab()
        .args(["soak", "export", "latest"])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!(
            "\"soak_id\": \"{second}\""
        )));
    soak.unilab()
        .args(["history", "--soak", "latest"])
        .assert()
        .success()
        .stdout(predicate::str::contains("soak_finished"));
    refused(
        soak.unilab().args(["soak", "show", shared]),
        3,
        &["names 2 soaks", &first, &second],
    );
    refused(
        soak.unilab().args(["soak", "show", &unknown]),
        3,
        &[&format!("no soak `{unknown}` is recorded")],
    );
}

#[test]
fn export_refuses_a_running_soak_and_an_existing_file() {
    let soak = Soak::new();
    let mut child = spawn_soak(&soak, "0.1", &["--steps", "200", "--step-seconds", "0.05"]);
    eventually("the soak to be recorded", Duration::from_secs(10), || {
        !soak_ids(&soak).is_empty()
    });
    soak.unilab()
        .args(["soak", "export", "latest"])
        .assert()
        .code(3)
        .stdout("")
        .stderr(predicate::str::contains("is still running"));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    child.wait().unwrap();

    let existing = soak.root.root().join("existing.json");
    std::fs::write(&existing, "keep me").unwrap();
    refused(
        soak.unilab()
            .args(["soak", "export", "latest", "--output"])
            .arg(&existing),
        3,
        &["already exists", "--force"],
    );
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me");
    soak.unilab()
        .args(["soak", "export", "latest", "--force", "--output"])
        .arg(&existing)
        .assert()
        .success();
    assert!(digest_matches(&std::fs::read(&existing).unwrap()));
    // Never a rename over something that is not a regular file, even with --force.
    refused(
        soak.unilab().args([
            "soak",
            "export",
            "latest",
            "--force",
            "--output",
            "/dev/null",
        ]),
        3,
        &["not a regular file"],
    );
    assert!(
        std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device()
    );
}

#[test]
fn show_says_why_a_soak_failed_and_how_a_running_one_is_going() {
    let soak = Soak::new();
    let (output, _) = soak.run(
        &[],
        &["--steps", "4", "--step-seconds", "0.05", "--exit-code", "3"],
    );
    assert_eq!(output.status.code(), Some(1));
    let shown = soak
        .unilab()
        .args(["soak", "show", "latest"])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&shown.get_output().stdout).into_owned();
    for expected in [
        "status:   failed (command_failed)",
        "exit:     code 3",
        "progress: first at ",
        "peaks:    PSS ",
        ", RSS ",
        "last lines of stdout:\n",
        "  step 4/4 loss",
    ] {
        assert!(text.contains(expected), "{expected:?} in:\n{text}");
    }
    let json: Value = serde_json::from_slice(
        &soak
            .unilab()
            .args(["--json", "soak", "show", "latest"])
            .assert()
            .success()
            .get_output()
            .stdout,
    )
    .unwrap();
    assert_eq!(json["exit"]["code"], 3);
    assert!(json["peaks"]["rss_bytes"].as_u64().unwrap() > 0);
    assert!(json["progress"]["last_change_seconds"].as_f64().is_some());
    assert!(json["output_tail"]["stdout"].as_array().unwrap().len() <= 10);
    assert_eq!(json["live"], Value::Null);

    // A running soak: how long, how its progress is, what it uses now; no artifact yet.
    let live = Soak::new();
    let mut child = spawn_soak(&live, "0.1", &["--steps", "400", "--step-seconds", "0.05"]);
    eventually("a few samples", Duration::from_secs(10), || {
        soak_ids(&live)
            .first()
            .is_some_and(|s| s["samples"].as_u64().unwrap_or(0) >= 5)
    });
    let json: Value = serde_json::from_slice(
        &live
            .unilab()
            .args(["--json", "soak", "show", "latest"])
            .assert()
            .success()
            .get_output()
            .stdout,
    )
    .unwrap();
    assert_eq!(json["outcome"]["status"], "running");
    assert_eq!(json["artifact"], Value::Null, "not written yet");
    assert!(json["live"]["elapsed_seconds"].as_f64().unwrap() > 0.3);
    assert!(json["live"]["rss_bytes"].as_u64().unwrap() > 1_000_000);
    let text = live
        .unilab()
        .args(["soak", "show", "latest"])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&text.get_output().stdout).into_owned();
    assert!(text.contains("elapsed:  "), "{text}");
    assert!(
        text.contains("now:      PSS ") && text.contains(", RSS "),
        "{text}"
    );
    assert!(text.contains("when the soak ends"), "{text}");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    child.wait().unwrap();
}

/// `soak run --job NAME --rank N` recorded the launcher's job and rank instead: the flags were
/// parsed but the soak's place came from `SLURM_JOB_ID` and `SLURM_PROCID` alone, so `soak list
/// --job NAME` found nothing and `{job}`/`{rank}` named Slurm's. The place follows
/// `job::resolve` now (the flags first); outside a job torchrun's `RANK` still fills `{rank}`.
#[test]
fn the_job_and_rank_flags_name_the_soaks_place_in_its_job() {
    let soak = Soak::new();
    let run = |flags: &[&str], env: &[(&str, &str)], output: &str| {
        let mut cmd = soak.unilab();
        cmd.env_remove("SLURM_JOB_ID")
            .env_remove("SLURM_PROCID")
            .env_remove("RANK")
            .envs(env.iter().copied())
            .current_dir(soak.root.root());
        cmd.args(["--json", "soak", "run"])
            .args(flags)
            .arg("--progress-dir")
            .arg(soak.progress())
            .args([
                "--output",
                output,
                "--sample-interval",
                "0.1",
                "--",
                "python3",
            ])
            .arg(trainer())
            .arg("--progress-dir")
            .arg(soak.progress())
            .args(["--steps", "2", "--step-seconds", "0.05"]);
        let output = cmd.output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{output:?}");
    };
    run(
        &["--job", "llama", "--rank", "3"],
        &[("SLURM_JOB_ID", "77"), ("SLURM_PROCID", "0")],
        "soak-{job}-{rank}.json",
    );
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.root.root().join("soak-llama-3.json")).unwrap())
            .unwrap();
    assert_eq!(artifact["metadata"]["job"], "llama");
    assert_eq!(artifact["metadata"]["rank"], "3");
    // The job by its flag, the rank from Slurm's variable.
    run(
        &["--job", "llama"],
        &[("SLURM_PROCID", "5"), ("RANK", "9")],
        "soak-{job}-{rank}.json",
    );
    assert!(soak.root.root().join("soak-llama-5.json").is_file());
    // Outside a job, torchrun's `RANK` still fills `{rank}`.
    run(&[], &[("RANK", "2")], "soak-r{rank}.json");
    assert!(soak.root.root().join("soak-r2.json").is_file());

    let listed: Value = serde_json::from_slice(
        &soak
            .unilab()
            .args(["--json", "soak", "list", "--job", "llama"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let ranks: Vec<&Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["rank"])
        .collect();
    assert_eq!(ranks, [&serde_json::json!(3), &serde_json::json!(5)]);
}

/// Under a launcher, `--output` takes the rank's placeholders and the soak records its job and
/// rank; `soak list --job` shows the job's soaks from every host's log under the root, with
/// their hosts, in the order they started. A placeholder with no value here is refused.
#[test]
fn a_jobs_soaks_are_listed_across_hosts_with_their_ranks() {
    use unilab::{Scope, StoredEvent, Subject};
    let soak = Soak::new();
    // Rank 1 ran on another host that shares this state root: its own log there.
    let other = soak
        .root
        .root()
        .join("other-node")
        .join(nix::unistd::getuid().as_raw().to_string());
    private_dir_all(&other);
    let log = unilab::EventLog::open(
        &other.join("events.redb"),
        Scope {
            uid: nix::unistd::getuid().as_raw(),
            host: "other-node".into(),
        },
        unilab::PROJECTIONS,
    )
    .unwrap();
    let (_, start) = every_event_kind()
        .into_iter()
        .find(|(_, e)| matches!(e, StoredEvent::SoakStartedV4(_)))
        .unwrap();
    let StoredEvent::SoakStartedV4(mut start) = start else {
        unreachable!()
    };
    start.soak_id = "20200101T000000-aaaa".into();
    start.metadata.insert("job".into(), "77".into());
    start.metadata.insert("rank".into(), "1".into());
    log.append(
        Subject::Soak(start.soak_id.clone()),
        StoredEvent::SoakStartedV4(start),
    )
    .unwrap();
    drop(log);

    let mut cmd = soak.unilab();
    cmd.env("SLURM_JOB_ID", "77")
        .env("SLURM_STEP_ID", "0")
        .env("SLURM_PROCID", "0")
        .current_dir(soak.root.root());
    let output = cmd
        .args(["--json", "soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .args([
            "--output",
            "soak-{job}-{rank}.json",
            "--report",
            "soak-{rank}.html",
        ])
        .args(["--sample-interval", "0.1", "--", "python3"])
        .arg(trainer())
        .arg("--progress-dir")
        .arg(soak.progress())
        .args(["--steps", "4", "--step-seconds", "0.05"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.root.root().join("soak-77-0.json")).unwrap())
            .unwrap();
    assert_eq!(artifact["metadata"]["job"], "77");
    assert_eq!(artifact["metadata"]["job_step"], "0");
    assert_eq!(artifact["metadata"]["rank"], "0");
    assert!(soak.root.root().join("soak-0.html").is_file());

    let listed: Value = serde_json::from_slice(
        &soak
            .unilab()
            .args(["--json", "soak", "list", "--job", "77"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    // Ranks are integers everywhere: `soak list --job --json` gave the recorded text ("1").
    let ranks: Vec<(&str, &Value)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["host"].as_str().unwrap(), &s["rank"]))
        .collect();
    let here = nix::unistd::gethostname().unwrap().into_string().unwrap();
    assert_eq!(
        ranks,
        [
            ("other-node", &serde_json::json!(1)),
            (here.as_str(), &serde_json::json!(0))
        ]
    );
    let table = soak
        .unilab()
        .args(["soak", "list", "--job", "77"])
        .assert()
        .success();
    let table = String::from_utf8_lossy(&table.get_output().stdout).into_owned();
    assert!(table.starts_with("ID") && table.contains("HOST") && table.contains("other-node"));
    // A third host's log, of an older schema: read where it lies, never migrated (or repaired)
    // from here — one writer host a file.
    let old = soak
        .root
        .root()
        .join("old-node")
        .join(nix::unistd::getuid().as_raw().to_string());
    private_dir_all(&old);
    let frozen =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/fixtures/v2/events.redb");
    copy_log(&frozen, &old.join("events.redb"));
    // The history of every host, merged in time order: the other node's start came first.
    let merged = soak
        .unilab()
        .args(["--json", "history", "--all-hosts"])
        .output()
        .unwrap();
    assert!(merged.status.success(), "{merged:?}");
    let events: Vec<Value> = String::from_utf8_lossy(&merged.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The frozen log's events are the oldest; of this job's, the other node's start came first.
    let first_of_job = events.iter().find(|e| e["host"] != "fixture-host").unwrap();
    assert_eq!(first_of_job["host"], "other-node");
    assert!(events.iter().any(|e| e["host"] == here.as_str()));
    let times: Vec<f64> = events
        .iter()
        .map(|e| e["recorded_at"].as_f64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert!(events.iter().any(|e| e["host"] == "fixture-host"));
    assert_eq!(
        std::fs::read(old.join("events.redb")).unwrap(),
        std::fs::read(&frozen).unwrap(),
        "another host's log is only read"
    );
    let none = soak
        .unilab()
        .args(["--json", "soak", "list", "--job", "78"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&none.stdout).trim(), "[]");

    // Outside a job, `{rank}` has no value: refused before anything runs.
    refused(
        soak.unilab()
            .args(["soak", "run", "--progress-dir"])
            .arg(soak.progress())
            .args(["--output", "soak-{rank}.json", "--", "true"]),
        2,
        &["`{rank}` has no value here"],
    );
}

/// One bad log of another host broke the job view: `soak list --job` and `history --all-hosts`
/// exited 5 and listed nothing if any host's log was empty, truncated, not a log or left unclean
/// by a writer killed there — the last being when the view is needed most — and logs that were
/// a FIFO or a directory were skipped without a word. Now what can be read is shown, and each
/// log that cannot is named in a warning with why.
#[test]
fn one_bad_log_of_another_host_does_not_hide_the_others() {
    let soak = Soak::new();
    soak.unilab()
        .envs([("SLURM_JOB_ID", "77"), ("SLURM_PROCID", "0")])
        .args(["soak", "run", "--sample-interval", "0.1"])
        .args(soak.trainer_soak(&[], &["--steps", "3", "--step-seconds", "0.05"]))
        .assert()
        .success();
    let uid = nix::unistd::getuid().as_raw().to_string();
    let here = soak.root.log_path();
    let log_of = |host: &str| {
        let dir = soak.root.root().join(host).join(&uid);
        private_dir_all(&dir);
        dir.join("events.redb")
    };
    write_private(&log_of("empty"), b"");
    write_private(&log_of("text"), &b"not a log at all\n".repeat(100));
    let bytes = std::fs::read(&here).unwrap();
    write_private(&log_of("truncated"), &bytes[..bytes.len() / 3]);
    nix::unistd::mkfifo(&log_of("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::fs::create_dir(log_of("directory")).unwrap();
    // A copy taken while a writer has the log open is what a writer killed there leaves.
    let writer = soak.root.log();
    std::fs::copy(&here, log_of("unclean")).unwrap();
    drop(writer);
    let mut raw = redb::Builder::new();
    raw.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
    assert!(
        matches!(
            raw.open_read_only(log_of("unclean")),
            Err(redb::DatabaseError::RepairAborted)
        ),
        "the copy is unclean"
    );
    let bad = ["directory", "empty", "fifo", "text", "truncated", "unclean"];
    for args in [
        &["--json", "soak", "list", "--job", "77"][..],
        &["--json", "history", "--all-hosts"],
    ] {
        let out = soak.unilab().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        for host in bad {
            assert!(
                stderr.contains(&format!("cannot read the log of host `{host}`")),
                "{args:?}: {host} is named: {stderr}"
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("soak_id"),
            "{args:?}: this host's soak is shown: {stdout}"
        );
    }
}
