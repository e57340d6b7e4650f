//! One job, one run: a job run again — a `--job NAME` used after its run ended, a later Slurm
//! step, a requeue — is a run of its own; a rank is one soak in its run; what the command line
//! or a launcher says of the job, run or rank that cannot hold is refused before anything runs.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

/// Long enough for a loaded machine.
const PATIENCE: Duration = Duration::from_secs(120);

/// [`soak`] `n` as rank `rank` of job `job` (`--job`, `--rank`), over `sh -c SCRIPT`.
fn rank_run(
    root: &TestRoot,
    dir: &Path,
    (job, rank, n): (&str, u32, u32),
    script: &str,
) -> Command {
    let mut cmd = quiet_soak(root, dir, n);
    cmd.args(["--job", job, "--rank", &rank.to_string()])
        .args(["--", "sh", "-c", script]);
    cmd
}

/// The artifact of soak `n`.
fn artifact(dir: &Path, n: u32) -> Value {
    let path = dir.join(format!("soak-{n}.json"));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// The ranks' entries of a run, by rank.
fn entries(root: &TestRoot, job: &str, run: &str) -> Vec<Value> {
    let ranks = run_dir(root, job, run).join("ranks");
    marked_ranks(&ranks)
        .into_iter()
        .map(|rank| {
            serde_json::from_slice(&std::fs::read(ranks.join(rank.to_string())).unwrap()).unwrap()
        })
        .collect()
}

/// A `--job NAME` used again after its run failed was refused with exit 3 ("the job has failed
/// already"), and after a run that passed it merged the two runs' ranks. Each use of the name
/// once the last run is over is a run of its own: the next number, with its own ranks (each
/// registered with its soak and ended), its own alarm or none, and the soak records the run it
/// joined.
#[test]
fn a_job_name_used_again_after_its_run_ended_starts_the_next_run() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-runs-");
    let first = rank_run(&root, dir.path(), ("R", 0, 1), "exit 3")
        .output()
        .unwrap();
    assert_eq!(first.status.code(), Some(1), "{first:?}");
    for n in [2, 3] {
        let again = rank_run(&root, dir.path(), ("R", 0, n), "true")
            .output()
            .unwrap();
        assert_eq!(again.status.code(), Some(0), "run {n}: {again:?}");
    }
    let alarm = run_alarm(&root, "R", "1");
    assert_eq!(alarm["run"], "1", "{alarm:#}");
    assert_eq!(alarm["failure_kind"], "command_failed", "{alarm:#}");
    for n in [2, 3] {
        let artifact = artifact(dir.path(), n);
        assert_eq!(artifact["metadata"]["run"], n.to_string(), "{artifact:#}");
        assert!(!run_dir(&root, "R", &n.to_string()).join("alarm").exists());
        let ranks = entries(&root, "R", &n.to_string());
        assert_eq!(ranks.len(), 1, "{ranks:?}");
        assert_eq!(ranks[0]["soak_id"], artifact["soak_id"]);
        assert!(ranks[0]["ended_at"].is_f64(), "{ranks:?}");
    }
    // The first run keeps its rank and its alarm: nothing of the later runs is merged in.
    let ranks = entries(&root, "R", "1");
    assert_eq!(ranks.len(), 1);
    assert_eq!(ranks[0]["soak_id"], artifact(dir.path(), 1)["soak_id"]);
    assert_eq!(run_alarm(&root, "R", "1"), alarm);
    root.unilab().args(["log", "verify"]).assert().success();
}

/// Two soaks claiming one rank of a run were both taken, and the views listed the rank twice.
/// While the first runs, the second is refused (exit 3) naming the soak that holds the rank,
/// before its command runs; the first is left as it was, and passes.
#[test]
fn a_second_soak_of_a_rank_in_its_run_is_refused() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-runs-");
    let go = dir.path().join("go");
    let ran = dir.path().join("ran");
    let mut started = Started::default();
    let running = dir.path().join("running");
    let wait = format!(
        "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
        running.display(),
        go.display()
    );
    let first = started.spawn(&mut rank_run(&root, dir.path(), ("D", 0, 1), &wait));
    eventually("rank 0's command to run", PATIENCE, || running.exists());
    let second = rank_run(
        &root,
        dir.path(),
        ("D", 0, 2),
        &format!("touch '{}'", ran.display()),
    );
    refused(
        assert_cmd::Command::from_std(second),
        3,
        &[
            "error: rank 0 of run `1` is taken already, by soak ",
            "hint: each rank of a run is one soak",
        ],
    );
    let holder = entries(&root, "D", "1")[0]["soak_id"].clone();
    assert!(holder.is_string(), "{holder}");
    assert!(!ran.exists(), "the refused soak's command ran");
    std::fs::write(&go, b"").unwrap();
    assert_eq!(started.exit_code(first, PATIENCE), Some(0));
    assert_eq!(entries(&root, "D", "1").len(), 1);
    root.unilab().args(["log", "verify"]).assert().success();
}

/// `--meta job=B --meta rank=7` moved a rank of job A to another job and rank in the views,
/// while its alarm was job A's. What `--meta` says of a soak's job, run or rank must be what it
/// records: another value is the usage error it is (exit 2), before anything is made; so is a
/// `--run` that cannot name a run, and a job's soak without a rank.
#[test]
fn what_contradicts_a_soaks_job_run_or_rank_is_refused_before_anything_runs() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-runs-");
    let ran = dir.path().join("ran");
    let touch = format!("touch '{}'", ran.display());
    for (extra, saying) in [
        (
            vec!["--meta", "rank=7"],
            "`--meta rank=7` contradicts the rank this soak records (`3`)",
        ),
        (
            vec!["--meta", "job=B"],
            "`--meta job=B` contradicts the job this soak records (`A`)",
        ),
        (
            vec!["--run", "r1", "--meta", "run=r2"],
            "`--meta run=r2` contradicts the run this soak records (`r1`)",
        ),
    ] {
        let mut cmd = quiet_soak(&root, dir.path(), 1);
        cmd.args(["--job", "A", "--rank", "3"])
            .args(&extra)
            .args(["--", "sh", "-c", &touch]);
        refused(
            assert_cmd::Command::from_std(cmd),
            2,
            &[saying, "hint: unilab records the"],
        );
    }
    for bad in ["../x", ".hidden", "a b", ""] {
        let mut cmd = quiet_soak(&root, dir.path(), 1);
        cmd.args(["--job", "A", "--rank", "3", "--run", bad])
            .args(["--", "sh", "-c", &touch]);
        refused(
            assert_cmd::Command::from_std(cmd),
            2,
            &["--run", "`--run retry2`"],
        );
    }
    // A job's soak needs a rank: `--job` without `--rank`, and no launcher's rank.
    let mut cmd = quiet_soak(&root, dir.path(), 1);
    cmd.args(["--job", "A", "--", "sh", "-c", &touch]);
    refused(
        assert_cmd::Command::from_std(cmd),
        2,
        &[
            "this soak of job `A` has no rank",
            "hint: give it with `--rank N`",
        ],
    );
    assert!(!ran.exists(), "a refused soak's command ran");
    assert!(
        !root.root().join("jobs").exists(),
        "no job directory is made for a refused soak"
    );
}

/// Under Slurm, a job was `SLURM_JOB_ID` alone: after one failed step every later step of the
/// allocation, and the job requeued, were refused with exit 3 before their command ran. Each
/// step and each restart is a run (`s<step>.r<restarts>`), so they run; a `--run ID` used
/// again once its run is over opens the next of it.
#[test]
fn a_later_step_or_a_requeue_of_a_failed_job_runs() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-runs-");
    let step = |n: u32, (step, restarts): (&str, Option<&str>), script: &str| {
        // The job and the rank are Slurm's: no `--job`, no `--rank`.
        let mut cmd = quiet_soak(&root, dir.path(), n);
        cmd.envs([
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_ID", step),
        ])
        .args(["--", "sh", "-c", script]);
        if let Some(restarts) = restarts {
            cmd.env("SLURM_RESTART_COUNT", restarts);
        }
        cmd.output().unwrap()
    };
    let failed = step(1, ("0", None), "exit 3");
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");
    let runs = [
        (2, ("1", None), "s1.r0"),
        (3, ("0", Some("1")), "s0.r1"),
        (4, ("0", None), "s0.r0.2"),
    ];
    for (n, (id, restarts), _) in runs {
        let out = step(n, (id, restarts), "true");
        assert_eq!(out.status.code(), Some(0), "step {n}: {out:?}");
    }
    assert_eq!(run_alarm(&root, "4242", "s0.r0")["run"], "s0.r0");
    for (n, _, run) in runs {
        let artifact = artifact(dir.path(), n);
        assert_eq!(artifact["metadata"]["run"], run, "{artifact:#}");
        assert_eq!(entries(&root, "4242", run).len(), 1, "{run}");
    }
    // `--run` overrides Slurm's, and a run named again once over opens the next of it.
    for (n, run) in [(5, "mine"), (6, "mine.2")] {
        let out = quiet_soak(&root, dir.path(), n)
            .envs([("SLURM_JOB_ID", "4242"), ("SLURM_PROCID", "0")])
            .env("SLURM_STEP_ID", "9")
            .args(["--run", "mine", "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(entries(&root, "4242", run).len(), 1, "{run}");
    }
    root.unilab().args(["log", "verify"]).assert().success();
}
