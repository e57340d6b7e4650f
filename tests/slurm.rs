//! On a real Slurm cluster: two nodes on this machine (`scripts/slurm-cluster.sh`), each
//! `slurmd` in its own UTS namespace, so that a task's host is `n1` or `n2` and each host keeps
//! its own log under one shared state root. Skipped, with a message, where the cluster cannot
//! start (not root, no Slurm and no apt).

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

/// A shell line for each rank: its own progress directory (private at every level, whatever
/// the umask: `mkdir -m` sets only the last), then `unilab ARGS`.
fn rank_line(root: &Path, args: &str) -> String {
    format!(
        "(umask 077 && mkdir -p {progress}/$SLURM_PROCID) && exec {unilab} --root {root} {args}",
        progress = root.join("progress").display(),
        unilab = unilab_bin().display(),
        root = root.display(),
    )
}

/// `soak run` of the example trainer for each rank, its artifact `soak-{job}-{rank}.json` (each
/// run its own: an existing `--output` is refused).
fn soak_line(root: &Path, steps: u32) -> String {
    rank_line(
        root,
        &format!(
            "soak run --progress-dir {progress}/$SLURM_PROCID --output '{root}/soak-{{job}}-{{rank}}.json' \
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
    let mut nodes = Vec::new();
    for rank in ["0", "1"] {
        let suffix = format!("-{rank}.json");
        let path = std::fs::read_dir(state)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .find(|p| {
                let name = p.file_name().unwrap().to_string_lossy();
                name.starts_with("soak-") && name.ends_with(&suffix)
            })
            .unwrap_or_else(|| panic!("rank {rank}'s artifact"));
        let artifact: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        assert_eq!(artifact["outcome"]["status"], "passed", "rank {rank}");
        assert_eq!(artifact["metadata"]["rank"], rank);
        jobs.push(artifact["metadata"]["job"].as_str().unwrap().to_owned());
        nodes.push(artifact["metadata"]["node"].as_str().unwrap().to_owned());
    }
    assert_eq!(jobs[0], jobs[1], "one job");
    nodes.sort();
    assert_eq!(
        nodes,
        ["n1", "n2"],
        "each rank names its node (SLURMD_NODENAME)"
    );
    let uid = nix::unistd::getuid().as_raw().to_string();
    for node in ["n1", "n2"] {
        assert!(
            state.join(node).join(&uid).join("events.redb").is_file(),
            "{node} has its own log"
        );
    }
    let listed = job_soaks(&root, &jobs[0]);
    let hosts: Vec<(&str, u64)> = listed
        .iter()
        .map(|s| (s["host"].as_str().unwrap(), s["rank"].as_u64().unwrap()))
        .collect();
    assert_eq!(hosts.len(), 2, "{listed:?}");
    assert!(
        hosts.contains(&("n1", 0)) && hosts.contains(&("n2", 1)),
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

/// The fake host the MPS tests run on: one GPU, and the fake control tool's call log.
fn one_gpu_host(cmd: &mut Command, root: &Path) {
    cmd.env(
        "FAKE_NVIDIA_SMI_GPUS",
        "GPU-1111aaaa-0000-4000-8000-000000000001|NVIDIA H200|143771|0|0",
    )
    .env("FAKE_MPS_CALL_LOG", root.join("calls"))
    .env("XDG_RUNTIME_DIR", root.join("run"))
    .env("UNILAB_TOOL_TIMEOUT", "5");
}

/// A client of a shared daemon, as one rank: it writes the pipe directory it was given, the
/// daemon's pid (live) and its own unilab's pid to `<root>/seen/<rank>`, then sleeps.
fn shared_client_line(root: &Path, seconds: &str) -> String {
    format!(
        "exec {unilab} --root {root} mps exec --shared -- sh -c 'p=$(cat \"$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid\") \
         && kill -0 $p && echo \"$CUDA_MPS_PIPE_DIRECTORY $p $PPID $$\" > {root}/seen/$SLURM_PROCID && exec sleep {seconds}'",
        unilab = unilab_bin().display(),
        root = root.display(),
    )
}

/// History kinds of `daemon`, read on `node` (whose log holds them).
fn kinds_on(cluster: &Cluster, node: &str, root: &Path, daemon: &str) -> Vec<String> {
    let out = cluster.unilab_on(
        node,
        &[],
        &[
            "--root",
            root.to_str().unwrap(),
            "--json",
            "history",
            "--daemon",
            daemon,
        ],
    );
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// A state root for the MPS tests: `seen/` for what the clients report, `run/` for pipes.
fn mps_root() -> TestRoot {
    let root = TestRoot::new();
    for dir in ["seen", "run"] {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(root.root().join(dir))
            .unwrap();
    }
    root
}

/// What the client `who` (a rank, or a tag) reported, once it did: its pipe directory, the
/// daemon's pid, its unilab's pid and its command's pid.
fn report_of(state: &Path, who: &str) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(state.join("seen").join(who)).ok()?;
    let fields: Vec<String> = text.split_whitespace().map(str::to_owned).collect();
    (fields.len() == 4).then_some(fields)
}

/// `srun -N1 -n4 unilab mps exec --shared -- CLIENT`: one daemon started (the fake's call log),
/// every rank sees it live in the same pipe directory, the last one out stops it; the history
/// has one start, four leases and one stop. Then again with one rank SIGKILLed midway: the
/// daemon is still stopped when the others finish.
#[test]
fn ranks_of_a_job_share_one_daemon_and_the_last_one_out_stops_it() {
    let Some(cluster) = Cluster::up() else {
        return;
    };
    let root = mps_root();
    let state = root.root();
    let mut srun = cluster.client("srun");
    one_gpu_host(&mut srun, state);
    let out = srun
        .args([
            "-N1",
            "-n4",
            "-w",
            "n1",
            "bash",
            "-c",
            &shared_client_line(state, "1"),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let calls = std::fs::read_to_string(state.join("calls")).unwrap();
    assert_eq!(
        calls.lines().filter(|l| l.ends_with(" -d")).count(),
        1,
        "{calls}"
    );
    let seen: Vec<String> = (0..4)
        .map(|rank| std::fs::read_to_string(state.join(format!("seen/{rank}"))).unwrap())
        .collect();
    let pipe_and_daemon = |line: &str| {
        line.split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        seen.iter()
            .all(|s| pipe_and_daemon(s) == pipe_and_daemon(&seen[0])),
        "{seen:?}"
    );
    let daemon_pid: u64 = seen[0].split_whitespace().nth(1).unwrap().parse().unwrap();
    eventually("the daemon to stop", Duration::from_secs(10), || {
        exited(daemon_pid)
    });
    let job = daemon_of(&seen[0]);
    let kinds = kinds_on(&cluster, "n1", state, &job);
    assert_eq!(shared_daemon_life(&kinds), (1, 4, 4, 1), "{kinds:?}");

    // One rank killed midway.
    std::fs::remove_dir_all(state.join("seen")).unwrap();
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(state.join("seen"))
        .unwrap();
    let mut srun = cluster.client("srun");
    one_gpu_host(&mut srun, state);
    let mut run = srun
        .args([
            "-N1",
            "-n3",
            "-w",
            "n1",
            "bash",
            "-c",
            &shared_client_line(state, "3"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually("every rank to attach", Duration::from_secs(30), || {
        (0..3).all(|rank| report_of(state, &rank.to_string()).is_some())
    });
    let line = std::fs::read_to_string(state.join("seen/0")).unwrap();
    let fields: Vec<i32> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap())
        .collect();
    let (daemon_pid, victim) = (fields[0], fields[1]);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    run.wait().unwrap();
    eventually("the daemon to stop", Duration::from_secs(15), || {
        exited(u64::try_from(daemon_pid).unwrap())
    });
    let kinds = kinds_on(&cluster, "n1", state, &daemon_of(&line));
    assert!(kinds.iter().any(|k| k == "daemon_stopped"), "{kinds:?}");
}

/// The daemon a client used: its pipe directory is named after it.
fn daemon_of(seen: &str) -> String {
    let pipe = seen.split_whitespace().next().unwrap();
    let name = Path::new(pipe).file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("job"), "a job-scoped daemon: {name}");
    name.to_owned()
}

/// Two jobs of one user on one node at once: two daemons; `mps stop --job` of one (an epilog)
/// leaves the other's running.
#[test]
fn two_jobs_on_one_node_have_their_own_daemons() {
    let Some(cluster) = Cluster::up() else {
        return;
    };
    let root = mps_root();
    let state = root.root();
    let runs: Vec<_> = ["a", "b"]
        .iter()
        .map(|tag| {
            let mut srun = cluster.client("srun");
            one_gpu_host(&mut srun, state);
            let line = shared_client_line(state, "20")
                .replace("/seen/$SLURM_PROCID", &format!("/seen/{tag}"));
            srun.args(["-N1", "-n1", "-w", "n1", "bash", "-c", &line])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    eventually("both jobs to attach", Duration::from_secs(30), || {
        ["a", "b"].iter().all(|tag| report_of(state, tag).is_some())
    });
    let seen = |tag: &str| std::fs::read_to_string(state.join(format!("seen/{tag}"))).unwrap();
    let (a, b) = (seen("a"), seen("b"));
    let pipe = |s: &str| s.split_whitespace().next().unwrap().to_owned();
    let daemon = |s: &str| s.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap();
    assert_ne!(pipe(&a), pipe(&b), "each job its own pipe directory");
    assert_ne!(daemon(&a), daemon(&b), "each job its own daemon");
    let job_a = Path::new(&pipe(&a))
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .trim_start_matches("job")
        .split('-')
        .next()
        .unwrap()
        .to_owned();
    let stopped = cluster.unilab_on(
        "n1",
        &[("XDG_RUNTIME_DIR", &state.join("run"))],
        &[
            "--root",
            state.to_str().unwrap(),
            "mps",
            "stop",
            "--job",
            &job_a,
        ],
    );
    assert!(stopped.status.success(), "{stopped:?}");
    eventually("job a's daemon to stop", Duration::from_secs(10), || {
        exited(daemon(&a))
    });
    assert!(!exited(daemon(&b)), "job b's daemon is left running");
    // The jobs end: b's last user stops its own daemon.
    for tag in ["a", "b"] {
        let victim: i32 = seen(tag)
            .split_whitespace()
            .nth(3)
            .unwrap()
            .parse()
            .unwrap();
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(victim),
            nix::sys::signal::SIGTERM,
        );
    }
    for mut run in runs {
        run.wait().unwrap();
    }
    eventually("job b's daemon to stop", Duration::from_secs(15), || {
        exited(daemon(&b))
    });
}
