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
//!
//! Here: identity, a process's `stat`, and [`ProcSource`], what reads `/proc` (the host's, or a
//! the shared fake `/proc` in tests, through `fake`); `signal` (liveness, signals, reaping) and `walk` (process
//! trees) beside it.

#[cfg(test)]
mod fake;
mod kept;
mod signal;
mod walk;

use std::path::PathBuf;

use crate::proc_read::{Blocked, ProcDir};
use serde::{Deserialize, Serialize};

pub(crate) use kept::KeptTree;
pub use signal::{Liveness, SignalError};
pub(crate) use signal::{Signal, liveness, parse_dump_signal, reap, signal, wait_for_exit};
pub use walk::{all_processes, descendants};
pub(crate) use walk::{read_proc_file, tree};

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
    pub(crate) fn exit(&self) -> Option<WaitExit> {
        let status = self.exit_status.filter(|_| self.state == 'Z')?;
        let signal = status & 0x7f;
        Some(if signal == 0 {
            WaitExit::Code((status >> 8) & 0xff)
        } else {
            WaitExit::Signal(signal)
        })
    }
}

/// How a process ended, as `waitpid` tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitExit {
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
    // Fields 3 (state) to 52; field N is at index N - 3. On the stack: a soak parses every
    // process's stat every sample.
    let mut rest = [""; 50];
    let mut fields = 0;
    for (slot, value) in rest.iter_mut().zip(text[close + 1..].split_whitespace()) {
        *slot = value;
        fields += 1;
    }
    let field = |n: usize| (n - 3 < fields).then(|| rest[n - 3]);
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
            Some(WaitExit::Code(3))
        );
        assert_eq!(
            parse_stat(&fields('Z', 9)).unwrap().exit(),
            Some(WaitExit::Signal(9))
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
}
