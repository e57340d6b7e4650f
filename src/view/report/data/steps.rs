//! The report's columns and charts of the trainer's beats: each row's step times (its sample's
//! median, fastest and slowest step) and the last value of each of the trainer's numbers. One
//! chart of step time, the median's line in a band from the fastest to the slowest step; then a
//! small chart a number (`loss`), at most [`NUMBER_CHARTS`], those named like a loss first. A
//! row without beats is unknown in all of them, and their lines span it: a trainer that beats
//! every few samples still draws a line.

use super::{BLUE, BandSpec, ChartSpec, Column, PALETTE, SeriesSpec, UNKNOWN};
use crate::read::beats::BeatsRow;
use crate::view::report::scale::Unit;

/// The numbers given a column: the first seen. A sample holds at most 16; a run whose keys
/// keep changing is bounded all the same.
const NUMBER_COLUMNS: usize = 16;
/// The numbers given a chart.
pub(super) const NUMBER_CHARTS: usize = 4;
/// The step-time columns: each sample's median, fastest and slowest step.
const STEP_KEYS: [&str; 3] = ["step.median", "step.min", "step.max"];
/// The fastest and slowest steps' lines, under the median's.
const LIGHT_BLUE: &str = "#9ecae1";

/// Where the beats' columns are, once a row beat.
#[derive(Debug, Default)]
pub(super) struct StepColumns {
    /// The first of the [`STEP_KEYS`] columns.
    step: Option<usize>,
    /// Each number kept and its column, in the order first seen.
    numbers: Vec<(String, usize)>,
}

impl StepColumns {
    /// Row `row`'s beats, into `columns` (each new column unknown in the rows before it); a
    /// column of a number the row lacks is left for the caller to make unknown.
    pub(super) fn add(&mut self, columns: &mut Vec<Column>, row: usize, beats: &BeatsRow) {
        let first = *self.step.get_or_insert_with(|| {
            let first = columns.len();
            columns.extend(
                STEP_KEYS
                    .iter()
                    .map(|key| Column::from_row((*key).to_owned(), row)),
            );
            first
        });
        let times = [
            beats.step_seconds_median,
            beats.step_seconds_min,
            beats.step_seconds_max,
        ];
        for (i, seconds) in times.into_iter().enumerate() {
            columns[first + i].values.push(seconds.unwrap_or(UNKNOWN));
        }
        for (name, value) in beats.numbers {
            let column = match self.numbers.iter().find(|(n, _)| n == name) {
                Some((_, column)) => *column,
                None if self.numbers.len() < NUMBER_COLUMNS => {
                    let column = columns.len();
                    columns.push(Column::from_row(format!("number.{name}"), row));
                    self.numbers.push((name.clone(), column));
                    column
                }
                None => continue,
            };
            let value = if value.is_finite() { *value } else { UNKNOWN };
            columns[column].values.push(value);
        }
    }

    /// The numbers in the order they are drawn: `loss`, then those whose name holds `loss`,
    /// then the rest, each group in the order first seen.
    fn ordered(&self) -> Vec<&(String, usize)> {
        let mut ordered: Vec<&(String, usize)> = self.numbers.iter().collect();
        ordered.sort_by_key(|(name, _)| match name.as_str() {
            "loss" => 0,
            name if name.contains("loss") => 1,
            _ => 2,
        });
        ordered
    }

    /// The numbers kept that have no chart.
    pub(super) fn undrawn(&self) -> Vec<&str> {
        self.ordered()
            .into_iter()
            .skip(NUMBER_CHARTS)
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// The chart of step time and a small chart a number drawn; none before a row beat.
    pub(super) fn specs(&self) -> Vec<ChartSpec> {
        let Some(first) = self.step else {
            return Vec::new();
        };
        let line = |name: &str, column: usize, color: &'static str, width: f32| SeriesSpec {
            name: name.to_owned(),
            column: Some(column),
            color,
            width,
            dash: false,
            span_gaps: true,
        };
        let mut specs = vec![ChartSpec {
            id: "step_time".into(),
            title: "Step time (each sample's steps)".into(),
            unit: Unit::Seconds,
            series: vec![
                line("median step", first, BLUE, 1.5),
                line("slowest step", first + 2, LIGHT_BLUE, 0.75),
                line("fastest step", first + 1, LIGHT_BLUE, 0.75),
            ],
            band: Some(BandSpec {
                name: "fastest to slowest step".into(),
                upper: first + 2,
                lower: first + 1,
                color: BLUE,
            }),
            small: false,
        }];
        specs.extend(
            self.ordered()
                .into_iter()
                .take(NUMBER_CHARTS)
                .enumerate()
                .map(|(i, (name, column))| ChartSpec {
                    id: format!("number{i}"),
                    title: name.clone(),
                    unit: Unit::Number,
                    series: vec![line(name, *column, PALETTE[(i + 1) % PALETTE.len()], 1.5)],
                    band: None,
                    small: true,
                }),
        );
        specs
    }
}
