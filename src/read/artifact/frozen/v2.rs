//! `unilab.soak.artifact/2`, frozen: the artifact of a soak recorded in schema 2–4's forms,
//! byte for byte as unilab rendered it then (`migrations/fixtures/v2` on hold one).
//!
//! Against `/1`: each sample carries a per-GPU list (`uuid`, `index`, utilisation, memory, and
//! this tree's memory on it), with the tree's GPU memory apart from the host's and `null` where a
//! value is unknown; CPU time includes the tree's reaped processes and never decreases, with CPU %
//! per interval; the sample taken after the command exited says so; `duration_seconds` is the
//! command's own run time and `teardown_seconds` the shutdown after it; ticks are read with the
//! sampling host's tick rate, recorded with the soak; `parameters.require_progress`.

use serde_json::{Map, Value, json};

use super::rows::Rows;
use super::{Frame, frame, parameters, seconds};
use crate::event::soak::{SoakEnd, SoakStart};
use crate::read::fold::SoakRecords;

pub(super) const SCHEMA: &str = "unilab.soak.artifact/2";

/// The artifact as a JSON object, without `digest` and without `samples`, once `rows` has seen
/// every sample.
pub(super) fn head(records: &SoakRecords, rows: &Rows) -> Map<String, Value> {
    let start: &SoakStart = &records.soak.start;
    let end: Option<&SoakEnd> = records.soak.end.as_deref().map(|v| &v.end);
    let mut params = parameters(
        &start.parameters,
        &start.progress_dir,
        &start.output,
        &start.environment,
    );
    params.insert("require_progress".into(), start.require_progress.into());
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
