//! A process table in memory, for the unit tests of rules that read one through
//! [`ProcSource`].

use super::{ProcSource, ProcStat, ProcessIdentity};
use crate::proc_read::Blocked;

/// A process table in memory, for tests of the rules that read one.
#[derive(Debug, Clone, Default)]
pub(crate) struct FakeProc {
    processes: std::collections::HashMap<u32, (ProcStat, u32)>,
    cmdlines: std::collections::HashMap<u32, Vec<String>>,
    wchans: std::collections::HashMap<u32, String>,
}

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
