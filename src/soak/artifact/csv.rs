//! A soak's samples as CSV (RFC 4180, through the `csv` crate), for pandas and spreadsheets:
//! one row per sample and GPU — a sample with no GPU reading is one row with the GPU columns
//! empty. Unknown values are empty cells, never zeros. Built from the rows of the JSON artifact,
//! as JSON, so both say the same; the JSON stays the canonical record.

use std::io::{self, BufWriter, Write};

use serde_json::Value;

use super::stream::{Piece, Row, StreamError};

/// The columns, in order. What a soak's schema does not record (PSS and GPU health before
/// schema 6) is empty.
pub(crate) const HEADER: [&str; 32] = [
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
    "errors",
];

/// The CSV of the artifact `view` (either schema's).
#[cfg(test)]
fn render(view: &Value) -> Result<Vec<u8>, csv::Error> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer.write_record(HEADER)?;
    let soak_id = cell(&view["soak_id"]);
    for sample in view["samples"].as_array().into_iter().flatten() {
        write_sample(&mut writer, &soak_id, sample)?;
    }
    writer
        .into_inner()
        .map_err(|e| csv::Error::from(e.into_error()))
}

/// A soak's CSV written as its rows go by ([`Sheet::take`], from
/// [`stream::head`](super::stream::head)): into a spool file, since a soak started again under
/// the same id drops the rows before it, then behind the header into the output
/// ([`Sheet::finish`]). Memory does not grow with the soak.
pub(crate) struct Sheet {
    soak_id: String,
    rows: csv::Writer<BufWriter<std::fs::File>>,
    /// The first failure to write a row; the rest are not written.
    failed: Option<csv::Error>,
}

impl Sheet {
    pub(crate) fn new(soak_id: &str) -> Result<Self, StreamError> {
        Ok(Self {
            soak_id: soak_id.to_owned(),
            rows: spool().map_err(StreamError::Spool)?,
            failed: None,
        })
    }

    pub(crate) fn take(&mut self, piece: Piece<'_>) {
        let written = match piece {
            Piece::Restart => spool()
                .map(|rows| self.rows = rows)
                .map_err(csv::Error::from),
            _ if self.failed.is_some() => return,
            Piece::Row(Row::V1(sample)) => write_sample(&mut self.rows, &self.soak_id, sample),
            // The row as the JSON artifact holds it: one way to a cell for every schema.
            Piece::Row(Row::V2(row)) => self.write_typed(row),
            Piece::Row(Row::V4(row)) => self.write_typed(row),
        };
        if let Err(e) = written {
            self.failed.get_or_insert(e);
        }
    }

    fn write_typed(&mut self, row: &impl serde::Serialize) -> Result<(), csv::Error> {
        serde_json::to_value(row)
            .map_err(|e| csv::Error::from(io::Error::other(e)))
            .and_then(|sample| write_sample(&mut self.rows, &self.soak_id, &sample))
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
        let mut hashed = Hashed {
            out,
            hasher: blake3::Hasher::new(),
        };
        let mut header = csv::Writer::from_writer(&mut hashed);
        header.write_record(HEADER).map_err(as_io)?;
        header.flush()?;
        drop(header);
        super::stream::copy_out(&mut file, &mut hashed)?;
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

/// The rows of one sample: one, or one a GPU.
fn write_sample<W: Write>(
    writer: &mut csv::Writer<W>,
    soak_id: &str,
    sample: &Value,
) -> Result<(), csv::Error> {
    // Schema 1 named the host's GPU figures without `host_`, and had no per-GPU list.
    let host_memory = first(sample, &["host_gpu_memory_used_mib", "gpu_memory_used_mib"]);
    let errors = sample["errors"]
        .as_array()
        .map(|e| e.iter().map(cell).collect::<Vec<_>>().join("; "))
        .unwrap_or_default();
    let common = [
        soak_id.to_owned(),
        cell(&sample["index"]),
        cell(&sample["elapsed_seconds"]),
        cell(&sample["after_exit"]),
        cell(&sample["processes"]),
        cell(&sample["threads"]),
        cell(&sample["tree_pss_bytes"]),
        cell(&sample["rss_bytes"]),
        cell(&sample["cpu_seconds"]),
        cell(&sample["cpu_percent"]),
        cell(&sample["open_fds"]),
        cell(&sample["read_bytes"]),
        cell(&sample["write_bytes"]),
        cell(&sample["progress_files"]),
        cell(&sample["progress_bytes"]),
        host_memory,
        cell(&sample["tree_gpu_memory_mib"]),
    ];
    let gpus: Vec<&Value> = sample["gpus"].as_array().into_iter().flatten().collect();
    if gpus.is_empty() {
        let utilization = cell(&sample["gpu_utilization_percent"]);
        let mut gpu = vec![String::new(); 14];
        gpu[2] = utilization;
        let row = common.iter().cloned().chain(gpu).chain([errors]);
        return writer.write_record(row);
    }
    for gpu in gpus {
        let others = gpu["other_processes"].as_array();
        let row = common.iter().cloned().chain([
            cell(&gpu["index"]),
            cell(&gpu["uuid"]),
            cell(&gpu["utilization_percent"]),
            cell(&gpu["memory_used_mib"]),
            cell(&gpu["memory_total_mib"]),
            cell(&gpu["tree_memory_mib"]),
            cell(&gpu["temperature_c"]),
            cell(&gpu["power_w"]),
            cell(&gpu["sm_clock_mhz"]),
            gpu["throttle_reasons"]
                .as_array()
                .map(|r| r.iter().map(cell).collect::<Vec<_>>().join("|"))
                .unwrap_or_default(),
            cell(&gpu["ecc_uncorrected_volatile"]),
            cell(&gpu["retired_pages_pending"]),
            others.map(|o| o.len().to_string()).unwrap_or_default(),
            others
                .map(|o| {
                    o.iter()
                        .filter_map(|p| p["used_memory_mib"].as_u64())
                        .sum::<u64>()
                        .to_string()
                })
                .unwrap_or_default(),
            errors.clone(),
        ]);
        writer.write_record(row)?;
    }
    Ok(())
}

/// A JSON value as a cell: empty for null or absent, strings as they are.
fn cell(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn first(object: &Value, keys: &[&str]) -> String {
    keys.iter()
        .map(|k| &object[*k])
        .find(|v| !v.is_null())
        .map(cell)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_row_per_sample_and_gpu_with_unknowns_empty() {
        let view = serde_json::json!({
            "soak_id": "s",
            "samples": [
                {"index": 0, "elapsed_seconds": 0.0, "after_exit": false, "processes": 1,
                 "gpus": null, "errors": ["nvidia-smi did not answer, within 10 s"]},
                {"index": 1, "elapsed_seconds": 1.0, "after_exit": true, "processes": 2,
                 "gpus": [
                     {"index": 0, "uuid": "GPU-a", "utilization_percent": 5, "memory_used_mib": 10,
                      "memory_total_mib": 100, "tree_memory_mib": null},
                     {"index": 1, "uuid": "GPU-b", "utilization_percent": null,
                      "memory_used_mib": 0, "memory_total_mib": 100, "tree_memory_mib": 0}
                 ], "errors": []}
            ]
        });
        let text = String::from_utf8(render(&view).unwrap()).unwrap();
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        assert_eq!(reader.headers().unwrap().len(), HEADER.len());
        let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 3, "{text}");
        let col = |name: &str| HEADER.iter().position(|h| *h == name).unwrap();
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
    }

    #[test]
    fn pss_and_gpu_health_have_their_columns() {
        let view = serde_json::json!({
            "soak_id": "s",
            "samples": [
                {"index": 0, "elapsed_seconds": 0.0, "processes": 1, "tree_pss_bytes": 4096,
                 "gpus": [{"index": 0, "uuid": "GPU-a", "temperature_c": 71, "power_w": 250.5,
                           "sm_clock_mhz": 1980, "throttle_reasons": ["sw_power_cap", "hw_slowdown"],
                           "ecc_uncorrected_volatile": 0, "retired_pages_pending": false,
                           "other_processes": [{"pid": 7, "used_memory_mib": 100},
                                               {"pid": 8, "used_memory_mib": 28}]}],
                 "errors": []}
            ]
        });
        let text = String::from_utf8(render(&view).unwrap()).unwrap();
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
        let col = |name: &str| HEADER.iter().position(|h| *h == name).unwrap();
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

    /// The sheet written as rows go by is the CSV of the whole view; a restart drops the rows
    /// before it; the digest is of the bytes written.
    #[test]
    fn the_sheet_is_the_views_csv_and_a_restart_forgets_the_rows_before_it() {
        let row = |index: u64| {
            serde_json::json!({"index": index, "elapsed_seconds": index as f64, "processes": 1,
                               "gpus": null, "errors": []})
        };
        let mut sheet = Sheet::new("s").unwrap();
        sheet.take(Piece::Row(Row::V1(&row(0))));
        sheet.take(Piece::Restart);
        for index in 1..=2 {
            sheet.take(Piece::Row(Row::V1(&row(index))));
        }
        let mut written = Vec::new();
        let digest = sheet.finish(&mut written).unwrap();
        let view = serde_json::json!({"soak_id": "s", "samples": [row(1), row(2)]});
        assert_eq!(
            String::from_utf8(written.clone()).unwrap(),
            String::from_utf8(render(&view).unwrap()).unwrap()
        );
        assert_eq!(digest, blake3::hash(&written).to_hex().to_string());
    }
}
