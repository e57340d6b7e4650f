//! The report's static charts: one SVG a chart, drawn to the width of the page (a `viewBox`,
//! no fixed size; a small chart half as wide, two to a row), over the time axis every chart
//! shares. What a reader sees without script, in print, or in a mail client; the page's script
//! replaces them with zoomable ones.

use std::fmt::Write as _;

use super::data::{BandSpec, ChartSpec, Charts, SeriesSpec, buckets, extremes};
use super::escape;
use super::scale::{Unit, elapsed, time_ticks};

/// The drawing's width in SVG units; the page scales it to its own.
pub(super) const WIDTH: f64 = 900.0;
/// A small chart's: two to a row of the page, its text as large as a wide chart's.
pub(super) const SMALL_WIDTH: f64 = 450.0;
const PLOT_HEIGHT: f64 = 150.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 14.0;
const TOP: f64 = 8.0;
/// Below the plot: the elapsed-time labels, and under them the clock's.
const BELOW: f64 = 22.0;
const CLOCK: f64 = 14.0;

/// A vertical marker on every chart: when, what, in which colour, how wide.
#[derive(Debug, Clone)]
pub(super) struct Marker {
    pub at: f64,
    pub label: String,
    pub color: &'static str,
    pub width: f32,
}

impl Marker {
    pub(super) fn new(at: f64, label: impl Into<String>, color: &'static str) -> Self {
        Self {
            at,
            label: label.into(),
            color,
            width: 1.5,
        }
    }
}

/// What every chart shares: the time axis, the sampler's error bands and the markers; and the
/// drawing's width.
#[derive(Clone, Copy)]
pub(super) struct ChartFrame<'a> {
    pub end: f64,
    pub bands: &'a [(f64, f64)],
    pub markers: &'a [Marker],
    /// Unix seconds of the start, for the clock under the time axis.
    pub started_at: Option<f64>,
    /// In SVG units: [`WIDTH`], or [`SMALL_WIDTH`] for a small chart.
    pub width: f64,
}

impl ChartFrame<'_> {
    fn x(&self, t: f64) -> f64 {
        LEFT + (t / self.end).clamp(0.0, 1.0) * (self.width - LEFT - RIGHT)
    }

    /// How many columns of the drawing a line's points are bucketed into: two points each.
    fn columns(&self) -> usize {
        ((self.width - LEFT - RIGHT) / 2.0) as usize
    }
}

/// How many columns of a wide drawing a line's points are bucketed into: two points each.
pub(super) const COLUMNS: usize = ((WIDTH - LEFT - RIGHT) / 2.0) as usize;

/// A chart's value axis: its unit, its ticks from 0 (or from below it), and the range it
/// spans.
pub(super) struct ValueAxis {
    unit: Unit,
    ticks: Vec<f64>,
    bottom: f64,
    top: f64,
}

impl ValueAxis {
    /// The axis of a chart whose largest value is `largest`.
    pub(super) fn new(unit: Unit, largest: f64) -> Self {
        Self::between(unit, 0.0, largest)
    }

    /// The axis of a chart whose values go from `lowest` (the axis starts at 0 unless that is
    /// below it) to `largest`.
    pub(super) fn between(unit: Unit, lowest: f64, largest: f64) -> Self {
        let ticks = unit.ticks_between(lowest, largest, 4);
        let bottom = ticks.first().copied().unwrap_or(0.0).min(0.0);
        let top = ticks.last().copied().filter(|t| *t > 0.0).unwrap_or(1.0);
        Self {
            unit,
            ticks,
            bottom,
            top,
        }
    }

    fn y(&self, v: f64) -> f64 {
        let at = (v - self.bottom) / (self.top - self.bottom);
        TOP + PLOT_HEIGHT * (1.0 - at.clamp(0.0, 1.0))
    }
}

/// One chart as an SVG element, its lines decimated to two points a unit of width.
pub(super) fn chart(
    spec: &ChartSpec,
    charts: &Charts,
    extra: &[Vec<f64>],
    frame: &ChartFrame,
) -> String {
    let values = |column: usize| charts.values(column, extra);
    let known = || {
        spec.series
            .iter()
            .filter_map(|s| s.column)
            .flat_map(|c| values(c).iter().copied().filter(|v| !v.is_nan()))
    };
    let largest = known().fold(0.0_f64, f64::max);
    // A trainer's numbers may be negative; every other quantity's axis starts at 0.
    let lowest = match spec.unit {
        Unit::Number => known().fold(0.0_f64, f64::min),
        _ => 0.0,
    };
    let axis = ValueAxis::between(spec.unit, lowest, largest);
    let mut svg = open(&spec.title, &axis, frame);
    if let Some(band) = &spec.band {
        let (upper, lower) = (values(band.upper), values(band.lower));
        spread(&mut svg, charts.times(), [upper, lower], band, &axis, frame);
    }
    for series in &spec.series {
        let Some(column) = series.column else {
            continue;
        };
        let mut points = decimated(charts.times(), values(column), frame.end, frame.columns());
        if series.span_gaps {
            points.retain(|p| !p.1.is_nan());
        }
        line(&mut svg, &points, series, &axis, frame);
    }
    svg.push_str("</svg>");
    svg
}

/// The band between the columns `upper` and `lower`, filled: each bucket of rows from the
/// highest of `upper` to the lowest of `lower`, over the buckets that know both (one shape
/// across the rows that know neither, as the lines either side of it span them).
fn spread(
    svg: &mut String,
    times: &[f64],
    [upper, lower]: [&[f64]; 2],
    band: &BandSpec,
    axis: &ValueAxis,
    frame: &ChartFrame,
) {
    let (mut high, mut low) = (Vec::new(), Vec::new());
    for range in buckets(times, frame.end, frame.columns()) {
        let known = |values: &[f64], pick: fn(f64, f64) -> f64| {
            values.iter().copied().filter(|v| !v.is_nan()).reduce(pick)
        };
        let top = known(&upper[range.clone()], f64::max);
        let bottom = known(&lower[range.clone()], f64::min);
        if let (Some(top), Some(bottom)) = (top, bottom) {
            for t in [times[range.start], times[range.end - 1]] {
                high.push((frame.x(t), axis.y(top)));
                low.push((frame.x(t), axis.y(bottom)));
            }
        }
    }
    if high.is_empty() {
        return;
    }
    let mut path = String::new();
    for (i, (x, y)) in high.iter().chain(low.iter().rev()).enumerate() {
        let _ = write!(path, "{}{x:.1} {y:.1}", if i == 0 { "M" } else { "L" });
    }
    let _ = write!(
        *svg,
        "<path class=\"spread\" d=\"{path}Z\" fill=\"{c}\" fill-opacity=\"0.18\" stroke=\"none\"><title>{name}</title></path>",
        c = band.color,
        name = escape(&band.name),
    );
}

/// A chart's SVG up to its lines: the element, the sampler's error bands, both axes and the
/// markers. The caller draws its lines ([`line`]) and closes the element.
pub(super) fn open(title: &str, axis: &ValueAxis, frame: &ChartFrame) -> String {
    let clock = frame.started_at.is_some();
    let height = TOP + PLOT_HEIGHT + BELOW + if clock { CLOCK } else { 0.0 };
    let mut svg = String::with_capacity(16 * 1024);
    let _ = write!(
        svg,
        "<svg class=\"chart\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"{title}\" \
font-family=\"system-ui,sans-serif\" font-size=\"11\">",
        width = frame.width,
        title = escape(title),
    );
    // Sampler errors: a shaded band a run.
    for &(start, stop) in frame.bands {
        let (a, b) = (frame.x(start), frame.x(stop));
        let _ = write!(
            svg,
            "<rect class=\"band\" x=\"{a:.1}\" y=\"{TOP}\" width=\"{w:.1}\" height=\"{PLOT_HEIGHT}\" fill=\"#f0a030\" fill-opacity=\"0.14\"/>",
            w = (b - a).max(1.0),
        );
    }
    // Value axis: grid and labels.
    let labels = axis
        .unit
        .axis_labels(&axis.ticks, axis.top.max(-axis.bottom));
    for (&tick, label) in axis.ticks.iter().zip(&labels) {
        let at = axis.y(tick);
        let _ = write!(
            svg,
            "<line x1=\"{LEFT}\" x2=\"{r}\" y1=\"{at:.1}\" y2=\"{at:.1}\" stroke=\"#e6e6e6\"/>\
<text x=\"{lx}\" y=\"{ly:.1}\" text-anchor=\"end\" fill=\"#555\">{label}</text>",
            r = frame.width - RIGHT,
            lx = LEFT - 6.0,
            ly = at + 4.0,
            label = escape(label),
        );
    }
    // Time axis: elapsed time, and the clock under it.
    let base = TOP + PLOT_HEIGHT;
    let ticks = time_ticks(frame.end, (frame.width / 110.0) as usize);
    let clocks = frame
        .started_at
        .map(|start| clock_labels(start, &ticks))
        .unwrap_or_default();
    for (i, &tick) in ticks.iter().enumerate() {
        let at = frame.x(tick);
        let _ = write!(
            svg,
            "<line x1=\"{at:.1}\" x2=\"{at:.1}\" y1=\"{TOP}\" y2=\"{base}\" stroke=\"#f0f0f0\"/>\
<text x=\"{at:.1}\" y=\"{ty}\" text-anchor=\"middle\" fill=\"#555\">{label}</text>",
            ty = base + 15.0,
            label = elapsed(tick),
        );
        if let Some(clock) = clocks.get(i) {
            let _ = write!(
                svg,
                "<text x=\"{at:.1}\" y=\"{ty}\" text-anchor=\"middle\" fill=\"#999\" font-size=\"10\">{clock}</text>",
                ty = base + 15.0 + CLOCK,
            );
        }
    }
    let _ = write!(
        svg,
        "<line x1=\"{LEFT}\" x2=\"{r}\" y1=\"{base}\" y2=\"{base}\" stroke=\"#999\"/>",
        r = frame.width - RIGHT
    );
    for marker in frame.markers {
        let at = frame.x(marker.at);
        let _ = write!(
            svg,
            "<line class=\"marker\" x1=\"{at:.1}\" x2=\"{at:.1}\" y1=\"{TOP}\" y2=\"{base}\" stroke=\"{c}\" stroke-width=\"{w}\" stroke-dasharray=\"4 3\"><title>{label}</title></line>",
            c = marker.color,
            w = marker.width,
            label = escape(&marker.label),
        );
    }
    svg
}

/// The points to draw of a line of `values` at `times` over `end` seconds: at most two a
/// bucket of `columns` (its lowest and highest, in time order), a NaN value where it breaks.
pub(super) fn decimated(
    times: &[f64],
    values: &[f64],
    end: f64,
    columns: usize,
) -> Vec<(f64, f64)> {
    let mut points = Vec::new();
    for range in buckets(times, end, columns) {
        match extremes(&values[range.clone()]) {
            Some((a, b)) if range.len() > 1 => {
                points.push((times[range.start], a));
                points.push((times[range.end - 1], b));
            }
            Some((a, _)) => points.push((times[range.start], a)),
            None => points.push((times[range.start], f64::NAN)),
        }
    }
    points
}

/// A line through `points`, a path broken where a value is unknown (NaN).
pub(super) fn line(
    svg: &mut String,
    points: &[(f64, f64)],
    series: &SeriesSpec,
    axis: &ValueAxis,
    frame: &ChartFrame,
) {
    let mut path = String::new();
    let mut pen_down = false;
    for &(t, v) in points {
        if v.is_nan() {
            pen_down = false;
            continue;
        }
        let _ = write!(
            path,
            "{}{:.1} {:.1}",
            if pen_down { "L" } else { "M" },
            frame.x(t),
            axis.y(v)
        );
        pen_down = true;
    }
    if path.is_empty() {
        return;
    }
    let _ = write!(
        *svg,
        "<path class=\"line\" d=\"{path}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"{w}\"{dash} stroke-linejoin=\"round\"><title>{name}</title></path>",
        c = series.color,
        w = series.width,
        dash = if series.dash {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        },
        name = escape(&series.name),
    );
}

/// A time of day in UTC, `14:05` (with seconds when it has them: `14:05:30`).
pub(super) fn clock_of(unix: f64) -> String {
    let (h, m, s) = hms(unix);
    if s == 0 {
        format!("{h:02}:{m:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// The clock under a time axis that started at `start` (Unix seconds), a label a tick: all
/// with seconds when any has them (`14:02:30`, `14:03:00`), else none (`14:02`, `14:03`). The
/// page's script labels a zoomed axis the same way.
pub(super) fn clock_labels(start: f64, ticks: &[f64]) -> Vec<String> {
    let times: Vec<(u64, u64, u64)> = ticks.iter().map(|t| hms(start + t)).collect();
    let seconds = times.iter().any(|(_, _, s)| *s != 0);
    times
        .into_iter()
        .map(|(h, m, s)| {
            if seconds {
                format!("{h:02}:{m:02}:{s:02}")
            } else {
                format!("{h:02}:{m:02}")
            }
        })
        .collect()
}

/// Hours, minutes and seconds of a Unix time's day in UTC, to the nearest second.
fn hms(unix: f64) -> (u64, u64, u64) {
    let secs = unix.round().rem_euclid(86_400.0) as u64;
    (secs / 3600, secs % 3600 / 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_reads_in_utc() {
        // 2026-12-05 14:08:24 UTC
        assert_eq!(clock_of(1_796_479_704.0), "14:08:24");
        assert_eq!(clock_of(1_796_479_680.0), "14:08");
    }

    /// The clock under the time axis read `14:03` next to `14:02:30`: whole minutes dropped
    /// their seconds while the ticks between them kept theirs.
    #[test]
    fn an_axis_clock_shows_seconds_on_every_label_or_on_none() {
        // 14:02:00 UTC, then ticks every 30 s.
        let start = 1_796_479_320.0;
        assert_eq!(
            clock_labels(start, &[0.0, 30.0, 60.0, 90.0]),
            ["14:02:00", "14:02:30", "14:03:00", "14:03:30"]
        );
        assert_eq!(
            clock_labels(start, &[0.0, 60.0, 120.0]),
            ["14:02", "14:03", "14:04"]
        );
        // A start off the minute: every tick has seconds.
        assert_eq!(
            clock_labels(start + 12.4, &[0.0, 60.0]),
            ["14:02:12", "14:03:12"]
        );
    }
}
