//! Property tests for every parser of outside input: `/proc/<pid>/stat`, `CUDA_VISIBLE_DEVICES`,
//! GPU selectors, nvidia-smi CSV and durations. None may panic on any input, and each must read
//! back what a well-formed input says.

use std::time::Duration;

use proptest::prelude::*;
use unilab::duration::parse_duration;
use unilab::gpu::GpuInfo;
use unilab::gpu::mask::visible;
use unilab::gpu::selector::Selector;
use unilab::gpu::smi::parse_gpu_csv;
use unilab::process::parse_stat;

fn gpus(n: usize) -> Vec<GpuInfo> {
    (0..n)
        .map(|i| GpuInfo {
            index: i as u32,
            uuid: format!("GPU-{i:04x}{:04x}-aaaa-bbbb", i * 7919),
            name: "NVIDIA H200".into(),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn stat_lines_read_back_whatever_the_command_name(
        pid in 1u32..4_000_000,
        comm in "[ -~]{0,15}",
        state in prop::sample::select(vec!['R', 'S', 'D', 'Z', 'T', 'I']),
        ppid in 0u32..4_000_000,
        utime in any::<u32>(),
        stime in any::<u32>(),
        threads in 1u32..10_000,
        start in any::<u64>(),
        rss in 0u64..1 << 40,
    ) {
        let line = format!(
            "{pid} ({comm}) {state} {ppid} 1 1 0 -1 4194560 0 0 0 0 {utime} {stime} 0 0 20 0 {threads} 0 {start} 1000 {rss} 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0"
        );
        let stat = parse_stat(&line).expect("a well-formed line parses");
        prop_assert_eq!(stat.pid, pid);
        prop_assert_eq!(stat.comm, comm);
        prop_assert_eq!(stat.state, state);
        prop_assert_eq!(stat.ppid, ppid);
        prop_assert_eq!(stat.utime, u64::from(utime));
        prop_assert_eq!(stat.stime, u64::from(stime));
        prop_assert_eq!(stat.num_threads, u64::from(threads));
        prop_assert_eq!(stat.start_ticks, start);
        prop_assert_eq!(stat.rss_pages, rss);
    }

    #[test]
    fn no_input_makes_a_parser_panic(text in ".{0,200}") {
        let _ = parse_stat(&text);
        let _ = parse_gpu_csv(&text);
        let _ = parse_duration(&text);
        let _ = visible(Some(&text), &gpus(3));
        if let Ok(selector) = Selector::parse(Some(&text)) {
            let visible = visible(None, &gpus(3)).unwrap().gpus;
            let _ = selector.resolve(&text, &visible, None);
        }
    }

    #[test]
    fn the_mask_keeps_a_prefix_of_distinct_known_gpus(entries in prop::collection::vec(
        prop_oneof![
            (0i64..6).prop_map(|i| i.to_string()),
            (-3i64..0).prop_map(|i| i.to_string()),
            (0usize..4).prop_map(|i| gpus(4)[i].uuid[..8].to_string()),
            Just("GPU-ffff".to_string()),
            Just("junk".to_string()),
        ],
        0..6,
    )) {
        let all = gpus(4);
        let mask = entries.join(",");
        let seen = visible(Some(&mask), &all).unwrap();
        // Ordinals are renumbered from 0, every GPU is real, none repeats.
        for (i, gpu) in seen.gpus.iter().enumerate() {
            prop_assert_eq!(gpu.index as usize, i);
            prop_assert!(all.iter().any(|g| g.uuid == gpu.uuid));
        }
        let mut uuids: Vec<&str> = seen.gpus.iter().map(|g| g.uuid.as_str()).collect();
        uuids.sort_unstable();
        uuids.dedup();
        prop_assert_eq!(uuids.len(), seen.gpus.len());
        // Parsing stopped at an entry exactly when fewer GPUs than entries were kept.
        prop_assert_eq!(seen.stopped_at.is_some(), !mask.trim().is_empty() && seen.gpus.len() < entries.len());
    }

    #[test]
    fn csv_rows_read_back(rows in prop::collection::vec(("[A-Za-z0-9 ]{1,20}", any::<u32>()), 0..8)) {
        let all: Vec<(u32, String, String)> = rows
            .iter()
            .enumerate()
            .map(|(i, (name, salt))| (i as u32, format!("GPU-{salt:08x}-0000"), name.trim().to_string()))
            .filter(|(_, _, name)| !name.is_empty())
            .collect();
        let text: String = all.iter().map(|(i, u, n)| format!("{i}, {u}, {n}\nXid 79: fell off the bus\n")).collect();
        let parsed = parse_gpu_csv(&text);
        prop_assert_eq!(parsed.len(), all.len());
        for (gpu, (i, uuid, name)) in parsed.iter().zip(&all) {
            prop_assert_eq!(gpu.index, *i);
            prop_assert_eq!(&gpu.uuid, uuid);
            prop_assert_eq!(&gpu.name, name);
        }
    }

    #[test]
    fn durations_read_back(ms in 0u64..10_000_000, unit in prop::sample::select(vec!["ms", "s", ""])) {
        let text = match unit {
            "ms" => format!("{ms}ms"),
            _ => format!("{}.{:03}{unit}", ms / 1000, ms % 1000),
        };
        prop_assert_eq!(parse_duration(&text).unwrap(), Duration::from_millis(ms));
    }
}
