use std::path::PathBuf;

use super::value::{MAX_DEPTH, MAX_VALUES};
use super::*;

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fr")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn only_group(dump: &Dump) -> &Group {
    assert_eq!(dump.groups.len(), 1, "{dump:#?}");
    &dump.groups[0]
}

#[test]
fn a_gloo_json_dump_with_string_counters_and_an_empty_config_key_is_read() {
    let dump = read_dump(&fixture("gloo-rank0.json")).unwrap();
    assert_eq!(dump.version.as_deref(), Some("2.10"));
    let g = only_group(&dump);
    assert_eq!(g.group, "0");
    assert_eq!(g.name.as_deref(), Some("0"));
    assert_eq!(g.desc.as_deref(), Some("default_pg"));
    // Gloo keys its config `''`: the ranks are found by the group's description.
    assert_eq!(g.ranks, vec![0, 1, 2, 3]);
    assert_eq!(
        (g.last_enqueued, g.last_started, g.last_completed),
        (Some(8), Some(8), Some(7))
    );
    assert_eq!(g.pending.len(), 1);
    let p = &g.pending[0];
    assert_eq!(
        (p.seq, p.op.as_str(), p.state.as_str()),
        (8, "gloo:all_reduce", "scheduled")
    );
    assert_eq!(p.input_sizes, vec![vec![1024]]);
    assert_eq!(p.output_sizes, vec![vec![1024]]);
    assert_eq!(p.input_dtypes, vec!["Float".to_owned()]);
    assert!(p.top_frames.is_empty(), "torch's JSON dump has no frames");
}

#[test]
fn a_pickle_dump_with_integer_counters_and_shared_frames_reads_like_its_json() {
    let pickled = read_dump(&fixture("gloo-rank0.pickle")).unwrap();
    let json = read_dump(&fixture("gloo-rank0.json")).unwrap();
    let g = only_group(&pickled);
    assert_eq!(g.pending.len(), 1);
    let frames = &g.pending[0].top_frames;
    assert_eq!(frames.len(), 5);
    assert_eq!(frames[0].name, "all_reduce");
    assert_eq!(
        (frames[2].file.as_str(), frames[2].line),
        ("/job/train.py", 41)
    );
    let mut without_frames = pickled.clone();
    without_frames.groups[0].pending[0].top_frames.clear();
    assert_eq!(without_frames, json);
}

#[test]
fn the_rank_that_never_entered_the_collective_has_nothing_pending() {
    for name in ["gloo-rank2.json", "gloo-rank2.pickle"] {
        let dump = read_dump(&fixture(name)).unwrap();
        let g = only_group(&dump);
        assert_eq!(
            (g.last_enqueued, g.last_completed),
            (Some(7), Some(7)),
            "{name}"
        );
        assert!(g.pending.is_empty(), "{name}: {:?}", g.pending);
    }
    for rank in [1, 3] {
        let dump = read_dump(&fixture(&format!("gloo-rank{rank}.pickle"))).unwrap();
        assert_eq!(only_group(&dump).pending[0].seq, 8);
    }
}

#[test]
fn an_older_bare_list_of_entries_gives_counters_taken_from_the_entries() {
    let dump = read_dump(&fixture("bare-list.json")).unwrap();
    assert_eq!(dump.version, None);
    let g = only_group(&dump);
    assert_eq!((g.last_enqueued, g.last_completed), (Some(3), Some(2)));
    assert_eq!(g.pending.iter().map(|p| p.seq).collect::<Vec<_>>(), vec![3]);
    assert!(g.ranks.is_empty(), "a bare list has no config");
}

#[test]
fn integer_counters_in_json_and_a_config_keyed_by_name_are_read() {
    let text = r#"{"version":"2.4","pg_config":{"0":{"name":"0","desc":"default_pg","ranks":[0,1]},
        "1":{"name":"1","desc":"tp","ranks":"[1]"}},
        "pg_status":{"0":{"last_enqueued_collective":3,"last_started_collective":"3",
        "last_completed_collective":-1}},
        "entries":[{"pg_id":"0","process_group":"0","collective_seq_id":"3",
        "profiling_name":"nccl:all_reduce","state":"started"}]}"#;
    let dump = read_dump(text.as_bytes()).unwrap();
    let g = only_group(&dump);
    assert_eq!(
        (g.last_enqueued, g.last_started, g.last_completed),
        (Some(3), Some(3), Some(-1))
    );
    assert_eq!(g.ranks, vec![0, 1]);
    assert_eq!(g.pending.iter().map(|p| p.seq).collect::<Vec<_>>(), vec![3]);
}

#[test]
fn with_several_configs_and_no_name_the_ranks_stay_unknown() {
    let text = r#"{"pg_config":{"0":{"name":"0","desc":"a","ranks":"[0]"},"1":{"name":"1","desc":"b","ranks":"[1]"}},
        "pg_status":{"0":{"last_enqueued_collective":"1","last_started_collective":"1","last_completed_collective":"1"}}}"#;
    assert!(
        only_group(&read_dump(text.as_bytes()).unwrap())
            .ranks
            .is_empty()
    );
}

#[test]
fn a_json_dump_with_no_entries_key_has_no_pending() {
    let text = r#"{"version":"2.10","pg_config":{},"pg_status":{"0":{"last_enqueued_collective":"2",
        "last_started_collective":"2","last_completed_collective":"2"}}}"#;
    let g = read_dump(text.as_bytes()).unwrap().groups.remove(0);
    assert_eq!(g.last_completed, Some(2));
    assert!(g.pending.is_empty());
}

#[test]
fn what_is_no_flight_recorder_dump_is_said_so() {
    for text in [&b"{\"a\": 1}"[..], b"5", b"\"x\""] {
        assert!(
            matches!(read_dump(text), Err(DumpError::NotFlightRecorder(_))),
            "{text:?}"
        );
    }
    assert!(matches!(read_dump(b"{"), Err(DumpError::Json(_))));
}

#[test]
fn a_dump_over_64_mib_is_refused_unread() {
    let mut big = vec![b' '; MAX_DUMP_BYTES + 1];
    big[0] = b'[';
    assert_eq!(
        read_dump(&big),
        Err(DumpError::TooLarge {
            limit: MAX_DUMP_BYTES
        })
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.json");
    std::fs::write(&path, &big).unwrap();
    assert!(matches!(
        read_dump_file(&path),
        Err(DumpError::TooLarge { .. })
    ));
}

#[test]
fn json_nested_deeper_than_64_levels_is_refused() {
    let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 2), "]".repeat(MAX_DEPTH + 2));
    assert_eq!(
        read_dump(deep.as_bytes()),
        Err(DumpError::TooDeep { limit: MAX_DEPTH })
    );
    let fine = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
    assert!(read_dump(fine.as_bytes()).is_ok());
}

#[test]
fn a_pickled_list_that_contains_itself_is_refused_at_the_depth_bound() {
    // PROTO 2, EMPTY_LIST, BINPUT 0, BINGET 0, APPEND, STOP: l = []; l.append(l)
    let cyclic = b"\x80\x02]q\x00h\x00a.";
    assert_eq!(
        read_dump(cyclic),
        Err(DumpError::TooDeep { limit: MAX_DEPTH })
    );
}

#[test]
fn a_pickle_that_expands_exponentially_is_refused_at_the_value_bound() {
    // L0 = []; L(i) = [L(i-1), L(i-1)], 30 times: 2^30 values from 150 bytes.
    let mut p = b"\x80\x02]q\x00".to_vec();
    for i in 1u8..=30 {
        p.extend([b'(', b'h', i - 1, b'h', i - 1, b'l', b'q', i]);
    }
    p.push(b'.');
    assert_eq!(
        read_dump(&p),
        Err(DumpError::TooManyValues { limit: MAX_VALUES })
    );
}

#[test]
fn pickle_opcodes_beyond_plain_data_are_refused() {
    // GLOBAL os.system, then REDUCE: never built, refused at the first byte past PROTO.
    let global = b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85R.";
    let err = read_dump(global).unwrap_err();
    assert!(
        matches!(&err, DumpError::Pickle { at: 2, what } if what.contains("0x63")),
        "{err:?}"
    );
    let proto3 = b"\x80\x03}.";
    assert!(matches!(read_dump(proto3), Err(DumpError::Pickle { .. })));
}

#[test]
fn a_truncated_or_unbalanced_pickle_is_an_error() {
    let whole = fixture("gloo-rank0.pickle");
    for cut in [1, 2, 10, whole.len() / 2, whole.len() - 1] {
        assert!(read_dump(&whole[..cut]).is_err(), "cut at {cut}");
    }
    for bad in [
        &b"\x80\x02."[..],
        b"\x80\x02u.",
        b"\x80\x02h\x05.",
        b"\x80\x02K\x01a.",
    ] {
        assert!(
            matches!(read_dump(bad), Err(DumpError::Pickle { .. })),
            "{bad:?}"
        );
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // 2,000 cases each in the suite; `PROPTEST_CASES` runs them longer, as a fuzz target.
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000)
        ))]

        /// Arbitrary bytes never panic either reader.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = read_dump(&bytes);
            let mut pickled = vec![0x80, 0x02];
            pickled.extend(&bytes);
            let _ = read_dump(&pickled);
        }

        /// A dump (those torch 2.15 wrote among them) with bytes flipped or cut never panics,
        /// and what it reads stays within the bounds. With the test above, the readers' fuzz
        /// target: run longer with `PROPTEST_CASES=1000000 cargo test --lib collectives::tests::props`.
        #[test]
        fn damaged_dumps_never_panic(
            which in 0usize..4,
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = fixture([
                "gloo-rank0.pickle",
                "gloo-rank0.json",
                "torch-2.15/gloo-rank0.pickle",
                "torch-2.15/wrapped-rank1.json",
            ][which]);
            for (at, b) in flips {
                let i = at.index(bytes.len());
                bytes[i] = b;
            }
            let keep = cut.index(bytes.len() + 1);
            bytes.truncate(keep);
            if let Ok(dump) = read_dump(&bytes) {
                for g in &dump.groups {
                    prop_assert!(g.pending.iter().all(|p| p.top_frames.len() <= MAX_TOP_FRAMES));
                }
            }
        }
    }
}

/// The dumps torch 2.15 itself wrote (Gloo, 4 ranks, rank 2 asleep before all-reduce 8; see
/// `tests/fixtures/torch_hang.py --keep-dump`), JSON and pickle: each reads, the two forms of a
/// rank agree on its counters and pending collective, and rank 2 never enqueued #8.
#[test]
fn the_dumps_torch_2_15_wrote_read_alike_as_json_and_pickle() {
    for rank in 0..4 {
        let json = read_dump(&fixture(&format!("torch-2.15/gloo-rank{rank}.json"))).unwrap();
        let pickle = read_dump(&fixture(&format!("torch-2.15/gloo-rank{rank}.pickle"))).unwrap();
        let (j, p) = (only_group(&json), only_group(&pickle));
        assert_eq!(
            (j.last_enqueued, j.last_completed),
            (p.last_enqueued, p.last_completed),
            "rank {rank}"
        );
        assert_eq!(
            j.ranks,
            vec![0, 1, 2, 3],
            "rank {rank}: Gloo's `''` config key"
        );
        let ops = |g: &Group| {
            g.pending
                .iter()
                .map(|e| (e.seq, e.op.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(ops(j), ops(p), "rank {rank}");
        if rank == 2 {
            assert_eq!((j.last_enqueued, j.last_completed), (Some(7), Some(7)));
            assert!(j.pending.is_empty());
        } else {
            assert_eq!((j.last_enqueued, j.last_completed), (Some(8), Some(7)));
            assert_eq!(ops(j), vec![(8, "gloo:all_reduce".to_owned())]);
            assert!(j.pending[0].enqueued_at_us.is_some());
            // The pickle, with stack traces, says where it was called from.
            assert!(
                p.pending[0]
                    .top_frames
                    .iter()
                    .any(|f| f.name == "train_step"),
                "{:?}",
                p.pending[0].top_frames
            );
        }
    }
}
