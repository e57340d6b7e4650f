//! A soak's samples as CSV (RFC 4180, through the `csv` crate), for pandas and spreadsheets:
//! one row per sample and GPU — a sample with no GPU reading is one row with the GPU columns
//! empty. Unknown values are empty cells, never zeros. Built from the same view as the JSON
//! artifact, so both say the same; the JSON stays the canonical record.

use serde_json::Value;

/// The columns, in order.
pub(crate) const HEADER: [&str; 23] = [
    "soak_id",
    "index",
    "elapsed_seconds",
    "after_exit",
    "processes",
    "threads",
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
    "errors",
];

/// The CSV of the artifact `view` (either schema's).
pub(crate) fn render(view: &Value) -> Result<Vec<u8>, csv::Error> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer.write_record(HEADER)?;
    let soak_id = cell(&view["soak_id"]);
    for sample in view["samples"].as_array().into_iter().flatten() {
        // Schema 1 named the host's GPU figures without `host_`, and had no per-GPU list.
        let host_memory = first(sample, &["host_gpu_memory_used_mib", "gpu_memory_used_mib"]);
        let errors = sample["errors"]
            .as_array()
            .map(|e| e.iter().map(cell).collect::<Vec<_>>().join("; "))
            .unwrap_or_default();
        let common = [
            soak_id.clone(),
            cell(&sample["index"]),
            cell(&sample["elapsed_seconds"]),
            cell(&sample["after_exit"]),
            cell(&sample["processes"]),
            cell(&sample["threads"]),
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
            let row = common.iter().cloned().chain([
                String::new(),
                String::new(),
                utilization,
                String::new(),
                String::new(),
                String::new(),
                errors,
            ]);
            writer.write_record(row)?;
            continue;
        }
        for gpu in gpus {
            let row = common.iter().cloned().chain([
                cell(&gpu["index"]),
                cell(&gpu["uuid"]),
                cell(&gpu["utilization_percent"]),
                cell(&gpu["memory_used_mib"]),
                cell(&gpu["memory_total_mib"]),
                cell(&gpu["tree_memory_mib"]),
                errors.clone(),
            ]);
            writer.write_record(row)?;
        }
    }
    writer
        .into_inner()
        .map_err(|e| csv::Error::from(e.into_error()))
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
        assert_eq!(&rows[0][17], "");
        assert_eq!(&rows[0][22], "nvidia-smi did not answer, within 10 s");
        assert_eq!(&rows[1][17], "GPU-a");
        assert_eq!(&rows[1][3], "true");
        assert_eq!(&rows[1][21], "");
        assert_eq!(&rows[2][18], "");
        assert_eq!(&rows[2][21], "0");
    }
}
