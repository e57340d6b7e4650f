//! An abandoned soak's end, as every view shows it. Its supervisor died unseen some time after
//! its last sample, and `soak_abandoned` was recorded when someone first looked, which says
//! nothing of the soak: so its `ended_at` is its last sample's recorded time and its end
//! `unknown` ([`SoakState::end`]) — in `soak list`, `soak show`, `job show`, `job list` and the
//! artifact alike.

use crate::event::soak::OutcomeStatus;
use crate::event::{Event, Subject};
use crate::log::{LogError, Snapshot};
use crate::projection::{SoakState, SoakSummary, Soaks};

/// The last sample of a soak in the live log: how far into the soak it was taken, and when it
/// was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LastSample {
    elapsed_ms: u64,
    recorded_at_us: i64,
}

/// What the live log holds of a soak's end, read from its newest records back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tail {
    /// Its last sample.
    Sampled(LastSample),
    /// Its records were archived: the live log keeps its row only.
    Archived,
    /// No sample was taken.
    Unsampled,
}

/// The last sample of soak `soak` in the live log. Read from the soak's newest records back,
/// which for an abandoned soak are a few (its `soak_archived` event, once archived, comes after
/// every record its row counts).
fn tail(snapshot: &Snapshot, soak: &SoakSummary) -> Result<Tail, LogError> {
    let mut tail = Tail::Unsampled;
    let subject = Subject::Soak(soak.soak_id.clone());
    snapshot.scan_subject_back(&subject, u64::MAX, |record| {
        Ok(match &record.envelope.event {
            Event::SoakSampled { sample, .. } => {
                tail = Tail::Sampled(LastSample {
                    elapsed_ms: sample.elapsed_ms,
                    recorded_at_us: record.envelope.recorded_at_us,
                });
                false
            }
            Event::SoakArchived(_) => {
                tail = Tail::Archived;
                false
            }
            // Before its start there is none of its.
            event => !Soaks::starts(event),
        })
    })?;
    Ok(tail)
}

/// How far into soak `soak` its last sample in the live log was taken, in milliseconds: for an
/// abandoned soak, as near its end as the log knows — its supervisor died unseen some time after,
/// and when it was found abandoned says only when someone looked. `None` when no sample is in
/// the live log (none was taken, or its records are archived).
pub(crate) fn last_sample_ms(
    snapshot: &Snapshot,
    soak: &SoakSummary,
) -> Result<Option<u64>, LogError> {
    Ok(match tail(snapshot, soak)? {
        Tail::Sampled(last) => Some(last.elapsed_ms),
        Tail::Archived | Tail::Unsampled => None,
    })
}

/// Soak `soak`'s row as every view shows it (`soak list`, `soak show`, `job show`, `job list`,
/// the artifact): an abandoned soak ended at its last sample (see [`end_at_last_sample`]). An
/// archived one keeps the row its archive kept, which archiving took from here.
pub(crate) fn as_shown(snapshot: &Snapshot, soak: SoakSummary) -> Result<SoakSummary, LogError> {
    let mut soak = soak;
    if soak.state == SoakState::Finished(OutcomeStatus::Abandoned) {
        match tail(snapshot, &soak)? {
            Tail::Sampled(last) => end_at_last_sample(&mut soak, Some(last.recorded_at_us)),
            Tail::Unsampled => end_at_last_sample(&mut soak, None),
            Tail::Archived => {}
        }
    }
    Ok(soak)
}

/// The rule for an abandoned soak's end, in every view: `ended_at` is its last sample's
/// recorded time (`None` without a sample) — not when `soak_abandoned` was recorded, which says
/// only when someone looked — and the end itself is unknown ([`SoakState::end`]). Other soaks
/// are left as they are.
pub(crate) fn end_at_last_sample(soak: &mut SoakSummary, last_sample_at_us: Option<i64>) {
    if soak.state == SoakState::Finished(OutcomeStatus::Abandoned) {
        soak.ended_at_us = last_sample_at_us;
    }
}
