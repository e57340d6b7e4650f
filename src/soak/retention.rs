//! Warnings at the start of a soak about the room its record needs: a log over
//! `UNILAB_LOG_WARN_SIZE` (default 2 GiB), or a filesystem under the state root with less free
//! space than a week of this soak could take at its interval. A soak that runs out of disk
//! holds its verdict (see the log's full-disk handling); these say so before it starts.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use crate::log::Snapshot;
use crate::projection::Soaks;
use crate::text::{bytes, duration};

/// How to make room, said by every warning here and by `log stats`.
pub(crate) const ARCHIVE_HINT: &str = "`unilab log archive --finished-before 30d` moves the records of soaks that ended over 30 days ago to archive files and gives their space back";

/// The log size past which a soak warns, unless `UNILAB_LOG_WARN_SIZE` says otherwise.
pub(crate) const DEFAULT_WARN_SIZE: u64 = 2 << 30;
/// What a sample is taken to cost when the log has none to measure: a busy tree of about 60
/// processes, its samples packed (measured by `cargo bench --bench log_size`: 15 bytes a
/// process on disk, and about 200 for the sample's own fields), with room to spare.
const DEFAULT_SAMPLE_BYTES: u64 = 1280;
/// The length of soak the free space is measured against.
const HORIZON: Duration = Duration::from_secs(7 * 86_400);

/// The warnings for a soak sampled every `interval` whose log is `log_path`, read through
/// `snapshot`; `warn_size` from `UNILAB_LOG_WARN_SIZE` (`None`: the default), `free` the free
/// bytes under the state root (`None`: unknown).
pub(crate) fn warnings(
    log_path: &Path,
    snapshot: &Snapshot,
    interval: Duration,
    warn_size: Option<u64>,
    free: Option<u64>,
) -> Vec<String> {
    let mut said = Vec::new();
    let size = std::fs::metadata(log_path).map_or(0, |m| m.blocks() * 512);
    let limit = warn_size.unwrap_or(DEFAULT_WARN_SIZE);
    if size > limit {
        said.push(format!(
            "the event log `{}` takes {} on disk, over {} (UNILAB_LOG_WARN_SIZE): \
see `unilab log stats` for what fills it; {ARCHIVE_HINT}",
            log_path.display(),
            bytes(size),
            bytes(limit)
        ));
    }
    // The samples the log holds: an archived soak's are counted in its row, but gone.
    let samples: u64 = Soaks::rows(snapshot)
        .map(|rows| {
            rows.iter()
                .filter(|s| {
                    !matches!(
                        crate::soak::archive::kept(snapshot, s),
                        Ok(crate::soak::archive::Kept::Archived { .. })
                    )
                })
                .map(|s| s.samples)
                .sum()
        })
        .unwrap_or(0);
    let (per_sample, from) = if samples >= 100 && size > 0 {
        (size / samples, "this log's samples so far")
    } else {
        (DEFAULT_SAMPLE_BYTES, "a busy 60-process tree")
    };
    let week_samples = HORIZON.as_secs_f64() / interval.as_secs_f64().max(1e-3);
    let need = (week_samples * per_sample as f64) as u64;
    if let Some(free) = free.filter(|free| *free < need) {
        said.push(format!(
            "the filesystem of the state root has {} free; a week of this soak sampled every {} \
needs about {} (~{} a sample, as {from}): a full disk holds the soak's record, see `unilab log stats`; {ARCHIVE_HINT}",
            bytes(free),
            duration(interval.as_secs_f64()),
            bytes(need),
            bytes(per_sample)
        ));
    }
    said
}

/// The filesystem of `dir` (or of its nearest existing parent): that directory, the bytes free
/// to this user and the filesystem's size.
pub(crate) fn filesystem(dir: &Path) -> Option<(std::path::PathBuf, u64, u64)> {
    let existing = dir.ancestors().find(|p| p.exists())?;
    let fs = nix::sys::statvfs::statvfs(existing).ok()?;
    let block = fs.fragment_size() as u64;
    Some((
        existing.to_owned(),
        fs.blocks_available() as u64 * block,
        fs.blocks() as u64 * block,
    ))
}
