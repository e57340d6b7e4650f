//! Where each captured process stood, in a few frames and a short signature, and the ranks of a
//! job grouped by it: the stack signature of DESIGN.md's fourth wave.
//!
//! A process's signature is read from its main thread (the thread whose id is the pid): its
//! innermost Python frames when `py-spy` dumped them, else where it waits in the kernel (`wchan`)
//! and its system call. It is derived from the evidence as recorded, never stored apart from
//! it, so a change of rule here changes no record. Invariants:
//! - Stable: processes whose innermost [`SIGNATURE_FRAMES`] Python functions are the same have
//!   the same signature, whatever their lines (a rank waits at either `recv` of an all-reduce);
//!   ranks are grouped by their frames' lines too ([`group`]), so each group tells a true line.
//! - Total: any evidence, py-spy's text included, gives a signature; nothing here panics.

pub(crate) mod group;
mod pyspy;

use serde::{Deserialize, Serialize};

use crate::event::soak::ProcessEvidence;

/// How many of a process's innermost frames it keeps.
pub(crate) const TOP_FRAMES: usize = 5;
/// How many innermost Python functions make its signature.
pub(crate) const SIGNATURE_FRAMES: usize = 3;
/// The signature of a process of which nothing is known (no Python stack, no `wchan`, no
/// system call).
pub(crate) const UNKNOWN: &str = "unknown";

/// One frame: a Python function and where it is, or (without Python frames) the kernel function
/// a process waits in, or its system call, with no file or line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Frame {
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// Where a process stood when its evidence was captured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StackSignature {
    /// Short and stable: the innermost Python functions, innermost first, joined by ` < `
    /// (`all_reduce < train < <module>`); without them `wchan (syscall)` (`wait_woken
    /// (recvfrom)`), or whichever of the two is known; else [`UNKNOWN`].
    pub signature: String,
    /// At most [`TOP_FRAMES`], innermost first.
    pub top_frames: Vec<Frame>,
}

/// The stack signature of one captured process.
pub(crate) fn of_process(process: &ProcessEvidence) -> StackSignature {
    let python = process
        .python_stack
        .as_deref()
        .map(|text| pyspy::main_thread_frames(text, process.pid))
        .unwrap_or_default();
    if !python.is_empty() {
        let signature = python
            .iter()
            .take(SIGNATURE_FRAMES)
            .map(|f| f.function.as_str())
            .collect::<Vec<_>>()
            .join(" < ");
        let mut top_frames = python;
        top_frames.truncate(TOP_FRAMES);
        return StackSignature {
            signature,
            top_frames,
        };
    }
    let main = process
        .threads
        .iter()
        .find(|t| t.tid == process.pid)
        .or_else(|| process.threads.first());
    let wchan = main
        .and_then(|t| t.wchan.as_deref())
        .filter(|w| !w.is_empty());
    let syscall = main
        .and_then(|t| t.syscall.as_deref())
        .filter(|s| !s.is_empty());
    let (signature, function) = match (wchan, syscall) {
        (Some(w), Some(s)) => (format!("{w} ({s})"), w),
        (Some(w), None) => (w.to_owned(), w),
        (None, Some(s)) => (s.to_owned(), s),
        (None, None) => {
            return StackSignature {
                signature: UNKNOWN.to_owned(),
                top_frames: Vec::new(),
            };
        }
    };
    StackSignature {
        signature,
        top_frames: vec![Frame {
            function: function.to_owned(),
            file: None,
            line: None,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::soak::ThreadEvidence;

    pub(super) fn process(
        pid: u32,
        python: Option<&str>,
        wchan: Option<&str>,
        syscall: Option<&str>,
    ) -> ProcessEvidence {
        ProcessEvidence {
            pid,
            ppid: 1,
            start_ticks: 100,
            name: "python3".into(),
            state: 'S',
            rank: None,
            collectives: None,
            cmdline: vec!["python3".into(), "ring_allreduce.py".into()],
            threads: vec![
                ThreadEvidence {
                    tid: pid,
                    name: "python3".into(),
                    state: 'S',
                    wchan: wchan.map(Into::into),
                    syscall: syscall.map(Into::into),
                },
                ThreadEvidence {
                    tid: pid + 1,
                    name: "pt_autograd".into(),
                    state: 'S',
                    wchan: Some("futex_wait_queue".into()),
                    syscall: Some("futex".into()),
                },
            ],
            kernel_stack: None,
            python_stack: python.map(Into::into),
            holds_gpu_device: false,
        }
    }

    fn dump(pid: u32, frames: &[&str]) -> String {
        let mut text = format!(
            "Process {pid}: python3 x.py\nPython v3.11.7 (/usr/bin/python3)\n\nThread {pid} (idle): \"MainThread\"\n"
        );
        for f in frames {
            text.push_str("    ");
            text.push_str(f);
            text.push('\n');
        }
        text.push_str("Thread 99 (idle): \"Thread-1\"\n    other (threading.py:1)\n");
        text
    }

    #[test]
    fn python_frames_make_the_signature_when_py_spy_gave_them() {
        let frames = [
            "all_reduce (ring_allreduce.py:88)",
            "step (ring_allreduce.py:120)",
            "train (ring_allreduce.py:130)",
            "main (ring_allreduce.py:160)",
            "run (ring_allreduce.py:165)",
            "<module> (ring_allreduce.py:170)",
        ];
        let found = of_process(&process(
            10,
            Some(&dump(10, &frames)),
            Some("wait_woken"),
            Some("recvfrom"),
        ));
        assert_eq!(found.signature, "all_reduce < step < train");
        assert_eq!(found.top_frames.len(), TOP_FRAMES);
        assert_eq!(
            found.top_frames[0],
            Frame {
                function: "all_reduce".into(),
                file: Some("ring_allreduce.py".into()),
                line: Some(88)
            }
        );
        assert_eq!(found.top_frames[4].function, "run");
    }

    /// Two ranks waiting at different lines of the same functions (either `recv` of a ring
    /// all-reduce) are in one group: the signature holds no line.
    #[test]
    fn the_same_innermost_functions_at_other_lines_give_the_same_signature() {
        let a = of_process(&process(
            10,
            Some(&dump(10, &["all_reduce (r.py:88)", "train (r.py:130)"])),
            None,
            None,
        ));
        let b = of_process(&process(
            20,
            Some(&dump(20, &["all_reduce (r.py:97)", "train (r.py:131)"])),
            None,
            None,
        ));
        let c = of_process(&process(
            30,
            Some(&dump(30, &["load_batch (r.py:50)", "train (r.py:129)"])),
            None,
            None,
        ));
        assert_eq!(a.signature, b.signature);
        assert_ne!(a.top_frames, b.top_frames);
        assert_ne!(a.signature, c.signature);
    }

    #[test]
    fn without_python_frames_the_main_threads_wchan_and_system_call_make_it() {
        let both = of_process(&process(10, None, Some("wait_woken"), Some("recvfrom")));
        assert_eq!(both.signature, "wait_woken (recvfrom)");
        assert_eq!(
            both.top_frames,
            vec![Frame {
                function: "wait_woken".into(),
                file: None,
                line: None
            }]
        );
        let syscall = of_process(&process(
            10,
            Some("py-spy: ptrace not permitted"),
            None,
            Some("clock_nanosleep"),
        ));
        assert_eq!(syscall.signature, "clock_nanosleep");
        assert_eq!(syscall.top_frames[0].function, "clock_nanosleep");
        assert_eq!(
            of_process(&process(10, None, Some("do_nanosleep"), None)).signature,
            "do_nanosleep"
        );
        let nothing = of_process(&process(10, None, None, None));
        assert_eq!(nothing.signature, UNKNOWN);
        assert!(nothing.top_frames.is_empty());
    }

    /// The main thread is the one whose id is the pid, not the first listed; without it, the
    /// first thread read stands in.
    #[test]
    fn the_main_thread_is_read_not_another() {
        let mut p = process(10, None, Some("wait_woken"), Some("recvfrom"));
        p.threads.reverse();
        assert_eq!(of_process(&p).signature, "wait_woken (recvfrom)");
        p.threads.retain(|t| t.tid != 10);
        assert_eq!(of_process(&p).signature, "futex_wait_queue (futex)");
        p.threads.clear();
        assert_eq!(of_process(&p).signature, UNKNOWN);
    }

    /// What py-spy 0.4 printed for two ranks of `tests/fixtures/ring_allreduce.py` with rank 2
    /// hung (`py-spy dump --nonblocking`), ranks 0 and 3 standing as rank 1 does: rank 2 is the
    /// odd one, in `load_batch`, and the verdict names it.
    #[test]
    fn real_py_spy_dumps_of_the_ring_name_the_hung_rank() {
        const WAITING: &str = "Process 25320: /usr/bin/python3 ring_allreduce.py --world 4 --port-base 0\n\
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)\n\
\n\
Thread 25320 (idle): \"MainThread\"\n    \
    all_reduce (ring_allreduce.py:184)\n    \
    train (ring_allreduce.py:202)\n    \
    main (ring_allreduce.py:214)\n    \
    <module> (ring_allreduce.py:224)\n";
        const HUNG: &str = "Process 25321: /usr/bin/python3 ring_allreduce.py --world 4 --port-base 0\n\
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)\n\
\n\
Thread 25321 (idle): \"MainThread\"\n    \
    load_batch (ring_allreduce.py:164)\n    \
    train (ring_allreduce.py:199)\n    \
    main (ring_allreduce.py:214)\n    \
    <module> (ring_allreduce.py:224)\n";
        let waiting = of_process(&process(
            25320,
            Some(WAITING),
            Some("wait_woken"),
            Some("recvfrom"),
        ));
        let hung = of_process(&process(
            25321,
            Some(HUNG),
            Some("hrtimer_nanosleep"),
            Some("clock_nanosleep"),
        ));
        assert_eq!(waiting.signature, "all_reduce < train < main");
        assert_eq!(hung.signature, "load_batch < train < main");
        assert_eq!(hung.top_frames.len(), 4);
        let ranks = [
            (0, waiting.clone()),
            (1, waiting.clone()),
            (2, hung),
            (3, waiting),
        ];
        let grouping = group::group(&ranks);
        assert_eq!(grouping.odd_ranks, vec![2]);
        assert_eq!(
            group::verdict(&grouping, &|_| None).unwrap(),
            "rank 2 is in `load_batch` (ring_allreduce.py:164); 3 ranks wait in `all_reduce` (ring_allreduce.py:184)"
        );
    }
}
