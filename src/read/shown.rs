//! The parts of a soak's record that its views present, typed, and built from the soak's events
//! once ([`super::record::SoakRecord`]): how it exited, its progress, the peaks and totals of its
//! rows, its output's tails, the evidence and what the verdict found, what the summary judges of
//! its resources. Serialised, each part is the artifact's own object (the current artifact is
//! written from them), so that `soak show --json` gives a part as the artifact has it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::fold::{Abandonment, SoakRecords};
use crate::event::soak::{
    CgroupEvidence, Evidence, ExitInfo, FailureKind, Findings, GpuRelease, JobAlarm, KernelMessage,
    MpsTeardown, ProcessEvidence, ThreadEvidence,
};
use crate::read::signature::group::{SignatureGroup, group, signatures_by_rank};
use crate::read::signature::{self, Frame};
use crate::time::unix_seconds;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct ExitShown {
    pub code: Option<i64>,
    pub signal: Option<i64>,
}

impl ExitShown {
    pub(crate) fn of(exit: &ExitInfo) -> Self {
        Self {
            code: exit.code.map(i64::from),
            signal: exit.signal.map(i64::from),
        }
    }
}

/// `status` (`running` until the verdict), `failure_kind` and `reason`, as the artifact has
/// them: an abandoned soak's reason names its supervisor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct OutcomeShown {
    pub status: String,
    pub failure_kind: Option<FailureKind>,
    pub reason: String,
}

impl OutcomeShown {
    pub(crate) fn of(records: &SoakRecords) -> Self {
        let verdict = records.soak.end.as_deref().map(|v| &v.end.outcome);
        match (verdict, &records.abandoned) {
            (Some(outcome), _) => Self {
                status: outcome.status.as_str().to_owned(),
                failure_kind: outcome.failure_kind,
                reason: outcome.reason.clone(),
            },
            (None, Some(Abandonment { supervisor, reason })) => Self {
                status: records.summary.state.as_str().to_owned(),
                failure_kind: None,
                reason: format!("{reason} (supervisor pid {})", supervisor.pid),
            },
            (None, None) => Self {
                status: records.summary.state.as_str().to_owned(),
                failure_kind: None,
                reason: String::new(),
            },
        }
    }
}

/// The progress directory over the run: when it first showed progress, when it last changed,
/// and its files and bytes at the last sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct ProgressShown {
    pub first_seen_seconds: Option<f64>,
    pub last_change_seconds: Option<f64>,
    pub files: u64,
    pub bytes: u64,
}

/// The peaks and totals of the rows (`summary`, but for what it judges). Schema 1 records no CPU
/// share (`peak_cpu_percent` is `None`) and one figure for the host's GPU memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct SummaryShown {
    pub samples: u64,
    pub peak_processes: u64,
    pub peak_rss_bytes: u64,
    pub peak_threads: u64,
    pub peak_open_fds: u64,
    pub peak_cpu_percent: Option<f64>,
    pub peak_host_gpu_memory_used_mib: Option<u64>,
    pub peak_tree_gpu_memory_mib: Option<u64>,
    pub final_cpu_seconds: f64,
    pub final_read_bytes: u64,
    pub final_write_bytes: u64,
    pub sampler_errors: u64,
    pub sampler_cost_us_mean: u64,
    pub sampler_cost_us_max: u64,
}

/// Standard output's and error's tails, as text (what is not UTF-8 replaced).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct TailsShown {
    pub stdout: String,
    pub stderr: String,
}

/// What a soak recorded in `/3`'s forms or later says about the tree's end: the evidence
/// captured before the first signal, whether the GPUs were given back, and the outcome's
/// findings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Found {
    pub evidence: Option<EvidenceShown>,
    /// The capture made when another rank of its job raised the alarm; `None` where there is
    /// none (or its schema records none).
    pub job_evidence: Option<EvidenceShown>,
    pub gpu_release: Option<GpuReleaseShown>,
    pub outcome: FindingsShown,
}

impl Found {
    /// What `records` say of the tree's end; `job`: with what schema 9 added (each process's
    /// rank and signature, the ranks grouped, the MPS clients ended, the job's capture and
    /// alarm).
    pub(crate) fn of(records: &SoakRecords, job: bool) -> Self {
        let verdict = records.soak.end.as_deref();
        // Before the verdict, nothing was found.
        let findings = verdict.map(|v| v.findings.clone().unwrap_or_default());
        let job_failed =
            verdict.and_then(|v| v.end.outcome.failure_kind) == Some(FailureKind::JobFailed);
        let shown = |e: &Evidence| EvidenceShown::of(e, job);
        Self {
            evidence: records.evidence.as_deref().map(shown),
            job_evidence: records.job_evidence.as_deref().filter(|_| job).map(shown),
            gpu_release: findings
                .as_ref()
                .and_then(|f| f.gpu_release.as_ref())
                .map(GpuReleaseShown::of),
            outcome: FindingsShown::of(
                findings.as_ref(),
                records
                    .job_alarm
                    .as_deref()
                    .filter(|_| job && job_failed)
                    .map(|seen| seen.alarm.clone()),
            ),
        }
    }

    /// Every command line in it masked, as the views show them.
    pub(crate) fn mask(&mut self) {
        for evidence in [&mut self.evidence, &mut self.job_evidence]
            .into_iter()
            .flatten()
        {
            for process in &mut evidence.processes {
                process.cmdline = crate::redact::mask_argv(&process.cmdline);
            }
        }
    }
}

/// What the summary of a soak recorded in `/4`'s forms or later judges of the resources, and
/// the budget that failed the soak. Serialised, each part is the artifact's own.
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

/// `summary.memory_trend`: the tree's PSS trend after the warm-up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct MemoryTrendShown {
    pub bytes_per_hour: f64,
    pub bytes_at_since: f64,
    pub since_seconds: f64,
    pub limit_bytes: Option<u64>,
    pub limit_source: Option<String>,
    pub projected_seconds_to_limit: Option<f64>,
}

/// One GPU of `summary.gpu_health`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct GpuHealthShown {
    pub uuid: String,
    pub max_temperature_c: Option<u32>,
    pub energy_joules: Option<f64>,
    pub seconds_throttled: BTreeMap<String, f64>,
    pub ecc_uncorrected_increase: Option<u64>,
    pub tree_memory_mib_per_hour: Option<f64>,
}

/// One GPU of `summary.contention`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ContentionShown {
    pub uuid: String,
    pub seconds_shared: f64,
    pub peak_other_memory_mib: Option<u64>,
}

/// `summary.progress_rate`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct ProgressRateShown {
    pub bytes_per_minute: f64,
    pub files_per_minute: f64,
    pub after_warmup_bytes_per_minute: Option<f64>,
    pub recent_bytes_per_minute: Option<f64>,
}

/// `evidence`: what the tree was doing when the supervisor was about to signal it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct EvidenceShown {
    /// The failure kind the tree was to be stopped for.
    pub trigger: String,
    /// Unix seconds.
    pub captured_at: f64,
    pub processes: Vec<ProcessShown>,
    pub cgroup: Option<CgroupShown>,
    pub kernel_messages: Vec<KernelMessageShown>,
    pub unavailable: Vec<String>,
    /// The tree's ranks grouped by where their stacks stood (schema 9 on: `None` before, and
    /// left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<SignatureGroup>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub odd_ranks: Option<Vec<u32>>,
    /// The MPS clients ended before the first signal (schema 9 on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mps: Option<Vec<MpsShown>>,
    /// Of a tree holding several ranks with their collectives (schema 16 on): the collective
    /// some never entered, as `job show` names it; left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collective: Option<crate::read::collectives::Stalled>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mismatches: Vec<crate::read::collectives::Mismatch>,
}

impl EvidenceShown {
    /// The evidence; with each process's rank and signature, the tree's ranks grouped by it
    /// and the MPS clients ended, of a soak recorded in schema 9's forms or later (`job`).
    pub(crate) fn of(evidence: &Evidence, job: bool) -> Self {
        // The ranks of its tree (a launcher's holds several) grouped as `job show` groups a
        // job's: one rank is one group.
        let grouping = job.then(|| group(&signatures_by_rank(&evidence.processes, &|p| p.rank)));
        let (groups, odd_ranks) = grouping.map(|g| (g.groups, g.odd_ranks)).unzip();
        let ranks: std::collections::BTreeMap<u32, _> = evidence
            .processes
            .iter()
            .filter_map(|p| Some((p.rank?, p.collectives.clone()?)))
            .collect();
        let matched = if ranks.len() > 1 {
            crate::read::collectives::matched(&ranks)
        } else {
            crate::read::collectives::Matched::default()
        };
        Self {
            trigger: evidence.trigger.as_str().to_owned(),
            captured_at: unix_seconds(evidence.captured_at_us),
            processes: evidence
                .processes
                .iter()
                .map(|p| ProcessShown::of(p, job))
                .collect(),
            cgroup: evidence.cgroup.as_ref().map(CgroupShown::of),
            kernel_messages: evidence
                .kernel_messages
                .iter()
                .map(KernelMessageShown::of)
                .collect(),
            unavailable: evidence.unavailable.clone(),
            groups,
            odd_ranks,
            mps: job.then(|| evidence.mps.iter().map(MpsShown::of).collect()),
            collective: matched.stalled,
            mismatches: matched.mismatches,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ProcessShown {
    pub pid: u32,
    pub ppid: u32,
    pub start_ticks: u64,
    pub name: String,
    pub state: char,
    pub cmdline: Vec<String>,
    pub threads: Vec<ThreadShown>,
    pub kernel_stack: Option<String>,
    pub python_stack: Option<String>,
    pub holds_gpu_device: bool,
    /// Its rank and where its stack stood (schema 9 on: `None` before, and left out).
    #[serde(flatten)]
    pub ranked: Option<RankedShown>,
    /// Its collectives, as asked of a rank process (schema 16 on; left out where none were).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collectives: Option<crate::event::soak::ProcessCollectives>,
}

impl ProcessShown {
    fn of(p: &ProcessEvidence, job: bool) -> Self {
        Self {
            pid: p.pid,
            ppid: p.ppid,
            start_ticks: p.start_ticks,
            name: p.name.clone(),
            state: p.state,
            cmdline: p.cmdline.clone(),
            threads: p.threads.iter().map(ThreadShown::of).collect(),
            kernel_stack: p.kernel_stack.clone(),
            python_stack: p.python_stack.clone(),
            holds_gpu_device: p.holds_gpu_device,
            ranked: job.then(|| {
                let stack = signature::of_process(p);
                RankedShown {
                    rank: p.rank,
                    signature: stack.signature,
                    top_frames: stack.top_frames,
                }
            }),
            collectives: p.collectives.clone(),
        }
    }
}

/// A process's rank and its stack's signature and innermost frames.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct RankedShown {
    pub rank: Option<u32>,
    pub signature: String,
    pub top_frames: Vec<Frame>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ThreadShown {
    pub tid: u32,
    pub name: String,
    pub state: char,
    pub wchan: Option<String>,
    pub syscall: Option<String>,
}

impl ThreadShown {
    fn of(t: &ThreadEvidence) -> Self {
        Self {
            tid: t.tid,
            name: t.name.clone(),
            state: t.state,
            wchan: t.wchan.clone(),
            syscall: t.syscall.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CgroupShown {
    pub version: u8,
    pub path: String,
    pub memory_max_bytes: Option<u64>,
    pub oom_kill_count: Option<u64>,
}

impl CgroupShown {
    fn of(c: &CgroupEvidence) -> Self {
        Self {
            version: c.version,
            path: c.path.clone(),
            memory_max_bytes: c.memory_max_bytes,
            oom_kill_count: c.oom_kill_count,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct KernelMessageShown {
    /// Unix seconds.
    pub at: f64,
    pub line: String,
}

impl KernelMessageShown {
    fn of(m: &KernelMessage) -> Self {
        Self {
            at: unix_seconds(m.at_us),
            line: m.line.clone(),
        }
    }
}

/// The MPS clients of the tree that a daemon was asked to end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct MpsShown {
    pub daemon: String,
    pub server_pid: u32,
    pub terminated: Vec<u32>,
}

impl MpsShown {
    fn of(m: &MpsTeardown) -> Self {
        Self {
            daemon: m.daemon.clone(),
            server_pid: m.server_pid,
            terminated: m.terminated.clone(),
        }
    }
}

/// `gpu_release`: whether each GPU's memory came back, and who still holds a GPU device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct GpuReleaseShown {
    pub gpus: Vec<GpuReleasedShown>,
    pub holders: Vec<GpuHolderShown>,
}

impl GpuReleaseShown {
    fn of(release: &GpuRelease) -> Self {
        Self {
            gpus: release
                .gpus
                .iter()
                .map(|g| GpuReleasedShown {
                    uuid: g.uuid.clone(),
                    memory_used_before_mib: g.memory_used_before_mib,
                    memory_used_after_mib: g.memory_used_after_mib,
                    released: g.released,
                })
                .collect(),
            holders: release
                .holders
                .iter()
                .map(|h| GpuHolderShown {
                    pid: h.pid,
                    name: h.name.clone(),
                    path: h.path.clone(),
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct GpuReleasedShown {
    pub uuid: String,
    pub memory_used_before_mib: Option<u64>,
    pub memory_used_after_mib: Option<u64>,
    pub released: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct GpuHolderShown {
    pub pid: u32,
    pub name: String,
    pub path: String,
}

/// The outcome's findings: the child whose failure failed the soak, the OOM kills, and what no
/// signal ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct FindingsShown {
    pub child: Option<ChildShown>,
    pub oom_kills: Vec<OomKillShown>,
    pub unkillable: Vec<UnkillableShown>,
    /// The alarm of the rank that failed the job, of a soak that failed as `job_failed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_alarm: Option<JobAlarm>,
}

impl FindingsShown {
    /// `findings` (`None` before the verdict: nothing found), with the alarm that failed the
    /// job.
    fn of(findings: Option<&Findings>, job_alarm: Option<JobAlarm>) -> Self {
        Self {
            child: findings.and_then(|f| f.child.as_ref()).map(|c| ChildShown {
                pid: c.pid,
                name: c.name.clone(),
                exit: ExitShown::of(&c.exit),
            }),
            oom_kills: findings
                .map(|f| &f.oom_kills[..])
                .unwrap_or_default()
                .iter()
                .map(|k| OomKillShown {
                    pid: k.pid,
                    name: k.name.clone(),
                    source: k.source.as_str().to_owned(),
                })
                .collect(),
            unkillable: findings
                .map(|f| &f.unkillable[..])
                .unwrap_or_default()
                .iter()
                .map(|p| UnkillableShown {
                    pid: p.pid,
                    name: p.name.clone(),
                    state: p.state,
                    wchan: p.wchan.clone(),
                })
                .collect(),
            job_alarm,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ChildShown {
    pub pid: u32,
    pub name: String,
    pub exit: ExitShown,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct OomKillShown {
    pub pid: u32,
    pub name: String,
    /// `cgroup` or `kmsg`.
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct UnkillableShown {
    pub pid: u32,
    pub name: String,
    pub state: char,
    pub wchan: Option<String>,
}
