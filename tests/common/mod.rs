//! The test harness shared by the integration tests: a temporary state root, the real `unilab`
//! binary pointed at it, the NVIDIA fakes on `PATH`, sample events of every kind, and child
//! processes that append to or read one log, for the multi-process tests; a test clock, a
//! bounded wait, and `/proc` lookups of real processes.
//!
//! `UNILAB_TEST_BIN` and `UNILAB_TEST_FIXTURES` override where the binary and the fakes are, so
//! that CI can run the test binary as an unprivileged user from a copy it can read.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use unilab::Clock;
use unilab::EventLog;
use unilab::PROJECTIONS;
use unilab::ProcessIdentity;
use unilab::StatePaths;
use unilab::testing::{ProcStat, parse_stat};
use unilab::*;
use unilab::{DaemonLimits, LeaseEnd, StaleReason, StartedDaemon, StopMethod};
use unilab::{Event, Scope, StoredEvent, Subject};
use unilab::{GpuIdentity, TopologyMode};

mod stuck_map;
pub use stuck_map::*;

pub fn unilab_bin() -> PathBuf {
    std::env::var_os("UNILAB_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_unilab")))
}

pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("UNILAB_TEST_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"))
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A clock whose first reading is `start_us` and which advances `step_us` a reading.
pub struct SteppingClock {
    next_us: AtomicI64,
    step_us: i64,
}

impl SteppingClock {
    pub fn boxed(start_us: i64, step_us: i64) -> Box<dyn Clock> {
        Box::new(Self {
            next_us: AtomicI64::new(start_us),
            step_us,
        })
    }
}

impl Clock for SteppingClock {
    fn now_us(&self) -> i64 {
        self.next_us.fetch_add(self.step_us, Ordering::Relaxed)
    }
}

/// Whether `done` holds within `timeout`, asking every 20 ms.
pub fn within(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    loop {
        if done() {
            return true;
        }
        if started.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `done` holds, failing the test if it does not within `timeout`.
pub fn eventually(what: &str, timeout: Duration, done: impl FnMut() -> bool) {
    assert!(within(timeout, done), "timed out waiting for {what}");
}

/// `/proc/<pid>/stat`, parsed by the library's parser; `None` when there is no such process.
pub fn proc_stat(pid: impl std::fmt::Display) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(parse_stat(&text).unwrap_or_else(|| panic!("an unreadable /proc/{pid}/stat: {text:?}")))
}

/// Whether `pid` has exited: there is no such process, or only its zombie is left.
pub fn exited(pid: impl std::fmt::Display) -> bool {
    proc_stat(pid).is_none_or(|stat| stat.has_exited())
}

/// A fresh state root in a temporary directory, removed at the end of the test.
pub struct TestRoot {
    dir: tempfile::TempDir,
}

impl Default for TestRoot {
    fn default() -> Self {
        Self::new()
    }
}

impl TestRoot {
    pub fn new() -> Self {
        Self {
            dir: private_tempdir("unilab-test-"),
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn paths(&self) -> StatePaths {
        StatePaths::resolve(Some(self.root())).expect("state paths")
    }

    pub fn log_path(&self) -> PathBuf {
        self.paths().log_path()
    }

    pub fn scope(&self) -> Scope {
        self.paths().scope()
    }

    /// The log of this user on this host, opened for appending.
    pub fn log(&self) -> EventLog {
        EventLog::open(&self.log_path(), self.scope(), PROJECTIONS).expect("open the event log")
    }

    /// The real binary, with this root, the fakes first on `PATH`, and no inherited unilab or
    /// CUDA variables.
    pub fn unilab(&self) -> assert_cmd::Command {
        let mut cmd = assert_cmd::Command::new(unilab_bin());
        cmd.env_clear()
            .env("PATH", path_with_fixtures())
            .env("HOME", self.root())
            .env("LANG", "C.UTF-8")
            .env("TZ", "UTC")
            .arg("--root")
            .arg(self.root());
        cmd
    }
}

/// `unilab ARGS` on a pseudo-terminal (Python's `pty`) with `TERM=xterm` unless `env` says
/// otherwise, as [`TestRoot::unilab`] sets it up: its exit code and what the terminal received,
/// standard output and standard error together.
pub fn on_a_terminal<S: AsRef<std::ffi::OsStr>>(
    root: &TestRoot,
    env: &[(&str, &str)],
    args: impl IntoIterator<Item = S>,
) -> (Option<i32>, String) {
    const PTY: &str =
        "import os, pty, sys\nsys.exit(os.waitstatus_to_exitcode(pty.spawn(sys.argv[1:])))";
    let output = std::process::Command::new("python3")
        .env_clear()
        .env("PATH", path_with_fixtures())
        .env("HOME", root.root())
        .env("LANG", "C.UTF-8")
        .env("TZ", "UTC")
        .env("TERM", "xterm")
        .envs(env.iter().copied())
        .args(["-c", PTY])
        .arg(unilab_bin())
        .arg("--root")
        .arg(root.root())
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("python3 runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

pub fn path_with_fixtures() -> OsString {
    let mut paths = vec![fixtures_dir()];
    paths.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(paths).expect("a PATH")
}

/// A `daemon_verified_live` of `pid`: the cheapest event to append.
pub fn live(pid: u32) -> Event {
    Event::DaemonVerifiedLive {
        process: ProcessIdentity {
            pid,
            start_ticks: 7,
        },
    }
}

/// The live processes (zombies excluded) for which `wanted(pid)` holds. A process of another test
/// whose memory map is locked (see [`HangingMount`]) is passed by: reading its command line or
/// environment would block until that test ends.
pub fn live_pids_where(wanted: impl Fn(u32) -> bool) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| proc_stat(pid).is_some_and(|s| !s.has_exited() && s.comm != STUCK_MM_NAME))
        .filter(|pid| wanted(*pid))
        .collect()
}

/// One event of every kind, each about a plausible subject, in the forms each schema wrote.
pub fn every_event_kind() -> Vec<(Subject, StoredEvent)> {
    let gpu = "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f".to_string();
    let daemon = ProcessIdentity {
        pid: 4242,
        start_ticks: 987_654,
    };
    let record = StartedDaemon {
        name: "gpu-0f8e0c2a".into(),
        uid: 1000,
        host: "node-7".into(),
        topology_mode: TopologyMode::SingleGpu,
        gpu_uuids: vec![gpu.clone()],
        pipe_directory: "/run/user/1000/unilab/mps/gpu-0f8e0c2a".into(),
        log_directory: "/home/u/.local/state/unilab/node-7/1000/mps/gpu-0f8e0c2a/log".into(),
        pid: daemon.pid,
        process_start_ticks: daemon.start_ticks,
        created_at: 1_764_679_315.5,
    };
    let d = || Subject::Daemon(record.name.clone());
    let s = || Subject::Soak("20261202T124210-3f9a".into());
    let supervisor = ProcessIdentity {
        pid: 5000,
        start_ticks: 1_000_000,
    };
    let mut events = vec![
        (
            d(),
            StoredEvent::TopologyResolved {
                selector: "0".into(),
                topology_mode: TopologyMode::SingleGpu,
                gpus: vec![GpuIdentity {
                    index: 0,
                    uuid: gpu.clone(),
                }],
                cuda_visible_devices: Some("0".into()),
            },
        ),
        (
            d(),
            StoredEvent::DaemonStarted {
                record: record.clone(),
                foreground: false,
                job: None,
                limits: DaemonLimits {
                    active_thread_percentage: Some(25.0),
                    pinned_memory_limit: Some(8 << 30),
                },
            },
        ),
        (d(), StoredEvent::DaemonVerifiedLive { process: daemon }),
        (
            d(),
            StoredEvent::DaemonStopped {
                process: daemon,
                method: StopMethod::Quit,
            },
        ),
        (
            Subject::Daemon("other".into()),
            StoredEvent::DaemonStartFailed {
                reason: "the control socket did not answer within 5 s".into(),
                process: Some(daemon),
            },
        ),
        (
            Subject::Daemon("stale".into()),
            StoredEvent::DaemonStaleCleaned {
                process: daemon,
                reason: StaleReason::PidReused,
            },
        ),
        (
            s(),
            StoredEvent::SoakStartedV1(Box::new(soak_v1::SoakStart {
                soak_id: "20261202T124210-3f9a".into(),
                command: vec![
                    "python3".into(),
                    "train.py".into(),
                    "--steps".into(),
                    "100".into(),
                ],
                cwd: "/home/u/project".into(),
                progress_dir: "/home/u/project/progress".into(),
                output: "/home/u/soak.json".into(),
                parameters: SoakParameters {
                    sample_interval_ms: 5_000,
                    startup_timeout_ms: 600_000,
                    stale_progress_ms: 120_000,
                    shutdown_grace_ms: 5_000,
                    min_duration_ms: 0,
                },
                metadata: BTreeMap::from([("run".into(), "nightly".into())]),
                environment: BTreeMap::from([("WANDB_API_KEY".into(), "[redacted]".into())]),
                supervisor,
                runtime_json: r#"{"software":{"unilab":"0.1.0"}}"#.into(),
            })),
        ),
        (s(), StoredEvent::SoakSampledV1(Box::new(sample_v1(0, 3)))),
        (
            s(),
            StoredEvent::SoakFinishedV1(Box::new(soak_v1::SoakEnd {
                outcome: Outcome {
                    status: OutcomeStatus::Failed,
                    failure_kind: Some(FailureKind::StaleProgress),
                    reason: "no progress for 120 s".into(),
                },
                exit: Some(ExitInfo {
                    code: None,
                    signal: Some(15),
                }),
                duration_ms: 250_000,
                first_progress_ms: Some(12_000),
                last_progress_ms: Some(130_000),
                leaked_processes: vec![LeakedProcess {
                    identity: ProcessIdentity {
                        pid: 5100,
                        start_ticks: 1_000_500,
                    },
                    name: "dataloader".into(),
                    cmdline: vec!["python3".into(), "-c".into(), "loop()".into()],
                }],
                stdout_tail: b"step 99\n".to_vec(),
                stderr_tail: b"warning: slow\n".to_vec(),
            })),
        ),
        (
            Subject::Soak("20261201T000000-0000".into()),
            StoredEvent::SoakAbandoned {
                supervisor,
                reason: "the supervisor is gone".into(),
            },
        ),
        (
            s(),
            StoredEvent::ArtifactWritten {
                path: "/home/u/soak.json".into(),
                digest: "ab".repeat(32),
                bytes: 123_456,
            },
        ),
    ];
    // Schema 2: a soak recorded in the new forms.
    let s2 = || Subject::Soak("20261202T130000-5b7c".into());
    events.extend([
        (
            s2(),
            StoredEvent::SoakStartedV4(Box::new(SoakStart {
                soak_id: "20261202T130000-5b7c".into(),
                command: vec!["python3".into(), "train.py".into()],
                cwd: "/home/u/project".into(),
                progress_dir: "/home/u/project/progress".into(),
                output: "/home/u/soak-2.json".into(),
                parameters: SoakParameters {
                    sample_interval_ms: 1_000,
                    startup_timeout_ms: 60_000,
                    stale_progress_ms: 30_000,
                    shutdown_grace_ms: 2_000,
                    min_duration_ms: 0,
                },
                require_progress: true,
                metadata: BTreeMap::from([("HF_TOKEN".into(), "[redacted]".into())]),
                environment: BTreeMap::from([("PYTHONUNBUFFERED".into(), "1".into())]),
                supervisor,
                runtime_json: r#"{"software":{"unilab":"0.2.0"}}"#.into(),
                ticks_per_second: 100,
            })),
        ),
        (s2(), StoredEvent::SoakSampledV5(Box::new(sample(0, 3)))),
        (s2(), StoredEvent::SoakSampledV5(Box::new(sample(1, 2)))),
        (
            s2(),
            StoredEvent::SoakFinishedV4(Box::new(SoakEnd {
                outcome: Outcome {
                    status: OutcomeStatus::Failed,
                    failure_kind: Some(FailureKind::NoProgress),
                    reason: "the command exited 0 but its progress directory never changed".into(),
                },
                exit: Some(ExitInfo {
                    code: Some(0),
                    signal: None,
                }),
                run_ms: 9_500,
                teardown_ms: 120,
                first_progress_ms: None,
                last_progress_ms: None,
                leaked_processes: Vec::new(),
                stdout_tail: b"step 10/10\n".to_vec(),
                stderr_tail: Vec::new(),
            })),
        ),
        (
            s2(),
            StoredEvent::ArtifactWritten {
                path: "/home/u/soak-2.json".into(),
                digest: "cd".repeat(32),
                bytes: 4_321,
            },
        ),
    ]);
    // Schema 5: a soak with its supervision, the evidence captured before the first signal,
    // and what the verdict found.
    let s5 = || Subject::Soak("20261204T090000-e5e5".into());
    events.extend([
        (
            s5(),
            StoredEvent::SoakStartedV5 {
                start: Box::new(SoakStart {
                    soak_id: "20261204T090000-e5e5".into(),
                    command: vec!["python3".into(), "train.py".into()],
                    cwd: "/home/u/project".into(),
                    progress_dir: "/home/u/project/progress".into(),
                    output: "/home/u/soak-5.json".into(),
                    parameters: SoakParameters {
                        sample_interval_ms: 1_000,
                        startup_timeout_ms: 60_000,
                        stale_progress_ms: 30_000,
                        shutdown_grace_ms: 2_000,
                        min_duration_ms: 0,
                    },
                    require_progress: true,
                    metadata: BTreeMap::from([("node".into(), "node-7".into())]),
                    environment: BTreeMap::from([("PYTHONUNBUFFERED".into(), "1".into())]),
                    supervisor,
                    runtime_json: r#"{"software":{"unilab":"0.3.0"}}"#.into(),
                    ticks_per_second: 100,
                }),
                supervision: Supervision {
                    fail_fast: true,
                    py_spy: Some("/usr/bin/py-spy".into()),
                    dump_signal: Some(10),
                    dump_wait_ms: 2_000,
                    evidence_unavailable: Vec::new(),
                },
            },
        ),
        (s5(), StoredEvent::SoakSampledV5(Box::new(sample(0, 2)))),
        (
            s5(),
            StoredEvent::SoakEvidenceCaptured(Box::new(Evidence {
                trigger: FailureKind::StaleProgress,
                captured_at_us: 1_764_838_830_000_000,
                processes: vec![ProcessEvidence {
                    pid: 5000,
                    ppid: 4999,
                    start_ticks: 1_000_000,
                    name: "python3".into(),
                    state: 'S',
                    cmdline: vec!["python3".into(), "train.py".into()],
                    threads: vec![ThreadEvidence {
                        tid: 5000,
                        name: "python3".into(),
                        state: 'S',
                        wchan: Some("futex_wait_queue".into()),
                        syscall: Some("futex".into()),
                    }],
                    kernel_stack: None,
                    python_stack: Some("Thread 5000 (idle): \"MainThread\"\n    wait_for_allreduce (train.py:12)\n".into()),
                    holds_gpu_device: true,
                }],
                cgroup: Some(CgroupEvidence {
                    version: 2,
                    path: "/user.slice/user-1000.slice".into(),
                    memory_max_bytes: Some(16 << 30),
                    oom_kill_count: Some(0),
                }),
                kernel_messages: vec![KernelMessage {
                    at_us: 1_764_838_829_000_000,
                    line: "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.".into(),
                }],
                unavailable: vec!["kernel stacks: /proc/PID/stack is readable by root only".into()],
            })),
        ),
        (
            s5(),
            StoredEvent::SoakFinishedV5 {
                end: Box::new(SoakEnd {
                    outcome: Outcome {
                        status: OutcomeStatus::Failed,
                        failure_kind: Some(FailureKind::ChildFailed),
                        reason: "process 5001 (python3) exited 3 while the command ran".into(),
                    },
                    exit: Some(ExitInfo {
                        code: None,
                        signal: Some(15),
                    }),
                    run_ms: 31_000,
                    teardown_ms: 2_100,
                    first_progress_ms: Some(1_000),
                    last_progress_ms: Some(1_000),
                    leaked_processes: Vec::new(),
                    stdout_tail: b"step 1\n".to_vec(),
                    stderr_tail: Vec::new(),
                }),
                findings: Box::new(Findings {
                    child: Some(ChildExit {
                        pid: 5001,
                        name: "python3".into(),
                        exit: ExitInfo {
                            code: Some(3),
                            signal: None,
                        },
                    }),
                    oom_kills: vec![OomKill {
                        pid: 5002,
                        name: "worker".into(),
                        source: OomSource::Kmsg,
                    }],
                    unkillable: vec![UnkillableProcess {
                        pid: 5003,
                        name: "python3".into(),
                        state: 'D',
                        wchan: Some("nv_wait".into()),
                    }],
                    gpu_release: Some(GpuRelease {
                        gpus: vec![GpuReleased {
                            uuid: "GPU-1111aaaa-0000-4000-8000-000000000001".into(),
                            memory_used_before_mib: Some(0),
                            memory_used_after_mib: Some(512),
                            released: Some(false),
                        }],
                        holders: vec![GpuHolder {
                            pid: 5004,
                            name: "worker".into(),
                            path: "/dev/nvidia0".into(),
                        }],
                    }),
                }),
            },
        ),
        (
            s5(),
            StoredEvent::ArtifactWritten {
                path: "/home/u/soak-5.json".into(),
                digest: "ef".repeat(32),
                bytes: 5_432,
            },
        ),
    ]);
    events.extend(schema_6_soak(supervisor));
    // A start under way (its starter long gone).
    events.push((
        Subject::Daemon("gpu-1111aaaa".into()),
        StoredEvent::DaemonStarting {
            gpu: "GPU-1111aaaa-0000-4000-8000-000000000001".into(),
            pipe_directory: "/run/user/1000/unilab/mps/gpu-1111aaaa".into(),
            log_directory: "/home/u/.local/state/unilab/node-7/1000/mps/gpu-1111aaaa/log".into(),
            starter: ProcessIdentity {
                pid: 4243,
                start_ticks: 987_000,
            },
            job: Some("4242".into()),
        },
    ));
    // Schema 3: a lease on a shared daemon, taken by the process that started it, and ended.
    let holder = ProcessIdentity {
        pid: 4301,
        start_ticks: 988_000,
    };
    events.extend([
        (
            Subject::Daemon("job77-gpu-1111aaaa".into()),
            StoredEvent::LeaseAcquired {
                holder,
                job: Some("77".into()),
                started: true,
            },
        ),
        (
            Subject::Daemon("job77-gpu-1111aaaa".into()),
            StoredEvent::LeaseReleased {
                holder,
                reason: LeaseEnd::HolderGone,
            },
        ),
    ]);
    events
}

/// Schema 6: a soak held to budgets, its samples measured (PSS, GPU health, another tenant on
/// its GPU), failed as `resource_limit` for its memory growth.
fn schema_6_soak(supervisor: ProcessIdentity) -> Vec<(Subject, StoredEvent)> {
    measured_soak("20261205T100000-f6f6", 3, |_| 2, supervisor)
}

/// A soak like [`schema_6_soak`]'s of `samples` samples, the `i`-th of a tree of `processes(i)`
/// processes.
pub fn measured_soak(
    id: &str,
    samples: u64,
    processes: impl Fn(u64) -> u32,
    supervisor: ProcessIdentity,
) -> Vec<(Subject, StoredEvent)> {
    let s6 = || Subject::Soak(id.into());
    let measured = |index: u64| {
        let sample = sample(index, processes(index));
        let measures = Measures {
            pss_bytes: (0..sample.processes.len())
                .map(|i| (i == 0).then_some((100 + 50 * index) << 20))
                .collect(),
            gpus: vec![GpuHealth {
                temperature_c: Some(60 + index as u32),
                power_mw: Some(250_500),
                sm_clock_mhz: Some(1_980),
                throttle_mask: Some(if index == 0 { 0 } else { 0x44 }),
                ecc_uncorrected_volatile: Some(index),
                retired_pages_pending: Some(false),
                other_processes: vec![GpuProcessSample {
                    pid: 7777,
                    used_memory_mib: Some(40_960),
                }],
            }],
        };
        (
            s6(),
            StoredEvent::SoakSampled {
                sample: Box::new(sample),
                measures: Box::new(measures),
            },
        )
    };
    vec![
        (
            s6(),
            StoredEvent::SoakStarted {
                start: Box::new(SoakStart {
                    soak_id: id.into(),
                    command: vec!["python3".into(), "train.py".into()],
                    cwd: "/home/u/project".into(),
                    progress_dir: "/home/u/project/progress".into(),
                    output: "/home/u/soak-6.json".into(),
                    parameters: SoakParameters {
                        sample_interval_ms: 5_000,
                        startup_timeout_ms: 60_000,
                        stale_progress_ms: 30_000,
                        shutdown_grace_ms: 2_000,
                        min_duration_ms: 0,
                    },
                    require_progress: true,
                    metadata: BTreeMap::from([("node".into(), "node-7".into())]),
                    environment: BTreeMap::from([("PYTHONUNBUFFERED".into(), "1".into())]),
                    supervisor,
                    runtime_json: r#"{"software":{"unilab":"0.4.0"}}"#.into(),
                    ticks_per_second: 100,
                }),
                supervision: Supervision {
                    fail_fast: false,
                    py_spy: None,
                    dump_signal: None,
                    dump_wait_ms: 2_000,
                    evidence_unavailable: vec!["python stacks: off (--py-spy off)".into()],
                },
                limits: Limits {
                    max_memory_bytes: Some(64 << 30),
                    max_gpu_memory_bytes: Some(40 << 30),
                    max_memory_growth_bytes_per_hour: Some(200 << 20),
                    warmup_ms: Some(3_000),
                    memory_ceiling_bytes: Some(128 << 30),
                    memory_ceiling_source: Some("cgroup /slurm/job_7".into()),
                },
            },
        ),
    ]
    .into_iter()
    .chain((0..samples).map(measured))
    .chain([(
            s6(),
            StoredEvent::SoakFinished {
                end: Box::new(SoakEnd {
                    outcome: Outcome {
                        status: OutcomeStatus::Failed,
                        failure_kind: Some(FailureKind::ResourceLimit),
                        reason: "the tree's memory (PSS) grows 36.0 GiB/h since 5.0 s, over the --max-memory-growth limit of 200.0 MiB/h".into(),
                    },
                    exit: Some(ExitInfo {
                        code: None,
                        signal: Some(15),
                    }),
                    run_ms: 10_500,
                    teardown_ms: 300,
                    first_progress_ms: Some(5_000),
                    last_progress_ms: Some(10_000),
                    leaked_processes: Vec::new(),
                    stdout_tail: b"step 2\n".to_vec(),
                    stderr_tail: Vec::new(),
                }),
                findings: Box::new(Findings {
                    child: None,
                    oom_kills: Vec::new(),
                    unkillable: Vec::new(),
                    gpu_release: None,
                }),
                limit: Some(ResourceLimit::MemoryGrowth),
            },
        )])
    .collect()
}

/// A soak sample in schema 1's form, of a tree of `processes` processes.
pub fn sample_v1(index: u64, processes: u32) -> soak_v1::Sample {
    soak_v1::Sample {
        index,
        elapsed_ms: index * 5_000,
        processes: (0..processes)
            .map(|i| soak_v1::ProcessSample {
                pid: 5000 + i,
                ppid: if i == 0 { 4999 } else { 5000 },
                start_ticks: 1_000_000 + u64::from(i),
                name: format!("worker-{i}"),
                state: 'S',
                rss_bytes: 512 * 1024 * 1024,
                cpu_ticks: 1_234 + u64::from(i),
                threads: 8,
                open_fds: Some(64),
                read_bytes: Some(1 << 20),
                write_bytes: None,
            })
            .collect(),
        gpus: vec![GpuSample {
            index: 0,
            uuid: "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f".into(),
            memory_used_mib: Some(40_000),
            memory_total_mib: Some(143_771),
            utilization_percent: None,
            processes: vec![GpuProcessSample {
                pid: 5000,
                used_memory_mib: Some(39_000),
            }],
        }],
        progress: ProgressSignature {
            files: 3,
            bytes: 4096,
            newest_mtime_ns: Some(1_764_679_315_000_000_000),
        },
        sampler_cost_us: 850,
        errors: vec!["nvidia-smi did not answer within 10 s".into()],
    }
}

/// A soak sample of a tree of `processes` processes, the command still running.
pub fn sample(index: u64, processes: u32) -> Sample {
    let old = sample_v1(index, processes);
    Sample {
        index,
        elapsed_ms: old.elapsed_ms,
        after_exit: false,
        processes: old
            .processes
            .into_iter()
            .map(|p| ProcessSample {
                pid: p.pid,
                ppid: p.ppid,
                start_ticks: p.start_ticks,
                name: p.name,
                state: p.state,
                rss_bytes: p.rss_bytes,
                cpu_ticks: p.cpu_ticks + index * 100,
                reaped_children_cpu_ticks: 7,
                threads: p.threads,
                open_fds: p.open_fds,
                read_bytes: p.read_bytes,
                write_bytes: p.write_bytes,
            })
            .collect(),
        reaped_cpu_ticks: 2_000 * index,
        gpus: Some(old.gpus),
        progress: old.progress,
        sampler_cost_us: old.sampler_cost_us,
        errors: old.errors,
    }
}

/// The event a test writer appends as its `i`-th: identifiable by `(writer, i)`, and every
/// 50th one a large sample, so records vary in size.
pub fn writer_event(writer: u32, i: u64) -> (Subject, StoredEvent) {
    if i % 50 == 49 {
        let mut big = sample(i, 200);
        big.processes[0].pid = writer;
        big.processes[0].start_ticks = i;
        return (
            Subject::Soak(format!("writer-{writer}")),
            StoredEvent::SoakSampledV5(Box::new(big)),
        );
    }
    (
        Subject::Daemon(format!("writer-{writer}")),
        StoredEvent::DaemonVerifiedLive {
            process: ProcessIdentity {
                pid: writer,
                start_ticks: i,
            },
        },
    )
}

/// Recovers `(writer, i)` from an event made by [`writer_event`], as the log reads it.
pub fn writer_identity(event: &Event) -> Option<(u32, u64)> {
    match event {
        Event::DaemonVerifiedLive { process } => Some((process.pid, process.start_ticks)),
        Event::SoakSampled { sample, .. } => {
            sample.processes.first().map(|p| (p.pid, p.start_ticks))
        }
        _ => None,
    }
}

/// Spawns this test binary again as a child that runs the ignored test `child_test` with
/// `role` and extra environment. The child's stdout is piped. `child_test` is the test's full
/// path in this crate (`module::name`), since the child runs only the test of exactly that name.
pub fn spawn_child(child_test: &str, role: &str, env: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args([
        child_test,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("UNILAB_TEST_CHILD", role)
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn a child test process")
}

/// What a child process started by [`spawn_child`] does, by `UNILAB_TEST_CHILD`:
/// - `long`: open the log once, append `UNILAB_TEST_COUNT` events;
/// - `short`: open, append one event and close, `UNILAB_TEST_COUNT` times;
/// - `crash`: append batches of `UNILAB_TEST_BATCH` events until killed, printing
///   `ACK <writer> <i> <seq>` once each append has returned;
/// - `reader`: open, snapshot and verify the log over and over until `UNILAB_TEST_STOP` exists,
///   then print `READS <n>`; any failure fails the child.
///
/// Does nothing when not run as a child, so the ignored test that calls it passes when run by
/// hand.
pub fn child_main() {
    use std::io::Write;
    let Ok(role) = std::env::var("UNILAB_TEST_CHILD") else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let path = PathBuf::from(var("UNILAB_TEST_LOG"));
    let scope = Scope {
        uid: var("UNILAB_TEST_UID").parse().expect("uid"),
        host: var("UNILAB_TEST_HOST"),
    };
    let writer: u32 = var("UNILAB_TEST_WRITER").parse().unwrap_or(0);
    let count: u64 = var("UNILAB_TEST_COUNT").parse().unwrap_or(0);
    let mut stdout = std::io::stdout().lock();
    match role.as_str() {
        "long" => {
            let log = EventLog::open(&path, scope, PROJECTIONS).expect("open");
            for i in 0..count {
                let (subject, event) = writer_event(writer, i);
                log.append(subject, event).expect("append");
            }
        }
        "short" => {
            for i in 0..count {
                let log = EventLog::open(&path, scope.clone(), PROJECTIONS).expect("open");
                let (subject, event) = writer_event(writer, i);
                log.append(subject, event).expect("append");
            }
        }
        "crash" => {
            let batch: u64 = var("UNILAB_TEST_BATCH").parse().unwrap_or(1).max(1);
            let log = EventLog::open(&path, scope, PROJECTIONS).expect("open");
            let mut i = 0;
            loop {
                let events: Vec<_> = (i..i + batch).map(|j| writer_event(writer, j)).collect();
                let appended = log.append_all(events).expect("append");
                for (j, a) in appended.iter().enumerate() {
                    writeln!(stdout, "ACK {writer} {} {}", i + j as u64, a.seq).expect("stdout");
                }
                stdout.flush().expect("flush");
                i += batch;
            }
        }
        "reader" => {
            let stop = PathBuf::from(var("UNILAB_TEST_STOP"));
            let long_lived = loop {
                if let Some(reader) = unilab::LogReader::open(&path, &scope).expect("open to read")
                {
                    break reader;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            };
            let mut reads = 0u64;
            let mut last_seen = 0u64;
            while !stop.exists() {
                // Alternate a long-lived handle and a fresh open, as `history --follow` and a
                // one-shot `history` would.
                let fresh;
                let reader = if reads.is_multiple_of(2) {
                    &long_lived
                } else {
                    fresh = unilab::LogReader::open(&path, &scope)
                        .expect("reopen to read")
                        .expect("the log exists");
                    &fresh
                };
                let report = reader
                    .snapshot()
                    .and_then(|s| s.verify(unilab::PROJECTIONS))
                    .unwrap_or_else(|e| panic!("a concurrent read failed: {e}"));
                assert!(
                    report.events >= last_seen,
                    "the log shrank from {last_seen} to {} events",
                    report.events
                );
                last_seen = report.events;
                reads += 1;
            }
            writeln!(stdout, "READS {reads} {last_seen}").expect("stdout");
        }
        other => panic!("unknown child role {other}"),
    }
}

/// The environment a child needs to find the log of `root`.
pub fn child_env(root: &TestRoot) -> Vec<(&'static str, String)> {
    let scope = root.scope();
    vec![
        ("UNILAB_TEST_LOG", root.log_path().display().to_string()),
        ("UNILAB_TEST_UID", scope.uid.to_string()),
        ("UNILAB_TEST_HOST", scope.host),
    ]
}

/// The bundled example trainer (`UNILAB_TEST_TRAINER` overrides, for CI's unprivileged copy).
pub fn trainer() -> PathBuf {
    std::env::var_os("UNILAB_TEST_TRAINER")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/example-trainer.py"))
}

/// The `kind` of every event that `unilab --json history ARGS` prints through `unilab`.
pub fn history_kinds(mut unilab: assert_cmd::Command, args: &[&str]) -> Vec<String> {
    let out = unilab
        .args(["--json", "history"])
        .args(args)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out)
        .expect("UTF-8")
        .lines()
        .map(|l| {
            let event: serde_json::Value = serde_json::from_str(l).expect("one JSON object a line");
            event["kind"].as_str().expect("a kind").to_owned()
        })
        .collect()
}

/// How many times a shared daemon's history has each step of its life: started, a lease
/// acquired, a lease released, stopped.
pub fn shared_daemon_life(kinds: &[String]) -> (usize, usize, usize, usize) {
    let n = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    (
        n("daemon_started"),
        n("lease_acquired"),
        n("lease_released"),
        n("daemon_stopped"),
    )
}

/// `cmd` (made with `env_clear`, as the tests' commands are) run through `sh` under an
/// address-space limit of `bytes`: a command that grows past it fails to allocate instead of
/// growing the test machine.
pub fn with_address_space_limit(cmd: &Command, bytes: u64) -> Command {
    let mut limited = Command::new("sh");
    limited
        .env_clear()
        .envs(
            cmd.get_envs()
                .filter_map(|(key, value)| Some((key.to_owned(), value?.to_owned()))),
        )
        .arg("-c")
        .arg(format!("ulimit -v {} && exec \"$@\"", bytes / 1024))
        .arg("sh")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    if let Some(dir) = cmd.get_current_dir() {
        limited.current_dir(dir);
    }
    limited
}

/// Copies a log to `to` as unilab keeps one: mode 0600, whatever the copy came with. A checkout
/// made under umask 002 holds the frozen fixtures group-writable, and a log others may write to
/// is rightly refused.
pub fn copy_log(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// A temporary directory only its owner may write to, whatever the umask: under umask 002 (the
/// default on many distributions) a new directory is group-writable, and unilab rightly distrusts
/// what lies below one.
pub fn private_tempdir(prefix: &str) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .expect("a temporary directory")
}

/// Creates `path` and the directories above it that are missing, each 0700 whatever the umask
/// (as unilab creates its own): unilab distrusts what lies below a directory others may write.
pub fn private_dir_all(path: &Path) {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
}

/// Writes `bytes` as a file at `path` with mode 0600 whatever the umask: a damaged or fake log
/// that unilab must judge by its contents, not refuse as writable by others.
pub fn write_private(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(bytes))
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A small tmpfs of its own (root only), unmounted when dropped.
pub struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    pub fn mount(bytes: u64) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        mounted.then_some(Self { dir })
    }

    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Fills what is left of it with one file.
    pub fn fill(&self) -> PathBuf {
        use std::io::Write;
        let filler = self.path().join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        while file.write_all(&chunk).is_ok() {}
        let _ = file.sync_all();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}
