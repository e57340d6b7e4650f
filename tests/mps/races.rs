//! Starts and stops of one daemon at once, and starters killed at any point: each acts once, and no
//! daemon is left without a record or without someone to stop it.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use predicates::prelude::*;
use serde_json::Value;
use unilab::{Event, Subject};

use super::*;

/// `n` copies of `unilab ARGS` started at once; their exit codes.
fn at_once(host: &Host, n: usize, args: impl Fn(usize) -> Vec<String>) -> Vec<i32> {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
    let runs: Vec<_> = (0..n)
        .map(|i| {
            let mut cmd = host.command();
            cmd.args(args(i))
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let barrier = std::sync::Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                cmd.status().unwrap().code().unwrap_or(-1)
            })
        })
        .collect();
    runs.into_iter().map(|r| r.join().unwrap()).collect()
}

/// `rounds` of `n` concurrent starts of one name, then `n` concurrent starts of other names on
/// the same GPU, then `n` concurrent stops: each time exactly one daemon, one record, one stop.
pub(super) fn starts_and_stops_race(n: usize, rounds: usize) {
    let host = Host::two_gpus();
    let pipe = host.runtime().join("unilab/mps/cc");
    for round in 0..rounds {
        let codes = at_once(&host, n, |_| {
            ["mps", "start", "0", "--name", "cc"]
                .map(String::from)
                .to_vec()
        });
        assert_eq!(
            codes.iter().filter(|c| **c == 0).count(),
            1,
            "round {round}: {codes:?}"
        );
        assert!(
            codes.iter().all(|c| *c == 0 || *c == 3),
            "round {round}: {codes:?}"
        );
        let list = host.json(&["mps", "list"]);
        assert_eq!(list.as_array().unwrap().len(), 1, "round {round}: {list}");
        assert_eq!(list[0]["live"], true, "round {round}");
        assert_eq!(
            daemons_for(&pipe).len(),
            1,
            "round {round}: one daemon runs"
        );

        // Other names, the same GPU: refused while `cc` serves it.
        let codes = at_once(&host, n, |i| {
            vec![
                "mps".into(),
                "start".into(),
                "0".into(),
                "--name".into(),
                format!("other{i}"),
            ]
        });
        assert!(codes.iter().all(|c| *c == 3), "round {round}: {codes:?}");

        let codes = at_once(&host, n, |_| {
            ["mps", "stop", "cc"].map(String::from).to_vec()
        });
        assert!(
            codes.iter().all(|c| *c == 0 || *c == 3),
            "round {round}: {codes:?}"
        );
        assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
        assert!(
            within(Duration::from_secs(5), || daemons_for(&pipe).is_empty()),
            "round {round}: the daemon is gone"
        );
    }
    let kinds = host.kinds("cc");
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    assert_eq!(count("daemon_started"), rounds);
    assert_eq!(
        count("daemon_stopped"),
        rounds,
        "one stop recorded per daemon"
    );
    host.unilab().args(["log", "verify"]).assert().success();
}

#[test]
fn concurrent_starts_and_stops_of_one_daemon_act_once() {
    starts_and_stops_race(4, 2);
}

/// `mps start` killed at varied points, `rounds` times: after each, the next command finds what
/// the start launched and stops it; no daemon is left without a record. Returns how many rounds
/// left one before the next command ran (for the figures), after asserting that none survive.
pub(super) fn start_crash_loop(rounds: u32) -> u32 {
    let host = Host::two_gpus();
    let pipe = host.runtime().join("unilab/mps/gpu-1111aaaa");
    let mut orphaned_before_settle = 0;
    for round in 0..rounds {
        let mut cmd = host.command();
        // A daemon that takes a moment to come up widens the window between launch and record.
        cmd.env("FAKE_MPS_START_DELAY", format!("0.{}", round % 4))
            .args(["mps", "start", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut start = cmd.spawn().unwrap();
        std::thread::sleep(Duration::from_millis(u64::from(round * 37 % 700)));
        let _ = start.kill();
        let _ = start.wait();
        let recorded = host.json(&["mps", "list"]).as_array().unwrap().len();
        if recorded == 0 && !daemons_for(&pipe).is_empty() {
            orphaned_before_settle += 1;
        }
        // Any start or stop settles what the killed start left, then stops what is recorded.
        host.stop_all(round);
        assert!(
            within(Duration::from_secs(5), || daemons_for(&pipe).is_empty()),
            "round {round}: a daemon outlived the settle: {:?}",
            daemons_for(&pipe)
        );
        assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
    }
    host.unilab().args(["log", "verify"]).assert().success();
    orphaned_before_settle
}

#[test]
fn a_start_killed_at_any_point_leaves_no_daemon_without_a_record() {
    start_crash_loop(8);
}

/// Whether process `pid` has a file of unilab's MPS locks open: it is waiting for the locks or
/// holds them (a command opens the lock file before it waits).
fn has_a_lock_open(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .any(|target| target.to_string_lossy().contains("/mps/locks/"))
}

/// A starter killed while another rank waited for the locks left a daemon nobody stopped: the
/// leftovers of a cut-short start were settled *before* the locks were taken, so the waiting
/// rank went ahead without settling them; its own `-d` failed ("An instance of this daemon is
/// already running") and its `daemon_start_failed` closed the dead starter's intent too. The
/// dead starter's daemon then ran unrecorded: every later `exec --shared` exited 3 and `mps stop
/// --all` found nothing to stop. Now the rank that takes the locks settles the cut start first.
#[test]
fn a_starter_killed_while_another_waits_leaves_no_daemon_nobody_stops() {
    let host = Host::two_gpus();
    let pipe = host.runtime().join("unilab/mps/gpu-1111aaaa");
    fn shared<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec!["mps", "exec", "--shared", "0", "--"];
        args.extend_from_slice(extra);
        args
    }
    // The first start's daemon takes a while to come up.
    let mut first = host
        .command()
        .env("FAKE_MPS_START_DELAY", "3")
        .args(shared(&["sleep", "1"]))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually("the first start to launch", Duration::from_secs(30), || {
        !daemons_for(&pipe).is_empty()
    });
    // The second's launcher is slow, so that the first's daemon is up before it looks.
    let second = host
        .command()
        .env("FAKE_MPS_LAUNCH_DELAY", "4")
        .args(shared(&["true"]))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually(
        "the second to wait for the locks",
        Duration::from_secs(30),
        || has_a_lock_open(second.id()),
    );
    first.kill().unwrap();
    first.wait().unwrap();
    let second = second.wait_with_output().unwrap();
    assert!(
        second.status.success(),
        "the waiting rank runs: {}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(
        within(Duration::from_secs(10), || daemons_for(&pipe).is_empty()),
        "a daemon outlived both: {:?}",
        daemons_for(&pipe)
    );
    // Nothing stands in the way of the next rank, and nothing is left to stop.
    host.unilab().args(shared(&["true"])).assert().success();
    assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
    assert!(daemons_for(&pipe).is_empty());
    let kinds = host.kinds("gpu-1111aaaa");
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    assert_eq!(
        (count("daemon_starting"), count("daemon_start_failed")),
        (3, 1),
        "the cut start settled once, the two others started: {kinds:?}"
    );
    assert_eq!(
        count("daemon_started"),
        count("daemon_stopped"),
        "{kinds:?}"
    );
    host.unilab().args(["log", "verify"]).assert().success();
}

/// A SIGKILLed starter lets go of its locks a moment before it is gone, and a rank woken by that
/// found the start still open with its starter alive: it refused ("a start is under way", exit 3)
/// although nothing would ever finish that start (seen once in 6 rounds of 12 ranks). Here the
/// moment is stretched: the intent's starter holds no lock and ends within two seconds. The
/// start waits for it, settles the start it left, and goes ahead.
#[test]
fn a_start_left_open_by_a_starter_that_is_ending_is_settled_not_refused() {
    let host = Host::two_gpus();
    let mut ending = Command::new("sleep").arg("2").spawn().unwrap();
    let starter = unilab::ProcessIdentity {
        pid: ending.id(),
        start_ticks: proc_stat(ending.id()).unwrap().start_ticks,
    };
    let pipe = host.runtime().join("unilab/mps/gpu-1111aaaa");
    let subject = || Subject::Daemon("gpu-1111aaaa".into());
    host.root
        .log()
        .append(
            subject(),
            Event::DaemonStarting {
                gpu: GPU_A.into(),
                pipe_directory: pipe.display().to_string(),
                log_directory: host.root.root().join("log").display().to_string(),
                starter,
                job: None,
            },
        )
        .unwrap();
    let started = host.json(&["mps", "start", "0"]);
    assert!(
        exited(starter.pid),
        "the start went ahead while its starter ran"
    );
    ending.wait().unwrap();
    let kinds = host.kinds("gpu-1111aaaa");
    assert_eq!(
        kinds,
        [
            "daemon_starting",
            "daemon_start_failed",
            "topology_resolved",
            "daemon_starting",
            "daemon_started",
            "daemon_verified_live"
        ],
        "{started}"
    );
    host.stop_all("after");
    host.unilab().args(["log", "verify"]).assert().success();
}

/// `mps stop NAME` while that start was in progress said "no daemon named …" and the daemon
/// then ran on: the stop read the records before the start had written one. It now waits for
/// the start's locks, then stops what the start recorded.
#[test]
fn a_stop_during_the_start_waits_for_it_and_stops_the_daemon() {
    let host = Host::two_gpus();
    let start = host
        .command()
        .env("FAKE_MPS_START_DELAY", "2")
        .args(["--json", "mps", "start", "0", "--name", "slow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually("the start to be under way", Duration::from_secs(30), || {
        has_a_lock_open(start.id())
            && host
                .kinds_so_far("slow")
                .iter()
                .any(|k| k == "daemon_starting")
    });
    host.unilab()
        .args(["mps", "stop", "slow"])
        .assert()
        .success()
        .stdout(predicate::str::contains("stopped `slow`"));
    let started = start.wait_with_output().unwrap();
    assert!(started.status.success());
    let record: Value = serde_json::from_slice(&started.stdout).unwrap();
    assert!(
        gone(record["pid"].as_u64().unwrap()),
        "the daemon was stopped"
    );
    assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
}
