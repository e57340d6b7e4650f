//! `unilab log verify`: walk the chain, rebuild the projections, check the archives.

use crate::diagnostic::Exit;
use crate::error::Error;
use crate::log::chain::to_hex;
use crate::log::{LogError, LogReader};
use crate::output::Output;
use crate::paths::StatePaths;

pub(super) fn verify(paths: &StatePaths, out: &mut Output) -> Result<Exit, Error> {
    let log_path = paths.log_path();
    // Whose log it is, verify's report says below.
    let result =
        LogReader::open_keeping(&log_path, &paths.scope(), crate::read::VIEWS).and_then(|reader| {
            match reader {
                Some(reader) => reader.snapshot()?.verify(crate::read::VIEWS).map(Some),
                None => Ok(None),
            }
        });
    let report = match result {
        Ok(Some(report)) => report,
        Ok(None) => {
            if out.json {
                out.json_line(&serde_json::json!({
                    "ok": true,
                    "path": log_path,
                    "events": 0,
                }))?;
            }
            out.note(&format!(
                "no event log at `{}`: nothing to verify",
                log_path.display()
            ));
            return Ok(Exit::Success);
        }
        Err(e) => {
            if out.json {
                let first_bad_seq = match &e {
                    LogError::Chain { chain_break, .. } => Some(chain_break.seq),
                    _ => None,
                };
                out.json_line(&serde_json::json!({
                    "ok": false,
                    "path": log_path,
                    "error": e.to_string(),
                    "first_bad_seq": first_bad_seq,
                }))?;
            }
            return Err(e.into());
        }
    };
    if let Some(scope) = &report.scope
        && *scope != paths.scope()
    {
        out.warn(&format!(
            "this log was recorded for {scope}, not for {}",
            paths.scope()
        ));
    }
    if out.json {
        let mut object = serde_json::json!({
            "ok": true,
            "path": log_path,
            "events": report.events,
            "head": to_hex(&report.head),
            "schema_version": report.schema_version,
        });
        for (table, rows) in &report.views {
            object[table.as_str()] = (*rows).into();
        }
        if !report.archives.is_empty() {
            object["archives"] = report
                .archives
                .iter()
                .map(|a| {
                    serde_json::json!({
                        "soak_id": a.soak_id,
                        "file": a.path,
                        "records": a.records,
                        "checked": a.present,
                    })
                })
                .collect();
        }
        out.json_line(&object)?;
    } else {
        let views: Vec<String> = report
            .views
            .iter()
            .map(|(table, rows)| match table.strip_suffix('s') {
                // The views are named in the plural: `daemons`, `soaks`.
                Some(one) if *rows == 1 => format!("1 {one}"),
                _ => format!("{rows} {table}"),
            })
            .collect();
        out.line(&format!(
            "ok: {}, chain head {}, schema version {}; projections match ({})",
            crate::text::count(report.events, "event"),
            to_hex(&report.head),
            report.schema_version,
            views.join(", ")
        ))?;
        archives_line(&report, out)?;
    }
    warn_missing(&report, out);
    Ok(Exit::Success)
}

/// How many archives were checked, and their records.
fn archives_line(report: &crate::log::VerifyReport, out: &mut Output) -> Result<(), Error> {
    if report.archives.is_empty() {
        return Ok(());
    }
    let checked = report.archives.iter().filter(|a| a.present);
    let records: u64 = checked.clone().map(|a| a.records).sum();
    out.line(&format!(
        "archives: {} checked ({}) against the log",
        crate::text::count(checked.count() as u64, "archive"),
        crate::text::count(records, "record")
    ))
}

/// A warning for each archive not there to check.
fn warn_missing(report: &crate::log::VerifyReport, out: &Output) {
    for missing in report.archives.iter().filter(|a| !a.present) {
        out.warn(&format!(
            "the archive `{}` of soak {} is missing: its {} cannot be checked (nor read)",
            missing.path.display(),
            missing.soak_id,
            crate::text::count(missing.records, "record")
        ));
    }
}
