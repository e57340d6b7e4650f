//! The verdict's findings as schema 10 introduced them and `soak_finished` held them through
//! schema 14 (`SoakFinishedV14`), frozen: the heartbeat file's errors without what schema 15
//! counts (beats whose `t` was not used, beats that repeated the one before, reads for want of
//! an inotify watch). Read as the domain's `Findings`, those counts `None`
//! (`event::upcast`). Nothing here may change.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::soak::{
    ChildExit, GoodputSplit, GpuRelease, OomKill, StepStats, UnkillableProcess,
};

/// What the verdict found about the tree's end (schema 10–14).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Findings {
    pub child: Option<ChildExit>,
    pub oom_kills: Vec<OomKill>,
    pub unkillable: Vec<UnkillableProcess>,
    pub gpu_release: Option<GpuRelease>,
    pub heartbeat: Option<Box<RunBeats>>,
}

/// What the verdict found of the run's beats (schema 10–14).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunBeats {
    pub steps: BTreeMap<String, StepStats>,
    pub untracked: u64,
    pub errors: HeartbeatErrors,
    pub goodput: Option<GoodputSplit>,
}

/// Lines of the heartbeat file that were not beats, and bytes never read (schema 10–14).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatErrors {
    pub malformed: u64,
    pub oversized: u64,
    pub dropped_bytes: u64,
    pub truncations: u64,
}
