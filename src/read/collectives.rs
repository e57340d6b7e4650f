//! The collectives of a job's ranks matched across ranks (DESIGN.md's fifth wave, "Flight
//! recorder"): the collective some ranks wait in that others never entered, and the
//! collectives whose op, sizes or dtypes differ between the ranks that entered them.
//!
//! Pure: it takes what each rank's evidence held ([`ProcessCollectives`], by rank). A group is
//! the same group on every rank by its name (torch's `process_group[0]`, equal on every rank),
//! else by its id. For a group, the ranks *waiting* in collective `S` enqueued it and have not
//! completed it; the ranks *missing* from it never enqueued it (their last enqueued is below
//! `S`). `S` is the lowest collective any rank waits in. A rank that reported no counters for
//! the group is neither: it is not known.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::event::soak::{CollectiveFrame, CollectiveGroup, PendingCollective, ProcessCollectives};

/// The collective some ranks wait in and others never entered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Stalled {
    /// The group's name (else its id) and what the user called it (`default_pg`).
    pub group: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desc: Option<String>,
    pub seq: i64,
    /// torch's name of it (`gloo:all_reduce`), as a waiting rank recorded it.
    pub op: Option<String>,
    pub missing_ranks: Vec<u32>,
    pub waiting_ranks: Vec<u32>,
    /// When the first waiting rank enqueued it, Unix seconds.
    pub since: Option<f64>,
    /// Where a waiting rank called it from: `train.py:41`.
    pub called_at: Option<String>,
    /// Per missing rank, its last completed collective of the group.
    #[serde(skip)]
    pub missing_completed: Vec<(u32, Option<i64>)>,
}

/// A collective that differs between the ranks that entered it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Mismatch {
    pub group: String,
    pub seq: i64,
    /// `op`, `sizes`, `dtypes` or `state`.
    pub kind: &'static str,
    /// The ranks whose value differs from the most ranks'.
    pub ranks: Vec<u32>,
    /// The values, by rank, as one line.
    pub detail: String,
}

/// What the ranks' collectives say together.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Matched {
    pub stalled: Option<Stalled>,
    pub mismatches: Vec<Mismatch>,
}

/// Matches the collectives of `ranks`.
pub(crate) fn matched(ranks: &BTreeMap<u32, ProcessCollectives>) -> Matched {
    let mut groups: BTreeMap<String, Vec<(u32, &CollectiveGroup)>> = BTreeMap::new();
    for (&rank, found) in ranks {
        for group in &found.groups {
            let key = group.name.clone().unwrap_or_else(|| group.group.clone());
            groups.entry(key).or_default().push((rank, group));
        }
    }
    let mut stalls: Vec<Stalled> = groups
        .iter()
        .filter_map(|(key, members)| stalled(key, members))
        .collect();
    // The group whose wait began first speaks; the default group on a tie.
    stalls.sort_by(|a, b| {
        let since = |s: &Stalled| s.since.unwrap_or(f64::INFINITY);
        since(a)
            .total_cmp(&since(b))
            .then_with(|| a.group.cmp(&b.group))
    });
    Matched {
        stalled: stalls.into_iter().next(),
        mismatches: groups
            .iter()
            .flat_map(|(key, members)| mismatches(key, members))
            .collect(),
    }
}

fn stalled(key: &str, members: &[(u32, &CollectiveGroup)]) -> Option<Stalled> {
    let known: Vec<(u32, &CollectiveGroup)> = members
        .iter()
        .filter(|(_, g)| g.last_enqueued.is_some())
        .copied()
        .collect();
    let seq = known
        .iter()
        .filter_map(|(_, g)| {
            let next = g.last_completed.unwrap_or(0) + 1;
            (g.last_enqueued? >= next).then_some(next)
        })
        .min()?;
    let waiting: Vec<(u32, &CollectiveGroup)> = known
        .iter()
        .filter(|(_, g)| {
            g.last_enqueued.is_some_and(|e| e >= seq) && g.last_completed.unwrap_or(0) < seq
        })
        .copied()
        .collect();
    let missing: Vec<(u32, &CollectiveGroup)> = known
        .iter()
        .filter(|(_, g)| g.last_enqueued.is_some_and(|e| e < seq))
        .copied()
        .collect();
    if missing.is_empty() {
        return None;
    }
    let entries: Vec<&PendingCollective> = waiting
        .iter()
        .filter_map(|(_, g)| g.pending.iter().find(|p| p.seq == seq))
        .collect();
    Some(Stalled {
        group: key.to_owned(),
        desc: members.iter().find_map(|(_, g)| g.desc.clone()),
        seq,
        op: entries
            .iter()
            .map(|p| p.op.clone())
            .find(|op| !op.is_empty()),
        missing_ranks: missing.iter().map(|(r, _)| *r).collect(),
        waiting_ranks: waiting.iter().map(|(r, _)| *r).collect(),
        since: entries
            .iter()
            .filter_map(|p| p.enqueued_at_us)
            .min()
            .map(crate::time::unix_seconds),
        called_at: entries
            .iter()
            .find_map(|p| users_frame(&p.top_frames))
            .map(|f| format!("{}:{}", short_file(&f.file), f.line)),
        missing_completed: missing
            .iter()
            .map(|(r, g)| (*r, g.last_completed))
            .collect(),
    })
}

/// The innermost frame outside torch's own package: the trainer's line that called the
/// collective (`dist.all_reduce` is torch's `distributed_c10d.py`), else the innermost.
fn users_frame(frames: &[CollectiveFrame]) -> Option<&CollectiveFrame> {
    let torchs = |f: &&CollectiveFrame| {
        let file = f.file.replace('\\', "/");
        [
            "site-packages/torch/",
            "dist-packages/torch/",
            "/torch/distributed/",
        ]
        .iter()
        .any(|part| file.contains(part))
    };
    frames
        .iter()
        .find(|f| !torchs(f))
        .or_else(|| frames.first())
}

/// A file's last part: `train.py` of `/home/u/train.py`.
fn short_file(file: &str) -> &str {
    file.rsplit('/').next().unwrap_or(file)
}

/// A value of an entry, said as compared.
type Said = fn(&PendingCollective) -> String;

/// The states of a flight recorder's entry not completed. Gloo leaves its entries `scheduled`
/// (completed ones too, which are not pending), so its ranks never differ in them; an NCCL
/// entry is `started` once its kernel runs: a rank whose entry is still `scheduled` where the
/// others' started has its stream held by something before it.
const IN_FLIGHT: [&str; 2] = ["scheduled", "started"];

/// The collectives of one group entered by two ranks or more whose op, sizes, dtypes or state
/// differ: for each, the ranks outside the most ranks' value.
fn mismatches(key: &str, members: &[(u32, &CollectiveGroup)]) -> Vec<Mismatch> {
    let mut by_seq: BTreeMap<i64, Vec<(u32, &PendingCollective)>> = BTreeMap::new();
    for (rank, group) in members {
        for entry in &group.pending {
            by_seq.entry(entry.seq).or_default().push((*rank, entry));
        }
    }
    let mut found = Vec::new();
    for (seq, entered) in by_seq.into_iter().filter(|(_, e)| e.len() > 1) {
        let kinds: [(&'static str, Said); 4] = [
            ("op", |p| p.op.clone()),
            ("sizes", |p| format!("{:?}", p.input_sizes)),
            ("dtypes", |p| p.input_dtypes.join(",")),
            ("state", |p| p.state.clone()),
        ];
        for (kind, value) in kinds {
            // States are compared only as the flight recorder gives them of an entry in flight:
            // a watchdog line's `timed out` says how the rank learned of it, not where it is.
            let compared = entered
                .iter()
                .filter(|(_, p)| kind != "state" || IN_FLIGHT.contains(&p.state.as_str()));
            let values: Vec<(u32, String)> = compared.map(|(r, p)| (*r, value(p))).collect();
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for (_, v) in &values {
                *counts.entry(v.as_str()).or_default() += 1;
            }
            if counts.len() < 2 {
                continue;
            }
            let most = counts
                .iter()
                .max_by_key(|(_, n)| **n)
                .map(|(v, _)| (*v).to_owned())
                .unwrap_or_default();
            found.push(Mismatch {
                group: key.to_owned(),
                seq,
                kind,
                ranks: values
                    .iter()
                    .filter(|(_, v)| *v != most)
                    .map(|(r, _)| *r)
                    .collect(),
                detail: values
                    .iter()
                    .map(|(r, v)| format!("rank {r}: {v}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            });
        }
    }
    found
}

/// Why no collectives were read, where the ranks were asked and none had any: "no collectives
/// were read of ranks 0, 1, 2, 3: no `unilab.watch_collectives()` runs in it, and torch wrote
/// no dump"; `None` where some rank had them, or none was asked.
pub(crate) fn none_read(ranks: &BTreeMap<u32, ProcessCollectives>) -> Option<String> {
    if ranks.is_empty() || ranks.values().any(|c| !c.groups.is_empty()) {
        return None;
    }
    let mut why: Vec<&str> = ranks
        .values()
        .flat_map(|c| c.missing.iter().map(String::as_str))
        .collect();
    why.sort_unstable();
    why.dedup();
    let which: Vec<String> = ranks.keys().map(u32::to_string).collect();
    let said = match why.as_slice() {
        [] => format!("no collectives were read of ranks {}", which.join(", ")),
        _ => format!(
            "no collectives were read of ranks {}: {}",
            which.join(", "),
            why.join("; ")
        ),
    };
    Some(crate::text::foreign(&said).into_owned())
}

impl Mismatch {
    /// "`gloo:all_reduce` #8 of group 0 differs in its sizes between ranks (rank 0: [[1024]];
    /// rank 1: [[512]])".
    pub(crate) fn sentence(&self) -> String {
        let said = format!(
            "collective #{} of group {} differs in its {} between ranks ({})",
            self.seq, self.group, self.kind, self.detail
        );
        crate::text::foreign(&said).into_owned()
    }
}

impl Stalled {
    /// "rank 2 never entered `gloo:all_reduce` #8 of group 0 (default_pg) (its last completed
    /// is #7); ranks 0, 1, 3 wait in it since 12:00:03 (train.py:41)".
    pub(crate) fn sentence(&self) -> String {
        let op = self.op.as_deref().unwrap_or("collective");
        let group = match &self.desc {
            Some(desc) if *desc != self.group => format!("group {} ({desc})", self.group),
            _ => format!("group {}", self.group),
        };
        let missing: Vec<String> = self
            .missing_completed
            .iter()
            .map(|(r, done)| match done {
                Some(done) => format!("rank {r} (its last completed is #{done})"),
                None => format!("rank {r}"),
            })
            .collect();
        let mut said = format!(
            "{} never entered `{op}` #{} of {group}",
            missing.join(", "),
            self.seq
        );
        if !self.waiting_ranks.is_empty() {
            let waiting: Vec<String> = self.waiting_ranks.iter().map(u32::to_string).collect();
            let who = if waiting.len() == 1 { "rank" } else { "ranks" };
            said += &format!("; {who} {} wait in it", waiting.join(", "));
            if let Some(since) = self.since {
                let us = (since * 1e6).round() as i64;
                said += &format!(" since {}", crate::text::human_time(us));
            }
            if let Some(at) = &self.called_at {
                said += &format!(" ({at})");
            }
        }
        crate::text::foreign(&said).into_owned()
    }
}

#[cfg(test)]
mod tests;
