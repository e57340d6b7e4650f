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
/// `soak-{job}-{rank}.json` in the state root. No soak stops its tree before every rank of the
/// run has captured (the capture barrier), so no rank's end closes the ring before the others
/// captured theirs.
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

/// The shell line of a task that runs `script` under `unilab soak run` as its rank of the Slurm
/// job (job, rank and run from Slurm's variables), its progress its own directory, its
/// artifact `soak-<job>-<rank>-s<step>-r<restarts>.json` in the state root.
fn step_line(state: &Path, script: &str) -> String {
    let progress = format!(
        "{}/$SLURM_STEP_ID-${{SLURM_RESTART_COUNT:-0}}-$SLURM_PROCID",
        state.join("progress").display()
    );
    format!(
        "(umask 077 && mkdir -p {progress}) && exec {unilab} --root {root} --quiet soak run \
         --allow-no-progress --sample-interval 0.2 --progress-dir {progress} \
         --output \"{root}/soak-{{job}}-{{rank}}-s$SLURM_STEP_ID-r${{SLURM_RESTART_COUNT:-0}}.json\" \
         -- sh -c {script}",
        unilab = unilab_bin().display(),
        root = state.display(),
        script = quoted(script),
    )
}

/// `text` as one word for the shell.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Every artifact of a step's rank under `state`, by (rank, step, restarts), and the job they
/// name.
fn step_artifacts(state: &Path) -> (String, BTreeMap<(u32, u32, u32), Value>) {
    let mut job = String::new();
    let mut found = BTreeMap::new();
    for entry in std::fs::read_dir(state).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let Some(stem) = name
            .strip_prefix("soak-")
            .and_then(|n| n.strip_suffix(".json"))
        else {
            continue;
        };
        let parts: Vec<&str> = stem.split('-').collect();
        let [id, rank, step, restarts] = parts[..] else {
            continue;
        };
        let number = |text: &str, prefix: &str| -> u32 {
            text.strip_prefix(prefix).unwrap().parse().unwrap()
        };
        job = id.to_owned();
        let artifact = serde_json::from_slice(&std::fs::read(state.join(&name)).unwrap()).unwrap();
        found.insert(
            (number(rank, ""), number(step, "s"), number(restarts, "r")),
            artifact,
        );
    }
    (job, found)
}

/// Each rank's artifact of `runs` (step and restarts) under `state`: its outcome and the run
/// its soak records, and the run's directory holds exactly the ranks `0..ranks`, each ended.
fn check_runs(root: &TestRoot, ranks: u32, runs: &[((u32, u32), &str, &str)], said: &str) {
    let (job, artifacts) = step_artifacts(root.root());
    assert_eq!(
        artifacts.len(),
        runs.len() * ranks as usize,
        "{:?}: {said}",
        artifacts.keys()
    );
    for ((step, restarts), run, status) in runs {
        for rank in 0..ranks {
            let artifact = &artifacts[&(rank, *step, *restarts)];
            assert_eq!(artifact["outcome"]["status"], *status, "{run} rank {rank}");
            assert_eq!(artifact["metadata"]["job"], job.as_str());
            assert_eq!(artifact["metadata"]["run"], *run, "{artifact:#}");
        }
        let entries = run_dir(root, &job, run).join("ranks");
        assert_eq!(
            marked_ranks(&entries),
            (0..ranks).collect::<Vec<_>>(),
            "{run}"
        );
        for rank in 0..ranks {
            let entry: Value =
                serde_json::from_slice(&std::fs::read(entries.join(rank.to_string())).unwrap())
                    .unwrap();
            assert!(entry["ended_at"].is_f64(), "{run}: {entry}");
        }
    }
}

/// After one failed `srun` step of an allocation, every later step of it was refused with exit
/// 3 before its command ran: the job was `SLURM_JOB_ID` alone, and its alarm was raised. Each
/// step is a run of the job (`s<step>.r0`): the second step runs, its ranks registered in a run
/// of their own, and each soak records its run.
#[test]
fn a_later_step_of_an_allocation_whose_first_step_failed_runs() {
    let Some(cluster) = Cluster::up() else {
        return;
    };
    let root = TestRoot::new();
    let state = root.root();
    let script = format!(
        "srun -N2 -n2 bash -c {} && exit 9; srun -N2 -n2 bash -c {}",
        quoted(&step_line(state, "exit 3")),
        quoted(&step_line(state, "true")),
    );
    let out = cluster
        .client("salloc")
        .args(["-N2", "-n2", "bash", "-c", &script])
        .output()
        .unwrap();
    let said = format!("{out:?}");
    assert_eq!(out.status.code(), Some(0), "the second step ran: {said}");
    check_runs(
        &root,
        2,
        &[((0, 0), "s0.r0", "failed"), ((1, 0), "s1.r0", "passed")],
        &said,
    );
    let (job, _) = step_artifacts(state);
    assert_eq!(
        run_alarm(&root, &job, "s0.r0")["failure_kind"],
        "command_failed"
    );
    assert!(!run_dir(&root, &job, "s1.r0").join("alarm").exists());
}

/// A failed job requeued (`sbatch --requeue`, `scontrol requeue`: the same job id, its steps
/// counted from 0 again, `SLURM_RESTART_COUNT` 1) was refused with exit 3. Its first step now
/// joins run `s0.r1`, and runs.
#[test]
fn a_requeued_job_runs() {
    let Some(cluster) = Cluster::up() else {
        return;
    };
    let root = TestRoot::new();
    let state = root.root();
    let dir = private_tempdir("unilab-slurm-requeue-");
    let batch = dir.path().join("batch.sh");
    // Failing the first time it runs, passing once requeued.
    std::fs::write(
        &batch,
        format!(
            "#!/bin/bash\nsrun -N2 -n2 bash -c {}\n",
            quoted(&step_line(state, "test \"${SLURM_RESTART_COUNT:-0}\" = 1"))
        ),
    )
    .unwrap();
    let submitted = cluster
        .client("sbatch")
        .args(["--requeue", "--parsable", "-N2", "-n2", "-o"])
        .arg(dir.path().join("slurm-%j.out"))
        .arg(&batch)
        .output()
        .unwrap();
    assert!(submitted.status.success(), "{submitted:?}");
    let id = String::from_utf8_lossy(&submitted.stdout).trim().to_owned();
    let state_of = || {
        let out = cluster
            .client("scontrol")
            .args(["show", "job", &id])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let state = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("JobState="))
            .unwrap_or("")
            .to_owned();
        (state, text)
    };
    let ended = |wanted: &str| {
        let mut last = String::new();
        let done = within(Duration::from_secs(300), || {
            let (state, text) = state_of();
            last = text;
            state == wanted
        });
        assert!(done, "job {id} never {wanted}: {last}");
    };
    ended("FAILED");
    for args in [
        vec!["requeue".to_owned(), id.clone()],
        // A requeued job waits a while before it may start again: now.
        vec![
            "update".into(),
            format!("jobid={id}"),
            "starttime=now".into(),
        ],
    ] {
        let out = cluster.client("scontrol").args(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
    ended("COMPLETED");
    let said =
        std::fs::read_to_string(dir.path().join(format!("slurm-{id}.out"))).unwrap_or_default();
    check_runs(
        &root,
        2,
        &[((0, 0), "s0.r0", "failed"), ((0, 1), "s0.r1", "passed")],
        &said,
    );
}
