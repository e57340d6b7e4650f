//! A job on the two-node Slurm cluster (`scripts/slurm-cluster.sh`): the ranks of a ring
//! all-reduce, two a node, each under its own soak that takes its job from `SLURM_JOB_ID` and
//! its rank from `SLURM_PROCID`; `job show` read on either node, and with one node's log
//! unreadable. Skipped, with a message, where the cluster cannot start (not root, no Slurm and
//! no apt).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

const WORLD: u32 = 4;
const HUNG: u32 = 2;

/// The shell line of each task: its own progress directory, then `unilab soak run` over its rank
/// of the ring (the rank from `SLURM_PROCID`, ports met through `rendezvous`), its artifact
/// `soak-{job}-{rank}.json` in the state root. Each soak keeps its tree, untouched, a while after
/// its capture, so that the other ranks capture theirs before any rank's end closes the ring.
fn ring_line(state: &Path, rendezvous: &Path, py_spy: Option<&Path>) -> String {
    let progress = format!("{}/$SLURM_PROCID", state.join("progress").display());
    let py_spy = py_spy.map_or_else(String::new, |p| format!("--py-spy {} ", p.display()));
    format!(
        "(umask 077 && mkdir -p {progress}) && exec {unilab} --root {root} --quiet soak run \
         --stale-progress 3s --sample-interval 0.2 --dump-signal WINCH --dump-wait 4s {py_spy}\
         --progress-dir {progress} --output '{root}/soak-{{job}}-{{rank}}.json' \
         -- python3 {ring} --world {WORLD} --rank $SLURM_PROCID --port-base 0 \
         --hang-rank {HUNG} --step-sleep 0.05 --progress-dir {progress} \
         --rendezvous-dir {rendezvous}",
        unilab = unilab_bin().display(),
        root = state.display(),
        ring = fixtures_dir().join("ring_allreduce.py").display(),
        rendezvous = rendezvous.display(),
    )
}

/// `unilab --root STATE --json job show JOB`, run on `node`.
fn job_show_on(cluster: &Cluster, node: &str, state: &Path, job: &str) -> Output {
    let state = state.to_str().unwrap();
    cluster.unilab_on(node, &[], &["--root", state, "--json", "job", "show", job])
}

/// The view `job show` printed, once it succeeded.
fn view_of(out: &Output) -> Value {
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// Each rank of `view` and its host.
fn hosts_of(view: &Value) -> BTreeMap<u64, String> {
    view["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["rank"].as_u64().unwrap(),
                r["host"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// `srun -N2 -n4 --ntasks-per-node=2`: four ranks of a ring, rank 2 hung in `load_batch`, each
/// under its own soak; every soak fails. `job show` of the Slurm job, on n1 and on n2, lists the
/// four ranks on their nodes (two a node) and names rank 2 the odd one. Then one node's log is
/// garbage: read on the other node, `job show` warns, naming that log, and shows the other
/// node's ranks; read on the damaged node, its own log is an error as for every command (5).
#[test]
fn job_show_on_either_node_names_the_hung_rank() {
    let Some(cluster) = Cluster::up() else {
        return;
    };
    let root = TestRoot::new();
    let state = root.root();
    let dir = private_tempdir("unilab-slurm-job-");
    let rendezvous = dir.path().join("ring");
    private_dir_all(&rendezvous);
    let py_spy = py_spy("the check of the hung rank's Python stack");
    let mut started = Started::default();
    let (out, err) = (dir.path().join("srun.out"), dir.path().join("srun.err"));
    let srun = started.spawn(
        cluster
            .client("srun")
            .args(["-N2", "-n4", "--ntasks-per-node=2", "-l", "bash", "-c"])
            .arg(ring_line(state, &rendezvous, py_spy.as_deref()))
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap()),
    );
    let code = started.exit_code(srun, Duration::from_secs(300));
    let said = || {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        format!("{}{}", read(&out), read(&err))
    };
    assert_eq!(code, Some(1), "every rank's soak fails: {}", said());

    // The job is Slurm's: each artifact names it, and its rank, from Slurm's variables.
    let artifacts: Vec<Value> = (0..WORLD)
        .map(|rank| {
            let suffix = format!("-{rank}.json");
            let path = std::fs::read_dir(state)
                .unwrap()
                .map(|entry| entry.unwrap().path())
                .find(|p| {
                    let name = p.file_name().unwrap().to_string_lossy();
                    name.starts_with("soak-") && name.ends_with(&suffix)
                })
                .unwrap_or_else(|| panic!("rank {rank}'s artifact: {}", said()));
            serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
        })
        .collect();
    let job = artifacts[0]["metadata"]["job"].as_str().unwrap().to_owned();
    assert!(job.parse::<u32>().is_ok(), "a Slurm job id: {job}");
    for (rank, artifact) in artifacts.iter().enumerate() {
        assert_eq!(artifact["metadata"]["job"], job.as_str(), "rank {rank}");
        assert_eq!(artifact["metadata"]["rank"], rank.to_string());
        assert_eq!(artifact["outcome"]["status"], "failed", "rank {rank}");
    }

    // Read on either node, the view is one: four ranks, two a node, rank 2 the odd one.
    let views: Vec<Value> = ["n1", "n2"]
        .iter()
        .map(|node| view_of(&job_show_on(&cluster, node, state, &job)))
        .collect();
    assert_eq!(views[0], views[1], "one view from either node");
    let view = &views[0];
    assert_eq!(view["job"], job.as_str());
    let hosts = hosts_of(view);
    assert_eq!(hosts.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
    for node in ["n1", "n2"] {
        assert_eq!(
            hosts.values().filter(|h| *h == node).count(),
            2,
            "two ranks on {node}: {view:#}"
        );
    }
    for rank in view["ranks"].as_array().unwrap() {
        assert_eq!(rank["status"], "failed", "{view:#}");
        assert_eq!(rank["node"], rank["host"], "SLURMD_NODENAME: {view:#}");
        assert!(rank["signature"].is_string(), "{view:#}");
    }
    assert_eq!(view["odd_ranks"], serde_json::json!([HUNG]), "{view:#}");
    let hung = &view["ranks"][HUNG as usize];
    for other in (0..WORLD).filter(|r| *r != HUNG) {
        assert_ne!(
            view["ranks"][other as usize]["signature"], hung["signature"],
            "{view:#}"
        );
    }
    if py_spy.is_some() {
        assert_eq!(hung["top_frames"][0]["function"], "load_batch", "{view:#}");
    }
    let hung_host = hosts[&u64::from(HUNG)].clone();
    let verdict = view["verdict"].as_str().unwrap();
    assert!(
        verdict.contains(&format!("rank {HUNG} on {hung_host}")),
        "{verdict}"
    );
    // Each node's log verifies, read on that node.
    let verified = cluster.srun(&[
        "-N2",
        "-n2",
        unilab_bin().to_str().unwrap(),
        "--root",
        state.to_str().unwrap(),
        "log",
        "verify",
    ]);
    assert!(verified.status.success(), "{verified:?}");

    // The other node's log is garbage: read on the hung rank's node, a warning names it, and
    // this node's ranks are shown.
    let damaged = if hung_host == "n1" { "n2" } else { "n1" };
    let uid = nix::unistd::getuid().as_raw().to_string();
    let log = state.join(damaged).join(&uid).join("events.redb");
    std::fs::write(&log, b"not a log").unwrap();
    let shown = job_show_on(&cluster, &hung_host, state, &job);
    let view = view_of(&shown);
    let stderr = String::from_utf8_lossy(&shown.stderr);
    assert!(
        stderr.contains(&format!(
            "warning: cannot read the log of host `{damaged}` (`{}`)",
            log.display()
        )),
        "{stderr}"
    );
    let left: Vec<u64> = hosts
        .iter()
        .filter(|(_, host)| **host == hung_host)
        .map(|(rank, _)| *rank)
        .collect();
    let shown_hosts = hosts_of(&view);
    assert_eq!(shown_hosts.keys().copied().collect::<Vec<_>>(), left);
    assert!(shown_hosts.values().all(|h| *h == hung_host), "{view:#}");
    assert!(
        view["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == "failed"),
        "{view:#}"
    );
    // Read on the damaged node itself, its own log is damage, as for every command there.
    let own = job_show_on(&cluster, damaged, state, &job);
    assert_eq!(own.status.code(), Some(5), "{own:?}");
    assert!(
        String::from_utf8_lossy(&own.stderr).contains("move the file aside"),
        "{own:?}"
    );

    // Nothing of the job is left running.
    let marker = state.display().to_string();
    eventually(
        "the ring's processes to exit",
        Duration::from_secs(30),
        || {
            live_pids_where(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                    let c = String::from_utf8_lossy(&c);
                    c.contains("ring_allreduce.py") && c.contains(&marker)
                })
            })
            .is_empty()
        },
    );
}
