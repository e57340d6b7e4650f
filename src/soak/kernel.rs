//! What the kernel knows about a soak's tree that `/proc/<pid>` does not say: the memory cgroup
//! it runs in (its limit, how often the OOM killer struck in it) and the kernel log's lines about
//! OOM kills and GPU faults. Read where readable; what is not says why.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::event::soak::{CgroupEvidence, KernelMessage};

/// Where cgroup hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// A v1 `memory.limit_in_bytes` at or above this means no limit (the kernel prints
/// `PAGE_COUNTER_MAX` pages in bytes, `9223372036854771712` on 4 KiB pages).
const V1_UNLIMITED: u64 = 1 << 62;

/// The memory cgroup a process runs in: the v1 memory controller's where it is mounted, else
/// the unified (v2) one. `None` when neither can be found.
pub(crate) fn memory_cgroup(proc_root: &Path, pid: u32) -> Option<MemoryCgroup> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("cgroup")).ok()?;
    MemoryCgroup::from_proc(&text, Path::new(CGROUP_ROOT))
}

/// A memory cgroup, by version and path within its hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemoryCgroup {
    pub version: u8,
    pub path: String,
    dir: PathBuf,
}

impl MemoryCgroup {
    /// From `/proc/<pid>/cgroup` (`ID:CONTROLLERS:PATH` lines), with hierarchies under `root`.
    fn from_proc(text: &str, root: &Path) -> Option<Self> {
        let lines = text.lines().filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            Some((fields.next()?, fields.next()?, fields.next()?))
        });
        let mut unified = None;
        for (id, controllers, path) in lines {
            if controllers.split(',').any(|c| c == "memory") {
                let dir = root.join("memory").join(path.trim_start_matches('/'));
                if dir.join("memory.limit_in_bytes").exists() {
                    return Some(Self {
                        version: 1,
                        path: path.to_owned(),
                        dir,
                    });
                }
            } else if id == "0" && controllers.is_empty() {
                unified = Some(path.to_owned());
            }
        }
        let path = unified?;
        let base = if root.join("cgroup.controllers").exists() {
            root.to_owned()
        } else {
            // A hybrid host mounts the unified hierarchy beside the v1 ones.
            root.join("unified")
        };
        let dir = base.join(path.trim_start_matches('/'));
        dir.join("memory.events").exists().then_some(Self {
            version: 2,
            path,
            dir,
        })
    }

    /// Its memory limit; `None` where unlimited or unreadable.
    pub(crate) fn limit_bytes(&self) -> Option<u64> {
        let file = if self.version == 1 {
            "memory.limit_in_bytes"
        } else {
            "memory.max"
        };
        let text = std::fs::read_to_string(self.dir.join(file)).ok()?;
        let limit: u64 = text.trim().parse().ok()?;
        (limit < V1_UNLIMITED).then_some(limit)
    }

    /// How many processes the OOM killer has killed in it (`oom_kill` of v1's
    /// `memory.oom_control`, v2's `memory.events`).
    pub(crate) fn oom_kills(&self) -> Option<u64> {
        let file = if self.version == 1 {
            "memory.oom_control"
        } else {
            "memory.events"
        };
        let text = std::fs::read_to_string(self.dir.join(file)).ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
    }

    pub(crate) fn evidence(&self) -> CgroupEvidence {
        CgroupEvidence {
            version: self.version,
            path: self.path.clone(),
            memory_max_bytes: self.limit_bytes(),
            oom_kill_count: self.oom_kills(),
        }
    }
}

/// The kernel's log.
pub(crate) const KMSG: &str = "/dev/kmsg";

/// The most kernel lines a capture keeps (the last ones).
const MAX_KERNEL_LINES: usize = 200;

/// What the kernel logs about OOM kills and GPU faults.
fn is_telling(line: &str) -> bool {
    const TELLING: [&str; 5] = [
        "Out of memory",
        "oom-kill",
        "Killed process",
        "Memory cgroup out of memory",
        "NVRM: Xid",
    ];
    TELLING.iter().any(|t| line.contains(t))
}

/// The kernel log's lines about OOM kills and GPU faults logged at or after `since_mono_us`
/// (microseconds on the monotonic clock, which the log's timestamps count), each with its Unix
/// time; or why they cannot be read.
pub(crate) fn kernel_messages(
    kmsg: &Path,
    since_mono_us: u64,
    now_unix_us: i64,
    now_mono_us: u64,
) -> Result<Vec<KernelMessage>, String> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(kmsg)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::PermissionDenied => format!(
                "kernel log: {} is not readable by this user (kernel.dmesg_restrict)",
                kmsg.display()
            ),
            _ => format!("kernel log: cannot open {}: {e}", kmsg.display()),
        })?;
    let mut found = std::collections::VecDeque::new();
    let mut record = vec![0u8; 8192];
    loop {
        // Each read is one record; the oldest may be overwritten while reading (EPIPE).
        let n = match file.read(&mut record) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(nix::libc::EPIPE) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let Some((at_mono_us, line)) = parse_record(&String::from_utf8_lossy(&record[..n])) else {
            continue;
        };
        if at_mono_us < since_mono_us || !is_telling(&line) {
            continue;
        }
        let ago = i64::try_from(now_mono_us.saturating_sub(at_mono_us)).unwrap_or(i64::MAX);
        found.push_back(KernelMessage {
            at_us: now_unix_us.saturating_sub(ago),
            line,
        });
        if found.len() > MAX_KERNEL_LINES {
            found.pop_front();
        }
    }
    Ok(found.into())
}

/// One `/dev/kmsg` record, `PRIORITY,SEQUENCE,MICROSECONDS,FLAGS[,…];TEXT` (continuation lines
/// after it are dropped): its timestamp and text.
fn parse_record(record: &str) -> Option<(u64, String)> {
    let (header, text) = record.split_once(';')?;
    let at: u64 = header.split(',').nth(2)?.parse().ok()?;
    let line = text
        .lines()
        .next()
        .unwrap_or_default()
        .trim_end()
        .to_owned();
    Some((at, line))
}

/// The pid an OOM kill line names: `… Killed process 1234 (python3) …`.
pub(crate) fn oom_killed_pid(line: &str) -> Option<u32> {
    let (_, after) = line.split_once("Killed process ")?;
    after.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hierarchy(files: &[&str]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for file in files {
            let path = root.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        root
    }

    #[test]
    fn the_memory_cgroup_is_v1s_where_its_controller_is_mounted_else_the_unified_one() {
        let proc_cgroup = "4:memory:/job_7/step_0\n1:cpu,cpuacct:/\n0::/user.slice/x\n";
        let v1 = hierarchy(&["memory/job_7/step_0/memory.limit_in_bytes"]);
        let found = MemoryCgroup::from_proc(proc_cgroup, v1.path()).unwrap();
        assert_eq!((found.version, found.path.as_str()), (1, "/job_7/step_0"));

        let v2 = hierarchy(&["cgroup.controllers", "user.slice/x/memory.events"]);
        let found = MemoryCgroup::from_proc("0::/user.slice/x\n", v2.path()).unwrap();
        assert_eq!((found.version, found.path.as_str()), (2, "/user.slice/x"));

        let hybrid = hierarchy(&["unified/user.slice/x/memory.events"]);
        let found = MemoryCgroup::from_proc(proc_cgroup, hybrid.path()).unwrap();
        assert_eq!(
            found.version, 2,
            "no v1 memory files there: the unified one"
        );
        assert_eq!(MemoryCgroup::from_proc("garbage", v2.path()), None);
    }

    #[test]
    fn limits_and_oom_counts_are_read_from_either_version() {
        let v1 = hierarchy(&[
            "memory/j/memory.limit_in_bytes",
            "memory/j/memory.oom_control",
        ]);
        let dir = v1.path().join("memory/j");
        std::fs::write(dir.join("memory.limit_in_bytes"), "17179869184\n").unwrap();
        std::fs::write(
            dir.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
        )
        .unwrap();
        let cgroup = MemoryCgroup::from_proc("4:memory:/j\n", v1.path()).unwrap();
        assert_eq!(cgroup.limit_bytes(), Some(16 << 30));
        assert_eq!(cgroup.oom_kills(), Some(3));
        std::fs::write(dir.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        assert_eq!(cgroup.limit_bytes(), None, "unlimited");

        let v2 = hierarchy(&["cgroup.controllers", "j/memory.events", "j/memory.max"]);
        let dir = v2.path().join("j");
        std::fs::write(dir.join("memory.max"), "max\n").unwrap();
        std::fs::write(
            dir.join("memory.events"),
            "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n",
        )
        .unwrap();
        let cgroup = MemoryCgroup::from_proc("0::/j\n", v2.path()).unwrap();
        assert_eq!((cgroup.limit_bytes(), cgroup.oom_kills()), (None, Some(1)));
    }

    #[test]
    fn kernel_records_are_parsed_and_oom_lines_name_their_pid() {
        assert_eq!(
            parse_record(
                "3,1234,5000000,-;Out of memory: Killed process 4321 (python3) total-vm:1kB\n SUBSYSTEM=x\n"
            ),
            Some((
                5_000_000,
                "Out of memory: Killed process 4321 (python3) total-vm:1kB".into()
            ))
        );
        assert_eq!(parse_record("no header"), None);
        assert_eq!(
            oom_killed_pid("Memory cgroup out of memory: Killed process 77 (python) total-vm"),
            Some(77)
        );
        assert_eq!(oom_killed_pid("NVRM: Xid (PCI:0000:3b:00): 79"), None);
        assert!(is_telling(
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
        ));
        assert!(!is_telling("usb 1-1: new high-speed USB device"));
    }
}
