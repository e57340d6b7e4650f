//! The page, drawn from rows and views made up to show what it must and must not do.

use std::collections::BTreeMap;

use super::html::escape;
use super::*;
use crate::event::soak::{
    FailureKind, GoodputSplit, HeartbeatErrors, LeakedProcess, RunBeats, StepStats,
};
use crate::read::beats::BeatsRow;
use crate::read::rows::{GpuRow, SampleRow};
use crate::read::sketch::Sketch;
use crate::read::stepped::Stepped;
use crate::read::stream::Piece;

#[test]
fn text_from_the_record_is_escaped() {
    assert_eq!(escape("<script>&\"'"), "&lt;script&gt;&amp;&quot;&#39;");
    assert_eq!(escape("\u{1b}]0;x\u{7}"), "\\u{1b}]0;x\\u{7}");
}

/// A row of `index` with every figure zero, its GPUs `gpus`.
fn row<'a>(index: u64, gpus: Option<Vec<GpuRow<'a>>>) -> SampleRow<'a> {
    SampleRow {
        gpus,
        index,
        processes: 0,
        ..SampleRow::of_test(0.0, 0, 0)
    }
}

fn extras() -> Extras<'static> {
    Extras {
        timeline: &[],
        digest: "d",
        chain_head: "h",
    }
}

/// The record of a soak that ran `seconds`, failed for no progress, its progress first seen at
/// a tenth of that and last changed at half.
fn view(seconds: f64) -> SoakRecord {
    Sketch {
        duration_seconds: Some(seconds),
        failure_kind: Some(FailureKind::StaleProgress),
        reason: "no progress".into(),
        first_progress_seconds: Some(seconds * 0.1),
        last_progress_seconds: Some(seconds * 0.5),
        ..Sketch::default()
    }
    .record()
}

/// The static charts of a page: each `<svg …>…</svg>`.
fn svgs(html: &str) -> Vec<&str> {
    html.match_indices("<svg class=\"chart\"")
        .map(|(at, _)| &html[at..at + html[at..].find("</svg>").unwrap()])
        .collect()
}

/// 300 rows a tenth of a second apart, each with `errors` and no GPU.
fn erring(errors: &[String]) -> Charts {
    let mut charts = Charts::default();
    for i in 0..300u32 {
        let row = SampleRow {
            elapsed_seconds: f64::from(i) * 0.1,
            cpu_percent: Some(50.0),
            rss_bytes: 1 << 20,
            processes: 1,
            threads: 1,
            open_fds: 4,
            progress_bytes: u64::from(i),
            progress_files: u64::from(i),
            errors,
            ..row(u64::from(i), None)
        };
        charts.take(Piece::Row(&row));
    }
    charts
}

#[test]
fn a_soak_whose_every_sample_erred_is_one_band_and_its_error_said_once() {
    let errors = ["nvidia-smi cannot communicate with the NVIDIA driver".to_owned()];
    let html = render(&view(30.0), erring(&errors), &extras());
    let drawn = svgs(&html);
    assert!(drawn.len() >= 4, "{} charts", drawn.len());
    for svg in drawn {
        assert_eq!(svg.matches("class=\"band\"").count(), 1, "{svg}");
        // Progress first seen, its last change, the verdict: nothing a sample.
        assert_eq!(svg.matches("class=\"marker\"").count(), 3, "{svg}");
    }
    assert_eq!(html.matches(&errors[0]).count(), 1);
    assert!(html.contains("in 300 of 300 samples"));
    assert!(html.contains("no GPU data"));
    assert!(
        !html.contains("GPU utilisation"),
        "no GPU chart without GPU data"
    );
}

/// A host without nvidia-smi: every sample says the tool was not found. That is a note of the
/// page (at a glance and over the charts), not a band of sampler errors over the whole run.
#[test]
fn a_gpu_tool_absent_from_the_start_is_a_note_not_an_error_band() {
    let errors = ["`nvidia-smi` was not found".to_owned()];
    let mut view = view(30.0);
    view.summary.sampler_errors = 300;
    let html = render(&view, erring(&errors), &extras());
    assert!(!html.contains("class=\"band\""), "no band");
    assert!(!html.contains("sampler errors"), "not counted as errors");
    assert!(!html.contains("<ul class=\"errors\">"));
    assert!(html.contains(
        "<p class=\"note\">no GPU tool: `nvidia-smi` was not found, so this soak has no GPU \
data and the GPU charts are left out</p>"
    ));
    assert!(html.contains("<dt>GPU</dt><dd>none read: no GPU tool (`nvidia-smi` was not found)"));
    for svg in svgs(&html) {
        assert_eq!(svg.matches("class=\"marker\"").count(), 3, "{svg}");
    }
}

/// `n` rows a `step` seconds apart, of two GPUs, the memory growing with a spike at `spike`.
fn long_soak(n: u32, step: f64, spike: u32) -> Charts {
    let mut charts = Charts::default();
    for i in 0..n {
        let gpus = ["GPU-1111aaaa-0000", "GPU-2222bbbb-0000"]
            .map(|uuid| GpuRow {
                ecc_uncorrected_volatile: None,
                index: 0,
                memory_total_mib: Some(143_771),
                memory_used_mib: Some(40_000 + u64::from(i % 97)),
                other_processes: None,
                power_w: None,
                retired_pages_pending: None,
                sm_clock_mhz: None,
                temperature_c: None,
                throttle_reasons: None,
                tree_memory_mib: Some(38_000 + u64::from(i % 89)),
                utilization_percent: Some(90 + i % 11),
                uuid,
            })
            .to_vec();
        let row = SampleRow {
            cpu_percent: Some(f64::from(i % 400) * 0.37),
            cpu_seconds: f64::from(i),
            gpus: Some(gpus),
            index: u64::from(i),
            open_fds: 40 + u64::from(i % 7),
            processes: 60,
            progress_bytes: u64::from(i) * 1_000_003,
            sampler_cost_us: 300,
            threads: 400 + u64::from(i % 13),
            ..SampleRow::of_test(
                f64::from(i) * step,
                8_000_000_000 + u64::from(i) * 4096 + if i == spike { 1 << 33 } else { 0 },
                u64::from(i / 100),
            )
        };
        charts.take(Piece::Row(&row));
    }
    charts
}

#[test]
fn a_hundred_thousand_samples_make_a_page_under_two_megabytes_that_keeps_the_spike() {
    let n = 100_000;
    let html = render(
        &view(f64::from(n) * 5.0),
        long_soak(n, 5.0, 54_321),
        &extras(),
    );
    assert!(html.len() < 2 << 20, "{} bytes", html.len());
    // The spike (16 GiB over 8 GB) is in the zoomable data and in the static memory chart.
    let spike = 8_000_000_000.0 + 54_321.0 * 4096.0 + f64::from(1u32 << 31) * 4.0;
    assert!(
        html.contains(&scale::compact(spike)),
        "the spike is in the data"
    );
    let memory = svgs(&html)[1];
    assert!(memory.contains("GiB"), "{memory}");
}

#[test]
fn a_two_day_soak_reads_in_hours_with_the_clock_under_it() {
    let html = render(&view(172_800.0), long_soak(2000, 86.4, 0), &extras());
    let cpu = svgs(&html)[0];
    for tick in [">12h<", ">1d<", ">1d12h<", ">2d<"] {
        assert!(cpu.contains(tick), "{tick}");
    }
    assert!(!cpu.contains(">172800<") && !cpu.contains(">43200<"));
    // 1_796_479_200 is 14:00 UTC; twelve hours later the clock reads 02:00.
    assert!(cpu.contains(">14:00<") && cpu.contains(">02:00<"), "{cpu}");
    // The legends are under the charts, not over the data.
    assert!(!cpu.contains(">tree CPU</text>"), "{cpu}");
    assert!(html.contains(
        "<div class=\"legend\"><span><i style=\"border-color:#1f77b4\"></i>tree CPU</span>"
    ));
    assert!(html.contains("GPU memory used") && html.contains("GPU utilisation"));
}

#[test]
fn leaked_processes_are_a_table_not_json() {
    let mut leaked = view(10.0);
    if let Some(verdict) = leaked.records.soak.end.as_deref_mut() {
        verdict.end.leaked_processes.push(LeakedProcess {
            identity: crate::process::ProcessIdentity {
                pid: 4242,
                start_ticks: 1,
            },
            name: "sleep".into(),
            cmdline: vec!["sleep".into(), "600".into()],
        });
    }
    let html = render(&leaked, Charts::default(), &extras());
    assert!(html.contains("<tr><td>4242</td><td>sleep</td><td><code>sleep 600</code></td></tr>"));
    assert!(!html.contains("\"cmdline\""));
}

#[test]
fn the_chart_library_is_the_vendored_release_unchanged() {
    // VENDORED.md names the release; a change to these files is a new vendoring.
    for (text, digest) in [
        (
            UPLOT_JS,
            "ea2d16ff65797375a846049c0f0a17f68b47a2850b9c73f2816ecf040ec9f2ce",
        ),
        (
            UPLOT_CSS,
            "70ead7542eab83ef6ff4269c1f139e3c40f5f59f98302552320b9f79188abba1",
        ),
    ] {
        assert_eq!(blake3::hash(text.as_bytes()).to_hex().as_str(), digest);
    }
    assert!(!UPLOT_JS.contains("</script") && !CHARTS_JS.contains("</script"));
}

/// A row at `at` seconds whose sample read `beats` (`None`: no beat in it).
fn beaten<'a>(at: f64, beats: Option<BeatsRow<'a>>) -> SampleRow<'a> {
    SampleRow {
        elapsed_seconds: at,
        rss_bytes: 1 << 20,
        processes: 1,
        heartbeat: Some(beats),
        ..row(0, None)
    }
}

/// The beats of a sample: `n` of them, its steps between `fastest` and `slowest`.
fn beats(n: u32, fastest: f32, slowest: f32, numbers: &BTreeMap<String, f64>) -> BeatsRow<'_> {
    let seconds = |s: f32| Some(f64::from(s));
    BeatsRow {
        beats: n,
        numbers,
        phase: Some("train"),
        step: Some(u64::from(n)),
        step_seconds_max: seconds(slowest),
        step_seconds_median: seconds((fastest + slowest) / 2.0),
        step_seconds_min: seconds(fastest),
    }
}

/// The record of a soak whose trainer beat: its steps and goodput.
fn beaten_view() -> SoakRecord {
    let mut view = view(40.0);
    view.summary.samples = 40;
    view.summary.peak_rss_bytes = 1_048_576;
    let run = RunBeats {
        steps: BTreeMap::from([(
            "train".to_owned(),
            StepStats {
                count: 300,
                last: 299,
                timed: 300,
                median_seconds: Some(0.1),
                p99_seconds: Some(0.3),
            },
        )]),
        untracked: 0,
        errors: HeartbeatErrors {
            malformed: 2,
            ..HeartbeatErrors::default()
        },
        goodput: Some(GoodputSplit {
            productive_seconds: 30.0,
            startup_seconds: 2.0,
            checkpoint_seconds: 8.0,
            ..GoodputSplit::default()
        }),
    };
    view.stepped = Some(Stepped::of(Some(&run)));
    view
}

/// The page leads with the steps; the first chart is the step time, its median's line in a
/// band from the fastest to the slowest step; then a small chart a number, `loss` and those
/// named like it first, at most four, the rest named; lines span the samples without beats.
#[test]
fn a_beaten_soak_leads_with_its_steps_and_draws_step_time_and_its_numbers() {
    let numbers: BTreeMap<String, f64> = ["a", "b", "grad_loss", "loss", "lr", "tokens"]
        .iter()
        .enumerate()
        .map(|(i, name)| ((*name).to_owned(), i as f64))
        .collect();
    let mut charts = Charts::default();
    for i in 0..40u32 {
        let beats = (i % 4 != 3).then(|| beats(10, 0.05, 0.2 + i as f32 / 100.0, &numbers));
        charts.take(Piece::Row(&beaten(f64::from(i), beats)));
    }
    let html = render(&beaten_view(), charts, &extras());
    let glance = &html[..html.find("<h2>Over time</h2>").unwrap()];
    let at = |label: &str| glance.find(&format!("<dt>{label}</dt>")).unwrap();
    assert!(at("ran") < at("steps") && at("steps") < at("goodput"));
    assert!(at("goodput") < at("memory") && at("memory") < at("samples"));
    assert!(
        glance.contains("300 train steps (last 299) at 10.0/s"),
        "{glance}"
    );
    assert!(glance.contains("75.0% productive (30s of 40s); badput: checkpoint 8s"));
    assert!(
        glance.contains("2 lines not a beat"),
        "the file's errors are warned of"
    );

    let drawn = svgs(&html);
    let step = drawn[0];
    assert!(step.contains("aria-label=\"Step time"), "{step}");
    assert_eq!(step.matches("class=\"spread\"").count(), 1, "{step}");
    let median = step.split("<path class=\"line\" d=\"").nth(1).unwrap();
    let median = &median[..median.find('"').unwrap()];
    assert_eq!(median.matches('M').count(), 1, "one line across: {median}");
    assert!(step.contains(">200ms</text>"), "{step}");
    let small: Vec<&str> = drawn[1..5]
        .iter()
        .map(|svg| {
            assert!(svg.contains("viewBox=\"0 0 450 "), "{svg}");
            let label = &svg[svg.find("aria-label=\"").unwrap() + 12..];
            &label[..label.find('"').unwrap()]
        })
        .collect();
    assert_eq!(small, ["loss", "grad_loss", "a", "b"]);
    assert!(
        drawn[5].contains("aria-label=\"Memory"),
        "the tree's charts follow"
    );
    assert!(html.contains("2 more numbers not drawn: lr, tokens"));
    assert_eq!(html.matches("<div class=\"small-charts\">").count(), 1);
    assert_eq!(html.matches("\"small\":true").count(), 4);
    assert!(html.contains("\"name\":\"fastest to slowest step\",\"upper\""));
}

/// Without beats — a soak recorded before schema 10, or one whose trainer never beat — the page
/// has no step chart, no steps at a glance, and its charts' specs read as they did before.
#[test]
fn a_soak_without_beats_has_no_step_chart_and_its_specs_read_as_before() {
    for heartbeat in [None, Some(None)] {
        let mut charts = Charts::default();
        for i in 0..10u32 {
            let row = SampleRow {
                heartbeat: heartbeat.clone(),
                ..beaten(f64::from(i), None)
            };
            charts.take(Piece::Row(&row));
        }
        let html = render(&view(10.0), charts, &extras());
        for absent in [
            "Step time",
            "<div class=\"small-charts\">",
            "\"band\"",
            "\"small\"",
            "<dt>steps</dt>",
            "<dt>goodput</dt>",
            "class=\"spread\"",
        ] {
            assert!(!html.contains(absent), "{absent} in {heartbeat:?}");
        }
        assert!(svgs(&html)[0].contains("aria-label=\"Memory"));
    }
}

#[test]
fn a_number_below_zero_gets_an_axis_below_zero() {
    let mut charts = Charts::default();
    for i in 0..10u32 {
        let reward = BTreeMap::from([("reward".to_owned(), f64::from(i) / 3.0 - 2.0)]);
        charts.take(Piece::Row(&beaten(
            f64::from(i),
            Some(beats(1, 0.1, 0.1, &reward)),
        )));
    }
    let html = render(&beaten_view(), charts, &extras());
    let reward = svgs(&html)[1];
    assert!(reward.contains("aria-label=\"reward\""), "{reward}");
    for tick in [">-2</text>", ">-1</text>", ">0</text>", ">1</text>"] {
        assert!(reward.contains(tick), "{tick}: {reward}");
    }
}

/// `(label, x)` of each marker of a static chart, in the order drawn.
fn marker_lines(svg: &str) -> Vec<(String, f64)> {
    svg.split("<line class=\"marker\" x1=\"")
        .skip(1)
        .map(|rest| {
            let x = rest[..rest.find('"').unwrap()].parse().unwrap();
            let title = &rest[rest.find("<title>").unwrap() + 7..rest.find("</title>").unwrap()];
            (title.to_owned(), x)
        })
        .collect()
}

/// The text of each `<text>` of a chart whose fill is `fill` (the clock's is `#999`).
fn texts_filled<'a>(svg: &'a str, fill: &str) -> Vec<&'a str> {
    let open = format!("fill=\"{fill}\"");
    svg.split("<text ")
        .skip(1)
        .filter(|t| t[..t.find('>').unwrap()].contains(&open))
        .map(|t| &t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()])
        .collect()
}

/// A soak of 230 s from 14:02:00 UTC, its last progress change seen by the sample after the
/// command exited, its tree's memory just under a MiB and its progress a byte.
fn four_minutes() -> (SoakRecord, Charts) {
    let view = Sketch {
        started_at_us: 1_796_479_320_000_000,
        duration_seconds: Some(230.0),
        failure_kind: Some(FailureKind::StaleProgress),
        reason: "no progress".into(),
        first_progress_seconds: Some(23.0),
        last_progress_seconds: Some(230.05),
        ..Sketch::default()
    }
    .record();
    let mut charts = Charts::default();
    for i in 0..=2301u32 {
        let row = SampleRow {
            // The last after the exit.
            elapsed_seconds: f64::from(i).min(2300.5) * 0.1,
            rss_bytes: 1_040_000,
            processes: 1,
            progress_bytes: u64::from(i > 10),
            ..row(u64::from(i), None)
        };
        charts.take(Piece::Row(&row));
    }
    (view, charts)
}

/// The last progress change, seen by the first sample after the exit, was drawn after (to the
/// right of) the verdict: the verdict's marker is the last, in time and in the drawing.
#[test]
fn the_verdict_marker_is_the_last_in_time_and_in_drawing_order() {
    let (view, charts) = four_minutes();
    let html = render(&view, charts, &extras());
    for svg in svgs(&html) {
        let markers = marker_lines(svg);
        let (last, verdict_x) = markers.last().unwrap();
        assert_eq!(last, "verdict", "{markers:?}");
        assert!(markers.iter().all(|(_, x)| x <= verdict_x), "{markers:?}");
    }
}

/// The clock under the time axis read `14:03` next to `14:02:30`.
#[test]
fn the_clock_under_the_time_axis_keeps_its_seconds_on_whole_minutes() {
    let (view, charts) = four_minutes();
    let html = render(&view, charts, &extras());
    let clock = texts_filled(svgs(&html)[0], "#999");
    assert!(clock.len() >= 4, "{clock:?}");
    assert!(
        clock.contains(&"14:02:30") && clock.contains(&"14:03:00"),
        "{clock:?}"
    );
    assert!(clock.iter().all(|c| c.len() == 8), "{clock:?}");
}

/// An axis of memory read `0 / 0.49 / 0.98 MiB`, and the progress directory's `0.5 B`.
#[test]
fn byte_axes_tick_on_round_numbers_of_their_unit_and_whole_bytes() {
    let (view, charts) = four_minutes();
    let html = render(&view, charts, &extras());
    let drawn = svgs(&html);
    let axis = |title: &str| -> Vec<&str> {
        let svg = drawn
            .iter()
            .find(|s| s.contains(&format!("aria-label=\"{title}")))
            .unwrap();
        texts_filled(svg, "#555")
            .into_iter()
            .filter(|t| t.ends_with('B'))
            .collect()
    };
    assert_eq!(
        axis("Memory"),
        ["0 MiB", "0.25 MiB", "0.5 MiB", "0.75 MiB", "1 MiB"]
    );
    assert_eq!(axis("Progress directory: size"), ["0 B", "1 B"]);
}

/// `max_memory_growth_bytes_per_hour` broke mid-word in a page 700 px wide: a parameter's name
/// may break after its underscores, and only there.
#[test]
fn long_parameter_names_break_at_their_underscores() {
    let html = render(&view(10.0), Charts::default(), &extras());
    assert!(html.contains("<th>max_<wbr>memory_<wbr>growth_<wbr>bytes_<wbr>per_<wbr>hour</th>"));
    let style = &html[html.find("<style>").unwrap()..html.find("</style>").unwrap()];
    assert!(style.contains("th{overflow-wrap:break-word}"), "{style}");
}
