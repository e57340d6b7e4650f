//! `job report`: a job's page — what `job show` says, as one self-contained HTML file like the
//! soak report's (no external file; it opens offline): at a glance first (the suspect and why,
//! how its ranks stand, the verdict's lines, the alarm as written, warnings for host logs that
//! could not be read), the table of ranks (the suspect's marked; each one's last step, phase
//! and median step time; readable in a window 700 px wide, where its rows become cards), the
//! stragglers (a line each, with what its GPUs say), the ranks grouped by stack signature with
//! their top frames and the odd ones named, then every rank's progress, memory and — where
//! ranks beat — step time on one time axis (a line a rank, the alarm's moment and each rank's
//! own trip marked).
//!
//! Built of the soak report's pieces (its style, escaping, axes, SVG and script); what is the
//! job's own is here: the sections, and the charts of many ranks ([`chart`]). The ranks' series
//! come bounded ([`series::RankSeries`]), so a page of long soaks stays small.

mod chart;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::read::job::series::{Quantity, RankSeries};
use chart::{JobChart, RankLine, charts_html};

use super::UPLOT_CSS;
use super::data::RED;
use super::html::{STYLE, escape, table, warnings_html};
use super::scale::Unit;
use super::svg::{ChartFrame, Marker, WIDTH, clock_of};
use crate::read::job::straggler::STRAGGLER_RATIO;
use crate::read::job::{JobView, RankRow, who};
use crate::read::signature::Frame;
use crate::read::signature::group::rank_list;
use crate::text::step_time;

/// A rank's colour on the page: the table's swatch and its line on every chart.
const PALETTE: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
    "#7f7f7f", "#393b79",
];
/// The marker of the first stall: a colour no rank has.
const STALL: &str = "#111111";

/// The page's own style, after the soak report's.
const JOB_STYLE: &str = ".swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px;vertical-align:middle}\
tr.odd td,tr.slow td{background:#fff3e0}.verdict{margin:8px 0;padding-left:20px;font-size:14px}.verdict li{margin:2px 0}\
.group{border-left:3px solid #1f77b4;padding:2px 0 2px 10px;margin:10px 0}.group.odd{border-left-color:#ef6c00;background:#fff8ef}\
.group h3{font-family:ui-monospace,monospace;font-size:13px;margin:4px 0;overflow-wrap:anywhere}.group p{margin:2px 0;font-size:13px}\
.group pre{margin:4px 0}.ranks{overflow-x:auto}.ranks table{width:100%}.ranks td code{font-size:12px}\
.ranks td{overflow-wrap:normal}.ranks td:last-child{overflow-wrap:anywhere}\
.ranks th,.ranks td:nth-child(-n+2){white-space:nowrap}\
tr.suspect td{background:#ffebee}.tag{font-size:11px;font-weight:600;color:#fff;background:#c62828;\
border-radius:3px;padding:0 4px;margin-left:4px}\
@media (max-width:760px){.ranks thead{display:none}.ranks table,.ranks tbody{display:block;width:100%}\
.ranks tr{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));column-gap:12px;border:1px solid #ddd;\
border-radius:4px;margin:0 0 8px;padding:4px 8px}.ranks tr.odd,.ranks tr.slow{background:#fff8ef}\
.ranks tr.suspect{background:#ffebee;border-color:#c62828}\
.ranks td{display:flex;gap:8px;border:0;padding:1px 0;white-space:normal;min-width:0;background:none!important}\
.ranks td::before{content:attr(data-label);flex:0 0 6.5em;color:#666;font-size:12px}\
.ranks td:first-child,.ranks td:last-child{grid-column:1/-1}.ranks td:first-child{font-weight:600}\
.ranks td:last-child{overflow-wrap:anywhere}}";

/// Where a rank's series is found: its host and its soak.
pub(crate) type SeriesKey = (String, String);

/// How many buckets of time the page's ranks keep in all (each at most
/// [`series::MAX_BUCKETS`]): a page of many ranks gives each fewer.
const PAGE_BUCKETS: usize = 16_384;

/// The page of `view`, its ranks' series by host and soak, with the warnings its reading gave.
pub(crate) fn render(
    view: &JobView,
    mut series: BTreeMap<SeriesKey, RankSeries>,
    warnings: &[String],
) -> String {
    let each = PAGE_BUCKETS / series.len().max(1);
    for kept in series.values_mut() {
        kept.limit(each);
    }
    let series = &series;
    let start = view
        .ranks
        .iter()
        .map(|r| r.started_at)
        .reduce(f64::min)
        .unwrap_or(0.0);
    let last = view
        .ranks
        .iter()
        .filter_map(|r| r.ended_at)
        .chain(
            series
                .values()
                .flat_map(|s| s.points(Quantity::Progress).last().map(|p| p.0))
                .map(crate::time::unix_seconds),
        )
        .chain(view.alarm.as_ref().map(|a| a.at))
        .fold(start, f64::max);
    let end = (last - start).max(1.0);
    let colors: Vec<&'static str> = (0..view.ranks.len())
        .map(|i| PALETTE[i % PALETTE.len()])
        .collect();
    let (markers, trips) = markers(view, start, &colors);
    let frame = ChartFrame {
        end,
        bands: &[],
        markers: &markers,
        started_at: Some(start),
        width: WIDTH,
    };
    let mut html = String::with_capacity(256 * 1024);
    let status = status(view);
    let _ = write!(
        html,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<title>job {job}: {summary}</title><style>{STYLE}{JOB_STYLE}{UPLOT_CSS}</style></head><body>\
<h1>job {job}</h1><div class=\"banner {class}\"><span class=\"kind\">{word}</span> {summary}</div>",
        job = escape(&view.job),
        class = status.class,
        word = status.word,
        summary = escape(&status.summary),
    );
    glance(&mut html, view, start, end, warnings);
    ranks_table(&mut html, view, start, &colors);
    stragglers(&mut html, view);
    groups(&mut html, view);
    let _ = write!(
        html,
        "<h2>Over time</h2><p class=\"hint\">Time since the job's first rank started ({}), clock \
time in UTC under it; a line a rank. <span class=\"zoom-hint\">Drag across a chart to zoom into \
that time, every chart follows; double-click to see the whole job.</span></p>",
        escape(&crate::text::human_time((start * 1e6) as i64)),
    );
    key(&mut html, &markers, trips);
    charts_html(&mut html, &charts(view, series, start, &colors), &frame);
    let _ = writeln!(
        html,
        "<footer>made by unilab {} from the logs under the state root; `unilab job show {}` \
says the same in text</footer></body></html>",
        env!("CARGO_PKG_VERSION"),
        escape(&view.job),
    );
    html
}

/// How the job stands, in the banner.
struct Status {
    class: &'static str,
    word: &'static str,
    summary: String,
}

fn status(view: &JobView) -> Status {
    let count = |state: &str| view.ranks.iter().filter(|r| r.status == state).count();
    let total = view.ranks.len();
    let (failed, running, passed) = (count("failed"), count("running"), count("passed"));
    let of = |n: usize, what: &str| format!("{n} of {total} {} {what}", soaks(total));
    if failed > 0 {
        Status {
            class: "failed",
            word: "failed",
            summary: view
                .verdict_lines
                .first()
                .cloned()
                .unwrap_or_else(|| of(failed, "failed")),
        }
    } else if passed == total {
        Status {
            class: "passed",
            word: "passed",
            summary: of(passed, "passed"),
        }
    } else if running > 0 {
        Status {
            class: "other",
            word: "running",
            summary: match (&view.suspect, view.verdict_lines.first()) {
                (Some(_), Some(line)) => format!("{}; {line}", of(running, "running")),
                _ => of(running, "running"),
            },
        }
    } else {
        Status {
            class: "other",
            word: "ended",
            summary: format!("{passed} passed, {failed} failed of {total}"),
        }
    }
}

/// `ranks' soaks` or `rank's soak`.
fn soaks(n: usize) -> &'static str {
    if n == 1 {
        "rank's soak"
    } else {
        "ranks' soaks"
    }
}

/// `+3.2s (12:00:03 UTC)`: a moment as the page's time axis and the clock read it.
fn when(at: f64, start: f64) -> String {
    format!(
        "+{} ({} UTC)",
        crate::text::duration((at - start).max(0.0)),
        clock_of(at)
    )
}

/// The figures at a glance, the suspect first.
fn figures(view: &JobView, start: f64, end: f64) -> Vec<(&'static str, String)> {
    let mut figures: Vec<(&str, String)> = Vec::new();
    if let Some(suspect) = &view.suspect {
        figures.push((
            "suspect",
            format!(
                "{} ({}): {}",
                who(suspect.rank, &suspect.host),
                suspect.why.as_str(),
                suspect.detail
            ),
        ));
    }
    let hosts: std::collections::BTreeSet<&str> =
        view.ranks.iter().map(|r| r.host.as_str()).collect();
    figures.push((
        "ranks",
        format!(
            "{} on {} {}",
            view.ranks.len(),
            hosts.len(),
            if hosts.len() == 1 { "host" } else { "hosts" }
        ),
    ));
    figures.push((
        "ran",
        format!(
            "{}, from {} UTC",
            crate::text::duration(end),
            clock_of(start)
        ),
    ));
    if let Some(alarm) = &view.alarm {
        figures.push((
            "alarm",
            format!(
                "{}: {}, {}",
                who(alarm.rank, &alarm.host),
                alarm.failure_kind,
                when(alarm.at, start)
            ),
        ));
    }
    if let Some(stalled) = &view.first_stalled {
        figures.push((
            "progress stopped first",
            format!(
                "{}, {}",
                who(stalled.rank, &stalled.host),
                when(stalled.last_progress_at, start)
            ),
        ));
    }
    if !view.odd_ranks.is_empty() {
        let label = if view.odd_ranks.len() == 1 {
            "odd one out"
        } else {
            "odd ones out"
        };
        figures.push((label, odd_text(view)));
    }
    if !view.stragglers.is_empty() {
        let label = if view.stragglers.len() == 1 {
            "straggler"
        } else {
            "stragglers"
        };
        let named: Vec<String> = view
            .stragglers
            .iter()
            .map(|s| format!("{}, {:.2}×", who(s.rank, &s.host), s.ratio))
            .collect();
        figures.push((label, named.join("; ")));
    }
    figures
}

/// The figures that decide and the verdict's lines, then the alarm as written and the warnings.
fn glance(html: &mut String, view: &JobView, start: f64, end: f64, warnings: &[String]) {
    let figures = figures(view, start, end);
    html.push_str("<section class=\"glance\"><dl>");
    for (label, figure) in &figures {
        let _ = write!(
            html,
            "<div><dt>{}</dt><dd>{}</dd></div>",
            escape(label),
            escape(figure)
        );
    }
    html.push_str("</dl>");
    if !view.verdict_lines.is_empty() {
        html.push_str("<ul class=\"verdict\">");
        for line in &view.verdict_lines {
            let _ = write!(html, "<li>{}</li>", escape(line));
        }
        html.push_str("</ul>");
    }
    warnings_html(html, warnings);
    html.push_str("</section>");
    if let Some(alarm) = &view.alarm {
        let mut written = serde_json::to_value(alarm).unwrap_or_default();
        written["at"] = format!("{} ({})", alarm.at, when(alarm.at, start)).into();
        let _ = write!(
            html,
            "<h2>The alarm</h2><p class=\"hint\">As the rank that tripped first wrote it in the \
job's directory (its time in Unix seconds, then as the page reads it).</p>{}",
            table(&written)
        );
    }
}

/// `rank 2 on n1` — each odd rank with its host.
fn odd_text(view: &JobView) -> String {
    view.odd_ranks
        .iter()
        .map(|rank| {
            let host = view
                .ranks
                .iter()
                .find(|r| r.rank == Some(*rank))
                .map_or("?", |r| r.host.as_str());
            who(Some(*rank), host)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The ranks under `job show`'s columns, each with its colour on the charts.
fn ranks_table(html: &mut String, view: &JobView, start: f64, colors: &[&str]) {
    html.push_str(
        "<h2>Ranks</h2><div class=\"ranks\"><table><thead><tr><th>rank</th><th>host</th>\
<th>status</th><th>last progress</th><th>step</th><th>phase</th><th>step time</th>\
<th>peak PSS</th><th>GPU</th><th>signature</th></tr></thead><tbody>",
    );
    for (row, color) in view.ranks.iter().zip(colors) {
        let suspect = view
            .suspect
            .as_ref()
            .is_some_and(|s| s.rank == row.rank && s.host == row.host);
        let odd = row.rank.is_some_and(|r| view.odd_ranks.contains(&r));
        let slow = view
            .stragglers
            .iter()
            .any(|s| s.rank == row.rank && s.host == row.host);
        let status = match row.failure_kind {
            Some(kind) => format!("{} ({})", row.status, kind.as_str()),
            None => row.status.clone(),
        };
        let host = match &row.node {
            Some(node) if node != &row.host => format!("{} ({node})", row.host),
            _ => row.host.clone(),
        };
        let _ = write!(
            html,
            "<tr{class}><td data-label=\"rank\"><span class=\"swatch\" style=\"background:{color}\">\
</span>{rank}{tag}</td><td data-label=\"host\">{host}</td><td data-label=\"status\">{status}</td>\
<td data-label=\"last progress\">{progress}</td><td data-label=\"step\">{step}</td>\
<td data-label=\"phase\">{phase}</td><td data-label=\"step time\">{step_time}</td>\
<td data-label=\"peak PSS\">{pss}</td><td data-label=\"GPU\">{gpu}</td>\
<td data-label=\"signature\"><code>{signature}</code></td></tr>",
            class = match (suspect, odd, slow) {
                (true, ..) => " class=\"suspect\"",
                (false, true, _) => " class=\"odd\"",
                (false, false, true) => " class=\"slow\"",
                (false, false, false) => "",
            },
            tag = if suspect {
                " <span class=\"tag\">suspect</span>"
            } else {
                ""
            },
            rank = row.rank.map_or_else(|| "-".into(), |r| r.to_string()),
            phase = escape(row.last_phase.as_deref().unwrap_or("-")),
            host = escape(&host),
            status = escape(&status),
            progress = row
                .last_progress_at
                .map_or_else(|| "-".into(), |at| escape(&when(at, start))),
            step = row.last_step.map_or_else(|| "-".into(), |s| s.to_string()),
            step_time = row
                .median_step_seconds
                .map_or_else(|| "-".into(), step_time),
            pss = row
                .peak_tree_pss_bytes
                .map_or_else(|| "-".into(), crate::text::bytes),
            gpu = row
                .gpu_utilization_mean
                .map_or_else(|| "-".into(), |u| format!("{u:.0}%")),
            signature = escape(row.signature.as_deref().unwrap_or("-")),
        );
    }
    html.push_str("</tbody></table></div>");
}

/// The stragglers, a line each with what its GPUs say.
fn stragglers(html: &mut String, view: &JobView) {
    if view.stragglers.is_empty() {
        return;
    }
    let _ = write!(
        html,
        "<h2>Stragglers</h2><p class=\"hint\">Ranks whose median step time of the `train` phase \
is over {STRAGGLER_RATIO}× the job's (the median of the ranks'); the cause where their GPUs' \
throttling or clocks differ clearly from the other ranks' GPUs.</p><ul class=\"verdict\">"
    );
    for straggler in &view.stragglers {
        let _ = write!(html, "<li>{}</li>", escape(&straggler.sentence()));
    }
    html.push_str("</ul>");
}

/// The ranks grouped by signature, largest first, each with its top frames; the odd ones out
/// marked and named.
fn groups(html: &mut String, view: &JobView) {
    if view.groups.is_empty() {
        return;
    }
    html.push_str("<h2>Where the ranks stood</h2>");
    if !view.odd_ranks.is_empty() {
        let _ = write!(
            html,
            "<p>The odd {} out: <strong>{}</strong>.</p>",
            if view.odd_ranks.len() == 1 {
                "one"
            } else {
                "ones"
            },
            escape(&odd_text(view))
        );
    }
    for group in &view.groups {
        let odd = group.ranks.iter().any(|r| view.odd_ranks.contains(r));
        let n = group.ranks.len();
        let _ = write!(
            html,
            "<div class=\"group{class}\"><h3>{signature}</h3><p>{ranks}{odd}</p>",
            class = if odd { " odd" } else { "" },
            signature = escape(&group.signature),
            ranks = escape(&format!(
                "{} {}",
                if n == 1 { "rank" } else { "ranks" },
                rank_list(&group.ranks)
            )),
            odd = if odd { " — the odd one out" } else { "" },
        );
        if !group.top_frames.is_empty() {
            let frames: Vec<String> = group.top_frames.iter().map(frame_text).collect();
            let _ = write!(html, "<pre>{}</pre>", escape(&frames.join("\n")));
        }
        html.push_str("</div>");
    }
}

/// `load_batch (data.py:88)`: a frame as the groups show it, innermost first.
fn frame_text(frame: &Frame) -> String {
    match (&frame.file, frame.line) {
        (Some(file), Some(line)) => format!("{} ({file}:{line})", frame.function),
        (Some(file), None) => format!("{} ({file})", frame.function),
        (None, _) => frame.function.clone(),
    }
}

/// The markers of the charts: each rank's trip in its colour (thin), then the alarm's moment
/// and when the first rank's progress stopped; and how many of them are the ranks' trips.
fn markers(view: &JobView, start: f64, colors: &[&'static str]) -> (Vec<Marker>, usize) {
    let mut markers: Vec<Marker> = view
        .ranks
        .iter()
        .zip(colors)
        .filter_map(|(row, color)| {
            let at = row.tripped_at?;
            Some(Marker {
                width: 1.0,
                ..Marker::new(at - start, format!("{} tripped", rank_name(row)), color)
            })
        })
        .collect();
    let trips = markers.len();
    if let Some(alarm) = &view.alarm {
        markers.push(Marker {
            width: 2.5,
            ..Marker::new(
                alarm.at - start,
                format!("the alarm: {} tripped first", who(alarm.rank, &alarm.host)),
                RED,
            )
        });
    }
    if let Some(stalled) = &view.first_stalled {
        markers.push(Marker::new(
            stalled.last_progress_at - start,
            "progress stopped first",
            STALL,
        ));
    }
    (markers, trips)
}

/// What the markers mean: the ranks' trips once, then the others by name.
fn key(html: &mut String, markers: &[Marker], trips: usize) {
    html.push_str("<div class=\"key\">");
    if trips > 0 {
        html.push_str(
            "<span><i style=\"border-color:#777;border-top-width:1px\" class=\"dash\"></i>\
a rank tripped (in its colour)</span>",
        );
    }
    for marker in &markers[trips..] {
        let _ = write!(
            html,
            "<span><i style=\"border-color:{}\" class=\"dash\"></i>{}</span>",
            marker.color,
            escape(&marker.label)
        );
    }
    html.push_str("</div>");
}

/// `rank 2`, or a soak without a rank by its id.
fn rank_name(row: &RankRow) -> String {
    match row.rank {
        Some(rank) => format!("rank {rank}"),
        None => format!("soak {}", row.soak_id),
    }
}

/// Progress and memory, a line a rank that has points of it.
fn charts(
    view: &JobView,
    series: &BTreeMap<SeriesKey, RankSeries>,
    start: f64,
    colors: &[&'static str],
) -> Vec<JobChart> {
    let line = |row: &RankRow, color: &'static str, quantity: Quantity| {
        let points: Vec<(f64, f64)> = series
            .get(&(row.host.clone(), row.soak_id.clone()))?
            .points(quantity)
            .into_iter()
            .map(|(at, v)| (crate::time::unix_seconds(at) - start, v))
            .collect();
        let odd = row.rank.is_some_and(|r| view.odd_ranks.contains(&r));
        (!points.is_empty()).then(|| RankLine {
            name: format!(
                "{} on {}{}",
                rank_name(row),
                row.host,
                if odd { " (odd one out)" } else { "" }
            ),
            color,
            width: if odd { 2.5 } else { 1.5 },
            points,
        })
    };
    [
        (
            "progress",
            "Progress: bytes in each rank's progress directory",
            Quantity::Progress,
        ),
        (
            "memory",
            "Memory: each rank's process tree (PSS)",
            Quantity::Pss,
        ),
        (
            "step",
            "Step time: each rank's median time between two beats, a sample, where it beats",
            Quantity::StepSeconds,
        ),
    ]
    .into_iter()
    .map(|(id, title, quantity)| JobChart {
        id,
        title,
        unit: match quantity {
            Quantity::StepSeconds => Unit::Seconds,
            Quantity::Progress | Quantity::Pss => Unit::Bytes,
        },
        lines: view
            .ranks
            .iter()
            .zip(colors)
            .filter_map(|(row, color)| line(row, color, quantity))
            .collect(),
    })
    .collect()
}

#[cfg(test)]
mod tests;
