//! Why a soak failed, kept with it: the evidence captured before the tree is signalled (threads,
//! wait channels, system calls, Python stacks by `py-spy` or the trainer's own `faulthandler`),
//! a failed rank under `--fail-fast`, the kernel's OOM kills, GPU faults with the sample they fall
//! into, and the GPUs given back. Real trainers throughout; the kernel's log, the GPU device
//! files and `py-spy` are stood in for only where a test must control them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::*;
use crate::soak::{Soak, verdict};

/// The evidence's entry for the process whose command line contains `marker`.
fn evidence_of<'a>(artifact: &'a Value, marker: &str) -> &'a Value {
    artifact["evidence"]["processes"]
        .as_array()
        .and_then(|processes| {
            processes.iter().find(|p| {
                p["cmdline"].as_array().is_some_and(|args| {
                    args.iter()
                        .any(|a| a.as_str().unwrap_or("").contains(marker))
                })
            })
        })
        .unwrap_or_else(|| {
            panic!(
                "no process `{marker}` in the evidence: {}",
                artifact["evidence"]
            )
        })
}

fn unavailable(artifact: &Value) -> Vec<String> {
    artifact["evidence"]["unavailable"]
        .as_array()
        .map(|u| {
            u.iter()
                .map(|v| v.as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn stderr_tail(artifact: &Value) -> String {
    artifact["output_tail"]["stderr"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A rank stuck in a collective — its main thread joining a thread blocked in
/// `wait_for_allreduce()` — and a Python worker blocked on a pipe: the stale soak's evidence
/// names both, with their threads' states and wait channels, and was recorded before the tree
/// was signalled; `--dump-signal USR1` then had the trainer's `faulthandler` print its stacks
/// into the output tail before the kill.
#[test]
fn a_stale_soak_keeps_what_each_process_was_doing_and_the_stacks_it_printed() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(
        &[
            "--stale-progress",
            "1.5",
            "--py-spy",
            "off",
            "--dump-signal",
            "USR1",
            "--dump-wait",
            "1",
        ],
        &[
            "--steps",
            "50",
            "--hang-after",
            "3",
            "--python-worker",
            "--faulthandler",
        ],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(artifact["outcome"]["failure_kind"], "stale_progress");
    let evidence = &artifact["evidence"];
    assert_eq!(evidence["trigger"], "stale_progress", "{evidence}");
    assert!(evidence["captured_at"].as_f64() <= artifact["ended_at"].as_f64());

    let trainer = evidence_of(&artifact, "example-trainer.py");
    assert_eq!(
        trainer["state"], "S",
        "sleeping, not yet signalled: {trainer}"
    );
    let threads = trainer["threads"].as_array().unwrap();
    assert!(
        threads.len() >= 2,
        "the main thread and the collective: {trainer}"
    );
    for thread in threads {
        assert_eq!(thread["state"], "S", "{thread}");
        let wchan = thread["wchan"].as_str().unwrap_or("");
        assert!(wchan.contains("futex"), "each waits on a lock: {thread}");
        if cfg!(target_arch = "x86_64") {
            assert_eq!(thread["syscall"], "futex", "{thread}");
        }
    }
    assert!(
        threads.iter().any(|t| t["name"] == "allreduce"),
        "the collective's thread by name: {threads:?}"
    );
    let worker = evidence_of(&artifact, "sys.stdin.read()");
    assert_eq!(worker["state"], "S", "{worker}");
    assert_eq!(worker["ppid"], trainer["pid"]);
    assert!(
        worker["threads"][0]["wchan"]
            .as_str()
            .is_some_and(|w| w.contains("pipe")),
        "the worker waits on its pipe: {worker}"
    );
    assert_eq!(trainer["holds_gpu_device"], false);
    let unavailable = unavailable(&artifact);
    // Root reads kernel stacks; an ordinary user is told why there are none.
    assert!(
        trainer["kernel_stack"].is_string()
            || unavailable.iter().any(|u| u.starts_with("kernel stacks:")),
        "{trainer}\n{unavailable:?}"
    );
    assert!(
        unavailable.iter().any(|u| u.contains("--py-spy off")),
        "{unavailable:?}"
    );
    let tail = stderr_tail(&artifact);
    assert!(
        tail.contains("in wait_for_allreduce"),
        "faulthandler's stacks, printed on USR1 before the kill: {tail}"
    );

    let soak_id = artifact["soak_id"].as_str().unwrap();
    let kinds = soak.history_kinds(soak_id);
    let captured = kinds.iter().position(|k| k == "soak_evidence_captured");
    let finished = kinds.iter().position(|k| k == "soak_finished");
    assert!(
        captured.is_some() && captured < finished,
        "the evidence is recorded before the verdict: {kinds:?}"
    );
    assert_eq!(
        verdict(&output)["outcome"]["failure_kind"],
        "stale_progress"
    );
}

/// With `py-spy`, each Python process of a stale soak has its stack in the evidence: the
/// collective's thread is found in `wait_for_allreduce`.
#[test]
fn py_spy_puts_each_python_stack_in_the_evidence() {
    let Some(py_spy) = py_spy("the test of Python stacks in the evidence") else {
        return;
    };
    let soak = Soak::new();
    let py_spy = py_spy.display().to_string();
    let (output, artifact) = soak.run(
        &["--stale-progress", "1.5", "--py-spy", &py_spy],
        &["--steps", "50", "--hang-after", "3", "--python-worker"],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let trainer = evidence_of(&artifact, "example-trainer.py");
    let stack = trainer["python_stack"].as_str().unwrap_or_else(|| {
        panic!(
            "no Python stack: {trainer}\nunavailable: {:?}",
            unavailable(&artifact)
        )
    });
    assert!(stack.contains("wait_for_allreduce"), "{stack}");
    assert!(
        stack.contains("\"allreduce\""),
        "the thread by name: {stack}"
    );
    let worker = evidence_of(&artifact, "sys.stdin.read()");
    assert!(
        worker["python_stack"]
            .as_str()
            .is_some_and(|s| s.contains("<module>")),
        "{worker}"
    );
    assert_eq!(artifact["parameters"]["py_spy"], py_spy.as_str());
}

/// A `py-spy` that never returns (it has been seen to spin) is killed within the tool timeout,
/// and the soak ends anyway, saying why there is no stack.
#[test]
fn a_py_spy_that_never_returns_is_killed_and_the_soak_still_ends() {
    let soak = Soak::new();
    let stub = soak.root.root().join("py-spy");
    let pids = soak.root.root().join("py-spy-pids");
    std::fs::write(
        &stub,
        format!(
            "#!/bin/sh\necho $$ >> '{}'\nexec sleep 600\n",
            pids.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let began = std::time::Instant::now();
    let (output, artifact) = soak.run(
        &["--stale-progress", "1", "--py-spy", stub.to_str().unwrap()],
        &["--steps", "50", "--hang-after", "3"],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        began.elapsed() < Duration::from_secs(120),
        "it ended at all"
    );
    assert_eq!(artifact["outcome"]["failure_kind"], "stale_progress");
    let unavailable = unavailable(&artifact);
    assert!(
        unavailable
            .iter()
            .any(|u| u.contains("py-spy") && u.contains("did not finish within 2 s")),
        "{unavailable:?}"
    );
    let stubs = std::fs::read_to_string(&pids).unwrap();
    assert!(!stubs.trim().is_empty(), "py-spy was run");
    for pid in stubs.lines() {
        assert!(exited(pid), "the stuck py-spy {pid} was killed");
    }
}

/// The evidence of a stale shell script said "python stacks: py-spy not found on PATH", though
/// no process of its tree was Python. It is said only where a Python process was there to dump:
/// a soak of `sh` and `sleep` has no such note, the example trainer's has; the soak's recorded
/// `evidence_unavailable` (known at its start) is as it was.
#[test]
fn py_spy_missing_is_said_only_where_a_python_process_was_there_to_dump() {
    // Every directory of PATH without a `py-spy` in it (CI puts one on PATH).
    let dirs: Vec<PathBuf> = std::env::split_paths(&path_with_fixtures())
        .filter(|dir| !dir.join("py-spy").exists())
        .collect();
    let path = std::env::join_paths(dirs).unwrap();
    let soak = Soak::new();
    let run = |command: &[&str]| {
        let _ = std::fs::remove_file(soak.artifact_path());
        let output = soak
            .unilab()
            .env("PATH", &path)
            .args(["--json", "soak", "run", "--sample-interval", "0.2"])
            .args(["--shutdown-grace", "0.5", "--stale-progress", "1.5"])
            .arg("--progress-dir")
            .arg(soak.progress())
            .arg("--output")
            .arg(soak.artifact_path())
            .arg("--")
            .args(command)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        let artifact: Value =
            serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
        assert_eq!(artifact["outcome"]["failure_kind"], "stale_progress");
        artifact
    };
    let not_found = |notes: &[String]| notes.iter().any(|u| u.contains("py-spy not found"));

    let script = format!(
        "echo 1 > '{}/step'; exec sleep 600",
        soak.progress().display()
    );
    let artifact = run(&["sh", "-c", &script]);
    let notes = unavailable(&artifact);
    assert!(!not_found(&notes), "no Python process: {notes:?}");
    assert!(
        artifact["evidence"]["processes"]
            .as_array()
            .is_some_and(|p| !p.is_empty()),
        "the evidence was taken: {artifact}"
    );

    let trainer = trainer().display().to_string();
    let progress = soak.progress().display().to_string();
    let artifact = run(&[
        "python3",
        &trainer,
        "--progress-dir",
        &progress,
        "--steps",
        "50",
        "--hang-after",
        "3",
    ]);
    let notes = unavailable(&artifact);
    assert!(not_found(&notes), "a Python process: {notes:?}");
}

/// `--fail-fast`: a worker that exits 3 while the trainer goes on (and never reaps it) fails the
/// soak at once as `child_failed`, naming it; without the flag the same run passes.
#[test]
fn fail_fast_fails_the_soak_when_a_worker_exits_non_zero() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(&["--fail-fast"], &["--steps", "400", "--fail-child", "3"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let outcome = &artifact["outcome"];
    assert_eq!(outcome["failure_kind"], "child_failed", "{outcome}");
    assert_eq!(outcome["child"]["exit"]["code"], 3, "{outcome}");
    assert_eq!(outcome["child"]["name"], "python3", "{outcome}");
    assert!(
        outcome["reason"]
            .as_str()
            .unwrap()
            .contains("exited with code 3 while the command ran"),
        "{outcome}"
    );
    // 400 steps would take 100 s: it failed well before.
    assert!(
        artifact["duration_seconds"].as_f64().unwrap() < 60.0,
        "{}",
        artifact["duration_seconds"]
    );
    assert_eq!(artifact["parameters"]["fail_fast"], true);
    assert_eq!(artifact["evidence"]["trigger"], "child_failed");

    let soak = Soak::new();
    let (output, artifact) = soak.run(&[], &["--steps", "4", "--fail-child", "3"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(artifact["outcome"]["child"], Value::Null);
}

/// A memory cgroup of this test's own, with a limit: v1's memory controller where it is
/// mounted, else the unified hierarchy's. Removed when dropped.
struct LimitedCgroup {
    dir: PathBuf,
}

impl LimitedCgroup {
    fn make(limit_bytes: u64) -> Option<Self> {
        if !is_root() {
            eprintln!("skipped: making a memory cgroup needs root");
            return None;
        }
        let name = format!("unilab-test-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let (dir, limit_file) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(&name), "memory.limit_in_bytes")
        } else {
            let v2 = Path::new("/sys/fs/cgroup");
            let _ = std::fs::write(v2.join("cgroup.subtree_control"), "+memory");
            (v2.join(&name), "memory.max")
        };
        let made = std::fs::create_dir(&dir)
            .and_then(|()| std::fs::write(dir.join(limit_file), limit_bytes.to_string()));
        match made {
            Ok(()) => Some(Self { dir }),
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                eprintln!(
                    "skipped: cannot make a memory cgroup at {}: {e}",
                    dir.display()
                );
                None
            }
        }
    }

    /// `unilab ARGS` started inside the cgroup, as a job's step is.
    fn run(&self, unilab: &Command) -> Output {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("echo $$ > \"$0/cgroup.procs\" && exec \"$@\"")
            .arg(&self.dir)
            .arg(unilab.get_program())
            .args(unilab.get_args())
            .env_clear()
            .envs(unilab.get_envs().filter_map(|(k, v)| Some((k, v?))))
            .stdin(Stdio::null());
        cmd.output().expect("sh runs")
    }
}

impl Drop for LimitedCgroup {
    fn drop(&mut self) {
        // Empty once every process of the soak is gone.
        within(Duration::from_secs(10), || {
            std::fs::remove_dir(&self.dir).is_ok()
        });
    }
}

/// For real: a trainer that allocates past its memory cgroup's limit is killed by the kernel's
/// OOM killer, and the outcome says so — what killed it, the cgroup and its limit — instead of a
/// bare "killed by signal 9".
#[test]
fn an_oom_kill_of_the_command_is_named_in_the_outcome() {
    let Some(cgroup) = LimitedCgroup::make(128 << 20) else {
        return;
    };
    let soak = Soak::new();
    let mut unilab = soak.command();
    unilab
        .env("UNILAB_TOOL_TIMEOUT", "5")
        .args(["--json", "soak", "run"])
        .args(soak.trainer_soak(
            &["--sample-interval", "0.2", "--shutdown-grace", "0.5"],
            &["--steps", "40", "--allocate-mib", "1024"],
        ));
    let output = cgroup.run(&unilab);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    let outcome = &artifact["outcome"];
    assert_eq!(outcome["failure_kind"], "command_failed", "{outcome}");
    assert_eq!(artifact["exit"]["signal"], 9);
    let reason = outcome["reason"].as_str().unwrap();
    assert!(
        reason.contains("killed by the kernel's OOM killer (cgroup /unilab-test-")
            && reason.contains("limit 128.0 MiB"),
        "{reason}"
    );
    let kills = outcome["oom_kills"].as_array().unwrap();
    assert_eq!(kills.len(), 1, "{outcome}");
    assert_eq!(kills[0]["name"], "python3");
    // Root reads the kernel's log, which names the process; the count confirms it.
    assert_eq!(kills[0]["source"], "kmsg", "{outcome}");
}

/// The kernel's lines about GPU faults go with the sample they fall into (a file stands in for
/// `/dev/kmsg`, in the kernel's record format).
#[test]
fn a_gpu_fault_in_the_kernel_log_is_recorded_with_its_sample() {
    let soak = Soak::new();
    let kmsg = soak.root.root().join("kmsg");
    std::fs::write(
        &kmsg,
        "4,1,10,-;NVRM: Xid (PCI:0000:3b:00): 79, before the soak\n",
    )
    .unwrap();
    let mut child = soak
        .command()
        .env("UNILAB_KMSG", &kmsg)
        .args(["soak", "run"])
        .args(soak.trainer_soak(&["--sample-interval", "0.2"], &["--steps", "16"]))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually("a first checkpoint", Duration::from_secs(60), || {
        std::fs::read_dir(soak.progress()).is_ok_and(|mut d| d.next().is_some())
    });
    let xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.";
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&kmsg)
        .unwrap();
    std::io::Write::write_all(&mut file, format!("4,2,20,-;{xid}\n").as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    let with_fault: Vec<&Value> = artifact["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s.to_string().contains("GPU has fallen off the bus"))
        .collect();
    assert_eq!(with_fault.len(), 1, "in exactly one sample");
    assert!(
        with_fault[0]
            .to_string()
            .contains(&format!("kernel: {xid}")),
        "{}",
        with_fault[0]
    );
    assert!(
        !artifact["samples"].to_string().contains("before the soak"),
        "what was logged before the soak is not its"
    );
}

/// After the tree is gone, a process of this user that appeared during the soak outside its
/// tree and still holds a GPU device file (here a file under a stand-in prefix) is listed, and
/// each GPU's memory is compared with what it was before.
#[test]
fn a_process_still_holding_a_gpu_device_after_the_soak_is_listed() {
    let soak = Soak::new();
    let devices = soak.root.root().join("dev");
    std::fs::create_dir(&devices).unwrap();
    let device = devices.join("nvidia0");
    std::fs::write(&device, "").unwrap();
    let mut child = soak
        .command()
        .env("UNILAB_GPU_DEVICE_PREFIX", devices.join("nvidia"))
        .args(["--json", "soak", "run"])
        .args(soak.trainer_soak(
            &["--sample-interval", "0.2", "--shutdown-grace", "1"],
            &["--steps", "12"],
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A soak that ends before its first checkpoint fails the test at once, saying why.
    eventually("a first checkpoint", Duration::from_secs(60), || {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            let _ = std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr);
            panic!("the soak ended before its first checkpoint: {status:?}: {stderr}");
        }
        std::fs::read_dir(soak.progress()).is_ok_and(|mut d| d.next().is_some())
    });
    // A daemon the trainer would have had started elsewhere: in its own session, not a child of
    // the soak.
    let mut holder = Command::new("setsid")
        .args(["sh", "-c", "exec 3<\"$0\"; exec sleep 120"])
        .arg(&device)
        .spawn()
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let holder_pid = holder.id();
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(output.status.success(), "{output:?}");
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    let release = &artifact["gpu_release"];
    let holders = release["holders"].as_array().unwrap();
    assert!(
        holders
            .iter()
            .any(|h| h["pid"] == holder_pid && h["path"] == device.to_str().unwrap()),
        "{release}"
    );
    let gpus = release["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 1, "the fake nvidia-smi's one GPU: {release}");
    assert_eq!(gpus[0]["released"], true, "{release}");
    assert_eq!(gpus[0]["memory_used_before_mib"], 0);
}

/// The first process of a stale soak's tree has its memory map locked (a thread has the kernel
/// fault a page in from a FUSE mount whose reads never return, the main thread waits to change
/// the map), so reading its `/proc/<pid>/cmdline` blocks in the kernel. The evidence capture
/// read the processes one after the other on one worker and kept what it had when its time was
/// up: the first read blocked, so the evidence recorded no process at all (and before that the
/// sampler's read of the process's `smaps_rollup` blocked, so the soak never ended). Now each
/// read is given up after a few seconds: the sampler goes on and names the process in the
/// sample's errors; the evidence keeps the process without its command line, a note names it
/// and the file, and the other processes are recorded in full.
#[test]
fn a_process_whose_map_is_locked_is_named_and_the_others_are_still_recorded() {
    let Some(mut mount) = HangingMount::new() else {
        return;
    };
    let soak = Soak::new();
    let ready = soak.progress().join("ready");
    let stuck_mm = fixtures_dir().join("stuck-mm/stuck_mm.py");
    let out = soak.root.root().join("out");
    let mut cmd = soak.command();
    cmd.args(["--json", "soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--sample-interval", "0.2", "--stale-progress", "4"])
        .args(["--shutdown-grace", "0.5", "--py-spy", "off"])
        .arg("--")
        .args(["sh", "-c", "sleep 600 & exec python3 \"$@\"", "sh"])
        .arg(&stuck_mm)
        .arg(mount.file())
        .arg(&ready)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null());
    let mut run = cmd.spawn().unwrap();
    eventually("the command to get stuck", Duration::from_secs(60), || {
        std::fs::read_to_string(&ready).is_ok_and(|pid| !pid.is_empty())
    });
    let stuck: u32 = std::fs::read_to_string(&ready).unwrap().parse().unwrap();
    mount.holds(stuck);
    let ended = within(Duration::from_secs(120), || {
        run.try_wait().unwrap().is_some()
    });
    if !ended {
        let _ = run.kill();
        let _ = run.wait();
    }
    assert!(ended, "the soak did not end within 120 s");
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    assert_eq!(
        artifact["outcome"]["failure_kind"], "stale_progress",
        "{}",
        artifact["outcome"]
    );
    let processes = artifact["evidence"]["processes"].as_array().unwrap();
    assert!(
        processes
            .iter()
            .any(|p| p["pid"] == stuck && p["name"] == STUCK_MM_NAME),
        "the stuck process is kept: {processes:?}"
    );
    // The sampler went on, naming what it could not read: the stale period is longer than the
    // 10 samples after which it reads an idle process's `smaps_rollup` again.
    let pss = format!("pss: reading /proc/{stuck}/smaps_rollup did not return within");
    let samples = artifact["samples"].as_array().unwrap();
    assert!(
        samples.iter().any(|sample| {
            sample["errors"]
                .as_array()
                .is_some_and(|errors| errors.iter().any(|e| e.as_str().unwrap().contains(&pss)))
        }),
        "{:?}",
        samples.last()
    );
    let sleep = evidence_of(&artifact, "600");
    assert_eq!(sleep["name"], "sleep");
    let unavailable = unavailable(&artifact);
    let said = format!("reading /proc/{stuck}/cmdline did not return within");
    assert!(
        unavailable
            .iter()
            .any(|u| u.contains(&said) && u.contains("recorded without its command line")),
        "{unavailable:?}"
    );
}
