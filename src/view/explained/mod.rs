//! The evidence of a failed soak and what its verdict found, in words: which processes, in what
//! state, where they wait (their threads grouped by where, the first frames of their stacks),
//! the memory cgroup, the kernel's lines and what could not be captured; then the child whose
//! failure failed the soak, the OOM kills, what no signal ended and the GPUs not given back.
//! `soak show` prints these lines, the report lays them out, `history` says the evidence in one.
//!
//! Two invariants: every piece of text taken from the record is made safe to repeat on one line
//! ([`foreign`]), so a renderer only lays lines out (and escapes them for HTML); and what is
//! said is bounded whatever the record holds — a tree of 500 processes, 400 threads in one
//! place, a stack of 10,000 frames or one line of a megabyte say a few lines and how many more
//! there are (the artifact keeps them all).

use std::cmp::Reverse;
use std::collections::BTreeMap;

use crate::event::soak::{FailureKind, JobAlarm};
use crate::read::shown::{EvidenceShown, Found, ProcessShown, ThreadShown};
use crate::read::signature::group::{self, Grouping};
use crate::text::{bytes, count, foreign, human_time};

/// The processes described, at most; those in uninterruptible sleep, stopped or zombie, and
/// those holding a GPU, are chosen first.
const MAX_PROCESSES: usize = 6;
/// The lines that say where a process's threads are, at most, besides its main thread.
const MAX_THREAD_GROUPS: usize = 6;
/// The distinct thread names a group lists, at most.
const MAX_THREAD_NAMES: usize = 3;
/// The first frames of a kernel stack shown.
const KERNEL_FRAMES: usize = 8;
/// The first lines of a Python stack shown.
const PYTHON_LINES: usize = 16;
/// The most recent kernel lines shown.
const KERNEL_MESSAGES: usize = 5;
/// The entries of a list (OOM kills, stuck processes, GPUs and their holders, what could not
/// be captured) told, at most.
const MAX_LISTED: usize = 6;
/// The last lines of each output stream shown.
const TAIL_LINES: usize = 10;
/// The processes named in the one line of `history`, at most.
const BRIEF_PROCESSES: usize = 4;
/// The characters of one line of text from the record kept; longer ones are cut with `…`.
const LINE_CHARS: usize = 200;
/// The characters of a name (of a process, a thread, a wait channel) kept.
const NAME_CHARS: usize = 48;

/// What a person is told of a soak's evidence and findings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Explained {
    /// The capture made when another rank of its job raised the alarm, when one was.
    pub job_evidence: Option<EvidenceExplained>,
    /// The evidence captured before the first signal, when it was.
    pub evidence: Option<EvidenceExplained>,
    /// What the verdict found, each with its label: `job`, `child`, `OOM kill`, `stuck`.
    pub findings: Vec<(&'static str, String)>,
    /// GPUs not given back and processes still holding a GPU device.
    pub warnings: Vec<String>,
}

/// The evidence, line by line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EvidenceExplained {
    /// How many processes, what for and when: `2 processes captured before stopping for
    /// stale_progress at …`.
    pub summary: String,
    /// Where the tree's ranks stood, when it holds several: `rank 2 is in `load_batch`
    /// (data.py:88); 3 ranks wait in `all_reduce` (dist.py:41)`.
    pub ranks: Option<String>,
    pub processes: Vec<ProcessExplained>,
    /// Says how many captured processes are not described here, when some are not.
    pub more_processes: Option<String>,
    /// `v2 /user.slice/…, limit 16.0 GiB, 0 OOM kills`.
    pub cgroup: Option<String>,
    /// The most recent kernel lines, each with its time, after a line that says how many
    /// earlier ones are left out (when some are).
    pub kernel_messages: Vec<String>,
    /// What could not be captured, and why; then how many more reasons there are.
    pub unavailable: Vec<String>,
}

/// One process of the evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcessExplained {
    /// `pid 5000 python3: sleeping, 40 threads, holds a GPU device`.
    pub title: String,
    /// Its command line as a shell takes it back; empty when none was read.
    pub command: String,
    /// Where its threads are: the main thread first, then the others grouped by where.
    pub threads: Vec<String>,
    /// The first frames of its kernel stack (none when it was not read, or empty).
    pub kernel_stack: Option<Excerpt>,
    /// The first lines of what `py-spy dump` printed for it (none when nothing was).
    pub python_stack: Option<Excerpt>,
}

/// Some lines of a longer text, and a line that says what was left out (when something was).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Excerpt {
    pub lines: Vec<String>,
    pub left_out: Option<String>,
}

impl Explained {
    pub(crate) fn of(found: &Found) -> Self {
        let outcome = &found.outcome;
        let mut findings: Vec<(&'static str, String)> = outcome
            .job_alarm
            .as_ref()
            .map(|alarm| ("job", job_alarm(alarm)))
            .into_iter()
            .collect();
        if let Some(child) = &outcome.child {
            let how = match (child.exit.code, child.exit.signal) {
                (Some(code), _) => format!("exited with code {code}"),
                (None, Some(signal)) => format!("was killed by signal {signal}"),
                _ => "ended".to_owned(),
            };
            findings.push((
                "child",
                format!(
                    "{} {how} while the command ran",
                    pid_name(child.pid, &child.name)
                ),
            ));
        }
        let killed = bounded(outcome.oom_kills.iter().collect(), |kill| {
            let seen = match kill.source.as_str() {
                "cgroup" => "the cgroup's oom_kill count grew".to_owned(),
                "kmsg" => "named in the kernel's log".to_owned(),
                other => name(other),
            };
            format!(
                "{} killed by the kernel's OOM killer ({seen})",
                pid_name(kill.pid, &kill.name)
            )
        });
        findings.extend(killed.map(|line| ("OOM kill", line)));
        let stuck = bounded(outcome.unkillable.iter().collect(), |stuck| {
            let at = stuck
                .wchan
                .as_deref()
                .map(|w| format!(" in `{}`", name(w)))
                .unwrap_or_default();
            format!(
                "{} in {}{at}: no signal ended it{}",
                pid_name(stuck.pid, &stuck.name),
                state_name(stuck.state),
                if stuck.state == 'D' {
                    "; the host may need a reset"
                } else {
                    ""
                }
            )
        });
        findings.extend(stuck.map(|line| ("stuck", line)));
        let mut warnings = Vec::new();
        if let Some(release) = &found.gpu_release {
            let kept = release.gpus.iter().filter(|g| g.released == Some(false));
            warnings.extend(bounded(kept.collect(), |gpu| {
                let mib = |m: Option<u64>| m.map_or("unknown".to_owned(), |m| format!("{m} MiB"));
                format!(
                    "GPU {} was not given back: {} used after the soak, {} before",
                    name(&gpu.uuid),
                    mib(gpu.memory_used_after_mib),
                    mib(gpu.memory_used_before_mib)
                )
            }));
            if !release.holders.is_empty() {
                let listed: Vec<String> = release
                    .holders
                    .iter()
                    .take(MAX_LISTED)
                    .map(|h| format!("{} ({})", pid_name(h.pid, &h.name), clip(&h.path)))
                    .collect();
                let more = release.holders.len().saturating_sub(MAX_LISTED);
                warnings.push(format!(
                    "{} still {} a GPU device: {}{}",
                    count(release.holders.len() as u64, "process"),
                    if release.holders.len() == 1 {
                        "holds"
                    } else {
                        "hold"
                    },
                    listed.join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                ));
            }
        }
        Self {
            job_evidence: found.job_evidence.as_ref().map(EvidenceExplained::of),
            evidence: found.evidence.as_ref().map(EvidenceExplained::of),
            findings,
            warnings,
        }
    }

    /// Whether there is nothing to tell: no evidence, no finding, no warning.
    pub(crate) fn is_empty(&self) -> bool {
        self.job_evidence.is_none()
            && self.evidence.is_none()
            && self.findings.is_empty()
            && self.warnings.is_empty()
    }
}

/// The alarm of the rank that failed the job: `rank 2 of job `ring` on n2 failed first
/// (stale_progress): …`.
fn job_alarm(alarm: &JobAlarm) -> String {
    format!(
        "rank {} of job `{}` on {} failed first ({}): {}",
        alarm.rank.map_or_else(|| "?".to_owned(), |r| r.to_string()),
        name(&alarm.job),
        name(&alarm.host),
        name(&alarm.failure_kind),
        clip(&alarm.reason)
    )
}

impl EvidenceExplained {
    fn of(evidence: &EvidenceShown) -> Self {
        let processes = &evidence.processes;
        // The processes most likely to say why, first; then told in the tree's order.
        let mut chosen: Vec<usize> = (0..processes.len()).collect();
        chosen.sort_by_key(|&i| (!telling(&processes[i]), i));
        chosen.truncate(MAX_PROCESSES);
        chosen.sort_unstable();
        let more = processes.len() - chosen.len();
        let cgroup = evidence.cgroup.as_ref().map(|c| {
            format!(
                "v{} {}, {}, {}",
                c.version,
                clip(&c.path),
                c.memory_max_bytes
                    .map_or("no limit".to_owned(), |m| format!("limit {}", bytes(m))),
                c.oom_kill_count
                    .map_or("OOM kills unknown".to_owned(), |n| count(n, "OOM kill"))
            )
        });
        let messages = &evidence.kernel_messages;
        let earlier = messages.len().saturating_sub(KERNEL_MESSAGES);
        let kernel_messages = (earlier > 0)
            .then(|| format!("… {}", count(earlier as u64, "earlier line")))
            .into_iter()
            .chain(
                messages[earlier..]
                    .iter()
                    .map(|m| format!("{} {}", human_time(micros(m.at)), clip(&m.line))),
            )
            .collect();
        let unavailable = bounded(evidence.unavailable.iter().collect(), |u| clip(u)).collect();
        let when = if evidence.trigger == FailureKind::JobAlarm.as_str() {
            "when its job's alarm was seen".to_owned()
        } else {
            format!("before stopping for {}", name(&evidence.trigger))
        };
        let grouping = Grouping {
            groups: evidence.groups.clone().unwrap_or_default(),
            odd_ranks: evidence.odd_ranks.clone().unwrap_or_default(),
        };
        let ranked: usize = grouping.groups.iter().map(|g| g.ranks.len()).sum();
        Self {
            summary: format!(
                "{} captured {when} at {}",
                count(processes.len() as u64, "process"),
                human_time(micros(evidence.captured_at))
            ),
            // What a rank's frames say is the record's text: one line each, bounded.
            // The collective a rank never entered names it before the stacks do.
            ranks: match &evidence.collective {
                Some(stalled) => Some(clip(&stalled.sentence())),
                None => (ranked > 1)
                    .then(|| group::verdict(&grouping, &|_| None))
                    .flatten()
                    .map(|v| clip(&v)),
            },
            processes: chosen
                .into_iter()
                .map(|i| ProcessExplained::of(&processes[i]))
                .collect(),
            more_processes: (more > 0).then(|| {
                format!(
                    "… {} (`unilab soak export` has them all)",
                    count(more as u64, "more process")
                )
            }),
            cgroup,
            kernel_messages,
            unavailable,
        }
    }
}

/// What `say` says of the first [`MAX_LISTED`] items, then a line that says how many more
/// there are.
fn bounded<T>(items: Vec<T>, say: impl Fn(T) -> String) -> impl Iterator<Item = String> {
    let more = items.len().saturating_sub(MAX_LISTED);
    items
        .into_iter()
        .take(MAX_LISTED)
        .map(say)
        .chain((more > 0).then(|| format!("… {more} more")))
}

/// Whether a process is likely to say why the soak failed: it or a thread of it is stuck,
/// stopped or dead, or it holds a GPU.
fn telling(process: &ProcessShown) -> bool {
    let odd = |state: char| matches!(state, 'D' | 'T' | 't' | 'Z');
    odd(process.state) || process.threads.iter().any(|t| odd(t.state)) || process.holds_gpu_device
}

impl ProcessExplained {
    fn of(process: &ProcessShown) -> Self {
        let mut title = format!(
            "{}: {}",
            pid_name(process.pid, &process.name),
            state_name(process.state)
        );
        if process.threads.len() > 1 {
            title.push_str(&format!(
                ", {}",
                count(process.threads.len() as u64, "thread")
            ));
        }
        if process.holds_gpu_device {
            title.push_str(", holds a GPU device");
        }
        let command = crate::text::shell_command(&process.cmdline);
        Self {
            title,
            command: clip(&command),
            threads: thread_lines(process),
            kernel_stack: process
                .kernel_stack
                .as_deref()
                .and_then(|s| excerpt(s, KERNEL_FRAMES, "frame", kernel_frame)),
            python_stack: process
                .python_stack
                .as_deref()
                .and_then(|s| excerpt(python_threads(s), PYTHON_LINES, "line", |l| l)),
        }
    }
}

/// The first `keep` lines of `text` (each as `frame` makes it), and how many more there were,
/// counted in `unit`s; `None` for a text with nothing in it.
fn excerpt<'a>(
    text: &'a str,
    keep: usize,
    unit: &str,
    frame: fn(&'a str) -> &'a str,
) -> Option<Excerpt> {
    let text = text.trim_matches(['\n', '\r']);
    if text.trim().is_empty() {
        return None;
    }
    let mut kept = Vec::new();
    let mut more = 0_u64;
    for line in text.lines() {
        if kept.len() < keep {
            kept.push(clip(frame(line.trim_end())));
        } else {
            more += 1;
        }
    }
    Some(Excerpt {
        lines: kept,
        left_out: (more > 0).then(|| format!("… {}", count(more, &format!("more {unit}")))),
    })
}

/// What `py-spy dump` printed from its first thread on: the lines before (the process and the
/// interpreter) say what the process's own lines say already.
fn python_threads(text: &str) -> &str {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with("Thread ") {
            return &text[at..];
        }
        at += line.len();
    }
    text
}

/// A line of `/proc/<pid>/stack` without its address (`[<0>] futex_wait+0x1/0x2` →
/// `futex_wait+0x1/0x2`): the kernel hides it from most readers anyway.
fn kernel_frame(line: &str) -> &str {
    match line.trim_start().strip_prefix("[<") {
        Some(rest) => rest.split_once(">]").map_or(line, |(_, f)| f.trim_start()),
        None => line,
    }
}

/// Where a process's threads are: its main thread, then the others grouped by state, system
/// call and wait channel, the stuck first and then the largest groups, each naming a few of
/// its threads when they are not all named as the process.
fn thread_lines(process: &ProcessShown) -> Vec<String> {
    if process.threads.is_empty() {
        return vec!["no thread could be read".to_owned()];
    }
    let mut lines = Vec::new();
    if let Some(main) = process.threads.iter().find(|t| t.tid == process.pid) {
        let who = if main.name == process.name {
            "main thread".to_owned()
        } else {
            format!("main thread ({})", name(&main.name))
        };
        lines.push(thread_line(&who, main, ""));
    }
    // Keyed by where, in the order first seen; each with its threads.
    type Place<'a> = (char, Option<&'a str>, Option<&'a str>);
    let mut groups: BTreeMap<Place<'_>, (usize, Vec<&ThreadShown>)> = BTreeMap::new();
    for (i, thread) in process
        .threads
        .iter()
        .filter(|t| t.tid != process.pid)
        .enumerate()
    {
        let place = (
            thread.state,
            thread.syscall.as_deref(),
            thread.wchan.as_deref(),
        );
        groups
            .entry(place)
            .or_insert((i, Vec::new()))
            .1
            .push(thread);
    }
    let mut groups: Vec<(usize, Vec<&ThreadShown>)> = groups.into_values().collect();
    groups
        .sort_by_key(|(first, threads)| (threads[0].state != 'D', Reverse(threads.len()), *first));
    let others = groups.len().saturating_sub(MAX_THREAD_GROUPS);
    let left: usize = groups
        .iter()
        .skip(MAX_THREAD_GROUPS)
        .map(|(_, t)| t.len())
        .sum();
    for (_, threads) in groups.iter().take(MAX_THREAD_GROUPS) {
        let mut names: Vec<&str> = Vec::new();
        for t in threads {
            if !names.contains(&t.name.as_str()) {
                names.push(&t.name);
            }
        }
        let named = if names.iter().all(|n| *n == process.name) {
            String::new()
        } else {
            let shown: Vec<String> = names
                .iter()
                .take(MAX_THREAD_NAMES)
                .map(|n| name(n))
                .collect();
            let more = names.len().saturating_sub(MAX_THREAD_NAMES);
            format!(
                " — {}{}",
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more names")
                } else {
                    String::new()
                }
            )
        };
        lines.push(thread_line(
            &count(threads.len() as u64, "thread"),
            threads[0],
            &named,
        ));
    }
    if others > 0 {
        lines.push(format!(
            "… {} in {} other places",
            count(left as u64, "thread"),
            others
        ));
    }
    lines
}

/// `main thread in futex (futex_wait_queue): sleeping`, `2 threads: running`.
fn thread_line(who: &str, thread: &ThreadShown, named: &str) -> String {
    let place = place(thread.syscall.as_deref(), thread.wchan.as_deref());
    let at = if place.is_empty() {
        String::new()
    } else {
        format!(" {place}")
    };
    format!("{who}{at}: {}{named}", state_name(thread.state))
}

/// Where a thread waits: `in futex (futex_wait_queue)`, `in ioctl`, `at nv_wait`; nothing for
/// one running or unread.
fn place(syscall: Option<&str>, wchan: Option<&str>) -> String {
    let syscall = syscall.filter(|s| !matches!(*s, "running" | "none"));
    match (syscall, wchan) {
        (Some(call), Some(wchan)) => format!("in {} ({})", name(call), name(wchan)),
        (Some(call), None) => format!("in {}", name(call)),
        (None, Some(wchan)) => format!("at {}", name(wchan)),
        (None, None) => String::new(),
    }
}

/// A process or thread state as `/proc` spells it, in words.
pub(crate) fn state_name(state: char) -> String {
    match state {
        'R' => "running".to_owned(),
        'S' => "sleeping".to_owned(),
        'D' => "uninterruptible sleep".to_owned(),
        'Z' => "zombie".to_owned(),
        'T' => "stopped".to_owned(),
        't' => "stopped by a tracer".to_owned(),
        'X' | 'x' => "dead".to_owned(),
        'I' => "idle".to_owned(),
        'P' => "parked".to_owned(),
        other => format!("state {}", foreign(&other.to_string())),
    }
}

/// One thread as the one line of `history` needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ThreadAt<'a> {
    pub tid: u32,
    pub state: char,
    pub syscall: Option<&'a str>,
    pub wchan: Option<&'a str>,
}

/// One process as the one line of `history` needs it.
#[derive(Debug, Clone)]
pub(crate) struct ProcessAt<'a> {
    pub pid: u32,
    pub name: &'a str,
    pub state: char,
    pub threads: Vec<ThreadAt<'a>>,
}

/// The evidence in one line: `evidence before stopping for stale_progress: 2 processes
/// (python3 S in futex, python3 D in nv_wait)`. Each process is told by the thread that says
/// most: one in uninterruptible sleep (the main thread first), else the main thread.
pub(crate) fn one_line_evidence(trigger: &str, processes: &[ProcessAt<'_>]) -> String {
    let told: Vec<String> = processes
        .iter()
        .take(BRIEF_PROCESSES)
        .map(|p| {
            let main = p.threads.iter().find(|t| t.tid == p.pid);
            let stuck = main
                .filter(|t| t.state == 'D')
                .or_else(|| p.threads.iter().find(|t| t.state == 'D'));
            let Some(thread) = stuck.or(main).or(p.threads.first()) else {
                return format!("{} {}", name(p.name), letter(p.state));
            };
            // Where a thread in uninterruptible sleep waits is its wait channel; for the others
            // the system call says more.
            let syscall = thread.syscall.filter(|s| !matches!(*s, "running" | "none"));
            let at = if thread.state == 'D' {
                thread.wchan.or(syscall)
            } else {
                syscall.or(thread.wchan)
            };
            format!(
                "{} {}{}",
                name(p.name),
                letter(thread.state),
                at.map(|at| format!(" in {}", name(at))).unwrap_or_default()
            )
        })
        .collect();
    let more = processes.len().saturating_sub(BRIEF_PROCESSES);
    let listed = if told.is_empty() {
        String::new()
    } else {
        format!(
            " ({}{})",
            told.join(", "),
            if more > 0 {
                format!(", {more} more")
            } else {
                String::new()
            }
        )
    };
    format!(
        "evidence before stopping for {}: {}{listed}",
        name(trigger),
        count(processes.len() as u64, "process")
    )
}

/// The last lines of an output tail, the most recent last: after a failure they matter most.
pub(crate) fn last_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..].to_vec()
}

/// A state's letter, safe to print.
fn letter(state: char) -> String {
    foreign(&state.to_string()).into_owned()
}

/// `pid 5000 python3`.
fn pid_name(pid: u32, process: &str) -> String {
    format!("pid {pid} {}", name(process))
}

/// A name from the record, on one line and short.
fn name(text: &str) -> String {
    clip_to(text, NAME_CHARS)
}

/// A line of text from the record, on one line and bounded.
fn clip(text: &str) -> String {
    clip_to(text, LINE_CHARS)
}

fn clip_to(text: &str, chars: usize) -> String {
    let mut cut: String = text.chars().take(chars).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    foreign(&cut).into_owned()
}

/// Unix seconds, as the artifact holds them, in microseconds.
fn micros(seconds: f64) -> i64 {
    (seconds * 1e6).round() as i64
}

#[cfg(test)]
mod tests;
