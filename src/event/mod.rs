//! The bottom layer: the event vocabulary of the log, and the envelope each event is read in.
//!
//! Two views of one schema: [`stored`] holds every form an event was ever written in, frozen
//! (what the codec encodes); [`Event`] has one variant a kind, in its newest shape, which is all
//! any reader or writer above the log sees. [`upcast`] turns a stored event into its domain
//! event and the schema of its form — once, where the log reads it — and a domain event into
//! its newest stored form where the log appends it. A schema step touches this module (a new
//! stored form, the domain's new field, the upcast between them), the bytes `log::golden` pins,
//! and the code that uses the new field (the files of schema 11's are listed in
//! `migrations/README.md`).
//!
//! The JSON views of the commands (`mps list`, the soak artifact) have their own types in their
//! domain, so that a change of a view never touches the stored format.
//!
//! This module depends only on leaf modules (`process`).

pub(crate) mod daemon;
mod fields;
pub(crate) mod soak;
pub(crate) mod stored;
pub(crate) mod topology;
pub(crate) mod upcast;

use serde::{Deserialize, Serialize};

pub use daemon::{DaemonLimits, StaleReason, StartedDaemon, StopMethod};
pub(crate) use fields::fields_json;
pub(crate) use soak::{Sample, SoakEnd, SoakStart};
pub use stored::{StoredEnvelope, StoredEvent};
pub use topology::{GpuIdentity, TopologyMode};

use crate::process::ProcessIdentity;

/// Whose log this is. Stored once in the log and in every envelope; commands that change state
/// refuse a log whose scope is not the caller's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scope {
    pub uid: u32,
    pub host: String,
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "uid {} on host `{}`", self.uid, self.host)
    }
}

/// What an event is about. Rendered as `host`, `daemon/<name>` or `soak/<id>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Subject {
    Host,
    Daemon(String),
    Soak(String),
}

impl Subject {
    /// The key under which the subject index files this subject's sequences.
    pub fn key(&self) -> String {
        let mut key = String::new();
        self.key_into(&mut key);
        key
    }

    /// [`Subject::key`] into `out` (cleared first), for a caller that reuses one buffer.
    pub(crate) fn key_into(&self, out: &mut String) {
        out.clear();
        let (kind, name) = match self {
            Subject::Host => return out.push_str("host"),
            Subject::Daemon(name) => ("daemon/", name),
            Subject::Soak(id) => ("soak/", id),
        };
        out.push_str(kind);
        out.push_str(name);
    }
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subject::Host => f.write_str("host"),
            Subject::Daemon(name) => write!(f, "daemon/{name}"),
            Subject::Soak(id) => write!(f, "soak/{id}"),
        }
    }
}

/// Everything that happens to a daemon or a soak, as every reader above the log sees it: one
/// variant a kind, in its newest shape. A field a kind's older forms did not record is an
/// `Option`, `None` for a record of such a form; [`Envelope::schema`] says which form a record
/// was stored in. Past tense: an event states a fact.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A selector was resolved against the visible GPUs.
    TopologyResolved {
        selector: String,
        topology_mode: TopologyMode,
        gpus: Vec<GpuIdentity>,
        cuda_visible_devices: Option<String>,
    },
    /// A daemon was started and its `(pid, starttime)` recorded.
    DaemonStarted {
        record: StartedDaemon,
        foreground: bool,
        /// The Slurm job it was started in (`SLURM_JOB_ID`), which scopes it: `Some(None)`
        /// outside any job, `None` where its form did not record the job (schema 1–3).
        job: Option<Option<String>>,
        /// The limits it was started with; `None` where its form did not record them (before
        /// schema 7).
        limits: Option<DaemonLimits>,
    },
    /// The daemon answered on its control socket.
    DaemonVerifiedLive { process: ProcessIdentity },
    /// Starting a daemon failed; anything it had started was stopped.
    DaemonStartFailed {
        reason: String,
        process: Option<ProcessIdentity>,
    },
    /// A recorded daemon was no longer live; its record was removed and nothing was signalled.
    DaemonStaleCleaned {
        process: ProcessIdentity,
        reason: StaleReason,
    },
    /// A daemon unilab started has stopped.
    DaemonStopped {
        process: ProcessIdentity,
        method: StopMethod,
    },
    /// A soak started: its parameters, how it is supervised and the budgets it is held to.
    SoakStarted {
        start: Box<SoakStart>,
        /// `None` where its form did not record it (before schema 5).
        supervision: Option<soak::Supervision>,
        /// `None` where its form did not record them (before schema 6).
        limits: Option<soak::Limits>,
        /// The job it belongs to; `None` outside a job, or where its form did not record it
        /// (before schema 9).
        job: Option<soak::JobMember>,
        /// An argument of its command is not UTF-8: it was run as its bytes, and
        /// [`SoakStart::command`] holds it lossily (U+FFFD for what is not UTF-8). Always
        /// `false` before schema 11, whose forms could not hold such an argument.
        command_lossy: bool,
    },
    /// One sample of a soak.
    SoakSampled {
        sample: Box<Sample>,
        /// Each process's proportional set size and each GPU's health; `None` where its form
        /// did not measure them (before schema 6).
        measures: Option<Box<soak::Measures>>,
        /// The progress the supervisor decided at it; `None` where its form did not record it
        /// (before schema 12), or for a sample no supervisor took.
        progress: Option<soak::ProgressNoted>,
    },
    /// A soak's verdict, written once the last child is gone.
    SoakFinished {
        end: Box<SoakEnd>,
        /// What it found about the tree's end; `None` where its form did not record it (before
        /// schema 5).
        findings: Option<Box<soak::Findings>>,
        /// The budget that failed it, if one did (budgets are recorded since schema 6).
        limit: Option<soak::ResourceLimit>,
    },
    /// The soak's supervisor vanished before it recorded a verdict.
    SoakAbandoned {
        supervisor: ProcessIdentity,
        reason: String,
    },
    /// A soak artifact was written.
    ArtifactWritten {
        path: String,
        digest: String,
        bytes: u64,
    },
    /// A start is about to launch a daemon: where it will answer, which process launches it and
    /// in which Slurm job, so that a start cut short (its process killed) can be recognised
    /// later and what it launched stopped. Closed by the `daemon_started` or
    /// `daemon_start_failed` that follows.
    DaemonStarting {
        gpu: String,
        pipe_directory: String,
        log_directory: String,
        starter: ProcessIdentity,
        /// As [`Event::DaemonStarted`]'s: `None` where its form did not record the job.
        job: Option<Option<String>>,
    },
    /// A process began to use a shared daemon (`mps exec --shared`): the daemon is kept while
    /// any holder lives.
    LeaseAcquired {
        holder: ProcessIdentity,
        /// The Slurm job the holder runs in.
        job: Option<String>,
        /// Whether this holder started the daemon for sharing: such a daemon is stopped when
        /// its last lease ends; one started with `mps start` is left to its owner.
        started: bool,
    },
    /// A lease ended: its holder finished, or was found gone.
    LeaseReleased {
        holder: ProcessIdentity,
        reason: LeaseEnd,
    },
    /// What the soak's tree was doing when the supervisor was about to signal it: committed
    /// before the first signal.
    SoakEvidenceCaptured(Box<soak::Evidence>),
    /// A finished soak's records were moved to an archive file; this event commits to every one
    /// of them.
    SoakArchived(Box<soak::Archived>),
    /// Another rank of the soak's job raised the job's alarm (or won the race to raise it
    /// against this one), and the supervisor saw it.
    SoakJobAlarmSeen(Box<soak::JobAlarmSeen>),
}

/// How a lease on a shared daemon ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseEnd {
    /// Its holder's command finished and released it.
    Finished,
    /// Its holder was found gone (killed) by another command, which released it.
    HolderGone,
}

impl LeaseEnd {
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseEnd::Finished => "finished",
            LeaseEnd::HolderGone => "holder_gone",
        }
    }
}

/// Every event kind, in the order of [`Event`]'s variants (and of each kind's first form in
/// [`StoredEvent`]).
pub const EVENT_KINDS: [&str; 17] = [
    "topology_resolved",
    "daemon_started",
    "daemon_verified_live",
    "daemon_start_failed",
    "daemon_stale_cleaned",
    "daemon_stopped",
    "soak_started",
    "soak_sampled",
    "soak_finished",
    "soak_abandoned",
    "artifact_written",
    "daemon_starting",
    "lease_acquired",
    "lease_released",
    "soak_evidence_captured",
    "soak_archived",
    "soak_job_alarm_seen",
];

impl Event {
    /// The snake_case name used in `history --json` as `kind`.
    pub fn kind(&self) -> &'static str {
        let index = match self {
            Event::TopologyResolved { .. } => 0,
            Event::DaemonStarted { .. } => 1,
            Event::DaemonVerifiedLive { .. } => 2,
            Event::DaemonStartFailed { .. } => 3,
            Event::DaemonStaleCleaned { .. } => 4,
            Event::DaemonStopped { .. } => 5,
            Event::SoakStarted { .. } => 6,
            Event::SoakSampled { .. } => 7,
            Event::SoakFinished { .. } => 8,
            Event::SoakAbandoned { .. } => 9,
            Event::ArtifactWritten { .. } => 10,
            Event::DaemonStarting { .. } => 11,
            Event::LeaseAcquired { .. } => 12,
            Event::LeaseReleased { .. } => 13,
            Event::SoakEvidenceCaptured(_) => 14,
            Event::SoakArchived(_) => 15,
            Event::SoakJobAlarmSeen(_) => 16,
        };
        EVENT_KINDS[index]
    }
}

/// A record as every reader above the log sees it: its stored envelope with the event upcast.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub seq: u64,
    /// Wall-clock time of the append, Unix microseconds.
    pub recorded_at_us: i64,
    pub scope: Scope,
    pub subject: Subject,
    pub event: Event,
    /// The form the event is stored in, named by the schema version that introduced it (a
    /// `soak_started` of schema 5's form says 5, whichever version wrote it): what tells which
    /// fields an old form had, and which artifact a soak renders.
    pub schema: u32,
}
