use super::*;
use crate::event::soak::CollectiveFrame;

fn entry(seq: i64, op: &str, size: i64) -> PendingCollective {
    PendingCollective {
        seq,
        op: op.into(),
        input_sizes: vec![vec![size]],
        input_dtypes: vec!["Float".into()],
        output_sizes: vec![vec![size]],
        state: "started".into(),
        top_frames: vec![CollectiveFrame {
            name: "train_step".into(),
            file: "/home/u/train.py".into(),
            line: 41,
        }],
        enqueued_at_us: Some(1_800_000_000_000_000 + seq),
        numel_in: None,
        numel_out: None,
    }
}

fn rank(enqueued: i64, completed: i64, pending: Vec<PendingCollective>) -> ProcessCollectives {
    ProcessCollectives {
        sources: vec!["fifo".into()],
        missing: Vec::new(),
        groups: vec![CollectiveGroup {
            group: "0".into(),
            name: Some("0".into()),
            desc: Some("default_pg".into()),
            ranks: vec![0, 1, 2, 3],
            last_enqueued: Some(enqueued),
            last_started: Some(enqueued),
            last_completed: Some(completed),
            pending,
        }],
    }
}

#[test]
fn the_rank_that_never_entered_the_collective_the_others_wait_in_is_named() {
    let ranks: BTreeMap<u32, ProcessCollectives> = [
        (0, rank(8, 7, vec![entry(8, "gloo:all_reduce", 1024)])),
        (1, rank(8, 7, vec![entry(8, "gloo:all_reduce", 1024)])),
        (2, rank(7, 7, Vec::new())),
        (3, rank(8, 7, vec![entry(8, "gloo:all_reduce", 1024)])),
    ]
    .into();
    let matched = matched(&ranks);
    let stalled = matched.stalled.expect("a collective");
    assert_eq!(
        (
            stalled.seq,
            stalled.missing_ranks.clone(),
            stalled.waiting_ranks.clone()
        ),
        (8, vec![2], vec![0, 1, 3])
    );
    assert_eq!(stalled.op.as_deref(), Some("gloo:all_reduce"));
    assert_eq!(stalled.called_at.as_deref(), Some("train.py:41"));
    let said = stalled.sentence();
    assert!(
        said.starts_with(
            "rank 2 (its last completed is #7) never entered `gloo:all_reduce` #8 of group 0 (default_pg); ranks 0, 1, 3 wait in it since "
        ),
        "{said}"
    );
    assert!(matched.mismatches.is_empty());
}

#[test]
fn ranks_that_all_wait_in_one_collective_name_no_one() {
    let ranks: BTreeMap<u32, ProcessCollectives> = (0..4)
        .map(|r| (r, rank(8, 7, vec![entry(8, "nccl:all_reduce", 4)])))
        .collect();
    assert_eq!(matched(&ranks), Matched::default());
}

#[test]
fn a_collective_of_other_sizes_or_op_on_one_rank_is_a_mismatch() {
    let ranks: BTreeMap<u32, ProcessCollectives> = [
        (0, rank(8, 7, vec![entry(8, "gloo:all_reduce", 1024)])),
        (1, rank(8, 7, vec![entry(8, "gloo:all_reduce", 512)])),
        (2, rank(8, 7, vec![entry(8, "gloo:all_gather", 1024)])),
    ]
    .into();
    let matched = matched(&ranks);
    let kinds: Vec<(&str, Vec<u32>)> = matched
        .mismatches
        .iter()
        .map(|m| (m.kind, m.ranks.clone()))
        .collect();
    assert_eq!(kinds, vec![("op", vec![2]), ("sizes", vec![1])]);
    assert_eq!(
        matched.mismatches[1].sentence(),
        "collective #8 of group 0 differs in its sizes between ranks (rank 0: [[1024]]; rank 1: [[512]]; rank 2: [[1024]])"
    );
}

#[test]
fn a_rank_without_counters_is_neither_missing_nor_waiting() {
    let mut unknown = rank(0, 0, Vec::new());
    unknown.groups[0].last_enqueued = None;
    unknown.groups[0].last_completed = None;
    let ranks: BTreeMap<u32, ProcessCollectives> = [
        (0, rank(3, 2, vec![entry(3, "gloo:broadcast", 8)])),
        (1, unknown),
        (2, rank(2, 2, Vec::new())),
    ]
    .into();
    let stalled = matched(&ranks).stalled.unwrap();
    assert_eq!(
        (stalled.missing_ranks, stalled.waiting_ranks),
        (vec![2], vec![0])
    );
}

/// The dumps torch 2.15 wrote for four Gloo ranks, rank 2 asleep before all-reduce 8: matched,
/// they name rank 2, the others waiting; and one rank's sizes changed is named as a mismatch.
/// Design's fourth kind: one rank's entry still `scheduled` where the others' `started` (its
/// stream held by something before it, on NCCL). A watchdog line's `timed out` is not a state
/// the others could differ from.
#[test]
fn a_collective_one_rank_has_not_started_is_a_state_mismatch() {
    let with_state = |state: &str| {
        let mut e = entry(8, "nccl:all_reduce", 1024);
        e.state = state.into();
        e
    };
    let ranks: BTreeMap<u32, ProcessCollectives> = [
        (0, rank(8, 7, vec![with_state("started")])),
        (1, rank(8, 7, vec![with_state("started")])),
        (2, rank(8, 7, vec![with_state("scheduled")])),
        (3, rank(8, 7, vec![with_state("timed out")])),
    ]
    .into();
    let mismatches = matched(&ranks).mismatches;
    let kinds: Vec<(&str, Vec<u32>)> = mismatches
        .iter()
        .map(|m| (m.kind, m.ranks.clone()))
        .collect();
    assert_eq!(kinds, vec![("state", vec![2])]);
    assert_eq!(
        mismatches[0].sentence(),
        "collective #8 of group 0 differs in its state between ranks (rank 0: started; rank 1: started; rank 2: scheduled)"
    );
}

#[test]
fn torch_2_15s_own_dumps_name_the_rank_that_never_entered() {
    let read = |rank: u32| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/fixtures/fr/torch-2.15/gloo-rank{rank}.json"));
        let dump = crate::collectives::read_dump(&std::fs::read(path).unwrap()).unwrap();
        ProcessCollectives {
            sources: vec!["fifo".into()],
            missing: Vec::new(),
            groups: dump.groups,
        }
    };
    let mut ranks: BTreeMap<u32, ProcessCollectives> = (0..4).map(|r| (r, read(r))).collect();
    let stalled = matched(&ranks).stalled.unwrap();
    assert_eq!(
        (
            stalled.seq,
            stalled.missing_ranks.clone(),
            stalled.waiting_ranks.clone()
        ),
        (8, vec![2], vec![0, 1, 3])
    );
    assert_eq!(stalled.op.as_deref(), Some("gloo:all_reduce"));
    // A rank whose all-reduce 8 is of other sizes.
    if let Some(r1) = ranks.get_mut(&1) {
        r1.groups[0].pending[0].input_sizes = vec![vec![512]];
    }
    let mismatches = matched(&ranks).mismatches;
    assert_eq!(mismatches.len(), 1, "{mismatches:?}");
    assert_eq!(
        (mismatches[0].kind, mismatches[0].ranks.clone()),
        ("sizes", vec![1])
    );
}

/// A rank whose dump is missing is neither missing from nor waiting in the collective: the
/// others still name the rank that never entered.
#[test]
fn a_ranks_missing_dump_leaves_it_unknown() {
    let ranks: BTreeMap<u32, ProcessCollectives> = [
        (0, rank(8, 7, vec![entry(8, "gloo:all_reduce", 1024)])),
        (2, rank(7, 7, Vec::new())),
        (
            3,
            ProcessCollectives {
                missing: vec!["no dump".into()],
                ..ProcessCollectives::default()
            },
        ),
    ]
    .into();
    let stalled = matched(&ranks).stalled.unwrap();
    assert_eq!(
        (stalled.missing_ranks, stalled.waiting_ranks),
        (vec![2], vec![0])
    );
}

/// A ring buffer that wrapped (torch 2.15 with `TORCH_FR_BUFFER_SIZE=3`: each rank keeps
/// collectives 6 to 8, or 5 to 7) still names rank 2: the counters are `pg_status`'s, not
/// the entries'.
#[test]
fn a_wrapped_ring_buffer_still_names_the_rank() {
    let ranks: BTreeMap<u32, ProcessCollectives> = (0..4)
        .map(|rank| {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
                "tests/fixtures/fr/torch-2.15/wrapped-rank{rank}.pickle"
            ));
            let dump = crate::collectives::read_dump(&std::fs::read(path).unwrap()).unwrap();
            let found = ProcessCollectives {
                sources: vec!["fifo".into()],
                missing: Vec::new(),
                groups: dump.groups,
            };
            (rank, found)
        })
        .collect();
    let stalled = matched(&ranks).stalled.unwrap();
    assert_eq!(
        (stalled.seq, stalled.missing_ranks, stalled.waiting_ranks),
        (8, vec![2], vec![0, 1, 3])
    );
    assert_eq!(stalled.called_at.as_deref(), Some("torch_hang.py:52"));
}

/// Ranks asked that had none say why, once for all; a rank that had some says nothing of it.
#[test]
fn ranks_asked_that_had_no_collectives_say_why() {
    let none = |why: &str| ProcessCollectives {
        missing: vec![why.to_owned()],
        ..ProcessCollectives::default()
    };
    let ranks: BTreeMap<u32, ProcessCollectives> = [
        (0, none("no `unilab.watch_collectives()` runs in it")),
        (1, none("no `unilab.watch_collectives()` runs in it")),
    ]
    .into();
    assert_eq!(
        none_read(&ranks).as_deref(),
        Some("no collectives were read of ranks 0, 1: no `unilab.watch_collectives()` runs in it")
    );
    let mut some = ranks.clone();
    some.insert(2, rank(8, 7, Vec::new()));
    assert_eq!(none_read(&some), None);
    assert_eq!(none_read(&BTreeMap::new()), None);
}
