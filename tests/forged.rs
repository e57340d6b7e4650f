//! Text a forger controls: a job's alarm is a file any rank of the user can write, in a
//! directory on a shared state root, and another host's log is a file there too. What they say
//! is shown escaped, an alarm that cannot be the job's is not believed, and the directory a rank
//! checked at its start is the one it keeps using.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::*;

/// Long enough for a loaded machine; the soaks sample every 0.1 s.
const PATIENCE: Duration = Duration::from_secs(120);

/// `unilab soak run --job JOB --rank 0` sampled every 0.1 s, without progress, over `command`,
/// its standard output in `<dir>/out` and its standard error in `<dir>/err`; warnings are shown
/// (no `--quiet`).
fn rank_soak(root: &TestRoot, dir: &Path, job: &str, flags: &[&str], command: &[&str]) -> Command {
    let progress = dir.join("progress");
    private_dir_all(&progress);
    let mut cmd = Command::new(unilab_bin());
    cmd.env_clear()
        .env("PATH", path_with_fixtures())
        .env("HOME", root.root())
        .env("LANG", "C.UTF-8")
        .arg("--root")
        .arg(root.root())
        .args(["soak", "run", "--job", job, "--rank", "0"])
        .args(["--allow-no-progress", "--sample-interval", "0.1"])
        .args(flags)
        .arg("--progress-dir")
        .arg(&progress)
        .arg("--output")
        .arg(dir.join("soak.json"))
        .arg("--")
        .args(command)
        .stdout(std::fs::File::create(dir.join("out")).unwrap())
        .stderr(std::fs::File::create(dir.join("err")).unwrap());
    cmd
}

/// A command that waits for `<dir>/go`, then exits with `code`.
fn until_go(dir: &Path, code: u8) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "while [ ! -e '{}' ]; do sleep 0.05; done; exit {code}",
            dir.join("go").display()
        ),
    ]
}

/// The one soak of `root`'s log, as `soak list --json` gives it, once it is recorded.
fn the_soak(root: &TestRoot) -> Option<Value> {
    let out = root
        .unilab()
        .args(["--json", "soak", "list"])
        .output()
        .ok()?;
    let listed: Value = serde_json::from_slice(&out.stdout).ok()?;
    listed.as_array()?.first().cloned()
}

/// Waits until the one soak of `root` runs, and gives its id.
fn running_soak(root: &TestRoot) -> String {
    let mut id = None;
    eventually("the rank's soak to start", PATIENCE, || {
        id = the_soak(root)
            .filter(|soak| soak["outcome"]["status"] == "running")
            .and_then(|soak| soak["soak_id"].as_str().map(str::to_owned));
        id.is_some()
    });
    id.unwrap()
}

/// Waits until the one soak of `root` has taken `more` samples beyond those it has now: it has
/// looked for its job's alarm that many times since.
fn samples_pass(root: &TestRoot, more: u64) {
    let samples = |root: &TestRoot| {
        the_soak(root)
            .and_then(|soak| soak["samples"].as_u64())
            .unwrap_or(0)
    };
    let running =
        |root: &TestRoot| the_soak(root).is_some_and(|soak| soak["outcome"]["status"] == "running");
    let now = samples(root);
    // A soak that ended takes no more: what ended it is for the test to find.
    eventually("more samples", PATIENCE, || {
        samples(root) >= now + more || !running(root)
    });
}

/// `<root>/jobs/<uid>/<job>/runs/1`: the first run of a job whose runs are counted, where its
/// one rank is.
fn job_dir(root: &TestRoot, job: &str) -> PathBuf {
    run_dir(root, job, "1")
}

/// Puts `alarm` (raw JSON) in `dir` as its alarm, whole: written aside, then renamed.
fn forge(dir: &Path, alarm: &str) {
    let aside = dir.join(".alarm.forged.tmp");
    std::fs::write(&aside, alarm).unwrap();
    std::fs::rename(&aside, dir.join("alarm")).unwrap();
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// How many records of `kind` the soak's history holds.
fn recorded(root: &TestRoot, soak: &str, kind: &str) -> usize {
    let out = root
        .unilab()
        .args(["--json", "history", "--soak", soak])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| line.contains(&format!("\"kind\":\"{kind}\"")))
        .count()
}

/// An alarm's reason (and host, and failure kind) forged with a line break, unilab's own red
/// and a line of its own (`error: …`) was printed raw by `soak show`, `history` and the rank's
/// own `soak run`, and its host and kind by `job show`: the forger's line stood among unilab's,
/// in unilab's colours. Every one of them shows the text escaped, on the line it belongs to.
#[test]
fn a_forged_alarms_text_is_shown_escaped_in_soak_show_history_and_job_show() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-forged-");
    let mut started = Started::default();
    let command = ["sleep", "600"];
    let pid = started.spawn(&mut rank_soak(
        &root,
        dir.path(),
        "F",
        &["--on-job-alarm", "stop"],
        &command,
    ));
    let soak = running_soak(&root);
    let forged = "\n\u{1b}[31merror: forged line\u{1b}[0m";
    let alarm = json!({
        "job": "F",
        "rank": 1,
        "host": format!("n9{forged}"),
        "soak_id": "forged",
        "failure_kind": format!("stale_progress{forged}"),
        "reason": format!("stalled{forged}"),
        "at": now(),
    });
    forge(&job_dir(&root, "F"), &alarm.to_string());
    let code = started.exit_code(pid, PATIENCE);
    let err = std::fs::read_to_string(dir.path().join("err")).unwrap_or_default();
    assert_eq!(code, Some(1), "the alarm stops the rank: {err}");
    assert!(!err.contains('\u{1b}'), "{err}");
    // The rank's own verdict line tells the alarm's reason too.
    let said = std::fs::read_to_string(dir.path().join("out")).unwrap();
    assert!(
        !said.contains('\u{1b}') && said.lines().count() == 2,
        "`soak run` printed the forged reason raw:\n{said}"
    );
    assert_eq!(recorded(&root, &soak, "soak_job_alarm_seen"), 1);
    let escaped = "\\n\\u{1b}[31merror: forged line\\u{1b}[0m";
    let mut raw = Vec::new();
    for args in [
        vec!["soak", "show", soak.as_str()],
        vec!["history", "--soak", soak.as_str()],
        vec!["job", "show", "F"],
    ] {
        let out = root.unilab().args(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let forged_line = text.lines().any(|line| line.starts_with("error: forged"));
        if text.contains('\u{1b}') || forged_line || !text.contains(escaped) {
            raw.push(format!("{args:?}:\n{text}"));
        }
    }
    assert!(raw.is_empty(), "shown raw by:\n{}", raw.join("\n"));
    root.unilab().args(["log", "verify"]).assert().success();
}

/// An alarm that named another job, or a time before the rank's soak started or two minutes
/// ahead of the clock, was believed: recorded as seen and, under `--on-job-alarm stop`, the end
/// of a rank nothing was wrong with. Each is refused with one warning that says why, neither
/// recorded nor acted on, and the soak passes. (An `at` out of JSON's range, `1e400`, is no
/// alarm at all: said once, and the rank stops looking, as for any file that is not one.)
#[test]
fn an_alarm_of_another_job_or_an_impossible_time_is_not_believed() {
    let cases = [
        ("other-job", "is not believed: it names job `someone-else`"),
        (
            "before-start",
            "before this rank's soak started, when the job had no alarm",
        ),
        ("ahead", "from now, more than 1m ahead of this host's clock"),
        ("out-of-range", "is not an alarm: not its JSON object"),
    ];
    // Each rank's alarm, as forged for it.
    let forged = |job: &str| match job {
        "other-job" => alarm_json("someone-else", &now().to_string()),
        "before-start" => alarm_json(job, &(now() - 3600.0).to_string()),
        "ahead" => alarm_json(job, &(now() + 120.0).to_string()),
        _ => alarm_json(job, "1e400"),
    };
    let ranks: Vec<(TestRoot, tempfile::TempDir)> = cases
        .iter()
        .map(|_| (TestRoot::new(), private_tempdir("unilab-doubt-")))
        .collect();
    let mut started = Started::default();
    let pids: Vec<u32> = cases
        .iter()
        .zip(&ranks)
        .map(|((job, _), (root, dir))| {
            let command = until_go(dir.path(), 0);
            let command: Vec<&str> = command.iter().map(String::as_str).collect();
            started.spawn(&mut rank_soak(
                root,
                dir.path(),
                job,
                &["--on-job-alarm", "stop"],
                &command,
            ))
        })
        .collect();
    let soaks: Vec<String> = ranks.iter().map(|(root, _)| running_soak(root)).collect();
    for ((job, _), (root, _)) in cases.iter().zip(&ranks) {
        forge(&job_dir(root, job), &forged(job));
    }
    // Every rank looks at its alarm at each sample: a few of them, and it was looked at again.
    for (root, _) in &ranks {
        samples_pass(root, 5);
    }
    for (_, dir) in &ranks {
        std::fs::write(dir.path().join("go"), b"").unwrap();
    }
    let mut believed = Vec::new();
    for (((job, said), (root, dir)), (pid, soak)) in
        cases.iter().zip(&ranks).zip(pids.iter().zip(&soaks))
    {
        let code = started.exit_code(*pid, PATIENCE);
        let err = std::fs::read_to_string(dir.path().join("err")).unwrap_or_default();
        let seen = recorded(root, soak, "soak_job_alarm_seen");
        let warned = err.matches(said).count();
        if code != Some(0) || seen != 0 || warned != 1 {
            believed.push(format!(
                "{job}: exit {code:?}, recorded as seen {seen} times, warned {warned} times:\n{err}"
            ));
        }
        root.unilab().args(["log", "verify"]).assert().success();
    }
    assert!(believed.is_empty(), "{}", believed.join("\n"));
}

/// An alarm of job `job` raised now by another soak, its `at` as given (raw JSON).
fn alarm_json(job: &str, at: &str) -> String {
    format!(
        r#"{{"job":"{job}","rank":1,"host":"n1","soak_id":"20261201T100000-beef","failure_kind":"stale_progress","reason":"no progress","at":{at}}}"#
    )
}

/// The job's directory, trusted after the start: swapped during the run for a link to another
/// directory (which holds an alarm of the job's run), it was read through — the rank took the
/// alarm it found there as its job's — and written through: the rank's own failure went where
/// the link led. The rank keeps the directories it checked at its start, held open: the alarm
/// where the link leads is neither seen nor added to, the rank's alarm is written in the run it
/// joined (now under another name), and a reader opening the path afresh (`job show`) refuses
/// the link.
#[test]
fn a_job_directory_swapped_for_a_link_during_the_run_is_not_followed() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-swap-");
    let mut started = Started::default();
    let command = until_go(dir.path(), 3);
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    let pid = started.spawn(&mut rank_soak(&root, dir.path(), "S", &[], &command));
    let soak = running_soak(&root);
    let joined = job_dir(&root, "S")
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .to_owned();
    let moved = joined.with_file_name("S.joined");
    std::fs::rename(&joined, &moved).unwrap();
    let elsewhere = private_tempdir("unilab-elsewhere-");
    std::os::unix::fs::symlink(elsewhere.path(), &joined).unwrap();
    let planted_run = elsewhere.path().join("runs").join("1");
    private_dir_all(&planted_run);
    let planted = alarm_json("S", &now().to_string());
    forge(&planted_run, &planted);
    samples_pass(&root, 5);
    std::fs::write(dir.path().join("go"), b"").unwrap();
    let code = started.exit_code(pid, PATIENCE);
    let err = std::fs::read_to_string(dir.path().join("err")).unwrap_or_default();
    assert_eq!(code, Some(1), "the command failed: {err}");
    assert_eq!(
        recorded(&root, &soak, "soak_job_alarm_seen"),
        0,
        "the alarm where the link leads is not the job's: {err}"
    );
    let own: Value =
        serde_json::from_slice(&std::fs::read(moved.join("runs").join("1").join("alarm")).unwrap())
            .unwrap();
    assert_eq!(own["soak_id"], soak.as_str(), "{own:#}");
    assert_eq!(own["failure_kind"], "command_failed", "{own:#}");
    let mut there: Vec<String> = std::fs::read_dir(&planted_run)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    there.sort();
    assert_eq!(there, ["alarm"], "nothing written where the link leads");
    assert_eq!(
        std::fs::read_to_string(planted_run.join("alarm")).unwrap(),
        planted
    );
    let shown = root.unilab().args(["job", "show", "S"]).output().unwrap();
    assert!(shown.status.success(), "{shown:?}");
    let warned = String::from_utf8_lossy(&shown.stderr);
    assert!(warned.contains("it is a symbolic link"), "{warned}");
    root.unilab().args(["log", "verify"]).assert().success();
}

/// Another host's log under the shared root is a file: its host (the log's scope) and what its
/// records hold reached `soak list --job`, `job list`, `job show` and `history --all-hosts` with
/// their escapes (unilab's own reset among them, which the last guard of a line keeps), and a
/// soak id, command line and commit of this host's log `soak list`, `soak show`, `soak
/// compare`, `history` and `log stats`. Every list shows them escaped, and no forged line.
#[test]
fn text_of_a_forged_log_is_shown_escaped_in_every_list() {
    let root = TestRoot::new();
    let forged = "\u{1b}[0m\nerror: forged";
    let uid = nix::unistd::getuid().as_raw();
    let other = root.root().join("other-node").join(uid.to_string());
    private_dir_all(&other);
    let supervisor = unilab::ProcessIdentity {
        pid: 5000,
        start_ticks: 1_000_000,
    };
    let log = unilab::EventLog::open(
        &other.join("events.redb"),
        unilab::Scope {
            uid,
            host: format!("n9{forged}"),
        },
        unilab::PROJECTIONS,
    )
    .unwrap();
    log.append_all(forged_job_soak("a", forged, supervisor))
        .unwrap();
    drop(log);
    root.log()
        .append_all(forged_job_soak("b", forged, supervisor))
        .unwrap();
    let mut raw = Vec::new();
    for args in [
        &["soak", "list"][..],
        &["soak", "show", "latest"],
        &["soak", "compare", "latest", "latest"],
        &["soak", "list", "--job", "ring"],
        &["job", "list"],
        &["job", "show", "ring"],
        &["history"],
        &["history", "--all-hosts"],
        &["log", "stats"],
    ] {
        let out = root.unilab().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let forged_line = text.lines().any(|line| line.starts_with("error: forged"));
        if text.contains('\u{1b}') || forged_line || !text.contains("\\u{1b}[0m") {
            raw.push(format!("{args:?}:\n{text}"));
        }
    }
    assert!(raw.is_empty(), "shown raw by:\n{}", raw.join("\n"));
}

/// [`job_soak`] of job `ring` under an id that holds `forged`, its rank recorded as `1` and
/// `forged`, its command `sh -c` of `train` and `forged`, its commit `c0ffee` and `forged`.
fn forged_job_soak(
    which: &str,
    forged: &str,
    supervisor: unilab::ProcessIdentity,
) -> Vec<(unilab::Subject, unilab::StoredEvent)> {
    let mut events = job_soak(&format!("20261207T090000-{which}{forged}"), supervisor);
    if let Some((_, unilab::StoredEvent::SoakStartedV9 { start, .. })) = events.first_mut() {
        start.metadata.insert("job".into(), "ring".into());
        start.metadata.insert("rank".into(), format!("1{forged}"));
        start.command = vec!["sh".into(), "-c".into(), format!("train{forged}")];
        start.runtime_json =
            json!({"source": {"git": {"commit": format!("c0ffee{forged}"), "dirty": true}}})
                .to_string();
    }
    events
}
