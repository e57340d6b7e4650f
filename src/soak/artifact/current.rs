//! `unilab.soak.artifact/4`, the artifact this unilab writes, of a soak recorded in schema 6's
//! forms or later: who ran what, where, with which parameters (the budgets and how the tree was
//! supervised among them), how it ended and what the verdict found, the evidence captured before
//! the tree was signalled, whether the GPUs were given back, the summary of the rows and what it
//! judges of the resources (`summary.memory_trend`, `gpu_health`, `contention`,
//! `progress_rate`), and the rows ([`rows`](super::rows)). Its place in the log
//! (`log.chain_hash`) ties it to the chain.
//!
//! The frozen artifacts (`/1`–`/3`) have their own code ([`frozen`](super::frozen)): nothing
//! here changes them.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::beats;
use super::rows::Rows;
use super::{Abandonment, Soak, SoakRecords, Verdict, seconds};
use crate::event::soak::{
    Evidence, ExitInfo, FailureKind, Findings, GpuRelease, JobAlarmSeen, Limits, Outcome,
    ProcessEvidence, ResourceLimit, SoakStart, Supervision,
};
use crate::log::chain::to_hex;
use crate::soak::signature::{
    self,
    group::{group, signatures_by_rank},
};
use crate::time::unix_seconds;

const SCHEMA: &str = "unilab.soak.artifact/4";

/// The rows of `soak`, empty: what [`head`] is given once they have seen every sample.
pub(super) fn rows(soak: &Soak) -> Rows {
    Rows::new(
        soak.start.ticks_per_second,
        &soak.limits.clone().unwrap_or_default(),
    )
    .with_beats(soak.schema >= 10)
}

/// The artifact as a JSON object, without `digest`.
pub(super) fn body(records: &SoakRecords) -> Value {
    let soak = &records.soak;
    let mut rows = rows(soak);
    let empty = Default::default();
    let samples: Vec<Value> = soak
        .samples
        .iter()
        .map(|(sample, measures, progress)| {
            let row = rows.row(
                sample,
                measures.as_ref().unwrap_or(&empty),
                progress.as_ref(),
            );
            serde_json::to_value(row).unwrap_or(Value::Null)
        })
        .collect();
    let mut object = head(records, &rows);
    object.insert("samples".into(), Value::Array(samples));
    Value::Object(object)
}

/// The artifact as a JSON object, without `digest` and without `samples`, once `rows` has seen
/// every sample.
pub(super) fn head(records: &SoakRecords, rows: &Rows) -> Map<String, Value> {
    let soak = &records.soak;
    let start = &soak.start;
    let verdict = soak.end.as_deref();
    let end = verdict.map(|v| &v.end);
    let findings = verdict.map(|v| v.findings.clone().unwrap_or_default());
    let mut object = frame(records, start, verdict);
    object.insert(
        "parameters".into(),
        Value::Object(parameters(
            start,
            &soak.supervision.clone().unwrap_or_default(),
            &soak.limits.clone().unwrap_or_default(),
        )),
    );
    object.insert(
        "duration_seconds".into(),
        json!(end.map(|e| seconds(e.run_ms))),
    );
    object.insert(
        "teardown_seconds".into(),
        json!(end.map(|e| seconds(e.teardown_ms))),
    );
    let last_progress = rows.last_progress();
    object.insert(
        "progress".into(),
        json!({
            "first_seen_seconds": end.and_then(|e| e.first_progress_ms).map(seconds),
            "last_change_seconds": end.and_then(|e| e.last_progress_ms).map(seconds),
            "files": last_progress.files,
            "bytes": last_progress.bytes,
        }),
    );
    let mut summary = rows.summary();
    // Schema 10 on: the run's steps, the heartbeat file's errors and the goodput, and the step
    // limits among the parameters; a soak recorded before exports as it always did.
    if soak.schema >= 10 {
        let found = findings.as_ref().and_then(|f| f.heartbeat.as_deref());
        if let Value::Object(summary) = &mut summary {
            summary.extend(beats::summary(found).map(|(k, v)| (k.to_owned(), v)));
        }
        if let Some(Value::Object(parameters)) = object.get_mut("parameters") {
            let settings = soak.supervision.as_ref().and_then(|s| s.heartbeat.as_ref());
            parameters.extend(beats::parameters(settings).map(|(k, v)| (k.to_owned(), v)));
        }
    }
    object.insert("summary".into(), summary);
    object.insert("host".into(), records.host.clone().into());
    // Schema 11 on: whether `command` is the command line as run, or lossy (an argument that
    // is not UTF-8); a soak recorded before (which could hold no such argument) exports as it
    // always did.
    if soak.schema >= 11 {
        object.insert("command_lossy".into(), soak.command_lossy.into());
    }
    // Schema 9 on (a soak's job): each process's rank and the MPS clients ended, the capture
    // made at the job's alarm and the alarm that failed it; a soak recorded before exports as it
    // always did.
    let job = soak.schema >= 9;
    let shown = |e: &Evidence| evidence(e, job);
    object.insert(
        "evidence".into(),
        json!(records.evidence.as_deref().map(shown)),
    );
    if job {
        object.insert(
            "job_evidence".into(),
            json!(records.job_evidence.as_deref().map(shown)),
        );
    }
    object.insert(
        "gpu_release".into(),
        json!(
            findings
                .as_ref()
                .and_then(|f| f.gpu_release.as_ref())
                .map(gpu_release)
        ),
    );
    if let Some(Value::Object(outcome)) = object.get_mut("outcome") {
        found(outcome, findings.as_ref());
        outcome.insert(
            "limit".into(),
            json!(verdict.and_then(|v| v.limit).map(ResourceLimit::as_str)),
        );
        if job {
            let job_failed =
                end.and_then(|e| e.outcome.failure_kind) == Some(FailureKind::JobFailed);
            // Schema 13 on, the alarm's run: the soak's own, which the alarm it saw was raised in.
            let run = soak
                .job
                .as_ref()
                .filter(|_| soak.schema >= 13)
                .map(|job| job.run.clone());
            outcome.insert(
                "job_alarm".into(),
                json!(
                    records
                        .job_alarm
                        .as_deref()
                        .filter(|_| job_failed)
                        .map(|seen| job_alarm(seen, run))
                ),
            );
        }
    }
    object
}

/// The job's alarm as the rank that tripped wrote it; with its run (`Some`: the soak's run, of
/// schema 13 on; `null` for a soak recorded before runs) after the job.
fn job_alarm(seen: &JobAlarmSeen, run: Option<Option<String>>) -> Value {
    let seen = &seen.alarm;
    let mut alarm = Map::new();
    alarm.insert("job".into(), json!(seen.job));
    if let Some(run) = run {
        alarm.insert("run".into(), json!(run));
    }
    for (key, value) in [
        ("rank", json!(seen.rank)),
        ("host", json!(seen.host)),
        ("soak_id", json!(seen.soak_id)),
        ("failure_kind", json!(seen.failure_kind)),
        ("reason", json!(seen.reason)),
        ("at", json!(seen.at)),
    ] {
        alarm.insert(key.into(), value);
    }
    Value::Object(alarm)
}

/// Identity, times, outcome, exit, leaks, output, and the place in the log.
fn frame(
    records: &SoakRecords,
    start: &SoakStart,
    verdict: Option<&Verdict>,
) -> Map<String, Value> {
    let summary = &records.summary;
    let end = verdict.map(|v| &v.end);
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
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
    object.insert("outcome".into(), outcome(records, end.map(|e| &e.outcome)));
    object.insert(
        "exit".into(),
        json!(end.and_then(|e| e.exit).map(|e| exit(&e))),
    );
    let leaked = end.map(|e| &e.leaked_processes[..]).unwrap_or_default();
    object.insert(
        "leaked_processes".into(),
        json!(leaked
            .iter()
            .map(|l| json!({ "pid": l.identity.pid, "start_ticks": l.identity.start_ticks, "name": l.name, "cmdline": l.cmdline }))
            .collect::<Vec<_>>()),
    );
    object.insert(
        "output_tail".into(),
        json!({
            "stdout": end.map(|e| text(&e.stdout_tail)).unwrap_or_default(),
            "stderr": end.map(|e| text(&e.stderr_tail)).unwrap_or_default(),
        }),
    );
    object.insert(
        "log".into(),
        json!({ "first_seq": summary.first_seq, "last_seq": summary.last_seq, "chain_hash": to_hex(&records.last_hash) }),
    );
    object
}

/// `status` (`running` until the verdict), `failure_kind` and `reason`.
fn outcome(records: &SoakRecords, verdict: Option<&Outcome>) -> Value {
    match (verdict, &records.abandoned) {
        (Some(outcome), _) => json!({
            "status": outcome.status.as_str(),
            "failure_kind": outcome.failure_kind,
            "reason": outcome.reason,
        }),
        (None, Some(Abandonment { supervisor, reason })) => json!({
            "status": records.summary.state.as_str(),
            "failure_kind": null,
            "reason": format!("{reason} (supervisor pid {})", supervisor.pid),
        }),
        (None, None) => json!({
            "status": records.summary.state.as_str(),
            "failure_kind": null,
            "reason": "",
        }),
    }
}

/// The limits, where the progress was watched, what unilab set for the command, how the tree
/// was supervised and the budgets it was held to.
fn parameters(start: &SoakStart, supervision: &Supervision, limits: &Limits) -> Map<String, Value> {
    let params = &start.parameters;
    let mut object = Map::new();
    for (key, ms) in [
        ("sample_interval_seconds", params.sample_interval_ms),
        ("startup_timeout_seconds", params.startup_timeout_ms),
        ("stale_progress_seconds", params.stale_progress_ms),
        ("shutdown_grace_seconds", params.shutdown_grace_ms),
        ("min_duration_seconds", params.min_duration_ms),
    ] {
        object.insert(key.into(), seconds(ms).into());
    }
    let entries: BTreeMap<&str, Value> = BTreeMap::from([
        ("progress_dir", start.progress_dir.clone().into()),
        ("output", start.output.clone().into()),
        ("environment", json!(start.environment)),
        ("require_progress", start.require_progress.into()),
        ("fail_fast", supervision.fail_fast.into()),
        ("py_spy", json!(supervision.py_spy)),
        (
            "dump_signal",
            json!(supervision.dump_signal.map(signal_name)),
        ),
        (
            "dump_wait_seconds",
            seconds(supervision.dump_wait_ms).into(),
        ),
        ("max_memory_bytes", json!(limits.max_memory_bytes)),
        ("max_gpu_memory_bytes", json!(limits.max_gpu_memory_bytes)),
        (
            "max_memory_growth_bytes_per_hour",
            json!(limits.max_memory_growth_bytes_per_hour),
        ),
        ("warmup_seconds", json!(limits.warmup_ms.map(seconds))),
    ]);
    object.extend(entries.into_iter().map(|(k, v)| (k.to_owned(), v)));
    object
}

fn exit(exit: &ExitInfo) -> Value {
    json!({ "code": exit.code, "signal": exit.signal })
}

/// A signal's name (`SIGUSR1`), or its number where this host has no name for it.
fn signal_name(signal: i32) -> Value {
    nix::sys::signal::Signal::try_from(signal)
        .map(|s| Value::from(s.as_str()))
        .unwrap_or_else(|_| Value::from(signal))
}

/// A process of the evidence; with its rank and its stack's signature from schema 9 on
/// (`job`).
fn process(p: &ProcessEvidence, job: bool) -> Value {
    let mut shown = json!({
        "pid": p.pid,
        "ppid": p.ppid,
        "start_ticks": p.start_ticks,
        "name": p.name,
        "state": p.state.to_string(),
        "cmdline": p.cmdline,
        "threads": p.threads.iter().map(|t| json!({
            "tid": t.tid,
            "name": t.name,
            "state": t.state.to_string(),
            "wchan": t.wchan,
            "syscall": t.syscall,
        })).collect::<Vec<_>>(),
        "kernel_stack": p.kernel_stack,
        "python_stack": p.python_stack,
        "holds_gpu_device": p.holds_gpu_device,
    });
    if let (true, Value::Object(object)) = (job, &mut shown) {
        let stack = signature::of_process(p);
        object.insert("rank".into(), json!(p.rank));
        object.insert("signature".into(), json!(stack.signature));
        object.insert("top_frames".into(), json!(stack.top_frames));
    }
    shown
}

/// The evidence; with each process's rank and signature, the tree's ranks grouped by it and the
/// MPS clients ended, from schema 9 on (`job`).
fn evidence(evidence: &Evidence, job: bool) -> Value {
    let mut shown = json!({
        "trigger": evidence.trigger.as_str(),
        "captured_at": unix_seconds(evidence.captured_at_us),
        "processes": evidence.processes.iter().map(|p| process(p, job)).collect::<Vec<_>>(),
        "cgroup": evidence.cgroup.as_ref().map(|c| json!({
            "version": c.version,
            "path": c.path,
            "memory_max_bytes": c.memory_max_bytes,
            "oom_kill_count": c.oom_kill_count,
        })),
        "kernel_messages": evidence.kernel_messages.iter().map(|m| json!({
            "at": unix_seconds(m.at_us),
            "line": m.line,
        })).collect::<Vec<_>>(),
        "unavailable": evidence.unavailable,
    });
    if let (true, Value::Object(object)) = (job, &mut shown) {
        // The ranks of its tree (a launcher's holds several) grouped as `job show` groups a
        // job's: one rank is one group.
        let grouping = group(&signatures_by_rank(&evidence.processes, &|p| p.rank));
        object.insert("groups".into(), json!(grouping.groups));
        object.insert("odd_ranks".into(), json!(grouping.odd_ranks));
        object.insert(
            "mps".into(),
            json!(
                evidence
                    .mps
                    .iter()
                    .map(|m| json!({
                        "daemon": m.daemon,
                        "server_pid": m.server_pid,
                        "terminated": m.terminated,
                    }))
                    .collect::<Vec<_>>()
            ),
        );
    }
    shown
}

fn gpu_release(release: &GpuRelease) -> Value {
    json!({
        "gpus": release.gpus.iter().map(|g| json!({
            "uuid": g.uuid,
            "memory_used_before_mib": g.memory_used_before_mib,
            "memory_used_after_mib": g.memory_used_after_mib,
            "released": g.released,
        })).collect::<Vec<_>>(),
        "holders": release.holders.iter().map(|h| json!({
            "pid": h.pid,
            "name": h.name,
            "path": h.path,
        })).collect::<Vec<_>>(),
    })
}

/// What the verdict found, in the outcome: the child whose failure failed the soak, the
/// kernel's OOM kills and what no signal ended.
fn found(outcome: &mut Map<String, Value>, findings: Option<&Findings>) {
    outcome.insert(
        "child".into(),
        json!(findings.and_then(|f| f.child.as_ref()).map(|c| json!({
            "pid": c.pid,
            "name": c.name,
            "exit": exit(&c.exit),
        }))),
    );
    outcome.insert(
        "oom_kills".into(),
        json!(
            findings
                .map(|f| &f.oom_kills[..])
                .unwrap_or_default()
                .iter()
                .map(|k| json!({
                    "pid": k.pid,
                    "name": k.name,
                    "source": k.source.as_str(),
                }))
                .collect::<Vec<_>>()
        ),
    );
    outcome.insert(
        "unkillable".into(),
        json!(
            findings
                .map(|f| &f.unkillable[..])
                .unwrap_or_default()
                .iter()
                .map(|p| json!({
                    "pid": p.pid,
                    "name": p.name,
                    "state": p.state.to_string(),
                    "wchan": p.wchan,
                }))
                .collect::<Vec<_>>()
        ),
    );
}
