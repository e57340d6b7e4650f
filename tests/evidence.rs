//! The evidence of a failed soak where a user looks after the failure: `soak show` (and its
//! `--json`), `history --soak` and the HTML report, on logs built with the evidence a hung
//! distributed job leaves — a 40-thread trainer waiting in a futex, a worker in uninterruptible
//! sleep in the GPU driver, a process nothing could be read of — and with hostile or huge text.

use crate::common::*;
use serde_json::Value;
use unilab::*;

/// The soak of schema 5 in [`every_event_kind`].
const SOAK: &str = "20261204T090000-e5e5";

fn thread(tid: u32, name: &str, state: char, syscall: &str, wchan: Option<&str>) -> ThreadEvidence {
    ThreadEvidence {
        tid,
        name: name.into(),
        state,
        wchan: wchan.map(Into::into),
        syscall: Some(syscall.into()),
    }
}

/// What a hung data-parallel job looks like when it is about to be stopped: the trainer's 40
/// threads (its main thread and 36 more in a futex, two in `epoll_wait`, one running), a worker
/// in uninterruptible sleep in the driver with a kernel stack of 12 frames, and a process whose
/// threads and stacks could not be read.
fn hung_job() -> Evidence {
    let mut trainer_threads = vec![thread(
        5000,
        "python3",
        'S',
        "futex",
        Some("futex_wait_queue"),
    )];
    for i in 0..36 {
        let name = if i < 4 {
            format!("pt_autograd_{i}")
        } else {
            "python3".into()
        };
        trainer_threads.push(thread(
            5010 + i,
            &name,
            'S',
            "futex",
            Some("futex_wait_queue"),
        ));
    }
    trainer_threads.push(thread(
        5060,
        "cuda-EvtHandlr",
        'S',
        "epoll_wait",
        Some("ep_poll"),
    ));
    trainer_threads.push(thread(
        5061,
        "cuda-EvtHandlr",
        'S',
        "epoll_wait",
        Some("ep_poll"),
    ));
    trainer_threads.push(thread(5062, "python3", 'R', "running", None));
    let kernel_stack: String = (0..12)
        .map(|i| format!("[<0>] nv_frame_{i}+0x1c/0x40 [nvidia]\n"))
        .collect();
    Evidence {
        trigger: FailureKind::StaleProgress,
        captured_at_us: 1_764_838_830_000_000,
        processes: vec![
            ProcessEvidence {
                pid: 5000,
                ppid: 4999,
                start_ticks: 1_000_000,
                name: "python3".into(),
                state: 'S',
                cmdline: vec!["python3".into(), "train.py".into(), "--rank".into(), "0".into()],
                threads: trainer_threads,
                kernel_stack: None,
                python_stack: Some(
                    "Process 5000: python3 train.py --rank 0\nPython v3.11.2 (/usr/bin/python3.11)\n\n\
                     Thread 5000 (idle): \"MainThread\"\n    wait_for_allreduce (train.py:12)\n    \
                     train_step (train.py:30)\n    <module> (train.py:41)\n"
                        .into(),
                ),
                holds_gpu_device: true,
                rank: None,
                collectives: None,
            },
            ProcessEvidence {
                pid: 5001,
                ppid: 5000,
                start_ticks: 1_000_100,
                name: "python3".into(),
                state: 'D',
                cmdline: vec!["python3".into(), "-c".into(), "import worker; worker.run()".into()],
                threads: vec![
                    thread(5001, "python3", 'D', "ioctl", Some("nv_wait")),
                    thread(5005, "python3", 'S', "futex", Some("futex_wait_queue")),
                ],
                kernel_stack: Some(kernel_stack),
                python_stack: None,
                holds_gpu_device: true,
                rank: None,
                collectives: None,
            },
            ProcessEvidence {
                pid: 5002,
                ppid: 5000,
                start_ticks: 1_000_200,
                name: "pt_data_worker".into(),
                state: 'S',
                cmdline: Vec::new(),
                threads: Vec::new(),
                kernel_stack: Some(String::new()),
                python_stack: Some(String::new()),
                holds_gpu_device: false,
                rank: None,
                collectives: None,
            },
        ],
        cgroup: Some(CgroupEvidence {
            version: 1,
            path: "/slurm/uid_1000/job_77".into(),
            memory_max_bytes: None,
            oom_kill_count: Some(1),
        }),
        kernel_messages: (0..10)
            .map(|i| KernelMessage {
                at_us: 1_764_838_800_000_000 + i * 1_000_000,
                line: format!("NVRM: Xid (PCI:0000:3b:00): 79, pid={i}, GPU has fallen off the bus."),
            })
            .collect(),
        unavailable: vec!["python stacks: ptrace not permitted for pid 5001".into()],
        mps: Vec::new(),
    }
}

/// The schema-5 soak of [`every_event_kind`] alone in a log, its events changed by `change`;
/// those for which it returns `false` are left out.
fn root_with_soak(change: impl Fn(&mut StoredEvent) -> bool) -> TestRoot {
    let root = TestRoot::new();
    let log = EventLog::open_with_clock(&root.log_path(), root.scope(), PROJECTIONS, fixed_clock())
        .unwrap();
    let events: Vec<(Subject, StoredEvent)> = every_event_kind()
        .into_iter()
        .filter(|(subject, _)| *subject == Subject::Soak(SOAK.into()))
        .filter_map(|(subject, mut event)| change(&mut event).then_some((subject, event)))
        .collect();
    log.append_all(events).unwrap();
    root
}

/// The hung job stopped for stale progress: its evidence, a worker no signal ended, a GPU not
/// given back, and thirty lines of output.
fn hung_job_root() -> TestRoot {
    root_with_soak(|event| {
        match event {
            StoredEvent::SoakEvidenceCapturedV8(_) => {
                *event = StoredEvent::SoakEvidenceCaptured(Box::new(hung_job()));
            }
            StoredEvent::SoakFinishedV5 { end, findings } => {
                end.outcome = Outcome {
                    status: OutcomeStatus::Failed,
                    failure_kind: Some(FailureKind::StaleProgress),
                    reason: "no progress for 30 s".into(),
                };
                end.stdout_tail = (1..=30)
                    .map(|i| format!("step {i}\n"))
                    .collect::<String>()
                    .into();
                findings.child = None;
                findings.oom_kills.clear();
            }
            _ => {}
        }
        true
    })
}

fn stdout(root: &TestRoot, args: &[&str]) -> String {
    let output = root
        .unilab()
        .args(args)
        .assert()
        .success()
        .get_output()
        .clone();
    String::from_utf8(output.stdout).unwrap()
}

/// The line of `text` that starts with `prefix`, by index.
fn line_at(text: &str, prefix: &str) -> usize {
    text.lines()
        .position(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{text}"))
}

/// After a failure `soak show` tells why right after the verdict, before the figures: each
/// process, its state in words, where its threads wait (grouped), the first frames of its
/// stacks; the cgroup, the kernel's latest lines, what was not captured; what no signal ended,
/// the GPU not given back; then the most recent lines of the output.
#[test]
fn soak_show_tells_the_evidence_first_after_a_failure() {
    let root = hung_job_root();
    let text = stdout(&root, &["soak", "show", SOAK]);
    let evidence = line_at(&text, "evidence: ");
    assert_eq!(
        evidence,
        line_at(&text, "exit:") + 1,
        "right after the verdict:\n{text}"
    );
    assert!(line_at(&text, "last lines of stdout:") < line_at(&text, "started:"));
    assert!(line_at(&text, "warning:") < line_at(&text, "peaks:"));
    for expected in [
        "evidence: 3 processes captured before stopping for stale_progress at 2025-12-04 09:00:30.000\n",
        "  pid 5000 python3: sleeping, 40 threads, holds a GPU device\n",
        "    main thread in futex (futex_wait_queue): sleeping\n",
        "    36 threads in futex (futex_wait_queue): sleeping — pt_autograd_0, pt_autograd_1, pt_autograd_2 and 2 more names\n",
        "    2 threads in epoll_wait (ep_poll): sleeping — cuda-EvtHandlr\n",
        "    1 thread: running\n",
        "      wait_for_allreduce (train.py:12)\n",
        "  pid 5001 python3: uninterruptible sleep, 2 threads, holds a GPU device\n",
        "    $ python3 -c 'import worker; worker.run()'\n",
        "    main thread in ioctl (nv_wait): uninterruptible sleep\n",
        "      nv_frame_0+0x1c/0x40 [nvidia]\n",
        "      nv_frame_7+0x1c/0x40 [nvidia]\n      … 4 more frames\n",
        "  pid 5002 pt_data_worker: sleeping\n    no thread could be read\n  cgroup:",
        "  cgroup: v1 /slurm/uid_1000/job_77, no limit, 1 OOM kill\n",
        "  kernel: … 5 earlier lines\n  kernel: 2025-12-04 09:00:05.000 NVRM: Xid (PCI:0000:3b:00): 79, pid=5, GPU has fallen off the bus.\n",
        "  not captured: python stacks: ptrace not permitted for pid 5001\n",
        "stuck:    pid 5003 python3 in uninterruptible sleep in `nv_wait`: no signal ended it; the host may need a reset\n",
        "warning:  GPU GPU-1111aaaa-0000-4000-8000-000000000001 was not given back: 512 MiB used after the soak, 0 MiB before\n",
        "warning:  1 process still holds a GPU device: pid 5004 worker (/dev/nvidia0)\n",
        "last lines of stdout:\n  step 21\n",
    ] {
        assert!(text.contains(expected), "{expected:?} in:\n{text}");
    }
    // Bounded: the frames past the eighth, the kernel's older lines, the output's older lines.
    // py-spy's header repeats the process's own line.
    for absent in [
        "nv_frame_8",
        "pid=4,",
        "  step 20\n",
        "OOM kill:",
        "child:",
        "Python v3.11",
    ] {
        assert!(!text.contains(absent), "{absent:?} in:\n{text}");
    }
    // The wait that matters most comes before the largest group.
    assert!(text.find("36 threads").unwrap() < text.find("1 thread: running").unwrap());
    insta::assert_snapshot!(text);
}

/// `soak show --json` carries the evidence and `gpu_release` as the artifact has them, and the
/// verdict's findings in `outcome`; a soak of an older schema has them `null`.
#[test]
fn soak_show_json_carries_the_evidence_as_the_artifact_does() {
    let root = hung_job_root();
    let show: Value =
        serde_json::from_str(&stdout(&root, &["--json", "soak", "show", SOAK])).unwrap();
    let artifact: Value = serde_json::from_str(&stdout(&root, &["soak", "export", SOAK])).unwrap();
    assert_eq!(show["evidence"], artifact["evidence"]);
    assert_eq!(show["gpu_release"], artifact["gpu_release"]);
    for key in [
        "child",
        "oom_kills",
        "unkillable",
        "status",
        "failure_kind",
        "reason",
    ] {
        assert_eq!(show["outcome"][key], artifact["outcome"][key], "{key}");
    }
    assert_eq!(show["evidence"]["processes"][1]["state"], "D");
    assert_eq!(
        show["evidence"]["processes"][0]["threads"]
            .as_array()
            .unwrap()
            .len(),
        40
    );
    assert_eq!(show["outcome"]["unkillable"][0]["wchan"], "nv_wait");
    assert_eq!(show["output_tail"]["stdout"].as_array().unwrap().len(), 10);

    let older = TestRoot::new();
    EventLog::open_with_clock(&older.log_path(), older.scope(), PROJECTIONS, fixed_clock())
        .unwrap()
        .append_all(every_event_kind())
        .unwrap();
    let show: Value = serde_json::from_str(&stdout(
        &older,
        &["--json", "soak", "show", "20261202T124210-3f9a"],
    ))
    .unwrap();
    for key in ["evidence", "gpu_release"] {
        assert_eq!(show[key], Value::Null, "{key}");
    }
    for key in ["child", "oom_kills", "unkillable"] {
        assert_eq!(show["outcome"][key], Value::Null, "{key}");
    }
}

/// A soak that passed with nothing to tell — no evidence, nothing found, every GPU given back —
/// reads as before: the figures, then the output's last lines at the end. A GPU not given back
/// is told first even then.
#[test]
fn a_passed_soak_with_nothing_to_tell_reads_as_before() {
    let passed = |released: bool| {
        // A soak that passed was never about to be signalled: no evidence.
        root_with_soak(move |event| match event {
            StoredEvent::SoakEvidenceCapturedV8(_) => false,
            StoredEvent::SoakFinishedV5 { end, findings } => {
                end.outcome = Outcome {
                    status: OutcomeStatus::Passed,
                    failure_kind: None,
                    reason: "ran 31 s with progress".into(),
                };
                **findings = soak_v9::Findings {
                    gpu_release: Some(GpuRelease {
                        gpus: vec![GpuReleased {
                            uuid: "GPU-1111aaaa-0000-4000-8000-000000000001".into(),
                            memory_used_before_mib: Some(0),
                            memory_used_after_mib: Some(if released { 0 } else { 512 }),
                            released: Some(released),
                        }],
                        holders: Vec::new(),
                    }),
                    ..soak_v9::Findings::default()
                };
                true
            }
            _ => true,
        })
    };
    let text = stdout(&passed(true), &["soak", "show", SOAK]);
    assert!(
        !text.contains("evidence:") && !text.contains("warning:"),
        "{text}"
    );
    let tail = line_at(&text, "last lines of stdout:");
    assert_eq!(line_at(&text, "history:") + 1, tail, "{text}");
    assert_eq!(tail + 2, text.lines().count(), "the tail ends it:\n{text}");

    let text = stdout(&passed(false), &["soak", "show", SOAK]);
    assert_eq!(
        line_at(&text, "exit:") + 1,
        line_at(&text, "warning:"),
        "{text}"
    );
    assert!(line_at(&text, "last lines of stdout:") < line_at(&text, "started:"));
    assert!(text.contains("was not given back: 512 MiB used after the soak, 0 MiB before"));
}

/// `history --soak` says what the evidence caught in one line: what for, and each process's
/// state and where it waits (the wait channel of one in uninterruptible sleep).
#[test]
fn history_tells_the_evidence_in_one_line() {
    let root = hung_job_root();
    let text = stdout(&root, &["history", "--soak", SOAK]);
    let line = text
        .lines()
        .find(|l| l.contains("soak_evidence_captured"))
        .unwrap_or_else(|| panic!("no evidence in:\n{text}"));
    assert!(
        line.ends_with(
            "evidence before stopping for stale_progress: 3 processes \
             (python3 S in futex, python3 D in nv_wait, pt_data_worker S)"
        ),
        "{line}"
    );
}

/// The report puts the evidence right after the verdict's banner, before the charts, with the
/// stacks pre-formatted and everything from the record escaped.
#[test]
fn the_report_shows_the_evidence_after_the_verdict_before_the_charts() {
    let root = hung_job_root();
    let html = stdout(&root, &["soak", "report", SOAK]);
    let at = |needle: &str| {
        html.find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in the report"))
    };
    assert!(at("class=\"banner") < at("<section class=\"evidence\">"));
    assert!(at("<section class=\"evidence\">") < at("<h2>Over time</h2>"));
    for expected in [
        "<h3>pid 5001 python3: uninterruptible sleep, 2 threads, holds a GPU device</h3>",
        "<li>36 threads in futex (futex_wait_queue): sleeping — pt_autograd_0, pt_autograd_1, pt_autograd_2 and 2 more names</li>",
        "<p class=\"stack\">python stack (py-spy)</p><pre>Thread 5000 (idle): &quot;MainThread&quot;\n",
        "    wait_for_allreduce (train.py:12)\n",
        "<p class=\"stack\">kernel stack</p><pre>nv_frame_0+0x1c/0x40 [nvidia]\n",
        "… 4 more frames</pre>",
        "<li><span class=\"label\">stuck</span>pid 5003 python3 in uninterruptible sleep",
        "<div class=\"warn\"><span class=\"label\">warning</span>GPU GPU-1111aaaa-0000-4000-8000-000000000001 was not given back",
        "<p class=\"stack\">last 10 lines of stdout</p><pre>step 21\n",
    ] {
        assert!(html.contains(expected), "{expected:?} not in the report");
    }
    assert!(
        !html.contains("<link") && !html.contains(" src="),
        "one self-contained file"
    );
}

/// Text from the record is escaped for the terminal and for HTML, and a record of any size
/// prints a bounded page: control sequences in names, a newline that would forge a line, a
/// stack of 100,000 frames, a line of a megabyte, a thousand processes.
#[test]
fn hostile_and_huge_evidence_is_escaped_and_bounded() {
    let root = root_with_soak(|event| {
        if let StoredEvent::SoakEvidenceCapturedV8(_) = event {
            let mut hostile = hung_job();
            let p = &mut hostile.processes[0];
            p.name = "\x1b]0;pwn\x07<script>".into();
            p.threads[0].wchan = Some("futex\nstuck:    forged".into());
            p.threads[1].name = "x".repeat(1_000_000);
            p.python_stack = Some(
                (0..100_000)
                    .map(|i| format!("    frame_{i} (<b>train.py</b>:{i})\n"))
                    .collect(),
            );
            p.kernel_stack = Some("y".repeat(1_000_000));
            hostile.unavailable = (0..50).map(|i| format!("reason {i}\u{1b}[2J")).collect();
            for i in 0..1_000 {
                let mut worker = hostile.processes[2].clone();
                worker.pid = 10_000 + i;
                hostile.processes.push(worker);
            }
            *event = StoredEvent::SoakEvidenceCaptured(Box::new(hostile));
        }
        true
    });
    let output = root
        .unilab()
        .args(["soak", "show", SOAK])
        .assert()
        .success()
        .get_output()
        .clone();
    assert!(
        !output.stdout.iter().any(|b| *b == 0x1b || *b == 0x07),
        "no raw control byte"
    );
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.len() < 40_000, "{} bytes", text.len());
    assert!(text.lines().count() < 200, "{} lines", text.lines().count());
    assert!(!text.contains("\nstuck:    forged"), "{text}");
    assert!(text.contains("\\u{1b}]0;pwn\\u{7}<script>"), "{text}");
    assert!(text.contains("… 99984 more lines"), "{text}");
    assert!(text.contains("… 997 more processes"), "{text}");
    assert!(text.contains("  not captured: … 44 more"), "{text}");

    let html = stdout(&root, &["soak", "report", SOAK]);
    assert!(html.len() < 200_000, "{} bytes", html.len());
    // The page's own scripts (the chart library, the data, the charts) and no other.
    assert_eq!(html.matches("<script").count(), 3);
    assert!(!html.contains("<b>train.py"));
    assert!(html.contains("&lt;script&gt;") && html.contains("&lt;b&gt;train.py&lt;/b&gt;"));
    assert!(!html.contains('\x1b'));

    let history = stdout(&root, &["history", "--soak", SOAK]);
    let line = history
        .lines()
        .find(|l| l.contains("soak_evidence_captured"))
        .unwrap();
    assert!(
        line.contains("1003 processes") && line.ends_with(", 999 more)"),
        "{line}"
    );
    assert!(!history.contains('\x1b') && !history.contains("\nstuck:"));
}
