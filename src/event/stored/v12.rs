//! The job a soak belongs to as schema 9 introduced it and every form of `soak_started` through
//! schema 12 holds it (`SoakStartedV9`, `SoakStartedV10`, `SoakStartedV12`), frozen: read as
//! the domain's `JobMember` without a run (`event::upcast`). Nothing here may change.

use serde::{Deserialize, Serialize};

use crate::event::soak::OnJobAlarm;

/// The job a soak belongs to, fixed when it starts: no run (soaks recorded before runs form
/// run `null`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobMember {
    pub job: String,
    pub rank: Option<u32>,
    pub on_job_alarm: OnJobAlarm,
}
