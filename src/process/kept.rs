//! A process tree read again and again, as a soak samples it: each process's `stat` and its
//! threads' `children` files are opened once and read again through the open file (one `pread`)
//! rather than opened, read and closed by path each sample — on a tree of sleeping processes
//! that is a quarter of the cost.
//!
//! An open `/proc/<pid>/…` file stays bound to the process it was opened for: once that process
//! is gone (reaped), a read of it fails, and a process that took its pid since is not read
//! through it. So a kept file never answers for another process; a read that fails drops it, and
//! the pid is looked up by path again, as the first time. What is kept is bounded (a share of the
//! open-file limit); past it, files are read by path as before. Kept files close on `exec`.

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;

use super::walk::{
    children_of, has_children_files, parse_children, read_whole, thread_ids, walk_down,
};
use super::{ProcStat, parse_stat};

/// The most files kept open, whatever the limit (an unlimited one included): a tree of
/// thousands of processes is read by path past it.
const MAX_KEPT: usize = 8192;

/// One process's kept files: its `stat`, and the `children` file of each of its threads.
struct Kept {
    start_ticks: u64,
    stat: File,
    /// By thread id; a single-threaded process has its own only.
    children: HashMap<u32, File>,
}

/// The files of the processes of one tree, kept open between its walks.
pub(crate) struct KeptTree {
    proc_root: PathBuf,
    kept: HashMap<u32, Kept>,
    /// How many files may be kept open.
    budget: usize,
    open: usize,
    buf: Vec<u8>,
    /// Whether this kernel has `children` files, asked once.
    children_files: Option<bool>,
}

impl KeptTree {
    /// A tree read under `proc_root`, keeping at most a quarter of this process's open-file
    /// limit (its soft limit, which its children inherit unchanged) open, and never more than
    /// [`MAX_KEPT`].
    pub(crate) fn new(proc_root: PathBuf) -> Self {
        let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft);
        let budget = usize::try_from(limit / 4).map_or(MAX_KEPT, |b| b.min(MAX_KEPT));
        Self::with_budget(proc_root, budget)
    }

    pub(crate) fn with_budget(proc_root: PathBuf, budget: usize) -> Self {
        Self {
            proc_root,
            kept: HashMap::new(),
            budget,
            open: 0,
            buf: Vec::with_capacity(4096),
            children_files: None,
        }
    }

    /// How many files are kept open now.
    #[cfg(test)]
    fn open_files(&self) -> usize {
        self.open
    }

    fn path(&self, pid: u32) -> PathBuf {
        self.proc_root.join(pid.to_string())
    }

    /// `pid`'s stat: through its kept file, or by path (kept from now on, while the budget lasts).
    fn stat(&mut self, pid: u32) -> Option<ProcStat> {
        if let Some(kept) = self.kept.get(&pid) {
            match read_whole(&kept.stat, &mut self.buf).and_then(parse_stat) {
                Some(stat) if stat.start_ticks == kept.start_ticks => return Some(stat),
                // Gone: its files go too, and the pid is looked up again.
                _ => self.forget(pid),
            }
        }
        let file = File::open(self.path(pid).join("stat")).ok()?;
        let stat = read_whole(&file, &mut self.buf).and_then(parse_stat)?;
        if self.open < self.budget {
            self.open += 1;
            let kept = Kept {
                start_ticks: stat.start_ticks,
                stat: file,
                children: HashMap::new(),
            };
            self.kept.insert(pid, kept);
        }
        Some(stat)
    }

    fn forget(&mut self, pid: u32) {
        if let Some(kept) = self.kept.remove(&pid) {
            self.open -= 1 + kept.children.len();
        }
    }

    /// The children of `stat`'s process, from each of its threads' `children` file, added to
    /// `out`. Its threads are listed only where it has more than one.
    fn children(&mut self, stat: &ProcStat, out: &mut Vec<u32>) {
        let pid = stat.pid;
        let mut kept = match self.kept.remove(&pid) {
            Some(kept) if kept.start_ticks == stat.start_ticks => kept,
            other => {
                // Not kept, or kept for another process: read by path.
                self.open -= other.map_or(0, |k| 1 + k.children.len());
                out.extend(children_of(&self.proc_root, stat, &mut self.buf));
                return;
            }
        };
        self.open -= kept.children.len();
        let tids = thread_ids(&self.proc_root, stat);
        kept.children.retain(|tid, _| tids.contains(tid));
        self.open += kept.children.len();
        let task_dir = self.path(pid).join("task");
        for tid in tids {
            if let Some(file) = kept.children.get(&tid) {
                match read_whole(file, &mut self.buf) {
                    Some(text) => {
                        out.extend(parse_children(text));
                        continue;
                    }
                    None => {
                        kept.children.remove(&tid);
                        self.open -= 1;
                    }
                }
            }
            let Ok(file) = File::open(task_dir.join(tid.to_string()).join("children")) else {
                continue;
            };
            if let Some(text) = read_whole(&file, &mut self.buf) {
                out.extend(parse_children(text));
            }
            if self.open < self.budget {
                self.open += 1;
                kept.children.insert(tid, file);
            }
        }
        self.kept.insert(pid, kept);
    }

    /// The tree under `root`: its own stat and its processes, parents before children (as
    /// [`super::tree`] reads it); the files of processes no longer in it are closed.
    pub(crate) fn tree(&mut self, root: u32) -> Option<(ProcStat, Vec<ProcStat>)> {
        let root_stat = self.stat(root)?;
        let children_files = *self
            .children_files
            .get_or_insert_with(|| has_children_files(&self.proc_root, root));
        let found = if children_files {
            let this = std::cell::RefCell::new(&mut *self);
            walk_down(
                root_stat.clone(),
                |pid| this.borrow_mut().stat(pid),
                |parent, out| this.borrow_mut().children(parent, out),
            )
        } else {
            super::descendants(root, &super::all_processes(&self.proc_root))
        };
        let in_tree: std::collections::HashSet<u32> = std::iter::once(root)
            .chain(found.iter().map(|p| p.pid))
            .collect();
        let gone: Vec<u32> = self
            .kept
            .keys()
            .filter(|pid| !in_tree.contains(pid))
            .copied()
            .collect();
        for pid in gone {
            self.forget(pid);
        }
        Some((root_stat, found))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn sleeper(seconds: &str) -> std::process::Child {
        std::process::Command::new("sleep")
            .arg(seconds)
            .spawn()
            .unwrap()
    }

    /// `sh -c script`, once the walk by path finds `children` processes under it.
    fn shell_with(script: &str, children: usize) -> std::process::Child {
        let shell = std::process::Command::new("sh")
            .args(["-c", script])
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while super::super::tree(Path::new("/proc"), shell.id()).len() < children
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        shell
    }

    fn pids(tree: &[ProcStat]) -> Vec<u32> {
        let mut pids: Vec<u32> = tree.iter().map(|p| p.pid).collect();
        pids.sort_unstable();
        pids
    }

    /// A shell with two sleeping children, read by both walks: the same tree, and its files kept
    /// open for the next walk (two a process: `stat` and `children`).
    #[test]
    fn a_kept_walk_sees_what_a_walk_by_path_sees_and_keeps_its_files() {
        let mut shell = shell_with("sleep 30 & sleep 30 & wait", 2);
        let root = shell.id();
        let proc_root = Path::new("/proc");
        let mut kept = KeptTree::with_budget(proc_root.to_owned(), 64);
        let (root_stat, first) = kept.tree(root).unwrap();
        let again = kept.tree(root).unwrap().1;
        let by_path = super::super::tree(proc_root, root);
        let _ = shell.kill();
        let _ = shell.wait();
        for p in &by_path {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p.pid as i32),
                nix::sys::signal::SIGKILL,
            );
        }
        assert_eq!(root_stat.pid, root);
        assert_eq!(pids(&first), pids(&by_path));
        assert_eq!(pids(&again), pids(&by_path));
        assert_eq!(first.len(), 2, "{first:?}");
        // The shell and its two children: a `stat` and a `children` file each.
        assert_eq!(kept.open_files(), 6);
    }

    /// A child forked by a thread other than the main one is listed in that thread's
    /// `children` file alone: found, as by the walk by path, and again through the kept files.
    #[test]
    fn a_child_of_a_second_thread_is_in_the_tree() {
        let script = "import subprocess, threading, time\n\
t = threading.Thread(target=lambda: (subprocess.Popen(['sleep', '30']), time.sleep(30)))\n\
t.start(); t.join()\n";
        let mut python = std::process::Command::new("python3")
            .args(["-c", script])
            .spawn()
            .unwrap();
        let root = python.id();
        let proc_root = Path::new("/proc");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut kept = KeptTree::with_budget(proc_root.to_owned(), 64);
        // (`python3` may be a launcher's script that starts the interpreter below it.)
        let mut first = Vec::new();
        while !first.iter().any(|p: &ProcStat| p.comm == "sleep")
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
            first = kept
                .tree(root)
                .map(|(root, tree)| [vec![root], tree].concat())
                .unwrap_or_default();
        }
        let again = [vec![kept.stat(root).unwrap()], kept.tree(root).unwrap().1].concat();
        let mut by_path = super::super::tree(proc_root, root);
        by_path.push(kept.stat(root).unwrap());
        for p in &by_path[..by_path.len() - 1] {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p.pid as i32),
                nix::sys::signal::SIGKILL,
            );
        }
        let _ = python.kill();
        let _ = python.wait();
        let sleep = first.iter().find(|p| p.comm == "sleep");
        let parent = sleep.and_then(|s| first.iter().find(|p| p.pid == s.ppid));
        assert!(
            parent.is_some_and(|p| p.num_threads > 1),
            "forked by a thread of a threaded process: {first:?}"
        );
        assert_eq!(pids(&again), pids(&first));
        assert_eq!(pids(&by_path), pids(&first));
    }

    /// A process that left the tree takes its kept files with it; and with no budget nothing is
    /// kept, the tree still read.
    #[test]
    fn files_of_processes_that_left_are_closed_and_the_budget_holds() {
        let mut shell = shell_with("sleep 30 & wait", 1);
        let root = shell.id();
        let proc_root = Path::new("/proc");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut kept = KeptTree::with_budget(proc_root.to_owned(), 64);
        let mut none_kept = KeptTree::with_budget(proc_root.to_owned(), 0);
        let before = kept.tree(root).unwrap().1;
        assert_eq!(none_kept.tree(root).unwrap().1.len(), 1);
        assert_eq!(none_kept.open_files(), 0);
        let child = before[0].pid;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child as i32),
            nix::sys::signal::SIGKILL,
        );
        // The shell reaps it: gone from the tree, and its files closed.
        while !kept.tree(root).unwrap().1.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let after = kept.tree(root).unwrap().1;
        let _ = shell.kill();
        let _ = shell.wait();
        assert!(after.is_empty(), "{after:?}");
        assert_eq!(kept.open_files(), 2);
    }

    /// A kept `stat` whose process is gone is not read for the process that took its pid: the
    /// read fails, and the pid is looked up again by path.
    #[test]
    fn a_kept_stat_never_answers_for_another_process() {
        let mut gone = sleeper("30");
        let pid = gone.id();
        let file = File::open(format!("/proc/{pid}/stat")).unwrap();
        let mut buf = Vec::new();
        assert!(read_whole(&file, &mut buf).is_some());
        let _ = gone.kill();
        let _ = gone.wait();
        assert_eq!(read_whole(&file, &mut buf), None);
    }
}
