//! `unilab.soak.artifact/1`: the artifact of a soak recorded in schema 1's events, frozen. It
//! must render byte for byte as unilab rendered it then (`migrations/fixtures/v1/artifact-*`
//! holds one), including its known faults: ticks are read with this host's clock tick rate, and
//! GPU figures are the host's.

use serde_json::{Value, json};

use super::{Form, Frame, SoakRecords, frame, parameters, seconds};
use crate::event::soak::{ProcessSample, Sample, SoakEnd, SoakStart};

const SCHEMA: &str = "unilab.soak.artifact/1";

/// The exporting host's rate: schema 1 did not record the sampling host's.
fn ticks_per_second() -> f64 {
    crate::process::ticks_per_second() as f64
}

fn sample_row(sample: &Sample, ticks: f64) -> Value {
    let sum = |f: fn(&ProcessSample) -> u64| -> u64 { sample.processes.iter().map(f).sum() };
    let gpus = sample.gpus.as_deref().unwrap_or_default();
    let gpu_memory: u64 = gpus.iter().filter_map(|g| g.memory_used_mib).sum();
    let tree_gpu_memory: u64 = gpus
        .iter()
        .flat_map(|g| &g.processes)
        .filter_map(|p| p.used_memory_mib)
        .sum();
    json!({
        "index": sample.index,
        "elapsed_seconds": seconds(sample.elapsed_ms),
        "processes": sample.processes.len(),
        "rss_bytes": sum(|p| p.rss_bytes),
        "cpu_seconds": sum(|p| p.cpu_ticks) as f64 / ticks,
        "threads": sum(|p| u64::from(p.threads)),
        "open_fds": sum(|p| u64::from(p.open_fds.unwrap_or(0))),
        "read_bytes": sum(|p| p.read_bytes.unwrap_or(0)),
        "write_bytes": sum(|p| p.write_bytes.unwrap_or(0)),
        "gpu_memory_used_mib": gpu_memory,
        "tree_gpu_memory_mib": tree_gpu_memory,
        "gpu_utilization_percent": gpus.iter().filter_map(|g| g.utilization_percent).max(),
        "progress_files": sample.progress.files,
        "progress_bytes": sample.progress.bytes,
        "sampler_cost_us": sample.sampler_cost_us,
        "errors": sample.errors,
    })
}

fn summary(samples: &[Sample], rows: &[Value]) -> Value {
    let peak = |key: &str| {
        rows.iter()
            .filter_map(|r| r[key].as_u64())
            .max()
            .unwrap_or(0)
    };
    let costs: Vec<u64> = samples.iter().map(|s| s.sampler_cost_us).collect();
    let last = rows.last();
    json!({
        "samples": samples.len(),
        "peak_processes": peak("processes"),
        "peak_rss_bytes": peak("rss_bytes"),
        "peak_threads": peak("threads"),
        "peak_open_fds": peak("open_fds"),
        "peak_gpu_memory_used_mib": peak("gpu_memory_used_mib"),
        "peak_tree_gpu_memory_mib": peak("tree_gpu_memory_mib"),
        "final_cpu_seconds": last.map(|r| r["cpu_seconds"].clone()).unwrap_or(json!(0.0)),
        "final_read_bytes": last.map(|r| r["read_bytes"].clone()).unwrap_or(json!(0)),
        "final_write_bytes": last.map(|r| r["write_bytes"].clone()).unwrap_or(json!(0)),
        "sampler_errors": samples.iter().map(|s| s.errors.len()).sum::<usize>(),
        "sampler_cost_us_mean": if costs.is_empty() { 0 } else { costs.iter().sum::<u64>() / costs.len() as u64 },
        "sampler_cost_us_max": costs.iter().copied().max().unwrap_or(0),
    })
}

/// The artifact as a JSON object, without `digest`.
pub(super) fn body(records: &SoakRecords, soak: &Form<SoakStart, Sample, SoakEnd>) -> Value {
    let start = &soak.start;
    let ticks = ticks_per_second();
    let rows: Vec<Value> = soak.samples.iter().map(|s| sample_row(s, ticks)).collect();
    let end = soak.end.as_deref();
    let last_progress = soak.samples.last().map(|s| s.progress).unwrap_or_default();
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
    object.insert("summary".into(), summary(&soak.samples, &rows));
    object.insert("samples".into(), Value::Array(rows));
    Value::Object(object)
}
