//! The job views read what the log keeps of each soak (its job, its rank's summary), not every
//! sample: a soak outside the job is never read, not even its archive; a rank's row is what a
//! fold of all its records makes; a log that keeps none is read from every sample, with a
//! warning.

use std::path::Path;

use serde_json::Value;

use crate::common::*;

/// `unilab --quiet soak run` of soak `n` in a cleared environment, sampled every 0.1 s, its
/// command writing progress into `progress-<n>` five times over a second; `job` and `rank` as
/// given (`None`: outside a job); `fail` makes its command exit 3 after 0.3 s (its job's alarm,
/// which the ranks still running see). Begun, not waited for.
fn soak(root: &TestRoot, dir: &Path, n: u32, job: Option<(&str, u32)>, fail: bool) -> Begun {
    let progress = dir.join(format!("progress-{n}"));
    let script = if fail {
        format!("echo 1 >> {}/step; sleep 0.3; exit 3", progress.display())
    } else {
        format!(
            "for i in 1 2 3 4 5; do echo $i >> {}/step; sleep 0.2; done",
            progress.display()
        )
    };
    let mut cmd = quiet_soak(root, dir, n);
    if let Some((job, rank)) = job {
        cmd.args(["--job", job, "--rank", &rank.to_string()]);
    }
    let child = cmd.args(["--", "sh", "-c", &script]).spawn().unwrap();
    Begun {
        child,
        artifact: dir.join(format!("soak-{n}.json")),
    }
}

/// A soak started by [`soak`].
struct Begun {
    child: std::process::Child,
    artifact: std::path::PathBuf,
}

/// Waits for each soak: its id.
fn ids(started: Vec<Begun>) -> Vec<String> {
    started
        .into_iter()
        .map(|mut s| {
            let status = s.child.wait().unwrap();
            let artifact: Value = serde_json::from_slice(&std::fs::read(&s.artifact).unwrap())
                .unwrap_or_else(|e| panic!("{status:?}: {e}"));
            artifact["soak_id"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// Ranks `0..n` of job `J`, run together; those in `failing` fail.
fn job(root: &TestRoot, dir: &Path, n: u32, failing: &[u32]) -> Vec<String> {
    ids((0..n)
        .map(|rank| soak(root, dir, rank, Some(("J", rank)), failing.contains(&rank)))
        .collect())
}

/// `unilab log archive --soak ID`, then its archive file removed.
fn archive_and_lose(root: &TestRoot, id: &str) {
    let out = root
        .unilab()
        .args(["log", "archive", "--soak", id])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let file = root
        .log_path()
        .with_file_name(format!("events.soak-{id}.zst"));
    std::fs::remove_file(&file).unwrap();
}

/// `unilab ARGS`: its exit code, standard output and standard error.
fn run(root: &TestRoot, args: &[&str]) -> (Option<i32>, String, String) {
    let out = root.unilab().args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The ranks `job show --json` lists.
fn shown_ranks(root: &TestRoot, job: &str) -> (Vec<Value>, String) {
    let (code, stdout, stderr) = run(root, &["--json", "job", "show", job]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let view: Value = serde_json::from_str(&stdout).unwrap();
    (view["ranks"].as_array().unwrap().clone(), stderr)
}

/// One missing archive of a soak outside the job made `job list`, `job show`, `job report` and
/// `soak list --job` fail with exit 5, though a missing archive is a warning elsewhere: each
/// read every soak's start to learn its job, from its archive when archived. A soak's job is
/// now kept in the live log, so a soak outside the job is not read at all: every view of the
/// job shows its ranks, and says nothing of the other soak.
#[test]
fn a_missing_archive_of_a_soak_outside_the_job_leaves_every_job_view_whole() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-kept-");
    let ranks = job(&root, dir.path(), 2, &[]);
    let other = ids(vec![soak(&root, dir.path(), 9, None, false)]).remove(0);
    archive_and_lose(&root, &other);

    let report = dir.path().join("job.html");
    for args in [
        &["--json", "job", "list"][..],
        &["--json", "job", "show", "J"],
        &["job", "report", "J", "--output", report.to_str().unwrap()],
        &["--json", "soak", "list", "--job", "J"],
    ] {
        let (code, stdout, stderr) = run(&root, args);
        assert_eq!(code, Some(0), "{args:?}: {stdout}{stderr}");
        assert!(
            !stderr.contains(&other),
            "{args:?} read the other soak: {stderr}"
        );
        match args.join(" ").as_str() {
            line if line.starts_with("job report") => {
                let page = std::fs::read_to_string(&report).unwrap();
                for rank in ["rank 0", "rank 1"] {
                    assert!(page.contains(rank), "the page lacks {rank}");
                }
            }
            "--json job list" => {
                let jobs: Value = serde_json::from_str(&stdout).unwrap();
                assert_eq!(jobs[0]["job"], "J", "{jobs:#}");
                assert_eq!(jobs[0]["ranks"], serde_json::json!([0, 1]), "{jobs:#}");
            }
            _ => {
                for id in &ranks {
                    assert!(
                        stdout.contains(id.as_str()),
                        "{args:?} lacks {id}: {stdout}"
                    );
                }
            }
        }
    }
    let (ranks_shown, _) = shown_ranks(&root, "J");
    assert_eq!(ranks_shown.len(), 2);
}

/// A rank whose archive is missing made every view of its job fail with exit 5. `job show` and
/// the lists now show it from what the log kept of it, as if its archive were there; `job
/// report`, which draws its samples, says in a warning that they cannot be, naming the rank,
/// and shows the rest.
#[test]
fn a_rank_whose_archive_is_missing_is_shown_from_what_the_log_kept() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-kept-");
    let ranks = job(&root, dir.path(), 2, &[1]);
    let (before, _) = shown_ranks(&root, "J");
    archive_and_lose(&root, &ranks[1]);

    let (after, stderr) = shown_ranks(&root, "J");
    assert_eq!(
        after, before,
        "the same rows as before the archive was lost"
    );
    assert!(!stderr.contains("warning"), "{stderr}");
    let (code, stdout, stderr) = run(&root, &["--json", "soak", "list", "--job", "J"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains(&ranks[1]), "{stdout}");

    let report = dir.path().join("job.html");
    let (code, stdout, stderr) = run(
        &root,
        &["job", "report", "J", "--output", report.to_str().unwrap()],
    );
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let named = format!(
        "rank 1 on host `{}` (soak `{}`)",
        root.scope().host,
        ranks[1]
    );
    assert!(
        stderr.contains(&named) && stderr.contains("its samples are not drawn"),
        "{stderr}"
    );
    let page = std::fs::read_to_string(&report).unwrap();
    assert!(
        page.contains("its samples are not drawn"),
        "the page says so too"
    );
    assert!(page.contains("rank 0") && page.contains("rank 1"));
}

/// A copy of `root`'s log as another host's (`host`), under the state root: the view's table
/// dropped, as in a log of an older schema that no one migrated. With `lose`, the archive of that
/// soak is not copied.
fn as_another_hosts_unkept_log(root: &TestRoot, host: &str, lose: Option<&str>) {
    let uid = nix::unistd::getuid().as_raw();
    let dir = root.root().join(host).join(uid.to_string());
    private_dir_all(&dir);
    let from = root.log_path();
    for entry in std::fs::read_dir(from.parent().unwrap()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let archive = name.starts_with("events.soak-");
        if (name == "events.redb" || archive) && lose.is_none_or(|id| !name.contains(id)) {
            std::fs::copy(from.with_file_name(&name), dir.join(&name)).unwrap();
        }
    }
    let db = redb::Database::open(dir.join("events.redb")).unwrap();
    let txn = db.begin_write().unwrap();
    let kept: redb::TableDefinition<&str, &[u8]> =
        redb::TableDefinition::new(unilab::testing::tables::kept_ranks());
    txn.delete_table(kept).unwrap();
    {
        let mut meta = txn.open_table(unilab::testing::tables::META).unwrap();
        let scope = unilab::Scope {
            uid,
            host: host.into(),
        };
        let scope = unilab::testing::codec::encode(&scope).unwrap();
        meta.insert("scope", scope.as_slice()).unwrap();
    }
    txn.commit().unwrap();
}

/// A rank's row read from what the log kept of it is the row a fold of all its records makes:
/// the same soaks read through a copy of the log that keeps nothing (another host's, not
/// migrated) give the same rows, but for their host; that copy is said to be read from every
/// sample, once.
#[test]
fn what_the_log_kept_of_a_rank_is_what_a_fold_of_its_records_makes() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-kept-");
    job(&root, dir.path(), 3, &[2]);
    as_another_hosts_unkept_log(&root, "n2", None);
    let (ranks, stderr) = shown_ranks(&root, "J");
    assert_eq!(ranks.len(), 6, "{ranks:#?}");
    let said = "the log of host `n2` keeps no summary of its ranks";
    assert_eq!(stderr.matches(said).count(), 1, "{stderr}");
    let here = root.scope().host;
    for rank in 0..3u64 {
        let of = |host: &str| {
            let mut row = ranks
                .iter()
                .find(|r| r["rank"] == rank && r["host"] == host)
                .unwrap_or_else(|| panic!("rank {rank} on {host}: {ranks:#?}"))
                .clone();
            row["host"] = Value::Null;
            row
        };
        let kept = of(&here);
        assert_eq!(kept, of("n2"), "rank {rank}");
        assert!(kept["last_progress_at"].is_f64(), "{kept:#}");
        assert!(kept["peak_tree_pss_bytes"].is_u64(), "{kept:#}");
    }
}

/// A soak whose job cannot be told — a log that keeps nothing of it, and its archive missing —
/// made the job views fail with exit 5; it is now named in a warning and left out, and the
/// rest of the job is shown.
#[test]
fn a_soak_whose_job_cannot_be_told_is_named_and_left_out() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-kept-");
    let ranks = job(&root, dir.path(), 2, &[]);
    let out = root
        .unilab()
        .args(["log", "archive", "--soak", &ranks[1]])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    as_another_hosts_unkept_log(&root, "n2", Some(&ranks[1]));
    for args in [
        &["--json", "job", "list"][..],
        &["--json", "job", "show", "J"],
        &["--json", "soak", "list", "--job", "J"],
    ] {
        let (code, stdout, stderr) = run(&root, args);
        assert_eq!(code, Some(0), "{args:?}: {stdout}{stderr}");
        let named = format!("soak `{}` on host `n2`", ranks[1]);
        assert!(
            stderr.contains(&named) && stderr.contains("is missing"),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains("it is left out"), "{args:?}: {stderr}");
    }
    let (shown, _) = shown_ranks(&root, "J");
    let on_n2: Vec<&Value> = shown.iter().filter(|r| r["host"] == "n2").collect();
    assert_eq!(on_n2.len(), 1, "{shown:#?}");
    assert_eq!(on_n2[0]["rank"], 0);
}

/// `soak show` of a rank's soak said nothing of its job: it now says its job, run and rank, and
/// the alarm it saw — whose and when, and its capture at it — in words and under `job` in
/// `--json`; a soak outside a job has `job: null`.
#[test]
fn soak_show_of_a_rank_says_its_job_run_rank_and_the_alarm_it_captured_at() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-kept-");
    let ranks = job(&root, dir.path(), 2, &[1]);
    let other = ids(vec![soak(&root, dir.path(), 9, None, false)]).remove(0);
    let (code, stdout, stderr) = run(&root, &["--json", "soak", "show", &ranks[0]]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let shown: Value = serde_json::from_str(&stdout).unwrap();
    let job = &shown["job"];
    assert_eq!(job["job"], "J", "{job:#}");
    assert_eq!(job["rank"], 0, "{job:#}");
    assert!(job["run"].is_string(), "{job:#}");
    let alarm = &job["alarm"];
    assert_eq!(alarm["rank"], 1, "{job:#}");
    assert_eq!(alarm["host"], root.scope().host.as_str(), "{job:#}");
    assert_eq!(alarm["soak_id"], ranks[1].as_str(), "{job:#}");
    let (at, captured) = (alarm["at"].as_f64(), alarm["captured_at"].as_f64());
    assert!(at.is_some() && captured >= at, "{job:#}");

    let (code, text, stderr) = run(&root, &["soak", "show", &ranks[0]]);
    assert_eq!(code, Some(0), "{text}{stderr}");
    let run_id = job["run"].as_str().unwrap();
    assert!(
        text.contains(&format!("job:      J, run {run_id}, rank 0\n")),
        "{text}"
    );
    let said = format!("alarm:    rank 1 on {} (", root.scope().host);
    assert!(text.contains(&said) && text.contains(" s after"), "{text}");

    let (_, stdout, _) = run(&root, &["--json", "soak", "show", &other]);
    let shown: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(shown["job"], Value::Null);
    let (_, text, _) = run(&root, &["soak", "show", &other]);
    assert!(!text.contains("job:"), "{text}");
}
