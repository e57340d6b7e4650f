//! The suspect: the one rank of a job that stands out, and why (DESIGN.md's fifth wave, "The
//! suspect"). Pure: it judges the rows as read ([`RankRow`], each with its [`Pace`]) and the
//! ranks grouped by where they stood.
//!
//! Rules:
//! - A rank has *stalled* when, as far as it is known (its end, else its last sample), it has
//!   gone longer than its margin without progress: max(3 × its median step — or, without
//!   steps, its median progress — interval, 2 sample intervals). A rank that passed has not.
//! - `first_stalled` is the stalled rank whose progress stopped earliest, named only when it
//!   stopped more than its margin before any other rank's: the ranks of a collective finish it
//!   within milliseconds of each other, so the smallest time alone names whichever the start
//!   skew and the sample grid favour. `None` while every rank still progresses.
//! - A rank is *behind* when its step is below one all other ranks share (every other rank beat
//!   and reached it); of *another phase* when its last beat's phase is one no other rank's last
//!   beat is in. Either names a rank only once it has stalled: ranks that still run are sampled
//!   at different moments, steps and phases apart.
//! - An *odd stack* is the one rank outside the largest group of stacks.
//! - The suspect is named by the first signal, in the order of [`Why`], that names a rank; the
//!   others that name another rank are its `disagreements`. No signal, no suspect.

pub(crate) mod pace;

use serde::Serialize;

use super::RankRow;
use crate::read::collectives::Stalled;
use crate::read::signature::group::{self, Grouping};
pub(crate) use pace::{Pace, RankPace};

/// Why a rank is the suspect, in order of precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Why {
    /// It never entered a collective the others wait in (the flight recorder's counters).
    Collective,
    OddStack,
    OtherPhase,
    BehindStep,
    FirstStalled,
}

impl Why {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Why::Collective => "collective",
            Why::OddStack => "odd_stack",
            Why::OtherPhase => "other_phase",
            Why::BehindStep => "behind_step",
            Why::FirstStalled => "first_stalled",
        }
    }
}

/// The rank whose progress stopped first, by more than its margin.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct FirstStalled {
    pub rank: Option<u32>,
    pub host: String,
    pub last_progress_at: f64,
    /// How long before any other rank's its progress stopped, seconds.
    #[serde(skip)]
    pub ahead_seconds: f64,
}

/// A signal that names a rank other than the suspect.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Disagreement {
    pub why: Why,
    pub rank: Option<u32>,
    pub host: String,
    pub detail: String,
}

/// The one rank that stands out, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Suspect {
    pub rank: Option<u32>,
    pub host: String,
    pub why: Why,
    /// Why, as a clause: "its stack is the odd one out: `load_batch` (data.py:88)".
    pub detail: String,
    pub disagreements: Vec<Disagreement>,
}

/// What the rows say of the ranks that stand out.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Judged {
    pub first_stalled: Option<FirstStalled>,
    pub suspect: Option<Suspect>,
}

/// One signal: the row it names and why, said.
struct Named {
    why: Why,
    row: usize,
    detail: String,
}

/// Judges `ranks` (as read), `grouping` (their stacks grouped) and the collective some ranks
/// never entered, if one is known.
pub(crate) fn judge(
    ranks: &[RankRow],
    grouping: &Grouping,
    collective: Option<&Stalled>,
) -> Judged {
    let first_stalled = first_stalled(ranks);
    let signals: Vec<Named> = [
        collective.and_then(|stalled| {
            let missing = *stalled.missing_ranks.first()?;
            let row = ranks.iter().position(|r| r.rank == Some(missing))?;
            Some(Named {
                why: Why::Collective,
                row,
                detail: stalled.sentence(),
            })
        }),
        odd_stack(ranks, grouping),
        other_phase(ranks),
        behind_step(ranks),
        first_stalled.as_ref().and_then(|f| {
            let row = ranks
                .iter()
                .position(|r| r.rank == f.rank && r.host == f.host)?;
            Some(Named {
                why: Why::FirstStalled,
                row,
                detail: format!(
                    "its progress stopped first, {} before any other rank's",
                    crate::text::duration(f.ahead_seconds)
                ),
            })
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    let suspect = signals.first().map(|first| {
        let row = &ranks[first.row];
        Suspect {
            rank: row.rank,
            host: row.host.clone(),
            why: first.why,
            detail: first.detail.clone(),
            disagreements: signals
                .iter()
                .filter(|s| s.row != first.row)
                .map(|s| Disagreement {
                    why: s.why,
                    rank: ranks[s.row].rank,
                    host: ranks[s.row].host.clone(),
                    detail: s.detail.clone(),
                })
                .collect(),
        }
    });
    Judged {
        first_stalled,
        suspect,
    }
}

/// How many of its median steps (or progress intervals) a rank may go without progress.
pub(crate) const STALL_STEPS: f64 = 3.0;
/// How many of its sample intervals a rank may go without progress, at least.
pub(crate) const STALL_SAMPLES: f64 = 2.0;

/// How long a rank may go without progress before it has stalled, seconds (see the rules).
pub(crate) fn margin(row: &RankRow) -> f64 {
    let interval = row
        .median_step_seconds
        .or(row.pace.progress_interval_seconds)
        .unwrap_or(0.0);
    let sample = row.pace.sample_interval_seconds.unwrap_or(0.0);
    (STALL_STEPS * interval).max(STALL_SAMPLES * sample)
}

/// Whether `row` has stalled: gone longer than its margin without progress, as far as known.
fn stalled(row: &RankRow) -> bool {
    if row.status == "passed" {
        return false;
    }
    let known = row.ended_at.or(row.pace.last_sample_at);
    match (row.last_progress_at, known) {
        (Some(progress), Some(known)) => known - progress > margin(row),
        _ => false,
    }
}

/// The stalled rank whose progress stopped first, when it leads every other by its margin.
fn first_stalled(ranks: &[RankRow]) -> Option<FirstStalled> {
    let (first, at) = ranks
        .iter()
        .enumerate()
        .filter(|(_, r)| stalled(r))
        .filter_map(|(i, r)| Some((i, r.last_progress_at?)))
        .min_by(|(i, a), (j, b)| a.total_cmp(b).then(ranks[*i].rank.cmp(&ranks[*j].rank)))?;
    let next = ranks
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != first)
        .filter_map(|(_, r)| r.last_progress_at)
        .min_by(f64::total_cmp)?;
    let row = &ranks[first];
    (next - at > margin(row)).then(|| FirstStalled {
        rank: row.rank,
        host: row.host.clone(),
        last_progress_at: at,
        ahead_seconds: next - at,
    })
}

/// The one rank outside the largest group of stacks.
fn odd_stack(ranks: &[RankRow], grouping: &Grouping) -> Option<Named> {
    let [odd] = grouping.odd_ranks.as_slice() else {
        return None;
    };
    let row = ranks.iter().position(|r| r.rank == Some(*odd))?;
    let place = grouping
        .groups
        .iter()
        .find(|g| g.ranks.contains(odd))
        .map(group::place)?;
    Some(Named {
        why: Why::OddStack,
        row,
        detail: format!("its stack is the odd one out: {place}"),
    })
}

/// The one stalled rank whose last beat's phase no other rank's last beat is in.
fn other_phase(ranks: &[RankRow]) -> Option<Named> {
    let phased: Vec<(usize, &str)> = ranks
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((i, r.last_phase.as_deref()?)))
        .collect();
    if phased.len() < 2 {
        return None;
    }
    let mut alone = phased
        .iter()
        .filter(|(i, phase)| phased.iter().all(|(j, p)| j == i || p != phase));
    let (&(row, phase), None) = (alone.next()?, alone.next()) else {
        return None;
    };
    if !stalled(&ranks[row]) {
        return None;
    }
    let mut others: Vec<&str> = phased
        .iter()
        .filter(|(j, _)| *j != row)
        .map(|(_, p)| *p)
        .collect();
    others.sort_unstable();
    others.dedup();
    let others: Vec<String> = others.iter().map(|p| format!("`{p}`")).collect();
    let others = match others.as_slice() {
        [one] => format!("every other rank's in {one}"),
        _ => format!("the others' in {}", others.join(" or ")),
    };
    Some(Named {
        why: Why::OtherPhase,
        row,
        detail: format!("its last beat is in phase `{phase}`, {others}"),
    })
}

/// The one stalled rank below a step every other rank reached.
fn behind_step(ranks: &[RankRow]) -> Option<Named> {
    let steps: Vec<u64> = ranks.iter().map(|r| r.last_step).collect::<Option<_>>()?;
    let (row, &lowest) = steps.iter().enumerate().min_by_key(|(_, s)| **s)?;
    let shared = steps
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != row)
        .map(|(_, s)| *s)
        .min()?;
    (lowest < shared && stalled(&ranks[row])).then(|| Named {
        why: Why::BehindStep,
        row,
        detail: format!("it stopped at step {lowest}, every other rank reached step {shared}"),
    })
}

#[cfg(test)]
mod tests;
