//! Shared daemons (`mps exec --shared`) and Slurm jobs: one daemon for concurrent clients, stopped by
//! the last; clients killed midway; each job its own daemons, its job recorded, not read from a name.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::*;
use predicates::prelude::*;
use serde_json::Value;

use super::*;

/// The client `mps exec --shared` runs in the tests: it writes the pipe directory it was given
/// and the daemon pid it finds live there to `<dir>/<i>`, then sleeps `seconds`.
fn shared_client(dir: &Path, i: usize, seconds: &str) -> Vec<String> {
    let script = format!(
        "p=$(cat \"$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid\") && kill -0 \"$p\" \
         && echo \"$CUDA_MPS_PIPE_DIRECTORY $p $$\" > {}/{i} && exec sleep {seconds}",
        dir.display()
    );
    ["mps", "exec", "--shared", "0", "--", "sh", "-c", &script]
        .map(String::from)
        .to_vec()
}

/// What the clients saw: (pipe directory, daemon pid) of each.
fn seen_by_clients(dir: &Path, n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            let text = std::fs::read_to_string(dir.join(i.to_string())).unwrap_or_default();
            let mut words = text.split_whitespace().map(str::to_owned);
            (
                words.next().unwrap_or_default(),
                words.next().unwrap_or_default(),
            )
        })
        .collect()
}

/// Eight `mps exec --shared` at once on one GPU: the fake is asked to start exactly one daemon,
/// every client sees the same pipe directory with that daemon live in it, and the last one out
/// stops it; the history shows one start, eight leases and their ends, one stop.
#[test]
fn concurrent_shared_runs_start_one_daemon_and_the_last_stops_it() {
    let host = Host::two_gpus();
    let seen = host.root.root().join("seen");
    std::fs::create_dir(&seen).unwrap();
    let calls = host.root.root().join("calls");
    let runs: Vec<_> = (0..8)
        .map(|i| {
            host.command()
                .env("FAKE_MPS_CALL_LOG", &calls)
                .args(shared_client(&seen, i, "0.5"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut run in runs {
        assert!(run.wait().unwrap().success());
    }
    let log = std::fs::read_to_string(&calls).unwrap();
    assert_eq!(
        log.lines().filter(|l| l.ends_with(" -d")).count(),
        1,
        "{log}"
    );
    let clients = seen_by_clients(&seen, 8);
    assert!(
        clients.iter().all(|c| c == &clients[0] && !c.0.is_empty()),
        "{clients:?}"
    );
    let pid: u64 = clients[0].1.parse().unwrap();
    assert!(gone(pid), "the last one out stopped it");
    let name = "gpu-1111aaaa";
    let kinds = host.kinds(name);
    assert_eq!(shared_daemon_life(&kinds), (1, 8, 8, 1), "{kinds:?}");
    assert!(daemons_for(&host.runtime().join("unilab/mps").join(name)).is_empty());
}

/// A client killed with SIGKILL midway keeps nothing alive: the others release its lease and
/// the last of them stops the daemon.
#[test]
fn a_shared_client_killed_midway_does_not_keep_the_daemon() {
    let host = Host::two_gpus();
    let seen = host.root.root().join("seen");
    std::fs::create_dir(&seen).unwrap();
    let mut runs: Vec<_> = (0..3)
        .map(|i| {
            let seconds = if i == 0 { "60" } else { "2" };
            host.command()
                .args(shared_client(&seen, i, seconds))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    eventually("every client to attach", Duration::from_secs(20), || {
        seen_by_clients(&seen, 3).iter().all(|c| !c.1.is_empty())
    });
    let mut victim = runs.remove(0);
    // The victim's command (its `sleep`, exec'd by the shell that wrote its pid).
    let command: i32 = std::fs::read_to_string(seen.join("0"))
        .unwrap()
        .split_whitespace()
        .nth(2)
        .unwrap()
        .parse()
        .unwrap();
    victim.kill().unwrap();
    victim.wait().unwrap();
    // Left behind by the kill, it is this test's own to end.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(command),
        nix::sys::signal::SIGKILL,
    );
    for mut run in runs {
        assert!(run.wait().unwrap().success());
    }
    let pid: u64 = seen_by_clients(&seen, 3)[1].1.parse().unwrap();
    assert!(gone(pid), "the daemon outlived its last live user");
    let kinds = host.kinds("gpu-1111aaaa");
    assert_eq!(kinds.iter().filter(|k| *k == "daemon_stopped").count(), 1);
    let history = host
        .unilab()
        .args(["history", "--daemon", "gpu-1111aaaa"])
        .output()
        .unwrap();
    let history = String::from_utf8_lossy(&history.stdout);
    assert_eq!(history.matches("holder_gone").count(), 1, "{history}");
}

/// Under Slurm each job has its own daemons: default names carry the job, one daemon a GPU in
/// each job, commands without a name pick only the job's own, and `mps stop --job` stops one
/// job's and leaves the other's.
#[test]
fn each_slurm_job_has_its_own_daemons() {
    let host = Host::two_gpus();
    let job = |id: &'static str| [("SLURM_JOB_ID", id)];
    let five = host.json_with(&job("5"), &["mps", "start", "0"]);
    let six = host.json_with(&job("6"), &["mps", "start", "0"]);
    assert_eq!(five["name"], "job5-gpu-1111aaaa");
    assert_eq!(six["name"], "job6-gpu-1111aaaa");
    assert_ne!(five["pipe_directory"], six["pipe_directory"]);
    // A second daemon for the same GPU in the same job is refused, as outside a job.
    host.unilab()
        .env("SLURM_JOB_ID", "5")
        .args(["mps", "start", "0", "--name", "another"])
        .assert()
        .code(3);
    let env = host.json_with(&job("6"), &["mps", "env"]);
    assert_eq!(env["CUDA_MPS_PIPE_DIRECTORY"], six["pipe_directory"]);
    let listed = host.json(&["mps", "list"]);
    let jobs: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["job"].as_str().unwrap())
        .collect();
    assert_eq!(jobs, ["5", "6"]);
    host.unilab()
        .args(["mps", "status"])
        .assert()
        .success()
        .stdout(predicate::str::contains("job6-gpu-1111aaaa  pid"))
        .stdout(predicate::str::contains("live  job 6  0 users"));
    host.unilab()
        .args(["mps", "stop", "--job", "5"])
        .assert()
        .success()
        .stdout(predicate::str::contains("stopped `job5-gpu-1111aaaa`"));
    assert!(gone(five["pid"].as_u64().unwrap()));
    assert!(alive(six["pid"].as_u64().unwrap()));
    // Inside job 5, there is nothing of its own left to stop without a name: nothing to do,
    // and job 6's daemon is left alone.
    host.unilab()
        .env("SLURM_JOB_ID", "5")
        .args(["mps", "stop"])
        .assert()
        .success()
        .stderr(predicate::str::contains("nothing to stop"));
    assert!(alive(six["pid"].as_u64().unwrap()));
    host.unilab()
        .env("SLURM_JOB_ID", "6")
        .args(["mps", "stop"])
        .assert()
        .success();
    assert!(gone(six["pid"].as_u64().unwrap()));
}

/// Rounds of `ranks` concurrent `mps exec --shared` on one GPU, a few of them SIGKILLed at
/// random moments (starters among them, mid-launch), with daemons and launchers of varied speed.
/// Each round: no two daemons ever serve at once, every rank exits 0 unless it was killed, every
/// daemon still running at the end has a record, and the epilog (`mps stop --all`) leaves none.
/// Returns how many rounds ended with a recorded daemon left for the epilog (its last holder
/// killed), for the figures.
pub(super) fn shared_kill_rounds(rounds: u64, ranks: usize) -> u64 {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let host = Host::two_gpus();
    let pipe = host.runtime().join("unilab/mps/gpu-1111aaaa");
    let serving = host.root.root().join("serving");
    std::fs::create_dir(&serving).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut random = move |below: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    };
    let serving_now = |dir: &Path| -> Vec<u32> {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| !exited(*pid))
            .collect()
    };
    let mut left_for_the_epilog = 0;
    for round in 0..rounds {
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let most = std::sync::Arc::new(AtomicUsize::new(0));
        let watcher = {
            let (done, most, serving) = (done.clone(), most.clone(), serving.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    most.fetch_max(serving_now(&serving).len(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        let said = |rank: usize| host.root.root().join(format!("rank-{rank}.err"));
        let mut runs: Vec<std::process::Child> = (0..ranks)
            .map(|rank| {
                let mut cmd = host.command();
                // Twelve ranks of Python fakes at once on a loaded machine: no tool call here may
                // be judged by how fast a process starts.
                cmd.env("UNILAB_TOOL_TIMEOUT", "60")
                    .env("FAKE_MPS_SERVING_DIR", &serving)
                    .env("FAKE_MPS_START_DELAY", format!("0.{}", random(7)))
                    .env(
                        "FAKE_MPS_LAUNCH_DELAY",
                        format!("0.{}", random(2) * random(6)),
                    )
                    .args(["mps", "exec", "--shared", "0", "--", "sleep", "0.2"])
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(said(rank)).unwrap());
                cmd.spawn().unwrap()
            })
            .collect();
        let mut kills: Vec<(u64, usize)> = (0..ranks / 3)
            .map(|_| (random(1500), random(ranks as u64) as usize))
            .collect();
        kills.sort_unstable();
        let began = Instant::now();
        let mut killed = vec![false; ranks];
        for (at, rank) in kills {
            let at = Duration::from_millis(at);
            if let Some(wait) = at.checked_sub(began.elapsed()) {
                std::thread::sleep(wait);
            }
            killed[rank] |= runs[rank].kill().is_ok();
        }
        for (rank, run) in runs.iter_mut().enumerate() {
            let status = run.wait().unwrap();
            assert!(
                status.success() || killed[rank],
                "round {round}: rank {rank} exited {status:?}: {}",
                std::fs::read_to_string(said(rank)).unwrap_or_default()
            );
        }
        done.store(true, Ordering::Relaxed);
        watcher.join().unwrap();
        assert!(
            most.load(Ordering::Relaxed) <= 1,
            "round {round}: {} daemons served at once",
            most.load(Ordering::Relaxed)
        );
        let recorded: Vec<u32> = host
            .json(&["mps", "list"])
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["pid"].as_u64().unwrap() as u32)
            .collect();
        let running = serving_now(&serving);
        assert!(
            running.iter().all(|pid| recorded.contains(pid)),
            "round {round}: daemons {running:?} run, records name {recorded:?}"
        );
        left_for_the_epilog += u64::from(!running.is_empty());
        host.stop_all(round);
        assert!(
            within(Duration::from_secs(10), || serving_now(&serving).is_empty()
                && daemons_for(&pipe).is_empty()),
            "round {round}: a daemon outlived the epilog: {:?}",
            daemons_for(&pipe)
        );
        assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
    }
    host.unilab().args(["log", "verify"]).assert().success();
    left_for_the_epilog
}

#[test]
fn shared_ranks_killed_at_random_leave_no_daemon_nobody_stops() {
    shared_kill_rounds(6, 12);
}

/// A daemon's job was guessed from its name: outside Slurm, `mps start --name job7-mine` was
/// listed as job 7's and stopped by `mps stop --job 7` (a job's epilog). The job is recorded
/// with the daemon now (`daemon_starting`, `daemon_started`, `mps list`'s `job`), never parsed
/// back from its name.
#[test]
fn a_daemons_job_is_recorded_never_read_from_its_name() {
    let host = Host::two_gpus();
    let mine = host.start(&["0", "--name", "job7-mine"]);
    assert_eq!(mine["job"], Value::Null, "{mine}");
    host.unilab()
        .args(["mps", "stop", "--job", "7"])
        .assert()
        .success()
        .stderr(predicate::str::contains("nothing to stop"));
    assert!(
        alive(mine["pid"].as_u64().unwrap()),
        "job 7's epilog stopped it"
    );
    let seven = host.json_with(&[("SLURM_JOB_ID", "7")], &["mps", "start", "1"]);
    assert_eq!(seven["job"], "7", "{seven}");
    let jobs: Vec<(String, Value)> = host
        .json(&["mps", "list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["name"].as_str().unwrap().to_owned(), d["job"].clone()))
        .collect();
    assert_eq!(
        jobs,
        [
            ("job7-gpu-2222bbbb".to_owned(), Value::from("7")),
            ("job7-mine".to_owned(), Value::Null)
        ]
    );
    host.unilab()
        .args(["mps", "stop", "--job", "7"])
        .assert()
        .success()
        .stdout(predicate::str::contains("stopped `job7-gpu-2222bbbb`"));
    assert!(gone(seven["pid"].as_u64().unwrap()));
    assert!(alive(mine["pid"].as_u64().unwrap()));
    host.unilab()
        .args(["mps", "stop", "job7-mine"])
        .assert()
        .success();
    let history = host
        .unilab()
        .args(["--json", "history", "--daemon", "job7-gpu-2222bbbb"])
        .output()
        .unwrap();
    let history = String::from_utf8_lossy(&history.stdout);
    let starts: Vec<&str> = history
        .lines()
        .filter(|l| l.contains("daemon_start"))
        .collect();
    assert!(!starts.is_empty(), "{history}");
    assert!(
        starts.iter().all(|l| l.contains(r#""job":"7""#)),
        "{history}"
    );
}
