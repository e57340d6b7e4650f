//! `unilab log archive`: finished soaks' records moved out of the live log into an archive file
//! each, then the log compacted — all under the log alone, or nothing.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::cli::log::ArchiveArgs;
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::event::soak::OutcomeStatus;
use crate::log::{ArchiveDone, EventLog, LogError, Snapshot};
use crate::output::Output;
use crate::paths::StatePaths;
use crate::proc_read::ProcDir;
use crate::process::SystemProc;
use crate::projection::{SoakState, SoakSummary, Soaks};
use crate::soak::archive::{Kept, kept};
use crate::soak::error::SoakError;
use crate::text::{bytes, count};
use crate::time::{Clock, SystemClock};

/// The soaks a request selects, and those it names that are archived already (each with its
/// file).
struct Selected {
    soaks: Vec<SoakSummary>,
    already: Vec<(String, String)>,
}

pub(super) fn archive(
    paths: &StatePaths,
    args: &ArchiveArgs,
    out: &mut Output,
) -> Result<Exit, Error> {
    let log_path = paths.log_path();
    let selected = match crate::commands::read_own_log(paths, out)? {
        Some(reader) if reader.scope() != &paths.scope() => {
            return Err(LogError::ForeignScope {
                path: log_path,
                found: reader.scope().clone(),
                expected: paths.scope(),
            }
            .into());
        }
        Some(reader) => {
            let snapshot = crate::soak::abandon::settle(
                paths,
                &reader,
                &SystemProc::default(),
                crate::read::VIEWS,
            )?;
            select(&snapshot, args, SystemClock.now_us())?
        }
        None if args.soak.is_some() => {
            return Err(SoakError::NoSuchSoak(args.soak.clone().unwrap_or_default()).into());
        }
        None => Selected {
            soaks: Vec::new(),
            already: Vec::new(),
        },
    };
    // A soak named is named back; those a date selects are counted, in one line, however many
    // earlier runs archived (run from a loop or cron, it would be a line each, every run).
    let already = match (&args.soak, selected.already.len()) {
        (Some(_), _) => {
            for (soak_id, file) in &selected.already {
                out.note(&format!("soak {soak_id} is archived already, in `{file}`"));
            }
            None
        }
        (None, 0) => None,
        (None, n) => Some(format!(
            "{} that finished before then {} archived already",
            count(n as u64, "soak"),
            if n == 1 { "was" } else { "were" }
        )),
    };
    if selected.soaks.is_empty() {
        match already {
            Some(already) => out.note(&format!("no soak to archive: {already}")),
            None if selected.already.is_empty() => out.note("no finished soak to archive"),
            None => {}
        }
        return report(out, &[], None, None);
    }
    let before = disk_bytes(&log_path);
    let log = EventLog::open_alone(&log_path, paths.scope(), crate::read::VIEWS)
        .map_err(|e| name_holders(e, &log_path))?;
    let ids: Vec<String> = selected.soaks.into_iter().map(|s| s.soak_id).collect();
    let done = crate::soak::archive::archive(&log, &ids)?;
    // The archives are in and the log says so; what is left is giving the space back.
    log.compact()?;
    drop(log);
    if let Some(already) = already {
        out.note(&already);
    }
    report(out, &done, before, disk_bytes(&log_path))
}

/// The soaks `args` selects in `snapshot`: the one `--soak` names (refused while it runs), or
/// every soak finished before `--finished-before`, oldest first; those archived already apart.
fn select(snapshot: &Snapshot, args: &ArchiveArgs, now_us: i64) -> Result<Selected, Error> {
    let candidates = match (&args.soak, args.finished_before) {
        (Some(id), _) => {
            let soak = crate::read::naming::named(snapshot, id)?
                .ok_or_else(|| SoakError::NoSuchSoak(id.clone()))?;
            if soak.state == SoakState::Running {
                return Err(SoakError::NotFinished(soak.soak_id).into());
            }
            vec![soak]
        }
        (None, Some(before)) => {
            let cutoff = before.at_us(now_us);
            let mut soaks = Vec::new();
            for row in Soaks::rows(snapshot)? {
                // Judged by the end every view shows: an abandoned soak ended at its last sample
                // (or, with none, within a sample of its start), not when it was found.
                let shown = crate::soak::ended::as_shown(snapshot, row.clone())?;
                let end = shown.ended_at_us.or(match shown.state {
                    SoakState::Finished(OutcomeStatus::Abandoned) => Some(shown.started_at_us),
                    _ => None,
                });
                if shown.state != SoakState::Running && end.is_some_and(|end| end < cutoff) {
                    soaks.push(row);
                }
            }
            soaks.sort_by_key(|s| s.first_seq);
            soaks
        }
        (None, None) => Vec::new(),
    };
    let mut selected = Selected {
        soaks: Vec::new(),
        already: Vec::new(),
    };
    for soak in candidates {
        match kept(snapshot, &soak)? {
            Kept::Live { .. } => selected.soaks.push(soak),
            Kept::Archived { file, .. } => selected.already.push((soak.soak_id, file)),
        }
    }
    Ok(selected)
}

/// What the log's file takes on disk.
fn disk_bytes(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.blocks() * 512)
}

/// Says what was archived, and what the log takes now.
fn report(
    out: &mut Output,
    done: &[ArchiveDone],
    before: Option<u64>,
    after: Option<u64>,
) -> Result<Exit, Error> {
    if out.json {
        let archived: Vec<serde_json::Value> = done
            .iter()
            .map(|d| {
                serde_json::json!({
                    "soak_id": d.soak_id,
                    "file": d.path,
                    "seq": d.seq,
                    "records": d.records,
                    "bytes": d.bytes,
                    "file_bytes": d.file_bytes,
                })
            })
            .collect();
        out.json_line(&serde_json::json!({
            "archived": archived,
            "log_disk_bytes_before": before,
            "log_disk_bytes_after": after,
        }))?;
        return Ok(Exit::Success);
    }
    for d in done {
        out.line(&format!(
            "archived soak {}: {} ({}) to `{}` ({})",
            d.soak_id,
            count(d.records, "record"),
            bytes(d.bytes),
            d.path.display(),
            bytes(d.file_bytes)
        ))?;
    }
    if let (Some(before), Some(after)) = (before, after) {
        out.line(&format!(
            "the event log takes {} on disk, {} before",
            bytes(after),
            bytes(before)
        ))?;
    }
    Ok(Exit::Success)
}

/// A refusal because another process has the log open, naming the processes that do.
fn name_holders(error: LogError, log: &Path) -> LogError {
    let LogError::InUse { path, .. } = error else {
        return error;
    };
    let holders = holders_of(log);
    let holders = if holders.is_empty() {
        String::new()
    } else {
        format!(": {}", holders.join(", "))
    };
    LogError::InUse { path, holders }
}

/// Every other process that has the file at `path` open (as far as `/proc` lets this user see):
/// `pid 4242 (`unilab soak run …`)`. Open files are told by where their links point, never by
/// following them (a file on a hung mount would hang us).
fn holders_of(path: &Path) -> Vec<String> {
    let Ok(file) = std::fs::canonicalize(path) else {
        return Vec::new();
    };
    let me = std::process::id();
    let proc_root = Path::new("/proc");
    crate::process::all_processes(proc_root)
        .into_iter()
        .filter(|stat| stat.pid != me && !stat.has_exited())
        .filter(|stat| {
            let fds = proc_root.join(stat.pid.to_string()).join("fd");
            std::fs::read_dir(fds).is_ok_and(|fds| {
                fds.flatten()
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == file))
            })
        })
        .map(|stat| {
            // A holder whose map is locked is named by its `comm`.
            let args = ProcDir::new(proc_root, stat.pid, stat.start_ticks)
                .cmdline()
                .unwrap_or_default();
            let command = if args.is_empty() {
                stat.comm.clone()
            } else {
                crate::output::shell_command(
                    &crate::redact::Secrets::default().mask_command_line(&args),
                )
            };
            format!("pid {} (`{}`)", stat.pid, crate::text::foreign(&command))
        })
        .collect()
}
