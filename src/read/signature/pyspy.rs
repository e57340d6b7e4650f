//! Reading what `py-spy dump` printed: its threads, each with its frames innermost first.
//!
//! The text is py-spy's human form (`Process …`, `Python v…`, then per thread a header line
//! `Thread <id> (<status>): "<name>"` and one line a frame, indented four spaces:
//! `<function> (<file>:<line>)`, or `<function> (<file>)` where py-spy has no line). Lines of
//! locals (`--locals`, indented further), terminal colours and anything else are skipped, so any
//! text — cut short by a timeout, masked, or not py-spy's at all — reads as some threads or none;
//! nothing here panics.

use super::Frame;

/// One thread of a dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PyThread {
    /// The operating system's thread id, where py-spy printed one (in decimal); py-spy prints
    /// Python's own thread id in hex where it has no native one, and that is not kept.
    pub tid: Option<u32>,
    /// Its Python name (`MainThread`).
    pub name: Option<String>,
    /// Innermost first, as py-spy prints them.
    pub frames: Vec<Frame>,
}

/// Every thread of `text`, in the order printed.
pub(super) fn threads(text: &str) -> Vec<PyThread> {
    let text = without_colours(text);
    let mut threads: Vec<PyThread> = Vec::new();
    for line in text.lines() {
        if let Some(header) = line.strip_prefix("Thread ") {
            threads.push(thread_header(header));
        } else if let Some(frame) = line.strip_prefix("    ") {
            // Deeper indents are the locals under a frame.
            if frame.starts_with(char::is_whitespace) {
                continue;
            }
            if let (Some(thread), Some(frame)) = (threads.last_mut(), parse_frame(frame)) {
                thread.frames.push(frame);
            }
        }
    }
    threads
}

/// The frames of the main thread of process `pid`: the thread whose id is the pid, else the one
/// named `MainThread`, else the first printed. Empty where there is none.
pub(super) fn main_thread_frames(text: &str, pid: u32) -> Vec<Frame> {
    let mut threads = threads(text);
    let main = threads
        .iter()
        .position(|t| t.tid == Some(pid))
        .or_else(|| {
            threads
                .iter()
                .position(|t| t.name.as_deref() == Some("MainThread"))
        })
        .unwrap_or(0);
    if main < threads.len() {
        threads.swap_remove(main).frames
    } else {
        Vec::new()
    }
}

/// `<id> (<status>): "<name>"`, after `Thread `.
fn thread_header(header: &str) -> PyThread {
    let id = header
        .split(|c: char| c.is_whitespace() || c == ':')
        .next()
        .unwrap_or_default();
    let tid = if id.bytes().all(|b| b.is_ascii_digit()) {
        id.parse().ok()
    } else {
        None
    };
    let name = header.split_once(": \"").and_then(|(_, rest)| {
        let name = rest.trim_end();
        let name = name.strip_suffix('"').unwrap_or(name);
        (!name.is_empty()).then(|| name.to_owned())
    });
    PyThread {
        tid,
        name,
        frames: Vec::new(),
    }
}

/// `<function> (<file>:<line>)`, `<function> (<file>)`, or a bare `<function>`. The function
/// ends at the first ` (` (Python's names have no spaces; a file's path may have them).
fn parse_frame(line: &str) -> Option<Frame> {
    let line = line.trim_end();
    let (function, location) = match line.split_once(" (") {
        Some((function, rest)) => (function, rest.strip_suffix(')')),
        None => (line, None),
    };
    let function = function.trim();
    if function.is_empty() {
        return None;
    }
    let (file, line) = match location.map(str::trim).filter(|l| !l.is_empty()) {
        None => (None, None),
        Some(location) => match location.rsplit_once(':') {
            Some((file, number))
                if !file.is_empty()
                    && !number.is_empty()
                    && number.bytes().all(|b| b.is_ascii_digit()) =>
            {
                match number.parse::<u32>() {
                    Ok(n) => (Some(file.to_owned()), Some(n)),
                    Err(_) => (Some(location.to_owned()), None),
                }
            }
            _ => (Some(location.to_owned()), None),
        },
    };
    Some(Frame {
        function: function.to_owned(),
        file,
        line,
    })
}

/// `text` without terminal escape sequences (`ESC [ … letter`), which a py-spy run on a
/// terminal adds around names.
fn without_colours(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('\u{1b}') {
        return text.into();
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = "Process 4242: python3 train.py --steps 10\n\
Python v3.11.7 (/usr/bin/python3.11)\n\
\n\
Thread 4242 (idle): \"MainThread\"\n    \
    all_reduce (ring_allreduce.py:88)\n    \
    train (ring_allreduce.py:130)\n    \
    <module> (ring_allreduce.py:170)\n\
Thread 4250 (idle): \"Thread-1 (worker)\"\n    \
    wait (threading.py:327)\n    \
    run (threading.py:982)\n";

    fn frame(function: &str, file: Option<&str>, line: Option<u32>) -> Frame {
        Frame {
            function: function.into(),
            file: file.map(Into::into),
            line,
        }
    }

    #[test]
    fn each_thread_of_a_dump_is_read_with_its_frames_innermost_first() {
        let threads = threads(DUMP);
        assert_eq!(threads.len(), 2);
        assert_eq!(threads[0].tid, Some(4242));
        assert_eq!(threads[0].name.as_deref(), Some("MainThread"));
        assert_eq!(
            threads[0].frames,
            vec![
                frame("all_reduce", Some("ring_allreduce.py"), Some(88)),
                frame("train", Some("ring_allreduce.py"), Some(130)),
                frame("<module>", Some("ring_allreduce.py"), Some(170)),
            ]
        );
        assert_eq!(threads[1].name.as_deref(), Some("Thread-1 (worker)"));
        assert_eq!(threads[1].frames.len(), 2);
    }

    #[test]
    fn the_main_thread_is_the_one_whose_id_is_the_pid_else_the_one_named_so() {
        let dump = "Thread 7 (idle): \"Thread-1\"\n    a (x.py:1)\n\
Thread 9 (active): \"MainThread\"\n    b (y.py:2)\n";
        assert_eq!(main_thread_frames(dump, 7)[0].function, "a");
        assert_eq!(main_thread_frames(dump, 8)[0].function, "b");
        let unnamed = "Thread 0x7F3A2B (idle)\n    c (z.py:3)\n";
        assert_eq!(main_thread_frames(unnamed, 8)[0].function, "c");
        assert!(main_thread_frames("", 8).is_empty());
        assert!(main_thread_frames("Process 8: python3\n", 8).is_empty());
    }

    #[test]
    fn locals_colours_and_frames_without_a_line_are_read_as_py_spy_means_them() {
        let dump = "Thread \u{1b}[1;33m4242\u{1b}[0m (active+gil): \"MainThread\"\n    \
    \u{1b}[32mload_batch\u{1b}[0m (\u{1b}[36mdata.py\u{1b}[0m:\u{1b}[2m88\u{1b}[0m)\n        \
        Arguments:\n            \
            step: 3\n    \
    recv (libc.so.6)\n    \
    main (/home/me/My Project (copy)/train.py:12)\n";
        assert_eq!(
            main_thread_frames(dump, 4242),
            vec![
                frame("load_batch", Some("data.py"), Some(88)),
                frame("recv", Some("libc.so.6"), None),
                frame(
                    "main",
                    Some("/home/me/My Project (copy)/train.py"),
                    Some(12)
                ),
            ]
        );
    }

    #[test]
    fn text_that_is_not_a_dump_reads_as_no_frames_and_never_panics() {
        for text in [
            "",
            "Thread",
            "Thread ",
            "Thread : \"",
            "    orphan (a.py:1)\n",
            "Thread 1 (idle)\n     \n    \n    (\n    f (\n    g (:)\n    h (a.py:)\n",
            "Thread 1 (idle)\n    f (a.py:99999999999999999999)\n",
            "\u{1b}",
            "\u{1b}[",
            "Thread 1\u{1b}[31",
        ] {
            let _ = threads(text);
            let _ = main_thread_frames(text, 1);
        }
        let odd = main_thread_frames(
            "Thread 1 (idle)\n    f (\n    g (:)\n    h (a.py:)\n    i (a.py:99999999999)\n",
            1,
        );
        assert_eq!(
            odd,
            vec![
                frame("f", None, None),
                frame("g", Some(":"), None),
                frame("h", Some("a.py:"), None),
                frame("i", Some("a.py:99999999999"), None),
            ]
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Any text — py-spy's lines cut, mixed and garbled — reads without a panic, and every
        /// frame read comes from a frame line: as many at most as lines indented four spaces
        /// once colours are taken out.
        #[test]
        fn no_text_makes_the_reading_panic(
            lines in proptest::collection::vec(
                proptest::prop_oneof![
                    "Thread [0-9a-fx]{0,6} \\((idle|active)\\)(: \"[ -~]{0,8}\")?",
                    "    [ -~]{0,12}( \\([ -~]{0,8}(:[0-9]{0,12})?\\)?)?",
                    "[ -~\u{1b}]{0,16}",
                ],
                0..12,
            ),
            pid in 0u32..10,
        ) {
            let text = lines.join("\n");
            let frames: usize = threads(&text).iter().map(|t| t.frames.len()).sum();
            let shown = without_colours(&text);
            let frame_lines = shown.lines().filter(|l| l.starts_with("    ")).count();
            proptest::prop_assert!(frames <= frame_lines);
            let _ = main_thread_frames(&text, pid);
        }
    }
}
