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

struct Job {
    path: PathBuf,
    returned: Arc<AtomicBool>,
}

/// A thread that reads files it is sent, one at a time, and sends back what each held.
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
                    let bytes = std::fs::read(&job.path).ok();
                    job.returned.store(true, Ordering::Release);
                    // Nobody waits any more for a read that came back too late: the caller
                    // dropped this worker, and it ends here.
                    if reply.send(bytes).is_err() {
                        break;
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

impl ProcDir<'_> {
    /// [`ProcDir::read`], giving up after `patience`.
    fn read_within(
        &self,
        file: &'static str,
        patience: Duration,
    ) -> Result<Option<Vec<u8>>, Blocked> {
        let pid = self.pid;
        let target = Target {
            proc_root: self.root.to_path_buf(),
            pid,
            start_ticks: self.start_ticks,
        };
        if let Some(since) = stuck_since(&target) {
            return Err(Blocked {
                pid,
                file,
                waited: since.elapsed(),
            });
        }
        let idle = IDLE.lock().unwrap_or_else(PoisonError::into_inner).pop();
        // Without a thread to read on, the file is not read (as if it were another user's).
        let Some(worker) = idle.or_else(Worker::spawn) else {
            return Ok(None);
        };
        let returned = Arc::new(AtomicBool::new(false));
        let began = Instant::now();
        let job = Job {
            path: self.root.join(pid.to_string()).join(file),
            returned: Arc::clone(&returned),
        };
        if worker.jobs.send(job).is_err() {
            return Ok(None);
        }
        match worker.replies.recv_timeout(patience) {
            Ok(bytes) => {
                IDLE.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(worker);
                Ok(bytes)
            }
            Err(RecvTimeoutError::Timeout) => {
                STUCK
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Stuck {
                        target,
                        since: began,
                        returned,
                    });
                Err(Blocked {
                    pid,
                    file,
                    waited: began.elapsed(),
                })
            }
            Err(RecvTimeoutError::Disconnected) => Ok(None),
        }
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
