//! `unilab.soak.artifact/3`, frozen: the artifact of a soak recorded in schema 5's forms, byte
//! for byte as unilab rendered it then (`migrations/fixtures/v5` on hold one).
//!
//! Against `/2`: `host`, the hostname the log is scoped to; `evidence`, what the tree was doing
//! when the supervisor was about to signal it (`null` when it never was); `gpu_release`, whether
//! the GPUs were given back once the tree was gone; the outcome names the child whose failure
//! failed the soak (`child`), the kernel's OOM kills (`oom_kills`) and what no signal ended
//! (`unkillable`); the parameters say how the tree was supervised (`fail_fast`, `py_spy`,
//! `dump_signal`, `dump_wait_seconds`). Samples are `/2`'s rows.

use serde_json::{Map, Value, json};

use super::rows::Rows;
use super::{Frame, frame, parameters, seconds};
use crate::event::soak::{Evidence, ExitInfo, Findings, GpuRelease, ProcessEvidence, Supervision};
use crate::read::fold::SoakRecords;
use crate::time::unix_seconds;

pub(super) const SCHEMA: &str = "unilab.soak.artifact/3";

fn exit(exit: &ExitInfo) -> Value {
    json!({ "code": exit.code, "signal": exit.signal })
}

/// A signal's name (`SIGUSR1`), or its number where this host has no name for it.
fn signal_name(signal: i32) -> Value {
    nix::sys::signal::Signal::try_from(signal)
        .map(|s| Value::from(s.as_str()))
        .unwrap_or_else(|_| Value::from(signal))
}

fn process(p: &ProcessEvidence) -> Value {
    json!({
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
    })
}

fn evidence(evidence: &Evidence) -> Value {
    json!({
        "trigger": evidence.trigger.as_str(),
        "captured_at": unix_seconds(evidence.captured_at_us),
        "processes": evidence.processes.iter().map(process).collect::<Vec<_>>(),
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
    })
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

/// What the verdict found, in the outcome beside `/2`'s fields.
fn findings(outcome: &mut Map<String, Value>, findings: Option<&Findings>) {
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

fn supervision(params: &mut Map<String, Value>, supervision: &Supervision) {
    params.insert("fail_fast".into(), supervision.fail_fast.into());
    params.insert("py_spy".into(), json!(supervision.py_spy));
    params.insert(
        "dump_signal".into(),
        json!(supervision.dump_signal.map(signal_name)),
    );
    params.insert(
        "dump_wait_seconds".into(),
        seconds(supervision.dump_wait_ms).into(),
    );
}

/// The artifact as a JSON object, without `digest` and without `samples`, once `rows` has seen
/// every sample.
pub(super) fn head(records: &SoakRecords, rows: &Rows) -> Map<String, Value> {
    let soak = &records.soak;
    let start = &soak.start;
    let verdict = soak.end.as_deref();
    let end = verdict.map(|v| &v.end);
    let findings_of = verdict.map(|v| v.findings.clone().unwrap_or_default());
    let mut params = parameters(
        &start.parameters,
        &start.progress_dir,
        &start.output,
        &start.environment,
    );
    params.insert("require_progress".into(), start.require_progress.into());
    supervision(&mut params, &soak.supervision.clone().unwrap_or_default());
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
    object.insert("parameters".into(), Value::Object(params));
    object.insert(
        "duration_seconds".into(),
        json!(end.map(|e| seconds(e.run_ms))),
    );
    object.insert(
        "teardown_seconds".into(),
        json!(end.map(|e| seconds(e.teardown_ms))),
    );
    object.insert(
        "progress".into(),
        json!({
            "first_seen_seconds": end.and_then(|e| e.first_progress_ms).map(seconds),
            "last_change_seconds": end.and_then(|e| e.last_progress_ms).map(seconds),
            "files": rows.last_progress.files,
            "bytes": rows.last_progress.bytes,
        }),
    );
    object.insert("summary".into(), rows.summary());
    object.insert("host".into(), records.host.clone().into());
    object.insert(
        "evidence".into(),
        json!(records.evidence.as_deref().map(evidence)),
    );
    object.insert(
        "gpu_release".into(),
        json!(
            findings_of
                .as_ref()
                .and_then(|f| f.gpu_release.as_ref())
                .map(gpu_release)
        ),
    );
    if let Some(Value::Object(outcome)) = object.get_mut("outcome") {
        findings(outcome, findings_of.as_ref());
    }
    object
}

/// The artifact as a JSON object, without `digest`.
pub(super) fn body(records: &SoakRecords) -> Value {
    let soak = &records.soak;
    let (rows, samples) = super::rows::all(&soak.start, &soak.samples);
    let mut object = head(records, &rows);
    object.insert("samples".into(), Value::Array(samples));
    Value::Object(object)
}
