//! The records of this user's daemons, and picking one: by name, by GPU, or the sole one.

use std::path::Path;

use super::control::{self, Answer};
use super::decide::stale_reason;
use super::error::MpsError;
use super::names::scoped_name;
use super::plan::{resolve, topology};
use super::{DaemonRecord, Mps};
use crate::env::EnvVars;
use crate::event::StaleReason;
use crate::gpu::selector::{Atom, Selector};
use crate::log::{LogError, Snapshot};
use crate::process::{self, Liveness};
use crate::projection::{DaemonJobs, DaemonLimitsView, Daemons};

/// The daemon records of this user on this host (a record of another scope is never returned).
pub(crate) fn records(mps: &Mps, snapshot: &Snapshot) -> Result<Vec<DaemonRecord>, LogError> {
    let jobs = DaemonJobs::rows(snapshot)?;
    let limits = DaemonLimitsView::rows(snapshot)?;
    Ok(Daemons::rows(snapshot)?
        .into_iter()
        .map(|row| {
            let job = DaemonJobs::job_of(&jobs, &row.0.name);
            let limits = DaemonLimitsView::limits_of(&limits, &row.0.name);
            DaemonRecord::of(row.0, job, limits)
        })
        .filter(|r| r.uid == mps.paths.uid && r.host == mps.paths.host)
        .collect())
}

pub(crate) fn liveness(mps: &Mps, record: &DaemonRecord) -> Liveness {
    process::liveness(mps.proc, record.identity(), mps.paths.uid)
}

/// What a record names now: its daemon answering, wedged, or no longer there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DaemonState {
    Live,
    /// The process is the recorded one, but its control socket gave no answer in time.
    Wedged,
    Stale(StaleReason),
}

impl DaemonState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DaemonState::Live => "live",
            DaemonState::Wedged => "wedged",
            DaemonState::Stale(reason) => reason.as_str(),
        }
    }
}

/// A record's state with the evidence behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Observed {
    pub state: DaemonState,
    /// The start time of the process that has the recorded pid now, if one has it.
    pub observed_start_ticks: Option<u64>,
    /// Whether it answered `get_server_list` in time; `None` when it was not asked (its process
    /// is gone) or could not be (the control tool cannot be run).
    pub answered: Option<bool>,
}

/// What `record` names now: the process by its identity, then — for the recorded process — its
/// control socket, asked a command that must answer within the tool timeout.
pub(crate) fn observe(mps: &Mps, record: &DaemonRecord) -> Observed {
    let observed_start_ticks = mps.proc.stat(record.pid).map(|s| s.start_ticks);
    let (state, answered) = match stale_reason(liveness(mps, record)) {
        Some(reason) => (DaemonState::Stale(reason), None),
        None => match control::probe(
            &mps.control,
            Path::new(&record.pipe_directory),
            Path::new(&record.log_directory),
        ) {
            Ok(Answer::Answered) => (DaemonState::Live, Some(true)),
            Ok(Answer::Silent | Answer::Unanswered) => (DaemonState::Wedged, Some(false)),
            // Nothing can ask it: its process is all the evidence there is.
            Err(_) => (DaemonState::Live, None),
        },
    };
    Observed {
        state,
        observed_start_ticks,
        answered,
    }
}

/// Whether a daemon is the caller's to pick without naming it: under a Slurm job only the job's
/// own daemons are (another job's are never taken for its own); outside one, every daemon.
pub(crate) fn in_scope(mps: &Mps, record: &DaemonRecord) -> bool {
    job_in_scope(mps, record.job.as_deref())
}

/// [`in_scope`], by the job a daemon (or a start under way) belongs to.
pub(crate) fn job_in_scope(mps: &Mps, job: Option<&str>) -> bool {
    match &mps.env.job {
        Some(mine) => job == Some(mine.as_str()),
        None => true,
    }
}

/// Picks one record: by name, else the sole record (of the caller's job, under Slurm), else the
/// sole live one.
pub(crate) fn select<'r>(
    mps: &Mps,
    records: &'r [DaemonRecord],
    name: Option<&str>,
) -> Result<&'r DaemonRecord, MpsError> {
    if let Some(name) = name {
        // Under a job, its own daemon of that name first.
        let scoped = scoped_name(name, mps.env.job.as_deref());
        return records
            .iter()
            .find(|r| r.name == scoped)
            .or_else(|| records.iter().find(|r| r.name == name))
            .ok_or_else(|| MpsError::NoSuchDaemon(name.to_owned()));
    }
    let mine: Vec<&DaemonRecord> = records.iter().filter(|r| in_scope(mps, r)).collect();
    match mine.as_slice() {
        [] => Err(MpsError::NoDaemon),
        [one] => Ok(one),
        several => {
            let live: Vec<&DaemonRecord> = several
                .iter()
                .copied()
                .filter(|r| liveness(mps, r) == Liveness::Live)
                .collect();
            match live.as_slice() {
                [one] => Ok(one),
                _ => Err(MpsError::SeveralDaemons(
                    several.iter().map(|r| r.name.clone()).collect(),
                )),
            }
        }
    }
}

/// The GPU a selector names for `--gpu`: a UUID or prefix as given (matched against the
/// records, so no nvidia-smi is needed), anything else resolved under the current mask, which
/// must come to exactly one GPU.
pub(crate) fn one_gpu(mps: &Mps, selector: &str) -> Result<String, MpsError> {
    let parsed = Selector::parse(Some(selector)).map_err(MpsError::Selector)?;
    if let Selector::One(Atom::UuidPrefix(prefix)) = parsed {
        return Ok(prefix);
    }
    let plan = resolve(mps, &topology(mps)?, Some(selector))?;
    match plan.gpus.as_slice() {
        [gpu] => Ok(gpu.uuid.clone()),
        gpus => Err(MpsError::NotOneGpu {
            selector: selector.to_owned(),
            count: gpus.len(),
        }),
    }
}

/// The sole live daemon serving `gpu` (a UUID or unique prefix).
pub(crate) fn select_for_gpu<'r>(
    mps: &Mps,
    records: &'r [DaemonRecord],
    gpu: &str,
) -> Result<&'r DaemonRecord, MpsError> {
    let serving: Vec<&DaemonRecord> = records
        .iter()
        .filter(|r| in_scope(mps, r))
        .filter(|r| r.gpu_uuids.iter().any(|u| u.starts_with(gpu)))
        .filter(|r| liveness(mps, r) == Liveness::Live)
        .collect();
    match serving.as_slice() {
        [one] => Ok(one),
        [] => Err(MpsError::NoDaemonForGpu(gpu.to_owned())),
        several => Err(MpsError::SeveralDaemons(
            several.iter().map(|r| r.name.clone()).collect(),
        )),
    }
}

/// The environment that points CUDA clients at a daemon.
pub(crate) fn environment(record: &DaemonRecord) -> Vec<(&'static str, String)> {
    let mut env: Vec<(&'static str, String)> = control::environment(
        Path::new(&record.pipe_directory),
        Path::new(&record.log_directory),
    )
    .into_iter()
    .collect();
    env.push((EnvVars::CUDA_VISIBLE_DEVICES, record.gpu_uuids.join(",")));
    env
}

/// A live record whose daemon answers, or the reason it is not.
pub(crate) fn require_live(mps: &Mps, record: &DaemonRecord) -> Result<(), MpsError> {
    match observe(mps, record).state {
        DaemonState::Live => Ok(()),
        DaemonState::Wedged => Err(MpsError::Wedged {
            name: record.name.clone(),
            pid: record.pid,
        }),
        DaemonState::Stale(reason) => Err(MpsError::NotRunning {
            name: record.name.clone(),
            pid: record.pid,
            reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::event::TopologyMode;
    use crate::paths::StatePaths;
    use crate::testing::proc::FakeProc;

    const UID: u32 = 1000;

    fn paths() -> StatePaths {
        StatePaths {
            root: PathBuf::from("/state"),
            host: "node".into(),
            uid: UID,
        }
    }

    fn record(name: &str, pid: u32, gpu: &str) -> DaemonRecord {
        DaemonRecord {
            name: name.into(),
            uid: UID,
            host: "node".into(),
            topology_mode: TopologyMode::SingleGpu,
            gpu_uuids: vec![gpu.into()],
            pipe_directory: format!("/tmp/unilab-{UID}/mps/{name}"),
            log_directory: format!("/state/node/{UID}/mps/{name}/log"),
            pid,
            process_start_ticks: 7,
            created_at: 0.0,
            job: None,
            active_thread_percentage: None,
            pinned_memory_limit: None,
        }
    }

    fn mps<'a>(paths: &'a StatePaths, proc: &'a FakeProc) -> Mps<'a> {
        Mps {
            paths,
            proc,
            smi: crate::tool::Tool::new("nvidia-smi", Duration::from_secs(1)),
            control: crate::tool::Tool::new("nvidia-cuda-mps-control", Duration::from_secs(1)),
            env: crate::mps::HostEnv::default(),
        }
    }

    fn live(pids: &[u32]) -> FakeProc {
        pids.iter()
            .fold(FakeProc::new(), |proc, pid| proc.with(*pid, 7, 'S', UID))
    }

    #[test]
    fn without_a_name_the_sole_record_or_else_the_sole_live_one_is_chosen() {
        let paths = paths();
        let records = [
            record("a", 10, "GPU-aaaa1111"),
            record("b", 11, "GPU-bbbb2222"),
        ];
        let proc = live(&[11]);
        assert_eq!(
            select(&mps(&paths, &proc), &records, None).unwrap().name,
            "b"
        );
        let proc = live(&[]);
        assert_eq!(
            select(&mps(&paths, &proc), &records[..1], None)
                .unwrap()
                .name,
            "a",
            "a sole record is chosen even when it is stale, so that stop can clean it"
        );
        let proc = live(&[10, 11]);
        assert!(matches!(
            select(&mps(&paths, &proc), &records, None),
            Err(MpsError::SeveralDaemons(names)) if names == ["a", "b"]
        ));
        assert!(matches!(
            select(&mps(&paths, &proc), &records, Some("c")),
            Err(MpsError::NoSuchDaemon(_))
        ));
    }

    #[test]
    fn a_gpu_is_served_only_by_a_live_daemon_found_by_uuid_prefix() {
        let paths = paths();
        let records = [
            record("a", 10, "GPU-aaaa1111"),
            record("b", 11, "GPU-bbbb2222"),
        ];
        let proc = live(&[10]);
        let mps = mps(&paths, &proc);
        assert_eq!(
            select_for_gpu(&mps, &records, "GPU-aaaa").unwrap().name,
            "a"
        );
        assert!(matches!(
            select_for_gpu(&mps, &records, "GPU-bbbb"),
            Err(MpsError::NoDaemonForGpu(_))
        ));
    }
}
