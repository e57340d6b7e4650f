//! Lines as torch's `ProcessGroupNCCL.cpp` formats them (`operator<<(WorkNCCL)`, the
//! watchdog's `logPrefix()` and its "last enqueued … last completed" messages), with the
//! glog and torchrun prefixes a real tail carries.

use super::*;

const TIMEOUT_2_5: &str = "\
[rank1]:[E1003 18:37:01.832146912 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=6463, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800017 milliseconds before timing out.
[rank1]:[E1003 18:37:01.833575187 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank 1] Exception (either an error or timeout) detected by watchdog at work: 6463, last enqueued NCCL work: 6463, last completed NCCL work: 6462.
[rank1]:[E1003 18:37:01.833621509 ProcessGroupNCCL.cpp:1709] [PG 0 (default_pg) Rank 1] Timeout at NCCL work: 6463, last enqueued NCCL work: 6463, last completed NCCL work: 6462.
[rank1]:[E1003 18:37:01.833637681 ProcessGroupNCCL.cpp:621] [Rank 1] Some NCCL operations have failed or timed out.
";

#[test]
fn a_watchdog_timeout_gives_the_group_its_counters_and_the_collective() {
    let read = from_tail(TIMEOUT_2_5);
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].rank, Some(1));
    let g = &read[0].groups;
    assert_eq!(g.len(), 1, "{g:#?}");
    let g = &g[0];
    assert_eq!(g.group, "0");
    assert_eq!(g.desc.as_deref(), Some("default_pg"));
    assert_eq!(
        (g.last_enqueued, g.last_started, g.last_completed),
        (Some(6463), None, Some(6462))
    );
    assert_eq!(g.pending.len(), 1);
    let p = &g.pending[0];
    assert_eq!((p.seq, p.op.as_str()), (6463, "nccl:all_reduce"));
    assert_eq!((p.numel_in, p.numel_out), (Some(1), Some(1)));
    assert_eq!(p.state, "timed out");
    assert!(p.input_sizes.is_empty(), "a watchdog line gives no shapes");
}

#[test]
fn the_newer_prefix_with_a_guid_and_several_ranks_in_one_tail_are_read_apart() {
    let tail = "\
[rank3]:[E219 08:58:32.606233339 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=31, OpType=_ALLGATHER_BASE, NumelIn=117440512, NumelOut=469762048, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.
[rank3]:[E219 08:58:32.606667496 ProcessGroupNCCL.cpp:1785] [PG ID 2 PG GUID 3 Rank 3] Exception (either an error or timeout) detected by watchdog at work: 31, last enqueued NCCL work: 58, last completed NCCL work: 30.
[rank0]:[E219 08:58:33.000000000 ProcessGroupNCCL.cpp:1420] [PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump signal due to a collective timeout from rank 3 and we will try our best to dump the debug info. Last enqueued NCCL work: 5, last completed NCCL work: 4.This is most likely caused by incorrect usages of collectives.
";
    let read = from_tail(tail);
    assert_eq!(
        read.iter().map(|r| r.rank).collect::<Vec<_>>(),
        vec![Some(0), Some(3)]
    );
    let r0 = &read[0].groups[0];
    assert_eq!((r0.group.as_str(), r0.name.as_deref()), ("0", Some("0")));
    assert_eq!(r0.desc.as_deref(), Some("default_pg"));
    assert_eq!((r0.last_enqueued, r0.last_completed), (Some(5), Some(4)));
    assert!(r0.pending.is_empty());
    let r3 = &read[1].groups[0];
    assert_eq!((r3.group.as_str(), r3.name.as_deref()), ("2", Some("3")));
    assert_eq!((r3.last_enqueued, r3.last_completed), (Some(58), Some(30)));
    assert_eq!(r3.pending[0].op, "nccl:_allgather_base");
    assert_eq!(r3.pending[0].seq, 31);
}

#[test]
fn an_async_error_without_a_group_line_stays_in_a_group_of_its_own() {
    let tail = "[rank0]:[E ProcessGroupNCCL.cpp:542] [Rank 0] Collective WorkNCCL(SeqNum=89, OpType=ALLREDUCE, NumelIn=67108864, Timeout(ms)=90000) raised the following async exception: NCCL error: remote process exited or there was a network error\n";
    let read = from_tail(tail);
    let g = &read[0].groups[0];
    assert_eq!((g.group.as_str(), g.name.as_deref()), ("", None));
    assert_eq!(g.pending[0].state, "failed");
    assert_eq!(
        (g.pending[0].numel_in, g.pending[0].numel_out),
        (Some(67108864), None)
    );
}

#[test]
fn a_counters_line_with_last_started_and_a_never_enqueued_rank_are_read() {
    let tail = "\
[PG ID 1 PG GUID 1(tp) Rank 2] Timeout at NCCL work: 18, last enqueued work: 39, last started work: 19, last completed work: 17.
[PG ID 0 PG GUID 0(default_pg) Rank 5] Received a dump signal due to a collective timeout from rank 2 and we will try our best to dump the debug info. Last enqueued NCCL work: -1, last completed NCCL work: -1.
";
    let read = from_tail(tail);
    let g2 = &read[0].groups[0];
    assert_eq!(
        (g2.last_enqueued, g2.last_started, g2.last_completed),
        (Some(39), Some(19), Some(17))
    );
    let g5 = &read[1].groups[0];
    assert_eq!((g5.last_enqueued, g5.last_completed), (Some(-1), Some(-1)));
}

#[test]
fn a_tail_without_watchdog_lines_reads_nothing() {
    assert!(from_tail("step 1 loss 0.3\nTraceback (most recent call last):\n").is_empty());
    assert!(
        from_tail("WorkNCCL(garbage\n[PG \n")
            .iter()
            .all(|r| r.groups.is_empty())
    );
}

proptest::proptest! {
    /// No tail makes the reader panic.
    #[test]
    fn any_tail_never_panics(tail in "(\\[PG |ID |PG GUID |Rank |WorkNCCL\\(|SeqNum=|, |\\)|=|last enqueued NCCL work: |last completed work: |at work: |-?[0-9]{1,20}|[a-z(]{0,3}|\n){0,40}") {
        let _ = from_tail(&tail);
    }
}
