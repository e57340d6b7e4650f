//! The project's NVIDIA fakes behave like the real tools where unilab depends on them, so the
//! MPS and soak tests that drive them test something real.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::*;

fn tool(name: &str) -> Command {
    let mut cmd = Command::new(fixtures_dir().join(name));
    cmd.env_remove("CUDA_MPS_PIPE_DIRECTORY")
        .env_remove("CUDA_MPS_LOG_DIRECTORY")
        .env_remove("FAKE_NVIDIA_SMI_GPUS")
        .env_remove("FAKE_NVIDIA_SMI_MODE");
    cmd
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn mps(dir: &Path, args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    let mut child = tool("nvidia-cuda-mps-control")
        .args(args)
        .env("CUDA_MPS_PIPE_DIRECTORY", dir.join("pipe"))
        .env("CUDA_MPS_LOG_DIRECTORY", dir.join("log"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn fake_mps_control_daemonizes_answers_and_quits_like_nvidias() {
    let dir = private_tempdir("unilab-fake-");
    let pipe = dir.path().join("pipe");

    let none = mps(dir.path(), &[], "quit\n");
    assert_eq!(none.status.code(), Some(1));
    assert_eq!(text(&none).trim(), "Cannot find MPS control daemon process");

    let started = mps(dir.path(), &["-d"], "");
    assert!(started.status.success());
    let pid_file = pipe.join("nvidia-cuda-mps-control.pid");
    eventually("the pid file", Duration::from_secs(10), || {
        pid_file.exists()
    });
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let control = std::fs::symlink_metadata(pipe.join("control")).unwrap();
    assert!(control.file_type().is_socket());
    assert!(pipe.join("control_lock").is_file());
    let log = std::fs::read_to_string(dir.path().join("log/control.log")).unwrap();
    assert!(log.contains(&format!(
        "Control {pid}] Starting control daemon using socket"
    )));
    // Detached: re-parented away from us, in a session of its own.
    let stat = proc_stat(pid).unwrap();
    assert_ne!(stat.ppid, std::process::id(), "not our child");
    let our_session = nix::unistd::getsid(None).unwrap().as_raw();
    assert_ne!(stat.session, our_session, "not in our session");

    let again = mps(dir.path(), &["-d"], "");
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .contains("An instance of this daemon is already running")
    );

    let answer = mps(dir.path(), &[], "get_default_active_thread_percentage\n");
    assert_eq!(text(&answer).trim(), "100.0");

    let quit = mps(dir.path(), &[], "quit\n");
    assert!(quit.status.success());
    eventually("the daemon to exit", Duration::from_secs(10), || {
        exited(pid)
    });
    assert!(!pid_file.exists(), "the pid file goes with the daemon");
    assert!(
        pipe.join("control").exists(),
        "the socket stays behind, as NVIDIA's does"
    );
    let after = mps(dir.path(), &[], "quit\n");
    assert_eq!(
        text(&after).trim(),
        "Cannot find MPS control daemon process"
    );
}

/// The fake knows MPS clients as NVIDIA's daemon does, for the tests of a soak that ends its
/// clients before signalling them: a live process registered in the pipe directory is a client,
/// served by one server process the daemon starts for it; `get_client_list` names it, and
/// `terminate_client` ends it as a client (the process runs on) and says so in control.log.
#[test]
fn fake_mps_control_lists_and_terminates_clients_like_nvidias() {
    let dir = private_tempdir("unilab-fake-");
    let pipe = dir.path().join("pipe");
    assert!(mps(dir.path(), &["-d"], "").status.success());
    let pid_file = pipe.join("nvidia-cuda-mps-control.pid");
    eventually("the pid file", Duration::from_secs(10), || {
        pid_file.exists()
    });
    let daemon: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _stopped = KilledOnDrop(daemon);
    assert_eq!(
        text(&mps(dir.path(), &[], "get_server_list\n")).trim(),
        "",
        "no client, no server"
    );

    let mut started = Started::default();
    let client = started.spawn(Command::new("sleep").arg("300"));
    let registered = pipe.join("fake_clients");
    std::fs::create_dir_all(&registered).unwrap();
    for name in [client.to_string(), "not-a-pid".into(), u32::MAX.to_string()] {
        std::fs::write(registered.join(name), "").unwrap();
    }
    let server: u32 = text(&mps(dir.path(), &[], "get_server_list\n"))
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        proc_stat(server).map(|s| s.ppid),
        Some(daemon),
        "the daemon's child"
    );
    eventually("the server's name", Duration::from_secs(10), || {
        proc_stat(server).is_some_and(|s| s.comm == "nvidia-cuda-mps")
    });
    let listed = mps(
        dir.path(),
        &[],
        &format!("get_client_list {server}\nget_client_list {daemon}\n"),
    );
    assert_eq!(
        text(&listed),
        format!("{client}\n\n"),
        "its clients; another pid has none"
    );

    let ended = mps(
        dir.path(),
        &[],
        &format!("terminate_client {server} {client}\nterminate_client {server} 4242424\n"),
    );
    assert!(ended.status.success());
    assert_eq!(text(&ended), "", "prints nothing");
    let log = std::fs::read_to_string(dir.path().join("log/control.log")).unwrap();
    assert!(log.contains(&format!(
        "Accepted command terminate_client {server} {client}"
    )));
    assert!(
        log.contains(&format!("Server {server}: terminated client {client}")),
        "{log}"
    );
    assert!(
        log.contains(&format!("Server {server}: no client 4242424")),
        "{log}"
    );
    assert_eq!(
        text(&mps(
            dir.path(),
            &[],
            &format!("get_client_list {server}\n")
        ))
        .trim(),
        ""
    );
    assert!(!exited(client), "the client's process runs on");

    assert!(mps(dir.path(), &[], "quit\n").status.success());
    eventually(
        "the daemon and its server to exit",
        Duration::from_secs(10),
        || exited(daemon) && exited(server),
    );
}

/// A daemon a test started, killed by its pid if the test ends before it is stopped.
struct KilledOnDrop(u32);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        if !exited(self.0) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.0 as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

#[test]
fn fake_mps_control_dies_on_a_control_path_too_long_to_bind() {
    let dir = private_tempdir("unilab-fake-");
    let deep = dir.path().join("d".repeat(120));
    let output = mps(&deep, &["-f"], "");
    assert_eq!(output.status.code(), Some(1));
    assert!(!deep.join("pipe/nvidia-cuda-mps-control.pid").exists());
    assert!(text(&output).contains("Starting control daemon using socket"));
}

#[test]
fn fake_nvidia_smi_prints_csv_and_fails_like_nvidias() {
    let query = |gpus: Option<&str>, mode: Option<&str>, args: &[&str]| {
        let mut cmd = tool("nvidia-smi");
        cmd.args(args);
        if let Some(gpus) = gpus {
            cmd.env("FAKE_NVIDIA_SMI_GPUS", gpus);
        }
        if let Some(mode) = mode {
            cmd.env("FAKE_NVIDIA_SMI_MODE", mode);
        }
        cmd.output().unwrap()
    };
    let csv = [
        "--query-gpu=index,uuid,memory.used,utilization.gpu",
        "--format=csv,noheader,nounits",
    ];
    let two = "GPU-aaaa1111|NVIDIA H200|143771|[N/A]|[Not Supported];GPU-bbbb2222|NVIDIA H200|143771|1024|37";
    let out = query(Some(two), None, &csv);
    assert!(out.status.success());
    assert_eq!(
        text(&out),
        "0, GPU-aaaa1111, [N/A], [Not Supported]\n1, GPU-bbbb2222, 1024, 37\n"
    );
    // CUDA_VISIBLE_DEVICES does not change what nvidia-smi lists.
    let masked = tool("nvidia-smi")
        .args(csv)
        .env("FAKE_NVIDIA_SMI_GPUS", two)
        .env("CUDA_VISIBLE_DEVICES", "1")
        .output()
        .unwrap();
    assert_eq!(text(&masked), text(&out));

    let bad = query(None, None, &["--query-gpu=index,bogus", "--format=csv"]);
    assert!(!bad.status.success());
    assert_eq!(
        text(&bad).trim(),
        r#"Field "bogus" is not a valid field to query."#
    );

    for (mode, code, message) in [
        (
            "no-driver",
            9,
            "couldn't communicate with the NVIDIA driver",
        ),
        ("no-devices", 6, "No devices were found"),
        ("mismatch", 18, "Driver/library version mismatch"),
    ] {
        let out = query(None, Some(mode), &csv);
        assert_eq!(out.status.code(), Some(code), "{mode}");
        assert!(text(&out).contains(message), "{mode}");
    }
    let xid = query(None, Some("xid"), &csv);
    assert!(text(&xid).lines().next().unwrap().starts_with("Xid"));

    // The fake writes its pid once its SIGTERM handler is in place: readiness, not a guess.
    let pids = tempfile::NamedTempFile::new().unwrap();
    let mut hung = tool("nvidia-smi")
        .args(csv)
        .env("FAKE_NVIDIA_SMI_MODE", "hang")
        .env("FAKE_NVIDIA_SMI_PIDS", pids.path())
        .spawn()
        .unwrap();
    eventually("the hung fake to be ready", Duration::from_secs(20), || {
        std::fs::read_to_string(pids.path()).is_ok_and(|text| text.contains('\n'))
    });
    // What the kernel says it does with SIGTERM: ignored (bit 15 − 1 of `SigIgn`).
    let status = std::fs::read_to_string(format!("/proc/{}/status", hung.id())).unwrap();
    let ignored = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .unwrap();
    assert!(
        ignored & (1 << (libc_sigterm() - 1)) != 0,
        "a hung nvidia-smi ignores SIGTERM: SigIgn {ignored:x}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(hung.id() as i32),
        nix::sys::signal::SIGTERM,
    )
    .unwrap();
    assert!(hung.try_wait().unwrap().is_none());
    hung.kill().unwrap();
    hung.wait().unwrap();

    let apps = tool("nvidia-smi")
        .args([
            "--query-compute-apps=pid,process_name,used_gpu_memory,gpu_uuid",
            "--format=csv,noheader,nounits",
        ])
        .env(
            "FAKE_NVIDIA_SMI_APPS",
            "4242|nvidia-cuda-mps-server|30|GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f",
        )
        .output()
        .unwrap();
    assert_eq!(
        text(&apps),
        "4242, nvidia-cuda-mps-server, 30, GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f\n"
    );
}

fn libc_sigterm() -> u32 {
    nix::sys::signal::Signal::SIGTERM as u32
}
