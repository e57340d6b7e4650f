//! On a real Slurm cluster: two nodes on this machine (`scripts/slurm-cluster.sh`), each
//! `slurmd` in its own UTS namespace, so that a task's host is `n1` or `n2` and each host keeps
//! its own log under one shared state root. Skipped, with a message, where the cluster cannot
//! start (not root, no Slurm and no apt).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

/// A cluster brought up for one test, and brought down (by pid) when dropped.
struct Cluster {
    dir: tempfile::TempDir,
}

impl Cluster {
    fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/slurm-cluster.sh")
    }

    /// `None` (and a message) where Slurm cannot run here.
    fn up() -> Option<Self> {
        let dir = tempfile::Builder::new()
            .prefix("unilab-slurm-")
            .tempdir()
            .unwrap();
        let out = Command::new(Self::script())
            .arg("up")
            .arg(dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        match out.status.code() {
            Some(0) => Some(Cluster { dir }),
            Some(77) => {
                eprintln!(
                    "skipped the Slurm test: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            _ => panic!(
                "the Slurm cluster did not come up: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    /// A Slurm client command (`srun`, `scancel`, `squeue`) against this cluster.
    fn client(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("SLURM_CONF", self.conf())
            .env("PATH", path_with_fixtures())
            .stdin(Stdio::null());
        cmd
    }

    fn srun(&self, args: &[&str]) -> Output {
        self.client("srun").args(args).output().unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(Self::script())
            .arg("down")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .output();
    }
}

/// A shell line for each rank: its own progress directory, then `unilab ARGS`.
fn rank_line(root: &Path, args: &str) -> String {
    format!(
        "mkdir -m 700 -p {progress}/$SLURM_PROCID && exec {unilab} --root {root} {args}",
        progress = root.join("progress").display(),
        unilab = unilab_bin().display(),
        root = root.display(),
    )
}

/// `soak run` of the example trainer for each rank, its artifact `soak-{rank}.json`.
fn soak_line(root: &Path, steps: u32) -> String {
    rank_line(
        root,
        &format!(
            "soak run --progress-dir {progress}/$SLURM_PROCID --output '{root}/soak-{{rank}}.json' \
             --sample-interval 0.2 --shutdown-grace 1 -- python3 {trainer} \
             --progress-dir {progress}/$SLURM_PROCID --steps {steps} --step-seconds 0.1",
            progress = root.join("progress").display(),
            root = root.display(),
            trainer = trainer().display(),
        ),
    )
}

/// `soak list --job JOB --json` read from this host: every rank's soak from every host's log.
fn job_soaks(root: &TestRoot, job: &str) -> Vec<Value> {
    let out = root
        .unilab()
        .args(["--json", "soak", "list", "--job", job])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn each_rank_on_each_node_records_its_own_soak_and_scancel_leaves_nothing_behind() {
    let Some(cluster) = Cluster::up() else {
        return;
    };
    let root = TestRoot::new();
    let state = root.root();

    // Two ranks on two nodes: each host's log holds its rank's soak, its artifact named by rank.
    let out = cluster.srun(&["-N2", "-n2", "bash", "-c", &soak_line(state, 6)]);
    assert!(out.status.success(), "{out:?}");
    let mut jobs = Vec::new();
    for rank in ["0", "1"] {
        let artifact: Value = serde_json::from_slice(
            &std::fs::read(state.join(format!("soak-{rank}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(artifact["outcome"]["status"], "passed", "rank {rank}");
        assert_eq!(artifact["metadata"]["rank"], rank);
        jobs.push(artifact["metadata"]["job"].as_str().unwrap().to_owned());
    }
    assert_eq!(jobs[0], jobs[1], "one job");
    let uid = nix::unistd::getuid().as_raw().to_string();
    for node in ["n1", "n2"] {
        assert!(
            state.join(node).join(&uid).join("events.redb").is_file(),
            "{node} has its own log"
        );
    }
    let listed = job_soaks(&root, &jobs[0]);
    let hosts: Vec<(&str, &str)> = listed
        .iter()
        .map(|s| (s["host"].as_str().unwrap(), s["rank"].as_str().unwrap()))
        .collect();
    assert_eq!(hosts.len(), 2, "{listed:?}");
    assert!(
        hosts.contains(&("n1", "0")) && hosts.contains(&("n2", "1")),
        "{hosts:?}"
    );

    // `scancel` during a second run: both ranks are recorded, and nothing is left running.
    let mut run = cluster
        .client("srun")
        .args(["-N2", "-n2", "bash", "-c", &soak_line(state, 600)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut job = String::new();
    eventually("both ranks to be sampling", Duration::from_secs(30), || {
        let squeue = cluster
            .client("squeue")
            .args(["-h", "-o", "%i"])
            .output()
            .unwrap();
        job = String::from_utf8_lossy(&squeue.stdout).trim().to_owned();
        !job.is_empty()
            && job_soaks(&root, &job)
                .iter()
                .filter(|s| s["samples"].as_u64() > Some(2))
                .count()
                == 2
    });
    let cancelled = cluster.client("scancel").arg(&job).status().unwrap();
    assert!(cancelled.success());
    run.wait().unwrap();
    let marker = state.join("progress").display().to_string();
    eventually(
        "every process of the job to exit",
        Duration::from_secs(30),
        || {
            live_pids_where(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&marker))
            })
            .is_empty()
        },
    );
    let listed = job_soaks(&root, &job);
    assert_eq!(listed.len(), 2, "{listed:?}");
    for soak in &listed {
        let outcome = &soak["outcome"];
        let judged = outcome["failure_kind"] == "interrupted" || outcome["status"] == "abandoned";
        assert!(
            judged,
            "scancel is an interruption or an abandonment: {soak}"
        );
    }
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
    let text = String::from_utf8_lossy(&verified.stdout);
    assert_eq!(text.matches("ok: ").count(), 2, "{text}");
}
