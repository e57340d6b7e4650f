//! **The frozen on-disk schema**: every form an event was ever stored in. Every record is the
//! codec's encoding of a [`StoredEnvelope`]; bincode encodes structs by field *order* and enums
//! by variant *index*, so:
//! - a new form (a new kind, or a kind whose payload changes) is a new variant at the end of
//!   [`StoredEvent`] (older records keep decoding); the form it supersedes keeps its variant,
//!   renamed after the last schema that wrote it (`…V6`), and nothing else about it changes;
//! - a new payload type is added beside the others, never by changing one in place (a payload
//!   that changes is copied here first, frozen, for the forms that hold it: see [`v1`]);
//! - renaming, reordering, adding or removing a field of a stored type, or reordering variants,
//!   changes what old records mean.
//!
//! Where `migrations/README.md` says so, a form's payloads are frozen copies here, converted to
//! and from the domain's types in `event::upcast`: [`v1`] and [`v2`] named after the schema
//! that introduced them, [`v8`], [`v9`], [`v12`] and [`v14`] after the last that wrote them. The other types a
//! form holds are the domain's, and `log::golden` pins the bytes of every form: a change to any
//! type a form reaches fails it, naming the forms it changes.
//!
//! A schema step also bumps `log::migrate::SCHEMA_VERSION`, adds a step to `log::migrate::STEPS`
//! and freezes a fixture log of the old version in `migrations/fixtures/` (see
//! `migrations/README.md`). Nothing above the log sees these forms: the log upcasts each record
//! as it reads it (`event::upcast`), and turns each event it appends into its newest form.
//!
//! Field *names* are not stored, but they are an old record's fields in `history --json`.

pub mod v1;
pub mod v12;
pub mod v14;
pub mod v15;
pub mod v2;
pub mod v8;
pub mod v9;

use serde::{Deserialize, Serialize};

use super::daemon::{DaemonLimits, StaleReason, StartedDaemon, StopMethod};
use super::soak::{self, Sample};
use super::topology::{GpuIdentity, TopologyMode};
use super::{LeaseEnd, Scope, Subject};
use crate::process::ProcessIdentity;

/// Every form of every event, in the order they were added to the schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StoredEvent {
    /// A selector was resolved against the visible GPUs.
    TopologyResolved {
        selector: String,
        topology_mode: TopologyMode,
        gpus: Vec<GpuIdentity>,
        cuda_visible_devices: Option<String>,
    },
    /// `daemon_started` in schema 1–3's form.
    DaemonStartedV3 {
        record: StartedDaemon,
        foreground: bool,
    },
    DaemonVerifiedLive {
        process: ProcessIdentity,
    },
    DaemonStartFailed {
        reason: String,
        process: Option<ProcessIdentity>,
    },
    DaemonStaleCleaned {
        process: ProcessIdentity,
        reason: StaleReason,
    },
    DaemonStopped {
        process: ProcessIdentity,
        method: StopMethod,
    },
    /// `soak_started` in schema 1's form.
    SoakStartedV1(Box<v1::SoakStart>),
    /// `soak_sampled` in schema 1's form.
    SoakSampledV1(Box<v1::Sample>),
    /// `soak_finished` in schema 1's form.
    SoakFinishedV1(Box<v1::SoakEnd>),
    SoakAbandoned {
        supervisor: ProcessIdentity,
        reason: String,
    },
    ArtifactWritten {
        path: String,
        digest: String,
        bytes: u64,
    },
    /// `soak_started` in schema 2–4's form.
    SoakStartedV4(Box<v2::SoakStart>),
    /// `soak_sampled` in schema 2–5's form.
    SoakSampledV5(Box<Sample>),
    /// `soak_finished` in schema 2–4's form.
    SoakFinishedV4(Box<v2::SoakEnd>),
    /// `daemon_starting` in schema 2–3's form, without the job.
    DaemonStartingV3 {
        gpu: String,
        pipe_directory: String,
        log_directory: String,
        starter: ProcessIdentity,
    },
    /// Schema 3.
    LeaseAcquired {
        holder: ProcessIdentity,
        job: Option<String>,
        started: bool,
    },
    /// Schema 3.
    LeaseReleased {
        holder: ProcessIdentity,
        reason: LeaseEnd,
    },
    /// `daemon_started` in schema 4–6's form, with the job.
    DaemonStartedV6 {
        record: StartedDaemon,
        foreground: bool,
        job: Option<String>,
    },
    /// `daemon_starting` since schema 4, with the job.
    DaemonStarting {
        gpu: String,
        pipe_directory: String,
        log_directory: String,
        starter: ProcessIdentity,
        job: Option<String>,
    },
    /// `soak_evidence_captured` in schema 5–8's form.
    SoakEvidenceCapturedV8(Box<v8::Evidence>),
    /// `soak_started` in schema 5's form, with the supervision.
    SoakStartedV5 {
        start: Box<v2::SoakStart>,
        supervision: v9::Supervision,
    },
    /// `soak_finished` in schema 5's form, with the findings.
    SoakFinishedV5 {
        end: Box<v2::SoakEnd>,
        findings: Box<v9::Findings>,
    },
    /// `soak_started` in schema 6–8's form, with the limits.
    SoakStartedV8 {
        start: Box<v2::SoakStart>,
        supervision: v9::Supervision,
        limits: soak::Limits,
    },
    /// `soak_sampled` in schema 6–9's form, with the measures.
    SoakSampledV9 {
        sample: Box<Sample>,
        measures: Box<v9::Measures>,
    },
    /// `soak_finished` in schema 6–9's form, with the limit that failed it.
    SoakFinishedV9 {
        end: Box<v2::SoakEnd>,
        findings: Box<v9::Findings>,
        limit: Option<soak::ResourceLimit>,
    },
    /// `daemon_started` since schema 7, with the limits.
    DaemonStarted {
        record: StartedDaemon,
        foreground: bool,
        job: Option<String>,
        limits: DaemonLimits,
    },
    /// `soak_sampled` in schema 8–9's form as the log stores it: its processes packed against
    /// the soak's previous sample (the log unpacks it into [`StoredEvent::SoakSampledV9`] as it
    /// reads).
    SoakSampledCompactV9(Box<v9::CompactSample>),
    /// Schema 8.
    SoakArchived(Box<soak::Archived>),
    /// `soak_started` in schema 9's form, with the job it belongs to.
    SoakStartedV9 {
        start: Box<v2::SoakStart>,
        supervision: v9::Supervision,
        limits: soak::Limits,
        job: Option<v12::JobMember>,
    },
    /// `soak_evidence_captured` in schema 9–15's form: each process's rank, the MPS clients
    /// ended.
    SoakEvidenceCapturedV15(Box<v15::Evidence>),
    /// Schema 9.
    SoakJobAlarmSeen(Box<soak::JobAlarmSeen>),
    /// `soak_started` in schema 10's form: its supervision says how its heartbeats are judged.
    SoakStartedV10 {
        start: Box<v2::SoakStart>,
        supervision: soak::Supervision,
        limits: soak::Limits,
        job: Option<v12::JobMember>,
    },
    /// `soak_sampled` in schema 10–11's form, its measures with the beats since the previous
    /// sample.
    SoakSampledV11 {
        sample: Box<Sample>,
        measures: Box<soak::Measures>,
    },
    /// `soak_sampled` in schema 10–11's form as the log stores it: its processes and beats
    /// packed against the soak's previous sample (the log unpacks it into
    /// [`StoredEvent::SoakSampledV11`] as it reads).
    SoakSampledCompactV11(Box<soak::CompactSample>),
    /// `soak_finished` in schema 10–14's form: its findings with the run's steps and goodput.
    SoakFinishedV14 {
        end: Box<v2::SoakEnd>,
        findings: Box<v14::Findings>,
        limit: Option<soak::ResourceLimit>,
    },
    /// `soak_started` in schema 11–12's form: whether its command line is recorded lossily (an
    /// argument that is not UTF-8, run as its bytes).
    SoakStartedV12 {
        start: Box<v2::SoakStart>,
        supervision: soak::Supervision,
        limits: soak::Limits,
        job: Option<v12::JobMember>,
        command_lossy: bool,
    },
    /// `soak_sampled` since schema 12: with the progress the supervisor decided at it (`None`
    /// for a sample built by other means than a supervisor: a test, a benchmark).
    SoakSampled {
        sample: Box<Sample>,
        measures: Box<soak::Measures>,
        noted: Option<soak::ProgressNoted>,
    },
    /// `soak_sampled` since schema 12 as the log stores it: packed as schema 10's (the log
    /// unpacks it into [`StoredEvent::SoakSampled`] as it reads), with its progress.
    SoakSampledCompact {
        packed: Box<soak::CompactSample>,
        noted: Option<soak::ProgressNoted>,
    },
    /// `soak_started` since schema 13: its job with the run it joined.
    SoakStarted {
        start: Box<v2::SoakStart>,
        supervision: soak::Supervision,
        limits: soak::Limits,
        job: Option<soak::JobMember>,
        command_lossy: bool,
    },
    /// `soak_finished` since schema 15: the heartbeat file's errors count the beats not taken
    /// as they came (a `t` on another clock, a repeated step) and the reads for want of a watch.
    SoakFinished {
        end: Box<v2::SoakEnd>,
        findings: Box<soak::Findings>,
        limit: Option<soak::ResourceLimit>,
    },
    /// `soak_evidence_captured` since schema 16: each rank process's collectives.
    SoakEvidenceCaptured(Box<soak::Evidence>),
}

impl StoredEvent {
    /// Its kind's name (see [`super::EVENT_KINDS`]).
    pub fn kind(&self) -> &'static str {
        use StoredEvent as S;
        let index = match self {
            S::TopologyResolved { .. } => 0,
            S::DaemonStartedV3 { .. } | S::DaemonStartedV6 { .. } | S::DaemonStarted { .. } => 1,
            S::DaemonVerifiedLive { .. } => 2,
            S::DaemonStartFailed { .. } => 3,
            S::DaemonStaleCleaned { .. } => 4,
            S::DaemonStopped { .. } => 5,
            S::SoakStartedV1(_)
            | S::SoakStartedV4(_)
            | S::SoakStartedV5 { .. }
            | S::SoakStartedV8 { .. }
            | S::SoakStartedV9 { .. }
            | S::SoakStartedV10 { .. }
            | S::SoakStartedV12 { .. }
            | S::SoakStarted { .. } => 6,
            S::SoakSampledV1(_)
            | S::SoakSampledV5(_)
            | S::SoakSampledV9 { .. }
            | S::SoakSampledCompactV9(_)
            | S::SoakSampledV11 { .. }
            | S::SoakSampledCompactV11(_)
            | S::SoakSampled { .. }
            | S::SoakSampledCompact { .. } => 7,
            S::SoakFinishedV1(_)
            | S::SoakFinishedV4(_)
            | S::SoakFinishedV5 { .. }
            | S::SoakFinishedV9 { .. }
            | S::SoakFinishedV14 { .. }
            | S::SoakFinished { .. } => 8,
            S::SoakAbandoned { .. } => 9,
            S::ArtifactWritten { .. } => 10,
            S::DaemonStartingV3 { .. } | S::DaemonStarting { .. } => 11,
            S::LeaseAcquired { .. } => 12,
            S::LeaseReleased { .. } => 13,
            S::SoakEvidenceCapturedV8(_)
            | S::SoakEvidenceCapturedV15(_)
            | S::SoakEvidenceCaptured(_) => 14,
            S::SoakArchived(_) => 15,
            S::SoakJobAlarmSeen(_) => 16,
        };
        super::EVENT_KINDS[index]
    }
}

/// The hashed part of a stored record: what the codec encodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEnvelope {
    pub seq: u64,
    /// Wall-clock time of the append, Unix microseconds.
    pub recorded_at_us: i64,
    pub scope: Scope,
    pub subject: Subject,
    pub event: StoredEvent,
}
