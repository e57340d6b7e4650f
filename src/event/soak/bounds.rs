//! What a soak's sample, evidence and verdict may hold, enforced where each event is built
//! ([`Event::sampled`], [`Event::evidence_captured`], [`Event::finished`]).
//!
//! A record must stay readable: the log refuses one whose decode would claim more than 16 MiB
//! (`log::codec`). What goes into these three comes from the tree and the host — command lines
//! (a launcher may pass a whole config inline: 1.4 MB a process is not rare), thread lists,
//! stacks, kernel lines, output — so each is cut to a budget, with a note that says how much
//! was cut, keeping every record well within the limit (under half of it) whatever the tree:
//! the figures below are what a record of inputs over every budget at once claims (see
//! `tests/record_bounds.rs`). What fits its budget is kept exactly as it was: the budgets bite
//! only on inputs beyond them.
//!
//! Budgets, in bytes of text (each kept string claims 8 more for its length) or entries:
//! - every record: a process's or thread's name [`NAME_BYTES`]; a wait channel, system call,
//!   GPU UUID or device path [`WORD_BYTES`]; a note, error, reason part or kernel line
//!   [`LINE_BYTES`].
//! - a sample (at most about 3 MB whole): [`SAMPLE_PROCESSES`] processes, [`SAMPLE_GPUS`] GPUs of
//!   [`GPU_PROCESSES`] processes each (the tree's, and others'), [`SAMPLE_ERRORS`] errors; what
//!   is left out is said in its `errors`.
//! - the evidence (at most about 6 MB): [`EVIDENCE_PROCESSES`] processes; for `n` of them each
//!   command line gets the lesser of [`CMDLINE_BYTES`] and [`CMDLINES_BYTES`]` / n`, each
//!   thread list the lesser of [`THREADS_PER_PROCESS`] and [`THREADS`]` / n`, each Python stack
//!   the lesser of [`PYTHON_STACK_BYTES`] and [`PYTHON_STACKS_BYTES`]` / n`, each kernel stack
//!   the lesser of [`KERNEL_STACK_BYTES`] and [`KERNEL_STACKS_BYTES`]` / n`;
//!   [`KERNEL_MESSAGES`] kernel lines, [`NOTES`] notes. A command line cut ends with an element
//!   that says so (`[… 1374580 bytes of 12 arguments cut by unilab]`), a text cut (a stack, a
//!   name, a line) with `[… N bytes cut by unilab]`; threads, kernel lines, notes and processes
//!   left out are said in its `unavailable`.
//! - the verdict (at most about 3.3 MB): a reason of [`REASON_BYTES`]; [`LISTED`] leaked
//!   processes (their command lines shared as the evidence's are), OOM kills, unkillable
//!   processes and GPU holders; [`SAMPLE_GPUS`] GPUs given back; each output tail its last
//!   [`TAIL_BYTES`], after a line `[… N bytes cut by unilab]`. What is left out is said at the
//!   end of its reason.

use super::{Evidence, Findings, Measures, ResourceLimit, Sample, SoakEnd};
use crate::event::Event;

pub(crate) const NAME_BYTES: usize = 64;
pub(crate) const WORD_BYTES: usize = 128;
pub(crate) const LINE_BYTES: usize = 1024;

pub(crate) const SAMPLE_PROCESSES: usize = 8192;
pub(crate) const SAMPLE_GPUS: usize = 64;
pub(crate) const GPU_PROCESSES: usize = 1024;
pub(crate) const SAMPLE_ERRORS: usize = 64;

pub(crate) const EVIDENCE_PROCESSES: usize = 1024;
pub(crate) const CMDLINE_BYTES: usize = 64 << 10;
pub(crate) const CMDLINES_BYTES: usize = 2 << 20;
pub(crate) const THREADS_PER_PROCESS: usize = 1024;
pub(crate) const THREADS: usize = 4096;
pub(crate) const PYTHON_STACK_BYTES: usize = 256 << 10;
pub(crate) const PYTHON_STACKS_BYTES: usize = 1 << 20;
pub(crate) const KERNEL_STACK_BYTES: usize = 16 << 10;
pub(crate) const KERNEL_STACKS_BYTES: usize = 512 << 10;
pub(crate) const KERNEL_MESSAGES: usize = 512;
pub(crate) const NOTES: usize = 256;
pub(crate) const MPS_SERVERS: usize = 64;
pub(crate) const COLLECTIVE_GROUPS: usize = 512;
pub(crate) const COLLECTIVES_PENDING: usize = 512;
pub(crate) const MPS_CLIENTS: usize = 1024;

pub(crate) const REASON_BYTES: usize = 16 << 10;
pub(crate) const LISTED: usize = 1024;
pub(crate) const TAIL_BYTES: usize = 256 << 10;

/// What a string of a command line claims beside its bytes: its length.
const ARG_OVERHEAD: usize = 8;

impl Event {
    /// One sample of a soak with the progress its supervisor decided at it (`None`: no
    /// supervisor took it), within its budgets (see `event::soak::bounds`).
    pub fn sampled(
        mut sample: Sample,
        mut measures: Measures,
        progress: Option<super::ProgressNoted>,
    ) -> Event {
        bound_sample(&mut sample, &mut measures);
        Event::SoakSampled {
            sample: Box::new(sample),
            measures: Some(Box::new(measures)),
            progress,
        }
    }

    /// The evidence of a soak's tree, within its budgets (see `event::soak::bounds`).
    pub fn evidence_captured(mut evidence: Evidence) -> Event {
        bound_evidence(&mut evidence);
        Event::SoakEvidenceCaptured(Box::new(evidence))
    }

    /// A soak's verdict, within its budgets (see `event::soak::bounds`).
    pub fn finished(
        mut end: SoakEnd,
        mut findings: Findings,
        limit: Option<ResourceLimit>,
    ) -> Event {
        bound_verdict(&mut end, &mut findings);
        Event::SoakFinished {
            end: Box::new(end),
            findings: Some(Box::new(findings)),
            limit,
        }
    }
}

fn bound_sample(sample: &mut Sample, measures: &mut Measures) {
    let mut notes = Vec::new();
    let processes = sample.processes.len();
    if keep_first(&mut sample.processes, SAMPLE_PROCESSES) > 0 {
        notes.push(format!(
            "unilab kept {SAMPLE_PROCESSES} of the tree's {processes} processes in this sample"
        ));
    }
    // Each process's PSS, where it lines up with them, lines up still.
    keep_first(&mut measures.pss_bytes, SAMPLE_PROCESSES);
    for process in &mut sample.processes {
        cut_text(&mut process.name, NAME_BYTES);
    }
    let mut gpu_processes = 0;
    if let Some(gpus) = &mut sample.gpus {
        let all = gpus.len();
        if keep_first(gpus, SAMPLE_GPUS) > 0 {
            notes.push(format!(
                "unilab kept {SAMPLE_GPUS} of the {all} GPUs in this sample"
            ));
        }
        for gpu in gpus {
            cut_text(&mut gpu.uuid, WORD_BYTES);
            gpu_processes += keep_first(&mut gpu.processes, GPU_PROCESSES);
        }
    }
    keep_first(&mut measures.gpus, SAMPLE_GPUS);
    for health in &mut measures.gpus {
        gpu_processes += keep_first(&mut health.other_processes, GPU_PROCESSES);
    }
    if gpu_processes > 0 {
        notes.push(format!(
            "unilab kept {GPU_PROCESSES} compute processes a GPU in this sample: {gpu_processes} left out"
        ));
    }
    bound_notes(&mut sample.errors, SAMPLE_ERRORS, "errors", notes);
}

fn bound_evidence(evidence: &mut Evidence) {
    let mut notes = Vec::new();
    let all = evidence.processes.len();
    if keep_first(&mut evidence.processes, EVIDENCE_PROCESSES) > 0 {
        notes.push(format!(
            "unilab kept {EVIDENCE_PROCESSES} of the tree's {all} processes in the evidence"
        ));
    }
    let n = evidence.processes.len().max(1);
    let cmdline = CMDLINE_BYTES.min(CMDLINES_BYTES / n);
    let threads = THREADS_PER_PROCESS.min(THREADS / n);
    let python = PYTHON_STACK_BYTES.min(PYTHON_STACKS_BYTES / n);
    let kernel = KERNEL_STACK_BYTES.min(KERNEL_STACKS_BYTES / n);
    let (mut threads_cut, mut cut_in) = (0, 0);
    for process in &mut evidence.processes {
        cut_text(&mut process.name, NAME_BYTES);
        cut_cmdline(&mut process.cmdline, cmdline);
        let cut = keep_first(&mut process.threads, threads);
        threads_cut += cut;
        cut_in += usize::from(cut > 0);
        for thread in &mut process.threads {
            cut_text(&mut thread.name, NAME_BYTES);
            cut_word(&mut thread.wchan);
            cut_word(&mut thread.syscall);
        }
        if let Some(stack) = &mut process.python_stack {
            cut_text(stack, python);
        }
        if let Some(stack) = &mut process.kernel_stack {
            cut_text(stack, kernel);
        }
    }
    if threads_cut > 0 {
        notes.push(format!(
            "unilab kept {threads} threads a process in the evidence: {threads_cut} threads of {cut_in} processes left out"
        ));
    }
    let lines = evidence.kernel_messages.len();
    if keep_first(&mut evidence.kernel_messages, KERNEL_MESSAGES) > 0 {
        notes.push(format!(
            "unilab kept the first {KERNEL_MESSAGES} of {lines} kernel lines in the evidence"
        ));
    }
    for message in &mut evidence.kernel_messages {
        cut_text(&mut message.line, LINE_BYTES);
    }
    if let Some(cgroup) = &mut evidence.cgroup {
        cut_text(&mut cgroup.path, LINE_BYTES);
    }
    let servers = evidence.mps.len();
    if keep_first(&mut evidence.mps, MPS_SERVERS) > 0 {
        notes.push(format!(
            "unilab kept {MPS_SERVERS} of the {servers} MPS servers whose clients were ended"
        ));
    }
    let mut clients = MPS_CLIENTS;
    let mut clients_cut = 0;
    for server in &mut evidence.mps {
        cut_text(&mut server.daemon, NAME_BYTES);
        clients_cut += keep_first(&mut server.terminated, clients);
        clients -= server.terminated.len();
    }
    if clients_cut > 0 {
        notes.push(format!(
            "unilab kept {MPS_CLIENTS} of the MPS clients ended: {clients_cut} left out"
        ));
    }
    notes.extend(bound_collectives(&mut evidence.processes));
    bound_notes(&mut evidence.unavailable, NOTES, "notes", notes);
}

/// The processes' collectives within [`COLLECTIVE_GROUPS`] groups and [`COLLECTIVES_PENDING`]
/// pending entries in all (the oldest of each group kept: the one a rank waits in), each entry
/// of a few tensors and frames; what was left out, said.
fn bound_collectives(processes: &mut [super::ProcessEvidence]) -> Option<String> {
    /// An entry's tensors, their dimensions and its frames.
    const TENSORS: usize = 8;
    const DIMENSIONS: usize = 8;
    const FRAMES: usize = 4;
    let (mut groups, mut pending, mut cut) = (COLLECTIVE_GROUPS, COLLECTIVES_PENDING, 0);
    for found in processes.iter_mut().filter_map(|p| p.collectives.as_mut()) {
        keep_first(&mut found.sources, 8);
        keep_first(&mut found.missing, 8);
        found
            .missing
            .iter_mut()
            .for_each(|m| cut_text(m, LINE_BYTES));
        cut += keep_first(&mut found.groups, groups);
        groups -= found.groups.len();
        for group in &mut found.groups {
            cut_text(&mut group.group, NAME_BYTES);
            cut_word(&mut group.name);
            cut_word(&mut group.desc);
            keep_first(&mut group.ranks, EVIDENCE_PROCESSES * 64);
            cut += keep_first(&mut group.pending, pending);
            pending -= group.pending.len();
            for entry in &mut group.pending {
                cut_text(&mut entry.op, NAME_BYTES);
                cut_text(&mut entry.state, NAME_BYTES);
                for sizes in [&mut entry.input_sizes, &mut entry.output_sizes] {
                    keep_first(sizes, TENSORS);
                    for size in sizes.iter_mut() {
                        keep_first(size, DIMENSIONS);
                    }
                }
                keep_first(&mut entry.input_dtypes, TENSORS);
                entry
                    .input_dtypes
                    .iter_mut()
                    .for_each(|d| cut_text(d, NAME_BYTES));
                keep_first(&mut entry.top_frames, FRAMES);
                for frame in &mut entry.top_frames {
                    cut_text(&mut frame.name, NAME_BYTES);
                    cut_text(&mut frame.file, WORD_BYTES);
                }
            }
        }
    }
    (cut > 0).then(|| {
        format!(
            "unilab kept {COLLECTIVE_GROUPS} process groups and {COLLECTIVES_PENDING} pending collectives in the evidence: {cut} left out"
        )
    })
}

fn bound_verdict(end: &mut SoakEnd, findings: &mut Findings) {
    let mut left_out = Vec::new();
    let mut listed = |what: &str, all: usize, cut: usize| {
        if cut > 0 {
            left_out.push(format!("{cut} of the {all} {what}"));
        }
    };
    let all = end.leaked_processes.len();
    listed(
        "leaked processes",
        all,
        keep_first(&mut end.leaked_processes, LISTED),
    );
    let cmdline = CMDLINE_BYTES.min(CMDLINES_BYTES / end.leaked_processes.len().max(1));
    for leaked in &mut end.leaked_processes {
        cut_text(&mut leaked.name, NAME_BYTES);
        cut_cmdline(&mut leaked.cmdline, cmdline);
    }
    cut_tail(&mut end.stdout_tail, TAIL_BYTES);
    cut_tail(&mut end.stderr_tail, TAIL_BYTES);
    if let Some(child) = &mut findings.child {
        cut_text(&mut child.name, NAME_BYTES);
    }
    let all = findings.oom_kills.len();
    listed(
        "OOM kills",
        all,
        keep_first(&mut findings.oom_kills, LISTED),
    );
    for kill in &mut findings.oom_kills {
        cut_text(&mut kill.name, NAME_BYTES);
    }
    let all = findings.unkillable.len();
    listed(
        "unkillable processes",
        all,
        keep_first(&mut findings.unkillable, LISTED),
    );
    for process in &mut findings.unkillable {
        cut_text(&mut process.name, NAME_BYTES);
        cut_word(&mut process.wchan);
    }
    if let Some(release) = &mut findings.gpu_release {
        let all = release.gpus.len();
        listed("GPUs", all, keep_first(&mut release.gpus, SAMPLE_GPUS));
        for gpu in &mut release.gpus {
            cut_text(&mut gpu.uuid, WORD_BYTES);
        }
        let all = release.holders.len();
        listed("GPU holders", all, keep_first(&mut release.holders, LISTED));
        for holder in &mut release.holders {
            cut_text(&mut holder.name, NAME_BYTES);
            cut_text(&mut holder.path, WORD_BYTES);
        }
    }
    cut_text(&mut end.outcome.reason, REASON_BYTES);
    if !left_out.is_empty() {
        end.outcome.reason = format!(
            "{} (unilab's record leaves out {})",
            end.outcome.reason,
            left_out.join(", ")
        );
    }
}

/// Keeps the first `max` of `list`; how many it left out.
fn keep_first<T>(list: &mut Vec<T>, max: usize) -> usize {
    let cut = list.len().saturating_sub(max);
    list.truncate(max);
    cut
}

/// A list of notes (a sample's errors, the evidence's `unavailable`) cut to `max` entries of
/// [`LINE_BYTES`] each, then `added` (what the other budgets left out) after them.
fn bound_notes(notes: &mut Vec<String>, max: usize, what: &str, added: Vec<String>) {
    let all = notes.len();
    if keep_first(notes, max) > 0 {
        notes.push(format!("unilab kept the first {max} of {all} {what} here"));
    }
    for note in notes.iter_mut() {
        cut_text(note, LINE_BYTES);
    }
    notes.extend(added);
}

/// `text` cut to at most `max` bytes, ending with a note of how many were cut.
fn cut_text(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let room = max.saturating_sub(cut_note(text.len()).len());
    let keep = floor_char_boundary(text, room);
    let note = cut_note(text.len() - keep);
    text.truncate(keep);
    text.push_str(&note);
}

fn cut_word(word: &mut Option<String>) {
    if let Some(word) = word {
        cut_text(word, WORD_BYTES);
    }
}

fn cut_note(bytes: usize) -> String {
    format!(" [… {bytes} bytes cut by unilab]")
}

/// The largest char boundary of `text` at or below `at`.
fn floor_char_boundary(text: &str, at: usize) -> usize {
    (0..=at.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}

/// A command line cut to `budget` bytes (each argument counting [`ARG_OVERHEAD`] beside its
/// own), the last argument kept saying how many bytes of how many arguments were cut.
fn cut_cmdline(args: &mut Vec<String>, budget: usize) {
    let cost = |arg: &String| arg.len() + ARG_OVERHEAD;
    if args.iter().map(cost).sum::<usize>() <= budget {
        return;
    }
    let total: usize = args.iter().map(String::len).sum();
    // Room for the note, whatever it says.
    let mut room = budget.saturating_sub(cmdline_note(total, args.len()).len() + ARG_OVERHEAD);
    let mut kept = 0;
    let mut shortened = false;
    for arg in args.iter_mut() {
        if cost(arg) <= room {
            room -= cost(arg);
            kept += 1;
            continue;
        }
        if room > ARG_OVERHEAD {
            let keep = floor_char_boundary(arg, room - ARG_OVERHEAD);
            arg.truncate(keep);
            kept += 1;
            shortened = true;
        }
        break;
    }
    let cut_args = args.len() - kept + usize::from(shortened);
    args.truncate(kept);
    let cut = total - args.iter().map(String::len).sum::<usize>();
    args.push(cmdline_note(cut, cut_args));
}

fn cmdline_note(bytes: usize, args: usize) -> String {
    format!("[… {bytes} bytes of {args} arguments cut by unilab]")
}

/// An output tail cut to its last `max` bytes, after a line of how many were cut.
fn cut_tail(tail: &mut Vec<u8>, max: usize) {
    if tail.len() <= max {
        return;
    }
    let note = format!("[… {} bytes cut by unilab]\n", tail.len());
    let mut from = tail.len() - max.saturating_sub(note.len());
    // Not in the middle of a character.
    while from < tail.len() && tail[from] & 0xC0 == 0x80 {
        from += 1;
    }
    let note = format!("[… {from} bytes cut by unilab]\n");
    tail.drain(..from);
    tail.splice(0..0, note.into_bytes());
}

/// `n` processes of a tree, for tests: a sample's size is mostly its processes.
#[cfg(test)]
pub(crate) fn a_tree(n: usize) -> Vec<super::ProcessSample> {
    (0..n)
        .map(|i| super::ProcessSample {
            pid: 100 + i as u32,
            ppid: 100,
            start_ticks: 7,
            name: "python3".into(),
            state: 'S',
            rss_bytes: 1 << 30,
            cpu_ticks: i as u64,
            reaped_children_cpu_ticks: 0,
            threads: 4,
            open_fds: Some(9),
            read_bytes: None,
            write_bytes: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text over its budget keeps its start, on a character's boundary, and ends saying how many
    /// bytes were cut; within it, it is left as it was.
    #[test]
    fn text_over_its_budget_is_cut_with_a_note() {
        let mut short = "é".repeat(32);
        cut_text(&mut short, 64);
        assert_eq!(short, "é".repeat(32));
        let mut long = "é".repeat(100);
        cut_text(&mut long, 64);
        assert!(long.len() <= 64, "{long}");
        let kept = long.find(' ').unwrap();
        assert_eq!(
            &long[kept..],
            format!(" [… {} bytes cut by unilab]", 200 - kept)
        );
        assert_eq!(long[..kept], "é".repeat(kept / 2));
    }

    /// A command line over its budget keeps its first arguments whole, the next in part, and
    /// ends with an element saying how many bytes of how many arguments were cut.
    #[test]
    fn a_command_line_over_its_budget_ends_with_a_note() {
        let whole = vec!["python3".to_owned(), "train.py".to_owned()];
        let mut args = whole.clone();
        cut_cmdline(&mut args, 100);
        assert_eq!(args, whole);
        let mut args = whole.clone();
        args.extend([
            "--config".to_owned(),
            "x".repeat(10_000),
            "--resume".to_owned(),
        ]);
        cut_cmdline(&mut args, 1_000);
        let claimed: usize = args.iter().map(|a| a.len() + ARG_OVERHEAD).sum();
        assert!(claimed <= 1_000, "{claimed}");
        assert_eq!(args[..3], ["python3", "train.py", "--config"]);
        let kept = args[3].len();
        assert!(kept > 800 && args[3].bytes().all(|b| b == b'x'), "{kept}");
        assert_eq!(
            args[4],
            format!("[… {} bytes of 2 arguments cut by unilab]", 10_008 - kept)
        );
        assert_eq!(args.len(), 5);
    }

    /// An output tail over its budget keeps its end, after a line saying how much was cut.
    #[test]
    fn a_tail_over_its_budget_keeps_its_end() {
        let mut tail: Vec<u8> = (0..1_000u32)
            .flat_map(|i| format!("{i}\n").into_bytes())
            .collect();
        let all = tail.len();
        cut_tail(&mut tail, 100);
        assert!(tail.len() <= 100);
        let text = String::from_utf8(tail).unwrap();
        let (note, kept) = text.split_once('\n').unwrap();
        assert_eq!(
            note,
            format!("[… {} bytes cut by unilab]", all - kept.len())
        );
        assert!(kept.ends_with("998\n999\n"), "{kept}");
    }

    /// A sample of a tree past its budget keeps the first processes and their PSS (still one a
    /// process), and says in its errors how many it left out.
    #[test]
    fn a_sample_past_its_budget_says_what_it_left_out() {
        let Event::SoakSampled {
            sample,
            measures: Some(measures),
            ..
        } = Event::sampled(
            Sample {
                index: 0,
                elapsed_ms: 0,
                after_exit: false,
                processes: a_tree(SAMPLE_PROCESSES + 5),
                reaped_cpu_ticks: 0,
                gpus: None,
                progress: super::super::ProgressSignature::default(),
                sampler_cost_us: 0,
                errors: vec!["e".repeat(5_000); 70],
            },
            Measures {
                pss_bytes: vec![Some(1); SAMPLE_PROCESSES + 5],
                ..Measures::default()
            },
            None,
        )
        else {
            unreachable!()
        };
        assert_eq!(sample.processes.len(), SAMPLE_PROCESSES);
        assert_eq!(measures.pss_bytes.len(), SAMPLE_PROCESSES);
        assert_eq!(sample.errors.len(), SAMPLE_ERRORS + 2);
        assert!(
            sample.errors[..SAMPLE_ERRORS]
                .iter()
                .all(|e| e.len() <= LINE_BYTES)
        );
        assert_eq!(
            sample.errors[SAMPLE_ERRORS..],
            [
                "unilab kept the first 64 of 70 errors here".to_owned(),
                format!(
                    "unilab kept {SAMPLE_PROCESSES} of the tree's {} processes in this sample",
                    SAMPLE_PROCESSES + 5
                )
            ]
        );
    }
}
