//! unilab: user-owned CUDA MPS daemons and soak supervision on shared GPU hosts, with an
//! event-sourced record of both.
//!
//! The binary is a thin shell over [`main`]. The layers, each depending only on those below it
//! (`python3 ../shared/tools/module-cycles.py` prints the graph and fails on a circle):
//! - the entry: `binary` (the process's entry), `commands` (one file a verb, which maps its
//!   parsed arguments into the domain's own request: `soak::SoakRequest`,
//!   `mps::spec::StartRequest`), `output`, `error`, `usage` (what a misuse of the command line
//!   is told);
//! - `cli`: the command line's definitions (clap), one file a verb group as in `commands`,
//!   which no module below takes; a flag's value that carries a rule is parsed beside its
//!   type in the domain (`job::id::job_flag`, `duration`, `size`,
//!   `process::parse_dump_signal`), and the names of the internal subcommands are their
//!   owners' (`soak::guard::SUBCOMMAND`, `tool::LEASH`); its completions read the record;
//! - `view`: what is read, said to a person (a soak's evidence and steps in words, the HTML
//!   report, `history`'s lines);
//! - `read`: a soak's record folded once from its events, and what is rendered from it to keep
//!   (the artifact, the CSV), a job's ranks side by side;
//! - the domain: `mps` (daemons), `soak` (supervision, sampling, where the artifact goes), `job`
//!   (a job's ranks, its directory and its alarm), `snapshot` (runtime provenance), `gpu`
//!   (nvidia-smi, visibility mask, selectors);
//! - `projection`s over the `log` (store, codec, chain, migrations, the upcast at read) of
//!   `event`s, the log kept where `paths` says (where state lives, whose directories can be
//!   trusted);
//! - leaves: `process` (identity, and how unilab signals what it did not spawn), `proc_read`
//!   (bounded reads of what other processes map), `proc_rank` (a process's `RANK`),
//!   `collectives` (a rank's collectives as PyTorch's flight recorder and NCCL watchdog tell
//!   them, read from untrusted dumps within bounds), `tool`
//!   (external tools under one timeout), `trace` (`-v`), `time`, `env`, `redact`, `duration`,
//!   `size` and `text` (how sizes, durations and plurals read), `style` (colour), `diagnostic`,
//!   and `testing` (what the crate's own tests share, such as a fake `/proc`).
//!
//! # Public face
//! Every module is private. What code outside the crate may use is the one `pub use` list
//! below: the record (the events, the log, the views over it), process identity, state paths,
//! the clock, and the binary's entry. What the crate's own tests, benchmarks and tools reach
//! into besides is in [`testing`], hidden from the docs and free to change at any commit. So
//! the compiler reports every item nothing uses.
//!
//! # Lint policy
//! - `unsafe` is forbidden.
//! - Items are `pub(crate)` unless they are part of the public face (`unreachable_pub`), and
//!   every type the face reaches is named in it (`unnameable_types`): the list below is the
//!   whole of it, checked by the compiler.
//! - No function over 100 lines (`clippy::too_many_lines`); CI denies every warning.
#![forbid(unsafe_code)]
#![warn(unreachable_pub, unnameable_types, clippy::too_many_lines)]

mod binary;
mod cli;
mod collectives;
mod commands;
mod diagnostic;
mod duration;
mod env;
mod error;
mod event;
mod gpu;
mod job;
mod log;
mod mps;
mod output;
mod paths;
mod proc_rank;
mod proc_read;
mod process;
mod projection;
mod read;
mod redact;
mod size;
mod snapshot;
mod soak;
mod style;
mod text;
mod time;
mod tool;
mod trace;
mod usage;
mod view;

// The binary's entry.
pub use binary::main;

// The record: the events, as read and as stored...
pub use event::soak::{
    Archived, ArchivedRun, ArchivedSoak, CgroupEvidence, ChildExit, CollectiveFrame,
    CollectiveGroup, CompactSample, Evidence, ExitInfo, FailureKind, Findings, GoodputSplit,
    GpuHealth, GpuHolder, GpuProcessSample, GpuRelease, GpuReleased, GpuSample, HeartbeatErrors,
    HeartbeatSettings, JobAlarm, JobAlarmSeen, JobMember, KernelMessage, LeakedProcess, Limits,
    Measures, MpsTeardown, OnJobAlarm, OomKill, OomSource, Outcome, OutcomeStatus, PackedBeats,
    PendingCollective, ProcessCollectives, ProcessEvidence, ProcessSample, ProgressNoted,
    ProgressSeen, ProgressSignature, ResourceLimit, RunBeats, Sample, SampleBeats, SoakEnd,
    SoakParameters, SoakStart, StepStats, StepTimeoutSetting, Supervision, ThreadEvidence,
    UnkillableProcess,
};
// (the soak events' first forms, which logs written before schema 2 hold)
pub use event::stored::v1 as soak_v1;
// (the soak's start and verdict as every form since schema 2 holds them)
pub use event::stored::v2 as soak_v2;
// (the evidence's form of schemas 5 to 8)
pub use event::stored::v8 as evidence_v8;
// (the soak payloads schema 5–9 wrote, before the heartbeat)
pub use event::stored::v9 as soak_v9;
// (the job schema 9–12's starts hold, before runs)
pub use event::stored::v12 as job_v12;
// (the findings schema 10–14's verdicts hold, before the beats not taken as they came)
pub use event::stored::v14 as findings_v14;
// (the evidence's form of schemas 9 to 15, before each rank's collectives)
pub use event::stored::v15 as evidence_v15;
pub use event::{
    DaemonLimits, EVENT_KINDS, Envelope, Event, GpuIdentity, LeaseEnd, Scope, StaleReason,
    StartedDaemon, StopMethod, StoredEnvelope, StoredEvent, Subject, TopologyMode,
};
// ...the log that holds them, and how it fails...
pub use log::chain::{ChainBreak, ChainFault};
pub use log::codec::CodecError;
pub use log::migrate::MigrationError;
pub use log::{Appended, ArchiveCheck, ArchiveDone, ToArchive, VerifyReport};
pub use log::{
    EventLog, LogError, LogReader, Projection, Record, Snapshot, StoredRecord, Update, View,
};
pub use paths::Distrust;
// ...and the views over it.
pub use projection::{DaemonRow, Daemons};
pub use read::VIEWS as PROJECTIONS;

// Whose log, where, and when.
pub use paths::StatePaths;
pub use process::ProcessIdentity;
pub use time::Clock;

/// Reach-ins for the crate's own tests, benchmarks and tools: not part of the public face,
/// and free to change at any commit.
#[doc(hidden)]
pub mod testing {
    pub use crate::diagnostic::Exit;
    pub use crate::duration::DurationError;
    pub use crate::error::Error;
    pub use crate::gpu::mask::MaskError;
    pub use crate::gpu::selector::SelectorError;
    pub use crate::gpu::smi::SmiError;
    pub use crate::job::error::JobError;
    pub use crate::job::id::BadJobId;
    pub use crate::log::migrate::SCHEMA_VERSION;
    pub use crate::mps::clients::{ClientTeardown, terminate_clients_in_tree};
    pub use crate::mps::error::{MpsError, Unrecorded};
    pub use crate::paths::PathError;
    pub use crate::process::{Liveness, SignalError};
    pub use crate::process::{ProcStat, all_processes, descendants, parse_stat};
    pub use crate::projection::{SoakState, SoakSummary};
    pub use crate::soak::archive::archive as archive_soaks;
    pub use crate::soak::error::{Invalid, OutputFile, ProgressDirProblem, SoakError};
    pub use crate::soak::heartbeat::limits::LimitError;
    pub use crate::soak::launch::PlaceholderError;
    pub use crate::soak::trend::{Confidence, Fit, Slope, Trend};
    pub use crate::style::ColorChoice;
    pub use crate::style::Palette;
    pub use crate::tool::{Tool, ToolError, ToolOutput};

    pub mod chain {
        pub use crate::log::chain::{ChainWalker, GENESIS, Hash, seal, stored_hash};
    }
    pub mod codec {
        pub use crate::log::claim::claimed;
        pub use crate::log::codec::{MAX_RECORD_BYTES, decode, encode};
    }
    pub use crate::log::store_samples_whole;
    pub mod tables {
        pub use crate::log::tables::{EVENTS, META, SCHEMA_VERSION_KEY, SUBJECT_INDEX};
        /// The name of the table of the rank rows the job views keep (`soak_ranks_v<N>`).
        pub fn kept_ranks() -> &'static str {
            use redb::TableHandle;
            crate::read::job::soaks::kept::TABLE.name()
        }
    }
    pub mod artifact {
        pub use crate::read::artifact::{digest_matches, render};
        pub use crate::read::beats::BeatsRow;
        pub use crate::read::fold::{Abandonment, Measured, Soak, SoakRecords, Verdict, collect};
        pub use crate::read::rows::{GpuRow, SampleRow};
        pub use crate::read::stream::{Gathered, Piece, StreamError, Written, gather, write};
    }
    pub mod heartbeat {
        pub use crate::soak::heartbeat::beat::{Beat, Line};
        pub use crate::soak::heartbeat::clock::Timed;
        pub use crate::soak::heartbeat::limits::StepLimits;
        pub use crate::soak::heartbeat::numbers::Numbers;
        pub use crate::soak::heartbeat::parse::parse;
        pub use crate::soak::heartbeat::reader::{HeartbeatReader, Polled};
        pub use crate::soak::heartbeat::run::HeartbeatRun;
        pub use crate::soak::heartbeat::summary::SampleSummary;
    }
    pub mod metrics {
        pub use crate::soak::metrics::{SoakLabels, SoakMetrics};
        pub use crate::soak::supervise::metrics::write_atomically;
    }
    pub mod report {
        pub use crate::read::sketch::Sketch;
        pub use crate::view::report::testing::{render_gathered, render_sketch};
        pub use crate::view::report::{Charts, Extras};
    }
    pub mod sampler {
        pub use crate::soak::sampler::{GpuStream, HeldDir, Sampler, nvidia_smi_at};
    }
    /// Private directories and fake environments, for the crate's own unit tests.
    #[cfg(test)]
    pub(crate) mod files;
    /// A fake `/proc`, for the crate's own unit tests.
    #[cfg(test)]
    pub(crate) mod proc;
}
