//! The fallback when no dump can be had: the NCCL watchdog's own lines in a rank's output
//! tail, read into the same shape as a dump. Torch's `ProcessGroupNCCL.cpp` writes them:
//!
//! ```text
//! [rank1]:[E1003 18:37:01.832 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=6463, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800017 milliseconds before timing out.
//! [rank1]:[E1003 18:37:01.833 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank 1] Exception (either an error or timeout) detected by watchdog at work: 6463, last enqueued NCCL work: 6463, last completed NCCL work: 6462.
//! [PG ID 2 PG GUID 3 Rank 3] Timeout at NCCL work: 31, last enqueued NCCL work: 58, last completed NCCL work: 30.
//! [PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump signal due to a collective timeout from rank 1 and we will try our best to dump the debug info. Last enqueued NCCL work: 5, last completed NCCL work: 4.
//! ```
//!
//! `WorkNCCL(…)` gives the op, its sequence number and element counts (no shapes, no
//! frames); the log prefix `[PG ID <id> PG GUID <name>(<desc>) Rank <r>]` (older: `[PG <id>
//! (<desc>) Rank <r>]`) the group; "last enqueued … last completed" the counters, the last
//! line of a group winning. A tail holding several ranks (one soak over `torchrun`) is read
//! rank by rank.

use std::collections::BTreeMap;

use super::{Group, Pending};

/// What the watchdog said of one rank.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RankGroups {
    /// The rank its lines name (`[Rank 1]`, `[rank1]:`), when they do.
    pub(crate) rank: Option<u32>,
    pub(crate) groups: Vec<Group>,
}

/// One `WorkNCCL(…)` seen, before it is put in its group.
struct Work {
    group: Option<Prefix>,
    pending: Pending,
}

/// A line's `[PG …]` prefix.
#[derive(Clone, PartialEq)]
struct Prefix {
    id: String,
    name: String,
    desc: Option<String>,
}

#[derive(Default)]
struct Rank {
    groups: BTreeMap<String, Group>,
    /// Per group, the works its lines name (`at work: N`, `Timeout at NCCL work: N`).
    at_work: Vec<(String, i64)>,
    works: Vec<Work>,
}

/// The watchdog lines of an output tail, by rank; empty when there are none.
pub(crate) fn from_tail(tail: &str) -> Vec<RankGroups> {
    let mut ranks: BTreeMap<Option<u32>, Rank> = BTreeMap::new();
    for line in tail.lines() {
        let has_work = line.contains("WorkNCCL(");
        let has_counters = line.to_ascii_lowercase().contains("last enqueued");
        if !has_work && !has_counters {
            continue;
        }
        let rank = ranks.entry(rank_of(line)).or_default();
        let prefix = pg_prefix(line);
        if has_work && let Some(pending) = work(line) {
            rank.works.push(Work {
                group: prefix.clone(),
                pending,
            });
        }
        if has_counters && let Some(p) = prefix {
            read_counters(rank, &p, line);
        }
    }
    ranks
        .into_iter()
        .map(|(rank, mut r)| {
            place_works(&mut r);
            RankGroups {
                rank,
                groups: r.groups.into_values().collect(),
            }
        })
        .collect()
}

fn group_of<'a>(r: &'a mut Rank, p: &Prefix) -> &'a mut Group {
    r.groups.entry(p.id.clone()).or_insert_with(|| Group {
        group: p.id.clone(),
        name: Some(p.name.clone()),
        desc: p.desc.clone(),
        ranks: Vec::new(),
        last_enqueued: None,
        last_started: None,
        last_completed: None,
        pending: Vec::new(),
    })
}

fn read_counters(r: &mut Rank, p: &Prefix, line: &str) {
    let lower = line.to_ascii_lowercase();
    let enqueued = number_after(
        &lower,
        &["last enqueued nccl work: ", "last enqueued work: "],
    );
    let started = number_after(&lower, &["last started nccl work: ", "last started work: "]);
    let completed = number_after(
        &lower,
        &["last completed nccl work: ", "last completed work: "],
    );
    if let Some(n) = number_after(&lower, &["at work: ", "timeout at nccl work: "]) {
        r.at_work.push((p.id.clone(), n));
    }
    let g = group_of(r, p);
    if enqueued.is_some() {
        g.last_enqueued = enqueued;
    }
    if started.is_some() {
        g.last_started = started;
    }
    if completed.is_some() {
        g.last_completed = completed;
    }
}

/// Each work into the group its own line names, else the group whose line names its
/// sequence number, else the only group; a work no group claims gets a group of its own
/// with no name.
fn place_works(r: &mut Rank) {
    for w in std::mem::take(&mut r.works) {
        let prefix = w.group.clone().or_else(|| {
            let id = r
                .at_work
                .iter()
                .find(|(_, n)| *n == w.pending.seq)
                .map(|(id, _)| id.clone())
                .or_else(|| (r.groups.len() == 1).then(|| r.groups.keys().next().cloned())?)?;
            let g = &r.groups[&id];
            Some(Prefix {
                id,
                name: g.name.clone().unwrap_or_default(),
                desc: g.desc.clone(),
            })
        });
        let g = match &prefix {
            Some(p) => group_of(r, p),
            None => {
                let g = group_of(
                    r,
                    &Prefix {
                        id: String::new(),
                        name: String::new(),
                        desc: None,
                    },
                );
                g.name = None;
                g
            }
        };
        if !g.pending.iter().any(|p| p.seq == w.pending.seq) {
            g.pending.push(w.pending);
        }
    }
    for g in r.groups.values_mut() {
        g.pending.sort_by_key(|p| p.seq);
    }
}

/// `WorkNCCL(SeqNum=…, OpType=…, NumelIn=…, NumelOut=…, …)` as a pending collective.
fn work(line: &str) -> Option<Pending> {
    let start = line.find("WorkNCCL(")? + "WorkNCCL(".len();
    let inner = &line[start..];
    let inner = &inner[..inner.find(')').map_or(inner.len(), |i| {
        // `Timeout(ms)=…` holds a parenthesis of its own.
        inner[i + 1..]
            .starts_with('=')
            .then(|| inner[i + 1..].find(')').map(|j| i + 1 + j))
            .flatten()
            .unwrap_or(i)
    })];
    let field = |name: &str| {
        inner.split(", ").find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k.trim() == name).then(|| v.trim().to_owned())
        })
    };
    let seq = field("SeqNum")?.parse().ok()?;
    let op = field("OpType").map_or_else(|| "nccl:unknown".to_owned(), |t| op_name(&t));
    let lower = line.to_ascii_lowercase();
    let state = if lower.contains("timeout") && !lower.contains("exception") {
        "timed out"
    } else {
        "failed"
    };
    Some(Pending {
        seq,
        op,
        input_sizes: Vec::new(),
        input_dtypes: Vec::new(),
        output_sizes: Vec::new(),
        state: state.to_owned(),
        top_frames: Vec::new(),
        enqueued_at_us: None,
        numel_in: field("NumelIn").and_then(|v| v.parse().ok()),
        numel_out: field("NumelOut").and_then(|v| v.parse().ok()),
    })
}

/// torch's `opTypeToString` (`ALLREDUCE`, `_ALLGATHER_BASE`) as FR's profiling name
/// (`nccl:all_reduce`, `nccl:_allgather_base`), so the two sources compare.
fn op_name(op_type: &str) -> String {
    let lower = op_type.trim().to_ascii_lowercase();
    let named = match lower.as_str() {
        "allreduce" => "all_reduce",
        "allgather" => "all_gather",
        "alltoall" => "all_to_all",
        "alltoall_base" => "all_to_all_base",
        "allgather_coalesced" => "all_gather_coalesced",
        "_allreduce_sparse" => "_allreduce_sparse",
        other => other,
    };
    format!("nccl:{named}")
}

fn number_after(lower: &str, keys: &[&str]) -> Option<i64> {
    keys.iter().find_map(|k| {
        let rest = &lower[lower.find(k)? + k.len()..];
        let end = rest
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
            .map_or(rest.len(), |(i, _)| i);
        rest[..end].parse().ok()
    })
}

/// `[PG ID 2 PG GUID 3(desc) Rank 3]`, `[PG 0 (default_pg) Rank 1]`, `[PG 0 Rank 2]`.
fn pg_prefix(line: &str) -> Option<Prefix> {
    let start = line.find("[PG ")? + "[PG ".len();
    let rest = &line[start..];
    let body = &rest[..rest.find(" Rank ")?];
    let (head, desc) = match body.find('(') {
        Some(i) => (
            body[..i].trim(),
            Some(body[i + 1..].trim_end_matches(')').to_owned()),
        ),
        None => (body.trim(), None),
    };
    if let Some(ids) = head.strip_prefix("ID ") {
        let (id, guid) = match ids.split_once(" PG GUID ") {
            Some((id, guid)) => (id.trim(), guid.trim()),
            None => (ids.trim(), ids.trim()),
        };
        return Some(Prefix {
            id: id.to_owned(),
            name: guid.to_owned(),
            desc,
        });
    }
    Some(Prefix {
        id: head.to_owned(),
        name: head.to_owned(),
        desc,
    })
}

/// The rank a line names: its prefix's `Rank N]`, else torchrun's `[rankN]:`.
fn rank_of(line: &str) -> Option<u32> {
    let digits = |s: &str| -> Option<u32> {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        s[..end].parse().ok()
    };
    line.find(" Rank ")
        .and_then(|i| digits(&line[i + " Rank ".len()..]))
        .or_else(|| {
            line.find("[Rank ")
                .and_then(|i| digits(&line[i + "[Rank ".len()..]))
        })
        .or_else(|| {
            line.find("[rank")
                .and_then(|i| digits(&line[i + "[rank".len()..]))
        })
}

#[cfg(test)]
mod tests;
