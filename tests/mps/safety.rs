//! What unilab must never touch or trust: a foreign daemon or pipe directory, directories others
//! can write, records of another uid or host, a pid reused by another process, and a process whose
//! memory map is locked.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use unilab::LogReader;
use unilab::{Event, StoredEvent, Subject};

use super::*;

/// Starts a fake daemon unilab knows nothing about, in `pipe`.
fn foreign_daemon(pipe: &Path) -> u64 {
    let status = Command::new(fixtures_dir().join("nvidia-cuda-mps-control"))
        .arg("-d")
        .env("CUDA_MPS_PIPE_DIRECTORY", pipe)
        .env("CUDA_MPS_LOG_DIRECTORY", pipe.join("../foreign-log"))
        .status()
        .unwrap();
    assert!(status.success());
    let pid_file = pipe.join("nvidia-cuda-mps-control.pid");
    eventually(
        "the foreign daemon's pid file",
        Duration::from_secs(5),
        || pid_file.exists(),
    );
    std::fs::read_to_string(pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_foreign_daemon_in_the_pipe_directory_is_refused_and_untouched() {
    let host = Host::two_gpus();
    let pipes = host.root.root().join("pipes");
    private_dir_all(&pipes);
    let pipe = pipes.join("shared");
    std::fs::create_dir(&pipe).unwrap();
    std::fs::set_permissions(&pipe, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let foreign = foreign_daemon(&pipe);
    refused(
        host.unilab()
            .args(["mps", "start", "0", "--pipe-dir"])
            .arg(&pipe),
        3,
        &[
            "that unilab did not start answers in",
            "never touches a daemon it cannot prove it started",
        ],
    );
    host.unilab()
        .args(["mps", "stop", "--all"])
        .assert()
        .success();
    assert!(alive(foreign), "the foreign daemon was left alone");
    assert!(pipe.join("control").exists());
    // status shows the foreign socket, owned by none of this user's records.
    let pipe_env = pipe.display().to_string();
    let status = host.json_with(
        &[("CUDA_MPS_PIPE_DIRECTORY", &pipe_env)],
        &["mps", "status"],
    );
    let listed = status["control_pipes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == pipe.join("control").display().to_string())
        .cloned()
        .expect("the foreign pipe is listed");
    assert_eq!(listed["managed_names"], serde_json::json!([]));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(foreign as i32),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
}

#[test]
fn unsafe_pipe_directories_are_refused() {
    let host = Host::two_gpus();
    let target = tempfile::tempdir().unwrap();
    let link = host.root.root().join("link");
    std::os::unix::fs::symlink(target.path(), &link).unwrap();
    refused(
        host.unilab()
            .args(["mps", "start", "0", "--pipe-dir"])
            .arg(&link),
        3,
        &["it is a symbolic link"],
    );
    let open = host.root.root().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    refused(
        host.unilab()
            .args(["mps", "start", "0", "--pipe-dir"])
            .arg(&open),
        3,
        &["others can write to it"],
    );
    let long = host.root.root().join("p".repeat(110));
    refused(
        host.unilab()
            .args(["mps", "start", "0", "--pipe-dir"])
            .arg(&long),
        3,
        &["UNIX sockets allow at most 107"],
    );
    assert!(!long.exists(), "nothing is created before the length check");
    assert!(!host.root.log_path().exists());
}

#[test]
fn a_foreign_owned_pipe_directory_is_refused() {
    if !is_root() {
        eprintln!("skipped: needs root to give a directory to another user");
        return;
    }
    let host = Host::two_gpus();
    let theirs = host.root.root().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::set_permissions(&theirs, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    refused(
        host.unilab()
            .args(["mps", "start", "0", "--pipe-dir"])
            .arg(&theirs),
        3,
        &["it belongs to uid 65534"],
    );
}

#[test]
fn records_of_another_uid_or_host_are_never_listed_or_stopped() {
    let host = Host::two_gpus();
    // A daemon record that names this very test process, but for another uid and another host.
    let me = std::process::id();
    let ticks = proc_stat(me).unwrap().start_ticks;
    let log = host.root.log();
    let (subject, event) = every_event_kind().swap_remove(1);
    let StoredEvent::DaemonStarted {
        mut record,
        foreground,
        ..
    } = event
    else {
        unreachable!()
    };
    record.pid = me;
    record.process_start_ticks = ticks;
    for (name, uid, hostname) in [
        (
            "other-uid",
            host.root.scope().uid + 1,
            host.root.scope().host,
        ),
        ("other-host", host.root.scope().uid, "elsewhere".to_string()),
    ] {
        let mut r = record.clone();
        r.name = name.into();
        r.uid = uid;
        r.host = hostname;
        log.append(
            Subject::Daemon(name.into()),
            Event::DaemonStarted {
                record: r,
                foreground,
                job: None,
                limits: Default::default(),
            },
        )
        .unwrap();
    }
    drop(subject);
    assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
    assert!(
        host.json(&["mps", "status"])["managed_daemons"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    refused(
        host.unilab().args(["mps", "stop", "other-uid"]),
        3,
        &["no daemon named `other-uid`"],
    );
    host.unilab()
        .args(["mps", "stop", "--all"])
        .assert()
        .success();
    // Still here: nothing signalled this process.
    let snapshot = LogReader::open(&host.root.log_path(), &host.root.scope())
        .unwrap()
        .unwrap()
        .snapshot()
        .unwrap();
    assert_eq!(
        unilab::Daemons::rows(&snapshot).unwrap().len(),
        2,
        "foreign records are not cleaned either"
    );
}

/// Starts `sleep 60` with exactly `pid`, by setting the kernel's last pid just below it.
fn process_with_pid(pid: u64) -> Option<std::process::Child> {
    for _ in 0..200 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).ok()?;
        let child = Command::new("sleep").arg("60").spawn().ok()?;
        if u64::from(child.id()) == pid {
            return Some(child);
        }
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
    }
    None
}

#[test]
fn a_pid_reused_by_another_process_is_never_signalled() {
    if !is_root() {
        eprintln!("skipped: forcing pid reuse through /proc/sys/kernel/ns_last_pid needs root");
        return;
    }
    let host = Host::two_gpus();
    let record = host.start(&["0"]);
    let pid = record["pid"].as_u64().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    // The pid is free only once the zombie is reaped, not merely dead.
    eventually(
        &format!("pid {pid} to be reaped"),
        Duration::from_secs(10),
        || proc_stat(pid).is_none(),
    );
    let Some(mut impostor) = process_with_pid(pid) else {
        eprintln!("skipped: the kernel would not hand out pid {pid} again");
        return;
    };
    assert_eq!(host.json(&["mps", "list"])[0]["state"], "pid_reused");
    refused(
        host.unilab().args(["mps", "stop", "--grace", "0.2"]),
        4,
        &["pid_reused"],
    );
    assert!(
        impostor.try_wait().unwrap().is_none(),
        "the process that reused the pid was not signalled"
    );
    assert_eq!(
        host.kinds("gpu-1111aaaa").last().unwrap(),
        "daemon_stale_cleaned"
    );
    impostor.kill().unwrap();
    impostor.wait().unwrap();
}

/// A runtime directory of the user's own but open to everyone (0777, not sticky): another user
/// could replace the pipe tree inside it. Every level up to the pipe directory is checked.
#[test]
fn a_runtime_directory_others_can_write_is_refused() {
    let host = Host::two_gpus();
    std::fs::set_permissions(
        host.runtime(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    refused(
        host.unilab().args(["mps", "start", "0"]),
        3,
        &[&format!(
            "refusing the directory `{}`: others can write to it and it is not sticky",
            host.runtime().display()
        )],
    );
    let (code, report) = doctor(&host, &[], Some("0"));
    assert_eq!(code, 3);
    assert_eq!(status_of(&report, "pipe directory").unwrap(), "fail");
    assert!(!host.root.log_path().exists(), "nothing was recorded");
}

/// A daemon killed with SIGKILL leaves its pid file, and its pid may go to an unrelated process.
/// The occupant of the pipe directory trusted that pid: `mps start --name r2` refused ("a daemon
/// that unilab did not start answers") although nothing answered, and a record cleaned as
/// `pid_reused` left `control` and the pid file behind, listed by `mps status` as a pipe that is
/// not unilab's. Now a pid proves nothing without a control socket that answers.
#[test]
fn a_dead_daemons_pid_reused_by_another_process_blocks_nothing_and_its_leftovers_go() {
    if !is_root() {
        eprintln!("skipped: forcing pid reuse through /proc/sys/kernel/ns_last_pid needs root");
        return;
    }
    let host = Host::two_gpus();
    let mut impostors = Vec::new();
    for (name, gpu) in [("r1", "0"), ("r2", "1")] {
        let record = host.start(&[gpu, "--name", name]);
        let pid = record["pid"].as_u64().unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::SIGKILL,
        )
        .unwrap();
        eventually(
            &format!("pid {pid} to be reaped"),
            Duration::from_secs(10),
            || proc_stat(pid).is_none(),
        );
        let Some(impostor) = process_with_pid(pid) else {
            eprintln!("skipped: the kernel would not hand out pid {pid} again");
            return;
        };
        impostors.push((
            impostor,
            PathBuf::from(record["pipe_directory"].as_str().unwrap()),
        ));
    }
    // `mps stop r1` cleans the record and removes what the daemon left.
    refused(
        host.unilab().args(["mps", "stop", "r1", "--grace", "0.2"]),
        4,
        &["pid_reused"],
    );
    let r1_pipe = &impostors[0].1;
    assert!(!r1_pipe.join("control").exists(), "its socket was removed");
    assert!(
        !r1_pipe.join("nvidia-cuda-mps-control.pid").exists(),
        "its pid file was removed"
    );
    // `mps start --name r2` cleans the stale record in its way and starts.
    let again = host.start(&["1", "--name", "r2"]);
    assert_eq!(again["name"], "r2");
    let pipes = host.json(&["mps", "status"])["control_pipes"].clone();
    let ours: Vec<&serde_json::Value> = pipes
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["path"]
                .as_str()
                .unwrap()
                .starts_with(host.runtime().to_str().unwrap())
        })
        .collect();
    assert!(!ours.is_empty(), "r2's pipe is listed: {pipes}");
    assert!(
        ours.iter()
            .all(|p| !p["managed_names"].as_array().unwrap().is_empty()),
        "no pipe of this host is listed as not unilab's: {pipes}"
    );
    host.unilab().args(["mps", "stop", "r2"]).assert().success();
    for (mut impostor, _) in impostors {
        assert!(
            impostor.try_wait().unwrap().is_none(),
            "the process that reused the pid was not signalled"
        );
        impostor.kill().unwrap();
        impostor.wait().unwrap();
    }
}

/// A process that has come and gone: the starter of a start cut short.
fn gone_starter() -> unilab::ProcessIdentity {
    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    let starter = unilab::ProcessIdentity {
        pid: child.id(),
        start_ticks: proc_stat(child.id()).unwrap().start_ticks,
    };
    child.kill().unwrap();
    child.wait().unwrap();
    starter
}

/// Runs `cmd` for at most `limit`; its exit status (`None`: it was still running, and was
/// killed) and what it wrote to standard error.
fn run_at_most(mut cmd: Command, limit: Duration) -> (Option<std::process::ExitStatus>, String) {
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr.reopen().unwrap())
        .spawn()
        .unwrap();
    let mut status = None;
    within(limit, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if status.is_none() {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    (status, std::fs::read_to_string(stderr.path()).unwrap())
}

/// A process of the user whose memory map is locked (one thread has the kernel fault a page in
/// from a FUSE mount whose reads never return, another waits to change the map) makes reading
/// its `/proc/<pid>/environ` block in the kernel. `mps start`, `mps exec --shared`, `mps stop`
/// and `mps stop --all` settle a start cut short by reading the environment of each process
/// of the user started since, under the start's name and GPU locks: each hung there for good,
/// holding the locks (the next `mps start` gave up after 60 s). Now each such read is given up
/// after a few seconds: the command names the process it skipped and what it could not read,
/// settles the start, finishes and lets go of the locks — and exits although its reader is still
/// blocked (a command's exit is seen only once all its threads are gone).
#[test]
fn a_process_whose_map_is_locked_is_named_and_holds_up_no_mps_command() {
    let Some(mut mount) = HangingMount::new() else {
        return;
    };
    let host = Host::two_gpus();
    // One start cut short before each command, its starter gone before the stuck process began.
    let starters: Vec<_> = (0..4).map(|_| gone_starter()).collect();
    let stuck = mount.stuck_process();
    let commands: [&[&str]; 4] = [
        &["mps", "start", "0"],
        &["mps", "exec", "--shared", "0", "--", "true"],
        &["mps", "stop", "gpu-1111aaaa"],
        &["mps", "stop", "--all"],
    ];
    for (i, (args, starter)) in commands.iter().zip(starters).enumerate() {
        let name = format!("cut-{i}");
        host.root
            .log()
            .append(
                Subject::Daemon(name.clone()),
                Event::DaemonStarting {
                    gpu: GPU_B.into(),
                    pipe_directory: host.root.root().join(&name).display().to_string(),
                    log_directory: host.root.root().join("log").display().to_string(),
                    starter,
                    job: None,
                },
            )
            .unwrap();
        let mut cmd = host.command();
        cmd.args(*args);
        let (status, stderr) = run_at_most(cmd, Duration::from_secs(90));
        assert!(
            status.is_some_and(|s| s.success()),
            "`unilab {}` ended {status:?} (None: still running after 90 s): {stderr}",
            args.join(" ")
        );
        for said in [
            format!(
                "settling the cut-short start of `{name}` skipped pid {stuck} (`{STUCK_MM_NAME}`)"
            ),
            format!("reading /proc/{stuck}/environ did not return within"),
            format!("a start of `{name}` was cut short"),
        ] {
            assert!(stderr.contains(&said), "{args:?}: no `{said}` in: {stderr}");
        }
        let kinds = host.kinds(&name);
        assert_eq!(
            kinds,
            ["daemon_starting", "daemon_start_failed"],
            "{args:?}"
        );
    }
    assert!(host.json(&["mps", "list"]).as_array().unwrap().is_empty());
    assert!(daemons_for(&host.runtime().join("unilab/mps/gpu-1111aaaa")).is_empty());
    host.unilab().args(["log", "verify"]).assert().success();
    assert!(!exited(stuck), "the stuck process was left alone");
}
