//! `job show` and `job list`: the ranks of a job, each under its own soak, side by side from
//! every host's log, and the rank that hung named.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

const WORLD: u32 = 4;
const HUNG: u32 = 2;

/// Four ranks of a ring all-reduce, each under its own soak of job `J`, rank 2 hung in
/// `load_batch` and its soak the first to trip (its stale limit is the shortest): every other
/// rank records evidence with trigger `job_alarm` within two sample intervals of the alarm, and
/// `job show J` lists the four, names rank 2 the odd one with a signature of its own (py-spy's
/// `load_batch` on top), and says who tripped first. `job list` lists the job; an unknown job is
/// refused with exit 3; one rank's log unreadable is a warning, and the rest is shown. Without
/// py-spy it skips, saying so (under CI it fails).
#[test]
fn job_show_names_the_hung_rank_of_a_ring() {
    let Some(py_spy) = py_spy("the test of `job show` over a ring with py-spy") else {
        return;
    };
    ring_job_shown(Some(&py_spy));
}

/// [`job_show_names_the_hung_rank_of_a_ring`] without py-spy: the ranks still split by where
/// their main threads wait in the kernel (`wchan`, system call).
#[test]
fn without_py_spy_the_hung_rank_is_named_by_where_it_waits() {
    ring_job_shown(None);
}

fn ring_job_shown(py_spy: Option<&Path>) {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-job-");
    // A second between samples: "within two intervals of the alarm" leaves a loaded machine
    // one interval of slack past the next sample.
    let interval = 1.0;
    // The hung rank trips first; the others see its alarm and capture at once. No rank's tree
    // is stopped before every rank of the run has captured (the capture barrier), so no rank's
    // end closes the ring before the others captured theirs.
    failed_ring(&root, dir.path(), (WORLD, HUNG, 3), py_spy, |rank| {
        vec![
            "--stale-progress",
            if rank == HUNG { "3s" } else { "20s" },
            "--sample-interval",
            "1",
            "--dump-signal",
            "WINCH",
            "--dump-wait",
            "4s",
        ]
    });
    let alarm = job_alarm(&root, "J");
    assert_eq!(alarm["rank"], HUNG, "{alarm:#}");
    let at = alarm["at"].as_f64().unwrap();
    for rank in (0..WORLD).filter(|&r| r != HUNG) {
        let captured = &artifact_of(dir.path(), rank)["job_evidence"];
        assert_eq!(
            captured["trigger"], "job_alarm",
            "rank {rank}: {captured:#}"
        );
        let after = captured["captured_at"].as_f64().unwrap() - at;
        assert!(
            after <= 2.0 * interval,
            "rank {rank} captured {after:.2} s after the alarm"
        );
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
    assert_eq!(ranks[HUNG as usize]["failure_kind"], "stale_progress");
    for rank in ranks {
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
    } else {
        // Where the main thread waits in the kernel: a sleep, not a socket's receive.
        let place = hung["top_frames"][0]["function"].as_str().unwrap();
        assert!(!is_socket_receive(place), "{view:#}");
        assert_eq!(hung["top_frames"][0]["file"], Value::Null);
    }
    assert_eq!(view["stragglers"], serde_json::json!([]));
    // The ranks of a ring stopped within milliseconds of each other: none stalled first by
    // more than its margin. The hung rank is the suspect by its stack, first in the verdict;
    // who tripped first comes after.
    assert_eq!(view["first_stalled"], Value::Null, "{view:#}");
    assert_eq!(view["suspect"]["rank"], HUNG, "{view:#}");
    assert_eq!(view["suspect"]["why"], "odd_stack", "{view:#}");
    let host = hung["host"].as_str().unwrap();
    let verdict = view["verdict"].as_str().unwrap();
    let first = format!("rank {HUNG} on {host} is the suspect: its stack is the odd one out: ");
    assert!(verdict.starts_with(&first), "{verdict}");
    assert!(
        verdict.contains("; the other 3 ranks are in ")
            && verdict.contains("tripped first: stale_progress"),
        "{verdict}"
    );

    let table = root.unilab().args(["job", "show", "J"]).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(table.starts_with(&first), "the verdict first:\n{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("RANK") && l.contains("PHASE")),
        "{table}"
    );

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

/// The alarm of the job's first run (counted: `1`), as the rank that failed first wrote it.
fn job_alarm(root: &TestRoot, job: &str) -> Value {
    run_alarm(root, job, "1")
}

/// The artifact a rank's soak wrote.
fn artifact_of(dir: &Path, rank: u32) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join(format!("soak-{rank}.json"))).unwrap()).unwrap()
}

/// Four ranks of a ring, rank 2 hung, each soak `--on-job-alarm stop`: the first rank to trip
/// (the hung one, whose stale limit is shortest) writes the job's alarm (exactly one), and every other rank, at its next sample, records
/// that it saw it, captures its evidence with trigger `job_alarm` within two sample intervals
/// of the alarm, and fails as `job_failed` naming the rank that tripped; the first keeps its own
/// failure. Nothing is left running and the log verifies.
#[test]
fn one_ranks_failure_stops_every_rank_at_its_moment() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-job-alarm-");
    let interval = 1.0;
    // The hung rank's soak trips first: its stale limit is the shortest. (The ranks of a ring
    // stall at one moment; alike, they would trip in the same sample.)
    failed_ring(&root, dir.path(), (WORLD, HUNG, 3), None, |rank| {
        vec![
            "--stale-progress",
            if rank == HUNG { "3s" } else { "20s" },
            "--sample-interval",
            "1",
            "--on-job-alarm",
            "stop",
        ]
    });
    let alarm = job_alarm(&root, "J");
    let first = alarm["rank"].as_u64().unwrap() as u32;
    assert_eq!(first, HUNG, "{alarm:#}");
    assert_eq!(alarm["job"], "J");
    assert_eq!(alarm["failure_kind"], "stale_progress", "{alarm:#}");
    let at = alarm["at"].as_f64().unwrap();
    for rank in 0..WORLD {
        let artifact = artifact_of(dir.path(), rank);
        let outcome = &artifact["outcome"];
        if rank == first {
            assert_eq!(outcome["failure_kind"], "stale_progress", "{outcome:#}");
            assert_eq!(artifact["soak_id"], alarm["soak_id"]);
            assert_eq!(artifact["job_evidence"], Value::Null);
            continue;
        }
        assert_eq!(
            outcome["failure_kind"], "job_failed",
            "rank {rank}: {outcome:#}"
        );
        assert_eq!(outcome["job_alarm"], alarm, "rank {rank}: {outcome:#}");
        assert!(
            outcome["reason"]
                .as_str()
                .unwrap()
                .starts_with(&format!("rank {first} of job `J` on ")),
            "{outcome:#}"
        );
        let captured = &artifact["job_evidence"];
        assert_eq!(
            captured["trigger"], "job_alarm",
            "rank {rank}: {captured:#}"
        );
        let captured_at = captured["captured_at"].as_f64().unwrap();
        assert!(
            captured_at - at <= 2.0 * interval,
            "rank {rank} captured {:.2} s after the alarm",
            captured_at - at
        );
        assert!(
            !captured["processes"].as_array().unwrap().is_empty(),
            "{captured:#}"
        );
        let soak_id = artifact["soak_id"].as_str().unwrap();
        let history = root
            .unilab()
            .args(["--json", "history", "--soak", soak_id])
            .output()
            .unwrap();
        let seen = String::from_utf8_lossy(&history.stdout)
            .lines()
            .filter(|line| line.contains("\"kind\":\"soak_job_alarm_seen\""))
            .count();
        assert_eq!(seen, 1, "rank {rank} records the alarm once");
        // `soak show --json` gives the captures and the alarm as the artifact has them.
        let shown: Value = serde_json::from_slice(
            &root
                .unilab()
                .args(["--json", "soak", "show", soak_id])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        assert_eq!(shown["evidence"], artifact["evidence"], "rank {rank}");
        assert_eq!(
            shown["job_evidence"], artifact["job_evidence"],
            "rank {rank}"
        );
        // (`soak show` gives the alarm as the record holds it: without the run, which the
        // soak's start holds.)
        let mut recorded = alarm.clone();
        recorded.as_object_mut().unwrap().remove("run");
        assert_eq!(shown["outcome"]["job_alarm"], recorded, "rank {rank}");
    }
    // Every rank's tree was stopped: no process of the ring is left.
    let ring = fixtures_dir().join("ring_allreduce.py");
    let left: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                String::from_utf8_lossy(&cmdline).contains(&*ring.to_string_lossy())
                    && String::from_utf8_lossy(&cmdline).contains(&*dir.path().to_string_lossy())
            })
        })
        .collect();
    assert_eq!(left, Vec::<u32>::new(), "ring processes left running");
    root.unilab().args(["log", "verify"]).assert().success();
}

/// Two ranks of one job whose commands fail at the same moment race to raise the alarm:
/// exactly one alarm is written, and the other rank records the winner's as seen.
#[test]
fn two_ranks_failing_at_once_leave_one_alarm_and_the_other_sees_it() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-job-race-");
    let go = dir.path().join("go");
    let mut started = Started::default();
    let pids: Vec<u32> = (0..2u32)
        .map(|rank| {
            let (mut cmd, _) = job_rank_soak(&root, dir.path(), "race", rank);
            cmd.args(["--allow-no-progress", "--sample-interval", "0.1"])
                .args(["--", "sh", "-c"])
                // Both wait for one file, then fail together.
                .arg(format!(
                    "while [ ! -e '{}' ]; do sleep 0.05; done; exit 3",
                    go.display()
                ))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            started.spawn(&mut cmd)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&go, b"").unwrap();
    for pid in &pids {
        assert_eq!(started.exit_code(*pid, Duration::from_secs(120)), Some(1));
    }
    let alarm = job_alarm(&root, "race");
    assert_eq!(alarm["failure_kind"], "command_failed", "{alarm:#}");
    let mut names: Vec<String> = std::fs::read_dir(run_dir(&root, "race", "1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(
        names
            .iter()
            .all(|n| ["alarm", "ranks", "captured"].contains(&n.as_str())),
        "one alarm, no temporary file left: {names:?}"
    );
    assert_eq!(names[0], "alarm");
    let winner = alarm["soak_id"].as_str().unwrap();
    let loser = (0..2)
        .map(|rank| artifact_of(dir.path(), rank))
        .find(|artifact| artifact["soak_id"] != winner)
        .unwrap();
    assert_eq!(loser["outcome"]["failure_kind"], "command_failed");
    let history = root
        .unilab()
        .args([
            "--json",
            "history",
            "--soak",
            loser["soak_id"].as_str().unwrap(),
        ])
        .output()
        .unwrap();
    let history = String::from_utf8_lossy(&history.stdout);
    assert!(
        history.contains("\"kind\":\"soak_job_alarm_seen\"") && history.contains(winner),
        "{history}"
    );
    root.unilab().args(["log", "verify"]).assert().success();
}

/// One soak over a torchrun-like launcher of four ranks, rank 2 hung, without py-spy: its
/// evidence groups the tree's ranks by `wchan`/system call, names rank 2 the odd one, and
/// `soak show` says where the ranks stood.
#[test]
fn one_soak_of_several_ranks_groups_them_in_its_evidence() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-job-tree-");
    let progress = dir.path().join("progress");
    private_dir_all(&progress);
    let output = dir.path().join("soak.json");
    let launcher = launch_ranks(WORLD);
    let ring = ring_allreduce(&progress, WORLD);
    let out = root
        .unilab()
        .args([
            "--quiet",
            "soak",
            "run",
            "--stale-progress",
            "3s",
            "--sample-interval",
            "0.2",
            "--py-spy",
            "off",
            "--progress-dir",
        ])
        .arg(&progress)
        .arg("--output")
        .arg(&output)
        .arg("--")
        .arg(launcher.get_program())
        .args(launcher.get_args())
        .arg(ring.get_program())
        .args(ring.get_args())
        .args(["--hang-rank", &HUNG.to_string(), "--step-sleep", "0.05"])
        .arg("--rendezvous-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let artifact: Value = serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap();
    let evidence = &artifact["evidence"];
    assert_eq!(
        evidence["odd_ranks"],
        serde_json::json!([HUNG]),
        "{evidence:#}"
    );
    let grouped: Vec<u64> = evidence["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| {
            g["ranks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_u64().unwrap())
        })
        .collect();
    assert_eq!(grouped.len(), WORLD as usize, "{evidence:#}");
    let ranked = evidence["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["rank"].is_u64())
        .inspect(|p| {
            assert!(
                p["signature"].is_string() && p["top_frames"].is_array(),
                "{p:#}"
            )
        })
        .count();
    assert!(ranked >= WORLD as usize, "{evidence:#}");

    let soak = artifact["soak_id"].as_str().unwrap();
    let shown = root.unilab().args(["soak", "show", soak]).output().unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains(&format!("  ranks: rank {HUNG} is in ")) && text.contains("3 ranks wait in"),
        "{text}"
    );
}
