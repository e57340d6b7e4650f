//! `unilab.soak.artifact/4`, the artifact this unilab writes, of a soak recorded in schema 6's
//! forms or later: who ran what, where, with which parameters (the budgets and how the tree was
//! supervised among them), how it ended and what the verdict found, the evidence captured before
//! the tree was signalled, whether the GPUs were given back, the summary of the rows and what it
//! judges of the resources (`summary.memory_trend`, `gpu_health`, `contention`,
//! `progress_rate`), and the rows ([`rows`](crate::read::rows)). Its place in the log
//! (`log.chain_hash`) ties it to the chain.
//!
//! Written from the soak's typed record ([`SoakRecord`]): each part the views present is that
//! part of the record, serialised, so that a view and the artifact cannot disagree. What the
//! soak's schema did not record is left out, as the artifact of its time left it out.
//!
//! The frozen artifacts (`/1`–`/3`) have their own code ([`frozen`](super::frozen)): nothing
//! here changes them.

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::seconds;
use crate::event::soak::JobAlarm;
use crate::log::chain::to_hex;
use crate::read::fold::{Soak, SoakRecords};
use crate::read::progress::RowsProgress;
use crate::read::record::SoakRecord;
use crate::read::rows::Rows;
use crate::read::shown::Found;
use crate::time::unix_seconds;

pub(in crate::read) const SCHEMA: &str = "unilab.soak.artifact/4";

/// The rows of `soak`, empty: what [`head`] is given once they have seen every sample.
pub(in crate::read) fn rows(soak: &Soak) -> Rows {
    Rows::new(
        soak.start.ticks_per_second,
        &soak.limits.clone().unwrap_or_default(),
    )
    .with_beats(soak.recorded().beats)
}

/// The artifact as a JSON object, without `digest`.
pub(in crate::read) fn body(records: &SoakRecords) -> Value {
    let soak = &records.soak;
    let mut rows = rows(soak);
    let empty = Default::default();
    let mut progress = RowsProgress::default();
    let samples: Vec<Value> = soak
        .samples
        .iter()
        .map(|(sample, measures, noted)| {
            let measures = measures.as_ref().unwrap_or(&empty);
            let row = rows.row(sample, measures, noted.as_ref());
            progress.row(&row);
            serde_json::to_value(row).unwrap_or(Value::Null)
        })
        .collect();
    let record = SoakRecord::of(records.without_samples(), rows.tally(), progress.latest());
    let mut object = head(&record);
    object.insert("samples".into(), Value::Array(samples));
    Value::Object(object)
}

/// The artifact as a JSON object, without `digest` and without `samples`.
pub(in crate::read) fn head(record: &SoakRecord) -> Map<String, Value> {
    let records = &record.records;
    let soak = &records.soak;
    let recorded = record.recorded;
    let end = soak.end.as_deref().map(|v| &v.end);
    let mut object = frame(record);
    object.insert("parameters".into(), value(&record.parameters));
    object.insert("duration_seconds".into(), json!(record.duration_seconds));
    object.insert(
        "teardown_seconds".into(),
        json!(end.map(|e| seconds(e.teardown_ms))),
    );
    object.insert("progress".into(), value(&record.progress));
    object.insert("summary".into(), summary(record));
    object.insert("host".into(), records.host.clone().into());
    if let Some(lossy) = record.command_lossy {
        object.insert("command_lossy".into(), lossy.into());
    }
    // Every soak that renders `/4` was recorded in forms that find (`record.found` is there).
    let unfound;
    let found = match &record.found {
        Some(found) => found,
        None => {
            unfound = Found::of(records, recorded.job);
            &unfound
        }
    };
    object.insert("evidence".into(), json!(found.evidence.as_ref().map(value)));
    if recorded.job {
        object.insert(
            "job_evidence".into(),
            json!(found.job_evidence.as_ref().map(value)),
        );
    }
    object.insert(
        "gpu_release".into(),
        json!(found.gpu_release.as_ref().map(value)),
    );
    if let Some(Value::Object(outcome)) = object.get_mut("outcome") {
        let findings = &found.outcome;
        outcome.insert("child".into(), json!(findings.child.as_ref().map(value)));
        outcome.insert("oom_kills".into(), value(&findings.oom_kills));
        outcome.insert("unkillable".into(), value(&findings.unkillable));
        outcome.insert(
            "limit".into(),
            json!(record.judged.as_ref().and_then(|j| j.limit.as_deref())),
        );
        if recorded.job {
            // Schema 13 on, the alarm's run: the soak's own, which the alarm it saw was raised in.
            let run = recorded.runs.then(|| {
                record
                    .records
                    .soak
                    .job
                    .as_ref()
                    .and_then(|job| job.run.clone())
            });
            outcome.insert(
                "job_alarm".into(),
                json!(
                    findings
                        .job_alarm
                        .as_ref()
                        .map(|alarm| job_alarm(alarm, run.clone()))
                ),
            );
        }
    }
    object
}

/// A part of the record as the artifact shows it.
fn value(part: &impl Serialize) -> Value {
    serde_json::to_value(part).unwrap_or(Value::Null)
}

/// `summary`: the rows' peaks and totals, what it judges of the resources, and — of a soak
/// recorded in schema 10's forms on — the run's steps, the heartbeat file's errors and the
/// goodput.
fn summary(record: &SoakRecord) -> Value {
    let mut summary = value(&record.summary);
    if let Value::Object(object) = &mut summary {
        if let Some(judged) = &record.judged {
            object.insert(
                "peak_tree_pss_bytes".into(),
                json!(judged.peak_tree_pss_bytes),
            );
            object.insert(
                "memory_trend".into(),
                json!(judged.memory_trend.as_ref().map(value)),
            );
            object.insert("gpu_health".into(), value(&judged.gpu_health));
            object.insert("contention".into(), value(&judged.contention));
            object.insert(
                "progress_rate".into(),
                json!(judged.progress_rate.as_ref().map(value)),
            );
        }
        if let Some(Value::Object(stepped)) = record.stepped.as_ref().map(value) {
            object.extend(stepped);
        }
    }
    summary
}

/// The job's alarm as the rank that tripped wrote it; with its run (`Some`: the soak's run, of
/// schema 13 on; `null` for a soak recorded before runs) after the job.
fn job_alarm(alarm: &JobAlarm, run: Option<Option<String>>) -> Value {
    let mut object = Map::new();
    object.insert("job".into(), json!(alarm.job));
    if let Some(run) = run {
        object.insert("run".into(), json!(run));
    }
    for (key, value) in [
        ("rank", json!(alarm.rank)),
        ("host", json!(alarm.host)),
        ("soak_id", json!(alarm.soak_id)),
        ("failure_kind", json!(alarm.failure_kind)),
        ("reason", json!(alarm.reason)),
        ("at", json!(alarm.at)),
    ] {
        object.insert(key.into(), value);
    }
    Value::Object(object)
}

/// Identity, times, outcome, exit, leaks, output, and the place in the log.
fn frame(record: &SoakRecord) -> Map<String, Value> {
    let records = &record.records;
    let start = &records.soak.start;
    let summary = &records.summary;
    let end = records.soak.end.as_deref().map(|v| &v.end);
    let mut object = Map::new();
    object.insert("schema".into(), SCHEMA.into());
    object.insert("soak_id".into(), start.soak_id.clone().into());
    object.insert("command".into(), json!(start.command));
    object.insert("cwd".into(), start.cwd.clone().into());
    object.insert(
        "metadata".into(),
        crate::event::soak::metadata_view(&start.metadata),
    );
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
        unix_seconds(summary.started_at_us).into(),
    );
    object.insert(
        "ended_at".into(),
        json!(summary.ended_at_us.map(unix_seconds)),
    );
    object.insert("outcome".into(), value(&record.outcome));
    object.insert("exit".into(), json!(record.exit.as_ref().map(value)));
    let leaked = end.map(|e| &e.leaked_processes[..]).unwrap_or_default();
    object.insert(
        "leaked_processes".into(),
        json!(leaked
            .iter()
            .map(|l| json!({ "pid": l.identity.pid, "start_ticks": l.identity.start_ticks, "name": l.name, "cmdline": l.cmdline }))
            .collect::<Vec<_>>()),
    );
    object.insert("output_tail".into(), value(&record.output_tail));
    object.insert(
        "log".into(),
        json!({ "first_seq": summary.first_seq, "last_seq": summary.last_seq, "chain_hash": to_hex(&records.last_hash) }),
    );
    object
}
