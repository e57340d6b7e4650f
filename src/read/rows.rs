//! The rows of `samples` as this unilab reads and writes them: one typed row a sample — the
//! tree's totals at one instant, each GPU with its health — that the artifact serialises and
//! the CSV, the report, `soak show` and `soak compare` read, whatever schema the soak was
//! recorded in (a frozen artifact's rows are read into this form, what their schema lacks
//! `None`); and what the rows tell of the run as they go by ([`Tally`]: the summary's peaks and
//! totals, and what it judges of the resources).

use std::collections::BTreeMap;

use serde::Serialize;

use super::beats::BeatsRow;
use super::seconds;
use super::shown::{
    ContentionShown, GpuHealthShown, Judged, MemoryTrendShown, ProgressRateShown, SummaryShown,
};
use crate::event::soak::{
    GpuHealth, GpuProcessSample, Limits, Measures, ProcessSample, ProgressNoted, ProgressSeen,
    ProgressSignature, Sample, throttle_reasons,
};
use crate::soak::sampler::CpuClock;
use crate::soak::trend::{Slope, Trend, warmup_end};

/// One GPU of a row, with its health. Fields in the canonical (sorted) key order, so that
/// serialising it gives the bytes serialising it as a JSON object would.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuRow<'a> {
    pub ecc_uncorrected_volatile: Option<u64>,
    pub index: u32,
    pub memory_total_mib: Option<u64>,
    pub memory_used_mib: Option<u64>,
    /// The compute processes on it that are not of the tree; `None` where the soak's schema
    /// did not measure them (before `/4`).
    pub other_processes: Option<&'a [GpuProcessSample]>,
    pub power_w: Option<f64>,
    pub retired_pages_pending: Option<bool>,
    pub sm_clock_mhz: Option<u32>,
    pub temperature_c: Option<u32>,
    pub throttle_reasons: Option<Vec<String>>,
    pub tree_memory_mib: Option<u64>,
    pub utilization_percent: Option<u32>,
    pub uuid: &'a str,
}

/// One row of `samples`: the tree's totals at one instant. Fields in the canonical (sorted) key
/// order (see [`GpuRow`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SampleRow<'a> {
    /// Whether the command had exited; `None` in schema 1's rows, which do not say.
    pub after_exit: Option<bool>,
    pub cpu_percent: Option<f64>,
    pub cpu_seconds: f64,
    pub elapsed_seconds: f64,
    pub errors: &'a [String],
    /// Each GPU; `None` when unknown, and in schema 1's rows, which list none.
    pub gpus: Option<Vec<GpuRow<'a>>>,
    /// The beats since the previous sample (`null` when none arrived); left out before schema
    /// 10, which did not read them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<Option<BeatsRow<'a>>>,
    /// The memory used on every GPU, the tree's and others'.
    pub host_gpu_memory_used_mib: Option<u64>,
    pub index: u64,
    /// When progress last happened, as the supervisor decided it (Unix seconds; `null` before
    /// any); left out for a sample that recorded none (before schema 12).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_progress_at: Option<Option<f64>>,
    pub open_fds: u64,
    pub processes: u64,
    pub progress_bytes: u64,
    pub progress_files: u64,
    /// What made progress at this sample (`files`, `beat`; `null` when nothing did); left out
    /// for a sample that recorded none (before schema 12).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress_seen: Option<Option<ProgressSeen>>,
    pub read_bytes: u64,
    pub rss_bytes: u64,
    pub sampler_cost_us: u64,
    pub threads: u64,
    pub tree_gpu_memory_mib: Option<u64>,
    /// The tree's proportional set size; `None` where unread, or before `/4`.
    pub tree_pss_bytes: Option<u64>,
    pub write_bytes: u64,
    /// The GPUs' highest utilisation, which schema 1's rows hold instead of a list of GPUs;
    /// `None` in every later row. Not part of the row this unilab writes.
    #[serde(skip)]
    pub gpu_utilization_percent: Option<u32>,
    /// The progress the supervisor recorded at this sample, whole (schema 12 on; `None`
    /// before): what the views read it from. Written as `progress_seen` and `last_progress_at`.
    #[serde(skip)]
    pub progress: Option<ProgressNoted>,
}

/// What `soak show` reads of one row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PointShown {
    pub elapsed_seconds: f64,
    /// `None` before `/4`, or where no process's could be read.
    pub tree_pss_bytes: Option<u64>,
    pub rss_bytes: u64,
    pub processes: u64,
    pub progress_files: u64,
    pub progress_bytes: u64,
}

impl PointShown {
    pub(crate) fn of(row: &SampleRow<'_>) -> Self {
        Self {
            elapsed_seconds: row.elapsed_seconds,
            tree_pss_bytes: row.tree_pss_bytes,
            rss_bytes: row.rss_bytes,
            processes: row.processes,
            progress_files: row.progress_files,
            progress_bytes: row.progress_bytes,
        }
    }
}

/// The sum of the known values; `None` when none is known.
fn sum_known(values: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    values.flatten().reduce(|a, b| a + b)
}

/// The larger of two values where either may be unknown.
fn max_known<T>(a: Option<T>, b: Option<T>, max: fn(T, T) -> T) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(max(a, b)),
        (a, b) => a.or(b),
    }
}

/// What the summary keeps of one GPU over the run.
#[derive(Debug, Default)]
struct GpuRun {
    max_temperature_c: Option<u32>,
    energy_joules: f64,
    /// Whether any interval had a power reading at both ends.
    energy_known: bool,
    seconds_throttled: BTreeMap<String, f64>,
    ecc_first: Option<u64>,
    ecc_last: Option<u64>,
    seconds_shared: f64,
    peak_other_memory_mib: Option<u64>,
    /// The previous row's time, power, reasons and whether others were on it.
    last: Option<(f64, Option<f64>, Vec<String>, bool)>,
    memory: Trend,
}

impl GpuRun {
    fn add(&mut self, at: f64, gpu: &GpuRow<'_>) {
        self.max_temperature_c = self.max_temperature_c.max(gpu.temperature_c);
        let others = gpu.other_processes.unwrap_or_default();
        if let Some((before, power_before, reasons, shared)) = &self.last {
            let span = at - before;
            if let (Some(p0), Some(p1)) = (power_before, gpu.power_w) {
                self.energy_joules += (p0 + p1) / 2.0 * span;
                self.energy_known = true;
            }
            for reason in reasons {
                *self.seconds_throttled.entry(reason.clone()).or_default() += span;
            }
            if *shared {
                self.seconds_shared += span;
            }
        }
        if let Some(ecc) = gpu.ecc_uncorrected_volatile {
            self.ecc_first.get_or_insert(ecc);
            self.ecc_last = Some(ecc);
        }
        let other_memory = others
            .iter()
            .filter_map(|p| p.used_memory_mib)
            .reduce(|a, b| a + b);
        self.peak_other_memory_mib = self.peak_other_memory_mib.max(other_memory);
        if let Some(tree) = gpu.tree_memory_mib {
            self.memory.add((at * 1000.0) as u64, tree as f64);
        }
        self.last = Some((
            at,
            gpu.power_w,
            gpu.throttle_reasons.clone().unwrap_or_default(),
            !others.is_empty(),
        ));
    }
}

/// The progress directory's growth: where it stood at the first row and the last, and the
/// trend of its bytes (for its rate after the warm-up and at the end).
#[derive(Debug, Default)]
struct Progress {
    first: Option<(u64, u64, u64)>,
    last: Option<(u64, u64, u64)>,
    bytes: Trend,
}

/// Turns samples into rows, one at a time, keeping what the summary needs: the peaks, the last
/// row, the sampler's cost, the trends (bucketed) and the GPUs (few). Nothing here grows with
/// the number of samples.
pub(crate) struct Rows {
    cpu: CpuClock,
    limits: Limits,
    samples: u64,
    peak_processes: u64,
    peak_rss_bytes: u64,
    peak_threads: u64,
    peak_open_fds: u64,
    peak_cpu_percent: Option<f64>,
    peak_host_gpu_memory_used_mib: Option<u64>,
    peak_tree_gpu_memory_mib: Option<u64>,
    peak_tree_pss_bytes: Option<u64>,
    last: Option<(f64, u64, u64)>,
    last_progress: ProgressSignature,
    sampler_errors: u64,
    cost_total: u64,
    cost_max: u64,
    memory: Trend,
    last_elapsed_ms: u64,
    gpus: BTreeMap<String, GpuRun>,
    progress: Progress,
    /// Whether the rows show the beats (schema 10 on).
    beats: bool,
}

impl Rows {
    /// The rows of a soak recorded at `ticks_per_second`, held to `limits`.
    pub(crate) fn new(ticks_per_second: u64, limits: &Limits) -> Self {
        Self {
            cpu: CpuClock::new(ticks_per_second),
            limits: limits.clone(),
            samples: 0,
            peak_processes: 0,
            peak_rss_bytes: 0,
            peak_threads: 0,
            peak_open_fds: 0,
            peak_cpu_percent: None,
            peak_host_gpu_memory_used_mib: None,
            peak_tree_gpu_memory_mib: None,
            peak_tree_pss_bytes: None,
            last: None,
            last_progress: ProgressSignature::default(),
            sampler_errors: 0,
            cost_total: 0,
            cost_max: 0,
            memory: Trend::default(),
            last_elapsed_ms: 0,
            gpus: BTreeMap::new(),
            progress: Progress::default(),
            beats: false,
        }
    }

    /// These rows, showing each sample's beats (a soak recorded in schema 10's forms or later).
    pub(crate) fn with_beats(mut self, beats: bool) -> Self {
        self.beats = beats;
        self
    }

    /// The row of `sample`, measured by `measures`, with the `progress` its supervisor decided
    /// at it where its form recorded that (schema 12 on: the samples, not the start, say so).
    pub(crate) fn row<'s>(
        &mut self,
        sample: &'s Sample,
        measures: &'s Measures,
        progress: Option<&ProgressNoted>,
    ) -> SampleRow<'s> {
        let row = self.read(sample, measures, progress);
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
        if let Some(pss) = row.tree_pss_bytes {
            self.peak_tree_pss_bytes = self.peak_tree_pss_bytes.max(Some(pss));
            self.memory.add(sample.elapsed_ms, pss as f64);
        }
        self.last_elapsed_ms = sample.elapsed_ms;
        for gpu in row.gpus.iter().flatten() {
            self.gpus
                .entry(gpu.uuid.to_owned())
                .or_default()
                .add(row.elapsed_seconds, gpu);
        }
        let at = (
            sample.elapsed_ms,
            sample.progress.bytes,
            sample.progress.files,
        );
        self.progress.first.get_or_insert(at);
        self.progress.last = Some(at);
        self.progress
            .bytes
            .add(sample.elapsed_ms, sample.progress.bytes as f64);
        row
    }

    /// The row itself, the CPU clock advanced.
    fn read<'s>(
        &mut self,
        sample: &'s Sample,
        measures: &'s Measures,
        progress: Option<&ProgressNoted>,
    ) -> SampleRow<'s> {
        let sum = |f: fn(&ProcessSample) -> u64| -> u64 { sample.processes.iter().map(f).sum() };
        let (cpu_seconds, cpu_percent) = self.cpu.advance(sample);
        let gpus = sample.gpus.as_ref();
        SampleRow {
            index: sample.index,
            elapsed_seconds: seconds(sample.elapsed_ms),
            after_exit: Some(sample.after_exit),
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
                    .enumerate()
                    .map(|(i, g)| {
                        let health: Option<&GpuHealth> = measures.gpus.get(i);
                        GpuRow {
                            ecc_uncorrected_volatile: health
                                .and_then(|h| h.ecc_uncorrected_volatile),
                            index: g.index,
                            memory_total_mib: g.memory_total_mib,
                            memory_used_mib: g.memory_used_mib,
                            other_processes: Some(health.map_or(&[], |h| &h.other_processes[..])),
                            power_w: health.and_then(|h| h.power_mw).map(|mw| mw as f64 / 1000.0),
                            retired_pages_pending: health.and_then(|h| h.retired_pages_pending),
                            sm_clock_mhz: health.and_then(|h| h.sm_clock_mhz),
                            temperature_c: health.and_then(|h| h.temperature_c),
                            throttle_reasons: health
                                .and_then(|h| h.throttle_mask)
                                .map(throttle_reasons),
                            tree_memory_mib: g.tree_memory_mib(),
                            utilization_percent: g.utilization_percent,
                            uuid: &g.uuid,
                        }
                    })
                    .collect()
            }),
            host_gpu_memory_used_mib: gpus
                .and_then(|g| sum_known(g.iter().map(|g| g.memory_used_mib))),
            tree_gpu_memory_mib: sample.tree_gpu_memory_mib(),
            tree_pss_bytes: measures.tree_pss_bytes(),
            progress_files: sample.progress.files,
            progress_bytes: sample.progress.bytes,
            sampler_cost_us: sample.sampler_cost_us,
            errors: &sample.errors,
            heartbeat: self
                .beats
                .then(|| measures.heartbeat.as_deref().map(BeatsRow::of)),
            gpu_utilization_percent: None,
            last_progress_at: progress
                .map(|p| p.last_progress_at_us.map(crate::time::unix_seconds)),
            progress_seen: progress.map(|p| p.progress_seen),
            progress: progress.copied(),
        }
    }

    /// What the rows tell of the run, once they have seen every sample: the peaks and totals,
    /// the progress directory at the last row, and what the summary judges of the resources.
    pub(crate) fn tally(&self) -> Tally {
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
            judged: Some(Judged {
                peak_tree_pss_bytes: self.peak_tree_pss_bytes,
                memory_trend: self.memory_trend(),
                gpu_health: self.gpu_health(),
                contention: self.contention(),
                progress_rate: self.progress_rate(),
                limit: None,
            }),
        }
    }

    /// The trend of the tree's PSS after the warm-up, projected to the memory ceiling.
    fn memory_trend(&self) -> Option<MemoryTrendShown> {
        let since = warmup_end(self.limits.warmup_ms, self.last_elapsed_ms);
        let Slope {
            per_hour,
            since_ms,
            at_since,
        } = self.memory.slope_since(since)?;
        // Where the fitted line is at the last sample, and how long it takes from there.
        let now =
            at_since + per_hour * (self.last_elapsed_ms.saturating_sub(since_ms)) as f64 / 3.6e6;
        let projected = match self.limits.memory_ceiling_bytes {
            Some(ceiling) if per_hour > 0.0 => {
                Some(((ceiling as f64 - now).max(0.0) / per_hour * 3600.0).round())
            }
            _ => None,
        };
        Some(MemoryTrendShown {
            bytes_per_hour: per_hour.round(),
            bytes_at_since: at_since.round(),
            since_seconds: seconds(since_ms),
            limit_bytes: self.limits.memory_ceiling_bytes,
            limit_source: self.limits.memory_ceiling_source.clone(),
            projected_seconds_to_limit: projected,
        })
    }

    fn gpu_health(&self) -> Vec<GpuHealthShown> {
        let since = warmup_end(self.limits.warmup_ms, self.last_elapsed_ms);
        self.gpus
            .iter()
            .map(|(uuid, run)| GpuHealthShown {
                uuid: uuid.clone(),
                max_temperature_c: run.max_temperature_c,
                energy_joules: run.energy_known.then(|| run.energy_joules.round()),
                seconds_throttled: run
                    .seconds_throttled
                    .iter()
                    .map(|(k, v)| (k.clone(), (v * 10.0).round() / 10.0))
                    .collect(),
                ecc_uncorrected_increase: run
                    .ecc_first
                    .zip(run.ecc_last)
                    .map(|(first, last)| last.saturating_sub(first)),
                tree_memory_mib_per_hour: run
                    .memory
                    .slope_since(since)
                    .map(|s| (s.per_hour * 10.0).round() / 10.0),
            })
            .collect()
    }

    fn contention(&self) -> Vec<ContentionShown> {
        self.gpus
            .iter()
            .map(|(uuid, run)| ContentionShown {
                uuid: uuid.clone(),
                seconds_shared: (run.seconds_shared * 10.0).round() / 10.0,
                peak_other_memory_mib: run.peak_other_memory_mib,
            })
            .collect()
    }

    /// The progress directory's growth a minute: over the run, after the warm-up and in the last
    /// tenth of the run (`None` where no sample is that late).
    fn progress_rate(&self) -> Option<ProgressRateShown> {
        let (Some((t0, b0, f0)), Some((t1, b1, f1))) = (self.progress.first, self.progress.last)
        else {
            return None;
        };
        if t1 <= t0 {
            return None;
        }
        let minutes = (t1 - t0) as f64 / 60_000.0;
        let per_minute = |from: u64, to: u64| ((to as f64 - from as f64) / minutes).round();
        let per_minute_since = |since: u64| {
            self.progress
                .bytes
                .change_since(since)
                .map(|per_hour| (per_hour / 60.0).round())
        };
        Some(ProgressRateShown {
            bytes_per_minute: per_minute(b0, b1),
            files_per_minute: (((f1 as f64 - f0 as f64) / minutes) * 10.0).round() / 10.0,
            after_warmup_bytes_per_minute: per_minute_since(warmup_end(
                self.limits.warmup_ms,
                self.last_elapsed_ms,
            )),
            recent_bytes_per_minute: per_minute_since(t1 - (t1 - t0) / 10),
        })
    }
}

/// What the rows tell of a soak once they have seen every sample, whatever its artifact.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tally {
    pub summary: SummaryShown,
    /// The progress directory at the last row.
    pub last_progress: ProgressSignature,
    /// What the summary judges of the resources (without the budget that failed the soak,
    /// which the verdict says); `None` for the frozen artifacts, which judge none.
    pub judged: Option<Judged>,
}

#[cfg(test)]
impl SampleRow<'_> {
    /// A row of tests: `elapsed_seconds` into a soak of three processes of `rss_bytes`, its
    /// progress directory holding `progress_files` of 10 bytes; nothing else known.
    pub(crate) fn of_test(elapsed_seconds: f64, rss_bytes: u64, progress_files: u64) -> Self {
        SampleRow {
            after_exit: Some(false),
            cpu_percent: None,
            cpu_seconds: 0.0,
            elapsed_seconds,
            errors: &[],
            gpus: None,
            heartbeat: None,
            host_gpu_memory_used_mib: None,
            index: 0,
            open_fds: 0,
            processes: 3,
            progress_bytes: 10 * progress_files,
            progress_files,
            read_bytes: 0,
            rss_bytes,
            sampler_cost_us: 0,
            threads: 0,
            tree_gpu_memory_mib: None,
            tree_pss_bytes: None,
            write_bytes: 0,
            gpu_utilization_percent: None,
            last_progress_at: None,
            progress_seen: None,
            progress: None,
        }
    }
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
        let mut cpu = CpuClock::new(250);
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
                .map(|(pid, used_memory_mib)| GpuProcessSample {
                    pid: pid as u32,
                    used_memory_mib,
                })
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
