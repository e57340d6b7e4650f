//! What `soak run` writes its verdict to, proven before it starts; and how `soak list` and
//! `soak show` tell the end of a soak whose supervisor vanished.

use std::path::Path;
use std::time::Duration;

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
    // A job id too long to be one is refused as the job is resolved, before its name is used.
    run_writing(&soak, &slurm, "soak-{job}.json", None, &ran)
        .code(3)
        .stderr(predicate::str::contains(
            "(from `SLURM_JOB_ID`) cannot name a job: it is longer than 128 bytes",
        ));
    assert!(!ran.exists(), "the command ran");
    for (env, output, report, names) in [
        (&[][..], long.as_str(), None, "cannot write the artifact"),
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
    // The job and rank are read as a job's are (`job::resolve`), which refuses these first.
    for (job, rank, output, says) in [
        (
            "1",
            "../x",
            "out/{rank}.json",
            "`../x` (from `SLURM_PROCID`) is not a rank",
        ),
        (
            "1",
            "a\nb",
            "out/{rank}.json",
            "`a\\nb` (from `SLURM_PROCID`) is not a rank",
        ),
        (
            "..",
            "0",
            "out/{job}/x.json",
            "`..` (from `SLURM_JOB_ID`) cannot name a job",
        ),
        (
            "..",
            "0",
            "out/inner/{job}",
            "`..` (from `SLURM_JOB_ID`) cannot name a job",
        ),
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

/// `output::duration` as a person reads a span under a minute.
fn duration_text(seconds: f64) -> String {
    if seconds < 9.95 {
        let tenths = format!("{seconds:.1}");
        format!("{}s", tenths.strip_suffix(".0").unwrap_or(&tenths))
    } else {
        format!("{}s", seconds.round())
    }
}

/// An abandoned soak's end was taken to be the moment someone first looked: a supervisor
/// killed two seconds in, listed a while later, showed that while as its DURATION in `soak
/// list` and the moment of looking as `ended` in `soak show`. Its duration is now its last
/// sample's, and `soak show` says that its end is unknown.
#[test]
fn an_abandoned_soaks_duration_is_its_last_sample_not_the_time_it_was_looked_at() {
    let soak = Soak::new();
    let mut supervisor = soak
        .command()
        .args(["soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args([
            "--sample-interval",
            "0.2",
            "--allow-no-progress",
            "--",
            "sleep",
            "120",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut id = String::new();
    eventually("a few samples", Duration::from_secs(30), || {
        // While the supervisor lives, listing records nothing.
        listed(&soak).first().is_some_and(|s| {
            id = s["soak_id"].as_str().unwrap().to_owned();
            s["samples"].as_u64().unwrap() >= 5
        })
    });
    supervisor.kill().unwrap();
    supervisor.wait().unwrap();
    // `history` only reads: the soak is not found abandoned yet.
    let records: Vec<Value> = String::from_utf8(
        soak.unilab()
            .args(["--json", "history", "--soak", &id])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect();
    assert!(records.iter().all(|r| r["kind"] != "soak_abandoned"));
    let sampled = records.iter().rev().find(|r| r["kind"] == "soak_sampled");
    let last = sampled.unwrap();
    let last_seconds = last["elapsed_ms"].as_f64().unwrap() / 1e3;
    assert!(
        last_seconds < 50.0,
        "took too long to sample: {last_seconds}"
    );
    let pids: Vec<u64> = last["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert!(!pids.is_empty(), "the last sample saw the tree: {last}");
    for pid in pids {
        eventually(
            &format!("pid {pid} to die"),
            Duration::from_secs(10),
            || exited(pid),
        );
    }
    // Long after the supervisor died, someone looks.
    std::thread::sleep(Duration::from_secs(5));
    let table = soak.unilab().args(["soak", "list"]).assert().success();
    let table = String::from_utf8_lossy(&table.get_output().stdout).into_owned();
    let row = table.lines().find(|l| l.starts_with(&id)).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    // ID, STATUS, STARTED (date and time), DURATION.
    assert_eq!(cells[1], "abandoned", "{table}");
    assert_eq!(cells[4], duration_text(last_seconds), "{table}");
    let shown = soak.unilab().args(["soak", "show", &id]).assert().success();
    let shown = String::from_utf8_lossy(&shown.get_output().stdout).into_owned();
    let line = |label: &str| {
        shown
            .lines()
            .find(|l| l.starts_with(&format!("{label}:")))
            .unwrap_or_else(|| panic!("no `{label}` in:\n{shown}"))
            .to_owned()
    };
    assert!(line("ended").contains("unknown"), "{shown}");
    assert!(
        line("ended").contains(&format!("last sample at {}", duration_text(last_seconds))),
        "{shown}"
    );
    assert!(
        line("ran").contains(&format!(
            "{} to its last sample",
            duration_text(last_seconds)
        )),
        "{shown}"
    );
    soak.unilab().args(["log", "verify"]).assert().success();
}

/// `soak list --json` and `soak show --json` gave an abandoned soak's `ended_at` as the moment
/// the command that found it abandoned ran (ten seconds for a supervisor killed at two), though
/// the table gave its duration to its last sample; `job show`, `job list` and the artifact did
/// the same. Its end is unknown: every view now gives its last sample's recorded time as
/// `ended_at`, and `ended: "unknown"`.
#[test]
fn an_abandoned_soaks_ended_at_is_its_last_samples_time_in_every_view() {
    let soak = Soak::new();
    let mut supervisor = soak
        .command()
        .args([
            "soak",
            "run",
            "--job",
            "lost",
            "--rank",
            "0",
            "--progress-dir",
        ])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args([
            "--sample-interval",
            "0.2",
            "--allow-no-progress",
            "--",
            "sleep",
            "120",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut id = String::new();
    eventually("a few samples", Duration::from_secs(30), || {
        listed(&soak).first().is_some_and(|s| {
            id = s["soak_id"].as_str().unwrap().to_owned();
            s["samples"].as_u64().unwrap() >= 3
        })
    });
    supervisor.kill().unwrap();
    supervisor.wait().unwrap();
    let history = |soak: &Soak| -> Vec<Value> {
        let out = soak
            .unilab()
            .args(["--json", "history", "--soak", &id])
            .output()
            .unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let records = history(&soak);
    let last_sample = records
        .iter()
        .rev()
        .find(|r| r["kind"] == "soak_sampled")
        .unwrap()["recorded_at"]
        .clone();
    let pids: Vec<u64> = records
        .iter()
        .rev()
        .find(|r| r["kind"] == "soak_sampled")
        .unwrap()["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    for pid in pids {
        eventually(
            &format!("pid {pid} to die"),
            Duration::from_secs(10),
            || exited(pid),
        );
    }
    // A while after the supervisor died, someone looks: that moment is no part of the soak.
    std::thread::sleep(Duration::from_secs(2));
    let row = listed(&soak).remove(0);
    assert_eq!(row["outcome"]["status"], "abandoned", "{row}");
    let found = history(&soak)
        .into_iter()
        .find(|r| r["kind"] == "soak_abandoned")
        .unwrap()["recorded_at"]
        .clone();
    assert_ne!(found, last_sample, "found abandoned as it was sampled");
    let ended = |view: &str, value: &Value| {
        assert_eq!(value["ended_at"], last_sample, "{view}: {value}");
        assert_eq!(value["ended"], "unknown", "{view}: {value}");
    };
    ended("soak list", &row);
    let json = |args: &[&str]| -> Value {
        let out = soak.unilab().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    ended("soak show", &json(&["--json", "soak", "show", &id]));
    ended(
        "soak list --job",
        &json(&["--json", "soak", "list", "--job", "lost"])[0],
    );
    ended(
        "job show",
        &json(&["--json", "job", "show", "lost"])["ranks"][0],
    );
    let jobs = json(&["--json", "job", "list"]);
    assert_eq!(jobs[0]["ended_at"], last_sample, "job list: {jobs}");
    let artifact = json(&["soak", "export", &id]);
    assert_eq!(
        artifact["ended_at"], last_sample,
        "the artifact: {artifact}"
    );
    soak.unilab().args(["log", "verify"]).assert().success();
}

/// `soak list --job` took a row's host from the name of the directory its log lies in, so a
/// log copied aside under another name listed the same soak under two hosts; and a rank
/// recorded as a long text padded every row of
/// the table to its width. The host is now the one the log is scoped to, a soak found twice is
/// listed once, and a rank that is not a number (the user's `--meta rank=…` on a soak outside
/// a job; a launcher's, or one contradicting a job's rank, is refused) is shortened in the
/// table.
#[test]
fn a_jobs_table_names_the_logs_own_host_and_is_not_padded_by_a_long_rank() {
    let soak = Soak::new();
    let ran = soak.root.root().join("ran");
    run_writing(
        &soak,
        &[("SLURM_JOB_ID", "77"), ("SLURM_PROCID", "0")],
        "a.json",
        None,
        &ran,
    )
    .success();
    // A launcher's rank that is no number is refused before anything runs, and so is metadata
    // that contradicts the rank of a job's soak; a soak outside a job may still be labelled so.
    let long_rank = "r".repeat(300);
    let labelled = |env: &[(&str, &str)]| {
        let mut cmd = soak.unilab();
        cmd.current_dir(soak.root.root())
            .env_remove("SLURM_JOB_ID")
            .env_remove("SLURM_PROCID")
            .envs(env.iter().copied())
            .args(["soak", "run", "--progress-dir"])
            .arg(soak.progress())
            .args(["--output", "b.json", "--meta", "job=77"])
            .args(["--meta", &format!("rank={long_rank}")])
            .args(["--allow-no-progress", "--sample-interval", "0.1", "--"])
            .arg("touch")
            .arg(&ran);
        cmd
    };
    labelled(&[("SLURM_JOB_ID", "77"), ("SLURM_PROCID", "1")])
        .assert()
        .code(2);
    labelled(&[]).assert().success();
    // The log copied aside, as someone keeps it for forensics.
    let copied = soak
        .root
        .root()
        .join("copied-aside")
        .join(nix::unistd::getuid().as_raw().to_string());
    private_dir_all(&copied);
    copy_log(&soak.root.log_path(), &copied.join("events.redb"));
    let here = nix::unistd::gethostname().unwrap().into_string().unwrap();

    let json = soak
        .unilab()
        .args(["--json", "soak", "list", "--job", "77"])
        .output()
        .unwrap();
    assert!(json.status.success(), "{json:?}");
    let rows: Vec<Value> = serde_json::from_slice(&json.stdout).unwrap();
    let hosts: Vec<&str> = rows.iter().map(|r| r["host"].as_str().unwrap()).collect();
    assert_eq!(hosts, [here.as_str(), here.as_str()], "{rows:?}");

    let table = soak
        .unilab()
        .args(["soak", "list", "--job", "77"])
        .assert()
        .success();
    let table = String::from_utf8_lossy(&table.get_output().stdout).into_owned();
    assert_eq!(table.lines().count(), 3, "{table}");
    assert!(!table.contains("copied-aside"), "{table}");
    let header = table.lines().next().unwrap();
    let rank_width = header.find("STATUS").unwrap() - header.find("RANK").unwrap();
    assert!(
        rank_width <= 16,
        "every row padded to the long rank:\n{table}"
    );
    assert!(table.contains("rrrrrrrr…"), "{table}");
    soak.unilab().args(["log", "verify"]).assert().success();
}
