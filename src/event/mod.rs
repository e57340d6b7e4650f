//! The bottom layer: the event vocabulary of the log, and the envelope each event is stored in.
//!
//! **These types are the frozen on-disk schema.** Every record is the codec's encoding of an
//! [`Envelope`]; bincode encodes structs by field *order* and enums by variant *index*, so:
//! - a new event kind is added at the end of [`Event`] (older records keep decoding);
//! - a new payload type is added beside the others, never by changing one in place;
//! - renaming, reordering, adding or removing a field of a stored type, or reordering variants,
//!   changes what old records mean: that is a schema change, which bumps
//!   `log::migrate::SCHEMA_VERSION`, adds a step to `log::migrate::STEPS` and freezes a fixture
//!   log of the old version in `migrations/fixtures/` (see `migrations/README.md`).
//!
//! Field *names* are not stored, but they are the event's fields in `history --json`. The JSON
//! views of the commands (`mps list`, the soak artifact) have their own types in their domain,
//! so that a change of a view never touches the stored format.
//!
//! This module depends only on leaf modules (`process`).

pub(crate) mod daemon;
pub(crate) mod soak;
pub(crate) mod topology;

use serde::{Deserialize, Serialize};

pub use daemon::{DaemonLimits, StaleReason, StartedDaemon, StopMethod};
pub(crate) use soak::{Sample, SoakEnd, SoakStart};
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

/// Everything that happens to a daemon or a soak. Past tense: an event states a fact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// A selector was resolved against the visible GPUs.
    TopologyResolved {
        selector: String,
        topology_mode: TopologyMode,
        gpus: Vec<GpuIdentity>,
        cuda_visible_devices: Option<String>,
    },
    /// A daemon was started and its `(pid, starttime)` recorded (schema 1–3's form).
    DaemonStartedV3 {
        record: StartedDaemon,
        foreground: bool,
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
    /// A soak started (schema 1's form).
    SoakStartedV1(Box<soak::v1::SoakStart>),
    /// One sample of a soak (schema 1's form).
    SoakSampledV1(Box<soak::v1::Sample>),
    /// A soak's verdict (schema 1's form).
    SoakFinishedV1(Box<soak::v1::SoakEnd>),
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
    /// A soak started (schema 2–4's form). Same kind as its schema 1 form.
    SoakStartedV4(Box<SoakStart>),
    /// One sample of a soak (schema 2–5's form).
    SoakSampledV5(Box<Sample>),
    /// A soak's verdict, written once the last child is gone (schema 2–4's form).
    SoakFinishedV4(Box<SoakEnd>),
    /// A start is about to launch a daemon (schema 2–3's form, without the job).
    DaemonStartingV3 {
        gpu: String,
        pipe_directory: String,
        log_directory: String,
        starter: ProcessIdentity,
    },
    /// A process began to use a shared daemon (`mps exec --shared`): the daemon is kept while
    /// any holder lives (schema 3).
    LeaseAcquired {
        holder: ProcessIdentity,
        /// The Slurm job the holder runs in.
        job: Option<String>,
        /// Whether this holder started the daemon for sharing: such a daemon is stopped when
        /// its last lease ends; one started with `mps start` is left to its owner.
        started: bool,
    },
    /// A lease ended: its holder finished, or was found gone (schema 3).
    LeaseReleased {
        holder: ProcessIdentity,
        reason: LeaseEnd,
    },
    /// A daemon was started and its `(pid, starttime)` recorded, with its job (schema 4–6's
    /// form). Same kind as its older form.
    DaemonStartedV6 {
        record: StartedDaemon,
        foreground: bool,
        /// The Slurm job it was started in (`SLURM_JOB_ID`), which scopes it.
        job: Option<String>,
    },
    /// A start is about to launch a daemon: where it will answer, which process launches it and
    /// in which Slurm job, so that a start cut short (its process killed) can be recognised
    /// later and what it launched stopped. Closed by the `daemon_started` or
    /// `daemon_start_failed` that follows (schema 4; same kind as its older form).
    DaemonStarting {
        gpu: String,
        pipe_directory: String,
        log_directory: String,
        starter: ProcessIdentity,
        job: Option<String>,
    },
    /// What the soak's tree was doing when the supervisor was about to signal it: committed
    /// before the first signal (schema 5).
    SoakEvidenceCaptured(Box<soak::Evidence>),
    /// A soak started, with how it is supervised beyond its limits (schema 5's form).
    SoakStartedV5 {
        start: Box<SoakStart>,
        supervision: soak::Supervision,
    },
    /// A soak's verdict, with what it found about the tree's end (schema 5's form).
    SoakFinishedV5 {
        end: Box<SoakEnd>,
        findings: Box<soak::Findings>,
    },
    /// A soak started: its parameters, how it is supervised and the budgets it is held to
    /// (schema 6; same kind as its older forms).
    SoakStarted {
        start: Box<SoakStart>,
        supervision: soak::Supervision,
        limits: soak::Limits,
    },
    /// One sample of a soak, with each process's proportional set size and each GPU's health
    /// (schema 6; same kind as its older forms).
    SoakSampled {
        sample: Box<Sample>,
        measures: Box<soak::Measures>,
    },
    /// A soak's verdict, with what it found and the budget that failed it, if one did (schema 6;
    /// same kind as its older forms).
    SoakFinished {
        end: Box<SoakEnd>,
        findings: Box<soak::Findings>,
        limit: Option<soak::ResourceLimit>,
    },
    /// A daemon was started and its `(pid, starttime)` recorded, with its job and the limits it
    /// was started with (schema 7; same kind as its older forms).
    DaemonStarted {
        record: StartedDaemon,
        foreground: bool,
        /// The Slurm job it was started in (`SLURM_JOB_ID`), which scopes it.
        job: Option<String>,
        limits: DaemonLimits,
    },
    /// One sample of a soak, its processes stored against the soak's previous sample (schema 8;
    /// same kind as its older forms). The log gives readers the [`Event::SoakSampled`] it
    /// stands for: no reader sees this form.
    SoakSampledCompact(Box<soak::CompactSample>),
    /// A finished soak's records were moved to an archive file; this event commits to every one
    /// of them (schema 8).
    SoakArchived(Box<soak::Archived>),
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

/// Every event kind, in the order its first variant has in [`Event`]. A kind whose payload
/// changed in a schema version has one variant per form, all with the same kind.
pub const EVENT_KINDS: [&str; 16] = [
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
];

impl Event {
    /// The snake_case name used in `history --json` as `kind`.
    pub fn kind(&self) -> &'static str {
        let index = match self {
            Event::TopologyResolved { .. } => 0,
            Event::DaemonStartedV3 { .. }
            | Event::DaemonStartedV6 { .. }
            | Event::DaemonStarted { .. } => 1,
            Event::DaemonVerifiedLive { .. } => 2,
            Event::DaemonStartFailed { .. } => 3,
            Event::DaemonStaleCleaned { .. } => 4,
            Event::DaemonStopped { .. } => 5,
            Event::SoakStartedV1(_)
            | Event::SoakStartedV4(_)
            | Event::SoakStartedV5 { .. }
            | Event::SoakStarted { .. } => 6,
            Event::SoakSampledV1(_)
            | Event::SoakSampledV5(_)
            | Event::SoakSampled { .. }
            | Event::SoakSampledCompact(_) => 7,
            Event::SoakFinishedV1(_)
            | Event::SoakFinishedV4(_)
            | Event::SoakFinishedV5 { .. }
            | Event::SoakFinished { .. } => 8,
            Event::SoakAbandoned { .. } => 9,
            Event::ArtifactWritten { .. } => 10,
            Event::DaemonStartingV3 { .. } | Event::DaemonStarting { .. } => 11,
            Event::LeaseAcquired { .. } => 12,
            Event::LeaseReleased { .. } => 13,
            Event::SoakEvidenceCaptured(_) => 14,
            Event::SoakArchived(_) => 15,
        };
        EVENT_KINDS[index]
    }
}

/// The hashed part of a stored record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub seq: u64,
    /// Wall-clock time of the append, Unix microseconds.
    pub recorded_at_us: i64,
    pub scope: Scope,
    pub subject: Subject,
    pub event: Event,
}
