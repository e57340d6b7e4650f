//! Process identity, and the only way unilab signals a process it found rather than spawned.
//!
//! A process is identified by `(pid, starttime)`, starttime being field 22 of `/proc/<pid>/stat`
//! in clock ticks since boot. Two processes that share a pid never share a start time, so a record
//! holding both still names the process it was taken from, or none. A record gives authority to
//! signal only while both match and the process belongs to the expected user; the signal goes
//! through a pidfd opened *before* that check, so a pid reused after the check is never hit.
//!
//! Elsewhere unilab signals only its own children that it has not reaped yet, whose pids cannot
//! be reused meanwhile: a tool's process group on its timeout or flood (`tool`, `gpu::stream`),
//! the command `mps exec` runs (SIGTERM passed on), the foreground daemon and the soak guard
//! (`Child::kill`), and the leash's tool through the pidfd it opened at the spawn. Asking whether
//! a pid exists (signal 0, `log::open`) sends nothing.

use std::path::PathBuf;

use crate::proc_read::{Blocked, ProcDir};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ProcessIdentity {
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat`: start time in clock ticks since boot.
    pub start_ticks: u64,
}

impl std::fmt::Display for ProcessIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} (started at tick {})", self.pid, self.start_ticks)
    }
}

/// The fields of `/proc/<pid>/stat` unilab uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: u32,
    pub comm: String,
    pub state: char,
    pub ppid: u32,
    pub pgrp: i32,
    pub session: i32,
    /// User and system time, in clock ticks.
    pub utime: u64,
    pub stime: u64,
    /// User and system time of the children it has waited for, in clock ticks.
    pub cutime: u64,
    pub cstime: u64,
    pub num_threads: u64,
    pub start_ticks: u64,
    /// Resident set size, in pages.
    pub rss_pages: u64,
    /// Field 52: the exit status as `waitpid` reports it, which means something for a zombie
    /// only; `None` where the kernel does not say (before 3.5) or hides it (another user's).
    pub exit_status: Option<i32>,
}

impl ProcStat {
    pub fn identity(&self) -> ProcessIdentity {
        ProcessIdentity {
            pid: self.pid,
            start_ticks: self.start_ticks,
        }
    }

    /// A zombie or dead process has exited: only its pid is left.
    pub fn has_exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }

    /// How a zombie exited — its code, or the signal that killed it — while its parent has not
    /// reaped it yet; `None` for a live process, or where the kernel does not say.
    pub(crate) fn exit(&self) -> Option<Exit> {
        let status = self.exit_status.filter(|_| self.state == 'Z')?;
        let signal = status & 0x7f;
        Some(if signal == 0 {
            Exit::Code((status >> 8) & 0xff)
        } else {
            Exit::Signal(signal)
        })
    }
}

/// How a process ended, as `waitpid` tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    Code(i32),
    Signal(i32),
}

/// `sysconf(_SC_CLK_TCK)`: the clock ticks a second that `/proc/<pid>/stat` counts CPU time and
/// start times in (100 where it cannot be read).
pub(crate) fn ticks_per_second() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|t| u64::try_from(t).ok())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

/// Parses `/proc/<pid>/stat`. `comm` may hold spaces and parentheses, so the fields are split
/// after the *last* `)`. `None` for anything that is not a well-formed stat line.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    if close < open {
        return None;
    }
    let pid = text[..open].trim().parse().ok()?;
    let comm = text[open + 1..close].to_owned();
    // Fields from 3 (state) on; field N is at index N - 3.
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let field = |n: usize| rest.get(n - 3).copied();
    let number = |n: usize| field(n).and_then(|f| f.parse::<u64>().ok());
    let signed = |n: usize| field(n).and_then(|f| f.parse::<i32>().ok());
    let mut state = field(3)?.chars();
    let state_char = state.next()?;
    if state.next().is_some() {
        return None;
    }
    Some(ProcStat {
        pid,
        comm,
        state: state_char,
        ppid: u32::try_from(number(4)?).ok()?,
        pgrp: signed(5)?,
        session: signed(6)?,
        utime: number(14)?,
        stime: number(15)?,
        cutime: field(16)?.parse::<i64>().ok()?.max(0).unsigned_abs(),
        cstime: field(17)?.parse::<i64>().ok()?.max(0).unsigned_abs(),
        num_threads: number(20)?,
        start_ticks: number(22)?,
        rss_pages: field(24)?.parse::<i64>().ok()?.max(0).unsigned_abs(),
        exit_status: signed(52),
    })
}

/// Where process facts come from: `/proc` on a real host; tests may substitute another.
pub(crate) trait ProcSource: Send + Sync {
    fn stat(&self, pid: u32) -> Option<ProcStat>;
    /// The real uid of the process.
    fn uid(&self, pid: u32) -> Option<u32>;
    /// Every process whose stat could be read, zombies included.
    fn all(&self) -> Vec<ProcStat>;
    /// The children of `pid`, zombies included.
    fn children(&self, pid: u32) -> Vec<ProcStat> {
        self.all().into_iter().filter(|s| s.ppid == pid).collect()
    }
    /// The processes of the tree under `root` (not `root` itself), parents before children.
    fn tree(&self, root: u32) -> Vec<ProcStat> {
        descendants(root, &self.all())
    }
    /// The command line; empty when it cannot be read (another user's process, or one gone),
    /// [`Blocked`] when the read did not return in time (its memory map is locked).
    fn cmdline(&self, pid: u32) -> Result<Vec<String>, Blocked>;
    /// The environment it started with (`NAME=value` entries); none when it cannot be read,
    /// [`Blocked`] when the read did not return in time.
    fn environ(&self, pid: u32) -> Result<Vec<Vec<u8>>, Blocked>;
    /// Where in the kernel it waits (`wchan`); `None` when it runs, or cannot be read.
    fn wchan(&self, pid: u32) -> Option<String>;
}

/// A process table in memory, for tests of the rules that read one.
#[cfg(test)]
#[derive(Debug, Clone, Default)]
pub(crate) struct FakeProc {
    processes: std::collections::HashMap<u32, (ProcStat, u32)>,
    cmdlines: std::collections::HashMap<u32, Vec<String>>,
    wchans: std::collections::HashMap<u32, String>,
}

#[cfg(test)]
impl FakeProc {
    /// Adds a process in `state` (`S`, `Z`, ...) owned by `uid`.
    pub(crate) fn with(mut self, identity: ProcessIdentity, state: char, uid: u32) -> Self {
        let stat = ProcStat {
            pid: identity.pid,
            comm: "fake".into(),
            state,
            ppid: 1,
            pgrp: 0,
            session: 0,
            utime: 0,
            stime: 0,
            cutime: 0,
            cstime: 0,
            num_threads: 1,
            start_ticks: identity.start_ticks,
            rss_pages: 0,
            exit_status: None,
        };
        self.processes.insert(identity.pid, (stat, uid));
        self
    }

    /// Makes `child` a child of `parent`.
    pub(crate) fn parent(mut self, child: u32, parent: u32) -> Self {
        if let Some((stat, _)) = self.processes.get_mut(&child) {
            stat.ppid = parent;
        }
        self
    }

    /// Gives `pid` a command line.
    pub(crate) fn cmdline_of(mut self, pid: u32, args: &[&str]) -> Self {
        self.cmdlines
            .insert(pid, args.iter().map(|a| (*a).to_owned()).collect());
        self
    }

    /// Puts `pid` in uninterruptible sleep in `wchan`.
    pub(crate) fn stuck_in(mut self, pid: u32, wchan: &str) -> Self {
        if let Some((stat, _)) = self.processes.get_mut(&pid) {
            stat.state = 'D';
        }
        self.wchans.insert(pid, wchan.to_owned());
        self
    }

    /// The process exits: it is a zombie until [`FakeProc::reap`].
    pub(crate) fn exit(&mut self, pid: u32) {
        if let Some((stat, _)) = self.processes.get_mut(&pid) {
            stat.state = 'Z';
        }
    }

    pub(crate) fn reap(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }
}

#[cfg(test)]
impl ProcSource for FakeProc {
    fn stat(&self, pid: u32) -> Option<ProcStat> {
        self.processes.get(&pid).map(|(stat, _)| stat.clone())
    }

    fn uid(&self, pid: u32) -> Option<u32> {
        self.processes.get(&pid).map(|(_, uid)| *uid)
    }

    fn all(&self) -> Vec<ProcStat> {
        let mut all: Vec<ProcStat> = self.processes.values().map(|(s, _)| s.clone()).collect();
        all.sort_by_key(|s| s.pid);
        all
    }

    fn cmdline(&self, pid: u32) -> Result<Vec<String>, Blocked> {
        Ok(self.cmdlines.get(&pid).cloned().unwrap_or_default())
    }

    fn environ(&self, _pid: u32) -> Result<Vec<Vec<u8>>, Blocked> {
        Ok(Vec::new())
    }

    fn wchan(&self, pid: u32) -> Option<String> {
        self.wchans.get(&pid).cloned()
    }
}

/// `/proc` of this host.
#[derive(Debug, Clone)]
pub(crate) struct SystemProc {
    root: PathBuf,
}

impl Default for SystemProc {
    fn default() -> Self {
        Self {
            root: PathBuf::from("/proc"),
        }
    }
}

impl SystemProc {
    /// The `/proc` directory of `pid`, for reads that need its memory map; `None` if it is gone.
    fn dir(&self, pid: u32) -> Option<ProcDir<'_>> {
        Some(ProcDir::new(&self.root, pid, self.stat(pid)?.start_ticks))
    }
}

impl ProcSource for SystemProc {
    fn stat(&self, pid: u32) -> Option<ProcStat> {
        let text = std::fs::read_to_string(self.root.join(pid.to_string()).join("stat")).ok()?;
        parse_stat(&text)
    }

    fn uid(&self, pid: u32) -> Option<u32> {
        let text = std::fs::read_to_string(self.root.join(pid.to_string()).join("status")).ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().next())
            .and_then(|real| real.parse().ok())
    }

    fn all(&self) -> Vec<ProcStat> {
        all_processes(&self.root)
    }

    fn tree(&self, root: u32) -> Vec<ProcStat> {
        tree(&self.root, root)
    }

    fn cmdline(&self, pid: u32) -> Result<Vec<String>, Blocked> {
        self.dir(pid).map_or(Ok(Vec::new()), |dir| dir.cmdline())
    }

    fn environ(&self, pid: u32) -> Result<Vec<Vec<u8>>, Blocked> {
        self.dir(pid)
            .map_or(Ok(Vec::new()), |dir| dir.entries("environ"))
    }

    fn wchan(&self, pid: u32) -> Option<String> {
        let text = std::fs::read_to_string(self.root.join(pid.to_string()).join("wchan")).ok()?;
        let wchan = text.trim();
        // `0` when it runs, empty where the kernel hides it.
        (!wchan.is_empty() && wchan != "0").then(|| wchan.to_owned())
    }
}

/// What a recorded identity names now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The same process, alive, of the expected user.
    Live,
    /// No process has the pid, or only a zombie is left.
    Gone,
    /// The pid belongs to a process with another start time.
    Reused { start_ticks: u64 },
    /// The same process, but it belongs to another user.
    NotOwned { uid: u32 },
}

pub(crate) fn liveness(proc: &dyn ProcSource, identity: ProcessIdentity, uid: u32) -> Liveness {
    let Some(stat) = proc.stat(identity.pid) else {
        return Liveness::Gone;
    };
    if stat.start_ticks != identity.start_ticks {
        return Liveness::Reused {
            start_ticks: stat.start_ticks,
        };
    }
    if stat.has_exited() {
        return Liveness::Gone;
    }
    match proc.uid(identity.pid) {
        Some(owner) if owner == uid => Liveness::Live,
        Some(owner) => Liveness::NotOwned { uid: owner },
        None => Liveness::Gone,
    }
}

/// The signals unilab sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    Terminate,
    Kill,
    /// The signal a soak's `--dump-signal` names, by number (one a process can catch).
    Dump(i32),
}

impl Signal {
    fn to_rustix(self) -> Option<rustix::process::Signal> {
        match self {
            Signal::Terminate => Some(rustix::process::Signal::TERM),
            Signal::Kill => Some(rustix::process::Signal::KILL),
            Signal::Dump(number) => rustix::process::Signal::from_named_raw(number),
        }
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Signal::Terminate => "SIGTERM",
            Signal::Kill => "SIGKILL",
            Signal::Dump(number) => {
                return match nix::sys::signal::Signal::try_from(*number) {
                    Ok(signal) => f.write_str(signal.as_str()),
                    Err(_) => write!(f, "signal {number}"),
                };
            }
        })
    }
}

/// Why a signal was not sent.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    #[error(
        "{identity} is no longer the process unilab recorded ({liveness:?}); nothing was signalled"
    )]
    NotThatProcess {
        identity: ProcessIdentity,
        liveness: Liveness,
    },
    #[error("cannot signal {identity}")]
    Failed {
        identity: ProcessIdentity,
        #[source]
        source: std::io::Error,
    },
}

/// Sends `signal` to the process `identity` names, if and only if it is still that process and
/// belongs to `uid`. The pidfd is opened first and the identity checked after, so the signal
/// reaches the checked process even if the pid is reused in between.
pub(crate) fn signal(
    proc: &dyn ProcSource,
    identity: ProcessIdentity,
    uid: u32,
    signal: Signal,
) -> Result<(), SignalError> {
    let not_that = |liveness| SignalError::NotThatProcess { identity, liveness };
    let pid = i32::try_from(identity.pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or(not_that(Liveness::Gone))?;
    let pidfd = match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::SRCH) => return Err(not_that(Liveness::Gone)),
        Err(e) => {
            return Err(SignalError::Failed {
                identity,
                source: e.into(),
            });
        }
    };
    match liveness(proc, identity, uid) {
        Liveness::Live => {}
        other => return Err(not_that(other)),
    }
    let Some(sent) = signal.to_rustix() else {
        return Err(SignalError::Failed {
            identity,
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        });
    };
    match rustix::process::pidfd_send_signal(&pidfd, sent) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::SRCH) => Err(not_that(Liveness::Gone)),
        Err(e) => Err(SignalError::Failed {
            identity,
            source: e.into(),
        }),
    }
}

/// Waits up to `timeout` for the process to exit (gone, a zombie, or its pid reused). Returns
/// whether it did.
pub(crate) fn wait_for_exit(
    proc: &dyn ProcSource,
    identity: ProcessIdentity,
    timeout: std::time::Duration,
) -> bool {
    crate::time::poll_until(timeout, std::time::Duration::from_millis(20), || match proc
        .stat(identity.pid)
    {
        None => true,
        Some(stat) => stat.start_ticks != identity.start_ticks || stat.has_exited(),
    })
}

/// Reaps `pid`, a child of this process, if it has exited; never waits. A child's pid is not
/// reused before it is reaped, so this names exactly that process.
pub(crate) fn reap(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::wait::waitpid(
            nix::unistd::Pid::from_raw(pid),
            Some(nix::sys::wait::WaitPidFlag::WNOHANG),
        );
    }
}

/// Every process on the host whose stat could be read, for building trees.
pub fn all_processes(proc_root: &std::path::Path) -> Vec<ProcStat> {
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter_map(|pid| {
            std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat"))
                .ok()
                .and_then(|text| parse_stat(&text))
        })
        .collect()
}

/// Reads a small `/proc` file into `buf` with one open and no `stat` (std's `read_to_string`
/// asks for the size first, which `/proc` cannot answer anyway). `None` if it cannot be read.
pub(crate) fn read_proc_file<'b>(path: &std::path::Path, buf: &'b mut Vec<u8>) -> Option<&'b str> {
    use std::io::Read;
    buf.clear();
    let mut file = std::fs::File::open(path).ok()?;
    let mut chunk = [0u8; 4096];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => return None,
        }
    }
    std::str::from_utf8(buf).ok()
}

/// The children of one process: from each of its threads' `children` file (a thread may fork).
/// A single-threaded process has one, so its task directory need not be listed.
fn children_of(proc_root: &std::path::Path, stat: &ProcStat, buf: &mut Vec<u8>) -> Vec<u32> {
    let task_dir = proc_root.join(stat.pid.to_string()).join("task");
    let tasks: Vec<std::path::PathBuf> = if stat.num_threads <= 1 {
        vec![task_dir.join(stat.pid.to_string())]
    } else {
        std::fs::read_dir(&task_dir)
            .map(|entries| entries.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    let mut children = Vec::new();
    for task in tasks {
        if let Some(text) = read_proc_file(&task.join("children"), buf) {
            children.extend(
                text.split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    children
}

/// The processes of the tree under `root` (not `root` itself), parents before children: walked
/// down through the kernel's `children` files where it has them (reading only the tree), else
/// found by scanning every process.
pub(crate) fn tree(proc_root: &std::path::Path, root: u32) -> Vec<ProcStat> {
    let mut buf = Vec::with_capacity(4096);
    let stat_of = |pid: u32, buf: &mut Vec<u8>| {
        read_proc_file(&proc_root.join(pid.to_string()).join("stat"), buf).and_then(parse_stat)
    };
    let Some(root_stat) = stat_of(root, &mut buf) else {
        return Vec::new();
    };
    let probe = proc_root
        .join(root.to_string())
        .join("task")
        .join(root.to_string())
        .join("children");
    if !probe.exists() {
        return descendants(root, &all_processes(proc_root));
    }
    let mut found: Vec<ProcStat> = Vec::new();
    let mut seen = std::collections::HashSet::from([root]);
    let mut queue = std::collections::VecDeque::from([root_stat]);
    while let Some(parent) = queue.pop_front() {
        for child in children_of(proc_root, &parent, &mut buf) {
            if !seen.insert(child) {
                continue;
            }
            // Gone between the two reads, or re-parented: not part of the tree any more.
            if let Some(stat) = stat_of(child, &mut buf).filter(|s| s.ppid == parent.pid) {
                found.push(stat.clone());
                queue.push_back(stat);
            }
        }
    }
    found
}

/// The descendants of `root` (not `root` itself) among `processes`, parents before children.
pub fn descendants(root: u32, processes: &[ProcStat]) -> Vec<ProcStat> {
    let mut children: std::collections::HashMap<u32, Vec<&ProcStat>> =
        std::collections::HashMap::new();
    for p in processes {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut found = Vec::new();
    // A pid cannot be its own ancestor; guard against a table read mid-change anyway.
    let mut seen = std::collections::HashSet::from([root]);
    let mut queue = std::collections::VecDeque::from([root]);
    while let Some(pid) = queue.pop_front() {
        for child in children.get(&pid).into_iter().flatten() {
            if seen.insert(child.pid) {
                found.push((*child).clone());
                queue.push_back(child.pid);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comm_with_spaces_and_parentheses_is_split_at_the_last_paren() {
        let line = "4242 (evil) (name ) S 1 4242 4242 0 -1 4194560 100 0 0 0 17 3 0 0 20 0 7 0 987654 1000000 250 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let stat = parse_stat(line).unwrap();
        assert_eq!(stat.pid, 4242);
        assert_eq!(stat.comm, "evil) (name ");
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.ppid, 1);
        assert_eq!(stat.utime, 17);
        assert_eq!(stat.stime, 3);
        assert_eq!(stat.num_threads, 7);
        assert_eq!(stat.start_ticks, 987_654);
        assert_eq!(stat.rss_pages, 250);
        assert_eq!(stat.exit(), None, "a line without field 52");
    }

    #[test]
    fn a_zombies_exit_is_read_from_field_52() {
        let fields = |state: char, status: i32| {
            let mut line = format!("7 (worker) {state}");
            for n in 4..=51 {
                line.push_str(&format!(" {}", if n == 22 { 500 } else { 1 }));
            }
            format!("{line} {status}")
        };
        assert_eq!(
            parse_stat(&fields('Z', 3 << 8)).unwrap().exit(),
            Some(Exit::Code(3))
        );
        assert_eq!(
            parse_stat(&fields('Z', 9)).unwrap().exit(),
            Some(Exit::Signal(9))
        );
        assert_eq!(
            parse_stat(&fields('S', 3 << 8)).unwrap().exit(),
            None,
            "alive"
        );
    }

    #[test]
    fn malformed_stat_lines_are_refused() {
        for line in [
            "",
            "12",
            "12 (x",
            "x (y) S 1",
            "12 (x) S",
            "12 (x) SS 1 2 3",
        ] {
            assert_eq!(parse_stat(line), None, "{line:?}");
        }
    }

    #[test]
    fn both_ways_of_walking_a_tree_agree() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30 & (sleep 30 &) ; wait"])
            .spawn()
            .unwrap();
        let root = child.id();
        let proc_root = std::path::Path::new("/proc");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        // Settled once the subshell has forked its orphan and exited: two `sleep`s, nothing else.
        let settled = |t: Vec<ProcStat>| t.len() == 2 && t.iter().all(|p| p.comm == "sleep");
        while !settled(tree(proc_root, root)) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut by_children: Vec<u32> = tree(proc_root, root).iter().map(|s| s.pid).collect();
        assert!(proc_root.join("self/task").exists());
        let mut by_scan: Vec<u32> = descendants(root, &all_processes(proc_root))
            .iter()
            .map(|s| s.pid)
            .collect();
        by_children.sort_unstable();
        by_scan.sort_unstable();
        for pid in by_scan.iter().chain(&by_children) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid as i32),
                nix::sys::signal::SIGKILL,
            );
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(by_children.len(), 2, "{by_children:?}");
        assert_eq!(by_children, by_scan);
    }

    const RECORDED: ProcessIdentity = ProcessIdentity {
        pid: 4242,
        start_ticks: 100,
    };

    #[test]
    fn a_recorded_identity_is_live_only_while_pid_start_time_and_owner_all_match() {
        let cases = [
            (FakeProc::default(), Liveness::Gone),
            (
                FakeProc::default().with(RECORDED, 'Z', 1000),
                Liveness::Gone,
            ),
            (
                FakeProc::default().with(
                    ProcessIdentity {
                        start_ticks: 101,
                        ..RECORDED
                    },
                    'S',
                    1000,
                ),
                Liveness::Reused { start_ticks: 101 },
            ),
            (
                FakeProc::default().with(RECORDED, 'S', 0),
                Liveness::NotOwned { uid: 0 },
            ),
            (
                FakeProc::default().with(RECORDED, 'S', 1000),
                Liveness::Live,
            ),
        ];
        for (proc, expected) in cases {
            assert_eq!(liveness(&proc, RECORDED, 1000), expected);
        }
    }

    #[test]
    fn a_reused_pid_counts_as_exited_for_a_waiter() {
        let reused = FakeProc::default().with(
            ProcessIdentity {
                start_ticks: 999,
                ..RECORDED
            },
            'S',
            1000,
        );
        assert!(wait_for_exit(&reused, RECORDED, std::time::Duration::ZERO));
        let live = FakeProc::default().with(RECORDED, 'R', 1000);
        assert!(!wait_for_exit(&live, RECORDED, std::time::Duration::ZERO));
    }

    #[test]
    fn our_own_process_is_live_and_signalling_a_reused_pid_is_refused() {
        let proc = SystemProc::default();
        let me = proc.stat(std::process::id()).unwrap();
        let uid = nix::unistd::getuid().as_raw();
        assert_eq!(liveness(&proc, me.identity(), uid), Liveness::Live);
        let other_start = ProcessIdentity {
            start_ticks: me.start_ticks + 1,
            ..me.identity()
        };
        assert!(matches!(
            liveness(&proc, other_start, uid),
            Liveness::Reused { .. }
        ));
        // Sending to a process with our pid but another start time must not reach us.
        let err = signal(&proc, other_start, uid, Signal::Kill).unwrap_err();
        assert!(matches!(err, SignalError::NotThatProcess { .. }));
        assert!(matches!(
            liveness(&proc, me.identity(), uid + 1),
            Liveness::NotOwned { .. }
        ));
    }
}
