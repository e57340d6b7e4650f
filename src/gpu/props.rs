//! Property tests for the parsers of outside GPU input: `CUDA_VISIBLE_DEVICES`, selectors and
//! nvidia-smi CSV. None may panic on any input, and each must read back what a well-formed input
//! says.

use proptest::prelude::*;

use super::GpuInfo;
use super::mask::visible;
use super::selector::Selector;
use super::smi::parse_gpu_csv;

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
    fn no_input_makes_a_parser_panic(text in ".{0,200}") {
        let _ = parse_gpu_csv(&text);
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
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Large and corrupted outputs: long lines, many lines, stray separators and bytes.
    #[test]
    fn large_or_corrupted_input_makes_no_parser_panic(
        lines in prop::collection::vec(".{0,2000}", 0..64),
        width in 0usize..70_000,
    ) {
        let text = lines.join("\n");
        let _ = parse_gpu_csv(&text);
        let _ = visible(Some(&text), &gpus(8));
        let _ = Selector::parse(Some(&text));
        let long = format!("{}, GPU-{}, NVIDIA H200", "7".repeat(width), "a".repeat(width));
        let _ = parse_gpu_csv(&long);
        let _ = visible(Some(&long), &gpus(8));
        let _ = Selector::parse(Some(&long));
    }
}
