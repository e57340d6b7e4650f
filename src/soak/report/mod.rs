//! `soak report`: one self-contained HTML page that explains a soak — at a glance first (the
//! verdict, its reason and the figures that decide), after a failure the evidence of why (what
//! `soak show` prints first), then charts over one time axis, what it ran with, its output
//! tails and its timeline — tied to the record by the artifact's digest and the log's chain
//! head. No external file: it opens from disk or an e-mail attachment, offline.
//!
//! Each chart is drawn twice from the same data: as static SVG (`svg`: what a reader without
//! script, or a printer, gets) and, by the page's script, as a zoomable chart (uPlot, vendored
//! under `vendor/uplot`): a week-long soak is read an hour at a time. Long soaks stay small:
//! the static lines keep two points a unit of width, the script's data a bounded number of
//! values, each bucket of rows by its lowest and highest so that a spike is never dropped.

mod data;
mod scale;
mod svg;

use std::fmt::Write as _;

use serde_json::{Value, json};

pub use data::Charts;
use data::{BLUE, ChartSpec, Charts as Gathered, GREEN, RED};
use svg::{Frame, Marker};

use crate::soak::artifact::explained::{Excerpt, Explained, last_lines};
use crate::soak::artifact::judged::JudgedText;
use crate::soak::artifact::shown::{Found, Judged};

/// How many numbers the script's data may hold: about 1 MB of page for any length of soak.
const SCRIPT_CELLS: usize = 160_000;

const UPLOT_JS: &str = include_str!("vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("vendor/uplot/uPlot.min.css");
const CHARTS_JS: &str = include_str!("charts.js");

/// What the page shows besides the artifact's view.
pub struct Extras<'a> {
    /// The soak's events as `history --soak` prints them.
    pub timeline: &'a [String],
    /// The artifact's digest.
    pub digest: &'a str,
    /// The log's chain head when the report was made.
    pub chain_head: &'a str,
}

/// The report of a soak: `view` is its artifact without `samples`, `charts` its rows.
pub fn render(view: &Value, charts: Gathered, extras: &Extras) -> String {
    let end = charts
        .last_time()
        .into_iter()
        .chain(view["duration_seconds"].as_f64())
        .fold(1.0_f64, f64::max);
    // The fitted line of the tree's PSS after the warm-up, a derived column.
    let trend = trend_column(view, &charts);
    let extra: Vec<Vec<f64>> = trend.into_iter().collect();
    let specs = charts.specs((!extra.is_empty()).then(|| charts.next_column()));
    let bands = charts.error_bands(end / 400.0);
    let markers = markers(view);
    let frame = Frame {
        end,
        bands: &bands,
        markers: &markers,
        started_at: view["started_at"].as_f64(),
    };
    let mut html = String::with_capacity(256 * 1024);
    head(&mut html, view);
    html.push_str(&glance(view, &charts));
    html.push_str(&evidence(view, status_of(view)));
    let _ = write!(
        html,
        "<h2>Over time</h2><p class=\"hint\">Time since the start{clock}. \
<span class=\"zoom-hint\">Drag across a chart to zoom into that time, every chart follows; \
double-click to see the whole run.</span></p>",
        clock = frame
            .started_at
            .map(|s| format!(
                " ({}), clock time in UTC under it",
                crate::text::human_time((s * 1e6) as i64)
            ))
            .unwrap_or_default(),
    );
    html.push_str(&key(
        &markers,
        &bands,
        charts.errors(),
        charts.rows(),
        charts.has_gpu_data(),
    ));
    for spec in &specs {
        let _ = write!(
            html,
            "<section class=\"chart\" id=\"chart-{id}\"><h3>{title}</h3><div class=\"static\">{svg}{legend}</div><div class=\"live\"></div></section>",
            id = spec.id,
            title = escape(&spec.title),
            svg = svg::chart(spec, &charts, &extra, &frame),
            legend = legend(spec),
        );
    }
    if specs.is_empty() {
        html.push_str("<p class=\"empty\">no samples to draw</p>");
    }
    details(&mut html, view, extras);
    scripts(&mut html, &charts, &extra, &specs, &frame);
    html.push_str("</body></html>\n");
    html
}

fn status_of(view: &Value) -> &str {
    view["outcome"]["status"].as_str().unwrap_or("unknown")
}

/// The page's head and title, the command, and the verdict.
fn head(html: &mut String, view: &Value) {
    let soak_id = view["soak_id"].as_str().unwrap_or("?");
    let status = status_of(view);
    let _ = write!(
        html,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<title>soak {id}: {status}</title><style>{STYLE}{UPLOT_CSS}</style></head><body>\
<h1>soak {id}</h1><p class=\"command\"><code>{command}</code></p>",
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
    html.push_str(&banner(view, status));
}

/// The verdict: status, failure kind, reason, exit code or signal, run time.
fn banner(view: &Value, status: &str) -> String {
    let class = match status {
        "passed" => "passed",
        "failed" => "failed",
        _ => "other",
    };
    let outcome = &view["outcome"];
    format!(
        "<div class=\"banner {class}\"><span class=\"kind\">{status}{kind}</span> {reason}</div>",
        status = escape(status),
        kind = outcome["failure_kind"]
            .as_str()
            .map(|k| format!(" · {}", escape(k)))
            .unwrap_or_default(),
        reason = escape(outcome["reason"].as_str().unwrap_or("")),
    )
}

/// The figures that decide, at a glance: run time and exit, the tree's memory (peak and trend),
/// CPU, each GPU's utilisation, memory and health, the rate of progress, the samples — then the
/// warnings.
fn glance(view: &Value, charts: &Gathered) -> String {
    let mut figures: Vec<(&str, String)> = Vec::new();
    let exit = match (
        view["exit"]["code"].as_i64(),
        view["exit"]["signal"].as_i64(),
    ) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => "no exit status".to_owned(),
    };
    let ran = view["duration_seconds"]
        .as_f64()
        .map_or("?".into(), crate::text::duration);
    figures.push(("ran", format!("{ran}, {exit}")));
    let summary = &view["summary"];
    let judged = match Judged::of(view) {
        Ok(judged) => judged,
        Err(e) => {
            figures.push(("resources", format!("do not read: {e}")));
            None
        }
    };
    let text = judged
        .as_ref()
        .map(|j| JudgedText::of(j, view["duration_seconds"].as_f64()))
        .unwrap_or_default();
    let said = |label: &'static str| {
        text.lines
            .iter()
            .filter(move |(l, _)| *l == label)
            .map(|(_, line)| line.clone())
    };
    let peak = summary["peak_tree_pss_bytes"]
        .as_u64()
        .map(|b| format!("peak PSS {}", crate::text::bytes(b)))
        .or_else(|| {
            summary["peak_rss_bytes"]
                .as_u64()
                .map(|b| format!("peak RSS {}", crate::text::bytes(b)))
        });
    let memory: Vec<String> = peak.into_iter().chain(said("memory")).collect();
    if !memory.is_empty() {
        figures.push(("memory", memory.join("; ")));
    }
    if let (Some(mean), Some(peak)) = (charts.mean("cpu"), charts.peak("cpu")) {
        figures.push((
            "CPU",
            format!("mean {mean:.0}%, peak {peak:.0}% of one core"),
        ));
    }
    figures.extend(gpu_figures(charts, said("gpu").collect()));
    figures.extend(said("rate").map(|line| {
        let rate = line.strip_prefix("progress ").map(str::to_owned);
        ("progress", rate.unwrap_or(line))
    }));
    let samples = summary["samples"].as_u64().unwrap_or(charts.rows() as u64);
    let mut sampled = crate::text::count(samples, "sample");
    if let Some(every) = view["parameters"]["sample_interval_seconds"].as_f64() {
        sampled.push_str(&format!(", every {}", crate::text::duration(every)));
    }
    if let Some(erred) = summary["sampler_errors"].as_u64().filter(|n| *n > 0) {
        sampled.push_str(&format!(", {erred} with sampler errors"));
    }
    figures.push(("samples", sampled));
    let mut html = String::from("<section class=\"glance\"><dl>");
    for (label, figure) in &figures {
        let _ = write!(
            html,
            "<div><dt>{}</dt><dd>{}</dd></div>",
            escape(label),
            escape(figure)
        );
    }
    html.push_str("</dl>");
    warnings_html(&mut html, &text.warnings);
    html.push_str("</section>");
    html
}

/// A card a GPU: what the charts show of it, then what the summary judges of its health (its
/// `health` lines, each starting with the GPU's short UUID).
fn gpu_figures(charts: &Gathered, mut health: Vec<String>) -> Vec<(&'static str, String)> {
    let mut figures = Vec::new();
    for (prefix, uuid) in charts.gpus() {
        let short: String = uuid.chars().take(12).collect();
        let mut told = Vec::new();
        if let (Some(mean), Some(peak)) = (
            charts.mean(&format!("{prefix}.util")),
            charts.peak(&format!("{prefix}.util")),
        ) {
            told.push(format!("utilisation mean {mean:.0}%, peak {peak:.0}%"));
        }
        if let Some(peak) = charts.peak(&format!("{prefix}.tree")) {
            told.push(format!(
                "this soak's memory peak {}",
                crate::text::bytes(peak as u64 * 1024 * 1024)
            ));
        }
        if let Some(at) = health.iter().position(|line| line.starts_with(&short)) {
            let line = health.remove(at);
            told.push(line[short.len()..].trim_start_matches(", ").to_owned());
        }
        if !told.is_empty() {
            figures.push(("GPU", format!("{short}: {}", told.join("; "))));
        }
    }
    figures.extend(health.into_iter().map(|line| ("GPU", line)));
    figures
}

/// The fitted line of the tree's PSS after the warm-up, a value a row from where it was taken;
/// `None` when the artifact has none.
fn trend_column(view: &Value, charts: &Gathered) -> Option<Vec<f64>> {
    let trend = &view["summary"]["memory_trend"];
    let (per_hour, at_since, since) = (
        trend["bytes_per_hour"].as_f64()?,
        trend["bytes_at_since"].as_f64()?,
        trend["since_seconds"].as_f64()?,
    );
    Some(
        charts
            .times()
            .iter()
            .map(|&t| {
                if t < since {
                    f64::NAN
                } else {
                    at_since + per_hour * (t - since) / 3600.0
                }
            })
            .collect(),
    )
}

/// Progress first seen, its last change, and the verdict.
fn markers(view: &Value) -> Vec<Marker> {
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
    if let Some(at) = view["duration_seconds"].as_f64() {
        markers.push(Marker {
            at,
            label: "verdict",
            color: RED,
        });
    }
    markers
}

/// What the markers and the shaded bands mean, and each message of the sampler, once.
fn key(
    markers: &[Marker],
    bands: &[(f64, f64)],
    errors: &[data::SamplerError],
    rows: usize,
    gpu_data: bool,
) -> String {
    let mut html = String::from("<div class=\"key\">");
    for marker in markers {
        let _ = write!(
            html,
            "<span><i style=\"border-color:{}\" class=\"dash\"></i>{}</span>",
            marker.color, marker.label
        );
    }
    if !bands.is_empty() {
        html.push_str("<span><i class=\"shade\"></i>sampler errors</span>");
    }
    html.push_str("</div>");
    if !errors.is_empty() {
        html.push_str("<ul class=\"errors\">");
        for error in errors {
            let mut text = format!(
                "{}: in {} of {rows} samples",
                crate::text::one_line(&error.text),
                error.rows
            );
            if error.rows > 1 {
                let _ = write!(
                    text,
                    ", from {} to {}",
                    scale::elapsed(error.first),
                    scale::elapsed(error.last)
                );
            }
            let _ = write!(html, "<li>{}</li>", escape(&text));
        }
        if !gpu_data {
            html.push_str("<li>no GPU data: the GPU charts are left out</li>");
        }
        html.push_str("</ul>");
    }
    html
}

/// A chart's lines, named under it.
fn legend(spec: &ChartSpec) -> String {
    let mut html = String::from("<div class=\"legend\">");
    for series in &spec.series {
        let _ = write!(
            html,
            "<span><i style=\"border-color:{}\"{}></i>{}</span>",
            series.color,
            if series.dash { " class=\"dash\"" } else { "" },
            escape(&series.name)
        );
    }
    html.push_str("</div>");
    html
}

/// Parameters, metadata, leaked processes, output tails, the timeline, the runtime snapshot and
/// what ties the page to the record.
fn details(html: &mut String, view: &Value, extras: &Extras) {
    let _ = write!(
        html,
        "<h2>Parameters</h2>{}<h2>Metadata</h2>{}",
        table(&view["parameters"]),
        table(&view["metadata"]),
    );
    if let Some(leaked) = view["leaked_processes"]
        .as_array()
        .filter(|l| !l.is_empty())
    {
        html.push_str(
            "<h2>Leaked processes</h2><table><tr><th>pid</th><th>name</th><th>command</th></tr>",
        );
        for process in leaked {
            let pid = process["pid"]
                .as_u64()
                .or_else(|| process["identity"]["pid"].as_u64())
                .map_or("?".into(), |p| p.to_string());
            let command = process["cmdline"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                escape(&pid),
                escape(process["name"].as_str().unwrap_or("")),
                escape(&command)
            );
        }
        html.push_str("</table>");
    }
    for (title, key) in [
        ("Standard output (tail)", "stdout"),
        ("Standard error (tail)", "stderr"),
    ] {
        let tail = view["output_tail"][key].as_str().unwrap_or("");
        if !tail.is_empty() {
            // Reversed flex: the box opens at its last lines, the ones that matter.
            let _ = write!(
                html,
                "<h2>{title}</h2><div class=\"tail\"><pre>{}</pre></div>",
                escape(tail)
            );
        }
    }
    let _ = write!(
        html,
        "<h2>Timeline</h2><pre class=\"timeline\">{}</pre>\
<details><summary>Runtime snapshot</summary><pre>{}</pre></details>\
<footer>artifact digest (blake3) <code>{}</code><br>event log chain head <code>{}</code><br>\
schema <code>{}</code></footer>",
        escape(&extras.timeline.join("\n")),
        pretty(&view["runtime"]),
        escape(extras.digest),
        escape(extras.chain_head),
        escape(view["schema"].as_str().unwrap_or("")),
    );
}

/// The chart library, the charts' data and the script that draws them.
fn scripts(
    html: &mut String,
    charts: &Gathered,
    extra: &[Vec<f64>],
    specs: &[ChartSpec],
    frame: &Frame,
) {
    if specs.is_empty() {
        return;
    }
    let mut used: Vec<usize> = specs
        .iter()
        .flat_map(|s| s.series.iter().filter_map(|l| l.column))
        .collect();
    used.sort_unstable();
    used.dedup();
    let meta = json!({
        "specs": specs,
        "used": used,
        "end": frame.end,
        "started_at": frame.started_at,
        "bands": frame.bands,
        "markers": frame.markers.iter().map(|m| json!({"at": m.at, "color": m.color})).collect::<Vec<_>>(),
        "time_steps": scale::TIME_STEPS,
    });
    let meta = meta.to_string();
    let data = data::script_data(charts, extra, &used, frame.end, SCRIPT_CELLS);
    // `<` is written `\u003c` in the data, so that nothing in it closes the script element.
    let _ = write!(
        html,
        "<script>{UPLOT_JS}</script><script type=\"application/json\" id=\"soak-data\">{},\"data\":{data}}}</script><script>{CHARTS_JS}</script>",
        meta[..meta.len() - 1].replace('<', "\\u003c"),
    );
}

/// What tells why, right after the verdict: the evidence captured before the tree was signalled,
/// what the verdict found, GPUs not given back, and the last lines of the output — the lines
/// `soak show` prints first. Nothing for a soak with nothing to tell that did not fail.
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
    warnings_html(html, &explained.warnings);
}

/// Each warning in its box.
fn warnings_html(html: &mut String, warnings: &[String]) {
    for warning in warnings {
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

const STYLE: &str = "*{box-sizing:border-box}body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1100px;padding:16px;color:#222}\
h1{font-size:20px;margin:0 0 4px;overflow-wrap:anywhere}h2{font-size:16px;margin:24px 0 8px;border-bottom:1px solid #ddd}h3{font-size:14px;margin:14px 0 2px}\
.command code{overflow-wrap:anywhere}\
.banner{padding:12px 16px;border-radius:6px;color:#fff;margin:12px 0;overflow-wrap:anywhere}.passed{background:#2e7d32}.failed{background:#c62828}.other{background:#555}\
.banner .kind{font-weight:bold;text-transform:uppercase;margin-right:8px}\
.glance dl{display:grid;grid-template-columns:repeat(auto-fill,minmax(240px,1fr));gap:8px;margin:0}\
.glance dl div{background:#f6f7f9;border-radius:6px;padding:8px 10px}.glance dt{font-size:11px;text-transform:uppercase;color:#666;letter-spacing:.04em}\
.glance dd{margin:2px 0 0;font-size:14px;overflow-wrap:anywhere}\
.hint{font-size:13px;color:#555;margin:4px 0}.zoom-hint{display:none}.zoomable .zoom-hint{display:inline}\
.key,.legend{font-size:12px;color:#333;margin:4px 0}.key span,.legend span{display:inline-block;margin-right:14px}\
.key i,.legend i{display:inline-block;width:18px;height:0;border-top:2px solid;vertical-align:middle;margin-right:5px}\
.key i.dash,.legend i.dash{border-top-style:dashed}.key i.shade{height:10px;border:0;background:rgba(240,160,48,.3)}\
.errors{font-size:13px;margin:4px 0;padding-left:20px;color:#8a4b00}\
svg.chart{width:100%;height:auto;display:block}.live{display:none}.zoomable .live{display:block}.zoomable .static{display:none}\
.uplot{font-family:inherit}.u-legend{font-size:12px}.u-legend th,.u-legend td{border:0;padding:1px 4px}\
table{border-collapse:collapse;font-size:13px;max-width:100%}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top;overflow-wrap:anywhere}\
pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px;max-height:400px;margin:0}.empty{color:#777;font-style:italic}\
.tail{display:flex;flex-direction:column-reverse;max-height:400px;overflow:auto;background:#f6f6f6}.tail pre{max-height:none;overflow:visible}\
pre.timeline{white-space:pre-wrap;overflow-wrap:anywhere;max-height:none}\
footer{margin-top:24px;font-size:12px;color:#555;word-break:break-all}\
.evidence{overflow-wrap:anywhere}.evidence h3{font-size:14px;margin:12px 0 4px;font-family:ui-monospace,monospace}\
.evidence ul{margin:4px 0;padding-left:20px;font-size:13px}.label{font-weight:bold;margin-right:6px}\
.evidence .stack{font-size:12px;color:#555;margin:6px 0 0}.evidence pre{margin:2px 0 6px;max-height:300px}\
.process{border-left:3px solid #c62828;padding:2px 0 2px 10px;margin:8px 0}\
.findings{margin-top:10px}.warn{background:#fff3e0;border-left:4px solid #ef6c00;padding:6px 10px;margin:6px 0;font-size:13px}";

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
    fn text_from_the_record_is_escaped() {
        assert_eq!(escape("<script>&\"'"), "&lt;script&gt;&amp;&quot;&#39;");
        assert_eq!(escape("\u{1b}]0;x\u{7}"), "\\u{1b}]0;x\\u{7}");
    }

    use crate::soak::artifact::stream::{Piece, Row};
    use crate::soak::artifact::v2::{GpuRow, SampleRow};

    fn extras() -> Extras<'static> {
        Extras {
            timeline: &[],
            digest: "d",
            chain_head: "h",
        }
    }

    /// A soak's view (its artifact without samples) that ran `seconds`.
    fn view(seconds: f64) -> Value {
        json!({
            "soak_id": "20261205T120000-ab12",
            "command": ["python3", "train.py"],
            "started_at": 1_796_479_200.0,
            "duration_seconds": seconds,
            "outcome": {"status": "failed", "failure_kind": "stale_progress", "reason": "no progress"},
            "progress": {"first_seen_seconds": seconds * 0.1, "last_change_seconds": seconds * 0.5},
            "summary": {"samples": 0},
            "parameters": {"sample_interval_seconds": 0.1},
        })
    }

    /// The static charts of a page: each `<svg …>…</svg>`.
    fn svgs(html: &str) -> Vec<&str> {
        html.match_indices("<svg class=\"chart\"")
            .map(|(at, _)| &html[at..at + html[at..].find("</svg>").unwrap()])
            .collect()
    }

    #[test]
    fn a_soak_whose_every_sample_erred_is_one_band_and_its_error_said_once() {
        let mut charts = Charts::default();
        for i in 0..300 {
            let row = json!({
                "elapsed_seconds": f64::from(i) * 0.1, "cpu_percent": 50.0, "rss_bytes": 1 << 20,
                "processes": 1, "threads": 1, "open_fds": 4, "progress_bytes": i, "progress_files": i,
                "errors": ["`nvidia-smi` was not found"],
            });
            charts.take(Piece::Row(Row::V1(&row)));
        }
        let html = render(&view(30.0), charts, &extras());
        let drawn = svgs(&html);
        assert!(drawn.len() >= 4, "{} charts", drawn.len());
        for svg in drawn {
            assert_eq!(svg.matches("class=\"band\"").count(), 1, "{svg}");
            // Progress first seen, its last change, the verdict: nothing a sample.
            assert_eq!(svg.matches("class=\"marker\"").count(), 3, "{svg}");
        }
        assert_eq!(html.matches("`nvidia-smi` was not found").count(), 1);
        assert!(html.contains("in 300 of 300 samples"));
        assert!(html.contains("no GPU data"));
        assert!(
            !html.contains("GPU utilisation"),
            "no GPU chart without GPU data"
        );
    }

    /// `n` rows a `step` seconds apart, of two GPUs, the memory growing with a spike at `spike`.
    fn long_soak(n: u32, step: f64, spike: u32) -> Charts {
        let mut charts = Charts::default();
        for i in 0..n {
            let gpus = ["GPU-1111aaaa-0000", "GPU-2222bbbb-0000"]
                .map(|uuid| GpuRow {
                    index: 0,
                    memory_total_mib: Some(143_771),
                    memory_used_mib: Some(40_000 + u64::from(i % 97)),
                    tree_memory_mib: Some(38_000 + u64::from(i % 89)),
                    utilization_percent: Some(90 + i % 11),
                    uuid,
                })
                .to_vec();
            let row = SampleRow {
                after_exit: false,
                cpu_percent: Some(f64::from(i % 400) * 0.37),
                cpu_seconds: f64::from(i),
                elapsed_seconds: f64::from(i) * step,
                errors: &[],
                gpus: Some(gpus),
                host_gpu_memory_used_mib: None,
                index: u64::from(i),
                open_fds: 40 + u64::from(i % 7),
                processes: 60,
                progress_bytes: u64::from(i) * 1_000_003,
                progress_files: u64::from(i / 100),
                read_bytes: 0,
                rss_bytes: 8_000_000_000
                    + u64::from(i) * 4096
                    + if i == spike { 1 << 33 } else { 0 },
                sampler_cost_us: 300,
                threads: 400 + u64::from(i % 13),
                tree_gpu_memory_mib: None,
                write_bytes: 0,
            };
            charts.take(Piece::Row(Row::V2(&row)));
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
        leaked["leaked_processes"] = json!([
            {"pid": 4242, "start_ticks": 1, "name": "sleep", "cmdline": ["sleep", "600"]}
        ]);
        let html = render(&leaked, Charts::default(), &extras());
        assert!(
            html.contains("<tr><td>4242</td><td>sleep</td><td><code>sleep 600</code></td></tr>")
        );
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
}
