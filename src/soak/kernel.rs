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

/// The kernel's log: `/dev/kmsg`, unless `UNILAB_KMSG` names a file standing in for it.
pub(crate) fn kmsg_path() -> PathBuf {
    std::env::var_os(crate::env::EnvVars::UNILAB_KMSG)
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from("/dev/kmsg"), PathBuf::from)
}

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

/// Opens the kernel's log for reading without blocking; or why it cannot be read.
fn open_kmsg(kmsg: &Path) -> Result<std::fs::File, String> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(kmsg)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::PermissionDenied => format!(
                "kernel log: {} is not readable by this user (kernel.dmesg_restrict)",
                kmsg.display()
            ),
            _ => format!("kernel log: cannot open {}: {e}", kmsg.display()),
        })
}

/// Hands each record the kernel has logged past `file`'s position to `each` (its timestamp, in
/// microseconds on the monotonic clock, and its text), until there are no more for now.
fn read_records(file: &mut std::fs::File, mut each: impl FnMut(u64, String)) {
    let mut chunk = vec![0u8; 8192];
    loop {
        // `/dev/kmsg` gives one record a read; the oldest may be overwritten meanwhile (EPIPE).
        let n = match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(nix::libc::EPIPE) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // `WouldBlock`: nothing more for now.
            Err(_) => break,
        };
        // A record's continuation lines (` KEY=value`) start with a space; every other line is
        // a record of its own (a file standing in for the device may give several at once).
        String::from_utf8_lossy(&chunk[..n])
            .lines()
            .filter(|line| !line.starts_with(' '))
            .filter_map(parse_record)
            .for_each(|(at, line)| each(at, line));
    }
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
    let mut file = open_kmsg(kmsg)?;
    let mut found = std::collections::VecDeque::new();
    read_records(&mut file, |at_mono_us, line| {
        if at_mono_us < since_mono_us || !is_telling(&line) {
            return;
        }
        let ago = i64::try_from(now_mono_us.saturating_sub(at_mono_us)).unwrap_or(i64::MAX);
        found.push_back(KernelMessage {
            at_us: now_unix_us.saturating_sub(ago),
            line,
        });
        if found.len() > MAX_KERNEL_LINES {
            found.pop_front();
        }
    });
    Ok(found.into())
}

/// The kernel's log followed through a soak: each sample takes the lines about OOM kills and GPU
/// faults logged since the one before, and the OOM kills are kept for the verdict.
pub(crate) struct KernelLog {
    file: Result<std::fs::File, String>,
    oom_kills: Vec<(u32, String)>,
}

/// The most OOM kills a soak remembers (a tree that forks into its limit in a loop).
const MAX_OOM_KILLS: usize = 1000;

impl KernelLog {
    /// The log at `kmsg`, from what the kernel logs next on.
    pub(crate) fn follow(kmsg: &Path) -> Self {
        let file = open_kmsg(kmsg).map(|mut file| {
            use std::io::Seek;
            // Past every record logged so far (the device takes only this seek from the end).
            let _ = file.seek(std::io::SeekFrom::End(0));
            file
        });
        Self {
            file,
            oom_kills: Vec::new(),
        }
    }

    /// The telling lines logged since the last call, oldest first.
    pub(crate) fn new_lines(&mut self) -> Vec<String> {
        let Ok(file) = &mut self.file else {
            return Vec::new();
        };
        let mut lines = Vec::new();
        read_records(file, |_, line| {
            if is_telling(&line) {
                lines.push(line);
            }
        });
        for line in &lines {
            if let Some(kill) = oom_killed(line)
                && self.oom_kills.len() < MAX_OOM_KILLS
            {
                self.oom_kills.push(kill);
            }
        }
        lines.truncate(MAX_KERNEL_LINES);
        lines
    }

    /// The processes the kernel's log said the OOM killer killed, pid and name.
    pub(crate) fn oom_kills(&self) -> &[(u32, String)] {
        &self.oom_kills
    }

    /// Why the log cannot be followed, if it cannot.
    pub(crate) fn unavailable(&self) -> Option<&str> {
        self.file.as_ref().err().map(String::as_str)
    }
}

/// One `/dev/kmsg` record's first line, `PRIORITY,SEQUENCE,MICROSECONDS,FLAGS[,…];TEXT`: its
/// timestamp and text.
fn parse_record(record: &str) -> Option<(u64, String)> {
    let (header, text) = record.split_once(';')?;
    let at: u64 = header.split(',').nth(2)?.parse().ok()?;
    Some((at, text.trim_end().to_owned()))
}

/// The process an OOM kill line names, pid and name: `… Killed process 1234 (python3) …`.
fn oom_killed(line: &str) -> Option<(u32, String)> {
    let (_, after) = line.split_once("Killed process ")?;
    let (pid, rest) = after.split_once(' ').unwrap_or((after, ""));
    let name = rest
        .strip_prefix('(')
        .and_then(|r| r.split_once(')'))
        .map_or_else(String::new, |(name, _)| name.to_owned());
    Some((pid.parse().ok()?, name))
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
    fn a_followed_log_gives_only_what_was_logged_since_and_keeps_the_oom_kills() {
        let dir = tempfile::tempdir().unwrap();
        let kmsg = dir.path().join("kmsg");
        std::fs::write(
            &kmsg,
            "3,1,10,-;Out of memory: Killed process 5 (old) total-vm:1kB\n",
        )
        .unwrap();
        let mut log = KernelLog::follow(&kmsg);
        assert_eq!(log.unavailable(), None);
        assert!(
            log.new_lines().is_empty(),
            "what was logged before is not the soak's"
        );
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&kmsg)
            .unwrap();
        std::io::Write::write_all(
            &mut file,
            b"4,2,20,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n \
              SUBSYSTEM=pci\n6,3,30,-;usb 1-1: new device\n3,4,40,-;Memory cgroup out of \
              memory: Killed process 77 (python3) total-vm:9kB\n",
        )
        .unwrap();
        assert_eq!(
            log.new_lines(),
            [
                "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
                "Memory cgroup out of memory: Killed process 77 (python3) total-vm:9kB"
            ]
        );
        assert!(log.new_lines().is_empty());
        assert_eq!(log.oom_kills(), [(77, "python3".to_owned())]);
        let missing = KernelLog::follow(&dir.path().join("none"));
        assert!(
            missing
                .unavailable()
                .unwrap()
                .starts_with("kernel log: cannot open")
        );
    }

    #[test]
    fn kernel_records_are_parsed_and_oom_lines_name_their_pid() {
        assert_eq!(
            parse_record(
                "3,1234,5000000,-;Out of memory: Killed process 4321 (python3) total-vm:1kB"
            ),
            Some((
                5_000_000,
                "Out of memory: Killed process 4321 (python3) total-vm:1kB".into()
            ))
        );
        assert_eq!(parse_record("no header"), None);
        assert_eq!(
            oom_killed("Memory cgroup out of memory: Killed process 77 (python) total-vm"),
            Some((77, "python".into()))
        );
        assert_eq!(oom_killed("NVRM: Xid (PCI:0000:3b:00): 79"), None);
        assert!(is_telling(
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
        ));
        assert!(!is_telling("usb 1-1: new high-speed USB device"));
    }
}
