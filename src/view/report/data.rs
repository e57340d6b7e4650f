//! The report's data: the rows of `samples` as columns over one time axis, what the sampler
//! could not read (each message once, and the runs of rows it spoiled), and the charts drawn of
//! them — the same for the static SVG and for the page's zoomable charts. The columns and
//! charts of the trainer's beats are [`steps`]'.

mod erred;
mod steps;

use std::fmt::Write as _;

use serde::Serialize;

use super::scale::{Unit, compact};
use crate::read::beats::BeatsRow;
use crate::read::rows::SampleRow;
use crate::read::stream::Piece;
use erred::Erred;
pub(super) use erred::SamplerError;
use steps::StepColumns;

/// The unknown value of a column at a row.
const UNKNOWN: f64 = f64::NAN;

/// A column: one value a row (NaN where unknown).
#[derive(Debug, Default)]
struct Column {
    key: String,
    values: Vec<f64>,
}

impl Column {
    /// A column that starts at row `row`: unknown in every row before.
    fn from_row(key: String, row: usize) -> Self {
        Self {
            key,
            values: vec![UNKNOWN; row],
        }
    }
}

/// The columns of the fixed quantities, in the order of [`Charts::add`]'s values.
const FIXED: [&str; 9] = [
    "cpu",
    "pss",
    "rss",
    "processes",
    "threads",
    "fds",
    "bytes",
    "files",
    "gpu_any",
];

/// The charts' data, gathered one row of `samples` at a time (from the artifact's stream, so
/// that the whole artifact is never held).
#[derive(Debug)]
pub struct Charts {
    times: Vec<f64>,
    columns: Vec<Column>,
    /// What the sampler could not read.
    erred: Erred,
    /// The GPUs seen, by UUID, in the order seen, each with its first column.
    gpus: Vec<(String, usize)>,
    /// The columns of the trainer's beats, once a row has any.
    steps: StepColumns,
}

impl Default for Charts {
    fn default() -> Self {
        Self {
            times: Vec::new(),
            columns: FIXED
                .iter()
                .map(|key| Column {
                    key: (*key).into(),
                    values: Vec::new(),
                })
                .collect(),
            erred: Erred::default(),
            gpus: Vec::new(),
            steps: StepColumns::default(),
        }
    }
}

/// A GPU's values in a row: utilisation, memory used on it, the tree's, temperature, power.
struct GpuValues<'a> {
    uuid: &'a str,
    values: [Option<f64>; 5],
}

impl<'a> GpuValues<'a> {
    /// A GPU's values: utilisation, memory used on it and the tree's (MiB), then temperature
    /// and power where the schema has them.
    fn of(
        uuid: &'a str,
        utilization: Option<u32>,
        memory: [Option<u64>; 2],
        health: [Option<f64>; 2],
    ) -> Self {
        let [host, tree] = memory.map(|m| m.map(|m| m as f64));
        let [temperature, power] = health;
        Self {
            uuid,
            values: [utilization.map(f64::from), host, tree, temperature, power],
        }
    }
}

/// What each GPU contributes, column suffix and all.
const GPU_COLUMNS: [&str; 5] = ["util", "host", "tree", "temp", "power"];

impl Charts {
    pub fn take(&mut self, piece: Piece<'_>) {
        match piece {
            Piece::Restart => *self = Charts::default(),
            Piece::Row(row) => self.add_row(row),
        }
    }

    /// A row's values: what its schema lacks (PSS, each GPU's health, a schema-1 row's CPU
    /// share and GPUs) is unknown.
    fn add_row(&mut self, row: &SampleRow<'_>) {
        let gpus: Vec<GpuValues> = row
            .gpus
            .iter()
            .flatten()
            .map(|g| {
                GpuValues::of(
                    g.uuid,
                    g.utilization_percent,
                    [g.memory_used_mib, g.tree_memory_mib],
                    [g.temperature_c.map(f64::from), g.power_w],
                )
            })
            .collect();
        self.add(
            row.elapsed_seconds,
            [
                row.cpu_percent,
                row.tree_pss_bytes.map(|b| b as f64),
                Some(row.rss_bytes as f64),
                Some(row.processes as f64),
                Some(row.threads as f64),
                Some(row.open_fds as f64),
                Some(row.progress_bytes as f64),
                Some(row.progress_files as f64),
            ],
            row.errors,
            &gpus,
            row.heartbeat.as_ref().and_then(Option::as_ref),
        );
    }

    fn add(
        &mut self,
        at: f64,
        values: [Option<f64>; 8],
        errors: &[String],
        gpus: &[GpuValues],
        beats: Option<&BeatsRow>,
    ) {
        let row = self.times.len();
        self.times.push(at);
        for (column, value) in self.columns.iter_mut().zip(values) {
            column.values.push(value.unwrap_or(UNKNOWN));
        }
        // `gpu_any`: whether any GPU was read at this row (for the "no GPU data" rule).
        let any = gpus.iter().any(|g| g.values.iter().any(Option::is_some));
        self.columns[FIXED.len() - 1]
            .values
            .push(if any { 1.0 } else { UNKNOWN });
        for gpu in gpus {
            let first = match self.gpus.iter().find(|(u, _)| u == gpu.uuid) {
                Some((_, first)) => *first,
                None => {
                    let (n, first) = (self.gpus.len(), self.columns.len());
                    self.gpus.push((gpu.uuid.to_owned(), first));
                    for suffix in GPU_COLUMNS {
                        self.columns
                            .push(Column::from_row(format!("gpu{n}.{suffix}"), row));
                    }
                    first
                }
            };
            for (i, value) in gpu.values.iter().enumerate() {
                self.columns[first + i]
                    .values
                    .push(value.unwrap_or(UNKNOWN));
            }
        }
        if let Some(beats) = beats {
            self.steps.add(&mut self.columns, row, beats);
        }
        // A column not in this row (a GPU's, a number's) is unknown in it.
        for column in &mut self.columns {
            if column.values.len() == row {
                column.values.push(UNKNOWN);
            }
        }
        self.erred.add(at, errors, any);
    }

    pub(super) fn rows(&self) -> usize {
        self.times.len()
    }

    /// The time of the last row.
    pub(super) fn last_time(&self) -> Option<f64> {
        self.times.last().copied()
    }

    /// Each message of the sampler, once.
    pub(super) fn errors(&self) -> &[SamplerError] {
        self.erred.errors()
    }

    /// The GPU tool, not found from the start (before any GPU was read): a note, not an error.
    pub(super) fn absent_tool(&self) -> Option<&SamplerError> {
        self.erred.absent_tool()
    }

    /// Notes the GPU tool as absent from the start when the runtime snapshot (`runtime`) could
    /// not find it and the rows never read a GPU: a host without one samples no GPU and says
    /// nothing of it in its rows.
    pub(super) fn note_absent_tool(&mut self, runtime: &serde_json::Value) {
        let errors = runtime["errors"].as_array().into_iter().flatten();
        let absent = errors.filter_map(serde_json::Value::as_str).find_map(|e| {
            e.strip_prefix("gpu: ")
                .filter(|text| erred::tool_not_found(text))
        });
        if let Some(text) = absent.filter(|_| !self.has_gpu_data()) {
            let at = self.times.first().copied().unwrap_or(0.0);
            self.erred.note_absent_tool(text, at);
        }
    }

    /// How many rows had no sampler message but the absent tool's.
    pub(super) fn noted_only(&self) -> u64 {
        self.erred.noted_only()
    }

    /// Whether any row read a GPU.
    pub(super) fn has_gpu_data(&self) -> bool {
        self.column("gpu_any")
            .is_some_and(|c| c.iter().any(|v| !v.is_nan()))
    }

    fn column(&self, key: &str) -> Option<&[f64]> {
        self.columns
            .iter()
            .find(|c| c.key == key)
            .map(|c| &c.values[..])
    }

    fn has(&self, key: &str) -> bool {
        self.column(key)
            .is_some_and(|c| c.iter().any(|v| !v.is_nan()))
    }

    /// The largest known value of a column.
    pub(super) fn peak(&self, key: &str) -> Option<f64> {
        self.column(key)?
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .reduce(f64::max)
    }

    /// The mean of a column's known values.
    pub(super) fn mean(&self, key: &str) -> Option<f64> {
        let known: Vec<f64> = self
            .column(key)?
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .collect();
        (!known.is_empty()).then(|| known.iter().sum::<f64>() / known.len() as f64)
    }

    /// The GPUs seen, each with the prefix of its columns (`gpu0`).
    pub(super) fn gpus(&self) -> impl Iterator<Item = (String, &str)> {
        self.gpus
            .iter()
            .enumerate()
            .map(|(i, (uuid, _))| (format!("gpu{i}"), uuid.as_str()))
    }

    /// The runs of rows with a sampler error, runs closer than `merge` seconds joined.
    pub(super) fn error_bands(&self, merge: f64) -> Vec<(f64, f64)> {
        self.erred.bands(&self.times, merge)
    }

    /// The charts with something to draw, in the page's order; `trend` the column of the
    /// fitted line of the tree's PSS, when there is one.
    pub(super) fn specs(&self, trend: Option<usize>) -> Vec<ChartSpec> {
        let mut wanted = self.steps.specs();
        wanted.extend(self.tree_charts(trend));
        if self.has_gpu_data() {
            wanted.extend(self.gpu_charts());
        }
        wanted.push(chart(
            "progress_bytes",
            "Progress directory: size",
            Unit::Bytes,
            vec![self.line("bytes", "bytes", GREEN)],
        ));
        wanted.push(chart(
            "progress_files",
            "Progress directory: files",
            Unit::Count,
            vec![self.line("files", "files", GREEN)],
        ));
        wanted
            .into_iter()
            .filter_map(|mut spec| {
                spec.series.retain(|s| {
                    s.column
                        .is_some_and(|c| c >= self.columns.len() || self.has(&self.columns[c].key))
                });
                let banded = |c: usize| spec.series.iter().any(|s| s.column == Some(c));
                if let Some(band) = &spec.band
                    && !(banded(band.upper) && banded(band.lower))
                {
                    spec.band = None;
                }
                (!spec.series.is_empty()).then_some(spec)
            })
            .collect()
    }

    /// The trainer's numbers that have no chart (past the first few drawn).
    pub(super) fn undrawn_numbers(&self) -> Vec<&str> {
        self.steps.undrawn()
    }

    /// A line of the column `key`.
    fn line(&self, name: &str, key: &str, color: &'static str) -> SeriesSpec {
        SeriesSpec {
            name: name.into(),
            column: self.columns.iter().position(|c| c.key == key),
            color,
            width: 1.5,
            dash: false,
            span_gaps: false,
        }
    }

    /// The process tree's charts: CPU, memory, processes and threads, open files.
    fn tree_charts(&self, trend: Option<usize>) -> Vec<ChartSpec> {
        let mut memory = vec![self.line("tree PSS", "pss", BLUE)];
        if let Some(trend) = trend {
            memory.push(SeriesSpec {
                column: Some(trend),
                dash: true,
                ..self.line("PSS trend after the warm-up", "", RED)
            });
        }
        memory.push(SeriesSpec {
            width: 1.0,
            ..self.line(
                "tree RSS (shared pages counted once a process)",
                "rss",
                GRAY,
            )
        });
        vec![
            chart(
                "cpu",
                "CPU (% of one core)",
                Unit::Percent,
                vec![self.line("tree CPU", "cpu", BLUE)],
            ),
            chart("memory", "Memory of the process tree", Unit::Bytes, memory),
            chart(
                "tasks",
                "Processes and threads",
                Unit::Count,
                vec![
                    // Threads first and wide, processes over them: equal, both stay visible.
                    SeriesSpec {
                        width: 4.0,
                        ..self.line("threads", "threads", LIGHT_ORANGE)
                    },
                    self.line("processes", "processes", BLUE),
                ],
            ),
            chart(
                "fds",
                "Open file descriptors",
                Unit::Count,
                vec![self.line("open files", "fds", PURPLE)],
            ),
        ]
    }

    /// The GPUs' charts, a line a GPU: utilisation, memory, temperature, power.
    fn gpu_charts(&self) -> Vec<ChartSpec> {
        let per_gpu = |suffix: &str, name: &dyn Fn(&str) -> String| -> Vec<SeriesSpec> {
            self.gpus()
                .enumerate()
                .map(|(i, (prefix, uuid))| SeriesSpec {
                    name: name(&short(uuid)),
                    color: PALETTE[i % PALETTE.len()],
                    ..self.line("", &format!("{prefix}.{suffix}"), BLUE)
                })
                .collect()
        };
        let mut memory = per_gpu("host", &|u| format!("{u} all processes"));
        memory.extend(
            per_gpu("tree", &|u| format!("{u} this soak"))
                .into_iter()
                .map(|s| SeriesSpec { dash: true, ..s }),
        );
        vec![
            chart(
                "gpu_util",
                "GPU utilisation",
                Unit::Percent,
                per_gpu("util", &|u| u.to_owned()),
            ),
            chart("gpu_memory", "GPU memory used", Unit::Mebibytes, memory),
            chart(
                "gpu_temp",
                "GPU temperature",
                Unit::Celsius,
                per_gpu("temp", &|u| u.to_owned()),
            ),
            chart(
                "gpu_power",
                "GPU power draw",
                Unit::Watts,
                per_gpu("power", &|u| u.to_owned()),
            ),
        ]
    }

    /// A column's values (a derived one, past the gathered ones, from `extra`).
    pub(super) fn values<'a>(&'a self, column: usize, extra: &'a [Vec<f64>]) -> &'a [f64] {
        match self.columns.get(column) {
            Some(c) => &c.values,
            None => &extra[column - self.columns.len()],
        }
    }

    /// The index a derived column will have.
    pub(super) fn next_column(&self) -> usize {
        self.columns.len()
    }

    pub(super) fn times(&self) -> &[f64] {
        &self.times
    }
}

/// The first 12 characters of a GPU's UUID (`GPU-1111aaaa`).
fn short(uuid: &str) -> String {
    uuid.chars().take(12).collect()
}

pub(super) const BLUE: &str = "#1f77b4";
pub(super) const RED: &str = "#c62828";
pub(super) const GREEN: &str = "#2e7d32";
pub(super) const GRAY: &str = "#888888";
pub(super) const PURPLE: &str = "#7b4fa0";
const LIGHT_ORANGE: &str = "#f5b971";
const PALETTE: [&str; 6] = [BLUE, "#ff7f0e", GREEN, PURPLE, "#8c564b", "#17becf"];

fn chart(id: &str, title: &str, unit: Unit, series: Vec<SeriesSpec>) -> ChartSpec {
    ChartSpec {
        id: id.into(),
        title: title.into(),
        unit,
        series,
        band: None,
        small: false,
    }
}

/// A chart: its title, the unit of its one axis and its lines; the band filled between two of
/// them, and whether it is small (half the page's width on a wide page). Without either, its
/// spec reads as before they were.
#[derive(Debug, Clone, Serialize)]
pub(super) struct ChartSpec {
    pub id: String,
    pub title: String,
    pub unit: Unit,
    pub series: Vec<SeriesSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub band: Option<BandSpec>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub small: bool,
}

/// A band filled between two lines of a chart (named by their columns).
#[derive(Debug, Clone, Serialize)]
pub(super) struct BandSpec {
    pub name: String,
    pub upper: usize,
    pub lower: usize,
    pub color: &'static str,
}

/// A line: its name, its column, how it is drawn.
#[derive(Debug, Clone, Serialize)]
pub(super) struct SeriesSpec {
    pub name: String,
    pub column: Option<usize>,
    pub color: &'static str,
    pub width: f32,
    pub dash: bool,
    /// Whether the zoomable chart joins its points across rows where it has none (a line of
    /// its own times among others'), rather than breaking there.
    pub span_gaps: bool,
}

/// Buckets of rows for drawing at `buckets` columns over `end` seconds: each bucket's range of
/// rows. Every row is in one bucket; a bucket holds at least one row.
pub(super) fn buckets(times: &[f64], end: f64, buckets: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    if times.len() <= 2 * buckets {
        return (0..times.len()).map(|i| i..i + 1).collect();
    }
    let end = end.max(f64::MIN_POSITIVE);
    let column = |t: f64| ((t / end) * buckets as f64) as i64;
    let mut start = 0;
    while start < times.len() {
        let col = column(times[start]);
        let mut stop = start + 1;
        while stop < times.len() && column(times[stop]) == col {
            stop += 1;
        }
        out.push(start..stop);
        start = stop;
    }
    out
}

/// A bucket's extremes of `values`, in time order: (first, second) — the lowest and the highest
/// of its known values, so that a spike is never lost; `None` when none is known.
pub(super) fn extremes(values: &[f64]) -> Option<(f64, f64)> {
    let mut lo: Option<(usize, f64)> = None;
    let mut hi: Option<(usize, f64)> = None;
    for (i, v) in values.iter().copied().enumerate() {
        if v.is_nan() {
            continue;
        }
        if lo.is_none_or(|(_, l)| v < l) {
            lo = Some((i, v));
        }
        if hi.is_none_or(|(_, h)| v > h) {
            hi = Some((i, v));
        }
    }
    let ((li, l), (hi, h)) = (lo?, hi?);
    Some(if li <= hi { (l, h) } else { (h, l) })
}

/// A time of the page's data, in seconds to the tenth (a week is `604800`).
pub(super) fn seconds_text(t: f64) -> String {
    let text = format!("{t:.1}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The data of the page's zoomable charts, as uPlot takes it: `[[times], [column]...]` with
/// every column the charts use, at most `cells` numbers in all (rows over the budget merged
/// into buckets by their extremes), numbers written short.
pub(super) fn script_data(
    charts: &Charts,
    extra: &[Vec<f64>],
    used: &[usize],
    end: f64,
    cells: usize,
) -> String {
    let per_row = used.len() + 1;
    let rows = (cells / per_row).max(2000);
    let ranges = buckets(charts.times(), end, rows / 2);
    let single = ranges.iter().all(|r| r.len() == 1);
    let mut out = String::with_capacity(ranges.len() * per_row * 12);
    out.push('[');
    let times = charts.times();
    let time = seconds_text;
    let mut first = true;
    let mut open = |out: &mut String| {
        if !first {
            out.push(',');
        }
        first = false;
        out.push('[');
    };
    open(&mut out);
    for (i, range) in ranges.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if single {
            out.push_str(&time(times[range.start]));
        } else {
            let _ = write!(
                out,
                "{},{}",
                time(times[range.start]),
                time(times[range.end - 1].max(times[range.start]))
            );
        }
    }
    out.push(']');
    for &column in used {
        open(&mut out);
        let values = charts.values(column, extra);
        for (i, range) in ranges.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            if single {
                out.push_str(&compact(values[range.start]));
            } else {
                let (a, b) = extremes(&values[range.clone()]).unwrap_or((f64::NAN, f64::NAN));
                let _ = write!(out, "{},{}", compact(a), compact(b));
            }
        }
        out.push(']');
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extremes_keep_the_spike_in_time_order() {
        assert_eq!(extremes(&[1.0, 9.0, 3.0, 0.5]), Some((9.0, 0.5)));
        assert_eq!(extremes(&[f64::NAN, 2.0]), Some((2.0, 2.0)));
        assert_eq!(extremes(&[f64::NAN]), None);
    }

    #[test]
    fn bucketing_covers_every_row_once() {
        let times: Vec<f64> = (0..100_000).map(f64::from).collect();
        let ranges = buckets(&times, 100_000.0, 500);
        assert!(ranges.len() <= 501, "{}", ranges.len());
        assert_eq!(ranges.first().unwrap().start, 0);
        assert_eq!(ranges.last().unwrap().end, times.len());
        assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
    }
}
