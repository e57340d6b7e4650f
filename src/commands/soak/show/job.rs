//! `soak show` of a rank's soak: the job it is a rank of (the one every job view files it
//! under), its run and rank, and the job's alarm it saw — whose, and when.

use serde::Serialize;

use crate::output::human_time;
use crate::read::job::soaks::kept::Member;
use crate::read::record::SoakRecord;
use crate::text::foreign;

/// The job a rank's soak belongs to, as `soak show` says it: the one every job view files it
/// under ([`Member`]), its run, its rank, and the job's alarm it saw.
#[derive(Debug, Serialize)]
pub(super) struct JobShown {
    job: String,
    /// The run of the job it joined; `null` for a soak recorded before runs (schema 13).
    run: Option<String>,
    rank: Option<u32>,
    /// The job's alarm as this soak saw it; `null` when it saw none.
    alarm: Option<AlarmShown>,
}

/// Whose the alarm was (the rank that tripped first, its host and soak) and when (Unix
/// seconds): raised, seen by this soak, and this soak's capture at it (`null` without one).
#[derive(Debug, Serialize)]
struct AlarmShown {
    rank: Option<u32>,
    host: String,
    soak_id: String,
    failure_kind: String,
    at: f64,
    seen_at: f64,
    captured_at: Option<f64>,
}

impl JobShown {
    pub(super) fn of(record: &SoakRecord) -> Option<Self> {
        let records = &record.records;
        let member = Member::of(&records.soak.start, records.soak.job.as_ref())?;
        let alarm = records.job_alarm.as_ref().map(|seen| AlarmShown {
            rank: seen.alarm.rank,
            host: seen.alarm.host.clone(),
            soak_id: seen.alarm.soak_id.clone(),
            failure_kind: seen.alarm.failure_kind.clone(),
            at: seen.alarm.at,
            seen_at: seen.seen_at,
            captured_at: records
                .job_evidence
                .as_ref()
                .map(|e| crate::time::unix_seconds(e.captured_at_us)),
        });
        Some(JobShown {
            job: member.job,
            run: member.run,
            rank: member.rank,
            alarm,
        })
    }

    /// `job:   ring, run s0.r0, rank 1` and `alarm: rank 2 on n8 (stale_progress) at …,
    /// captured 4.25 s after`.
    pub(super) fn lines(&self) -> Vec<(&'static str, String)> {
        let mut job = self.job.clone();
        if let Some(run) = &self.run {
            job.push_str(&format!(", run {run}"));
        }
        if let Some(rank) = self.rank {
            job.push_str(&format!(", rank {rank}"));
        }
        let mut lines = vec![("job", foreign(&job).into_owned())];
        if let Some(alarm) = &self.alarm {
            let whose = match alarm.rank {
                Some(rank) => format!("rank {rank} on {}", alarm.host),
                None => format!("soak {} on {}", alarm.soak_id, alarm.host),
            };
            let captured = alarm.captured_at.map_or_else(
                || ", no capture at it".to_owned(),
                |at| format!(", captured {:.2} s after", at - alarm.at),
            );
            let at = human_time((alarm.at * 1e6) as i64);
            let said = format!("{whose} ({}) at {at}{captured}", alarm.failure_kind);
            lines.push(("alarm", foreign(&said).into_owned()));
        }
        lines
    }
}
