//! The fields of an artifact that `soak show` reads, typed. They are read from the artifact's own
//! JSON (either schema's), so that a key renamed or dropped there is an error that names it,
//! never a figure that silently reads as zero.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::stream::Row;

/// What `soak show` reads of an artifact but its rows.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Shown {
    /// How the command exited; `None` while it runs, or when it never started.
    pub exit: Option<ExitShown>,
    /// How long the command ran; `None` while it runs.
    pub duration_seconds: Option<f64>,
    pub progress: ProgressShown,
    pub summary: SummaryShown,
    pub output_tail: TailsShown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub(crate) struct ExitShown {
    pub code: Option<i64>,
    pub signal: Option<i64>,
}

/// The progress directory over the run: when it first showed progress, when it last changed,
/// and its files and bytes at the last sample.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
pub(crate) struct ProgressShown {
    pub first_seen_seconds: Option<f64>,
    pub last_change_seconds: Option<f64>,
    pub files: u64,
    pub bytes: u64,
}

/// The peaks and totals of the run. Schema 1 has no CPU share.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub(crate) struct SummaryShown {
    pub peak_rss_bytes: u64,
    pub peak_processes: u64,
    pub peak_threads: u64,
    pub peak_cpu_percent: Option<f64>,
    pub peak_tree_gpu_memory_mib: Option<u64>,
    pub final_cpu_seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct TailsShown {
    pub stdout: String,
    pub stderr: String,
}

impl Shown {
    /// Reads the fields of an artifact's head (every field but `samples`).
    pub(crate) fn of(head: Map<String, Value>) -> Result<Self, serde_json::Error> {
        serde_json::from_value(Value::Object(head))
    }
}

/// What `soak show` reads of one row, as either schema holds it.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub(crate) struct PointShown {
    pub elapsed_seconds: f64,
    pub rss_bytes: u64,
    pub processes: u64,
    pub progress_files: u64,
    pub progress_bytes: u64,
}

impl PointShown {
    /// A row's point: schema 2's rows come typed, schema 1's as the JSON the artifact holds.
    pub(crate) fn of(row: Row<'_>) -> Result<Self, serde_json::Error> {
        match row {
            Row::V1(row) => Self::deserialize(row),
            Row::V2(row) => Ok(Self {
                elapsed_seconds: row.elapsed_seconds,
                rss_bytes: row.rss_bytes,
                processes: row.processes,
                progress_files: row.progress_files,
                progress_bytes: row.progress_bytes,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn head() -> Value {
        json!({
            "exit": {"code": 0, "signal": null},
            "duration_seconds": 12.5,
            "progress": {"first_seen_seconds": 1.0, "last_change_seconds": 11.0, "files": 3, "bytes": 30},
            "summary": {
                "peak_rss_bytes": 1024, "peak_processes": 2, "peak_threads": 5,
                "peak_open_fds": 9, "final_cpu_seconds": 3.25, "peak_tree_gpu_memory_mib": 0
            },
            "output_tail": {"stdout": "done\n", "stderr": ""},
            "schema": "unilab.soak.artifact/1"
        })
    }

    #[test]
    fn an_artifacts_head_reads_with_what_its_schema_lacks_as_unknown() {
        let Value::Object(head) = head() else {
            unreachable!()
        };
        let shown = Shown::of(head).unwrap();
        assert_eq!(shown.summary.peak_rss_bytes, 1024);
        assert_eq!(
            shown.summary.peak_cpu_percent, None,
            "schema 1 has no CPU share"
        );
        assert_eq!(
            shown.exit,
            Some(ExitShown {
                code: Some(0),
                signal: None
            })
        );
    }

    #[test]
    fn a_renamed_or_dropped_figure_is_an_error_that_names_it_not_a_zero() {
        let mut renamed = head();
        let summary = renamed["summary"].as_object_mut().unwrap();
        let rss = summary.remove("peak_rss_bytes").unwrap();
        summary.insert("peak_rss".into(), rss);
        let Value::Object(head) = renamed else {
            unreachable!()
        };
        let error = Shown::of(head).unwrap_err().to_string();
        assert!(error.contains("peak_rss_bytes"), "{error}");
    }
}
