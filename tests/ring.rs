//! The ring all-reduce fixture behaves as the job tests need it to: ranks of a job as real
//! processes, one of which hangs outside the collective while the others wait in it.

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::*;

const WORLD: u32 = 4;
const HUNG: u32 = 2;
const STEPS_BEFORE: usize = 3;

/// The sum the ring gives at `step` for element `i` with `WORLD` ranks: each rank gives
/// `rank * 1000 + step * 10 + i`.
fn ring_sum(step: u64, i: u64) -> u64 {
    let world = u64::from(WORLD);
    1000 * world * (world - 1) / 2 + world * (10 * step + i)
}

fn expected_progress() -> Vec<String> {
    (0..STEPS_BEFORE as u64)
        .map(|step| {
            let sums: Vec<String> = (0..u64::from(WORLD))
                .map(|i| ring_sum(step, i).to_string())
                .collect();
            format!("step {step} sum {}", sums.join(","))
        })
        .collect()
}

/// With rank 2 hung in `load_batch`, every rank stops after the same 3 steps (each correctly
/// summed), ranks 0, 1 and 3 are blocked receiving from the ring while rank 2 is not, and that
/// holds: nothing moves. SIGTERM ends rank 2 with 143, and the others follow it out with 1,
/// saying the ring closed, so one rank's end leaves none behind.
#[test]
fn a_ring_with_one_hung_rank_leaves_the_others_blocked_in_recv() {
    let dir = private_tempdir("unilab-ring-");
    let mut started = Started::default();
    let pids: Vec<u32> = (0..WORLD)
        .map(|rank| {
            let mut cmd = ring_allreduce(dir.path(), WORLD);
            cmd.args(["--hang-rank", &HUNG.to_string(), "--step-sleep", "0.05"])
                .stderr(std::fs::File::create(dir.path().join(format!("err-{rank}"))).unwrap());
            // Rank 0 by its flag, the others by `RANK`, as a launcher gives it.
            if rank == 0 {
                cmd.args(["--rank", "0"]);
            } else {
                cmd.env("RANK", rank.to_string());
            }
            started.spawn(&mut cmd)
        })
        .collect();

    eventually(
        "every rank's first 3 steps",
        Duration::from_secs(120),
        || (0..WORLD).all(|r| ring_progress(dir.path(), r).len() >= STEPS_BEFORE),
    );
    let blocked = || {
        pids.iter().enumerate().all(|(rank, pid)| {
            let place = waiting_in(*pid);
            let receiving = place.as_deref().is_some_and(is_socket_receive);
            if rank as u32 == HUNG {
                place.is_some() && !receiving
            } else {
                receiving
            }
        })
    };
    let places = || pids.iter().map(|p| waiting_in(*p)).collect::<Vec<_>>();
    assert!(
        within(Duration::from_secs(60), blocked),
        "ranks 0, 1 and 3 in recv, rank 2 not: {:?}",
        places()
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(blocked(), "still so: {:?}", places());
    for rank in 0..WORLD {
        assert_eq!(
            ring_progress(dir.path(), rank),
            expected_progress(),
            "rank {rank}"
        );
    }
    let said = std::fs::read_to_string(dir.path().join(format!("err-{HUNG}"))).unwrap();
    assert!(
        said.contains("rank 2 hangs in load_batch at step 3"),
        "{said}"
    );

    kill(Pid::from_raw(pids[HUNG as usize] as i32), Signal::SIGTERM).unwrap();
    assert_eq!(
        started.exit_code(pids[HUNG as usize], Duration::from_secs(30)),
        Some(143)
    );
    for (rank, pid) in pids.iter().enumerate().filter(|(r, _)| *r as u32 != HUNG) {
        assert_eq!(
            started.exit_code(*pid, Duration::from_secs(60)),
            Some(1),
            "rank {rank}"
        );
        let said = std::fs::read_to_string(dir.path().join(format!("err-{rank}"))).unwrap();
        assert!(said.contains("closed the ring"), "rank {rank}: {said}");
    }
}

/// The launcher starts its workers with `RANK`, `WORLD_SIZE` and `LOCAL_RANK` as torchrun does,
/// stays their parent, and on SIGTERM stops them all and exits 143.
#[test]
fn the_launcher_gives_each_worker_its_rank_and_stops_them_all() {
    let dir = private_tempdir("unilab-ring-");
    let mut started = Started::default();
    let mut cmd = launch_ranks(WORLD);
    cmd.arg("python3")
        .arg(fixtures_dir().join("ring_allreduce.py"))
        .args(["--port-base", "0", "--progress-dir"])
        .arg(dir.path())
        .args(["--hang-rank", "1", "--step-sleep", "0.05"])
        .stderr(std::fs::File::create(dir.path().join("err")).unwrap());
    let launcher = started.spawn(&mut cmd);
    eventually(
        "every rank's first 3 steps",
        Duration::from_secs(120),
        || (0..WORLD).all(|r| ring_progress(dir.path(), r).len() >= STEPS_BEFORE),
    );
    let workers = live_pids_where(|pid| proc_stat(pid).is_some_and(|s| s.ppid == launcher));
    let mut ranks: Vec<(String, String, String)> = workers
        .iter()
        .map(|pid| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let get = |key: &str| {
                environ
                    .split(|b| *b == 0)
                    .find_map(|e| e.strip_prefix(format!("{key}=").as_bytes()))
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default()
            };
            (get("RANK"), get("LOCAL_RANK"), get("WORLD_SIZE"))
        })
        .collect();
    ranks.sort();
    let expected: Vec<(String, String, String)> = (0..WORLD)
        .map(|r| (r.to_string(), r.to_string(), WORLD.to_string()))
        .collect();
    assert_eq!(ranks, expected, "workers {workers:?}");

    kill(Pid::from_raw(launcher as i32), Signal::SIGTERM).unwrap();
    assert_eq!(
        started.exit_code(launcher, Duration::from_secs(60)),
        Some(143)
    );
    for pid in workers {
        eventually("the worker's end", Duration::from_secs(10), || exited(pid));
    }
}
