//! `unilab.soak.artifact/4`: the artifact of a soak recorded in schema 6's events.
//!
//! Against `/3`: each row has the tree's proportional set size (`tree_pss_bytes`) and each GPU's
//! health (temperature, power, SM clock, throttle reasons, ECC errors, retired pages pending)
//! with the other processes on it; the parameters name the budgets (`max_memory_bytes`,
//! `max_gpu_memory_bytes`, `max_memory_growth_bytes_per_hour`, `warmup_seconds`); the outcome
//! names the budget that failed the soak (`limit`); the summary judges the resources:
//! `peak_tree_pss_bytes`, `memory_trend` (a robust slope after the warm-up, projected to the
//! memory ceiling), `gpu_health` and `contention` per GPU, and `progress_rate`.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::ser::SerializeStruct;
use serde_json::{Map, Value, json};

use super::v2::{self, GpuRow};
use super::{Finished, Form, SoakRecords, Started, seconds, v3};
use crate::event::soak::{
    GpuHealth, GpuProcessSample, Limits, Measures, ResourceLimit, Sample, throttle_reasons,
};
use crate::soak::trend::{Slope, Trend, warmup_end};

const SCHEMA: &str = "unilab.soak.artifact/4";

/// A soak's start in schema 6's form: schema 5's, and the budgets it is held to.
#[derive(Debug, Clone, PartialEq)]
pub struct Started6 {
    pub started: Started,
    pub limits: Limits,
}

/// A soak's verdict in schema 6's form: schema 5's, and the budget that failed it.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished6 {
    pub finished: Finished,
    pub limit: Option<ResourceLimit>,
}

/// A sample in schema 6's form.
pub type Measured = (Sample, Measures);

/// One GPU of a row, with its health. Fields in sorted key order (see [`v2::SampleRow`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuHealthRow<'a> {
    pub ecc_uncorrected_volatile: Option<u64>,
    pub index: u32,
    pub memory_total_mib: Option<u64>,
    pub memory_used_mib: Option<u64>,
    pub other_processes: &'a [GpuProcessSample],
    pub power_w: Option<f64>,
    pub retired_pages_pending: Option<bool>,
    pub sm_clock_mhz: Option<u32>,
    pub temperature_c: Option<u32>,
    pub throttle_reasons: Option<Vec<String>>,
    pub tree_memory_mib: Option<u64>,
    pub utilization_percent: Option<u32>,
    pub uuid: &'a str,
}

impl<'a> GpuHealthRow<'a> {
    fn of(gpu: &GpuRow<'a>, health: Option<&'a GpuHealth>) -> Self {
        Self {
            ecc_uncorrected_volatile: health.and_then(|h| h.ecc_uncorrected_volatile),
            index: gpu.index,
            memory_total_mib: gpu.memory_total_mib,
            memory_used_mib: gpu.memory_used_mib,
            other_processes: health.map_or(&[], |h| &h.other_processes[..]),
            power_w: health.and_then(|h| h.power_mw).map(|mw| mw as f64 / 1000.0),
            retired_pages_pending: health.and_then(|h| h.retired_pages_pending),
            sm_clock_mhz: health.and_then(|h| h.sm_clock_mhz),
            temperature_c: health.and_then(|h| h.temperature_c),
            throttle_reasons: health.and_then(|h| h.throttle_mask).map(throttle_reasons),
            tree_memory_mib: gpu.tree_memory_mib,
            utilization_percent: gpu.utilization_percent,
            uuid: gpu.uuid,
        }
    }
}

/// One row of `samples`: `/2`'s, with the tree's PSS and each GPU's health.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleRow<'a> {
    /// `/2`'s row (its `gpus` without health, for readers of either).
    pub base: v2::SampleRow<'a>,
    pub gpus: Option<Vec<GpuHealthRow<'a>>>,
    pub tree_pss_bytes: Option<u64>,
}

impl Serialize for SampleRow<'_> {
    /// `base`'s fields with `gpus` replaced and `tree_pss_bytes` added, in sorted key order.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let b = &self.base;
        let mut row = serializer.serialize_struct("SampleRow", 19)?;
        row.serialize_field("after_exit", &b.after_exit)?;
        row.serialize_field("cpu_percent", &b.cpu_percent)?;
        row.serialize_field("cpu_seconds", &b.cpu_seconds)?;
        row.serialize_field("elapsed_seconds", &b.elapsed_seconds)?;
        row.serialize_field("errors", &b.errors)?;
        row.serialize_field("gpus", &self.gpus)?;
        row.serialize_field("host_gpu_memory_used_mib", &b.host_gpu_memory_used_mib)?;
        row.serialize_field("index", &b.index)?;
        row.serialize_field("open_fds", &b.open_fds)?;
        row.serialize_field("processes", &b.processes)?;
        row.serialize_field("progress_bytes", &b.progress_bytes)?;
        row.serialize_field("progress_files", &b.progress_files)?;
        row.serialize_field("read_bytes", &b.read_bytes)?;
        row.serialize_field("rss_bytes", &b.rss_bytes)?;
        row.serialize_field("sampler_cost_us", &b.sampler_cost_us)?;
        row.serialize_field("threads", &b.threads)?;
        row.serialize_field("tree_gpu_memory_mib", &b.tree_gpu_memory_mib)?;
        row.serialize_field("tree_pss_bytes", &self.tree_pss_bytes)?;
        row.serialize_field("write_bytes", &b.write_bytes)?;
        row.end()
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
    fn add(&mut self, at: f64, gpu: &GpuHealthRow<'_>) {
        self.max_temperature_c = self.max_temperature_c.max(gpu.temperature_c);
        let others = !gpu.other_processes.is_empty();
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
        let other_memory = gpu
            .other_processes
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
            others,
        ));
    }
}

/// Turns samples into rows, one at a time, keeping what the summary needs; nothing here grows
/// with the number of samples (the trends are bucketed, the GPUs are few).
pub(super) struct Rows {
    pub(super) base: v2::Rows,
    limits: Limits,
    peak_tree_pss_bytes: Option<u64>,
    memory: Trend,
    last_elapsed_ms: u64,
    gpus: BTreeMap<String, GpuRun>,
    progress: Progress,
}

/// The progress directory's growth: where it stood at the first row and the last, and the
/// trend of its bytes (for its rate after the warm-up and at the end).
#[derive(Debug, Default)]
struct Progress {
    first: Option<(u64, u64, u64)>,
    last: Option<(u64, u64, u64)>,
    bytes: Trend,
}

impl Rows {
    pub(super) fn new(started: &Started6) -> Self {
        Self {
            base: v2::Rows::new(&started.started.start),
            limits: started.limits.clone(),
            peak_tree_pss_bytes: None,
            memory: Trend::default(),
            last_elapsed_ms: 0,
            gpus: BTreeMap::new(),
            progress: Progress::default(),
        }
    }

    pub(super) fn row<'s>(&mut self, (sample, measures): &'s Measured) -> SampleRow<'s> {
        let base = self.base.row(sample);
        let tree_pss_bytes = measures.tree_pss_bytes();
        let gpus = base.gpus.as_ref().map(|gpus| {
            gpus.iter()
                .enumerate()
                .map(|(i, gpu)| GpuHealthRow::of(gpu, measures.gpus.get(i)))
                .collect::<Vec<_>>()
        });
        if let Some(pss) = tree_pss_bytes {
            self.peak_tree_pss_bytes = self.peak_tree_pss_bytes.max(Some(pss));
            self.memory.add(sample.elapsed_ms, pss as f64);
        }
        self.last_elapsed_ms = sample.elapsed_ms;
        for gpu in gpus.iter().flatten() {
            self.gpus
                .entry(gpu.uuid.to_owned())
                .or_default()
                .add(base.elapsed_seconds, gpu);
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
        SampleRow {
            base,
            gpus,
            tree_pss_bytes,
        }
    }

    /// The trend of the tree's PSS after the warm-up, projected to the memory ceiling.
    fn memory_trend(&self) -> Value {
        let since = warmup_end(self.limits.warmup_ms, self.last_elapsed_ms);
        let Some(Slope {
            per_hour,
            since_ms,
            at_since,
        }) = self.memory.slope_since(since)
        else {
            return Value::Null;
        };
        // Where the fitted line is at the last sample, and how long it takes from there.
        let now =
            at_since + per_hour * (self.last_elapsed_ms.saturating_sub(since_ms)) as f64 / 3.6e6;
        let projected = match self.limits.memory_ceiling_bytes {
            Some(ceiling) if per_hour > 0.0 => {
                Some(((ceiling as f64 - now).max(0.0) / per_hour * 3600.0).round())
            }
            _ => None,
        };
        json!({
            "bytes_per_hour": per_hour.round(),
            "bytes_at_since": at_since.round(),
            "since_seconds": seconds(since_ms),
            "limit_bytes": self.limits.memory_ceiling_bytes,
            "limit_source": self.limits.memory_ceiling_source,
            "projected_seconds_to_limit": projected,
        })
    }

    fn gpu_health(&self) -> Value {
        let since = warmup_end(self.limits.warmup_ms, self.last_elapsed_ms);
        Value::Array(
            self.gpus
                .iter()
                .map(|(uuid, run)| {
                    json!({
                        "uuid": uuid,
                        "max_temperature_c": run.max_temperature_c,
                        "energy_joules": run.energy_known.then(|| run.energy_joules.round()),
                        "seconds_throttled": run.seconds_throttled.iter()
                            .map(|(k, v)| (k.clone(), json!((v * 10.0).round() / 10.0)))
                            .collect::<Map<_, _>>(),
                        "ecc_uncorrected_increase": run.ecc_first.zip(run.ecc_last)
                            .map(|(first, last)| last.saturating_sub(first)),
                        "tree_memory_mib_per_hour": run.memory.slope_since(since)
                            .map(|s| (s.per_hour * 10.0).round() / 10.0),
                    })
                })
                .collect(),
        )
    }

    fn contention(&self) -> Value {
        Value::Array(
            self.gpus
                .iter()
                .map(|(uuid, run)| {
                    json!({
                        "uuid": uuid,
                        "seconds_shared": (run.seconds_shared * 10.0).round() / 10.0,
                        "peak_other_memory_mib": run.peak_other_memory_mib,
                    })
                })
                .collect(),
        )
    }

    /// The progress directory's growth a minute: over the run, after the warm-up and in the last
    /// tenth of the run (`null` where no sample is that late).
    fn progress_rate(&self) -> Value {
        let (Some((t0, b0, f0)), Some((t1, b1, f1))) = (self.progress.first, self.progress.last)
        else {
            return Value::Null;
        };
        if t1 <= t0 {
            return Value::Null;
        }
        let minutes = (t1 - t0) as f64 / 60_000.0;
        let per_minute = |from: u64, to: u64| ((to as f64 - from as f64) / minutes).round();
        let per_minute_since = |since: u64| {
            self.progress
                .bytes
                .change_since(since)
                .map(|per_hour| (per_hour / 60.0).round())
        };
        json!({
            "bytes_per_minute": per_minute(b0, b1),
            "files_per_minute": (((f1 as f64 - f0 as f64) / minutes) * 10.0).round() / 10.0,
            "after_warmup_bytes_per_minute":
                per_minute_since(warmup_end(self.limits.warmup_ms, self.last_elapsed_ms)),
            "recent_bytes_per_minute": per_minute_since(t1 - (t1 - t0) / 10),
        })
    }

    fn summarise(&self, summary: &mut Map<String, Value>) {
        summary.insert(
            "peak_tree_pss_bytes".into(),
            json!(self.peak_tree_pss_bytes),
        );
        summary.insert("memory_trend".into(), self.memory_trend());
        summary.insert("gpu_health".into(), self.gpu_health());
        summary.insert("contention".into(), self.contention());
        summary.insert("progress_rate".into(), self.progress_rate());
    }
}

fn limits(params: &mut Map<String, Value>, limits: &Limits) {
    params.insert("max_memory_bytes".into(), json!(limits.max_memory_bytes));
    params.insert(
        "max_gpu_memory_bytes".into(),
        json!(limits.max_gpu_memory_bytes),
    );
    params.insert(
        "max_memory_growth_bytes_per_hour".into(),
        json!(limits.max_memory_growth_bytes_per_hour),
    );
    params.insert(
        "warmup_seconds".into(),
        json!(limits.warmup_ms.map(seconds)),
    );
}

/// The artifact as a JSON object, without `digest` and without `samples`, once `rows` has seen
/// every sample.
pub(super) fn head(
    records: &SoakRecords,
    started: &Started6,
    end: Option<&Finished6>,
    rows: &Rows,
) -> Map<String, Value> {
    let mut object = v3::head(
        records,
        &started.started,
        end.map(|e| &e.finished),
        &rows.base,
    );
    object.insert("schema".into(), SCHEMA.into());
    if let Some(Value::Object(outcome)) = object.get_mut("outcome") {
        outcome.insert(
            "limit".into(),
            json!(end.and_then(|e| e.limit).map(ResourceLimit::as_str)),
        );
    }
    if let Some(Value::Object(params)) = object.get_mut("parameters") {
        limits(params, &started.limits);
    }
    if let Some(Value::Object(summary)) = object.get_mut("summary") {
        rows.summarise(summary);
    }
    object
}

/// The artifact as a JSON object, without `digest`.
pub(super) fn body(records: &SoakRecords, soak: &Form<Started6, Measured, Finished6>) -> Value {
    let mut rows = Rows::new(&soak.start);
    let samples: Vec<Value> = soak
        .samples
        .iter()
        .map(|measured| serde_json::to_value(rows.row(measured)).unwrap_or(Value::Null))
        .collect();
    let mut object = head(records, &soak.start, soak.end.as_deref(), &rows);
    object.insert("samples".into(), Value::Array(samples));
    Value::Object(object)
}
