//! The suspect judged from made-up rows: each signal alone, their order, and what names no
//! one.

use super::*;
use crate::read::job::JobView;
use crate::read::job::tests::row;

/// Rank `rank` of a job on `n1` still running, sampled every 0.5 s, its last sample at
/// `sampled` and its progress last at `progress`, without a capture.
fn running(rank: u32, progress: f64, sampled: f64) -> RankRow {
    let mut r = row(rank, "n1", "x", progress);
    r.status = "running".into();
    r.failure_kind = None;
    r.ended_at = None;
    r.ended = None;
    r.tripped_at = None;
    r.reason = None;
    r.signature = None;
    r.top_frames.clear();
    r.pace.last_sample_at = Some(sampled);
    r.pace.progress_interval_seconds = Some(0.5);
    r
}

/// Rank `rank` that failed at 200 with its progress last at `progress`, beating `phase` at
/// `step`, without a capture.
fn beaten(rank: u32, progress: f64, (step, phase): (u64, &str)) -> RankRow {
    let mut r = row(rank, "n1", "x", progress);
    r.signature = None;
    r.top_frames.clear();
    r.last_step = Some(step);
    r.last_phase = Some(phase.into());
    r.median_step_seconds = Some(0.05);
    r
}

/// Four healthy ranks of a running job, each sampled a moment ago with progress a moment
/// before: nothing stands out. (The smallest last progress named a rank "whose progress
/// stopped first" while every rank ran healthily.)
#[test]
fn a_healthy_running_job_names_no_one() {
    let rows = vec![
        running(0, 1000.2, 1000.5),
        running(1, 1000.1, 1000.4),
        running(2, 999.8, 1000.3),
        running(3, 1000.4, 1000.6),
    ];
    let view = JobView::of("J", rows, None);
    assert_eq!(view.first_stalled, None);
    assert_eq!(view.suspect, None);
    assert_eq!(view.verdict, None, "{:?}", view.verdict_lines);
    // The same with steps and phases apart, as ranks sampled at different moments are.
    let mut rows = view.ranks;
    for (r, (step, phase)) in
        rows.iter_mut()
            .zip([(40, "train"), (38, "train"), (41, "data"), (40, "train")])
    {
        r.last_step = Some(step);
        r.last_phase = Some(phase.into());
    }
    let view = JobView::of("J", rows, None);
    assert_eq!(view.suspect, None, "{:?}", view.verdict_lines);
}

/// Ranks of a ring finish their last collective within milliseconds of each other and all
/// fail long after: no rank's progress stopped first by more than the margin, and the hung
/// rank is named by its stack.
#[test]
fn ranks_that_stopped_together_are_told_apart_by_their_stacks() {
    let mut rows: Vec<RankRow> = (0..4)
        .map(|rank| row(rank, "n1", "all_reduce", 120.0 + 0.003 * f64::from(rank)))
        .collect();
    rows[1].last_progress_at = Some(119.999);
    rows[2].signature = Some("load_batch".into());
    rows[2].top_frames[0].function = "load_batch".into();
    let view = JobView::of("J", rows, None);
    assert_eq!(view.first_stalled, None);
    let suspect = view.suspect.as_ref().unwrap();
    assert_eq!((suspect.rank, suspect.why), (Some(2), Why::OddStack));
    assert_eq!(
        view.verdict_lines[..2],
        [
            "rank 2 on n1 is the suspect: its stack is the odd one out: `load_batch`",
            "the other 3 ranks are in `all_reduce`",
        ]
    );
    assert!(
        view.verdict_lines[2].starts_with("rank 0 on n1 tripped first"),
        "{:?}",
        view.verdict_lines
    );
}

/// With heartbeats and no stacks: the hung rank's last beat is in `data`, the others' in
/// `train`, all at one step — it is the suspect by its phase. A rank whose progress stopped
/// seconds before every other's disagrees, and is said to.
#[test]
fn a_rank_in_another_phase_is_the_suspect_and_an_earlier_stall_disagrees() {
    let rows = vec![
        beaten(0, 120.0, (3, "train")),
        beaten(1, 120.01, (3, "train")),
        beaten(2, 120.0, (3, "data")),
        beaten(3, 120.02, (3, "train")),
    ];
    let view = JobView::of("J", rows.clone(), None);
    let suspect = view.suspect.as_ref().unwrap();
    assert_eq!((suspect.rank, suspect.why), (Some(2), Why::OtherPhase));
    assert_eq!(
        suspect.detail,
        "its last beat is in phase `data`, every other rank's in `train`"
    );
    assert!(suspect.disagreements.is_empty());
    assert_eq!(view.first_stalled, None);

    let mut earlier = rows;
    earlier[1].last_progress_at = Some(110.0);
    let view = JobView::of("J", earlier, None);
    let suspect = view.suspect.as_ref().unwrap();
    assert_eq!(suspect.rank, Some(2));
    assert_eq!(
        suspect.disagreements,
        [Disagreement {
            why: Why::FirstStalled,
            rank: Some(1),
            host: "n1".into(),
            detail: "its progress stopped first, 10s before any other rank's".into(),
        }]
    );
    assert!(
        view.verdict_lines
            .contains(&"rank 1 on n1's progress stopped first, 10s before any other rank's".into()),
        "{:?}",
        view.verdict_lines
    );
    let json = serde_json::to_value(&view).unwrap();
    assert_eq!(json["suspect"]["why"], "other_phase");
    assert_eq!(json["suspect"]["disagreements"][0]["why"], "first_stalled");
    assert_eq!(json["suspect"]["disagreements"][0]["rank"], 1);
    assert_eq!(json["ranks"][2]["last_phase"], "data");
}

/// The odd stack comes before another phase: a rank whose stack is odd is the suspect, and
/// the rank in another phase disagrees, in the verdict too.
#[test]
fn an_odd_stack_comes_before_another_phase() {
    let mut rows: Vec<RankRow> = (0..4)
        .map(|rank| {
            let mut r = beaten(rank, 120.0, (3, "train"));
            r.signature = Some("all_reduce".into());
            r.top_frames = row(rank, "n1", "all_reduce", 0.0).top_frames;
            r
        })
        .collect();
    rows[2].signature = Some("load_batch".into());
    rows[2].top_frames[0].function = "load_batch".into();
    rows[3].last_phase = Some("eval".into());
    let view = JobView::of("J", rows, None);
    let suspect = view.suspect.as_ref().unwrap();
    assert_eq!((suspect.rank, suspect.why), (Some(2), Why::OddStack));
    assert_eq!(suspect.disagreements.len(), 1);
    assert_eq!(
        (suspect.disagreements[0].why, suspect.disagreements[0].rank),
        (Why::OtherPhase, Some(3))
    );
    assert!(
        view.verdict_lines.contains(
            &"yet of rank 3 on n1, its last beat is in phase `eval`, every other rank's in `train`"
                .into()
        ),
        "{:?}",
        view.verdict_lines
    );
}

/// A running job: rank 1 stopped beating at step 20 while rank 0 goes on at step 3000. Rank 1
/// is behind and stalled first; the suspect is named by the step, the stall agrees.
#[test]
fn a_rank_behind_every_others_step_is_the_suspect_once_it_stalled() {
    let mut going = running(0, 1000.0, 1000.1);
    going.last_step = Some(3000);
    let mut hung = running(1, 990.0, 1000.2);
    hung.last_step = Some(20);
    let view = JobView::of("J", vec![going.clone(), hung.clone()], None);
    let suspect = view.suspect.as_ref().unwrap();
    assert_eq!((suspect.rank, suspect.why), (Some(1), Why::BehindStep));
    assert_eq!(
        suspect.detail,
        "it stopped at step 20, every other rank reached step 3000"
    );
    assert!(suspect.disagreements.is_empty());
    assert_eq!(view.first_stalled.as_ref().map(|f| f.rank), Some(Some(1)));
    // Behind, but still moving (sampled the moment after its progress): not yet.
    hung.pace.last_sample_at = Some(990.2);
    let view = JobView::of("J", vec![going, hung], None);
    assert_eq!(view.suspect, None, "{:?}", view.verdict_lines);
}

/// The margin is three median steps when they are longer than two sample intervals: a rank of
/// 10 s steps is not stalled 20 s after its last, nor first by 20 s; at 31 s it is.
#[test]
fn the_margin_follows_a_ranks_own_steps() {
    let mut slow = running(0, 1000.0, 1020.0);
    slow.median_step_seconds = Some(10.0);
    let other = running(1, 1020.0, 1020.1);
    assert_eq!(margin(&slow), 30.0);
    assert_eq!(margin(&other), 1.5, "three median progress intervals");
    let view = JobView::of("J", vec![slow.clone(), other.clone()], None);
    assert_eq!(view.first_stalled, None);
    slow.pace.last_sample_at = Some(1031.0);
    let mut later = other;
    later.last_progress_at = Some(1031.0);
    let view = JobView::of("J", vec![slow, later], None);
    assert_eq!(view.first_stalled.as_ref().map(|f| f.rank), Some(Some(0)));
    assert_eq!(
        view.suspect.as_ref().map(|s| s.why),
        Some(Why::FirstStalled)
    );
    assert_eq!(
        view.verdict_lines[0],
        "rank 0 on n1 is the suspect: its progress stopped first, 31s before any other rank's"
    );
}

/// What names no one: two ranks in two phases (each is the other's odd one), two odd stacks,
/// a rank without beats among beating ones (it shares no step), one rank alone.
#[test]
fn signals_that_name_no_one_alone_make_no_suspect() {
    let two = vec![
        beaten(0, 120.0, (3, "data")),
        beaten(1, 120.0, (3, "train")),
    ];
    assert_eq!(JobView::of("J", two, None).suspect, None);
    let mut stacks: Vec<RankRow> = (0..4).map(|r| row(r, "n1", "a", 120.0)).collect();
    for (r, name) in [(1, "b"), (2, "c")] {
        stacks[r].signature = Some(name.into());
        stacks[r].top_frames[0].function = name.into();
    }
    let view = JobView::of("J", stacks, None);
    assert_eq!(view.odd_ranks, [1, 2]);
    assert_eq!(view.suspect, None);
    let mut unbeaten = vec![
        beaten(0, 120.0, (5, "train")),
        beaten(1, 120.0, (3, "train")),
        beaten(2, 120.0, (5, "train")),
    ];
    unbeaten[0].last_step = None;
    unbeaten[0].last_phase = None;
    assert_eq!(JobView::of("J", unbeaten.clone(), None).suspect, None);
    unbeaten[0].last_step = Some(5);
    let behind = JobView::of("J", unbeaten, None).suspect.unwrap();
    assert_eq!((behind.rank, behind.why), (Some(1), Why::BehindStep));
    let alone = JobView::of("J", vec![beaten(0, 100.0, (3, "train"))], None);
    assert_eq!((alone.first_stalled, alone.suspect), (None, None));
}
