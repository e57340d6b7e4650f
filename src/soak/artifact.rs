//! The soak artifact: canonical JSON rendered from the soak's events alone, so that
//! `soak export` regenerates the bytes written when the soak ended.
//!
//! Canonical: keys in a fixed order (serde_json's sorted maps), numbers as serde_json prints
//! them, two-space indentation, a final newline. `digest` is blake3 over the rendering of the
//! same object without `digest`. Per-sample rows carry the tree's totals; every process of every
//! sample stays in the log (`unilab history --soak ID --json`).

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::event::soak::{ProcessSample, Sample, SoakEnd, SoakStart};
use crate::event::{Event, Subject};
use crate::log::chain::{Hash, to_hex};
use crate::log::{LogError, Projection, Snapshot, Update};
use crate::process::ProcessIdentity;
use crate::projection::{SoakState, SoakSummary, Soaks};
use crate::time::unix_seconds;

pub(crate) const SCHEMA: &str = "unilab.soak.artifact/1";

/// How a soak ended, as the log tells it.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    Finished(Box<SoakEnd>),
    Abandoned {
        supervisor: ProcessIdentity,
        reason: String,
    },
}

/// Everything the artifact is made of: the soak's events up to and including its verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct SoakRecords {
    /// The `soaks` projection folded over exactly these events: state, times and sequences.
    pub summary: SoakSummary,
    pub start: SoakStart,
    pub samples: Vec<Sample>,
    pub ending: Option<Ending>,
    /// The hash of the last of these events, which ties the artifact to the chain.
    pub last_hash: Hash,
}

/// Gathers a soak's events, up to and including its verdict; `None` for an unknown soak. Which
/// events belong to the soak is the projection's rule ([`Soaks::apply`]), applied here too.
pub fn collect(snapshot: &Snapshot, soak_id: &str) -> Result<Option<SoakRecords>, LogError> {
    let mut summary: Option<SoakSummary> = None;
    let mut start = None;
    let mut samples = Vec::new();
    let mut ending = None;
    let mut last_hash = None;
    for seq in snapshot.subject_seqs(&Subject::Soak(soak_id.to_owned()), 1)? {
        if summary
            .as_ref()
            .is_some_and(|s| s.state != SoakState::Running)
        {
            break;
        }
        let Some(record) = snapshot.get(seq)? else {
            continue;
        };
        let Update::Put(next) = Soaks::apply(summary.as_ref(), &record.envelope) else {
            continue;
        };
        summary = Some(next);
        last_hash = Some(record.hash);
        match record.envelope.event {
            Event::SoakStarted(started) => start = Some(*started),
            Event::SoakSampled(sample) => samples.push(*sample),
            Event::SoakFinished(end) => ending = Some(Ending::Finished(end)),
            Event::SoakAbandoned { supervisor, reason } => {
                ending = Some(Ending::Abandoned { supervisor, reason });
            }
            _ => {}
        }
    }
    Ok(match (summary, start, last_hash) {
        (Some(summary), Some(start), Some(last_hash)) => Some(SoakRecords {
            summary,
            start,
            samples,
            ending,
            last_hash,
        }),
        _ => None,
    })
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
    let end = match &records.ending {
        Some(Ending::Finished(end)) => Some(end.as_ref()),
        _ => None,
    };
    let last_progress = records
        .samples
        .last()
        .map(|s| s.progress)
        .unwrap_or_default();
    let summary_row = &records.summary;
    let mut object = Map::new();
    object.insert("schema".into(), SCHEMA.into());
    object.insert("soak_id".into(), start.soak_id.clone().into());
    object.insert("command".into(), json!(start.command));
    object.insert("cwd".into(), start.cwd.clone().into());
    object.insert("parameters".into(), parameters(start));
    object.insert("metadata".into(), json!(start.metadata));
    object.insert(
        "runtime".into(),
        serde_json::from_str(&start.runtime_json).unwrap_or(Value::Null),
    );
    object.insert(
        "supervisor".into(),
        json!({ "pid": start.supervisor.pid, "start_ticks": start.supervisor.start_ticks }),
    );
    object.insert(
        "started_at".into(),
        unix_seconds(summary_row.started_at_us).into(),
    );
    object.insert(
        "ended_at".into(),
        json!(summary_row.ended_at_us.map(unix_seconds)),
    );
    object.insert(
        "duration_seconds".into(),
        json!(end.map(|e| seconds(e.duration_ms))),
    );
    object.insert("outcome".into(), outcome(records));
    object.insert(
        "exit".into(),
        json!(
            end.and_then(|e| e.exit)
                .map(|e| json!({ "code": e.code, "signal": e.signal }))
        ),
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
    object.insert("summary".into(), summary(&records.samples, &rows));
    object.insert("samples".into(), Value::Array(rows));
    object.insert("leaked_processes".into(), leaked_processes(end));
    object.insert(
        "output_tail".into(),
        json!({
            "stdout": end.map(|e| String::from_utf8_lossy(&e.stdout_tail).into_owned()).unwrap_or_default(),
            "stderr": end.map(|e| String::from_utf8_lossy(&e.stderr_tail).into_owned()).unwrap_or_default(),
        }),
    );
    object.insert(
        "log".into(),
        json!({ "first_seq": summary_row.first_seq, "last_seq": summary_row.last_seq, "chain_hash": to_hex(&records.last_hash) }),
    );
    Value::Object(object)
}

fn parameters(start: &SoakStart) -> Value {
    let params = &start.parameters;
    json!({
        "sample_interval_seconds": seconds(params.sample_interval_ms),
        "startup_timeout_seconds": seconds(params.startup_timeout_ms),
        "stale_progress_seconds": seconds(params.stale_progress_ms),
        "shutdown_grace_seconds": seconds(params.shutdown_grace_ms),
        "min_duration_seconds": seconds(params.min_duration_ms),
        "progress_dir": start.progress_dir,
        "output": start.output,
        "environment": start.environment,
    })
}

/// `status` (`running` until the verdict), `failure_kind` and `reason`.
fn outcome(records: &SoakRecords) -> Value {
    match &records.ending {
        Some(Ending::Finished(end)) => json!({
            "status": end.outcome.status.as_str(),
            "failure_kind": end.outcome.failure_kind,
            "reason": end.outcome.reason,
        }),
        Some(Ending::Abandoned { supervisor, reason }) => json!({
            "status": records.summary.state.as_str(),
            "failure_kind": null,
            "reason": format!("{reason} (supervisor pid {})", supervisor.pid),
        }),
        None => json!({
            "status": records.summary.state.as_str(),
            "failure_kind": null,
            "reason": "",
        }),
    }
}

fn leaked_processes(end: Option<&SoakEnd>) -> Value {
    let leaked = end
        .map(|e| e.leaked_processes.as_slice())
        .unwrap_or_default();
    json!(leaked
        .iter()
        .map(|l| json!({ "pid": l.identity.pid, "start_ticks": l.identity.start_ticks, "name": l.name, "cmdline": l.cmdline }))
        .collect::<Vec<_>>())
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
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
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
