//! A tree's MPS clients ended by their daemon (`terminate_client`) before the tree is
//! signalled: only the tree's clients, only through a daemon unilab recorded and can prove is
//! its own, never waiting on one that does not answer, and never a signal.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use unilab::ProcessIdentity;
use unilab::testing::{ClientTeardown, Tool, terminate_clients_in_tree};

use super::*;

/// A sleeping process of this test's own, killed and reaped at the end.
struct Sleeper(Child);

impl Sleeper {
    fn new() -> Self {
        Sleeper(
            Command::new("sleep")
                .arg("600")
                .stdin(Stdio::null())
                .spawn()
                .expect("sleep runs"),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Makes it a client of the daemon of `pipe`, as the fake control tool counts clients.
    fn connect(&self, pipe: &Path) -> PathBuf {
        let dir = pipe.join("fake_clients");
        std::fs::create_dir_all(&dir).unwrap();
        let registration = dir.join(self.pid().to_string());
        std::fs::write(&registration, "").unwrap();
        registration
    }

    /// Running, neither ended nor stopped by a signal.
    fn untouched(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
            && proc_stat(self.pid()).is_some_and(|s| !matches!(s.state, 'T' | 't' | 'Z'))
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The fake control tool, as the soak would run it, with `timeout` for each call.
fn control(timeout: Duration) -> Tool {
    Tool::new(fixtures_dir().join("nvidia-cuda-mps-control"), timeout)
}

fn dirs(record: &Value) -> (PathBuf, PathBuf) {
    (
        PathBuf::from(record["pipe_directory"].as_str().unwrap()),
        PathBuf::from(record["log_directory"].as_str().unwrap()),
    )
}

fn control_log(log_dir: &Path) -> String {
    std::fs::read_to_string(log_dir.join("control.log")).unwrap_or_default()
}

/// Asks the host's daemons to end the clients among `tree`, live processes given by pid.
fn ask(host: &Host, control: Tool, tree: &[u32]) -> ClientTeardown {
    let tree: Vec<ProcessIdentity> = tree
        .iter()
        .map(|&pid| proc_stat(pid).expect("a live process").identity())
        .collect();
    ask_for(host, control, &tree)
}

fn ask_for(host: &Host, control: Tool, tree: &[ProcessIdentity]) -> ClientTeardown {
    terminate_clients_in_tree(&host.root.paths(), control, tree).expect("the log reads")
}

/// Stops the daemons and checks the log, as every test leaves it.
fn finish(host: &Host) {
    host.stop_all("the end");
    host.unilab().args(["log", "verify"]).assert().success();
}

#[test]
fn only_the_trees_mps_client_is_terminated_and_nothing_is_signalled() {
    let host = Host::two_gpus();
    let record = host.start(&["0"]);
    let daemon = record["pid"].as_u64().unwrap();
    let (pipe, log_dir) = dirs(&record);
    let mut inside = Sleeper::new();
    let mut outside = Sleeper::new();
    let mut bystander = Sleeper::new();
    let inside_file = inside.connect(&pipe);
    let outside_file = outside.connect(&pipe);

    // The tree: one client of the daemon and one process that is no client.
    let teardown = ask(
        &host,
        control(Duration::from_secs(10)),
        &[inside.pid(), bystander.pid()],
    );

    assert!(teardown.notes.is_empty(), "{:?}", teardown.notes);
    let [
        unilab::MpsTeardown {
            daemon: name,
            server_pid,
            terminated,
        },
    ] = teardown.terminated.as_slice()
    else {
        panic!("one server's clients were ended: {teardown:?}");
    };
    assert_eq!(name, record["name"].as_str().unwrap());
    assert_eq!(terminated, &[inside.pid()]);
    let server = proc_stat(server_pid).expect("the server runs");
    assert_eq!(
        (server.comm.as_str(), u64::from(server.ppid)),
        ("nvidia-cuda-mps", daemon),
        "server_pid is the daemon's server"
    );
    let log = control_log(&log_dir);
    assert!(
        log.contains(&format!(
            "Server {server_pid}: terminated client {}",
            inside.pid()
        )),
        "{log}"
    );
    assert!(!log.contains(&outside.pid().to_string()), "{log}");
    assert!(!log.contains("no client"), "{log}");
    assert!(!inside_file.exists(), "the tree's client was ended");
    assert!(outside_file.exists(), "the other client is still one");
    assert!(inside.untouched() && outside.untouched() && bystander.untouched());
    let json = serde_json::to_value(&teardown.terminated[0]).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "daemon": name,
            "server_pid": server_pid,
            "terminated": [inside.pid()],
        })
    );

    // A tree with no client of it asks for nothing to be ended.
    let before = control_log(&log_dir);
    let teardown = ask(&host, control(Duration::from_secs(10)), &[bystander.pid()]);
    assert_eq!(teardown, ClientTeardown::default());
    assert!(!control_log(&log_dir)[before.len()..].contains("terminate_client"));
    finish(&host);
}

/// A client whose pid no longer names the process the tree held (it ended during the capture,
/// and its pid went to another process of the user's, a client of the same daemon) is not
/// ended: it is named in a note, its daemon never asked to end it.
#[test]
fn a_client_whose_pid_is_another_process_now_is_left_alone() {
    let host = Host::two_gpus();
    let record = host.start(&["0"]);
    let (pipe, log_dir) = dirs(&record);
    let mut other = Sleeper::new();
    let registration = other.connect(&pipe);
    let seen = proc_stat(other.pid()).unwrap().identity();
    // The tree's process of that pid, as the teardown saw it: another start.
    let gone = ProcessIdentity {
        pid: seen.pid,
        start_ticks: seen.start_ticks.wrapping_sub(1),
    };

    let teardown = ask_for(&host, control(Duration::from_secs(10)), &[gone]);

    assert!(teardown.terminated.is_empty(), "{teardown:?}");
    let [note] = teardown.notes.as_slice() else {
        panic!("one note: {teardown:?}");
    };
    assert!(
        note.contains(&other.pid().to_string()) && note.contains("no longer the tree's"),
        "{note}"
    );
    assert!(!control_log(&log_dir).contains("terminate_client"));
    assert!(registration.exists());
    assert!(other.untouched());
    finish(&host);
}

/// A daemon that accepts its control socket's connections and never replies would hold a
/// teardown for as long as it waits; it is named as wedged and left once the tool's timeout is
/// up, its client left for the signals, while another daemon's client in the same tree is ended
/// all the same.
#[test]
fn a_wedged_daemon_is_named_and_left_within_the_tool_timeout() {
    let host = Host::two_gpus();
    let wedge = host.root.root().join("wedge");
    let wedged = host.json_with(
        &[("FAKE_MPS_WEDGE_WHEN", wedge.to_str().unwrap())],
        &["mps", "start", "0"],
    );
    let healthy = host.start(&["1"]);
    let (wedged_pipe, wedged_log) = dirs(&wedged);
    let (healthy_pipe, _) = dirs(&healthy);
    let mut stuck = Sleeper::new();
    let registration = stuck.connect(&wedged_pipe);
    let mut served = Sleeper::new();
    let served_file = served.connect(&healthy_pipe);
    std::fs::write(&wedge, "").unwrap();

    let began = Instant::now();
    let teardown = ask(
        &host,
        control(Duration::from_secs(2)),
        &[stuck.pid(), served.pid()],
    );
    // Generous: one timeout of 2 s, on a loaded machine.
    assert!(began.elapsed() < Duration::from_secs(60));

    let [note] = teardown.notes.as_slice() else {
        panic!("one note: {teardown:?}");
    };
    assert!(
        note.contains(wedged["name"].as_str().unwrap())
            && note.contains("wedged")
            && note.contains("get_server_list"),
        "{note}"
    );
    assert!(registration.exists());
    assert!(!control_log(&wedged_log).contains("terminate_client"));
    assert!(stuck.untouched());
    let [ended] = teardown.terminated.as_slice() else {
        panic!("the healthy daemon's client was ended: {teardown:?}");
    };
    assert_eq!(ended.daemon, healthy["name"].as_str().unwrap());
    assert_eq!(ended.terminated, [served.pid()]);
    assert!(!served_file.exists());
    assert!(served.untouched());
    std::fs::remove_file(&wedge).unwrap();
    finish(&host);
}

/// A record whose daemon is gone gives no authority over what listens in its pipe directory
/// now: a daemon started there behind unilab's back is asked nothing, its clients left alone.
#[test]
fn a_stale_record_is_never_asked_even_with_another_daemon_in_its_pipe_directory() {
    let host = Host::two_gpus();
    let record = host.start(&["0"]);
    let pid = record["pid"].as_u64().unwrap();
    let (pipe, _) = dirs(&record);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    assert!(gone(pid));
    // Its pid file, which a killed daemon leaves, would name a zombie that is not yet reaped.
    std::fs::remove_file(pipe.join("nvidia-cuda-mps-control.pid")).unwrap();
    let foreign_log = host.root.root().join("foreign-log");
    let started = Command::new(fixtures_dir().join("nvidia-cuda-mps-control"))
        .arg("-d")
        .env("CUDA_MPS_PIPE_DIRECTORY", &pipe)
        .env("CUDA_MPS_LOG_DIRECTORY", &foreign_log)
        .status()
        .unwrap();
    assert!(started.success());
    eventually("the foreign daemon serves", Duration::from_secs(30), || {
        control_log(&foreign_log).contains("Starting control daemon")
            && pipe.join("nvidia-cuda-mps-control.pid").exists()
    });
    let mut client = Sleeper::new();
    let registration = client.connect(&pipe);

    let teardown = ask(&host, control(Duration::from_secs(10)), &[client.pid()]);

    assert_eq!(teardown, ClientTeardown::default());
    let log = control_log(&foreign_log);
    assert!(!log.contains("Accepted command"), "{log}");
    assert!(registration.exists());
    assert!(client.untouched());
    // The foreign daemon is this test's own: stopped by its pid file's pid.
    let foreign: i32 = std::fs::read_to_string(pipe.join("nvidia-cuda-mps-control.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(foreign),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    assert!(gone(foreign as u64));
    finish(&host);
}

/// A soak whose command is a client of a daemon `mps start` recorded, and hangs: when the soak
/// fails, the daemon ends the client before the tree gets any signal (the command, trapping
/// SIGTERM, finds itself a client no more), and the evidence records which daemon ended whom.
#[test]
fn a_failing_soaks_mps_client_is_ended_before_its_tree_is_signalled() {
    let host = Host::two_gpus();
    let record = host.start(&["0"]);
    let (pipe, log_dir) = dirs(&record);
    let dir = private_tempdir("unilab-mps-soak-");
    let progress = dir.path().join("progress");
    private_dir_all(&progress);
    let seen_at_term = dir.path().join("at-term");
    // A client as the fake counts them; at SIGTERM it writes whether it still is one.
    let script = r#"
        mkdir -p "$CUDA_MPS_PIPE_DIRECTORY/fake_clients"
        me="$CUDA_MPS_PIPE_DIRECTORY/fake_clients/$$"
        touch "$me" "$1/started"
        trap 'if [ -e "$me" ]; then echo client > "$2"; else echo ended > "$2"; fi; exit 0' TERM
        sleep 600 & wait $!
    "#;
    let artifact = dir.path().join("soak.json");
    let out = host
        .unilab()
        .env("CUDA_MPS_PIPE_DIRECTORY", &pipe)
        .args([
            "--quiet",
            "soak",
            "run",
            "--stale-progress",
            "2s",
            "--sample-interval",
            "0.2",
            "--py-spy",
            "off",
            "--progress-dir",
        ])
        .arg(&progress)
        .arg("--output")
        .arg(&artifact)
        .args(["--", "bash", "-c", script, "trainer"])
        .arg(&progress)
        .arg(&seen_at_term)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&seen_at_term).unwrap().trim(),
        "ended",
        "the command was still a client when SIGTERM came"
    );
    let artifact: Value = serde_json::from_slice(&std::fs::read(&artifact).unwrap()).unwrap();
    let evidence = &artifact["evidence"];
    assert_eq!(evidence["trigger"], "stale_progress", "{evidence:#}");
    let bash = evidence["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "bash")
        .expect("the command in the evidence");
    let ended = evidence["mps"].as_array().unwrap();
    assert_eq!(ended.len(), 1, "{evidence:#}");
    assert_eq!(ended[0]["daemon"], record["name"]);
    assert_eq!(ended[0]["terminated"], serde_json::json!([bash["pid"]]));
    let server = ended[0]["server_pid"].as_u64().unwrap();
    let log = control_log(&log_dir);
    assert!(
        log.contains(&format!(
            "Server {server}: terminated client {}",
            bash["pid"]
        )),
        "{log}"
    );
    finish(&host);
}
