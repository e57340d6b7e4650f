//! Data shared by the benchmarks.

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use unilab::ProcessSample;
use unilab::testing as process;

/// The processes of the `i`-th sample of an `n`-process training tree.
#[allow(dead_code)] // not every benchmark builds one
pub fn training_tree(i: u64, n: u32) -> Vec<ProcessSample> {
    (0..n)
        .map(|p| ProcessSample {
            pid: 1000 + p,
            ppid: 999,
            start_ticks: 5_000 + u64::from(p),
            name: format!("worker-{p}"),
            state: 'S',
            rss_bytes: 1 << 30,
            cpu_ticks: i + u64::from(p),
            reaped_children_cpu_ticks: 0,
            threads: 12,
            open_fds: Some(40),
            read_bytes: Some(i << 10),
            write_bytes: Some(i << 8),
        })
        .collect()
}

/// The global allocator, counting the bytes live and their peak.
struct Counting;

static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static PEAK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only counts are added.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        use std::sync::atomic::Ordering::Relaxed;
        let live = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(live, Relaxed);
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most heap `f` had in use at once, above what was live before it, in MiB.
#[allow(dead_code)] // not every benchmark weighs its heap
pub fn peak_heap_mib<T>(f: impl FnOnce() -> T) -> f64 {
    use std::sync::atomic::Ordering::Relaxed;
    let before = LIVE.load(Relaxed);
    PEAK.store(before, Relaxed);
    std::hint::black_box(f());
    (PEAK.load(Relaxed) - before) as f64 / (1024.0 * 1024.0)
}

/// The sampler the sampling benchmarks time: `/proc`, no GPU stream, and a progress directory of
/// 20 checkpoint files, kept (with its files) as long as the directory returned beside it.
#[allow(dead_code)] // only the benchmarks of a real tree sample one
pub fn checkpoint_sampler() -> (tempfile::TempDir, unilab::testing::sampler::Sampler) {
    use unilab::testing::sampler::{HeldDir, Sampler};
    let progress = tempfile::tempdir().expect("tempdir");
    for i in 0..20 {
        std::fs::write(progress.path().join(format!("checkpoint-{i}")), b"x").expect("write");
    }
    let sampler = Sampler::new(
        std::path::PathBuf::from("/proc"),
        HeldDir::open(progress.path()).expect("hold the progress directory"),
        None,
    );
    (progress, sampler)
}

/// A shell with `n` sleeping children; killed with its children on drop.
#[allow(dead_code)] // only the benchmarks of a real tree spawn one
pub struct Tree {
    pub root: Child,
}

#[allow(dead_code)]
impl Tree {
    pub fn spawn(n: usize) -> Self {
        let root = Command::new("sh")
            .arg("-c")
            .arg(format!("for i in $(seq {n}); do sleep 600 & done; wait"))
            .spawn()
            .expect("spawn the tree");
        let pid = root.id();
        let started = std::time::Instant::now();
        while process::descendants(pid, &process::all_processes(Path::new("/proc"))).len() < n {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the tree never grew"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Tree { root }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let pid = self.root.id();
        for stat in process::descendants(pid, &process::all_processes(Path::new("/proc"))) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(stat.pid as i32),
                nix::sys::signal::SIGKILL,
            );
        }
        let _ = self.root.kill();
        let _ = self.root.wait();
    }
}

/// The first field of a task's `schedstat`: its time on a CPU, in nanoseconds.
#[allow(dead_code)] // only the benchmarks of a supervisor's CPU read it
pub fn schedstat_ns(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The fields of `/proc/<pid>/stat` after the command's name: `[0]` the state, `[11]` and
/// `[12]` utime and stime.
#[allow(dead_code)] // only the benchmarks of a supervisor's CPU read it
pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = text.rsplit_once(") ")?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}
