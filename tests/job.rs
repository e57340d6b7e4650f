//! `job show` and `job list`: the ranks of a job, each under its own soak, side by side from
//! every host's log, and the rank that hung named.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

const WORLD: u32 = 4;
const HUNG: u32 = 2;

/// `py-spy` to use: `UNILAB_TEST_PY_SPY`, else one on `PATH`.
fn py_spy() -> Option<PathBuf> {
    if let Some(named) = std::env::var_os("UNILAB_TEST_PY_SPY") {
        return Some(PathBuf::from(named));
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("py-spy"))
        .find(|path| path.is_file())
}

/// `unilab soak run --job J --rank R` over one rank of the ring, its progress in its own
/// directory (the ring's port files in another, so that they count as no rank's progress).
fn rank_soak(
    root: &TestRoot,
    dir: &Path,
    rank: u32,
    py_spy: Option<&Path>,
) -> std::process::Command {
    let progress = dir.join(format!("progress-{rank}"));
    private_dir_all(&progress);
    let mut cmd = std::process::Command::new(unilab_bin());
    cmd.env_clear()
        .env("PATH", path_with_fixtures())
        .env("HOME", root.root())
        .env("LANG", "C.UTF-8")
        .env("TZ", "UTC")
        .arg("--root")
        .arg(root.root())
        .args([
            "--quiet",
            "soak",
            "run",
            "--job",
            "J",
            "--rank",
            &rank.to_string(),
        ])
        .args(["--stale-progress", "3s", "--sample-interval", "0.1"])
        // The tree is kept, untouched, a while after each capture: the other ranks' soaks
        // trip within a few samples and capture theirs before any rank's end closes the ring.
        .args(["--dump-signal", "WINCH", "--dump-wait", "4s"])
        .arg("--progress-dir")
        .arg(&progress)
        .arg("--output")
        .arg(dir.join(format!("soak-{rank}.json")));
    if let Some(py_spy) = py_spy {
        cmd.arg("--py-spy").arg(py_spy);
    }
    cmd.args(["--", "python3"])
        .arg(fixtures_dir().join("ring_allreduce.py"))
        .args([
            "--world",
            &WORLD.to_string(),
            "--port-base",
            "0",
            "--rank",
            &rank.to_string(),
        ])
        .args(["--hang-rank", &HUNG.to_string(), "--step-sleep", "0.05"])
        .arg("--progress-dir")
        .arg(&progress)
        .arg("--rendezvous-dir")
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("err-{rank}"))).unwrap());
    cmd
}

/// Four ranks of a ring all-reduce, each under its own soak of job `J`, rank 2 hung in
/// `load_batch`: every soak fails on stale progress, and `job show J` lists the four, names
/// rank 2 the odd one with a signature of its own (`load_batch` on top with py-spy; its
/// `wchan`/system call without), and says who tripped first. `job list` lists the job; an
/// unknown job is refused with exit 3; one rank's log unreadable is a warning, and the rest is
/// shown.
#[test]
fn job_show_names_the_hung_rank_of_a_ring() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-job-");
    let py_spy = py_spy();
    let mut started = Started::default();
    let pids: Vec<u32> = (0..WORLD)
        .map(|rank| started.spawn(&mut rank_soak(&root, dir.path(), rank, py_spy.as_deref())))
        .collect();
    for (rank, pid) in pids.iter().enumerate() {
        let code = started.exit_code(*pid, Duration::from_secs(300));
        let err =
            std::fs::read_to_string(dir.path().join(format!("err-{rank}"))).unwrap_or_default();
        assert_eq!(code, Some(1), "rank {rank}'s soak: {err}");
    }

    let shown = root
        .unilab()
        .args(["--json", "job", "show", "J"])
        .output()
        .unwrap();
    assert!(shown.status.success(), "{shown:?}");
    let view: Value = serde_json::from_slice(&shown.stdout).unwrap();
    let ranks = view["ranks"].as_array().unwrap();
    assert_eq!(
        ranks
            .iter()
            .map(|r| r["rank"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [0, 1, 2, 3],
        "{view:#}"
    );
    for rank in ranks {
        assert_eq!(rank["failure_kind"], "stale_progress", "{view:#}");
        assert_eq!(rank["status"], "failed");
        assert!(rank["last_progress_at"].as_f64().is_some(), "{view:#}");
        assert!(rank["signature"].is_string(), "{view:#}");
        assert_eq!(rank["last_step"], Value::Null);
    }
    assert_eq!(view["job"], "J");
    assert_eq!(view["odd_ranks"], serde_json::json!([HUNG]), "{view:#}");
    let hung = &ranks[HUNG as usize];
    for other in [0, 1, 3] {
        assert_ne!(ranks[other]["signature"], hung["signature"], "{view:#}");
    }
    if py_spy.is_some() {
        assert_eq!(hung["top_frames"][0]["function"], "load_batch", "{view:#}");
    }
    assert_eq!(view["stragglers"], serde_json::json!([]));
    assert!(view["first_stalled"]["rank"].is_u64(), "{view:#}");
    let verdict = view["verdict"].as_str().unwrap();
    assert!(
        verdict.contains("tripped first: stale_progress"),
        "{verdict}"
    );
    assert!(verdict.contains(&format!("rank {HUNG} on ")), "{verdict}");

    let table = root.unilab().args(["job", "show", "J"]).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(
        table.starts_with("RANK") && table.contains("SIGNATURE"),
        "{table}"
    );
    assert!(table.contains("ranks wait in"), "{table}");

    let listed: Value = serde_json::from_slice(
        &root
            .unilab()
            .args(["--json", "job", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(listed[0]["job"], "J", "{listed:#}");
    assert_eq!(listed[0]["ranks"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(listed[0]["status"]["failed"], 4);

    root.unilab()
        .args(["job", "show", "nope"])
        .assert()
        .code(3)
        .stderr(predicates::str::contains("no soak of job `nope`"))
        .stderr(predicates::str::contains("hint: see `unilab job list`"));

    // Another host's log that cannot be read: named in a warning, the rest shown.
    let uid = nix::unistd::getuid().as_raw().to_string();
    let other = root.root().join("other-node").join(&uid);
    private_dir_all(&other);
    std::fs::write(other.join("events.redb"), b"not a log").unwrap();
    let shown = root
        .unilab()
        .args(["--json", "job", "show", "J"])
        .output()
        .unwrap();
    assert!(shown.status.success(), "{shown:?}");
    let stderr = String::from_utf8_lossy(&shown.stderr);
    assert!(
        stderr.contains("cannot read the log of host `other-node`"),
        "{stderr}"
    );
    let view: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(view["ranks"].as_array().unwrap().len(), 4);

    root.unilab().args(["log", "verify"]).assert().success();
}
