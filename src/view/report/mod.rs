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
mod evidence;
mod html;
pub(crate) mod job;
mod scale;
mod soak;
mod svg;
pub(crate) mod testing;

use std::fmt::Write as _;

use serde_json::json;

pub use data::Charts;
use data::{BLUE, ChartSpec, Charts as Gathered, GREEN, RED};
pub(crate) use soak::of_soak;
use svg::{ChartFrame, Marker};

use evidence::evidence;
use html::{STYLE, escape, pretty, table, warnings_html};

use crate::read::record::SoakRecord;
use crate::time::unix_seconds;
use crate::view::judged::JudgedText;
use crate::view::stepped::SteppedText;

/// How many numbers the script's data may hold: about 1 MB of page for any length of soak.
const SCRIPT_CELLS: usize = 160_000;

const UPLOT_JS: &str = include_str!("vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("vendor/uplot/uPlot.min.css");
const CHARTS_JS: &str = include_str!("charts.js");

/// What the page shows besides the soak's record.
pub struct Extras<'a> {
    /// The soak's events as `history --soak` prints them.
    pub timeline: &'a [String],
    /// The artifact's digest.
    pub digest: &'a str,
    /// The log's chain head when the report was made.
    pub chain_head: &'a str,
}

/// The report of a soak: `record` is its record as every view shows it (its command lines
/// masked), `charts` its rows.
pub(crate) fn render(record: &SoakRecord, mut charts: Gathered, extras: &Extras) -> String {
    // A host without a GPU tool is said once, by the runtime snapshot, not by every sample.
    charts.note_absent_tool(&record.runtime());
    let end = charts
        .last_time()
        .into_iter()
        .chain(record.duration_seconds)
        .fold(1.0_f64, f64::max);
    // The fitted line of the tree's PSS after the warm-up, a derived column.
    let trend = trend_column(record, &charts);
    let extra: Vec<Vec<f64>> = trend.into_iter().collect();
    let specs = charts.specs((!extra.is_empty()).then(|| charts.next_column()));
    let bands = charts.error_bands(end / 400.0);
    let markers = markers(record);
    let frame = ChartFrame {
        end,
        bands: &bands,
        markers: &markers,
        started_at: Some(unix_seconds(record.records.summary.started_at_us)),
        width: svg::WIDTH,
    };
    let mut html = String::with_capacity(256 * 1024);
    head(&mut html, record);
    html.push_str(&glance(record, &charts));
    html.push_str(&evidence(record));
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
    html.push_str(&key(&markers, &bands, &charts));
    sections(&mut html, &specs, &charts, &extra, &frame);
    if specs.is_empty() {
        html.push_str("<p class=\"empty\">no samples to draw</p>");
    }
    details(&mut html, record, extras);
    scripts(&mut html, &charts, &extra, &specs, &frame);
    html.push_str("</body></html>\n");
    html
}

/// Each chart's section, the small ones (the trainer's numbers) side by side where the page is
/// wide enough, followed by the numbers left without a chart.
fn sections(
    html: &mut String,
    specs: &[ChartSpec],
    charts: &Gathered,
    extra: &[Vec<f64>],
    frame: &ChartFrame,
) {
    let mut small = false;
    let close = |html: &mut String| {
        html.push_str("</div>");
        let undrawn = charts.undrawn_numbers();
        if !undrawn.is_empty() {
            let _ = write!(
                html,
                "<p class=\"hint\">{} not drawn: {} (in the artifact's rows).</p>",
                crate::text::count(undrawn.len() as u64, "more number"),
                escape(&undrawn.join(", "))
            );
        }
    };
    for spec in specs {
        if spec.small && !small {
            html.push_str("<div class=\"small-charts\">");
        } else if !spec.small && small {
            close(html);
        }
        small = spec.small;
        let drawn = ChartFrame {
            width: if spec.small {
                svg::SMALL_WIDTH
            } else {
                svg::WIDTH
            },
            ..*frame
        };
        let _ = write!(
            html,
            "<section class=\"chart\" id=\"chart-{id}\"><h3>{title}</h3><div class=\"static\">{svg}{legend}</div><div class=\"live\"></div></section>",
            id = spec.id,
            title = escape(&spec.title),
            svg = svg::chart(spec, charts, extra, &drawn),
            legend = legend(spec),
        );
    }
    if small {
        close(html);
    }
}

/// The page's head and title, the command, and the verdict.
fn head(html: &mut String, record: &SoakRecord) {
    let soak_id = &record.records.soak.start.soak_id;
    let status = record.outcome.status.as_str();
    let _ = write!(
        html,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<title>soak {id}: {status}</title><style>{STYLE}{UPLOT_CSS}</style></head><body>\
<h1>soak {id}</h1><p class=\"command\"><code>{command}</code></p>",
        id = escape(soak_id),
        status = escape(status),
        command = escape(&crate::text::shell_command(
            &record.records.soak.start.command
        )),
    );
    html.push_str(&banner(record));
}

/// The verdict: status, failure kind, reason.
fn banner(record: &SoakRecord) -> String {
    let outcome = &record.outcome;
    let status = outcome.status.as_str();
    let class = match status {
        "passed" => "passed",
        "failed" => "failed",
        _ => "other",
    };
    format!(
        "<div class=\"banner {class}\"><span class=\"kind\">{status}{kind}</span> {reason}</div>",
        status = escape(status),
        kind = outcome
            .failure_kind
            .map(|k| format!(" · {}", escape(k.as_str())))
            .unwrap_or_default(),
        reason = escape(&outcome.reason),
    )
}

/// The figures that decide, at a glance: run time and exit, the trainer's steps (their pace and
/// times, the other phases, the goodput) when it beat, the tree's memory (peak and trend),
/// CPU, each GPU's utilisation, memory and health, the rate of progress, the samples — then the
/// warnings.
fn glance(record: &SoakRecord, charts: &Gathered) -> String {
    let mut figures: Vec<(&str, String)> = Vec::new();
    let exit = match record.exit.map(|e| (e.code, e.signal)) {
        Some((Some(code), _)) => format!("exit code {code}"),
        Some((None, Some(signal))) => format!("killed by signal {signal}"),
        _ => "no exit status".to_owned(),
    };
    let ran = record
        .duration_seconds
        .map_or("?".into(), crate::text::duration);
    figures.push(("ran", format!("{ran}, {exit}")));
    // The trainer's steps lead, when it beat.
    let stepped = record
        .stepped
        .as_ref()
        .map(SteppedText::of)
        .unwrap_or_default();
    figures.extend(stepped.lines);
    let summary = &record.summary;
    let judged = record.judged.as_ref();
    let text = judged
        .map(|j| JudgedText::of(j, record.duration_seconds))
        .unwrap_or_default();
    let said = |label: &'static str| {
        text.lines
            .iter()
            .filter(move |(l, _)| *l == label)
            .map(|(_, line)| line.clone())
    };
    let peak = match judged.and_then(|j| j.peak_tree_pss_bytes) {
        Some(pss) => format!("peak PSS {}", crate::text::bytes(pss)),
        None => format!("peak RSS {}", crate::text::bytes(summary.peak_rss_bytes)),
    };
    let memory: Vec<String> = std::iter::once(peak).chain(said("memory")).collect();
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
    let mut sampled = crate::text::count(summary.samples, "sample");
    sampled.push_str(&format!(
        ", every {}",
        crate::text::duration(record.parameters.sample_interval_seconds)
    ));
    // Samples whose only message is a GPU tool absent from the start did not err: it is noted.
    let erred = summary.sampler_errors.saturating_sub(charts.noted_only());
    if erred > 0 {
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
    warnings_html(&mut html, &stepped.warnings);
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
    if let Some(absent) = charts.absent_tool().filter(|_| !charts.has_gpu_data()) {
        let text = crate::text::foreign(&absent.text);
        figures.push(("GPU", format!("none read: no GPU tool ({text})")));
    }
    figures
}

/// The fitted line of the tree's PSS after the warm-up, a value a row from where it was taken;
/// `None` when the summary judges none.
fn trend_column(record: &SoakRecord, charts: &Gathered) -> Option<Vec<f64>> {
    let trend = record.judged.as_ref()?.memory_trend.as_ref()?;
    let (per_hour, at_since, since) = (
        trend.bytes_per_hour,
        trend.bytes_at_since,
        trend.since_seconds,
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

/// Progress first seen, its last change, and the verdict, drawn last and never before them.
///
/// A change the first sample after the command's exit saw was made before the exit (the sample
/// only looked later): it is drawn at the verdict, not after it.
fn markers(record: &SoakRecord) -> Vec<Marker> {
    let mut markers = Vec::new();
    let progress = &record.progress;
    let verdict = record.duration_seconds;
    let interval = record.parameters.sample_interval_seconds;
    for (seen, label, color) in [
        (progress.first_seen_seconds, "progress first seen", GREEN),
        (progress.last_change_seconds, "last progress change", BLUE),
    ] {
        if let Some(seen) = seen {
            let at = match verdict {
                Some(end) if seen > end && seen <= end + interval => end,
                _ => seen,
            };
            markers.push(Marker::new(at, label, color));
        }
    }
    if let Some(at) = verdict {
        markers.push(Marker::new(at, "verdict", RED));
    }
    markers
}

/// What the markers and the shaded bands mean, each message of the sampler once, and a GPU
/// tool absent from the start as a note.
fn key(markers: &[Marker], bands: &[(f64, f64)], charts: &Gathered) -> String {
    let mut html = String::from("<div class=\"key\">");
    for marker in markers {
        let _ = write!(
            html,
            "<span><i style=\"border-color:{}\" class=\"dash\"></i>{}</span>",
            marker.color,
            escape(&marker.label)
        );
    }
    if !bands.is_empty() {
        html.push_str("<span><i class=\"shade\"></i>sampler errors</span>");
    }
    html.push_str("</div>");
    let gpu_data = charts.has_gpu_data();
    if let Some(absent) = charts.absent_tool() {
        let text = if gpu_data {
            format!(
                "no GPU tool until {}: {} from the start",
                scale::elapsed(absent.last),
                crate::text::foreign(&absent.text)
            )
        } else {
            format!(
                "no GPU tool: {}, so this soak has no GPU data and the GPU charts are left out",
                crate::text::foreign(&absent.text)
            )
        };
        let _ = write!(html, "<p class=\"note\">{}</p>", escape(&text));
    }
    let errors = charts.errors();
    if !errors.is_empty() {
        html.push_str("<ul class=\"errors\">");
        for error in errors {
            let mut text = format!(
                "{}: in {} of {} samples",
                crate::text::foreign(&error.text),
                error.rows,
                charts.rows()
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
        if !gpu_data && charts.absent_tool().is_none() {
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
    if let Some(band) = &spec.band {
        let _ = write!(
            html,
            "<span><i class=\"shade\" style=\"background:{}2e\"></i>{}</span>",
            band.color,
            escape(&band.name)
        );
    }
    html.push_str("</div>");
    html
}

/// Parameters, metadata, leaked processes, output tails, the timeline, the runtime snapshot and
/// what ties the page to the record.
fn details(html: &mut String, record: &SoakRecord, extras: &Extras) {
    let _ = write!(
        html,
        "<h2>Parameters</h2>{}<h2>Metadata</h2>{}",
        table(&serde_json::to_value(&record.parameters).unwrap_or_default()),
        table(&record.metadata()),
    );
    let leaked = record
        .records
        .soak
        .end
        .as_deref()
        .map(|v| &v.end.leaked_processes[..])
        .unwrap_or_default();
    if !leaked.is_empty() {
        html.push_str(
            "<h2>Leaked processes</h2><table><tr><th>pid</th><th>name</th><th>command</th></tr>",
        );
        for process in leaked {
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                process.identity.pid,
                escape(&process.name),
                escape(&crate::text::shell_command(&process.cmdline))
            );
        }
        html.push_str("</table>");
    }
    for (title, tail) in [
        ("Standard output (tail)", &record.output_tail.stdout),
        ("Standard error (tail)", &record.output_tail.stderr),
    ] {
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
        pretty(&record.runtime()),
        escape(extras.digest),
        escape(extras.chain_head),
        escape(crate::read::artifact::schema(record.recorded.form)),
    );
}

/// The chart library, the charts' data and the script that draws them.
fn scripts(
    html: &mut String,
    charts: &Gathered,
    extra: &[Vec<f64>],
    specs: &[ChartSpec],
    frame: &ChartFrame,
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
    let data = data::script_data(charts, extra, &used, frame.end, SCRIPT_CELLS);
    script_tags(html, specs, &used, frame, &data);
}

/// The chart library, the charts' specs and `data` (the columns `used` of them, as JSON) and
/// the script that draws them: the soak's page's and the job's.
fn script_tags(
    html: &mut String,
    specs: &[ChartSpec],
    used: &[usize],
    frame: &ChartFrame,
    data: &str,
) {
    let meta = json!({
        "specs": specs,
        "used": used,
        "end": frame.end,
        "started_at": frame.started_at,
        "bands": frame.bands,
        "markers": frame.markers.iter().map(|m| json!({"at": m.at, "color": m.color, "width": m.width})).collect::<Vec<_>>(),
        "time_steps": scale::TIME_STEPS,
        "size_steps": scale::size_steps(),
    });
    let meta = meta.to_string();
    // `<` is written `\u003c` in the data, so that nothing in it closes the script element.
    let _ = write!(
        html,
        "<script>{UPLOT_JS}</script><script type=\"application/json\" id=\"soak-data\">{},\"data\":{data}}}</script><script>{CHARTS_JS}</script>",
        meta[..meta.len() - 1].replace('<', "\\u003c"),
    );
}

#[cfg(test)]
mod tests;
