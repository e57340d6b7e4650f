//! The soak artifact: canonical JSON rendered from the soak's events alone, so that
//! `soak export` regenerates the bytes written when the soak ended.
//!
//! Canonical: keys in a fixed order (serde_json's sorted maps), numbers as serde_json prints
//! them, two-space indentation, a final newline. `digest` is blake3 over the rendering of the
//! same object without `digest`. Per-sample rows carry the tree's totals; every process of every
//! sample stays in the log (`unilab history --soak ID --json`).

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::event::soak::{OutcomeStatus, ProcessSample, Sample, SoakEnd, SoakStart};
use crate::event::{Event, Subject};
use crate::log::chain::{Hash, to_hex};
use crate::log::{LogError, Snapshot};
use crate::process::ProcessIdentity;
use crate::time::unix_seconds;

pub const SCHEMA: &str = "unilab.soak.artifact/1";

/// How a soak ended, as the log tells it.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    Finished(Box<SoakEnd>),
    Abandoned {
        supervisor: ProcessIdentity,
        reason: String,
    },
}

/// Everything the artifact is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct SoakRecords {
    pub start: SoakStart,
    pub started_at_us: i64,
    pub samples: Vec<Sample>,
    pub ending: Option<(Ending, i64)>,
    pub first_seq: u64,
    pub last_seq: u64,
    pub last_hash: Hash,
}

/// Gathers a soak's events, up to and including its verdict; `None` for an unknown soak.
pub fn collect(snapshot: &Snapshot, soak_id: &str) -> Result<Option<SoakRecords>, LogError> {
    let mut records: Option<SoakRecords> = None;
    for seq in snapshot.subject_seqs(&Subject::Soak(soak_id.to_owned()), 1)? {
        let Some(record) = snapshot.get(seq)? else {
            continue;
        };
        let at = record.envelope.recorded_at_us;
        match (record.envelope.event, records.as_mut()) {
            (Event::SoakStarted(start), None) => {
                records = Some(SoakRecords {
                    start: *start,
                    started_at_us: at,
                    samples: Vec::new(),
                    ending: None,
                    first_seq: seq,
                    last_seq: seq,
                    last_hash: record.hash,
                });
            }
            (event, Some(r)) if r.ending.is_none() => {
                match event {
                    Event::SoakSampled(sample) => r.samples.push(*sample),
                    Event::SoakFinished(end) => r.ending = Some((Ending::Finished(end), at)),
                    Event::SoakAbandoned { supervisor, reason } => {
                        r.ending = Some((Ending::Abandoned { supervisor, reason }, at));
                    }
                    _ => continue,
                }
                r.last_seq = seq;
                r.last_hash = record.hash;
            }
            _ => {}
        }
    }
    Ok(records)
}

fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

fn ticks_per_second() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map(|t| t as f64)
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

fn sample_row(sample: &Sample, ticks: f64) -> Value {
    let sum = |f: fn(&ProcessSample) -> u64| -> u64 { sample.processes.iter().map(f).sum() };
    let gpu_memory: u64 = sample.gpus.iter().filter_map(|g| g.memory_used_mib).sum();
    let tree_gpu_memory: u64 = sample
        .gpus
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
        "gpu_utilization_percent": sample.gpus.iter().filter_map(|g| g.utilization_percent).max(),
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
fn body(records: &SoakRecords) -> Value {
    let start = &records.start;
    let ticks = ticks_per_second();
    let rows: Vec<Value> = records
        .samples
        .iter()
        .map(|s| sample_row(s, ticks))
        .collect();
    let params = &start.parameters;
    let runtime: Value = serde_json::from_str(&start.runtime_json).unwrap_or(Value::Null);
    let (outcome, exit, duration, end, ended_at) = match &records.ending {
        Some((Ending::Finished(end), at)) => (
            json!({
                "status": end.outcome.status.as_str(),
                "failure_kind": end.outcome.failure_kind.map(|k| serde_json::to_value(k).unwrap_or(Value::Null)),
                "reason": end.outcome.reason,
            }),
            end.exit
                .map(|e| json!({ "code": e.code, "signal": e.signal })),
            Some(seconds(end.duration_ms)),
            Some(end.as_ref()),
            Some(unix_seconds(*at)),
        ),
        Some((Ending::Abandoned { supervisor, reason }, at)) => (
            json!({
                "status": OutcomeStatus::Abandoned.as_str(),
                "failure_kind": null,
                "reason": format!("{reason} (supervisor pid {})", supervisor.pid),
            }),
            None,
            None,
            None,
            Some(unix_seconds(*at)),
        ),
        None => (
            json!({ "status": "running", "failure_kind": null, "reason": "" }),
            None,
            None,
            None,
            None,
        ),
    };
    let last_progress = records
        .samples
        .last()
        .map(|s| s.progress)
        .unwrap_or_default();
    let mut object = Map::new();
    object.insert("schema".into(), SCHEMA.into());
    object.insert("soak_id".into(), start.soak_id.clone().into());
    object.insert("command".into(), json!(start.command));
    object.insert("cwd".into(), start.cwd.clone().into());
    object.insert(
        "parameters".into(),
        json!({
            "sample_interval_seconds": seconds(params.sample_interval_ms),
            "startup_timeout_seconds": seconds(params.startup_timeout_ms),
            "stale_progress_seconds": seconds(params.stale_progress_ms),
            "shutdown_grace_seconds": seconds(params.shutdown_grace_ms),
            "min_duration_seconds": seconds(params.min_duration_ms),
            "progress_dir": start.progress_dir,
            "output": start.output,
            "environment": start.environment,
        }),
    );
    object.insert("metadata".into(), json!(start.metadata));
    object.insert("runtime".into(), runtime);
    object.insert(
        "supervisor".into(),
        json!({ "pid": start.supervisor.pid, "start_ticks": start.supervisor.start_ticks }),
    );
    object.insert(
        "started_at".into(),
        unix_seconds(records.started_at_us).into(),
    );
    object.insert("ended_at".into(), json!(ended_at));
    object.insert("duration_seconds".into(), json!(duration));
    object.insert("outcome".into(), outcome);
    object.insert("exit".into(), json!(exit));
    object.insert(
        "progress".into(),
        json!({
            "first_seen_seconds": end.and_then(|e| e.first_progress_ms).map(seconds),
            "last_change_seconds": end.and_then(|e| e.last_progress_ms).map(seconds),
            "files": last_progress.files,
            "bytes": last_progress.bytes,
        }),
    );
    object.insert("summary".into(), summary(&records.samples, &rows));
    object.insert("samples".into(), Value::Array(rows));
    object.insert(
        "leaked_processes".into(),
        json!(end.map(|e| e
            .leaked_processes
            .iter()
            .map(|l| json!({ "pid": l.identity.pid, "start_ticks": l.identity.start_ticks, "name": l.name, "cmdline": l.cmdline }))
            .collect::<Vec<_>>())
            .unwrap_or_default()),
    );
    object.insert(
        "output_tail".into(),
        json!({
            "stdout": end.map(|e| String::from_utf8_lossy(&e.stdout_tail).into_owned()).unwrap_or_default(),
            "stderr": end.map(|e| String::from_utf8_lossy(&e.stderr_tail).into_owned()).unwrap_or_default(),
        }),
    );
    object.insert(
        "log".into(),
        json!({ "first_seq": records.first_seq, "last_seq": records.last_seq, "chain_hash": to_hex(&records.last_hash) }),
    );
    Value::Object(object)
}

fn canonical(value: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// The artifact's bytes and its digest.
pub fn render(records: &SoakRecords) -> (Vec<u8>, String) {
    let mut value = body(records);
    let digest = blake3::hash(&canonical(&value)).to_hex().to_string();
    if let Value::Object(object) = &mut value {
        object.insert("digest".into(), digest.clone().into());
    }
    (canonical(&value), digest)
}

/// Checks an artifact's digest: blake3 of its rendering without `digest`.
pub fn digest_matches(bytes: &[u8]) -> bool {
    let Ok(Value::Object(mut object)) = serde_json::from_slice::<Value>(bytes) else {
        return false;
    };
    let Some(Value::String(digest)) = object.remove("digest") else {
        return false;
    };
    blake3::hash(&canonical(&Value::Object(object)))
        .to_hex()
        .to_string()
        == digest
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, synced, then renamed.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut temp = tempfile::NamedTempFile::new_in(dir)?;
    temp.write_all(bytes)?;
    // Readable like any report: it holds no credentials.
    std::fs::set_permissions(
        temp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )?;
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
