//! Everything unilab asks `nvidia-smi`: GPU discovery (`mps doctor`, `status`, `start`), usage
//! (the soak sampler) and versions (the runtime snapshot), through one query runner with the
//! tool's timeout, one CSV splitter and one error type.
//!
//! The parser is tolerant where nvidia-smi is loose (`[N/A]` and friends, Xid or ECC event lines
//! between rows) and strict where it matters: a row counts only if it has every field, an integer
//! index and a `GPU-` UUID. Failures map to the messages nvidia-smi prints for them.

use crate::diagnostic::Hint;
use crate::tool::{Tool, ToolError};

use super::GpuInfo;

pub(crate) const QUERY_GPU: &str = "--query-gpu=index,uuid,name";
pub(crate) const FORMAT: &str = "--format=csv,noheader,nounits";

#[derive(Debug, thiserror::Error)]
pub enum SmiError {
    /// `program` is what was run: `nvidia-smi` from `PATH`, or what `UNILAB_NVIDIA_SMI` names.
    #[error("`{program}` was not found")]
    Missing { program: String },
    #[error("`nvidia-smi` did not answer within {0} s")]
    Hung(f64),
    #[error("cannot run `nvidia-smi`")]
    Spawn(#[source] std::io::Error),
    #[error("nvidia-smi cannot communicate with the NVIDIA driver")]
    NoDriver,
    #[error("nvidia-smi found no GPUs")]
    NoDevices,
    #[error("nvidia-smi reports a driver/library version mismatch")]
    VersionMismatch,
    #[error("nvidia-smi failed with exit code {code}: {message}")]
    Failed { code: i32, message: String },
    #[error("nvidia-smi printed no GPU list that unilab can read: {excerpt:?}")]
    Unreadable { excerpt: String },
    #[error("nvidia-smi wrote more than {} MiB; it was stopped and its answer refused", crate::tool::MAX_OUTPUT >> 20)]
    Flooded,
}

impl Hint for SmiError {
    fn hint(&self) -> Option<String> {
        Some(match self {
            SmiError::Missing { program } if program != "nvidia-smi" => {
                return Some(format!(
                    "`UNILAB_NVIDIA_SMI` names `{program}`: point it at nvidia-smi, or unset it to search `PATH`"
                ));
            }
            SmiError::Missing { .. } => {
                "install the NVIDIA driver utilities, or name the binary with `UNILAB_NVIDIA_SMI`"
            }
            SmiError::Hung(_) => "a GPU may be wedged; check `dmesg` for Xid errors",
            SmiError::Flooded => "check the driver's state with `nvidia-smi` by hand, and `dmesg`",
            SmiError::NoDriver => "load the NVIDIA kernel module, or run on a host with a GPU",
            SmiError::NoDevices => "run on a host with an NVIDIA GPU",
            SmiError::VersionMismatch => {
                "the kernel module and the user-space driver differ; reboot or reload the module"
            }
            SmiError::Spawn(_)
            | SmiError::Failed { .. }
            | SmiError::Unreadable { .. } => {
                return None;
            }
        }
        .into())
    }
}

/// Runs one nvidia-smi query under the tool's timeout; its standard output, or what failed.
fn query(smi: &Tool, args: &[&str]) -> Result<String, SmiError> {
    let mut cmd = smi.command();
    cmd.args(args);
    let output = smi.run(cmd, b"").map_err(|e| match e {
        ToolError::NotFound { program } => SmiError::Missing {
            program: program.to_string_lossy().into_owned(),
        },
        ToolError::Timeout { timeout, .. } => SmiError::Hung(timeout.as_secs_f64()),
        ToolError::Spawn { source, .. } => SmiError::Spawn(source),
        ToolError::Flooded { .. } => SmiError::Flooded,
    })?;
    if !output.status.success() {
        return Err(classify_failure(
            output.code(),
            &format!("{}{}", output.stdout, output.stderr),
        ));
    }
    Ok(output.stdout)
}

/// The rows of a `--format=csv,noheader,nounits` answer that have exactly `fields` fields:
/// nvidia-smi separates them by `", "`, and prints other lines (Xid or ECC events) between rows.
fn csv_rows(text: &str, fields: usize) -> impl Iterator<Item = Vec<&str>> {
    text.lines().filter_map(move |line| {
        let row: Vec<&str> = line.split(", ").map(str::trim).collect();
        (row.len() == fields).then_some(row)
    })
}

fn is_uuid(field: &str) -> bool {
    field.starts_with("GPU-") && field.len() >= 8 && !field.contains(char::is_whitespace)
}

/// Lists the GPUs of this host.
pub(crate) fn discover(smi: &Tool) -> Result<Vec<GpuInfo>, SmiError> {
    let text = query(smi, &[QUERY_GPU, FORMAT])?;
    let gpus = parse_gpu_csv(&text);
    if gpus.is_empty() {
        if text.contains("No devices were found") {
            return Err(SmiError::NoDevices);
        }
        return Err(SmiError::Unreadable {
            excerpt: text.chars().take(120).collect(),
        });
    }
    Ok(gpus)
}

/// Each GPU's memory in use now, by UUID (`None` where nvidia-smi does not say).
pub(crate) fn memory_used(smi: &Tool) -> Result<Vec<(String, Option<u64>)>, SmiError> {
    let text = query(smi, &["--query-gpu=uuid,memory.used", FORMAT])?;
    Ok(parse_memory_csv(&text))
}

/// Parses the rows of `--query-gpu=uuid,memory.used`, skipping every line that is not one.
fn parse_memory_csv(text: &str) -> Vec<(String, Option<u64>)> {
    csv_rows(text, 2)
        .filter_map(|row| {
            let [uuid, used] = row.as_slice() else {
                return None;
            };
            is_uuid(uuid).then(|| ((*uuid).to_owned(), parse_value(used)))
        })
        .collect()
}

fn classify_failure(code: i32, text: &str) -> SmiError {
    if code == 9 || text.contains("couldn't communicate with the NVIDIA driver") {
        SmiError::NoDriver
    } else if code == 6 || text.contains("No devices were found") {
        SmiError::NoDevices
    } else if code == 18 || text.contains("version mismatch") {
        SmiError::VersionMismatch
    } else {
        SmiError::Failed {
            code,
            message: text.trim().lines().next().unwrap_or("").to_owned(),
        }
    }
}

/// Parses the rows of `--query-gpu=index,uuid,name`, skipping every line that is not one.
pub(crate) fn parse_gpu_csv(text: &str) -> Vec<GpuInfo> {
    csv_rows(text, 3)
        .filter_map(|row| {
            let [index, uuid, name] = row.as_slice() else {
                return None;
            };
            is_uuid(uuid).then_some(())?;
            Some(GpuInfo {
                index: index.parse().ok()?,
                uuid: (*uuid).to_owned(),
                name: (*name).to_owned(),
            })
        })
        .collect()
}

/// A value of a `nounits` query: `None` for `[N/A]`, `[Not Supported]`, `[Unknown Error]` or
/// anything else that is not a number.
pub(crate) fn parse_value<T: std::str::FromStr>(field: &str) -> Option<T> {
    field.trim().parse().ok()
}

/// The driver version (from a query) and the CUDA version (from the banner of a plain
/// `nvidia-smi`), each `None` when nvidia-smi does not say.
pub(crate) fn versions(smi: &Tool) -> (Option<String>, Option<String>) {
    let driver = query(smi, &["--query-gpu=driver_version", FORMAT])
        .ok()
        .and_then(|text| text.lines().next().map(|l| l.trim().to_owned()));
    let cuda = query(smi, &[]).ok().and_then(|banner| {
        banner
            .split("CUDA Version:")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next().map(str::to_owned))
    });
    (driver, cuda)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_read_and_other_lines_skipped() {
        let text = "Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus.\n\
                    0, GPU-aaaa1111-2222, NVIDIA H200\n\
                    garbage\n\
                    1, GPU-bbbb3333-4444, NVIDIA H200, extra\n\
                    x, GPU-cccc5555-6666, NVIDIA H200\n\
                    2, GPU-dddd7777-8888, NVIDIA H100 80GB HBM3\n";
        let gpus = parse_gpu_csv(text);
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].uuid, "GPU-aaaa1111-2222");
        assert_eq!(gpus[1].index, 2);
        assert_eq!(gpus[1].name, "NVIDIA H100 80GB HBM3");
    }

    #[test]
    fn memory_rows_keep_an_unknown_figure_unknown() {
        let text = "GPU-aaaa1111-2222, 512\nXid 79\nGPU-bbbb3333-4444, [N/A]\n";
        assert_eq!(
            parse_memory_csv(text),
            [
                ("GPU-aaaa1111-2222".to_owned(), Some(512)),
                ("GPU-bbbb3333-4444".to_owned(), None)
            ]
        );
    }

    #[test]
    fn unavailable_values_are_none() {
        assert_eq!(parse_value::<u64>("[N/A]"), None);
        assert_eq!(parse_value::<u64>("[Not Supported]"), None);
        assert_eq!(parse_value::<u64>(" 1024"), Some(1024));
    }
}
