//! One sample of a soak: the whole process tree from `/proc`, the GPUs from `nvidia-smi`, and the
//! progress directory; and the CPU clock that reads a sample's ticks as seconds.
//!
//! nvidia-smi is polled by its own thread, so a hung or failing nvidia-smi is recorded as a
//! sampler error and never stalls the process sampling or the schedule.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use super::progress::HeldDir;
use crate::event::soak::{Measures, ProcessSample, Sample};
use crate::proc_read::ProcDir;
use crate::process::{self, ProcStat};

/// Bytes in a memory page, for turning RSS pages into bytes.
fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|p| u64::try_from(p).ok())
        .unwrap_or(4096)
}

/// How many samples an idle process's open files and I/O counters may be carried over before
/// they are read again.
const DETAIL_EVERY: u64 = 10;

/// What a process's costlier files said when last read: its open file count (the `fd/` listing),
/// I/O bytes (`io`) and proportional set size (`smaps_rollup`, which walks its page tables).
/// Every sample reads each process's `stat`; these are read again only for a process that used
/// CPU since (nothing else can open a file or do I/O) or whose resident size changed (its PSS
/// did too; an allocation can take less than a clock tick), or every [`DETAIL_EVERY`] samples,
/// which keeps a sample of a large, mostly idle tree near the cost of the `stat` reads alone.
#[derive(Debug, Clone, Copy)]
struct Detail {
    /// CPU ticks and resident pages when it was read.
    activity: (u64, u64),
    read_at: u64,
    open_fds: Option<u32>,
    io: Option<(u64, u64)>,
    pss: Option<u64>,
}

/// The samples of `tree`, every descendant of the soak's guard as `/proc` shows them now, and
/// each one's proportional set size; `fresh`: read every process's costlier files now (the
/// sample after the command exited, which ends the series). What could not be read in time goes
/// to `errors`.
fn process_tree(
    proc_root: &Path,
    tree: Vec<ProcStat>,
    (index, fresh): (u64, bool),
    details: &mut HashMap<(u32, u64), Detail>,
    errors: &mut Vec<String>,
) -> (Vec<ProcessSample>, Vec<Option<u64>>) {
    let page = page_size();
    let mut buf = Vec::with_capacity(4096);
    let mut pss = Vec::new();
    // Each process's costlier files as last read where they may be carried over, else its
    // activity (they are due); the due ones' `smaps_rollup` read on the reading thread in one
    // hand-over.
    let carried: Vec<Result<Detail, (u64, u64)>> = tree
        .iter()
        .map(|stat| {
            let activity = (stat.utime + stat.stime, stat.rss_pages);
            match details.get(&(stat.pid, stat.start_ticks)) {
                Some(d) if !fresh && d.activity == activity && index < d.read_at + DETAIL_EVERY => {
                    Ok(*d)
                }
                _ => Err(activity),
            }
        })
        .collect();
    let due_dirs: Vec<ProcDir<'_>> = tree
        .iter()
        .zip(&carried)
        .filter(|(_, carried)| carried.is_err())
        .map(|(stat, _)| ProcDir::new(proc_root, stat.pid, stat.start_ticks))
        .collect();
    let mut rollups = crate::proc_read::read_each(&due_dirs, "smaps_rollup").into_iter();
    let samples: Vec<ProcessSample> = tree
        .into_iter()
        .zip(carried)
        .map(|(stat, carried)| {
            let cpu_ticks = stat.utime + stat.stime;
            let detail = carried.unwrap_or_else(|activity| {
                let rollup = rollups.next().unwrap_or(Ok(None));
                let fresh = read_detail(
                    proc_root,
                    &stat,
                    (activity, index),
                    rollup,
                    &mut buf,
                    errors,
                );
                details.insert((stat.pid, stat.start_ticks), fresh);
                fresh
            });
            pss.push(detail.pss);
            ProcessSample {
                pid: stat.pid,
                ppid: stat.ppid,
                start_ticks: stat.start_ticks,
                name: stat.comm,
                state: stat.state,
                rss_bytes: stat.rss_pages.saturating_mul(page),
                cpu_ticks,
                reaped_children_cpu_ticks: stat.cutime + stat.cstime,
                threads: u32::try_from(stat.num_threads).unwrap_or(u32::MAX),
                open_fds: detail.open_fds,
                read_bytes: detail.io.map(|io| io.0),
                write_bytes: detail.io.map(|io| io.1),
            }
        })
        .collect();
    // Forget the processes that left the tree.
    details.retain(|(pid, start), _| {
        samples
            .iter()
            .any(|p| p.pid == *pid && p.start_ticks == *start)
    });
    (samples, pss)
}

/// The proportional set size of a process (`Pss:` of `/proc/<pid>/smaps_rollup`): its private
/// pages, and each page it shares divided by how many processes share it — so that a tree's
/// processes add up to what the tree uses. `None` where unreadable (another user's process, a
/// kernel before 4.14), or where the read did not return in time (its map is locked: `errors`
/// says so).
fn read_pss(rollup: crate::proc_read::Read, errors: &mut Vec<String>) -> Option<u64> {
    match rollup {
        Ok(bytes) => parse_pss(std::str::from_utf8(&bytes?).ok()?),
        Err(blocked) => {
            errors.push(format!("pss: {blocked}"));
            None
        }
    }
}

fn parse_pss(text: &str) -> Option<u64> {
    let kib: u64 = text
        .lines()
        .find_map(|line| line.strip_prefix("Pss:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

fn read_detail(
    proc_root: &Path,
    stat: &ProcStat,
    (activity, index): ((u64, u64), u64),
    rollup: crate::proc_read::Read,
    buf: &mut Vec<u8>,
    errors: &mut Vec<String>,
) -> Detail {
    let dir = proc_root.join(stat.pid.to_string());
    // `io` of another user's process is unreadable: `None`, not an error.
    let io: Option<procfs::process::Io> = process::read_proc_file(&dir.join("io"), buf)
        .and_then(|text| procfs::FromBufRead::from_buf_read(text.as_bytes()).ok());
    Detail {
        activity,
        read_at: index,
        open_fds: open_fds(proc_root, &dir),
        io: io.map(|io| (io.read_bytes, io.write_bytes)),
        pss: read_pss(rollup, errors),
    }
}

/// How many files the process of `dir` has open: the size of its `fd` directory where the
/// kernel says it there (Linux 6.2 on: one `stat`, not a listing of every descriptor — a
/// trainer holds hundreds), else its entries counted.
fn open_fds(proc_root: &Path, dir: &Path) -> Option<u32> {
    static COUNTS_IN_SIZE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // This process has files open: a size of 0 says the kernel does not count them there.
    let counts_in_size = proc_root == Path::new("/proc")
        && *COUNTS_IN_SIZE
            .get_or_init(|| std::fs::metadata("/proc/self/fd").is_ok_and(|m| m.len() > 0));
    let fd = dir.join("fd");
    if counts_in_size {
        return std::fs::metadata(fd)
            .ok()
            .and_then(|m| u32::try_from(m.len()).ok());
    }
    std::fs::read_dir(fd)
        .ok()
        .and_then(|entries| u32::try_from(entries.count()).ok())
}

pub use crate::gpu::stream::GpuStream;

/// An `nvidia-smi` at `path`, with the tool timeout of this environment (for benchmarks).
pub fn nvidia_smi_at(path: &Path) -> crate::tool::Tool {
    crate::tool::Tool::new(path.as_os_str(), crate::tool::nvidia_smi().timeout)
}

/// Takes one sample of the tree under `root` after another.
pub struct Sampler {
    proc_root: PathBuf,
    progress: HeldDir,
    gpus: Option<GpuStream>,
    details: RefCell<HashMap<(u32, u64), Detail>>,
    /// The tree's `stat` and `children` files, kept open from one sample to the next.
    tree: RefCell<process::KeptTree>,
    /// How long a sample may spend walking the progress directory (unbounded: `None`).
    walk_budget: Option<Duration>,
}

impl Sampler {
    pub fn new(proc_root: PathBuf, progress: HeldDir, gpus: Option<GpuStream>) -> Self {
        Self {
            tree: RefCell::new(process::KeptTree::new(proc_root.clone())),
            proc_root,
            progress,
            gpus,
            details: RefCell::new(HashMap::new()),
            walk_budget: None,
        }
    }

    /// This sampler, spending at most about `budget` of each sample on the progress directory:
    /// a larger one is walked over several samples.
    pub(crate) fn with_walk_budget(mut self, budget: Duration) -> Self {
        self.walk_budget = Some(budget);
        self
    }

    /// Samples the tree under `root` (the guard, whose reaped children's CPU time is the tree's
    /// that is gone), with its measures beside it (PSS, GPU health). `after_exit`: the command had
    /// exited before this sample began.
    pub fn sample(
        &self,
        index: u64,
        elapsed: Duration,
        root: u32,
        after_exit: bool,
    ) -> (Sample, Measures) {
        super::cost::time(super::cost::Part::Sampling, || {
            self.sample_now(index, elapsed, root, after_exit)
        })
    }

    fn sample_now(
        &self,
        index: u64,
        elapsed: Duration,
        root: u32,
        after_exit: bool,
    ) -> (Sample, Measures) {
        let began = Instant::now();
        let mut errors = Vec::new();
        let (guard, tree) = self.tree.borrow_mut().tree(root).unzip();
        let (processes, pss_bytes) = process_tree(
            &self.proc_root,
            tree.unwrap_or_default(),
            (index, after_exit),
            &mut self.details.borrow_mut(),
            &mut errors,
        );
        let reaped_cpu_ticks = guard.map_or(0, |guard| guard.cutime + guard.cstime);
        let pids: Vec<u32> = processes.iter().map(|p| p.pid).collect();
        let (gpus, health) = match &self.gpus {
            Some(stream) => {
                let (gpus, health, error) = stream.reading_with_health(&pids);
                errors.extend(error);
                (gpus, health.unwrap_or_default())
            }
            None => (None, Vec::new()),
        };
        let (progress, problems) = super::cost::time(super::cost::Part::Progress, || {
            self.progress.signature_within(self.walk_budget)
        });
        errors.extend(problems);
        let sample = Sample {
            index,
            elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            after_exit,
            processes,
            reaped_cpu_ticks,
            gpus,
            progress,
            sampler_cost_us: u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX),
            errors,
        };
        let measures = Measures {
            pss_bytes,
            gpus: health,
            heartbeat: None,
        };
        (sample, measures)
    }
}

/// CPU seconds of the whole tree, living and reaped, never decreasing: a process whose parent
/// lets the kernel reap it (SIGCHLD ignored) takes its time with it, and the series then holds
/// its last value rather than dropping.
pub(crate) struct CpuClock {
    ticks_per_second: f64,
    total_ticks: u64,
    last: Option<(f64, f64)>,
}

impl CpuClock {
    /// A clock of ticks counted at `ticks_per_second`.
    pub(crate) fn new(ticks_per_second: u64) -> Self {
        Self {
            ticks_per_second: (ticks_per_second as f64).max(1.0),
            total_ticks: 0,
            last: None,
        }
    }

    /// This sample's cumulative CPU seconds and the CPU % since the previous sample.
    pub(crate) fn advance(&mut self, sample: &Sample) -> (f64, Option<f64>) {
        let tree: u64 = sample.reaped_cpu_ticks
            + sample
                .processes
                .iter()
                .map(|p| p.cpu_ticks + p.reaped_children_cpu_ticks)
                .sum::<u64>();
        self.total_ticks = self.total_ticks.max(tree);
        let cpu = self.total_ticks as f64 / self.ticks_per_second;
        let at = sample.elapsed_ms as f64 / 1000.0;
        let percent = match self.last {
            Some((cpu_before, at_before)) if at > at_before => {
                Some(((cpu - cpu_before) / (at - at_before) * 1000.0).round() / 10.0)
            }
            _ => None,
        };
        self.last = Some((cpu, at));
        (cpu, percent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::proc::FakeProc;

    /// A `/proc` of two processes: 10, the root, and its child 11 with `io` and two fds.
    fn two_processes() -> FakeProc {
        let mut fake = FakeProc::new()
            .with(10, 500, 'S', 0)
            .with(11, 500, 'S', 0)
            .parent(11, 10);
        fake.resident(10, 50);
        fake.resident(11, 50);
        fake.open_fds(11, 2);
        fake.io(11, 7, 100);
        fake
    }

    fn write_bytes(fake: &FakeProc, index: u64, details: &mut HashMap<(u32, u64), Detail>) -> u64 {
        let (tree, _) = process_tree(
            fake.root(),
            process::tree(fake.root(), 10),
            (index, false),
            details,
            &mut Vec::new(),
        );
        assert_eq!(tree.len(), 1);
        assert_eq!(tree[0].open_fds, Some(2));
        tree[0].write_bytes.unwrap()
    }

    /// A sleeping process's open files, counted as the sampler counts them (by the size of
    /// `fd/` where the kernel gives it) and by listing them: the same, its three standard files
    /// and whatever it inherited beside them.
    #[test]
    fn a_processs_open_files_are_counted() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Until its `exec`, the child still holds what the test process had open.
        let comm = format!("/proc/{}/comm", child.id());
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() != "sleep")
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let dir = Path::new("/proc").join(child.id().to_string());
        let by_size = open_fds(Path::new("/proc"), &dir);
        let listed = std::fs::read_dir(dir.join("fd")).map(|e| e.count()).ok();
        let _ = child.kill();
        let _ = child.wait();
        assert!(listed.is_some_and(|n| n >= 3), "{listed:?}");
        assert_eq!(by_size.map(|n| n as usize), listed);
    }

    #[test]
    fn an_idle_processs_costlier_files_are_read_again_only_when_it_ran_or_every_ten_samples() {
        let mut fake = two_processes();
        let mut details = HashMap::new();
        assert_eq!(write_bytes(&fake, 0, &mut details), 100);
        fake.io(11, 7, 200);
        // Idle since: carried over.
        assert_eq!(write_bytes(&fake, 1, &mut details), 100);
        // It used CPU: read again.
        fake.ran(11, 3);
        assert_eq!(write_bytes(&fake, 2, &mut details), 200);
        fake.io(11, 7, 300);
        for index in 3..2 + DETAIL_EVERY {
            assert_eq!(
                write_bytes(&fake, index, &mut details),
                200,
                "sample {index}"
            );
        }
        assert_eq!(write_bytes(&fake, 2 + DETAIL_EVERY, &mut details), 300);
        // A process that left the tree is forgotten.
        fake.reparent(11, 1);
        assert!(
            process_tree(
                fake.root(),
                process::tree(fake.root(), 10),
                (20, false),
                &mut details,
                &mut Vec::new()
            )
            .0
            .is_empty()
        );
        assert!(details.is_empty());
    }

    #[test]
    fn pss_is_read_with_the_other_costly_files_and_afresh_in_the_last_sample() {
        let mut fake = two_processes();
        fake.pss(11, 100);
        let mut details = HashMap::new();
        let mut pss = |fake: &FakeProc, index, last| {
            process_tree(
                fake.root(),
                process::tree(fake.root(), 10),
                (index, last),
                &mut details,
                &mut Vec::new(),
            )
            .1
        };
        assert_eq!(pss(&fake, 0, false), [Some(100 << 10)]);
        fake.pss(11, 200);
        assert_eq!(
            pss(&fake, 1, false),
            [Some(100 << 10)],
            "idle: carried over"
        );
        assert_eq!(
            pss(&fake, 2, true),
            [Some(200 << 10)],
            "the last sample reads afresh"
        );
        fake.pss(11, 300);
        fake.resident(11, 80);
        assert_eq!(
            pss(&fake, 3, false),
            [Some(300 << 10)],
            "its resident size changed: read again"
        );
        assert_eq!(parse_pss("Rss: 1 kB\n"), None);
        assert_eq!(parse_pss("Pss: x kB\n"), None);
    }
}
