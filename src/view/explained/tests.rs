//! The evidence and findings in words, from records made up to show each rule.

use super::*;
use crate::read::shown::{
    CgroupShown, ChildShown, ExitShown, FindingsShown, GpuReleaseShown, GpuReleasedShown,
    OomKillShown, UnkillableShown,
};

fn thread(tid: u32, name: &str, state: char, syscall: &str, wchan: &str) -> ThreadShown {
    ThreadShown {
        tid,
        name: name.into(),
        state,
        syscall: Some(syscall.into()),
        wchan: (!wchan.is_empty()).then(|| wchan.into()),
    }
}

fn process(pid: u32, state: char, threads: Vec<ThreadShown>) -> ProcessShown {
    ProcessShown {
        pid,
        ppid: 1,
        start_ticks: 0,
        name: "python3".into(),
        state,
        cmdline: vec!["python3".into(), "train.py".into()],
        threads,
        kernel_stack: None,
        python_stack: None,
        holds_gpu_device: false,
        ranked: None,
        collectives: None,
    }
}

fn evidence(processes: Vec<ProcessShown>) -> EvidenceShown {
    EvidenceShown {
        trigger: "stale_progress".into(),
        captured_at: 1_764_838_830.0,
        processes,
        cgroup: None,
        kernel_messages: Vec::new(),
        unavailable: Vec::new(),
        groups: None,
        odd_ranks: None,
        mps: None,
        collective: None,
        mismatches: Vec::new(),
    }
}

fn found(evidence: Option<EvidenceShown>) -> Found {
    Found {
        evidence,
        job_evidence: None,
        gpu_release: None,
        outcome: FindingsShown {
            child: None,
            oom_kills: Vec::new(),
            unkillable: Vec::new(),
            job_alarm: None,
        },
    }
}

#[test]
fn threads_read_grouped_by_where_they_wait_the_stuck_first() {
    let mut threads = vec![thread(100, "python3", 'S', "futex", "futex_wait_queue")];
    threads.extend((0..36).map(|i| {
        let name = if i < 4 {
            format!("pt_{i}")
        } else {
            "python3".into()
        };
        thread(200 + i, &name, 'S', "futex", "futex_wait_queue")
    }));
    threads.push(thread(300, "python3", 'R', "running", ""));
    threads.push(thread(301, "python3", 'D', "ioctl", "nv_wait"));
    threads.push(thread(302, "python3", 'S', "none", "do_epoll_wait"));
    let lines = thread_lines(&process(100, 'S', threads));
    assert_eq!(
        lines,
        [
            "main thread in futex (futex_wait_queue): sleeping",
            "1 thread in ioctl (nv_wait): uninterruptible sleep",
            "36 threads in futex (futex_wait_queue): sleeping — pt_0, pt_1, pt_2 and 2 more names",
            "1 thread: running",
            "1 thread at do_epoll_wait: sleeping",
        ]
    );
}

#[test]
fn many_places_and_no_main_thread_stay_a_few_lines() {
    // 20 threads in 10 places, the main thread gone: six places, then the rest in one line.
    let threads: Vec<ThreadShown> = (0..20)
        .map(|i| thread(200 + i, "worker", 'S', &format!("call{}", i % 10), ""))
        .collect();
    let lines = thread_lines(&process(100, 'S', threads));
    assert_eq!(lines.len(), 7, "{lines:?}");
    assert_eq!(lines[0], "2 threads in call0: sleeping — worker");
    assert_eq!(lines[6], "… 8 threads in 4 other places");
    assert_eq!(
        thread_lines(&process(100, 'Z', Vec::new())),
        ["no thread could be read"]
    );
}

#[test]
fn stacks_are_cut_to_their_first_lines_and_say_how_many_more() {
    let kernel: String = (0..12)
        .map(|i| format!("[<0>] frame_{i}+0x1/0x2\n"))
        .collect();
    let mut p = process(100, 'D', Vec::new());
    p.kernel_stack = Some(kernel);
    p.python_stack = Some(format!(
        "Process 100: python3 train.py\nPython v3.11.2 (/usr/bin/python3)\n\n\
         Thread 100 (idle): \"MainThread\"\n    wait_for_allreduce (train.py:12)\n{}",
        "    deeper (train.py:1)\n".repeat(20)
    ));
    let explained = ProcessExplained::of(&p);
    let kernel = explained.kernel_stack.unwrap();
    assert_eq!(kernel.lines.len(), KERNEL_FRAMES);
    assert_eq!(
        kernel.lines[0], "frame_0+0x1/0x2",
        "the hidden address is dropped"
    );
    assert_eq!(kernel.left_out.as_deref(), Some("… 4 more frames"));
    let python = explained.python_stack.unwrap();
    assert_eq!(python.lines[0], "Thread 100 (idle): \"MainThread\"");
    assert_eq!(python.lines[1], "    wait_for_allreduce (train.py:12)");
    assert_eq!(python.lines.len(), PYTHON_LINES);
    assert_eq!(python.left_out.as_deref(), Some("… 6 more lines"));

    // Empty stacks are none; one line of a megabyte, of multi-byte characters, is cut.
    p.kernel_stack = Some("\n \n".into());
    p.python_stack = Some("é".repeat(1_000_000));
    let explained = ProcessExplained::of(&p);
    assert_eq!(explained.kernel_stack, None);
    let python = explained.python_stack.unwrap();
    assert_eq!(python.lines, [format!("{}…", "é".repeat(LINE_CHARS))]);
    assert_eq!(python.left_out, None);
}

#[test]
fn states_are_spelled_out_and_foreign_ones_escaped() {
    let said: Vec<String> = ['D', 'S', 'R', 'Z', 'T', 't', 'I', 'X']
        .into_iter()
        .map(state_name)
        .collect();
    assert_eq!(
        said,
        [
            "uninterruptible sleep",
            "sleeping",
            "running",
            "zombie",
            "stopped",
            "stopped by a tracer",
            "idle",
            "dead"
        ]
    );
    assert_eq!(state_name('\u{1b}'), "state \\u{1b}");
}

#[test]
fn the_processes_that_tell_most_are_described_when_there_are_too_many() {
    let mut processes: Vec<ProcessShown> = (0..10)
        .map(|i| {
            process(
                100 + i,
                'S',
                vec![thread(100 + i, "python3", 'S', "futex", "")],
            )
        })
        .collect();
    processes[9]
        .threads
        .push(thread(999, "python3", 'D', "ioctl", "nv_wait"));
    processes[7].holds_gpu_device = true;
    let told = EvidenceExplained::of(&evidence(processes));
    let pids: Vec<&str> = told.processes.iter().map(|p| &p.title[..8]).collect();
    assert_eq!(
        pids,
        [
            "pid 100 ", "pid 101 ", "pid 102 ", "pid 103 ", "pid 107 ", "pid 109 "
        ]
    );
    assert_eq!(
        told.more_processes.as_deref(),
        Some("… 4 more processes (`unilab soak export` has them all)")
    );
    assert!(
        told.summary
            .starts_with("10 processes captured before stopping for stale_progress at ")
    );
}

#[test]
fn the_cgroup_and_kernel_lines_read_in_units_and_keep_the_latest() {
    let mut shown = evidence(Vec::new());
    shown.cgroup = Some(CgroupShown {
        version: 2,
        path: "/user.slice".into(),
        memory_max_bytes: Some(16 << 30),
        oom_kill_count: None,
    });
    shown.kernel_messages = (0..7)
        .map(|i| crate::read::shown::KernelMessageShown {
            at: 1_764_838_830.0 + f64::from(i),
            line: format!("line {i}\u{1b}[2J"),
        })
        .collect();
    let told = EvidenceExplained::of(&shown);
    assert_eq!(
        told.cgroup.as_deref(),
        Some("v2 /user.slice, limit 16.0 GiB, OOM kills unknown")
    );
    assert_eq!(told.kernel_messages.len(), KERNEL_MESSAGES + 1);
    assert_eq!(told.kernel_messages[0], "… 2 earlier lines");
    assert!(told.kernel_messages[KERNEL_MESSAGES].ends_with(" line 6\\u{1b}[2J"));
    assert_eq!(
        told.summary.split(" at ").next(),
        Some("0 processes captured before stopping for stale_progress")
    );
}

#[test]
fn findings_and_gpus_not_given_back_are_told_and_nothing_else() {
    let mut nothing = found(None);
    nothing.gpu_release = Some(GpuReleaseShown {
        gpus: vec![GpuReleasedShown {
            uuid: "GPU-1".into(),
            memory_used_before_mib: Some(0),
            memory_used_after_mib: None,
            released: None,
        }],
        holders: Vec::new(),
    });
    assert!(Explained::of(&nothing).is_empty(), "unknown is no warning");

    let mut some = nothing.clone();
    if let Some(release) = &mut some.gpu_release {
        release.gpus[0].released = Some(false);
    }
    some.outcome.child = Some(ChildShown {
        pid: 7,
        name: "rank1".into(),
        exit: ExitShown {
            code: None,
            signal: Some(9),
        },
    });
    some.outcome.oom_kills.push(OomKillShown {
        pid: 8,
        name: "worker".into(),
        source: "cgroup".into(),
    });
    let told = Explained::of(&some);
    assert_eq!(
        told.findings,
        [
            (
                "child",
                "pid 7 rank1 was killed by signal 9 while the command ran".to_owned()
            ),
            (
                "OOM kill",
                "pid 8 worker killed by the kernel's OOM killer (the cgroup's oom_kill count grew)"
                    .to_owned()
            ),
        ]
    );
    assert_eq!(
        told.warnings,
        ["GPU GPU-1 was not given back: unknown used after the soak, 0 MiB before"]
    );

    // Many of a kind: a few lines, then how many more.
    let mut many = found(None);
    many.outcome.unkillable = (0..9)
        .map(|pid| UnkillableShown {
            pid,
            name: "worker".into(),
            state: 'D',
            wchan: None,
        })
        .collect();
    let told = Explained::of(&many).findings;
    assert_eq!(told.len(), MAX_LISTED + 1);
    assert_eq!(told[MAX_LISTED], ("stuck", "… 3 more".to_owned()));
    assert_eq!(
        told[0].1,
        "pid 0 worker in uninterruptible sleep: no signal ended it; the host may need a reset"
    );
}

#[test]
fn the_one_line_names_each_process_by_the_thread_that_says_most() {
    let at = |tid, state, syscall, wchan| ThreadAt {
        tid,
        state,
        syscall,
        wchan,
    };
    let processes = [
        ProcessAt {
            pid: 1,
            name: "python3",
            state: 'S',
            threads: vec![
                at(1, 'S', Some("futex"), Some("futex_wait_queue")),
                at(2, 'D', Some("ioctl"), Some("nv_wait")),
            ],
        },
        ProcessAt {
            pid: 3,
            name: "busy",
            state: 'R',
            threads: vec![at(3, 'R', Some("running"), None)],
        },
        ProcessAt {
            pid: 4,
            name: "gone\nforged",
            state: 'Z',
            threads: Vec::new(),
        },
        ProcessAt {
            pid: 5,
            name: "w",
            state: 'S',
            threads: vec![at(5, 'S', None, Some("pipe_read"))],
        },
        ProcessAt {
            pid: 6,
            name: "w",
            state: 'S',
            threads: Vec::new(),
        },
    ];
    assert_eq!(
        one_line_evidence("stale_progress", &processes),
        "evidence before stopping for stale_progress: 5 processes \
         (python3 D in nv_wait, busy R, gone\\nforged Z, w S in pipe_read, 1 more)"
    );
    assert_eq!(
        one_line_evidence("interrupted", &[]),
        "evidence before stopping for interrupted: 0 processes"
    );
}

#[test]
fn the_last_lines_of_a_tail_are_its_most_recent() {
    let tail: String = (1..=25).map(|i| format!("step {i}\n")).collect();
    let last = last_lines(&tail);
    assert_eq!(last.len(), TAIL_LINES);
    assert_eq!((last[0], last[TAIL_LINES - 1]), ("step 16", "step 25"));
    assert!(last_lines("").is_empty());
}

/// A tree of several ranks says where they stood, the odd one named first; a tree of one rank,
/// or of none, says nothing of ranks. The job's alarm that failed the soak is its first finding,
/// and the capture made at the alarm says so.
#[test]
fn the_ranks_of_one_tree_and_the_jobs_alarm_are_told() {
    use crate::event::soak::JobAlarm;
    use crate::read::signature::Frame;
    use crate::read::signature::group::SignatureGroup;
    let at = |function: &str, line: u32, ranks: Vec<u32>| SignatureGroup {
        signature: function.into(),
        top_frames: vec![Frame {
            function: function.into(),
            file: Some("/srv/ring.py".into()),
            line: Some(line),
        }],
        ranks,
    };
    let mut shown = evidence(vec![process(100, 'S', Vec::new())]);
    shown.groups = Some(vec![
        at("all_reduce", 41, vec![0, 1, 3]),
        at("load_batch", 88, vec![2]),
    ]);
    shown.odd_ranks = Some(vec![2]);
    let mut at_alarm = shown.clone();
    at_alarm.trigger = "job_alarm".into();
    let mut whole = found(Some(shown.clone()));
    whole.job_evidence = Some(at_alarm);
    whole.outcome.job_alarm = Some(JobAlarm {
        job: "ring".into(),
        rank: Some(2),
        host: "n2".into(),
        soak_id: "20261206T080000-c8c8".into(),
        failure_kind: "stale_progress".into(),
        reason: "no progress for\n3.0 s".into(),
        at: 1_764_838_830.0,
    });
    let explained = Explained::of(&whole);
    let told = explained.evidence.as_ref().unwrap();
    assert_eq!(
        told.ranks.as_deref(),
        Some("rank 2 is in `load_batch` (ring.py:88); 3 ranks wait in `all_reduce` (ring.py:41)")
    );
    let alarm = explained.job_evidence.as_ref().unwrap();
    assert!(
        alarm.summary.contains("when its job's alarm was seen"),
        "{}",
        alarm.summary
    );
    assert_eq!(
        explained.findings[0],
        (
            "job",
            // The alarm's text is the record's: kept to one line.
            "rank 2 of job `ring` on n2 failed first (stale_progress): no progress for\\n3.0 s"
                .to_owned()
        )
    );

    shown.groups = Some(vec![at("all_reduce", 41, vec![0])]);
    assert_eq!(
        Explained::of(&found(Some(shown))).evidence.unwrap().ranks,
        None
    );
}
