//! The job page's charts: every rank's progress and memory (its tree's PSS) on one time axis —
//! a line a rank, each at its own sample times — drawn twice from the same points like the soak
//! report's: static SVG (the report's [`svg`](super::super::svg) pieces) and, by the report's
//! script, zoomable uPlot charts. The script's data puts every rank's points on one grid of
//! buckets over the job's time (each bucket's lowest and highest of each rank, in time order),
//! so it stays within the report's budget of numbers for any number of ranks and any length.

use std::fmt::Write as _;

use super::super::data::{ChartSpec, SeriesSpec, seconds_text};
use super::super::scale::{Unit, compact};
use super::super::svg::{self, COLUMNS, ChartFrame, ValueAxis};
use super::super::{SCRIPT_CELLS, escape, legend, script_tags};

/// One rank's line on a chart: its points as (seconds since the job's start, value).
pub(super) struct RankLine {
    pub name: String,
    pub color: &'static str,
    /// Wider: an odd rank's.
    pub width: f32,
    pub points: Vec<(f64, f64)>,
}

/// A chart of the page: what it shows, in which unit, a line a rank.
pub(super) struct JobChart {
    pub id: &'static str,
    pub title: &'static str,
    pub unit: Unit,
    pub lines: Vec<RankLine>,
}

/// The charts (those with a line to draw) as sections, static and zoomable, then the script
/// that makes them zoomable.
pub(super) fn charts_html(html: &mut String, charts: &[JobChart], frame: &ChartFrame) {
    let charts: Vec<&JobChart> = charts.iter().filter(|c| !c.lines.is_empty()).collect();
    if charts.is_empty() {
        html.push_str("<p class=\"empty\">no samples to draw</p>");
        return;
    }
    let specs = specs(&charts);
    // A page of many ranks draws each with fewer points: the lines lie on one another anyway.
    let ranks = charts.iter().map(|c| c.lines.len()).max().unwrap_or(1);
    let columns = (COLUMNS * 8 / ranks.max(8)).max(50);
    for (chart, spec) in charts.iter().zip(&specs) {
        let largest = chart
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .filter(|v| !v.is_nan())
            .fold(0.0_f64, f64::max);
        let axis = ValueAxis::new(chart.unit, largest);
        let mut drawing = svg::open(chart.title, &axis, frame);
        for (line, series) in chart.lines.iter().zip(&spec.series) {
            let (times, values): (Vec<f64>, Vec<f64>) = line.points.iter().copied().unzip();
            let points = svg::decimated(&times, &values, frame.end, columns);
            svg::line(&mut drawing, &points, series, &axis, frame);
        }
        drawing.push_str("</svg>");
        let _ = write!(
            html,
            "<section class=\"chart\" id=\"chart-{id}\"><h3>{title}</h3><div class=\"static\">{drawing}{legend}</div><div class=\"live\"></div></section>",
            id = spec.id,
            title = escape(chart.title),
            legend = legend(spec),
        );
    }
    let lines: Vec<&RankLine> = charts.iter().flat_map(|c| c.lines.iter()).collect();
    let data = grid_data(&lines, frame.end, SCRIPT_CELLS);
    let used: Vec<usize> = (0..lines.len()).collect();
    script_tags(html, &specs, &used, frame, &data);
}

/// The charts as the script takes them: a line's column is its place among all the charts'
/// lines.
fn specs(charts: &[&JobChart]) -> Vec<ChartSpec> {
    let mut column = 0;
    charts
        .iter()
        .map(|chart| ChartSpec {
            id: chart.id.to_owned(),
            title: chart.title.to_owned(),
            unit: chart.unit,
            series: chart
                .lines
                .iter()
                .map(|line| {
                    column += 1;
                    SeriesSpec {
                        name: line.name.clone(),
                        column: Some(column - 1),
                        color: line.color,
                        width: line.width,
                        dash: false,
                        span_gaps: true,
                    }
                })
                .collect(),
            band: None,
            small: false,
        })
        .collect()
}

/// The lowest and highest of one line's points in one bucket, each with its time.
#[derive(Clone, Copy, Default)]
struct Cell {
    low: Option<(f64, f64)>,
    high: Option<(f64, f64)>,
}

impl Cell {
    fn add(&mut self, t: f64, v: f64) {
        if self.low.is_none_or(|(_, low)| v < low) {
            self.low = Some((t, v));
        }
        if self.high.is_none_or(|(_, high)| v > high) {
            self.high = Some((t, v));
        }
    }

    /// Its two values in time order (the same twice for one point); `None` when empty.
    fn pair(&self) -> Option<(f64, f64)> {
        let (low, high) = (self.low?, self.high?);
        Some(if low.0 <= high.0 {
            (low.1, high.1)
        } else {
            (high.1, low.1)
        })
    }
}

/// The lines' data as uPlot takes it, `[[times], [line]...]`, on one grid: at most `cells`
/// numbers in all (for fewer than `cells / 2` lines: past that, one bucket), two rows a bucket
/// of time over `end` seconds (the first and last time any line has a point in it), each line's
/// lowest and highest there in time order, `null` where a line has none (the zoomable chart
/// joins across them). Buckets where no line has a point are left out. More lines, fewer
/// buckets: 1,000 ranks' 2,000 lines get 39 over the job.
pub(super) fn grid_data(lines: &[&RankLine], end: f64, cells: usize) -> String {
    let buckets = (cells / (lines.len() + 1) / 2).max(1);
    let end = end.max(f64::MIN_POSITIVE);
    let bucket_of = |t: f64| (((t / end) * buckets as f64).max(0.0) as usize).min(buckets - 1);
    let mut spans: Vec<Option<(f64, f64)>> = vec![None; buckets];
    let mut grid: Vec<Cell> = vec![Cell::default(); buckets * lines.len()];
    for (l, line) in lines.iter().enumerate() {
        for &(t, v) in &line.points {
            let b = bucket_of(t);
            spans[b] = Some(spans[b].map_or((t, t), |(a, z)| (a.min(t), z.max(t))));
            if !v.is_nan() {
                grid[b * lines.len() + l].add(t, v);
            }
        }
    }
    let filled: Vec<(usize, (f64, f64))> = spans
        .iter()
        .enumerate()
        .filter_map(|(b, span)| span.map(|s| (b, s)))
        .collect();
    let mut out = String::from("[[");
    let mut first = true;
    let mut push = |out: &mut String, text: &str| {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(text);
    };
    for &(_, (a, z)) in &filled {
        push(&mut out, &seconds_text(a));
        if z > a {
            push(&mut out, &seconds_text(z));
        }
    }
    out.push(']');
    for l in 0..lines.len() {
        out.push_str(",[");
        let mut first = true;
        for &(b, (a, z)) in &filled {
            let pair = grid[b * lines.len() + l].pair();
            let values = match pair {
                Some((x, y)) if z > a => format!("{},{}", compact(x), compact(y)),
                Some((_, y)) => compact(y),
                None if z > a => "null,null".to_owned(),
                None => "null".to_owned(),
            };
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(&values);
        }
        out.push(']');
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(points: Vec<(f64, f64)>) -> RankLine {
        RankLine {
            name: "rank 0".into(),
            color: "#000",
            width: 1.5,
            points,
        }
    }

    #[test]
    fn lines_at_their_own_times_share_one_grid_with_gaps_as_null() {
        let a = line(vec![(0.0, 1.0), (2.0, 2.0)]);
        let b = line(vec![(1.0, 5.0)]);
        let data: serde_json::Value =
            serde_json::from_str(&grid_data(&[&a, &b], 2.0, 1000)).unwrap();
        assert_eq!(data[0], json!([0, 1, 2]));
        assert_eq!(data[1], json!([1, null, 2]));
        assert_eq!(data[2], json!([null, 5, null]));
    }

    #[test]
    fn many_ranks_of_a_long_job_stay_within_the_budget() {
        let lines: Vec<RankLine> = (0..64)
            .map(|r| {
                line(
                    (0..1024)
                        .map(|i| (f64::from(i) * 600.0 + f64::from(r), f64::from(i)))
                        .collect(),
                )
            })
            .collect();
        let refs: Vec<&RankLine> = lines.iter().collect();
        let text = grid_data(&refs, 1024.0 * 600.0, 160_000);
        let data: serde_json::Value = serde_json::from_str(&text).unwrap();
        let rows = data[0].as_array().unwrap().len();
        assert!(rows * 65 <= 160_000 + 2 * 65, "{rows} rows");
        // A spike in a bucket is kept: the last value of each line is there.
        assert_eq!(data[1].as_array().unwrap().last(), Some(&json!(1023)));
    }

    #[test]
    fn a_thousand_ranks_stay_within_the_budget() {
        // Two lines a rank (progress and memory), each with a point every 10 minutes of a week.
        let lines: Vec<RankLine> = (0..2_000u32)
            .map(|l| {
                line(
                    (0..1_008u32)
                        .map(|i| (f64::from(i) * 600.0 + f64::from(l % 500), f64::from(i + l)))
                        .collect(),
                )
            })
            .collect();
        let refs: Vec<&RankLine> = lines.iter().collect();
        let data: serde_json::Value =
            serde_json::from_str(&grid_data(&refs, 7.0 * 86_400.0, SCRIPT_CELLS)).unwrap();
        let rows = data.as_array().unwrap();
        assert_eq!(rows.len(), 2_001);
        let numbers: usize = rows.iter().map(|r| r.as_array().unwrap().len()).sum();
        assert!(numbers <= SCRIPT_CELLS, "{numbers} numbers");
        // Still a chart: some buckets across the week, every line with its values in them.
        let times = rows[0].as_array().unwrap().len();
        assert!(times >= 20, "{times} times");
        assert!(rows.iter().all(|r| r.as_array().unwrap().len() == times));
        assert!(
            rows[2_000]
                .as_array()
                .unwrap()
                .iter()
                .all(|v| v.is_number())
        );
    }
}
