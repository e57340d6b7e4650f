//! A process tree read from `/proc`: every process, or the tree under one, walked down the
//! kernel's `children` files where it has them.

use super::{ProcStat, parse_stat};

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

/// What one read of a `/proc` file may return at once: a `stat` is well under it.
const CHUNK: usize = 4096;

/// Reads a small `/proc` file into `buf` with one open and no `stat` (std's `read_to_string`
/// asks for the size first, which `/proc` cannot answer anyway). `None` if it cannot be read.
pub(crate) fn read_proc_file<'b>(path: &std::path::Path, buf: &'b mut Vec<u8>) -> Option<&'b str> {
    read_whole(&std::fs::File::open(path).ok()?, buf)
}

/// Reads `file` whole from its start into `buf`: one `pread` where it fits well within
/// [`CHUNK`], more until the end otherwise. `None` where it cannot be read (its process is gone).
pub(super) fn read_whole<'b>(file: &std::fs::File, buf: &'b mut Vec<u8>) -> Option<&'b str> {
    use std::os::unix::fs::FileExt;
    buf.clear();
    let mut chunk = [0u8; CHUNK];
    loop {
        let n = file.read_at(&mut chunk, buf.len() as u64).ok()?;
        let first = buf.is_empty();
        buf.extend_from_slice(&chunk[..n]);
        // A short read of a `/proc` file may still leave a record that did not fit: only an
        // empty read ends it, except for a first read that fits well within the chunk.
        if n == 0 || (first && n < CHUNK / 2) {
            break;
        }
    }
    std::str::from_utf8(buf).ok()
}

/// The pids a `children` file lists.
pub(crate) fn parse_children(text: &str) -> impl Iterator<Item = u32> + '_ {
    text.split_whitespace()
        .filter_map(|c| c.parse::<u32>().ok())
}

/// The ids of the threads of `stat`'s process: its own where it has one thread, so its task
/// directory need not be listed.
pub(super) fn thread_ids(proc_root: &std::path::Path, stat: &ProcStat) -> Vec<u32> {
    if stat.num_threads <= 1 {
        return vec![stat.pid];
    }
    std::fs::read_dir(proc_root.join(stat.pid.to_string()).join("task"))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The children of one process: from each of its threads' `children` file (a thread may fork).
pub(super) fn children_of(
    proc_root: &std::path::Path,
    stat: &ProcStat,
    buf: &mut Vec<u8>,
) -> Vec<u32> {
    let task_dir = proc_root.join(stat.pid.to_string()).join("task");
    let mut children = Vec::new();
    for tid in thread_ids(proc_root, stat) {
        if let Some(text) = read_proc_file(&task_dir.join(tid.to_string()).join("children"), buf) {
            children.extend(parse_children(text));
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
    if !has_children_files(proc_root, root) {
        return descendants(root, &all_processes(proc_root));
    }
    let mut children_buf = Vec::with_capacity(4096);
    walk_down(
        root_stat,
        |pid| stat_of(pid, &mut buf),
        |parent, children| children.extend(children_of(proc_root, parent, &mut children_buf)),
    )
}

/// Whether this kernel has `/proc/<pid>/task/<tid>/children` (3.5 with checkpoint/restore, and
/// every kernel since 4.2).
pub(crate) fn has_children_files(proc_root: &std::path::Path, root: u32) -> bool {
    proc_root
        .join(root.to_string())
        .join("task")
        .join(root.to_string())
        .join("children")
        .exists()
}

/// The tree under `root_stat`, parents before children, each process's stat read by `stat_of`
/// and its children's pids added by `children_of`: a child that is gone by its read, or whose
/// parent is another by then, is not part of the tree any more.
pub(crate) fn walk_down(
    root_stat: ProcStat,
    mut stat_of: impl FnMut(u32) -> Option<ProcStat>,
    mut children_of: impl FnMut(&ProcStat, &mut Vec<u32>),
) -> Vec<ProcStat> {
    let mut found: Vec<ProcStat> = Vec::new();
    let mut seen = std::collections::HashSet::from([root_stat.pid]);
    let mut queue = std::collections::VecDeque::from([root_stat]);
    let mut children = Vec::new();
    while let Some(parent) = queue.pop_front() {
        children.clear();
        children_of(&parent, &mut children);
        for &child in &children {
            if !seen.insert(child) {
                continue;
            }
            if let Some(stat) = stat_of(child).filter(|s| s.ppid == parent.pid) {
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

    /// The orphan the subshell leaves (`(sleep 30 &)`) is outside the tree by design, and was
    /// left running after the test: under `.ci/run`'s subreaper it outlived the suite. It notes
    /// its pid, and is ended with the rest.
    #[test]
    fn both_ways_of_walking_a_tree_agree() {
        let dir = crate::testing::files::private_tempdir();
        let orphan_pid = dir.path().join("orphan");
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "sleep 30 & sleep 30 & (sleep 30 & echo $! >\"$0\") ; wait",
            ])
            .arg(&orphan_pid)
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
        let orphan = std::fs::read_to_string(&orphan_pid)
            .ok()
            .and_then(|pid| pid.trim().parse::<i32>().ok());
        if let Some(orphan) = orphan {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(orphan),
                nix::sys::signal::SIGKILL,
            );
        }
        assert!(orphan.is_some(), "the orphan noted its pid");
        assert_eq!(by_children.len(), 2, "{by_children:?}");
        assert_eq!(by_children, by_scan);
    }
}
