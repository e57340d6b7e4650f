//! The fields of an artifact that `soak show` and the report read, typed. Its head is read from
//! the artifact's own JSON (any schema's), so that a key renamed or dropped there is an error that
//! names it, never a figure that silently reads as zero — nor evidence that silently reads as
//! none: from `/3` on, every field of [`Found`] must be there (`null` where the artifact says
//! so), and only older schemas read as having none. Its rows come typed ([`SampleRow`]).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::rows::SampleRow;
use super::stepped::Stepped;
use crate::event::soak::JobAlarm;
use crate::soak::signature::group::SignatureGroup;

/// What `soak show` reads of an artifact but its rows.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Shown {
    /// An argument of the command is not UTF-8, so `command` shows it lossily (schema 11 on;
    /// `false` where the artifact has no such field: its soak could hold no such argument).
    #[serde(default)]
    pub command_lossy: bool,
    /// How the command exited; `None` while it runs, or when it never started.
    pub exit: Option<ExitShown>,
    /// How long the command ran; `None` while it runs.
    pub duration_seconds: Option<f64>,
    pub progress: ProgressShown,
    pub summary: SummaryShown,
    pub output_tail: TailsShown,
    /// The evidence and what the verdict found, from `/3` on; `None` for older schemas.
    #[serde(skip)]
    pub found: Option<Found>,
    /// What the summary judges of the resources, from `/4` on; `None` for older schemas.
    #[serde(skip)]
    pub judged: Option<Judged>,
    /// The steps of the trainer's beats, of soaks recorded in schema 10 on; `None` before.
    #[serde(skip)]
    pub stepped: Option<Stepped>,
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
    /// Reads the fields of an artifact's head (every field but `samples`), its command lines
    /// masked as every view shows them.
    pub(crate) fn of(mut head: Map<String, Value>) -> Result<Self, serde_json::Error> {
        crate::redact::shown::artifact(&mut head);
        let head = Value::Object(head);
        let found = Found::of(&head)?;
        let judged = Judged::of(&head)?;
        let stepped = Stepped::of(&head)?;
        let mut shown = Self::deserialize(head)?;
        shown.found = found;
        shown.judged = judged;
        shown.stepped = stepped;
        Ok(shown)
    }
}

/// What an artifact of `/3` or later says about the tree's end: the evidence captured before
/// the first signal, whether the GPUs were given back, and the outcome's findings. Serialised,
/// each part is the artifact's own object.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Found {
    #[serde(deserialize_with = "Option::deserialize")]
    pub evidence: Option<EvidenceShown>,
    /// The capture made when another rank of its job raised the alarm; `None` where the
    /// artifact has none.
    #[serde(default)]
    pub job_evidence: Option<EvidenceShown>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub gpu_release: Option<GpuReleaseShown>,
    pub outcome: FindingsShown,
}

impl Found {
    /// The evidence and findings of an artifact's head or view (`samples` may be there or not);
    /// `None` for the schemas before `/3`, which record none.
    pub(crate) fn of(view: &Value) -> Result<Option<Self>, serde_json::Error> {
        match view.get("schema").and_then(Value::as_str) {
            Some("unilab.soak.artifact/1" | "unilab.soak.artifact/2") => Ok(None),
            _ => Self::deserialize(view).map(Some),
        }
    }
}

/// What an artifact of `/4` or later judges of the resources: the summary's figures, and the
/// budget that failed the soak. Serialised, each part is the artifact's own.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Judged {
    pub peak_tree_pss_bytes: Option<u64>,
    pub memory_trend: Option<MemoryTrendShown>,
    pub gpu_health: Vec<GpuHealthShown>,
    pub contention: Vec<ContentionShown>,
    pub progress_rate: Option<ProgressRateShown>,
    /// The budget that failed the soak (`outcome.limit`).
    pub limit: Option<String>,
}

#[derive(Deserialize)]
struct JudgedSummary {
    #[serde(deserialize_with = "Option::deserialize")]
    peak_tree_pss_bytes: Option<u64>,
    #[serde(deserialize_with = "Option::deserialize")]
    memory_trend: Option<MemoryTrendShown>,
    gpu_health: Vec<GpuHealthShown>,
    contention: Vec<ContentionShown>,
    #[serde(deserialize_with = "Option::deserialize")]
    progress_rate: Option<ProgressRateShown>,
}

#[derive(Deserialize)]
struct JudgedOutcome {
    #[serde(deserialize_with = "Option::deserialize")]
    limit: Option<String>,
}

impl Judged {
    /// The judgments of an artifact's head or view; `None` for the schemas before `/4`.
    pub(crate) fn of(view: &Value) -> Result<Option<Self>, serde_json::Error> {
        match view.get("schema").and_then(Value::as_str) {
            Some(
                "unilab.soak.artifact/1" | "unilab.soak.artifact/2" | "unilab.soak.artifact/3",
            ) => Ok(None),
            _ => {
                let summary = JudgedSummary::deserialize(&view["summary"])?;
                let outcome = JudgedOutcome::deserialize(&view["outcome"])?;
                Ok(Some(Self {
                    peak_tree_pss_bytes: summary.peak_tree_pss_bytes,
                    memory_trend: summary.memory_trend,
                    gpu_health: summary.gpu_health,
                    contention: summary.contention,
                    progress_rate: summary.progress_rate,
                    limit: outcome.limit,
                }))
            }
        }
    }
}

/// `summary.memory_trend`: the tree's PSS trend after the warm-up.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub(crate) struct MemoryTrendShown {
    pub bytes_per_hour: f64,
    pub bytes_at_since: f64,
    pub since_seconds: f64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub limit_bytes: Option<u64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub limit_source: Option<String>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub projected_seconds_to_limit: Option<f64>,
}

/// One GPU of `summary.gpu_health`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub(crate) struct GpuHealthShown {
    pub uuid: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub max_temperature_c: Option<u32>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub energy_joules: Option<f64>,
    pub seconds_throttled: std::collections::BTreeMap<String, f64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub ecc_uncorrected_increase: Option<u64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub tree_memory_mib_per_hour: Option<f64>,
}

/// One GPU of `summary.contention`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub(crate) struct ContentionShown {
    pub uuid: String,
    pub seconds_shared: f64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub peak_other_memory_mib: Option<u64>,
}

/// `summary.progress_rate`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
pub(crate) struct ProgressRateShown {
    pub bytes_per_minute: f64,
    pub files_per_minute: f64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub after_warmup_bytes_per_minute: Option<f64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub recent_bytes_per_minute: Option<f64>,
}

/// `evidence`: what the tree was doing when the supervisor was about to signal it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub(crate) struct EvidenceShown {
    /// The failure kind the tree was to be stopped for.
    pub trigger: String,
    /// Unix seconds.
    pub captured_at: f64,
    pub processes: Vec<ProcessShown>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub cgroup: Option<CgroupShown>,
    pub kernel_messages: Vec<KernelMessageShown>,
    pub unavailable: Vec<String>,
    /// The tree's ranks grouped by where their stacks stood; `None` where the artifact has
    /// none, and left out when shown again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<SignatureGroup>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub odd_ranks: Option<Vec<u32>>,
    /// What later schemas add that is only shown again, never read (the MPS clients ended):
    /// kept as it is, so that `soak show --json` gives the evidence as the artifact has it.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub(crate) struct ProcessShown {
    pub pid: u32,
    pub ppid: u32,
    pub start_ticks: u64,
    pub name: String,
    pub state: char,
    pub cmdline: Vec<String>,
    pub threads: Vec<ThreadShown>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub kernel_stack: Option<String>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub python_stack: Option<String>,
    pub holds_gpu_device: bool,
    /// What later schemas add that is only shown again (its rank, its stack's signature and
    /// top frames), kept as it is.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub(crate) struct ThreadShown {
    pub tid: u32,
    pub name: String,
    pub state: char,
    #[serde(deserialize_with = "Option::deserialize")]
    pub wchan: Option<String>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub syscall: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub(crate) struct CgroupShown {
    pub version: u8,
    pub path: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub memory_max_bytes: Option<u64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub oom_kill_count: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub(crate) struct KernelMessageShown {
    /// Unix seconds.
    pub at: f64,
    pub line: String,
}

/// `gpu_release`: whether each GPU's memory came back, and who still holds a GPU device.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub(crate) struct GpuReleaseShown {
    pub gpus: Vec<GpuReleasedShown>,
    pub holders: Vec<GpuHolderShown>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub(crate) struct GpuReleasedShown {
    pub uuid: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub memory_used_before_mib: Option<u64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub memory_used_after_mib: Option<u64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub released: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub(crate) struct GpuHolderShown {
    pub pid: u32,
    pub name: String,
    pub path: String,
}

/// The outcome's findings: the child whose failure failed the soak, the OOM kills, and what no
/// signal ended.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub(crate) struct FindingsShown {
    #[serde(deserialize_with = "Option::deserialize")]
    pub child: Option<ChildShown>,
    pub oom_kills: Vec<OomKillShown>,
    pub unkillable: Vec<UnkillableShown>,
    /// The alarm of the rank that failed the job, of a soak that failed as `job_failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_alarm: Option<JobAlarm>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub(crate) struct ChildShown {
    pub pid: u32,
    pub name: String,
    pub exit: ExitShown,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub(crate) struct OomKillShown {
    pub pid: u32,
    pub name: String,
    /// `cgroup` or `kmsg`.
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub(crate) struct UnkillableShown {
    pub pid: u32,
    pub name: String,
    pub state: char,
    #[serde(deserialize_with = "Option::deserialize")]
    pub wchan: Option<String>,
}

/// What `soak show` reads of one row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PointShown {
    pub elapsed_seconds: f64,
    /// `None` before `/4`, or where no process's could be read.
    pub tree_pss_bytes: Option<u64>,
    pub rss_bytes: u64,
    pub processes: u64,
    pub progress_files: u64,
    pub progress_bytes: u64,
}

impl PointShown {
    pub(crate) fn of(row: &SampleRow<'_>) -> Self {
        Self {
            elapsed_seconds: row.elapsed_seconds,
            tree_pss_bytes: row.tree_pss_bytes,
            rss_bytes: row.rss_bytes,
            processes: row.processes,
            progress_files: row.progress_files,
            progress_bytes: row.progress_bytes,
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

    /// From `/3` on a dropped key of the evidence is an error that names it, never "no
    /// evidence"; before `/3` there is none to read.
    #[test]
    fn the_evidence_of_a_third_schema_artifact_must_be_there_to_read_as_none() {
        let mut third = head();
        third["schema"] = "unilab.soak.artifact/3".into();
        third["evidence"] = Value::Null;
        third["gpu_release"] = Value::Null;
        third["outcome"] = json!({"child": null, "oom_kills": [], "unkillable": []});
        let Value::Object(map) = third.clone() else {
            unreachable!()
        };
        let found = Shown::of(map)
            .unwrap()
            .found
            .expect("a /3 artifact has findings");
        assert_eq!((found.evidence, found.gpu_release), (None, None));

        for (dropped, key) in [("/outcome", "child"), ("", "evidence"), ("", "gpu_release")] {
            let mut lacking = third.clone();
            let parent = lacking
                .pointer_mut(dropped)
                .unwrap()
                .as_object_mut()
                .unwrap();
            parent.remove(key);
            let error = Found::of(&lacking).unwrap_err().to_string();
            assert!(error.contains(&format!("missing field `{key}`")), "{error}");
        }

        assert_eq!(Found::of(&head()).unwrap(), None, "schema 1 records none");
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
