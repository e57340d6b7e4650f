//! `unilab soak report`: the self-contained HTML report.

use super::{refuse_to_replace, resolve};
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::output::Output;
use crate::paths::StatePaths;
use crate::soak::artifact;
use crate::soak::error::{OutputFile, SoakError};
use std::path::Path;

pub(super) fn report(
    paths: &StatePaths,
    id: &str,
    output: Option<&Path>,
    force: bool,
    out: &mut Output,
) -> Result<Exit, Error> {
    let (snapshot, summary) = resolve(paths, id, out)?;
    if let Some(path) = output {
        refuse_to_replace(path, OutputFile::Report, force)?;
    }
    let html = crate::view::report::of_soak(&snapshot, &summary.soak_id)?;
    write_report(output, &html, out)
}

/// A report's page written to `output` atomically (said on the terminal), else to standard
/// output: `soak report`'s and `job report`'s.
pub(crate) fn write_report(
    output: Option<&Path>,
    html: &str,
    out: &mut Output,
) -> Result<Exit, Error> {
    match output {
        Some(path) => {
            artifact::write_atomically(path, html.as_bytes())
                .map_err(SoakError::output(OutputFile::Report, path))?;
            out.note(&format!("wrote the report `{}`", path.display()));
        }
        None => out.raw(html.as_bytes())?,
    }
    Ok(Exit::Success)
}
