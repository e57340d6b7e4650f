//! Settling soaks whose supervisor vanished.
//!
//! A soak is recorded as running from `soak_started` until its verdict. When its supervisor
//! process is gone (killed, the host rebooted) no verdict will come: the soak is abandoned, and
//! the first command that reads the soaks afterwards records `soak_abandoned` — once, since the
//! decision is taken again on the log's current state just before each append.

use crate::event::soak::OutcomeStatus;
use crate::event::{Event, Subject};
use crate::log::{EventLog, LogError, LogReader, Projection, Snapshot};
use crate::paths::StatePaths;
use crate::process::{self, Liveness, ProcSource, ProcessIdentity};
use crate::projection::{SoakState, SoakSummary, Soaks};

/// Why an abandoned soak is abandoned, as recorded.
pub(crate) const REASON: &str = "its supervisor is gone without a verdict";

/// How long a finished soak's command ran, as its verdict recorded it (what `soak show` says it
/// ran): not the time to the verdict's record, which adds the tree's shutdown. An abandoned
/// soak's, to its last sample: when it was found abandoned is only when someone looked.
pub(crate) fn ran_seconds(
    snapshot: &Snapshot,
    soak: &SoakSummary,
) -> Result<Option<f64>, LogError> {
    let ran_ms = if soak.state == SoakState::Finished(OutcomeStatus::Abandoned) {
        super::ended::last_sample_ms(snapshot, soak)?
    } else {
        crate::soak::archive::run_ms(snapshot, soak)?
    };
    Ok(ran_ms.map(|ms| ms as f64 / 1e3))
}

/// The soaks among `soaks` that are abandoned: recorded as running, but their supervisor is not
/// `live`.
pub(crate) fn abandoned(
    soaks: &[SoakSummary],
    live: impl Fn(ProcessIdentity) -> bool,
) -> Vec<&SoakSummary> {
    soaks
        .iter()
        .filter(|s| s.state == SoakState::Running && !live(s.supervisor))
        .collect()
}

/// A read of the log after recording `soak_abandoned` for every abandoned soak, through a
/// handle that keeps `views` (every view the log keeps: the caller's to know). A log of another
/// scope (a copy brought in for forensics) is only read: its abandoned soaks are shown as the
/// log has them.
pub(crate) fn settle(
    paths: &StatePaths,
    reader: &LogReader,
    proc: &dyn ProcSource,
    views: crate::log::Views,
) -> Result<Snapshot, LogError> {
    let snapshot = reader.snapshot()?;
    if reader.scope() != &paths.scope() {
        return Ok(snapshot);
    }
    let live = |identity| process::liveness(proc, identity, paths.uid) == Liveness::Live;
    let soaks = Soaks::rows(&snapshot)?;
    if abandoned(&soaks, live).is_empty() {
        return Ok(snapshot);
    }
    let log = EventLog::open(&paths.log_path(), paths.scope(), views)?;
    for soak in abandoned(&soaks, live) {
        // Another command may record it at the same moment: decide again inside the write
        // transaction, on the state no other writer can change meanwhile. Once, whoever asks.
        log.append_if(
            Subject::Soak(soak.soak_id.clone()),
            Event::SoakAbandoned {
                supervisor: soak.supervisor,
                reason: REASON.into(),
            },
            Soaks::TABLE,
            &soak.soak_id,
            |row: Option<SoakSummary>| row.is_some_and(|s| s.state == SoakState::Running),
        )?;
    }
    reader.snapshot()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::soak::OutcomeStatus;

    fn summary(id: &str, pid: u32, state: SoakState) -> SoakSummary {
        SoakSummary {
            soak_id: id.into(),
            command: vec!["train".into()],
            output: "/out.json".into(),
            supervisor: ProcessIdentity {
                pid,
                start_ticks: 1,
            },
            started_at_us: 0,
            ended_at_us: None,
            state,
            failure_kind: None,
            reason: None,
            samples: 0,
            first_seq: 1,
            last_seq: 1,
            artifact_digest: None,
        }
    }

    #[test]
    fn given_running_soaks_only_those_whose_supervisor_is_gone_are_abandoned() {
        let soaks = [
            summary("alive", 10, SoakState::Running),
            summary("gone", 11, SoakState::Running),
            summary("done", 12, SoakState::Finished(OutcomeStatus::Passed)),
        ];
        let ids: Vec<&str> = abandoned(&soaks, |p| p.pid == 10)
            .iter()
            .map(|s| s.soak_id.as_str())
            .collect();
        assert_eq!(ids, ["gone"]);
    }

    #[test]
    fn a_finished_soak_is_never_abandoned_whatever_its_supervisor() {
        let soaks = [summary(
            "done",
            12,
            SoakState::Finished(OutcomeStatus::Failed),
        )];
        assert!(abandoned(&soaks, |_| false).is_empty());
    }
}
