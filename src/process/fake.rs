//! The shared fake `/proc` (`crate::testing::proc`), read as this host's `/proc` is, through
//! [`ProcSource`]: for the unit tests of rules that read a process table.

use super::{ProcSource, ProcStat, SystemProc};
use crate::proc_read::Blocked;
use crate::testing::proc::FakeProc;

impl FakeProc {
    /// The fake read by the real reader, as [`SystemProc`] reads `/proc`.
    fn system(&self) -> SystemProc {
        SystemProc {
            root: self.root().to_path_buf(),
        }
    }
}

impl ProcSource for FakeProc {
    fn stat(&self, pid: u32) -> Option<ProcStat> {
        self.system().stat(pid)
    }
    fn uid(&self, pid: u32) -> Option<u32> {
        self.system().uid(pid)
    }
    /// In pid order, as the kernel lists them.
    fn all(&self) -> Vec<ProcStat> {
        let mut all = self.system().all();
        all.sort_by_key(|s| s.pid);
        all
    }
    fn tree(&self, root: u32) -> Vec<ProcStat> {
        self.system().tree(root)
    }
    fn cmdline(&self, pid: u32) -> Result<Vec<String>, Blocked> {
        self.system().cmdline(pid)
    }
    fn environ(&self, pid: u32) -> Result<Vec<Vec<u8>>, Blocked> {
        self.system().environ(pid)
    }
    fn wchan(&self, pid: u32) -> Option<String> {
        self.system().wchan(pid)
    }
}
