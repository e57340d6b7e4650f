//! Reads of the `/proc` files of processes that are not unilab's own and that need the read
//! process's memory map: `cmdline`, `environ` and `smaps_rollup` take its `mmap_lock`. A process
//! with a thread stuck holding that lock — waiting for a page of a hung NFS or FUSE mount to be
//! read in, with a change of its map queued behind it — makes such a read block in the kernel
//! for as long as the mount hangs (`environ_read → __access_remote_vm`: what makes `ps` hang).
//! Its `stat`, `status` and `task/` stay readable, so the identity rule (pid and start time) and
//! liveness checks read those directly.
//!
//! Each read here runs on a worker thread and is given up after [`PATIENCE`]: the caller gets
//! [`Blocked`], names the process, and goes on without it. So no lock unilab holds is held
//! across a read that does not return. Invariants:
//! - A worker whose read has not returned is left, never waited for. The kernel's wait for the
//!   map lock is killable, so the worker ends with unilab when unilab exits.
//! - While a read of a process (its pid and start time) has not returned, no other read of it
//!   starts: the answer is [`Blocked`] at once, so one stuck process costs one wait and one
//!   thread however often it is asked about.
//! - A worker whose read returned is kept for the next read: a read costs no thread start.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a read may take before the process is skipped as blocked: a read that returns at
/// all takes microseconds, even on a loaded host.
pub(crate) const PATIENCE: Duration = Duration::from_secs(3);

/// A read of `/proc/<pid>/<file>` that did not return in time: the process's memory map is
/// locked by a thread of it that is stuck.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Blocked {
    pub pid: u32,
    pub file: &'static str,
    /// How long the first read of the process that did not return has been waiting.
    pub waited: Duration,
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "reading /proc/{pid}/{file} did not return within {secs} s: its memory map is locked (a thread of it is stuck, as on a hung NFS or FUSE mount)",
            pid = self.pid,
            file = self.file,
            secs = self.waited.as_secs().max(1)
        )
    }
}

/// The `/proc` directory of one process, known by its pid and start time: the identity its
/// reads that do not return are remembered by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProcDir<'a> {
    pub root: &'a Path,
    pub pid: u32,
    /// Field 22 of its `stat`.
    pub start_ticks: u64,
}

impl<'a> ProcDir<'a> {
    pub(crate) fn new(root: &'a Path, pid: u32, start_ticks: u64) -> Self {
        Self {
            root,
            pid,
            start_ticks,
        }
    }

    /// Its `file`, whole: `Ok(None)` where it cannot be read (the process is gone, or another
    /// user's), [`Blocked`] where the read did not return within [`PATIENCE`].
    pub(crate) fn read(&self, file: &'static str) -> Result<Option<Vec<u8>>, Blocked> {
        self.read_within(file, PATIENCE)
    }

    /// The NUL-separated entries of its `file` (`cmdline`, `environ`): none where it cannot be
    /// read, [`Blocked`] where the read did not return within [`PATIENCE`].
    pub(crate) fn entries(&self, file: &'static str) -> Result<Vec<Vec<u8>>, Blocked> {
        Ok(self
            .read(file)?
            .map(|bytes| split_entries(&bytes))
            .unwrap_or_default())
    }

    /// Its command line, each argument as text; empty where it cannot be read.
    pub(crate) fn cmdline(&self) -> Result<Vec<String>, Blocked> {
        Ok(self
            .entries("cmdline")?
            .iter()
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect())
    }
}

fn split_entries(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// Which process a read is of: its `/proc`, pid and start time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    proc_root: PathBuf,
    pid: u32,
    start_ticks: u64,
}

/// A read that did not return in time, until it does.
struct Stuck {
    target: Target,
    since: Instant,
    returned: Arc<AtomicBool>,
}

/// The reads that have not returned yet.
static STUCK: Mutex<Vec<Stuck>> = Mutex::new(Vec::new());

/// Workers waiting for a read to do.
static IDLE: Mutex<Vec<Worker>> = Mutex::new(Vec::new());

/// Files to read one after the other, each answered as it is read.
struct Job {
    /// Each file, and whether its read has returned.
    paths: Vec<(PathBuf, Arc<AtomicBool>)>,
    /// Set once the caller gave up on a read of this job: the rest is not read.
    abandoned: Arc<AtomicBool>,
}

/// A thread that reads the files it is sent, in order, and sends back what each held.
struct Worker {
    jobs: mpsc::Sender<Job>,
    replies: mpsc::Receiver<Option<Vec<u8>>>,
}

impl Worker {
    /// A new worker; `None` where no thread can be started.
    fn spawn() -> Option<Self> {
        let (jobs, incoming) = mpsc::channel::<Job>();
        let (reply, replies) = mpsc::channel();
        std::thread::Builder::new()
            .name("unilab-proc-read".into())
            .spawn(move || {
                for job in incoming {
                    for (path, returned) in &job.paths {
                        if job.abandoned.load(Ordering::Acquire) {
                            break;
                        }
                        let bytes = std::fs::read(path).ok();
                        returned.store(true, Ordering::Release);
                        // Nobody waits any more for a read that came back too late: the
                        // caller dropped this worker, and it ends here.
                        if reply.send(bytes).is_err() {
                            return;
                        }
                    }
                }
            })
            .ok()?;
        Some(Self { jobs, replies })
    }
}

/// Since when a read of `target` has been stuck, if one is; forgets the reads that returned.
fn stuck_since(target: &Target) -> Option<Instant> {
    let mut stuck = STUCK.lock().unwrap_or_else(PoisonError::into_inner);
    stuck.retain(|s| !s.returned.load(Ordering::Acquire));
    stuck.iter().find(|s| &s.target == target).map(|s| s.since)
}

/// What a read of one process's file gave: its bytes, `None` where it cannot be read,
/// [`Blocked`] where the read did not return in time.
pub(crate) type Read = Result<Option<Vec<u8>>, Blocked>;

/// `file` of each of `dirs`, in order, read one after the other on one worker thread (one
/// hand-over for all of them), each read given [`PATIENCE`]: a read that does not return is
/// given up, its process named [`Blocked`], and the rest are read on another worker.
pub(crate) fn read_each(dirs: &[ProcDir<'_>], file: &'static str) -> Vec<Read> {
    read_each_within(dirs, file, PATIENCE)
}

fn read_each_within(dirs: &[ProcDir<'_>], file: &'static str, patience: Duration) -> Vec<Read> {
    let mut reads: Vec<Read> = vec![Ok(None); dirs.len()];
    let target = |dir: &ProcDir<'_>| Target {
        proc_root: dir.root.to_path_buf(),
        pid: dir.pid,
        start_ticks: dir.start_ticks,
    };
    // A process whose earlier read has not returned is answered at once.
    let mut pending: Vec<usize> = Vec::with_capacity(dirs.len());
    for (at, dir) in dirs.iter().enumerate() {
        match stuck_since(&target(dir)) {
            Some(since) => {
                reads[at] = Err(Blocked {
                    pid: dir.pid,
                    file,
                    waited: since.elapsed(),
                });
            }
            None => pending.push(at),
        }
    }
    while !pending.is_empty() {
        let idle = IDLE.lock().unwrap_or_else(PoisonError::into_inner).pop();
        // Without a thread to read on, the files are not read (as if they were another user's).
        let Some(worker) = idle.or_else(Worker::spawn) else {
            break;
        };
        let paths: Vec<(PathBuf, Arc<AtomicBool>)> = pending
            .iter()
            .map(|&at| {
                let dir = &dirs[at];
                let path = dir.root.join(dir.pid.to_string()).join(file);
                (path, Arc::new(AtomicBool::new(false)))
            })
            .collect();
        let returned: Vec<Arc<AtomicBool>> = paths.iter().map(|p| Arc::clone(&p.1)).collect();
        let abandoned = Arc::new(AtomicBool::new(false));
        let job = Job {
            paths,
            abandoned: Arc::clone(&abandoned),
        };
        if worker.jobs.send(job).is_err() {
            break;
        }
        let mut done = 0;
        let mut began = Instant::now();
        let mut rest = Vec::new();
        while done < pending.len() {
            let at = pending[done];
            match worker.replies.recv_timeout(patience) {
                Ok(bytes) => reads[at] = Ok(bytes),
                Err(RecvTimeoutError::Timeout) => {
                    abandoned.store(true, Ordering::Release);
                    STUCK
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(Stuck {
                            target: target(&dirs[at]),
                            since: began,
                            returned: Arc::clone(&returned[done]),
                        });
                    reads[at] = Err(Blocked {
                        pid: dirs[at].pid,
                        file,
                        waited: began.elapsed(),
                    });
                    // The worker is left to its read; the others go to another.
                    rest = pending.split_off(done + 1);
                    break;
                }
                Err(RecvTimeoutError::Disconnected) => return reads,
            }
            done += 1;
            began = Instant::now();
        }
        if done == pending.len() {
            IDLE.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(worker);
        }
        pending = rest;
    }
    reads
}

impl ProcDir<'_> {
    /// [`ProcDir::read`], giving up after `patience`.
    fn read_within(
        &self,
        file: &'static str,
        patience: Duration,
    ) -> Result<Option<Vec<u8>>, Blocked> {
        read_each_within(std::slice::from_ref(self), file, patience)
            .pop()
            .unwrap_or(Ok(None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::proc::FakeProc;

    #[test]
    fn a_processes_own_command_line_is_read_whole() {
        let me = ProcDir {
            root: Path::new("/proc"),
            pid: std::process::id(),
            start_ticks: 0,
        };
        let expected: Vec<String> = std::env::args().collect();
        assert_eq!(me.cmdline().unwrap(), expected);
        let gone = ProcDir {
            pid: u32::MAX,
            ..me
        };
        assert_eq!(gone.read("environ"), Ok(None), "no such process");
    }

    /// Reads handed over together: a process whose read does not return is named, and the ones
    /// after it in the hand-over are still read (on another worker), each once.
    #[test]
    fn one_read_that_does_not_return_costs_its_process_alone() {
        let mut proc = FakeProc::new()
            .with(81, 100, 'S', 1000)
            .with(82, 200, 'S', 1000)
            .with(83, 300, 'S', 1000)
            .cmdline_of(81, &["first"])
            .cmdline_of(83, &["third"]);
        let fifo = proc.never_returns(82, "cmdline");
        let dirs = [
            ProcDir::new(proc.root(), 81, 100),
            ProcDir::new(proc.root(), 82, 200),
            ProcDir::new(proc.root(), 83, 300),
        ];
        let patience = Duration::from_millis(200);
        let reads = read_each_within(&dirs, "cmdline", patience);
        assert_eq!(reads[0], Ok(Some(b"first\0".to_vec())));
        assert_eq!(reads[1].as_ref().map_err(|b| b.pid), Err(82));
        assert_eq!(reads[2], Ok(Some(b"third\0".to_vec())));
        // Asked again while its read is stuck: answered at once, the others read.
        let began = Instant::now();
        let again = read_each_within(&dirs, "cmdline", Duration::from_secs(60));
        assert!(began.elapsed() < Duration::from_secs(60));
        assert_eq!(again[1].as_ref().map_err(|b| b.pid), Err(82));
        assert_eq!(again[2], Ok(Some(b"third\0".to_vec())));
        drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
    }

    /// A read that never returns (here a FIFO nobody opens for writing, in a fake `/proc`)
    /// is given up after the patience, and the process is not read again until that read
    /// returns: later reads are answered at once.
    #[test]
    fn a_read_that_does_not_return_is_given_up_and_not_started_again_until_it_returns() {
        let mut proc = FakeProc::new()
            .with(77, 4242, 'S', 1000)
            .cmdline_of(77, &["stuck", "--flag"]);
        let fifo = proc.never_returns(77, "environ");
        let stuck = ProcDir {
            root: proc.root(),
            pid: 77,
            start_ticks: 4242,
        };
        let patience = Duration::from_millis(200);
        let blocked = stuck.read_within("environ", patience).unwrap_err();
        assert_eq!((blocked.pid, blocked.file), (77, "environ"));
        assert!(blocked.waited >= patience, "{blocked:?}");
        assert!(
            blocked
                .to_string()
                .starts_with("reading /proc/77/environ did not return within 1 s"),
            "{blocked}"
        );
        let began = Instant::now();
        let again = stuck
            .read_within("cmdline", Duration::from_secs(60))
            .unwrap_err();
        assert_eq!((again.pid, again.file), (77, "cmdline"));
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "answered at once"
        );
        // The stuck read returns once a writer comes and goes; the process is read again.
        drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
        let read_again =
            crate::time::poll(Duration::from_secs(30), Duration::from_millis(10), || {
                stuck.read_within("cmdline", Duration::from_secs(30)).ok()
            });
        assert_eq!(
            read_again.flatten().map(|bytes| split_entries(&bytes)),
            Some(vec![b"stuck".to_vec(), b"--flag".to_vec()])
        );
    }
}
