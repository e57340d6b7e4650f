//! `unilab.soak.artifact/1`: the artifact of a soak recorded in schema 1's forms, frozen. It
//! must render byte for byte as unilab rendered it then (`migrations/fixtures/v1/artifact-*`
//! holds one), including its known faults: ticks are read with this host's clock tick rate, and
//! GPU figures are the host's.

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{Frame, frame, parameters, seconds};
use crate::event::soak::ProgressSignature;
use crate::event::soak::{ProcessSample, Sample};
use crate::read::fold::{Measured, SoakRecords};
use crate::read::rows::Tally;
use crate::read::shown::SummaryShown;

pub(super) const SCHEMA: &str = "unilab.soak.artifact/1";

/// The exporting host's rate: schema 1 did not record the sampling host's.
fn ticks_per_second() -> f64 {
    crate::process::ticks_per_second() as f64
}

/// One row of `samples`. Fields in the canonical (sorted) key order, so that serialising the
/// row gives the bytes serialising it as a JSON object would.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(in crate::read) struct Row<'a> {
    pub cpu_seconds: f64,
    pub elapsed_seconds: f64,
    pub errors: &'a [String],
    pub gpu_memory_used_mib: u64,
    pub gpu_utilization_percent: Option<u32>,
    pub index: u64,
    pub open_fds: u64,
    pub processes: u64,
    pub progress_bytes: u64,
    pub progress_files: u64,
    pub read_bytes: u64,
    pub rss_bytes: u64,
    pub sampler_cost_us: u64,
    pub threads: u64,
    pub tree_gpu_memory_mib: u64,
    pub write_bytes: u64,
}

fn sample_row(sample: &Sample, ticks: f64) -> Row<'_> {
    let sum = |f: fn(&ProcessSample) -> u64| -> u64 { sample.processes.iter().map(f).sum() };
    let gpus = sample.gpus.as_deref().unwrap_or_default();
    Row {
        index: sample.index,
        elapsed_seconds: seconds(sample.elapsed_ms),
        processes: sample.processes.len() as u64,
        rss_bytes: sum(|p| p.rss_bytes),
        cpu_seconds: sum(|p| p.cpu_ticks) as f64 / ticks,
        threads: sum(|p| u64::from(p.threads)),
        open_fds: sum(|p| u64::from(p.open_fds.unwrap_or(0))),
        read_bytes: sum(|p| p.read_bytes.unwrap_or(0)),
        write_bytes: sum(|p| p.write_bytes.unwrap_or(0)),
        gpu_memory_used_mib: gpus.iter().filter_map(|g| g.memory_used_mib).sum(),
        tree_gpu_memory_mib: gpus
            .iter()
            .flat_map(|g| &g.processes)
            .filter_map(|p| p.used_memory_mib)
            .sum(),
        gpu_utilization_percent: gpus.iter().filter_map(|g| g.utilization_percent).max(),
        progress_files: sample.progress.files,
        progress_bytes: sample.progress.bytes,
        sampler_cost_us: sample.sampler_cost_us,
        errors: &sample.errors,
    }
}

fn summary(rows: &[Row]) -> Value {
    let peak = |f: fn(&Row) -> u64| rows.iter().map(f).max().unwrap_or(0);
    let costs: Vec<u64> = rows.iter().map(|r| r.sampler_cost_us).collect();
    let last = rows.last();
    json!({
        "samples": rows.len(),
        "peak_processes": peak(|r| r.processes),
        "peak_rss_bytes": peak(|r| r.rss_bytes),
        "peak_threads": peak(|r| r.threads),
        "peak_open_fds": peak(|r| r.open_fds),
        "peak_gpu_memory_used_mib": peak(|r| r.gpu_memory_used_mib),
        "peak_tree_gpu_memory_mib": peak(|r| r.tree_gpu_memory_mib),
        "final_cpu_seconds": last.map_or(0.0, |r| r.cpu_seconds),
        "final_read_bytes": last.map_or(0, |r| r.read_bytes),
        "final_write_bytes": last.map_or(0, |r| r.write_bytes),
        "sampler_errors": rows.iter().map(|r| r.errors.len()).sum::<usize>(),
        "sampler_cost_us_mean": if costs.is_empty() { 0 } else { costs.iter().sum::<u64>() / costs.len() as u64 },
        "sampler_cost_us_max": costs.iter().copied().max().unwrap_or(0),
    })
}

/// What the rows tell of the run, as today's views read it: no CPU share, the host's GPU
/// memory as one figure, no judgment of resources.
pub(super) fn tally(rows: &[Row], last_progress: ProgressSignature) -> Tally {
    let peak = |f: fn(&Row) -> u64| rows.iter().map(f).max().unwrap_or(0);
    let costs: Vec<u64> = rows.iter().map(|r| r.sampler_cost_us).collect();
    let last = rows.last();
    Tally {
        summary: SummaryShown {
            samples: rows.len() as u64,
            peak_processes: peak(|r| r.processes),
            peak_rss_bytes: peak(|r| r.rss_bytes),
            peak_threads: peak(|r| r.threads),
            peak_open_fds: peak(|r| r.open_fds),
            peak_cpu_percent: None,
            peak_host_gpu_memory_used_mib: Some(peak(|r| r.gpu_memory_used_mib)),
            peak_tree_gpu_memory_mib: Some(peak(|r| r.tree_gpu_memory_mib)),
            final_cpu_seconds: last.map_or(0.0, |r| r.cpu_seconds),
            final_read_bytes: last.map_or(0, |r| r.read_bytes),
            final_write_bytes: last.map_or(0, |r| r.write_bytes),
            sampler_errors: rows.iter().map(|r| r.errors.len() as u64).sum(),
            sampler_cost_us_mean: costs
                .iter()
                .sum::<u64>()
                .checked_div(costs.len() as u64)
                .unwrap_or(0),
            sampler_cost_us_max: costs.iter().copied().max().unwrap_or(0),
        },
        last_progress,
        judged: None,
    }
}

/// The rows of every sample, rendered from all of them at once.
pub(super) fn rows(samples: &[Measured]) -> Vec<Row<'_>> {
    let ticks = ticks_per_second();
    samples.iter().map(|(s, ..)| sample_row(s, ticks)).collect()
}

/// The artifact as a JSON object, without `digest` and without `samples`.
pub(super) fn head(records: &SoakRecords, rows: &[Row]) -> Map<String, Value> {
    let soak = &records.soak;
    let start = &soak.start;
    let end = soak.end.as_deref().map(|v| &v.end);
    let last_progress = soak
        .samples
        .last()
        .map(|(s, ..)| s.progress)
        .unwrap_or_default();
    let mut object = frame(
        records,
        &Frame {
            schema: SCHEMA,
            soak_id: &start.soak_id,
            command: &start.command,
            cwd: &start.cwd,
            metadata: &start.metadata,
            runtime_json: &start.runtime_json,
            supervisor: start.supervisor,
            outcome: end.map(|e| &e.outcome),
            exit: end.and_then(|e| e.exit),
            leaked: end
                .map(|e| e.leaked_processes.as_slice())
                .unwrap_or_default(),
            tails: end.map(|e| (e.stdout_tail.as_slice(), e.stderr_tail.as_slice())),
        },
    );
    object.insert(
        "parameters".into(),
        Value::Object(parameters(
            &start.parameters,
            &start.progress_dir,
            &start.output,
            &start.environment,
        )),
    );
    object.insert(
        "duration_seconds".into(),
        json!(end.map(|e| seconds(e.run_ms))),
    );
    object.insert(
        "progress".into(),
        json!({
            "first_seen_seconds": end.and_then(|e| e.first_progress_ms).map(seconds),
            "last_change_seconds": end.and_then(|e| e.last_progress_ms).map(seconds),
            "files": last_progress.files,
            "bytes": last_progress.bytes,
        }),
    );
    object.insert("summary".into(), summary(rows));
    object
}

/// The artifact as a JSON object, without `digest`.
pub(super) fn body(records: &SoakRecords) -> Value {
    let rows = rows(&records.soak.samples);
    let mut object = head(records, &rows);
    object.insert("samples".into(), json!(rows));
    Value::Object(object)
}
