//! The report's zoomable charts in a real browser: what their axes and legends read once the
//! page's script drew them (uPlot draws axes on a canvas; the script hands its charts to a
//! probe appended to the page, which writes what they read into the DOM).

use serde_json::{Value, json};
use unilab::testing::artifact::{Piece, SampleRow};
use unilab::testing::report::{Charts, Extras, Sketch, render_sketch};

use crate::common::{chromium, chromium_dom, private_tempdir};

/// Writes what each chart's axes and legend read, and the script's labels of a few made-up
/// axes, as JSON in `<pre id="probe">`.
const PROBE: &str = r#"<script>
(function () {
  var out = { charts: [], legends: [] };
  var c = window.unilabCharts;
  if (c) {
    out.charts = c.plots.map(function (p) {
      return { id: p.root.closest("section").id, axes: p.axes.map(function (a) { return a._values || []; }) };
    });
    out.labels = {
      mib: c.axisLabels("bytes", [0, 524288, 1048576, 1572864], 1.7e6),
      kib: c.axisLabels("bytes", [0, 204800, 409600, 614400], 6.5e5),
      bytes: c.axisLabels("bytes", [0, 1, 2], 2.1),
      gpu: c.axisLabels("mebibytes", [0, 512, 1024, 1536], 1600),
      steps: c.sizeSteps("bytes").slice(0, 3),
      clock: c.clocks(1796479320, [0, 30, 60, 90]),
      minutes: c.clocks(1796479320, [0, 60, 120])
    };
  }
  document.querySelectorAll(".u-legend").forEach(function (l) {
    out.legends.push({
      live: l.classList.contains("u-live"),
      values: Array.prototype.map.call(l.querySelectorAll(".u-value"), function (v) { return v.textContent; })
    });
  });
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"#;

/// A soak of 230 s from 14:02:00 UTC whose tree held just under a MiB and whose progress is a
/// byte: the axes that read `14:03` beside `14:02:30`, `0.49 MiB` and `0.5 B`.
fn page() -> String {
    let soak = Sketch {
        soak_id: "20261205T140200-ab12".into(),
        started_at_us: 1_796_479_320_000_000,
        duration_seconds: Some(230.0),
        reason: "the command exited 0".into(),
        first_progress_seconds: Some(1.1),
        last_progress_seconds: Some(230.05),
        sample_interval_seconds: 0.1,
        samples: 2302,
        ..Sketch::default()
    };
    let mut charts = Charts::default();
    for i in 0..=2301u32 {
        let row = SampleRow {
            after_exit: Some(i > 2300),
            cpu_percent: Some(f64::from(i % 50)),
            cpu_seconds: 0.0,
            elapsed_seconds: f64::from(i).min(2300.5) * 0.1,
            errors: &[],
            gpus: None,
            heartbeat: None,
            host_gpu_memory_used_mib: None,
            index: u64::from(i),
            open_fds: 4,
            processes: 1,
            progress_bytes: u64::from(i > 10),
            progress_files: 1,
            read_bytes: 0,
            rss_bytes: 1_040_000,
            sampler_cost_us: 100,
            threads: 1,
            tree_gpu_memory_mib: None,
            tree_pss_bytes: Some(1_000_000),
            write_bytes: 0,
            gpu_utilization_percent: None,
            last_progress_at: None,
            progress_seen: None,
            progress: None,
        };
        charts.take(Piece::Row(&row));
    }
    let extras = Extras {
        timeline: &[],
        digest: "d",
        chain_head: "h",
    };
    render_sketch(&soak, charts, &extras).replace("</body>", &format!("{PROBE}</body>"))
}

fn probe(dom: &str) -> Value {
    let at = dom.find("<pre id=\"probe\">").expect("the probe ran") + "<pre id=\"probe\">".len();
    let text = &dom[at..at + dom[at..].find("</pre>").unwrap()];
    serde_json::from_str(&text.replace("&quot;", "\"").replace("&amp;", "&")).unwrap()
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// The zoomable charts' legends read `time: – tree CPU: –` until a pointer hovered them; their
/// clock dropped the seconds of whole minutes beside ticks that kept theirs; a size axis read
/// `0 / 0.49 / 0.98 MiB` (steps of 500 KiB read in MiB) and had a `0.5 B` tick.
#[test]
fn the_zoomable_charts_read_round_sizes_one_clock_format_and_names_at_rest() {
    let Some(browser) = chromium() else {
        eprintln!("skipped the browser check: no chromium on this host");
        return;
    };
    let home = private_tempdir("unilab-report-axes-");
    let page_path = home.path().join("report.html");
    std::fs::write(&page_path, page()).unwrap();
    for width in [1400, 700] {
        let out = probe(&chromium_dom(&browser, home.path(), &page_path, width));
        // At rest a legend names its lines: no placeholder values, no `time` row to fill.
        let legends = out["legends"].as_array().unwrap();
        assert!(legends.len() >= 4, "{out}");
        for legend in legends {
            assert_eq!(legend["live"], false, "at {width} px: {legend}");
            assert!(
                strings(&legend["values"]).iter().all(|v| v.is_empty()),
                "{legend}"
            );
        }
        let charts = out["charts"].as_array().unwrap();
        assert_eq!(charts.len(), legends.len(), "{out}");
        let mut sized = 0;
        for chart in charts {
            let axes = chart["axes"].as_array().unwrap();
            // Elapsed time, the clock under it, the values.
            assert_eq!(axes.len(), 3, "{chart}");
            let clock = strings(&axes[1]);
            assert!(clock.len() >= 3, "{chart}");
            let widths: Vec<usize> = clock.iter().map(|c| c.len()).collect();
            assert!(
                widths.iter().all(|w| *w == widths[0]),
                "at {width} px: {clock:?}"
            );
            let id = chart["id"].as_str().unwrap();
            if id == "chart-memory" || id == "chart-progress_bytes" {
                sized += 1;
                let labels = strings(&axes[2]);
                assert!(!labels.is_empty(), "{id} at {width} px: {chart}");
                for label in labels {
                    let (number, unit) = label.split_once(' ').unwrap();
                    let decimals = number.split_once('.').map_or("", |(_, d)| d);
                    assert!(
                        ["", "25", "5", "75"].contains(&decimals)
                            && (unit != "B" || decimals.is_empty()),
                        "{id} at {width} px: {:?}",
                        axes[2]
                    );
                }
            }
        }
        assert_eq!(sized, 2, "the memory and progress size charts: {out}");
        let labels = &out["labels"];
        assert_eq!(
            strings(&labels["mib"]),
            ["0 MiB", "0.5 MiB", "1 MiB", "1.5 MiB"]
        );
        assert_eq!(
            strings(&labels["kib"]),
            ["0 KiB", "200 KiB", "400 KiB", "600 KiB"]
        );
        assert_eq!(strings(&labels["bytes"]), ["0 B", "1 B", "2 B"]);
        assert_eq!(
            strings(&labels["gpu"]),
            ["0 GiB", "0.5 GiB", "1 GiB", "1.5 GiB"]
        );
        assert_eq!(labels["steps"], json!([1, 2, 5]));
        assert_eq!(
            strings(&labels["clock"]),
            ["14:02:00", "14:02:30", "14:03:00", "14:03:30"]
        );
        assert_eq!(strings(&labels["minutes"]), ["14:02", "14:03", "14:04"]);
    }
}
