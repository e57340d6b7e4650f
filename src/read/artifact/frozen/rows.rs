//! The rows of `samples` of `/2` and `/3`, frozen: each row the tree's totals at one instant,
//! a list of GPUs without their health; the CPU clock as it was; the peaks and totals of
//! `summary`. Nothing here may change.

use serde::Serialize;
use serde_json::{Value, json};

use super::seconds;
use crate::event::soak::{ProcessSample, ProgressSignature, Sample, SoakStart};
use crate::read::fold::Measured;
use crate::read::rows::Tally;
use crate::read::shown::SummaryShown;

/// The sum of the known values; `None` when none is known.
fn sum_known(values: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    values.flatten().reduce(|a, b| a + b)
}

/// CPU seconds of the whole tree, living and reaped, never decreasing: a process whose parent
/// lets the kernel reap it (SIGCHLD ignored) takes its time with it, and the series then holds
/// its last value rather than dropping.
pub(super) struct CpuClock {
    ticks_per_second: f64,
    total_ticks: u64,
    last: Option<(f64, f64)>,
}

impl CpuClock {
    /// A clock of ticks counted at `ticks_per_second`.
    pub(super) fn new(ticks_per_second: u64) -> Self {
        Self {
            ticks_per_second: (ticks_per_second as f64).max(1.0),
            total_ticks: 0,
            last: None,
        }
    }

    /// This sample's cumulative CPU seconds and the CPU % since the previous sample.
    pub(super) fn advance(&mut self, sample: &Sample) -> (f64, Option<f64>) {
        let tree: u64 = sample.reaped_cpu_ticks
            + sample
                .processes
                .iter()
                .map(|p| p.cpu_ticks + p.reaped_children_cpu_ticks)
                .sum::<u64>();
        self.total_ticks = self.total_ticks.max(tree);
        let cpu = self.total_ticks as f64 / self.ticks_per_second;
        let at = seconds(sample.elapsed_ms);
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

/// One GPU of a sample row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(in crate::read) struct GpuRow<'a> {
    pub index: u32,
    pub memory_total_mib: Option<u64>,
    pub memory_used_mib: Option<u64>,
    pub tree_memory_mib: Option<u64>,
    pub utilization_percent: Option<u32>,
    pub uuid: &'a str,
}

/// One row of `samples`: the tree's totals at one instant. Fields in the canonical (sorted) key
/// order, so that serialising the row gives the bytes serialising it as a JSON object would.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(in crate::read) struct SampleRow<'a> {
    pub after_exit: bool,
    pub cpu_percent: Option<f64>,
    pub cpu_seconds: f64,
    pub elapsed_seconds: f64,
    pub errors: &'a [String],
    pub gpus: Option<Vec<GpuRow<'a>>>,
    pub host_gpu_memory_used_mib: Option<u64>,
    pub index: u64,
    pub open_fds: u64,
    pub processes: u64,
    pub progress_bytes: u64,
    pub progress_files: u64,
    pub read_bytes: u64,
    pub rss_bytes: u64,
    pub sampler_cost_us: u64,
    pub threads: u64,
    pub tree_gpu_memory_mib: Option<u64>,
    pub write_bytes: u64,
}

/// Turns samples into rows, one at a time, keeping what `summary` needs: the peaks, the last
/// row and the sampler's cost. Nothing here grows with the number of samples.
pub(super) struct Rows {
    cpu: CpuClock,
    samples: u64,
    peak_processes: u64,
    peak_rss_bytes: u64,
    peak_threads: u64,
    peak_open_fds: u64,
    peak_cpu_percent: Option<f64>,
    peak_host_gpu_memory_used_mib: Option<u64>,
    peak_tree_gpu_memory_mib: Option<u64>,
    last: Option<(f64, u64, u64)>,
    sampler_errors: u64,
    cost_total: u64,
    cost_max: u64,
    pub(super) last_progress: ProgressSignature,
}

impl Rows {
    pub(super) fn new(start: &SoakStart) -> Self {
        Self {
            cpu: CpuClock::new(start.ticks_per_second),
            samples: 0,
            peak_processes: 0,
            peak_rss_bytes: 0,
            peak_threads: 0,
            peak_open_fds: 0,
            peak_cpu_percent: None,
            peak_host_gpu_memory_used_mib: None,
            peak_tree_gpu_memory_mib: None,
            last: None,
            sampler_errors: 0,
            cost_total: 0,
            cost_max: 0,
            last_progress: ProgressSignature::default(),
        }
    }

    pub(super) fn row<'s>(&mut self, sample: &'s Sample) -> SampleRow<'s> {
        let sum = |f: fn(&ProcessSample) -> u64| -> u64 { sample.processes.iter().map(f).sum() };
        let (cpu_seconds, cpu_percent) = self.cpu.advance(sample);
        let gpus = sample.gpus.as_ref();
        let row = SampleRow {
            index: sample.index,
            elapsed_seconds: seconds(sample.elapsed_ms),
            after_exit: sample.after_exit,
            processes: sample.processes.len() as u64,
            rss_bytes: sum(|p| p.rss_bytes),
            cpu_seconds,
            cpu_percent,
            threads: sum(|p| u64::from(p.threads)),
            open_fds: sum(|p| u64::from(p.open_fds.unwrap_or(0))),
            read_bytes: sum(|p| p.read_bytes.unwrap_or(0)),
            write_bytes: sum(|p| p.write_bytes.unwrap_or(0)),
            gpus: gpus.map(|gpus| {
                gpus.iter()
                    .map(|g| GpuRow {
                        index: g.index,
                        uuid: &g.uuid,
                        utilization_percent: g.utilization_percent,
                        memory_used_mib: g.memory_used_mib,
                        memory_total_mib: g.memory_total_mib,
                        tree_memory_mib: g.tree_memory_mib(),
                    })
                    .collect()
            }),
            host_gpu_memory_used_mib: gpus
                .and_then(|g| sum_known(g.iter().map(|g| g.memory_used_mib))),
            tree_gpu_memory_mib: sample.tree_gpu_memory_mib(),
            progress_files: sample.progress.files,
            progress_bytes: sample.progress.bytes,
            sampler_cost_us: sample.sampler_cost_us,
            errors: &sample.errors,
        };
        self.samples += 1;
        self.peak_processes = self.peak_processes.max(row.processes);
        self.peak_rss_bytes = self.peak_rss_bytes.max(row.rss_bytes);
        self.peak_threads = self.peak_threads.max(row.threads);
        self.peak_open_fds = self.peak_open_fds.max(row.open_fds);
        self.peak_cpu_percent = max_known(self.peak_cpu_percent, row.cpu_percent, f64::max);
        self.peak_host_gpu_memory_used_mib = max_known(
            self.peak_host_gpu_memory_used_mib,
            row.host_gpu_memory_used_mib,
            u64::max,
        );
        self.peak_tree_gpu_memory_mib = max_known(
            self.peak_tree_gpu_memory_mib,
            row.tree_gpu_memory_mib,
            u64::max,
        );
        self.last = Some((row.cpu_seconds, row.read_bytes, row.write_bytes));
        self.sampler_errors += sample.errors.len() as u64;
        self.cost_total += sample.sampler_cost_us;
        self.cost_max = self.cost_max.max(sample.sampler_cost_us);
        self.last_progress = sample.progress;
        row
    }

    /// What the rows tell of the run, as today's views read it (no judgment of resources).
    pub(super) fn tally(&self) -> Tally {
        let (cpu, read, write) = self.last.unwrap_or((0.0, 0, 0));
        Tally {
            summary: SummaryShown {
                samples: self.samples,
                peak_processes: self.peak_processes,
                peak_rss_bytes: self.peak_rss_bytes,
                peak_threads: self.peak_threads,
                peak_open_fds: self.peak_open_fds,
                peak_cpu_percent: self.peak_cpu_percent,
                peak_host_gpu_memory_used_mib: self.peak_host_gpu_memory_used_mib,
                peak_tree_gpu_memory_mib: self.peak_tree_gpu_memory_mib,
                final_cpu_seconds: cpu,
                final_read_bytes: read,
                final_write_bytes: write,
                sampler_errors: self.sampler_errors,
                sampler_cost_us_mean: self.cost_total.checked_div(self.samples).unwrap_or(0),
                sampler_cost_us_max: self.cost_max,
            },
            last_progress: self.last_progress,
            judged: None,
        }
    }

    pub(super) fn summary(&self) -> Value {
        let (cpu, read, write) = self.last.unwrap_or((0.0, 0, 0));
        json!({
            "samples": self.samples,
            "peak_processes": self.peak_processes,
            "peak_rss_bytes": self.peak_rss_bytes,
            "peak_threads": self.peak_threads,
            "peak_open_fds": self.peak_open_fds,
            "peak_cpu_percent": self.peak_cpu_percent,
            "peak_host_gpu_memory_used_mib": self.peak_host_gpu_memory_used_mib,
            "peak_tree_gpu_memory_mib": self.peak_tree_gpu_memory_mib,
            "final_cpu_seconds": cpu,
            "final_read_bytes": read,
            "final_write_bytes": write,
            "sampler_errors": self.sampler_errors,
            "sampler_cost_us_mean": self.cost_total.checked_div(self.samples).unwrap_or(0),
            "sampler_cost_us_max": self.cost_max,
        })
    }
}

/// The larger of two values where either may be unknown.
fn max_known<T>(a: Option<T>, b: Option<T>, max: fn(T, T) -> T) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(max(a, b)),
        (a, b) => a.or(b),
    }
}

/// The rows of `samples` as JSON values, and what a head needs of them.
pub(super) fn all(start: &SoakStart, samples: &[Measured]) -> (Rows, Vec<Value>) {
    let mut rows = Rows::new(start);
    let values = samples
        .iter()
        .map(|(s, ..)| serde_json::to_value(rows.row(s)).unwrap_or(Value::Null))
        .collect();
    (rows, values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::soak::GpuSample;

    fn sample(elapsed_ms: u64, live_ticks: &[u64], reaped_cpu_ticks: u64) -> Sample {
        Sample {
            index: 0,
            elapsed_ms,
            after_exit: false,
            processes: live_ticks
                .iter()
                .enumerate()
                .map(|(i, ticks)| ProcessSample {
                    pid: i as u32 + 10,
                    ppid: 1,
                    start_ticks: 1,
                    name: "p".into(),
                    state: 'R',
                    rss_bytes: 0,
                    cpu_ticks: *ticks,
                    reaped_children_cpu_ticks: 0,
                    threads: 1,
                    open_fds: None,
                    read_bytes: None,
                    write_bytes: None,
                })
                .collect(),
            reaped_cpu_ticks,
            gpus: None,
            progress: ProgressSignature::default(),
            sampler_cost_us: 0,
            errors: Vec::new(),
        }
    }

    #[test]
    fn cpu_time_is_read_at_the_recorded_tick_rate_and_never_decreases() {
        // Recorded on a host of 250 ticks a second, whatever this host's rate is.
        let mut cpu = CpuClock {
            ticks_per_second: 250.0,
            total_ticks: 0,
            last: None,
        };
        assert_eq!(cpu.advance(&sample(0, &[250], 0)), (1.0, None));
        // A child exited and was reaped: its 500 ticks move to the guard's count.
        assert_eq!(cpu.advance(&sample(1000, &[250], 500)), (3.0, Some(200.0)));
        // Reaped by nobody who counts (SIGCHLD ignored): the total holds, it does not drop.
        assert_eq!(cpu.advance(&sample(2000, &[], 0)), (3.0, Some(0.0)));
    }

    #[test]
    fn the_trees_gpu_memory_is_null_only_when_none_of_its_processes_reported_it() {
        let gpu = |processes: Vec<Option<u64>>| GpuSample {
            index: 0,
            uuid: "GPU-1".into(),
            memory_used_mib: Some(10),
            memory_total_mib: None,
            utilization_percent: None,
            processes: processes
                .into_iter()
                .enumerate()
                .map(
                    |(pid, used_memory_mib)| crate::event::soak::GpuProcessSample {
                        pid: pid as u32,
                        used_memory_mib,
                    },
                )
                .collect(),
        };
        assert_eq!(gpu(vec![]).tree_memory_mib(), Some(0));
        assert_eq!(gpu(vec![None]).tree_memory_mib(), None);
        assert_eq!(
            gpu(vec![None, Some(5), Some(7)]).tree_memory_mib(),
            Some(12)
        );
        assert_eq!(sum_known([None, None].into_iter()), None);
        assert_eq!(sum_known([None, Some(3)].into_iter()), Some(3));
    }
}
