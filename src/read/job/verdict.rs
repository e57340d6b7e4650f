//! The job's verdict, a clause a line: the suspect and why first, then what the other ranks
//! were doing, then who tripped first — as what it is: whose limit ran out first, which follows
//! the ranks' start and the sample grid as much as the hang — and whose progress stopped
//! first where that is not the suspect's reason; the other signals that name another rank; and,
//! when nothing failed, the stragglers. Without a suspect, the ranks grouped by where they
//! stood take its place.

use super::RankRow;
use super::straggler::Straggler;
use super::suspect::{Judged, Why};
use crate::job::alarm::Alarm;
use crate::read::signature::StackSignature;
use crate::read::signature::group::{self, Grouping};

/// The verdict's clauses, in order, over `ranks` (sorted), their stacks (`signed`, by rank)
/// and `grouping`, what was judged of them, and the stragglers.
pub(super) fn lines(
    ranks: &[RankRow],
    alarm: Option<&Alarm>,
    (signed, grouping): (&[(u32, StackSignature)], &Grouping),
    judged: &Judged,
    stragglers: &[Straggler],
) -> Vec<String> {
    let host_of = |rank: u32| {
        ranks
            .iter()
            .find(|r| r.rank == Some(rank))
            .map(|r| r.host.clone())
    };
    let mut lines = Vec::new();
    match &judged.suspect {
        Some(suspect) => {
            lines.push(format!(
                "{} is the suspect: {}",
                who(suspect.rank, &suspect.host),
                suspect.detail
            ));
            let others: Vec<(u32, StackSignature)> = signed
                .iter()
                .filter(|(rank, _)| Some(*rank) != suspect.rank)
                .cloned()
                .collect();
            lines.extend(group::others(&group::group(&others), &host_of));
        }
        None => lines.extend(group::verdict(grouping, &host_of)),
    }
    lines.extend(tripped_first(ranks, alarm));
    let suspect_why = judged.suspect.as_ref().map(|s| s.why);
    if let Some(stalled) = judged
        .first_stalled
        .as_ref()
        .filter(|_| suspect_why != Some(Why::FirstStalled))
    {
        lines.push(format!(
            "{}'s progress stopped first, {} before any other rank's",
            who(stalled.rank, &stalled.host),
            crate::text::duration(stalled.ahead_seconds)
        ));
    }
    if let Some(suspect) = &judged.suspect {
        lines.extend(
            suspect
                .disagreements
                .iter()
                .filter(|d| d.why != Why::FirstStalled)
                .map(|d| format!("yet of {}, {}", who(d.rank, &d.host), d.detail)),
        );
    }
    // A failure is the job's story; stragglers are when nothing failed.
    if alarm.is_none() && ranks.iter().all(|r| r.failure_kind.is_none()) {
        lines.extend(stragglers.iter().map(Straggler::sentence));
    }
    lines
}

/// `rank 2 on n1`, or the soak's host alone for a soak without a rank.
pub(crate) fn who(rank: Option<u32>, host: &str) -> String {
    match rank {
        Some(rank) => format!("rank {rank} on {host}"),
        None => format!("a soak on {host} without a rank"),
    }
}

/// Which rank tripped first and why: the alarm's, else the failed rank that tripped earliest.
fn tripped_first(ranks: &[RankRow], alarm: Option<&Alarm>) -> Option<String> {
    if let Some(alarm) = alarm {
        return Some(format!(
            "{} tripped first: {} ({})",
            who(alarm.rank, &alarm.host),
            alarm.failure_kind,
            crate::text::foreign(&alarm.reason)
        ));
    }
    let first = ranks
        .iter()
        .filter(|r| r.failure_kind.is_some())
        .filter_map(|r| r.tripped_at.map(|at| (at, r)))
        .min_by(|(a, ra), (b, rb)| a.total_cmp(b).then(ra.rank.cmp(&rb.rank)))?
        .1;
    let kind = first.failure_kind?.as_str();
    Some(match &first.reason {
        Some(reason) => format!(
            "{} tripped first: {kind} ({})",
            who(first.rank, &first.host),
            crate::text::foreign(reason)
        ),
        None => format!("{} tripped first: {kind}", who(first.rank, &first.host)),
    })
}
