//! `soak report`: one self-contained HTML page that explains a soak at a glance — the verdict,
//! after a failure the evidence of why (what `soak show` prints first), charts over one time
//! axis, what it ran with, its output tails and its timeline — tied to the record by the
//! artifact's digest and the log's chain head. No script, no external file: it opens from disk
//! or an e-mail attachment.
//!
//! Charts are SVG drawn by `plotters`. Long soaks stay small: each series is decimated to two
//! points per pixel column, the column's minimum and maximum, so a spike is never dropped.

use std::fmt::Write as _;

use plotters::prelude::*;
use serde_json::Value;

use crate::soak::artifact::explained::{Excerpt, Explained, last_lines};
use crate::soak::artifact::judged::JudgedText;
use crate::soak::artifact::shown::{Found, Judged};
use crate::soak::artifact::stream::{Piece, Row};

/// Chart width in SVG pixels; also the decimation's number of columns.
const WIDTH: u32 = 960;
const HEIGHT: u32 = 220;

/// A series: its name and its points (elapsed seconds, value).
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
}

/// A vertical marker on every chart: when and what.
struct Marker {
    at: f64,
    label: &'static str,
    color: RGBColor,
}

/// What the page shows besides the artifact's view.
pub struct Extras<'a> {
    /// The soak's events as `history --soak` prints them.
    pub timeline: &'a [String],
    /// The artifact's digest.
    pub digest: &'a str,
    /// The log's chain head when the report was made.
    pub chain_head: &'a str,
}

/// The charts' series, gathered one row of `samples` at a time (from the artifact's stream, so
/// that the whole artifact is never held).
#[derive(Default)]
pub struct Charts {
    cpu: Vec<(f64, f64)>,
    /// The tree's proportional set size (schema 6), where known.
    pss: Vec<(f64, f64)>,
    rss: Vec<(f64, f64)>,
    processes: Vec<(f64, f64)>,
    threads: Vec<(f64, f64)>,
    progress_bytes: Vec<(f64, f64)>,
    progress_files: Vec<(f64, f64)>,
    utilization: Vec<Series>,
    memory: Vec<Series>,
    errors: Vec<f64>,
}

/// A GPU of a row: its UUID, utilisation, the host's memory on it and the tree's.
type GpuPoint<'a> = (&'a str, Option<f64>, Option<f64>, Option<f64>);

impl Charts {
    pub fn take(&mut self, piece: Piece<'_>) {
        match piece {
            Piece::Restart => *self = Charts::default(),
            Piece::Row(Row::V4(row)) => {
                if let Some(pss) = row.tree_pss_bytes {
                    self.pss
                        .push((row.base.elapsed_seconds, pss as f64 / (1024.0 * 1024.0)));
                }
                self.take(Piece::Row(Row::V2(&row.base)));
            }
            Piece::Row(Row::V2(row)) => {
                let gpus: Vec<GpuPoint> = row
                    .gpus
                    .iter()
                    .flatten()
                    .map(|g| {
                        (
                            g.uuid,
                            g.utilization_percent.map(f64::from),
                            g.memory_used_mib.map(|m| m as f64),
                            g.tree_memory_mib.map(|m| m as f64),
                        )
                    })
                    .collect();
                self.add(
                    row.elapsed_seconds,
                    [
                        row.cpu_percent,
                        Some(row.rss_bytes as f64),
                        Some(row.processes as f64),
                        Some(row.threads as f64),
                        Some(row.progress_bytes as f64),
                        Some(row.progress_files as f64),
                    ],
                    !row.errors.is_empty(),
                    &gpus,
                );
            }
            // Schema 1's rows: no per-GPU list.
            Piece::Row(Row::V1(row)) => self.add(
                row["elapsed_seconds"].as_f64().unwrap_or(0.0),
                [
                    "cpu_percent",
                    "rss_bytes",
                    "processes",
                    "threads",
                    "progress_bytes",
                    "progress_files",
                ]
                .map(|key| row[key].as_f64()),
                row["errors"].as_array().is_some_and(|e| !e.is_empty()),
                &[],
            ),
        }
    }

    fn add(&mut self, at: f64, values: [Option<f64>; 6], error: bool, gpus: &[GpuPoint]) {
        const MIB: f64 = 1024.0 * 1024.0;
        let [cpu, rss, processes, threads, bytes, files] = values;
        for (series, value, scale) in [
            (&mut self.cpu, cpu, 1.0),
            (&mut self.rss, rss, 1.0 / MIB),
            (&mut self.processes, processes, 1.0),
            (&mut self.threads, threads, 1.0),
            (&mut self.progress_bytes, bytes, 1.0 / MIB),
            (&mut self.progress_files, files, 1.0),
        ] {
            if let Some(value) = value {
                series.push((at, value * scale));
            }
        }
        if error {
            self.errors.push(at);
        }
        for &(uuid, utilization, host, tree) in gpus {
            let short: String = uuid.chars().take(12).collect();
            push_to(&mut self.utilization, &short, (at, utilization));
            push_to(&mut self.memory, &format!("{short} host"), (at, host));
            push_to(&mut self.memory, &format!("{short} this soak"), (at, tree));
        }
    }
}

/// Adds a point to the series `name` of `list`, when its value is known.
fn push_to(list: &mut Vec<Series>, name: &str, (at, value): (f64, Option<f64>)) {
    let Some(value) = value else { return };
    match list.iter_mut().find(|s| s.name == name) {
        Some(series) => series.points.push((at, value)),
        None => list.push(Series {
            name: name.to_owned(),
            points: vec![(at, value)],
        }),
    }
}

/// The report of a soak: `view` is its artifact without `samples`, `charts` its rows.
pub fn render(view: &Value, charts: Charts, extras: &Extras) -> String {
    let end = [&charts.cpu, &charts.rss, &charts.processes]
        .iter()
        .filter_map(|s| s.last().map(|p| p.0))
        .fold(0.0_f64, f64::max)
        .max(1.0);
    let markers = markers(view, &charts.errors);
    let series = |name: &str, points: Vec<(f64, f64)>| Series {
        name: name.to_owned(),
        points,
    };
    let mut drawn = vec![
        chart(
            "CPU (% of one core)",
            &[series("tree CPU %", charts.cpu)],
            end,
            &markers,
        ),
        chart(
            "Memory (MiB)",
            &if charts.pss.is_empty() {
                vec![series("tree RSS", charts.rss)]
            } else {
                vec![
                    series("tree PSS", charts.pss),
                    series("PSS trend after the warm-up", pss_trend_line(view, end)),
                    series("tree RSS (shared pages counted once a process)", charts.rss),
                ]
            },
            end,
            &markers,
        ),
        chart(
            "Processes and threads",
            &[
                series("processes", charts.processes),
                series("threads", charts.threads),
            ],
            end,
            &markers,
        ),
    ];
    if !charts.utilization.is_empty() {
        drawn.push(chart(
            "GPU utilisation (%)",
            &charts.utilization,
            end,
            &markers,
        ));
        drawn.push(chart("GPU memory (MiB)", &charts.memory, end, &markers));
    }
    drawn.push(chart(
        "Progress directory",
        &[
            series("bytes (MiB)", charts.progress_bytes),
            series("files", charts.progress_files),
        ],
        end,
        &markers,
    ));
    page(view, extras, &drawn, &markers)
}

/// Progress first seen, its last change, sampler errors, and the end of the run.
fn markers(view: &Value, errors: &[f64]) -> Vec<Marker> {
    let mut markers = Vec::new();
    let progress = &view["progress"];
    for (key, label, color) in [
        ("first_seen_seconds", "progress first seen", GREEN),
        ("last_change_seconds", "last progress change", BLUE),
    ] {
        if let Some(at) = progress[key].as_f64() {
            markers.push(Marker { at, label, color });
        }
    }
    for &at in errors {
        markers.push(Marker {
            at,
            label: "sampler error",
            color: RGBColor(230, 150, 0),
        });
    }
    if let Some(at) = view["duration_seconds"].as_f64() {
        markers.push(Marker {
            at,
            label: "verdict",
            color: RED,
        });
    }
    markers
}

/// At most two points per pixel column — the column's minimum and maximum, in time order — so
/// a 100,000-sample series draws as fast as a short one and keeps every spike.
fn decimate(points: &[(f64, f64)], end: f64) -> Vec<(f64, f64)> {
    if points.len() <= 2 * WIDTH as usize {
        return points.to_vec();
    }
    let mut out = Vec::with_capacity(2 * WIDTH as usize);
    let column = |x: f64| ((x / end) * f64::from(WIDTH)) as i64;
    let mut start = 0;
    while start < points.len() {
        let col = column(points[start].0);
        let mut stop = start;
        while stop < points.len() && column(points[stop].0) == col {
            stop += 1;
        }
        let bucket = &points[start..stop];
        let lowest = bucket.iter().min_by(|a, b| a.1.total_cmp(&b.1));
        let highest = bucket.iter().max_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some(&lo), Some(&hi)) = (lowest, highest) {
            if lo.0 <= hi.0 {
                out.extend([lo, hi]);
            } else {
                out.extend([hi, lo]);
            }
        }
        start = stop;
    }
    out
}

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
];

/// One chart as an SVG element; a note instead when there is nothing to draw.
fn chart(title: &str, series: &[Series], end: f64, markers: &[Marker]) -> String {
    let top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0_f64, f64::max);
    if series.iter().all(|s| s.points.is_empty()) {
        return format!("<p class=\"empty\">{}: no readings</p>", escape(title));
    }
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    let mut svg = String::new();
    let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..end, 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the start")
            .light_line_style(RGBColor(235, 235, 235))
            .draw()?;
        for marker in markers {
            chart.draw_series(LineSeries::new(
                [(marker.at, 0.0), (marker.at, top)],
                marker.color.mix(0.5).stroke_width(1),
            ))?;
        }
        for (i, s) in series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(
                    decimate(&s.points, end),
                    color.stroke_width(2),
                ))?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
        root.present()?;
        Ok(())
    })();
    match drawn {
        Ok(()) => format!("<figure>{svg}</figure>"),
        Err(e) => format!(
            "<p class=\"empty\">{}: cannot draw it ({})</p>",
            escape(title),
            escape(&e.to_string())
        ),
    }
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn pretty(value: &Value) -> String {
    escape(&serde_json::to_string_pretty(value).unwrap_or_default())
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1000px;padding:16px;color:#222}\
h1{font-size:20px;margin:0 0 8px}h2{font-size:16px;margin:24px 0 8px;border-bottom:1px solid #ddd}\
.banner{padding:12px 16px;border-radius:6px;color:#fff;margin:12px 0}.passed{background:#2e7d32}.failed{background:#c62828}.other{background:#555}\
.banner .kind{font-weight:bold;text-transform:uppercase;margin-right:8px}figure{margin:8px 0}\
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}\
pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px;max-height:400px}.empty{color:#777;font-style:italic}\
.legend span{display:inline-block;margin-right:14px;font-size:12px}footer{margin-top:24px;font-size:12px;color:#555;word-break:break-all}\
.evidence{overflow-wrap:anywhere}.evidence h3{font-size:14px;margin:12px 0 4px;font-family:ui-monospace,monospace}\
.evidence ul{margin:4px 0;padding-left:20px;font-size:13px}.evidence .label{font-weight:bold;margin-right:6px}\
.evidence .stack{font-size:12px;color:#555;margin:6px 0 0}.evidence pre{margin:2px 0 6px;max-height:300px}\
.process{border-left:3px solid #c62828;padding:2px 0 2px 10px;margin:8px 0}\
.findings{margin-top:10px}.warn{background:#fff3e0;border-left:4px solid #ef6c00;padding:6px 10px;margin:6px 0;font-size:13px}";

fn page(view: &Value, extras: &Extras, charts: &[String], markers: &[Marker]) -> String {
    let mut html = String::with_capacity(64 * 1024);
    let soak_id = view["soak_id"].as_str().unwrap_or("?");
    let outcome = &view["outcome"];
    let status = outcome["status"].as_str().unwrap_or("unknown");
    let class = match status {
        "passed" => "passed",
        "failed" => "failed",
        _ => "other",
    };
    let _ = write!(
        html,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<title>soak {id}: {status}</title><style>{STYLE}</style></head><body>\
<h1>soak {id}</h1><p><code>{command}</code></p>",
        id = escape(soak_id),
        status = escape(status),
        command = escape(
            &view["command"]
                .as_array()
                .map(|a| a
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" "))
                .unwrap_or_default()
        ),
    );
    html.push_str(&banner(view, status, class));
    html.push_str(&evidence(view, status));
    html.push_str(&resources(view));
    html.push_str(&legend(markers));
    html.push_str("<h2>Over time</h2>");
    for chart in charts {
        html.push_str(chart);
    }
    let _ = write!(
        html,
        "<h2>Parameters</h2>{}<h2>Metadata</h2>{}",
        table(&view["parameters"]),
        table(&view["metadata"]),
    );
    let leaked = view["leaked_processes"].as_array().map_or(0, Vec::len);
    if leaked > 0 {
        let _ = write!(
            html,
            "<h2>Leaked processes</h2><pre>{}</pre>",
            pretty(&view["leaked_processes"])
        );
    }
    for (title, key) in [
        ("Standard output (tail)", "stdout"),
        ("Standard error (tail)", "stderr"),
    ] {
        let tail = view["output_tail"][key].as_str().unwrap_or("");
        if !tail.is_empty() {
            let _ = write!(html, "<h2>{title}</h2><pre>{}</pre>", escape(tail));
        }
    }
    let _ = writeln!(
        html,
        "<h2>Timeline</h2><pre>{}</pre>\
<details><summary>Runtime snapshot</summary><pre>{}</pre></details>\
<footer>artifact digest (blake3) <code>{}</code><br>event log chain head <code>{}</code><br>\
schema <code>{}</code></footer></body></html>",
        escape(&extras.timeline.join("\n")),
        pretty(&view["runtime"]),
        escape(extras.digest),
        escape(extras.chain_head),
        escape(view["schema"].as_str().unwrap_or("")),
    );
    html
}

/// The verdict: status, failure kind, reason, exit code or signal, run time.
fn banner(view: &Value, status: &str, class: &str) -> String {
    let outcome = &view["outcome"];
    let exit = match (
        view["exit"]["code"].as_i64(),
        view["exit"]["signal"].as_i64(),
    ) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => "no exit status".to_owned(),
    };
    format!(
        "<div class=\"banner {class}\"><span class=\"kind\">{status}{kind}</span>{reason} <br><small>{exit}; ran {ran} s</small></div>",
        status = escape(status),
        kind = outcome["failure_kind"]
            .as_str()
            .map(|k| format!(" · {}", escape(k)))
            .unwrap_or_default(),
        reason = escape(outcome["reason"].as_str().unwrap_or("")),
        exit = escape(&exit),
        ran = view["duration_seconds"]
            .as_f64()
            .map_or("?".into(), |d| format!("{d:.1}")),
    )
}

/// What tells why, right after the verdict: the evidence captured before the tree was signalled,
/// what the verdict found, GPUs not given back, and the last lines of the output — the lines
/// `soak show` prints first. Nothing for a soak with nothing to tell that did not fail.
/// What the summary judges of the resources (`/4` on): the memory trend, each GPU's health and
/// the rate of progress, then the warnings; nothing for older schemas.
fn resources(view: &Value) -> String {
    let judged = match Judged::of(view) {
        Ok(Some(judged)) => judged,
        Ok(None) => return String::new(),
        Err(e) => {
            return format!(
                "<p class=\"empty\">the resources do not read: {}</p>",
                escape(&e.to_string())
            );
        }
    };
    let text = JudgedText::of(&judged, view["duration_seconds"].as_f64());
    if text.lines.is_empty() && text.warnings.is_empty() {
        return String::new();
    }
    let mut html = String::from("<h2>Resources</h2><ul>");
    for (label, line) in &text.lines {
        let _ = write!(html, "<li><b>{}</b>: {}</li>", escape(label), escape(line));
    }
    for warned in &text.warnings {
        let _ = write!(html, "<li class=\"warn\">warning: {}</li>", escape(warned));
    }
    html.push_str("</ul>");
    html
}

/// The fitted line of the tree's PSS after the warm-up (MiB against seconds), from where it was
/// taken to `end`; empty when the artifact has none.
fn pss_trend_line(view: &Value, end: f64) -> Vec<(f64, f64)> {
    let trend = &view["summary"]["memory_trend"];
    let (Some(per_hour), Some(at_since), Some(since)) = (
        trend["bytes_per_hour"].as_f64(),
        trend["bytes_at_since"].as_f64(),
        trend["since_seconds"].as_f64(),
    ) else {
        return Vec::new();
    };
    const MIB: f64 = 1024.0 * 1024.0;
    let at_end = at_since + per_hour * (end - since).max(0.0) / 3600.0;
    vec![(since, at_since / MIB), (end.max(since), at_end / MIB)]
}

fn evidence(view: &Value, status: &str) -> String {
    let explained = match Found::of(view) {
        Ok(found) => found.as_ref().map(Explained::of).filter(|e| !e.is_empty()),
        Err(e) => {
            return format!(
                "<p class=\"empty\">the evidence does not read: {}</p>",
                escape(&e.to_string())
            );
        }
    };
    if explained.is_none() && status != "failed" {
        return String::new();
    }
    let mut html = String::from("<section class=\"evidence\"><h2>Evidence</h2>");
    if let Some(explained) = &explained {
        explained_html(&mut html, explained);
    }
    for key in ["stdout", "stderr"] {
        let tail = last_lines(view["output_tail"][key].as_str().unwrap_or(""));
        if !tail.is_empty() {
            let title = format!(
                "last {} of {key}",
                crate::text::count(tail.len() as u64, "line")
            );
            let lines = tail.iter().map(|l| (*l).to_owned()).collect();
            pre_html(
                &mut html,
                &title,
                &Excerpt {
                    lines,
                    left_out: None,
                },
            );
        }
    }
    html.push_str("</section>");
    html
}

/// The evidence (each process in a box: its threads, its stacks pre-formatted), the findings
/// and the warnings, each line escaped.
fn explained_html(html: &mut String, explained: &Explained) {
    if let Some(evidence) = &explained.evidence {
        let _ = write!(html, "<p>{}</p>", escape(&evidence.summary));
        for process in &evidence.processes {
            let _ = write!(
                html,
                "<div class=\"process\"><h3>{}</h3>",
                escape(&process.title)
            );
            if !process.command.is_empty() {
                let _ = write!(html, "<code>$ {}</code>", escape(&process.command));
            }
            list_html(html, process.threads.iter().map(|t| ("", t.as_str())));
            if let Some(stack) = &process.kernel_stack {
                pre_html(html, "kernel stack", stack);
            }
            if let Some(stack) = &process.python_stack {
                pre_html(html, "python stack (py-spy)", stack);
            }
            html.push_str("</div>");
        }
        list_html(
            html,
            evidence
                .more_processes
                .iter()
                .map(|m| ("", m.as_str()))
                .chain(evidence.cgroup.iter().map(|c| ("cgroup", c.as_str())))
                .chain(
                    evidence
                        .kernel_messages
                        .iter()
                        .map(|l| ("kernel", l.as_str())),
                )
                .chain(
                    evidence
                        .unavailable
                        .iter()
                        .map(|u| ("not captured", u.as_str())),
                ),
        );
    }
    if !explained.findings.is_empty() {
        html.push_str("<div class=\"findings\">");
        list_html(
            html,
            explained.findings.iter().map(|(l, f)| (*l, f.as_str())),
        );
        html.push_str("</div>");
    }
    for warning in &explained.warnings {
        let _ = write!(
            html,
            "<div class=\"warn\"><span class=\"label\">warning</span>{}</div>",
            escape(warning)
        );
    }
}

/// Lines as a list, each after its label in bold (when it has one).
fn list_html<'a>(html: &mut String, items: impl Iterator<Item = (&'a str, &'a str)>) {
    html.push_str("<ul>");
    for (label, text) in items {
        html.push_str("<li>");
        if !label.is_empty() {
            let _ = write!(html, "<span class=\"label\">{}</span>", escape(label));
        }
        let _ = write!(html, "{}</li>", escape(text));
    }
    html.push_str("</ul>");
}

/// An excerpt pre-formatted under its title, with what was left out as its last line.
fn pre_html(html: &mut String, title: &str, excerpt: &Excerpt) {
    let mut text = excerpt.lines.join("\n");
    if let Some(more) = &excerpt.left_out {
        text.push('\n');
        text.push_str(more);
    }
    let _ = write!(
        html,
        "<p class=\"stack\">{}</p><pre>{}</pre>",
        escape(title),
        escape(&text)
    );
}

/// What the vertical markers on the charts mean.
fn legend(markers: &[Marker]) -> String {
    let mut html = String::from("<div class=\"legend\">");
    let mut seen: Vec<&str> = Vec::new();
    for marker in markers {
        if !seen.contains(&marker.label) {
            seen.push(marker.label);
            let RGBColor(r, g, b) = marker.color;
            let _ = write!(
                html,
                "<span><span style=\"color:rgb({r},{g},{b})\">│</span> {}</span>",
                marker.label
            );
        }
    }
    html.push_str("</div>");
    html
}

/// A flat JSON object as a two-column table.
fn table(object: &Value) -> String {
    let Some(map) = object.as_object() else {
        return "<p class=\"empty\">none</p>".into();
    };
    if map.is_empty() {
        return "<p class=\"empty\">none</p>".into();
    }
    let mut html = String::from("<table>");
    for (key, value) in map {
        let shown = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let _ = write!(
            html,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(key),
            escape(&shown)
        );
    }
    html.push_str("</table>");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimation_keeps_every_spike_and_two_points_a_column() {
        let mut points: Vec<(f64, f64)> = (0..100_000).map(|i| (f64::from(i), 1.0)).collect();
        points[54_321].1 = 500.0;
        points[777].1 = -3.0;
        let out = decimate(&points, 100_000.0);
        assert!(out.len() <= 2 * (WIDTH as usize + 1), "{}", out.len());
        assert!(out.iter().any(|p| p.1 == 500.0));
        assert!(out.iter().any(|p| p.1 == -3.0));
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0), "in time order");
    }

    #[test]
    fn text_from_the_record_is_escaped() {
        assert_eq!(escape("<script>&\"'"), "&lt;script&gt;&amp;&quot;&#39;");
        assert_eq!(escape("\u{1b}]0;x\u{7}"), "\\u{1b}]0;x\\u{7}");
    }
}
