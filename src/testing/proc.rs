//! A fake `/proc`, for the unit tests of code that reads one: a temporary directory laid out as
//! the kernel lays out `/proc`, each file in the kernel's own format. The code under test reads
//! it as it reads the real one, through the `/proc` root it is given (`SystemProc` pointed at
//! [`FakeProc::root`], `process::tree`, the sampler's walk, `ProcDir`), so its parsers are
//! tested too, and one table serves the rules that ask after identity and liveness, the walk of
//! a tree and its costlier files, and the reads that never return.
//!
//! What it keeps: every process it holds has a `stat` (52 fields), a `status` with its real uid,
//! a `cmdline`, an `environ`, a `wchan` (`0` unless it is stuck) and its main thread's
//! `task/<pid>/children`, which name its children, zombies included, as the kernel's do; a
//! process that is reaped leaves no directory and no parent's list. `io`, `fd/` and
//! `smaps_rollup` are there once a test gives them. It depends on nothing else in the crate, so
//! any module's tests may use it without tying that module to another.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One process of the table: what its `stat` and `status` say.
#[derive(Debug, Clone)]
struct Process {
    comm: String,
    state: char,
    ppid: u32,
    uid: u32,
    start_ticks: u64,
    utime: u64,
    rss_pages: u64,
    exit_status: i32,
}

/// A process table on disk, in `/proc`'s layout. Builders (`with`, `parent`, ...) take and give
/// the table, to set one up in one expression; what changes during a test (`exit`, `reap`,
/// `ran`, ...) takes it by `&mut`.
#[derive(Debug)]
pub(crate) struct FakeProc {
    dir: tempfile::TempDir,
    processes: BTreeMap<u32, Process>,
}

impl Default for FakeProc {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeProc {
    /// An empty table.
    pub(crate) fn new() -> Self {
        Self {
            dir: tempfile::Builder::new()
                .prefix("fake-proc-")
                .tempdir()
                .expect("a temporary directory for a fake /proc"),
            processes: BTreeMap::new(),
        }
    }

    /// The directory to read as `/proc`.
    pub(crate) fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The directory of `pid`, as `/proc/<pid>`.
    pub(crate) fn dir_of(&self, pid: u32) -> PathBuf {
        self.root().join(pid.to_string())
    }

    /// Adds a process named `fake`, started at `start_ticks`, in `state` (`S`, `R`, `Z`, ...),
    /// owned by `uid`, a child of init (1).
    pub(crate) fn with(mut self, pid: u32, start_ticks: u64, state: char, uid: u32) -> Self {
        self.add(pid, start_ticks, state, uid);
        self
    }

    /// Makes `child` a child of `parent`.
    pub(crate) fn parent(mut self, child: u32, parent: u32) -> Self {
        self.reparent(child, parent);
        self
    }

    /// Gives `pid` a command line.
    pub(crate) fn cmdline_of(self, pid: u32, args: &[&str]) -> Self {
        let bytes: Vec<u8> = args.iter().flat_map(|arg| arg.bytes().chain([0])).collect();
        self.write(pid, "cmdline", bytes);
        self
    }

    /// Gives `pid` the environment `entries` (`NAME=value`).
    pub(crate) fn environ_of(self, pid: u32, entries: &[&str]) -> Self {
        let bytes: Vec<u8> = entries
            .iter()
            .flat_map(|entry| entry.bytes().chain([0]))
            .collect();
        self.write(pid, "environ", bytes);
        self
    }

    /// Puts `pid` in uninterruptible sleep (`D`), waiting in `wchan`.
    pub(crate) fn stuck_in(mut self, pid: u32, wchan: &str) -> Self {
        self.change(pid, |p| p.state = 'D');
        self.write(pid, "wchan", wchan);
        self
    }

    /// Adds a process, as [`FakeProc::with`] does.
    pub(crate) fn add(&mut self, pid: u32, start_ticks: u64, state: char, uid: u32) {
        let process = Process {
            comm: "fake".into(),
            state,
            ppid: 1,
            uid,
            start_ticks,
            utime: 0,
            rss_pages: 0,
            exit_status: 0,
        };
        let dir = self.dir_of(pid);
        std::fs::create_dir_all(dir.join("task").join(pid.to_string()))
            .unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        self.processes.insert(pid, process);
        self.write(pid, "cmdline", "");
        self.write(pid, "environ", "");
        self.write(pid, "wchan", "0");
        self.write_stat(pid);
        self.write_children(pid);
        self.write_children(1);
    }

    /// Names the process (`comm`, as `stat` and `status` show it).
    pub(crate) fn name(&mut self, pid: u32, comm: &str) {
        self.change(pid, |p| p.comm = comm.to_owned());
    }

    /// Moves `child` under `parent` (as the kernel re-parents an orphan).
    pub(crate) fn reparent(&mut self, child: u32, parent: u32) {
        let Some(old) = self.processes.get(&child).map(|p| p.ppid) else {
            return;
        };
        self.change(child, |p| p.ppid = parent);
        self.write_children(old);
        self.write_children(parent);
    }

    /// `pid` has used `utime` ticks of CPU time in user mode.
    pub(crate) fn ran(&mut self, pid: u32, utime: u64) {
        self.change(pid, |p| p.utime = utime);
    }

    /// `pid`'s resident set is `rss_pages` pages.
    pub(crate) fn resident(&mut self, pid: u32, rss_pages: u64) {
        self.change(pid, |p| p.rss_pages = rss_pages);
    }

    /// `pid`'s `io`: what it read from and wrote to storage.
    pub(crate) fn io(&mut self, pid: u32, read_bytes: u64, write_bytes: u64) {
        let text = format!(
            "rchar: 0\nwchar: 0\nsyscr: 0\nsyscw: 0\nread_bytes: {read_bytes}\nwrite_bytes: \
             {write_bytes}\ncancelled_write_bytes: 0\n"
        );
        self.write(pid, "io", text);
    }

    /// `pid` holds the descriptors `0..count` open.
    pub(crate) fn open_fds(&mut self, pid: u32, count: u32) {
        let fd = self.dir_of(pid).join("fd");
        let _ = std::fs::remove_dir_all(&fd);
        std::fs::create_dir_all(&fd).unwrap_or_else(|e| panic!("create {}: {e}", fd.display()));
        for n in 0..count {
            std::fs::write(fd.join(n.to_string()), "")
                .unwrap_or_else(|e| panic!("write {}/{n}: {e}", fd.display()));
        }
    }

    /// `pid`'s `smaps_rollup`: a proportional set size of `pss_kib` KiB.
    pub(crate) fn pss(&mut self, pid: u32, pss_kib: u64) {
        let text = format!(
            "00400000-7fff0000 ---p 00000000 00:00 0 [rollup]\nRss: {} kB\nPss: {pss_kib} \
             kB\nPss_Anon: {pss_kib} kB\n",
            pss_kib.max(1)
        );
        self.write(pid, "smaps_rollup", text);
    }

    /// The process exits with `waitpid`'s `status` (`code << 8`, or the signal): a zombie until
    /// [`FakeProc::reap`]. Nothing happens to a pid the table does not hold.
    pub(crate) fn exit_with(&mut self, pid: u32, status: i32) {
        self.change(pid, |p| {
            p.state = 'Z';
            p.exit_status = status;
        });
    }

    /// The process exits with code 0: a zombie until [`FakeProc::reap`].
    pub(crate) fn exit(&mut self, pid: u32) {
        self.exit_with(pid, 0);
    }

    /// The zombie is waited for: no trace of it is left. Nothing happens to a pid the table does
    /// not hold.
    pub(crate) fn reap(&mut self, pid: u32) {
        let Some(process) = self.processes.remove(&pid) else {
            return;
        };
        let dir = self.dir_of(pid);
        std::fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("remove {}: {e}", dir.display()));
        self.write_children(process.ppid);
    }

    /// Makes a read of `pid`'s `file` never return (a FIFO nobody opens for writing, as a read of
    /// a locked memory map blocks); the path, for the test to open for writing when the read is
    /// to return at last.
    pub(crate) fn never_returns(&mut self, pid: u32, file: &str) -> PathBuf {
        let path = self.dir_of(pid).join(file);
        let _ = std::fs::remove_file(&path);
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU)
            .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
        path
    }

    fn change(&mut self, pid: u32, change: impl FnOnce(&mut Process)) {
        if let Some(process) = self.processes.get_mut(&pid) {
            change(process);
            self.write_stat(pid);
        }
    }

    fn write(&self, pid: u32, file: &str, contents: impl AsRef<[u8]>) {
        if !self.processes.contains_key(&pid) {
            return;
        }
        let path = self.dir_of(pid).join(file);
        std::fs::write(&path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// `stat` and `status`, from the process's fields.
    fn write_stat(&self, pid: u32) {
        let Some(p) = self.processes.get(&pid) else {
            return;
        };
        // Fields 3 (state) to 52 (exit_code); unilab reads 3-6, 14-17, 20, 22, 24 and 52.
        let mut fields = vec!["0".to_owned(); 50];
        let mut set = |n: usize, value: String| fields[n - 3] = value;
        set(3, p.state.to_string());
        set(4, p.ppid.to_string());
        set(5, pid.to_string());
        set(6, pid.to_string());
        set(7, "0".into());
        set(8, "-1".into());
        set(14, p.utime.to_string());
        set(18, "20".into());
        set(20, "1".into());
        set(22, p.start_ticks.to_string());
        set(23, (p.rss_pages * 4096 * 4).to_string());
        set(24, p.rss_pages.to_string());
        set(25, u64::MAX.to_string());
        set(52, p.exit_status.to_string());
        let stat = format!("{pid} ({}) {}\n", p.comm, fields.join(" "));
        self.write(pid, "stat", stat);
        let state = match p.state {
            'R' => "R (running)",
            'S' => "S (sleeping)",
            'D' => "D (disk sleep)",
            'Z' => "Z (zombie)",
            'T' => "T (stopped)",
            _ => "X (dead)",
        };
        let status = format!(
            "Name:\t{}\nState:\t{state}\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t{}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\nThreads:\t1\n",
            p.comm,
            p.ppid,
            uid = p.uid,
        );
        self.write(pid, "status", status);
    }

    /// `task/<pid>/children` of `pid`: its children's pids, each followed by a space.
    fn write_children(&self, pid: u32) {
        let children: String = self
            .processes
            .iter()
            .filter(|(_, p)| p.ppid == pid)
            .map(|(child, _)| format!("{child} "))
            .collect();
        self.write(pid, &format!("task/{pid}/children"), children);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileTypeExt;

    use super::*;

    fn read(proc: &FakeProc, pid: u32, file: &str) -> String {
        std::fs::read_to_string(proc.dir_of(pid).join(file)).unwrap_or_default()
    }

    /// Field `n` of `pid`'s `stat`, counted as `proc(5)` counts them (1 is the pid).
    fn field(proc: &FakeProc, pid: u32, n: usize) -> String {
        let stat = read(proc, pid, "stat");
        let close = stat.rfind(')').unwrap();
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        assert_eq!(rest.len(), 50, "{stat}");
        rest[n - 3].to_owned()
    }

    #[test]
    fn a_process_has_the_files_the_kernel_gives_in_its_format() {
        let mut proc = FakeProc::new()
            .with(10, 500, 'S', 1000)
            .with(11, 600, 'R', 1000)
            .parent(11, 10)
            .cmdline_of(11, &["python3", "train.py"])
            .environ_of(11, &["HOME=/root"]);
        proc.name(11, "py (worker) 1");
        proc.ran(11, 7);
        proc.resident(11, 50);
        assert!(read(&proc, 11, "stat").starts_with("11 (py (worker) 1) R 10 11 11 "));
        let fields = [4, 14, 20, 22, 24, 52].map(|n| field(&proc, 11, n));
        assert_eq!(fields, ["10", "7", "1", "600", "50", "0"]);
        assert!(read(&proc, 11, "status").contains("\nUid:\t1000\t1000\t1000\t1000\n"));
        assert_eq!(read(&proc, 11, "cmdline"), "python3\0train.py\0");
        assert_eq!(read(&proc, 11, "environ"), "HOME=/root\0");
        assert_eq!(read(&proc, 11, "wchan"), "0");
        assert_eq!(read(&proc, 10, "task/10/children"), "11 ");
        assert_eq!(read(&proc, 11, "task/11/children"), "");
        proc.io(11, 7, 100);
        assert!(read(&proc, 11, "io").contains("\nwrite_bytes: 100\n"));
        proc.open_fds(11, 2);
        assert_eq!(
            std::fs::read_dir(proc.dir_of(11).join("fd"))
                .unwrap()
                .count(),
            2
        );
        proc.pss(11, 300);
        assert!(read(&proc, 11, "smaps_rollup").contains("\nPss: 300 kB\n"));
    }

    #[test]
    fn a_process_exits_is_reaped_and_moves_as_the_kernel_says() {
        let mut proc = FakeProc::new()
            .with(10, 500, 'S', 0)
            .with(11, 600, 'S', 0)
            .with(12, 700, 'S', 0)
            .parent(11, 10)
            .parent(12, 10)
            .stuck_in(12, "nv_wait");
        assert_eq!(field(&proc, 12, 3), "D");
        assert_eq!(read(&proc, 12, "wchan"), "nv_wait");
        proc.exit_with(11, 3 << 8);
        assert_eq!([3, 52].map(|n| field(&proc, 11, n)), ["Z", "768"]);
        assert_eq!(
            read(&proc, 10, "task/10/children"),
            "11 12 ",
            "a zombie is its parent's child until reaped"
        );
        proc.reap(11);
        assert!(!proc.dir_of(11).exists());
        assert_eq!(read(&proc, 10, "task/10/children"), "12 ");
        proc.reparent(12, 1);
        assert_eq!(read(&proc, 10, "task/10/children"), "");
        assert_eq!(field(&proc, 12, 4), "1");
        proc.exit(12);
        assert_eq!(field(&proc, 12, 3), "Z");
        proc.reap(99);
        proc.add(13, 800, 'S', 0);
        let fifo = proc.never_returns(13, "environ");
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    }
}
