//! One sample of a soak: the whole process tree from `/proc`, the GPUs from `nvidia-smi`, and the
//! progress directory.
//!
//! nvidia-smi is polled by its own thread, so a hung or failing nvidia-smi is recorded as a
//! sampler error and never stalls the process sampling or the schedule.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use super::progress::HeldDir;
use crate::event::soak::{GpuSample, ProcessSample, Sample};
use crate::gpu::smi;
use crate::process::{self, ProcStat};
use crate::tool::{Cancel, Tool};

/// Bytes in a memory page, for turning RSS pages into bytes.
fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|p| u64::try_from(p).ok())
        .unwrap_or(4096)
}

/// The samples of every descendant of `root` (the soak's guard), as `/proc` shows them now.
pub(crate) fn process_tree(proc_root: &Path, root: u32) -> Vec<ProcessSample> {
    let page = page_size();
    let mut buf = Vec::with_capacity(4096);
    process::tree(proc_root, root)
        .into_iter()
        .map(|stat| process_sample(proc_root, &stat, page, &mut buf))
        .collect()
}

fn process_sample(
    proc_root: &Path,
    stat: &ProcStat,
    page: u64,
    buf: &mut Vec<u8>,
) -> ProcessSample {
    let dir = proc_root.join(stat.pid.to_string());
    // `io` of another user's process is unreadable: `None`, not an error.
    let io: Option<procfs::process::Io> = process::read_proc_file(&dir.join("io"), buf)
        .and_then(|text| procfs::FromBufRead::from_buf_read(text.as_bytes()).ok());
    ProcessSample {
        pid: stat.pid,
        ppid: stat.ppid,
        start_ticks: stat.start_ticks,
        name: stat.comm.clone(),
        state: stat.state,
        rss_bytes: stat.rss_pages.saturating_mul(page),
        cpu_ticks: stat.utime + stat.stime,
        reaped_children_cpu_ticks: stat.cutime + stat.cstime,
        threads: u32::try_from(stat.num_threads).unwrap_or(u32::MAX),
        open_fds: std::fs::read_dir(dir.join("fd"))
            .ok()
            .and_then(|entries| u32::try_from(entries.count()).ok()),
        read_bytes: io.as_ref().map(|io| io.read_bytes),
        write_bytes: io.as_ref().map(|io| io.write_bytes),
    }
}

/// What the GPU poller saw last.
#[derive(Debug, Clone, Default)]
struct GpuReading {
    at: Option<Instant>,
    /// `None` when nvidia-smi failed.
    gpus: Option<Vec<GpuSample>>,
    error: Option<String>,
}

/// Polls nvidia-smi on its own thread, every `interval`. Dropping it stops the thread and kills
/// and reaps an nvidia-smi in flight: no helper of unilab's outlives the soak.
pub struct GpuPoller {
    latest: Arc<Mutex<GpuReading>>,
    /// Dropping the sender wakes the poller and ends it.
    stop: Option<std::sync::mpsc::Sender<()>>,
    cancel: Cancel,
    thread: Option<std::thread::JoinHandle<()>>,
    /// How long without an answer before that is itself the error: two intervals and a timeout.
    patience: Duration,
    started: Instant,
}

impl GpuPoller {
    pub fn start(smi: Tool, interval: Duration) -> Self {
        let timeout = smi.timeout;
        let cancel = Cancel::default();
        let smi = smi.cancelled_by(cancel.clone()).per_sample();
        let latest = Arc::new(Mutex::new(GpuReading::default()));
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let shared = Arc::clone(&latest);
        let thread = std::thread::spawn(move || {
            loop {
                let began = Instant::now();
                let reading = match smi::usage(&smi) {
                    Ok(gpus) => GpuReading {
                        at: Some(Instant::now()),
                        gpus: Some(gpus),
                        error: None,
                    },
                    Err(error) => GpuReading {
                        at: Some(Instant::now()),
                        gpus: None,
                        error: Some(error.to_string()),
                    },
                };
                if let Ok(mut slot) = shared.lock() {
                    *slot = reading;
                }
                let wait = (began + interval).saturating_duration_since(Instant::now());
                if !matches!(
                    stopped.recv_timeout(wait),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                ) {
                    break;
                }
            }
        });
        Self {
            latest,
            stop: Some(stop),
            cancel,
            thread: Some(thread),
            patience: interval * 2 + timeout,
            started: Instant::now(),
        }
    }

    /// The latest reading, with its compute processes narrowed to `pids`; `None` while none is
    /// known — before the first answer (no error: it is on its way), after a failure, or when
    /// nvidia-smi has not answered for too long (with the error saying so).
    pub fn reading(&self, pids: &[u32]) -> (Option<Vec<GpuSample>>, Option<String>) {
        let reading = self.latest.lock().map(|r| r.clone()).unwrap_or_default();
        let since = reading.at.unwrap_or(self.started);
        if since.elapsed() > self.patience {
            return (
                None,
                Some(format!(
                    "nvidia-smi has not answered for {:.1} s",
                    since.elapsed().as_secs_f64()
                )),
            );
        }
        let gpus = reading.gpus.map(|gpus| {
            gpus.into_iter()
                .map(|mut gpu| {
                    gpu.processes.retain(|p| pids.contains(&p.pid));
                    gpu
                })
                .collect()
        });
        (gpus, reading.error)
    }
}

impl Drop for GpuPoller {
    fn drop(&mut self) {
        self.cancel.fire();
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Takes one sample of the tree under `root`.
pub struct Sampler {
    pub proc_root: PathBuf,
    pub progress: HeldDir,
    pub gpus: Option<GpuPoller>,
}

impl Sampler {
    /// Samples the tree under `root` (the guard, whose reaped children's CPU time is the tree's
    /// that is gone). `after_exit`: the command had exited before this sample began.
    pub fn sample(&self, index: u64, elapsed: Duration, root: u32, after_exit: bool) -> Sample {
        let began = Instant::now();
        let processes = process_tree(&self.proc_root, root);
        let mut buf = Vec::with_capacity(1024);
        let reaped_cpu_ticks = process::read_proc_file(
            &self.proc_root.join(root.to_string()).join("stat"),
            &mut buf,
        )
        .and_then(process::parse_stat)
        .map_or(0, |guard| guard.cutime + guard.cstime);
        let pids: Vec<u32> = processes.iter().map(|p| p.pid).collect();
        let mut errors = Vec::new();
        let gpus = match &self.gpus {
            Some(poller) => {
                let (gpus, error) = poller.reading(&pids);
                errors.extend(error);
                gpus
            }
            None => None,
        };
        let (progress, moved) = self.progress.signature();
        errors.extend(moved);
        Sample {
            index,
            elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            after_exit,
            processes,
            reaped_cpu_ticks,
            gpus,
            progress,
            sampler_cost_us: u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX),
            errors,
        }
    }
}
