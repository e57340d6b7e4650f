//! `unilab mps doctor`: the checklist of everything `mps start` depends on, one line a check.

use std::path::PathBuf;

use super::{read_log, to_json};
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::mps::Mps;
use crate::mps::check::CheckStatus;
use crate::mps::doctor;
use crate::mps::framework::Source;
use crate::output::Output;

/// Runs the checks; the framework's view is read from the probe run by `python`, or from the
/// file `framework_view`, when either is given.
pub(super) fn doctor(
    mps: &Mps,
    selector: Option<&str>,
    python: Option<PathBuf>,
    framework_view: Option<PathBuf>,
    out: &mut Output,
) -> Result<Exit, Error> {
    let framework = python
        .map(Source::Python)
        .or(framework_view.map(Source::File));
    let snapshot = read_log(mps.paths, out)?;
    let report = doctor::doctor(mps, snapshot.as_ref(), selector, framework.as_ref())?;
    crate::commands::checked_show(snapshot.as_ref(), || show_report(&report, out))
}

fn show_report(report: &doctor::Report, out: &mut Output) -> Result<Exit, Error> {
    if out.json {
        out.json_line(&to_json(&report)?)?;
    } else {
        for check in &report.checks {
            let mark = match check.status {
                CheckStatus::Ok => "ok  ",
                CheckStatus::Warn => "warn",
                CheckStatus::Fail => "FAIL",
                CheckStatus::Skip => "skip",
            };
            out.line(&format!(
                "[{}] {:<16} {}",
                out.paint.status(mark),
                check.name,
                check.detail
            ))?;
            if let Some(hint) = &check.hint {
                out.line(&format!("       {:<16} hint: {hint}", ""))?;
            }
        }
    }
    Ok(if report.ok {
        Exit::Success
    } else {
        Exit::Refused
    })
}
