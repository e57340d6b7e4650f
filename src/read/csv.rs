//! A soak's samples as CSV (RFC 4180, through the `csv` crate), for pandas and spreadsheets:
//! one row per sample and GPU — a sample with no GPU reading is one row with the GPU columns
//! empty. Unknown values are empty cells, never zeros. Built from the rows of the JSON artifact,
//! typed ([`SampleRow`]), each cell as the artifact prints its value, so both say the same; the
//! JSON stays the canonical record.
//!
//! The beats since the previous sample (schema 10 on) are the last beat's `step` and `phase`
//! and the sample's `step_seconds_median`, then one column a number the trainer gave,
//! `number_<name>` (its last value in the sample), in the names' order, at most
//! [`MAX_NUMBER_COLUMNS`] (the first names in that order): which there are is known once every
//! row was read, so the rows wait in the spool with their numbers beside them.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, BufWriter, Seek, Write};

use serde::Serialize;
use serde_json::Value;

use super::rows::SampleRow;
use super::stream::{Piece, StreamError};

/// The most `number_<name>` columns.
pub(crate) const MAX_NUMBER_COLUMNS: usize = 16;

/// The columns, in order, the numbers' between `step_seconds_median` and `errors`. What a
/// soak's schema does not record (PSS and GPU health before schema 6, beats before schema 10,
/// the progress the supervisor decided before schema 12) is empty.
pub(crate) const HEADER: [&str; 37] = [
    "soak_id",
    "index",
    "elapsed_seconds",
    "after_exit",
    "processes",
    "threads",
    "tree_pss_bytes",
    "rss_bytes",
    "cpu_seconds",
    "cpu_percent",
    "open_fds",
    "read_bytes",
    "write_bytes",
    "progress_files",
    "progress_bytes",
    "progress_seen",
    "last_progress_at",
    "host_gpu_memory_used_mib",
    "tree_gpu_memory_mib",
    "gpu_index",
    "gpu_uuid",
    "gpu_utilization_percent",
    "gpu_memory_used_mib",
    "gpu_memory_total_mib",
    "gpu_tree_memory_mib",
    "gpu_temperature_c",
    "gpu_power_w",
    "gpu_sm_clock_mhz",
    "gpu_throttle_reasons",
    "gpu_ecc_uncorrected_volatile",
    "gpu_retired_pages_pending",
    "gpu_other_processes",
    "gpu_other_memory_mib",
    "step",
    "phase",
    "step_seconds_median",
    "errors",
];

/// The columns of `HEADER` before the numbers'.
const BEFORE_NUMBERS: usize = HEADER.len() - 1;

/// The CSV of `rows`.
#[cfg(test)]
fn render(soak_id: &str, rows: &[SampleRow]) -> Result<Vec<u8>, StreamError> {
    let mut sheet = Sheet::new(soak_id)?;
    for row in rows {
        sheet.take(Piece::Row(row));
    }
    let mut out = Vec::new();
    sheet.finish(&mut out)?;
    Ok(out)
}

/// A soak's CSV written as its rows go by ([`Sheet::take`], from
/// [`stream::head`](super::stream::head)): into a spool file, since a soak started again under
/// the same id drops the rows before it, each row with its numbers in a last cell; then behind
/// the header into the output, the numbers in their columns ([`Sheet::finish`]). Memory does
/// not grow with the soak.
pub(crate) struct Sheet {
    soak_id: String,
    rows: csv::Writer<BufWriter<std::fs::File>>,
    /// The names of the numbers seen, the first [`MAX_NUMBER_COLUMNS`] in order.
    numbers: BTreeSet<String>,
    /// The first failure to write a row; the rest are not written.
    failed: Option<csv::Error>,
}

impl Sheet {
    pub(crate) fn new(soak_id: &str) -> Result<Self, StreamError> {
        Ok(Self {
            soak_id: soak_id.to_owned(),
            rows: spool().map_err(StreamError::Spool)?,
            numbers: BTreeSet::new(),
            failed: None,
        })
    }

    pub(crate) fn take(&mut self, piece: Piece<'_>) {
        let written = match piece {
            Piece::Restart => spool().map(|rows| {
                self.rows = rows;
                self.numbers.clear();
            }),
            _ if self.failed.is_some() => return,
            Piece::Row(row) => {
                self.see_numbers(row);
                write_sample(&mut self.rows, &self.soak_id, row)
            }
            .map_err(io::Error::other),
        };
        if let Err(e) = written {
            self.failed.get_or_insert(csv::Error::from(e));
        }
    }

    /// Keeps the names of `row`'s numbers, the first [`MAX_NUMBER_COLUMNS`] of all in order.
    fn see_numbers(&mut self, row: &SampleRow<'_>) {
        let Some(Some(beats)) = &row.heartbeat else {
            return;
        };
        for name in beats.numbers.keys() {
            if self.numbers.len() >= MAX_NUMBER_COLUMNS
                && self.numbers.last().is_some_and(|last| name > last)
            {
                continue;
            }
            if self.numbers.insert(name.clone()) && self.numbers.len() > MAX_NUMBER_COLUMNS {
                self.numbers.pop_last();
            }
        }
    }

    /// Writes the header, then the rows, and gives the blake3 digest of what it wrote.
    pub(crate) fn finish(self, out: &mut impl Write) -> Result<String, StreamError> {
        let as_io = |e: csv::Error| match e.into_kind() {
            csv::ErrorKind::Io(e) => e,
            other => io::Error::other(format!("cannot write CSV: {other:?}")),
        };
        if let Some(e) = self.failed {
            return Err(StreamError::Spool(as_io(e)));
        }
        let mut file = self
            .rows
            .into_inner()
            .map_err(|e| e.into_error())
            .and_then(|rows| rows.into_inner().map_err(|e| e.into_error()))
            .map_err(StreamError::Spool)?;
        file.rewind().map_err(StreamError::Spool)?;
        let mut hashed = Hashed {
            out,
            hasher: blake3::Hasher::new(),
        };
        let mut sheet = csv::Writer::from_writer(&mut hashed);
        let columns: Vec<String> = self.numbers.iter().map(|n| format!("number_{n}")).collect();
        let header = HEADER[..BEFORE_NUMBERS]
            .iter()
            .map(|h| (*h).to_owned())
            .chain(columns)
            .chain([HEADER[BEFORE_NUMBERS].to_owned()]);
        sheet.write_record(header).map_err(as_io)?;
        let mut spooled = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(io::BufReader::with_capacity(1 << 16, file));
        let mut record = csv::StringRecord::new();
        while spooled
            .read_record(&mut record)
            .map_err(|e| StreamError::Spool(as_io(e)))?
        {
            let numbers: BTreeMap<String, Value> =
                serde_json::from_str(record.get(HEADER.len()).unwrap_or("{}")).unwrap_or_default();
            let cells = record
                .iter()
                .take(BEFORE_NUMBERS)
                .map(str::to_owned)
                .chain(
                    self.numbers
                        .iter()
                        .map(|name| numbers.get(name).map(cell).unwrap_or_default()),
                )
                .chain([record.get(BEFORE_NUMBERS).unwrap_or_default().to_owned()]);
            sheet.write_record(cells).map_err(as_io)?;
        }
        sheet.flush()?;
        drop(sheet);
        Ok(hashed.hasher.finalize().to_hex().to_string())
    }
}

/// A writer that hashes what passes through it.
struct Hashed<'a, W> {
    out: &'a mut W,
    hasher: blake3::Hasher,
}

impl<W: Write> Write for Hashed<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

fn spool() -> io::Result<csv::Writer<BufWriter<std::fs::File>>> {
    Ok(csv::Writer::from_writer(BufWriter::with_capacity(
        1 << 16,
        tempfile::tempfile()?,
    )))
}

/// The rows of one sample into the spool: one, or one a GPU; each the cells of [`HEADER`], then
/// its numbers as one JSON object.
fn write_sample<W: Write>(
    writer: &mut csv::Writer<W>,
    soak_id: &str,
    sample: &SampleRow,
) -> Result<(), csv::Error> {
    let errors = sample
        .errors
        .iter()
        .map(cell)
        .collect::<Vec<_>>()
        .join("; ");
    let beats = sample.heartbeat.as_ref().and_then(Option::as_ref);
    let beaten = [
        cell(beats.and_then(|b| b.step)),
        cell(beats.and_then(|b| b.phase)),
        cell(beats.and_then(|b| b.step_seconds_median)),
    ];
    let numbers = match beats {
        Some(beats) if !beats.numbers.is_empty() => {
            serde_json::to_string(beats.numbers).unwrap_or_default()
        }
        _ => String::new(),
    };
    let last = [errors, numbers];
    let common = [
        soak_id.to_owned(),
        cell(sample.index),
        cell(sample.elapsed_seconds),
        cell(sample.after_exit),
        cell(sample.processes),
        cell(sample.threads),
        cell(sample.tree_pss_bytes),
        cell(sample.rss_bytes),
        cell(sample.cpu_seconds),
        cell(sample.cpu_percent),
        cell(sample.open_fds),
        cell(sample.read_bytes),
        cell(sample.write_bytes),
        cell(sample.progress_files),
        cell(sample.progress_bytes),
        cell(sample.progress_seen),
        cell(sample.last_progress_at),
        cell(sample.host_gpu_memory_used_mib),
        cell(sample.tree_gpu_memory_mib),
    ];
    let gpus = sample.gpus.as_deref().unwrap_or_default();
    if gpus.is_empty() {
        // Schema 1's rows hold the GPUs' utilisation in place of a list of them.
        let mut gpu = vec![String::new(); 14];
        gpu[2] = cell(sample.gpu_utilization_percent);
        let row = common.iter().cloned().chain(gpu).chain(beaten).chain(last);
        return writer.write_record(row);
    }
    for gpu in gpus {
        let others = gpu.other_processes;
        let row = common.iter().cloned().chain([
            cell(gpu.index),
            cell(gpu.uuid),
            cell(gpu.utilization_percent),
            cell(gpu.memory_used_mib),
            cell(gpu.memory_total_mib),
            cell(gpu.tree_memory_mib),
            cell(gpu.temperature_c),
            cell(gpu.power_w),
            cell(gpu.sm_clock_mhz),
            gpu.throttle_reasons
                .as_ref()
                .map(|r| r.iter().map(cell).collect::<Vec<_>>().join("|"))
                .unwrap_or_default(),
            cell(gpu.ecc_uncorrected_volatile),
            cell(gpu.retired_pages_pending),
            others.map(|o| o.len().to_string()).unwrap_or_default(),
            others
                .map(|o| {
                    o.iter()
                        .filter_map(|p| p.used_memory_mib)
                        .sum::<u64>()
                        .to_string()
                })
                .unwrap_or_default(),
        ]);
        writer.write_record(row.chain(beaten.clone()).chain(last.clone()))?;
    }
    Ok(())
}

/// A value as a cell, as the artifact prints it: empty for none, strings as they are.
fn cell(value: impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(Value::Null) | Err(_) => String::new(),
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::read::rows::GpuRow;

    fn row<'a>(index: u64, gpus: Option<Vec<GpuRow<'a>>>) -> SampleRow<'a> {
        SampleRow {
            after_exit: Some(index == 1),
            gpus,
            index,
            processes: 1 + index,
            ..SampleRow::of_test(index as f64, 0, 0)
        }
    }

    /// A GPU as `/2` and `/3` list it: without its health.
    fn gpu(index: u32, uuid: &str) -> GpuRow<'_> {
        GpuRow {
            ecc_uncorrected_volatile: None,
            index,
            memory_total_mib: Some(100),
            memory_used_mib: Some(10),
            other_processes: None,
            power_w: None,
            retired_pages_pending: None,
            sm_clock_mhz: None,
            temperature_c: None,
            throttle_reasons: None,
            tree_memory_mib: None,
            utilization_percent: None,
            uuid,
        }
    }

    fn col(name: &str) -> usize {
        HEADER.iter().position(|h| *h == name).unwrap()
    }

    /// The rows of a CSV without numbers.
    fn records(text: &[u8]) -> Vec<csv::StringRecord> {
        let mut reader = csv::Reader::from_reader(text);
        assert_eq!(reader.headers().unwrap().len(), HEADER.len());
        reader.records().map(Result::unwrap).collect()
    }

    #[test]
    fn one_row_per_sample_and_gpu_with_unknowns_empty() {
        let errors = ["nvidia-smi did not answer, within 10 s".to_owned()];
        let mut first: SampleRow<'_> = row(0, None);
        first.errors = &errors;
        let second = row(
            1,
            Some(vec![
                GpuRow {
                    utilization_percent: Some(5),
                    ..gpu(0, "GPU-a")
                },
                GpuRow {
                    memory_used_mib: Some(0),
                    tree_memory_mib: Some(0),
                    ..gpu(1, "GPU-b")
                },
            ]),
        );
        let text = render("s", &[first, second]).unwrap();
        let rows = records(&text);
        assert_eq!(rows.len(), 3, "{}", String::from_utf8_lossy(&text));
        assert_eq!(&rows[0][col("gpu_uuid")], "");
        assert_eq!(
            &rows[0][col("errors")],
            "nvidia-smi did not answer, within 10 s"
        );
        assert_eq!(&rows[1][col("gpu_uuid")], "GPU-a");
        assert_eq!(&rows[1][col("after_exit")], "true");
        assert_eq!(&rows[1][col("gpu_tree_memory_mib")], "");
        assert_eq!(&rows[2][col("gpu_utilization_percent")], "");
        assert_eq!(&rows[2][col("gpu_tree_memory_mib")], "0");
        assert_eq!(
            &rows[1][col("tree_pss_bytes")],
            "",
            "not recorded before schema 6"
        );
        assert_eq!(&rows[1][col("gpu_temperature_c")], "");
        assert_eq!(&rows[1][col("gpu_other_processes")], "", "not measured");
    }

    /// The progress its supervisor decided at each sample (schema 12 on): what made it and
    /// when it last happened, empty for a sample that recorded none.
    #[test]
    fn the_progress_decided_has_its_columns() {
        let decided = crate::event::soak::ProgressNoted {
            progress_seen: Some(crate::event::soak::ProgressSeen::Beat),
            last_progress_at_us: Some(1_764_676_800_250_000),
            last_progress_ms: Some(250),
        };
        let noted = SampleRow {
            progress_seen: Some(decided.progress_seen),
            last_progress_at: Some(Some(1_764_676_800.25)),
            progress: Some(decided),
            ..row(1, None)
        };
        let nothing_yet = SampleRow {
            progress_seen: Some(None),
            last_progress_at: Some(None),
            ..row(0, None)
        };
        let rows = records(&render("s", &[nothing_yet, noted, row(2, None)]).unwrap());
        let cells = |r: usize| {
            let row = &rows[r];
            (
                row[col("progress_seen")].to_owned(),
                row[col("last_progress_at")].to_owned(),
            )
        };
        assert_eq!(cells(0), (String::new(), String::new()));
        assert_eq!(cells(1), ("beat".into(), "1764676800.25".into()));
        assert_eq!(cells(2), (String::new(), String::new()), "before schema 12");
    }

    #[test]
    fn pss_and_gpu_health_have_their_columns() {
        let others = [
            crate::event::soak::GpuProcessSample {
                pid: 7,
                used_memory_mib: Some(100),
            },
            crate::event::soak::GpuProcessSample {
                pid: 8,
                used_memory_mib: Some(28),
            },
        ];
        let sample = SampleRow {
            tree_pss_bytes: Some(4096),
            ..row(
                0,
                Some(vec![GpuRow {
                    temperature_c: Some(71),
                    power_w: Some(250.5),
                    sm_clock_mhz: Some(1980),
                    throttle_reasons: Some(vec!["sw_power_cap".into(), "hw_slowdown".into()]),
                    ecc_uncorrected_volatile: Some(0),
                    retired_pages_pending: Some(false),
                    other_processes: Some(&others[..]),
                    ..gpu(0, "GPU-a")
                }]),
            )
        };
        let rows = records(&render("s", &[sample]).unwrap());
        let cells: Vec<&str> = [
            "tree_pss_bytes",
            "gpu_temperature_c",
            "gpu_power_w",
            "gpu_sm_clock_mhz",
            "gpu_throttle_reasons",
            "gpu_ecc_uncorrected_volatile",
            "gpu_retired_pages_pending",
            "gpu_other_processes",
            "gpu_other_memory_mib",
        ]
        .iter()
        .map(|name| &rows[0][col(name)])
        .collect();
        assert_eq!(
            cells,
            [
                "4096",
                "71",
                "250.5",
                "1980",
                "sw_power_cap|hw_slowdown",
                "0",
                "false",
                "2",
                "128"
            ]
        );
    }

    /// Schema 1's rows hold no list of GPUs and say nothing of the exit: one row a sample, the
    /// GPUs' utilisation in its column, `after_exit` empty.
    #[test]
    fn a_schema_1_row_is_one_row_with_its_utilisation() {
        let sample = SampleRow {
            after_exit: None,
            host_gpu_memory_used_mib: Some(30),
            gpu_utilization_percent: Some(80),
            ..row(0, None)
        };
        let rows = records(&render("s", &[sample]).unwrap());
        assert_eq!(rows.len(), 1);
        assert_eq!(&rows[0][col("after_exit")], "");
        assert_eq!(&rows[0][col("gpu_utilization_percent")], "80");
        assert_eq!(&rows[0][col("host_gpu_memory_used_mib")], "30");
    }

    /// The CSV had no step, phase, step time or number of the beats: a sample's beats are the
    /// last beat's step and phase, the median step time, and one column a number, its name
    /// prefixed, in the names' order, the first sixteen of every row's; empty where a row has
    /// none.
    #[test]
    fn the_beats_have_their_columns_and_each_number_its_own() {
        use crate::read::beats::BeatsRow;
        let numbers = |names: &[&str]| -> BTreeMap<String, f64> {
            names
                .iter()
                .enumerate()
                .map(|(i, n)| ((*n).to_owned(), i as f64 + 0.5))
                .collect()
        };
        let first = numbers(&["loss", "lr"]);
        let many: Vec<String> = (0..20).map(|i| format!("x{i:02}")).collect();
        let second = numbers(&many.iter().map(String::as_str).collect::<Vec<_>>());
        let beaten = |index, numbers| SampleRow {
            heartbeat: Some(Some(BeatsRow {
                beats: 3,
                numbers,
                phase: Some("train"),
                step: Some(40 + index),
                step_seconds_max: Some(0.2),
                step_seconds_median: Some(0.125),
                step_seconds_min: Some(0.1),
            })),
            ..row(index, None)
        };
        let text = render("s", &[beaten(0, &first), row(1, None), beaten(2, &second)]).unwrap();
        let mut reader = csv::Reader::from_reader(text.as_slice());
        let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
        let names: Vec<&str> = header
            .iter()
            .filter_map(|h| h.strip_prefix("number_"))
            .collect();
        // `loss` and `lr`, then `x00`…`x13`: sixteen in order, `x14` on left out.
        let mut expected = vec!["loss", "lr"];
        expected.extend(many[..14].iter().map(String::as_str));
        assert_eq!(names, expected);
        assert_eq!(header.last().unwrap(), "errors");
        let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
        let at = |name: &str| header.iter().position(|h| h == name).unwrap();
        let cells = |r: usize, names: &[&str]| -> Vec<String> {
            names.iter().map(|n| rows[r][at(n)].to_owned()).collect()
        };
        let beats = [
            "step",
            "phase",
            "step_seconds_median",
            "number_loss",
            "number_x00",
        ];
        assert_eq!(cells(0, &beats), ["40", "train", "0.125", "0.5", ""]);
        assert_eq!(cells(1, &beats), ["", "", "", "", ""]);
        assert_eq!(cells(2, &beats), ["42", "train", "0.125", "", "0.5"]);
        assert_eq!(&rows[2][at("number_x13")], "13.5");
    }

    /// The sheet written as rows go by is the CSV of all of them; a restart drops the rows
    /// before it; the digest is of the bytes written.
    #[test]
    fn the_sheet_is_the_rows_csv_and_a_restart_forgets_the_rows_before_it() {
        let mut sheet = Sheet::new("s").unwrap();
        sheet.take(Piece::Row(&row(0, None)));
        sheet.take(Piece::Restart);
        for index in 1..=2 {
            sheet.take(Piece::Row(&row(index, None)));
        }
        let mut written = Vec::new();
        let digest = sheet.finish(&mut written).unwrap();
        assert_eq!(
            String::from_utf8(written.clone()).unwrap(),
            String::from_utf8(render("s", &[row(1, None), row(2, None)]).unwrap()).unwrap()
        );
        assert_eq!(digest, blake3::hash(&written).to_hex().to_string());
    }
}
