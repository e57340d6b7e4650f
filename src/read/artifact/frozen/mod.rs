//! The artifacts of soaks recorded in forms older than the current artifact's, frozen: each
//! renders byte for byte what the unilab of its schema rendered, from the upcast soak and the
//! schema its start was recorded in — `/1` ([`v1`]) for schema 1's forms, `/2` ([`v2`]) for
//! schema 2–4's, `/3` ([`v3`]) for schema 5's. Each is independent of the others and of the
//! current artifact: what they share is frozen here (the frame every one of them shows alike)
//! and in [`rows`] (the rows of `/2` and `/3`). Nothing in this folder may change but how their
//! rows and figures read today ([`read`], [`read_v1`], and the tallies of [`Rows::tally`] and
//! [`whole`], from which a soak's typed record is made): the CSV, the report and `soak show`
//! read every soak alike. They render from the raw fold, not from the typed record: the record
//! is today's reading of a soak, and a frozen artifact must stay what its own version wrote.

mod rows;
mod v1;
mod v2;
mod v3;

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::event::soak::{self, Outcome, Sample, SoakParameters};
use crate::log::chain::to_hex;
use crate::process::ProcessIdentity;
use crate::read::fold::{Abandonment, Form, Soak, SoakRecords};
use crate::read::rows::{GpuRow, SampleRow, Tally};
use crate::time::unix_seconds;

/// Whether `soak` renders a frozen artifact: whether its start was recorded before schema 6.
pub(in crate::read) fn renders(soak: &Soak) -> bool {
    soak.recorded().form < Form::Current
}

/// The frozen artifact of `records` as a JSON object, without `digest`.
pub(in crate::read) fn body(records: &SoakRecords) -> Value {
    match records.soak.recorded().form {
        Form::First => v1::body(records),
        Form::Second => v2::body(records),
        Form::Third | Form::Current => v3::body(records),
    }
}

/// The name of the frozen artifact of `form`.
pub(in crate::read) fn schema(form: Form) -> &'static str {
    match form {
        Form::First => v1::SCHEMA,
        Form::Second => v2::SCHEMA,
        Form::Third | Form::Current => v3::SCHEMA,
    }
}

/// A row of `/2` or `/3`, as the artifact holds it.
pub(in crate::read) type Row<'a> = rows::SampleRow<'a>;

/// The rows of a frozen soak of `/2` or `/3` as its samples go by; `None` for `/1`, whose rows
/// are rendered from all its samples at once ([`whole`]).
pub(in crate::read) struct Rows(rows::Rows);

impl Rows {
    pub(in crate::read) fn of(soak: &Soak) -> Option<Self> {
        (soak.recorded().form > Form::First).then(|| Self(rows::Rows::new(&soak.start)))
    }

    pub(in crate::read) fn row<'s>(&mut self, sample: &'s Sample) -> Row<'s> {
        self.0.row(sample)
    }

    /// The artifact without `samples` and `digest`, once every sample has been rowed.
    pub(in crate::read) fn head(&self, records: &SoakRecords) -> Map<String, Value> {
        match records.soak.recorded().form {
            Form::First | Form::Second => v2::head(records, &self.0),
            Form::Third | Form::Current => v3::head(records, &self.0),
        }
    }

    /// What the rows tell of the run, once every sample has been rowed.
    pub(in crate::read) fn tally(&self) -> Tally {
        self.0.tally()
    }
}

/// A row of `/1`, as the artifact holds it.
pub(in crate::read) type RowV1<'a> = v1::Row<'a>;

/// The artifact of a soak of `/1` without `samples` and `digest`, its rows, and what they tell
/// of the run.
pub(in crate::read) fn whole(records: &SoakRecords) -> (Map<String, Value>, Vec<RowV1<'_>>, Tally) {
    let samples = &records.soak.samples;
    let rows = v1::rows(samples);
    let last_progress = samples.last().map(|(s, ..)| s.progress).unwrap_or_default();
    let tally = v1::tally(&rows, last_progress);
    (v1::head(records, &rows), rows, tally)
}

/// A row of `/2` or `/3` as the rows of today read: no proportional set size, no GPU health.
pub(in crate::read) fn read<'a>(row: &'a Row<'a>) -> SampleRow<'a> {
    SampleRow {
        after_exit: Some(row.after_exit),
        cpu_percent: row.cpu_percent,
        cpu_seconds: row.cpu_seconds,
        elapsed_seconds: row.elapsed_seconds,
        errors: row.errors,
        gpus: row.gpus.as_ref().map(|gpus| {
            gpus.iter()
                .map(|g| GpuRow {
                    ecc_uncorrected_volatile: None,
                    index: g.index,
                    memory_total_mib: g.memory_total_mib,
                    memory_used_mib: g.memory_used_mib,
                    other_processes: None,
                    power_w: None,
                    retired_pages_pending: None,
                    sm_clock_mhz: None,
                    temperature_c: None,
                    throttle_reasons: None,
                    tree_memory_mib: g.tree_memory_mib,
                    utilization_percent: g.utilization_percent,
                    uuid: g.uuid,
                })
                .collect()
        }),
        heartbeat: None,
        host_gpu_memory_used_mib: row.host_gpu_memory_used_mib,
        index: row.index,
        open_fds: row.open_fds,
        processes: row.processes,
        progress_bytes: row.progress_bytes,
        progress_files: row.progress_files,
        read_bytes: row.read_bytes,
        rss_bytes: row.rss_bytes,
        sampler_cost_us: row.sampler_cost_us,
        threads: row.threads,
        tree_gpu_memory_mib: row.tree_gpu_memory_mib,
        tree_pss_bytes: None,
        write_bytes: row.write_bytes,
        gpu_utilization_percent: None,
        last_progress_at: None,
        progress_seen: None,
        progress: None,
    }
}

/// A row of `/1` as the rows of today read: the GPUs as one figure each for memory, the tree's
/// memory and utilisation, no CPU share, nothing said of the command's exit.
pub(in crate::read) fn read_v1<'a>(row: &'a RowV1<'a>) -> SampleRow<'a> {
    SampleRow {
        after_exit: None,
        cpu_percent: None,
        cpu_seconds: row.cpu_seconds,
        elapsed_seconds: row.elapsed_seconds,
        errors: row.errors,
        gpus: None,
        heartbeat: None,
        host_gpu_memory_used_mib: Some(row.gpu_memory_used_mib),
        index: row.index,
        open_fds: row.open_fds,
        processes: row.processes,
        progress_bytes: row.progress_bytes,
        progress_files: row.progress_files,
        read_bytes: row.read_bytes,
        rss_bytes: row.rss_bytes,
        sampler_cost_us: row.sampler_cost_us,
        threads: row.threads,
        tree_gpu_memory_mib: Some(row.tree_gpu_memory_mib),
        tree_pss_bytes: None,
        write_bytes: row.write_bytes,
        gpu_utilization_percent: row.gpu_utilization_percent,
        last_progress_at: None,
        progress_seen: None,
        progress: None,
    }
}

pub(super) fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
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

/// The limits, where the progress was watched and what unilab set for the command.
pub(super) fn parameters(
    params: &SoakParameters,
    progress_dir: &str,
    output: &str,
    environment: &BTreeMap<String, String>,
) -> Map<String, Value> {
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
    object.insert("progress_dir".into(), progress_dir.into());
    object.insert("output".into(), output.into());
    object.insert("environment".into(), json!(environment));
    object
}

/// What every version of the artifact shows alike.
pub(super) struct Frame<'a> {
    pub(super) schema: &'static str,
    pub(super) soak_id: &'a str,
    pub(super) command: &'a [String],
    pub(super) cwd: &'a str,
    pub(super) metadata: &'a BTreeMap<String, String>,
    pub(super) runtime_json: &'a str,
    pub(super) supervisor: ProcessIdentity,
    pub(super) outcome: Option<&'a Outcome>,
    pub(super) exit: Option<soak::ExitInfo>,
    pub(super) leaked: &'a [soak::LeakedProcess],
    /// Standard output and error, once the soak has ended.
    pub(super) tails: Option<(&'a [u8], &'a [u8])>,
}

/// The fields every version shows alike: identity, times, outcome, exit, leaks, output, and the
/// place in the log.
pub(super) fn frame(records: &SoakRecords, frame: &Frame) -> Map<String, Value> {
    let summary = &records.summary;
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let mut object = Map::new();
    object.insert("schema".into(), frame.schema.into());
    object.insert("soak_id".into(), frame.soak_id.into());
    object.insert("command".into(), json!(frame.command));
    object.insert("cwd".into(), frame.cwd.into());
    object.insert(
        "metadata".into(),
        crate::event::soak::metadata_view(frame.metadata),
    );
    object.insert(
        "runtime".into(),
        serde_json::from_str(frame.runtime_json).unwrap_or(Value::Null),
    );
    object.insert(
        "supervisor".into(),
        json!({ "pid": frame.supervisor.pid, "start_ticks": frame.supervisor.start_ticks }),
    );
    object.insert(
        "started_at".into(),
        unix_seconds(summary.started_at_us).into(),
    );
    object.insert(
        "ended_at".into(),
        json!(summary.ended_at_us.map(unix_seconds)),
    );
    object.insert("outcome".into(), outcome(records, frame.outcome));
    object.insert(
        "exit".into(),
        json!(
            frame
                .exit
                .map(|e| json!({ "code": e.code, "signal": e.signal }))
        ),
    );
    object.insert(
        "leaked_processes".into(),
        json!(frame.leaked
            .iter()
            .map(|l| json!({ "pid": l.identity.pid, "start_ticks": l.identity.start_ticks, "name": l.name, "cmdline": l.cmdline }))
            .collect::<Vec<_>>()),
    );
    object.insert(
        "output_tail".into(),
        json!({
            "stdout": frame.tails.map(|(out, _)| text(out)).unwrap_or_default(),
            "stderr": frame.tails.map(|(_, err)| text(err)).unwrap_or_default(),
        }),
    );
    object.insert(
        "log".into(),
        json!({ "first_seq": summary.first_seq, "last_seq": summary.last_seq, "chain_hash": to_hex(&records.last_hash) }),
    );
    object
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Moved from `soak show`, which read schema 1's rows from their JSON and refused one that
    /// lacked a figure rather than read it as zero: typed now, a row of `/1` reads with every
    /// figure it holds, each in its place, and nothing it does not hold.
    #[test]
    fn a_schema_1_row_reads_with_every_figure_it_holds() {
        let errors = ["e".to_owned()];
        let row = RowV1 {
            cpu_seconds: 1.5,
            elapsed_seconds: 2.0,
            errors: &errors,
            gpu_memory_used_mib: 3,
            gpu_utilization_percent: Some(4),
            index: 5,
            open_fds: 6,
            processes: 7,
            progress_bytes: 8,
            progress_files: 9,
            read_bytes: 10,
            rss_bytes: 11,
            sampler_cost_us: 12,
            threads: 13,
            tree_gpu_memory_mib: 14,
            write_bytes: 15,
        };
        let read = read_v1(&row);
        assert_eq!(
            (read.cpu_seconds, read.elapsed_seconds, read.errors),
            (1.5, 2.0, &errors[..])
        );
        assert_eq!(
            (
                read.host_gpu_memory_used_mib,
                read.gpu_utilization_percent,
                read.tree_gpu_memory_mib
            ),
            (Some(3), Some(4), Some(14))
        );
        assert_eq!(
            [
                read.index,
                read.open_fds,
                read.processes,
                read.progress_bytes,
                read.progress_files,
                read.read_bytes,
                read.rss_bytes,
                read.sampler_cost_us,
                read.threads,
                read.write_bytes
            ],
            [5, 6, 7, 8, 9, 10, 11, 12, 13, 15]
        );
        assert_eq!(
            (read.after_exit, read.cpu_percent, read.tree_pss_bytes),
            (None, None, None),
            "what schema 1 did not record"
        );
        assert!(read.gpus.is_none());
    }
}
