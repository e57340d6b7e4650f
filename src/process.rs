//! Process identity: a pid alone names a process only until the kernel reuses it.
//!
//! A process is identified by `(pid, starttime)`, starttime being field 22 of `/proc/<pid>/stat`
//! in clock ticks since boot. Two processes that share a pid never share a start time, so a record
//! holding both still names the process it was taken from, or none.

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
