//! `unilab log stats`: what the event log costs and where it stands — the file's size on disk,
//! its events and their bytes by subject kind, the largest soaks, how fast it grows, and the
//! room left under the state root (the filesystem's free space, the user's quota where `quota`
//! tells it). It advises archiving only where the log matters: past the size at which `soak
//! run` warns (`UNILAB_LOG_WARN_SIZE`), or over a tenth of its room (the quota, or its
//! filesystem's free space and its own size together).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::Serialize;

use crate::diagnostic::Exit;
use crate::error::Error;
use crate::event::Subject;
use crate::log::LogReader;
use crate::output::Output;
use crate::paths::StatePaths;
use crate::text::{bytes, count};

/// How many of the largest soaks are named.
const LARGEST: usize = 5;
/// A log over its room divided by this (a tenth) is worth archiving.
const ROOM_SHARE: u64 = 10;
/// The window growth is measured over.
const WEEK_US: i64 = 7 * 86_400 * 1_000_000;

#[derive(Debug, Default, Serialize)]
struct KindTotals {
    kind: &'static str,
    events: u64,
    bytes: u64,
}

#[derive(Debug, Serialize)]
struct SoakTotals {
    soak_id: String,
    events: u64,
    bytes: u64,
}

#[derive(Debug, Serialize)]
struct Room {
    path: String,
    free_bytes: u64,
    total_bytes: u64,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub(crate) struct Quota {
    pub used_bytes: u64,
    pub limit_bytes: u64,
}

#[derive(Debug, Serialize)]
struct Stats {
    path: String,
    /// The file's length.
    file_bytes: Option<u64>,
    /// What it occupies on disk (redb grows its file ahead of its data).
    disk_bytes: Option<u64>,
    events: u64,
    /// The records' own bytes (body, hashes, framing), by subject kind.
    record_bytes: u64,
    by_kind: Vec<KindTotals>,
    largest_soaks: Vec<SoakTotals>,
    first_recorded_at: Option<f64>,
    last_recorded_at: Option<f64>,
    /// Record bytes a day over the last week of records (or their whole span, if shorter).
    growth_bytes_per_day: Option<f64>,
    filesystem: Option<Room>,
    quota: Option<Quota>,
    /// Why archiving soaks would matter now; `None` when the log is small beside its room.
    archive_advice: Option<String>,
}

pub(super) fn stats(paths: &StatePaths, out: &mut Output) -> Result<Exit, Error> {
    let log_path = paths.log_path();
    let Some(reader) = LogReader::open(&log_path, &paths.scope())? else {
        out.note(&format!("no event log at `{}`", log_path.display()));
        if out.json {
            out.json_line(&serde_json::json!({ "path": log_path, "events": 0 }))?;
        }
        return Ok(Exit::Success);
    };
    let snapshot = reader.snapshot()?;
    let mut kinds: BTreeMap<&'static str, KindTotals> = BTreeMap::new();
    let mut soaks: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut times: Vec<(i64, u64)> = Vec::new();
    snapshot.scan_sized(|record, size| {
        let size = size as u64;
        let envelope = record.envelope;
        let kind = match &envelope.subject {
            Subject::Host => "host",
            Subject::Daemon(_) => "daemon",
            Subject::Soak(id) => {
                let soak = soaks.entry(id.clone()).or_default();
                soak.0 += 1;
                soak.1 += size;
                "soak"
            }
        };
        let entry = kinds.entry(kind).or_insert_with(|| KindTotals {
            kind,
            ..KindTotals::default()
        });
        entry.events += 1;
        entry.bytes += size;
        times.push((envelope.recorded_at_us, size));
        Ok(())
    })?;
    let meta = std::fs::metadata(&log_path).ok();
    let mut largest: Vec<SoakTotals> = soaks
        .into_iter()
        .map(|(soak_id, (events, bytes))| SoakTotals {
            soak_id,
            events,
            bytes,
        })
        .collect();
    largest.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.soak_id.cmp(&b.soak_id)));
    largest.truncate(LARGEST);
    let root = paths.user_dir();
    let mut stats = Stats {
        path: log_path.display().to_string(),
        file_bytes: meta.as_ref().map(std::fs::Metadata::len),
        disk_bytes: meta.as_ref().map(|m| m.blocks() * 512),
        events: times.len() as u64,
        record_bytes: times.iter().map(|t| t.1).sum(),
        by_kind: kinds.into_values().collect(),
        largest_soaks: largest,
        first_recorded_at: times.first().map(|t| t.0 as f64 / 1e6),
        last_recorded_at: times.last().map(|t| t.0 as f64 / 1e6),
        growth_bytes_per_day: growth(&times),
        filesystem: room(&root),
        quota: quota(&root),
        archive_advice: None,
    };
    stats.archive_advice = archive_advice(&stats, warn_size(out));
    if out.json {
        out.json_line(&serde_json::to_value(&stats).unwrap_or_default())?;
    } else {
        show(&stats, out)?;
    }
    Ok(Exit::Success)
}

/// The size past which `soak run` warns of the log, `UNILAB_LOG_WARN_SIZE` (a value that is not a
/// size is said, and the default used).
fn warn_size(out: &Output) -> u64 {
    let name = crate::env::EnvVars::UNILAB_LOG_WARN_SIZE;
    std::env::var(name)
        .ok()
        .and_then(|text| {
            crate::size::parse_size(&text)
                .inspect_err(|e| out.warn(&format!("{name}: {e}; the default is used")))
                .ok()
        })
        .unwrap_or(crate::soak::retention::DEFAULT_WARN_SIZE)
}

/// Why archiving would make room that matters, or `None`: only a log with soaks in it, past
/// `warn_size` on disk, or taking over a tenth of the user's quota or of the room on its
/// filesystem (what is free and what it takes itself). A small log on a full disk is no
/// reason: archiving it would give back little.
fn archive_advice(stats: &Stats, warn_size: u64) -> Option<String> {
    let size = stats.disk_bytes?;
    if stats.largest_soaks.is_empty() {
        return None;
    }
    let over_a_share = |room: u64| size.saturating_mul(ROOM_SHARE) > room;
    let on_disk = bytes(size);
    if size > warn_size {
        return Some(format!(
            "the log takes {on_disk} on disk, over {} (UNILAB_LOG_WARN_SIZE)",
            bytes(warn_size)
        ));
    }
    if let Some(quota) = stats.quota.as_ref().filter(|q| over_a_share(q.limit_bytes)) {
        return Some(format!(
            "the log takes {on_disk} on disk, over a tenth of your quota ({})",
            bytes(quota.limit_bytes)
        ));
    }
    stats
        .filesystem
        .as_ref()
        .filter(|room| over_a_share(room.free_bytes.saturating_add(size)))
        .map(|room| {
            format!(
                "the log takes {on_disk} on disk, over a tenth of the room on its filesystem ({} free)",
                bytes(room.free_bytes)
            )
        })
}

/// Record bytes a day over the last week of records: `None` under a minute of records.
fn growth(times: &[(i64, u64)]) -> Option<f64> {
    let last = times.last()?.0;
    let since = last - WEEK_US;
    let window: Vec<&(i64, u64)> = times.iter().filter(|t| t.0 >= since).collect();
    let span_us = last - window.first()?.0;
    if span_us < 60_000_000 {
        return None;
    }
    let bytes: u64 = window.iter().map(|t| t.1).sum();
    Some(bytes as f64 * 86_400e6 / span_us as f64)
}

/// The filesystem under `dir` (or its nearest existing parent): free and total bytes.
fn room(dir: &Path) -> Option<Room> {
    let (path, free_bytes, total_bytes) = crate::soak::retention::filesystem(dir)?;
    Some(Room {
        path: path.display().to_string(),
        free_bytes,
        total_bytes,
    })
}

/// The user's block quota on the filesystem of `dir`, as `quota -w` reports it; `None` where no
/// `quota` answers or it sets none there.
fn quota(dir: &Path) -> Option<Quota> {
    let existing = dir.ancestors().find(|p| p.exists())?;
    let device = std::fs::metadata(existing).ok()?.dev();
    let tool = crate::tool::external("quota");
    let mut cmd = tool.command();
    cmd.args(["-w", "-v"]);
    let out = tool.run(cmd, b"").ok()?;
    parse_quota(&out.stdout, |filesystem| {
        std::fs::metadata(filesystem).is_ok_and(|m| m.rdev() == device || m.dev() == device)
    })
}

/// The line of `quota -w -v`'s report whose filesystem `ours` accepts: blocks used and the
/// hard limit (the soft one when no hard is set), in 1 KiB blocks; `None` without a limit.
pub(crate) fn parse_quota(report: &str, ours: impl Fn(&str) -> bool) -> Option<Quota> {
    report.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [filesystem, used, soft, hard, ..] = fields[..] else {
            return None;
        };
        if !filesystem.starts_with('/') || !ours(filesystem) {
            return None;
        }
        let number = |text: &str| text.trim_end_matches('*').parse::<u64>().ok();
        let (used, soft, hard) = (number(used)?, number(soft)?, number(hard)?);
        let limit = if hard > 0 { hard } else { soft };
        (limit > 0).then_some(Quota {
            used_bytes: used * 1024,
            limit_bytes: limit * 1024,
        })
    })
}

fn show(stats: &Stats, out: &mut Output) -> Result<(), Error> {
    out.line(&format!(
        "{}: {} on disk ({} file), {}, {} of records",
        stats.path,
        stats.disk_bytes.map_or("?".into(), bytes),
        stats.file_bytes.map_or("?".into(), bytes),
        count(stats.events, "event"),
        bytes(stats.record_bytes)
    ))?;
    for kind in &stats.by_kind {
        out.line(&format!(
            "  {:<7} {:>12}  {}",
            kind.kind,
            count(kind.events, "event"),
            bytes(kind.bytes)
        ))?;
    }
    if !stats.largest_soaks.is_empty() {
        out.line("largest soaks:")?;
        for soak in &stats.largest_soaks {
            out.line(&format!(
                "  {}  {}  {}",
                crate::text::foreign(&soak.soak_id),
                count(soak.events, "event"),
                bytes(soak.bytes)
            ))?;
        }
    }
    if let Some(rate) = stats.growth_bytes_per_day {
        out.line(&format!(
            "growth: {}/day over the last week of records",
            bytes(rate as u64)
        ))?;
    }
    if let Some(room) = &stats.filesystem {
        out.line(&format!(
            "filesystem of {}: {} free of {}",
            room.path,
            bytes(room.free_bytes),
            bytes(room.total_bytes)
        ))?;
    }
    if let Some(quota) = &stats.quota {
        out.line(&format!(
            "quota: {} used of {}",
            bytes(quota.used_bytes),
            bytes(quota.limit_bytes)
        ))?;
    }
    if let Some(why) = &stats.archive_advice {
        out.note(&format!(
            "{why}: to make room, {}; `unilab log archive --soak ID` archives one",
            crate::soak::retention::ARCHIVE_HINT
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::retention::DEFAULT_WARN_SIZE;

    #[test]
    fn the_quota_of_our_filesystem_is_read_in_kib_blocks() {
        let report = "Disk quotas for user me (uid 1000): \n\
     Filesystem  blocks   quota   limit   grace   files   quota   limit   grace\n\
      /dev/sda1  100     0       0               10      0       0\n\
      /dev/sdb1  4096*   2048    8192    6days   10      0       0\n";
        assert_eq!(
            parse_quota(report, |fs| fs == "/dev/sdb1"),
            Some(Quota {
                used_bytes: 4096 * 1024,
                limit_bytes: 8192 * 1024
            })
        );
        assert_eq!(
            parse_quota(report, |fs| fs == "/dev/sda1"),
            None,
            "no limit"
        );
        assert_eq!(parse_quota("garbage\n", |_| true), None);
    }

    /// A log of `disk` bytes with one soak, on a filesystem with `free` bytes free.
    fn stats_of(disk: u64, free: u64, quota: Option<u64>) -> Stats {
        Stats {
            path: "events.redb".into(),
            file_bytes: Some(disk),
            disk_bytes: Some(disk),
            events: 10,
            record_bytes: disk / 2,
            by_kind: Vec::new(),
            largest_soaks: vec![SoakTotals {
                soak_id: "20261201T100000-ab12".into(),
                events: 10,
                bytes: disk / 2,
            }],
            first_recorded_at: None,
            last_recorded_at: None,
            growth_bytes_per_day: None,
            filesystem: Some(Room {
                path: "/".into(),
                free_bytes: free,
                total_bytes: u64::MAX,
            }),
            quota: quota.map(|limit_bytes| Quota {
                used_bytes: disk,
                limit_bytes,
            }),
            archive_advice: None,
        }
    }

    #[test]
    fn archiving_is_advised_only_for_a_log_that_matters_beside_its_room() {
        let kib = 1024;
        let gib = 1 << 30;
        let warn = DEFAULT_WARN_SIZE;
        let advice = |stats: Stats| archive_advice(&stats, warn);
        assert_eq!(advice(stats_of(140 * kib, 100 * gib, None)), None);
        assert_eq!(
            advice(stats_of(140 * kib, 100 * gib, Some(100 * gib))),
            None
        );
        // A small log on a full disk: archiving it gives back little.
        assert_eq!(advice(stats_of(140 * kib, 10 * 1024 * kib, None)), None);
        let full = advice(stats_of(140 * kib, 1000 * kib, None)).unwrap();
        assert!(full.contains("room on its filesystem"), "{full}");
        let quota = advice(stats_of(140 * kib, 100 * gib, Some(1000 * kib))).unwrap();
        assert!(quota.contains("tenth of your quota"), "{quota}");
        let big = advice(stats_of(3 * gib, 10_000 * gib, None)).unwrap();
        assert!(big.contains("UNILAB_LOG_WARN_SIZE"), "{big}");
        let mut no_soak = stats_of(3 * gib, 1000 * kib, None);
        no_soak.largest_soaks.clear();
        assert_eq!(advice(no_soak), None, "nothing to archive");
    }

    #[test]
    fn growth_is_measured_over_the_last_week() {
        let day = 86_400_000_000_i64;
        // 1 KB a day for 20 days, then 10 KB a day for the last 7.
        let mut times: Vec<(i64, u64)> = (0..20).map(|d| (d * day, 1000)).collect();
        times.extend((20..=27).map(|d| (d * day, 10_000)));
        let rate = growth(&times).unwrap();
        assert!((rate - 80_000.0 / 7.0).abs() < 1.0, "{rate}");
        assert_eq!(growth(&[(0, 5), (1_000_000, 5)]), None, "under a minute");
    }
}
