//! The soak payloads as schema 5–9 stored them, frozen: what schema 10 extends with the soak's
//! heartbeats (the supervision with how steps are judged, the findings with the run's steps and
//! goodput, the measures with each sample's beats, and so the compact sample that holds
//! measures). Records of these forms are read as the current ones (`event::upcast`), which keep
//! every value they hold, the heartbeat `None`. Nothing here may change.

use serde::{Deserialize, Serialize};

use crate::event::soak::{ChildExit, GpuHealth, GpuRelease, OomKill, Sample, UnkillableProcess};

/// How the soak was supervised (schema 5–9).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Supervision {
    pub fail_fast: bool,
    pub py_spy: Option<String>,
    pub dump_signal: Option<i32>,
    pub dump_wait_ms: u64,
    pub evidence_unavailable: Vec<String>,
}

/// What the verdict found about the tree's end (schema 5–9).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Findings {
    pub child: Option<ChildExit>,
    pub oom_kills: Vec<OomKill>,
    pub unkillable: Vec<UnkillableProcess>,
    pub gpu_release: Option<GpuRelease>,
}

/// What was measured beside a sample (schema 6–9).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Measures {
    pub pss_bytes: Vec<Option<u64>>,
    pub gpus: Vec<GpuHealth>,
}

/// A sample with its processes packed against the soak's previous sample (schema 8–9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactSample {
    pub base: Option<u64>,
    pub sample: Sample,
    pub measures: Measures,
    pub pss: bool,
    pub processes: Vec<u8>,
}
