//! Packing and unpacking, against a base and against nothing, whole and damaged.

use proptest::prelude::*;

use super::*;
use crate::event::soak::ProgressSignature;

fn process(pid: u32, start_ticks: u64, i: u64) -> ProcessSample {
    ProcessSample {
        pid,
        ppid: 1,
        start_ticks,
        name: format!("worker-{pid}"),
        state: 'S',
        rss_bytes: 1 << 30,
        cpu_ticks: i,
        reaped_children_cpu_ticks: 0,
        threads: 12,
        open_fds: Some(40),
        read_bytes: Some(i << 10),
        write_bytes: None,
    }
}

fn sample(index: u64, processes: Vec<ProcessSample>) -> Sample {
    Sample {
        index,
        elapsed_ms: index * 1000,
        after_exit: false,
        processes,
        reaped_cpu_ticks: 3,
        gpus: None,
        progress: ProgressSignature {
            files: 1,
            bytes: 2,
            newest_mtime_ns: None,
        },
        sampler_cost_us: 900,
        errors: vec!["nvidia-smi was not found".into()],
    }
}

fn measures(pss: Vec<Option<u64>>) -> Measures {
    Measures {
        pss_bytes: pss,
        ..Measures::default()
    }
}

fn round_trip(base: Option<(&Sample, &Measures)>, sample: &Sample, measures: &Measures) {
    // Its encoding in the log round-trips too: `codec_props` generates packed samples.
    let packed = CompactSample::pack(base, sample, measures).expect("packs");
    let (s, m) = packed.unpack(base).expect("unpacks");
    assert_eq!((&s, &m), (sample, measures));
}

#[test]
fn a_tree_that_only_counts_up_costs_a_few_bytes_a_process() {
    let tree = |i| {
        (0..100u32)
            .map(|p| process(1000 + p, 5000, i))
            .collect::<Vec<_>>()
    };
    let pss = |i: u64| {
        (0..100u32)
            .map(|p| Some((100 + u64::from(p) + i) << 20))
            .collect()
    };
    let (base, base_measures) = (sample(0, tree(0)), measures(pss(0)));
    let (next, next_measures) = (sample(1, tree(1)), measures(pss(1)));
    let packed = CompactSample::pack(Some((&base, &base_measures)), &next, &next_measures).unwrap();
    // A reference, a mask, and three changes (CPU ticks, read bytes, PSS) a process.
    assert!(
        packed.processes.len() <= 100 * 8,
        "{} bytes",
        packed.processes.len()
    );
    round_trip(Some((&base, &base_measures)), &next, &next_measures);
}

#[test]
fn processes_that_come_go_move_and_change_come_back_as_they_were() {
    let mut a = process(10, 1, 5);
    let b = process(11, 1, 5);
    let c = process(12, 1, 5);
    let base = sample(3, vec![a.clone(), b.clone(), c.clone()]);
    let base_measures = measures(vec![Some(1), None, Some(u64::MAX)]);
    a.name = "renamed".into();
    a.state = 'Z';
    a.open_fds = None;
    a.write_bytes = Some(u64::MAX);
    a.cpu_ticks = 0;
    let reused = process(11, 2, 0); // the same pid, another process
    let next = sample(4, vec![c.clone(), reused, a, process(13, 9, u64::MAX)]);
    let next_measures = measures(vec![Some(0), Some(5), None, Some(1)]);
    round_trip(Some((&base, &base_measures)), &next, &next_measures);
    // Without proportional set sizes, and against nothing.
    round_trip(Some((&base, &base_measures)), &next, &measures(Vec::new()));
    round_trip(None, &next, &next_measures);
    round_trip(None, &sample(0, Vec::new()), &measures(Vec::new()));
}

#[test]
fn measures_that_do_not_line_up_are_not_packed() {
    let next = sample(1, vec![process(10, 1, 0)]);
    assert!(CompactSample::pack(None, &next, &measures(vec![None, None])).is_none());
}

#[test]
fn a_sample_unpacked_against_another_base_is_refused() {
    let base = sample(3, vec![process(10, 1, 0)]);
    let next = sample(4, vec![process(10, 1, 1)]);
    let packed = CompactSample::pack(
        Some((&base, &Measures::default())),
        &next,
        &Measures::default(),
    )
    .unwrap();
    let other = sample(2, vec![process(10, 1, 0)]);
    assert_eq!(
        packed.clone().unpack(Some((&other, &Measures::default()))),
        Err(UnpackError::Base {
            packed: Some(3),
            found: Some(2)
        })
    );
    assert!(matches!(packed.unpack(None), Err(UnpackError::Base { .. })));
}

#[test]
fn damaged_packed_bytes_are_an_error_never_a_panic() {
    let base = sample(3, vec![process(10, 1, 0), process(11, 1, 0)]);
    let next = sample(4, vec![process(11, 1, 9), process(12, 7, 1)]);
    let both = (&base, &Measures::default());
    let packed = CompactSample::pack(Some(both), &next, &Measures::default()).unwrap();
    for cut in 0..packed.processes.len() {
        let mut short = packed.clone();
        short.processes.truncate(cut);
        assert!(short.unpack(Some(both)).is_err(), "cut at {cut}");
    }
    for at in 0..packed.processes.len() {
        for flip in [0x01, 0x80, 0xff] {
            let mut flipped = packed.clone();
            flipped.processes[at] ^= flip;
            let _ = flipped.unpack(Some(both));
        }
    }
    let mut longer = packed;
    longer.processes.push(0);
    assert!(longer.unpack(Some(both)).is_err());
}

fn any_process() -> impl Strategy<Value = ProcessSample> {
    (
        (0u32..6, 0u64..3, any::<u32>(), ".{0,6}", any::<char>()),
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u32>()),
        (
            any::<Option<u32>>(),
            any::<Option<u64>>(),
            any::<Option<u64>>(),
        ),
    )
        .prop_map(
            |(
                (pid, start_ticks, ppid, name, state),
                (rss_bytes, cpu_ticks, reaped, threads),
                (open_fds, read_bytes, write_bytes),
            )| ProcessSample {
                pid,
                ppid,
                start_ticks,
                name,
                state,
                rss_bytes,
                cpu_ticks,
                reaped_children_cpu_ticks: reaped,
                threads,
                open_fds,
                read_bytes,
                write_bytes,
            },
        )
}

fn any_sample(index: u64) -> impl Strategy<Value = (Sample, Measures)> {
    (
        proptest::collection::vec((any_process(), any::<Option<u64>>()), 0..8),
        any::<bool>(),
    )
        .prop_map(move |(rows, pss)| {
            let (processes, sizes): (Vec<_>, Vec<_>) = rows.into_iter().unzip();
            (
                sample(index, processes),
                measures(if pss { sizes } else { Vec::new() }),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn any_sample_unpacks_to_itself_against_any_base(
        (base, base_measures) in any_sample(7),
        (next, next_measures) in any_sample(8),
        against_nothing in any::<bool>(),
    ) {
        let base = (!against_nothing).then_some((&base, &base_measures));
        let packed = CompactSample::pack(base, &next, &next_measures).expect("packs");
        prop_assert_eq!(packed.unpack(base), Ok((next, next_measures)));
    }
}
