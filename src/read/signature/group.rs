//! The ranks of a job grouped by where they stood, the odd ones out, and the verdict in one
//! sentence.
//!
//! Rules:
//! - A group is one place: one signature at the same function, file and line of each of its
//!   innermost [`SIGNATURE_FRAMES`] frames (ranks at two lines of one function stood at two
//!   places, and each group tells its own line); its ranks sorted, its top frames those of its
//!   lowest rank. Groups are ordered largest first, ties by lowest rank.
//! - The odd ranks are those outside the largest group: none when there is one group. When two
//!   or more groups tie for the largest, no group is the majority and no rank is odd: which of
//!   two equal halves is the odd one is not something stacks alone can tell (the rank that
//!   tripped first, or whose progress stopped first, can — the job view says those apart).
//! - A rank given twice keeps its first signature.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Frame, SIGNATURE_FRAMES, StackSignature, of_process};
use crate::event::soak::ProcessEvidence;

/// The ranks that stood at one signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SignatureGroup {
    pub signature: String,
    pub top_frames: Vec<Frame>,
    /// Sorted.
    pub ranks: Vec<u32>,
}

/// The ranks grouped by signature: `groups` and `odd_ranks` of `job show`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Grouping {
    /// Largest first, ties by lowest rank.
    pub groups: Vec<SignatureGroup>,
    /// The ranks outside the largest group, sorted; empty with one group, or where the largest
    /// is tied.
    pub odd_ranks: Vec<u32>,
}

impl Grouping {
    /// Whether one group is larger than every other.
    fn has_majority(&self) -> bool {
        match self.groups.as_slice() {
            [] => false,
            [_] => true,
            [first, second, ..] => first.ranks.len() > second.ranks.len(),
        }
    }
}

/// Where a rank stood, as ranks are grouped: its signature and the function, file and line of
/// each of its innermost frames that make it.
type Place<'a> = (&'a str, Vec<(&'a str, Option<&'a str>, Option<u32>)>);

fn place_of(stack: &StackSignature) -> Place<'_> {
    let frames = stack
        .top_frames
        .iter()
        .take(SIGNATURE_FRAMES)
        .map(|f| (f.function.as_str(), f.file.as_deref(), f.line))
        .collect();
    (stack.signature.as_str(), frames)
}

/// Groups `ranks` (each rank with its signature) by where they stood: signature, function, file
/// and line.
pub(crate) fn group(ranks: &[(u32, StackSignature)]) -> Grouping {
    let mut seen = std::collections::BTreeSet::new();
    let mut by_place: BTreeMap<Place<'_>, SignatureGroup> = BTreeMap::new();
    for (rank, stack) in ranks {
        if !seen.insert(*rank) {
            continue;
        }
        let group = by_place
            .entry(place_of(stack))
            .or_insert_with(|| SignatureGroup {
                signature: stack.signature.clone(),
                top_frames: stack.top_frames.clone(),
                ranks: Vec::new(),
            });
        // Its frames are its lowest rank's.
        if group.ranks.iter().all(|r| r > rank) {
            group.top_frames.clone_from(&stack.top_frames);
        }
        group.ranks.push(*rank);
    }
    let mut groups: Vec<SignatureGroup> = by_place.into_values().collect();
    for g in &mut groups {
        g.ranks.sort_unstable();
    }
    groups.sort_by(|a, b| {
        b.ranks
            .len()
            .cmp(&a.ranks.len())
            .then_with(|| a.ranks.first().cmp(&b.ranks.first()))
    });
    let mut grouping = Grouping {
        groups,
        odd_ranks: Vec::new(),
    };
    if grouping.has_majority() {
        let mut odd: Vec<u32> = grouping.groups[1..]
            .iter()
            .flat_map(|g| g.ranks.iter().copied())
            .collect();
        odd.sort_unstable();
        grouping.odd_ranks = odd;
    }
    grouping
}

/// How many groups besides the majority the verdict names before it counts the rest.
const NAMED_GROUPS: usize = 3;

/// The grouping in one sentence — "rank 5 on n2 is in `load_batch` (data.py:88); 7 ranks wait
/// in `all_reduce` (dist.py:41)" — each rank's host from `host_of` where known; `None` when
/// there are no ranks.
pub(crate) fn verdict(
    grouping: &Grouping,
    host_of: &dyn Fn(u32) -> Option<String>,
) -> Option<String> {
    let (first, rest) = grouping.groups.split_first()?;
    if rest.is_empty() {
        return Some(match first.ranks.as_slice() {
            [rank] => format!("{} is in {}", who(&[*rank], host_of), place(first)),
            ranks => format!("all {} ranks are in {}", ranks.len(), place(first)),
        });
    }
    let named = |groups: &[SignatureGroup]| {
        let mut parts: Vec<String> = groups
            .iter()
            .take(NAMED_GROUPS)
            .map(|g| {
                let verb = if g.ranks.len() == 1 { "is" } else { "are" };
                format!("{} {verb} in {}", who(&g.ranks, host_of), place(g))
            })
            .collect();
        let unnamed: usize = groups
            .iter()
            .skip(NAMED_GROUPS)
            .map(|g| g.ranks.len())
            .sum();
        if unnamed > 0 {
            parts.push(format!(
                "{unnamed} more {} elsewhere",
                if unnamed == 1 { "rank is" } else { "ranks are" }
            ));
        }
        parts.join("; ")
    };
    Some(if grouping.has_majority() {
        format!(
            "{}; {} ranks wait in {}",
            named(rest),
            first.ranks.len(),
            place(first)
        )
    } else {
        format!("no majority: {}", named(&grouping.groups))
    })
}

/// `rank 5 on n2`, `ranks 3 and 5`, `ranks 0-3 and 7 on n1` (a host where all share one).
fn who(ranks: &[u32], host_of: &dyn Fn(u32) -> Option<String>) -> String {
    let hosts: Vec<Option<String>> = ranks.iter().map(|r| host_of(*r)).collect();
    let host = match hosts.split_first() {
        Some((Some(first), others)) if others.iter().all(|h| h.as_ref() == Some(first)) => {
            format!(" on {first}")
        }
        _ => String::new(),
    };
    match ranks {
        [rank] => format!("rank {rank}{host}"),
        ranks => format!("ranks {}{host}", rank_list(ranks)),
    }
}

/// Sorted ranks as text, runs of three or more as `a-b`: `0, 1 and 3-7`.
pub(crate) fn rank_list(ranks: &[u32]) -> String {
    let mut runs: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j].saturating_add(1) {
            j += 1;
        }
        if j >= i + 2 {
            runs.push(format!("{}-{}", ranks[i], ranks[j]));
        } else {
            runs.extend(ranks[i..=j].iter().map(u32::to_string));
        }
        i = j + 1;
    }
    match runs.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => runs.concat(),
    }
}

/// What the ranks of `grouping` other than the one that stands out were doing (`grouping` is
/// of them alone): "the other 3 ranks are in `all_reduce` (dist.py:41)", or, where they stood
/// apart, "of the other ranks, " and [`verdict`]'s sentence; `None` when there are none.
pub(crate) fn others(
    grouping: &Grouping,
    host_of: &dyn Fn(u32) -> Option<String>,
) -> Option<String> {
    match grouping.groups.as_slice() {
        [] => None,
        [one] => Some(match one.ranks.len() {
            1 => format!("the other rank is in {}", place(one)),
            n => format!("the other {n} ranks are in {}", place(one)),
        }),
        _ => Some(format!(
            "of the other ranks, {}",
            verdict(grouping, host_of)?
        )),
    }
}

/// `` `load_batch` (data.py:88) ``: the group's innermost frame, its file by name alone.
pub(crate) fn place(group: &SignatureGroup) -> String {
    let Some(frame) = group.top_frames.first() else {
        return format!("`{}`", group.signature);
    };
    let file = frame
        .file
        .as_deref()
        .map(|f| f.rsplit('/').next().filter(|n| !n.is_empty()).unwrap_or(f));
    match (file, frame.line) {
        (Some(file), Some(line)) => format!("`{}` ({file}:{line})", frame.function),
        (Some(file), None) => format!("`{}` ({file})", frame.function),
        (None, _) => format!("`{}`", frame.function),
    }
}

/// The process that stands for each rank in one soak's evidence (a launcher's tree holds
/// several): of the processes `rank_of` gives a rank, the topmost of it — one whose parent is
/// not of the same rank (a rank's data-loader workers inherit its `RANK`) — the lowest pid
/// where several are. Sorted by rank.
pub(crate) fn representatives<'a>(
    processes: &'a [ProcessEvidence],
    rank_of: &dyn Fn(&ProcessEvidence) -> Option<u32>,
) -> Vec<(u32, &'a ProcessEvidence)> {
    let ranked: BTreeMap<u32, Option<u32>> =
        processes.iter().map(|p| (p.pid, rank_of(p))).collect();
    let mut chosen: BTreeMap<u32, &ProcessEvidence> = BTreeMap::new();
    for process in processes {
        let Some(rank) = ranked.get(&process.pid).copied().flatten() else {
            continue;
        };
        let parent_same_rank = ranked.get(&process.ppid).copied().flatten() == Some(rank);
        if parent_same_rank {
            continue;
        }
        chosen
            .entry(rank)
            .and_modify(|held| {
                if process.pid < held.pid {
                    *held = process;
                }
            })
            .or_insert(process);
    }
    chosen.into_iter().collect()
}

/// Each rank of one soak's evidence with its signature, as [`group`] takes them.
pub(crate) fn signatures_by_rank(
    processes: &[ProcessEvidence],
    rank_of: &dyn Fn(&ProcessEvidence) -> Option<u32>,
) -> Vec<(u32, StackSignature)> {
    representatives(processes, rank_of)
        .into_iter()
        .map(|(rank, p)| (rank, of_process(p)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(function: &str, file: &str, line: u32) -> StackSignature {
        StackSignature {
            signature: format!("{function} < train < <module>"),
            top_frames: vec![
                Frame {
                    function: function.into(),
                    file: Some(file.into()),
                    line: Some(line),
                },
                Frame {
                    function: "train".into(),
                    file: Some(file.into()),
                    line: Some(130),
                },
            ],
        }
    }

    fn no_host(_: u32) -> Option<String> {
        None
    }

    fn ranks(grouping: &Grouping) -> Vec<Vec<u32>> {
        grouping.groups.iter().map(|g| g.ranks.clone()).collect()
    }

    /// Rank 2 hangs in `load_batch` while the others wait in `all_reduce`: one group of three,
    /// rank 2 alone and named odd, and the verdict says so.
    #[test]
    fn the_rank_outside_the_largest_group_is_odd_and_named_in_the_verdict() {
        let input = vec![
            (3, at("all_reduce", "lib/dist.py", 41)),
            (0, at("all_reduce", "lib/dist.py", 41)),
            (2, at("load_batch", "/srv/job/data.py", 88)),
            (1, at("all_reduce", "lib/dist.py", 41)),
        ];
        let grouping = group(&input);
        assert_eq!(ranks(&grouping), vec![vec![0, 1, 3], vec![2]]);
        assert_eq!(grouping.odd_ranks, vec![2]);
        assert_eq!(
            grouping.groups[0].signature,
            "all_reduce < train < <module>"
        );
        assert_eq!(
            grouping.groups[0].top_frames[0].line,
            Some(41),
            "rank 0's frames"
        );
        assert_eq!(grouping.groups[1].top_frames[0].function, "load_batch");
        let hosts = |rank: u32| Some(if rank < 2 { "n1" } else { "n2" }.to_owned());
        assert_eq!(
            verdict(&grouping, &hosts).unwrap(),
            "rank 2 on n2 is in `load_batch` (data.py:88); 3 ranks wait in `all_reduce` (dist.py:41)"
        );
        assert_eq!(
            verdict(&grouping, &no_host).unwrap(),
            "rank 2 is in `load_batch` (data.py:88); 3 ranks wait in `all_reduce` (dist.py:41)"
        );
        let json = serde_json::to_value(&grouping).unwrap();
        assert_eq!(json["odd_ranks"], serde_json::json!([2]));
        assert_eq!(json["groups"][1]["ranks"], serde_json::json!([2]));
        assert_eq!(
            json["groups"][1]["top_frames"][0]["file"],
            "/srv/job/data.py"
        );
        assert_eq!(json["groups"][1]["top_frames"][0]["line"], 88);
    }

    /// A trainer whose loop is at module level: every rank's one Python frame is `<module>`,
    /// the hung rank at line 8 (its sleep), the others at line 10 (their receive). Grouped by
    /// function alone, "all 4 ranks are in `<module>` (ranktrain.py:10)" was said while the hung
    /// rank stood at line 8: they are two places, and the hung rank is the odd one.
    #[test]
    fn ranks_at_two_lines_of_one_function_stood_at_two_places() {
        let module = |line: u32| StackSignature {
            signature: "<module>".into(),
            top_frames: vec![Frame {
                function: "<module>".into(),
                file: Some("/srv/ranktrain.py".into()),
                line: Some(line),
            }],
        };
        let grouping = group(&[
            (0, module(10)),
            (1, module(10)),
            (2, module(8)),
            (3, module(10)),
        ]);
        assert_eq!(ranks(&grouping), vec![vec![0, 1, 3], vec![2]]);
        assert_eq!(grouping.odd_ranks, vec![2]);
        assert_eq!(
            verdict(&grouping, &no_host).unwrap(),
            "rank 2 is in `<module>` (ranktrain.py:8); 3 ranks wait in `<module>` (ranktrain.py:10)"
        );
        // The same line in another file is another place too; the frames past the signature's
        // are not compared.
        let mut elsewhere = module(10);
        elsewhere.top_frames[0].file = Some("/srv/other.py".into());
        let grouping = group(&[(0, module(10)), (1, elsewhere), (2, module(10))]);
        assert_eq!(ranks(&grouping), vec![vec![0, 2], vec![1]]);
        let deep = |outer_line: u32| {
            let mut stack = at("all_reduce", "d.py", 41);
            stack.top_frames.extend((0..3).map(|i| Frame {
                function: format!("outer{i}"),
                file: Some("t.py".into()),
                // The first is the signature's third frame: at one line in both.
                line: Some(if i == 0 { 7 } else { outer_line + i }),
            }));
            stack
        };
        assert_eq!(SIGNATURE_FRAMES, 3);
        assert_eq!(
            ranks(&group(&[(0, deep(1)), (1, deep(50))])),
            vec![vec![0, 1]]
        );
    }

    #[test]
    fn one_group_has_no_odd_ranks() {
        let grouping = group(&[
            (1, at("all_reduce", "d.py", 41)),
            (0, at("all_reduce", "d.py", 41)),
        ]);
        assert_eq!(ranks(&grouping), vec![vec![0, 1]]);
        assert!(grouping.odd_ranks.is_empty());
        assert_eq!(
            verdict(&grouping, &no_host).unwrap(),
            "all 2 ranks are in `all_reduce` (d.py:41)"
        );
        let alone = group(&[(4, at("step", "t.py", 3))]);
        assert_eq!(
            verdict(&alone, &no_host).unwrap(),
            "rank 4 is in `step` (t.py:3)"
        );
        assert_eq!(group(&[]), Grouping::default());
        assert_eq!(verdict(&Grouping::default(), &no_host), None);
    }

    /// Two ranks, one in each place: neither is the odd one by its stack, so none is named odd
    /// and the verdict says there is no majority.
    #[test]
    fn groups_tied_for_the_largest_name_no_rank_odd() {
        let grouping = group(&[
            (3, at("b", "y.py", 2)),
            (0, at("a", "x.py", 1)),
            (1, at("a", "x.py", 1)),
            (2, at("b", "y.py", 2)),
            (4, at("c", "z.py", 3)),
        ]);
        assert_eq!(
            ranks(&grouping),
            vec![vec![0, 1], vec![2, 3], vec![4]],
            "ties by lowest rank"
        );
        assert!(grouping.odd_ranks.is_empty());
        assert_eq!(
            verdict(&grouping, &no_host).unwrap(),
            "no majority: ranks 0 and 1 are in `a` (x.py:1); ranks 2 and 3 are in `b` (y.py:2); rank 4 is in `c` (z.py:3)"
        );
    }

    #[test]
    fn many_odd_groups_are_named_up_to_three_and_the_rest_counted() {
        let mut input: Vec<(u32, StackSignature)> =
            (0..10).map(|r| (r, at("all_reduce", "d.py", 41))).collect();
        for (rank, f) in [
            (10, "a"),
            (11, "b"),
            (12, "c"),
            (13, "d"),
            (14, "e"),
            (15, "e"),
        ] {
            input.push((rank, at(f, "w.py", 7)));
        }
        let grouping = group(&input);
        assert_eq!(grouping.odd_ranks, (10..16).collect::<Vec<_>>());
        assert_eq!(
            verdict(&grouping, &|_| Some("n1".into())).unwrap(),
            "ranks 14 and 15 on n1 are in `e` (w.py:7); rank 10 on n1 is in `a` (w.py:7); rank 11 on n1 is in `b` (w.py:7); 2 more ranks are elsewhere; 10 ranks wait in `all_reduce` (d.py:41)"
        );
    }

    #[test]
    fn a_rank_given_twice_keeps_its_first_signature() {
        let grouping = group(&[
            (0, at("a", "x.py", 1)),
            (1, at("a", "x.py", 1)),
            (1, at("b", "y.py", 2)),
        ]);
        assert_eq!(ranks(&grouping), vec![vec![0, 1]]);
    }

    #[test]
    fn ranks_are_listed_with_runs_shortened() {
        assert_eq!(rank_list(&[0, 1, 3, 4, 5, 6, 7]), "0, 1 and 3-7");
        assert_eq!(rank_list(&[2, 5]), "2 and 5");
        assert_eq!(rank_list(&[0, 1, 2]), "0-2");
        assert_eq!(
            rank_list(&[u32::MAX - 1, u32::MAX]),
            format!("{} and {}", u32::MAX - 1, u32::MAX)
        );
        assert_eq!(rank_list(&[]), "");
    }

    #[test]
    fn a_place_without_python_frames_is_the_kernels() {
        let kernel = StackSignature {
            signature: "wait_woken (recvfrom)".into(),
            top_frames: vec![Frame {
                function: "wait_woken".into(),
                file: None,
                line: None,
            }],
        };
        let sleeping = StackSignature {
            signature: "hrtimer_nanosleep (clock_nanosleep)".into(),
            top_frames: vec![Frame {
                function: "hrtimer_nanosleep".into(),
                file: None,
                line: None,
            }],
        };
        let unknown = StackSignature {
            signature: "unknown".into(),
            top_frames: Vec::new(),
        };
        let grouping = group(&[
            (0, kernel.clone()),
            (1, kernel.clone()),
            (2, sleeping),
            (3, kernel),
            (4, unknown),
        ]);
        assert_eq!(grouping.odd_ranks, vec![2, 4]);
        assert_eq!(
            verdict(&grouping, &no_host).unwrap(),
            "rank 2 is in `hrtimer_nanosleep`; rank 4 is in `unknown`; 3 ranks wait in `wait_woken`"
        );
    }

    /// A launcher's tree: the launcher (no rank), two workers (ranks 0 and 1), and a data-loader
    /// worker of rank 1 that inherited its `RANK`: rank 1 is the worker, not its child.
    #[test]
    fn the_topmost_process_of_a_rank_stands_for_it() {
        use super::super::tests::process;
        let mut launcher = process(100, None, Some("do_wait"), Some("wait4"));
        launcher.ppid = 1;
        let mut rank0 = process(200, None, Some("wait_woken"), Some("recvfrom"));
        rank0.ppid = 100;
        let mut rank1 = process(
            300,
            None,
            Some("hrtimer_nanosleep"),
            Some("clock_nanosleep"),
        );
        rank1.ppid = 100;
        let mut loader = process(301, None, Some("pipe_read"), Some("read"));
        loader.ppid = 300;
        let tree = vec![launcher, loader, rank1, rank0];
        let rank_of = |p: &ProcessEvidence| match p.pid {
            200 => Some(0),
            300 | 301 => Some(1),
            _ => None,
        };
        let chosen: Vec<(u32, u32)> = representatives(&tree, &rank_of)
            .iter()
            .map(|(r, p)| (*r, p.pid))
            .collect();
        assert_eq!(chosen, vec![(0, 200), (1, 300)]);
        let signatures = signatures_by_rank(&tree, &rank_of);
        assert_eq!(
            signatures[1].1.signature,
            "hrtimer_nanosleep (clock_nanosleep)"
        );
    }
}
