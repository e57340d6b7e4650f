//! Property tests for the parser of `/proc/<pid>/stat`: it must never panic, on large and
//! corrupted lines too, and must read back what a well-formed line says whatever the command
//! name. (The parsers of GPU selectors,
//! `CUDA_VISIBLE_DEVICES`, nvidia-smi CSV and durations are crate-private; their property tests
//! are unit tests beside them.)

use proptest::prelude::*;
use unilab::testing::parse_stat;

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
    fn no_input_makes_it_panic(text in ".{0,200}") {
        let _ = parse_stat(&text);
    }

    /// A real line cut short, run on, or with a field replaced by noise: read or refused.
    #[test]
    fn a_corrupted_line_never_panics(
        cut in 0usize..120,
        noise in ".{0,40}",
        field in 0usize..52,
        parens in "[()]{0,6}",
    ) {
        let line = "4242 (python3) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 4 0 1000 123456 789 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let _ = parse_stat(&line[..cut.min(line.len())]);
        let _ = parse_stat(&format!("{line}{noise}"));
        let mut fields: Vec<String> = line.split(' ').map(str::to_owned).collect();
        let at = field.min(fields.len() - 1);
        fields[at] = format!("{noise}{parens}");
        let _ = parse_stat(&fields.join(" "));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// A command name of any length and any bytes `/proc` may show, parentheses included.
    #[test]
    fn a_huge_command_name_reads_back(comm in "[ -~]{0,65536}") {
        let line = format!("7 ({comm}) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 99 4096 10");
        let stat = parse_stat(&line).expect("a well-formed line parses");
        prop_assert_eq!(stat.comm, comm);
        prop_assert_eq!(stat.start_ticks, 99);
    }
}
