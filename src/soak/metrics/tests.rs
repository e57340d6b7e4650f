//! The renderer's rules, checked on its text: escaping, every family once, what is left out,
//! counters that hold, the numbers bounded, the end.

use super::*;
use crate::event::soak::{GpuHealth, GpuSample, ProcessSample, ProgressSignature, SampleBeats};

fn labels(command: &str) -> SoakLabels {
    SoakLabels {
        soak: "20261206T120000-ab12".into(),
        host: "node-7".into(),
        job: Some("llama-run3".into()),
        rank: Some(3),
        command: command.into(),
    }
}

fn process(pid: u32, cpu_ticks: u64) -> ProcessSample {
    ProcessSample {
        pid,
        ppid: 1,
        start_ticks: 7,
        name: format!("worker-{pid}"),
        state: 'S',
        rss_bytes: 1 << 20,
        cpu_ticks,
        reaped_children_cpu_ticks: 0,
        threads: 4,
        open_fds: None,
        read_bytes: None,
        write_bytes: None,
    }
}

fn sample(index: u64, processes: Vec<ProcessSample>, gpus: Option<Vec<GpuSample>>) -> Sample {
    Sample {
        index,
        elapsed_ms: 1_500 * index,
        after_exit: false,
        processes,
        reaped_cpu_ticks: 0,
        gpus,
        progress: ProgressSignature {
            files: 2,
            bytes: 4_096,
            newest_mtime_ns: None,
        },
        sampler_cost_us: 800,
        errors: Vec::new(),
    }
}

fn gpu() -> GpuSample {
    GpuSample {
        index: 0,
        uuid: "GPU-0f8e0c2a".into(),
        memory_used_mib: Some(2),
        memory_total_mib: Some(80_000),
        utilization_percent: Some(97),
        processes: Vec::new(),
    }
}

fn beats(step: u64, median: Option<f32>, numbers: &[(&str, f64)]) -> Option<Box<SampleBeats>> {
    Some(Box::new(SampleBeats {
        beats: 10,
        step: Some(step),
        phase: Some("train".into()),
        step_seconds_median: median,
        numbers: numbers.iter().map(|&(k, v)| (k.to_owned(), v)).collect(),
        ..SampleBeats::default()
    }))
}

fn rendered(metrics: &SoakMetrics) -> String {
    let mut text = String::from("left over from before");
    metrics.render(&mut text);
    text
}

/// The value of the series `name{labels}` (labels as written), if the text has it.
fn value<'t>(text: &'t str, series: &str) -> Option<&'t str> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
}

const SOAK: &str = "soak=\"20261206T120000-ab12\"";

/// A label value as the format's parsers read it back.
fn unescape(value: &str) -> String {
    let mut out = String::new();
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => panic!("a lone backslash ends {value:?}"),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

#[test]
fn label_values_escape_backslashes_quotes_and_line_feeds() {
    let mut out = String::new();
    escape_label_value("a\\b\"c\nd\té", &mut out);
    assert_eq!(out, "a\\\\b\\\"c\\nd\té");
    assert_eq!(unescape(&out), "a\\b\"c\nd\té");
}

#[test]
fn the_command_label_reads_back_as_it_was_and_a_huge_one_is_cut() {
    let command = "sh -c 'echo \"hi\" \\\nsleep 1'";
    let text = rendered(&SoakMetrics::new(&labels(command), 100));
    let info = text
        .lines()
        .find(|l| l.starts_with("unilab_soak_info{"))
        .unwrap();
    assert!(info.ends_with("} 1"), "{info}");
    assert!(
        info.starts_with(&format!(
            "unilab_soak_info{{{SOAK},host=\"node-7\",job=\"llama-run3\",rank=\"3\",command=\""
        )),
        "{info}"
    );
    assert!(!info.contains('\n'));
    let value = info
        .split_once(",command=\"")
        .unwrap()
        .1
        .strip_suffix("\"} 1")
        .unwrap();
    assert_eq!(unescape(value), command);
    let huge = "é".repeat(MAX_COMMAND_CHARS + 5);
    let text = rendered(&SoakMetrics::new(&labels(&huge), 100));
    let kept = format!("{}…", "é".repeat(MAX_COMMAND_CHARS));
    assert!(text.contains(&format!("command=\"{kept}\"}} 1")));
    let outside = SoakLabels {
        job: None,
        rank: None,
        ..labels("x")
    };
    let text = rendered(&SoakMetrics::new(&outside, 100));
    assert!(text.contains(&format!(
        "unilab_soak_info{{{SOAK},host=\"node-7\",command=\"x\"}} 1"
    )));
}

/// The text of a sample of two processes on one GPU, whose trainer beat.
fn busy() -> String {
    let mut metrics = SoakMetrics::new(&labels("python train.py"), 100);
    let measures = Measures {
        pss_bytes: vec![Some(3 << 20), None],
        gpus: vec![GpuHealth {
            temperature_c: Some(61),
            power_mw: Some(312_450),
            throttle_mask: Some(0x4 | 0x1000),
            ..GpuHealth::default()
        }],
        heartbeat: beats(41, Some(0.1), &[("loss", 0.25), ("lr", 3e-7)]),
    };
    let mut s = sample(
        2,
        vec![process(10, 250), process(11, 50)],
        Some(vec![gpu()]),
    );
    s.errors.push("nvidia-smi: timed out".into());
    metrics.observe(&s, &measures, (40, 4.5));
    metrics.progressed_at(Some(1_796_000_000.25));
    rendered(&metrics)
}

#[test]
fn a_sample_gives_the_tree_the_steps_and_the_gpus() {
    let text = busy();
    let at =
        |series: &str| value(&text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"));
    let soak = |name: &str| format!("{name}{{{SOAK}}}");
    assert_eq!(at(&soak("unilab_soak_running")), "1");
    assert_eq!(at(&soak("unilab_soak_elapsed_seconds")), "3.0");
    assert_eq!(
        at(&soak("unilab_soak_tree_pss_bytes")),
        (3u64 << 20).to_string()
    );
    assert_eq!(
        at(&soak("unilab_soak_tree_rss_bytes")),
        (2u64 << 20).to_string()
    );
    assert_eq!(at(&soak("unilab_soak_cpu_seconds_total")), "3.0");
    assert_eq!(at(&soak("unilab_soak_processes")), "2");
    assert_eq!(at(&soak("unilab_soak_threads")), "8");
    assert_eq!(at(&soak("unilab_soak_progress_bytes")), "4096");
    assert_eq!(
        at(&soak("unilab_soak_last_progress_timestamp_seconds")),
        "1796000000.25"
    );
    assert_eq!(at(&soak("unilab_soak_step")), "41");
    assert_eq!(
        at(&format!(
            "unilab_soak_step_seconds{{{SOAK},quantile=\"0.5\"}}"
        )),
        "0.1"
    );
    assert_eq!(at(&soak("unilab_soak_step_seconds_sum")), "4.5");
    assert_eq!(at(&soak("unilab_soak_step_seconds_count")), "40");
    assert_eq!(
        at(&format!(
            "unilab_soak_heartbeat_number{{{SOAK},name=\"lr\"}}"
        )),
        "3e-7"
    );
    assert_eq!(at(&soak("unilab_soak_sampler_errors_total")), "1");
    let gpu = format!("{SOAK},gpu=\"GPU-0f8e0c2a\"");
    assert_eq!(
        at(&format!("unilab_gpu_utilization_ratio{{{gpu}}}")),
        "0.97"
    );
    assert_eq!(
        at(&format!("unilab_gpu_memory_used_bytes{{{gpu}}}")),
        "2097152"
    );
    assert_eq!(
        at(&format!("unilab_gpu_temperature_celsius{{{gpu}}}")),
        "61"
    );
    assert_eq!(at(&format!("unilab_gpu_power_watts{{{gpu}}}")), "312.45");
    assert_eq!(
        at(&format!(
            "unilab_gpu_throttled{{{gpu},reason=\"sw_power_cap\"}}"
        )),
        "1"
    );
    assert_eq!(
        at(&format!(
            "unilab_gpu_throttled{{{gpu},reason=\"gpu_idle\"}}"
        )),
        "0"
    );
    assert_eq!(
        at(&format!("unilab_gpu_throttled{{{gpu},reason=\"0x1000\"}}")),
        "1"
    );
    assert_eq!(
        value(&text, &soak("unilab_soak_passed")),
        None,
        "no verdict yet"
    );
}

#[test]
fn a_sample_renders_every_family_once_each_series_labelled_with_the_soak() {
    let text = busy();
    assert!(text.ends_with("\n# EOF\n"), "{text}");
    assert!(!text.contains("left over"));
    // Each family once, its HELP before its TYPE before its series, which follow one another.
    let mut seen = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.contains(&format!("{{{SOAK}")), "{line}");
        let name = line.split('{').next().unwrap();
        let family = ["_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .filter(|f| *f == "unilab_soak_step_seconds")
            .unwrap_or(name);
        if seen.last() != Some(&family) {
            assert!(!seen.contains(&family), "{family} twice");
            assert!(text.contains(&format!("# HELP {family} ")), "{family}");
            assert!(text.contains(&format!("# TYPE {family} ")), "{family}");
            seen.push(family);
        }
    }
    // The design's names in its order (`unilab_soak_passed` comes with the verdict), and the
    // heartbeat's numbers after the step summary.
    let names = [
        "info",
        "running",
        "elapsed_seconds",
        "tree_pss_bytes",
        "tree_rss_bytes",
        "cpu_seconds_total",
        "processes",
        "threads",
        "progress_bytes",
        "last_progress_timestamp_seconds",
        "step",
        "step_seconds",
        "heartbeat_number",
        "sampler_errors_total",
        "gpu_tool_present",
    ]
    .map(|n| format!("unilab_soak_{n}"))
    .into_iter()
    .chain(
        [
            "utilization_ratio",
            "memory_used_bytes",
            "temperature_celsius",
            "power_watts",
            "throttled",
        ]
        .map(|n| format!("unilab_gpu_{n}")),
    )
    .collect::<Vec<_>>();
    assert_eq!(seen, names);
}

#[test]
fn what_is_not_known_is_left_out_not_written_as_zero() {
    let mut metrics = SoakMetrics::new(&labels("x"), 100);
    let text = rendered(&metrics);
    assert!(text.contains("unilab_soak_running{"));
    assert!(
        !text.contains("unilab_soak_elapsed_seconds"),
        "before any sample"
    );
    // No PSS read, no progress, no beat, nvidia-smi silent.
    metrics.observe(
        &sample(1, vec![process(1, 1)], None),
        &Measures::default(),
        (0, 0.0),
    );
    metrics.progressed_at(None);
    let text = rendered(&metrics);
    for absent in [
        "tree_pss",
        "last_progress",
        "unilab_soak_step",
        "heartbeat_number",
        "unilab_gpu_",
    ] {
        assert!(!text.contains(absent), "{absent} in\n{text}");
    }
    assert!(text.contains("unilab_soak_tree_rss_bytes{"));
}

#[test]
fn counters_and_the_last_step_hold_and_the_median_of_an_empty_window_is_nan() {
    let mut metrics = SoakMetrics::new(&labels("x"), 100);
    let mut measures = Measures {
        heartbeat: beats(9, Some(0.5), &[("loss", 1.0)]),
        ..Measures::default()
    };
    metrics.observe(&sample(1, vec![process(1, 900)], None), &measures, (8, 4.0));
    metrics.progressed_at(Some(100.0));
    // The big process is gone (reaped by the kernel); no beat since.
    measures.heartbeat = None;
    metrics.observe(&sample(2, vec![process(2, 100)], None), &measures, (8, 4.0));
    metrics.progressed_at(None);
    let text = rendered(&metrics);
    let at = |name: &str| {
        value(&text, &format!("{name}{{{SOAK}}}"))
            .unwrap()
            .to_owned()
    };
    assert_eq!(at("unilab_soak_cpu_seconds_total"), "9.0");
    assert_eq!(at("unilab_soak_step"), "9");
    assert_eq!(at("unilab_soak_step_seconds_count"), "8");
    assert_eq!(at("unilab_soak_last_progress_timestamp_seconds"), "100.0");
    assert_eq!(
        value(
            &text,
            &format!("unilab_soak_step_seconds{{{SOAK},quantile=\"0.5\"}}")
        ),
        Some("NaN")
    );
    assert_eq!(
        value(
            &text,
            &format!("unilab_soak_heartbeat_number{{{SOAK},name=\"loss\"}}")
        ),
        Some("1.0")
    );
}

#[test]
fn the_numbers_are_the_first_sixteen_names_of_the_run() {
    let mut metrics = SoakMetrics::new(&labels("x"), 100);
    for round in 0..3u32 {
        let names: Vec<String> = (0..16).map(|k| format!("n{round}_{k:02}")).collect();
        let numbers: Vec<(&str, f64)> = names
            .iter()
            .map(|n| (n.as_str(), f64::from(round)))
            .collect();
        let measures = Measures {
            heartbeat: beats(round.into(), None, &numbers),
            ..Measures::default()
        };
        metrics.observe(&sample(1, Vec::new(), None), &measures, (0, 0.0));
    }
    let text = rendered(&metrics);
    let numbers: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("unilab_soak_heartbeat_number{"))
        .collect();
    assert_eq!(numbers.len(), 16);
    assert!(
        numbers.iter().all(|l| l.contains("name=\"n0_")),
        "{numbers:?}"
    );
}

#[test]
fn the_end_says_the_verdict_and_leaves_the_gpus_out() {
    let mut metrics = SoakMetrics::new(&labels("x"), 100);
    let measures = Measures {
        gpus: vec![GpuHealth::default()],
        ..Measures::default()
    };
    metrics.observe(
        &sample(4, vec![process(1, 5)], Some(vec![gpu()])),
        &measures,
        (0, 0.0),
    );
    assert!(rendered(&metrics).contains("unilab_gpu_utilization_ratio{"));
    metrics.finish(true, 7.25);
    let text = rendered(&metrics);
    let at = |name: &str| {
        value(&text, &format!("{name}{{{SOAK}}}"))
            .unwrap()
            .to_owned()
    };
    assert_eq!(at("unilab_soak_running"), "0");
    assert_eq!(at("unilab_soak_passed"), "1");
    assert_eq!(at("unilab_soak_elapsed_seconds"), "7.25");
    assert_eq!(at("unilab_soak_processes"), "1");
    assert!(!text.contains("unilab_gpu_"), "{text}");
    let mut failed = SoakMetrics::new(&labels("x"), 100);
    failed.finish(false, 0.5);
    let text = rendered(&failed);
    assert_eq!(
        value(&text, &format!("unilab_soak_passed{{{SOAK}}}")),
        Some("0")
    );
}

/// The last sample, taken after the command exited, finds the tree gone: the final file
/// dropped `unilab_soak_tree_pss_bytes` and said RSS, processes and threads were 0, the figures
/// of no run. They are the last the tree had.
#[test]
fn the_end_keeps_the_trees_last_figures_when_the_last_sample_finds_it_gone() {
    let mut metrics = SoakMetrics::new(&labels("x"), 100);
    let measures = Measures {
        pss_bytes: vec![Some(3 << 20), Some(1 << 20)],
        ..Measures::default()
    };
    metrics.observe(
        &sample(1, vec![process(1, 5), process(2, 5)], None),
        &measures,
        (0, 0.0),
    );
    let mut gone = sample(2, Vec::new(), None);
    gone.after_exit = true;
    metrics.observe(&gone, &Measures::default(), (0, 0.0));
    metrics.finish(false, 2.5);
    let text = rendered(&metrics);
    let at = |name: &str| value(&text, &format!("{name}{{{SOAK}}}")).map(str::to_owned);
    assert_eq!(at("unilab_soak_running").as_deref(), Some("0"));
    assert_eq!(at("unilab_soak_passed").as_deref(), Some("0"));
    assert_eq!(
        at("unilab_soak_tree_pss_bytes").as_deref(),
        Some("4194304"),
        "{text}"
    );
    assert_eq!(at("unilab_soak_tree_rss_bytes").as_deref(), Some("2097152"));
    assert_eq!(at("unilab_soak_processes").as_deref(), Some("2"));
    assert_eq!(at("unilab_soak_threads").as_deref(), Some("8"));
    assert_eq!(at("unilab_soak_elapsed_seconds").as_deref(), Some("2.5"));
}

/// No GPU tool on the host: said by its own series, not counted among the sampler's errors.
#[test]
fn a_host_without_a_gpu_tool_says_so_in_a_series_of_its_own() {
    let text = rendered(&SoakMetrics::new(&labels("x"), 100).with_gpu_tool(false));
    assert_eq!(
        value(&text, &format!("unilab_soak_gpu_tool_present{{{SOAK}}}")),
        Some("0")
    );
    assert_eq!(
        value(
            &text,
            &format!("unilab_soak_sampler_errors_total{{{SOAK}}}")
        ),
        Some("0")
    );
    let text = rendered(&SoakMetrics::new(&labels("x"), 100));
    assert_eq!(
        value(&text, &format!("unilab_soak_gpu_tool_present{{{SOAK}}}")),
        Some("1")
    );
}

#[test]
fn floats_are_written_as_go_reads_them() {
    let mut out = String::new();
    for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300, 0.1, 2.0] {
        float(&mut out, v);
        out.push(' ');
    }
    assert_eq!(out, "NaN +Inf -Inf 1e300 0.1 2.0 ");
}
